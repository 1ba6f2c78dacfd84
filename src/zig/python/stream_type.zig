//! The `Stream` Python type: one request and its response (or one WebSocket session),
//! as the Python side drives it. The Python classes `HTTPCycle` and `WebSocketCycle`
//! subclass it; the engine creates one instance per stream and hands it to the
//! dispatcher (`hooks`, below). No Python object lives as long as an idle connection.
const std = @import("std");
const py = @import("capi.zig");
const c = py.c;
const Object = py.Object;
const scope = @import("scope.zig");
const environ = @import("environ.zig");
const stream_mod = @import("../core/stream.zig");
const Stream = stream_mod.Stream;
const wsconn = @import("../websocket/session.zig");
const compression = @import("../features/compression.zig");
const response = @import("../http/response.zig");
const engine_mod = @import("engine.zig");
const PassSoon = @import("../core/hooks.zig").PassSoon;
const EngineObjectCore = engine_mod.EngineObjectCore;
const asEngine = engine_mod.asEngine;
const closeIfDone = engine_mod.closeIfDone;

const StreamObject = extern struct {
    ob_base: Object,
    /// The engine's stream while the app holds it; null after finish()/abort().
    stream: ?*Stream,
    engine: ?*Object,
    scope: ?*Object,
    read_waiter: ?*Object,
    write_waiter: ?*Object,
    status: c_long,
    /// The response body's bytes as they went out (after compression; no head, chunk
    /// framing or HTTP/2 frame headers), kept when the stream finishes: the access log's size.
    body_bytes: c_longlong,
    body_final: bool,
    finished: bool,
    /// `--compression`: a response head held back until its first body message shows
    /// whether it is the whole body (the normalized header sequence), else null.
    pending_headers: ?*Object,
    pending_trailers: bool,
    /// `--compression` of a streamed response: its encoder (`compression.Encoder`),
    /// from its first body message to its last.
    encoder: ?*compression.Encoder,
};

fn dropEncoder(self: *StreamObject) void {
    if (self.encoder) |e| e.destroy();
    self.encoder = null;
}

pub var stream_type: ?*c.PyTypeObject = null;

fn asStream(o: ?*Object) *StreamObject {
    return @ptrCast(@alignCast(o.?));
}

fn streamDealloc(self_obj: ?*Object) callconv(.c) void {
    const self = asStream(self_obj);
    const tp = py.typeOf(self_obj.?);
    c.PyObject_GC_UnTrack(self_obj);
    // Normally finish() detached us; a stream dropped without it is aborted.
    if (self.stream) |st| {
        self.stream = null;
        st.abort();
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
    inline for (.{ "engine", "scope", "read_waiter", "write_waiter", "pending_headers" }) |f| {
        if (@field(self, f)) |o| {
            const r = v(o, arg);
            if (r != 0) return r;
        }
    }
    return v(@ptrCast(py.typeOf(self_obj.?)), arg);
}

fn streamClear(self_obj: ?*Object) callconv(.c) c_int {
    const self = asStream(self_obj);
    inline for (.{ "engine", "scope", "read_waiter", "write_waiter", "pending_headers" }) |f| {
        const o = @field(self, f);
        @field(self, f) = null;
        py.xdecref(o);
    }
    dropEncoder(self);
    return 0;
}

/// receive(): the next http.request message, http.disconnect, or None when the caller
/// must wait (it stores a future in read_waiter; the engine resolves it).
fn streamRead(self_obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const st = self.stream orelse return scope.disconnectMessage();
    if (st.gone()) return scope.disconnectMessage();
    if (self.body_final) {
        // After the whole body, receive() waits for the client to go away or for the
        // response to be sent, then reports disconnect (uvicorn's behaviour).
        if (st.resp_complete) return scope.disconnectMessage();
        return py.none();
    }
    var segs: [16][]const u8 = undefined;
    const take = st.takeBody(&segs);
    if (take.failed or st.gone()) return scope.disconnectMessage();
    if (take.count == 0 and !take.done) {
        st.bodyConsumed();
        st.awaitBody();
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
    st.bodyConsumed();
    if (take.done) self.body_final = true;
    return scope.requestMessage(body, !take.done);
}

/// read_body(limit) -> bytes | None, for WSGI's wsgi.input: the request body bytes
/// available now, at most `limit` of them, in one bytes object (no message dict): what is
/// buffered, then (HTTP/1.1 with a Content-Length on a plain socket) what the socket has,
/// read straight into it. b"" once the body ended or the client went away
/// (`disconnected` tells which); None when the caller must wait (read_waiter).
fn streamReadBody(self_obj: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const limit_c = c.PyLong_AsSsize_t(arg);
    if (limit_c == -1 and c.PyErr_Occurred() != null) return null;
    if (limit_c <= 0) return py.typeError("read_body() takes a positive limit");
    const limit: usize = @intCast(limit_c);
    const st = self.stream orelse return scope.emptyBytes();
    if (st.gone() or self.body_final) return scope.emptyBytes();
    var segs: [16][]const u8 = undefined;
    const take = st.takeBody(&segs);
    if (take.failed or st.gone()) return scope.emptyBytes();
    var total: usize = 0;
    for (segs[0..take.count]) |seg| total += seg.len;
    // Room for what the socket may have beyond the buffer (bounded by the body's rest).
    // (Never for a body the engine decodes: its encoded length says nothing of what comes.)
    const direct: bool = !take.done and total < limit and st.body_coding.encoding() == null;
    const direct_room: usize = if (!direct) 0 else @intCast(@min(st.body_remaining, limit - total));
    if (total + direct_room == 0) {
        if (take.done) {
            st.bodyConsumed();
            self.body_final = true;
            return scope.emptyBytes();
        }
        st.bodyConsumed();
        st.awaitBody();
        return py.none();
    }
    var b: ?*Object = c.PyBytes_FromStringAndSize(null, @intCast(total + direct_room)) orelse return null;
    const dst: [*]u8 = @ptrCast(c.PyBytes_AsString(b.?));
    var at: usize = 0;
    for (segs[0..take.count]) |seg| {
        @memcpy(dst[at..][0..seg.len], seg);
        at += seg.len;
    }
    st.bodyConsumed();
    if (direct_room > 0) at += st.readBodyDirect(dst[at..][0..direct_room]);
    if (at == 0) {
        py.decref(b.?);
        st.awaitBody();
        return py.none();
    }
    if (at < total + direct_room) {
        if (c._PyBytes_Resize(&b, @intCast(at)) != 0) return null;
    }
    // readBodyDirect may have read the last bytes (a decoded body ends by `take.done` only).
    if (take.done or (st.body_done and st.body_coding.encoding() == null)) self.body_final = true;
    return b;
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

/// The header pairs of `headers` (an iterable of (bytes, bytes)) as slices in the shared
/// scratch, valid until the next call. Null with a Python exception set.
fn headerSlices(headers: *Object, seq_out: *?*Object) ?[]const [2][]const u8 {
    // Any Python code (a custom iterable) runs here, before the shared scratch is touched.
    const seq = normalizedHeaders(headers) orelse return null;
    seq_out.* = seq;
    const n = py.seqLen(seq);
    if (n > max_headers) {
        _ = py.runtimeError("too many response headers");
        return null;
    }
    const items = py.seqItems(seq);
    for (0..n) |i| {
        const pi = py.seqItems(items[i].?);
        header_pairs[i][0] = py.bytesView(pi[0].?) orelse {
            _ = py.typeError("header names must be bytes");
            return null;
        };
        header_pairs[i][1] = py.bytesView(pi[1].?) orelse {
            _ = py.typeError("header values must be bytes");
            return null;
        };
    }
    return header_pairs[0..n];
}

/// start(status, headers, trailers=False): the response head. Headers are (bytes, bytes)
/// pairs; `trailers`: an http.response.trailers message will end the response.
fn streamStart(self_obj: ?*Object, args: [*c]const ?*Object, nargs: c.Py_ssize_t) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    if (nargs != 2 and nargs != 3) return py.typeError("start() takes status, headers and trailers");
    const status = c.PyLong_AsLong(args[0]);
    if (status == -1 and c.PyErr_Occurred() != null) return null;
    if (status < 100 or status > 999) {
        c.PyErr_SetString(c.PyExc_ValueError, "status must be an integer between 100 and 999");
        return null;
    }
    const trailers = if (nargs == 3) c.PyObject_IsTrue(args[2]) else 0;
    if (trailers < 0) return null;
    var seq: ?*Object = null;
    defer py.xdecref(seq);
    const pairs = headerSlices(args[1].?, &seq) orelse return null;
    const engine = asEngine(self.engine);
    self.status = status;
    const st = self.stream orelse return py.none();
    if (self.pending_headers != null) return py.runtimeError("Expected ASGI message 'http.response.body', but got 'http.response.start'.");
    if (st.compress != null and !st.resp_started and trailers == 0 and
        compression.mayCompress(&st.conn.server.opts.compression, st.is_head_method, @intCast(status), pairs))
    {
        // Held back: the first body message decides (`startPending`). Nothing reaches
        // the protocol yet; the header objects are immutable bytes, kept by `seq`.
        for (pairs) |h| if (!response.validName(h[0]) or !response.validValue(h[1]))
            return py.runtimeError("Invalid HTTP header name or value in the response.");
        py.incref(seq.?);
        self.pending_headers = seq;
        self.pending_trailers = false;
        return py.none();
    }
    st.startResponse(@intCast(status), pairs, engine.extraHeaders(), trailers != 0) catch |err| return startError(err);
    return py.none();
}

fn startError(err: stream_mod.StartError) ?*Object {
    return switch (err) {
        error.AlreadyStarted => py.runtimeError("Expected ASGI message 'http.response.body', but got 'http.response.start'."),
        error.InvalidHeader => py.runtimeError("Invalid HTTP header name or value in the response."),
        error.HeadTooLarge => py.runtimeError("Response headers are too large."),
        error.OutOfMemory => py.runtimeError("Out of memory for the response head."),
    };
}

/// The held-back head goes to the protocol: compressed with `body` when `body` is the
/// whole body and large enough (returns the compressed body, a new reference, to write
/// in its place), else as the app gave it (returns null). Null with an exception set
/// and `failed` true on an error.
fn startPending(self: *StreamObject, st: *Stream, body: ?[]const u8, more: bool, failed: *bool) ?*Object {
    const seq = self.pending_headers.?;
    self.pending_headers = null;
    defer py.decref(seq);
    const engine = asEngine(self.engine);
    const status: u16 = @intCast(self.status);
    var hold: ?*Object = null;
    const shared = headerSlices(seq, &hold) orelse {
        failed.* = true;
        return null;
    };
    defer py.xdecref(hold);
    // Off the shared scratch: another thread may use it while the GIL is released.
    var local: [max_headers][2][]const u8 = undefined;
    @memcpy(local[0..shared.len], shared);
    const pairs = local[0..shared.len];
    const opts = &st.conn.server.opts.compression;
    if (body != null and more) streamed: {
        // A streamed response: compressed message by message (`streamWrite`).
        const enc = st.compress.?;
        var rewritten: [max_headers + 2][2][]const u8 = undefined;
        var scratch: [compression.value_bytes_max]u8 = undefined;
        const n = compression.rewriteHead(enc, pairs, &rewritten, &scratch) orelse break :streamed;
        const encoder = compression.Encoder.create(enc, opts.level(enc)) orelse break :streamed;
        st.startResponse(status, rewritten[0..n], engine.extraHeaders(), false) catch |err| {
            encoder.destroy();
            failed.* = true;
            return startError(err);
        };
        self.encoder = encoder;
        return null;
    }
    if (body) |data| if (!more and compression.bodyLargeEnough(opts, data.len)) compressed: {
        const enc = st.compress.?;
        // The codec runs without the GIL: other Python threads go on meanwhile.
        const saved = py.releaseGil();
        const out = compression.compress(std.heap.c_allocator, enc, opts.level(enc), data);
        py.takeGil(saved);
        const bytes = out catch break :compressed;
        defer std.heap.c_allocator.free(bytes);
        var rewritten: [max_headers + 2][2][]const u8 = undefined;
        var scratch: [compression.value_bytes_max]u8 = undefined;
        const n = compression.rewriteHead(enc, pairs, &rewritten, &scratch) orelse break :compressed;
        const obj = c.PyBytes_FromStringAndSize(bytes.ptr, @intCast(bytes.len)) orelse {
            failed.* = true;
            return null;
        };
        st.startResponse(status, rewritten[0..n], engine.extraHeaders(), false) catch |err| {
            py.decref(obj);
            failed.* = true;
            return startError(err);
        };
        return obj;
    };
    st.startResponse(status, pairs, engine.extraHeaders(), self.pending_trailers) catch |err| {
        failed.* = true;
        return startError(err);
    };
    return null;
}

/// early_hint(links): a 103 Early Hints response, one `link` field per entry (bytes or str).
fn streamEarlyHint(self_obj: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const seq = c.PySequence_Fast(arg, "links must be a list of bytes") orelse return null;
    defer py.decref(seq);
    const n = py.seqLen(seq);
    if (n > max_headers) return py.runtimeError("too many early hint links");
    var links: [max_headers][]const u8 = undefined;
    const items = py.seqItems(seq);
    for (0..n) |i| {
        const item = items[i].?;
        links[i] = py.bytesView(item) orelse (if (c.PyUnicode_Check(item) != 0) py.strView(item) else null) orelse
            return py.typeError("each early hint link must be bytes or str");
    }
    const st = self.stream orelse return py.none();
    st.earlyHint(links[0..n]) catch |err| return switch (err) {
        error.AlreadyStarted => py.runtimeError("Unexpected ASGI message 'http.response.early_hint' sent, after the response started."),
        error.InvalidHeader => py.runtimeError("Invalid link value in 'http.response.early_hint'."),
        error.HeadTooLarge => py.runtimeError("Early hint links are too large."),
        error.OutOfMemory => py.runtimeError("Out of memory for the early hint."),
    };
    return py.none();
}

/// write_trailers(headers, more_trailers) -> True when the caller must wait (write_waiter).
fn streamWriteTrailers(self_obj: ?*Object, args: [*c]const ?*Object, nargs: c.Py_ssize_t) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    if (nargs != 2) return py.typeError("write_trailers() takes headers and more_trailers");
    const more = c.PyObject_IsTrue(args[1].?);
    if (more < 0) return null;
    var seq: ?*Object = null;
    defer py.xdecref(seq);
    const fields = headerSlices(args[0].?, &seq) orelse return null;
    const st = self.stream orelse return py.boolean(false);
    const wait = st.writeTrailers(fields, more != 0) catch |err| return switch (err) {
        error.NotDeclared => py.runtimeError("Unexpected ASGI message 'http.response.trailers': 'trailers' was not set in 'http.response.start'."),
        error.BodyNotDone => py.runtimeError("Unexpected ASGI message 'http.response.trailers' before the body ended."),
        error.AlreadyComplete => py.runtimeError("Unexpected ASGI message 'http.response.trailers' sent, after response already completed."),
        error.InvalidHeader => py.runtimeError("Invalid trailer field name or value."),
        error.Forbidden => py.runtimeError("A trailer field may not carry framing, routing or content metadata (e.g. content-length)."),
        error.OutOfMemory => py.runtimeError("Out of memory for the trailers."),
    };
    return py.boolean(wait);
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
    const st = self.stream orelse return py.boolean(false);
    var data = py.bytesView(body_obj).?;
    var compressed: ?*Object = null;
    defer py.xdecref(compressed);
    if (self.pending_headers != null) {
        var failed = false;
        compressed = startPending(self, st, data, more != 0, &failed);
        if (failed) return null;
        if (compressed) |obj| {
            body_obj = obj;
            data = py.bytesView(obj).?;
        }
    }
    if (self.encoder) |encoder| {
        // One app message in, its compressed bytes out, flushed: each event arrives whole.
        var out: std.ArrayListUnmanaged(u8) = .empty;
        defer out.deinit(std.heap.c_allocator);
        const saved = py.releaseGil();
        const r = encoder.feed(std.heap.c_allocator, data, more == 0, &out);
        py.takeGil(saved);
        if (more == 0) dropEncoder(self);
        r catch return py.runtimeError("Response compression failed.");
        const obj = c.PyBytes_FromStringAndSize(out.items.ptr, @intCast(out.items.len)) orelse return null;
        py.xdecref(compressed);
        compressed = obj;
        body_obj = obj;
        data = py.bytesView(obj).?;
    }
    const wait = st.writeBody(data, more != 0, body_obj) catch |err| return switch (err) {
        error.NotStarted => py.runtimeError("Expected ASGI message 'http.response.start', but got 'http.response.body'."),
        error.AlreadyComplete => py.runtimeError("Unexpected ASGI message 'http.response.body' sent, after response already completed."),
        error.Busy => py.runtimeError("send() called while an earlier send() is still in progress."),
        error.TooMuchBody => py.runtimeError("Response content longer than Content-Length"),
        error.TooLittleBody => py.runtimeError("Response content shorter than Content-Length"),
        error.OutOfMemory => py.runtimeError("Out of memory for the response."),
    };
    return py.boolean(wait);
}

/// send_file(path: bytes): `http.response.pathsend`, the file is the rest of the body.
fn streamSendFile(self_obj: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const path = py.bytesView(arg.?) orelse return py.typeError("send_file() takes the path as bytes");
    if (path.len == 0 or path.len >= path_buf.len or std.mem.indexOfScalar(u8, path, 0) != null) {
        c.PyErr_SetString(c.PyExc_ValueError, "'http.response.pathsend' needs a file path");
        return null;
    }
    @memcpy(path_buf[0..path.len], path);
    path_buf[path.len] = 0;
    const st = self.stream orelse return py.none();
    if (self.pending_headers != null) {
        var failed = false;
        _ = startPending(self, st, null, false, &failed);
        if (failed) return null;
    }
    st.sendFile(path_buf[0..path.len :0]) catch |err| return switch (err) {
        error.NotStarted => py.runtimeError("Expected ASGI message 'http.response.start', but got 'http.response.pathsend'."),
        error.AlreadyComplete => py.runtimeError("Unexpected ASGI message 'http.response.pathsend' sent, after response already completed."),
        error.TrailersDeclared => py.runtimeError("'http.response.pathsend' cannot end a response that declared trailers."),
        error.BodyStarted => py.runtimeError("'http.response.pathsend' must be the whole body: 'http.response.body' was sent before it."),
        error.OutOfMemory => py.runtimeError("Out of memory for the file response."),
    };
    return py.none();
}

/// Scratch for send_file's NUL-terminated path (the GIL serialises callers).
var path_buf: [4097]u8 = undefined;

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
    const st = self.stream orelse return;
    if (self.pending_headers != null) {
        // Finished after start without a body: the head goes out as it was given.
        var failed = false;
        _ = startPending(self, st, null, false, &failed);
        if (failed) c.PyErr_Clear();
    }
    dropEncoder(self);
    self.body_bytes = @intCast(st.resp_body_bytes);
    self.stream = null;
    self.finished = true;
    if (abort) st.abort() else st.finish();
    if (self.engine) |e| closeIfDone(asEngine(e));
    // The connection held one reference to us while the request was open.
    py.decref(@ptrCast(self));
}

fn streamGetDisconnected(self_obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    // Without a connection the stream is finished (or was aborted): nobody is listening.
    const st = self.stream orelse return py.boolean(true);
    return py.boolean(st.gone());
}

fn streamGetStatus(self_obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    return c.PyLong_FromLong(asStream(self_obj).status);
}

fn streamGetBodyBytes(self_obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const n: c_longlong = if (self.stream) |st| @intCast(st.resp_body_bytes) else self.body_bytes;
    return c.PyLong_FromLongLong(n);
}

fn streamGetStarted(self_obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    return py.boolean(responseStarted(asStream(self_obj)));
}

fn responseStarted(self: *const StreamObject) bool {
    const st = self.stream orelse return self.status != 0;
    return st.resp_started or self.pending_headers != null;
}

fn streamGetComplete(self_obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const st = self.stream orelse return py.boolean(self.finished);
    return py.boolean(st.resp_complete);
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
    var seq: ?*Object = null;
    defer py.xdecref(seq);
    const pairs = headerSlices(args[1].?, &seq) orelse return null;
    const st = self.stream orelse return py.none();
    const extra = asEngine(self.engine).extraHeaders();
    wsconn.streamAccept(st, sub, pairs, extra) catch |err| return switch (err) {
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
    const st = self.stream orelse return c.PyLong_FromLong(2);
    const wait = wsconn.streamSend(st, data, text) catch |err| return switch (err) {
        error.Closed => c.PyLong_FromLong(2),
        error.OutOfMemory => py.runtimeError("Out of memory for the message."),
    };
    return c.PyLong_FromLong(if (wait) 1 else 0);
}

/// ws_receive(): the next websocket.receive or websocket.disconnect message, or None to wait.
fn streamWsReceive(self_obj: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const st = self.stream orelse return scope.wsDisconnectMessage(1006, "");
    if (wsconn.streamTake(st)) |m| {
        defer m.destroy();
        return scope.wsReceiveMessage(m.text, m.data.items);
    }
    if (!st.isWebSocket() or wsconn.streamFinishedForApp(st))
        return scope.wsDisconnectMessage(wsconn.streamCloseCode(st), wsconn.streamCloseReason(st));
    return py.none();
}

/// ws_close(code: int, reason: str): the close frame (after accept).
fn streamWsClose(self_obj: ?*Object, args: [*c]const ?*Object, nargs: c.Py_ssize_t) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    if (nargs != 2) return py.typeError("ws_close() takes code and reason");
    const code = c.PyLong_AsLong(args[0]);
    if (code == -1 and c.PyErr_Occurred() != null) return null;
    if (code != 1000 and (code < 1000 or code > 4999 or !@import("../websocket/codec.zig").validCloseCode(@intCast(code)))) {
        c.PyErr_SetString(c.PyExc_ValueError, "invalid WebSocket close code");
        return null;
    }
    const reason = py.strView(args[1].?) orelse return null;
    const st = self.stream orelse return py.none();
    wsconn.streamClose(st, @intCast(code), reason);
    return py.none();
}

fn streamGetWsFinished(self_obj: ?*Object, _: ?*anyopaque) callconv(.c) ?*Object {
    const self = asStream(self_obj);
    const st = self.stream orelse return py.boolean(true);
    return py.boolean(wsconn.streamFinishedForApp(st));
}

// ---- send() without a coroutine ---------------------------------------------

/// The names `streamSendPlain` reads, made on its first call (with the GIL held) and kept.
const SendNames = struct {
    type: *Object,
    status: *Object,
    headers: *Object,
    trailers: *Object,
    body: *Object,
    more_body: *Object,
    start: *Object,
    body_type: *Object,
    slow: *Object,
    wait_write: *Object,
};
var send_names: ?SendNames = null;
/// The awaitable `streamSendPlain` returns when nothing is left to wait for (one, shared).
var sent: ?*Object = null;

fn sentAwait(self: ?*Object) callconv(.c) ?*Object {
    py.incref(self.?);
    return self;
}

fn sentNext(_: ?*Object) callconv(.c) ?*Object {
    return null; // no exception set: StopIteration(None)
}

fn sentSend(_: ?*Object, _: ?*Object, result: *?*Object) callconv(.c) c.PySendResult {
    result.* = py.none();
    return c.PYGEN_RETURN;
}

var sent_slots = [_]c.PyType_Slot{
    .{ .slot = c.Py_am_await, .pfunc = @ptrCast(@constCast(&sentAwait)) },
    .{ .slot = c.Py_am_send, .pfunc = @ptrCast(@constCast(&sentSend)) },
    .{ .slot = c.Py_tp_iter, .pfunc = @ptrCast(@constCast(&sentAwait)) },
    .{ .slot = c.Py_tp_iternext, .pfunc = @ptrCast(@constCast(&sentNext)) },
    .{ .slot = 0, .pfunc = null },
};

var sent_spec = c.PyType_Spec{
    .name = "zigcorn._core.Sent",
    .basicsize = @sizeOf(Object),
    .itemsize = 0,
    .flags = c.Py_TPFLAGS_DEFAULT,
    .slots = &sent_slots,
};

fn sendSetup() bool {
    if (send_names != null) return true;
    const tp = c.PyType_FromSpec(&sent_spec) orelse return false;
    defer py.decref(tp);
    const obj = c.PyType_GenericAlloc(@ptrCast(tp), 0) orelse return false;
    var names: SendNames = undefined;
    inline for (.{ "type", "status", "headers", "trailers", "body", "more_body" }) |f| {
        @field(names, f) = py.intern(f) orelse return false;
    }
    names.start = py.intern("http.response.start") orelse return false;
    names.body_type = py.intern("http.response.body") orelse return false;
    names.slow = py.intern("_send") orelse return false;
    names.wait_write = py.intern("_wait_write") orelse return false;
    sent = obj;
    send_names = names;
    return true;
}

fn sameText(a: *Object, b: *Object) bool {
    return a == b or (c.PyUnicode_CheckExact(a) != 0 and c.PyUnicode_Compare(a, b) == 0);
}

/// send_plain(message): `send` for the two messages nearly every response is made of.
/// An http.response.start or http.response.body in a plain dict goes straight to
/// start() or write(), and what comes back is an awaitable already done: an `await
/// send(...)` then costs no coroutine. Anything else (other messages, a second start)
/// gets the coroutine `self._send(message)`, so its errors still come at the await; a
/// body the client must drain first gets `self._wait_write()`.
fn streamSendPlain(self_obj: ?*Object, message: ?*Object) callconv(.c) ?*Object {
    if (!sendSetup()) return null;
    const n = &send_names.?;
    const msg = message.?;
    const kind = if (c.PyDict_CheckExact(msg) != 0) c.PyDict_GetItemWithError(msg, n.type) else null;
    if (kind) |k| {
        if (sameText(k, n.body_type)) return sendBody(self_obj.?, msg, n);
        if (sameText(k, n.start) and !responseStarted(asStream(self_obj))) {
            if (c.PyDict_GetItemWithError(msg, n.status)) |status| return sendStart(self_obj.?, msg, status, n);
        }
    }
    if (c.PyErr_Occurred() != null) return null;
    return c.PyObject_CallMethodOneArg(self_obj, n.slow, msg);
}

fn sendStart(self_obj: *Object, msg: *Object, status: *Object, n: *const SendNames) ?*Object {
    const empty = c.PyTuple_New(0) orelse return null;
    defer py.decref(empty);
    const headers = c.PyDict_GetItemWithError(msg, n.headers) orelse (if (c.PyErr_Occurred() != null) return null else empty);
    const trailers = c.PyDict_GetItemWithError(msg, n.trailers) orelse (if (c.PyErr_Occurred() != null) return null else @as(*Object, @ptrCast(&c._Py_FalseStruct)));
    const args = [_]?*Object{ status, headers, trailers };
    const r = streamStart(self_obj, &args, 3) orelse return null;
    py.decref(r);
    py.incref(sent.?);
    return sent;
}

fn sendBody(self_obj: *Object, msg: *Object, n: *const SendNames) ?*Object {
    var owned: ?*Object = null;
    defer py.xdecref(owned);
    const body = c.PyDict_GetItemWithError(msg, n.body) orelse blk: {
        if (c.PyErr_Occurred() != null) return null;
        owned = scope.emptyBytes();
        break :blk owned.?;
    };
    const more = c.PyDict_GetItemWithError(msg, n.more_body) orelse (if (c.PyErr_Occurred() != null) return null else @as(*Object, @ptrCast(&c._Py_FalseStruct)));
    const args = [_]?*Object{ body, more };
    const r = streamWrite(self_obj, &args, 2) orelse return null;
    defer py.decref(r);
    if (py.isTrue(r)) return c.PyObject_CallMethodNoArgs(self_obj, n.wait_write);
    py.incref(sent.?);
    return sent;
}

var stream_methods = [_]c.PyMethodDef{
    .{ .ml_name = "ws_accept", .ml_meth = @ptrCast(&streamWsAccept), .ml_flags = c.METH_FASTCALL, .ml_doc = "Accept a WebSocket upgrade." },
    .{ .ml_name = "ws_send", .ml_meth = @ptrCast(&streamWsSend), .ml_flags = c.METH_O, .ml_doc = "Send one message; 1 means wait for write_waiter, 2 closed." },
    .{ .ml_name = "ws_receive", .ml_meth = @ptrCast(&streamWsReceive), .ml_flags = c.METH_NOARGS, .ml_doc = "Next WebSocket message, or None to wait." },
    .{ .ml_name = "ws_close", .ml_meth = @ptrCast(&streamWsClose), .ml_flags = c.METH_FASTCALL, .ml_doc = "Send a close frame." },
    .{ .ml_name = "read", .ml_meth = @ptrCast(&streamRead), .ml_flags = c.METH_NOARGS, .ml_doc = "Next request message, or None to wait." },
    .{ .ml_name = "read_body", .ml_meth = @ptrCast(&streamReadBody), .ml_flags = c.METH_O, .ml_doc = "Body bytes available now; b\"\" at the end; None to wait." },
    .{ .ml_name = "start", .ml_meth = @ptrCast(&streamStart), .ml_flags = c.METH_FASTCALL, .ml_doc = "Start the response." },
    .{ .ml_name = "write", .ml_meth = @ptrCast(&streamWrite), .ml_flags = c.METH_FASTCALL, .ml_doc = "Queue body bytes; True means wait for write_waiter." },
    .{ .ml_name = "early_hint", .ml_meth = @ptrCast(&streamEarlyHint), .ml_flags = c.METH_O, .ml_doc = "Send 103 Early Hints with these links." },
    .{ .ml_name = "write_trailers", .ml_meth = @ptrCast(&streamWriteTrailers), .ml_flags = c.METH_FASTCALL, .ml_doc = "Queue trailer fields; True means wait for write_waiter." },
    .{ .ml_name = "send_file", .ml_meth = @ptrCast(&streamSendFile), .ml_flags = c.METH_O, .ml_doc = "Send the file at this path as the rest of the body." },
    .{ .ml_name = "send_plain", .ml_meth = @ptrCast(&streamSendPlain), .ml_flags = c.METH_O, .ml_doc = "send() for start and body messages: an awaitable, already done unless the client must drain." },
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
    .{ .name = "body_bytes", .get = &streamGetBodyBytes, .set = null, .doc = null, .closure = null },
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

pub var stream_spec = c.PyType_Spec{
    .name = "zigcorn._core.Stream",
    .basicsize = @sizeOf(StreamObject),
    .itemsize = 0,
    .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_BASETYPE | c.Py_TPFLAGS_HAVE_GC,
    .slots = &stream_slots,
};

// ---- hooks: the engine calling into Python ----------------------------------

pub fn hookOnRequest(ctx: *anyopaque, st: *Stream, req: *const stream_mod.Request) bool {
    const engine: *EngineObjectCore = @ptrCast(@alignCast(ctx));
    const tp = (if (st.isWebSocket()) engine_mod.webSocketClass(engine) else engine.stream_class) orelse return false;
    const alloc_fn = tp.tp_alloc orelse return false;
    const obj = alloc_fn(tp, 0) orelse {
        c.PyErr_WriteUnraisable(null);
        return false;
    };
    const self = asStream(obj);
    // WSGI: the environ takes the scope's place (the WebSocket class never sees WSGI).
    const built = if (engine.wsgi_environ) |template|
        environ.build(template, req, st.peer(), &engine.info, st.tlsSession())
    else
        scope.build(req, st.peer(), &engine.info, st.tlsView());
    self.scope = built orelse {
        c.PyErr_WriteUnraisable(null);
        py.decref(obj);
        return false;
    };
    py.incref(engine.obj);
    self.engine = engine.obj;
    // The stream's reference; dropped by finish()/abort().
    self.stream = st;
    st.handle = obj;
    const on_request = engine.on_request.?;
    const result = if (c.PyTuple_CheckExact(on_request) != 0) dispatchPlain(on_request, obj) else c.PyObject_CallOneArg(on_request, obj);
    if (result) |r| {
        py.decref(r);
    } else {
        c.PyErr_WriteUnraisable(engine.on_request);
        if (self.stream != null) {
            // Not finished by the dispatcher: the protocol refuses the request.
            self.stream = null;
            py.decref(obj);
            return false;
        }
    }
    return true;
}

var run_name: ?*Object = null;

/// The dispatcher's plain case, done here without calling it: `create_task(stream.run(app,
/// access_log, timeout))`, from the (create_task, app, access_log, timeout) tuple the
/// server gives as on_request when no drain path, limit or per-request context applies.
fn dispatchPlain(plan: *Object, stream: *Object) ?*Object {
    std.debug.assert(c.PyTuple_Size(plan) == 4);
    if (run_name == null) run_name = py.intern("run") orelse return null;
    const args = [_]?*Object{ stream, c.PyTuple_GetItem(plan, 1), c.PyTuple_GetItem(plan, 2), c.PyTuple_GetItem(plan, 3) };
    const coro = c.PyObject_VectorcallMethod(run_name, &args, args.len, null) orelse return null;
    defer py.decref(coro);
    return c.PyObject_CallOneArg(c.PyTuple_GetItem(plan, 0), coro);
}

fn wakeSlot(st: *Stream, comptime field: []const u8) void {
    const obj: *Object = @ptrCast(@alignCast(st.handle orelse return));
    const stream = asStream(obj);
    const waiter = @field(stream, field) orelse return;
    @field(stream, field) = null;
    defer py.decref(waiter);
    const engine = asEngine(stream.engine);
    const r = c.PyObject_CallOneArg(engine.wake, waiter);
    if (r) |o| py.decref(o) else c.PyErr_WriteUnraisable(engine.wake);
}

pub fn hookWakeRead(s: *Stream) void {
    wakeSlot(s, "read_waiter");
}

pub fn hookWakeWrite(s: *Stream) void {
    wakeSlot(s, "write_waiter");
}

pub fn hookOnSettle(ctx: *anyopaque) void {
    const engine: *EngineObjectCore = @ptrCast(@alignCast(ctx));
    // zigcorn's loop settles at the end of its pass: the pending flag is all it needs.
    if (engine.loop_driven) return;
    if (scheduleSettle(engine)) return;
    // Nothing to defer to (no loop, or it refused): wake the writer now, skip the spin.
    if (engine.server) |s| _ = s.settleBegin();
}

fn scheduleSettle(engine: *EngineObjectCore) bool {
    return callSoon(engine, "settle");
}

pub fn hookPassSoon(ctx: *anyopaque) PassSoon {
    const engine: *EngineObjectCore = @ptrCast(@alignCast(ctx));
    // zigcorn's loop asks the engine (`Server.needsPass`) before it waits.
    if (engine.loop_driven) return .loop_checks;
    return if (callSoon(engine, "poll")) .asked else .refused;
}

/// The engine's `method` run by the loop after the callbacks already ready (its
/// call_soon, in the engine's own context); false when there is no loop or it refused.
fn callSoon(engine: *EngineObjectCore, comptime method: [:0]const u8) bool {
    const call_soon = engine.call_soon orelse return false;
    // A fresh bound method each time: a stored one would be a cycle through the engine.
    const m = c.PyObject_GetAttrString(engine.obj, method) orelse {
        c.PyErr_WriteUnraisable(engine.obj);
        return false;
    };
    defer py.decref(m);
    const r = c.PyObject_CallOneArg(call_soon, m) orelse {
        c.PyErr_WriteUnraisable(call_soon);
        return false;
    };
    py.decref(r);
    return true;
}

/// The engine's own log lines (a connection it dropped, accepting paused) on `zigcorn.error`.
pub fn hookLog(_: *anyopaque, level: @import("../core/server.zig").LogLevel, message: []const u8) void {
    const logging = c.PyImport_ImportModule("logging") orelse return c.PyErr_WriteUnraisable(null);
    defer py.decref(logging);
    const name: [*:0]const u8 = if (level == .access) "zigcorn.access" else "zigcorn.error";
    const logger = c.PyObject_CallMethod(logging, "getLogger", "s", name) orelse return c.PyErr_WriteUnraisable(null);
    defer py.decref(logger);
    const method: [*:0]const u8 = switch (level) {
        .warning => "warning",
        .err => "error",
        .access => "info",
    };
    const r = c.PyObject_CallMethod(logger, method, "s#", message.ptr, @as(c.Py_ssize_t, @intCast(message.len))) orelse return c.PyErr_WriteUnraisable(null);
    py.decref(r);
}

pub fn hookRetain(o: *anyopaque) void {
    py.incref(@ptrCast(@alignCast(o)));
}

pub fn hookRelease(o: *anyopaque) void {
    py.decref(@ptrCast(@alignCast(o)));
}

fn fail(o: *Object) ?*Object {
    py.decref(o);
    return null;
}
