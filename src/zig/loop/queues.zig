//! The scheduler's two queues: the ready ring (handles in the order they were scheduled)
//! and the timer heap (by time, then by the order of scheduling, so timers due at the
//! same time run first-come first-served). They hold strong references they never
//! dereference: the loop owns what goes in and comes out.
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const Object = @import("../python/capi.zig").Object;

const allocator = std.heap.c_allocator;
/// A queue that grew past this while busy shrinks back to it once empty.
const queue_keep = 1024;
/// O(n) walks over a whole queue: in Debug builds (and so the unit tests) only.
const slow_checks = builtin.mode == .Debug;

/// The ready queue: a ring of strong references, in the order they were scheduled.
pub const Ring = struct {
    items: []*Object = &.{},
    head: usize = 0,
    len: usize = 0,

    pub fn push(self: *Ring, o: *Object) bool {
        if (self.len == self.items.len) {
            const cap = @max(64, self.items.len * 2);
            const grown = allocator.alloc(*Object, cap) catch return false;
            for (0..self.len) |i| grown[i] = self.items[(self.head + i) % self.items.len];
            if (self.items.len > 0) allocator.free(self.items);
            self.items = grown;
            self.head = 0;
        }
        assert(self.len < self.items.len);
        self.items[(self.head + self.len) % self.items.len] = o;
        self.len += 1;
        assert(self.head < self.items.len);
        return true;
    }

    /// The caller owns the reference.
    pub fn pop(self: *Ring) ?*Object {
        if (self.len == 0) return null;
        assert(self.head < self.items.len and self.len <= self.items.len);
        const o = self.items[self.head];
        self.head = (self.head + 1) % self.items.len;
        self.len -= 1;
        if (self.len == 0) self.shrink();
        return o;
    }

    pub fn at(self: *const Ring, i: usize) *Object {
        assert(i < self.len);
        return self.items[(self.head + i) % self.items.len];
    }

    /// The pass's rule (asyncio's): runs the handles queued when it is called, in
    /// order, each given to `run` with its reference; what `run` queues waits for the
    /// next call. False as soon as `run` says so (the rest stay queued).
    pub fn drainQueued(self: *Ring, ctx: anytype, comptime run: fn (@TypeOf(ctx), *Object) bool) bool {
        const todo = self.len;
        for (0..todo) |_| {
            // Only code that empties the queue under the pass (closing the loop from a
            // callback) leaves fewer than `todo`.
            const o = self.pop() orelse break;
            if (!run(ctx, o)) return false;
        }
        return true;
    }

    fn shrink(self: *Ring) void {
        assert(self.len == 0);
        self.head = 0;
        if (self.items.len <= queue_keep) return;
        allocator.free(self.items);
        self.items = &.{};
    }
};

pub const Timer = struct {
    when: f64,
    seq: u64,
    obj: *Object,

    pub fn before(a: Timer, b: Timer) bool {
        return a.when < b.when or (a.when == b.when and a.seq < b.seq);
    }
};

/// The timer heap: a binary min-heap of (when, order scheduled), strong references.
pub const Heap = struct {
    items: []Timer = &.{},
    len: usize = 0,

    /// `t.when` is never NaN (the loop refuses it as a time): NaN has no place in the order.
    pub fn push(self: *Heap, t: Timer) bool {
        assert(!std.math.isNan(t.when));
        if (self.len == self.items.len) {
            const cap = @max(64, self.items.len * 2);
            const grown = allocator.alloc(Timer, cap) catch return false;
            @memcpy(grown[0..self.len], self.items[0..self.len]);
            if (self.items.len > 0) allocator.free(self.items);
            self.items = grown;
        }
        assert(self.len < self.items.len);
        var i = self.len;
        self.items[i] = t;
        self.len += 1;
        while (i > 0) {
            const parent = (i - 1) / 2;
            if (!self.items[i].before(self.items[parent])) break;
            std.mem.swap(Timer, &self.items[i], &self.items[parent]);
            i = parent;
        }
        // The top is still the first due: the new entry, or one before it.
        assert(!t.before(self.items[0]));
        return true;
    }

    pub fn top(self: *const Heap) ?Timer {
        return if (self.len == 0) null else self.items[0];
    }

    pub fn pop(self: *Heap) Timer {
        assert(self.len > 0);
        const t = self.items[0];
        self.len -= 1;
        if (self.len > 0) {
            self.items[0] = self.items[self.len];
            self.siftDown(0);
            // What was taken was the first due: nothing left comes before it.
            assert(!self.items[0].before(t));
        } else if (self.items.len > queue_keep) {
            allocator.free(self.items);
            self.items = &.{};
        }
        return t;
    }

    /// The top entry if it is due before `end` (asyncio's rule: one due at `end` waits
    /// for the next pass).
    pub fn popDue(self: *Heap, end: f64) ?Timer {
        assert(!std.math.isNan(end));
        const t = self.top() orelse return null;
        if (t.when >= end) return null;
        return self.pop();
    }

    fn siftDown(self: *Heap, start: usize) void {
        assert(start < self.len);
        var i = start;
        while (true) {
            const l = 2 * i + 1;
            if (l >= self.len) return;
            var m = l;
            if (l + 1 < self.len and self.items[l + 1].before(self.items[l])) m = l + 1;
            if (!self.items[m].before(self.items[i])) return;
            std.mem.swap(Timer, &self.items[i], &self.items[m]);
            i = m;
        }
    }

    fn heapify(self: *Heap) void {
        assert(self.len <= self.items.len);
        var i = self.len / 2;
        while (i > 0) {
            i -= 1;
            self.siftDown(i);
        }
        if (slow_checks) self.verify();
    }

    /// Takes out every entry `drop` picks and hands them back (the caller frees the
    /// slice), the heap already whole again: releasing them may run code (finalizers)
    /// that pushes and pops timers. `drop` must leave the heap alone (the loop's reads a
    /// flag: a native handle's, or an asyncio handle's slot). On an error (from
    /// `drop`, or no memory for the slice) every entry is still in the heap, in order.
    pub fn removeIf(
        self: *Heap,
        ctx: anytype,
        comptime drop: fn (@TypeOf(ctx), *Object) error{Failed}!bool,
    ) error{ Failed, OutOfMemory }![]*Object {
        const n = self.len;
        var kept: usize = 0;
        // Partitioned by swaps: `items[0..n]` holds the same entries at every step, so
        // a failure only has the order to rebuild.
        for (0..n) |i| {
            const dropped = drop(ctx, self.items[i].obj) catch |err| {
                self.heapify();
                return err;
            };
            if (!dropped) {
                std.mem.swap(Timer, &self.items[kept], &self.items[i]);
                kept += 1;
            }
        }
        const out = allocator.alloc(*Object, n - kept) catch {
            self.heapify();
            return error.OutOfMemory;
        };
        for (out, self.items[kept..n]) |*o, t| o.* = t.obj;
        self.len = kept;
        self.heapify();
        return out;
    }

    /// The heap property, entry by entry (O(n): behind `slow_checks` or in tests).
    pub fn verify(self: *const Heap) void {
        assert(self.len <= self.items.len);
        for (1..@max(self.len, 1)) |i| assert(!self.items[i].before(self.items[(i - 1) / 2]));
    }
};

// ----------------------------------------------------------------------------------
// Tests (no interpreter needed: the items are never dereferenced).

fn fake(i: usize) *Object {
    return @ptrFromInt((i + 1) * 16);
}

test "the ready ring is first in, first out across growth and wrap-around" {
    var r = Ring{};
    defer if (r.items.len > 0) allocator.free(r.items);
    var next_in: usize = 0;
    var next_out: usize = 0;
    // Interleaved pushes and pops move the head around the ring while it grows.
    for (0..50) |round| {
        for (0..round * 7 + 3) |_| {
            try std.testing.expect(r.push(fake(next_in)));
            next_in += 1;
        }
        for (0..round * 5 + 1) |_| {
            try std.testing.expectEqual(fake(next_out), r.pop().?);
            next_out += 1;
        }
        try std.testing.expectEqual(next_in - next_out, r.len);
        if (r.len > 0) try std.testing.expectEqual(fake(next_out), r.at(0));
    }
    while (r.pop()) |o| {
        try std.testing.expectEqual(fake(next_out), o);
        next_out += 1;
    }
    try std.testing.expectEqual(next_in, next_out);
    // Empty again after growing past `queue_keep`: the storage went back.
    try std.testing.expectEqual(@as(usize, 0), r.items.len);
}

test "the timer heap pops by time, then in the order timers were scheduled" {
    var h = Heap{};
    defer if (h.items.len > 0) allocator.free(h.items);
    var prng = std.Random.DefaultPrng.init(0x5eed);
    const random = prng.random();
    const n = 5000;
    for (0..n) |i| {
        // Few distinct times: many ties, which must come out in scheduling order.
        const when: f64 = @floatFromInt(random.uintLessThan(u32, 50));
        try std.testing.expect(h.push(.{ .when = when, .seq = i, .obj = fake(i) }));
    }
    var last = Timer{ .when = -1, .seq = 0, .obj = fake(0) };
    for (0..n) |_| {
        const t = h.pop();
        try std.testing.expect(t.when > last.when or (t.when == last.when and t.seq > last.seq));
        last = t;
    }
    try std.testing.expectEqual(@as(usize, 0), h.len);
}

test "heapify restores the order after entries are dropped in place" {
    var h = Heap{};
    defer if (h.items.len > 0) allocator.free(h.items);
    for (0..300) |i| {
        const when: f64 = @floatFromInt((i * 7919) % 1000);
        try std.testing.expect(h.push(.{ .when = when, .seq = i, .obj = fake(i) }));
    }
    // What the sweep of cancelled timers does: keep every third entry, then heapify.
    var kept: usize = 0;
    for (0..h.len) |i| {
        if (h.items[i].seq % 3 == 0) {
            h.items[kept] = h.items[i];
            kept += 1;
        }
    }
    h.len = kept;
    h.heapify();
    var last: f64 = -1;
    var count: usize = 0;
    while (h.top()) |_| {
        const t = h.pop();
        try std.testing.expect(t.when >= last and t.seq % 3 == 0);
        last = t.when;
        count += 1;
    }
    try std.testing.expectEqual(@as(usize, 100), count);
}

test "the ready ring's pass runs what was queued before it; what callbacks queue waits, across growth and wrap-around" {
    var r = Ring{};
    defer if (r.items.len > 0) allocator.free(r.items);
    const Pass = struct {
        ring: *Ring,
        ran: std.ArrayListUnmanaged(usize) = .{},
        next: usize,
        fn run(self: *@This(), o: *Object) bool {
            const i = @intFromPtr(o) / 16 - 1;
            self.ran.append(std.testing.allocator, i) catch return false;
            // Every callback schedules two more (call_soon from a callback): the
            // ring grows and wraps while the pass drains it.
            for (0..2) |_| {
                if (!self.ring.push(fake(self.next))) return false;
                self.next += 1;
            }
            return true;
        }
    };
    // Start with the head off zero, so the first growth copies a wrapped ring.
    for (0..40) |i| try std.testing.expect(r.push(fake(i)));
    for (0..40) |i| try std.testing.expectEqual(fake(i), r.pop().?);
    for (0..50) |i| try std.testing.expect(r.push(fake(i)));
    var pass = Pass{ .ring = &r, .next = 50 };
    defer pass.ran.deinit(std.testing.allocator);
    var expected_first: usize = 0;
    for (0..5) |_| {
        const queued = r.len;
        pass.ran.clearRetainingCapacity();
        try std.testing.expect(r.drainQueued(&pass, Pass.run));
        // Exactly the handles queued before the pass, in order; the ones they queued wait.
        try std.testing.expectEqual(queued, pass.ran.items.len);
        for (pass.ran.items, 0..) |v, k| try std.testing.expectEqual(expected_first + k, v);
        try std.testing.expectEqual(2 * queued, r.len);
        expected_first += queued;
    }
    try std.testing.expect(r.items.len > 64);
}

test "a pass stops at the first callback that fails, the rest stay queued in order" {
    var r = Ring{};
    defer if (r.items.len > 0) allocator.free(r.items);
    for (0..10) |i| try std.testing.expect(r.push(fake(i)));
    const Stop = struct {
        fn run(at: usize, o: *Object) bool {
            return o != fake(at);
        }
    };
    try std.testing.expect(!r.drainQueued(@as(usize, 3), Stop.run));
    try std.testing.expectEqual(@as(usize, 6), r.len);
    for (0..6) |k| try std.testing.expectEqual(fake(4 + k), r.at(k));
    while (r.pop()) |_| {}
    // Storage up to `queue_keep` stays for the next burst.
    try std.testing.expectEqual(@as(usize, 64), r.items.len);
}

test "equal deadlines come out first come first served, infinite ones too" {
    var h = Heap{};
    defer if (h.items.len > 0) allocator.free(h.items);
    const inf = std.math.inf(f64);
    // Equal keys in three groups, pushed interleaved: each group keeps its order.
    const whens = [_]f64{ 5, -inf, inf, 0 };
    for (0..3000) |i| try std.testing.expect(h.push(.{ .when = whens[i % 4], .seq = i, .obj = fake(i) }));
    h.verify();
    var last = Timer{ .when = -inf, .seq = 0, .obj = fake(0) };
    var first = true;
    for (0..3000) |_| {
        const t = h.pop();
        if (!first) try std.testing.expect(last.before(t));
        first = false;
        last = t;
    }
    try std.testing.expectEqual(@as(usize, 0), h.len);
}

test "a timer due exactly at the end of the pass waits for the next one" {
    var h = Heap{};
    defer if (h.items.len > 0) allocator.free(h.items);
    const inf = std.math.inf(f64);
    try std.testing.expect(h.push(.{ .when = 2.0, .seq = 1, .obj = fake(1) }));
    try std.testing.expect(h.push(.{ .when = 1.0, .seq = 2, .obj = fake(2) }));
    try std.testing.expect(h.push(.{ .when = -inf, .seq = 3, .obj = fake(3) }));
    try std.testing.expect(h.push(.{ .when = 1.0, .seq = 4, .obj = fake(4) }));
    try std.testing.expect(h.push(.{ .when = inf, .seq = 5, .obj = fake(5) }));
    try std.testing.expect(h.popDue(-inf) == null); // nothing is due before -inf
    try std.testing.expectEqual(@as(u64, 3), h.popDue(1.0).?.seq);
    try std.testing.expect(h.popDue(1.0) == null); // due at 1.0: not before it
    try std.testing.expectEqual(@as(u64, 2), h.popDue(2.0).?.seq);
    try std.testing.expectEqual(@as(u64, 4), h.popDue(2.0).?.seq);
    try std.testing.expect(h.popDue(2.0) == null);
    try std.testing.expectEqual(@as(u64, 1), h.popDue(std.math.floatMax(f64)).?.seq);
    try std.testing.expect(h.popDue(std.math.floatMax(f64)) == null); // inf never comes
    try std.testing.expectEqual(@as(usize, 1), h.len);
}

test "removeIf hands back the dropped with the heap whole again, so pushes while they are released stay" {
    var h = Heap{};
    defer if (h.items.len > 0) allocator.free(h.items);
    const n = 1000;
    for (0..n) |i| try std.testing.expect(h.push(.{ .when = @floatFromInt((i * 7919) % 97), .seq = i, .obj = fake(i) }));
    const Cancelled = struct {
        fn drop(_: void, o: *Object) error{Failed}!bool {
            return (@intFromPtr(o) / 16 - 1) % 3 != 0;
        }
    };
    const dropped = try h.removeIf({}, Cancelled.drop);
    defer allocator.free(dropped);
    try std.testing.expectEqual(@as(usize, 666), dropped.len);
    try std.testing.expectEqual(@as(usize, 334), h.len);
    h.verify();
    // Releasing each one runs a finalizer that schedules a timer (call_at from __del__).
    for (dropped, 0..) |o, k| {
        try std.testing.expect((@intFromPtr(o) / 16 - 1) % 3 != 0);
        try std.testing.expect(h.push(.{ .when = 50.5, .seq = n + k, .obj = fake(n + k) }));
    }
    h.verify();
    var count: usize = 0;
    var last = Timer{ .when = -1, .seq = 0, .obj = fake(0) };
    while (h.top()) |_| {
        const t = h.pop();
        const i = @intFromPtr(t.obj) / 16 - 1;
        try std.testing.expect(i >= n or i % 3 == 0);
        try std.testing.expect(count == 0 or last.before(t));
        last = t;
        count += 1;
    }
    try std.testing.expectEqual(@as(usize, 334 + 666), count);
}

test "removeIf failing part-way leaves every entry in the heap, in order" {
    var h = Heap{};
    defer if (h.items.len > 0) allocator.free(h.items);
    for (0..200) |i| try std.testing.expect(h.push(.{ .when = @floatFromInt(i % 13), .seq = i, .obj = fake(i) }));
    const FailAt = struct {
        seen: usize = 0,
        fn drop(self: *@This(), o: *Object) error{Failed}!bool {
            self.seen += 1;
            if (self.seen == 150) return error.Failed; // reading `_cancelled` raised
            return (@intFromPtr(o) / 16) % 2 == 0;
        }
    };
    var f = FailAt{};
    try std.testing.expectError(error.Failed, h.removeIf(&f, FailAt.drop));
    try std.testing.expectEqual(@as(usize, 200), h.len);
    h.verify();
    var seen = [_]bool{false} ** 200;
    while (h.top()) |_| {
        const i = @intFromPtr(h.pop().obj) / 16 - 1;
        try std.testing.expect(!seen[i]); // none twice, none lost
        seen[i] = true;
    }
    for (seen) |s| try std.testing.expect(s);
}
