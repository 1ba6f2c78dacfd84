//! The seam between the engine and Python: the `zigcorn._core` module.
//!
//! `Engine` wraps a Server; Python watches `engine.fileno()` with one `add_reader` and
//! calls `engine.poll()`. `Stream` is one request and its response: the Python side
//! subclasses it (adding the async `receive`/`send` an app sees) and the engine creates
//! one instance per request, hands it to `on_request`, and forgets it when `finish()`
//! is called. No Python object lives as long as an idle connection.
const std = @import("std");
const py = @import("py.zig");
const c = py.c;
const Object = py.Object;
const http1 = @import("http1.zig");
const scope = @import("scope.zig");
const server_mod = @import("server.zig");
const Server = server_mod.Server;
const Conn = @import("conn.zig").Conn;
const response = @import("response.zig");
const metrics = @import("metrics.zig");
const sys = @import("sys.zig");
const wsconn = @import("wsconn.zig");
const tls = @import("tls.zig");

const allocator = std.heap.c_allocator;

// ---- Stream ----------------------------------------------------------------

const StreamObject = extern struct {
    ob_base: Object,
    conn: ?*Conn,
    engine: ?*Object,
    scope: ?*Object,
    read_waiter: ?*Object,
    write_waiter: ?*Object,
    status: c_long,
    bytes_sent: c_longlong,
    body_final: bool,
    finished: bool,
};

var stream_type: ?*c.PyTypeObject = null;

fn asStream(o: ?*Object) *StreamObject {
    return @ptrCast(@alignCast(o.?));
}

fn streamDealloc(self_obj: ?*Object) callconv(.c) void {
    const self = asStream(self_obj);
    const tp = py.typeOf(self_obj.?);
    c.PyObject_GC_UnTrack(self_obj);
    // Normally finish() detached us; a stream dropped without it aborts its connection.
    if (self.conn) |conn| {
        self.conn = null;
        conn.close();
        conn.finishStream();
        if (self.engine) |e| closeIfDone(asEngine(e));
    }
    _ = streamClear(self_obj);
    const free_fn = tp.tp_free.?;
    free_fn(self_obj);
    py.decref(@ptrCast(tp));
}

fn streamTraverse(self_obj: ?*Object, visit: c.visitproc, arg: ?*anyopaque) callconv(.c) c_int {
    const self = asStream(self_obj);
    const v = visit.?;
    inline for (.{ "engine", "scope", "read_waiter", "write_waiter" }) |f| {
        if (@field(self, f)) |o| {
            const r = v(o, arg);
            if (r != 0) return r;
        }
    }
    return v(@ptrCast(py.typeOf(self_obj.?)), arg);
}

fn streamClear(self_obj: ?*Object) callconv(.c) c_int {
    const self = asStream(self_obj);
    inline for (.{ "engine", "scope", "read_waiter", "write_waiter" }) |f| {
        const o = @field(self, f);
        @field(self, f) = null;
        py.xdecref(o);
    }
    return 0;
}

/// receive(): the next http.request message, http.disconnect, or None when the caller
/// must wait (it stores a future in read_waiter; the engine resolves it).
fn streamRead(self_obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const conn = self.conn orelse return scope.disconnectMessage();
    if (conn.gone()) return scope.disconnectMessage();
    if (self.body_final) {
        // After the whole body, receive() waits for the client to go away or for the
        // response to be sent, then reports disconnect (uvicorn's behaviour).
        if (conn.a().resp_complete) return scope.disconnectMessage();
        return py.none();
    }
    var segs: [16][]const u8 = undefined;
    const take = conn.takeBody(&segs);
    if (take.failed or conn.gone()) return scope.disconnectMessage();
    if (take.count == 0 and !take.done) {
        conn.bodyConsumed();
        conn.awaitBody();
        return py.none();
    }
    var total: usize = 0;
    for (segs[0..take.count]) |s| total += s.len;
    const body = if (total == 0) scope.emptyBytes() else blk: {
        const b = c.PyBytes_FromStringAndSize(null, @intCast(total)) orelse return null;
        const dst: [*]u8 = @ptrCast(c.PyBytes_AsString(b));
        var at: usize = 0;
        for (segs[0..take.count]) |s| {
            @memcpy(dst[at..][0..s.len], s);
            at += s.len;
        }
        break :blk b;
    };
    conn.bodyConsumed();
    if (take.done) self.body_final = true;
    return scope.requestMessage(body, !take.done);
}

const max_headers = 256;
// Scratch for start(): module-level (the GIL serialises callers) because a local
// `undefined` array of this size would be filled with 0xaa on every call in safe builds.
var header_pairs: [max_headers][2][]const u8 = undefined;

/// New reference: the headers as a list or tuple whose items are 2-item lists or
/// tuples, converting other iterables. Reading it afterwards runs no Python code.
fn normalizedHeaders(headers: *Object) ?*Object {
    const seq = c.PySequence_Fast(headers, "headers must be an iterable of (name, value) pairs") orelse return null;
    const n = py.seqLen(seq);
    const items = py.seqItems(seq);
    var plain = true;
    for (0..n) |i| {
        const pair = items[i].?;
        const is_seq = c.PyTuple_Check(pair) != 0 or c.PyList_Check(pair) != 0;
        if (!is_seq or py.seqLen(pair) != 2) plain = false;
    }
    if (plain) return seq;
    defer py.decref(seq);
    const list = c.PyList_New(@intCast(n)) orelse return null;
    for (0..n) |i| {
        // Converting a pair runs Python code, which could shrink a list under us.
        if (py.seqLen(seq) != n) {
            py.decref(list);
            return py.runtimeError("headers changed while being read");
        }
        const t = c.PySequence_Tuple(py.seqItems(seq)[i].?) orelse return fail(list);
        _ = c.PyList_SetItem(list, @intCast(i), t);
        if (c.PyTuple_Size(t) != 2) {
            py.decref(list);
            return py.typeError("each header must be a (name, value) pair");
        }
    }
    return list;
}

/// start(status, headers): the response head. Headers are (bytes, bytes) pairs.
fn streamStart(self_obj: ?*Object, args: [*c]const ?*Object, nargs: c.Py_ssize_t) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    if (nargs != 2) return py.typeError("start() takes status and headers");
    const status = c.PyLong_AsLong(args[0]);
    if (status == -1 and c.PyErr_Occurred() != null) return null;
    if (status < 100 or status > 999) {
        c.PyErr_SetString(c.PyExc_ValueError, "status must be an integer between 100 and 999");
        return null;
    }
    // Any Python code (a custom iterable) runs here, before the shared scratch is touched.
    const seq = normalizedHeaders(args[1].?) orelse return null;
    defer py.decref(seq);
    const n = py.seqLen(seq);
    if (n > max_headers) return py.runtimeError("too many response headers");
    const pairs = &header_pairs;
    const items = py.seqItems(seq);
    for (0..n) |i| {
        const pi = py.seqItems(items[i].?);
        pairs[i][0] = py.bytesView(pi[0].?) orelse return py.typeError("header names must be bytes");
        pairs[i][1] = py.bytesView(pi[1].?) orelse return py.typeError("header values must be bytes");
    }
    const engine = asEngine(self.engine);
    self.status = status;
    const conn = self.conn orelse return py.none();
    conn.startResponse(@intCast(status), pairs[0..n], engine.extraHeaders()) catch |err| return switch (err) {
        error.AlreadyStarted => py.runtimeError("Expected ASGI message 'http.response.body', but got 'http.response.start'."),
        error.InvalidHeader => py.runtimeError("Invalid HTTP header name or value in the response."),
        error.HeadTooLarge => py.runtimeError("Response headers are too large."),
        error.OutOfMemory, error.Closed => py.runtimeError("Out of memory for the response head."),
    };
    return py.none();
}

/// write(body, more_body) -> True when the caller must wait (write_waiter) before the next write.
fn streamWrite(self_obj: ?*Object, args: [*c]const ?*Object, nargs: c.Py_ssize_t) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    if (nargs != 2) return py.typeError("write() takes body and more_body");
    var body_obj = args[0].?;
    var converted: ?*Object = null;
    defer py.xdecref(converted);
    if (c.PyBytes_Check(body_obj) == 0) {
        // bytearray / memoryview are accepted, as bytes.
        converted = c.PyBytes_FromObject(body_obj) orelse return null;
        body_obj = converted.?;
    }
    const more = c.PyObject_IsTrue(args[1].?);
    if (more < 0) return null;
    const conn = self.conn orelse return py.boolean(false);
    const data = py.bytesView(body_obj).?;
    const wait = conn.writeBody(data, more != 0, body_obj) catch |err| return switch (err) {
        error.NotStarted => py.runtimeError("Expected ASGI message 'http.response.start', but got 'http.response.body'."),
        error.AlreadyComplete => py.runtimeError("Unexpected ASGI message 'http.response.body' sent, after response already completed."),
        error.Busy => py.runtimeError("send() called while an earlier send() is still in progress."),
        error.TooMuchBody => py.runtimeError("Response content longer than Content-Length"),
        error.TooLittleBody => py.runtimeError("Response content shorter than Content-Length"),
        error.OutOfMemory => py.runtimeError("Out of memory for the response."),
    };
    return py.boolean(wait);
}

/// finish(): the app is done; the connection goes on to its next request (or closes).
fn streamFinish(self_obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    detach(self, false);
    return py.none();
}

/// abort(): close the connection now (the app failed after its response started).
fn streamAbort(self_obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    detach(self, true);
    return py.none();
}

fn detach(self: *StreamObject, abort: bool) void {
    const conn = self.conn orelse return;
    self.bytes_sent = @intCast(conn.bytesSentOrQueued());
    self.conn = null;
    self.finished = true;
    if (abort) conn.close();
    conn.finishStream();
    if (self.engine) |e| closeIfDone(asEngine(e));
    // The connection held one reference to us while the request was open.
    py.decref(@ptrCast(self));
}

/// close() waits for the last stream: each points at a connection the server owns.
fn closeIfDone(engine: *EngineObjectCore) void {
    const s = engine.server orelse return;
    if (!engine.close_requested or s.streams != 0) return;
    engine.server = null;
    s.deinit();
}

fn streamGetDisconnected(self_obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    // Without a connection the stream is finished (or was aborted): nobody is listening.
    const conn = self.conn orelse return py.boolean(true);
    return py.boolean(conn.gone());
}

fn streamGetStatus(self_obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    return c.PyLong_FromLong(asStream(self_obj).status);
}

fn streamGetBytesSent(self_obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const n: c_longlong = if (self.conn) |conn| @intCast(conn.bytesSentOrQueued()) else self.bytes_sent;
    return c.PyLong_FromLongLong(n);
}

fn streamGetStarted(self_obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const conn = self.conn orelse return py.boolean(self.status != 0);
    return py.boolean(conn.a().resp_started);
}

fn streamGetComplete(self_obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const conn = self.conn orelse return py.boolean(self.finished);
    return py.boolean(conn.a().resp_complete);
}

// ---- WebSocket streams ---------------------------------------------------------
//
// After an upgrade the stream is a WebSocket session: the engine hands whole messages
// to `ws_receive` and frames what `ws_send` gives it. Before `ws_accept` the app may
// still answer over HTTP with start()/write() (denial response, 403).

/// ws_accept(subprotocol: str | None, headers): the 101 response.
fn streamWsAccept(self_obj: ?*Object, args: [*c]const ?*Object, nargs: c.Py_ssize_t) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    if (nargs != 2) return py.typeError("ws_accept() takes subprotocol and headers");
    const sub: ?[]const u8 = if (py.isNone(args[0].?)) null else (py.strView(args[0].?) orelse return null);
    const seq = normalizedHeaders(args[1].?) orelse return null;
    defer py.decref(seq);
    const n = py.seqLen(seq);
    if (n > max_headers) return py.runtimeError("too many response headers");
    const items = py.seqItems(seq);
    for (0..n) |i| {
        const pi = py.seqItems(items[i].?);
        header_pairs[i][0] = py.bytesView(pi[0].?) orelse return py.typeError("header names must be bytes");
        header_pairs[i][1] = py.bytesView(pi[1].?) orelse return py.typeError("header values must be bytes");
    }
    const conn = self.conn orelse return py.none();
    wsconn.accept(conn, sub, header_pairs[0..n], asEngine(self.engine).extraHeaders()) catch |err| return switch (err) {
        error.InvalidHeader => py.runtimeError("Invalid header name or value in websocket.accept."),
        error.HeadTooLarge => py.runtimeError("websocket.accept headers are too large."),
        error.OutOfMemory => py.runtimeError("Out of memory for the handshake response."),
        error.NotPending => py.runtimeError("Expected ASGI message 'websocket.send' or 'websocket.close', but got 'websocket.accept'."),
    };
    self.status = 101;
    return py.none();
}

/// ws_send(data: bytes | str) -> 0 sent, 1 sent but wait for write_waiter, 2 the connection is closed.
fn streamWsSend(self_obj: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const o = arg.?;
    const text = c.PyUnicode_Check(o) != 0;
    const data = if (text) (py.strView(o) orelse return null) else (py.bytesView(o) orelse
        return py.typeError("websocket.send needs 'bytes' (bytes) or 'text' (str)"));
    const conn = self.conn orelse return c.PyLong_FromLong(2);
    const wait = wsconn.send(conn, data, text) catch |err| return switch (err) {
        error.Closed => c.PyLong_FromLong(2),
        error.OutOfMemory => py.runtimeError("Out of memory for the message."),
    };
    return c.PyLong_FromLong(if (wait) 1 else 0);
}

/// ws_receive(): the next websocket.receive or websocket.disconnect message, or None to wait.
fn streamWsReceive(self_obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const conn = self.conn orelse return scope.wsDisconnectMessage(1006, "");
    if (wsconn.takeMessage(conn)) |m| {
        defer m.destroy();
        return scope.wsReceiveMessage(m.text, m.data.items);
    }
    if (conn.a().ws == null or wsconn.finished(conn)) return scope.wsDisconnectMessage(wsconn.closeCode(conn), wsconn.closeReason(conn));
    return py.none();
}

/// ws_close(code: int, reason: str): the close frame (after accept).
fn streamWsClose(self_obj: ?*Object, args: [*c]const ?*Object, nargs: c.Py_ssize_t) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    if (nargs != 2) return py.typeError("ws_close() takes code and reason");
    const code = c.PyLong_AsLong(args[0]);
    if (code == -1 and c.PyErr_Occurred() != null) return null;
    if (code != 1000 and (code < 1000 or code > 4999 or !@import("ws.zig").validCloseCode(@intCast(code)))) {
        c.PyErr_SetString(c.PyExc_ValueError, "invalid WebSocket close code");
        return null;
    }
    const reason = py.strView(args[1].?) orelse return null;
    const conn = self.conn orelse return py.none();
    wsconn.closeFromApp(conn, @intCast(code), reason);
    return py.none();
}

fn streamGetWsFinished(self_obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const conn = self.conn orelse return py.boolean(true);
    return py.boolean(wsconn.finished(conn));
}

var stream_methods = [_]c.PyMethodDef{
    .{ .ml_name = "ws_accept", .ml_meth = @ptrCast(&streamWsAccept), .ml_flags = c.METH_FASTCALL, .ml_doc = "Accept a WebSocket upgrade." },
    .{ .ml_name = "ws_send", .ml_meth = @ptrCast(&streamWsSend), .ml_flags = c.METH_O, .ml_doc = "Send one message; 1 means wait for write_waiter, 2 closed." },
    .{ .ml_name = "ws_receive", .ml_meth = @ptrCast(&streamWsReceive), .ml_flags = c.METH_NOARGS, .ml_doc = "Next WebSocket message, or None to wait." },
    .{ .ml_name = "ws_close", .ml_meth = @ptrCast(&streamWsClose), .ml_flags = c.METH_FASTCALL, .ml_doc = "Send a close frame." },
    .{ .ml_name = "read", .ml_meth = @ptrCast(&streamRead), .ml_flags = c.METH_NOARGS, .ml_doc = "Next request message, or None to wait." },
    .{ .ml_name = "start", .ml_meth = @ptrCast(&streamStart), .ml_flags = c.METH_FASTCALL, .ml_doc = "Start the response." },
    .{ .ml_name = "write", .ml_meth = @ptrCast(&streamWrite), .ml_flags = c.METH_FASTCALL, .ml_doc = "Queue body bytes; True means wait for write_waiter." },
    .{ .ml_name = "finish", .ml_meth = @ptrCast(&streamFinish), .ml_flags = c.METH_NOARGS, .ml_doc = "The app is done with this request." },
    .{ .ml_name = "abort", .ml_meth = @ptrCast(&streamAbort), .ml_flags = c.METH_NOARGS, .ml_doc = "Close the connection now." },
    std.mem.zeroes(c.PyMethodDef),
};

const T_OBJECT = 6;
const READONLY = 1;

var stream_members = [_]c.PyMemberDef{
    .{ .name = "scope", .type = T_OBJECT, .offset = @offsetOf(StreamObject, "scope"), .flags = READONLY, .doc = null },
    .{ .name = "read_waiter", .type = T_OBJECT, .offset = @offsetOf(StreamObject, "read_waiter"), .flags = 0, .doc = null },
    .{ .name = "write_waiter", .type = T_OBJECT, .offset = @offsetOf(StreamObject, "write_waiter"), .flags = 0, .doc = null },
    std.mem.zeroes(c.PyMemberDef),
};

var stream_getset = [_]c.PyGetSetDef{
    .{ .name = "disconnected", .get = &streamGetDisconnected, .set = null, .doc = null, .closure = null },
    .{ .name = "status", .get = &streamGetStatus, .set = null, .doc = null, .closure = null },
    .{ .name = "bytes_sent", .get = &streamGetBytesSent, .set = null, .doc = null, .closure = null },
    .{ .name = "response_started", .get = &streamGetStarted, .set = null, .doc = null, .closure = null },
    .{ .name = "response_complete", .get = &streamGetComplete, .set = null, .doc = null, .closure = null },
    .{ .name = "ws_finished", .get = &streamGetWsFinished, .set = null, .doc = null, .closure = null },
    std.mem.zeroes(c.PyGetSetDef),
};

var stream_slots = [_]c.PyType_Slot{
    .{ .slot = c.Py_tp_dealloc, .pfunc = @ptrCast(@constCast(&streamDealloc)) },
    .{ .slot = c.Py_tp_traverse, .pfunc = @ptrCast(@constCast(&streamTraverse)) },
    .{ .slot = c.Py_tp_clear, .pfunc = @ptrCast(@constCast(&streamClear)) },
    .{ .slot = c.Py_tp_methods, .pfunc = @ptrCast(&stream_methods) },
    .{ .slot = c.Py_tp_members, .pfunc = @ptrCast(&stream_members) },
    .{ .slot = c.Py_tp_getset, .pfunc = @ptrCast(&stream_getset) },
    .{ .slot = 0, .pfunc = null },
};

var stream_spec = c.PyType_Spec{
    .name = "zigcorn._core.Stream",
    .basicsize = @sizeOf(StreamObject),
    .itemsize = 0,
    .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_BASETYPE | c.Py_TPFLAGS_HAVE_GC,
    .slots = &stream_slots,
};

// ---- hooks: the engine calling into Python ----------------------------------

fn hookOnRequest(ctx: *anyopaque, conn: *Conn, req: *const http1.Request) bool {
    const engine: *EngineObjectCore = @ptrCast(@alignCast(ctx));
    const is_ws = conn.a().ws != null;
    const tp = (if (is_ws) engine.ws_class else engine.stream_class) orelse return false;
    const alloc_fn = tp.tp_alloc orelse return false;
    const obj = alloc_fn(tp, 0) orelse {
        c.PyErr_WriteUnraisable(null);
        return false;
    };
    const stream = asStream(obj);
    stream.scope = scope.build(req, &conn.peer, &engine.info, conn.session()) orelse {
        c.PyErr_WriteUnraisable(null);
        py.decref(obj);
        return false;
    };
    py.incref(engine.obj);
    stream.engine = engine.obj;
    // The connection's reference; dropped by finish()/abort().
    stream.conn = conn;
    conn.a().stream = obj;
    conn.server.streamStarted();
    const result = c.PyObject_CallOneArg(engine.on_request, obj);
    if (result) |r| {
        py.decref(r);
    } else {
        c.PyErr_WriteUnraisable(engine.on_request);
        if (stream.conn != null) {
            stream.conn = null;
            conn.a().stream = null;
            conn.server.streamFinished();
            py.decref(obj);
            return false;
        }
    }
    return true;
}

fn wakeSlot(stream_ptr: *anyopaque, comptime field: []const u8) void {
    const stream: *StreamObject = @ptrCast(@alignCast(stream_ptr));
    const waiter = @field(stream, field) orelse return;
    @field(stream, field) = null;
    defer py.decref(waiter);
    const engine = asEngine(stream.engine);
    const r = c.PyObject_CallOneArg(engine.wake, waiter);
    if (r) |o| py.decref(o) else c.PyErr_WriteUnraisable(engine.wake);
}

fn hookWakeRead(s: *anyopaque) void {
    wakeSlot(s, "read_waiter");
}

fn hookWakeWrite(s: *anyopaque) void {
    wakeSlot(s, "write_waiter");
}

fn hookOnSettle(ctx: *anyopaque) void {
    const engine: *EngineObjectCore = @ptrCast(@alignCast(ctx));
    if (scheduleSettle(engine)) return;
    // Nothing to defer to (no loop, or it refused): wake the writer now, skip the spin.
    if (engine.server) |s| _ = s.settleBegin();
}

fn scheduleSettle(engine: *EngineObjectCore) bool {
    const call_soon = engine.call_soon orelse return false;
    // A fresh bound method each time: a stored one would be a cycle through the engine.
    const settle = c.PyObject_GetAttrString(engine.obj, "settle") orelse {
        c.PyErr_WriteUnraisable(engine.obj);
        return false;
    };
    defer py.decref(settle);
    const r = c.PyObject_CallOneArg(call_soon, settle) orelse {
        c.PyErr_WriteUnraisable(call_soon);
        return false;
    };
    py.decref(r);
    return true;
}

fn hookRetain(o: *anyopaque) void {
    py.incref(@ptrCast(@alignCast(o)));
}

fn hookRelease(o: *anyopaque) void {
    py.decref(@ptrCast(@alignCast(o)));
}

// ---- Engine ----------------------------------------------------------------

const EngineObject = extern struct {
    ob_base: Object,
    core: ?*EngineObjectCore,
};

/// The Zig-typed part of an Engine object (an extern struct cannot hold Zig types).
const EngineObjectCore = struct {
    obj: *Object,
    server: ?*Server = null,
    on_request: ?*Object = null,
    wake: ?*Object = null,
    /// The loop's call_soon, for the busy poll (options["call_soon"]); may be null.
    call_soon: ?*Object = null,
    stream_class: ?*c.PyTypeObject = null,
    /// The stream class for WebSocket upgrades (options["websocket_class"]).
    ws_class: ?*c.PyTypeObject = null,
    info: scope.ServerInfo = .{ .server = null, .root_path = null, .root_path_utf8 = "", .scheme = null, .state = null },
    extra_headers: [][2][]const u8 = &.{},
    extra_storage: ?*Object = null,
    close_requested: bool = false,
    trust: @import("proxy.zig").Trust = .{},
    /// str objects whose UTF-8 the server's ops paths point into.
    metrics_path: ?*Object = null,
    health_path: ?*Object = null,

    fn extraHeaders(self: *EngineObjectCore) []const [2][]const u8 {
        return self.extra_headers;
    }
};

fn asEngine(o: ?*Object) *EngineObjectCore {
    const e: *EngineObject = @ptrCast(@alignCast(o.?));
    return e.core.?;
}

fn optBool(opts: *Object, comptime key: [:0]const u8, default: bool) ?bool {
    const v = c.PyDict_GetItemString(opts, key.ptr) orelse return default;
    const t = c.PyObject_IsTrue(v);
    if (t < 0) return null;
    return t != 0;
}

fn optInt(opts: *Object, comptime key: [:0]const u8, default: i64) ?i64 {
    const v = c.PyDict_GetItemString(opts, key.ptr) orelse return default;
    if (py.isNone(v)) return default;
    const n = c.PyLong_AsLongLong(v);
    if (n == -1 and c.PyErr_Occurred() != null) return null;
    return n;
}

fn optFloatMs(opts: *Object, comptime key: [:0]const u8, default_ms: u64) ?u64 {
    const v = c.PyDict_GetItemString(opts, key.ptr) orelse return default_ms;
    if (py.isNone(v)) return default_ms;
    const f = c.PyFloat_AsDouble(v);
    if (f == -1.0 and c.PyErr_Occurred() != null) return null;
    if (!(f >= 0) or f > 1e9) {
        c.PyErr_SetString(c.PyExc_ValueError, "timeouts must be between 0 and 1e9 seconds");
        return null;
    }
    return @intFromFloat(f * 1000.0);
}

/// Engine(on_request, wake, stream_class, options: dict)
fn engineNew(tp: ?*c.PyTypeObject, args: ?*Object, kwargs: ?*Object) callconv(.c) ?*Object {
    _ = kwargs;
    const a = args.?;
    if (c.PyTuple_Size(a) != 4) return py.typeError("Engine(on_request, wake, stream_class, options)");
    const on_request = c.PyTuple_GetItem(a, 0).?;
    const wake = c.PyTuple_GetItem(a, 1).?;
    const cls = c.PyTuple_GetItem(a, 2).?;
    const opts = c.PyTuple_GetItem(a, 3).?;
    if (c.PyType_Check(cls) == 0 or c.PyType_IsSubtype(@ptrCast(cls), stream_type) == 0)
        return py.typeError("stream_class must subclass zigcorn._core.Stream");
    if (c.PyDict_Check(opts) == 0) return py.typeError("options must be a dict");

    const pool_buffer_bytes = @import("pool.zig").buffer_bytes;
    const server_opts = server_mod.Options{
        .backlog = @intCast(std.math.clamp(optInt(opts, "backlog", 2048) orelse return null, 1, 65535)),
        .timeout_keep_alive_ms = optFloatMs(opts, "timeout_keep_alive", 5_000) orelse return null,
        .timeout_header_ms = optFloatMs(opts, "timeout_header", 30_000) orelse return null,
        .timeout_body_ms = optFloatMs(opts, "timeout_body", 30_000) orelse return null,
        .timeout_write_ms = optFloatMs(opts, "timeout_write", 30_000) orelse return null,
        .server_header = optBool(opts, "server_header", true) orelse return null,
        .date_header = optBool(opts, "date_header", true) orelse return null,
        .connections_max = @intCast(std.math.clamp(optInt(opts, "limit_connections", 100_000) orelse return null, 1, std.math.maxInt(u32))),
        .keep_alive_requests_max = @intCast(std.math.clamp(optInt(opts, "limit_keep_alive_requests", 10_000) orelse return null, 1, std.math.maxInt(u32))),
        .body_bytes_max = @intCast(std.math.clamp(optInt(opts, "limit_request_body", 1 << 30) orelse return null, 0, std.math.maxInt(i64))),
        .ws_enabled = (optBool(opts, "ws", true) orelse return null) and c.PyDict_GetItemString(opts, "websocket_class") != null,
        .ws_deflate = optBool(opts, "ws_per_message_deflate", true) orelse return null,
        .ws_message_bytes_max = @intCast(std.math.clamp(optInt(opts, "ws_max_size", 16 * 1024 * 1024) orelse return null, 1, std.math.maxInt(u32))),
        .ws_queue_max = @intCast(std.math.clamp(optInt(opts, "ws_max_queue", 32) orelse return null, 1, 1 << 20)),
        .ws_ping_interval_ms = optFloatMs(opts, "ws_ping_interval", 0) orelse return null,
        .ws_ping_timeout_ms = optFloatMs(opts, "ws_ping_timeout", 20_000) orelse return null,
        .spin_ns = @as(u64, @intCast(std.math.clamp(optInt(opts, "busy_poll_us", 0) orelse return null, 0, 1_000_000))) * 1000,
        .writer = std.meta.intToEnum(server_mod.WriterMode, std.math.clamp(optInt(opts, "writer", 1) orelse return null, 0, 2)) catch unreachable,
        .limits = .{
            // The whole head must fit in one pooled read buffer.
            .head_bytes_max = @intCast(std.math.clamp(optInt(opts, "limit_request_head", pool_buffer_bytes) orelse return null, 256, pool_buffer_bytes)),
            .target_bytes_max = @intCast(std.math.clamp(optInt(opts, "limit_request_line", 8190) orelse return null, 16, pool_buffer_bytes)),
            .headers_count_max = @intCast(std.math.clamp(optInt(opts, "limit_request_fields", 100) orelse return null, 1, 128)),
        },
    };

    var opts_full = server_opts;
    const alloc_fn = tp.?.tp_alloc.?;
    const obj = alloc_fn(tp, 0) orelse return null;
    const eo: *EngineObject = @ptrCast(@alignCast(obj));
    const self = allocator.create(EngineObjectCore) catch {
        py.decref(obj);
        return c.PyErr_NoMemory();
    };
    self.* = .{ .obj = obj };
    eo.core = self;
    py.incref(on_request);
    self.on_request = on_request;
    py.incref(wake);
    self.wake = wake;
    if (c.PyDict_GetItemString(opts, "call_soon")) |cs| {
        if (!py.isNone(cs)) {
            py.incref(cs);
            self.call_soon = cs;
        }
    }
    py.incref(cls);
    self.stream_class = @ptrCast(cls);
    if (c.PyDict_GetItemString(opts, "websocket_class")) |wcls| {
        if (c.PyType_Check(wcls) == 0 or c.PyType_IsSubtype(@ptrCast(wcls), stream_type) == 0) {
            py.decref(obj);
            return py.typeError("websocket_class must subclass zigcorn._core.Stream");
        }
        py.incref(wcls);
        self.ws_class = @ptrCast(wcls);
    }

    if (!setServerInfo(self, opts) or !setExtraHeaders(self, opts) or !setTrust(self, opts) or !setOps(self, opts, &opts_full)) {
        py.decref(obj);
        return null;
    }
    const hooks = server_mod.Hooks{
        .ctx = self,
        .on_request = hookOnRequest,
        .wake_read = hookWakeRead,
        .wake_write = hookWakeWrite,
        .retain_fn = hookRetain,
        .release_fn = hookRelease,
        .on_settle = hookOnSettle,
    };
    self.server = Server.init(allocator, hooks, opts_full) catch {
        py.decref(obj);
        c.PyErr_SetString(c.PyExc_OSError, "could not create the event source (epoll, timerfd, eventfd)");
        return null;
    };
    if (!setTls(self, opts)) {
        py.decref(obj);
        return null;
    }
    return obj;
}

// ---- TLS ---------------------------------------------------------------------

/// A str option as a C string (borrowed from the options dict), or null when absent/None.
fn optPath(opts: *Object, comptime key: [:0]const u8) error{Invalid}!?[*:0]const u8 {
    const v = c.PyDict_GetItemString(opts, key.ptr) orelse return null;
    if (py.isNone(v)) return null;
    if (c.PyUnicode_Check(v) == 0) {
        c.PyErr_SetString(c.PyExc_TypeError, key ++ " must be a str");
        return error.Invalid;
    }
    const p = c.PyUnicode_AsUTF8(v) orelse return error.Invalid;
    return @ptrCast(p);
}

/// With `ssl_certfile` in the options the server speaks HTTPS: the TLS context is
/// built here, so a bad certificate, key or password fails at start-up, once.
fn setTls(self: *EngineObjectCore, opts: *Object) bool {
    const certfile = (optPath(opts, "ssl_certfile") catch return false) orelse return true;
    if (!tls.isLoaded()) {
        _ = py.runtimeError("OpenSSL is not loaded: call zigcorn._core.tls_load() first");
        return false;
    }
    var o = tls.ContextOptions{ .certfile = certfile };
    o.keyfile = optPath(opts, "ssl_keyfile") catch return false;
    o.ca_certs = optPath(opts, "ssl_ca_certs") catch return false;
    o.ciphers = optPath(opts, "ssl_ciphers") catch return false;
    if (c.PyDict_GetItemString(opts, "ssl_keyfile_password")) |pw| if (!py.isNone(pw)) {
        // Borrowed for the duration of the key load only; never copied, never shown.
        o.password = py.bytesView(pw) orelse {
            _ = py.typeError("ssl_keyfile_password must be bytes");
            return false;
        };
    };
    o.cert_reqs = @intCast(std.math.clamp(optInt(opts, "ssl_cert_reqs", 0) orelse return false, 0, 2));
    o.min_version = optInt(opts, "ssl_min_version", tls.TLS1_2_VERSION) orelse return false;
    o.max_version = optInt(opts, "ssl_max_version", tls.TLS1_3_VERSION) orelse return false;
    var err = tls.ContextError{};
    const ctx = tls.newContext(o, &err) orelse {
        setErrorText(c.PyExc_ValueError, err.text());
        return false;
    };
    self.server.?.tls_ctx = ctx;
    self.info.tls_server_cert = scope.serverCertPem(ctx) orelse return false;
    return true;
}

fn setErrorText(exc: ?*Object, text: []const u8) void {
    const msg = c.PyUnicode_DecodeUTF8(text.ptr, @intCast(text.len), "replace") orelse return;
    c.PyErr_SetObject(exc, msg);
    py.decref(msg);
}

/// tls_load(path: str) -> OpenSSL version: loads libssl (once per process). Raises
/// OSError with one line naming what is missing.
fn moduleTlsLoad(_: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const path = c.PyUnicode_AsUTF8(arg) orelse return null;
    tls.load(path) catch |err| {
        const why: [:0]const u8 = switch (err) {
            error.LibraryNotFound => "not found",
            error.SymbolMissing => "not OpenSSL 3 (an older or different library)",
            error.TooOld => "older than OpenSSL 3.0",
            error.InitFailed => "OpenSSL failed to initialise",
        };
        var buf: [512]u8 = undefined;
        const text = std.fmt.bufPrint(&buf, "TLS needs OpenSSL 3: {s}: {s} ({s})", .{ std.mem.span(path), why, tls.loadErrorDetail() }) catch "TLS needs OpenSSL 3";
        setErrorText(c.PyExc_OSError, text);
        return null;
    };
    var buf: [32]u8 = undefined;
    return py.str(tls.versionText(&buf));
}

/// tls_loaded() -> whether this process's engine has loaded OpenSSL.
fn moduleTlsLoaded(_: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.boolean(tls.isLoaded());
}

fn setServerInfo(self: *EngineObjectCore, opts: *Object) bool {
    const root = c.PyDict_GetItemString(opts, "root_path") orelse blk: {
        break :blk py.intern("") orelse return false;
    };
    if (c.PyUnicode_Check(root) == 0) {
        c.PyErr_SetString(c.PyExc_TypeError, "root_path must be a str");
        return false;
    }
    py.incref(root);
    self.info.root_path = root;
    self.info.root_path_utf8 = py.strView(root) orelse return false;
    const scheme = c.PyDict_GetItemString(opts, "scheme") orelse py.intern("http") orelse return false;
    py.incref(scheme);
    self.info.scheme = scheme;
    self.info.server = py.none();
    self.info.state = null;
    return true;
}

/// metrics_path / health_path (str or None) and metrics_slot (int): engine-answered paths.
fn setOps(self: *EngineObjectCore, opts: *Object, out: *server_mod.Options) bool {
    inline for (.{ "metrics_path", "health_path" }) |key| {
        if (c.PyDict_GetItemString(opts, key)) |v| {
            if (!py.isNone(v)) {
                const text = py.strView(v) orelse return false;
                if (text.len == 0 or text[0] != '/') {
                    c.PyErr_SetString(c.PyExc_ValueError, key ++ " must start with '/'");
                    return false;
                }
                py.incref(v);
                @field(self, key) = v;
                @field(out, key) = text;
            }
        }
    }
    if (self.metrics_path == null) return true;
    const index = optInt(opts, "metrics_slot", 0) orelse return false;
    metrics.init(1) catch {
        c.PyErr_SetString(c.PyExc_OSError, "could not map the metrics counters");
        return false;
    };
    const pid: u64 = @intCast(std.os.linux.getpid());
    const slot = metrics.claim(@intCast(@max(index, 0)), pid) orelse {
        c.PyErr_SetString(c.PyExc_ValueError, "metrics_slot out of range");
        return false;
    };
    out.metrics = slot;
    return true;
}

/// forwarded_allow_ips: list of "*", "unix:", addresses and CIDR networks, or None
/// (proxy headers off).
fn setTrust(self: *EngineObjectCore, opts: *Object) bool {
    const list = c.PyDict_GetItemString(opts, "forwarded_allow_ips") orelse return true;
    if (py.isNone(list)) return true;
    const seq = c.PySequence_Fast(list, "forwarded_allow_ips must be a list of str") orelse return false;
    defer py.decref(seq);
    const items = py.seqItems(seq);
    for (0..@intCast(py.seqLen(seq))) |i| {
        const text = py.strView(items[i].?) orelse return false;
        self.trust.add(text) catch |err| {
            const why = if (err == error.TooMany) "too many entries (at most 64)" else "not an IP address, a CIDR network, '*' or 'unix:'";
            _ = c.PyErr_Format(c.PyExc_ValueError, "forwarded_allow_ips: %R is %s", items[i].?, why.ptr);
            return false;
        };
    }
    self.info.trust = &self.trust;
    return true;
}

/// Extra response headers (--header) are copied once into one bytes object that the
/// header slices point into.
fn setExtraHeaders(self: *EngineObjectCore, opts: *Object) bool {
    const list = c.PyDict_GetItemString(opts, "headers") orelse return true;
    const seq = c.PySequence_Fast(list, "headers must be a list of (bytes, bytes)") orelse return false;
    defer py.decref(seq);
    const n: usize = @intCast(py.seqLen(seq));
    if (n == 0) return true;
    const items = py.seqItems(seq);
    var total: usize = 0;
    for (0..n) |i| {
        const pair = items[i].?;
        if (c.PyTuple_Check(pair) == 0 or c.PyTuple_Size(pair) != 2) {
            c.PyErr_SetString(c.PyExc_TypeError, "headers must be a list of (bytes, bytes)");
            return false;
        }
        for (0..2) |j| {
            const b = py.bytesView(c.PyTuple_GetItem(pair, @intCast(j)).?) orelse {
                c.PyErr_SetString(c.PyExc_TypeError, "headers must be a list of (bytes, bytes)");
                return false;
            };
            total += b.len;
        }
    }
    const storage = c.PyBytes_FromStringAndSize(null, @intCast(total)) orelse return false;
    self.extra_storage = storage;
    const dst: [*]u8 = @ptrCast(c.PyBytes_AsString(storage));
    const slices = allocator.alloc([2][]const u8, n) catch {
        _ = c.PyErr_NoMemory();
        return false;
    };
    var at: usize = 0;
    for (0..n) |i| {
        const pair = items[i].?;
        for (0..2) |j| {
            const b = py.bytesView(c.PyTuple_GetItem(pair, @intCast(j)).?).?;
            @memcpy(dst[at..][0..b.len], b);
            slices[i][j] = dst[at..][0..b.len];
            at += b.len;
        }
        if (!response.validName(slices[i][0]) or !response.validValue(slices[i][1])) {
            allocator.free(slices);
            c.PyErr_SetString(c.PyExc_ValueError, "invalid header name or value");
            return false;
        }
    }
    self.extra_headers = slices;
    return true;
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
    inline for (.{ "on_request", "wake", "call_soon" }) |f| {
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
    server.adopt(@intCast(fd)) catch {
        c.PyErr_SetString(c.PyExc_OSError, "could not watch the given socket");
        return null;
    };
    return boundAddress(obj.?, server);
}

fn boundAddress(obj: *Object, server: *Server) ?*Object {
    const linux = std.os.linux;
    var st: linux.sockaddr.storage = undefined;
    var len: linux.socklen_t = @sizeOf(linux.sockaddr.storage);
    if (linux.getsockname(server.listen_fd, @ptrCast(&st), &len) != 0) return py.none();
    const peer = @import("conn.zig").Peer.fromStorage(&st);
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

fn enginePoll(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
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
    const ts = py.releaseGil();
    const ready = server.spinWait();
    py.takeGil(ts);
    if (ready) server.process();
    return py.boolean(ready);
}

fn engineFileno(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    return c.PyLong_FromLong(server.poller.fd);
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

fn engineDrain(obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const server = serverOf(obj) orelse return null;
    server.drain();
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

var engine_methods = [_]c.PyMethodDef{
    .{ .ml_name = "adopt", .ml_meth = @ptrCast(&engineAdopt), .ml_flags = c.METH_O, .ml_doc = "Serve an already listening socket fd." },
    .{ .ml_name = "settle", .ml_meth = @ptrCast(&engineSettle), .ml_flags = c.METH_NOARGS, .ml_doc = "End of the loop's pass: wake the writer thread, busy poll if due." },
    .{ .ml_name = "poll", .ml_meth = @ptrCast(&enginePoll), .ml_flags = c.METH_NOARGS, .ml_doc = "Process ready events without blocking." },
    .{ .ml_name = "fileno", .ml_meth = @ptrCast(&engineFileno), .ml_flags = c.METH_NOARGS, .ml_doc = "The fd to watch for readiness." },
    .{ .ml_name = "set_state", .ml_meth = @ptrCast(&engineSetState), .ml_flags = c.METH_O, .ml_doc = "Lifespan state copied into each scope." },
    .{ .ml_name = "drain", .ml_meth = @ptrCast(&engineDrain), .ml_flags = c.METH_NOARGS, .ml_doc = "Stop accepting, close idle connections." },
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
    return c.PyLong_FromUnsignedLong(server.connections);
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

var engine_spec = c.PyType_Spec{
    .name = "zigcorn._core.Engine",
    .basicsize = @sizeOf(EngineObject),
    .itemsize = 0,
    .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_HAVE_GC,
    .slots = &engine_slots,
};

// ---- module ----------------------------------------------------------------

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

/// metrics_init(slots): map the shared counters; the master calls it before forking.
fn metricsInit(_: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const n = c.PyLong_AsLong(arg);
    if (n == -1 and c.PyErr_Occurred() != null) return null;
    if (n < 1 or n > metrics.slots_max) return py.typeError("slots must be 1..2048");
    metrics.init(@intCast(n)) catch {
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

var module_methods = [_]c.PyMethodDef{
    .{ .ml_name = "trim_memory", .ml_meth = @ptrCast(&trimMemory), .ml_flags = c.METH_NOARGS, .ml_doc = "Return the C heap's free pages to the OS (malloc_trim)." },
    .{ .ml_name = "metrics_init", .ml_meth = @ptrCast(&metricsInit), .ml_flags = c.METH_O, .ml_doc = "Map the shared metrics counters (before forking workers)." },
    .{ .ml_name = "metrics_retire", .ml_meth = @ptrCast(&metricsRetire), .ml_flags = c.METH_FASTCALL, .ml_doc = "A worker's slot stops counting gauges." },
    .{ .ml_name = "set_parent_death_signal", .ml_meth = @ptrCast(&setParentDeathSignal), .ml_flags = c.METH_O, .ml_doc = "Have the kernel signal this process when its parent dies." },
    .{ .ml_name = "tls_load", .ml_meth = @ptrCast(&moduleTlsLoad), .ml_flags = c.METH_O, .ml_doc = "Load OpenSSL 3 from this library; returns its version." },
    .{ .ml_name = "tls_loaded", .ml_meth = @ptrCast(&moduleTlsLoaded), .ml_flags = c.METH_NOARGS, .ml_doc = "Whether OpenSSL was loaded." },
    std.mem.zeroes(c.PyMethodDef),
};

var module_def: c.PyModuleDef = std.mem.zeroes(c.PyModuleDef);

export fn PyInit__core() ?*Object {
    // PyModuleDef_HEAD_INIT: the refcount is the object's first word on every
    // supported version (3.12 wraps it in an anonymous union, so no field name works).
    @as(*c.Py_ssize_t, @ptrCast(&module_def.m_base.ob_base)).* = 1;
    module_def.m_name = "zigcorn._core";
    module_def.m_doc = "The zigcorn engine: sockets, epoll, HTTP/1.1 parsing and framing.";
    module_def.m_size = -1;
    module_def.m_methods = &module_methods;
    const m = c.PyModule_Create(&module_def) orelse return null;
    if (!scope.init()) return fail(m);
    const st = c.PyType_FromSpec(&stream_spec) orelse return fail(m);
    stream_type = @ptrCast(st);
    if (c.PyModule_AddObject(m, "Stream", st) != 0) return fail(m);
    py.incref(st);
    const et = c.PyType_FromSpec(&engine_spec) orelse return fail(m);
    if (c.PyModule_AddObject(m, "Engine", et) != 0) return fail(m);
    return m;
}

fn fail(m: *Object) ?*Object {
    py.decref(m);
    return null;
}

test {
    _ = @import("http1.zig");
    _ = @import("pool.zig");
    _ = @import("timer.zig");
    _ = @import("tls.zig");
    _ = @import("response.zig");
    _ = @import("proxy.zig");
    _ = @import("ws.zig");
    _ = @import("deflate.zig");
}
