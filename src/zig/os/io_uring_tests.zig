//! The io_uring backend's unit tests (`os/io_uring.zig`), on socketpairs and a real ring:
//! where events wait (slot bits, the ready list), what a closed or reused descriptor gets,
//! and the sends handed to the ring. Skipped where the kernel gives no io_uring.
const std = @import("std");
const linux = std.os.linux;
const sys = @import("sys.zig");
const io_uring = @import("io_uring.zig");
const Event = io_uring.Event;
const Slot = io_uring.Slot;
const Uring = io_uring.Uring;
const testing = std.testing;

fn socketPair() ![2]i32 {
    var fds: [2]i32 = undefined;
    const rc = linux.socketpair(linux.AF.UNIX, linux.SOCK.STREAM | linux.SOCK.NONBLOCK | linux.SOCK.CLOEXEC, 0, &fds);
    if (sys.E.init(rc) != .SUCCESS) return error.SocketPair;
    return fds;
}

/// Events waiting to be handed out: tokens and sends in the queue, and the bits of the
/// slots on the ready queue.
fn waitingEvents(u: *Uring) usize {
    var count = u.queue.items.len;
    for (u.ready.items.items[u.ready.head..]) |fd_| {
        const s = u.table.slots[@intCast(fd_)];
        if (!s.on_ready) continue;
        count += @as(usize, @intFromBool(s.queued_read)) + @intFromBool(s.queued_write) + @intFromBool(s.queued_hup);
    }
    return count;
}

/// Collects completions without handing their events out (`waitSent` hands out only
/// `sent` ones) until `want` events wait, or a second passes.
fn queueUntil(u: *Uring, want: usize) !void {
    var none_: [1]Event = undefined;
    var rounds: usize = 0;
    while (waitingEvents(u) < want) : (rounds += 1) {
        if (rounds == 1000) return error.Timeout;
        _ = u.waitSent(&none_);
        std.Thread.sleep(std.time.ns_per_ms);
    }
}

test "io_uring: a read, a write and a hang-up wait in the slot, with no room reserved per descriptor; a closed one's events leave" {
    const u = Uring.init(.{ .buffers = 16, .buffer_bytes = 4096 }) catch return error.SkipZigTest;
    defer u.deinit();
    const pairs = 8; // more than the token events the queue keeps room for (6)
    var fds: [pairs][2]i32 = undefined;
    var owners: [pairs]u8 = undefined;
    for (&fds, &owners) |*p, *o| {
        p.* = try socketPair();
        try testing.expect(u.register(p[0], @intFromPtr(o), true, true));
        try testing.expectEqual(@as(usize, 1), sys.writev(p[1], &.{.{ .base = "x", .len = 1 }}).ok);
    }
    defer for (fds[1..]) |p| u.close(p[0]);
    // Per descriptor the backend holds its slot alone, nothing in the queue.
    try testing.expectEqual(@as(usize, 16), @sizeOf(Slot));
    try testing.expect(u.queue.capacity < pairs);
    // Each: its byte (a read) and POLLOUT (a write).
    try queueUntil(u, 2 * pairs);
    // Reading stops (a poll for the hang-up instead) and the peers go: a hang-up each,
    // and the end of stream behind the byte adds nothing (one read waits already).
    for (fds) |p| {
        try testing.expect(u.update(p[0], false, true));
        sys.close(p[1]);
    }
    try queueUntil(u, 3 * pairs);
    try testing.expectEqual(@as(usize, 3 * pairs), waitingEvents(u));
    try testing.expectEqual(@as(usize, 0), u.queue.items.len);
    // A descriptor closed with events waiting takes them with it.
    const gone = fds[0][0];
    u.close(gone);
    try testing.expectEqual(@as(usize, 3 * (pairs - 1)), waitingEvents(u));
    // Handed out in small batches, one event a descriptor: a write and a hang-up each
    // (reading stopped), none for the closed one.
    var events: [4]Event = undefined;
    var writes: usize = 0;
    var hangups: usize = 0;
    var handed: usize = 0;
    while (u.hasBacklog()) {
        for (events[0..u.wait(&events)]) |e| {
            try testing.expect(e.token != @intFromPtr(&owners[0]));
            try testing.expect(e.writable and e.hangup and !e.readable);
            writes += @intFromBool(e.writable);
            hangups += @intFromBool(e.hangup);
            handed += 1;
        }
    }
    try testing.expectEqual(@as(usize, pairs - 1), handed);
    try testing.expectEqual(@as(usize, pairs - 1), writes);
    try testing.expectEqual(@as(usize, pairs - 1), hangups);
}

test "io_uring: a descriptor closed while its event waits, and its number taken again, gets only the new connection's event" {
    const u = Uring.init(.{ .buffers = 16, .buffer_bytes = 4096 }) catch return error.SkipZigTest;
    defer u.deinit();
    var old_owner: u8 = 0;
    var new_owner: u8 = 0;
    const a = try socketPair();
    try testing.expect(u.register(a[0], @intFromPtr(&old_owner), true, false));
    try testing.expectEqual(@as(usize, 1), sys.writev(a[1], &.{.{ .base = "x", .len = 1 }}).ok);
    try queueUntil(u, 1);
    const number = a[0];
    u.close(a[0]);
    sys.close(a[1]);
    // Drain the cancel and close the ring still does for the old descriptor.
    var events: [4]Event = undefined;
    for (0..20) |_| {
        _ = u.waitSent(&events);
        std.Thread.sleep(std.time.ns_per_ms);
    }
    const b = try socketPair();
    defer {
        u.close(b[0]);
        sys.close(b[1]);
    }
    if (b[0] != number) return error.SkipZigTest; // the kernel gave another number
    try testing.expect(u.register(b[0], @intFromPtr(&new_owner), true, false));
    try testing.expectEqual(@as(usize, 2), sys.writev(b[1], &.{.{ .base = "yz", .len = 2 }}).ok);
    try queueUntil(u, 1);
    var got: usize = 0;
    for (0..20) |_| {
        for (events[0..u.wait(&events)]) |e| {
            try testing.expectEqual(@intFromPtr(&new_owner), e.token);
            try testing.expect(e.readable);
            got += 1;
            var buf: [8]u8 = undefined;
            try testing.expectEqual(@as(usize, 2), u.recv(b[0], &buf).ok);
        }
        u.rearm();
        if (got > 0) break;
    }
    try testing.expectEqual(@as(usize, 1), got);
    try testing.expect(!u.hasBacklog());
}

/// Collects completions (handing nothing out) until `done` holds, or a second passes.
fn collectUntil(u: *Uring, comptime done: fn (*Uring) bool) !void {
    var none_: [1]Event = undefined;
    var rounds: usize = 0;
    while (!done(u)) : (rounds += 1) {
        if (rounds == 1000) return error.Timeout;
        _ = u.waitSent(&none_);
        std.Thread.sleep(std.time.ns_per_ms);
    }
}

fn heldBuffers(u: *Uring) usize {
    return @as(usize, u.buf_provided) - u.buffers_free;
}

fn openPairs(comptime n: usize) ![n][2]i32 {
    var fds: [n][2]i32 = undefined;
    for (&fds) |*p| p.* = try socketPair();
    return fds;
}

/// Each pair's first end through the ring (registered), its second directly.
fn closePairs(u: *Uring, fds: []const [2]i32) void {
    for (fds) |p| {
        u.close(p[0]);
        sys.close(p[1]);
    }
}

/// Twenty connections of a ring of 16 buffers get a byte each, nobody reading: 16 are held
/// and 4 wait; the end of the pass doubles the ring and arms their receives again, and
/// all 20 are held.
fn burstOfTwenty(u: *Uring, fds: []const [2]i32, owners: []u8) !void {
    std.debug.assert(fds.len == 20 and owners.len == 20);
    for (fds, owners) |p, *o| {
        try testing.expect(u.register(p[0], @intFromPtr(o), true, false));
        try testing.expectEqual(@as(usize, 1), sys.writev(p[1], &.{.{ .base = "x", .len = 1 }}).ok);
    }
    try collectUntil(u, struct {
        fn f(r: *Uring) bool {
            return heldBuffers(r) == 16 and r.buffer_waits == 4;
        }
    }.f);
    u.rearm();
    try testing.expectEqual(@as(u16, 32), u.buf_provided);
    try collectUntil(u, struct {
        fn f(r: *Uring) bool {
            return heldBuffers(r) == 20;
        }
    }.f);
}

test "io_uring: the buffer ring starts with 16 buffers, doubles when a receive finds it empty, and stops at its bound" {
    const u = Uring.init(.{ .buffers = 32, .buffer_bytes = 512 }) catch return error.SkipZigTest;
    defer u.deinit();
    try testing.expectEqual(@as(u16, io_uring.buffers_start), u.buf_provided);
    try testing.expectEqual(@as(u32, 16), u.buffers_free);
    const pairs = 40;
    const fds = try openPairs(pairs);
    defer closePairs(u, &fds);
    var owners: [pairs]u8 = undefined;
    // A receive armed while the ring is empty ends at once with ENOBUFS, bytes or not:
    // the other twenty are registered once the ring has room.
    try burstOfTwenty(u, fds[0..20], owners[0..20]);
    // Read back, every buffer is in the ring again.
    var buf: [8]u8 = undefined;
    for (fds[0..20]) |p| try testing.expectEqual(@as(usize, 1), u.recv(p[0], &buf).ok);
    try testing.expectEqual(@as(u32, 32), u.buffers_free);
    u.rearm();
    for (fds[20..], owners[20..]) |p, *o| try testing.expect(u.register(p[0], @intFromPtr(o), true, false));
    // Forty bytes at its bound: 32 held, 8 wait, and the ring stays at 32.
    for (fds) |p| try testing.expectEqual(@as(usize, 1), sys.writev(p[1], &.{.{ .base = "y", .len = 1 }}).ok);
    try collectUntil(u, struct {
        fn f(r: *Uring) bool {
            return heldBuffers(r) == 32 and r.buffer_waits == 12;
        }
    }.f);
    u.rearm();
    try testing.expectEqual(@as(u16, 32), u.buf_provided);
    // Those that waited get their bytes once others are read.
    for (fds) |p| _ = u.recv(p[0], &buf);
    u.rearm();
    try collectUntil(u, struct {
        fn f(r: *Uring) bool {
            return heldBuffers(r) == 8;
        }
    }.f);
    var got: usize = 0;
    for (fds) |p| switch (u.recv(p[0], &buf)) {
        .ok => |n| got += n,
        .err => |e| try testing.expectEqual(sys.E.AGAIN, e),
    };
    try testing.expectEqual(@as(usize, 8), got);
    try testing.expectEqual(@as(u32, 32), u.buffers_free);
}

test "io_uring: bytes a connection leaves while handling its read event are reported again once, at the pass's end" {
    const u = Uring.init(.{ .buffers = 16, .buffer_bytes = 4096 }) catch return error.SkipZigTest;
    defer u.deinit();
    var owner: u8 = 0;
    const p = try socketPair();
    defer {
        u.close(p[0]);
        sys.close(p[1]);
    }
    try testing.expect(u.register(p[0], @intFromPtr(&owner), true, false));
    // A TLS record as OpenSSL reads it: its 5-byte header, then its body.
    try testing.expectEqual(@as(usize, 12), sys.writev(p[1], &.{.{ .base = "HEADERbodyXY", .len = 12 }}).ok);
    try queueUntil(u, 1);
    var events: [4]Event = undefined;
    try testing.expectEqual(@as(usize, 1), u.wait(&events));
    try testing.expect(events[0].readable);
    var buf: [16]u8 = undefined;
    try testing.expectEqual(@as(usize, 5), u.recv(p[0], buf[0..5]).ok);
    // Bytes left mid-handling queue nothing: the event would be stale once the handler
    // takes the rest, and a stale event costs the loop a wake-up for nothing.
    try testing.expect(!u.hasBacklog());
    try testing.expectEqual(@as(usize, 7), u.recv(p[0], &buf).ok);
    u.rearm();
    try testing.expect(!u.hasBacklog());
    // Bytes the handler does leave are reported again by the pass's end, once, and
    // again at every pass's end while they wait (level-triggered).
    try testing.expectEqual(@as(usize, 4), sys.writev(p[1], &.{.{ .base = "more", .len = 4 }}).ok);
    try queueUntil(u, 1);
    try testing.expectEqual(@as(usize, 1), u.wait(&events));
    try testing.expectEqual(@as(usize, 2), u.recv(p[0], buf[0..2]).ok);
    try testing.expect(!u.hasBacklog());
    u.rearm();
    try testing.expectEqual(@as(usize, 1), waitingEvents(u));
    try testing.expectEqual(@as(usize, 1), u.wait(&events));
    try testing.expect(events[0].readable and events[0].token == @intFromPtr(&owner));
    u.rearm();
    try testing.expectEqual(@as(usize, 1), waitingEvents(u));
    try testing.expectEqual(@as(usize, 1), u.wait(&events));
    try testing.expectEqual(@as(usize, 2), u.recv(p[0], &buf).ok);
    u.rearm();
    try testing.expect(!u.hasBacklog());
    // Read after the pass's end (the app asked for more), what a read leaves is queued
    // at once: no `rearm` is due to bring the loop back for it.
    try testing.expectEqual(@as(usize, 3), sys.writev(p[1], &.{.{ .base = "end", .len = 3 }}).ok);
    try queueUntil(u, 1);
    try testing.expectEqual(@as(usize, 1), u.wait(&events));
    u.rearm();
    try testing.expectEqual(@as(usize, 1), u.recv(p[0], buf[0..1]).ok);
    try testing.expectEqual(@as(usize, 1), waitingEvents(u));
}

/// `fd_` copied to the lowest free descriptor at or above `at` (a connection accepted
/// when `at` others were open).
fn dupAt(fd_: i32, at: i32) !i32 {
    const rc = linux.fcntl(fd_, linux.F.DUPFD, @intCast(at));
    if (sys.E.init(rc) != .SUCCESS) return error.SkipZigTest; // the descriptor limit is lower
    return @intCast(rc);
}

test "io_uring: the slot table follows the highest descriptor up, and down at the pass's end" {
    const u = Uring.init(.{ .buffers = 16, .buffer_bytes = 4096 }) catch return error.SkipZigTest;
    defer u.deinit();
    const step = io_uring.slot_step;
    var low_owner: u8 = 0;
    var high_owner: u8 = 0;
    const a = try socketPair();
    defer sys.close(a[1]);
    try testing.expect(u.register(a[0], @intFromPtr(&low_owner), true, false));
    defer u.close(a[0]);
    try testing.expectEqual(@as(usize, step), u.table.slots.len);
    // The last descriptor of the second step, then the first of the third: one step more.
    const edge = try dupAt(a[0], 2 * step - 1);
    try testing.expect(u.register(edge, @intFromPtr(&high_owner), true, false));
    try testing.expectEqual(@as(usize, 2 * step), u.table.slots.len);
    const high = try dupAt(a[0], 2 * step);
    try testing.expect(u.register(high, @intFromPtr(&high_owner), true, false));
    try testing.expectEqual(@as(usize, 3 * step), u.table.slots.len);
    try testing.expectEqual(@as(usize, 2 * step + 1), u.table.top);
    // The high one goes: the top comes down to the edge, and the table keeps one step
    // beyond it (the step the edge is in, and one more).
    u.close(high);
    try testing.expectEqual(@as(usize, 2 * step), u.table.top);
    u.rearm();
    try testing.expectEqual(@as(usize, 3 * step), u.table.slots.len);
    // The edge goes: the top falls past the free slots to the low one.
    u.close(edge);
    try testing.expectEqual(@as(usize, @intCast(a[0] + 1)), u.table.top);
    u.rearm();
    try testing.expectEqual(@as(usize, 2 * step), u.table.slots.len);
}

test "io_uring: an event beyond the shrunk table is passed over; the number's next gets its own" {
    const u = Uring.init(.{ .buffers = 16, .buffer_bytes = 4096 }) catch return error.SkipZigTest;
    defer u.deinit();
    const step = io_uring.slot_step;
    var old_owner: u8 = 0;
    var new_owner: u8 = 0;
    const a = try socketPair();
    defer {
        sys.close(a[0]);
        sys.close(a[1]);
    }
    const high = try dupAt(a[0], 3 * step);
    try testing.expect(u.register(high, @intFromPtr(&old_owner), true, false));
    try testing.expectEqual(@as(usize, 1), sys.writev(a[1], &.{.{ .base = "x", .len = 1 }}).ok);
    try queueUntil(u, 1);
    // Closed with its event queued: the entry stays in the ready queue, the table shrinks
    // under it.
    u.unregister(high);
    // Its cancel goes in now: the old receive, still armed, would take the next byte.
    _ = u.submit();
    u.rearm();
    try testing.expectEqual(@as(usize, step), u.table.slots.len);
    try testing.expect(u.hasBacklog());
    // The number again, for a new connection with a byte of its own: one event, its.
    try testing.expect(u.register(high, @intFromPtr(&new_owner), true, false));
    try testing.expectEqual(@as(usize, 4 * step), u.table.slots.len);
    try testing.expectEqual(@as(usize, 1), sys.writev(a[1], &.{.{ .base = "y", .len = 1 }}).ok);
    var events: [4]Event = undefined;
    var got: usize = 0;
    for (0..100) |_| {
        for (events[0..u.wait(&events)]) |e| {
            try testing.expectEqual(@intFromPtr(&new_owner), e.token);
            got += 1;
            var buf: [8]u8 = undefined;
            try testing.expectEqual(@as(usize, 1), u.recv(high, &buf).ok);
        }
        u.rearm();
        if (got > 0) break;
        std.Thread.sleep(std.time.ns_per_ms);
    }
    try testing.expectEqual(@as(usize, 1), got);
    u.close(high);
    u.rearm();
    try testing.expect(!u.hasBacklog());
    try testing.expectEqual(@as(usize, step), u.table.slots.len);
}

test "io_uring: a slot whose queue entry could not be stored is found by a scan" {
    const u = Uring.init(.{ .buffers = 16, .buffer_bytes = 4096 }) catch return error.SkipZigTest;
    defer u.deinit();
    var owners: [3]u8 = undefined;
    var fds: [3][2]i32 = undefined;
    for (&fds, &owners) |*p, *o| {
        p.* = try socketPair();
        try testing.expect(u.register(p[0], @intFromPtr(o), true, false));
        try testing.expectEqual(@as(usize, 1), sys.writev(p[1], &.{.{ .base = "x", .len = 1 }}).ok);
    }
    defer for (fds) |p| {
        u.close(p[0]);
        sys.close(p[1]);
    };
    try queueUntil(u, 3);
    // As if every append had failed: the slots keep their bits, the queue its flag alone.
    u.ready.items.clearRetainingCapacity();
    u.ready.head = 0;
    u.ready.lost = true;
    try testing.expect(u.hasBacklog());
    var events: [2]Event = undefined;
    var seen: [3]bool = .{ false, false, false };
    var batches: usize = 0;
    while (u.hasBacklog()) : (batches += 1) {
        for (events[0..u.wait(&events)]) |e| {
            try testing.expect(e.readable);
            for (&owners, &seen) |*o, *s| if (e.token == @intFromPtr(o)) {
                try testing.expect(!s.*);
                s.* = true;
            };
        }
    }
    try testing.expectEqual([3]bool{ true, true, true }, seen);
    try testing.expectEqual(@as(usize, 2), batches);
}

/// Pages of the buffer mapping resident now (mincore), from buffer `from` on.
fn residentPages(u: *Uring, from: usize) !usize {
    const start = from * u.buf_bytes;
    const pages = (u.mem.len - start) / std.heap.page_size_min;
    var vec: [64]u8 = undefined;
    if (pages > vec.len) return error.SkipZigTest;
    const rc = linux.mincore(u.mem[start..].ptr, u.mem.len - start, &vec);
    if (sys.E.init(rc) != .SUCCESS) return error.SkipZigTest;
    var n: usize = 0;
    for (vec[0..pages]) |v| n += v & 1;
    return n;
}

test "io_uring: a ring grown for a burst shrinks back, its pages freed, after a quiet second" {
    const u = Uring.init(.{ .buffers = 64, .buffer_bytes = 4096 }) catch return error.SkipZigTest;
    defer u.deinit();
    const pairs = 20;
    const fds = try openPairs(pairs);
    defer closePairs(u, &fds);
    var owners: [pairs]u8 = undefined;
    // The burst, then read.
    try burstOfTwenty(u, &fds, &owners);
    var buf: [8]u8 = undefined;
    for (fds) |p| try testing.expectEqual(@as(usize, 1), u.recv(p[0], &buf).ok);
    u.rearm();
    try testing.expectEqual(@as(usize, 20), try residentPages(u, 0));
    // The second of the burst held 20 at once: kept.
    try testing.expect(!u.trim());
    // A quiet second, but a connection holds a buffer: kept.
    const y: []const std.posix.iovec_const = &.{.{ .base = "y", .len = 1 }};
    try testing.expectEqual(@as(usize, 1), sys.writev(fds[0][1], y).ok);
    try collectUntil(u, struct {
        fn f(r: *Uring) bool {
            return heldBuffers(r) == 1;
        }
    }.f);
    try testing.expect(!u.trim());
    try testing.expectEqual(@as(u16, 32), u.buf_provided);
    try testing.expectEqual(@as(usize, 1), u.recv(fds[0][0], &buf).ok);
    // Quiet (one held at most, half the first 16 allowed), nothing held: 16 buffers, no page.
    try testing.expect(u.trim());
    try testing.expectEqual(@as(u16, io_uring.buffers_start), u.buf_provided);
    try testing.expectEqual(@as(u32, io_uring.buffers_start), u.buffers_free);
    try testing.expectEqual(@as(usize, 0), try residentPages(u, 0));
    try testing.expect(!u.trim());
    // The receives armed before go on with the ring registered again.
    const z: []const std.posix.iovec_const = &.{.{ .base = "z", .len = 1 }};
    for (fds[0..4]) |p| try testing.expectEqual(@as(usize, 1), sys.writev(p[1], z).ok);
    try collectUntil(u, struct {
        fn f(r: *Uring) bool {
            return heldBuffers(r) == 4;
        }
    }.f);
    for (fds[0..4]) |p| {
        try testing.expectEqual(@as(usize, 1), u.recv(p[0], &buf).ok);
        try testing.expectEqual(@as(u8, 'z'), buf[0]);
    }
    try testing.expectEqual(@as(u64, 4), u.buffer_waits);
}
