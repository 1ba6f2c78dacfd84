//! The CPython C API as the engine uses it, plus the few helpers that keep
//! reference ownership explicit: every function here says whether it returns a new
//! reference, and `steal` variants consume the reference they are given.
const std = @import("std");
pub const c = @cImport({
    @cDefine("PY_SSIZE_T_CLEAN", "1");
    @cInclude("Python.h");
    @cInclude("structmember.h");
});

pub const Object = c.PyObject;

// The GIL, released and taken back. Declared here rather than through the C import:
// on 3.12+ PyThreadState has bitfields, which the C translation cannot size.
extern fn PyEval_SaveThread() ?*anyopaque;
extern fn PyEval_RestoreThread(state: ?*anyopaque) void;

/// Releases the GIL; hand the result to `takeGil`. No Python API in between.
pub fn releaseGil() ?*anyopaque {
    return PyEval_SaveThread();
}

pub fn takeGil(state: ?*anyopaque) void {
    PyEval_RestoreThread(state);
}

pub inline fn incref(o: *Object) void {
    c.Py_IncRef(o);
}

pub inline fn decref(o: *Object) void {
    c.Py_DecRef(o);
}

pub inline fn xdecref(o: ?*Object) void {
    if (o) |p| c.Py_DecRef(p);
}

/// New reference to None.
pub fn none() *Object {
    const n: *Object = @ptrCast(&c._Py_NoneStruct);
    incref(n);
    return n;
}

/// None, borrowed (for argument arrays).
pub fn borrowedNone() *Object {
    return @ptrCast(&c._Py_NoneStruct);
}

/// New reference to NotImplemented.
pub fn notImplemented() *Object {
    const n: *Object = @ptrCast(&c._Py_NotImplementedStruct);
    incref(n);
    return n;
}

/// False, borrowed (for a setattr's value).
pub fn borrowedFalse() *Object {
    return @ptrCast(&c._Py_FalseStruct);
}

pub fn isNone(o: *Object) bool {
    return o == @as(*Object, @ptrCast(&c._Py_NoneStruct));
}

/// New reference to True or False.
pub fn boolean(v: bool) *Object {
    return c.PyBool_FromLong(@intFromBool(v));
}

pub fn isTrue(o: *Object) bool {
    return o == @as(*Object, @ptrCast(&c._Py_TrueStruct));
}

/// Sets `key` to `value` and drops the caller's reference to value. False on error
/// (value is released either way, so callers can build with no cleanup path).
pub fn dictSetSteal(d: *Object, key: *Object, value: ?*Object) bool {
    const v = value orelse return false;
    defer decref(v);
    return c.PyDict_SetItem(d, key, v) == 0;
}

/// New reference: an interned str that lives as long as the module.
pub fn intern(comptime s: [:0]const u8) ?*Object {
    return c.PyUnicode_InternFromString(s.ptr);
}

pub fn bytes(s: []const u8) ?*Object {
    return c.PyBytes_FromStringAndSize(s.ptr, @intCast(s.len));
}

pub fn str(s: []const u8) ?*Object {
    return c.PyUnicode_FromStringAndSize(s.ptr, @intCast(s.len));
}

pub fn typeOf(o: *Object) *c.PyTypeObject {
    return @ptrCast(o.ob_type);
}

pub fn setError(exc: ?*Object, comptime msg: [:0]const u8) void {
    c.PyErr_SetString(exc, msg.ptr);
}

pub fn runtimeError(comptime msg: [:0]const u8) ?*Object {
    setError(c.PyExc_RuntimeError, msg);
    return null;
}

pub fn typeError(comptime msg: [:0]const u8) ?*Object {
    setError(c.PyExc_TypeError, msg);
    return null;
}

/// The bytes of a bytes object (borrowed; valid while the object lives).
pub fn bytesView(o: *Object) ?[]const u8 {
    if (c.PyBytes_Check(o) == 0) return null;
    const ptr = c.PyBytes_AsString(o) orelse return null;
    const len: usize = @intCast(c.PyBytes_Size(o));
    return @as([*]const u8, @ptrCast(ptr))[0..len];
}

/// The UTF-8 of a str (borrowed; cached inside the str object).
pub fn strView(o: *Object) ?[]const u8 {
    var len: c.Py_ssize_t = 0;
    const ptr = c.PyUnicode_AsUTF8AndSize(o, &len) orelse return null;
    return @as([*]const u8, @ptrCast(ptr))[0..@intCast(len)];
}

/// The items of a PySequence_Fast result (borrowed). The C macro does not translate.
/// An empty list's item pointer is NULL, hence the C pointer.
pub fn seqItems(seq: *Object) [*c]?*Object {
    if (c.PyList_Check(seq) != 0) {
        const l: *c.PyListObject = @ptrCast(@alignCast(seq));
        return @ptrCast(l.ob_item);
    }
    const t: *c.PyTupleObject = @ptrCast(@alignCast(seq));
    return @ptrCast(&t.ob_item);
}

/// An object's reference count (Py_REFCNT: a field in 3.11, in a union from 3.12 on).
pub inline fn refCount(o: *Object) isize {
    return c.Py_REFCNT(o);
}

/// PyTuple_SET_ITEM (the macro does not translate): `o` is stolen into empty slot `i`
/// of a tuple just made, without the call and checks of PyTuple_SetItem.
pub inline fn tupleInit(t: *Object, i: usize, o: *Object) void {
    const tuple: *c.PyTupleObject = @ptrCast(@alignCast(t));
    std.debug.assert(i < @as(usize, @intCast(tuple.ob_base.ob_size)));
    const items: [*]?*Object = @ptrCast(&tuple.ob_item);
    std.debug.assert(items[i] == null);
    items[i] = o;
}

/// PyList_SET_ITEM, as `tupleInit` for a list just made by PyList_New.
pub inline fn listInit(l: *Object, i: usize, o: *Object) void {
    const list: *c.PyListObject = @ptrCast(@alignCast(l));
    std.debug.assert(i < @as(usize, @intCast(list.ob_base.ob_size)));
    const items: [*]?*Object = @ptrCast(list.ob_item);
    std.debug.assert(items[i] == null);
    items[i] = o;
}

pub fn seqLen(seq: *Object) usize {
    return @intCast(c.PySequence_Size(seq));
}
