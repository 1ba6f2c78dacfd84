//! The engine's loop: the listening socket, accept, dispatching readiness to
//! connections, timeouts, and the bookkeeping that lets a drain lose nothing.
//!
//! `poll` never blocks: the host (Python's asyncio loop) watches `poller.fd` and calls
//! `poll` when it is readable, so the app and the engine share one thread and one loop.
const std = @import("std");
const http_fields = @import("../http/fields.zig");
const per_ip = @import("../features/per_ip.zig");
const proxy_protocol = @import("../features/proxy_protocol.zig");
const lifetime = @import("../transport/connection_age.zig");
const rate_limit = @import("../features/rate_limit.zig"); // the server owns the request-rate table the protocols consult
const metrics = @import("../features/metrics.zig"); // the server keeps the date cache and the metrics slot the protocols use
const linux = std.os.linux;
const sys = @import("../os/sys.zig");
const io = @import("../os/io.zig");
const stream_mod = @import("stream.zig");
const Stream = stream_mod.Stream;
const Pool = @import("../os/buffer_pool.zig").Pool;
const timer = @import("../os/deadlines.zig");
const response = @import("../http/response.zig"); // the server keeps the date cache and the metrics slot the protocols use
const conn_mod = @import("connection.zig");
const Conn = conn_mod.Conn;
const protocol = @import("protocol.zig");
const deflate = @import("../features/websocket_deflate.zig"); // the server owns the zlib library WebSocket sessions share (loaded once)
const tls = @import("../transport/openssl.zig");
const writer_mod = @import("../transport/writer_thread.zig");
const options = @import("options.zig");
const hooks_mod = @import("hooks.zig");
const offload_mod = @import("thread_load.zig"); // the writer thread's `auto` measure and the busy poll

pub const Options = options.Options;
pub const TcpOptions = options.TcpOptions;
pub const WriterMode = options.WriterMode;
pub const Http3 = options.Http3;
pub const Http3Retry = options.Http3Retry;

pub const LogLevel = hooks_mod.LogLevel;
pub const Hooks = hooks_mod.Hooks;
pub const PassSoon = hooks_mod.PassSoon;

/// Why a connection was closed at accept (the label of `/metrics`' rejections).
pub const RejectCause = metrics.RejectCause;
const Rejected = struct { limit_connections: u64 = 0, limit_per_ip: u64 = 0 };

/// At most one "accepting paused" warning per this long.
const accept_warning_interval_ms: u64 = 60_000;

const token_listen: usize = 1;
const token_timer: usize = 2;
const token_wake: usize = 3;
const token_quic: usize = 4;
const token_quic_timer: usize = 5;

/// HTTP/3's worker (`http3/worker.zig`, made by the engine when `--http3` is on), as the
/// server drives it without importing it: its UDP socket and its timer fd are polled here
/// under their own tokens, its output is written when the loop's pass ends (`settleBegin`),
/// and its stream verbs are the seam's `.http3` branches (`protocol.Http3Verbs`).
pub const QuicPlug = struct {
    ctx: *anyopaque,
    udp_fd: i32,
    timer_fd: i32,
    on_readable: *const fn (ctx: *anyopaque) void,
    on_timer: *const fn (ctx: *anyopaque) void,
    /// The UDP socket takes datagrams again, after `Server.quicWatchWritable(true)`.
    on_writable: *const fn (ctx: *anyopaque) void,
    flush: *const fn (ctx: *anyopaque) void,
    /// The drain starts: each connection is sent GOAWAY and closes once its requests are done.
    drain: *const fn (ctx: *anyopaque) void,
    /// The drain's deadline: WebSockets carried by its streams (RFC 9220) are closed (1001).
    close_websockets: *const fn (ctx: *anyopaque) void,
    /// The server stops: every QUIC connection is closed and freed.
    deinit: *const fn (ctx: *anyopaque) void,
    /// QUIC connections still open (a drain waits for them as for TCP's).
    connections: *const fn (ctx: *anyopaque) u32,
    verbs: *const protocol.Http3Verbs,
};

/// A request head must fit one pooled read buffer...
pub const request_head_bytes_max = @import("../os/buffer_pool.zig").buffer_bytes;
/// ...and its fields the server's header storage (`Config` validates against both).
pub const request_fields_max = 128;

pub const Server = struct {
    allocator: std.mem.Allocator,
    /// The I/O backend: the event source and every socket operation.
    io: io.Backend,
    listen_fd: i32 = -1,
    timer_fd: i32 = -1,
    wake_fd: i32 = -1,
    wake_signalled: bool = false,
    /// `signalWake` asked the loop for a pass (`Hooks.passSoon`); cleared when it comes.
    pass_asked: bool = false,
    hooks: Hooks,
    /// Each protocol's verbs, which the seam (`core/protocol.zig`) calls them by, and the
    /// engine's answer before the app: the server's wiring (`server/wiring.zig`) hands them
    /// over, so the core imports no protocol (docs/ARCHITECTURE.md).
    wiring: *const protocol.Wiring,
    /// What the server runs with, as given (python/options.zig reads it from Config's dict).
    opts: Options,
    /// Set when the server speaks HTTPS: every accepted connection starts a TLS session.
    tls_ctx: ?*tls.SSL_CTX = null,
    pool: Pool = .{},
    headers_storage: [request_fields_max]http_fields.Header = undefined,
    batch: io.Backend.Batch = .{},
    date: response.DateCache = .{},
    metrics: ?*metrics.Slot,
    /// The socket option the kernel refused in `adopt`, for the error message.
    refused_option: []const u8 = "",
    ws_ping_enabled: bool,
    zlib: deflate.Shared = .{},
    writer_mode: WriterMode,
    /// What the options asked for (`writer_mode` falls back to `.off` without a thread).
    writer_mode_configured: WriterMode,
    /// Started on first use (`auto`) or in init (`on`), joined in deinit.
    writer: ?*writer_mod.Writer = null,
    /// `auto`'s measure of the Python thread: whether the writer thread should take responses.
    offload: offload_mod.Measure = .{},

    idle_timeouts: timer.Queue,
    header_timeouts: timer.Queue,
    body_timeouts: timer.Queue,
    write_timeouts: timer.Queue,
    /// HTTP/2: output that waits on a flow-control window the peer does not open (the
    /// connection's own timer; the write timeout's duration).
    stall_timeouts: timer.Queue,
    linger_timeouts: timer.Queue = .{ .timeout_ms = 2_000, .id = 5 },
    /// An open WebSocket is pinged this long after its last pong (or its accept)...
    ws_ping_timeouts: timer.Queue,
    /// ...and closed with 1011 if the pong does not come within this.
    ws_pong_timeouts: timer.Queue,
    /// The same two for WebSockets carried by HTTP/2 and HTTP/3 streams, whose sessions
    /// have timers of their own (the connection's serves the connection).
    ws_stream_ping_timeouts: timer.Queue,
    ws_stream_pong_timeouts: timer.Queue,
    now_ms: u64 = 0,
    /// `--timeout-connection`: stamps accept times and tells which connections are too old.
    lifetime: lifetime.Lifetime = .{},
    /// `--timeout-connection` over HTTP/2: each session's own timer (not the connection's),
    /// due when its age passes, for a GOAWAY even while nothing happens on the connection.
    /// Entries have their own deadlines (`Queue.armAt`): the timeout is not used.
    lifetime_timeouts: timer.Queue = .{ .timeout_ms = 0, .id = 9 },

    /// Every open connection, for draining and shutdown.
    live: ?*Conn = null,
    /// Closed connections whose memory is freed at the end of `poll`, so an event later
    /// in the same batch never touches freed memory.
    graveyard: ?*Conn = null,
    /// Connections with a buffered pipelined request to parse on the next pass.
    pending: ?*Conn = null,
    /// HTTP/2 connections whose streams queued output during this pass of the loop:
    /// flushed together when the pass ends (`settleBegin`), one write for many streams.
    flush_soon: ?*Conn = null,
    /// `--http3`: the worker's QUIC endpoint (`plugQuic`).
    quic: ?QuicPlug = null,
    quic_flush_wanted: bool = false,
    in_poll: bool = false,
    /// The server's life, as the engine answers for it: `ready` false until the app's
    /// startup is over (every request but the health, ready and metrics paths then gets
    /// 503 with retry-after); `draining` from the drain's start (health and ready paths
    /// say 503, HTTP/1.1 responses close their connection, HTTP/2 connections are told to
    /// go), while the listener may still accept for a delay; `going_away` once the
    /// drain's deadline came (WebSockets are closed with 1001, even one accepted now).
    ready: bool = true,
    draining: bool = false,
    /// A worker retired while the others serve on (SIGHUP's old generation,
    /// --workers-max-rss): it drains, but its health and ready paths go on saying 200 for
    /// the last connections it takes, since the server as a whole still wants traffic.
    retiring: bool = false,
    going_away: bool = false,
    /// Busy poll: once every stream is done, poll without sleeping for up to this long
    /// before the loop goes back to its blocking wait (0: never).
    spin_ns: u64,
    /// `settle` is scheduled and has not run yet; what it is to do.
    settle_pending: bool = false,
    spin_wanted: bool = false,
    kick_wanted: bool = false,
    io_submit_wanted: bool = false,
    /// The busy poll's back-off after misses, and the time it spent.
    busy_poll: offload_mod.BusyPoll = .{},

    /// The listener is out of the event set after EMFILE/ENFILE/ENOBUFS/ENOMEM (`pauseAccepting`).
    accept_paused: bool = false,
    accept_pauses: u64 = 0,
    accept_warned_ms: u64 = 0,
    /// Open connections per address (`--limit-connections-per-ip`), made on first use.
    per_ip_table: ?per_ip.Table = null,
    /// `--limit-request-rate`: the token buckets, made on first use.
    limiter: ?rate_limit.Limiter = null,
    /// Connections closed at accept, by cause, and when that was last logged.
    rejected: Rejected = .{},
    rejected_logged: Rejected = .{},
    rejected_warned_ms: u64 = 0,

    connections: u32 = 0,
    streams: u32 = 0,
    requests_total: u64 = 0,
    bytes_in: u64 = 0,
    bytes_out: u64 = 0,

    pub fn init(
        allocator: std.mem.Allocator,
        hooks: Hooks,
        opts: Options,
        wiring: *const protocol.Wiring,
    ) !*Server {
        const self = try allocator.create(Server);
        errdefer allocator.destroy(self);
        self.* = .{
            .allocator = allocator,
            .io = try io.Backend.init(opts.io),
            .hooks = hooks,
            .wiring = wiring,
            .opts = opts,
            .metrics = opts.metrics,
            .ws_ping_enabled = opts.ws_ping_interval_ms > 0,
            .writer_mode = opts.writer,
            .writer_mode_configured = opts.writer,
            .spin_ns = opts.spin_ns,
            .ws_ping_timeouts = .{ .timeout_ms = opts.ws_ping_interval_ms, .id = 6 },
            .ws_pong_timeouts = .{ .timeout_ms = opts.ws_ping_timeout_ms, .id = 7 },
            .ws_stream_ping_timeouts = .{ .timeout_ms = opts.ws_ping_interval_ms, .id = 10 },
            .ws_stream_pong_timeouts = .{ .timeout_ms = opts.ws_ping_timeout_ms, .id = 11 },
            .idle_timeouts = .{ .timeout_ms = opts.timeout_keep_alive_ms, .id = 1 },
            .header_timeouts = .{ .timeout_ms = opts.timeout_header_ms, .id = 2 },
            .body_timeouts = .{ .timeout_ms = opts.timeout_body_ms, .id = 3 },
            .write_timeouts = .{ .timeout_ms = opts.timeout_write_ms, .id = 4 },
            .stall_timeouts = .{ .timeout_ms = opts.timeout_write_ms, .id = 8 },
        };
        errdefer self.io.deinit();
        self.now_ms = sys.monotonicMs();
        self.lifetime = lifetime.Lifetime.init(opts.timeout_connection_s, self.now_ms);
        self.date.update(sys.realtimeSeconds());

        const tfd_rc = linux.timerfd_create(.MONOTONIC, .{ .NONBLOCK = true, .CLOEXEC = true });
        if (sys.E.init(tfd_rc) != .SUCCESS) return error.TimerCreateFailed;
        self.timer_fd = @intCast(tfd_rc);
        const second = linux.timespec{ .sec = 1, .nsec = 0 };
        const spec = linux.itimerspec{ .it_interval = second, .it_value = second };
        _ = linux.timerfd_settime(self.timer_fd, .{}, &spec, null);
        _ = self.io.registerPollable(self.timer_fd, token_timer);

        const efd_rc = linux.eventfd(0, linux.EFD.NONBLOCK | linux.EFD.CLOEXEC);
        if (sys.E.init(efd_rc) != .SUCCESS) return error.EventFdFailed;
        self.wake_fd = @intCast(efd_rc);
        _ = self.io.registerPollable(self.wake_fd, token_wake);
        self.io.setKick(.{ .ctx = self, .func = ioKick });
        if (opts.writer == .on) self.startWriter();
        return self;
    }

    /// Without a thread (out of memory, thread limit) every write stays inline.
    fn startWriter(self: *Server) void {
        const w = self.allocator.create(writer_mod.Writer) catch {
            self.writer_mode = .off;
            return;
        };
        w.* = .{ .wake_fd = self.wake_fd };
        w.start() catch {
            self.allocator.destroy(w);
            self.writer_mode = .off;
            return;
        };
        self.writer = w;
    }

    /// Asked once per complete plain response, just before it is written: whether the
    /// writer thread should take it.
    pub fn wantsHandOff(self: *Server) bool {
        switch (self.writer_mode) {
            .off => return false,
            .on => return self.writer != null,
            .auto => {},
        }
        self.offload.count(self.busy_poll.spun_ns);
        // A lone connection gains nothing from a hand-over: nothing else could run
        // meanwhile. (Not streams in flight: with eager tasks, 3.12+, a request often
        // finishes before the next one is even parsed.)
        if (!self.offload.offloading or self.connections < 2) return false;
        if (self.writer == null) self.startWriter();
        return self.writer != null;
    }

    /// Applies the writer thread's finished jobs: each connection goes on where its
    /// inline write would have.
    fn applyWrites(self: *Server) void {
        const w = self.writer orelse return;
        var jobs: [64]*writer_mod.Job = undefined;
        while (true) {
            const n = w.take(&jobs);
            for (jobs[0..n]) |job| {
                const c: *Conn = @ptrCast(@alignCast(job.owner));
                c.writeDone(job);
            }
            if (n < jobs.len) return;
        }
    }

    /// Serves an already listening socket (inherited, or bound by the master).
    /// Python binds every socket (TCP, Unix, inherited, systemd's) and hands it over here.
    pub fn adopt(self: *Server, fd: i32) !void {
        // Workers share one listening socket: a blocking accept() after another worker
        // won the race would freeze this one, so the socket must be non-blocking.
        const flags = linux.fcntl(fd, linux.F.GETFL, 0);
        if (sys.E.init(flags) != .SUCCESS) return error.BadSocket;
        const nonblock: usize = @as(u32, @bitCast(linux.O{ .NONBLOCK = true }));
        if (sys.E.init(linux.fcntl(fd, linux.F.SETFL, flags | nonblock)) != .SUCCESS) return error.BadSocket;
        if (self.opts.tcp.apply(fd)) |name| {
            self.refused_option = name;
            return error.SocketOption;
        }
        if (!self.io.registerListener(fd, token_listen)) return error.RegisterFailed;
        self.listen_fd = fd;
    }

    pub fn stopAccepting(self: *Server) void {
        if (self.listen_fd < 0) return;
        if (self.accept_paused) sys.close(self.listen_fd) else self.io.close(self.listen_fd);
        self.listen_fd = -1;
    }

    /// Processes every ready event without blocking.
    pub fn poll(self: *Server) void {
        self.pass_asked = false;
        // A field, not a local: a local `undefined` array is filled with 0xaa on every call in safe builds.
        self.io.wait(&self.batch, 0);
        self.process();
    }

    /// Handles the events in `batch` (filled by `poll` or `spinWait`).
    pub fn process(self: *Server) void {
        std.debug.assert(!self.in_poll);
        self.in_poll = true;
        defer self.in_poll = false;
        const batch = &self.batch;
        self.applyWrites();
        for (0..batch.len) |i| {
            const ev = batch.get(i);
            switch (ev.token) {
                token_listen => self.acceptAll(),
                token_timer => self.tick(),
                token_wake => self.clearWake(),
                token_quic => if (self.quic) |q| {
                    if (ev.writable) q.on_writable(q.ctx);
                    if (ev.readable or ev.hangup) q.on_readable(q.ctx);
                },
                token_quic_timer => if (self.quic) |q| q.on_timer(q.ctx),
                else => {
                    const c: *Conn = @ptrFromInt(ev.token);
                    if (ev.sent) c.ringSent(ev.result) else c.onEvent(ev.readable, ev.writable, ev.hangup);
                },
            }
        }
        self.runPending();
        self.freeGraveyard();
        // io_uring: polls and receives the handled events still need, and a wake-up for
        // events beyond this batch.
        self.io.rearm();
        if (self.io.hasBacklog()) self.signalWake();
        // What `rearm` queued waits for the next `wait`: zigcorn's loop comes at once
        // (`needsWait`); uvloop and asyncio sleep on the ring's descriptor, so are asked.
        if (self.io.unsubmitted()) _ = self.passComing();
    }

    /// Another pass, once until then: asked of the loop, else the wake-up descriptor (whose
    /// write by this thread, polled in the ring, never woke uvloop on the ring's descriptor);
    /// nothing under zigcorn's loop, which asks `needsPass` before it waits.
    fn signalWake(self: *Server) void {
        if (self.passComing() or self.wake_signalled) return;
        self.wake_signalled = true;
        const one: u64 = 1;
        _ = linux.write(self.wake_fd, std.mem.asBytes(&one), 8);
    }

    /// Whether another pass comes without the wake-up descriptor: asked of the loop
    /// (`Hooks.passSoon`, once until it comes), or zigcorn's loop, which checks `needsPass`.
    fn passComing(self: *Server) bool {
        if (self.pass_asked) return true;
        switch (self.hooks.passSoon()) {
            .asked => self.pass_asked = true,
            .loop_checks => {},
            .refused => return false,
        }
        return true;
    }

    /// Work is due that the event source does not show: the backend's own (io_uring's
    /// queued entries, events beyond the last batch, task work) or a connection scheduled
    /// for another pass (a pipelined request). zigcorn's loop asks before every wait.
    pub fn needsPass(self: *Server) bool {
        return self.pending != null or self.io.needsWait();
    }

    /// io_uring: an operation was queued outside `wait`; it is submitted when the pass ends.
    fn ioKick(ctx: *anyopaque) void {
        const self: *Server = @ptrCast(@alignCast(ctx));
        self.io_submit_wanted = true;
        self.settleSoon();
    }

    fn acceptAll(self: *Server) void {
        // Bounded, so one busy listener cannot starve the connections already open.
        var n: usize = 0;
        while (n < 256 and self.listen_fd >= 0) : (n += 1) {
            var st: linux.sockaddr.storage = undefined;
            const fd = switch (self.io.accept(self.listen_fd, &st)) {
                .ok => |fd| fd,
                .err => |e| switch (e) {
                    .AGAIN => return,
                    // The peer gave up between SYN and accept: try the next one.
                    .CONNABORTED, .PROTO, .PERM => continue,
                    // Out of descriptors or memory: the listener stays readable, so polling
                    // it again at once would spin. The rest waits in the backlog.
                    .MFILE, .NFILE, .NOBUFS, .NOMEM => return self.pauseAccepting(e),
                    else => return,
                },
            };
            if (self.connections >= self.opts.connections_max) {
                sys.close(fd);
                self.reject(.limit_connections);
                continue;
            }
            if (self.opts.tcp.nodelay) _ = sys.setIntOption(fd, linux.IPPROTO.TCP, linux.TCP.NODELAY, 1);
            _ = self.addConnection(fd, conn_mod.Peer.fromStorage(&st));
        }
    }

    /// Serves a connected socket (non-blocking): a new Conn, watched, with its first
    /// request head due within the header timeout. On failure the socket is closed.
    pub fn addConnection(self: *Server, fd: i32, peer: conn_mod.Peer) ?*Conn {
        // --limit-connections-per-ip: every connection with an address is counted here,
        // and uncounted in `connectionClosed` (or below, if it never opens).
        const key = if (self.opts.connections_per_ip_max != 0) per_ip.keyOf(&peer) else null;
        if (key) |k| {
            if (self.per_ip_table == null) self.per_ip_table = per_ip.Table.init(self.allocator);
            // Out of memory for the table refuses the connection, as for the Conn itself.
            const admitted = self.per_ip_table.?.acquire(k, self.opts.connections_per_ip_max) catch false;
            if (!admitted) {
                sys.close(fd);
                self.reject(.limit_per_ip);
                return null;
            }
        }
        const c = self.newConn(fd, peer) orelse {
            sys.close(fd);
            if (key) |k| self.per_ip_table.?.release(k);
            self.hooks.logError("out of memory for a new connection: closed");
            return null;
        };
        if (!self.io.register(fd, @intFromPtr(c), c.interest)) {
            sys.close(fd);
            if (key) |k| self.per_ip_table.?.release(k);
            self.destroyConn(c);
            return null;
        }
        if (self.opts.proxy_protocol and self.trustsPeer(&peer)) c.state = .proxy;
        self.link(c);
        self.connections += 1;
        if (self.metrics) |m| m.connections_open = self.connections;
        self.header_timeouts.arm(&c.timer, self.now_ms);
        if (self.lifetime.enabled()) c.timer.setStamp(self.lifetime.stamp(sys.monotonicMs()));
        return c;
    }

    /// `--timeout-connection`: the connection is past its age, so its current response is
    /// its last (asked when a request begins and when a response ends).
    pub fn connectionExpired(self: *const Server, c: *const Conn) bool {
        if (!self.lifetime.enabled()) return false;
        return self.lifetime.expired(c.timer.stamp(), sys.monotonicMs());
    }

    /// `--timeout-connection`: arms `entry` (an HTTP/2 session's) to be due when `c` is
    /// past its age, never before (`lifetime_timeouts`); nothing when there is no limit.
    pub fn armLifetime(self: *Server, c: *const Conn, entry: *timer.Entry) void {
        if (!self.lifetime.enabled()) return;
        const now = sys.monotonicMs();
        self.lifetime_timeouts.armAt(entry, now +| self.lifetime.remainingMs(c.timer.stamp(), now));
    }

    /// Takes the listener out of the event set until the next tick (about a second, as
    /// asyncio waits after the same errors): connections that close meanwhile free
    /// descriptors. One warning per `accept_warning_interval_ms`, counting the pauses since.
    fn pauseAccepting(self: *Server, err: sys.E) void {
        if (self.accept_paused or self.listen_fd < 0) return;
        self.io.unregister(self.listen_fd);
        self.accept_paused = true;
        self.accept_pauses += 1;
        if (self.metrics) |m| m.accept_pauses += 1;
        if (self.now_ms < self.accept_warned_ms + accept_warning_interval_ms and self.accept_warned_ms != 0) return;
        self.accept_warned_ms = @max(self.now_ms, 1);
        var buf: [200]u8 = undefined;
        const why = switch (err) {
            .MFILE => "the process is out of file descriptors (raise `ulimit -n` or lower --limit-connections)",
            .NFILE => "the system is out of file descriptors",
            else => "the system is out of socket memory",
        };
        const text = std.fmt.bufPrint(&buf, "Accepting paused for a second: {s}; {d} pause(s) so far.", .{ why, self.accept_pauses }) catch why;
        self.hooks.logWarning(text);
    }

    fn resumeAccepting(self: *Server) void {
        if (!self.accept_paused) return;
        self.accept_paused = false;
        if (self.listen_fd < 0) return;
        if (!self.io.registerListener(self.listen_fd, token_listen)) return self.pauseAccepting(.NOMEM);
        self.acceptAll();
    }

    fn tick(self: *Server) void {
        var expirations: u64 = 0;
        _ = sys.read(self.timer_fd, std.mem.asBytes(&expirations));
        self.now_ms = sys.monotonicMs();
        self.date.update(sys.realtimeSeconds());
        self.resumeAccepting();
        inline for (.{ &self.idle_timeouts, &self.header_timeouts, &self.linger_timeouts, &self.body_timeouts, &self.stall_timeouts }) |q| {
            while (q.popExpired(self.now_ms)) |entry| {
                const c: *Conn = @fieldParentPtr("timer", entry);
                c.timedOut();
            }
        }
        while (self.ws_ping_timeouts.popExpired(self.now_ms)) |entry| {
            protocol.pingDue(entry);
        }
        while (self.ws_pong_timeouts.popExpired(self.now_ms)) |entry| {
            protocol.pongTimeout(entry);
        }
        while (self.ws_stream_ping_timeouts.popExpired(self.now_ms)) |entry| {
            protocol.streamPingDue(self.wiring.websocket, entry);
        }
        while (self.ws_stream_pong_timeouts.popExpired(self.now_ms)) |entry| {
            protocol.streamPongTimeout(self.wiring.websocket, entry);
        }
        while (self.write_timeouts.popExpired(self.now_ms)) |entry| {
            const act: *conn_mod.Active = @fieldParentPtr("write_timer", entry);
            act.conn.close();
        }
        // The clock itself: `now_ms` may be a little behind the one the deadlines came from.
        while (self.lifetime_timeouts.popExpired(sys.monotonicMs())) |entry| {
            protocol.lifetimeDue(self.wiring.http2, entry);
        }
        if (self.io.uring) |u| {
            self.reportRingFailures(u);
            // A burst's receive buffers go back once a second has passed without one.
            _ = u.trim();
        }
        if (self.metrics) |m| {
            m.resident_bytes = metrics.residentBytes();
            if (self.io.uring) |u| {
                m.io_buffer_waits = u.buffer_waits;
                m.io_buffers = u.buf_provided;
                m.io_slots = u.table.slots.len;
            }
        }
        // Load has passed: the per-request structs freed to malloc go back to the OS too.
        if (self.pool.trim()) sys.trimHeap();
    }

    /// Asks for another pass (a pipelined request waits in a buffer).
    pub fn schedule(self: *Server, c: *Conn) void {
        // Only a connection with a buffered request is scheduled, so it has its Active.
        const act = c.act orelse return;
        if (act.is_pending) return;
        act.is_pending = true;
        act.pending_next = self.pending;
        self.pending = c;
        if (!self.in_poll) self.signalWake();
    }

    fn clearWake(self: *Server) void {
        var v: u64 = 0;
        _ = sys.read(self.wake_fd, std.mem.asBytes(&v));
        self.wake_signalled = false;
    }

    fn runPending(self: *Server) void {
        // Take the list as it is: connections scheduled while running wait for the next pass.
        var list = self.pending;
        self.pending = null;
        while (list) |c| {
            // releaseActive() leaves a pending connection's Active in place.
            const act = c.act.?;
            list = act.pending_next;
            act.pending_next = null;
            act.is_pending = false;
            // HTTP/2 too: frames read before its reading paused (its output was long)
            // wait in the buffer, and nothing else makes it read them if the client,
            // waiting on us, sends nothing more (a WINDOW_UPDATE, a request's HEADERS).
            if (protocol.parsesBuffered(c)) c.process();
            // An event may have consumed the buffered bytes meanwhile, leaving the
            // connection idle with the Active releaseActive() kept for this list.
            c.releaseIfIdle();
        }
        if (self.pending != null) self.signalWake();
    }

    fn link(self: *Server, c: *Conn) void {
        c.prev = null;
        c.next = self.live;
        if (self.live) |h| h.prev = c;
        self.live = c;
    }

    fn unlink(self: *Server, c: *Conn) void {
        if (c.prev) |p| p.next = c.next else self.live = c.next;
        if (c.next) |n| n.prev = c.prev;
        c.prev = null;
        c.next = null;
    }

    /// Whether `peer` is a proxy in `--forwarded-allow-ips`.
    fn trustsPeer(self: *const Server, peer: *const conn_mod.Peer) bool {
        const t = self.opts.trust orelse return false;
        return t.trustsPeer(peer.family, &peer.addr);
    }

    /// A PROXY header named the client behind a balancer: it becomes the connection's
    /// peer (the scope's client, the access log, the per-address limits). False when
    /// the new address is over `--limit-connections-per-ip` (the caller closes).
    pub fn repeer(self: *Server, c: *Conn, src: proxy_protocol.Address) bool {
        var peer = conn_mod.Peer{ .family = if (src.version == 4) linux.AF.INET else linux.AF.INET6, .port = src.port };
        peer.addr = src.addr;
        if (self.opts.connections_per_ip_max != 0) {
            const new_key = per_ip.keyOf(&peer).?;
            if (self.per_ip_table == null) self.per_ip_table = per_ip.Table.init(self.allocator);
            const admitted = self.per_ip_table.?.acquire(new_key, self.opts.connections_per_ip_max) catch false;
            if (!admitted) {
                self.reject(.limit_per_ip);
                return false;
            }
            // The balancer's count is moved to the client's.
            if (per_ip.keyOf(&c.peer)) |old| self.per_ip_table.?.release(old);
        }
        c.peer = peer;
        return true;
    }

    /// `--limit-request-rate`: null when the request may go on, else the seconds its
    /// client must wait (`retry-after`); counted in `/metrics` when refused.
    pub fn rateLimited(self: *Server, peer: *const conn_mod.Peer, headers: []const http_fields.Header) ?u32 {
        if (self.opts.rate_limit.rate == 0) return null;
        const key = rate_limit.clientKey(self.opts.trust, peer, headers) orelse return null;
        if (self.limiter == null) self.limiter = rate_limit.Limiter.init(self.allocator, self.opts.rate_limit);
        // The clock itself, not `now_ms` (the once-a-second tick's): a bucket refills
        // by the millisecond.
        const wait = self.limiter.?.take(key, sys.monotonicMs()) orelse return null;
        if (self.metrics) |m| m.rate_limited += 1;
        return wait;
    }

    /// A connection closed at accept: counted (`/metrics`), and logged at most once a
    /// minute with the counts since the last line.
    fn reject(self: *Server, cause: RejectCause) void {
        switch (cause) {
            inline else => |tag| @field(self.rejected, @tagName(tag)) += 1,
        }
        if (self.metrics) |m| m.rejected[@intFromEnum(cause)] += 1;
        if (self.now_ms < self.rejected_warned_ms + accept_warning_interval_ms and self.rejected_warned_ms != 0) return;
        self.rejected_warned_ms = @max(self.now_ms, 1);
        const since = Rejected{
            .limit_connections = self.rejected.limit_connections - self.rejected_logged.limit_connections,
            .limit_per_ip = self.rejected.limit_per_ip - self.rejected_logged.limit_per_ip,
        };
        self.rejected_logged = self.rejected;
        var buf: [200]u8 = undefined;
        const text = std.fmt.bufPrint(&buf, "Connections closed at accept since the last report: {d} over --limit-connections, {d} over --limit-connections-per-ip.", .{ since.limit_connections, since.limit_per_ip }) catch return;
        self.hooks.logWarning(text);
    }

    /// Called by a connection as its socket closes.
    pub fn connectionClosed(self: *Server, c: *Conn) void {
        if (self.opts.connections_per_ip_max != 0) {
            if (per_ip.keyOf(&c.peer)) |k| self.per_ip_table.?.release(k);
        }
        self.unlink(c);
        self.connections -= 1;
        if (self.metrics) |m| m.connections_open = self.connections;
    }

    /// A Conn for an accepted socket; with TLS on, inside a `TlsConn` with a fresh session.
    fn newConn(self: *Server, fd: i32, peer: conn_mod.Peer) ?*Conn {
        const ctx = self.tls_ctx orelse {
            const c = self.allocator.create(Conn) catch return null;
            c.* = Conn.init(self, fd, peer);
            return c;
        };
        const outer = self.allocator.create(conn_mod.TlsConn) catch return null;
        outer.* = .{ .conn = Conn.init(self, fd, peer), .ssl = null };
        outer.conn.is_tls = true;
        outer.ssl = tls.newSession(ctx, &outer.conn) orelse {
            self.allocator.destroy(outer);
            return null;
        };
        return &outer.conn;
    }

    /// HTTPS from now on: every accepted connection starts a session of `ctx`, whose
    /// ciphertext moves through the connection's I/O backend (`Conn.tls_transport`).
    pub fn useTls(self: *Server, ctx: *tls.SSL_CTX) void {
        tls.setTransport(conn_mod.tls_transport);
        self.tls_ctx = ctx;
    }

    /// Frees what `newConn` made (the session too, if `close` has not already).
    fn destroyConn(self: *Server, c: *Conn) void {
        c.endSession();
        if (c.tlsConn()) |outer| self.allocator.destroy(outer) else self.allocator.destroy(c);
    }

    /// A closed connection with no stream is freed at the end of the next poll pass:
    /// the code that closed it may still be running on it, and a later event of the
    /// same batch may still name it.
    pub fn retire(self: *Server, c: *Conn) void {
        std.debug.assert(c.state == .closed and (c.act == null or c.act.?.stream == null));
        c.next = self.graveyard;
        self.graveyard = c;
    }

    fn freeGraveyard(self: *Server) void {
        var kept: ?*Conn = null;
        while (self.graveyard) |c| {
            self.graveyard = c.next;
            if (c.isPending() or c.ioBusy() or c.flushQueued()) {
                // Still on the pending list, or the writer thread still holds its output:
                // freed on a later pass.
                c.next = kept;
                kept = c;
            } else {
                c.releaseActive();
                self.destroyConn(c);
            }
        }
        self.graveyard = kept;
    }

    pub fn streamStarted(self: *Server) void {
        self.streams += 1;
        self.requests_total += 1;
        if (self.metrics) |m| m.requests_in_flight = self.streams;
    }

    pub fn streamFinished(self: *Server) void {
        self.streams -= 1;
        if (self.metrics) |m| m.requests_in_flight = self.streams;
        if (self.streams == 0 and self.spin_ns != 0 and !self.spin_wanted and !self.draining) {
            if (self.busy_poll.due()) {
                self.spin_wanted = true;
                self.settleSoon();
            }
        }
    }

    /// The connection's output is written when this pass of the loop ends (HTTP/2: the
    /// responses of all its streams that run in this pass leave in one write).
    pub fn flushSoon(self: *Server, c: *Conn) void {
        const act = c.act orelse return;
        if (act.flush_queued) return;
        act.flush_queued = true;
        act.flush_next = self.flush_soon;
        self.flush_soon = c;
        self.settleSoon();
    }

    fn flushQueued(self: *Server) void {
        while (self.flush_soon) |c| {
            const act = c.a();
            self.flush_soon = act.flush_next;
            act.flush_next = null;
            act.flush_queued = false;
            if (protocol.batchesWrites(c)) c.flush();
        }
    }

    /// io_uring_enter failed for a reason no retry mends (the ring is broken): once a
    /// tick, one line on `zigcorn.error` with how often and the last error.
    fn reportRingFailures(self: *Server, u: *@import("../os/io_uring.zig").Uring) void {
        const f = u.takeFailures() orelse return;
        var buf: [160]u8 = undefined;
        const line = std.fmt.bufPrint(&buf, "io_uring_enter failed {d} time(s) ({s}): queued operations may be lost", .{ f.count, @errorName(f.err) }) catch "io_uring_enter failed";
        self.hooks.logError(line);
    }

    /// A job went to the writer thread: wake it, once, when this pass of the loop ends.
    pub fn kickWriterSoon(self: *Server) void {
        self.kick_wanted = true;
        self.settleSoon();
    }

    /// Registers HTTP/3's worker: its socket and timer join the event source.
    pub fn plugQuic(self: *Server, plug: QuicPlug) bool {
        std.debug.assert(self.quic == null);
        if (!self.io.registerPollable(plug.udp_fd, token_quic)) return false;
        if (!self.io.registerPollable(plug.timer_fd, token_quic_timer)) return false;
        self.quic = plug;
        return true;
    }

    /// The QUIC worker's socket was full: its writability is reported (`on_writable`) until
    /// this is called with false (level-triggered, as a connection's on both backends).
    pub fn quicWatchWritable(self: *Server, on: bool) void {
        const q = self.quic orelse return;
        _ = self.io.watchWritable(q.udp_fd, token_quic, on);
    }

    /// Open connections of every transport: TCP's and QUIC's (what a drain waits for).
    pub fn connectionsOpen(self: *const Server) u32 {
        const quic: u32 = if (self.quic) |q| q.connections(q.ctx) else 0;
        return self.connections + quic;
    }

    /// A QUIC connection has datagrams to send: written when this pass ends.
    pub fn quicFlushSoon(self: *Server) void {
        self.quic_flush_wanted = true;
        self.settleSoon();
    }

    fn settleSoon(self: *Server) void {
        if (self.settle_pending) return;
        self.settle_pending = true;
        self.hooks.onSettle();
    }

    /// The scheduled `settle`, first half (with the GIL): wakes the writer thread if jobs
    /// wait for it, and says whether a busy poll is due (the engine may be draining).
    pub fn settleBegin(self: *Server) bool {
        self.settle_pending = false;
        self.flushQueued();
        if (self.quic_flush_wanted) {
            self.quic_flush_wanted = false;
            if (self.quic) |q| q.flush(q.ctx);
        }
        if (self.io_submit_wanted) {
            self.io_submit_wanted = false;
            // Sends that completed inside the submission are handled now: their streams
            // finish in this pass (and the busy poll below can start), without a wake-up.
            // Only those: a request read now would reach its app after the next pass's
            // poll, behind what came after it (a half-closed client's end of stream
            // would close the connection before the app could answer); epoll reads it at
            // the next pass's start, and so does this.
            if (self.io.submit() and !self.in_poll) {
                self.io.waitSent(&self.batch);
                self.process();
            }
            // Events queued outside a poll (a connection that reads again finds bytes
            // already received): the loop must come back for them.
            if (self.io.hasBacklog()) self.signalWake();
        }
        if (self.kick_wanted) {
            self.kick_wanted = false;
            if (self.writer) |w| w.kick();
        }
        // A connection scheduled for another pass (a pipelined request in its buffer) is
        // not an event the busy poll would see: the loop's next pass serves it instead.
        const spin = self.spin_wanted and !self.draining and self.pending == null;
        self.spin_wanted = false;
        return spin;
    }

    /// The busy poll `settleBegin` granted cannot run yet (callbacks are still to run on
    /// this pass's loop): it waits for the next settle, which is due at once.
    pub fn deferSpin(self: *Server) void {
        self.spin_wanted = true;
        self.settle_pending = true;
    }

    /// Responses are with the writer thread: their completions come back within
    /// microseconds (the loop may busy-poll for them instead of sleeping).
    pub fn writerBusy(self: *const Server) bool {
        const w = self.writer orelse return false;
        return w.in_flight != 0 and !self.draining;
    }

    /// The scheduled `settle`, second half, without the GIL: polls without blocking until an
    /// event is ready (true: the caller runs `process`) or the budget is spent.
    /// Touches only the poller and the batch, never a connection.
    pub fn spinWait(self: *Server) bool {
        return self.busy_poll.wait(&self.io, &self.batch, self.spin_ns);
    }

    /// Graceful shutdown, step one (the drain's start): the health and ready paths answer
    /// 503 and connections are told to leave, each in its protocol's way, while the
    /// listener still accepts (`stopAccepting` follows, at once or after a delay):
    /// idle keep-alive connections close now, busy HTTP/1.1 ones after their current
    /// response (`connection: close`), HTTP/2 ones get a GOAWAY naming no stream yet and
    /// a PING, then the real last stream once the PING comes back (RFC 9113 6.8).
    /// WebSockets and responses in flight go on.
    pub fn drain(self: *Server) void {
        if (self.draining) return;
        self.draining = true;
        // Requests that just arrived on keep-alive connections are read before idle ones go.
        if (!self.in_poll) self.poll();
        var it = self.live;
        while (it) |c| {
            it = c.next;
            if (c.state == .head and c.isIdle() and c.requests_count > 0) {
                if (c.act) |act| if (act.stream != null) continue;
                c.close();
            } else protocol.drainStarted(c);
        }
        if (self.quic) |q| q.drain(q.ctx);
    }

    /// Graceful shutdown, step two: no new connections. Those the kernel already
    /// completed are taken and served (with `connection: close`), not reset by closing
    /// the listener under them; idle ones close; HTTP/2 connections get their final
    /// GOAWAY if the PING has not come back. With `websockets_too` (no deadline will
    /// come), open WebSockets are told to go (1001) now.
    pub fn stopServing(self: *Server, websockets_too: bool) void {
        self.drain();
        self.acceptAll();
        self.stopAccepting();
        if (!self.in_poll) self.poll();
        self.closeIdle();
        if (websockets_too) self.going_away = true;
        var it = self.live;
        while (it) |c| {
            it = c.next;
            protocol.goingAway(c);
            if (websockets_too) _ = protocol.closeWebSockets(c);
        }
        if (websockets_too) if (self.quic) |q| q.close_websockets(q.ctx);
    }

    /// Graceful shutdown, step three: the deadline came. WebSockets are closed with 1001
    /// (their apps see websocket.disconnect once the client answers or the connection
    /// goes); a connection carrying no WebSocket closes now, so apps still streaming a
    /// response see http.disconnect.
    pub fn deadlinePassed(self: *Server) void {
        self.drain();
        self.going_away = true;
        var it = self.live;
        while (it) |c| {
            it = c.next;
            if (!protocol.closeWebSockets(c) and c.state != .lingering and c.state != .closed) c.close();
        }
        if (self.quic) |q| q.close_websockets(q.ctx);
    }

    /// Idle keep-alive connections close now. One that has not sent its (first or next)
    /// request whole yet, because it was accepted a moment ago or its head is still
    /// arriving, gets the linger time (2 s) for it to arrive: a whole request is then
    /// served with `connection: close`, a partial head gets `408`, a silent connection is
    /// closed. A request accepted while draining is never cut unread, and a slow client
    /// cannot hold the shutdown open.
    pub fn closeIdle(self: *Server) void {
        var it = self.live;
        while (it) |c| {
            it = c.next;
            if (c.state != .head) continue;
            if (c.act) |act| if (act.stream != null) continue;
            if (c.isIdle() and c.requests_count > 0) {
                c.close();
            } else if (!c.timer.in(&self.linger_timeouts)) {
                self.linger_timeouts.arm(&c.timer, self.now_ms);
            }
        }
    }

    /// Last step of shutdown: every connection goes, apps still running see a disconnect.
    pub fn closeAll(self: *Server) void {
        while (self.live) |c| c.close();
    }

    pub fn deinit(self: *Server) void {
        self.stopAccepting();
        if (self.quic) |q| {
            self.quic = null;
            q.deinit(q.ctx);
        }
        self.closeAll();
        if (self.writer) |w| {
            // Queued writes finish (the sockets are non-blocking), then their owners are freed.
            w.stop();
            self.applyWrites();
            std.debug.assert(w.in_flight == 0);
            self.allocator.destroy(w);
            self.writer = null;
        }
        self.flushQueued();
        self.freeGraveyard();
        if (self.timer_fd >= 0) sys.close(self.timer_fd);
        if (self.wake_fd >= 0) sys.close(self.wake_fd);
        self.offload.deinit();
        self.io.deinit();
        self.pool.deinit();
        self.zlib.deinit();
        if (self.per_ip_table) |*t| t.deinit();
        if (self.limiter) |*l| l.deinit();
        if (self.tls_ctx) |ctx| tls.freeContext(ctx);
        self.allocator.destroy(self);
    }
};
