//! HTTP/3 in a worker: its UDP socket, its QUIC endpoint, its connections and their
//! timer, as the server drives them through a `server.QuicPlug` (the server does not
//! import this file: the engine makes the worker, `start`, and plugs it in).
//!
//! Input: the socket's readiness reads batches of datagrams (`udp.receive`, at most
//! `batches_per_event` per event: the socket is level-triggered, the rest come on the next
//! pass; with GRO a message holds several, split here), each goes to `quic/endpoint.zig`,
//! which finds or makes its `QuicConn`. Output: a connection that received, timed out or had
//! a stream written is marked dirty; when the loop's pass ends (`Server.quicFlushSoon` ->
//! `flush`) each dirty connection's events go to its HTTP/3 session, then its datagrams into
//! the send queue (`udp.SendQueue`: GSO runs; kept while the socket is full). Timers: each
//! connection has one earliest deadline (`quic/connection.zig` `nextDeadline`); the
//! worker's timerfd is set to the earliest of them (one-shot, absolute), so an idle worker
//! sleeps until then.
//!
//! A `QuicConn` is the owner object of one QUIC connection: the endpoint's `Conn`, the HTTP/3
//! session's `Owner` (`server_stream.zig` adapts its requests to `core/stream.zig`'s
//! `Stream`), and the carrier its streams name (`carrier`, a `core/connection.zig` `Conn`
//! with no socket: the server, the options, the client's address; never linked into the
//! server's lists and never read or written by the TCP path).
const std = @import("std");
const linux = std.os.linux;
const sys = @import("../os/sys.zig");
const udp = @import("../transport/udp.zig");
const Peer = @import("../transport/peer.zig").Peer;
const openssl = @import("../transport/openssl.zig");
const endpoint_mod = @import("../quic/endpoint.zig");
const connection = @import("../quic/connection.zig");
const new_token_len = @import("../quic/new_token.zig").len;
const qlog = connection.qlog;
const session_mod = @import("session.zig");
const server_mod = @import("../core/server.zig");
const Server = server_mod.Server;
const conn_mod = @import("../core/connection.zig");
const server_stream = @import("server_stream.zig");
const SmallPool = @import("../os/small_pool.zig").SmallPool;

pub const Session = session_mod.Session(connection.Connection, QuicConn);
pub const Endpoint = endpoint_mod.Endpoint(QuicConn);

comptime {
    // A connection holds as many of our IDs as the endpoint routes to it.
    std.debug.assert(connection.conn_cids.ours_max == endpoint_mod.cids_per_connection_max);
    // The session keeps a slot per open peer unidirectional stream; the transport bounds them.
    std.debug.assert((connection.Config{}).initial_max_streams_uni <= session_mod.uni_streams_max);
}

/// Datagram batches read per readiness event (32 datagrams each).
const batches_per_event = 8;
/// Datagrams one connection sends per flush; past it the connection stays dirty.
const datagrams_per_flush_max = 256;

/// The ECN codepoint of the datagram the connection's `send` returned last: ECT(0) while
/// its ECN validation goes well, else none (`quic/ecn.zig`).
fn ecnFor(c: *const QuicConn) udp.Ecn {
    return c.quic.ecnToSend();
}

pub const QuicConn = struct {
    pub const Context = *Worker;

    worker: *Worker,
    quic: *connection.Connection,
    session: *Session,
    endpoint_link: endpoint_mod.Link = .{},
    /// What the streams reach the server through (see the file's comment).
    carrier: conn_mod.Conn,
    /// Our address the client's datagrams came to (its own is `carrier.peer`): the two
    /// are the path replies take.
    local: Peer,
    /// Request streams the owner keeps (`server_stream.H3Stream`), by QUIC stream id.
    streams: std.AutoHashMapUnmanaged(u64, *server_stream.H3Stream) = .empty,
    /// Streams an app still holds: the connection is freed only once none is.
    held: u32 = 0,
    dirty: bool = false,
    dirty_next: ?*QuicConn = null,
    prev: ?*QuicConn = null,
    next: ?*QuicConn = null,
    /// The QUIC connection is over (closed event seen or state closed).
    over: bool = false,
    removed: bool = false,
    /// While the client's new address is validated: the address last validated, where the
    /// connection goes back if the check fails (RFC 9000 9.3.2). On the heap only then.
    fallback: ?*endpoint_mod.Path = null,

    /// Null when the QUIC connection cannot be made or memory runs out: the packet is
    /// then dropped and the client retries.
    pub fn open(w: *Worker, acc: *const endpoint_mod.Accept) ?*QuicConn {
        return make(w, acc) catch null;
    }

    fn make(w: *Worker, acc: *const endpoint_mod.Accept) error{ QuicInit, OutOfMemory }!*QuicConn {
        const gpa = w.gpa;
        const now = sys.monotonicUs();
        const retry: ?connection.RetryInfo = if (acc.retry_scid) |*r| .{
            .retry_scid = r.slice(),
        } else null;
        const q = connection.Connection.init(
            gpa,
            &w.quic_config,
            acc.reset_token,
            w.ssl_ctx,
            acc.original_dcid.slice(),
            acc.client_scid.slice(),
            acc.scid.slice(),
            now,
            retry,
        ) orelse return error.QuicInit;
        errdefer q.deinit();
        const self = try gpa.create(QuicConn);
        errdefer gpa.destroy(self);
        self.* = .{
            .worker = w,
            .quic = q,
            .session = undefined,
            .carrier = conn_mod.Conn.init(w.server, -1, acc.path.peer),
            .local = acc.path.local,
        };
        // Not a TCP phase: any state but `.closed` (which `Stream.gone` reads).
        self.carrier.state = .request;
        std.debug.assert(w.quic_config.initial_max_streams_uni <= session_mod.uni_streams_max);
        self.session = Session.createShared(gpa, q, self, &w.h3_config, &w.buffers) catch
            return error.OutOfMemory;
        w.link(self);
        if (w.server.opts.http3.?.qlogDir()) |dir| self.openQlog(dir, acc, now);
        return self;
    }

    /// --http3-qlog-dir: the connection's log, begun with its addresses and our transport
    /// parameters (a file that cannot be made was reported once: the connection goes on).
    fn openQlog(self: *QuicConn, dir: []const u8, acc: *const endpoint_mod.Accept, now: u64) void {
        const w = self.worker;
        const warn: qlog.Warn = .{ .ctx = w, .call = Worker.warn };
        const log = qlog.Qlog.create(w.gpa, dir, acc.original_dcid.slice(), now, warn) orelse
            return;
        self.quic.qlog = log;
        var client_buf: [64]u8 = undefined;
        var server_buf: [64]u8 = undefined;
        const client = &acc.path.peer;
        // The datagram said which address it came to, not the port: that is the socket's.
        var bound: linux.sockaddr.storage = undefined;
        const port = switch (sys.getsockname(w.sock.fd, &bound)) {
            .ok => Peer.fromStorage(&bound).port,
            .err => 0,
        };
        log.started(.{
            .ip_version = if (client.family == linux.AF.INET) "ipv4" else "ipv6",
            .src_ip = client.format(&client_buf),
            .src_port = client.port,
            .dst_ip = acc.path.local.format(&server_buf),
            .dst_port = port,
            .src_cid = acc.client_scid.slice(),
            .dst_cid = acc.scid.slice(),
        });
        log.localParameters(&w.quic_config);
    }

    /// A datagram naming one of this connection's IDs. The endpoint hands over the
    /// worker's receive buffer, which the connection opens in place.
    pub fn receive(
        self: *QuicConn,
        datagram: []const u8,
        path: *const endpoint_mod.Path,
        ecn: u2,
        now_us: u64,
    ) void {
        // Over for HTTP/3 but still closing: the connection answers with its CONNECTION_CLOSE.
        if (self.quic.isClosed()) return;
        if (path.peer.eql(&self.carrier.peer)) {
            self.quic.receiveEcn(@constCast(datagram), ecn, now_us);
        } else if (self.quic.receiveFromNewAddressEcn(@constCast(datagram), ecn, now_us)) {
            self.migrate(path, datagram.len, now_us);
        }
        self.worker.markDirty(self);
    }

    /// The client moved (RFC 9000 9.3): its packets go to the new address from now on,
    /// validated first unless it is the address last validated; a check already under way
    /// keeps that address to go back to.
    fn migrate(
        self: *QuicConn,
        path: *const endpoint_mod.Path,
        datagram_len: usize,
        now_us: u64,
    ) void {
        const gpa = self.worker.gpa;
        self.settlePath(); // a check that ended in this pass: its outcome first
        if (self.fallback) |back| if (back.peer.eql(&path.peer)) {
            self.carrier.peer = back.peer;
            self.local = back.local;
            gpa.destroy(back);
            self.fallback = null;
            self.quic.endPathValidation();
            return;
        };
        const back = self.fallback orelse made: {
            const made = gpa.create(endpoint_mod.Path) catch return; // out of memory: it stays
            made.* = .{ .peer = self.carrier.peer, .local = self.local };
            break :made made;
        };
        self.quic.startPathValidation(now_us, datagram_len, back.peer.sameHost(&path.peer)) catch {
            if (self.fallback == null) gpa.destroy(back);
            return;
        };
        self.fallback = back;
        self.carrier.peer = path.peer;
        self.local = path.local;
    }

    /// A validation ended: the new address is kept, or the connection goes back.
    fn settlePath(self: *QuicConn) void {
        const outcome = self.quic.takePathOutcome();
        if (outcome == .none) return;
        const back = self.fallback orelse return;
        if (outcome == .failed) {
            self.carrier.peer = back.peer;
            self.local = back.local;
        }
        self.worker.gpa.destroy(back);
        self.fallback = null;
    }

    /// A token for the client's next connection (RFC 9000 8.1.3): it then skips the Retry.
    fn giveNewToken(self: *QuicConn) void {
        var token: [new_token_len]u8 = undefined;
        const ep = &self.worker.endpoint;
        const now = sys.monotonicUs();
        if (ep.newToken(&self.carrier.peer, now, &token)) self.quic.giveNewToken(&token);
    }

    /// The transport's events, into the session (and the endpoint's handshake count).
    fn drive(self: *QuicConn) void {
        self.settlePath();
        self.session.setNow(sys.monotonicMs());
        var guard: usize = 0;
        while (guard < 100_000) : (guard += 1) {
            const ev = self.quic.nextEvent() orelse break;
            switch (ev) {
                .handshake_done => {
                    self.worker.endpoint.handshakeConfirmed(self);
                    self.giveNewToken();
                },
                .closed => self.over = true,
                else => {},
            }
            self.session.handle(ev);
        }
        if (self.quic.isClosed()) self.over = true;
        if (self.over) self.connectionOver() else self.syncCids();
        // No request left: the maps give back their room (nothing iterates them here).
        const idle = self.streams.count() == 0 and self.streams.capacity() > 0;
        if (idle) self.streams.clearAndFree(self.worker.gpa);
        self.session.releaseIdle();
    }

    /// The IDs the peer retired leave the endpoint's table, and spare ones are issued in
    /// their place (each carries this worker's index: the steering brings its packets here).
    fn syncCids(self: *QuicConn) void {
        self.worker.endpoint.syncCids(self, self.quic);
    }

    fn connectionOver(self: *QuicConn) void {
        self.carrier.state = .closed;
        server_stream.connectionOver(self);
    }

    // ---- the session's owner ----------------------------------------------------------

    pub fn onRequest(self: *QuicConn, id: u64, head: *const session_mod.Head) void {
        server_stream.onRequest(self, id, head);
    }
    pub fn onBody(self: *QuicConn, id: u64, bytes: []const u8, fin: bool) void {
        server_stream.onBody(self, id, bytes, fin);
    }
    pub fn onTrailers(self: *QuicConn, id: u64, fields: []const session_mod.Header) void {
        _ = self;
        _ = id;
        _ = fields; // request trailers are not passed on (README, "## HTTP/3")
    }
    pub fn onReset(self: *QuicConn, id: u64, code: u64) void {
        _ = code;
        server_stream.onReset(self, id);
    }
    pub fn onGoaway(self: *QuicConn, id: u64) void {
        _ = self;
        _ = id;
    }
    pub fn onWritable(self: *QuicConn, id: u64) void {
        server_stream.onWritable(self, id);
    }

    /// Something was written on one of its streams: its datagrams go when the pass ends.
    pub fn touched(self: *QuicConn) void {
        self.worker.markDirty(self);
    }

    fn destroy(self: *QuicConn) void {
        std.debug.assert(self.held == 0);
        const w = self.worker;
        if (!self.removed) w.endpoint.remove(self);
        server_stream.freeAll(self);
        self.streams.deinit(w.gpa);
        if (self.fallback) |back| w.gpa.destroy(back);
        self.session.destroy();
        if (self.quic.qlog) |log| log.destroy(w.gpa);
        self.quic.deinit();
        w.unlink(self);
        w.gpa.destroy(self);
    }
};

pub const Worker = struct {
    /// `pool`'s allocator: the connections' records come from its slabs, anything larger
    /// from the C allocator behind it.
    gpa: std.mem.Allocator,
    pool: SmallPool,
    server: *Server,
    ssl_ctx: *openssl.SSL_CTX,
    sock: udp.Socket,
    timer_fd: i32,
    idle_timeout_ms: u64,
    /// The QUIC limits every connection of this worker points at.
    quic_config: connection.Config,
    /// The HTTP/3 limits every session of this worker points at.
    h3_config: session_mod.Config = .{},
    endpoint: Endpoint = undefined,
    /// The sessions' working buffers, shared: they are driven one at a time (`flush`).
    buffers: Session.Buffers = undefined,
    answers: endpoint_mod.OutQueue = .{},
    recv: udp.RecvBatch = .{},
    /// The datagrams written and not yet taken by the kernel (its arena mapped apart:
    /// pages it never filled cost nothing).
    out: udp.SendQueue,
    /// The kernel's buffer was full: the rest of `out` waits for the socket's writability,
    /// and no connection is asked for more until then (they stay dirty).
    blocked: bool = false,
    /// Times the socket was reported writable after it was full (the test hook prints it).
    writable_events: u64 = 0,
    live: ?*QuicConn = null,
    dirty: ?*QuicConn = null,
    timer_at_us: u64 = std.math.maxInt(u64),

    /// A qlog file that cannot be made or written: one line on `zigcorn.error`.
    fn warn(ctx: *anyopaque, text: []const u8) void {
        const w: *Worker = @ptrCast(@alignCast(ctx));
        w.server.hooks.logWarning(text);
    }

    fn link(w: *Worker, c: *QuicConn) void {
        c.next = w.live;
        c.prev = null;
        if (w.live) |h| h.prev = c;
        w.live = c;
    }

    fn unlink(w: *Worker, c: *QuicConn) void {
        if (c.prev) |p| p.next = c.next else w.live = c.next;
        if (c.next) |n| n.prev = c.prev;
        c.prev = null;
        c.next = null;
    }

    pub fn markDirty(w: *Worker, c: *QuicConn) void {
        if (!c.dirty) {
            c.dirty = true;
            c.dirty_next = w.dirty;
            w.dirty = c;
        }
        w.server.quicFlushSoon();
    }

    // ---- the plug's callbacks ---------------------------------------------------------

    fn onReadable(ctx: *anyopaque) void {
        const w: *Worker = @ptrCast(@alignCast(ctx));
        for (0..batches_per_event) |_| {
            const n = switch (udp.receive(&w.sock, &w.recv)) {
                .ok => |n| n,
                .err => 0,
            };
            if (n == 0) break;
            const now = sys.monotonicUs();
            for (0..n) |i| {
                const m = w.recv.get(i);
                // With GRO a message holds several datagrams of one peer, path and mark.
                var it = m.datagrams();
                while (it.next()) |d| {
                    _ = w.endpoint.onDatagram(d, m.peer, m.local, m.ecn, now, &w.answers);
                }
            }
            if (n < w.recv.capacity()) break;
        }
        if (w.answers.len > 0) w.server.quicFlushSoon();
    }

    fn onTimer(ctx: *anyopaque) void {
        const w: *Worker = @ptrCast(@alignCast(ctx));
        var expirations: u64 = 0;
        _ = sys.read(w.timer_fd, std.mem.asBytes(&expirations));
        w.timer_at_us = std.math.maxInt(u64);
        const now = sys.monotonicUs();
        var it = w.live;
        while (it) |c| : (it = c.next) {
            const d = c.quic.nextDeadline() orelse continue;
            if (d > now) continue;
            c.quic.onTimeout(now);
            w.markDirty(c);
        }
        w.server.quicFlushSoon();
    }

    /// The end of the loop's pass: answers and every dirty connection's datagrams go out.
    /// While the socket is full each dirty connection is still driven (its events reach
    /// the session) but asked for no datagram: it stays dirty until the socket is writable.
    fn flush(ctx: *anyopaque) void {
        const w: *Worker = @ptrCast(@alignCast(ctx));
        while (!w.blocked) {
            const a = w.answers.peek() orelse break;
            if (!w.queue(a.slice(), &a.path)) break;
            w.answers.pop();
        }
        // Connections that had more to send than one flush takes, or met a full socket.
        var carry: ?*QuicConn = null;
        var list = w.dirty;
        w.dirty = null;
        while (list) |c| {
            list = c.dirty_next;
            c.dirty_next = null;
            c.dirty = false;
            c.drive();
            const more = w.blocked or w.sendFrom(c);
            if (c.over and c.quic.isClosed() and c.held == 0) {
                c.destroy();
            } else if (more) {
                c.dirty = true;
                c.dirty_next = carry;
                carry = c;
            }
        }
        w.sendQueued();
        // Taken up again at the next pass, or when the socket is writable again.
        while (carry) |c| {
            carry = c.dirty_next;
            c.dirty_next = w.dirty;
            w.dirty = c;
        }
        w.armTimer();
        if (!w.blocked and (w.dirty != null or w.answers.len > 0)) w.server.quicFlushSoon();
    }

    /// The connection's datagrams, into the send queue; true when it has more to send
    /// (past one flush's share, or the socket became full).
    fn sendFrom(w: *Worker, c: *QuicConn) bool {
        const now = sys.monotonicUs();
        var sent: usize = 0;
        while (sent < datagrams_per_flush_max) : (sent += 1) {
            const room = w.out.room() orelse blk: {
                w.sendQueued();
                if (w.blocked) return true;
                break :blk w.out.room().?;
            };
            const n = c.quic.send(room, now);
            if (n == 0) return false;
            w.out.commit(n, c.carrier.peer, c.local, ecnFor(c));
        }
        return true;
    }

    /// An endpoint's answer (no connection); false when the queue stays full.
    fn queue(w: *Worker, bytes: []const u8, path: *const endpoint_mod.Path) bool {
        if (w.out.push(bytes, path.peer, path.local, 0)) return true;
        w.sendQueued();
        return !w.blocked and w.out.push(bytes, path.peer, path.local, 0);
    }

    /// What waits goes to the kernel; what it does not take (its buffer full) stays, and
    /// the socket's writability is watched until it is all gone (`onWritable`).
    fn sendQueued(w: *Worker) void {
        const was = w.blocked;
        w.blocked = w.out.flush(&w.sock) == .blocked;
        if (w.blocked != was) w.server.quicWatchWritable(w.blocked);
    }

    /// The socket takes datagrams again: what waited goes, then the dirty connections.
    fn onWritable(ctx: *anyopaque) void {
        const w: *Worker = @ptrCast(@alignCast(ctx));
        w.writable_events += 1;
        w.sendQueued();
        if (!w.blocked) w.server.quicFlushSoon();
    }

    /// The timerfd at the earliest deadline of every connection, or sooner: a deadline that
    /// moved later (an ACK deadline met, a PTO pushed on, the idle timer moved by a packet)
    /// leaves the timer where it is, and its expiry, one early wake-up, sets it again
    /// (`onTimer`). A system call only when a deadline comes sooner than the armed one: one
    /// that moved on with each request (its ACK deadline set, then met) cost a
    /// `timerfd_settime` each time.
    fn armTimer(w: *Worker) void {
        var earliest: u64 = std.math.maxInt(u64);
        var it = w.live;
        while (it) |c| : (it = c.next) {
            if (c.quic.nextDeadline()) |d| earliest = @min(earliest, d);
        }
        if (earliest >= w.timer_at_us) return;
        std.debug.assert(earliest != std.math.maxInt(u64)); // below the armed time: a deadline
        w.timer_at_us = earliest;
        // CLOCK_MONOTONIC, as `sys.monotonicUs`; 0 would disarm: at least 1 ns.
        const at = @max(earliest, 1);
        const spec: linux.itimerspec = .{
            .it_interval = .{ .sec = 0, .nsec = 0 },
            .it_value = .{
                .sec = @intCast(at / std.time.us_per_s),
                .nsec = @intCast((at % std.time.us_per_s) * std.time.ns_per_us),
            },
        };
        _ = linux.timerfd_settime(w.timer_fd, .{ .ABSTIME = true }, &spec, null);
    }

    fn drainPlug(ctx: *anyopaque) void {
        const w: *Worker = @ptrCast(@alignCast(ctx));
        // No new connection from here on: a new client's Initial gets CONNECTION_REFUSED, or,
        // when only this worker retires, a Retry that steers it to the next worker.
        const h3 = w.server.opts.http3.?;
        const other: ?u8 = if (w.server.retiring and h3.workers > 1) @intCast(
            (@as(u16, h3.worker_index) + 1) % h3.workers,
        ) else null;
        w.endpoint.refuseNew(other);
        var it = w.live;
        while (it) |c| : (it = c.next) {
            if (c.over) continue;
            c.session.goaway();
            w.markDirty(c);
        }
    }

    /// The drain's deadline: WebSockets on the connections' streams are closed with 1001.
    fn closeWebSocketsPlug(ctx: *anyopaque) void {
        const w: *Worker = @ptrCast(@alignCast(ctx));
        var it = w.live;
        while (it) |c| : (it = c.next) {
            if (c.over) continue;
            if (server_stream.closeWebSockets(c)) w.markDirty(c);
        }
    }

    /// The connections still open (until freed: a closing one still answers its peer).
    fn connectionsPlug(ctx: *anyopaque) u32 {
        const w: *Worker = @ptrCast(@alignCast(ctx));
        var n: u32 = 0;
        var it = w.live;
        while (it) |c| : (it = c.next) n += 1;
        return n;
    }

    fn deinitPlug(ctx: *anyopaque) void {
        const w: *Worker = @ptrCast(@alignCast(ctx));
        // Each client is told (H3_NO_ERROR) rather than left to its idle timeout.
        var it = w.live;
        while (it) |c| : (it = c.next) {
            if (c.quic.isClosed()) continue;
            c.quic.closeApplication(0x100, "server stopping");
            _ = w.sendFrom(c);
        }
        w.sendQueued();
        if (w.out.full_every != 0) {
            const st = w.out.stats;
            const fmt = "zigcorn-test udp: queued={d} waiting={d} calls={d} datagrams={d} " ++
                "blocked={d} dropped={d} writable={d}\n";
            const waiting = w.out.len - w.out.head;
            const writable = w.writable_events;
            std.debug.print(fmt, .{
                st.queued, waiting, st.calls, st.datagrams, st.blocked, st.dropped, writable,
            });
        }
        while (w.live) |c| {
            server_stream.detachAll(c);
            c.held = 0;
            c.destroy();
        }
        w.endpoint.deinit(w.gpa);
        w.buffers.deinit(w.gpa);
        sys.close(w.timer_fd);
        openssl.freeContext(w.ssl_ctx);
        w.pool.deinit();
        std.heap.page_allocator.free(w.out.arena);
        if (w.recv.area.len > 0) std.heap.page_allocator.free(w.recv.area);
        std.heap.c_allocator.destroy(w);
    }
};

const plug_verbs = server_stream.verbs;

pub const StartError = error{ OutOfMemory, TimerCreateFailed, RegisterFailed, SocketOptionsFailed };

/// Makes the worker for `server.opts.http3` and plugs it into the server; it owns
/// `ssl_ctx` from here on (freed with it, also on failure).
pub fn start(server: *Server, ssl_ctx: *openssl.SSL_CTX) StartError!void {
    const w = try createWorker(server, ssl_ctx);
    // Plugged or not, the worker owns everything from here: on failure `deinitPlug`
    // frees it all (the context included), as the server would at its end.
    if (!server.plugQuic(.{
        .ctx = w,
        .udp_fd = server.opts.http3.?.fd,
        .timer_fd = w.timer_fd,
        .on_readable = Worker.onReadable,
        .on_timer = Worker.onTimer,
        .on_writable = Worker.onWritable,
        .flush = Worker.flush,
        .drain = Worker.drainPlug,
        .close_websockets = Worker.closeWebSocketsPlug,
        .deinit = Worker.deinitPlug,
        .connections = Worker.connectionsPlug,
        .verbs = &plug_verbs,
    })) {
        Worker.deinitPlug(w);
        return error.RegisterFailed;
    }
}

/// The worker, made whole, or every piece made so far freed again (`ssl_ctx` included).
fn createWorker(server: *Server, ssl_ctx: *openssl.SSL_CTX) StartError!*Worker {
    errdefer openssl.freeContext(ssl_ctx);
    const h3 = server.opts.http3.?;
    const gpa = std.heap.c_allocator;
    // The master bound the socket: the options that make each datagram say where it came
    // in (so that every answer leaves from that address, on a wildcard bind) are set here.
    const sock = switch (udp.Socket.adopt(h3.fd)) {
        .ok => |s| s,
        .err => return error.SocketOptionsFailed,
    };
    const arena = std.heap.page_allocator.alloc(u8, udp.send_arena_bytes) catch
        return error.OutOfMemory;
    errdefer std.heap.page_allocator.free(arena);
    const w = try gpa.create(Worker);
    errdefer gpa.destroy(w);
    const tfd_rc = linux.timerfd_create(.MONOTONIC, .{ .NONBLOCK = true, .CLOEXEC = true });
    if (sys.E.init(tfd_rc) != .SUCCESS) return error.TimerCreateFailed;
    const timer_fd: i32 = @intCast(tfd_rc);
    errdefer sys.close(timer_fd);
    w.* = .{
        .gpa = undefined,
        .pool = SmallPool.init(gpa),
        .server = server,
        .ssl_ctx = ssl_ctx,
        .sock = sock,
        .out = udp.SendQueue.init(arena),
        .timer_fd = timer_fd,
        .idle_timeout_ms = h3.idle_timeout_ms,
        .quic_config = .{
            .max_idle_timeout_ms = h3.idle_timeout_ms,
            .handshake_timeout_ms = h3.handshake_timeout_ms,
            .initial_max_streams_bidi = h3.max_streams,
            // What one receive buffer holds: the most we take, and the most a probe tries.
            .max_udp_payload_size = udp.datagram_len_max,
            .initial_max_stream_data = h3.stream_window,
            .initial_max_data = h3.connection_window,
            .congestion_algorithm = switch (h3.congestion) {
                .newreno => .new_reno,
                .cubic => .cubic,
            },
        },
        // Request records may outlive their QUIC stream while the app finishes: twice QUIC's
        // bound leaves them room, and still stops a client that found a way past it.
        // SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 9220) when WebSockets are served, as HTTP/2's.
        .h3_config = .{
            .streams_max = 2 * h3.max_streams,
            .extended_connect = server.opts.ws_enabled,
        },
    };
    w.gpa = w.pool.allocator();
    errdefer w.pool.deinit();
    // GRO where the kernel takes it, with the room a coalesced message needs (mapped apart:
    // only the pages messages reach become resident); without it, one datagram a message.
    if (std.heap.page_allocator.alloc(u8, udp.gro_area_bytes)) |area| {
        w.recv.area = area;
        if (!w.sock.enableGro()) {
            std.heap.page_allocator.free(area);
            w.recv.area = &.{};
        }
    } else |_| {}
    errdefer if (w.recv.area.len > 0) std.heap.page_allocator.free(w.recv.area);
    // Test hook: the kernel made to look full every Nth send (tests/http3, the send path).
    if (std.posix.getenv("ZIGCORN_TEST_UDP_FULL_EVERY")) |v|
        w.out.full_every = @max(2, std.fmt.parseInt(u32, v, 10) catch 0);
    w.buffers = Session.Buffers.init(w.gpa, .{}) catch return error.OutOfMemory;
    errdefer w.buffers.deinit(w.gpa);
    var seed: [32]u8 = undefined;
    std.crypto.random.bytes(&seed);
    var table_key: [16]u8 = undefined;
    std.crypto.random.bytes(&table_key);
    w.endpoint = Endpoint.init(w.gpa, .{
        .worker_index = h3.worker_index,
        .seed = seed,
        .table_key = table_key,
        .retry_key = h3.retry_key,
        .reset_key = h3.reset_key,
        .retry = switch (h3.retry) {
            .never => .never,
            .auto => .auto,
            .always => .always,
        },
        .retry_handshakes_min = h3.handshakes_before_retry,
        .connections_max = h3.connections_max,
        .handshakes_max = h3.handshakes_max,
    }, w) catch return error.OutOfMemory;
    return w;
}
