//! The words every HTTP protocol shares: a header field, the list syntax of fields like
//! `Connection` (RFC 9110 5.6.1), percent-decoding of a path. HTTP/1.1's parser, HTTP/2's
//! request checks, WebSocket's handshake and the engine's own answers all use these, so
//! they live here rather than with any one protocol.
const std = @import("std");

/// One header field as a protocol hands it over: the name lower-cased, the value as sent
/// (trimmed of surrounding whitespace). Both slices borrow the protocol's buffer.
pub const Header = struct { name: []const u8, value: []const u8 };

/// Hex digit value, or 0xff for a non-hex byte.
pub const hex_value = blk: {
    var table = [_]u8{0xff} ** 256;
    for ('0'..'9' + 1) |c| table[c] = c - '0';
    for ('a'..'f' + 1) |c| table[c] = c - 'a' + 10;
    for ('A'..'F' + 1) |c| table[c] = c - 'A' + 10;
    break :blk table;
};

/// Optional whitespace (SP, HTAB) trimmed from both ends.
pub fn trimOws(bytes: []const u8) []const u8 {
    return std.mem.trim(u8, bytes, " \t");
}

/// Percent-decodes `src` into `dst` (dst.len >= src.len). Returns the decoded length.
/// Invalid escapes (e.g. "%zz", "%4") are copied literally (like Python's
/// urllib.parse.unquote). Should `dst` be shorter than required, the output is truncated
/// at dst.len rather than overflowing.
pub fn percentDecode(src: []const u8, dst: []u8) usize {
    var read: usize = 0;
    var written: usize = 0;
    while (read < src.len and written < dst.len) : (written += 1) {
        if (src[read] == '%' and src.len - read >= 3) {
            const high = hex_value[src[read + 1]];
            const low = hex_value[src[read + 2]];
            if (high != 0xff and low != 0xff) {
                dst[written] = (high << 4) | low;
                read += 3;
                continue;
            }
        }
        dst[written] = src[read];
        read += 1;
    }
    return written;
}

/// true if a `Connection` header list contains `token` (case-insensitive).
pub fn connectionHas(value: []const u8, token: []const u8) bool {
    if (token.len == 0) return false;
    var elements = std.mem.splitScalar(u8, value, ',');
    while (elements.next()) |element| {
        if (std.ascii.eqlIgnoreCase(trimOws(element), token)) return true;
    }
    return false;
}

/// 19 decimal digits always fit in a u64, so a checked parse can never overflow.
pub const content_length_digits_max = 19;

/// A request's Content-Length field, under the one rule every protocol applies (HTTP/1.1's
/// parser, HTTP/2's and HTTP/3's request checks): `seen` is the length an earlier
/// Content-Length field of the same request gave (null: this is the first). Refused: a
/// second field, even one with the same value, and a value that is not 1 to 19 ASCII
/// digits (RFC 9110 8.6: 1*DIGIT), so no sign, no space inside, and no list ("5, 5").
///
/// RFC 9110 8.6 lets a recipient either refuse several identical values or fold them into
/// one. Refusing is what llhttp (uvicorn's httptools), gunicorn and nginx do, for a second
/// field line and for a list alike; h11 (uvicorn's h11, hypercorn) folds byte-identical
/// values and refuses any difference (5 beside 05). Whatever this rule accepts, each of
/// them accepts too and reads as the same length, so no hop before or after us can frame
/// the body otherwise; folding would accept requests most of them refuse.
pub fn contentLength(seen: ?u64, value: []const u8) error{Refused}!u64 {
    if (seen != null) return error.Refused;
    if (value.len == 0 or value.len > content_length_digits_max) return error.Refused;
    var result: u64 = 0;
    for (value) |c| {
        if (c < '0' or c > '9') return error.Refused;
        // At most 19 digits: below 10^19 < 2^64, no overflow.
        result = result * 10 + (c - '0');
    }
    return result;
}

const testing = std.testing;

fn expectPercentDecode(expected: []const u8, src: []const u8) !void {
    var dst: [256]u8 = undefined;
    const len = percentDecode(src, dst[0..src.len]);
    try testing.expectEqualStrings(expected, dst[0..len]);
}

test "percentDecode plain and escapes" {
    try expectPercentDecode("", "");
    try expectPercentDecode("/a b/c", "/a%20b/c");
    try expectPercentDecode("/a+b", "/a+b"); // '+' is not a space in paths.
    try expectPercentDecode("?/#", "%3F%2f%23");
    try expectPercentDecode("\x00\xff", "%00%FF");
}

test "percentDecode UTF-8 sequences" {
    try expectPercentDecode("caf\xc3\xa9", "caf%C3%A9");
    try expectPercentDecode("\xe2\x82\xac", "%E2%82%AC");
    try expectPercentDecode("\xf0\x9f\x98\x80!", "%F0%9F%98%80!");
}

test "percentDecode invalid escapes copied literally" {
    try expectPercentDecode("%zz", "%zz");
    try expectPercentDecode("%4", "%4");
    try expectPercentDecode("%", "%");
    try expectPercentDecode("a%g1b", "a%g1b");
    try expectPercentDecode("%A", "%%41");
    try expectPercentDecode("100%", "100%");
}

test "percentDecode never writes past dst" {
    var dst: [3]u8 = undefined;
    const len = percentDecode("abcdef", &dst);
    try testing.expectEqual(@as(usize, 3), len);
    try testing.expectEqualStrings("abc", &dst);
}

test "connectionHas" {
    try testing.expect(connectionHas("close", "close"));
    try testing.expect(connectionHas("Keep-Alive, Upgrade", "upgrade"));
    try testing.expect(connectionHas(" a ,\tCLOSE\t, b", "close"));
    try testing.expect(!connectionHas("closed", "close"));
    try testing.expect(!connectionHas("", "close"));
    try testing.expect(!connectionHas("close", ""));
    try testing.expect(!connectionHas("keep-alive", "close"));
}

test "contentLength: one field of 1 to 19 digits; a second field, a list or a sign is refused" {
    try testing.expectEqual(@as(u64, 5), try contentLength(null, "5"));
    try testing.expectEqual(@as(u64, 5), try contentLength(null, "05"));
    try testing.expectEqual(@as(u64, 0), try contentLength(null, "0"));
    const max = "9999999999999999999";
    try testing.expectEqual(@as(u64, 9999999999999999999), try contentLength(null, max));
    // A second field: refused whatever its value, the same one included.
    try testing.expectError(error.Refused, contentLength(5, "5"));
    try testing.expectError(error.Refused, contentLength(5, "05"));
    try testing.expectError(error.Refused, contentLength(0, "0"));
    const lists = [_][]const u8{ "5, 5", "5,5", "5,", "5 5" };
    const signs = [_][]const u8{ "+5", "-0", "1_0", " 5", "5 ", "0x5", "5a", "1.0" };
    const odd = [_][]const u8{ "", "\x00", "١", "1\t" };
    const long = [_][]const u8{ "99999999999999999999", "18446744073709551616" };
    for (lists ++ signs ++ odd ++ long) |v|
        try testing.expectError(error.Refused, contentLength(null, v));
}
