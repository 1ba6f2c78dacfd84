//! What each ack-eliciting packet we sent carried, by the `token` recovery.zig reports it
//! with: on acknowledgement the frames are forgotten (stream bytes released), on loss what
//! still matters is sent again (RFC 9000 13.3: new frames with the current values, or the
//! same bytes for STREAM and CRYPTO).
//!
//! Bounded: a packet carries at most `records_per_packet` such frames (the sender stops
//! adding when full), and packets in flight are bounded by recovery's cap. The table is a
//! hash map from the caller's allocator, freed whenever nothing is in flight.
const std = @import("std");
const assert = std.debug.assert;
const Allocator = std.mem.Allocator;
const Space = @import("ack_ranges.zig").Space;

pub const records_per_packet = 8;

pub const Record = union(enum) {
    stream: struct { id: u64, offset: u64, len: u32, fin: bool },
    crypto: struct { space: Space, offset: u64, len: u32 },
    /// An ACK frame's Largest Acknowledged (RFC 9000 13.2.4).
    ack: u64,
    handshake_done,
    new_token,
    max_data,
    max_streams_bidi,
    max_streams_uni,
    max_stream_data: u64,
    reset_stream: u64,
    stop_sending: u64,
    /// Sequence numbers: of our ID announced, of the peer's ID retired.
    new_connection_id: u64,
    retire_connection_id: u64,
};

pub const Packet = struct {
    space: Space = .application,
    items: [records_per_packet]Record = undefined,
    count: u8 = 0,

    pub fn full(p: *const Packet) bool {
        return p.count == records_per_packet;
    }

    pub fn add(p: *Packet, r: Record) void {
        assert(!p.full());
        p.items[p.count] = r;
        p.count += 1;
    }

    pub fn slice(p: *const Packet) []const Record {
        return p.items[0..p.count];
    }
};

pub const Log = struct {
    map: std.AutoHashMapUnmanaged(u32, Packet) = .empty,
    next_token: u32 = 0,

    pub fn deinit(log: *Log, allocator: Allocator) void {
        log.map.deinit(allocator);
    }

    /// Files a packet's records; returns its token.
    pub fn put(log: *Log, allocator: Allocator, p: Packet) Allocator.Error!u32 {
        const token = log.next_token;
        log.next_token +%= 1;
        try log.map.put(allocator, token, p);
        return token;
    }

    /// Takes a packet's records out (null for a token never filed).
    pub fn take(log: *Log, allocator: Allocator, token: u32) ?Packet {
        const kv = log.map.fetchRemove(token) orelse return null;
        if (log.map.count() == 0) log.map.clearAndFree(allocator);
        return kv.value;
    }

    /// A space's keys were discarded: its packets will never be reported (RFC 9002 6.4).
    pub fn dropSpace(log: *Log, allocator: Allocator, space: Space) void {
        var dropped: [64]u32 = undefined;
        while (true) {
            var n: usize = 0;
            var it = log.map.iterator();
            while (it.next()) |e| {
                if (e.value_ptr.space != space) continue;
                dropped[n] = e.key_ptr.*;
                n += 1;
                if (n == dropped.len) break;
            }
            for (dropped[0..n]) |t| _ = log.map.remove(t);
            if (n < dropped.len) break;
        }
        if (log.map.count() == 0) log.map.clearAndFree(allocator);
    }

    pub fn heldBytes(log: *const Log) usize {
        return log.map.capacity() * (@sizeOf(u32) + @sizeOf(Packet) + 1);
    }
};

test "sent frames: put and take back, the table freed when empty" {
    const a = std.testing.allocator;
    var log: Log = .{};
    defer log.deinit(a);
    var p: Packet = .{};
    p.add(.handshake_done);
    p.add(.{ .stream = .{ .id = 4, .offset = 10, .len = 5, .fin = true } });
    const t = try log.put(a, p);
    try std.testing.expectEqual(@as(?Packet, null), log.take(a, t + 1));
    const back = log.take(a, t).?;
    try std.testing.expectEqual(@as(u8, 2), back.count);
    try std.testing.expectEqual(@as(usize, 0), log.heldBytes());
}
