//! The HTTP/3 session fuzzer's harness: `http3/session.zig`'s Session over a fake QUIC
//! transport (the agreed interface: streams as byte buffers, events queued), driven by one
//! input as a sequence of steps: raw bytes or well-formed frames on the client's request
//! streams, its control stream, QPACK encoder and decoder streams (and streams of other
//! types), requests whose field sections the static-only encoder writes from fuzz bytes,
//! the peer's resets and STOP_SENDING, the transport's backpressure and read sizes, the
//! application's answers (respond, early hints, body, trailers, abort, pause and resume),
//! GOAWAY, time, the connection's end.
//!
//! Or, with byte 0's bit 3 (or ZIGCORN_FUZZ_H3_TRANSPORT=real), the same steps over a real
//! server QUIC Connection (`RealLink`): opened by the QUIC connection fuzzer's harness from
//! the input's next bytes (the client's transport parameters among them, so they reach
//! `applyParams`), the client's acts sent as frames in sealed 1-RTT packets, the session
//! driven by the connection's events as `http3/worker.zig`'s `drive` does.
//!
//! Checked (a violation is `error.Invariant`, `last_failure` says which): no panic
//! (ReleaseSafe), `run` ends (the fake's events are finite: one that loops would spin on
//! the watchdog's count), no write past the room the transport offered or after a stream
//! ended, our control stream opens with SETTINGS, and after `destroy` no allocation of the
//! session's is left (a counting allocator).
const std = @import("std");
const session_mod = @import("../http3/session.zig");
const frames = @import("../http3/frames.zig");
const qpack = @import("../http3/qpack.zig");
const qpack_encoder = @import("../http3/qpack_encoder.zig");
const support = @import("fuzz_support.zig");
const quic_fuzz = @import("fuzz_quic_conn.zig");
const connection = @import("../quic/connection.zig");
const qvarint = @import("../quic/varint.zig");

const Header = qpack.Header;
const Reader = support.Reader;
const gpa = std.heap.c_allocator;

pub const steps_max = 400;
pub const events_per_run_max = 100_000;

pub var last_failure: []const u8 = "";

fn fail(comptime why: []const u8) error{Invariant} {
    last_failure = why;
    return error.Invariant;
}

// ---- the fake transport ------------------------------------------------------------------

// The agreed interface's types, as the session's unit tests' fake has them.
const session_fake = @import("../http3/session_tests.zig");
pub const StreamError = session_fake.StreamError;
pub const Event = session_fake.Event;

const FakeStream = struct {
    in: std.ArrayListUnmanaged(u8) = .empty,
    in_at: usize = 0,
    in_fin: bool = false,
    fin_read: bool = false,
    /// The peer reset it: as a QUIC connection, nothing more comes on it, and its receive
    /// side is over (`streamReceiveOver`).
    in_reset: bool = false,
    /// The first bytes we wrote (enough to check a control stream's start), and the count.
    out_head: [8]u8 = undefined,
    out_len: u64 = 0,
    out_fin: bool = false,
    reset_code: ?u64 = null,
    stop_code: ?u64 = null,
};

const Fake = struct {
    events: std.ArrayListUnmanaged(Event) = .empty,
    event_at: usize = 0,
    /// Events handed out in one `run` (the watchdog against a session that loops).
    handed: usize = 0,
    streams: std.AutoArrayHashMapUnmanaged(u64, FakeStream) = .empty,
    next_uni: u64 = 3,
    control_id: ?u64 = null,
    write_room: usize = std.math.maxInt(usize),
    read_chunk: usize = std.math.maxInt(usize),
    close_code: ?u64 = null,
    wrote_after_end: bool = false,

    fn deinit(f: *Fake) void {
        for (f.streams.values()) |*st| st.in.deinit(gpa);
        f.streams.deinit(gpa);
        f.events.deinit(gpa);
    }

    fn stream(f: *Fake, id: u64) !*FakeStream {
        const gop = try f.streams.getOrPut(gpa, id);
        if (!gop.found_existing) gop.value_ptr.* = .{};
        return gop.value_ptr;
    }

    fn push(f: *Fake, ev: Event) !void {
        try f.events.append(gpa, ev);
    }

    /// The client sends `bytes` (and maybe its FIN) on `id`.
    fn send(f: *Fake, id: u64, bytes: []const u8, fin: bool) !void {
        const st = try f.stream(id);
        // A transport takes nothing past the FIN, nor after the peer's reset.
        if (st.in_fin or st.in_reset) return;
        try st.in.appendSlice(gpa, bytes);
        if (fin) st.in_fin = true;
        try f.push(.{ .readable = id });
    }

    pub fn nextEvent(f: *Fake) ?Event {
        if (f.event_at == f.events.items.len) return null;
        f.handed += 1;
        if (f.handed > events_per_run_max) return null;
        defer f.event_at += 1;
        return f.events.items[f.event_at];
    }

    pub fn streamRead(f: *Fake, id: u64, buf: []u8) StreamError!struct { n: usize, fin: bool } {
        const st = f.streams.getPtr(id) orelse return error.UnknownStream;
        if (st.stop_code != null or st.fin_read) return error.StreamClosed;
        const avail = st.in.items[st.in_at..];
        const n = @min(avail.len, buf.len, f.read_chunk);
        @memcpy(buf[0..n], avail[0..n]);
        st.in_at += n;
        const fin = st.in_fin and st.in_at == st.in.items.len;
        if (fin) st.fin_read = true;
        return .{ .n = n, .fin = fin };
    }

    pub fn streamWrite(f: *Fake, id: u64, bytes: []const u8, fin: bool) StreamError!usize {
        const st = f.streams.getPtr(id) orelse return error.UnknownStream;
        if (st.reset_code != null or st.out_fin) {
            f.wrote_after_end = bytes.len > 0 or fin;
            return error.StreamClosed;
        }
        if (f.close_code != null) return error.StreamClosed;
        const n = @min(bytes.len, f.write_room);
        f.write_room -= n;
        if (st.out_len < st.out_head.len) {
            const at: usize = @intCast(st.out_len);
            const k = @min(st.out_head.len - at, n);
            @memcpy(st.out_head[at..][0..k], bytes[0..k]);
        }
        st.out_len += n;
        if (fin and n == bytes.len) st.out_fin = true;
        return n;
    }

    pub fn streamReset(f: *Fake, id: u64, code: u64) void {
        const st = f.streams.getPtr(id) orelse return;
        if (st.reset_code == null and !st.out_fin) st.reset_code = code;
    }

    pub fn streamStopSending(f: *Fake, id: u64, code: u64) void {
        const st = f.streams.getPtr(id) orelse return;
        if (st.stop_code == null) st.stop_code = code;
    }

    pub fn streamReceiveOver(f: *Fake, id: u64) bool {
        const st = f.streams.getPtr(id) orelse return false;
        return st.stop_code != null or st.fin_read or st.in_reset;
    }

    pub fn openUni(f: *Fake) StreamError!u64 {
        const id = f.next_uni;
        _ = f.stream(id) catch return error.StreamLimit;
        f.next_uni += 4;
        if (f.control_id == null) f.control_id = id;
        return id;
    }

    pub fn closeApplication(f: *Fake, code: u64, reason: []const u8) void {
        _ = reason;
        if (f.close_code != null) return;
        f.close_code = code;
        f.push(.{ .closed = .{ .code = code, .app = true } }) catch |err| switch (err) {
            error.OutOfMemory => {},
        };
    }

    pub fn closeApplicationWhenSent(f: *Fake, code: u64) void {
        f.closeApplication(code, "");
    }
};

/// The fake as the harness's link: the client's acts become queued events.
const FakeLink = struct {
    pub const Transport = Fake;
    fake: Fake = .{},

    fn transport(l: *FakeLink) *Fake {
        return &l.fake;
    }
    fn deinit(l: *FakeLink) void {
        l.fake.deinit();
    }
    fn send(l: *FakeLink, id: u64, bytes: []const u8, fin: bool) !void {
        try l.fake.send(id, bytes, fin);
    }
    fn reset(l: *FakeLink, id: u64, code: u64, final_size: u64) !void {
        // The real connection's receive side ends with the peer's RESET_STREAM; bytes sent
        // on the stream after it are not delivered (found by the fuzzer itself: the fake
        // took them, and the session read them as a new request on a stream it had reset).
        (try l.fake.stream(id)).in_reset = true;
        try l.fake.push(.{ .reset = .{ .id = id, .code = code, .final_size = final_size } });
    }
    fn stopSending(l: *FakeLink, id: u64, code: u64) !void {
        try l.fake.push(.{ .stop_sending = .{ .id = id, .code = code } });
    }
    /// The transport's backpressure and read sizes; then a writable event.
    fn room(l: *FakeLink, r: *Reader, owner: *const Owner) !void {
        const b = r.byte();
        const unbounded = std.math.maxInt(usize);
        l.fake.write_room = if (b & 0x80 != 0) unbounded else @as(usize, b) * 16;
        l.fake.read_chunk = if (r.byte() & 1 != 0) unbounded else 1 + @as(usize, r.byte());
        try l.fake.push(.{ .writable = owner.pick(r) });
    }
    fn handshakeDone(l: *FakeLink, r: *Reader) !void {
        _ = r;
        try l.fake.push(.handshake_done);
    }
    fn peerClose(l: *FakeLink, code: u64, app: bool) !void {
        try l.fake.push(.{ .closed = .{ .code = code, .app = app } });
    }
    fn advance(l: *FakeLink, ms: u64) !void {
        _ = l;
        _ = ms;
    }
    fn armAllocator(l: *FakeLink, n: usize) void {
        _ = l;
        _ = n;
    }
    fn drive(l: *FakeLink, s: anytype) !void {
        const f = &l.fake;
        f.handed = 0;
        s.run();
        if (f.handed > events_per_run_max) return fail("run handled events without end");
        if (f.wrote_after_end) return fail("a write on a stream after its end or reset");
        if (f.control_id) |id| {
            const st = f.streams.getPtr(id).?;
            if (st.out_len >= 2 and (st.out_head[0] != 0x00 or st.out_head[1] != 0x04))
                return fail("our control stream does not open with SETTINGS");
        }
    }
};

// ---- the real transport: a QUIC connection, opened as the QUIC connection fuzzer does ---

/// The client's acts as frames in sealed 1-RTT packets to a real server Connection
/// (`fuzz_quic_conn.zig`'s harness: its handshake or `establish`, its checks of what the
/// server sends), the session driven by the connection's events as `http3/worker.zig`'s
/// `drive` does (`nextEvent`, `handle`).
const RealLink = struct {
    pub const Transport = connection.Connection;
    q: *quic_fuzz.Conn,
    /// The next offset of each client stream the harness sent on.
    offsets: std.AutoHashMapUnmanaged(u64, u64) = .empty,

    fn transport(l: *RealLink) *connection.Connection {
        return l.q.c;
    }
    fn deinit(l: *RealLink) void {
        l.offsets.deinit(gpa);
    }
    /// A QUIC harness call's result; its failure becomes ours.
    fn quic(result: anyerror!void) !void {
        result catch |err| {
            if (err == error.Invariant) last_failure = quic_fuzz.last_failure;
            return err;
        };
    }
    fn packet(l: *RealLink, w: *qvarint.Writer) !void {
        try quic(l.q.oneRtt(w.written(), null, false));
    }
    /// `bytes` as STREAM frames (with offset and length), at most 1000 bytes a packet.
    fn send(l: *RealLink, id: u64, bytes: []const u8, fin: bool) !void {
        const gop = try l.offsets.getOrPut(gpa, id);
        if (!gop.found_existing) gop.value_ptr.* = 0;
        var rest = bytes;
        while (true) {
            const n = @min(rest.len, 1000);
            const last = n == rest.len;
            var payload: [1100]u8 = undefined;
            var w: qvarint.Writer = .{ .buf = &payload };
            try w.varint(0x0e | @as(u64, @intFromBool(fin and last)));
            try w.varint(id);
            try w.varint(gop.value_ptr.*);
            try w.varint(n);
            try w.bytes(rest[0..n]);
            try l.packet(&w);
            gop.value_ptr.* += n;
            rest = rest[n..];
            if (last) return;
        }
    }
    /// RESET_STREAM; a final size of 0 is the offset the harness reached (a valid one).
    fn reset(l: *RealLink, id: u64, code: u64, final_size: u64) !void {
        const sent = l.offsets.get(id) orelse 0;
        var payload: [32]u8 = undefined;
        var w: qvarint.Writer = .{ .buf = &payload };
        try w.varint(0x04);
        try w.varint(id);
        try w.varint(code);
        try w.varint(if (final_size == 0) sent else final_size);
        try l.packet(&w);
    }
    fn stopSending(l: *RealLink, id: u64, code: u64) !void {
        var payload: [32]u8 = undefined;
        var w: qvarint.Writer = .{ .buf = &payload };
        try w.varint(0x05);
        try w.varint(id);
        try w.varint(code);
        try l.packet(&w);
    }
    /// The client's ACK of what the server sent (its congestion window opens), or
    /// MAX_DATA and MAX_STREAM_DATA (the server's flow control); maybe time moves.
    fn room(l: *RealLink, r: *Reader, owner: *const Owner) !void {
        const b = r.byte();
        if (b & 1 != 0) try quic(l.q.ackAll(r)) else {
            var payload: [64]u8 = undefined;
            var w: qvarint.Writer = .{ .buf = &payload };
            try w.varint(0x10);
            try w.varint(r.value());
            try w.varint(0x11);
            try w.varint(owner.pick(r));
            try w.varint(r.value());
            try l.packet(&w);
        }
        if (b & 2 != 0) try quic(l.q.advance(r));
    }
    fn handshakeDone(l: *RealLink, r: *Reader) !void {
        try quic(l.q.ackAll(r));
    }
    /// The client's CONNECTION_CLOSE (application or transport).
    fn peerClose(l: *RealLink, code: u64, app: bool) !void {
        var payload: [32]u8 = undefined;
        var w: qvarint.Writer = .{ .buf = &payload };
        try w.varint(if (app) 0x1d else 0x1c);
        try w.varint(code);
        if (!app) try w.varint(0);
        try w.varint(0);
        try l.packet(&w);
    }
    fn advance(l: *RealLink, ms: u64) !void {
        l.q.now_us +|= ms * 1000;
        try quic(l.q.fireTimers());
    }
    fn armAllocator(l: *RealLink, n: usize) void {
        l.q.counting.arm(n);
    }
    /// The connection's events into the session (bounded), what the server sends to the
    /// client, due timers; twice, for the events those made.
    fn drive(l: *RealLink, s: anytype) !void {
        for (0..2) |_| {
            var handed: usize = 0;
            while (l.q.c.nextEvent()) |ev| : (handed += 1) {
                if (handed >= events_per_run_max) return fail("nextEvent without end");
                s.handle(ev);
            }
            try quic(l.q.drain());
            try quic(l.q.fireTimers());
        }
    }
};

// ---- the owner: notes the requests the session reports ------------------------------------

const Owner = struct {
    ids: [64]u64 = undefined,
    count: usize = 0,
    bodies: u64 = 0,

    pub fn onRequest(o: *Owner, id: u64, head: *const session_mod.Head) void {
        _ = head;
        o.ids[o.count % o.ids.len] = id;
        o.count += 1;
    }
    pub fn onBody(o: *Owner, id: u64, bytes: []const u8, fin: bool) void {
        _ = id;
        _ = fin;
        o.bodies += bytes.len;
    }
    pub fn onTrailers(o: *Owner, id: u64, list: []const Header) void {
        _ = o;
        _ = id;
        _ = list;
    }
    pub fn onReset(o: *Owner, id: u64, code: u64) void {
        _ = o;
        _ = id;
        _ = code;
    }
    pub fn onGoaway(o: *Owner, id: u64) void {
        _ = o;
        _ = id;
    }
    pub fn onWritable(o: *Owner, id: u64) void {
        _ = o;
        _ = id;
    }

    /// A request the owner saw, or any stream ID.
    fn pick(o: *const Owner, r: *Reader) u64 {
        const b = r.byte();
        if (o.count > 0 and b < 0xc0) return o.ids[b % @min(o.count, o.ids.len)];
        return clientStream(r.byte());
    }
};

// ---- building the client's bytes -----------------------------------------------------------

/// Stream IDs: client bidirectional (requests) and unidirectional, mostly small ones.
fn clientStream(b: u8) u64 {
    return @as(u64, b >> 2) * 4 + (b & 3);
}

const methods = [_][]const u8{ "GET", "POST", "HEAD", "CONNECT", "OPTIONS", "PUT", "get", "" };
const names = [_][]const u8{
    ":method",           ":path", ":scheme", ":authority", ":protocol",  ":status",
    "content-length",    "te",    "cookie",  "host",       "connection", "x-fuzz",
    "transfer-encoding", "Upper", "",        "trailer",
};

/// A HEADERS frame with a request's field section (static-only QPACK), fields from the input.
fn headersFrame(buf: []u8, r: *Reader) ![]u8 {
    var section: [2048]u8 = undefined;
    var p = try qpack_encoder.encodePrefix(&section);
    const shape = r.byte();
    if (shape & 1 == 0) {
        p = try qpack_encoder.encodeField(&section, p, ":method", methods[r.byte() % methods.len]);
        const scheme = if (shape & 2 == 0) "https" else "http";
        p = try qpack_encoder.encodeField(&section, p, ":scheme", scheme);
        p = try qpack_encoder.encodeField(&section, p, ":authority", "example.test");
        const path = if (shape & 4 == 0) "/a?b=1" else r.take(r.byte() % 32);
        p = try qpack_encoder.encodeField(&section, p, ":path", path);
    }
    const extra = r.byte() % 8;
    for (0..extra) |_| {
        const name = names[r.byte() % names.len];
        p = try qpack_encoder.encodeField(&section, p, name, r.take(r.byte() % 24));
    }
    const n = try frames.writeFrameHeader(buf, 0, .headers, p);
    if (buf.len - n < p) return error.NoSpace;
    @memcpy(buf[n..][0..p], section[0..p]);
    return buf[0 .. n + p];
}

/// Any frame: a type the input picks, a payload of its bytes (a DATA frame's, a SETTINGS
/// list, GOAWAY's id...) with a Length that may lie.
fn anyFrame(buf: []u8, r: *Reader) ![]u8 {
    const types = [_]u64{ 0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0xd, 0x21, 0x40, 0x2f };
    const t = types[r.byte() % types.len];
    const payload = r.take(r.byte());
    var pos = try frames.varint.write(buf, 0, t);
    const lie = r.byte();
    const len: u64 = if (lie < 0xf0) payload.len else payload.len + (lie & 0xf);
    pos = try frames.varint.write(buf, pos, len);
    if (buf.len - pos < payload.len) return error.NoSpace;
    @memcpy(buf[pos..][0..payload.len], payload);
    return buf[0 .. pos + payload.len];
}

// ---- the harness ---------------------------------------------------------------------------

/// The harness over a link: the fake transport (`FakeLink`) or a real QUIC connection
/// (`RealLink`).
fn Harness(comptime Link: type) type {
    return struct {
        const H = @This();
        const Session = session_mod.Session(Link.Transport, Owner);

        counting: support.Counting = .{},
        link: Link,
        owner: Owner = .{},
        config: session_mod.Config = .{},
        s: *Session = undefined,
        now_ms: u64 = 0,

        fn run(h: *H) !void {
            try h.link.drive(h.s);
        }

        /// The session over the link, the steps, then the session destroyed and its
        /// allocations counted (a real link is the caller's to free).
        fn runInput(h: *H, r: *Reader, handshake_first: bool) !void {
            const a = h.counting.allocator();
            h.s = try Session.create(a, h.link.transport(), &h.owner, &h.config);
            const result: anyerror!void = blk: {
                if (handshake_first) {
                    h.link.handshakeDone(r) catch |err| break :blk err;
                }
                h.run() catch |err| break :blk err;
                var steps: usize = 0;
                while (!r.done() and steps < steps_max) : (steps += 1) {
                    h.step(r) catch |err| break :blk err;
                }
                break :blk {};
            };
            h.counting.arm(0);
            h.link.armAllocator(0);
            h.s.destroy();
            h.link.deinit();
            requests_seen = h.owner.count;
            try result;
            if (h.counting.live != 0) return fail("memory left allocated after destroy (a leak)");
        }

        fn step(h: *H, r: *Reader) !void {
            const op = r.byte();
            var buf: [4096]u8 = undefined;
            switch (op % 14) {
                // Raw bytes on any client stream.
                0, 1 => {
                    const id = clientStream(r.byte());
                    try h.link.send(id, r.take(r.byte()), r.byte() & 1 != 0);
                },
                // A request's HEADERS, maybe a DATA and the end.
                2, 3 => {
                    const id = clientStream(r.byte() & 0xfc);
                    try h.link.send(id, try headersFrame(&buf, r), false);
                    const more = r.byte();
                    if (more & 1 != 0) try h.link.send(id, try anyFrame(&buf, r), false);
                    if (more & 2 != 0) try h.link.send(id, "", true);
                },
                // A unidirectional stream's type, or any frame, on a client stream.
                4 => {
                    const types = [_]u8{ 0x00, 0x01, 0x02, 0x03, 0x21, 0x3f };
                    const b = r.byte();
                    const t = types[r.byte() % types.len];
                    try h.link.send(clientStream((b & 0xfc) | 2), &.{t}, false);
                },
                5, 6 => {
                    const id = clientStream(r.byte());
                    try h.link.send(id, try anyFrame(&buf, r), r.byte() == 0xff);
                },
                7 => {
                    const id = clientStream(r.byte());
                    const code = r.value();
                    try h.link.reset(id, code, r.value());
                },
                8 => {
                    const id = h.owner.pick(r);
                    try h.link.stopSending(id, r.value());
                },
                9, 10 => try h.answer(r),
                11 => try h.link.room(r, &h.owner),
                12 => switch (r.byte() % 5) {
                    0 => h.s.goaway(),
                    1 => h.s.releaseIdle(),
                    2 => {
                        const ms = @as(u64, r.byte()) * 10;
                        h.now_ms += ms;
                        h.s.setNow(h.now_ms);
                        try h.link.advance(ms);
                    },
                    3 => try h.link.handshakeDone(r),
                    else => try h.link.peerClose(r.value(), r.boolean()),
                },
                else => {
                    const b = r.byte();
                    // The connection's allocations (the real link) or the session's.
                    if (b & 0x80 != 0)
                        h.link.armAllocator(1 + b % 32)
                    else
                        h.counting.arm(1 + b % 16);
                },
            }
            try h.run();
        }

        /// The application's side of a request.
        fn answer(h: *H, r: *Reader) !void {
            const s = h.s;
            const id = h.owner.pick(r);
            const fields = [_]Header{
                .{ .name = "content-type", .value = "text/plain" },
                .{ .name = "x-a", .value = "b" },
                .{ .name = "Bad", .value = "x" },
                .{ .name = "x-b", .value = "\r\n" },
            };
            const nf = r.byte() % (fields.len + 1);
            const body = [_]u8{'y'} ** 2048;
            const result = switch (r.byte() % 8) {
                0 => s.respond(id, @as(u16, r.byte()) * 4, fields[0..nf]),
                1 => s.earlyHint(id, fields[0..nf]),
                2, 3 => blk: {
                    const n = @as(usize, r.byte()) * 8;
                    _ = s.writeBody(id, body[0..n], r.boolean()) catch |err| break :blk err;
                },
                4 => s.writeTrailers(id, fields[0..nf]),
                5 => s.abort(id, if (r.boolean()) .internal else .cancelled),
                6 => {
                    s.pauseReading(id);
                    return;
                },
                else => {
                    s.resumeReading(id);
                    return;
                },
            };
            result catch |err| switch (err) {
                error.UnknownStream, error.Closed, error.AlreadyStarted, error.NotStarted => {},
                error.AlreadyComplete, error.InvalidHeader, error.HeadTooLarge => {},
                error.FrameOpen => {},
                error.OutOfMemory => {},
            };
        }
    };
}

const configs = [4]session_mod.Config{
    .{},
    .{ .extended_connect = true, .grease = false, .qpack_blocked_streams = 1 },
    .{ .qpack_table_capacity = 64, .field_section_bytes_max = 256, .fields_max = 4 },
    .{ .streams_max = 2, .resets_per_second_max = 2, .empty_frames_per_second_max = 3 },
};

/// Which transport: as byte 0's bit 3 says, or always one (ZIGCORN_FUZZ_H3_TRANSPORT=fake
/// or real).
pub const Mode = enum { either, fake, real };
pub var mode: Mode = .either;

/// The requests the last input's session reported (the self-check: the real transport
/// carries a request to the session).
pub var requests_seen: usize = 0;

/// Over the real transport, the first two real seeds' requests reach the session (one
/// seed per way to `established`): a harness that cannot would fuzz no request. Run
/// before fuzzing starts.
pub fn selfCheck() !void {
    const saved = mode;
    defer mode = saved;
    mode = .either;
    for (seeds[seeds.len - 3 ..][0..2]) |input| {
        requests_seen = 0;
        try checkOne(input);
        if (requests_seen == 0) return error.NoRequestOverQuic;
    }
}

/// One input, one session (see the file's comment). Byte 0 picks the configuration (bits
/// 0-1), whether the handshake event comes first (bit 2, the fake only) and the transport
/// (bit 3: the real one). Over the real one, the next bytes open the QUIC connection as
/// the QUIC connection fuzzer's input does (flags, the length of the client's transport
/// parameters, those bytes: `fuzz_quic_conn.open`, so they reach `applyParams`); the rest
/// are steps.
pub fn checkOne(input: []const u8) !void {
    var r: Reader = .{ .bytes = input };
    const flags = r.byte();
    const real = switch (mode) {
        .either => flags & 8 != 0,
        .fake => false,
        .real => true,
    };
    if (!real) {
        const h = try std.heap.page_allocator.create(Harness(FakeLink));
        defer std.heap.page_allocator.destroy(h);
        h.* = .{ .link = .{}, .config = configs[flags & 3] };
        return h.runInput(&r, flags & 4 == 0);
    }
    const q = try std.heap.page_allocator.create(quic_fuzz.Conn);
    defer std.heap.page_allocator.destroy(q);
    _ = try quic_fuzz.open(q, &r);
    const h = std.heap.page_allocator.create(Harness(RealLink)) catch |err| {
        try quic_fuzz.close(q, err);
        unreachable;
    };
    defer std.heap.page_allocator.destroy(h);
    h.* = .{ .link = .{ .q = q }, .config = configs[flags & 3] };
    const result = h.runInput(&r, false);
    if (result) |_| {
        quic_fuzz.close(q, {}) catch |err| {
            last_failure = quic_fuzz.last_failure;
            return err;
        };
    } else |err| try quic_fuzz.close(q, err);
}

// ---- seeds ---------------------------------------------------------------------------------

/// Client control stream (2) with SETTINGS, then a GET on stream 0 with its end.
const control = "\x00\x02\x03\x00\x04\x00\x00";
const get = "\x02\x00\x00\x00\x00\x02";
pub const seeds = [_][]const u8{
    "\x00" ++ control ++ get ++ "\x09\x00\x00\x33\x00" ++ "\x09\x00\x00\x02\x04\x01",
    "\x00" ++ control ++ "\x02\x04\x00\x00\x03\x01\x0b\x03abc\x00",
    // The encoder stream (6): type 2, then Set Dynamic Table Capacity 64 and an insert.
    "\x00" ++ control ++ "\x00\x06\x01\x00\x00\x06\x0a\x3f\x21\x4a\x01\x61\x01\x62\x00\x00\x00",
    "\x01" ++ control ++ "\x05\x00\x07\x05\x00\x00\x01\x00\x00\x00" ++
        "\x07\x04\x10\x00\x00" ++ "\x0c\x00",
    "\x02" ++ get ++ "\x0b\x02\x00\x00\x00" ++ "\x09\x00\x00\x33\x00\x0c\x02\x05",
    "\x03" ++ control ++ get ++ get ++ "\x08\x00\x00\x01",
    // Over a real QUIC connection: established by `applyParams` (skipped handshake), then
    // by a real handshake; the client's transport parameters are the QUIC fuzzer's seed's.
    overQuic(0x08, 0x02) ++ control ++ get ++ "\x09\x00\x00\x33\x00" ++ "\x0b\x01\x00\x0c\x02\x05",
    overQuic(0x09, 0x03) ++ control ++ get ++ "\x0a\x00\x00\x02\x04\x01" ++ "\x07\x00\x00\x00",
    overQuic(0x0b, 0x02) ++ "\x05\x02\x00\x07\x05\x00\x00\x01\x00\x00\x00" ++ "\x0c\x04\x01\x00",
};

/// The start of an input over the real transport: our flags, the QUIC harness's flags and
/// the client's transport parameters.
fn overQuic(comptime flags: u8, comptime quic_flags: u8) []const u8 {
    const params = quic_fuzz.seed_params;
    return [_]u8{ flags, quic_flags, params.len } ++ params;
}

test "fuzz: h3_session: the seeds and the committed corpus run clean" {
    try selfCheck();
    for (seeds) |input| try checkOne(input);
    const dir = "src/zig/testing/fuzz_corpus/h3_session";
    const n = try support.runCorpus(dir, checkOne, &last_failure);
    try std.testing.expect(n >= seeds.len);
}
