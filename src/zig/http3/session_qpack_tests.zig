//! The HTTP/3 session's QPACK side (RFC 9204), through `session_tests.zig`'s fake transport
//! and logging owner: the peer's decoder stream, sections blocked on the encoder stream, and
//! what happens when our decoder stream cannot take an instruction or memory runs out.
const std = @import("std");
const testing = std.testing;
const qpack_decoder = @import("qpack_decoder.zig");
const st = @import("session_tests.zig");
const Harness = st.Harness;
const headersFrame = st.headersFrame;
const dataFrame = st.dataFrame;
const concat = st.concat;
const get = st.get;

test "h3 session: the peer's decoder stream: cancellations read, acknowledgments of nothing refused" {
    for ([_][]const u8{ &.{ 0x03, 0x80 }, &.{ 0x03, 0x01 }, &.{ 0x03, 0x00 } }) |bytes| {
        var h: Harness = undefined;
        try h.init(.{});
        defer h.deinit();
        // Stream Cancellations, one split over two reads (6-bit prefix 63, then 1).
        h.fake.send(2, &.{ 0x03, 0x44, 0x7f }, false);
        h.s.run();
        h.fake.send(2, &.{0x01}, false);
        h.s.run();
        try testing.expectEqual(@as(?u64, null), h.fake.close_code);
        h.fake.send(2, bytes[1..], false);
        h.s.run();
        try h.expectClosed(.qpack_decoder_stream_error);
    }
}

test "h3 session: a blocked section (RFC 9204 B.2) waits for the encoder stream, then decodes" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    // B.2's section (Required Insert Count 2, post-base :authority and :path) with
    // :method GET and :scheme https from the static table, then DATA, then FIN.
    var d: [16]u8 = undefined;
    var all: [64]u8 = undefined;
    const section = [_]u8{ 0x01, 0x06, 0x03, 0x81, 0x10, 0x11, 0xd1, 0xd7 };
    h.fake.send(0, concat(&all, &.{ &section, dataFrame(&d, "hi") }), true);
    h.s.run();
    try h.expectLog("");
    var hex: [64]u8 = undefined;
    const inserts = @import("qpack_decoder_tests.zig").unhex(&hex, "02 3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d c10c 2f73 616d 706c 652f 7061 7468");
    // The encoder stream split: the first insert alone unblocks nothing.
    h.fake.send(2, inserts[0..20], false);
    h.s.run();
    try h.expectLog("");
    h.fake.send(2, inserts[20..], false);
    h.s.run();
    try h.expectLog(
        \\request 0 GET /sample/path ? @www.example.com
        \\  host: www.example.com
        \\body 0 "hi"
        \\body 0 "" fin
        \\
    );
    // Our decoder stream, opened now: its type, then the Section Acknowledgment of stream 0.
    try testing.expectEqualSlices(u8, &.{ 0x03, 0x80 }, h.fake.out(7));
}

test "h3 session: a blocked stream reset by the peer is forgotten; more blocked streams than allowed fail" {
    var h: Harness = undefined;
    try h.init(.{ .qpack_blocked_streams = 1 });
    defer h.deinit();
    const section = [_]u8{ 0x01, 0x06, 0x03, 0x81, 0x10, 0x11, 0xd1, 0xd7 };
    h.fake.send(0, &section, false);
    h.s.run();
    try testing.expectEqual(@as(usize, 1), h.s.decoder.?.blockedCount());
    h.fake.push(.{ .reset = .{ .id = 0, .code = 0x10c, .final_size = 8 } });
    h.s.run();
    try testing.expectEqual(@as(usize, 0), h.s.decoder.?.blockedCount());
    try testing.expectEqual(@as(usize, 0), h.s.liveStreams());
    try h.expectLog("");
    // Our decoder stream: its type, then Stream Cancellation of stream 0 (0x40).
    try testing.expectEqualSlices(u8, &.{ 0x03, 0x40 }, h.fake.out(7));
    h.fake.send(4, &section, false);
    h.fake.send(8, &section, false);
    h.s.run();
    try h.expectClosed(.qpack_decompression_failed);
}

test "h3 session: a Stream Cancellation the decoder stream has no room for is H3_EXCESSIVE_LOAD" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    h.fake.write_room = 0; // the peer reads nothing of our decoder stream
    var hb: [256]u8 = undefined;
    const head = headersFrame(&hb, &get);
    // Stream ids from 2^20: each cancellation is 4 bytes (a 6-bit prefix, then 3 more).
    var id: u64 = 1 << 20;
    var aborted: usize = 0;
    while (h.fake.close_code == null and aborted < 200) : (aborted += 1) {
        h.fake.send(id, head, false);
        h.s.run();
        try h.s.abort(id, .cancelled);
        id += 4;
    }
    try h.expectClosed(.excessive_load);
    try testing.expect(aborted > qpack_decoder.output_bytes_max / 4 - 4);
    try testing.expectError(error.Closed, h.s.abort(id, .cancelled));
}

test "h3 session: Insert Count Increments with no room in the decoder stream: H3_EXCESSIVE_LOAD" {
    var h: Harness = undefined;
    try h.init(.{});
    defer h.deinit();
    h.fake.write_room = 0; // the peer reads nothing of our decoder stream
    var hex: [64]u8 = undefined;
    // The encoder stream: its type, Set Dynamic Table Capacity 220, one insert.
    const unhex = @import("qpack_decoder_tests.zig").unhex;
    const first = unhex(&hex, "02 3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d");
    h.fake.send(2, first, false);
    h.s.run();
    // Then a Duplicate at a time: each read owes one Insert Count Increment (one byte).
    var sent: usize = 0;
    while (h.fake.close_code == null and sent < 400) : (sent += 1) {
        h.fake.send(2, &.{0x00}, false);
        h.s.run();
    }
    try h.expectClosed(.excessive_load);
    try testing.expect(sent > qpack_decoder.output_bytes_max / 2);
}

test "h3 session: no memory for a Stream Cancellation (or its decoder) is H3_INTERNAL_ERROR" {
    var hex: [16]u8 = undefined;
    // The encoder stream's type and Set Dynamic Table Capacity 220: the decoder exists,
    // and owes nothing.
    const capacity = @import("qpack_decoder_tests.zig").unhex(&hex, "02 3fbd01");
    for ([_]bool{ false, true }) |decoder_first| {
        var failing = std.testing.FailingAllocator.init(testing.allocator, .{});
        var h: Harness = undefined;
        try h.initWith(.{}, failing.allocator());
        defer h.deinit();
        if (decoder_first) {
            h.fake.send(2, capacity, false);
            h.s.run();
            try testing.expect(h.s.decoder != null);
        }
        var hb: [256]u8 = undefined;
        h.fake.send(0, headersFrame(&hb, &get), false);
        h.s.run();
        try testing.expectEqual(decoder_first, h.s.decoder != null);
        failing.fail_index = failing.alloc_index; // the next allocation fails
        try h.s.abort(0, .cancelled);
        try h.expectClosed(.internal_error);
    }
}
