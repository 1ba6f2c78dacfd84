//! Open connections per client address, for `--limit-connections-per-ip`.
//!
//! An open-addressing table (linear probing, backward-shift deletion) of address ->
//! count. An entry lives only while its address has a connection open, so the table
//! holds at most as many entries as there are open connections: its size follows the
//! peak of distinct addresses connected at once (growing by doubling, shrinking when a
//! quarter full), never the number of addresses ever seen. The hash is keyed with
//! random bits at start, so a client cannot choose addresses that collide.
const std = @import("std");
const linux = std.os.linux;
const Peer = @import("../transport/peer.zig").Peer;

/// An address as IPv6 bytes (IPv4 as `::ffff:a.b.c.d`).
pub const Key = [16]u8;

const Entry = struct {
    key: Key = undefined,
    /// 0: the slot is empty.
    count: u32 = 0,
};

const capacity_min = 64;
/// The table is at most 1/`fill_ratio_max` full, so every probe ends at an empty slot soon.
const fill_ratio_max = 2;
/// It halves once the halved table would be less than 1/`shrink_ratio` full: well below
/// the growth point, so a count going up and down by one does not resize every time.
const shrink_ratio = 4;

/// The key of an IP address (`version` 4: its bytes are `addr[0..4]`, the rest is
/// ignored; 6: all 16): IPv6 bytes as they are, IPv4 as `::ffff:a.b.c.d`, so an IPv4
/// client and its IPv4-mapped IPv6 spelling are one client. `--limit-request-rate`
/// keys its buckets with it too.
pub fn ipKey(version: u8, addr: [16]u8) Key {
    std.debug.assert(version == 4 or version == 6);
    if (version == 6) return addr;
    var k = [_]u8{0} ** 10 ++ [_]u8{ 0xff, 0xff } ++ [_]u8{0} ** 4;
    @memcpy(k[12..16], addr[0..4]);
    return k;
}

/// The key of a peer; null for peers without an IP address (Unix sockets).
pub fn keyOf(peer: *const Peer) ?Key {
    return switch (peer.family) {
        linux.AF.INET => ipKey(4, peer.addr),
        linux.AF.INET6 => ipKey(6, peer.addr),
        else => null,
    };
}

pub const Table = struct {
    allocator: std.mem.Allocator,
    entries: []Entry = &.{},
    used: usize = 0,
    seed: u64,

    pub fn init(allocator: std.mem.Allocator) Table {
        var seed: u64 = undefined;
        std.crypto.random.bytes(std.mem.asBytes(&seed));
        return .{ .allocator = allocator, .seed = seed };
    }

    pub fn deinit(self: *Table) void {
        self.allocator.free(self.entries);
        self.* = .{ .allocator = self.allocator, .seed = self.seed };
    }

    fn home(self: *const Table, key: *const Key, len: usize) usize {
        return @intCast(std.hash.Wyhash.hash(self.seed, key) & (len - 1));
    }

    fn find(self: *const Table, key: *const Key) ?usize {
        if (self.entries.len == 0) return null;
        const mask = self.entries.len - 1;
        var i = self.home(key, self.entries.len);
        while (self.entries[i].count != 0) : (i = (i + 1) & mask) {
            if (std.mem.eql(u8, &self.entries[i].key, key)) return i;
        }
        return null;
    }

    /// Counts one more connection from `key`, unless it already has `limit` open: then
    /// false, and nothing changes. OutOfMemory when the table could not grow.
    pub fn acquire(self: *Table, key: Key, limit: u32) error{OutOfMemory}!bool {
        std.debug.assert(limit > 0);
        if (self.find(&key)) |i| {
            if (self.entries[i].count >= limit) return false;
            self.entries[i].count += 1;
            return true;
        }
        if ((self.used + 1) * fill_ratio_max > self.entries.len) try self.resize(@max(capacity_min, self.entries.len * 2));
        self.insert(key, 1);
        self.used += 1;
        return true;
    }

    /// One connection from `key` closed. Every `release` matches an `acquire` that
    /// returned true: a key the table does not hold is the engine's own bug.
    pub fn release(self: *Table, key: Key) void {
        const i = self.find(&key) orelse unreachable;
        self.entries[i].count -= 1;
        if (self.entries[i].count > 0) return;
        self.remove(i);
        self.used -= 1;
        self.shrinkIfSparse();
    }

    fn shrinkIfSparse(self: *Table) void {
        if (self.entries.len <= capacity_min) return;
        const half = self.entries.len / 2;
        if (self.used * shrink_ratio >= half) return;
        self.resize(half) catch |err| switch (err) {
            // Shrinking only saves memory: the larger table stays, still correct.
            error.OutOfMemory => return,
        };
    }

    /// Connections open from `key`.
    pub fn count(self: *const Table, key: Key) u32 {
        const i = self.find(&key) orelse return 0;
        return self.entries[i].count;
    }

    fn insert(self: *Table, key: Key, n: u32) void {
        const mask = self.entries.len - 1;
        var i = self.home(&key, self.entries.len);
        while (self.entries[i].count != 0) i = (i + 1) & mask;
        self.entries[i] = .{ .key = key, .count = n };
    }

    /// Backward-shift deletion: the entries after `i` that probed past it move back, so
    /// no lookup ever stops early at the hole.
    fn remove(self: *Table, start: usize) void {
        const mask = self.entries.len - 1;
        var hole = start;
        var j = (start + 1) & mask;
        while (self.entries[j].count != 0) : (j = (j + 1) & mask) {
            const want = self.home(&self.entries[j].key, self.entries.len);
            // Whether `want` lies cyclically in (hole, j]: then the entry stays.
            const stays = if (hole <= j) (want > hole and want <= j) else (want > hole or want <= j);
            if (!stays) {
                self.entries[hole] = self.entries[j];
                hole = j;
            }
        }
        self.entries[hole] = .{};
    }

    fn resize(self: *Table, len: usize) error{OutOfMemory}!void {
        std.debug.assert(std.math.isPowerOfTwo(len));
        const old = self.entries;
        const fresh = try self.allocator.alloc(Entry, len);
        @memset(fresh, .{});
        self.entries = fresh;
        for (old) |e| {
            if (e.count != 0) self.insert(e.key, e.count);
        }
        self.allocator.free(old);
    }
};

// ---- tests ---------------------------------------------------------------------------

const testing = std.testing;

fn keyN(n: u32) Key {
    var k = [_]u8{0} ** 16;
    std.mem.writeInt(u32, k[12..16], n, .big);
    return k;
}

test "per-ip: the limit holds per address, exactly at N" {
    var t = Table.init(testing.allocator);
    defer t.deinit();
    for (0..3) |_| try testing.expect(try t.acquire(keyN(1), 3));
    try testing.expect(!try t.acquire(keyN(1), 3));
    try testing.expect(try t.acquire(keyN(2), 3)); // another address is not affected
    t.release(keyN(1));
    try testing.expect(try t.acquire(keyN(1), 3));
    try testing.expectEqual(@as(u32, 3), t.count(keyN(1)));
    for (0..3) |_| t.release(keyN(1));
    t.release(keyN(2));
    try testing.expectEqual(@as(usize, 0), t.used);
    try testing.expectEqual(@as(u32, 0), t.count(keyN(1)));
}

test "per-ip: many addresses grow the table, and closing them shrinks it back" {
    var t = Table.init(testing.allocator);
    defer t.deinit();
    const n = 5000;
    for (0..n) |i| try testing.expect(try t.acquire(keyN(@intCast(i)), 1));
    try testing.expect(t.entries.len >= 2 * n);
    // Every one is still found after the resizes, and at its limit.
    for (0..n) |i| try testing.expect(!try t.acquire(keyN(@intCast(i)), 1));
    // Removing in an order unlike insertion exercises the backward shift.
    var i: usize = n;
    while (i > 0) : (i -= 2) t.release(keyN(@intCast(i - 1)));
    for (0..n) |j| {
        const want: u32 = if (j % 2 == 1) 0 else 1;
        try testing.expectEqual(want, t.count(keyN(@intCast(j))));
    }
    for (0..n) |j| if (j % 2 == 0) t.release(keyN(@intCast(j)));
    try testing.expectEqual(@as(usize, 0), t.used);
    try testing.expectEqual(@as(usize, capacity_min), t.entries.len);
}

test "per-ip: random acquire and release agree with a model" {
    var t = Table.init(testing.allocator);
    defer t.deinit();
    var model = [_]u32{0} ** 300;
    var prng = std.Random.DefaultPrng.init(7);
    const r = prng.random();
    for (0..50_000) |_| {
        const k = r.uintLessThan(u32, model.len);
        if (r.boolean() and model[k] > 0) {
            t.release(keyN(k));
            model[k] -= 1;
        } else {
            const ok = try t.acquire(keyN(k), 4);
            try testing.expectEqual(model[k] < 4, ok);
            if (ok) model[k] += 1;
        }
    }
    for (model, 0..) |m, k| try testing.expectEqual(m, t.count(keyN(@intCast(k))));
}

test "per-ip: out of memory leaves the table as it was" {
    var failing = testing.FailingAllocator.init(testing.allocator, .{ .fail_index = 1 });
    var t = Table.init(failing.allocator());
    defer t.deinit();
    for (0..capacity_min / 2) |i| try testing.expect(try t.acquire(keyN(@intCast(i)), 1));
    try testing.expectError(error.OutOfMemory, t.acquire(keyN(999), 1));
    for (0..capacity_min / 2) |i| try testing.expectEqual(@as(u32, 1), t.count(keyN(@intCast(i))));
    try testing.expectEqual(@as(u32, 0), t.count(keyN(999)));
}

test "per-ip: address keys at their boundaries" {
    const v4 = struct {
        fn key(a: [4]u8) Key {
            // An IPv4 peer's bytes past the fourth are not its address: they must not count.
            return ipKey(4, a ++ [_]u8{0xaa} ** 12);
        }
    };
    const mapped = [_]u8{0} ** 10 ++ [_]u8{ 0xff, 0xff };
    try testing.expectEqualSlices(u8, &(mapped ++ [_]u8{ 0, 0, 0, 0 }), &v4.key(.{ 0, 0, 0, 0 }));
    try testing.expectEqualSlices(u8, &(mapped ++ [_]u8{ 255, 255, 255, 255 }), &v4.key(.{ 255, 255, 255, 255 }));
    try testing.expectEqualSlices(u8, &v4.key(.{ 1, 2, 3, 4 }), &ipKey(4, [_]u8{ 1, 2, 3, 4 } ++ [_]u8{0} ** 12));
    // IPv6 as it is, at both ends; `::` is not 0.0.0.0.
    const zero6 = [_]u8{0} ** 16;
    const ones6 = [_]u8{0xff} ** 16;
    try testing.expectEqualSlices(u8, &zero6, &ipKey(6, zero6));
    try testing.expectEqualSlices(u8, &ones6, &ipKey(6, ones6));
    try testing.expect(!std.mem.eql(u8, &ipKey(6, zero6), &v4.key(.{ 0, 0, 0, 0 })));
    // IPv4-mapped IPv6 is the IPv4 client; the deprecated IPv4-compatible form (`::a.b.c.d`)
    // and the neighbours of the ffff marker are other addresses.
    try testing.expectEqualSlices(u8, &v4.key(.{ 1, 2, 3, 4 }), &ipKey(6, mapped ++ [_]u8{ 1, 2, 3, 4 }));
    try testing.expect(!std.mem.eql(u8, &v4.key(.{ 1, 2, 3, 4 }), &ipKey(6, [_]u8{0} ** 12 ++ [_]u8{ 1, 2, 3, 4 })));
    try testing.expect(!std.mem.eql(u8, &v4.key(.{ 1, 2, 3, 4 }), &ipKey(6, [_]u8{0} ** 10 ++ [_]u8{ 0xff, 0xfe, 1, 2, 3, 4 })));
    try testing.expect(!std.mem.eql(u8, &v4.key(.{ 1, 2, 3, 4 }), &ipKey(6, [_]u8{0} ** 9 ++ [_]u8{ 1, 0xff, 0xff, 1, 2, 3, 4 })));
}

test "per-ip: keys of IPv4 and IPv6 peers" {
    var p4 = Peer{ .family = linux.AF.INET };
    p4.addr = [_]u8{ 127, 0, 0, 2 } ++ [_]u8{0x55} ** 12;
    const k4 = keyOf(&p4).?;
    try testing.expectEqualSlices(u8, &[_]u8{ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2 }, &k4);
    var p6 = Peer{ .family = linux.AF.INET6 };
    p6.addr = k4; // an IPv4-mapped IPv6 peer is the same client
    try testing.expectEqualSlices(u8, &k4, &keyOf(&p6).?);
    const unix = Peer{ .family = linux.AF.UNIX };
    try testing.expect(keyOf(&unix) == null);
}
