//! WebSocket over HTTP/2 (RFC 8441): what `websocket/session.zig` asks of a stream
//! that carries a WebSocket (its DATA are WebSocket frames).
const std = @import("std");
const hpack = @import("hpack.zig");
const response = @import("../http/response.zig");
const stream_mod = @import("../core/stream.zig");
const Stream = stream_mod.Stream;
const seam = @import("../core/protocol.zig"); // RFC 8441: a WebSocket on a stream, through the seam's hand-over verbs
const frames = @import("frames.zig");

const errors = @import("errors.zig");
const flow_control = @import("flow_control.zig");
const scheduler = @import("scheduler.zig");
const stream_verbs = @import("stream_verbs.zig");
const streams = @import("streams.zig");
const streamError = errors.streamError;
const creditStream = flow_control.creditStream;
const flushSoon = scheduler.flushSoon;
const pushItem = scheduler.pushItem;
const encodeResponseField = stream_verbs.encodeResponseField;
const H2Stream = streams.H2Stream;

pub fn wsSessionOf(st: *const Stream) ?seam.WebSocketHeld {
    const h: *const H2Stream = @fieldParentPtr("base", st);
    return h.ws;
}

/// Frames can still move on the stream.
pub fn wsLive(h: *const H2Stream) bool {
    return !h.base.reset and h.base.conn.state == .h2;
}

pub fn wsInput(h: *H2Stream) []u8 {
    return h.body.items[h.body_off..];
}

pub fn wsInputEmpty(h: *const H2Stream) bool {
    return h.body_off == h.body.items.len;
}

/// The WebSocket is over for the app: the stream cannot move frames, or the client's
/// side ended and every frame it sent was parsed.
pub fn wsEnded(h: *const H2Stream) bool {
    return !wsLive(h) or (h.remote_closed and wsInputEmpty(h));
}

/// The app holds the stream (it may wait on it).
pub fn wsHeld(h: *const H2Stream) bool {
    return h.held;
}

/// `n` received bytes were parsed: they leave the buffer and the window opens by as much.
pub fn wsConsume(h: *H2Stream, n: usize) void {
    if (n == 0) return;
    h.body_off += n;
    if (h.body_off == h.body.items.len) {
        h.body_off = 0;
        h.body.clearRetainingCapacity();
    }
    creditStream(h.session, h, n);
}

/// One WebSocket frame (header and payload, copied) as DATA on the stream.
pub fn wsQueue(h: *H2Stream, head: []const u8, body: []const u8) error{OutOfMemory}!void {
    const bytes = try h.session.gpa.alloc(u8, head.len + body.len);
    @memcpy(bytes[0..head.len], head);
    @memcpy(bytes[head.len..], body);
    pushItem(h, .{ .kind = .data, .end_stream = false, .owned = true, .bytes = bytes, .alloc_len = bytes.len }) catch {
        h.session.gpa.free(bytes);
        return error.OutOfMemory;
    };
}

/// Our side of the WebSocket stream ends (after our close frame).
pub fn wsEnd(h: *H2Stream) error{OutOfMemory}!void {
    if (h.end_queued) return;
    try pushItem(h, .{ .kind = .data, .end_stream = true, .owned = false, .bytes = &.{} });
    h.end_queued = true;
}

/// The WebSocket failed beyond a close frame: the stream is reset.
pub fn wsAbort(h: *H2Stream) void {
    if (h.base.reset or h.base.conn.state != .h2) return;
    streamError(h.session, h, .cancel);
}

/// The app accepted the WebSocket: a 200 HEADERS (no END_STREAM) with the subprotocol,
/// the extension and the app's headers. Frames follow as DATA.
pub fn wsAccept(
    h: *H2Stream,
    subprotocol: ?[]const u8,
    extension: ?[]const u8,
    headers: []const [2][]const u8,
    extra: []const [2][]const u8,
) seam.WebSocketAcceptError!void {
    const st = &h.base;
    if (st.resp_started) return error.NotPending;
    const srv = st.conn.server;
    var need: usize = 128;
    for (headers) |f| need += f[0].len + f[1].len + 12;
    for (extra) |f| need += f[0].len + f[1].len + 12;
    if (subprotocol) |p| need += p.len + 32;
    if (extension) |e| need += e.len + 32;
    const block = h.session.gpa.alloc(u8, need) catch return error.OutOfMemory;
    errdefer h.session.gpa.free(block);
    var n = hpack.encodeStatus(block, 200) catch return error.HeadTooLarge;
    if (srv.opts.server_header) n += hpack.encodeField(block[n..], "server", "zigcorn") catch return error.HeadTooLarge;
    if (srv.opts.date_header) {
        const line = srv.date.get();
        n += hpack.encodeField(block[n..], "date", line["date: ".len .. line.len - 2]) catch return error.HeadTooLarge;
    }
    if (subprotocol) |p| {
        if (p.len == 0 or !response.validValue(p)) return error.InvalidHeader;
        n += hpack.encodeField(block[n..], "sec-websocket-protocol", p) catch return error.HeadTooLarge;
    }
    if (extension) |e| n += hpack.encodeField(block[n..], "sec-websocket-extensions", e) catch return error.HeadTooLarge;
    for (extra) |f| n += encodeResponseField(block[n..], f[0], f[1], st) catch |e| return mapStart(e);
    for (headers) |f| if (seam.webSocketKeepsField(f[0], subprotocol)) {
        n += encodeResponseField(block[n..], f[0], f[1], st) catch |e| return mapStart(e);
    };
    pushItem(h, .{ .kind = .headers, .end_stream = false, .owned = true, .bytes = block[0..n], .alloc_len = block.len }) catch return error.OutOfMemory;
    st.status = 200;
    st.resp_started = true;
    st.resp_head_sent = true;
    flushSoon(st.conn);
}

const mapStart = seam.webSocketAcceptError;
