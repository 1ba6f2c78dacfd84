//! Every integer an HTTP/1.1, WebSocket or PROXY protocol peer controls, at its largest
//! allowed value and one past, through a whole connection: a real Server serves one end of
//! a socketpair (`test_server.zig`'s Fixture), the test writes the peer's bytes and reads
//! the answer (413, 400, a close frame of 1009 or 1002, a refused connection).
//! docs/PEER_INTEGERS.md lists them; the parsers' own tests cover the byte-level edges.
const std = @import("std");
const testing = std.testing;
const test_server = @import("test_server.zig");
const Fixture = test_server.Fixture;
const rec = &test_server.rec;

fn startsWith(got: []const u8, prefix: []const u8) bool {
    return std.mem.startsWith(u8, got, prefix);
}

/// The status line the server answered one request with (no app involved), or "".
fn answer(opts: @import("../core/server.zig").Options, request: []const u8) ![12]u8 {
    var f = try Fixture.initWith(opts);
    defer f.deinit();
    try f.send(request);
    var buf: [4096]u8 = undefined;
    const got = try f.receive(&buf);
    var out = [_]u8{' '} ** 12;
    @memcpy(out[0..@min(12, got.len)], got[0..@min(12, got.len)]);
    return out;
}

fn post(buf: []u8, content_length: []const u8) []const u8 {
    const fmt = "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: {s}\r\n\r\n";
    return std.fmt.bufPrint(buf, fmt, .{content_length}) catch unreachable;
}

test "peer integers: http1 Content-Length: the body limit, 19 digits, 20 digits, 2^64" {
    var opts = test_server.testOptions();
    opts.body_bytes_max = 1000;
    var buf: [256]u8 = undefined;
    // At the limit: the request reaches the app.
    {
        var f = try Fixture.initWith(opts);
        defer f.deinit();
        try f.send(post(&buf, "1000"));
        try testing.expectEqual(@as(usize, 1), rec.count);
    }
    // One past it, and the largest 19-digit value: 413 before the app sees it.
    try testing.expectEqualStrings("HTTP/1.1 413", &try answer(opts, post(&buf, "1001")));
    const nines = "9999999999999999999";
    try testing.expectEqualStrings("HTTP/1.1 413", &try answer(opts, post(&buf, nines)));
    // 20 digits (2^64 - 1 among them) and 2^64: 400.
    for ([_][]const u8{ "18446744073709551615", "18446744073709551616", "0" ++ nines }) |v| {
        try testing.expectEqualStrings("HTTP/1.1 400", &try answer(opts, post(&buf, v)));
    }
}

test "peer integers: http1 chunk size of 16 hex digits runs into the body limit; 17 is 400" {
    var opts = test_server.testOptions();
    opts.body_bytes_max = 16;
    const head = "POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n";
    // 2^64 - 1 announced: the first 16 bytes are the body's, the 17th is one too many.
    {
        var f = try Fixture.initWith(opts);
        defer f.deinit();
        try f.send(head ++ "ffffffffffffffff\r\n" ++ "a" ** 16);
        try testing.expectEqual(@as(usize, 1), rec.count);
        // The app reads the body: 16 bytes are taken.
        const st = rec.requests[0];
        var segs: [4][]const u8 = undefined;
        const r = st.takeBody(&segs);
        try testing.expect(!r.failed and !r.done);
        try testing.expectEqual(@as(usize, 16), segs[0].len);
        st.bodyConsumed();
        try f.send("b");
        try testing.expect(st.takeBody(&segs).failed);
        var buf: [4096]u8 = undefined;
        try testing.expect(startsWith(try f.receive(&buf), "HTTP/1.1 413"));
    }
    // 17 digits (2^64 among them): 400 when the app reads the body.
    for ([_][]const u8{ "10000000000000000", "fffffffffffffffff" }) |size| {
        var f = try Fixture.initWith(opts);
        defer f.deinit();
        var buf: [256]u8 = undefined;
        try f.send(try std.fmt.bufPrint(&buf, "{s}{s}\r\n", .{ head, size }));
        var segs: [4][]const u8 = undefined;
        try testing.expect(rec.requests[0].takeBody(&segs).failed);
        var out: [4096]u8 = undefined;
        try testing.expect(startsWith(try f.receive(&out), "HTTP/1.1 400"));
    }
}

test "peer integers: http1 header count at the limit and one past" {
    var opts = test_server.testOptions();
    opts.limits.headers_count_max = 4;
    const three = "GET / HTTP/1.1\r\nhost: x\r\na: 1\r\nb: 2\r\nc: 3\r\n";
    {
        var f = try Fixture.initWith(opts);
        defer f.deinit();
        try f.send(three ++ "\r\n");
        try testing.expectEqual(@as(usize, 1), rec.count);
    }
    try testing.expectEqualStrings("HTTP/1.1 431", &try answer(opts, three ++ "d: 4\r\n\r\n"));
}

const ws_request = "GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n" ++
    "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n";

/// A WebSocket open on a fixture (message limit `message_max`), the 101 read.
fn wsOpen(f: *Fixture, message_max: usize) !void {
    var opts = test_server.testOptions();
    opts.ws_enabled = true;
    opts.ws_message_bytes_max = message_max;
    f.* = try Fixture.initWith(opts);
    errdefer f.deinit();
    try f.send(ws_request);
    try testing.expectEqual(@as(usize, 1), rec.count);
    try @import("../websocket/session.zig").streamAccept(rec.requests[0], null, &.{}, &.{});
    var buf: [4096]u8 = undefined;
    try testing.expect(startsWith(try f.receive(&buf), "HTTP/1.1 101"));
}

/// A masked binary frame header with the 64-bit length form.
fn header64(len: u64) [14]u8 {
    var h: [14]u8 = undefined;
    h[0] = 0x82;
    h[1] = 0x80 | 127;
    std.mem.writeInt(u64, h[2..10], len, .big);
    @memset(h[10..14], 0);
    return h;
}

/// The close code of the close frame the server sent (null: none yet).
fn closeCodeSent(f: *Fixture) !?u16 {
    var buf: [4096]u8 = undefined;
    const got = try f.receive(&buf);
    const at = std.mem.indexOfScalar(u8, got, 0x88) orelse return null;
    if (got.len < at + 4 or got[at + 1] < 2) return null;
    return std.mem.readInt(u16, got[at + 2 ..][0..2], .big);
}

test "peer integers: websocket frame lengths: the message limit, 2^63 - 1, 2^63" {
    const Case = struct { len: u64, want: ?u16 };
    for ([_]Case{
        .{ .len = 64, .want = null }, // the limit itself
        .{ .len = 65, .want = 1009 },
        .{ .len = (1 << 63) - 1, .want = 1009 },
        .{ .len = 1 << 63, .want = 1002 }, // the top bit must be 0 (RFC 6455 5.2)
        .{ .len = std.math.maxInt(u64), .want = 1002 },
    }) |c| {
        var f: Fixture = undefined;
        try wsOpen(&f, 64);
        defer f.deinit();
        try f.send(&header64(c.len));
        if (c.want == null) try f.send(&([_]u8{'x'} ** 64));
        try testing.expectEqual(c.want, try closeCodeSent(&f));
    }
}

test "peer integers: websocket close codes: the valid edges echoed, the rest 1002" {
    const Case = struct { code: u16, want: u16 };
    for ([_]Case{
        .{ .code = 1000, .want = 1000 },
        .{ .code = 4999, .want = 4999 },
        .{ .code = 3000, .want = 3000 },
        .{ .code = 999, .want = 1002 },
        .{ .code = 1004, .want = 1002 },
        .{ .code = 1005, .want = 1002 },
        .{ .code = 2999, .want = 1002 },
        .{ .code = 5000, .want = 1002 },
        .{ .code = 65535, .want = 1002 },
    }) |c| {
        var f: Fixture = undefined;
        try wsOpen(&f, 64);
        defer f.deinit();
        var frame = [_]u8{ 0x88, 0x82, 0, 0, 0, 0, 0, 0 };
        std.mem.writeInt(u16, frame[6..8], c.code, .big);
        try f.send(&frame);
        try testing.expectEqual(@as(?u16, c.want), try closeCodeSent(&f));
    }
}

/// A connection that expects a PROXY header first (as from a trusted balancer).
fn proxied(f: *Fixture) !void {
    f.* = try Fixture.init();
    f.conn.state = .proxy;
}

test "peer integers: proxy v1 ports 65535 and 65536, v2 lengths 2048 and 2049 to 65535" {
    const get = "GET / HTTP/1.1\r\nhost: x\r\n\r\n";
    {
        var f: Fixture = undefined;
        try proxied(&f);
        defer f.deinit();
        try f.send("PROXY TCP4 192.0.2.1 192.0.2.2 65535 65535\r\n" ++ get);
        try testing.expectEqual(@as(usize, 1), rec.count);
        try testing.expectEqual(@as(u16, 65535), f.conn.peer.port);
    }
    for ([_][]const u8{ "65536 1", "1 65536", "99999 1", "18446744073709551616 1" }) |ports| {
        var f: Fixture = undefined;
        try proxied(&f);
        defer f.deinit();
        var buf: [128]u8 = undefined;
        const fmt = "PROXY TCP4 192.0.2.1 192.0.2.2 {s}\r\n" ++ get;
        const line = try std.fmt.bufPrint(&buf, fmt, .{ports});
        try f.send(line);
        try testing.expectEqual(@as(usize, 0), rec.count);
        try testing.expect(f.peerClosed());
    }
    // Version 2: a body of 2048 bytes (TCP4 and TLVs) is taken; 2049 and 65535 refused
    // as soon as the length is read.
    const signature = "\r\n\r\n\x00\r\nQUIT\n";
    for ([_]u16{ 2048, 2049, 65535 }) |len| {
        var f: Fixture = undefined;
        try proxied(&f);
        defer f.deinit();
        var hdr: [16]u8 = undefined;
        @memcpy(hdr[0..12], signature);
        hdr[12] = 0x21;
        hdr[13] = 0x11;
        std.mem.writeInt(u16, hdr[14..16], len, .big);
        try f.send(&hdr);
        if (len > 2048) {
            try testing.expect(f.peerClosed());
            continue;
        }
        var body = [_]u8{0} ** 2048;
        body[0..4].* = .{ 192, 0, 2, 9 };
        std.mem.writeInt(u16, body[8..10], 65535, .big);
        try f.send(&body);
        try f.send(get);
        try testing.expectEqual(@as(usize, 1), rec.count);
        try testing.expectEqual(@as(u16, 65535), f.conn.peer.port);
    }
}

test "peer integers: websocket deflate window bits 8 to 15, digits only" {
    const codec = @import("../websocket/codec.zig");
    const Case = struct { offer: []const u8, bits: ?u4 };
    for ([_]Case{
        .{ .offer = "permessage-deflate; client_max_window_bits=8", .bits = 8 },
        .{ .offer = "permessage-deflate; client_max_window_bits=15", .bits = 15 },
        .{ .offer = "permessage-deflate; client_max_window_bits=16", .bits = null },
        .{ .offer = "permessage-deflate; client_max_window_bits=7", .bits = null },
        .{ .offer = "permessage-deflate; client_max_window_bits=+9", .bits = null },
        .{ .offer = "permessage-deflate; client_max_window_bits=255", .bits = null },
        .{ .offer = "permessage-deflate; server_max_window_bits=15", .bits = 15 },
        .{ .offer = "permessage-deflate; server_max_window_bits=8", .bits = null },
    }) |c| {
        const field: @import("../http/fields.zig").Header = .{
            .name = "sec-websocket-extensions",
            .value = c.offer,
        };
        const got = codec.negotiateDeflate(&.{field});
        if (c.bits) |b| {
            const p = got.?;
            const server = std.mem.indexOf(u8, c.offer, "server") != null;
            const bits = if (server) p.server_max_window_bits else p.client_max_window_bits.?;
            try testing.expectEqual(b, bits);
        } else try testing.expect(got == null);
    }
}
