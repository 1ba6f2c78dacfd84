//! One HTTP/1.1 connection: its state machine, its reads, its output queue.
//!
//! A connection knows nothing of Python. When a request head is complete it hands a
//! *stream* to the server's hooks (`onRequest`) and from then on the other side drives
//! it through `takeBody`, `startResponse`, `writeBody` and `finishStream`. Requests on
//! one connection are served strictly one after another, so pipelined requests are
//! answered in order; the bytes of the next one simply wait in the read buffer.
const std = @import("std");
const linux = std.os.linux;
const sys = @import("sys.zig");
const http1 = @import("http1.zig");
const pool_mod = @import("pool.zig");
const response = @import("response.zig");
const timer = @import("timer.zig");
const metrics = @import("metrics.zig");
const Server = @import("server.zig").Server;
const Interest = @import("poller.zig").Interest;
const ws = @import("ws.zig");
const wsconn = @import("wsconn.zig");
const deflate = @import("deflate.zig");
const tls = @import("tls.zig");
const writer_mod = @import("writer.zig");

const Buffer = pool_mod.Buffer;
const buffer_bytes = pool_mod.buffer_bytes;
/// Response heads past a pooled buffer move to the heap, up to this size.
const response_head_bytes_max = 1024 * 1024;
/// Scratch for engine-made answers (health, metrics): used and copied out within one call.
var ops_head_scratch: [512]u8 = undefined;
var ops_body_scratch: [8192]u8 = undefined;
/// An unread request body up to this size is skipped to keep the connection; past it we close.
const discard_bytes_max = 1024 * 1024;

/// The peer's address, kept compactly: it becomes the scope's `client`.
pub const Peer = struct {
    family: u16 = 0,
    port: u16 = 0,
    addr: [16]u8 = undefined,

    pub fn fromStorage(st: *const linux.sockaddr.storage) Peer {
        var p = Peer{ .family = st.family };
        switch (st.family) {
            linux.AF.INET => {
                const in: *const linux.sockaddr.in = @ptrCast(@alignCast(st));
                p.port = std.mem.bigToNative(u16, in.port);
                @memcpy(p.addr[0..4], std.mem.asBytes(&in.addr));
            },
            linux.AF.INET6 => {
                const in6: *const linux.sockaddr.in6 = @ptrCast(@alignCast(st));
                p.port = std.mem.bigToNative(u16, in6.port);
                p.addr = in6.addr;
            },
            else => {},
        }
        return p;
    }

    /// Writes the textual address (no brackets, no port) into buf.
    pub fn format(self: *const Peer, buf: []u8) []const u8 {
        switch (self.family) {
            linux.AF.INET => return std.fmt.bufPrint(buf, "{d}.{d}.{d}.{d}", .{ self.addr[0], self.addr[1], self.addr[2], self.addr[3] }) catch "",
            linux.AF.INET6 => {
                const addr = std.net.Ip6Address.init(self.addr, 0, 0, 0);
                const s = std.fmt.bufPrint(buf, "{f}", .{addr}) catch return "";
                // "[addr]:0" -> "addr"
                const end = std.mem.lastIndexOfScalar(u8, s, ']') orelse return s;
                return s[1..end];
            },
            else => return "",
        }
    }
};

pub const State = enum(u8) {
    /// Waiting for (the rest of) a request head.
    head,
    /// A request is being served by a stream.
    request,
    /// Response sent, the peer's remaining bytes are drained before close so that
    /// our last response is not destroyed by a reset.
    lingering,
    /// Upgraded: WebSocket frames both ways (wsconn.zig), a stream for the session.
    websocket,
    closed,
};

const BodyKind = enum(u8) { none, length, chunked };

pub const TakeResult = struct { count: usize, done: bool, failed: bool };

pub const WriteError = error{ NotStarted, AlreadyComplete, Busy, TooMuchBody, TooLittleBody, OutOfMemory };

/// Everything a connection needs only while a request is read or answered. An idle
/// keep-alive connection has none of it: the `Conn` left is about a hundred bytes.
pub const Active = struct {
    conn: *Conn,
    /// On the server's list of connections with a buffered request to parse next pass.
    /// Here, not in `Conn`: only a connection holding a buffer is ever on it, and every
    /// byte of `Conn` is paid by each idle connection.
    pending_next: ?*Conn = null,
    is_pending: bool = false,
    /// Pending output that makes no progress (independent of the phase).
    write_timer: timer.Entry = .{},

    // Reading: the buffer is attached only while a request is read or served.
    rbuf: ?*Buffer = null,
    rstart: u32 = 0,
    rlen: u32 = 0,

    // The current request.
    stream: ?*anyopaque = null,
    keep_alive: bool = false,
    is_head_method: bool = false,
    http10: bool = false,
    expect_continue: bool = false,
    body_kind: BodyKind = .none,
    body_done: bool = true,
    body_remaining: u64 = 0,
    body_received: u64 = 0,
    chunked: http1.ChunkedDecoder = .{},

    // The current response.
    status: u16 = 0,
    resp_started: bool = false,
    resp_head_sent: bool = false,
    resp_complete: bool = false,
    resp_chunked: bool = false,
    resp_no_body: bool = false,
    resp_close_after: bool = false,
    /// The engine answered this request itself (bad body): the app's output is dropped.
    refused: bool = false,
    /// Between requests: the rest of an unread request body is being skipped.
    discarding: bool = false,
    discarded_bytes: u64 = 0,
    resp_length: ?u64 = null,
    resp_body_bytes: u64 = 0,
    bytes_sent: u64 = 0,
    /// When the request head was parsed, for the duration histogram (metrics only).
    started_us: u64 = 0,

    // Output, in write order: obuf[ooff..olen], then pending[poff..], then tail.
    /// A pooled buffer, or a larger heap one while a response head outgrows it.
    obuf: ?[*]u8 = null,
    ocap: u32 = 0,
    ooff: u32 = 0,
    olen: u32 = 0,
    pending: []const u8 = &.{},
    pending_owner: ?*anyopaque = null,
    tail: [8]u8 = undefined,
    tail_len: u8 = 0,
    /// A response head written by startResponse, waiting past `olen` for the first body.
    staged_head_len: u32 = 0,
    /// A WebSocket upgrade: pending the app's accept, then the open session.
    ws: ?*wsconn.Session = null,
    /// The writer thread holds this response's output (`job`): nothing may change or
    /// free obuf/pending/tail, close the descriptor or free the connection until
    /// `writeDone` runs on the Python thread.
    io_busy: bool = false,
    /// The descriptor of a connection closed while busy: closed at `writeDone`.
    deferred_fd: i32 = -1,
    job: writer_mod.Job = undefined,
};

/// An HTTPS connection: the Conn and its TLS session, in one allocation.
pub const TlsConn = struct {
    conn: Conn,
    ssl: ?*tls.SSL,
};

pub const Conn = struct {
    server: *Server,
    fd: i32,
    state: State = .head,
    peer: Peer = .{},
    /// Intrusive links in the server's list of live connections (or its graveyard).
    prev: ?*Conn = null,
    next: ?*Conn = null,
    /// Idle, header, body or linger deadline: a connection is in one such phase at a time.
    timer: timer.Entry = .{},
    interest: Interest = .{},
    requests_count: u32 = 0,
    /// Request and response state, attached while the connection is busy.
    act: ?*Active = null,
    /// Allocated as the `conn` of a `TlsConn` (HTTPS): see `session`.
    is_tls: bool = false,

    pub fn init(server: *Server, fd: i32, peer: Peer) Conn {
        return .{ .server = server, .fd = fd, .peer = peer };
    }

    /// The TLS session when the server speaks HTTPS (null once closed); all socket I/O
    /// goes through `recv`/`sendv`. It lives beside the Conn, not in it, so a plain
    /// connection's struct stays at 88 bytes: one 96-byte malloc chunk.
    pub fn session(self: *const Conn) ?*tls.SSL {
        const outer = self.tlsConn() orelse return null;
        return outer.ssl;
    }

    /// The `TlsConn` this Conn is part of, if HTTPS.
    pub fn tlsConn(self: *const Conn) ?*TlsConn {
        if (!self.is_tls) return null;
        return @alignCast(@fieldParentPtr("conn", @constCast(self)));
    }

    /// Frees the TLS session, if any (at close, or when a never-closed Conn is destroyed).
    pub fn endSession(self: *Conn) void {
        const outer = self.tlsConn() orelse return;
        if (outer.ssl) |ssl| tls.freeSession(ssl);
        outer.ssl = null;
    }

    /// The busy part; only called where a request is known to be under way.
    pub inline fn a(self: *const Conn) *Active {
        return self.act.?;
    }

    fn ensureActive(self: *Conn) ?*Active {
        if (self.act == null) {
            const act = std.heap.c_allocator.create(Active) catch return null;
            act.* = .{ .conn = self };
            self.act = act;
        }
        return self.act;
    }

    /// Frees the busy part if the connection waits for its next request with nothing
    /// buffered, nothing to write and no body being skipped.
    pub fn releaseIfIdle(self: *Conn) void {
        if (!self.isIdle()) return;
        const act = self.act orelse return;
        if (self.outputLen() == 0 and !act.discarding and !act.io_busy) self.releaseActive();
    }

    /// Frees the busy part once nothing needs it: no stream, no buffered bytes, no output.
    pub fn releaseActive(self: *Conn) void {
        const act = self.act orelse return;
        // Still linked on the pending list: kept until that pass unlinks it.
        if (act.is_pending) return;
        std.debug.assert(act.stream == null);
        std.debug.assert(!act.io_busy);
        act.write_timer.disarm();
        if (act.rbuf) |b| self.server.pool.release(b);
        act.rbuf = null;
        self.releaseOutMemory();
        act.pending = &.{};
        if (act.pending_owner) |o| self.server.hooks.release(o);
        act.pending_owner = null;
        if (act.ws) |s| wsconn.destroy(s);
        act.ws = null;
        std.heap.c_allocator.destroy(act);
        self.act = null;
    }

    // ---- events -------------------------------------------------------------

    pub fn onEvent(self: *Conn, readable: bool, writable: bool, hangup: bool) void {
        if (self.session() != null) return self.onTlsEvent(readable, writable, hangup);
        if (writable and self.state != .closed) self.flush();
        if ((readable or hangup) and self.state != .closed) {
            if (self.interest.readable) {
                self.onReadable();
            } else if (hangup) {
                self.close();
            }
        }
    }

    fn onReadable(self: *Conn) void {
        if (self.state == .lingering) return self.drainLinger();
        if (self.ensureActive() == null) return self.close();
        const act = self.a();
        const buf = self.ensureReadBuffer() orelse return self.close();
        if (act.rlen == buffer_bytes) {
            self.compact();
            if (act.rlen == buffer_bytes) return self.setReading(false);
        }
        switch (self.recv(buf[act.rlen..])) {
            .ok => |n| {
                if (n == 0) return self.close();
                act.rlen += @intCast(n);
                self.server.bytes_in += n;
                if (self.server.metrics) |m| m.received_bytes += n;
                self.process();
            },
            .err => |e| if (e != .AGAIN) self.close(),
        }
    }

    /// Acts on whatever is buffered: parse a head, or tell the stream body bytes arrived.
    pub fn process(self: *Conn) void {
        switch (self.state) {
            .head => if (self.act != null) self.parseHead(),
            .request => {
                const act = self.a();
                // The stream may already be gone while its last response is still flushing.
                if (!act.body_done) if (act.stream) |st| self.server.hooks.wakeRead(st);
                if (act.rlen == buffer_bytes and act.rstart == 0) self.setReading(false);
            },
            .websocket => wsconn.process(self),
            .lingering, .closed => {},
        }
    }

    fn parseHead(self: *Conn) void {
        const act = self.a();
        if (act.discarding) {
            self.discardBody();
            if (act.discarding) return;
        }
        const buf = act.rbuf orelse return;
        if (act.rstart == act.rlen) return;
        const data = buf[act.rstart..act.rlen];
        const parsed = http1.parseHead(data, &self.server.headers_storage, self.server.limits) catch |err| {
            return self.refuse(http1.statusFor(err));
        };
        const head = parsed orelse {
            // Incomplete: the head must arrive within the header timeout, counted from its first byte.
            if (!self.timer.in(&self.server.header_timeouts)) self.server.header_timeouts.arm(&self.timer, self.server.now_ms);
            if (act.rstart > 0) self.compact();
            return;
        };
        self.timer.disarm();
        self.beginRequest(&head.request);
        act.rstart += @intCast(head.len);
        if (head.request.content_length orelse 0 > self.server.body_bytes_max) {
            // Refused before any app sees it, and before a 100-continue invites the body.
            return self.refuse(413);
        }
        if (self.server.ws_enabled and ws.isUpgrade(&head.request)) {
            if (!self.beginUpgrade(&head.request)) return;
        }
        self.state = .request;
        self.requests_count += 1;
        if (self.server.metrics != null) act.started_us = sys.monotonicUs();
        if (self.answerOps(&head.request)) return;
        if (!self.server.hooks.onRequest(self, &head.request)) {
            // The seam could not take the request (out of memory, app dispatch failed).
            self.state = .head;
            return self.refuse(500);
        }
    }

    /// A WebSocket upgrade: checked here; the app then accepts or denies it. False
    /// when the engine refused it (400/426).
    fn beginUpgrade(self: *Conn, req: *const http1.Request) bool {
        const act = self.a();
        var hs = ws.validate(req, self.server.ws_deflate) catch |err| {
            self.refuse(ws.statusFor(err));
            return false;
        };
        // zlib is loaded only now, for a client that offers compression; without it we decline.
        if (hs.deflate != null and !deflate.load()) hs.deflate = null;
        if (!wsconn.begin(self, hs)) {
            self.refuse(500);
            return false;
        }
        // Whatever the app answers over HTTP (denial, 403, 500) ends the connection.
        act.keep_alive = false;
        return true;
    }

    fn beginRequest(self: *Conn, req: *const http1.Request) void {
        const act = self.a();
        act.keep_alive = req.keep_alive;
        act.http10 = req.version == .http10;
        act.is_head_method = std.mem.eql(u8, req.method, "HEAD");
        act.expect_continue = req.expect_continue;
        act.chunked = .{};
        act.body_received = 0;
        if (req.chunked) {
            act.body_kind = .chunked;
            act.body_done = false;
        } else if (req.content_length) |n| {
            act.body_kind = .length;
            act.body_remaining = n;
            act.body_done = n == 0;
        } else {
            act.body_kind = .none;
            act.body_done = true;
        }
        act.status = 0;
        act.resp_started = false;
        act.resp_head_sent = false;
        act.resp_complete = false;
        act.resp_chunked = false;
        act.resp_no_body = false;
        act.resp_close_after = false;
        act.refused = false;
        act.resp_length = null;
        act.resp_body_bytes = 0;
        act.bytes_sent = 0;
    }

    /// Health and metrics paths are answered here, without the app, on a keep-alive
    /// connection like any response. Only GET and HEAD: anything else goes to the app.
    fn answerOps(self: *Conn, req: *const http1.Request) bool {
        const srv = self.server;
        const is_metrics = srv.metrics_path.len > 0 and std.mem.eql(u8, req.path, srv.metrics_path);
        const is_health = srv.health_path.len > 0 and std.mem.eql(u8, req.path, srv.health_path);
        if (!is_metrics and !is_health) return false;
        const head_only = std.mem.eql(u8, req.method, "HEAD");
        if (!head_only and !std.mem.eql(u8, req.method, "GET")) return false;
        const act = self.a();
        var status: u16 = 200;
        var body: []const u8 = "ok\n";
        var content_type: []const u8 = "text/plain; charset=utf-8";
        if (is_health and srv.draining) {
            status = 503;
            body = "draining\n";
        } else if (is_metrics) {
            if (srv.metrics) |m| m.resident_bytes = metrics.residentBytes();
            content_type = "text/plain; version=0.0.4; charset=utf-8";
            body = metrics.render(&ops_body_scratch) catch "";
            if (body.len == 0) status = 500;
        }
        if (act.http10 or srv.draining) act.keep_alive = false;
        var w = response.HeadWriter{ .buf = &ops_head_scratch };
        self.writeOpsHead(&w, status, content_type, body.len, act.keep_alive) catch return false;
        act.status = status;
        act.resp_started = true;
        act.resp_head_sent = true;
        act.resp_complete = true;
        act.resp_close_after = !act.keep_alive;
        self.queue(w.written()) catch return false;
        if (!head_only) self.queue(body) catch {
            self.close();
            return true;
        };
        self.observe(status);
        self.flush();
        return true;
    }

    fn writeOpsHead(self: *Conn, w: *response.HeadWriter, status: u16, content_type: []const u8, len: usize, keep_alive: bool) error{NoSpace}!void {
        try w.statusLine(status);
        if (self.server.server_header) try w.append("server: zigcorn\r\n");
        if (self.server.date_header) try w.append(self.server.date.get());
        try w.header("content-type", content_type);
        try w.header("cache-control", "no-store");
        try w.contentLength(len);
        if (!keep_alive) try w.append("connection: close\r\n");
        try w.append("\r\n");
    }

    /// One finished request for the metrics: its status class and duration.
    fn observe(self: *Conn, status: u16) void {
        const m = self.server.metrics orelse return;
        const act = self.a();
        const now = sys.monotonicUs();
        m.observe(status, if (act.started_us != 0 and now > act.started_us) now - act.started_us else 0);
        act.started_us = 0;
    }

    /// Answers a request the engine itself refuses, then closes.
    pub fn refuse(self: *Conn, status: u16) void {
        const act = self.a();
        self.observe(status);
        act.refused = true;
        act.keep_alive = false;
        act.resp_close_after = true;
        act.resp_complete = true;
        act.status = status;
        // Bytes after a refused head are never parsed.
        act.rstart = act.rlen;
        self.queue(response.errorResponse(status)) catch return self.close();
        self.flush();
    }

    // ---- the stream's side --------------------------------------------------

    /// Collects available body bytes as slices into the read buffer (valid until
    /// `bodyConsumed`). Also sends `100 Continue` the first time the app asks for a body.
    pub fn takeBody(self: *Conn, segs: [][]const u8) TakeResult {
        const act = self.a();
        var r = TakeResult{ .count = 0, .done = act.body_done, .failed = false };
        if (act.body_done or self.state == .closed) return r;
        if (act.expect_continue) {
            act.expect_continue = false;
            if (!act.resp_started) {
                self.queue("HTTP/1.1 100 Continue\r\n\r\n") catch {};
                self.flush();
            }
        }
        const buf = act.rbuf orelse return r;
        while (r.count < segs.len and !act.body_done) {
            const avail = buf[act.rstart..act.rlen];
            if (avail.len == 0) break;
            switch (act.body_kind) {
                .length => {
                    const n: usize = @intCast(@min(act.body_remaining, avail.len));
                    segs[r.count] = avail[0..n];
                    r.count += 1;
                    act.rstart += @intCast(n);
                    act.body_remaining -= n;
                    act.body_done = act.body_remaining == 0;
                },
                .chunked => {
                    const step = act.chunked.decode(avail, self.server.limits) catch |err| {
                        r.failed = true;
                        act.body_done = true;
                        if (!act.resp_started) self.refuse(http1.statusFor(err)) else self.close();
                        break;
                    };
                    act.rstart += @intCast(step.consumed);
                    if (step.data.len > 0) {
                        segs[r.count] = step.data;
                        r.count += 1;
                        act.body_received += step.data.len;
                        if (act.body_received > self.server.body_bytes_max) {
                            r.failed = true;
                            act.body_done = true;
                            if (!act.resp_started) self.refuse(413) else self.close();
                            break;
                        }
                    }
                    if (step.done) act.body_done = true;
                    if (step.consumed == 0) break;
                },
                .none => act.body_done = true,
            }
        }
        r.done = act.body_done;
        return r;
    }

    /// The app waits for body bytes that have not arrived: they must come in time.
    pub fn awaitBody(self: *Conn) void {
        if (self.state != .request or self.a().body_done) return;
        self.server.body_timeouts.arm(&self.timer, self.server.now_ms);
    }

    /// A deadline of the current phase passed.
    pub fn timedOut(self: *Conn) void {
        switch (self.state) {
            .head => {
                // A client that sent part of a head is told why; a silent one just goes.
                if (self.act) |act| if (act.rlen > act.rstart) return self.refuse(408);
                return self.close();
            },
            .request => {
                const act = self.a();
                if (act.body_done or act.resp_started) return self.close();
                self.refuse(408);
                if (act.stream) |s| self.server.hooks.wakeRead(s);
            },
            // The peer's close frame did not come in time.
            .websocket, .lingering, .closed => self.close(),
        }
    }

    /// The stream copied the slices from `takeBody`: make room for more.
    pub fn bodyConsumed(self: *Conn) void {
        const act = self.a();
        if (self.state == .closed) return;
        if (self.timer.in(&self.server.body_timeouts)) self.timer.disarm();
        if (act.rstart == act.rlen) {
            act.rstart = 0;
            act.rlen = 0;
        }
        if (!self.interest.readable) self.setReading(true);
    }

    pub const StartError = error{ AlreadyStarted, InvalidHeader, HeadTooLarge, OutOfMemory, Closed };

    /// Serialises the response head into the output buffer. Nothing is written to the
    /// socket yet: the head leaves together with the first body bytes.
    pub fn startResponse(self: *Conn, status: u16, headers: []const [2][]const u8, extra: []const [2][]const u8) StartError!void {
        const act = self.a();
        if (act.resp_started) return error.AlreadyStarted;
        if (self.gone()) {
            act.resp_started = true;
            return;
        }
        var buf = self.ensureOutBuffer() orelse return error.OutOfMemory;
        var w = response.HeadWriter{ .buf = buf[act.olen..] };
        act.status = status;
        act.resp_no_body = response.statusHasNoBody(status) or act.is_head_method;
        self.writeHead(&w, status, headers, extra) catch |err| {
            if (err != error.NoSpace) return error.InvalidHeader;
            // A head larger than a pooled buffer: move to a heap buffer sized for it.
            var need: usize = 1024 + act.olen;
            for (headers) |h| need += h[0].len + h[1].len + 4;
            for (extra) |h| need += h[0].len + h[1].len + 4;
            if (need > response_head_bytes_max) return error.HeadTooLarge;
            buf = self.growOut(need) orelse return error.OutOfMemory;
            w = .{ .buf = buf[act.olen..] };
            act.resp_length = null;
            self.writeHead(&w, status, headers, extra) catch |e2| {
                return if (e2 == error.NoSpace) error.HeadTooLarge else error.InvalidHeader;
            };
        };
        // Room is left for the framing header and the blank line, added with the first body.
        act.staged_head_len = @intCast(w.len);
        act.resp_started = true;
    }

    fn writeHead(self: *Conn, w: *response.HeadWriter, status: u16, headers: []const [2][]const u8, extra: []const [2][]const u8) !void {
        const act = self.a();
        try w.statusLine(status);
        const srv = self.server;
        if (srv.server_header) try w.append("server: zigcorn\r\n");
        if (srv.date_header) try w.append(srv.date.get());
        for (extra) |h| try w.header(h[0], h[1]);
        for (headers) |h| {
            if (!response.validName(h[0]) or !response.validValue(h[1])) return error.InvalidHeader;
            if (std.ascii.eqlIgnoreCase(h[0], "content-length")) {
                if (act.resp_length != null) return error.InvalidHeader;
                act.resp_length = std.fmt.parseInt(u64, std.mem.trim(u8, h[1], " \t"), 10) catch return error.InvalidHeader;
            } else if (std.ascii.eqlIgnoreCase(h[0], "transfer-encoding")) {
                // The engine frames the body itself; the app's claim is dropped.
                continue;
            } else if (std.ascii.eqlIgnoreCase(h[0], "connection")) {
                if (http1.connectionHas(h[1], "close")) act.keep_alive = false;
                continue;
            }
            try w.header(h[0], h[1]);
        }
    }

    /// Chooses the framing once the first body message shows whether it is the only one.
    fn finishHead(self: *Conn, first_body_len: usize, more: bool) error{NoSpace}!void {
        const act = self.a();
        const buf = act.obuf.?[0..act.ocap];
        var w = response.HeadWriter{ .buf = buf[act.olen..], .len = act.staged_head_len };
        if (act.resp_length != null) {
            // The app's own content-length is already in the head.
        } else if (act.resp_no_body) {
            // 1xx/204/304/HEAD: no framing header is invented (HEAD keeps the app's).
        } else if (!more) {
            act.resp_length = first_body_len;
            try w.contentLength(first_body_len);
        } else if (!act.http10) {
            act.resp_chunked = true;
            try w.append("transfer-encoding: chunked\r\n");
        } else {
            // HTTP/1.0 without a length: the end of the body is the end of the connection.
            act.keep_alive = false;
        }
        if (self.requests_count >= self.server.keep_alive_requests_max) act.keep_alive = false;
        if (!act.keep_alive or self.server.draining) {
            act.keep_alive = false;
            try w.append("connection: close\r\n");
        } else if (act.http10) {
            try w.append("connection: keep-alive\r\n");
        }
        try w.append("\r\n");
        act.olen += @intCast(w.len);
        act.staged_head_len = 0;
        act.resp_head_sent = true;
    }

    /// Queues one body message and tries to write it at once. Returns true when the
    /// caller must wait for `wakeWrite` before the next write (the client reads slowly).
    /// `owner` keeps `data` alive while it is queued; the hooks release it.
    pub fn writeBody(self: *Conn, data: []const u8, more: bool, owner: ?*anyopaque) WriteError!bool {
        const act = self.a();
        if (!act.resp_started) return error.NotStarted;
        if (act.resp_complete) return error.AlreadyComplete;
        if (act.pending.len != 0) return error.Busy;
        if (self.gone()) {
            if (!more) act.resp_complete = true;
            return false;
        }
        if (!act.resp_head_sent) self.finishHead(data.len, more) catch return error.OutOfMemory;
        var body = data;
        if (act.resp_no_body) body = &.{};
        if (act.resp_length) |n| {
            if (act.resp_body_bytes + body.len > n and !act.resp_no_body) return error.TooMuchBody;
            if (!more and act.resp_body_bytes + body.len < n and !act.resp_no_body) return error.TooLittleBody;
        }
        act.resp_body_bytes += body.len;
        if (act.resp_chunked and body.len > 0) {
            var tmp: [20]u8 = undefined;
            const line = std.fmt.bufPrint(&tmp, "{x}\r\n", .{body.len}) catch unreachable;
            self.queue(line) catch return error.OutOfMemory;
        }
        if (body.len > 0) self.queueOwned(body, owner) catch return error.OutOfMemory;
        if (act.resp_chunked) {
            if (body.len > 0) self.queueSmall("\r\n") catch return error.OutOfMemory;
            if (!more) self.queueSmall("0\r\n\r\n") catch return error.OutOfMemory;
        }
        if (!more) act.resp_complete = true;
        self.flush();
        return act.pending.len != 0 or (act.olen - act.ooff) > buffer_bytes / 2;
    }

    /// The stream is done with this connection (the app returned or failed). If the
    /// response is whole and the connection may be kept, the next request is parsed.
    pub fn finishStream(self: *Conn) void {
        const act = self.a();
        act.stream = null;
        if (!act.refused) self.observe(if (act.resp_started) act.status else 500);
        self.server.streamFinished();
        if (self.state == .closed) return self.server.retire(self);
        if (act.ws != null and self.state != .request) return wsconn.streamFinished(self);
        if (!act.resp_complete) return self.close();
        self.afterResponse();
    }

    /// Called when the response is complete and flushed, or when the stream finishes.
    fn afterResponse(self: *Conn) void {
        const act = self.a();
        if (!act.resp_complete or act.io_busy or self.outputLen() != 0) return;
        if (act.stream) |s| {
            // The app is still running: its receive() now reports disconnect.
            self.server.hooks.wakeRead(s);
            return;
        }
        if (self.state != .request and self.state != .head) return;
        const reusable = act.keep_alive and !self.server.draining and
            self.requests_count < self.server.keep_alive_requests_max and
            (act.body_done or self.canDiscardBody());
        if (!reusable) return self.lingerClose();
        self.state = .head;
        if (!act.body_done) {
            // The app answered without reading the whole body: skip the rest, then go on.
            act.discarding = true;
            self.discardBody();
            if (self.state != .head) return;
        }
        self.server.idle_timeouts.arm(&self.timer, self.server.now_ms);
        if (!self.interest.readable) self.setReading(true);
        if (act.rlen > act.rstart) return self.server.schedule(self);
        if (act.discarding) return;
        // Idle: the connection keeps only its small struct.
        self.releaseActive();
    }

    /// A body is skipped only when that is cheap and the client is not waiting for a
    /// `100 Continue` it never got (it would never send the body).
    fn canDiscardBody(self: *const Conn) bool {
        const act = self.a();
        if (act.expect_continue) return false;
        return switch (act.body_kind) {
            .length => act.body_remaining <= discard_bytes_max,
            .chunked => true,
            .none => true,
        };
    }

    fn discardBody(self: *Conn) void {
        const act = self.a();
        var segs: [16][]const u8 = undefined;
        while (!act.body_done and self.state != .closed) {
            const r = self.takeBody(&segs);
            for (segs[0..r.count]) |seg| act.discarded_bytes += seg.len;
            if (r.failed or act.discarded_bytes > discard_bytes_max) return self.close();
            if (r.count == 0) break;
        }
        if (self.state == .closed) return;
        self.bodyConsumed();
        if (act.body_done) {
            act.discarding = false;
            act.discarded_bytes = 0;
        }
    }

    // ---- output -------------------------------------------------------------

    pub fn outputLen(self: *const Conn) usize {
        const act = self.a();
        return (act.olen - act.ooff) + act.pending.len + act.tail_len;
    }

    fn queue(self: *Conn, bytes: []const u8) error{OutOfMemory}!void {
        const act = self.a();
        if (act.pending.len != 0) return self.queueSmall(bytes);
        const buf = self.ensureOutBuffer() orelse return error.OutOfMemory;
        if (bytes.len > act.ocap - act.olen and act.ooff > 0) self.compactOut();
        if (bytes.len > act.ocap - act.olen) return error.OutOfMemory;
        @memcpy(buf[act.olen..][0..bytes.len], bytes);
        act.olen += @intCast(bytes.len);
    }

    /// WebSocket output: copied, the buffer grown on the heap as needed. The caller
    /// bounds what is queued (send() waits past wsconn.out_bytes_high).
    pub fn queueGrow(self: *Conn, bytes: []const u8) error{OutOfMemory}!void {
        const act = self.a();
        std.debug.assert(act.pending.len == 0);
        _ = self.ensureOutBuffer() orelse return error.OutOfMemory;
        if (bytes.len > act.ocap - act.olen) {
            if (act.ooff > 0) self.compactOut();
            const need = @as(usize, act.olen) + bytes.len;
            if (need > act.ocap) {
                if (need > std.math.maxInt(u32)) return error.OutOfMemory;
                const size = @min(@max(need, @as(usize, act.ocap) * 2), std.math.maxInt(u32));
                _ = self.growOut(size) orelse return error.OutOfMemory;
            }
        }
        @memcpy(act.obuf.?[act.olen..][0..bytes.len], bytes);
        act.olen += @intCast(bytes.len);
    }

    /// Small framing bytes that must follow a pending (borrowed) body.
    fn queueSmall(self: *Conn, bytes: []const u8) error{OutOfMemory}!void {
        const act = self.a();
        if (act.pending.len == 0) return self.queue(bytes);
        if (bytes.len > act.tail.len - act.tail_len) return error.OutOfMemory;
        @memcpy(act.tail[act.tail_len..][0..bytes.len], bytes);
        act.tail_len += @intCast(bytes.len);
    }

    /// Small bodies are copied next to the head (one write); large ones are borrowed.
    fn queueOwned(self: *Conn, bytes: []const u8, owner: ?*anyopaque) error{OutOfMemory}!void {
        const act = self.a();
        const room = act.ocap - act.olen;
        if (bytes.len <= 4096 and bytes.len <= room) return self.queue(bytes);
        std.debug.assert(act.pending.len == 0);
        act.pending = bytes;
        act.pending_owner = owner;
        if (owner) |o| self.server.hooks.retain(o);
    }

    pub fn flush(self: *Conn) void {
        const act = self.act orelse return self.setWriting(false);
        // The writer thread has the output: its completion goes on from here.
        if (act.io_busy) return;
        if (self.canHandOff() and self.server.wantsHandOff() and self.handOff()) return;
        while (self.outputLen() != 0) {
            var iov: [3]std.posix.iovec_const = undefined;
            const n = self.outputIov(&iov);
            switch (self.sendv(iov[0..n])) {
                .ok => |written| {
                    self.advanceOutput(written);
                    // Progress: the write deadline starts again.
                    if (act.write_timer.armed()) self.server.write_timeouts.arm(&act.write_timer, self.server.now_ms);
                },
                .err => |e| {
                    if (e != .AGAIN) return self.close();
                    if (!act.write_timer.armed()) self.server.write_timeouts.arm(&act.write_timer, self.server.now_ms);
                    return self.setWriting(true);
                },
            }
        }
        self.flushed();
    }

    /// All output is written: wake the stream, then finish the response or go on.
    fn flushed(self: *Conn) void {
        const act = self.a();
        act.write_timer.disarm();
        if (self.interest.writable) self.setWriting(false);
        if (act.staged_head_len == 0) self.releaseOut();
        if (act.stream) |s| self.server.hooks.wakeWrite(s);
        if (self.state == .websocket) return wsconn.afterFlush(self);
        if (act.resp_complete and (self.state == .request or act.refused)) {
            if (act.resp_close_after and act.stream == null) return self.lingerClose();
            self.afterResponse();
        }
    }

    /// The output, in order: staged bytes, a borrowed body, the chunked tail. Returns how
    /// many of `iov` it filled.
    fn outputIov(self: *const Conn, iov: *[3]std.posix.iovec_const) usize {
        const act = self.a();
        var n: usize = 0;
        if (act.olen > act.ooff) {
            iov[n] = .{ .base = act.obuf.? + act.ooff, .len = act.olen - act.ooff };
            n += 1;
        }
        if (act.pending.len > 0) {
            iov[n] = .{ .base = act.pending.ptr, .len = act.pending.len };
            n += 1;
        }
        if (act.tail_len > 0) {
            iov[n] = .{ .base = &act.tail, .len = act.tail_len };
            n += 1;
        }
        return n;
    }

    /// Only the first write of a complete plain HTTP/1.1 response (nothing blocked yet):
    /// streaming, WebSocket, TLS and engine refusals stay inline.
    fn canHandOff(self: *const Conn) bool {
        const act = self.a();
        return self.server.writer_mode != .off and !self.is_tls and self.state == .request and
            act.resp_complete and !act.refused and act.ws == null and
            !self.interest.writable and self.outputLen() != 0;
    }

    fn handOff(self: *Conn) bool {
        const act = self.a();
        act.job = .{ .owner = self, .fd = self.fd };
        act.job.iov_len = @intCast(self.outputIov(&act.job.iov));
        if (!self.server.writer.?.submit(&act.job)) return false;
        act.io_busy = true;
        self.server.kickWriterSoon();
        return true;
    }

    /// The writer thread finished this connection's job (on the Python thread, in poll).
    pub fn writeDone(self: *Conn, job: *const writer_mod.Job) void {
        const act = self.a();
        std.debug.assert(act.io_busy and job == &act.job);
        act.io_busy = false;
        if (act.deferred_fd >= 0) {
            // Closed meanwhile: what close() left for now is done here.
            std.debug.assert(self.state == .closed);
            sys.close(act.deferred_fd);
            act.deferred_fd = -1;
            // close() already retired it (or finishStream will): the graveyard waited.
            self.dropOutput();
            return;
        }
        std.debug.assert(job.written <= self.outputLen());
        if (job.written > 0) self.advanceOutput(job.written);
        switch (job.err) {
            .SUCCESS => {
                std.debug.assert(self.outputLen() == 0);
                self.flushed();
            },
            .AGAIN => {
                // The client reads slowly: the rest goes inline on writable events.
                self.server.write_timeouts.arm(&act.write_timer, self.server.now_ms);
                self.setWriting(true);
            },
            else => self.close(),
        }
    }

    /// Whether the connection is on the server's pending list (a buffered request).
    pub fn isPending(self: *const Conn) bool {
        const act = self.act orelse return false;
        return act.is_pending;
    }

    /// Whether the writer thread holds this connection's output.
    pub fn ioBusy(self: *const Conn) bool {
        const act = self.act orelse return false;
        return act.io_busy;
    }

    /// Output bytes handed to the socket or to the writer thread.
    pub fn bytesSentOrQueued(self: *const Conn) u64 {
        const act = self.a();
        return act.bytes_sent + if (act.io_busy) act.job.bytes() else 0;
    }

    fn advanceOutput(self: *Conn, written: usize) void {
        const act = self.a();
        act.bytes_sent += written;
        self.server.bytes_out += written;
        if (self.server.metrics) |m| m.sent_bytes += written;
        var left = written;
        const head = @min(left, act.olen - act.ooff);
        act.ooff += @intCast(head);
        left -= head;
        if (act.ooff == act.olen) {
            act.ooff = 0;
            act.olen = 0;
        }
        if (left > 0 and act.pending.len > 0) {
            const p = @min(left, act.pending.len);
            act.pending = act.pending[p..];
            left -= p;
            if (act.pending.len == 0) self.releasePending();
        }
        if (left > 0) {
            std.debug.assert(left <= act.tail_len);
            std.mem.copyForwards(u8, act.tail[0 .. act.tail_len - left], act.tail[left..act.tail_len]);
            act.tail_len -= @intCast(left);
        }
        // Framing bytes parked behind a borrowed body move up once it is gone.
        if (act.pending.len == 0 and act.tail_len > 0 and act.olen == 0) {
            const t = act.tail_len;
            act.tail_len = 0;
            self.queue(act.tail[0..t]) catch {};
        }
    }

    fn releasePending(self: *Conn) void {
        const act = self.a();
        act.pending = &.{};
        if (act.pending_owner) |o| {
            act.pending_owner = null;
            self.server.hooks.release(o);
        }
    }

    fn compactOut(self: *Conn) void {
        const act = self.a();
        const buf = act.obuf orelse return;
        const n = act.olen - act.ooff;
        std.mem.copyForwards(u8, buf[0..n], buf[act.ooff..act.olen]);
        act.ooff = 0;
        act.olen = n;
    }

    // ---- buffers and interest -------------------------------------------------

    fn ensureReadBuffer(self: *Conn) ?*Buffer {
        const act = self.a();
        if (act.rbuf == null) act.rbuf = self.server.pool.acquire();
        return act.rbuf;
    }

    pub fn ensureOutBuffer(self: *Conn) ?[]u8 {
        const act = self.a();
        if (act.obuf == null) {
            const b = self.server.pool.acquire() orelse return null;
            act.obuf = b;
            act.ocap = buffer_bytes;
        }
        return act.obuf.?[0..act.ocap];
    }

    /// Replaces the output buffer by a heap one of `size` bytes, keeping its contents.
    fn growOut(self: *Conn, size: usize) ?[]u8 {
        const act = self.a();
        const heap = std.heap.c_allocator.alloc(u8, size) catch return null;
        if (act.obuf) |old| @memcpy(heap[0..act.olen], old[0..act.olen]);
        self.releaseOutMemory();
        act.obuf = heap.ptr;
        act.ocap = @intCast(size);
        return heap;
    }

    fn releaseOutMemory(self: *Conn) void {
        const act = self.a();
        const b = act.obuf orelse return;
        if (act.ocap == buffer_bytes) {
            self.server.pool.release(@ptrCast(@alignCast(b)));
        } else {
            std.heap.c_allocator.free(b[0..act.ocap]);
        }
        act.obuf = null;
        act.ocap = 0;
    }

    fn releaseOut(self: *Conn) void {
        const act = self.a();
        self.releaseOutMemory();
        act.ooff = 0;
        act.olen = 0;
    }

    fn compact(self: *Conn) void {
        const act = self.a();
        const buf = act.rbuf orelse return;
        if (act.rstart == 0) return;
        const n = act.rlen - act.rstart;
        std.mem.copyForwards(u8, buf[0..n], buf[act.rstart..act.rlen]);
        act.rstart = 0;
        act.rlen = n;
    }

    /// An idle connection gives its buffers back: it holds only this struct.
    fn releaseIdleBuffers(self: *Conn) void {
        const act = self.a();
        if (act.rbuf) |b| {
            if (act.rstart == act.rlen) {
                self.server.pool.release(b);
                act.rbuf = null;
                act.rstart = 0;
                act.rlen = 0;
            }
        }
    }

    pub fn setReading(self: *Conn, on: bool) void {
        if (self.interest.readable == on or self.fd < 0) return;
        self.interest.readable = on;
        if (on and self.tlsPending()) self.interest.writable = true;
        _ = self.server.poller.update(self.fd, @intFromPtr(self), self.interest);
    }

    fn setWriting(self: *Conn, on: bool) void {
        if (self.interest.writable == on or self.fd < 0) return;
        if (!on and self.interest.readable and self.tlsPending()) return;
        self.interest.writable = on;
        _ = self.server.poller.update(self.fd, @intFromPtr(self), self.interest);
    }

    // ---- transport: the plain socket, or TLS over it ------------------------------

    /// HTTPS. The handshake comes first (its deadline is the header timeout, counted
    /// from the accept). A TLS record can need the other direction (a read may have to
    /// write, decrypted bytes may wait inside OpenSSL), so any event retries both sides.
    fn onTlsEvent(self: *Conn, readable: bool, writable: bool, hangup: bool) void {
        const ssl = self.session().?;
        if (self.state == .closed) return;
        if (!tls.handshakeDone(ssl)) switch (tls.handshake(ssl)) {
            .ok => {},
            .want_read => return self.setWriting(false),
            .want_write => return self.setWriting(true),
            .failed => return self.close(),
        };
        const had_output = self.act != null and self.outputLen() != 0;
        if (had_output) self.flush() else if (self.interest.writable) self.setWriting(false);
        if (self.state == .closed) return;
        // Writable with nothing to send: a read asked for it (it had to write, or left
        // decrypted bytes inside OpenSSL), so the read is retried.
        const read_retry = writable and !had_output;
        if (!(readable or hangup or read_retry or self.tlsPending())) return;
        if (self.interest.readable) {
            self.onReadable();
        } else if (hangup) {
            self.close();
        }
        // Only part of a record arrived: an idle connection keeps no buffer while it waits.
        self.releaseIfIdle();
    }

    fn recv(self: *Conn, buf: []u8) sys.Result(usize) {
        const ssl = self.session() orelse return sys.read(self.fd, buf);
        const r: sys.Result(usize) = switch (tls.read(ssl, buf)) {
            .ok => |n| .{ .ok = n },
            .want_read => .{ .err = .AGAIN },
            .want_write => blk: {
                self.setWriting(true);
                break :blk .{ .err = .AGAIN };
            },
            .failed => .{ .err = .CONNRESET },
        };
        // More decrypted bytes than fitted: come back for them on the next pass.
        if (r == .ok and r.ok > 0 and self.tlsPending()) self.setWriting(true);
        return r;
    }

    fn sendv(self: *Conn, iov: []const std.posix.iovec_const) sys.Result(usize) {
        const ssl = self.session() orelse return sys.writev(self.fd, iov);
        var parts: [3][]const u8 = undefined;
        const n = @min(iov.len, parts.len);
        for (iov[0..n], 0..) |v, i| parts[i] = v.base[0..v.len];
        return switch (tls.writev(ssl, parts[0..n])) {
            .ok => |written| .{ .ok = written },
            // A write waiting on a read (renegotiation is off, so only in odd states):
            // retried on the next event like any blocked write, bounded by the write timeout.
            .want_read, .want_write => .{ .err = .AGAIN },
            .failed => .{ .err = .PIPE },
        };
    }

    /// Decrypted request bytes wait in OpenSSL while we still read: writable interest
    /// (nearly always ready) stands in for the readiness the socket no longer signals.
    fn tlsPending(self: *const Conn) bool {
        const ssl = self.session() orelse return false;
        if (self.state != .head and self.state != .request) return false;
        return tls.handshakeDone(ssl) and tls.hasPending(ssl);
    }

    /// Whether the connection is HTTPS (the scope's scheme is https / wss).
    pub fn secure(self: *const Conn) bool {
        return self.is_tls;
    }

    // ---- closing --------------------------------------------------------------

    /// Stops sending, then reads and drops what the peer still sends for a moment:
    /// closing with unread bytes would reset the connection and could destroy the
    /// response the peer has not read yet.
    pub fn lingerClose(self: *Conn) void {
        const act = self.a();
        // TLS: close_notify tells the client the (possibly close-delimited) body is whole.
        if (self.session()) |ssl| tls.shutdown(ssl);
        if (act.rstart == act.rlen and act.body_done and self.state == .request) {
            // Nothing unread: a plain close loses nothing.
            if (!act.keep_alive) return self.close();
        }
        sys.shutdownWrite(self.fd);
        self.state = .lingering;
        self.releaseIdleBuffers();
        if (act.rbuf) |b| {
            self.server.pool.release(b);
            act.rbuf = null;
        }
        act.rstart = 0;
        act.rlen = 0;
        self.server.linger_timeouts.arm(&self.timer, self.server.now_ms);
        self.setReading(true);
    }

    fn drainLinger(self: *Conn) void {
        var scratch: [4096]u8 = undefined;
        switch (sys.read(self.fd, &scratch)) {
            .ok => |n| if (n == 0) self.close(),
            .err => |e| if (e != .AGAIN) self.close(),
        }
    }

    /// Closes the socket now. The struct lives on while a stream still points at it.
    pub fn close(self: *Conn) void {
        if (self.state == .closed) return;
        self.state = .closed;
        self.timer.disarm();
        self.server.poller.unregister(self.fd);
        self.endSession();
        // The writer thread may be writing to it: the number must not be reused yet.
        if (self.ioBusy()) self.a().deferred_fd = self.fd else sys.close(self.fd);
        self.fd = -1;
        self.server.connectionClosed(self);
        const act = self.act orelse return self.server.retire(self);
        act.write_timer.disarm();
        if (act.rbuf) |b| self.server.pool.release(b);
        act.rbuf = null;
        act.rstart = 0;
        act.rlen = 0;
        // A busy connection's output is dropped by writeDone; the graveyard waits for it.
        if (!act.io_busy) self.dropOutput();
        if (act.stream) |s| {
            self.server.hooks.wakeRead(s);
            self.server.hooks.wakeWrite(s);
        } else {
            self.server.retire(self);
        }
    }

    fn dropOutput(self: *Conn) void {
        const act = self.a();
        std.debug.assert(!act.io_busy);
        self.releaseOutMemory();
        act.ooff = 0;
        act.olen = 0;
        act.tail_len = 0;
        self.releasePending();
    }

    /// Closed, or answered by the engine: the app sees a disconnect.
    pub fn gone(self: *const Conn) bool {
        return self.state == .closed or (self.act != null and self.a().refused);
    }

    pub fn isIdle(self: *const Conn) bool {
        const act = self.act orelse return self.state == .head;
        return self.state == .head and act.stream == null and act.rstart == act.rlen;
    }
};

comptime {
    // 88 bytes is one 96-byte malloc chunk: what an idle keep-alive connection costs.
    // Growing past it costs 16 bytes on every connection; move the field into Active.
    if (@sizeOf(Conn) > 88) @compileError(std.fmt.comptimePrint("Conn is {d} bytes", .{@sizeOf(Conn)}));
}
