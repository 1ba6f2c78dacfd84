//! The `Engine` Python type: one Server (sockets, epoll, connections) driven by the
//! asyncio loop. Python watches `fileno()` with one `add_reader` and calls `poll()`.
const std = @import("std");
const py = @import("capi.zig");
const c = py.c;
const Object = py.Object;
const server_mod = @import("../core/server.zig");
const wiring = @import("../server/wiring.zig"); // each protocol's verbs, handed to the server
const Server = server_mod.Server;
const scope = @import("scope.zig");
const options = @import("options.zig");
const tls_setup = @import("tls_context.zig");
const pystream = @import("stream_type.zig");

const allocator = std.heap.c_allocator;

pub const EngineObject = extern struct {
    ob_base: Object,
    core: ?*EngineObjectCore,
};

/// The Zig-typed part of an Engine object (an extern struct cannot hold Zig types).
pub const EngineObjectCore = struct {
    obj: *Object,
    server: ?*Server = null,
    on_request: ?*Object = null,
    wake: ?*Object = null,
    /// The loop's call_soon, for the busy poll (options["call_soon"]); may be null.
    call_soon: ?*Object = null,
    stream_class: ?*c.PyTypeObject = null,
    /// The stream class for WebSocket upgrades (options["websocket_class"]).
    ws_class: ?*c.PyTypeObject = null,
    /// options["websocket_class"] given as a callable that returns the class: called at the
    /// first upgrade (then dropped), so a server that never sees a WebSocket never imports
    /// the module that defines it.
    ws_class_loader: ?*Object = null,
    /// WSGI (`--interface wsgi`): the environ template (python/environ.zig); each request
    /// gets an environ built from it instead of an ASGI scope. Null for ASGI.
    wsgi_environ: ?*Object = null,
    info: scope.ServerInfo = .{ .server = null, .root_path = null, .root_path_utf8 = "", .scheme = null, .state = null },
    extra_headers: [][2][]const u8 = &.{},
    extra_storage: ?*Object = null,
    close_requested: bool = false,
    /// Attached to zigcorn's own loop: `settle` runs at the end of its pass, not via call_soon.
    loop_driven: bool = false,
    trust: @import("../features/forwarded.zig").Trust = .{},
    /// str objects whose UTF-8 the server's ops paths point into.
    metrics_path: ?*Object = null,
    health_path: ?*Object = null,
    ready_path: ?*Object = null,
    /// --request-id-header (a lower-case str), held while the server runs.
    request_id_header: ?*Object = null,
    /// --static mounts (python/options.zig `setStatic`), freed after the server.
    static_cfg: ?*@import("../server/static_files.zig").Config = null,
    /// --hsts's header value (a str), held while the server runs.
    hsts: ?*Object = null,
    /// --compression-types (a str), held while the server runs.
    compression_types: ?*Object = null,

    pub fn extraHeaders(self: *EngineObjectCore) []const [2][]const u8 {
        return self.extra_headers;
    }
};

pub fn asEngine(o: ?*Object) *EngineObjectCore {
    const e: *EngineObject = @ptrCast(@alignCast(o.?));
    return e.core.?;
}

/// close() waits for the last stream: each points at a connection the server owns.
pub fn closeIfDone(engine: *EngineObjectCore) void {
    const s = engine.server orelse return;
    if (!engine.close_requested or s.streams != 0) return;
    engine.server = null;
    s.deinit();
}

/// The Python side's callables and stream classes, held by the engine. False with a
/// TypeError when a class is not a Stream (or WebSockets are on without a class for them).
fn takeCallables(self: *EngineObjectCore, on_request: *Object, wake: *Object, cls: *Object, opts: *Object, ws_enabled: bool) bool {
    py.incref(on_request);
    self.on_request = on_request;
    py.incref(wake);
    self.wake = wake;
    // The loop's call_soon, for `settle`: absent or None when there is no loop to defer to.
    if (c.PyDict_GetItemString(opts, "call_soon")) |cs| {
        if (!py.isNone(cs)) {
            py.incref(cs);
            self.call_soon = cs;
        }
    }
    py.incref(cls);
    self.stream_class = @ptrCast(cls);
    if (c.PyDict_GetItemString(opts, "wsgi_environ")) |env| {
        if (!py.isNone(env)) {
            if (c.PyDict_Check(env) == 0) {
                _ = py.typeError("wsgi_environ must be a dict");
                return false;
            }
            py.incref(env);
            self.wsgi_environ = env;
        }
    }
    const wcls = c.PyDict_GetItemString(opts, "websocket_class") orelse {
        if (!ws_enabled) return true;
        _ = py.typeError("ws is on: websocket_class must be given");
        return false;
    };
    if (c.PyType_Check(wcls) == 0 and c.PyCallable_Check(wcls) != 0) {
        py.incref(wcls);
        self.ws_class_loader = wcls;
        return true;
    }
    if (!isStreamSubclass(wcls)) {
        _ = py.typeError("websocket_class must subclass zigcorn._core.Stream (or be a callable returning one)");
        return false;
    }
    py.incref(wcls);
    self.ws_class = @ptrCast(wcls);
    return true;
}

fn isStreamSubclass(o: *Object) bool {
    return c.PyType_Check(o) != 0 and c.PyType_IsSubtype(@ptrCast(o), pystream.stream_type) != 0;
}

/// The WebSocket stream class, loaded at the first upgrade when options["websocket_class"]
/// was a loader. Null (with the error reported as unraisable) if the loader fails or
/// returns something else than a Stream subclass: that upgrade is refused.
pub fn webSocketClass(self: *EngineObjectCore) ?*c.PyTypeObject {
    if (self.ws_class) |t| return t;
    const loader = self.ws_class_loader orelse return null;
    const loaded = c.PyObject_CallNoArgs(loader) orelse {
        c.PyErr_WriteUnraisable(loader);
        return null;
    };
    if (!isStreamSubclass(loaded)) {
        py.decref(loaded);
        _ = py.typeError("websocket_class's loader must return a subclass of zigcorn._core.Stream");
        c.PyErr_WriteUnraisable(loader);
        return null;
    }
    self.ws_class = @ptrCast(loaded); // the call's reference is the engine's now
    self.ws_class_loader = null;
    py.decref(loader);
    return self.ws_class;
}

fn engineNew(tp: ?*c.PyTypeObject, args: ?*Object, kwargs: ?*Object) callconv(.c) ?*Object {
    _ = kwargs;
    const a = args.?;
    if (c.PyTuple_Size(a) != 4) return py.typeError("Engine(on_request, wake, stream_class, options)");
    const on_request = c.PyTuple_GetItem(a, 0).?;
    const wake = c.PyTuple_GetItem(a, 1).?;
    const cls = c.PyTuple_GetItem(a, 2).?;
    const opts = c.PyTuple_GetItem(a, 3).?;
    if (c.PyType_Check(cls) == 0 or c.PyType_IsSubtype(@ptrCast(cls), pystream.stream_type) == 0)
        return py.typeError("stream_class must subclass zigcorn._core.Stream");
    if (c.PyDict_Check(opts) == 0) return py.typeError("options must be a dict");

    var opts_full = options.serverOptions(opts) orelse return null;
    const alloc_fn = tp.?.tp_alloc.?;
    const obj = alloc_fn(tp, 0) orelse return null;
    const eo: *EngineObject = @ptrCast(@alignCast(obj));
    const self = allocator.create(EngineObjectCore) catch {
        py.decref(obj);
        return c.PyErr_NoMemory();
    };
    self.* = .{ .obj = obj };
    eo.core = self;
    if (!takeCallables(self, on_request, wake, cls, opts, opts_full.ws_enabled)) {
        py.decref(obj);
        return null;
    }
    if (!options.setServerInfo(self, opts) or !options.setExtraHeaders(self, opts) or !options.setTrust(self, opts) or !options.setOps(self, opts, &opts_full) or !options.setTracing(self, opts, &opts_full) or !options.setEdge(self, opts, &opts_full) or !options.setCompression(self, opts, &opts_full) or !options.setStatic(self, opts, &opts_full) or !options.setHttp3(opts, &opts_full)) {
        py.decref(obj);
        return null;
    }
    const hooks = server_mod.Hooks{
        .ctx = self,
        .on_request = pystream.hookOnRequest,
        .wake_read = pystream.hookWakeRead,
        .wake_write = pystream.hookWakeWrite,
        .retain_fn = pystream.hookRetain,
        .release_fn = pystream.hookRelease,
        .on_settle = pystream.hookOnSettle,
        .pass_soon = pystream.hookPassSoon,
        .log = pystream.hookLog,
    };
    self.server = Server.init(allocator, hooks, opts_full, &wiring.verbs) catch {
        py.decref(obj);
        c.PyErr_SetString(c.PyExc_OSError, "could not create the event source (epoll, timerfd, eventfd)");
        return null;
    };
    if (!tls_setup.setTls(self, opts)) {
        py.decref(obj);
        return null;
    }
    return obj;
}

fn engineDealloc(obj: ?*Object) callconv(.c) void {
    const eo: *EngineObject = @ptrCast(@alignCast(obj.?));
    const tp = py.typeOf(obj.?);
    c.PyObject_GC_UnTrack(obj);
    if (eo.core) |self| {
        if (self.server) |s| {
            self.server = null;
            s.deinit();
        }
        _ = engineClear(obj);
        if (self.extra_headers.len > 0) allocator.free(self.extra_headers);
        py.xdecref(self.info.root_path);
        py.xdecref(self.info.scheme);
        py.xdecref(self.info.server);
        py.xdecref(self.info.tls_server_cert);
        py.xdecref(self.extra_storage);
        py.xdecref(self.metrics_path);
        py.xdecref(self.health_path);
        py.xdecref(self.ready_path);
        py.xdecref(self.request_id_header);
        options.freeStatic(self);
        py.xdecref(self.hsts);
        py.xdecref(self.compression_types);
        eo.core = null;
        allocator.destroy(self);
    }
    tp.tp_free.?(obj);
    py.decref(@ptrCast(tp));
}

fn engineTraverse(obj: ?*Object, visit: c.visitproc, arg: ?*anyopaque) callconv(.c) c_int {
    const v = visit.?;
    const eo: *EngineObject = @ptrCast(@alignCast(obj.?));
    const self = eo.core orelse return v(@ptrCast(py.typeOf(obj.?)), arg);
    inline for (.{ "on_request", "wake", "call_soon", "wsgi_environ", "ws_class_loader" }) |f| {
        if (@field(self, f)) |o| {
            const r = v(o, arg);
            if (r != 0) return r;
        }
    }
    if (self.stream_class) |t| {
        const r = v(@ptrCast(t), arg);
        if (r != 0) return r;
    }
    if (self.ws_class) |t| {
        const r = v(@ptrCast(t), arg);
        if (r != 0) return r;
    }
    if (self.info.state) |s| {
        const r = v(s, arg);
        if (r != 0) return r;
    }
    return v(@ptrCast(py.typeOf(obj.?)), arg);
}

fn engineClear(obj: ?*Object) callconv(.c) c_int {
    const eo: *EngineObject = @ptrCast(@alignCast(obj.?));
    const self = eo.core orelse return 0;
    const a = self.on_request;
    const b = self.wake;
    const cs = self.call_soon;
    self.call_soon = null;
    py.xdecref(cs);
    const env = self.wsgi_environ;
    self.wsgi_environ = null;
    py.xdecref(env);
    const loader = self.ws_class_loader;
    self.ws_class_loader = null;
    py.xdecref(loader);
    const t = self.stream_class;
    const wt = self.ws_class;
    const s = self.info.state;
    self.on_request = null;
    self.wake = null;
    self.stream_class = null;
    self.ws_class = null;
    if (wt) |tt| py.decref(@ptrCast(tt));
    self.info.state = null;
    py.xdecref(a);
    py.xdecref(b);
    if (t) |tt| py.decref(@ptrCast(tt));
    py.xdecref(s);
    return 0;
}

fn serverOf(obj: ?*Object) ?*Server {
    const s = asEngine(obj).server;
    if (s == null) _ = py.runtimeError("the engine is closed");
    return s;
}

/// adopt(fd: int) -> (host, port) or None: serve a socket that is already listening
/// (bound by the Python side, inherited, or from systemd). The engine owns fd after this.
fn engineAdopt(obj: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    const fd = c.PyLong_AsLong(arg);
    if (fd == -1 and c.PyErr_Occurred() != null) return null;
    server.adopt(@intCast(fd)) catch |err| {
        if (err == error.SocketOption) {
            var buf: [96]u8 = undefined;
            const msg = std.fmt.bufPrintZ(&buf, "the kernel refused {s} on the listening socket", .{server.refused_option}) catch unreachable;
            c.PyErr_SetString(c.PyExc_OSError, msg.ptr);
        } else c.PyErr_SetString(c.PyExc_OSError, "could not watch the given socket");
        return null;
    };
    return boundAddress(obj.?, server);
}

fn boundAddress(obj: *Object, server: *Server) ?*Object {
    const linux = std.os.linux;
    var st: linux.sockaddr.storage = undefined;
    var len: linux.socklen_t = @sizeOf(linux.sockaddr.storage);
    if (linux.getsockname(server.listen_fd, @ptrCast(&st), &len) != 0) return py.none();
    const peer = @import("../core/connection.zig").Peer.fromStorage(&st);
    const self = asEngine(obj);
    if (peer.family != linux.AF.INET and peer.family != linux.AF.INET6) {
        // A Unix socket: like uvicorn, the scope's `server` is None.
        py.xdecref(self.info.server);
        self.info.server = py.none();
        return py.none();
    }
    var buf: [64]u8 = undefined;
    const host = peer.format(&buf);
    const t = c.PyTuple_New(2) orelse return null;
    _ = c.PyTuple_SetItem(t, 0, py.str(host) orelse {
        py.decref(t);
        return null;
    });
    _ = c.PyTuple_SetItem(t, 1, c.PyLong_FromLong(peer.port));
    py.xdecref(self.info.server);
    py.incref(t);
    self.info.server = t;
    return t;
}

/// poll(): the ready events handled without blocking. A no-op once closed (a pass the
/// engine asked of the loop may come after).
fn enginePoll(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const server = asEngine(obj).server orelse return py.none();
    server.poll();
    return py.none();
}

/// settle() -> bool: what the engine scheduled for the end of the loop's pass. Wakes
/// the writer thread for the jobs handed over meanwhile; then, if the last stream
/// finished, the busy poll: without the GIL, polls until an event is ready or the
/// budget is spent, and handles the events if one came (True). A no-op once closed.
fn engineSettle(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const server = asEngine(obj).server orelse return py.boolean(false);
    if (!server.settleBegin()) return py.boolean(false);
    const ready = spinWithoutGil(server);
    if (ready) server.process();
    return py.boolean(ready);
}

/// The busy poll (`Server.spinWait`) with the GIL given up meanwhile; true when events
/// came (the caller runs `process` with the GIL).
pub fn spinWithoutGil(server: *Server) bool {
    const ts = py.releaseGil();
    defer py.takeGil(ts);
    return server.spinWait();
}

fn engineFileno(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    return c.PyLong_FromLong(server.io.fd);
}

fn engineSetState(obj: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const self = asEngine(obj);
    if (c.PyDict_Check(arg) == 0) return py.typeError("state must be a dict");
    py.incref(arg.?);
    const old = self.info.state;
    self.info.state = arg;
    py.xdecref(old);
    return py.none();
}

/// drain(): the drain's start (health and ready paths 503, connections told to leave);
/// the listener still accepts.
fn engineDrain(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    server.drain();
    return py.none();
}

/// retire(): `drain()` for a worker whose successors serve on: the health and ready
/// paths keep answering 200.
fn engineRetire(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    server.retiring = true;
    server.drain();
    return py.none();
}

/// stop_accepting(websockets_too): no new connections; idle ones close; with
/// `websockets_too` (no deadline will come) open WebSockets are closed with 1001.
fn engineStopAccepting(obj: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    const websockets_too = c.PyObject_IsTrue(arg);
    if (websockets_too < 0) return null;
    server.stopServing(websockets_too == 1);
    return py.none();
}

/// deadline(): the drain's deadline came: WebSockets are closed with 1001, connections
/// without one close now.
fn engineDeadline(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    server.deadlinePassed();
    return py.none();
}

/// set_ready(bool): whether the app's startup is over (before it, requests get 503).
fn engineSetReady(obj: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    const ready = c.PyObject_IsTrue(arg);
    if (ready < 0) return null;
    server.ready = ready == 1;
    return py.none();
}

fn engineCloseAll(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    server.closeAll();
    return py.none();
}

fn engineClose(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const self = asEngine(obj);
    const s = self.server orelse return py.none();
    s.stopAccepting();
    s.closeAll();
    self.close_requested = true;
    closeIfDone(self);
    return py.none();
}

fn engineStats(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    const d = c.PyDict_New() orelse return null;
    const fields = .{
        .{ "connections", server.connections },
        .{ "streams", server.streams },
        .{ "requests_total", server.requests_total },
        .{ "bytes_in", server.bytes_in },
        .{ "bytes_out", server.bytes_out },
        .{ "buffers_in_use", server.pool.in_use_count },
        .{ "buffers_free", server.pool.free_count },
    };
    inline for (fields) |f| {
        const v = c.PyLong_FromUnsignedLongLong(@intCast(f[1])) orelse return null;
        defer py.decref(v);
        if (c.PyDict_SetItemString(d, f[0], v) != 0) {
            py.decref(d);
            return null;
        }
    }
    return d;
}

/// backend() -> (name, refused): the I/O backend serving ("epoll" or "io_uring"), and
/// why io_uring was refused when it was asked for (None otherwise).
fn engineBackend(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    const name = py.str(@tagName(server.io.kind())) orelse return null;
    const refused = if (server.io.fallback) |e| (py.str(@errorName(e)) orelse {
        py.decref(name);
        return null;
    }) else py.none();
    defer py.decref(name);
    defer py.decref(refused);
    return c.PyTuple_Pack(2, name, refused);
}

/// options() -> dict: what the server runs with, in Config's units.
fn engineOptions(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return options.report(asEngine(obj));
}

var engine_methods = [_]c.PyMethodDef{
    .{ .ml_name = "backend", .ml_meth = @ptrCast(&engineBackend), .ml_flags = c.METH_NOARGS, .ml_doc = "(I/O backend serving, why io_uring was refused or None)." },
    .{ .ml_name = "options", .ml_meth = @ptrCast(&engineOptions), .ml_flags = c.METH_NOARGS, .ml_doc = "What the server runs with, in Config's units." },
    .{ .ml_name = "adopt", .ml_meth = @ptrCast(&engineAdopt), .ml_flags = c.METH_O, .ml_doc = "Serve an already listening socket fd." },
    .{ .ml_name = "settle", .ml_meth = @ptrCast(&engineSettle), .ml_flags = c.METH_NOARGS, .ml_doc = "End of the loop's pass: wake the writer thread, busy poll if due." },
    .{ .ml_name = "poll", .ml_meth = @ptrCast(&enginePoll), .ml_flags = c.METH_NOARGS, .ml_doc = "Process ready events without blocking." },
    .{ .ml_name = "fileno", .ml_meth = @ptrCast(&engineFileno), .ml_flags = c.METH_NOARGS, .ml_doc = "The fd to watch for readiness." },
    .{ .ml_name = "set_state", .ml_meth = @ptrCast(&engineSetState), .ml_flags = c.METH_O, .ml_doc = "Lifespan state copied into each scope." },
    .{ .ml_name = "drain", .ml_meth = @ptrCast(&engineDrain), .ml_flags = c.METH_NOARGS, .ml_doc = "The drain starts: health and ready paths 503, connections told to leave; still accepting." },
    .{ .ml_name = "retire", .ml_meth = @ptrCast(&engineRetire), .ml_flags = c.METH_NOARGS, .ml_doc = "drain() for a worker whose successors serve on: health and ready paths stay 200." },
    .{ .ml_name = "stop_accepting", .ml_meth = @ptrCast(&engineStopAccepting), .ml_flags = c.METH_O, .ml_doc = "Stop accepting, close idle connections; True: WebSockets closed with 1001 too." },
    .{ .ml_name = "deadline", .ml_meth = @ptrCast(&engineDeadline), .ml_flags = c.METH_NOARGS, .ml_doc = "The drain's deadline: WebSockets closed with 1001, other connections now." },
    .{ .ml_name = "set_ready", .ml_meth = @ptrCast(&engineSetReady), .ml_flags = c.METH_O, .ml_doc = "Whether the app's startup is over (before it, requests get 503)." },
    .{ .ml_name = "close_all", .ml_meth = @ptrCast(&engineCloseAll), .ml_flags = c.METH_NOARGS, .ml_doc = "Close every connection now." },
    .{ .ml_name = "close", .ml_meth = @ptrCast(&engineClose), .ml_flags = c.METH_NOARGS, .ml_doc = "Release everything." },
    .{ .ml_name = "stats", .ml_meth = @ptrCast(&engineStats), .ml_flags = c.METH_NOARGS, .ml_doc = "Counters as a dict." },
    std.mem.zeroes(c.PyMethodDef),
};

fn engineGetStreams(obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    return c.PyLong_FromUnsignedLong(server.streams);
}

fn engineGetConnections(obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    return c.PyLong_FromUnsignedLong(server.connectionsOpen());
}

var engine_getset = [_]c.PyGetSetDef{
    .{ .name = "streams", .get = &engineGetStreams, .set = null, .doc = "Requests in progress.", .closure = null },
    .{ .name = "connections", .get = &engineGetConnections, .set = null, .doc = "Open connections.", .closure = null },
    std.mem.zeroes(c.PyGetSetDef),
};

var engine_slots = [_]c.PyType_Slot{
    .{ .slot = c.Py_tp_new, .pfunc = @ptrCast(@constCast(&engineNew)) },
    .{ .slot = c.Py_tp_dealloc, .pfunc = @ptrCast(@constCast(&engineDealloc)) },
    .{ .slot = c.Py_tp_traverse, .pfunc = @ptrCast(@constCast(&engineTraverse)) },
    .{ .slot = c.Py_tp_clear, .pfunc = @ptrCast(@constCast(&engineClear)) },
    .{ .slot = c.Py_tp_methods, .pfunc = @ptrCast(&engine_methods) },
    .{ .slot = c.Py_tp_getset, .pfunc = @ptrCast(&engine_getset) },
    .{ .slot = 0, .pfunc = null },
};

/// The Engine type, once the module is initialised.
pub var engine_type: ?*c.PyTypeObject = null;

pub var engine_spec = c.PyType_Spec{
    .name = "zigcorn._core.Engine",
    .basicsize = @sizeOf(EngineObject),
    .itemsize = 0,
    .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_HAVE_GC,
    .slots = &engine_slots,
};
