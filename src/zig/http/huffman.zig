//! The Huffman code of HPACK (RFC 7541 5.2, Appendix B), which QPACK (RFC 9204 4.1.2)
//! uses unchanged: one home for both header compressions. Sans-IO, no allocation.
const std = @import("std");

/// Bytes that `encode` writes for `s`.
pub fn encodedLen(s: []const u8) usize {
    var bits: usize = 0;
    for (s) |c| bits += huffman_lengths[c];
    return (bits + 7) / 8;
}

/// Huffman-encodes `s` into `dst` (at least `encodedLen(s)` bytes), the last byte
/// padded with ones (the EOS prefix). Returns the bytes written.
pub fn encode(dst: []u8, s: []const u8) usize {
    var acc: u64 = 0;
    var nbits: u6 = 0; // pending bits in the low end of `acc`, always < 8 between symbols
    var o: usize = 0;
    for (s) |c| {
        const len: u6 = @intCast(huffman_lengths[c]);
        acc = (acc << len) | huffman_codes[c];
        nbits += len;
        while (nbits >= 8) {
            nbits -= 8;
            dst[o] = @truncate(acc >> nbits);
            o += 1;
        }
    }
    if (nbits > 0) {
        dst[o] = @truncate((acc << (8 - nbits)) | (@as(u64, 0xff) >> nbits));
        o += 1;
    }
    return o;
}

/// Decodes the Huffman string `src` into `dst`. Returns the bytes written;
/// error.NoSpace when `dst` is too small; error.Compression when `src` holds the EOS
/// symbol or its padding is longer than 7 bits or not all ones.
///
/// Symbols of up to 8 bits (the letters, digits and common punctuation) take one
/// lookup in a 256-entry table; longer ones are found by length in the canonical code.
pub fn decode(dst: []u8, src: []const u8) error{ Compression, NoSpace }!usize {
    var acc: u64 = 0;
    var nbits: u32 = 0; // unread bits in the low end of `acc`
    var i: usize = 0;
    var o: usize = 0;
    while (true) {
        while (nbits <= 56 and i < src.len) : (i += 1) {
            acc = (acc << 8) | src[i];
            nbits += 8;
        }
        if (nbits == 0) break;
        // Fewer than 30 bits left only at the end of the input: they are read zero-padded.
        var sym: u16 = undefined;
        var len: u32 = undefined;
        const fast = huffman_fast[peekBits(acc, nbits, 8)];
        if (fast.len != 0) {
            sym = fast.sym;
            len = fast.len;
        } else {
            const v = peekBits(acc, nbits, 30);
            var l: usize = 9;
            while (v >= huffman_canonical.limit[l]) l += 1;
            sym = huffman_canonical.symbols[huffman_canonical.base[l] + ((v >> @intCast(30 - l)) - huffman_canonical.first[l])];
            len = @intCast(l);
        }
        if (len > nbits) {
            // Only the input's last bits are short of a code: they must be padding,
            // at most 7 bits, all ones. (No code is all ones but EOS, so real padding
            // never decodes as a symbol.)
            const mask = (@as(u64, 1) << @intCast(nbits)) - 1;
            if (nbits > 7 or acc & mask != mask) return error.Compression;
            break;
        }
        if (sym == 256) return error.Compression;
        if (o == dst.len) return error.NoSpace;
        dst[o] = @intCast(sym);
        o += 1;
        nbits -= len;
    }
    return o;
}

/// The next `k` unread bits of `acc`, zero-padded past its last unread bit.
inline fn peekBits(acc: u64, nbits: u32, comptime k: u6) u32 {
    const mask = (@as(u64, 1) << k) - 1;
    const v = if (nbits >= k) acc >> @intCast(nbits - k) else acc << @intCast(k - nbits);
    return @intCast(v & mask);
}

const FastEntry = struct { sym: u8, len: u8 };

/// Indexed by the next 8 bits: the symbol whose code (of at most 8 bits) they begin
/// with, or len 0 when they begin a longer code.
const huffman_fast: [256]FastEntry = blk: {
    @setEvalBranchQuota(20_000);
    var t = [_]FastEntry{.{ .sym = 0, .len = 0 }} ** 256;
    for (0..256) |s| {
        const len = huffman_lengths[s];
        if (len > 8) continue;
        const first = huffman_codes[s] << (8 - len);
        for (0..(1 << (8 - len))) |k| t[first + k] = .{ .sym = s, .len = len };
    }
    break :blk t;
};

/// The Appendix B code is canonical: codes of one length are consecutive, in symbol
/// order, and each length's codes follow the shorter ones'. So a code of length L is
/// found by comparing the next 30 bits with the (left-justified) end of each length's
/// range, and its symbol is at `base[L] + code - first[L]` in `symbols`.
const Canonical = struct {
    /// One past the last code of length L, left-justified to 30 bits.
    limit: [31]u32,
    /// The first code of length L.
    first: [31]u32,
    /// Index in `symbols` of the first symbol of length L.
    base: [31]u16,
    /// Symbols ordered by code.
    symbols: [257]u16,
};

const huffman_canonical: Canonical = blk: {
    @setEvalBranchQuota(100_000);
    var c: Canonical = undefined;
    var k: usize = 0;
    var code: u32 = 0;
    for (0..31) |l| {
        c.first[l] = code;
        c.base[l] = k;
        for (0..257) |s| {
            if (huffman_lengths[s] != l) continue;
            if (huffman_codes[s] != code) @compileError("Huffman table is not canonical");
            c.symbols[k] = s;
            k += 1;
            code += 1;
        }
        c.limit[l] = if (l == 0) 0 else code << (30 - l);
        code <<= 1;
    }
    if (k != 257 or c.limit[30] != 1 << 30) @compileError("Huffman table is incomplete");
    break :blk c;
};

/// RFC 7541 Appendix B: Huffman code of each symbol (0-255, 256 = EOS), right-aligned.
const huffman_codes = [257]u32{
    0x1ff8,     0x7fffd8,  0xfffffe2,  0xfffffe3, 0xfffffe4, 0xfffffe5,  0xfffffe6,  0xfffffe7,
    0xfffffe8,  0xffffea,  0x3ffffffc, 0xfffffe9, 0xfffffea, 0x3ffffffd, 0xfffffeb,  0xfffffec,
    0xfffffed,  0xfffffee, 0xfffffef,  0xffffff0, 0xffffff1, 0xffffff2,  0x3ffffffe, 0xffffff3,
    0xffffff4,  0xffffff5, 0xffffff6,  0xffffff7, 0xffffff8, 0xffffff9,  0xffffffa,  0xffffffb,
    0x14,       0x3f8,     0x3f9,      0xffa,     0x1ff9,    0x15,       0xf8,       0x7fa,
    0x3fa,      0x3fb,     0xf9,       0x7fb,     0xfa,      0x16,       0x17,       0x18,
    0x0,        0x1,       0x2,        0x19,      0x1a,      0x1b,       0x1c,       0x1d,
    0x1e,       0x1f,      0x5c,       0xfb,      0x7ffc,    0x20,       0xffb,      0x3fc,
    0x1ffa,     0x21,      0x5d,       0x5e,      0x5f,      0x60,       0x61,       0x62,
    0x63,       0x64,      0x65,       0x66,      0x67,      0x68,       0x69,       0x6a,
    0x6b,       0x6c,      0x6d,       0x6e,      0x6f,      0x70,       0x71,       0x72,
    0xfc,       0x73,      0xfd,       0x1ffb,    0x7fff0,   0x1ffc,     0x3ffc,     0x22,
    0x7ffd,     0x3,       0x23,       0x4,       0x24,      0x5,        0x25,       0x26,
    0x27,       0x6,       0x74,       0x75,      0x28,      0x29,       0x2a,       0x7,
    0x2b,       0x76,      0x2c,       0x8,       0x9,       0x2d,       0x77,       0x78,
    0x79,       0x7a,      0x7b,       0x7ffe,    0x7fc,     0x3ffd,     0x1ffd,     0xffffffc,
    0xfffe6,    0x3fffd2,  0xfffe7,    0xfffe8,   0x3fffd3,  0x3fffd4,   0x3fffd5,   0x7fffd9,
    0x3fffd6,   0x7fffda,  0x7fffdb,   0x7fffdc,  0x7fffdd,  0x7fffde,   0xffffeb,   0x7fffdf,
    0xffffec,   0xffffed,  0x3fffd7,   0x7fffe0,  0xffffee,  0x7fffe1,   0x7fffe2,   0x7fffe3,
    0x7fffe4,   0x1fffdc,  0x3fffd8,   0x7fffe5,  0x3fffd9,  0x7fffe6,   0x7fffe7,   0xffffef,
    0x3fffda,   0x1fffdd,  0xfffe9,    0x3fffdb,  0x3fffdc,  0x7fffe8,   0x7fffe9,   0x1fffde,
    0x7fffea,   0x3fffdd,  0x3fffde,   0xfffff0,  0x1fffdf,  0x3fffdf,   0x7fffeb,   0x7fffec,
    0x1fffe0,   0x1fffe1,  0x3fffe0,   0x1fffe2,  0x7fffed,  0x3fffe1,   0x7fffee,   0x7fffef,
    0xfffea,    0x3fffe2,  0x3fffe3,   0x3fffe4,  0x7ffff0,  0x3fffe5,   0x3fffe6,   0x7ffff1,
    0x3ffffe0,  0x3ffffe1, 0xfffeb,    0x7fff1,   0x3fffe7,  0x7ffff2,   0x3fffe8,   0x1ffffec,
    0x3ffffe2,  0x3ffffe3, 0x3ffffe4,  0x7ffffde, 0x7ffffdf, 0x3ffffe5,  0xfffff1,   0x1ffffed,
    0x7fff2,    0x1fffe3,  0x3ffffe6,  0x7ffffe0, 0x7ffffe1, 0x3ffffe7,  0x7ffffe2,  0xfffff2,
    0x1fffe4,   0x1fffe5,  0x3ffffe8,  0x3ffffe9, 0xffffffd, 0x7ffffe3,  0x7ffffe4,  0x7ffffe5,
    0xfffec,    0xfffff3,  0xfffed,    0x1fffe6,  0x3fffe9,  0x1fffe7,   0x1fffe8,   0x7ffff3,
    0x3fffea,   0x3fffeb,  0x1ffffee,  0x1ffffef, 0xfffff4,  0xfffff5,   0x3ffffea,  0x7ffff4,
    0x3ffffeb,  0x7ffffe6, 0x3ffffec,  0x3ffffed, 0x7ffffe7, 0x7ffffe8,  0x7ffffe9,  0x7ffffea,
    0x7ffffeb,  0xffffffe, 0x7ffffec,  0x7ffffed, 0x7ffffee, 0x7ffffef,  0x7fffff0,  0x3ffffee,
    0x3fffffff,
};

/// RFC 7541 Appendix B: length in bits of each symbol's code.
const huffman_lengths = [257]u8{
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
    6,  10, 10, 12, 13, 6,  8,  11, 10, 10, 8,  11, 8,  6,  6,  6,
    5,  5,  5,  6,  6,  6,  6,  6,  6,  6,  7,  8,  15, 6,  12, 10,
    13, 6,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,
    7,  7,  7,  7,  7,  7,  7,  7,  8,  7,  8,  13, 19, 13, 14, 6,
    15, 5,  6,  5,  6,  5,  6,  6,  6,  5,  7,  7,  6,  6,  6,  5,
    6,  7,  6,  5,  5,  6,  7,  7,  7,  7,  7,  15, 11, 14, 13, 28,
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
    30,
};

// ---------------------------------------------------------------------------------
// Tests

const testing = std.testing;

fn unhex(buf: []u8, s: []const u8) []u8 {
    var n: usize = 0;
    var i: usize = 0;
    while (i < s.len) {
        if (s[i] == ' ') {
            i += 1;
            continue;
        }
        buf[n] = std.fmt.parseInt(u8, s[i..][0..2], 16) catch unreachable;
        n += 1;
        i += 2;
    }
    return buf[0..n];
}

test "Huffman round trip of every byte value" {
    var enc: [8]u8 = undefined;
    var dec: [8]u8 = undefined;
    for (0..256) |c| {
        const s = [1]u8{@intCast(c)};
        const n = encode(&enc, &s);
        try testing.expectEqual(encodedLen(&s), n);
        try testing.expectEqual((@as(usize, huffman_lengths[c]) + 7) / 8, n);
        const m = try decode(&dec, enc[0..n]);
        try testing.expectEqualSlices(u8, &s, dec[0..m]);
    }
    // All 256 values in one string, forwards and backwards, at every bit alignment.
    for (0..8) |shift| {
        // `shift` leading 'a's (5 bits each) move the rest across byte boundaries.
        var s: [256 + 7]u8 = undefined;
        @memset(s[0..shift], 'a');
        for (0..256) |c| s[shift + c] = if (shift % 2 == 0) @intCast(c) else @intCast(255 - c);
        const str = s[0 .. shift + 256];
        var big_enc: [1100]u8 = undefined;
        var big_dec: [300]u8 = undefined;
        const n = encode(&big_enc, str);
        try testing.expectEqual(encodedLen(str), n);
        const m = try decode(&big_dec, big_enc[0..n]);
        try testing.expectEqualSlices(u8, str, big_dec[0..m]);
        try testing.expectError(error.NoSpace, decode(big_dec[0 .. str.len - 1], big_enc[0..n]));
    }
    // RFC 7541 C.4.1's string, and the empty string.
    var buf: [32]u8 = undefined;
    var expected: [32]u8 = undefined;
    const n = encode(&buf, "www.example.com");
    try testing.expectEqualSlices(u8, unhex(&expected, "f1e3 c2e5 f23a 6ba0 ab90 f4ff"), buf[0..n]);
    try testing.expectEqual(@as(usize, 0), encode(&buf, ""));
    try testing.expectEqual(@as(usize, 0), try decode(&dec, ""));
}

test "Huffman decoding rejects EOS and bad padding" {
    var dec: [16]u8 = undefined;
    // EOS (30 ones) followed by 2 bits of padding.
    try testing.expectError(error.Compression, decode(&dec, &.{ 0xff, 0xff, 0xff, 0xff }));
    // 'a' (00011) then EOS: 5 + 30 bits, padded with ones to 40.
    try testing.expectError(error.Compression, decode(&dec, &.{ 0x1f, 0xff, 0xff, 0xff, 0xff }));
    // 'a' padded with zeros instead of ones.
    try testing.expectError(error.Compression, decode(&dec, &.{0x18}));
    // 'a' padded with ones, one of them zero.
    try testing.expectError(error.Compression, decode(&dec, &.{0x1d}));
    // 'a' followed by 11 bits of ones: padding longer than 7 bits.
    try testing.expectError(error.Compression, decode(&dec, &.{ 0x1f, 0xff }));
    // A byte of ones alone is 8 bits of padding.
    try testing.expectError(error.Compression, decode(&dec, &.{0xff}));
    // Properly padded: 'a' + 111.
    try testing.expectEqual(@as(usize, 1), try decode(&dec, &.{0x1f}));
    try testing.expectEqual(@as(u8, 'a'), dec[0]);
}
