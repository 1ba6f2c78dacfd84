//! The send half of `connection.zig`: one datagram at a time, Initial, Handshake and 1-RTT
//! packets coalesced in that order, each packet's frames chosen by priority (ACK, CRYPTO,
//! HANDSHAKE_DONE, PATH_RESPONSE, PATH_CHALLENGE, flow control, stream control, STREAM data
//! round-robin, a PING for a PTO probe). Lost data goes first within each stream
//! (streams.zig). The congestion window, the pacer and the anti-amplification limit (RFC 9000
//! 8.1) decide whether anything ack-eliciting may go (and, while a new address is validated,
//! three times what came from it, RFC 9000 9.3.1); a datagram with an ack-eliciting Initial,
//! a PATH_CHALLENGE or a PATH_RESPONSE is padded to 1200 bytes as far as the budget allows
//! (RFC 9000 14.1, 8.2). Packets are written in clear, then padded, then sealed.
//!
//! Sizes: a datagram is at most the size path MTU discovery confirmed (`pmtu.zig`); when a
//! probe is due, the datagram is the probe alone (a 1-RTT PING padded to the size tried), and
//! after two probe timeouts in a row the PTO probes go at 1,200 bytes, so that a black hole
//! for larger ones still lets them through. Each datagram's ECN codepoint is decided with it
//! (`ecn.zig`), for the owner to read (`Connection.ecnToSend`).
const std = @import("std");
const assert = std.debug.assert;

const connection = @import("connection.zig");
const Connection = connection.Connection;
const Space = connection.Space;
const frames = @import("frames.zig");
const packet = @import("packet.zig");
const protection = @import("protection.zig");
const recovery_mod = @import("recovery.zig");
const streams = @import("streams.zig");
const sent_frames = @import("sent_frames.zig");
const varint = @import("varint.zig");
const conn_receive = @import("conn_receive.zig");
const conn_cids = @import("conn_cids.zig");
const pmtu = @import("pmtu.zig");

/// Packet numbers always go in 4 bytes: the header protection sample then never needs
/// padding, and the peer never misreads a number however far behind its ACKs are.
const pn_len = 4;
const tag_len = protection.tag_len;
/// The fewest bytes worth starting a packet with (header aside).
const packet_room_min = 32;
const initial_datagram_min = packet.initial_datagram_len_min;

const Pending = struct {
    space: Space,
    start: usize,
    pn_offset: usize,
    /// End of the frames (the tag follows).
    end: usize,
    pn: u64,
    ack_eliciting: bool = false,
    in_flight: bool = false,
    record: sent_frames.Packet = .{},
    ack_largest: ?u64 = null,
    /// A PATH_CHALLENGE or PATH_RESPONSE went in: the datagram is padded (RFC 9000 8.2.1).
    path_frame: bool = false,
};

const Builder = struct {
    out: []u8,
    pos: usize = 0,
    now_us: u64,
    pending: [3]Pending = undefined,
    count: usize = 0,
    closing: bool,
    /// The datagram is a path MTU probe: PING, padded to the whole of `out`.
    mtu_probe: bool = false,
};

pub fn send(c: *Connection, out: []u8, now_us: u64) usize {
    switch (c.state) {
        .closed, .draining => return 0,
        .closing => if (!c.close_owed) return 0,
        else => {},
    }
    // The closing period runs from the first try to send the close (RFC 9000 10.2), also
    // when the anti-amplification limit keeps it in: otherwise a connection closed before
    // its client's address is validated would have no deadline and be kept for ever.
    if (c.state == .closing and c.close_deadline_us == recovery_mod.never) {
        c.close_deadline_us = now_us +| 3 *| c.ptoUs();
    }
    // Set again below if the pacer holds data back: a stale time would wake the caller forever.
    c.pace_until_us = recovery_mod.never;
    if (c.state == .established) {
        c.updateKeysIfDue(); // RFC 9001 6.6: may close the connection
        if (c.state == .closed) return 0;
    }
    var limit = @min(out.len, c.pmtu.size, c.peer_max_udp_payload);
    // Two probe timeouts in a row: the probes go at the size every path carries.
    if (c.probe != null and c.recovery.pto_count >= 2) limit = @min(limit, pmtu.base);
    if (!c.address_validated) limit = @min(limit, amplificationAllowance(c));
    if (c.path_check) |k| limit = @intCast(@min(limit, k.allowance()));
    var b: Builder = .{ .out = out[0..limit], .now_us = now_us, .closing = c.state == .closing };
    const probe_size = mtuProbeSize(c, out.len, now_us);
    if (probe_size) |size| {
        b.out = out[0..size];
        b.mtu_probe = true;
    }
    for ([_]Space{ .initial, .handshake, .application }) |space| buildPacket(c, &b, space);
    if (b.count == 0) return 0;
    finalize(c, &b);
    if (probe_size) |size| c.pmtu.onProbeSent(size);
    markEcn(c, &b);
    c.bytes_sent +|= b.pos;
    if (c.path_check) |k| k.sent +|= b.pos;
    if (b.closing) {
        c.close_repeats +|= 1;
        c.onCloseSent();
    }
    if (!c.address_validated) c.recovery.setAmplificationLimited(amplificationAllowance(c) < c.config.max_datagram_bytes);
    return b.pos;
}

/// The size of the path MTU probe to send now, if one is due (`pmtu.zig`): only on a
/// confirmed connection on a validated path, with no PTO probe owed, and when the window and
/// the pacer let it go (a probe is in flight like any packet; its loss alone is no congestion
/// signal, `recovery.zig`).
fn mtuProbeSize(c: *Connection, room: usize, now_us: u64) ?u16 {
    if (c.state != .established or !c.recovery.handshake_confirmed) return null;
    if (c.one_rtt == null) return null;
    if (c.path_check != null or c.probe != null or !c.address_validated) return null;
    const size = c.pmtu.nextProbe(now_us, room) orelse return null;
    if (!c.recovery.canSend(size, true)) return null;
    if (c.recovery.nextSendTimeUs(size, now_us) > now_us) return null;
    return size;
}

/// The datagram's ECN codepoint: a 1-RTT packet once the handshake is confirmed takes the
/// validation's (`ecn.zig`); anything earlier goes unmarked.
fn markEcn(c: *Connection, b: *const Builder) void {
    const confirmed = c.recovery.handshake_confirmed and c.initial_keys == null and
        c.handshake_keys == null;
    for (b.pending[0..b.count]) |p| if (p.space == .application and confirmed) {
        c.ecn.onSent(p.pn, c.ecn.mark());
        return;
    };
    c.ecn.last_mark = 0;
}

/// Whether nothing can be sent until more comes from the peer: the anti-amplification budget
/// (RFC 9000 8.1) or a new address's (8.2) has no room for the smallest packet. A deadline
/// that would only send (an ACK owed) is then no deadline: kept, it would be due at once
/// for as long as the budget is spent, and the timer would fire without end.
pub fn sendBlocked(c: *const Connection) bool {
    const smallest = 1 + c.peer_cid.slice().len + pn_len + packet_room_min + tag_len;
    if (!c.address_validated and amplificationAllowance(c) < smallest) return true;
    const k = c.path_check orelse return false;
    return k.allowance() < smallest;
}

fn amplificationAllowance(c: *const Connection) usize {
    const allowed = 3 *| c.bytes_received;
    return @intCast(@min(allowed -| c.bytes_sent, std.math.maxInt(u32)));
}

/// When the pacer will let the data waiting go (the connection's deadline includes it).
pub fn pacedDeadline(c: *const Connection) ?u64 {
    return if (c.pace_until_us == recovery_mod.never) null else c.pace_until_us;
}

fn keysFor(c: *const Connection, space: Space) bool {
    return switch (space) {
        .initial => c.initial_keys != null,
        .handshake => c.handshake_keys != null,
        .application => c.one_rtt != null,
    };
}

fn buildPacket(c: *Connection, b: *Builder, space: Space) void {
    if (!keysFor(c, space)) return;
    const pn = c.next_pn[@intFromEnum(space)];
    const dcid = c.peer_cid.slice();
    const room = b.out[b.pos..];
    const built = switch (space) {
        .application => packet.writeShortHeader(room, dcid, pn, pn_len, c.one_rtt.?.tx_phase, false),
        else => packet.writeLongHeader(room, .{
            .long_type = if (space == .initial) .initial else .handshake,
            .dcid = dcid,
            .scid = c.our_cid.slice(),
            .pn = pn,
            .pn_len = pn_len,
        }, 64, tag_len), // a two-byte Length, patched once the frames are known
    } catch return;
    const frames_start = b.pos + built.header_len;
    if (b.out.len < frames_start + tag_len + packet_room_min) return;
    var p: Pending = .{ .space = space, .start = b.pos, .pn_offset = b.pos + built.pn_offset, .end = frames_start, .pn = pn };
    var w: varint.Writer = .{ .buf = b.out[frames_start .. b.out.len - tag_len] };
    if (b.closing) {
        writeClose(c, space, &w);
    } else if (b.mtu_probe) {
        if (space != .application) return;
        frames.write(&w, .ping) catch unreachable; // the packet has `packet_room_min` bytes
        p.ack_eliciting = true;
        p.in_flight = true;
    } else {
        // An ack-eliciting Initial needs a 1200-byte datagram (RFC 9000 14.1): when the
        // anti-amplification budget is smaller, the Initial carries only its ACK.
        const may_elicit = space != .initial or b.out.len >= initial_datagram_min;
        writeFrames(c, space, &w, &p, b.now_us, may_elicit);
    }
    if (w.pos == 0) return;
    p.end = frames_start + w.pos;
    c.next_pn[@intFromEnum(space)] += 1;
    b.pending[b.count] = p;
    b.count += 1;
    b.pos = p.end + tag_len;
}

fn writeClose(c: *Connection, space: Space, w: *varint.Writer) void {
    const f = c.closeFrame();
    // An application close before 1-RTT becomes APPLICATION_ERROR (RFC 9000 10.2.3).
    const hide = f.app and space != .application;
    var frame: frames.Frame = .{ .connection_close = .{
        .application = f.app and !hide,
        .error_code = if (hide) @intFromEnum(frames.TransportError.application_error) else f.code,
        .frame_type = f.frame_type,
        .reason = if (hide) "" else f.reason[0..f.reason_len],
    } };
    frames.write(w, frame) catch |err| switch (err) {
        // No room for the reason (up to 64 bytes): the code goes without it. Type, code,
        // frame type and an empty reason's length take at most 1 + 8 + 8 + 1 bytes, and a
        // packet is begun only with `packet_room_min` free: that always fits.
        error.NoSpace => {
            comptime assert(1 + 8 + 8 + 1 <= packet_room_min);
            assert(w.pos == 0 and w.room() >= packet_room_min);
            frame.connection_close.reason = "";
            frames.write(w, frame) catch unreachable;
        },
    };
}

fn writeFrames(c: *Connection, space: Space, w: *varint.Writer, p: *Pending, now_us: u64, may_elicit: bool) void {
    writeAckFrame(c, space, w, p, now_us);
    if (!may_elicit or !mayElicit(c, now_us)) return;
    const start = w.pos;
    writeCrypto(c, space, w, p);
    if (space == .application) {
        writePathFrames(c, w, p, now_us);
        writeApplication(c, w, p);
    }
    // A PING is one byte (its type). With none left (the ACK took all) the probe stays
    // owed (`finalize` clears it only once the probes went) and goes in the next datagram.
    if (c.probe == space and w.pos == start and w.room() > 0)
        frames.write(w, .ping) catch unreachable;
    if (w.pos > start) {
        p.ack_eliciting = true;
        p.in_flight = true;
    }
}

/// Room in the congestion window (or a probe owed) and the pacer's leave.
fn mayElicit(c: *Connection, now_us: u64) bool {
    const mtu = c.pmtu.size;
    if (!c.recovery.canSend(mtu, true)) return false;
    const at_us = c.recovery.nextSendTimeUs(mtu, now_us);
    if (at_us > now_us) {
        c.pace_until_us = at_us;
        return false;
    }
    c.pace_until_us = recovery_mod.never;
    return true;
}

fn ackWanted(c: *const Connection, space: Space, now_us: u64) bool {
    const r = &c.recovery;
    return switch (space) {
        .initial, .handshake => if (r.earlyAcks(space)) |a| a.received_any and (a.ackDue(now_us) or a.ack_eliciting_unacked > 0) else false,
        .application => r.application_acks.ackDue(now_us),
    };
}

fn writeAckFrame(c: *Connection, space: Space, w: *varint.Writer, p: *Pending, now_us: u64) void {
    if (!ackWanted(c, space, now_us)) return;
    var buf: [ack_ranges_written_max]recovery_mod.Range = undefined;
    const a = c.recovery.writeAck(space, now_us, &buf);
    if (a.ranges.len == 0) return;
    var ranges: [ack_ranges_written_max]frames.AckRange = undefined;
    for (a.ranges, 0..) |r, i| ranges[i] = .{ .smallest = r.smallest, .largest = r.largest };
    // ECN counts once any marked packet came in this space (RFC 9000 13.4.1: ACK_ECN).
    // (a count past the varint maximum would take 2^62 packets: capped all the same)
    const counts: ?frames.Ecn = if (c.recovery.ecnCounts(space)) |e| .{
        .ect0 = @min(e[0], varint.max),
        .ect1 = @min(e[1], varint.max),
        .ce = @min(e[2], varint.max),
    } else null;
    const exponent = c.config.ack_delay_exponent;
    frames.writeAck(w, ranges[0..a.ranges.len], a.delay_us, exponent, counts) catch return;
    c.recovery.onAckSent(space);
    p.ack_largest = a.ranges[0].largest;
}

const ack_ranges_written_max = 16;

fn writeCrypto(c: *Connection, space: Space, w: *varint.Writer, p: *Pending) void {
    const cs = c.crypto[@intFromEnum(space)] orelse return;
    while (recordRoom(p)) {
        const chunk = cs.send.next(w.room()) orelse return;
        if (chunk.data.len == 0) return;
        const n = frames.writeCrypto(w, chunk.offset, chunk.data) catch return;
        cs.send.onSent(chunk.offset, n, false);
        p.record.add(.{ .crypto = .{ .space = space, .offset = chunk.offset, .len = @intCast(n) } });
    }
}

/// One slot stays free for the ACK frame's record.
fn recordRoom(p: *const Pending) bool {
    return p.record.count + 1 < sent_frames.records_per_packet;
}

fn writeApplication(c: *Connection, w: *varint.Writer, p: *Pending) void {
    if (c.handshake_done_owed and recordRoom(p)) {
        frames.write(w, .handshake_done) catch return;
        c.handshake_done_owed = false;
        p.record.add(.handshake_done);
    }
    if (c.state != .established) return;
    if (c.new_token_owed and recordRoom(p)) {
        const token: []const u8 = c.new_token.?;
        frames.write(w, .{ .new_token = token }) catch return;
        c.new_token_owed = false;
        p.record.add(.new_token);
    }
    writeConnectionFlow(c, w, p);
    conn_cids.writeFrames(c, w, &p.record);
    for (c.stream_table.items) |s| writeStreamControl(c, s, w, p);
    writeDatagrams(c, w);
    writeStreams(c, w, p);
}

/// DATAGRAM frames (RFC 9221) before stream data, oldest first, as many as fit; the rest
/// wait for the next packet (`sendDatagram` took none larger than a packet of the smallest
/// size holds beside its header and an ACK). Nothing is recorded: a lost datagram is not
/// sent again, but its packet is ack-eliciting and in flight like any other.
fn writeDatagrams(c: *Connection, w: *varint.Writer) void {
    const d = c.datagrams orelse return;
    while (d.out.peek()) |data| {
        frames.write(w, .{ .datagram = .{ .data = data, .frame_len = 0 } }) catch return;
        d.out.pop(c.allocator);
    }
}

/// Our PATH_RESPONSE to the peer's challenge, and our PATH_CHALLENGE to a new address.
/// Neither is recorded: a lost response is the peer's to ask again, a lost challenge goes
/// again on the check's own timer (`path.zig`).
fn writePathFrames(c: *Connection, w: *varint.Writer, p: *Pending, now_us: u64) void {
    if (c.path_response) |data| {
        frames.write(w, .{ .path_response = &data }) catch return;
        c.path_response = null;
        p.path_frame = true;
    }
    const k = c.path_check orelse return;
    if (!k.owed or c.state != .established) return;
    frames.write(w, .{ .path_challenge = &k.challenge }) catch return;
    k.onChallengeSent(now_us, c.ptoUs());
    p.path_frame = true;
}

fn writeConnectionFlow(c: *Connection, w: *varint.Writer, p: *Pending) void {
    if (c.flow.max_data_owed and recordRoom(p)) {
        frames.write(w, .{ .max_data = c.flow.recv_max }) catch return;
        c.flow.max_data_owed = false;
        p.record.add(.max_data);
    }
    for (0..2) |d| {
        if (!c.flow.max_streams_owed[d] or !recordRoom(p)) continue;
        frames.write(w, .{ .max_streams = .{ .bidi = d == 0, .max = c.flow.peer_limit[d] } }) catch return;
        c.flow.max_streams_owed[d] = false;
        p.record.add(if (d == 0) .max_streams_bidi else .max_streams_uni);
    }
}

fn writeStreamControl(c: *Connection, s: *streams.Stream, w: *varint.Writer, p: *Pending) void {
    _ = c;
    if (s.max_stream_data_owed and recordRoom(p)) {
        frames.write(w, .{ .max_stream_data = .{ .stream_id = s.id, .max = s.recv().max_offset } }) catch return;
        s.max_stream_data_owed = false;
        p.record.add(.{ .max_stream_data = s.id });
    }
    if (s.reset_out != streams.no_code and !s.reset_out_sent and recordRoom(p)) {
        frames.write(w, .{ .reset_stream = .{ .stream_id = s.id, .error_code = s.reset_out, .final_size = s.send().write_offset } }) catch return;
        s.reset_out_sent = true;
        p.record.add(.{ .reset_stream = s.id });
    }
    if (s.stop_sending_out != streams.no_code and !s.stop_sending_sent and recordRoom(p)) {
        frames.write(w, .{ .stop_sending = .{ .stream_id = s.id, .error_code = s.stop_sending_out } }) catch return;
        s.stop_sending_sent = true;
        p.record.add(.{ .stop_sending = s.id });
    }
}

/// STREAM frames, one stream after another from where the last packet stopped.
fn writeStreams(c: *Connection, w: *varint.Writer, p: *Pending) void {
    const n = c.stream_table.items.len;
    var i: usize = 0;
    while (i < n and recordRoom(p) and w.room() > 16) : (i += 1) {
        const idx = (c.rr_cursor + i) % n;
        const s = c.stream_table.items[idx];
        if (!streams.serverSends(s.id) or s.reset_out != streams.no_code) continue;
        const chunk = s.send().next(w.room()) orelse continue;
        const taken = frames.writeStream(w, s.id, chunk.offset, chunk.data, chunk.fin, false) catch break;
        const fin = chunk.fin and taken == chunk.data.len;
        s.send().onSent(chunk.offset, taken, fin);
        p.record.add(.{ .stream = .{ .id = s.id, .offset = chunk.offset, .len = @intCast(taken), .fin = fin } });
        c.rr_cursor = @intCast(idx + 1);
    }
}

/// Pads, patches the long headers' Length, seals, and tells recovery what went.
fn finalize(c: *Connection, b: *Builder) void {
    var needs_pad = false;
    for (b.pending[0..b.count]) |p| if ((p.space == .initial and p.ack_eliciting) or p.path_frame) {
        needs_pad = true;
    };
    // A probe fills its whole size; others are padded as far as 1200 when they must be.
    const pad_to: usize = if (b.mtu_probe)
        b.out.len
    else if (needs_pad) initial_datagram_min else 0;
    if (b.pos < pad_to) {
        const extra = @min(pad_to - b.pos, b.out.len - b.pos);
        const last = &b.pending[b.count - 1];
        // The tag moves down: the padding goes where it was.
        @memset(b.out[last.end..][0..extra], 0);
        last.end += extra;
        last.in_flight = true;
        b.pos += extra;
    }
    var ack_eliciting_sent = false;
    for (b.pending[0..b.count]) |*p| {
        if (c.qlog) |q| q.packetSent(p.space, p.pn, b.out[p.pn_offset + pn_len .. p.end]);
        seal(c, b.out, p);
        record(c, p, b.now_us);
        if (p.ack_eliciting) ack_eliciting_sent = true;
    }
    // A PTO asks for two probes (RFC 9002 6.2.4): recovery counts them down as they go.
    if (c.recovery.probes_owed == 0) c.probe = null;
    if (ack_eliciting_sent and !c.idle_restarted_by_send) {
        c.restartIdle(b.now_us);
        c.idle_restarted_by_send = true;
    }
}

fn seal(c: *Connection, out: []u8, p: *const Pending) void {
    const bytes = out[p.start .. p.end + tag_len];
    const pn_offset = p.pn_offset - p.start;
    switch (p.space) {
        .application => {
            const k = c.one_rtt.?;
            k.protect(bytes, pn_offset, p.pn);
            if (p.ack_largest) |largest| k.onAckSent(largest);
        },
        else => {
            // Length covers the packet number, the frames and the tag.
            varint.encodeWithLen(bytes[pn_offset - 2 ..][0..2], pn_len + (p.end - p.pn_offset - pn_len) + tag_len, 2);
            const keys = if (p.space == .initial) c.initial_keys.? else c.handshake_keys.?;
            protection.protect(&keys.tx, bytes, pn_offset, p.pn);
        },
    }
}

fn record(c: *Connection, p: *Pending, now_us: u64) void {
    const bytes: u16 = @intCast(p.end + tag_len - p.start);
    var token: u32 = 0;
    if (p.in_flight) {
        if (p.ack_largest) |largest| p.record.add(.{ .ack = largest });
        p.record.space = p.space;
        token = c.sent.put(c.allocator, p.record) catch {
            for (p.record.slice()) |r| conn_receive.lost(c, r);
            return;
        };
    }
    c.recovery.onPacketSent(c.allocator, p.space, .{
        .pn = p.pn,
        .time_sent_us = now_us,
        .token = token,
        .bytes = bytes,
        .ack_eliciting = p.ack_eliciting,
        .in_flight = p.in_flight,
    }) catch {
        // Not tracked (the in-flight cap): what it carried counts as lost at once.
        if (p.in_flight) if (c.sent.take(c.allocator, token)) |rec| {
            for (rec.slice()) |r| conn_receive.lost(c, r);
        };
    };
}
