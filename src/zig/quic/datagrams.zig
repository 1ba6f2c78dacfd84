//! Unreliable datagrams of one QUIC connection (RFC 9221): what the peer sent, waiting for
//! the application, and what the application sent, waiting for room in a packet. Both are
//! bounded queues: a datagram that does not fit (`count_max` datagrams or `bytes_max` bytes
//! waiting) is dropped and counted, never kept beyond the bound (RFC 9221 5: delivery is not
//! promised, and a sender must not buffer without limit). A datagram sent is never sent again
//! when its packet is lost (RFC 9221 5.2); its packet counts for congestion control like any
//! ack-eliciting one.
//!
//! Memory: nothing until the first datagram either way (`Datagrams` is made on first use and
//! kept for the connection's life); each waiting datagram is one allocation of its size.
const std = @import("std");
const assert = std.debug.assert;
const Allocator = std.mem.Allocator;

/// A 1-RTT packet's bytes beside a DATAGRAM frame: the short header (1 + a 20-byte CID +
/// a 4-byte packet number), an ACK frame of a few ranges, and the 16-byte tag.
pub const packet_overhead = 1 + 20 + 4 + 40 + 16;

pub const SendError = error{
    /// The peer takes no DATAGRAM frames, or the connection is not established.
    Unsupported,
    /// Larger than the peer takes, or than a packet of the smallest size holds.
    TooLarge,
    /// The queue is full (or memory ran out): dropped, and counted.
    Dropped,
};

/// The largest payload whose DATAGRAM frame fits both `room` (a packet's, beside its
/// overhead) and the peer's max_datagram_frame_size.
pub fn payloadMax(room: usize, peer_max_frame: u64) usize {
    const frames = @import("frames.zig");
    var n: usize = 0;
    while (n < room and frames.datagramFrameLen(n + 1) <= peer_max_frame and
        frames.datagramFrameLen(n + 1) <= room) n += 1;
    return n;
}

/// The queues in `slot`, made on first use; null when memory runs out.
pub fn ensure(slot: *?*Datagrams, a: Allocator) ?*Datagrams {
    if (slot.*) |d| return d;
    const d = a.create(Datagrams) catch return null;
    d.* = .{};
    slot.* = d;
    return d;
}

/// Datagrams waiting at once, each way.
pub const count_max = 64;
/// Bytes waiting at once, each way.
pub const bytes_max = 64 * 1024;

/// A FIFO of owned byte strings, bounded in count and bytes.
pub const Queue = struct {
    items: [count_max][]u8 = undefined,
    head: usize = 0,
    len: usize = 0,
    bytes: usize = 0,
    /// Datagrams refused because the queue was full (or memory ran out).
    dropped: u64 = 0,

    /// Copies `data` in; false (and counted as dropped) when it does not fit or memory
    /// runs out.
    pub fn push(q: *Queue, a: Allocator, data: []const u8) bool {
        if (q.len == count_max or data.len > bytes_max - q.bytes) {
            q.dropped +|= 1;
            return false;
        }
        const copy = a.dupe(u8, data) catch {
            q.dropped +|= 1;
            return false;
        };
        q.items[(q.head + q.len) % count_max] = copy;
        q.len += 1;
        q.bytes += data.len;
        return true;
    }

    pub fn peek(q: *const Queue) ?[]const u8 {
        return if (q.len == 0) null else q.items[q.head];
    }

    pub fn pop(q: *Queue, a: Allocator) void {
        assert(q.len > 0);
        const d = q.items[q.head];
        assert(q.bytes >= d.len);
        q.bytes -= d.len;
        a.free(d);
        q.head = (q.head + 1) % count_max;
        q.len -= 1;
    }

    pub fn deinit(q: *Queue, a: Allocator) void {
        while (q.len > 0) q.pop(a);
    }
};

pub const Datagrams = struct {
    /// From the peer, for the application.
    in: Queue = .{},
    /// From the application, for the next packets.
    out: Queue = .{},

    pub fn deinit(d: *Datagrams, a: Allocator) void {
        d.in.deinit(a);
        d.out.deinit(a);
    }

    pub fn heldBytes(d: *const Datagrams) usize {
        return @sizeOf(Datagrams) + d.in.bytes + d.out.bytes;
    }
};

const testing = std.testing;

test "datagram queue: FIFO, bounded by count and bytes, drops counted, all freed" {
    const a = testing.allocator;
    var q: Queue = .{};
    defer q.deinit(a);
    try testing.expect(q.push(a, "one") and q.push(a, "") and q.push(a, "three"));
    try testing.expectEqualStrings("one", q.peek().?);
    q.pop(a);
    try testing.expectEqualStrings("", q.peek().?);
    q.pop(a);
    try testing.expectEqual(@as(usize, 5), q.bytes);
    // Up to `count_max` at once (the ring wraps), one more is dropped.
    for (1..count_max) |_| try testing.expect(q.push(a, "x"));
    try testing.expect(!q.push(a, "x"));
    try testing.expectEqual(@as(u64, 1), q.dropped);
    try testing.expectEqualStrings("three", q.peek().?);
    q.deinit(a);
    try testing.expectEqual(@as(usize, 0), q.bytes);
    // Bytes: exactly `bytes_max` fits, one byte more does not.
    const big = try a.alloc(u8, bytes_max);
    defer a.free(big);
    try testing.expect(q.push(a, big));
    try testing.expect(!q.push(a, "y"));
    q.pop(a);
    try testing.expect(q.push(a, big[0 .. bytes_max - 1]));
    try testing.expect(q.push(a, "z"));
    try testing.expect(!q.push(a, "z"));
    try testing.expectEqual(@as(u64, 3), q.dropped);
}

test "datagram queue: memory running out drops the datagram and keeps the queue sound" {
    var failing = testing.FailingAllocator.init(testing.allocator, .{ .fail_index = 1 });
    const a = failing.allocator();
    var q: Queue = .{};
    defer q.deinit(a);
    try testing.expect(q.push(a, "kept"));
    try testing.expect(!q.push(a, "lost"));
    try testing.expectEqual(@as(usize, 1), q.len);
    try testing.expectEqual(@as(u64, 1), q.dropped);
    try testing.expectEqualStrings("kept", q.peek().?);
}
