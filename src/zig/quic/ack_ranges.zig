//! What we received in one packet number space, and when to acknowledge it (RFC 9000 13.2).
//!
//! Sans-IO, no allocation: the set of received packet numbers is a fixed array of ranges, so a
//! space costs the same at rest as under load. Past the capacity the oldest (lowest) range is
//! dropped (13.2.3) and everything below what was dropped becomes a duplicate: a packet number
//! below `floor` is never processed again (RFC 9000 12.3 allows exactly this bound). The same
//! floor rises when the peer acknowledges one of our ACK frames (13.2.4): the ranges it has seen
//! are forgotten, and a late packet below them is dropped; its sender declares it lost and sends
//! its frames again in a new packet, so nothing is lost but a little bandwidth.
//!
//! The connection's order for a packet: remove protection, `isDuplicate` (drop if so), process
//! its frames, `onPacketReceived`; for output, `ackDue`/`ackDeadline`, then `writeRanges` and
//! `ackDelayUs` into an ACK frame, then `onAckSent`.
const std = @import("std");
const assert = std.debug.assert;

/// The largest packet number QUIC allows (RFC 9000 12.3): numbers never wrap, and `pn + 1`
/// always fits in a u64.
pub const pn_max: u64 = (1 << 62) - 1;

/// Time that never comes: the deadline of what is not due.
pub const never: u64 = std.math.maxInt(u64);

pub const Space = enum(u2) {
    initial,
    handshake,
    application,
};
pub const space_count = 3;

/// Packet numbers `smallest..largest`, both included.
pub const Range = struct {
    smallest: u64,
    largest: u64,
};

/// Ranges kept per space: Initial and Handshake carry a few packets each before their keys go,
/// Application carries the connection. Sized for the idle budget (8 bytes a range).
pub const ranges_max_handshake = 4;
pub const ranges_max_application = 16;

/// What we advertise as max_ack_delay (RFC 9000 18.2's default).
pub const max_ack_delay_us_default: u64 = 25_000;

pub fn AckRanges(comptime ranges_max: u8) type {
    comptime assert(ranges_max >= 2);
    return struct {
        const Self = @This();
        pub const capacity = ranges_max;

        /// Ascending, disjoint and never adjacent: slots[0] is the oldest.
        slots: [ranges_max]Slot = undefined,
        /// Every packet number below this one is a duplicate.
        floor: u64 = 0,
        largest_received: u64 = 0,
        /// When the largest packet number was received: the ACK Delay field counts from it.
        largest_received_time_us: u64 = 0,
        /// When an ACK frame must be sent: `never`, or a time (`now` for at once).
        ack_deadline_us: u64 = never,
        max_ack_delay_us: u32,
        /// The ECN marks of the packets received (RFC 9000 13.4.1), reported in our ACK
        /// frames once any came: ECT(0), ECT(1), CE.
        ecn: [3]u64 = .{ 0, 0, 0 },
        count: u8 = 0,
        /// Ack-eliciting packets received since the last ACK frame sent.
        ack_eliciting_unacked: u8 = 0,
        received_any: bool = false,
        /// Initial and Handshake packets are acknowledged at once (13.2.1).
        immediate: bool,

        /// One range as kept, 8 bytes instead of 16: how far its largest is below
        /// `largest_received`, and how many numbers it holds past its smallest.
        const Slot = struct { top_gap: u32, span: u32 };

        /// The ranges unpacked, for the operations that rewrite them.
        const Set = struct {
            ranges: [ranges_max]Range = undefined,
            count: u8,
            floor: u64,

            fn insert(set: *Set, pn: u64) void {
                // The first range above pn; the one below it ends before pn (not a duplicate).
                var above: usize = set.count;
                while (above > 0 and set.ranges[above - 1].smallest > pn) above -= 1;
                const joins_below = above > 0 and set.ranges[above - 1].largest + 1 == pn;
                const joins_above = above < set.count and pn + 1 == set.ranges[above].smallest;
                if (joins_below and joins_above) {
                    set.ranges[above - 1].largest = set.ranges[above].largest;
                    set.removeAt(above);
                } else if (joins_below) {
                    set.ranges[above - 1].largest = pn;
                } else if (joins_above) {
                    set.ranges[above].smallest = pn;
                } else if (set.count < ranges_max) {
                    var i: usize = set.count;
                    while (i > above) : (i -= 1) set.ranges[i] = set.ranges[i - 1];
                    set.ranges[above] = .{ .smallest = pn, .largest = pn };
                    set.count += 1;
                } else if (above == 0) {
                    // Full, and this would be the oldest range: it is the one dropped.
                    set.floor = pn + 1;
                } else {
                    // Full: drop the oldest range, shift the ones below pn down one slot.
                    set.floor = set.ranges[0].largest + 1;
                    var i: usize = 0;
                    while (i + 1 < above) : (i += 1) set.ranges[i] = set.ranges[i + 1];
                    set.ranges[above - 1] = .{ .smallest = pn, .largest = pn };
                }
            }

            fn removeAt(set: *Set, index: usize) void {
                assert(index < set.count);
                var i = index;
                while (i + 1 < set.count) : (i += 1) set.ranges[i] = set.ranges[i + 1];
                set.count -= 1;
            }
        };

        fn unpack(self: *const Self, slot: Slot) Range {
            const largest = self.largest_received - slot.top_gap;
            return .{ .smallest = largest - slot.span, .largest = largest };
        }

        fn load(self: *const Self) Set {
            var set: Set = .{ .count = self.count, .floor = self.floor };
            for (self.slots[0..self.count], 0..) |slot, i| set.ranges[i] = self.unpack(slot);
            return set;
        }

        /// Packs `set` below `largest_received`. What 32 bits cannot say (a range 2^32 numbers
        /// below the largest, or longer than 2^32) is cut with everything older: the floor
        /// rises over it, as it does over a range dropped at capacity.
        fn store(self: *Self, set: *const Set) void {
            const u32_max = std.math.maxInt(u32);
            var floor = set.floor;
            var lowest: usize = set.count;
            while (lowest > 0) {
                const r = set.ranges[lowest - 1];
                if (self.largest_received - r.largest > u32_max) {
                    floor = @max(floor, r.largest + 1);
                    break;
                }
                lowest -= 1;
                if (r.largest - r.smallest > u32_max) {
                    floor = @max(floor, r.largest - u32_max);
                    break;
                }
            }
            for (set.ranges[lowest..set.count], 0..) |r, i| {
                const smallest = @max(r.smallest, floor);
                self.slots[i] = .{ .top_gap = @intCast(self.largest_received - r.largest), .span = @intCast(r.largest - smallest) };
            }
            self.count = @intCast(set.count - lowest);
            self.floor = floor;
            self.assertInvariants();
        }

        pub fn init(space: Space, max_ack_delay_us: u32) Self {
            return .{ .immediate = space != .application, .max_ack_delay_us = max_ack_delay_us };
        }

        /// Whether `pn` was received already or is below what we keep: it must not be
        /// processed again.
        pub fn isDuplicate(self: *const Self, pn: u64) bool {
            if (pn < self.floor) return true;
            for (self.slots[0..self.count]) |slot| {
                const r = self.unpack(slot);
                if (pn >= r.smallest and pn <= r.largest) return true;
            }
            return false;
        }

        /// Records a processed packet. An error if it is a duplicate (the caller should have
        /// asked `isDuplicate` first; this keeps the set honest either way).
        pub fn onPacketReceived(self: *Self, pn: u64, ack_eliciting: bool, now_us: u64) error{DuplicatePacket}!void {
            assert(pn <= pn_max);
            if (self.isDuplicate(pn)) return error.DuplicatePacket;
            // Out of order: below the largest, or past a gap above it (13.2.1).
            const out_of_order = self.received_any and
                (pn < self.largest_received or pn > self.largest_received + 1);
            var set = self.load();
            set.insert(pn);
            if (!self.received_any or pn > self.largest_received) {
                self.largest_received = pn;
                self.largest_received_time_us = now_us;
                self.received_any = true;
            }
            self.store(&set);
            if (!ack_eliciting) return;
            self.ack_eliciting_unacked +|= 1;
            if (self.immediate or out_of_order or self.ack_eliciting_unacked >= 2) {
                self.ack_deadline_us = @min(self.ack_deadline_us, now_us);
            } else {
                self.ack_deadline_us = @min(self.ack_deadline_us, now_us +| self.max_ack_delay_us);
            }
        }

        /// Whether an ACK frame should go out in the packet being built now.
        /// A packet just recorded (`onPacketReceived`) came in a datagram whose IP header
        /// carried these ECN bits (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
        pub fn countEcn(self: *Self, bits: u2) void {
            switch (bits) {
                0 => {},
                1 => self.ecn[1] +|= 1,
                2 => self.ecn[0] +|= 1,
                3 => self.ecn[2] +|= 1,
            }
        }

        /// Whether any marked packet came (our ACK frames then carry the counts).
        pub fn ecnSeen(self: *const Self) bool {
            return self.ecn[0] | self.ecn[1] | self.ecn[2] != 0;
        }

        pub fn ackDue(self: *const Self, now_us: u64) bool {
            return self.ack_deadline_us <= now_us;
        }

        /// When an ACK frame is due (for the connection's timer), or null if none is owed.
        pub fn ackDeadline(self: *const Self) ?u64 {
            return if (self.ack_deadline_us == never) null else self.ack_deadline_us;
        }

        /// The ACK Delay field, before the ack_delay_exponent scales it.
        pub fn ackDelayUs(self: *const Self, now_us: u64) u64 {
            return now_us -| self.largest_received_time_us;
        }

        /// The ranges to write in an ACK frame, largest first, as many as `out` holds (the
        /// frame writer may keep fewer to fit a packet: the newest are the ones that matter).
        pub fn writeRanges(self: *const Self, out: []Range) []Range {
            const n = @min(out.len, self.count);
            for (out[0..n], 0..) |*r, i| r.* = self.unpack(self.slots[self.count - 1 - i]);
            return out[0..n];
        }

        /// An ACK frame went out: nothing is owed until the next ack-eliciting packet.
        pub fn onAckSent(self: *Self) void {
            self.ack_deadline_us = never;
            self.ack_eliciting_unacked = 0;
        }

        /// The peer acknowledged a packet of ours whose ACK frame's Largest Acknowledged was
        /// `largest_acked`: it knows every range up to there, which we stop sending (13.2.4).
        pub fn onAckAcknowledged(self: *Self, largest_acked: u64) void {
            // Our ACK frame said no more than we had received.
            assert(self.received_any and largest_acked <= self.largest_received);
            if (largest_acked < self.floor) return;
            const old = self.load();
            var set: Set = .{ .count = 0, .floor = largest_acked + 1 };
            for (old.ranges[0..old.count]) |r| {
                if (r.largest <= largest_acked) continue;
                set.ranges[set.count] = .{ .smallest = @max(r.smallest, set.floor), .largest = r.largest };
                set.count += 1;
            }
            self.store(&set);
        }

        fn assertInvariants(self: *const Self) void {
            assert(self.count <= ranges_max);
            const set = self.load();
            for (set.ranges[0..set.count], 0..) |r, i| {
                assert(r.smallest <= r.largest and r.largest <= pn_max);
                assert(r.smallest >= self.floor);
                if (i > 0) assert(set.ranges[i - 1].largest + 1 < r.smallest);
            }
        }
    };
}

pub const HandshakeAckRanges = AckRanges(ranges_max_handshake);
pub const ApplicationAckRanges = AckRanges(ranges_max_application);

const testing = std.testing;

fn expectRanges(a: anytype, expected: []const Range) !void {
    var buf: [32]Range = undefined;
    try testing.expectEqualSlices(Range, expected, a.writeRanges(&buf));
}

test "in order: one range, an ACK after every second ack-eliciting packet" {
    var a = ApplicationAckRanges.init(.application, 25_000);
    try a.onPacketReceived(0, true, 1_000);
    try testing.expect(!a.ackDue(1_000));
    try testing.expectEqual(@as(?u64, 26_000), a.ackDeadline());
    try testing.expect(a.ackDue(26_000));
    try a.onPacketReceived(1, true, 2_000);
    try testing.expect(a.ackDue(2_000));
    try expectRanges(&a, &.{.{ .smallest = 0, .largest = 1 }});
    try testing.expectEqual(@as(u64, 500), a.ackDelayUs(2_500));
    a.onAckSent();
    try testing.expectEqual(@as(?u64, null), a.ackDeadline());
    // A packet that is not ack-eliciting is recorded but owes no ACK.
    try a.onPacketReceived(2, false, 3_000);
    try testing.expectEqual(@as(?u64, null), a.ackDeadline());
    try expectRanges(&a, &.{.{ .smallest = 0, .largest = 2 }});
}

test "Initial and Handshake packets are acknowledged at once" {
    var a = HandshakeAckRanges.init(.initial, 25_000);
    try a.onPacketReceived(0, true, 7);
    try testing.expect(a.ackDue(7));
    var h = HandshakeAckRanges.init(.handshake, 25_000);
    try h.onPacketReceived(0, false, 7);
    try testing.expect(!h.ackDue(7));
}

test "out of order: a gap or a reordered packet is acknowledged at once; ranges descend" {
    var a = ApplicationAckRanges.init(.application, 25_000);
    try a.onPacketReceived(0, true, 0);
    a.onAckSent();
    try a.onPacketReceived(2, true, 10); // gap: 1 missing
    try testing.expect(a.ackDue(10));
    a.onAckSent();
    try a.onPacketReceived(5, false, 20);
    try expectRanges(&a, &.{ .{ .smallest = 5, .largest = 5 }, .{ .smallest = 2, .largest = 2 }, .{ .smallest = 0, .largest = 0 } });
    try a.onPacketReceived(1, true, 30); // reordered: fills the gap, merges two ranges
    try testing.expect(a.ackDue(30));
    try expectRanges(&a, &.{ .{ .smallest = 5, .largest = 5 }, .{ .smallest = 0, .largest = 2 } });
    // The ACK Delay counts from the largest (5 at 20), not the latest.
    try testing.expectEqual(@as(u64, 15), a.ackDelayUs(35));
    try a.onPacketReceived(4, false, 40);
    try a.onPacketReceived(3, false, 41);
    try expectRanges(&a, &.{.{ .smallest = 0, .largest = 5 }});
}

test "duplicates are refused, and the set is unchanged" {
    var a = ApplicationAckRanges.init(.application, 25_000);
    try a.onPacketReceived(10, true, 0);
    try a.onPacketReceived(12, true, 0);
    try testing.expect(a.isDuplicate(10) and a.isDuplicate(12));
    try testing.expect(!a.isDuplicate(11) and !a.isDuplicate(9) and !a.isDuplicate(13));
    try testing.expectError(error.DuplicatePacket, a.onPacketReceived(12, true, 1));
    try expectRanges(&a, &.{ .{ .smallest = 12, .largest = 12 }, .{ .smallest = 10, .largest = 10 } });
}

test "at capacity the oldest range is dropped and what is below it becomes a duplicate" {
    var a = HandshakeAckRanges.init(.handshake, 25_000);
    // Four ranges: 0, 2, 4, 6 (the capacity).
    for ([_]u64{ 0, 2, 4, 6 }) |pn| try a.onPacketReceived(pn, true, 0);
    try testing.expectEqual(@as(u8, 4), a.count);
    try a.onPacketReceived(8, true, 0); // a fifth: range 0..0 goes
    try expectRanges(&a, &.{ .{ .smallest = 8, .largest = 8 }, .{ .smallest = 6, .largest = 6 }, .{ .smallest = 4, .largest = 4 }, .{ .smallest = 2, .largest = 2 } });
    try testing.expect(a.isDuplicate(0));
    try testing.expectError(error.DuplicatePacket, a.onPacketReceived(0, true, 0));
    try testing.expect(!a.isDuplicate(1)); // only what was dropped: 1 was never in a range
    // A new range in the middle while full: the oldest goes, the new one stays.
    try a.onPacketReceived(20, true, 0); // 2 goes: {4, 6, 8, 20}
    try a.onPacketReceived(10, true, 0); // 4 goes: {6, 8, 10, 20}
    try expectRanges(&a, &.{ .{ .smallest = 20, .largest = 20 }, .{ .smallest = 10, .largest = 10 }, .{ .smallest = 8, .largest = 8 }, .{ .smallest = 6, .largest = 6 } });
    try testing.expectEqual(@as(u64, 5), a.floor);
    // Filling a gap frees a slot instead of dropping one.
    try a.onPacketReceived(7, true, 0);
    try a.onPacketReceived(9, true, 0);
    try expectRanges(&a, &.{ .{ .smallest = 20, .largest = 20 }, .{ .smallest = 6, .largest = 10 } });
}

test "at capacity a packet older than every range is the one dropped" {
    var a = HandshakeAckRanges.init(.handshake, 25_000);
    for ([_]u64{ 10, 12, 14, 16 }) |pn| try a.onPacketReceived(pn, true, 0);
    try a.onPacketReceived(5, true, 0);
    try testing.expectEqual(@as(u64, 6), a.floor);
    try testing.expect(a.isDuplicate(5) and a.isDuplicate(0) and !a.isDuplicate(6));
    try expectRanges(&a, &.{ .{ .smallest = 16, .largest = 16 }, .{ .smallest = 14, .largest = 14 }, .{ .smallest = 12, .largest = 12 }, .{ .smallest = 10, .largest = 10 } });
}

test "an acknowledged ACK forgets the ranges it carried (13.2.4)" {
    var a = ApplicationAckRanges.init(.application, 25_000);
    for ([_]u64{ 0, 1, 2, 5, 6, 9 }) |pn| try a.onPacketReceived(pn, true, 0);
    a.onAckAcknowledged(5);
    try expectRanges(&a, &.{ .{ .smallest = 9, .largest = 9 }, .{ .smallest = 6, .largest = 6 } });
    try testing.expect(a.isDuplicate(3)); // never received, but below what the peer has seen
    a.onAckAcknowledged(2); // an older ACK acknowledged late: nothing to forget
    try testing.expectEqual(@as(u64, 6), a.floor);
    a.onAckAcknowledged(9);
    try expectRanges(&a, &.{});
    try a.onPacketReceived(10, true, 0);
    try expectRanges(&a, &.{.{ .smallest = 10, .largest = 10 }});
}

test "no wrap at 2^62-1" {
    var a = ApplicationAckRanges.init(.application, 25_000);
    try a.onPacketReceived(pn_max - 1, true, 0);
    try a.onPacketReceived(pn_max, true, 0);
    try expectRanges(&a, &.{.{ .smallest = pn_max - 1, .largest = pn_max }});
    try testing.expectError(error.DuplicatePacket, a.onPacketReceived(pn_max, true, 0));
    a.onAckAcknowledged(pn_max);
    try testing.expect(a.isDuplicate(pn_max));
    try testing.expectEqual(pn_max + 1, a.floor);
}

test "max_ack_delay: the deadline is the earliest owed, counted afresh after an ACK" {
    var a = ApplicationAckRanges.init(.application, 25_000);
    try a.onPacketReceived(1, true, 100);
    a.onAckSent();
    try a.onPacketReceived(2, true, 200); // a fresh count: one packet, so a deadline
    try testing.expectEqual(@as(?u64, 25_200), a.ackDeadline());
}

test "32-bit slots: a jump past 2^32 drops what falls out, a range longer than 2^32 is cut" {
    const u32_max: u64 = std.math.maxInt(u32);
    var a = HandshakeAckRanges.init(.handshake, 25_000);
    try a.onPacketReceived(5, true, 0);
    try a.onPacketReceived(7, true, 0);
    try a.onPacketReceived(7 + u32_max, true, 0); // 7 is exactly 2^32-1 below: kept
    try expectRanges(&a, &.{ .{ .smallest = 7 + u32_max, .largest = 7 + u32_max }, .{ .smallest = 7, .largest = 7 } });
    try testing.expectEqual(@as(u64, 6), a.floor); // 5 fell out
    try a.onPacketReceived(9 + u32_max, true, 0); // now 7 falls out too
    try expectRanges(&a, &.{ .{ .smallest = 9 + u32_max, .largest = 9 + u32_max }, .{ .smallest = 7 + u32_max, .largest = 7 + u32_max } });
    try testing.expectEqual(@as(u64, 8), a.floor);
    try testing.expect(a.isDuplicate(7) and !a.isDuplicate(8 + u32_max));

    // A range that grows past 2^32 numbers keeps its newest 2^32.
    var b = HandshakeAckRanges.init(.handshake, 25_000);
    b.count = 1;
    b.received_any = true;
    b.largest_received = u32_max + 10;
    b.slots[0] = .{ .top_gap = 0, .span = @intCast(u32_max) }; // 10 ..= 2^32 + 9
    try b.onPacketReceived(u32_max + 11, true, 0);
    try expectRanges(&b, &.{.{ .smallest = 11, .largest = u32_max + 11 }});
    try testing.expectEqual(@as(u64, 11), b.floor);
    try testing.expect(b.isDuplicate(10));
}

test "ECN counts: each codepoint counted, Not-ECT not, saturating at the top" {
    var a = ApplicationAckRanges.init(.application, 25_000);
    try testing.expect(!a.ecnSeen());
    a.countEcn(0);
    try testing.expect(!a.ecnSeen());
    for ([_]u2{ 2, 2, 1, 3, 2 }) |bits| a.countEcn(bits);
    try testing.expectEqual([3]u64{ 3, 1, 1 }, a.ecn);
    a.ecn[2] = std.math.maxInt(u64);
    a.countEcn(3);
    try testing.expectEqual(std.math.maxInt(u64), a.ecn[2]);
}

test "size at rest" {
    std.debug.print("\nquic/ack_ranges: @sizeOf HandshakeAckRanges={d} ApplicationAckRanges={d}\n", .{ @sizeOf(HandshakeAckRanges), @sizeOf(ApplicationAckRanges) });
    try testing.expect(@sizeOf(ApplicationAckRanges) <= 192);
}
