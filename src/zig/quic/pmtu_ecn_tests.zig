//! Path MTU discovery and ECN through the connection (`pmtu.zig` and `ecn.zig` hold the rules
//! and their own unit tests): hand-built client packets against the server's datagrams, the
//! handshake skipped as in connection_tests.zig.
const std = @import("std");
const testing = std.testing;
const ct = @import("connection_tests.zig");
const T = ct.T;
const pmtu = @import("pmtu.zig");
const connection = @import("connection.zig");
const conn_receive = @import("conn_receive.zig");
const transport_params = @import("transport_params.zig");
const frames = @import("frames.zig");
const packet = @import("packet.zig");
const protection = @import("protection.zig");
const varint = @import("varint.zig");

/// The client's parameters with its max_udp_payload_size; the windows open.
fn applyPeer(t: *T, max_udp_payload: u64) void {
    const p: transport_params.Params = .{
        .initial_source_connection_id = transport_params.Cid.init(ct.client_cid),
        .max_udp_payload_size = max_udp_payload,
        .initial_max_data = 1 << 24,
        .initial_max_stream_data_bidi_local = 1 << 24,
        .initial_max_streams_uni = 3,
    };
    conn_receive.applyParams(t.c, &p);
}

const Seen = struct {
    pn: u64,
    len: usize,
    ping: bool,
    stream: bool,
    ecn: ?frames.Ecn = null,
    ack: bool = false,
};

/// Our next datagram (one 1-RTT packet): its number, size and what it carried.
fn next(t: *T) !?Seen {
    const d = t.next() orelse return null;
    const h = try packet.parse(d, ct.client_cid.len);
    const k = &t.client_1rtt.?;
    const hdr = try protection.unprotectHeader(&k.hp_rx, d[0..h.len], h.pn_offset, null);
    const payload = try k.open(testing.allocator, d[0..h.len], &hdr);
    var s: Seen = .{ .pn = hdr.pn, .len = d.len, .ping = false, .stream = false };
    var it = frames.Iterator.init(payload, .one_rtt, .server);
    while (try it.next()) |f| switch (f) {
        .ping => s.ping = true,
        .stream => s.stream = true,
        .ack => |a| {
            s.ack = true;
            s.ecn = a.ecn;
        },
        else => {},
    };
    return s;
}

var client_pn: u64 = 0;

/// The client acknowledges `ranges` (largest first) with these ECN counts.
fn ack(t: *T, ranges: []const frames.AckRange, counts: ?frames.Ecn) void {
    var buf: [256]u8 = undefined;
    var w: varint.Writer = .{ .buf = &buf };
    frames.writeAck(&w, ranges, 0, 3, counts) catch unreachable;
    client_pn += 1;
    t.feed(t.oneRtt(client_pn, buf[0..w.pos]));
}

/// Stream 0 opened by the client, and `n` bytes of response queued on it.
fn respond(t: *T, n: usize) !void {
    if (t.c.findStream(0) == null) {
        client_pn += 1;
        t.feed(t.oneRtt(client_pn, "\x08\x00")); // STREAM 0, empty
    }
    const bytes = [_]u8{'r'} ** 16384;
    try testing.expectEqual(n, try t.c.streamWrite(0, bytes[0..n], false));
}

/// The probe due now, acknowledged: its size.
fn probeAcked(t: *T) !?usize {
    const s = (try next(t)) orelse return null;
    if (!s.ping or s.stream) return null;
    ack(t, &.{.{ .smallest = s.pn, .largest = s.pn }}, null);
    return s.len;
}

fn start(t: *T, config: connection.Config, peer_max: u64) !void {
    client_pn = 0;
    try t.init(config);
    t.establish();
    applyPeer(t, peer_max);
    // No probe before the client acknowledged our HANDSHAKE_DONE, which goes marked
    // ECT(0) (the first testing packet) and is acknowledged with its count: ECN capable.
    t.c.handshake_done_owed = true;
    const done = (try next(t)).?;
    try testing.expect(!done.ping and done.len < 1200);
    try testing.expectEqual(@as(u2, if (config.ecn) 2 else 0), t.c.ecnToSend());
    const counts: ?frames.Ecn = if (config.ecn) .{ .ect0 = 1, .ect1 = 0, .ce = 0 } else null;
    ack(t, &.{.{ .smallest = done.pn, .largest = done.pn }}, counts);
    const want: connection.ecn.Validation = if (config.ecn) .capable else .failed;
    try testing.expectEqual(want, t.c.ecn.validation);
}

test "pmtu: acknowledged probes raise the datagram size, for the congestion controller too" {
    var t: T = undefined;
    try start(&t, .{}, 65527);
    defer t.deinit();
    try testing.expectEqual(@as(u16, 1200), t.c.datagramSize());
    var sizes: [8]usize = undefined;
    var n: usize = 0;
    while (try probeAcked(&t)) |size| : (n += 1) sizes[n] = size;
    try testing.expectEqualSlices(usize, &.{ 1452, 1472, 1500 }, sizes[0..n]);
    try testing.expectEqual(@as(u16, 1500), t.c.datagramSize());
    try testing.expectEqual(@as(u16, 1500), t.c.recovery.cc.max_datagram_bytes);
    // The response now goes in 1,500-byte datagrams.
    try respond(&t, 4000);
    const s = (try next(&t)).?;
    try testing.expect(s.stream);
    try testing.expectEqual(@as(usize, 1500), s.len);
}

test "pmtu: a lost probe is no congestion event, and three losses narrow the search" {
    var t: T = undefined;
    try start(&t, .{}, 65527);
    defer t.deinit();
    for (0..pmtu.probes_per_size_max) |_| {
        const probe = (try next(&t)).?;
        try testing.expect(probe.ping and probe.len == 1452);
        // Data after it, acknowledged: the probe is lost by the packet threshold.
        try respond(&t, 3600);
        var first: ?u64 = null;
        var last: u64 = 0;
        while (try next(&t)) |s| {
            if (first == null) first = s.pn;
            last = s.pn;
        }
        try testing.expect(last >= first.? + 2);
        const cwnd = t.c.recovery.cc.cwnd_bytes;
        t.now_us += 10_000;
        ack(&t, &.{.{ .smallest = first.?, .largest = last }}, null);
        try testing.expect(!t.c.recovery.cc.in_recovery_period);
        try testing.expect(t.c.recovery.cc.cwnd_bytes >= cwnd);
        try testing.expectEqual(@as(u16, 1200), t.c.datagramSize());
    }
    // 1,452 failed: the search goes below it.
    try testing.expectEqual(@as(?usize, 1252), try probeAcked(&t));
    try testing.expectEqual(@as(?usize, 1350), try probeAcked(&t));
    try testing.expectEqual(@as(?usize, null), try probeAcked(&t));
    try testing.expectEqual(@as(u16, 1350), t.c.datagramSize());
}

test "pmtu: the peer's max_udp_payload_size holds at its exact value" {
    for ([_]u64{ 1200, 1471, 1472, 1473 }) |peer_max| {
        var t: T = undefined;
        try start(&t, .{}, peer_max);
        defer t.deinit();
        while (try probeAcked(&t)) |size| try testing.expect(size <= peer_max);
        try testing.expectEqual(peer_max, t.c.datagramSize());
        try respond(&t, 4000);
        const s = (try next(&t)).?;
        try testing.expectEqual(@as(usize, @intCast(peer_max)), s.len);
    }
}

test "pmtu: a black hole falls back to 1,200; repeated PTOs probe at 1,200" {
    var t: T = undefined;
    try start(&t, .{}, 65527);
    defer t.deinit();
    while (try probeAcked(&t)) |_| {}
    try testing.expectEqual(@as(u16, 1500), t.c.datagramSize());
    // Large packets sent later are lost; a small one after them is acknowledged.
    t.now_us += 10_000;
    try respond(&t, 4400); // three full datagrams
    var large: [3]u64 = undefined;
    for (&large) |*pn| {
        const s = (try next(&t)).?;
        try testing.expectEqual(@as(usize, 1500), s.len);
        pn.* = s.pn;
    }
    while (try next(&t)) |_| {}
    t.now_us += 10_000;
    try respond(&t, 10);
    const small = (try next(&t)).?;
    try testing.expect(small.len < 1200);
    t.now_us += 10_000;
    ack(&t, &.{.{ .smallest = small.pn, .largest = small.pn }}, null);
    try testing.expectEqual(@as(u16, 1200), t.c.datagramSize());
    try testing.expectEqual(@as(u16, 1200), t.c.recovery.cc.max_datagram_bytes);
    while (try next(&t)) |s| try testing.expect(s.len <= 1200);

    // Grown again (as if after the retry time), then nothing acknowledged: the first PTO's
    // probe may be full-size, from the second on they are 1,200 bytes.
    t.c.pmtu.restart(0);
    t.c.pmtu.size = 1500;
    t.c.applyDatagramSize();
    t.c.pmtu.next_us = std.math.maxInt(u64);
    try respond(&t, 4000);
    while (try next(&t)) |_| {}
    for (0..3) |round| {
        t.now_us = t.c.nextDeadline().?;
        t.c.onTimeout(t.now_us);
        const s = (try next(&t)).?;
        if (round >= 1) try testing.expect(s.len <= 1200);
        while (try next(&t)) |_| {}
    }
}

test "pmtu: a new path starts again from 1,200, and no probe goes while it is checked" {
    var t: T = undefined;
    try start(&t, .{}, 65527);
    defer t.deinit();
    while (try probeAcked(&t)) |_| {}
    try t.c.startPathValidation(t.now_us, 1200, false);
    try testing.expectEqual(@as(u16, 1200), t.c.datagramSize());
    try testing.expectEqual(@as(u16, 1200), t.c.recovery.cc.max_datagram_bytes);
    while (try next(&t)) |s| try testing.expect(!s.ping or s.len <= 1200);
}

test "ecn: marks received are counted per packet and reported in ACK_ECN frames" {
    var t: T = undefined;
    try start(&t, .{}, 1200);
    defer t.deinit();
    // Unmarked: a plain ACK.
    client_pn += 1;
    t.c.receiveEcn(t.oneRtt(client_pn, "\x01"), 0, t.now_us);
    t.now_us += 30_000; // past our max_ack_delay
    var s = (try next(&t)).?;
    try testing.expect(s.ack and s.ecn == null);
    for ([_]u2{ 2, 2, 3, 1 }) |bits| {
        client_pn += 1;
        t.c.receiveEcn(t.oneRtt(client_pn, "\x01"), bits, t.now_us);
    }
    // A duplicate is not counted again.
    t.c.receiveEcn(t.oneRtt(client_pn, "\x01"), 3, t.now_us);
    t.now_us += 30_000;
    s = (try next(&t)).?;
    try testing.expectEqual(frames.Ecn{ .ect0 = 2, .ect1 = 1, .ce = 1 }, s.ecn.?);
}

/// The server sends `n` data datagrams; their numbers and codepoints.
fn sendData(t: *T, n: usize, pns: []u64, marks: []u2) !void {
    t.now_us += 100_000; // the pacer's burst refilled
    try respond(t, n * 1100);
    for (0..n) |i| {
        const s = (try next(t)).?;
        pns[i] = s.pn;
        marks[i] = t.c.ecnToSend();
    }
    while (try next(t)) |_| {}
}

test "ecn: marks stay on once the counts validate them; a CE rise is congestion, once" {
    var t: T = undefined;
    try start(&t, .{}, 1200);
    defer t.deinit();
    var pns: [4]u64 = undefined;
    var marks: [4]u2 = undefined;
    try sendData(&t, 4, &pns, &marks);
    try testing.expectEqual([4]u2{ 2, 2, 2, 2 }, marks);
    t.now_us += 10_000;
    ack(&t, &.{.{ .smallest = pns[0], .largest = pns[1] }}, .{ .ect0 = 3, .ect1 = 0, .ce = 0 });
    try testing.expect(!t.c.recovery.cc.in_recovery_period);
    // One came with CE: the window is cut.
    const cwnd = t.c.recovery.cc.cwnd_bytes;
    ack(&t, &.{.{ .smallest = pns[0], .largest = pns[2] }}, .{ .ect0 = 3, .ect1 = 0, .ce = 1 });
    try testing.expect(t.c.recovery.cc.in_recovery_period);
    // Halved after the ACK grew it by the packet (slow start): (cwnd + 1 packet) / 2.
    try testing.expect(t.c.recovery.cc.cwnd_bytes <= (cwnd + 1200) / 2);
    const cut = t.c.recovery.cc.cwnd_bytes;
    // Another CE for a packet sent before the cut: the same recovery period.
    ack(&t, &.{.{ .smallest = pns[0], .largest = pns[3] }}, .{ .ect0 = 3, .ect1 = 0, .ce = 2 });
    try testing.expectEqual(cut, t.c.recovery.cc.cwnd_bytes);
    try testing.expectEqual(connection.ecn.Validation.capable, t.c.ecn.validation);
    try testing.expectEqual(connection.State.established, t.c.state);
}

test "ecn: counts missing, short, or at the varint maximum stop the marks, not the connection" {
    const max = varint.max;
    const cases = [_]?frames.Ecn{
        null,
        .{ .ect0 = 2, .ect1 = 0, .ce = 0 },
        .{ .ect0 = max, .ect1 = max, .ce = max },
        .{ .ect0 = 3, .ect1 = 0, .ce = max },
    };
    for (cases) |counts| {
        var t: T = undefined;
        try start(&t, .{}, 1200);
        defer t.deinit();
        var pns: [3]u64 = undefined;
        var marks: [3]u2 = undefined;
        try sendData(&t, 3, &pns, &marks);
        ack(&t, &.{.{ .smallest = pns[0], .largest = pns[2] }}, counts);
        try testing.expectEqual(connection.ecn.Validation.failed, t.c.ecn.validation);
        try testing.expectEqual(connection.State.established, t.c.state);
        try testing.expect(!t.c.recovery.cc.in_recovery_period);
        try sendData(&t, 1, pns[0..1], marks[0..1]);
        try testing.expectEqual(@as(u2, 0), marks[0]);
    }
}

test "ecn: turned off, nothing is marked; marks received are still reported" {
    var t: T = undefined;
    try start(&t, .{ .ecn = false }, 1200);
    defer t.deinit();
    var pns: [2]u64 = undefined;
    var marks: [2]u2 = undefined;
    try sendData(&t, 2, &pns, &marks);
    try testing.expectEqual([2]u2{ 0, 0 }, marks);
    client_pn += 1;
    t.c.receiveEcn(t.oneRtt(client_pn, "\x01"), 2, t.now_us);
    t.now_us += 30_000;
    const s = (try next(&t)).?;
    try testing.expectEqual(frames.Ecn{ .ect0 = 1, .ect1 = 0, .ce = 0 }, s.ecn.?);
}
