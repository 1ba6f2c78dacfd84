//! Unit tests of the connection and stream state machines, without Python: a real
//! Server (epoll, timers, pool) serves one end of a socketpair; the test plays the
//! client on the other end and the app through the stream verbs.
//!
//!     python -m ziglang test -lc -I <python include> src/zig/unit_tests.zig --test-filter connection_tests
const std = @import("std");
const linux = std.os.linux;
const testing = std.testing;
const server_mod = @import("../core/server.zig");
const Server = server_mod.Server;
const conn_mod = @import("../core/connection.zig");
const stream_mod = @import("../core/stream.zig");
const Stream = stream_mod.Stream;
const sys = @import("../os/sys.zig");

/// The server, hooks and recorder live in test_server.zig (shared with testing/fuzz_http2.zig).
const test_server = @import("test_server.zig");
const Recorder = test_server.Recorder;
const Fixture = test_server.Fixture;
const testOptions = test_server.testOptions;
/// What the hooks saw (reset by `Fixture.init`).
const rec = &test_server.rec;

fn respond(st: *Stream, body: []const u8) !void {
    try st.startResponse(200, &.{.{ "content-type", "text/plain" }}, &.{}, false);
    _ = try st.writeBody(body, false, null);
    st.finish();
}

test "keep-alive: two requests on one connection, each a fresh stream, idle in between" {
    var f = try Fixture.init();
    defer f.deinit();
    try f.send("GET /one HTTP/1.1\r\nhost: x\r\n\r\n");
    try testing.expectEqual(@as(usize, 1), rec.count);
    try testing.expectEqualStrings("/one", rec.path(0));
    try respond(rec.requests[0], "hello");
    var buf: [4096]u8 = undefined;
    const got = try f.receive(&buf);
    try testing.expectEqualStrings("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nhello", got);
    // Idle: only the small struct is left.
    try testing.expect(f.conn.act == null);
    try f.send("GET /two HTTP/1.1\r\nhost: x\r\n\r\n");
    try testing.expectEqual(@as(usize, 2), rec.count);
    try testing.expectEqualStrings("/two", rec.path(1));
    try respond(rec.requests[1], "again");
    const got2 = try f.receive(&buf);
    try testing.expect(std.mem.endsWith(u8, got2, "\r\n\r\nagain"));
    try testing.expectEqual(@as(u32, 2), f.conn.requests_count);
    try testing.expectEqual(@as(u32, 0), f.server.streams);
}

test "pipelining: the second request waits for the first response, answers stay in order" {
    var f = try Fixture.init();
    defer f.deinit();
    try f.send("GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET /b HTTP/1.1\r\nhost: x\r\n\r\n");
    try testing.expectEqual(@as(usize, 1), rec.count);
    try respond(rec.requests[0], "A");
    // The buffered request is parsed on the next pass.
    f.server.poll();
    try testing.expectEqual(@as(usize, 2), rec.count);
    try testing.expectEqualStrings("/b", rec.path(1));
    try respond(rec.requests[1], "B");
    var buf: [4096]u8 = undefined;
    const got = try f.receive(&buf);
    const first = std.mem.indexOf(u8, got, "\r\n\r\nA") orelse return error.MissingA;
    const second = std.mem.indexOf(u8, got, "\r\n\r\nB") orelse return error.MissingB;
    try testing.expect(first < second);
}

test "chunked streaming response: framing per body message and the last chunk" {
    var f = try Fixture.init();
    defer f.deinit();
    try f.send("GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    const st = rec.requests[0];
    try st.startResponse(200, &.{}, &.{}, false);
    try testing.expect(!try st.writeBody("ab", true, null));
    try testing.expect(!try st.writeBody("cde", false, null));
    try testing.expectError(error.AlreadyComplete, st.writeBody("x", false, null));
    st.finish();
    var buf: [4096]u8 = undefined;
    const got = try f.receive(&buf);
    try testing.expectEqualStrings("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n", got);
}

test "partial writes and backpressure: a large borrowed body makes the writer wait until the client reads" {
    var f = try Fixture.init();
    defer f.deinit();
    try f.send("GET /big HTTP/1.1\r\nhost: x\r\n\r\n");
    const st = rec.requests[0];
    const body = try testing.allocator.alloc(u8, 1 << 20);
    defer testing.allocator.free(body);
    for (body, 0..) |*b, i| b.* = @intCast(i % 251);
    var owner: u8 = 0;
    try st.startResponse(200, &.{}, &.{}, false);
    // More than the socket takes at once: the body stays queued by reference.
    try testing.expect(try st.writeBody(body, true, &owner));
    try testing.expectEqual(@as(usize, 1), rec.retained);
    try testing.expect(st.out.queued > stream_mod.queued_bytes_high);
    const wakes_before = rec.wake_writes;
    var got: std.ArrayListUnmanaged(u8) = .{};
    defer got.deinit(testing.allocator);
    var buf: [64 * 1024]u8 = undefined;
    var rounds: usize = 0;
    while (got.items.len < body.len + 200 and rounds < 10_000) : (rounds += 1) {
        try got.appendSlice(testing.allocator, try f.receive(&buf));
        if (st.out.queued == 0) break;
    }
    // Drained: the waiting writer was woken and the body's owner released.
    try testing.expect(rec.wake_writes > wakes_before);
    try testing.expectEqual(@as(usize, 1), rec.released);
    try testing.expect(!try st.writeBody("", false, null));
    st.finish();
    try got.appendSlice(testing.allocator, try f.receive(&buf));
    const head_end = (std.mem.indexOf(u8, got.items, "\r\n\r\n") orelse return error.NoHead) + 4;
    // Chunked: the size line, the whole body, then the CRLF and the last chunk.
    const size_line = "100000\r\n";
    try testing.expect(std.mem.startsWith(u8, got.items[head_end..], size_line));
    const body_start = head_end + size_line.len;
    try testing.expectEqualSlices(u8, body, got.items[body_start..][0..body.len]);
    try testing.expectEqualStrings("\r\n0\r\n\r\n", got.items[body_start + body.len ..]);
}

test "abort mid-body: the connection closes, the stream sees it gone, nothing is left" {
    var f = try Fixture.init();
    defer f.deinit();
    try f.send("POST /up HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n0123456789");
    const st = rec.requests[0];
    var segs: [4][]const u8 = undefined;
    const r = st.takeBody(&segs);
    try testing.expectEqual(@as(usize, 1), r.count);
    try testing.expectEqualStrings("0123456789", segs[0]);
    try testing.expect(!r.done);
    st.bodyConsumed();
    try st.startResponse(200, &.{}, &.{}, false);
    try testing.expect(!try st.writeBody("partial", true, null));
    st.abort();
    try testing.expect(f.peerClosed());
    try testing.expectEqual(@as(u32, 0), f.server.connections);
    try testing.expectEqual(@as(u32, 0), f.server.streams);
}

test "the client goes away while the app holds the stream: it is told, and finishing frees it" {
    var f = try Fixture.init();
    defer f.deinit();
    try f.send("POST /up HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\n");
    const st = rec.requests[0];
    const reads_before = rec.wake_reads;
    sys.close(f.client);
    f.client = -1;
    f.server.poll();
    try testing.expect(st.gone());
    try testing.expect(rec.wake_reads > reads_before);
    // The app's late output is dropped without error.
    try st.startResponse(200, &.{}, &.{}, false);
    try testing.expect(!try st.writeBody("late", false, null));
    st.finish();
    f.server.poll();
    try testing.expectEqual(@as(u32, 0), f.server.connections);
}

test "an unread body is skipped so the next request on the connection is served" {
    var f = try Fixture.init();
    defer f.deinit();
    try f.send("POST /skip HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhelloGET /next HTTP/1.1\r\nhost: x\r\n\r\n");
    try respond(rec.requests[0], "ok");
    f.server.poll();
    try testing.expectEqual(@as(usize, 2), rec.count);
    try testing.expectEqualStrings("/next", rec.path(1));
    try respond(rec.requests[1], "ok");
}

test "a malformed head is refused with 400 and the connection closes" {
    var f = try Fixture.init();
    defer f.deinit();
    try f.send("GET / HTTP/1.1\r\nbad header\r\n\r\n");
    try testing.expectEqual(@as(usize, 0), rec.count);
    var buf: [4096]u8 = undefined;
    const got = try f.receive(&buf);
    try testing.expect(std.mem.startsWith(u8, got, "HTTP/1.1 400 "));
    try testing.expect(f.peerClosed());
}

test "a request the app side cannot take is answered 500" {
    var f = try Fixture.init();
    defer f.deinit();
    rec.refuse = true;
    try f.send("GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    var buf: [4096]u8 = undefined;
    const got = try f.receive(&buf);
    try testing.expect(std.mem.startsWith(u8, got, "HTTP/1.1 500 "));
    try testing.expectEqual(@as(u32, 0), f.server.streams);
}

test "early hints go out before the response; not after it started" {
    var f = try Fixture.init();
    defer f.deinit();
    try f.send("GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    const st = rec.requests[0];
    try st.earlyHint(&.{ "</a.css>; rel=preload", "</b.js>; rel=preload" });
    try st.startResponse(200, &.{}, &.{}, false);
    try testing.expectError(error.AlreadyStarted, st.earlyHint(&.{"</c>"}));
    _ = try st.writeBody("ok", false, null);
    st.finish();
    var buf: [4096]u8 = undefined;
    const got = try f.receive(&buf);
    try testing.expectEqualStrings("HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\nlink: </b.js>; rel=preload\r\n\r\n" ++
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", got);
}

test "trailers: sent after the last chunk when the client takes them, checked either way" {
    var f = try Fixture.init();
    defer f.deinit();
    try f.send("GET / HTTP/1.1\r\nhost: x\r\nte: trailers\r\n\r\nGET / HTTP/1.1\r\nhost: x\r\n\r\n");
    const st = rec.requests[0];
    try st.startResponse(200, &.{}, &.{}, true);
    try testing.expectError(error.BodyNotDone, st.writeTrailers(&.{}, false));
    _ = try st.writeBody("abc", false, null);
    try testing.expect(!st.resp_complete);
    try testing.expectError(error.Forbidden, st.writeTrailers(&.{.{ "Content-Length", "3" }}, false));
    _ = try st.writeTrailers(&.{.{ "x-sum", "1" }}, true);
    _ = try st.writeTrailers(&.{.{ "x-more", "2" }}, false);
    try testing.expectError(error.AlreadyComplete, st.writeTrailers(&.{}, false));
    st.finish();
    var buf: [4096]u8 = undefined;
    try testing.expectEqualStrings("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nx-sum: 1\r\nx-more: 2\r\n\r\n", try f.receive(&buf));
    // Without `TE: trailers` the fields are dropped and the body still ends.
    f.server.poll();
    const st2 = rec.requests[1];
    try st2.startResponse(200, &.{}, &.{}, true);
    _ = try st2.writeBody("abc", false, null);
    _ = try st2.writeTrailers(&.{.{ "x-sum", "1" }}, false);
    st2.finish();
    try testing.expectEqualStrings("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", try f.receive(&buf));
    // Undeclared trailers are refused.
    var undeclared = Stream.init(f.conn, .http1);
    try testing.expectError(error.NotDeclared, undeclared.writeTrailers(&.{}, false));
}

// ---- HTTP/2 ------------------------------------------------------------------------------

const h2 = @import("../http2/session.zig");

fn frame(buf: []u8, typ: u8, flags: u8, stream: u32, payload: []const u8) []const u8 {
    std.mem.writeInt(u24, buf[0..3], @intCast(payload.len), .big);
    buf[3] = typ;
    buf[4] = flags;
    std.mem.writeInt(u32, buf[5..9], stream, .big);
    @memcpy(buf[9..][0..payload.len], payload);
    return buf[0 .. 9 + payload.len];
}

/// :method GET, :scheme http, :path /, :authority x (static table, one literal).
const get_block = [_]u8{ 0x82, 0x86, 0x84, 0x41, 0x01, 'x' };

test "h2c: a request on stream 1 is answered with HEADERS and DATA, END_STREAM on the last" {
    var f = try Fixture.init();
    defer f.deinit();
    var buf: [256]u8 = undefined;
    try f.send(h2.preface ++ [_]u8{ 0, 0, 0, 4, 0, 0, 0, 0, 0 });
    try f.send(frame(&buf, 1, 0x5, 1, &get_block));
    try testing.expectEqual(@as(usize, 1), rec.count);
    try testing.expectEqualStrings("/", rec.path(0));
    try respond(rec.requests[0], "hello");
    var out: [4096]u8 = undefined;
    const got = try f.receive(&out);
    // SETTINGS, WINDOW_UPDATE, SETTINGS ack, then the response.
    try testing.expect(std.mem.endsWith(u8, got, &[_]u8{ 0, 0, 5, 0, 1, 0, 0, 0, 1 } ++ "hello"));
    try testing.expectEqual(@as(u32, 0), f.server.streams);
}

test "h2c: random and mutated frames never panic, leak a held stream, or spin" {
    var prng = std.Random.DefaultPrng.init(0x5eed);
    const r = prng.random();
    var buf: [512]u8 = undefined;
    var payload: [64]u8 = undefined;
    for (0..1500) |_| {
        var f = try Fixture.init();
        defer f.deinit();
        f.send(h2.preface ++ [_]u8{ 0, 0, 0, 4, 0, 0, 0, 0, 0 }) catch {};
        for (0..r.intRangeAtMost(usize, 1, 12)) |_| {
            const typ: u8 = if (r.boolean()) 1 else r.intRangeAtMost(u8, 0, 12);
            const ids = [_]u32{ 0, 1, 1, 3, 3, 5, 2, 0x7fff_ffff };
            const id = ids[r.uintLessThan(usize, ids.len)];
            var len: usize = r.uintLessThan(usize, payload.len);
            r.bytes(payload[0..len]);
            if (typ == 1 and r.boolean()) {
                @memcpy(payload[0..get_block.len], &get_block);
                len = @max(len, get_block.len);
                if (r.boolean()) len = get_block.len;
            }
            const flags: u8 = if (r.boolean()) 0x5 else r.int(u8);
            var bytes = frame(&buf, typ, flags, id, payload[0..len]);
            var mutated: [512]u8 = undefined;
            if (r.uintLessThan(u8, 4) == 0) {
                @memcpy(mutated[0..bytes.len], bytes);
                mutated[r.uintLessThan(usize, bytes.len)] = r.int(u8);
                bytes = mutated[0..bytes.len];
            }
            f.send(bytes) catch break;
            // The app answers whatever it was given (or finds it reset).
            for (rec.requests[0..rec.count]) |st| {
                if (st.handle == null) continue;
                st.startResponse(200, &.{}, &.{}, false) catch {};
                _ = st.writeBody("ok", false, null) catch {};
                st.finish();
            }
            var out: [8192]u8 = undefined;
            _ = f.receive(&out) catch break;
        }
        try testing.expectEqual(@as(u32, 0), f.server.streams);
    }
}

/// What the server wrote, read as frames: DATA bytes per stream (1 and 3), the GOAWAY
/// error code (if any), RST_STREAM codes.
const Frames = struct {
    data: [4]usize = .{0} ** 4,
    /// Frames of any type per stream id.
    frames: [4]usize = .{0} ** 4,
    goaway: ?u32 = null,
    rst: ?u32 = null,

    fn read(out: []const u8) Frames {
        var f = Frames{};
        var rest = out;
        // The server preface's response to ours may be preceded by nothing else.
        while (rest.len >= 9) {
            const len = std.mem.readInt(u24, rest[0..3], .big);
            const typ = rest[3];
            const id = std.mem.readInt(u32, rest[5..9], .big) & 0x7fff_ffff;
            if (rest.len < 9 + len) break;
            const body = rest[9..][0..len];
            if (id < f.frames.len) f.frames[id] += 1;
            switch (typ) {
                0 => if (id < f.data.len) {
                    f.data[id] += len;
                },
                3 => f.rst = std.mem.readInt(u32, body[0..4], .big),
                7 => f.goaway = std.mem.readInt(u32, body[4..8], .big),
                else => {},
            }
            rest = rest[9 + len ..];
        }
        return f;
    }
};

fn settingsFrame(buf: []u8, id: u16, value: u32) []const u8 {
    var p: [6]u8 = undefined;
    std.mem.writeInt(u16, p[0..2], id, .big);
    std.mem.writeInt(u32, p[2..6], value, .big);
    return frame(buf, 4, 0, 0, &p);
}

fn windowUpdate(buf: []u8, stream: u32, inc: u32) []const u8 {
    var p: [4]u8 = undefined;
    std.mem.writeInt(u32, &p, inc, .big);
    return frame(buf, 8, 0, stream, &p);
}

const flow_control_error: u32 = 3;

/// An h2c connection past its prefaces; `initial_window` is the client's
/// SETTINGS_INITIAL_WINDOW_SIZE (null: the default 65535).
fn h2Fixture(initial_window: ?u32) !Fixture {
    var f = try Fixture.init();
    errdefer f.deinit();
    var buf: [64]u8 = undefined;
    try f.send(h2.preface);
    if (initial_window) |w| try f.send(settingsFrame(&buf, 4, w)) else try f.send(frame(&buf, 4, 0, 0, ""));
    var out: [4096]u8 = undefined;
    _ = try f.receive(&out);
    return f;
}

test "h2 windows: the connection window grows to 2^31-1 (Go opens it by 2^30), not one byte more" {
    var f = try h2Fixture(null);
    defer f.deinit();
    var buf: [64]u8 = undefined;
    var out: [8192]u8 = undefined;
    try f.send(windowUpdate(&buf, 0, 1 << 30));
    try f.send(frame(&buf, 1, 0x5, 1, &get_block));
    try testing.expectEqual(@as(usize, 1), rec.count);
    try respond(rec.requests[0], "hello");
    var got = Frames.read(try f.receive(&out));
    try testing.expectEqual(@as(?u32, null), got.goaway);
    try testing.expectEqual(@as(usize, 5), got.data[1]);
    // 65535 + 2^30 - 5 sent so far; up to exactly 2^31-1 is allowed.
    const room: u32 = @intCast(h2.window_max - (65535 + (1 << 30) - 5));
    try f.send(windowUpdate(&buf, 0, room));
    got = Frames.read(try f.receive(&out));
    try testing.expectEqual(@as(?u32, null), got.goaway);
    try f.send(windowUpdate(&buf, 0, 1));
    got = Frames.read(try f.receive(&out));
    try testing.expectEqual(@as(?u32, flow_control_error), got.goaway);
}

test "h2 windows: SETTINGS_INITIAL_WINDOW_SIZE 2^31-1 is accepted, 2^31 is a flow-control error" {
    var f = try h2Fixture(@intCast(h2.window_max));
    defer f.deinit();
    var buf: [64]u8 = undefined;
    var out: [8192]u8 = undefined;
    try f.send(frame(&buf, 1, 0x5, 1, &get_block));
    try respond(rec.requests[0], "hello");
    var got = Frames.read(try f.receive(&out));
    try testing.expectEqual(@as(?u32, null), got.goaway);
    try testing.expectEqual(@as(usize, 5), got.data[1]);
    try f.send(settingsFrame(&buf, 4, 1 << 31));
    got = Frames.read(try f.receive(&out));
    try testing.expectEqual(@as(?u32, flow_control_error), got.goaway);
}

test "h2 windows: a SETTINGS increase that lifts an open stream's window past 2^31-1 is a connection error" {
    var f = try h2Fixture(null);
    defer f.deinit();
    var buf: [64]u8 = undefined;
    var out: [8192]u8 = undefined;
    // The stream stays open (no END_STREAM from the client), its window at the maximum.
    try f.send(frame(&buf, 1, 0x4, 1, &get_block));
    try testing.expectEqual(@as(usize, 1), rec.count);
    try f.send(windowUpdate(&buf, 1, @intCast(h2.window_max - 65535)));
    var got = Frames.read(try f.receive(&out));
    try testing.expectEqual(@as(?u32, null), got.goaway);
    try testing.expectEqual(@as(?u32, null), got.rst);
    try f.send(settingsFrame(&buf, 4, 65536));
    got = Frames.read(try f.receive(&out));
    try testing.expectEqual(@as(?u32, flow_control_error), got.goaway);
    rec.requests[0].finish();
}

test "h2 windows: a stream window made negative by SETTINGS sends nothing until updates lift it above zero" {
    var f = try h2Fixture(10);
    defer f.deinit();
    var buf: [64]u8 = undefined;
    var out: [8192]u8 = undefined;
    try f.send(frame(&buf, 1, 0x5, 1, &get_block));
    try respond(rec.requests[0], "a" ** 100);
    var got = Frames.read(try f.receive(&out));
    try testing.expectEqual(@as(usize, 10), got.data[1]);
    // The setting drops to 0: the stream's window is -10.
    try f.send(settingsFrame(&buf, 4, 0));
    try f.send(windowUpdate(&buf, 1, 10));
    got = Frames.read(try f.receive(&out));
    try testing.expectEqual(@as(usize, 0), got.data[1]);
    // Many small updates: each byte of window lets one byte go, none more.
    for (0..85) |_| try f.send(windowUpdate(&buf, 1, 1));
    got = Frames.read(try f.receive(&out));
    try testing.expectEqual(@as(usize, 85), got.data[1]);
    try testing.expectEqual(@as(?u32, null), got.goaway);
    try f.send(windowUpdate(&buf, 1, 1000));
    got = Frames.read(try f.receive(&out));
    try testing.expectEqual(@as(usize, 5), got.data[1]);
    try testing.expectEqual(@as(u32, 0), f.server.streams);
}

const h2c_upgrade_head = "GET /up HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n" ++
    // SETTINGS_INITIAL_WINDOW_SIZE = 10, base64url
    "HTTP2-Settings: AAQAAAAK\r\n\r\n";

test "h2c upgrade: 101, then the request is HTTP/2's stream 1 under the settings it carried" {
    var f = try Fixture.init();
    defer f.deinit();
    try f.send(h2c_upgrade_head);
    try testing.expectEqual(@as(usize, 1), rec.count);
    try testing.expectEqualStrings("/up", rec.path(0));
    try testing.expectEqual(stream_mod.Protocol.http2, rec.requests[0].protocol);
    try respond(rec.requests[0], "a" ** 100);
    var out: [8192]u8 = undefined;
    var got = try f.receive(&out);
    try testing.expect(std.mem.startsWith(u8, got, "HTTP/1.1 101 Switching Protocols\r\n"));
    const frames_at = std.mem.indexOf(u8, got, "\r\n\r\n").? + 4;
    // Stream 1 waits for the client's preface: only our SETTINGS (and connection window) came.
    const before = Frames.read(got[frames_at..]);
    try testing.expectEqual(@as(usize, 2), before.frames[0]);
    try testing.expectEqual(@as(usize, 0), before.frames[1]);
    var buf: [64]u8 = undefined;
    try f.send(h2.preface);
    try f.send(frame(&buf, 4, 0, 0, ""));
    got = try f.receive(&out);
    // The window from HTTP2-Settings holds the response to 10 bytes until the client opens it.
    try testing.expectEqual(@as(usize, 10), Frames.read(got).data[1]);
    try f.send(windowUpdate(&buf, 1, 1000));
    got = try f.receive(&out);
    const rest = Frames.read(got);
    try testing.expectEqual(@as(usize, 90), rest.data[1]);
    try testing.expectEqual(@as(?u32, null), rest.goaway);
    try testing.expectEqual(@as(u32, 0), f.server.streams);
}

test "h2c upgrade: a request with a body stays HTTP/1.1; after the 101 anything but the preface ends the connection" {
    {
        var f = try Fixture.init();
        defer f.deinit();
        try f.send("POST /b HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n" ++
            "HTTP2-Settings: AAQAAAAK\r\nContent-Length: 2\r\n\r\nhi");
        try testing.expectEqual(@as(usize, 1), rec.count);
        try testing.expectEqual(stream_mod.Protocol.http1, rec.requests[0].protocol);
        try respond(rec.requests[0], "ok");
        var out: [4096]u8 = undefined;
        try testing.expect(std.mem.startsWith(u8, try f.receive(&out), "HTTP/1.1 200 OK\r\n"));
    }
    var f = try Fixture.init();
    defer f.deinit();
    try f.send(h2c_upgrade_head);
    try respond(rec.requests[0], "ok");
    var out: [4096]u8 = undefined;
    _ = try f.receive(&out);
    try f.send("GET / HTTP/1.1\r\n\r\n");
    const got = try f.receive(&out);
    try testing.expectEqual(@as(?u32, 1), Frames.read(got).goaway);
    try testing.expect(f.peerClosed());
}

test "h2c upgrade off (the default): the request is HTTP/1.1's, the connection stays HTTP/1.1" {
    var opts = testOptions();
    opts.h2c_upgrade = false;
    var f = try Fixture.initWith(opts);
    defer f.deinit();
    try f.send(h2c_upgrade_head);
    try testing.expectEqual(@as(usize, 1), rec.count);
    try testing.expectEqual(stream_mod.Protocol.http1, rec.requests[0].protocol);
    try respond(rec.requests[0], "ok");
    var out: [4096]u8 = undefined;
    try testing.expect(std.mem.startsWith(u8, try f.receive(&out), "HTTP/1.1 200 OK\r\n"));
    // A second HTTP/1.1 request on the same connection is served as one.
    try f.send("GET /again HTTP/1.1\r\nHost: x\r\n\r\n");
    try testing.expectEqual(@as(usize, 2), rec.count);
    try testing.expectEqual(stream_mod.Protocol.http1, rec.requests[1].protocol);
    try respond(rec.requests[1], "ok");
    try testing.expect(std.mem.startsWith(u8, try f.receive(&out), "HTTP/1.1 200 OK\r\n"));
}

// ---- HTTP/2 output under load: what Java's HttpClient found (50 streams, 32 MiB window) ----

/// The server's end holds little in the socket: output beyond it stays in the queue.
fn shrinkServerSendBuffer(f: *Fixture) void {
    const size: i32 = 4096;
    _ = linux.setsockopt(f.conn.fd, linux.SOL.SOCKET, linux.SO.SNDBUF, std.mem.asBytes(&size), @sizeOf(i32));
}

/// Per stream (ids below 128): DATA bytes, HEADERS frames, END_STREAM seen.
const StreamFrames = struct {
    data: [128]usize = .{0} ** 128,
    heads: [128]u32 = .{0} ** 128,
    ended: [128]bool = .{false} ** 128,
    /// Bytes of a frame not yet whole, kept for the next read.
    partial: std.ArrayListUnmanaged(u8) = .{},

    fn feed(self: *StreamFrames, bytes: []const u8) !void {
        try self.partial.appendSlice(testing.allocator, bytes);
        var rest: []const u8 = self.partial.items;
        while (rest.len >= 9) {
            const len = std.mem.readInt(u24, rest[0..3], .big);
            if (rest.len < 9 + len) break;
            const id = std.mem.readInt(u32, rest[5..9], .big) & 0x7fff_ffff;
            if (id < 128) switch (rest[3]) {
                0 => self.data[id] += len,
                1 => self.heads[id] += 1,
                else => {},
            };
            if (id < 128 and (rest[3] == 0 or rest[3] == 1) and rest[4] & 1 != 0) self.ended[id] = true;
            rest = rest[9 + len ..];
        }
        std.mem.copyForwards(u8, self.partial.items[0..rest.len], rest);
        self.partial.items.len = rest.len;
    }

    /// Streams 1, 3, ... (n of them) all ended.
    fn allEnded(self: *const StreamFrames, n: usize) bool {
        for (0..n) |i| if (!self.ended[2 * i + 1]) return false;
        return true;
    }

    fn deinit(self: *StreamFrames) void {
        self.partial.deinit(testing.allocator);
    }
};

test "h2 output: frames read before reading paused are handled once the output drains, with nothing more from the client" {
    var f = try h2Fixture(null);
    defer f.deinit();
    shrinkServerSendBuffer(&f);
    var buf: [64]u8 = undefined;
    try f.send(frame(&buf, 1, 0x5, 1, &get_block));
    try testing.expectEqual(@as(usize, 1), rec.count);
    // A response head larger than the pause mark (after HPACK's Huffman coding): it waits
    // in the output queue.
    const big = try testing.allocator.alloc(u8, 2 * h2.read_pause_bytes);
    defer testing.allocator.free(big);
    @memset(big, 'a');
    const st = rec.requests[0];
    try st.startResponse(200, &.{.{ "x-big", big }}, &.{}, false);
    _ = try st.writeBody("", false, null);
    st.finish();
    _ = f.server.settleBegin();
    try testing.expect(f.conn.outputLen() > h2.read_pause_bytes);
    // A request arrives while the output is that long: read, then held (reading pauses).
    try f.send(frame(&buf, 1, 0x5, 3, &get_block));
    try testing.expectEqual(@as(usize, 1), rec.count);
    // The client reads everything and sends nothing more: the held request must still
    // reach the app (it waited for the client's next bytes, which never came).
    var seen = StreamFrames{};
    defer seen.deinit();
    var out: [64 * 1024]u8 = undefined;
    var rounds: usize = 0;
    while (rec.count < 2 and rounds < 2000) : (rounds += 1) try seen.feed(try f.receive(&out));
    try testing.expectEqual(@as(usize, 2), rec.count);
    try testing.expect(seen.ended[1]);
    try respond(rec.requests[1], "second");
    try seen.feed(try f.receive(&out));
    try testing.expectEqual(@as(usize, 6), seen.data[3]);
    try testing.expectEqual(@as(u32, 0), f.server.streams);
}

test "h2 output: with many streams sending, the queue stays near its target and every stream gets turns" {
    var f = try h2Fixture(1 << 24);
    defer f.deinit();
    shrinkServerSendBuffer(&f);
    var buf: [64]u8 = undefined;
    try f.send(windowUpdate(&buf, 0, 1 << 30));
    const n = 40;
    var reqs: [n * (9 + get_block.len)]u8 = undefined;
    for (0..n) |i| _ = frame(reqs[i * (9 + get_block.len) ..][0 .. 9 + get_block.len], 1, 0x5, @intCast(2 * i + 1), &get_block);
    try f.send(&reqs);
    try testing.expectEqual(@as(usize, n), rec.count);
    const body = try testing.allocator.alloc(u8, 64 * 1024);
    defer testing.allocator.free(body);
    @memset(body, 'b');
    for (rec.requests[0..n]) |st| try respond(st, body);
    _ = f.server.settleBegin();
    // One frame per stream per round used to go in at once: 40 x 16 KiB.
    try testing.expect(f.conn.outputLen() <= h2.fill_target + 16384 + 9);
    var seen = StreamFrames{};
    defer seen.deinit();
    var out: [64 * 1024]u8 = undefined;
    // Turns go round: after a little more than a frame each, every stream has begun.
    var rounds: usize = 0;
    var total: usize = 0;
    while (total < n * (16384 + 9 + 64) and rounds < 2000) : (rounds += 1) {
        const got = try f.receive(&out);
        total += got.len;
        try seen.feed(got);
    }
    for (0..n) |i| try testing.expectEqual(@as(u32, 1), seen.heads[2 * i + 1]);
    rounds = 0;
    while (rounds < 5000 and !seen.allEnded(n)) : (rounds += 1) try seen.feed(try f.receive(&out));
    for (0..n) |i| {
        try testing.expectEqual(body.len, seen.data[2 * i + 1]);
        try testing.expect(seen.ended[2 * i + 1]);
    }
}

test "h2 output: with the connection window shut, a new stream's HEADERS still go, and a WINDOW_UPDATE resumes the DATA" {
    var f = try h2Fixture(1 << 24);
    defer f.deinit();
    var buf: [64]u8 = undefined;
    var out: [256 * 1024]u8 = undefined;
    try f.send(frame(&buf, 1, 0x5, 1, &get_block));
    const body = try testing.allocator.alloc(u8, 100 * 1024);
    defer testing.allocator.free(body);
    @memset(body, 'c');
    try respond(rec.requests[0], body);
    var seen = StreamFrames{};
    defer seen.deinit();
    try seen.feed(try f.receive(&out));
    // The connection window (65535) is spent on stream 1.
    try testing.expectEqual(@as(usize, 65535), seen.data[1]);
    try f.send(frame(&buf, 1, 0x5, 3, &get_block));
    try respond(rec.requests[1], "three");
    try seen.feed(try f.receive(&out));
    try testing.expectEqual(@as(u32, 1), seen.heads[3]);
    try testing.expectEqual(@as(usize, 0), seen.data[3]);
    try f.send(windowUpdate(&buf, 0, 1 << 20));
    try seen.feed(try f.receive(&out));
    try testing.expectEqual(body.len, seen.data[1]);
    try testing.expectEqual(@as(usize, 5), seen.data[3]);
    try testing.expect(seen.ended[1] and seen.ended[3]);
    try testing.expectEqual(@as(u32, 0), f.server.streams);
}

// ---- io_uring: reads are level-triggered, as on epoll ------------------------------------
//
// These run on io_uring whatever ZIGCORN_IO_BACKEND says (skipped where the kernel refuses
// it): a completion comes once, so whatever is already in the ring when a connection stops
// reading must be reported again by the backend itself, or never.

const uring_mod = @import("../os/io_uring.zig");

/// A fixture whose server runs on io_uring; skipped where the server fell back to epoll.
fn uringFixture() !Fixture {
    var opts = testOptions();
    opts.io.kind = .io_uring;
    var f = try Fixture.initWith(opts);
    if (f.server.io.uring == null) {
        f.deinit();
        return error.SkipZigTest;
    }
    return f;
}

/// The bytes and the end of the stream, both written before the server reads either (a
/// half-close: the server's own writes still go through).
fn sendThenHalfClose(f: *Fixture, bytes: []const u8) !void {
    try testing.expectEqual(bytes.len, sys.writev(f.client, &.{.{ .base = bytes.ptr, .len = bytes.len }}).ok);
    sys.shutdownWrite(f.client);
}

test "io_uring: an HTTP/2 client that half-closes right after its last bytes is seen gone" {
    var f = try uringFixture();
    defer f.deinit();
    var buf: [256]u8 = undefined;
    var request: [256]u8 = undefined;
    var len: usize = 0;
    for ([_][]const u8{ h2.preface, &[_]u8{ 0, 0, 0, 4, 0, 0, 0, 0, 0 }, frame(&buf, 1, 0x5, 1, &get_block) }) |part| {
        @memcpy(request[len..][0..part.len], part);
        len += part.len;
    }
    try sendThenHalfClose(&f, request[0..len]);
    for (0..10) |_| f.server.poll();
    try testing.expectEqual(@as(usize, 1), rec.count);
    const st = rec.requests[0];
    // The end of the stream came behind the request's last bytes: it closes the connection.
    try testing.expect(st.gone());
    st.finish();
    f.server.poll();
    try testing.expectEqual(@as(u32, 0), f.server.connections);
}

test "io_uring: a head cut short by the client's end of stream closes the connection at once" {
    var f = try uringFixture();
    defer f.deinit();
    try sendThenHalfClose(&f, "GET / HTTP/1.1\r\nHost: x\r\n");
    for (0..10) |_| f.server.poll();
    try testing.expectEqual(@as(usize, 0), rec.count);
    // Not after the header timeout (30 s here): now.
    try testing.expectEqual(@as(u32, 0), f.server.connections);
    try testing.expect(f.peerClosed());
}

test "io_uring backend: a read event not read from comes again; an end of stream behind the last held bytes is reported" {
    const u = uring_mod.Uring.init(.{ .buffers = 16, .buffer_bytes = 4096 }) catch return error.SkipZigTest;
    defer u.deinit();
    var fds: [2]i32 = undefined;
    try testing.expectEqual(sys.E.SUCCESS, sys.E.init(linux.socketpair(linux.AF.UNIX, linux.SOCK.STREAM | linux.SOCK.NONBLOCK | linux.SOCK.CLOEXEC, 0, &fds)));
    defer sys.close(fds[1]);
    var owner: u8 = 0;
    const token = @intFromPtr(&owner);
    try testing.expect(u.register(fds[0], token, true, false));
    defer u.close(fds[0]);
    try testing.expectEqual(@as(usize, 5), sys.writev(fds[1], &.{.{ .base = "hello", .len = 5 }}).ok);
    sys.shutdownWrite(fds[1]);
    var events: [8]uring_mod.Event = undefined;
    // The bytes and then the end of the stream complete into the slot.
    var reads: usize = 0;
    var rounds: usize = 0;
    while (!u.table.slots[@intCast(fds[0])].eof) : (rounds += 1) {
        try testing.expect(rounds < 1000);
        reads += countReads(events[0..u.wait(&events)], token);
        u.rearm();
        std.Thread.sleep(std.time.ns_per_ms);
    }
    try testing.expect(reads >= 1);
    // The connection did not call `recv` (a TLS read served from OpenSSL's own buffer does
    // not): what is held is reported again, as epoll reports a socket still readable.
    for (0..3) |_| {
        try testing.expectEqual(@as(usize, 1), countReads(events[0..u.wait(&events)], token));
        u.rearm();
    }
    // It takes the bytes, the last held: the end of the stream behind them comes next pass.
    var buf: [64]u8 = undefined;
    try testing.expectEqual(@as(usize, 5), u.recv(fds[0], &buf).ok);
    u.rearm();
    try testing.expectEqual(@as(usize, 1), countReads(events[0..u.wait(&events)], token));
    try testing.expectEqual(@as(usize, 0), u.recv(fds[0], &buf).ok);
    // Nothing else is there, but the end of the stream stays readable (level-triggered).
    u.rearm();
    try testing.expectEqual(@as(usize, 1), countReads(events[0..u.wait(&events)], token));
    // A connection that stops reading hears nothing more.
    try testing.expect(u.update(fds[0], false, false));
    u.rearm();
    try testing.expectEqual(@as(usize, 0), countReads(events[0..u.wait(&events)], token));
}

fn countReads(events: []const uring_mod.Event, token: usize) usize {
    var n: usize = 0;
    for (events) |e| n += @intFromBool(e.token == token and e.readable);
    return n;
}
