//! The receive half of `connection.zig`: a datagram's coalesced packets opened with their
//! level's keys (what cannot be opened is dropped, RFC 9001 5.5), duplicates dropped, frames
//! applied in order (a frame error closes the connection with its transport error), CRYPTO
//! data fed to the TLS shim and the keys it yields installed, ACKs handed to recovery, whose
//! acknowledged and lost packets come back here through `Sink`.
const std = @import("std");
const assert = std.debug.assert;

const connection = @import("connection.zig");
const Connection = connection.Connection;
const Space = connection.Space;
const Stream = connection.Stream;
const frames = @import("frames.zig");
const packet = @import("packet.zig");
const protection = @import("protection.zig");
const recovery_mod = @import("recovery.zig");
const streams = @import("streams.zig");
const sent_frames = @import("sent_frames.zig");
const tls = @import("tls.zig");
const transport_params = @import("transport_params.zig");
const conn_cids = @import("conn_cids.zig");
const TE = frames.TransportError;

/// `Drop`: leave the packet unprocessed and unacknowledged (a reassembly buffer could not
/// take a frame: the peer sends it again). `Closed`: the connection closed on an error.
const Stop = error{ Drop, Closed };

/// Where a datagram came from: the connection's current address or another one.
pub const From = enum { current, other };

/// True when `from` is `.other` and the datagram carried the newest non-probing 1-RTT
/// packet so far (RFC 9000 9.3). `ecn_bits`: the datagram's IP header ECN field, counted for
/// each of its packets (RFC 9000 13.4.1).
pub fn receive(c: *Connection, datagram: []u8, ecn_bits: u2, now_us: u64, from: From) bool {
    switch (c.state) {
        .closed, .draining => return false,
        .closing => {
            // RFC 9000 10.2.1: answer with the close again, a bounded number of times.
            if (c.close_repeats < connection.close_repeats_max) c.close_owed = true;
            return false;
        },
        else => {},
    }
    c.bytes_received +|= datagram.len;
    if (from == .current) if (c.path_check) |k| {
        k.received +|= datagram.len;
    };
    if (!c.address_validated) c.recovery.setAmplificationLimited(3 *| c.bytes_received -| c.bytes_sent < c.config.max_datagram_bytes);
    var rest = datagram;
    var opened_any = false;
    var newest = false;
    while (rest.len > 0 and (c.state == .handshaking or c.state == .established)) {
        const h = packet.parse(rest, c.our_cid.len) catch break;
        const bytes = rest[0..h.len];
        rest = rest[h.len..];
        if (h.kind == .one_rtt and !c.cids.isOurs(h.dcid)) break;
        if (!h.isProtected() or h.kind == .zero_rtt) continue; // 0-RTT is refused: dropped
        switch (openAndProcess(c, &h, bytes, ecn_bits, now_us)) {
            .unopened => {},
            .opened => opened_any = true,
            .newest_non_probing => {
                opened_any = true;
                newest = true;
            },
        }
    }
    if (opened_any) {
        c.restartIdle(now_us);
        c.idle_restarted_by_send = false;
    }
    return from == .other and newest and (c.state == .established);
}

fn spaceOf(kind: packet.Kind) Space {
    return switch (kind) {
        .initial => .initial,
        .handshake => .handshake,
        .one_rtt => .application,
        else => unreachable,
    };
}

fn largestReceived(c: *const Connection, space: Space) ?u64 {
    return c.recovery.largestReceived(space);
}

const Opened = struct { pn: u64, payload: []u8 };

const OpenError = protection.OneRtt.OpenError;

fn teCode(e: TE) u64 {
    return @intFromEnum(e);
}

fn open(
    c: *Connection,
    space: Space,
    h: *const packet.Header,
    bytes: []u8,
    now_us: u64,
) OpenError!?Opened {
    const largest = largestReceived(c, space);
    switch (space) {
        .initial, .handshake => {
            const keys = (if (space == .initial) c.initial_keys else c.handshake_keys) orelse return null;
            const o = try protection.unprotect(&keys.rx, bytes, h.pn_offset, largest);
            return .{ .pn = o.header.pn, .payload = o.payload };
        },
        .application => {
            const k = c.one_rtt orelse return null;
            const hdr = try protection.unprotectHeader(&k.hp_rx, bytes, h.pn_offset, largest);
            const payload = try k.openAt(c.allocator, bytes, &hdr, .{
                .now_us = now_us,
                // The previous keys stay three PTOs after an update (RFC 9001 6.5).
                .keep_previous_us = 3 *| c.ptoUs(),
                .largest_received = largest,
            });
            return .{ .pn = hdr.pn, .payload = payload };
        },
    }
}

/// Whether the packet was opened (and so counts as received for the idle timer), and
/// whether it is the newest 1-RTT packet yet with a non-probing frame (RFC 9000 9.3).
const Processed = enum { unopened, opened, newest_non_probing };

fn openAndProcess(c: *Connection, h: *const packet.Header, bytes: []u8, ecn_bits: u2, now_us: u64) Processed {
    const space = spaceOf(h.kind);
    const o = (open(c, space, h, bytes, now_us) catch |e| {
        switch (e) {
            error.ReservedBitsSet => {
                c.closeTransport(teCode(.protocol_violation), 0, "reserved bits");
            },
            error.KeyUpdateError => c.closeTransport(teCode(.key_update_error), 0, "key update"),
            error.AuthenticationFailed => if (space == .application) c.onAuthenticationFailed(),
            else => {},
        }
        return .unopened;
    }) orelse return .unopened;
    if (c.recovery.isDuplicate(space, o.pn)) return .unopened;
    if (c.qlog) |q| q.packetReceived(space, o.pn, o.payload);
    const largest_before = largestReceived(c, space);
    if (space == .handshake) {
        // RFC 9000 8.1: a Handshake packet proves the address; RFC 9001 4.9.1: Initial keys go.
        if (!c.address_validated) {
            c.address_validated = true;
            c.recovery.setAmplificationLimited(false);
        }
        if (c.initial_keys != null) c.discardInitial();
    }
    // RETIRE_CONNECTION_ID (1-RTT only) must not name the ID its packet was sent to.
    c.cids.packet_dcid = if (h.kind == .one_rtt) transport_params.Cid.init(h.dcid) else .{};
    const seen = processFrames(c, space, h.kind, o.payload, now_us) catch |e| switch (e) {
        error.Drop => return .opened,
        error.Closed => return .opened,
    };
    // The handshake may have dropped this space's keys meanwhile (the client's Finished
    // confirms it): then nothing is recorded, or an ACK would be owed that can never go.
    if (hasKeys(c, space)) {
        const rec = &c.recovery;
        rec.onPacketReceived(space, o.pn, seen.ack_eliciting, now_us) catch |err| switch (err) {
            // Not a duplicate when opened, it is one now only if its own ACK frame raised
            // the floor past it: it acknowledged a packet of ours whose ACK named numbers
            // above its own, which the peer sent before it. Packet numbers grow (RFC 9000
            // 12.3): the peer broke that.
            error.DuplicatePacket => {
                const code = @intFromEnum(TE.protocol_violation);
                c.closeTransport(code, 0, "packet number out of order");
                return .opened;
            },
        };
        rec.countEcn(space, ecn_bits); // not for a duplicate (RFC 9000 13.4.1)
    }
    const newest = space == .application and (largest_before == null or o.pn > largest_before.?);
    if (newest and c.state == .established) conn_cids.onNewestPacket(c, h.dcid);
    return if (newest and !seen.probing_only) .newest_non_probing else .opened;
}

fn hasKeys(c: *const Connection, space: Space) bool {
    return switch (space) {
        .initial => c.initial_keys != null,
        .handshake => c.handshake_keys != null,
        .application => c.one_rtt != null,
    };
}

const Seen = struct { ack_eliciting: bool = false, probing_only: bool = true };

fn processFrames(c: *Connection, space: Space, kind: packet.Kind, payload: []const u8, now_us: u64) Stop!Seen {
    var it = frames.Iterator.init(payload, kind, .client);
    var seen: Seen = .{};
    while (true) {
        const f = it.next() catch |e| return fail(c, frames.transportError(e), it.failed_type);
        const frame = f orelse break;
        const t = frames.typeOf(frame);
        if (frames.ackEliciting(t)) seen.ack_eliciting = true;
        if (!frames.probing(t)) seen.probing_only = false;
        try onFrame(c, space, frame, it.failed_type, now_us);
        if (c.state != .handshaking and c.state != .established) return error.Closed;
    }
    if (payload.len == 0) return fail(c, .protocol_violation, 0); // RFC 9000 12.4
    return seen;
}

fn fail(c: *Connection, code: TE, frame_type: u64) error{Closed} {
    c.closeTransport(@intFromEnum(code), frame_type, "");
    return error.Closed;
}

fn onFrame(c: *Connection, space: Space, frame: frames.Frame, frame_type: u64, now_us: u64) Stop!void {
    switch (frame) {
        .padding, .ping, .data_blocked, .streams_blocked => {},
        .path_response => |data| c.onPathResponse(data),
        .ack => |a| try onAck(c, space, &a, now_us),
        .crypto => |f| try onCrypto(c, space, f.offset, f.data, frame_type, now_us),
        .new_token, .handshake_done => return fail(c, .protocol_violation, frame_type),
        .stream => |f| try onStream(c, f.stream_id, f.offset, f.data, f.fin, frame_type),
        .reset_stream => |f| try onResetStream(c, f.stream_id, f.error_code, f.final_size, frame_type),
        .stop_sending => |f| {
            const s = try streamFor(c, f.stream_id, .send, frame_type) orelse return;
            if (s.reset_out == streams.no_code) {
                assert(f.error_code <= streams.varint_max);
                s.stop_sending_event = f.error_code;
                c.streamReset(s.id, f.error_code); // RFC 9000 3.5: answered with RESET_STREAM
            }
        },
        .max_data => |v| if (v > c.flow.send_max) {
            c.flow.send_max = v;
            for (c.stream_table.items) |s| wakeWriter(s);
        },
        .max_stream_data => |f| {
            const s = try streamFor(c, f.stream_id, .send, frame_type) orelse return;
            if (f.max > s.send_max) {
                s.send_max = f.max;
                wakeWriter(s);
            }
        },
        .max_streams => |f| if (!f.bidi) {
            c.flow.uni_limit = @max(c.flow.uni_limit, f.max);
        },
        .stream_data_blocked => |f| _ = try streamFor(c, f.stream_id, .recv, frame_type),
        .new_connection_id => |f| try conn_cids.onNewConnectionId(c, f, frame_type),
        .retire_connection_id => |seq| try conn_cids.onRetireConnectionId(c, seq, frame_type),
        .path_challenge => |data| c.path_response = data.*,
        .connection_close => |f| c.enterDraining(f.error_code, f.application, now_us),
        .datagram => |f| try onDatagram(c, f.data, f.frame_len, frame_type),
    }
}

/// RFC 9221 3: a DATAGRAM frame we did not offer to take, or larger than we said, ends the
/// connection; one that finds the queue full is dropped (and counted).
fn onDatagram(c: *Connection, data: []const u8, frame_len: usize, frame_type: u64) Stop!void {
    const max = c.config.max_datagram_frame_size;
    if (max == 0 or frame_len > max) return fail(c, .protocol_violation, frame_type);
    const d = @import("datagrams.zig").ensure(&c.datagrams, c.allocator) orelse return;
    const was_empty = d.in.len == 0;
    if (d.in.push(c.allocator, data) and was_empty) c.datagram_event = true;
}

fn wakeWriter(s: *Stream) void {
    if (s.writable_wanted and streams.serverSends(s.id) and s.sendCredit() > 0 and s.send().room() > 0) {
        s.writable_wanted = false;
        s.writable_event = true;
    }
}

const Use = enum { recv, send };

/// The stream a frame names, opening the client's streams up to it (RFC 9000 3.2, 4.6);
/// null for a stream already closed and freed.
fn streamFor(c: *Connection, id: u64, use: Use, frame_type: u64) Stop!?*Stream {
    const dir = streams.directionOf(id);
    if (use == .recv and !streams.serverReceives(id)) return fail(c, .stream_state_error, frame_type);
    if (use == .send and !streams.serverSends(id)) return fail(c, .stream_state_error, frame_type);
    if (streams.initiatorOf(id) == .server) {
        if (dir == .bidi or streams.indexOf(id) >= c.flow.uni_opened) return fail(c, .stream_state_error, frame_type);
        return c.findStream(id);
    }
    const d = @intFromEnum(dir);
    const index = streams.indexOf(id);
    if (index >= c.flow.peer_limit[d]) return fail(c, .stream_limit_error, frame_type);
    while (c.flow.peer_opened[d] <= index) {
        const new_id = streams.idOf(.client, dir, c.flow.peer_opened[d]);
        const s = Stream.create(c.allocator, new_id, c.config.initial_max_stream_data, if (dir == .bidi) c.flow.peer_window_bidi else 0) catch return fail(c, .internal_error, frame_type);
        c.addStream(s) catch {
            s.destroy(c.allocator);
            return fail(c, .internal_error, frame_type);
        };
        c.flow.peer_opened[d] += 1;
    }
    return c.findStream(id);
}

fn onStream(c: *Connection, id: u64, offset: u64, data: []const u8, fin: bool, frame_type: u64) Stop!void {
    const s = try streamFor(c, id, .recv, frame_type) orelse return;
    const added = s.recv().onData(c.allocator, offset, data, fin, c.config.initial_max_stream_data) catch |e| return switch (e) {
        error.FlowControl => fail(c, .flow_control_error, frame_type),
        error.FinalSize => fail(c, .final_size_error, frame_type),
        error.TooFragmented => error.Drop,
        error.OutOfMemory => fail(c, .internal_error, frame_type),
    };
    c.flow.recv_total += added;
    if (c.flow.recv_total > c.flow.recv_max) return fail(c, .flow_control_error, frame_type);
    if (!s.recv().finished and (s.recv().data.readable().len > 0 or s.recv().atFin())) s.readable_event = true;
}

fn onResetStream(c: *Connection, id: u64, code: u64, final_size: u64, frame_type: u64) Stop!void {
    const s = try streamFor(c, id, .recv, frame_type) orelse return;
    const added = s.recv().onReset(final_size) catch |e| return switch (e) {
        error.FlowControl => fail(c, .flow_control_error, frame_type),
        else => fail(c, .final_size_error, frame_type),
    };
    c.flow.recv_total += added;
    if (c.flow.recv_total > c.flow.recv_max) return fail(c, .flow_control_error, frame_type);
    if (s.recv().finished) return;
    // The unread bytes count as consumed for connection flow control (RFC 9000 4.5).
    c.flow.read_total += final_size - s.recv().data.read_offset;
    c.creditConnection();
    s.recv().finished = true;
    s.recv().data.deinit(c.allocator);
    s.readable_event = false;
    assert(code <= streams.varint_max);
    s.reset_event_code = code;
    s.reset_event_final_size = final_size;
}

fn onAck(c: *Connection, space: Space, a: *const frames.Ack, now_us: u64) Stop!void {
    var ranges: [frames.ack_ranges_max + 1]recovery_mod.Range = undefined;
    var n: usize = 0;
    var it = a.ranges();
    while (it.next()) |r| : (n += 1) ranges[n] = .{ .smallest = r.smallest, .largest = r.largest };
    const delay_us = std.math.shl(u64, a.ack_delay, c.peer_ack_delay_exponent);
    // RFC 9000 13.4.2.1: only an ACK frame that raises the largest acknowledged is checked
    // for ECN (an older one, reordered, would fail for no fault).
    const app = &c.recovery.application;
    const raised = space == .application and (!app.acked_any or a.largest > app.largest_acked);
    var sink: Sink = .{ .c = c, .now_us = now_us };
    const outcome = c.recovery.onAckReceived(c.allocator, space, ranges[0..n], delay_us, now_us, &sink) catch |e| {
        sink.finish();
        return fail(c, if (e == error.AckOfUnsentPacket) .protocol_violation else .frame_encoding_error, @intFromEnum(frames.Type.ack));
    };
    if (space == .application and c.ecn.onAck(a.ecn, sink.ecn_marked_acked, raised)) {
        // More CE marks: a congestion event (RFC 9002 7.1), once per recovery period. An
        // ACK whose largest was an ACK-only packet (not tracked) gives no send time: the
        // next rise reacts.
        if (outcome.largest_acked_time_sent_us) |t| c.recovery.cc.onEcnCe(t, now_us);
    }
    sink.finish();
    if (c.qlog) |q| q.metrics(&c.recovery);
}

fn onCrypto(c: *Connection, space: Space, offset: u64, data: []const u8, frame_type: u64, now_us: u64) Stop!void {
    _ = now_us;
    if (space == .application) return; // no post-handshake messages come from a client
    const cs = c.crypto[@intFromEnum(space)] orelse return; // a late copy after the keys went
    cs.onFrame(c.allocator, offset, data) catch |e| return switch (e) {
        error.CryptoBufferExceeded => fail(c, .crypto_buffer_exceeded, frame_type),
        error.TooFragmented => error.Drop,
        error.OutOfMemory => fail(c, .internal_error, frame_type),
    };
    const hs = c.hs orelse return;
    const bytes = cs.readable();
    if (bytes.len == 0) return;
    const level: tls.Level = @enumFromInt(@intFromEnum(space));
    hs.provide(level, bytes) catch {
        c.closeTransport(hs.errorCode() orelse tls.internal_error, frame_type, "tls");
        return error.Closed;
    };
    cs.consume(c.allocator, bytes.len);
    try afterTls(c, frame_type);
}

/// Takes what the handshake produced: output per level, keys, the client's parameters,
/// completion.
fn afterTls(c: *Connection, frame_type: u64) Stop!void {
    const hs = c.hs.?;
    for ([_]tls.Level{ .initial, .handshake, .application }) |level| {
        const out = hs.output(level);
        if (out.len == 0) continue;
        const i = @intFromEnum(level);
        if (c.crypto[i] == null) c.crypto[i] = @import("crypto_stream.zig").CryptoStream.create(c.allocator) catch return fail(c, .internal_error, frame_type);
        const n = c.crypto[i].?.queue(c.allocator, out) catch return fail(c, .internal_error, frame_type);
        if (n < out.len) return fail(c, .internal_error, frame_type);
        hs.consumeOutput(level, n);
    }
    try installKeys(c, hs, frame_type);
    if (hs.state == .done) try complete(c, hs, frame_type);
}

fn installKeys(c: *Connection, hs: *tls.Handshake, frame_type: u64) Stop!void {
    if (c.handshake_keys == null and c.initial_keys != null) {
        if (hs.secretRef(.handshake, .read)) |rx| if (hs.secretRef(.handshake, .write)) |tx| {
            const k = c.allocator.create(connection.KeyPair) catch return fail(c, .internal_error, frame_type);
            k.* = .{ .rx = protection.Keys.init(rx), .tx = protection.Keys.init(tx) };
            c.handshake_keys = k;
            try applyPeerParams(c, hs, frame_type);
        };
    }
    if (c.one_rtt == null) {
        if (hs.secretRef(.application, .read)) |rx| if (hs.secretRef(.application, .write)) |tx| {
            const k = c.allocator.create(protection.OneRtt) catch return fail(c, .internal_error, frame_type);
            k.* = protection.OneRtt.init(rx, tx);
            c.one_rtt = k;
        };
    }
}

fn applyPeerParams(c: *Connection, hs: *tls.Handshake, frame_type: u64) Stop!void {
    _ = frame_type;
    const bytes = hs.peerTransportParams() orelse return fail(c, .transport_parameter_error, 0);
    const p = transport_params.decodeClient(bytes) catch return fail(c, .transport_parameter_error, 0);
    const isc = p.initial_source_connection_id orelse return fail(c, .transport_parameter_error, 0);
    if (!std.mem.eql(u8, isc.slice(), c.peer_cid.slice())) return fail(c, .protocol_violation, 0);
    if (c.qlog) |q| q.parameters(.remote, &p);
    applyParams(c, &p);
}

/// The client's decoded parameters, applied. Every value is any varint decodeClient let
/// through (up to 2^62 - 1, or its RFC 9000 18.2 bound): each use below is checked for
/// that maximum (the idle timeout, in ms, saturates when made microseconds).
pub fn applyParams(c: *Connection, p: *const transport_params.Params) void {
    assert(p.ack_delay_exponent <= transport_params.ack_delay_exponent_max);
    assert(p.max_ack_delay_ms < transport_params.max_ack_delay_ms_limit);
    c.flow.send_max = p.initial_max_data;
    c.flow.peer_window_bidi = p.initial_max_stream_data_bidi_local;
    c.flow.peer_window_uni = p.initial_max_stream_data_uni;
    c.flow.uni_limit = p.initial_max_streams_uni;
    c.peer_ack_delay_exponent = @intCast(p.ack_delay_exponent);
    c.recovery.peer_max_ack_delay_us = @intCast(p.max_ack_delay_ms * 1000);
    c.peer_max_udp_payload = @intCast(@min(p.max_udp_payload_size, 65527));
    c.peer_max_datagram_frame = p.max_datagram_frame_size;
    c.pmtu.setMax(c.config.max_udp_payload_size, p.max_udp_payload_size);
    c.applyDatagramSize();
    c.cids.peer_limit = @intCast(@min(p.active_connection_id_limit, conn_cids.ours_max));
    if (p.max_idle_timeout_ms != 0) {
        const peer_us = p.max_idle_timeout_ms *| 1000;
        c.idle_timeout_us = if (c.idle_timeout_us == 0) peer_us else @min(c.idle_timeout_us, peer_us);
    }
}

/// The client's Finished was read: the server's handshake is confirmed (RFC 9001 4.1.2).
fn complete(c: *Connection, hs: *tls.Handshake, frame_type: u64) Stop!void {
    if (hs.alpn() == null) return fail(c, TE.crypto(tls.Alert.no_application_protocol), frame_type);
    c.state = .established;
    c.handshake_done_owed = true;
    c.handshake_done_event = true;
    c.recovery.onHandshakeConfirmed();
    c.tls_summary = hs.takeSummary();
    c.freeHandshake();
}

/// Recovery's reports: what an acknowledged or lost packet carried.
pub const Sink = struct {
    c: *Connection,
    now_us: u64,
    /// The largest of our ACK frames' Largest Acknowledged seen acknowledged, per space:
    /// applied after recovery returns (the sink must not call back into it).
    acked_ack: [3]?u64 = .{ null, null, null },
    /// 1-RTT packets sent marked ECT(0) that this ACK newly acknowledged (`ecn.zig`).
    ecn_marked_acked: u64 = 0,
    /// Path MTU discovery changed the datagram size: applied in `finish` (the congestion
    /// controller is recovery's, which is busy until then).
    size_changed: bool = false,

    pub fn onAcked(self: *Sink, space: Space, p: recovery_mod.SentPacket) void {
        const c = self.c;
        if (space == .application) {
            if (c.pmtu.onAcked(p.bytes, p.time_sent_us) != null) self.size_changed = true;
            if (c.ecn.marked(p.pn)) self.ecn_marked_acked += 1;
        }
        const rec = c.sent.take(c.allocator, p.token) orelse return;
        for (rec.slice()) |r| self.acked(space, r);
    }

    pub fn onLost(self: *Sink, space: Space, p: recovery_mod.SentPacket) void {
        const c = self.c;
        if (c.qlog) |q| q.packetLost(space, p.pn);
        if (space == .application) {
            if (c.pmtu.onLost(p.bytes, p.time_sent_us, self.now_us)) self.size_changed = true;
            c.ecn.onLost(p.pn);
        }
        const rec = c.sent.take(c.allocator, p.token) orelse return;
        for (rec.slice()) |r| lost(c, r);
    }

    fn acked(self: *Sink, space: Space, r: sent_frames.Record) void {
        const c = self.c;
        switch (r) {
            .stream => |f| {
                const s = c.findStream(f.id) orelse return;
                s.send().onAcked(c.allocator, f.offset, f.len, f.fin);
                wakeWriter(s);
                c.freeIfDone(s);
            },
            .crypto => |f| if (c.crypto[@intFromEnum(f.space)]) |cs| {
                cs.send.onAcked(c.allocator, f.offset, f.len, false);
                // The 1-RTT CRYPTO stream (session tickets) is done once all of it arrived.
                if (f.space == .application and c.hs == null and cs.send.acked_offset == cs.send.write_offset) {
                    cs.destroy(c.allocator);
                    c.crypto[@intFromEnum(f.space)] = null;
                }
            },
            .retire_connection_id => |seq| conn_cids.onRetireAcked(c, seq),
            .new_token => c.dropNewToken(),
            .handshake_done => c.pmtu.begin(self.now_us),
            .ack => |largest| {
                const slot = &self.acked_ack[@intFromEnum(space)];
                slot.* = @max(slot.* orelse largest, largest);
            },
            else => {},
        }
    }

    pub fn finish(self: *Sink) void {
        for (self.acked_ack, 0..) |maybe, i| {
            const largest = maybe orelse continue;
            const space: Space = @enumFromInt(i);
            const known = largestReceived(self.c, space) orelse continue;
            if (largest <= known) self.c.recovery.onAckAcknowledged(space, largest);
        }
        self.acked_ack = .{ null, null, null };
        if (self.size_changed) self.c.applyDatagramSize();
        self.size_changed = false;
    }
};

/// A record's frame was lost: what still matters goes again.
pub fn lost(c: *Connection, r: sent_frames.Record) void {
    switch (r) {
        .stream => |f| if (c.findStream(f.id)) |s| if (s.reset_out == streams.no_code) s.send().onLost(c.allocator, f.offset, f.len, f.fin),
        .crypto => |f| if (c.crypto[@intFromEnum(f.space)]) |cs| cs.send.onLost(c.allocator, f.offset, f.len, false),
        .ack => {},
        .handshake_done => c.handshake_done_owed = true,
        .new_token => c.new_token_owed = c.new_token != null,
        .max_data => c.flow.max_data_owed = true,
        .max_streams_bidi => c.flow.max_streams_owed[0] = true,
        .max_streams_uni => c.flow.max_streams_owed[1] = true,
        .max_stream_data => |id| if (c.findStream(id)) |s| if (!s.recv().finished) {
            s.max_stream_data_owed = true;
        },
        .reset_stream => |id| if (c.findStream(id)) |s| {
            s.reset_out_sent = false;
        },
        .stop_sending => |id| if (c.findStream(id)) |s| {
            s.stop_sending_sent = false;
        },
        .new_connection_id => |seq| conn_cids.onNewCidLost(c, seq),
        .retire_connection_id => |seq| conn_cids.onRetireLost(c, seq),
    }
}
