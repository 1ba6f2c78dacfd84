//! One server-side QUIC v1 connection (RFC 9000, 9001, 9002), sans-IO: datagrams in
//! (`receive`), datagrams out (`send`), time injected as `now_us`, one deadline
//! (`nextDeadline`, `onTimeout`), and the stream API the HTTP/3 session uses (`nextEvent`,
//! `streamRead`, `streamWrite`, `streamReset`, `streamStopSending`, `openUni`,
//! `closeApplication`). Nothing here reads a clock or touches a socket.
//!
//! The work is split by direction: `conn_receive.zig` opens packets and applies their frames,
//! `conn_send.zig` builds datagrams; this file holds the state, the application's API, the
//! timers and closing.
//!
//! Memory. Everything the handshake needs (the TLS shim, CRYPTO buffers, Initial and
//! Handshake keys) is heap-allocated from the caller's allocator and freed as soon as RFC 9001
//! lets it go (Initial keys at the first Handshake packet, the rest at confirmation). Streams
//! are heap records freed when both sides are done; their buffers exist only while bytes wait.
//! An idle connection holds this struct (with `Recovery` inside), its 1-RTT keys and the
//! stream table's block if any (`heldBytes`): 1,465 bytes beyond Recovery's 432 (600 of
//! them both sides' connection IDs, `conn_cids.State`; 72 the path MTU search's and ECN's
//! state, with 24 more in Recovery for the ECN counts received), measured by
//! tests/http3/test_quic_connection.py through a counting allocator after a handshake with
//! aioquic, and again after 100 streams came and went.
//!
//! Migration: the connection does not see addresses. Its owner hands a datagram from the
//! current address to `receive`, one from another address to `receiveFromNewAddress` (which
//! says whether it carried the newest non-probing packet: the owner then moves), and starts
//! the new address's validation (`startPathValidation`, `path.zig`).
//!
//! Connection IDs (`conn_cids.zig`): the owner issues our spare IDs (`wantsCid`, `addCid`)
//! and takes back those the peer retired (`retiredCid`, `forgetCid`); the peer's are kept
//! and retired as its NEW_CONNECTION_ID frames say.
//!
//! Keys (RFC 9001 6): the peer's key updates are followed; the server starts its own before
//! the AEAD's confidentiality limit (`updateKeysIfDue`, from `send`), keeps the previous
//! receive keys three PTOs, and closes with AEAD_LIMIT_REACHED past the integrity limit.
//! Every key is zeroed before it is freed.
//!
//! Datagram sizes (`pmtu.zig`): every datagram starts at 1,200 bytes; once the handshake is
//! confirmed, path MTU discovery probes larger sizes up to the smallest of our own
//! `max_udp_payload_size` and the peer's, and falls back on a black hole or a new path.
//! `datagramSize` is the size in use.
//!
//! ECN (`ecn.zig`, RFC 9000 13.4): the owner passes each datagram's ECN bits to
//! `receiveEcn`; they are counted per packet number space and reported in our ACK frames.
//! `ecnToSend` is the codepoint for the datagram `send` returned last (ECT(0) while the path
//! is tested or found capable); the peer's counts are validated and a CE rise is a
//! congestion event.
//!
//! Not done yet: 0-RTT (refused: dropped).
const std = @import("std");
const assert = std.debug.assert;
const Allocator = std.mem.Allocator;

const openssl = @import("../transport/openssl.zig");
const tls = @import("tls.zig");
const protection = @import("protection.zig");
const recovery_mod = @import("recovery.zig");
const transport_params = @import("transport_params.zig");
const frames = @import("frames.zig");
const packet = @import("packet.zig");
const streams = @import("streams.zig");
const sent_frames = @import("sent_frames.zig");
const crypto_stream = @import("crypto_stream.zig");
const conn_receive = @import("conn_receive.zig");
const conn_send = @import("conn_send.zig");
pub const conn_cids = @import("conn_cids.zig");
pub const path = @import("path.zig");
pub const pmtu = @import("pmtu.zig");
pub const ecn = @import("ecn.zig");
pub const qlog = @import("qlog.zig");

pub const Recovery = recovery_mod.Recovery;
pub const Space = recovery_mod.Space;
pub const Stream = streams.Stream;
pub const Cid = transport_params.Cid;
const congestion = @import("congestion.zig");
const new_token_len = @import("new_token.zig").len;
const datagrams_mod = @import("datagrams.zig");
comptime {
    assert(datagrams_mod.packet_overhead >= 1 + packet.cid_len_max + 4 + protection.tag_len);
}

/// Client-initiated streams open at once, per type: the table is scanned linearly.
pub const streams_max: u64 = 1024;
/// How many times the closing state answers packets with its CONNECTION_CLOSE.
pub const close_repeats_max = 8;
pub const reason_max_bytes = 64;
/// "Not closed yet" for the closed event's code (codes are varints, below 2^62).
const no_close: u64 = std.math.maxInt(u64);

pub const Config = struct {
    max_idle_timeout_ms: u64 = 30_000,
    /// A handshake not complete by then ends silently, whatever the idle timeout: a forged or
    /// abandoned Initial holds its connection's state no longer than this.
    handshake_timeout_ms: u64 = 10_000,
    initial_max_data: u64 = 1024 * 1024,
    /// Our window on each stream (the receive buffer is at most this).
    initial_max_stream_data: u64 = 64 * 1024,
    initial_max_streams_bidi: u64 = 100,
    initial_max_streams_uni: u64 = 3,
    max_udp_payload_size: u64 = 1500,
    ack_delay_exponent: u6 = 3,
    max_ack_delay_ms: u32 = 25,
    /// The peer's IDs we keep at once (2 to `conn_cids.peer_max`).
    active_connection_id_limit: u64 = conn_cids.peer_max,
    /// What we send in one datagram at first (RFC 9000 14: 1200 is always allowed); path MTU
    /// discovery raises it up to `max_udp_payload_size` and the peer's (`pmtu.zig`).
    max_datagram_bytes: u16 = 1200,
    /// ECN (RFC 9000 13.4): ECT(0) on our datagrams while the path validates it. Off: none
    /// are marked (the marks that arrive are still counted and reported, as 13.4.1 asks).
    ecn: bool = true,
    congestion_algorithm: congestion.Algorithm = .new_reno,
    /// RFC 9221: the largest DATAGRAM frame we take (what we advertise); 0: none, and a
    /// DATAGRAM frame from the peer is then PROTOCOL_VIOLATION.
    max_datagram_frame_size: u64 = 0,
    /// RFC 9001 6.6 for the 1-RTT keys, null for the suite's figures
    /// (`protection.aeadLimits`): packets sealed under one key (the server starts a key
    /// update at 7/8 of it and stops using the connection at it), and packets failing
    /// authentication over the connection's life (past it: AEAD_LIMIT_REACHED). Tests
    /// lower them to reach both.
    confidentiality_limit: ?u64 = null,
    integrity_limit: ?u64 = null,
};

/// The endpoint validated the client's address with a Retry token: this Initial's DCID (the
/// Retry's SCID) derives the Initial keys and is our retry_source_connection_id.
pub const RetryInfo = struct { retry_scid: []const u8 };

pub const StreamError = error{ UnknownStream, StreamClosed, StreamLimit };

/// The agreed interface with http3/session.zig: names and meanings fixed.
pub const Event = union(enum) {
    /// The stream has in-order bytes or its FIN to read.
    readable: u64,
    /// The stream's send room grew after a write took less than offered.
    writable: u64,
    /// The peer's RESET_STREAM.
    reset: struct { id: u64, code: u64, final_size: u64 },
    /// The peer's STOP_SENDING (already answered with RESET_STREAM, RFC 9000 3.5).
    stop_sending: struct { id: u64, code: u64 },
    /// 1-RTT keys in use, ALPN h3.
    handshake_done,
    /// The connection is over: the peer's CONNECTION_CLOSE, idle timeout (code 0), a transport
    /// error, or our own close; reported once.
    closed: struct { code: u64, app: bool },
    /// DATAGRAM frames (RFC 9221) arrived while none was waiting: `peekDatagram`.
    datagram,
};

pub const State = enum { handshaking, established, closing, draining, closed };

pub const KeyPair = struct { rx: protection.Keys, tx: protection.Keys };

/// The CONNECTION_CLOSE we send (and repeat while closing).
pub const CloseFrame = struct {
    code: u64,
    app: bool,
    frame_type: u64 = 0,
    reason: [reason_max_bytes]u8 = undefined,
    reason_len: u8 = 0,
};

/// Stream counts and connection-level flow control, both directions.
pub const Flow = struct {
    /// MAX_DATA we advertised, and the sum of the highest offsets received on all streams.
    recv_max: u64,
    recv_total: u64 = 0,
    /// Bytes the application read, over all streams.
    read_total: u64 = 0,
    max_data_owed: bool = false,
    /// The peer's MAX_DATA, and what the application wrote over all streams.
    send_max: u64 = 0,
    written_total: u64 = 0,
    /// Client streams opened (the next index) and closed, and the limit we advertised.
    peer_opened: [2]u64 = .{ 0, 0 },
    peer_closed: [2]u64 = .{ 0, 0 },
    peer_limit: [2]u64,
    max_streams_owed: [2]bool = .{ false, false },
    /// Our unidirectional streams: the next index and the peer's limit.
    uni_opened: u64 = 0,
    uni_limit: u64 = 0,
    /// The peer's initial windows for our sending: streams it opened (bidi), ours (uni).
    peer_window_bidi: u64 = 0,
    peer_window_uni: u64 = 0,
};

pub const Connection = struct {
    allocator: Allocator,
    /// The limits, shared by the caller's connections: it keeps them for this one's life.
    config: *const Config,
    state: State = .handshaking,
    /// The peer's ID we send to (one of `cids.peers`), and our ID of the handshake.
    peer_cid: Cid,
    our_cid: Cid,
    /// Both sides' connection IDs (`conn_cids.zig`).
    cids: conn_cids.State,
    hs: ?*tls.Handshake = null,
    /// What the ASGI tls extension reads, kept from the handshake as it completes.
    tls_summary: openssl.SessionSummary = .{},
    initial_keys: ?*KeyPair = null,
    handshake_keys: ?*KeyPair = null,
    one_rtt: ?*protection.OneRtt = null,
    crypto: [3]?*crypto_stream.CryptoStream = .{ null, null, null },
    recovery: Recovery,
    sent: sent_frames.Log = .{},
    stream_table: std.ArrayListUnmanaged(*Stream) = .empty,
    flow: Flow,
    next_pn: [3]u64 = .{ 0, 0, 0 },
    /// The peer's ack_delay_exponent and idle timeout.
    peer_ack_delay_exponent: u6 = 3,
    idle_timeout_us: u64,
    idle_deadline_us: u64,
    /// While handshaking: when the handshake is given up (`Config.handshake_timeout_ms`).
    handshake_deadline_us: u64,
    /// An ack-eliciting send since the last receive restarted the idle timer already.
    idle_restarted_by_send: bool = false,
    close_deadline_us: u64 = recovery_mod.never,
    /// Once closing: the CONNECTION_CLOSE on the heap (`closeWith`), or `close_fallback`.
    close_frame: ?*CloseFrame = null,
    close_owed: bool = false,
    /// `closeApplicationWhenSent`'s code, until every request stream's data is acknowledged
    /// (`no_close` when none is waiting).
    close_when_sent: u64 = no_close,
    close_repeats: u8 = 0,
    /// Anti-amplification (RFC 9000 8.1).
    bytes_received: u64 = 0,
    bytes_sent: u64 = 0,
    address_validated: bool = false,
    handshake_done_owed: bool = false,
    handshake_done_event: bool = false,
    /// The address token for the client's next connection (`giveNewToken`), on the heap
    /// until a NEW_TOKEN frame with it is acknowledged.
    new_token: ?*[new_token_len]u8 = null,
    new_token_owed: bool = false,
    /// RFC 9221: the peer's max_datagram_frame_size (0: it takes none), and the datagrams
    /// waiting either way (made on first use).
    peer_max_datagram_frame: u64 = 0,
    datagrams: ?*datagrams_mod.Datagrams = null,
    datagram_event: bool = false,
    /// The closed event's code (a varint) once the connection is over, else `no_close`.
    closed_code: u64 = no_close,
    closed_app: bool = false,
    closed_reported: bool = false,
    path_response: ?[8]u8 = null,
    /// A new client address being validated (`path.zig`), and the last check's outcome
    /// until the owner takes it (`takePathOutcome`).
    path_check: ?*path.Check = null,
    path_outcome: path.Outcome = .none,
    /// A PTO asked for a probe in this space.
    probe: ?Space = null,
    /// The peer's max_udp_payload_size (RFC 9000 18.2), at most 65527 (a larger one says
    /// the same: no UDP payload is larger).
    peer_max_udp_payload: u32 = 65527,
    /// The pacer holds data back until then (`never` when it does not).
    pace_until_us: u64 = recovery_mod.never,
    /// Path MTU discovery: the datagram size in use and the search for a larger one.
    pmtu: pmtu.Search,
    /// ECN on what we send: the codepoint, and the validation of the peer's counts.
    ecn: ecn.State,
    /// Where the round-robin over streams with data to send resumes.
    rr_cursor: u32 = 0,
    /// `--http3-qlog-dir`'s log, set and freed by the owner; null with qlog off.
    qlog: ?*qlog.Qlog = null,

    /// A connection for the client's first Initial. Null when out of memory or when the TLS
    /// handshake cannot start. `config` must outlive the connection; `reset_token` is this
    /// connection's stateless_reset_token (sent in the transport parameters only).
    pub fn init(allocator: Allocator, config: *const Config, reset_token: ?[16]u8, ssl_ctx: *openssl.SSL_CTX, first_dcid: []const u8, client_scid: []const u8, our_scid: []const u8, now_us: u64, retry_info: ?RetryInfo) ?*Connection {
        assert(our_scid.len >= 1 and our_scid.len <= packet.cid_len_max);
        assert(config.initial_max_streams_bidi <= streams_max and config.initial_max_streams_uni <= streams_max);
        const cid_limit = config.active_connection_id_limit;
        assert(cid_limit >= transport_params.active_connection_id_limit_min);
        assert(cid_limit <= conn_cids.peer_max);
        const c = allocator.create(Connection) catch return null;
        const recovery = Recovery.init(allocator, .{ .max_datagram_bytes = config.max_datagram_bytes, .congestion_algorithm = config.congestion_algorithm, .max_ack_delay_us = config.max_ack_delay_ms * 1000 }) catch {
            allocator.destroy(c);
            return null;
        };
        c.* = .{
            .allocator = allocator,
            .config = config,
            .peer_cid = Cid.init(client_scid),
            .our_cid = Cid.init(our_scid),
            .cids = conn_cids.State.init(our_scid, reset_token, client_scid),
            .recovery = recovery,
            .flow = .{ .recv_max = config.initial_max_data, .peer_limit = .{ config.initial_max_streams_bidi, config.initial_max_streams_uni } },
            .idle_timeout_us = config.max_idle_timeout_ms * 1000,
            .idle_deadline_us = now_us +| config.max_idle_timeout_ms * 1000,
            .handshake_deadline_us = now_us +| config.handshake_timeout_ms * 1000,
            .address_validated = retry_info != null,
            .pmtu = pmtu.Search.init(config.max_datagram_bytes),
            .ecn = if (config.ecn) .{} else ecn.State.disabled(),
        };
        c.setup(ssl_ctx, first_dcid, our_scid, retry_info, reset_token) catch {
            c.deinit();
            return null;
        };
        return c;
    }

    fn setup(c: *Connection, ssl_ctx: *openssl.SSL_CTX, first_dcid: []const u8, our_scid: []const u8, retry_info: ?RetryInfo, reset_token: ?[16]u8) !void {
        const initial_dcid = if (retry_info) |r| r.retry_scid else first_dcid;
        var keys = protection.initialKeys(initial_dcid);
        defer keys.client.wipe();
        defer keys.server.wipe();
        c.initial_keys = try c.allocator.create(KeyPair);
        c.initial_keys.?.* = .{ .rx = keys.client, .tx = keys.server };
        var params: transport_params.Params = .{
            .original_destination_connection_id = Cid.init(first_dcid),
            .initial_source_connection_id = Cid.init(our_scid),
            .retry_source_connection_id = if (retry_info) |r| Cid.init(r.retry_scid) else null,
            .stateless_reset_token = reset_token,
            .max_idle_timeout_ms = c.config.max_idle_timeout_ms,
            .max_udp_payload_size = c.config.max_udp_payload_size,
            .initial_max_data = c.config.initial_max_data,
            .initial_max_stream_data_bidi_remote = c.config.initial_max_stream_data,
            .initial_max_stream_data_uni = c.config.initial_max_stream_data,
            .initial_max_streams_bidi = c.config.initial_max_streams_bidi,
            .initial_max_streams_uni = c.config.initial_max_streams_uni,
            .ack_delay_exponent = c.config.ack_delay_exponent,
            .max_ack_delay_ms = c.config.max_ack_delay_ms,
            .active_connection_id_limit = c.config.active_connection_id_limit,
            .max_datagram_frame_size = c.config.max_datagram_frame_size,
        };
        params.disable_active_migration = false;
        var buf: [512]u8 = undefined;
        const len = try transport_params.encodeServer(&buf, &params);
        c.hs = tls.Handshake.init(c.allocator, ssl_ctx, buf[0..len]) orelse return error.OutOfMemory;
        for (0..2) |i| c.crypto[i] = try crypto_stream.CryptoStream.create(c.allocator);
    }

    pub fn deinit(c: *Connection) void {
        const a = c.allocator;
        if (c.hs) |hs| hs.deinit();
        c.tls_summary.deinit(a);
        if (c.initial_keys) |k| destroyKeys(a, k);
        if (c.handshake_keys) |k| destroyKeys(a, k);
        if (c.one_rtt) |k| {
            k.deinit(a);
            a.destroy(k);
        }
        c.freeCloseFrame();
        c.dropNewToken();
        if (c.datagrams) |d| {
            d.deinit(a);
            a.destroy(d);
        }
        if (c.path_check) |k| a.destroy(k);
        for (&c.crypto) |*cs| if (cs.*) |s| s.destroy(a);
        for (c.stream_table.items) |s| s.destroy(a);
        c.stream_table.deinit(a);
        c.sent.deinit(a);
        c.recovery.deinit(a);
        a.destroy(c);
    }

    // ---- datagrams ---------------------------------------------------------------------

    /// One datagram from the peer's current address, opened in place (its bytes are
    /// overwritten).
    pub fn receive(c: *Connection, datagram: []u8, now_us: u64) void {
        c.receiveEcn(datagram, 0, now_us);
    }

    /// `receive`, with the ECN bits of the datagram's IP header (0 Not-ECT, 1 ECT(1),
    /// 2 ECT(0), 3 CE; RFC 3168).
    pub fn receiveEcn(c: *Connection, datagram: []u8, ecn_bits: u2, now_us: u64) void {
        _ = conn_receive.receive(c, datagram, ecn_bits, now_us, .current);
    }

    /// One datagram from another address, processed as any other. True when it carried the
    /// newest non-probing packet so far (RFC 9000 9.3): the peer moved there, and the owner
    /// sends there from now on and validates it (`startPathValidation`), or goes back to
    /// the address it last validated (`endPathValidation`). Before the handshake is
    /// confirmed no client may move (RFC 9000 9): the datagram is dropped unread.
    pub fn receiveFromNewAddress(c: *Connection, datagram: []u8, now_us: u64) bool {
        return c.receiveFromNewAddressEcn(datagram, 0, now_us);
    }

    /// `receiveFromNewAddress`, with the datagram's ECN bits (as `receiveEcn`).
    pub fn receiveFromNewAddressEcn(
        c: *Connection,
        datagram: []u8,
        ecn_bits: u2,
        now_us: u64,
    ) bool {
        if (c.state != .established) return false;
        return conn_receive.receive(c, datagram, ecn_bits, now_us, .other);
    }

    /// The size of the datagrams the connection sends now (path MTU probes aside, which
    /// are larger: up to the search's ceiling).
    pub fn datagramSize(c: *const Connection) u16 {
        return c.pmtu.size;
    }

    /// The ECN codepoint for the IP header of the datagram `send` returned last: 2 (ECT(0))
    /// while the path's ECN is tested or found to work, 0 when ECN is off or failed, and
    /// before the handshake is confirmed.
    pub fn ecnToSend(c: *const Connection) u2 {
        return c.ecn.last_mark;
    }

    /// Path MTU discovery settled on a new size (larger after a probe, 1,200 after a black
    /// hole or a move): the congestion controller counts in it from now on.
    pub fn applyDatagramSize(c: *Connection) void {
        c.recovery.cc.setMaxDatagramBytes(c.pmtu.size);
    }

    /// The owner moved to a new address, whose datagram of `received_bytes` moved it:
    /// validation starts (again, with new bytes, when a check was under way). `port_only`:
    /// the address last validated differs in its port alone. Out of memory: the owner
    /// stays where it was.
    pub fn startPathValidation(c: *Connection, now_us: u64, received_bytes: usize, port_only: bool) error{OutOfMemory}!void {
        const k = c.path_check orelse try c.allocator.create(path.Check);
        var challenge: [path.data_len]u8 = undefined;
        std.crypto.random.bytes(&challenge);
        k.* = path.Check.init(challenge, port_only, received_bytes, now_us, c.ptoUs(), c.recovery.peer_max_ack_delay_us);
        c.path_check = k;
        c.path_outcome = .none;
        // What the old path carried says nothing of the new one (RFC 9000 14.3, 13.4.2): the
        // datagram size starts again from 1,200 (the search resumes once the check ended),
        // and ECN is validated afresh.
        c.pmtu.restart(now_us);
        c.applyDatagramSize();
        c.ecn.restart();
    }

    /// The owner is back on the address it last validated: no check is needed there.
    pub fn endPathValidation(c: *Connection) void {
        c.endPathCheck(.none);
    }

    /// `validated` or `failed` once, when a check ended (then `none` until the next one).
    pub fn takePathOutcome(c: *Connection) path.Outcome {
        defer c.path_outcome = .none;
        return c.path_outcome;
    }

    /// A PATH_RESPONSE: when it echoes our challenge, the new address is the peer's.
    pub fn onPathResponse(c: *Connection, data: *const [path.data_len]u8) void {
        const k = c.path_check orelse return;
        if (!k.matches(data)) return;
        // RFC 9000 9.4: a new path starts with fresh estimates, unless only the port moved.
        if (!k.port_only) c.recovery.resetForNewPath();
        c.endPathCheck(.validated);
    }

    fn endPathCheck(c: *Connection, outcome: path.Outcome) void {
        if (c.path_check) |k| c.allocator.destroy(k);
        c.path_check = null;
        c.path_outcome = outcome;
    }

    /// The next datagram to send into `out`; 0 when nothing may or need be sent now.
    pub fn send(c: *Connection, out: []u8, now_us: u64) usize {
        c.closeIfSent();
        return conn_send.send(c, out, now_us);
    }

    // ---- timers --------------------------------------------------------------------------

    pub fn nextDeadline(c: *const Connection) ?u64 {
        if (c.state == .closed) return null;
        if (c.state == .closing or c.state == .draining) {
            return if (c.close_deadline_us == recovery_mod.never) null else c.close_deadline_us;
        }
        var d = c.idle_deadline_us;
        if (c.state == .handshaking) d = @min(d, c.handshake_deadline_us);
        if (conn_send.sendBlocked(c)) {
            d = @min(d, c.recovery.loss_timer_us); // only what does not wait to send
        } else if (c.recovery.nextDeadline()) |r| d = @min(d, r);
        if (c.path_check) |k| d = @min(d, k.deadline());
        if (c.one_rtt) |k| if (k.previousDeadline()) |p| {
            d = @min(d, p);
        };
        if (conn_send.pacedDeadline(c)) |p| d = @min(d, p);
        return if (d == recovery_mod.never) null else d;
    }

    pub fn onTimeout(c: *Connection, now_us: u64) void {
        switch (c.state) {
            .closed => return,
            .closing, .draining => {
                if (now_us >= c.close_deadline_us) c.enterClosed();
                return;
            },
            else => {},
        }
        const handshake_over = c.state == .handshaking and now_us >= c.handshake_deadline_us;
        if (now_us >= c.idle_deadline_us or handshake_over) {
            // RFC 9000 10.1: closed silently.
            c.reportClosed(0, false);
            c.enterClosed();
            return;
        }
        if (c.path_check) |k| if (k.onTimeout(now_us)) c.endPathCheck(.failed);
        if (c.one_rtt) |k| if (k.previousDeadline()) |p| {
            if (now_us >= p) k.discardPrevious(c.allocator);
        };
        var sink: conn_receive.Sink = .{ .c = c, .now_us = now_us };
        const outcome = c.recovery.onLossDetectionTimeout(c.allocator, now_us, &sink);
        sink.finish();
        if (c.qlog) |q| q.metrics(&c.recovery);
        if (outcome.probe) |space| c.onProbe(space);
    }

    /// A PTO: the probe goes in `space`; CRYPTO data not yet acknowledged goes again.
    fn onProbe(c: *Connection, space: Space) void {
        c.probe = space;
        if (c.crypto[@intFromEnum(space)]) |cs| cs.resendUnacked(c.allocator);
    }

    /// The PTO period (RFC 9002 6.2.1) for the closing and draining periods.
    pub fn ptoUs(c: *const Connection) u64 {
        return c.recovery.rtt.ptoBaseUs() +| @as(u64, c.recovery.peer_max_ack_delay_us);
    }

    pub fn restartIdle(c: *Connection, now_us: u64) void {
        const period = @max(c.idle_timeout_us, 3 *| c.ptoUs());
        c.idle_deadline_us = if (c.idle_timeout_us == 0) recovery_mod.never else now_us +| period;
    }

    // ---- connection IDs (the owner's side, `conn_cids.zig`) ------------------------------

    /// Whether the connection takes one more ID of ours (`addCid`).
    pub fn wantsCid(c: *const Connection) bool {
        return conn_cids.wantsCid(c);
    }

    /// One more ID of ours, which the owner routes to this connection from now on, and its
    /// stateless reset token: announced to the peer in a NEW_CONNECTION_ID.
    pub fn addCid(c: *Connection, cid: []const u8, token: conn_cids.Token) void {
        conn_cids.addCid(c, cid, token);
    }

    /// An ID of ours the peer retired, still routed here: the owner stops routing it, then
    /// calls `forgetCid`.
    pub fn retiredCid(c: *const Connection) ?Cid {
        return conn_cids.retiredCid(c);
    }

    pub fn forgetCid(c: *Connection, cid: []const u8) void {
        conn_cids.forgetCid(c, cid);
    }

    // ---- closing -------------------------------------------------------------------------

    /// CONNECTION_CLOSE with an application error (type 0x1d).
    pub fn closeApplication(c: *Connection, code: u64, reason: []const u8) void {
        c.closeWith(.{ .code = code, .app = true }, reason);
    }

    /// CONNECTION_CLOSE with an application code once everything we sent on bidirectional
    /// streams is acknowledged (or those streams reset): a graceful end, HTTP/3's after its
    /// GOAWAY, that loses none of a response still in flight. Checked before each `send`
    /// (an ACK or a probe timeout makes the connection send). A peer that acknowledges
    /// nothing through `close_when_sent_ptos_max` probe timeouts in a row is taken as gone:
    /// the connection closes then (a stopping server does not wait out its idle timeout).
    pub fn closeApplicationWhenSent(c: *Connection, code: u64) void {
        assert(code <= streams.varint_max);
        if (c.state == .closing or c.state == .draining or c.state == .closed) return;
        c.close_when_sent = code;
        c.closeIfSent();
    }

    pub const close_when_sent_ptos_max = 3;

    fn closeIfSent(c: *Connection) void {
        const code = c.close_when_sent;
        if (code == no_close) return;
        if (c.recovery.pto_count < close_when_sent_ptos_max) for (c.stream_table.items) |s| {
            if (streams.directionOf(s.id) != .bidi or !streams.serverSends(s.id)) continue;
            if (!s.send().allAcked() and !s.reset_out_sent) return;
        };
        c.close_when_sent = no_close;
        c.closeApplication(code, "");
    }

    /// CONNECTION_CLOSE with a transport error (type 0x1c).
    pub fn closeTransport(c: *Connection, code: u64, frame_type: u64, reason: []const u8) void {
        c.closeWith(.{ .code = code, .app = false, .frame_type = frame_type }, reason);
    }

    fn closeWith(c: *Connection, frame: CloseFrame, reason: []const u8) void {
        if (c.state == .closing or c.state == .draining or c.state == .closed) return;
        assert(c.close_frame == null and c.closed_code == no_close);
        // Out of memory: `closeFrame` sends the code all the same, without its reason.
        if (c.allocator.create(CloseFrame)) |f| {
            f.* = frame;
            const n = @min(reason.len, reason_max_bytes);
            @memcpy(f.reason[0..n], reason[0..n]);
            f.reason_len = @intCast(n);
            c.close_frame = f;
        } else |_| {}
        c.close_owed = true;
        c.state = .closing;
        c.reportClosed(frame.code, frame.app);
    }

    /// The CONNECTION_CLOSE we send while closing: the one `closeWith` kept, or (its room
    /// could not be had) the same code without reason or frame type.
    pub fn closeFrame(c: *const Connection) CloseFrame {
        assert(c.state == .closing);
        if (c.close_frame) |f| return f.*;
        assert(c.closed_code != no_close);
        return .{ .code = c.closed_code, .app = c.closed_app };
    }

    fn freeCloseFrame(c: *Connection) void {
        if (c.close_frame) |f| c.allocator.destroy(f);
        c.close_frame = null;
    }

    /// The close went out (its closing period was started by the first try, `conn_send`).
    pub fn onCloseSent(c: *Connection) void {
        assert(c.state == .closing and c.close_deadline_us != recovery_mod.never);
        c.close_owed = false;
    }

    /// The peer's CONNECTION_CLOSE: draining (RFC 9000 10.2.2).
    pub fn enterDraining(c: *Connection, code: u64, app: bool, now_us: u64) void {
        if (c.state == .draining or c.state == .closed) return;
        c.reportClosed(code, app);
        c.state = .draining;
        c.freeCloseFrame();
        c.close_owed = false;
        c.close_deadline_us = now_us +| 3 *| c.ptoUs();
    }

    fn enterClosed(c: *Connection) void {
        c.state = .closed;
        c.freeCloseFrame();
        c.freeHandshake();
        c.recovery.deinit(c.allocator);
        c.sent.deinit(c.allocator);
        c.sent = .{};
    }

    fn reportClosed(c: *Connection, code: u64, app: bool) void {
        assert(code != no_close);
        if (c.closed_code != no_close) return;
        c.closed_code = code;
        c.closed_app = app;
        if (c.qlog) |q| q.closed(code, app);
    }

    pub fn isClosed(c: *const Connection) bool {
        return c.state == .closed;
    }

    // ---- key and handshake lifetime --------------------------------------------------------

    fn destroyKeys(allocator: Allocator, k: *KeyPair) void {
        k.rx.wipe();
        k.tx.wipe();
        allocator.destroy(k);
    }

    /// RFC 9001 6.6's limits for the 1-RTT keys' suite, or the config's.
    pub fn aeadLimits(c: *const Connection) protection.AeadLimits {
        const k = c.one_rtt orelse unreachable; // asked only once 1-RTT keys are in
        var l = protection.aeadLimits(k.tx.suite);
        if (c.config.confidentiality_limit) |n| l.confidentiality = @max(n, 1);
        if (c.config.integrity_limit) |n| l.integrity = n;
        return l;
    }

    /// Before a datagram is built: a key update once the current key sealed 7/8 of the
    /// confidentiality limit and RFC 9001 allows one (the handshake confirmed, 6.1; our
    /// last update answered and acknowledged, 6.1; the previous receive keys gone, 6.5).
    /// At the limit itself, if only the previous receive keys stand in the way, they go
    /// early (6.5's three PTOs are a SHOULD; the connection is worth more than a late
    /// packet); with no update possible at all the connection stops (6.6: closed silently,
    /// AEAD_LIMIT_REACHED as its code): nothing more is sealed with that key.
    pub fn updateKeysIfDue(c: *Connection) void {
        const k = c.one_rtt orelse return;
        if (c.state != .established or !c.recovery.handshake_confirmed) return;
        const limit = c.aeadLimits().confidentiality;
        if (k.tx_sealed < protection.updateThreshold(limit)) return;
        const app = &c.recovery.application;
        if (k.mayInitiate(if (app.acked_any) app.largest_acked else null)) {
            k.initiate() catch unreachable; // mayInitiate: both phases agree
            return;
        }
        if (k.tx_sealed < limit) return;
        if (k.mayInitiateOncePreviousGone(if (app.acked_any) app.largest_acked else null)) {
            k.discardPrevious(c.allocator);
            k.initiate() catch unreachable; // both phases agree
            return;
        }
        c.reportClosed(@intFromEnum(frames.TransportError.aead_limit_reached), false);
        c.enterClosed();
    }

    /// A 1-RTT packet failed authentication (counted by the keys): past the integrity
    /// limit the connection closes with AEAD_LIMIT_REACHED (RFC 9001 6.6). Initial and
    /// Handshake packets are not counted: Initial keys are public, and the handshake ends
    /// within `handshake_timeout_ms`, far from 2^36 forgeries.
    pub fn onAuthenticationFailed(c: *Connection) void {
        const k = c.one_rtt orelse return;
        if (k.auth_failures <= c.aeadLimits().integrity) return;
        c.closeTransport(@intFromEnum(frames.TransportError.aead_limit_reached), 0, "");
    }

    pub fn discardInitial(c: *Connection) void {
        if (c.initial_keys) |k| destroyKeys(c.allocator, k);
        c.initial_keys = null;
        c.dropCrypto(.initial);
        c.recovery.discardSpace(c.allocator, .initial);
        c.sent.dropSpace(c.allocator, .initial);
    }

    pub fn discardHandshake(c: *Connection) void {
        if (c.handshake_keys) |k| destroyKeys(c.allocator, k);
        c.handshake_keys = null;
        c.dropCrypto(.handshake);
        c.recovery.discardSpace(c.allocator, .handshake);
        c.sent.dropSpace(c.allocator, .handshake);
    }

    fn dropCrypto(c: *Connection, space: Space) void {
        const i = @intFromEnum(space);
        if (c.crypto[i]) |cs| cs.destroy(c.allocator);
        c.crypto[i] = null;
    }

    /// Everything only the handshake needed.
    pub fn freeHandshake(c: *Connection) void {
        if (c.hs) |hs| hs.deinit();
        c.hs = null;
        if (c.initial_keys != null) c.discardInitial();
        if (c.handshake_keys != null) c.discardHandshake();
    }

    /// A token (`new_token.zig`) for the client's next connection, sent in a NEW_TOKEN frame
    /// (sent again if lost). Without memory for the copy, none is sent: the client's next
    /// connection is then validated as if it had none.
    pub fn giveNewToken(c: *Connection, token: *const [new_token_len]u8) void {
        if (c.new_token != null or c.state != .established) return;
        const copy = c.allocator.create([new_token_len]u8) catch return;
        copy.* = token.*;
        c.new_token = copy;
        c.new_token_owed = true;
    }

    /// The token was acknowledged, or the connection ends.
    pub fn dropNewToken(c: *Connection) void {
        if (c.new_token) |t| c.allocator.destroy(t);
        c.new_token = null;
        c.new_token_owed = false;
    }

    // ---- the application's API -----------------------------------------------------------

    /// RFC 9221 (`datagrams.zig`): the largest datagram `sendDatagram` takes.
    pub fn datagramMax(c: *const Connection) usize {
        const room = c.config.max_datagram_bytes -| datagrams_mod.packet_overhead;
        return datagrams_mod.payloadMax(room, c.peer_max_datagram_frame);
    }

    /// Queues an unreliable datagram for the peer: sent once, never again if lost.
    pub fn sendDatagram(c: *Connection, data: []const u8) datagrams_mod.SendError!void {
        if (c.state != .established or c.peer_max_datagram_frame == 0) return error.Unsupported;
        if (data.len > c.datagramMax()) return error.TooLarge;
        const d = datagrams_mod.ensure(&c.datagrams, c.allocator) orelse return error.Dropped;
        if (!d.out.push(c.allocator, data)) return error.Dropped;
    }

    /// The oldest datagram from the peer, valid until `popDatagram`.
    pub fn peekDatagram(c: *const Connection) ?[]const u8 {
        return if (c.datagrams) |d| d.in.peek() else null;
    }

    pub fn popDatagram(c: *Connection) void {
        c.datagrams.?.in.pop(c.allocator);
    }

    /// The TLS session's summary for the ASGI tls extension, once the handshake completed.
    pub fn tlsSummary(c: *const Connection) ?*const openssl.SessionSummary {
        return if (c.tls_summary.version != null) &c.tls_summary else null;
    }

    pub fn nextEvent(c: *Connection) ?Event {
        if (c.handshake_done_event) {
            c.handshake_done_event = false;
            return .handshake_done;
        }
        if (c.datagram_event) {
            c.datagram_event = false;
            return .datagram;
        }
        for (c.stream_table.items) |s| if (streamEvent(s)) |e| {
            c.freeIfDone(s); // a reset stream may be done once the application was told
            return e;
        };
        if (c.closed_code != no_close and !c.closed_reported) {
            c.closed_reported = true;
            return .{ .closed = .{ .code = c.closed_code, .app = c.closed_app } };
        }
        return null;
    }

    fn streamEvent(s: *Stream) ?Event {
        if (s.reset_event_code != streams.no_code) {
            const code = s.reset_event_code;
            s.reset_event_code = streams.no_code;
            return .{ .reset = .{ .id = s.id, .code = code, .final_size = s.reset_event_final_size } };
        }
        if (s.stop_sending_event != streams.no_code) {
            const code = s.stop_sending_event;
            s.stop_sending_event = streams.no_code;
            return .{ .stop_sending = .{ .id = s.id, .code = code } };
        }
        if (s.readable_event) {
            s.readable_event = false;
            return .{ .readable = s.id };
        }
        if (s.writable_event) {
            s.writable_event = false;
            return .{ .writable = s.id };
        }
        return null;
    }

    pub fn findStream(c: *const Connection, id: u64) ?*Stream {
        for (c.stream_table.items) |s| if (s.id == id) return s;
        return null;
    }

    /// Whether a stream of this ID existed and is gone (closed), rather than never opened.
    fn streamWasOpen(c: *const Connection, id: u64) bool {
        const index = streams.indexOf(id);
        if (streams.initiatorOf(id) == .client) return index < c.flow.peer_opened[@intFromEnum(streams.directionOf(id))];
        return streams.directionOf(id) == .uni and index < c.flow.uni_opened;
    }

    /// Whether the application is done with the stream's receive side: its FIN or reset was
    /// read, STOP_SENDING was asked, or the stream was open and is gone. Bytes still arriving
    /// on it are late, never a new stream (the HTTP/3 session drains them).
    pub fn streamReceiveOver(c: *const Connection, id: u64) bool {
        if (!streams.serverReceives(id)) return true;
        const s = c.findStream(id) orelse return c.streamWasOpen(id);
        return s.recv().finished or s.stop_sending_out != streams.no_code;
    }

    fn lookup(c: *const Connection, id: u64) StreamError!*Stream {
        if (c.findStream(id)) |s| return s;
        return if (c.streamWasOpen(id)) error.StreamClosed else error.UnknownStream;
    }

    pub const ReadResult = struct { n: usize, fin: bool };

    pub fn streamRead(c: *Connection, id: u64, buf: []u8) StreamError!ReadResult {
        if (!streams.serverReceives(id)) return error.UnknownStream;
        const s = try c.lookup(id);
        if (s.recv().finished) return error.StreamClosed;
        const data = s.recv().data.readable();
        const n = @min(data.len, buf.len);
        @memcpy(buf[0..n], data[0..n]);
        s.recv().data.consume(c.allocator, n);
        c.flow.read_total += n;
        s.creditRead(c.config.initial_max_stream_data);
        c.creditConnection();
        const fin = s.recv().atFin();
        if (fin) {
            s.recv().finished = true;
            s.recv().data.deinit(c.allocator);
        }
        if (s.recv().data.readable().len > 0) s.readable_event = true;
        c.freeIfDone(s);
        return .{ .n = n, .fin = fin };
    }

    /// MAX_DATA once half the connection's window was read.
    pub fn creditConnection(c: *Connection) void {
        const window = c.config.initial_max_data;
        const target = c.flow.read_total + window;
        if (target - c.flow.recv_max >= window / 2) {
            c.flow.recv_max = target;
            c.flow.max_data_owed = true;
        }
    }

    pub fn streamWrite(c: *Connection, id: u64, bytes: []const u8, fin: bool) StreamError!usize {
        if (!streams.serverSends(id)) return error.UnknownStream;
        const s = try c.lookup(id);
        if (s.send().fin or s.reset_out != streams.no_code) return error.StreamClosed;
        const credit = @min(s.sendCredit(), c.flow.send_max -| c.flow.written_total);
        const n = s.send().write(c.allocator, bytes, @intCast(@min(credit, std.math.maxInt(usize)))) catch 0;
        c.flow.written_total += n;
        if (n < bytes.len) s.writable_wanted = true;
        if (fin and n == bytes.len) s.send().fin = true;
        return n;
    }

    pub fn streamReset(c: *Connection, id: u64, code: u64) void {
        if (!streams.serverSends(id)) return;
        const s = c.findStream(id) orelse return;
        assert(code <= streams.varint_max); // an application error code is a varint
        if (s.reset_out != streams.no_code or s.send().allAcked()) return;
        s.reset_out = code;
        // Nothing more of the stream's data goes out (RFC 9000 3.1).
        s.send().dropLost();
        s.send().sent_offset = s.send().write_offset;
        s.send().fin = true;
        s.send().fin_sent = true;
    }

    pub fn streamStopSending(c: *Connection, id: u64, code: u64) void {
        if (!streams.serverReceives(id)) return;
        const s = c.findStream(id) orelse return;
        assert(code <= streams.varint_max);
        if (s.recv().finished or s.stop_sending_out != streams.no_code) return;
        s.stop_sending_out = code;
    }

    pub fn openUni(c: *Connection) StreamError!u64 {
        if (c.state != .established) return error.StreamLimit;
        if (c.flow.uni_opened >= c.flow.uni_limit) return error.StreamLimit;
        const id = streams.idOf(.server, .uni, c.flow.uni_opened);
        const s = Stream.create(c.allocator, id, 0, c.flow.peer_window_uni) catch return error.StreamLimit;
        c.addStream(s) catch {
            s.destroy(c.allocator);
            return error.StreamLimit;
        };
        c.flow.uni_opened += 1;
        return id;
    }

    /// Puts a new stream in the table, whose room grows by half (at least 2 slots) when full:
    /// ArrayList's first growth would make room for a cache line of pointers (16), where an
    /// idle HTTP/3 connection holds its 2 control streams.
    pub fn addStream(c: *Connection, s: *Stream) Allocator.Error!void {
        const len = c.stream_table.items.len;
        if (len == c.stream_table.capacity) try c.stream_table.ensureTotalCapacityPrecise(c.allocator, len + @max(2, len / 2));
        c.stream_table.appendAssumeCapacity(s);
    }

    /// Gives back the table's room once a quarter or less of it is used (the room a burst of
    /// requests made stays no longer than the burst), all of it once no stream is left.
    fn shrinkStreamTable(c: *Connection) void {
        const t = &c.stream_table;
        if (t.items.len == 0) return t.clearAndFree(c.allocator);
        if (t.capacity <= 4 or t.items.len > t.capacity / 4) return;
        const room = c.allocator.alloc(*Stream, 2 * t.items.len) catch return; // keeps the old room
        @memcpy(room[0..t.items.len], t.items);
        const len = t.items.len;
        c.allocator.free(t.allocatedSlice());
        t.* = .{ .items = room[0..len], .capacity = room.len };
    }

    /// Frees a stream both sides are done with; a client's stream gives back a slot.
    pub fn freeIfDone(c: *Connection, s: *Stream) void {
        if (!s.done()) return;
        for (c.stream_table.items, 0..) |t, i| if (t == s) {
            _ = c.stream_table.swapRemove(i);
            break;
        };
        c.shrinkStreamTable();
        if (streams.initiatorOf(s.id) == .client) c.creditStreams(streams.directionOf(s.id));
        s.destroy(c.allocator);
    }

    fn creditStreams(c: *Connection, dir: streams.Direction) void {
        const d = @intFromEnum(dir);
        const initial = if (dir == .bidi) c.config.initial_max_streams_bidi else c.config.initial_max_streams_uni;
        c.flow.peer_closed[d] += 1;
        const target = c.flow.peer_closed[d] + initial;
        if (target - c.flow.peer_limit[d] >= @max(1, initial / 2)) {
            c.flow.peer_limit[d] = @min(target, frames.streams_max);
            c.flow.max_streams_owed[d] = true;
        }
    }

    /// Bytes this connection holds beyond `Recovery` (struct and heap, the caller's counter
    /// tells the heap exactly; this is the estimate without one).
    pub fn heldBytes(c: *const Connection) usize {
        var n: usize = @sizeOf(Connection) - @sizeOf(Recovery);
        if (c.recovery.early != null) n += @sizeOf(recovery_mod.Early);
        if (c.new_token != null) n += new_token_len;
        if (c.datagrams) |d| n += d.heldBytes();
        if (c.one_rtt) |k| {
            n += @sizeOf(protection.OneRtt);
            if (k.update != null) n += @sizeOf(protection.OneRtt.Update);
        }
        if (c.initial_keys != null) n += @sizeOf(KeyPair);
        if (c.handshake_keys != null) n += @sizeOf(KeyPair);
        if (c.hs) |hs| n += hs.heldBytes();
        if (c.tls_summary.server_name) |name| n += name.len;
        n += c.stream_table.capacity * @sizeOf(usize);
        for (c.stream_table.items) |s| n += Stream.recordBytes(s.id);
        n += c.sent.heldBytes();
        return n;
    }
};

test {
    _ = @import("connection_tests.zig");
}
