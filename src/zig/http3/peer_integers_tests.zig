//! Every integer an HTTP/3 client controls (frame types and lengths, SETTINGS, GOAWAY and
//! MAX_PUSH_ID, stream types, QPACK's prefixes, indexes, lengths and capacities) at its
//! largest value (2^62 - 1, the largest varint, or the bound just below it) and one past,
//! through a real session (`session_tests.zig`'s harness). docs/PEER_INTEGERS.md lists them.
const std = @import("std");
const testing = std.testing;
const frames = @import("frames.zig");
const qpack = @import("qpack.zig");
const prefix_int = @import("../http/prefix_int.zig");
const qpack_encoder = @import("qpack_encoder.zig");
const st = @import("session_tests.zig");
const Harness = st.Harness;
const Header = qpack.Header;

const max: u64 = frames.varint.value_max;

/// Bytes of HTTP/3 varints.
fn varints(buf: []u8, values: []const u64) []u8 {
    var n: usize = 0;
    for (values) |v| n = frames.varint.write(buf, n, v) catch unreachable;
    return buf[0..n];
}

/// A HEADERS frame around a raw field section.
fn headersOf(buf: []u8, section: []const u8) []u8 {
    const n = frames.writeFrameHeader(buf, 0, .headers, section.len) catch unreachable;
    @memcpy(buf[n..][0..section.len], section);
    return buf[0 .. n + section.len];
}

/// A QPACK prefix integer (`prefix` bits, `flags` above them) then `tail`.
fn qint(buf: []u8, flags: u8, comptime prefix: u4, value: u64, tail: []const u8) []u8 {
    const n = qpack.encodeInt(buf, 0, flags, prefix, value) catch unreachable;
    @memcpy(buf[n..][0..tail.len], tail);
    return buf[0 .. n + tail.len];
}

/// A QPACK prefix integer written without `encodeInt`'s bound (2^62 and up can be sent).
fn rawInt(buf: []u8, flags: u8, comptime prefix: u4, value: u64) []u8 {
    const n = prefix_int.encode(buf, 0, flags, prefix, value) catch unreachable;
    return buf[0..n];
}

/// The `get` request's field lines, static only, after no prefix.
fn getLines(buf: []u8) []u8 {
    var p: usize = 0;
    for (st.get) |f| p = qpack_encoder.encodeField(buf, p, f.name, f.value) catch unreachable;
    return buf[0..p];
}

/// A session with the client's control stream open (an empty SETTINGS).
fn ready(h: *Harness) !void {
    try h.init(.{});
    h.clientControl();
}

test "peer integers: h3 frame lengths of 2^62 - 1 on a request stream" {
    var hb: [512]u8 = undefined;
    var all: [1024]u8 = undefined;
    var big: [16]u8 = undefined;
    // HEADERS claiming 2^62 - 1 bytes: past the gather buffer, H3_EXCESSIVE_LOAD at once.
    {
        var h: Harness = undefined;
        try ready(&h);
        defer h.deinit();
        h.fake.send(0, varints(&big, &.{ 0x01, max }), false);
        h.s.run();
        try h.expectStreamError(0, .excessive_load);
    }
    // DATA claiming 2^62 - 1: its bytes are handed on as they come; the stream's end
    // inside it is H3_FRAME_ERROR.
    {
        var h: Harness = undefined;
        try ready(&h);
        defer h.deinit();
        const method: Header = .{ .name = ":method", .value = "POST" };
        const post = [_]Header{ method, st.get[1], st.get[2], st.get[3] };
        const data = varints(&big, &.{ 0x00, max });
        h.fake.send(0, st.concat(&all, &.{ st.headersFrame(&hb, &post), data, "abc" }), false);
        h.s.run();
        try testing.expect(std.mem.endsWith(u8, h.owner.take(), "body 0 \"abc\"\n"));
        h.fake.send(0, "", true);
        h.s.run();
        try h.expectClosed(.frame_error);
    }
    // An unknown (reserved) type of 2^62 - 1 bytes is skipped as it comes; the same end.
    {
        var h: Harness = undefined;
        try ready(&h);
        defer h.deinit();
        h.fake.send(0, st.concat(&all, &.{ varints(&big, &.{ 0x21, max }), "zzz" }), false);
        h.s.run();
        try testing.expectEqual(@as(?u64, null), h.fake.close_code);
        h.fake.send(0, "", true);
        h.s.run();
        try h.expectClosed(.frame_error);
    }
    // The largest frame type a varint holds, of no payload: unknown, skipped.
    {
        var h: Harness = undefined;
        try ready(&h);
        defer h.deinit();
        const frame = varints(&big, &.{ max, 0 });
        h.fake.send(0, st.concat(&all, &.{ frame, st.headersFrame(&hb, &st.get) }), true);
        h.s.run();
        try testing.expect(std.mem.startsWith(u8, h.owner.take(), "request 0 GET"));
    }
}

test "peer integers: h3 SETTINGS values of 2^62 - 1; booleans past 1" {
    var buf: [64]u8 = undefined;
    var all: [128]u8 = undefined;
    // Capacity, field section size, blocked streams and an unknown id, all 2^62 - 1.
    {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        const pairs = varints(&buf, &.{ 0x01, max, 0x06, max, 0x07, max, max, max });
        var head: [16]u8 = undefined;
        const fh = varints(&head, &.{ 0x00, 0x04, pairs.len });
        h.fake.send(2, st.concat(&all, &.{ fh, pairs }), false);
        h.s.run();
        try testing.expectEqual(@as(?u64, null), h.fake.close_code);
        // A response under a field section limit of 2^62 - 1 goes out.
        var hb: [512]u8 = undefined;
        h.fake.send(0, st.headersFrame(&hb, &st.get), true);
        h.s.run();
        _ = h.owner.take();
        try h.s.respond(0, 200, &.{});
        try testing.expect(h.fake.out(0).len > 0);
    }
    // SETTINGS_ENABLE_CONNECT_PROTOCOL and SETTINGS_H3_DATAGRAM: 1 taken, 2 and 2^62 - 1 not.
    for ([_]u64{ 0x08, 0x33 }) |id| for ([_]u64{ 1, 2, max }) |value| {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        const pairs = varints(&buf, &.{ id, value });
        var head: [16]u8 = undefined;
        const fh = varints(&head, &.{ 0x00, 0x04, pairs.len });
        h.fake.send(2, st.concat(&all, &.{ fh, pairs }), false);
        h.s.run();
        if (value == 1) {
            try testing.expectEqual(@as(?u64, null), h.fake.close_code);
        } else try h.expectClosed(.settings_error);
    };
}

test "peer integers: h3 GOAWAY and MAX_PUSH_ID of 2^62 - 1; one more byte is H3_FRAME_ERROR" {
    var buf: [64]u8 = undefined;
    {
        var h: Harness = undefined;
        try ready(&h);
        defer h.deinit();
        h.fake.send(2, varints(&buf, &.{ 0x07, 8, max, 0x0d, 8, max }), false);
        h.s.run();
        try testing.expectEqual(@as(?u64, null), h.fake.close_code);
        try h.expectLog("goaway 4611686018427387903\n");
        // GOAWAY may only go down: 2^62 - 2 is taken, 2^62 - 1 again is not.
        h.fake.send(2, varints(&buf, &.{ 0x07, 8, max - 1 }), false);
        h.s.run();
        try testing.expectEqual(@as(?u64, null), h.fake.close_code);
        h.fake.send(2, varints(&buf, &.{ 0x07, 8, max }), false);
        h.s.run();
        try h.expectClosed(.id_error);
    }
    // A 9-byte GOAWAY and MAX_PUSH_ID (a varint is 8 at most), and one of 2^62 - 1 bytes.
    for ([_]u64{ 0x07, 0x0d }) |t| for ([_]u64{ 9, max }) |len| {
        var h: Harness = undefined;
        try ready(&h);
        defer h.deinit();
        h.fake.send(2, varints(&buf, &.{ t, len, 0, 0 }), false);
        h.s.run();
        try h.expectClosed(.frame_error);
    };
}

test "peer integers: h3 a unidirectional stream type of 2^62 - 1 is ignored" {
    var h: Harness = undefined;
    try ready(&h);
    defer h.deinit();
    var buf: [32]u8 = undefined;
    h.fake.send(6, varints(&buf, &.{ max, 1, 2, 3 }), false);
    h.s.run();
    try testing.expectEqual(@as(?u64, null), h.fake.close_code);
}

test "peer integers: qpack Required Insert Count, Base and indexes of 2^62 - 1" {
    var lines_buf: [128]u8 = undefined;
    const lines = getLines(&lines_buf);
    var p: [5][16]u8 = undefined;
    var q: [5][16]u8 = undefined;
    const Case = struct { parts: [3][]const u8, ok: bool };
    const cases = [_]Case{
        // Required Insert Count 2^62 - 1: past 2 * MaxEntries, refused.
        .{ .parts = .{ qint(&p[0], 0, 8, max, ""), "\x00", lines }, .ok = false },
        // Delta Base 2^62 - 1 with Required Insert Count 0: a Base of 2^62 - 1, unused.
        .{ .parts = .{ "\x00", qint(&p[1], 0x00, 7, max, ""), lines }, .ok = true },
        // ... with the sign bit: a Base below 0, refused.
        .{ .parts = .{ "\x00", qint(&p[2], 0x80, 7, max, ""), lines }, .ok = false },
        // An indexed static line of index 2^62 - 1, and of 2^62 (past the integer).
        .{ .parts = .{ "\x00\x00", lines, qint(&p[3], 0xc0, 6, max, "") }, .ok = false },
        .{ .parts = .{ "\x00\x00", lines, rawInt(&q[3], 0xc0, 6, max + 1) }, .ok = false },
        // A literal with the static name :path whose value length is 2^62 - 1.
        .{
            .parts = .{ "\x00\x00", lines, qint(&p[4], 0x50, 4, 1, qint(&q[4], 0, 7, max, "/")) },
            .ok = false,
        },
    };
    for (cases) |c| {
        var h: Harness = undefined;
        try ready(&h);
        defer h.deinit();
        var section: [256]u8 = undefined;
        var hb: [300]u8 = undefined;
        h.fake.send(0, headersOf(&hb, st.concat(&section, &c.parts)), true);
        h.s.run();
        if (c.ok) {
            try testing.expect(std.mem.startsWith(u8, h.owner.take(), "request 0 GET"));
        } else try h.expectClosed(.qpack_decompression_failed);
    }
}

test "peer integers: qpack encoder stream capacity, indexes and lengths of 2^62 - 1" {
    var buf: [64]u8 = undefined;
    var tail: [32]u8 = undefined;
    const Case = struct { bytes: []const u8, ok: bool };
    var b: [6][32]u8 = undefined;
    const cases = [_]Case{
        // Set Dynamic Table Capacity: ours (4096) taken, 4097 and 2^62 - 1 not.
        .{ .bytes = qint(&b[0], 0x20, 5, 4096, ""), .ok = true },
        .{ .bytes = qint(&b[1], 0x20, 5, 4097, ""), .ok = false },
        .{ .bytes = qint(&b[2], 0x20, 5, max, ""), .ok = false },
        // Insert with a literal name of 2^62 - 1 bytes (after a capacity of 4096).
        .{ .bytes = qint(&b[3], 0x20, 5, 4096, qint(&tail, 0x40, 5, max, "n")), .ok = false },
        // Duplicate of relative index 2^62 - 1.
        .{ .bytes = qint(&b[4], 0x20, 5, 4096, qint(tail[16..], 0x00, 5, max, "")), .ok = false },
        // Insert with a static name reference of index 2^62 - 1.
        .{ .bytes = qint(&b[5], 0x20, 5, 4096, qint(&buf, 0xc0, 6, max, "\x00")), .ok = false },
    };
    for (cases) |c| {
        var h: Harness = undefined;
        try ready(&h);
        defer h.deinit();
        var all: [64]u8 = undefined;
        h.fake.send(6, st.concat(&all, &.{ "\x02", c.bytes }), false);
        h.s.run();
        if (c.ok) {
            try testing.expectEqual(@as(?u64, null), h.fake.close_code);
        } else try h.expectClosed(.qpack_encoder_stream_error);
    }
}

test "peer integers: qpack decoder stream Stream Cancellation of 2^62 - 1 and 2^62" {
    for ([_]u64{ max, max + 1 }) |v| {
        var h: Harness = undefined;
        try ready(&h);
        defer h.deinit();
        var buf: [32]u8 = undefined;
        var all: [48]u8 = undefined;
        h.fake.send(10, st.concat(&all, &.{ "\x03", rawInt(&buf, 0x40, 6, v) }), false);
        h.s.run();
        if (v == max) {
            try testing.expectEqual(@as(?u64, null), h.fake.close_code);
        } else try h.expectClosed(.qpack_decoder_stream_error);
    }
}

test "peer integers: h3 content-length: 1*DIGIT, at most 19 digits, no sign or _" {
    const Case = struct { value: []const u8, ok: bool };
    for ([_]Case{
        .{ .value = "5", .ok = true },
        .{ .value = "9999999999999999999", .ok = true },
        .{ .value = "+5", .ok = false },
        .{ .value = "-0", .ok = false },
        .{ .value = "0_5", .ok = false },
        .{ .value = "18446744073709551615", .ok = false }, // 20 digits
    }) |c| {
        var h: Harness = undefined;
        try ready(&h);
        defer h.deinit();
        const method: Header = .{ .name = ":method", .value = "POST" };
        const cl: Header = .{ .name = "content-length", .value = c.value };
        const post = [_]Header{ method, st.get[1], st.get[2], st.get[3], cl };
        var hb: [512]u8 = undefined;
        h.fake.send(0, st.headersFrame(&hb, &post), false);
        h.s.run();
        if (c.ok) {
            try testing.expect(std.mem.startsWith(u8, h.owner.take(), "request 0 POST"));
        } else try h.expectStreamError(0, .message_error);
    }
}
