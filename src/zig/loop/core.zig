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
//!   (one flush of the pass's output, and the busy poll).
//!
//! Debug mode goes through asyncio's own Python handles (source tracebacks, slow
//! callback warnings, thread checks): the queues take any handle-like object.
const std = @import("std");
const linux = std.os.linux;
const py = @import("../python/capi.zig");
const c = py.c;
const Object = py.Object;
const sys = @import("../os/sys.zig");
const engine_mod = @import("../python/engine.zig");

const allocator = std.heap.c_allocator;

/// asyncio's MAXIMUM_SELECT_TIMEOUT: one wait never sleeps longer than a day.
const select_timeout_s_max: f64 = 24 * 3600;
/// asyncio's rule for sweeping cancelled timers out of the heap at once.
const sweep_timers_min = 100;
const events_max = 128;
/// A queue that grew past this while busy shrinks back to it once empty.
const queue_keep = 1024;
/// PY_VECTORCALL_ARGUMENTS_OFFSET (a C macro the translation does not carry).
const vectorcall_offset: usize = @as(usize, 1) << (@bitSizeOf(usize) - 1);

// ----------------------------------------------------------------------------------
// Handles

pub const HandleObject = extern struct {
    ob_base: Object,
    callback: ?*Object,
    /// The arguments: none (argc 0), `arg` alone (argc 1, the common case: a future's
    /// done callback), or the tuple `args` (argc 2 and more).
    arg: ?*Object,
    args: ?*Object,
    argc: usize,
    context: ?*Object,
    loop: ?*Object,
    when: f64,
    cancelled: bool,
    scheduled: bool,
};

pub var handle_type: ?*c.PyTypeObject = null;
pub var timer_type: ?*c.PyTypeObject = null;

fn asHandle(o: *Object) *HandleObject {
    return @ptrCast(@alignCast(o));
}

fn isNativeHandle(o: *Object) bool {
    const t = py.typeOf(o);
    return t == handle_type.? or t == timer_type.?;
}

/// Handles freed are kept for the next ones (as uvloop's and CPython's own freelists
/// do): a handle per callback is the loop's most frequent allocation, and one taken from
/// here costs neither malloc nor a tick of the garbage collector's allocation count.
const handle_freelist_max = 256;
var handle_freelist: [handle_freelist_max]*Object = undefined;
var handle_freelist_len: usize = 0;

/// New handle owning `callback`, its `args`, and `context` (a copy of the current one
/// when null): new references all.
fn newHandle(tp: *c.PyTypeObject, loop: *Object, callback: *Object, args: []const ?*Object, context: ?*Object) ?*Object {
    const tuple: ?*Object = if (args.len >= 2) (tupleOf(args) orelse return null) else null;
    const ctx = if (context) |x| blk: {
        py.incref(x);
        break :blk x;
    } else c.PyContext_CopyCurrent() orelse {
        py.xdecref(tuple);
        return null;
    };
    const obj = allocHandle(tp) orelse {
        py.xdecref(tuple);
        py.decref(ctx);
        return null;
    };
    const h = asHandle(obj);
    py.incref(callback);
    py.incref(loop);
    h.callback = callback;
    h.args = tuple;
    h.argc = args.len;
    h.arg = null;
    if (args.len == 1) {
        py.incref(args[0].?);
        h.arg = args[0].?;
    }
    h.context = ctx;
    h.loop = loop;
    h.when = 0;
    h.cancelled = false;
    h.scheduled = false;
    c.PyObject_GC_Track(obj);
    return obj;
}

/// New reference: a tuple of `items`.
fn tupleOf(items: []const ?*Object) ?*Object {
    const t = c.PyTuple_New(@intCast(items.len)) orelse return null;
    for (items, 0..) |x, i| {
        py.incref(x.?);
        _ = c.PyTuple_SetItem(t, @intCast(i), x.?);
    }
    return t;
}

/// An untracked handle object of type `tp` (tracked by the caller once filled).
fn allocHandle(tp: *c.PyTypeObject) ?*Object {
    if (handle_freelist_len > 0) {
        handle_freelist_len -= 1;
        const obj = handle_freelist[handle_freelist_len];
        return c.PyObject_Init(obj, tp);
    }
    const obj = tp.tp_alloc.?(tp, 0) orelse return null;
    c.PyObject_GC_UnTrack(obj);
    return obj;
}

fn handleClearRefs(h: *HandleObject) void {
    const cb = h.callback;
    const arg = h.arg;
    const args = h.args;
    h.callback = null;
    h.arg = null;
    h.args = null;
    h.argc = 0;
    py.xdecref(cb);
    py.xdecref(arg);
    py.xdecref(args);
}

fn handleDealloc(obj: ?*Object) callconv(.c) void {
    const o = obj.?;
    const tp = py.typeOf(o);
    c.PyObject_GC_UnTrack(o);
    _ = handleClear(o);
    if (handle_freelist_len < handle_freelist_max and (tp == handle_type.? or tp == timer_type.?)) {
        handle_freelist[handle_freelist_len] = o;
        handle_freelist_len += 1;
    } else {
        tp.tp_free.?(o);
    }
    py.decref(@ptrCast(tp));
}

fn handleTraverse(obj: ?*Object, visit: c.visitproc, arg: ?*anyopaque) callconv(.c) c_int {
    const h = asHandle(obj.?);
    inline for (.{ "callback", "arg", "args", "context", "loop" }) |f| {
        if (@field(h, f)) |o| {
            const r = visit.?(o, arg);
            if (r != 0) return r;
        }
    }
    return visit.?(@ptrCast(py.typeOf(obj.?)), arg);
}

fn handleClear(obj: ?*Object) callconv(.c) c_int {
    const h = asHandle(obj.?);
    handleClearRefs(h);
    const ctx = h.context;
    const loop = h.loop;
    h.context = null;
    h.loop = null;
    py.xdecref(ctx);
    py.xdecref(loop);
    return 0;
}

/// cancel(): the callback will not run; a scheduled timer is counted for the sweep.
fn handleCancel(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const h = asHandle(obj.?);
    if (!h.cancelled) {
        if (h.scheduled) {
            if (h.loop) |l| coreOf(l).timer_cancelled_count += 1;
        }
        h.cancelled = true;
        handleClearRefs(h);
    }
    return py.none();
}

fn handleCancelled(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.boolean(asHandle(obj.?).cancelled);
}

fn handleGetContext(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const ctx = asHandle(obj.?).context orelse return py.none();
    py.incref(ctx);
    return ctx;
}

fn handleWhen(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return c.PyFloat_FromDouble(asHandle(obj.?).when);
}

/// _run(): as asyncio's Handle._run: the callback's exception goes to the loop's
/// exception handler; SystemExit and KeyboardInterrupt propagate.
fn handleRunMethod(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    if (!runHandle(obj.?)) return null;
    return py.none();
}

/// Runs a native handle's callback in its context. False: an exception that must
/// propagate out of the loop (SystemExit, KeyboardInterrupt) is set.
fn runHandle(obj: *Object) bool {
    const h = asHandle(obj);
    const cb = h.callback orelse return true;
    const ctx = h.context orelse return true;
    // The callback may cancel its own handle (dropping these): hold them for the call.
    py.incref(cb);
    defer py.decref(cb);
    // Slot 0 is free for the callee (PY_VECTORCALL_ARGUMENTS_OFFSET).
    var one = [2]?*Object{ null, h.arg };
    const args = h.args;
    if (one[1]) |a| py.incref(a);
    defer if (one[1]) |a| py.decref(a);
    if (args) |t| py.incref(t);
    defer if (args) |t| py.decref(t);
    py.incref(ctx);
    defer py.decref(ctx);
    if (c.PyContext_Enter(ctx) != 0) return reportError(obj);
    const result = switch (h.argc) {
        0 => c.PyObject_Vectorcall(cb, null, 0, null),
        1 => c.PyObject_Vectorcall(cb, @ptrCast(&one[1]), 1 | vectorcall_offset, null),
        else => c.PyObject_Vectorcall(cb, @ptrCast(py.seqItems(args.?)), @intCast(c.PyTuple_Size(args.?)), null),
    };
    const exited = c.PyContext_Exit(ctx);
    if (result) |r| {
        py.decref(r);
        if (exited != 0) return reportError(obj);
        return true;
    }
    return reportError(obj);
}

/// The current exception came out of a handle's callback: SystemExit and
/// KeyboardInterrupt propagate (false); anything else goes to the loop's exception
/// handler through `loop._zc_callback_error(handle, exc)`.
fn reportError(obj: *Object) bool {
    if (c.PyErr_ExceptionMatches(c.PyExc_SystemExit) != 0 or c.PyErr_ExceptionMatches(c.PyExc_KeyboardInterrupt) != 0)
        return false;
    const exc = fetchException() orelse return true;
    defer py.decref(exc);
    const loop = asHandle(obj).loop orelse {
        c.PyErr_WriteUnraisable(exc);
        return true;
    };
    const name = py.intern("_zc_callback_error") orelse return false;
    defer py.decref(name);
    const r = c.PyObject_CallMethodObjArgs(loop, name, obj, exc, @as(?*Object, null));
    if (r) |x| py.decref(x) else {
        if (c.PyErr_ExceptionMatches(c.PyExc_SystemExit) != 0 or c.PyErr_ExceptionMatches(c.PyExc_KeyboardInterrupt) != 0)
            return false;
        c.PyErr_WriteUnraisable(loop);
    }
    return true;
}

/// The current exception as one object with its traceback (the error indicator cleared).
fn fetchException() ?*Object {
    var t: ?*Object = null;
    var v: ?*Object = null;
    var tb: ?*Object = null;
    c.PyErr_Fetch(&t, &v, &tb);
    c.PyErr_NormalizeException(&t, &v, &tb);
    if (tb) |x| {
        if (v) |e| _ = c.PyException_SetTraceback(e, x);
    }
    py.xdecref(t);
    py.xdecref(tb);
    return v;
}

fn handleRepr(obj: ?*Object) callconv(.c) ?*Object {
    const h = asHandle(obj.?);
    const loop = h.loop orelse return c.PyUnicode_FromString("<Handle>");
    const name = py.intern("_zc_handle_repr") orelse return null;
    defer py.decref(name);
    return c.PyObject_CallMethodObjArgs(loop, name, obj.?, @as(?*Object, null));
}

fn timerHash(obj: ?*Object) callconv(.c) c.Py_hash_t {
    const f = c.PyFloat_FromDouble(asHandle(obj.?).when) orelse return -1;
    defer py.decref(f);
    return c.PyObject_Hash(f);
}

/// Timers order by `when` (asyncio's TimerHandle comparisons); equal when they agree
/// on when, callback, arguments and cancellation.
fn timerRichCompare(a: ?*Object, b: ?*Object, op: c_int) callconv(.c) ?*Object {
    const other = b.?;
    if (py.typeOf(other) != timer_type.?) return py.notImplemented();
    const x = asHandle(a.?);
    const y = asHandle(other);
    const r: bool = switch (op) {
        c.Py_LT => x.when < y.when,
        c.Py_LE => x.when <= y.when,
        c.Py_GT => x.when > y.when,
        c.Py_GE => x.when >= y.when,
        c.Py_EQ, c.Py_NE => blk: {
            var same = x.when == y.when and x.cancelled == y.cancelled and x.callback == y.callback;
            if (same) {
                const xa = argsTuple(x) orelse return null;
                defer py.decref(xa);
                const ya = argsTuple(y) orelse return null;
                defer py.decref(ya);
                const eq = c.PyObject_RichCompareBool(xa, ya, c.Py_EQ);
                if (eq < 0) return null;
                same = eq == 1;
            }
            break :blk if (op == c.Py_EQ) same else !same;
        },
        else => return py.notImplemented(),
    };
    return py.boolean(r);
}

/// New reference: the arguments as asyncio's `_args` holds them (None once cancelled).
fn argsTuple(h: *HandleObject) ?*Object {
    if (h.callback == null) return py.none();
    if (h.args) |t| {
        py.incref(t);
        return t;
    }
    if (h.arg) |a| return c.PyTuple_Pack(1, a);
    return c.PyTuple_New(0);
}

fn getArgs(obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    return argsTuple(asHandle(obj.?));
}

fn handleGetField(comptime field: []const u8) fn (?*Object, ?*anyopaque) callconv(.c) ?*Object {
    return struct {
        fn get(obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
            const h = asHandle(obj.?);
            if (comptime std.mem.eql(u8, field, "cancelled")) return py.boolean(h.cancelled);
            if (comptime std.mem.eql(u8, field, "scheduled")) return py.boolean(h.scheduled);
            if (comptime std.mem.eql(u8, field, "when")) return c.PyFloat_FromDouble(h.when);
            if (comptime std.mem.eql(u8, field, "none")) return py.none();
            const v = @field(h, field) orelse return py.none();
            py.incref(v);
            return v;
        }
    }.get;
}

var handle_methods = [_]c.PyMethodDef{
    .{ .ml_name = "cancel", .ml_meth = @ptrCast(&handleCancel), .ml_flags = c.METH_NOARGS, .ml_doc = "Cancel the call." },
    .{ .ml_name = "cancelled", .ml_meth = @ptrCast(&handleCancelled), .ml_flags = c.METH_NOARGS, .ml_doc = "Whether cancel() was called." },
    .{ .ml_name = "get_context", .ml_meth = @ptrCast(&handleGetContext), .ml_flags = c.METH_NOARGS, .ml_doc = "The contextvars.Context the callback runs in." },
    .{ .ml_name = "_run", .ml_meth = @ptrCast(&handleRunMethod), .ml_flags = c.METH_NOARGS, .ml_doc = "Run the callback now." },
    std.mem.zeroes(c.PyMethodDef),
};

var timer_methods = [_]c.PyMethodDef{
    .{ .ml_name = "when", .ml_meth = @ptrCast(&handleWhen), .ml_flags = c.METH_NOARGS, .ml_doc = "The loop time the callback is due." },
    std.mem.zeroes(c.PyMethodDef),
};

var handle_getset = [_]c.PyGetSetDef{
    .{ .name = "_callback", .get = handleGetField("callback"), .set = null, .doc = null, .closure = null },
    .{ .name = "_args", .get = &getArgs, .set = null, .doc = null, .closure = null },
    .{ .name = "_context", .get = handleGetField("context"), .set = null, .doc = null, .closure = null },
    .{ .name = "_loop", .get = handleGetField("loop"), .set = null, .doc = null, .closure = null },
    .{ .name = "_cancelled", .get = handleGetField("cancelled"), .set = null, .doc = null, .closure = null },
    .{ .name = "_source_traceback", .get = handleGetField("none"), .set = null, .doc = null, .closure = null },
    .{ .name = "_repr", .get = handleGetField("none"), .set = null, .doc = null, .closure = null },
    std.mem.zeroes(c.PyGetSetDef),
};

var timer_getset = [_]c.PyGetSetDef{
    .{ .name = "_when", .get = handleGetField("when"), .set = null, .doc = null, .closure = null },
    .{ .name = "_scheduled", .get = handleGetField("scheduled"), .set = null, .doc = null, .closure = null },
    std.mem.zeroes(c.PyGetSetDef),
};

var handle_slots = [_]c.PyType_Slot{
    .{ .slot = c.Py_tp_dealloc, .pfunc = @ptrCast(@constCast(&handleDealloc)) },
    .{ .slot = c.Py_tp_traverse, .pfunc = @ptrCast(@constCast(&handleTraverse)) },
    .{ .slot = c.Py_tp_clear, .pfunc = @ptrCast(@constCast(&handleClear)) },
    .{ .slot = c.Py_tp_repr, .pfunc = @ptrCast(@constCast(&handleRepr)) },
    .{ .slot = c.Py_tp_methods, .pfunc = @ptrCast(&handle_methods) },
    .{ .slot = c.Py_tp_getset, .pfunc = @ptrCast(&handle_getset) },
    .{ .slot = 0, .pfunc = null },
};

var timer_slots = [_]c.PyType_Slot{
    .{ .slot = c.Py_tp_dealloc, .pfunc = @ptrCast(@constCast(&handleDealloc)) },
    .{ .slot = c.Py_tp_traverse, .pfunc = @ptrCast(@constCast(&handleTraverse)) },
    .{ .slot = c.Py_tp_clear, .pfunc = @ptrCast(@constCast(&handleClear)) },
    .{ .slot = c.Py_tp_hash, .pfunc = @ptrCast(@constCast(&timerHash)) },
    .{ .slot = c.Py_tp_richcompare, .pfunc = @ptrCast(@constCast(&timerRichCompare)) },
    .{ .slot = c.Py_tp_methods, .pfunc = @ptrCast(&timer_methods) },
    .{ .slot = c.Py_tp_getset, .pfunc = @ptrCast(&timer_getset) },
    .{ .slot = 0, .pfunc = null },
};

pub var handle_spec = c.PyType_Spec{
    .name = "zigcorn._core.Handle",
    .basicsize = @sizeOf(HandleObject),
    .itemsize = 0,
    .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_HAVE_GC | c.Py_TPFLAGS_BASETYPE,
    .slots = &handle_slots,
};

pub var timer_spec = c.PyType_Spec{
    .name = "zigcorn._core.TimerHandle",
    .basicsize = @sizeOf(HandleObject),
    .itemsize = 0,
    .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_HAVE_GC,
    .slots = &timer_slots,
};

// ----------------------------------------------------------------------------------
// The queues

/// The ready queue: a ring of strong references, in the order they were scheduled.
const Ring = struct {
    items: []*Object = &.{},
    head: usize = 0,
    len: usize = 0,

    fn push(self: *Ring, o: *Object) bool {
        if (self.len == self.items.len) {
            const cap = @max(64, self.items.len * 2);
            const grown = allocator.alloc(*Object, cap) catch return false;
            for (0..self.len) |i| grown[i] = self.items[(self.head + i) % self.items.len];
            if (self.items.len > 0) allocator.free(self.items);
            self.items = grown;
            self.head = 0;
        }
        self.items[(self.head + self.len) % self.items.len] = o;
        self.len += 1;
        return true;
    }

    /// The caller owns the reference.
    fn pop(self: *Ring) ?*Object {
        if (self.len == 0) return null;
        const o = self.items[self.head];
        self.head = (self.head + 1) % self.items.len;
        self.len -= 1;
        if (self.len == 0) self.shrink();
        return o;
    }

    fn at(self: *const Ring, i: usize) *Object {
        return self.items[(self.head + i) % self.items.len];
    }

    fn shrink(self: *Ring) void {
        self.head = 0;
        if (self.items.len <= queue_keep) return;
        allocator.free(self.items);
        self.items = &.{};
    }
};

const Timer = struct {
    when: f64,
    seq: u64,
    obj: *Object,

    fn before(a: Timer, b: Timer) bool {
        return a.when < b.when or (a.when == b.when and a.seq < b.seq);
    }
};

/// The timer heap: a binary min-heap of (when, order scheduled), strong references.
const Heap = struct {
    items: []Timer = &.{},
    len: usize = 0,

    fn push(self: *Heap, t: Timer) bool {
        if (self.len == self.items.len) {
            const cap = @max(64, self.items.len * 2);
            const grown = allocator.alloc(Timer, cap) catch return false;
            @memcpy(grown[0..self.len], self.items[0..self.len]);
            if (self.items.len > 0) allocator.free(self.items);
            self.items = grown;
        }
        var i = self.len;
        self.items[i] = t;
        self.len += 1;
        while (i > 0) {
            const parent = (i - 1) / 2;
            if (!self.items[i].before(self.items[parent])) break;
            std.mem.swap(Timer, &self.items[i], &self.items[parent]);
            i = parent;
        }
        return true;
    }

    fn top(self: *const Heap) ?Timer {
        return if (self.len == 0) null else self.items[0];
    }

    fn pop(self: *Heap) Timer {
        std.debug.assert(self.len > 0);
        const t = self.items[0];
        self.len -= 1;
        if (self.len > 0) {
            self.items[0] = self.items[self.len];
            self.siftDown(0);
        } else if (self.items.len > queue_keep) {
            allocator.free(self.items);
            self.items = &.{};
        }
        return t;
    }

    fn siftDown(self: *Heap, start: usize) void {
        var i = start;
        while (true) {
            const l = 2 * i + 1;
            if (l >= self.len) return;
            var m = l;
            if (l + 1 < self.len and self.items[l + 1].before(self.items[l])) m = l + 1;
            if (!self.items[m].before(self.items[i])) return;
            std.mem.swap(Timer, &self.items[i], &self.items[m]);
            i = m;
        }
    }

    fn heapify(self: *Heap) void {
        var i = self.len / 2;
        while (i > 0) {
            i -= 1;
            self.siftDown(i);
        }
    }
};

// ----------------------------------------------------------------------------------
// LoopCore

pub const LoopObject = extern struct {
    ob_base: Object,
    core: ?*Core,
};

const Core = struct {
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
    events: [events_max]linux.epoll_event = undefined,
};

fn coreOf(o: *Object) *Core {
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
        inline for (.{ "future_type", "task_type", "task_factory", "thread_id" }) |field| {
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
    inline for (.{ "future_type", "task_type", "task_kwnames", "future_kwnames", "task_factory", "thread_id" }) |field| {
        const f = @field(core, field);
        @field(core, field) = null;
        py.xdecref(f);
    }
    return 0;
}

/// Drops every queued handle (each decref may run arbitrary code: take one at a time).
fn clearQueues(core: *Core) void {
    while (core.ready.pop()) |o| py.decref(o);
    while (core.timers.len > 0) {
        const t = core.timers.pop();
        setScheduled(t.obj, false);
        py.decref(t.obj);
    }
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
    const h = newHandle(handle_type.?, self, a.callback, a.args, a.context) orelse return null;
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
    wake(core);
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
    const h = newHandle(timer_type.?, self, a.callback, a.args, a.context) orelse return null;
    asHandle(h).when = when;
    if (!pushTimer(core, h, when)) {
        py.decref(h);
        return null;
    }
    return h;
}

fn pushTimer(core: *Core, h: *Object, when: f64) bool {
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

fn setScheduled(h: *Object, v: bool) void {
    if (isNativeHandle(h)) {
        asHandle(h).scheduled = v;
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

/// _zc_push_timer(handle): a debug-mode asyncio TimerHandle into the heap.
fn loopPushTimer(self: ?*Object, h: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
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
    if (scheduled) core.timer_cancelled_count += 1;
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
    if (!sweepTimers(core)) return null;

    // io_uring: completions the kernel posts only when this thread enters the ring do
    // not make the ring's descriptor readable; the engine is polled in this pass instead.
    const engine_due = engineNeedsWait(core);
    var timeout_ms: i32 = -1;
    if (core.ready.len > 0 or core.stopping or engine_due or settlePending(core)) {
        timeout_ms = 0;
    } else if (core.timers.top()) |t| {
        const s = std.math.clamp(t.when - monotonic(), 0, select_timeout_s_max);
        // Rounded up, as asyncio's selector does: waking a hair early would spin.
        timeout_ms = @intFromFloat(@ceil(s * 1000));
    }
    if (!poll(o, core, timeout_ms, engine_due)) return null;

    // Timers due by now become ready.
    const end = monotonic() + core.clock_resolution;
    while (core.timers.top()) |t| {
        if (t.when >= end) break;
        _ = core.timers.pop();
        setScheduled(t.obj, false);
        if (!core.ready.push(t.obj)) {
            py.decref(t.obj);
            _ = c.PyErr_NoMemory();
            return null;
        }
    }

    // Only what is ready now: callbacks these schedule run in the next pass.
    const todo = core.ready.len;
    for (0..todo) |_| {
        const h = core.ready.pop() orelse break;
        defer py.decref(h);
        if (!runReady(o, core, h)) return null;
    }
    settle(core);
    return py.none();
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

/// asyncio's rule: past 100 timers with over half of them cancelled, rebuild the heap
/// without them; otherwise drop cancelled timers from its top.
fn sweepTimers(core: *Core) bool {
    const heap = &core.timers;
    if (heap.len > sweep_timers_min and core.timer_cancelled_count * 2 > @as(isize, @intCast(heap.len))) {
        var kept: usize = 0;
        for (0..heap.len) |i| {
            const t = heap.items[i];
            const cancelled = handleIsCancelled(t.obj) orelse return false;
            if (cancelled) {
                setScheduled(t.obj, false);
                py.decref(t.obj);
            } else {
                heap.items[kept] = t;
                kept += 1;
            }
        }
        heap.len = kept;
        heap.heapify();
        core.timer_cancelled_count = 0;
        return true;
    }
    while (heap.top()) |t| {
        const cancelled = handleIsCancelled(t.obj) orelse return false;
        if (!cancelled) break;
        _ = heap.pop();
        core.timer_cancelled_count -= 1;
        setScheduled(t.obj, false);
        py.decref(t.obj);
    }
    return true;
}

/// Waits for readiness (without the GIL) and handles it: the engine's events now, the
/// wake-up drained, third-party descriptors through asyncio's `_process_events`.
fn poll(loop: *Object, core: *Core, timeout_ms: i32, engine_due: bool) bool {
    if (core.epfd < 0) return py.runtimeError("the loop is not set up") != null;
    // A wait that cannot block keeps the GIL: handing it over and back costs more than
    // the system call, and no other thread needs it for that long.
    const rc = if (timeout_ms == 0) linux.epoll_wait(core.epfd, &core.events, events_max, 0) else blk: {
        const spin_ns = writerSpinNs(core);
        const ts = py.releaseGil();
        defer py.takeGil(ts);
        if (spin_ns != 0) {
            if (spinEvents(core, spin_ns)) |r| break :blk r;
        }
        break :blk linux.epoll_wait(core.epfd, &core.events, events_max, timeout_ms);
    };
    const n: usize = switch (sys.E.init(rc)) {
        .SUCCESS => rc,
        // A signal: its Python handler runs now (and may raise, as in asyncio's select).
        .INTR => return c.PyErr_CheckSignals() == 0,
        else => {
            _ = c.PyErr_SetFromErrno(c.PyExc_OSError);
            return false;
        },
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

const Server = @import("../transport/server.zig").Server;

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

fn engineNeedsWait(core: *Core) bool {
    const s = engineServer(core) orelse return false;
    return s.io.needsWait();
}

fn settlePending(core: *Core) bool {
    const s = engineServer(core) orelse return false;
    return s.settle_pending;
}

/// The end of the pass for the engine: one flush of what the pass wrote, the writer
/// thread woken, and, when the last stream finished and nothing else is ready, the busy
/// poll (without the GIL) whose events are handled at once.
fn settle(core: *Core) void {
    const s = engineServer(core) orelse return;
    if (!s.settle_pending) return;
    const spin = s.settleBegin();
    if (!spin) return;
    // Callbacks still to run (the finished requests' tasks winding down): the busy poll
    // waits for the end of a pass that leaves nothing ready.
    if (core.ready.len > 0) return s.deferSpin();
    if (engine_mod.spinWithoutGil(s)) inEngineContext(core, Server.process, s);
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
    var ev = linux.epoll_event{ .events = linux.EPOLL.IN, .data = .{ .fd = core.wake_fd } };
    if (sys.E.init(linux.epoll_ctl(@intCast(fd), linux.EPOLL.CTL_ADD, core.wake_fd, &ev)) != .SUCCESS)
        return c.PyErr_SetFromErrno(c.PyExc_OSError);
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

fn setRef(slot: *?*Object, value: *Object) void {
    py.incref(value);
    const old = slot.*;
    slot.* = value;
    py.xdecref(old);
}

fn refField(comptime field: []const u8) type {
    return struct {
        fn get(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
            const v = @field(coreOf(self.?), field) orelse return py.none();
            py.incref(v);
            return v;
        }
        fn set(self: ?*Object, value: ?*Object, _: ?*anyopaque) callconv(.c) c_int {
            const core = coreOf(self.?);
            const v = value orelse {
                _ = py.typeError("cannot delete this attribute");
                return -1;
            };
            if (py.isNone(v)) {
                const old = @field(core, field);
                @field(core, field) = null;
                py.xdecref(old);
            } else setRef(&@field(core, field), v);
            return 0;
        }
    };
}

const task_factory_field = refField("task_factory");
const thread_id_field = refField("thread_id");

fn loopGetDebug(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.boolean(coreOf(self.?).debug);
}

fn loopIsRunning(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.boolean(coreOf(self.?).thread_id != null);
}

fn loopIsClosed(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.boolean(coreOf(self.?).closed);
}

/// create_task(coro, *, name=None, context=None): `Task(coro, loop=self, name=name,
/// context=context)`; with a task factory or in debug mode, asyncio's own method.
fn loopCreateTask(self: ?*Object, args: [*c]const ?*Object, nargsf: usize, kwnames: ?*Object) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    const n = nargsf & ~vectorcall_offset;
    if (core.task_factory != null or core.debug or core.task_type == null) {
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
            } else if (c.PyUnicode_CompareWithASCIIString(key, "context") == 0) {
                context = args[n + i].?;
            } else return py.typeError("create_task() got an unexpected keyword argument");
        }
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
    if (sys.E.init(linux.epoll_ctl(core.epfd, linux.EPOLL.CTL_ADD, fd, &ev)) != .SUCCESS) {
        py.decref(ctx);
        return c.PyErr_SetFromErrno(c.PyExc_OSError);
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

/// `_ready` / `_scheduled` read as a list copy (asyncio's own code only counts and
/// clears them, and the loop does both natively). Assigning an empty one clears.
fn getReady(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    const list = c.PyList_New(@intCast(core.ready.len)) orelse return null;
    for (0..core.ready.len) |i| {
        const h = core.ready.at(i);
        py.incref(h);
        _ = c.PyList_SetItem(list, @intCast(i), h);
    }
    return list;
}

fn getScheduled(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const core = coreOf(self.?);
    const list = c.PyList_New(@intCast(core.timers.len)) orelse return null;
    for (core.timers.items[0..core.timers.len], 0..) |t, i| {
        py.incref(t.obj);
        _ = c.PyList_SetItem(list, @intCast(i), t.obj);
    }
    return list;
}

fn setQueue(self: ?*Object, value: ?*Object, _: ?*anyopaque) callconv(.c) c_int {
    const v = value orelse {
        _ = py.typeError("cannot delete the loop's queues");
        return -1;
    };
    const n = c.PyObject_Length(v);
    if (n < 0) return -1;
    if (n != 0) {
        _ = py.typeError("the loop's queues can only be replaced by an empty one");
        return -1;
    }
    _ = self;
    return 0;
}

fn boolField(comptime field: []const u8) type {
    return struct {
        fn get(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
            return py.boolean(@field(coreOf(self.?), field));
        }
        fn set(self: ?*Object, value: ?*Object, _: ?*anyopaque) callconv(.c) c_int {
            const v = value orelse {
                _ = py.typeError("cannot delete this attribute");
                return -1;
            };
            const t = c.PyObject_IsTrue(v);
            if (t < 0) return -1;
            @field(coreOf(self.?), field) = t == 1;
            return 0;
        }
    };
}

fn getCancelledCount(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    return c.PyLong_FromSsize_t(coreOf(self.?).timer_cancelled_count);
}

fn setCancelledCount(self: ?*Object, value: ?*Object, _: ?*anyopaque) callconv(.c) c_int {
    const v = value orelse return -1;
    const n = c.PyLong_AsSsize_t(v);
    if (n == -1 and c.PyErr_Occurred() != null) return -1;
    coreOf(self.?).timer_cancelled_count = n;
    return 0;
}

const closed_field = boolField("closed");
const stopping_field = boolField("stopping");
const debug_field = boolField("debug");

var loop_getset = [_]c.PyGetSetDef{
    .{ .name = "_ready", .get = &getReady, .set = &setQueue, .doc = "A copy of the ready queue.", .closure = null },
    .{ .name = "_scheduled", .get = &getScheduled, .set = &setQueue, .doc = "A copy of the timer heap.", .closure = null },
    .{ .name = "_closed", .get = &closed_field.get, .set = &closed_field.set, .doc = null, .closure = null },
    .{ .name = "_stopping", .get = &stopping_field.get, .set = &stopping_field.set, .doc = null, .closure = null },
    .{ .name = "_debug", .get = &debug_field.get, .set = &debug_field.set, .doc = null, .closure = null },
    .{ .name = "_timer_cancelled_count", .get = &getCancelledCount, .set = &setCancelledCount, .doc = null, .closure = null },
    .{ .name = "_task_factory", .get = &task_factory_field.get, .set = &task_factory_field.set, .doc = null, .closure = null },
    .{ .name = "_thread_id", .get = &thread_id_field.get, .set = &thread_id_field.set, .doc = null, .closure = null },
    std.mem.zeroes(c.PyGetSetDef),
};

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
    .{ .slot = c.Py_tp_getset, .pfunc = @ptrCast(&loop_getset) },
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
    const ht = c.PyType_FromSpec(&handle_spec) orelse return false;
    handle_type = @ptrCast(ht);
    if (c.PyModule_AddObject(m, "Handle", ht) != 0) return false;
    py.incref(ht);
    const bases = c.PyTuple_Pack(1, ht) orelse return false;
    defer py.decref(bases);
    const tt = c.PyType_FromSpecWithBases(&timer_spec, bases) orelse return false;
    timer_type = @ptrCast(tt);
    if (c.PyModule_AddObject(m, "TimerHandle", tt) != 0) return false;
    py.incref(tt);
    const lt = c.PyType_FromSpec(&loop_spec) orelse return false;
    return c.PyModule_AddObject(m, "LoopCore", lt) == 0;
}

// ----------------------------------------------------------------------------------
// Tests of the queues (no interpreter needed: the items are never dereferenced).

fn fake(i: usize) *Object {
    return @ptrFromInt((i + 1) * 16);
}

test "the ready ring is first in, first out across growth and wrap-around" {
    var r = Ring{};
    defer if (r.items.len > 0) allocator.free(r.items);
    var next_in: usize = 0;
    var next_out: usize = 0;
    // Interleaved pushes and pops move the head around the ring while it grows.
    for (0..50) |round| {
        for (0..round * 7 + 3) |_| {
            try std.testing.expect(r.push(fake(next_in)));
            next_in += 1;
        }
        for (0..round * 5 + 1) |_| {
            try std.testing.expectEqual(fake(next_out), r.pop().?);
            next_out += 1;
        }
        try std.testing.expectEqual(next_in - next_out, r.len);
        if (r.len > 0) try std.testing.expectEqual(fake(next_out), r.at(0));
    }
    while (r.pop()) |o| {
        try std.testing.expectEqual(fake(next_out), o);
        next_out += 1;
    }
    try std.testing.expectEqual(next_in, next_out);
    // Empty again after growing past `queue_keep`: the storage went back.
    try std.testing.expectEqual(@as(usize, 0), r.items.len);
}

test "the timer heap pops by time, then in the order timers were scheduled" {
    var h = Heap{};
    defer if (h.items.len > 0) allocator.free(h.items);
    var prng = std.Random.DefaultPrng.init(0x5eed);
    const random = prng.random();
    const n = 5000;
    for (0..n) |i| {
        // Few distinct times: many ties, which must come out in scheduling order.
        const when: f64 = @floatFromInt(random.uintLessThan(u32, 50));
        try std.testing.expect(h.push(.{ .when = when, .seq = i, .obj = fake(i) }));
    }
    var last = Timer{ .when = -1, .seq = 0, .obj = fake(0) };
    for (0..n) |_| {
        const t = h.pop();
        try std.testing.expect(t.when > last.when or (t.when == last.when and t.seq > last.seq));
        last = t;
    }
    try std.testing.expectEqual(@as(usize, 0), h.len);
}

test "heapify restores the order after entries are dropped in place" {
    var h = Heap{};
    defer if (h.items.len > 0) allocator.free(h.items);
    for (0..300) |i| {
        const when: f64 = @floatFromInt((i * 7919) % 1000);
        try std.testing.expect(h.push(.{ .when = when, .seq = i, .obj = fake(i) }));
    }
    // What the sweep of cancelled timers does: keep every third entry, then heapify.
    var kept: usize = 0;
    for (0..h.len) |i| {
        if (h.items[i].seq % 3 == 0) {
            h.items[kept] = h.items[i];
            kept += 1;
        }
    }
    h.len = kept;
    h.heapify();
    var last: f64 = -1;
    var count: usize = 0;
    while (h.top()) |_| {
        const t = h.pop();
        try std.testing.expect(t.when >= last and t.seq % 3 == 0);
        last = t.when;
        count += 1;
    }
    try std.testing.expectEqual(@as(usize, 100), count);
}
