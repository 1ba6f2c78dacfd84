//! HTTP/2 (RFC 9113) as a protocol over a connection: many streams at once.
//!
//! A connection becomes HTTP/2 when its first bytes are the client preface, over TLS
//! after ALPN chose "h2" or on a plain port (h2c with prior knowledge). From then on
//! the connection's bytes are frames, read here as they arrive (a frame may be larger
//! than the read buffer: payloads are consumed in pieces), and each request is a
//! `Stream` (`core/stream.zig`) that the app side drives with the same verbs as HTTP/1.1.
//!
//! Output. What a stream sends (its response HEADERS, DATA, trailers) waits in the
//! stream's own list of items; `fill` moves frames from those lists into the
//! connection's output queue, one frame per stream in turn (fair interleaving), as
//! far as the peer's flow-control windows allow and only while the queue is short
//! (`fill_target`), so a fast app never buffers more than a stream's mark. Control
//! frames (SETTINGS and PING acks, WINDOW_UPDATE, RST_STREAM, GOAWAY) go straight into
//! the queue. Request bodies are buffered per stream up to the window we granted, and
//! credited back (WINDOW_UPDATE) only as the app reads them: `receive()` is the
//! backpressure.
//!
//! Limits: `Session.max_streams` streams at once (each one counts until its app is
//! done and its output written), header blocks bounded by the request head limit
//! across CONTINUATION frames, client resets and useless frames counted per second,
//! control-frame acks bounded by the output queue. Each ends the connection with
//! GOAWAY (ENHANCE_YOUR_CALM) rather than grow.
//!
//! This file is the session core (its state, starting, the connection's timer, closing)
//! and the one entry point the other layers import: the rest of the protocol lives
//! beside it, one concern a file (docs/ARCHITECTURE.md lists them).
const std = @import("std");
const http_fields = @import("../http/fields.zig");
const sink_mod = @import("sink.zig");
pub const Sink = sink_mod.Sink;
const hpack = @import("hpack.zig");
const outq = @import("../transport/output_queue.zig");
const conn_mod = @import("../core/connection.zig");
const Conn = conn_mod.Conn;
const stream_mod = @import("../core/stream.zig");
const deadlines = @import("../os/deadlines.zig");
const seam = @import("../core/protocol.zig"); // RFC 8441: a WebSocket on a stream, through the seam's hand-over verbs
const frames = @import("frames.zig");
const FrameHeader = frames.FrameHeader;
const setting_enable_push = frames.setting_enable_push;
const setting_max_concurrent_streams = frames.setting_max_concurrent_streams;
const setting_initial_window_size = frames.setting_initial_window_size;
const setting_max_header_list_size = frames.setting_max_header_list_size;
const setting_enable_connect_protocol = frames.setting_enable_connect_protocol;
const request = @import("request.zig");
const state = @import("state.zig"); // the session's data and bounds, which the concerns import
pub const Session = state.Session;
pub const sessionOf = state.sessionOf;
const fromHeld = state.fromHeld;
pub const rearm = state.rearm;
pub const settled = state.settled;
pub const frame_size_max = state.frame_size_max;
pub const header_table_size = state.header_table_size;
pub const stream_window = state.stream_window;
pub const connection_window = state.connection_window;
pub const fill_target = state.fill_target;
pub const read_pause_bytes = state.read_pause_bytes;
pub const out_bytes_max = state.out_bytes_max;
pub const resets_per_second_max = state.resets_per_second_max;
pub const useless_frames_per_second_max = state.useless_frames_per_second_max;
pub const discard_bytes_max = state.discard_bytes_max;
pub const recent_resets_len = state.recent_resets_len;
pub const drain_ping_payload = state.drain_ping_payload;
const h1_parser = @import("../http/http1_parser.zig"); // the h2c upgrade reads the HTTP/1.1 request
pub const window_max = frames.window_max;

const control = @import("control.zig");
const errors = @import("errors.zig");
const frame_reader = @import("frame_reader.zig");
const header_blocks = @import("header_blocks.zig");
const scheduler = @import("scheduler.zig");
const stream_verbs = @import("stream_verbs.zig");
const streams = @import("streams.zig");
const websocket = @import("websocket.zig");
const applySetting = control.applySetting;
const sendGoaway = errors.sendGoaway;
pub const process = frame_reader.process;
const dispatch = header_blocks.dispatch;
const dropItems = scheduler.dropItems;
pub const fill = scheduler.fill;
pub const mustWait = scheduler.mustWait;
const queueControl = scheduler.queueControl;
pub const abortStream = stream_verbs.abortStream;
pub const awaitBody = stream_verbs.awaitBody;
pub const bodyConsumed = stream_verbs.bodyConsumed;
pub const earlyHint = stream_verbs.earlyHint;
pub const finishStream = stream_verbs.finishStream;
pub const sendFd = stream_verbs.sendFd;
pub const sendFile = stream_verbs.sendFile;
pub const startResponse = stream_verbs.startResponse;
pub const takeBody = stream_verbs.takeBody;
pub const writeBody = stream_verbs.writeBody;
pub const writeTrailers = stream_verbs.writeTrailers;
pub const H2Stream = streams.H2Stream;
const freeStream = streams.freeStream;
const newStream = streams.newStream;
pub const wsSessionOf = websocket.wsSessionOf;

/// What the seam calls HTTP/2 by (`core/protocol.zig` `Http2Verbs`): the server's wiring
/// hands this table to the server, so the core never imports this file.
pub const verbs: seam.Http2Verbs = .{
    .preface = prefaceOf,
    .begin = begin,
    .beginUpgrade = beginUpgradeFrom,
    .destroy = destroyHeld,
    .process = process,
    .timedOut = timedOut,
    .fill = fill,
    .afterFlush = afterFlush,
    .connClosed = connClosed,
    .drainStarted = drainStarted,
    .goAway = goAway,
    .closeWebSockets = closeWebSockets,
    .lifetimeDue = lifetimeDue,
    .stream = .{
        .mustWait = mustWait,
        .takeBody = takeBody,
        .bodyConsumed = bodyConsumed,
        .awaitBody = awaitBody,
        .startResponse = startResponse,
        .earlyHint = earlyHint,
        .writeTrailers = writeTrailers,
        .writeBody = writeBody,
        .sendFd = sendFd,
        .finishStream = finishStream,
    },
    .sendFile = sendFile,
    .abortStream = abortStream,
    .wsSession = wsSessionOf,
    .carrier = .{
        .live = carrierLive,
        .ended = carrierEnded,
        .held = carrierHeld,
        .input = carrierInput,
        .consume = carrierConsume,
        .resumeInput = carrierResumeInput,
        .queue = carrierQueue,
        .outLen = carrierOutLen,
        .end = carrierEnd,
        .abort = carrierAbort,
        .accept = carrierAccept,
    },
};

// A stream carrying a WebSocket, as the seam hands it over: the `Stream` of an `H2Stream`.
fn carrierLive(st: *const stream_mod.Stream) bool {
    return websocket.wsLive(@fieldParentPtr("base", st));
}
fn carrierEnded(st: *const stream_mod.Stream) bool {
    return websocket.wsEnded(@fieldParentPtr("base", st));
}
fn carrierHeld(st: *const stream_mod.Stream) bool {
    return websocket.wsHeld(@fieldParentPtr("base", st));
}
fn carrierInput(st: *stream_mod.Stream) []u8 {
    return websocket.wsInput(@fieldParentPtr("base", st));
}
fn carrierConsume(st: *stream_mod.Stream, n: usize) void {
    websocket.wsConsume(@fieldParentPtr("base", st), n);
}
fn carrierQueue(st: *stream_mod.Stream, head: []const u8, payload: []const u8) error{OutOfMemory}!void {
    return websocket.wsQueue(@fieldParentPtr("base", st), head, payload);
}
fn carrierResumeInput(st: *stream_mod.Stream) void {
    // The connection's next pass parses it (`process` goes over WebSocket streams first).
    if (!websocket.wsInputEmpty(@fieldParentPtr("base", st))) st.conn.server.schedule(st.conn);
}
fn carrierOutLen(st: *const stream_mod.Stream) usize {
    return st.out.queued;
}
fn carrierEnd(st: *stream_mod.Stream) error{OutOfMemory}!void {
    return websocket.wsEnd(@fieldParentPtr("base", st));
}
fn carrierAbort(st: *stream_mod.Stream) void {
    websocket.wsAbort(@fieldParentPtr("base", st));
}
fn carrierAccept(
    st: *stream_mod.Stream,
    subprotocol: ?[]const u8,
    extension: ?[]const u8,
    headers: []const [2][]const u8,
    extra: []const [2][]const u8,
) seam.WebSocketAcceptError!void {
    return websocket.wsAccept(@fieldParentPtr("base", st), subprotocol, extension, headers, extra);
}

/// One setting in a SETTINGS payload: a 16-bit identifier and a 32-bit value.
pub const setting_bytes = 6;
const header_bytes = frames.header_bytes;

pub const preface = frames.preface;
pub const prefaceState = frames.prefaceState;

fn destroyHeld(held: seam.Http2Held) void {
    destroy(fromHeld(held));
}

/// The connection's first bytes were the preface (now consumed): it speaks HTTP/2.
pub fn begin(conn: *Conn) void {
    beginWith(conn, conn.server.allocator, sink_mod.connSink(conn));
}

/// `begin` with the session's allocator and sink chosen by the caller: a unit test's
/// failing allocator, its recorder of output and wakes (`session_tests.zig`).
pub fn beginWith(conn: *Conn, gpa: std.mem.Allocator, sink: Sink) void {
    const s = newSessionWith(conn, gpa, sink) orelse return;
    sendPreface(s) catch return;
    process(conn);
}

/// The answer that switches a connection to h2c (RFC 7540 3.2); HTTP/2 frames follow it.
pub const switching_protocols = "HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: h2c\r\n\r\n";

pub const UpgradeRequest = request.UpgradeRequest;

/// Where `data` stands against the client preface, as the seam names it (HTTP/1.1 asks).
fn prefaceOf(data: []const u8) seam.Preface {
    return switch (frames.prefaceState(data)) {
        .no => .no,
        .partial => .partial,
        .yes => .yes,
    };
}

comptime {
    // HTTP/1.1 skips the preface by the seam's count of its bytes.
    std.debug.assert(frames.preface.len == seam.http2_preface_len);
}

/// The h2c upgrade as the seam hands it over: what it reads of the HTTP/1.1 request.
fn beginUpgradeFrom(conn: *Conn, req: *const h1_parser.Request, settings: []const u8) void {
    const upgrade: UpgradeRequest = .{
        .method = req.method,
        .path = req.path,
        .query = req.query,
        .host = req.host,
        .fields = req.headers,
    };
    beginUpgrade(conn, upgrade, settings);
}

/// An HTTP/1.1 request asked to upgrade to h2c (RFC 7540 3.2) and `h1` found it fit
/// (plain connection, no body, one HTTP2-Settings field: `settings` is its decoded
/// payload, a whole number of settings). The connection answers 101 and speaks HTTP/2;
/// the request becomes stream 1, half-closed from the client's side; the client's
/// preface is expected next. The 101 acknowledges `settings`: no SETTINGS ack is sent.
pub fn beginUpgrade(conn: *Conn, req: UpgradeRequest, settings: []const u8) void {
    std.debug.assert(settings.len % setting_bytes == 0 and conn.session() == null);
    conn.queueCopy(switching_protocols, null, out_bytes_max) catch return conn.closeFor("out of memory for an h2c upgrade");
    const s = newSession(conn) orelse return;
    s.await_preface = true;
    sendPreface(s) catch return;
    var i: usize = 0;
    while (i < settings.len) : (i += setting_bytes) {
        applySetting(s, std.mem.readInt(u16, settings[i..][0..2], .big), std.mem.readInt(u32, settings[i + 2 ..][0..4], .big));
        if (s.dead) return;
    }
    std.debug.assert(s.last_stream_id == 0 and s.live == 0);
    s.last_stream_id = 1;
    const st = newStream(s, 1) orelse return;
    st.remote_closed = true;
    st.base.body_done = true;
    st.base.is_head_method = std.mem.eql(u8, req.method, "HEAD");
    for (req.fields) |f| if (std.mem.eql(u8, f.name, "te") and http_fields.connectionHas(f.value, "trailers")) {
        st.base.te_trailers = true;
    };
    var view = stream_mod.Request{
        .method = req.method,
        .path = req.path,
        .query = req.query,
        .authority = req.host,
        .scheme = "http",
        .headers = withoutHopByHop(req.fields),
        .version = .http2,
    };
    dispatch(s, st, &view, true);
    if (conn.state == .h2) process(conn);
}

/// The fields of an HTTP/1.1 request that HTTP/2 does not carry (RFC 9113 8.2.2),
/// removed in place: an upgraded request reaches the app as an HTTP/2 one would.
pub fn withoutHopByHop(fields: []http_fields.Header) []http_fields.Header {
    var n: usize = 0;
    for (fields) |f| {
        const hop = for (request.connection_specific ++ [_][]const u8{"http2-settings"}) |name| {
            if (std.mem.eql(u8, f.name, name)) break true;
        } else std.mem.eql(u8, f.name, "te") and !std.ascii.eqlIgnoreCase(f.value, "trailers");
        if (hop) continue;
        fields[n] = f;
        n += 1;
    }
    return fields[0..n];
}

pub fn newSession(conn: *Conn) ?*Session {
    return newSessionWith(conn, conn.server.allocator, sink_mod.connSink(conn));
}

/// A session whose memory comes from `gpa` and whose output goes to `sink` (a unit
/// test's recorder and failing allocator; the server's allocator and the connection).
pub fn newSessionWith(conn: *Conn, gpa: std.mem.Allocator, sink: sink_mod.Sink) ?*Session {
    const srv = conn.server;
    const s = gpa.create(Session) catch {
        conn.closeFor("out of memory for an HTTP/2 session");
        return null;
    };
    s.* = .{
        .conn = conn,
        .gpa = gpa,
        .sink = sink,
        .decoder = hpack.Decoder.initWith(gpa, header_table_size),
        .max_streams = srv.opts.h2_max_streams,
    };
    // HTTP/2 replaces HTTP/1.1 before any HTTP/1.1 stream began (the preface, or the h2c
    // upgrade's request, which becomes HTTP/2's stream 1).
    const act = conn.a();
    std.debug.assert(act.stream == null);
    act.proto = .{ .http2 = @ptrCast(s) };
    conn.state = .h2;
    conn.timer.disarm();
    srv.armLifetime(conn, &s.lifetime_timer);
    return s;
}

/// The server's preface: our settings, then the connection window opened to `connection_window`.
pub fn sendPreface(s: *Session) outq.Error!void {
    const srv = s.conn.server;
    var buf: [header_bytes + setting_bytes * 5 + header_bytes + 4]u8 = undefined;
    var n: usize = header_bytes;
    const settings = [_][2]u32{
        .{ setting_max_concurrent_streams, s.max_streams },
        .{ setting_initial_window_size, stream_window },
        .{ setting_max_header_list_size, @intCast(srv.opts.limits.head_bytes_max) },
        .{ setting_enable_push, 0 },
        .{ setting_enable_connect_protocol, @intFromBool(srv.opts.ws_enabled) },
    };
    for (settings) |kv| {
        std.mem.writeInt(u16, buf[n..][0..2], @intCast(kv[0]), .big);
        std.mem.writeInt(u32, buf[n + 2 ..][0..4], kv[1], .big);
        n += setting_bytes;
    }
    (FrameHeader{ .len = @intCast(n - header_bytes), .type = .settings, .flags = 0, .stream = 0 }).write(buf[0..header_bytes]);
    const inc = connection_window - frames.initial_window_default;
    (FrameHeader{ .len = 4, .type = .window_update, .flags = 0, .stream = 0 }).write(buf[n..][0..header_bytes]);
    std.mem.writeInt(u32, buf[n + header_bytes ..][0..4], inc, .big);
    n += header_bytes + 4;
    s.recv_window = connection_window;
    try queueControl(s, buf[0..n]);
    s.conn.flush();
    if (s.conn.state == .closed) return error.OutOfMemory;
    // A connection that begins while the server drains is told to go at once: what the
    // client sends first is served, then the final GOAWAY.
    if (srv.draining) drainStartedSession(s);
}

/// Frees the session and any stream no app holds (the connection is being freed).
pub fn destroy(s: *Session) void {
    while (s.first) |st| {
        std.debug.assert(!st.held);
        freeStream(s, st);
    }
    s.lifetime_timer.disarm();
    s.decoder.deinit();
    s.block.deinit(s.gpa);
    s.gpa.destroy(s);
}

/// The connection's output is written (called by the connection).
pub fn afterFlush(conn: *Conn) void {
    if (conn.state != .h2) return;
    const s = sessionOf(conn);
    if (s.dead) return conn.lingerClose(true);
    // Frames held back while the output was long are read now.
    if (!conn.interest.readable) {
        conn.setReading(true);
        const act = conn.a();
        if (act.rlen > act.rstart) conn.server.schedule(conn);
    }
    if (s.goaway_sent and settled(s)) return conn.lingerClose(true);
    rearm(conn);
}

/// The connection's timer passed (see `rearm`): the connection ends.
pub fn timedOut(conn: *Conn) void {
    const s = sessionOf(conn);
    if (s.held == 0) {
        // Idle: a polite GOAWAY, then close.
        sendGoaway(s, .no_error);
        s.dead = true;
        conn.flush();
        if (conn.state == .h2 and s.sink.outputLen() == 0) conn.lingerClose(true);
        return;
    }
    conn.close();
}

/// The drain began (RFC 9113 6.8): a GOAWAY with the largest stream id tells the client
/// to open no more streams while those already on their way are still served; a PING
/// measures the round trip, and its answer (`control.onPing`) sends the final GOAWAY.
pub fn drainStarted(conn: *Conn) void {
    drainStartedSession(sessionOf(conn));
}

fn drainStartedSession(s: *Session) void {
    if (s.goaway_sent or s.drain_ping_sent or s.dead) return;
    s.drain_ping_sent = true;
    errors.sendGoawayWith(s, frames.stream_id_max, .no_error);
    if (s.conn.state != .h2) return;
    var buf: [header_bytes + 8]u8 = undefined;
    (FrameHeader{ .len = 8, .type = .ping, .flags = 0, .stream = 0 }).write(buf[0..header_bytes]);
    @memcpy(buf[header_bytes..][0..8], &drain_ping_payload);
    queueControl(s, &buf) catch return;
    s.conn.flush();
}

/// `--timeout-connection` passed (`lifetime_timer`): GOAWAY now, naming the last stream
/// read; the streams in flight finish (a WebSocket on one too: it is not cut), then the
/// connection closes (at once when none is open). Without it the GOAWAY waited for a
/// stream to open or end, and an idle connection for the keep-alive timeout.
pub fn lifetimeDue(entry: *deadlines.Entry) void {
    const s: *Session = @fieldParentPtr("lifetime_timer", entry);
    const conn = s.conn;
    if (s.goaway_sent or s.dead or conn.state != .h2) return;
    // Never early: a clock behind the deadline's waits for the next tick.
    if (!conn.server.connectionExpired(conn)) return conn.server.armLifetime(conn, entry);
    sendGoaway(s, .no_error);
    conn.flush();
}

/// The second GOAWAY of a drain (the PING came back, or accepting stops): it names the
/// last stream read; streams in flight finish (a WebSocket too, until the deadline),
/// then the connection closes.
pub fn goAway(conn: *Conn) void {
    errors.finalGoaway(sessionOf(conn));
}

/// The drain's deadline: WebSockets on the connection's streams are closed with 1001.
/// True when there was one.
pub fn closeWebSockets(conn: *Conn) bool {
    const s = sessionOf(conn);
    var any = false;
    var it = s.first;
    while (it) |st| {
        it = st.next;
        if (st.ws) |w| {
            any = true;
            seam.webSocketGoingAway(conn, w);
        }
    }
    if (conn.state == .h2) conn.flush();
    return any;
}

/// The socket closed: every stream is over. Apps still running see a disconnect.
pub fn connClosed(conn: *Conn) void {
    const s = sessionOf(conn);
    var it = s.first;
    while (it) |st| {
        it = st.next;
        dropItems(s, st);
        if (st.held) {
            s.sink.wakeRead(&st.base);
            st.base.write_blocked = false;
            s.sink.wakeWrite(&st.base);
        } else {
            freeStream(s, st);
        }
    }
    if (s.held == 0) conn.server.retire(conn);
}
