//! QPACK's shared pieces (RFC 9204): prefix integers, string literals and the static
//! table, used by the decoder (`qpack_decoder.zig`) and the encoder (`qpack_encoder.zig`).
//! Sans-IO, no allocation. Strings use HPACK's Huffman code (`http/huffman.zig`) unchanged.
const std = @import("std");
const fields = @import("../http/fields.zig");
const huffman = @import("../http/huffman.zig");
const prefix_int = @import("../http/prefix_int.zig");

/// The engine's header field: decoded fields come out in this shape, as HTTP/2's do.
pub const Header = fields.Header;

/// RFC 9204 3.2.1: an entry's size is its name's and value's lengths plus 32.
pub const entry_overhead = 32;

/// RFC 9204 4.1.1: integers of up to 62 bits must decode; anything larger is refused.
pub const int_value_max: u64 = (1 << 62) - 1;

pub const IntError = prefix_int.Error;

/// Reads an integer with an N-bit prefix at `pos.*` (`prefix_int.decode`, bounded at
/// 62 bits). error.Truncated lets an incremental reader wait for more.
pub fn decodeInt(bytes: []const u8, pos: *usize, comptime prefix: u4) IntError!u64 {
    return prefix_int.decode(bytes, pos, prefix, int_value_max);
}

/// Writes `value` (at most 62 bits) with an N-bit prefix at `buf[pos]`, `flags` in the
/// bits above the prefix. Returns the position after it.
pub fn encodeInt(
    buf: []u8,
    pos: usize,
    flags: u8,
    comptime prefix: u4,
    value: u64,
) error{NoSpace}!usize {
    std.debug.assert(value <= int_value_max);
    return prefix_int.encode(buf, pos, flags, prefix, value);
}

/// A string literal's raw form (RFC 9204 4.1.2): where its bytes are and whether they
/// are Huffman-coded. The H flag is the bit just above the length's N-bit prefix.
pub const RawString = struct { bytes: []const u8, huffman: bool };

/// Reads a string literal's header and bytes at `pos.*` without decoding it.
/// error.Truncated when the input ends inside it; `pos.*` moves only on success.
pub fn readRawString(bytes: []const u8, pos: *usize, comptime prefix: u4) IntError!RawString {
    var p = pos.*;
    if (p >= bytes.len) return error.Truncated;
    const coded = bytes[p] & (@as(u8, 1) << prefix) != 0;
    const len = try decodeInt(bytes, &p, prefix);
    if (len > bytes.len - p) return error.Truncated;
    const raw = bytes[p..][0..@intCast(len)];
    pos.* = p + raw.len;
    return .{ .bytes = raw, .huffman = coded };
}

/// The decoded string: a plain one as it stands, a Huffman one decoded into
/// `scratch[used.*..]`. error.NoSpace when scratch is too small, error.Compression for a
/// bad Huffman code.
pub fn decodeString(
    raw: RawString,
    scratch: []u8,
    used: *usize,
) error{ Compression, NoSpace }![]const u8 {
    if (!raw.huffman) return raw.bytes;
    const dst = scratch[used.*..];
    const n = try huffman.decode(dst, raw.bytes);
    used.* += n;
    return dst[0..n];
}

/// The most bytes a string of `decoded_max` bytes may take on the wire: plain, or
/// Huffman-coded with the longest code (30 bits) plus the padding. A longer length
/// prefix is refused before its bytes arrive.
pub fn rawLenMax(decoded_max: u64) u64 {
    return (decoded_max * 30 + 7) / 8 + 1;
}

/// Writes `s` as a string literal at `buf[pos]` with an N-bit length prefix, `flags`
/// above the H bit; Huffman-coded when that is shorter. Returns the position after it.
pub fn writeString(
    buf: []u8,
    pos: usize,
    flags: u8,
    comptime prefix: u4,
    s: []const u8,
) error{NoSpace}!usize {
    const h_bit: u8 = @as(u8, 1) << prefix;
    std.debug.assert(flags & (h_bit | (h_bit - 1)) == 0);
    const hlen = huffman.encodedLen(s);
    if (hlen < s.len) {
        const p = try encodeInt(buf, pos, flags | h_bit, prefix, hlen);
        if (buf.len - p < hlen) return error.NoSpace;
        const written = huffman.encode(buf[p..][0..hlen], s);
        // The encoder writes exactly the length its length function promised.
        std.debug.assert(written == hlen);
        return p + written;
    }
    const p = try encodeInt(buf, pos, flags, prefix, s.len);
    if (buf.len - p < s.len) return error.NoSpace;
    @memcpy(buf[p..][0..s.len], s);
    return p + s.len;
}

/// RFC 9204 Appendix A, indexed from 0.
pub const static_table = [99]Header{
    .{ .name = ":authority", .value = "" },
    .{ .name = ":path", .value = "/" },
    .{ .name = "age", .value = "0" },
    .{ .name = "content-disposition", .value = "" },
    .{ .name = "content-length", .value = "0" },
    .{ .name = "cookie", .value = "" },
    .{ .name = "date", .value = "" },
    .{ .name = "etag", .value = "" },
    .{ .name = "if-modified-since", .value = "" },
    .{ .name = "if-none-match", .value = "" },
    .{ .name = "last-modified", .value = "" },
    .{ .name = "link", .value = "" },
    .{ .name = "location", .value = "" },
    .{ .name = "referer", .value = "" },
    .{ .name = "set-cookie", .value = "" },
    .{ .name = ":method", .value = "CONNECT" },
    .{ .name = ":method", .value = "DELETE" },
    .{ .name = ":method", .value = "GET" },
    .{ .name = ":method", .value = "HEAD" },
    .{ .name = ":method", .value = "OPTIONS" },
    .{ .name = ":method", .value = "POST" },
    .{ .name = ":method", .value = "PUT" },
    .{ .name = ":scheme", .value = "http" },
    .{ .name = ":scheme", .value = "https" },
    .{ .name = ":status", .value = "103" },
    .{ .name = ":status", .value = "200" },
    .{ .name = ":status", .value = "304" },
    .{ .name = ":status", .value = "404" },
    .{ .name = ":status", .value = "503" },
    .{ .name = "accept", .value = "*/*" },
    .{ .name = "accept", .value = "application/dns-message" },
    .{ .name = "accept-encoding", .value = "gzip, deflate, br" },
    .{ .name = "accept-ranges", .value = "bytes" },
    .{ .name = "access-control-allow-headers", .value = "cache-control" },
    .{ .name = "access-control-allow-headers", .value = "content-type" },
    .{ .name = "access-control-allow-origin", .value = "*" },
    .{ .name = "cache-control", .value = "max-age=0" },
    .{ .name = "cache-control", .value = "max-age=2592000" },
    .{ .name = "cache-control", .value = "max-age=604800" },
    .{ .name = "cache-control", .value = "no-cache" },
    .{ .name = "cache-control", .value = "no-store" },
    .{ .name = "cache-control", .value = "public, max-age=31536000" },
    .{ .name = "content-encoding", .value = "br" },
    .{ .name = "content-encoding", .value = "gzip" },
    .{ .name = "content-type", .value = "application/dns-message" },
    .{ .name = "content-type", .value = "application/javascript" },
    .{ .name = "content-type", .value = "application/json" },
    .{ .name = "content-type", .value = "application/x-www-form-urlencoded" },
    .{ .name = "content-type", .value = "image/gif" },
    .{ .name = "content-type", .value = "image/jpeg" },
    .{ .name = "content-type", .value = "image/png" },
    .{ .name = "content-type", .value = "text/css" },
    .{ .name = "content-type", .value = "text/html; charset=utf-8" },
    .{ .name = "content-type", .value = "text/plain" },
    .{ .name = "content-type", .value = "text/plain;charset=utf-8" },
    .{ .name = "range", .value = "bytes=0-" },
    .{ .name = "strict-transport-security", .value = "max-age=31536000" },
    .{ .name = "strict-transport-security", .value = "max-age=31536000; includesubdomains" },
    .{
        .name = "strict-transport-security",
        .value = "max-age=31536000; includesubdomains; preload",
    },
    .{ .name = "vary", .value = "accept-encoding" },
    .{ .name = "vary", .value = "origin" },
    .{ .name = "x-content-type-options", .value = "nosniff" },
    .{ .name = "x-xss-protection", .value = "1; mode=block" },
    .{ .name = ":status", .value = "100" },
    .{ .name = ":status", .value = "204" },
    .{ .name = ":status", .value = "206" },
    .{ .name = ":status", .value = "302" },
    .{ .name = ":status", .value = "400" },
    .{ .name = ":status", .value = "403" },
    .{ .name = ":status", .value = "421" },
    .{ .name = ":status", .value = "425" },
    .{ .name = ":status", .value = "500" },
    .{ .name = "accept-language", .value = "" },
    .{ .name = "access-control-allow-credentials", .value = "FALSE" },
    .{ .name = "access-control-allow-credentials", .value = "TRUE" },
    .{ .name = "access-control-allow-headers", .value = "*" },
    .{ .name = "access-control-allow-methods", .value = "get" },
    .{ .name = "access-control-allow-methods", .value = "get, post, options" },
    .{ .name = "access-control-allow-methods", .value = "options" },
    .{ .name = "access-control-expose-headers", .value = "content-length" },
    .{ .name = "access-control-request-headers", .value = "content-type" },
    .{ .name = "access-control-request-method", .value = "get" },
    .{ .name = "access-control-request-method", .value = "post" },
    .{ .name = "alt-svc", .value = "clear" },
    .{ .name = "authorization", .value = "" },
    .{
        .name = "content-security-policy",
        .value = "script-src 'none'; object-src 'none'; base-uri 'none'",
    },
    .{ .name = "early-data", .value = "1" },
    .{ .name = "expect-ct", .value = "" },
    .{ .name = "forwarded", .value = "" },
    .{ .name = "if-range", .value = "" },
    .{ .name = "origin", .value = "" },
    .{ .name = "purpose", .value = "prefetch" },
    .{ .name = "server", .value = "" },
    .{ .name = "timing-allow-origin", .value = "*" },
    .{ .name = "upgrade-insecure-requests", .value = "1" },
    .{ .name = "user-agent", .value = "" },
    .{ .name = "x-forwarded-for", .value = "" },
    .{ .name = "x-frame-options", .value = "deny" },
    .{ .name = "x-frame-options", .value = "sameorigin" },
};

// ---------------------------------------------------------------------------------
// Tests

const testing = std.testing;

test "static table: 99 entries, first, last and the :status runs of Appendix A" {
    try testing.expectEqual(@as(usize, 99), static_table.len);
    try testing.expectEqualStrings(":authority", static_table[0].name);
    try testing.expectEqualStrings("sameorigin", static_table[98].value);
    try testing.expectEqualStrings("103", static_table[24].value);
    try testing.expectEqualStrings("503", static_table[28].value);
    try testing.expectEqualStrings("100", static_table[63].value);
    try testing.expectEqualStrings("500", static_table[71].value);
    try testing.expectEqualStrings("user-agent", static_table[95].name);
    // Names are lower case, as HTTP/3 requires on the wire.
    for (static_table) |h| {
        for (h.name) |c| try testing.expect(!std.ascii.isUpper(c));
    }
}

test "strings: plain and Huffman round-trip; truncated and bad codes" {
    var buf: [64]u8 = undefined;
    var scratch: [64]u8 = undefined;
    for ([_][]const u8{ "", "www.example.com", "\x00\xff" }) |s| {
        const n = try writeString(&buf, 0, 0x40, 5, s);
        var pos: usize = 0;
        const raw = try readRawString(buf[0..n], &pos, 5);
        try testing.expectEqual(n, pos);
        var used: usize = 0;
        try testing.expectEqualStrings(s, try decodeString(raw, &scratch, &used));
        pos = 0;
        if (n > 1) try testing.expectError(
            error.Truncated,
            readRawString(buf[0 .. n - 1], &pos, 5),
        );
    }
    // www.example.com is shorter coded: the H bit (0x20 for a 5-bit prefix) is set.
    _ = try writeString(&buf, 0, 0, 5, "www.example.com");
    try testing.expect(buf[0] & 0x20 != 0);
    // A Huffman string of one 0x00 byte: a prefix of a longer code, padding not all ones.
    var used: usize = 0;
    try testing.expectError(
        error.Compression,
        decodeString(.{ .bytes = &.{0x00}, .huffman = true }, &scratch, &used),
    );
    try testing.expectError(
        error.NoSpace,
        decodeString(.{ .bytes = &.{ 0x1f, 0xff }, .huffman = true }, scratch[0..0], &used),
    );
}
