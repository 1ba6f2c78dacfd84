//! The ASGI HTTP scope and messages, built in Zig so that a request costs Python
//! only the objects the app can see. Keys, common values and common header names
//! are created once and shared by every request.
const std = @import("std");
const http_fields = @import("../http/fields.zig");
const py = @import("capi.zig");
const Request = @import("../core/stream.zig").Request;
const Peer = @import("../core/connection.zig").Peer;
const proxy = @import("../features/forwarded.zig");
const tls = @import("../transport/openssl.zig");
const tracing = @import("../features/tracing.zig");
const Object = py.Object;
const c = py.c;

const Keys = struct {
    type: *Object,
    asgi: *Object,
    version: *Object,
    spec_version: *Object,
    http_version: *Object,
    method: *Object,
    scheme: *Object,
    path: *Object,
    raw_path: *Object,
    query_string: *Object,
    root_path: *Object,
    headers: *Object,
    client: *Object,
    server: *Object,
    state: *Object,
    extensions: *Object,
    body: *Object,
    more_body: *Object,
    text: *Object,
    bytes: *Object,
    code: *Object,
    reason: *Object,
    // The ASGI TLS extension, plus the SNI host name as `server_name`.
    tls: *Object,
    server_cert: *Object,
    client_cert_chain: *Object,
    client_cert_name: *Object,
    client_cert_error: *Object,
    tls_version: *Object,
    cipher_suite: *Object,
    server_name: *Object,
    // ASGI extensions, by their names in scope["extensions"].
    early_hint: *Object,
    trailers: *Object,
    pathsend: *Object,
};

/// Keys whose text is not their field name.
const key_names = .{
    .{ "early_hint", "http.response.early_hint" },
    .{ "trailers", "http.response.trailers" },
    .{ "pathsend", "http.response.pathsend" },
};

const Values = struct {
    http: *Object,
    https: *Object,
    asgi_version: *Object,
    spec_version: *Object,
    http11: *Object,
    http10: *Object,
    http2: *Object,
    http3: *Object,
    http_request: *Object,
    http_disconnect: *Object,
    empty_bytes: *Object,
    ws_receive: *Object,
    ws_disconnect: *Object,
    /// {"http.response.early_hint": {}, "http.response.trailers": {}, "http.response.pathsend": {}}: copied per scope.
    extensions: *Object,
    /// {"version": "3.0", "spec_version": "2.3"}: copied per scope (an app may change its own).
    asgi: *Object = undefined,
    /// The scope's keys, in their order, each with None: a scope starts as its copy, so
    /// the dict is allocated once at its final size instead of growing twice (and the
    /// copy of a template is one memcpy of its table).
    scope: *Object = undefined,
};

const common_methods = [_][:0]const u8{ "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH" };

/// Header names common enough to share one bytes object across requests.
pub const common_headers = [_][:0]const u8{
    "host",              "user-agent",            "accept",                 "accept-encoding",
    "accept-language",   "connection",            "content-type",           "content-length",
    "cookie",            "referer",               "cache-control",          "origin",
    "upgrade",           "transfer-encoding",     "authorization",          "x-forwarded-for",
    "x-forwarded-proto", "x-forwarded-host",      "x-real-ip",              "x-request-id",
    "if-none-match",     "if-modified-since",     "pragma",                 "expect",
    "sec-fetch-mode",    "sec-fetch-site",        "sec-fetch-dest",         "keep-alive",
    "sec-websocket-key", "sec-websocket-version", "sec-websocket-protocol", "sec-websocket-extensions",
};

pub const header_index = blk: {
    var kvs: [common_headers.len]struct { []const u8, usize } = undefined;
    for (common_headers, 0..) |name, i| kvs[i] = .{ name, i };
    break :blk std.StaticStringMap(usize).initComptime(kvs);
};

/// The keys every HTTP scope has, in the order `fill` sets them (`state` comes last, when there is one).
const scope_keys = .{
    "type",     "asgi",         "http_version", "method",  "scheme", "extensions", "path",
    "raw_path", "query_string", "root_path",    "headers", "client", "server",
};

var keys: Keys = undefined;
/// Scratch for building paths; only touched with the GIL held, never across calls.
var path_scratch: [8192]u8 = undefined;
var values: Values = undefined;
var methods: [common_methods.len]*Object = undefined;
var header_names: [common_headers.len]*Object = undefined;

/// Creates the shared objects once, at module import. They live as long as the process.
pub fn init() bool {
    inline for (@typeInfo(Keys).@"struct".fields) |f| {
        @field(keys, f.name) = py.intern(f.name) orelse return false;
    }
    // (The field-name strings interned just above for these stay interned: made once.)
    inline for (key_names) |k| @field(keys, k[0]) = py.intern(k[1]) orelse return false;
    values = .{
        .http = py.intern("http") orelse return false,
        .https = py.intern("https") orelse return false,
        .asgi_version = py.intern("3.0") orelse return false,
        .spec_version = py.intern("2.3") orelse return false,
        .http11 = py.intern("1.1") orelse return false,
        .http10 = py.intern("1.0") orelse return false,
        .http2 = py.intern("2") orelse return false,
        .http3 = py.intern("3") orelse return false,
        .http_request = py.intern("http.request") orelse return false,
        .http_disconnect = py.intern("http.disconnect") orelse return false,
        .empty_bytes = py.bytes("") orelse return false,
        .ws_receive = py.intern("websocket.receive") orelse return false,
        .ws_disconnect = py.intern("websocket.disconnect") orelse return false,
        .extensions = c.PyDict_New() orelse return false,
    };
    inline for (.{ keys.early_hint, keys.trailers, keys.pathsend }) |name| {
        if (!py.dictSetSteal(values.extensions, name, c.PyDict_New())) return false;
    }
    values.asgi = c.PyDict_New() orelse return false;
    if (c.PyDict_SetItem(values.asgi, keys.version, values.asgi_version) != 0 or
        c.PyDict_SetItem(values.asgi, keys.spec_version, values.spec_version) != 0) return false;
    values.scope = c.PyDict_New() orelse return false;
    inline for (scope_keys) |name| {
        // `type` and `http_version` start as what nearly every scope has ("http", "1.1"),
        // so `fill` sets them only when they differ.
        const value = if (comptime std.mem.eql(u8, name, "type")) values.http else if (comptime std.mem.eql(u8, name, "http_version")) values.http11 else py.borrowedNone();
        if (c.PyDict_SetItem(values.scope, @field(keys, name), value) != 0) return false;
    }
    for (common_methods, 0..) |m, i| methods[i] = c.PyUnicode_InternFromString(m.ptr) orelse return false;
    for (common_headers, 0..) |h, i| header_names[i] = py.bytes(h) orelse return false;
    return true;
}

/// Per-server parts of every scope, built once when the server starts.
pub const ServerInfo = struct {
    /// ("host", port) tuple, or None.
    server: ?*Object,
    /// str
    root_path: ?*Object,
    /// UTF-8 bytes of root_path, prefixed to raw_path and path like uvicorn does.
    root_path_utf8: []const u8,
    /// "http" or "https"
    scheme: ?*Object,
    /// Lifespan state: each request gets a shallow copy. Null when there is none.
    state: ?*Object,
    /// Peers whose proxy headers are believed; null when --no-proxy-headers.
    trust: ?*const proxy.Trust = null,
    /// HTTPS: the server's certificate as a PEM str, shared by every scope.
    tls_server_cert: ?*Object = null,
};

/// What trusted proxies say about this request (nothing for anyone else).
pub fn forwardedFor(req: *const Request, peer: *const Peer, info: *const ServerInfo) proxy.Forwarded {
    const trust = info.trust orelse return .{};
    return if (trust.trustsPeer(peer.family, &peer.addr)) proxy.resolve(trust, req.headers) else .{};
}

pub fn method(name: []const u8) ?*Object {
    for (common_methods, 0..) |m, i| {
        if (sameBytes(m, name)) {
            py.incref(methods[i]);
            return methods[i];
        }
    }
    return py.str(name);
}

fn headerName(name: []const u8) ?*Object {
    if (commonHeaderIndex(name)) |i| {
        py.incref(header_names[i]);
        return header_names[i];
    }
    return py.bytes(name);
}

/// `forwarded_host`, from a trusted proxy, replaces the Host header's value. The
/// request id and trace context replace incoming fields of their names, and come last.
fn headers(req: *const Request, forwarded_host: ?[]const u8) ?*Object {
    const added = &req.added;
    if (!added.any()) {
        const list = c.PyList_New(@intCast(req.headers.len)) orelse return null;
        for (req.headers, 0..) |h, i| {
            if (!setHeader(list, i, h.name, if (forwarded_host != null and std.mem.eql(u8, h.name, "host")) forwarded_host.? else h.value)) return fail(list);
        }
        return list;
    }
    // The request id and trace context replace incoming fields of their names, and come last.
    var extra: [tracing.appended_max][2][]const u8 = undefined;
    const appended = added.appended(&extra);
    // Only a request that brought fields of those names pays for a second look at each.
    const drops_some = added.dropsSome();
    var kept = req.headers.len;
    if (drops_some) {
        for (req.headers) |h| kept -= @intFromBool(added.drops(h.name));
    }
    const list = c.PyList_New(@intCast(kept + appended.len)) orelse return null;
    var i: usize = 0;
    for (req.headers) |h| {
        if (drops_some and added.drops(h.name)) continue;
        if (!setHeader(list, i, h.name, if (forwarded_host != null and std.mem.eql(u8, h.name, "host")) forwarded_host.? else h.value)) return fail(list);
        i += 1;
    }
    for (appended, 0..) |f, slot| {
        py.listInit(list, i, addedPair(slot, f[0], f[1]) orelse return fail(list));
        i += 1;
    }
    std.debug.assert(i == kept + appended.len);
    return list;
}

/// The name objects of the fields the engine appends (`Added.appended`'s slots): their
/// texts are the server's settings or literals, the same slices every request, so the
/// last one's object serves again without a look-up.
var added_names: [tracing.appended_max]struct { text: []const u8 = "", obj: ?*Object = null } = @splat(.{});

fn addedName(slot: usize, text: []const u8) ?*Object {
    const cached = &added_names[slot];
    if (cached.obj) |o| {
        if (cached.text.ptr == text.ptr and cached.text.len == text.len) {
            py.incref(o);
            return o;
        }
    }
    const o = headerName(text) orelse return null;
    py.xdecref(cached.obj);
    py.incref(o);
    cached.* = .{ .text = text, .obj = o };
    return o;
}

/// The last (name, value) tuple made for each appended slot. Once the request that saw
/// it is over, only this cache holds the tuple (reference count 1) and only the tuple
/// holds its value: nobody can see them, so the next request's id or traceparent is
/// written into them in place instead of making and freeing two objects a request (the
/// reuse CPython's own zip() does with its result tuple). A request whose headers the
/// app kept, or a value of another length, gets new objects.
var added_pairs: [tracing.appended_max]?*Object = @splat(null);

/// New reference: the tuple for appended slot `slot`.
fn addedPair(slot: usize, name_text: []const u8, value_text: []const u8) ?*Object {
    if (added_pairs[slot]) |pair| {
        if (refillPair(slot, pair, name_text, value_text)) {
            py.incref(pair);
            return pair;
        }
    }
    const pair = c.PyTuple_New(2) orelse return null;
    py.tupleInit(pair, 0, addedName(slot, name_text) orelse return fail(pair));
    py.tupleInit(pair, 1, py.bytes(value_text) orelse return fail(pair));
    py.xdecref(added_pairs[slot]);
    py.incref(pair);
    added_pairs[slot] = pair;
    return pair;
}

/// Rewrites a cached pair's value when nothing but the cache can see it.
fn refillPair(slot: usize, pair: *Object, name_text: []const u8, value_text: []const u8) bool {
    // Without the hash field to reset, a reused object could keep a stale hash.
    if (!@hasField(c.PyBytesObject, "ob_shash")) return false;
    if (py.refCount(pair) != 1) return false;
    const tuple: *c.PyTupleObject = @ptrCast(@alignCast(pair));
    const items: [*]?*Object = @ptrCast(&tuple.ob_item);
    // The name: the slot's cached object for this very setting.
    const name = &added_names[slot];
    if (name.obj != items[0] or name.text.ptr != name_text.ptr or name.text.len != name_text.len) return false;
    const value = items[1].?;
    const value_obj: *c.PyBytesObject = @ptrCast(@alignCast(value));
    if (py.refCount(value) != 1 or value_obj.ob_base.ob_size != value_text.len) return false;
    if (@hasField(c.PyTupleObject, "ob_hash")) tuple.ob_hash = -1;
    value_obj.ob_shash = -1;
    const dst: [*]u8 = @ptrCast(&value_obj.ob_sval);
    @memcpy(dst[0..value_text.len], value_text);
    return true;
}

/// The last (name, value) pair made for each common header name, reused while its value
/// repeats (a keep-alive client sends the same Host, User-Agent, Accept... each time):
/// a tuple of two bytes objects is immutable. Longer values are not kept, which bounds
/// what the cache holds to `common_headers.len` short pairs. Touched only with the GIL held.
const pair_value_len_max = 256;
var last_pairs: [common_headers.len]?*Object = @splat(null);

/// The value bytes of each `last_pairs` tuple (its bytes object's own buffer, alive as
/// long as the pair is held there).
var last_values: [common_headers.len][]const u8 = @splat(&.{});

/// list[i] = (name, value) as bytes; false with a Python error set.
fn setHeader(list: *Object, i: usize, name_text: []const u8, value_text: []const u8) bool {
    const index = commonHeaderIndex(name_text) orelse
        return setHeaderNamed(list, i, py.bytes(name_text) orelse return false, value_text);
    if (last_pairs[index]) |pair| {
        if (sameBytes(last_values[index], value_text)) {
            py.incref(pair);
            py.listInit(list, i, pair);
            return true;
        }
    }
    py.incref(header_names[index]);
    if (!setHeaderNamed(list, i, header_names[index], value_text)) return false;
    if (value_text.len <= pair_value_len_max) {
        const pair = c.PyList_GetItem(list, @intCast(i)).?;
        py.incref(pair);
        py.xdecref(last_pairs[index]);
        last_pairs[index] = pair;
        last_values[index] = py.bytesView(c.PyTuple_GetItem(pair, 1).?).?;
    }
    return true;
}

/// `std.mem.eql`, with values up to 16 bytes compared inline in two overlapping words.
inline fn sameBytes(a: []const u8, b: []const u8) bool {
    if (a.len != b.len) return false;
    const n = a.len;
    if (n >= 8 and n <= 16) {
        return std.mem.readInt(u64, a[0..8], .little) == std.mem.readInt(u64, b[0..8], .little) and
            std.mem.readInt(u64, a[n - 8 ..][0..8], .little) == std.mem.readInt(u64, b[n - 8 ..][0..8], .little);
    }
    if (n >= 4 and n < 8) {
        return std.mem.readInt(u32, a[0..4], .little) == std.mem.readInt(u32, b[0..4], .little) and
            std.mem.readInt(u32, a[n - 4 ..][0..4], .little) == std.mem.readInt(u32, b[n - 4 ..][0..4], .little);
    }
    return std.mem.eql(u8, a, b);
}

/// `header_index.get(name)`, as a switch on the length and word comparisons against the
/// few names of that length (no loop over candidates, no calls).
fn commonHeaderIndex(name: []const u8) ?usize {
    @setEvalBranchQuota(20_000);
    const lengths = comptime blk: {
        var max = 0;
        for (common_headers) |h| max = @max(max, h.len);
        break :blk max;
    };
    switch (name.len) {
        inline 1...lengths => |len| {
            inline for (common_headers, 0..) |h, index| {
                if (h.len == len and equalsConstant(len, name[0..len], h)) return index;
            }
            return null;
        },
        else => return null,
    }
}

/// `bytes` equals the compile-time `text` of the same length, in 8-byte (or 4-byte)
/// words, the last one overlapping.
inline fn equalsConstant(comptime len: usize, bytes: *const [len]u8, comptime text: []const u8) bool {
    if (len < 4) {
        inline for (0..len) |k| if (bytes[k] != text[k]) return false;
        return true;
    }
    const W = if (len >= 8) u64 else u32;
    const w = @sizeOf(W);
    comptime var offset: usize = 0;
    inline while (true) {
        const at: usize = @min(offset, len - w);
        const want = comptime std.mem.readInt(W, text[at..][0..w], .little);
        if (std.mem.readInt(W, bytes[at..][0..w], .little) != want) return false;
        if (at + w == len) break;
        offset += w;
    }
    return true;
}

/// list[i] = (name, value), taking the reference to `name`; false with a Python error set.
inline fn setHeaderNamed(list: *Object, i: usize, name: *Object, value_text: []const u8) bool {
    const pair = c.PyTuple_New(2) orelse {
        py.decref(name);
        return false;
    };
    // The slots steal, so each object has exactly one owner; a slot left empty by a
    // failure is skipped when the list is freed.
    py.listInit(list, i, pair);
    py.tupleInit(pair, 0, name);
    const value = py.bytes(value_text) orelse return false;
    py.tupleInit(pair, 1, value);
    return true;
}

fn fail(o: *Object) ?*Object {
    py.decref(o);
    return null;
}

/// The last client tuple made from a socket's own peer: every request of a keep-alive
/// connection (and of the next one from the same address and port) reuses the
/// immutable tuple instead of formatting the address again. Touched only with the GIL held.
var last_client: struct { peer: Peer = .{}, tuple: ?*Object = null } = .{};

fn samePeer(a: *const Peer, b: *const Peer) bool {
    if (a.family != b.family or a.port != b.port) return false;
    const len: usize = if (a.family == std.os.linux.AF.INET) 4 else a.addr.len;
    return sameBytes(a.addr[0..len], b.addr[0..len]);
}

fn client(peer: *const Peer, fwd: *const proxy.Forwarded) ?*Object {
    if (fwd.client_host != null) return clientTuple(peer, fwd);
    if (last_client.tuple) |t| {
        if (samePeer(&last_client.peer, peer)) {
            py.incref(t);
            return t;
        }
    }
    const t = clientTuple(peer, fwd) orelse return null;
    if (t == py.borrowedNone()) return t;
    py.xdecref(last_client.tuple);
    py.incref(t);
    last_client = .{ .peer = peer.*, .tuple = t };
    return t;
}

fn clientTuple(peer: *const Peer, fwd: *const proxy.Forwarded) ?*Object {
    var buf: [64]u8 = undefined;
    const host = fwd.client_host orelse peer.format(&buf);
    const port = if (fwd.client_host != null) fwd.client_port else peer.port;
    if (host.len == 0) return py.none();
    const t = c.PyTuple_New(2) orelse return null;
    _ = c.PyTuple_SetItem(t, 0, py.str(host) orelse return fail(t));
    _ = c.PyTuple_SetItem(t, 1, c.PyLong_FromLong(port) orelse return fail(t));
    return t;
}

/// `path` is percent-decoded and read as UTF-8 (invalid sequences replaced), with
/// root_path in front, as in uvicorn.
fn paths(req: *const Request, info: *const ServerInfo, path_out: *?*Object, raw_out: *?*Object) bool {
    const root = info.root_path_utf8;
    const stack = &path_scratch;
    const need = root.len + req.path.len;
    var heap: ?[]u8 = null;
    defer if (heap) |h| std.heap.c_allocator.free(h);
    const scratch: []u8 = if (need <= stack.len) stack[0..need] else blk: {
        heap = std.heap.c_allocator.alloc(u8, need) catch {
            _ = c.PyErr_NoMemory();
            return false;
        };
        break :blk heap.?;
    };
    @memcpy(scratch[0..root.len], root);
    @memcpy(scratch[root.len..][0..req.path.len], req.path);
    raw_out.* = py.bytes(scratch) orelse return false;
    const decoded_len = root.len + http_fields.percentDecode(req.path, scratch[root.len..]);
    path_out.* = c.PyUnicode_DecodeUTF8(scratch.ptr, @intCast(decoded_len), "replace") orelse return false;
    return true;
}

/// New reference: the scope dict of one HTTP request, from any protocol's view of it.
/// `session` is the connection's TLS session (null for plain HTTP; over HTTP/3 what its
/// handshake kept): it decides the scheme and adds `extensions["tls"]`.
pub fn build(
    req: *const Request,
    peer: *const Peer,
    info: *const ServerInfo,
    session: ?tls.SessionView,
) ?*Object {
    const d = c.PyDict_Copy(values.scope) orelse return null;
    if (!fill(d, req, peer, info, session)) return fail(d);
    std.debug.assert(c.PyDict_Size(d) == scope_keys.len + @intFromBool(info.state != null));
    return d;
}

fn fill(
    d: *Object,
    req: *const Request,
    peer: *const Peer,
    info: *const ServerInfo,
    session: ?tls.SessionView,
) bool {
    // `type` is "http" already, from the template (`init`).
    if (!py.dictSetSteal(d, keys.asgi, c.PyDict_Copy(values.asgi))) return false;
    const version = switch (req.version) {
        .http10 => values.http10,
        .http11 => null, // the template's
        .http2 => values.http2,
        .http3 => values.http3,
    };
    if (version) |v| if (c.PyDict_SetItem(d, keys.http_version, v) != 0) return false;
    if (!py.dictSetSteal(d, keys.method, method(req.method))) return false;
    const fwd = forwardedFor(req, peer, info);
    const scheme_obj = if (fwd.scheme) |sch| (if (sch == .https) values.https else values.http) else if (session != null or req.version == .http3) values.https else info.scheme.?;
    if (c.PyDict_SetItem(d, keys.scheme, scheme_obj) != 0) return false;
    // The ASGI extensions the engine serves, and the TLS one on HTTPS. Each request gets
    // its own `extensions` dict; the extensions' own (empty) dicts are shared, made once.
    const ext = c.PyDict_Copy(values.extensions) orelse return false;
    if (!py.dictSetSteal(d, keys.extensions, ext)) return false;
    if (session) |view| {
        if (!py.dictSetSteal(ext, keys.tls, tlsInfo(view, info))) return false;
    }
    var path: ?*Object = null;
    var raw: ?*Object = null;
    if (!paths(req, info, &path, &raw)) {
        py.xdecref(raw);
        return false;
    }
    if (!py.dictSetSteal(d, keys.path, path)) {
        py.xdecref(raw);
        return false;
    }
    if (!py.dictSetSteal(d, keys.raw_path, raw)) return false;
    const query = if (req.query.len == 0) blk: {
        py.incref(values.empty_bytes);
        break :blk values.empty_bytes;
    } else py.bytes(req.query);
    if (!py.dictSetSteal(d, keys.query_string, query)) return false;
    if (c.PyDict_SetItem(d, keys.root_path, info.root_path.?) != 0) return false;
    if (!py.dictSetSteal(d, keys.headers, headers(req, fwd.host))) return false;
    if (!py.dictSetSteal(d, keys.client, client(peer, &fwd))) return false;
    if (c.PyDict_SetItem(d, keys.server, info.server.?) != 0) return false;
    if (info.state) |state| {
        if (!py.dictSetSteal(d, keys.state, c.PyDict_Copy(state))) return false;
    }
    return true;
}

/// New reference: {"type": "http.request", "body": body, "more_body": more}. Steals body.
pub fn requestMessage(body: *Object, more: bool) ?*Object {
    const d = c.PyDict_New() orelse {
        py.decref(body);
        return null;
    };
    if (c.PyDict_SetItem(d, keys.type, values.http_request) != 0 or
        !py.dictSetSteal(d, keys.body, body) or
        !py.dictSetSteal(d, keys.more_body, py.boolean(more)))
    {
        return fail(d);
    }
    return d;
}

/// New reference: {"type": "http.disconnect"}.
pub fn disconnectMessage() ?*Object {
    const d = c.PyDict_New() orelse return null;
    if (c.PyDict_SetItem(d, keys.type, values.http_disconnect) != 0) return fail(d);
    return d;
}

pub fn emptyBytes() *Object {
    py.incref(values.empty_bytes);
    return values.empty_bytes;
}

/// New reference: {"type": "websocket.receive", "text": str} or {..., "bytes": bytes}.
/// Text was validated as UTF-8 by the engine.
pub fn wsReceiveMessage(text: bool, data: []const u8) ?*Object {
    const d = c.PyDict_New() orelse return null;
    if (c.PyDict_SetItem(d, keys.type, values.ws_receive) != 0) return fail(d);
    const ok = if (text)
        py.dictSetSteal(d, keys.text, c.PyUnicode_DecodeUTF8(data.ptr, @intCast(data.len), "strict"))
    else
        py.dictSetSteal(d, keys.bytes, py.bytes(data));
    if (!ok) return fail(d);
    return d;
}

/// New reference: {"type": "websocket.disconnect", "code": code, "reason": reason}.
pub fn wsDisconnectMessage(code: u16, reason: []const u8) ?*Object {
    const d = c.PyDict_New() orelse return null;
    if (c.PyDict_SetItem(d, keys.type, values.ws_disconnect) != 0 or
        !py.dictSetSteal(d, keys.code, c.PyLong_FromLong(code)) or
        !py.dictSetSteal(d, keys.reason, c.PyUnicode_DecodeUTF8(reason.ptr, @intCast(reason.len), "replace")))
    {
        return fail(d);
    }
    return d;
}
// ---- the ASGI TLS extension -----------------------------------------------------

fn strOrNone(text: ?[]const u8) ?*Object {
    const t = text orelse return py.none();
    return c.PyUnicode_DecodeUTF8(t.ptr, @intCast(t.len), "replace");
}

fn intOrNone(v: ?u16) ?*Object {
    const n = v orelse return py.none();
    return c.PyLong_FromLong(n);
}

/// New reference: a certificate as a PEM str.
fn pemStr(x: *tls.X509) ?*Object {
    const text = tls.pem(x) orelse return py.runtimeError("could not encode a certificate");
    defer text.deinit();
    return strOrNone(text.bytes());
}

/// New reference: the client's certificate and the chain it sent, as PEM strs (leaf first).
fn clientChain(view: tls.SessionView, leaf: ?*tls.X509) ?*Object {
    const list = c.PyList_New(0) orelse return null;
    const x = leaf orelse return list;
    const item = pemStr(x) orelse return fail(list);
    const ok = c.PyList_Append(list, item) == 0;
    py.decref(item);
    if (!ok) return fail(list);
    // Bounded by what OpenSSL accepted (its verify depth), and the leaf is not repeated.
    for (0..view.chainLen()) |i| {
        const cert = view.chainAt(i) orelse continue;
        if (cert == x) continue;
        const pem_item = pemStr(cert) orelse return fail(list);
        defer py.decref(pem_item);
        if (c.PyList_Append(list, pem_item) != 0) return fail(list);
    }
    return list;
}

/// New reference: scope["extensions"]["tls"] for one request.
fn tlsInfo(view: tls.SessionView, info: *const ServerInfo) ?*Object {
    const d = c.PyDict_New() orelse return null;
    const server_cert = info.tls_server_cert orelse py.none();
    if (info.tls_server_cert != null) py.incref(server_cert);
    if (!py.dictSetSteal(d, keys.server_cert, server_cert)) return fail(d);
    const leaf = view.peerCertificate();
    defer if (leaf) |x| tls.freeCertificate(x);
    if (!py.dictSetSteal(d, keys.client_cert_chain, clientChain(view, leaf))) return fail(d);
    const name: ?*Object = if (leaf) |x| blk: {
        const text = tls.subjectName(x) orelse break :blk py.none();
        defer text.deinit();
        break :blk strOrNone(text.bytes());
    } else py.none();
    if (!py.dictSetSteal(d, keys.client_cert_name, name)) return fail(d);
    const verify_error: ?[]const u8 = if (leaf != null) view.verifyError() else null;
    if (!py.dictSetSteal(d, keys.client_cert_error, strOrNone(verify_error))) return fail(d);
    if (!py.dictSetSteal(d, keys.tls_version, intOrNone(view.protocolVersion()))) return fail(d);
    if (!py.dictSetSteal(d, keys.cipher_suite, intOrNone(view.cipherSuite()))) return fail(d);
    if (!py.dictSetSteal(d, keys.server_name, strOrNone(view.serverName()))) return fail(d);
    return d;
}

/// New reference: the server certificate of a TLS context as a PEM str, or None.
pub fn serverCertPem(ctx: *tls.SSL_CTX) ?*Object {
    const x = tls.serverCertificate(ctx) orelse return py.none();
    return pemStr(x);
}

test "commonHeaderIndex finds each common name, and nothing else" {
    for (common_headers, 0..) |h, i| try std.testing.expectEqual(@as(?usize, i), commonHeaderIndex(h));
    var name: [40]u8 = undefined;
    for (common_headers) |h| {
        // One byte changed at each position: never found (as by the map).
        for (0..h.len) |at| {
            @memcpy(name[0..h.len], h);
            name[at] ^= 0x01;
            try std.testing.expectEqual(header_index.get(name[0..h.len]), commonHeaderIndex(name[0..h.len]));
        }
        try std.testing.expectEqual(@as(?usize, null), commonHeaderIndex(h[0 .. h.len - 1]));
    }
    try std.testing.expectEqual(@as(?usize, null), commonHeaderIndex(""));
    try std.testing.expectEqual(@as(?usize, null), commonHeaderIndex("x" ** 40));
}

test "sameBytes is std.mem.eql at every length up to 24" {
    var a: [24]u8 = undefined;
    var b: [24]u8 = undefined;
    for (0..25) |n| {
        for (0..n + 1) |at| {
            @memset(&a, 'v');
            @memset(&b, 'v');
            if (at < n) b[at] = 'w';
            try std.testing.expectEqual(std.mem.eql(u8, a[0..n], b[0..n]), sameBytes(a[0..n], b[0..n]));
            if (n > 0) try std.testing.expect(!sameBytes(a[0..n], b[0 .. n - 1]));
        }
    }
}
