//! In-order delivery of bytes that arrive at offsets (STREAM and CRYPTO frames, RFC 9000
//! 2.2, 19.6, 19.8), bounded: the caller names the window (how far past what was read data
//! may land) and the buffer never grows past it. The buffer exists only while bytes wait in
//! it (allocated on first data, freed when all was read), and so does the room for its ranges,
//! so an idle stream costs a few dozen bytes.
//!
//! The data held is a set of at most `ranges_max` disjoint ranges; a frame that would need
//! one more is refused with `error.TooFragmented`, and the connection then drops the whole
//! packet unacknowledged (the peer sends it again once the gaps filled). Re-processing the
//! earlier frames of such a packet is harmless: data already held is ignored.
const std = @import("std");
const assert = std.debug.assert;
const Allocator = std.mem.Allocator;

pub const ranges_max = 24;
const capacity_min: usize = 1024;

pub const Error = error{ OverWindow, TooFragmented, OutOfMemory };

const Range = struct { start: u64, end: u64 };

pub const Reassembly = struct {
    /// buf[i] holds the byte at offset `read_offset + i`.
    buf: []u8 = &.{},
    /// Bytes before this offset were handed out.
    read_offset: u64 = 0,
    /// Ranges held (ascending, disjoint): their room, for `ranges_max`, lives in `buf`'s
    /// allocation after the data (one allocation, made and freed with the buffer; found
    /// from `buf`, so an idle stream holds no pointer to it). Never above 0 without `buf`.
    count: u8 = 0,

    pub fn deinit(r: *Reassembly, allocator: Allocator) void {
        if (r.buf.len > 0) allocator.free(block(r.buf));
        r.buf = &.{};
        r.count = 0;
    }

    const ranges_offset_align = @alignOf(Range);

    /// The room for ranges after the data in the buffer's allocation.
    fn room(buf: []u8) *[ranges_max]Range {
        assert(buf.len > 0);
        return @ptrCast(@alignCast(buf.ptr + std.mem.alignForward(usize, buf.len, ranges_offset_align)));
    }

    /// The ranges held.
    fn ranges(r: *const Reassembly) []Range {
        if (r.count == 0) return &.{};
        return room(r.buf)[0..r.count];
    }

    /// The allocation behind a buffer of `buf.len` data bytes and the ranges after them.
    fn block(buf: []u8) []align(@alignOf(Range)) u8 {
        const total = std.mem.alignForward(usize, buf.len, ranges_offset_align) + ranges_max * @sizeOf(Range);
        const p: [*]align(@alignOf(Range)) u8 = @alignCast(buf.ptr);
        return p[0..total];
    }

    /// The highest offset received plus one (the read offset when nothing waits).
    pub fn highest(r: *const Reassembly) u64 {
        return if (r.count == 0) r.read_offset else r.ranges()[r.count - 1].end;
    }

    /// Takes `data` at `offset`; what lies before `read_offset` is ignored. `window_bytes`:
    /// how far past `read_offset` data may end.
    pub fn insert(r: *Reassembly, allocator: Allocator, offset: u64, data: []const u8, window_bytes: usize) Error!void {
        const end = offset + data.len;
        if (end <= r.read_offset) return;
        if (end - r.read_offset > window_bytes) return error.OverWindow;
        const start = @max(offset, r.read_offset);
        const part = data[@intCast(start - offset)..];
        if (r.covered(start, end)) return;
        if (r.count == ranges_max and !r.touchesAny(start, end)) return error.TooFragmented;
        try r.reserve(allocator, @intCast(end - r.read_offset), window_bytes);
        @memcpy(r.buf[@intCast(start - r.read_offset)..][0..part.len], part);
        r.addRange(start, end);
    }

    fn covered(r: *const Reassembly, start: u64, end: u64) bool {
        for (r.ranges()) |g| if (g.start <= start and end <= g.end) return true;
        return false;
    }

    fn touchesAny(r: *const Reassembly, start: u64, end: u64) bool {
        for (r.ranges()) |g| if (start <= g.end and g.start <= end) return true;
        return false;
    }

    fn reserve(r: *Reassembly, allocator: Allocator, need: usize, window_bytes: usize) Allocator.Error!void {
        if (need <= r.buf.len) return;
        const cap = @min(window_bytes, @max(need, 2 * r.buf.len, capacity_min));
        assert(cap >= need);
        const off = std.mem.alignForward(usize, cap, ranges_offset_align);
        const mem = try allocator.alignedAlloc(u8, .of(Range), off + ranges_max * @sizeOf(Range));
        @memcpy(mem[0..r.buf.len], r.buf);
        @memcpy(room(mem[0..cap])[0..r.count], r.ranges());
        if (r.buf.len > 0) allocator.free(block(r.buf));
        r.buf = mem[0..cap];
    }

    /// Merges [start, end) into the sorted set (the caller checked there is room).
    fn addRange(r: *Reassembly, start: u64, end: u64) void {
        var merged: Range = .{ .start = start, .end = end };
        var out: [ranges_max + 1]Range = undefined;
        var n: usize = 0;
        var placed = false;
        for (r.ranges()) |g| {
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
            } else {
                merged = .{ .start = @min(g.start, merged.start), .end = @max(g.end, merged.end) };
            }
        }
        if (!placed) {
            out[n] = merged;
            n += 1;
        }
        assert(n <= ranges_max and r.buf.len > 0);
        @memcpy(room(r.buf)[0..n], out[0..n]);
        r.count = @intCast(n);
    }

    /// The bytes readable in order now.
    pub fn readable(r: *const Reassembly) []const u8 {
        if (r.count == 0 or r.ranges()[0].start != r.read_offset) return &.{};
        return r.buf[0..@intCast(r.ranges()[0].end - r.read_offset)];
    }

    /// The first `n` readable bytes were taken: the rest moves down; an empty buffer goes.
    pub fn consume(r: *Reassembly, allocator: Allocator, n: usize) void {
        assert(n <= r.readable().len);
        if (n == 0) return;
        const held: usize = @intCast(r.highest() - r.read_offset);
        std.mem.copyForwards(u8, r.buf[0 .. held - n], r.buf[n..held]);
        r.read_offset += n;
        const held_ranges = r.ranges();
        if (held_ranges[0].end == r.read_offset) {
            std.mem.copyForwards(Range, held_ranges[0 .. r.count - 1], held_ranges[1..r.count]);
            r.count -= 1;
        } else {
            held_ranges[0].start = r.read_offset;
        }
        if (r.count == 0) r.deinit(allocator);
    }
};

const testing = std.testing;

test "reassembly: every split of a message arrives in order, reversed, and duplicated" {
    const msg = "the quick brown fox jumps over the lazy dog";
    var split: usize = 1;
    while (split < msg.len) : (split += 1) {
        var r: Reassembly = .{};
        defer r.deinit(testing.allocator);
        try r.insert(testing.allocator, split, msg[split..], 64);
        try testing.expectEqual(@as(usize, 0), r.readable().len);
        try r.insert(testing.allocator, 0, msg[0..split], 64);
        try r.insert(testing.allocator, 0, msg[0 .. split / 2 + 1], 64); // duplicate
        try testing.expectEqualStrings(msg, r.readable());
        r.consume(testing.allocator, 3);
        try testing.expectEqualStrings(msg[3..], r.readable());
        r.consume(testing.allocator, msg.len - 3);
        try testing.expectEqual(@as(usize, 0), r.buf.len); // freed once all was read
        try testing.expectEqual(@as(u64, msg.len), r.read_offset);
    }
}

test "reassembly: the window bounds what may arrive (max, max+1)" {
    var r: Reassembly = .{};
    defer r.deinit(testing.allocator);
    try r.insert(testing.allocator, 0, "abcd", 8);
    try r.insert(testing.allocator, 7, "h", 8);
    try testing.expectError(error.OverWindow, r.insert(testing.allocator, 8, "i", 8));
    r.consume(testing.allocator, 4);
    try r.insert(testing.allocator, 8, "i", 8); // the window slid with the read
    try testing.expect(r.buf.len <= 8);
}

test "reassembly: more gaps than ranges_max is refused, filling one is not" {
    var r: Reassembly = .{};
    defer r.deinit(testing.allocator);
    var i: u64 = 0;
    while (i < ranges_max) : (i += 1) try r.insert(testing.allocator, 2 * i + 1, "x", 1024);
    try testing.expectError(error.TooFragmented, r.insert(testing.allocator, 100, "x", 1024));
    try r.insert(testing.allocator, 0, "y", 1024); // joins the first range
    try testing.expectEqualStrings("yx", r.readable());
}
