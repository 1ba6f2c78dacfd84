//! Prefix integers, the one integer form of both header compressions: HPACK defines it
//! (RFC 7541 5.1) and QPACK reuses it unchanged (RFC 9204 4.1.1). A value below the
//! prefix's maximum fits in the prefix bits of the first byte; a larger one fills them
//! and carries the rest 7 bits per continuation byte, least significant first.
//! Each user names the largest value it accepts: HPACK's lengths and indexes fit in
//! u32, QPACK's go to 2^62 - 1.
const std = @import("std");

pub const Error = error{ Truncated, Overflow };

/// How many continuation bytes a value of at most `value_max` can need: 7 bits each.
/// One more can only be an over-long encoding (zero-valued continuation bytes), so the
/// reader stops there rather than walking padding for as long as the peer sends it.
fn continuationsMax(comptime value_max: u64) usize {
    const bits: usize = 64 - @clz(value_max);
    return (bits + 6) / 7;
}

/// Reads an integer with an N-bit prefix at `pos.*` (the bits above the prefix are
/// ignored). error.Truncated when the input ends inside it (an incremental reader waits
/// for more); error.Overflow beyond `value_max` or for an over-long encoding. `pos.*`
/// moves only on success.
pub fn decode(
    bytes: []const u8,
    pos: *usize,
    comptime prefix: u4,
    comptime value_max: u64,
) Error!u64 {
    comptime std.debug.assert(prefix >= 1 and prefix <= 8);
    // Below 2^63: `value_max - value` and the shifted 7 bits stay within u64.
    comptime std.debug.assert(value_max < 1 << 63);
    const continuations_max = comptime continuationsMax(value_max);
    const max_prefix: u8 = @intCast((@as(u16, 1) << prefix) - 1);
    var p = pos.*;
    if (p >= bytes.len) return error.Truncated;
    const first = bytes[p] & max_prefix;
    p += 1;
    if (first < max_prefix) {
        pos.* = p;
        return first;
    }
    if (first > value_max) return error.Overflow;
    var value: u64 = first;
    var shift: u6 = 0;
    var k: usize = 0;
    while (k < continuations_max) : (k += 1) {
        if (p >= bytes.len) return error.Truncated;
        const b = bytes[p];
        p += 1;
        const bits: u64 = b & 0x7f;
        // Checked before shifting: bits shifted past the bound would be lost, not refused.
        if (bits != 0 and (shift > 56 or bits > (value_max - value) >> shift)) {
            return error.Overflow;
        }
        value += bits << shift;
        if (b & 0x80 == 0) {
            pos.* = p;
            return value;
        }
        shift += 7;
    }
    return error.Overflow;
}

/// Writes `value` with an N-bit prefix at `buf[pos]`, `flags` in the bits above the
/// prefix. Returns the position after it. Any u64 is written: a user with a bound
/// asserts it before calling (the peer-integer tests send values past it on purpose).
pub fn encode(
    buf: []u8,
    pos: usize,
    flags: u8,
    comptime prefix: u4,
    value: u64,
) error{NoSpace}!usize {
    comptime std.debug.assert(prefix >= 1 and prefix <= 8);
    const max_prefix: u8 = @intCast((@as(u16, 1) << prefix) - 1);
    // The flags stay above the prefix: they never overwrite the integer's bits.
    std.debug.assert(flags & max_prefix == 0);
    if (pos >= buf.len) return error.NoSpace;
    if (value < max_prefix) {
        buf[pos] = flags | @as(u8, @intCast(value));
        return pos + 1;
    }
    buf[pos] = flags | max_prefix;
    var p = pos + 1;
    var v = value - max_prefix;
    while (v >= 0x80) : (v >>= 7) {
        if (p >= buf.len) return error.NoSpace;
        buf[p] = @as(u8, @intCast(v & 0x7f)) | 0x80;
        p += 1;
    }
    if (p >= buf.len) return error.NoSpace;
    buf[p] = @intCast(v);
    return p + 1;
}

const testing = std.testing;

/// The two bounds in use: HPACK's u32 and QPACK's 62 bits.
const bounds = .{ std.math.maxInt(u32), (1 << 62) - 1 };

test "prefix integers: RFC 7541 C.1 examples" {
    var buf: [8]u8 = undefined;
    var pos: usize = 0;
    // C.1.1: 10 with a 5-bit prefix; C.1.2: 1337 with a 5-bit prefix; C.1.3: 42 at an
    // octet boundary (an 8-bit prefix).
    try testing.expectEqual(@as(usize, 1), try encode(&buf, 0, 0, 5, 10));
    try testing.expectEqualSlices(u8, &.{0x0a}, buf[0..1]);
    try testing.expectEqual(@as(u64, 10), try decode(buf[0..1], &pos, 5, bounds[0]));
    try testing.expectEqual(@as(usize, 3), try encode(&buf, 0, 0, 5, 1337));
    try testing.expectEqualSlices(u8, &.{ 0x1f, 0x9a, 0x0a }, buf[0..3]);
    pos = 0;
    try testing.expectEqual(@as(u64, 1337), try decode(buf[0..3], &pos, 5, bounds[0]));
    try testing.expectEqual(@as(usize, 3), pos);
    try testing.expectEqual(@as(usize, 1), try encode(&buf, 0, 0, 8, 42));
    try testing.expectEqualSlices(u8, &.{0x2a}, buf[0..1]);
    // The flags above the prefix are kept on write and ignored on read.
    try testing.expectEqual(@as(usize, 1), try encode(&buf, 0, 0xc0, 6, 17));
    try testing.expectEqual(@as(u8, 0xc0 | 17), buf[0]);
    pos = 0;
    try testing.expectEqual(@as(u64, 17), try decode(buf[0..1], &pos, 6, bounds[0]));
    try testing.expectError(error.NoSpace, encode(buf[0..2], 0, 0, 5, 1337));
    try testing.expectError(error.NoSpace, encode(buf[0..0], 0, 0, 5, 1));
}

test "prefix integers: every prefix 1..8 at its boundaries and the largest value" {
    var buf: [16]u8 = undefined;
    inline for (bounds) |value_max| {
        inline for (.{ 1, 2, 3, 4, 5, 6, 7, 8 }) |prefix| {
            const max_prefix: u64 = (1 << prefix) - 1;
            // 0, one below the prefix's maximum (one byte), the maximum itself (two
            // bytes), the one- and two-continuation edges, and the largest value all
            // round-trip with the length they must have.
            const values = [_]u64{
                0,                max_prefix -| 1,  max_prefix,
                max_prefix + 127, max_prefix + 128, value_max,
            };
            for (values) |v| {
                const n = try encode(&buf, 0, 0, prefix, v);
                if (v < max_prefix) try testing.expectEqual(@as(usize, 1), n);
                if (v == max_prefix) try testing.expectEqual(@as(usize, 2), n);
                if (v == max_prefix + 127) try testing.expectEqual(@as(usize, 2), n);
                if (v == max_prefix + 128) try testing.expectEqual(@as(usize, 3), n);
                var pos: usize = 0;
                try testing.expectEqual(v, try decode(buf[0..n], &pos, prefix, value_max));
                try testing.expectEqual(n, pos);
                // Every truncation waits for more and leaves the position alone.
                for (0..n) |cut| {
                    pos = 0;
                    const got = decode(buf[0..cut], &pos, prefix, value_max);
                    try testing.expectError(error.Truncated, got);
                    try testing.expectEqual(@as(usize, 0), pos);
                }
            }
            // One past the largest value is refused, and the position stays.
            const n = try encode(&buf, 0, 0, prefix, value_max + 1);
            var pos: usize = 0;
            try testing.expectError(error.Overflow, decode(buf[0..n], &pos, prefix, value_max));
            try testing.expectEqual(@as(usize, 0), pos);
        }
    }
}

test "prefix integers: over-long encodings are refused, not walked" {
    // Zero-valued continuation bytes forever: refused after as many as the bound needs
    // (5 for u32, 9 for 62 bits), not a spin; one fewer is a valid (if padded) value.
    var padded: [16]u8 = undefined;
    inline for (bounds, .{ 5, 9 }) |value_max, needed| {
        padded[0] = 0x7f;
        @memset(padded[1..needed], 0x80);
        padded[needed] = 0x00;
        var pos: usize = 0;
        const just = padded[0 .. needed + 1];
        try testing.expectEqual(@as(u64, 127), try decode(just, &pos, 7, value_max));
        @memset(padded[1 .. needed + 1], 0x80);
        padded[needed + 1] = 0x00;
        pos = 0;
        const long = padded[0 .. needed + 2];
        try testing.expectError(error.Overflow, decode(long, &pos, 7, value_max));
    }
    // 2^62 in the last byte's high bit (0x40 << 56) is refused, not dropped.
    const shifted = [_]u8{ 0x7f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40 };
    var pos: usize = 0;
    try testing.expectError(error.Overflow, decode(&shifted, &pos, 7, bounds[1]));
    // Bits past u32 in the fifth continuation byte are refused under HPACK's bound.
    const wide = [_]u8{ 0x7f, 0x80, 0x80, 0x80, 0x80, 0x7f };
    pos = 0;
    try testing.expectError(error.Overflow, decode(&wide, &pos, 7, bounds[0]));
}
