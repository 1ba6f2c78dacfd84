//! The loop's native `Handle` and `TimerHandle` (asyncio's API: cancel, cancelled,
//! when, get_context, _run, comparisons, hash, repr), each running its callback inside
//! its `contextvars` context, and the freelist that keeps freed ones for reuse.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const py = @import("../python/capi.zig");
const c = py.c;
const Object = py.Object;
const core = @import("core.zig");
const coreOf = core.coreOf;
/// PY_VECTORCALL_ARGUMENTS_OFFSET (a C macro the translation does not carry).
const vectorcall_offset: usize = @as(usize, 1) << (@bitSizeOf(usize) - 1);

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

pub fn asHandle(o: *Object) *HandleObject {
    return @ptrCast(@alignCast(o));
}

pub fn isNativeHandle(o: *Object) bool {
    const t = py.typeOf(o);
    return t == handle_type.? or t == timer_type.?;
}

/// Handles freed are kept for the next ones (as uvloop's and CPython's own freelists
/// do): a handle per callback is the loop's most frequent allocation, and one taken from
/// here costs neither malloc nor a tick of the garbage collector's allocation count.
const handle_freelist_max = 256;
var handle_freelist: Freelist(handle_freelist_max) = .{};

/// A stack of at most `max` freed objects, each kept once, taken last in first out.
fn Freelist(comptime max: usize) type {
    return struct {
        items: [max]*Object = undefined,
        len: usize = 0,

        fn take(self: *@This()) ?*Object {
            assert(self.len <= max);
            if (self.len == 0) return null;
            self.len -= 1;
            return self.items[self.len];
        }

        /// False when full: the caller frees `o` itself.
        fn keep(self: *@This(), o: *Object) bool {
            assert(self.len <= max);
            if (self.len == max) return false;
            // An object kept twice would be handed out twice (O(max): Debug only).
            if (builtin.mode == .Debug) for (self.items[0..self.len]) |x| assert(x != o);
            self.items[self.len] = o;
            self.len += 1;
            return true;
        }
    };
}

/// New handle owning `callback`, its `args`, and `context` (a copy of the current one
/// when null): new references all.
pub fn newHandle(tp: *c.PyTypeObject, loop: *Object, callback: *Object, args: []const ?*Object, context: ?*Object) ?*Object {
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
    assertArgs(h);
    assert(h.callback != null and h.argc == args.len);
    c.PyObject_GC_Track(obj);
    return obj;
}

/// The arguments' shape (set by newHandle, cleared with the callback): none, `arg`
/// alone, or the tuple `args`; runHandle picks the call by `argc` alone.
fn assertArgs(h: *const HandleObject) void {
    assert((h.argc == 1) == (h.arg != null));
    assert((h.argc >= 2) == (h.args != null));
    assert(h.argc == 0 or h.callback != null);
}

/// New reference: a tuple of `items`.
pub fn tupleOf(items: []const ?*Object) ?*Object {
    const t = c.PyTuple_New(@intCast(items.len)) orelse return null;
    for (items, 0..) |x, i| {
        py.incref(x.?);
        _ = c.PyTuple_SetItem(t, @intCast(i), x.?);
    }
    return t;
}

/// An untracked handle object of type `tp` (tracked by the caller once filled).
fn allocHandle(tp: *c.PyTypeObject) ?*Object {
    if (handle_freelist.take()) |obj| return c.PyObject_Init(obj, tp);
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
    assertArgs(h);
    py.xdecref(cb);
    py.xdecref(arg);
    py.xdecref(args);
}

fn handleDealloc(obj: ?*Object) callconv(.c) void {
    const o = obj.?;
    const tp = py.typeOf(o);
    c.PyObject_GC_UnTrack(o);
    _ = handleClear(o);
    // Kept for reuse holding nothing: newHandle fills every field again.
    const h = asHandle(o);
    assert(h.callback == null and h.context == null and h.loop == null and h.argc == 0);
    if (!((tp == handle_type.? or tp == timer_type.?) and handle_freelist.keep(o))) tp.tp_free.?(o);
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
    if (markCancelled(h)) handleClearRefs(h);
    assert(h.cancelled and h.callback == null);
    return py.none();
}

/// cancel()'s change of state, once (false from then on): a timer in the heap counts for
/// the loop's sweep. The caller then drops the callback and its arguments.
pub fn markCancelled(h: *HandleObject) bool {
    if (h.cancelled) return false;
    if (h.scheduled) {
        if (h.loop) |l| coreOf(l).timer_cancelled_count +|= 1;
    }
    h.cancelled = true;
    return true;
}

/// A timer enters the heap (true) or leaves it (false): once each way, as only the
/// loop's heap moves native timers (one push each, from call_later/call_at).
pub fn markScheduled(h: *HandleObject, v: bool) void {
    assert(h.scheduled != v);
    h.scheduled = v;
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
pub fn runHandle(obj: *Object) bool {
    const h = asHandle(obj);
    const cb = h.callback orelse return true;
    const ctx = h.context orelse return true;
    assertArgs(h);
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
pub fn fetchException() ?*Object {
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
pub fn argsTuple(h: *HandleObject) ?*Object {
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
// Tests (no interpreter: the handles are zeroed structs, never handed to Python).

const testing = std.testing;

test "the freelist hands back the last one freed first and keeps at most its size" {
    var objs: [5]HandleObject = undefined;
    for (&objs) |*h| h.* = std.mem.zeroes(HandleObject);
    var fl: Freelist(3) = .{};
    try testing.expect(fl.take() == null);
    for (objs[0..3]) |*h| try testing.expect(fl.keep(&h.ob_base));
    // Full: the caller frees the next one itself.
    try testing.expect(!fl.keep(&objs[3].ob_base));
    try testing.expectEqual(&objs[2].ob_base, fl.take().?);
    try testing.expect(fl.keep(&objs[4].ob_base)); // room again
    try testing.expectEqual(&objs[4].ob_base, fl.take().?);
    try testing.expectEqual(&objs[1].ob_base, fl.take().?);
    try testing.expectEqual(&objs[0].ob_base, fl.take().?);
    try testing.expect(fl.take() == null);
    try testing.expectEqual(@as(usize, 0), fl.len);
}

test "cancel is one way and counts for the sweep only while the timer is in the heap" {
    var lc = core.Core{};
    var lo = core.LoopObject{ .ob_base = std.mem.zeroes(Object), .core = &lc };
    var t = std.mem.zeroes(HandleObject);
    t.loop = &lo.ob_base;
    // In the heap: counted, once.
    markScheduled(&t, true);
    try testing.expect(markCancelled(&t));
    try testing.expect(!markCancelled(&t));
    try testing.expectEqual(@as(isize, 1), lc.timer_cancelled_count);
    markScheduled(&t, false);
    // Out of the heap (ready, or run): not counted.
    var h = std.mem.zeroes(HandleObject);
    h.loop = &lo.ob_base;
    try testing.expect(markCancelled(&h));
    try testing.expectEqual(@as(isize, 1), lc.timer_cancelled_count);
    // No loop (cleared by the collector): nothing to count, still cancelled.
    var orphan = std.mem.zeroes(HandleObject);
    orphan.scheduled = true;
    try testing.expect(markCancelled(&orphan) and orphan.cancelled);
    // The count saturates (asyncio's `_timer_cancelled_count` is writable).
    lc.timer_cancelled_count = std.math.maxInt(isize);
    var last = std.mem.zeroes(HandleObject);
    last.loop = &lo.ob_base;
    last.scheduled = true;
    try testing.expect(markCancelled(&last));
    try testing.expectEqual(@as(isize, std.math.maxInt(isize)), lc.timer_cancelled_count);
}
