//! What a static answer's fields say and what the request's fields ask (RFC 9110):
//! content types by extension, HTTP dates and strong ETags, conditional requests in
//! 13.2.2's order, one byte range, and the Accept-Encoding that picks a precompressed
//! sibling. Pure functions on bytes: no file, no stream.
const std = @import("std");
const http_fields = @import("../http/fields.zig");

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

    pub fn of(headers: []const http_fields.Header) Conditions {
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
pub const encodings = [_]Encoding{ .br, .zstd, .gzip };

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

// ---- tests -------------------------------------------------------------------------------

const tt = std.testing;

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
