//! Congestion control and a pacer for one QUIC connection: NewReno (RFC 9002 7, 7.7), or
//! CUBIC (RFC 9438) chosen by a parameter behind the same calls.
//!
//! Sans-IO and allocation-free; `quic/recovery.zig` drives it (bytes sent, acknowledged, lost,
//! the congestion events) and the connection asks it what may be sent: `sendAllowanceBytes`
//! (the window) and `nextSendTimeUs` (the pacer). ECN-CE is an input: the connection validates
//! the peer's ECN counts and, when CE rose, calls `onEcnCe` with the send time of the largest
//! packet the ACK acknowledged (`AckOutcome.largest_acked_time_sent_us`).
//!
//! The two differ only in congestion avoidance and in how much a congestion event takes
//! away (1/2 for NewReno, 3/10 for CUBIC); slow start, recovery periods, persistent congestion,
//! the minimum window and the pacer are shared. CUBIC's window function is computed in f64
//! seconds and segments, as RFC 9438 writes it. Not done: CUBIC's spurious-loss undo (4.9).
const std = @import("std");
const assert = std.debug.assert;

/// The initial window's floor in bytes (RFC 9002 7.2).
const initial_window_floor_bytes: u64 = 14_720;
/// The pacer sends at 5/4 of cwnd per smoothed RTT, so that it does not itself hold the
/// sender below its window (RFC 9002 7.7's N).
const pacing_gain_num: u64 = 5;
const pacing_gain_den: u64 = 4;

pub const Algorithm = enum(u1) { new_reno, cubic };

/// RFC 9438 4.1 and 4.6: the cubic's constant (segments per second cubed) and the window
/// kept on a congestion event; 4.3's additive increase that matches Reno's average rate.
const cubic_c: f64 = 0.4;
const cubic_beta: f64 = 0.7;
const cubic_alpha: f64 = 3.0 * (1.0 - cubic_beta) / (1.0 + cubic_beta);

pub fn initialWindowBytes(max_datagram_bytes: u16) u64 {
    const mds: u64 = max_datagram_bytes;
    return @min(10 * mds, @max(initial_window_floor_bytes, 2 * mds));
}

pub fn minimumWindowBytes(max_datagram_bytes: u16) u64 {
    return 2 * @as(u64, max_datagram_bytes);
}

pub const Congestion = struct {
    cwnd_bytes: u64,
    ssthresh_bytes: u64 = std.math.maxInt(u64),
    bytes_in_flight: u64 = 0,
    /// Bytes acknowledged in congestion avoidance toward the next one-datagram increase.
    avoidance_acked_bytes: u64 = 0,
    /// The recovery period: packets sent at or before this time do not grow the window,
    /// and their loss does not reduce it again (RFC 9002 7.3.2).
    recovery_start_us: u64 = 0,
    /// The pacer's token bucket.
    pacer_tokens_bytes: u64,
    pacer_refill_us: u64 = 0,
    max_datagram_bytes: u16,
    /// CUBIC: the window before the last reduction, its start, and the Reno-friendly
    /// estimate (RFC 9438 4.2, 4.3). Unused by NewReno.
    cubic_w_max_bytes: u64 = 0,
    cubic_epoch_start_us: u64 = 0,
    cubic_k_us: u64 = 0,
    cubic_w_est_bytes: u64 = 0,
    algorithm: Algorithm,
    cubic_epoch_started: bool = false,
    in_recovery_period: bool = false,
    /// Set by the connection when it had less to send than the window allowed: an
    /// under-used window is not grown (RFC 9002 7.8).
    app_limited: bool = false,

    pub fn init(max_datagram_bytes: u16, algorithm: Algorithm) Congestion {
        assert(max_datagram_bytes >= 1200);
        const window = initialWindowBytes(max_datagram_bytes);
        return .{
            .cwnd_bytes = window,
            .pacer_tokens_bytes = window,
            .max_datagram_bytes = max_datagram_bytes,
            .algorithm = algorithm,
        };
    }

    /// Path MTU discovery changed the datagram size (`quic/pmtu.zig`). An initial window not
    /// yet grown is made again with the new size (RFC 9002 7.2); a window the path earned
    /// stays, above the new minimum.
    pub fn setMaxDatagramBytes(self: *Congestion, bytes: u16) void {
        assert(bytes >= 1200);
        if (self.cwnd_bytes == initialWindowBytes(self.max_datagram_bytes)) {
            self.cwnd_bytes = initialWindowBytes(bytes);
        }
        self.max_datagram_bytes = bytes;
        self.cwnd_bytes = @max(self.cwnd_bytes, self.minimumWindow());
    }

    pub fn minimumWindow(self: *const Congestion) u64 {
        return minimumWindowBytes(self.max_datagram_bytes);
    }

    /// Whether a packet sent at `time_sent_us` belongs to the current recovery period.
    pub fn inRecovery(self: *const Congestion, time_sent_us: u64) bool {
        return self.in_recovery_period and time_sent_us <= self.recovery_start_us;
    }

    /// How many bytes the window allows in flight beyond what is there.
    pub fn sendAllowanceBytes(self: *const Congestion) u64 {
        return self.cwnd_bytes -| self.bytes_in_flight;
    }

    /// A packet that counts in flight was sent.
    pub fn onPacketSent(self: *Congestion, bytes: u64, now_us: u64, smoothed_rtt_us: u64) void {
        self.pacer_tokens_bytes = self.pacerTokensAt(now_us, smoothed_rtt_us) -| bytes;
        self.pacer_refill_us = @max(self.pacer_refill_us, now_us);
        self.bytes_in_flight += bytes;
    }

    /// In-flight packets were acknowledged: `acked_bytes` in all, of which `growth_bytes` were
    /// sent outside the recovery period and may grow the window (RFC 9002 7.3.1, 7.3.3).
    pub fn onPacketsAcked(self: *Congestion, acked_bytes: u64, growth_bytes: u64, now_us: u64, smoothed_rtt_us: u64) void {
        assert(growth_bytes <= acked_bytes);
        assert(acked_bytes <= self.bytes_in_flight);
        self.bytes_in_flight -= acked_bytes;
        if (self.app_limited or growth_bytes == 0) return;
        var left = growth_bytes;
        if (self.cwnd_bytes < self.ssthresh_bytes) {
            // Slow start: the window grows by what was acknowledged, up to ssthresh.
            const step = @min(left, self.ssthresh_bytes - self.cwnd_bytes);
            self.cwnd_bytes += step;
            left -= step;
        }
        if (left == 0) return;
        switch (self.algorithm) {
            .new_reno => self.renoAvoidance(left),
            .cubic => self.cubicAvoidance(left, now_us, smoothed_rtt_us),
        }
    }

    /// NewReno's congestion avoidance: one datagram per window of bytes acknowledged.
    fn renoAvoidance(self: *Congestion, acked_bytes: u64) void {
        self.avoidance_acked_bytes += acked_bytes;
        while (self.avoidance_acked_bytes >= self.cwnd_bytes) {
            self.avoidance_acked_bytes -= self.cwnd_bytes;
            self.cwnd_bytes += self.max_datagram_bytes;
        }
    }

    /// RFC 9438 4.2-4.4: toward W_cubic(t + RTT), by at most half the window per window
    /// acknowledged, and never below what Reno would have reached.
    fn cubicAvoidance(self: *Congestion, acked_bytes: u64, now_us: u64, smoothed_rtt_us: u64) void {
        if (!self.cubic_epoch_started) {
            // Avoidance without a reduction first (after slow start ended at ssthresh, or after
            // persistent congestion): the curve starts at its plateau, here.
            self.startCubicEpoch(self.cwnd_bytes, now_us);
        }
        const cwnd: f64 = @floatFromInt(self.cwnd_bytes);
        const acked: f64 = @floatFromInt(acked_bytes);
        const mds: f64 = @floatFromInt(self.max_datagram_bytes);
        const w_est = @as(f64, @floatFromInt(self.cubic_w_est_bytes)) + cubic_alpha * mds * acked / cwnd;
        self.cubic_w_est_bytes = @intFromFloat(w_est);
        const elapsed_us = now_us -| self.cubic_epoch_start_us;
        const w_cubic = self.cubicWindowBytes(elapsed_us);
        if (w_cubic < w_est) {
            self.cwnd_bytes = @max(self.cwnd_bytes, self.cubic_w_est_bytes);
            return;
        }
        const target = std.math.clamp(self.cubicWindowBytes(elapsed_us +| smoothed_rtt_us), cwnd, 1.5 * cwnd);
        self.cwnd_bytes += @intFromFloat((target - cwnd) * acked / cwnd);
    }

    /// W_cubic(t) = C * (t - K)^3 + W_max, in bytes (RFC 9438 4.2).
    pub fn cubicWindowBytes(self: *const Congestion, elapsed_us: u64) f64 {
        const t_s = @as(f64, @floatFromInt(elapsed_us)) / 1e6;
        const k_s = @as(f64, @floatFromInt(self.cubic_k_us)) / 1e6;
        const mds: f64 = @floatFromInt(self.max_datagram_bytes);
        const w_max: f64 = @floatFromInt(self.cubic_w_max_bytes);
        return @max(0.0, cubic_c * std.math.pow(f64, t_s - k_s, 3) * mds + w_max);
    }

    fn startCubicEpoch(self: *Congestion, w_max_bytes: u64, now_us: u64) void {
        self.cubic_epoch_started = true;
        self.cubic_epoch_start_us = now_us;
        self.cubic_w_max_bytes = w_max_bytes;
        self.cubic_w_est_bytes = self.cwnd_bytes;
        // K = cbrt((W_max - cwnd_epoch) / C), in segments and seconds: when the curve climbs
        // back from the window it starts at to W_max.
        const below_bytes: f64 = @floatFromInt(w_max_bytes -| self.cwnd_bytes);
        const k_s = std.math.cbrt(below_bytes / @as(f64, @floatFromInt(self.max_datagram_bytes)) / cubic_c);
        self.cubic_k_us = @intFromFloat(k_s * 1e6);
    }

    /// In-flight bytes left the network without an acknowledgement: declared lost, or their
    /// space's keys were discarded (RFC 9002 6.4: not a congestion signal).
    pub fn onBytesGone(self: *Congestion, bytes: u64) void {
        assert(bytes <= self.bytes_in_flight);
        self.bytes_in_flight -= bytes;
    }

    /// Loss of (or ECN-CE on) a packet sent at `time_sent_us`. Returns whether a new recovery
    /// period began: a second loss from the same flight does not halve the window again.
    pub fn onCongestionEvent(self: *Congestion, time_sent_us: u64, now_us: u64) bool {
        if (self.inRecovery(time_sent_us)) return false;
        self.in_recovery_period = true;
        self.recovery_start_us = now_us;
        const before_bytes = self.cwnd_bytes;
        const kept_bytes = switch (self.algorithm) {
            .new_reno => before_bytes / 2,
            .cubic => before_bytes * 7 / 10,
        };
        self.ssthresh_bytes = @max(kept_bytes, self.minimumWindow());
        self.cwnd_bytes = self.ssthresh_bytes;
        self.avoidance_acked_bytes = 0;
        if (self.algorithm == .cubic) {
            // Fast convergence (RFC 9438 4.7): a flow losing ground releases more of it.
            const converging = self.cubic_epoch_started and before_bytes < self.cubic_w_max_bytes;
            const w_max = if (converging) before_bytes * 17 / 20 else before_bytes;
            self.startCubicEpoch(w_max, now_us);
        }
        return true;
    }

    /// The peer reported more ECN-CE marks in an ACK whose largest acknowledged packet was sent
    /// at `largest_acked_time_sent_us` (RFC 9002 7.1).
    pub fn onEcnCe(self: *Congestion, largest_acked_time_sent_us: u64, now_us: u64) void {
        _ = self.onCongestionEvent(largest_acked_time_sent_us, now_us);
    }

    /// RFC 9002 7.6.2: the window collapses to its minimum and recovery ends, so that the
    /// next acknowledgements grow it again by slow start.
    pub fn onPersistentCongestion(self: *Congestion) void {
        self.cwnd_bytes = self.minimumWindow();
        self.in_recovery_period = false;
        self.avoidance_acked_bytes = 0;
        self.cubic_epoch_started = false; // CUBIC starts afresh from slow start (RFC 9438 4.8)
    }

    /// When a packet of `bytes` may leave by the pacer: `now_us` or later.
    pub fn nextSendTimeUs(self: *const Congestion, bytes: u64, now_us: u64, smoothed_rtt_us: u64) u64 {
        const tokens = self.pacerTokensAt(now_us, smoothed_rtt_us);
        if (tokens >= bytes) return now_us;
        const rtt_us: u128 = @max(smoothed_rtt_us, 1);
        const deficit: u128 = bytes - tokens;
        const rate_den: u128 = @as(u128, self.cwnd_bytes) * pacing_gain_num;
        const wait_us = std.math.divCeil(u128, deficit * rtt_us * pacing_gain_den, rate_den) catch unreachable;
        return now_us +| @as(u64, @intCast(@min(wait_us, std.math.maxInt(u64))));
    }

    /// The bucket refills at 5/4 cwnd per smoothed RTT and holds at most the initial window:
    /// the largest burst RFC 9002 7.7 lets a sender make.
    fn pacerTokensAt(self: *const Congestion, now_us: u64, smoothed_rtt_us: u64) u64 {
        const burst_max = initialWindowBytes(self.max_datagram_bytes);
        const elapsed_us: u128 = now_us -| self.pacer_refill_us;
        const rtt_us: u128 = @max(smoothed_rtt_us, 1);
        const refill = elapsed_us * self.cwnd_bytes * pacing_gain_num / (rtt_us * pacing_gain_den);
        return @intCast(@min(@as(u128, self.pacer_tokens_bytes) + refill, burst_max));
    }
};

const testing = std.testing;

test "the initial and minimum windows (RFC 9002 7.2)" {
    try testing.expectEqual(@as(u64, 12_000), initialWindowBytes(1200));
    try testing.expectEqual(@as(u64, 14_720), initialWindowBytes(1472));
    try testing.expectEqual(@as(u64, 18_000), initialWindowBytes(9000));
    try testing.expectEqual(@as(u64, 2400), minimumWindowBytes(1200));
    const c = Congestion.init(1200, .new_reno);
    try testing.expectEqual(@as(u64, 12_000), c.sendAllowanceBytes());
}

test "slow start doubles per round trip, then congestion avoidance adds one datagram per window" {
    var c = Congestion.init(1200, .new_reno);
    c.onPacketSent(12_000, 0, 100_000);
    try testing.expectEqual(@as(u64, 0), c.sendAllowanceBytes());
    c.onPacketsAcked(12_000, 12_000, 0, 100_000);
    try testing.expectEqual(@as(u64, 24_000), c.cwnd_bytes);
    // A loss halves it and sets ssthresh; what is acknowledged after, sent after, grows linearly.
    c.onPacketSent(24_000, 1_000, 100_000);
    try testing.expect(c.onCongestionEvent(1_000, 2_000));
    try testing.expectEqual(@as(u64, 12_000), c.cwnd_bytes);
    try testing.expectEqual(@as(u64, 12_000), c.ssthresh_bytes);
    c.onBytesGone(1_200);
    c.onPacketsAcked(22_800, 0, 0, 100_000); // sent before the recovery began: no growth
    try testing.expectEqual(@as(u64, 12_000), c.cwnd_bytes);
    c.onPacketSent(12_000, 3_000, 100_000);
    c.onPacketsAcked(11_999, 11_999, 0, 100_000);
    try testing.expectEqual(@as(u64, 12_000), c.cwnd_bytes);
    c.onPacketsAcked(1, 1, 0, 100_000); // a whole window acknowledged: one datagram more
    try testing.expectEqual(@as(u64, 13_200), c.cwnd_bytes);
}

test "slow start stops at ssthresh mid-acknowledgement" {
    var c = Congestion.init(1200, .new_reno);
    c.ssthresh_bytes = 13_000;
    c.onPacketSent(12_000, 0, 1);
    c.onPacketsAcked(12_000, 12_000, 0, 100_000); // 1_000 by slow start, 11_000 toward avoidance
    try testing.expectEqual(@as(u64, 13_000), c.cwnd_bytes);
    try testing.expectEqual(@as(u64, 11_000), c.avoidance_acked_bytes);
}

test "a loss during recovery does not reduce twice; one sent after does" {
    var c = Congestion.init(1200, .new_reno);
    c.onPacketSent(12_000, 0, 1);
    try testing.expect(c.onCongestionEvent(0, 10));
    try testing.expect(!c.onCongestionEvent(5, 20)); // sent before recovery started at 10
    try testing.expect(!c.onCongestionEvent(10, 20)); // sent at the start: still in it
    try testing.expectEqual(@as(u64, 6_000), c.cwnd_bytes);
    try testing.expect(c.onCongestionEvent(11, 30));
    try testing.expectEqual(@as(u64, 3_000), c.cwnd_bytes);
    try testing.expect(c.onCongestionEvent(31, 40));
    try testing.expectEqual(@as(u64, 2_400), c.cwnd_bytes); // the minimum window holds
}

test "ECN-CE is a congestion event; persistent congestion collapses to the minimum" {
    var c = Congestion.init(1200, .new_reno);
    c.onEcnCe(0, 1);
    try testing.expectEqual(@as(u64, 6_000), c.cwnd_bytes);
    c.onPersistentCongestion();
    try testing.expectEqual(@as(u64, 2_400), c.cwnd_bytes);
    try testing.expect(!c.inRecovery(0));
    c.onPacketSent(2_400, 2, 1);
    c.onPacketsAcked(2_400, 2_400, 0, 100_000); // below ssthresh (6_000): slow start again
    try testing.expectEqual(@as(u64, 4_800), c.cwnd_bytes);
}

test "an app-limited sender does not grow its window" {
    var c = Congestion.init(1200, .new_reno);
    c.app_limited = true;
    c.onPacketSent(1_200, 0, 1);
    c.onPacketsAcked(1_200, 1_200, 0, 100_000);
    try testing.expectEqual(@as(u64, 12_000), c.cwnd_bytes);
    try testing.expectEqual(@as(u64, 0), c.bytes_in_flight);
}

test "pacing: a burst of the initial window, then 5/4 cwnd per smoothed RTT" {
    var c = Congestion.init(1200, .new_reno);
    const rtt_us: u64 = 100_000;
    try testing.expectEqual(@as(u64, 0), c.nextSendTimeUs(12_000, 0, rtt_us));
    c.onPacketSent(12_000, 0, rtt_us);
    // Empty bucket: 1200 bytes at 12_000*5/4 bytes per 100 ms take 8 ms.
    try testing.expectEqual(@as(u64, 8_000), c.nextSendTimeUs(1_200, 0, rtt_us));
    try testing.expectEqual(@as(u64, 8_000), c.nextSendTimeUs(1_200, 4_000, rtt_us));
    c.onBytesGone(12_000);
    c.onPacketSent(1_200, 8_000, rtt_us);
    try testing.expectEqual(@as(u64, 16_000), c.nextSendTimeUs(1_200, 8_000, rtt_us));
    // A long pause refills no more than the burst.
    try testing.expectEqual(@as(u64, 10_000_000), c.nextSendTimeUs(12_000, 10_000_000, rtt_us));
    try testing.expectEqual(@as(u64, 10_000_000 + 8_000), c.nextSendTimeUs(13_200, 10_000_000, rtt_us));
}

test "CUBIC: a loss keeps 7/10 of the window, and the curve climbs back to W_max at K" {
    var c = Congestion.init(1200, .cubic);
    c.cwnd_bytes = 120_000; // 100 segments
    c.bytes_in_flight = 120_000;
    try testing.expect(c.onCongestionEvent(0, 1_000_000));
    try testing.expectEqual(@as(u64, 84_000), c.cwnd_bytes);
    try testing.expectEqual(@as(u64, 84_000), c.ssthresh_bytes);
    try testing.expectEqual(@as(u64, 120_000), c.cubic_w_max_bytes);
    // K = cbrt(100 * 0.3 / 0.4) = cbrt(75) s
    try testing.expectApproxEqAbs(std.math.cbrt(@as(f64, 75.0)) * 1e6, @as(f64, @floatFromInt(c.cubic_k_us)), 1.0);
    try testing.expectApproxEqAbs(84_000.0, c.cubicWindowBytes(0), 1.0);
    try testing.expectApproxEqAbs(120_000.0, c.cubicWindowBytes(c.cubic_k_us), 1.0);
    try testing.expect(c.cubicWindowBytes(c.cubic_k_us + 1_000_000) > 120_000.0); // convex past it

    // A window acknowledged per 100 ms RTT after the recovery: the window grows, concave
    // below W_max, and never more than half of itself per window.
    var now_us: u64 = 1_000_000;
    var previous = c.cwnd_bytes;
    while (now_us < 1_000_000 + c.cubic_k_us) : (now_us += 100_000) {
        c.onPacketsAcked(c.cwnd_bytes, c.cwnd_bytes, now_us + 1, 100_000);
        c.bytes_in_flight += c.cwnd_bytes;
        try testing.expect(c.cwnd_bytes >= previous and c.cwnd_bytes <= previous + previous / 2);
        previous = c.cwnd_bytes;
    }
    try testing.expect(c.cwnd_bytes > 110_000 and c.cwnd_bytes < 125_000);
}

test "CUBIC: fast convergence lowers W_max when losses come below it; NewReno halves" {
    var c = Congestion.init(1200, .cubic);
    c.cwnd_bytes = 120_000;
    _ = c.onCongestionEvent(0, 10);
    try testing.expect(c.onCongestionEvent(20, 30)); // sent after the first: a new event
    try testing.expectEqual(@as(u64, 84_000 * 7 / 10), c.cwnd_bytes);
    try testing.expectEqual(@as(u64, 84_000 * 17 / 20), c.cubic_w_max_bytes);
    var r = Congestion.init(1200, .new_reno);
    r.cwnd_bytes = 120_000;
    _ = r.onCongestionEvent(0, 10);
    try testing.expectEqual(@as(u64, 60_000), r.cwnd_bytes);
}

test "CUBIC: the Reno-friendly estimate wins while the cubic is flat" {
    var c = Congestion.init(1200, .cubic);
    c.ssthresh_bytes = 12_000; // avoidance from the start, no reduction: K = 0, W_max = cwnd
    c.bytes_in_flight = 1_000_000;
    // Short RTT, acks over 10 ms: the cubic barely moves, Reno's line (alpha ~0.53
    // segments per window) carries the window.
    var now_us: u64 = 0;
    while (now_us < 10_000) : (now_us += 1_000) c.onPacketsAcked(12_000, 12_000, now_us, 1_000);
    try testing.expect(c.cwnd_bytes >= 12_000 + 5 * 600);
    try testing.expect(c.cubic_w_est_bytes <= c.cwnd_bytes);
}

test "CUBIC: persistent congestion restarts from slow start" {
    var c = Congestion.init(1200, .cubic);
    c.cwnd_bytes = 120_000;
    _ = c.onCongestionEvent(0, 10);
    c.onPersistentCongestion();
    try testing.expectEqual(@as(u64, 2_400), c.cwnd_bytes);
    try testing.expect(!c.cubic_epoch_started);
    c.bytes_in_flight = 2_400;
    c.onPacketsAcked(2_400, 2_400, 20, 100_000);
    try testing.expectEqual(@as(u64, 4_800), c.cwnd_bytes); // slow start below ssthresh
}

test "a new datagram size: the initial window follows it, a grown window stays" {
    var c = Congestion.init(1200, .new_reno);
    c.setMaxDatagramBytes(1500);
    try testing.expectEqual(initialWindowBytes(1500), c.cwnd_bytes);
    c.cwnd_bytes = 100_000;
    c.setMaxDatagramBytes(1200);
    try testing.expectEqual(@as(u64, 100_000), c.cwnd_bytes);
    try testing.expectEqual(@as(u64, 2400), c.minimumWindow());
    c.cwnd_bytes = 2400;
    c.setMaxDatagramBytes(1500);
    try testing.expectEqual(@as(u64, 3000), c.cwnd_bytes); // never below the minimum
}

test "size at rest" {
    std.debug.print("\nquic/congestion: @sizeOf Congestion={d}\n", .{@sizeOf(Congestion)});
    try testing.expect(@sizeOf(Congestion) <= 96);
}
