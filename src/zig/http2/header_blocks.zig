//! HTTP/2 header blocks: HEADERS and CONTINUATION gathered, HPACK-decoded, and turned
//! into a new stream's request (or an open stream's trailers).
const std = @import("std");
const hpack = @import("hpack.zig");
const stream_mod = @import("../core/stream.zig");
const answers = @import("../features/answers.zig");
// RFC 8441: a WebSocket on a stream, through the seam's hand-over verbs
const seam = @import("../core/protocol.zig");
const frames = @import("frames.zig");
const FrameHeader = frames.FrameHeader;
const flag_end_stream = frames.flag_end_stream;
const request = @import("request.zig");
const scratch = @import("../http/scratch.zig");

const errors = @import("errors.zig");
const state = @import("state.zig");
const streams = @import("streams.zig");
const answerOps = errors.answerOps;
const connError = errors.connError;
const connErrorFor = errors.connErrorFor;
const refuseStream = errors.refuseStream;
const streamError = errors.streamError;
const streamErrorId = errors.streamErrorId;
const sendGoaway = errors.sendGoaway;
const wasResetByUs = errors.wasResetByUs;
const flushSoon = @import("scheduler.zig").flushSoon;
const Session = state.Session;
const H2Stream = streams.H2Stream;
const find = streams.find;
const newStream = streams.newStream;
const remoteEnded = streams.remoteEnded;

/// Module scratch for decoded header blocks and the request view (the GIL and the
/// single engine thread serialise every use; valid during `on_request` only).
pub var decoded_bytes: [@import("../core/server.zig").request_head_bytes_max]u8 = undefined;

pub var decoded_fields: [
    @import(
        "../core/server.zig",
    ).request_fields_max + 8
]hpack.Header = undefined;

pub fn beginHeaders(s: *Session, fh: FrameHeader) void {
    s.block.clearRetainingCapacity();
    s.block_active = true;
    s.block_stream = fh.stream;
    s.block_end_stream = fh.flags & flag_end_stream != 0;
    s.block_trailers = false;
    s.block_self_dependent = false;
    if (fh.stream <= s.last_stream_id) {
        const st = find(s, fh.stream) orelse {
            // In flight on a stream we reset and freed (RFC 9113 5.1: ignored): decoded as
            // trailers, which keeps the HPACK table in step, then dropped (`trailersDone`).
            if (!wasResetByUs(s, fh.stream)) return connError(s, .stream_closed);
            s.block_trailers = true;
            return;
        };
        if (st.remote_closed) return connError(s, .stream_closed);
        // A second HEADERS on an open stream: the request's trailers, which end it.
        s.block_trailers = true;
        return;
    }
    // `last_stream_id` only grows: a new stream's id is above every id read before it.
    std.debug.assert(fh.stream > s.last_stream_id and fh.stream & 1 == 1);
    s.last_stream_id = fh.stream;
}

pub fn headerBlockDone(s: *Session) void {
    // The block's HEADERS opened it and only its CONTINUATIONs followed (`beginFrame`).
    std.debug.assert(s.block_active and s.block_stream != 0 and s.block_stream <= s.last_stream_id);
    s.block_active = false;
    const id = s.block_stream;
    const limit = s.conn.server.opts.limits.head_bytes_max;
    scratch.claim();
    const fields = s.decoder.decode(
        s.block.items,
        decoded_bytes[0..limit],
        &decoded_fields,
    ) catch |err| {
        // The decoder's table is out of step with the client's: the connection cannot go on.
        return switch (err) {
            error.Compression => connError(s, .compression),
            error.HeaderListTooLarge => connError(s, .enhance_your_calm),
            error.OutOfMemory => connErrorFor(s, "out of memory for the HPACK dynamic table"),
        };
    };
    shrinkBlock(s);
    if (s.block_trailers) return trailersDone(s, id, fields);
    if (s.block_self_dependent) return streamErrorId(s, id, .protocol);
    if (s.goaway_sent) return; // opened after our GOAWAY: ignored (RFC 9113 6.8)
    if (s.live >= s.max_streams) return streamErrorId(s, id, .refused_stream);
    openStream(s, id, fields);
    expireIfOld(s);
}

/// `--timeout-connection`: past its age the connection takes no new stream. GOAWAY names
/// the last one read, the open ones finish (a WebSocket on one too: it is not cut), then
/// the connection closes, as after a graceful shutdown's GOAWAY.
pub fn expireIfOld(s: *Session) void {
    if (s.goaway_sent or s.dead or s.conn.state != .h2) return;
    if (!s.conn.server.connectionExpired(s.conn)) return;
    sendGoaway(s, .no_error);
    flushSoon(s.conn);
}

/// A header block buffer up to this size is kept for the next block.
const block_keep_bytes = 4096;

/// A header block buffer that grew for one large block goes back to a small one.
pub fn shrinkBlock(s: *Session) void {
    if (s.block.capacity > block_keep_bytes) {
        s.block.deinit(s.gpa);
        s.block = .{};
    } else s.block.clearRetainingCapacity();
}

pub fn trailersDone(s: *Session, id: u32, fields: []const hpack.Header) void {
    const st = find(s, id) orelse return;
    // Reset while its trailers' CONTINUATIONs came (its app aborted): ignored (5.1).
    if (st.base.reset) return;
    if (!s.block_end_stream) return streamError(s, st, .protocol);
    for (fields) |f| if (f.name.len > 0 and f.name[0] == ':') return streamError(s, st, .protocol);
    const cl = st.content_length orelse st.base.body_received;
    if (st.base.body_received != cl) return streamError(s, st, .protocol);
    // ASGI has no request trailers: they end the body and are dropped.
    remoteEnded(s, st);
    if (find(s, id)) |still| if (still.held) s.sink.wakeRead(&still.base);
}

pub fn openStream(s: *Session, id: u32, fields: []const hpack.Header) void {
    const conn = s.conn;
    const srv = conn.server;
    var head = request.RequestHead{};
    const headers = request.checkRequest(
        fields,
        &head,
        srv.headers_storage[0..srv.opts.limits.headers_count_max],
        srv.opts.ws_enabled,
    ) catch |err| switch (err) {
        error.Malformed => return streamErrorId(s, id, .protocol),
        error.TooMany, error.NoSpace => {
            const st = newStream(s, id) orelse return;
            st.remote_closed = s.block_end_stream;
            return refuseStream(s, st, 431);
        },
    };
    const st = newStream(s, id) orelse return;
    st.content_length = head.content_length;
    st.base.te_trailers = head.te_trailers;
    st.base.is_head_method = std.mem.eql(u8, head.method.?, "HEAD");
    st.base.body_done = false;
    if (s.block_end_stream) {
        if (head.content_length) |cl| if (cl != 0) return streamError(s, st, .protocol);
        st.remote_closed = true;
        st.base.body_done = true;
    }
    if (head.content_length orelse 0 > srv.opts.body_bytes_max) return refuseStream(s, st, 413);
    if (head.protocol) |protocol| {
        // RFC 8441: a WebSocket on this stream.
        if (seam.webSocketConnectRefusal(protocol, headers)) |status|
            return refuseStream(s, st, status);
        st.ws = seam.openWebSocket(&st.base, headers) orelse return refuseStream(s, st, 500);
    }
    const full = head.path.?;
    const q = std.mem.indexOfScalar(u8, full, '?');
    var view = stream_mod.Request{
        .method = head.method.?,
        .path = if (q) |i| full[0..i] else full,
        .query = if (q) |i| full[i + 1 ..] else "",
        .authority = head.authority orelse head.host,
        .scheme = head.scheme,
        .headers = headers,
        .version = .http2,
    };
    dispatch(s, st, &view, head.protocol == null);
}

/// A stream's request goes to the app (or is answered by the engine: `ops` lets a health
/// or metrics path be one).
pub fn dispatch(s: *Session, st: *H2Stream, view: *stream_mod.Request, ops: bool) void {
    const conn = s.conn;
    const srv = conn.server;
    conn.requests_count +|= 1;
    if (st.base.prepare(view)) |wait| return answerOps(s, st, answers.tooManyRequests(wait));
    // Not ready yet: an extended CONNECT (a WebSocket) gets the 503 too.
    if (ops or !srv.ready) {
        if (answers.opsAnswer(srv, view.method, view.path)) |a| return answerOps(s, st, a);
    }
    // Contract: a stream goes to its app once; `held` counts the streams apps hold.
    std.debug.assert(!st.held and !st.base.reset);
    st.held = true;
    s.held += 1;
    std.debug.assert(s.held <= s.live);
    srv.streamStarted();
    if (!srv.hooks.onRequest(&st.base, view)) {
        st.held = false;
        s.held -= 1;
        st.base.handle = null;
        srv.streamFinished();
        return refuseStream(s, st, 500);
    }
}
