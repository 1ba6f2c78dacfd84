//! The connection-ID table of one worker: connection ID bytes -> the connection, for every
//! datagram the endpoint routes. A fixed capacity, allocated once: open addressing with
//! linear probing and backward-shift deletion (no tombstones, so a table that churns
//! forever never slows down), at most half full.
//!
//! The hash is SipHash-2-4 under a per-process random key: a client chooses the IDs of its
//! first Initials, and without the key it cannot choose IDs that pile up in one run of slots.
const std = @import("std");
const assert = std.debug.assert;
const packet = @import("packet.zig");
const SipHash = std.crypto.auth.siphash.SipHash64(2, 4);

pub const hash_key_len = SipHash.key_length;

/// A connection ID, kept by value (up to 20 bytes, RFC 9000 17.2).
pub const Cid = struct {
    len: u8 = 0,
    bytes: [packet.cid_len_max]u8 = [_]u8{0} ** packet.cid_len_max,

    pub fn from(s: []const u8) Cid {
        assert(s.len <= packet.cid_len_max);
        var c: Cid = .{ .len = @intCast(s.len) };
        @memcpy(c.bytes[0..s.len], s);
        return c;
    }

    pub fn slice(c: *const Cid) []const u8 {
        return c.bytes[0..c.len];
    }
};

/// A table of `capacity` IDs, each naming a `V` (a pointer to a connection).
pub fn Table(comptime V: type) type {
    return struct {
        const Self = @This();
        const Slot = struct { cid: Cid = .{}, value: ?V = null };

        slots: []Slot,
        used: usize = 0,
        capacity: usize,
        key: [hash_key_len]u8,

        /// Allocates the slots (twice `capacity`, a power of two) once.
        pub fn init(allocator: std.mem.Allocator, capacity: usize, key: [hash_key_len]u8) error{OutOfMemory}!Self {
            assert(capacity > 0);
            const len = std.math.ceilPowerOfTwo(usize, capacity * 2) catch return error.OutOfMemory;
            const slots = try allocator.alloc(Slot, len);
            @memset(slots, .{});
            return .{ .slots = slots, .capacity = capacity, .key = key };
        }

        pub fn deinit(self: *Self, allocator: std.mem.Allocator) void {
            allocator.free(self.slots);
            self.* = undefined;
        }

        fn home(self: *const Self, cid: []const u8) usize {
            return @intCast(SipHash.toInt(cid, &self.key) & (self.slots.len - 1));
        }

        fn find(self: *const Self, cid: []const u8) ?usize {
            const mask = self.slots.len - 1;
            var i = self.home(cid);
            // At most half full: an empty slot ends every probe.
            while (self.slots[i].value != null) : (i = (i + 1) & mask) {
                if (std.mem.eql(u8, self.slots[i].cid.slice(), cid)) return i;
            }
            return null;
        }

        pub fn get(self: *const Self, cid: []const u8) ?V {
            if (cid.len > packet.cid_len_max) return null;
            const i = self.find(cid) orelse return null;
            return self.slots[i].value;
        }

        pub fn contains(self: *const Self, cid: []const u8) bool {
            return self.get(cid) != null;
        }

        pub fn insert(self: *Self, cid: []const u8, value: V) error{ Full, Exists }!void {
            assert(cid.len <= packet.cid_len_max);
            if (self.find(cid) != null) return error.Exists;
            if (self.used == self.capacity) return error.Full;
            const mask = self.slots.len - 1;
            var i = self.home(cid);
            while (self.slots[i].value != null) i = (i + 1) & mask;
            self.slots[i] = .{ .cid = Cid.from(cid), .value = value };
            self.used += 1;
            assert(self.used <= self.capacity and self.used * 2 <= self.slots.len);
        }

        /// Takes `cid` out; what it named, or null when it was not there.
        pub fn remove(self: *Self, cid: []const u8) ?V {
            var hole = self.find(cid) orelse return null;
            const value = self.slots[hole].value;
            const mask = self.slots.len - 1;
            // Backward shift: pull later entries of the run into the hole when their home
            // is not between the hole and where they sit (cyclically).
            var j = hole;
            while (true) {
                j = (j + 1) & mask;
                if (self.slots[j].value == null) break;
                const h = self.home(self.slots[j].cid.slice());
                const stays = if (hole <= j) (hole < h and h <= j) else (hole < h or h <= j);
                if (stays) continue;
                self.slots[hole] = self.slots[j];
                hole = j;
            }
            self.slots[hole] = .{};
            self.used -= 1;
            return value;
        }
    };
}

const testing = std.testing;

test "cid table: filled to capacity, each ID found, one more refused, emptied, refilled" {
    const capacity = 1000;
    var t = try Table(*const u32).init(testing.allocator, capacity, [_]u8{3} ** hash_key_len);
    defer t.deinit(testing.allocator);
    try testing.expectEqual(@as(usize, 2048), t.slots.len);
    var values: [capacity]u32 = undefined;
    var cids: [capacity][8]u8 = undefined;
    for (0..capacity) |i| {
        values[i] = @intCast(i);
        std.mem.writeInt(u64, &cids[i], i *% 0x9e3779b97f4a7c15, .little);
        try t.insert(&cids[i], &values[i]);
    }
    try testing.expectError(error.Full, t.insert("one more", &values[0]));
    try testing.expectError(error.Exists, t.insert(&cids[5], &values[0]));
    for (0..capacity) |i| try testing.expectEqual(@as(u32, @intCast(i)), t.get(&cids[i]).?.*);
    try testing.expectEqual(@as(?*const u32, null), t.get("absent!!"));
    try testing.expectEqual(@as(?*const u32, null), t.get(&([_]u8{0} ** 21)));
    // Take every other out: the rest are still found (the shifts kept their runs whole).
    var i: usize = 0;
    while (i < capacity) : (i += 2) try testing.expectEqual(&values[i], t.remove(&cids[i]).?);
    try testing.expectEqual(@as(?*const u32, null), t.remove(&cids[0]));
    for (0..capacity) |k| try testing.expectEqual(k % 2 == 1, t.contains(&cids[k]));
    for (0..capacity) |k| if (k % 2 == 1) {
        _ = t.remove(&cids[k]).?;
    };
    try testing.expectEqual(@as(usize, 0), t.used);
    for (t.slots) |s| try testing.expect(s.value == null);
    for (0..capacity) |k| try t.insert(&cids[k], &values[k]);
    try testing.expectEqual(capacity, t.used);
}

test "cid table: random inserts and removals agree with a reference map; IDs of every length" {
    var t = try Table(*const u32).init(testing.allocator, 64, [_]u8{9} ** hash_key_len);
    defer t.deinit(testing.allocator);
    var reference = std.StringHashMap(void).init(testing.allocator);
    defer reference.deinit();
    var prng = std.Random.DefaultPrng.init(1);
    const r = prng.random();
    var pool: [200][20]u8 = undefined;
    var lens: [200]u8 = undefined;
    for (&pool, &lens) |*c, *l| {
        r.bytes(c);
        l.* = r.intRangeAtMost(u8, 0, 20);
    }
    const v: u32 = 1;
    for (0..20_000) |_| {
        const k = r.uintLessThan(usize, pool.len);
        const cid = pool[k][0..lens[k]];
        if (r.boolean()) {
            const res = t.insert(cid, &v);
            if (reference.contains(cid)) {
                try testing.expectError(error.Exists, res);
            } else if (reference.count() == 64) {
                try testing.expectError(error.Full, res);
            } else {
                try res;
                try reference.put(cid, {});
            }
        } else {
            try testing.expectEqual(reference.remove(cid), t.remove(cid) != null);
        }
        try testing.expectEqual(@as(usize, reference.count()), t.used);
    }
    for (&pool, lens) |*c, l| try testing.expectEqual(reference.contains(c[0..l]), t.contains(c[0..l]));
}
