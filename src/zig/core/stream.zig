//! A stream: one request/response exchange on a connection, whichever protocol carries it.
//!
//! The connection (`core/connection.zig`) is the transport: socket, TLS, read buffer, output queue,
//! timers. A protocol drives streams over it: HTTP/1.1 (`http1/session.zig`) one at a time, in
//! order; HTTP/2 will drive many at once. The side that runs apps (`python/stream_type.zig`)
//! only ever holds a `*Stream` and calls the verbs below; it never sees the connection.
//!
//! Life: a protocol creates the stream when a request head is complete, hands it to the
//! server's `Hooks.on_request` with a protocol-neutral `Request`, and the app side
//! drives it until `finish` or `abort`. After that the protocol owns it until its queued
//! output is written (`out.queued == 0`), then frees or reuses it.
const std = @import("std");
const http_fields = @import("../http/fields.zig");
const compression = @import("../features/compression.zig"); // `prepare` reads accept-encoding once for every protocol
const decompression = @import("../features/decompression.zig"); // request bodies are decoded here, once for every protocol
const response = @import("../http/response.zig");
const http1 = @import("../http/http1_parser.zig"); // HTTP/1.1's chunked-body decoder, kept in the stream
const seam = @import("protocol.zig");
const Conn = @import("connection.zig").Conn;
const outq = @import("../transport/output_queue.zig");
const tracing = @import("../features/tracing.zig"); // `prepare` and `startResponse` decide what every protocol adds for operators, once
const metrics = @import("../features/metrics.zig"); // the method label, noted once for every protocol
const sys = @import("../os/sys.zig");

pub const Header = http_fields.Header;

pub const Version = enum(u8) { http10, http11, http2, http3 };

/// What `scope.build` needs of a request, from any protocol. Slices point into the
/// connection's read buffer (HTTP/1.1) or a decoded header block (HTTP/2); valid only
/// during `Hooks.on_request`.
pub const Request = struct {
    method: []const u8,
    /// origin-form path as sent, before '?' (percent-encoded).
    path: []const u8,
    /// Raw bytes after the first '?', "" if none.
    query: []const u8,
    /// The Host header or `:authority`; null when absent.
    authority: ?[]const u8,
    /// `:scheme` when the protocol carries one (HTTP/2); HTTP/1.1 leaves it to the connection.
    scheme: ?[]const u8 = null,
    /// Lower-case names, in order as received.
    headers: []const Header,
    version: Version,
    /// What the engine changes in `headers` before the app sees them (request id, trace
    /// context): set by `Stream.prepare`.
    added: tracing.Added = .{},

    /// The view of a parsed HTTP/1.x head.
    pub fn fromHttp1(req: *const http1.Request) Request {
        return .{
            .method = req.method,
            .path = req.path,
            .query = req.query,
            .authority = req.host,
            .headers = req.headers,
            .version = if (req.version == .http11) .http11 else .http10,
        };
    }
};

pub const BodyKind = enum(u8) { none, length, chunked };

pub const Protocol = enum(u8) { http1, http2, http3 };

pub const TakeResult = struct { count: usize, done: bool, failed: bool };
pub const WriteError = error{ NotStarted, AlreadyComplete, Busy, TooMuchBody, TooLittleBody, OutOfMemory };
pub const StartError = error{ AlreadyStarted, InvalidHeader, HeadTooLarge, OutOfMemory };
pub const FileError = error{ NotStarted, AlreadyComplete, TrailersDeclared, BodyStarted, OutOfMemory };
pub const TrailersError = error{ NotDeclared, BodyNotDone, AlreadyComplete, InvalidHeader, Forbidden, OutOfMemory };

/// A stream's queued output past which its writer waits (`writeBody` returns true).
pub const queued_bytes_high = 8 * 1024;
/// Output segments one body message may need (HTTP/1.1 chunked: size line, body, CRLF).
pub const segments_per_write = 3;

/// Whether the stream's writer must wait before its next body message: too many of its
/// bytes are queued, or the connection's queue could not take another message.
pub fn mustWait(st: *const Stream) bool {
    return seam.mustWait(st);
}

pub const Stream = struct {
    conn: *Conn,
    protocol: Protocol = .http1,
    /// What the app side knows this stream by (its Python object); null once finished.
    handle: ?*anyopaque = null,

    // The request.
    keep_alive: bool = false,
    is_head_method: bool = false,
    http10: bool = false,
    expect_continue: bool = false,
    /// The client said it takes trailer fields (`TE: trailers`).
    te_trailers: bool = false,
    body_kind: BodyKind = .none,
    body_done: bool = true,
    body_remaining: u64 = 0,
    body_received: u64 = 0,
    chunked: http1.ChunkedDecoder = .{},

    // The response.
    status: u16 = 0,
    resp_started: bool = false,
    resp_head_sent: bool = false,
    resp_complete: bool = false,
    resp_chunked: bool = false,
    resp_no_body: bool = false,
    resp_close_after: bool = false,
    /// The app declared trailers (`"trailers": True`): the response is complete only
    /// after its last trailers message.
    resp_trailers: bool = false,
    /// The last body message was written (with trailers declared, the trailers follow).
    resp_body_done: bool = false,
    /// The last chunk (`0\r\n`) that opens the trailer section is queued.
    resp_trailers_opened: bool = false,
    /// The engine answered this request itself (bad body): the app's output is dropped.
    refused: bool = false,
    /// HTTP/2: the stream was reset (by the client, or by us for an error).
    reset: bool = false,
    resp_length: ?u64 = null,
    /// Body bytes of the response queued so far, as they go out (compressed ones when
    /// compressed; no head or framing; 0 for HEAD): the metrics' size and the access log's.
    resp_body_bytes: u64 = 0,
    /// This stream's bytes in the connection's output queue (its backpressure), and
    /// those written to the socket.
    out: outq.Account = .{},
    /// `writeBody` told the writer to wait: wake it once the queue drains below the mark.
    write_blocked: bool = false,
    /// When the request head was parsed, for the duration histogram and server-timing
    /// (0 when neither is on).
    started_us: u64 = 0,
    /// The request's method for the metrics' labels (`metrics.MethodClass`).
    method_class: u8 = 0,
    /// `--request-id-header`: the id the response carries.
    request_id: tracing.RequestId = .{},
    /// `--compression`: the encoding the request's accept-encoding chose (the response
    /// may still go uncompressed: `compression.mayCompress`).
    compress: ?compression.Encoding = null,
    /// `--request-decompression`: the request body's coding, and its decoder (created at
    /// the first encoded bytes, destroyed by `finish`).
    body_coding: decompression.Coding = .identity,
    decoder: ?*decompression.Decoder = null,

    /// A fresh exchange on `conn`, for a request whose head was just parsed.
    pub fn init(conn: *Conn, protocol: Protocol) Stream {
        return .{ .conn = conn, .protocol = protocol };
    }

    // ---- the verbs the app side uses ---------------------------------------------

    /// Available request body bytes as slices (valid until `bodyConsumed`): decoded
    /// ones when the body has a content coding the engine undoes.
    pub fn takeBody(self: *Stream, segs: [][]const u8) TakeResult {
        if (self.body_coding.encoding() != null) return self.takeDecoded(segs);
        return seam.takeBody(self, segs);
    }

    /// Body bytes read from the socket straight into `dst`, where the protocol can (HTTP/1.1
    /// with a Content-Length on a plain socket); 0 when it cannot or nothing is there now.
    /// Only after `takeBody` returned everything buffered.
    pub fn readBodyDirect(self: *Stream, dst: []u8) usize {
        if (self.body_coding.encoding() != null) return 0;
        return seam.readBodyDirect(self, dst);
    }

    /// The app copied the slices from `takeBody`: room for more.
    pub fn bodyConsumed(self: *Stream) void {
        if (self.decoder) |d| d.consumed(d.pending().len);
        seam.bodyConsumed(self);
    }

    /// The app waits for body bytes that have not arrived: they must come in time.
    pub fn awaitBody(self: *Stream) void {
        seam.awaitBody(self);
    }

    // ---- request bodies in a content coding (`--request-decompression`) ---------------

    /// What the request's content-encoding asks for; a coding the engine undoes hides
    /// content-encoding and content-length from the app (the body's length is unknown
    /// until decoded: over HTTP/1.x the app sees it as chunked).
    fn decideCoding(self: *Stream, req: *Request) void {
        // A WebSocket's request has no body; its frames have their own compression.
        if (self.isWebSocket()) return;
        self.body_coding = decompression.codingOf(req.headers);
        if (self.body_coding.encoding() == null) return;
        // A coding means a content-encoding field came (`Added`'s drop flags are exact).
        req.added.drop_body_fields = true;
        // HTTP/1.1's app sees an unknown length as chunked; HTTP/1.0 has no chunked
        // coding and HTTP/2 no transfer-encoding: theirs see no length at all.
        req.added.add_chunked = req.version == .http11 and self.body_kind == .length;
    }

    /// Decoded body bytes: the decoder's pending window, else what it makes of the next
    /// encoded bytes. Encoded bytes are taken from the protocol (and given back to it, for
    /// HTTP/2's flow control) only once the previous ones are decoded and the app took
    /// their output: the client is held back by the app's pace, one window at a time.
    fn takeDecoded(self: *Stream, segs: [][]const u8) TakeResult {
        std.debug.assert(segs.len > 0);
        if (self.gone()) return .{ .count = 0, .done = false, .failed = true };
        const limit = self.conn.server.opts.body_bytes_max;
        while (true) {
            if (self.decoder) |d| {
                if (d.pending().len > 0) {
                    segs[0] = d.pending();
                    return .{ .count = 1, .done = false, .failed = false };
                }
                if (d.canRun()) {
                    d.run(limit) catch |err| return self.decodeFailed(err);
                    continue;
                }
            }
            var coded: [16][]const u8 = undefined;
            const t = seam.takeBody(self, &coded);
            if (t.failed) return t;
            var bytes: usize = 0;
            for (coded[0..t.count]) |seg| bytes += seg.len;
            if (bytes == 0) {
                if (!t.done) return .{ .count = 0, .done = false, .failed = false };
                if (self.decoder) |d| d.finish() catch |err| return self.decodeFailed(err);
                return .{ .count = 0, .done = true, .failed = false };
            }
            const d = self.decoder orelse
                decompression.Decoder.create(self.body_coding.encoding().?) orelse
                return self.decodeFailed(error.OutOfMemory);
            self.decoder = d;
            d.feed(coded[0..t.count]) catch |err| return self.decodeFailed(err);
            seam.bodyConsumed(self);
        }
    }

    /// A body that does not decode (400), decodes past --limit-request-body (413), or
    /// no memory for its decoder (500): answered if no response started, else the
    /// exchange is cut (HTTP/1.1 closes the connection, HTTP/2 resets the stream).
    fn decodeFailed(self: *Stream, err: decompression.Error) TakeResult {
        self.dropDecoder();
        const status: u16 = switch (err) {
            error.Corrupt => 400,
            error.TooLarge => 413,
            error.OutOfMemory => 500,
        };
        if (self.resp_started) {
            seam.abortStream(self);
        } else if (!seam.refuseRequest(self, status)) {
            if (self.answer(status, "")) self.refused = true else seam.abortStream(self);
        }
        return .{ .count = 0, .done = false, .failed = true };
    }

    /// 415 for a coding the engine cannot undo, before any app sees the request; its
    /// accept-encoding names those it can (RFC 9110 12.5.3). The caller finishes the
    /// stream; false when the answer could not be queued and the stream was aborted.
    pub fn refuseCoding(self: *Stream) bool {
        var buf: [24]u8 = undefined;
        if (self.answer(415, decompression.availableText(&buf))) return true;
        self.abort();
        return false;
    }

    /// A refused body's answer: its reason phrase as a plain-text body with its own
    /// content-length, and accept-encoding when given; without the --header fields.
    fn answer(self: *Stream, status: u16, accept_encoding: []const u8) bool {
        const reason = response.reasonPhrase(status);
        var len_buf: [8]u8 = undefined;
        const len_text = std.fmt.bufPrint(&len_buf, "{d}", .{reason.len}) catch unreachable;
        const fields = [_][2][]const u8{
            .{ "content-length", len_text },
            .{ "accept-encoding", accept_encoding },
        };
        const n: usize = if (accept_encoding.len > 0) 2 else 1;
        return self.answerPlain(status, fields[0..n], reason, &.{});
    }

    /// Fields an engine's plain answer may carry after its content-type.
    pub const plain_fields_max = 3;

    /// The engine's own short plain-text answer (a refused request body, a --static
    /// error): content-type, then `fields`, then `body`. `extra` as for `startResponse`.
    /// False when it could not be queued (the caller then cuts the exchange).
    pub fn answerPlain(self: *Stream, status: u16, fields: []const [2][]const u8, body: []const u8, extra: []const [2][]const u8) bool {
        std.debug.assert(fields.len <= plain_fields_max);
        var all: [1 + plain_fields_max][2][]const u8 = undefined;
        all[0] = .{ "content-type", "text/plain; charset=utf-8" };
        @memcpy(all[1 .. 1 + fields.len], fields);
        return self.answerWhole(status, all[0 .. 1 + fields.len], body, extra);
    }

    /// An answer the engine makes whole through the stream's verbs, as an app would:
    /// the head, then the one body message. False when it could not be queued.
    pub fn answerWhole(self: *Stream, status: u16, fields: []const [2][]const u8, body: []const u8, extra: []const [2][]const u8) bool {
        self.startResponse(status, fields, extra, false) catch return false;
        _ = self.writeBody(body, false, null) catch return false;
        return true;
    }

    pub fn dropDecoder(self: *Stream) void {
        if (self.decoder) |d| d.destroy();
        self.decoder = null;
    }

    /// The response head. `extra` are the server's own headers (--header); the request
    /// id and server-timing join them when on. `trailers`: trailer fields follow the
    /// body (`writeTrailers`).
    pub fn startResponse(self: *Stream, status: u16, headers: []const [2][]const u8, extra: []const [2][]const u8, trailers: bool) StartError!void {
        const srv = self.conn.server;
        const opts = srv.opts.tracing;
        // HSTS on HTTPS only (RFC 6797 7.2: a browser ignores it over plain HTTP); HTTP/3
        // is always HTTPS.
        const secure = self.protocol == .http3 or self.tlsSession() != null;
        const hsts = srv.opts.hsts.len > 0 and secure;
        // `--http3`: HTTP/1.1 and HTTP/2 over TLS advertise it (an app's own alt-svc wins).
        const alt_svc = srv.opts.http3 != null and self.protocol != .http3 and self.tlsSession() != null and !tracing.hasField(headers, "alt-svc");
        if (opts.request_id_header.len == 0 and !opts.server_timing and !hsts and !alt_svc) return self.startResponseWith(status, headers, extra, trailers);
        var own: [4][2][]const u8 = undefined;
        var timing: [40]u8 = undefined;
        const elapsed: ?u64 = if (opts.server_timing and self.started_us != 0) sys.monotonicUs() -| self.started_us else null;
        var n = tracing.responseFields(opts, &self.request_id, elapsed, headers, own[0..2], &timing).len;
        if (hsts and !tracing.hasField(headers, "strict-transport-security")) {
            own[n] = .{ "strict-transport-security", srv.opts.hsts };
            n += 1;
        }
        if (alt_svc) {
            own[n] = .{ "alt-svc", srv.opts.http3.?.altSvc() };
            n += 1;
        }
        const added = own[0..n];
        if (added.len == 0) return self.startResponseWith(status, headers, extra, trailers);
        if (extra.len == 0) return self.startResponseWith(status, headers, added, trailers);
        // --header fields are few; the rare long list is copied to the heap. (Declared
        // here, not above: ReleaseSafe fills an `undefined` array at its declaration.)
        var stack: [32][2][]const u8 = undefined;
        const total = extra.len + added.len;
        const all = if (total <= stack.len) stack[0..total] else std.heap.c_allocator.alloc([2][]const u8, total) catch return error.OutOfMemory;
        defer if (total > stack.len) std.heap.c_allocator.free(all);
        @memcpy(all[0..extra.len], extra);
        @memcpy(all[extra.len..], added);
        return self.startResponseWith(status, headers, all, trailers);
    }

    fn startResponseWith(self: *Stream, status: u16, headers: []const [2][]const u8, extra: []const [2][]const u8, trailers: bool) StartError!void {
        return seam.startResponse(self, status, headers, extra, trailers);
    }

    /// A request head is complete and about to reach the app (or the engine's own
    /// answer): the clock for the metrics and server-timing starts, the method is noted
    /// for the metrics' labels, and the request id and trace context are decided.
    /// Returns the seconds to wait when the client is over `--limit-request-rate` (the
    /// protocol then answers 429 itself), else null.
    pub fn prepare(self: *Stream, req: *Request) ?u32 {
        const srv = self.conn.server;
        const opts = srv.opts.tracing;
        if (srv.metrics != null or opts.server_timing) self.started_us = sys.monotonicUs();
        self.method_class = @intFromEnum(metrics.MethodClass.of(req.method));
        if (opts.request_id_header.len > 0 or opts.trace_context) {
            req.added = tracing.prepare(opts, req.headers, &self.request_id);
        }
        if (srv.opts.compression.enabled()) self.compress = compression.chooseFields(&srv.opts.compression, req.headers);
        if (srv.opts.request_decompression) self.decideCoding(req);
        return srv.rateLimited(&self.conn.peer, req.headers);
    }

    /// A `103 Early Hints` with one `link` field per entry, before the response starts.
    pub fn earlyHint(self: *Stream, links: []const []const u8) StartError!void {
        return seam.earlyHint(self, links);
    }

    /// Trailer fields after the whole body; `more`: another trailers message follows.
    /// True when the caller must wait for `Hooks.wake_write` (as for `writeBody`).
    pub fn writeTrailers(self: *Stream, fields: []const [2][]const u8, more: bool) TrailersError!bool {
        return seam.writeTrailers(self, fields, more);
    }

    /// One body message. True when the caller must wait for `Hooks.wake_write` before
    /// the next one. `owner` keeps `data` alive while it is queued (retained by the queue).
    pub fn writeBody(self: *Stream, data: []const u8, more: bool, owner: ?*anyopaque) WriteError!bool {
        return seam.writeBody(self, data, more, owner);
    }

    /// `http.response.pathsend`: the file at `path` is the rest of the body. Returns when
    /// the engine has taken it (the app does not wait for the file to be sent).
    pub fn sendFile(self: *Stream, path: [:0]const u8) FileError!void {
        if (!self.resp_started) return error.NotStarted;
        if (self.resp_complete or self.resp_body_done) return error.AlreadyComplete;
        if (self.resp_trailers) return error.TrailersDeclared;
        if (self.resp_head_sent or self.resp_body_bytes > 0) return error.BodyStarted;
        self.resp_body_done = true;
        self.resp_complete = true;
        if (self.gone()) return;
        return seam.sendFile(self, path);
    }

    /// An open file's `len` bytes from `offset` are the whole body (the engine's static
    /// files, `server/static_files.zig`): the head must carry their content-length. The
    /// stream owns `fd` from the call on, whatever it returns.
    pub fn sendFd(self: *Stream, fd: i32, offset: u64, len: u64) FileError!void {
        if (!self.resp_started or self.resp_complete or self.resp_head_sent or self.resp_body_bytes > 0) {
            sys.close(fd);
            return error.AlreadyComplete;
        }
        self.resp_body_done = true;
        self.resp_complete = true;
        if (self.gone()) {
            sys.close(fd);
            return;
        }
        return seam.sendFd(self, fd, offset, len);
    }

    /// The app is done. The stream is the protocol's from now on.
    pub fn finish(self: *Stream) void {
        self.dropDecoder();
        seam.finishStream(self);
    }

    /// The app failed after its response started: the exchange cannot be completed.
    pub fn abort(self: *Stream) void {
        seam.abortStream(self);
        self.finish();
    }

    /// The client went away, or the engine answered the request itself: the app sees a disconnect.
    pub fn gone(self: *const Stream) bool {
        return self.conn.state == .closed or self.refused or self.reset;
    }

    // ---- WebSocket (HTTP/1.1 upgrade, or RFC 8441 over HTTP/2) ----------------------

    /// The stream's WebSocket session, if its request opened one; the app side drives it
    /// with WebSocket's own verbs (`websocket/session.zig`).
    pub fn wsSession(self: *const Stream) ?seam.WebSocketHeld {
        return seam.wsSession(self);
    }

    pub fn isWebSocket(self: *const Stream) bool {
        return self.wsSession() != null;
    }

    /// The client's address (for the scope's `client`).
    pub fn peer(self: *const Stream) *const @import("connection.zig").Peer {
        return &self.conn.peer;
    }

    /// The connection's TLS session (HTTPS), for the scope's scheme and TLS extension.
    pub fn tlsSession(self: *const Stream) ?*@import("../transport/openssl.zig").SSL {
        return self.conn.session();
    }

    /// The TLS session as the ASGI tls extension reads it: the connection's (HTTPS), or
    /// what an HTTP/3 connection's handshake kept of its own.
    pub fn tlsView(self: *const Stream) ?@import("../transport/openssl.zig").SessionView {
        if (self.conn.session()) |ssl| return .{ .live = ssl };
        if (self.protocol != .http3) return null;
        const plug = self.conn.server.quic orelse return null;
        const kept = plug.verbs.tlsSummary(self) orelse return null;
        return .{ .kept = kept };
    }
};
