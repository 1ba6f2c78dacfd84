//! Scenarios for quic/recovery.zig: sends and ACKs at explicit times, checked against the
//! numbers RFC 9002 gives (the initial RTT of 333 ms, thresholds 3 and 9/8, 1 ms granularity).
const std = @import("std");
const testing = std.testing;
const recovery = @import("recovery.zig");
const Recovery = recovery.Recovery;
const SentPacket = recovery.SentPacket;
const Space = recovery.Space;
const Range = recovery.Range;
const pn_max = @import("ack_ranges.zig").pn_max;
const gpa = testing.allocator;

/// Records what the recovery reports, in order.
const Sink = struct {
    acked: [64]u64 = undefined,
    acked_len: usize = 0,
    lost: [64]u64 = undefined,
    lost_len: usize = 0,

    pub fn onAcked(self: *Sink, space: Space, p: SentPacket) void {
        _ = space;
        self.acked[self.acked_len] = p.pn;
        self.acked_len += 1;
    }

    pub fn onLost(self: *Sink, space: Space, p: SentPacket) void {
        _ = space;
        self.lost[self.lost_len] = p.pn;
        self.lost_len += 1;
    }

    fn expect(self: *Sink, acked: []const u64, lost: []const u64) !void {
        try testing.expectEqualSlices(u64, acked, self.acked[0..self.acked_len]);
        try testing.expectEqualSlices(u64, lost, self.lost[0..self.lost_len]);
        self.* = .{};
    }
};

fn packet(pn: u64, time_us: u64) SentPacket {
    return .{ .pn = pn, .time_sent_us = time_us, .token = @truncate(pn), .bytes = 1200, .ack_eliciting = true, .in_flight = true };
}

fn send(r: *Recovery, space: Space, pn: u64, time_us: u64) !void {
    try r.onPacketSent(gpa, space, packet(pn, time_us));
}

fn ack(r: *Recovery, space: Space, smallest: u64, largest: u64, delay_us: u64, now_us: u64, sink: *Sink) !recovery.AckOutcome {
    return r.onAckReceived(gpa, space, &.{.{ .smallest = smallest, .largest = largest }}, delay_us, now_us, sink);
}

test "RTT: the first sample sets every estimate, later ones smooth (RFC 9002 5.3)" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    try testing.expectEqual(@as(u64, 333_000), r.rtt.smoothed_us);
    try send(&r, .application, 0, 0);
    _ = try ack(&r, .application, 0, 0, 5_000, 100_000, &sink);
    try testing.expectEqual(@as(u64, 100_000), r.rtt.first_sample_us);
    try testing.expectEqual(@as(u64, 100_000), r.rtt.min_us);
    try testing.expectEqual(@as(u64, 100_000), r.rtt.smoothed_us);
    try testing.expectEqual(@as(u64, 50_000), r.rtt.var_us);
    try send(&r, .application, 1, 100_000);
    _ = try ack(&r, .application, 0, 1, 30_000, 250_000, &sink);
    try testing.expectEqual(@as(u64, 150_000), r.rtt.latest_us);
    try testing.expectEqual(@as(u64, 100_000), r.rtt.min_us);
    // adjusted = 150 - 30 = 120 ms; rttvar = (3*50 + 20)/4; srtt = (7*100 + 120)/8
    try testing.expectEqual(@as(u64, 42_500), r.rtt.var_us);
    try testing.expectEqual(@as(u64, 102_500), r.rtt.smoothed_us);
    try sink.expect(&.{ 0, 1 }, &.{});
}

test "RTT: ack delay limited by max_ack_delay once confirmed, never below min_rtt, ignored for Initial" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    r.onHandshakeConfirmed();
    try send(&r, .application, 0, 0);
    _ = try ack(&r, .application, 0, 0, 0, 100_000, &sink);
    try send(&r, .application, 1, 200_000);
    _ = try ack(&r, .application, 1, 1, 40_000, 350_000, &sink); // 40 ms claimed, 25 ms allowed
    try testing.expectEqual(@as(u64, (7 * 100_000 + 125_000) / 8), r.rtt.smoothed_us);
    const smoothed_us = r.rtt.smoothed_us;
    try send(&r, .application, 2, 400_000);
    _ = try ack(&r, .application, 2, 2, 20_000, 510_000, &sink); // 110 - 20 < min 100: not subtracted
    try testing.expectEqual((7 * smoothed_us + 110_000) / 8, r.rtt.smoothed_us);

    var i = try Recovery.init(gpa, .{});
    defer i.deinit(gpa);
    try send(&i, .initial, 0, 0);
    _ = try ack(&i, .initial, 0, 0, 0, 100_000, &sink);
    try send(&i, .initial, 1, 100_000);
    _ = try ack(&i, .initial, 1, 1, 30_000, 250_000, &sink);
    try testing.expectEqual(@as(u64, (7 * 100_000 + 150_000) / 8), i.rtt.smoothed_us);
}

test "RTT: no sample unless the largest is newly acknowledged and something ack-eliciting is" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    var padding = packet(0, 0);
    padding.ack_eliciting = false;
    try r.onPacketSent(gpa, .application, padding);
    _ = try ack(&r, .application, 0, 0, 0, 50_000, &sink);
    try testing.expect(!r.rtt.has_sample);
    try send(&r, .application, 1, 60_000);
    try send(&r, .application, 2, 60_000);
    _ = try ack(&r, .application, 2, 2, 0, 100_000, &sink);
    try testing.expectEqual(@as(u64, 40_000), r.rtt.latest_us);
    // Acknowledging 1 late, under a largest already acknowledged: no sample.
    _ = try ack(&r, .application, 1, 2, 0, 900_000, &sink);
    try testing.expectEqual(@as(u64, 40_000), r.rtt.latest_us);
    try sink.expect(&.{ 0, 2, 1 }, &.{});
}

test "packet threshold loss at once, time threshold loss when the timer fires" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    for (0..5) |pn| try send(&r, .application, pn, pn);
    const outcome = try ack(&r, .application, 4, 4, 0, 50_004, &sink);
    try testing.expectEqual(@as(u16, 1), outcome.acked_count);
    try testing.expectEqual(@as(u16, 2), outcome.lost_count);
    try sink.expect(&.{4}, &.{ 0, 1 });
    // 2 and 3 wait 9/8 of the 50 ms RTT from when they were sent.
    try testing.expectEqual(@as(?u64, 2 + 56_250), r.nextDeadline());
    try testing.expectEqual(recovery.TimeoutOutcome{}, r.onLossDetectionTimeout(gpa, 2 + 56_249, &sink));
    try testing.expectEqual(@as(u16, 1), r.onLossDetectionTimeout(gpa, 2 + 56_250, &sink).lost_count);
    try sink.expect(&.{}, &.{2});
    try testing.expectEqual(@as(?u64, 3 + 56_250), r.nextDeadline());
    _ = r.onLossDetectionTimeout(gpa, 3 + 56_250, &sink);
    try sink.expect(&.{}, &.{3});
    // One congestion event for the lot: everything lost was sent before it began.
    try testing.expectEqual(@as(u64, 6_000), r.cc.cwnd_bytes);
    try testing.expectEqual(@as(u64, 0), r.cc.bytes_in_flight);
    try testing.expectEqual(@as(?u64, null), r.nextDeadline());
    try testing.expectEqual(@as(usize, 0), r.application.sent.items.len); // the block went back
}

test "the time threshold is at least the 1 ms granularity" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    try send(&r, .application, 0, 0);
    try send(&r, .application, 1, 0);
    _ = try ack(&r, .application, 1, 1, 0, 100, &sink); // a 100 us RTT
    try testing.expectEqual(@as(?u64, 1_000), r.nextDeadline());
}

test "a spurious-looking loss: the ACK of a packet already declared lost changes nothing" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    for (0..6) |pn| try send(&r, .application, pn, 0);
    _ = try ack(&r, .application, 4, 4, 0, 10_000, &sink);
    try sink.expect(&.{4}, &.{ 0, 1 });
    const cwnd_bytes = r.cc.cwnd_bytes;
    const late = try r.onAckReceived(gpa, .application, &.{ .{ .smallest = 4, .largest = 4 }, .{ .smallest = 0, .largest = 1 } }, 0, 10_500, &sink);
    try testing.expectEqual(recovery.AckOutcome{}, late);
    try sink.expect(&.{}, &.{});
    try testing.expectEqual(cwnd_bytes, r.cc.cwnd_bytes);
}

test "duplicate and reordered ACKs acknowledge nothing twice and never lower the largest" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    for (0..6) |pn| try send(&r, .application, pn, 0);
    _ = try ack(&r, .application, 0, 3, 0, 10_000, &sink);
    try sink.expect(&.{ 0, 1, 2, 3 }, &.{});
    try testing.expectEqual(@as(u16, 0), (try ack(&r, .application, 0, 1, 0, 10_100, &sink)).acked_count);
    try testing.expectEqual(@as(u16, 0), (try ack(&r, .application, 0, 3, 0, 10_200, &sink)).acked_count);
    try testing.expectEqual(@as(u64, 3), r.application.largest_acked);
    try testing.expectEqual(@as(u16, 2), r.packets_count);
    try sink.expect(&.{}, &.{});
}

test "an ACK of a number never sent is PROTOCOL_VIOLATION; malformed ranges are refused" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    try testing.expectError(error.AckOfUnsentPacket, ack(&r, .application, 0, 0, 0, 1, &sink));
    for (0..3) |pn| try send(&r, .application, pn, 0);
    try testing.expectError(error.AckOfUnsentPacket, ack(&r, .application, 0, 3, 0, 1, &sink));
    try testing.expectError(error.AckOfUnsentPacket, ack(&r, .handshake, 0, 0, 0, 1, &sink));
    const bad = [_][]const Range{
        &.{},
        &.{.{ .smallest = 2, .largest = 1 }},
        &.{ .{ .smallest = 0, .largest = 0 }, .{ .smallest = 2, .largest = 2 } }, // ascending
        &.{ .{ .smallest = 1, .largest = 2 }, .{ .smallest = 0, .largest = 1 } }, // overlapping
        &.{.{ .smallest = 0, .largest = pn_max + 1 }},
    };
    for (bad) |ranges| {
        try testing.expectError(error.InvalidAckRanges, r.onAckReceived(gpa, .application, ranges, 0, 1, &sink));
    }
    try testing.expectEqual(@as(u16, 3), r.packets_count);
    try testing.expect(!r.application.acked_any);
    try sink.expect(&.{}, &.{});
}

test "PTO: fires after the initial RTT's PTO, then backs off; an ACK resets it" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    try send(&r, .handshake, 0, 0);
    const pto_us: u64 = 333_000 + 4 * 166_500;
    try testing.expectEqual(@as(?u64, pto_us), r.nextDeadline());
    try testing.expectEqual(recovery.TimeoutOutcome{}, r.onLossDetectionTimeout(gpa, pto_us - 1, &sink));
    try testing.expectEqual(recovery.TimeoutOutcome{ .probe = .handshake }, r.onLossDetectionTimeout(gpa, pto_us, &sink));
    try testing.expectEqual(@as(u8, 1), r.pto_count);
    try testing.expectEqual(@as(?u64, 2 * pto_us), r.nextDeadline());
    // The probe passes a full window.
    r.cc.bytes_in_flight = r.cc.cwnd_bytes;
    try testing.expect(r.canSend(1200, true));
    try testing.expectEqual(pto_us, r.nextSendTimeUs(1200, pto_us));
    r.cc.bytes_in_flight = 1200;
    try send(&r, .handshake, 1, pto_us);
    try send(&r, .handshake, 2, pto_us);
    try testing.expectEqual(@as(?u64, pto_us + 2 * pto_us), r.nextDeadline());
    try testing.expectEqual(recovery.TimeoutOutcome{ .probe = .handshake }, r.onLossDetectionTimeout(gpa, 3 * pto_us, &sink));
    try testing.expectEqual(@as(?u64, pto_us + 4 * pto_us), r.nextDeadline());
    try sink.expect(&.{}, &.{}); // a PTO declares nothing lost
    _ = try ack(&r, .handshake, 2, 2, 0, 5 * pto_us - 10, &sink);
    try testing.expectEqual(@as(u8, 0), r.pto_count);
}

test "PTO: the backoff stays finite however often it fires" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    try send(&r, .initial, 0, 0);
    for (0..40) |_| {
        const deadline = r.nextDeadline().?;
        try testing.expect(deadline < recovery.never);
        try testing.expectEqual(@as(?Space, .initial), r.onLossDetectionTimeout(gpa, deadline, &sink).probe);
    }
    try testing.expectEqual(@as(u8, 16), r.pto_count);
}

test "PTO: none in Application before the handshake is confirmed, then with max_ack_delay" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    try send(&r, .application, 0, 0);
    try testing.expectEqual(@as(?u64, null), r.nextDeadline());
    r.onHandshakeConfirmed();
    try testing.expectEqual(@as(?u64, 999_000 + 25_000), r.nextDeadline());
    // Handshake's PTO comes first when both have packets in flight.
    try send(&r, .handshake, 0, 10);
    try testing.expectEqual(@as(?u64, 10 + 999_000), r.nextDeadline());
}

test "PTO: none while the anti-amplification limit holds" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    try send(&r, .handshake, 0, 0);
    r.setAmplificationLimited(true);
    try testing.expectEqual(@as(?u64, null), r.nextDeadline());
    r.setAmplificationLimited(false);
    try testing.expectEqual(@as(?u64, 999_000), r.nextDeadline());
}

test "a loss during recovery does not reduce the window twice; a later one does" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    for (0..10) |pn| try send(&r, .application, pn, 0);
    _ = try ack(&r, .application, 5, 5, 0, 100_000, &sink);
    try sink.expect(&.{5}, &.{ 0, 1, 2 });
    try testing.expectEqual(@as(u64, 6_000), r.cc.cwnd_bytes);
    // The recovery this ACK began holds back growth from what it acknowledged (RFC 9002 A.7
    // handles the losses first), even toward congestion avoidance's next datagram.
    try testing.expectEqual(@as(u64, 0), r.cc.avoidance_acked_bytes);
    _ = try ack(&r, .application, 9, 9, 0, 100_500, &sink);
    try sink.expect(&.{9}, &.{ 3, 4, 6 });
    try testing.expectEqual(@as(u64, 6_000), r.cc.cwnd_bytes);
    for (10..15) |pn| try send(&r, .application, pn, 200_000);
    const outcome = try ack(&r, .application, 14, 14, 0, 300_000, &sink);
    try sink.expect(&.{14}, &.{ 7, 8, 10, 11 });
    try testing.expect(!outcome.persistent_congestion);
    try testing.expectEqual(@as(u64, 3_000), r.cc.cwnd_bytes);
}

/// An RTT of 10 ms (rttvar 3.75 ms after the second sample), then lost packets sent at
/// `times_us` and one acknowledged packet after them: persistent congestion needs their span
/// to exceed (10 + 4*3.75 + 25) * 3 = 150 ms. The first ACK grew the window to 13_200 by slow
/// start, so a plain loss halves it to 6_600.
fn persistentScenario(times_us: []const u64, ack_ranges: []const Range) !recovery.AckOutcome {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    try send(&r, .application, 0, 0);
    _ = try ack(&r, .application, 0, 0, 0, 10_000, &sink);
    for (times_us, 1..) |t, pn| try send(&r, .application, pn, t);
    const last = times_us[times_us.len - 1];
    const outcome = try r.onAckReceived(gpa, .application, ack_ranges, 0, last + 10_000, &sink);
    // Persistent congestion ends recovery, so the same ACK's packet grows the minimum window.
    try testing.expectEqual(@as(u64, if (outcome.persistent_congestion) 2_400 + 1_200 else 6_600), r.cc.cwnd_bytes);
    return outcome;
}

test "persistent congestion: a span of losses longer than 3 PTOs collapses the window" {
    const last: []const Range = &.{.{ .smallest = 4, .largest = 4 }};
    try testing.expect((try persistentScenario(&.{ 20_000, 100_000, 170_001, 180_000 }, last)).persistent_congestion);
    // Exactly the duration is not more than it.
    try testing.expect(!(try persistentScenario(&.{ 20_000, 100_000, 170_000, 180_000 }, last)).persistent_congestion);
    // An acknowledged packet between the losses breaks the span.
    const with_middle: []const Range = &.{ .{ .smallest = 4, .largest = 4 }, .{ .smallest = 2, .largest = 2 } };
    const broken = try persistentScenario(&.{ 20_000, 100_000, 200_000, 210_000 }, with_middle);
    try testing.expectEqual(@as(u16, 2), broken.lost_count);
    try testing.expect(!broken.persistent_congestion);
}

test "persistent congestion: packets sent before the first RTT sample do not count" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    for (0..3) |pn| try send(&r, .application, pn, pn * 400_000);
    for (3..6) |pn| try send(&r, .application, pn, 800_000 + pn);
    const outcome = try ack(&r, .application, 5, 5, 0, 810_000, &sink);
    try sink.expect(&.{5}, &.{ 0, 1, 2 });
    try testing.expect(!outcome.persistent_congestion);
    try testing.expectEqual(@as(u64, 6_000), r.cc.cwnd_bytes);
}

test "the in-flight cap: new data stops, probes keep their reserve, ACK-only packets pass" {
    var r = try Recovery.init(gpa, .{ .packets_in_flight_max = 8 });
    defer r.deinit(gpa);
    var sink: Sink = .{};
    var small = packet(0, 0);
    small.bytes = 100;
    for (0..6) |pn| {
        try testing.expect(r.canSend(100, true));
        small.pn = pn;
        try r.onPacketSent(gpa, .application, small);
    }
    try testing.expect(!r.canSend(100, true)); // the last two records are the probes'
    try testing.expect(r.canSend(100, false));
    small.pn = 6;
    try r.onPacketSent(gpa, .application, small);
    small.pn = 7;
    try r.onPacketSent(gpa, .application, small);
    small.pn = 8;
    try testing.expectError(error.InFlightFull, r.onPacketSent(gpa, .application, small));
    var ack_only = small;
    ack_only.pn = 9;
    ack_only.ack_eliciting = false;
    ack_only.in_flight = false;
    try r.onPacketSent(gpa, .application, ack_only); // noted, not recorded
    try testing.expectEqual(@as(u16, 8), r.packets_count);
    _ = try ack(&r, .application, 0, 9, 0, 1_000, &sink); // 9 was sent: no violation
    try sink.expect(&.{ 0, 1, 2, 3, 4, 5, 6, 7 }, &.{});
    try testing.expect(r.canSend(100, true));
    try testing.expectEqual(@as(usize, 0), r.application.sent.items.len);
}

test "a failed allocation refuses the packet and changes nothing" {
    var failing = std.testing.FailingAllocator.init(gpa, .{ .fail_index = 0 });
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    try testing.expectError(error.OutOfMemory, r.onPacketSent(failing.allocator(), .application, packet(0, 0)));
    try testing.expectEqual(@as(u16, 0), r.packets_count);
    try testing.expect(!r.application.sent_any);
    try testing.expectEqual(@as(u64, 0), r.cc.bytes_in_flight);
}

test "the records grow by doubling while in flight, up to the cap" {
    var r = try Recovery.init(gpa, .{ .packets_in_flight_max = 40 });
    defer r.deinit(gpa);
    var sink: Sink = .{};
    var p = packet(0, 0);
    p.bytes = 10;
    for (0..40) |pn| {
        p.pn = pn;
        try r.onPacketSent(gpa, .application, p);
    }
    try testing.expectEqual(@as(usize, 40), r.application.sent.items.len);
    const outcome = try r.onAckReceived(gpa, .application, &.{ .{ .smallest = 30, .largest = 39 }, .{ .smallest = 10, .largest = 19 } }, 0, 10_000, &sink);
    try testing.expectEqual(@as(u16, 20), outcome.acked_count);
    try testing.expectEqual(@as(u16, 20), outcome.lost_count); // 0..9 and 20..29: 3 below 30
}

test "discarding a space takes its bytes out of flight without reporting them" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    try send(&r, .initial, 0, 0);
    try send(&r, .initial, 1, 0);
    try send(&r, .handshake, 0, 5);
    try r.onPacketReceived(.initial, 0, true, 0);
    r.discardSpace(gpa, .initial);
    try testing.expectEqual(@as(u64, 1200), r.cc.bytes_in_flight);
    try testing.expectEqual(@as(u16, 1), r.packets_count);
    try testing.expectEqual(@as(?u64, 5 + 999_000), r.nextDeadline());
    // A discarded space takes nothing more: any packet of it is dropped as a duplicate.
    try testing.expect(r.isDuplicate(.initial, 0));
    try testing.expect(r.isDuplicate(.initial, 7));
    try testing.expectEqual(@as(?u64, null), r.largestReceived(.initial));
    try sink.expect(&.{}, &.{});
    try r.onPacketReceived(.handshake, 3, true, 6);
    try testing.expectEqual(@as(?u64, 3), r.largestReceived(.handshake));
    r.discardSpace(gpa, .handshake);
    try testing.expectEqual(@as(?u64, null), r.nextDeadline());
    try testing.expect(r.early == null);
}

test "once Handshake is discarded the early record is gone and every space-taking call is safe" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    try send(&r, .handshake, 0, 0);
    try send(&r, .application, 0, 0);
    try r.onPacketReceived(.handshake, 0, true, 0);
    try r.onPacketReceived(.initial, 0, true, 0);
    // Handshake first: Initial goes with it (a close during the handshake frees both).
    r.discardSpace(gpa, .handshake);
    try testing.expect(r.early == null);
    try testing.expectEqual(@as(u16, 1), r.packets_count);
    try testing.expectEqual(@as(u64, 1200), r.cc.bytes_in_flight);
    for ([_]Space{ .initial, .handshake }) |space| {
        try testing.expectEqual(@as(?*const recovery.SpaceState, null), r.spaceState(space));
        try testing.expectEqual(@as(?u64, null), r.largestReceived(space));
        try testing.expect(r.isDuplicate(space, 1));
        try r.onPacketReceived(space, 1, true, 10);
        try testing.expect(!r.ackDue(space, 10));
        r.onAckSent(space);
        r.onAckAcknowledged(space, 0);
        // An ACK in a packet whose CRYPTO frame just confirmed the handshake: nothing to do.
        const outcome = try ack(&r, space, 0, 0, 0, 10, &sink);
        try testing.expectEqual(@as(u16, 0), outcome.acked_count);
        r.discardSpace(gpa, space);
    }
    try sink.expect(&.{}, &.{});
    // The Application space goes on as before; the timer only looks at it.
    r.onHandshakeConfirmed();
    try testing.expect(r.nextDeadline() != null);
    const outcome = try ack(&r, .application, 0, 0, 0, 50_000, &sink);
    try testing.expectEqual(@as(u16, 1), outcome.acked_count);
    try sink.expect(&.{0}, &.{});
    r.deinit(gpa);
    r.deinit(gpa); // idempotent: a closed connection's deinit comes again
}

test "init fails cleanly when the early record cannot be had" {
    var failing = std.testing.FailingAllocator.init(gpa, .{ .fail_index = 0 });
    try testing.expectError(error.OutOfMemory, Recovery.init(failing.allocator(), .{}));
}

test "packet numbers up to 2^62-1 without wrapping" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    try send(&r, .application, pn_max - 3, 0);
    try send(&r, .application, pn_max, 0);
    const outcome = try ack(&r, .application, pn_max, pn_max, 0, 1_000, &sink);
    try testing.expectEqual(@as(u16, 1), outcome.acked_count);
    try testing.expectEqual(@as(u16, 1), outcome.lost_count); // pn_max - 3 by the packet threshold
    try r.onPacketReceived(.application, pn_max, true, 0);
    try testing.expect(r.isDuplicate(.application, pn_max));
}

test "the receive side: the ACK's deadline joins the connection's one deadline" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    try r.onPacketReceived(.application, 0, true, 1_000);
    try testing.expectEqual(@as(?u64, 26_000), r.nextDeadline());
    try testing.expect(!r.ackDue(.application, 1_000));
    try r.onPacketReceived(.application, 1, true, 2_000);
    try testing.expect(r.ackDue(.application, 2_000));
    var out: [4]Range = undefined;
    const frame = r.writeAck(.application, 3_000, &out);
    try testing.expectEqualSlices(Range, &.{.{ .smallest = 0, .largest = 1 }}, frame.ranges);
    try testing.expectEqual(@as(u64, 1_000), frame.delay_us);
    r.onAckSent(.application);
    try testing.expectEqual(@as(?u64, null), r.nextDeadline());
    try testing.expectError(error.DuplicatePacket, r.onPacketReceived(.application, 1, true, 4_000));
    r.onAckAcknowledged(.application, 1);
    try testing.expectEqual(@as(usize, 0), r.writeAck(.application, 5_000, &out).ranges.len);

    var quick = try Recovery.init(gpa, .{ .max_ack_delay_us = 10_000 });
    defer quick.deinit(gpa);
    try quick.onPacketReceived(.application, 0, true, 0);
    try testing.expectEqual(@as(?u64, 10_000), quick.nextDeadline());
    try quick.onPacketReceived(.handshake, 0, true, 5);
    try testing.expectEqual(@as(?u64, 5), quick.nextDeadline()); // Handshake: at once
}

test "a lost packet larger than the datagram size (a path MTU probe) is no congestion event" {
    var r = try Recovery.init(gpa, .{});
    defer r.deinit(gpa);
    var sink: Sink = .{};
    var probe = packet(0, 0);
    probe.bytes = 1452;
    try r.onPacketSent(gpa, .application, probe);
    for (1..5) |pn| try send(&r, .application, pn, 0);
    const cwnd = r.cc.cwnd_bytes;
    const out = try ack(&r, .application, 1, 4, 0, 10_000, &sink);
    try sink.expect(&.{ 1, 2, 3, 4 }, &.{0});
    try testing.expectEqual(@as(u16, 1), out.lost_count);
    try testing.expect(!r.cc.in_recovery_period);
    try testing.expect(r.cc.cwnd_bytes >= cwnd);
    try testing.expectEqual(@as(u64, 0), r.cc.bytes_in_flight); // its bytes left the flight
    // The same loss at the size in use is one.
    var s = try Recovery.init(gpa, .{});
    defer s.deinit(gpa);
    for (0..5) |pn| try send(&s, .application, pn, 0);
    _ = try ack(&s, .application, 1, 4, 0, 10_000, &sink);
    try testing.expect(s.cc.in_recovery_period);
}

test "sizes at rest" {
    std.debug.print("\nquic/recovery: @sizeOf Recovery={d} (of which Application ack ranges {d}, Congestion {d}, Rtt {d}); SentPacket={d}\n", .{
        @sizeOf(Recovery),
        @sizeOf(@TypeOf(@as(Recovery, undefined).application_acks)),
        @sizeOf(recovery.Congestion),
        @sizeOf(recovery.Rtt),
        @sizeOf(SentPacket),
    });
    // 408 before the Application space's three ECN counts (RFC 9000 13.4.1) came in.
    try testing.expect(@sizeOf(Recovery) <= 432);
    try testing.expect(@sizeOf(SentPacket) <= 24);
}

/// Checks that no packet is reported twice, acknowledged or lost.
const CheckingSink = struct {
    reported: [3]std.StaticBitSet(pn_limit) = .{ .initEmpty(), .initEmpty(), .initEmpty() },
    count: u64 = 0,
    twice: bool = false,
    const pn_limit = 8192;

    pub fn onAcked(self: *CheckingSink, space: Space, p: SentPacket) void {
        self.note(space, p);
    }

    pub fn onLost(self: *CheckingSink, space: Space, p: SentPacket) void {
        self.note(space, p);
    }

    fn note(self: *CheckingSink, space: Space, p: SentPacket) void {
        const set = &self.reported[@intFromEnum(space)];
        if (set.isSet(p.pn)) self.twice = true;
        set.set(p.pn);
        self.count += 1;
    }
};

fn expectBooksBalance(r: *const Recovery, sent_count: u64, sink: *const CheckingSink) !void {
    var records: u64 = 0;
    var bytes: u64 = 0;
    for (0..3) |i| {
        const sp = r.spaceState(@enumFromInt(i)) orelse continue;
        var ack_eliciting: u16 = 0;
        for (sp.sent.items[0..sp.sent.len]) |p| {
            bytes += p.bytes;
            if (p.ack_eliciting) ack_eliciting += 1;
        }
        try testing.expectEqual(ack_eliciting, sp.ack_eliciting_in_flight);
        records += sp.sent.len;
        if (sp.sent.len == 0) try testing.expectEqual(@as(usize, 0), sp.sent.items.len);
    }
    try testing.expectEqual(records, r.packets_count);
    try testing.expectEqual(bytes, r.cc.bytes_in_flight);
    try testing.expectEqual(sent_count, records + sink.count);
    try testing.expect(!sink.twice);
    try testing.expect(r.cc.cwnd_bytes >= r.cc.minimumWindow());
    if (r.packets_count == 0) try testing.expectEqual(@as(?u64, null), r.nextDeadline());
}

test "random sends, ACKs, timeouts and discards keep the books balanced, NewReno and CUBIC" {
    try randomBooks(.new_reno);
    try randomBooks(.cubic);
}

fn randomBooks(algorithm: @import("congestion.zig").Algorithm) !void {
    var prng = std.Random.DefaultPrng.init(0x9002);
    const rand = prng.random();
    var r = try Recovery.init(gpa, .{ .packets_in_flight_max = 64, .congestion_algorithm = algorithm });
    defer r.deinit(gpa);
    r.onHandshakeConfirmed();
    var sink: CheckingSink = .{};
    var next_pn: [3]u64 = .{ 0, 0, 0 };
    var sent_count: u64 = 0;
    var now_us: u64 = 0;
    var ranges_buf: [4]Range = undefined;
    var discarded: [3]bool = .{ false, false, false };
    for (0..6000) |_| {
        now_us += rand.uintLessThan(u64, 5_000);
        const space: Space = @enumFromInt(rand.uintLessThan(u2, 3));
        const s = @intFromEnum(space);
        if (discarded[s]) continue; // no keys: nothing is sent or read there any more
        switch (rand.uintLessThan(u8, 10)) {
            0...4 => if (r.canSend(1200, true) and next_pn[s] < CheckingSink.pn_limit) {
                var p = packet(next_pn[s], now_us);
                p.ack_eliciting = rand.boolean();
                p.bytes = rand.intRangeAtMost(u16, 20, 1200);
                try r.onPacketSent(gpa, space, p);
                next_pn[s] += 1;
                sent_count += 1;
            },
            5...7 => if (next_pn[s] > 0) {
                // Mostly near the newest, as a peer acknowledges; sometimes old (reordered).
                const back_max = if (rand.uintLessThan(u8, 4) == 0) next_pn[s] - 1 else @min(next_pn[s] - 1, 6);
                var hi = next_pn[s] - 1 - rand.uintAtMost(u64, back_max);
                var n: usize = 0;
                const ranges_max: usize = if (rand.uintLessThan(u8, 4) == 0) ranges_buf.len else 1;
                while (n < ranges_max) {
                    const lo = hi - @min(hi, rand.uintAtMost(u64, 16));
                    ranges_buf[n] = .{ .smallest = lo, .largest = hi };
                    n += 1;
                    if (lo < 2) break;
                    hi = lo - 2 - rand.uintAtMost(u64, @min(lo - 2, 5));
                }
                _ = try r.onAckReceived(gpa, space, ranges_buf[0..n], rand.uintAtMost(u64, 50_000), now_us, &sink);
                // One past what was sent is always refused, and changes nothing.
                const unsent: []const Range = &.{.{ .smallest = next_pn[s], .largest = next_pn[s] }};
                try testing.expectError(error.AckOfUnsentPacket, r.onAckReceived(gpa, space, unsent, 0, now_us, &sink));
            },
            8 => _ = r.onLossDetectionTimeout(gpa, now_us, &sink),
            else => if (space != .application and rand.uintLessThan(u8, 20) == 0) {
                // Discarded packets leave the books without a report.
                // Handshake takes Initial with it, and the early record goes.
                for (0..s + 1) |d| {
                    if (r.spaceState(@enumFromInt(d))) |sp| sent_count -= sp.sent.len;
                    discarded[d] = true;
                }
                r.discardSpace(gpa, space);
                if (space == .handshake) try testing.expect(r.early == null);
            },
        }
        try expectBooksBalance(&r, sent_count, &sink);
    }
    try testing.expect(sink.count > 500); // enough traffic went through to mean something
}
