//! One connection: the transport under the protocols. Its socket (or TLS over it), its
//! read buffer, its output queue (`transport/output_queue.zig`), its writer-thread job, its timers.
//!
//! A connection knows nothing of HTTP framing and nothing of Python. What arrives is
//! handed through the protocol seam (`core/protocol.zig`) to the protocol that owns
//! the connection's current phase; what the protocols queue is written here, and when
//! the queue drains they are told so.
//! Requests are exchanges on `Stream`s (`core/stream.zig`); the app side holds those, never
//! a connection. Every system call goes through the server's I/O backend (`os/io.zig`).
const std = @import("std");
const linux = std.os.linux;
const sys = @import("../os/sys.zig");
const io = @import("../os/io.zig");
const pool_mod = @import("../os/buffer_pool.zig");
const timer = @import("../os/deadlines.zig");
const Server = @import("server.zig").Server;
const Interest = io.Interest;
const tls = @import("../transport/openssl.zig");
const proxy_protocol = @import("../features/proxy_protocol.zig");
const writer_mod = @import("../transport/writer_thread.zig");
const outq = @import("../transport/output_queue.zig");
const stream_mod = @import("stream.zig");
const Stream = stream_mod.Stream;
const protocol = @import("protocol.zig");

const Buffer = pool_mod.Buffer;
const buffer_bytes = pool_mod.buffer_bytes;

/// The peer's address (the scope's `client`).
pub const Peer = @import("../transport/peer.zig").Peer;

/// The connection's phase: which protocol reads it (`protocol.zig` dispatches on it),
/// or the transport's own ending. One byte in `Conn`: an idle connection waits in `.head`.
pub const State = enum(u8) {
    /// `--proxy-protocol`: waiting for a trusted balancer's PROXY header, before any HTTP.
    proxy,
    /// HTTP/1.1: waiting for (the rest of) a request head.
    head,
    /// HTTP/1.1: a request is being served by a stream.
    request,
    /// Response sent, the peer's remaining bytes are drained before close so that
    /// our last response is not destroyed by a reset.
    lingering,
    /// Upgraded: WebSocket frames both ways (websocket/session.zig), a stream for the session.
    websocket,
    /// HTTP/2 frames both ways (http2/session.zig), many streams at once.
    h2,
    closed,
};

/// Everything a connection needs only while it reads, serves or writes. An idle
/// keep-alive connection has none of it: the `Conn` left is 88 bytes.
pub const Active = struct {
    conn: *Conn,
    /// On the server's list of connections with buffered input to process next pass.
    /// Here, not in `Conn`: only a connection holding a buffer is ever on it, and every
    /// byte of `Conn` is paid by each idle connection.
    pending_next: ?*Conn = null,
    is_pending: bool = false,
    /// On the server's list of connections to flush when the loop's pass ends (HTTP/2).
    flush_next: ?*Conn = null,
    flush_queued: bool = false,
    /// Pending output that makes no progress (independent of the phase).
    write_timer: timer.Entry = .{},

    // Reading: the buffer is attached only while a request is read or served.
    rbuf: ?*Buffer = null,
    rstart: u32 = 0,
    rlen: u32 = 0,

    /// The stream the app side holds (null once it finished).
    stream: ?*Stream = null,
    /// What the protocol of the current phase keeps (the transport's only HTTP state).
    proto: protocol.Session = .none,

    out: outq.Output = .{},
    /// HTTP/1.1 pathsend: a file that follows the queued bytes (`sendFileStep`).
    file: ?FileSend = null,
    /// `--proxy-protocol` over TLS: the bytes that came after the PROXY header, the start
    /// of the TLS stream (a ClientHello or part of it). OpenSSL reads them before the
    /// socket (`takeTlsPrefix`); the read buffer they arrived in is handed over whole.
    tls_prefix: ?*Buffer = null,
    tls_prefix_start: u32 = 0,
    tls_prefix_end: u32 = 0,
    /// The writer thread holds this connection's output (`job`): nothing may change the
    /// queue, close the descriptor or free the connection until `writeDone` runs on the
    /// Python thread.
    io_busy: bool = false,
    /// The descriptor of a connection closed while busy: closed at `writeDone`.
    deferred_fd: i32 = -1,
    job: writer_mod.Job = undefined,
};

/// A file being sent after the queued output: `left` bytes from `pos`, counted to the
/// stream's `account`. Plain connections use sendfile(2); TLS reads it in pieces into
/// the output to encrypt.
pub const FileSend = struct { fd: i32, pos: u64, left: u64, account: *outq.Account };

const FileStep = enum { progress, wait, closed };

/// What a TLS connection reads of a file at once (one output segment's worth).
const file_chunk_bytes = 16 * 1024;
/// At most this much per sendfile(2) call, so one connection does not hold the loop.
const sendfile_bytes_max = 1 << 20;
/// A lingering close drops the peer's bytes in reads of this size, at most
/// `linger_reads_max` per event (64 KiB).
const linger_scratch_bytes = 4096;
const linger_reads_max = 16;

/// An HTTPS connection: the Conn and its TLS session, in one allocation.
pub const TlsConn = struct {
    conn: Conn,
    ssl: ?*tls.SSL,
};

/// How OpenSSL moves a session's ciphertext: through the connection's I/O backend.
pub const tls_transport = tls.Transport{ .recv = tlsRecv, .send = tlsSend };

fn tlsRecv(io_ctx: *anyopaque, buf: []u8) tls.Transport.Result {
    const c: *Conn = @ptrCast(@alignCast(io_ctx));
    if (c.fd < 0) return .failed;
    if (c.takeTlsPrefix(buf)) |n| return .{ .ok = n };
    return switch (c.server.io.recv(c.fd, buf)) {
        .ok => |n| .{ .ok = n },
        .err => |e| if (e == .AGAIN) .again else .failed,
    };
}

fn tlsSend(io_ctx: *anyopaque, bytes: []const u8) tls.Transport.Result {
    const c: *Conn = @ptrCast(@alignCast(io_ctx));
    if (c.fd < 0) return .failed;
    return switch (c.server.io.sendv(c.fd, &.{.{ .base = bytes.ptr, .len = bytes.len }})) {
        .ok => |n| .{ .ok = n },
        .err => |e| if (e == .AGAIN) .again else .failed,
    };
}

/// What the output queue borrows from: the server's pool.
fn poolAcquire(ctx: *anyopaque) ?*Buffer {
    const srv: *Server = @ptrCast(@alignCast(ctx));
    return srv.pool.acquire();
}

fn poolRelease(ctx: *anyopaque, b: *Buffer) void {
    const srv: *Server = @ptrCast(@alignCast(ctx));
    srv.pool.release(b);
}

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
    /// Buffers, output and stream state, attached while the connection is busy.
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

    /// The busy part; only called where it is known to be attached.
    pub inline fn a(self: *const Conn) *Active {
        return self.act.?;
    }

    pub fn ensureActive(self: *Conn) ?*Active {
        if (self.act == null) {
            // `rawAlloc`, not `create`: every field is set just below, so `create`'s fill
            // of the new bytes with 0xaa (~110 instructions a request) would be overwritten.
            const bytes = std.heap.c_allocator.rawAlloc(@sizeOf(Active), .of(Active), @returnAddress()) orelse return null;
            const act: *Active = @ptrCast(@alignCast(bytes));
            act.* = .{ .conn = self, .proto = protocol.initialSession(self) };
            self.act = act;
        }
        return self.act;
    }

    /// Frees the busy part if the connection waits for its next request with nothing
    /// buffered, nothing to write and no body being skipped.
    pub fn releaseIfIdle(self: *Conn) void {
        if (!self.isIdle()) return;
        const act = self.act orelse return;
        if (act.out.isEmpty() and !protocol.keepsActive(act) and !act.io_busy) self.releaseActive();
    }

    /// Frees the busy part once nothing needs it: no stream, no buffered bytes, no output.
    pub fn releaseActive(self: *Conn) void {
        const act = self.act orelse return;
        // Still linked on the pending or flush list: kept until that pass unlinks it.
        // Ciphertext that followed a PROXY header and OpenSSL has not read yet: kept too.
        if (act.is_pending or act.flush_queued or act.tls_prefix != null) return;
        std.debug.assert(act.stream == null);
        std.debug.assert(!act.io_busy);
        act.write_timer.disarm();
        if (act.rbuf) |b| self.server.pool.release(b);
        act.rbuf = null;
        act.out.drop(self.bufferSource(), self.server.hooks.release_fn);
        self.dropFile();
        protocol.release(act);
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
        if (self.ensureActive() == null) return self.closeFor("out of memory for the connection's state");
        const act = self.a();
        const buf = self.ensureReadBuffer() orelse return self.closeFor("out of I/O buffers");
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

    /// Hands whatever is buffered to the protocol of the current phase.
    pub fn process(self: *Conn) void {
        protocol.process(self);
    }

    /// A deadline of the current phase passed.
    pub fn timedOut(self: *Conn) void {
        protocol.timedOut(self);
    }

    /// `.proxy`: the balancer's header, whole, names the client (the peer from now on);
    /// the bytes after it are the connection's first. Malformed, too long or anything
    /// else closes the connection before any HTTP is read.
    pub fn proxyStep(self: *Conn) void {
        const act = self.act orelse return;
        const buf = act.rbuf orelse return;
        switch (proxy_protocol.parse(buf[act.rstart..act.rlen])) {
            .incomplete => {
                // `parse` never waits past `header_bytes_max` bytes.
                std.debug.assert(act.rlen - act.rstart < proxy_protocol.header_bytes_max);
            },
            .invalid => self.close(),
            .done => |h| {
                act.rstart += @intCast(h.len);
                if (h.source) |src| {
                    if (!self.server.repeer(self, src)) return self.close();
                }
                self.state = .head;
                protocol.afterProxyHeader(act);
                // Over TLS what follows is ciphertext: `onTlsEvent` starts the handshake with it.
                if (self.is_tls) return self.keepForTls();
                if (act.rstart < act.rlen) self.process() else self.releaseIfIdle();
            },
        }
    }

    /// PROXY before TLS: the bytes read past the header belong to the TLS stream, so the
    /// read buffer holding them becomes the prefix OpenSSL reads first (none are lost,
    /// none copied); the plaintext gets a buffer of its own once the handshake is done.
    fn keepForTls(self: *Conn) void {
        const act = self.a();
        std.debug.assert(self.state == .head and act.tls_prefix == null);
        if (act.rstart == act.rlen) return self.releaseReadBuffer();
        act.tls_prefix = act.rbuf;
        act.tls_prefix_start = act.rstart;
        act.tls_prefix_end = act.rlen;
        act.rbuf = null;
        act.rstart = 0;
        act.rlen = 0;
    }

    /// OpenSSL's read, served from the bytes that followed a PROXY header while any are
    /// left (null: none, read the socket).
    fn takeTlsPrefix(self: *Conn, buf: []u8) ?usize {
        const act = self.act orelse return null;
        const b = act.tls_prefix orelse return null;
        std.debug.assert(act.tls_prefix_start < act.tls_prefix_end and buf.len > 0);
        const n: u32 = @intCast(@min(buf.len, act.tls_prefix_end - act.tls_prefix_start));
        @memcpy(buf[0..n], b[act.tls_prefix_start..][0..n]);
        act.tls_prefix_start += n;
        if (act.tls_prefix_start == act.tls_prefix_end) self.dropTlsPrefix();
        return n;
    }

    fn dropTlsPrefix(self: *Conn) void {
        const act = self.act orelse return;
        if (act.tls_prefix) |b| self.server.pool.release(b);
        act.tls_prefix = null;
        act.tls_prefix_start = 0;
        act.tls_prefix_end = 0;
    }

    // ---- reading ----------------------------------------------------------------

    fn ensureReadBuffer(self: *Conn) ?*Buffer {
        const act = self.a();
        if (act.rbuf == null) act.rbuf = self.server.pool.acquire();
        return act.rbuf;
    }

    /// Moves the unread bytes to the front of the read buffer.
    pub fn compact(self: *Conn) void {
        const act = self.a();
        const buf = act.rbuf orelse return;
        if (act.rstart == 0) return;
        const n = act.rlen - act.rstart;
        std.mem.copyForwards(u8, buf[0..n], buf[act.rstart..act.rlen]);
        act.rstart = 0;
        act.rlen = n;
    }

    /// Everything buffered was consumed: the read buffer goes back to the pool.
    pub fn releaseReadBuffer(self: *Conn) void {
        const act = self.a();
        if (act.rstart != act.rlen) return;
        act.rstart = 0;
        act.rlen = 0;
        if (act.rbuf) |b| self.server.pool.release(b);
        act.rbuf = null;
    }

    pub fn setReading(self: *Conn, on: bool) void {
        if (self.interest.readable == on or self.fd < 0) return;
        self.interest.readable = on;
        if (on and self.tlsPending()) self.interest.writable = true;
        _ = self.server.io.update(self.fd, @intFromPtr(self), self.interest);
    }

    fn setWriting(self: *Conn, on: bool) void {
        if (self.interest.writable == on or self.fd < 0) return;
        if (!on and self.interest.readable and self.tlsPending()) return;
        self.interest.writable = on;
        _ = self.server.io.update(self.fd, @intFromPtr(self), self.interest);
    }

    // ---- output -------------------------------------------------------------

    pub fn bufferSource(self: *Conn) outq.BufferSource {
        return .{ .ctx = self.server, .acquire = poolAcquire, .release = poolRelease };
    }

    pub fn outputLen(self: *const Conn) usize {
        const act = self.act orelse return 0;
        return act.out.len();
    }

    /// Copies `bytes` to the output, counted to `account` (a stream's, or null for the
    /// connection's own bytes). The buffer grows on the heap up to `max_bytes`.
    pub fn queueCopy(self: *Conn, bytes: []const u8, account: ?*outq.Account, max_bytes: usize) outq.Error!void {
        const act = self.a();
        std.debug.assert(!act.io_busy);
        return act.out.append(self.bufferSource(), bytes, account, max_bytes);
    }

    /// Queues `bytes` by reference: `owner` is retained until they are written.
    pub fn queueBorrowed(self: *Conn, bytes: []const u8, owner: ?*anyopaque, account: ?*outq.Account) outq.Error!void {
        const act = self.a();
        std.debug.assert(!act.io_busy);
        try act.out.borrow(bytes, owner, account);
        if (owner) |o| self.server.hooks.retain(o);
    }

    /// Room to write at least `n` bytes in place after the output (see `outq.stage`).
    pub fn stageOut(self: *Conn, n: usize, max_bytes: usize) outq.Error![]u8 {
        const act = self.a();
        std.debug.assert(!act.io_busy);
        return act.out.stage(self.bufferSource(), n, max_bytes);
    }

    pub fn flush(self: *Conn) void {
        const act = self.act orelse return self.setWriting(false);
        // The writer thread has the output: its completion goes on from here.
        if (act.io_busy) return;
        if (self.completePlainResponse()) {
            if (self.server.writer_mode != .off and self.server.wantsHandOff() and self.handOff()) return;
            // A lone stream's response goes at once: batching it with nothing would
            // only wait for the end of the pass.
            if (self.server.io.completions() and self.server.streams > 1 and self.ringSend()) return;
        }
        while (true) {
            // HTTP/2 moves its streams' frames into the queue as it empties.
            protocol.fill(self);
            if (self.state == .closed) break;
            if (act.out.isEmpty()) {
                // A pathsend file goes once everything before it is written.
                if (act.file == null) break;
                switch (self.sendFileStep()) {
                    .progress => continue,
                    .wait => return,
                    .closed => break,
                }
            }
            var iov: [outq.segments_max]std.posix.iovec_const = undefined;
            const n = act.out.fillIov(&iov);
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

    /// All output is written: the stream's writer may go on, then the protocol does.
    fn flushed(self: *Conn) void {
        const act = self.a();
        act.write_timer.disarm();
        if (self.interest.writable) self.setWriting(false);
        if (act.stream) |st| self.wakeWriter(st);
        protocol.afterFlush(self);
    }

    /// A stream told to wait (`writeBody` returned true) may write again.
    fn wakeWriter(self: *Conn, st: *Stream) void {
        st.write_blocked = false;
        self.server.hooks.wakeWrite(st);
    }

    /// Only the first write of a complete plain HTTP/1.1 response (nothing blocked yet)
    /// goes to the writer thread or the ring: streaming, WebSocket, TLS and engine
    /// refusals stay inline.
    fn completePlainResponse(self: *const Conn) bool {
        const act = self.a();
        return !self.is_tls and protocol.wholeResponseQueued(self) and act.file == null and
            !self.interest.writable and !act.out.isEmpty();
    }

    /// The output as one job for the writer thread or the ring.
    fn prepareJob(self: *Conn) *writer_mod.Job {
        const act = self.a();
        act.job = .{ .owner = self, .fd = self.fd };
        act.job.iov_len = @intCast(act.out.fillIov(&act.job.iov));
        return &act.job;
    }

    fn handOff(self: *Conn) bool {
        const act = self.a();
        if (!self.server.writer.?.submit(self.prepareJob())) return false;
        act.io_busy = true;
        self.server.kickWriterSoon();
        return true;
    }

    /// io_uring: the response leaves in the ring's next submission (the end of this pass
    /// of the loop), with the write deadline running until it is out.
    fn ringSend(self: *Conn) bool {
        const act = self.a();
        const job = self.prepareJob();
        job.msg = .{ .name = null, .namelen = 0, .iov = &job.iov, .iovlen = job.iov_len, .control = null, .controllen = 0, .flags = 0 };
        if (!self.server.io.sendAsync(self.fd, &job.msg, @intFromPtr(self))) return false;
        act.io_busy = true;
        self.server.write_timeouts.arm(&act.write_timer, self.server.now_ms);
        return true;
    }

    /// io_uring: the ring's send of this connection's response finished (`result`: bytes
    /// or -errno). A short send leaves the rest to inline writes, as the writer thread's does.
    pub fn ringSent(self: *Conn, result: i32) void {
        const job = &self.a().job;
        if (result >= 0) {
            job.written = @intCast(result);
            job.err = if (job.written == job.bytes()) .SUCCESS else .AGAIN;
        } else {
            job.written = 0;
            const e: sys.E = @enumFromInt(-result);
            job.err = if (e == .AGAIN) .AGAIN else if (e == .CANCELED) .PIPE else e;
        }
        self.writeDone(job);
    }

    /// The writer thread finished this connection's job (on the Python thread, in poll).
    pub fn writeDone(self: *Conn, job: *const writer_mod.Job) void {
        const act = self.a();
        std.debug.assert(act.io_busy and job == &act.job);
        act.io_busy = false;
        if (act.deferred_fd >= 0) {
            // Closed meanwhile: what close() left for now is done here.
            std.debug.assert(self.state == .closed);
            // Through the backend: on io_uring the cancel queued by close() must run first.
            self.server.io.closeUnregistered(act.deferred_fd);
            act.deferred_fd = -1;
            // close() already retired it (or the stream's finish will): the graveyard waited.
            self.dropOutput();
            return;
        }
        std.debug.assert(job.written <= act.out.len());
        if (job.written > 0) self.advanceOutput(job.written);
        switch (job.err) {
            .SUCCESS => {
                std.debug.assert(act.out.isEmpty());
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

    /// Whether the connection is on the server's pending list (buffered input).
    pub fn isPending(self: *const Conn) bool {
        const act = self.act orelse return false;
        return act.is_pending;
    }

    /// Whether the connection is on the server's list of output to flush at the pass's end.
    pub fn flushQueued(self: *const Conn) bool {
        const act = self.act orelse return false;
        return act.flush_queued;
    }

    /// Whether the writer thread holds this connection's output.
    pub fn ioBusy(self: *const Conn) bool {
        const act = self.act orelse return false;
        return act.io_busy;
    }

    fn advanceOutput(self: *Conn, written: usize) void {
        const act = self.a();
        self.server.bytes_out += written;
        if (self.server.metrics) |m| m.sent_bytes += written;
        act.out.advance(self.bufferSource(), written, self.server.hooks.release_fn);
        // A stream that was told to wait may go on once its share is small again.
        if (act.stream) |st| {
            if (st.write_blocked and !stream_mod.mustWait(st)) self.wakeWriter(st);
        }
    }

    /// Sends (plain) or reads into the output (TLS) the next piece of the pathsend file.
    fn sendFileStep(self: *Conn) FileStep {
        const act = self.a();
        const f = &act.file.?;
        if (f.left == 0) {
            self.dropFile();
            return .progress;
        }
        if (self.is_tls) {
            const want: usize = @intCast(@min(f.left, file_chunk_bytes));
            const space = self.stageOut(want, file_chunk_bytes * 2) catch {
                self.closeFor("out of memory for a file being sent");
                return .closed;
            };
            switch (sys.pread(f.fd, space[0..want], f.pos)) {
                .ok => |n| {
                    if (n == 0) return self.fileTruncated();
                    act.out.addStaged(n);
                    act.out.commitStaged(f.account) catch unreachable;
                    f.pos += n;
                    f.left -= n;
                    return .progress;
                },
                .err => return self.fileTruncated(),
            }
        }
        switch (self.server.io.sendfile(self.fd, f.fd, &f.pos, @intCast(@min(f.left, sendfile_bytes_max)))) {
            .ok => |n| {
                if (n == 0) return self.fileTruncated();
                f.left -= n;
                f.account.sent += n;
                self.server.bytes_out += n;
                if (self.server.metrics) |m| m.sent_bytes += n;
                if (act.write_timer.armed()) self.server.write_timeouts.arm(&act.write_timer, self.server.now_ms);
                return .progress;
            },
            .err => |e| {
                if (e != .AGAIN) {
                    self.close();
                    return .closed;
                }
                if (!act.write_timer.armed()) self.server.write_timeouts.arm(&act.write_timer, self.server.now_ms);
                self.setWriting(true);
                return .wait;
            },
        }
    }

    /// The file ended (or could not be read) before the length the response announced:
    /// the response cannot be completed honestly.
    fn fileTruncated(self: *Conn) FileStep {
        self.closeFor("pathsend: the file is shorter than the response's content-length (truncated while sent?): connection closed");
        return .closed;
    }

    fn dropFile(self: *Conn) void {
        const act = self.act orelse return;
        const f = act.file orelse return;
        sys.close(f.fd);
        act.file = null;
    }

    fn dropOutput(self: *Conn) void {
        const act = self.a();
        std.debug.assert(!act.io_busy);
        act.out.drop(self.bufferSource(), self.server.hooks.release_fn);
    }

    // ---- transport: the plain socket, or TLS over it ------------------------------

    /// HTTPS. The handshake comes first (its deadline is the header timeout, counted
    /// from the accept). A TLS record can need the other direction (a read may have to
    /// write, decrypted bytes may wait inside OpenSSL), so any event retries both sides.
    fn onTlsEvent(self: *Conn, readable: bool, writable: bool, hangup: bool) void {
        const ssl = self.session().?;
        if (self.state == .closed) return;
        if (self.state == .proxy) {
            // `--proxy-protocol`: the balancer's header comes before the ClientHello.
            if (readable or hangup) self.onReadable();
            if (self.state != .head) return; // more of it to come, or refused
            self.releaseIfIdle();
        }
        if (!tls.handshakeDone(ssl)) switch (tls.handshake(ssl)) {
            .ok => {},
            .want_read => return self.setWriting(false),
            .want_write => return self.setWriting(true),
            .failed => return self.close(),
        };
        const had_output = self.outputLen() != 0;
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
        // A PROXY header precedes TLS: it is read from the socket itself.
        const ssl = (if (self.state == .proxy) null else self.session()) orelse return self.server.io.recv(self.fd, buf);
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
        const ssl = self.session() orelse return self.server.io.sendv(self.fd, iov);
        var parts: [outq.segments_max][]const u8 = undefined;
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

    /// Decrypted input waits in OpenSSL while we still read: writable interest (nearly
    /// always ready) stands in for the readiness the socket no longer signals. WebSocket
    /// too: a frame header cut by a record boundary leaves the next read less room than
    /// a record, and the rest of a message's last record would wait for the peer's next.
    fn tlsPending(self: *const Conn) bool {
        const ssl = self.session() orelse return false;
        if (!protocol.readsDecrypted(self)) return false;
        return tls.handshakeDone(ssl) and tls.hasPending(ssl);
    }

    // ---- closing --------------------------------------------------------------

    /// Stops sending, then reads and drops what the peer still sends for a moment:
    /// closing with unread bytes would reset the connection and could destroy the
    /// response the peer has not read yet. `unread_possible` false: nothing can follow
    /// (the request was read whole and the peer was told the connection ends).
    pub fn lingerClose(self: *Conn, unread_possible: bool) void {
        const act = self.a();
        // TLS: close_notify tells the client the (possibly close-delimited) body is whole.
        if (self.session()) |ssl| tls.shutdown(ssl);
        if (!unread_possible and act.rstart == act.rlen) return self.close();
        self.server.io.shutdownWrite(self.fd);
        self.state = .lingering;
        act.rstart = act.rlen;
        self.releaseReadBuffer();
        self.server.linger_timeouts.arm(&self.timer, self.server.now_ms);
        self.setReading(true);
    }

    /// Up to 64 KiB are dropped per event (io_uring may hold far more than a socket
    /// buffer's worth already received), so the peer's end is reached in few passes.
    fn drainLinger(self: *Conn) void {
        var scratch: [linger_scratch_bytes]u8 = undefined;
        for (0..linger_reads_max) |_| switch (self.server.io.recv(self.fd, &scratch)) {
            .ok => |n| if (n == 0) return self.close(),
            .err => |e| return if (e != .AGAIN) self.close(),
        };
    }

    /// Closes for a reason the peer did not cause (the engine ran out of something):
    /// logged on `zigcorn.error`, then closed like any other connection.
    pub fn closeFor(self: *Conn, reason: []const u8) void {
        self.server.hooks.logError(reason);
        self.close();
    }

    /// Closes the socket now. The struct lives on while a stream still points at it.
    pub fn close(self: *Conn) void {
        if (self.state == .closed) return;
        self.state = .closed;
        self.timer.disarm();
        self.endSession();
        // The writer thread may be writing to it: the number must not be reused yet.
        if (self.ioBusy()) {
            self.server.io.unregister(self.fd);
            self.a().deferred_fd = self.fd;
        } else {
            self.server.io.close(self.fd);
        }
        self.fd = -1;
        self.server.connectionClosed(self);
        const act = self.act orelse return self.server.retire(self);
        act.write_timer.disarm();
        if (act.rbuf) |b| self.server.pool.release(b);
        act.rbuf = null;
        act.rstart = 0;
        act.rlen = 0;
        self.dropTlsPrefix();
        // A busy connection's output is dropped by writeDone; the graveyard waits for it.
        if (!act.io_busy) self.dropOutput();
        self.dropFile();
        if (protocol.closed(self)) return;
        if (act.stream) |st| {
            self.server.hooks.wakeRead(st);
            self.wakeWriter(st);
        } else {
            self.server.retire(self);
        }
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
