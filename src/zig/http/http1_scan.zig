//! Fast paths of the HTTP/1.1 head parser (`parser.zig`): the vector steps of its scans (a
//! field value's end, a field name's common bytes lower-cased in place) and the common
//! versions. Each is only a fast path: the parser's general check after it makes the
//! final decision, and the tests below hold both to the byte-at-a-time answer at every
//! vector-width boundary.
const std = @import("std");
const parser = @import("http1_parser.zig");
const testing = std.testing;

/// The count of leading field-value bytes of `chunk`, or null when all of them are.
pub fn fieldValueRun(comptime width: comptime_int, chunk: @Vector(width, u8)) ?usize {
    const V = @Vector(width, u8);
    const Bits = std.meta.Int(.unsigned, width);
    const printable = (chunk >= @as(V, @splat(0x20))) & (chunk != @as(V, @splat(0x7f)));
    const ok: Bits = @bitCast(printable | (chunk == @as(V, @splat('\t'))));
    if (ok == std.math.maxInt(Bits)) return null;
    return @ctz(~ok);
}

/// Index of the first byte at or after `start` that is not a tchar, with every byte
/// before it lower-cased in place. The vector step knows only the common name bytes
/// (letters, digits, '-'); at any other byte the scalar loop takes over and decides.
pub fn fieldNameEnd(bytes: []u8, start: usize) usize {
    var index = start;
    while (bytes.len - index >= parser.vector_bytes) {
        const run = lowerNameRun(parser.vector_bytes, bytes[index..][0..parser.vector_bytes]);
        index += run;
        if (run < parser.vector_bytes) break;
    } else if (bytes.len - index >= 8) {
        index += lowerNameRun(8, bytes[index..][0..8]);
    }
    while (index < bytes.len and parser.tchar_table[bytes[index]]) : (index += 1) {
        bytes[index] = std.ascii.toLower(bytes[index]);
    }
    return index;
}

/// Lower-cases the leading run of letters, digits and '-' of `chunk` in place (the
/// other bytes are written back unchanged) and returns its length.
pub fn lowerNameRun(comptime width: comptime_int, chunk: *[width]u8) usize {
    const V = @Vector(width, u8);
    const Bits = std.meta.Int(.unsigned, width);
    const bytes: V = chunk.*;
    // Letters, digits and '-' all have bit 0x20 set once lower-cased: OR-ing it in is
    // the lower-casing, and only letters land in 'a'..'z'.
    const lower = bytes | @as(V, @splat(0x20));
    const letter = (lower >= @as(V, @splat('a'))) & (lower <= @as(V, @splat('z')));
    const digit = (bytes >= @as(V, @splat('0'))) & (bytes <= @as(V, @splat('9')));
    const common: Bits = @bitCast(letter | digit | (bytes == @as(V, @splat('-'))));
    const run: usize = @ctz(~common);
    if (run == 0) return 0;
    const in_run = std.simd.iota(u8, width) < @as(V, @splat(@intCast(run)));
    chunk.* = @select(u8, in_run, lower, bytes);
    return run;
}

/// The version of a request line's "HTTP/1.1" or "HTTP/1.0" and CRLF, two comparisons;
/// null for anything else, which the parser's general check then decides.
pub fn commonVersion(line: *const [10]u8) ?parser.Version {
    if (std.mem.readInt(u16, line[8..10], .little) != comptime std.mem.readInt(u16, "\r\n", .little)) return null;
    const word = std.mem.readInt(u64, line[0..8], .little);
    if (word == comptime std.mem.readInt(u64, "HTTP/1.1", .little)) return .http11;
    if (word == comptime std.mem.readInt(u64, "HTTP/1.0", .little)) return .http10;
    return null;
}

// ---------------------------------------------------------------------------------------
// Tests.

/// Owns the mutable buffer a head is parsed from (names are lower-cased in place).
const TestParse = struct {
    buf: [1024]u8 = undefined,
    headers: [16]parser.Header = undefined,

    fn parse(self: *TestParse, text: []const u8) parser.ParseError!?parser.Head {
        @memcpy(self.buf[0..text.len], text);
        return parser.parseHead(self.buf[0..text.len], &self.headers, parser.test_limits);
    }

    fn complete(self: *TestParse, text: []const u8) !parser.Request {
        const head = (try self.parse(text)) orelse return error.TestUnexpectedNull;
        try testing.expectEqual(text.len, head.len);
        return head.request;
    }

    fn expectError(self: *TestParse, expected: parser.ParseError, text: []const u8) !void {
        try testing.expectError(expected, self.parse(text));
    }
};

fn headerValue(request: parser.Request, name: []const u8) ?[]const u8 {
    for (request.headers) |header| {
        if (std.mem.eql(u8, header.name, name)) return header.value;
    }
    return null;
}

/// What `fieldValueEnd` and `fieldNameEnd` must answer, one byte at a time.
fn referenceRunEnd(table: *const [256]bool, bytes: []const u8, start: usize) usize {
    var index = start;
    while (index < bytes.len and table[bytes[index]]) index += 1;
    return index;
}

test "value and name scans: every byte at every position across the vector widths" {
    // Runs up to 40 bytes (past two 16-byte chunks and an 8-byte step) from starts 0..3,
    // with each of the 256 byte values at each position: the vector steps must stop
    // exactly where the byte-at-a-time scan does, and lower-case exactly what it passed.
    var bytes: [48]u8 = undefined;
    var names: [48]u8 = undefined;
    for ([_]u8{ 'v', 'V', '-', '7' }) |fill| {
        for (0..4) |start| {
            for (start..41) |len| {
                for (start..len + 1) |pos| {
                    for (0..256) |b| {
                        @memset(bytes[0..len], fill);
                        if (pos < len) bytes[pos] = @intCast(b);
                        try testing.expectEqual(referenceRunEnd(&parser.field_value_table, bytes[0..len], start), parser.fieldValueEnd(bytes[0..len], start));
                        @memcpy(names[0..len], bytes[0..len]);
                        const end = fieldNameEnd(names[0..len], start);
                        try testing.expectEqual(referenceRunEnd(&parser.tchar_table, bytes[0..len], start), end);
                        for (0..len) |i| {
                            const want = if (i >= start and i < end) std.ascii.toLower(bytes[i]) else bytes[i];
                            try testing.expectEqual(want, names[i]);
                        }
                        if (pos == len) break;
                    }
                }
            }
        }
    }
}

test "a forbidden byte at each position of a name or value is refused, as by the scalar scan" {
    var t = TestParse{};
    var text: [128]u8 = undefined;
    const prefix = "GET / HTTP/1.1\r\nHost: h\r\n";
    const name = "X-Abcdefghijklmnopqrstuvwxyz-0123456789";
    const value = "Vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv";
    for ([_]u8{ 0, '\t', ' ', '"', '(', '/', ':', '@', '[', '{', 0x7f, 0x80, 0xff, '\r', '\n' }) |bad| {
        for (1..name.len) |at| {
            const line = std.fmt.bufPrint(&text, "{s}{s}: v\r\n\r\n", .{ prefix, name }) catch unreachable;
            line[prefix.len + at] = bad;
            // A ':' inside the name only ends it early; anything else is a 400.
            if (bad == ':') {
                const r = try t.complete(line);
                try testing.expectEqual(at, r.headers[1].name.len);
            } else try t.expectError(error.BadRequest, line);
        }
        for (0..value.len) |at| {
            const line = std.fmt.bufPrint(&text, "{s}X: {s}\r\n\r\n", .{ prefix, value }) catch unreachable;
            line[prefix.len + 3 + at] = bad;
            if (parser.field_value_table[bad]) {
                var want: [value.len]u8 = value.*;
                want[at] = bad;
                const r = try t.complete(line);
                try testing.expectEqualStrings(std.mem.trim(u8, &want, " \t"), headerValue(r, "x").?);
            } else try t.expectError(error.BadRequest, line);
        }
    }
    // Names are lower-cased across the vector widths, other tchars included.
    const r = try t.complete("GET / HTTP/1.1\r\nHost: h\r\nX-ABCDEFGHIJKLMNOP.QRSTUVWXYZ_~!#$%&'*+^`|: 1\r\nAB: 2\r\nABCDEFGH: 3\r\n\r\n");
    try testing.expectEqualStrings("x-abcdefghijklmnop.qrstuvwxyz_~!#$%&'*+^`|", r.headers[1].name);
    try testing.expectEqualStrings("ab", r.headers[2].name);
    try testing.expectEqualStrings("abcdefgh", r.headers[3].name);
}

test "GET and HTTP/1.x fast paths decide as the general ones" {
    var t = TestParse{};
    const r10 = try t.complete("GET / HTTP/1.0\r\n\r\n");
    try testing.expectEqualStrings("GET", r10.method);
    try testing.expectEqual(parser.Version.http10, r10.version);
    try testing.expectEqual(parser.Version.http11, (try t.complete("GETX / HTTP/1.1\r\nHost: h\r\n\r\n")).version);
    try testing.expectEqualStrings("GETX", (try t.complete("GETX / HTTP/1.1\r\nHost: h\r\n\r\n")).method);
    try testing.expectEqualStrings("GE", (try t.complete("GE / HTTP/1.1\r\nHost: h\r\n\r\n")).method);
    try testing.expectEqualStrings("get", (try t.complete("get / HTTP/1.1\r\nHost: h\r\n\r\n")).method);
    try t.expectError(error.BadRequest, "GET  / HTTP/1.1\r\nHost: h\r\n\r\n");
    try testing.expectEqual(@as(?parser.Head, null), try t.parse("GET "));
    try testing.expectEqual(@as(?parser.Head, null), try t.parse("GET / HTTP/1.1\r"));
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1\r\r\n");
    try t.expectError(error.BadRequest, "GET / http/1.1\r\nHost: h\r\n\r\n");
    try t.expectError(error.VersionNotSupported, "GET / HTTP/1.2\r\nHost: h\r\n\r\n");
    try t.expectError(error.VersionNotSupported, "GET / HTTP/2.0\r\nHost: h\r\n\r\n");
    try t.expectError(error.BadRequest, "GET / HTTP/1.1 \r\nHost: h\r\n\r\n");
}
