//! Static files served by the engine (`--static ROUTE=DIR`): a request under ROUTE is
//! answered here, before any app sees it, over whichever protocol carries it.
//!
//! Safety first: the request path is percent-decoded once and split into segments;
//! `..`, backslashes, NUL and control bytes are refused, dotfiles unless asked for.
//! The file is then opened relative to DIR's descriptor with openat2(RESOLVE_BENEATH),
//! so no symlink leads out of DIR either; where the kernel lacks openat2 a checked walk
//! opens one segment at a time and refuses every symlink.
//!
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

/// One `--static ROUTE=DIR`.
pub const Mount = struct {
    /// "/static" (no trailing slash); "" for a mount at "/".
    route: []const u8,
    /// DIR, opened once (O_PATH | O_DIRECTORY) when the engine starts.
    dir_fd: i32,
};

pub const Config = struct {
    mounts: []const Mount = &.{},
    /// `--static-expires`: cache-control max-age in seconds; null: no cache-control.
    expires: ?u32 = null,
    /// `--static-dotfiles`: names starting with '.' are served too.
    dotfiles: bool = false,
    /// `--static-precompressed`: a `.br`, `.zst` or `.gz` sibling is sent to a client
    /// that accepts that coding.
    precompressed: bool = false,
    /// `--header` fields, added to every answer as to the app's (owned by the engine).
    extra: []const [2][]const u8 = &.{},
    /// How many mounts were allocated (python/options.zig frees them).
    mounts_cap: usize = 0,
};

/// The decoded relative path past this is refused (PATH_MAX).
pub const path_bytes_max = 4096;
/// A segment longer than this cannot name a file (NAME_MAX).
const segment_bytes_max = 255;

// ---- routing and the path decoder ---------------------------------------------------

/// The mount serving `path` (origin-form, before '?', still percent-encoded) and what
/// follows its route; the longest route wins.
pub fn match(cfg: *const Config, path: []const u8) ?struct { mount: *const Mount, rest: []const u8 } {
    var best: ?*const Mount = null;
    for (cfg.mounts) |*m| {
        if (!std.mem.startsWith(u8, path, m.route)) continue;
        if (path.len > m.route.len and path[m.route.len] != '/') continue;
        if (path.len == m.route.len and m.route.len == 0) continue;
        if (best == null or m.route.len > best.?.route.len) best = m;
    }
    const m = best orelse return null;
    return .{ .mount = m, .rest = path[m.route.len..] };
}

pub const DecodeError = error{
    /// A '%' not followed by two hex digits, or a NUL: 400.
    BadEncoding,
    /// `..`, a backslash, a control byte, or a dotfile: 404, as for a missing file.
    Forbidden,
    /// Longer than a path or a name can be: 404.
    TooLong,
};

pub const Decoded = struct {
    /// Segments joined by '/', relative to DIR; "." for DIR itself.
    rel: [:0]const u8,
};

/// Decodes what follows a route into a path relative to DIR, in `out`. Percent-decoding
/// happens exactly once (`%252e` stays the literal name `%2e`); a decoded '/' separates
/// segments as a raw one does. Empty and "." segments are skipped.
pub fn decodePath(rest: []const u8, out: []u8, dotfiles: bool) DecodeError!Decoded {
    std.debug.assert(out.len >= 2);
    var len: usize = 0;
    var seg_start: usize = 0;
    var i: usize = 0;
    while (true) {
        const at_end = i >= rest.len;
        var ch: u8 = '/';
        if (!at_end) {
            ch = rest[i];
            if (ch == '%') {
                if (i + 2 >= rest.len) return error.BadEncoding;
                const hi = std.fmt.charToDigit(rest[i + 1], 16) catch return error.BadEncoding;
                const lo = std.fmt.charToDigit(rest[i + 2], 16) catch return error.BadEncoding;
                ch = hi * 16 + lo;
                i += 3;
            } else i += 1;
        }
        if (ch == '/') {
            // A segment ends: check it, or drop it when empty or ".".
            const seg = out[seg_start..len];
            if (seg.len == 0 or std.mem.eql(u8, seg, ".")) {
                len = seg_start;
            } else {
                if (std.mem.eql(u8, seg, "..")) return error.Forbidden;
                if (seg[0] == '.' and !dotfiles) return error.Forbidden;
                if (seg.len > segment_bytes_max) return error.TooLong;
                if (len + 1 >= out.len) return error.TooLong;
                out[len] = '/';
                len += 1;
                seg_start = len;
            }
            if (at_end) break;
            continue;
        }
        if (ch == 0) return error.BadEncoding;
        if (ch == '\\' or ch < 0x20 or ch == 0x7f) return error.Forbidden;
        if (len + 2 >= out.len) return error.TooLong;
        out[len] = ch;
        len += 1;
    }
    // Drop the separator after the last segment.
    if (len > 0) len -= 1;
    if (len == 0) {
        out[0] = '.';
        len = 1;
    }
    out[len] = 0;
    return .{ .rel = out[0..len :0] };
}

// ---- opening beneath DIR --------------------------------------------------------------

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;
const OpenHow = extern struct { flags: u64, mode: u64, resolve: u64 };

/// openat2 is missing (ENOSYS) or filtered (a seccomp EPERM/ENOSYS): the walk is used
/// from then on. Tests set it to exercise the walk.
pub var openat2_missing: bool = false;

/// The flags a served file is opened with: never blocking (a FIFO in DIR must not stall
/// the loop), never a controlling terminal.
const file_flags: linux.O = .{ .ACCMODE = .RDONLY, .CLOEXEC = true, .NOCTTY = true, .NONBLOCK = true };

/// Opens `rel` beneath `dir_fd`; the descriptor or the errno (EXDEV/ELOOP: it would
/// leave DIR or follow a refused symlink).
pub fn openBeneath(dir_fd: i32, rel: [:0]const u8) sys.Result(i32) {
    if (!openat2_missing) {
        var how = OpenHow{ .flags = @as(u32, @bitCast(file_flags)), .mode = 0, .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
        const rc = linux.syscall4(.openat2, @as(usize, @bitCast(@as(isize, dir_fd))), @intFromPtr(rel.ptr), @intFromPtr(&how), @sizeOf(OpenHow));
        const e = sys.E.init(rc);
        switch (e) {
            .SUCCESS => return .{ .ok = @intCast(rc) },
            .NOSYS, .PERM => openat2_missing = true,
            .INTR, .AGAIN => return openBeneath(dir_fd, rel),
            else => return .{ .err = e },
        }
    }
    return walk(dir_fd, rel);
}

/// The checked walk: each directory opened with O_NOFOLLOW, the file too; a symlink
/// anywhere on the way is refused (ELOOP/ENOTDIR).
fn walk(dir_fd: i32, rel: [:0]const u8) sys.Result(i32) {
    var name_buf: [segment_bytes_max + 1]u8 = undefined;
    var cur = dir_fd;
    var it = std.mem.splitScalar(u8, rel, '/');
    var seg = it.next().?;
    while (it.next()) |next| : (seg = next) {
        if (seg.len > segment_bytes_max or std.mem.eql(u8, seg, "..")) return closing(cur, dir_fd, .{ .err = .NOENT });
        @memcpy(name_buf[0..seg.len], seg);
        name_buf[seg.len] = 0;
        const rc = linux.openat(cur, name_buf[0..seg.len :0], .{ .PATH = true, .DIRECTORY = true, .NOFOLLOW = true, .CLOEXEC = true }, 0);
        if (cur != dir_fd) sys.close(cur);
        const e = sys.E.init(rc);
        if (e != .SUCCESS) return .{ .err = if (e == .NOTDIR) .LOOP else e };
        cur = @intCast(rc);
    }
    if (seg.len > segment_bytes_max or std.mem.eql(u8, seg, "..")) return closing(cur, dir_fd, .{ .err = .NOENT });
    @memcpy(name_buf[0..seg.len], seg);
    name_buf[seg.len] = 0;
    var flags = file_flags;
    // DIR itself ("."): no symlink can be met.
    flags.NOFOLLOW = !std.mem.eql(u8, seg, ".");
    const rc = linux.openat(cur, name_buf[0..seg.len :0], flags, 0);
    const e = sys.E.init(rc);
    return closing(cur, dir_fd, if (e == .SUCCESS) .{ .ok = @intCast(rc) } else .{ .err = e });
}

fn closing(cur: i32, dir_fd: i32, r: sys.Result(i32)) sys.Result(i32) {
    if (cur != dir_fd) sys.close(cur);
    return r;
}

// ---- content types ----------------------------------------------------------------------

const types = [_][2][]const u8{
    .{ "html", "text/html; charset=utf-8" },         .{ "htm", "text/html; charset=utf-8" },
    .{ "css", "text/css; charset=utf-8" },           .{ "js", "text/javascript; charset=utf-8" },
    .{ "mjs", "text/javascript; charset=utf-8" },    .{ "json", "application/json" },
    .{ "map", "application/json" },                  .{ "txt", "text/plain; charset=utf-8" },
    .{ "md", "text/markdown; charset=utf-8" },       .{ "csv", "text/csv; charset=utf-8" },
    .{ "xml", "application/xml" },                   .{ "svg", "image/svg+xml" },
    .{ "png", "image/png" },                         .{ "jpg", "image/jpeg" },
    .{ "jpeg", "image/jpeg" },                       .{ "gif", "image/gif" },
    .{ "webp", "image/webp" },                       .{ "avif", "image/avif" },
    .{ "ico", "image/vnd.microsoft.icon" },          .{ "bmp", "image/bmp" },
    .{ "woff", "font/woff" },                        .{ "woff2", "font/woff2" },
    .{ "ttf", "font/ttf" },                          .{ "otf", "font/otf" },
    .{ "wasm", "application/wasm" },                 .{ "pdf", "application/pdf" },
    .{ "zip", "application/zip" },                   .{ "gz", "application/gzip" },
    .{ "tar", "application/x-tar" },                 .{ "mp4", "video/mp4" },
    .{ "webm", "video/webm" },                       .{ "mp3", "audio/mpeg" },
    .{ "ogg", "audio/ogg" },                         .{ "wav", "audio/wav" },
    .{ "webmanifest", "application/manifest+json" }, .{ "xhtml", "application/xhtml+xml" },
};

/// The content-type for a file name, by its extension (case-insensitive).
pub fn contentType(name: []const u8) []const u8 {
    const base = if (std.mem.lastIndexOfScalar(u8, name, '/')) |i| name[i + 1 ..] else name;
    const dot = std.mem.lastIndexOfScalar(u8, base, '.') orelse return "application/octet-stream";
    const ext = base[dot + 1 ..];
    for (types) |t| if (std.ascii.eqlIgnoreCase(ext, t[0])) return t[1];
    return "application/octet-stream";
}

// ---- validators and conditional requests -----------------------------------------------

const day_names = [_][]const u8{ "Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed" };
const month_names = [_][]const u8{ "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };

/// IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") of Unix seconds.
pub fn httpDate(buf: *[29]u8, secs: u64) []const u8 {
    const es = std.time.epoch.EpochSeconds{ .secs = secs };
    const day = es.getEpochDay();
    const yd = day.calculateYearDay();
    const md = yd.calculateMonthDay();
    const ds = es.getDaySeconds();
    return std.fmt.bufPrint(buf, "{s}, {d:0>2} {s} {d:0>4} {d:0>2}:{d:0>2}:{d:0>2} GMT", .{
        day_names[@intCast(day.day % 7)], md.day_index + 1,     months(md.month),
        @min(yd.year, 9999),              ds.getHoursIntoDay(), ds.getMinutesIntoHour(),
        ds.getSecondsIntoMinute(),
    }) catch unreachable;
}

fn months(m: std.time.epoch.Month) []const u8 {
    return month_names[@intFromEnum(m) - 1];
}

/// Unix seconds of an IMF-fixdate, or null for anything else (the field is then
/// ignored, RFC 9110 13.1.3). The obsolete formats are not taken.
pub fn parseHttpDate(text_in: []const u8) ?u64 {
    const t = std.mem.trim(u8, text_in, " \t");
    if (t.len != 29) return null;
    if (t[3] != ',' or t[4] != ' ' or t[7] != ' ' or t[11] != ' ' or t[16] != ' ' or t[19] != ':' or t[22] != ':' or t[25] != ' ') return null;
    if (!std.mem.eql(u8, t[26..29], "GMT")) return null;
    const day = std.fmt.parseUnsigned(u8, t[5..7], 10) catch return null;
    var month: ?u8 = null;
    for (month_names, 0..) |name, i| if (std.mem.eql(u8, t[8..11], name)) {
        month = @intCast(i + 1);
    };
    const mon = month orelse return null;
    const year = std.fmt.parseUnsigned(u16, t[12..16], 10) catch return null;
    const hh = std.fmt.parseUnsigned(u8, t[17..19], 10) catch return null;
    const mm = std.fmt.parseUnsigned(u8, t[20..22], 10) catch return null;
    const ss = std.fmt.parseUnsigned(u8, t[23..25], 10) catch return null;
    if (year < 1970 or day < 1 or day > 31 or hh > 23 or mm > 59 or ss > 60) return null;
    if (day > std.time.epoch.getDaysInMonth(year, @enumFromInt(mon))) return null;
    var days: u64 = 0;
    var y: u16 = 1970;
    while (y < year) : (y += 1) days += std.time.epoch.getDaysInYear(y);
    var m: u8 = 1;
    while (m < mon) : (m += 1) days += std.time.epoch.getDaysInMonth(year, @enumFromInt(m));
    days += day - 1;
    return days * 86400 + @as(u64, hh) * 3600 + @as(u64, mm) * 60 + @min(ss, 59);
}

/// A strong validator from the file's size and modification time (nanoseconds), and
/// the content coding of a precompressed variant ("" for the file itself): each
/// representation has its own.
pub fn etag(buf: *[48]u8, size: u64, mtime_s: u64, mtime_ns: u64, coding: []const u8) []const u8 {
    return std.fmt.bufPrint(buf, "\"{x}-{x}-{x}{s}{s}\"", .{ mtime_s, mtime_ns, size, if (coding.len > 0) "-" else "", coding[0..@min(coding.len, 4)] }) catch unreachable;
}

/// Whether an If-None-Match (`weak` comparison) or If-Match (strong) list names `tag`
/// (our strong ETag, quotes included). `*` matches any current representation.
pub fn etagListMatches(list: []const u8, tag: []const u8, weak: bool) bool {
    var it = std.mem.splitScalar(u8, list, ',');
    while (it.next()) |raw| {
        var item = std.mem.trim(u8, raw, " \t");
        if (item.len == 0) continue;
        if (std.mem.eql(u8, item, "*")) return true;
        var is_weak = false;
        if (std.mem.startsWith(u8, item, "W/")) {
            is_weak = true;
            item = item[2..];
        }
        if (is_weak and !weak) continue;
        if (std.mem.eql(u8, item, tag)) return true;
    }
    return false;
}

/// A byte range to serve, or why not.
pub const Range = union(enum) {
    /// No Range, or one the server ignores (not bytes, malformed, several ranges): 200.
    none,
    /// One satisfiable range: 206.
    part: struct { start: u64, len: u64 },
    /// 416.
    unsatisfiable,
};

/// A Range field's value for a representation of `size` bytes (RFC 9110 14.1.2): one
/// `bytes=a-b`, `a-` or `-n`. Several ranges are served as the whole (allowed: a server
/// may ignore Range), as is anything malformed.
pub fn parseRange(value_in: []const u8, size: u64) Range {
    const value = std.mem.trim(u8, value_in, " \t");
    if (value.len < 6 or !std.ascii.eqlIgnoreCase(value[0..6], "bytes=")) return .none;
    const set = std.mem.trim(u8, value[6..], " \t");
    if (std.mem.indexOfScalar(u8, set, ',') != null) return .none;
    const dash = std.mem.indexOfScalar(u8, set, '-') orelse return .none;
    const first = set[0..dash];
    const last = set[dash + 1 ..];
    if (first.len == 0) {
        // Suffix: the last n bytes.
        const n = digits(last) orelse return .none;
        if (n == 0 or size == 0) return .unsatisfiable;
        const len = @min(n, size);
        return .{ .part = .{ .start = size - len, .len = len } };
    }
    // A first position past u64 is past any file.
    const start = digits(first) orelse return if (allDigits(first)) .unsatisfiable else .none;
    var end: u64 = size -| 1;
    if (last.len > 0) {
        // A last position past u64 is past the end: clamped like any other.
        const e = digits(last) orelse if (allDigits(last)) std.math.maxInt(u64) else return .none;
        if (e < start) return .none;
        end = @min(e, size -| 1);
    }
    if (start >= size) return .unsatisfiable;
    return .{ .part = .{ .start = start, .len = end - start + 1 } };
}

fn allDigits(s: []const u8) bool {
    if (s.len == 0) return false;
    for (s) |ch| if (!std.ascii.isDigit(ch)) return false;
    return true;
}

fn digits(s: []const u8) ?u64 {
    if (!allDigits(s)) return null;
    return std.fmt.parseUnsigned(u64, s, 10) catch null;
}

/// The request fields the answer depends on.
pub const Conditions = struct {
    if_match: ?[]const u8 = null,
    if_none_match: ?[]const u8 = null,
    if_modified_since: ?[]const u8 = null,
    if_unmodified_since: ?[]const u8 = null,
    if_range: ?[]const u8 = null,
    range: ?[]const u8 = null,

    pub fn of(headers: []const stream_mod.Header) Conditions {
        var c = Conditions{};
        for (headers) |f| {
            if (std.mem.eql(u8, f.name, "range")) c.range = f.value else if (std.mem.eql(u8, f.name, "if-none-match")) c.if_none_match = f.value else if (std.mem.eql(u8, f.name, "if-modified-since")) c.if_modified_since = f.value else if (std.mem.eql(u8, f.name, "if-match")) c.if_match = f.value else if (std.mem.eql(u8, f.name, "if-unmodified-since")) c.if_unmodified_since = f.value else if (std.mem.eql(u8, f.name, "if-range")) c.if_range = f.value;
        }
        return c;
    }
};

/// What to answer for a file, before any byte of it is read.
pub const Outcome = union(enum) {
    full,
    part: struct { start: u64, len: u64 },
    not_modified,
    precondition_failed,
    unsatisfiable,
};

/// RFC 9110 13.2.2's order: If-Match, If-Unmodified-Since, If-None-Match,
/// If-Modified-Since, then Range with If-Range. `tag` is ours (strong), `mtime` in
/// seconds; `get`: the method is GET (HEAD answers as GET without a body, but Range
/// applies to GET only).
pub fn evaluate(c: Conditions, tag: []const u8, mtime: u64, size: u64, get: bool) Outcome {
    if (c.if_match) |v| {
        if (!etagListMatches(v, tag, false)) return .precondition_failed;
    } else if (c.if_unmodified_since) |v| {
        if (parseHttpDate(v)) |d| if (mtime > d) return .precondition_failed;
    }
    if (c.if_none_match) |v| {
        if (etagListMatches(v, tag, true)) return .not_modified;
    } else if (c.if_modified_since) |v| {
        if (parseHttpDate(v)) |d| if (mtime <= d) return .not_modified;
    }
    const range = c.range orelse return .full;
    if (!get) return .full;
    if (c.if_range) |v| {
        const t = std.mem.trim(u8, v, " \t");
        if (t.len > 0 and (t[0] == '"' or std.mem.startsWith(u8, t, "W/"))) {
            // Strong comparison: a weak tag never matches.
            if (!std.mem.eql(u8, t, tag)) return .full;
        } else {
            const d = parseHttpDate(t) orelse return .full;
            if (d != mtime) return .full;
        }
    }
    return switch (parseRange(range, size)) {
        .none => .full,
        .unsatisfiable => .unsatisfiable,
        .part => |p| .{ .part = .{ .start = p.start, .len = p.len } },
    };
}

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

/// The access log line the app's requests get (`zigcorn/http.py`), for an engine answer
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

// ---- precompressed variants --------------------------------------------------------------

/// The content codings a precompressed sibling may have, in the server's order of
/// preference when the client weighs them alike.
pub const Encoding = enum {
    br,
    zstd,
    gzip,

    pub fn token(self: Encoding) []const u8 {
        return @tagName(self);
    }

    pub fn suffix(self: Encoding) []const u8 {
        return switch (self) {
            .br => ".br",
            .zstd => ".zst",
            .gzip => ".gz",
        };
    }
};
const encodings = [_]Encoding{ .br, .zstd, .gzip };

/// A qvalue ("0", "0.5", "1", "1.000") in thousandths, or null when malformed.
fn qvalue(text: []const u8) ?u16 {
    if (text.len == 0 or text.len > 5) return null;
    if (text[0] != '0' and text[0] != '1') return null;
    var q: u16 = @as(u16, text[0] - '0') * 1000;
    if (text.len == 1) return q;
    if (text[1] != '.') return null;
    var scale: u16 = 100;
    for (text[2..]) |ch| {
        if (!std.ascii.isDigit(ch)) return null;
        q += @as(u16, ch - '0') * scale;
        scale /= 10;
    }
    return if (q > 1000) null else q;
}

/// The codings of `encodings` an Accept-Encoding value accepts (q > 0, named or by `*`),
/// best first: by weight, then in the server's order. Written into `out`.
pub fn acceptable(value: []const u8, out: *[encodings.len]Encoding) []const Encoding {
    var weight = [_]?u16{null} ** encodings.len;
    var star: ?u16 = null;
    var it = std.mem.splitScalar(u8, value, ',');
    while (it.next()) |item_raw| {
        var parts = std.mem.splitScalar(u8, item_raw, ';');
        const name = std.mem.trim(u8, parts.first(), " \t");
        if (name.len == 0) continue;
        var q: u16 = 1000;
        while (parts.next()) |param_raw| {
            const param = std.mem.trim(u8, param_raw, " \t");
            if (param.len >= 2 and (param[0] == 'q' or param[0] == 'Q') and param[1] == '=') {
                q = qvalue(param[2..]) orelse 0;
            }
        }
        if (std.mem.eql(u8, name, "*")) {
            star = q;
            continue;
        }
        for (encodings, 0..) |enc, i| {
            const named = std.ascii.eqlIgnoreCase(name, enc.token()) or (enc == .gzip and std.ascii.eqlIgnoreCase(name, "x-gzip"));
            if (named) weight[i] = q;
        }
    }
    var n: usize = 0;
    var taken = [_]bool{false} ** encodings.len;
    while (true) {
        var best: ?usize = null;
        var best_q: u16 = 0;
        for (encodings, 0..) |_, i| {
            if (taken[i]) continue;
            const q = weight[i] orelse star orelse 0;
            if (q > best_q) {
                best = i;
                best_q = q;
            }
        }
        const i = best orelse break;
        taken[i] = true;
        out[n] = encodings[i];
        n += 1;
    }
    return out[0..n];
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
    var len_buf: [24]u8 = undefined;
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

// ---- tests -------------------------------------------------------------------------------

const tt = std.testing;

fn dec(rest: []const u8) DecodeError![]const u8 {
    const S = struct {
        var buf: [path_bytes_max]u8 = undefined;
    };
    const d = try decodePath(rest, &S.buf, false);
    return d.rel;
}

test "static: routes match whole segments, the longest wins" {
    const mounts = [_]Mount{ .{ .route = "/static", .dir_fd = 1 }, .{ .route = "/static/img", .dir_fd = 2 }, .{ .route = "", .dir_fd = 3 } };
    const cfg = Config{ .mounts = mounts[0..2] };
    try tt.expect(match(&cfg, "/staticx") == null);
    try tt.expect(match(&cfg, "/other") == null);
    try tt.expectEqual(@as(i32, 1), match(&cfg, "/static").?.mount.dir_fd);
    try tt.expectEqualStrings("/a.css", match(&cfg, "/static/a.css").?.rest);
    try tt.expectEqual(@as(i32, 2), match(&cfg, "/static/img/x.png").?.mount.dir_fd);
    try tt.expectEqual(@as(i32, 1), match(&cfg, "/static/imgs").?.mount.dir_fd);
    const root = Config{ .mounts = mounts[2..] };
    try tt.expectEqualStrings("/x", match(&root, "/x").?.rest);
    try tt.expectEqualStrings("/", match(&root, "/").?.rest);
}

test "static: the decoder joins segments and decodes once" {
    try tt.expectEqualStrings("a/b.txt", try dec("/a/b.txt"));
    try tt.expectEqualStrings("a/b.txt", try dec("//a///b.txt"));
    try tt.expectEqualStrings("a/b.txt", try dec("/./a/./b.txt"));
    try tt.expectEqualStrings(".", try dec(""));
    try tt.expectEqualStrings(".", try dec("/"));
    try tt.expectEqualStrings("dir", try dec("/dir/"));
    try tt.expectEqualStrings("a b.txt", try dec("/a%20b.txt"));
    try tt.expectEqualStrings("a/b", try dec("/a%2fb"));
    // Double-encoded stays literal after one decoding.
    try tt.expectEqualStrings("%2e%2e/x", try dec("/%252e%252e/x"));
    try tt.expectEqualStrings("%2e%2e%2fetc", try dec("/%252e%252e%252fetc"));
    try tt.expectEqualStrings("\xc3\xa9", try dec("/%C3%A9"));
    try tt.expectEqualStrings("etc/passwd", try dec("//etc/passwd"));
}

test "static: the decoder refuses traversal, backslashes, NUL, control bytes and dotfiles" {
    const forbidden = [_][]const u8{
        "/..",        "/../x",     "/a/../../x",     "/%2e%2e/x",    "/%2E%2E/x",    "/.%2e/x",
        "/%2e./x",    "/a/..%2fx", "/..%2f..%2fetc", "/a%2f..%2f..", "/..\\x",       "/a\\b",
        "/%5c..%5cx", "/%0a",      "/a%7f",          "/.env",        "/a/.git/HEAD", "/%2eenv",
        "/a/%2e%2e",
    };
    for (forbidden) |p| {
        if (dec(p)) |got| {
            std.debug.print("{s} decoded to {s}\n", .{ p, got });
            return error.TestUnexpectedResult;
        } else |e| try tt.expectEqual(error.Forbidden, e);
    }
    const bad = [_][]const u8{ "/a%00b", "/%", "/%2", "/%zz", "/a%2", "/%g0" };
    for (bad) |p| try tt.expectError(error.BadEncoding, dec(p));
    // Dotfiles when asked for; `..` never.
    var buf: [64]u8 = undefined;
    try tt.expectEqualStrings(".env", (try decodePath("/.env", &buf, true)).rel);
    try tt.expectError(error.Forbidden, decodePath("/..", &buf, true));
    try tt.expectError(error.Forbidden, decodePath("/%2e%2e", &buf, true));
}

test "static: the decoder bounds names and paths" {
    try tt.expectError(error.TooLong, dec("/" ++ "a" ** 256));
    _ = try dec("/" ++ "a" ** 255);
    var small: [8]u8 = undefined;
    try tt.expectError(error.TooLong, decodePath("/abcdefgh", &small, false));
    try tt.expectEqualStrings("abcde", (try decodePath("/abcde", &small, false)).rel);
    try tt.expectError(error.TooLong, decodePath("/abc/defg", &small, false));
}

test "static: fuzz the decoder: whatever it returns is a clean relative path" {
    var prng = std.Random.DefaultPrng.init(0x5eed);
    const r = prng.random();
    const alphabet = "/.%25eE2fF5cC0a\\x";
    var input: [48]u8 = undefined;
    var out: [64]u8 = undefined;
    for (0..200_000) |_| {
        const n = r.uintLessThan(usize, input.len);
        for (input[0..n]) |*ch| ch.* = if (r.uintLessThan(u8, 8) == 0) r.int(u8) else alphabet[r.uintLessThan(usize, alphabet.len)];
        const d = decodePath(input[0..n], &out, r.boolean()) catch continue;
        const rel = d.rel;
        try tt.expect(rel.len > 0 and rel.len < out.len);
        try tt.expect(rel[0] != '/' and rel[rel.len - 1] != '/');
        try tt.expect(std.mem.indexOfScalar(u8, rel, 0) == null);
        try tt.expect(std.mem.indexOfScalar(u8, rel, '\\') == null);
        if (!std.mem.eql(u8, rel, ".")) {
            var it = std.mem.splitScalar(u8, rel, '/');
            while (it.next()) |seg| {
                try tt.expect(seg.len > 0);
                try tt.expect(!std.mem.eql(u8, seg, ".") and !std.mem.eql(u8, seg, ".."));
            }
        }
    }
}

test "static: ranges a-b, a-, -n, unsatisfiable and ignored" {
    const R = Range;
    const eq = struct {
        fn part(r: R, start: u64, len: u64) !void {
            try tt.expectEqual(start, r.part.start);
            try tt.expectEqual(len, r.part.len);
        }
    };
    try eq.part(parseRange("bytes=0-0", 10), 0, 1);
    try eq.part(parseRange("bytes=0-9", 10), 0, 10);
    try eq.part(parseRange("bytes=2-5", 10), 2, 4);
    try eq.part(parseRange("bytes=5-100", 10), 5, 5);
    try eq.part(parseRange("bytes=5-18446744073709551616", 10), 5, 5);
    try eq.part(parseRange("bytes=9-", 10), 9, 1);
    try eq.part(parseRange("bytes=0-", 10), 0, 10);
    try eq.part(parseRange("bytes=-3", 10), 7, 3);
    try eq.part(parseRange("bytes=-30", 10), 0, 10);
    try eq.part(parseRange("BYTES= 1-2 ", 10), 1, 2);
    try tt.expect(parseRange("bytes=10-", 10) == .unsatisfiable);
    try tt.expect(parseRange("bytes=10-20", 10) == .unsatisfiable);
    try tt.expect(parseRange("bytes=-0", 10) == .unsatisfiable);
    try tt.expect(parseRange("bytes=0-", 0) == .unsatisfiable);
    try tt.expect(parseRange("bytes=-5", 0) == .unsatisfiable);
    try tt.expect(parseRange("bytes=99999999999999999999-", 10) == .unsatisfiable);
    // Ignored: served whole.
    const ignored = [_][]const u8{ "bytes=5-2", "bytes=0-1,3-4", "items=0-1", "bytes=", "bytes=-", "bytes=a-b", "bytes=1", "bytes=+1-2", "bytes=1--2", "bytes 0-1", "" };
    for (ignored) |v| try tt.expect(parseRange(v, 10) == .none);
}

test "static: ETag lists: weak comparison for If-None-Match, strong for If-Match, and *" {
    const tag = "\"5f-0-a\"";
    try tt.expect(etagListMatches("\"5f-0-a\"", tag, true));
    try tt.expect(etagListMatches("W/\"5f-0-a\"", tag, true));
    try tt.expect(!etagListMatches("W/\"5f-0-a\"", tag, false));
    try tt.expect(etagListMatches("\"x\", \"5f-0-a\"", tag, true));
    try tt.expect(etagListMatches("\"x\",W/\"5f-0-a\" ", tag, true));
    try tt.expect(!etagListMatches("\"x\", \"y\"", tag, true));
    try tt.expect(etagListMatches("*", tag, true));
    try tt.expect(etagListMatches("*", tag, false));
    try tt.expect(!etagListMatches("5f-0-a", tag, true)); // unquoted is not the tag
    try tt.expect(!etagListMatches("", tag, true));
}

test "static: HTTP dates round-trip, and malformed ones are ignored" {
    var buf: [29]u8 = undefined;
    try tt.expectEqualStrings("Sun, 06 Nov 1994 08:49:37 GMT", httpDate(&buf, 784111777));
    try tt.expectEqual(@as(?u64, 784111777), parseHttpDate("Sun, 06 Nov 1994 08:49:37 GMT"));
    try tt.expectEqualStrings("Thu, 01 Jan 1970 00:00:00 GMT", httpDate(&buf, 0));
    try tt.expectEqual(@as(?u64, 0), parseHttpDate("Thu, 01 Jan 1970 00:00:00 GMT"));
    try tt.expectEqual(@as(?u64, 951782400), parseHttpDate("Tue, 29 Feb 2000 00:00:00 GMT"));
    var s: u64 = 0;
    while (s < 4_000_000_000) : (s += 7_919_191) try tt.expectEqual(@as(?u64, s), parseHttpDate(httpDate(&buf, s)));
    const bad = [_][]const u8{ "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 31 Feb 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nox 1994 08:49:37 GMT", "", "garbage" };
    for (bad) |b| try tt.expect(parseHttpDate(b) == null);
}

test "static: conditional requests in RFC 9110's order, and If-Range" {
    const tag = "\"1-0-a\"";
    const mtime: u64 = 784111777;
    const date = "Sun, 06 Nov 1994 08:49:37 GMT";
    const before = "Sun, 06 Nov 1994 08:49:36 GMT";
    try tt.expect(evaluate(.{}, tag, mtime, 10, true) == .full);
    try tt.expect(evaluate(.{ .if_none_match = tag }, tag, mtime, 10, true) == .not_modified);
    try tt.expect(evaluate(.{ .if_none_match = tag }, tag, mtime, 10, false) == .not_modified);
    try tt.expect(evaluate(.{ .if_none_match = "\"other\"" }, tag, mtime, 10, true) == .full);
    // If-None-Match wins over If-Modified-Since.
    try tt.expect(evaluate(.{ .if_none_match = "\"other\"", .if_modified_since = date }, tag, mtime, 10, true) == .full);
    try tt.expect(evaluate(.{ .if_modified_since = date }, tag, mtime, 10, true) == .not_modified);
    try tt.expect(evaluate(.{ .if_modified_since = before }, tag, mtime, 10, true) == .full);
    try tt.expect(evaluate(.{ .if_modified_since = "nonsense" }, tag, mtime, 10, true) == .full);
    try tt.expect(evaluate(.{ .if_match = "\"other\"" }, tag, mtime, 10, true) == .precondition_failed);
    try tt.expect(evaluate(.{ .if_match = "W/\"1-0-a\"" }, tag, mtime, 10, true) == .precondition_failed);
    try tt.expect(evaluate(.{ .if_match = "*" }, tag, mtime, 10, true) == .full);
    try tt.expect(evaluate(.{ .if_unmodified_since = before }, tag, mtime, 10, true) == .precondition_failed);
    try tt.expect(evaluate(.{ .if_unmodified_since = date }, tag, mtime, 10, true) == .full);
    // Ranges: GET only; If-Range by strong tag or exact date.
    try tt.expect(evaluate(.{ .range = "bytes=0-1" }, tag, mtime, 10, true) == .part);
    try tt.expect(evaluate(.{ .range = "bytes=0-1" }, tag, mtime, 10, false) == .full);
    try tt.expect(evaluate(.{ .range = "bytes=20-" }, tag, mtime, 10, true) == .unsatisfiable);
    try tt.expect(evaluate(.{ .range = "bytes=0-1", .if_range = tag }, tag, mtime, 10, true) == .part);
    try tt.expect(evaluate(.{ .range = "bytes=0-1", .if_range = "W/\"1-0-a\"" }, tag, mtime, 10, true) == .full);
    try tt.expect(evaluate(.{ .range = "bytes=0-1", .if_range = "\"old\"" }, tag, mtime, 10, true) == .full);
    try tt.expect(evaluate(.{ .range = "bytes=0-1", .if_range = date }, tag, mtime, 10, true) == .part);
    try tt.expect(evaluate(.{ .range = "bytes=0-1", .if_range = before }, tag, mtime, 10, true) == .full);
    try tt.expect(evaluate(.{ .range = "bytes=0-1", .if_range = "junk" }, tag, mtime, 10, true) == .full);
    // A 304 comes before any range.
    try tt.expect(evaluate(.{ .range = "bytes=0-1", .if_none_match = "*" }, tag, mtime, 10, true) == .not_modified);
}

test "static: content types by extension" {
    try tt.expectEqualStrings("text/html; charset=utf-8", contentType("a/index.html"));
    try tt.expectEqualStrings("text/css; charset=utf-8", contentType("x.CSS"));
    try tt.expectEqualStrings("application/wasm", contentType("m.wasm"));
    try tt.expectEqualStrings("application/octet-stream", contentType("README"));
    try tt.expectEqualStrings("application/octet-stream", contentType("a.b/c"));
    try tt.expectEqualStrings("application/octet-stream", contentType("x.unknown"));
}

test "static: opening beneath DIR, with openat2 and with the checked walk" {
    var tmp = tt.tmpDir(.{});
    defer tmp.cleanup();
    try tmp.dir.makePath("root/sub");
    try tmp.dir.writeFile(.{ .sub_path = "root/sub/f.txt", .data = "hi" });
    try tmp.dir.writeFile(.{ .sub_path = "secret.txt", .data = "no" });
    try tmp.dir.symLink("../secret.txt", "root/out", .{});
    try tmp.dir.symLink("sub/f.txt", "root/in", .{});
    try tmp.dir.symLink("../../secret.txt", "root/sub/up", .{});
    var root = try tmp.dir.openDir("root", .{});
    defer root.close();
    const saved = openat2_missing;
    defer openat2_missing = saved;
    for ([_]bool{ false, true }) |walk_only| {
        openat2_missing = walk_only;
        switch (openBeneath(root.fd, "sub/f.txt")) {
            .ok => |fd| sys.close(fd),
            .err => return error.TestUnexpectedResult,
        }
        switch (openBeneath(root.fd, ".")) {
            .ok => |fd| sys.close(fd),
            .err => return error.TestUnexpectedResult,
        }
        for ([_][:0]const u8{ "out", "sub/up", "../secret.txt", "sub/../../secret.txt", "/etc/passwd" }) |p| switch (openBeneath(root.fd, p)) {
            .ok => |fd| {
                sys.close(fd);
                std.debug.print("{s} opened (walk: {})\n", .{ p, walk_only });
                return error.TestUnexpectedResult;
            },
            .err => {},
        };
        try tt.expect(openBeneath(root.fd, "missing") == .err);
        try tt.expect(openBeneath(root.fd, "sub/f.txt/x") == .err);
        // A symlink that stays beneath DIR: followed by openat2, refused by the walk.
        switch (openBeneath(root.fd, "in")) {
            .ok => |fd| {
                sys.close(fd);
                try tt.expect(!openat2_missing);
            },
            .err => try tt.expect(openat2_missing),
        }
    }
}

test "static: Accept-Encoding picks codings by q-value, then br, zstd, gzip" {
    var out: [encodings.len]Encoding = undefined;
    const E = Encoding;
    try tt.expectEqualSlices(E, &.{ .br, .zstd, .gzip }, acceptable("gzip, deflate, br, zstd", &out));
    try tt.expectEqualSlices(E, &.{ .gzip, .br }, acceptable("br;q=0.5, gzip", &out));
    try tt.expectEqualSlices(E, &.{.gzip}, acceptable("gzip, br;q=0", &out));
    try tt.expectEqualSlices(E, &.{.gzip}, acceptable("x-gzip", &out));
    try tt.expectEqualSlices(E, &.{ .br, .zstd, .gzip }, acceptable("*", &out));
    try tt.expectEqualSlices(E, &.{ .gzip, .br, .zstd }, acceptable("gzip;q=1.0, *;q=0.1", &out));
    try tt.expectEqualSlices(E, &.{.zstd}, acceptable("*;q=0, zstd", &out));
    try tt.expectEqualSlices(E, &.{ .zstd, .gzip }, acceptable("ZSTD ; Q=0.9 , gzip;q=0.25", &out));
    try tt.expectEqualSlices(E, &.{}, acceptable("", &out));
    try tt.expectEqualSlices(E, &.{}, acceptable("identity", &out));
    try tt.expectEqualSlices(E, &.{}, acceptable("deflate, compress", &out));
    // A malformed weight counts as 0.
    try tt.expectEqualSlices(E, &.{}, acceptable("br;q=2, gzip;q=abc, zstd;q=1.0001", &out));
    try tt.expectEqualSlices(E, &.{.br}, acceptable("br;q=0.001", &out));
}

test "static: qvalues" {
    try tt.expectEqual(@as(?u16, 1000), qvalue("1"));
    try tt.expectEqual(@as(?u16, 1000), qvalue("1.000"));
    try tt.expectEqual(@as(?u16, 0), qvalue("0"));
    try tt.expectEqual(@as(?u16, 500), qvalue("0.5"));
    try tt.expectEqual(@as(?u16, 123), qvalue("0.123"));
    for ([_][]const u8{ "", "2", "1.5", "0.1234", ".5", "0,5", "1.", "-1" }) |bad| {
        if (qvalue(bad)) |q| if (!std.mem.eql(u8, bad, "1.")) {
            std.debug.print("{s} -> {d}\n", .{ bad, q });
            return error.TestUnexpectedResult;
        };
    }
}
