//! QUIC packet protection (RFC 9001 5): the Initial secrets every connection starts from,
//! the keys of one epoch and direction (the AEAD of `suite.zig` plus the header protection
//! key), `protect` (seal a built packet in place, then mask its header) and `unprotect`
//! (unmask, rebuild the packet number, open in place), and the 1-RTT key phases of a key
//! update (RFC 9001 6).
//!
//! Sans-IO: packets are byte slices the caller owns; `packet.zig` finds where their packet
//! numbers start. The one allocation is `OneRtt`'s key update record (`OneRtt.Update`),
//! made from the allocator `OneRtt.open` is given.
const std = @import("std");
const assert = std.debug.assert;
const suite = @import("suite.zig");
const packet = @import("packet.zig");
const Aes128 = std.crypto.core.aes.Aes128;
const Aes256 = std.crypto.core.aes.Aes256;
const ChaCha20IETF = std.crypto.stream.chacha.ChaCha20IETF;
const HkdfSha256 = std.crypto.kdf.hkdf.HkdfSha256;
const Allocator = std.mem.Allocator;

/// The v1 salt of the Initial secrets (RFC 9001 5.2).
pub const initial_salt_v1 = [20]u8{ 0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a };
/// The bytes of ciphertext header protection samples (RFC 9001 5.4.2).
pub const sample_len = 16;
/// The sample starts this far after the packet number's first byte, as if the packet
/// number were 4 bytes long (RFC 9001 5.4.2).
pub const pn_len_max = 4;
pub const tag_len = suite.tag_len;

/// Bits of the first byte under header protection (RFC 9001 5.4.1): the low 4 of a long
/// header, the low 5 of a short one.
const long_masked_bits: u8 = 0x0f;
const short_masked_bits: u8 = 0x1f;
/// Reserved bits that must be 0 once protection is removed (RFC 9000 17.2, 17.3.1).
const long_reserved_bits: u8 = 0x0c;
const short_reserved_bits: u8 = 0x18;

/// The header protection key of one epoch and direction ("quic hp", RFC 9001 5.4).
pub const HeaderKey = struct {
    suite: suite.Suite,
    key: [suite.max_key_len]u8 = [_]u8{0} ** suite.max_key_len,

    pub fn init(secret: *const suite.Secret) HeaderKey {
        var hk: HeaderKey = .{ .suite = secret.suite };
        secret.expand("quic hp", "", hk.key[0..secret.suite.keyLen()]);
        return hk;
    }

    pub fn wipe(hk: *HeaderKey) void {
        std.crypto.secureZero(u8, &hk.key);
    }

    /// The 5 mask bytes from a ciphertext sample: AES-ECB of the sample (5.4.3), or
    /// ChaCha20 with the sample's first 4 bytes as the counter (little-endian) and the
    /// other 12 as the nonce, over 5 zero bytes (5.4.4).
    pub fn mask(hk: *const HeaderKey, sample: *const [sample_len]u8) [5]u8 {
        var block: [16]u8 = undefined;
        switch (hk.suite) {
            .aes_128_gcm_sha256 => Aes128.initEnc(hk.key[0..16].*).encrypt(&block, sample),
            .aes_256_gcm_sha384 => Aes256.initEnc(hk.key[0..32].*).encrypt(&block, sample),
            .chacha20_poly1305_sha256 => {
                const counter = std.mem.readInt(u32, sample[0..4], .little);
                ChaCha20IETF.xor(block[0..5], &[_]u8{0} ** 5, counter, hk.key[0..32].*, sample[4..16].*);
            },
        }
        return block[0..5].*;
    }
};

/// The keys that protect packets of one epoch in one direction.
pub const Keys = struct {
    aead: suite.Aead,
    hp: HeaderKey,

    pub fn init(secret: *const suite.Secret) Keys {
        return .{ .aead = suite.Aead.init(secret, .quic), .hp = HeaderKey.init(secret) };
    }

    /// Zeros the AEAD key, IV and header key: the connection calls it before it frees keys.
    pub fn wipe(k: *Keys) void {
        k.aead.wipe();
        k.hp.wipe();
    }
};

pub const InitialSecrets = struct { client: suite.Secret, server: suite.Secret };

/// The Initial secrets from the client's first destination connection ID (RFC 9001 5.2):
/// HKDF-Extract with the v1 salt, then "client in" and "server in".
pub fn initialSecrets(client_dcid: []const u8) InitialSecrets {
    assert(client_dcid.len <= packet.cid_len_max);
    var prk = HkdfSha256.extract(&initial_salt_v1, client_dcid);
    defer std.crypto.secureZero(u8, &prk);
    var initial = suite.Secret.init(.aes_128_gcm_sha256, &prk);
    defer initial.wipe();
    var s: InitialSecrets = .{ .client = .{ .suite = .aes_128_gcm_sha256 }, .server = .{ .suite = .aes_128_gcm_sha256 } };
    initial.expand("client in", "", s.client.bytes[0..32]);
    initial.expand("server in", "", s.server.bytes[0..32]);
    return s;
}

/// The Initial keys of both directions: a server opens with `client`, seals with `server`.
pub fn initialKeys(client_dcid: []const u8) struct { client: Keys, server: Keys } {
    var s = initialSecrets(client_dcid);
    defer s.client.wipe();
    defer s.server.wipe();
    return .{ .client = Keys.init(&s.client), .server = Keys.init(&s.server) };
}

fn maskedBits(first: u8) u8 {
    return if (first & packet.form_bit != 0) long_masked_bits else short_masked_bits;
}

/// The fewest bytes of frames a packet with a `pn_len`-byte packet number must carry for
/// the header protection sample to fit (RFC 9001 5.4.2): a writer pads up to it.
pub fn payloadLenMin(pn_len: usize) usize {
    assert(pn_len >= 1 and pn_len <= pn_len_max);
    return pn_len_max - pn_len;
}

/// Seals a built packet in place: `bytes` is the whole packet (header with the packet number
/// in clear at `pn_offset`, the frames, then `tag_len` bytes of room for the tag). The
/// payload is sealed with the header as associated data, then the header is masked.
pub fn protect(keys: *const Keys, bytes: []u8, pn_offset: usize, pn: u64) void {
    protectWith(&keys.aead, &keys.hp, bytes, pn_offset, pn);
}

fn protectWith(
    aead: *const suite.Aead,
    hp: *const HeaderKey,
    bytes: []u8,
    pn_offset: usize,
    pn: u64,
) void {
    const pn_len: usize = (bytes[0] & 0x03) + 1;
    const header_len = pn_offset + pn_len;
    assert(bytes.len >= header_len + payloadLenMin(pn_len) + tag_len);
    const payload = bytes[header_len .. bytes.len - tag_len];
    const tag = bytes[bytes.len - tag_len ..][0..tag_len];
    aead.seal(payload, tag, payload, bytes[0..header_len], pn);
    const m = hp.mask(bytes[pn_offset + pn_len_max ..][0..sample_len]);
    bytes[0] ^= m[0] & maskedBits(bytes[0]);
    for (bytes[pn_offset..header_len], m[1..][0..pn_len]) |*b, x| b.* ^= x;
}

pub const Header = struct {
    /// The first byte with its protection removed.
    first: u8,
    pn: u64,
    pn_len: usize,
    /// The header's length (through the packet number): the associated data.
    header_len: usize,

    /// A short header's key phase bit (RFC 9001 6).
    pub fn keyPhase(h: *const Header) u1 {
        assert(h.first & packet.form_bit == 0);
        return @intFromBool(h.first & packet.key_phase_bit != 0);
    }
};

pub const UnprotectError = error{
    /// Too short to carry the header protection sample: dropped.
    Truncated,
    /// The AEAD did not authenticate the packet: dropped (RFC 9001 5.5); the payload's
    /// bytes are then overwritten.
    AuthenticationFailed,
    /// Reserved bits set once the packet is authenticated: PROTOCOL_VIOLATION
    /// (RFC 9000 17.2).
    ReservedBitsSet,
};

/// Removes the header protection of `bytes` (one packet, from its first byte to its end)
/// in place and rebuilds its packet number against `largest_pn`, the largest received in
/// its number space. The header key does not change with key updates, so this comes first
/// and the key phase bit it reveals picks the AEAD key.
pub fn unprotectHeader(hp: *const HeaderKey, bytes: []u8, pn_offset: usize, largest_pn: ?u64) error{Truncated}!Header {
    if (bytes.len < pn_offset + pn_len_max + sample_len) return error.Truncated;
    const m = hp.mask(bytes[pn_offset + pn_len_max ..][0..sample_len]);
    bytes[0] ^= m[0] & maskedBits(bytes[0]);
    const pn_len: usize = (bytes[0] & 0x03) + 1;
    var truncated: u64 = 0;
    for (bytes[pn_offset..][0..pn_len], m[1..][0..pn_len]) |*b, x| {
        b.* ^= x;
        truncated = (truncated << 8) | b.*;
    }
    return .{ .first = bytes[0], .pn = packet.pnDecode(largest_pn, truncated, pn_len), .pn_len = pn_len, .header_len = pn_offset + pn_len };
}

/// Opens the payload of a packet whose header `unprotectHeader` cleared, in place; returns
/// the frames (a slice of `bytes`).
pub fn openPayload(aead: *const suite.Aead, bytes: []u8, h: *const Header) UnprotectError![]u8 {
    assert(bytes.len >= h.header_len + tag_len);
    const payload = bytes[h.header_len .. bytes.len - tag_len];
    const tag = bytes[bytes.len - tag_len ..][0..tag_len].*;
    try aead.open(payload, payload, tag, bytes[0..h.header_len], h.pn);
    const reserved = if (h.first & packet.form_bit != 0) long_reserved_bits else short_reserved_bits;
    if (h.first & reserved != 0) return error.ReservedBitsSet;
    return payload;
}

pub const Opened = struct { header: Header, payload: []u8 };

/// `unprotectHeader` then `openPayload` with the same keys: Initial and Handshake packets,
/// which have no key phases.
pub fn unprotect(keys: *const Keys, bytes: []u8, pn_offset: usize, largest_pn: ?u64) UnprotectError!Opened {
    const h = try unprotectHeader(&keys.hp, bytes, pn_offset, largest_pn);
    return .{ .header = h, .payload = try openPayload(&keys.aead, bytes, &h) };
}

/// RFC 9001 6.6's limits on one AEAD: packets sealed under one key (confidentiality) and
/// packets that fail authentication over a connection's life, across all its keys
/// (integrity).
pub const AeadLimits = struct { confidentiality: u64, integrity: u64 };

/// The limits RFC 9001 6.6 gives: AES-128-GCM and AES-256-GCM 2^23 sealed packets and 2^52
/// forgeries; ChaCha20-Poly1305 2^36 forgeries, and a confidentiality limit above the 2^62
/// packet numbers there are (2^62 here, never reached).
pub fn aeadLimits(s: suite.Suite) AeadLimits {
    return switch (s) {
        .aes_128_gcm_sha256,
        .aes_256_gcm_sha384,
        => .{ .confidentiality = 1 << 23, .integrity = 1 << 52 },
        .chacha20_poly1305_sha256 => .{ .confidentiality = 1 << 62, .integrity = 1 << 36 },
    };
}

/// Sealed packets under one key after which the server starts a key update: 7/8 of the
/// confidentiality limit (2^23 - 2^20 for AES-GCM), which leaves 2^20 packets for the
/// update's conditions (an acknowledgment, the previous keys gone) to be met.
pub fn updateThreshold(confidentiality_limit: u64) u64 {
    return confidentiality_limit - confidentiality_limit / 8;
}

/// The 1-RTT keys of both directions through key updates (RFC 9001 6): the header keys
/// stay; the AEAD keys move to the next generation ("quic ku"), one phase bit per
/// generation. A packet with the other phase bit is tried with the next generation's keys
/// (RFC 9001 6.3), and after an update the previous ones open late packets until their
/// deadline (`openAt`'s `keep_previous_us` after the update, three PTOs in the connection:
/// RFC 9001 6.5) or `discardPrevious`.
///
/// Memory: inline are only the keys in use, the secret the next receive keys come from and
/// the counters of RFC 9001 6.6. The next and previous receive keys live in `Update`, a heap
/// record made the first time a packet with the other phase bit comes (6.3 lets the keys be
/// made then; the one timing signal is that first packet's derivation) and given back by
/// `discardPrevious` or `deinit`. After an update the record stays with the next keys made
/// ahead, as 6.3 expects. Every key and secret is zeroed before it is dropped.
pub const OneRtt = struct {
    hp_rx: HeaderKey,
    hp_tx: HeaderKey,
    rx: suite.Aead,
    /// The secret of the next receive generation: `Update.next` derives from it.
    rx_next_secret: suite.Secret,
    tx: suite.Aead,
    tx_secret: suite.Secret,
    rx_phase: u1 = 0,
    tx_phase: u1 = 0,
    /// An ACK of a packet of the current receive generation went out since the receive
    /// side last moved: until then another move is the peer updating twice without
    /// waiting, KEY_UPDATE_ERROR (RFC 9001 6.2). True for the first generation.
    rx_update_acked: bool = true,
    /// The smallest packet number opened with `rx` (`no_pn` before the first): older
    /// packets with the other phase bit belong to the previous generation.
    rx_first_pn: u64 = no_pn,
    /// Packets sealed with `tx` (RFC 9001 6.6's confidentiality count), and the first
    /// one's number: our next update waits for an acknowledgment of one from it on (6.1).
    tx_sealed: u64 = 0,
    tx_first_pn: u64 = 0,
    /// 1-RTT packets that failed authentication, with any key, over the connection's life.
    auth_failures: u64 = 0,
    update: ?*Update = null,

    pub const no_pn: u64 = std.math.maxInt(u64);
    pub const never: u64 = std.math.maxInt(u64);

    /// What only a key update needs.
    pub const Update = struct {
        next: suite.Aead,
        previous: ?suite.Aead = null,
        /// When `previous` goes (`never` while there is none, or for `open`'s callers).
        previous_until_us: u64 = never,
        /// The largest packet number received with keys older than `rx`: a packet of the
        /// current generation below it is KEY_UPDATE_ERROR (RFC 9001 6.3).
        previous_largest_pn: u64 = 0,

        fn wipe(u: *Update) void {
            u.next.wipe();
            if (u.previous) |*p| p.wipe();
        }
    };

    pub const OpenError = UnprotectError || Allocator.Error || error{
        /// KEY_UPDATE_ERROR; nothing moved. The packet opened with the next keys but the
        /// peer had not seen our ACK of its last update (RFC 9001 6.2), or older keys were
        /// used for a larger packet number than newer ones (6.3).
        KeyUpdateError,
    };

    /// What `openAt` knows of the connection: the time, how long the previous keys stay
    /// after an update, and the largest packet number received so far (null: none).
    pub const At = struct {
        now_us: u64 = 0,
        keep_previous_us: u64 = never,
        largest_received: ?u64 = null,
    };

    pub fn init(rx_secret: *const suite.Secret, tx_secret: *const suite.Secret) OneRtt {
        return .{
            .hp_rx = HeaderKey.init(rx_secret),
            .hp_tx = HeaderKey.init(tx_secret),
            .rx = suite.Aead.init(rx_secret, .quic),
            .rx_next_secret = rx_secret.next(),
            .tx = suite.Aead.init(tx_secret, .quic),
            .tx_secret = tx_secret.*,
        };
    }

    /// Zeros every key and secret and gives the key update record back (zeroed too).
    pub fn deinit(k: *OneRtt, allocator: Allocator) void {
        k.freeUpdate(allocator);
        k.hp_rx.wipe();
        k.hp_tx.wipe();
        k.rx.wipe();
        k.rx_next_secret.wipe();
        k.tx.wipe();
        k.tx_secret.wipe();
    }

    fn freeUpdate(k: *OneRtt, allocator: Allocator) void {
        if (k.update) |u| {
            u.wipe();
            allocator.destroy(u);
        }
        k.update = null;
    }

    pub const Generation = enum { previous, current, next };

    /// Which receive keys open a packet with this phase bit and (already rebuilt) number.
    pub fn select(k: *const OneRtt, key_phase: u1, pn: u64) Generation {
        if (key_phase == k.rx_phase) return .current;
        if (k.update) |u| if (u.previous != null and k.rx_first_pn != no_pn and pn < k.rx_first_pn) return .previous;
        return .next;
    }

    /// `openAt` for callers without a clock: the previous keys stay until `discardPrevious`.
    pub fn open(k: *OneRtt, allocator: Allocator, bytes: []u8, h: *const Header) OpenError![]u8 {
        return k.openAt(allocator, bytes, h, .{});
    }

    /// Opens a 1-RTT packet whose header `unprotectHeader(&k.hp_rx, ...)` cleared, with the
    /// keys its phase bit picks; a packet opened with the next keys moves the receive side
    /// to them and, if the peer started the update, the send side too (RFC 9001 6.2); the
    /// previous keys then open late packets until `at.keep_previous_us` after `at.now_us`,
    /// and are dropped by the first call at or past that time. The first packet with the
    /// other phase bit makes the `Update` record from `gpa`: without memory the packet
    /// is dropped (error.OutOfMemory) and nothing moves. A packet that fails authentication
    /// counts in `auth_failures`.
    pub fn openAt(
        k: *OneRtt,
        gpa: Allocator,
        bytes: []u8,
        h: *const Header,
        at: At,
    ) OpenError![]u8 {
        if (k.previousDeadline()) |until| if (at.now_us >= until) k.discardPrevious(gpa);
        const generation = k.select(h.keyPhase(), h.pn);
        const aead = switch (generation) {
            .current => &k.rx,
            .next => &(try k.updateRecord(gpa)).next,
            .previous => &k.update.?.previous.?,
        };
        const payload = openPayload(aead, bytes, h) catch |e| {
            if (e == error.AuthenticationFailed) k.auth_failures +|= 1;
            return e;
        };
        switch (generation) {
            .previous => {
                const u = k.update.?;
                u.previous_largest_pn = @max(u.previous_largest_pn, h.pn);
            },
            .current => {
                // Below the generation's first packet: not below one of an older generation.
                if (h.pn < k.rx_first_pn) if (k.update) |u| {
                    const older = u.previous != null and h.pn < u.previous_largest_pn;
                    if (older) return error.KeyUpdateError;
                };
                k.rx_first_pn = @min(k.rx_first_pn, h.pn);
            },
            .next => {
                // The peer starts an update (ours are answered whenever).
                if (k.tx_phase == k.rx_phase and !k.rx_update_acked) return error.KeyUpdateError;
                // Every packet received so far had older keys: none may be above this one.
                if (at.largest_received) |largest| if (largest > h.pn) return error.KeyUpdateError;
                k.rotateRx(h.pn);
                const u = k.update.?;
                u.previous_until_us = at.now_us +| at.keep_previous_us;
                u.previous_largest_pn = at.largest_received orelse 0;
            },
        }
        return payload;
    }

    /// When the previous receive keys go, if there are any.
    pub fn previousDeadline(k: *const OneRtt) ?u64 {
        const u = k.update orelse return null;
        if (u.previous == null or u.previous_until_us == never) return null;
        return u.previous_until_us;
    }

    /// The record with the next receive keys, made (and the keys derived) when first asked.
    fn updateRecord(k: *OneRtt, allocator: Allocator) Allocator.Error!*Update {
        if (k.update) |u| return u;
        const u = try allocator.create(Update);
        u.* = .{ .next = suite.Aead.init(&k.rx_next_secret, .quic) };
        k.update = u;
        return u;
    }

    fn rotateRx(k: *OneRtt, pn: u64) void {
        const u = k.update.?; // the next keys opened the packet
        if (u.previous) |*p| p.wipe();
        u.previous = k.rx;
        k.rx = u.next;
        k.rx_next_secret = k.rx_next_secret.next();
        u.next = suite.Aead.init(&k.rx_next_secret, .quic);
        k.rx_phase ^= 1;
        k.rx_first_pn = pn;
        k.rx_update_acked = false;
        if (k.tx_phase != k.rx_phase) k.rotateTx(); // the peer updated: answer in kind
        assert(k.tx_phase == k.rx_phase);
    }

    fn rotateTx(k: *OneRtt) void {
        k.tx_secret = k.tx_secret.next(); // the assignment overwrites the old secret
        k.tx = suite.Aead.init(&k.tx_secret, .quic);
        k.tx_phase ^= 1;
        k.tx_sealed = 0;
    }

    /// Starts a key update from this side. The caller checks RFC 9001 6.1's condition (see
    /// `mayInitiate`): here only that the peer has answered the last one (both phases agree).
    pub fn initiate(k: *OneRtt) error{UpdateInProgress}!void {
        if (k.tx_phase != k.rx_phase) return error.UpdateInProgress;
        k.rotateTx();
    }

    /// Whether RFC 9001 allows this side to start a key update now, given the largest
    /// packet number the peer acknowledged (null: none yet) and that the handshake is
    /// confirmed (the caller's part, 6.1): the peer answered our last update (both phases
    /// agree), acknowledged a packet sealed with the current keys (6.1), and the previous
    /// receive keys are gone (6.5: three PTOs after the last update).
    pub fn mayInitiate(k: *const OneRtt, largest_acked: ?u64) bool {
        return k.mayInitiateOncePreviousGone(largest_acked) and !k.keepsPrevious();
    }

    fn keepsPrevious(k: *const OneRtt) bool {
        const u = k.update orelse return false;
        return u.previous != null;
    }

    /// RFC 9001 6.1's conditions alone, without 6.5's wait for the previous receive keys to
    /// go (a SHOULD): what the connection asks at the confidentiality limit itself.
    pub fn mayInitiateOncePreviousGone(k: *const OneRtt, largest_acked: ?u64) bool {
        if (k.tx_phase != k.rx_phase or k.tx_sealed == 0) return false;
        const acked = largest_acked orelse return false;
        return acked >= k.tx_first_pn;
    }

    /// We sent an ACK whose largest acknowledged is `largest`: once it covers a packet of
    /// the current receive generation, the peer may update again.
    pub fn onAckSent(k: *OneRtt, largest: u64) void {
        if (k.rx_first_pn != no_pn and largest >= k.rx_first_pn) k.rx_update_acked = true;
    }

    /// Forgets the previous receive keys (three PTOs after an update, RFC 9001 6.5) and the
    /// record with them, zeroed: the next keys are made again when a packet asks for them.
    pub fn discardPrevious(k: *OneRtt, allocator: Allocator) void {
        k.freeUpdate(allocator);
    }

    /// Seals a built short header packet (`packet.writeShortHeader` with `k.tx_phase`) and
    /// counts it against the key's confidentiality limit.
    pub fn protect(k: *OneRtt, bytes: []u8, pn_offset: usize, pn: u64) void {
        assert(bytes[0] & packet.form_bit == 0);
        assert(@intFromBool(bytes[0] & packet.key_phase_bit != 0) == k.tx_phase);
        if (k.tx_sealed == 0) k.tx_first_pn = pn;
        k.tx_sealed +|= 1;
        protectWith(&k.tx, &k.hp_tx, bytes, pn_offset, pn);
    }
};

// RFC 9001 Appendix A's packets, public for the fuzz target's seed corpus.
pub const a2_dcid = "8394c8f03e515708";
/// RFC 9001 A.2: the client Initial's CRYPTO frame (its ClientHello), padded with PADDING
/// frames to 1162 bytes of payload.
pub const a2_crypto_hex =
    "060040f1010000ed0303ebf8fa56f12939b9584a3896472ec40bb863cfd3e868" ++
    "04fe3a47f06a2b69484c00000413011302010000c000000010000e00000b6578" ++
    "616d706c652e636f6dff01000100000a00080006001d00170018001000070005" ++
    "04616c706e000500050100000000003300260024001d00209370b2c9caa47fba" ++
    "baf4559fedba753de171fa71f50f1ce15d43e994ec74d748002b000302030400" ++
    "0d0010000e0403050306030203080408050806002d00020101001c0002400100" ++
    "3900320408ffffffffffffffff05048000ffff07048000ffff08011001048000" ++
    "75300901100f088394c8f03e51570806048000ffff";
pub const a2_header_hex = "c300000001088394c8f03e5157080000449e00000002";
pub const a2_packet_hex =
    "c000000001088394c8f03e5157080000449e7b9aec34d1b1c98dd7689fb8ec11" ++
    "d242b123dc9bd8bab936b47d92ec356c0bab7df5976d27cd449f63300099f399" ++
    "1c260ec4c60d17b31f8429157bb35a1282a643a8d2262cad67500cadb8e7378c" ++
    "8eb7539ec4d4905fed1bee1fc8aafba17c750e2c7ace01e6005f80fcb7df6212" ++
    "30c83711b39343fa028cea7f7fb5ff89eac2308249a02252155e2347b63d58c5" ++
    "457afd84d05dfffdb20392844ae812154682e9cf012f9021a6f0be17ddd0c208" ++
    "4dce25ff9b06cde535d0f920a2db1bf362c23e596d11a4f5a6cf3948838a3aec" ++
    "4e15daf8500a6ef69ec4e3feb6b1d98e610ac8b7ec3faf6ad760b7bad1db4ba3" ++
    "485e8a94dc250ae3fdb41ed15fb6a8e5eba0fc3dd60bc8e30c5c4287e53805db" ++
    "059ae0648db2f64264ed5e39be2e20d82df566da8dd5998ccabdae053060ae6c" ++
    "7b4378e846d29f37ed7b4ea9ec5d82e7961b7f25a9323851f681d582363aa5f8" ++
    "9937f5a67258bf63ad6f1a0b1d96dbd4faddfcefc5266ba6611722395c906556" ++
    "be52afe3f565636ad1b17d508b73d8743eeb524be22b3dcbc2c7468d54119c74" ++
    "68449a13d8e3b95811a198f3491de3e7fe942b330407abf82a4ed7c1b311663a" ++
    "c69890f4157015853d91e923037c227a33cdd5ec281ca3f79c44546b9d90ca00" ++
    "f064c99e3dd97911d39fe9c5d0b23a229a234cb36186c4819e8b9c5927726632" ++
    "291d6a418211cc2962e20fe47feb3edf330f2c603a9d48c0fcb5699dbfe58964" ++
    "25c5bac4aee82e57a85aaf4e2513e4f05796b07ba2ee47d80506f8d2c25e50fd" ++
    "14de71e6c418559302f939b0e1abd576f279c4b2e0feb85c1f28ff18f58891ff" ++
    "ef132eef2fa09346aee33c28eb130ff28f5b766953334113211996d20011a198" ++
    "e3fc433f9f2541010ae17c1bf202580f6047472fb36857fe843b19f5984009dd" ++
    "c324044e847a4f4a0ab34f719595de37252d6235365e9b84392b061085349d73" ++
    "203a4a13e96f5432ec0fd4a1ee65accdd5e3904df54c1da510b0ff20dcc0c77f" ++
    "cb2c0e0eb605cb0504db87632cf3d8b4dae6e705769d1de354270123cb11450e" ++
    "fc60ac47683d7b8d0f811365565fd98c4c8eb936bcab8d069fc33bd801b03ade" ++
    "a2e1fbc5aa463d08ca19896d2bf59a071b851e6c239052172f296bfb5e724047" ++
    "90a2181014f3b94a4e97d117b438130368cc39dbb2d198065ae3986547926cd2" ++
    "162f40a29f0c3c8745c0f50fba3852e566d44575c29d39a03f0cda721984b6f4" ++
    "40591f355e12d439ff150aab7613499dbd49adabc8676eef023b15b65bfc5ca0" ++
    "6948109f23f350db82123535eb8a7433bdabcb909271a6ecbcb58b936a88cd4e" ++
    "8f2e6ff5800175f113253d8fa9ca8885c2f552e657dc603f252e1a8e308f76f0" ++
    "be79e2fb8f5d5fbbe2e30ecadd220723c8c0aea8078cdfcb3868263ff8f09400" ++
    "54da48781893a7e49ad5aff4af300cd804a6b6279ab3ff3afb64491c85194aab" ++
    "760d58a606654f9f4400e8b38591356fbf6425aca26dc85244259ff2b19c41b9" ++
    "f96f3ca9ec1dde434da7d2d392b905ddf3d1f9af93d1af5950bd493f5aa731b4" ++
    "056df31bd267b6b90a079831aaf579be0a39013137aac6d404f518cfd4684064" ++
    "7e78bfe706ca4cf5e9c5453e9f7cfd2b8b4c8d169a44e55c88d4a9a7f9474241" ++
    "e221af44860018ab0856972e194cd934";

pub const a3_header_hex = "c1000000010008f067a5502a4262b50040750001";
pub const a3_payload_hex =
    "02000000000600405a020000560303eefce7f7b37ba1d1632e96677825ddf739" ++
    "88cfc79825df566dc5430b9a045a1200130100002e00330024001d00209d3c94" ++
    "0d89690b84d08a60993c144eca684d1081287c834d5311bcf32bb9da1a002b00" ++
    "020304";
pub const a3_packet_hex =
    "cf000000010008f067a5502a4262b5004075c0d95a482cd0991cd25b0aac406a" ++
    "5816b6394100f37a1c69797554780bb38cc5a99f5ede4cf73c3ec2493a1839b3" ++
    "dbcba3f6ea46c5b7684df3548e7ddeb9c3bf9c73cc3f3bded74b562bfb19fb84" ++
    "022f8ef4cdd93795d77d06edbb7aaf2f58891850abbdca3d20398c276456cbc4" ++
    "2158407dd074ee";
