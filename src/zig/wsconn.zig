//! A connection after a WebSocket upgrade: frames in, whole messages out to the
//! stream, messages from the stream framed back, pings, and the close handshake.
//!
//! The stream sees messages, never frames: continuation frames are reassembled here
//! (control frames may come between them), text is validated as UTF-8 as it
//! arrives, pings are answered here. Every queue is bounded: at most
//! `ws_queue_max` whole messages wait for the app (then the socket is not read), at
//! most `out_bytes_high` bytes wait for the client before the app's send() waits
//! and incoming frames stop being read (so a client that never reads cannot make
//! us queue pongs without end).
const std = @import("std");
const ws = @import("ws.zig");
const deflate = @import("deflate.zig");
const response = @import("response.zig");
const pool_mod = @import("pool.zig");
const Conn = @import("conn.zig").Conn;

const allocator = std.heap.c_allocator;

/// Queued outbound bytes past which send() waits and reading pauses.
pub const out_bytes_high = 64 * 1024;
/// Why a connection closes when a frame or message cannot be allocated (logged).
const out_of_memory = "out of memory for a WebSocket frame or message";
/// The 101 response head fits in one pooled buffer.
const head_bytes_max = @import("pool.zig").buffer_bytes;
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
    accept: [ws.accept_bytes]u8,
    deflate: ?ws.DeflateParams,
    /// The 101 went out: frames are parsed from now on.
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
};

/// The request is a valid upgrade: the session waits for the app's accept.
pub fn begin(conn: *Conn, hs: ws.Handshake) bool {
    const s = allocator.create(Session) catch return false;
    s.* = .{ .accept = hs.accept, .deflate = hs.deflate };
    conn.a().ws = s;
    return true;
}

pub fn destroy(s: *Session) void {
    s.msg.deinit(allocator);
    while (s.ready_head) |m| {
        s.ready_head = m.next;
        m.destroy();
    }
    if (s.inflater) |i| i.destroy();
    allocator.destroy(s);
}

fn session(conn: *Conn) *Session {
    return conn.a().ws.?;
}

pub const AcceptError = error{ InvalidHeader, HeadTooLarge, OutOfMemory, NotPending };

/// The app accepted: 101 with the accept key, the subprotocol, the extension, and
/// the app's headers; then frames already buffered are parsed on the next pass.
pub fn accept(conn: *Conn, subprotocol: ?[]const u8, headers: []const [2][]const u8, extra: []const [2][]const u8) AcceptError!void {
    const act = conn.a();
    const s = session(conn);
    if (conn.state == .closed) return;
    const st = &act.h1_stream;
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
    // Accepted while the server drains: it is told at once that the server is going away.
    if (conn.server.draining) return goingAway(conn);
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
    const owned = [_][]const u8{ "upgrade", "connection", "sec-websocket-accept", "sec-websocket-extensions", "content-length", "transfer-encoding" };
    outer: for (headers) |h| {
        if (!response.validName(h[0]) or !response.validValue(h[1])) return error.InvalidHeader;
        for (owned) |o| if (std.ascii.eqlIgnoreCase(h[0], o)) continue :outer;
        if (subprotocol != null and std.ascii.eqlIgnoreCase(h[0], "sec-websocket-protocol")) continue;
        try w.header(h[0], h[1]);
    }
    try w.append("\r\n");
}

// ---- reading ------------------------------------------------------------------------

/// Parses what the read buffer holds, as far as the queues allow.
pub fn process(conn: *Conn) void {
    const act = conn.a();
    const s = session(conn);
    while (conn.state == .websocket and !s.close_received and !s.failed) {
        if (backlogged(conn)) {
            // The app or the client is behind: stop reading until it catches up.
            conn.setReading(false);
            break;
        }
        const buf = act.rbuf orelse break;
        const avail = buf[act.rstart..act.rlen];
        if (!s.in_frame) {
            const h = (ws.parseHeader(avail, s.deflate != null) catch |err| return fail(conn, err)) orelse break;
            if (!h.opcode.isControl()) {
                s.seq.onDataFrame(h) catch |err| return fail(conn, err);
                if (h.payload_len > conn.server.opts.ws_message_bytes_max -| s.msg.items.len) return fail(conn, error.TooBig);
            } else {
                s.ctrl_len = 0;
            }
            act.rstart += h.header_len;
            s.frame = h;
            s.frame_read = 0;
            s.in_frame = true;
            if (h.payload_len == 0) endFrame(conn);
            continue;
        }
        const left = s.frame.payload_len - s.frame_read;
        const n: usize = @intCast(@min(left, avail.len));
        if (n == 0) break;
        const chunk = buf[act.rstart..][0..n];
        ws.unmask(chunk, s.frame.mask, s.frame_read);
        act.rstart += @intCast(n);
        s.frame_read += n;
        if (s.frame.opcode.isControl()) {
            @memcpy(s.ctrl[s.ctrl_len..][0..n], chunk);
            s.ctrl_len += @intCast(n);
        } else if (!s.close_sent) {
            if (s.seq.message == .text and !s.seq.compressed and !s.utf8.feed(chunk)) return fail(conn, error.InvalidData);
            s.msg.appendSlice(allocator, chunk) catch return conn.closeFor(out_of_memory);
        }
        if (s.frame_read == s.frame.payload_len) endFrame(conn);
    }
    if (conn.state == .closed) return;
    // An idle WebSocket holds no read buffer.
    if (act.rstart == act.rlen) {
        act.rstart = 0;
        act.rlen = 0;
        if (act.rbuf) |b| conn.server.pool.release(b);
        act.rbuf = null;
    }
}

fn endFrame(conn: *Conn) void {
    const s = session(conn);
    s.in_frame = false;
    switch (s.frame.opcode) {
        .close => onClose(conn),
        .ping => if (!s.close_sent) {
            queueFrame(conn, .pong, s.ctrl[0..s.ctrl_len], false) catch return conn.closeFor(out_of_memory);
            conn.flush();
        },
        .pong => if (s.ping_outstanding) {
            s.ping_outstanding = false;
            // Once our close frame is out, the timer waits for the peer's close instead.
            if (!s.close_sent) armPing(conn);
        },
        else => if (s.frame.fin) endMessage(conn),
    }
}

fn endMessage(conn: *Conn) void {
    const s = session(conn);
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
    if (compressed) {
        data = inflateMessage(conn, &data) catch |err| switch (err) {
            error.TooBig => return fail(conn, error.TooBig),
            error.Corrupt => return fail(conn, error.ProtocolError),
            error.OutOfMemory => return conn.close(),
        };
        if (text and !ws.validUtf8(data.items)) {
            data.deinit(allocator);
            return fail(conn, error.InvalidData);
        }
    } else if (text and !utf8_done) {
        data.deinit(allocator);
        return fail(conn, error.InvalidData);
    }
    const m = allocator.create(Message) catch {
        data.deinit(allocator);
        return conn.closeFor(out_of_memory);
    };
    m.* = .{ .text = text, .data = data };
    if (s.ready_tail) |t| t.next = m else s.ready_head = m;
    s.ready_tail = m;
    s.ready_count += 1;
    s.ready_bytes += m.data.items.len;
    wakeStream(conn);
}

/// Takes ownership of `compressed` (freed here) and returns the inflated message.
fn inflateMessage(conn: *Conn, compressed: *std.ArrayListUnmanaged(u8)) deflate.Error!std.ArrayListUnmanaged(u8) {
    defer compressed.deinit(allocator);
    const s = session(conn);
    const params = s.deflate.?;
    // Without context takeover nothing carries over between messages: one shared
    // decompressor, reset after each, serves every such connection.
    const shared = params.client_no_context_takeover;
    const inf = if (shared) conn.server.zlib.sharedInflater() else blk: {
        if (s.inflater == null) s.inflater = deflate.Inflater.create();
        break :blk s.inflater;
    };
    const i = inf orelse return error.OutOfMemory;
    var out: std.ArrayListUnmanaged(u8) = .{};
    errdefer out.deinit(allocator);
    defer if (shared) i.reset();
    try i.message(compressed.items, &out, conn.server.opts.ws_message_bytes_max);
    return out;
}

fn onClose(conn: *Conn) void {
    const s = session(conn);
    const c = ws.parseClose(s.ctrl[0..s.ctrl_len]) catch |err| return fail(conn, err);
    s.close_received = true;
    s.close_code = c.code;
    // The reason moves to the front so it can be read as ctrl[0..ctrl_len].
    if (c.reason.len > 0) std.mem.copyForwards(u8, s.ctrl[0..c.reason.len], c.reason);
    s.ctrl_len = @intCast(c.reason.len);
    s.reason_from_peer = true;
    discardInput(conn);
    if (!s.close_sent) {
        // Echo the code (RFC 6455 5.5.1); 1005 means the peer sent none, so neither do we.
        sendClose(conn, c.code, "") catch return conn.closeFor(out_of_memory);
    }
    wakeStream(conn);
    conn.flush();
}

/// Fails the connection: a close frame with the failure's code, then the TCP close.
fn fail(conn: *Conn, err: ws.Failure) void {
    failWith(conn, ws.closeCodeFor(err));
}

fn failWith(conn: *Conn, code: u16) void {
    const s = session(conn);
    s.failed = true;
    if (!s.close_sent) {
        s.close_code = code;
        s.reason_from_peer = false;
        sendClose(conn, code, "") catch return conn.closeFor(out_of_memory);
    }
    discardInput(conn);
    wakeStream(conn);
    conn.flush();
}

fn discardInput(conn: *Conn) void {
    const act = conn.a();
    act.rstart = act.rlen;
}

fn wakeStream(conn: *Conn) void {
    if (conn.a().stream) |st| conn.server.hooks.wakeRead(st);
}

/// The app took a message (or the output drained): read again if we had stopped.
fn maybeResume(conn: *Conn) void {
    const s = session(conn);
    if (conn.state != .websocket or s.close_received or s.failed) return;
    if (backlogged(conn)) return;
    if (!conn.interest.readable) {
        conn.setReading(true);
        conn.server.schedule(conn);
    }
}

/// Too much waits for the app (messages) or for the client (output).
fn backlogged(conn: *Conn) bool {
    const s = session(conn);
    const srv = conn.server;
    return s.ready_count >= srv.opts.ws_queue_max or s.ready_bytes >= srv.opts.ws_message_bytes_max or
        conn.outputLen() > out_bytes_high;
}

/// The oldest whole message, now owned by the caller (`Message.destroy`).
pub fn takeMessage(conn: *Conn) ?*Message {
    const s = conn.a().ws orelse return null;
    const m = s.ready_head orelse return null;
    s.ready_head = m.next;
    if (s.ready_head == null) s.ready_tail = null;
    s.ready_count -= 1;
    s.ready_bytes -= m.data.items.len;
    maybeResume(conn);
    return m;
}

/// The connection is over for the app: closed, failed, or the peer's close arrived.
pub fn finished(conn: *const Conn) bool {
    const s = conn.a().ws orelse return true;
    return conn.state == .closed or conn.state == .lingering or s.close_received or s.failed;
}

pub fn closeCode(conn: *const Conn) u16 {
    const s = conn.a().ws orelse return 1006;
    return s.close_code;
}

pub fn closeReason(conn: *const Conn) []const u8 {
    const s = conn.a().ws orelse return "";
    return if (s.reason_from_peer) s.ctrl[0..s.ctrl_len] else "";
}

// ---- writing ------------------------------------------------------------------------

pub const SendError = error{ Closed, OutOfMemory };

/// Frames one message from the app. True when the app must wait for the output to drain.
pub fn send(conn: *Conn, data: []const u8, text: bool) SendError!bool {
    const s = conn.a().ws orelse return error.Closed;
    if (conn.state != .websocket or s.close_sent) return error.Closed;
    const op: ws.Opcode = if (text) .text else .binary;
    if (s.deflate) |d| {
        const srv = conn.server;
        if (srv.zlib.deflater(d.server_max_window_bits)) |def| {
            def.message(data, &srv.zlib.scratch) catch return error.OutOfMemory;
            defer srv.zlib.trimScratch();
            try queueFrame(conn, op, srv.zlib.scratch.items, true);
        } else try queueFrame(conn, op, data, false);
    } else try queueFrame(conn, op, data, false);
    conn.flush();
    if (conn.state != .websocket) return false;
    return conn.outputLen() > out_bytes_high;
}

fn queueFrame(conn: *Conn, op: ws.Opcode, payload: []const u8, compressed: bool) error{OutOfMemory}!void {
    var hdr: [10]u8 = undefined;
    // A full segment queue is out of room like any allocation: the caller closes.
    conn.queueCopy(ws.encodeHeader(&hdr, true, compressed, op, payload.len), null, frames_bytes_max) catch return error.OutOfMemory;
    conn.queueCopy(payload, null, frames_bytes_max) catch return error.OutOfMemory;
}

fn sendClose(conn: *Conn, code: u16, reason: []const u8) error{OutOfMemory}!void {
    const s = session(conn);
    var payload: [ws.control_payload_bytes_max]u8 = undefined;
    try queueFrame(conn, .close, ws.encodeClosePayload(&payload, code, reason), false);
    s.close_sent = true;
    // The peer's answer must come within the linger time (this replaces the ping timer).
    conn.server.linger_timeouts.arm(&conn.timer, conn.server.now_ms);
}

/// websocket.close from the app (after accept).
pub fn closeFromApp(conn: *Conn, code: u16, reason: []const u8) void {
    const s = conn.a().ws orelse return;
    if (conn.state != .websocket or s.close_sent) return;
    if (!s.close_received and !s.failed) {
        s.close_code = code;
        s.reason_from_peer = false;
    }
    sendClose(conn, code, reason) catch return conn.closeFor(out_of_memory);
    conn.flush();
}

/// The output queue is empty: finish a close handshake, or read again.
pub fn afterFlush(conn: *Conn) void {
    const s = session(conn);
    if (s.close_sent and (s.close_received or s.failed)) {
        // Our close frame is out and nothing more is expected: the server closes the
        // TCP connection first (RFC 6455 7.1.1), reading what is left for a moment.
        return conn.lingerClose(true);
    }
    maybeResume(conn);
}

/// The app returned: an open WebSocket is closed normally.
pub fn streamFinished(conn: *Conn) void {
    if (conn.state != .websocket) return;
    const s = session(conn);
    if (!s.close_sent) {
        sendClose(conn, 1000, "") catch return conn.closeFor(out_of_memory);
    }
    conn.flush();
}

/// Graceful shutdown: 1012 (service restart), as uvicorn does.
pub fn goingAway(conn: *Conn) void {
    if (conn.state != .websocket) return;
    const s = session(conn);
    if (s.close_sent) return;
    if (!s.close_received and !s.failed) s.close_code = 1012;
    sendClose(conn, 1012, "") catch return conn.closeFor(out_of_memory);
    wakeStream(conn);
    conn.flush();
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
    s.ping_count +%= 1;
    var payload: [4]u8 = undefined;
    std.mem.writeInt(u32, &payload, s.ping_count, .big);
    queueFrame(conn, .ping, &payload, false) catch return conn.closeFor(out_of_memory);
    s.ping_outstanding = true;
    conn.server.ws_pong_timeouts.arm(&conn.timer, conn.server.now_ms);
    conn.flush();
}

/// No pong in time: the peer is gone or stuck. 1011, and the connection closes now.
pub fn pongTimeout(conn: *Conn) void {
    if (conn.state != .websocket) return conn.close();
    const s = session(conn);
    if (!s.close_received and !s.failed) s.close_code = 1011;
    s.failed = true;
    // Best effort: the connection closes right after, whether the frame was queued or not.
    sendClose(conn, 1011, "keepalive ping timeout") catch return conn.closeFor(out_of_memory);
    conn.flush();
    if (conn.state != .closed) conn.close();
}
