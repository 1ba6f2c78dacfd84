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
//! Where io_uring plugs in: its `Backend` submits the same operations to the ring
//! (multishot accept and receive into a provided-buffer ring, `sendmsg` for `sendv`) and
//! its `wait` turns completions into `Event`s that carry the operation's result (bytes
//! received into which buffer, bytes sent), where epoll's carry readiness. The
//! connection already treats `recv`/`sendv` as "give me what is there" and reacts to
//! events, so it gains a completion path (`Event.result`) beside the readiness one. TLS
//! already runs over this interface: OpenSSL's reads and writes call the connection's
//! `recv`/`sendv` through a BIO of ours (`tls.Transport`); on io_uring those callbacks
//! take the bytes the completions brought.
//!
//! Interest is level-triggered: a connection that cannot take more bytes drops
//! `readable` from its interest instead of leaving data unread under an edge trigger.
const std = @import("std");
const linux = std.os.linux;
const sys = @import("sys.zig");

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

pub const Event = struct {
    token: usize,
    readable: bool,
    writable: bool,
    /// The peer closed its side or the socket failed.
    hangup: bool,
};

pub const Backend = struct {
    fd: i32,

    pub fn init() !Backend {
        const rc = linux.epoll_create1(linux.EPOLL.CLOEXEC);
        if (sys.E.init(rc) != .SUCCESS) return error.EpollCreateFailed;
        return .{ .fd = @intCast(rc) };
    }

    pub fn deinit(self: *Backend) void {
        sys.close(self.fd);
        self.fd = -1;
    }

    pub fn register(self: *Backend, fd: i32, token: usize, interest: Interest) bool {
        return self.ctl(linux.EPOLL.CTL_ADD, fd, token, interest);
    }

    /// A listening socket, possibly shared with other worker processes: EPOLLEXCLUSIVE
    /// wakes one waiter per connection instead of every worker.
    pub fn registerListener(self: *Backend, fd: i32, token: usize) bool {
        var ev = linux.epoll_event{ .events = linux.EPOLL.IN | linux.EPOLL.EXCLUSIVE, .data = .{ .ptr = token } };
        return sys.E.init(linux.epoll_ctl(self.fd, linux.EPOLL.CTL_ADD, fd, &ev)) == .SUCCESS;
    }

    pub fn update(self: *Backend, fd: i32, token: usize, interest: Interest) bool {
        return self.ctl(linux.EPOLL.CTL_MOD, fd, token, interest);
    }

    pub fn unregister(self: *Backend, fd: i32) void {
        _ = linux.epoll_ctl(self.fd, linux.EPOLL.CTL_DEL, fd, null);
    }

    fn ctl(self: *Backend, op: u32, fd: i32, token: usize, interest: Interest) bool {
        var ev = linux.epoll_event{ .events = interest.mask(), .data = .{ .ptr = token } };
        return sys.E.init(linux.epoll_ctl(self.fd, op, fd, &ev)) == .SUCCESS;
    }

    pub const Batch = struct {
        raw: [256]linux.epoll_event = undefined,
        len: usize = 0,

        pub fn get(self: *const Batch, i: usize) Event {
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

    // ---- operations -----------------------------------------------------------------

    /// A new connection from a listening socket (non-blocking, close-on-exec), and its peer.
    pub fn accept(_: *Backend, listen_fd: i32, peer: *linux.sockaddr.storage) sys.Result(i32) {
        var len: linux.socklen_t = undefined;
        return sys.accept(listen_fd, peer, &len);
    }

    /// Bytes from the socket into `buf`: `.ok = 0` is the peer's end of stream.
    pub fn recv(_: *Backend, fd: i32, buf: []u8) sys.Result(usize) {
        return sys.read(fd, buf);
    }

    /// As many of the bytes in `iov` as the socket takes now.
    pub fn sendv(_: *Backend, fd: i32, iov: []const std.posix.iovec_const) sys.Result(usize) {
        return sys.writev(fd, iov);
    }

    /// File bytes to a socket without passing through userspace (pathsend on plain connections).
    pub fn sendfile(_: *Backend, fd: i32, file_fd: i32, offset: *u64, count: usize) sys.Result(usize) {
        return sys.sendfile(fd, file_fd, offset, count);
    }

    pub fn shutdownWrite(_: *Backend, fd: i32) void {
        sys.shutdownWrite(fd);
    }

    /// The descriptor leaves the event set and is closed.
    pub fn close(self: *Backend, fd: i32) void {
        self.unregister(fd);
        sys.close(fd);
    }

    // ---- events ---------------------------------------------------------------------

    /// Collects ready events without blocking (timeout_ms = 0) or waiting up to timeout_ms.
    pub fn wait(self: *Backend, batch: *Batch, timeout_ms: i32) void {
        const rc = linux.epoll_wait(self.fd, &batch.raw, batch.raw.len, timeout_ms);
        batch.len = if (sys.E.init(rc) == .SUCCESS) rc else 0;
    }
};
