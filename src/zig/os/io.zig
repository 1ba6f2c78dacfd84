//! The I/O backend: the only place the engine waits for events or moves bytes through a
//! socket. The server and its connections call these and nothing else (no `read`,
//! `writev`, `accept4` or `epoll_*` elsewhere), so a second backend replaces this file's
//! `Backend`, not the code above it.
//!
//! The interface, in two halves:
//! - **operations** on a descriptor: `accept`, `recv`, `sendv`, `shutdownWrite`, `close`.
//!   On epoll each is the system call, done now; `.err = .AGAIN` means "not ready: wait
//!   for the interest you set".
//! - **events**: `register` / `update` (a connection's `Interest`) / `unregister`, and
//!   `wait`, which fills a `Batch` of `Event`s, each naming a token (a `*Conn`, or one of
//!   the server's own descriptors) and what happened to it.
//!
//! Two backends sit behind it, chosen at start (`--io-backend`): epoll, where each
//! operation is the system call done now and `.err = .AGAIN` means "wait for the
//! interest you set"; and io_uring (`os/io_uring.zig`), where receives and accepts complete
//! into the backend ahead of time and `recv`/`accept` hand over what arrived, so the
//! connection code above is the same for both. TLS runs over this interface too:
//! OpenSSL's reads and writes call the connection's `recv`/`sendv` through a BIO of
//! ours (`tls.Transport`).
//!
//! Interest is level-triggered: a connection that cannot take more bytes drops
//! `readable` from its interest instead of leaving data unread under an edge trigger.
const std = @import("std");
const linux = std.os.linux;
const sys = @import("sys.zig");
const uring_mod = @import("io_uring.zig");

pub const Interest = struct {
    readable: bool = true,
    writable: bool = false,

    fn mask(self: Interest) u32 {
        // RDHUP is always asked for: it tells us a peer went away even while we are
        // not reading (an app still working on a response must see http.disconnect).
        var m: u32 = linux.EPOLL.RDHUP;
        if (self.readable) m |= linux.EPOLL.IN;
        if (self.writable) m |= linux.EPOLL.OUT;
        return m;
    }
};

pub const Event = uring_mod.Event;

pub const Kind = enum(u8) { epoll = 0, io_uring = 1 };

pub const Config = struct {
    kind: Kind,
    uring: uring_mod.Config,
};

pub const Backend = struct {
    /// The descriptor the asyncio loop watches: the epoll set, or the ring.
    fd: i32,
    /// Set when the backend is io_uring (`os/io_uring.zig`); every operation goes there.
    uring: ?*uring_mod.Uring = null,
    /// io_uring was asked for and the kernel refused it: why (epoll serves instead).
    fallback: ?anyerror = null,

    pub fn init(cfg: Config) !Backend {
        if (cfg.kind == .io_uring) {
            if (uring_mod.Uring.init(cfg.uring)) |u| {
                return .{ .fd = u.fd(), .uring = u };
            } else |e| {
                var b = try initEpoll();
                b.fallback = e;
                return b;
            }
        }
        return initEpoll();
    }

    fn initEpoll() !Backend {
        const rc = linux.epoll_create1(linux.EPOLL.CLOEXEC);
        if (sys.E.init(rc) != .SUCCESS) return error.EpollCreateFailed;
        return .{ .fd = @intCast(rc) };
    }

    /// io_uring: work is due that the ring's descriptor does not show (see
    /// `Uring.needsWait`); always false on epoll, whose descriptor tells all.
    pub fn needsWait(self: *Backend) bool {
        const u = self.uring orelse return false;
        return u.needsWait();
    }

    pub fn kind(self: *const Backend) Kind {
        return if (self.uring != null) .io_uring else .epoll;
    }

    pub fn deinit(self: *Backend) void {
        if (self.uring) |u| {
            u.deinit();
            self.uring = null;
        } else {
            sys.close(self.fd);
        }
        self.fd = -1;
    }

    pub fn register(self: *Backend, fd: i32, token: usize, interest: Interest) bool {
        if (self.uring) |u| return u.register(fd, token, interest.readable, interest.writable);
        return self.ctl(linux.EPOLL.CTL_ADD, fd, token, interest);
    }

    /// An eventfd or timerfd of the server's own, reported with `token` when readable.
    pub fn registerPollable(self: *Backend, fd: i32, token: usize) bool {
        if (self.uring) |u| return u.registerPollable(fd, token);
        return self.ctl(linux.EPOLL.CTL_ADD, fd, token, .{});
    }

    /// A pollable socket (`registerPollable`) is reported writable too while `on`
    /// (level-triggered: every pass it can take bytes), under the same token.
    pub fn watchWritable(self: *Backend, fd: i32, token: usize, on: bool) bool {
        if (self.uring) |u| return u.watchWritable(fd, token, on);
        return self.ctl(linux.EPOLL.CTL_MOD, fd, token, .{ .writable = on });
    }

    /// A listening socket, possibly shared with other worker processes: EPOLLEXCLUSIVE
    /// wakes one waiter per connection instead of every worker.
    pub fn registerListener(self: *Backend, fd: i32, token: usize) bool {
        if (self.uring) |u| return u.registerListener(fd, token);
        var ev = linux.epoll_event{ .events = linux.EPOLL.IN | linux.EPOLL.EXCLUSIVE, .data = .{ .ptr = token } };
        return sys.E.init(linux.epoll_ctl(self.fd, linux.EPOLL.CTL_ADD, fd, &ev)) == .SUCCESS;
    }

    pub fn update(self: *Backend, fd: i32, token: usize, interest: Interest) bool {
        if (self.uring) |u| return u.update(fd, interest.readable, interest.writable);
        return self.ctl(linux.EPOLL.CTL_MOD, fd, token, interest);
    }

    pub fn unregister(self: *Backend, fd: i32) void {
        if (self.uring) |u| return u.unregister(fd);
        _ = linux.epoll_ctl(self.fd, linux.EPOLL.CTL_DEL, fd, null);
    }

    fn ctl(self: *Backend, op: u32, fd: i32, token: usize, interest: Interest) bool {
        var ev = linux.epoll_event{ .events = interest.mask(), .data = .{ .ptr = token } };
        return sys.E.init(linux.epoll_ctl(self.fd, op, fd, &ev)) == .SUCCESS;
    }

    pub const Batch = struct {
        raw: [256]linux.epoll_event = undefined,
        events: [256]Event = undefined,
        len: usize = 0,
        completions: bool = false,

        pub fn get(self: *const Batch, i: usize) Event {
            if (self.completions) return self.events[i];
            const ev = self.raw[i];
            const hup = linux.EPOLL.HUP | linux.EPOLL.ERR | linux.EPOLL.RDHUP;
            return .{
                .token = ev.data.ptr,
                .readable = ev.events & linux.EPOLL.IN != 0,
                .writable = ev.events & linux.EPOLL.OUT != 0,
                .hangup = ev.events & hup != 0,
            };
        }
    };

    /// io_uring: work queued outside `wait` calls this, so the server submits it when the
    /// loop's pass ends (epoll has nothing to submit).
    pub fn setKick(self: *Backend, kick: uring_mod.Kick) void {
        if (self.uring) |u| u.kick = kick;
    }

    /// io_uring only: queues a whole response as a `sendmsg` in the ring (see `Uring.sendAsync`).
    pub fn sendAsync(self: *Backend, fd: i32, msg: *const std.posix.msghdr_const, token: usize) bool {
        const u = self.uring orelse return false;
        return u.sendAsync(fd, msg, token);
    }

    pub fn completions(self: *const Backend) bool {
        return self.uring != null;
    }

    /// io_uring: submits what the pass queued; true if completions wait to be handled.
    pub fn submit(self: *Backend) bool {
        const u = self.uring orelse return false;
        return u.submit();
    }

    /// io_uring: the end of a batch's handling (see `Uring.rearm`).
    pub fn rearm(self: *Backend) void {
        if (self.uring) |u| u.rearm();
    }

    /// io_uring: entries wait in the submission queue (`rearm` queued them); always false
    /// on epoll, which has no queue.
    pub fn unsubmitted(self: *const Backend) bool {
        const u = self.uring orelse return false;
        return u.unsubmitted();
    }

    /// io_uring: events wait beyond the last batch.
    pub fn hasBacklog(self: *const Backend) bool {
        const u = self.uring orelse return false;
        return u.hasBacklog();
    }

    // ---- operations -----------------------------------------------------------------

    /// A new connection from a listening socket (non-blocking, close-on-exec), and its peer.
    pub fn accept(self: *Backend, listen_fd: i32, peer: *linux.sockaddr.storage) sys.Result(i32) {
        if (self.uring) |u| return u.accept(listen_fd, peer);
        var len: linux.socklen_t = undefined;
        return sys.accept(listen_fd, peer, &len);
    }

    /// Bytes from the socket into `buf`: `.ok = 0` is the peer's end of stream.
    pub fn recv(self: *Backend, fd: i32, buf: []u8) sys.Result(usize) {
        if (self.uring) |u| return u.recv(fd, buf);
        return sys.read(fd, buf);
    }

    /// As many of the bytes in `iov` as the socket takes now.
    pub fn sendv(self: *Backend, fd: i32, iov: []const std.posix.iovec_const) sys.Result(usize) {
        if (self.uring) |u| return u.sendv(fd, iov);
        return sys.writev(fd, iov);
    }

    /// File bytes to a socket without passing through userspace (pathsend on plain connections).
    pub fn sendfile(self: *Backend, fd: i32, file_fd: i32, offset: *u64, count: usize) sys.Result(usize) {
        if (self.uring) |u| return u.sendfile(fd, file_fd, offset, count);
        return sys.sendfile(fd, file_fd, offset, count);
    }

    pub fn shutdownWrite(_: *Backend, fd: i32) void {
        sys.shutdownWrite(fd);
    }

    /// The descriptor leaves the event set and is closed.
    pub fn close(self: *Backend, fd: i32) void {
        if (self.uring) |u| return u.close(fd);
        self.unregister(fd);
        sys.close(fd);
    }

    /// Closes a descriptor already taken out of the event set (`unregister`), once the
    /// writer thread or the ring is done with it.
    pub fn closeUnregistered(self: *Backend, fd: i32) void {
        if (self.uring) |u| return u.closeLinked(fd);
        sys.close(fd);
    }

    // ---- events ---------------------------------------------------------------------

    /// Collects ready events without blocking (timeout_ms = 0) or waiting up to timeout_ms.
    pub fn wait(self: *Backend, batch: *Batch, timeout_ms: i32) void {
        if (self.uring) |u| {
            std.debug.assert(timeout_ms == 0);
            batch.completions = true;
            batch.len = u.wait(&batch.events);
            return;
        }
        const rc = linux.epoll_wait(self.fd, &batch.raw, batch.raw.len, timeout_ms);
        batch.len = if (sys.E.init(rc) == .SUCCESS) rc else 0;
    }

    /// io_uring, at the end of a pass: only the completed `sendAsync`s (`Uring.waitSent`);
    /// epoll has none.
    pub fn waitSent(self: *Backend, batch: *Batch) void {
        const u = self.uring orelse {
            batch.len = 0;
            return;
        };
        batch.completions = true;
        batch.len = u.waitSent(&batch.events);
    }
};
