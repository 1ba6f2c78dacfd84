//! `--limit-request-rate N` and `--limit-request-burst B`: a token bucket per client
//! address, refilled at N requests a second up to B; a request finding its bucket empty
//! is answered `429` with `retry-after` by the engine, and the app never sees it.
//!
//! The table has a fixed size (`--limit-request-table` entries, made on first use), so a
//! flood of addresses cannot grow it: it is set-associative (4 entries per set, the set
//! chosen by a keyed hash), and a new address takes the entry in its set with the most
//! tokens. A full bucket is the same as no entry at all, so evicting one loses nothing;
//! only when every entry of a set is part-used does an address lose some of its history
//! (it is treated more leniently, never more strictly).
const std = @import("std");

const forwarded = @import("forwarded.zig");
const Peer = @import("../transport/peer.zig").Peer;
const per_ip = @import("per_ip.zig");
const Header = @import("../http/fields.zig").Header;

/// A client's address (`per_ip.ipKey`: one key for IPv4 and IPv4-mapped IPv6).
pub const Key = per_ip.Key;

/// The address a request is counted against: what trusted proxies say the client is
/// (`--forwarded-allow-ips`, as the scope's `client`), else the peer. Null for a peer
/// without an address (a Unix socket with no proxy header): such requests are not limited.
pub fn clientKey(trust: ?*const forwarded.Trust, peer: *const Peer, headers: []const Header) ?Key {
    if (trust) |t| {
        if (t.trustsPeer(peer.family, &peer.addr)) {
            const fwd = forwarded.resolve(t, headers);
            if (fwd.client_host) |host| {
                if (forwarded.parseIp(std.mem.trim(u8, host, "[]"))) |ip| return per_ip.ipKey(ip.version, ip.addr);
            }
        }
    }
    return per_ip.keyOf(peer);
}

pub const ways = 4;
/// Tokens are counted in thousandths, so a rate below one per millisecond still refills.
const milli = 1000;

const Entry = struct {
    key: Key = undefined,
    /// Thousandths of a token; an unused entry is full (`burst`).
    tokens: u64 = 0,
    /// When `tokens` was last brought up to date (server milliseconds).
    at_ms: u64 = 0,
    used: bool = false,
};

pub const Options = struct {
    /// Requests a second (0 = off).
    rate: u32 = 0,
    /// The bucket's size: requests allowed at once after a quiet spell.
    burst: u32 = 0,
    /// Entries in the table (a power of two, at least `ways`).
    table_entries: u32 = 8192,
};

pub const Limiter = struct {
    opts: Options,
    entries: []Entry = &.{},
    seed: u64,
    allocator: std.mem.Allocator,

    pub fn init(allocator: std.mem.Allocator, opts: Options) Limiter {
        std.debug.assert(opts.rate > 0 and opts.burst > 0);
        std.debug.assert(std.math.isPowerOfTwo(opts.table_entries) and opts.table_entries >= ways);
        var seed: u64 = undefined;
        std.crypto.random.bytes(std.mem.asBytes(&seed));
        return .{ .opts = opts, .seed = seed, .allocator = allocator };
    }

    pub fn deinit(self: *Limiter) void {
        self.allocator.free(self.entries);
        self.entries = &.{};
    }

    /// Takes a token for one request from `key` at `now_ms`: null when it may go on,
    /// else the whole seconds until a token is there (for `retry-after`, at least 1).
    /// Out of memory for the table lets every request through (and tries again later).
    pub fn take(self: *Limiter, key: Key, now_ms: u64) ?u32 {
        if (self.entries.len == 0) {
            self.entries = self.allocator.alloc(Entry, self.opts.table_entries) catch return null;
            @memset(self.entries, .{});
        }
        const sets = self.entries.len / ways;
        const set_index: usize = @intCast(std.hash.Wyhash.hash(self.seed, &key) % sets);
        const set = self.entries[set_index * ways ..][0..ways];
        const full = @as(u64, self.opts.burst) * milli;
        const e = for (set) |*e| {
            if (e.used and std.mem.eql(u8, &e.key, &key)) break e;
        } else blk: {
            // The entry with the most tokens (an unused one counts as full).
            var best = &set[0];
            var best_tokens: u64 = 0;
            for (set) |*cand| {
                const t = if (cand.used) self.refilled(cand, now_ms) else full;
                if (t > best_tokens or (t == best_tokens and !cand.used)) {
                    best = cand;
                    best_tokens = t;
                }
            }
            best.* = .{ .key = key, .tokens = full, .at_ms = now_ms, .used = true };
            break :blk best;
        };
        e.tokens = self.refilled(e, now_ms);
        e.at_ms = @max(e.at_ms, now_ms);
        if (e.tokens >= milli) {
            e.tokens -= milli;
            return null;
        }
        // Time for the missing thousandths at `rate` tokens a second, rounded up.
        const missing = milli - e.tokens;
        const wait_ms = (missing * 1000 + @as(u64, self.opts.rate) * milli - 1) / (@as(u64, self.opts.rate) * milli);
        return @intCast(@max(1, (wait_ms + 999) / 1000));
    }

    fn refilled(self: *const Limiter, e: *const Entry, now_ms: u64) u64 {
        const full = @as(u64, self.opts.burst) * milli;
        const elapsed = now_ms -| e.at_ms;
        // rate tokens a second = rate thousandths a millisecond.
        const gained = std.math.mul(u64, elapsed, self.opts.rate) catch return full;
        return @min(full, e.tokens +| gained);
    }
};

// ---- tests ---------------------------------------------------------------------------

const testing = std.testing;

fn keyN(n: u32) Key {
    var k = [_]u8{0} ** 16;
    std.mem.writeInt(u32, k[12..16], n, .big);
    return k;
}

test "rate limit: a burst, then the rate" {
    var l = Limiter.init(testing.allocator, .{ .rate = 10, .burst = 5, .table_entries = 64 });
    defer l.deinit();
    for (0..5) |_| try testing.expectEqual(@as(?u32, null), l.take(keyN(1), 1000));
    try testing.expectEqual(@as(?u32, 1), l.take(keyN(1), 1000));
    // Another address has its own bucket.
    try testing.expectEqual(@as(?u32, null), l.take(keyN(2), 1000));
    // 10 a second: one token every 100 ms, exactly.
    try testing.expectEqual(@as(?u32, 1), l.take(keyN(1), 1099));
    try testing.expectEqual(@as(?u32, null), l.take(keyN(1), 1100));
    try testing.expectEqual(@as(?u32, 1), l.take(keyN(1), 1100));
    // A long quiet spell refills to the burst, no further.
    for (0..5) |_| try testing.expectEqual(@as(?u32, null), l.take(keyN(1), 100_000));
    try testing.expect(l.take(keyN(1), 100_000) != null);
}

test "rate limit: retry-after rounds up to whole seconds" {
    var l = Limiter.init(testing.allocator, .{ .rate = 1, .burst = 1, .table_entries = 64 });
    defer l.deinit();
    try testing.expectEqual(@as(?u32, null), l.take(keyN(1), 0));
    try testing.expectEqual(@as(?u32, 1), l.take(keyN(1), 0));
    try testing.expectEqual(@as(?u32, 1), l.take(keyN(1), 999));
    try testing.expectEqual(@as(?u32, null), l.take(keyN(1), 1000));
    // A slow rate: one request a minute is not expressible (N is per second), but one a
    // second with a burst of 1 after a denial waits a second at most.
    var slow = Limiter.init(testing.allocator, .{ .rate = 1, .burst = 3, .table_entries = 64 });
    defer slow.deinit();
    for (0..3) |_| try testing.expectEqual(@as(?u32, null), slow.take(keyN(7), 5));
    try testing.expectEqual(@as(?u32, 1), slow.take(keyN(7), 5));
}

test "rate limit: a flood of addresses stays in the table's size and evicts full buckets first" {
    var l = Limiter.init(testing.allocator, .{ .rate = 1, .burst = 2, .table_entries = 64 });
    defer l.deinit();
    // An abuser empties its bucket...
    try testing.expectEqual(@as(?u32, null), l.take(keyN(0), 0));
    try testing.expectEqual(@as(?u32, null), l.take(keyN(0), 0));
    try testing.expect(l.take(keyN(0), 0) != null);
    // ...then 10,000 other addresses pass, once each, at the same instant.
    for (1..10_000) |i| try testing.expectEqual(@as(?u32, null), l.take(keyN(@intCast(i)), 0));
    try testing.expectEqual(@as(usize, 64), l.entries.len);
    // Each of them left its bucket part-used, so the abuser's set may have been taken
    // over: it is then treated as new (lenient), never as more limited than it was.
    const again = l.take(keyN(0), 0);
    _ = again;
    // Full buckets go first: a set of one busy and three full entries keeps the busy one.
    var l2 = Limiter.init(testing.allocator, .{ .rate = 1, .burst = 2, .table_entries = ways });
    defer l2.deinit();
    try testing.expectEqual(@as(?u32, null), l2.take(keyN(0), 0));
    try testing.expectEqual(@as(?u32, null), l2.take(keyN(0), 0));
    for (1..4) |i| {
        try testing.expectEqual(@as(?u32, null), l2.take(keyN(@intCast(i)), 0));
    }
    // Time passes: 1..3 refill to full (1 token in a second), 0 to 1 token only.
    try testing.expectEqual(@as(?u32, null), l2.take(keyN(4), 1000)); // evicts a full one, not 0
    try testing.expectEqual(@as(?u32, null), l2.take(keyN(0), 1000));
    try testing.expect(l2.take(keyN(0), 1000) != null);
}

test "rate limit: out of memory lets requests through" {
    var failing = testing.FailingAllocator.init(testing.allocator, .{ .fail_index = 0 });
    var l = Limiter.init(failing.allocator(), .{ .rate = 1, .burst = 1, .table_entries = 64 });
    defer l.deinit();
    for (0..10) |_| try testing.expectEqual(@as(?u32, null), l.take(keyN(1), 0));
}

test "rate limit: the client counted is the one trusted proxies name, else the peer" {
    var trust = forwarded.Trust{};
    try trust.add("127.0.0.1");
    var local = Peer{ .family = std.os.linux.AF.INET };
    local.addr[0..4].* = .{ 127, 0, 0, 1 };
    var stranger = Peer{ .family = std.os.linux.AF.INET };
    stranger.addr[0..4].* = .{ 203, 0, 113, 7 };
    const xff = [_]Header{.{ .name = "x-forwarded-for", .value = "198.51.100.4, 10.0.0.9" }};
    // Read right to left: 10.0.0.9 is not trusted, so it is the client.
    try testing.expectEqualSlices(u8, &per_ip.ipKey(4, [_]u8{ 10, 0, 0, 9 } ++ [_]u8{0} ** 12), &clientKey(&trust, &local, &xff).?);
    // A proxy naming the client in its IPv4-mapped IPv6 spelling names the same client.
    const xff6 = [_]Header{.{ .name = "x-forwarded-for", .value = "198.51.100.4, ::ffff:10.0.0.9" }};
    try testing.expectEqualSlices(u8, &clientKey(&trust, &local, &xff).?, &clientKey(&trust, &local, &xff6).?);
    // An untrusted peer cannot name anyone.
    try testing.expectEqualSlices(u8, &per_ip.ipKey(4, stranger.addr), &clientKey(&trust, &stranger, &xff).?);
    // Proxy headers off: the peer.
    try testing.expectEqualSlices(u8, &per_ip.ipKey(4, local.addr), &clientKey(null, &local, &xff).?);
    // A Unix-socket peer without a trusted proxy header is not limited.
    const unix = Peer{ .family = std.os.linux.AF.UNIX };
    try testing.expect(clientKey(&trust, &unix, &xff) == null);
    // IPv4 and IPv4-mapped IPv6 share a key.
    var mapped = Peer{ .family = std.os.linux.AF.INET6 };
    mapped.addr = per_ip.ipKey(4, stranger.addr);
    try testing.expectEqualSlices(u8, &clientKey(null, &stranger, &.{}).?, &clientKey(null, &mapped, &.{}).?);
}
