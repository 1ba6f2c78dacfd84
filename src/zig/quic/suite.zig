//! The three TLS 1.3 cipher suites QUIC uses (RFC 9001 5.3), as one vocabulary for the two
//! places that protect bytes with a TLS secret: QUIC packets (labels "quic key", "quic iv",
//! "quic hp") and the TLS records of the handshake shim (labels "key", "iv").
//!
//! Keys are derived with HKDF-Expand-Label (RFC 8446 7.1) from the secret of one epoch;
//! the AEAD's nonce is the IV XOR the left-padded sequence (packet) number (RFC 8446 5.3,
//! RFC 9001 5.3). Sans-IO, no allocation; the primitives are the standard library's.
const std = @import("std");
const tls = std.crypto.tls;
const Aes128Gcm = std.crypto.aead.aes_gcm.Aes128Gcm;
const Aes256Gcm = std.crypto.aead.aes_gcm.Aes256Gcm;
const ChaCha20Poly1305 = std.crypto.aead.chacha_poly.ChaCha20Poly1305;
const HkdfSha256 = std.crypto.kdf.hkdf.HkdfSha256;
const HkdfSha384 = std.crypto.kdf.hkdf.Hkdf(std.crypto.auth.hmac.sha2.HmacSha384);

pub const Suite = enum(u16) {
    aes_128_gcm_sha256 = 0x1301,
    aes_256_gcm_sha384 = 0x1302,
    chacha20_poly1305_sha256 = 0x1303,

    /// The suite of a TLS cipher suite number, or null for one QUIC does not use.
    pub fn fromId(id: u16) ?Suite {
        return std.meta.intToEnum(Suite, id) catch null;
    }

    /// The length of its secrets: its hash's output.
    pub fn secretLen(s: Suite) usize {
        return if (s == .aes_256_gcm_sha384) 48 else 32;
    }

    pub fn keyLen(s: Suite) usize {
        return if (s == .aes_128_gcm_sha256) 16 else 32;
    }
};

pub const max_secret_len = 48;
pub const max_key_len = 32;
pub const iv_len = 12;
pub const tag_len = 16;

/// The secret of one epoch and direction, as the handshake gives it.
pub const Secret = struct {
    suite: Suite,
    bytes: [max_secret_len]u8 = [_]u8{0} ** max_secret_len,

    pub fn init(suite: Suite, bytes: []const u8) Secret {
        std.debug.assert(bytes.len == suite.secretLen());
        var s: Secret = .{ .suite = suite };
        @memcpy(s.bytes[0..bytes.len], bytes);
        return s;
    }

    pub fn slice(s: *const Secret) []const u8 {
        return s.bytes[0..s.suite.secretLen()];
    }

    /// HKDF-Expand-Label(secret, label, context, out.len) with the suite's hash.
    pub fn expand(s: *const Secret, label: []const u8, context: []const u8, out: []u8) void {
        switch (out.len) {
            inline 12, 16, 32, 48 => |n| {
                const v = switch (s.suite) {
                    .aes_256_gcm_sha384 => tls.hkdfExpandLabel(HkdfSha384, s.bytes[0..48].*, label, context, n),
                    else => tls.hkdfExpandLabel(HkdfSha256, s.bytes[0..32].*, label, context, n),
                };
                @memcpy(out, &v);
            },
            else => unreachable, // the lengths QUIC and TLS 1.3 derive
        }
    }

    /// The next secret of a key update (RFC 9001 6.1: label "quic ku").
    pub fn next(s: *const Secret) Secret {
        var n: Secret = .{ .suite = s.suite };
        s.expand("quic ku", "", n.bytes[0..s.suite.secretLen()]);
        return n;
    }

    /// Overwrites the secret's bytes with zeros (the suite stays), in a way the compiler
    /// keeps: every copy of a secret that is dropped is wiped first.
    pub fn wipe(s: *Secret) void {
        std.crypto.secureZero(u8, &s.bytes);
    }
};

/// Which labels derive the key and IV: QUIC packet protection or a TLS 1.3 record.
pub const Use = enum { quic, tls_record };

/// An AEAD key and IV of one epoch and direction.
pub const Aead = struct {
    suite: Suite,
    key: [max_key_len]u8 = [_]u8{0} ** max_key_len,
    iv: [iv_len]u8 = [_]u8{0} ** iv_len,

    /// Overwrites the key and IV with zeros (the suite stays).
    pub fn wipe(a: *Aead) void {
        std.crypto.secureZero(u8, &a.key);
        std.crypto.secureZero(u8, &a.iv);
    }

    pub fn init(secret: *const Secret, use: Use) Aead {
        var a: Aead = .{ .suite = secret.suite };
        secret.expand(if (use == .quic) "quic key" else "key", "", a.key[0..secret.suite.keyLen()]);
        secret.expand(if (use == .quic) "quic iv" else "iv", "", &a.iv);
        return a;
    }

    /// RFC 8446 5.3: the IV XOR the 64-bit sequence number, left-padded to the IV's length.
    pub fn nonce(a: *const Aead, seq: u64) [iv_len]u8 {
        var n = a.iv;
        var be: [8]u8 = undefined;
        std.mem.writeInt(u64, &be, seq, .big);
        for (be, 0..) |b, i| n[iv_len - 8 + i] ^= b;
        return n;
    }

    /// Encrypts `plaintext` into `out` (the same length; may be the same memory) and
    /// writes the tag.
    pub fn seal(a: *const Aead, out: []u8, tag: *[tag_len]u8, plaintext: []const u8, ad: []const u8, seq: u64) void {
        std.debug.assert(out.len == plaintext.len);
        const n = a.nonce(seq);
        switch (a.suite) {
            .aes_128_gcm_sha256 => Aes128Gcm.encrypt(out, tag, plaintext, ad, n, a.key[0..16].*),
            .aes_256_gcm_sha384 => Aes256Gcm.encrypt(out, tag, plaintext, ad, n, a.key[0..32].*),
            .chacha20_poly1305_sha256 => ChaCha20Poly1305.encrypt(out, tag, plaintext, ad, n, a.key[0..32].*),
        }
    }

    /// Decrypts `ciphertext` into `out` (the same length; may be the same memory);
    /// error.AuthenticationFailed when the tag does not match (then `out` is zeroed).
    pub fn open(a: *const Aead, out: []u8, ciphertext: []const u8, tag: [tag_len]u8, ad: []const u8, seq: u64) error{AuthenticationFailed}!void {
        std.debug.assert(out.len == ciphertext.len);
        const n = a.nonce(seq);
        switch (a.suite) {
            .aes_128_gcm_sha256 => try Aes128Gcm.decrypt(out, ciphertext, tag, ad, n, a.key[0..16].*),
            .aes_256_gcm_sha384 => try Aes256Gcm.decrypt(out, ciphertext, tag, ad, n, a.key[0..32].*),
            .chacha20_poly1305_sha256 => try ChaCha20Poly1305.decrypt(out, ciphertext, tag, ad, n, a.key[0..32].*),
        }
    }
};

const testing = std.testing;

fn unhex(comptime s: []const u8) [s.len / 2]u8 {
    var out: [s.len / 2]u8 = undefined;
    _ = std.fmt.hexToBytes(&out, s) catch unreachable;
    return out;
}

test "RFC 9001 A.1: the client's Initial key and IV from its secret" {
    const secret = Secret.init(.aes_128_gcm_sha256, &unhex("c00cf151ca5be075ed0ebfb5c80323c42d6b7db67881289af4008f1f6c357aea"));
    const a = Aead.init(&secret, .quic);
    try testing.expectEqualSlices(u8, &unhex("1f369613dd76d5467730efcbe3b1a22d"), a.key[0..16]);
    try testing.expectEqualSlices(u8, &unhex("fa044b2f42a3fd3b46fb255c"), &a.iv);
    var hp: [16]u8 = undefined;
    secret.expand("quic hp", "", &hp);
    try testing.expectEqualSlices(u8, &unhex("9f50449e04a0e810283a1e9933adedd2"), &hp);
}

test "RFC 9001 A.5: ChaCha20 key, IV and the next secret of a key update" {
    const secret = Secret.init(.chacha20_poly1305_sha256, &unhex("9ac312a7f877468ebe69422748ad00a15443f18203a07d6060f688f30f21632b"));
    const a = Aead.init(&secret, .quic);
    try testing.expectEqualSlices(u8, &unhex("c6d98ff3441c3fe1b2182094f69caa2ed4b716b65488960a7a984979fb23e1c8"), &a.key);
    try testing.expectEqualSlices(u8, &unhex("e0459b3474bdd0e44a41c144"), &a.iv);
    try testing.expectEqualSlices(u8, &unhex("e0459b3474bdd0e46d417eb0"), &a.nonce(654360564));
    const ku = secret.next();
    try testing.expectEqualSlices(u8, &unhex("1223504755036d556342ee9361d253421a826c9ecdf3c7148684b36b714881f9"), ku.slice());
}

test "seal and open every suite, in place, and a changed byte fails" {
    for ([_]Suite{ .aes_128_gcm_sha256, .aes_256_gcm_sha384, .chacha20_poly1305_sha256 }) |suite| {
        var bytes: [max_secret_len]u8 = undefined;
        for (&bytes, 0..) |*b, i| b.* = @intCast(i);
        const secret = Secret.init(suite, bytes[0..suite.secretLen()]);
        const a = Aead.init(&secret, .tls_record);
        var buf = "a handshake message".*;
        var tag: [tag_len]u8 = undefined;
        a.seal(&buf, &tag, &buf, "ad", 7);
        try testing.expect(!std.mem.eql(u8, &buf, "a handshake message"));
        var copy = buf;
        try a.open(&copy, &copy, tag, "ad", 7);
        try testing.expectEqualSlices(u8, "a handshake message", &copy);
        copy = buf;
        try testing.expectError(error.AuthenticationFailed, a.open(&copy, &copy, tag, "ad", 8));
        copy = buf;
        copy[0] ^= 1;
        try testing.expectError(error.AuthenticationFailed, a.open(&copy, &copy, tag, "ad", 7));
    }
    try testing.expectEqual(@as(?Suite, null), Suite.fromId(0x1304));
    try testing.expectEqual(@as(?Suite, .aes_256_gcm_sha384), Suite.fromId(0x1302));
}
