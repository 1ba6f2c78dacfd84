//! `--timeout-connection`: a connection older than the limit ends after its current
//! response (HTTP/1.1 `connection: close`, HTTP/2 GOAWAY); the protocols ask `expired`
//! when a request begins, when a response's head goes out and when it ends, never to cut
//! one. HTTP/2 also sets a timer (`remainingMs`) so that its GOAWAY leaves when the age
//! passes, not only when something happens on the connection.
//!
//! Where the accept time lives: an idle connection is its 88-byte `Conn` and nothing
//! else, with no byte of padding left, so the accept time is a 16-bit stamp in the spare
//! bits of the connection's deadline entry (`os/deadlines.zig` `Entry.stamp`). Its unit
//! is 1/4096 of the limit, at least a millisecond (1 ms for a limit up to 4 s, 15 ms for
//! a minute, 879 ms for an hour), so an age is known to within that; the stamp wraps
//! after 65,536 units, more than 16 times the limit, and a connection that is not asked
//! about for that long (one response streaming for 16 limits) may be taken for a young
//! one once. (Whole seconds counted from the server's start made a connection accepted
//! early in a second up to a second younger than it was: with a 1 s limit, a response
//! 1.5 s after such an accept still kept the connection alive.)
//! Sans-IO: the caller passes the monotonic clock in milliseconds.
const std = @import("std");

/// A limit spans at least this many stamp units.
const units_per_limit = 4096;

pub const Lifetime = struct {
    /// 0: connections live as long as they like.
    limit_ms: u64 = 0,
    /// The stamp's unit, in milliseconds.
    unit_ms: u64 = 1,
    /// The clock when the server started: stamps count from here.
    started_ms: u64 = 0,

    pub fn init(limit_s: u32, now_ms: u64) Lifetime {
        const limit_ms = @as(u64, limit_s) * std.time.ms_per_s;
        return .{ .limit_ms = limit_ms, .unit_ms = limit_ms / units_per_limit + 1, .started_ms = now_ms };
    }

    pub fn enabled(self: Lifetime) bool {
        return self.limit_ms != 0;
    }

    /// A connection accepted at `now_ms`: the units since the start, truncated to 16 bits.
    pub fn stamp(self: Lifetime, now_ms: u64) u16 {
        return @truncate((now_ms -| self.started_ms) / self.unit_ms);
    }

    /// Whether a connection stamped `at` is older than the limit at `now_ms`. Never
    /// early: the accept may have been as late as the end of its stamp's unit, so the
    /// age counted is the least it can be; it is at most one unit late.
    pub fn expired(self: Lifetime, at: u16, now_ms: u64) bool {
        if (self.limit_ms == 0) return false;
        return self.sinceStampMs(at, now_ms) >= self.limit_ms + self.unit_ms;
    }

    /// How long until `expired` says yes for a connection stamped `at` (0: it does now;
    /// the largest u64 when there is no limit).
    pub fn remainingMs(self: Lifetime, at: u16, now_ms: u64) u64 {
        if (self.limit_ms == 0) return std.math.maxInt(u64);
        return (self.limit_ms + self.unit_ms) -| self.sinceStampMs(at, now_ms);
    }

    /// Time since the start of the unit a connection stamped `at` was accepted in: its
    /// age, or up to a unit more.
    fn sinceStampMs(self: Lifetime, at: u16, now_ms: u64) u64 {
        std.debug.assert(self.unit_ms >= 1);
        const since_ms = now_ms -| self.started_ms;
        const now_units: u16 = @truncate(since_ms / self.unit_ms);
        const age_units: u64 = now_units -% at;
        return age_units * self.unit_ms + since_ms % self.unit_ms;
    }
};

const testing = std.testing;

/// Accepted at `accept_ms` (after the start), asked at `accept_ms + age_ms`.
fn expiredAt(l: Lifetime, accept_ms: u64, age_ms: u64) bool {
    const start = l.started_ms;
    return l.expired(l.stamp(start + accept_ms), start + accept_ms + age_ms);
}

test "off: no connection is ever too old" {
    const l = Lifetime.init(0, 1000);
    try testing.expect(!l.enabled());
    try testing.expect(!expiredAt(l, 0, std.math.maxInt(u32)));
    try testing.expectEqual(@as(u64, std.math.maxInt(u64)), l.remainingMs(0, 5));
}

test "never before the limit, at most one unit after it, wherever the accept falls" {
    for ([_]u32{ 1, 2, 3, 60, 4095 }) |limit| {
        const l = Lifetime.init(limit, 123_456);
        const limit_ms = @as(u64, limit) * 1000;
        try testing.expectEqual(limit_ms / 4096 + 1, l.unit_ms);
        for ([_]u64{ 0, 1, 500, 999, 1000, 7_777 }) |accept| {
            try testing.expect(!expiredAt(l, accept, 0));
            try testing.expect(!expiredAt(l, accept, limit_ms - 1));
            try testing.expect(expiredAt(l, accept, limit_ms + l.unit_ms));
        }
    }
}

test "a 1 s limit is known to the millisecond: a response 1.5 s after the accept is past it" {
    // Accepted 100 ms after the start, whole seconds from the start took it for 0.5 s old at 1.5 s.
    const l = Lifetime.init(1, 50_000);
    try testing.expectEqual(@as(u64, 1), l.unit_ms);
    for ([_]u64{ 0, 100, 499, 500, 999, 12_345 }) |accept| {
        try testing.expect(!expiredAt(l, accept, 999));
        try testing.expect(expiredAt(l, accept, 1_001));
        try testing.expect(expiredAt(l, accept, 1_500));
    }
}

test "remainingMs: the time until expired says yes, never less" {
    for ([_]u32{ 1, 60, 4096, 86_400 }) |limit| {
        const l = Lifetime.init(limit, 7_000);
        const limit_ms = @as(u64, limit) * 1000;
        for ([_]u64{ 0, 1, 999, 123_456 }) |accept| {
            const at = l.stamp(l.started_ms + accept);
            for ([_]u64{ 0, 1, 250, 40_000 }) |age| {
                const now = l.started_ms + accept + age;
                const left = l.remainingMs(at, now);
                try testing.expectEqual(left == 0, l.expired(at, now));
                if (left == 0) continue;
                try testing.expect(!l.expired(at, now + left - 1));
                try testing.expect(l.expired(at, now + left));
                // Never early (the true age then is at least the limit), at most a unit late.
                try testing.expect(age + left >= limit_ms);
                try testing.expect(age + left <= limit_ms + l.unit_ms);
            }
        }
    }
}

test "the unit is 1/4096 of the limit, so that the stamp wraps after more than 16 limits" {
    try testing.expectEqual(@as(u64, 1), Lifetime.init(1, 0).unit_ms);
    try testing.expectEqual(@as(u64, 15), Lifetime.init(60, 0).unit_ms);
    try testing.expectEqual(@as(u64, 1001), Lifetime.init(4096, 0).unit_ms);
    try testing.expectEqual(@as(u64, 21_094), Lifetime.init(86_400, 0).unit_ms);
    try testing.expectEqual(@as(u64, 1_048_576_000), Lifetime.init(std.math.maxInt(u32), 0).unit_ms);
    for ([_]u32{ 1, 60, 4096, 86_400, std.math.maxInt(u32) }) |limit| {
        const l = Lifetime.init(limit, 0);
        const limit_ms = @as(u64, limit) * 1000;
        try testing.expect(65_536 * l.unit_ms > 16 * limit_ms);
        for ([_]u64{ 0, 1, l.unit_ms - 1, 5 * l.unit_ms + 3 }) |accept| {
            try testing.expect(!expiredAt(l, accept, limit_ms - 1));
            try testing.expect(expiredAt(l, accept, limit_ms + l.unit_ms));
        }
    }
}

test "stamps wrap: a connection accepted late in the server's life counts right" {
    const l = Lifetime.init(10, 0);
    try testing.expectEqual(@as(u64, 3), l.unit_ms);
    // 65,536 units and more after the start, stamps have wrapped around zero.
    const accept: u64 = 65_535 * 3 + 2;
    try testing.expectEqual(@as(u16, 65_535), l.stamp(accept));
    try testing.expectEqual(@as(u16, 1), l.stamp(accept + 6));
    try testing.expect(!expiredAt(l, accept, 9_999));
    try testing.expect(expiredAt(l, accept, 10_003));
}
