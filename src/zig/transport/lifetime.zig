//! `--timeout-connection`: a connection older than the limit ends after its current
//! response (HTTP/1.1 `connection: close`, HTTP/2 GOAWAY); the protocols ask `expired`
//! when a request begins and when a response ends, never in the middle of one.
//!
//! Where the accept time lives: an idle connection is its 88-byte `Conn` and nothing
//! else, with no byte of padding left, so the accept time is a 16-bit stamp in the spare
//! bits of the connection's deadline entry (`os/deadlines.zig` `Entry.stamp`). Sixteen
//! bits of seconds would wrap after 18 hours, so the stamp's unit grows with the limit:
//! one second up to a limit of 4,095 s, then limit / 4096 + 1 seconds. The stamp wraps
//! after 65,536 units, more than 16 times the limit; a connection that is not asked about
//! for that long (one response streaming for days) may be taken for a young one once.
//! Sans-IO: the caller passes the monotonic clock in milliseconds.
const std = @import("std");

/// A limit spans at least this many stamp units (the unit is one second below it).
const units_per_limit = 4096;

pub const Lifetime = struct {
    /// 0: connections live as long as they like.
    limit_s: u32 = 0,
    /// The stamp's unit, in seconds.
    unit_s: u32 = 1,
    /// The clock when the server started: stamps count from here.
    started_ms: u64 = 0,

    pub fn init(limit_s: u32, now_ms: u64) Lifetime {
        return .{ .limit_s = limit_s, .unit_s = limit_s / units_per_limit + 1, .started_ms = now_ms };
    }

    pub fn enabled(self: Lifetime) bool {
        return self.limit_s != 0;
    }

    /// A connection accepted at `now_ms`: the units since the start, truncated to 16 bits.
    pub fn stamp(self: Lifetime, now_ms: u64) u16 {
        return @truncate((now_ms -| self.started_ms) / self.unitMs());
    }

    /// Whether a connection stamped `at` is older than the limit at `now_ms`. Never
    /// early: the accept may have been as late as the end of its stamp's unit, so the
    /// age counted is the least it can be; it is at most one unit late.
    pub fn expired(self: Lifetime, at: u16, now_ms: u64) bool {
        if (self.limit_s == 0) return false;
        const unit_ms = self.unitMs();
        const since_ms = now_ms -| self.started_ms;
        const now_units: u16 = @truncate(since_ms / unit_ms);
        const age_units: u64 = now_units -% at;
        const age_min_ms = (age_units * unit_ms + since_ms % unit_ms) -| unit_ms;
        return age_min_ms >= @as(u64, self.limit_s) * std.time.ms_per_s;
    }

    fn unitMs(self: Lifetime) u64 {
        std.debug.assert(self.unit_s >= 1);
        return @as(u64, self.unit_s) * std.time.ms_per_s;
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
}

test "never before the limit, at most one unit after it, wherever the accept falls in its second" {
    for ([_]u32{ 1, 2, 3, 60, 4095 }) |limit| {
        const l = Lifetime.init(limit, 123_456);
        try testing.expectEqual(@as(u32, 1), l.unit_s);
        for ([_]u64{ 0, 1, 500, 999, 1000, 7_777 }) |accept| {
            const limit_ms = @as(u64, limit) * 1000;
            try testing.expect(!expiredAt(l, accept, 0));
            try testing.expect(!expiredAt(l, accept, limit_ms - 1));
            try testing.expect(expiredAt(l, accept, limit_ms + 1000));
        }
    }
}

test "the unit grows past 4095 s so that the stamp wraps after more than 16 limits" {
    try testing.expectEqual(@as(u32, 2), Lifetime.init(4096, 0).unit_s);
    try testing.expectEqual(@as(u32, 22), Lifetime.init(86_400, 0).unit_s);
    const max = Lifetime.init(std.math.maxInt(u32), 0);
    try testing.expectEqual(@as(u32, 1_048_576), max.unit_s);
    for ([_]u32{ 4096, 86_400 }) |limit| {
        const l = Lifetime.init(limit, 0);
        const limit_ms = @as(u64, limit) * 1000;
        const unit_ms = @as(u64, l.unit_s) * 1000;
        try testing.expect(65_536 * @as(u64, l.unit_s) > 16 * @as(u64, limit));
        for ([_]u64{ 0, 1, unit_ms - 1, 5 * unit_ms + 3 }) |accept| {
            try testing.expect(!expiredAt(l, accept, limit_ms - 1));
            try testing.expect(expiredAt(l, accept, limit_ms + unit_ms));
        }
    }
}

test "stamps wrap: a connection accepted late in the server's life counts right" {
    const l = Lifetime.init(10, 0);
    // 65,536 seconds and more after the start, stamps have wrapped around zero.
    const accept: u64 = 65_535 * 1000 + 400;
    try testing.expectEqual(@as(u16, 65_535), l.stamp(accept));
    try testing.expectEqual(@as(u16, 1), l.stamp(accept + 2000));
    try testing.expect(!expiredAt(l, accept, 9_999));
    try testing.expect(expiredAt(l, accept, 11_000));
}
