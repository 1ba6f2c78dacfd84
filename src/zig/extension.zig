//! The seam between the engine and Python: the `zigcorn._core` module.
//!
//! `Engine` wraps a Server; Python watches `engine.fileno()` with one `add_reader` and
//! calls `engine.poll()`. `Stream` is one request and its response: the Python side
//! subclasses it (adding the async `receive`/`send` an app sees) and the engine creates
//! one instance per request, hands it to `on_request`, and forgets it when `finish()`
//! is called. No Python object lives as long as an idle connection.
const std = @import("std");
const py = @import("python/capi.zig");
const c = py.c;
const Object = py.Object;
const scope = @import("python/scope.zig");
const metrics = @import("features/metrics.zig");
const sys = @import("os/sys.zig");
const engine_mod = @import("python/engine.zig");
const pystream = @import("python/stream_type.zig");
const tls_setup = @import("python/tls_context.zig");
const options = @import("python/options.zig");
const udp_steering = @import("transport/udp_steering.zig");

/// A panic (a failed safety check or assertion) kills the worker, as the standard handler
/// would, but writes only the message and the addresses of the panic and its caller as
/// offsets into this library (`addr2line -f -e _core*.so 0x...` names them): the standard
/// handler symbolizes a stack trace from DWARF in the process, which links some 120 KiB of
/// unwinding and line-table code into the engine, mapped into every worker.
pub const panic = std.debug.FullPanic(enginePanic);

fn enginePanic(msg: []const u8, first_trace_addr: ?usize) noreturn {
    @branchHint(.cold);
    var buf: [1024]u8 = undefined;
    const base = libraryBase();
    const at = first_trace_addr orelse @returnAddress();
    const line = std.fmt.bufPrint(&buf, "zigcorn engine panic: {s}\n  at _core+0x{x} (caller _core+0x{x})\n", .{
        msg, at -% base, @returnAddress() -% base,
    }) catch msg;
    _ = std.posix.system.write(2, line.ptr, line.len);
    std.posix.abort();
}

const DlInfo = extern struct {
    fname: ?[*:0]const u8,
    fbase: ?*anyopaque,
    sname: ?[*:0]const u8,
    saddr: ?*anyopaque,
};
extern "c" fn dladdr(addr: ?*const anyopaque, info: *DlInfo) c_int;

/// Where the dynamic loader put this library: the base the offsets above are taken from.
fn libraryBase() usize {
    var info: DlInfo = undefined;
    if (dladdr(@ptrCast(&enginePanic), &info) == 0) return 0;
    return @intFromPtr(info.fbase);
}

/// set_parent_death_signal(signum): the kernel sends signum to this process when its
/// parent exits, so workers never outlive a master that was SIGKILLed.
fn setParentDeathSignal(_: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const signum = c.PyLong_AsLong(arg);
    if (signum == -1 and c.PyErr_Occurred() != null) return null;
    if (signum < 0 or signum > 64) return py.typeError("signal number out of range");
    const rc = std.os.linux.prctl(@intFromEnum(std.os.linux.PR.SET_PDEATHSIG), @intCast(signum), 0, 0, 0);
    if (rc != 0) {
        c.PyErr_SetString(c.PyExc_OSError, "prctl(PR_SET_PDEATHSIG) failed");
        return null;
    }
    return py.none();
}

/// metrics_init(slots, options): map the shared counters; the master calls it before
/// forking, with the engine options (their `metrics_buckets`).
fn metricsInit(_: ?*Object, args: [*c]const ?*Object, nargs: c.Py_ssize_t) callconv(.c) ?*Object {
    if (nargs != 2) return py.typeError("metrics_init(slots, options)");
    const n = c.PyLong_AsLong(args[0]);
    if (n == -1 and c.PyErr_Occurred() != null) return null;
    if (n < 1 or n > metrics.slots_max) return py.typeError("slots must be 1..2048");
    var bounds: [metrics.buckets_max]u64 = undefined;
    const count = options.bucketBounds(args[1].?, &bounds) orelse return null;
    metrics.init(@intCast(n), bounds[0..count]) catch {
        c.PyErr_SetString(c.PyExc_OSError, "could not map the metrics counters");
        return null;
    };
    return py.none();
}

/// metrics_retire(slot, restarted): a worker exited; its gauges stop counting.
fn metricsRetire(_: ?*Object, args: [*c]const ?*Object, nargs: c.Py_ssize_t) callconv(.c) ?*Object {
    if (nargs != 2) return py.typeError("metrics_retire(slot, restarted)");
    const index = c.PyLong_AsLong(args[0]);
    if (index == -1 and c.PyErr_Occurred() != null) return null;
    const restarted = c.PyObject_IsTrue(args[1]);
    if (restarted < 0) return null;
    if (index >= 0) metrics.retire(@intCast(index), restarted != 0);
    return py.none();
}

/// trim_memory(): hand the C heap's free pages back to the OS (glibc's malloc_trim).
/// Called once the server is up: imports and startup leave freed memory behind.
fn trimMemory(_: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    sys.trimHeap();
    return py.none();
}

/// quic_steer(fd, workers): attach the steering program (`transport/udp_steering.zig`) to
/// the SO_REUSEPORT group of UDP socket `fd`, so each datagram reaches the worker its
/// connection ID names. The group's sockets must be bound in worker order.
fn quicSteer(_: ?*Object, args: [*c]const ?*Object, nargs: c.Py_ssize_t) callconv(.c) ?*Object {
    if (nargs != 2) return py.typeError("quic_steer(fd, workers)");
    const fd = c.PyLong_AsLong(args[0]);
    if (fd == -1 and c.PyErr_Occurred() != null) return null;
    const workers = c.PyLong_AsLong(args[1]);
    if (workers == -1 and c.PyErr_Occurred() != null) return null;
    if (fd < 0 or fd > std.math.maxInt(i32)) return valueError("quic_steer: fd out of range");
    if (workers < 1 or workers > udp_steering.workers_max) return valueError("quic_steer: workers must be 1..256");
    switch (udp_steering.attach(@intCast(fd), @intCast(workers))) {
        .ok => return py.none(),
        .err => |e| {
            _ = c.PyErr_Format(c.PyExc_OSError, "SO_ATTACH_REUSEPORT_CBPF failed: %s", @tagName(e).ptr);
            return null;
        },
    }
}

fn valueError(msg: [*:0]const u8) ?*Object {
    c.PyErr_SetString(c.PyExc_ValueError, msg);
    return null;
}

var module_methods = [_]c.PyMethodDef{
    .{ .ml_name = "quic_steer", .ml_meth = @ptrCast(&quicSteer), .ml_flags = c.METH_FASTCALL, .ml_doc = "Steer a UDP SO_REUSEPORT group's datagrams to the worker each QUIC connection ID names." },
    .{ .ml_name = "trim_memory", .ml_meth = @ptrCast(&trimMemory), .ml_flags = c.METH_NOARGS, .ml_doc = "Return the C heap's free pages to the OS (malloc_trim)." },
    .{ .ml_name = "metrics_init", .ml_meth = @ptrCast(&metricsInit), .ml_flags = c.METH_FASTCALL, .ml_doc = "Map the shared metrics counters (before forking workers)." },
    .{ .ml_name = "metrics_retire", .ml_meth = @ptrCast(&metricsRetire), .ml_flags = c.METH_FASTCALL, .ml_doc = "A worker's slot stops counting gauges." },
    .{ .ml_name = "set_parent_death_signal", .ml_meth = @ptrCast(&setParentDeathSignal), .ml_flags = c.METH_O, .ml_doc = "Have the kernel signal this process when its parent dies." },
    .{ .ml_name = "tls_load", .ml_meth = @ptrCast(&tls_setup.moduleTlsLoad), .ml_flags = c.METH_O, .ml_doc = "Load OpenSSL 3 from this library; returns its version." },
    .{ .ml_name = "tls_loaded", .ml_meth = @ptrCast(&tls_setup.moduleTlsLoaded), .ml_flags = c.METH_NOARGS, .ml_doc = "Whether OpenSSL was loaded." },
    std.mem.zeroes(c.PyMethodDef),
};

/// Multi-phase initialisation (PEP 489): `PyInit__core` hands back the definition and
/// `moduleExec` fills the module, so the module can carry the slots newer CPythons read:
/// - `Py_mod_multiple_interpreters` (3.12+): not supported. The engine keeps its types,
///   interned names and freelists in globals, so it belongs to one interpreter;
/// - `Py_mod_gil` (3.13+): the GIL is used. The engine is not thread-safe without it
///   (module-level scratch buffers, unlocked freelists, borrowed references held across
///   calls): a free-threaded CPython keeps the GIL on while this module is loaded;
/// - `Py_mod_abi` (3.15+): the ABI this was compiled for (version, GIL or free-threaded),
///   checked by the interpreter before anything runs, so a build loaded into the wrong
///   kind of interpreter is refused with an error rather than crashing.
const slot_count: usize = 2 + @as(usize, @intFromBool(@hasDecl(c, "Py_mod_multiple_interpreters"))) +
    @intFromBool(@hasDecl(c, "Py_mod_gil")) + @intFromBool(@hasDecl(c, "Py_mod_abi"));

var abi_info = if (@hasDecl(c, "Py_mod_abi")) c.PyABIInfo{
    .abiinfo_major_version = 1,
    .abiinfo_minor_version = 0,
    .flags = if (@hasDecl(c, "Py_GIL_DISABLED")) c.PyABIInfo_FREETHREADED else c.PyABIInfo_GIL,
    .build_version = c.PY_VERSION_HEX,
    .abi_version = c.PY_VERSION_HEX,
} else {};

var module_slots: [slot_count]c.PyModuleDef_Slot = blk: {
    var slots: [slot_count]c.PyModuleDef_Slot = undefined;
    var i: usize = 0;
    if (@hasDecl(c, "Py_mod_abi")) {
        slots[i] = .{ .slot = c.Py_mod_abi, .value = @ptrCast(&abi_info) };
        i += 1;
    }
    slots[i] = .{ .slot = c.Py_mod_exec, .value = @ptrCast(@constCast(&moduleExec)) };
    i += 1;
    if (@hasDecl(c, "Py_mod_multiple_interpreters")) {
        // Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED, ((void *)0) in moduleobject.h.
        slots[i] = .{ .slot = c.Py_mod_multiple_interpreters, .value = null };
        i += 1;
    }
    if (@hasDecl(c, "Py_mod_gil")) {
        // Py_MOD_GIL_USED, ((void *)0) in moduleobject.h.
        slots[i] = .{ .slot = c.Py_mod_gil, .value = null };
        i += 1;
    }
    slots[i] = .{ .slot = 0, .value = null };
    break :blk slots;
};

var module_def: c.PyModuleDef = std.mem.zeroes(c.PyModuleDef);

/// The first module's namespace: the engine's globals (its types, interned names) are
/// made once per process, so a module made again (after `del sys.modules[...]`) gets
/// the same objects, as a single-phase module's copied namespace did.
var first_namespace: ?*Object = null;

export fn PyInit__core() ?*Object {
    // PyModuleDef_HEAD_INIT (a C initialiser the translation does not carry): the
    // definition is a static object handed to the import machinery, whose refcount is
    // the object's first word on every supported version (3.12 wraps it in an anonymous
    // union). It must never reach zero: a count in the immortal range of 3.12+ (a
    // negative 32-bit value), which 3.11 just counts from.
    @as(*c.Py_ssize_t, @ptrCast(&module_def.m_base.ob_base)).* = 0xC000_0000;
    module_def.m_name = "zigcorn._core";
    module_def.m_doc = "The zigcorn engine: sockets, epoll, HTTP/1.1 parsing and framing.";
    module_def.m_size = 0;
    module_def.m_methods = &module_methods;
    module_def.m_slots = &module_slots;
    return c.PyModuleDef_Init(&module_def);
}

fn moduleExec(m_opt: ?*Object) callconv(.c) c_int {
    const m = m_opt.?;
    const ns = c.PyModule_GetDict(m) orelse return -1;
    if (first_namespace) |first| return c.PyDict_Merge(ns, first, 0);
    if (!scope.init()) return -1;
    if (!@import("python/environ.zig").init()) return -1;
    const st = c.PyType_FromSpec(&pystream.stream_spec) orelse return -1;
    pystream.stream_type = @ptrCast(st);
    if (c.PyModule_AddObject(m, "Stream", st) != 0) return -1;
    py.incref(st);
    const et = c.PyType_FromSpec(&engine_mod.engine_spec) orelse return -1;
    engine_mod.engine_type = @ptrCast(et);
    if (c.PyModule_AddObject(m, "Engine", et) != 0) return -1;
    if (!addLimits(m)) return -1;
    if (!@import("loop/core.zig").init(m)) return -1;
    if (!@import("loop/task.zig").init(m)) return -1;
    py.incref(ns);
    first_namespace = ns;
    return 0;
}

/// `LIMITS`, {name: (low, high)}, `MAXIMA`, {name: most}, and `OPTIONS`, {name: when}:
/// the engine's own bounds of its options and every option it reads (`python/options.zig`
/// `specs` and `maxima`, which its checks read), which `Config` takes its bounds from and
/// the settings table is checked against, so the two can never disagree.
fn addLimits(m: *Object) bool {
    const limits = c.PyDict_New() orelse return false;
    const known = c.PyDict_New() orelse return dropDict(limits);
    for (options.specs) |s| {
        if (!setItemSteal(known, s.name, py.str(@tagName(s.when)))) return dropDict(limits);
        if (s.when == .plumbing or (s.low == 0 and s.high == 0)) continue;
        const t = c.Py_BuildValue("(LL)", @as(c_longlong, s.low), @as(c_longlong, s.high));
        if (!setItemSteal(limits, s.name, t)) return dropDict(known);
    }
    if (c.PyModule_AddObject(m, "LIMITS", limits) != 0) {
        _ = dropDict(known);
        return dropDict(limits);
    }
    if (c.PyModule_AddObject(m, "OPTIONS", known) != 0) return dropDict(known);
    const maxima = c.PyDict_New() orelse return false;
    for (options.maxima) |x| {
        if (!setItemSteal(maxima, x.name, c.PyLong_FromLongLong(x.most))) return false;
    }
    if (c.PyModule_AddObject(m, "MAXIMA", maxima) != 0) return dropDict(maxima);
    return true;
}

/// d[key] = value, taking `value`'s reference; on failure `d` is dropped too.
fn setItemSteal(d: *Object, key: [:0]const u8, value: ?*Object) bool {
    const v = value orelse return dropDict(d);
    defer py.decref(v);
    if (c.PyDict_SetItemString(d, key.ptr, v) != 0) return dropDict(d);
    return true;
}

fn dropDict(d: *Object) bool {
    py.decref(d);
    return false;
}
