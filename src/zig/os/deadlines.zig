//! Deadlines for connections, O(1) and allocation-free.
//!
//! Every timeout of one kind has the same length, so arming appends to the tail of a
//! FIFO and the list stays sorted by deadline: expiry only ever looks at the head.
//! Entries are intrusive (they live inside the connection), so arming, disarming and
//! expiring never allocate. An entry is 24 bytes: the list is circular through an
//! anchor inside the queue, so unlinking needs no pointer back to the queue, and the
//! queue's id shares a word with the deadline and with 16 bits that belong to the
//! entry's owner (`stamp`).
const std = @import("std");

pub const Entry = struct {
    prev: ?*Entry = null,
    next: ?*Entry = null,
    at: At = .{},

    const At = packed struct(u64) {
        /// On the server's millisecond clock (CLOCK_MONOTONIC); 44 bits are 557 years.
        deadline_ms: u44 = 0,
        /// The `id` of the queue holding the entry; 0 while disarmed.
        queue: u4 = 0,
        /// Not the queue's: arming, expiring and disarming keep it. A connection keeps its
        /// coarse accept time here (`--timeout-connection`, transport/connection_age.zig): the
        /// word had bits to spare, and every byte of an idle connection counts.
        stamp: u16 = 0,
    };

    pub fn stamp(self: *const Entry) u16 {
        return self.at.stamp;
    }

    pub fn setStamp(self: *Entry, value: u16) void {
        self.at.stamp = value;
    }

    pub fn armed(self: *const Entry) bool {
        return self.at.queue != 0;
    }

    /// Whether `q` holds this entry.
    pub fn in(self: *const Entry, q: *const Queue) bool {
        return self.at.queue == q.id;
    }

    pub fn disarm(self: *Entry) void {
        if (!self.armed()) return;
        self.prev.?.next = self.next;
        self.next.?.prev = self.prev;
        self.* = .{ .at = .{ .stamp = self.at.stamp } };
    }
};

pub const Queue = struct {
    /// Head is `anchor.next`, tail `anchor.prev`; linked to itself on first use, in
    /// place (the queue must not move once used: it lives inside the heap-allocated server).
    anchor: Entry = .{},
    timeout_ms: u64,
    /// Non-zero, below 16 (`At.queue`), and distinct among the queues an entry can be armed on.
    id: u8,

    fn ring(self: *Queue) *Entry {
        if (self.anchor.next == null) {
            self.anchor.next = &self.anchor;
            self.anchor.prev = &self.anchor;
        }
        return &self.anchor;
    }

    /// (Re)arms `entry` to expire timeout_ms after now_ms.
    pub fn arm(self: *Queue, entry: *Entry, now_ms: u64) void {
        std.debug.assert(self.id != 0 and self.id <= std.math.maxInt(u4));
        entry.disarm();
        const anchor = self.ring();
        const tail = anchor.prev.?;
        const deadline = @min(now_ms +| self.timeout_ms, std.math.maxInt(u44));
        entry.* = .{ .prev = tail, .next = anchor, .at = .{ .deadline_ms = @intCast(deadline), .queue = @intCast(self.id), .stamp = entry.at.stamp } };
        tail.next = entry;
        anchor.prev = entry;
    }

    /// (Re)arms `entry` to expire at `deadline_ms`, or at the last entry's deadline if that
    /// is later: the queue stays in order (expiry looks only at its head), so an entry may
    /// expire late, never early. For a queue whose entries each have their own deadline
    /// that mostly come in order (`--timeout-connection`: the accept time plus the limit,
    /// armed when an HTTP/2 session starts).
    pub fn armAt(self: *Queue, entry: *Entry, deadline_ms: u64) void {
        std.debug.assert(self.id != 0 and self.id <= std.math.maxInt(u4));
        entry.disarm();
        const anchor = self.ring();
        const tail = anchor.prev.?;
        var deadline = @min(deadline_ms, std.math.maxInt(u44));
        if (tail != anchor) deadline = @max(deadline, tail.at.deadline_ms);
        entry.* = .{ .prev = tail, .next = anchor, .at = .{ .deadline_ms = @intCast(deadline), .queue = @intCast(self.id), .stamp = entry.at.stamp } };
        tail.next = entry;
        anchor.prev = entry;
    }

    /// Removes and returns the first entry whose deadline has passed, if any.
    pub fn popExpired(self: *Queue, now_ms: u64) ?*Entry {
        const anchor = self.ring();
        const head = anchor.next.?;
        if (head == anchor or head.at.deadline_ms > now_ms) return null;
        std.debug.assert(head.in(self)); // a copied queue would hand out its original's anchor
        head.disarm();
        return head;
    }

    /// Entries armed (walks the list: for tests and debugging).
    pub fn count(self: *Queue) usize {
        const anchor = self.ring();
        var n: usize = 0;
        var it = anchor.next.?;
        while (it != anchor) : (it = it.next.?) n += 1;
        return n;
    }
};

test "queue expires in order and disarms in O(1)" {
    var q = Queue{ .timeout_ms = 100, .id = 1 };
    var a = Entry{};
    var b = Entry{};
    var c = Entry{};
    q.arm(&a, 0);
    q.arm(&b, 10);
    q.arm(&c, 20);
    b.disarm();
    try std.testing.expectEqual(@as(usize, 2), q.count());
    try std.testing.expect(q.popExpired(99) == null);
    try std.testing.expect(q.popExpired(100) == &a);
    try std.testing.expect(q.popExpired(119) == null);
    try std.testing.expect(q.popExpired(120) == &c);
    try std.testing.expect(q.popExpired(1000) == null);
    q.arm(&a, 0);
    q.arm(&a, 50); // re-arming moves it, never duplicates it
    try std.testing.expectEqual(@as(usize, 1), q.count());
    try std.testing.expect(!b.armed() and a.in(&q));
    try std.testing.expectEqual(@as(usize, 24), @sizeOf(Entry));
}

test "armAt: an entry's own deadline, never before the last one's, so the queue stays in order" {
    var q = Queue{ .timeout_ms = 0, .id = 9 };
    var a = Entry{};
    var b = Entry{};
    var c = Entry{};
    a.setStamp(7);
    q.armAt(&a, 500);
    q.armAt(&b, 300); // earlier than a's: it waits for a's (late, never early)
    q.armAt(&c, 900);
    try std.testing.expectEqual(@as(u16, 7), a.stamp());
    try std.testing.expect(q.popExpired(499) == null);
    try std.testing.expect(q.popExpired(500) == &a);
    try std.testing.expect(q.popExpired(500) == &b);
    try std.testing.expect(q.popExpired(899) == null);
    try std.testing.expect(q.popExpired(900) == &c);
    try std.testing.expectEqual(@as(u16, 7), a.stamp());
    q.armAt(&a, std.math.maxInt(u64)); // saturates at the field's bound
    try std.testing.expect(q.popExpired(std.math.maxInt(u43)) == null);
    a.disarm();
    try std.testing.expectEqual(@as(usize, 0), q.count());
}

test "an entry moves between queues and a huge timeout saturates" {
    var short = Queue{ .timeout_ms = 10, .id = 1 };
    var forever = Queue{ .timeout_ms = std.math.maxInt(u64), .id = 2 };
    var e = Entry{};
    short.arm(&e, 5);
    forever.arm(&e, 5);
    try std.testing.expect(e.in(&forever) and !e.in(&short));
    try std.testing.expectEqual(@as(usize, 0), short.count());
    try std.testing.expect(forever.popExpired(std.math.maxInt(u32)) == null);
    e.disarm();
    e.disarm(); // twice is harmless
    try std.testing.expectEqual(@as(usize, 0), forever.count());
    try std.testing.expect(forever.popExpired(std.math.maxInt(u64)) == null);
}

test "the owner's stamp survives arming, expiring and disarming" {
    var a = Queue{ .timeout_ms = 10, .id = 15 };
    var b = Queue{ .timeout_ms = std.math.maxInt(u64), .id = 1 };
    var e = Entry{};
    e.setStamp(0xfffe);
    a.arm(&e, 0);
    b.arm(&e, std.math.maxInt(u44)); // saturates at the largest deadline
    try std.testing.expect(e.in(&b) and !e.in(&a));
    try std.testing.expectEqual(@as(u16, 0xfffe), e.stamp());
    e.disarm();
    try std.testing.expectEqual(@as(u16, 0xfffe), e.stamp());
    a.arm(&e, 5);
    try std.testing.expect(a.popExpired(15) == &e);
    try std.testing.expect(!e.armed());
    try std.testing.expectEqual(@as(u16, 0xfffe), e.stamp());
}
