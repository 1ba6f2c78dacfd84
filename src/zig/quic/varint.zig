//! QUIC's variable-length integers (RFC 9000 16): the two high bits of the first byte give
//! the length (1, 2, 4 or 8 bytes), the other 6, 14, 30 or 62 bits the value, big-endian.
//! Sans-IO: a reader over a byte slice and writers into a caller's buffer; a truncated
//! integer is an error, never a read past the end.
const std = @import("std");
const assert = std.debug.assert;

/// The largest value a variable-length integer carries: 2^62 - 1.
pub const max: u64 = (1 << 62) - 1;

pub const Error = error{Truncated};

/// How many bytes the shortest encoding of `value` takes.
pub fn len(value: u64) usize {
    assert(value <= max);
    if (value < (1 << 6)) return 1;
    if (value < (1 << 14)) return 2;
    if (value < (1 << 30)) return 4;
    return 8;
}

/// The length of the integer that starts with `first`, from its two high bits.
pub fn lenFromFirst(first: u8) usize {
    return @as(usize, 1) << @intCast(first >> 6);
}

/// Decodes the integer at the start of `bytes`; returns it and how many bytes it took.
pub fn decode(bytes: []const u8) Error!struct { value: u64, len: usize } {
    if (bytes.len == 0) return error.Truncated;
    const n = lenFromFirst(bytes[0]);
    if (bytes.len < n) return error.Truncated;
    var value: u64 = bytes[0] & 0x3f;
    for (bytes[1..n]) |b| value = (value << 8) | b;
    return .{ .value = value, .len = n };
}

/// Writes `value` in exactly `n` bytes (1, 2, 4 or 8; at least `len(value)`): a writer that
/// reserved room for a length before knowing it fills it in afterwards this way.
pub fn encodeWithLen(out: []u8, value: u64, n: usize) void {
    assert(n == 1 or n == 2 or n == 4 or n == 8);
    assert(n >= len(value));
    assert(out.len >= n);
    const prefix: u8 = switch (n) {
        1 => 0x00,
        2 => 0x40,
        4 => 0x80,
        else => 0xc0,
    };
    var v = value;
    var i = n;
    while (i > 0) {
        i -= 1;
        out[i] = @truncate(v);
        v >>= 8;
    }
    out[0] |= prefix;
}

/// Writes the shortest encoding of `value` at the start of `out`; returns its length.
pub fn encode(out: []u8, value: u64) error{NoSpace}!usize {
    const n = len(value);
    if (out.len < n) return error.NoSpace;
    encodeWithLen(out, value, n);
    return n;
}

/// A cursor over a byte slice, for the parsers: every read checks the bytes left.
pub const Reader = struct {
    bytes: []const u8,
    pos: usize = 0,

    pub fn rest(r: *const Reader) []const u8 {
        return r.bytes[r.pos..];
    }

    pub fn done(r: *const Reader) bool {
        return r.pos == r.bytes.len;
    }

    pub fn varint(r: *Reader) Error!u64 {
        const d = try decode(r.bytes[r.pos..]);
        r.pos += d.len;
        return d.value;
    }

    pub fn byte(r: *Reader) Error!u8 {
        if (r.pos >= r.bytes.len) return error.Truncated;
        r.pos += 1;
        return r.bytes[r.pos - 1];
    }

    /// The next `n` bytes, as a slice of the input (no copy).
    pub fn take(r: *Reader, n: u64) Error![]const u8 {
        if (n > r.bytes.len - r.pos) return error.Truncated;
        const start = r.pos;
        r.pos += @intCast(n);
        return r.bytes[start..r.pos];
    }

    pub fn int(r: *Reader, comptime T: type) Error!T {
        const b = try r.take(@sizeOf(T));
        return std.mem.readInt(T, b[0..@sizeOf(T)], .big);
    }
};

/// A cursor writing into a caller's buffer: every write checks the room left and returns
/// error.NoSpace rather than overflow.
pub const Writer = struct {
    buf: []u8,
    pos: usize = 0,

    pub fn written(w: *const Writer) []u8 {
        return w.buf[0..w.pos];
    }

    pub fn room(w: *const Writer) usize {
        return w.buf.len - w.pos;
    }

    pub fn varint(w: *Writer, value: u64) error{NoSpace}!void {
        w.pos += try encode(w.buf[w.pos..], value);
    }

    pub fn byte(w: *Writer, b: u8) error{NoSpace}!void {
        if (w.room() < 1) return error.NoSpace;
        w.buf[w.pos] = b;
        w.pos += 1;
    }

    pub fn bytes(w: *Writer, b: []const u8) error{NoSpace}!void {
        if (w.room() < b.len) return error.NoSpace;
        @memcpy(w.buf[w.pos..][0..b.len], b);
        w.pos += b.len;
    }

    pub fn int(w: *Writer, comptime T: type, value: T) error{NoSpace}!void {
        if (w.room() < @sizeOf(T)) return error.NoSpace;
        std.mem.writeInt(T, w.buf[w.pos..][0..@sizeOf(T)], value, .big);
        w.pos += @sizeOf(T);
    }
};

const testing = std.testing;

test "RFC 9000 A.1: the sample encodings decode, and encode back the same" {
    const cases = [_]struct { hex: []const u8, value: u64 }{
        .{ .hex = "c2197c5eff14e88c", .value = 151288809941952652 },
        .{ .hex = "9d7f3e7d", .value = 494878333 },
        .{ .hex = "7bbd", .value = 15293 },
        .{ .hex = "25", .value = 37 },
    };
    for (cases) |c| {
        var raw: [8]u8 = undefined;
        const bytes = try std.fmt.hexToBytes(&raw, c.hex);
        const d = try decode(bytes);
        try testing.expectEqual(c.value, d.value);
        try testing.expectEqual(bytes.len, d.len);
        var out: [8]u8 = undefined;
        try testing.expectEqualSlices(u8, bytes, out[0..try encode(&out, c.value)]);
    }
    // 37 in two bytes (a non-minimal encoding) still reads as 37.
    try testing.expectEqual(@as(u64, 37), (try decode(&.{ 0x40, 0x25 })).value);
}

test "varint boundaries: each length's largest value, the maximum, truncation" {
    const edges = [_]struct { value: u64, n: usize }{
        .{ .value = 0, .n = 1 },       .{ .value = 63, .n = 1 },
        .{ .value = 64, .n = 2 },      .{ .value = 16383, .n = 2 },
        .{ .value = 16384, .n = 4 },   .{ .value = (1 << 30) - 1, .n = 4 },
        .{ .value = 1 << 30, .n = 8 }, .{ .value = max, .n = 8 },
    };
    for (edges) |e| {
        try testing.expectEqual(e.n, len(e.value));
        var out: [8]u8 = undefined;
        try testing.expectEqual(e.n, try encode(&out, e.value));
        try testing.expectEqual(e.value, (try decode(out[0..e.n])).value);
        try testing.expectError(error.Truncated, decode(out[0 .. e.n - 1]));
        try testing.expectError(error.NoSpace, encode(out[0 .. e.n - 1], e.value));
    }
    try testing.expectEqual(max, (try decode(&([_]u8{0xff} ** 8))).value);
    try testing.expectError(error.Truncated, decode(&.{}));
    var four: [4]u8 = undefined;
    encodeWithLen(&four, 5, 4);
    try testing.expectEqualSlices(u8, &.{ 0x80, 0, 0, 5 }, &four);
}

test "Reader and Writer stop at the end of their slices" {
    var buf: [5]u8 = undefined;
    var w: Writer = .{ .buf = &buf };
    try w.varint(300);
    try w.int(u16, 0xabcd);
    try testing.expectError(error.NoSpace, w.int(u16, 1));
    try w.byte(7);
    try testing.expectError(error.NoSpace, w.bytes("x"));
    var r: Reader = .{ .bytes = w.written() };
    try testing.expectEqual(@as(u64, 300), try r.varint());
    try testing.expectEqual(@as(u16, 0xabcd), try r.int(u16));
    try testing.expectEqual(@as(u8, 7), try r.byte());
    try testing.expect(r.done());
    try testing.expectError(error.Truncated, r.byte());
    try testing.expectError(error.Truncated, r.take(1));
    try testing.expectError(error.Truncated, r.varint());
}
