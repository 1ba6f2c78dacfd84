//! QUIC streams of one server connection (RFC 9000 2-4): stream ID rules, each stream's
//! receive side (reassembly within the window we advertised, final size rules 4.5) and send
//! side (a bounded buffer of what the application wrote, kept until acknowledged, with the
//! ranges declared lost sent again first), and the frames each stream owes (MAX_STREAM_DATA,
//! RESET_STREAM, STOP_SENDING). Sans-IO: the connection feeds frames in and asks for frames
//! out; connection-level flow control and stream limits live in the connection.
//!
//! Memory: a stream's buffers exist only while bytes wait in them; the connection frees the
//! stream once both sides are done (`done`).
const std = @import("std");
const assert = std.debug.assert;
const Allocator = std.mem.Allocator;
const Reassembly = @import("reassembly.zig").Reassembly;

/// What the application may have written and not yet seen acknowledged, per stream.
pub const send_buffer_max_bytes: usize = 64 * 1024;
const send_capacity_min: usize = 1024;
/// Disjoint acknowledged (or lost) ranges tracked above what is freed; past this an
/// acknowledgement is forgotten and its bytes sent again (spurious, never wrong).
const send_ranges_max = 16;

/// "None" for a stream's error codes (codes are varints: below 2^62).
pub const no_code: u64 = std.math.maxInt(u64);
/// The largest varint (RFC 9000 16).
pub const varint_max: u64 = (1 << 62) - 1;

pub const Initiator = enum(u1) { client = 0, server = 1 };
pub const Direction = enum(u1) { bidi = 0, uni = 1 };

pub fn initiatorOf(id: u64) Initiator {
    return @enumFromInt(@as(u1, @truncate(id)));
}
pub fn directionOf(id: u64) Direction {
    return @enumFromInt(@as(u1, @truncate(id >> 1)));
}
/// The stream's number among those of its type (RFC 9000 2.1: the low two bits are the type).
pub fn indexOf(id: u64) u64 {
    return id >> 2;
}
pub fn idOf(initiator: Initiator, direction: Direction, index: u64) u64 {
    return (index << 2) | (@as(u64, @intFromEnum(direction)) << 1) | @intFromEnum(initiator);
}
/// Whether the server receives on this stream (client-initiated, or bidirectional).
pub fn serverReceives(id: u64) bool {
    return directionOf(id) == .bidi or initiatorOf(id) == .client;
}
/// Whether the server sends on this stream.
pub fn serverSends(id: u64) bool {
    return directionOf(id) == .bidi or initiatorOf(id) == .server;
}

pub const Error = error{
    /// RFC 9000 4.1: data past the window we advertised.
    FlowControl,
    /// RFC 9000 4.5: a final size that moved, or data past it.
    FinalSize,
    TooFragmented,
    OutOfMemory,
};

const Range = struct { start: u64, end: u64 };

/// A small set of disjoint ranges, merged on insert; on overflow `add` says no. It holds
/// only its count: its room (`send_ranges_max` ranges) is one half of its send side's
/// `RangeRoom`, which the caller passes in.
const RangeSet = struct {
    count: u8 = 0,

    fn add(s: *RangeSet, items: *[send_ranges_max]Range, start: u64, end: u64) bool {
        assert(start < end);
        var merged: Range = .{ .start = start, .end = end };
        var out: [send_ranges_max + 1]Range = undefined;
        var n: usize = 0;
        var placed = false;
        for (items[0..s.count]) |g| {
            if (g.end < merged.start) {
                out[n] = g;
                n += 1;
            } else if (merged.end < g.start) {
                if (!placed) {
                    out[n] = merged;
                    n += 1;
                    placed = true;
                }
                out[n] = g;
                n += 1;
            } else merged = .{ .start = @min(g.start, merged.start), .end = @max(g.end, merged.end) };
        }
        if (!placed) {
            out[n] = merged;
            n += 1;
        }
        if (n > send_ranges_max) return false;
        @memcpy(items[0..n], out[0..n]);
        s.count = @intCast(n);
        return true;
    }

    fn popFront(s: *RangeSet, items: *[send_ranges_max]Range) void {
        assert(s.count > 0);
        std.mem.copyForwards(Range, items[0 .. s.count - 1], items[1..s.count]);
        s.count -= 1;
    }

    /// Drops what lies below `offset`.
    fn trimBelow(s: *RangeSet, items: *[send_ranges_max]Range, offset: u64) void {
        while (s.count > 0 and items[0].end <= offset) s.popFront(items);
        if (s.count > 0) items[0].start = @max(items[0].start, offset);
    }
};

/// The room of a send side's two range sets: allocated by the first range either set
/// takes and freed with the send buffer (`SendSide.deinit`, once everything written was
/// acknowledged), so an idle stream holds none; when it cannot be had an `add` says no as
/// on overflow (the callers' fallbacks are the same).
const RangeRoom = struct {
    acked: [send_ranges_max]Range,
    lost: [send_ranges_max]Range,
};

/// What the application wrote on one stream, from the first unacknowledged byte.
pub const SendSide = struct {
    /// buf[i] is the byte at `acked_offset + i`; holds [acked_offset, write_offset).
    buf: []u8 = &.{},
    acked_offset: u64 = 0,
    write_offset: u64 = 0,
    /// New data starts here; below it everything was sent at least once.
    sent_offset: u64 = 0,
    /// Null while both sets are empty and have been since the room was last freed.
    room_: ?*RangeRoom = null,
    acked: RangeSet = .{},
    lost: RangeSet = .{},
    fin: bool = false,
    fin_sent: bool = false,
    fin_acked: bool = false,

    pub fn deinit(s: *SendSide, allocator: Allocator) void {
        allocator.free(s.buf);
        s.buf = &.{};
        if (s.room_) |r| allocator.destroy(r);
        s.room_ = null;
        s.acked.count = 0;
        s.lost.count = 0;
    }

    /// The sets' room, made if need be; null without memory.
    fn rangeRoom(s: *SendSide, allocator: Allocator) ?*RangeRoom {
        if (s.room_ == null) s.room_ = allocator.create(RangeRoom) catch return null;
        return s.room_;
    }

    fn lostItems(s: *const SendSide) []const Range {
        return if (s.lost.count == 0) &.{} else s.room_.?.lost[0..s.lost.count];
    }

    fn ackedItems(s: *const SendSide) []const Range {
        return if (s.acked.count == 0) &.{} else s.room_.?.acked[0..s.acked.count];
    }

    fn addAcked(s: *SendSide, allocator: Allocator, start: u64, end: u64) bool {
        const r = s.rangeRoom(allocator) orelse return false;
        return s.acked.add(&r.acked, start, end);
    }

    fn addLostRange(s: *SendSide, allocator: Allocator, start: u64, end: u64) bool {
        const r = s.rangeRoom(allocator) orelse return false;
        return s.lost.add(&r.lost, start, end);
    }

    fn trimBelow(s: *SendSide, offset: u64) void {
        const r = s.room_ orelse return assert(s.acked.count == 0 and s.lost.count == 0);
        s.acked.trimBelow(&r.acked, offset);
        s.lost.trimBelow(&r.lost, offset);
    }

    /// Nothing more of the stream's data goes out (a reset, RFC 9000 3.1): the lost set
    /// empties (its room goes with the buffer).
    pub fn dropLost(s: *SendSide) void {
        s.lost.count = 0;
    }

    pub fn room(s: *const SendSide) usize {
        return send_buffer_max_bytes - @as(usize, @intCast(s.write_offset - s.acked_offset));
    }

    /// Buffers as much of `bytes` as fits (at most `limit`); returns how many.
    pub fn write(s: *SendSide, allocator: Allocator, bytes: []const u8, limit: usize) Allocator.Error!usize {
        assert(!s.fin);
        const n = @min(bytes.len, s.room(), limit);
        if (n == 0) return 0;
        const held: usize = @intCast(s.write_offset - s.acked_offset);
        if (held + n > s.buf.len) {
            const cap = @min(send_buffer_max_bytes, @max(held + n, 2 * s.buf.len, send_capacity_min));
            const grown = try allocator.alloc(u8, cap);
            @memcpy(grown[0..held], s.buf[0..held]);
            allocator.free(s.buf);
            s.buf = grown;
        }
        @memcpy(s.buf[held..][0..n], bytes[0..n]);
        s.write_offset += n;
        return n;
    }

    /// What to send next: lost bytes first, then new ones; `len` 0 with `fin` for a lone FIN.
    pub const Chunk = struct { offset: u64, data: []const u8, fin: bool };

    pub fn next(s: *const SendSide, len_max: usize) ?Chunk {
        if (s.lost.count > 0) {
            const r = s.lostItems()[0];
            const n: usize = @intCast(@min(r.end - r.start, len_max));
            const fin = s.fin and r.start + n == s.write_offset;
            return .{ .offset = r.start, .data = s.slice(r.start, n), .fin = fin };
        }
        const n: usize = @intCast(@min(s.write_offset - s.sent_offset, len_max));
        if (n == 0 and !(s.fin and !s.fin_sent)) return null;
        const fin = s.fin and s.sent_offset + n == s.write_offset;
        return .{ .offset = s.sent_offset, .data = s.slice(s.sent_offset, n), .fin = fin };
    }

    fn slice(s: *const SendSide, offset: u64, n: usize) []const u8 {
        assert(offset >= s.acked_offset and offset + n <= s.write_offset);
        return s.buf[@intCast(offset - s.acked_offset)..][0..n];
    }

    /// `n` bytes at `offset` (and the FIN if `fin`) went into a packet.
    pub fn onSent(s: *SendSide, offset: u64, n: usize, fin: bool) void {
        if (s.lost.count > 0 and s.room_.?.lost[0].start == offset) {
            const lost = &s.room_.?.lost;
            lost[0].start += n;
            if (lost[0].start == lost[0].end) s.lost.popFront(lost);
        } else {
            assert(offset == s.sent_offset);
            s.sent_offset += n;
        }
        if (fin) s.fin_sent = true;
    }

    pub fn onAcked(s: *SendSide, allocator: Allocator, offset: u64, n: usize, fin: bool) void {
        if (fin) s.fin_acked = true;
        const end = offset + n;
        if (n == 0 or end <= s.acked_offset) return;
        if (!s.addAcked(allocator, @max(offset, s.acked_offset), end)) {
            // Forget this acknowledgement: the bytes go again (harmless duplicates).
            _ = s.addLostRange(allocator, @max(offset, s.acked_offset), end) or s.rewind(offset);
            return;
        }
        const r = s.room_.?;
        s.lost.trimBelow(&r.lost, s.acked_offset);
        if (r.acked[0].start == s.acked_offset) s.release(allocator, r.acked[0].end);
    }

    fn release(s: *SendSide, allocator: Allocator, upto: u64) void {
        const n: usize = @intCast(upto - s.acked_offset);
        const held: usize = @intCast(s.write_offset - s.acked_offset);
        std.mem.copyForwards(u8, s.buf[0 .. held - n], s.buf[n..held]);
        s.acked_offset = upto;
        s.trimBelow(upto);
        if (s.acked_offset == s.write_offset) s.deinit(allocator);
    }

    /// Declares sent bytes lost: they go again, skipping what was acknowledged since.
    pub fn onLost(s: *SendSide, allocator: Allocator, offset: u64, n: usize, fin: bool) void {
        if (fin and !s.fin_acked) s.fin_sent = false;
        var start = @max(offset, s.acked_offset);
        const end = offset + n;
        for (s.ackedItems()) |a| {
            if (start >= end) break;
            if (a.end <= start or a.start >= end) continue;
            if (a.start > start and !s.addLost(allocator, start, a.start)) return;
            start = @max(start, a.end);
        }
        if (start < end) _ = s.addLost(allocator, start, end);
    }

    fn addLost(s: *SendSide, allocator: Allocator, start: u64, end: u64) bool {
        if (s.addLostRange(allocator, start, end)) return true;
        return s.rewind(start);
    }

    /// The lost set is full: send everything from `offset` again as if new.
    fn rewind(s: *SendSide, offset: u64) bool {
        s.sent_offset = @min(s.sent_offset, @max(offset, s.acked_offset));
        s.lost.count = 0;
        return true;
    }

    pub fn allAcked(s: *const SendSide) bool {
        return s.fin_acked and s.acked_offset == s.write_offset;
    }
};

/// The receive side's state (RFC 9000 3.2), as far as the application needs it.
pub const RecvSide = struct {
    data: Reassembly = .{},
    /// The largest offset the peer may send to (our MAX_STREAM_DATA).
    max_offset: u64,
    /// The final size once known (`finalSize`), else `no_code` (sizes are varints).
    final_size_raw: u64 = no_code,
    /// The application read the FIN (or was told of the reset): nothing more comes.
    finished: bool = false,

    /// A STREAM frame's data; returns how many bytes past the previous highest it added
    /// (for connection-level flow control).
    pub fn onData(r: *RecvSide, allocator: Allocator, offset: u64, data: []const u8, fin: bool, window_bytes: usize) Error!u64 {
        const end = offset + data.len;
        if (end > r.max_offset) return error.FlowControl;
        if (r.finalSize()) |size| {
            if (end > size or (fin and end != size)) return error.FinalSize;
        } else if (fin and end < r.data.highest()) return error.FinalSize;
        const before = r.data.highest();
        if (fin) r.setFinalSize(end);
        if (r.finished) return 0;
        r.data.insert(allocator, offset, data, window_bytes) catch |e| return switch (e) {
            error.OverWindow => error.FlowControl,
            error.TooFragmented => error.TooFragmented,
            error.OutOfMemory => error.OutOfMemory,
        };
        return r.data.highest() -| before;
    }

    /// RESET_STREAM's final size (4.5): returns the bytes it adds past the highest seen.
    pub fn onReset(r: *RecvSide, final_size: u64) Error!u64 {
        if (r.finalSize()) |size| if (size != final_size) return error.FinalSize;
        const highest = r.data.highest();
        if (final_size < highest) return error.FinalSize;
        if (final_size > r.max_offset) return error.FlowControl;
        r.setFinalSize(final_size);
        return final_size - highest;
    }

    pub fn finalSize(r: *const RecvSide) ?u64 {
        return if (r.final_size_raw == no_code) null else r.final_size_raw;
    }

    fn setFinalSize(r: *RecvSide, size: u64) void {
        assert(size <= varint_max and (r.final_size_raw == no_code or r.final_size_raw == size));
        r.final_size_raw = size;
    }

    pub fn atFin(r: *const RecvSide) bool {
        const size = r.finalSize() orelse return false;
        return r.data.read_offset == size;
    }
};

/// One stream's record: what every stream has, then the halves its direction has (RFC 9000
/// 2.1). A unidirectional stream is made with one half (`RecvOnly`, `SendOnly`), 56 bytes
/// fewer than a bidirectional one (`Bidi`): `recv` and `send` find the halves and assert
/// that the stream has them, so a half the stream lacks is never touched. Made by `create`,
/// given back by `destroy` (the record's type follows from the ID).
pub const Stream = struct {
    id: u64,
    /// The peer's MAX_STREAM_DATA for our sending.
    send_max: u64,
    /// Pending events for the application.
    readable_event: bool = false,
    writable_wanted: bool = false,
    writable_event: bool = false,
    /// The peer's RESET_STREAM (its code `no_code` when none is to be told) and final size.
    reset_event_code: u64 = no_code,
    reset_event_final_size: u64 = 0,
    stop_sending_event: u64 = no_code,
    /// Frames owed: the codes of our RESET_STREAM and STOP_SENDING (`no_code`: none).
    reset_out: u64 = no_code,
    stop_sending_out: u64 = no_code,
    max_stream_data_owed: bool = false,
    reset_out_sent: bool = false,
    stop_sending_sent: bool = false,

    const Bidi = struct { stream: Stream, recv: RecvSide, send: SendSide };
    const RecvOnly = struct { stream: Stream, recv: RecvSide };
    const SendOnly = struct { stream: Stream, send: SendSide };

    /// The record's bytes for a stream of this ID.
    pub fn recordBytes(id: u64) usize {
        if (!serverSends(id)) return @sizeOf(RecvOnly);
        if (!serverReceives(id)) return @sizeOf(SendOnly);
        return @sizeOf(Bidi);
    }

    /// A new stream's record: `recv_window` is what we let the peer send, `send_max` what it
    /// lets us send (each used only if the stream has that half).
    pub fn create(allocator: Allocator, id: u64, recv_window: u64, send_max: u64) Allocator.Error!*Stream {
        const head: Stream = .{ .id = id, .send_max = if (serverSends(id)) send_max else 0 };
        const recv_side: RecvSide = .{ .max_offset = recv_window };
        if (!serverSends(id)) {
            const r = try allocator.create(RecvOnly);
            r.* = .{ .stream = head, .recv = recv_side };
            return &r.stream;
        }
        if (!serverReceives(id)) {
            const r = try allocator.create(SendOnly);
            r.* = .{ .stream = head, .send = .{} };
            return &r.stream;
        }
        const r = try allocator.create(Bidi);
        r.* = .{ .stream = head, .recv = recv_side, .send = .{} };
        return &r.stream;
    }

    /// Frees the stream's buffers and its record.
    pub fn destroy(s: *Stream, allocator: Allocator) void {
        if (serverReceives(s.id)) s.recv().data.deinit(allocator);
        if (serverSends(s.id)) s.send().deinit(allocator);
        if (!serverSends(s.id)) {
            allocator.destroy(@as(*RecvOnly, @fieldParentPtr("stream", s)));
        } else if (!serverReceives(s.id)) {
            allocator.destroy(@as(*SendOnly, @fieldParentPtr("stream", s)));
        } else allocator.destroy(@as(*Bidi, @fieldParentPtr("stream", s)));
    }

    /// The receive half: only a stream the server receives on has one.
    pub fn recv(s: *const Stream) *RecvSide {
        assert(serverReceives(s.id));
        const m: *Stream = @constCast(s);
        if (!serverSends(s.id)) return &@as(*RecvOnly, @fieldParentPtr("stream", m)).recv;
        return &@as(*Bidi, @fieldParentPtr("stream", m)).recv;
    }

    /// The send half: only a stream the server sends on has one.
    pub fn send(s: *const Stream) *SendSide {
        assert(serverSends(s.id));
        const m: *Stream = @constCast(s);
        if (!serverReceives(s.id)) return &@as(*SendOnly, @fieldParentPtr("stream", m)).send;
        return &@as(*Bidi, @fieldParentPtr("stream", m)).send;
    }

    /// Both sides finished: the connection may free the stream.
    pub fn done(s: *const Stream) bool {
        const recv_done = !serverReceives(s.id) or s.recv().finished;
        const send_done = !serverSends(s.id) or s.send().allAcked() or s.reset_out_sent;
        return recv_done and send_done and s.reset_event_code == no_code and s.stop_sending_event == no_code;
    }

    /// After the application read: raise MAX_STREAM_DATA once half the window was consumed.
    pub fn creditRead(s: *Stream, window_bytes: u64) void {
        const r = s.recv();
        if (r.finalSize() != null) return;
        const target = r.data.read_offset + window_bytes;
        if (target - r.max_offset >= window_bytes / 2) {
            r.max_offset = target;
            s.max_stream_data_owed = true;
        }
    }

    /// How many more bytes the peer's stream limit lets us write.
    pub fn sendCredit(s: *const Stream) u64 {
        return s.send_max -| s.send().write_offset;
    }
};

const testing = std.testing;

test "stream IDs: initiator, direction, index (RFC 9000 2.1)" {
    try testing.expectEqual(Initiator.client, initiatorOf(0));
    try testing.expectEqual(Direction.bidi, directionOf(0));
    try testing.expectEqual(Initiator.server, initiatorOf(3));
    try testing.expectEqual(Direction.uni, directionOf(3));
    try testing.expectEqual(@as(u64, 2), indexOf(8));
    try testing.expectEqual(@as(u64, 11), idOf(.server, .uni, 2));
    try testing.expect(serverReceives(2) and !serverSends(2)); // client uni
    try testing.expect(!serverReceives(3) and serverSends(3)); // server uni
    try testing.expect(serverReceives(0) and serverSends(0));
}

test "recv: data at every split, the window's edge (max, max+1), final size rules" {
    const a = testing.allocator;
    const msg = "0123456789";
    var split: usize = 0;
    while (split <= msg.len) : (split += 1) {
        var r: RecvSide = .{ .max_offset = 10 };
        defer r.data.deinit(a);
        _ = try r.onData(a, split, msg[split..], true, 10);
        _ = try r.onData(a, 0, msg[0..split], false, 10);
        try testing.expectEqualStrings(msg, r.data.readable());
        try testing.expectEqual(@as(?u64, 10), r.finalSize());
    }
    var r: RecvSide = .{ .max_offset = 10 };
    defer r.data.deinit(a);
    try testing.expectError(error.FlowControl, r.onData(a, 10, "x", false, 10));
    _ = try r.onData(a, 4, "45", true, 10);
    try testing.expectError(error.FinalSize, r.onData(a, 6, "6", false, 10)); // past the final size
    try testing.expectError(error.FinalSize, r.onData(a, 0, "0", true, 10)); // a different final size
    try testing.expectError(error.FinalSize, r.onReset(7));
    try testing.expectEqual(@as(u64, 0), try r.onReset(6));
}

test "recv: a FIN below data already received is a final size error" {
    var r: RecvSide = .{ .max_offset = 100 };
    defer r.data.deinit(testing.allocator);
    _ = try r.onData(testing.allocator, 10, "abc", false, 100);
    try testing.expectError(error.FinalSize, r.onData(testing.allocator, 0, "ab", true, 100));
    try testing.expectError(error.FinalSize, r.onReset(5));
}

test "send: bounded buffer, lost ranges first, release on ack" {
    const a = testing.allocator;
    var s: SendSide = .{};
    defer s.deinit(a);
    var big: [send_buffer_max_bytes + 10]u8 = undefined;
    @memset(&big, 'x');
    try testing.expectEqual(send_buffer_max_bytes, try s.write(a, &big, std.math.maxInt(usize)));
    try testing.expectEqual(@as(usize, 0), s.room());
    var c = s.next(1000).?;
    try testing.expectEqual(@as(u64, 0), c.offset);
    s.onSent(0, 1000, false);
    c = s.next(1000).?;
    s.onSent(c.offset, 1000, false);
    s.onLost(a, 0, 1000, false);
    c = s.next(5000).?;
    try testing.expectEqual(@as(u64, 0), c.offset); // the lost range goes first
    try testing.expectEqual(@as(usize, 1000), c.data.len);
    s.onSent(0, 1000, false);
    s.onAcked(a, 1000, 1000, false);
    try testing.expectEqual(@as(usize, 0), s.room());
    s.onAcked(a, 0, 1000, false);
    try testing.expectEqual(@as(usize, 2000), s.room());
}

test "send: a lost range skips what was acknowledged since; FIN goes again" {
    const a = testing.allocator;
    var s: SendSide = .{};
    defer s.deinit(a);
    _ = try s.write(a, "abcdefghij", 100);
    s.fin = true;
    const c = s.next(100).?;
    try testing.expect(c.fin and c.data.len == 10);
    s.onSent(0, 10, true);
    s.onAcked(a, 3, 4, false); // "defg"
    s.onLost(a, 0, 10, true);
    try testing.expect(!s.fin_sent);
    const first = s.next(100).?;
    try testing.expectEqualStrings("abc", first.data);
    s.onSent(0, 3, false);
    const second = s.next(100).?;
    try testing.expectEqualStrings("hij", second.data);
    try testing.expect(second.fin);
    s.onSent(7, 3, true);
    s.onAcked(a, 0, 3, false);
    s.onAcked(a, 7, 3, true);
    try testing.expect(s.allAcked());
    try testing.expectEqual(@as(usize, 0), s.buf.len);
}

test "stream: MAX_STREAM_DATA is owed once half the window was read" {
    const s = try Stream.create(testing.allocator, 0, 100, 100);
    defer s.destroy(testing.allocator);
    _ = try s.recv().onData(testing.allocator, 0, "x" ** 60, false, 100);
    s.recv().data.consume(testing.allocator, 49);
    s.creditRead(100);
    try testing.expect(!s.max_stream_data_owed);
    s.recv().data.consume(testing.allocator, 1);
    s.creditRead(100);
    try testing.expect(s.max_stream_data_owed);
    try testing.expectEqual(@as(u64, 150), s.recv().max_offset);
}

test "stream records: a unidirectional stream has only its half; the sizes at rest" {
    const a = testing.allocator;
    // Bidirectional (client 0), client unidirectional (2), server unidirectional (3).
    try testing.expectEqual(@sizeOf(Stream.Bidi), Stream.recordBytes(0));
    try testing.expect(Stream.recordBytes(2) == @sizeOf(Stream.RecvOnly) and Stream.recordBytes(3) == @sizeOf(Stream.SendOnly));
    try testing.expect(Stream.recordBytes(2) + @sizeOf(SendSide) == Stream.recordBytes(0));
    try testing.expect(Stream.recordBytes(3) <= 120 and Stream.recordBytes(0) <= 176);
    for ([_]u64{ 0, 1, 2, 3, 4 * 9 + 2, 4 * 9 + 3 }) |id| {
        const s = try Stream.create(a, id, 10, 20);
        defer s.destroy(a);
        try testing.expectEqual(id, s.id);
        if (serverReceives(id)) {
            _ = try s.recv().onData(a, 0, "0123456789", true, 10);
            try testing.expectError(error.FlowControl, s.recv().onData(a, 10, "x", false, 10));
        }
        if (serverSends(id)) {
            try testing.expectEqual(@as(u64, 20), s.sendCredit());
            try testing.expectEqual(@as(usize, 3), try s.send().write(a, "abc", 100));
        } else try testing.expectEqual(@as(u64, 0), s.send_max);
        try testing.expect(!s.done());
    }
    std.debug.print("quic/streams: @sizeOf Bidi={} RecvOnly={} SendOnly={}\n", .{ @sizeOf(Stream.Bidi), @sizeOf(Stream.RecvOnly), @sizeOf(Stream.SendOnly) });
}
