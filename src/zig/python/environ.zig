//! The WSGI environ (PEP 3333) of one request, built in Zig from the same parsed request
//! the ASGI scope comes from (`scope.zig`). The constant keys (`wsgi.*`, `SERVER_NAME`,
//! `SERVER_PORT`, `SCRIPT_NAME`) are in a template dict the Python side builds once
//! (`zigcorn/protocols/wsgi.py`); each request gets a copy of it plus its own keys. Every str is
//! the request's bytes decoded as latin-1, as PEP 3333 asks ("bytes in str clothing").
const std = @import("std");
const http_fields = @import("../http/fields.zig");
const py = @import("capi.zig");
const Request = @import("../core/stream.zig").Request;
const Peer = @import("../core/connection.zig").Peer;
const tls = @import("../transport/openssl.zig");
const tracing = @import("../features/tracing.zig");
const scope = @import("scope.zig");
const Object = py.Object;
const c = py.c;

const Keys = struct {
    REQUEST_METHOD: *Object,
    PATH_INFO: *Object,
    QUERY_STRING: *Object,
    SERVER_PROTOCOL: *Object,
    CONTENT_TYPE: *Object,
    CONTENT_LENGTH: *Object,
    REMOTE_ADDR: *Object,
    REMOTE_PORT: *Object,
    url_scheme: *Object,
};

var keys: Keys = undefined;
var http10: *Object = undefined;
var http11: *Object = undefined;
var http2: *Object = undefined;
var http3: *Object = undefined;
var scheme_http: *Object = undefined;
var scheme_https: *Object = undefined;
var empty: *Object = undefined;
/// `HTTP_<NAME>` keys of the common header names (scope.common_headers), made once.
var header_keys: [scope.common_headers.len]*Object = undefined;
/// Scratch for the decoded path, a joined header value and a key name; only touched
/// with the GIL held, never across calls.
var scratch: [8192]u8 = undefined;

/// Creates the shared objects once, at module import.
pub fn init() bool {
    inline for (@typeInfo(Keys).@"struct".fields) |f| {
        @field(keys, f.name) = py.intern(f.name) orelse return false;
    }
    keys.url_scheme = py.intern("wsgi.url_scheme") orelse return false;
    http10 = py.intern("HTTP/1.0") orelse return false;
    http11 = py.intern("HTTP/1.1") orelse return false;
    http2 = py.intern("HTTP/2") orelse return false;
    http3 = py.intern("HTTP/3") orelse return false;
    scheme_http = py.intern("http") orelse return false;
    scheme_https = py.intern("https") orelse return false;
    empty = py.intern("") orelse return false;
    for (scope.common_headers, 0..) |name, i| {
        var buf: [64]u8 = undefined;
        const key = envKey(name, &buf) orelse return false;
        header_keys[i] = c.PyUnicode_InternFromString(@ptrCast(key.ptr)) orelse return false;
    }
    return true;
}

/// The environ key of a header: `HTTP_` and the name upper-cased with `-` as `_`
/// (NUL-terminated in `buf`); `CONTENT_TYPE` and `CONTENT_LENGTH` without the prefix.
/// Null when the name does not fit or has an `_` of its own: such a header could pose as
/// another one (`X_Forwarded_For` for `X-Forwarded-For`), so it is left out, as
/// gunicorn and nginx do.
pub fn envKey(name: []const u8, buf: []u8) ?[:0]const u8 {
    if (std.mem.indexOfScalar(u8, name, '_') != null) return null;
    const bare = std.mem.eql(u8, name, "content-type") or std.mem.eql(u8, name, "content-length");
    const prefix: []const u8 = if (bare) "" else "HTTP_";
    if (prefix.len + name.len + 1 > buf.len) return null;
    @memcpy(buf[0..prefix.len], prefix);
    for (name, 0..) |ch, i| buf[prefix.len + i] = if (ch == '-') '_' else std.ascii.toUpper(ch);
    buf[prefix.len + name.len] = 0;
    return buf[0 .. prefix.len + name.len :0];
}

/// How repeated fields of one name are joined into one value (RFC 9110 5.3; cookies by
/// "; " as RFC 6265 5.4 sends them).
pub fn separator(name: []const u8) []const u8 {
    return if (std.mem.eql(u8, name, "cookie")) "; " else ", ";
}

/// Whether an earlier field of `headers` has the name of field `i` (its value was joined there).
fn seenBefore(headers: []const http_fields.Header, i: usize) bool {
    for (headers[0..i]) |h| if (std.mem.eql(u8, h.name, headers[i].name)) return true;
    return false;
}

fn latin1(s: []const u8) ?*Object {
    if (s.len == 0) {
        py.incref(empty);
        return empty;
    }
    return c.PyUnicode_DecodeLatin1(s.ptr, @intCast(s.len), null);
}

fn fail(o: *Object) ?*Object {
    py.decref(o);
    return null;
}

/// The value of header `i` with the values of the later fields of its name joined to
/// it; `host` is replaced by what a trusted proxy says.
fn headerValue(headers: []const http_fields.Header, i: usize, forwarded_host: ?[]const u8) ?*Object {
    const name = headers[i].name;
    if (forwarded_host != null and std.mem.eql(u8, name, "host")) return latin1(forwarded_host.?);
    const sep = separator(name);
    var total: usize = headers[i].value.len;
    var repeats: usize = 0;
    for (headers[i + 1 ..]) |h| if (std.mem.eql(u8, h.name, name)) {
        total += sep.len + h.value.len;
        repeats += 1;
    };
    if (repeats == 0) return latin1(headers[i].value);
    var heap: ?[]u8 = null;
    defer if (heap) |h| std.heap.c_allocator.free(h);
    const buf: []u8 = if (total <= scratch.len) scratch[0..total] else blk: {
        heap = std.heap.c_allocator.alloc(u8, total) catch {
            _ = c.PyErr_NoMemory();
            return null;
        };
        break :blk heap.?;
    };
    var at: usize = 0;
    @memcpy(buf[0..headers[i].value.len], headers[i].value);
    at += headers[i].value.len;
    for (headers[i + 1 ..]) |h| if (std.mem.eql(u8, h.name, name)) {
        @memcpy(buf[at..][0..sep.len], sep);
        at += sep.len;
        @memcpy(buf[at..][0..h.value.len], h.value);
        at += h.value.len;
    };
    return latin1(buf[0..at]);
}

/// PATH_INFO: the path percent-decoded, as latin-1 (SCRIPT_NAME, --root-path, is in the template).
fn pathInfo(req: *const Request) ?*Object {
    var heap: ?[]u8 = null;
    defer if (heap) |h| std.heap.c_allocator.free(h);
    const buf: []u8 = if (req.path.len <= scratch.len) scratch[0..req.path.len] else blk: {
        heap = std.heap.c_allocator.alloc(u8, req.path.len) catch {
            _ = c.PyErr_NoMemory();
            return null;
        };
        break :blk heap.?;
    };
    const n = http_fields.percentDecode(req.path, buf);
    return latin1(buf[0..n]);
}

/// New reference: the environ dict of one request: a copy of `template` with the
/// request's keys. `session` is the connection's TLS session (null for plain HTTP).
pub fn build(template: *Object, req: *const Request, peer: *const Peer, info: *const scope.ServerInfo, session: ?*tls.SSL) ?*Object {
    const d = c.PyDict_Copy(template) orelse return null;
    if (!fill(d, req, peer, info, session)) return fail(d);
    return d;
}

fn fill(d: *Object, req: *const Request, peer: *const Peer, info: *const scope.ServerInfo, session: ?*tls.SSL) bool {
    if (!py.dictSetSteal(d, keys.REQUEST_METHOD, scope.method(req.method))) return false;
    if (!py.dictSetSteal(d, keys.PATH_INFO, pathInfo(req))) return false;
    if (!py.dictSetSteal(d, keys.QUERY_STRING, latin1(req.query))) return false;
    const version = switch (req.version) {
        .http10 => http10,
        .http11 => http11,
        .http2 => http2,
        .http3 => http3,
    };
    if (c.PyDict_SetItem(d, keys.SERVER_PROTOCOL, version) != 0) return false;
    const fwd = scope.forwardedFor(req, peer, info);
    const https = if (fwd.scheme) |sch| sch == .https else session != null or req.version == .http3;
    if (c.PyDict_SetItem(d, keys.url_scheme, if (https) scheme_https else scheme_http) != 0) return false;
    var addr_buf: [64]u8 = undefined;
    const host = fwd.client_host orelse peer.format(&addr_buf);
    if (host.len > 0) {
        const port: u16 = if (fwd.client_host != null) fwd.client_port else peer.port;
        if (!py.dictSetSteal(d, keys.REMOTE_ADDR, latin1(host))) return false;
        var port_buf: [8]u8 = undefined;
        const port_text = std.fmt.bufPrint(&port_buf, "{d}", .{port}) catch unreachable;
        if (!py.dictSetSteal(d, keys.REMOTE_PORT, latin1(port_text))) return false;
    }
    const headers = req.headers;
    for (headers, 0..) |h, i| {
        // The request id and trace context the engine replaced (all fields of those names).
        if (req.added.drops(h.name)) continue;
        if (seenBefore(headers, i)) continue;
        const key: *Object = if (scope.header_index.get(h.name)) |k| blk: {
            py.incref(header_keys[k]);
            break :blk header_keys[k];
        } else blk: {
            const name = envKey(h.name, &scratch) orelse continue;
            break :blk c.PyUnicode_DecodeLatin1(name.ptr, @intCast(name.len), null) orelse return false;
        };
        defer py.decref(key);
        if (!py.dictSetSteal(d, key, headerValue(headers, i, fwd.host))) return false;
    }
    var extra: [tracing.appended_max][2][]const u8 = undefined;
    for (req.added.appended(&extra)) |f| {
        const name = envKey(f[0], &scratch) orelse continue;
        const key = c.PyUnicode_DecodeLatin1(name.ptr, @intCast(name.len), null) orelse return false;
        defer py.decref(key);
        if (!py.dictSetSteal(d, key, latin1(f[1]))) return false;
    }
    return true;
}

test "environ keys of header names" {
    var buf: [64]u8 = undefined;
    try std.testing.expectEqualStrings("HTTP_USER_AGENT", envKey("user-agent", &buf).?);
    try std.testing.expectEqualStrings("CONTENT_TYPE", envKey("content-type", &buf).?);
    try std.testing.expectEqualStrings("CONTENT_LENGTH", envKey("content-length", &buf).?);
    try std.testing.expectEqualStrings("HTTP_X_A1", envKey("x-a1", &buf).?);
    // An underscore could pose as a dash: such fields are left out.
    try std.testing.expect(envKey("x_forwarded_for", &buf) == null);
    // Too long for the buffer: left out, not truncated.
    try std.testing.expect(envKey("a" ** 60, &buf) == null);
    try std.testing.expectEqualStrings("; ", separator("cookie"));
    try std.testing.expectEqualStrings(", ", separator("accept"));
}

test "repeated fields: only the first of a name carries the joined value" {
    const hs = [_]http_fields.Header{
        .{ .name = "accept", .value = "a" },
        .{ .name = "cookie", .value = "x=1" },
        .{ .name = "accept", .value = "b" },
    };
    try std.testing.expect(!seenBefore(&hs, 0));
    try std.testing.expect(!seenBefore(&hs, 1));
    try std.testing.expect(seenBefore(&hs, 2));
}
