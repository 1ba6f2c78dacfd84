//! Validating a client's new address (RFC 9000 8.2, 9.3): the connection's side of a
//! migration. The connection is address-blind; its owner (`http3/worker.zig`) sees a
//! datagram come from another address and, when that datagram carried the newest
//! non-probing packet, sends to the new address from then on and starts a `Check` here.
//!
//! While a check lasts: a PATH_CHALLENGE with eight random bytes goes in the next 1-RTT
//! packet (its datagram padded to 1200 bytes when the budget allows, 8.2.1), again after a
//! PTO, then two, four (at most `challenges_max` in all); everything sent to the new
//! address counts against three times what came from it (the anti-amplification limit of
//! an address not yet validated, 9.3.1); a PATH_RESPONSE with the same bytes validates the
//! address, whereupon the RTT estimate and the congestion controller start over unless only
//! the port changed (9.4, a NAT rebinding keeps its path). No response by three times the
//! larger of the current PTO and a new path's first PTO (8.2.4) fails the check: the owner
//! goes back to the address last validated (9.3.2). The check is a heap record that exists
//! only while it lasts; the connection keeps its outcome until the owner takes it.
const std = @import("std");
const recovery_mod = @import("recovery.zig");

pub const data_len = 8;
/// PATH_CHALLENGE frames one check sends at most.
pub const challenges_max = 5;

pub const Outcome = enum(u8) { none, validated, failed };

pub const Check = struct {
    challenge: [data_len]u8,
    /// Only the port differs from the address last validated (no reset on success).
    port_only: bool,
    /// A PATH_CHALLENGE goes in the next 1-RTT packet that may carry one.
    owed: bool = true,
    sends: u8 = 0,
    /// Bytes from and to the new address since the check started (9.3.1).
    received: u64,
    sent: u64 = 0,
    /// When the next PATH_CHALLENGE is owed (after one went), and when the check fails.
    resend_us: u64 = recovery_mod.never,
    give_up_us: u64,

    /// `received`: the datagram that moved the connection; `pto_us`: the connection's PTO.
    pub fn init(challenge: [data_len]u8, port_only: bool, received: u64, now_us: u64, pto_us: u64, peer_max_ack_delay_us: u64) Check {
        // A new path's first PTO: kInitialRtt with its variance, and the peer's ACK delay.
        const fresh: recovery_mod.Rtt = .{};
        const new_path_pto = fresh.ptoBaseUs() +| peer_max_ack_delay_us;
        return .{
            .challenge = challenge,
            .port_only = port_only,
            .received = received,
            .give_up_us = now_us +| 3 *| @max(pto_us, new_path_pto),
        };
    }

    /// What may still be sent to the new address.
    pub fn allowance(k: *const Check) u64 {
        return 3 *| k.received -| k.sent;
    }

    /// A PATH_CHALLENGE was written; the next is owed a PTO later, doubled each time.
    pub fn onChallengeSent(k: *Check, now_us: u64, pto_us: u64) void {
        std.debug.assert(k.owed and k.sends < challenges_max);
        k.owed = false;
        k.sends += 1;
        k.resend_us = if (k.sends == challenges_max) recovery_mod.never else now_us +| std.math.shl(u64, @max(pto_us, 1), k.sends - 1);
    }

    pub fn matches(k: *const Check, data: *const [data_len]u8) bool {
        return std.mem.eql(u8, &k.challenge, data);
    }

    pub fn deadline(k: *const Check) u64 {
        return @min(k.give_up_us, k.resend_us);
    }

    /// The check's timers at `now_us`: true when it failed.
    pub fn onTimeout(k: *Check, now_us: u64) bool {
        if (now_us >= k.give_up_us) return true;
        if (now_us >= k.resend_us) {
            k.resend_us = recovery_mod.never;
            k.owed = true;
        }
        return false;
    }
};

const testing = std.testing;

test "path check: challenges backed off and bounded, the amplification budget, the give-up time" {
    const pto: u64 = 10_000; // 10 ms
    var k = Check.init(.{ 1, 2, 3, 4, 5, 6, 7, 8 }, false, 100, 1_000_000, pto, 25_000);
    // 3 x max(10 ms, 333 + 4 x 166.5 + 25 ms)
    try testing.expectEqual(@as(u64, 1_000_000 + 3 * (333_000 + 666_000 + 25_000)), k.give_up_us);
    try testing.expectEqual(@as(u64, 300), k.allowance());
    k.sent = 299;
    try testing.expectEqual(@as(u64, 1), k.allowance());
    k.sent = 301;
    try testing.expectEqual(@as(u64, 0), k.allowance());
    try testing.expect(k.owed);
    var now: u64 = 1_000_000;
    var gaps: [challenges_max]u64 = undefined;
    for (0..challenges_max) |i| {
        try testing.expect(k.owed);
        k.onChallengeSent(now, pto);
        try testing.expect(!k.owed);
        if (i + 1 == challenges_max) break;
        gaps[i] = k.resend_us - now;
        try testing.expect(!k.onTimeout(k.resend_us - 1));
        try testing.expect(!k.owed);
        now = k.resend_us;
        try testing.expect(!k.onTimeout(now));
    }
    try testing.expectEqualSlices(u64, &.{ pto, 2 * pto, 4 * pto, 8 * pto }, gaps[0 .. challenges_max - 1]);
    // The last challenge went: nothing more is owed, only the give-up time is left.
    try testing.expectEqual(recovery_mod.never, k.resend_us);
    try testing.expectEqual(k.give_up_us, k.deadline());
    try testing.expect(!k.onTimeout(k.give_up_us - 1));
    try testing.expect(k.onTimeout(k.give_up_us));
    try testing.expect(k.matches(&.{ 1, 2, 3, 4, 5, 6, 7, 8 }));
    try testing.expect(!k.matches(&.{ 1, 2, 3, 4, 5, 6, 7, 9 }));
}

test "path check: a slow current path sets the give-up time" {
    const k = Check.init(@splat(0), true, 1200, 0, 2_000_000, 0);
    try testing.expectEqual(@as(u64, 6_000_000), k.give_up_us);
    try testing.expectEqual(@as(u64, 3600), k.allowance());
}
