//! Unit tests of the HTTP/2 session on byte slices. A test feeds the client's frames
//! into the connection's read buffer and calls `process`; the session's output and the
//! wakes it raises go to a recording `Sink`, read back as frames. No byte crosses a
//! socket (the connection is a real `Conn` of a real `Server`, whose socket stays
//! unused), and the session's memory comes from the test's allocator:
//! `std.testing.allocator` (a leak fails the test) or a `FailingAllocator` (every
//! allocation from some point on fails: the connection must end cleanly).
//!
//! The harness is `testing/h2_harness.zig`; the session's life past single frames
//! (output, memory, its own answers, RFC 8441, the drain) is `session_life_tests.zig`.
//!
//!     python -m ziglang test -lc -I <python include> src/zig/unit_tests.zig --test-filter "h2 session"
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
const code = harness.code;
const Harness = harness.Harness;
const wire = harness.wire;
const be32 = harness.be32;
const setting = harness.setting;
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

// ---- flow control: the windows we send on ----------------------------------------------

test "h2 session: the connection window grows to exactly 2^31-1; one more is FLOW_CONTROL_ERROR" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try windowUpdate(&h, 0, window_max - window_default);
    try testing.expectEqual(@as(i64, window_max), h.session().send_window);
    h.pump();
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
    try windowUpdate(&h, 0, 1);
    try expectGoaway(&h, .flow_control);
    try testing.expect(!h.live() or h.session().dead);
}

test "h2 session: a stream window grows to exactly 2^31-1; one more resets that stream only" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    try openPost(&h, 3);
    try windowUpdate(&h, 1, window_max - window_default);
    h.pump();
    var s = h.sink.seen();
    try testing.expectEqual(@as(?u32, null), s.rst[1]);
    try windowUpdate(&h, 1, 1);
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(code(.flow_control), s.rst[1]);
    try testing.expectEqual(@as(?u32, null), s.goaway);
    // The other stream goes on.
    try h.respond(1, "ok");
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(usize, 2), s.data[3]);
    try testing.expectEqual(@as(usize, 0), s.data[1]);
}

test "h2 session: a zero WINDOW_UPDATE is a connection error on stream 0, a stream error on a stream" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    try windowUpdate(&h, 1, 0);
    h.pump();
    var s = h.sink.seen();
    try testing.expectEqual(code(.protocol), s.rst[1]);
    try testing.expectEqual(@as(?u32, null), s.goaway);
    try windowUpdate(&h, 0, 0);
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(code(.protocol), s.goaway);
}

test "h2 session: WINDOW_UPDATE of other than 4 bytes, or on an idle stream, is a connection error" {
    {
        var h: Harness = undefined;
        try h.open(testing.allocator);
        defer h.deinit();
        try h.send(.window_update, 0, 0, &[_]u8{ 0, 0, 1 });
        try expectGoaway(&h, .frame_size);
    }
    {
        var h: Harness = undefined;
        try h.open(testing.allocator);
        defer h.deinit();
        try windowUpdate(&h, 7, 1);
        try expectGoaway(&h, .protocol);
    }
}

test "h2 session: SETTINGS_INITIAL_WINDOW_SIZE 2^31-1 is taken, 2^31 is FLOW_CONTROL_ERROR" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try settings(&h, frames.setting_initial_window_size, window_max);
    try testing.expectEqual(@as(i64, window_max), h.session().peer_initial_window);
    h.pump();
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
    try settings(&h, frames.setting_initial_window_size, window_max + 1);
    try expectGoaway(&h, .flow_control);
}

test "h2 session: SETTINGS_INITIAL_WINDOW_SIZE changes apply to open streams, down to negative windows" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try settings(&h, frames.setting_initial_window_size, 10);
    try get(&h, 1);
    try h.respond(0, "a" ** 100);
    h.pump();
    var s = h.sink.seen();
    try testing.expectEqual(@as(usize, 10), s.data[1]);
    // 0 now: the stream has used 10 of a window that is now 0, so it is -10.
    try settings(&h, frames.setting_initial_window_size, 0);
    const st = h.session().first.?;
    try testing.expectEqual(@as(i64, -10), st.send_window);
    try windowUpdate(&h, 1, 10);
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(usize, 0), s.data[1]);
    try testing.expectEqual(@as(i64, 0), st.send_window);
    // An increase lifts it by the difference: 0 -> 30 is +30.
    try settings(&h, frames.setting_initial_window_size, 30);
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(usize, 30), s.data[1]);
    try windowUpdate(&h, 1, 1000);
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(usize, 60), s.data[1]);
    try testing.expect(s.end_stream[1]);
}

test "h2 session: a SETTINGS increase that lifts an open stream past 2^31-1 is FLOW_CONTROL_ERROR" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    try windowUpdate(&h, 1, window_max - window_default);
    try settings(&h, frames.setting_initial_window_size, window_default + 1);
    try expectGoaway(&h, .flow_control);
}

test "h2 session: many 1-byte WINDOW_UPDATEs let out one byte each, none more" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try settings(&h, frames.setting_initial_window_size, 0);
    try get(&h, 1);
    try h.respond(0, "b" ** 50);
    h.pump();
    var s = h.sink.seen();
    try testing.expectEqual(@as(usize, 1), s.headers[1]);
    try testing.expectEqual(@as(usize, 0), s.data[1]);
    for (1..51) |sent| {
        try windowUpdate(&h, 1, 1);
        h.pump();
        s = h.sink.seen();
        try testing.expectEqual(@as(usize, 1), s.data[1]);
        try testing.expectEqual(sent == 50, s.end_stream[1]);
    }
    try testing.expectEqual(@as(?u32, null), s.goaway);
}

test "h2 session: the connection window is shared: streams stop together when it is used up" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try settings(&h, frames.setting_initial_window_size, 1 << 20);
    try get(&h, 1);
    try get(&h, 3);
    const body = "c" ** 40_000;
    try h.respond(0, body);
    try h.respond(1, body);
    h.pump();
    var s = h.sink.seen();
    try testing.expectEqual(@as(usize, window_default), s.data[1] + s.data[3]);
    try testing.expectEqual(@as(i64, 0), h.session().send_window);
    try windowUpdate(&h, 0, 2 * body.len - window_default);
    // The peer read what went (past the output target nothing more is queued).
    h.drain();
    s = h.sink.seen();
    try testing.expectEqual(@as(usize, 2 * body.len - window_default), s.data[1] + s.data[3]);
    try testing.expect(s.end_stream[1] and s.end_stream[3]);
}

// ---- flow control: the windows we grant ----------------------------------------------

test "h2 session: a request body up to the stream window is taken, one byte more resets the stream" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    const chunk = [_]u8{'d'} ** h2.frame_size_max;
    for (0..h2.stream_window / chunk.len) |_| try h.send(.data, 0, 1, &chunk);
    h.pump();
    var s = h.sink.seen();
    try testing.expectEqual(@as(?u32, null), s.rst[1]);
    try h.send(.data, 0, 1, "x");
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(code(.flow_control), s.rst[1]);
    try testing.expectEqual(@as(?u32, null), s.goaway);
}

test "h2 session: the connection window bounds all bodies together: past it is a connection error" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    const chunk = [_]u8{'e'} ** h2.frame_size_max;
    const streams = h2.connection_window / h2.stream_window;
    for (0..streams) |i| {
        const id: u32 = @intCast(2 * i + 1);
        try openPost(&h, id);
        for (0..h2.stream_window / chunk.len) |_| try h.send(.data, 0, id, &chunk);
    }
    h.pump();
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
    try testing.expectEqual(@as(i64, 0), h.session().recv_window);
    try openPost(&h, 2 * streams + 1);
    try h.send(.data, 0, 2 * streams + 1, "x");
    try expectGoaway(&h, .flow_control);
}

test "h2 session: body the app reads is credited back by WINDOW_UPDATE once a quarter window is read" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    const quarter = h2.stream_window / 4;
    const chunk = [_]u8{'f'} ** h2.frame_size_max;
    for (0..quarter / chunk.len) |_| try h.send(.data, 0, 1, &chunk);
    const st = h.request(0);
    var read: usize = 0;
    while (read < quarter) {
        var segs: [1][]const u8 = undefined;
        const r = st.takeBody(&segs);
        try testing.expect(r.count == 1 and !r.failed);
        read += segs[0].len;
        st.bodyConsumed();
    }
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(@as(u64, quarter), s.window_updates[1]);
    // The connection's quarter is larger: not yet.
    try testing.expectEqual(@as(u64, 0), s.window_updates[0]);
}

/// Every byte of DATA received is credited back once: granted, or waiting to be.
fn expectConnectionWindowWhole(h: *Harness) !void {
    const s = h.session();
    try testing.expectEqual(@as(i64, h2.connection_window), s.recv_window + s.recv_unacked);
}

test "h2 session: body the app never read goes back to the connection window when its stream ends" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    const chunk = [_]u8{'b'} ** h2.frame_size_max;
    // Two uploads of 160 KiB, whole before their apps answer without reading them.
    for ([_]u32{ 1, 3 }, 0..) |id, i| {
        try openPost(&h, id);
        for (0..10) |_| try h.send(.data, 0, id, &chunk);
        try h.send(.data, end_stream, id, "");
        try h.respond(i, "ok");
        h.pump();
    }
    try testing.expectEqual(@as(u32, 0), h.session().live);
    try expectConnectionWindowWhole(&h);
    // 320 KiB is past a quarter of the window: the client is told.
    try testing.expectEqual(@as(u64, 20 * h2.frame_size_max), h.sink.seen().window_updates[0]);
}

test "h2 session: a DATA frame split across reads while its app ends is credited once" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    var buf: [frame_header_bytes + 1000]u8 = undefined;
    const frame = wire(&buf, .data, 0, 1, &([_]u8{'x'} ** 1000));
    // The first 400 bytes go into the body; then the app answers and ends, unread.
    try h.feed(frame[0 .. frame_header_bytes + 400]);
    try h.respond(0, "ok");
    h.pump();
    // The rest of the frame is dropped; the end of the stream frees it.
    try h.feed(frame[frame_header_bytes + 400 ..]);
    try h.send(.data, end_stream, 1, "");
    try testing.expectEqual(@as(u32, 0), h.session().live);
    try expectConnectionWindowWhole(&h);
}

test "h2 session: DATA past the frame size we allow is FRAME_SIZE_ERROR" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    var hdr: [frame_header_bytes]u8 = undefined;
    (frames.FrameHeader{ .len = h2.frame_size_max + 1, .type = .data, .flags = 0, .stream = 1 }).write(&hdr);
    try h.feed(&hdr);
    try expectGoaway(&h, .frame_size);
}

// ---- stream states --------------------------------------------------------------------

test "h2 session: idle -> open -> half-closed (remote) -> closed, and the stream is freed" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    const st = h.session().first.?;
    try testing.expect(!st.remote_closed and !st.local_closed);
    try h.send(.data, end_stream, 1, "hi");
    try testing.expect(st.remote_closed and !st.local_closed);
    try testing.expect(h.sink.wake_reads > 0);
    try h.respond(0, "ok");
    h.pump();
    const s = h.sink.seen();
    try testing.expect(s.end_stream[1]);
    try testing.expectEqual(@as(?*h2.H2Stream, null), h.session().first);
    try testing.expectEqual(@as(u32, 0), h.session().live);
}

test "h2 session: half-closed (local): the response ends first, the body that follows is dropped" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    try h.respond(0, "early");
    h.pump();
    var s = h.sink.seen();
    try testing.expect(s.end_stream[1]);
    const st = h.session().first.?;
    try testing.expect(st.local_closed and !st.remote_closed);
    try h.send(.data, 0, 1, "late body");
    try testing.expectEqual(@as(usize, 0), st.body.items.len);
    try h.send(.data, end_stream, 1, "");
    try testing.expectEqual(@as(u32, 0), h.session().live);
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(?u32, null), s.rst[1]);
}

test "h2 session: DATA after END_STREAM is STREAM_CLOSED on that stream" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try get(&h, 1);
    try h.send(.data, 0, 1, "x");
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(code(.stream_closed), s.rst[1]);
    try testing.expectEqual(@as(?u32, null), s.goaway);
}

test "h2 session: DATA on an idle stream, or on stream 0, is PROTOCOL_ERROR" {
    {
        var h: Harness = undefined;
        try h.open(testing.allocator);
        defer h.deinit();
        try h.send(.data, 0, 5, "x");
        try expectGoaway(&h, .protocol);
    }
    {
        var h: Harness = undefined;
        try h.open(testing.allocator);
        defer h.deinit();
        try h.send(.data, 0, 0, "x");
        try expectGoaway(&h, .protocol);
    }
}

test "h2 session: stream ids: even ids, and ids not above the last one, cannot open a stream" {
    {
        var h: Harness = undefined;
        try h.open(testing.allocator);
        defer h.deinit();
        try get(&h, 2);
        try expectGoaway(&h, .protocol);
    }
    {
        var h: Harness = undefined;
        try h.open(testing.allocator);
        defer h.deinit();
        try get(&h, 5);
        try get(&h, 3);
        try expectGoaway(&h, .stream_closed);
        try testing.expectEqual(@as(usize, 1), rec.count);
    }
}

test "h2 session: ids may skip: opening 7 closes 1..5 for good" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try get(&h, 7);
    try testing.expectEqual(@as(u32, 7), h.session().last_stream_id);
    try h.respond(0, "");
    try get(&h, 9);
    try testing.expectEqual(@as(usize, 2), rec.count);
    h.pump();
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
}

test "h2 session: RST_STREAM from the client ends an open stream and wakes its app" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    const wakes = h.sink.wake_reads;
    try h.send(.rst_stream, 0, 1, &be32(@intFromEnum(ErrorCode.cancel)));
    const st = h.request(0);
    try testing.expect(st.reset);
    try testing.expect(h.sink.wake_reads > wakes);
    // The app's response goes nowhere; no RST_STREAM answers a reset.
    try h.respond(0, "lost");
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(@as(usize, 0), s.data[1] + s.headers[1]);
    try testing.expectEqual(@as(?u32, null), s.rst[1]);
    try testing.expectEqual(@as(u32, 0), h.session().live);
}

test "h2 session: DATA after the client's RST_STREAM is STREAM_CLOSED, its app running or not" {
    // h2spec http2/5.1/8: HEADERS, RST_STREAM and DATA arrive in one read, before the app
    // ran. The stream is still held (not freed), and the DATA must not be dropped quietly
    // as if it were in flight on a stream we reset.
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    try h.send(.rst_stream, 0, 1, &be32(@intFromEnum(ErrorCode.cancel)));
    try testing.expect(h.request(0).reset);
    try testing.expectEqual(@as(u32, 1), h.session().held);
    try h.send(.data, end_stream, 1, "test");
    try expectGoaway(&h, .stream_closed);
}

test "h2 session: DATA in flight on a stream we reset, its app still running, is dropped" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try h.send(.headers, end_headers, 1, &post5_block);
    // Past the content-length: we reset the stream (PROTOCOL_ERROR); the app holds it.
    try h.send(.data, 0, 1, "abcdef");
    h.pump();
    try testing.expectEqual(code(.protocol), h.sink.seen().rst[1]);
    try testing.expectEqual(@as(u32, 1), h.session().held);
    try h.send(.data, end_stream, 1, "more");
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(@as(?u32, null), s.goaway);
    try testing.expectEqual(@as(?u32, null), s.rst[1]);
}

test "h2 session: RST_STREAM on an idle stream, on stream 0, or not 4 bytes long is a connection error" {
    const cases = [_]struct { id: u32, payload: []const u8, want: ErrorCode }{
        .{ .id = 9, .payload = &be32(0), .want = .protocol },
        .{ .id = 0, .payload = &be32(0), .want = .protocol },
        .{ .id = 1, .payload = &[_]u8{ 0, 0, 0 }, .want = .frame_size },
    };
    for (cases) |c| {
        var h: Harness = undefined;
        try h.open(testing.allocator);
        defer h.deinit();
        try get(&h, 1);
        try h.send(.rst_stream, 0, c.id, c.payload);
        try expectGoaway(&h, c.want);
    }
}

test "h2 session: streams past SETTINGS_MAX_CONCURRENT_STREAMS are refused, and taken again once one ends" {
    var opts = test_server.testOptions();
    opts.h2_max_streams = 2;
    var h: Harness = undefined;
    try h.start(testing.allocator, opts);
    defer h.deinit();
    try h.send(.settings, 0, 0, "");
    try openPost(&h, 1);
    try openPost(&h, 3);
    try openPost(&h, 5);
    h.pump();
    var s = h.sink.seen();
    try testing.expectEqual(code(.refused_stream), s.rst[5]);
    try testing.expectEqual(@as(?u32, null), s.goaway);
    try testing.expectEqual(@as(usize, 2), rec.count);
    try h.send(.data, end_stream, 1, "");
    try h.respond(0, "done");
    h.pump();
    try get(&h, 7);
    try testing.expectEqual(@as(usize, 3), rec.count);
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(?u32, null), s.rst[7]);
}

test "h2 session: a content-length the DATA does not match resets the stream" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try h.send(.headers, end_headers, 1, &post5_block);
    try h.send(.data, end_stream, 1, "abc");
    h.pump();
    var s = h.sink.seen();
    try testing.expectEqual(code(.protocol), s.rst[1]);
    try h.send(.headers, end_headers, 3, &post5_block);
    try h.send(.data, 0, 3, "abcdef");
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(code(.protocol), s.rst[3]);
    try h.send(.headers, end_headers, 5, &post5_block);
    try h.send(.data, end_stream, 5, "abcde");
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(?u32, null), s.rst[5]);
}

test "h2 session: a second content-length, its value the same or not, resets the stream unseen" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    // content-length (static index 28, literal without indexing): "5", then "05".
    const cl5 = [_]u8{ 0x0f, 0x0d, 0x01, '5' };
    const cl05 = [_]u8{ 0x0f, 0x0d, 0x02, '0', '5' };
    try h.send(.headers, end_headers, 1, &(post5_block ++ cl5));
    try h.send(.headers, end_headers, 3, &(post5_block ++ cl05));
    h.pump();
    var s = h.sink.seen();
    try testing.expectEqual(code(.protocol), s.rst[1]);
    try testing.expectEqual(code(.protocol), s.rst[3]);
    try testing.expectEqual(@as(?u32, null), s.goaway);
    // No app saw either request.
    try testing.expectEqual(@as(usize, 0), rec.count);
    // One content-length is taken, and the body it names.
    try h.send(.headers, end_headers, 5, &post5_block);
    try testing.expectEqual(@as(usize, 1), rec.count);
    try h.send(.data, end_stream, 5, "abcde");
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(?u32, null), s.rst[5]);
}

test "h2 session: HEADERS in flight on a stream we reset and freed is decoded, then ignored" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    // A second content-length: stream 1 is reset before any app saw it, and freed.
    const cl5 = [_]u8{ 0x0f, 0x0d, 0x01, '5' };
    try h.send(.headers, end_headers, 1, &(post5_block ++ cl5));
    h.pump();
    try testing.expectEqual(code(.protocol), h.sink.seen().rst[1]);
    try testing.expectEqual(@as(u32, 0), h.session().live);
    // The client had already sent its trailers, one field added to the HPACK table.
    const trailer_indexed = [_]u8{ 0x40, 0x03, 'x', '-', 't', 0x01, '1' };
    try h.send(.headers, end_both, 1, &trailer_indexed);
    h.pump();
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
    // The table stayed in step with the client's: after get_block's :authority (62),
    // entry 63 is x-t: 1.
    try h.send(.headers, end_both, 3, &(get_block ++ [_]u8{0xbf}));
    h.pump();
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
    try testing.expectEqual(@as(usize, 1), rec.count);
    // A stream we never reset stays STREAM_CLOSED once it is over.
    try h.respond(0, "");
    h.pump();
    try h.send(.headers, end_both, 3, &trailer_indexed);
    try expectGoaway(&h, .stream_closed);
}

test "h2 session: trailers end the body; trailers without END_STREAM or with pseudo-fields reset the stream" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    // x-t: 1 (literal, new name).
    const trailer = [_]u8{ 0x00, 0x03, 'x', '-', 't', 0x01, '1' };
    try openPost(&h, 1);
    try h.send(.headers, end_both, 1, &trailer);
    try testing.expect(h.session().first.?.remote_closed);
    try openPost(&h, 3);
    try h.send(.headers, end_headers, 3, &trailer);
    try openPost(&h, 5);
    try h.send(.headers, end_both, 5, &[_]u8{0x84});
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(@as(?u32, null), s.rst[1]);
    try testing.expectEqual(code(.protocol), s.rst[3]);
    try testing.expectEqual(code(.protocol), s.rst[5]);
}

// ---- header blocks: CONTINUATION ------------------------------------------------------

test "h2 session: a header block split over CONTINUATION frames is one request" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try h.send(.headers, end_stream, 1, get_block[0..2]);
    try h.send(.continuation, 0, 1, get_block[2..4]);
    try testing.expectEqual(@as(usize, 0), rec.count);
    try h.send(.continuation, end_headers, 1, get_block[4..]);
    try testing.expectEqual(@as(usize, 1), rec.count);
    try testing.expectEqualStrings("/", rec.path(0));
}

test "h2 session: inside a header block any frame but its CONTINUATION is PROTOCOL_ERROR" {
    const intruders = [_]struct { typ: FrameType, id: u32, payload: []const u8 }{
        .{ .typ = .ping, .id = 0, .payload = "12345678" },
        .{ .typ = .continuation, .id = 3, .payload = "" },
        .{ .typ = .data, .id = 1, .payload = "x" },
        .{ .typ = .headers, .id = 3, .payload = &get_block },
    };
    for (intruders) |in| {
        var h: Harness = undefined;
        try h.open(testing.allocator);
        defer h.deinit();
        try h.send(.headers, end_stream, 1, get_block[0..2]);
        try h.send(in.typ, end_headers, in.id, in.payload);
        try expectGoaway(&h, .protocol);
        try testing.expectEqual(@as(usize, 0), rec.count);
    }
}

test "h2 session: CONTINUATION with no header block open is PROTOCOL_ERROR" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try get(&h, 1);
    try h.send(.continuation, end_headers, 1, &get_block);
    try expectGoaway(&h, .protocol);
}

test "h2 session: a header block past the head limit across CONTINUATIONs is ENHANCE_YOUR_CALM" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    const piece = [_]u8{0x84} ** 4096;
    const limit = test_server.testOptions().limits.head_bytes_max;
    try h.send(.headers, 0, 1, &piece);
    var sent: usize = piece.len;
    while (sent + piece.len <= limit) : (sent += piece.len) try h.send(.continuation, 0, 1, &piece);
    h.pump();
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
    try h.send(.continuation, 0, 1, &piece);
    try expectGoaway(&h, .enhance_your_calm);
}

test "h2 session: a header block that HPACK cannot decode is COMPRESSION_ERROR" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    // Index 0 is not a field (RFC 7541 6.1).
    try h.send(.headers, end_both, 1, &[_]u8{0x80});
    try expectGoaway(&h, .compression);
}

// ---- SETTINGS, PING, GOAWAY -----------------------------------------------------------

test "h2 session: each SETTINGS is acknowledged once; an ACK from the client is not answered" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try settings(&h, frames.setting_max_frame_size, 1 << 15);
    try settings(&h, frames.setting_header_table_size, 0);
    try h.send(.settings, frames.flag_ack, 0, "");
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(@as(usize, 2), s.settings_acks);
    try testing.expectEqual(@as(u32, 1 << 15), h.session().peer_frame_size);
    try testing.expectEqual(@as(?u32, null), s.goaway);
}

test "h2 session: malformed SETTINGS are connection errors of the RFC's kind" {
    const max_frame_size_limit = frames.frame_size_limit;
    const cases = [_]struct { flags: u8, id: u32, payload: []const u8, want: ErrorCode }{
        .{ .flags = frames.flag_ack, .id = 0, .payload = &setting(1, 0), .want = .frame_size },
        .{ .flags = 0, .id = 0, .payload = "12345", .want = .frame_size },
        .{ .flags = 0, .id = 1, .payload = "", .want = .protocol },
        .{ .flags = 0, .id = 0, .payload = &setting(frames.setting_enable_push, 2), .want = .protocol },
        .{ .flags = 0, .id = 0, .payload = &setting(frames.setting_max_frame_size, h2.frame_size_max - 1), .want = .protocol },
        .{ .flags = 0, .id = 0, .payload = &setting(frames.setting_max_frame_size, max_frame_size_limit + 1), .want = .protocol },
        .{ .flags = 0, .id = 0, .payload = &setting(frames.setting_enable_connect_protocol, 2), .want = .protocol },
    };
    for (cases) |c| {
        var h: Harness = undefined;
        try h.open(testing.allocator);
        defer h.deinit();
        try h.send(.settings, c.flags, c.id, c.payload);
        try expectGoaway(&h, c.want);
    }
}

test "h2 session: the largest SETTINGS_MAX_FRAME_SIZE is taken, and capped for our own frames" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try settings(&h, frames.setting_max_frame_size, frames.frame_size_limit);
    try testing.expectEqual(@as(u32, h2.frame_size_max * 4), h.session().peer_frame_size);
    h.pump();
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
}

test "h2 session: PING is answered with its payload; a PING ACK is not; a bad PING is a connection error" {
    {
        var h: Harness = undefined;
        try h.open(testing.allocator);
        defer h.deinit();
        try h.send(.ping, 0, 0, "zigcorn!");
        try h.send(.ping, frames.flag_ack, 0, "ignored!");
        h.pump();
        const s = h.sink.seen();
        try testing.expectEqual(@as(usize, 1), s.ping_acks);
        try testing.expectEqualStrings("zigcorn!", &s.ping_payload);
        try h.send(.ping, 0, 0, "short");
        try expectGoaway(&h, .frame_size);
    }
    {
        var h: Harness = undefined;
        try h.open(testing.allocator);
        defer h.deinit();
        try h.send(.ping, 0, 1, "12345678");
        try expectGoaway(&h, .protocol);
    }
}

test "h2 session: PINGs past the per-second budget are ENHANCE_YOUR_CALM" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    // The clock stands still in the test: every PING falls in the same second. The
    // client's empty SETTINGS already counted as one.
    for (0..h2.useless_frames_per_second_max - 1) |_| {
        try h.send(.ping, 0, 0, "12345678");
        h.drain();
    }
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
    try h.send(.ping, 0, 0, "12345678");
    try expectGoaway(&h, .enhance_your_calm);
}

test "h2 session: a client's GOAWAY is not answered; its open streams finish" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try get(&h, 1);
    try h.send(.goaway, 0, 0, &[_]u8{ 0, 0, 0, 1, 0, 0, 0, 0 });
    try h.respond(0, "still");
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(@as(?u32, null), s.goaway);
    try testing.expectEqual(@as(usize, 5), s.data[1]);
    try h.send(.goaway, 0, 0, "short");
    try expectGoaway(&h, .frame_size);
}

test "h2 session: graceful GOAWAY names the last stream; later streams are ignored, open ones finish" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try get(&h, 1);
    h2.goAway(h.conn());
    h.pump();
    var s = h.sink.seen();
    try testing.expectEqual(code(.no_error), s.goaway);
    try testing.expectEqual(@as(u32, 1), s.goaway_last_id);
    try get(&h, 3);
    try testing.expectEqual(@as(usize, 1), rec.count);
    try h.respond(0, "bye");
    h.pump();
    s = h.sink.seen();
    try testing.expectEqual(@as(usize, 3), s.data[1]);
    try testing.expect(!h.live());
}

test "h2 session: an idle connection's timeout sends GOAWAY NO_ERROR" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    h2.timedOut(h.conn());
    h.pump();
    try testing.expectEqual(code(.no_error), h.sink.seen().goaway);
}

test "h2 session: after a connection error nothing but the GOAWAY is written" {
    var h: Harness = undefined;
    try h.open(testing.allocator);
    defer h.deinit();
    try openPost(&h, 1);
    try h.send(.push_promise, end_headers, 1, &be32(2));
    h.pump();
    const s = h.sink.seen();
    try testing.expectEqual(code(.protocol), s.goaway);
    try testing.expectEqual(@as(usize, 1), s.frames);
    try testing.expect(h.request(0).reset);
}
