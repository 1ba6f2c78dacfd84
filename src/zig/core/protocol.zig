//! The protocol seam: the one place where the core meets the protocols.
//!
//! A connection (`core/connection.zig`) and a stream (`core/stream.zig`) call the verbs
//! below without knowing which protocol serves them; each verb picks the protocol from the
//! connection's phase (`Conn.state`) or the stream's `protocol`, so the per-protocol
//! switches are all here. What a protocol keeps on a busy connection is one `Session`, in
//! its `Active`: the core holds no other HTTP state beside it.
//!
//! Every protocol is reached one way: through its table of verbs (`Http1Verbs`,
//! `Http2Verbs`, `WebSocketVerbs`, `Http3Verbs`), which the protocol defines as `verbs` and
//! the server's wiring (`server/wiring.zig`) hands to `Server.init` (HTTP/3's comes with
//! the worker's `QuicPlug`). This file imports no protocol: the protocols import it, and
//! the core below them stays out of their import cycles (docs/ARCHITECTURE.md). The PROXY
//! header before any HTTP is the core's own (`Conn.proxyStep` over
//! `features/proxy_protocol.zig`).
const std = @import("std");
const conn_mod = @import("connection.zig");
const Conn = conn_mod.Conn;
const Active = conn_mod.Active;
const stream_mod = @import("stream.zig");
const Stream = stream_mod.Stream;
const timer = @import("../os/deadlines.zig");
const http_fields = @import("../http/fields.zig");
const h1_parser = @import("../http/http1_parser.zig"); // the hand-overs read an HTTP/1.1 request
const SessionSummary = @import("../transport/openssl.zig").SessionSummary;

/// What the protocol of a busy connection keeps, in its `Active`. The phase
/// (`Conn.state`) says which protocol reads the connection; this is that protocol's state.
pub const Session = union(enum) {
    /// Before any HTTP: the PROXY header is read from the connection's buffer alone.
    none,
    /// HTTP/1.1: its one stream, the skipping of an unread body, and a WebSocket
    /// upgraded from it (the session runs on the HTTP/1.1 stream, `.websocket` phase).
    http1: Http1State,
    /// HTTP/2: the session (settings, windows, HPACK table, its streams).
    http2: Http2Held,
};

/// What HTTP/1.1 keeps on a busy connection (`http1/session.zig` `ConnState`). It is kept
/// here, by value in the `Active`, because the core holds it without naming HTTP/1.1.
pub const Http1State = struct {
    /// HTTP/1.1 serves one stream at a time, here; it keeps the last exchange's state
    /// until the next begins.
    stream: Stream,
    /// Between requests: the rest of an unread request body is being skipped.
    discarding: bool = false,
    discarded_bytes: u64 = 0,
    /// A WebSocket upgrade: pending the app's accept, then the open session.
    ws: ?WebSocketHeld = null,

    pub fn init(conn: *Conn) Http1State {
        return .{ .stream = Stream.init(conn, .http1) };
    }
};

/// HTTP/2's session as the seam holds it: the type is HTTP/2's (`http2/session.zig`
/// `Session`), and only HTTP/2's verbs look into it (`sessionOf`). The pointer keeps the
/// session's alignment, so the `@ptrCast` back to it is free (and a session that came to
/// need more would not compile).
pub const Http2Session = opaque {};
pub const Http2Held = *align(@alignOf(u64)) Http2Session;

/// A WebSocket session (`websocket/session.zig` `Session`) as the core and the protocols
/// that start or carry one hold it, held the way HTTP/2's session is.
pub const WebSocket = opaque {};
pub const WebSocketHeld = *align(@alignOf(u64)) WebSocket;
/// What a WebSocket's accept can fail with (`websocket/session.zig` `AcceptError`).
pub const WebSocketAcceptError = error{ InvalidHeader, HeadTooLarge, OutOfMemory, NotPending };
/// Queued bytes past which a carried WebSocket's app waits and its reading pauses.
pub const websocket_out_bytes_high = 64 * 1024;
/// Fields of a WebSocket's accept response the engine writes itself.
pub const websocket_owned_fields = [_][]const u8{
    "upgrade",
    "connection",
    "sec-websocket-accept",
    "sec-websocket-extensions",
    "content-length",
    "transfer-encoding",
};

/// Whether an app's field of a WebSocket's accept response goes out: not one the engine
/// writes itself, nor a second subprotocol when the app named one in its accept.
pub fn webSocketKeepsField(name: []const u8, subprotocol: ?[]const u8) bool {
    for (websocket_owned_fields) |o| if (std.ascii.eqlIgnoreCase(name, o)) return false;
    return subprotocol == null or !std.ascii.eqlIgnoreCase(name, "sec-websocket-protocol");
}

/// A carried WebSocket's accept failed as a response head would (`Stream.startResponse`).
pub fn webSocketAcceptError(e: stream_mod.StartError) WebSocketAcceptError {
    return switch (e) {
        error.InvalidHeader, error.AlreadyStarted => error.InvalidHeader,
        error.HeadTooLarge => error.HeadTooLarge,
        error.OutOfMemory => error.OutOfMemory,
    };
}

/// Where a new connection's first bytes stand against HTTP/2's client preface (RFC 9113 3.4).
pub const Preface = enum { no, partial, yes };
/// The length of HTTP/2's client preface (`http2/frames.zig` `preface`, checked there).
pub const http2_preface_len = 24;

/// What the server's wiring (`server/wiring.zig`) hands the core at `Server.init`: each
/// protocol's table, and the engine's own answer before the app (`--static`), all from
/// above, so the core imports none of them.
pub const Wiring = struct {
    http1: *const Http1Verbs,
    http2: *const Http2Verbs,
    websocket: *const WebSocketVerbs,
    /// Answers a request before the app sees it: true when it did (the stream finished).
    answerFirst: *const fn (st: *Stream, req: *const stream_mod.Request) bool,
};

/// The verbs every protocol's stream answers alike, as the app side drives them through
/// `Stream` (`Http1Verbs.stream`, `Http2Verbs.stream`, `Http3Verbs.stream`).
pub const StreamVerbs = struct {
    mustWait: *const fn (st: *const Stream) bool,
    takeBody: *const fn (st: *Stream, segs: [][]const u8) stream_mod.TakeResult,
    bodyConsumed: *const fn (st: *Stream) void,
    awaitBody: *const fn (st: *Stream) void,
    startResponse: *const fn (
        st: *Stream,
        status: u16,
        headers: []const [2][]const u8,
        extra: []const [2][]const u8,
        trailers: bool,
    ) stream_mod.StartError!void,
    earlyHint: *const fn (st: *Stream, links: []const []const u8) stream_mod.StartError!void,
    writeTrailers: *const fn (
        st: *Stream,
        fields: []const [2][]const u8,
        more: bool,
    ) stream_mod.TrailersError!bool,
    writeBody: *const fn (
        st: *Stream,
        data: []const u8,
        more: bool,
        owner: ?*anyopaque,
    ) stream_mod.WriteError!bool,
    sendFd: *const fn (st: *Stream, fd: i32, offset: u64, len: u64) stream_mod.FileError!void,
    finishStream: *const fn (st: *Stream) void,
};

/// HTTP/1.1's verbs (`http1/session.zig` `verbs`).
pub const Http1Verbs = struct {
    // The connection's.
    process: *const fn (conn: *Conn) void,
    timedOut: *const fn (conn: *Conn) void,
    afterFlush: *const fn (conn: *Conn) void,
    wholeResponseQueued: *const fn (conn: *const Conn) bool,
    refuse: *const fn (conn: *Conn, status: u16) void,
    wsSession: *const fn (conn: *const Conn) ?WebSocketHeld,
    // The stream's.
    /// The verbs every protocol's stream answers alike.
    stream: StreamVerbs,
    readBodyDirect: *const fn (st: *Stream, dst: []u8) usize,
    sendFile: *const fn (st: *Stream, path: [:0]const u8) stream_mod.FileError!void,
};

/// WebSocket's verbs (`websocket/session.zig` `verbs`): over an HTTP/1.1 connection (the
/// `.websocket` phase), or carried by a stream (RFC 8441), and the upgrades that start one.
pub const WebSocketVerbs = struct {
    // Over a connection.
    process: *const fn (conn: *Conn) void,
    afterFlush: *const fn (conn: *Conn) void,
    goingAway: *const fn (conn: *Conn) void,
    pingDue: *const fn (conn: *Conn) void,
    pongTimeout: *const fn (conn: *Conn) void,
    /// The same for a session a stream carries (its own timer entry).
    streamPingDue: *const fn (entry: *timer.Entry) void,
    streamPongTimeout: *const fn (entry: *timer.Entry) void,
    streamFinished: *const fn (conn: *Conn) void,
    /// An HTTP/1.1 request that asks for the upgrade (RFC 6455 4.1).
    asksUpgrade: *const fn (req: *const h1_parser.Request) bool,
    /// The upgrade, checked; null when it began, else the status HTTP/1.1 refuses it with.
    beginUpgrade: *const fn (conn: *Conn, req: *const h1_parser.Request) ?u16,
    // A session, wherever it runs.
    open: *const fn (st: *Stream, fields: []const http_fields.Header) ?WebSocketHeld,
    isOpen: *const fn (w: WebSocketHeld) bool,
    wake: *const fn (w: WebSocketHeld) void,
    processSession: *const fn (w: WebSocketHeld) void,
    outputDrained: *const fn (w: WebSocketHeld) void,
    sessionFinished: *const fn (w: WebSocketHeld) void,
    goingAwaySession: *const fn (w: WebSocketHeld) void,
    destroy: *const fn (w: WebSocketHeld) void,
};

/// HTTP/2's verbs (`http2/session.zig` `verbs`).
pub const Http2Verbs = struct {
    // The connection's.
    preface: *const fn (data: []const u8) Preface,
    begin: *const fn (conn: *Conn) void,
    beginUpgrade: *const fn (conn: *Conn, req: *const h1_parser.Request, settings: []const u8) void,
    destroy: *const fn (s: Http2Held) void,
    process: *const fn (conn: *Conn) void,
    timedOut: *const fn (conn: *Conn) void,
    fill: *const fn (conn: *Conn) void,
    afterFlush: *const fn (conn: *Conn) void,
    connClosed: *const fn (conn: *Conn) void,
    drainStarted: *const fn (conn: *Conn) void,
    goAway: *const fn (conn: *Conn) void,
    closeWebSockets: *const fn (conn: *Conn) bool,
    lifetimeDue: *const fn (entry: *timer.Entry) void,
    // The stream's.
    /// The verbs every protocol's stream answers alike.
    stream: StreamVerbs,
    sendFile: *const fn (st: *Stream, path: [:0]const u8) stream_mod.FileError!void,
    abortStream: *const fn (st: *Stream) void,
    wsSession: *const fn (st: *const Stream) ?WebSocketHeld,
    /// A stream carrying a WebSocket (RFC 8441).
    carrier: CarrierVerbs,
};

/// What `websocket/carrier.zig` asks of a stream that carries a WebSocket (HTTP/2's
/// extended CONNECT, RFC 8441; HTTP/3's, RFC 9220): its DATA both ways, and the accept.
pub const CarrierVerbs = struct {
    /// Frames can still move on the stream.
    live: *const fn (st: *const Stream) bool,
    /// Over for the app: the stream cannot move frames, or the client's side ended and
    /// every frame it sent was parsed.
    ended: *const fn (st: *const Stream) bool,
    /// The app holds the stream (it may wait on it).
    held: *const fn (st: *const Stream) bool,
    /// The received bytes not parsed yet.
    input: *const fn (st: *Stream) []u8,
    /// `n` bytes of `input` were parsed: they leave it, and the peer may send as many more.
    consume: *const fn (st: *Stream, n: usize) void,
    /// The session reads again (its app or its client caught up): what `input` holds is
    /// parsed, now or on the connection's next pass.
    resumeInput: *const fn (st: *Stream) void,
    /// One frame, header and payload copied, onto the stream's output.
    queue: *const fn (
        st: *Stream,
        head: []const u8,
        payload: []const u8,
    ) error{OutOfMemory}!void,
    /// Bytes queued for the client and not written yet.
    outLen: *const fn (st: *const Stream) usize,
    /// Our side of the stream ends (after our close frame).
    end: *const fn (st: *Stream) error{OutOfMemory}!void,
    /// The WebSocket failed beyond a close frame: the stream is reset.
    abort: *const fn (st: *Stream) void,
    /// The app accepted: a 200 with the subprotocol, the extension and the app's fields.
    accept: *const fn (
        st: *Stream,
        subprotocol: ?[]const u8,
        extension: ?[]const u8,
        headers: []const [2][]const u8,
        extra: []const [2][]const u8,
    ) WebSocketAcceptError!void,
};

/// HTTP/3's stream verbs (`http3/server_stream.zig` `verbs`), reached through the server's
/// `QuicPlug`: HTTP/3 sits beside the TCP path (docs/ARCHITECTURE.md).
pub const Http3Verbs = struct {
    /// The verbs every protocol's stream answers alike.
    stream: StreamVerbs,
    abortStream: *const fn (st: *Stream) void,
    /// What the stream's QUIC handshake kept for the ASGI tls extension (null before it
    /// completed).
    tlsSummary: *const fn (st: *const Stream) ?*const SessionSummary,
    wsSession: *const fn (st: *const Stream) ?WebSocketHeld,
    /// A stream carrying a WebSocket (RFC 9220).
    carrier: CarrierVerbs,
};

inline fn h1(conn: *const Conn) *const Http1Verbs {
    return conn.server.wiring.http1;
}

inline fn h2(conn: *const Conn) *const Http2Verbs {
    return conn.server.wiring.http2;
}

inline fn ws(conn: *const Conn) *const WebSocketVerbs {
    return conn.server.wiring.websocket;
}

/// The session a connection's new `Active` starts with, for the phase it is in.
pub fn initialSession(conn: *Conn) Session {
    return switch (conn.state) {
        .proxy => .none,
        else => .{ .http1 = Http1State.init(conn) },
    };
}

/// Frees what the protocol holds (the connection's `Active` goes with it).
pub fn release(act: *Active) void {
    switch (act.proto) {
        .none => {},
        .http1 => |*s| if (s.ws) |w| ws(act.conn).destroy(w),
        .http2 => |s| h2(act.conn).destroy(s),
    }
    act.proto = .none;
}

// ---- the connection's verbs ---------------------------------------------------------

/// Hands whatever is buffered to the protocol of the current phase.
pub fn process(conn: *Conn) void {
    switch (conn.state) {
        .proxy => conn.proxyStep(),
        .head, .request => h1(conn).process(conn),
        .websocket => ws(conn).process(conn),
        .h2 => h2(conn).process(conn),
        .lingering, .closed => {},
    }
}

/// Whether a connection on the server's pending list has buffered input its protocol
/// parses by itself (HTTP/1.1's request phase waits for the app to read the body).
pub fn parsesBuffered(conn: *const Conn) bool {
    return switch (conn.state) {
        .proxy, .head, .websocket, .h2 => true,
        .request, .lingering, .closed => false,
    };
}

/// Whether the phase reads through TLS (decrypted bytes waiting in OpenSSL matter).
pub fn readsDecrypted(conn: *const Conn) bool {
    return switch (conn.state) {
        .head, .request, .h2, .websocket => true,
        .proxy, .lingering, .closed => false,
    };
}

/// A deadline of the current phase passed (`Conn.timer`).
pub fn timedOut(conn: *Conn) void {
    switch (conn.state) {
        .head, .request => h1(conn).timedOut(conn),
        .h2 => h2(conn).timedOut(conn),
        // The peer's close frame (or the rest of a lingering close) did not come in time.
        .proxy, .websocket, .lingering, .closed => conn.close(),
    }
}

/// The output queue is about to be written: a protocol that schedules its own frames
/// (HTTP/2) moves them in as the queue empties.
pub inline fn fill(conn: *Conn) void {
    if (conn.state == .h2) h2(conn).fill(conn);
}

/// Whether the protocol queues its output for one write when the loop's pass ends
/// (HTTP/2, `Server.flushSoon`); a connection that left that phase meanwhile is skipped.
pub inline fn batchesWrites(conn: *const Conn) bool {
    return conn.state == .h2;
}

/// All output is written: the protocol goes on.
pub fn afterFlush(conn: *Conn) void {
    switch (conn.state) {
        .websocket => ws(conn).afterFlush(conn),
        .h2 => h2(conn).afterFlush(conn),
        // Lingering or closed: an HTTP/1.1 stream may still wait to be woken.
        .proxy, .head, .request, .lingering, .closed => if (conn.a().proto == .http1)
            h1(conn).afterFlush(conn),
    }
}

/// The socket closed. True when the protocol took over retiring the connection (HTTP/2
/// waits for its streams); false leaves it to the transport.
pub fn closed(conn: *Conn) bool {
    const act = conn.a();
    if (act.proto == .http2) {
        h2(conn).connClosed(conn);
        return true;
    }
    return false;
}

/// Whether the protocol still needs the idle connection's `Active` (HTTP/1.1 skipping
/// the rest of an unread body).
pub fn keepsActive(act: *const Active) bool {
    return switch (act.proto) {
        .http1 => |*s| s.discarding,
        .none, .http2 => false,
    };
}

/// Whether the output is one whole plain HTTP/1.1 response that the writer thread or
/// the ring may send (only the first write, nothing blocked yet).
pub fn wholeResponseQueued(conn: *const Conn) bool {
    if (conn.state != .request) return false;
    return h1(conn).wholeResponseQueued(conn);
}

/// The drain began: HTTP/2 says a GOAWAY naming no stream yet, and a PING whose answer
/// lets the final GOAWAY follow (HTTP/2's `drainStarted`). HTTP/1.1 needs nothing here: its
/// next response closes the connection. WebSockets go on until the deadline.
pub fn drainStarted(conn: *Conn) void {
    if (conn.state == .h2) h2(conn).drainStarted(conn);
}

/// The server stops accepting: HTTP/2 sends its final GOAWAY (if the PING has not come
/// back yet); streams in flight finish.
pub fn goingAway(conn: *Conn) void {
    if (conn.state == .h2) h2(conn).goAway(conn);
}

/// The drain's deadline came (or none will come and accepting stopped): open WebSockets
/// on the connection, over HTTP/1.1 or HTTP/2, are closed with 1001 (going away). True
/// when the connection carries one, so it is left to finish the closing handshake.
pub fn closeWebSockets(conn: *Conn) bool {
    return switch (conn.state) {
        .websocket => blk: {
            ws(conn).goingAway(conn);
            break :blk true;
        },
        .h2 => h2(conn).closeWebSockets(conn),
        else => false,
    };
}

/// A WebSocket's ping interval passed (the server's ping deadline queue).
pub fn pingDue(entry: *timer.Entry) void {
    const conn: *Conn = @fieldParentPtr("timer", entry);
    ws(conn).pingDue(conn);
}

/// A WebSocket's pong did not come in time (the server's pong deadline queue).
pub fn pongTimeout(entry: *timer.Entry) void {
    const conn: *Conn = @fieldParentPtr("timer", entry);
    ws(conn).pongTimeout(conn);
}

/// A stream-carried WebSocket's ping interval passed, or its pong did not come in time
/// (the server's stream ping and pong queues; `verbs` is its `Server.wiring.websocket`).
pub fn streamPingDue(verbs: *const WebSocketVerbs, entry: *timer.Entry) void {
    verbs.streamPingDue(entry);
}
pub fn streamPongTimeout(verbs: *const WebSocketVerbs, entry: *timer.Entry) void {
    verbs.streamPongTimeout(entry);
}

/// An HTTP/2 session's `--timeout-connection` is due (the server's lifetime queue;
/// `verbs` is its `Server.wiring.http2`).
pub fn lifetimeDue(verbs: *const Http2Verbs, entry: *timer.Entry) void {
    verbs.lifetimeDue(entry);
}

/// The PROXY header was read (`Conn.proxyStep`): HTTP/1.1 reads what follows.
pub fn afterProxyHeader(act: *Active) void {
    std.debug.assert(act.conn.state == .head and act.proto == .none);
    act.proto = .{ .http1 = Http1State.init(act.conn) };
}

// ---- the stream's verbs -------------------------------------------------------------

/// The stream verbs of `st`'s protocol.
inline fn streamVerbs(st: *const Stream) *const StreamVerbs {
    return switch (st.protocol) {
        .http1 => &h1(st.conn).stream,
        .http2 => &h2(st.conn).stream,
        .http3 => &h3(st).stream,
    };
}

inline fn h3(st: *const Stream) *const Http3Verbs {
    return st.conn.server.quic.?.verbs;
}

/// `pathsend` over HTTP/3: the file is opened and handed on as `sendFd`.
fn h3SendFile(st: *Stream, path: [:0]const u8) stream_mod.FileError!void {
    const sys = @import("../os/sys.zig");
    const file = switch (sys.openFile(path.ptr)) {
        .ok => |f| f,
        .err => {
            h3(st).abortStream(st);
            return;
        },
    };
    // As over HTTP/2: a file shorter than the app's content-length resets the stream (logged);
    // a longer one is sent up to it.
    const length = st.resp_length orelse file.size;
    if (length > file.size) {
        sys.close(file.fd);
        var line: [512]u8 = undefined;
        const shown = path[0..@min(path.len, 300)];
        st.conn.server.hooks.logError(std.fmt.bufPrint(&line, "pathsend: {s} is shorter than the response's content-length: stream reset", .{shown}) catch "pathsend: a file is too short");
        h3(st).abortStream(st);
        return;
    }
    return h3(st).stream.sendFd(st, file.fd, 0, length);
}

pub fn mustWait(st: *const Stream) bool {
    return streamVerbs(st).mustWait(st);
}

pub fn takeBody(st: *Stream, segs: [][]const u8) stream_mod.TakeResult {
    return streamVerbs(st).takeBody(st, segs);
}

pub fn readBodyDirect(st: *Stream, dst: []u8) usize {
    return switch (st.protocol) {
        .http1 => h1(st.conn).readBodyDirect(st, dst),
        .http2 => 0,
        .http3 => 0,
    };
}

pub fn bodyConsumed(st: *Stream) void {
    streamVerbs(st).bodyConsumed(st);
}

pub fn awaitBody(st: *Stream) void {
    streamVerbs(st).awaitBody(st);
}

pub fn startResponse(
    st: *Stream,
    status: u16,
    headers: []const [2][]const u8,
    extra: []const [2][]const u8,
    trailers: bool,
) stream_mod.StartError!void {
    return streamVerbs(st).startResponse(st, status, headers, extra, trailers);
}

pub fn earlyHint(st: *Stream, links: []const []const u8) stream_mod.StartError!void {
    return streamVerbs(st).earlyHint(st, links);
}

pub fn writeTrailers(
    st: *Stream,
    fields: []const [2][]const u8,
    more: bool,
) stream_mod.TrailersError!bool {
    return streamVerbs(st).writeTrailers(st, fields, more);
}

pub fn writeBody(
    st: *Stream,
    data: []const u8,
    more: bool,
    owner: ?*anyopaque,
) stream_mod.WriteError!bool {
    return streamVerbs(st).writeBody(st, data, more, owner);
}

pub fn sendFile(st: *Stream, path: [:0]const u8) stream_mod.FileError!void {
    return switch (st.protocol) {
        .http1 => h1(st.conn).sendFile(st, path),
        .http2 => h2(st.conn).sendFile(st, path),
        .http3 => h3SendFile(st, path),
    };
}

pub fn sendFd(st: *Stream, fd: i32, offset: u64, len: u64) stream_mod.FileError!void {
    return streamVerbs(st).sendFd(st, fd, offset, len);
}

pub fn finishStream(st: *Stream) void {
    streamVerbs(st).finishStream(st);
}

/// The app failed after its response started: the exchange cannot be completed.
pub fn abortStream(st: *Stream) void {
    switch (st.protocol) {
        // HTTP/1.1 has no way to end one exchange but closing the connection.
        .http1 => st.conn.close(),
        // HTTP/2 resets the one stream.
        .http2 => h2(st.conn).abortStream(st),
        .http3 => h3(st).abortStream(st),
    }
}

/// A request refused before its response started, where the protocol answers it on its
/// own (HTTP/1.1: the status, then the connection closes); false where the stream answers
/// through its verbs (HTTP/2).
pub fn refuseRequest(st: *Stream, status: u16) bool {
    switch (st.protocol) {
        .http1 => {
            h1(st.conn).refuse(st.conn, status);
            return true;
        },
        .http2, .http3 => return false,
    }
}

/// The stream's WebSocket session, if its request opened one.
pub fn wsSession(st: *const Stream) ?WebSocketHeld {
    return switch (st.protocol) {
        .http1 => h1(st.conn).wsSession(st.conn),
        .http2 => h2(st.conn).wsSession(st),
        .http3 => h3(st).wsSession(st),
    };
}

// ---- the hand-overs: one protocol starting or carrying another -----------------------
//
// No protocol folder imports another's (docs/ARCHITECTURE.md, "Protocols that hand over
// to each other"): where HTTP/1.1 starts HTTP/2 or WebSocket, and where a stream carries
// a WebSocket, the protocols call these verbs, and only this file knows both sides.

/// HTTP/1.1 to HTTP/2 with prior knowledge: where a new connection's bytes stand
/// against the client preface (RFC 9113 3.4).
pub fn http2Preface(conn: *const Conn, data: []const u8) Preface {
    return h2(conn).preface(data);
}

/// The preface was read: the connection speaks HTTP/2 from now on.
pub fn startHttp2(conn: *Conn) void {
    h2(conn).begin(conn);
}

/// The h2c upgrade (RFC 7540 3.2): the HTTP/1.1 request becomes HTTP/2's stream 1.
/// `settings` is its HTTP2-Settings field, decoded (a whole number of settings).
pub fn upgradeToHttp2(conn: *Conn, req: *const h1_parser.Request, settings: []const u8) void {
    h2(conn).beginUpgrade(conn, req, settings);
}

/// An HTTP/1.1 request that asks for the WebSocket upgrade (RFC 6455 4.1).
pub fn asksWebSocket(conn: *const Conn, req: *const h1_parser.Request) bool {
    return ws(conn).asksUpgrade(req);
}

/// The WebSocket upgrade of an HTTP/1.1 request, checked; the session then waits for the
/// app's accept. Null when it began; else the status HTTP/1.1 refuses it with.
pub fn upgradeToWebSocket(conn: *Conn, req: *const h1_parser.Request) ?u16 {
    return ws(conn).beginUpgrade(conn, req);
}

/// HTTP/1.1's app returned on an upgraded connection: an open WebSocket closes normally.
pub fn webSocketStreamFinished(conn: *Conn) void {
    ws(conn).streamFinished(conn);
}

/// An extended CONNECT for a WebSocket (RFC 8441 4) with version 13: a session carried by
/// `st`, waiting for the app's accept; null when out of memory.
pub fn openWebSocket(st: *Stream, fields: []const http_fields.Header) ?WebSocketHeld {
    return ws(st.conn).open(st, fields);
}

/// An extended CONNECT's `:protocol` and fields against what a WebSocket needs (RFC 8441 4,
/// RFC 9220 3), alike over HTTP/2 and HTTP/3: null when a session may open, else the
/// status the stream is refused with (501 for another protocol, 426 without version 13).
pub fn webSocketConnectRefusal(protocol: []const u8, fields: []const http_fields.Header) ?u16 {
    if (!std.ascii.eqlIgnoreCase(protocol, "websocket")) return 501;
    var version: ?[]const u8 = null;
    for (fields) |f| if (std.mem.eql(u8, f.name, "sec-websocket-version")) {
        version = f.value;
    };
    if (!std.mem.eql(u8, version orelse "", "13")) return 426;
    return null;
}

/// A carried WebSocket's verbs for its carrier (`conn` is the carrier's connection):
/// whether it is open, its app may go on, parse what arrived, the output drained, the app
/// returned, the drain's deadline (1001), the stream is freed.
pub fn webSocketOpen(conn: *const Conn, w: WebSocketHeld) bool {
    return ws(conn).isOpen(w);
}
pub fn webSocketWake(conn: *const Conn, w: WebSocketHeld) void {
    ws(conn).wake(w);
}
pub fn webSocketProcess(conn: *const Conn, w: WebSocketHeld) void {
    ws(conn).processSession(w);
}
pub fn webSocketOutputDrained(conn: *const Conn, w: WebSocketHeld) void {
    ws(conn).outputDrained(w);
}
pub fn webSocketFinished(conn: *const Conn, w: WebSocketHeld) void {
    ws(conn).sessionFinished(w);
}
pub fn webSocketGoingAway(conn: *const Conn, w: WebSocketHeld) void {
    ws(conn).goingAwaySession(w);
}
pub fn webSocketDestroy(conn: *const Conn, w: WebSocketHeld) void {
    ws(conn).destroy(w);
}

// What `websocket/carrier.zig` asks of a stream that carries a WebSocket, by protocol.
// HTTP/1.1's one stream never does: its WebSocket is carried by the connection.

inline fn carrierOf(st: *const Stream) *const CarrierVerbs {
    return switch (st.protocol) {
        .http1 => unreachable,
        .http2 => &h2(st.conn).carrier,
        .http3 => &h3(st).carrier,
    };
}

pub fn carrierLive(st: *const Stream) bool {
    return carrierOf(st).live(st);
}

pub fn carrierEnded(st: *const Stream) bool {
    return carrierOf(st).ended(st);
}

pub fn carrierHeld(st: *const Stream) bool {
    return carrierOf(st).held(st);
}

pub fn carrierInput(st: *Stream) []u8 {
    return carrierOf(st).input(st);
}

pub fn carrierConsume(st: *Stream, n: usize) void {
    carrierOf(st).consume(st, n);
}

pub fn carrierResumeInput(st: *Stream) void {
    carrierOf(st).resumeInput(st);
}

pub fn carrierQueue(st: *Stream, head: []const u8, payload: []const u8) error{OutOfMemory}!void {
    return carrierOf(st).queue(st, head, payload);
}

pub fn carrierOutLen(st: *const Stream) usize {
    return carrierOf(st).outLen(st);
}

pub fn carrierEnd(st: *Stream) error{OutOfMemory}!void {
    return carrierOf(st).end(st);
}

pub fn carrierAbort(st: *Stream) void {
    carrierOf(st).abort(st);
}

pub fn carrierAccept(
    st: *Stream,
    subprotocol: ?[]const u8,
    extension: ?[]const u8,
    headers: []const [2][]const u8,
    extra: []const [2][]const u8,
) WebSocketAcceptError!void {
    return carrierOf(st).accept(st, subprotocol, extension, headers, extra);
}

test "an extended CONNECT opens a WebSocket only for websocket, version 13" {
    const H = http_fields.Header;
    const v13 = [_]H{.{ .name = "sec-websocket-version", .value = "13" }};
    try std.testing.expectEqual(@as(?u16, null), webSocketConnectRefusal("websocket", &v13));
    // The token is case-insensitive (RFC 8441 4 registers it as a token).
    try std.testing.expectEqual(@as(?u16, null), webSocketConnectRefusal("WebSocket", &v13));
    try std.testing.expectEqual(@as(?u16, 501), webSocketConnectRefusal("webtransport", &v13));
    try std.testing.expectEqual(@as(?u16, 501), webSocketConnectRefusal("", &v13));
    try std.testing.expectEqual(@as(?u16, 426), webSocketConnectRefusal("websocket", &.{}));
    const v12 = [_]H{.{ .name = "sec-websocket-version", .value = "12" }};
    try std.testing.expectEqual(@as(?u16, 426), webSocketConnectRefusal("websocket", &v12));
    const v130 = [_]H{.{ .name = "sec-websocket-version", .value = "130" }};
    try std.testing.expectEqual(@as(?u16, 426), webSocketConnectRefusal("websocket", &v130));
}

test "a WebSocket accept keeps the app's fields but the engine's own" {
    try std.testing.expect(webSocketKeepsField("x-custom", null));
    try std.testing.expect(!webSocketKeepsField("Sec-WebSocket-Accept", null));
    try std.testing.expect(!webSocketKeepsField("content-length", "chat"));
    // The app's own subprotocol field goes out only when its accept named none.
    try std.testing.expect(webSocketKeepsField("sec-websocket-protocol", null));
    try std.testing.expect(!webSocketKeepsField("sec-websocket-protocol", "chat"));
}
