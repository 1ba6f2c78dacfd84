//! The QUIC connection's error paths that once ended in `catch {}` (conn_receive.zig,
//! conn_send.zig), driven through `connection_tests.zig`'s harness: hand-built client
//! packets, 1-RTT keys from fixed secrets, no handshake.
const std = @import("std");
const testing = std.testing;
const connection = @import("connection.zig");
const frames = @import("frames.zig");
const packet = @import("packet.zig");
const protection = @import("protection.zig");
const recovery_mod = @import("recovery.zig");
const varint = @import("varint.zig");
const harness = @import("connection_tests.zig");
const client_cid = harness.client_cid;
const TE = frames.TransportError;

/// The harness's connection, past its handshake, with packets fed by number and our
/// datagrams read at a size the test picks.
const T = struct {
    h: harness.T,
    c: *connection.Connection = undefined,
    now_us: u64 = 0,
    out: [2048]u8 = undefined,

    fn init(t: *T) !void {
        try t.h.init(.{});
        t.h.establish();
        t.c = t.h.c;
        t.now_us = t.h.now_us;
    }

    fn deinit(t: *T) void {
        t.h.deinit();
    }

    /// The client's 1-RTT packet `pn` with `payload`, fed to the connection.
    fn feed(t: *T, pn: u64, payload: []const u8) void {
        t.h.now_us = t.now_us;
        t.h.feed(t.h.oneRtt(pn, payload));
    }

    /// Our next datagram (at most `room` bytes): its 1-RTT packet's number and frames.
    fn next(t: *T, room: usize) !?struct { pn: u64, payload: []u8 } {
        const n = t.c.send(t.out[0..room], t.now_us);
        if (n == 0) return null;
        const d = t.out[0..n];
        const h = try packet.parse(d, client_cid.len);
        const k = &t.h.client_1rtt.?;
        const hdr = try protection.unprotectHeader(&k.hp_rx, d[0..h.len], h.pn_offset, null);
        return .{ .pn = hdr.pn, .payload = try k.open(testing.allocator, d[0..h.len], &hdr) };
    }
};

fn frameOf(payload: []u8, want: frames.Type) !?frames.Frame {
    var it = frames.Iterator.init(payload, .one_rtt, .server);
    while (try it.next()) |f| if (frames.typeOf(f) == want) return f;
    return null;
}

/// The CONNECTION_CLOSE (either type) among `payload`'s frames.
fn closeOf(payload: []u8) !frames.Frame {
    var it = frames.Iterator.init(payload, .one_rtt, .server);
    while (try it.next()) |f| if (f == .connection_close) return f;
    return error.NoClose;
}

test "quic errors: a packet that acknowledges our ACK of newer packets is PROTOCOL_VIOLATION" {
    var t: T = undefined;
    try t.init();
    defer t.deinit();
    // Packets 5 and 6 (a request on stream 0, then a PING): an ACK is owed at once.
    t.feed(5, "\x0a\x00\x02hi"); // STREAM 0, with length, no FIN
    t.feed(6, "\x01");
    while (t.c.nextEvent()) |_| {}
    _ = try t.c.streamWrite(0, "hello", false);
    // Our packet: ACK of 5..6 and STREAM (ack-eliciting: recorded with its ACK's largest).
    const ours = (try t.next(t.out.len)).?;
    const ack = (try frameOf(ours.payload, .ack)).?.ack;
    try testing.expectEqual(@as(u64, 6), ack.largest);
    try testing.expect(try frameOf(ours.payload, .stream) != null);
    // Packet 2 arrives acknowledging it: the peer sent 2 after 6. When it is recorded, the
    // ranges below 7 are gone (the peer knows them): it is refused, and so is the peer.
    var a: [8]u8 = undefined;
    a[0..5].* = .{ 0x02, @intCast(ours.pn), 0, 0, 0 };
    t.now_us += 1000;
    t.feed(2, a[0..5]);
    try testing.expectEqual(connection.State.closing, t.c.state);
    const close = (try closeOf((try t.next(t.out.len)).?.payload)).connection_close;
    try testing.expectEqual(@intFromEnum(TE.protocol_violation), close.error_code);
}

test "quic errors: a close whose reason does not fit still goes, without its reason" {
    var t: T = undefined;
    try t.init();
    defer t.deinit();
    const reason = "r" ** connection.reason_max_bytes;
    t.c.closeApplication(0x10c, reason);
    // Header (1 + 8 + 4) and tag (16) around 40 bytes: less than the frame with its reason.
    const room = 1 + client_cid.len + 4 + protection.tag_len + 40;
    const small = (try t.next(room)) orelse return error.NothingSent;
    const bare = (try closeOf(small.payload)).connection_close;
    try testing.expect(bare.application);
    try testing.expectEqual(@as(u64, 0x10c), bare.error_code);
    try testing.expectEqualStrings("", bare.reason);
    // With room, the copy a packet of the client's brings carries the reason.
    t.now_us += 1000;
    t.feed(0, "\x01");
    const full = (try t.next(t.out.len)) orelse return error.NothingSent;
    try testing.expectEqualStrings(reason, (try closeOf(full.payload)).connection_close.reason);
}

test "quic errors: a probe with no room after the ACK stays owed and goes in the next datagram" {
    var t: T = undefined;
    try t.init();
    defer t.deinit();
    // 16 ranges (every second packet number): an ACK frame of more than 32 bytes.
    var pn: u64 = 0;
    while (pn < 32) : (pn += 2) t.feed(pn, "\x01");
    try testing.expect(t.c.recovery.ackDue(.application, t.now_us));
    var ranges_buf: [16]recovery_mod.Range = undefined;
    const a = t.c.recovery.writeAck(.application, t.now_us, &ranges_buf);
    var ranges: [16]frames.AckRange = undefined;
    for (a.ranges, 0..) |r, i| ranges[i] = .{ .smallest = r.smallest, .largest = r.largest };
    var scratch: [256]u8 = undefined;
    var w: varint.Writer = .{ .buf = &scratch };
    const exponent = t.c.config.ack_delay_exponent;
    try frames.writeAck(&w, ranges[0..a.ranges.len], a.delay_us, exponent, null);
    try testing.expect(w.pos >= 32);
    // A probe timeout asked for one probe; the datagram has room for the ACK alone.
    t.c.probe = .application;
    t.c.recovery.probes_owed = 1;
    const room = 1 + client_cid.len + 4 + w.pos + protection.tag_len;
    const first = (try t.next(room)) orelse return error.NothingSent;
    try testing.expect(try frameOf(first.payload, .ack) != null);
    try testing.expect(try frameOf(first.payload, .ping) == null);
    try testing.expectEqual(@as(?connection.Space, .application), t.c.probe);
    const second = (try t.next(t.out.len)) orelse return error.NothingSent;
    try testing.expect(try frameOf(second.payload, .ping) != null);
    try testing.expectEqual(@as(?connection.Space, null), t.c.probe);
}
