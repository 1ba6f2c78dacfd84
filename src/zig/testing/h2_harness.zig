//! The HTTP/2 session's unit-test harness (`http2/session_tests.zig` and
//! `http2/session_life_tests.zig` use it): a recording `Sink` that reads the session's
//! output back as frames, a session on a real `Conn` of a real `Server` whose socket stays
//! unused, and the client's frames written as bytes. Memory comes from the test's
//! allocator: `std.testing.allocator` (a leak fails the test) or a `FailingAllocator`.
const std = @import("std");
const testing = std.testing;
const h2 = @import("../http2/session.zig");
const frames = @import("../http2/frames.zig");
const hpack = @import("../http2/hpack.zig");
const outq = @import("../transport/output_queue.zig");
const Conn = @import("../core/connection.zig").Conn;
const Stream = @import("../core/stream.zig").Stream;
const server_mod = @import("../core/server.zig");
const test_server = @import("test_server.zig");
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
pub const Recording = struct {
    out: std.ArrayListUnmanaged(u8) = .{},
    /// Bytes of `out` the test has read back as frames.
    read_at: usize = 0,
    /// Queued and not yet "written" (what `outputLen` reports); `Harness.drain` writes them.
    pending: usize = 0,
    wake_reads: usize = 0,
    wake_writes: usize = 0,

    pub fn sink(self: *Recording) h2.Sink {
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

    pub fn of(ctx: *anyopaque) *Recording {
        return @ptrCast(@alignCast(ctx));
    }
    pub fn queue(ctx: *anyopaque, bytes: []const u8) outq.Error!void {
        const self = of(ctx);
        try self.out.appendSlice(testing.allocator, bytes);
        self.pending += bytes.len;
    }
    pub fn stage(ctx: *anyopaque, n: usize) outq.Error![]u8 {
        const self = of(ctx);
        try self.out.ensureUnusedCapacity(testing.allocator, n);
        return self.out.unusedCapacitySlice();
    }
    pub fn commitStaged(ctx: *anyopaque, n: usize) outq.Error!void {
        const self = of(ctx);
        self.out.items.len += n;
        self.pending += n;
    }
    pub fn dropStaged(_: *anyopaque) void {}
    pub fn outputLen(ctx: *anyopaque) usize {
        return of(ctx).pending;
    }
    pub fn wakeRead(ctx: *anyopaque, _: *Stream) void {
        of(ctx).wake_reads += 1;
    }
    pub fn wakeWrite(ctx: *anyopaque, _: *Stream) void {
        of(ctx).wake_writes += 1;
    }

    /// The next frame written that the test has not read yet.
    pub fn next(self: *Recording) ?Frame {
        const rest = self.out.items[self.read_at..];
        if (rest.len < frame_header_bytes) return null;
        const fh = frames.FrameHeader.parse(rest[0..frame_header_bytes]);
        std.debug.assert(rest.len >= frame_header_bytes + fh.len);
        self.read_at += frame_header_bytes + fh.len;
        return .{ .type = fh.type, .flags = fh.flags, .stream = fh.stream, .payload = rest[frame_header_bytes..][0..fh.len] };
    }

    /// Every frame not read yet, summed up.
    pub fn seen(self: *Recording) Seen {
        var s = Seen{};
        while (self.next()) |f| s.add(f);
        return s;
    }
};

pub const Frame = struct { type: FrameType, flags: u8, stream: u32, payload: []const u8 };

/// The frames of a stretch of output, counted per kind and stream.
pub const Seen = struct {
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

    pub fn add(self: *Seen, f: Frame) void {
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
pub fn statusOf(block: []const u8) ?u16 {
    var d = hpack.Decoder.initWith(testing.allocator, h2.header_table_size);
    defer d.deinit();
    var scratch: [1024]u8 = undefined;
    var fields: [16]hpack.Header = undefined;
    const got = d.decode(block, &scratch, &fields) catch return null;
    if (got.len == 0 or !std.mem.eql(u8, got[0].name, ":status")) return null;
    return std.fmt.parseInt(u16, got[0].value, 10) catch null;
}

pub fn code(c: ErrorCode) ?u32 {
    return @intFromEnum(c);
}

// ---- the harness: a session on a connection whose socket stays unused -------------------

pub const Harness = struct {
    fixture: test_server.Fixture,
    sink: Recording = .{},
    /// Requests (by `rec` index) the test's app has finished.
    finished: [test_server.Recorder.capacity]bool = .{false} ** test_server.Recorder.capacity,

    /// In place: the sink's address is the session's.
    pub fn start(self: *Harness, gpa: std.mem.Allocator, opts: server_mod.Options) !void {
        self.* = .{ .fixture = try test_server.Fixture.initWith(opts) };
        const c = self.fixture.conn;
        _ = c.ensureActive() orelse return error.OutOfMemory;
        h2.beginWith(c, gpa, self.sink.sink());
    }

    /// `start`, the client's empty SETTINGS, and the server's preface and ack read.
    pub fn open(self: *Harness, gpa: std.mem.Allocator) !void {
        try self.start(gpa, test_server.testOptions());
        try self.send(.settings, 0, 0, "");
        self.pump();
        const s = self.sink.seen();
        try testing.expectEqual(@as(usize, 1), s.settings);
        try testing.expectEqual(@as(usize, 1), s.settings_acks);
        try testing.expectEqual(@as(u64, h2.connection_window - window_default), s.window_updates[0]);
        self.sink.pending = 0;
    }

    pub fn conn(self: *Harness) *Conn {
        return self.fixture.conn;
    }

    /// The session, while the connection speaks HTTP/2.
    pub fn session(self: *Harness) *h2.Session {
        std.debug.assert(self.conn().state == .h2);
        return h2.sessionOf(self.conn());
    }

    pub fn live(self: *Harness) bool {
        return self.conn().state == .h2;
    }

    /// The client's bytes, through the read buffer (as many passes as they need).
    pub fn feed(self: *Harness, bytes: []const u8) !void {
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
    pub fn send(self: *Harness, typ: FrameType, flags: u8, id: u32, payload: []const u8) !void {
        var buf: [frame_header_bytes + frames_payload_max]u8 = undefined;
        try self.feed(wire(&buf, typ, flags, id, payload));
    }

    /// The end of the loop's pass: output the app queued moves into the sink.
    pub fn pump(self: *Harness) void {
        _ = self.fixture.server.settleBegin();
        if (self.live()) self.conn().flush();
    }

    /// The peer read everything: the sink is empty, and the session fills it again.
    pub fn drain(self: *Harness) void {
        self.sink.pending = 0;
        self.pump();
    }

    pub fn request(self: *Harness, i: usize) *Stream {
        std.debug.assert(i < rec.count and !self.finished[i]);
        return rec.requests[i];
    }

    pub fn finishRequest(self: *Harness, i: usize) void {
        self.request(i).finish();
        self.finished[i] = true;
    }

    /// The app answers request `i` with 200 and `body` (copied by the session).
    pub fn respond(self: *Harness, i: usize, body: []const u8) !void {
        const st = self.request(i);
        try st.startResponse(200, &.{}, &.{}, false);
        _ = try st.writeBody(body, false, null);
        self.finishRequest(i);
    }

    /// Every app still running finishes, then everything is freed.
    pub fn deinit(self: *Harness) void {
        for (rec.requests[0..rec.count], 0..) |st, i| if (!self.finished[i]) {
            st.finish();
        };
        self.pump();
        self.fixture.deinit();
        self.sink.out.deinit(testing.allocator);
    }
};

/// The largest frame payload the tests send (the session's SETTINGS_MAX_FRAME_SIZE).
pub const frames_payload_max = h2.frame_size_max;

pub fn wire(buf: []u8, typ: FrameType, flags: u8, id: u32, payload: []const u8) []const u8 {
    (frames.FrameHeader{ .len = @intCast(payload.len), .type = typ, .flags = flags, .stream = id }).write(buf[0..frame_header_bytes]);
    @memcpy(buf[frame_header_bytes..][0..payload.len], payload);
    return buf[0 .. frame_header_bytes + payload.len];
}

pub fn be32(v: u32) [4]u8 {
    var b: [4]u8 = undefined;
    std.mem.writeInt(u32, &b, v, .big);
    return b;
}

pub fn setting(id: u16, value: u32) [6]u8 {
    var b: [6]u8 = undefined;
    std.mem.writeInt(u16, b[0..2], id, .big);
    std.mem.writeInt(u32, b[2..6], value, .big);
    return b;
}

pub const end_stream = frames.flag_end_stream;
pub const end_headers = frames.flag_end_headers;
pub const end_both = end_stream | end_headers;

/// :method GET, :scheme http, :path /, :authority x (static table, one literal).
pub const get_block = [_]u8{ 0x82, 0x86, 0x84, 0x41, 0x01, 'x' };
/// :method POST, :scheme http, :path /, :authority x, content-length 5.
pub const post5_block = [_]u8{ 0x83, 0x86, 0x84, 0x41, 0x01, 'x', 0x0f, 0x0d, 0x01, '5' };

pub fn get(h: *Harness, id: u32) !void {
    try h.send(.headers, end_both, id, &get_block);
}

/// A stream whose request body is still to come (no END_STREAM).
pub fn openPost(h: *Harness, id: u32) !void {
    try h.send(.headers, end_headers, id, &get_block);
}

pub fn windowUpdate(h: *Harness, id: u32, inc: u32) !void {
    try h.send(.window_update, 0, id, &be32(inc));
}

pub fn settings(h: *Harness, id: u16, value: u32) !void {
    try h.send(.settings, 0, 0, &setting(id, value));
}

pub fn expectGoaway(h: *Harness, c: ErrorCode) !void {
    h.pump();
    try testing.expectEqual(code(c), h.sink.seen().goaway);
}
