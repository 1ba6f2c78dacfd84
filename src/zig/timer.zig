//! Deadlines for connections, O(1) and allocation-free.
//!
//! Every timeout of one kind has the same length, so arming appends to the tail of a
//! FIFO and the list stays sorted by deadline: expiry only ever looks at the head.
//! Entries are intrusive (they live inside the connection), so arming, disarming and
//! expiring never allocate.
const std = @import("std");

pub const Entry = struct {
    prev: ?*Entry = null,
    next: ?*Entry = null,
    deadline_ms: u64 = 0,
    queue: ?*Queue = null,

    pub fn armed(self: *const Entry) bool {
        return self.queue != null;
    }

    pub fn disarm(self: *Entry) void {
        const q = self.queue orelse return;
        if (self.prev) |p| p.next = self.next else q.head = self.next;
        if (self.next) |n| n.prev = self.prev else q.tail = self.prev;
        self.prev = null;
        self.next = null;
        self.queue = null;
        q.len -= 1;
    }
};

pub const Queue = struct {
    head: ?*Entry = null,
    tail: ?*Entry = null,
    len: usize = 0,
    timeout_ms: u64,

    /// (Re)arms `entry` to expire timeout_ms after now_ms.
    pub fn arm(self: *Queue, entry: *Entry, now_ms: u64) void {
        entry.disarm();
        entry.deadline_ms = now_ms + self.timeout_ms;
        entry.queue = self;
        entry.prev = self.tail;
        entry.next = null;
        if (self.tail) |t| t.next = entry else self.head = entry;
        self.tail = entry;
        self.len += 1;
    }

    /// Removes and returns the first entry whose deadline has passed, if any.
    pub fn popExpired(self: *Queue, now_ms: u64) ?*Entry {
        const head = self.head orelse return null;
        if (head.deadline_ms > now_ms) return null;
        head.disarm();
        return head;
    }
};

test "queue expires in order and disarms in O(1)" {
    var q = Queue{ .timeout_ms = 100 };
    var a = Entry{};
    var b = Entry{};
    var c = Entry{};
    q.arm(&a, 0);
    q.arm(&b, 10);
    q.arm(&c, 20);
    b.disarm();
    try std.testing.expectEqual(@as(usize, 2), q.len);
    try std.testing.expect(q.popExpired(99) == null);
    try std.testing.expect(q.popExpired(100) == &a);
    try std.testing.expect(q.popExpired(119) == null);
    try std.testing.expect(q.popExpired(120) == &c);
    try std.testing.expect(q.popExpired(1000) == null);
    q.arm(&a, 0);
    q.arm(&a, 50); // re-arming moves it, never duplicates it
    try std.testing.expectEqual(@as(usize, 1), q.len);
    try std.testing.expect(!b.armed());
}
