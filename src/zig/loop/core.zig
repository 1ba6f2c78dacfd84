//! The hot core of zigcorn's asyncio event loop (`zigcorn.loop.Loop`).
//!
//! `LoopCore` is the native base of the Python `Loop` class, which also inherits
//! asyncio's selector loop: everything asyncio already does well (sockets, streams, TLS,
//! subprocesses, signals, executors, DNS) stays asyncio's, while the scheduler is here:
//! - the ready queue (a ring of handles) and the timer heap (ordered by time, then by
//!   the order of scheduling, so timers due at the same time run first-come first-served);
//! - `call_soon`, `call_later`, `call_at`, `call_soon_threadsafe` (an eventfd wakes the
//!   loop), `time`, `create_future`, and native `Handle`/`TimerHandle` objects that run
//!   their callback inside their `contextvars` context;
//! - `_run_once`, the pass: waits on the selector's epoll set without the GIL, handles
//!   the engine's readiness directly (no `add_reader` callback in between), hands
//!   third-party descriptors to asyncio's `_process_events`, moves due timers, runs the
//!   callbacks that were ready when the pass began, and ends with the engine's `settle`
//!   (one flush of the pass's output, and the busy poll); requests the busy poll found
//!   run at once, with one more settle (the poll was the next pass's wait).
//!
//! Debug mode goes through asyncio's own Python handles (source tracebacks, slow
//! callback warnings, thread checks): the queues take any handle-like object.
const std = @import("std");
const assert = std.debug.assert;
const linux = std.os.linux;
const py = @import("../python/capi.zig");
const c = py.c;
const Object = py.Object;
const sys = @import("../os/sys.zig");
const engine_mod = @import("../python/engine.zig");

const allocator = std.heap.c_allocator;

/// asyncio's rule for sweeping cancelled timers out of the heap at once.
const sweep_timers_min = 100;
pub const events_max = 128;
/// PY_VECTORCALL_ARGUMENTS_OFFSET (a C macro the translation does not carry).
const vectorcall_offset: usize = @as(usize, 1) << (@bitSizeOf(usize) - 1);

const handle = @import("handle.zig");
const HandleObject = handle.HandleObject;
const asHandle = handle.asHandle;
const isNativeHandle = handle.isNativeHandle;
const newHandle = handle.newHandle;
const tupleOf = handle.tupleOf;
const runHandle = handle.runHandle;
const fetchException = handle.fetchException;
const queues = @import("queues.zig");
const wait = @import("wait.zig"); // the pass's wait, and the engine's end of the pass
const attributes = @import("attributes.zig"); // asyncio's private attributes, read and written from Python
const Ring = queues.Ring;
const Timer = queues.Timer;
const Heap = queues.Heap;

// ----------------------------------------------------------------------------------
// LoopCore

pub const LoopObject = extern struct {
    ob_base: Object,
    core: ?*Core,
};

pub const Core = struct {
    ready: Ring = .{},
    timers: Heap = .{},
    timer_seq: u64 = 0,
    timer_cancelled_count: isize = 0,
    closed: bool = false,
    stopping: bool = false,
    debug: bool = false,
    /// The selector's epoll set (asyncio's EpollSelector registers third-party fds there).
    epfd: i32 = -1,
    /// call_soon_threadsafe's wake-up, registered in `epfd`.
    wake_fd: i32 = -1,
    /// The loop's thread waits in `poll` without the GIL: only then does
    /// call_soon_threadsafe need the eventfd. Read and written with the GIL held only
    /// (set before the wait gives it up, cleared after it is taken back), so the GIL
    /// orders every access; an awake loop sees the new handle in its next pass.
    sleeping: bool = false,
    /// The attached Engine: its descriptor is in `epfd`, its events handled in the pass.
    engine: ?*Object = null,
    engine_fd: i32 = -1,
    /// The context current when the engine was attached (the server's): its events
    /// are handled in it, as an `add_reader` callback would be, so request tasks
    /// start from a copy of it.
    engine_context: ?*Object = null,
    clock_resolution: f64 = 1e-9,
    /// asyncio.Future and asyncio.Task, for create_future and create_task.
    future_type: ?*Object = null,
    task_type: ?*Object = null,
    /// ("loop", "name", "context"): create_task's keywords to Task; ("loop",):
    /// create_future's to Future.
    task_kwnames: ?*Object = null,
    future_kwnames: ?*Object = null,
    /// asyncio's `_task_factory` and `_thread_id` (None, or the running thread's id),
    /// kept here so that create_task and is_running read them without a dict lookup.
    task_factory: ?*Object = null,
    thread_id: ?*Object = null,
    /// {"loop": self}, made on the first create_task and passed to every Task made
    /// without a name or context: Task's __init__ only reads it, and a Task told its
    /// loop does not look for the running one (a getpid(2) each time on 3.11).
    task_kwargs: ?*Object = null,
    events: [events_max]linux.epoll_event = undefined,
};

pub fn coreOf(o: *Object) *Core {
    const l: *LoopObject = @ptrCast(@alignCast(o));
    return l.core.?;
}

fn loopNew(tp: ?*c.PyTypeObject, _: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const obj = tp.?.tp_alloc.?(tp, 0) orelse return null;
    const l: *LoopObject = @ptrCast(@alignCast(obj));
    const core = allocator.create(Core) catch {
        py.decref(obj);
        return c.PyErr_NoMemory();
    };
    core.* = .{};
    l.core = core;
    const rc = linux.eventfd(0, linux.EFD.NONBLOCK | linux.EFD.CLOEXEC);
    if (sys.E.init(rc) != .SUCCESS) {
        py.decref(obj);
        c.PyErr_SetString(c.PyExc_OSError, "could not create the loop's eventfd");
        return null;
    }
    core.wake_fd = @intCast(rc);
    return obj;
}

fn loopDealloc(obj: ?*Object) callconv(.c) void {
    const o = obj.?;
    const tp = py.typeOf(o);
    c.PyObject_GC_UnTrack(o);
    const l: *LoopObject = @ptrCast(@alignCast(o));
    if (l.core) |core| {
        _ = loopClear(o);
        if (core.wake_fd >= 0) _ = linux.close(core.wake_fd);
        if (core.ready.items.len > 0) allocator.free(core.ready.items);
        if (core.timers.items.len > 0) allocator.free(core.timers.items);
        l.core = null;
        allocator.destroy(core);
    }
    tp.tp_free.?(o);
    py.decref(@ptrCast(tp));
}

fn loopTraverse(obj: ?*Object, visit: c.visitproc, arg: ?*anyopaque) callconv(.c) c_int {
    const l: *LoopObject = @ptrCast(@alignCast(obj.?));
    if (l.core) |core| {
        for (0..core.ready.len) |i| {
            const r = visit.?(core.ready.at(i), arg);
            if (r != 0) return r;
        }
        for (core.timers.items[0..core.timers.len]) |t| {
            const r = visit.?(t.obj, arg);
            if (r != 0) return r;
        }
        if (core.engine) |e| {
            const r = visit.?(e, arg);
            if (r != 0) return r;
        }
        inline for (.{ "future_type", "task_type", "task_factory", "thread_id", "task_kwargs" }) |field| {
            if (@field(core, field)) |f| {
                const r = visit.?(f, arg);
                if (r != 0) return r;
            }
        }
        if (core.engine_context) |x| {
            const r = visit.?(x, arg);
            if (r != 0) return r;
        }
    }
    return visit.?(@ptrCast(py.typeOf(obj.?)), arg);
}

fn loopClear(obj: ?*Object) callconv(.c) c_int {
    const core = coreOf(obj.?);
    clearQueues(core);
    detachEngine(core);
    inline for (.{ "future_type", "task_type", "task_kwnames", "future_kwnames", "task_factory", "thread_id", "task_kwargs" }) |field| {
        const f = @field(core, field);
        @field(core, field) = null;
        py.xdecref(f);
    }
    return 0;
}

/// Drops every queued handle (each decref may run arbitrary code: take one at a time,
/// until both queues are empty, a finalizer's call_soon included).
fn clearQueues(core: *Core) void {
    while (true) {
        if (core.ready.pop()) |o| {
            py.decref(o);
        } else if (core.timers.len > 0) {
            const t = core.timers.pop();
            setScheduled(t.obj, false);
            py.decref(t.obj);
        } else break;
    }
    assert(core.ready.len == 0 and core.timers.len == 0);
    core.timer_cancelled_count = 0;
}

fn detachEngine(core: *Core) void {
    const e = core.engine orelse return;
    core.engine = null;
    if (core.epfd >= 0 and core.engine_fd >= 0) _ = linux.epoll_ctl(core.epfd, linux.EPOLL.CTL_DEL, core.engine_fd, null);
    core.engine_fd = -1;
    engine_mod.asEngine(e).loop_driven = false;
    const ctx = core.engine_context;
    core.engine_context = null;
    py.xdecref(ctx);
    py.decref(e);
}

// --- scheduling -------------------------------------------------------------------

/// Parses `(callback, *args, context=None)` starting at `args[first]`.
const CallArgs = struct { callback: *Object, args: []const ?*Object, context: ?*Object };

fn parseCall(comptime name: [:0]const u8, args: [*c]const ?*Object, nargsf: usize, kwnames: ?*Object, first: usize) ?CallArgs {
    const n = nargsf & ~vectorcall_offset;
    if (n <= first) {
        _ = py.typeError(name ++ "() missing a required argument: 'callback'");
        return null;
    }
    var context: ?*Object = null;
    if (kwnames) |kw| {
        const nk: usize = @intCast(c.PyTuple_Size(kw));
        for (0..nk) |i| {
            const key = c.PyTuple_GetItem(kw, @intCast(i)).?;
            if (c.PyUnicode_CompareWithASCIIString(key, "context") != 0) {
                _ = py.typeError(name ++ "() got an unexpected keyword argument");
                return null;
            }
            const v = args[n + i].?;
            if (!py.isNone(v)) context = v;
        }
    }
    if (context) |ctx| {
        if (py.typeOf(ctx) != &c.PyContext_Type) {
            _ = py.typeError("context must be a contextvars.Context");
            return null;
        }
    }
    const all: [*]const ?*Object = @ptrCast(args);
    return .{ .callback = args[first].?, .args = all[first + 1 .. n], .context = context };
}

fn checkOpen(core: *Core) bool {
    if (core.closed) {
        _ = py.runtimeError("Event loop is closed");
        return false;
    }
    return true;
}

/// Debug mode: asyncio's own checks and handles, through `loop.<method>(callback, args, context)`.
fn callDebug(self: *Object, comptime method: [:0]const u8, when: ?*Object, a: CallArgs) ?*Object {
    const tuple = tupleOf(a.args) orelse return null;
    defer py.decref(tuple);
    const ctx = a.context orelse py.none();
    defer if (a.context == null) py.decref(ctx);
    const name = py.intern(method) orelse return null;
    defer py.decref(name);
    if (when) |w| return c.PyObject_CallMethodObjArgs(self, name, w, a.callback, tuple, ctx, @as(?*Object, null));
    return c.PyObject_CallMethodObjArgs(self, name, a.callback, tuple, ctx, @as(?*Object, null));
}

fn pushReady(core: *Core, h: *Object) bool {
    py.incref(h);
    if (!core.ready.push(h)) {
        py.decref(h);
        _ = c.PyErr_NoMemory();
        return false;
    }
    return true;
}

/// A new native handle for `a`, queued: what call_soon returns.
fn soon(self: *Object, core: *Core, a: CallArgs) ?*Object {
    const h = newHandle(handle.handle_type.?, self, a.callback, a.args, a.context) orelse return null;
    if (!pushReady(core, h)) {
        py.decref(h);
        return null;
    }
    return h;
}

fn loopCallSoon(self: ?*Object, args: [*c]const ?*Object, nargsf: usize, kwnames: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    if (!checkOpen(core)) return null;
    const a = parseCall("call_soon", args, nargsf, kwnames, 0) orelse return null;
    if (core.debug) return callDebug(self.?, "_zc_call_soon_debug", null, a);
    return soon(self.?, core, a);
}

fn loopCallSoonThreadsafe(self: ?*Object, args: [*c]const ?*Object, nargsf: usize, kwnames: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    if (!checkOpen(core)) return null;
    const a = parseCall("call_soon_threadsafe", args, nargsf, kwnames, 0) orelse return null;
    const h = (if (core.debug)
        callDebug(self.?, "_zc_call_soon_threadsafe_debug", null, a)
    else
        soon(self.?, core, a)) orelse return null;
    // A worker thread posting while the loop's thread is busy (the usual case under
    // load) costs no write(2) here and no read(2) and extra epoll event there.
    if (core.sleeping) wake(core);
    return h;
}

fn wake(core: *Core) void {
    const one: u64 = 1;
    _ = linux.write(core.wake_fd, std.mem.asBytes(&one), 8);
}

fn loopWriteToSelf(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    wake(coreOf(self.?));
    return py.none();
}

fn monotonic() f64 {
    var ts: std.c.timespec = undefined;
    _ = std.c.clock_gettime(.MONOTONIC, &ts);
    return @as(f64, @floatFromInt(ts.sec)) + @as(f64, @floatFromInt(ts.nsec)) * 1e-9;
}

fn loopTime(_: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return c.PyFloat_FromDouble(monotonic());
}

fn schedule(self: *Object, core: *Core, when: f64, a: CallArgs) ?*Object {
    const h = newHandle(handle.timer_type.?, self, a.callback, a.args, a.context) orelse return null;
    asHandle(h).when = when;
    if (!pushTimer(core, h, when)) {
        py.decref(h);
        return null;
    }
    assert(asHandle(h).scheduled);
    return h;
}

/// `when` comes from `toSeconds` (or the clock plus one): never NaN.
fn pushTimer(core: *Core, h: *Object, when: f64) bool {
    assert(!std.math.isNan(when));
    core.timer_seq += 1;
    py.incref(h);
    if (!core.timers.push(.{ .when = when, .seq = core.timer_seq, .obj = h })) {
        py.decref(h);
        _ = c.PyErr_NoMemory();
        return false;
    }
    setScheduled(h, true);
    return true;
}

/// In the heap or out of it: a native handle's state changes through `markScheduled`.
fn setScheduled(h: *Object, v: bool) void {
    if (isNativeHandle(h)) {
        handle.markScheduled(asHandle(h), v);
    } else if (c.PyObject_SetAttrString(h, "_scheduled", py.boolean(v)) != 0) {
        c.PyErr_WriteUnraisable(h);
    }
}

fn toSeconds(o: *Object, comptime what: [:0]const u8) ?f64 {
    if (py.isNone(o)) {
        _ = py.typeError(what);
        return null;
    }
    const v = c.PyFloat_AsDouble(o);
    if (v == -1.0 and c.PyErr_Occurred() != null) return null;
    // A NaN time has no place in the heap's order (and no timeout to sleep for).
    if (std.math.isNan(v)) {
        c.PyErr_SetString(c.PyExc_ValueError, "a time must be a number, not NaN");
        return null;
    }
    return v;
}

fn loopCallLater(self: ?*Object, args: [*c]const ?*Object, nargsf: usize, kwnames: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    const n = nargsf & ~vectorcall_offset;
    if (n < 1) return py.typeError("call_later() missing a required argument: 'delay'");
    const delay = toSeconds(args[0].?, "delay must not be None") orelse return null;
    if (!checkOpen(core)) return null;
    const a = parseCall("call_later", args, nargsf, kwnames, 1) orelse return null;
    const when = monotonic() + delay;
    if (core.debug) {
        const w = c.PyFloat_FromDouble(when) orelse return null;
        defer py.decref(w);
        return callDebug(self.?, "_zc_call_at_debug", w, a);
    }
    return schedule(self.?, core, when, a);
}

fn loopCallAt(self: ?*Object, args: [*c]const ?*Object, nargsf: usize, kwnames: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    const n = nargsf & ~vectorcall_offset;
    if (n < 1) return py.typeError("call_at() missing a required argument: 'when'");
    const when = toSeconds(args[0].?, "when cannot be None") orelse return null;
    if (!checkOpen(core)) return null;
    const a = parseCall("call_at", args, nargsf, kwnames, 1) orelse return null;
    if (core.debug) return callDebug(self.?, "_zc_call_at_debug", args[0].?, a);
    return schedule(self.?, core, when, a);
}

fn loopCreateFuture(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    const ft = core.future_type orelse return py.runtimeError("the loop is not set up");
    var argv = [_]?*Object{self.?};
    return c.PyObject_Vectorcall(ft, @ptrCast(&argv), 0, core.future_kwnames);
}

/// _add_callback(handle): asyncio's selector code queues reader/writer handles here.
fn loopAddCallback(self: ?*Object, h: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    const cancelled = handleIsCancelled(h.?) orelse return null;
    if (!cancelled and !pushReady(core, h.?)) return null;
    return py.none();
}

/// _zc_push_timer(handle): a debug-mode asyncio TimerHandle into the heap. Native
/// timers enter the heap once, from call_later/call_at, only.
fn loopPushTimer(self: ?*Object, h: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    if (isNativeHandle(h.?)) return py.typeError("_zc_push_timer() takes an asyncio TimerHandle");
    const w = c.PyObject_GetAttrString(h.?, "_when") orelse return null;
    defer py.decref(w);
    const when = toSeconds(w, "when cannot be None") orelse return null;
    if (!pushTimer(core, h.?, when)) return null;
    return py.none();
}

fn loopTimerHandleCancelled(self: ?*Object, h: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    const o = h.?;
    const scheduled = if (isNativeHandle(o)) asHandle(o).scheduled else blk: {
        const v = c.PyObject_GetAttrString(o, "_scheduled") orelse return null;
        defer py.decref(v);
        break :blk c.PyObject_IsTrue(v) == 1;
    };
    if (scheduled) core.timer_cancelled_count +|= 1;
    return py.none();
}

/// A handle's `_cancelled`, native or not; null with an exception set.
fn handleIsCancelled(o: *Object) ?bool {
    if (isNativeHandle(o)) return asHandle(o).cancelled;
    const v = c.PyObject_GetAttrString(o, "_cancelled") orelse return null;
    defer py.decref(v);
    const t = c.PyObject_IsTrue(v);
    if (t < 0) return null;
    return t == 1;
}

// --- the pass ----------------------------------------------------------------------

fn loopRunOnce(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const o = self.?;
    const core = coreOf(o);
    // A signal whose Python handler has not run yet (one that landed while the last
    // pass's callbacks ran, or `_thread.interrupt_main()` called from one) runs now: no
    // EINTR will come for it, and the wait below could sleep through it. asyncio's own
    // pass, in Python, gets that chance between bytecodes; 3.12's interpreter does not
    // give it here (CPython's test_runners hung on it: test_interrupt_wait).
    if (c.PyErr_CheckSignals() != 0) return null;
    if (!sweepTimers(core)) return null;

    // io_uring: completions the kernel posts only when this thread enters the ring do
    // not make the ring's descriptor readable; the engine is polled in this pass instead.
    const engine_due = wait.engineNeedsWait(core);
    var timeout_ms: i32 = -1;
    if (core.ready.len > 0 or core.stopping or engine_due or wait.settlePending(core)) {
        timeout_ms = 0;
    } else if (core.timers.top()) |t| {
        timeout_ms = wait.waitTimeoutMs(t.when, monotonic());
    }
    if (!wait.poll(o, core, timeout_ms, engine_due)) return null;

    if (!runDue(o, core)) return null;
    // The busy poll at the pass's end handled requests: it was this pass's second
    // wait, and what it made ready (the requests' tasks) runs now, with the timers due
    // by then, as the next pass would run them without its own wait (the loop's epoll
    // set is polled again at the next pass's start). Once: a client that keeps the
    // busy poll finding work still leaves a wait on the loop's set every two passes.
    if (wait.settle(core) and !core.stopping) {
        if (!runDue(o, core)) return null;
        _ = wait.settle(core);
    }
    return py.none();
}

/// The timers due by now become ready, behind what was already; then what is ready runs
/// (only that: callbacks it schedules run in the next pass). False with the exception set.
fn runDue(o: *Object, core: *Core) bool {
    const end = monotonic() + core.clock_resolution;
    while (core.timers.popDue(end)) |t| {
        setScheduled(t.obj, false);
        if (!core.ready.push(t.obj)) {
            py.decref(t.obj);
            _ = c.PyErr_NoMemory();
            return false;
        }
    }
    const Pass = struct {
        loop: *Object,
        core: *Core,
        fn run(p: @This(), h: *Object) bool {
            defer py.decref(h);
            return runReady(p.loop, p.core, h);
        }
    };
    return core.ready.drainQueued(Pass{ .loop = o, .core = core }, Pass.run);
}

/// Runs one ready handle; false with the exception set that must leave the loop.
fn runReady(loop: *Object, core: *Core, h: *Object) bool {
    if (isNativeHandle(h) and !core.debug) {
        if (asHandle(h).cancelled) return true;
        return runHandle(h);
    }
    const cancelled = handleIsCancelled(h) orelse return false;
    if (cancelled) return true;
    const r = if (core.debug) blk: {
        const name = py.intern("_zc_run_debug") orelse return false;
        defer py.decref(name);
        break :blk c.PyObject_CallMethodObjArgs(loop, name, h, @as(?*Object, null));
    } else blk: {
        const name = py.intern("_run") orelse return false;
        defer py.decref(name);
        break :blk c.PyObject_CallMethodObjArgs(h, name, @as(?*Object, null));
    };
    if (r) |x| {
        py.decref(x);
        return true;
    }
    return false;
}

/// asyncio's rule: past 100 timers with over half of them cancelled, sweep the whole
/// heap at once; otherwise drop cancelled timers from its top. (The count is asyncio's
/// estimate, not an exact one: a cancelled timer that comes due leaves uncounted.)
fn sweepAll(scheduled: usize, cancelled: isize) bool {
    return scheduled > sweep_timers_min and cancelled *| 2 > @as(isize, @intCast(scheduled));
}

fn sweepTimers(core: *Core) bool {
    const heap = &core.timers;
    if (sweepAll(heap.len, core.timer_cancelled_count)) {
        const Cancelled = struct {
            fn drop(_: void, o: *Object) error{Failed}!bool {
                return handleIsCancelled(o) orelse error.Failed;
            }
        };
        if (heap.removeIf({}, Cancelled.drop)) |swept| {
            defer allocator.free(swept);
            core.timer_cancelled_count = 0;
            // Released with the heap whole: their finalizers may schedule and cancel.
            for (swept) |o| {
                setScheduled(o, false);
                py.decref(o);
            }
            return true;
        } else |err| switch (err) {
            error.Failed => return false,
            error.OutOfMemory => {}, // the top is swept below, as on a small heap
        }
    }
    while (heap.top()) |t| {
        const cancelled = handleIsCancelled(t.obj) orelse return false;
        if (!cancelled) break;
        // Reading a Python handle's `_cancelled` may have run code that moved the top.
        if ((heap.top() orelse break).seq != t.seq) continue;
        _ = heap.pop();
        core.timer_cancelled_count -|= 1;
        setScheduled(t.obj, false);
        py.decref(t.obj);
    }
    return true;
}

// --- set-up, engine, state ------------------------------------------------------------

/// _zc_setup(epoll_fd, future_type, clock_resolution, task_type): the selector's epoll
/// set, where the wake-up descriptor is registered now.
fn loopSetup(self: ?*Object, args: [*c]const ?*Object, nargs: c.Py_ssize_t) callconv(.c) ?*Object {
    if (nargs != 4) return py.typeError("_zc_setup(epoll_fd, future_type, clock_resolution, task_type)");
    const core = coreOf(self.?);
    const fd = c.PyLong_AsLong(args[0]);
    if (fd == -1 and c.PyErr_Occurred() != null) return null;
    const res = c.PyFloat_AsDouble(args[2]);
    if (res == -1.0 and c.PyErr_Occurred() != null) return null;
    // The end of each pass is the clock plus this: it must be a time (the heap asserts).
    if (!std.math.isFinite(res) or res < 0) {
        c.PyErr_SetString(c.PyExc_ValueError, "clock_resolution must be a finite number of seconds, not negative");
        return null;
    }
    if (fd < 0 or fd > std.math.maxInt(i32)) {
        c.PyErr_SetString(c.PyExc_ValueError, "epoll_fd must be a file descriptor");
        return null;
    }
    var ev = linux.epoll_event{ .events = linux.EPOLL.IN, .data = .{ .fd = core.wake_fd } };
    const rc = linux.epoll_ctl(@intCast(fd), linux.EPOLL.CTL_ADD, core.wake_fd, &ev);
    if (sys.E.init(rc) != .SUCCESS) return wait.osError(sys.E.init(rc));
    core.epfd = @intCast(fd);
    core.clock_resolution = res;
    const task_kw = c.Py_BuildValue("(sss)", "loop", "name", "context") orelse return null;
    defer py.decref(task_kw);
    const future_kw = c.Py_BuildValue("(s)", "loop") orelse return null;
    defer py.decref(future_kw);
    setRef(&core.task_kwnames, task_kw);
    setRef(&core.future_kwnames, future_kw);
    setRef(&core.future_type, args[1].?);
    setRef(&core.task_type, args[3].?);
    return py.none();
}

pub fn setRef(slot: *?*Object, value: *Object) void {
    py.incref(value);
    const old = slot.*;
    slot.* = value;
    py.xdecref(old);
}

fn loopGetDebug(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.boolean(coreOf(self.?).debug);
}

fn loopIsRunning(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.boolean(coreOf(self.?).thread_id != null);
}

fn loopIsClosed(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.boolean(coreOf(self.?).closed);
}

/// Whether every keyword is one the native create_task passes itself (name, context).
fn onlyNameAndContext(kwnames: ?*Object) bool {
    const kw = kwnames orelse return true;
    const nk: usize = @intCast(c.PyTuple_Size(kw));
    for (0..nk) |i| {
        const key = c.PyTuple_GetItem(kw, @intCast(i)).?;
        if (c.PyUnicode_CompareWithASCIIString(key, "name") != 0 and
            c.PyUnicode_CompareWithASCIIString(key, "context") != 0) return false;
    }
    return true;
}

/// create_task(coro, *, name=None, context=None): `Task(coro, loop=self, name=name,
/// context=context)`; with a task factory, in debug mode or with other keywords (3.14
/// passes any to the Task, e.g. eager_start), asyncio's own method.
fn loopCreateTask(self: ?*Object, args: [*c]const ?*Object, nargsf: usize, kwnames: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    const n = nargsf & ~vectorcall_offset;
    if (core.task_factory != null or core.debug or core.task_type == null or !onlyNameAndContext(kwnames)) {
        const name = py.intern("_zc_create_task") orelse return null;
        defer py.decref(name);
        const method = c.PyObject_GetAttr(self.?, name) orelse return null;
        defer py.decref(method);
        return c.PyObject_Vectorcall(method, args, n, kwnames);
    }
    if (n != 1) return py.typeError("create_task() takes one positional argument (the coroutine)");
    if (!checkOpen(core)) return null;
    var task_name: *Object = py.borrowedNone();
    var context: *Object = py.borrowedNone();
    if (kwnames) |kw| {
        const nk: usize = @intCast(c.PyTuple_Size(kw));
        for (0..nk) |i| {
            const key = c.PyTuple_GetItem(kw, @intCast(i)).?;
            if (c.PyUnicode_CompareWithASCIIString(key, "name") == 0) {
                task_name = args[n + i].?;
            } else {
                context = args[n + i].?;
            }
        }
    }
    if (task_name == py.borrowedNone() and context == py.borrowedNone()) {
        // Task(coro, loop=self) with a kwargs dict made once: no dict to build for each
        // task (the dispatcher's path, once per request).
        if (core.task_kwargs == null) {
            const kw = c.PyDict_New() orelse return null;
            if (c.PyDict_SetItemString(kw, "loop", self.?) != 0) {
                py.decref(kw);
                return null;
            }
            core.task_kwargs = kw;
        }
        const targs = c.PyTuple_Pack(1, args[0]) orelse return null;
        defer py.decref(targs);
        return c.PyObject_Call(core.task_type.?, targs, core.task_kwargs);
    }
    var argv = [_]?*Object{ null, args[0], self.?, task_name, context };
    return c.PyObject_Vectorcall(core.task_type.?, @ptrCast(&argv[1]), 1 | vectorcall_offset, core.task_kwnames);
}

/// _zc_close(): after asyncio's close (which closed the epoll set): queues emptied,
/// engine let go, the wake-up descriptor closed.
fn loopCoreClose(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    core.epfd = -1;
    detachEngine(core);
    clearQueues(core);
    return py.none();
}

/// _zc_attach(engine): the engine's descriptor joins the pass; its settle runs at the
/// end of each pass instead of through call_soon.
fn loopAttach(self: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    const e = arg.?;
    if (c.PyObject_IsInstance(e, @ptrCast(engine_mod.engine_type.?)) != 1) return py.typeError("expected a zigcorn._core.Engine");
    if (core.engine != null) return py.runtimeError("an engine is already attached to this loop");
    if (core.epfd < 0) return py.runtimeError("the loop is closed");
    const server = engine_mod.asEngine(e).server orelse return py.runtimeError("the engine is closed");
    const fd = server.io.fd;
    const ctx = c.PyContext_CopyCurrent() orelse return null;
    var ev = linux.epoll_event{ .events = linux.EPOLL.IN, .data = .{ .fd = fd } };
    const rc = linux.epoll_ctl(core.epfd, linux.EPOLL.CTL_ADD, fd, &ev);
    if (sys.E.init(rc) != .SUCCESS) {
        py.decref(ctx);
        return wait.osError(sys.E.init(rc));
    }
    py.incref(e);
    core.engine = e;
    core.engine_fd = fd;
    core.engine_context = ctx;
    engine_mod.asEngine(e).loop_driven = true;
    return py.none();
}

fn loopDetach(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    detachEngine(coreOf(self.?));
    return py.none();
}

const loop_getset = &attributes.loop_getset;

const fast_kw = c.METH_FASTCALL | c.METH_KEYWORDS;

var loop_methods = [_]c.PyMethodDef{
    .{ .ml_name = "call_soon", .ml_meth = @ptrCast(&loopCallSoon), .ml_flags = fast_kw, .ml_doc = "Arrange for callback(*args) to be called soon." },
    .{ .ml_name = "call_soon_threadsafe", .ml_meth = @ptrCast(&loopCallSoonThreadsafe), .ml_flags = fast_kw, .ml_doc = "call_soon from any thread." },
    .{ .ml_name = "call_later", .ml_meth = @ptrCast(&loopCallLater), .ml_flags = fast_kw, .ml_doc = "Arrange for callback(*args) to be called after delay seconds." },
    .{ .ml_name = "call_at", .ml_meth = @ptrCast(&loopCallAt), .ml_flags = fast_kw, .ml_doc = "Arrange for callback(*args) to be called at loop time when." },
    .{ .ml_name = "time", .ml_meth = @ptrCast(&loopTime), .ml_flags = c.METH_NOARGS, .ml_doc = "The loop's clock (time.monotonic)." },
    .{ .ml_name = "create_task", .ml_meth = @ptrCast(&loopCreateTask), .ml_flags = fast_kw, .ml_doc = "Schedule a coroutine as a Task." },
    .{ .ml_name = "get_debug", .ml_meth = @ptrCast(&loopGetDebug), .ml_flags = c.METH_NOARGS, .ml_doc = "Whether debug mode is on." },
    .{ .ml_name = "is_running", .ml_meth = @ptrCast(&loopIsRunning), .ml_flags = c.METH_NOARGS, .ml_doc = "Whether the loop is running." },
    .{ .ml_name = "is_closed", .ml_meth = @ptrCast(&loopIsClosed), .ml_flags = c.METH_NOARGS, .ml_doc = "Whether the loop was closed." },
    .{ .ml_name = "create_future", .ml_meth = @ptrCast(&loopCreateFuture), .ml_flags = c.METH_NOARGS, .ml_doc = "A Future attached to the loop." },
    .{ .ml_name = "_run_once", .ml_meth = @ptrCast(&loopRunOnce), .ml_flags = c.METH_NOARGS, .ml_doc = "One pass of the loop." },
    .{ .ml_name = "_add_callback", .ml_meth = @ptrCast(&loopAddCallback), .ml_flags = c.METH_O, .ml_doc = "Queue a handle unless it is cancelled." },
    .{ .ml_name = "_timer_handle_cancelled", .ml_meth = @ptrCast(&loopTimerHandleCancelled), .ml_flags = c.METH_O, .ml_doc = "A scheduled timer was cancelled." },
    .{ .ml_name = "_write_to_self", .ml_meth = @ptrCast(&loopWriteToSelf), .ml_flags = c.METH_NOARGS, .ml_doc = "Wake the loop (eventfd)." },
    .{ .ml_name = "_zc_push_timer", .ml_meth = @ptrCast(&loopPushTimer), .ml_flags = c.METH_O, .ml_doc = "Schedule a timer handle made elsewhere." },
    .{ .ml_name = "_zc_setup", .ml_meth = @ptrCast(&loopSetup), .ml_flags = c.METH_FASTCALL, .ml_doc = "Bind to the selector's epoll set." },
    .{ .ml_name = "_zc_close", .ml_meth = @ptrCast(&loopCoreClose), .ml_flags = c.METH_NOARGS, .ml_doc = "Release the native state." },
    .{ .ml_name = "_zc_attach", .ml_meth = @ptrCast(&loopAttach), .ml_flags = c.METH_O, .ml_doc = "Drive an Engine from the loop's pass." },
    .{ .ml_name = "_zc_detach", .ml_meth = @ptrCast(&loopDetach), .ml_flags = c.METH_NOARGS, .ml_doc = "Let the Engine go." },
    std.mem.zeroes(c.PyMethodDef),
};

var loop_slots = [_]c.PyType_Slot{
    .{ .slot = c.Py_tp_new, .pfunc = @ptrCast(@constCast(&loopNew)) },
    .{ .slot = c.Py_tp_dealloc, .pfunc = @ptrCast(@constCast(&loopDealloc)) },
    .{ .slot = c.Py_tp_traverse, .pfunc = @ptrCast(@constCast(&loopTraverse)) },
    .{ .slot = c.Py_tp_clear, .pfunc = @ptrCast(@constCast(&loopClear)) },
    .{ .slot = c.Py_tp_methods, .pfunc = @ptrCast(&loop_methods) },
    .{ .slot = c.Py_tp_getset, .pfunc = @ptrCast(loop_getset) },
    .{ .slot = 0, .pfunc = null },
};

pub var loop_spec = c.PyType_Spec{
    .name = "zigcorn._core.LoopCore",
    .basicsize = @sizeOf(LoopObject),
    .itemsize = 0,
    .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_HAVE_GC | c.Py_TPFLAGS_BASETYPE,
    .slots = &loop_slots,
};

/// Adds Handle, TimerHandle and LoopCore to the module.
pub fn init(m: *Object) bool {
    const ht = c.PyType_FromSpec(&handle.handle_spec) orelse return false;
    handle.handle_type = @ptrCast(ht);
    if (c.PyModule_AddObject(m, "Handle", ht) != 0) return false;
    py.incref(ht);
    const bases = c.PyTuple_Pack(1, ht) orelse return false;
    defer py.decref(bases);
    const tt = c.PyType_FromSpecWithBases(&handle.timer_spec, bases) orelse return false;
    handle.timer_type = @ptrCast(tt);
    if (c.PyModule_AddObject(m, "TimerHandle", tt) != 0) return false;
    py.incref(tt);
    const lt = c.PyType_FromSpec(&loop_spec) orelse return false;
    return c.PyModule_AddObject(m, "LoopCore", lt) == 0;
}

// ----------------------------------------------------------------------------------
// Tests: the pass's pieces that need no interpreter (native handles are plain structs
// here, their type objects stand-ins that only `isNativeHandle` compares).

const testing = std.testing;

test "the heap is swept at once past 100 timers with over half cancelled; a huge count saturates" {
    try testing.expect(!sweepAll(0, 0));
    try testing.expect(!sweepAll(100, 100)); // not past 100: the top is swept lazily
    try testing.expect(!sweepAll(101, 50));
    try testing.expect(sweepAll(101, 51));
    try testing.expect(sweepAll(1000, std.math.maxInt(isize))); // `_timer_cancelled_count` is writable
    try testing.expect(!sweepAll(1000, -3));
}

/// Stand-ins for the Handle and TimerHandle types, and zeroed native handles of them.
const Fakes = struct {
    var handle_tp = std.mem.zeroes(c.PyTypeObject);
    var timer_tp = std.mem.zeroes(c.PyTypeObject);

    fn install() void {
        handle.handle_type = &handle_tp;
        handle.timer_type = &timer_tp;
    }

    fn uninstall() void {
        handle.handle_type = null;
        handle.timer_type = null;
    }

    fn make(hs: []HandleObject, tp: *c.PyTypeObject, loop: ?*LoopObject) void {
        for (hs) |*h| {
            h.* = std.mem.zeroes(HandleObject);
            h.ob_base.ob_type = tp;
            h.loop = if (loop) |l| &l.ob_base else null;
        }
    }

    fn obj(h: *HandleObject) *Object {
        return &h.ob_base;
    }

    fn index(hs: []HandleObject, o: *Object) usize {
        return (@intFromPtr(o) - @intFromPtr(hs.ptr)) / @sizeOf(HandleObject);
    }
};

test "a pass skips a handle an earlier callback of the same pass cancelled; what callbacks schedule waits" {
    Fakes.install();
    defer Fakes.uninstall();
    var core = Core{};
    defer if (core.ready.items.len > 0) allocator.free(core.ready.items);
    var hs: [6]HandleObject = undefined;
    Fakes.make(&hs, &Fakes.handle_tp, null);
    for (hs[0..4]) |*h| try testing.expect(core.ready.push(Fakes.obj(h)));
    const Pass = struct {
        hs: []HandleObject,
        ran: [8]usize = undefined,
        n: usize = 0,
        ring: *Ring,
        // What runReady does for a native handle, then each callback's own effect.
        fn run(p: *@This(), o: *Object) bool {
            if (!isNativeHandle(o)) return false;
            if (asHandle(o).cancelled) return true;
            const i = Fakes.index(p.hs, o);
            p.ran[p.n] = i;
            p.n += 1;
            return switch (i) {
                0 => handle.markCancelled(&p.hs[2]), // h0 cancels h2, queued behind it
                1 => p.ring.push(Fakes.obj(&p.hs[4])), // h1: call_soon(h4)
                4 => p.ring.push(Fakes.obj(&p.hs[5])),
                else => true,
            };
        }
    };
    var pass = Pass{ .hs = &hs, .ring = &core.ready };
    try testing.expect(core.ready.drainQueued(&pass, Pass.run));
    try testing.expectEqualSlices(usize, &.{ 0, 1, 3 }, pass.ran[0..pass.n]);
    try testing.expectEqual(@as(usize, 1), core.ready.len); // h4: the next pass
    try testing.expect(core.ready.drainQueued(&pass, Pass.run));
    try testing.expectEqualSlices(usize, &.{ 0, 1, 3, 4 }, pass.ran[0..pass.n]);
    try testing.expect(core.ready.drainQueued(&pass, Pass.run));
    try testing.expectEqualSlices(usize, &.{ 0, 1, 3, 4, 5 }, pass.ran[0..pass.n]);
    try testing.expectEqual(@as(usize, 0), core.ready.len);
    // A handle cancelled while only queued (not a timer) is not counted for the sweep.
    try testing.expectEqual(@as(isize, 0), core.timer_cancelled_count);
}

test "timers due in a pass queue behind what was ready, by deadline then order, leaving the heap unscheduled" {
    Fakes.install();
    defer Fakes.uninstall();
    var core = Core{};
    defer if (core.ready.items.len > 0) allocator.free(core.ready.items);
    defer if (core.timers.items.len > 0) allocator.free(core.timers.items);
    var lo = LoopObject{ .ob_base = std.mem.zeroes(Object), .core = &core };
    var ready: [2]HandleObject = undefined;
    Fakes.make(&ready, &Fakes.handle_tp, &lo);
    var ts: [6]HandleObject = undefined;
    Fakes.make(&ts, &Fakes.timer_tp, &lo);
    for (&ready) |*h| try testing.expect(core.ready.push(Fakes.obj(h)));
    // Deadlines (pushed in this order): two equal ones, one cancelled, one at the end, one later.
    const whens = [_]f64{ 3, 1, 2, 1, 10, 4 };
    for (&ts, whens) |*h, w| {
        h.when = w;
        core.timer_seq += 1;
        try testing.expect(core.timers.push(.{ .when = w, .seq = core.timer_seq, .obj = Fakes.obj(h) }));
        handle.markScheduled(h, true);
    }
    // Cancelled in the heap: counted for the sweep, once.
    try testing.expect(handle.markCancelled(&ts[2]));
    try testing.expect(!handle.markCancelled(&ts[2]));
    try testing.expectEqual(@as(isize, 1), core.timer_cancelled_count);
    // The pass's end is 4: the timer due at 4 waits.
    while (core.timers.popDue(4)) |t| {
        handle.markScheduled(asHandle(t.obj), false);
        try testing.expect(core.ready.push(t.obj));
    }
    const expected = [_]*Object{ Fakes.obj(&ready[0]), Fakes.obj(&ready[1]), Fakes.obj(&ts[1]), Fakes.obj(&ts[3]), Fakes.obj(&ts[2]), Fakes.obj(&ts[0]) };
    try testing.expectEqual(expected.len, core.ready.len);
    for (expected, 0..) |o, i| try testing.expectEqual(o, core.ready.at(i));
    for (ts, 0..) |h, i| try testing.expectEqual(i == 4 or i == 5, h.scheduled);
    try testing.expectEqual(@as(usize, 2), core.timers.len);
    // The cancelled one left uncounted, as on asyncio: the count is an estimate.
    try testing.expectEqual(@as(isize, 1), core.timer_cancelled_count);
    while (core.ready.pop()) |_| {}
}
