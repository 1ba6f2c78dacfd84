//! Stateless reset (RFC 9000 10.3): the token a server derives for each connection ID it
//! issues, the reset datagram it sends for a packet it cannot attribute, and the check that
//! a datagram is a reset carrying a known token.
//!
//! The token is HMAC-SHA256(static key, connection ID) cut to 16 bytes (10.3.2's
//! suggestion): a server that lost its state still derives the same token from the packet's
//! connection ID, and the token reveals nothing of the key. Sans-IO: the randomness comes
//! from the caller.
const std = @import("std");
const assert = std.debug.assert;
const packet = @import("packet.zig");
const HmacSha256 = std.crypto.auth.hmac.sha2.HmacSha256;

pub const token_len = 16;
pub const key_len = 32;
/// 5 unpredictable bytes (at least 38 random bits) and the token (RFC 9000 10.3).
pub const len_min = 21;
/// A reset need not be longer than this to pass for a short header packet; it is kept
/// shorter than the packet that triggered it (10.3.3), so it cannot amplify nor loop.
pub const len_max = 64;

pub const Token = [token_len]u8;

/// The reset token of connection ID `cid` under the server's static key.
pub fn token(static_key: *const [key_len]u8, cid: []const u8) Token {
    assert(cid.len <= packet.cid_len_max);
    var mac: [HmacSha256.mac_length]u8 = undefined;
    HmacSha256.create(&mac, cid, static_key);
    return mac[0..token_len].*;
}

/// Writes a stateless reset in answer to a packet of `trigger_len` bytes: random bytes
/// shaped as a short header (fixed bit 1, form bit 0), then the token, one byte shorter than
/// the trigger at most. Returns its length, or null when the trigger is too short to
/// answer with a smaller reset (10.3.3: the reset would not be shorter).
pub fn write(out: []u8, tok: *const Token, trigger_len: usize, random: std.Random) ?usize {
    if (trigger_len <= len_min) return null;
    const longest = @min(trigger_len - 1, len_max, out.len);
    if (longest < len_min) return null;
    const n = random.intRangeAtMost(usize, len_min, longest);
    random.bytes(out[0 .. n - token_len]);
    out[0] = (out[0] & ~packet.form_bit) | packet.fixed_bit;
    @memcpy(out[n - token_len .. n], tok);
    assert(n >= len_min and n < trigger_len);
    return n;
}

/// Whether `datagram` ends with `tok` and is long enough to be a stateless reset
/// (RFC 9000 10.3.1); compared in constant time.
pub fn matches(datagram: []const u8, tok: *const Token) bool {
    if (datagram.len < len_min) return false;
    if (datagram[0] & packet.form_bit != 0) return false;
    return std.crypto.timing_safe.eql(Token, datagram[datagram.len - token_len ..][0..token_len].*, tok.*);
}

const testing = std.testing;

test "tokens: HMAC-SHA256 of the CID, truncated; one per CID and key" {
    const key = [_]u8{0x0b} ** key_len;
    // RFC 4231 case 1's key is 20 bytes of 0x0b; here 32, so check the HMAC directly.
    var mac: [32]u8 = undefined;
    HmacSha256.create(&mac, "cid-1", &key);
    try testing.expectEqualSlices(u8, mac[0..16], &token(&key, "cid-1"));
    try testing.expect(!std.mem.eql(u8, &token(&key, "cid-1"), &token(&key, "cid-2")));
    const other = [_]u8{0x0c} ** key_len;
    try testing.expect(!std.mem.eql(u8, &token(&key, "cid-1"), &token(&other, "cid-1")));
}

test "a reset is shorter than its trigger, at least 21 bytes, and recognised" {
    var prng = std.Random.DefaultPrng.init(7);
    const tok = token(&([_]u8{1} ** key_len), "abcd");
    var buf: [200]u8 = undefined;
    try testing.expectEqual(@as(?usize, null), write(&buf, &tok, 21, prng.random()));
    try testing.expectEqual(@as(?usize, null), write(&buf, &tok, 0, prng.random()));
    try testing.expectEqual(@as(?usize, 21), write(&buf, &tok, 22, prng.random()));
    for (22..200) |trigger| {
        const n = write(&buf, &tok, trigger, prng.random()).?;
        try testing.expect(n >= len_min and n < trigger and n <= len_max);
        try testing.expect(matches(buf[0..n], &tok));
        // It parses as a short header: to an observer, one more 1-RTT packet.
        try testing.expectEqual(packet.Kind.one_rtt, (try packet.parse(buf[0..n], 8)).kind);
        try testing.expect(!matches(buf[0 .. n - 1], &tok));
    }
    const n = write(&buf, &tok, 100, prng.random()).?;
    var wrong = tok;
    wrong[15] ^= 1;
    try testing.expect(!matches(buf[0..n], &wrong));
    buf[0] |= packet.form_bit; // a long header is never a reset
    try testing.expect(!matches(buf[0..n], &tok));
    try testing.expect(!matches(buf[0..20], &tok));
    try testing.expectEqual(@as(?usize, null), write(buf[0..20], &tok, 100, prng.random()));
}
