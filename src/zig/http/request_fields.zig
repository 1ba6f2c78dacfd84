//! The request checks HTTP/2 (RFC 9113 8.2, 8.3) and HTTP/3 (RFC 9114 4.2, 4.3) share:
//! the same pseudo-header fields, the same connection-specific fields refused, lower-case
//! names, CONNECT and extended CONNECT (RFC 8441 / RFC 9220). Pure: the caller gives the
//! room for the header list the app sees and the scratch where split cookies are joined
//! (RFC 9113 8.2.3, RFC 9114 4.2.1), so no protocol's module state is needed.
const std = @import("std");
const fields = @import("fields.zig");
const response = @import("response.zig");

pub const Header = fields.Header;

pub const RequestHead = struct {
    method: ?[]const u8 = null,
    scheme: ?[]const u8 = null,
    path: ?[]const u8 = null,
    authority: ?[]const u8 = null,
    protocol: ?[]const u8 = null,
    host: ?[]const u8 = null,
    te_trailers: bool = false,
    content_length: ?u64 = null,
};

pub const Options = struct {
    /// We advertised SETTINGS_ENABLE_CONNECT_PROTOCOL: `:protocol` is allowed on CONNECT.
    extended_connect: bool,
    /// A plain CONNECT (a tunnel: `:method` and `:authority` only) is well-formed by the
    /// RFCs; the engine serves no tunnels, so it is refused unless asked for.
    plain_connect: bool = false,
};

/// Malformed: a stream error (HTTP/2 PROTOCOL_ERROR, HTTP/3 H3_MESSAGE_ERROR). TooMany /
/// NoSpace: the request is well-formed but larger than the room given (431).
pub const Error = error{ Malformed, TooMany, NoSpace };

pub const connection_specific = [_][]const u8{
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
};

/// Checks a request's decoded fields into `head`; returns the header list the app sees
/// (in `out`): regular fields in order, split cookies joined into `cookie_scratch`,
/// and `host` first from `:authority` when the request carried none.
pub fn check(
    decoded: []const Header,
    head: *RequestHead,
    out: []Header,
    cookie_scratch: []u8,
    opts: Options,
) Error![]Header {
    head.* = .{};
    var n: usize = 0;
    var cookie_len: usize = 0;
    var regular_seen = false;
    for (decoded) |f| {
        if (f.name.len == 0) return error.Malformed;
        for (f.name) |ch| if (ch >= 'A' and ch <= 'Z') return error.Malformed;
        if (!response.validValue(f.value)) return error.Malformed;
        if (f.value.len > 0 and (isSpace(f.value[0]) or isSpace(
            f.value[f.value.len - 1],
        ))) return error.Malformed;
        if (f.name[0] == ':') {
            if (regular_seen) return error.Malformed;
            try pseudo(head, f);
            continue;
        }
        regular_seen = true;
        try regular(head, f);
        if (std.mem.eql(u8, f.name, "cookie")) if (findField(out[0..n], "cookie")) |i| {
            out[i].value = try joinCookie(cookie_scratch, &cookie_len, out[i].value, f.value);
            continue;
        };
        if (n == out.len) return error.TooMany;
        out[n] = f;
        n += 1;
    }
    try checkPseudo(head, opts);
    if (head.host == null) if (head.authority) |a| {
        // `host` first, as an HTTP/1.1 request would carry it.
        if (n == out.len) return error.TooMany;
        std.mem.copyBackwards(Header, out[1 .. n + 1], out[0..n]);
        out[0] = .{ .name = "host", .value = a };
        n += 1;
    };
    return out[0..n];
}

fn pseudo(head: *RequestHead, f: Header) Error!void {
    const slot: *?[]const u8 = if (std.mem.eql(
        u8,
        f.name,
        ":method",
    )) &head.method else if (std.mem.eql(
        u8,
        f.name,
        ":scheme",
    )) &head.scheme else if (std.mem.eql(
        u8,
        f.name,
        ":path",
    )) &head.path else if (std.mem.eql(
        u8,
        f.name,
        ":authority",
    )) &head.authority else if (std.mem.eql(
        u8,
        f.name,
        ":protocol",
    )) &head.protocol else return error.Malformed;
    if (slot.* != null) return error.Malformed;
    slot.* = f.value;
}

fn regular(head: *RequestHead, f: Header) Error!void {
    if (!response.validName(f.name)) return error.Malformed;
    for (connection_specific) |name| if (std.mem.eql(u8, f.name, name)) return error.Malformed;
    if (std.mem.eql(u8, f.name, "te")) {
        if (!std.mem.eql(u8, f.value, "trailers")) return error.Malformed;
        head.te_trailers = true;
    } else if (std.mem.eql(u8, f.name, "content-length")) {
        // A second field or anything but 1*DIGIT: malformed (`fields.contentLength`).
        const seen = head.content_length;
        head.content_length = fields.contentLength(seen, f.value) catch return error.Malformed;
    } else if (std.mem.eql(u8, f.name, "host")) {
        if (head.host != null) return error.Malformed;
        head.host = f.value;
    }
}

/// The pseudo-header rules once all fields are read (RFC 9114 4.3.1, 4.4; RFC 9220 3).
fn checkPseudo(head: *const RequestHead, opts: Options) Error!void {
    const method = head.method orelse return error.Malformed;
    if (std.mem.eql(u8, method, "CONNECT")) {
        if (head.protocol == null) {
            // A tunnel: :authority alone names it; :scheme and :path are not sent.
            if (head.scheme != null or head.path != null) return error.Malformed;
            if (head.authority == null) return error.Malformed;
            if (!opts.plain_connect) return error.Malformed;
            return;
        }
        if (!opts.extended_connect) return error.Malformed;
        if (head.scheme == null or head.path == null) return error.Malformed;
        if (head.authority == null) return error.Malformed;
        return;
    }
    if (head.protocol != null) return error.Malformed;
    const scheme = head.scheme orelse return error.Malformed;
    const path = head.path orelse return error.Malformed;
    if (path.len == 0) return error.Malformed;
    // http and https have an authority: one of :authority and host, the same if both.
    if (std.mem.eql(u8, scheme, "http") or std.mem.eql(u8, scheme, "https")) {
        if (head.authority == null and head.host == null) return error.Malformed;
        if (head.authority) |a| if (a.len == 0) return error.Malformed;
        if (head.authority != null and head.host != null and !std.mem.eql(
            u8,
            head.authority.?,
            head.host.?,
        )) return error.Malformed;
    }
}

fn isSpace(ch: u8) bool {
    return ch == ' ' or ch == '\t';
}

pub fn findField(list: []const Header, name: []const u8) ?usize {
    for (list, 0..) |f, i| if (std.mem.eql(u8, f.name, name)) return i;
    return null;
}

/// Joins `b` after `a` with "; " in `buf[len.*..]`; `a` may be the last join (extended
/// in place).
fn joinCookie(buf: []u8, len: *usize, a: []const u8, b: []const u8) error{NoSpace}![]const u8 {
    const at = @intFromPtr(a.ptr);
    const base = @intFromPtr(buf.ptr);
    const in_buf = buf.len > 0 and at >= base and at < base + buf.len;
    const start = if (in_buf) at - base else len.*;
    const need = a.len + 2 + b.len;
    if (start + need > buf.len) return error.NoSpace;
    if (!in_buf) @memcpy(buf[start..][0..a.len], a);
    @memcpy(buf[start + a.len ..][0..2], "; ");
    @memcpy(buf[start + a.len + 2 ..][0..b.len], b);
    len.* = start + need;
    return buf[start..][0..need];
}

// ---- tests ------------------------------------------------------------------------------

const testing = std.testing;

const get_fields = [_]Header{
    .{ .name = ":method", .value = "GET" },
    .{ .name = ":scheme", .value = "https" },
    .{ .name = ":path", .value = "/a?b=1" },
    .{ .name = ":authority", .value = "example.test" },
};

fn run(decoded: []const Header, head: *RequestHead, out: []Header, opts: Options) Error![]Header {
    const S = struct {
        var cookies: [64]u8 = undefined;
    };
    return check(decoded, head, out, &S.cookies, opts);
}

test "request fields: pseudo-headers into the head, host from :authority first, cookies joined" {
    var head = RequestHead{};
    var out: [8]Header = undefined;
    const got = try run(
        &(get_fields ++ [_]Header{
            .{ .name = "cookie", .value = "a=1" },
            .{ .name = "accept", .value = "*/*" },
            .{ .name = "cookie", .value = "b=2" },
            .{ .name = "cookie", .value = "c=3" },
        }),
        &head,
        &out,
        .{ .extended_connect = false },
    );
    try testing.expectEqualStrings("GET", head.method.?);
    try testing.expectEqualStrings("/a?b=1", head.path.?);
    try testing.expectEqual(@as(usize, 3), got.len);
    try testing.expectEqualStrings("host", got[0].name);
    try testing.expectEqualStrings("example.test", got[0].value);
    try testing.expectEqualStrings("a=1; b=2; c=3", got[1].value);
    // A host alone serves as the authority; equal to :authority is fine too.
    _ = try run(
        &.{ get_fields[0], get_fields[1], get_fields[2], .{ .name = "host", .value = "h" } },
        &head,
        &out,
        .{ .extended_connect = false },
    );
    _ = try run(
        &(get_fields ++ [_]Header{.{ .name = "host", .value = "example.test" }}),
        &head,
        &out,
        .{ .extended_connect = false },
    );
    // Room: three fields fit, the host made from :authority would be the fourth.
    var small: [3]Header = undefined;
    try testing.expectError(
        error.TooMany,
        run(
            &(get_fields ++ [_]Header{
                .{ .name = "a", .value = "1" },
                .{ .name = "b", .value = "2" },
                .{ .name = "c", .value = "3" },
            }),
            &head,
            &small,
            .{ .extended_connect = false },
        ),
    );
}

test "request fields: split cookies joined in the scratch, the last join extended in place" {
    var buf: [16]u8 = undefined;
    var len: usize = 0;
    const ab = try joinCookie(&buf, &len, "a=1", "b=2");
    try testing.expectEqualStrings("a=1; b=2", ab);
    const abc = try joinCookie(&buf, &len, ab, "c=3");
    try testing.expectEqualStrings("a=1; b=2; c=3", abc);
    try testing.expectEqual(ab.ptr, abc.ptr);
    try testing.expectEqual(@as(usize, 13), len);
    try testing.expectError(error.NoSpace, joinCookie(&buf, &len, abc, "d=4"));
}

test "request fields: CONNECT, extended CONNECT only when advertised" {
    var head = RequestHead{};
    var out: [8]Header = undefined;
    const tunnel = [_]Header{ .{ .name = ":method", .value = "CONNECT" }, get_fields[3] };
    try testing.expectError(
        error.Malformed,
        run(&tunnel, &head, &out, .{ .extended_connect = true }),
    );
    _ = try run(&tunnel, &head, &out, .{ .extended_connect = false, .plain_connect = true });
    const ext = [_]Header{
        .{ .name = ":method", .value = "CONNECT" },
        .{ .name = ":protocol", .value = "websocket" },
        get_fields[1],
        get_fields[2],
        get_fields[3],
    };
    _ = try run(&ext, &head, &out, .{ .extended_connect = true });
    try testing.expectEqualStrings("websocket", head.protocol.?);
    try testing.expectError(
        error.Malformed,
        run(&ext, &head, &out, .{ .extended_connect = false }),
    );
}

test "request fields: one content-length of 1*DIGIT; a second one, a list or a sign is malformed" {
    var head = RequestHead{};
    var out: [8]Header = undefined;
    const opts = Options{ .extended_connect = false };
    const one = get_fields ++ [_]Header{.{ .name = "content-length", .value = "05" }};
    const got = try run(&one, &head, &out, opts);
    try testing.expectEqual(@as(?u64, 5), head.content_length);
    try testing.expectEqualStrings("05", got[1].value);
    const cl = "content-length";
    const refused = [_][]const Header{
        &(get_fields ++ [_]Header{ .{ .name = cl, .value = "5" }, .{ .name = cl, .value = "5" } }),
        &(get_fields ++ [_]Header{ .{ .name = cl, .value = "5" }, .{ .name = cl, .value = "05" } }),
        &(get_fields ++ [_]Header{.{ .name = cl, .value = "5, 5" }}),
        &(get_fields ++ [_]Header{.{ .name = cl, .value = "+5" }}),
        &(get_fields ++ [_]Header{.{ .name = cl, .value = "1_0" }}),
    };
    for (refused) |list| try testing.expectError(error.Malformed, run(list, &head, &out, opts));
}
