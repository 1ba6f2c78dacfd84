//! A peer's address, kept compactly (18 bytes): what the engine knows of the other end of
//! a connection, from accept or a PROXY header; the scope's `client`, the per-address keys.
const std = @import("std");
const linux = std.os.linux;

/// The peer's address, kept compactly: it becomes the scope's `client`.
pub const Peer = struct {
    family: u16 = 0,
    port: u16 = 0,
    addr: [16]u8 = undefined,

    pub fn fromStorage(st: *const linux.sockaddr.storage) Peer {
        var p = Peer{ .family = st.family };
        switch (st.family) {
            linux.AF.INET => {
                const in: *const linux.sockaddr.in = @ptrCast(@alignCast(st));
                p.port = std.mem.bigToNative(u16, in.port);
                @memcpy(p.addr[0..4], std.mem.asBytes(&in.addr));
            },
            linux.AF.INET6 => {
                const in6: *const linux.sockaddr.in6 = @ptrCast(@alignCast(st));
                p.port = std.mem.bigToNative(u16, in6.port);
                p.addr = in6.addr;
            },
            else => {},
        }
        return p;
    }

    /// The same host and port (only the bytes of the family's address are compared).
    pub fn eql(a: *const Peer, b: *const Peer) bool {
        return a.port == b.port and a.sameHost(b);
    }

    pub fn sameHost(a: *const Peer, b: *const Peer) bool {
        if (a.family != b.family) return false;
        const n: usize = switch (a.family) {
            linux.AF.INET => 4,
            linux.AF.INET6 => 16,
            else => 0,
        };
        return std.mem.eql(u8, a.addr[0..n], b.addr[0..n]);
    }

    /// Writes the textual address (no brackets, no port) into buf.
    pub fn format(self: *const Peer, buf: []u8) []const u8 {
        switch (self.family) {
            linux.AF.INET => return std.fmt.bufPrint(buf, "{d}.{d}.{d}.{d}", .{ self.addr[0], self.addr[1], self.addr[2], self.addr[3] }) catch "",
            linux.AF.INET6 => {
                const addr = std.net.Ip6Address.init(self.addr, 0, 0, 0);
                const s = std.fmt.bufPrint(buf, "{f}", .{addr}) catch return "";
                // "[addr]:0" -> "addr"
                const end = std.mem.lastIndexOfScalar(u8, s, ']') orelse return s;
                return s[1..end];
            },
            else => return "",
        }
    }
};
