//! qlog (`--http3-qlog-dir`): one file per QUIC connection, for qvis and other qlog tools.
//!
//! Format: qlog 0.3 (draft-ietf-quic-qlog-main-schema-05 with the QUIC events of
//! draft-ietf-quic-qlog-quic-events-05, as quiche's qlog 0.3 writes them), the last
//! version qvis reads; later drafts renamed the `transport:` and `connectivity:` events to
//! `quic:`, which qvis does not know. Serialized as JSON-SEQ (RFC 7464): each record is 0x1E,
//! a JSON text and LF; the first record is the header (`qlog_format`, `qlog_version`, the
//! trace's vantage point and title), then one record per event with its time in
//! milliseconds since the connection began (`time_format: relative`). The file is named after
//! the client's original destination connection ID in hex, `.sqlog`.
//!
//! Cost: with qlog off a connection's `qlog` is null and each event site is one test of it.
//! With qlog on, events go into this buffer (`buffer_bytes`), written to the file when it is
//! full and when the connection ends, by the worker's thread (a blocking write: qlog is for
//! debugging). A failed open or write is reported once through `Warn` and ends qlog for that
//! connection, never the connection.
const std = @import("std");
const sys = @import("../os/sys.zig");
const frames = @import("frames.zig");
const packet = @import("packet.zig");
const transport_params = @import("transport_params.zig");
const ack_ranges = @import("ack_ranges.zig");

pub const Space = ack_ranges.Space;
pub const version = "0.3";
/// Events held before a write to the file.
pub const buffer_bytes = 32 * 1024;
/// Frames listed per packet (the rest are counted in `frames_omitted`), ACK ranges per ACK
/// frame, reason bytes per CONNECTION_CLOSE: with them every record fits the buffer.
pub const frames_per_packet_max = 32;
pub const ack_ranges_max = 8;
pub const reason_bytes_max = 64;
/// The longest directory a file is made in (the worker's setting is shorter).
pub const dir_bytes_max = 1024;

comptime {
    // The largest frame record (NEW_CONNECTION_ID, or CONNECTION_CLOSE with its reason
    // escaped six bytes a byte) times the frames of a packet, and the packet's own fields.
    std.debug.assert(frames_per_packet_max * (reason_bytes_max * 6 + 160) + 512 <= buffer_bytes);
}

/// How a failure is reported (the worker logs it on `zigcorn.error`).
pub const Warn = struct {
    ctx: *anyopaque,
    call: *const fn (ctx: *anyopaque, text: []const u8) void,
};

pub const Owner = enum { local, remote };

/// One connection's log.
pub const Qlog = struct {
    fd: i32,
    start_us: u64,
    warn: Warn,
    failed: bool = false,
    /// The file's name (the original destination connection ID in hex), for the warning.
    name_buf: [2 * packet.cid_len_max + 6]u8 = undefined,
    name_len: u8 = 0,
    /// The last metrics logged: `metrics` logs only what changed.
    last_metrics: [4]u64 = .{ 0, 0, 0, 0 },
    len: usize = 0,
    buf: [buffer_bytes]u8 = undefined,

    /// The log of a new connection, its header written; null (after one warning) when the
    /// file cannot be made or memory runs out.
    pub fn create(
        gpa: std.mem.Allocator,
        dir: []const u8,
        odcid: []const u8,
        now_us: u64,
        warn: Warn,
    ) ?*Qlog {
        std.debug.assert(odcid.len <= packet.cid_len_max);
        var name_buf: [2 * packet.cid_len_max + 6]u8 = undefined;
        const name = std.fmt.bufPrint(&name_buf, "{x}.sqlog", .{odcid}) catch unreachable;
        const hex = name[0 .. 2 * odcid.len];
        var path_buf: [dir_bytes_max + 1 + name_buf.len + 1]u8 = undefined;
        if (dir.len > dir_bytes_max) {
            report(warn, "qlog: the directory's path is too long: no qlog", .{});
            return null;
        }
        const path = std.fmt.bufPrintZ(&path_buf, "{s}/{s}", .{ dir, name }) catch unreachable;
        const fd = switch (sys.createFile(path.ptr)) {
            .ok => |fd| fd,
            .err => |e| {
                report(warn, "qlog: cannot create {s} ({s}): no qlog for this connection", .{
                    path, @tagName(e),
                });
                return null;
            },
        };
        const q = gpa.create(Qlog) catch {
            sys.close(fd);
            report(warn, "qlog: out of memory: no qlog for this connection", .{});
            return null;
        };
        q.* = .{ .fd = fd, .start_us = now_us, .warn = warn };
        @memcpy(q.name_buf[0..name.len], name);
        q.name_len = @intCast(name.len);
        q.header(q.name_buf[0..hex.len]);
        return q;
    }

    /// Writes what is buffered and closes the file.
    pub fn destroy(q: *Qlog, gpa: std.mem.Allocator) void {
        q.flush();
        sys.close(q.fd);
        gpa.destroy(q);
    }

    fn report(warn: Warn, comptime fmt: []const u8, args: anytype) void {
        var buf: [dir_bytes_max + 160]u8 = undefined;
        const text = std.fmt.bufPrint(&buf, fmt, args) catch fmt;
        warn.call(warn.ctx, text);
    }

    /// Writes the buffer to the file; a failure ends qlog for this connection (one warning).
    pub fn flush(q: *Qlog) void {
        if (q.failed) return;
        var off: usize = 0;
        while (off < q.len) {
            const iov = [_]std.posix.iovec_const{.{ .base = q.buf[off..].ptr, .len = q.len - off }};
            switch (sys.writev(q.fd, &iov)) {
                .ok => |n| off += n,
                .err => |e| {
                    q.failed = true;
                    const name = q.name_buf[0..q.name_len];
                    report(q.warn, "qlog: writing {s} failed ({s}): qlog stops for this " ++
                        "connection", .{ name, @tagName(e) });
                    return;
                },
            }
        }
        q.len = 0;
    }

    fn header(q: *Qlog, odcid_hex: []const u8) void {
        var w = std.Io.Writer.fixed(&q.buf);
        w.print("\x1e{{\"qlog_version\":\"" ++ version ++ "\",\"qlog_format\":\"JSON-SEQ\"," ++
            "\"title\":\"zigcorn qlog\",\"trace\":{{\"title\":\"zigcorn {s}\"," ++
            "\"vantage_point\":{{\"name\":\"zigcorn\",\"type\":\"server\"}}," ++
            "\"common_fields\":{{\"ODCID\":\"{s}\",\"time_format\":\"relative\"," ++
            "\"reference_time\":{d}}}}}}}\n", .{
            odcid_hex,
            odcid_hex,
            std.time.milliTimestamp(),
        }) catch unreachable; // the buffer is empty and far larger
        q.len = w.end;
    }

    /// One event record: its time, `name`, and the data `body(w, args)` writes inside the
    /// `data` object. A record that does not fit what is left flushes the buffer first.
    fn event(q: *Qlog, comptime name: []const u8, args: anytype, comptime body: anytype) void {
        if (q.failed) return;
        const t_us = sys.monotonicUs() -| q.start_us;
        for (0..2) |_| {
            var w = std.Io.Writer.fixed(q.buf[q.len..]);
            if (record(&w, name, t_us, args, body)) {
                q.len += w.end;
                return;
            } else |_| {}
            // Every record fits an empty buffer (see the comptime check above); were one not
            // to, it is left out rather than the connection or the worker stopped for it.
            if (q.len == 0) return;
            q.flush();
            if (q.failed) return;
        }
    }

    fn record(
        w: *std.Io.Writer,
        comptime name: []const u8,
        t_us: u64,
        args: anytype,
        comptime body: anytype,
    ) std.Io.Writer.Error!void {
        try w.print("\x1e{{\"time\":{d}.{d:0>3},\"name\":\"" ++ name ++ "\",\"data\":{{", .{
            t_us / 1000,
            t_us % 1000,
        });
        try body(w, args);
        try w.writeAll("}}\n");
    }

    // ---- events ----------------------------------------------------------------------------

    /// connectivity:connection_started: the addresses as text, the IDs as bytes.
    pub fn started(q: *Qlog, a: Started) void {
        q.event("connectivity:connection_started", a, Started.write);
    }

    pub const Started = struct {
        ip_version: []const u8,
        src_ip: []const u8,
        src_port: u16,
        dst_ip: []const u8,
        dst_port: u16,
        src_cid: []const u8,
        dst_cid: []const u8,

        fn write(w: *std.Io.Writer, a: Started) !void {
            try w.print("\"ip_version\":\"{s}\",\"src_ip\":\"{s}\",\"src_port\":{d}," ++
                "\"dst_ip\":\"{s}\",\"dst_port\":{d},\"protocol\":\"QUIC\"", .{
                a.ip_version, a.src_ip, a.src_port, a.dst_ip, a.dst_port,
            });
            try w.print(",\"src_cid\":\"{x}\",\"dst_cid\":\"{x}\"", .{ a.src_cid, a.dst_cid });
        }
    };

    /// transport:parameters_set with ours (`config`: the connection's `Config`).
    pub fn localParameters(q: *Qlog, config: anytype) void {
        const p: transport_params.Params = .{
            .max_idle_timeout_ms = config.max_idle_timeout_ms,
            .max_udp_payload_size = config.max_udp_payload_size,
            .initial_max_data = config.initial_max_data,
            .initial_max_stream_data_bidi_remote = config.initial_max_stream_data,
            .initial_max_stream_data_uni = config.initial_max_stream_data,
            .initial_max_streams_bidi = config.initial_max_streams_bidi,
            .initial_max_streams_uni = config.initial_max_streams_uni,
            .ack_delay_exponent = config.ack_delay_exponent,
            .max_ack_delay_ms = config.max_ack_delay_ms,
            .active_connection_id_limit = config.active_connection_id_limit,
        };
        q.parameters(.local, &p);
    }

    /// transport:parameters_set: ours or the client's transport parameters.
    pub fn parameters(q: *Qlog, owner: Owner, p: *const transport_params.Params) void {
        q.event("transport:parameters_set", .{ owner, p }, writeParameters);
    }

    const ParamsArgs = struct { Owner, *const transport_params.Params };

    fn writeParameters(w: *std.Io.Writer, a: ParamsArgs) !void {
        const p = a[1];
        try w.print("\"owner\":\"{s}\",\"max_idle_timeout\":{d},\"max_udp_payload_size\":{d}," ++
            "\"ack_delay_exponent\":{d},\"max_ack_delay\":{d}," ++
            "\"active_connection_id_limit\":{d}," ++
            "\"disable_active_migration\":{},\"initial_max_data\":{d}," ++
            "\"initial_max_stream_data_bidi_local\":{d}," ++
            "\"initial_max_stream_data_bidi_remote\":{d},\"initial_max_stream_data_uni\":{d}," ++
            "\"initial_max_streams_bidi\":{d},\"initial_max_streams_uni\":{d}", .{
            @tagName(a[0]),
            p.max_idle_timeout_ms,
            p.max_udp_payload_size,
            p.ack_delay_exponent,
            p.max_ack_delay_ms,
            p.active_connection_id_limit,
            p.disable_active_migration,
            p.initial_max_data,
            p.initial_max_stream_data_bidi_local,
            p.initial_max_stream_data_bidi_remote,
            p.initial_max_stream_data_uni,
            p.initial_max_streams_bidi,
            p.initial_max_streams_uni,
        });
    }

    /// transport:packet_sent: a packet's plaintext frames, before it is sealed.
    pub fn packetSent(q: *Qlog, space: Space, pn: u64, payload: []const u8) void {
        const p: Packet = .{ .space = space, .pn = pn, .payload = payload, .sender = .server };
        q.event("transport:packet_sent", p, Packet.write);
    }

    /// transport:packet_received: an opened packet's frames, before they are processed.
    pub fn packetReceived(q: *Qlog, space: Space, pn: u64, payload: []const u8) void {
        const p: Packet = .{ .space = space, .pn = pn, .payload = payload, .sender = .client };
        q.event("transport:packet_received", p, Packet.write);
    }

    /// recovery:packet_lost.
    pub fn packetLost(q: *Qlog, space: Space, pn: u64) void {
        q.event("recovery:packet_lost", .{ space, pn }, writeLost);
    }

    fn writeLost(w: *std.Io.Writer, a: struct { Space, u64 }) !void {
        try w.print("\"header\":{{\"packet_type\":\"{s}\",\"packet_number\":{d}}}", .{
            packetType(a[0]),
            a[1],
        });
    }

    /// recovery:metrics_updated, when one of them changed (`recovery`: the connection's
    /// `Recovery`).
    pub fn metrics(q: *Qlog, recovery: anytype) void {
        const now = [4]u64{
            recovery.cc.cwnd_bytes,
            recovery.cc.bytes_in_flight,
            recovery.rtt.smoothed_us,
            recovery.rtt.latest_us,
        };
        if (std.mem.eql(u64, &now, &q.last_metrics)) return;
        q.last_metrics = now;
        q.event("recovery:metrics_updated", .{ now, recovery.rtt.min_us }, writeMetrics);
    }

    fn writeMetrics(w: *std.Io.Writer, a: struct { [4]u64, u64 }) !void {
        const m = a[0];
        try w.print("\"congestion_window\":{d},\"bytes_in_flight\":{d},", .{ m[0], m[1] });
        try writeMs(w, "smoothed_rtt", m[2]);
        try w.writeByte(',');
        try writeMs(w, "latest_rtt", m[3]);
        try w.writeByte(',');
        try writeMs(w, "min_rtt", a[1]);
    }

    /// connectivity:connection_closed: the code the connection ended with (0 and not `app`
    /// for a silent close: an idle or handshake timeout).
    pub fn closed(q: *Qlog, code: u64, app: bool) void {
        q.event("connectivity:connection_closed", .{ code, app }, writeClosed);
    }

    fn writeClosed(w: *std.Io.Writer, a: struct { u64, bool }) !void {
        const field = if (a[1]) "application_code" else "connection_code";
        try w.print("\"{s}\":{d}", .{ field, a[0] });
    }
};

fn packetType(space: Space) []const u8 {
    return switch (space) {
        .initial => "initial",
        .handshake => "handshake",
        .application => "1RTT",
    };
}

fn packetKind(space: Space) packet.Kind {
    return switch (space) {
        .initial => .initial,
        .handshake => .handshake,
        .application => .one_rtt,
    };
}

/// Microseconds as a field in milliseconds (qlog's unit), three decimals.
fn writeMs(w: *std.Io.Writer, comptime name: []const u8, us: u64) !void {
    try w.print("\"" ++ name ++ "\":{d}.{d:0>3}", .{ us / 1000, us % 1000 });
}

const Packet = struct {
    space: Space,
    pn: u64,
    payload: []const u8,
    sender: frames.Sender,

    fn write(w: *std.Io.Writer, p: Packet) !void {
        try w.print("\"header\":{{\"packet_type\":\"{s}\",\"packet_number\":{d}}}," ++
            "\"raw\":{{\"payload_length\":{d}}},\"frames\":[", .{
            packetType(p.space),
            p.pn,
            p.payload.len,
        });
        var it = frames.Iterator.init(p.payload, packetKind(p.space), p.sender);
        var listed: usize = 0;
        var omitted: usize = 0;
        while (it.next() catch null) |f| {
            if (listed == frames_per_packet_max) {
                omitted += 1;
                continue;
            }
            if (listed > 0) try w.writeByte(',');
            try writeFrame(w, f);
            listed += 1;
        }
        try w.writeByte(']');
        if (omitted > 0) try w.print(",\"frames_omitted\":{d}", .{omitted});
    }
};

fn writeFrame(w: *std.Io.Writer, f: frames.Frame) !void {
    try w.print("{{\"frame_type\":\"{s}\"", .{frameName(f)});
    switch (f) {
        .padding => |n| try w.print(",\"length\":{d}", .{n}),
        .ping, .handshake_done => {},
        .ack => |a| {
            try w.writeAll(",\"acked_ranges\":[");
            var it = a.ranges();
            var n: usize = 0;
            while (it.next()) |r| : (n += 1) {
                if (n == ack_ranges_max) break;
                if (n > 0) try w.writeByte(',');
                try w.print("[{d},{d}]", .{ r.smallest, r.largest });
            }
            try w.writeByte(']');
        },
        .reset_stream => |r| try w.print(
            ",\"stream_id\":{d},\"error_code\":{d},\"final_size\":{d}",
            .{ r.stream_id, r.error_code, r.final_size },
        ),
        .stop_sending => |s| try w.print(",\"stream_id\":{d},\"error_code\":{d}", .{
            s.stream_id, s.error_code,
        }),
        .crypto => |c| try w.print(",\"offset\":{d},\"length\":{d}", .{ c.offset, c.data.len }),
        .new_token => |t| try w.print(",\"token\":{{\"raw\":{{\"length\":{d}}}}}", .{t.len}),
        .stream => |s| try w.print(",\"stream_id\":{d},\"offset\":{d},\"length\":{d},\"fin\":{}", .{
            s.stream_id, s.offset, s.data.len, s.fin,
        }),
        .max_data => |m| try w.print(",\"maximum\":{d}", .{m}),
        .max_stream_data => |m| try w.print(",\"stream_id\":{d},\"maximum\":{d}", .{
            m.stream_id, m.max,
        }),
        .max_streams => |m| try w.print(",\"stream_type\":\"{s}\",\"maximum\":{d}", .{
            streamType(m.bidi), m.max,
        }),
        .data_blocked => |l| try w.print(",\"limit\":{d}", .{l}),
        .stream_data_blocked => |b| try w.print(",\"stream_id\":{d},\"limit\":{d}", .{
            b.stream_id, b.limit,
        }),
        .streams_blocked => |b| try w.print(",\"stream_type\":\"{s}\",\"limit\":{d}", .{
            streamType(b.bidi), b.limit,
        }),
        .new_connection_id => |n| try w.print(",\"sequence_number\":{d},\"retire_prior_to\":{d}," ++
            "\"connection_id_length\":{d},\"connection_id\":\"{x}\"", .{
            n.seq, n.retire_prior_to, n.cid.len, n.cid,
        }),
        .retire_connection_id => |s| try w.print(",\"sequence_number\":{d}", .{s}),
        .path_challenge, .path_response => |d| try w.print(",\"data\":\"{x}\"", .{d}),
        .connection_close => |c| {
            try w.print(",\"error_space\":\"{s}\",\"error_code\":{d},\"raw_error_code\":{d}", .{
                if (c.application) "application" else "transport", c.error_code, c.error_code,
            });
            if (!c.application) try w.print(",\"trigger_frame_type\":{d}", .{c.frame_type});
            try w.writeAll(",\"reason\":\"");
            try writeEscaped(w, c.reason[0..@min(c.reason.len, reason_bytes_max)]);
            try w.writeByte('"');
        },
        .datagram => |d| try w.print(",\"length\":{d}", .{d.data.len}),
    }
    try w.writeByte('}');
}

fn frameName(f: frames.Frame) []const u8 {
    return switch (f) {
        .new_connection_id => "new_connection_id",
        .retire_connection_id => "retire_connection_id",
        .connection_close => "connection_close",
        else => @tagName(f),
    };
}

fn streamType(bidi: bool) []const u8 {
    return if (bidi) "bidirectional" else "unidirectional";
}

/// A peer's bytes as a JSON string's contents: printable ASCII as is, the rest escaped.
fn writeEscaped(w: *std.Io.Writer, bytes: []const u8) !void {
    for (bytes) |b| {
        if (b == '"' or b == '\\') {
            try w.writeByte('\\');
            try w.writeByte(b);
        } else if (b >= 0x20 and b < 0x7f) {
            try w.writeByte(b);
        } else {
            try w.print("\\u{x:0>4}", .{b});
        }
    }
}

// ---- tests ----------------------------------------------------------------------------------

const testing = std.testing;

const TestWarn = struct {
    count: usize = 0,
    fn call(ctx: *anyopaque, text: []const u8) void {
        _ = text;
        const self: *TestWarn = @ptrCast(@alignCast(ctx));
        self.count += 1;
    }
};

/// A temporary directory for the logs, and the warnings counted.
const TestDir = struct {
    tmp: testing.TmpDir,
    buf: [std.fs.max_path_bytes]u8,
    path: []const u8,
    warned: TestWarn,

    fn init(t: *TestDir) !void {
        t.tmp = testing.tmpDir(.{});
        errdefer t.tmp.cleanup();
        t.path = try t.tmp.dir.realpath(".", &t.buf);
        t.warned = .{};
    }

    fn warner(t: *TestDir) Warn {
        return .{ .ctx = &t.warned, .call = TestWarn.call };
    }
};

test "qlog: header and events are JSON-SEQ records, and a failed write warns once" {
    var t: TestDir = undefined;
    try t.init();
    defer t.tmp.cleanup();
    const dir = t.path;
    const warn = t.warner();
    const q = Qlog.create(testing.allocator, dir, &.{ 0xab, 0x01 }, sys.monotonicUs(), warn).?;
    // A STREAM frame (type 0x0f: offset, length, fin), then PADDING.
    const payload = [_]u8{ 0x0f, 0x04, 0x10, 0x02, 'h', 'i', 0x00, 0x00 };
    q.packetReceived(.application, 7, &payload);
    q.closed(0x100, true);
    q.destroy(testing.allocator);
    const text = try t.tmp.dir.readFileAlloc(testing.allocator, "ab01.sqlog", 1 << 16);
    defer testing.allocator.free(text);
    var records = std.mem.splitScalar(u8, text, 0x1e);
    try testing.expectEqualStrings("", records.next().?);
    var n: usize = 0;
    while (records.next()) |r| : (n += 1) {
        try testing.expect(r[r.len - 1] == '\n');
        const parsed = try std.json.parseFromSlice(std.json.Value, testing.allocator, r, .{});
        parsed.deinit();
    }
    try testing.expectEqual(@as(usize, 3), n);
    try testing.expect(std.mem.indexOf(u8, text, "\"frame_type\":\"stream\",\"stream_id\":4," ++
        "\"offset\":16,\"length\":2,\"fin\":true") != null);
    try testing.expect(std.mem.indexOf(u8, text, "\"application_code\":256") != null);
    try testing.expectEqual(@as(usize, 0), t.warned.count);

    // A directory that is not there: one warning, no log.
    const missing = "/nonexistent-qlog-dir";
    try testing.expect(Qlog.create(testing.allocator, missing, &.{1}, 0, warn) == null);
    try testing.expectEqual(@as(usize, 1), t.warned.count);
}

test "qlog: a full buffer is written out; a write that fails ends qlog with one warning" {
    var t: TestDir = undefined;
    try t.init();
    defer t.tmp.cleanup();
    const dir = t.path;
    const warn = t.warner();
    const q = Qlog.create(testing.allocator, dir, &.{ 0x01, 0x02, 0x03, 0x04 }, 0, warn).?;
    // 62 bytes (a one-byte length), each escaped: the largest records there are.
    const reason = [_]u8{ '"', 0x01 } ** 31;
    var payload_buf: [4096]u8 = undefined;
    var wr = std.Io.Writer.fixed(&payload_buf);
    for (0..frames_per_packet_max + 3) |_| {
        try wr.writeAll(&.{ 0x1d, 0x01, reason.len });
        try wr.writeAll(&reason);
    }
    // More records than the buffer holds: it is written out in between, nothing is lost.
    for (0..8) |i| q.packetReceived(.application, i, wr.buffered());
    try testing.expect(q.len < buffer_bytes);
    q.flush();
    // The descriptor closed under it: the next write fails, once reported, then nothing.
    const fd = q.fd;
    q.fd = -1;
    for (0..8) |i| q.packetReceived(.application, i, wr.buffered());
    q.flush();
    try testing.expect(q.failed);
    try testing.expectEqual(@as(usize, 1), t.warned.count);
    q.fd = fd;
    q.destroy(testing.allocator);
    const text = try t.tmp.dir.readFileAlloc(testing.allocator, "01020304.sqlog", 1 << 20);
    defer testing.allocator.free(text);
    var records = std.mem.splitScalar(u8, text, 0x1e);
    _ = records.next();
    var n: usize = 0;
    while (records.next()) |r| : (n += 1) {
        const parsed = try std.json.parseFromSlice(std.json.Value, testing.allocator, r, .{});
        defer parsed.deinit();
        if (n == 0) continue;
        const data = parsed.value.object.get("data").?.object;
        const listed = data.get("frames").?.array.items.len;
        try testing.expectEqual(@as(usize, frames_per_packet_max), listed);
        try testing.expectEqual(@as(i64, 3), data.get("frames_omitted").?.integer);
    }
    try testing.expectEqual(@as(usize, 9), n);
}
