//! HTTP/2's request: the checks RFC 9113 section 8.2 and 8.3 ask of its header fields
//! (those of `http/request_fields.zig`, shared with HTTP/3, with HTTP/2's options and
//! cookie scratch) and what the h2c upgrade hands over.
const std = @import("std");
const http_fields = @import("../http/fields.zig");
const hpack = @import("hpack.zig");
const request_fields = @import("../http/request_fields.zig");
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

/// The shared request checks (`http/request_fields.zig`, the same for HTTP/3) fill it.
pub const RequestHead = request_fields.RequestHead;
pub const connection_specific = request_fields.connection_specific;

/// Split cookies are joined here (RFC 9113 8.2.3). A request head fits one pooled buffer
/// (`core/server.zig` `request_head_bytes_max`), named here from the pool itself so that
/// this file stays out of the server's knot of imports. One engine thread: valid until
/// the next request.
var cookie_scratch: [@import("../os/buffer_pool.zig").buffer_bytes]u8 = undefined;

/// Checks a request's fields (RFC 9113 8.2, 8.3) into `head` and the header list the
/// app sees (cookies joined into one field, `host` from `:authority` when absent).
/// Only the extended CONNECT of RFC 8441 (WebSocket) is served, when enabled.
pub fn checkRequest(
    fields: []const hpack.Header,
    head: *RequestHead,
    out: []http_fields.Header,
    ws_enabled: bool,
) request_fields.Error![]http_fields.Header {
    scratch.claim();
    const opts = request_fields.Options{ .extended_connect = ws_enabled };
    return request_fields.check(fields, head, out, &cookie_scratch, opts);
}

// ---- tests ------------------------------------------------------------------------------

const get_fields = [_]hpack.Header{
    .{ .name = ":method", .value = "GET" },
    .{ .name = ":scheme", .value = "https" },
    .{ .name = ":path", .value = "/a?b=1" },
    .{ .name = ":authority", .value = "example.test" },
};

test "a request: pseudo-header fields into the head, :authority becomes host, first" {
    var head = RequestHead{};
    var out: [8]http_fields.Header = undefined;
    const got = try checkRequest(
        &(get_fields ++ [_]hpack.Header{.{ .name = "accept", .value = "*/*" }}),
        &head,
        &out,
        false,
    );
    try std.testing.expectEqualStrings("GET", head.method.?);
    try std.testing.expectEqualStrings("https", head.scheme.?);
    try std.testing.expectEqualStrings("/a?b=1", head.path.?);
    try std.testing.expectEqual(@as(usize, 2), got.len);
    try std.testing.expectEqualStrings("host", got[0].name);
    try std.testing.expectEqualStrings("example.test", got[0].value);
    try std.testing.expectEqualStrings("accept", got[1].name);
    // A host field of its own (the same as :authority) is kept, and not doubled.
    const host = hpack.Header{ .name = "host", .value = "example.test" };
    const with_host = try checkRequest(&(get_fields ++ [_]hpack.Header{host}), &head, &out, false);
    try std.testing.expectEqual(@as(usize, 1), with_host.len);
    try std.testing.expectEqualStrings("example.test", with_host[0].value);
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
        &(get_fields ++ [_]H{
            .{ .name = "content-length", .value = "1" },
            .{ .name = "content-length", .value = "2" },
        }),
        &(get_fields ++ [_]H{ .{ .name = cl, .value = "5" }, .{ .name = cl, .value = "5" } }),
        &(get_fields ++ [_]H{ .{ .name = cl, .value = "5" }, .{ .name = cl, .value = "05" } }),
        // missing or empty pseudo-headers
        &.{ get_fields[1], get_fields[2], get_fields[3] },
        &.{ get_fields[0], get_fields[2], get_fields[3] },
        &.{ get_fields[0], get_fields[1], get_fields[3] },
        &.{ get_fields[0], get_fields[1], .{ .name = ":path", .value = "" } },
        // :protocol belongs to extended CONNECT only
        &(get_fields ++ [_]H{.{ .name = ":protocol", .value = "websocket" }}),
        // two host fields, or a host other than :authority (RFC 9113 8.3.1)
        &(get_fields ++ [_]H{
            .{ .name = "host", .value = "a" },
            .{ .name = "host", .value = "a" },
        }),
        &(get_fields ++ [_]H{.{ .name = "host", .value = "other.test" }}),
        // http(s) with neither :authority nor host
        &.{ get_fields[0], get_fields[1], get_fields[2] },
        // a plain CONNECT is not served
        &.{ .{ .name = ":method", .value = "CONNECT" }, get_fields[3] },
    };
    for (cases, 0..) |fields, i| {
        const result = checkRequest(fields, &head, &out, true);
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
    const got = try checkRequest(&(get_fields ++ te_cl), &head, &out, false);
    try std.testing.expect(head.te_trailers);
    try std.testing.expectEqual(@as(?u64, 5), head.content_length);
    // The app sees the one field as sent.
    try std.testing.expectEqualStrings("05", got[2].value);
    const connect = [_]H{
        .{ .name = ":method", .value = "CONNECT" },
        .{ .name = ":protocol", .value = "websocket" },
        get_fields[1],
        .{ .name = ":path", .value = "/chat" },
        get_fields[3],
    };
    _ = try checkRequest(&connect, &head, &out, true);
    try std.testing.expectEqualStrings("websocket", head.protocol.?);
    // Without WebSocket support the extended CONNECT is malformed.
    try std.testing.expectError(error.Malformed, checkRequest(&connect, &head, &out, false));
}

test "cookies split over fields reach the app as one; too many fields is its own error" {
    var head = RequestHead{};
    var out: [3]http_fields.Header = undefined;
    const H = hpack.Header;
    const got = try checkRequest(
        &(get_fields ++ [_]H{
            .{ .name = "cookie", .value = "a=1" },
            .{ .name = "cookie", .value = "b=2" },
            .{ .name = "cookie", .value = "c=3" },
        }),
        &head,
        &out,
        false,
    );
    try std.testing.expectEqual(@as(usize, 2), got.len);
    try std.testing.expectEqualStrings("cookie", got[1].name);
    try std.testing.expectEqualStrings("a=1; b=2; c=3", got[1].value);
    // Three fields fit, the host made from :authority would be the fourth.
    try std.testing.expectError(
        error.TooMany,
        checkRequest(
            &(get_fields ++ [_]H{
                .{ .name = "a", .value = "1" },
                .{ .name = "b", .value = "2" },
                .{ .name = "c", .value = "3" },
            }),
            &head,
            &out,
            false,
        ),
    );
}
