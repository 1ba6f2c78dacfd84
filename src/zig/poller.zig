//! The event source: one small interface the connection code sees, epoll behind it.
//!
//! An io_uring backend is planned beside this one; it must offer the same four
//! calls (`register`, `update`, `unregister`, `wait`) and the same `Event`, so the
//! server never talks to epoll directly. Interest is level-triggered: a connection
//! that cannot take more bytes drops `readable` from its interest instead of leaving
//! data unread under an edge trigger.
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

pub const Poller = struct {
    fd: i32,

    pub fn init() !Poller {
        const rc = linux.epoll_create1(linux.EPOLL.CLOEXEC);
        if (sys.E.init(rc) != .SUCCESS) return error.EpollCreateFailed;
        return .{ .fd = @intCast(rc) };
    }

    pub fn deinit(self: *Poller) void {
        sys.close(self.fd);
        self.fd = -1;
    }

    pub fn register(self: *Poller, fd: i32, token: usize, interest: Interest) bool {
        return self.ctl(linux.EPOLL.CTL_ADD, fd, token, interest);
    }

    /// A listening socket, possibly shared with other worker processes: EPOLLEXCLUSIVE
    /// wakes one waiter per connection instead of every worker.
    pub fn registerListener(self: *Poller, fd: i32, token: usize) bool {
        var ev = linux.epoll_event{ .events = linux.EPOLL.IN | linux.EPOLL.EXCLUSIVE, .data = .{ .ptr = token } };
        return sys.E.init(linux.epoll_ctl(self.fd, linux.EPOLL.CTL_ADD, fd, &ev)) == .SUCCESS;
    }

    pub fn update(self: *Poller, fd: i32, token: usize, interest: Interest) bool {
        return self.ctl(linux.EPOLL.CTL_MOD, fd, token, interest);
    }

    pub fn unregister(self: *Poller, fd: i32) void {
        _ = linux.epoll_ctl(self.fd, linux.EPOLL.CTL_DEL, fd, null);
    }

    fn ctl(self: *Poller, op: u32, fd: i32, token: usize, interest: Interest) bool {
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

    /// Collects ready events without blocking (timeout_ms = 0) or waiting up to timeout_ms.
    pub fn wait(self: *Poller, batch: *Batch, timeout_ms: i32) void {
        const rc = linux.epoll_wait(self.fd, &batch.raw, batch.raw.len, timeout_ms);
        batch.len = if (sys.E.init(rc) == .SUCCESS) rc else 0;
    }
};
