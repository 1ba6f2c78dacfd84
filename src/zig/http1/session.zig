//! HTTP/1.1 as a protocol over a connection: request heads in, one stream at a time,
//! response heads and body framing out, keep-alive between exchanges.
//!
//! Requests on one connection are served strictly one after another, so pipelined
//! requests are answered in order; the bytes of the next one wait in the read buffer
//! until the current response is written. The parser is `http/http1_parser.zig` (sans-IO); the
//! transport is `core/connection.zig`; the stream (`core/stream.zig`) is what the app side drives.
const std = @import("std");
const answers = @import("../features/answers.zig");
const OpsAnswer = answers.OpsAnswer;
const opsAnswer = answers.opsAnswer;
const tooManyRequests = answers.tooManyRequests;
const trailerAllowed = answers.trailerAllowed;
const http_fields = @import("../http/fields.zig");
const sys = @import("../os/sys.zig");
const http1 = @import("../http/http1_parser.zig");
const response = @import("../http/response.zig");
const outq = @import("../transport/output_queue.zig");
const conn_mod = @import("../core/connection.zig");
const Conn = conn_mod.Conn;
const stream_mod = @import("../core/stream.zig");
const Stream = stream_mod.Stream;
const Server = @import("../core/server.zig").Server;
const seam = @import("../core/protocol.zig"); // the hand-overs: HTTP/2 (preface, h2c upgrade) and WebSocket begin as HTTP/1.1
const scratch = @import("../http/scratch.zig");

/// Response heads past a pooled buffer move to the heap, up to this size.
const response_head_bytes_max = 1024 * 1024;
/// Copied output (heads, framing, small bodies) grows to at most this; larger bodies are borrowed.
const copied_bytes_max = response_head_bytes_max + 64 * 1024;
/// Bodies up to this size are copied next to the head (one write); larger ones are borrowed.
const copy_body_bytes_max = 4096;
/// An unread request body up to this size is skipped to keep the connection; past it we close.
const discard_bytes_max = 1024 * 1024;
/// Scratch for engine-made answers (health, metrics): used and copied out within one call.
var ops_head_scratch: [512]u8 = undefined;

/// What HTTP/1.1 keeps on a busy connection: `protocol.Session.http1`, in its `Active`.
pub const ConnState = seam.Http1State;

/// What the seam calls HTTP/1.1 by (`core/protocol.zig` `Http1Verbs`): the server's
/// wiring hands this table to the server, so the core never imports this file.
pub const verbs: seam.Http1Verbs = .{
    .process = process,
    .timedOut = timedOut,
    .afterFlush = afterFlush,
    .wholeResponseQueued = wholeResponseQueued,
    .refuse = refuse,
    .wsSession = wsSessionOf,
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
    .readBodyDirect = readBodyDirect,
    .sendFile = sendFile,
};

/// The connection's HTTP/1.1 state (its phase is `.head`, `.request` or `.websocket`).
pub fn stateOf(conn: *const Conn) *ConnState {
    return &conn.a().proto.http1;
}

fn streamOf(conn: *Conn) *Stream {
    return &stateOf(conn).stream;
}

/// The WebSocket session upgraded from this connection's request, if any.
pub fn wsSessionOf(conn: *const Conn) ?seam.WebSocketHeld {
    const act = conn.act orelse return null;
    return switch (act.proto) {
        .http1 => |*s| s.ws,
        else => null,
    };
}

/// Whether the queued output is one whole HTTP/1.1 response, neither an engine refusal
/// nor a WebSocket handshake (`protocol.wholeResponseQueued`).
pub fn wholeResponseQueued(conn: *const Conn) bool {
    const s = stateOf(conn);
    return s.stream.resp_complete and !s.stream.refused and s.ws == null;
}

/// Whether the stream's writer must wait: too many of its bytes are queued, or the
/// connection's queue could not take another message.
pub fn mustWait(st: *const Stream) bool {
    return st.out.queued > stream_mod.queued_bytes_high or st.conn.a().out.segmentsFree() < stream_mod.segments_per_write;
}

/// The connection's stream, reset for a new exchange. Its last one's output is written.
fn freshStream(conn: *Conn) *Stream {
    const st = streamOf(conn);
    std.debug.assert(st.out.queued == 0 and conn.a().stream == null);
    st.* = Stream.init(conn, .http1);
    return st;
}

/// Acts on whatever is buffered: parse a head, or tell the stream body bytes arrived.
pub fn process(conn: *Conn) void {
    switch (conn.state) {
        .head => if (conn.act != null) parseHead(conn),
        .request => {
            const act = conn.a();
            const st = streamOf(conn);
            // The stream may already be finished while its last response is still flushing.
            if (!st.body_done) if (act.stream) |s| conn.server.hooks.wakeRead(s);
            if (act.rlen == @import("../os/buffer_pool.zig").buffer_bytes and act.rstart == 0) conn.setReading(false);
        },
        else => unreachable,
    }
}

fn parseHead(conn: *Conn) void {
    const act = conn.a();
    const h1s = stateOf(conn);
    if (h1s.discarding) {
        discardBody(conn);
        if (h1s.discarding) return;
    }
    const buf = act.rbuf orelse return;
    if (act.rstart == act.rlen) return;
    const srv = conn.server;
    const data = buf[act.rstart..act.rlen];
    if (conn.requests_count == 0 and srv.opts.http2) switch (seam.http2Preface(conn, data)) {
        // HTTP/2 with prior knowledge (h2c), or after ALPN chose h2.
        .yes => {
            act.rstart += seam.http2_preface_len;
            return seam.startHttp2(conn);
        },
        .partial => {
            if (!conn.timer.in(&srv.header_timeouts)) srv.header_timeouts.arm(&conn.timer, srv.now_ms);
            return;
        },
        // ALPN chose h2 (or it began like the preface): nothing else may follow.
        .no => if (mustBeHttp2(conn, data)) return conn.close(),
    };
    const parsed = http1.parseHead(data, &srv.headers_storage, srv.opts.limits) catch |err| {
        _ = freshStream(conn);
        return refuse(conn, http1.statusFor(err));
    };
    const head = parsed orelse {
        // Incomplete: the head must arrive within the header timeout, counted from its first byte.
        if (!conn.timer.in(&srv.header_timeouts)) srv.header_timeouts.arm(&conn.timer, srv.now_ms);
        if (act.rstart > 0) conn.compact();
        return;
    };
    conn.timer.disarm();
    if (h2cSettings(conn, &head.request)) |settings| {
        act.rstart += @intCast(head.len);
        // h2c upgrade (RFC 7540 3.2), a hand-over through the seam: the request becomes HTTP/2's stream 1.
        return seam.upgradeToHttp2(conn, &head.request, settings);
    }
    const st = beginRequest(conn, &head.request);
    act.rstart += @intCast(head.len);
    if (head.request.content_length orelse 0 > srv.opts.body_bytes_max) {
        // Refused before any app sees it, and before a 100-continue invites the body.
        return refuse(conn, 413);
    }
    if (srv.opts.ws_enabled and seam.asksWebSocket(conn, &head.request)) {
        if (!beginUpgrade(conn, &head.request)) return;
    }
    conn.state = .request;
    conn.requests_count += 1;
    var view = stream_mod.Request.fromHttp1(&head.request);
    const limited = st.prepare(&view);
    const engine_answer = if (limited) |wait| tooManyRequests(wait) else opsAnswer(srv, head.request.method, head.request.path);
    if (engine_answer) |a| {
        if (answerOps(conn, a)) return;
    }
    act.stream = st;
    srv.streamStarted();
    if (!srv.hooks.onRequest(st, &view)) {
        // The seam could not take the request (out of memory, app dispatch failed).
        act.stream = null;
        st.handle = null;
        srv.streamFinished();
        conn.state = .head;
        return refuse(conn, 500);
    }
}

/// The largest HTTP2-Settings payload taken: one of each setting the protocol defines, twice.
const h2c_settings_bytes_max = 6 * 16;
var h2c_settings_scratch: [h2c_settings_bytes_max]u8 = undefined;

/// The decoded HTTP2-Settings of a request that may upgrade to h2c (RFC 7540 3.2), or
/// null to serve it as HTTP/1.1: HTTP/2 and `--h2c-upgrade` on, a plain connection,
/// `Upgrade: h2c` with `Connection: Upgrade, HTTP2-Settings`, exactly one HTTP2-Settings
/// field holding base64url settings, and no request body (a body would have to be read
/// before the switch: such requests are answered over HTTP/1.1, as most servers do).
/// Without `--h2c-upgrade` the Upgrade is ignored, as RFC 9110 7.8 lets a server do, and
/// HTTP2-Settings is just a header: a proxy that forwards the Upgrade and tunnels after a
/// 101 would no longer see (deny, log) the HTTP/2 requests that follow.
///
/// Even with it, never through a proxy that shows itself: `Upgrade` is hop-by-hop, and a
/// front end that passes it on (HAProxy does) and then tunnels the `101` would let the
/// client speak HTTP/2 to us past every rule it applies per request ("h2c smuggling";
/// RFC 9113 3.1 deprecated the upgrade). A request that names a proxy hop, or a
/// connection that began with a PROXY header, is served over HTTP/1.1; h2c with prior
/// knowledge is unaffected (a proxy speaks it or refuses it).
fn h2cSettings(conn: *Conn, req: *const http1.Request) ?[]const u8 {
    const opts = &conn.server.opts;
    if (!opts.http2 or !opts.h2c_upgrade or conn.session() != null or req.version != .http11) return null;
    const upgrade = req.upgrade orelse return null;
    if (!http_fields.connectionHas(upgrade, "h2c")) return null;
    if (conn.server.opts.proxy_protocol or viaProxy(req.headers)) return null;
    if (req.chunked or (req.content_length orelse 0) != 0) return null;
    var encoded: ?[]const u8 = null;
    var connection_lists_it = false;
    for (req.headers) |f| {
        if (std.mem.eql(u8, f.name, "http2-settings")) {
            if (encoded != null) return null;
            encoded = f.value;
        } else if (std.mem.eql(u8, f.name, "connection") and http_fields.connectionHas(f.value, "http2-settings")) {
            connection_lists_it = true;
        }
    }
    if (!connection_lists_it) return null;
    return decodeH2cSettings(encoded orelse return null);
}

/// Whether a request's fields show that a proxy forwarded it: `Via` (RFC 9110 7.6.3),
/// `Forwarded` (RFC 7239) or the de facto `X-Forwarded-*` and `X-Real-IP`.
fn viaProxy(headers: []const http1.Header) bool {
    for (headers) |f| {
        if (std.mem.eql(u8, f.name, "via") or std.mem.eql(u8, f.name, "forwarded") or
            std.mem.startsWith(u8, f.name, "x-forwarded-") or std.mem.eql(u8, f.name, "x-real-ip")) return true;
    }
    return false;
}

/// base64url (padding tolerated) to a whole number of 6-byte settings, or null.
fn decodeH2cSettings(encoded_in: []const u8) ?[]const u8 {
    const encoded = std.mem.trimRight(u8, encoded_in, "=");
    const codec = std.base64.url_safe_no_pad.Decoder;
    const n = codec.calcSizeForSlice(encoded) catch return null;
    if (n > h2c_settings_bytes_max or n % 6 != 0) return null;
    scratch.claim();
    codec.decode(h2c_settings_scratch[0..n], encoded) catch return null;
    return h2c_settings_scratch[0..n];
}

/// Whether a connection's first bytes, not the HTTP/2 preface, end it: after ALPN
/// agreed on h2, or when they begin as the preface does ("PRI ").
fn mustBeHttp2(conn: *Conn, data: []const u8) bool {
    if (std.mem.startsWith(u8, data, "PRI ")) return true;
    const ssl = conn.session() orelse return false;
    return std.mem.eql(u8, @import("../transport/openssl.zig").alpnSelected(ssl), "h2");
}

/// A WebSocket upgrade: checked here; the app then accepts or denies it. False
/// when the engine refused it (400/426).
fn beginUpgrade(conn: *Conn, req: *const http1.Request) bool {
    if (seam.upgradeToWebSocket(conn, req)) |status| {
        refuse(conn, status);
        return false;
    }
    // Whatever the app answers over HTTP (denial, 403, 500) ends the connection.
    streamOf(conn).keep_alive = false;
    return true;
}

/// The connection's stream starts a new exchange for this request.
fn beginRequest(conn: *Conn, req: *const http1.Request) *Stream {
    const st = freshStream(conn);
    st.keep_alive = req.keep_alive;
    st.http10 = req.version == .http10;
    // (Lengths first: each `mem.eql` is a call.)
    st.is_head_method = req.method.len == 4 and std.mem.eql(u8, req.method, "HEAD");
    st.expect_continue = req.expect_continue;
    for (req.headers) |field| {
        if (field.name.len == 2 and std.mem.eql(u8, field.name, "te") and http_fields.connectionHas(field.value, "trailers")) st.te_trailers = true;
    }
    if (req.chunked) {
        st.body_kind = .chunked;
        st.body_done = false;
    } else if (req.content_length) |n| {
        st.body_kind = .length;
        st.body_remaining = n;
        st.body_done = n == 0;
    }
    return st;
}

/// Health and metrics paths are answered here, without the app, on a keep-alive
/// connection like any response.
fn answerOps(conn: *Conn, a: OpsAnswer) bool {
    const srv = conn.server;
    const st = streamOf(conn);
    if (st.http10 or srv.draining or srv.connectionExpired(conn)) st.keep_alive = false;
    scratch.claim();
    var w = response.HeadWriter{ .buf = &ops_head_scratch };
    writeOpsHead(conn, &w, a, st.keep_alive) catch return false;
    st.status = a.status;
    st.resp_started = true;
    st.resp_head_sent = true;
    st.resp_complete = true;
    st.resp_close_after = !st.keep_alive;
    conn.queueCopy(w.written(), &st.out, copied_bytes_max) catch {
        conn.closeFor("out of memory for an engine-made response");
        return true;
    };
    if (!a.head_only and !st.is_head_method) conn.queueCopy(a.body, &st.out, copied_bytes_max) catch {
        conn.closeFor("out of memory for an engine-made response");
        return true;
    };
    observe(conn, a.status);
    conn.flush();
    return true;
}

fn writeOpsHead(conn: *Conn, w: *response.HeadWriter, a: OpsAnswer, keep_alive: bool) error{NoSpace}!void {
    try w.statusLine(a.status);
    if (conn.server.opts.server_header) try w.append("server: zigcorn\r\n");
    if (conn.server.opts.date_header) try w.append(conn.server.date.get());
    try w.header("content-type", a.content_type);
    try w.header("cache-control", "no-store");
    if (a.retry_after != 0) {
        var buf: [10]u8 = undefined;
        try w.header("retry-after", std.fmt.bufPrint(&buf, "{d}", .{a.retry_after}) catch unreachable);
    }
    try w.contentLength(a.body.len);
    if (!keep_alive) try w.append("connection: close\r\n");
    try w.append("\r\n");
}

/// One finished request for the metrics: its status class and duration.
fn observe(conn: *Conn, status: u16) void {
    const m = conn.server.metrics orelse return;
    const st = streamOf(conn);
    const now = sys.monotonicUs();
    m.observe(st.method_class, status, if (st.started_us != 0 and now > st.started_us) now - st.started_us else 0, st.resp_body_bytes);
    st.started_us = 0;
}

/// Answers a request the engine itself refuses, then closes.
pub fn refuse(conn: *Conn, status: u16) void {
    const act = conn.a();
    const st = streamOf(conn);
    observe(conn, status);
    st.refused = true;
    st.keep_alive = false;
    st.resp_close_after = true;
    st.resp_complete = true;
    st.status = status;
    // Bytes after a refused head are never parsed.
    act.rstart = act.rlen;
    conn.queueCopy(response.errorResponse(status), &st.out, copied_bytes_max) catch {
        return conn.closeFor("out of memory for an error response");
    };
    conn.flush();
}

// ---- the stream's verbs ------------------------------------------------------------

/// Collects available body bytes as slices into the read buffer (valid until
/// `bodyConsumed`). Also sends `100 Continue` the first time the app asks for a body.
pub fn takeBody(st: *Stream, segs: [][]const u8) stream_mod.TakeResult {
    const conn = st.conn;
    var r = stream_mod.TakeResult{ .count = 0, .done = st.body_done, .failed = false };
    if (st.body_done or conn.state == .closed) return r;
    const act = conn.a();
    if (st.expect_continue) {
        st.expect_continue = false;
        if (!st.resp_started) {
            conn.queueCopy("HTTP/1.1 100 Continue\r\n\r\n", &st.out, copied_bytes_max) catch {
                r.failed = true;
                conn.closeFor("out of memory for 100 Continue");
                return r;
            };
            conn.flush();
            if (conn.state == .closed) return r;
        }
    }
    const buf = act.rbuf orelse return r;
    while (r.count < segs.len and !st.body_done) {
        const avail = buf[act.rstart..act.rlen];
        if (avail.len == 0) break;
        switch (st.body_kind) {
            .length => {
                const n: usize = @intCast(@min(st.body_remaining, avail.len));
                segs[r.count] = avail[0..n];
                r.count += 1;
                act.rstart += @intCast(n);
                st.body_remaining -= n;
                st.body_done = st.body_remaining == 0;
            },
            .chunked => {
                const step = st.chunked.decode(avail, conn.server.opts.limits) catch |err| {
                    r.failed = true;
                    st.body_done = true;
                    if (!st.resp_started) refuse(conn, http1.statusFor(err)) else conn.close();
                    break;
                };
                act.rstart += @intCast(step.consumed);
                if (step.data.len > 0) {
                    segs[r.count] = step.data;
                    r.count += 1;
                    st.body_received += step.data.len;
                    if (st.body_received > conn.server.opts.body_bytes_max) {
                        r.failed = true;
                        st.body_done = true;
                        if (!st.resp_started) refuse(conn, 413) else conn.close();
                        break;
                    }
                }
                if (step.done) st.body_done = true;
                if (step.consumed == 0) break;
            },
            .none => st.body_done = true,
        }
    }
    r.done = st.body_done;
    return r;
}

/// The app waits for body bytes that have not arrived: they must come in time.
/// Request body bytes read from the socket straight into `dst` (the caller's memory, no
/// pass through the pooled read buffer), when nothing is buffered and the body has a
/// Content-Length, on a plain socket with the epoll backend; 0 otherwise, or when the
/// socket has nothing now (the usual path then reads it, and sees an end or an error).
pub fn readBodyDirect(st: *Stream, dst: []u8) usize {
    const conn = st.conn;
    if (conn.state != .request or st.body_done or st.body_kind != .length or st.expect_continue) return 0;
    if (conn.session() != null or conn.server.io.kind() != .epoll) return 0;
    const act = conn.a();
    if (act.rstart != act.rlen) return 0;
    const want: usize = @intCast(@min(st.body_remaining, dst.len));
    if (want == 0) return 0;
    switch (sys.read(conn.fd, dst[0..want])) {
        .ok => |n| {
            st.body_remaining -= n;
            st.body_done = st.body_remaining == 0;
            conn.server.bytes_in += n;
            if (conn.server.metrics) |m| m.received_bytes += n;
            return n;
        },
        .err => return 0,
    }
}

pub fn awaitBody(st: *Stream) void {
    const conn = st.conn;
    if (conn.state != .request or st.body_done) return;
    conn.server.body_timeouts.arm(&conn.timer, conn.server.now_ms);
}

/// A deadline of the head or request phase passed.
pub fn timedOut(conn: *Conn) void {
    switch (conn.state) {
        .head => {
            // A client that sent part of a head is told why; a silent one just goes.
            if (conn.act) |act| if (act.rlen > act.rstart) {
                _ = freshStream(conn);
                return refuse(conn, 408);
            };
            return conn.close();
        },
        .request => {
            const act = conn.a();
            const st = streamOf(conn);
            if (st.body_done or st.resp_started) return conn.close();
            refuse(conn, 408);
            if (act.stream) |s| conn.server.hooks.wakeRead(s);
        },
        else => unreachable,
    }
}

/// The stream copied the slices from `takeBody`: make room for more.
pub fn bodyConsumed(st: *Stream) void {
    const conn = st.conn;
    if (conn.state == .closed) return;
    const act = conn.a();
    if (conn.timer.in(&conn.server.body_timeouts)) conn.timer.disarm();
    if (act.rstart == act.rlen) {
        act.rstart = 0;
        act.rlen = 0;
    }
    if (!conn.interest.readable) conn.setReading(true);
}

/// Serialises the response head into the output, staged: nothing is queued yet, the
/// head leaves together with the first body bytes, once their framing is known.
pub fn startResponse(st: *Stream, status: u16, headers: []const [2][]const u8, extra: []const [2][]const u8, trailers: bool) stream_mod.StartError!void {
    const conn = st.conn;
    if (st.resp_started) return error.AlreadyStarted;
    st.resp_trailers = trailers;
    if (st.gone()) {
        st.resp_started = true;
        return;
    }
    st.status = status;
    st.resp_no_body = response.statusHasNoBody(status) or st.is_head_method;
    var space = conn.stageOut(512, copied_bytes_max) catch return error.OutOfMemory;
    var w = response.HeadWriter{ .buf = space };
    writeHead(st, &w, status, headers, extra) catch |err| {
        if (err != error.NoSpace) return error.InvalidHeader;
        // A head larger than a pooled buffer: the output grows on the heap for it.
        var need: usize = 1024;
        for (headers) |h| need += h[0].len + h[1].len + 4;
        for (extra) |h| need += h[0].len + h[1].len + 4;
        if (need > response_head_bytes_max) return error.HeadTooLarge;
        space = conn.stageOut(need, copied_bytes_max) catch return error.OutOfMemory;
        w = .{ .buf = space };
        st.resp_length = null;
        writeHead(st, &w, status, headers, extra) catch |e2| {
            return if (e2 == error.NoSpace) error.HeadTooLarge else error.InvalidHeader;
        };
    };
    conn.a().out.addStaged(w.len);
    st.resp_started = true;
}

fn writeHead(st: *Stream, w: *response.HeadWriter, status: u16, headers: []const [2][]const u8, extra: []const [2][]const u8) !void {
    try w.statusLine(status);
    const srv = st.conn.server;
    if (srv.opts.server_header) try w.append("server: zigcorn\r\n");
    if (srv.opts.date_header) try w.append(srv.date.get());
    for (extra) |h| try w.header(h[0], h[1]);
    for (headers) |h| {
        if (!response.validName(h[0]) or !response.validValue(h[1])) return error.InvalidHeader;
        // (The name is valid, so `nameIs` is a case-insensitive comparison.)
        if (response.nameIs(h[0], "content-length")) {
            if (st.resp_length != null) return error.InvalidHeader;
            st.resp_length = plainDecimal(h[1]) orelse
                std.fmt.parseInt(u64, std.mem.trim(u8, h[1], " \t"), 10) catch return error.InvalidHeader;
        } else if (h[0].len == "transfer-encoding".len and std.ascii.eqlIgnoreCase(h[0], "transfer-encoding")) {
            // The engine frames the body itself; the app's claim is dropped.
            continue;
        } else if (response.nameIs(h[0], "connection")) {
            if (http_fields.connectionHas(h[1], "close")) st.keep_alive = false;
            continue;
        }
        try w.header(h[0], h[1]);
    }
}

/// 1 to 19 plain digits (always within u64), the usual content-length; null for anything
/// else, which `std.fmt.parseInt` then decides as before.
fn plainDecimal(text: []const u8) ?u64 {
    if (text.len == 0 or text.len > 19) return null;
    var n: u64 = 0;
    for (text) |ch| {
        if (ch < '0' or ch > '9') return null;
        n = n * 10 + (ch - '0');
    }
    return n;
}

/// Chooses the framing once the first body message shows whether it is the only one,
/// ends the staged head, and queues it.
fn finishHead(st: *Stream, first_body_len: usize, more: bool) outq.Error!void {
    const conn = st.conn;
    // Room for the framing header, `connection` and the blank line.
    const space = try conn.stageOut(96, copied_bytes_max);
    var w = response.HeadWriter{ .buf = space };
    finishFraming(st, &w, first_body_len, more) catch return error.OutOfMemory;
    const out = &conn.a().out;
    out.addStaged(w.len);
    try out.commitStaged(&st.out);
    st.resp_head_sent = true;
}

fn finishFraming(st: *Stream, w: *response.HeadWriter, first_body_len: usize, more: bool) error{NoSpace}!void {
    const srv = st.conn.server;
    if (st.resp_length != null) {
        // The app's own content-length is already in the head.
    } else if (st.resp_no_body) {
        // 1xx/204/304/HEAD: no framing header is invented (HEAD keeps the app's).
    } else if (!more and !st.resp_trailers) {
        st.resp_length = first_body_len;
        try w.contentLength(first_body_len);
    } else if (!st.http10) {
        // Streamed, or trailers will follow the body: only chunked framing can carry them.
        st.resp_chunked = true;
        try w.append("transfer-encoding: chunked\r\n");
    } else {
        // HTTP/1.0 without a length: the end of the body is the end of the connection.
        st.keep_alive = false;
    }
    // The Nth request, or a connection past --timeout-connection: this response is its last.
    if (st.conn.requests_count >= srv.opts.keep_alive_requests_max or srv.connectionExpired(st.conn)) st.keep_alive = false;
    if (!st.keep_alive or srv.draining) {
        st.keep_alive = false;
        try w.append("connection: close\r\n");
    } else if (st.http10) {
        try w.append("connection: keep-alive\r\n");
    }
    try w.append("\r\n");
}

/// Queues one body message (with its chunked framing) and tries to write it at once.
/// True when the caller must wait for `wakeWrite` before the next write.
pub fn writeBody(st: *Stream, data: []const u8, more: bool, owner: ?*anyopaque) stream_mod.WriteError!bool {
    const conn = st.conn;
    if (!st.resp_started) return error.NotStarted;
    if (st.resp_complete or st.resp_body_done) return error.AlreadyComplete;
    if (st.gone()) {
        if (!more) {
            st.resp_body_done = true;
            if (!st.resp_trailers) st.resp_complete = true;
        }
        return false;
    }
    // A writer that ignored the last wait: three segments (size line, body, CRLF) must fit.
    if (conn.a().out.segmentsFree() < stream_mod.segments_per_write) return error.Busy;
    if (!st.resp_head_sent) finishHead(st, data.len, more) catch return error.OutOfMemory;
    var body = data;
    if (st.resp_no_body) body = &.{};
    if (st.resp_length) |n| {
        if (st.resp_body_bytes + body.len > n and !st.resp_no_body) return error.TooMuchBody;
        if (!more and st.resp_body_bytes + body.len < n and !st.resp_no_body) return error.TooLittleBody;
    }
    st.resp_body_bytes += body.len;
    queueBody(st, body, more, owner) catch return error.OutOfMemory;
    if (!more) {
        st.resp_body_done = true;
        // With trailers declared, the response ends with the last trailers message.
        if (!st.resp_trailers) st.resp_complete = true;
    }
    conn.flush();
    if (conn.state == .closed) return false;
    const wait = stream_mod.mustWait(st);
    st.write_blocked = wait;
    return wait;
}

fn queueBody(st: *Stream, body: []const u8, more: bool, owner: ?*anyopaque) outq.Error!void {
    const conn = st.conn;
    if (st.resp_chunked and body.len > 0) {
        var tmp: [20]u8 = undefined;
        const line = std.fmt.bufPrint(&tmp, "{x}\r\n", .{body.len}) catch unreachable;
        try conn.queueCopy(line, &st.out, copied_bytes_max);
    }
    if (body.len <= copy_body_bytes_max) {
        try conn.queueCopy(body, &st.out, copied_bytes_max);
    } else {
        try conn.queueBorrowed(body, owner, &st.out);
    }
    if (st.resp_chunked) {
        if (body.len > 0) try conn.queueCopy("\r\n", &st.out, copied_bytes_max);
        // With trailers declared the last chunk comes with them (`writeTrailers`).
        if (!more and !st.resp_trailers) try conn.queueCopy("0\r\n\r\n", &st.out, copied_bytes_max);
    }
}

/// `http.response.pathsend`: the file at `path` is the whole body. Its length is the
/// response's content-length (the app's, which the file must not fall short of, or
/// the file's size); the engine sends it after the head with sendfile(2) (read in
/// pieces and encrypted over TLS). A file that cannot be opened, or is shorter than
/// the announced length, ends the connection with one line on `zigcorn.error`.
pub fn sendFile(st: *Stream, path: [:0]const u8) stream_mod.FileError!void {
    const conn = st.conn;
    // Stream.sendFile checked the call and marked the response complete.
    const file = switch (sys.openFile(path.ptr)) {
        .ok => |f| f,
        .err => |e| {
            var why: [96]u8 = undefined;
            return fileFailed(conn, path, std.fmt.bufPrint(&why, "cannot be opened ({s}): connection closed", .{@tagName(e)}) catch "cannot be opened");
        },
    };
    const length = st.resp_length orelse file.size;
    if (length > file.size) {
        sys.close(file.fd);
        return fileFailed(conn, path, "is shorter than the response's content-length: connection closed");
    }
    finishHead(st, @intCast(length), false) catch {
        sys.close(file.fd);
        return conn.closeFor("out of memory for a response head");
    };
    st.resp_body_bytes = length;
    if (st.resp_no_body or length == 0) {
        sys.close(file.fd);
    } else {
        conn.a().file = .{ .fd = file.fd, .pos = 0, .left = length, .account = &st.out };
    }
    conn.flush();
}

/// `Stream.sendFd`: `len` bytes of the open file `fd` from `offset` follow the head
/// (its content-length), as pathsend's do. Owns `fd`.
pub fn sendFd(st: *Stream, fd: i32, offset: u64, len: u64) stream_mod.FileError!void {
    const conn = st.conn;
    finishHead(st, @intCast(len), false) catch {
        sys.close(fd);
        return conn.closeFor("out of memory for a response head");
    };
    st.resp_body_bytes = len;
    if (st.resp_no_body or len == 0) {
        sys.close(fd);
    } else {
        conn.a().file = .{ .fd = fd, .pos = offset, .left = len, .account = &st.out };
    }
    conn.flush();
}

fn fileFailed(conn: *Conn, path: []const u8, why: []const u8) void {
    var buf: [512]u8 = undefined;
    const line = std.fmt.bufPrint(&buf, "pathsend: {s} {s}", .{ path[0..@min(path.len, 300)], why }) catch "pathsend: a file could not be sent";
    conn.closeFor(line);
}

/// One `http.response.trailers` message. The fields go out in the chunked body's last
/// chunk when the client said `TE: trailers`; otherwise they are checked and dropped,
/// and the body still ends properly. Nothing is queued for a message that is refused.
pub fn writeTrailers(st: *Stream, fields: []const [2][]const u8, more: bool) stream_mod.TrailersError!bool {
    const conn = st.conn;
    if (!st.resp_trailers) return error.NotDeclared;
    if (st.resp_complete) return error.AlreadyComplete;
    if (!st.resp_body_done) return error.BodyNotDone;
    for (fields) |f| {
        if (!response.validName(f[0]) or !response.validValue(f[1])) return error.InvalidHeader;
        if (!trailerAllowed(f[0])) return error.Forbidden;
    }
    if (!more) st.resp_complete = true;
    if (st.gone() or !st.resp_chunked) return false;
    queueTrailers(st, fields, more) catch return error.OutOfMemory;
    conn.flush();
    if (conn.state == .closed) return false;
    const wait = stream_mod.mustWait(st);
    st.write_blocked = wait;
    return wait;
}

fn queueTrailers(st: *Stream, fields: []const [2][]const u8, more: bool) outq.Error!void {
    const conn = st.conn;
    // The last chunk opens the trailer section: once, before the first fields.
    if (!st.resp_trailers_opened) {
        st.resp_trailers_opened = true;
        try conn.queueCopy("0\r\n", &st.out, copied_bytes_max);
    }
    if (st.te_trailers) {
        for (fields) |f| {
            try conn.queueCopy(f[0], &st.out, copied_bytes_max);
            try conn.queueCopy(": ", &st.out, copied_bytes_max);
            try conn.queueCopy(f[1], &st.out, copied_bytes_max);
            try conn.queueCopy("\r\n", &st.out, copied_bytes_max);
        }
    }
    if (!more) try conn.queueCopy("\r\n", &st.out, copied_bytes_max);
}

/// `103 Early Hints` (RFC 8297) with a `link` field per entry. Not for HTTP/1.0 clients,
/// which do not expect interim responses: for them it is silently skipped.
pub fn earlyHint(st: *Stream, links: []const []const u8) stream_mod.StartError!void {
    const conn = st.conn;
    if (st.resp_started) return error.AlreadyStarted;
    for (links) |l| if (!response.validValue(l)) return error.InvalidHeader;
    if (st.gone() or st.http10) return;
    var need: usize = 64;
    for (links) |l| need += l.len + 8;
    if (need > response_head_bytes_max) return error.HeadTooLarge;
    const space = conn.stageOut(need, copied_bytes_max) catch return error.OutOfMemory;
    var w = response.HeadWriter{ .buf = space };
    w.statusLine(103) catch return error.HeadTooLarge;
    for (links) |l| w.header("link", l) catch return error.HeadTooLarge;
    w.append("\r\n") catch return error.HeadTooLarge;
    const out = &conn.a().out;
    out.addStaged(w.len);
    out.commitStaged(&st.out) catch {
        out.dropStaged();
        return error.OutOfMemory;
    };
    conn.flush();
}

/// The app is done with the stream. If the response is whole and the connection may be
/// kept, the next request is parsed once the output is written.
pub fn finishStream(st: *Stream) void {
    const conn = st.conn;
    const act = conn.a();
    std.debug.assert(act.stream == st);
    act.stream = null;
    st.handle = null;
    st.write_blocked = false;
    if (!st.refused) observe(conn, if (st.resp_started) st.status else 500);
    conn.server.streamFinished();
    if (conn.state == .closed) return conn.server.retire(conn);
    if (stateOf(conn).ws != null and conn.state != .request) return seam.webSocketStreamFinished(conn);
    if (!st.resp_complete) return conn.close();
    afterResponse(conn);
}

/// The output queue drained (called by the connection).
pub fn afterFlush(conn: *Conn) void {
    const act = conn.a();
    const st = streamOf(conn);
    if (st.resp_complete and (conn.state == .request or st.refused)) {
        if (st.resp_close_after and act.stream == null) return lingerClose(conn);
        afterResponse(conn);
    }
}

fn lingerClose(conn: *Conn) void {
    const st = streamOf(conn);
    // Nothing more can come when the whole request was read and the client was told the
    // connection closes: then a plain close loses nothing.
    const whole = st.body_done and conn.state == .request and !st.keep_alive;
    conn.lingerClose(!whole);
}

/// Called when the response is complete and flushed, or when the stream finishes.
fn afterResponse(conn: *Conn) void {
    const act = conn.a();
    const st = streamOf(conn);
    if (!st.resp_complete or act.io_busy or !act.out.isEmpty() or act.file != null) return;
    if (act.stream) |s| {
        // The app is still running: its receive() now reports disconnect.
        conn.server.hooks.wakeRead(s);
        return;
    }
    if (conn.state != .request and conn.state != .head) return;
    const srv = conn.server;
    // A response that began young and ended past --timeout-connection still ends it.
    const reusable = st.keep_alive and !srv.draining and
        conn.requests_count < srv.opts.keep_alive_requests_max and !srv.connectionExpired(conn) and
        (st.body_done or canDiscardBody(st));
    if (!reusable) return lingerClose(conn);
    conn.state = .head;
    if (!st.body_done) {
        // The app answered without reading the whole body: skip the rest, then go on.
        stateOf(conn).discarding = true;
        discardBody(conn);
        if (conn.state != .head) return;
    }
    srv.idle_timeouts.arm(&conn.timer, srv.now_ms);
    if (!conn.interest.readable) conn.setReading(true);
    if (act.rlen > act.rstart) return srv.schedule(conn);
    if (stateOf(conn).discarding) return;
    // Idle: the connection keeps only its small struct.
    conn.releaseActive();
}

/// A body is skipped only when that is cheap and the client is not waiting for a
/// `100 Continue` it never got (it would never send the body).
fn canDiscardBody(st: *const Stream) bool {
    if (st.expect_continue) return false;
    return switch (st.body_kind) {
        .length => st.body_remaining <= discard_bytes_max,
        .chunked => true,
        .none => true,
    };
}

fn discardBody(conn: *Conn) void {
    const h1s = stateOf(conn);
    const st = &h1s.stream;
    var segs: [16][]const u8 = undefined;
    while (!st.body_done and conn.state != .closed) {
        const r = takeBody(st, &segs);
        for (segs[0..r.count]) |seg| h1s.discarded_bytes += seg.len;
        if (r.failed or h1s.discarded_bytes > discard_bytes_max) return conn.close();
        if (r.count == 0) break;
    }
    if (conn.state == .closed) return;
    bodyConsumed(st);
    if (st.body_done) {
        h1s.discarding = false;
        h1s.discarded_bytes = 0;
    }
}

test "h2c upgrade: a request a proxy forwarded is never upgraded" {
    const H = http1.Header;
    try std.testing.expect(!viaProxy(&[_]H{ .{ .name = "host", .value = "h" }, .{ .name = "upgrade", .value = "h2c" } }));
    try std.testing.expect(!viaProxy(&[_]H{.{ .name = "x-forwarded", .value = "a" }})); // not a proxy's field
    try std.testing.expect(!viaProxy(&[_]H{.{ .name = "vias", .value = "a" }}));
    for ([_][]const u8{ "via", "forwarded", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-real-ip" }) |name| {
        try std.testing.expect(viaProxy(&[_]H{ .{ .name = "host", .value = "h" }, .{ .name = name, .value = "1.1 p" } }));
    }
}

test "HTTP2-Settings decodes base64url to whole settings, padded or not, and refuses the rest" {
    const t = std.testing;
    // curl's: SETTINGS_MAX_CONCURRENT_STREAMS 100, INITIAL_WINDOW_SIZE 33554432, ENABLE_PUSH 0.
    const curl = decodeH2cSettings("AAMAAABkAAQCAAAAAAIAAAAA").?;
    try t.expectEqualSlices(u8, &.{ 0, 3, 0, 0, 0, 100, 0, 4, 2, 0, 0, 0, 0, 2, 0, 0, 0, 0 }, curl);
    try t.expectEqual(@as(usize, 6), decodeH2cSettings("AAQAAP__").?.len);
    try t.expectEqual(@as(usize, 6), decodeH2cSettings("AAQAAP__==").?.len);
    try t.expectEqual(@as(usize, 0), decodeH2cSettings("").?.len);
    try t.expect(decodeH2cSettings("AAQAAP") == null); // 4 bytes: not a whole setting
    try t.expect(decodeH2cSettings("AAQAAP+/") == null); // standard base64, not url-safe
    try t.expect(decodeH2cSettings("A") == null);
    try t.expect(decodeH2cSettings("AAAAAAAA" ** 17) == null); // past the bound
}

test "plainDecimal: plain digits only, within u64, everything else left to parseInt" {
    try std.testing.expectEqual(@as(?u64, 0), plainDecimal("0"));
    try std.testing.expectEqual(@as(?u64, 27), plainDecimal("27"));
    try std.testing.expectEqual(@as(?u64, 9999999999999999999), plainDecimal("9999999999999999999"));
    try std.testing.expectEqual(@as(?u64, 7), plainDecimal("0000000000000000007"));
    inline for (.{ "", " 1", "1 ", "+1", "-1", "1_0", "0x1", "18446744073709551615", "a" }) |text| {
        try std.testing.expectEqual(@as(?u64, null), plainDecimal(text));
    }
}
