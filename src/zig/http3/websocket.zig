//! WebSocket over HTTP/3 (RFC 9220): an extended CONNECT with `:protocol websocket` opens
//! a session (`websocket/session.zig`, the one HTTP/1.1 and HTTP/2 use) carried by the
//! request stream, whose DATA frames hold the WebSocket frames both ways. This file is
//! what that session asks of the stream (`core/protocol.zig` `CarrierVerbs`), as
//! `http2/websocket.zig` answers it for HTTP/2.
//!
//! Bounds: the frames not parsed yet wait in the stream's `body` (at most
//! `server_stream.body_buffer_max` bytes, then the stream is not read and QUIC's flow
//! control holds the client: frames sent before the 200 wait there too); the frames for
//! the client wait in its `out`, and the app's send waits past
//! `seam.websocket_out_bytes_high` of them. Pings are the session's own (its timer), as
//! over HTTP/2.
const std = @import("std");
// RFC 9220: a WebSocket on a stream, through the seam's hand-over verbs.
const seam = @import("../core/protocol.zig");
const Stream = @import("../core/stream.zig").Stream;
const http_fields = @import("../http/fields.zig");
const response = @import("../http/response.zig");
const server_stream = @import("server_stream.zig");
const H3Stream = server_stream.H3Stream;

/// Fields of a 200 to an extended CONNECT: ours, then the app's.
const accept_fields_max = 128;

/// An extended CONNECT (`protocol` is its `:protocol`): null when a WebSocket session
/// now waits for the app's accept on `h`; else the status it is refused with.
pub fn open(h: *H3Stream, protocol: []const u8, fields: []const http_fields.Header) ?u16 {
    if (seam.webSocketConnectRefusal(protocol, fields)) |status| return status;
    h.ws = seam.openWebSocket(&h.base, fields) orelse return 500;
    return null;
}

/// DATA on a WebSocket's stream: its frames, parsed once the app accepted.
pub fn onData(h: *H3Stream, w: seam.WebSocketHeld, bytes: []const u8, fin: bool) void {
    const st = &h.base;
    // The app let go (our close went out, or it never accepted): nobody reads them.
    if (!h.held) return;
    if (bytes.len > 0) {
        h.body.appendSlice(h.gpa(), bytes) catch return server_stream.abortStream(st);
        st.body_received += bytes.len;
        if (unparsed(h) >= server_stream.body_buffer_max) h.qc.session.pauseReading(h.id);
    }
    if (seam.webSocketOpen(st.conn, w)) seam.webSocketProcess(st.conn, w);
    if (fin) {
        h.body_fin = true;
        st.body_done = true;
        // The client's side ended: after its frames, the session is over for the app.
        seam.webSocketWake(st.conn, w);
    }
}

fn unparsed(h: *const H3Stream) usize {
    return h.body.items.len - h.body_off;
}

pub fn sessionOf(st: *const Stream) ?seam.WebSocketHeld {
    return H3Stream.of(st).ws;
}

pub const carrier_verbs: seam.CarrierVerbs = .{
    .live = live,
    .ended = ended,
    .held = held,
    .input = input,
    .consume = consume,
    .resumeInput = resumeInput,
    .queue = queue,
    .outLen = outLen,
    .end = end,
    .abort = abort,
    .accept = accept,
};

/// Frames can still move: the stream was not reset, the connection is not over.
fn live(st: *const Stream) bool {
    return !st.reset and st.conn.state != .closed;
}

fn ended(st: *const Stream) bool {
    const h = H3Stream.of(st);
    return !live(st) or (h.body_fin and unparsed(h) == 0);
}

fn held(st: *const Stream) bool {
    return H3Stream.of(st).held;
}

fn input(st: *Stream) []u8 {
    const h = H3Stream.of(st);
    return h.body.items[h.body_off..];
}

/// `n` bytes were parsed: the rest moves to the front once it is the smaller part (each
/// byte is moved at most about once), and a paused stream is read again.
fn consume(st: *Stream, n: usize) void {
    if (n == 0) return;
    const h = H3Stream.of(st);
    std.debug.assert(n <= unparsed(h));
    h.body_off += n;
    const rest = unparsed(h);
    if (rest == 0) {
        h.body.clearRetainingCapacity();
        h.body_off = 0;
    } else if (rest <= h.body_off) {
        std.mem.copyForwards(u8, h.body.items[0..rest], h.body.items[h.body_off..]);
        h.body.shrinkRetainingCapacity(rest);
        h.body_off = 0;
    }
    if (rest < server_stream.body_buffer_max and !st.reset) h.qc.session.resumeReading(h.id);
}

/// Parsed now: HTTP/3 has no pass of its own over its streams (the session is called from
/// the app's receive or from the transport's writable event, never from inside itself).
fn resumeInput(st: *Stream) void {
    const h = H3Stream.of(st);
    const w = h.ws orelse return;
    if (unparsed(h) > 0 and seam.webSocketOpen(st.conn, w)) seam.webSocketProcess(st.conn, w);
}

fn queue(st: *Stream, head: []const u8, payload: []const u8) error{OutOfMemory}!void {
    const h = H3Stream.of(st);
    if (h.ended) return;
    try h.out.ensureUnusedCapacity(h.gpa(), head.len + payload.len);
    h.out.appendSliceAssumeCapacity(head);
    h.out.appendSliceAssumeCapacity(payload);
    server_stream.pushOutKept(h);
    // The app's send waits past this (`websocket/session.zig` `send`): it is woken once
    // the transport took the output down to the stream's mark.
    if (h.pending() > seam.websocket_out_bytes_high) st.write_blocked = true;
}

fn outLen(st: *const Stream) usize {
    return H3Stream.of(st).pending();
}

/// Our side ends after our close frame (RFC 9220 3, as RFC 8441 5): the FIN follows it.
fn end(st: *Stream) error{OutOfMemory}!void {
    const h = H3Stream.of(st);
    if (h.ended or h.out_fin) return;
    h.out_fin = true;
    server_stream.pushOutKept(h);
}

fn abort(st: *Stream) void {
    server_stream.abortStream(st);
}

/// The app accepted: a 200 (no FIN) with the subprotocol, the extension and the app's
/// fields, through the stream's own response head (the server's fields join them).
fn accept(
    st: *Stream,
    subprotocol: ?[]const u8,
    extension: ?[]const u8,
    headers: []const [2][]const u8,
    extra: []const [2][]const u8,
) seam.WebSocketAcceptError!void {
    if (st.resp_started) return error.NotPending;
    var list: [accept_fields_max][2][]const u8 = undefined;
    var n: usize = 0;
    if (subprotocol) |p| {
        if (p.len == 0 or !response.validValue(p)) return error.InvalidHeader;
        list[n] = .{ "sec-websocket-protocol", p };
        n += 1;
    }
    if (extension) |e| {
        list[n] = .{ "sec-websocket-extensions", e };
        n += 1;
    }
    for (headers) |f| if (seam.webSocketKeepsField(f[0], subprotocol)) {
        if (n == list.len) return error.HeadTooLarge;
        list[n] = f;
        n += 1;
    };
    server_stream.startResponse(st, 200, list[0..n], extra, false) catch |e|
        return seam.webSocketAcceptError(e);
}
