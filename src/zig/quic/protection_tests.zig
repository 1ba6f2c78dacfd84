//! protection.zig's tests: RFC 9001 Appendix A's packets byte for byte, header protection,
//! key updates (RFC 9001 6), the AEAD limits (6.6), and keys zeroed once dropped.
const p = @import("protection.zig");
const Allocator = std.mem.Allocator;
const Keys = p.Keys;
const OneRtt = p.OneRtt;
const a2_crypto_hex = p.a2_crypto_hex;
const a2_dcid = p.a2_dcid;
const a2_header_hex = p.a2_header_hex;
const a2_packet_hex = p.a2_packet_hex;
const a3_header_hex = p.a3_header_hex;
const a3_packet_hex = p.a3_packet_hex;
const a3_payload_hex = p.a3_payload_hex;
const aeadLimits = p.aeadLimits;
const initialKeys = p.initialKeys;
const initialSecrets = p.initialSecrets;
const packet = @import("packet.zig");
const protect = p.protect;
const std = @import("std");
const suite = @import("suite.zig");
const tag_len = p.tag_len;
const testing = std.testing;
const unprotect = p.unprotect;
const unprotectHeader = p.unprotectHeader;
const updateThreshold = p.updateThreshold;

test "RFC 9001 A.1: Initial secrets and keys of both sides" {
    const s = initialSecrets(&unhex(a2_dcid));
    try testing.expectEqualSlices(u8, &unhex("c00cf151ca5be075ed0ebfb5c80323c42d6b7db67881289af4008f1f6c357aea"), s.client.slice());
    try testing.expectEqualSlices(u8, &unhex("3c199828fd139efd216c155ad844cc81fb82fa8d7446fa7d78be803acdda951b"), s.server.slice());
    const k = initialKeys(&unhex(a2_dcid));
    try testing.expectEqualSlices(u8, &unhex("cf3a5331653c364c88f0f379b6067e37"), k.server.aead.key[0..16]);
    try testing.expectEqualSlices(u8, &unhex("0ac1493ca1905853b0bba03e"), &k.server.aead.iv);
    try testing.expectEqualSlices(u8, &unhex("c206b8d9b9f0f37644430b490eeaa314"), k.server.hp.key[0..16]);
    try testing.expectEqualSlices(u8, &unhex("437b9aec36"), &k.client.hp.mask(&unhex("d1b1c98dd7689fb8ec11d242b123dc9b")));
}

test "RFC 9001 A.2: the client Initial, protected byte for byte and opened again" {
    const keys = initialKeys(&unhex(a2_dcid)).client;
    const expected = unhex(a2_packet_hex);
    var buf = [_]u8{0} ** 1200;
    const header = unhex(a2_header_hex);
    @memcpy(buf[0..header.len], &header);
    const crypto = unhex(a2_crypto_hex);
    @memcpy(buf[header.len..][0..crypto.len], &crypto); // the rest stays PADDING
    const h = try packet.parse(&buf, 0);
    try testing.expectEqual(@as(usize, 18), h.pn_offset);
    try testing.expectEqual(@as(usize, 1200), h.len);
    protect(&keys, &buf, h.pn_offset, 2);
    try testing.expectEqualSlices(u8, &expected, &buf);

    var received = expected;
    const rh = try packet.parse(&received, 0);
    try testing.expectEqualStrings(&unhex(a2_dcid), rh.dcid);
    const opened = try unprotect(&keys, received[0..rh.len], rh.pn_offset, null);
    try testing.expectEqual(@as(u64, 2), opened.header.pn);
    try testing.expectEqual(@as(usize, 4), opened.header.pn_len);
    try testing.expectEqualSlices(u8, &header, received[0..opened.header.header_len]);
    try testing.expectEqual(@as(usize, 1162), opened.payload.len);
    try testing.expectEqualSlices(u8, &crypto, opened.payload[0..crypto.len]);
    try testing.expect(std.mem.allEqual(u8, opened.payload[crypto.len..], 0));
}

test "RFC 9001 A.3: the server Initial, protected byte for byte and opened again" {
    const keys = initialKeys(&unhex(a2_dcid)).server;
    const expected = unhex(a3_packet_hex);
    var buf: [expected.len]u8 = undefined;
    const header = unhex(a3_header_hex);
    const payload = unhex(a3_payload_hex);
    @memcpy(buf[0..header.len], &header);
    @memcpy(buf[header.len..][0..payload.len], &payload);
    const h = try packet.parse(&buf, 0);
    try testing.expectEqual(buf.len, h.len);
    protect(&keys, &buf, h.pn_offset, 1);
    try testing.expectEqualSlices(u8, &expected, &buf);
    // The same through the header builder: a server Initial with an empty token.
    var built: [expected.len]u8 = undefined;
    const b = try packet.writeLongHeader(&built, .{ .long_type = .initial, .dcid = "", .scid = &unhex("f067a5502a4262b5"), .pn = 1, .pn_len = 2 }, payload.len, tag_len);
    try testing.expectEqualSlices(u8, &header, built[0..b.header_len]);

    var received = expected;
    const opened = try unprotect(&keys, &received, h.pn_offset, 0);
    try testing.expectEqual(@as(u64, 1), opened.header.pn);
    try testing.expectEqualSlices(u8, &payload, opened.payload);
}

test "RFC 9001 A.5: a ChaCha20 short header packet, both ways" {
    const secret = suite.Secret.init(.chacha20_poly1305_sha256, &unhex("9ac312a7f877468ebe69422748ad00a15443f18203a07d6060f688f30f21632b"));
    const keys = Keys.init(&secret);
    try testing.expectEqualSlices(u8, &unhex("25a282b9e82f06f21f488917a4fc8f1b73573685608597d0efcb076b0ab7a7a4"), &keys.hp.key);
    try testing.expectEqualSlices(u8, &unhex("aefefe7d03"), &keys.hp.mask(&unhex("5e5cd55c41f69080575d7999c25a5bfb")));
    const expected = unhex("4cfe4189655e5cd55c41f69080575d7999c25a5bfb");
    var buf: [expected.len]u8 = undefined;
    const b = try packet.writeShortHeader(&buf, "", 654360564, 3, 0, false);
    try testing.expectEqualSlices(u8, &unhex("4200bff4"), buf[0..b.header_len]);
    buf[b.header_len] = 0x01; // PING
    protect(&keys, &buf, b.pn_offset, 654360564);
    try testing.expectEqualSlices(u8, &expected, &buf);

    var received = expected;
    const h = try packet.parse(&received, 0);
    const opened = try unprotect(&keys, &received, h.pn_offset, 654360563);
    try testing.expectEqual(@as(u64, 654360564), opened.header.pn);
    try testing.expectEqualSlices(u8, &.{0x01}, opened.payload);
}

test "unprotect refuses short packets, changed bytes and set reserved bits" {
    const keys = initialKeys(&unhex(a2_dcid)).client;
    const expected = unhex(a2_packet_hex);
    var buf = expected;
    try testing.expectError(error.Truncated, unprotect(&keys, buf[0 .. 18 + 19], 18, null));
    buf[1000] ^= 0x10;
    try testing.expectError(error.AuthenticationFailed, unprotect(&keys, &buf, 18, null));
    // A reserved bit set under protection: authenticated, then refused.
    var built = [_]u8{0} ** 64;
    const b = try packet.writeShortHeader(&built, "abcd", 9, 1, 0, false);
    built[0] |= 0x08;
    protect(&keys, built[0 .. b.header_len + 20], b.pn_offset, 9);
    try testing.expectError(error.ReservedBitsSet, unprotect(&keys, built[0 .. b.header_len + 20], b.pn_offset, 8));
}

test "AES-256 header protection round-trips" {
    var bytes: [48]u8 = undefined;
    for (&bytes, 0..) |*x, i| x.* = @truncate(i * 7);
    const keys = Keys.init(&suite.Secret.init(.aes_256_gcm_sha384, &bytes));
    var buf = [_]u8{0} ** 40;
    const b = try packet.writeShortHeader(&buf, "cid", 300, 2, 1, true);
    buf[b.header_len] = 0x01;
    protect(&keys, &buf, b.pn_offset, 300);
    const opened = try unprotect(&keys, &buf, b.pn_offset, 299);
    try testing.expectEqual(@as(u64, 300), opened.header.pn);
    try testing.expectEqual(@as(u1, 1), opened.header.keyPhase());
    try testing.expect(opened.header.first & packet.spin_bit != 0);
}

fn sendOneRtt(k: *OneRtt, buf: []u8, pn: u64) !usize {
    const b = try packet.writeShortHeader(buf, "", pn, 2, k.tx_phase, false);
    @memset(buf[b.header_len..][0..4], 0x01);
    const len = b.header_len + 4 + tag_len;
    k.protect(buf[0..len], b.pn_offset, pn);
    return len;
}

fn receiveOneRtt(k: *OneRtt, bytes: []u8, largest: ?u64) !u64 {
    const h = try unprotectHeader(&k.hp_rx, bytes, 1, largest);
    _ = try k.open(testing.allocator, bytes, &h);
    return h.pn;
}

test "RFC 9001 6: a key update started by either side, and a late packet of the old phase" {
    var c_secret: [32]u8 = undefined;
    var s_secret: [32]u8 = undefined;
    for (&c_secret, &s_secret, 0..) |*c, *s, i| {
        c.* = @intCast(i);
        s.* = @intCast(100 + i);
    }
    const cs = suite.Secret.init(.aes_128_gcm_sha256, &c_secret);
    const ss = suite.Secret.init(.aes_128_gcm_sha256, &s_secret);
    var client = OneRtt.init(&ss, &cs);
    defer client.deinit(testing.allocator);
    var server = OneRtt.init(&cs, &ss);
    defer server.deinit(testing.allocator);
    var buf: [64]u8 = undefined;
    var late: [64]u8 = undefined;

    // Phase 0 both ways; one client packet held back.
    var n = try sendOneRtt(&client, &buf, 0);
    try testing.expectEqual(@as(u64, 0), try receiveOneRtt(&server, buf[0..n], null));
    const late_len = try sendOneRtt(&client, &late, 1);
    // The client updates; the server follows on its first new-phase packet.
    try client.initiate();
    try testing.expectError(error.UpdateInProgress, client.initiate());
    n = try sendOneRtt(&client, &buf, 2);
    try testing.expectEqual(@as(u64, 2), try receiveOneRtt(&server, buf[0..n], 0));
    try testing.expectEqual(@as(u1, 1), server.rx_phase);
    try testing.expectEqual(@as(u1, 1), server.tx_phase);
    // The late phase-0 packet still opens, with the previous keys.
    try testing.expectEqual(@as(u64, 1), try receiveOneRtt(&server, late[0..late_len], 2));
    try testing.expectEqual(@as(u1, 1), server.rx_phase);
    server.discardPrevious(testing.allocator);
    try testing.expectEqual(@as(?*OneRtt.Update, null), server.update);
    // The server's answer moves the client's receive side; now the server updates.
    n = try sendOneRtt(&server, &buf, 0);
    try testing.expectEqual(@as(u64, 0), try receiveOneRtt(&client, buf[0..n], null));
    try testing.expectEqual(@as(u1, 1), client.rx_phase);
    client.onAckSent(0); // the client acknowledges it: the server may update again
    try server.initiate();
    n = try sendOneRtt(&server, &buf, 1);
    try testing.expectEqual(@as(u64, 1), try receiveOneRtt(&client, buf[0..n], 0));
    try testing.expectEqual(@as(u1, 0), client.tx_phase);
    n = try sendOneRtt(&client, &buf, 3);
    try testing.expectEqual(@as(u64, 3), try receiveOneRtt(&server, buf[0..n], 2));
    // A forged packet with the other phase bit fails and moves nothing.
    n = try sendOneRtt(&client, &buf, 4);
    buf[n - 1] ^= 1;
    try testing.expectError(error.AuthenticationFailed, receiveOneRtt(&server, buf[0..n], 3));
    try testing.expectEqual(@as(u1, 0), server.rx_phase);
}

test "RFC 9001 6.3: the next keys are made only when a packet with the other phase bit comes" {
    var c_secret: [32]u8 = undefined;
    var s_secret: [32]u8 = undefined;
    for (&c_secret, &s_secret, 0..) |*c, *s, i| {
        c.* = @intCast(200 - i);
        s.* = @intCast(7 * i);
    }
    const cs = suite.Secret.init(.chacha20_poly1305_sha256, &c_secret);
    const ss = suite.Secret.init(.chacha20_poly1305_sha256, &s_secret);
    var client = OneRtt.init(&ss, &cs);
    defer client.deinit(testing.allocator);
    var server = OneRtt.init(&cs, &ss);
    defer server.deinit(testing.allocator);
    var buf: [64]u8 = undefined;
    // No update yet: current keys only, nothing on the heap.
    var n = try sendOneRtt(&client, &buf, 0);
    try testing.expectEqual(@as(u64, 0), try receiveOneRtt(&server, buf[0..n], null));
    try testing.expectEqual(@as(?*OneRtt.Update, null), server.update);
    try testing.expectEqual(@as(u64, 0), server.rx_first_pn);
    // The client updates; without memory the packet is dropped and nothing moves.
    try client.initiate();
    n = try sendOneRtt(&client, &buf, 1);
    var copy: [64]u8 = undefined;
    @memcpy(copy[0..n], buf[0..n]);
    var failing = std.testing.FailingAllocator.init(testing.allocator, .{ .fail_index = 0 });
    const h = try unprotectHeader(&server.hp_rx, copy[0..n], 1, 0);
    try testing.expectError(error.OutOfMemory, server.open(failing.allocator(), copy[0..n], &h));
    try testing.expectEqual(@as(u1, 0), server.rx_phase);
    try testing.expectEqual(@as(?*OneRtt.Update, null), server.update);
    // With memory the record is made, the keys derived lazily equal the eager derivation,
    // and both sides move.
    try testing.expectEqual(@as(u64, 1), try receiveOneRtt(&server, buf[0..n], 0));
    try testing.expectEqual(@as(u1, 1), server.rx_phase);
    try testing.expectEqual(@as(u1, 1), server.tx_phase);
    const gen1 = cs.next();
    const gen2 = gen1.next();
    const u = server.update orelse return error.TestUnexpectedResult;
    try testing.expectEqualDeep(suite.Aead.init(&gen1, .quic), server.rx);
    try testing.expectEqualDeep(suite.Aead.init(&cs, .quic), u.previous.?);
    try testing.expectEqualDeep(suite.Aead.init(&gen2, .quic), u.next); // made ahead
    // Discarding the previous keys gives the record back; the next update makes it again.
    server.discardPrevious(testing.allocator);
    try testing.expectEqual(@as(?*OneRtt.Update, null), server.update);
    n = try sendOneRtt(&server, &buf, 0);
    try testing.expectEqual(@as(u64, 0), try receiveOneRtt(&client, buf[0..n], null));
    server.onAckSent(1);
    try client.initiate();
    n = try sendOneRtt(&client, &buf, 2);
    try testing.expectEqual(@as(u64, 2), try receiveOneRtt(&server, buf[0..n], 1));
    try testing.expectEqual(@as(u1, 0), server.rx_phase);
    try testing.expectEqualDeep(suite.Aead.init(&gen2, .quic), server.rx);
    try testing.expect(server.update != null);
}

test "RFC 9001 6.6: the limits of each suite, and the update 1/8 before the confidentiality one" {
    try testing.expectEqual(@as(u64, 1 << 23), aeadLimits(.aes_128_gcm_sha256).confidentiality);
    try testing.expectEqual(@as(u64, 1 << 23), aeadLimits(.aes_256_gcm_sha384).confidentiality);
    try testing.expectEqual(@as(u64, 1 << 52), aeadLimits(.aes_128_gcm_sha256).integrity);
    try testing.expectEqual(@as(u64, 1 << 52), aeadLimits(.aes_256_gcm_sha384).integrity);
    try testing.expectEqual(@as(u64, 1 << 36), aeadLimits(.chacha20_poly1305_sha256).integrity);
    const chacha = aeadLimits(.chacha20_poly1305_sha256);
    try testing.expectEqual(@as(u64, 1 << 62), chacha.confidentiality);
    try testing.expectEqual(@as(u64, (1 << 23) - (1 << 20)), updateThreshold(1 << 23));
    try testing.expectEqual(@as(u64, 14), updateThreshold(16));
    try testing.expectEqual(@as(u64, 1), updateThreshold(1));
}

fn testPair(s: suite.Suite) struct { client: OneRtt, server: OneRtt } {
    var c_secret: [suite.max_secret_len]u8 = undefined;
    var s_secret: [suite.max_secret_len]u8 = undefined;
    for (&c_secret, &s_secret, 0..) |*c, *x, i| {
        c.* = @intCast(i + 1);
        x.* = @intCast(90 + i);
    }
    const cs = suite.Secret.init(s, c_secret[0..s.secretLen()]);
    const ss = suite.Secret.init(s, s_secret[0..s.secretLen()]);
    return .{ .client = OneRtt.init(&ss, &cs), .server = OneRtt.init(&cs, &ss) };
}

fn receiveAt(k: *OneRtt, bytes: []u8, largest: ?u64, now_us: u64, keep_us: u64) !u64 {
    const h = try unprotectHeader(&k.hp_rx, bytes, 1, largest);
    const at: OneRtt.At = .{ .now_us = now_us, .keep_previous_us = keep_us };
    _ = try k.openAt(testing.allocator, bytes, &h, at);
    return h.pn;
}

test "RFC 9001 6.5: late packets of the old phase open until the deadline, not after" {
    var pair = testPair(.aes_128_gcm_sha256);
    defer pair.client.deinit(testing.allocator);
    defer pair.server.deinit(testing.allocator);
    const client = &pair.client;
    const server = &pair.server;
    var late: [3][64]u8 = undefined;
    var late_len: [3]usize = undefined;
    for (0..3) |i| late_len[i] = try sendOneRtt(client, &late[i], i); // phase 0, held back
    try client.initiate();
    var buf: [64]u8 = undefined;
    const n = try sendOneRtt(client, &buf, 3);
    const keep_us = 300_000;
    const t0 = 1_000_000;
    try testing.expectEqual(@as(u64, 3), try receiveAt(server, buf[0..n], null, t0, keep_us));
    try testing.expectEqual(@as(?u64, 1_000_000 + keep_us), server.previousDeadline());
    // Within the window: the previous keys open them, and nothing moves.
    const first = late[0][0..late_len[0]];
    try testing.expectEqual(@as(u64, 0), try receiveAt(server, first, 3, t0, keep_us));
    const just_before = 1_000_000 + keep_us - 1;
    const second = late[1][0..late_len[1]];
    try testing.expectEqual(@as(u64, 1), try receiveAt(server, second, 3, just_before, keep_us));
    try testing.expectEqual(@as(u1, 1), server.rx_phase);
    try testing.expectEqual(@as(u64, 0), server.auth_failures);
    // At the deadline the previous keys are gone (zeroed with their record): the next keys
    // are tried and fail.
    const at = 1_000_000 + keep_us;
    const bytes = late[2][0..late_len[2]];
    try testing.expectError(error.AuthenticationFailed, receiveAt(server, bytes, 3, at, keep_us));
    try testing.expectEqual(@as(?u64, null), server.previousDeadline());
    try testing.expectEqual(@as(u64, 1), server.auth_failures);
    try testing.expectEqual(@as(u1, 1), server.rx_phase);
}

test "RFC 9001 6.2: the peer updating again before our ACK of its update is KEY_UPDATE_ERROR" {
    for ([_]bool{ false, true }) |acked| {
        var pair = testPair(.chacha20_poly1305_sha256);
        defer pair.client.deinit(testing.allocator);
        defer pair.server.deinit(testing.allocator);
        const client = &pair.client;
        const server = &pair.server;
        var buf: [64]u8 = undefined;
        try client.initiate();
        var n = try sendOneRtt(client, &buf, 0);
        try testing.expectEqual(@as(u64, 0), try receiveOneRtt(server, buf[0..n], null));
        try testing.expect(!server.rx_update_acked);
        // The server's answer reaches the client (phase 1 both ways now).
        n = try sendOneRtt(server, &buf, 0);
        if (acked) server.onAckSent(0);
        try testing.expectEqual(@as(u64, 0), try receiveOneRtt(client, buf[0..n], null));
        // The client updates again (a peer that did not wait for the ACK, RFC 9001 6.1).
        try client.initiate();
        n = try sendOneRtt(client, &buf, 1);
        if (acked) {
            try testing.expectEqual(@as(u64, 1), try receiveOneRtt(server, buf[0..n], 0));
            try testing.expectEqual(@as(u1, 0), server.rx_phase);
        } else {
            try testing.expectError(error.KeyUpdateError, receiveOneRtt(server, buf[0..n], 0));
            try testing.expectEqual(@as(u1, 1), server.rx_phase);
            try testing.expectEqual(@as(u1, 1), server.tx_phase);
        }
    }
}

test "RFC 9001 6.1: when this side may start an update" {
    var pair = testPair(.aes_256_gcm_sha384);
    defer pair.client.deinit(testing.allocator);
    defer pair.server.deinit(testing.allocator);
    const client = &pair.client;
    const server = &pair.server;
    var buf: [64]u8 = undefined;
    // Nothing sealed, or nothing acknowledged: not yet.
    try testing.expect(!server.mayInitiate(null));
    for (5..8) |pn| _ = try sendOneRtt(server, &buf, pn);
    try testing.expectEqual(@as(u64, 3), server.tx_sealed);
    try testing.expectEqual(@as(u64, 5), server.tx_first_pn);
    try testing.expect(!server.mayInitiate(null));
    try testing.expect(!server.mayInitiate(4)); // an older phase's packet
    try testing.expect(server.mayInitiate(5));
    try server.initiate();
    try testing.expectEqual(@as(u64, 0), server.tx_sealed);
    // Not answered yet: no second update, whatever is acknowledged.
    var n = try sendOneRtt(server, &buf, 8);
    try testing.expect(!server.mayInitiate(8));
    try testing.expectEqual(@as(u64, 8), try receiveOneRtt(client, buf[0..n], 7));
    n = try sendOneRtt(client, &buf, 0);
    try testing.expectEqual(@as(u64, 0), try receiveAt(server, buf[0..n], null, 0, 1000));
    // Answered, but the previous receive keys are still kept (RFC 9001 6.5).
    try testing.expect(server.previousDeadline() != null);
    try testing.expect(!server.mayInitiate(8));
    server.discardPrevious(testing.allocator);
    try testing.expect(server.mayInitiate(8));
    try testing.expect(!server.mayInitiate(7));
}

/// An allocator that records the bytes of the last block given back, before giving it.
const Capture = struct {
    child: Allocator,
    last: [512]u8 = undefined,
    last_len: usize = 0,

    fn allocator(self: *Capture) Allocator {
        const vtable: Allocator.VTable = .{
            .alloc = alloc,
            .resize = Allocator.noResize,
            .remap = Allocator.noRemap,
            .free = free,
        };
        return .{ .ptr = self, .vtable = &vtable };
    }

    fn alloc(ctx: *anyopaque, len: usize, alignment: std.mem.Alignment, ret: usize) ?[*]u8 {
        const self: *Capture = @ptrCast(@alignCast(ctx));
        return self.child.rawAlloc(len, alignment, ret);
    }

    fn free(ctx: *anyopaque, memory: []u8, alignment: std.mem.Alignment, ret: usize) void {
        const self: *Capture = @ptrCast(@alignCast(ctx));
        const n = @min(memory.len, self.last.len);
        @memcpy(self.last[0..n], memory[0..n]);
        self.last_len = n;
        self.child.rawFree(memory, alignment, ret);
    }
};

test "every 1-RTT key and secret is zero once dropped, the update record's before it is freed" {
    var capture: Capture = .{ .child = testing.allocator };
    var pair = testPair(.aes_256_gcm_sha384);
    defer pair.client.deinit(testing.allocator);
    const server = &pair.server;
    var buf: [64]u8 = undefined;
    try pair.client.initiate();
    const n = try sendOneRtt(&pair.client, &buf, 0);
    const h = try unprotectHeader(&server.hp_rx, buf[0..n], 1, null);
    _ = try server.openAt(capture.allocator(), buf[0..n], &h, .{ .keep_previous_us = 10 });
    const u = server.update.?;
    try testing.expect(!std.mem.allEqual(u8, &u.next.key, 0));
    try testing.expect(!std.mem.allEqual(u8, &u.previous.?.key, 0));
    server.deinit(capture.allocator());
    // The record, as it was when freed.
    try testing.expectEqual(@sizeOf(OneRtt.Update), capture.last_len);
    var record: OneRtt.Update = undefined;
    @memcpy(std.mem.asBytes(&record), capture.last[0..@sizeOf(OneRtt.Update)]);
    for ([_]suite.Aead{ record.next, record.previous.? }) |a| {
        try testing.expect(std.mem.allEqual(u8, &a.key, 0));
        try testing.expect(std.mem.allEqual(u8, &a.iv, 0));
    }
    // The inline keys and secrets.
    for ([_]*const suite.Aead{ &server.rx, &server.tx }) |a| {
        try testing.expect(std.mem.allEqual(u8, &a.key, 0));
        try testing.expect(std.mem.allEqual(u8, &a.iv, 0));
    }
    try testing.expect(std.mem.allEqual(u8, &server.hp_rx.key, 0));
    try testing.expect(std.mem.allEqual(u8, &server.hp_tx.key, 0));
    try testing.expect(std.mem.allEqual(u8, &server.rx_next_secret.bytes, 0));
    try testing.expect(std.mem.allEqual(u8, &server.tx_secret.bytes, 0));
    // The client's were not dropped: the check sees keys where they are.
    try testing.expect(!std.mem.allEqual(u8, &pair.client.tx.key, 0));
}

test "Keys.wipe and Secret.wipe zero what they hold" {
    var s = initialSecrets("\x83\x94\xc8\xf0\x3e\x51\x57\x08");
    var k = Keys.init(&s.client);
    try testing.expect(!std.mem.allEqual(u8, s.client.slice(), 0));
    try testing.expect(!std.mem.allEqual(u8, k.aead.key[0..16], 0));
    s.client.wipe();
    k.wipe();
    try testing.expect(std.mem.allEqual(u8, &s.client.bytes, 0));
    try testing.expect(std.mem.allEqual(u8, &k.aead.key, 0));
    try testing.expect(std.mem.allEqual(u8, &k.aead.iv, 0));
    try testing.expect(std.mem.allEqual(u8, &k.hp.key, 0));
}

fn receiveAfter(k: *OneRtt, bytes: []u8, largest: ?u64) !u64 {
    const h = try unprotectHeader(&k.hp_rx, bytes, 1, largest);
    _ = try k.openAt(testing.allocator, bytes, &h, .{ .largest_received = largest });
    return h.pn;
}

test "RFC 9001 6.3: older keys on a larger packet number than newer ones are KEY_UPDATE_ERROR" {
    var pair = testPair(.aes_128_gcm_sha256);
    defer pair.client.deinit(testing.allocator);
    defer pair.server.deinit(testing.allocator);
    const client = &pair.client;
    const server = &pair.server;
    var old: [2][64]u8 = undefined;
    var old_len: [2]usize = undefined;
    var new: [4][64]u8 = undefined;
    var new_len: [4]usize = undefined;
    for ([_]u64{ 5, 8 }, 0..) |pn, i| old_len[i] = try sendOneRtt(client, &old[i], pn);
    try client.initiate();
    for ([_]u64{ 4, 7, 9, 10 }, 0..) |pn, i| new_len[i] = try sendOneRtt(client, &new[i], pn);
    // Phase 0 up to 5; a phase 1 packet numbered 4 would move below it: refused, nothing moves.
    try testing.expectEqual(@as(u64, 5), try receiveAfter(server, old[0][0..old_len[0]], null));
    try testing.expectError(error.KeyUpdateError, receiveAfter(server, new[0][0..new_len[0]], 5));
    try testing.expectEqual(@as(u1, 0), server.rx_phase);
    // The update at 10; 8 of the old phase opens with the previous keys.
    try testing.expectEqual(@as(u64, 10), try receiveAfter(server, new[3][0..new_len[3]], 5));
    try testing.expectEqual(@as(u64, 8), try receiveAfter(server, old[1][0..old_len[1]], 10));
    // New keys at 9 (above 8): fine; at 7 (below the old keys' 8): KEY_UPDATE_ERROR.
    try testing.expectEqual(@as(u64, 9), try receiveAfter(server, new[2][0..new_len[2]], 10));
    try testing.expectError(error.KeyUpdateError, receiveAfter(server, new[1][0..new_len[1]], 10));
}

fn unhex(comptime s: []const u8) [s.len / 2]u8 {
    @setEvalBranchQuota(100_000);
    var out: [s.len / 2]u8 = undefined;
    _ = std.fmt.hexToBytes(&out, s) catch unreachable;
    return out;
}
