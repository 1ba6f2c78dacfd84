//! Key updates and the AEAD limits (RFC 9001 6, 6.6) through `connection_tests.zig`'s
//! harness: the server's own updates before a lowered confidentiality limit, the previous
//! keys' three PTOs, KEY_UPDATE_ERROR, AEAD_LIMIT_REACHED, and no key left in freed memory.
const std = @import("std");
const testing = std.testing;
const connection = @import("connection.zig");
const openssl = @import("../transport/openssl.zig");
const Connection = connection.Connection;
const frames = @import("frames.zig");
const packet = @import("packet.zig");
const protection = @import("protection.zig");
const suite = @import("suite.zig");
const varint = @import("varint.zig");
const Scan = @import("scan_allocator.zig").Scan;
const harness = @import("connection_tests.zig");
const T = harness.T;
const our_cid = harness.our_cid;
const client_cid = harness.client_cid;
const odcid = harness.odcid;
const context = harness.context;
const TE = frames.TransportError;

/// A client 1-RTT packet with a PING and, when given, an ACK of our packets 0..largest (the
/// client's keys are told: it may then update again, RFC 9001 6.2).
fn pingAck(t: *T, pn: u64, largest: ?u64) []u8 {
    var payload: [32]u8 = undefined;
    var w: varint.Writer = .{ .buf = &payload };
    frames.write(&w, .ping) catch unreachable;
    if (largest) |l| {
        frames.writeAck(&w, &.{.{ .smallest = 0, .largest = l }}, 0, 3, null) catch unreachable;
        t.client_1rtt.?.onAckSent(l);
    }
    return t.oneRtt(pn, w.written());
}

test "connection: the server updates its keys before a lowered confidentiality limit, again" {
    var t: T = undefined;
    try t.init(.{ .confidentiality_limit = 256 });
    defer t.deinit();
    t.establish();
    // Our packets are ACK-only: no RTT sample, so the PTO stays the initial 1 s and the
    // previous keys stay 3 s after each update; at 30 ms a packet the update at 224 comes
    // well after that.
    var largest: ?u64 = null;
    var phase: u1 = 0;
    var run: u64 = 0; // our packets in the current phase
    var updates: usize = 0;
    var pn: u64 = 0;
    while (pn < 1000) : (pn += 1) {
        t.feed(pingAck(&t, pn, largest));
        t.now_us += 30_000; // past our ACK delay
        t.c.onTimeout(t.now_us);
        const d = t.next() orelse continue;
        const p = try t.open(d); // the client follows our updates
        _ = p;
        const ours = t.c.next_pn[2] - 1;
        largest = ours;
        const bit: u1 = @intFromBool(d[0] & packet.key_phase_bit != 0); // unmasked by open
        if (bit != phase) {
            // RFC 9001 6.6: before the limit, at 7/8 of it; 6.1: the previous update done.
            try testing.expect(run <= 256);
            if (updates == 0) try testing.expectEqual(@as(u64, 224), run);
            phase = bit;
            run = 0;
            updates += 1;
        }
        run += 1;
        try testing.expect(run <= 256);
    }
    try testing.expectEqual(connection.State.established, t.c.state);
    try testing.expect(updates >= 3);
    // The client answered each: its send phase is ours.
    try testing.expectEqual(t.c.one_rtt.?.tx_phase, t.client_1rtt.?.tx_phase);
}

test "connection: at the limit the previous keys go early rather than the connection" {
    var t: T = undefined;
    try t.init(.{ .confidentiality_limit = 16 });
    defer t.deinit();
    t.establish();
    // The previous keys would stay 3 s (three initial PTOs) after each update, longer than
    // 16 packets at 30 ms: each update after the first comes at the limit, not past it.
    var largest: ?u64 = null;
    var phase: u1 = 0;
    var run: u64 = 0;
    var runs: [8]u64 = undefined;
    var updates: usize = 0;
    var pn: u64 = 0;
    while (pn < 80) : (pn += 1) {
        t.feed(pingAck(&t, pn, largest));
        t.now_us += 30_000;
        t.c.onTimeout(t.now_us);
        const d = t.next() orelse continue;
        _ = try t.open(d);
        largest = t.c.next_pn[2] - 1;
        const bit: u1 = @intFromBool(d[0] & packet.key_phase_bit != 0);
        if (bit != phase) {
            if (updates < runs.len) runs[updates] = run;
            phase = bit;
            run = 0;
            updates += 1;
        }
        run += 1;
        try testing.expect(run <= 16);
    }
    try testing.expectEqual(connection.State.established, t.c.state);
    try testing.expect(updates >= 3);
    try testing.expectEqual(@as(u64, 14), runs[0]); // 7/8 of 16: the keys were free then
    try testing.expectEqual(@as(u64, 16), runs[1]); // the previous keys went early
    try testing.expectEqual(@as(u64, 16), runs[2]);
}

test "connection: with the peer silent at the confidentiality limit the connection stops" {
    var t: T = undefined;
    try t.init(.{ .confidentiality_limit = 8 });
    defer t.deinit();
    t.establish();
    // Our packets are never acknowledged: no update may start (RFC 9001 6.1).
    var sent: u64 = 0;
    var pn: u64 = 0;
    while (pn < 40 and !t.c.isClosed()) : (pn += 1) {
        t.feed(pingAck(&t, pn, null));
        t.now_us += 30_000;
        t.c.onTimeout(t.now_us);
        if (t.next() != null) sent += 1;
    }
    try testing.expect(t.c.isClosed());
    try testing.expectEqual(@as(u64, 8), sent);
    try testing.expectEqual(@as(u64, 8), t.c.one_rtt.?.tx_sealed);
    try testing.expectEqual(@as(u1, 0), t.c.one_rtt.?.tx_phase);
    const closed: connection.Event = .{ .closed = .{ .code = 0x0f, .app = false } };
    try testing.expectEqual(closed, t.c.nextEvent().?);
}

test "connection: failed packets past a lowered integrity limit close with AEAD_LIMIT_REACHED" {
    var t: T = undefined;
    try t.init(.{ .integrity_limit = 3 });
    defer t.deinit();
    t.establish();
    for (0..4) |i| {
        try testing.expectEqual(connection.State.established, t.c.state);
        const d = t.oneRtt(i, "\x01\x01\x01\x01");
        d[d.len - 1] ^= 0x40;
        t.feed(d);
    }
    try testing.expectEqual(@as(u64, 4), t.c.one_rtt.?.auth_failures);
    try testing.expectEqual(connection.State.closing, t.c.state);
    try testing.expectEqual(@intFromEnum(TE.aead_limit_reached), try t.closeCode());
}

test "connection: a client updating twice before our ACK of its update is KEY_UPDATE_ERROR" {
    for ([_]bool{ false, true }) |acked| {
        var t: T = undefined;
        try t.init(.{});
        defer t.deinit();
        t.establish();
        try t.client_1rtt.?.initiate();
        t.feed(t.oneRtt(0, "\x01"));
        try testing.expectEqual(@as(u1, 1), t.c.one_rtt.?.rx_phase);
        if (acked) {
            t.now_us += 30_000;
            t.c.onTimeout(t.now_us);
            try testing.expect(try t.sends(.ack));
        }
        // The client's third generation, without it having seen our answer.
        const secret = suite.Secret.init(.aes_128_gcm_sha256, &([_]u8{1} ** 32));
        const gen1 = secret.next();
        const gen2 = gen1.next();
        const keys: protection.Keys = .{
            .aead = suite.Aead.init(&gen2, .quic),
            .hp = protection.HeaderKey.init(&secret),
        };
        const built = try packet.writeShortHeader(&t.buf, our_cid, 1, 4, 0, false);
        t.buf[built.header_len] = 0x01;
        const len = built.header_len + 1 + protection.tag_len;
        protection.protect(&keys, t.buf[0..len], built.pn_offset, 1);
        t.feed(t.buf[0..len]);
        if (acked) {
            try testing.expectEqual(connection.State.established, t.c.state);
            try testing.expectEqual(@as(u1, 0), t.c.one_rtt.?.rx_phase);
        } else {
            try testing.expectEqual(@intFromEnum(TE.key_update_error), try t.closeCode());
        }
    }
}

test "connection: old-phase packets open for three PTOs after the client's update, not after" {
    var t: T = undefined;
    try t.init(.{});
    defer t.deinit();
    t.establish();
    var held: [2][64]u8 = undefined;
    var held_len: [2]usize = undefined;
    for (0..2, [_][]const u8{ "\x08\x00", "\x08\x04" }) |i, frame| {
        const d = t.oneRtt(i, frame); // STREAM 0, then STREAM 4: held back
        @memcpy(held[i][0..d.len], d);
        held_len[i] = d.len;
    }
    try t.client_1rtt.?.initiate();
    t.feed(t.oneRtt(2, "\x01"));
    const until = t.now_us + 3 * t.c.ptoUs();
    try testing.expectEqual(@as(?u64, until), t.c.one_rtt.?.previousDeadline());
    try testing.expect(t.c.nextDeadline().? <= until);
    // Within the window: opened with the previous keys.
    t.now_us = until - 1;
    t.feed(held[0][0..held_len[0]]);
    try testing.expect(t.c.findStream(0) != null);
    // The deadline drops them (zeroed); a late packet then fails and opens nothing.
    t.now_us = until;
    t.c.onTimeout(t.now_us);
    try testing.expectEqual(@as(?u64, null), t.c.one_rtt.?.previousDeadline());
    t.feed(held[1][0..held_len[1]]);
    try testing.expect(t.c.findStream(4) == null);
    try testing.expectEqual(@as(u64, 1), t.c.one_rtt.?.auth_failures);
    try testing.expectEqual(connection.State.established, t.c.state);
}

test "connection: no freed block holds an Initial or 1-RTT key, IV, header key or secret" {
    const initial = protection.initialKeys(odcid);
    const cs = suite.Secret.init(.aes_128_gcm_sha256, &([_]u8{5} ** 32));
    const ss = suite.Secret.init(.aes_128_gcm_sha256, &([_]u8{6} ** 32));
    const cs1 = cs.next();
    const cs2 = cs1.next();
    var aeads: [5]suite.Aead = undefined;
    const secrets = [_]*const suite.Secret{ &cs, &cs1, &cs2, &ss };
    for (secrets, 0..) |s, i| aeads[i] = suite.Aead.init(s, .quic);
    const hp_c = protection.HeaderKey.init(&cs);
    const hp_s = protection.HeaderKey.init(&ss);
    const needles = [_][]const u8{
        initial.client.aead.key[0..16], &initial.client.aead.iv, initial.client.hp.key[0..16],
        initial.server.aead.key[0..16], &initial.server.aead.iv, initial.server.hp.key[0..16],
        aeads[0].key[0..16],            &aeads[0].iv,            aeads[1].key[0..16],
        &aeads[1].iv,                   aeads[2].key[0..16],     &aeads[2].iv,
        aeads[3].key[0..16],            &aeads[3].iv,            hp_c.key[0..16],
        hp_s.key[0..16],                cs1.slice(),             cs2.slice(),
        ss.slice(),
    };
    var scan: Scan = .{ .child = testing.allocator, .needles = &needles };
    const a = scan.allocator();
    // The check sees a key left in a freed block.
    const probe = try a.create([64]u8);
    @memcpy(probe[8..][0..16], aeads[1].key[0..16]);
    a.destroy(probe);
    try testing.expectEqual(@as(usize, 1), scan.hits);
    scan.hits = 0;

    const ctx = try context();
    defer openssl.freeContext(ctx);
    const config: connection.Config = .{};
    const now = 1_000_000;
    const c = Connection.init(a, &config, null, ctx, odcid, client_cid, our_cid, now, null) orelse
        return error.OutOfMemory;
    const k = try a.create(protection.OneRtt);
    k.* = protection.OneRtt.init(&cs, &ss);
    c.one_rtt = k;
    // A client update makes the record with the next and previous keys.
    var client = protection.OneRtt.init(&ss, &cs);
    defer client.deinit(testing.allocator);
    try client.initiate();
    var buf: [64]u8 = undefined;
    const built = try packet.writeShortHeader(&buf, our_cid, 0, 4, 1, false);
    buf[built.header_len] = 0x01;
    const len = built.header_len + 1 + protection.tag_len;
    client.protect(buf[0..len], built.pn_offset, 0);
    const h = try protection.unprotectHeader(&k.hp_rx, buf[0..len], built.pn_offset, null);
    _ = try k.open(a, buf[0..len], &h);
    try testing.expect(k.update.?.previous != null);
    c.discardInitial();
    c.deinit();
    try testing.expect(scan.frees >= 4);
    try testing.expectEqual(@as(usize, 0), scan.hits);
}
