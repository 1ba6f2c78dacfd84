//! HAProxy's PROXY protocol, versions 1 (text) and 2 (binary): the header a load balancer
//! (HAProxy, AWS NLB, GCP) puts before a connection's first byte to say whom it forwards.
//! Sans-IO: `parse` looks at what has arrived and says whether the header is whole, how
//! long it is and which source address it names; the connection does the rest
//! (`connection.zig`, state `.proxy`).
const std = @import("std");

/// A version 1 line is at most 107 bytes with its CRLF (the specification's bound).
pub const v1_bytes_max = 107;
/// Version 2: the 16-byte head and up to this many bytes of addresses and TLVs (AWS and
/// GCP add a few TLVs; the specification leaves the total open, we bound it).
pub const v2_body_bytes_max = 2048;
/// No header is longer than this: past it without a whole header, the peer is refused.
pub const header_bytes_max = 16 + v2_body_bytes_max;

const v2_signature = "\r\n\r\n\x00\r\nQUIT\n";

pub const Address = struct {
    /// 4 or 6.
    version: u8,
    /// IPv4 in the first 4 bytes.
    addr: [16]u8,
    port: u16,
};

pub const Header = struct {
    /// Bytes to drop from the start of the stream.
    len: usize,
    /// The client's address; null for `LOCAL`, `UNKNOWN` and non-IP families (the
    /// connection keeps its own peer then).
    source: ?Address,
};

pub const Result = union(enum) {
    /// More bytes are needed (never more than `header_bytes_max` in all).
    incomplete,
    /// Not a PROXY header, or a malformed one.
    invalid,
    done: Header,
};

pub fn parse(buf: []const u8) Result {
    if (buf.len == 0) return .incomplete;
    if (buf[0] == '\r') return parseV2(buf);
    if (buf[0] == 'P') return parseV1(buf);
    return .invalid;
}

fn prefixOf(buf: []const u8, whole: []const u8) bool {
    const n = @min(buf.len, whole.len);
    return std.mem.eql(u8, buf[0..n], whole[0..n]);
}

fn parseV1(buf: []const u8) Result {
    if (!prefixOf(buf, "PROXY ")) return .invalid;
    const end = std.mem.indexOf(u8, buf[0..@min(buf.len, v1_bytes_max)], "\r\n") orelse
        return if (buf.len >= v1_bytes_max) .invalid else .incomplete;
    const line = buf[6..end];
    var it = std.mem.splitScalar(u8, line, ' ');
    const proto = it.next() orelse return .invalid;
    if (std.mem.eql(u8, proto, "UNKNOWN")) return .{ .done = .{ .len = end + 2, .source = null } };
    const version: u8 = if (std.mem.eql(u8, proto, "TCP4")) 4 else if (std.mem.eql(u8, proto, "TCP6")) 6 else return .invalid;
    const src_text = it.next() orelse return .invalid;
    const dst_text = it.next() orelse return .invalid;
    const src_port_text = it.next() orelse return .invalid;
    const dst_port_text = it.next() orelse return .invalid;
    if (it.next() != null) return .invalid;
    const src = parseIp(version, src_text) orelse return .invalid;
    _ = parseIp(version, dst_text) orelse return .invalid;
    const src_port = parsePort(src_port_text) orelse return .invalid;
    _ = parsePort(dst_port_text) orelse return .invalid;
    return .{ .done = .{ .len = end + 2, .source = .{ .version = version, .addr = src, .port = src_port } } };
}

fn parseIp(version: u8, text: []const u8) ?[16]u8 {
    var out = [_]u8{0} ** 16;
    if (version == 4) {
        if (std.mem.indexOfScalar(u8, text, ':') != null) return null;
        const a = std.net.Ip4Address.parse(text, 0) catch return null;
        @memcpy(out[0..4], std.mem.asBytes(&a.sa.addr));
    } else {
        if (std.mem.indexOfScalar(u8, text, ':') == null or std.mem.indexOfScalar(u8, text, '%') != null) return null;
        const a = std.net.Ip6Address.parse(text, 0) catch return null;
        out = a.sa.addr;
    }
    return out;
}

/// A decimal port without sign or leading zeros (the specification's form).
fn parsePort(text: []const u8) ?u16 {
    if (text.len == 0 or text.len > 5 or (text.len > 1 and text[0] == '0')) return null;
    for (text) |ch| if (!std.ascii.isDigit(ch)) return null;
    return std.fmt.parseInt(u16, text, 10) catch null;
}

fn parseV2(buf: []const u8) Result {
    if (!prefixOf(buf, v2_signature)) return .invalid;
    if (buf.len < 16) return .incomplete;
    const ver_cmd = buf[12];
    if (ver_cmd >> 4 != 2) return .invalid;
    const command = ver_cmd & 0x0f;
    if (command > 1) return .invalid;
    const fam = buf[13];
    const body_len = std.mem.readInt(u16, buf[14..16], .big);
    if (body_len > v2_body_bytes_max) return .invalid;
    const total = 16 + @as(usize, body_len);
    if (buf.len < total) return .incomplete;
    const body = buf[16..total];
    // LOCAL: the balancer's own connection (a health check): keep the real peer.
    if (command == 0) return .{ .done = .{ .len = total, .source = null } };
    const family = fam >> 4;
    const transport = fam & 0x0f;
    if (transport > 2 or family > 3) return .invalid;
    switch (family) {
        1 => {
            if (body.len < 12) return .invalid;
            var addr = [_]u8{0} ** 16;
            @memcpy(addr[0..4], body[0..4]);
            return .{ .done = .{ .len = total, .source = .{ .version = 4, .addr = addr, .port = std.mem.readInt(u16, body[8..10], .big) } } };
        },
        2 => {
            if (body.len < 36) return .invalid;
            return .{ .done = .{ .len = total, .source = .{ .version = 6, .addr = body[0..16].*, .port = std.mem.readInt(u16, body[32..34], .big) } } };
        },
        // UNSPEC and UNIX: no IP address to take.
        else => {
            if (family == 3 and body.len < 216) return .invalid;
            return .{ .done = .{ .len = total, .source = null } };
        },
    }
}

// ---- tests ---------------------------------------------------------------------------

const testing = std.testing;

fn expectSource(r: Result, len: usize, version: u8, addr_prefix: []const u8, port: u16) !void {
    try testing.expect(r == .done);
    try testing.expectEqual(len, r.done.len);
    const s = r.done.source.?;
    try testing.expectEqual(version, s.version);
    try testing.expectEqualSlices(u8, addr_prefix, s.addr[0..addr_prefix.len]);
    try testing.expectEqual(port, s.port);
}

test "proxy protocol v1: TCP4, TCP6 and UNKNOWN, byte-exact and in pieces" {
    const line = "PROXY TCP4 203.0.113.7 10.0.0.1 51000 443\r\nGET / HTTP/1.1\r\n";
    const header_len = std.mem.indexOf(u8, line, "\r\n").? + 2;
    try expectSource(parse(line), header_len, 4, &.{ 203, 0, 113, 7 }, 51000);
    for (0..header_len) |n| try testing.expect(parse(line[0..n]) == .incomplete);
    const six = "PROXY TCP6 2001:db8::7 2001:db8::1 65535 80\r\n";
    try expectSource(parse(six), six.len, 6, &.{ 0x20, 0x01, 0x0d, 0xb8 }, 65535);
    const unknown = "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n";
    try testing.expect(parse(unknown) == .done and parse(unknown).done.source == null);
    try testing.expectEqual(unknown.len, parse(unknown).done.len);
}

test "proxy protocol v1: malformed lines are refused" {
    const bad = [_][]const u8{
        "GET / HTTP/1.1\r\n",
        "PROXY TCP5 1.2.3.4 1.2.3.4 1 2\r\n",
        "PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n",
        "PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n",
        "PROXY TCP4 1.2.3.256 1.2.3.4 1 2\r\n",
        "PROXY TCP4 ::1 1.2.3.4 1 2\r\n",
        "PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
        "PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n",
        "PROXY TCP4 1.2.3.4 1.2.3.4 01 2\r\n",
        "PROXY TCP4 1.2.3.4 1.2.3.4 -1 2\r\n",
        "PROXY  TCP4 1.2.3.4 1.2.3.4 1 2\r\n",
        "proxy TCP4 1.2.3.4 1.2.3.4 1 2\r\n",
    };
    for (bad) |b| testing.expect(parse(b) == .invalid) catch |e| {
        std.debug.print("accepted: {s}\n", .{b});
        return e;
    };
    // No CRLF within the line's bound: refused, not waited for.
    try testing.expect(parse("PROXY TCP4 " ++ "1" ** 100) == .invalid);
    try testing.expect(parse("PROXY TCP4 " ++ "1" ** 90) == .incomplete);
}

fn v2(comptime cmd: u8, comptime fam: u8, comptime body: []const u8) *const [16 + body.len]u8 {
    const len = comptime [2]u8{ @intCast(body.len >> 8), @intCast(body.len & 0xff) };
    return comptime v2_signature ++ [_]u8{ 0x20 | cmd, fam } ++ len ++ body[0..body.len].*;
}

test "proxy protocol v2: TCP4, TCP6, LOCAL, UNIX, TLVs, in pieces" {
    const tcp4 = v2(1, 0x11, &[_]u8{ 198, 51, 100, 9, 10, 0, 0, 1, 0xc3, 0x50, 0x01, 0xbb });
    try expectSource(parse(tcp4 ++ "GET"), tcp4.len, 4, &.{ 198, 51, 100, 9 }, 50000);
    for (0..tcp4.len) |n| try testing.expect(parse(tcp4[0..n]) == .incomplete);
    const tcp6_body = [_]u8{ 0x20, 0x01, 0x0d, 0xb8 } ++ [_]u8{0} ** 11 ++ [_]u8{7} ++ [_]u8{0} ** 16 ++ [_]u8{ 0x00, 0x50, 0x01, 0xbb };
    // A TLV after the addresses (AWS's VPC endpoint id, say) is skipped with them.
    const tlv = [_]u8{ 0xea, 0x00, 0x03, 'a', 'b', 'c' };
    const tcp6 = v2(1, 0x21, &(tcp6_body ++ tlv));
    try expectSource(parse(tcp6), tcp6.len, 6, &.{ 0x20, 0x01, 0x0d, 0xb8 }, 80);
    const local = v2(0, 0x00, "");
    try testing.expect(parse(local) == .done and parse(local).done.source == null);
    const unix = v2(1, 0x31, &([_]u8{0} ** 216));
    try testing.expect(parse(unix) == .done and parse(unix).done.source == null);
}

test "proxy protocol v2: malformed headers are refused" {
    try testing.expect(parse(v2(2, 0x11, &([_]u8{0} ** 12))) == .invalid); // command 2
    try testing.expect(parse(v2(1, 0x11, &([_]u8{0} ** 11))) == .invalid); // short TCP4
    try testing.expect(parse(v2(1, 0x21, &([_]u8{0} ** 35))) == .invalid); // short TCP6
    try testing.expect(parse(v2(1, 0x41, "")) == .invalid); // family 4
    try testing.expect(parse(v2(1, 0x13, &([_]u8{0} ** 12))) == .invalid); // transport 3
    var wrong_version = v2(1, 0x11, &([_]u8{0} ** 12)).*;
    wrong_version[12] = 0x11;
    try testing.expect(parse(&wrong_version) == .invalid);
    try testing.expect(parse("\r\n\r\n\x00\r\nQUIX\n") == .invalid);
    // A declared body past the bound is refused at once, not waited for.
    const huge = v2_signature ++ [_]u8{ 0x21, 0x11, 0xff, 0xff };
    try testing.expect(parse(huge) == .invalid);
}

test "proxy protocol v2: a body of exactly the bound is taken, one byte more refused" {
    var buf: [16 + v2_body_bytes_max + 1]u8 = undefined;
    @memcpy(buf[0..12], v2_signature);
    buf[12] = 0x21;
    buf[13] = 0x11;
    @memset(buf[16..], 0);
    std.mem.writeInt(u16, buf[14..16], v2_body_bytes_max, .big);
    const r = parse(buf[0 .. 16 + v2_body_bytes_max]);
    try testing.expect(r == .done and r.done.len == 16 + v2_body_bytes_max);
    std.mem.writeInt(u16, buf[14..16], v2_body_bytes_max + 1, .big);
    try testing.expect(parse(&buf) == .invalid);
    // And a v1 line of exactly 107 bytes (the specification's longest) is taken.
    const line = "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    try testing.expectEqual(@as(usize, v1_bytes_max), line.len);
    try testing.expect(parse(line) == .done);
}
