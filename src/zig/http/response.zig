//! Response heads on the wire: status line, the headers the engine adds, and the
//! app's headers checked so that no app can inject a header or split a response.
const std = @import("std");

/// The reason phrase of a status line. Long only because it is one table of the
/// registered codes; an unregistered code gets an empty phrase, which RFC 9112 allows.
pub fn reasonPhrase(status: u16) []const u8 {
    return switch (status) {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        418 => "I'm a teapot",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        423 => "Locked",
        424 => "Failed Dependency",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        506 => "Variant Also Negotiates",
        507 => "Insufficient Storage",
        508 => "Loop Detected",
        511 => "Network Authentication Required",
        else => "",
    };
}

/// Statuses whose responses never carry content (RFC 9110 6.4.1).
pub fn statusHasNoBody(status: u16) bool {
    return status < 200 or status == 204 or status == 304;
}

const token_chars: [256]bool = blk: {
    var t = [_]bool{false} ** 256;
    for ("!#$%&'*+-.^_`|~") |ch| t[ch] = true;
    for ('0'..'9' + 1) |ch| t[ch] = true;
    for ('a'..'z' + 1) |ch| t[ch] = true;
    for ('A'..'Z' + 1) |ch| t[ch] = true;
    break :blk t;
};

pub fn validName(name: []const u8) bool {
    if (name.len == 0) return false;
    // Names of 8 bytes and more made only of letters, digits and '-' (nearly all) pass in
    // overlapping 8-byte vectors; any other byte, or a shorter name, goes to the table.
    if (name.len >= 8 and commonNameBytes(name)) return true;
    for (name) |ch| if (!token_chars[ch]) return false;
    return true;
}

fn commonNameBytes(name: []const u8) bool {
    var index: usize = 0;
    while (true) : (index += 8) {
        const at = @min(index, name.len - 8);
        const bytes: @Vector(8, u8) = name[at..][0..8].*;
        const lower = bytes | @as(@Vector(8, u8), @splat(0x20));
        const letter = (lower >= @as(@Vector(8, u8), @splat('a'))) & (lower <= @as(@Vector(8, u8), @splat('z')));
        const digit = (bytes >= @as(@Vector(8, u8), @splat('0'))) & (bytes <= @as(@Vector(8, u8), @splat('9')));
        if (!@reduce(.And, letter | digit | (bytes == @as(@Vector(8, u8), @splat('-'))))) return false;
        if (at + 8 == name.len) return true;
    }
}

/// A value may hold any byte but CR, LF and NUL: those would split the head.
pub fn validValue(value: []const u8) bool {
    if (value.len >= 8) {
        // Overlapping 8-byte vectors, the last one ending at the value's end.
        var index: usize = 0;
        while (true) : (index += 8) {
            const at = @min(index, value.len - 8);
            const bytes: @Vector(8, u8) = value[at..][0..8].*;
            const bad = (bytes == @as(@Vector(8, u8), @splat('\r'))) | (bytes == @as(@Vector(8, u8), @splat('\n'))) |
                (bytes == @as(@Vector(8, u8), @splat(0)));
            if (@reduce(.Or, bad)) return false;
            if (at + 8 == value.len) return true;
        }
    }
    for (value) |ch| if (ch == '\r' or ch == '\n' or ch == 0) return false;
    return true;
}

/// `a` (a valid field name: only tchars) equals the lower-case `lower` ignoring case.
/// OR-ing 0x20 into a tchar lands on a letter only from that letter's two cases and on
/// '-' only from '-' (0x0d is no tchar), so it is `std.ascii.eqlIgnoreCase` here.
pub fn nameIs(a: []const u8, comptime lower: []const u8) bool {
    if (a.len != lower.len) return false;
    comptime std.debug.assert(lower.len >= 8 and lower.len <= 16);
    const case: u64 = 0x2020202020202020;
    const head = std.mem.readInt(u64, a[0..8], .little) | case;
    const tail = std.mem.readInt(u64, a[a.len - 8 ..][0..8], .little) | case;
    const want_head = comptime std.mem.readInt(u64, lower[0..8], .little);
    const want_tail = comptime std.mem.readInt(u64, lower[lower.len - 8 ..][0..8], .little);
    return head == want_head and tail == want_tail;
}

/// "HTTP/1.1 <status> <reason>\r\n" made at compile time for every registered code.
fn registeredStatusLine(status: u16) ?[]const u8 {
    @setEvalBranchQuota(100_000);
    switch (status) {
        inline 100...599 => |code| {
            const reason = comptime reasonPhrase(code);
            if (reason.len == 0) return null;
            return std.fmt.comptimePrint("HTTP/1.1 {d} {s}\r\n", .{ code, reason });
        },
        else => return null,
    }
}

/// Appends into a fixed slice; running out of room is an error the caller turns into 500.
pub const HeadWriter = struct {
    buf: []u8,
    len: usize = 0,

    pub fn append(self: *HeadWriter, bytes: []const u8) error{NoSpace}!void {
        if (bytes.len > self.buf.len - self.len) return error.NoSpace;
        copy(self.buf[self.len..][0..bytes.len], bytes);
        self.len += bytes.len;
    }

    /// `@memcpy`, with the short copies of a head (up to 32 bytes) done inline by two
    /// overlapping loads and stores instead of a call.
    inline fn copy(dst: []u8, src: []const u8) void {
        const n = src.len;
        if (n >= 16 and n <= 32) {
            dst[0..16].* = src[0..16].*;
            dst[n - 16 ..][0..16].* = src[n - 16 ..][0..16].*;
        } else if (n >= 8 and n < 16) {
            dst[0..8].* = src[0..8].*;
            dst[n - 8 ..][0..8].* = src[n - 8 ..][0..8].*;
        } else if (n >= 4 and n < 8) {
            dst[0..4].* = src[0..4].*;
            dst[n - 4 ..][0..4].* = src[n - 4 ..][0..4].*;
        } else @memcpy(dst, src);
    }

    /// `n` in decimal, written at the end of `buf` (20 digits hold any u64).
    fn decimal(buf: *[24]u8, n: u64) []const u8 {
        var i: usize = buf.len;
        var rest = n;
        while (true) {
            i -= 1;
            buf[i] = '0' + @as(u8, @intCast(rest % 10));
            rest /= 10;
            if (rest == 0) break;
        }
        return buf[i..];
    }

    pub fn statusLine(self: *HeadWriter, status: u16) error{NoSpace}!void {
        // A registered code's whole line is a constant; others get their digits by hand
        // (std.fmt's general path cost ~300 instructions a response).
        if (registeredStatusLine(status)) |line| return self.append(line);
        var tmp: [24]u8 = undefined;
        try self.append("HTTP/1.1 ");
        try self.append(decimal(&tmp, status));
        try self.append(" ");
        try self.append(reasonPhrase(status));
        try self.append("\r\n");
    }

    /// `name: value` and CRLF, with one check for room (the response's hottest path).
    pub fn header(self: *HeadWriter, name: []const u8, value: []const u8) error{NoSpace}!void {
        const need = name.len + value.len + 4;
        if (need > self.buf.len - self.len) return error.NoSpace;
        const dst = self.buf[self.len..][0..need];
        copy(dst[0..name.len], name);
        dst[name.len..][0..2].* = ": ".*;
        copy(dst[name.len + 2 ..][0..value.len], value);
        dst[need - 2 ..][0..2].* = "\r\n".*;
        self.len += need;
    }

    pub fn contentLength(self: *HeadWriter, n: u64) error{NoSpace}!void {
        var tmp: [24]u8 = undefined;
        try self.header("content-length", decimal(&tmp, n));
    }

    pub fn written(self: *const HeadWriter) []const u8 {
        return self.buf[0..self.len];
    }
};

/// `date: <IMF-fixdate>\r\n`, reformatted at most once a second.
pub const DateCache = struct {
    line: [64]u8 = undefined,
    len: usize = 0,
    second: i64 = -1,

    pub fn update(self: *DateCache, now_s: i64) void {
        if (now_s == self.second) return;
        self.second = now_s;
        const days = [_][]const u8{ "Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed" };
        const months = [_][]const u8{ "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
        const es = std.time.epoch.EpochSeconds{ .secs = @intCast(@max(now_s, 0)) };
        const day = es.getEpochDay();
        const yd = day.calculateYearDay();
        const md = yd.calculateMonthDay();
        const ds = es.getDaySeconds();
        const s = std.fmt.bufPrint(&self.line, "date: {s}, {d:0>2} {s} {d} {d:0>2}:{d:0>2}:{d:0>2} GMT\r\n", .{
            days[@intCast(day.day % 7)],
            md.day_index + 1,
            months[@intFromEnum(md.month) - 1],
            yd.year,
            ds.getHoursIntoDay(),
            ds.getMinutesIntoHour(),
            ds.getSecondsIntoMinute(),
        }) catch unreachable;
        self.len = s.len;
    }

    pub fn get(self: *const DateCache) []const u8 {
        return self.line[0..self.len];
    }
};

/// Canned answers for requests the engine refuses before any app sees them.
pub fn errorResponse(status: u16) []const u8 {
    return switch (status) {
        400 => canned(400),
        408 => canned(408),
        403 => canned(403),
        413 => canned(413),
        414 => canned(414),
        431 => canned(431),
        500 => canned(500),
        501 => canned(501),
        503 => canned(503),
        505 => canned(505),
        // RFC 6455 4.2.2: the versions we speak.
        426 => std.fmt.comptimePrint(
            "HTTP/1.1 426 Upgrade Required\r\nsec-websocket-version: 13\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 16\r\nconnection: close\r\n\r\nUpgrade Required",
            .{},
        ),
        else => canned(400),
    };
}

fn canned(comptime status: u16) []const u8 {
    const reason = comptime reasonPhrase(status);
    return std.fmt.comptimePrint(
        "HTTP/1.1 {d} {s}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {d}\r\nconnection: close\r\n\r\n{s}",
        .{ status, reason, reason.len, reason },
    );
}

test "date line is an IMF-fixdate" {
    var d = DateCache{};
    d.update(784111777); // RFC 9110's example instant
    try std.testing.expectEqualStrings("date: Sun, 06 Nov 1994 08:49:37 GMT\r\n", d.get());
}

test "head writer refuses to overflow and validates" {
    var storage: [40]u8 = undefined;
    var w = HeadWriter{ .buf = &storage };
    try w.statusLine(404);
    try std.testing.expectEqualStrings("HTTP/1.1 404 Not Found\r\n", w.written());
    try std.testing.expectError(error.NoSpace, w.header("x-long", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
    try std.testing.expect(!validName("bad name"));
    try std.testing.expect(!validValue("a\r\nset-cookie: x"));
    try std.testing.expect(validValue("caf\xc3\xa9"));
}

test "status lines: registered codes from the table, others by hand, byte for byte as before" {
    var buf: [128]u8 = undefined;
    for (100..1000) |code| {
        var w = HeadWriter{ .buf = &buf };
        try w.statusLine(@intCast(code));
        var want: [128]u8 = undefined;
        const line = try std.fmt.bufPrint(&want, "HTTP/1.1 {d} {s}\r\n", .{ code, reasonPhrase(@intCast(code)) });
        try std.testing.expectEqualStrings(line, w.written());
    }
}

test "names and values: the vector checks agree with the byte tables at every length and position" {
    var bytes: [40]u8 = undefined;
    for (0..41) |len| {
        for (0..len + 1) |pos| {
            for (0..256) |b| {
                @memset(bytes[0..len], 'a');
                if (pos < len) bytes[pos] = @intCast(b);
                const text = bytes[0..len];
                var name_ok = len > 0;
                for (text) |ch| name_ok = name_ok and token_chars[ch];
                try std.testing.expectEqual(name_ok, validName(text));
                var value_ok = true;
                for (text) |ch| value_ok = value_ok and ch != '\r' and ch != '\n' and ch != 0;
                try std.testing.expectEqual(value_ok, validValue(text));
                if (pos == len) break;
            }
        }
    }
}

test "nameIs is eqlIgnoreCase on valid names" {
    var name: [14]u8 = "content-length".*;
    for (0..name.len) |i| {
        for (0..256) |b| {
            name = "content-length".*;
            name[i] = @intCast(b);
            if (!validName(&name)) continue;
            try std.testing.expectEqual(std.ascii.eqlIgnoreCase(&name, "content-length"), nameIs(&name, "content-length"));
        }
    }
    try std.testing.expect(nameIs("Content-Length", "content-length"));
    try std.testing.expect(nameIs("CONNECTION", "connection"));
    try std.testing.expect(!nameIs("connectio", "connection"));
    try std.testing.expect(!nameIs("content-lengtH_", "content-length"));
}

test "head writer copies of every length up to 40 bytes" {
    var src: [40]u8 = undefined;
    for (&src, 0..) |*ch, i| ch.* = @intCast('A' + i);
    for (0..src.len + 1) |n| {
        var buf: [64]u8 = @splat('.');
        var w = HeadWriter{ .buf = &buf };
        try w.append("<");
        try w.append(src[0..n]);
        try w.append(">");
        try std.testing.expectEqualStrings(src[0..n], buf[1 .. n + 1]);
        try std.testing.expectEqual(@as(u8, '>'), buf[n + 1]);
        try std.testing.expectEqual(@as(u8, '.'), buf[n + 2]);
    }
}

test "canned responses frame their body" {
    try std.testing.expect(std.mem.endsWith(u8, errorResponse(431), "content-length: 31\r\nconnection: close\r\n\r\nRequest Header Fields Too Large"));
}

test "content-length digits at the edges of u64" {
    var buf: [256]u8 = undefined;
    var w = HeadWriter{ .buf = &buf };
    try w.contentLength(0);
    try w.contentLength(10);
    try w.contentLength(std.math.maxInt(u64));
    try std.testing.expectEqualStrings("content-length: 0\r\ncontent-length: 10\r\ncontent-length: 18446744073709551615\r\n", w.written());
    var line: [64]u8 = undefined;
    var s = HeadWriter{ .buf = &line };
    try s.statusLine(200);
    try std.testing.expectEqualStrings("HTTP/1.1 200 OK\r\n", s.written());
}
