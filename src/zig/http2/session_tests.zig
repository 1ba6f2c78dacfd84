//! Unit tests of the HTTP/2 session on byte slices. A test feeds the client's frames
//! into the connection's read buffer and calls `process`; the session's output and the
//! wakes it raises go to a recording `Sink`, read back as frames. No byte crosses a
//! socket (the connection is a real `Conn` of a real `Server`, whose socket stays
//! unused), and the session's memory comes from the test's allocator:
//! `std.testing.allocator` (a leak fails the test) or a `FailingAllocator` (every
//! allocation from some point on fails: the connection must end cleanly).
//!
//!     python -m ziglang test -lc -I <python include> src/zig/unit_tests.zig --test-filter "h2 session"
const std = @import("std");
const testing = std.testing;
const h2 = @import("session.zig");
const frames = @import("frames.zig");
const hpack = @import("hpack.zig");
const outq = @import("../transport/output_queue.zig");
const Conn = @import("../server/connection.zig").Conn;
const Stream = @import("../server/stream.zig").Stream;
const server_mod = @import("../server/server.zig");
const test_server = @import("../testing/test_server.zig");
const rec = &test_server.rec;

const ErrorCode = frames.ErrorCode;
const FrameType = frames.FrameType;
const window_max: u32 = @intCast(frames.window_max);
const window_default = frames.initial_window_default;
const frame_header_bytes = frames.header_bytes;
/// Stream ids the summaries keep apart (client streams 1, 3, ... 61).
const ids_max = 64;

// ---- the recording sink ---------------------------------------------------------------

/// What the session queued, kept as the connection's output would hold it.
const Recording = struct {
    out: std.ArrayListUnmanaged(u8) = .{},
    /// Bytes of `out` the test has read back as frames.
    read_at: usize = 0,
    /// Queued and not yet "written" (what `outputLen` reports); `Harness.drain` writes them.
    pending: usize = 0,
    wake_reads: usize = 0,
    wake_writes: usize = 0,

    fn sink(self: *Recording) h2.Sink {
        return .{ .ctx = self, .vtable = &vtable };
    }

    const vtable = h2.Sink.VTable{
        .queue = queue,
        .stage = stage,
        .commitStaged = commitStaged,
        .dropStaged = dropStaged,
        .outputLen = outputLen,
        .wakeRead = wakeRead,
        .wakeWrite = wakeWrite,
    };

    fn of(ctx: *anyopaque) *Recording {
        return @ptrCast(@alignCast(ctx));
    }
    fn queue(ctx: *anyopaque, bytes: []const u8) outq.Error!void {
        const self = of(ctx);
        try self.out.appendSlice(testing.allocator, bytes);
        self.pending += bytes.len;
    }
    fn stage(ctx: *anyopaque, n: usize) outq.Error![]u8 {
        const self = of(ctx);
        try self.out.ensureUnusedCapacity(testing.allocator, n);
        return self.out.unusedCapacitySlice();
    }
    fn commitStaged(ctx: *anyopaque, n: usize) outq.Error!void {
        const self = of(ctx);
        self.out.items.len += n;
        self.pending += n;
    }
    fn dropStaged(_: *anyopaque) void {}
    fn outputLen(ctx: *anyopaque) usize {
        return of(ctx).pending;
    }
    fn wakeRead(ctx: *anyopaque, _: *Stream) void {
        of(ctx).wake_reads += 1;
    }
    fn wakeWrite(ctx: *anyopaque, _: *Stream) void {
        of(ctx).wake_writes += 1;
    }

    /// The next frame written that the test has not read yet.
    fn next(self: *Recording) ?Frame {
        const rest = self.out.items[self.read_at..];
        if (rest.len < frame_header_bytes) return null;
        const fh = frames.FrameHeader.parse(rest[0..frame_header_bytes]);
        std.debug.assert(rest.len >= frame_header_bytes + fh.len);
        self.read_at += frame_header_bytes + fh.len;
        return .{ .type = fh.type, .flags = fh.flags, .stream = fh.stream, .payload = rest[frame_header_bytes..][0..fh.len] };
    }

    /// Every frame not read yet, summed up.
    fn seen(self: *Recording) Seen {
        var s = Seen{};
        while (self.next()) |f| s.add(f);
        return s;
    }
};

const Frame = struct { type: FrameType, flags: u8, stream: u32, payload: []const u8 };

/// The frames of a stretch of output, counted per kind and stream.
const Seen = struct {
    data: [ids_max]usize = .{0} ** ids_max,
    headers: [ids_max]usize = .{0} ** ids_max,
    end_stream: [ids_max]bool = .{false} ** ids_max,
    rst: [ids_max]?u32 = .{null} ** ids_max,
    /// WINDOW_UPDATE increments; [0] is the connection's.
    window_updates: [ids_max]u64 = .{0} ** ids_max,
    goaway: ?u32 = null,
    goaway_last_id: u32 = 0,
    settings: usize = 0,
    settings_acks: usize = 0,
    ping_acks: usize = 0,
    ping_payload: [8]u8 = .{0} ** 8,
    /// PINGs the server sent (not acks), and the GOAWAYs, in order.
    pings: usize = 0,
    goaways: usize = 0,
    /// Response heads with :status 500.
    status_500: usize = 0,
    /// The :status of each stream's last HEADERS that began with one.
    status: [ids_max]u16 = .{0} ** ids_max,
    /// The stream of each DATA frame with bytes, in order (the first `data_order_len`).
    data_order: [256]u32 = undefined,
    data_order_len: usize = 0,
    frames: usize = 0,

    fn add(self: *Seen, f: Frame) void {
        self.frames += 1;
        const id = if (f.stream < ids_max) f.stream else 0;
        switch (f.type) {
            .data => {
                self.data[id] += f.payload.len;
                if (f.flags & frames.flag_end_stream != 0) self.end_stream[id] = true;
                if (f.payload.len > 0 and self.data_order_len < self.data_order.len) {
                    self.data_order[self.data_order_len] = f.stream;
                    self.data_order_len += 1;
                }
            },
            .headers => {
                self.headers[id] += 1;
                if (statusOf(f.payload)) |status| {
                    self.status[id] = status;
                    if (status == 500) self.status_500 += 1;
                }
                if (f.flags & frames.flag_end_stream != 0) self.end_stream[id] = true;
            },
            .rst_stream => self.rst[id] = std.mem.readInt(u32, f.payload[0..4], .big),
            .window_update => self.window_updates[id] += std.mem.readInt(u32, f.payload[0..4], .big),
            .goaway => {
                self.goaways += 1;
                self.goaway_last_id = std.mem.readInt(u32, f.payload[0..4], .big);
                self.goaway = std.mem.readInt(u32, f.payload[4..8], .big);
            },
            .settings => if (f.flags & frames.flag_ack != 0) {
                self.settings_acks += 1;
            } else {
                self.settings += 1;
            },
            .ping => {
                @memcpy(&self.ping_payload, f.payload[0..8]);
                if (f.flags & frames.flag_ack != 0) self.ping_acks += 1 else self.pings += 1;
            },
            else => {},
        }
    }
};

/// The :status a response header block starts with (null for trailers, or a block
/// continued in CONTINUATION frames). Our encoder never indexes: a fresh decoder reads it.
fn statusOf(block: []const u8) ?u16 {
    var d = hpack.Decoder.initWith(testing.allocator, h2.header_table_size);
    defer d.deinit();
    var scratch: [1024]u8 = undefined;
    var fields: [16]hpack.Header = undefined;
    const got = d.decode(block, &scratch, &fields) catch return null;
    if (got.len == 0 or !std.mem.eql(u8, got[0].name, ":status")) return null;
    return std.fmt.parseInt(u16, got[0].value, 10) catch null;
}

fn code(c: ErrorCode) ?u32 {
    return @intFromEnum(c);
}

// ---- the harness: a session on a connection whose socket stays unused -------------------

const Harness = struct {
    fixture: test_server.Fixture,
    sink: Recording = .{},
    /// Requests (by `rec` index) the test's app has finished.
    finished: [test_server.Recorder.capacity]bool = .{false} ** test_server.Recorder.capacity,

    /// In place: the sink's address is the session's.
    fn start(self: *Harness, gpa: std.mem.Allocator, opts: server_mod.Options) !void {
        self.* = .{ .fixture = try test_server.Fixture.initWith(opts) };
        const c = self.fixture.conn;
        _ = c.ensureActive() orelse return error.OutOfMemory;
        h2.beginWith(c, gpa, self.sink.sink());
    }

    /// `start`, the client's empty SETTINGS, and the server's preface and ack read.
    fn open(self: *Harness, gpa: std.mem.Allocator) !void {
        try self.start(gpa, test_server.testOptions());
        try self.send(.settings, 0, 0, "");
        self.pump();
        const s = self.sink.seen();
        try testing.expectEqual(@as(usize, 1), s.settings);
        try testing.expectEqual(@as(usize, 1), s.settings_acks);
        try testing.expectEqual(@as(u64, h2.connection_window - window_default), s.window_updates[0]);
        self.sink.pending = 0;
    }

    fn conn(self: *Harness) *Conn {
        return self.fixture.conn;
    }

    /// The session, while the connection speaks HTTP/2.
    fn session(self: *Harness) *h2.Session {
        std.debug.assert(self.conn().state == .h2);
        return self.conn().a().proto.http2;
    }

    fn live(self: *Harness) bool {
        return self.conn().state == .h2;
    }

    /// The client's bytes, through the read buffer (as many passes as they need).
    fn feed(self: *Harness, bytes: []const u8) !void {
        var rest = bytes;
        while (rest.len > 0) {
            const c = self.conn();
            // Closed or lingering: what follows is never read.
            if (c.state != .h2) return;
            const act = c.a();
            if (act.rbuf == null) act.rbuf = c.server.pool.acquire() orelse return error.NoBuffer;
            c.compact();
            const buf = act.rbuf.?;
            const room = buf.len - act.rlen;
            // The session stopped reading (its output is long): the test must drain first.
            if (room == 0) return error.Stalled;
            const n = @min(room, rest.len);
            @memcpy(buf[act.rlen..][0..n], rest[0..n]);
            act.rlen += @intCast(n);
            rest = rest[n..];
            h2.process(c);
        }
    }

    /// One frame from the client.
    fn send(self: *Harness, typ: FrameType, flags: u8, id: u32, payload: []const u8) !void {
        var buf: [frame_header_bytes + frames_payload_max]u8 = undefined;
        try self.feed(wire(&buf, typ, flags, id, payload));
    }

    /// The end of the loop's pass: output the app queued moves into the sink.
    fn pump(self: *Harness) void {
        _ = self.fixture.server.settleBegin();
        if (self.live()) self.conn().flush();
    }

    /// The peer read everything: the sink is empty, and the session fills it again.
    fn drain(self: *Harness) void {
        self.sink.pending = 0;
        self.pump();
    }

    fn request(self: *Harness, i: usize) *Stream {
        std.debug.assert(i < rec.count and !self.finished[i]);
        return rec.requests[i];
    }

    fn finishRequest(self: *Harness, i: usize) void {
        self.request(i).finish();
        self.finished[i] = true;
    }

    /// The app answers request `i` with 200 and `body` (copied by the session).
    fn respond(self: *Harness, i: usize, body: []const u8) !void {
        const st = self.request(i);
        try st.startResponse(200, &.{}, &.{}, false);
        _ = try st.writeBody(body, false, null);
        self.finishRequest(i);
    }

    /// Every app still running finishes, then everything is freed.
    fn deinit(self: *Harness) void {
        for (rec.requests[0..rec.count], 0..) |st, i| if (!self.finished[i]) {
            st.finish();
        };
        self.pump();
        self.fixture.deinit();
        self.sink.out.deinit(testing.allocator);
    }
};

/// The largest frame payload the tests send (the session's SETTINGS_MAX_FRAME_SIZE).
const frames_payload_max = h2.frame_size_max;

fn wire(buf: []u8, typ: FrameType, flags: u8, id: u32, payload: []const u8) []const u8 {
    (frames.FrameHeader{ .len = @intCast(payload.len), .type = typ, .flags = flags, .stream = id }).write(buf[0..frame_header_bytes]);
    @memcpy(buf[frame_header_bytes..][0..payload.len], payload);
    return buf[0 .. frame_header_bytes + payload.len];
}

fn be32(v: u32) [4]u8 {
    var b: [4]u8 = undefined;
    std.mem.writeInt(u32, &b, v, .big);
    return b;
}

fn setting(id: u16, value: u32) [6]u8 {
    var b: [6]u8 = undefined;
    std.mem.writeInt(u16, b[0..2], id, .big);
    std.mem.writeInt(u32, b[2..6], value, .big);
    return b;
}

const end_stream = frames.flag_end_stream;
const end_headers = frames.flag_end_headers;
const end_both = end_stream | end_headers;

/// :method GET, :scheme http, :path /, :authority x (static table, one literal).
const get_block = [_]u8{ 0x82, 0x86, 0x84, 0x41, 0x01, 'x' };
/// :method POST, :scheme http, :path /, :authority x, content-length 5.
const post5_block = [_]u8{ 0x83, 0x86, 0x84, 0x41, 0x01, 'x', 0x0f, 0x0d, 0x01, '5' };

fn get(h: *Harness, id: u32) !void {
    try h.send(.headers, end_both, id, &get_block);
}

/// A stream whose request body is still to come (no END_STREAM).
fn openPost(h: *Harness, id: u32) !void {
    try h.send(.headers, end_headers, id, &get_block);
}

fn windowUpdate(h: *Harness, id: u32, inc: u32) !void {
    try h.send(.window_update, 0, id, &be32(inc));
}

fn settings(h: *Harness, id: u16, value: u32) !void {
    try h.send(.settings, 0, 0, &setting(id, value));
}

fn expectGoaway(h: *Harness, c: ErrorCode) !void {
    h.pump();
    try testing.expectEqual(code(c), h.sink.seen().goaway);
}

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
