//! Every integer an HTTP/2 client controls that `session_tests.zig` does not already take to
//! its edge: frame lengths of 2^24 - 1, 32-bit fields with every bit set (the reserved bit
//! among them), padding lengths of 255, and HPACK's integers, indexes, string lengths and
//! table size updates, each through a real session (`testing/h2_harness.zig`).
//! docs/PEER_INTEGERS.md lists them with their bounds and the tests that cover the rest.
const std = @import("std");
const testing = std.testing;
const h2 = @import("session.zig");
const frames = @import("frames.zig");
const harness = @import("../testing/h2_harness.zig");
const test_server = @import("../testing/test_server.zig");
const Harness = harness.Harness;
const be32 = harness.be32;
const setting = harness.setting;
const code = harness.code;
const expectGoaway = harness.expectGoaway;
const get_block = harness.get_block;

/// A frame header alone: length, type, flags, the 32-bit stream field as sent.
fn head(len: u24, typ: u8, flags: u8, stream_field: u32) [9]u8 {
    var b: [9]u8 = undefined;
    std.mem.writeInt(u24, b[0..3], len, .big);
    b[3] = typ;
    b[4] = flags;
    std.mem.writeInt(u32, b[5..9], stream_field, .big);
    return b;
}

fn opened(h: *Harness) !void {
    try h.open(testing.allocator);
}

test "peer integers: h2 frame length 2^24 - 1 is FRAME_SIZE_ERROR, whatever the type" {
    for ([_]u8{ 0x0, 0x1, 0x4, 0x8, 0xff }) |typ| {
        var h: Harness = undefined;
        try opened(&h);
        defer h.deinit();
        try harness.openPost(&h, 1);
        try h.feed(&head(std.math.maxInt(u24), typ, 0, 1));
        try expectGoaway(&h, .frame_size);
    }
    // 16384, the largest we allow, on an unknown type: skipped.
    var h: Harness = undefined;
    try opened(&h);
    defer h.deinit();
    try h.feed(&head(h2.frame_size_max, 0xff, 0, 0));
    try h.feed(&([_]u8{0} ** h2.frame_size_max));
    h.pump();
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
}

test "peer integers: h2 WINDOW_UPDATE of 0xffffffff is 2^31 - 1 and past the window" {
    // The reserved bit is dropped: 2^31 - 1 onto 65535 passes 2^31 - 1.
    {
        var h: Harness = undefined;
        try opened(&h);
        defer h.deinit();
        try h.send(.window_update, 0, 0, &be32(0xffff_ffff));
        try expectGoaway(&h, .flow_control);
    }
    {
        var h: Harness = undefined;
        try opened(&h);
        defer h.deinit();
        try harness.openPost(&h, 1);
        try h.send(.window_update, 0, 1, &be32(0xffff_ffff));
        h.pump();
        const s = h.sink.seen();
        try testing.expectEqual(code(.flow_control), s.rst[1]);
        try testing.expectEqual(@as(?u32, null), s.goaway);
    }
    // 0x80000000: the reserved bit alone is an increment of 0.
    var h: Harness = undefined;
    try opened(&h);
    defer h.deinit();
    try h.send(.window_update, 0, 0, &be32(0x8000_0000));
    try expectGoaway(&h, .protocol);
}

test "peer integers: h2 SETTINGS values of 2^32 - 1" {
    const max32 = std.math.maxInt(u32);
    // Ignored or only bounding us: taken.
    for ([_]u16{
        frames.setting_header_table_size,
        3, // SETTINGS_MAX_CONCURRENT_STREAMS
        6, // SETTINGS_MAX_HEADER_LIST_SIZE
        0xffff, // unknown
    }) |id| {
        var h: Harness = undefined;
        try opened(&h);
        defer h.deinit();
        try h.send(.settings, 0, 0, &setting(id, max32));
        try harness.get(&h, 1);
        h.pump();
        try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
    }
    const Case = struct { id: u16, want: frames.ErrorCode };
    for ([_]Case{
        .{ .id = frames.setting_initial_window_size, .want = .flow_control },
        .{ .id = frames.setting_max_frame_size, .want = .protocol },
        .{ .id = frames.setting_enable_push, .want = .protocol },
        .{ .id = frames.setting_enable_connect_protocol, .want = .protocol },
    }) |c| {
        var h: Harness = undefined;
        try opened(&h);
        defer h.deinit();
        try h.send(.settings, 0, 0, &setting(c.id, max32));
        try expectGoaway(&h, c.want);
    }
}

test "peer integers: h2 padding length 255 in DATA and HEADERS, at the frame's size and past" {
    // DATA of 256 bytes: pad length 255 and 255 bytes of padding, no data.
    {
        var h: Harness = undefined;
        try opened(&h);
        defer h.deinit();
        try harness.openPost(&h, 1);
        var p = [_]u8{0} ** 256;
        p[0] = 255;
        try h.send(.data, frames.flag_padded, 1, &p);
        try testing.expectEqual(@as(usize, 0), h.session().first.?.body.items.len);
        h.pump();
        try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
        // ... in a frame of 255: one byte too many.
        try h.send(.data, frames.flag_padded, 1, p[0..255]);
        try expectGoaway(&h, .protocol);
    }
    // HEADERS, padded and with a priority: 1 + 5 + block + 255; then 1 + 5 + 254.
    for ([_]usize{ 0, get_block.len + 1 }) |short| {
        var h: Harness = undefined;
        try opened(&h);
        defer h.deinit();
        var p = [_]u8{0} ** (1 + 5 + get_block.len + 255);
        p[0] = 255;
        p[4] = 0; // depends on stream 0
        p[5] = 255; // weight 256
        @memcpy(p[6..][0..get_block.len], &get_block);
        const flags = harness.end_both | frames.flag_padded | 0x20;
        try h.send(.headers, flags, 1, p[0 .. p.len - short]);
        if (short == 0) {
            h.pump();
            try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
            try testing.expectEqual(@as(u32, 1), h.session().last_stream_id);
        } else try expectGoaway(&h, .protocol);
    }
}

test "peer integers: h2 stream ids of 2^31 - 1, and codes and dependencies with every bit set" {
    // HEADERS on 0xffffffff: the reserved bit dropped, stream 2^31 - 1 opens.
    {
        var h: Harness = undefined;
        try opened(&h);
        defer h.deinit();
        try h.feed(&head(get_block.len, 0x1, harness.end_both, 0xffff_ffff));
        try h.feed(&get_block);
        try testing.expectEqual(@as(u32, std.math.maxInt(u31)), h.session().last_stream_id);
        h.pump();
        try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
    }
    // RST_STREAM with code 2^32 - 1; PRIORITY on 2^31 - 1 (exclusive, weight 256);
    // GOAWAY naming 2^31 - 1 with code 2^32 - 1: none is an error.
    var h: Harness = undefined;
    try opened(&h);
    defer h.deinit();
    try harness.openPost(&h, 1);
    try h.send(.rst_stream, 0, 1, &be32(0xffff_ffff));
    try testing.expect(h.request(0).reset);
    try h.send(.priority, 0, 3, &[_]u8{ 0xff, 0xff, 0xff, 0xff, 0xff });
    try h.send(.goaway, 0, 0, &(be32(0xffff_ffff) ++ be32(0xffff_ffff)));
    h.pump();
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
}

test "peer integers: hpack integers past 2^32 - 1, indexes and lengths of 2^32 - 1" {
    const blocks = [_][]const u8{
        // Indexed field 2^32 - 1 (7-bit prefix 127, then 2^32 - 128): no such entry.
        &.{ 0xff, 0x80, 0xff, 0xff, 0xff, 0x0f },
        // Indexed field 2^32: past a u32.
        &.{ 0xff, 0x81, 0xff, 0xff, 0xff, 0x0f },
        // Zero-valued continuation bytes past the fifth: refused, not a spin.
        &.{ 0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00 },
        // A literal (indexed name :path) whose value length is 2^32 - 1.
        &.{ 0x04, 0x7f, 0x80, 0xff, 0xff, 0xff, 0x0f, '/' },
        // A literal with a new name of 2^32 - 1 bytes.
        &.{ 0x00, 0x7f, 0x80, 0xff, 0xff, 0xff, 0x0f, 'n' },
        // A dynamic table size update to 2^32 - 1, and to 4097 (ours is 4096).
        &.{ 0x3f, 0xe0, 0xff, 0xff, 0xff, 0x0f },
        &.{ 0x3f, 0xe2, 0x1f },
    };
    for (blocks) |block| {
        var h: Harness = undefined;
        try opened(&h);
        defer h.deinit();
        try h.send(.headers, harness.end_both, 1, block);
        try expectGoaway(&h, .compression);
    }
    // A table size update to exactly ours (4096), then the request: taken.
    var h: Harness = undefined;
    try opened(&h);
    defer h.deinit();
    try h.send(.headers, harness.end_both, 1, &([_]u8{ 0x3f, 0xe1, 0x1f } ++ get_block));
    try testing.expectEqual(@as(usize, 1), test_server.rec.count);
    h.pump();
    try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
}

test "peer integers: h2 content-length: 1*DIGIT, at most 19 digits, no sign or _" {
    const Case = struct { value: []const u8, ok: bool };
    for ([_]Case{
        .{ .value = "5", .ok = true },
        .{ .value = "05", .ok = true },
        .{ .value = "+5", .ok = false },
        .{ .value = "-0", .ok = false },
        .{ .value = "0_5", .ok = false },
        .{ .value = "18446744073709551615", .ok = false }, // 20 digits
        .{ .value = "18446744073709551616", .ok = false },
    }) |c| {
        var h: Harness = undefined;
        try opened(&h);
        defer h.deinit();
        // POST, http, /, :authority x, then content-length (static name 28) as a literal.
        var block: [64]u8 = undefined;
        const start = [_]u8{ 0x83, 0x86, 0x84, 0x41, 0x01, 'x', 0x0f, 0x0d };
        @memcpy(block[0..start.len], &start);
        block[start.len] = @intCast(c.value.len);
        @memcpy(block[start.len + 1 ..][0..c.value.len], c.value);
        try h.send(.headers, harness.end_headers, 1, block[0 .. start.len + 1 + c.value.len]);
        h.pump();
        const s = h.sink.seen();
        if (c.ok) {
            try testing.expectEqual(@as(usize, 1), test_server.rec.count);
            try testing.expectEqual(@as(?u32, null), s.rst[1]);
        } else {
            try testing.expectEqual(@as(usize, 0), test_server.rec.count);
            try testing.expectEqual(code(.protocol), s.rst[1]);
        }
    }
}

test "peer integers: h2 empty CONTINUATION frames count against the useless-frame budget" {
    {
        var h: Harness = undefined;
        try opened(&h);
        defer h.deinit();
        // HEADERS without END_HEADERS opens a block; the client's SETTINGS counted as one.
        try h.send(.headers, 0, 1, &get_block);
        const n = h2.useless_frames_per_second_max - 1;
        const empty = head(0, 0x9, 0, 1);
        var flood: [9 * 1000]u8 = undefined;
        for (0..1000) |i| @memcpy(flood[i * 9 ..][0..9], &empty);
        for (0..n / 1000) |_| try h.feed(&flood);
        try h.feed(flood[0 .. 9 * (n % 1000)]);
        h.pump();
        try testing.expectEqual(@as(?u32, null), h.sink.seen().goaway);
        try h.feed(&empty);
        try expectGoaway(&h, .enhance_your_calm);
    }
    // The block's end, empty, is not counted.
    var g: Harness = undefined;
    try opened(&g);
    defer g.deinit();
    try g.send(.headers, 0, 1, &get_block);
    try g.feed(&head(0, 0x9, harness.end_headers, 1));
    try testing.expectEqual(@as(usize, 1), test_server.rec.count);
}
