//! The answers the engine gives itself, without the app, in every protocol: the health,
//! ready and metrics paths, 503 before the server is ready, 429 past the request rate;
//! and which fields a response's trailers may carry. Each protocol frames them its own way.
const std = @import("std");
const metrics = @import("metrics.zig");
const scratch = @import("../http/scratch.zig");

/// A metrics body lives here until the next answer (the protocols copy it out at once).
var ops_body_scratch: [metrics.render_bytes_max]u8 = undefined;

/// An engine-answered request (health or metrics path): its status, type and body.
pub const OpsAnswer = struct {
    status: u16,
    content_type: []const u8,
    body: []const u8,
    head_only: bool,
    /// `retry-after` seconds (0: none).
    retry_after: u32 = 0,
};

/// The answer to a request over `--limit-request-rate` (shared by HTTP/1.1 and HTTP/2).
pub fn tooManyRequests(wait_s: u32) OpsAnswer {
    return .{ .status = 429, .content_type = "text/plain; charset=utf-8", .body = "Too Many Requests\n", .head_only = false, .retry_after = wait_s };
}

/// Whether `method path` is the health, ready or metrics path (GET and HEAD only:
/// anything else goes to the app), and the answer (`srv` is the server: its `opts`
/// paths, `ready`, `draining`, `retiring` and `metrics`); before the server is ready, every
/// other request gets 503 with `retry-after` (the app's startup is not over). Shared by
/// HTTP/1.1 and HTTP/2; a metrics body lives in a scratch buffer until the next call
/// (both copy it into their output).
pub fn opsAnswer(srv: anytype, method: []const u8, path: []const u8) ?OpsAnswer {
    const is_metrics = srv.opts.metrics_path.len > 0 and std.mem.eql(u8, path, srv.opts.metrics_path);
    const is_health = srv.opts.health_path.len > 0 and std.mem.eql(u8, path, srv.opts.health_path);
    const is_ready = srv.opts.ready_path.len > 0 and std.mem.eql(u8, path, srv.opts.ready_path);
    // (Lengths first: each `mem.eql` is a call.)
    const head_only = method.len == 4 and std.mem.eql(u8, method, "HEAD");
    const ops_method = head_only or (method.len == 3 and std.mem.eql(u8, method, "GET"));
    if (!ops_method or !(is_metrics or is_health or is_ready)) {
        if (srv.ready) return null;
        return .{ .status = 503, .content_type = "text/plain; charset=utf-8", .body = "starting\n", .head_only = head_only, .retry_after = not_ready_retry_after_s };
    }
    var a = OpsAnswer{ .status = 200, .content_type = "text/plain; charset=utf-8", .body = "ok\n", .head_only = head_only };
    if ((is_health or is_ready) and srv.draining and !srv.retiring) {
        a.status = 503;
        a.body = "draining\n";
    } else if (is_ready and !srv.ready) {
        a.status = 503;
        a.body = "starting\n";
    } else if (is_metrics) {
        if (srv.metrics) |m| m.resident_bytes = metrics.residentBytes();
        a.content_type = "text/plain; version=0.0.4; charset=utf-8";
        scratch.claim();
        a.body = metrics.render(&ops_body_scratch) catch "";
        if (a.body.len == 0) a.status = 500;
    }
    return a;
}

/// `retry-after` on the 503 a request gets before the server is ready.
pub const not_ready_retry_after_s: u32 = 1;

/// Fields a trailer section must not carry (RFC 9110 6.5.1): framing, routing, request
/// modifiers, authentication, response control and the content's own description.
const forbidden_trailers = [_][]const u8{
    "transfer-encoding", "content-length", "content-type",     "content-encoding",   "content-range",
    "host",              "te",             "trailer",          "connection",         "keep-alive",
    "upgrade",           "expect",         "range",            "max-forwards",       "authorization",
    "set-cookie",        "cache-control",  "www-authenticate", "proxy-authenticate", "proxy-authorization",
    "age",               "expires",        "date",             "location",           "retry-after",
    "vary",              "pragma",
};

/// Whether a response trailer may carry the field `name`.
pub fn trailerAllowed(name: []const u8) bool {
    for (forbidden_trailers) |f| if (std.ascii.eqlIgnoreCase(name, f)) return false;
    return true;
}

const testing = std.testing;

/// What `opsAnswer` reads of a server.
const FakeServer = struct {
    opts: struct { metrics_path: []const u8 = "", health_path: []const u8 = "/h", ready_path: []const u8 = "/r" } = .{},
    ready: bool = true,
    draining: bool = false,
    retiring: bool = false,
    metrics: ?*metrics.Slot = null,
};

fn statusOf(srv: *const FakeServer, method: []const u8, path: []const u8) ?u16 {
    return if (opsAnswer(srv, method, path)) |a| a.status else null;
}

test "engine answers: health and ready paths through the server's life" {
    var srv = FakeServer{ .ready = false };
    // Starting: alive, not ready; every other request 503 with retry-after, whatever its method.
    try testing.expectEqual(@as(?u16, 200), statusOf(&srv, "GET", "/h"));
    try testing.expectEqual(@as(?u16, 503), statusOf(&srv, "GET", "/r"));
    const other = opsAnswer(&srv, "POST", "/anything").?;
    try testing.expectEqual(@as(u16, 503), other.status);
    try testing.expectEqual(not_ready_retry_after_s, other.retry_after);
    try testing.expectEqual(@as(?u16, 503), statusOf(&srv, "POST", "/h"));
    // Ready: both 200, other requests go to the app (null), also a POST to an ops path.
    srv.ready = true;
    try testing.expectEqual(@as(?u16, 200), statusOf(&srv, "GET", "/r"));
    try testing.expectEqual(@as(?u16, 200), statusOf(&srv, "HEAD", "/h"));
    try testing.expect(opsAnswer(&srv, "HEAD", "/h").?.head_only);
    try testing.expectEqual(@as(?u16, null), statusOf(&srv, "GET", "/"));
    try testing.expectEqual(@as(?u16, null), statusOf(&srv, "POST", "/r"));
    // Paths match exactly.
    try testing.expectEqual(@as(?u16, null), statusOf(&srv, "GET", "/r/"));
    try testing.expectEqual(@as(?u16, null), statusOf(&srv, "GET", "/"));
    // Draining: both 503, "draining".
    srv.draining = true;
    const h = opsAnswer(&srv, "GET", "/h").?;
    try testing.expectEqual(@as(u16, 503), h.status);
    try testing.expectEqualStrings("draining\n", h.body);
    try testing.expectEqual(@as(?u16, 503), statusOf(&srv, "GET", "/r"));
    try testing.expectEqual(@as(?u16, null), statusOf(&srv, "GET", "/"));
    // A worker retired while the others serve on drains without saying so.
    srv.retiring = true;
    try testing.expectEqual(@as(?u16, 200), statusOf(&srv, "GET", "/h"));
    try testing.expectEqual(@as(?u16, 200), statusOf(&srv, "GET", "/r"));
}

test "engine answers: paths that are off answer nothing" {
    var srv = FakeServer{ .opts = .{ .health_path = "", .ready_path = "" } };
    try testing.expectEqual(@as(?u16, null), statusOf(&srv, "GET", ""));
    try testing.expectEqual(@as(?u16, null), statusOf(&srv, "GET", "/h"));
}

test "trailers may not carry framing, routing or control fields" {
    try testing.expect(trailerAllowed("x-checksum"));
    try testing.expect(trailerAllowed("grpc-status"));
    try testing.expect(!trailerAllowed("Content-Length"));
    try testing.expect(!trailerAllowed("transfer-encoding"));
    try testing.expect(!trailerAllowed("SET-COOKIE"));
}
