//! Unit tests of the HTTP/2 session past single frames: the output scheduler, every
//! allocation failing in turn, the engine's own answers, padding, PRIORITY and Rapid
//! Reset, WebSocket's extended CONNECT (RFC 8441), the drain and readiness. On byte
//! slices, with the harness of `testing/h2_harness.zig` (as `session_tests.zig`).
const std = @import("std");
const testing = std.testing;
const h2 = @import("session.zig");
const frames = @import("frames.zig");
const hpack = @import("hpack.zig");
const outq = @import("../transport/output_queue.zig");
const Conn = @import("../core/connection.zig").Conn;
const Stream = @import("../core/stream.zig").Stream;
const server_mod = @import("../core/server.zig");
const test_server = @import("../testing/test_server.zig");
const rec = &test_server.rec;

const ErrorCode = frames.ErrorCode;
const FrameType = frames.FrameType;
const window_max: u32 = @intCast(frames.window_max);
const window_default = frames.initial_window_default;
const frame_header_bytes = frames.header_bytes;
/// Stream ids the summaries keep apart (client streams 1, 3, ... 61).
const ids_max = 64;
const harness = @import("../testing/h2_harness.zig");
const Seen = harness.Seen;
const code = harness.code;
const Harness = harness.Harness;
const be32 = harness.be32;
const end_stream = harness.end_stream;
const end_headers = harness.end_headers;
const end_both = harness.end_both;
const get_block = harness.get_block;
const post5_block = harness.post5_block;
const get = harness.get;
const openPost = harness.openPost;
const windowUpdate = harness.windowUpdate;
const settings = harness.settings;
const expectGoaway = harness.expectGoaway;

// ---- the output scheduler --------------------------------------------------------------

/// Streams 1, 3, ... each answered with `body`, windows opened wide.
fn answerMany(h: *Harness, count: usize, body: []const u8) !void {
    try settings(h, frames.setting_initial_window_size, window_max);
    try windowUpdate(h, 0, window_max - window_default);
    for (0..count) |i| try get(h, @intCast(2 * i + 1));
    for (0..count) |i| try h.respond(i, body);
}

test "h2 session scheduler: streams take turns, one DATA frame each" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    const streams = 3;
    const frames_each = 4;
    try answerMany(&h, streams, &([_]u8{'r'} ** (h2.frame_size_max * frames_each)));
    var s = Seen{};
    for (0..streams * frames_each) |_| {
        h.drain();
        while (h.sink.next()) |f| s.add(f);
    }
    try testing.expectEqual(@as(usize, streams * frames_each), s.data_order_len);
    // In every run of `streams` consecutive frames each stream appears once.
    var at: usize = 0;
    while (at + streams <= s.data_order_len) : (at += streams) {
        var mask: u32 = 0;
        for (s.data_order[at..][0..streams]) |id| mask |= @as(u32, 1) << @intCast(id / 2);
        try testing.expectEqual(@as(u32, (1 << streams) - 1), mask);
    }
}

test "h2 session scheduler: one pass queues up to the output target and one frame more, not every stream's" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    const streams = 20;
    try answerMany(&h, streams, &([_]u8{'t'} ** (h2.frame_size_max * 2)));
    h.drain();
    const one_frame = frame_header_bytes + h2.frame_size_max;
    try testing.expect(h.sink.pending >= h2.fill_target);
    try testing.expect(h.sink.pending < h2.fill_target + one_frame);
    // Nothing more while the peer reads nothing.
    const before = h.sink.pending;
    h.pump();
    try testing.expectEqual(before, h.sink.pending);
    // Every stream's body goes out in the end.
    for (0..4 * streams) |_| h.drain();
    const s = h.sink.seen();
    for (0..streams) |i| try testing.expectEqual(@as(usize, h2.frame_size_max * 2), s.data[2 * i + 1]);
}

test "h2 session scheduler: a stream blocked on its window does not hold back the others" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try settings(&h, frames.setting_initial_window_size, 0);
    try get(&h, 1);
    try get(&h, 3);
    try h.respond(0, "a" ** 100);
    try h.respond(1, "b" ** 100);
    h.pump();
    var s = h.sink.seen();
    // Both heads go (HEADERS are not flow-controlled), no DATA.
    try testing.expectEqual(@as(usize, 1), s.headers[1]);
    try testing.expectEqual(@as(usize, 1), s.headers[3]);
    try testing.expectEqual(@as(usize, 0), s.data[1] + s.data[3]);
    try windowUpdate(&h, 3, 100);
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(usize, 100), s.data[3]);
    try testing.expectEqual(@as(usize, 0), s.data[1]);
    try windowUpdate(&h, 1, 40);
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(usize, 40), s.data[1]);
}

test "h2 session scheduler: a writer past its mark waits and is woken as its frames go" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try settings(&h, frames.setting_initial_window_size, 0);
    try get(&h, 1);
    const st = h.request(0);
    try st.startResponse(200, &.{}, &.{}, false);
    const big = try testing.allocator.alloc(u8, 1 << 20);
    defer testing.allocator.free(big);
    @memset(big, 'w');
    try testing.expect(try st.writeBody(big, true, null));
    const wakes = h.sink.wake_writes;
    try windowUpdate(&h, 1, window_max - window_default);
    try windowUpdate(&h, 0, window_max - window_default);
    for (0..big.len / h2.fill_target + 2) |_| h.drain();
    try testing.expect(h.sink.wake_writes > wakes);
    try testing.expect(!st.write_blocked);
    _ = try st.writeBody("", false, null);
    h.finishRequest(0);
    h.drain();
    const s = h.sink.seen();
    try testing.expectEqual(big.len, s.data[1]);
    try testing.expect(s.end_stream[1]);
}

test "h2 session scheduler: a header block larger than the peer's frame size goes as HEADERS and CONTINUATION" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try get(&h, 1);
    const st = h.request(0);
    const value = [_]u8{'v'} ** 8000;
    try st.startResponse(200, &.{ .{ "x-a", &value }, .{ "x-b", &value }, .{ "x-c", &value } }, &.{}, false);
    _ = try st.writeBody("", false, null);
    h.finishRequest(0);
    h.pump();
    var headers: usize = 0;
    var continuations: usize = 0;
    var last_flags: u8 = 0;
    while (h.sink.next()) |f| switch (f.type) {
        .headers => headers += 1,
        .continuation => {
            continuations += 1;
            last_flags = f.flags;
        },
        else => {},
    };
    try testing.expectEqual(@as(usize, 1), headers);
    try testing.expect(continuations >= 1);
    try testing.expect(last_flags & end_headers != 0);
}

// ---- out of memory --------------------------------------------------------------------

/// A connection's life: two requests (one with a body), their answers, a PING.
fn lifeWithFailures(h: *Harness) !void {
    try h.send(.settings, 0, 0, "");
    try get(h, 1);
    try h.send(.headers, end_headers, 3, &post5_block);
    try h.send(.data, end_stream, 3, "abcde");
    for (0..rec.count) |i| {
        const st = h.request(i);
        answer(st) catch |e| try testing.expectEqual(error.OutOfMemory, e);
        h.finishRequest(i);
    }
    try h.send(.ping, 0, 0, "12345678");
    h.pump();
}

fn answer(st: *Stream) !void {
    try st.startResponse(200, &.{.{ "content-type", "text/plain" }}, &.{}, false);
    _ = try st.writeBody(&([_]u8{'m'} ** 5000), false, null);
}

test "h2 session: an allocation failing at any point ends a stream or the connection cleanly, no leak" {
    var fail_index: usize = 0;
    while (true) : (fail_index += 1) {
        var failing = std.testing.FailingAllocator.init(testing.allocator, .{ .fail_index = fail_index });
        var h: Harness = undefined;
        try h.start(failing.allocator(), test_server.testOptions());
        defer h.deinit();
        try lifeWithFailures(&h);
        const s = h.sink.seen();
        if (!failing.has_induced_failure) {
            // Every allocation succeeded: both answers went whole.
            try testing.expectEqual(@as(?u32, null), s.goaway);
            try testing.expect(s.end_stream[1] and s.end_stream[3]);
            break;
        }
        // A failure shows: the connection closed (with GOAWAY, or at once when the
        // session itself could not be made), or each stream ended, at least one of them
        // reset or answered 500 by the engine.
        if (!h.live() or s.goaway != null) continue;
        for ([_]u32{ 1, 3 }) |id| try testing.expect(s.end_stream[id] or s.rst[id] != null);
        try testing.expect(s.rst[1] != null or s.rst[3] != null or s.status_500 > 0);
    }
    try testing.expect(fail_index > 3);
}

/// :method GET, :scheme http, :path /h (a literal), :authority x.
const health_block = [_]u8{ 0x82, 0x86, 0x04, 0x02, '/', 'h', 0x41, 0x01, 'x' };
/// :method POST, :scheme http, :path /, :authority x, content-length 2000000 (past the body limit).
const post_big_block = [_]u8{ 0x83, 0x86, 0x84, 0x41, 0x01, 'x', 0x0f, 0x0d, 0x07, '2', '0', '0', '0', '0', '0', '0' };

/// The engine's own answers (a health path, a 413) and an app's answer with an early
/// hint and trailers.
fn engineAnswersWithFailures(h: *Harness) !void {
    try h.send(.settings, 0, 0, "");
    try h.send(.headers, end_both, 1, &health_block);
    try h.send(.headers, end_headers, 3, &post_big_block);
    try get(h, 5);
    for (0..rec.count) |i| {
        const st = h.request(i);
        answerWithTrailers(st) catch |e| try testing.expectEqual(error.OutOfMemory, e);
        h.finishRequest(i);
    }
    h.pump();
}

fn answerWithTrailers(st: *Stream) !void {
    try st.earlyHint(&.{"</style.css>; rel=preload"});
    try st.startResponse(200, &.{}, &.{}, true);
    _ = try st.writeBody("body", false, null);
    _ = try st.writeTrailers(&.{.{ "x-checksum", "1" }}, false);
}

fn healthOptions() server_mod.Options {
    var opts = test_server.testOptions();
    opts.health_path = "/h";
    return opts;
}

test "h2 session: the engine's own answers (health, 413) and early hints and trailers, with every allocation failing in turn" {
    var fail_index: usize = 0;
    while (true) : (fail_index += 1) {
        var failing = std.testing.FailingAllocator.init(testing.allocator, .{ .fail_index = fail_index });
        var h: Harness = undefined;
        try h.start(failing.allocator(), healthOptions());
        defer h.deinit();
        try engineAnswersWithFailures(&h);
        const s = h.sink.seen();
        if (!failing.has_induced_failure) {
            try testing.expectEqual(@as(?u32, null), s.goaway);
            for ([_]u32{ 1, 3, 5 }) |id| try testing.expect(s.end_stream[id]);
            // The app's stream: 103, 200, trailers.
            try testing.expectEqual(@as(usize, 3), s.headers[5]);
            try testing.expectEqual(@as(usize, 1), rec.count);
            break;
        }
        if (!h.live() or s.goaway != null) continue;
        for ([_]u32{ 1, 3, 5 }) |id| try testing.expect(s.end_stream[id] or s.rst[id] != null);
    }
    try testing.expect(fail_index > 3);
}

test "h2 session: the engine answers a health path and a body too large without the app" {
    var h: Harness = undefined;
    try h.start(testing.allocator, healthOptions());
    defer h.deinit();
    try h.send(.settings, 0, 0, "");
    try h.send(.headers, end_both, 1, &health_block);
    try h.send(.headers, end_headers, 3, &post_big_block);
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(@as(usize, 0), rec.count);
    try testing.expect(s.end_stream[1] and s.data[1] > 0);
    try testing.expect(s.end_stream[3]);
    try testing.expectEqual(@as(?u32, null), s.rst[1]);
    try testing.expectEqual(@as(u32, 0), h.session().held);
}

test "h2 session: a refused request (the app side takes no more) is answered 500" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    rec.refuse = true;
    try get(&h, 1);
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(@as(usize, 1), s.status_500);
    try testing.expect(s.end_stream[1]);
}

test "h2 session: an app that ends without a response gets 500; one that ends mid-body resets the stream" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try get(&h, 1);
    try get(&h, 3);
    h.finishRequest(0);
    const st = h.request(1);
    try st.startResponse(200, &.{}, &.{}, false);
    _ = try st.writeBody("part", true, null);
    h.finishRequest(1);
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(@as(usize, 1), s.status_500);
    try testing.expect(s.end_stream[1]);
    try testing.expectEqual(code(.internal), s.rst[3]);
}

test "h2 session: the socket closing wakes every app still running; the streams end" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    try get(&h, 3);
    const wakes = h.sink.wake_reads;
    h.conn().close();
    try testing.expect(h.sink.wake_reads >= wakes + 2);
    try testing.expect(h.request(0).gone() and h.request(1).gone());
}

// ---- padding, PRIORITY, Rapid Reset ------------------------------------------------------

test "h2 session: padded DATA: the padding is credited back at once, a pad length past the frame is PROTOCOL_ERROR" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    // Pad length 3: "ab" then three bytes of padding.
    try h.send(.data, frames.flag_padded, 1, &[_]u8{ 3, 'a', 'b', 0, 0, 0 });
    const st = h.session().first.?;
    try testing.expectEqualStrings("ab", st.body.items);
    try testing.expectEqual(@as(u32, 4), st.recv_unacked);
    try h.send(.data, frames.flag_padded, 1, &[_]u8{ 5, 'a', 'b', 0, 0 });
    try expectGoaway(&h, .protocol);
}

test "h2 session: PRIORITY: 5 bytes or a stream error, a stream depending on itself is reset" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    try openPost(&h, 3);
    try h.send(.priority, 0, 1, &[_]u8{ 0, 0, 0, 3, 16 });
    try h.send(.priority, 0, 3, &[_]u8{ 0, 0, 0, 3, 16 });
    try h.send(.priority, 0, 5, &[_]u8{ 0, 0, 0, 1 });
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(@as(?u32, null), s.rst[1]);
    try testing.expectEqual(code(.protocol), s.rst[3]);
    try testing.expectEqual(code(.frame_size), s.rst[5]);
    try testing.expectEqual(@as(?u32, null), s.goaway);
}

test "h2 session: HEADERS whose priority names the stream itself reset it after decoding" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try h.send(.headers, end_both | frames.flag_priority, 1, &([_]u8{ 0, 0, 0, 1, 16 } ++ get_block));
    try get(&h, 3);
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(code(.protocol), s.rst[1]);
    try testing.expectEqual(@as(usize, 1), rec.count);
    try testing.expectEqual(@as(?u32, null), s.goaway);
}

test "h2 session: Rapid Reset: streams reset while their apps run, past the budget per second, end the connection" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    // The clock stands still in the test: every reset falls in the same second.
    for (0..h2.resets_per_second_max) |i| {
        const id: u32 = @intCast(2 * i + 1);
        try openPost(&h, id);
        try testing.expectEqual(@as(usize, 1), rec.count);
        try h.send(.rst_stream, 0, id, &be32(@intFromEnum(ErrorCode.cancel)));
        // The app sees the reset and ends; the recorder's one slot is free again.
        h.finishRequest(0);
        rec.count = 0;
        h.finished[0] = false;
    }
    h.pump();
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
    const id: u32 = @intCast(2 * h2.resets_per_second_max + 1);
    try openPost(&h, id);
    try h.send(.rst_stream, 0, id, &be32(@intFromEnum(ErrorCode.cancel)));
    try expectGoaway(&h, .enhance_your_calm);
}

// ---- WebSocket over HTTP/2 (RFC 8441): the extended CONNECT ------------------------------

/// :method CONNECT, :protocol `protocol`, :scheme http, :path /, :authority x, and
/// sec-websocket-version `version` (when given).
fn connectBlock(buf: []u8, protocol: []const u8, version: ?[]const u8) []const u8 {
    var n: usize = 0;
    const parts = [_][]const u8{ &[_]u8{ 0x02, 7 }, "CONNECT", &[_]u8{ 0x00, 9 }, ":protocol", &[_]u8{@intCast(protocol.len)}, protocol, &[_]u8{ 0x86, 0x84, 0x41, 0x01, 'x' } };
    for (parts) |p| {
        @memcpy(buf[n..][0..p.len], p);
        n += p.len;
    }
    if (version) |v| {
        const name = "sec-websocket-version";
        for ([_][]const u8{ &[_]u8{ 0x00, name.len }, name, &[_]u8{@intCast(v.len)}, v }) |p| {
            @memcpy(buf[n..][0..p.len], p);
            n += p.len;
        }
    }
    return buf[0..n];
}

fn wsOptions() server_mod.Options {
    var opts = test_server.testOptions();
    opts.ws_enabled = true;
    return opts;
}

test "h2 session RFC 8441: SETTINGS_ENABLE_CONNECT_PROTOCOL is offered when WebSockets are on" {
    var h: Harness = undefined;
    try h.start(testing.allocator, wsOptions());
    defer h.deinit();
    const f = h.sink.next().?;
    try testing.expectEqual(FrameType.settings, f.type);
    var offered = false;
    var at: usize = 0;
    while (at + 6 <= f.payload.len) : (at += 6) {
        if (std.mem.readInt(u16, f.payload[at..][0..2], .big) == frames.setting_enable_connect_protocol)
            offered = std.mem.readInt(u32, f.payload[at + 2 ..][0..4], .big) == 1;
    }
    try testing.expect(offered);
}

test "h2 session RFC 8441: a WebSocket CONNECT reaches the app; another protocol is 501, another version 426" {
    var h: Harness = undefined;
    try h.start(testing.allocator, wsOptions());
    defer h.deinit();
    try h.send(.settings, 0, 0, "");
    var buf: [128]u8 = undefined;
    try h.send(.headers, end_headers, 1, connectBlock(&buf, "websocket", "13"));
    try testing.expectEqual(@as(usize, 1), rec.count);
    try testing.expect(h.session().first.?.ws != null);
    try h.send(.headers, end_headers, 3, connectBlock(&buf, "chat", "13"));
    try h.send(.headers, end_headers, 5, connectBlock(&buf, "websocket", "8"));
    try h.send(.headers, end_headers, 7, connectBlock(&buf, "websocket", null));
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(@as(usize, 1), rec.count);
    try testing.expectEqual(@as(u16, 501), s.status[3]);
    try testing.expectEqual(@as(u16, 426), s.status[5]);
    try testing.expectEqual(@as(u16, 426), s.status[7]);
}

test "h2 session RFC 8441: with WebSockets off a CONNECT with :protocol is malformed" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    var buf: [128]u8 = undefined;
    try h.send(.headers, end_headers, 1, connectBlock(&buf, "websocket", "13"));
    h.pump();
    try testing.expectEqual(code(.protocol), h.sink.seen().rst[1]);
    try testing.expectEqual(@as(usize, 0), rec.count);
}

test "h2 session: a drain's first GOAWAY names every stream, the final one the last read once the PING comes back" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try get(&h, 1);
    try h.respond(0, "one");
    h.drain();
    _ = h.sink.seen();

    h.fixture.server.draining = true;
    h2.drainStarted(h.conn());
    var s = h.sink.seen();
    try testing.expectEqual(@as(usize, 1), s.goaways);
    try testing.expectEqual(frames.stream_id_max, s.goaway_last_id);
    try testing.expectEqual(@as(u32, 0x7fff_ffff), s.goaway_last_id);
    try testing.expectEqual(@as(?u32, 0), s.goaway);
    try testing.expectEqual(@as(usize, 1), s.pings);
    try testing.expectEqualSlices(u8, &h2.drain_ping_payload, &s.ping_payload);
    // Once more does nothing: one GOAWAY and one PING per drain.
    h2.drainStarted(h.conn());
    try testing.expectEqual(@as(usize, 0), h.sink.seen().frames);

    // A stream sent before the client saw the GOAWAY is still taken and answered.
    try get(&h, 3);
    try testing.expectEqual(@as(usize, 2), rec.count);
    // Another PING's ack (not ours) changes nothing.
    try h.send(.ping, frames.flag_ack, 0, "other!!!");
    try testing.expectEqual(@as(usize, 0), h.sink.seen().goaways);
    try h.send(.ping, frames.flag_ack, 0, &h2.drain_ping_payload);
    s = h.sink.seen();
    try testing.expectEqual(@as(usize, 1), s.goaways);
    try testing.expectEqual(@as(u32, 3), s.goaway_last_id);
    // After the final GOAWAY a new stream is not taken; the one in flight finishes.
    try get(&h, 5);
    try testing.expectEqual(@as(usize, 2), rec.count);
    try h.respond(1, "three");
    h.drain();
    s = h.sink.seen();
    try testing.expect(s.end_stream[3]);
    try testing.expectEqual(@as(usize, 0), s.goaways);
}

test "h2 session: a connection that begins while the server drains is told to go after its preface" {
    var h: Harness = undefined;
    var opts = test_server.testOptions();
    _ = &opts;
    h = .{ .fixture = try test_server.Fixture.initWith(opts) };
    h.fixture.server.draining = true;
    const c = h.fixture.conn;
    _ = c.ensureActive() orelse return error.OutOfMemory;
    h2.beginWith(c, testing.allocator, h.sink.sink());
    defer h.deinit();
    const first = h.sink.next().?;
    try testing.expectEqual(FrameType.settings, first.type);
    const s = h.sink.seen();
    try testing.expectEqual(@as(usize, 1), s.goaways);
    try testing.expectEqual(frames.stream_id_max, s.goaway_last_id);
    try testing.expectEqual(@as(usize, 1), s.pings);
}

test "h2 session: before the server is ready the health path says 200, the ready path and every request 503; then 200, and 503 again from the drain" {
    var h: Harness = undefined;
    var opts = test_server.testOptions();
    opts.health_path = "/h";
    opts.ready_path = "/r";
    try h.start(testing.allocator, opts);
    defer h.deinit();
    h.fixture.server.ready = false;
    try h.send(.settings, 0, 0, "");
    // :method GET, :scheme http, :path /r (or /h), :authority x.
    const ready_block = [_]u8{ 0x82, 0x86, 0x04, 0x02, '/', 'r', 0x41, 0x01, 'x' };
    try h.send(.headers, end_both, 1, &ready_block);
    try h.send(.headers, end_both, 3, &health_block);
    try get(&h, 5);
    h.pump();
    var s = h.sink.seen();
    try testing.expectEqual(@as(usize, 0), rec.count);
    try testing.expectEqual(@as(u16, 503), s.status[1]);
    try testing.expectEqual(@as(u16, 200), s.status[3]);
    try testing.expectEqual(@as(u16, 503), s.status[5]);
    h.fixture.server.ready = true;
    try h.send(.headers, end_both, 7, &ready_block);
    try get(&h, 9);
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(u16, 200), s.status[7]);
    try testing.expectEqual(@as(usize, 1), rec.count);
    h.fixture.server.draining = true;
    try h.send(.headers, end_both, 11, &ready_block);
    try h.send(.headers, end_both, 13, &health_block);
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(u16, 503), s.status[11]);
    try testing.expectEqual(@as(u16, 503), s.status[13]);
}
