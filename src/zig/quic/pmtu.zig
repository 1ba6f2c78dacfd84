//! Datagram path MTU discovery for one connection (RFC 9000 14.2-14.4 with DPLPMTUD, RFC 8899),
//! sans-IO: the connection asks `nextProbe` before it builds a datagram, sends a probe of that
//! size (PING and PADDING, nothing that would need sending again), and reports what became of
//! it; every acknowledged or lost 1-RTT packet is reported too, for black-hole detection.
//!
//! The search. Every connection starts at `base` (1,200 bytes, which every QUIC path carries).
//! Once the handshake is confirmed the search tries the candidate sizes between what was
//! confirmed and what failed, the lower middle one first (a binary search over a short list,
//! so a search ends in three to five probes on the usual paths), never above `max`: the
//! smallest of our own receive limit and the peer's `max_udp_payload_size`, which is a
//! candidate itself. An acknowledged probe raises the size every packet may have; a size whose
//! probe is lost `probes_per_size_max` times (RFC 8899's MAX_PROBES) is taken as too large.
//! A lost probe says nothing about congestion (RFC 9000 14.4): recovery.zig does not react to
//! the loss of a packet larger than the size in use (`SentPacket.bytes` tells), which a probe
//! always is. With nothing left to try the search rests, and runs again after
//! `raise_interval_us` (RFC 8899's PMTU_RAISE_TIMER), in case the path grew.
//!
//! Black holes (RFC 8899 4.3). A path that carried the size may stop carrying it (a route
//! changed). Then the large packets sent after the last one acknowledged are all lost while
//! smaller packets (ACK-only, and the PTO probes the connection sends at `base` after repeated
//! timeouts) still get through: `black_hole_losses` such losses in a row bring the size back to
//! `base`, and the search starts again after `black_hole_retry_us`. Congestion alone does not
//! look like this: when a burst of packets is lost, later large packets are acknowledged, and
//! those acknowledgements are taken before the losses they reveal.
const std = @import("std");
const assert = std.debug.assert;

/// The size every QUIC path carries (RFC 9000 14).
pub const base: u16 = 1200;
/// The sizes a search tries beside `max`, ascending: IPv6 and IPv4 over 1,500-byte Ethernet
/// (1,452 and 1,472 bytes of UDP payload), common tunnel sizes below them, and Ethernet's own
/// 1,500 for paths (loopback) that carry more.
const candidates = [_]u16{ 1252, 1350, 1452, 1472, 1500 };
/// Losses of one probe size before it is taken as too large (RFC 8899 5.1.2, MAX_PROBES).
pub const probes_per_size_max = 3;
/// When a finished search runs again (RFC 8899 5.1.1, PMTU_RAISE_TIMER: 600 s).
pub const raise_interval_us: u64 = 600 * std.time.us_per_s;
/// When the search runs again after a black hole brought the size back to `base`.
pub const black_hole_retry_us: u64 = 60 * std.time.us_per_s;
/// Large packets lost in a row, none acknowledged since they were sent, that make a black hole.
pub const black_hole_losses = 3;
const never: u64 = std.math.maxInt(u64);

pub const Search = struct {
    /// What every packet may be now: `base`, or a size a probe confirmed.
    size: u16 = base,
    /// The search's ceiling (`setMax`): `base` until the peer's limit is known.
    max: u16 = base,
    /// The smallest size that failed on this path (`max + 1` while none did).
    failed: u16 = base + 1,
    /// The size of the probe in flight (0: none). No other packet in flight has that size:
    /// every other is at most `size`, below it (those sent before a fall back to `base`
    /// are long gone when the search runs again).
    probe_size: u16 = 0,
    /// Losses of the size being tried.
    losses: u8 = 0,
    /// Large packets lost in a row since one went through.
    large_lost: u8 = 0,
    /// When the next probe may go.
    next_us: u64 = 0,
    /// When the newest large (above `base`) packet acknowledged was sent.
    large_acked_sent_us: u64 = 0,

    /// A connection's search, its datagrams `start` bytes (at least `base`) until the peer's
    /// limit is known. No probe goes before `begin`.
    pub fn init(start: u16) Search {
        assert(start >= base);
        return .{ .size = start, .max = start, .failed = start + 1, .next_us = never };
    }

    /// The peer acknowledged our HANDSHAKE_DONE: probes may go. Not earlier: a probe sent
    /// first takes the place of the datagram that ends the peer's handshake, and a path that
    /// loses every other datagram would lose that one each time.
    pub fn begin(s: *Search, now_us: u64) void {
        if (s.next_us == never) s.next_us = now_us;
    }

    /// Sets the ceiling: the smallest of our limit and the peer's, both at least `base` (the
    /// transport parameters' own floor) and cut to what a size holds; the size in use is cut
    /// to it too. Starts a new search.
    pub fn setMax(s: *Search, ours: u64, peer: u64) void {
        const m = @min(ours, peer, std.math.maxInt(u16) - 1);
        s.max = @intCast(@max(m, base));
        s.size = @min(s.size, s.max);
        s.failed = s.max + 1;
        s.probe_size = 0;
        s.losses = 0;
    }

    /// The size to probe now, if one is due: null while a probe is in flight, before
    /// `next_us`, or when nothing is left to try (the search then rests until the raise
    /// timer). `room` is the caller's buffer: no probe is larger.
    pub fn nextProbe(s: *Search, now_us: u64, room: usize) ?u16 {
        if (s.probe_size != 0 or now_us < s.next_us) return null;
        const top = @min(s.failed - 1, room);
        var eligible: [candidates.len + 1]u16 = undefined;
        var n: usize = 0;
        for (candidates) |c| if (c > s.size and c <= top and c < s.max) {
            eligible[n] = c;
            n += 1;
        };
        if (s.max > s.size and s.max <= top) {
            eligible[n] = s.max;
            n += 1;
        }
        if (n == 0) {
            // Done on this path: look again later, from scratch (it may carry more by then).
            s.next_us = now_us +| raise_interval_us;
            s.failed = s.max + 1;
            return null;
        }
        return eligible[(n - 1) / 2];
    }

    pub fn onProbeSent(s: *Search, size: u16) void {
        assert(size > s.size and size <= s.max and s.probe_size == 0);
        s.probe_size = size;
    }

    /// A 1-RTT packet was acknowledged. Returns the new size when it was the probe.
    pub fn onAcked(s: *Search, bytes: u16, time_sent_us: u64) ?u16 {
        if (bytes > base) {
            s.large_acked_sent_us = @max(s.large_acked_sent_us, time_sent_us);
            s.large_lost = 0;
        }
        if (s.probe_size == 0 or bytes != s.probe_size) return null;
        s.size = s.probe_size;
        s.probe_size = 0;
        s.losses = 0;
        return s.size;
    }

    /// A 1-RTT packet was declared lost. Returns true when it revealed a black hole: the size
    /// is `base` again, and the connection applies it.
    pub fn onLost(s: *Search, bytes: u16, time_sent_us: u64, now_us: u64) bool {
        if (s.probe_size != 0 and bytes == s.probe_size) {
            s.losses += 1;
            if (s.losses >= probes_per_size_max) {
                s.failed = s.probe_size;
                s.losses = 0;
            }
            s.probe_size = 0;
            return false;
        }
        if (bytes <= base or s.size == base) return false;
        // Sent before a large packet that went through: congestion, not the size.
        if (time_sent_us <= s.large_acked_sent_us) return false;
        s.large_lost += 1;
        if (s.large_lost < black_hole_losses) return false;
        s.restart(now_us +| black_hole_retry_us);
        return true;
    }

    /// Back to `base` with a fresh search from `next_us` on: a black hole, or a new path
    /// (RFC 9000 14.3: what one path carried says nothing of another).
    pub fn restart(s: *Search, next_us: u64) void {
        s.size = base;
        s.failed = s.max + 1;
        s.probe_size = 0;
        s.losses = 0;
        s.large_lost = 0;
        s.next_us = next_us;
    }
};

const testing = std.testing;

fn probeAndAck(s: *Search, now_us: u64) !u16 {
    const size = s.nextProbe(now_us, 65535) orelse return error.NoProbe;
    s.onProbeSent(size);
    try testing.expectEqual(@as(?u16, size), s.onAcked(size, now_us));
    return size;
}

fn probeAndLose(s: *Search, now_us: u64) !u16 {
    const size = s.nextProbe(now_us, 65535) orelse return error.NoProbe;
    s.onProbeSent(size);
    try testing.expect(!s.onLost(size, now_us, now_us));
    return size;
}

test "pmtu: a search ends in a few probes at the largest size the path carries" {
    // Loopback: everything up to our 1,500 passes: 1,452, 1,472, 1,500.
    var s: Search = .{};
    s.setMax(1500, 65527);
    try testing.expectEqual(@as(u16, 1452), try probeAndAck(&s, 0));
    try testing.expectEqual(@as(u16, 1472), try probeAndAck(&s, 0));
    try testing.expectEqual(@as(u16, 1500), try probeAndAck(&s, 0));
    try testing.expectEqual(@as(?u16, null), s.nextProbe(0, 65535));
    try testing.expectEqual(@as(u16, 1500), s.size);
    // Resting until the raise timer, then a new search (nothing above 1,500 to try).
    try testing.expectEqual(@as(?u16, null), s.nextProbe(raise_interval_us - 1, 65535));
    try testing.expectEqual(@as(?u16, null), s.nextProbe(raise_interval_us, 65535));
    try testing.expectEqual(@as(u16, 1500), s.size);

    // IPv6 over Ethernet: 1,452 passes, 1,472 is lost three times: done at 1,452.
    var v6: Search = .{};
    v6.setMax(1500, 65527);
    _ = try probeAndAck(&v6, 0);
    for (0..probes_per_size_max) |_| {
        try testing.expectEqual(@as(u16, 1472), try probeAndLose(&v6, 0));
    }
    try testing.expectEqual(@as(?u16, null), v6.nextProbe(0, 65535));
    try testing.expectEqual(@as(u16, 1452), v6.size);
}

test "pmtu: a lost probe narrows the search, and tries a smaller size" {
    var s: Search = .{};
    s.setMax(1500, 65527);
    for (0..probes_per_size_max - 1) |_| _ = try probeAndLose(&s, 0);
    try testing.expectEqual(@as(u16, 1452), s.nextProbe(0, 65535).?); // not yet given up
    for (0..1) |_| _ = try probeAndLose(&s, 0);
    try testing.expectEqual(@as(u16, 1252), s.nextProbe(0, 65535).?); // below 1,452: 1,252 first
    try testing.expectEqual(@as(u16, base), s.size);
    _ = try probeAndAck(&s, 0);
    try testing.expectEqual(@as(u16, 1350), try probeAndAck(&s, 0));
    try testing.expectEqual(@as(?u16, null), s.nextProbe(0, 65535));
}

test "pmtu: the peer's max_udp_payload_size is the ceiling at its exact value" {
    for ([_]u16{ 1200, 1201, 1251, 1252, 1253, 1471, 1472, 1473 }) |peer| {
        var s: Search = .{};
        s.setMax(1500, peer);
        while (s.nextProbe(0, 65535)) |size| {
            try testing.expect(size <= peer);
            s.onProbeSent(size);
            _ = s.onAcked(size, 0);
        }
        try testing.expectEqual(peer, s.size);
    }
    // Ours is the ceiling when the peer's is larger (any varint), and the caller's room too.
    var s: Search = .{};
    s.setMax(1500, (1 << 62) - 1);
    try testing.expectEqual(@as(u16, 1500), s.max);
    try testing.expectEqual(@as(u16, 1252), s.nextProbe(0, 1400).?); // of 1,252 and 1,350
}

test "pmtu: a black hole brings the size back to 1,200, and the search runs again later" {
    var s: Search = .{};
    s.setMax(1500, 65527);
    while (s.nextProbe(0, 65535)) |size| {
        s.onProbeSent(size);
        _ = s.onAcked(size, 100);
    }
    try testing.expectEqual(@as(u16, 1500), s.size);
    // Congestion: a large packet sent after the lost ones went through; no black hole.
    _ = s.onAcked(1500, 2_000);
    for (0..10) |_| try testing.expect(!s.onLost(1500, 1_000, 3_000));
    // The route changed: large packets sent after 2,000 are all lost; a small one is
    // acknowledged (it breaks no run: only large packets that pass do).
    _ = s.onAcked(200, 2_600);
    try testing.expect(!s.onLost(1500, 2_100, 4_000));
    try testing.expect(!s.onLost(1500, 2_200, 4_000));
    try testing.expect(s.onLost(1500, 2_300, 4_000));
    try testing.expectEqual(@as(u16, base), s.size);
    // Losses at the base size are no evidence of anything.
    try testing.expect(!s.onLost(1500, 2_400, 4_000));
    try testing.expectEqual(@as(?u16, null), s.nextProbe(4_000, 65535));
    try testing.expectEqual(@as(u16, 1452), s.nextProbe(4_000 + black_hole_retry_us, 65535).?);
}

test "pmtu: no probe before the handshake's end is acknowledged" {
    var s = Search.init(base);
    s.setMax(1500, 65527);
    try testing.expectEqual(@as(?u16, null), s.nextProbe(1_000_000, 65535));
    s.begin(5);
    try testing.expectEqual(@as(?u16, 1452), s.nextProbe(5, 65535));
    s.begin(100); // once only
    try testing.expectEqual(@as(u64, 5), s.next_us);
}

test "pmtu: the probe is told apart by its size, one in flight at a time" {
    var s: Search = .{};
    s.setMax(1500, 65527);
    const size = s.nextProbe(0, 65535).?;
    s.onProbeSent(size);
    try testing.expectEqual(@as(?u16, null), s.onAcked(1200, 0));
    try testing.expectEqual(@as(?u16, null), s.nextProbe(0, 65535)); // one probe at a time
    try testing.expect(!s.onLost(1200, 0, 0));
    try testing.expectEqual(@as(?u16, size), s.onAcked(size, 0));
    // A new path: back to the base, the search again from the start.
    s.restart(10);
    try testing.expectEqual(@as(u16, base), s.size);
    try testing.expectEqual(@as(?u16, null), s.nextProbe(9, 65535));
    try testing.expectEqual(@as(u16, 1452), s.nextProbe(10, 65535).?);
}
