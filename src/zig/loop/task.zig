//! `TaskCore`: an asyncio-compatible task in the engine, for request coroutines on
//! zigcorn's loop (`zigcorn.loop.Task` adds its cold methods in Python).
//!
//! It keeps asyncio's protocol, as CPython's pure-Python `Task` has it, so that asyncio
//! code cannot tell the difference except by `isinstance(t, asyncio.Task)`: the
//! coroutine is stepped with send/throw inside the task's `contextvars` context, between
//! `asyncio.tasks._enter_task` and `_leave_task` (whatever each Python version puts
//! there, so `current_task()` works); a yielded future with `_asyncio_future_blocking`
//! set is waited for through its `add_done_callback`; a bare `yield` runs the task again
//! soon; `cancel(msg)` cancels the future waited for or throws `CancelledError` at the
//! next step; done callbacks go through the loop's `call_soon` with their context; a
//! result or exception is kept as a Future keeps it, and an exception nobody retrieved is
//! reported to the loop's exception handler when the task dies. Each task is registered
//! with `asyncio.tasks._register_task`, so `all_tasks()` sees it.
//!
//! What it saves against asyncio's C Task on 3.11: the name is made only when asked for
//! (`Task-N` from a counter), the first step may run at once (eager start: the engine's
//! request tasks), and no `get_debug()` call per task.
const std = @import("std");
const assert = std.debug.assert;
const py = @import("../python/capi.zig");
const c = py.c;
const Object = py.Object;
/// PY_VECTORCALL_ARGUMENTS_OFFSET (a C macro the translation does not carry).
const vectorcall_offset: usize = @as(usize, 1) << (@bitSizeOf(usize) - 1);
/// The methods, attributes and type object asyncio's code sees.
const api = @import("task_api.zig");
pub const init = api.init;

pub const State = enum(u8) { pending, cancelled, finished };

pub const TaskObject = extern struct {
    ob_base: Object,
    loop: ?*Object,
    coro: ?*Object,
    context: ?*Object,
    /// The name given, or null: then `Task-<number>`, made when first asked for.
    name: ?*Object,
    result: ?*Object,
    exception: ?*Object,
    cancel_msg: ?*Object,
    /// The CancelledError the coroutine raised, handed out once by result().
    cancelled_exc: ?*Object,
    /// The future this task waits for (holding our wake-up callback).
    fut_waiter: ?*Object,
    /// The first done callback and its context inline (the usual single one); further
    /// ones as (callback, context) tuples in a list.
    callback0: ?*Object,
    context0: ?*Object,
    callbacks: ?*Object,
    /// Debug mode: where the task was made (asyncio's `_source_traceback`).
    source_tb: ?*Object,
    weakreflist: ?*Object,
    /// The native registry's list of pending tasks (`Registry`): pointers, no references.
    live_prev: ?*TaskObject,
    live_next: ?*TaskObject,
    number: u64,
    num_cancels: isize,
    state: State,
    must_cancel: bool,
    log_traceback: bool,
    blocking: bool,
    log_destroy_pending: bool,
    live: bool,
};

/// The pending tasks, for asyncio.all_tasks() through zigcorn.loop's view of asyncio's
/// own registry (3.11-3.13, where all_tasks() is Python code reading it): linking a task
/// costs a few stores, where asyncio's `_register_task` adds it to a Python WeakSet and
/// the weak reference's callback takes it out again. A task leaves when it is done (what
/// all_tasks() filters out anyway) or freed. Off (asyncio's `_register_task`) until
/// zigcorn.loop turns it on.
const Registry = struct {
    var on: bool = false;
    var head: ?*TaskObject = null;
    var count: usize = 0;

    fn link(t: *TaskObject) void {
        assert(!t.live);
        t.live_prev = null;
        t.live_next = head;
        if (head) |h| h.live_prev = t;
        head = t;
        t.live = true;
        count += 1;
    }

    fn unlink(t: *TaskObject) void {
        if (!t.live) return;
        if (t.live_prev) |p| p.live_next = t.live_next else head = t.live_next;
        if (t.live_next) |n| n.live_prev = t.live_prev;
        t.live_prev = null;
        t.live_next = null;
        t.live = false;
        assert(count > 0);
        count -= 1;
    }
};

/// TaskCore._zc_live(): a list of the pending tasks the native registry holds.
pub fn liveTasks(_: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const l = c.PyList_New(@intCast(Registry.count)) orelse return null;
    var i: usize = 0;
    var it = Registry.head;
    while (it) |t| : (it = t.live_next) {
        assert(i < Registry.count);
        const o: *Object = @ptrCast(t);
        py.incref(o);
        py.listInit(l, i, o);
        i += 1;
    }
    assert(i == Registry.count);
    return l;
}

/// TaskCore._zc_native_registry(on): tasks made from now on link into the native
/// registry (True) or call asyncio's `_register_task` (False).
pub fn useRegistry(_: ?*Object, on: ?*Object) callconv(.c) ?*Object {
    const v = c.PyObject_IsTrue(on.?);
    if (v < 0) return null;
    Registry.on = v == 1;
    return py.none();
}

pub var task_type: ?*c.PyTypeObject = null;
pub var task_iter_type: ?*c.PyTypeObject = null;
var task_counter: u64 = 0;

/// asyncio's pieces, looked up once (the first task made): new references kept for
/// the life of the process.
pub const Asyncio = struct {
    enter: *Object,
    leave: *Object,
    register: *Object,
    swap: ?*Object,
    cancelled_error: *Object,
    invalid_state: *Object,
    iscoroutine: *Object,
    get_event_loop: *Object,
    current_task: *Object,
    get_debug: *Object,
    is_running: *Object,
    extract_stack: *Object,
    call_soon: *Object,
    call_exception_handler: *Object,
    add_done_callback: *Object,
    cancel: *Object,
    get_loop: *Object,
    result: *Object,
    throw: *Object,
    blocking: *Object,
    kw_context: *Object,
    kw_msg: *Object,
    /// 3.13+: uncancel() down to zero also drops a pending cancellation.
    uncancel_clears: bool,
};
var aio: ?Asyncio = null;

fn attr(module: *Object, comptime name: [:0]const u8) ?*Object {
    return c.PyObject_GetAttrString(module, name.ptr);
}

pub fn setup() ?*const Asyncio {
    if (aio) |*a| return a;
    const tasks = c.PyImport_ImportModule("asyncio.tasks") orelse return null;
    defer py.decref(tasks);
    const exceptions = c.PyImport_ImportModule("asyncio.exceptions") orelse return null;
    defer py.decref(exceptions);
    const coroutines = c.PyImport_ImportModule("asyncio.coroutines") orelse return null;
    defer py.decref(coroutines);
    const events = c.PyImport_ImportModule("asyncio.events") orelse return null;
    defer py.decref(events);
    const helpers = c.PyImport_ImportModule("asyncio.format_helpers") orelse return null;
    defer py.decref(helpers);
    var swap: ?*Object = null;
    if (c.PyObject_HasAttrString(tasks, "_swap_current_task") == 1) {
        swap = attr(tasks, "_swap_current_task") orelse return null;
    }
    const kw_context = c.Py_BuildValue("(s)", "context") orelse return null;
    const kw_msg = c.Py_BuildValue("(s)", "msg") orelse return null;
    aio = .{
        .enter = attr(tasks, "_enter_task") orelse return null,
        .leave = attr(tasks, "_leave_task") orelse return null,
        .register = attr(tasks, "_register_task") orelse return null,
        .swap = swap,
        .cancelled_error = attr(exceptions, "CancelledError") orelse return null,
        .invalid_state = attr(exceptions, "InvalidStateError") orelse return null,
        .iscoroutine = attr(coroutines, "iscoroutine") orelse return null,
        .get_event_loop = attr(events, "get_event_loop") orelse return null,
        .current_task = attr(tasks, "current_task") orelse return null,
        .get_debug = py.intern("get_debug") orelse return null,
        .is_running = py.intern("is_running") orelse return null,
        .extract_stack = attr(helpers, "extract_stack") orelse return null,
        .call_soon = py.intern("call_soon") orelse return null,
        .call_exception_handler = py.intern("call_exception_handler") orelse return null,
        .add_done_callback = py.intern("add_done_callback") orelse return null,
        .cancel = py.intern("cancel") orelse return null,
        .get_loop = py.intern("get_loop") orelse return null,
        .result = py.intern("result") orelse return null,
        .throw = py.intern("throw") orelse return null,
        .blocking = py.intern("_asyncio_future_blocking") orelse return null,
        .kw_context = kw_context,
        .kw_msg = kw_msg,
        .uncancel_clears = c.PY_VERSION_HEX >= 0x030D0000,
    };
    return &aio.?;
}

pub fn asTask(o: *Object) *TaskObject {
    return @ptrCast(@alignCast(o));
}

pub fn isTask(o: *Object) bool {
    return c.PyObject_TypeCheck(o, task_type.?) != 0;
}

pub fn setField(t: *TaskObject, comptime field: []const u8, v: ?*Object) void {
    const old = @field(t, field);
    if (v) |x| py.incref(x);
    @field(t, field) = v;
    py.xdecref(old);
}

// --- construction ------------------------------------------------------------------

pub fn taskNew(tp: ?*c.PyTypeObject, _: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const obj = tp.?.tp_alloc.?(tp, 0) orelse return null;
    const t = asTask(obj);
    t.state = .pending;
    t.log_destroy_pending = true;
    return obj;
}

/// Task(coro, *, loop=None, name=None, context=None, eager_start=False)
pub fn taskInit(self: ?*Object, args: ?*Object, kwargs: ?*Object) callconv(.c) c_int {
    const a = setup() orelse return -1;
    var coro: ?*Object = null;
    var loop: ?*Object = null;
    var name: ?*Object = null;
    var ctx: ?*Object = null;
    var eager: c_int = 0;
    var kwlist = [_:null]?[*:0]const u8{ "coro", "loop", "name", "context", "eager_start", null };
    const kw: [*c][*c]u8 = @ptrCast(&kwlist);
    const f = "O|$OOOp:Task";
    if (c.PyArg_ParseTupleAndKeywords(args, kwargs, f, kw, &coro, &loop, &name, &ctx, &eager) == 0)
        return -1;
    const how: Start = if (eager != 0) .call_eager else .call;
    if (start(a, self.?, coro.?, loop, name, ctx, how)) return 0;
    return -1;
}

/// How a task starts: `Task(...)` (`.call`: scheduled, or eagerly when asked and the loop
/// runs) or the engine's request (`.request`: called from the loop's own pass, where the
/// loop runs and no task is current, on a loop the server found out of debug mode: the
/// first step runs at once, without asking the loop either).
pub const Start = enum { call, call_eager, request };

/// What Task(...) does once its arguments are read; false with the exception set.
pub fn start(
    a: *const Asyncio,
    self: *Object,
    coro: *Object,
    loop: ?*Object,
    name: ?*Object,
    context: ?*Object,
    how: Start,
) bool {
    const t = asTask(self);
    if (t.coro != null) {
        _ = py.runtimeError("the task is already initialised");
        return false;
    }
    if (py.typeOf(coro) != &c.PyCoro_Type) {
        const ok = c.PyObject_CallOneArg(a.iscoroutine, coro) orelse return false;
        defer py.decref(ok);
        if (!py.isTrue(ok)) {
            _ = c.PyErr_Format(c.PyExc_TypeError, "a coroutine was expected, got %R", coro);
            return false;
        }
    }
    const the_loop = if (loop == null or py.isNone(loop.?))
        c.PyObject_CallNoArgs(a.get_event_loop) orelse return false
    else blk: {
        py.incref(loop.?);
        break :blk loop.?;
    };
    t.loop = the_loop;
    py.incref(coro);
    t.coro = coro;
    if (context == null or py.isNone(context.?)) {
        t.context = c.PyContext_CopyCurrent() orelse return false;
    } else {
        // Each step enters it: anything but a Context would fail there, step after step.
        if (py.typeOf(context.?) != &c.PyContext_Type) {
            _ = py.typeError("context must be a contextvars.Context");
            return false;
        }
        py.incref(context.?);
        t.context = context.?;
    }
    if (name != null and !py.isNone(name.?)) {
        t.name = c.PyObject_Str(name.?) orelse return false;
    } else {
        task_counter += 1;
        t.number = task_counter;
    }
    var dargv = [_]?*Object{the_loop};
    const debug = if (how == .request)
        py.boolean(false)
    else
        callMethod(a.get_debug, &dargv, 1, null) orelse return false;
    defer py.decref(debug);
    if (py.isTrue(debug)) {
        // extract_stack() starts at its caller's frame: the code that made this task.
        t.source_tb = c.PyObject_CallNoArgs(a.extract_stack) orelse return false;
    }
    if (Registry.on) {
        Registry.link(t);
    } else {
        const reg = c.PyObject_CallOneArg(a.register, self) orelse return false;
        py.decref(reg);
    }
    if (how == .request) return stepInContext(a, self, null, .enter) and dropCoroIfDone(t);
    if (how == .call_eager and loopIsRunning(a, the_loop)) return eagerStart(a, self);
    return scheduleStep(a, self, null);
}

/// `(task_type, loop)` bound: `task_type(coro, loop=loop, eager_start=True)` without
/// keyword parsing (the engine's plain dispatch calls it once per request).
var request_def = api.method("_request", &requestTask, c.METH_O);

fn requestTask(bound: ?*Object, coro: ?*Object) callconv(.c) ?*Object {
    const a = setup() orelse return null;
    const tp: *c.PyTypeObject = @ptrCast(c.PyTuple_GetItem(bound.?, 0).?);
    const loop = c.PyTuple_GetItem(bound.?, 1).?;
    const obj = taskNew(tp, null, null) orelse return null;
    if (!start(a, obj, coro.?, loop, null, null, .request)) {
        py.decref(obj);
        return null;
    }
    return obj;
}

/// TaskCore._zc_starter(loop), a class method: the one-argument callable that makes a
/// request's task of this class on `loop`, started eagerly.
pub fn starter(cls: ?*Object, loop: ?*Object) callconv(.c) ?*Object {
    const ours = c.PyObject_IsSubclass(cls.?, @ptrCast(task_type.?)) == 1;
    if (!ours) return py.typeError("not a TaskCore class");
    const bound = c.PyTuple_Pack(2, cls.?, loop.?) orelse return null;
    defer py.decref(bound);
    return c.PyCFunction_New(&request_def, bound);
}

fn loopIsRunning(a: *const Asyncio, loop: *Object) bool {
    var argv = [_]?*Object{loop};
    const r = callMethod(a.is_running, &argv, 1, null) orelse {
        c.PyErr_Clear();
        return false;
    };
    defer py.decref(r);
    return py.isTrue(r);
}

/// The first step now, with the task current in place of whatever was (3.12+:
/// `_swap_current_task`); on 3.11 only when no task is current (else it is scheduled).
fn eagerStart(a: *const Asyncio, self: *Object) bool {
    const t = asTask(self);
    const swap = a.swap orelse {
        if (!noCurrentTask(a, t.loop.?)) return scheduleStep(a, self, null);
        return stepInContext(a, self, null, .enter) and dropCoroIfDone(t);
    };
    var argv = [_]?*Object{ null, t.loop, self };
    const prev = call2(swap, &argv) orelse return false;
    defer py.decref(prev);
    const ok = stepInContext(a, self, null, .swapped);
    const saved = Saved.take();
    defer saved.restore();
    var back = [_]?*Object{ null, t.loop, prev };
    const cur = call2(swap, &back);
    if (cur) |x| py.decref(x) else if (ok) return false else c.PyErr_WriteUnraisable(self);
    return ok and dropCoroIfDone(t);
}

/// As asyncio after an eager first step: a task done at once lets its coroutine go.
fn dropCoroIfDone(t: *TaskObject) bool {
    if (t.state != .pending) setField(t, "coro", null);
    return true;
}

fn noCurrentTask(a: *const Asyncio, loop: *Object) bool {
    const r = c.PyObject_CallOneArg(a.current_task, loop) orelse {
        c.PyErr_Clear();
        return false;
    };
    defer py.decref(r);
    return py.isNone(r);
}

/// The exception being raised, set aside while cleanup code calls into Python (which
/// must not run with an exception set) and put back after.
const Saved = struct {
    tp: ?*Object = null,
    v: ?*Object = null,
    tb: ?*Object = null,

    fn take() Saved {
        var s = Saved{};
        c.PyErr_Fetch(&s.tp, &s.v, &s.tb);
        return s;
    }

    /// Put back, unless cleanup raised one of its own (then the first is dropped).
    fn restore(s: Saved) void {
        if (s.tp == null) return;
        if (c.PyErr_Occurred() != null) {
            py.decref(s.tp.?);
            py.xdecref(s.v);
            py.xdecref(s.tb);
            return;
        }
        c.PyErr_Restore(s.tp, s.v, s.tb);
    }
};

// --- scheduling --------------------------------------------------------------------

var step_def = api.method("_step", &stepMethod, c.METH_FASTCALL);
var wakeup_def = api.method("_wakeup", &wakeupMethod, c.METH_O);

/// f(argv[1], argv[2]), slot 0 free for the callee.
fn call2(f: *Object, argv: *[3]?*Object) ?*Object {
    return c.PyObject_Vectorcall(f, @ptrCast(&argv[1]), 2 | vectorcall_offset, null);
}

/// argv[0].name(*argv[1..n], **kw): the keyword values follow the positional ones.
pub fn callMethod(name: *Object, argv: []?*Object, n: usize, kw: ?*Object) ?*Object {
    return c.PyObject_VectorcallMethod(name, @ptrCast(argv.ptr), n | vectorcall_offset, kw);
}

/// loop.call_soon(fn, *args, context=ctx); false with the exception set.
pub fn callSoon(a: *const Asyncio, loop: *Object, func: *Object, arg: ?*Object, ctx: *Object) bool {
    var argv = [_]?*Object{ loop, func, arg, ctx };
    const n: usize = if (arg != null) 3 else 2;
    if (arg == null) argv[2] = ctx;
    const r = callMethod(a.call_soon, &argv, n, a.kw_context) orelse return false;
    py.decref(r);
    return true;
}

/// The next step through the loop, with `exc` thrown into the coroutine if given.
fn scheduleStep(a: *const Asyncio, self: *Object, exc: ?*Object) bool {
    const t = asTask(self);
    const next = c.PyCFunction_New(&step_def, self) orelse return false;
    defer py.decref(next);
    return callSoon(a, t.loop.?, next, exc, t.context.?);
}

/// A new RuntimeError(msg % o) for the next step to throw.
fn scheduleError(a: *const Asyncio, self: *Object, comptime fmt: [:0]const u8, o: *Object) bool {
    const msg = c.PyUnicode_FromFormat(fmt.ptr, self, o) orelse return false;
    const e = c.PyObject_CallOneArg(c.PyExc_RuntimeError, msg);
    py.decref(msg);
    defer py.xdecref(e);
    return scheduleStep(a, self, e orelse return false);
}

fn scheduleCallbacks(a: *const Asyncio, self: *Object) bool {
    const t = asTask(self);
    const cb0 = t.callback0;
    const ctx0 = t.context0;
    const rest = t.callbacks;
    t.callback0 = null;
    t.context0 = null;
    t.callbacks = null;
    defer py.xdecref(cb0);
    defer py.xdecref(ctx0);
    defer py.xdecref(rest);
    var ok = true;
    if (cb0) |cb| ok = callSoon(a, t.loop.?, cb, self, ctx0.?);
    if (rest) |l| {
        const n: usize = @intCast(c.PyList_Size(l));
        for (0..n) |i| {
            if (!ok) break;
            const pair = c.PyList_GetItem(l, @intCast(i)).?;
            const cb = c.PyTuple_GetItem(pair, 0).?;
            ok = callSoon(a, t.loop.?, cb, self, c.PyTuple_GetItem(pair, 1).?);
        }
    }
    return ok;
}

fn finish(a: *const Asyncio, self: *Object, state: State) bool {
    const t = asTask(self);
    assert(t.state == .pending);
    t.state = state;
    Registry.unlink(t);
    return scheduleCallbacks(a, self);
}

fn setResult(a: *const Asyncio, self: *Object, v: *Object) bool {
    setField(asTask(self), "result", v);
    return finish(a, self, .finished);
}

fn setException(a: *const Asyncio, self: *Object, exc: *Object) bool {
    const t = asTask(self);
    setField(t, "exception", exc);
    t.log_traceback = true;
    return finish(a, self, .finished);
}

/// Future.cancel(msg) on the task itself: cancelled, callbacks scheduled.
fn futureCancel(a: *const Asyncio, self: *Object, msg: ?*Object) bool {
    const t = asTask(self);
    t.log_traceback = false;
    setField(t, "cancel_msg", msg);
    return finish(a, self, .cancelled);
}

/// The CancelledError result() and a step raise: the coroutine's own once, else a new
/// one carrying the message. New reference.
pub fn makeCancelledError(a: *const Asyncio, t: *TaskObject) ?*Object {
    if (t.cancelled_exc) |e| {
        t.cancelled_exc = null;
        return e;
    }
    if (t.cancel_msg) |m| {
        if (!py.isNone(m)) return c.PyObject_CallOneArg(a.cancelled_error, m);
    }
    return c.PyObject_CallNoArgs(a.cancelled_error);
}

// --- the step ----------------------------------------------------------------------

const Entry = enum { enter, swapped };

fn stepMethod(self: ?*Object, args: [*c]const ?*Object, nargs: isize) callconv(.c) ?*Object {
    const a = setup() orelse return null;
    if (nargs > 1) return py.typeError("_step() takes at most one argument");
    var exc: ?*Object = if (nargs == 1) args[0] else null;
    if (exc) |e| {
        if (py.isNone(e)) exc = null;
    }
    if (!step(a, self.?, exc, .enter)) return null;
    return py.none();
}

/// Runs one step in the task's context (the eager start: the caller's context is not
/// the task's).
fn stepInContext(a: *const Asyncio, self: *Object, exc: ?*Object, entry: Entry) bool {
    const ctx = asTask(self).context.?;
    py.incref(ctx);
    defer py.decref(ctx);
    if (c.PyContext_Enter(ctx) != 0) return false;
    const ok = step(a, self, exc, entry);
    const saved = Saved.take();
    defer saved.restore();
    if (c.PyContext_Exit(ctx) != 0) {
        if (ok) return false;
        c.PyErr_WriteUnraisable(self);
    }
    return ok;
}

/// One step of the coroutine (the caller is in the task's context). False with an
/// exception set: only what must leave the loop (KeyboardInterrupt, SystemExit) or a
/// broken invariant (a step of a task already done).
fn step(a: *const Asyncio, self: *Object, exc_in: ?*Object, entry: Entry) bool {
    const t = asTask(self);
    if (t.state != .pending) {
        _ = c.PyErr_Format(a.invalid_state, "_step(): already done: %R", self);
        return false;
    }
    py.incref(self); // the step may drop the last other reference
    defer py.decref(self);
    var exc = exc_in;
    var made: ?*Object = null;
    defer py.xdecref(made);
    if (t.must_cancel) {
        const is_cancel = if (exc) |e| c.PyObject_IsInstance(e, a.cancelled_error) == 1 else false;
        if (!is_cancel) {
            made = makeCancelledError(a, t) orelse return false;
            exc = made;
        }
        t.must_cancel = false;
    }
    setField(t, "fut_waiter", null);
    if (entry == .enter) {
        var argv = [_]?*Object{ null, t.loop, self };
        const r = call2(a.enter, &argv) orelse return false;
        py.decref(r);
    }
    const ok = runAndHandle(a, self, exc);
    if (entry == .enter) {
        const saved = Saved.take();
        var argv = [_]?*Object{ null, t.loop, self };
        const r = call2(a.leave, &argv);
        if (r) |x| py.decref(x) else if (ok) return false else c.PyErr_WriteUnraisable(self);
        saved.restore();
    }
    return ok;
}

fn runAndHandle(a: *const Asyncio, self: *Object, exc: ?*Object) bool {
    const t = asTask(self);
    const coro = t.coro orelse return py.runtimeError("the task has no coroutine") != null;
    py.incref(coro);
    defer py.decref(coro);
    var yielded: ?*Object = null;
    if (exc) |e| {
        var argv = [_]?*Object{ coro, e };
        if (callMethod(a.throw, &argv, 2, null)) |r| {
            yielded = r;
        } else if (c.PyErr_ExceptionMatches(c.PyExc_StopIteration) != 0) {
            const stop = fetchValue() orelse return false;
            defer py.decref(stop);
            return returned(a, self, stop);
        } else return raised(a, self);
    } else {
        var r: ?*Object = null;
        switch (c.PyIter_Send(coro, py.borrowedNone(), &r)) {
            c.PYGEN_RETURN => {
                defer py.decref(r.?);
                return returned(a, self, r.?);
            },
            c.PYGEN_NEXT => yielded = r,
            else => return raised(a, self),
        }
    }
    defer py.decref(yielded.?);
    return awaitYielded(a, self, yielded.?);
}

/// StopIteration's value (the error indicator cleared). New reference.
fn fetchValue() ?*Object {
    var tp: ?*Object = null;
    var v: ?*Object = null;
    var tb: ?*Object = null;
    c.PyErr_Fetch(&tp, &v, &tb);
    c.PyErr_NormalizeException(&tp, &v, &tb);
    defer py.xdecref(tp);
    defer py.xdecref(tb);
    const e = v orelse return py.none();
    defer py.decref(e);
    return c.PyObject_GetAttrString(e, "value");
}

fn returned(a: *const Asyncio, self: *Object, value: *Object) bool {
    const t = asTask(self);
    if (t.must_cancel) {
        // Cancelled right before the coroutine returned.
        t.must_cancel = false;
        return futureCancel(a, self, t.cancel_msg);
    }
    return setResult(a, self, value);
}

/// The coroutine raised (the exception is set).
fn raised(a: *const Asyncio, self: *Object) bool {
    const t = asTask(self);
    const fatal = c.PyErr_ExceptionMatches(c.PyExc_KeyboardInterrupt) != 0 or
        c.PyErr_ExceptionMatches(c.PyExc_SystemExit) != 0;
    const cancelled = c.PyErr_ExceptionMatches(a.cancelled_error) != 0;
    const exc = @import("handle.zig").fetchException() orelse return false;
    defer py.decref(exc);
    if (cancelled) {
        setField(t, "cancelled_exc", exc);
        return futureCancel(a, self, null);
    }
    if (!setException(a, self, exc)) return false;
    if (fatal) {
        py.incref(exc);
        c.PyErr_SetObject(@ptrCast(py.typeOf(exc)), exc);
        py.decref(exc);
        return false;
    }
    return true;
}

const other_loop = "Task %R got Future %R attached to a different loop";
const not_yield_from = "yield was used instead of yield from in task %R with %R";
const generator_yield = "yield was used instead of yield from for generator in task %R with %R";

/// What the coroutine yielded: a future to wait for, None (run again soon), or a mistake.
fn awaitYielded(a: *const Asyncio, self: *Object, y: *Object) bool {
    const t = asTask(self);
    if (py.isNone(y)) return scheduleStep(a, self, null);
    if (isTask(y)) {
        const other = asTask(y);
        if (other.loop != t.loop) return scheduleError(a, self, other_loop, y);
        if (!other.blocking) return scheduleError(a, self, not_yield_from, y);
        if (y == self) return scheduleError(a, self, "Task cannot await on itself: %R", y);
        other.blocking = false;
        const wake = c.PyCFunction_New(&wakeup_def, self) orelse return false;
        defer py.decref(wake);
        if (!addCallback(a, y, wake, t.context.?)) return false;
        return waitOn(a, self, y);
    }
    var blocking: ?*Object = null;
    if (c.PyObject_GetAttr(y, a.blocking)) |b| {
        blocking = b;
    } else if (c.PyErr_ExceptionMatches(c.PyExc_AttributeError) != 0) {
        c.PyErr_Clear();
    } else return false;
    const b = blocking orelse return badYield(a, self, y);
    defer py.decref(b);
    if (py.isNone(b)) return badYield(a, self, y);
    const floop = futureLoop(a, y) orelse return false;
    py.decref(floop);
    if (floop != t.loop) return scheduleError(a, self, other_loop, y);
    const truth = c.PyObject_IsTrue(b);
    if (truth < 0) return false;
    if (truth == 0) return scheduleError(a, self, not_yield_from, y);
    if (y == self) return scheduleError(a, self, "Task cannot await on itself: %R", y);
    if (c.PyObject_SetAttr(y, a.blocking, py.borrowedFalse()) != 0) return false;
    const wake = c.PyCFunction_New(&wakeup_def, self) orelse return false;
    defer py.decref(wake);
    var cargv = [_]?*Object{ y, wake, t.context };
    const r = callMethod(a.add_done_callback, &cargv, 2, a.kw_context) orelse return false;
    py.decref(r);
    return waitOn(a, self, y);
}

/// asyncio's `futures._get_loop`: `fut.get_loop()`, or `fut._loop` when it has no
/// get_loop. New reference.
fn futureLoop(a: *const Asyncio, fut: *Object) ?*Object {
    const get = c.PyObject_GetAttr(fut, a.get_loop) orelse {
        if (c.PyErr_ExceptionMatches(c.PyExc_AttributeError) == 0) return null;
        c.PyErr_Clear();
        return c.PyObject_GetAttrString(fut, "_loop");
    };
    defer py.decref(get);
    return c.PyObject_CallNoArgs(get);
}

/// The task now waits for `fut`; a cancel() that came during the step cancels it.
fn waitOn(a: *const Asyncio, self: *Object, fut: *Object) bool {
    const t = asTask(self);
    setField(t, "fut_waiter", fut);
    if (t.must_cancel) {
        var argv = [_]?*Object{ fut, t.cancel_msg orelse py.borrowedNone() };
        const r = callMethod(a.cancel, &argv, 1, a.kw_msg) orelse return false;
        defer py.decref(r);
        if (py.isTrue(r)) t.must_cancel = false;
    }
    return true;
}

fn badYield(a: *const Asyncio, self: *Object, y: *Object) bool {
    const gen = c.PyObject_TypeCheck(y, &c.PyGen_Type) != 0;
    if (gen) return scheduleError(a, self, generator_yield, y);
    return scheduleError(a, self, "Task %R got bad yield: %R", y);
}

/// The done callback on the future waited for: the next step, with its exception.
fn wakeupMethod(self: ?*Object, fut: ?*Object) callconv(.c) ?*Object {
    const a = setup() orelse return null;
    const f = fut.?;
    var exc: ?*Object = null;
    if (isTask(f)) {
        const ft = asTask(f);
        if (ft.state == .cancelled) {
            exc = makeCancelledError(a, ft) orelse return null;
        } else if (ft.exception) |e| {
            ft.log_traceback = false;
            py.incref(e);
            exc = e;
        }
    } else {
        var argv = [_]?*Object{f};
        if (callMethod(a.result, &argv, 1, null)) |r| {
            py.decref(r);
        } else {
            exc = @import("handle.zig").fetchException() orelse return null;
        }
    }
    defer py.xdecref(exc);
    if (!step(a, self.?, exc, .enter)) return null;
    return py.none();
}

pub fn addCallback(a: *const Asyncio, self: *Object, cb: *Object, ctx: *Object) bool {
    const t = asTask(self);
    if (t.state != .pending) return callSoon(a, t.loop.?, cb, self, ctx);
    if (t.callback0 == null and (t.callbacks == null or c.PyList_Size(t.callbacks.?) == 0)) {
        py.incref(cb);
        py.incref(ctx);
        t.callback0 = cb;
        t.context0 = ctx;
        return true;
    }
    if (t.callbacks == null) t.callbacks = c.PyList_New(0) orelse return false;
    const pair = c.PyTuple_Pack(2, cb, ctx) orelse return false;
    defer py.decref(pair);
    return c.PyList_Append(t.callbacks.?, pair) == 0;
}

// --- life and death ----------------------------------------------------------------

const object_fields = .{
    "loop",       "coro",          "context",    "name",      "result",   "exception",
    "cancel_msg", "cancelled_exc", "fut_waiter", "callback0", "context0", "callbacks",
    "source_tb",
};

pub fn taskTraverse(obj: ?*Object, visit: c.visitproc, arg: ?*anyopaque) callconv(.c) c_int {
    const t = asTask(obj.?);
    inline for (object_fields) |f| {
        if (@field(t, f)) |o| {
            const r = visit.?(o, arg);
            if (r != 0) return r;
        }
    }
    return visit.?(@ptrCast(py.typeOf(obj.?)), arg);
}

pub fn taskClear(obj: ?*Object) callconv(.c) c_int {
    const t = asTask(obj.?);
    Registry.unlink(t);
    inline for (object_fields) |f| setField(t, f, null);
    return 0;
}

const destroyed_pending = "Task was destroyed but it is pending!";

/// As asyncio: a task dropped while pending, and an exception nobody retrieved, are
/// reported to the loop's exception handler.
pub fn taskFinalize(obj: ?*Object) callconv(.c) void {
    const self = obj.?;
    const t = asTask(self);
    // Dying: out of all_tasks() now, as asyncio's weak reference is cleared before any
    // finalizer runs (the handler below may keep the task, which then stays out).
    Registry.unlink(t);
    const loop = t.loop orelse return;
    const pending = t.state == .pending and t.log_destroy_pending;
    if (!pending and !t.log_traceback) return;
    const a = setup() orelse {
        c.PyErr_Clear();
        return;
    };
    var tp: ?*Object = null;
    var v: ?*Object = null;
    var tb: ?*Object = null;
    c.PyErr_Fetch(&tp, &v, &tb);
    defer c.PyErr_Restore(tp, v, tb);
    const ctx = (if (pending)
        c.Py_BuildValue("{s:O,s:s}", "task", self, "message", destroyed_pending)
    else
        c.Py_BuildValue(
            "{s:N,s:O,s:O}",
            "message",
            c.PyUnicode_FromFormat("%s exception was never retrieved", py.typeOf(self).tp_name),
            "exception",
            t.exception.?,
            "future",
            self,
        )) orelse {
        c.PyErr_WriteUnraisable(self);
        return;
    };
    defer py.decref(ctx);
    if (t.source_tb) |tb_list| {
        if (c.PyDict_SetItemString(ctx, "source_traceback", tb_list) != 0) {
            c.PyErr_WriteUnraisable(self);
            return;
        }
    }
    var argv = [_]?*Object{ loop, ctx };
    const r = callMethod(a.call_exception_handler, &argv, 2, null);
    if (r) |x| py.decref(x) else c.PyErr_WriteUnraisable(self);
}

pub fn taskDealloc(obj: ?*Object) callconv(.c) void {
    const o = obj.?;
    const tp = py.typeOf(o);
    if (c.PyObject_CallFinalizerFromDealloc(o) < 0) return; // resurrected
    c.PyObject_GC_UnTrack(o);
    if (asTask(o).weakreflist != null) c.PyObject_ClearWeakRefs(o);
    _ = taskClear(o);
    tp.tp_free.?(o);
    py.decref(@ptrCast(tp));
}

// ----------------------------------------------------------------------------------
// Tests: the registry's list, on zeroed task structs (no interpreter).

const testing = std.testing;

fn expectLive(expected: []const *TaskObject) !void {
    try testing.expectEqual(expected.len, Registry.count);
    var it = Registry.head;
    var prev: ?*TaskObject = null;
    for (expected) |t| {
        try testing.expectEqual(t, it.?);
        try testing.expectEqual(prev, t.live_prev);
        try testing.expect(t.live);
        prev = t;
        it = t.live_next;
    }
    try testing.expectEqual(@as(?*TaskObject, null), it);
}

test "the registry links the newest first and unlinks from any place, once" {
    var ts: [3]TaskObject = undefined;
    for (&ts) |*t| t.* = std.mem.zeroes(TaskObject);
    try expectLive(&.{});
    for (&ts) |*t| Registry.link(t);
    try expectLive(&.{ &ts[2], &ts[1], &ts[0] });
    Registry.unlink(&ts[1]); // the middle
    try expectLive(&.{ &ts[2], &ts[0] });
    Registry.unlink(&ts[1]); // done and then freed: the second unlink is a no-op
    try expectLive(&.{ &ts[2], &ts[0] });
    Registry.unlink(&ts[2]); // the head
    try expectLive(&.{&ts[0]});
    Registry.link(&ts[1]); // linked again (a struct reused by the allocator)
    try expectLive(&.{ &ts[1], &ts[0] });
    Registry.unlink(&ts[0]); // the tail
    Registry.unlink(&ts[1]);
    try expectLive(&.{});
    for (ts) |t| try testing.expect(!t.live and t.live_prev == null and t.live_next == null);
}
