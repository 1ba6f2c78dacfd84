//! ECN on the send side of one connection (RFC 9000 13.4.2, RFC 9002 7.1): which codepoint our
//! datagrams carry, and the validation of the counts the peer's ACK frames report. The receive
//! side (counting the marks of what arrives, per packet number space) is `ack_ranges.zig`'s.
//!
//! Only 1-RTT packets are marked, once the handshake is confirmed (the connection asks
//! `mark` only then): every datagram is then one 1-RTT packet, so counting datagrams counts
//! packets, and only the Application space's counts need validating.
//!
//! Validation. Every packet is marked ECT(0) from the first 1-RTT one on (so the marked
//! packets are those numbered from `first_pn`), while testing and once the path is found
//! capable. An ACK frame that raises the largest acknowledged packet number is checked
//! against the last one that passed (older ones are skipped, as reordered ACKs would fail for
//! no fault): counts must be present when it newly acknowledges marked packets, none may
//! fall, the ECT(0) and CE increase must cover the marked packets it newly acknowledges, and
//! neither total may exceed what we sent (ECT(1) at all: we never send it). The first check
//! passed with marked packets acknowledged makes the path capable; any check failing, or the
//! first `testing_packets` marked packets all lost (the marks themselves may be dropped,
//! 13.4.2), stops marking for good on this path. A rise of the CE count is a congestion
//! event (RFC 9002 7.1), which the congestion controller takes once per recovery period.
//! A new path is validated afresh (`restart`), the peer's counts kept (they are per space).
const std = @import("std");
const frames = @import("frames.zig");

pub const Codepoint = struct {
    pub const not_ect: u2 = 0;
    pub const ect1: u2 = 1;
    pub const ect0: u2 = 2;
    pub const ce: u2 = 3;
};

/// RFC 9000 A.4's states, without "unknown": marking goes on while testing.
pub const Validation = enum(u2) { testing, capable, failed };

/// The first marked packets: all of them lost is taken as marks being dropped (13.4.2).
pub const testing_packets = 10;

pub const State = struct {
    /// The ECT(0) and CE counts of the last ACK frame that passed validation (Application
    /// space; its ECT(1) count is 0, or validation failed).
    peer_ect0: u64 = 0,
    peer_ce: u64 = 0,
    /// Packets sent marked ECT(0), on every path.
    ect0_sent: u64 = 0,
    /// The first packet marked on this path; `tested` of the first `testing_packets` sent,
    /// `test_lost` of those lost.
    first_pn: u64 = 0,
    tested: u8 = 0,
    test_lost: u8 = 0,
    validation: Validation = .testing,
    /// The codepoint of the datagram the connection built last.
    last_mark: u2 = Codepoint.not_ect,
    /// ECN turned off by the operator: no path is ever tested.
    off: bool = false,

    /// ECN turned off: nothing is ever marked.
    pub fn disabled() State {
        return .{ .validation = .failed, .off = true };
    }

    /// The codepoint for the next 1-RTT packet.
    pub fn mark(s: *const State) u2 {
        return if (s.validation == .failed) Codepoint.not_ect else Codepoint.ect0;
    }

    /// A 1-RTT packet `pn` went out with codepoint `m` (from `mark`).
    pub fn onSent(s: *State, pn: u64, m: u2) void {
        s.last_mark = m;
        if (m != Codepoint.ect0) return;
        s.ect0_sent +|= 1;
        if (s.tested == 0) s.first_pn = pn;
        if (s.tested < testing_packets) s.tested += 1;
    }

    /// Whether packet `pn` was sent marked (as far as validation still cares).
    pub fn marked(s: *const State, pn: u64) bool {
        return s.validation != .failed and s.tested > 0 and pn >= s.first_pn;
    }

    /// A packet was declared lost: the first `testing_packets` marked all lost (none
    /// acknowledged first) takes ECN as the cause.
    pub fn onLost(s: *State, pn: u64) void {
        if (s.tested == 0 or pn < s.first_pn or pn - s.first_pn >= s.tested) return;
        s.test_lost += 1;
        if (s.test_lost >= testing_packets and s.validation == .testing) s.validation = .failed;
    }

    /// An Application-space ACK frame was processed: its counts (null for a plain ACK), how
    /// many marked packets it newly acknowledged, and whether it raised the largest
    /// acknowledged. Returns whether the CE count rose (a congestion event).
    pub fn onAck(s: *State, counts: ?frames.Ecn, marked_acked: u64, largest_raised: bool) bool {
        if (s.validation == .failed or !largest_raised) return false;
        const new = counts orelse {
            // RFC 9000 13.4.2.1: marks were sent and none are reported.
            if (marked_acked > 0) s.validation = .failed;
            return false;
        };
        if (!s.passes(new, marked_acked)) {
            s.validation = .failed;
            return false;
        }
        const ce_rose = new.ce > s.peer_ce;
        s.peer_ect0 = new.ect0;
        s.peer_ce = new.ce;
        if (marked_acked > 0) s.validation = .capable;
        return ce_rose;
    }

    /// The checks of RFC 9000 13.4.2.1. Counts are varints (below 2^62), so the sums fit.
    fn passes(s: *const State, new: frames.Ecn, marked_acked: u64) bool {
        if (new.ect0 < s.peer_ect0 or new.ce < s.peer_ce) return false;
        if (new.ect1 > 0) return false; // we never send ECT(1)
        if (new.ect0 + new.ce > s.ect0_sent) return false; // marks on packets we did not mark
        return (new.ect0 - s.peer_ect0) + (new.ce - s.peer_ce) >= marked_acked;
    }

    /// A new path: validation starts again (a path that failed may do better), unless ECN
    /// was turned off.
    pub fn restart(s: *State) void {
        if (s.off) return;
        s.validation = .testing;
        s.tested = 0;
        s.test_lost = 0;
    }
};

const testing = std.testing;

fn sendMarked(s: *State, first_pn: u64, count: u64) void {
    for (0..count) |i| s.onSent(first_pn + i, s.mark());
}

test "ecn: every packet marked while testing, and once the counts validate them" {
    var s: State = .{};
    sendMarked(&s, 5, testing_packets + 1);
    try testing.expectEqual(@as(u64, testing_packets + 1), s.ect0_sent);
    try testing.expectEqual(Validation.testing, s.validation);
    try testing.expectEqual(Codepoint.ect0, s.mark());
    try testing.expect(s.marked(5) and s.marked(15) and !s.marked(4));
    // Three of the marked packets acknowledged, two counted ECT(0) and one CE: valid, and
    // the CE count rose (from zero): a congestion event.
    try testing.expect(s.onAck(.{ .ect0 = 2, .ect1 = 0, .ce = 1 }, 3, true));
    try testing.expectEqual(Validation.capable, s.validation);
    try testing.expectEqual(Codepoint.ect0, s.mark());
    s.onSent(16, s.mark());
    try testing.expect(s.marked(16));
    try testing.expect(!s.onAck(.{ .ect0 = 3, .ect1 = 0, .ce = 1 }, 1, true));
}

test "ecn: counts that fall short of the marked packets acknowledged fail validation" {
    var s: State = .{};
    sendMarked(&s, 0, 4);
    try testing.expect(!s.onAck(.{ .ect0 = 2, .ect1 = 0, .ce = 0 }, 3, true));
    try testing.expectEqual(Validation.failed, s.validation);
    try testing.expectEqual(Codepoint.not_ect, s.mark());
    // Exactly enough passes.
    var t: State = .{};
    sendMarked(&t, 0, 4);
    _ = t.onAck(.{ .ect0 = 2, .ect1 = 0, .ce = 1 }, 3, true);
    try testing.expectEqual(Validation.capable, t.validation);
}

test "ecn: an ACK without counts for marked packets, or with ECT(1), or too many, fails" {
    var a: State = .{};
    sendMarked(&a, 0, 2);
    _ = a.onAck(null, 0, true); // acknowledges nothing marked: no verdict
    try testing.expectEqual(Validation.testing, a.validation);
    _ = a.onAck(null, 1, true);
    try testing.expectEqual(Validation.failed, a.validation);

    var b: State = .{};
    sendMarked(&b, 0, 2);
    _ = b.onAck(.{ .ect0 = 1, .ect1 = 1, .ce = 0 }, 1, true);
    try testing.expectEqual(Validation.failed, b.validation);

    var c: State = .{};
    sendMarked(&c, 0, 2);
    _ = c.onAck(.{ .ect0 = 2, .ect1 = 0, .ce = 1 }, 2, true); // three marks for two packets
    try testing.expectEqual(Validation.failed, c.validation);
}

test "ecn: counts at the varint maximum, falling counts, and reordered ACKs" {
    const max: u64 = (1 << 62) - 1;
    var s: State = .{};
    sendMarked(&s, 0, 3);
    s.ect0_sent = max; // as if that many had gone: no sum overflows
    try testing.expect(s.onAck(.{ .ect0 = 1, .ect1 = 0, .ce = max - 1 }, 2, true));
    try testing.expectEqual(Validation.capable, s.validation);
    // The same counts raise nothing; an ACK that does not raise the largest is not checked.
    try testing.expect(!s.onAck(.{ .ect0 = 1, .ect1 = 0, .ce = max - 1 }, 0, true));
    try testing.expect(!s.onAck(.{ .ect0 = 0, .ect1 = 0, .ce = 0 }, 1, false));
    try testing.expectEqual(Validation.capable, s.validation);
    // A fall in a newer ACK is a path (or peer) that cannot be trusted: no more marks.
    try testing.expect(!s.onAck(.{ .ect0 = 0, .ect1 = 0, .ce = max - 1 }, 0, true));
    try testing.expectEqual(Validation.failed, s.validation);
    // Over the total: more than sent.
    var t: State = .{};
    sendMarked(&t, 0, 3);
    t.ect0_sent = max;
    _ = t.onAck(.{ .ect0 = max, .ect1 = 0, .ce = 1 }, 1, true);
    try testing.expectEqual(Validation.failed, t.validation);
}

test "ecn: all testing packets lost disables marking; a new path tests again" {
    var s: State = .{};
    sendMarked(&s, 100, testing_packets);
    for (0..testing_packets - 1) |i| s.onLost(100 + i);
    s.onLost(99); // not a testing packet
    try testing.expectEqual(Validation.testing, s.validation);
    s.onLost(109);
    try testing.expectEqual(Validation.failed, s.validation);
    s.restart();
    try testing.expectEqual(Validation.testing, s.validation);
    try testing.expectEqual(Codepoint.ect0, s.mark());
    var off = State.disabled();
    off.restart();
    try testing.expectEqual(Codepoint.not_ect, off.mark());
}
