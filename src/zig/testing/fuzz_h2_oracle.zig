//! The HTTP/2 fuzzer's oracle (`testing/fuzz_http2.zig` runs the cases): the client's
//! bytes parsed as the server parses them (`Sent`), its settings as the server may be
//! applying them, and the server's output checked as a strict client would (`Checker`).
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;
const h2 = @import("../http2/session.zig");
const hpack = @import("../http2/hpack.zig");
const huffman_code = @import("../http/huffman.zig");
const sys = @import("../os/sys.zig");
const stream_mod = @import("../core/stream.zig");
const Stream = stream_mod.Stream;
const server_mod = @import("../core/server.zig");
const test_server = @import("test_server.zig");
const Recorder = test_server.Recorder;
const rec = &test_server.rec;

const gpa = std.heap.c_allocator;

const fuzz = @import("fuzz_http2.zig");
const client = @import("fuzz_h2_client.zig");
const app = @import("fuzz_h2_app.zig");
const window_max = fuzz.window_max;
const default_window = fuzz.default_window;
const default_frame_size = fuzz.default_frame_size;
const frame_size_top = fuzz.frame_size_top;
const frame_header_len = fuzz.frame_header_len;
const server_table_size = fuzz.server_table_size;
const stream_id_max = fuzz.stream_id_max;
const error_code_max = fuzz.error_code_max;
const flow_control_error = fuzz.flow_control_error;
const FrameType = fuzz.FrameType;
const flag_end_stream = fuzz.flag_end_stream;
const flag_ack = fuzz.flag_ack;
const flag_end_headers = fuzz.flag_end_headers;
const flag_padded = fuzz.flag_padded;
const setting_enable_push = fuzz.setting_enable_push;
const setting_initial_window_size = fuzz.setting_initial_window_size;
const setting_max_frame_size = fuzz.setting_max_frame_size;
const oracle_streams_max = fuzz.oracle_streams_max;
const poison_byte = fuzz.poison_byte;
const Failure = fuzz.Failure;
const fail = fuzz.fail;
const check = fuzz.check;
const note = fuzz.note;
const outOfMemory = fuzz.outOfMemory;
const Bytes = client.Bytes;
const FrameHead = client.FrameHead;
const responseByte = client.responseByte;

// ---- the oracle's streams ---------------------------------------------------------------

pub const Phase = enum(u8) {
    /// No response HEADERS yet.
    none,
    /// 1xx HEADERS only.
    informational,
    /// The final response head came: DATA and trailers may follow.
    final,
};

/// What the oracle knows of one stream id, from both directions and from the app.
pub const StreamInfo = struct {
    id: u32,
    // The client's side (parsed from the bytes it sent).
    /// WINDOW_UPDATE increments the client sent for it.
    grants: i64 = 0,
    /// DATA frame bytes (with padding) the client sent on it.
    client_data: i64 = 0,
    client_reset: bool = false,
    /// The client named it in a PRIORITY frame (the server may reset such a stream).
    priority_named: bool = false,
    /// Bad PRIORITY frames (wrong length, or on itself) sent while the stream was idle:
    /// each is answered by a RST_STREAM that ends nothing (RFC 9113 6.3).
    idle_priority_resets: u32 = 0,
    /// The same, sent once the client had opened the stream: the stream error resets it
    /// (again, if it already was: each frame is its own error).
    priority_resets: u32 = 0,
    // The server's side.
    server_grants: i64 = 0,
    /// DATA frame bytes the server sent on it (flow control counts padding), and of
    /// them the body bytes.
    data: i64 = 0,
    body: u64 = 0,
    phase: Phase = .none,
    /// END_STREAM from the server / RST_STREAM from the server.
    ended: bool = false,
    reset: bool = false,
    reset_code: u32 = 0,
    status: u16 = 0,
    content_length: ?u64 = null,
    // The app's side.
    /// The request was HEAD (the app sees it): its response has no body.
    is_head: bool = false,
    app_status: ?u16 = null,
    /// The app completed its response with this many body bytes, the stream not gone.
    app_body: ?u64 = null,

    /// A response without a body (RFC 9110 6.4.1).
    pub fn noBody(self: *const StreamInfo) bool {
        return self.is_head or self.status == 204 or self.status == 304;
    }
};

pub const Streams = struct {
    items: [oracle_streams_max]StreamInfo = undefined,
    len: usize = 0,
    /// Given out once the table is full: its checks are meaningless, so they are skipped.
    spare: StreamInfo = .{ .id = 0 },
    overflowed: bool = false,

    pub fn find(self: *Streams, id: u32) ?*StreamInfo {
        var i = self.len;
        while (i > 0) {
            i -= 1;
            if (self.items[i].id == id) return &self.items[i];
        }
        return null;
    }

    pub fn get(self: *Streams, id: u32) *StreamInfo {
        if (self.find(id)) |s| return s;
        if (self.len == self.items.len) {
            self.overflowed = true;
            self.spare = .{ .id = id };
            return &self.spare;
        }
        self.items[self.len] = .{ .id = id };
        self.len += 1;
        return &self.items[self.len - 1];
    }
};

// ---- the client's settings as the server may be applying them -----------------------------

/// SETTINGS_INITIAL_WINDOW_SIZE and SETTINGS_MAX_FRAME_SIZE as the client sent them. The
/// server applies a SETTINGS frame when it reads it and acknowledges it after; until the
/// ACK is seen the server may be using any value of the frames in flight, so a bound is
/// the largest of them and the value in effect after the last acknowledged frame.
pub const Settings = struct {
    const Pending = struct {
        window_top: ?i64 = null,
        window_last: ?i64 = null,
        frame_top: ?u32 = null,
        frame_last: ?u32 = null,
    };

    window: i64 = default_window,
    frame_size: u32 = default_frame_size,
    pending: std.ArrayList(Pending) = .empty,
    acked: usize = 0,

    pub fn beginFrame(self: *Settings) void {
        self.pending.append(gpa, .{}) catch outOfMemory();
    }

    /// One value of the frame begun last. Values the server refuses (a connection error)
    /// are left out: it never applies them.
    pub fn value(self: *Settings, id: u16, v: u32) void {
        if (self.pending.items.len == self.acked) return;
        const p = &self.pending.items[self.pending.items.len - 1];
        if (id == setting_initial_window_size and v <= window_max) {
            p.window_last = v;
            p.window_top = @max(p.window_top orelse 0, @as(i64, v));
        } else if (id == setting_max_frame_size and v >= default_frame_size and v <= frame_size_top) {
            p.frame_last = v;
            p.frame_top = @max(p.frame_top orelse 0, v);
        }
    }

    /// The server acknowledged the oldest frame in flight. False when none was.
    pub fn ack(self: *Settings) bool {
        if (self.acked == self.pending.items.len) return false;
        const p = self.pending.items[self.acked];
        self.acked += 1;
        if (p.window_last) |w| self.window = w;
        if (p.frame_last) |f| self.frame_size = f;
        return true;
    }

    /// Settings that need no ACK (HTTP2-Settings of an h2c upgrade): in effect at once,
    /// those the server refuses left out.
    pub fn apply(self: *Settings, id: u16, v: u32) void {
        if (id == setting_initial_window_size and v <= window_max) self.window = v;
        if (id == setting_max_frame_size and v >= default_frame_size and v <= frame_size_top) self.frame_size = v;
    }

    pub fn unacked(self: *const Settings) usize {
        return self.pending.items.len - self.acked;
    }

    pub fn windowBound(self: *const Settings) i64 {
        var top = self.window;
        for (self.pending.items[self.acked..]) |p| top = @max(top, p.window_top orelse top);
        return top;
    }

    pub fn frameBound(self: *const Settings) u32 {
        var top = self.frame_size;
        for (self.pending.items[self.acked..]) |p| top = @max(top, p.frame_top orelse top);
        return top;
    }

    pub fn deinit(self: *Settings) void {
        self.pending.deinit(gpa);
    }
};

// ---- the client's bytes, parsed as the server parses them -------------------------------

/// Reads the client's byte stream (after mutation) frame by frame, a payload in pieces as
/// it comes, and keeps what a strict client knows it told the server: its grants, its
/// settings, the streams it opened, its PINGs.
pub const Sent = struct {
    streams: *Streams,
    head: [frame_header_len]u8 = undefined,
    head_len: usize = 0,
    frame: ?FrameHead = null,
    left: u32 = 0,
    /// A settings entry, a WINDOW_UPDATE increment or a PING payload gathered so far.
    fixed: [8]u8 = undefined,
    fixed_len: usize = 0,

    conn_grants: i64 = 0,
    /// DATA frame bytes sent on the connection (every stream's).
    data_conn: i64 = 0,
    /// Highest stream id of a client HEADERS frame (the server's last stream id).
    max_opened: u32 = 0,
    settings: Settings = .{},
    pings: std.ArrayList(u64) = .empty,
    pings_acked: usize = 0,

    pub fn feed(self: *Sent, bytes: []const u8) void {
        var rest = bytes;
        while (rest.len > 0) {
            if (self.frame == null) {
                const n = @min(frame_header_len - self.head_len, rest.len);
                @memcpy(self.head[self.head_len..][0..n], rest[0..n]);
                self.head_len += n;
                rest = rest[n..];
                if (self.head_len == frame_header_len) {
                    self.head_len = 0;
                    self.begin(FrameHead.parse(&self.head));
                }
                continue;
            }
            const n = @min(self.left, rest.len);
            self.payload(rest[0..n]);
            self.left -= @intCast(n);
            rest = rest[n..];
            if (self.left == 0) self.frame = null;
        }
    }

    pub fn begin(self: *Sent, fh: FrameHead) void {
        traceFrame("C>", fh);
        self.frame = fh;
        self.left = fh.len;
        self.fixed_len = 0;
        switch (fh.typ) {
            .headers => if (fh.id & 1 == 1 and fh.id > self.max_opened) {
                self.max_opened = fh.id;
                // Known from here on (the window top-up covers every opened stream).
                _ = self.streams.get(fh.id);
            },
            .data => {
                self.data_conn += fh.len;
                if (fh.id != 0) self.streams.get(fh.id).client_data += fh.len;
            },
            .settings => if (fh.flags & flag_ack == 0) self.settings.beginFrame(),
            .rst_stream => if (fh.id != 0) {
                self.streams.get(fh.id).client_reset = true;
            },
            .priority => if (fh.id != 0) {
                self.streams.get(fh.id).priority_named = true;
                if (fh.len != 5) self.badPriority(fh.id);
            },
            else => {},
        }
        if (fh.len == 0) self.frame = null;
    }

    /// Part of the current frame's payload: settings are applied entry by entry (the
    /// server applies each as its six bytes arrive), increments and PINGs once whole.
    pub fn payload(self: *Sent, bytes: []const u8) void {
        const fh = self.frame.?;
        const need: usize = switch (fh.typ) {
            .settings => if (fh.flags & flag_ack == 0) 6 else return,
            .window_update => if (fh.len == 4) 4 else return,
            .ping => if (fh.len == 8 and fh.id == 0 and fh.flags & flag_ack == 0) 8 else return,
            .priority => if (fh.len == 5 and fh.id != 0) 4 else return,
            else => return,
        };
        for (bytes) |b| {
            self.fixed[self.fixed_len] = b;
            self.fixed_len += 1;
            if (self.fixed_len < need) continue;
            self.fixed_len = 0;
            switch (fh.typ) {
                .settings => self.settings.value(std.mem.readInt(u16, self.fixed[0..2], .big), std.mem.readInt(u32, self.fixed[2..6], .big)),
                .window_update => self.grant(fh.id, std.mem.readInt(u32, self.fixed[0..4], .big) & stream_id_max),
                .ping => self.pings.append(gpa, std.mem.readInt(u64, self.fixed[0..8], .big)) catch outOfMemory(),
                .priority => if (std.mem.readInt(u32, self.fixed[0..4], .big) & stream_id_max == fh.id) self.badPriority(fh.id),
                else => unreachable,
            }
        }
    }

    /// A PRIORITY frame the server answers with a stream error: on a stream it has no
    /// state for (idle), one RST_STREAM that ends nothing.
    pub fn badPriority(self: *Sent, id: u32) void {
        const info = self.streams.get(id);
        if (id & 1 == 0 or id > self.max_opened) info.idle_priority_resets += 1 else info.priority_resets += 1;
    }

    pub fn grant(self: *Sent, id: u32, inc: u32) void {
        note("   increment {d}", .{inc});
        if (id == 0) {
            self.conn_grants += inc;
            return;
        }
        self.streams.get(id).grants += inc;
    }

    pub fn deinit(self: *Sent) void {
        self.settings.deinit();
        self.pings.deinit(gpa);
    }
};

pub fn traceFrame(dir: []const u8, fh: FrameHead) void {
    if (!fuzz.trace) return;
    const name = std.enums.tagName(FrameType, fh.typ) orelse "unknown";
    std.debug.print("{s} {s}({d}) flags=0x{x} stream={d} len={d}\n", .{ dir, name, @intFromEnum(fh.typ), fh.flags, fh.id, fh.len });
}

// ---- the oracle: the server's output, checked as a strict client would ------------------

/// A header block being gathered from HEADERS and CONTINUATION frames.
pub const Block = struct { id: u32, end_stream: bool };

pub var decode_scratch: [256 * 1024]u8 = undefined;
pub var decode_fields: [1024]hpack.Header = undefined;

pub const Checker = struct {
    sent: *const Sent,
    settings: *Settings,
    streams: *Streams,
    decoder: hpack.Decoder = hpack.Decoder.init(server_table_size),
    /// Received bytes not yet a whole frame.
    rx: Bytes = .{},
    frames: usize = 0,
    block: ?Block = null,
    block_bytes: Bytes = .{},
    /// The server's SETTINGS_INITIAL_WINDOW_SIZE: the windows the client's DATA has.
    server_initial_window: i64 = default_window,
    server_conn_grants: i64 = 0,
    /// DATA frame bytes the server sent, all streams.
    data_conn: i64 = 0,
    goaway_last: ?u32 = null,
    goaway_code: u32 = 0,
    /// RST_STREAM frames with FLOW_CONTROL_ERROR (the harness's window top-up must cause none).
    flow_control_resets: usize = 0,
    /// An h2c upgrade: the output starts with the HTTP/1.1 101 head.
    upgrade_head: bool = false,
    eof: bool = false,

    pub fn feed(self: *Checker, bytes: []const u8) Failure!void {
        try check(!self.eof, "bytes after the end of the stream", .{});
        self.rx.append(bytes);
        if (self.upgrade_head) {
            const all = self.rx.items();
            const end = std.mem.indexOf(u8, all, "\r\n\r\n") orelse return;
            try check(std.mem.startsWith(u8, all, "HTTP/1.1 101 "), "the answer to an h2c upgrade is \"{s}\"", .{all[0..@min(all.len, 40)]});
            self.rx.consume(end + 4);
            self.upgrade_head = false;
        }
        var at: usize = 0;
        const all = self.rx.items();
        while (all.len - at >= frame_header_len) {
            const fh = FrameHead.parse(all[at..][0..frame_header_len]);
            if (all.len - at - frame_header_len < fh.len) break;
            const payload = all[at + frame_header_len ..][0..fh.len];
            at += frame_header_len + fh.len;
            try self.frame(fh, payload);
        }
        self.rx.consume(at);
    }

    pub fn onEof(self: *Checker) Failure!void {
        if (self.eof) return;
        self.eof = true;
        try check(self.rx.items().len == 0, "the connection ended inside a frame ({d} bytes of it)", .{self.rx.items().len});
        try check(self.goaway_last != null, "the server closed the connection without a GOAWAY", .{});
    }

    pub fn frame(self: *Checker, fh: FrameHead, payload: []const u8) Failure!void {
        traceFrame("S>", fh);
        if (self.goaway_last != null) try check(self.goaway_code == 0, "a {s} frame after GOAWAY with error {d}", .{ typeName(fh.typ), self.goaway_code });
        if (self.frames == 0) try check(fh.typ == .settings and fh.flags & flag_ack == 0, "the server's first frame is {s}, not SETTINGS", .{typeName(fh.typ)});
        self.frames += 1;
        try check(!fh.reserved, "the reserved bit is set on a {s} frame", .{typeName(fh.typ)});
        const bound = self.settings.frameBound();
        try check(fh.len <= bound, "a {s} frame of {d} bytes, past the client's SETTINGS_MAX_FRAME_SIZE {d}", .{ typeName(fh.typ), fh.len, bound });
        if (self.block) |b| try check(fh.typ == .continuation and fh.id == b.id, "a {s} frame on stream {d} inside the header block of stream {d}", .{ typeName(fh.typ), fh.id, b.id });
        switch (fh.typ) {
            .data => try self.dataFrame(fh, payload),
            .headers => try self.headersFrame(fh, payload),
            .continuation => try self.continuationFrame(fh, payload),
            .rst_stream => try self.rstFrame(fh, payload),
            .settings => try self.settingsFrame(fh, payload),
            .ping => try self.pingFrame(fh, payload),
            .goaway => try self.goawayFrame(fh, payload),
            .window_update => try self.windowUpdateFrame(fh, payload),
            else => return fail("the server sent a frame of type {d} ({s})", .{ @intFromEnum(fh.typ), typeName(fh.typ) }),
        }
    }

    /// A stream the server may send on: one the client opened (odd, at most the highest
    /// id of its HEADERS), still open from the server's side.
    pub fn sendable(self: *Checker, fh: FrameHead) Failure!*StreamInfo {
        try check(fh.id != 0, "a {s} frame on stream 0", .{typeName(fh.typ)});
        try check(fh.id & 1 == 1 and fh.id <= self.sent.max_opened, "a {s} frame on stream {d}, which the client never opened (highest {d})", .{ typeName(fh.typ), fh.id, self.sent.max_opened });
        if (self.goaway_last) |last| try check(fh.id <= last, "a {s} frame on stream {d}, past the GOAWAY's last stream {d}", .{ typeName(fh.typ), fh.id, last });
        const info = self.streams.get(fh.id);
        try check(!info.reset, "a {s} frame on stream {d} after the server reset it", .{ typeName(fh.typ), fh.id });
        try check(!info.ended or fh.typ == .window_update, "a {s} frame on stream {d} after its END_STREAM", .{ typeName(fh.typ), fh.id });
        return info;
    }

    pub fn dataFrame(self: *Checker, fh: FrameHead, payload: []const u8) Failure!void {
        try check(fh.flags & ~(flag_end_stream | flag_padded) == 0, "DATA with flags 0x{x}", .{fh.flags});
        const info = try self.sendable(fh);
        try check(info.phase == .final, "DATA on stream {d} before its final response HEADERS", .{fh.id});
        var body = payload;
        if (fh.flags & flag_padded != 0) {
            try check(payload.len >= 1 and payload[0] < payload.len, "DATA on stream {d} with bad padding", .{fh.id});
            body = payload[1 .. payload.len - payload[0]];
        }
        try self.spend(info, fh.len);
        if (!self.streams.overflowed) try self.checkBody(info, body);
        info.body += body.len;
        if (fh.flags & flag_end_stream != 0) try self.streamEnded(info);
    }

    /// Flow control (RFC 9113 6.9): DATA never past what the client granted. An empty
    /// DATA frame (an END_STREAM) uses no window and may go with none left (6.9.1), a
    /// window a SETTINGS decrease made negative too.
    pub fn spend(self: *Checker, info: *StreamInfo, len: u32) Failure!void {
        if (len == 0) return;
        self.data_conn += len;
        const conn_limit = default_window + self.sent.conn_grants;
        try check(self.data_conn <= conn_limit, "DATA past the connection window: {d} bytes sent, the client granted {d}", .{ self.data_conn, conn_limit });
        info.data += len;
        fuzz.stats.data_frames += 1;
        fuzz.stats.data_bytes += len;
        if (self.data_conn == conn_limit) fuzz.stats.window_exhausted += 1;
        if (self.streams.overflowed) return;
        const initial = self.settings.windowBound();
        const limit = initial + info.grants;
        try check(info.data <= limit, "DATA past stream {d}'s window: {d} bytes sent, the client granted {d} (initial window {d} + updates {d})", .{ info.id, info.data, limit, initial, info.grants });
        if (info.data == limit) fuzz.stats.window_exhausted += 1;
        if (initial != self.settings.window) fuzz.stats.data_settings_in_flight += 1;
    }

    pub fn checkBody(self: *Checker, info: *const StreamInfo, body: []const u8) Failure!void {
        _ = self;
        if (body.len == 0) return;
        try check(!info.noBody(), "stream {d}: {d} body bytes in a response that has none (status {d}, HEAD {})", .{ info.id, body.len, info.status, info.is_head });
        for (body, 0..) |b, i| {
            const want = responseByte(info.id, info.body + i);
            if (b != want) return fail("stream {d}: DATA byte at body offset {d} is 0x{x}, the app wrote 0x{x}{s}", .{ info.id, info.body + i, b, want, if (b == poison_byte) " (the poison of a released body)" else "" });
        }
    }

    pub fn streamEnded(self: *Checker, info: *StreamInfo) Failure!void {
        _ = self;
        info.ended = true;
        fuzz.stats.responses_ended += 1;
        if (info.noBody()) return;
        if (info.content_length) |cl| try check(info.body == cl, "stream {d}: {d} body bytes, content-length {d}", .{ info.id, info.body, cl });
        if (info.app_body) |n| try check(info.body == n, "stream {d}: {d} body bytes reached the client, the app wrote {d}", .{ info.id, info.body, n });
    }

    pub fn headersFrame(self: *Checker, fh: FrameHead, payload: []const u8) Failure!void {
        try check(fh.flags & ~(flag_end_stream | flag_end_headers) == 0, "HEADERS with flags 0x{x}", .{fh.flags});
        _ = try self.sendable(fh);
        self.block = .{ .id = fh.id, .end_stream = fh.flags & flag_end_stream != 0 };
        self.block_bytes.clear();
        self.block_bytes.append(payload);
        if (fh.flags & flag_end_headers != 0) try self.blockDone();
    }

    pub fn continuationFrame(self: *Checker, fh: FrameHead, payload: []const u8) Failure!void {
        try check(self.block != null, "CONTINUATION on stream {d} outside a header block", .{fh.id});
        try check(fh.flags & ~flag_end_headers == 0, "CONTINUATION with flags 0x{x}", .{fh.flags});
        self.block_bytes.append(payload);
        fuzz.stats.continuation_frames += 1;
        if (fh.flags & flag_end_headers != 0) try self.blockDone();
    }

    pub fn blockDone(self: *Checker) Failure!void {
        const b = self.block.?;
        self.block = null;
        const fields = self.decoder.decode(self.block_bytes.items(), &decode_scratch, &decode_fields) catch |e| {
            return fail("stream {d}: the server's header block does not decode ({s})", .{ b.id, @errorName(e) });
        };
        const info = self.streams.get(b.id);
        if (info.phase == .final) return self.trailers(info, b, fields);
        try check(fields.len > 0 and std.mem.eql(u8, fields[0].name, ":status"), "stream {d}: a response head without :status first", .{b.id});
        const status = std.fmt.parseInt(u16, fields[0].value, 10) catch 0;
        try check(fields[0].value.len == 3 and status >= 100 and status <= 599 and status != 101, "stream {d}: :status \"{s}\"", .{ b.id, fields[0].value });
        try checkFields(b.id, fields[1..]);
        if (status < 200) {
            try check(!b.end_stream, "stream {d}: a {d} response with END_STREAM", .{ b.id, status });
            info.phase = .informational;
            return;
        }
        info.phase = .final;
        info.status = status;
        for (fields[1..]) |f| if (std.mem.eql(u8, f.name, "content-length")) {
            info.content_length = std.fmt.parseInt(u64, f.value, 10) catch return fail("stream {d}: content-length \"{s}\"", .{ b.id, f.value });
        };
        if (info.app_status) |want| try check(status == want, "stream {d}: :status {d}, the app answered {d}", .{ b.id, status, want });
        if (b.end_stream) try self.streamEnded(info);
    }

    pub fn trailers(self: *Checker, info: *StreamInfo, b: Block, fields: []const hpack.Header) Failure!void {
        try check(b.end_stream, "stream {d}: trailers without END_STREAM", .{b.id});
        for (fields) |f| try check(f.name.len == 0 or f.name[0] != ':', "stream {d}: pseudo-header {s} in trailers", .{ b.id, f.name });
        try checkFields(b.id, fields);
        try self.streamEnded(info);
    }

    pub fn rstFrame(self: *Checker, fh: FrameHead, payload: []const u8) Failure!void {
        try check(fh.len == 4, "RST_STREAM of {d} bytes", .{fh.len});
        try check(fh.id != 0, "RST_STREAM on stream 0", .{});
        const info = self.streams.get(fh.id);
        // RFC 9113 6.3 has a malformed or self-dependent PRIORITY reset even on an idle
        // stream (5.1 would forbid it): the one way the server may reset a stream the
        // client never opened.
        const opened = fh.id & 1 == 1 and fh.id <= self.sent.max_opened;
        try check(opened or info.idle_priority_resets > 0, "RST_STREAM on stream {d}, which the client never opened (highest {d})", .{ fh.id, self.sent.max_opened });
        const code = std.mem.readInt(u32, payload[0..4], .big);
        note("   RST_STREAM code {d}", .{code});
        try check(code <= error_code_max, "RST_STREAM with error code {d}", .{code});
        // Each bad PRIORITY frame is its own stream error, whatever the stream's state,
        // and the client may open an idle stream after: such a reset ends nothing.
        const priority_code = code == 1 or code == 6; // PROTOCOL_ERROR, FRAME_SIZE_ERROR
        if (info.idle_priority_resets > 0 and priority_code) {
            info.idle_priority_resets -= 1;
            return;
        }
        const for_priority = info.priority_resets > 0 and priority_code;
        if (info.reset) {
            // Already reset: a repeat only answers a bad PRIORITY (its own stream error).
            if (for_priority) {
                info.priority_resets -= 1;
                return;
            }
            return fail("a second RST_STREAM on stream {d}", .{fh.id});
        }
        info.reset = true;
        info.reset_code = code;
        fuzz.stats.rst_by_code[code] += 1;
        if (code == flow_control_error) self.flow_control_resets += 1;
    }

    pub fn settingsFrame(self: *Checker, fh: FrameHead, payload: []const u8) Failure!void {
        try check(fh.id == 0, "SETTINGS on stream {d}", .{fh.id});
        try check(fh.flags & ~flag_ack == 0, "SETTINGS with flags 0x{x}", .{fh.flags});
        if (fh.flags & flag_ack != 0) {
            try check(fh.len == 0, "a SETTINGS ACK of {d} bytes", .{fh.len});
            try check(self.settings.ack(), "a SETTINGS ACK for no SETTINGS of the client", .{});
            return;
        }
        try check(fh.len % 6 == 0, "SETTINGS of {d} bytes", .{fh.len});
        var i: usize = 0;
        while (i < payload.len) : (i += 6) {
            const id = std.mem.readInt(u16, payload[i..][0..2], .big);
            const v = std.mem.readInt(u32, payload[i + 2 ..][0..4], .big);
            if (id == setting_initial_window_size) {
                try check(v <= window_max, "the server's SETTINGS_INITIAL_WINDOW_SIZE is {d}", .{v});
                self.server_initial_window = v;
            }
            if (id == setting_max_frame_size) try check(v >= default_frame_size and v <= frame_size_top, "the server's SETTINGS_MAX_FRAME_SIZE is {d}", .{v});
            if (id == setting_enable_push) try check(v <= 1, "the server's SETTINGS_ENABLE_PUSH is {d}", .{v});
        }
    }

    pub fn pingFrame(self: *Checker, fh: FrameHead, payload: []const u8) Failure!void {
        try check(fh.id == 0 and fh.len == 8, "PING on stream {d} of {d} bytes", .{ fh.id, fh.len });
        // The server never pings: every PING it sends answers one of the client's, in order.
        try check(fh.flags == flag_ack, "a PING from the server with flags 0x{x}", .{fh.flags});
        const s = @constCast(self.sent);
        try check(s.pings_acked < s.pings.items.len, "a PING ACK for no PING of the client", .{});
        const want = s.pings.items[s.pings_acked];
        s.pings_acked += 1;
        try check(std.mem.readInt(u64, payload[0..8], .big) == want, "a PING ACK with another payload than the client's PING", .{});
    }

    pub fn goawayFrame(self: *Checker, fh: FrameHead, payload: []const u8) Failure!void {
        try check(fh.id == 0 and fh.len >= 8, "GOAWAY on stream {d} of {d} bytes", .{ fh.id, fh.len });
        const last = std.mem.readInt(u32, payload[0..4], .big) & stream_id_max;
        const code = std.mem.readInt(u32, payload[4..8], .big);
        note("   GOAWAY last stream {d} code {d}", .{ last, code });
        try check(code <= error_code_max, "GOAWAY with error code {d}", .{code});
        try check(last <= self.sent.max_opened, "GOAWAY names stream {d}, past the client's highest {d}", .{ last, self.sent.max_opened });
        if (self.goaway_last) |prev| try check(last <= prev, "a second GOAWAY raises the last stream from {d} to {d}", .{ prev, last });
        if (self.goaway_last == null) fuzz.stats.goaway_by_code[code] += 1;
        self.goaway_last = last;
        self.goaway_code = code;
    }

    pub fn windowUpdateFrame(self: *Checker, fh: FrameHead, payload: []const u8) Failure!void {
        try check(fh.len == 4 and fh.flags == 0, "WINDOW_UPDATE of {d} bytes, flags 0x{x}", .{ fh.len, fh.flags });
        const raw = std.mem.readInt(u32, payload[0..4], .big);
        try check(raw != 0 and raw <= stream_id_max, "WINDOW_UPDATE with increment 0x{x}", .{raw});
        if (fh.id == 0) {
            self.server_conn_grants += raw;
            const window = default_window + self.server_conn_grants - self.sent.data_conn;
            return check(window <= window_max, "the server opens the connection window to {d}, past 2^31-1", .{window});
        }
        const info = try self.sendable(fh);
        info.server_grants += raw;
        const window = self.server_initial_window + info.server_grants - info.client_data;
        try check(window <= window_max, "the server opens stream {d}'s window to {d}, past 2^31-1", .{ fh.id, window });
    }

    pub fn deinit(self: *Checker) void {
        self.decoder.deinit();
        self.rx.deinit();
        self.block_bytes.deinit();
    }
};

pub fn typeName(t: FrameType) []const u8 {
    return std.enums.tagName(FrameType, t) orelse "unknown";
}

/// Response fields as RFC 9113 8.2 has them: lower-case names, no connection-specific
/// fields, no pseudo-header after the first.
pub fn checkFields(id: u32, fields: []const hpack.Header) Failure!void {
    const connection_specific = [_][]const u8{ "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade" };
    for (fields) |f| {
        try check(f.name.len > 0 and f.name[0] != ':', "stream {d}: field \"{s}\" in a response head", .{ id, f.name });
        for (f.name) |ch| try check(!std.ascii.isUpper(ch), "stream {d}: upper-case field name {s}", .{ id, f.name });
        for (connection_specific) |name| try check(!std.mem.eql(u8, f.name, name), "stream {d}: connection-specific field {s}", .{ id, name });
    }
}
