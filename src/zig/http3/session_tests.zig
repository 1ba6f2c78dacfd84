//! Unit tests of the HTTP/3 session on byte slices: a recording fake of the agreed QUIC
//! connection interface (streams as byte buffers, events queued by the test) and an
//! owner that logs every callback as a line of text. No QUIC file, no socket.
const std = @import("std");
const testing = std.testing;
const session_mod = @import("session.zig");
const frames = @import("frames.zig");
const qpack = @import("qpack.zig");
const qpack_encoder = @import("qpack_encoder.zig");
const qpack_decoder = @import("qpack_decoder.zig");
const Header = qpack.Header;
const ErrorCode = frames.ErrorCode;

// ---- the fake transport (the agreed interface, as quic/connection.zig provides it) -----

pub const StreamError = error{ UnknownStream, StreamClosed, StreamLimit };
pub const Event = union(enum) {
    readable: u64,
    writable: u64,
    reset: struct { id: u64, code: u64, final_size: u64 },
    stop_sending: struct { id: u64, code: u64 },
    handshake_done,
    closed: struct { code: u64, app: bool },
    datagram,
};

const FakeStream = struct {
    in: std.ArrayListUnmanaged(u8) = .empty,
    in_at: usize = 0,
    in_fin: bool = false,
    fin_read: bool = false,
    out: std.ArrayListUnmanaged(u8) = .empty,
    out_fin: bool = false,
    reset_code: ?u64 = null,
    stop_code: ?u64 = null,
};

const Fake = struct {
    gpa: std.mem.Allocator = testing.allocator,
    events: std.ArrayListUnmanaged(Event) = .empty,
    event_at: usize = 0,
    streams: std.AutoArrayHashMapUnmanaged(u64, FakeStream) = .empty,
    next_uni: u64 = 3,
    /// Bytes the next writes accept in all (backpressure when small).
    write_room: usize = std.math.maxInt(usize),
    /// Bytes one read returns at most.
    read_chunk: usize = std.math.maxInt(usize),
    close_code: ?u64 = null,

    fn deinit(f: *Fake) void {
        for (f.streams.values()) |*st| {
            st.in.deinit(f.gpa);
            st.out.deinit(f.gpa);
        }
        f.streams.deinit(f.gpa);
        f.events.deinit(f.gpa);
    }

    fn stream(f: *Fake, id: u64) *FakeStream {
        const gop = f.streams.getOrPut(f.gpa, id) catch @panic("test memory");
        if (!gop.found_existing) gop.value_ptr.* = .{};
        return gop.value_ptr;
    }

    pub fn push(f: *Fake, ev: Event) void {
        f.events.append(f.gpa, ev) catch @panic("test memory");
    }

    /// The client sends `bytes` (and maybe its FIN) on `id`.
    pub fn send(f: *Fake, id: u64, bytes: []const u8, fin: bool) void {
        const st = f.stream(id);
        st.in.appendSlice(f.gpa, bytes) catch @panic("test memory");
        if (fin) st.in_fin = true;
        f.push(.{ .readable = id });
    }

    pub fn out(f: *Fake, id: u64) []const u8 {
        return if (f.streams.getPtr(id)) |st| st.out.items else "";
    }

    pub fn nextEvent(f: *Fake) ?Event {
        if (f.event_at == f.events.items.len) return null;
        defer f.event_at += 1;
        return f.events.items[f.event_at];
    }

    pub fn streamRead(f: *Fake, id: u64, buf: []u8) StreamError!struct { n: usize, fin: bool } {
        const st = f.streams.getPtr(id) orelse return error.UnknownStream;
        if (st.stop_code != null) return error.StreamClosed;
        const avail = st.in.items[st.in_at..];
        const n = @min(avail.len, buf.len, f.read_chunk);
        @memcpy(buf[0..n], avail[0..n]);
        st.in_at += n;
        const fin = st.in_fin and st.in_at == st.in.items.len and !st.fin_read;
        if (fin) st.fin_read = true;
        return .{ .n = n, .fin = fin };
    }

    pub fn streamWrite(f: *Fake, id: u64, bytes: []const u8, fin: bool) StreamError!usize {
        const st = f.stream(id);
        if (st.reset_code != null or st.out_fin) return error.StreamClosed;
        const n = @min(bytes.len, f.write_room);
        f.write_room -= n;
        st.out.appendSlice(f.gpa, bytes[0..n]) catch @panic("test memory");
        if (fin and n == bytes.len) st.out_fin = true;
        return n;
    }

    pub fn streamReset(f: *Fake, id: u64, code: u64) void {
        const st = f.stream(id);
        if (st.reset_code == null) st.reset_code = code;
    }

    pub fn streamStopSending(f: *Fake, id: u64, code: u64) void {
        const st = f.stream(id);
        if (st.stop_code == null) st.stop_code = code;
    }

    pub fn streamReceiveOver(f: *Fake, id: u64) bool {
        const st = f.streams.getPtr(id) orelse return false;
        return st.stop_code != null or st.fin_read;
    }

    pub fn openUni(f: *Fake) StreamError!u64 {
        defer f.next_uni += 4;
        _ = f.stream(f.next_uni);
        return f.next_uni;
    }

    pub fn closeApplication(f: *Fake, code: u64, reason: []const u8) void {
        _ = reason;
        std.debug.assert(f.close_code == null);
        f.close_code = code;
    }
};

// ---- the recording owner -----------------------------------------------------------------

const Owner = struct {
    log: std.ArrayListUnmanaged(u8) = .empty,
    /// Set by the test: what the owner does from inside `onRequest`.
    session: ?*Session = null,
    pause_on_request: bool = false,
    resume_on_request: ?u64 = null,

    fn print(o: *Owner, comptime fmt: []const u8, args: anytype) void {
        o.log.print(testing.allocator, fmt, args) catch @panic("test memory");
    }

    pub fn onRequest(o: *Owner, id: u64, head: *const session_mod.Head) void {
        o.print("request {d} {s} {s} ?{s} @{s}\n", .{ id, head.method, head.path, head.query, head.authority orelse "-" });
        for (head.headers) |h| o.print("  {s}: {s}\n", .{ h.name, h.value });
        if (o.pause_on_request) o.session.?.pauseReading(id);
        if (o.resume_on_request) |other| o.session.?.resumeReading(other);
    }
    pub fn onBody(o: *Owner, id: u64, bytes: []const u8, fin: bool) void {
        o.print("body {d} \"{s}\"{s}\n", .{ id, bytes, if (fin) " fin" else "" });
    }
    pub fn onTrailers(o: *Owner, id: u64, list: []const Header) void {
        o.print("trailers {d}\n", .{id});
        for (list) |h| o.print("  {s}: {s}\n", .{ h.name, h.value });
    }
    pub fn onReset(o: *Owner, id: u64, code: u64) void {
        o.print("reset {d} 0x{x}\n", .{ id, code });
    }
    pub fn onGoaway(o: *Owner, id: u64) void {
        o.print("goaway {d}\n", .{id});
    }
    pub fn onWritable(o: *Owner, id: u64) void {
        o.print("writable {d}\n", .{id});
    }

    pub fn take(o: *Owner) []const u8 {
        const S = struct {
            var copy: [4096]u8 = undefined;
        };
        const n = @min(o.log.items.len, S.copy.len);
        @memcpy(S.copy[0..n], o.log.items[0..n]);
        o.log.clearRetainingCapacity();
        return S.copy[0..n];
    }
};

const Session = session_mod.Session(Fake, Owner);

pub const Harness = struct {
    fake: Fake = .{},
    owner: Owner = .{},
    s: *Session = undefined,
    /// The session points at it: `h` does not move after `init`.
    config: session_mod.Config = .{},

    pub fn init(h: *Harness, config: session_mod.Config) !void {
        return h.initWith(config, testing.allocator);
    }

    /// As `init`, the session's memory from `gpa` (a `FailingAllocator` in some tests).
    pub fn initWith(h: *Harness, config: session_mod.Config, gpa: std.mem.Allocator) !void {
        h.* = .{ .config = config };
        h.s = try Session.create(gpa, &h.fake, &h.owner, &h.config);
        h.owner.session = h.s;
        h.fake.push(.handshake_done);
        h.s.run();
    }

    pub fn deinit(h: *Harness) void {
        h.s.destroy();
        h.fake.deinit();
        h.owner.log.deinit(testing.allocator);
    }

    /// The client's control stream (id 2) with an empty SETTINGS.
    pub fn clientControl(h: *Harness) void {
        h.fake.send(2, &.{ 0x00, 0x04, 0x00 }, false);
        h.s.run();
    }

    pub fn expectLog(h: *Harness, expected: []const u8) !void {
        try testing.expectEqualStrings(expected, h.owner.take());
    }

    pub fn expectStreamError(h: *Harness, id: u64, code: ErrorCode) !void {
        const st = h.fake.streams.getPtr(id).?;
        try testing.expectEqual(@as(?u64, @intFromEnum(code)), st.reset_code);
        try testing.expectEqual(@as(?u64, @intFromEnum(code)), st.stop_code);
        try testing.expectEqual(@as(?u64, null), h.fake.close_code);
    }

    pub fn expectClosed(h: *Harness, code: ErrorCode) !void {
        try testing.expectEqual(@as(?u64, @intFromEnum(code)), h.fake.close_code);
    }
};

/// A HEADERS frame whose section the static-only encoder writes (names as given).
pub fn headersFrame(buf: []u8, list: []const Header) []u8 {
    var payload: [4096]u8 = undefined;
    var p = qpack_encoder.encodePrefix(&payload) catch unreachable;
    for (list) |f| p = qpack_encoder.encodeField(&payload, p, f.name, f.value) catch unreachable;
    const n = frames.writeFrameHeader(buf, 0, .headers, p) catch unreachable;
    @memcpy(buf[n..][0..p], payload[0..p]);
    return buf[0 .. n + p];
}

pub fn dataFrame(buf: []u8, bytes: []const u8) []u8 {
    const n = frames.writeFrameHeader(buf, 0, .data, bytes.len) catch unreachable;
    @memcpy(buf[n..][0..bytes.len], bytes);
    return buf[0 .. n + bytes.len];
}

pub fn concat(buf: []u8, parts: []const []const u8) []u8 {
    var n: usize = 0;
    for (parts) |p| {
        @memcpy(buf[n..][0..p.len], p);
        n += p.len;
    }
    return buf[0..n];
}

pub const get = [_]Header{
    .{ .name = ":method", .value = "GET" },
    .{ .name = ":scheme", .value = "https" },
    .{ .name = ":authority", .value = "example.test" },
    .{ .name = ":path", .value = "/a/b?x=1" },
};

// ---- tests ---------------------------------------------------------------------------------

test "h3 session: handshake opens the control stream (SETTINGS) alone, byte for byte" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    // Control: type 0, SETTINGS (4), 13 bytes: capacity 4096 (2-byte varint 0x5000),
    // blocked 16, field section 16384 (4-byte varint), the reserved 0x40 = 0.
    try testing.expectEqualSlices(u8, &.{ 0x00, 0x04, 0x0d, 0x01, 0x50, 0x00, 0x07, 0x10, 0x06, 0x80, 0x00, 0x40, 0x00, 0x40, 0x40, 0x00 }, h.fake.out(3));
    // No QPACK streams: the encoder is static-only (none), the decoder's opens with its
    // first instruction.
    try testing.expectEqual(@as(u64, 7), h.fake.next_uni);
    // The SETTINGS we send parse back as what we advertise.
    const settings = try frames.Settings.parse(h.fake.out(3)[3..]);
    try testing.expectEqual(@as(u64, 4096), settings.qpack_max_table_capacity);
    try testing.expectEqual(@as(u64, 16384), settings.max_field_section_size);
    // A second handshake_done opens nothing more.
    h.fake.push(.handshake_done);
    h.s.run();
    try testing.expectEqual(@as(u64, 7), h.fake.next_uni);
    // Extended CONNECT advertised when enabled, no grease when off.
    var e: Harness = undefined;
    try e.init(.{ .extended_connect = true, .grease = false });
    defer e.deinit();
    try testing.expectEqualSlices(u8, &.{ 0x00, 0x04, 0x0c, 0x01, 0x50, 0x00, 0x07, 0x10, 0x06, 0x80, 0x00, 0x40, 0x00, 0x08, 0x01 }, e.fake.out(3));
}

test "h3 session: a GET reaches the owner with its fields; host from :authority" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    h.clientControl();
    var buf: [512]u8 = undefined;
    h.fake.send(0, headersFrame(&buf, &(get ++ [_]Header{ .{ .name = "accept", .value = "*/*" }, .{ .name = "user-agent", .value = "t" } })), true);
    h.s.run();
    try h.expectLog(
        \\request 0 GET /a/b ?x=1 @example.test
        \\  host: example.test
        \\  accept: */*
        \\  user-agent: t
        \\body 0 "" fin
        \\
    );
    // A static-only section (Required Insert Count 0) makes no decoder state.
    try testing.expect(h.s.decoder == null);
    try testing.expectEqual(@as(usize, 1), h.s.liveStreams());
    // The response ends the stream: its record is freed.
    try h.s.respond(0, 204, &.{});
    _ = try h.s.writeBody(0, "", true);
    try testing.expectEqual(@as(usize, 0), h.s.liveStreams());
    try testing.expect(h.fake.streams.getPtr(0).?.out_fin);
}

test "h3 session: POST body in split DATA frames, read a byte at a time, content-length kept" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    var hb: [512]u8 = undefined;
    var d1: [64]u8 = undefined;
    var d2: [64]u8 = undefined;
    var all: [1024]u8 = undefined;
    const post = [_]Header{ .{ .name = ":method", .value = "POST" }, get[1], get[2], .{ .name = ":path", .value = "/up" }, .{ .name = "content-length", .value = "11" } };
    const bytes = concat(&all, &.{ headersFrame(&hb, &post), dataFrame(&d1, "hello "), dataFrame(&d2, "world") });
    h.fake.read_chunk = 1;
    h.fake.send(0, bytes, true);
    h.s.run();
    const log = h.owner.take();
    try testing.expect(std.mem.startsWith(u8, log, "request 0 POST /up ? @example.test\n"));
    // Every body byte arrives once, in order, then the end.
    var body: std.ArrayListUnmanaged(u8) = .empty;
    defer body.deinit(testing.allocator);
    var lines = std.mem.splitScalar(u8, log, '\n');
    var fins: usize = 0;
    while (lines.next()) |line| {
        if (!std.mem.startsWith(u8, line, "body 0 \"")) continue;
        const rest = line["body 0 \"".len..];
        const q = std.mem.lastIndexOfScalar(u8, rest, '"').?;
        try body.appendSlice(testing.allocator, rest[0..q]);
        if (std.mem.endsWith(u8, line, " fin")) fins += 1;
    }
    try testing.expectEqualStrings("hello world", body.items);
    try testing.expectEqual(@as(usize, 1), fins);
}

test "h3 session: content-length mismatch either way is H3_MESSAGE_ERROR" {
    for ([_][]const u8{ "3", "20" }) |cl| {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        var hb: [512]u8 = undefined;
        var d: [64]u8 = undefined;
        var all: [1024]u8 = undefined;
        const post = [_]Header{ .{ .name = ":method", .value = "POST" }, get[1], get[2], get[3], .{ .name = "content-length", .value = cl } };
        h.fake.send(0, concat(&all, &.{ headersFrame(&hb, &post), dataFrame(&d, "hello") }), true);
        h.s.run();
        try h.expectStreamError(0, .message_error);
        const log = h.owner.take();
        try testing.expect(std.mem.endsWith(u8, log, "reset 0 0x10e\n"));
        try testing.expectEqual(@as(usize, 0), h.s.liveStreams());
    }
}

test "h3 session: request trailers, then the end; pseudo-headers in trailers refused" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    var hb: [512]u8 = undefined;
    var d: [64]u8 = undefined;
    var tb: [128]u8 = undefined;
    var all: [1024]u8 = undefined;
    const post = [_]Header{ .{ .name = ":method", .value = "POST" }, get[1], get[2], get[3] };
    h.fake.send(0, concat(&all, &.{ headersFrame(&hb, &post), dataFrame(&d, "abc"), headersFrame(&tb, &.{.{ .name = "x-sum", .value = "9" }}) }), true);
    h.s.run();
    try h.expectLog(
        \\request 0 POST /a/b ?x=1 @example.test
        \\  host: example.test
        \\body 0 "abc"
        \\trailers 0
        \\  x-sum: 9
        \\body 0 "" fin
        \\
    );
    h.fake.send(4, concat(&all, &.{ headersFrame(&hb, &post), headersFrame(&tb, &.{.{ .name = ":status", .value = "200" }}) }), true);
    h.s.run();
    try h.expectStreamError(4, .message_error);
    // A frame after the trailers is out of sequence: a connection error.
    h.fake.send(8, concat(&all, &.{ headersFrame(&hb, &post), headersFrame(&tb, &.{}), dataFrame(&d, "x") }), true);
    h.s.run();
    try h.expectClosed(.frame_unexpected);
}

test "h3 session: every malformed request of RFC 9114 4.3 is a stream error H3_MESSAGE_ERROR" {
    const H = Header;
    const connect = H{ .name = ":method", .value = "CONNECT" };
    const ws = H{ .name = ":protocol", .value = "websocket" };
    const ext_connect = [_]H{ connect, ws, get[1], get[2], get[3] };
    const cl = "content-length";
    const cases = [_][]const H{
        // pseudo-header after a regular field; unknown, response-only, repeated pseudo
        &.{ get[0], get[1], .{ .name = "accept", .value = "x" }, get[2], get[3] },
        &(get ++ [_]H{.{ .name = ":foo", .value = "x" }}),
        &(get ++ [_]H{.{ .name = ":status", .value = "200" }}),
        &(get ++ [_]H{.{ .name = ":path", .value = "/again" }}),
        // upper case names, bad name characters
        &(get ++ [_]H{.{ .name = "Accept", .value = "x" }}),
        &(get ++ [_]H{.{ .name = "a b", .value = "x" }}),
        // connection-specific fields, and te other than trailers
        &(get ++ [_]H{.{ .name = "connection", .value = "close" }}),
        &(get ++ [_]H{.{ .name = "keep-alive", .value = "5" }}),
        &(get ++ [_]H{.{ .name = "proxy-connection", .value = "x" }}),
        &(get ++ [_]H{.{ .name = "transfer-encoding", .value = "chunked" }}),
        &(get ++ [_]H{.{ .name = "upgrade", .value = "h3" }}),
        &(get ++ [_]H{.{ .name = "te", .value = "gzip" }}),
        // values: surrounding space, CR/LF, NUL
        &(get ++ [_]H{.{ .name = "x", .value = " padded" }}),
        &(get ++ [_]H{.{ .name = "x", .value = "a\r\nb" }}),
        &(get ++ [_]H{.{ .name = "x", .value = "nul\x00" }}),
        // content-length: not 1*DIGIT, a list, or a second field whatever its value
        &(get ++ [_]H{.{ .name = "content-length", .value = "-1" }}),
        &(get ++ [_]H{.{ .name = "content-length", .value = "+1" }}),
        &(get ++ [_]H{.{ .name = "content-length", .value = "1, 1" }}),
        &(get ++ [_]H{ .{ .name = "content-length", .value = "1" }, .{ .name = "content-length", .value = "2" } }),
        &(get ++ [_]H{ .{ .name = cl, .value = "1" }, .{ .name = cl, .value = "1" } }),
        &(get ++ [_]H{ .{ .name = cl, .value = "1" }, .{ .name = cl, .value = "01" } }),
        // a missing :method, :scheme or :path; an empty :path
        &.{ get[1], get[2], get[3] },
        &.{ get[0], get[2], get[3] },
        &.{ get[0], get[1], get[2] },
        &.{ get[0], get[1], get[2], .{ .name = ":path", .value = "" } },
        // https without :authority or host; :authority and host that differ
        &.{ get[0], get[1], get[3] },
        &(get ++ [_]H{.{ .name = "host", .value = "other.test" }}),
        // :protocol outside CONNECT; extended CONNECT not advertised; a plain CONNECT
        // with :path, and one without :authority
        &(get ++ [_]H{.{ .name = ":protocol", .value = "websocket" }}),
        &ext_connect,
        &.{ .{ .name = ":method", .value = "CONNECT" }, get[2], get[3] },
        &.{.{ .name = ":method", .value = "CONNECT" }},
    };
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    var hb: [1024]u8 = undefined;
    for (cases, 0..) |list, i| {
        const id: u64 = i * 4;
        h.fake.send(id, headersFrame(&hb, list), true);
        h.s.run();
        h.expectStreamError(id, .message_error) catch |err| {
            std.debug.print("case {d} was not refused\n", .{i});
            return err;
        };
    }
    // No request reached the owner, and nothing is left.
    try h.expectLog("");
    try testing.expectEqual(@as(usize, 0), h.s.liveStreams());
    // The same extended CONNECT is served once advertised.
    var e: Harness = undefined;
    try e.init(.{ .extended_connect = true });
    defer e.deinit();
    e.fake.send(0, headersFrame(&hb, &ext_connect), false);
    e.s.run();
    try testing.expect(std.mem.startsWith(u8, e.owner.take(), "request 0 CONNECT /a/b ?x=1 @example.test\n"));
}

test "h3 session: a stream that ends before its HEADERS is H3_REQUEST_INCOMPLETE; a frame cut short H3_FRAME_ERROR" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    h.fake.send(0, "", true);
    h.s.run();
    try h.expectStreamError(0, .request_incomplete);
    var hb: [512]u8 = undefined;
    const frame = headersFrame(&hb, &get);
    h.fake.send(4, frame[0 .. frame.len - 1], true);
    h.s.run();
    try h.expectClosed(.frame_error);
}

test "h3 session: a HEADERS payload or a section past SETTINGS_MAX_FIELD_SECTION_SIZE is H3_EXCESSIVE_LOAD" {
    var h: Harness = undefined;
    try h.init(.{ .field_section_bytes_max = 512 });
    defer h.deinit();
    var hb: [2048]u8 = undefined;
    const big = [_]u8{'v'} ** 600;
    h.fake.send(0, headersFrame(&hb, &(get ++ [_]Header{.{ .name = "x", .value = &big }})), true);
    h.s.run();
    try h.expectStreamError(0, .excessive_load);
    // Fits the frame but not the decoded size (32 per field counts).
    var many: [20]Header = undefined;
    for (&many) |*f| f.* = .{ .name = "x-a", .value = "1" };
    h.fake.send(4, headersFrame(&hb, &(get ++ many)), true);
    h.s.run();
    try h.expectStreamError(4, .excessive_load);
    try h.expectLog("");
}

test "h3 session: control stream rules are connection errors" {
    // A second control stream.
    {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        h.clientControl();
        h.fake.send(6, &.{ 0x00, 0x04, 0x00 }, false);
        h.s.run();
        try h.expectClosed(.stream_creation_error);
    }
    // A first frame that is not SETTINGS.
    {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        h.fake.send(2, &.{ 0x00, 0x07, 0x01, 0x00 }, false);
        h.s.run();
        try h.expectClosed(.missing_settings);
    }
    // The control stream ends, or is reset.
    for ([_]bool{ true, false }) |by_fin| {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        h.clientControl();
        if (by_fin) h.fake.send(2, "", true) else h.fake.push(.{ .reset = .{ .id = 2, .code = 0x100, .final_size = 3 } });
        h.s.run();
        try h.expectClosed(.closed_critical_stream);
    }
    // A second SETTINGS, a DATA frame, CANCEL_PUSH for a push never promised.
    for ([_][]const u8{ &.{ 0x04, 0x00 }, &.{ 0x00, 0x00 }, &.{ 0x03, 0x01, 0x00 } }, [_]ErrorCode{ .frame_unexpected, .frame_unexpected, .id_error }) |bytes, code| {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        h.clientControl();
        h.fake.send(2, bytes, false);
        h.s.run();
        try h.expectClosed(code);
    }
    // GOAWAY from the client reaches the owner; MAX_PUSH_ID accepted; going back is H3_ID_ERROR.
    {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        h.clientControl();
        h.fake.send(2, &.{ 0x0d, 0x01, 0x05, 0x07, 0x01, 0x08 }, false);
        h.s.run();
        try h.expectLog("goaway 8\n");
        try testing.expectEqual(@as(?u64, null), h.fake.close_code);
        h.fake.send(2, &.{ 0x0d, 0x01, 0x04 }, false);
        h.s.run();
        try h.expectClosed(.id_error);
    }
    // Our own control stream stopped by the peer.
    {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        h.fake.push(.{ .stop_sending = .{ .id = 3, .code = 0x100 } });
        h.s.run();
        try h.expectClosed(.closed_critical_stream);
    }
}

test "h3 session: a push stream from a client, a second encoder stream; unknown types ignored" {
    {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        h.fake.send(2, &.{ 0x01, 0x00 }, false);
        h.s.run();
        try h.expectClosed(.stream_creation_error);
    }
    {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        h.fake.send(2, &.{0x02}, false);
        h.fake.send(6, &.{0x02}, false);
        h.s.run();
        try h.expectClosed(.stream_creation_error);
    }
    {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        // A reserved type (0x21, a 2-byte varint 0x40 0x21) with bytes that would be
        // errors anywhere else: STOP_SENDING, and the bytes dropped.
        h.fake.send(2, &.{ 0x40, 0x21, 0xff, 0x00, 0x04 }, false);
        h.s.run();
        try testing.expectEqual(@as(?u64, @intFromEnum(ErrorCode.stream_creation_error)), h.fake.streams.getPtr(2).?.stop_code);
        try testing.expectEqual(@as(?u64, null), h.fake.close_code);
        // Its end frees the slot, and it is no critical stream.
        h.fake.streams.getPtr(2).?.stop_code = null;
        h.fake.send(2, "", true);
        h.s.run();
        try testing.expectEqual(@as(?u64, null), h.fake.close_code);
    }
}

test "h3 session: response headers, body and trailers, byte for byte" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    var hb: [512]u8 = undefined;
    h.fake.send(0, headersFrame(&hb, &get), true);
    h.s.run();
    _ = h.owner.take();
    try h.s.earlyHint(0, &.{.{ .name = "link", .value = "</s.css>" }});
    try h.s.respond(0, 200, &.{.{ .name = "content-type", .value = "text/plain" }});
    try testing.expectError(error.AlreadyStarted, h.s.respond(0, 200, &.{}));
    try testing.expectEqual(@as(usize, 5), try h.s.writeBody(0, "hello", false));
    try h.s.writeTrailers(0, &.{.{ .name = "a", .value = "b" }});
    var expect: [256]u8 = undefined;
    var hint: [64]u8 = undefined;
    const hp = try qpack_encoder.encodeResponse(&hint, 103, &.{.{ .name = "link", .value = "</s.css>" }});
    const want = concat(&expect, &.{
        // The 103: its own HEADERS frame first.
        &.{ 0x01, @intCast(hp) },
        hint[0..hp],
        // HEADERS: prefix 00 00, :status 200 indexed (0xd9), content-type text/plain (0xf5).
        &.{ 0x01, 0x04, 0x00, 0x00, 0xd9, 0xf5 },
        // DATA "hello".
        &.{ 0x00, 0x05 },
        "hello",
        // HEADERS trailers: a literal name "a", value "b".
        &.{ 0x01, 0x06, 0x00, 0x00, 0x21, 'a', 0x01, 'b' },
    });
    try testing.expectEqualSlices(u8, want, h.fake.out(0));
    try testing.expect(h.fake.streams.getPtr(0).?.out_fin);
    try testing.expectEqual(@as(usize, 0), h.s.liveStreams());
    try testing.expectError(error.UnknownStream, h.s.writeBody(0, "x", false));
}

test "h3 session: backpressure: a write takes what the transport accepts, writable resumes" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    var hb: [512]u8 = undefined;
    h.fake.send(0, headersFrame(&hb, &get), true);
    h.s.run();
    _ = h.owner.take();
    // Room for 4 bytes: 3 of the 6-byte HEADERS go, the rest waits in the stream.
    h.fake.write_room = 3;
    try h.s.respond(0, 200, &.{.{ .name = "content-type", .value = "text/plain" }});
    try testing.expectEqual(@as(usize, 0), try h.s.writeBody(0, "hello world", true));
    // Room again for part: the HEADERS rest, the DATA header, 4 body bytes.
    h.fake.write_room = 3 + 2 + 4;
    h.fake.push(.{ .writable = 0 });
    h.s.run();
    try h.expectLog("writable 0\n");
    try testing.expectEqual(@as(usize, 4), try h.s.writeBody(0, "hello world", true));
    try testing.expect(!h.fake.streams.getPtr(0).?.out_fin);
    // Ending the frame early would break it: the rest is owed first.
    try testing.expectError(error.FrameOpen, h.s.writeBody(0, "o", true));
    h.fake.write_room = std.math.maxInt(usize);
    try testing.expectEqual(@as(usize, 7), try h.s.writeBody(0, "o world", true));
    try testing.expectEqualSlices(u8, &.{ 0x01, 0x04, 0x00, 0x00, 0xd9, 0xf5, 0x00, 0x0b, 'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd' }, h.fake.out(0));
    try testing.expect(h.fake.streams.getPtr(0).?.out_fin);
    try testing.expectEqual(@as(usize, 0), h.s.liveStreams());
}

test "h3 session: GOAWAY names the next stream; later streams are rejected; close when drained" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    var hb: [512]u8 = undefined;
    h.fake.send(0, headersFrame(&hb, &get), true);
    h.s.run();
    _ = h.owner.take();
    h.s.goaway();
    const control = h.fake.out(3);
    try testing.expectEqualSlices(u8, &.{ 0x07, 0x01, 0x04 }, control[control.len - 3 ..]);
    h.fake.send(4, headersFrame(&hb, &get), true);
    h.s.run();
    try h.expectStreamError(4, .request_rejected);
    try h.expectLog("");
    try testing.expectEqual(@as(?u64, null), h.fake.close_code);
    try h.s.respond(0, 200, &.{});
    _ = try h.s.writeBody(0, "", true);
    try h.expectClosed(.no_error);
}

test "h3 session: a reset by the peer reaches the owner; our send side ends too" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    var hb: [512]u8 = undefined;
    h.fake.send(0, headersFrame(&hb, &get), false);
    h.s.run();
    _ = h.owner.take();
    h.fake.push(.{ .reset = .{ .id = 0, .code = 0x10c, .final_size = 10 } });
    h.s.run();
    try h.expectLog("reset 0 0x10c\n");
    try testing.expectEqual(@as(usize, 0), h.s.liveStreams());
    try testing.expectEqual(@as(?u64, @intFromEnum(ErrorCode.request_cancelled)), h.fake.streams.getPtr(0).?.reset_code);
    // STOP_SENDING on a live request: reset with the peer's code, the owner told.
    h.fake.send(4, headersFrame(&hb, &get), false);
    h.fake.push(.{ .stop_sending = .{ .id = 4, .code = 0x10c } });
    h.s.run();
    try testing.expect(std.mem.endsWith(u8, h.owner.take(), "reset 4 0x10c\n"));
    try testing.expectEqual(@as(?u64, 0x10c), h.fake.streams.getPtr(4).?.reset_code);
    // Our abort: RESET_STREAM and STOP_SENDING, the owner not told (it asked).
    h.fake.send(8, headersFrame(&hb, &get), false);
    h.s.run();
    _ = h.owner.take();
    try h.s.abort(8, .internal);
    try h.expectStreamError(8, .internal_error);
    try h.expectLog("");
    try testing.expectEqual(@as(usize, 0), h.s.liveStreams());
}

test "h3 session: rapid resets past the budget are H3_EXCESSIVE_LOAD" {
    var h: Harness = undefined;
    try h.init(.{ .resets_per_second_max = 3 });
    defer h.deinit();
    var hb: [512]u8 = undefined;
    for (0..4) |i| {
        const id: u64 = i * 4;
        h.fake.send(id, headersFrame(&hb, &get), false);
        h.fake.push(.{ .reset = .{ .id = id, .code = 0x10c, .final_size = 0 } });
        h.s.run();
    }
    try h.expectClosed(.excessive_load);
    // A new second opens a new budget.
    var g: Harness = undefined;
    try g.init(.{ .resets_per_second_max = 3 });
    defer g.deinit();
    for (0..6) |i| {
        const id: u64 = i * 4;
        g.s.setNow(i * 600);
        g.fake.send(id, headersFrame(&hb, &get), false);
        g.fake.push(.{ .reset = .{ .id = id, .code = 0x10c, .final_size = 0 } });
        g.s.run();
    }
    try testing.expectEqual(@as(?u64, null), g.fake.close_code);
}

test "h3 session: a connection error tells the owner of every request it holds" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    var hb: [512]u8 = undefined;
    h.fake.send(0, headersFrame(&hb, &get), false);
    h.s.run();
    _ = h.owner.take();
    h.fake.push(.{ .closed = .{ .code = 0x0a, .app = false } });
    h.s.run();
    try h.expectLog("reset 0 0xa\n");
    try testing.expectError(error.Closed, h.s.respond(0, 200, &.{}));
}

test "h3 session: pauseReading holds a request body until resumeReading, also from a callback" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    var hb: [512]u8 = undefined;
    var d: [64]u8 = undefined;
    var all: [1024]u8 = undefined;
    const post = [_]Header{ .{ .name = ":method", .value = "POST" }, get[1], get[2], get[3] };
    // One byte a read: the pause stops the stream right after its HEADERS.
    h.fake.read_chunk = 1;
    h.owner.pause_on_request = true;
    h.fake.send(0, concat(&all, &.{ headersFrame(&hb, &post), dataFrame(&d, "ab") }), true);
    h.s.run();
    try h.expectLog(
        \\request 0 POST /a/b ?x=1 @example.test
        \\  host: example.test
        \\
    );
    h.owner.pause_on_request = false;
    h.s.resumeReading(0);
    try h.expectLog(
        \\body 0 "a"
        \\body 0 "b"
        \\body 0 "" fin
        \\
    );
    // A request that resumes another from inside its callback: read after the event.
    h.owner.pause_on_request = true;
    h.fake.send(4, concat(&all, &.{ headersFrame(&hb, &post), dataFrame(&d, "c") }), true);
    h.s.run();
    _ = h.owner.take();
    h.owner.pause_on_request = false;
    h.owner.resume_on_request = 4;
    h.fake.send(8, headersFrame(&hb, &post), false);
    h.s.run();
    const log = h.owner.take();
    try testing.expect(std.mem.startsWith(u8, log, "request 8 POST"));
    try testing.expect(std.mem.endsWith(u8, log, "body 4 \"c\"\nbody 4 \"\" fin\n"));
}

test "h3 session: late events for streams already gone leave no record" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    var hb: [512]u8 = undefined;
    h.fake.send(0, headersFrame(&hb, &get), true);
    h.s.run();
    try h.s.respond(0, 200, &.{});
    _ = try h.s.writeBody(0, "", true);
    try testing.expectEqual(@as(usize, 0), h.s.liveStreams());
    // A readable with nothing to read, on a finished stream and on one never seen.
    h.fake.push(.{ .readable = 0 });
    h.fake.push(.{ .readable = 40 });
    h.fake.push(.{ .readable = 42 });
    h.s.run();
    try testing.expectEqual(@as(usize, 0), h.s.liveStreams());
    for (h.s.uni) |slot| try testing.expect(slot == null or slot.?.id != 42);
    _ = h.owner.take();
    // Streams that arrive out of order are both served.
    h.fake.send(8, headersFrame(&hb, &get), true);
    h.fake.send(4, headersFrame(&hb, &get), true);
    h.s.run();
    const log = h.owner.take();
    try testing.expect(std.mem.indexOf(u8, log, "request 8 GET") != null);
    try testing.expect(std.mem.indexOf(u8, log, "request 4 GET") != null);
}

test "h3 session: unknown frames on a request stream are skipped; HTTP/2's are H3_FRAME_UNEXPECTED" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    var hb: [512]u8 = undefined;
    var d: [64]u8 = undefined;
    var all: [1024]u8 = undefined;
    const post = [_]Header{ .{ .name = ":method", .value = "POST" }, get[1], get[2], get[3] };
    // A reserved frame type (0x21) before the HEADERS and between the DATA frames.
    const reserved = [_]u8{ 0x40, 0x21, 0x03, 'z', 'z', 'z' };
    var d2: [64]u8 = undefined;
    h.fake.send(0, concat(&all, &.{ &reserved, headersFrame(&hb, &post), dataFrame(&d, "a"), &reserved, dataFrame(&d2, "b") }), true);
    h.s.run();
    try testing.expect(std.mem.endsWith(u8, h.owner.take(), "body 0 \"a\"\nbody 0 \"b\"\nbody 0 \"\" fin\n"));
    try testing.expectEqual(@as(?u64, null), h.fake.close_code);
    // PRIORITY (HTTP/2's 0x02) has no HTTP/3 frame.
    h.fake.send(4, concat(&all, &.{ headersFrame(&hb, &post), &.{ 0x02, 0x00 } }), false);
    h.s.run();
    try h.expectClosed(.frame_unexpected);
}

test "h3 session: empty DATA frames past the budget are H3_EXCESSIVE_LOAD; streams past streams_max rejected" {
    var h: Harness = undefined;
    try h.init(.{ .empty_frames_per_second_max = 10, .streams_max = 1 });
    defer h.deinit();
    var hb: [512]u8 = undefined;
    var all: [1024]u8 = undefined;
    const post = [_]Header{ .{ .name = ":method", .value = "POST" }, get[1], get[2], get[3] };
    h.fake.send(0, headersFrame(&hb, &post), false);
    h.s.run();
    h.fake.send(4, headersFrame(&hb, &post), false);
    h.s.run();
    try h.expectStreamError(4, .request_rejected);
    h.fake.send(0, &([_]u8{ 0x00, 0x00 } ** 10), false);
    h.s.run();
    try testing.expectEqual(@as(?u64, null), h.fake.close_code);
    h.fake.send(0, &.{ 0x00, 0x00 }, false);
    h.s.run();
    try h.expectClosed(.excessive_load);
    _ = &all;
}

test "h3 session: a response past the peer's SETTINGS_MAX_FIELD_SECTION_SIZE is refused" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    // The client's SETTINGS: max field section size 100.
    h.fake.send(2, &.{ 0x00, 0x04, 0x03, 0x06, 0x40, 0x64 }, false);
    var hb: [512]u8 = undefined;
    h.fake.send(0, headersFrame(&hb, &get), true);
    h.s.run();
    const v = [_]u8{'v'} ** 40;
    // :status (42) + 32 + 1 + 1 = 76 fits; another 32 + 41 does not.
    try testing.expectError(error.HeadTooLarge, h.s.respond(0, 200, &.{ .{ .name = "a", .value = "b" }, .{ .name = "x", .value = &v } }));
    try h.s.respond(0, 200, &.{.{ .name = "a", .value = "b" }});
}

test "h3 session: the peer's unidirectional streams fit uni_streams_max slots, freed as they end" {
    // The transport lets a client have initial_max_streams_uni (3) open at once: the
    // control and QPACK streams. One more open at once is refused as excessive load.
    try testing.expectEqual(@as(usize, 3), session_mod.uni_streams_max);
    {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        h.clientControl();
        h.fake.send(6, &.{0x02}, false); // QPACK encoder stream
        h.fake.send(10, &.{ 0x21, 'x' }, false); // a reserved type: ignored
        h.s.run();
        try testing.expectEqual(@as(?u64, null), h.fake.close_code);
        for (h.s.uni) |slot| try testing.expect(slot != null);
        h.fake.send(14, &.{ 0x21, 'y' }, false);
        h.s.run();
        try h.expectClosed(.excessive_load);
    }
    // An ignored stream's end (the peer's RESET_STREAM answering our STOP_SENDING, or its
    // FIN) gives its slot back, as the transport gives its credit back.
    {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        h.clientControl();
        h.fake.send(6, &.{0x02}, false);
        h.fake.send(10, &.{ 0x21, 'x' }, false);
        h.s.run();
        try testing.expectEqual(@as(?u64, @intFromEnum(ErrorCode.stream_creation_error)), h.fake.streams.getPtr(10).?.stop_code);
        h.fake.push(.{ .reset = .{ .id = 10, .code = @intFromEnum(ErrorCode.stream_creation_error), .final_size = 2 } });
        h.s.run();
        h.fake.send(14, &.{0x03}, false); // QPACK decoder stream
        h.s.run();
        try testing.expectEqual(@as(?u64, null), h.fake.close_code);
        var ids: [3]u64 = undefined;
        for (h.s.uni, &ids) |slot, *id| id.* = slot.?.id;
        std.mem.sort(u64, &ids, {}, std.sort.asc(u64));
        try testing.expectEqualSlices(u64, &.{ 2, 6, 14 }, &ids);
    }
}
