//! Sans-IO HTTP/1.1 request parser (RFC 9112 / RFC 9110).
//!
//! Faces the internet: every input byte is hostile. The parser never allocates, never
//! panics on input, and bounds all work by `Limits`. Parsing is strict where leniency
//! would create ambiguity between us and another hop (request smuggling):
//! CRLF only, no obs-fold, no whitespace before ':', a single well-formed framing header.
//!
//! `parseHead` is stateless: the caller re-invokes it on the grown buffer until it returns
//! a `Head`. All work is bounded by `head_bytes_max`, so re-parsing stays cheap.
//! Chunked bodies are decoded apart, in `http/http1_chunked.zig` (`ChunkedDecoder`, named here
//! too): stateful and streaming, where the head parser is stateless.

const std = @import("std");
const fields = @import("fields.zig");

pub const Version = enum { http10, http11 };
pub const Header = fields.Header;
const connectionHas = fields.connectionHas;
const trimOws = fields.trimOws;
/// The chunked-body decoder (RFC 9112 7.1), which shares this file's limits and errors.
pub const ChunkedDecoder = @import("http1_chunked.zig").ChunkedDecoder;
const target_forms = @import("http1_target.zig");
const scan = @import("http1_scan.zig");

pub const Limits = struct {
    /// Whole request head including the request line and final CRLFCRLF -> 431.
    /// If the request line itself is still incomplete when this is reached -> 414.
    head_bytes_max: usize,
    /// Request-target length -> 414.
    target_bytes_max: usize,
    /// Header field lines -> 431.
    headers_count_max: usize,
    /// Extension bytes of one chunk-size line (everything between the size and CRLF) -> 400.
    chunk_ext_bytes_max: usize = 4096,
    /// Whole trailer section including its final CRLF -> 431.
    trailer_bytes_max: usize = 8 * 1024,
};

/// Generous limits for the parser's own tests and the fuzzer. The server's limits come
/// from `Config` through the engine's options (python/options.zig), never from here.
pub const test_limits = Limits{ .head_bytes_max = 16 * 1024, .target_bytes_max = 8 * 1024, .headers_count_max = 100 };

pub const ParseError = error{
    BadRequest, // 400
    UriTooLong, // 414
    HeadersTooLarge, // 431
    VersionNotSupported, // 505
    NotImplemented, // 501: a Transfer-Encoding we do not implement (anything but a sole "chunked")
};

pub fn statusFor(err: ParseError) u16 {
    return switch (err) {
        error.BadRequest => 400,
        error.UriTooLong => 414,
        error.HeadersTooLarge => 431,
        error.VersionNotSupported => 505,
        error.NotImplemented => 501,
    };
}

pub const Request = struct {
    method: []const u8,
    /// Raw request-target as sent.
    target: []const u8,
    /// origin-form: raw bytes before '?'. absolute-form: the path component ("/" if empty).
    /// asterisk-form: "*". authority-form (CONNECT): "" (there is no path).
    path: []const u8,
    /// Raw bytes after the first '?', "" if none.
    query: []const u8,
    version: Version,
    /// Slice of the caller's storage, in order. Names are lower-cased in place in the
    /// caller's buffer; values are raw with leading/trailing SP/HTAB trimmed.
    headers: []Header,
    /// The Host header value, or the authority of an absolute-form target (which wins,
    /// RFC 9112 3.2.2). For CONNECT this stays the Host header value.
    host: ?[]const u8,
    content_length: ?u64,
    chunked: bool,
    keep_alive: bool,
    expect_continue: bool,
    /// Upgrade header value when Connection contains the token "upgrade", else null.
    upgrade: ?[]const u8,
};

/// `len` = bytes consumed including leading empty lines and the final CRLFCRLF.
pub const Head = struct { request: Request, len: usize };

/// RFC 9112 2.2 allows ignoring "at least one" empty line before the request line.
/// A few cover sloppy clients that send CRLF after a body; more is abuse.
const leading_empty_lines_max = 4;
/// Longer than any registered method ("UPDATEREDIRECTREF" is 17 bytes).
const method_bytes_max = 32;

/// Internal only: the buffer ended before the structure did.
const InternalError = ParseError || error{Incomplete};

// ---------------------------------------------------------------------------------------
// Byte classes (comptime lookup tables).

const ByteTable = [256]bool;

pub fn tableFromRanges(comptime ranges: []const [2]u8, comptime singles: []const u8) ByteTable {
    var table = [_]bool{false} ** 256;
    for (ranges) |range| {
        for (range[0]..@as(usize, range[1]) + 1) |c| table[c] = true;
    }
    for (singles) |c| table[c] = true;
    return table;
}

/// RFC 9110 5.6.2 tchar.
pub const tchar_table = tableFromRanges(&.{ .{ '0', '9' }, .{ 'a', 'z' }, .{ 'A', 'Z' } }, "!#$%&'*+-.^_`|~");
/// Visible ASCII; the request-target grammar is stricter but only allows these bytes.
const target_table = tableFromRanges(&.{.{ 0x21, 0x7e }}, "");
/// RFC 9110 5.5 field-vchar, SP and HTAB (obs-text allowed, controls and DEL not).
pub const field_value_table = tableFromRanges(&.{ .{ 0x20, 0x7e }, .{ 0x80, 0xff } }, "\t");
/// reg-name / IP-literal / port characters (RFC 3986). Excludes '/', '@' (userinfo is an
/// error for http URIs, RFC 9110 4.2.4), whitespace and controls.
pub const host_table = tableFromRanges(
    &.{ .{ '0', '9' }, .{ 'a', 'z' }, .{ 'A', 'Z' } },
    "-._~!$&'()*+,;=%:[]",
);

fn isOws(c: u8) bool {
    return c == ' ' or c == '\t';
}

// Vectorized scans for the long runs of a head (targets and values). A vector is only a
// fast path: the scalar loop after it makes the final, exact decision.

pub const vector_bytes = 16;
const Vector = @Vector(vector_bytes, u8);

fn splat(c: u8) Vector {
    return @splat(c);
}

/// Index of the first byte at or after `start` that is not a field-value byte.
pub fn fieldValueEnd(bytes: []const u8, start: usize) usize {
    var index = start;
    // A chunk's test is exact (field-value = SP..~, HTAB, 0x80..0xff), so the first chunk
    // that fails holds the answer: its first failing byte.
    while (bytes.len - index >= vector_bytes) : (index += vector_bytes) {
        if (scan.fieldValueRun(vector_bytes, bytes[index..][0..vector_bytes].*)) |run| return index + run;
    }
    if (bytes.len - index >= 8) {
        if (scan.fieldValueRun(8, bytes[index..][0..8].*)) |run| return index + run;
        index += 8;
    }
    while (index < bytes.len and field_value_table[bytes[index]]) index += 1;
    return index;
}

/// Index of the first byte at or after `start` that is not visible ASCII.
fn targetEnd(bytes: []const u8, start: usize) usize {
    var index = start;
    while (bytes.len - index >= vector_bytes) : (index += vector_bytes) {
        const chunk: Vector = bytes[index..][0..vector_bytes].*;
        if (!@reduce(.And, (chunk >= splat(0x21)) & (chunk <= splat(0x7e)))) break;
    }
    while (index < bytes.len and target_table[bytes[index]]) index += 1;
    return index;
}

// ---------------------------------------------------------------------------------------
// Request head.

/// Parse one request head from the start of `buf`.
/// Returns null when more bytes are needed (and the limits are not yet exceeded).
/// Lower-cases header names in place (hence []u8).
/// `headers_storage.len` >= limits.headers_count_max is guaranteed by the caller
/// (if it is not, the smaller of the two is the effective limit).
pub fn parseHead(buf: []u8, headers_storage: []Header, limits: Limits) ParseError!?Head {
    // Never look past the head limit: bounds the work of every (re-)parse.
    const window = buf[0..@min(buf.len, limits.head_bytes_max)];
    var parser = HeadParser{
        .buf = window,
        .storage = headers_storage[0..@min(headers_storage.len, limits.headers_count_max)],
        .limits = limits,
    };
    const request = parser.parse() catch |err| switch (err) {
        error.Incomplete => {
            if (buf.len < limits.head_bytes_max) return null;
            return if (parser.request_line_done) error.HeadersTooLarge else error.UriTooLong;
        },
        else => |e| return e,
    };
    return .{ .request = request, .len = parser.pos };
}

const TransferCoding = enum { none, chunked, unsupported };

const HeadParser = struct {
    buf: []u8,
    storage: []Header,
    limits: Limits,
    pos: usize = 0,
    request_line_done: bool = false,
    headers_count: usize = 0,

    // Semantics collected from the fields, validated in `finish`.
    host_count: u8 = 0,
    host: ?[]const u8 = null,
    content_length: ?u64 = null,
    transfer_coding: TransferCoding = .none,
    connection_close: bool = false,
    connection_keep_alive: bool = false,
    connection_upgrade: bool = false,
    expect_continue: bool = false,
    upgrade: ?[]const u8 = null,

    fn parse(p: *HeadParser) InternalError!Request {
        try p.skipLeadingEmptyLines();
        const line = try p.parseRequestLine();
        p.request_line_done = true;
        const parts = try target_forms.split(line.method, line.target);
        try p.parseFields();
        try p.finish(line.version);
        return .{
            .method = line.method,
            .target = line.target,
            .path = parts.path,
            .query = parts.query,
            .version = line.version,
            .headers = p.storage[0..p.headers_count],
            .host = parts.authority orelse p.host,
            .content_length = p.content_length,
            .chunked = p.transfer_coding == .chunked,
            .keep_alive = p.keepAlive(line.version),
            .expect_continue = p.expect_continue,
            .upgrade = if (p.connection_upgrade) p.upgrade else null,
        };
    }

    /// Consumes CRLF at `pos`. A CR not followed by LF is a bare CR.
    inline fn expectCrlf(p: *HeadParser) InternalError!void {
        // Two bytes in one comparison, inlined; the rest only tells which error it is.
        if (p.buf.len - p.pos >= 2 and std.mem.readInt(u16, p.buf[p.pos..][0..2], .little) == comptime std.mem.readInt(u16, "\r\n", .little)) {
            p.pos += 2;
            return;
        }
        return p.expectCrlfSlow();
    }

    fn expectCrlfSlow(p: *HeadParser) InternalError!void {
        if (p.buf.len - p.pos < 1) return error.Incomplete;
        if (p.buf[p.pos] != '\r') return error.BadRequest;
        if (p.buf.len - p.pos < 2) return error.Incomplete;
        if (p.buf[p.pos + 1] != '\n') return error.BadRequest;
        p.pos += 2;
    }

    fn skipLeadingEmptyLines(p: *HeadParser) InternalError!void {
        var lines: usize = 0;
        while (true) {
            if (p.pos == p.buf.len) return error.Incomplete;
            if (p.buf[p.pos] != '\r') return;
            if (lines == leading_empty_lines_max) return error.BadRequest;
            try p.expectCrlf();
            lines += 1;
        }
    }

    const RequestLine = struct { method: []const u8, target: []const u8, version: Version };

    /// request-line = method SP request-target SP HTTP-version CRLF, single SPs exactly.
    fn parseRequestLine(p: *HeadParser) InternalError!RequestLine {
        const method = try p.parseMethod();
        const target = try p.parseTarget();
        const version = try p.parseVersion();
        return .{ .method = method, .target = target, .version = version };
    }

    fn parseMethod(p: *HeadParser) InternalError![]const u8 {
        const start = p.pos;
        // "GET " in one comparison: the loop below would take the same decision.
        if (p.buf.len - start >= 4 and std.mem.readInt(u32, p.buf[start..][0..4], .little) == std.mem.readInt(u32, "GET ", .little)) {
            p.pos = start + 4;
            return p.buf[start..][0..3];
        }
        var index = start;
        while (index < p.buf.len) : (index += 1) {
            const c = p.buf[index];
            if (c == ' ') break;
            if (!tchar_table[c]) return error.BadRequest;
            if (index - start == method_bytes_max) return error.BadRequest;
        } else return error.Incomplete;
        if (index == start) return error.BadRequest;
        p.pos = index + 1;
        return p.buf[start..index];
    }

    fn parseTarget(p: *HeadParser) InternalError![]const u8 {
        const start = p.pos;
        const end = targetEnd(p.buf, start);
        // Checked before completeness so that an endless target fails early with 414.
        if (end - start > p.limits.target_bytes_max) return error.UriTooLong;
        if (end == p.buf.len) return error.Incomplete;
        if (p.buf[end] != ' ' or end == start) return error.BadRequest;
        p.pos = end + 1;
        return p.buf[start..end];
    }

    /// Exactly "HTTP/" DIGIT "." DIGIT CRLF. Well-formed but other versions -> 505.
    fn parseVersion(p: *HeadParser) InternalError!Version {
        const pattern = "HTTP/#.#\r\n"; // '#' = DIGIT
        // "HTTP/1.1" or "HTTP/1.0" and CRLF in two comparisons; anything else below.
        if (p.buf.len - p.pos >= pattern.len) if (scan.commonVersion(p.buf[p.pos..][0..pattern.len])) |version| {
            p.pos += pattern.len;
            return version;
        };
        const available = @min(pattern.len, p.buf.len - p.pos);
        const bytes = p.buf[p.pos..][0..available];
        // Validate the available prefix first so garbage fails before the line completes.
        for (bytes, pattern[0..available]) |c, expected| {
            const ok = if (expected == '#') std.ascii.isDigit(c) else c == expected;
            if (!ok) return error.BadRequest;
        }
        if (available < pattern.len) return error.Incomplete;
        p.pos += pattern.len;
        if (bytes[5] != '1') return error.VersionNotSupported;
        return switch (bytes[7]) {
            '0' => .http10,
            '1' => .http11,
            else => error.VersionNotSupported,
        };
    }

    fn parseFields(p: *HeadParser) InternalError!void {
        while (true) {
            if (p.pos == p.buf.len) return error.Incomplete;
            if (p.buf[p.pos] == '\r') return p.expectCrlf(); // End of the head.
            if (p.headers_count == p.storage.len) return error.HeadersTooLarge;
            const header = try p.parseField();
            p.storage[p.headers_count] = header;
            p.headers_count += 1;
            try p.noteField(header);
        }
    }

    /// field-line = field-name ":" OWS field-value OWS CRLF
    fn parseField(p: *HeadParser) InternalError!Header {
        const name_start = p.pos;
        // A leading SP/HTAB (obs-fold) or whitespace before ':' is not a tchar: rejected,
        // because hops disagree on how to interpret them (RFC 9112 5.1, 5.2).
        const index = scan.fieldNameEnd(p.buf, name_start);
        if (index == p.buf.len) return error.Incomplete;
        if (p.buf[index] != ':') return error.BadRequest;
        if (index == name_start) return error.BadRequest;
        const name = p.buf[name_start..index];

        var value_start = index + 1;
        while (value_start < p.buf.len and isOws(p.buf[value_start])) value_start += 1;
        const value_end = fieldValueEnd(p.buf, value_start);
        // Anything but CRLF ending the value (bare LF, bare CR, NUL, DEL, ...) is rejected.
        p.pos = value_end;
        try p.expectCrlf();
        const value = std.mem.trimRight(u8, p.buf[value_start..value_end], " \t");
        return .{ .name = name, .value = value };
    }

    /// Records the semantics of the fields the server itself interprets.
    fn noteField(p: *HeadParser, header: Header) ParseError!void {
        const name = header.name;
        const value = header.value;
        switch (name.len) {
            4 => if (std.mem.eql(u8, name, "host")) try p.noteHost(value),
            6 => if (std.mem.eql(u8, name, "expect")) {
                if (std.ascii.eqlIgnoreCase(value, "100-continue")) p.expect_continue = true;
            },
            7 => if (std.mem.eql(u8, name, "upgrade")) {
                if (p.upgrade == null) p.upgrade = value;
            },
            10 => if (std.mem.eql(u8, name, "connection")) p.noteConnection(value),
            14 => if (std.mem.eql(u8, name, "content-length")) try p.noteContentLength(value),
            17 => if (std.mem.eql(u8, name, "transfer-encoding")) try p.noteTransferEncoding(value),
            else => {},
        }
    }

    fn noteHost(p: *HeadParser, value: []const u8) ParseError!void {
        // RFC 9112 3.2: more than one Host field line -> 400.
        if (p.host_count > 0) return error.BadRequest;
        p.host_count += 1;
        for (value) |c| if (!host_table[c]) return error.BadRequest;
        p.host = value;
    }

    /// Connection may appear several times; its tokens accumulate.
    fn noteConnection(p: *HeadParser, value: []const u8) void {
        if (connectionHas(value, "close")) p.connection_close = true;
        if (connectionHas(value, "keep-alive")) p.connection_keep_alive = true;
        if (connectionHas(value, "upgrade")) p.connection_upgrade = true;
    }

    /// One Content-Length line of 1*DIGIT; a second line or a list is 400, whatever the
    /// values (`fields.contentLength`: the rule every protocol shares, and why).
    fn noteContentLength(p: *HeadParser, value: []const u8) ParseError!void {
        const seen = p.content_length;
        p.content_length = fields.contentLength(seen, value) catch return error.BadRequest;
    }

    fn noteTransferEncoding(p: *HeadParser, value: []const u8) ParseError!void {
        // A second TE line could be seen differently by another hop: refuse.
        if (p.transfer_coding != .none) return error.BadRequest;
        p.transfer_coding = try classifyTransferEncoding(value);
    }

    /// Cross-field checks, possible only once every field has been seen.
    /// 400s are decided before 501 so that a broken framing is never merely "unsupported".
    fn finish(p: *HeadParser, version: Version) ParseError!void {
        if (p.transfer_coding != .none) {
            // RFC 9112 6.1: TE in HTTP/1.0 means faulty framing.
            if (version == .http10) return error.BadRequest;
            // RFC 9112 6.3: both present is a smuggling vector; reject outright.
            if (p.content_length != null) return error.BadRequest;
        }
        if (version == .http11 and p.host_count == 0) return error.BadRequest;
        if (p.transfer_coding == .unsupported) return error.NotImplemented;
    }

    fn keepAlive(p: *const HeadParser, version: Version) bool {
        if (p.connection_close) return false;
        return switch (version) {
            .http11 => true,
            .http10 => p.connection_keep_alive,
        };
    }
};

/// Only a sole "chunked" is implemented. A syntactically valid list of tokens that is
/// anything else -> 501; invalid syntax (empty elements, parameters, controls) -> 400.
fn classifyTransferEncoding(value: []const u8) ParseError!TransferCoding {
    var count: usize = 0;
    var chunked_only = false;
    var elements = std.mem.splitScalar(u8, value, ',');
    while (elements.next()) |element| {
        const coding = trimOws(element);
        if (coding.len == 0) return error.BadRequest;
        for (coding) |c| if (!tchar_table[c]) return error.BadRequest;
        count += 1;
        chunked_only = count == 1 and std.ascii.eqlIgnoreCase(coding, "chunked");
    }
    return if (chunked_only) .chunked else .unsupported;
}

// ---------------------------------------------------------------------------------------
// Tests.

const testing = std.testing;

/// Owns the mutable buffer a head is parsed from (names are lower-cased in place).
const TestParse = struct {
    buf: [32 * 1024]u8 = undefined,
    headers: [128]Header = undefined,

    fn parse(self: *TestParse, text: []const u8) ParseError!?Head {
        return self.parseLimits(text, test_limits);
    }

    fn parseLimits(self: *TestParse, text: []const u8, limits: Limits) ParseError!?Head {
        @memcpy(self.buf[0..text.len], text);
        return parseHead(self.buf[0..text.len], &self.headers, limits);
    }

    /// Expects a complete head consuming all of `text`.
    fn complete(self: *TestParse, text: []const u8) !Request {
        const head = (try self.parse(text)) orelse return error.TestUnexpectedNull;
        try testing.expectEqual(text.len, head.len);
        return head.request;
    }

    fn expectError(self: *TestParse, expected: ParseError, text: []const u8) !void {
        try testing.expectError(expected, self.parse(text));
    }
};

fn headerValue(request: Request, name: []const u8) ?[]const u8 {
    for (request.headers) |header| {
        if (std.mem.eql(u8, header.name, name)) return header.value;
    }
    return null;
}

test "statusFor maps every error" {
    try testing.expectEqual(@as(u16, 400), statusFor(error.BadRequest));
    try testing.expectEqual(@as(u16, 414), statusFor(error.UriTooLong));
    try testing.expectEqual(@as(u16, 431), statusFor(error.HeadersTooLarge));
    try testing.expectEqual(@as(u16, 505), statusFor(error.VersionNotSupported));
    try testing.expectEqual(@as(u16, 501), statusFor(error.NotImplemented));
}

test "simple GET" {
    var t = TestParse{};
    const r = try t.complete("GET /index.html?a=1&b=2 HTTP/1.1\r\nHost: example.com\r\n\r\n");
    try testing.expectEqualStrings("GET", r.method);
    try testing.expectEqualStrings("/index.html?a=1&b=2", r.target);
    try testing.expectEqualStrings("/index.html", r.path);
    try testing.expectEqualStrings("a=1&b=2", r.query);
    try testing.expectEqual(Version.http11, r.version);
    try testing.expectEqual(@as(usize, 1), r.headers.len);
    try testing.expectEqualStrings("example.com", r.host.?);
    try testing.expectEqual(@as(?u64, null), r.content_length);
    try testing.expect(!r.chunked);
    try testing.expect(r.keep_alive);
    try testing.expect(!r.expect_continue);
    try testing.expectEqual(@as(?[]const u8, null), r.upgrade);
}

test "query split at the first '?' only" {
    var t = TestParse{};
    const r = try t.complete("GET /p?a?b HTTP/1.1\r\nHost: h\r\n\r\n");
    try testing.expectEqualStrings("/p", r.path);
    try testing.expectEqualStrings("a?b", r.query);
}

test "header names lower-cased in place, order kept" {
    var t = TestParse{};
    const r = try t.complete("GET / HTTP/1.1\r\nHOST: h\r\nX-Custom-Thing: V\r\nAccept: */*\r\n\r\n");
    try testing.expectEqual(@as(usize, 3), r.headers.len);
    try testing.expectEqualStrings("host", r.headers[0].name);
    try testing.expectEqualStrings("x-custom-thing", r.headers[1].name);
    try testing.expectEqualStrings("V", r.headers[1].value); // Values keep their case.
    try testing.expectEqualStrings("accept", r.headers[2].name);
    try testing.expectEqualStrings("host", t.buf[16..20]); // In the buffer itself.
}

test "header values trimmed of OWS, inner whitespace kept, empty value ok" {
    var t = TestParse{};
    const r = try t.complete("GET / HTTP/1.1\r\nHost: h\r\nA: \t x  y \t \r\nB:\r\nC:   \r\n\r\n");
    try testing.expectEqualStrings("x  y", headerValue(r, "a").?);
    try testing.expectEqualStrings("", headerValue(r, "b").?);
    try testing.expectEqualStrings("", headerValue(r, "c").?);
}

test "obs-text allowed in values" {
    var t = TestParse{};
    const r = try t.complete("GET / HTTP/1.1\r\nHost: h\r\nX: caf\xc3\xa9\xff\r\n\r\n");
    try testing.expectEqualStrings("caf\xc3\xa9\xff", headerValue(r, "x").?);
}

test "long values go through the vector path" {
    var t = TestParse{};
    const text = "GET /" ++ "a" ** 100 ++ " HTTP/1.1\r\nHost: h\r\nX: " ++ "v\t " ** 50 ++ "end\r\n\r\n";
    const r = try t.complete(text);
    try testing.expectEqual(@as(usize, 101), r.target.len);
    try testing.expect(std.mem.endsWith(u8, headerValue(r, "x").?, "end"));
    // A control byte deep inside a long value is still found.
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\nX: " ++ "v" ** 40 ++ "\x01" ++ "v" ** 40 ++ "\r\n\r\n");
    try t.expectError(error.BadRequest, "GET /" ++ "a" ** 40 ++ "\x7f" ++ "a" ** 40 ++ " HTTP/1.1\r\nHost: h\r\n\r\n");
}

test "incomplete head returns null at every split point" {
    const text = "\r\nPOST /upload?x=1 HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n" ++
        "Connection: keep-alive\r\n\r\n";
    var t = TestParse{};
    for (0..text.len) |prefix_len| {
        const result = try t.parse(text[0..prefix_len]);
        try testing.expectEqual(@as(?Head, null), result);
    }
    const r = try t.complete(text);
    try testing.expectEqual(@as(?u64, 5), r.content_length);
}

test "leading empty lines skipped and counted in len, but only a few" {
    var t = TestParse{};
    const r = try t.complete("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n");
    try testing.expectEqualStrings("GET", r.method);
    _ = try t.complete("\r\n" ** 4 ++ "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "\r\n" ** 5 ++ "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "\nGET / HTTP/1.1\r\nHost: h\r\n\r\n");
}

test "pipelined requests parse one after the other using len" {
    var t = TestParse{};
    const first = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n";
    const second = "GET /b HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
    const text = first ++ second;
    @memcpy(t.buf[0..text.len], text);
    const head_a = (try parseHead(t.buf[0..text.len], &t.headers, test_limits)).?;
    try testing.expectEqual(first.len, head_a.len);
    try testing.expectEqualStrings("/a", head_a.request.path);
    const head_b = (try parseHead(t.buf[head_a.len..text.len], &t.headers, test_limits)).?;
    try testing.expectEqual(second.len, head_b.len);
    try testing.expectEqualStrings("/b", head_b.request.path);
    try testing.expect(!head_b.request.keep_alive);
}

test "HTTP/1.0 keep-alive rules" {
    var t = TestParse{};
    try testing.expect(!(try t.complete("GET / HTTP/1.0\r\n\r\n")).keep_alive);
    try testing.expect((try t.complete("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")).keep_alive);
    try testing.expect((try t.complete("GET / HTTP/1.0\r\nConnection: foo, keep-alive\r\n\r\n")).keep_alive);
    try testing.expect(!(try t.complete("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n")).keep_alive);
    try testing.expect(!(try t.complete("GET / HTTP/1.0\r\nConnection: keep-alivex\r\n\r\n")).keep_alive);
}

test "HTTP/1.1 Connection: close" {
    var t = TestParse{};
    try testing.expect((try t.complete("GET / HTTP/1.1\r\nHost: h\r\n\r\n")).keep_alive);
    try testing.expect(!(try t.complete("GET / HTTP/1.1\r\nHost: h\r\nConnection: CLOSE\r\n\r\n")).keep_alive);
    try testing.expect(!(try t.complete("GET / HTTP/1.1\r\nHost: h\r\nConnection: a , close ,b\r\n\r\n")).keep_alive);
    // Tokens accumulate over several Connection lines.
    try testing.expect(!(try t.complete("GET / HTTP/1.1\r\nHost: h\r\nConnection: a\r\nConnection: close\r\n\r\n")).keep_alive);
    try testing.expect((try t.complete("GET / HTTP/1.1\r\nHost: h\r\nConnection: closed\r\n\r\n")).keep_alive);
}

test "Content-Length valid" {
    var t = TestParse{};
    const r = try t.complete("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 42\r\n\r\n");
    try testing.expectEqual(@as(?u64, 42), r.content_length);
    const zero = try t.complete("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
    try testing.expectEqual(@as(?u64, 0), zero.content_length);
    const big = try t.complete("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 9999999999999999999\r\n\r\n");
    try testing.expectEqual(@as(?u64, 9999999999999999999), big.content_length);
}

test "Content-Length more than once is 400, identical values and lists included" {
    var t = TestParse{};
    const cases = [_][]const u8{
        "Content-Length: 5\r\nContent-Length: 5\r\n",
        "Content-Length: 5\r\nContent-Length: 05\r\n",
        "Content-Length: 5\r\nX: y\r\ncontent-length: 5\r\n",
        "Content-Length: 5, 5\r\n",
        "Content-Length: 5,5\r\n",
        "Content-Length: 5, 05\r\n",
        "Content-Length: 5, 6\r\n",
        "Content-Length: 5\r\nContent-Length: 6\r\n",
        "Content-Length: 5,\r\n",
    };
    for (cases) |fields_text| {
        var text_buf: [256]u8 = undefined;
        const head = "POST / HTTP/1.1\r\nHost: h\r\n";
        const text = try std.fmt.bufPrint(&text_buf, head ++ "{s}\r\nhello", .{fields_text});
        try t.expectError(error.BadRequest, text);
    }
    // One line, OWS around it trimmed, leading zeros kept as the digits say.
    const one = try t.complete("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: \t05 \r\n\r\n");
    try testing.expectEqual(@as(?u64, 5), one.content_length);
    try testing.expectEqual(@as(usize, 2), one.headers.len);
}

test "Content-Length signed, spaced, empty, non-digit, overflow rejected" {
    var t = TestParse{};
    const bad = [_][]const u8{ "+5", "-5", "5 5", "", "0x5", "5a", "99999999999999999999", "18446744073709551616" };
    for (bad) |value| {
        var text_buf: [128]u8 = undefined;
        const text = try std.fmt.bufPrint(&text_buf, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: {s}\r\n\r\n", .{value});
        try t.expectError(error.BadRequest, text);
    }
}

test "Transfer-Encoding chunked accepted, case-insensitive" {
    var t = TestParse{};
    const r = try t.complete("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
    try testing.expect(r.chunked);
    try testing.expectEqual(@as(?u64, null), r.content_length);
    try testing.expect((try t.complete("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked \r\n\r\n")).chunked);
    try testing.expect((try t.complete("POST / HTTP/1.1\r\nHost: h\r\ntransfer-encoding:CHUNKED\r\n\r\n")).chunked);
}

test "Transfer-Encoding with Content-Length rejected" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n");
    try t.expectError(error.BadRequest, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
    // Framing conflict wins over "unsupported coding".
    try t.expectError(error.BadRequest, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: gzip\r\n\r\n");
}

test "Transfer-Encoding obfuscations" {
    var t = TestParse{};
    const prefix = "POST / HTTP/1.1\r\nHost: h\r\n";
    try t.expectError(error.NotImplemented, prefix ++ "Transfer-Encoding: chunked, identity\r\n\r\n");
    try t.expectError(error.NotImplemented, prefix ++ "Transfer-Encoding: identity\r\n\r\n");
    try t.expectError(error.NotImplemented, prefix ++ "Transfer-Encoding: gzip, chunked\r\n\r\n");
    try t.expectError(error.NotImplemented, prefix ++ "Transfer-Encoding: chunked, chunked\r\n\r\n");
    try t.expectError(error.NotImplemented, prefix ++ "Transfer-Encoding: xchunked\r\n\r\n");
    try t.expectError(error.BadRequest, prefix ++ "Transfer-Encoding: chunked\x0b\r\n\r\n");
    try t.expectError(error.BadRequest, prefix ++ "Transfer-Encoding: chunked;\r\n\r\n");
    try t.expectError(error.BadRequest, prefix ++ "Transfer-Encoding: \r\n\r\n");
    try t.expectError(error.BadRequest, prefix ++ "Transfer-Encoding: ,chunked\r\n\r\n");
    try t.expectError(error.BadRequest, prefix ++ "Transfer-Encoding: \"chunked\"\r\n\r\n");
    try t.expectError(error.BadRequest, prefix ++ "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n");
    try t.expectError(error.BadRequest, prefix ++ "Transfer-Encoding : chunked\r\n\r\n");
}

test "Transfer-Encoding in HTTP/1.0 rejected" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n");
}

test "whitespace before colon rejected" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost : h\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\nX\t: y\r\n\r\n");
}

test "obs-fold rejected" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n\tb\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\n Host: h\r\n\r\n");
}

test "bare LF rejected everywhere" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\n\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nX: a\nb\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\n\nHost: h\r\n\r\n");
}

test "bare CR rejected everywhere" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\rHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nX: a\rb\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\n\rX");
    try t.expectError(error.BadRequest, "GET /a\rb HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "\rGET / HTTP/1.1\r\nHost: h\r\n\r\n");
}

test "control characters in values rejected" {
    var t = TestParse{};
    const controls = [_]u8{ 0x00, 0x01, 0x08, 0x0b, 0x0c, 0x1f, 0x7f };
    for (controls) |control| {
        var text_buf: [64]u8 = undefined;
        const text = try std.fmt.bufPrint(&text_buf, "GET / HTTP/1.1\r\nHost: h\r\nX: a{c}b\r\n\r\n", .{control});
        try t.expectError(error.BadRequest, text);
    }
}

test "NUL in value, name and target rejected" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\nX: \x00\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\nX\x00: y\r\n\r\n");
    try t.expectError(error.BadRequest, "GET /\x00 HTTP/1.1\r\nHost: h\r\n\r\n");
}

test "invalid header names rejected" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\n: empty\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\nX(y): z\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\nX\xc3\xa9: z\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\r\nno-colon\r\n\r\n");
}

test "invalid method token rejected" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "G(T / HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, " GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "G\xc3\x89T / HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "A" ** 33 ++ " / HTTP/1.1\r\nHost: h\r\n\r\n");
    // An endless method fails before its line completes.
    try t.expectError(error.BadRequest, "A" ** 40);
    _ = try t.complete("M-SEARCH /x HTTP/1.1\r\nHost: h\r\n\r\n");
    _ = try t.complete("A" ** 32 ++ " /x HTTP/1.1\r\nHost: h\r\n\r\n");
}

test "request line needs single spaces" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "GET  / HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "GET /  HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1 \r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "GET /\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / a HTTP/1.1\r\nHost: h\r\n\r\n");
}

test "target with non-ASCII byte rejected" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n");
}

test "missing Host on HTTP/1.1 rejected" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHostx: h\r\n\r\n");
}

test "duplicate Host rejected" {
    var t = TestParse{};
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n");
}

test "Host value syntax" {
    var t = TestParse{};
    try testing.expectEqualStrings("[::1]:8080", (try t.complete("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n")).host.?);
    try testing.expectEqualStrings("", (try t.complete("GET / HTTP/1.1\r\nHost:\r\n\r\n")).host.?);
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: user@h\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: a b\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: a\tb\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\nHost: h\xc3\xa9\r\n\r\n");
}

test "HTTP/1.0 without Host ok" {
    var t = TestParse{};
    const r = try t.complete("GET / HTTP/1.0\r\n\r\n");
    try testing.expectEqual(Version.http10, r.version);
    try testing.expectEqual(@as(?[]const u8, null), r.host);
}

test "unsupported versions -> 505" {
    var t = TestParse{};
    for ([_][]const u8{ "HTTP/2.0", "HTTP/1.2", "HTTP/3.0", "HTTP/0.9", "HTTP/9.9" }) |version| {
        var text_buf: [64]u8 = undefined;
        const text = try std.fmt.bufPrint(&text_buf, "GET / {s}\r\nHost: h\r\n\r\n", .{version});
        try t.expectError(error.VersionNotSupported, text);
    }
}

test "malformed versions -> 400" {
    var t = TestParse{};
    const bad = [_][]const u8{ "HTTP/1.1x", "HTTP/1", "http/1.1", "HTTP/1.10", "HTTP/11", "HTTP/a.b", "HTTPS/1.1", "HTTP/1.1\n", "" };
    for (bad) |version| {
        var text_buf: [64]u8 = undefined;
        const text = try std.fmt.bufPrint(&text_buf, "GET / {s}\r\nHost: h\r\n\r\n", .{version});
        try t.expectError(error.BadRequest, text);
    }
    // Detected before the line is complete.
    try t.expectError(error.BadRequest, "GET / HTTX");
}

test "too long target -> 414, also while incomplete" {
    var t = TestParse{};
    const limits = Limits{ .target_bytes_max = 64, .head_bytes_max = test_limits.head_bytes_max, .headers_count_max = test_limits.headers_count_max };
    const exact = "GET /" ++ "a" ** 63 ++ " HTTP/1.1\r\nHost: h\r\n\r\n";
    try testing.expect((try t.parseLimits(exact, limits)) != null);
    const over = "GET /" ++ "a" ** 64 ++ " HTTP/1.1\r\nHost: h\r\n\r\n";
    try testing.expectError(error.UriTooLong, t.parseLimits(over, limits));
    try testing.expectError(error.UriTooLong, t.parseLimits("GET /" ++ "a" ** 64, limits));
    try testing.expectEqual(@as(?Head, null), try t.parseLimits("GET /" ++ "a" ** 63, limits));
    // Default limits: 8 KiB target.
    try testing.expectError(error.UriTooLong, t.parse("GET /" ++ "a" ** (8 * 1024)));
}

test "request line cut off by head limit -> 414" {
    var t = TestParse{};
    const limits = Limits{ .head_bytes_max = 64, .target_bytes_max = 1024, .headers_count_max = test_limits.headers_count_max };
    try testing.expectError(error.UriTooLong, t.parseLimits("GET /" ++ "a" ** 59, limits));
    try testing.expectEqual(@as(?Head, null), try t.parseLimits("GET /" ++ "a" ** 58, limits));
}

test "too many headers -> 431" {
    var t = TestParse{};
    const limits = Limits{ .headers_count_max = 4, .head_bytes_max = test_limits.head_bytes_max, .target_bytes_max = test_limits.target_bytes_max };
    const four = "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    try testing.expect((try t.parseLimits(four, limits)) != null);
    const five = "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n";
    try testing.expectError(error.HeadersTooLarge, t.parseLimits(five, limits));
    // Default limit of 100.
    try t.expectError(error.HeadersTooLarge, "GET / HTTP/1.1\r\nHost: h\r\n" ++ "A: b\r\n" ** 100 ++ "\r\n");
    _ = try t.complete("GET / HTTP/1.1\r\nHost: h\r\n" ++ "A: b\r\n" ** 99 ++ "\r\n");
}

test "head too large -> 431" {
    var t = TestParse{};
    const limits = Limits{ .head_bytes_max = 64, .target_bytes_max = test_limits.target_bytes_max, .headers_count_max = test_limits.headers_count_max };
    const fits = "GET / HTTP/1.1\r\nHost: h\r\nX: " ++ "a" ** 32 ++ "\r\n\r\n";
    try testing.expectEqual(@as(usize, 64), fits.len);
    try testing.expect((try t.parseLimits(fits, limits)) != null);
    const over = "GET / HTTP/1.1\r\nHost: h\r\nX: " ++ "a" ** 33 ++ "\r\n\r\n";
    try testing.expectError(error.HeadersTooLarge, t.parseLimits(over, limits));
    // Incomplete and at the limit.
    try testing.expectError(error.HeadersTooLarge, t.parseLimits(over[0..64], limits));
    try testing.expectEqual(@as(?Head, null), try t.parseLimits(over[0..63], limits));
    // Default 16 KiB.
    try t.expectError(error.HeadersTooLarge, "GET / HTTP/1.1\r\nHost: h\r\nX: " ++ "a" ** (16 * 1024));
}

test "complete head followed by body bytes past the head limit is fine" {
    var t = TestParse{};
    const limits = Limits{ .head_bytes_max = 64, .target_bytes_max = test_limits.target_bytes_max, .headers_count_max = test_limits.headers_count_max };
    const text = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n" ++ "b" ** 100;
    const head = (try t.parseLimits(text, limits)).?;
    try testing.expectEqual(text.len - 100, head.len);
}

test "absolute-form target" {
    var t = TestParse{};
    const r = try t.complete("GET HTTP://Example.com:8080/p/q?x=1 HTTP/1.1\r\nHost: other\r\n\r\n");
    try testing.expectEqualStrings("HTTP://Example.com:8080/p/q?x=1", r.target);
    try testing.expectEqualStrings("/p/q", r.path);
    try testing.expectEqualStrings("x=1", r.query);
    try testing.expectEqualStrings("Example.com:8080", r.host.?);
    const bare = try t.complete("GET https://h HTTP/1.1\r\nHost: h\r\n\r\n");
    try testing.expectEqualStrings("/", bare.path);
    try testing.expectEqualStrings("", bare.query);
    const query_only = try t.complete("GET http://h?a HTTP/1.1\r\nHost: h\r\n\r\n");
    try testing.expectEqualStrings("/", query_only.path);
    try testing.expectEqualStrings("a", query_only.query);
    // HTTP/1.0 absolute-form supplies the host without a Host header.
    try testing.expectEqualStrings("h", (try t.complete("GET http://h/ HTTP/1.0\r\n\r\n")).host.?);
}

test "invalid targets rejected" {
    var t = TestParse{};
    const bad = [_][]const u8{ "http:///p", "http://u@h/", "ftp://h/", "h/p", "*", "http:/h", "example.com:80", "?q" };
    for (bad) |target| {
        var text_buf: [128]u8 = undefined;
        const text = try std.fmt.bufPrint(&text_buf, "GET {s} HTTP/1.1\r\nHost: h\r\n\r\n", .{target});
        try t.expectError(error.BadRequest, text);
    }
}

test "asterisk-form only for OPTIONS" {
    var t = TestParse{};
    const r = try t.complete("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
    try testing.expectEqualStrings("*", r.path);
    try testing.expectEqualStrings("", r.query);
    try t.expectError(error.BadRequest, "GET * HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "OPTIONS *x HTTP/1.1\r\nHost: h\r\n\r\n");
    _ = try t.complete("OPTIONS /x HTTP/1.1\r\nHost: h\r\n\r\n");
}

test "authority-form only for CONNECT" {
    var t = TestParse{};
    const r = try t.complete("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
    try testing.expectEqualStrings("example.com:443", r.target);
    try testing.expectEqualStrings("", r.path);
    _ = try t.complete("CONNECT [::1]:443 HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "CONNECT / HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "CONNECT example.com HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "CONNECT example.com: HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "CONNECT :443 HTTP/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "CONNECT u@h:443 HTTP/1.1\r\nHost: h\r\n\r\n");
}

test "Expect: 100-continue" {
    var t = TestParse{};
    try testing.expect((try t.complete("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n")).expect_continue);
    try testing.expect(!(try t.complete("POST / HTTP/1.1\r\nHost: h\r\nExpect: something\r\n\r\n")).expect_continue);
}

test "Upgrade only with Connection: upgrade" {
    var t = TestParse{};
    const r = try t.complete("GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\n");
    try testing.expectEqualStrings("websocket", r.upgrade.?);
    const no_token = try t.complete("GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n");
    try testing.expectEqual(@as(?[]const u8, null), no_token.upgrade);
    const no_header = try t.complete("GET /ws HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\n\r\n");
    try testing.expectEqual(@as(?[]const u8, null), no_header.upgrade);
}

test "headers storage smaller than the limit is never overrun" {
    var buf = "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n\r\n".*;
    var storage: [2]Header = undefined;
    try testing.expectError(error.HeadersTooLarge, parseHead(&buf, &storage, test_limits));
}

test "hostile bytes never crash the head parser" {
    var prng = std.Random.DefaultPrng.init(0x5eed);
    const random = prng.random();
    const alphabet = "GET /HTP1.0\r\n: \thost-content-lgransfcodi,;=\x00\x7f\x80";
    var buf: [256]u8 = undefined;
    var storage: [8]Header = undefined;
    const limits = Limits{ .head_bytes_max = 200, .target_bytes_max = 32, .headers_count_max = 8 };
    for (0..20_000) |_| {
        const len = random.uintLessThan(usize, buf.len);
        for (buf[0..len]) |*c| {
            c.* = if (random.boolean()) alphabet[random.uintLessThan(usize, alphabet.len)] else random.int(u8);
        }
        if (parseHead(buf[0..len], &storage, limits)) |maybe_head| {
            if (maybe_head) |head| try testing.expect(head.len <= len);
        } else |_| {}
    }
}
