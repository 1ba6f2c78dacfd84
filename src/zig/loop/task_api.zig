//! `TaskCore`'s Python face: asyncio.Future's and Task's methods, the attributes
//! asyncio's own code reads (`_asyncio_future_blocking`, `_fut_waiter`, ...), the
//! iterator `await task` drives, and the type objects. The steps are in task.zig.
const std = @import("std");
const py = @import("../python/capi.zig");
const c = py.c;
const Object = py.Object;
const task = @import("task.zig");
const setup = task.setup;
const asTask = task.asTask;
const setField = task.setField;
const makeCancelledError = task.makeCancelledError;
const addCallback = task.addCallback;
const callMethod = task.callMethod;
/// PY_VECTORCALL_ARGUMENTS_OFFSET (a C macro the translation does not carry).
const vectorcall_offset: usize = @as(usize, 1) << (@bitSizeOf(usize) - 1);

// --- Future's methods --------------------------------------------------------------

/// result() and exception(): a cancelled task raises its CancelledError, a pending one
/// InvalidStateError(`not_ready`); a finished one (true) counts as retrieved.
fn finished(self: *Object, comptime not_ready: [:0]const u8) bool {
    const a = setup() orelse return false;
    const t = asTask(self);
    switch (t.state) {
        .cancelled => {
            const e = makeCancelledError(a, t) orelse return false;
            defer py.decref(e);
            c.PyErr_SetObject(@ptrCast(py.typeOf(e)), e);
            return false;
        },
        .pending => {
            c.PyErr_SetString(a.invalid_state, not_ready);
            return false;
        },
        .finished => {},
    }
    t.log_traceback = false;
    return true;
}

fn mResult(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    if (!finished(self.?, "Result is not ready.")) return null;
    const t = asTask(self.?);
    if (t.exception) |e| {
        c.PyErr_SetObject(@ptrCast(py.typeOf(e)), e);
        return null;
    }
    const r = t.result orelse return py.none();
    py.incref(r);
    return r;
}

fn mException(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    if (!finished(self.?, "Exception is not set.")) return null;
    const t = asTask(self.?);
    const e = t.exception orelse return py.none();
    py.incref(e);
    return e;
}

fn mDone(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.boolean(asTask(self.?).state != .pending);
}

fn mCancelled(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.boolean(asTask(self.?).state == .cancelled);
}

/// cancel(msg=None): the future waited for is cancelled (its done callback then throws
/// CancelledError into the coroutine), or the next step throws it.
fn mCancel(self: ?*Object, args: ?*Object, kwargs: ?*Object) callconv(.c) ?*Object {
    const a = setup() orelse return null;
    var msg: ?*Object = null;
    var kwlist = [_:null]?[*:0]const u8{ "msg", null };
    const kw: [*c][*c]u8 = @ptrCast(&kwlist);
    if (c.PyArg_ParseTupleAndKeywords(args, kwargs, "|O:cancel", kw, &msg) == 0) return null;
    const t = asTask(self.?);
    t.log_traceback = false;
    if (t.state != .pending) return py.boolean(false);
    t.num_cancels +|= 1;
    if (t.fut_waiter) |w| {
        py.incref(w);
        defer py.decref(w);
        var argv = [_]?*Object{ w, msg orelse py.borrowedNone() };
        const r = callMethod(a.cancel, &argv, 1, a.kw_msg) orelse return null;
        defer py.decref(r);
        const truth = c.PyObject_IsTrue(r);
        if (truth < 0) return null;
        if (truth == 1) return py.boolean(true);
    }
    t.must_cancel = true;
    setField(t, "cancel_msg", msg);
    return py.boolean(true);
}

fn mCancelling(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return c.PyLong_FromSsize_t(asTask(self.?).num_cancels);
}

fn mUncancel(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const a = setup() orelse return null;
    const t = asTask(self.?);
    if (t.num_cancels > 0) {
        t.num_cancels -= 1;
        if (t.num_cancels == 0 and a.uncancel_clears) t.must_cancel = false;
    }
    return c.PyLong_FromSsize_t(t.num_cancels);
}

fn mAddDoneCallback(
    self: ?*Object,
    args: [*c]const ?*Object,
    nargsf: usize,
    kwnames: ?*Object,
) callconv(.c) ?*Object {
    const a = setup() orelse return null;
    const n = nargsf & ~vectorcall_offset;
    if (n != 1) return py.typeError("add_done_callback() takes one positional argument");
    var ctx: ?*Object = null;
    if (kwnames) |kw| {
        const nk: usize = @intCast(c.PyTuple_Size(kw));
        for (0..nk) |i| {
            const key = c.PyTuple_GetItem(kw, @intCast(i)).?;
            if (c.PyUnicode_CompareWithASCIIString(key, "context") != 0)
                return py.typeError("add_done_callback() got an unexpected keyword argument");
            if (!py.isNone(args[n + i].?)) ctx = args[n + i].?;
        }
    }
    const context = if (ctx) |x| blk: {
        py.incref(x);
        break :blk x;
    } else c.PyContext_CopyCurrent() orelse return null;
    defer py.decref(context);
    if (!addCallback(a, self.?, args[0].?, context)) return null;
    return py.none();
}

fn mRemoveDoneCallback(self: ?*Object, fn_: ?*Object) callconv(.c) ?*Object {
    const t = asTask(self.?);
    var removed: isize = 0;
    if (t.callback0) |cb| {
        const eq = c.PyObject_RichCompareBool(cb, fn_.?, c.Py_EQ);
        if (eq < 0) return null;
        if (eq == 1) {
            removed += 1;
            setField(t, "callback0", null);
            setField(t, "context0", null);
        }
    }
    if (t.callbacks) |l| {
        const kept = c.PyList_New(0) orelse return null;
        var i: isize = 0;
        while (i < c.PyList_Size(l)) : (i += 1) {
            const pair = c.PyList_GetItem(l, i).?;
            const eq = c.PyObject_RichCompareBool(c.PyTuple_GetItem(pair, 0), fn_.?, c.Py_EQ);
            if (eq < 0 or (eq == 0 and c.PyList_Append(kept, pair) != 0)) {
                py.decref(kept);
                return null;
            }
            if (eq == 1) removed += 1;
        }
        // asyncio.Future's order: the first callback is the oldest.
        if (t.callback0 == null and c.PyList_Size(kept) > 0) {
            const first = c.PyList_GetItem(kept, 0).?;
            setField(t, "callback0", c.PyTuple_GetItem(first, 0));
            setField(t, "context0", c.PyTuple_GetItem(first, 1));
            if (c.PySequence_DelItem(kept, 0) != 0) {
                py.decref(kept);
                return null;
            }
        }
        const old = t.callbacks;
        t.callbacks = kept;
        py.xdecref(old);
    }
    return c.PyLong_FromSsize_t(removed);
}

fn mGetLoop(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const l = asTask(self.?).loop orelse return py.none();
    py.incref(l);
    return l;
}

fn mGetCoro(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const x = asTask(self.?).coro orelse return py.none();
    py.incref(x);
    return x;
}

fn mGetContext(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const x = asTask(self.?).context orelse return py.none();
    py.incref(x);
    return x;
}

fn mGetName(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const t = asTask(self.?);
    if (t.name == null) {
        t.name = c.PyUnicode_FromFormat("Task-%llu", @as(c_ulonglong, t.number)) orelse return null;
    }
    py.incref(t.name.?);
    return t.name;
}

fn mSetName(self: ?*Object, v: ?*Object) callconv(.c) ?*Object {
    const s = c.PyObject_Str(v.?) orelse return null;
    const t = asTask(self.?);
    const old = t.name;
    t.name = s;
    py.xdecref(old);
    return py.none();
}

fn mSetResult(_: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.runtimeError("Task does not support set_result operation");
}

fn mSetException(_: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.runtimeError("Task does not support set_exception operation");
}

fn mMakeCancelledError(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const a = setup() orelse return null;
    return makeCancelledError(a, asTask(self.?));
}

// --- await -------------------------------------------------------------------------

const TaskIter = extern struct {
    ob_base: Object,
    task: ?*Object,
    yielded: bool,
};

fn taskAwait(self: ?*Object) callconv(.c) ?*Object {
    const obj = c.PyType_GenericAlloc(task.task_iter_type.?, 0) orelse return null;
    const it: *TaskIter = @ptrCast(@alignCast(obj));
    py.incref(self.?);
    it.task = self.?;
    it.yielded = false;
    return obj;
}

/// As asyncio.Future.__await__: yields the task once while it is pending, then returns
/// its result (StopIteration) or raises its exception.
fn iterNext(obj: ?*Object) callconv(.c) ?*Object {
    const it: *TaskIter = @ptrCast(@alignCast(obj.?));
    const self = it.task orelse return null;
    const t = asTask(self);
    if (t.state == .pending) {
        if (it.yielded) return py.runtimeError("await wasn't used with future");
        it.yielded = true;
        t.blocking = true;
        py.incref(self);
        return self;
    }
    const r = mResult(self, null) orelse return null;
    defer py.decref(r);
    const stop = c.PyObject_CallOneArg(c.PyExc_StopIteration, r) orelse return null;
    defer py.decref(stop);
    c.PyErr_SetObject(c.PyExc_StopIteration, stop);
    return null;
}

fn iterSend(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const r = iterNext(obj);
    if (r == null and c.PyErr_Occurred() == null) c.PyErr_SetNone(c.PyExc_StopIteration);
    return r;
}

fn iterDealloc(obj: ?*Object) callconv(.c) void {
    const o = obj.?;
    const tp = py.typeOf(o);
    c.PyObject_GC_UnTrack(o);
    _ = iterClear(o);
    tp.tp_free.?(o);
    py.decref(@ptrCast(tp));
}

fn iterTraverse(obj: ?*Object, visit: c.visitproc, arg: ?*anyopaque) callconv(.c) c_int {
    const it: *TaskIter = @ptrCast(@alignCast(obj.?));
    if (it.task) |x| {
        const r = visit.?(x, arg);
        if (r != 0) return r;
    }
    return visit.?(@ptrCast(py.typeOf(obj.?)), arg);
}

fn iterClear(obj: ?*Object) callconv(.c) c_int {
    const it: *TaskIter = @ptrCast(@alignCast(obj.?));
    const x = it.task;
    it.task = null;
    py.xdecref(x);
    return 0;
}

fn iterSelf(obj: ?*Object) callconv(.c) ?*Object {
    py.incref(obj.?);
    return obj;
}

var iter_methods = [_]c.PyMethodDef{
    .{ .ml_name = "send", .ml_meth = @ptrCast(&iterSend), .ml_flags = c.METH_O, .ml_doc = null },
    std.mem.zeroes(c.PyMethodDef),
};

var iter_slots = [_]c.PyType_Slot{
    .{ .slot = c.Py_tp_dealloc, .pfunc = @ptrCast(@constCast(&iterDealloc)) },
    .{ .slot = c.Py_tp_traverse, .pfunc = @ptrCast(@constCast(&iterTraverse)) },
    .{ .slot = c.Py_tp_clear, .pfunc = @ptrCast(@constCast(&iterClear)) },
    .{ .slot = c.Py_tp_iter, .pfunc = @ptrCast(@constCast(&iterSelf)) },
    .{ .slot = c.Py_tp_iternext, .pfunc = @ptrCast(@constCast(&iterNext)) },
    .{ .slot = c.Py_tp_methods, .pfunc = @ptrCast(&iter_methods) },
    .{ .slot = 0, .pfunc = null },
};

var iter_spec = c.PyType_Spec{
    .name = "zigcorn._core.TaskIter",
    .basicsize = @sizeOf(TaskIter),
    .itemsize = 0,
    .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_HAVE_GC,
    .slots = &iter_slots,
};

// --- attributes asyncio's own code reads -----------------------------------------

/// A bool attribute's value set from Python: its truth, or null with the exception set
/// (deleting it is refused).
fn truthOf(v: ?*Object) ?bool {
    const x = v orelse {
        _ = py.typeError("cannot delete this attribute");
        return null;
    };
    const truth = c.PyObject_IsTrue(x);
    if (truth < 0) return null;
    return truth == 1;
}

fn getBlocking(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    return py.boolean(asTask(self.?).blocking);
}

fn setBlocking(self: ?*Object, v: ?*Object, _: ?*anyopaque) callconv(.c) c_int {
    asTask(self.?).blocking = truthOf(v) orelse return -1;
    return 0;
}

fn getLogTraceback(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    return py.boolean(asTask(self.?).log_traceback);
}

fn setLogTraceback(self: ?*Object, v: ?*Object, _: ?*anyopaque) callconv(.c) c_int {
    if (truthOf(v) orelse return -1) {
        c.PyErr_SetString(c.PyExc_ValueError, "_log_traceback can only be set to False");
        return -1;
    }
    asTask(self.?).log_traceback = false;
    return 0;
}

fn getLogDestroyPending(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    return py.boolean(asTask(self.?).log_destroy_pending);
}

fn setLogDestroyPending(self: ?*Object, v: ?*Object, _: ?*anyopaque) callconv(.c) c_int {
    asTask(self.?).log_destroy_pending = truthOf(v) orelse return -1;
    return 0;
}

fn getMustCancel(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    return py.boolean(asTask(self.?).must_cancel);
}

fn getState(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    return c.PyUnicode_FromString(switch (asTask(self.?).state) {
        .pending => "PENDING",
        .cancelled => "CANCELLED",
        .finished => "FINISHED",
    });
}

fn getCallbacks(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const t = asTask(self.?);
    const l = c.PyList_New(0) orelse return null;
    if (t.callback0) |cb| {
        const pair = c.PyTuple_Pack(2, cb, t.context0.?) orelse {
            py.decref(l);
            return null;
        };
        defer py.decref(pair);
        if (c.PyList_Append(l, pair) != 0) {
            py.decref(l);
            return null;
        }
    }
    if (t.callbacks) |rest| {
        const n = c.PyList_Size(rest);
        if (c.PyList_SetSlice(l, n + 1, n + 1, rest) != 0) {
            py.decref(l);
            return null;
        }
    }
    return l;
}

fn getNumCancels(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    return c.PyLong_FromSsize_t(asTask(self.?).num_cancels);
}

fn getNone(_: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    return py.none();
}

fn getterOf(comptime field: []const u8) *const fn (?*Object, ?*anyopaque) callconv(.c) ?*Object {
    return &struct {
        fn get(self: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
            const x = @field(asTask(self.?), field) orelse return py.none();
            py.incref(x);
            return x;
        }
    }.get;
}

fn setCancelMsg(self: ?*Object, v: ?*Object, _: ?*anyopaque) callconv(.c) c_int {
    setField(asTask(self.?), "cancel_msg", v);
    return 0;
}

fn getset(comptime name: [:0]const u8, get: anytype, set: anytype) c.PyGetSetDef {
    const none = @TypeOf(set) == @TypeOf(null);
    const setter = if (none) null else @as(c.setter, @ptrCast(@constCast(set)));
    const getter: c.getter = @ptrCast(@constCast(get));
    return .{ .name = name.ptr, .get = getter, .set = setter, .doc = null, .closure = null };
}

var task_getset = [_]c.PyGetSetDef{
    getset("_asyncio_future_blocking", &getBlocking, &setBlocking),
    getset("_log_traceback", &getLogTraceback, &setLogTraceback),
    getset("_log_destroy_pending", &getLogDestroyPending, &setLogDestroyPending),
    getset("_must_cancel", &getMustCancel, null),
    getset("_state", &getState, null),
    getset("_callbacks", &getCallbacks, null),
    getset("_num_cancels_requested", &getNumCancels, null),
    getset("_loop", getterOf("loop"), null),
    getset("_coro", getterOf("coro"), null),
    getset("_context", getterOf("context"), null),
    getset("_fut_waiter", getterOf("fut_waiter"), null),
    getset("_result", getterOf("result"), null),
    getset("_exception", getterOf("exception"), null),
    getset("_cancel_message", getterOf("cancel_msg"), &setCancelMsg),
    getset("_source_traceback", getterOf("source_tb"), null),
    // 3.14's call graph (asyncio.graph) records who awaits a Future or Task of asyncio's
    // own; none is kept for this task, as for any other future-like object.
    getset("_asyncio_awaited_by", &getNone, null),
    std.mem.zeroes(c.PyGetSetDef),
};

const fast_kw = c.METH_FASTCALL | c.METH_KEYWORDS;
const noargs = c.METH_NOARGS;

pub fn method(comptime name: [:0]const u8, f: anytype, flags: c_int) c.PyMethodDef {
    const m: c.PyCFunction = @ptrCast(@constCast(f));
    return .{ .ml_name = name.ptr, .ml_meth = m, .ml_flags = flags, .ml_doc = null };
}

var task_methods = [_]c.PyMethodDef{
    method("result", &mResult, noargs),
    method("exception", &mException, noargs),
    method("done", &mDone, noargs),
    method("cancelled", &mCancelled, noargs),
    method("cancel", &mCancel, c.METH_VARARGS | c.METH_KEYWORDS),
    method("cancelling", &mCancelling, noargs),
    method("uncancel", &mUncancel, noargs),
    method("add_done_callback", &mAddDoneCallback, fast_kw),
    method("remove_done_callback", &mRemoveDoneCallback, c.METH_O),
    method("get_loop", &mGetLoop, noargs),
    method("get_coro", &mGetCoro, noargs),
    method("get_context", &mGetContext, noargs),
    method("get_name", &mGetName, noargs),
    method("set_name", &mSetName, c.METH_O),
    method("set_result", &mSetResult, c.METH_O),
    method("set_exception", &mSetException, c.METH_O),
    method("_make_cancelled_error", &mMakeCancelledError, noargs),
    method("__await__", &taskAwaitMethod, noargs),
    method("_zc_starter", &task.starter, c.METH_O | c.METH_CLASS),
    method("_zc_live", &task.liveTasks, c.METH_NOARGS | c.METH_STATIC),
    method("_zc_native_registry", &task.useRegistry, c.METH_O | c.METH_STATIC),
    std.mem.zeroes(c.PyMethodDef),
};

fn taskAwaitMethod(self: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return taskAwait(self);
}

var task_members = [_]c.PyMemberDef{
    .{
        .name = "__weaklistoffset__",
        .type = c.T_PYSSIZET,
        .offset = @offsetOf(task.TaskObject, "weakreflist"),
        .flags = c.READONLY,
        .doc = null,
    },
    std.mem.zeroes(c.PyMemberDef),
};

var task_slots = [_]c.PyType_Slot{
    .{ .slot = c.Py_tp_new, .pfunc = @ptrCast(@constCast(&task.taskNew)) },
    .{ .slot = c.Py_tp_init, .pfunc = @ptrCast(@constCast(&task.taskInit)) },
    .{ .slot = c.Py_tp_dealloc, .pfunc = @ptrCast(@constCast(&task.taskDealloc)) },
    .{ .slot = c.Py_tp_finalize, .pfunc = @ptrCast(@constCast(&task.taskFinalize)) },
    .{ .slot = c.Py_tp_traverse, .pfunc = @ptrCast(@constCast(&task.taskTraverse)) },
    .{ .slot = c.Py_tp_clear, .pfunc = @ptrCast(@constCast(&task.taskClear)) },
    .{ .slot = c.Py_am_await, .pfunc = @ptrCast(@constCast(&taskAwait)) },
    .{ .slot = c.Py_tp_iter, .pfunc = @ptrCast(@constCast(&taskAwait)) },
    .{ .slot = c.Py_tp_methods, .pfunc = @ptrCast(&task_methods) },
    .{ .slot = c.Py_tp_getset, .pfunc = @ptrCast(&task_getset) },
    .{ .slot = c.Py_tp_members, .pfunc = @ptrCast(&task_members) },
    .{ .slot = 0, .pfunc = null },
};

var task_spec = c.PyType_Spec{
    .name = "zigcorn._core.TaskCore",
    .basicsize = @sizeOf(task.TaskObject),
    .itemsize = 0,
    .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_HAVE_GC | c.Py_TPFLAGS_BASETYPE,
    .slots = &task_slots,
};

/// Adds TaskCore to the module.
pub fn init(m: *Object) bool {
    const it = c.PyType_FromSpec(&iter_spec) orelse return false;
    task.task_iter_type = @ptrCast(it);
    const tt = c.PyType_FromSpec(&task_spec) orelse return false;
    task.task_type = @ptrCast(tt);
    py.incref(tt);
    return c.PyModule_AddObject(m, "TaskCore", tt) == 0;
}
