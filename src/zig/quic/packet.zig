//! QUIC v1 packet headers (RFC 9000 17), read without keys, and the packets a server builds
//! before it has any: Version Negotiation (RFC 9000 6, 17.2.1) and Retry (17.2.5, with the
//! integrity tag of RFC 9001 5.8). Also packet numbers: the length a sender picks and the
//! full number a receiver rebuilds from a truncated one (RFC 9000 17.1, Appendix A.2, A.3).
//!
//! Sans-IO: `parse` reads the first packet of a datagram and returns slices of it and the
//! offsets `protection.zig` needs (where the packet number starts, where the packet ends and
//! the next coalesced one begins). Nothing here is protected or unprotected.
const std = @import("std");
const assert = std.debug.assert;
const varint = @import("varint.zig");
const Aes128Gcm = std.crypto.aead.aes_gcm.Aes128Gcm;

pub const version_1: u32 = 0x0000_0001;
/// Version 0 marks a Version Negotiation packet (RFC 9000 17.2.1).
pub const version_negotiation: u32 = 0;
/// The longest connection ID QUIC v1 allows (RFC 9000 17.2).
pub const cid_len_max = 20;
/// Other versions may carry connection IDs of up to 255 bytes (RFC 8999 5.1): a server
/// reads them to echo them in Version Negotiation.
pub const cid_len_max_any_version = 255;
/// A datagram carrying a client's Initial is at least this long (RFC 9000 14.1), and so is
/// one of the server's that carries an ack-eliciting Initial (it pads up to it); Version
/// Negotiation is never sent in answer to a shorter one.
pub const initial_datagram_len_min = 1200;
/// The Retry integrity tag's length (RFC 9001 5.8).
pub const retry_tag_len = 16;
/// A Retry packet this code builds or checks is at most this long: its integrity tag is
/// computed over a copy of it on the stack.
pub const retry_len_max = 1500;

/// Bits of the first byte (RFC 9000 17.2, 17.3).
pub const form_bit: u8 = 0x80;
pub const fixed_bit: u8 = 0x40;
pub const spin_bit: u8 = 0x20;
pub const key_phase_bit: u8 = 0x04;

/// The four long header packet types of v1 (RFC 9000 Table 5), the two high bits of the
/// type field.
pub const LongType = enum(u2) { initial = 0, zero_rtt = 1, handshake = 2, retry = 3 };

/// What a datagram's first packet is, as far as it can be known without keys.
pub const Kind = enum {
    initial,
    zero_rtt,
    handshake,
    retry,
    /// A short header (1-RTT) packet.
    one_rtt,
    version_negotiation,
    /// A long header of a version this code does not speak: only the version-invariant
    /// fields (RFC 8999 5.1) were read.
    unsupported_version,
};

pub const ParseError = error{
    /// The datagram ends inside the header, or the Length field runs past its end.
    Truncated,
    /// The fixed bit is 0 in a v1 packet (RFC 9000 17.2, 17.3): not QUIC, dropped.
    FixedBitZero,
    /// A v1 connection ID longer than 20 bytes (RFC 9000 17.2: dropped).
    CidTooLong,
};

/// The first packet of a datagram, its fields sliced from the datagram (no copies).
pub const Header = struct {
    kind: Kind,
    /// The first byte as received (still header-protected in the low bits).
    first: u8,
    /// 0 for short headers.
    version: u32 = 0,
    dcid: []const u8,
    /// Empty for short headers.
    scid: []const u8 = &.{},
    /// An Initial's token or a Retry's; empty otherwise.
    token: []const u8 = &.{},
    /// Where the (protected) packet number starts; 0 for Retry, VN and unknown versions.
    pn_offset: usize = 0,
    /// The end of this packet in the datagram: the next coalesced packet starts here.
    len: usize,

    /// Whether the packet carries a protected payload (and a packet number).
    pub fn isProtected(h: *const Header) bool {
        return switch (h.kind) {
            .initial, .zero_rtt, .handshake, .one_rtt => true,
            else => false,
        };
    }
};

/// Reads the header of the first packet of `datagram`. A short header's destination
/// connection ID has no length on the wire: it is the server's own, `short_dcid_len` bytes.
pub fn parse(datagram: []const u8, short_dcid_len: usize) ParseError!Header {
    assert(short_dcid_len <= cid_len_max);
    if (datagram.len == 0) return error.Truncated;
    const first = datagram[0];
    if (first & form_bit == 0) {
        if (first & fixed_bit == 0) return error.FixedBitZero;
        if (datagram.len < 1 + short_dcid_len) return error.Truncated;
        return .{
            .kind = .one_rtt,
            .first = first,
            .dcid = datagram[1..][0..short_dcid_len],
            .pn_offset = 1 + short_dcid_len,
            .len = datagram.len,
        };
    }
    return parseLong(datagram);
}

fn parseLong(datagram: []const u8) ParseError!Header {
    var r: varint.Reader = .{ .bytes = datagram };
    const first = r.byte() catch unreachable;
    const version = try r.int(u32);
    // A v1 length over 20 is refused as soon as it is read, before it misplaces what follows.
    const cid_max: usize = if (version == version_1) cid_len_max else cid_len_max_any_version;
    const dcid_len = try r.byte();
    if (dcid_len > cid_max) return error.CidTooLong;
    const dcid = try r.take(dcid_len);
    const scid_len = try r.byte();
    if (scid_len > cid_max) return error.CidTooLong;
    const scid = try r.take(scid_len);
    var h: Header = .{ .kind = .unsupported_version, .first = first, .version = version, .dcid = dcid, .scid = scid, .len = datagram.len };
    if (version == version_negotiation) {
        h.kind = .version_negotiation;
        return h;
    }
    if (version != version_1) return h;
    if (first & fixed_bit == 0) return error.FixedBitZero;
    const long_type: LongType = @enumFromInt(@as(u2, @truncate(first >> 4)));
    switch (long_type) {
        .retry => {
            if (r.rest().len < retry_tag_len) return error.Truncated;
            h.kind = .retry;
            h.token = r.rest()[0 .. r.rest().len - retry_tag_len];
            return h;
        },
        .initial => {
            h.kind = .initial;
            h.token = try r.take(try r.varint());
        },
        .zero_rtt => h.kind = .zero_rtt,
        .handshake => h.kind = .handshake,
    }
    const length = try r.varint();
    h.pn_offset = r.pos;
    if (length > r.rest().len) return error.Truncated;
    h.len = r.pos + @as(usize, @intCast(length));
    return h;
}

// ---- building headers -------------------------------------------------------------------

pub const LongHeader = struct {
    long_type: LongType,
    version: u32 = version_1,
    dcid: []const u8,
    scid: []const u8,
    /// Only an Initial carries a token (a server's Initials carry an empty one).
    token: []const u8 = &.{},
    pn: u64,
    /// 1 to 4 bytes (see `pnLen`).
    pn_len: usize,
};

/// Where a built header put its packet number, and its length.
pub const Built = struct { pn_offset: usize, header_len: usize };

/// Writes an Initial, 0-RTT or Handshake header whose Length covers the packet number,
/// `payload_len` bytes of frames and the AEAD tag: the caller writes the frames at
/// `header_len` and leaves `tag_len` bytes for `protection.protect`.
pub fn writeLongHeader(out: []u8, h: LongHeader, payload_len: usize, tag_len: usize) error{NoSpace}!Built {
    assert(h.long_type != .retry);
    assert(h.pn_len >= 1 and h.pn_len <= 4);
    assert(h.dcid.len <= cid_len_max and h.scid.len <= cid_len_max);
    assert(h.token.len == 0 or h.long_type == .initial);
    var w: varint.Writer = .{ .buf = out };
    try w.byte(form_bit | fixed_bit | (@as(u8, @intFromEnum(h.long_type)) << 4) | @as(u8, @intCast(h.pn_len - 1)));
    try w.int(u32, h.version);
    try w.byte(@intCast(h.dcid.len));
    try w.bytes(h.dcid);
    try w.byte(@intCast(h.scid.len));
    try w.bytes(h.scid);
    if (h.long_type == .initial) {
        try w.varint(h.token.len);
        try w.bytes(h.token);
    }
    try w.varint(h.pn_len + payload_len + tag_len);
    const pn_offset = w.pos;
    try writePn(&w, h.pn, h.pn_len);
    return .{ .pn_offset = pn_offset, .header_len = w.pos };
}

/// Writes a 1-RTT header: the peer's connection ID, the spin and key phase bits, the
/// truncated packet number.
pub fn writeShortHeader(out: []u8, dcid: []const u8, pn: u64, pn_len: usize, key_phase: u1, spin: bool) error{NoSpace}!Built {
    assert(pn_len >= 1 and pn_len <= 4);
    assert(dcid.len <= cid_len_max);
    var w: varint.Writer = .{ .buf = out };
    var first: u8 = fixed_bit | @as(u8, @intCast(pn_len - 1));
    if (key_phase == 1) first |= key_phase_bit;
    if (spin) first |= spin_bit;
    try w.byte(first);
    try w.bytes(dcid);
    const pn_offset = w.pos;
    try writePn(&w, pn, pn_len);
    return .{ .pn_offset = pn_offset, .header_len = w.pos };
}

fn writePn(w: *varint.Writer, pn: u64, pn_len: usize) error{NoSpace}!void {
    var i = pn_len;
    while (i > 0) {
        i -= 1;
        try w.byte(@truncate(pn >> @intCast(8 * i)));
    }
}

// ---- packet numbers (RFC 9000 17.1, Appendix A) -----------------------------------------

/// The largest packet number (RFC 9000 12.3).
pub const pn_max: u64 = varint.max;

/// How many bytes to send `full_pn` in: enough for twice the packets not yet acknowledged
/// (RFC 9000 17.1, Appendix A.2). `largest_acked` is null before any acknowledgment.
pub fn pnLen(full_pn: u64, largest_acked: ?u64) usize {
    assert(full_pn <= pn_max);
    const unacked: u64 = if (largest_acked) |l| blk: {
        assert(l < full_pn);
        break :blk full_pn - l;
    } else full_pn + 1;
    // Bits for 2 * unacked (the receiver's window is half the range).
    const bits = 64 - @clz(unacked) + 1;
    return @min(4, (bits + 7) / 8);
}

/// Rebuilds a full packet number from its `pn_len`-byte truncation, the one closest to the
/// next expected (RFC 9000 Appendix A.3). `largest` is the largest received so far, null
/// before any.
pub fn pnDecode(largest: ?u64, truncated: u64, pn_len: usize) u64 {
    assert(pn_len >= 1 and pn_len <= 4);
    assert(largest == null or largest.? <= pn_max);
    const expected: u64 = if (largest) |l| l + 1 else 0;
    const win: u64 = @as(u64, 1) << @intCast(pn_len * 8);
    assert(truncated < win);
    const hwin = win / 2;
    const candidate = (expected & ~(win - 1)) | truncated;
    if (expected >= hwin and candidate <= expected - hwin and candidate < (@as(u64, 1) << 62) - win)
        return candidate + win;
    // Past 2^62 - 1 (only after the peer used the top number) the lower reading is taken:
    // no packet number above the space reaches the AEAD nonce or the ACK ranges.
    if ((candidate > expected + hwin or candidate > pn_max) and candidate >= win)
        return candidate - win;
    return candidate;
}

// ---- Version Negotiation (RFC 9000 6, 17.2.1) -------------------------------------------

/// Whether a datagram whose first packet is `h` earns a Version Negotiation packet: a long
/// header of a version not spoken, never in answer to Version Negotiation, and not when the
/// datagram is too short to be a client's first (RFC 9000 6.1, 14.1): that keeps the
/// answer from amplifying.
pub fn wantsVersionNegotiation(h: *const Header, datagram_len: usize) bool {
    return h.kind == .unsupported_version and datagram_len >= initial_datagram_len_min;
}

/// Writes a Version Negotiation packet answering `h` (whose connection IDs it swaps back),
/// listing `versions`. `unused` fills the 7 bits after the form bit (any value, RFC 9000
/// 17.2.1). Returns its length.
pub fn writeVersionNegotiation(out: []u8, h: *const Header, versions: []const u32, unused: u7) error{NoSpace}!usize {
    assert(h.kind == .unsupported_version);
    assert(versions.len > 0);
    var w: varint.Writer = .{ .buf = out };
    try w.byte(form_bit | @as(u8, unused));
    try w.int(u32, version_negotiation);
    try w.byte(@intCast(h.scid.len));
    try w.bytes(h.scid);
    try w.byte(@intCast(h.dcid.len));
    try w.bytes(h.dcid);
    for (versions) |v| try w.int(u32, v);
    return w.pos;
}

/// The versions a Version Negotiation packet lists (after `parse` gave `.version_negotiation`).
pub fn negotiatedVersions(datagram: []const u8, h: *const Header) VersionIterator {
    assert(h.kind == .version_negotiation);
    const start = 7 + h.dcid.len + h.scid.len;
    return .{ .bytes = datagram[start..] };
}

pub const VersionIterator = struct {
    bytes: []const u8,
    pub fn next(it: *VersionIterator) ?u32 {
        if (it.bytes.len < 4) return null;
        defer it.bytes = it.bytes[4..];
        return std.mem.readInt(u32, it.bytes[0..4], .big);
    }
};

// ---- Retry (RFC 9000 17.2.5, RFC 9001 5.8) ----------------------------------------------

const retry_key_v1 = [16]u8{ 0xbe, 0x0c, 0x69, 0x0b, 0x9f, 0x66, 0x57, 0x5a, 0x1d, 0x76, 0x6b, 0x54, 0xe3, 0x68, 0xc8, 0x4e };
const retry_nonce_v1 = [12]u8{ 0x46, 0x15, 0x99, 0xd3, 0x5d, 0x63, 0x2b, 0xf2, 0x23, 0x98, 0x25, 0xbb };

/// The integrity tag of a Retry packet (`retry` without its tag) sent in answer to an
/// Initial whose destination connection ID was `odcid`: AES-128-GCM over nothing, with the
/// Retry pseudo-packet (ODCID length, ODCID, the Retry packet) as associated data.
pub fn retryTag(odcid: []const u8, retry: []const u8) [retry_tag_len]u8 {
    assert(odcid.len <= cid_len_max);
    assert(retry.len <= retry_len_max);
    var pseudo: [1 + cid_len_max + retry_len_max]u8 = undefined;
    pseudo[0] = @intCast(odcid.len);
    @memcpy(pseudo[1..][0..odcid.len], odcid);
    @memcpy(pseudo[1 + odcid.len ..][0..retry.len], retry);
    var tag: [retry_tag_len]u8 = undefined;
    Aes128Gcm.encrypt(&.{}, &tag, &.{}, pseudo[0 .. 1 + odcid.len + retry.len], retry_nonce_v1, retry_key_v1);
    return tag;
}

/// Writes a Retry packet: to the client's `dcid` (its source connection ID), from the
/// server's new `scid`, carrying `token`, tagged for the client's original `odcid`.
/// `unused` fills the 4 low bits of the first byte. Returns its length.
pub fn writeRetry(out: []u8, dcid: []const u8, scid: []const u8, token: []const u8, odcid: []const u8, unused: u4) error{NoSpace}!usize {
    assert(dcid.len <= cid_len_max and scid.len <= cid_len_max and odcid.len <= cid_len_max);
    assert(token.len > 0); // RFC 9000 17.2.5.1: a client discards a Retry with an empty token
    var w: varint.Writer = .{ .buf = out[0..@min(out.len, retry_len_max)] };
    try w.byte(form_bit | fixed_bit | (@as(u8, @intFromEnum(LongType.retry)) << 4) | @as(u8, unused));
    try w.int(u32, version_1);
    try w.byte(@intCast(dcid.len));
    try w.bytes(dcid);
    try w.byte(@intCast(scid.len));
    try w.bytes(scid);
    try w.bytes(token);
    if (w.room() < retry_tag_len) return error.NoSpace;
    const tag = retryTag(odcid, w.written());
    try w.bytes(&tag);
    return w.pos;
}

/// Whether `retry` (a whole Retry packet, as `parse` found it) carries the right integrity
/// tag for `odcid`.
pub fn retryTagValid(odcid: []const u8, retry: []const u8) bool {
    if (retry.len < retry_tag_len or retry.len > retry_len_max or odcid.len > cid_len_max) return false;
    const body = retry[0 .. retry.len - retry_tag_len];
    const expected = retryTag(odcid, body);
    return std.crypto.timing_safe.eql([retry_tag_len]u8, expected, retry[body.len..][0..retry_tag_len].*);
}

/// Whether a datagram carrying a client's Initial is long enough (RFC 9000 14.1): a server
/// drops a shorter one.
pub fn initialDatagramLongEnough(datagram_len: usize) bool {
    return datagram_len >= initial_datagram_len_min;
}

const testing = std.testing;

fn unhex(comptime s: []const u8) [s.len / 2]u8 {
    var out: [s.len / 2]u8 = undefined;
    _ = std.fmt.hexToBytes(&out, s) catch unreachable;
    return out;
}

test "RFC 9000 A.2 and A.3: packet number length and decoding, the worked examples" {
    // A.2: with 0xabe8b3 acknowledged, 0xac5c02 needs 16 bits and 0xace8fe 24.
    try testing.expectEqual(@as(usize, 2), pnLen(0xac5c02, 0xabe8b3));
    try testing.expectEqual(@as(usize, 3), pnLen(0xace8fe, 0xabe8b3));
    // A.3: largest 0xa82f30ea, 16 bits 0x9b32 -> 0xa82f9b32.
    try testing.expectEqual(@as(u64, 0xa82f9b32), pnDecode(0xa82f30ea, 0x9b32, 2));
    // RFC 9001 A.5: largest 654360563, 3 bytes 0x00bff4 -> 654360564.
    try testing.expectEqual(@as(u64, 654360564), pnDecode(654360563, 0xbff4, 3));
}

test "packet numbers: the first packet, wrap-around both ways, the top of the space" {
    try testing.expectEqual(@as(usize, 1), pnLen(0, null));
    try testing.expectEqual(@as(usize, 1), pnLen(63, null));
    try testing.expectEqual(@as(usize, 2), pnLen(127, null));
    try testing.expectEqual(@as(usize, 4), pnLen(1 << 40, 0));
    try testing.expectEqual(@as(u64, 0), pnDecode(null, 0, 1));
    try testing.expectEqual(@as(u64, 0x100), pnDecode(0xff, 0x00, 1)); // forward past a wrap
    try testing.expectEqual(@as(u64, 0xff), pnDecode(0x100, 0xff, 1)); // back across one
    try testing.expectEqual(@as(u64, 5), pnDecode(3, 5, 1)); // small values never go negative
    // Near 2^62 the candidate is not pushed past the space.
    const top = pn_max - 1;
    try testing.expectEqual(top + 1, pnDecode(top, @truncate((top + 1) & 0xff), 1));
    // Every number in the window around the next expected one comes back.
    var pn: u64 = 1000;
    while (pn < 1000 + 300) : (pn += 1) {
        const largest = pn - 1;
        const n = pnLen(pn, largest - 20);
        try testing.expectEqual(pn, pnDecode(largest, pn & ((@as(u64, 1) << @intCast(8 * n)) - 1), n));
    }
}

test "parse: an Initial, the coalesced packet after it, and what is refused" {
    var buf: [64]u8 = undefined;
    const built = try writeLongHeader(&buf, .{ .long_type = .initial, .dcid = "abcdefgh", .scid = "xy", .token = "tk", .pn = 2, .pn_len = 2 }, 10, 16);
    const end = built.header_len + 10 + 16;
    @memset(buf[built.header_len..end], 0);
    buf[end] = 0x41; // the start of a short header after it
    const h = try parse(buf[0 .. end + 1], 0);
    try testing.expectEqual(Kind.initial, h.kind);
    try testing.expectEqualStrings("abcdefgh", h.dcid);
    try testing.expectEqualStrings("xy", h.scid);
    try testing.expectEqualStrings("tk", h.token);
    try testing.expectEqual(built.pn_offset, h.pn_offset);
    try testing.expectEqual(end, h.len);
    const next = try parse(buf[h.len .. end + 1], 0);
    try testing.expectEqual(Kind.one_rtt, next.kind);
    // Every truncation of the header or of its Length is refused.
    for (0..end) |cut| try testing.expectError(error.Truncated, parse(buf[0..cut], 0));
    buf[0] &= ~fixed_bit;
    try testing.expectError(error.FixedBitZero, parse(buf[0..end], 0));
    try testing.expectError(error.FixedBitZero, parse(&.{0x01}, 0));
}

test "parse: connection ID lengths, short headers, other versions" {
    var buf: [128]u8 = undefined;
    const twenty = "0123456789abcdefghij";
    const ok = try writeLongHeader(&buf, .{ .long_type = .handshake, .dcid = twenty, .scid = twenty, .pn = 0, .pn_len = 1 }, 3, 16);
    try testing.expectEqual(Kind.handshake, (try parse(buf[0 .. ok.header_len + 19], 0)).kind);
    buf[5] = 21; // a DCID of 21 bytes in v1
    try testing.expectError(error.CidTooLong, parse(buf[0 .. ok.header_len + 19], 0));
    // An unknown version with a 21-byte CID is read (its invariants), for Version Negotiation.
    std.mem.writeInt(u32, buf[1..5], 0x1a2a3a4a, .big);
    const other = try parse(buf[0..100], 0);
    try testing.expectEqual(Kind.unsupported_version, other.kind);
    try testing.expectEqual(@as(usize, 21), other.dcid.len);
    try testing.expect(!wantsVersionNegotiation(&other, 100));
    try testing.expect(wantsVersionNegotiation(&other, 1200));
    // A short header needs the whole server CID.
    const short = [_]u8{ 0x40, 1, 2, 3, 4, 5 };
    try testing.expectEqualSlices(u8, short[1..5], (try parse(&short, 4)).dcid);
    try testing.expectEqual(@as(usize, 5), (try parse(&short, 4)).pn_offset);
    try testing.expectError(error.Truncated, parse(short[0..4], 4));
}

test "Version Negotiation: built for an unknown version, never in answer to one" {
    var dgram = [_]u8{0} ** 1200;
    const hdr = [_]u8{ 0xc0, 0xff, 0, 0, 0x1d, 3, 'd', 'c', 'i', 2, 's', 'c' };
    @memcpy(dgram[0..hdr.len], &hdr);
    const h = try parse(&dgram, 0);
    try testing.expect(wantsVersionNegotiation(&h, dgram.len));
    var out: [64]u8 = undefined;
    const n = try writeVersionNegotiation(&out, &h, &.{ version_1, 0x0a0a0a0a }, 0x2a);
    try testing.expectEqualSlices(u8, &unhex("aa00000000" ++ "02" ++ "7363" ++ "03" ++ "646369" ++ "00000001" ++ "0a0a0a0a"), out[0..n]);
    const vn = try parse(out[0..n], 0);
    try testing.expectEqual(Kind.version_negotiation, vn.kind);
    try testing.expect(!wantsVersionNegotiation(&vn, 1200));
    var it = negotiatedVersions(out[0..n], &vn);
    try testing.expectEqual(@as(?u32, version_1), it.next());
    try testing.expectEqual(@as(?u32, 0x0a0a0a0a), it.next());
    try testing.expectEqual(@as(?u32, null), it.next());
    try testing.expectError(error.NoSpace, writeVersionNegotiation(out[0 .. n - 1], &h, &.{ version_1, 0x0a0a0a0a }, 0));
    try testing.expect(!initialDatagramLongEnough(1199));
    try testing.expect(initialDatagramLongEnough(1200));
}

test "RFC 9001 A.4: the Retry packet, byte for byte, and its tag checked" {
    const expected = unhex("ff000000010008f067a5502a4262b5746f6b656e04a265ba2eff4d829058fb3f0f2496ba");
    const odcid = unhex("8394c8f03e515708");
    var out: [64]u8 = undefined;
    const n = try writeRetry(&out, "", &unhex("f067a5502a4262b5"), "token", &odcid, 0xf);
    try testing.expectEqualSlices(u8, &expected, out[0..n]);
    try testing.expect(retryTagValid(&odcid, &expected));
    const h = try parse(&expected, 0);
    try testing.expectEqual(Kind.retry, h.kind);
    try testing.expectEqualStrings("token", h.token);
    // Another ODCID, or a changed byte, fails the check.
    try testing.expect(!retryTagValid(&unhex("8394c8f03e515709"), &expected));
    var bad = expected;
    bad[20] ^= 1;
    try testing.expect(!retryTagValid(&odcid, &bad));
    try testing.expect(!retryTagValid(&odcid, expected[0..15]));
    try testing.expectError(error.NoSpace, writeRetry(out[0 .. n - 1], "", &unhex("f067a5502a4262b5"), "token", &odcid, 0xf));
}
