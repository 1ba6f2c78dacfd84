//! Address validation tokens for a client's next connection (RFC 9000 8.1.3, the NEW_TOKEN
//! frame of 19.7): once a handshake is confirmed the server gives the client a token; the
//! client's next Initial to this server carries it, and a token that opens proves the
//! client's address without a Retry round trip (under `--http3-retry always`, or `auto` in a
//! flood), and lifts the amplification limit as a Retry token does.
//!
//! A token is an AEAD record like a Retry token's (`retry_token.zig`: ChaCha20-Poly1305, a
//! random 96-bit nonce in clear), under keys derived from the same shared key with another
//! label, so neither kind opens as the other:
//!
//!     marker (1) | nonce (12) | sealed: issued_us (8) | tag (16)
//!
//! The associated data is the marker and the client's IP address (family and address, not
//! the port: a client's next connection comes from another port, and NAT rebinding moves it
//! anyway). Replay (RFC 9000 8.1.4) is limited by that binding: a token validates only the
//! address it was issued to, so replaying it cannot aim the server's first flight at anyone
//! else; it is also good for `lifetime_us` only. A token that does not open, or has expired,
//! is as good as none (8.1.3: the client may then get a Retry), never an error.
//!
//! Keys: time is cut into periods of `rotation_period_us` on CLOCK_MONOTONIC (every worker of
//! a host reads it alike); each period's key is HKDF-Expand(shared key, "zigcorn token key" |
//! period), derived when used and zeroed after. A token opens under its period's key or the
//! previous period's: with the lifetime at most one period, every unexpired token opens.
//! The shared key is drawn by the master at start, so tokens end with the server.
const std = @import("std");
const assert = std.debug.assert;
const suite = @import("suite.zig");
const retry_token = @import("retry_token.zig");
const Peer = @import("../transport/peer.zig").Peer;

pub const Key = retry_token.Key;
pub const nonce_len = retry_token.nonce_len;
/// Tells a NEW_TOKEN token from a Retry token (`retry_token.marker`) in an Initial.
pub const marker: u8 = 0x4e;
const sealed_len = 8;
pub const len = 1 + nonce_len + sealed_len + suite.tag_len;
/// One period's key seals tokens for this long.
pub const rotation_period_us: u64 = 24 * std.time.us_per_hour;
/// How long a token stays good (at most one period: see the file's comment).
pub const lifetime_us_default: u64 = rotation_period_us;

comptime {
    assert(marker != retry_token.marker);
    assert(lifetime_us_default <= rotation_period_us);
}

fn periodKey(shared: *const Key, period: u64) Key {
    var info: [17 + 8]u8 = undefined;
    info[0..17].* = "zigcorn token key".*;
    std.mem.writeInt(u64, info[17..25], period, .big);
    var out: Key = undefined;
    std.crypto.kdf.hkdf.HkdfSha256.expand(&out, &info, shared.*);
    return out;
}

/// The associated data: the marker and the client's IP address (no port).
fn associated(buf: *[1 + 2 + 16]u8, peer: *const Peer) []const u8 {
    buf[0] = marker;
    std.mem.writeInt(u16, buf[1..3], peer.family, .big);
    buf[3..19].* = peer.addr;
    // An IPv4 peer's address is its first 4 bytes; the rest is undefined (`Peer.fromStorage`).
    if (peer.family == std.os.linux.AF.INET) @memset(buf[7..19], 0);
    return buf;
}

/// Writes a token for the client at `peer`, issued at `now_us`.
pub fn seal(
    out: *[len]u8,
    shared: *const Key,
    nonce: [nonce_len]u8,
    peer: *const Peer,
    now_us: u64,
) void {
    var key = periodKey(shared, now_us / rotation_period_us);
    defer std.crypto.secureZero(u8, &key);
    var plain: [sealed_len]u8 = undefined;
    std.mem.writeInt(u64, &plain, now_us, .big);
    var ad_buf: [1 + 2 + 16]u8 = undefined;
    const ad = associated(&ad_buf, peer);
    out[0] = marker;
    out[1..][0..nonce_len].* = nonce;
    const a = retry_token.aead(&key, &nonce);
    const tag = out[1 + nonce_len + sealed_len ..][0..suite.tag_len];
    a.seal(out[1 + nonce_len ..][0..sealed_len], tag, &plain, ad, 0);
}

pub const OpenError = error{
    /// Not one of ours, changed, or for another address.
    Invalid,
    /// Older than its lifetime (or from a clock ahead of ours).
    Expired,
};

/// Checks a token an Initial from `peer` carried at `now_us`.
pub fn open(
    token: []const u8,
    shared: *const Key,
    peer: *const Peer,
    now_us: u64,
    lifetime_us: u64,
) OpenError!void {
    assert(lifetime_us <= rotation_period_us);
    if (token.len != len or token[0] != marker) return error.Invalid;
    const period = now_us / rotation_period_us;
    openWith(token, shared, period, peer, now_us, lifetime_us) catch |e| {
        if (e == error.Expired or period == 0) return e;
        return openWith(token, shared, period - 1, peer, now_us, lifetime_us);
    };
}

/// Whether `open` takes the token: one that does not is as good as none (8.1.3).
pub fn opens(
    token: []const u8,
    shared: *const Key,
    peer: *const Peer,
    now_us: u64,
    lifetime_us: u64,
) bool {
    open(token, shared, peer, now_us, lifetime_us) catch return false;
    return true;
}

fn openWith(
    token: []const u8,
    shared: *const Key,
    period: u64,
    peer: *const Peer,
    now_us: u64,
    lifetime_us: u64,
) OpenError!void {
    assert(token.len == len);
    var key = periodKey(shared, period);
    defer std.crypto.secureZero(u8, &key);
    const nonce = token[1..][0..nonce_len];
    var ad_buf: [1 + 2 + 16]u8 = undefined;
    const ad = associated(&ad_buf, peer);
    const a = retry_token.aead(&key, nonce);
    var plain: [sealed_len]u8 = undefined;
    const sealed = token[1 + nonce_len ..][0..sealed_len];
    const tag = token[1 + nonce_len + sealed_len ..][0..suite.tag_len].*;
    a.open(&plain, sealed, tag, ad, 0) catch return error.Invalid;
    const issued_us = std.mem.readInt(u64, &plain, .big);
    if (issued_us > now_us or now_us - issued_us > lifetime_us) return error.Expired;
}

const testing = std.testing;

fn peerAt(last: u8, port: u16) Peer {
    var p: Peer = .{ .family = std.os.linux.AF.INET, .port = port, .addr = [_]u8{0} ** 16 };
    p.addr[0..4].* = .{ 198, 51, 100, last };
    return p;
}

test "new token: opens for its address on any port; another address, key or byte refused" {
    const shared = [_]u8{0x21} ** retry_token.key_len;
    const peer = peerAt(7, 50_000);
    const issued = 3 * rotation_period_us + 5;
    var tok: [len]u8 = undefined;
    seal(&tok, &shared, [_]u8{0x5a} ** nonce_len, &peer, issued);
    try open(&tok, &shared, &peer, issued, lifetime_us_default);
    try open(&tok, &shared, &peerAt(7, 50_001), issued + 1, lifetime_us_default);
    const other_ip = open(&tok, &shared, &peerAt(8, 50_000), issued, lifetime_us_default);
    try testing.expectError(error.Invalid, other_ip);
    const other_key = [_]u8{0x22} ** retry_token.key_len;
    const with_other_key = open(&tok, &other_key, &peer, issued, lifetime_us_default);
    try testing.expectError(error.Invalid, with_other_key);
    for (0..len) |i| {
        var bad = tok;
        bad[i] ^= 0x80;
        const changed = open(&bad, &shared, &peer, issued, lifetime_us_default);
        try testing.expectError(error.Invalid, changed);
    }
    for (0..len) |cut| {
        try testing.expectError(error.Invalid, open(tok[0..cut], &shared, &peer, issued, 1));
    }
    // An IPv4 peer's undefined address tail is not part of it.
    var tail = peer;
    @memset(tail.addr[4..], 0xaa);
    try open(&tok, &shared, &tail, issued, lifetime_us_default);
}

test "new token: good for its lifetime to the microsecond, across a rotation, not from the future" {
    const shared = [_]u8{0x31} ** retry_token.key_len;
    const peer = peerAt(9, 443);
    const issued = 5 * rotation_period_us - 1; // the last microsecond of period 4
    var tok: [len]u8 = undefined;
    seal(&tok, &shared, [_]u8{1} ** nonce_len, &peer, issued);
    try open(&tok, &shared, &peer, issued + lifetime_us_default, lifetime_us_default);
    // One microsecond later its period's key is two rotations old: refused all the same.
    const late = open(&tok, &shared, &peer, issued + lifetime_us_default + 1, lifetime_us_default);
    try testing.expectError(error.Invalid, late);
    // Issued at a period's start, it outlives its lifetime within the next period.
    seal(&tok, &shared, [_]u8{4} ** nonce_len, &peer, 4 * rotation_period_us);
    const start = 4 * rotation_period_us;
    try open(&tok, &shared, &peer, start + lifetime_us_default, lifetime_us_default);
    const past = open(&tok, &shared, &peer, start + lifetime_us_default + 1, lifetime_us_default);
    try testing.expectError(error.Expired, past);
    seal(&tok, &shared, [_]u8{5} ** nonce_len, &peer, issued);
    const early = open(&tok, &shared, &peer, issued - 1, lifetime_us_default);
    try testing.expectError(error.Expired, early);
    // A shorter lifetime is honoured as well.
    try testing.expectError(error.Expired, open(&tok, &shared, &peer, issued + 11, 10));
    // Period 0 has no previous period.
    seal(&tok, &shared, [_]u8{2} ** nonce_len, &peer, 7);
    try open(&tok, &shared, &peer, 8, lifetime_us_default);
    // A Retry token with the same key does not open as a NEW_TOKEN token, nor the reverse.
    var retry: [retry_token.len]u8 = undefined;
    retry_token.sealRotating(&retry, &shared, [_]u8{3} ** nonce_len, &peer, "rid", "odcid", 8);
    try testing.expectError(error.Invalid, open(&retry, &shared, &peer, 8, lifetime_us_default));
    const as_retry = retry_token.openRotating(&tok, &shared, &peer, "rid", 8, 1000);
    try testing.expectError(error.Invalid, as_retry);
}
