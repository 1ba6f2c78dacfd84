//! Prometheus metrics and health answers, served by the engine without the app.
//!
//! Counters live in one shared, anonymous mapping made before the workers fork: each
//! worker owns one slot (single writer, plain stores), and whichever worker answers a
//! scrape sums every slot, so the numbers never depend on who answers. A replacement
//! worker inherits its predecessor's slot, so counters carry on instead of resetting.
const std = @import("std");
const linux = std.os.linux;

/// Upper bounds of the request-duration histogram, in microseconds.
pub const bucket_bounds_us = [_]u64{ 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000 };
const bucket_labels = [_][]const u8{ "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10" };

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
    /// Per bucket (not cumulative); the last one is +Inf.
    duration_buckets: [bucket_bounds_us.len + 1]u64 = [_]u64{0} ** (bucket_bounds_us.len + 1),
    duration_sum_us: u64 = 0,
    resident_bytes: u64 = 0,
    /// Times accepting paused because the process or system ran out of descriptors or memory.
    accept_pauses: u64 = 0,
    /// io_uring: times a connection's receive found no free buffer in the ring and waited.
    io_buffer_waits: u64 = 0,

    pub fn observe(self: *Slot, status: u16, duration_us: u64) void {
        if (status >= 100 and status < 600) self.responses[status / 100 - 1] += 1;
        var i: usize = 0;
        while (i < bucket_bounds_us.len and duration_us > bucket_bounds_us[i]) i += 1;
        self.duration_buckets[i] += 1;
        self.duration_sum_us += duration_us;
    }
};

const Header = extern struct {
    slots: u64,
    worker_restarts: u64,
    /// One past the highest slot ever claimed: a scrape reads no further, so the
    /// pages of unused slots are never touched.
    slots_used: u64,
};

var header: ?*Header = null;
var slots: []Slot = &.{};

/// Maps the shared counters once per process tree; calls after the first are no-ops.
pub fn init(slot_count: usize) !void {
    if (header != null) return;
    if (slot_count == 0 or slot_count > slots_max) return error.TooManySlots;
    const bytes = @sizeOf(Header) + slot_count * @sizeOf(Slot);
    const rc = linux.mmap(null, bytes, linux.PROT.READ | linux.PROT.WRITE, .{ .TYPE = .SHARED, .ANONYMOUS = true }, -1, 0);
    if (linux.E.init(rc) != .SUCCESS) return error.MapFailed;
    const base: [*]align(std.heap.page_size_min) u8 = @ptrFromInt(rc);
    header = @ptrCast(base);
    header.?.* = .{ .slots = slot_count, .worker_restarts = 0, .slots_used = 0 };
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
    var sum = Slot{};
    var workers: u64 = 0;
    const used = if (header) |h| @min(@atomicLoad(u64, &h.slots_used, .monotonic), slots.len) else 0;
    for (slots[0..used]) |*s| {
        for (0..5) |i| sum.responses[i] += s.responses[i];
        sum.received_bytes += s.received_bytes;
        sum.sent_bytes += s.sent_bytes;
        for (0..sum.duration_buckets.len) |i| sum.duration_buckets[i] += s.duration_buckets[i];
        sum.duration_sum_us += s.duration_sum_us;
        sum.accept_pauses += s.accept_pauses;
        sum.io_buffer_waits += s.io_buffer_waits;
        if (s.live != 0) {
            workers += 1;
            sum.connections_open += s.connections_open;
            sum.requests_in_flight += s.requests_in_flight;
            sum.resident_bytes += s.resident_bytes;
        }
    }
    var w = std.Io.Writer.fixed(out);
    writeAll(&w, sum, workers) catch return error.NoSpace;
    return w.buffered();
}

fn writeAll(w: *std.Io.Writer, sum: Slot, workers: u64) std.Io.Writer.Error!void {
    try metric(w, "zigcorn_connections_open", "gauge", "Open client connections.", sum.connections_open);
    try metric(w, "zigcorn_requests_in_flight", "gauge", "Requests being served.", sum.requests_in_flight);
    try w.writeAll("# HELP zigcorn_requests_total Responses sent, by status class.\n# TYPE zigcorn_requests_total counter\n");
    for (sum.responses, 0..) |n, i| try w.print("zigcorn_requests_total{{status_class=\"{d}xx\"}} {d}\n", .{ i + 1, n });
    try metric(w, "zigcorn_received_bytes_total", "counter", "Bytes read from clients.", sum.received_bytes);
    try metric(w, "zigcorn_sent_bytes_total", "counter", "Bytes written to clients.", sum.sent_bytes);
    try w.writeAll("# HELP zigcorn_request_duration_seconds From request head to the end of the response.\n# TYPE zigcorn_request_duration_seconds histogram\n");
    var cumulative: u64 = 0;
    for (bucket_labels, 0..) |label, i| {
        cumulative += sum.duration_buckets[i];
        try w.print("zigcorn_request_duration_seconds_bucket{{le=\"{s}\"}} {d}\n", .{ label, cumulative });
    }
    cumulative += sum.duration_buckets[bucket_labels.len];
    try w.print("zigcorn_request_duration_seconds_bucket{{le=\"+Inf\"}} {d}\n", .{cumulative});
    try w.print("zigcorn_request_duration_seconds_sum {d}.{d:0>6}\n", .{ sum.duration_sum_us / 1_000_000, sum.duration_sum_us % 1_000_000 });
    try w.print("zigcorn_request_duration_seconds_count {d}\n", .{cumulative});
    try metric(w, "zigcorn_resident_memory_bytes", "gauge", "Resident memory of the worker processes.", sum.resident_bytes);
    try metric(w, "zigcorn_workers", "gauge", "Worker processes serving.", workers);
    try metric(w, "zigcorn_accept_pauses_total", "counter", "Times accepting paused for a second: out of file descriptors or memory.", sum.accept_pauses);
    try metric(w, "zigcorn_io_uring_buffer_waits_total", "counter", "io_uring: times a receive found the buffer ring empty and waited for a buffer (raise --io-uring-buffers).", sum.io_buffer_waits);
    try metric(w, "zigcorn_worker_restarts_total", "counter", "Workers replaced after dying.", if (header) |h| h.worker_restarts else 0);
}

fn metric(w: *std.Io.Writer, name: []const u8, kind: []const u8, help: []const u8, value: u64) std.Io.Writer.Error!void {
    try w.print("# HELP {s} {s}\n# TYPE {s} {s}\n{s} {d}\n", .{ name, help, name, kind, name, value });
}

test "render sums slots and keeps buckets cumulative" {
    try init(3);
    _ = claim(0, 1);
    _ = claim(2, 3);
    slot(0).?.connections_open = 2;
    slot(0).?.observe(200, 800);
    slot(1).?.observe(503, 3_000_000);
    slot(1).?.connections_open = 7; // not live: its gauges do not count
    retire(2, true);
    var buf: [4096]u8 = undefined;
    const text = try render(&buf);
    try std.testing.expect(std.mem.indexOf(u8, text, "zigcorn_connections_open 2\n") != null);
    try std.testing.expect(std.mem.indexOf(u8, text, "zigcorn_requests_total{status_class=\"2xx\"} 1\n") != null);
    try std.testing.expect(std.mem.indexOf(u8, text, "zigcorn_requests_total{status_class=\"5xx\"} 1\n") != null);
    try std.testing.expect(std.mem.indexOf(u8, text, "zigcorn_request_duration_seconds_bucket{le=\"0.001\"} 1\n") != null);
    try std.testing.expect(std.mem.indexOf(u8, text, "zigcorn_request_duration_seconds_bucket{le=\"2.5\"} 1\n") != null);
    try std.testing.expect(std.mem.indexOf(u8, text, "zigcorn_request_duration_seconds_bucket{le=\"5\"} 2\n") != null);
    try std.testing.expect(std.mem.indexOf(u8, text, "zigcorn_request_duration_seconds_sum 3.000800\n") != null);
    try std.testing.expect(std.mem.indexOf(u8, text, "zigcorn_worker_restarts_total 1\n") != null);
    try std.testing.expect(std.mem.indexOf(u8, text, "zigcorn_workers 1\n") != null);
    try std.testing.expectError(error.NoSpace, render(buf[0..100]));
}
