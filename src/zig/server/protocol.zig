//! The protocol seam: the one place where the transport meets the protocols.
//!
//! A connection (`server/connection.zig`) and a stream (`server/stream.zig`) call
//! the verbs below without knowing which protocol serves them; each verb picks the
//! protocol from the connection's phase (`Conn.state`) or the stream's `protocol`, so
//! the per-protocol switches are all here. What a protocol keeps on a busy connection
//! is one `Session`, in its `Active`: the transport holds no HTTP state beside it.
//!
//! The protocols: the PROXY header before any HTTP (`Conn.proxyStep` over
//! `features/proxy_protocol.zig`), HTTP/1.1 (`http1/session.zig`), WebSocket after an
//! HTTP/1.1 upgrade (`websocket/session.zig`; over HTTP/2 it is HTTP/2's, RFC 8441) and
//! HTTP/2 (`http2/session.zig`, called through `Http2Verbs`, the table the server holds:
//! importing it would pull HTTP/2's files into the server's import cycle). Protocols
//! import the transport, never the other way round: this file's imports of the protocol
//! sessions are the transport's only ones.
const std = @import("std");
const conn_mod = @import("connection.zig");
const Conn = conn_mod.Conn;
const Active = conn_mod.Active;
const stream_mod = @import("stream.zig");
const Stream = stream_mod.Stream;
const timer = @import("../os/deadlines.zig");
const h1 = @import("../http1/session.zig"); // the seam: the transport's one way to the protocols (docs/ARCHITECTURE.md)
const h2_frames = @import("../http2/frames.zig"); // the hand-overs: the client preface HTTP/1.1 looks for
const h2_request = @import("../http2/request.zig"); // the hand-overs: what the h2c upgrade reads of an HTTP/1.1 request
/// The WebSocket verbs a stream offers the app side (`Stream.wsAccept` ...) and their types.
pub const websocket = @import("../websocket/session.zig"); // the seam: the transport's one way to the protocols (docs/ARCHITECTURE.md)
const ws_codec = @import("../websocket/codec.zig"); // the hand-overs: WebSocket's handshake checks
const ws_deflate = @import("../websocket/deflate.zig"); // the hand-overs: zlib, loaded when a client offers compression
const h1_parser = @import("../http1/parser.zig"); // the hand-overs: what HTTP/2 and WebSocket read of an HTTP/1.1 request
const http_fields = @import("../http/fields.zig");

/// What the protocol of a busy connection keeps, in its `Active`. The phase
/// (`Conn.state`) says which protocol reads the connection; this is that protocol's state.
pub const Session = union(enum) {
    /// Before any HTTP: the PROXY header is read from the connection's buffer alone.
    none,
    /// HTTP/1.1: its one stream, the skipping of an unread body, and a WebSocket
    /// upgraded from it (the session runs on the HTTP/1.1 stream, `.websocket` phase).
    http1: h1.ConnState,
    /// HTTP/2: the session (settings, windows, HPACK table, its streams).
    http2: Http2Held,
};

/// HTTP/2's session as the seam holds it: the type is HTTP/2's (`http2/session.zig`
/// `Session`), and only HTTP/2's verbs look into it (`sessionOf`). The pointer keeps the
/// session's alignment, so the `@ptrCast` back to it is free (and a session that came to
/// need more would not compile).
pub const Http2Session = opaque {};
pub const Http2Held = *align(@alignOf(u64)) Http2Session;

/// HTTP/2's verbs (`http2/session.zig` `verbs`), reached through `Server.http2` rather
/// than an import, as HTTP/3's are: the seam does not import HTTP/2's session, so HTTP/2's
/// files stay out of the server's import cycle (docs/ARCHITECTURE.md). The engine (and the
/// test fixture) hands the table to `Server.init`; each verb here still picks HTTP/2 by a
/// switch on the connection's phase or the stream's protocol.
pub const Http2Verbs = struct {
    // The connection's.
    begin: *const fn (conn: *Conn) void,
    beginUpgrade: *const fn (conn: *Conn, req: h2_request.UpgradeRequest, settings: []const u8) void,
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
    mustWait: *const fn (st: *const Stream) bool,
    takeBody: *const fn (st: *Stream, segs: [][]const u8) stream_mod.TakeResult,
    bodyConsumed: *const fn (st: *Stream) void,
    awaitBody: *const fn (st: *Stream) void,
    startResponse: *const fn (st: *Stream, status: u16, headers: []const [2][]const u8, extra: []const [2][]const u8, trailers: bool) stream_mod.StartError!void,
    earlyHint: *const fn (st: *Stream, links: []const []const u8) stream_mod.StartError!void,
    writeTrailers: *const fn (st: *Stream, fields: []const [2][]const u8, more: bool) stream_mod.TrailersError!bool,
    writeBody: *const fn (st: *Stream, data: []const u8, more: bool, owner: ?*anyopaque) stream_mod.WriteError!bool,
    sendFile: *const fn (st: *Stream, path: [:0]const u8) stream_mod.FileError!void,
    sendFd: *const fn (st: *Stream, fd: i32, offset: u64, len: u64) stream_mod.FileError!void,
    finishStream: *const fn (st: *Stream) void,
    abortStream: *const fn (st: *Stream) void,
    wsSession: *const fn (st: *const Stream) ?*websocket.Session,
    // A stream carrying a WebSocket (RFC 8441), for `websocket/carrier.zig`.
    carrierLive: *const fn (st: *const Stream) bool,
    carrierEnded: *const fn (st: *const Stream) bool,
    carrierHeld: *const fn (st: *const Stream) bool,
    carrierInput: *const fn (st: *Stream) []u8,
    carrierConsume: *const fn (st: *Stream, n: usize) void,
    carrierQueue: *const fn (st: *Stream, head: []const u8, payload: []const u8) error{OutOfMemory}!void,
    carrierEnd: *const fn (st: *Stream) error{OutOfMemory}!void,
    carrierAbort: *const fn (st: *Stream) void,
    carrierAccept: *const fn (st: *Stream, subprotocol: ?[]const u8, extension: ?[]const u8, headers: []const [2][]const u8, extra: []const [2][]const u8) websocket.AcceptError!void,
};

inline fn h2(conn: *const Conn) *const Http2Verbs {
    return conn.server.http2;
}

/// The session a connection's new `Active` starts with, for the phase it is in.
pub fn initialSession(conn: *Conn) Session {
    return switch (conn.state) {
        .proxy => .none,
        else => .{ .http1 = h1.ConnState.init(conn) },
    };
}

/// Frees what the protocol holds (the connection's `Active` goes with it).
pub fn release(act: *Active) void {
    switch (act.proto) {
        .none => {},
        .http1 => |*s| if (s.ws) |w| websocket.destroy(w),
        .http2 => |s| h2(act.conn).destroy(s),
    }
    act.proto = .none;
}

// ---- the connection's verbs ---------------------------------------------------------

/// Hands whatever is buffered to the protocol of the current phase.
pub fn process(conn: *Conn) void {
    switch (conn.state) {
        .proxy => conn.proxyStep(),
        .head, .request => h1.process(conn),
        .websocket => websocket.process(conn),
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
        .head, .request => h1.timedOut(conn),
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
        .websocket => websocket.afterFlush(conn),
        .h2 => h2(conn).afterFlush(conn),
        // Lingering or closed: an HTTP/1.1 stream may still wait to be woken.
        .proxy, .head, .request, .lingering, .closed => if (conn.a().proto == .http1) h1.afterFlush(conn),
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
    return h1.wholeResponseQueued(conn);
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
            websocket.goingAway(conn);
            break :blk true;
        },
        .h2 => h2(conn).closeWebSockets(conn),
        else => false,
    };
}

/// A WebSocket's ping interval passed (the server's ping deadline queue).
pub fn pingDue(entry: *timer.Entry) void {
    websocket.pingDue(@fieldParentPtr("timer", entry));
}

/// A WebSocket's pong did not come in time (the server's pong deadline queue).
pub fn pongTimeout(entry: *timer.Entry) void {
    websocket.pongTimeout(@fieldParentPtr("timer", entry));
}

/// An HTTP/2 session's `--timeout-connection` is due (the server's lifetime queue;
/// `verbs` is its `Server.http2`).
pub fn lifetimeDue(verbs: *const Http2Verbs, entry: *timer.Entry) void {
    verbs.lifetimeDue(entry);
}

/// The PROXY header was read (`Conn.proxyStep`): HTTP/1.1 reads what follows.
pub fn afterProxyHeader(act: *Active) void {
    std.debug.assert(act.conn.state == .head and act.proto == .none);
    act.proto = .{ .http1 = h1.ConnState.init(act.conn) };
}

// ---- the stream's verbs -------------------------------------------------------------

/// HTTP/3's stream verbs (`http3/stream_verbs_server.zig`), reached through the server's
/// `QuicPlug` rather than an import: HTTP/3 sits beside the TCP path (docs/ARCHITECTURE.md)
/// and out of its import cycle.
const SessionSummary = @import("../transport/openssl.zig").SessionSummary;

pub const Http3Verbs = struct {
    mustWait: *const fn (st: *const Stream) bool,
    takeBody: *const fn (st: *Stream, segs: [][]const u8) stream_mod.TakeResult,
    bodyConsumed: *const fn (st: *Stream) void,
    awaitBody: *const fn (st: *Stream) void,
    startResponse: *const fn (st: *Stream, status: u16, headers: []const [2][]const u8, extra: []const [2][]const u8, trailers: bool) stream_mod.StartError!void,
    earlyHint: *const fn (st: *Stream, links: []const []const u8) stream_mod.StartError!void,
    writeTrailers: *const fn (st: *Stream, fields: []const [2][]const u8, more: bool) stream_mod.TrailersError!bool,
    writeBody: *const fn (st: *Stream, data: []const u8, more: bool, owner: ?*anyopaque) stream_mod.WriteError!bool,
    sendFd: *const fn (st: *Stream, fd: i32, offset: u64, len: u64) stream_mod.FileError!void,
    finishStream: *const fn (st: *Stream) void,
    abortStream: *const fn (st: *Stream) void,
    /// What the stream's QUIC handshake kept for the ASGI tls extension (null before it
    /// completed).
    tlsSummary: *const fn (st: *const Stream) ?*const SessionSummary,
};

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
    return h3(st).sendFd(st, file.fd, 0, length);
}

pub fn mustWait(st: *const Stream) bool {
    return switch (st.protocol) {
        .http1 => h1.mustWait(st),
        .http2 => h2(st.conn).mustWait(st),
        .http3 => h3(st).mustWait(st),
    };
}

pub fn takeBody(st: *Stream, segs: [][]const u8) stream_mod.TakeResult {
    return switch (st.protocol) {
        .http1 => h1.takeBody(st, segs),
        .http2 => h2(st.conn).takeBody(st, segs),
        .http3 => h3(st).takeBody(st, segs),
    };
}

pub fn readBodyDirect(st: *Stream, dst: []u8) usize {
    return switch (st.protocol) {
        .http1 => h1.readBodyDirect(st, dst),
        .http2 => 0,
        .http3 => 0,
    };
}

pub fn bodyConsumed(st: *Stream) void {
    switch (st.protocol) {
        .http1 => h1.bodyConsumed(st),
        .http2 => h2(st.conn).bodyConsumed(st),
        .http3 => h3(st).bodyConsumed(st),
    }
}

pub fn awaitBody(st: *Stream) void {
    switch (st.protocol) {
        .http1 => h1.awaitBody(st),
        .http2 => h2(st.conn).awaitBody(st),
        .http3 => h3(st).awaitBody(st),
    }
}

pub fn startResponse(st: *Stream, status: u16, headers: []const [2][]const u8, extra: []const [2][]const u8, trailers: bool) stream_mod.StartError!void {
    return switch (st.protocol) {
        .http1 => h1.startResponse(st, status, headers, extra, trailers),
        .http2 => h2(st.conn).startResponse(st, status, headers, extra, trailers),
        .http3 => h3(st).startResponse(st, status, headers, extra, trailers),
    };
}

pub fn earlyHint(st: *Stream, links: []const []const u8) stream_mod.StartError!void {
    return switch (st.protocol) {
        .http1 => h1.earlyHint(st, links),
        .http2 => h2(st.conn).earlyHint(st, links),
        .http3 => h3(st).earlyHint(st, links),
    };
}

pub fn writeTrailers(st: *Stream, fields: []const [2][]const u8, more: bool) stream_mod.TrailersError!bool {
    return switch (st.protocol) {
        .http1 => h1.writeTrailers(st, fields, more),
        .http2 => h2(st.conn).writeTrailers(st, fields, more),
        .http3 => h3(st).writeTrailers(st, fields, more),
    };
}

pub fn writeBody(st: *Stream, data: []const u8, more: bool, owner: ?*anyopaque) stream_mod.WriteError!bool {
    return switch (st.protocol) {
        .http1 => h1.writeBody(st, data, more, owner),
        .http2 => h2(st.conn).writeBody(st, data, more, owner),
        .http3 => h3(st).writeBody(st, data, more, owner),
    };
}

pub fn sendFile(st: *Stream, path: [:0]const u8) stream_mod.FileError!void {
    return switch (st.protocol) {
        .http1 => h1.sendFile(st, path),
        .http2 => h2(st.conn).sendFile(st, path),
        .http3 => h3SendFile(st, path),
    };
}

pub fn sendFd(st: *Stream, fd: i32, offset: u64, len: u64) stream_mod.FileError!void {
    return switch (st.protocol) {
        .http1 => h1.sendFd(st, fd, offset, len),
        .http2 => h2(st.conn).sendFd(st, fd, offset, len),
        .http3 => h3(st).sendFd(st, fd, offset, len),
    };
}

pub fn finishStream(st: *Stream) void {
    switch (st.protocol) {
        .http1 => h1.finishStream(st),
        .http2 => h2(st.conn).finishStream(st),
        .http3 => h3(st).finishStream(st),
    }
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
            h1.refuse(st.conn, status);
            return true;
        },
        .http2, .http3 => return false,
    }
}

/// The stream's WebSocket session, if its request opened one.
pub fn wsSession(st: *const Stream) ?*websocket.Session {
    return switch (st.protocol) {
        .http1 => h1.wsSessionOf(st.conn),
        .http2 => h2(st.conn).wsSession(st),
        .http3 => null,
    };
}

// ---- the hand-overs: one protocol starting or carrying another -----------------------
//
// No protocol folder imports another's (docs/ARCHITECTURE.md, "Protocols that hand over
// to each other"): where HTTP/1.1 starts HTTP/2 or WebSocket, and where a stream carries
// a WebSocket, the protocols call these verbs, and only this file knows both sides.

/// A WebSocket session, as the protocols that start or carry one hold it.
pub const WebSocket = websocket.Session;
/// Queued bytes past which a carried WebSocket's app waits and its reading pauses.
pub const websocket_out_bytes_high = websocket.out_bytes_high;
/// Fields of a WebSocket's accept response the engine writes itself.
pub const websocket_owned_fields = websocket.owned_fields;

/// HTTP/1.1 to HTTP/2 with prior knowledge: where a new connection's bytes stand
/// against the client preface (RFC 9113 3.4).
pub const http2Preface = h2_frames.prefaceState;
pub const http2_preface_len = h2_frames.preface.len;

/// The preface was read: the connection speaks HTTP/2 from now on.
pub fn startHttp2(conn: *Conn) void {
    h2(conn).begin(conn);
}

/// The h2c upgrade (RFC 7540 3.2): the HTTP/1.1 request becomes HTTP/2's stream 1.
/// `settings` is its HTTP2-Settings field, decoded (a whole number of settings).
pub fn upgradeToHttp2(conn: *Conn, req: *const h1_parser.Request, settings: []const u8) void {
    h2(conn).beginUpgrade(conn, .{ .method = req.method, .path = req.path, .query = req.query, .host = req.host, .fields = req.headers }, settings);
}

/// An HTTP/1.1 request that asks for the WebSocket upgrade (RFC 6455 4.1).
pub fn asksWebSocket(req: *const h1_parser.Request) bool {
    return ws_codec.isUpgrade(req.upgrade);
}

/// What WebSocket's handshake checks read of an HTTP/1.1 request.
fn handshakeRequest(req: *const h1_parser.Request) ws_codec.HandshakeRequest {
    return .{ .method = req.method, .http11 = req.version == .http11, .has_body = req.chunked or (req.content_length orelse 0) != 0, .headers = req.headers };
}

/// The WebSocket upgrade of an HTTP/1.1 request, checked; the session then waits for the
/// app's accept. Null when it began; else the status HTTP/1.1 refuses it with.
pub fn upgradeToWebSocket(conn: *Conn, req: *const h1_parser.Request) ?u16 {
    var hs = ws_codec.validate(handshakeRequest(req), conn.server.opts.ws_deflate) catch |err| return ws_codec.statusFor(err);
    // zlib is loaded only now, for a client that offers compression; without it we decline.
    if (hs.deflate != null and !ws_deflate.load()) hs.deflate = null;
    if (!websocket.begin(conn, hs)) return 500;
    return null;
}

/// HTTP/1.1's app returned on an upgraded connection: an open WebSocket closes normally.
pub fn webSocketStreamFinished(conn: *Conn) void {
    websocket.streamFinished(conn);
}

/// An extended CONNECT for a WebSocket (RFC 8441 4) with version 13: a session carried by
/// `st`, waiting for the app's accept; null when out of memory.
pub fn openWebSocket(st: *Stream, fields: []const http_fields.Header) ?*WebSocket {
    var hs = ws_codec.Handshake{ .accept = [_]u8{0} ** ws_codec.accept_bytes, .deflate = null };
    if (st.conn.server.opts.ws_deflate) hs.deflate = ws_codec.negotiateDeflate(fields);
    if (hs.deflate != null and !ws_deflate.load()) hs.deflate = null;
    return websocket.create(.{ .stream = st }, hs);
}

/// A carried WebSocket's verbs for its carrier: parse what arrived, the output drained,
/// the app returned, the drain's deadline (1001), the stream is freed.
pub const webSocketProcess = websocket.processSession;
pub const webSocketOutputDrained = websocket.outputDrained;
pub const webSocketFinished = websocket.sessionFinished;
pub const webSocketGoingAway = websocket.goingAwaySession;
pub const webSocketDestroy = websocket.destroy;

// What `websocket/carrier.zig` asks of a stream that carries a WebSocket, by protocol.
// HTTP/1.1's one stream never does: its WebSocket is carried by the connection.

pub fn carrierLive(st: *const Stream) bool {
    return switch (st.protocol) {
        .http1, .http3 => unreachable,
        .http2 => h2(st.conn).carrierLive(st),
    };
}

pub fn carrierEnded(st: *const Stream) bool {
    return switch (st.protocol) {
        .http1, .http3 => unreachable,
        .http2 => h2(st.conn).carrierEnded(st),
    };
}

pub fn carrierHeld(st: *const Stream) bool {
    return switch (st.protocol) {
        .http1, .http3 => unreachable,
        .http2 => h2(st.conn).carrierHeld(st),
    };
}

pub fn carrierInput(st: *Stream) []u8 {
    return switch (st.protocol) {
        .http1, .http3 => unreachable,
        .http2 => h2(st.conn).carrierInput(st),
    };
}

pub fn carrierConsume(st: *Stream, n: usize) void {
    switch (st.protocol) {
        .http1, .http3 => unreachable,
        .http2 => h2(st.conn).carrierConsume(st, n),
    }
}

pub fn carrierQueue(st: *Stream, head: []const u8, payload: []const u8) error{OutOfMemory}!void {
    switch (st.protocol) {
        .http1, .http3 => unreachable,
        .http2 => try h2(st.conn).carrierQueue(st, head, payload),
    }
}

pub fn carrierEnd(st: *Stream) error{OutOfMemory}!void {
    switch (st.protocol) {
        .http1, .http3 => unreachable,
        .http2 => try h2(st.conn).carrierEnd(st),
    }
}

pub fn carrierAbort(st: *Stream) void {
    switch (st.protocol) {
        .http1, .http3 => unreachable,
        .http2 => h2(st.conn).carrierAbort(st),
    }
}

pub fn carrierAccept(st: *Stream, subprotocol: ?[]const u8, extension: ?[]const u8, headers: []const [2][]const u8, extra: []const [2][]const u8) websocket.AcceptError!void {
    switch (st.protocol) {
        .http1, .http3 => unreachable,
        .http2 => try h2(st.conn).carrierAccept(st, subprotocol, extension, headers, extra),
    }
}

// ---- tests: the WebSocket hand-over reads a parsed HTTP/1.1 head ----------------------

const testing = std.testing;
const ws_rfc_key = "dGhlIHNhbXBsZSBub25jZQ==";

fn handshake(raw: []const u8, offer_deflate: bool) ws_codec.HandshakeError!ws_codec.Handshake {
    var storage: [32]http_fields.Header = undefined;
    var buf: [1024]u8 = undefined;
    @memcpy(buf[0..raw.len], raw);
    const head = (h1_parser.parseHead(buf[0..raw.len], &storage, h1_parser.test_limits) catch unreachable).?;
    return ws_codec.validate(handshakeRequest(&head.request), offer_deflate);
}

test "WebSocket opening handshake: validation of a parsed HTTP/1.1 head" {
    const ok = "GET /chat HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " ++ ws_rfc_key ++ "\r\nSec-WebSocket-Version: 13\r\n\r\n";
    const hs = try handshake(ok, true);
    try testing.expectEqualStrings("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", &hs.accept);
    try testing.expect(hs.deflate == null);
    try testing.expectError(error.VersionNotSupported, handshake("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: " ++ ws_rfc_key ++ "\r\nSec-WebSocket-Version: 8\r\n\r\n", false));
    try testing.expectError(error.VersionNotSupported, handshake("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: " ++ ws_rfc_key ++ "\r\n\r\n", false));
    try testing.expectError(error.BadRequest, handshake("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n", false));
    try testing.expectError(error.BadRequest, handshake("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: abc\r\nSec-WebSocket-Version: 13\r\n\r\n", false));
    try testing.expectError(error.BadRequest, handshake("POST / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: " ++ ws_rfc_key ++ "\r\nSec-WebSocket-Version: 13\r\n\r\n", false));
    try testing.expectError(error.BadRequest, handshake("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: " ++ ws_rfc_key ++ "\r\nSec-WebSocket-Key: " ++ ws_rfc_key ++ "\r\nSec-WebSocket-Version: 13\r\n\r\n", false));
}

test "WebSocket opening handshake: the upgrade needs both Connection and Upgrade tokens" {
    var storage: [8]http_fields.Header = undefined;
    var buf = "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\n\r\n".*;
    const r = (try h1_parser.parseHead(&buf, &storage, h1_parser.test_limits)).?;
    try testing.expect(asksWebSocket(&r.request));
    var buf2 = "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n".*;
    const r2 = (try h1_parser.parseHead(&buf2, &storage, h1_parser.test_limits)).?;
    try testing.expect(!asksWebSocket(&r2.request));
    var buf3 = "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n".*;
    const r3 = (try h1_parser.parseHead(&buf3, &storage, h1_parser.test_limits)).?;
    try testing.expect(!asksWebSocket(&r3.request));
}
