//! Static files served by the engine (`--static ROUTE=DIR`): a request under ROUTE is
//! answered here, before any app sees it, over whichever protocol carries it.
//!
//! Which mount and which file (and why no path leaves DIR) is `static_paths.zig`; what
//! the fields say (validators, conditional requests, ranges, codings) `static_fields.zig`.
//! HTTP semantics (RFC 9110): content-type by extension, last-modified, a strong ETag,
//! If-Match / If-Unmodified-Since (412), If-None-Match / If-Modified-Since (304), one
//! byte range (206, 416 when unsatisfiable, If-Range), HEAD, 405 for other methods, a
//! directory's index.html, never a listing. The body leaves as pathsend's does:
//! sendfile(2) on plain HTTP/1.1, read and encrypted over TLS, DATA frames over HTTP/2.
const std = @import("std");
const linux = std.os.linux;
const sys = @import("../os/sys.zig");
const stream_mod = @import("stream.zig"); // the engine answers on the protocol-neutral stream, as the app would
const Stream = stream_mod.Stream;
const tracing = @import("../http/tracing.zig");
const paths = @import("static_paths.zig");
const fields_mod = @import("static_fields.zig");

pub const Mount = paths.Mount;
pub const Config = paths.Config;
const path_bytes_max = paths.path_bytes_max;
const match = paths.match;
const decodePath = paths.decodePath;
const openBeneath = paths.openBeneath;
const Encoding = fields_mod.Encoding;
const encodings = fields_mod.encodings;
const acceptable = fields_mod.acceptable;
const contentType = fields_mod.contentType;
const httpDate = fields_mod.httpDate;
const etag = fields_mod.etag;
const Conditions = fields_mod.Conditions;
const evaluate = fields_mod.evaluate;
const Outcome = fields_mod.Outcome;

// ---- answering a request --------------------------------------------------------------------

var path_scratch: [path_bytes_max + 16]u8 = undefined;

/// Answers `req` when it falls under a `--static` mount: true when it did (the stream is
/// finished), false to hand it to the app. Called with the stream held, as the app
/// would be (`Hooks.onRequest`).
pub fn answer(st: *Stream, req: *const stream_mod.Request) bool {
    const cfg = st.conn.server.opts.static orelse return false;
    if (st.isWebSocket()) return false;
    const m = match(cfg, req.path) orelse return false;
    const srv = st.conn.server;
    const started = if (srv.opts.access_log) sys.monotonicUs() else 0;
    aborted = false;
    serve(st, req, cfg, m.mount, m.rest);
    if (srv.opts.access_log) logAccess(st, req, sys.monotonicUs() -| started);
    // `Stream.abort` finished the stream already.
    if (!aborted) st.finish();
    return true;
}

/// The answer could not be made (out of memory for its head): the exchange is abandoned
/// (HTTP/1.1 closes the connection, HTTP/2 resets the stream), and the stream finished.
var aborted = false;

fn abandon(st: *Stream) void {
    aborted = true;
    st.abort();
}

/// The access log line the app's requests get (`zigcorn/protocols/http.py`), for an engine answer
/// (also the 415 of `--request-decompression`).
pub fn logAccess(st: *Stream, req: *const stream_mod.Request, elapsed_us: u64) void {
    var addr_buf: [64]u8 = undefined;
    const peer = st.peer();
    const addr = peer.format(&addr_buf);
    var line: [1024]u8 = undefined;
    const version = switch (req.version) {
        .http10 => "1.0",
        .http11 => "1.1",
        .http2 => "2",
        .http3 => "3",
    };
    const path = req.path[0..@min(req.path.len, 600)];
    const query = req.query[0..@min(req.query.len, 200)];
    var ids_buf: [160]u8 = undefined;
    const ids = tracing.logSuffix(st.conn.server.opts.tracing, &req.added, req.headers, &ids_buf);
    const text = std.fmt.bufPrint(&line, "{s}:{d} - \"{s} {s}{s}{s} HTTP/{s}\" {d} {d} {d}.{d}ms{s}", .{
        if (addr.len > 0) addr else "-",         peer.port,
        req.method[0..@min(req.method.len, 32)], path,
        if (query.len > 0) "?" else "",          query,
        version,                                 st.status,
        st.resp_body_bytes,                      elapsed_us / 1000,
        (elapsed_us % 1000) / 100,               ids,
    }) catch return;
    st.conn.server.hooks.log(st.conn.server.hooks.ctx, .access, text);
}

/// A directory's `index.html`, joined in `path_scratch` after `rel` (which `decodePath`
/// left at its start, with room kept for this suffix).
fn indexPath(rel: [:0]const u8) [:0]const u8 {
    const index = "index.html";
    if (std.mem.eql(u8, rel, ".")) {
        @memcpy(path_scratch[0..index.len], index);
        path_scratch[index.len] = 0;
        return path_scratch[0..index.len :0];
    }
    const n = rel.len;
    std.debug.assert(@intFromPtr(rel.ptr) == @intFromPtr(&path_scratch) and n + 1 + index.len < path_scratch.len);
    path_scratch[n] = '/';
    @memcpy(path_scratch[n + 1 ..][0..index.len], index);
    path_scratch[n + 1 + index.len] = 0;
    return path_scratch[0 .. n + 1 + index.len :0];
}

const Variant = struct { fd: i32, stat: linux.Stat, coding: Encoding };

/// The best precompressed sibling the client takes (`app.js.br`, `.zst`, `.gz`), opened.
fn precompressedVariant(dir_fd: i32, rel: []const u8, accept: []const u8) ?Variant {
    var order: [encodings.len]Encoding = undefined;
    for (acceptable(accept, &order)) |enc| {
        const suffix = enc.suffix();
        if (rel.len + suffix.len + 1 > variant_scratch.len) return null;
        @memcpy(variant_scratch[0..rel.len], rel);
        @memcpy(variant_scratch[rel.len..][0..suffix.len], suffix);
        variant_scratch[rel.len + suffix.len] = 0;
        const vfd = switch (openBeneath(dir_fd, variant_scratch[0 .. rel.len + suffix.len :0])) {
            .ok => |f| f,
            .err => continue,
        };
        var vstat: linux.Stat = undefined;
        if (sys.E.init(linux.fstat(vfd, &vstat)) != .SUCCESS or !linux.S.ISREG(vstat.mode)) {
            sys.close(vfd);
            continue;
        }
        return .{ .fd = vfd, .stat = vstat, .coding = enc };
    }
    return null;
}

fn serve(st: *Stream, req: *const stream_mod.Request, cfg: *const Config, mount: *const Mount, rest: []const u8) void {
    const get = std.mem.eql(u8, req.method, "GET");
    if (!get and !std.mem.eql(u8, req.method, "HEAD")) return plain(st, 405, "Method Not Allowed\n", &.{.{ "allow", "GET, HEAD" }});
    const decoded = decodePath(rest, path_scratch[0 .. path_bytes_max - 16], cfg.dotfiles) catch |e| {
        return if (e == error.BadEncoding) plain(st, 400, "Bad Request\n", &.{}) else plain(st, 404, "Not Found\n", &.{});
    };
    var rel: [:0]const u8 = decoded.rel;
    var fd: i32 = switch (openBeneath(mount.dir_fd, rel)) {
        .ok => |fd| fd,
        .err => |e| return openFailed(st, e),
    };
    var stat: linux.Stat = undefined;
    if (sys.E.init(linux.fstat(fd, &stat)) != .SUCCESS) {
        sys.close(fd);
        return plain(st, 500, "Internal Server Error\n", &.{});
    }
    if (linux.S.ISDIR(stat.mode)) {
        // A directory: its index.html, never a listing.
        sys.close(fd);
        rel = indexPath(rel);
        fd = switch (openBeneath(mount.dir_fd, rel)) {
            .ok => |f| f,
            .err => |e| return openFailed(st, e),
        };
        if (sys.E.init(linux.fstat(fd, &stat)) != .SUCCESS) {
            sys.close(fd);
            return plain(st, 500, "Internal Server Error\n", &.{});
        }
    }
    if (!linux.S.ISREG(stat.mode)) {
        sys.close(fd);
        return plain(st, 404, "Not Found\n", &.{});
    }
    var coding: ?Encoding = null;
    if (cfg.precompressed) if (findField(req.headers, "accept-encoding")) |accept| {
        if (precompressedVariant(mount.dir_fd, rel, accept)) |v| {
            sys.close(fd);
            fd = v.fd;
            stat = v.stat;
            coding = v.coding;
        }
    };
    sendRegular(st, req, cfg, fd, &stat, rel, get, coding);
}

var variant_scratch: [path_bytes_max + 8]u8 = undefined;

fn findField(headers: []const stream_mod.Header, name: []const u8) ?[]const u8 {
    for (headers) |f| if (std.mem.eql(u8, f.name, name)) return f.value;
    return null;
}

fn openFailed(st: *Stream, e: sys.E) void {
    return switch (e) {
        .ACCES => plain(st, 403, "Forbidden\n", &.{}),
        .NOENT, .NOTDIR, .XDEV, .LOOP, .NAMETOOLONG, .PERM, .NXIO, .NODEV => plain(st, 404, "Not Found\n", &.{}),
        else => plain(st, 500, "Internal Server Error\n", &.{}),
    };
}

/// Owns `fd` from here: it goes with the body, or is closed.
fn sendRegular(st: *Stream, req: *const stream_mod.Request, cfg: *const Config, fd: i32, stat: *const linux.Stat, rel: []const u8, get: bool, coding: ?Encoding) void {
    const size: u64 = @intCast(stat.size);
    const mt = stat.mtime();
    const mtime: u64 = @intCast(@max(mt.sec, 0));
    var tag_buf: [48]u8 = undefined;
    const tag = etag(&tag_buf, size, mtime, @intCast(@max(mt.nsec, 0)), if (coding) |c| c.token() else "");
    var date_buf: [29]u8 = undefined;
    const modified = httpDate(&date_buf, mtime);
    var cc_buf: [40]u8 = undefined;
    var fields: [12][2][]const u8 = undefined;
    var n: usize = 0;
    fields[n] = .{ "etag", tag };
    n += 1;
    fields[n] = .{ "last-modified", modified };
    n += 1;
    if (cfg.precompressed) {
        // The answer depends on Accept-Encoding, whichever representation it is.
        fields[n] = .{ "vary", "accept-encoding" };
        n += 1;
    }
    if (cfg.expires) |secs| {
        fields[n] = .{ "cache-control", std.fmt.bufPrint(&cc_buf, "public, max-age={d}", .{secs}) catch unreachable };
        n += 1;
    }
    const outcome = evaluate(Conditions.of(req.headers), tag, mtime, size, get);
    var range_buf: [64]u8 = undefined;
    switch (outcome) {
        .not_modified => {
            sys.close(fd);
            if (!st.answerWhole(304, fields[0..n], "", extraOf(st))) abandon(st);
            return;
        },
        .precondition_failed => {
            sys.close(fd);
            return plain(st, 412, "Precondition Failed\n", &.{});
        },
        .unsatisfiable => {
            sys.close(fd);
            fields[n] = .{ "content-range", std.fmt.bufPrint(&range_buf, "bytes */{d}", .{size}) catch unreachable };
            n += 1;
            return plain(st, 416, "Range Not Satisfiable\n", fields[n - 1 .. n]);
        },
        .full, .part => {},
    }
    sendFile(st, fd, &fields, n, outcome, size, rel, coding);
}

/// A 200 or 206 with the body: the validators in `fields[0..n_before]` gain the range,
/// the type, the coding and the length. Owns `fd`.
fn sendFile(st: *Stream, fd: i32, fields: *[12][2][]const u8, n_before: usize, outcome: Outcome, size: u64, rel: []const u8, coding: ?Encoding) void {
    var n = n_before;
    var len_buf: [24]u8 = undefined;
    var range_buf: [64]u8 = undefined;
    var start: u64 = 0;
    var len: u64 = size;
    var status: u16 = 200;
    if (outcome == .part) {
        start = outcome.part.start;
        len = outcome.part.len;
        status = 206;
        fields[n] = .{ "content-range", std.fmt.bufPrint(&range_buf, "bytes {d}-{d}/{d}", .{ start, start + len - 1, size }) catch unreachable };
        n += 1;
    }
    fields[n] = .{ "content-type", contentType(rel) };
    n += 1;
    if (coding) |c| {
        fields[n] = .{ "content-encoding", c.token() };
        n += 1;
    }
    fields[n] = .{ "accept-ranges", "bytes" };
    n += 1;
    fields[n] = .{ "content-length", std.fmt.bufPrint(&len_buf, "{d}", .{len}) catch unreachable };
    n += 1;
    st.startResponse(status, fields[0..n], extraOf(st), false) catch {
        sys.close(fd);
        return abandon(st);
    };
    sendBody(st, fd, start, len);
}

/// The body after its head: `len` bytes of `fd` from `start`; owns `fd`.
fn sendBody(st: *Stream, fd: i32, start: u64, len: u64) void {
    if (len <= small_file_bytes and !st.is_head_method) {
        // A small body is read at once and leaves with the head in one write.
        defer sys.close(fd);
        const got = switch (sys.pread(fd, small_scratch[0..@intCast(len)], start)) {
            .ok => |g| g,
            .err => 0,
        };
        // Shorter than its stat said (truncated meanwhile): the exchange cannot be completed.
        if (got != len) return abandon(st);
        _ = st.writeBody(small_scratch[0..got], false, null) catch return abandon(st);
        return;
    }
    // The stream owns the descriptor from here (closed when sent, or when the client goes).
    st.sendFd(fd, start, len) catch return abandon(st);
}

/// Files up to this size are read into the response next to its head (the protocols
/// copy bodies this small) instead of being sent from the descriptor.
const small_file_bytes = 4096;
var small_scratch: [small_file_bytes]u8 = undefined;

fn extraOf(st: *Stream) []const [2][]const u8 {
    const cfg = st.conn.server.opts.static orelse return &.{};
    return cfg.extra;
}

/// An error's plain-text answer with the --header fields (`fields` follow its content-type).
fn plain(st: *Stream, status: u16, body: []const u8, fields: []const [2][]const u8) void {
    if (!st.answerPlain(status, fields, body, extraOf(st))) abandon(st);
}
