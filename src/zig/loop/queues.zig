//! The scheduler's two queues: the ready ring (handles in the order they were scheduled)
//! and the timer heap (by time, then by the order of scheduling, so timers due at the
//! same time run first-come first-served). They hold strong references they never
//! dereference: the loop owns what goes in and comes out.
const std = @import("std");
const Object = @import("../python/capi.zig").Object;

const allocator = std.heap.c_allocator;
/// A queue that grew past this while busy shrinks back to it once empty.
const queue_keep = 1024;

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
        self.items[(self.head + self.len) % self.items.len] = o;
        self.len += 1;
        return true;
    }

    /// The caller owns the reference.
    pub fn pop(self: *Ring) ?*Object {
        if (self.len == 0) return null;
        const o = self.items[self.head];
        self.head = (self.head + 1) % self.items.len;
        self.len -= 1;
        if (self.len == 0) self.shrink();
        return o;
    }

    pub fn at(self: *const Ring, i: usize) *Object {
        return self.items[(self.head + i) % self.items.len];
    }

    pub fn shrink(self: *Ring) void {
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

    pub fn push(self: *Heap, t: Timer) bool {
        if (self.len == self.items.len) {
            const cap = @max(64, self.items.len * 2);
            const grown = allocator.alloc(Timer, cap) catch return false;
            @memcpy(grown[0..self.len], self.items[0..self.len]);
            if (self.items.len > 0) allocator.free(self.items);
            self.items = grown;
        }
        var i = self.len;
        self.items[i] = t;
        self.len += 1;
        while (i > 0) {
            const parent = (i - 1) / 2;
            if (!self.items[i].before(self.items[parent])) break;
            std.mem.swap(Timer, &self.items[i], &self.items[parent]);
            i = parent;
        }
        return true;
    }

    pub fn top(self: *const Heap) ?Timer {
        return if (self.len == 0) null else self.items[0];
    }

    pub fn pop(self: *Heap) Timer {
        std.debug.assert(self.len > 0);
        const t = self.items[0];
        self.len -= 1;
        if (self.len > 0) {
            self.items[0] = self.items[self.len];
            self.siftDown(0);
        } else if (self.items.len > queue_keep) {
            allocator.free(self.items);
            self.items = &.{};
        }
        return t;
    }

    pub fn siftDown(self: *Heap, start: usize) void {
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

    pub fn heapify(self: *Heap) void {
        var i = self.len / 2;
        while (i > 0) {
            i -= 1;
            self.siftDown(i);
        }
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
