//! io_uring's per-descriptor state (`os/io_uring.zig`): the slot, the table of slots by
//! descriptor, and the queues of descriptors over it (events waiting for `fill`, receives
//! waiting for a buffer).
const std = @import("std");

const allocator = std.heap.c_allocator;

/// The slot table grows and shrinks in steps of this many descriptors (16 KiB), not
/// doubled: an idle connection costs its 16-byte slot, and after a burst the table
/// goes back to the highest descriptor in use and one step more.
pub const slot_step = 1024;
/// The slot table's own pages: mremap grows it without a copy and shrinking unmaps the
/// tail at once, where malloc would keep an outgrown table's chunk resident in its heap.
const slot_allocator = std.heap.page_allocator;

/// The slots, indexed by descriptor.
pub const SlotTable = struct {
    slots: []Slot = &.{},
    /// One past the highest registered descriptor: the table shrinks down to it.
    top: usize = 0,

    pub fn deinit(t: *SlotTable) void {
        slot_allocator.free(t.slots);
        t.* = .{};
    }

    /// The slot at `fd`, the table grown to it; null when memory runs out.
    pub fn at(t: *SlotTable, fd: i32) ?*Slot {
        const i: usize = @intCast(fd);
        if (i >= t.slots.len) {
            const n = std.mem.alignForward(usize, i + 1, slot_step);
            const grown = slot_allocator.realloc(t.slots, n) catch return null;
            @memset(grown[t.slots.len..], .{});
            t.slots = grown;
        }
        return &t.slots[i];
    }

    /// The table back to the descriptors in use, and one step more, so a server whose
    /// connections hover about a step's edge does not remap every pass. At the end of
    /// `rearm`: the lists of delivered events that index it are empty then, and the
    /// queues' walks pass over an entry beyond the table.
    pub fn shrink(t: *SlotTable) void {
        const keep = std.mem.alignForward(usize, t.top, slot_step) + slot_step;
        if (t.slots.len <= keep) return;
        // Shrinking a mapping in place does not fail; if it did, the table stays as it is.
        t.slots = slot_allocator.realloc(t.slots, keep) catch return;
    }

    /// The slot at `fd` left the ring: the top comes down past the free slots under it.
    pub fn lowerTop(t: *SlotTable, fd: i32) void {
        if (@as(usize, @intCast(fd)) + 1 != t.top) return;
        var top = t.top - 1;
        while (top > 0 and !t.slots[top - 1].registered) top -= 1;
        t.top = top;
    }

    /// The slot of a registered descriptor.
    pub fn known(t: *SlotTable, fd: i32) ?*Slot {
        if (fd < 0 or @as(usize, @intCast(fd)) >= t.slots.len) return null;
        const s = &t.slots[@intCast(fd)];
        return if (s.registered) s else null;
    }
};

/// A slot's held-buffer list is empty.
pub const no_buf: u16 = 0xffff;

/// What the backend keeps per descriptor: 16 bytes, in a table indexed by descriptor
/// (the only per-connection memory io_uring adds on our side).
pub const Slot = packed struct(u128) {
    /// The connection's token (a pointer: user-space addresses fit 48 bits).
    token: u48 = 0,
    gen: u24 = 0,
    /// The held buffers, oldest first (linked through `segs[bid].next`).
    held_head: u16 = no_buf,
    held_tail: u16 = no_buf,
    /// errno of a failed receive, reported by the next `recv` once the held bytes are read.
    err: u8 = 0,
    registered: bool = false,
    want_read: bool = false,
    want_write: bool = false,
    recv_armed: bool = false,
    out_armed: bool = false,
    hup_armed: bool = false,
    eof: bool = false,
    queued_read: bool = false,
    queued_write: bool = false,
    queued_hup: bool = false,
    /// On the `starved` queue (its receive waits for a ring buffer). Kept through
    /// `forget`: the queue is walked, never searched, and its entry serves the next
    /// connection on the descriptor.
    is_starved: bool = false,
    /// On the `ready` queue (a `queued_*` event waits). Kept through `forget` likewise.
    on_ready: bool = false,
    /// Given a read event in this pass (on `delivered_in`): `rearm` reports what it
    /// leaves unread, so a `recv` that leaves bytes need not queue an event itself.
    read_delivered: bool = false,
    _: u3 = 0,
};

/// Descriptors waiting in order, each once: an array sized by what waits at once, not by
/// the connections (list links in every slot cost 8 bytes a connection), and freed once
/// emptied after a burst. The slot's own bit (`flag`) says whether it waits, so an entry
/// whose slot lost the bit (closed, or cut off when the table shrank) is passed over,
/// and a descriptor queued again while a stale entry of it waits is handed out once.
/// Short of memory for an entry, the bit alone stays set and `lost` has the next walk
/// scan the slot table for it: nothing queued is ever dropped.
pub fn FdQueue(comptime S: type, comptime flag: []const u8) type {
    return struct {
        const Self = @This();

        items: std.ArrayListUnmanaged(i32) = .{},
        head: usize = 0,
        lost: bool = false,
        /// Where the scan for lost entries goes on (it stops when the caller's batch is full).
        scan: usize = 0,

        /// An emptied queue keeps room for this many entries (4 KiB); more goes back.
        const keep = 1024;

        pub fn isEmpty(q: *const Self) bool {
            return q.head == q.items.items.len and !q.lost;
        }

        /// Queues `fd`, whose slot's bit the caller has just set.
        pub fn push(q: *Self, fd: i32) void {
            q.items.append(allocator, fd) catch {
                // The bit is set: the scan finds it.
                q.lost = true;
            };
        }

        /// The next descriptor whose slot has the bit (cleared here), or null.
        pub fn pop(q: *Self, slots: []S) ?i32 {
            while (q.head < q.items.items.len) {
                const fd = q.items.items[q.head];
                q.head += 1;
                if (q.head == q.items.items.len) q.reset();
                const i: usize = @intCast(fd);
                if (i < slots.len and @field(slots[i], flag)) {
                    @field(slots[i], flag) = false;
                    return fd;
                }
            }
            while (q.lost and q.scan < slots.len) {
                const i = q.scan;
                q.scan += 1;
                if (@field(slots[i], flag)) {
                    @field(slots[i], flag) = false;
                    return @intCast(i);
                }
            }
            q.lost = false;
            q.scan = 0;
            return null;
        }

        /// Emptied: the room a burst took goes back at once.
        fn reset(q: *Self) void {
            q.head = 0;
            if (q.items.capacity > keep) {
                q.items.clearAndFree(allocator);
            } else {
                q.items.clearRetainingCapacity();
            }
        }

        pub fn deinit(q: *Self) void {
            q.items.deinit(allocator);
        }
    };
}

test "FdQueue: in order, each once, stale entries passed over, a lost one found by a scan" {
    const Bit = struct { on: bool = false };
    var slots = [_]Bit{.{}} ** 8;
    var q: FdQueue(Bit, "on") = .{};
    defer q.deinit();
    for ([_]i32{ 5, 2, 7 }) |fd| {
        slots[@intCast(fd)].on = true;
        q.push(fd);
    }
    // 2 closed meanwhile (its bit gone), then queued again: handed out once, at its first place.
    slots[2].on = false;
    slots[2].on = true;
    q.push(2);
    // An entry beyond a table cut short is passed over.
    q.push(9);
    try std.testing.expectEqual(@as(?i32, 5), q.pop(&slots));
    try std.testing.expectEqual(@as(?i32, 2), q.pop(&slots));
    try std.testing.expectEqual(@as(?i32, 7), q.pop(&slots));
    try std.testing.expectEqual(@as(?i32, null), q.pop(&slots));
    try std.testing.expect(q.isEmpty());
    // As if an append had failed: the bit alone, found by the scan.
    slots[3].on = true;
    q.lost = true;
    try std.testing.expect(!q.isEmpty());
    try std.testing.expectEqual(@as(?i32, 3), q.pop(&slots));
    try std.testing.expectEqual(@as(?i32, null), q.pop(&slots));
    try std.testing.expect(q.isEmpty());
}
