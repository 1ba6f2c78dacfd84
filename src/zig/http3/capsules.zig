//! The Capsule Protocol and HTTP Datagrams (RFC 9297), sans-IO, for the extended CONNECT
//! streams that carry them (WebTransport's session stream: draft-ietf-webtrans-http3).
//!
//! A capsule is Type (varint), Length (varint), Value, in the request stream's DATA, split
//! anywhere across frames. `Reader` takes those bytes in pieces and yields whole capsules:
//! a known type's value is gathered (at most `value_bytes_max`: longer is an error, the
//! session's to answer with H3_DATAGRAM_ERROR or by closing the session, RFC 9297 3.3),
//! an unknown type's value is skipped as it passes, never held (RFC 9297 3.2), so a peer's
//! length, whatever it says, costs no memory. The WebTransport capsules are checked here as
//! far as their format goes (CLOSE's code is 32 bits, its message at most 1024 bytes; DRAIN
//! is empty).
//!
//! An HTTP Datagram in a QUIC DATAGRAM frame starts with its request stream's Quarter
//! Stream ID (RFC 9297 2.1): `splitDatagram` and `datagramPrefix` read and write it.
const std = @import("std");
const assert = std.debug.assert;
const varint = @import("frames.zig").varint;

pub const Type = enum(u64) {
    /// RFC 9297 3.5: an HTTP Datagram carried on the stream.
    datagram = 0x00,
    /// draft-ietf-webtrans-http3: the session ends (an error code and a message).
    close_webtransport_session = 0x2843,
    /// draft-ietf-webtrans-http3: the session should end soon (no value).
    drain_webtransport_session = 0x78ae,
    _,
};

/// The largest value of a capsule whose value is held (a DATAGRAM capsule's payload).
pub const value_bytes_max = 64 * 1024;
/// CLOSE_WEBTRANSPORT_SESSION's message, at most (draft-ietf-webtrans-http3).
pub const close_message_max = 1024;

pub const Capsule = union(enum) {
    datagram: []const u8,
    close: struct { code: u32, message: []const u8 },
    drain,
};

pub const Error = error{
    /// A known capsule longer than we hold, or whose value contradicts its format.
    Malformed,
};

/// One stream's capsules, from its DATA bytes in order. Holds at most `value_bytes_max`.
pub const Reader = struct {
    /// The header being read (a varint may be split): at most two 8-byte varints.
    head: [16]u8 = undefined,
    head_len: u8 = 0,
    /// Once the header is read: the capsule's type, and the value bytes still to come.
    kind: ?u64 = null,
    left: u64 = 0,
    value: std.ArrayListUnmanaged(u8) = .empty,
    failed: bool = false,

    pub fn deinit(r: *Reader, a: std.mem.Allocator) void {
        r.value.deinit(a);
    }

    /// Takes bytes from `input.*` (advancing it) until one capsule is whole: the capsule,
    /// valid until the next call; null once `input` is used up (more is needed).
    /// Unknown capsules are skipped. `OutOfMemory` leaves the reader failed.
    pub fn next(
        r: *Reader,
        a: std.mem.Allocator,
        input: *[]const u8,
    ) (Error || error{OutOfMemory})!?Capsule {
        if (r.failed) return error.Malformed;
        errdefer r.failed = true;
        while (true) {
            if (r.kind == null) {
                if (!r.readHead(input)) return null;
                if (r.held() and r.left > value_bytes_max) return error.Malformed;
                r.value.clearRetainingCapacity();
                if (r.held()) try r.value.ensureTotalCapacity(a, @intCast(r.left));
            }
            const take: usize = @intCast(@min(r.left, input.len));
            if (r.held()) r.value.appendSliceAssumeCapacity(input.*[0..take]);
            input.* = input.*[take..];
            r.left -= take;
            if (r.left > 0) return null;
            const kind = r.kind.?;
            r.kind = null;
            if (try decode(kind, r.value.items)) |c| return c;
        }
    }

    /// The capsule's value is gathered (a type we read), not skipped.
    fn held(r: *const Reader) bool {
        return switch (@as(Type, @enumFromInt(r.kind.?))) {
            .datagram, .close_webtransport_session, .drain_webtransport_session => true,
            _ => false,
        };
    }

    /// Reads the Type and Length varints, which may arrive a byte at a time.
    fn readHead(r: *Reader, input: *[]const u8) bool {
        while (input.len > 0) {
            const need = r.headNeed();
            if (r.head_len == need) break;
            const n = @min(need - r.head_len, input.len);
            @memcpy(r.head[r.head_len..][0..n], input.*[0..n]);
            r.head_len += @intCast(n);
            input.* = input.*[n..];
        }
        if (r.head_len == 0 or r.head_len != r.headNeed()) return false;
        var pos: usize = 0;
        const kind = varint.read(r.head[0..r.head_len], &pos).?;
        const len = varint.read(r.head[0..r.head_len], &pos).?;
        assert(pos == r.head_len);
        r.kind = kind;
        r.left = len;
        r.head_len = 0;
        return true;
    }

    /// Bytes the header takes, as far as what has come tells: 1 until the type's first byte
    /// is known, then the type's length plus 1, then both lengths.
    fn headNeed(r: *const Reader) usize {
        if (r.head_len == 0) return 1;
        const type_len = varint.lenFromFirst(r.head[0]);
        if (r.head_len < type_len + 1) return type_len + 1;
        return type_len + varint.lenFromFirst(r.head[type_len]);
    }
};

/// A whole known capsule's value, checked; null for one with nothing to report.
fn decode(kind: u64, value: []const u8) Error!?Capsule {
    switch (@as(Type, @enumFromInt(kind))) {
        .datagram => return .{ .datagram = value },
        .close_webtransport_session => {
            if (value.len < 4 or value.len - 4 > close_message_max) return error.Malformed;
            const code = std.mem.readInt(u32, value[0..4], .big);
            return .{ .close = .{ .code = code, .message = value[4..] } };
        },
        .drain_webtransport_session => {
            if (value.len != 0) return error.Malformed;
            return .drain;
        },
        _ => return null,
    }
}

/// Writes a capsule's header for a value of `len` bytes; its length.
pub fn writeHead(buf: []u8, kind: Type, len: usize) error{NoSpace}!usize {
    var pos = try varint.write(buf, 0, @intFromEnum(kind));
    pos = try varint.write(buf, pos, len);
    return pos;
}

/// An HTTP Datagram's payload and the request stream it belongs to (RFC 9297 2.1): null
/// when the Quarter Stream ID is missing or names no client-initiated bidirectional stream
/// a varint can hold (the receiver's to treat as H3_DATAGRAM_ERROR).
pub fn splitDatagram(bytes: []const u8) ?struct { stream_id: u64, payload: []const u8 } {
    var pos: usize = 0;
    const quarter = varint.read(bytes, &pos) orelse return null;
    // Stream IDs are varints too: a quarter ID past (2^62 - 1) / 4 names none.
    if (quarter > varint.value_max / 4) return null;
    return .{ .stream_id = quarter * 4, .payload = bytes[pos..] };
}

/// Writes the Quarter Stream ID prefix for `stream_id` (a client's bidirectional stream);
/// returns its length.
pub fn datagramPrefix(buf: []u8, stream_id: u64) error{NoSpace}!usize {
    assert(stream_id % 4 == 0 and stream_id <= varint.value_max);
    return varint.write(buf, 0, stream_id / 4);
}

const testing = std.testing;

fn readAll(r: *Reader, input: []const u8, out: []Capsule) !usize {
    var rest = input;
    var n: usize = 0;
    while (try r.next(testing.allocator, &rest)) |c| : (n += 1) out[n] = c;
    try testing.expectEqual(@as(usize, 0), rest.len);
    return n;
}

test "capsules: datagram, close, drain, an unknown one skipped; split at every byte" {
    var wire: [128]u8 = undefined;
    var n: usize = 0;
    n += try writeHead(wire[n..], .datagram, 3);
    @memcpy(wire[n..][0..3], "abc");
    n += 3;
    n += try writeHead(wire[n..], @enumFromInt(0x1234_5678), 5); // unknown: skipped
    @memcpy(wire[n..][0..5], "zzzzz");
    n += 5;
    n += try writeHead(wire[n..], .close_webtransport_session, 6);
    @memcpy(wire[n..][0..6], &[_]u8{ 0, 0, 1, 0 } ++ "ok".*);
    n += 6;
    n += try writeHead(wire[n..], .drain_webtransport_session, 0);
    // Whole, then fed one byte at a time: the same capsules.
    for ([_]usize{ n, 1 }) |step| {
        var r: Reader = .{};
        defer r.deinit(testing.allocator);
        var seen: usize = 0;
        var at: usize = 0;
        var datagram_ok = false;
        var close_ok = false;
        var drain_ok = false;
        while (at < n) : (at += step) {
            var piece: []const u8 = wire[at..@min(n, at + step)];
            while (try r.next(testing.allocator, &piece)) |c| : (seen += 1) switch (c) {
                .datagram => |d| datagram_ok = std.mem.eql(u8, d, "abc"),
                .close => |cl| close_ok = cl.code == 256 and std.mem.eql(u8, cl.message, "ok"),
                .drain => drain_ok = true,
            };
        }
        try testing.expectEqual(@as(usize, 3), seen);
        try testing.expect(datagram_ok and close_ok and drain_ok);
    }
}

test "capsules: lengths at the bounds; an unknown capsule's length costs nothing" {
    var r: Reader = .{};
    defer r.deinit(testing.allocator);
    var out: [2]Capsule = undefined;
    var wire: [16]u8 = undefined;
    // An unknown capsule claiming 2^62 - 1 bytes: skipped as it passes, nothing held.
    var n = try writeHead(&wire, @enumFromInt(0x21), varint.value_max);
    try testing.expectEqual(@as(usize, 0), try readAll(&r, wire[0..n], &out));
    var junk = [_]u8{0xee} ** 4096;
    try testing.expectEqual(@as(usize, 0), try readAll(&r, &junk, &out));
    try testing.expectEqual(@as(usize, 0), r.value.capacity);
    // A DATAGRAM capsule of exactly the bound is held; one byte more is refused.
    var big: Reader = .{};
    defer big.deinit(testing.allocator);
    n = try writeHead(&wire, .datagram, value_bytes_max);
    var rest: []const u8 = wire[0..n];
    try testing.expectEqual(@as(?Capsule, null), try big.next(testing.allocator, &rest));
    const payload = try testing.allocator.alloc(u8, value_bytes_max);
    defer testing.allocator.free(payload);
    @memset(payload, 7);
    rest = payload;
    const got = (try big.next(testing.allocator, &rest)).?;
    try testing.expectEqual(@as(usize, value_bytes_max), got.datagram.len);
    var over: Reader = .{};
    defer over.deinit(testing.allocator);
    n = try writeHead(&wire, .datagram, value_bytes_max + 1);
    rest = wire[0..n];
    try testing.expectError(error.Malformed, over.next(testing.allocator, &rest));
    rest = "more";
    try testing.expectError(error.Malformed, over.next(testing.allocator, &rest)); // stays failed
}

test "capsules: CLOSE and DRAIN formats; memory running out fails cleanly" {
    const Case = struct { kind: Type, value: []const u8, ok: bool };
    const long = [_]u8{'m'} ** (close_message_max + 1);
    const close = Type.close_webtransport_session;
    const code_1 = [_]u8{ 0, 0, 0, 1 };
    const cases = [_]Case{
        .{ .kind = .close_webtransport_session, .value = &.{ 0, 0, 0 }, .ok = false },
        .{ .kind = .close_webtransport_session, .value = &.{ 0xff, 0xff, 0xff, 0xff }, .ok = true },
        .{ .kind = close, .value = &(code_1 ++ long[1..].*), .ok = true },
        .{ .kind = close, .value = &(code_1 ++ long), .ok = false },
        .{ .kind = .drain_webtransport_session, .value = "", .ok = true },
        .{ .kind = .drain_webtransport_session, .value = "x", .ok = false },
    };
    for (cases) |c| {
        var wire: [2048]u8 = undefined;
        const h = try writeHead(&wire, c.kind, c.value.len);
        @memcpy(wire[h..][0..c.value.len], c.value);
        var r: Reader = .{};
        defer r.deinit(testing.allocator);
        var rest: []const u8 = wire[0 .. h + c.value.len];
        if (c.ok) {
            _ = (try r.next(testing.allocator, &rest)).?;
        } else try testing.expectError(error.Malformed, r.next(testing.allocator, &rest));
    }
    var failing = testing.FailingAllocator.init(testing.allocator, .{ .fail_index = 0 });
    var r: Reader = .{};
    defer r.deinit(failing.allocator());
    var wire: [8]u8 = undefined;
    const h = try writeHead(&wire, .datagram, 2);
    wire[h] = 1;
    wire[h + 1] = 2;
    var rest: []const u8 = wire[0 .. h + 2];
    try testing.expectError(error.OutOfMemory, r.next(failing.allocator(), &rest));
    try testing.expectError(error.Malformed, r.next(failing.allocator(), &rest));
}

test "HTTP Datagrams: the quarter stream ID both ways, at its maximum and past it" {
    var buf: [16]u8 = undefined;
    const n = try datagramPrefix(&buf, 8);
    @memcpy(buf[n..][0..2], "hi");
    const d = splitDatagram(buf[0 .. n + 2]).?;
    try testing.expectEqual(@as(u64, 8), d.stream_id);
    try testing.expectEqualStrings("hi", d.payload);
    const top = varint.value_max / 4 * 4; // the largest client bidirectional stream ID
    const m = try datagramPrefix(&buf, top);
    try testing.expectEqual(top, splitDatagram(buf[0..m]).?.stream_id);
    const past = try varint.write(&buf, 0, varint.value_max / 4 + 1);
    try testing.expectEqual(@as(@TypeOf(splitDatagram("")), null), splitDatagram(buf[0..past]));
    try testing.expectEqual(@as(@TypeOf(splitDatagram("")), null), splitDatagram(""));
    try testing.expectEqual(@as(@TypeOf(splitDatagram("")), null), splitDatagram(&.{0x40}));
}
