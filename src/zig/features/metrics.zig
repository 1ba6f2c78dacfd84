//! Prometheus metrics and health answers, served by the engine without the app.
//!
//! Counters live in one shared, anonymous mapping made before the workers fork: each
//! worker owns one slot (single writer, plain stores), and whichever worker answers a
//! scrape sums every slot, so the numbers never depend on who answers. A replacement
//! worker inherits its predecessor's slot, so counters carry on instead of resetting.
const std = @import("std");
const linux = std.os.linux;

/// The default upper bounds of the request-duration histogram, in microseconds
/// (`--metrics-buckets` sets others).
pub const default_bounds_us = [_]u64{ 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000 };
/// At most this many duration buckets (besides +Inf).
pub const buckets_max = 24;
/// Upper bounds of the response-size histogram, in body bytes.
pub const size_bounds = [_]u64{ 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000 };
const size_labels = [_][]const u8{ "100", "1000", "10000", "100000", "1e+06", "1e+07" };

/// The methods the histograms are labelled by; the rest count as `other`, so a client
/// cannot grow the label set.
pub const MethodClass = enum(u8) {
    GET,
    HEAD,
    POST,
    PUT,
    PATCH,
    DELETE,
    OPTIONS,
    other,

    pub fn of(method: []const u8) MethodClass {
        inline for (@typeInfo(MethodClass).@"enum".fields[0..7]) |f| {
            if (method.len == f.name.len and std.mem.eql(u8, method, f.name)) return @enumFromInt(f.value);
        }
        return .other;
    }
};
const methods = @typeInfo(MethodClass).@"enum".fields.len;

/// The largest scrape: every (method, status class) cell with every bucket.
pub const render_bytes_max = 256 * 1024;

/// One histogram cell: the requests of one method and one status class.
pub const Cell = extern struct {
    /// Per bucket (not cumulative); the one after the last bound is +Inf.
    duration: [buckets_max + 1]u64 = [_]u64{0} ** (buckets_max + 1),
    duration_sum_us: u64 = 0,
    size: [size_bounds.len + 1]u64 = [_]u64{0} ** (size_bounds.len + 1),
    size_sum: u64 = 0,

    fn count(self: *const Cell) u64 {
        var n: u64 = 0;
        for (self.size) |x| n += x;
        return n;
    }

    fn add(self: *Cell, o: *const Cell) void {
        for (&self.duration, o.duration) |*a, b| a.* += b;
        self.duration_sum_us += o.duration_sum_us;
        for (&self.size, o.size) |*a, b| a.* += b;
        self.size_sum += o.size_sum;
    }
};

/// Why a connection was closed at accept.
pub const RejectCause = enum(u8) { limit_connections, limit_per_ip };
const reject_causes = @typeInfo(RejectCause).@"enum".fields.len;

/// At most this many worker slots (workers plus a reload's second generation).
pub const slots_max = 2048;

pub const Slot = extern struct {
    pid: u64 = 0,
    /// 1 while a worker owns the slot: only live slots contribute gauges.
    live: u64 = 0,
    connections_open: u64 = 0,
    requests_in_flight: u64 = 0,
    /// 1xx .. 5xx
    responses: [5]u64 = [_]u64{0} ** 5,
    received_bytes: u64 = 0,
    sent_bytes: u64 = 0,
    /// By method, then status class. Only the cells a worker uses are touched (paged in).
    cells: [methods][5]Cell = [_][5]Cell{[_]Cell{.{}} ** 5} ** methods,
    resident_bytes: u64 = 0,
    /// Times accepting paused because the process or system ran out of descriptors or memory.
    accept_pauses: u64 = 0,
    /// io_uring: times a connection's receive found no free buffer in the ring and waited.
    io_buffer_waits: u64 = 0,
    /// io_uring: buffers the ring has handed to the kernel (it grows on a wait).
    io_buffers: u64 = 0,
    /// io_uring: descriptors the slot table covers (it follows the highest one open).
    io_slots: u64 = 0,
    /// Connections closed at accept, by `RejectCause`.
    rejected: [reject_causes]u64 = [_]u64{0} ** reject_causes,
    /// Requests answered 429 by `--limit-request-rate`.
    rate_limited: u64 = 0,

    pub fn observe(self: *Slot, method: u8, status: u16, duration_us: u64, body_bytes: u64) void {
        if (status < 100 or status >= 600) return;
        const class = status / 100 - 1;
        self.responses[class] += 1;
        const cell = &self.cells[@min(method, methods - 1)][class];
        const bounds = bucketBounds();
        var i: usize = 0;
        while (i < bounds.len and duration_us > bounds[i]) i += 1;
        cell.duration[i] += 1;
        cell.duration_sum_us += duration_us;
        var j: usize = 0;
        while (j < size_bounds.len and body_bytes > size_bounds[j]) j += 1;
        cell.size[j] += 1;
        cell.size_sum += body_bytes;
    }
};

const Header = extern struct {
    slots: u64,
    worker_restarts: u64,
    /// The duration histogram's bounds (us), set once by whoever maps the counters.
    bounds_count: u64,
    bounds_us: [buckets_max]u64,
    /// One past the highest slot ever claimed: a scrape reads no further, so the
    /// pages of unused slots are never touched.
    slots_used: u64,
};

var header: ?*Header = null;
var slots: []Slot = &.{};

/// The duration bounds in force (the defaults before `init`).
pub fn bucketBounds() []const u64 {
    const h = header orelse return &default_bounds_us;
    return h.bounds_us[0..h.bounds_count];
}

/// Whether `bounds` (us) can be a histogram's: 1 to `buckets_max`, rising, above zero.
pub fn validBounds(bounds: []const u64) bool {
    if (bounds.len == 0 or bounds.len > buckets_max or bounds[0] == 0) return false;
    for (bounds[1..], bounds[0 .. bounds.len - 1]) |b, prev| if (b <= prev) return false;
    return true;
}

/// Maps the shared counters once per process tree; calls after the first are no-ops
/// (workers inherit the master's mapping and its bounds).
pub fn init(slot_count: usize, bounds_us: []const u64) !void {
    if (header != null) return;
    if (slot_count == 0 or slot_count > slots_max) return error.TooManySlots;
    if (!validBounds(bounds_us)) return error.BadBuckets;
    const bytes = @sizeOf(Header) + slot_count * @sizeOf(Slot);
    const rc = linux.mmap(null, bytes, linux.PROT.READ | linux.PROT.WRITE, .{ .TYPE = .SHARED, .ANONYMOUS = true }, -1, 0);
    if (linux.E.init(rc) != .SUCCESS) return error.MapFailed;
    const base: [*]align(std.heap.page_size_min) u8 = @ptrFromInt(rc);
    header = @ptrCast(base);
    header.?.* = .{ .slots = slot_count, .worker_restarts = 0, .slots_used = 0, .bounds_count = bounds_us.len, .bounds_us = undefined };
    @memcpy(header.?.bounds_us[0..bounds_us.len], bounds_us);
    const first: [*]Slot = @ptrCast(@alignCast(base + @sizeOf(Header)));
    // A fresh anonymous mapping is already zero, which is what `Slot{}` is: pages of
    // slots never used are never touched.
    slots = first[0..slot_count];
}

pub fn slot(index: usize) ?*Slot {
    if (index >= slots.len) return null;
    return &slots[index];
}

/// A worker takes its slot: its gauges count from now on.
pub fn claim(index: usize, pid: u64) ?*Slot {
    const s = slot(index) orelse return null;
    _ = @atomicRmw(u64, &header.?.slots_used, .Max, index + 1, .monotonic);
    s.pid = pid;
    s.live = 1;
    return s;
}

/// The master's bookkeeping when a worker exits: its gauges stop counting.
pub fn retire(index: usize, restarted: bool) void {
    const s = slot(index) orelse return;
    s.live = 0;
    s.connections_open = 0;
    s.requests_in_flight = 0;
    s.resident_bytes = 0;
    if (restarted) header.?.worker_restarts += 1;
}

/// Resident memory of this process, from /proc/self/statm.
pub fn residentBytes() u64 {
    const fd = std.posix.openZ("/proc/self/statm", .{}, 0) catch return 0;
    defer std.posix.close(fd);
    var buf: [128]u8 = undefined;
    const n = std.posix.read(fd, &buf) catch return 0;
    var it = std.mem.tokenizeScalar(u8, buf[0..n], ' ');
    _ = it.next() orelse return 0;
    const pages = std.fmt.parseUnsigned(u64, it.next() orelse return 0, 10) catch return 0;
    return pages * std.heap.pageSize();
}

/// The Prometheus text exposition of every slot, summed. Returns the bytes written.
pub fn render(out: []u8) error{NoSpace}![]const u8 {
    var sum = Totals{};
    var workers: u64 = 0;
    const used = if (header) |h| @min(@atomicLoad(u64, &h.slots_used, .monotonic), slots.len) else 0;
    for (slots[0..used]) |*s| {
        for (0..5) |i| sum.responses[i] += s.responses[i];
        sum.received_bytes += s.received_bytes;
        sum.sent_bytes += s.sent_bytes;
        for (&sum.cells, &s.cells) |*row, *src| {
            for (row, src) |*cell, *o| cell.add(o);
        }
        sum.accept_pauses += s.accept_pauses;
        sum.io_buffer_waits += s.io_buffer_waits;
        sum.io_buffers += s.io_buffers;
        sum.io_slots += s.io_slots;
        for (&sum.rejected, s.rejected) |*a, b| a.* += b;
        sum.rate_limited += s.rate_limited;
        if (s.live != 0) {
            workers += 1;
            sum.connections_open += s.connections_open;
            sum.requests_in_flight += s.requests_in_flight;
            sum.resident_bytes += s.resident_bytes;
        }
    }
    var w = std.Io.Writer.fixed(out);
    writeAll(&w, &sum, workers) catch return error.NoSpace;
    return w.buffered();
}

/// Every slot summed (a `Slot` without the per-process fields).
const Totals = struct {
    connections_open: u64 = 0,
    requests_in_flight: u64 = 0,
    responses: [5]u64 = [_]u64{0} ** 5,
    received_bytes: u64 = 0,
    sent_bytes: u64 = 0,
    cells: [methods][5]Cell = [_][5]Cell{[_]Cell{.{}} ** 5} ** methods,
    resident_bytes: u64 = 0,
    accept_pauses: u64 = 0,
    io_buffer_waits: u64 = 0,
    io_buffers: u64 = 0,
    io_slots: u64 = 0,
    rejected: [reject_causes]u64 = [_]u64{0} ** reject_causes,
    rate_limited: u64 = 0,
};

fn writeAll(w: *std.Io.Writer, sum: *const Totals, workers: u64) std.Io.Writer.Error!void {
    try metric(w, "zigcorn_connections_open", "gauge", "Open client connections.", sum.connections_open);
    try metric(w, "zigcorn_requests_in_flight", "gauge", "Requests being served.", sum.requests_in_flight);
    try w.writeAll("# HELP zigcorn_requests_total Responses sent, by status class.\n# TYPE zigcorn_requests_total counter\n");
    for (sum.responses, 0..) |n, i| try w.print("zigcorn_requests_total{{status_class=\"{d}xx\"}} {d}\n", .{ i + 1, n });
    try metric(w, "zigcorn_received_bytes_total", "counter", "Bytes read from clients.", sum.received_bytes);
    try metric(w, "zigcorn_sent_bytes_total", "counter", "Bytes written to clients.", sum.sent_bytes);
    const bounds = bucketBounds();
    try w.writeAll("# HELP zigcorn_request_duration_seconds From request head to the end of the response, by method and status class.\n# TYPE zigcorn_request_duration_seconds histogram\n");
    for (sum.cells, 0..) |row, m| for (row, 0..) |cell, class| {
        if (cell.count() == 0) continue;
        const method = @tagName(@as(MethodClass, @enumFromInt(m)));
        var cumulative: u64 = 0;
        for (bounds, 0..) |bound, i| {
            cumulative += cell.duration[i];
            try w.print("zigcorn_request_duration_seconds_bucket{{method=\"{s}\",status_class=\"{d}xx\",le=\"", .{ method, class + 1 });
            try writeSeconds(w, bound);
            try w.print("\"}} {d}\n", .{cumulative});
        }
        cumulative += cell.duration[bounds.len];
        try w.print("zigcorn_request_duration_seconds_bucket{{method=\"{s}\",status_class=\"{d}xx\",le=\"+Inf\"}} {d}\n", .{ method, class + 1, cumulative });
        try w.print("zigcorn_request_duration_seconds_sum{{method=\"{s}\",status_class=\"{d}xx\"}} ", .{ method, class + 1 });
        try writeSeconds(w, cell.duration_sum_us);
        try w.print("\nzigcorn_request_duration_seconds_count{{method=\"{s}\",status_class=\"{d}xx\"}} {d}\n", .{ method, class + 1, cumulative });
    };
    try w.writeAll("# HELP zigcorn_response_size_bytes Response body bytes, by method and status class.\n# TYPE zigcorn_response_size_bytes histogram\n");
    for (sum.cells, 0..) |row, m| for (row, 0..) |cell, class| {
        if (cell.count() == 0) continue;
        const method = @tagName(@as(MethodClass, @enumFromInt(m)));
        var cumulative: u64 = 0;
        for (size_labels, 0..) |label, i| {
            cumulative += cell.size[i];
            try w.print("zigcorn_response_size_bytes_bucket{{method=\"{s}\",status_class=\"{d}xx\",le=\"{s}\"}} {d}\n", .{ method, class + 1, label, cumulative });
        }
        cumulative += cell.size[size_labels.len];
        try w.print("zigcorn_response_size_bytes_bucket{{method=\"{s}\",status_class=\"{d}xx\",le=\"+Inf\"}} {d}\n", .{ method, class + 1, cumulative });
        try w.print("zigcorn_response_size_bytes_sum{{method=\"{s}\",status_class=\"{d}xx\"}} {d}\n", .{ method, class + 1, cell.size_sum });
        try w.print("zigcorn_response_size_bytes_count{{method=\"{s}\",status_class=\"{d}xx\"}} {d}\n", .{ method, class + 1, cumulative });
    };
    try metric(w, "zigcorn_resident_memory_bytes", "gauge", "Resident memory of the worker processes.", sum.resident_bytes);
    try metric(w, "zigcorn_workers", "gauge", "Worker processes serving.", workers);
    try metric(w, "zigcorn_accept_pauses_total", "counter", "Times accepting paused for a second: out of file descriptors or memory.", sum.accept_pauses);
    try metric(w, "zigcorn_io_uring_buffer_waits_total", "counter", "io_uring: times a receive found the buffer ring empty and waited for a buffer (the ring grows on a wait; waits at its bound call for a larger --io-uring-buffers).", sum.io_buffer_waits);
    try metric(w, "zigcorn_io_uring_buffers", "gauge", "io_uring: receive buffers in the rings, all workers (a ring starts small and doubles on a wait, up to --io-uring-buffers).", sum.io_buffers);
    const slots_help = "io_uring: descriptors the slot tables cover, all workers (16 bytes " ++
        "each; a table follows the highest descriptor open, in steps of 1,024).";
    try metric(w, "zigcorn_io_uring_slots", "gauge", slots_help, sum.io_slots);
    try w.writeAll("# HELP zigcorn_connections_rejected_total Connections closed at accept, by the limit they were over.\n# TYPE zigcorn_connections_rejected_total counter\n");
    for (sum.rejected, 0..) |n, i| try w.print("zigcorn_connections_rejected_total{{cause=\"{s}\"}} {d}\n", .{ @tagName(@as(RejectCause, @enumFromInt(i))), n });
    try metric(w, "zigcorn_requests_rate_limited_total", "counter", "Requests answered 429 by --limit-request-rate.", sum.rate_limited);
    try metric(w, "zigcorn_worker_restarts_total", "counter", "Workers replaced after dying.", if (header) |h| h.worker_restarts else 0);
}

/// Microseconds as seconds, without trailing zeros: 2500000 -> "2.5", 1000 -> "0.001".
fn writeSeconds(w: *std.Io.Writer, us: u64) std.Io.Writer.Error!void {
    try w.print("{d}", .{us / 1_000_000});
    var frac = us % 1_000_000;
    if (frac == 0) return;
    var digits: usize = 6;
    while (frac % 10 == 0) {
        frac /= 10;
        digits -= 1;
    }
    var buf: [6]u8 = undefined;
    const text = std.fmt.bufPrint(&buf, "{d}", .{frac}) catch unreachable;
    try w.writeByte('.');
    for (0..digits - text.len) |_| try w.writeByte('0');
    try w.writeAll(text);
}

fn metric(w: *std.Io.Writer, name: []const u8, kind: []const u8, help: []const u8, value: u64) std.Io.Writer.Error!void {
    try w.print("# HELP {s} {s}\n# TYPE {s} {s}\n{s} {d}\n", .{ name, help, name, kind, name, value });
}

test "render sums slots and keeps buckets cumulative" {
    try init(3, &default_bounds_us);
    _ = claim(0, 1);
    _ = claim(2, 3);
    slot(0).?.connections_open = 2;
    slot(0).?.observe(@intFromEnum(MethodClass.GET), 200, 800, 12);
    slot(1).?.observe(@intFromEnum(MethodClass.GET), 503, 3_000_000, 0);
    slot(1).?.observe(@intFromEnum(MethodClass.of("BREW")), 404, 1_000, 100);
    slot(1).?.connections_open = 7; // not live: its gauges do not count
    retire(2, true);
    var buf: [render_bytes_max]u8 = undefined;
    const text = try render(&buf);
    const want = [_][]const u8{
        "zigcorn_connections_open 2\n",
        "zigcorn_requests_total{status_class=\"2xx\"} 1\n",
        "zigcorn_requests_total{status_class=\"5xx\"} 1\n",
        "zigcorn_request_duration_seconds_bucket{method=\"GET\",status_class=\"2xx\",le=\"0.001\"} 1\n",
        "zigcorn_request_duration_seconds_bucket{method=\"GET\",status_class=\"5xx\",le=\"2.5\"} 0\n",
        "zigcorn_request_duration_seconds_bucket{method=\"GET\",status_class=\"5xx\",le=\"5\"} 1\n",
        "zigcorn_request_duration_seconds_sum{method=\"GET\",status_class=\"5xx\"} 3\n",
        "zigcorn_request_duration_seconds_sum{method=\"GET\",status_class=\"2xx\"} 0.0008\n",
        // le is inclusive: exactly 1 ms is in the 0.001 bucket.
        "zigcorn_request_duration_seconds_bucket{method=\"other\",status_class=\"4xx\",le=\"0.001\"} 1\n",
        "zigcorn_response_size_bytes_bucket{method=\"other\",status_class=\"4xx\",le=\"100\"} 1\n",
        "zigcorn_response_size_bytes_bucket{method=\"GET\",status_class=\"2xx\",le=\"100\"} 1\n",
        "zigcorn_response_size_bytes_sum{method=\"GET\",status_class=\"2xx\"} 12\n",
        "zigcorn_worker_restarts_total 1\n",
        "zigcorn_workers 1\n",
    };
    for (want) |line| {
        std.testing.expect(std.mem.indexOf(u8, text, line) != null) catch |e| {
            std.debug.print("missing: {s}", .{line});
            return e;
        };
    }
    // Cells nobody used are not rendered.
    try std.testing.expect(std.mem.indexOf(u8, text, "method=\"POST\"") == null);
    try std.testing.expectError(error.NoSpace, render(buf[0..100]));
    // The worst case fits: every cell used, the most buckets.
    var all: [buckets_max]u64 = undefined;
    for (&all, 0..) |*b, i| b.* = (i + 1) * 1_234_567;
    header.?.bounds_count = all.len;
    @memcpy(header.?.bounds_us[0..all.len], &all);
    for (0..methods) |m| for (1..6) |class| slot(0).?.observe(@intCast(m), @intCast(class * 100 + 99), 999_999_999_999, 999_999_999_999);
    _ = try render(&buf);
}

test "duration bounds are checked and printed as Prometheus reads them" {
    try std.testing.expect(validBounds(&default_bounds_us));
    try std.testing.expect(!validBounds(&.{}));
    try std.testing.expect(!validBounds(&.{0}));
    try std.testing.expect(!validBounds(&.{ 5, 5 }));
    try std.testing.expect(!validBounds(&.{ 5, 4 }));
    try std.testing.expect(!validBounds(&([_]u64{1} ** (buckets_max + 1))));
    var buf: [64]u8 = undefined;
    const cases = [_]struct { u64, []const u8 }{ .{ 1_000, "0.001" }, .{ 2_500_000, "2.5" }, .{ 10_000_000, "10" }, .{ 1, "0.000001" }, .{ 1_050_000, "1.05" }, .{ 0, "0" } };
    for (cases) |cse| {
        var w = std.Io.Writer.fixed(&buf);
        try writeSeconds(&w, cse[0]);
        try std.testing.expectEqualStrings(cse[1], w.buffered());
    }
}

test "methods outside the table count as other" {
    try std.testing.expectEqual(MethodClass.GET, MethodClass.of("GET"));
    try std.testing.expectEqual(MethodClass.OPTIONS, MethodClass.of("OPTIONS"));
    try std.testing.expectEqual(MethodClass.other, MethodClass.of("get"));
    try std.testing.expectEqual(MethodClass.other, MethodClass.of("PROPFIND"));
}
