//! Every integer a QUIC client controls, at its largest allowed value and one past (or the
//! largest a varint encodes, 2^62 - 1, where one past cannot be written), through the real
//! parsers and a real connection (the harness of `connection_tests.zig`). Each ends in the
//! transport error RFC 9000 names, or is taken; none may panic. docs/PEER_INTEGERS.md lists
//! them with the field, its bound and where it is checked.
const std = @import("std");
const testing = std.testing;
const connection = @import("connection.zig");
const frames = @import("frames.zig");
const packet = @import("packet.zig");
const protection = @import("protection.zig");
const transport_params = @import("transport_params.zig");
const varint = @import("varint.zig");
const T = @import("connection_tests.zig").T;
const TE = frames.TransportError;

const max = varint.max;

/// A 1-RTT payload of varints and then `tail`.
fn payload(buf: []u8, values: []const u64, tail: []const u8) []const u8 {
    var w: varint.Writer = .{ .buf = buf };
    for (values) |v| w.varint(v) catch unreachable;
    w.bytes(tail) catch unreachable;
    return w.written();
}

/// An established connection fed one 1-RTT packet of `values` and `tail`.
fn fedOne(t: *T, config: connection.Config, values: []const u64, tail: []const u8) !void {
    try t.init(config);
    t.establish();
    var buf: [128]u8 = undefined;
    t.feed(t.oneRtt(0, payload(&buf, values, tail)));
}

/// The transport error code the connection closed with after one packet (null: still open).
fn closeAfter(values: []const u64, tail: []const u8) !?u64 {
    var t: T = undefined;
    try fedOne(&t, .{}, values, tail);
    defer t.deinit();
    if (t.c.state == .established) return null;
    return try t.closeCode();
}

/// Expects the connection closed with `want` after one packet (null: still open).
fn expectClose(want: ?TE, values: []const u64, tail: []const u8) !void {
    const got = try closeAfter(values, tail);
    try testing.expectEqual(if (want) |e| @as(?u64, @intFromEnum(e)) else null, got);
}

fn code(e: TE) u64 {
    return @intFromEnum(e);
}

test "peer integers: quic STREAM offset + length at 2^62 - 1 and one past" {
    // Type 0x0e: offset and length. Ending at 2^62 - 1: a valid frame, far past the window.
    try expectClose(.flow_control_error, &.{ 0x0e, 0, max - 1, 1 }, "a");
    // Ending at 2^62: refused by the parser before any stream is touched.
    try expectClose(.frame_encoding_error, &.{ 0x0e, 0, max, 1 }, "a");
    // Without a Length field the data runs to the packet's end: the same check.
    try expectClose(.frame_encoding_error, &.{ 0x0c, 0, max }, "a");
    // At the window's last byte (64 KiB by default): taken.
    try expectClose(null, &.{ 0x0e, 0, 64 * 1024 - 1, 1 }, "a");
}

test "peer integers: quic CRYPTO offset + length at 2^62 - 1 and one past" {
    // In an Initial: past the 64 KiB the CRYPTO stream holds, CRYPTO_BUFFER_EXCEEDED.
    var t: T = undefined;
    try t.init(.{});
    var buf: [64]u8 = undefined;
    t.feed(t.initial(0, payload(&buf, &.{ 0x06, max - 1, 1 }, "x")));
    try testing.expectEqual(code(.crypto_buffer_exceeded), try t.closeCode());
    t.deinit();
    try t.init(.{});
    defer t.deinit();
    t.feed(t.initial(0, payload(&buf, &.{ 0x06, max, 1 }, "x")));
    try testing.expectEqual(code(.frame_encoding_error), try t.closeCode());
    // In 1-RTT a client's CRYPTO is ignored, but still parsed with the same bound.
    try expectClose(null, &.{ 0x06, max - 1, 1 }, "x");
    try expectClose(.frame_encoding_error, &.{ 0x06, max, 1 }, "x");
}

test "peer integers: quic MAX_DATA and MAX_STREAM_DATA at 2^62 - 1 are taken" {
    var t: T = undefined;
    try fedOne(&t, .{}, &.{ 0x0a, 0, 1 }, "q"); // opens stream 0
    defer t.deinit();
    _ = t.c.nextEvent();
    var buf: [64]u8 = undefined;
    t.feed(t.oneRtt(1, payload(&buf, &.{ 0x10, max, 0x11, 0, max, 0x14, max, 0x15, 0, max }, "")));
    try testing.expectEqual(connection.State.established, t.c.state);
    try testing.expectEqual(max, t.c.flow.send_max);
    try testing.expectEqual(max, t.c.findStream(0).?.send_max);
    // Writing under limits that large stays within the stream's buffer, and goes out.
    try testing.expectEqual(@as(usize, 5), try t.c.streamWrite(0, "hello", true));
    try testing.expect(try t.sends(.stream));
    // MAX_STREAM_DATA for a stream the client may not have opened yet: STREAM_LIMIT_ERROR.
    t.feed(t.oneRtt(2, payload(&buf, &.{ 0x11, max - 3, max }, "")));
    try testing.expectEqual(code(.stream_limit_error), try t.closeCode());
}

test "peer integers: quic MAX_STREAMS 2^60 is taken, 2^60 + 1 is FRAME_ENCODING_ERROR" {
    var t: T = undefined;
    try fedOne(&t, .{}, &.{ 0x13, 1 << 60 }, "");
    defer t.deinit();
    try testing.expectEqual(@as(u64, 1 << 60), t.c.flow.uni_limit);
    _ = try t.c.openUni();
    try expectClose(.frame_encoding_error, &.{ 0x13, (1 << 60) + 1 }, "");
    try expectClose(.frame_encoding_error, &.{ 0x12, (1 << 60) + 1 }, "");
    // STREAMS_BLOCKED has the same bound.
    try expectClose(null, &.{ 0x16, 1 << 60 }, "");
    try expectClose(.frame_encoding_error, &.{ 0x17, (1 << 60) + 1 }, "");
}

test "peer integers: quic RESET_STREAM final size at the window and 2^62 - 1" {
    // Final size 64 KiB, the window: taken, and the application told.
    var t: T = undefined;
    try fedOne(&t, .{}, &.{ 0x04, 0, 7, 64 * 1024 }, "");
    defer t.deinit();
    const want: connection.Event = .{ .reset = .{ .id = 0, .code = 7, .final_size = 64 * 1024 } };
    try testing.expectEqual(want, t.c.nextEvent().?);
    // One past the window, and the largest encodable: FLOW_CONTROL_ERROR.
    try expectClose(.flow_control_error, &.{ 0x04, 0, 7, 64 * 1024 + 1 }, "");
    try expectClose(.flow_control_error, &.{ 0x04, 0, 7, max }, "");
    // An error code of 2^62 - 1 reaches the application as it is.
    try expectClose(null, &.{ 0x04, 0, max, 0 }, "");
}

test "peer integers: quic stream IDs up to 2^62 - 1 are STREAM_LIMIT or STREAM_STATE errors" {
    // The client's last bidirectional stream (index 2^60 - 1): past our limit.
    try expectClose(.stream_limit_error, &.{ 0x08, max - 3 }, "");
    // Our last unidirectional one, never opened: the client may not send on it.
    try expectClose(.stream_state_error, &.{ 0x08, max }, "");
    try expectClose(.stream_state_error, &.{ 0x11, max, 1 }, "");
    // The last stream our limit allows (100 by default), and the first past it.
    try expectClose(null, &.{ 0x08, 99 * 4 }, "");
    try expectClose(.stream_limit_error, &.{ 0x08, 100 * 4 }, "");
    // STOP_SENDING with the largest code on an open stream: told as it is.
    var t: T = undefined;
    try fedOne(&t, .{}, &.{ 0x05, 0, max }, "");
    defer t.deinit();
    const want: connection.Event = .{ .stop_sending = .{ .id = 0, .code = max } };
    try testing.expectEqual(want, t.c.nextEvent().?);
}

test "peer integers: quic ACK of packet 2^62 - 1 is PROTOCOL_VIOLATION; ranges below zero refused" {
    // Largest 2^62 - 1, never sent: an ACK of an unsent packet.
    try expectClose(.protocol_violation, &.{ 0x02, max, 0, 0, 0 }, "");
    // First range 2^62 - 1 below largest 2^62 - 2: below packet 0.
    try expectClose(.frame_encoding_error, &.{ 0x02, max - 1, 0, 0, max }, "");
    // A gap of 2^62 - 1 below a range at 5.
    try expectClose(.frame_encoding_error, &.{ 0x02, 5, 0, 1, 0, max, 0 }, "");
    // A count of 2^62 - 1 ranges: refused before any is read.
    try expectClose(.frame_encoding_error, &.{ 0x02, 5, 0, max, 0 }, "");
    // ECN counts of 2^62 - 1 (unused): the frame is otherwise an ACK of an unsent packet.
    try expectClose(.protocol_violation, &.{ 0x03, 0, max, 0, 0, max, max, max }, "");
}

test "peer integers: quic CONNECTION_CLOSE reason to the packet's end, and one byte past" {
    var t: T = undefined;
    try fedOne(&t, .{}, &.{ 0x1c, max, max, 5 }, "bye!!");
    defer t.deinit();
    try testing.expectEqual(connection.State.draining, t.c.state);
    const want: connection.Event = .{ .closed = .{ .code = max, .app = false } };
    try testing.expectEqual(want, t.c.nextEvent().?);
    try expectClose(.frame_encoding_error, &.{ 0x1c, 0, 0, 6 }, "bye!!");
    try expectClose(.frame_encoding_error, &.{ 0x1d, 0, max }, "x");
}

test "peer integers: quic NEW_TOKEN, DATAGRAM and unknown frame types from a client" {
    // NEW_TOKEN only comes from a server, whatever its length says.
    try expectClose(.protocol_violation, &.{ 0x07, max }, "t");
    // DATAGRAM (RFC 9221) was not offered: PROTOCOL_VIOLATION; a length past the packet
    // is FRAME_ENCODING_ERROR before that.
    try expectClose(.protocol_violation, &.{ 0x30, 0 }, "d");
    try expectClose(.frame_encoding_error, &.{ 0x31, max }, "d");
    // The largest frame type a varint holds.
    try expectClose(.frame_encoding_error, &.{max}, "");
    // RETIRE_CONNECTION_ID of a sequence number never issued.
    try expectClose(.protocol_violation, &.{ 0x19, max }, "");
    // DATA_BLOCKED and STREAM_DATA_BLOCKED at 2^62 - 1 are only news.
    try expectClose(null, &.{ 0x14, max, 0x15, 0, max }, "");
}

test "peer integers: quic packet numbers near 2^62 - 1 never decode past it" {
    const pn_max = packet.pn_max;
    // The decoder: after the top number, every truncation reads as one below it.
    for ([_]usize{ 1, 2, 4 }) |n| {
        const win = @as(u64, 1) << @intCast(8 * n);
        for ([_]u64{ 0, 1, win / 2, win / 2 + 1, win - 1 }) |truncated| {
            try testing.expect(packet.pnDecode(pn_max, truncated, n) <= pn_max);
            try testing.expect(packet.pnDecode(pn_max - 1, truncated, n) <= pn_max);
        }
    }
    try testing.expectEqual(pn_max, packet.pnDecode(pn_max - 1, 0xff, 1));
    // A connection whose client reached 2^62 - 1: a packet sealed as 2^62 + 5 (truncated 5)
    // is read as 2^62 + 5 - 2^32, fails to open and is dropped, no panic.
    var t: T = undefined;
    try t.init(.{});
    defer t.deinit();
    t.establish();
    try t.c.recovery.onPacketReceived(.application, pn_max - 1, false, t.now_us);
    t.feed(t.oneRtt(pn_max, "\x01"));
    try testing.expectEqual(connection.State.established, t.c.state);
    try testing.expect(t.c.recovery.isDuplicate(.application, pn_max));
    const built = try packet.writeShortHeader(&t.buf, "server01", 5, 4, 0, false);
    t.buf[built.header_len] = 0x01; // PING
    const len = built.header_len + 1 + 3 + protection.tag_len;
    @memset(t.buf[built.header_len + 1 .. len], 0);
    t.client_1rtt.?.protect(t.buf[0..len], built.pn_offset, pn_max + 6);
    t.feed(t.buf[0..len]);
    try testing.expectEqual(connection.State.established, t.c.state);
}

test "peer integers: quic long header Length, token length and CID lengths at their bounds" {
    var buf: [96]u8 = undefined;
    const h: packet.LongHeader = .{
        .long_type = .initial,
        .dcid = "d" ** 20,
        .scid = "s" ** 20,
        .pn = 0,
        .pn_len = 4,
    };
    const built = try packet.writeLongHeader(&buf, h, 20, 16);
    const whole = built.pn_offset + 4 + 20 + 16;
    try testing.expectEqual(whole, (try packet.parse(buf[0..whole], 0)).len);
    // Length one past the datagram, and the largest varint: Truncated (dropped).
    try testing.expectError(error.Truncated, packet.parse(buf[0 .. whole - 1], 0));
    var big: [128]u8 = undefined;
    var w: varint.Writer = .{ .buf = &big };
    try w.bytes(&.{ 0xc0, 0, 0, 0, 1, 0, 0 }); // Initial, v1, no CIDs
    try w.varint(0); // token length
    try w.varint(max); // Length
    try w.bytes(&([_]u8{0} ** 40));
    try testing.expectError(error.Truncated, packet.parse(w.written(), 0));
    // A token length of 2^62 - 1 and one reaching one byte past the datagram.
    w = .{ .buf = &big };
    try w.bytes(&.{ 0xc0, 0, 0, 0, 1, 0, 0 });
    try w.varint(max);
    try testing.expectError(error.Truncated, packet.parse(w.written(), 0));
    w = .{ .buf = &big };
    try w.bytes(&.{ 0xc0, 0, 0, 0, 1, 0, 0 });
    try w.varint(3);
    try w.bytes("ab");
    try testing.expectError(error.Truncated, packet.parse(w.written(), 0));
    // CID lengths: 20 read, 21 and 255 refused in v1.
    for ([_]u8{ 21, 255 }) |n| {
        var b = buf;
        b[5] = n;
        try testing.expectError(error.CidTooLong, packet.parse(b[0..whole], 0));
    }
}

test "peer integers: quic transport parameter lengths and CIDs at their bounds" {
    var buf: [128]u8 = undefined;
    var w: varint.Writer = .{ .buf = &buf };
    // initial_source_connection_id of 20 bytes: taken; 21: refused.
    try w.varint(0x0f);
    try w.varint(20);
    try w.bytes("c" ** 20);
    const p = try transport_params.decodeClient(w.written());
    try testing.expectEqual(@as(u8, 20), p.initial_source_connection_id.?.len);
    w = .{ .buf = &buf };
    try w.varint(0x0f);
    try w.varint(21);
    try w.bytes("c" ** 21);
    try testing.expectError(error.TransportParameter, transport_params.decodeClient(w.written()));
    // A parameter length of 2^62 - 1, and one byte past the list.
    for ([_]u64{ max, 2 }) |n| {
        w = .{ .buf = &buf };
        try w.varint(0x0f);
        try w.varint(0);
        try w.varint(0x04);
        try w.varint(n);
        try w.bytes("\x01");
        const refused = transport_params.decodeClient(w.written());
        try testing.expectError(error.TransportParameter, refused);
    }
    // The largest id a varint holds is skipped as unknown (GREASE-like).
    w = .{ .buf = &buf };
    try w.varint(0x0f);
    try w.varint(0);
    try w.varint(max);
    try w.varint(1);
    try w.bytes("\x01");
    _ = try transport_params.decodeClient(w.written());
}

test "peer integers: quic CIDs of 255 bytes (unknown version) and of 21 (v1)" {
    const et = @import("endpoint_tests.zig");
    const endpoint = @import("endpoint.zig");
    var f: et.Fixture = undefined;
    try f.init(.never);
    defer f.deinit();
    // An unknown version: its CIDs may be 255 bytes (RFC 8999); both are echoed back.
    var buf = [_]u8{0} ** 1200;
    buf[0..5].* = .{ 0xc0, 0x1a, 0x2a, 0x3a, 0x4a };
    buf[5] = 255;
    @memset(buf[6..][0..255], 'd');
    buf[6 + 255] = 255;
    @memset(buf[7 + 255 ..][0..255], 's');
    const peer = et.peer4(9, 7);
    const vn_outcome = f.ep.onDatagram(&buf, peer, et.local, 0, 1, &f.out);
    try testing.expectEqual(endpoint.Outcome.version_negotiation, vn_outcome);
    const vn = f.take().?;
    try testing.expectEqual(@as(usize, endpoint.answer_len_max), vn.len);
    const h = try packet.parse(vn, 0);
    try testing.expectEqual(@as(usize, 255), h.dcid.len);
    try testing.expectEqual(@as(usize, 255), h.scid.len);
    // The same lengths in a v1 Initial: 21 and 255 are dropped as malformed.
    for ([_]u8{ 21, 255 }) |n| {
        buf[1..5].* = .{ 0, 0, 0, 1 };
        buf[5] = n;
        const outcome = f.ep.onDatagram(&buf, peer, et.local, 0, 1, &f.out);
        try testing.expectEqual(endpoint.Outcome.dropped_malformed, outcome);
    }
    try testing.expectEqual(@as(?[]const u8, null), f.take());
}
