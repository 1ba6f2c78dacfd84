//! Retry tokens (RFC 9000 8.1.2): what a server puts in a Retry so that, without keeping
//! anything, it can tell from the client's next Initial that the client received the Retry
//! at the address it claims, and learn the original destination connection ID that the
//! transport parameters must echo (RFC 9000 7.3).
//!
//! A token is an AEAD record, ChaCha20-Poly1305 (`suite.zig`) under a 32-byte key that
//! every worker shares (the master draws it), with a random 96-bit nonce carried in clear:
//!
//!     marker (1) | nonce (12) | sealed: issued_us (8), odcid length (1), odcid (20, padded) | tag (16)
//!
//! The associated data binds the token to the client's address (family, IP and port) and to
//! the destination connection ID of the Initial that must carry it (the Retry's source ID):
//! a token copied to another address or another ID fails to open. A token is good for
//! `lifetime_us` after it was issued. Sans-IO: the time and the nonce come from the caller.
//!
//! Rotation (`sealRotating`, `openRotating`, what the endpoint uses): the key shared by the
//! workers is never used to seal. Time is cut into periods of `rotation_period_us` (5
//! minutes, counted on CLOCK_MONOTONIC, which every worker of a host reads alike), and
//! each period's key is HKDF-Expand(shared key, "zigcorn retry key" | period number): a
//! token is sealed with the current period's key and opens with it or the previous
//! period's, so a token issued just before a rotation still validates after it (its
//! 10-second lifetime ends long before a second rotation). Each period key seals at most
//! 5 minutes of Retries (random 96-bit nonces stay far from colliding), is derived when
//! used and zeroed right after; a period key that leaked is good for 10 minutes at most.
const std = @import("std");
const assert = std.debug.assert;
const suite = @import("suite.zig");
const packet = @import("packet.zig");
const Cid = @import("cid_table.zig").Cid;
const Peer = @import("../transport/peer.zig").Peer;

pub const key_len = 32;
pub const nonce_len = suite.iv_len;
/// Marks a Retry token among the tokens a client may send (a NEW_TOKEN one would have its own).
pub const marker: u8 = 0x52;
const sealed_len = 8 + 1 + packet.cid_len_max;
pub const len = 1 + nonce_len + sealed_len + suite.tag_len;
/// How long a token stays good by default: a Retry is answered within a round trip.
pub const lifetime_us_default: u64 = 10 * std.time.us_per_s;

pub const Key = [key_len]u8;

/// How long one period key seals tokens (see the file's comment).
pub const rotation_period_us: u64 = 5 * 60 * std.time.us_per_s;

/// The key of period `period` (now_us / rotation_period_us) under the shared key.
pub fn periodKey(shared: *const Key, period: u64) Key {
    var info: [17 + 8]u8 = undefined;
    info[0..17].* = "zigcorn retry key".*;
    std.mem.writeInt(u64, info[17..25], period, .big);
    var out: Key = undefined;
    std.crypto.kdf.hkdf.HkdfSha256.expand(&out, &info, shared.*);
    return out;
}

/// `seal` with the key of `now_us`'s period.
pub fn sealRotating(
    out: *[len]u8,
    shared: *const Key,
    nonce: [nonce_len]u8,
    peer: *const Peer,
    retry_scid: []const u8,
    odcid: []const u8,
    now_us: u64,
) void {
    var key = periodKey(shared, now_us / rotation_period_us);
    defer std.crypto.secureZero(u8, &key);
    seal(out, &key, nonce, peer, retry_scid, odcid, now_us);
}

/// `open` with the key of `now_us`'s period, then the previous period's: a token outlives
/// one rotation, not two.
pub fn openRotating(
    token: []const u8,
    shared: *const Key,
    peer: *const Peer,
    dcid: []const u8,
    now_us: u64,
    lifetime_us: u64,
) OpenError!Cid {
    const period = now_us / rotation_period_us;
    var key = periodKey(shared, period);
    defer std.crypto.secureZero(u8, &key);
    if (open(token, &key, peer, dcid, now_us, lifetime_us)) |odcid| return odcid else |e| {
        if (e == error.Expired or period == 0) return e;
    }
    key = periodKey(shared, period - 1);
    return open(token, &key, peer, dcid, now_us, lifetime_us);
}

pub fn aead(key: *const Key, nonce: *const [nonce_len]u8) suite.Aead {
    var a: suite.Aead = .{ .suite = .chacha20_poly1305_sha256 };
    a.key = key.*;
    a.iv = nonce.*;
    return a;
}

/// The associated data: the marker, the client's address, the ID the token comes back to.
fn associated(buf: *[1 + 2 + 2 + 16 + 1 + packet.cid_len_max]u8, peer: *const Peer, dcid: []const u8) []const u8 {
    assert(dcid.len <= packet.cid_len_max);
    buf[0] = marker;
    std.mem.writeInt(u16, buf[1..3], peer.family, .big);
    std.mem.writeInt(u16, buf[3..5], peer.port, .big);
    buf[5..21].* = peer.addr;
    // An IPv4 peer's address is its first 4 bytes (`Peer.fromStorage` leaves the rest
    // undefined): only those are the token's.
    if (peer.family == std.os.linux.AF.INET) @memset(buf[9..21], 0);
    buf[21] = @intCast(dcid.len);
    @memcpy(buf[22..][0..dcid.len], dcid);
    return buf[0 .. 22 + dcid.len];
}

/// Writes the token for a client at `peer` whose first Initial went to `odcid` and whose
/// next must go to `retry_scid`.
pub fn seal(out: *[len]u8, key: *const Key, nonce: [nonce_len]u8, peer: *const Peer, retry_scid: []const u8, odcid: []const u8, now_us: u64) void {
    assert(odcid.len <= packet.cid_len_max);
    var plain = [_]u8{0} ** sealed_len;
    std.mem.writeInt(u64, plain[0..8], now_us, .big);
    plain[8] = @intCast(odcid.len);
    @memcpy(plain[9..][0..odcid.len], odcid);
    var ad_buf: [1 + 2 + 2 + 16 + 1 + packet.cid_len_max]u8 = undefined;
    const ad = associated(&ad_buf, peer, retry_scid);
    out[0] = marker;
    out[1..][0..nonce_len].* = nonce;
    const a = aead(key, &nonce);
    a.seal(out[1 + nonce_len ..][0..sealed_len], out[1 + nonce_len + sealed_len ..][0..suite.tag_len], &plain, ad, 0);
}

pub const OpenError = error{
    /// Not one of ours, changed, or for another address or connection ID.
    Invalid,
    /// Older than its lifetime (or from a clock ahead of ours).
    Expired,
};

/// Checks a token an Initial carried to `dcid` from `peer`; the original destination ID.
pub fn open(token: []const u8, key: *const Key, peer: *const Peer, dcid: []const u8, now_us: u64, lifetime_us: u64) OpenError!Cid {
    if (token.len != len or token[0] != marker or dcid.len > packet.cid_len_max) return error.Invalid;
    const nonce = token[1..][0..nonce_len];
    var plain: [sealed_len]u8 = undefined;
    var ad_buf: [1 + 2 + 2 + 16 + 1 + packet.cid_len_max]u8 = undefined;
    const ad = associated(&ad_buf, peer, dcid);
    const a = aead(key, nonce);
    a.open(&plain, token[1 + nonce_len ..][0..sealed_len], token[1 + nonce_len + sealed_len ..][0..suite.tag_len].*, ad, 0) catch
        return error.Invalid;
    const issued_us = std.mem.readInt(u64, plain[0..8], .big);
    if (issued_us > now_us or now_us - issued_us > lifetime_us) return error.Expired;
    const odcid_len = plain[8];
    // Sealed by us, so well formed; checked anyway, as everything from the wire is.
    if (odcid_len > packet.cid_len_max) return error.Invalid;
    return Cid.from(plain[9..][0..odcid_len]);
}

const testing = std.testing;

fn peerAt(last: u8, port: u16) Peer {
    var p: Peer = .{ .family = std.os.linux.AF.INET, .port = port, .addr = [_]u8{0} ** 16 };
    p.addr[0..4].* = .{ 192, 0, 2, last };
    return p;
}

test "retry token: round trip; another address, port, ID or key refused; expiry at the boundary" {
    const key = [_]u8{0x11} ** key_len;
    const peer = peerAt(7, 4433);
    var tok: [len]u8 = undefined;
    seal(&tok, &key, [_]u8{0x22} ** nonce_len, &peer, "retry-id", "original-dcid", 1_000_000);
    const odcid = try open(&tok, &key, &peer, "retry-id", 1_000_000, lifetime_us_default);
    try testing.expectEqualStrings("original-dcid", odcid.slice());
    try testing.expectEqualStrings("original-dcid", (try open(&tok, &key, &peer, "retry-id", 1_000_000 + lifetime_us_default, lifetime_us_default)).slice());
    try testing.expectError(error.Expired, open(&tok, &key, &peer, "retry-id", 1_000_001 + lifetime_us_default, lifetime_us_default));
    try testing.expectError(error.Expired, open(&tok, &key, &peer, "retry-id", 999_999, lifetime_us_default));
    try testing.expectError(error.Invalid, open(&tok, &key, &peerAt(8, 4433), "retry-id", 1_000_000, lifetime_us_default));
    try testing.expectError(error.Invalid, open(&tok, &key, &peerAt(7, 4434), "retry-id", 1_000_000, lifetime_us_default));
    try testing.expectError(error.Invalid, open(&tok, &key, &peer, "retry-iD", 1_000_000, lifetime_us_default));
    try testing.expectError(error.Invalid, open(&tok, &([_]u8{0x12} ** key_len), &peer, "retry-id", 1_000_000, lifetime_us_default));
    // Every byte changed, every length cut or grown: refused.
    for (0..len) |i| {
        var bad = tok;
        bad[i] ^= 0x01;
        try testing.expectError(error.Invalid, open(&bad, &key, &peer, "retry-id", 1_000_000, lifetime_us_default));
    }
    for (0..len) |cut| try testing.expectError(error.Invalid, open(tok[0..cut], &key, &peer, "retry-id", 1_000_000, lifetime_us_default));
    var longer: [len + 1]u8 = undefined;
    @memcpy(longer[0..len], &tok);
    try testing.expectError(error.Invalid, open(&longer, &key, &peer, "retry-id", 1_000_000, lifetime_us_default));
    // An empty and a 20-byte original ID both come back.
    seal(&tok, &key, [_]u8{1} ** nonce_len, &peer, "", "", 5);
    try testing.expectEqual(@as(u8, 0), (try open(&tok, &key, &peer, "", 5, 0)).len);
    seal(&tok, &key, [_]u8{2} ** nonce_len, &peer, "x", "01234567890123456789", 5);
    try testing.expectEqualStrings("01234567890123456789", (try open(&tok, &key, &peer, "x", 6, 1)).slice());
}

test "retry token: an IPv4 peer's undefined address tail is not part of it" {
    const key = [_]u8{0x11} ** key_len;
    var first = peerAt(7, 4433);
    @memset(first.addr[4..], 0xaa);
    var second = peerAt(7, 4433);
    @memset(second.addr[4..], 0x55);
    var tok: [len]u8 = undefined;
    seal(&tok, &key, [_]u8{0x22} ** nonce_len, &first, "retry-id", "original-dcid", 1_000_000);
    try testing.expectEqualStrings("original-dcid", (try open(&tok, &key, &second, "retry-id", 1_000_000, lifetime_us_default)).slice());
}

test "retry token rotation: one rotation keeps a token valid, two do not; period keys differ" {
    const shared = [_]u8{0x33} ** key_len;
    const peer = peerAt(9, 443);
    const period = rotation_period_us;
    const never_expires = std.math.maxInt(u64);
    var tok: [len]u8 = undefined;
    const issued = 7 * period - 1; // the last microsecond of period 6
    sealRotating(&tok, &shared, [_]u8{0x44} ** nonce_len, &peer, "rid", "odcid", issued);
    const ok = try openRotating(&tok, &shared, &peer, "rid", issued, lifetime_us_default);
    try testing.expectEqualStrings("odcid", ok.slice());
    // After one rotation: the previous period's key still opens it.
    const after_one = try openRotating(&tok, &shared, &peer, "rid", 7 * period, never_expires);
    try testing.expectEqualStrings("odcid", after_one.slice());
    const late_one = 8 * period - 1;
    const still = try openRotating(&tok, &shared, &peer, "rid", late_one, never_expires);
    try testing.expectEqualStrings("odcid", still.slice());
    // After two: its key is gone (expiry aside).
    const two = 8 * period;
    const after_two = openRotating(&tok, &shared, &peer, "rid", two, never_expires);
    try testing.expectError(error.Invalid, after_two);
    // Within the normal lifetime across a rotation: valid; the lifetime still applies.
    const soon = 7 * period + 1000;
    _ = try openRotating(&tok, &shared, &peer, "rid", soon, lifetime_us_default);
    const late = issued + lifetime_us_default + 1;
    const expired = openRotating(&tok, &shared, &peer, "rid", late, lifetime_us_default);
    try testing.expectError(error.Expired, expired);
    // The token is not sealed with the shared key itself, and each period has its own key.
    const plain = open(&tok, &shared, &peer, "rid", issued, lifetime_us_default);
    try testing.expectError(error.Invalid, plain);
    try testing.expect(!std.mem.eql(u8, &periodKey(&shared, 6), &periodKey(&shared, 7)));
    try testing.expect(!std.mem.eql(u8, &periodKey(&shared, 6), &shared));
    const other = [_]u8{0x34} ** key_len;
    try testing.expect(!std.mem.eql(u8, &periodKey(&shared, 6), &periodKey(&other, 6)));
    // Period 0 has no previous period: a token of another key is refused, not wrapped.
    sealRotating(&tok, &other, [_]u8{1} ** nonce_len, &peer, "rid", "odcid", 5);
    const foreign = openRotating(&tok, &shared, &peer, "rid", 6, never_expires);
    try testing.expectError(error.Invalid, foreign);
}
