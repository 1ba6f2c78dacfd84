//! Loss detection and the reliability state of one QUIC connection (RFC 9002 5-6, Appendix A),
//! server side, sans-IO: time comes in as `now_us` (microseconds, monotonic), nothing reads a
//! clock, nothing touches a socket.
//!
//! `Recovery` is everything a connection keeps for reliability: per packet number space the
//! packets it sent and not yet saw acknowledged or lost, what it received (`ack_ranges.zig`),
//! the RTT estimator, the congestion controller (`congestion.zig`) and one loss detection timer.
//! `nextDeadline()` is the connection's one timer entry for all of it.
//!
//! Memory. At rest (nothing in flight) a connection keeps no records: each space's records
//! are a block from the caller's allocator, grown by doubling while packets are in flight and
//! given back when the last one is acknowledged, lost or discarded. The records are bounded by
//! `Config.packets_in_flight_max` for the whole connection. At that cap the connection stops
//! sending: `canSend` says no to new data (keeping `probe_reserve` records for PTO probes),
//! and `onPacketSent` refuses an in-flight packet with `error.InFlightFull`; acknowledgements
//! and losses free room. A packet that is not in flight (ACK only) is never refused nor
//! recorded: its number is noted (so that an ACK of it is no violation), and nothing waits on
//! it. Such a record would linger, since nothing makes the peer acknowledge it, and all it
//! could tell is that the peer saw that ACK frame (RFC 9000 13.2.4); ACK frames sent in
//! ack-eliciting packets tell that through their token.
//! The Initial and Handshake spaces' state (what they sent and received) is one heap record,
//! `Early`, made by `init` and given back when the Handshake space is discarded (Initial goes
//! with it): an established connection keeps only the Application space's.
//!
//! Outputs. Newly acknowledged and lost packets go to a `sink` the caller passes, any value
//! with two methods: `onAcked(space: Space, packet: SentPacket) void` and
//! `onLost(space: Space, packet: SentPacket) void`. The packet's `token` is the connection's
//! handle for its frames (to forget or to send again). The sink is called while the records
//! are being rewritten: it must not call back into this `Recovery`.
//!
//! Server-side choices: the peer (a client) has always completed address validation from
//! our point of view, so the PTO count resets on every acknowledgement and no PTO is armed
//! when nothing ack-eliciting is in flight (the client's anti-deadlock PTO is not needed). The
//! anti-amplification limit (RFC 9000 8.1) is an input, `setAmplificationLimited`: while it
//! holds, no PTO is armed, since a probe could not be sent.
const std = @import("std");
const assert = std.debug.assert;
const Allocator = std.mem.Allocator;
const ack_ranges = @import("ack_ranges.zig");
const congestion = @import("congestion.zig");

pub const Space = ack_ranges.Space;
pub const Range = ack_ranges.Range;
pub const Congestion = congestion.Congestion;
pub const never = ack_ranges.never;
const pn_max = ack_ranges.pn_max;
const space_count = ack_ranges.space_count;

/// RFC 9002 6.1.1: a packet is lost when three later ones were acknowledged.
pub const packet_threshold: u64 = 3;
/// RFC 9002 6.1.2: or when it was sent 9/8 of an RTT before a later one was acknowledged.
const time_threshold_num: u64 = 9;
const time_threshold_den: u64 = 8;
pub const granularity_us: u64 = 1_000;
pub const initial_rtt_us: u64 = 333_000;
pub const persistent_congestion_threshold: u64 = 3;
/// The PTO doubles at most this many times (2^16 of at least 1 ms is over a minute): the
/// idle timeout ends the connection first, and the timer's arithmetic stays finite.
const pto_backoff_shift_max: u8 = 16;
/// Records kept for the one or two probes a PTO asks for, even at the cap.
pub const probe_reserve: u16 = 2;
const sent_capacity_min: u16 = 16;

pub const SentPacket = struct {
    pn: u64,
    time_sent_us: u64,
    /// The connection's handle for the frames this packet carried.
    token: u32,
    bytes: u16,
    ack_eliciting: bool,
    /// Counts toward bytes in flight: ack-eliciting, or PADDING (RFC 9002 2).
    in_flight: bool,
};

pub const Config = struct {
    max_datagram_bytes: u16 = 1200,
    packets_in_flight_max: u16 = 1024,
    congestion_algorithm: congestion.Algorithm = .new_reno,
    /// Our max_ack_delay transport parameter: how long an Application ACK may wait.
    max_ack_delay_us: u32 = @intCast(ack_ranges.max_ack_delay_us_default),
};

pub const Error = error{
    /// An ACK frame acknowledged a packet number we never sent: PROTOCOL_VIOLATION
    /// (RFC 9000 13.1).
    AckOfUnsentPacket,
    /// Ranges not in descending order, overlapping, or empty: FRAME_ENCODING_ERROR. The frame
    /// decoder should not produce them; hostile input gets an error here either way.
    InvalidAckRanges,
};

pub const AckOutcome = struct {
    acked_count: u16 = 0,
    lost_count: u16 = 0,
    /// When the largest acknowledged packet was sent, if this ACK newly acknowledged it: the
    /// time `Congestion.onEcnCe` takes when the ACK's ECN-CE count rose.
    largest_acked_time_sent_us: ?u64 = null,
    persistent_congestion: bool = false,
};

pub const TimeoutOutcome = struct {
    lost_count: u16 = 0,
    /// A PTO fired: send one or two ack-eliciting packets in this space now (new data, or the
    /// oldest unacknowledged data again, or a PING); `canSend` lets them past the window.
    probe: ?Space = null,
};

/// The RTT estimator (RFC 9002 5).
pub const Rtt = struct {
    latest_us: u64 = 0,
    min_us: u64 = 0,
    smoothed_us: u64 = initial_rtt_us,
    var_us: u64 = initial_rtt_us / 2,
    /// When the first sample was taken: persistent congestion only counts later packets.
    first_sample_us: u64 = 0,
    has_sample: bool = false,

    /// One sample; `ack_delay_us` is already limited as RFC 9002 5.3 says for its space.
    pub fn onSample(self: *Rtt, latest_us: u64, ack_delay_us: u64, now_us: u64) void {
        self.latest_us = latest_us;
        if (!self.has_sample) {
            self.has_sample = true;
            self.first_sample_us = now_us;
            self.min_us = latest_us;
            self.smoothed_us = latest_us;
            self.var_us = latest_us / 2;
            return;
        }
        self.min_us = @min(self.min_us, latest_us);
        // The peer's delay is subtracted only when what is left is not below min_rtt.
        var adjusted_us = latest_us;
        if (latest_us >= self.min_us +| ack_delay_us) adjusted_us = latest_us - ack_delay_us;
        const diff_us = if (self.smoothed_us > adjusted_us) self.smoothed_us - adjusted_us else adjusted_us - self.smoothed_us;
        self.var_us = (3 *| self.var_us +| diff_us) / 4;
        self.smoothed_us = (7 *| self.smoothed_us +| adjusted_us) / 8;
    }

    /// The PTO before max_ack_delay and backoff.
    pub fn ptoBaseUs(self: *const Rtt) u64 {
        return self.smoothed_us +| @max(4 *| self.var_us, granularity_us);
    }

    pub fn lossDelayUs(self: *const Rtt) u64 {
        const rtt_us = @max(self.latest_us, self.smoothed_us);
        return @max(rtt_us *| time_threshold_num / time_threshold_den, granularity_us);
    }
};

/// One space's records, ascending by packet number; the block exists only while non-empty.
const SentList = struct {
    items: []SentPacket = &.{},
    len: u16 = 0,

    fn slice(self: *const SentList) []SentPacket {
        return self.items[0..self.len];
    }

    fn append(self: *SentList, allocator: Allocator, packet: SentPacket, capacity_max: u16) Allocator.Error!void {
        assert(self.len < capacity_max);
        if (self.len == self.items.len) {
            const grown: usize = @min(@max(sent_capacity_min, self.items.len * 2), capacity_max);
            assert(grown > self.len);
            const items = try allocator.alloc(SentPacket, grown);
            @memcpy(items[0..self.len], self.items[0..self.len]);
            allocator.free(self.items);
            self.items = items;
        }
        self.items[self.len] = packet;
        self.len += 1;
    }

    /// Keeps the first `len` records; an empty list gives its block back.
    fn truncate(self: *SentList, allocator: Allocator, len: usize) void {
        assert(len <= self.len);
        self.len = @intCast(len);
        if (self.len == 0) {
            allocator.free(self.items);
            self.items = &.{};
        }
    }
};

pub const SpaceState = struct {
    sent: SentList = .{},
    largest_sent: u64 = 0,
    largest_acked: u64 = 0,
    /// When the earliest packet not yet lost by time becomes lost (RFC 9002 6.1.2).
    loss_time_us: u64 = never,
    last_ack_eliciting_sent_us: u64 = 0,
    ack_eliciting_in_flight: u16 = 0,
    sent_any: bool = false,
    acked_any: bool = false,
};

/// What an ACK newly acknowledged, summed for the RTT and the congestion controller.
const Acked = struct {
    count: u16 = 0,
    in_flight_bytes: u64 = 0,
    /// In-flight bytes sent outside the recovery period that was current before this ACK.
    growth_bytes: u64 = 0,
    largest_time_sent_us: ?u64 = null,
    ack_eliciting: bool = false,
};

const Lost = struct {
    count: u16 = 0,
    in_flight_bytes: u64 = 0,
    largest_time_sent_us: ?u64 = null,
    persistent: bool = false,
};

/// A run of lost packets with no acknowledged or surviving packet between them (7.6).
const LossRun = struct {
    start_us: ?u64 = null,
    end_us: u64 = 0,

    fn close(run: *LossRun, duration_us: u64) bool {
        defer run.* = .{};
        const start_us = run.start_us orelse return false;
        return run.end_us - start_us > duration_us;
    }
};

/// What the Initial and Handshake spaces hold: one heap record made with the `Recovery`
/// and given back when the Handshake space is discarded (RFC 9001 4.9.2: at confirmation),
/// so that an established connection carries only the Application space's state.
pub const Early = struct {
    spaces: [2]SpaceState = .{ .{}, .{} },
    initial_acks: ack_ranges.HandshakeAckRanges,
    handshake_acks: ack_ranges.HandshakeAckRanges,
    /// The Initial space was discarded (its state is back at rest, and stays so).
    initial_discarded: bool = false,
};

pub const Recovery = struct {
    /// Null once the Handshake space is discarded: Initial and Handshake are then both gone.
    early: ?*Early,
    application: SpaceState = .{},
    application_acks: ack_ranges.ApplicationAckRanges,
    rtt: Rtt = .{},
    cc: Congestion,
    loss_timer_us: u64 = never,
    /// The peer's max_ack_delay transport parameter (at most 2^14 ms): the connection sets it
    /// when the peer's transport parameters arrive.
    peer_max_ack_delay_us: u32 = @intCast(ack_ranges.max_ack_delay_us_default),
    packets_max: u16,
    /// Records held in all spaces.
    packets_count: u16 = 0,
    pto_count: u8 = 0,
    /// Probes a PTO asked for that were not sent yet: they may pass the window.
    probes_owed: u8 = 0,
    handshake_confirmed: bool = false,
    amplification_limited: bool = false,

    /// Allocates the Initial and Handshake spaces' record (`Early`); `deinit` or discarding
    /// the Handshake space gives it back.
    pub fn init(allocator: Allocator, config: Config) Allocator.Error!Recovery {
        assert(config.packets_in_flight_max > 2 * probe_reserve);
        const our_delay_us = config.max_ack_delay_us;
        const early = try allocator.create(Early);
        early.* = .{
            .initial_acks = ack_ranges.HandshakeAckRanges.init(.initial, our_delay_us),
            .handshake_acks = ack_ranges.HandshakeAckRanges.init(.handshake, our_delay_us),
        };
        return .{
            .early = early,
            .application_acks = ack_ranges.ApplicationAckRanges.init(.application, our_delay_us),
            .cc = Congestion.init(config.max_datagram_bytes, config.congestion_algorithm),
            .packets_max = config.packets_in_flight_max,
        };
    }

    /// Gives back every record's block and the early spaces' record, reporting nothing.
    /// Idempotent: a closed connection calls it, then its `deinit` again.
    pub fn deinit(self: *Recovery, allocator: Allocator) void {
        if (self.early) |e| {
            for (&e.spaces) |*sp| sp.sent.truncate(allocator, 0);
            allocator.destroy(e);
            self.early = null;
        }
        self.application.sent.truncate(allocator, 0);
        self.packets_count = 0;
    }

    /// The space's state, null once it was discarded (its record is gone, or Initial was
    /// put at rest for good).
    pub fn spaceState(self: *const Recovery, space: Space) ?*const SpaceState {
        return @constCast(self).state(space);
    }

    fn state(self: *Recovery, space: Space) ?*SpaceState {
        if (space == .application) return &self.application;
        const e = self.early orelse return null;
        if (space == .initial and e.initial_discarded) return null;
        return &e.spaces[@intFromEnum(space)];
    }

    /// A space that must still be there: the caller holds its keys.
    fn live(self: *Recovery, space: Space) *SpaceState {
        return self.state(space) orelse unreachable;
    }

    /// The ACK ranges of a space with its state, null once discarded.
    fn earlyAcksMut(self: *Recovery, space: Space) ?*ack_ranges.HandshakeAckRanges {
        assert(space != .application);
        if (self.state(space) == null) return null;
        const e = self.early.?;
        return if (space == .initial) &e.initial_acks else &e.handshake_acks;
    }

    /// What an Initial or Handshake space received, null once it was discarded.
    pub fn earlyAcks(self: *const Recovery, space: Space) ?*const ack_ranges.HandshakeAckRanges {
        return @constCast(self).earlyAcksMut(space);
    }

    /// The largest packet number received in the space, null if none (or discarded).
    pub fn largestReceived(self: *const Recovery, space: Space) ?u64 {
        if (space == .application) {
            const a = &self.application_acks;
            return if (a.received_any) a.largest_received else null;
        }
        const a = self.earlyAcks(space) orelse return null;
        return if (a.received_any) a.largest_received else null;
    }

    /// Whether a packet of `bytes` may be sent now, before pacing (`nextSendTimeUs`): room in
    /// the records and, unless a probe is owed, in the congestion window. A packet that is
    /// not in flight (ACK only) is not congestion controlled.
    pub fn canSend(self: *const Recovery, bytes: u16, in_flight: bool) bool {
        if (!in_flight) return true;
        if (self.probes_owed > 0) return self.packets_count < self.packets_max;
        if (self.packets_count + probe_reserve >= self.packets_max) return false;
        return self.cc.sendAllowanceBytes() >= bytes;
    }

    /// When the pacer lets a packet of `bytes` leave.
    pub fn nextSendTimeUs(self: *const Recovery, bytes: u16, now_us: u64) u64 {
        if (self.probes_owed > 0) return now_us;
        return self.cc.nextSendTimeUs(bytes, now_us, self.rtt.smoothed_us);
    }

    /// Records a packet just sent. Packet numbers rise in each space and times never go back.
    pub fn onPacketSent(self: *Recovery, allocator: Allocator, space: Space, packet: SentPacket) error{ InFlightFull, OutOfMemory }!void {
        const sp = self.live(space); // nothing is sent without the space's keys
        assert(packet.pn <= pn_max);
        assert(!sp.sent_any or packet.pn > sp.largest_sent);
        assert(!packet.ack_eliciting or packet.in_flight);
        assert(sp.sent.len == 0 or packet.time_sent_us >= sp.sent.slice()[sp.sent.len - 1].time_sent_us);
        if (packet.in_flight and self.packets_count >= self.packets_max) return error.InFlightFull;
        if (packet.in_flight) try sp.sent.append(allocator, packet, self.packets_max);
        sp.largest_sent = packet.pn;
        sp.sent_any = true;
        if (!packet.in_flight) return;
        self.packets_count += 1;
        if (packet.ack_eliciting) {
            sp.last_ack_eliciting_sent_us = packet.time_sent_us;
            sp.ack_eliciting_in_flight += 1;
            self.probes_owed -|= 1;
        }
        self.cc.onPacketSent(packet.bytes, packet.time_sent_us, self.rtt.smoothed_us);
        self.setLossDetectionTimer();
    }

    /// An ACK frame in `space`: `ranges` largest first as the frame lists them,
    /// `ack_delay_us` already scaled by the peer's ack_delay_exponent.
    pub fn onAckReceived(self: *Recovery, allocator: Allocator, space: Space, ranges: []const Range, ack_delay_us: u64, now_us: u64, sink: anytype) Error!AckOutcome {
        try validateRanges(ranges);
        // A frame later in the packet whose CRYPTO confirmed the handshake: nothing to do.
        const sp = self.state(space) orelse return .{};
        const largest = ranges[0].largest;
        if (!sp.sent_any or largest > sp.largest_sent) return error.AckOfUnsentPacket;
        sp.largest_acked = if (sp.acked_any) @max(sp.largest_acked, largest) else largest;
        sp.acked_any = true;

        const acked = self.removeAcked(space, ranges, sink);
        if (acked.count == 0) {
            sp.sent.truncate(allocator, sp.sent.len);
            return .{};
        }
        if (acked.largest_time_sent_us) |time_sent_us| {
            if (acked.ack_eliciting) {
                self.rtt.onSample(now_us -| time_sent_us, self.ackDelayFor(space, ack_delay_us), now_us);
            }
        }
        const lost = self.detectLost(space, now_us, sink);
        self.applyToCongestion(acked, lost, now_us);
        self.pto_count = 0;
        self.probes_owed = 0;
        sp.sent.truncate(allocator, sp.sent.len);
        self.setLossDetectionTimer();
        return .{
            .acked_count = acked.count,
            .lost_count = lost.count,
            .largest_acked_time_sent_us = acked.largest_time_sent_us,
            .persistent_congestion = lost.persistent,
        };
    }

    fn validateRanges(ranges: []const Range) Error!void {
        if (ranges.len == 0) return error.InvalidAckRanges;
        for (ranges, 0..) |r, i| {
            if (r.smallest > r.largest or r.largest > pn_max) return error.InvalidAckRanges;
            if (i > 0 and r.largest >= ranges[i - 1].smallest) return error.InvalidAckRanges;
        }
    }

    /// RFC 9002 5.3: Initial ACKs are not delayed; after confirmation the delay is at most
    /// the peer's max_ack_delay; before it, the peer's word is taken.
    fn ackDelayFor(self: *const Recovery, space: Space, ack_delay_us: u64) u64 {
        if (space == .initial) return 0;
        if (self.handshake_confirmed) return @min(ack_delay_us, self.peer_max_ack_delay_us);
        return ack_delay_us;
    }

    /// Removes the records `ranges` cover, in one merge of two ascending walks.
    fn removeAcked(self: *Recovery, space: Space, ranges: []const Range, sink: anytype) Acked {
        const sp = self.live(space);
        var acked: Acked = .{};
        const items = sp.sent.slice();
        var kept: usize = 0;
        var r: usize = ranges.len; // ranges[r - 1] is the smallest range not yet behind us
        for (items) |p| {
            while (r > 0 and ranges[r - 1].largest < p.pn) r -= 1;
            if (r == 0 or ranges[r - 1].smallest > p.pn) {
                items[kept] = p;
                kept += 1;
                continue;
            }
            acked.count += 1;
            if (p.pn == ranges[0].largest) acked.largest_time_sent_us = p.time_sent_us;
            acked.ack_eliciting = acked.ack_eliciting or p.ack_eliciting;
            if (p.in_flight) {
                acked.in_flight_bytes += p.bytes;
                if (!self.cc.inRecovery(p.time_sent_us)) acked.growth_bytes += p.bytes;
            }
            self.forget(sp, p);
            sink.onAcked(space, p);
        }
        sp.sent.len = @intCast(kept);
        return acked;
    }

    fn forget(self: *Recovery, sp: *SpaceState, p: SentPacket) void {
        assert(p.in_flight);
        self.packets_count -= 1;
        if (p.ack_eliciting) sp.ack_eliciting_in_flight -= 1;
    }

    /// RFC 9002 6.1: packets at or below the largest acknowledged are lost by count or by
    /// time; the earliest still waiting sets the space's loss time. Lost packets form a
    /// prefix of those records, so a run of them with no gap in packet numbers (a gap is a
    /// packet acknowledged or gone before) is one candidate for persistent congestion.
    fn detectLost(self: *Recovery, space: Space, now_us: u64, sink: anytype) Lost {
        const sp = self.live(space);
        var lost: Lost = .{};
        sp.loss_time_us = never;
        if (!sp.acked_any) return lost;
        const loss_delay_us = self.rtt.lossDelayUs();
        const persistent_us = self.persistentCongestionUs();
        var run: LossRun = .{};
        const items = sp.sent.slice();
        var kept: usize = 0;
        var previous_pn: ?u64 = null;
        for (items) |p| {
            defer previous_pn = p.pn;
            const below_largest = p.pn <= sp.largest_acked;
            const is_lost = below_largest and
                (p.time_sent_us +| loss_delay_us <= now_us or sp.largest_acked >= p.pn + packet_threshold);
            if (!is_lost) {
                if (below_largest) sp.loss_time_us = @min(sp.loss_time_us, p.time_sent_us +| loss_delay_us);
                lost.persistent = run.close(persistent_us) or lost.persistent;
                items[kept] = p;
                kept += 1;
                continue;
            }
            if (previous_pn != null and previous_pn.? + 1 != p.pn) lost.persistent = run.close(persistent_us) or lost.persistent;
            // A packet larger than the size in use is a path MTU probe, or went before a black
            // hole brought the size down: its loss tells the size was too large, not that the
            // path is congested (RFC 9000 14.4). Its bytes leave the flight, nothing more.
            const oversize = p.bytes > self.cc.max_datagram_bytes;
            if (p.ack_eliciting and !oversize and self.rtt.has_sample and p.time_sent_us > self.rtt.first_sample_us) {
                if (run.start_us == null) run.start_us = p.time_sent_us;
                run.end_us = p.time_sent_us;
            }
            lost.count += 1;
            if (p.in_flight) {
                lost.in_flight_bytes += p.bytes;
                if (!oversize) lost.largest_time_sent_us = p.time_sent_us;
            }
            self.forget(sp, p);
            sink.onLost(space, p);
        }
        lost.persistent = run.close(persistent_us) or lost.persistent;
        sp.sent.len = @intCast(kept);
        return lost;
    }

    /// RFC 9002 7.6.1.
    fn persistentCongestionUs(self: *const Recovery) u64 {
        return (self.rtt.ptoBaseUs() +| self.peer_max_ack_delay_us) *| persistent_congestion_threshold;
    }

    /// Losses first, then acknowledgements, as RFC 9002 A.7 orders them: a recovery period
    /// begun by this ACK's losses holds back growth from every packet it acknowledged, and
    /// persistent congestion ends recovery so that they all count.
    fn applyToCongestion(self: *Recovery, acked: Acked, lost: Lost, now_us: u64) void {
        var growth_bytes = acked.growth_bytes;
        if (lost.in_flight_bytes > 0) self.cc.onBytesGone(lost.in_flight_bytes);
        if (lost.largest_time_sent_us) |time_sent_us| {
            if (self.cc.onCongestionEvent(time_sent_us, now_us)) growth_bytes = 0;
        }
        if (lost.persistent) {
            self.cc.onPersistentCongestion();
            growth_bytes = acked.in_flight_bytes;
        }
        self.cc.onPacketsAcked(acked.in_flight_bytes, growth_bytes, now_us, self.rtt.smoothed_us);
    }

    /// The loss detection timer fired (or the connection's deadline passed, which is the same
    /// call: an early call does nothing).
    pub fn onLossDetectionTimeout(self: *Recovery, allocator: Allocator, now_us: u64, sink: anytype) TimeoutOutcome {
        if (self.loss_timer_us > now_us) return .{};
        if (self.earliestLossTime()) |loss| {
            const lost = self.detectLost(loss.space.?, now_us, sink);
            self.applyToCongestion(.{}, lost, now_us);
            const sp = self.live(loss.space.?);
            sp.sent.truncate(allocator, sp.sent.len);
            self.setLossDetectionTimer();
            return .{ .lost_count = lost.count };
        }
        const pto = self.ptoTimeAndSpace();
        const space = pto.space orelse {
            self.setLossDetectionTimer();
            return .{};
        };
        self.pto_count = @min(self.pto_count + 1, pto_backoff_shift_max);
        self.probes_owed = 2;
        self.setLossDetectionTimer();
        return .{ .probe = space };
    }

    const Deadline = struct { time_us: u64, space: ?Space };

    fn earliestLossTime(self: *const Recovery) ?Deadline {
        var best: Deadline = .{ .time_us = never, .space = null };
        for (0..space_count) |i| {
            const sp = self.spaceState(@enumFromInt(i)) orelse continue;
            if (sp.loss_time_us < best.time_us) best = .{ .time_us = sp.loss_time_us, .space = @enumFromInt(i) };
        }
        return if (best.space == null) null else best;
    }

    /// RFC 9002 6.2.1 and A.8: the earliest PTO among spaces with ack-eliciting packets in
    /// flight; Application's waits for the handshake to be confirmed and adds max_ack_delay.
    fn ptoTimeAndSpace(self: *const Recovery) Deadline {
        const backoff: u64 = @as(u64, 1) << @intCast(@min(self.pto_count, pto_backoff_shift_max));
        var duration_us = self.rtt.ptoBaseUs() *| backoff;
        var best: Deadline = .{ .time_us = never, .space = null };
        for (0..space_count) |i| {
            const space: Space = @enumFromInt(i);
            const sp = self.spaceState(space) orelse continue;
            if (sp.ack_eliciting_in_flight == 0) continue;
            if (space == .application) {
                if (!self.handshake_confirmed) break;
                duration_us +|= @as(u64, self.peer_max_ack_delay_us) *| backoff;
            }
            const time_us = sp.last_ack_eliciting_sent_us +| duration_us;
            if (time_us < best.time_us) best = .{ .time_us = time_us, .space = space };
        }
        return best;
    }

    fn setLossDetectionTimer(self: *Recovery) void {
        if (self.earliestLossTime()) |loss| {
            self.loss_timer_us = loss.time_us;
        } else if (self.amplification_limited) {
            self.loss_timer_us = never;
        } else {
            self.loss_timer_us = self.ptoTimeAndSpace().time_us;
        }
    }

    pub fn onHandshakeConfirmed(self: *Recovery) void {
        self.handshake_confirmed = true;
        self.setLossDetectionTimer();
    }

    /// The peer proved a new address (RFC 9000 9.4): the RTT estimate and the congestion
    /// controller start over (RFC 9002 B.3, A.3: kInitialRtt, the initial window); the
    /// packets already in flight stay counted, for their ACKs or losses to take out.
    pub fn resetForNewPath(self: *Recovery) void {
        self.rtt = .{};
        const in_flight = self.cc.bytes_in_flight;
        self.cc = Congestion.init(self.cc.max_datagram_bytes, self.cc.algorithm);
        self.cc.bytes_in_flight = in_flight;
        self.pto_count = 0;
        self.setLossDetectionTimer();
    }

    pub fn setAmplificationLimited(self: *Recovery, limited: bool) void {
        self.amplification_limited = limited;
        self.setLossDetectionTimer();
    }

    /// The space's keys were discarded (RFC 9002 6.4): its packets leave bytes in flight
    /// without being reported lost, and what we received there is forgotten. Discarding
    /// Handshake discards Initial too (a server has let Initial go first, RFC 9001 4.9.1)
    /// and gives the early spaces' record back. A space already discarded: nothing to do.
    pub fn discardSpace(self: *Recovery, allocator: Allocator, space: Space) void {
        switch (space) {
            .initial => self.clearSpace(allocator, .initial),
            .handshake => {
                self.clearSpace(allocator, .initial);
                self.clearSpace(allocator, .handshake);
                if (self.early) |e| allocator.destroy(e);
                self.early = null;
            },
            .application => {
                self.clearSpace(allocator, .application);
                self.application_acks = ack_ranges.ApplicationAckRanges.init(.application, self.application_acks.max_ack_delay_us);
            },
        }
        self.pto_count = 0;
        self.setLossDetectionTimer();
    }

    fn clearSpace(self: *Recovery, allocator: Allocator, space: Space) void {
        const sp = self.state(space) orelse return;
        for (sp.sent.slice()) |p| {
            if (p.in_flight) self.cc.onBytesGone(p.bytes);
            self.forget(sp, p);
        }
        sp.sent.truncate(allocator, 0);
        sp.* = .{};
        if (space == .initial) {
            const e = self.early.?;
            e.initial_acks = ack_ranges.HandshakeAckRanges.init(.initial, e.initial_acks.max_ack_delay_us);
            e.initial_discarded = true;
        }
    }

    /// The connection's one timer: the loss detection timer or the first ACK owed, null if
    /// nothing is due. Pacing is not in it: a connection blocked by the pacer with data to
    /// send files `nextSendTimeUs` itself.
    pub fn nextDeadline(self: *const Recovery) ?u64 {
        var deadline_us = self.loss_timer_us;
        if (self.earlyAcks(.initial)) |a| deadline_us = @min(deadline_us, a.ack_deadline_us);
        if (self.earlyAcks(.handshake)) |a| deadline_us = @min(deadline_us, a.ack_deadline_us);
        deadline_us = @min(deadline_us, self.application_acks.ack_deadline_us);
        return if (deadline_us == never) null else deadline_us;
    }

    // The receive side, one space at a time (ack_ranges.zig has the rules). A discarded
    // space has no keys, so nothing reaches it; if something does, it is dropped.

    pub fn isDuplicate(self: *const Recovery, space: Space, pn: u64) bool {
        if (space == .application) return self.application_acks.isDuplicate(pn);
        const a = self.earlyAcks(space) orelse return true;
        return a.isDuplicate(pn);
    }

    pub fn onPacketReceived(self: *Recovery, space: Space, pn: u64, ack_eliciting: bool, now_us: u64) error{DuplicatePacket}!void {
        if (space == .application) return self.application_acks.onPacketReceived(pn, ack_eliciting, now_us);
        const a = self.earlyAcksMut(space) orelse return;
        return a.onPacketReceived(pn, ack_eliciting, now_us);
    }

    /// The ECN bits of the datagram that carried a packet just recorded in `space`.
    pub fn countEcn(self: *Recovery, space: Space, bits: u2) void {
        if (space == .application) return self.application_acks.countEcn(bits);
        const a = self.earlyAcksMut(space) orelse return;
        a.countEcn(bits);
    }

    /// The space's ECN counts (ECT(0), ECT(1), CE) for its ACK frames, null while no marked
    /// packet came (a plain ACK frame then).
    pub fn ecnCounts(self: *const Recovery, space: Space) ?[3]u64 {
        if (space == .application) {
            const a = &self.application_acks;
            return if (a.ecnSeen()) a.ecn else null;
        }
        const a = self.earlyAcks(space) orelse return null;
        return if (a.ecnSeen()) a.ecn else null;
    }

    pub fn ackDue(self: *const Recovery, space: Space, now_us: u64) bool {
        if (space == .application) return self.application_acks.ackDue(now_us);
        const a = self.earlyAcks(space) orelse return false;
        return a.ackDue(now_us);
    }

    /// The ACK frame's content: ranges largest first, and the delay since the largest came.
    /// Only for a space not discarded (the caller holds its keys).
    pub fn writeAck(self: *const Recovery, space: Space, now_us: u64, out: []Range) struct { ranges: []Range, delay_us: u64 } {
        if (space == .application) return .{ .ranges = self.application_acks.writeRanges(out), .delay_us = self.application_acks.ackDelayUs(now_us) };
        const a = self.earlyAcks(space) orelse unreachable;
        return .{ .ranges = a.writeRanges(out), .delay_us = a.ackDelayUs(now_us) };
    }

    pub fn onAckSent(self: *Recovery, space: Space) void {
        if (space == .application) return self.application_acks.onAckSent();
        const a = self.earlyAcksMut(space) orelse return;
        a.onAckSent();
    }

    /// A packet of ours carrying an ACK frame with this Largest Acknowledged was acknowledged.
    pub fn onAckAcknowledged(self: *Recovery, space: Space, largest_acked: u64) void {
        if (space == .application) return self.application_acks.onAckAcknowledged(largest_acked);
        const a = self.earlyAcksMut(space) orelse return;
        a.onAckAcknowledged(largest_acked);
    }
};

test {
    _ = @import("recovery_tests.zig");
}
