//! Thin, total wrappers over the Linux system calls the engine uses.
//!
//! std.posix maps some errno values to `unreachable`; inside a Python process a
//! panic kills the worker, so every call here returns the raw errno instead and
//! the caller decides.
const std = @import("std");
const linux = std.os.linux;

pub const E = linux.E;

/// The result of a system call: the value, or the errno it failed with.
pub fn Result(comptime T: type) type {
    return union(enum) { ok: T, err: E };
}

fn check(rc: usize) Result(usize) {
    const e = E.init(rc);
    if (e == .SUCCESS) return .{ .ok = rc };
    return .{ .err = e };
}

pub fn read(fd: i32, buf: []u8) Result(usize) {
    while (true) {
        const r = check(linux.read(fd, buf.ptr, buf.len));
        if (r == .err and r.err == .INTR) continue;
        return r;
    }
}

pub fn writev(fd: i32, iov: []const std.posix.iovec_const) Result(usize) {
    while (true) {
        const r = check(linux.writev(fd, iov.ptr, iov.len));
        if (r == .err and r.err == .INTR) continue;
        return r;
    }
}

pub fn pread(fd: i32, buf: []u8, offset: u64) Result(usize) {
    while (true) {
        const r = check(linux.pread(fd, buf.ptr, buf.len, @intCast(offset)));
        if (r == .err and r.err == .INTR) continue;
        return r;
    }
}

/// Copies up to `count` bytes of file `in_fd` from `offset.*` to socket `out_fd` in
/// the kernel (advancing `offset`).
pub fn sendfile(out_fd: i32, in_fd: i32, offset: *u64, count: usize) Result(usize) {
    while (true) {
        var off: i64 = @intCast(offset.*);
        const r = check(linux.sendfile(out_fd, in_fd, &off, count));
        if (r == .ok) offset.* = @intCast(off);
        if (r == .err and r.err == .INTR) continue;
        return r;
    }
}

/// Opens a regular file for reading; its size, or the errno.
pub const OpenedFile = struct { fd: i32, size: u64 };

pub fn openFile(path: [*:0]const u8) Result(OpenedFile) {
    const rc = linux.open(path, .{ .ACCMODE = .RDONLY, .CLOEXEC = true, .NOCTTY = true }, 0);
    switch (E.init(rc)) {
        .SUCCESS => {},
        else => |e| return .{ .err = e },
    }
    const fd: i32 = @intCast(rc);
    var st: linux.Stat = undefined;
    const e = E.init(linux.fstat(fd, &st));
    if (e != .SUCCESS) {
        close(fd);
        return .{ .err = e };
    }
    if (!linux.S.ISREG(st.mode)) {
        close(fd);
        return .{ .err = .ISDIR };
    }
    return .{ .ok = .{ .fd = fd, .size = @intCast(st.size) } };
}

/// Creates (or empties) a file for writing, mode 0644: a debugging log's (qlog) file.
pub fn createFile(path: [*:0]const u8) Result(i32) {
    const flags: linux.O = .{
        .ACCMODE = .WRONLY,
        .CREAT = true,
        .TRUNC = true,
        .CLOEXEC = true,
        .NOCTTY = true,
    };
    const r = check(linux.open(path, flags, 0o644));
    return switch (r) {
        .ok => |fd| .{ .ok = @intCast(fd) },
        .err => |e| .{ .err = e },
    };
}

pub fn close(fd: i32) void {
    _ = linux.close(fd);
}

pub fn accept(fd: i32, addr: *linux.sockaddr.storage, len: *linux.socklen_t) Result(i32) {
    len.* = @sizeOf(linux.sockaddr.storage);
    const flags = linux.SOCK.NONBLOCK | linux.SOCK.CLOEXEC;
    return switch (check(linux.accept4(fd, @ptrCast(addr), len, flags))) {
        .ok => |v| .{ .ok = @intCast(v) },
        .err => |e| .{ .err = e },
    };
}

pub fn setIntOption(fd: i32, level: i32, name: u32, value: c_int) bool {
    const bytes = std.mem.asBytes(&value);
    return E.init(linux.setsockopt(fd, level, name, bytes.ptr, @intCast(bytes.len))) == .SUCCESS;
}

/// Sets a socket option whose value is any bytes (a struct, a BPF program's descriptor).
pub fn setOption(fd: i32, level: i32, name: u32, value: []const u8) Result(void) {
    return switch (check(linux.setsockopt(fd, level, name, value.ptr, @intCast(value.len)))) {
        .ok => .{ .ok = {} },
        .err => |e| .{ .err = e },
    };
}

/// A new socket, non-blocking and close-on-exec.
pub fn socket(family: u32, kind: u32, protocol: u32) Result(i32) {
    const flags = linux.SOCK.NONBLOCK | linux.SOCK.CLOEXEC;
    return switch (check(linux.socket(family, kind | flags, protocol))) {
        .ok => |v| .{ .ok = @intCast(v) },
        .err => |e| .{ .err = e },
    };
}

pub fn bind(fd: i32, addr: *const linux.sockaddr, len: linux.socklen_t) Result(void) {
    return switch (check(linux.bind(fd, addr, len))) {
        .ok => .{ .ok = {} },
        .err => |e| .{ .err = e },
    };
}

/// The address a socket is bound to (its port when it asked for port 0).
pub fn getsockname(fd: i32, addr: *linux.sockaddr.storage) Result(linux.socklen_t) {
    var len: linux.socklen_t = @sizeOf(linux.sockaddr.storage);
    return switch (check(linux.getsockname(fd, @ptrCast(addr), &len))) {
        .ok => .{ .ok = len },
        .err => |e| .{ .err = e },
    };
}

/// Receives up to `msgs.len` datagrams without waiting (MSG_DONTWAIT): how many arrived,
/// each message's `len` set; `.err = .AGAIN` when none was queued.
pub fn recvmmsg(fd: i32, msgs: []linux.mmsghdr) Result(usize) {
    std.debug.assert(msgs.len > 0 and msgs.len <= std.math.maxInt(u32));
    while (true) {
        const r = check(linux.recvmmsg(fd, msgs.ptr, @intCast(msgs.len), linux.MSG.DONTWAIT, null));
        if (r == .err and r.err == .INTR) continue;
        return r;
    }
}

/// Sends up to `msgs.len` datagrams without waiting: how many the kernel took (the rest are
/// the caller's to keep); `.err` only when not even the first was taken.
pub fn sendmmsg(fd: i32, msgs: []linux.mmsghdr_const) Result(usize) {
    std.debug.assert(msgs.len > 0 and msgs.len <= std.math.maxInt(u32));
    while (true) {
        const rc = linux.syscall4(.sendmmsg, @as(usize, @bitCast(@as(isize, fd))), @intFromPtr(msgs.ptr), msgs.len, linux.MSG.DONTWAIT);
        const r = check(rc);
        if (r == .err and r.err == .INTR) continue;
        return r;
    }
}

pub fn shutdownWrite(fd: i32) void {
    _ = linux.shutdown(fd, linux.SHUT.WR);
}

/// Seconds and nanoseconds of CLOCK_MONOTONIC_COARSE: cheap (vDSO), ms resolution is plenty for timeouts.
/// Through the C library when linked, as `monotonicUs` (for the vDSO).
pub fn monotonicMs() u64 {
    const ts = std.posix.clock_gettime(.MONOTONIC_COARSE) catch unreachable;
    return @as(u64, @intCast(ts.sec)) * 1000 + @as(u64, @intCast(ts.nsec)) / std.time.ns_per_ms;
}

/// Nanoseconds of CLOCK_MONOTONIC, through libc: its vDSO lookup works inside a loaded
/// extension (Zig's own wants its start code's auxv), so this is no system call.
pub fn monotonicNs() u64 {
    var ts: std.c.timespec = undefined;
    _ = std.c.clock_gettime(.MONOTONIC, &ts);
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

/// CPU time of the calling thread, in nanoseconds (a system call: sample it sparingly).
pub fn threadCpuNs() u64 {
    var ts: linux.timespec = undefined;
    _ = linux.clock_gettime(.THREAD_CPUTIME_ID, &ts);
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

/// `/proc/thread-self/schedstat` of the calling thread, opened for `runQueueWaitNs`
/// (the file stays bound to the thread that opened it); -1 where the kernel has none.
pub fn openThreadSchedStat() i32 {
    const rc = linux.open("/proc/thread-self/schedstat", .{ .ACCMODE = .RDONLY, .CLOEXEC = true }, 0);
    if (E.init(rc) != .SUCCESS) return -1;
    return @intCast(rc);
}

/// Nanoseconds the thread of `schedstat_fd` has spent runnable but waiting for a CPU:
/// on a shared machine, what a saturated thread's CPU time falls short of the wall
/// time by. 0 when unknown (`schedstat_fd` < 0, an unreadable or odd file).
pub fn runQueueWaitNs(schedstat_fd: i32) u64 {
    if (schedstat_fd < 0) return 0;
    var buf: [96]u8 = undefined;
    return switch (pread(schedstat_fd, &buf, 0)) {
        .ok => |n| parseRunQueueWaitNs(buf[0..n]),
        .err => 0,
    };
}

/// The second of schedstat's three numbers: "<on cpu ns> <waiting ns> <timeslices>\n".
fn parseRunQueueWaitNs(text: []const u8) u64 {
    var fields = std.mem.tokenizeAny(u8, text, " \n");
    _ = fields.next() orelse return 0;
    const waiting = fields.next() orelse return 0;
    _ = fields.next() orelse return 0; // a cut-off read: the second number may be too
    return std.fmt.parseInt(u64, waiting, 10) catch 0;
}

test "schedstat: the run queue wait is the second number; anything odd is 0" {
    try std.testing.expectEqual(@as(u64, 31608331), parseRunQueueWaitNs("167041 31608331 3\n"));
    try std.testing.expectEqual(@as(u64, 0), parseRunQueueWaitNs("0 0 0\n"));
    try std.testing.expectEqual(@as(u64, 0), parseRunQueueWaitNs(""));
    try std.testing.expectEqual(@as(u64, 0), parseRunQueueWaitNs("167041 316"));
    try std.testing.expectEqual(@as(u64, 0), parseRunQueueWaitNs("167041 x 3\n"));
    try std.testing.expectEqual(@as(u64, 0), parseRunQueueWaitNs("1 99999999999999999999999 3\n"));
    try std.testing.expect(runQueueWaitNs(-1) == 0);
    const fd = openThreadSchedStat();
    defer if (fd >= 0) close(fd);
    _ = runQueueWaitNs(fd); // whatever this machine says, no failure
}

/// Microseconds of CLOCK_MONOTONIC (request durations, QUIC's timers). Through the C
/// library when linked (the extension): its clock_gettime reads the vDSO. Zig's own
/// `linux.clock_gettime` finds the vDSO through the auxiliary vector that only Zig's start
/// code records, so inside a shared library loaded by Python every call was a system call
/// (strace: five a request over HTTP/3).
pub fn monotonicUs() u64 {
    // CLOCK_MONOTONIC exists on every Linux: a failure is a broken contract, not input.
    const ts = std.posix.clock_gettime(.MONOTONIC) catch unreachable;
    return @as(u64, @intCast(ts.sec)) * 1_000_000 + @as(u64, @intCast(ts.nsec)) / std.time.ns_per_us;
}

pub fn realtimeSeconds() i64 {
    const ts = std.posix.clock_gettime(.REALTIME) catch unreachable;
    return @intCast(ts.sec);
}

/// Hands the C heap's free pages back to the OS (glibc's malloc_trim). Weak: with a C
/// library that lacks it (musl) this does nothing instead of failing to load.
pub fn trimHeap() void {
    const trim = @extern(?*const fn (usize) callconv(.c) c_int, .{ .name = "malloc_trim", .linkage = .weak });
    if (trim) |f| _ = f(0);
}
