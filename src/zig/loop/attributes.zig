//! The loop's attributes that asyncio's own Python code reads and writes (`_ready`,
//! `_scheduled`, `_closed`, `_stopping`, `_debug`, `_timer_cancelled_count`,
//! `_task_factory`, `_thread_id`): getters and setters over the native `Core`.
const std = @import("std");
const py = @import("../python/capi.zig");
const c = py.c;
const Object = py.Object;
const core_mod = @import("core.zig");
const coreOf = core_mod.coreOf;
const setRef = core_mod.setRef;

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

pub var loop_getset = [_]c.PyGetSetDef{
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
