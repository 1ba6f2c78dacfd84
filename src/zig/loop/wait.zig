//! The wait of zigcorn's loop pass (`loop/core.zig` runs the pass): the selector's epoll
//! set waited on without the GIL, for as long as the first timer allows; the engine's
//! readiness handled at once, the wake-up descriptor drained, third-party descriptors
//! handed to asyncio; and the engine's end of the pass (`settle`: one flush, the writer
//! thread woken, the busy poll). Apart from the ready queue and the timers because this
//! is where the loop meets the kernel and the engine, and where signals interrupt it.
const std = @import("std");
const assert = std.debug.assert;
const linux = std.os.linux;
const py = @import("../python/capi.zig");
const c = py.c;
const Object = py.Object;
const sys = @import("../os/sys.zig");
const engine_mod = @import("../python/engine.zig");
const core_mod = @import("core.zig");
const Core = core_mod.Core;
const events_max = core_mod.events_max;
const Server = @import("../core/server.zig").Server;

/// asyncio's MAXIMUM_SELECT_TIMEOUT: one wait never sleeps longer than a day.
const select_timeout_s_max: f64 = 24 * 3600;

/// How long the pass may sleep for the first timer, due at `deadline` (loop time
/// `now`): whole milliseconds rounded up, as asyncio's selector does (waking a hair
/// early would spin), never over a day. Any deadline the heap holds (infinities too)
/// gives a wait `epoll_wait` takes.
pub fn waitTimeoutMs(deadline: f64, now: f64) i32 {
    assert(!std.math.isNan(deadline) and std.math.isFinite(now));
    const s = std.math.clamp(deadline - now, 0, select_timeout_s_max);
    const ms: i32 = @intFromFloat(@ceil(s * 1000));
    assert(ms >= 0 and ms <= @as(i32, @intFromFloat(select_timeout_s_max * 1000)));
    return ms;
}

/// Waits for readiness (without the GIL) and handles it: the engine's events now, the
/// wake-up drained, third-party descriptors through asyncio's `_process_events`.
pub fn poll(loop: *Object, core: *Core, timeout_ms: i32, engine_due: bool) bool {
    if (core.epfd < 0) return py.runtimeError("the loop is not set up") != null;
    // A wait that cannot block keeps the GIL: handing it over and back costs more than
    // the system call, and no other thread needs it for that long.
    const rc = if (timeout_ms == 0) linux.epoll_wait(core.epfd, &core.events, events_max, 0) else blk: {
        const spin_ns = writerSpinNs(core);
        core.sleeping = true;
        const ts = py.releaseGil();
        defer core.sleeping = false; // after takeGil (defers run in reverse)
        defer py.takeGil(ts);
        if (spin_ns != 0) {
            if (spinEvents(core, spin_ns)) |r| break :blk r;
        }
        break :blk linux.epoll_wait(core.epfd, &core.events, events_max, timeout_ms);
    };
    const n: usize = switch (waitResult(rc)) {
        .events => |k| k,
        // A signal: its Python handler runs now (and may raise, as in asyncio's select).
        .interrupted => return c.PyErr_CheckSignals() == 0,
        .failed => |e| return osError(e) != null,
    };
    var engine_ready = engine_due;
    var others: ?*Object = null;
    defer py.xdecref(others);
    for (core.events[0..n]) |ev| {
        const fd = ev.data.fd;
        if (fd == core.engine_fd) {
            engine_ready = true;
        } else if (fd == core.wake_fd) {
            var buf: u64 = 0;
            _ = linux.read(core.wake_fd, std.mem.asBytes(&buf), 8);
        } else {
            if (others == null) others = c.PyList_New(0) orelse return false;
            const pair = c.Py_BuildValue("(iI)", fd, ev.events) orelse return false;
            defer py.decref(pair);
            if (c.PyList_Append(others, pair) != 0) return false;
        }
    }
    if (engine_ready) {
        if (engineServer(core)) |server| inEngineContext(core, Server.poll, server);
    }
    if (others) |list| {
        const name = py.intern("_zc_process_fds") orelse return false;
        defer py.decref(name);
        const r = c.PyObject_CallMethodObjArgs(loop, name, list, @as(?*Object, null)) orelse return false;
        py.decref(r);
    }
    return true;
}

const Wait = union(enum) { events: usize, interrupted, failed: linux.E };

/// What `epoll_wait` returned: the number of events, a signal (not an error: the pass
/// goes on), or a failure with its errno.
fn waitResult(rc: usize) Wait {
    return switch (sys.E.init(rc)) {
        .SUCCESS => .{ .events = rc },
        .INTR => .interrupted,
        else => |e| .{ .failed = e },
    };
}

/// OSError from a raw system call's errno (std.os.linux leaves C's `errno` alone, which
/// PyErr_SetFromErrno reads). Null, for returning.
pub fn osError(e: linux.E) ?*Object {
    std.c._errno().* = @intFromEnum(e);
    return c.PyErr_SetFromErrno(c.PyExc_OSError);
}

fn engineServer(core: *Core) ?*Server {
    const e = core.engine orelse return null;
    return engine_mod.asEngine(e).server;
}

/// The busy-poll budget before the pass sleeps while the engine's writer thread still
/// holds responses (0: sleep at once). Their completions come back within microseconds,
/// and with them the clients' next requests: sleeping and being woken for them costs
/// two context switches per pass and leaves the core idle meanwhile.
fn writerSpinNs(core: *Core) u64 {
    const s = engineServer(core) orelse return 0;
    return if (s.writerBusy()) s.spin_ns else 0;
}

/// Without the GIL: polls the loop's epoll set without blocking for up to `budget_ns`.
/// The result of the wait that found something (events or an error), or null.
fn spinEvents(core: *Core, budget_ns: u64) ?usize {
    const start = sys.monotonicNs();
    while (true) {
        const rc = linux.epoll_wait(core.epfd, &core.events, events_max, 0);
        if (rc != 0) return rc;
        if (sys.monotonicNs() -% start >= budget_ns) return null;
        for (0..32) |_| std.atomic.spinLoopHint();
    }
}

pub fn engineNeedsWait(core: *Core) bool {
    const s = engineServer(core) orelse return false;
    return s.needsPass();
}

pub fn settlePending(core: *Core) bool {
    const s = engineServer(core) orelse return false;
    return s.settle_pending;
}

/// The end of the pass for the engine: one flush of what the pass wrote, the writer
/// thread woken, and, when the last stream finished and nothing else is ready, the busy
/// poll (without the GIL) whose events are handled at once: true when it found some.
pub fn settle(core: *Core) bool {
    const s = engineServer(core) orelse return false;
    if (!s.settle_pending) return false;
    const spin = s.settleBegin();
    if (!spin) return false;
    // Callbacks still to run (the finished requests' tasks winding down): the busy poll
    // waits for the end of a pass that leaves nothing ready.
    if (core.ready.len > 0) {
        s.deferSpin();
        return false;
    }
    if (!engine_mod.spinWithoutGil(s)) return false;
    inEngineContext(core, Server.process, s);
    return true;
}

/// Runs `f(server)` (which calls into the app: new requests, wake-ups) inside the
/// engine's context. The engine reports its own errors; anything left is unraisable.
fn inEngineContext(core: *Core, comptime f: fn (*Server) void, server: *Server) void {
    const ctx = core.engine_context.?;
    const entered = c.PyContext_Enter(ctx) == 0;
    if (!entered) c.PyErr_WriteUnraisable(core.engine);
    f(server);
    if (c.PyErr_Occurred() != null) c.PyErr_WriteUnraisable(core.engine);
    if (entered and c.PyContext_Exit(ctx) != 0) c.PyErr_WriteUnraisable(core.engine);
}

// ---- tests ---------------------------------------------------------------------------

const testing = std.testing;

test "the wait for a timer is rounded up to whole milliseconds, never below zero nor over a day" {
    const day_ms: i32 = 24 * 3600 * 1000;
    const inf = std.math.inf(f64);
    for ([_]f64{ 0, 5, 123456.789, 1e9 }) |now| {
        try testing.expectEqual(@as(i32, 0), waitTimeoutMs(now, now)); // due now (a zero delay)
        try testing.expectEqual(@as(i32, 0), waitTimeoutMs(now - 5, now)); // negative delay: past
        try testing.expectEqual(@as(i32, 0), waitTimeoutMs(-inf, now));
        try testing.expectEqual(@as(i32, 1), waitTimeoutMs(now + 1e-6, now)); // a hair: 1 ms, not 0 (no spin)
        try testing.expectEqual(@as(i32, 1000), waitTimeoutMs(now + 1, now));
        try testing.expectEqual(day_ms, waitTimeoutMs(now + 3 * 24 * 3600, now));
        try testing.expectEqual(day_ms, waitTimeoutMs(std.math.floatMax(f64), now));
        try testing.expectEqual(day_ms, waitTimeoutMs(inf, now)); // never: a day at a time
    }
    try testing.expectEqual(@as(i32, 2), waitTimeoutMs(0.0015, 0));
}

var signal_wake_fd: i32 = -1;

fn onTestSignal(_: i32) callconv(.c) void {
    // What CPython's C-level handler does with the wake-up descriptor (set_wakeup_fd).
    if (signal_wake_fd >= 0) {
        const one: u64 = 1;
        _ = linux.write(signal_wake_fd, std.mem.asBytes(&one), 8);
    }
}

const TestSignal = struct {
    const sig = std.posix.SIG.URG; // ignored by default: a late one does no harm
    old: std.posix.Sigaction = undefined,

    fn install(self: *TestSignal) void {
        const act = std.posix.Sigaction{ .handler = .{ .handler = onTestSignal }, .mask = std.posix.sigemptyset(), .flags = 0 };
        std.posix.sigaction(sig, &act, &self.old);
    }

    fn restore(self: *TestSignal) void {
        std.posix.sigaction(sig, &self.old, null);
    }
};

fn testEpoll() !i32 {
    const rc = linux.epoll_create1(linux.EPOLL.CLOEXEC);
    try testing.expectEqual(linux.E.SUCCESS, sys.E.init(rc));
    return @intCast(rc);
}

test "a signal during the wait ends it as interrupted, not as an error" {
    var ts = TestSignal{};
    ts.install();
    defer ts.restore();
    const epfd = try testEpoll();
    defer _ = linux.close(epfd);
    const Sender = struct {
        fn run(tid: linux.pid_t, done: *std.atomic.Value(bool)) void {
            // Until the waiter has seen one: the first may land before it waits.
            while (!done.load(.acquire)) {
                _ = linux.tgkill(linux.getpid(), tid, TestSignal.sig);
                std.Thread.sleep(10 * std.time.ns_per_ms);
            }
        }
    };
    var done = std.atomic.Value(bool).init(false);
    const t = try std.Thread.spawn(.{}, Sender.run, .{ linux.gettid(), &done });
    var events: [4]linux.epoll_event = undefined;
    const started = std.time.milliTimestamp();
    const r = waitResult(linux.epoll_wait(epfd, &events, events.len, 5000));
    done.store(true, .release);
    t.join();
    try testing.expectEqual(Wait.interrupted, r);
    try testing.expect(std.time.milliTimestamp() - started < 4000);
}

test "a signal between passes: its wake-up write ends the next wait at once, and is drained" {
    var ts = TestSignal{};
    ts.install();
    defer ts.restore();
    const epfd = try testEpoll();
    defer _ = linux.close(epfd);
    const efd_rc = linux.eventfd(0, linux.EFD.NONBLOCK | linux.EFD.CLOEXEC);
    try testing.expectEqual(linux.E.SUCCESS, sys.E.init(efd_rc));
    const efd: i32 = @intCast(efd_rc);
    defer _ = linux.close(efd);
    var ev = linux.epoll_event{ .events = linux.EPOLL.IN, .data = .{ .fd = efd } };
    try testing.expectEqual(linux.E.SUCCESS, sys.E.init(linux.epoll_ctl(epfd, linux.EPOLL.CTL_ADD, efd, &ev)));
    signal_wake_fd = efd;
    defer signal_wake_fd = -1;
    // Delivered to this thread before tgkill returns: between two waits.
    _ = linux.tgkill(linux.getpid(), linux.gettid(), TestSignal.sig);
    var events: [4]linux.epoll_event = undefined;
    const started = std.time.milliTimestamp();
    const r = waitResult(linux.epoll_wait(epfd, &events, events.len, 5000));
    try testing.expect(std.time.milliTimestamp() - started < 4000);
    try testing.expectEqual(Wait{ .events = 1 }, r);
    try testing.expectEqual(efd, events[0].data.fd);
    var buf: u64 = 0;
    _ = linux.read(efd, std.mem.asBytes(&buf), 8);
    // Drained: the next wait does not see it again.
    try testing.expectEqual(Wait{ .events = 0 }, waitResult(linux.epoll_wait(epfd, &events, events.len, 0)));
}

test "a failed wait keeps its errno" {
    var events: [1]linux.epoll_event = undefined;
    try testing.expectEqual(Wait{ .failed = .BADF }, waitResult(linux.epoll_wait(-1, &events, 1, 0)));
    const efd: i32 = @intCast(linux.eventfd(0, linux.EFD.CLOEXEC));
    defer _ = linux.close(efd);
    try testing.expectEqual(Wait{ .failed = .INVAL }, waitResult(linux.epoll_wait(efd, &events, 1, 0)));
}
