//! A WebSocket session: frames in, whole messages out to the stream, messages from
//! the stream framed back, pings, and the close handshake.
//!
//! What carries the frames (`Carrier`) is the connection itself after an HTTP/1.1
//! upgrade, or one HTTP/2 or HTTP/3 stream after an extended CONNECT (RFC 8441,
//! RFC 9220), whose DATA
//! frames hold the WebSocket frames. The session is the same either way; only reading,
//! queueing and ending go through the carrier. Server pings and the close handshake's
//! deadline use the connection's timer over HTTP/1.1; a stream's session has a timer of
//! its own for its pings (no close deadline: the stream waits for the peer's close and
//! end within its protocol's own timeouts).
//!
//! The stream sees messages, never frames: continuation frames are reassembled here
//! (control frames may come between them), text is validated as UTF-8 as it
//! arrives, pings are answered here. Every queue is bounded: at most
//! `ws_queue_max` whole messages wait for the app (then the socket is not read), at
//! most `out_bytes_high` bytes wait for the client before the app's send() waits
//! and incoming frames stop being read (so a client that never reads cannot make
//! us queue pongs without end).
const std = @import("std");
const assert = std.debug.assert;
const ws = @import("codec.zig");
const deflate = @import("../features/websocket_deflate.zig");
const response = @import("../http/response.zig");
const pool_mod = @import("../os/buffer_pool.zig");
const Conn = @import("../core/connection.zig").Conn;
const Stream = @import("../core/stream.zig").Stream;
const seam = @import("../core/protocol.zig"); // a carrier's accept; the core holds sessions opaque
const h1_parser = @import("../http/http1_parser.zig"); // the upgrade reads an HTTP/1.1 request
const http_fields = @import("../http/fields.zig");
const timer = @import("../os/deadlines.zig");
const carrier_mod = @import("carrier.zig");
/// What carries a session's frames: the connection after an HTTP/1.1 upgrade, or a stream.
pub const Carrier = carrier_mod.Carrier;

const allocator = std.heap.c_allocator;

/// Queued outbound bytes past which send() waits and reading pauses.
pub const out_bytes_high = seam.websocket_out_bytes_high;
/// Why a connection closes when a frame or message cannot be allocated (logged).
const out_of_memory = "out of memory for a WebSocket frame or message";
/// The 101 response head fits in one pooled buffer.
const head_bytes_max = @import("../os/buffer_pool.zig").buffer_bytes;
/// Frames are copied into the output, which grows on the heap up to this.
const frames_bytes_max = std.math.maxInt(u32);

/// One whole message waiting for the app.
pub const Message = struct {
    next: ?*Message = null,
    text: bool,
    data: std.ArrayListUnmanaged(u8),

    pub fn destroy(self: *Message) void {
        self.data.deinit(allocator);
        allocator.destroy(self);
    }
};

pub const Session = struct {
    carrier: Carrier,
    accept: [ws.accept_bytes]u8,
    deflate: ?ws.DeflateParams,
    /// The 101 (or HTTP/2's 200) went out: frames are parsed from now on.
    open: bool = false,

    // The frame being read.
    in_frame: bool = false,
    frame: ws.FrameHeader = undefined,
    frame_read: u64 = 0,
    seq: ws.Sequence = .{},
    utf8: ws.Utf8 = .{},
    /// The data message being assembled (compressed bytes while seq.compressed).
    msg: std.ArrayListUnmanaged(u8) = .{},
    /// A control frame's payload; after a close frame, its reason stays here.
    ctrl: [ws.control_payload_bytes_max]u8 = undefined,
    ctrl_len: u8 = 0,
    /// Kept between messages only when the client compresses with context takeover.
    inflater: ?*deflate.Inflater = null,

    // Whole messages for the app, oldest first.
    ready_head: ?*Message = null,
    ready_tail: ?*Message = null,
    ready_count: u32 = 0,
    /// Bytes in those messages: past one maximum-size message's worth, reading pauses too.
    ready_bytes: u64 = 0,

    // Closing.
    close_sent: bool = false,
    close_received: bool = false,
    /// We failed the connection (protocol error, limit): no close frame will be awaited.
    failed: bool = false,
    /// What the app's websocket.disconnect carries; 1006 if the TCP connection just ends.
    close_code: u16 = 1006,
    /// Whether ctrl holds the peer's close reason.
    reason_from_peer: bool = false,
    ping_outstanding: bool = false,
    ping_count: u32 = 0,
    /// A stream's session: its ping and pong deadlines (a connection's use the connection's
    /// timer), on the server's `ws_stream_ping_timeouts` and `ws_stream_pong_timeouts`.
    timer: timer.Entry = .{},

    fn conn(s: *const Session) *Conn {
        return s.carrier.connection();
    }

    /// Frames can still move both ways on the carrier.
    fn live(s: *const Session) bool {
        return s.carrier.live();
    }

    /// The received bytes not parsed yet (unmasked in place).
    fn input(s: *Session) []u8 {
        return s.carrier.input();
    }

    fn consume(s: *Session, n: usize) void {
        s.carrier.consume(n);
    }

    /// Bytes queued for the client and not written yet.
    fn outLen(s: *const Session) usize {
        return s.carrier.outLen();
    }

    pub fn wake(s: *Session) void {
        s.carrier.wake();
    }

    /// The session cannot go on (out of memory): the connection (HTTP/1.1) or the stream ends.
    fn closeFor(s: *Session, reason: []const u8) void {
        if (s.carrier == .stream) s.failed = true;
        s.carrier.abort(reason);
    }
};

/// What the seam calls WebSocket by (`core/protocol.zig` `WebSocketVerbs`): the server's
/// wiring hands this table to the server, so the core never imports this file.
pub const verbs: seam.WebSocketVerbs = .{
    .process = process,
    .afterFlush = afterFlush,
    .goingAway = goingAway,
    .pingDue = pingDue,
    .pongTimeout = pongTimeout,
    .streamPingDue = streamPingDue,
    .streamPongTimeout = streamPongTimeout,
    .streamFinished = streamFinished,
    .asksUpgrade = asksUpgrade,
    .beginUpgrade = beginUpgrade,
    .open = open,
    .isOpen = heldOpen,
    .wake = heldWake,
    .processSession = heldProcess,
    .outputDrained = heldOutputDrained,
    .sessionFinished = heldFinished,
    .goingAwaySession = heldGoingAway,
    .destroy = heldDestroy,
};

/// A session as the core holds it (`seam.WebSocketHeld`), and back: the held pointer keeps
/// the session's alignment, so the casts are free.
pub fn held(s: *Session) seam.WebSocketHeld {
    return @ptrCast(s);
}
pub fn ofHeld(w: seam.WebSocketHeld) *Session {
    return @ptrCast(w);
}
fn heldOpen(w: seam.WebSocketHeld) bool {
    return ofHeld(w).open;
}
fn heldWake(w: seam.WebSocketHeld) void {
    ofHeld(w).wake();
}
fn heldProcess(w: seam.WebSocketHeld) void {
    processSession(ofHeld(w));
}
fn heldOutputDrained(w: seam.WebSocketHeld) void {
    outputDrained(ofHeld(w));
}
fn heldFinished(w: seam.WebSocketHeld) void {
    sessionFinished(ofHeld(w));
}
fn heldGoingAway(w: seam.WebSocketHeld) void {
    goingAwaySession(ofHeld(w));
}
fn heldDestroy(w: seam.WebSocketHeld) void {
    destroy(ofHeld(w));
}

// ---- the app side: a stream's session, by the verbs the ASGI bridge drives ------------

/// The session `st`'s request opened, if any (`Stream.wsSession`).
fn sessionOfStream(st: *const Stream) ?*Session {
    return ofHeld(st.wsSession() orelse return null);
}

pub fn streamAccept(
    st: *Stream,
    subprotocol: ?[]const u8,
    headers: []const [2][]const u8,
    extra: []const [2][]const u8,
) AcceptError!void {
    const s = sessionOfStream(st) orelse return error.NotPending;
    return accept(s, subprotocol, headers, extra);
}

pub fn streamSend(st: *Stream, data: []const u8, text: bool) SendError!bool {
    const s = sessionOfStream(st) orelse return error.Closed;
    return send(s, data, text);
}

pub fn streamTake(st: *Stream) ?*Message {
    const s = sessionOfStream(st) orelse return null;
    return takeMessage(s);
}

pub fn streamClose(st: *Stream, code: u16, reason: []const u8) void {
    const s = sessionOfStream(st) orelse return;
    closeFromApp(s, code, reason);
}

/// Whether the session is over for the app, and with which close code and reason.
pub fn streamFinishedForApp(st: *const Stream) bool {
    const s = sessionOfStream(st) orelse return true;
    return finished(s);
}

pub fn streamCloseCode(st: *const Stream) u16 {
    const s = sessionOfStream(st) orelse return 1006;
    return closeCode(s);
}

pub fn streamCloseReason(st: *const Stream) []const u8 {
    const s = sessionOfStream(st) orelse return "";
    return closeReason(s);
}

// ---- the upgrades: HTTP/1.1's (RFC 6455 4.1) and an extended CONNECT's (RFC 8441 4) ---

/// An HTTP/1.1 request that asks for the WebSocket upgrade.
fn asksUpgrade(req: *const h1_parser.Request) bool {
    return ws.isUpgrade(req.upgrade);
}

/// What the handshake checks read of an HTTP/1.1 request.
fn handshakeRequest(req: *const h1_parser.Request) ws.HandshakeRequest {
    const has_body = req.chunked or (req.content_length orelse 0) != 0;
    return .{
        .method = req.method,
        .http11 = req.version == .http11,
        .has_body = has_body,
        .headers = req.headers,
    };
}

/// The upgrade of an HTTP/1.1 request, checked; the session then waits for the app's
/// accept. Null when it began; else the status HTTP/1.1 refuses it with.
fn beginUpgrade(conn: *Conn, req: *const h1_parser.Request) ?u16 {
    const offered = conn.server.opts.ws_deflate;
    var hs = ws.validate(handshakeRequest(req), offered) catch |err| return ws.statusFor(err);
    // zlib is loaded only now, for a client that offers compression; without it we decline.
    if (hs.deflate != null and !deflate.load()) hs.deflate = null;
    if (!begin(conn, hs)) return 500;
    return null;
}

/// An extended CONNECT with version 13: a session carried by `st`, waiting for the app's
/// accept; null when out of memory.
fn open(st: *Stream, fields: []const http_fields.Header) ?seam.WebSocketHeld {
    var hs = ws.Handshake{ .accept = [_]u8{0} ** ws.accept_bytes, .deflate = null };
    if (st.conn.server.opts.ws_deflate) hs.deflate = ws.negotiateDeflate(fields);
    if (hs.deflate != null and !deflate.load()) hs.deflate = null;
    const s = create(.{ .stream = st }, hs) orelse return null;
    return held(s);
}

/// The request is a valid upgrade: the session waits for the app's accept.
pub fn begin(conn: *Conn, hs: ws.Handshake) bool {
    const s = create(.{ .conn = conn }, hs) orelse return false;
    conn.a().proto.http1.ws = held(s);
    return true;
}

/// A new session on `carrier`, waiting for the app's accept; null when out of memory.
pub fn create(carrier: Carrier, hs: ws.Handshake) ?*Session {
    const s = allocator.create(Session) catch return null;
    s.* = .{ .carrier = carrier, .accept = hs.accept, .deflate = hs.deflate };
    return s;
}

pub fn destroy(s: *Session) void {
    s.timer.disarm();
    s.msg.deinit(allocator);
    while (s.ready_head) |m| {
        s.ready_head = m.next;
        m.destroy();
    }
    if (s.inflater) |i| i.destroy();
    allocator.destroy(s);
}

fn session(conn: *Conn) *Session {
    return ofHeld(conn.a().proto.http1.ws.?);
}

pub const AcceptError = seam.WebSocketAcceptError;

/// The app accepted: over HTTP/1.1 the 101 with the accept key, the subprotocol, the
/// extension, and the app's headers (over HTTP/2 a 200 HEADERS without the key); then
/// frames already received are parsed.
pub fn accept(s: *Session, subprotocol: ?[]const u8, headers: []const [2][]const u8, extra: []const [2][]const u8) AcceptError!void {
    const conn = s.conn();
    if (s.carrier == .stream) {
        if (s.open) return error.NotPending;
        if (!s.live()) return;
        var tmp: [160]u8 = undefined;
        const ext: ?[]const u8 = if (s.deflate) |d| d.response(&tmp) else null;
        try seam.carrierAccept(s.carrier.stream, subprotocol, ext, headers, extra);
        s.open = true;
        armStreamPing(s);
        if (conn.server.going_away) return goingAwaySession(s);
        processSession(s);
        return;
    }
    const act = conn.a();
    if (conn.state == .closed) return;
    const st = &act.proto.http1.stream;
    if (conn.state != .request or s.open or st.resp_started) return error.NotPending;
    const space = conn.stageOut(1024, head_bytes_max) catch return error.OutOfMemory;
    var w = response.HeadWriter{ .buf = space };
    writeHead(conn, &w, subprotocol, headers, extra) catch |err| {
        return if (err == error.NoSpace) error.HeadTooLarge else error.InvalidHeader;
    };
    act.out.addStaged(w.len);
    act.out.commitStaged(&st.out) catch {
        act.out.dropStaged();
        return error.OutOfMemory;
    };
    st.status = 101;
    st.resp_started = true;
    s.open = true;
    conn.state = .websocket;
    armPing(conn);
    // Accepted after the drain's deadline: it is told at once that the server is going away.
    if (conn.server.going_away) return goingAway(conn);
    conn.flush();
    if (conn.state != .websocket) return;
    conn.setReading(true);
    if (act.rlen > act.rstart) conn.server.schedule(conn);
}

fn writeHead(conn: *Conn, w: *response.HeadWriter, subprotocol: ?[]const u8, headers: []const [2][]const u8, extra: []const [2][]const u8) !void {
    const s = session(conn);
    const srv = conn.server;
    try w.statusLine(101);
    if (srv.opts.server_header) try w.append("server: zigcorn\r\n");
    if (srv.opts.date_header) try w.append(srv.date.get());
    for (extra) |h| try w.header(h[0], h[1]);
    try w.append("upgrade: websocket\r\nconnection: Upgrade\r\n");
    try w.header("sec-websocket-accept", &s.accept);
    if (subprotocol) |p| {
        if (p.len == 0 or !response.validValue(p)) return error.InvalidHeader;
        try w.header("sec-websocket-protocol", p);
    }
    if (s.deflate) |d| {
        var tmp: [160]u8 = undefined;
        try w.header("sec-websocket-extensions", d.response(&tmp));
    }
    for (headers) |h| {
        if (!response.validName(h[0]) or !response.validValue(h[1])) return error.InvalidHeader;
        if (seam.webSocketKeepsField(h[0], subprotocol)) try w.header(h[0], h[1]);
    }
    try w.append("\r\n");
}

/// Fields of the accept response that the engine writes itself: the app's are dropped.
pub const owned_fields = seam.websocket_owned_fields;

// ---- reading ------------------------------------------------------------------------

/// HTTP/1.1: parses what the read buffer holds, as far as the queues allow.
pub fn process(conn: *Conn) void {
    const s = session(conn);
    processSession(s);
    if (conn.state == .closed) return;
    // An idle WebSocket holds no read buffer.
    const act = conn.a();
    if (act.rstart == act.rlen) {
        act.rstart = 0;
        act.rlen = 0;
        if (act.rbuf) |b| conn.server.pool.release(b);
        act.rbuf = null;
    }
}

/// Parses what the carrier has received, as far as the queues allow.
pub fn processSession(s: *Session) void {
    const srv = s.conn().server;
    while (s.open and s.live() and !s.close_received and !s.failed) {
        if (backlogged(s)) {
            // The app or the client is behind: stop reading until it catches up.
            s.carrier.pause();
            break;
        }
        const avail = s.input();
        if (!s.in_frame) {
            const h = (ws.parseHeader(avail, s.deflate != null) catch |err| return fail(s, err)) orelse break;
            if (!h.opcode.isControl()) {
                s.seq.onDataFrame(h) catch |err| return fail(s, err);
                if (h.payload_len > srv.opts.ws_message_bytes_max -| s.msg.items.len) return fail(s, error.TooBig);
            } else {
                s.ctrl_len = 0;
            }
            s.consume(h.header_len);
            s.frame = h;
            s.frame_read = 0;
            s.in_frame = true;
            if (h.payload_len == 0) endFrame(s);
            continue;
        }
        const left = s.frame.payload_len - s.frame_read;
        const n: usize = @intCast(@min(left, avail.len));
        if (n == 0) break;
        const chunk = avail[0..n];
        ws.unmask(chunk, s.frame.mask, s.frame_read);
        s.frame_read += n;
        assert(s.frame_read <= s.frame.payload_len);
        if (s.frame.opcode.isControl()) {
            // `parseHeader` let through no control frame longer than `ctrl`.
            assert(s.ctrl_len + n <= s.ctrl.len);
            @memcpy(s.ctrl[s.ctrl_len..][0..n], chunk);
            s.ctrl_len += @intCast(n);
        } else if (!s.close_sent) {
            if (s.seq.message == .text and !s.seq.compressed and !s.utf8.feed(chunk)) return fail(s, error.InvalidData);
            s.msg.appendSlice(allocator, chunk) catch return s.closeFor(out_of_memory);
            // The header's length was checked against what is left of --ws-max-size.
            assert(s.msg.items.len <= srv.opts.ws_message_bytes_max);
        }
        s.consume(n);
        if (s.frame_read == s.frame.payload_len) endFrame(s);
    }
}

fn endFrame(s: *Session) void {
    s.in_frame = false;
    switch (s.frame.opcode) {
        .close => onClose(s),
        .ping => if (!s.close_sent) {
            queueFrame(s, .pong, s.ctrl[0..s.ctrl_len], false) catch return s.closeFor(out_of_memory);
            s.conn().flush();
        },
        .pong => if (s.ping_outstanding) {
            s.ping_outstanding = false;
            // Once our close frame is out, the timer waits for the peer's close instead.
            if (!s.close_sent) switch (s.carrier) {
                .conn => |c| armPing(c),
                .stream => armStreamPing(s),
            };
        },
        else => if (s.frame.fin) endMessage(s),
    }
}

fn endMessage(s: *Session) void {
    const text = s.seq.message == .text;
    const compressed = s.seq.compressed;
    s.seq.endMessage();
    const utf8_done = s.utf8.complete();
    s.utf8 = .{};
    if (s.close_sent) {
        // After our close frame, data is read only to reach the peer's close.
        s.msg.clearRetainingCapacity();
        return;
    }
    var data = s.msg;
    s.msg = .{};
    // RSV1 (a compressed message) passed `parseHeader` only with deflate negotiated.
    assert(!compressed or s.deflate != null);
    if (compressed) {
        data = inflateMessage(s, &data) catch |err| switch (err) {
            error.TooBig => return fail(s, error.TooBig),
            error.Corrupt => return fail(s, error.ProtocolError),
            error.OutOfMemory => return s.closeFor(out_of_memory),
        };
        if (text and !ws.validUtf8(data.items)) {
            data.deinit(allocator);
            return fail(s, error.InvalidData);
        }
    } else if (text and !utf8_done) {
        data.deinit(allocator);
        return fail(s, error.InvalidData);
    }
    const m = allocator.create(Message) catch {
        data.deinit(allocator);
        return s.closeFor(out_of_memory);
    };
    m.* = .{ .text = text, .data = data };
    const srv = s.conn().server;
    // Inflated or not, a message is within --ws-max-size; and `processSession` parses
    // no frame while --ws-max-queue messages wait, so one more stays within it.
    assert(m.data.items.len <= srv.opts.ws_message_bytes_max);
    assert(s.ready_count < srv.opts.ws_queue_max);
    if (s.ready_tail) |t| t.next = m else s.ready_head = m;
    s.ready_tail = m;
    s.ready_count += 1;
    s.ready_bytes += m.data.items.len;
    s.wake();
}

/// Takes ownership of `compressed` (freed here) and returns the inflated message.
fn inflateMessage(s: *Session, compressed: *std.ArrayListUnmanaged(u8)) deflate.Error!std.ArrayListUnmanaged(u8) {
    defer compressed.deinit(allocator);
    const srv = s.conn().server;
    const params = s.deflate.?;
    // Without context takeover nothing carries over between messages: one shared
    // decompressor, reset after each, serves every such connection.
    const shared = params.client_no_context_takeover;
    const inf = if (shared) srv.zlib.sharedInflater() else blk: {
        if (s.inflater == null) s.inflater = deflate.Inflater.create();
        break :blk s.inflater;
    };
    const i = inf orelse return error.OutOfMemory;
    var out: std.ArrayListUnmanaged(u8) = .{};
    errdefer out.deinit(allocator);
    defer if (shared) i.reset();
    try i.message(compressed.items, &out, srv.opts.ws_message_bytes_max);
    return out;
}

fn onClose(s: *Session) void {
    const c = ws.parseClose(s.ctrl[0..s.ctrl_len]) catch |err| return fail(s, err);
    s.close_received = true;
    s.close_code = c.code;
    // The reason moves to the front so it can be read as ctrl[0..ctrl_len].
    if (c.reason.len > 0) std.mem.copyForwards(u8, s.ctrl[0..c.reason.len], c.reason);
    s.ctrl_len = @intCast(c.reason.len);
    s.reason_from_peer = true;
    discardInput(s);
    if (!s.close_sent) {
        // Echo the code (RFC 6455 5.5.1); 1005 means the peer sent none, so neither do we.
        sendClose(s, c.code, "") catch return s.closeFor(out_of_memory);
    }
    s.wake();
    s.conn().flush();
}

/// Fails the session: a close frame with the failure's code, then the end of the carrier.
fn fail(s: *Session, err: ws.Failure) void {
    failWith(s, ws.closeCodeFor(err));
}

fn failWith(s: *Session, code: u16) void {
    s.failed = true;
    if (!s.close_sent) {
        s.close_code = code;
        s.reason_from_peer = false;
        sendClose(s, code, "") catch return s.closeFor(out_of_memory);
    }
    discardInput(s);
    s.wake();
    s.conn().flush();
}

fn discardInput(s: *Session) void {
    s.consume(s.input().len);
}

/// The app took a message (or the output drained): read again if we had stopped.
fn maybeResume(s: *Session) void {
    if (!s.live() or s.close_received or s.failed) return;
    if (backlogged(s)) return;
    s.carrier.resumeReading();
}

/// Too much waits for the app (messages) or for the client (output).
fn backlogged(s: *const Session) bool {
    const srv = s.conn().server;
    return s.ready_count >= srv.opts.ws_queue_max or s.ready_bytes >= srv.opts.ws_message_bytes_max or
        s.outLen() > out_bytes_high;
}

/// The oldest whole message, now owned by the caller (`Message.destroy`).
pub fn takeMessage(s: *Session) ?*Message {
    const m = s.ready_head orelse return null;
    assert(s.ready_count > 0 and s.ready_bytes >= m.data.items.len);
    s.ready_head = m.next;
    if (s.ready_head == null) s.ready_tail = null;
    s.ready_count -= 1;
    s.ready_bytes -= m.data.items.len;
    // The queue and its counts agree: empty means no message and no bytes.
    assert((s.ready_head == null) == (s.ready_count == 0));
    assert(s.ready_count > 0 or s.ready_bytes == 0);
    maybeResume(s);
    return m;
}

/// The session is over for the app: its carrier ended, it failed, or the peer's close arrived.
pub fn finished(s: *const Session) bool {
    return s.carrier.ended() or s.close_received or s.failed;
}

pub fn closeCode(s: *const Session) u16 {
    return s.close_code;
}

pub fn closeReason(s: *const Session) []const u8 {
    return if (s.reason_from_peer) s.ctrl[0..s.ctrl_len] else "";
}

// ---- writing ------------------------------------------------------------------------

pub const SendError = error{ Closed, OutOfMemory };

/// Frames one message from the app. True when the app must wait for the output to drain.
pub fn send(s: *Session, data: []const u8, text: bool) SendError!bool {
    if (!s.open or !s.live() or s.close_sent) return error.Closed;
    const op: ws.Opcode = if (text) .text else .binary;
    if (s.deflate) |d| {
        const srv = s.conn().server;
        if (srv.zlib.deflater(d.server_max_window_bits)) |def| {
            def.message(data, &srv.zlib.scratch) catch return error.OutOfMemory;
            defer srv.zlib.trimScratch();
            try queueFrame(s, op, srv.zlib.scratch.items, true);
        } else try queueFrame(s, op, data, false);
    } else try queueFrame(s, op, data, false);
    s.conn().flush();
    if (!s.live()) return false;
    return s.outLen() > out_bytes_high;
}

fn queueFrame(s: *Session, op: ws.Opcode, payload: []const u8, compressed: bool) error{OutOfMemory}!void {
    // Contract: whole frames only (never a continuation), nothing but a close after our
    // close (RFC 6455 5.5.1), compression only when negotiated and only for data.
    assert(op != .continuation and s.open);
    assert(op == .close or !s.close_sent);
    assert(!compressed or (s.deflate != null and !op.isControl()));
    var hdr: [10]u8 = undefined;
    const head = ws.encodeHeader(&hdr, true, compressed, op, payload.len);
    try s.carrier.queue(head, payload, frames_bytes_max);
}

fn sendClose(s: *Session, code: u16, reason: []const u8) error{OutOfMemory}!void {
    // A sendable code: ours (1000, 1001, 1002, 1007, 1009, 1011), the peer's echoed (which
    // `parseClose` checked, 1005 for none), or the app's (checked in python/stream_type.zig).
    assert(code == 1005 or ws.validCloseCode(code));
    var payload: [ws.control_payload_bytes_max]u8 = undefined;
    try queueFrame(s, .close, ws.encodeClosePayload(&payload, code, reason), false);
    s.close_sent = true;
    // Over a connection the peer's answer must come within the linger time (this
    // replaces the ping timer); a stream's side ends with the close frame (RFC 8441 5),
    // and its pings stop.
    s.timer.disarm();
    try s.carrier.closeSent();
}

/// websocket.close from the app (after accept).
pub fn closeFromApp(s: *Session, code: u16, reason: []const u8) void {
    if (!s.open or !s.live() or s.close_sent) return;
    if (!s.close_received and !s.failed) {
        s.close_code = code;
        s.reason_from_peer = false;
    }
    sendClose(s, code, reason) catch return s.closeFor(out_of_memory);
    s.conn().flush();
}

/// HTTP/1.1: the output queue is empty: finish a close handshake, or read again.
pub fn afterFlush(conn: *Conn) void {
    const s = session(conn);
    if (s.close_sent and (s.close_received or s.failed)) {
        // Our close frame is out and nothing more is expected: the server closes the
        // TCP connection first (RFC 6455 7.1.1), reading what is left for a moment.
        return conn.lingerClose(true);
    }
    maybeResume(s);
}

/// HTTP/2: the stream's output went below the mark: read again if we had stopped.
pub fn outputDrained(s: *Session) void {
    maybeResume(s);
}

/// HTTP/1.1: the app returned: an open WebSocket is closed normally.
pub fn streamFinished(conn: *Conn) void {
    if (conn.state != .websocket) return;
    sessionFinished(session(conn));
}

/// The app returned: an open WebSocket is closed normally.
pub fn sessionFinished(s: *Session) void {
    if (!s.open or !s.live()) return;
    if (!s.close_sent) {
        sendClose(s, 1000, "") catch return s.closeFor(out_of_memory);
    }
    s.conn().flush();
}

/// Graceful shutdown's deadline: 1001 (going away). Until then a WebSocket is not cut.
pub fn goingAway(conn: *Conn) void {
    if (conn.state != .websocket) return;
    goingAwaySession(session(conn));
}

pub fn goingAwaySession(s: *Session) void {
    if (!s.open or !s.live() or s.close_sent) return;
    if (!s.close_received and !s.failed) s.close_code = 1001;
    sendClose(s, 1001, "") catch return s.closeFor(out_of_memory);
    s.wake();
    s.conn().flush();
}

// ---- keepalive -----------------------------------------------------------------------

fn armPing(conn: *Conn) void {
    const srv = conn.server;
    if (!srv.ws_ping_enabled) return;
    srv.ws_ping_timeouts.arm(&conn.timer, srv.now_ms);
}

pub fn pingDue(conn: *Conn) void {
    if (conn.state != .websocket) return;
    const s = session(conn);
    if (s.close_sent) return;
    queuePing(s) catch return conn.closeFor(out_of_memory);
    conn.server.ws_pong_timeouts.arm(&conn.timer, conn.server.now_ms);
    conn.flush();
}

/// A ping numbered by the session's count, its pong now awaited.
fn queuePing(s: *Session) error{OutOfMemory}!void {
    s.ping_count +%= 1;
    var payload: [4]u8 = undefined;
    std.mem.writeInt(u32, &payload, s.ping_count, .big);
    try queueFrame(s, .ping, &payload, false);
    s.ping_outstanding = true;
}

/// A stream's session (RFC 8441, RFC 9220) is pinged as a connection's is, on its own
/// timer: from its accept, then from each pong.
fn armStreamPing(s: *Session) void {
    const srv = s.conn().server;
    if (!srv.ws_ping_enabled) return;
    srv.ws_stream_ping_timeouts.arm(&s.timer, srv.now_ms);
}

fn streamPingDue(entry: *timer.Entry) void {
    const s: *Session = @fieldParentPtr("timer", entry);
    if (s.close_sent or !s.live()) return;
    queuePing(s) catch return s.closeFor(out_of_memory);
    const srv = s.conn().server;
    srv.ws_stream_pong_timeouts.arm(&s.timer, srv.now_ms);
    // Last: a flush may end the connection, and the session with it.
    s.conn().flush();
}

/// No pong in time on a stream: 1011 for the app, our close frame, then the stream is
/// reset (the peer is gone or stuck; its connection may still serve other streams).
fn streamPongTimeout(entry: *timer.Entry) void {
    const s: *Session = @fieldParentPtr("timer", entry);
    if (!s.live()) return;
    if (!s.close_received and !s.failed) s.close_code = 1011;
    s.failed = true;
    if (!s.close_sent) sendClose(s, 1011, "keepalive ping timeout") catch
        return s.closeFor(out_of_memory);
    s.wake();
    // The close frame goes before the reset (HTTP/2 drops what a reset stream queued).
    // The app holds the stream while the timer runs (its end sends our close, which
    // stops it), so the flush frees neither. Last: the reset may free both.
    s.conn().flush();
    if (s.live()) seam.carrierAbort(s.carrier.stream);
}

/// No pong in time: the peer is gone or stuck. 1011, and the connection closes now.
pub fn pongTimeout(conn: *Conn) void {
    if (conn.state != .websocket) return conn.close();
    const s = session(conn);
    if (!s.close_received and !s.failed) s.close_code = 1011;
    s.failed = true;
    // Best effort: the connection closes right after, whether the frame was queued or not.
    sendClose(s, 1011, "keepalive ping timeout") catch return conn.closeFor(out_of_memory);
    conn.flush();
    if (conn.state != .closed) conn.close();
}

// ---- tests: the WebSocket hand-over reads a parsed HTTP/1.1 head ----------------------

const testing = std.testing;
const ws_rfc_key = "dGhlIHNhbXBsZSBub25jZQ==";

fn handshakeOf(raw: []const u8, offer_deflate: bool) ws.HandshakeError!ws.Handshake {
    var storage: [32]http_fields.Header = undefined;
    var buf: [1024]u8 = undefined;
    @memcpy(buf[0..raw.len], raw);
    const head = (h1_parser.parseHead(buf[0..raw.len], &storage, h1_parser.test_limits) catch unreachable).?;
    return ws.validate(handshakeRequest(&head.request), offer_deflate);
}

test "WebSocket opening handshake: validation of a parsed HTTP/1.1 head" {
    const ok = "GET /chat HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " ++ ws_rfc_key ++ "\r\nSec-WebSocket-Version: 13\r\n\r\n";
    const hs = try handshakeOf(ok, true);
    try testing.expectEqualStrings("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", &hs.accept);
    try testing.expect(hs.deflate == null);
    try testing.expectError(error.VersionNotSupported, handshakeOf("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: " ++ ws_rfc_key ++ "\r\nSec-WebSocket-Version: 8\r\n\r\n", false));
    try testing.expectError(error.VersionNotSupported, handshakeOf("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: " ++ ws_rfc_key ++ "\r\n\r\n", false));
    try testing.expectError(error.BadRequest, handshakeOf("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n", false));
    try testing.expectError(error.BadRequest, handshakeOf("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: abc\r\nSec-WebSocket-Version: 13\r\n\r\n", false));
    try testing.expectError(error.BadRequest, handshakeOf("POST / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: " ++ ws_rfc_key ++ "\r\nSec-WebSocket-Version: 13\r\n\r\n", false));
    try testing.expectError(error.BadRequest, handshakeOf("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: " ++ ws_rfc_key ++ "\r\nSec-WebSocket-Key: " ++ ws_rfc_key ++ "\r\nSec-WebSocket-Version: 13\r\n\r\n", false));
}

test "WebSocket opening handshake: the upgrade needs both Connection and Upgrade tokens" {
    var storage: [8]http_fields.Header = undefined;
    var buf = "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\n\r\n".*;
    const r = (try h1_parser.parseHead(&buf, &storage, h1_parser.test_limits)).?;
    try testing.expect(asksUpgrade(&r.request));
    var buf2 = "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n".*;
    const r2 = (try h1_parser.parseHead(&buf2, &storage, h1_parser.test_limits)).?;
    try testing.expect(!asksUpgrade(&r2.request));
    var buf3 = "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n".*;
    const r3 = (try h1_parser.parseHead(&buf3, &storage, h1_parser.test_limits)).?;
    try testing.expect(!asksUpgrade(&r3.request));
}
