//! A connection's output: a queue of segments, in write order, that any stream on the
//! connection can feed.
//!
//! A segment is either bytes copied into the connection's output buffer (response
//! heads, framing, small bodies, WebSocket frames) or bytes borrowed from their owner
//! (a large response body, kept alive by a reference the queue holds until the bytes
//! are written). Each segment may name a counter (`credit`) that holds how many of its
//! stream's bytes are still queued: that is the per-stream backpressure a protocol
//! reads (HTTP/1.1 has one stream at a time; HTTP/2 interleaves many). A stream must
//! outlive its queued bytes (its counter is read until they are written).
//!
//! Sans-IO: the queue never touches a socket. The connection asks it for an iovec
//! (`fillIov`) and tells it how much was written (`advance`).
const std = @import("std");
const pool_mod = @import("../os/buffer_pool.zig");

/// Segments queued at once; past this a writer must wait for the queue to drain.
pub const segments_max = 8;

pub const Error = error{ OutOfMemory, QueueFull };

/// One stream's share of the queue: bytes still queued (its backpressure) and bytes written.
pub const Account = struct {
    queued: usize = 0,
    sent: u64 = 0,
};

const Kind = enum(u8) { copied, borrowed };

const Segment = struct {
    kind: Kind,
    /// Copied: offset into the buffer. Borrowed: unused.
    off: u32 = 0,
    len: u32,
    /// Borrowed: the bytes (advanced as they are written).
    ptr: [*]const u8 = undefined,
    /// Borrowed: what keeps the bytes alive; released once they are written or dropped.
    owner: ?*anyopaque = null,
    /// The stream's count of queued bytes, decremented as these are written.
    credit: ?*Account = null,
};

/// Gives a pooled buffer (or null); takes one back.
pub const BufferSource = struct {
    ctx: *anyopaque,
    acquire: *const fn (ctx: *anyopaque) ?*pool_mod.Buffer,
    release: *const fn (ctx: *anyopaque, b: *pool_mod.Buffer) void,
};

pub const Output = struct {
    /// A pooled buffer, or a larger heap one (a response head past 16 KiB, WebSocket frames).
    buf: ?[*]u8 = null,
    cap: u32 = 0,
    /// Copied bytes live in buf[start..end]; staged bytes follow at buf[end..end+staged].
    start: u32 = 0,
    end: u32 = 0,
    /// Bytes written past `end` by `stage` and not yet committed (an HTTP/1.1 head that
    /// waits for its first body message to choose its framing).
    staged: u32 = 0,
    segs: [segments_max]Segment = undefined,
    seg_head: u8 = 0,
    seg_len: u8 = 0,
    /// Every queued byte.
    total: usize = 0,

    pub fn len(self: *const Output) usize {
        return self.total;
    }

    pub fn isEmpty(self: *const Output) bool {
        return self.total == 0;
    }

    /// Whether another segment fits (a borrowed body needs one, plus framing after it).
    pub fn segmentsFree(self: *const Output) usize {
        return segments_max - self.seg_len;
    }

    fn at(self: *Output, i: usize) *Segment {
        std.debug.assert(i < self.seg_len);
        return &self.segs[(self.seg_head + i) % segments_max];
    }

    fn last(self: *Output) ?*Segment {
        if (self.seg_len == 0) return null;
        return self.at(self.seg_len - 1);
    }

    fn push(self: *Output, seg: Segment) Error!void {
        if (self.seg_len == segments_max) return error.QueueFull;
        self.segs[(self.seg_head + self.seg_len) % segments_max] = seg;
        self.seg_len += 1;
        self.total += seg.len;
        if (seg.credit) |c| c.queued += seg.len;
    }

    /// Room for `n` more copied bytes after the staged ones: the buffer is acquired,
    /// compacted, or grown (up to `max_bytes`) as needed.
    fn room(self: *Output, src: BufferSource, n: usize, max_bytes: usize) Error!void {
        if (self.buf == null) {
            const b = src.acquire(src.ctx) orelse return error.OutOfMemory;
            self.buf = b;
            self.cap = pool_mod.buffer_bytes;
            self.start = 0;
            self.end = 0;
        }
        const used = @as(usize, self.end) + self.staged;
        if (n <= self.cap - used) return;
        self.compact();
        const need = @as(usize, self.end) + self.staged + n;
        if (need <= self.cap) return;
        if (need > max_bytes or need > std.math.maxInt(u32)) return error.OutOfMemory;
        const size = @min(@max(need, @as(usize, self.cap) * 2), max_bytes, std.math.maxInt(u32));
        const heap = std.heap.c_allocator.alloc(u8, size) catch return error.OutOfMemory;
        const keep = self.end + self.staged;
        @memcpy(heap[0..keep], self.buf.?[0..keep]);
        const end = self.end;
        self.freeBuffer(src);
        self.buf = heap.ptr;
        self.cap = @intCast(size);
        self.end = end;
    }

    /// Moves the live copied bytes (and staged ones) to the front of the buffer.
    fn compact(self: *Output) void {
        if (self.start == 0) return;
        const shift = self.start;
        const buf = self.buf.?;
        const keep = self.end + self.staged - shift;
        std.mem.copyForwards(u8, buf[0..keep], buf[shift..][0..keep]);
        for (0..self.seg_len) |i| {
            const s = self.at(i);
            if (s.kind == .copied) s.off -= shift;
        }
        self.start = 0;
        self.end -= shift;
    }

    /// Copies `bytes` to the end of the queue. Buffer growth stops at `max_bytes`.
    pub fn append(self: *Output, src: BufferSource, bytes: []const u8, credit: ?*Account, max_bytes: usize) Error!void {
        std.debug.assert(self.staged == 0);
        if (bytes.len == 0) return;
        // A new segment is needed unless the last one is copied, ends here, and is the same stream's.
        const extend = if (self.last()) |l| l.kind == .copied and l.off + l.len == self.end and l.credit == credit else false;
        if (!extend and self.seg_len == segments_max) return error.QueueFull;
        try self.room(src, bytes.len, max_bytes);
        const off = self.end;
        @memcpy(self.buf.?[off..][0..bytes.len], bytes);
        self.end += @intCast(bytes.len);
        if (extend) {
            const l = self.last().?;
            l.len += @intCast(bytes.len);
            self.total += bytes.len;
            if (credit) |c| c.queued += bytes.len;
        } else {
            self.push(.{ .kind = .copied, .off = off, .len = @intCast(bytes.len), .credit = credit }) catch unreachable;
        }
    }

    /// Queues `bytes` by reference. The caller has already retained `owner` for the queue;
    /// it is released (with `release`) once the bytes are written or dropped.
    pub fn borrow(self: *Output, bytes: []const u8, owner: ?*anyopaque, credit: ?*Account) Error!void {
        std.debug.assert(self.staged == 0);
        if (bytes.len > std.math.maxInt(u32)) return error.OutOfMemory;
        if (bytes.len == 0) return;
        try self.push(.{ .kind = .borrowed, .len = @intCast(bytes.len), .ptr = bytes.ptr, .owner = owner, .credit = credit });
    }

    /// The free space after the queue for writing bytes in place (then `commitStaged`):
    /// at least `n` bytes, growing the buffer up to `max_bytes`. Earlier staged bytes stay.
    pub fn stage(self: *Output, src: BufferSource, n: usize, max_bytes: usize) Error![]u8 {
        try self.room(src, n, max_bytes);
        return self.buf.?[self.end + self.staged .. self.cap];
    }

    /// `n` more bytes were written at the start of the slice `stage` returned.
    pub fn addStaged(self: *Output, n: usize) void {
        std.debug.assert(@as(usize, self.end) + self.staged + n <= self.cap);
        self.staged += @intCast(n);
    }

    /// The staged bytes join the queue.
    pub fn commitStaged(self: *Output, credit: ?*Account) Error!void {
        const n = self.staged;
        if (n == 0) return;
        // Like `append`: the last segment grows when it is copied, ends here, and is the same stream's.
        const extend = if (self.last()) |l| l.kind == .copied and l.off + l.len == self.end and l.credit == credit else false;
        if (!extend and self.seg_len == segments_max) return error.QueueFull;
        const off = self.end;
        self.staged = 0;
        self.end += n;
        if (extend) {
            const l = self.last().?;
            l.len += n;
            self.total += n;
            if (credit) |c| c.queued += n;
        } else {
            self.push(.{ .kind = .copied, .off = off, .len = n, .credit = credit }) catch unreachable;
        }
    }

    pub fn dropStaged(self: *Output) void {
        self.staged = 0;
    }

    /// The queued bytes as an iovec (at most `iov.len` segments); returns how many entries.
    pub fn fillIov(self: *Output, iov: []std.posix.iovec_const) usize {
        const n = @min(iov.len, self.seg_len);
        for (0..n) |i| {
            const s = self.at(i);
            const base: [*]const u8 = if (s.kind == .copied) self.buf.? + s.off else s.ptr;
            iov[i] = .{ .base = base, .len = s.len };
        }
        return n;
    }

    /// `written` bytes left the queue (they were the first ones). Owners of finished
    /// borrowed segments are released; streams' counters go down.
    pub fn advance(self: *Output, src: BufferSource, written: usize, release: *const fn (*anyopaque) void) void {
        std.debug.assert(written <= self.total);
        var left = written;
        self.total -= written;
        while (left > 0) {
            const s = self.at(0);
            const step: u32 = @intCast(@min(left, s.len));
            left -= step;
            s.len -= step;
            if (s.credit) |c| {
                c.queued -= step;
                c.sent += step;
            }
            switch (s.kind) {
                .copied => {
                    s.off += step;
                    self.start = s.off;
                },
                .borrowed => s.ptr += step,
            }
            if (s.len == 0) self.popFront(release);
        }
        self.afterPop(src);
    }

    fn popFront(self: *Output, release: *const fn (*anyopaque) void) void {
        const s = self.at(0);
        if (s.kind == .borrowed) if (s.owner) |o| release(o);
        self.seg_head = @intCast((self.seg_head + 1) % segments_max);
        self.seg_len -= 1;
    }

    /// With no copied bytes left, the buffer starts over; with nothing at all (staged
    /// included), it goes back to the pool.
    fn afterPop(self: *Output, src: BufferSource) void {
        var copied_left = false;
        for (0..self.seg_len) |i| {
            if (self.at(i).kind == .copied) copied_left = true;
        }
        if (copied_left) return;
        if (self.staged == 0) return self.freeBuffer(src);
        // Staged bytes move to the front.
        const buf = self.buf.?;
        std.mem.copyForwards(u8, buf[0..self.staged], buf[self.end..][0..self.staged]);
        self.start = 0;
        self.end = 0;
    }

    /// Everything queued is dropped (the connection closed): owners released, counters cleared.
    pub fn drop(self: *Output, src: BufferSource, release: *const fn (*anyopaque) void) void {
        while (self.seg_len > 0) {
            const s = self.at(0);
            if (s.credit) |c| c.queued -= s.len;
            s.len = 0;
            self.popFront(release);
        }
        self.total = 0;
        self.staged = 0;
        self.freeBuffer(src);
    }

    fn freeBuffer(self: *Output, src: BufferSource) void {
        const b = self.buf orelse return;
        if (self.cap == pool_mod.buffer_bytes) {
            src.release(src.ctx, @ptrCast(@alignCast(b)));
        } else {
            std.heap.c_allocator.free(b[0..self.cap]);
        }
        self.buf = null;
        self.cap = 0;
        self.start = 0;
        self.end = 0;
    }
};

// ---- tests ------------------------------------------------------------------------------

const testing = std.testing;

const TestPool = struct {
    pool: pool_mod.Pool = .{},
    released: usize = 0,

    fn acquire(ctx: *anyopaque) ?*pool_mod.Buffer {
        const self: *TestPool = @ptrCast(@alignCast(ctx));
        return self.pool.acquire();
    }
    fn release(ctx: *anyopaque, b: *pool_mod.Buffer) void {
        const self: *TestPool = @ptrCast(@alignCast(ctx));
        self.pool.release(b);
    }
    fn source(self: *TestPool) BufferSource {
        return .{ .ctx = self, .acquire = acquire, .release = release };
    }
};

var owners_released: usize = 0;
fn countRelease(_: *anyopaque) void {
    owners_released += 1;
}

fn drain(out: *Output, src: BufferSource, into: *std.ArrayListUnmanaged(u8), step_max: usize) !void {
    while (!out.isEmpty()) {
        var iov: [segments_max]std.posix.iovec_const = undefined;
        const n = out.fillIov(&iov);
        var budget = step_max;
        var written: usize = 0;
        for (iov[0..n]) |v| {
            const take = @min(budget, v.len);
            try into.appendSlice(testing.allocator, v.base[0..take]);
            written += take;
            budget -= take;
            if (budget == 0) break;
        }
        out.advance(src, written, countRelease);
    }
}

test "segments keep their order across copies, borrows and partial writes" {
    var tp = TestPool{};
    defer tp.pool.deinit();
    const src = tp.source();
    var out = Output{};
    var credit: Account = .{};
    var owner: u8 = 0;
    owners_released = 0;
    try out.append(src, "HEAD\r\n", &credit, 1 << 20);
    try out.append(src, "5\r\n", &credit, 1 << 20);
    try out.borrow("hello", &owner, &credit);
    try out.append(src, "\r\n", &credit, 1 << 20);
    try out.append(src, "0\r\n\r\n", &credit, 1 << 20);
    try testing.expectEqual(@as(usize, 21), out.len());
    try testing.expectEqual(@as(usize, 21), credit.queued);
    // Copies after a borrow start a new segment; adjacent copies share one.
    try testing.expectEqual(@as(u8, 3), out.seg_len);
    var got: std.ArrayListUnmanaged(u8) = .{};
    defer got.deinit(testing.allocator);
    try drain(&out, src, &got, 3);
    try testing.expectEqualStrings("HEAD\r\n5\r\nhello\r\n0\r\n\r\n", got.items);
    try testing.expectEqual(@as(usize, 0), credit.queued);
    try testing.expectEqual(@as(u64, 21), credit.sent);
    try testing.expectEqual(@as(usize, 1), owners_released);
    // Empty again: the buffer went back to the pool.
    try testing.expect(out.buf == null);
}

test "two streams' counters are kept apart" {
    var tp = TestPool{};
    defer tp.pool.deinit();
    const src = tp.source();
    var out = Output{};
    var a: Account = .{};
    var b: Account = .{};
    try out.append(src, "aaaa", &a, 1 << 20);
    try out.append(src, "bb", &b, 1 << 20);
    try out.append(src, "aa", &a, 1 << 20);
    try testing.expectEqual(@as(usize, 6), a.queued);
    try testing.expectEqual(@as(usize, 2), b.queued);
    out.advance(src, 5, countRelease);
    try testing.expectEqual(@as(usize, 2), a.queued);
    try testing.expectEqual(@as(usize, 1), b.queued);
    out.advance(src, 3, countRelease);
    try testing.expectEqual(@as(usize, 0), a.queued);
    try testing.expectEqual(@as(u64, 6), a.sent);
    try testing.expectEqual(@as(usize, 0), b.queued);
}

test "a full queue refuses a new segment instead of dropping bytes" {
    var tp = TestPool{};
    defer tp.pool.deinit();
    const src = tp.source();
    var out = Output{};
    var owner: u8 = 0;
    owners_released = 0;
    for (0..segments_max) |_| try out.borrow("x", &owner, null);
    try testing.expectError(error.QueueFull, out.append(src, "y", null, 1 << 20));
    try testing.expectError(error.QueueFull, out.borrow("z", &owner, null));
    out.drop(src, countRelease);
    try testing.expectEqual(@as(usize, segments_max), owners_released);
    try testing.expect(out.isEmpty());
}

test "staged bytes wait past the queue and survive compaction" {
    var tp = TestPool{};
    defer tp.pool.deinit();
    const src = tp.source();
    var out = Output{};
    try out.append(src, "previous", null, 1 << 20);
    out.advance(src, 3, countRelease);
    const s = try out.stage(src, 4, 1 << 20);
    @memcpy(s[0..4], "HTTP");
    out.addStaged(4);
    const more = try out.stage(src, pool_mod.buffer_bytes - 9, 1 << 20);
    @memcpy(more[0..2], "/1");
    out.addStaged(2);
    try testing.expectEqual(@as(u32, 0), out.start);
    try out.commitStaged(null);
    var got: std.ArrayListUnmanaged(u8) = .{};
    defer got.deinit(testing.allocator);
    try drain(&out, src, &got, 100);
    try testing.expectEqualStrings("viousHTTP/1", got.items);
}

test "copies grow the buffer on the heap up to the bound" {
    var tp = TestPool{};
    defer tp.pool.deinit();
    const src = tp.source();
    var out = Output{};
    const big = try testing.allocator.alloc(u8, pool_mod.buffer_bytes + 100);
    defer testing.allocator.free(big);
    @memset(big, 'x');
    try testing.expectError(error.OutOfMemory, out.append(src, big, null, pool_mod.buffer_bytes));
    try out.append(src, "frame header", null, 1 << 20);
    try out.append(src, big, null, 1 << 20);
    try testing.expect(out.cap > pool_mod.buffer_bytes);
    var got: std.ArrayListUnmanaged(u8) = .{};
    defer got.deinit(testing.allocator);
    try drain(&out, src, &got, 5000);
    try testing.expectEqualStrings("frame header", got.items[0..12]);
    try testing.expectEqualSlices(u8, big, got.items[12..]);
    out.drop(src, countRelease);
    try testing.expect(out.buf == null);
}

test "staged commits after copies of the same stream share their segment" {
    var tp = TestPool{};
    defer tp.pool.deinit();
    const src = tp.source();
    var out = Output{};
    var a: Account = .{};
    var b: Account = .{};
    // Many frames written in place (HTTP/2 file DATA) take one segment, not one each.
    for (0..20) |i| {
        const space = try out.stage(src, 4, 1 << 20);
        @memcpy(space[0..4], "abcd");
        out.addStaged(if (i % 2 == 0) 4 else 2);
        try out.commitStaged(&a);
    }
    try out.append(src, "xy", &a, 1 << 20);
    try testing.expectEqual(@as(u8, 1), out.seg_len);
    try testing.expectEqual(@as(usize, 62), a.queued);
    // Another stream's bytes start their own segment.
    const space = try out.stage(src, 1, 1 << 20);
    space[0] = 'z';
    out.addStaged(1);
    try out.commitStaged(&b);
    try testing.expectEqual(@as(u8, 2), out.seg_len);
    var got: std.ArrayListUnmanaged(u8) = .{};
    defer got.deinit(testing.allocator);
    try drain(&out, src, &got, 7);
    try testing.expectEqual(@as(usize, 63), got.items.len);
    try testing.expectEqualStrings("abcdabab", got.items[0..8]);
    try testing.expectEqualStrings("xyz", got.items[60..]);
    try testing.expectEqual(@as(usize, 0), a.queued + b.queued);
}
