//! The checks RFC 9113 section 8.2 and 8.3 ask of a request's header fields, and the
//! header list the app then sees (split cookies joined, `host` from `:authority`). Pure
//! but for the cookie scratch (one engine thread: valid until the next request).
const std = @import("std");
const http_fields = @import("../http/fields.zig");
const hpack = @import("hpack.zig");
const response = @import("../http/response.zig");
const scratch = @import("../http/scratch.zig");

/// What the h2c upgrade (RFC 7540 3.2) reads of the HTTP/1.1 request: `session.zig`
/// fills it from the parsed head, and HTTP/2's `beginUpgrade` makes it stream 1.
pub const UpgradeRequest = struct {
    method: []const u8,
    path: []const u8,
    query: []const u8,
    host: ?[]const u8,
    /// Its fields, filtered in place of what HTTP/2 does not carry.
    fields: []http_fields.Header,
};

pub const RequestHead = struct {
    method: ?[]const u8 = null,
    scheme: ?[]const u8 = null,
    path: ?[]const u8 = null,
    authority: ?[]const u8 = null,
    protocol: ?[]const u8 = null,
    host_seen: bool = false,
    te_trailers: bool = false,
    content_length: ?u64 = null,
};

/// Checks a request's fields (RFC 9113 8.2, 8.3) into `head` and the header list the
/// app sees (cookies joined into one field, `host` from `:authority` when absent).
pub fn checkRequest(fields: []const hpack.Header, head: *RequestHead, out: []http_fields.Header, ws_enabled: bool) error{ Malformed, TooMany, NoSpace }![]http_fields.Header {
    var n: usize = 0;
    var regular_seen = false;
    for (fields) |f| {
        if (f.name.len == 0) return error.Malformed;
        for (f.name) |ch| if (ch >= 'A' and ch <= 'Z') return error.Malformed;
        if (!response.validValue(f.value)) return error.Malformed;
        if (f.value.len > 0 and (isSpace(f.value[0]) or isSpace(f.value[f.value.len - 1]))) return error.Malformed;
        if (f.name[0] == ':') {
            if (regular_seen) return error.Malformed;
            const slot: *?[]const u8 = if (std.mem.eql(u8, f.name, ":method")) &head.method else if (std.mem.eql(u8, f.name, ":scheme")) &head.scheme else if (std.mem.eql(u8, f.name, ":path")) &head.path else if (std.mem.eql(u8, f.name, ":authority")) &head.authority else if (std.mem.eql(u8, f.name, ":protocol")) &head.protocol else return error.Malformed;
            if (slot.* != null) return error.Malformed;
            slot.* = f.value;
            continue;
        }
        regular_seen = true;
        if (!response.validName(f.name)) return error.Malformed;
        for (connection_specific) |name| if (std.mem.eql(u8, f.name, name)) return error.Malformed;
        if (std.mem.eql(u8, f.name, "te")) {
            if (!std.mem.eql(u8, f.value, "trailers")) return error.Malformed;
            head.te_trailers = true;
        } else if (std.mem.eql(u8, f.name, "content-length")) {
            // A second field or anything but 1*DIGIT: malformed (`http_fields.contentLength`).
            const seen = head.content_length;
            head.content_length = http_fields.contentLength(seen, f.value) catch
                return error.Malformed;
        } else if (std.mem.eql(u8, f.name, "host")) {
            head.host_seen = true;
        }
        if (std.mem.eql(u8, f.name, "cookie")) {
            // RFC 9113 8.2.3: split cookies are one field for an HTTP/1.1-minded app.
            if (findField(out[0..n], "cookie")) |i| {
                out[i].value = try joinCookie(out[i].value, f.value);
                continue;
            }
        }
        if (n == out.len) return error.TooMany;
        out[n] = .{ .name = f.name, .value = f.value };
        n += 1;
    }
    const method = head.method orelse return error.Malformed;
    if (std.mem.eql(u8, method, "CONNECT")) {
        // Only the extended CONNECT of RFC 8441 (WebSocket) is served.
        if (head.protocol == null or head.scheme == null or head.path == null or head.authority == null) return error.Malformed;
        if (!ws_enabled) return error.Malformed;
    } else {
        if (head.protocol != null) return error.Malformed;
        if (head.scheme == null) return error.Malformed;
        const path = head.path orelse return error.Malformed;
        if (path.len == 0) return error.Malformed;
    }
    if (!head.host_seen) if (head.authority) |a| {
        // `host` first, as an HTTP/1.1 request would carry it.
        if (n == out.len) return error.TooMany;
        std.mem.copyBackwards(http_fields.Header, out[1 .. n + 1], out[0..n]);
        out[0] = .{ .name = "host", .value = a };
        n += 1;
    };
    return out[0..n];
}

pub const connection_specific = [_][]const u8{ "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade" };

fn isSpace(ch: u8) bool {
    return ch == ' ' or ch == '\t';
}

pub fn findField(fields: []const http_fields.Header, name: []const u8) ?usize {
    for (fields, 0..) |f, i| if (std.mem.eql(u8, f.name, name)) return i;
    return null;
}

/// Joined cookies live after the decoded fields in the same scratch. A request head fits
/// one pooled buffer (`core/server.zig` `request_head_bytes_max`), named here from the
/// pool itself so that this file stays out of the server's knot of imports.
var cookie_scratch: [@import("../os/buffer_pool.zig").buffer_bytes]u8 = undefined;
pub var cookie_len: usize = 0;

fn joinCookie(a: []const u8, b: []const u8) error{NoSpace}![]const u8 {
    const need = a.len + 2 + b.len;
    scratch.claim();
    // `a` may already be the last join (at the end of the scratch): extend it in place.
    const in_scratch = @intFromPtr(a.ptr) >= @intFromPtr(&cookie_scratch) and @intFromPtr(a.ptr) < @intFromPtr(&cookie_scratch) + cookie_scratch.len;
    const start = if (in_scratch) @intFromPtr(a.ptr) - @intFromPtr(&cookie_scratch) else cookie_len;
    if (start + need > cookie_scratch.len) return error.NoSpace;
    if (!in_scratch) @memcpy(cookie_scratch[start..][0..a.len], a);
    @memcpy(cookie_scratch[start + a.len ..][0..2], "; ");
    @memcpy(cookie_scratch[start + a.len + 2 ..][0..b.len], b);
    cookie_len = start + need;
    return cookie_scratch[start..][0..need];
}

// ---- tests ------------------------------------------------------------------------------

test "split cookies are joined in the scratch, extending the last join in place" {
    cookie_len = 0;
    const ab = try joinCookie("a=1", "b=2");
    try std.testing.expectEqualStrings("a=1; b=2", ab);
    const abc = try joinCookie(ab, "c=3");
    try std.testing.expectEqualStrings("a=1; b=2; c=3", abc);
    try std.testing.expectEqual(ab.ptr, abc.ptr);
    var big: [cookie_scratch.len]u8 = undefined;
    @memset(&big, 'x');
    try std.testing.expectError(error.NoSpace, joinCookie(abc, &big));
}

/// `checkRequest` over `fields` with room for `room` header fields; the cookie scratch reset.
fn check(fields: []const hpack.Header, head: *RequestHead, out: []http_fields.Header, ws_enabled: bool) error{ Malformed, TooMany, NoSpace }![]http_fields.Header {
    cookie_len = 0;
    head.* = .{};
    return checkRequest(fields, head, out, ws_enabled);
}

const get_fields = [_]hpack.Header{
    .{ .name = ":method", .value = "GET" },
    .{ .name = ":scheme", .value = "https" },
    .{ .name = ":path", .value = "/a?b=1" },
    .{ .name = ":authority", .value = "example.test" },
};

test "a request: pseudo-header fields into the head, :authority becomes host, first" {
    var head = RequestHead{};
    var out: [8]http_fields.Header = undefined;
    const got = try check(&(get_fields ++ [_]hpack.Header{.{ .name = "accept", .value = "*/*" }}), &head, &out, false);
    try std.testing.expectEqualStrings("GET", head.method.?);
    try std.testing.expectEqualStrings("https", head.scheme.?);
    try std.testing.expectEqualStrings("/a?b=1", head.path.?);
    try std.testing.expectEqual(@as(usize, 2), got.len);
    try std.testing.expectEqualStrings("host", got[0].name);
    try std.testing.expectEqualStrings("example.test", got[0].value);
    try std.testing.expectEqualStrings("accept", got[1].name);
    // A host field of its own is kept, and not doubled.
    const with_host = try check(&(get_fields ++ [_]hpack.Header{.{ .name = "host", .value = "other" }}), &head, &out, false);
    try std.testing.expectEqual(@as(usize, 1), with_host.len);
    try std.testing.expectEqualStrings("other", with_host[0].value);
}

test "malformed requests (RFC 9113 8.2, 8.3) are refused: every case of the list" {
    var head = RequestHead{};
    var out: [8]http_fields.Header = undefined;
    const H = hpack.Header;
    const cl = "content-length";
    const cases = [_][]const H{
        // a pseudo-header after a regular field
        &.{ get_fields[0], get_fields[1], .{ .name = "accept", .value = "x" }, get_fields[2] },
        // upper case, empty, unknown pseudo, repeated pseudo
        &(get_fields ++ [_]H{.{ .name = "Accept", .value = "x" }}),
        &(get_fields ++ [_]H{.{ .name = "", .value = "x" }}),
        &(get_fields ++ [_]H{.{ .name = ":status", .value = "200" }}),
        &(get_fields ++ [_]H{.{ .name = ":path", .value = "/again" }}),
        // connection-specific fields, and te other than trailers
        &(get_fields ++ [_]H{.{ .name = "connection", .value = "keep-alive" }}),
        &(get_fields ++ [_]H{.{ .name = "keep-alive", .value = "5" }}),
        &(get_fields ++ [_]H{.{ .name = "proxy-connection", .value = "x" }}),
        &(get_fields ++ [_]H{.{ .name = "transfer-encoding", .value = "chunked" }}),
        &(get_fields ++ [_]H{.{ .name = "upgrade", .value = "h2c" }}),
        &(get_fields ++ [_]H{.{ .name = "te", .value = "gzip" }}),
        // values: surrounding space, control characters
        &(get_fields ++ [_]H{.{ .name = "x", .value = " padded" }}),
        &(get_fields ++ [_]H{.{ .name = "x", .value = "tab\t" }}),
        &(get_fields ++ [_]H{.{ .name = "x", .value = "a\r\nb" }}),
        &(get_fields ++ [_]H{.{ .name = "x", .value = "nul\x00" }}),
        // content-length: not 1*DIGIT (std.fmt.parseInt took "+5" and "1_0"), a list, or a
        // second field whatever its value (`http_fields.contentLength`)
        &(get_fields ++ [_]H{.{ .name = "content-length", .value = "1x" }}),
        &(get_fields ++ [_]H{.{ .name = "content-length", .value = "+5" }}),
        &(get_fields ++ [_]H{.{ .name = "content-length", .value = "1_0" }}),
        &(get_fields ++ [_]H{.{ .name = "content-length", .value = "5, 5" }}),
        &(get_fields ++ [_]H{ .{ .name = "content-length", .value = "1" }, .{ .name = "content-length", .value = "2" } }),
        &(get_fields ++ [_]H{ .{ .name = cl, .value = "5" }, .{ .name = cl, .value = "5" } }),
        &(get_fields ++ [_]H{ .{ .name = cl, .value = "5" }, .{ .name = cl, .value = "05" } }),
        // missing or empty pseudo-headers
        &.{ get_fields[1], get_fields[2], get_fields[3] },
        &.{ get_fields[0], get_fields[2], get_fields[3] },
        &.{ get_fields[0], get_fields[1], get_fields[3] },
        &.{ get_fields[0], get_fields[1], .{ .name = ":path", .value = "" } },
        // :protocol belongs to extended CONNECT only
        &(get_fields ++ [_]H{.{ .name = ":protocol", .value = "websocket" }}),
        // a plain CONNECT is not served
        &.{ .{ .name = ":method", .value = "CONNECT" }, get_fields[3] },
    };
    for (cases, 0..) |fields, i| {
        const result = check(fields, &head, &out, true);
        if (result) |_| {
            std.debug.print("case {d} was accepted\n", .{i});
            return error.TestExpectedError;
        } else |err| try std.testing.expectEqual(error.Malformed, err);
    }
}

test "te: trailers, one content-length and an extended CONNECT are accepted" {
    var head = RequestHead{};
    var out: [8]http_fields.Header = undefined;
    const H = hpack.Header;
    const te = H{ .name = "te", .value = "trailers" };
    const te_cl = [_]H{ te, .{ .name = "content-length", .value = "05" } };
    const got = try check(&(get_fields ++ te_cl), &head, &out, false);
    try std.testing.expect(head.te_trailers);
    try std.testing.expectEqual(@as(?u64, 5), head.content_length);
    // The app sees the one field as sent.
    try std.testing.expectEqualStrings("05", got[2].value);
    const connect = [_]H{ .{ .name = ":method", .value = "CONNECT" }, .{ .name = ":protocol", .value = "websocket" }, get_fields[1], .{ .name = ":path", .value = "/chat" }, get_fields[3] };
    _ = try check(&connect, &head, &out, true);
    try std.testing.expectEqualStrings("websocket", head.protocol.?);
    // Without WebSocket support the extended CONNECT is malformed.
    try std.testing.expectError(error.Malformed, check(&connect, &head, &out, false));
}

test "cookies split over fields reach the app as one; too many fields is its own error" {
    var head = RequestHead{};
    var out: [3]http_fields.Header = undefined;
    const H = hpack.Header;
    const got = try check(&(get_fields ++ [_]H{ .{ .name = "cookie", .value = "a=1" }, .{ .name = "cookie", .value = "b=2" }, .{ .name = "cookie", .value = "c=3" } }), &head, &out, false);
    try std.testing.expectEqual(@as(usize, 2), got.len);
    try std.testing.expectEqualStrings("cookie", got[1].name);
    try std.testing.expectEqualStrings("a=1; b=2; c=3", got[1].value);
    // Three fields fit, the host made from :authority would be the fourth.
    try std.testing.expectError(error.TooMany, check(&(get_fields ++ [_]H{ .{ .name = "a", .value = "1" }, .{ .name = "b", .value = "2" }, .{ .name = "c", .value = "3" } }), &head, &out, false));
}
