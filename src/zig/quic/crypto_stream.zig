//! The CRYPTO stream of one encryption level (RFC 9000 19.6, RFC 9001 4): the client's
//! bytes reassembled in order for the TLS shim (out-of-order data reaching past
//! `recv_window_bytes` is CRYPTO_BUFFER_EXCEEDED), and ours kept until acknowledged, sent
//! again when lost or when a PTO fires. Freed with the level's keys.
const std = @import("std");
const Allocator = std.mem.Allocator;
const reassembly = @import("reassembly.zig");
const streams = @import("streams.zig");

pub const recv_window_bytes: usize = 64 * 1024;

pub const Error = error{ CryptoBufferExceeded, TooFragmented, OutOfMemory };

pub const CryptoStream = struct {
    recv: reassembly.Reassembly = .{},
    send: streams.SendSide = .{},

    pub fn create(allocator: Allocator) Allocator.Error!*CryptoStream {
        const cs = try allocator.create(CryptoStream);
        cs.* = .{};
        return cs;
    }

    pub fn destroy(cs: *CryptoStream, allocator: Allocator) void {
        cs.recv.deinit(allocator);
        cs.send.deinit(allocator);
        allocator.destroy(cs);
    }

    /// A CRYPTO frame; `readable` then holds what TLS may take.
    pub fn onFrame(cs: *CryptoStream, allocator: Allocator, offset: u64, data: []const u8) Error!void {
        cs.recv.insert(allocator, offset, data, recv_window_bytes) catch |e| return switch (e) {
            error.OverWindow => error.CryptoBufferExceeded,
            error.TooFragmented => error.TooFragmented,
            error.OutOfMemory => error.OutOfMemory,
        };
    }

    pub fn readable(cs: *const CryptoStream) []const u8 {
        return cs.recv.readable();
    }

    pub fn consume(cs: *CryptoStream, allocator: Allocator, n: usize) void {
        cs.recv.consume(allocator, n);
    }

    /// Our handshake bytes to send at this level; returns how many fit in the buffer.
    pub fn queue(cs: *CryptoStream, allocator: Allocator, bytes: []const u8) Allocator.Error!usize {
        return cs.send.write(allocator, bytes, std.math.maxInt(usize));
    }

    /// A PTO: everything sent and not acknowledged goes again.
    pub fn resendUnacked(cs: *CryptoStream, allocator: Allocator) void {
        const s = &cs.send;
        if (s.sent_offset > s.acked_offset) s.onLost(allocator, s.acked_offset, @intCast(s.sent_offset - s.acked_offset), false);
    }

    pub fn hasData(cs: *const CryptoStream) bool {
        return cs.send.next(1) != null;
    }
};

test "crypto stream: out of order within the window, CRYPTO_BUFFER_EXCEEDED past it" {
    const a = std.testing.allocator;
    const cs = try CryptoStream.create(a);
    defer cs.destroy(a);
    try cs.onFrame(a, 5, "world");
    try std.testing.expectEqual(@as(usize, 0), cs.readable().len);
    try cs.onFrame(a, 0, "hello");
    try std.testing.expectEqualStrings("helloworld", cs.readable());
    cs.consume(a, 10);
    try cs.onFrame(a, 10 + recv_window_bytes - 1, "x"); // ends exactly at the window
    try std.testing.expectError(error.CryptoBufferExceeded, cs.onFrame(a, 10 + recv_window_bytes, "x"));
}

test "crypto stream: a PTO sends the unacknowledged bytes again" {
    const a = std.testing.allocator;
    const cs = try CryptoStream.create(a);
    defer cs.destroy(a);
    _ = try cs.queue(a, "server hello bytes");
    const c = cs.send.next(100).?;
    cs.send.onSent(c.offset, c.data.len, false);
    try std.testing.expect(!cs.hasData());
    cs.send.onAcked(a, 0, 6, false);
    cs.resendUnacked(a);
    const again = cs.send.next(100).?;
    try std.testing.expectEqual(@as(u64, 6), again.offset);
    try std.testing.expectEqualStrings(" hello bytes", again.data);
}
