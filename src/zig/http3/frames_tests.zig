//! Tests of `frames.zig` and `frame_reader.zig`: RFC 9000 A.1's varints, the frame
//! table and order rules, SETTINGS with every error, and the frame reader with its input
//! split at every byte boundary.
const std = @import("std");
const testing = std.testing;
const frames = @import("frames.zig");
const varint = frames.varint;
const reader_mod = @import("frame_reader.zig");
const FrameReader = reader_mod.FrameReader;

test "varint: RFC 9000 A.1 examples, boundaries, truncation" {
    const examples = [_]struct { []const u8, u64 }{
        .{ &.{ 0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c }, 151288809941952652 },
        .{ &.{ 0x9d, 0x7f, 0x3e, 0x7d }, 494878333 },
        .{ &.{ 0x7b, 0xbd }, 15293 },
        .{ &.{0x25}, 37 },
        .{ &.{ 0x40, 0x25 }, 37 }, // not the shortest: still read
    };
    for (examples) |ex| {
        var pos: usize = 0;
        try testing.expectEqual(ex[1], varint.read(ex[0], &pos).?);
        try testing.expectEqual(ex[0].len, pos);
        pos = 0;
        try testing.expectEqual(@as(?u64, null), varint.read(ex[0][0 .. ex[0].len - 1], &pos));
        try testing.expectEqual(@as(usize, 0), pos);
    }
    var buf: [8]u8 = undefined;
    for ([_]u64{ 0, 63, 64, 16383, 16384, (1 << 30) - 1, 1 << 30, varint.value_max }) |v| {
        const n = try varint.write(&buf, 0, v);
        try testing.expectEqual(varint.len(v), n);
        var pos: usize = 0;
        try testing.expectEqual(v, varint.read(buf[0..n], &pos).?);
    }
    try testing.expectEqual(@as(usize, 1), varint.len(63));
    try testing.expectEqual(@as(usize, 2), varint.len(64));
    try testing.expectEqual(@as(usize, 8), varint.len(1 << 30));
    try testing.expectError(error.NoSpace, varint.write(buf[0..3], 0, 1 << 30));
}

test "types: reserved values, HTTP/2 types, error codes, stream types" {
    for ([_]u64{ 0x21, 0x40, 0x5f, 0x21 + 0x1f * 1000 }) |v| try testing.expect(frames.isReserved(v));
    for ([_]u64{ 0, 0x20, 0x22, 0x41 }) |v| try testing.expect(!frames.isReserved(v));
    for ([_]u64{ 0x02, 0x06, 0x08, 0x09 }) |t| try testing.expect(frames.isHttp2Only(t));
    try testing.expect(!frames.isHttp2Only(0x07));
    try testing.expectEqual(@as(u64, 0x100), @intFromEnum(frames.ErrorCode.no_error));
    try testing.expectEqual(@as(u64, 0x10a), @intFromEnum(frames.ErrorCode.missing_settings));
    try testing.expectEqual(@as(u64, 0x110), @intFromEnum(frames.ErrorCode.version_fallback));
    try testing.expectEqual(@as(u64, 0x202), @intFromEnum(frames.ErrorCode.qpack_decoder_stream_error));
    try testing.expectEqual(frames.ErrorCode.excessive_load, frames.errorCode(error.ExcessiveLoad));
    try testing.expectEqual(frames.StreamType.qpack_decoder, frames.StreamType.fromWire(3));
    try testing.expectEqual(frames.StreamType.unknown, frames.StreamType.fromWire(0x21));
    var buf: [8]u8 = undefined;
    try testing.expectEqual(@as(usize, 1), try frames.writeStreamType(&buf, .qpack_encoder));
    try testing.expectEqual(@as(u8, 0x02), buf[0]);
}

test "the frame table: every known type on every stream, both ways" {
    const F = frames.FrameType;
    const Case = struct { F, frames.StreamKind, frames.Receiver, bool };
    const cases = [_]Case{
        .{ .data, .request, .server, true },         .{ .data, .control, .server, false },         .{ .data, .push, .client, true },
        .{ .headers, .request, .server, true },      .{ .headers, .control, .client, false },      .{ .headers, .push, .client, true },
        .{ .cancel_push, .control, .server, true },  .{ .cancel_push, .request, .server, false },  .{ .cancel_push, .push, .client, false },
        .{ .settings, .control, .server, true },     .{ .settings, .request, .server, false },     .{ .settings, .push, .client, false },
        .{ .push_promise, .request, .client, true }, .{ .push_promise, .request, .server, false }, .{ .push_promise, .control, .client, false },
        .{ .goaway, .control, .client, true },       .{ .goaway, .request, .server, false },       .{ .goaway, .push, .client, false },
        .{ .max_push_id, .control, .server, true },  .{ .max_push_id, .control, .client, false },  .{ .max_push_id, .request, .server, false },
    };
    for (cases) |c| try testing.expectEqual(c[3], frames.frameAllowed(c[1], c[2], @intFromEnum(c[0])));
    for ([_]u64{ 0x02, 0x06, 0x08, 0x09 }) |t| {
        for ([_]frames.StreamKind{ .request, .control, .push }) |k| try testing.expect(!frames.frameAllowed(k, .server, t));
    }
    try testing.expect(frames.frameAllowed(.control, .server, 0x21));
    try testing.expect(frames.frameAllowed(.request, .server, 0x1234));
}

test "Sequence: control stream starts with one SETTINGS; messages are HEADERS DATA* HEADERS?" {
    var c = frames.Sequence{ .kind = .control, .receiver = .server };
    try testing.expectError(error.MissingSettings, c.check(0x21)); // even a reserved type
    c = .{ .kind = .control, .receiver = .server };
    try testing.expectEqual(frames.Sequence.Action.process, try c.check(0x04));
    try testing.expectEqual(frames.Sequence.Action.skip, try c.check(0x21));
    try testing.expectError(error.FrameUnexpected, c.check(0x04));
    try testing.expectError(error.FrameUnexpected, c.check(0x00));
    try testing.expectError(error.FrameUnexpected, c.check(0x01));
    try testing.expectError(error.FrameUnexpected, c.check(0x06)); // HTTP/2 PING
    var r = frames.Sequence{ .kind = .request, .receiver = .server };
    try testing.expectError(error.FrameUnexpected, r.check(0x00)); // DATA before HEADERS
    r = .{ .kind = .request, .receiver = .server };
    try testing.expectEqual(frames.Sequence.Action.skip, try r.check(0x5f));
    _ = try r.check(0x01);
    _ = try r.check(0x00);
    _ = try r.check(0x00);
    _ = try r.check(0x01); // trailers
    try testing.expectError(error.FrameUnexpected, r.check(0x00));
    try testing.expectError(error.FrameUnexpected, r.check(0x01));
    try testing.expectError(error.FrameUnexpected, r.check(0x05)); // PUSH_PROMISE to a server
    try testing.expectError(error.FrameUnexpected, r.check(0x07));
}

fn settingsHex(hex: []const u8) frames.Error!frames.Settings {
    var buf: [300]u8 = undefined;
    return frames.Settings.parse(@import("qpack_decoder_tests.zig").unhex(&buf, hex));
}

test "SETTINGS: values, unknown ids ignored, every error" {
    const s = try settingsHex("01 4100 06 4400 07 10 08 01 33 01 21 05 4040 00");
    try testing.expectEqual(@as(u64, 256), s.qpack_max_table_capacity);
    try testing.expectEqual(@as(u64, 1024), s.max_field_section_size);
    try testing.expectEqual(@as(u64, 16), s.qpack_blocked_streams);
    try testing.expect(s.enable_connect_protocol and s.h3_datagram);
    const empty = try settingsHex("");
    try testing.expectEqual(varint.value_max, empty.max_field_section_size);
    try testing.expectEqual(@as(u64, 0), empty.qpack_max_table_capacity);
    // HTTP/2's identifiers, each alone.
    for ([_][]const u8{ "00 00", "02 00", "03 00", "04 00", "05 00" }) |hex| {
        try testing.expectError(error.SettingsError, settingsHex(hex));
    }
    try testing.expectError(error.SettingsError, settingsHex("01 00 07 00 01 00")); // duplicate
    try testing.expectError(error.SettingsError, settingsHex("21 00 21 01")); // duplicate unknown
    try testing.expectError(error.SettingsError, settingsHex("01 00 4001 00")); // 0x01 twice, 2nd not shortest
    try testing.expectError(error.SettingsError, settingsHex("08 02"));
    try testing.expectError(error.FrameError, settingsHex("01")); // value missing
    try testing.expectError(error.FrameError, settingsHex("01 40")); // value truncated
    var big: [frames.settings_bytes_max + 1]u8 = undefined;
    try testing.expectError(error.ExcessiveLoad, frames.Settings.parse(&big));
}

test "SETTINGS encode round-trips through the reader" {
    var buf: [64]u8 = undefined;
    const ours = frames.Settings{ .qpack_max_table_capacity = 4096, .qpack_blocked_streams = 16, .max_field_section_size = 65536, .enable_connect_protocol = true };
    const n = try ours.encode(&buf);
    var gather: [frames.settings_bytes_max]u8 = undefined;
    var r = FrameReader.initRequest(.server, &gather);
    r.sequence.kind = .control;
    const head = try r.next(buf[0..n]);
    try testing.expectEqual(@as(usize, 2), head.consumed);
    const step = try r.next(buf[2..n]);
    try testing.expectEqual(n - 2, step.consumed);
    try testing.expectEqual(ours, step.event.?.settings);
    try testing.expectError(error.NoSpace, ours.encode(buf[0..8]));
}

/// What a reader produced over a whole stream, for comparing splits.
const Record = struct {
    text: [1024]u8 = undefined,
    len: usize = 0,
    data_frames: usize = 0,

    fn add(rec: *Record, comptime fmt: []const u8, args: anytype) void {
        const s = std.fmt.bufPrint(rec.text[rec.len..], fmt, args) catch unreachable;
        rec.len += s.len;
    }

    fn event(rec: *Record, e: reader_mod.Event) void {
        switch (e) {
            .stream_type => |t| rec.add("T{s};", .{@tagName(t)}),
            .push_id => |id| rec.add("P{d};", .{id}),
            .headers => |h| rec.add("H{x};", .{h}),
            .push_promise => |p| rec.add("PP{d}:{x};", .{ p.push_id, p.section }),
            // DATA pieces concatenate; a frame's end is marked, not where it was split.
            .data => |d| {
                rec.add("{x}", .{d.bytes});
                if (d.last) rec.add("|", .{});
            },
            .settings => |s| rec.add("S{d},{d};", .{ s.qpack_max_table_capacity, s.max_field_section_size }),
            .goaway => |id| rec.add("G{d};", .{id}),
            .cancel_push => |id| rec.add("C{d};", .{id}),
            .max_push_id => |id| rec.add("M{d};", .{id}),
        }
    }
};

fn feed(r: *FrameReader, rec: *Record, input: []const u8) !void {
    var rest = input;
    while (rest.len > 0) {
        const step = try r.next(rest);
        std.debug.assert(step.consumed > 0 or step.event != null);
        rest = rest[step.consumed..];
        if (step.event) |e| rec.event(e);
    }
}

/// Feeds `stream` whole, then in two pieces split at every boundary, then in three
/// pieces of every shape up to 40 bytes; every run must record the same.
fn expectSplitsAgree(comptime init: fn ([]u8) FrameReader, stream: []const u8, expected: []const u8) !void {
    var gather: [frames.settings_bytes_max]u8 = undefined;
    var whole = Record{};
    var r = init(&gather);
    try feed(&r, &whole, stream);
    // A control stream must never end; the others end clean.
    r.finish() catch |err| try testing.expect(err == error.ClosedCriticalStream and r.sequence.kind == .control);
    try testing.expectEqualStrings(expected, whole.text[0..whole.len]);
    for (0..stream.len + 1) |i| {
        const j_max = if (stream.len <= 40) stream.len else i;
        for (i..j_max + 1) |j| {
            var rec = Record{};
            r = init(&gather);
            try feed(&r, &rec, stream[0..i]);
            try feed(&r, &rec, stream[i..j]);
            try feed(&r, &rec, stream[j..]);
            r.finish() catch |err| try testing.expect(err == error.ClosedCriticalStream and r.sequence.kind == .control);
            try testing.expectEqualStrings(expected, rec.text[0..rec.len]);
        }
    }
}

fn requestReader(buf: []u8) FrameReader {
    return FrameReader.initRequest(.server, buf);
}

fn uniReader(buf: []u8) FrameReader {
    return FrameReader.initUnidirectional(.server, buf);
}

fn clientUniReader(buf: []u8) FrameReader {
    return FrameReader.initUnidirectional(.client, buf);
}

test "reader: a request stream split at every byte boundary" {
    // HEADERS(2), reserved 0x21 (3 bytes skipped), DATA(3), empty DATA, unknown type
    // with a two-byte type and length 0, DATA(70: a two-byte length), trailers HEADERS(1).
    var stream: [128]u8 = undefined;
    var n: usize = 0;
    for ([_][]const u8{ "\x01\x02\xc1\xd1", "\x21\x03abc", "\x00\x03xyz", "\x00\x00", "\x40\x22\x00", "\x00\x40\x46" }) |s| {
        @memcpy(stream[n..][0..s.len], s);
        n += s.len;
    }
    @memset(stream[n..][0..70], 'd');
    n += 70;
    @memcpy(stream[n..][0..3], "\x01\x01\xc0");
    n += 3;
    try expectSplitsAgree(requestReader, stream[0..n], "Hc1d1;78797a||" ++ "64" ** 70 ++ "|Hc0;");
}

test "reader: a control stream and a push stream split at every byte boundary" {
    // Type 0, SETTINGS (capacity 256), a reserved frame, MAX_PUSH_ID 5, CANCEL_PUSH 2,
    // GOAWAY 4 with a two-byte varint.
    const control = "\x00" ++ "\x04\x03\x01\x41\x00" ++ "\x21\x01z" ++ "\x0d\x01\x05" ++ "\x03\x01\x02" ++ "\x07\x02\x40\x04";
    try expectSplitsAgree(uniReader, control, "Tcontrol;S256,4611686018427387903;M5;C2;G4;");
    // To a client: a push stream (push ID 7, HEADERS, DATA).
    try expectSplitsAgree(clientUniReader, "\x01\x07\x01\x01\xc1\x00\x01q", "Tpush;P7;Hc1;71|");
}

test "reader: QPACK and unknown streams; a push stream to a server" {
    var gather: [frames.settings_bytes_max]u8 = undefined;
    var r = FrameReader.initUnidirectional(.server, &gather);
    const step = try r.next("\x02\x3f\xbd\x01");
    try testing.expectEqual(@as(usize, 1), step.consumed);
    try testing.expectEqual(frames.StreamType.qpack_encoder, step.event.?.stream_type);
    try testing.expectEqual(@as(usize, 0), (try r.next("\x3f")).consumed);
    try testing.expectError(error.ClosedCriticalStream, r.finish());
    r = FrameReader.initUnidirectional(.server, &gather);
    var rec = Record{};
    try feed(&r, &rec, "\x40\x21 anything at all \x00\x04");
    try testing.expectEqualStrings("Tunknown;", rec.text[0..rec.len]);
    try r.finish();
    r = FrameReader.initUnidirectional(.server, &gather);
    try testing.expectError(error.StreamCreationError, r.next("\x01\x00"));
}

test "reader: limits and malformed frames" {
    var gather: [frames.settings_bytes_max]u8 = undefined;
    const Case = struct { bool, []const u8, frames.Error };
    const cases = [_]Case{
        // HEADERS one byte past the gather buffer (256): H3_EXCESSIVE_LOAD.
        .{ false, "\x01\x41\x01", error.ExcessiveLoad },
        .{ true, "\x00\x04\x41\x01", error.ExcessiveLoad }, // SETTINGS of 257
        .{ true, "\x00\x04\x00\x07\x00", error.FrameError }, // GOAWAY of no payload
        .{ true, "\x00\x04\x00\x07\x09", error.FrameError }, // GOAWAY of 9 bytes
        .{ true, "\x00\x04\x00\x07\x02\x05\x00", error.FrameError }, // GOAWAY: varint + junk
        .{ true, "\x00\x04\x00\x0d\x02\x80\x00", error.FrameError }, // MAX_PUSH_ID: half a 4-byte varint
        .{ true, "\x00\x01\x00", error.MissingSettings },
        .{ true, "\x00\x04\x00\x04\x00", error.FrameUnexpected },
        .{ true, "\x00\x04\x02\x02\x00", error.SettingsError },
        .{ false, "\x09\x00", error.FrameUnexpected }, // HTTP/2 CONTINUATION
        .{ false, "\x00\x00", error.FrameUnexpected }, // DATA first
        .{ false, "\x07\x01\x00", error.FrameUnexpected },
    };
    for (cases) |c| {
        var r = if (c[0]) FrameReader.initUnidirectional(.server, &gather) else FrameReader.initRequest(.server, &gather);
        var rec = Record{};
        try testing.expectError(c[2], feed(&r, &rec, c[1]));
    }
    // A HEADERS exactly as large as the gather buffer is fine.
    var big: [3 + frames.settings_bytes_max]u8 = undefined;
    big[0] = 0x01;
    big[1] = 0x41;
    big[2] = 0x00;
    @memset(big[3..], 0xc1);
    var r = FrameReader.initRequest(.server, &gather);
    var rec = Record{};
    try feed(&r, &rec, &big);
    try testing.expectEqual(@as(usize, 2 + 2 * frames.settings_bytes_max), rec.len);
}

test "reader: the stream's end inside a frame, and on a control stream" {
    var gather: [frames.settings_bytes_max]u8 = undefined;
    for ([_][]const u8{ "\x01", "\x01\x02\xc1", "\x01\x01\xc1\x00\x05ab", "\x01\x01\xc1\x21\x02a" }) |s| {
        var r = FrameReader.initRequest(.server, &gather);
        var rec = Record{};
        try feed(&r, &rec, s);
        try testing.expectError(error.FrameError, r.finish());
    }
    var r = FrameReader.initUnidirectional(.server, &gather);
    var rec = Record{};
    try feed(&r, &rec, "\x00\x04\x00");
    try testing.expectError(error.ClosedCriticalStream, r.finish());
    r = FrameReader.initRequest(.server, &gather);
    try r.finish(); // nothing at all: the session decides what an empty request is
}
