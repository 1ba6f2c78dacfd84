//! A worker's QUIC endpoint, sans-IO: every datagram the UDP socket receives comes here
//! (`onDatagram`), which finds its connection by destination connection ID and hands it
//! over, or answers without keeping any state: Version Negotiation for a version not
//! spoken, Retry when addresses must be validated first, a stateless reset for a short
//! header it cannot attribute. A new connection is made only for an Initial that passes
//! every bound (size, connections, handshakes in progress): a flood of forged Initials
//! costs at most `handshakes_max` connections, then Retries or nothing.
//!
//! Once the worker drains (`refuseNew`), no connection is made any more: a new client's
//! Initial is answered with a server Initial carrying CONNECTION_CLOSE (CONNECTION_REFUSED,
//! RFC 9000 10.2.3, 17.2.2), sealed with the Initial keys its own DCID gives, so the
//! client gives up at once (a browser falls back to TCP) instead of waiting for a timeout.
//! That answer keeps no state and is smaller than the 1200-byte Initial it answers (no
//! amplification); it shares the stateless resets' rate bound. A worker that retires
//! while others serve on (`refuseNew(other_worker)`) answers instead with a Retry whose
//! source ID carries the other worker's index: the client's next Initial is steered there,
//! and that worker honours the token (the Retry key is shared). A client that already came
//! through a Retry (it may take only one) is refused.
//!
//! Connection IDs: every ID this endpoint issues is `cid_len` bytes, byte
//! `udp_steering.cid_worker_offset` the worker's index (so the reuseport program steers the
//! connection's datagrams here), the rest from a CSPRNG seeded per worker.
//!
//! The endpoint is generic over the connection type. What it asks of `Conn`:
//!
//!     Conn.Context                         what making a connection needs (a value the endpoint keeps)
//!     Conn.open(ctx: Conn.Context, accept: *const Accept) ?*Conn
//!                                          a new server connection, still handshaking; null when it
//!                                          cannot be made (memory): the Initial is dropped
//!     conn.receive(datagram: []const u8, path: *const Path, ecn: u2, now_us: u64) void
//!                                          a datagram whose first packet names one of its IDs,
//!                                          with its IP header's ECN bits
//!     conn.endpoint_link: Link             a field the endpoint owns: the connection's IDs here
//!
//! and of its owner (the server): `handshakeConfirmed(conn)` when the handshake is confirmed,
//! `remove(conn)` when it ends (before it is freed), `issueCid`/`retireCid` for
//! NEW_CONNECTION_ID and RETIRE_CONNECTION_ID, or `syncCids` with the transport connection
//! that keeps the IDs (`quic/conn_cids.zig`). The endpoint keeps no timers. The answers it
//! makes go to a bounded `OutQueue` the caller drains into `udp.zig`'s batch; an answer
//! that finds the queue full is dropped (it has no state to lose).
const std = @import("std");
const assert = std.debug.assert;
const packet = @import("packet.zig");
const stateless_reset = @import("stateless_reset.zig");
const retry_token = @import("retry_token.zig");
const new_token = @import("new_token.zig");
const cid_table = @import("cid_table.zig");
const protection = @import("protection.zig");
const frames = @import("frames.zig");
const varint = @import("varint.zig");
const Peer = @import("../transport/peer.zig").Peer;
const udp_steering = @import("../transport/udp_steering.zig");

pub const Cid = cid_table.Cid;
/// The length of every connection ID this endpoint issues.
pub const cid_len = 8;
/// IDs a connection may hold here at once (RFC 9000 5.1.1: active_connection_id_limit).
pub const cids_per_connection_max = 4;
/// A client's first Initial carries a destination ID of at least 8 bytes (RFC 9000 7.2).
pub const client_dcid_len_min = 8;

pub const RetryMode = enum {
    never,
    /// Once `retry_handshakes_min` handshakes are in progress: under an Initial flood.
    auto,
    always,
};

pub const Config = struct {
    /// This worker's index, in every ID it issues.
    worker_index: u8,
    /// Seeds the CSPRNG that draws IDs, nonces and reset bytes (the server reads it from the OS).
    seed: [32]u8,
    /// The CID table's SipHash key.
    table_key: [cid_table.hash_key_len]u8,
    /// Shared by every worker: a Retry from one is honoured by another.
    retry_key: retry_token.Key,
    reset_key: [stateless_reset.key_len]u8,
    retry: RetryMode = .auto,
    retry_handshakes_min: u32 = 64,
    retry_token_lifetime_us: u64 = retry_token.lifetime_us_default,
    /// How long the token given to a client for its next connection stays good (at most
    /// `new_token.rotation_period_us`); 0: none is given.
    new_token_lifetime_us: u64 = new_token.lifetime_us_default,
    /// Connections at once; past it, an Initial for a new one is dropped (see `Outcome`).
    connections_max: u32,
    /// Connections still handshaking at once: the Initial-flood bound.
    handshakes_max: u32,
    /// Stateless resets per interval, at most: each answers a datagram we cannot
    /// attribute, and a flood of those must not turn the worker into a sender. The
    /// refusals of a draining endpoint (`refuseNew`) count against the same bound.
    resets_per_interval_max: u32 = 64,
    reset_interval_us: u64 = 100 * std.time.us_per_ms,
};

/// Where a datagram travelled: from `peer` to `local` (the address it was sent to, so the
/// answer leaves from it).
pub const Path = struct { peer: Peer, local: Peer };

/// What a new connection is told of the Initial that made it.
pub const Accept = struct {
    path: Path,
    version: u32,
    /// The destination ID of this Initial: the client's Initial keys derive from it.
    client_dcid: Cid,
    /// The client's source ID: the destination of everything the server sends.
    client_scid: Cid,
    /// Ours: the source ID of the server's first packets, routed to this connection.
    scid: Cid,
    reset_token: stateless_reset.Token,
    /// original_destination_connection_id (RFC 9000 7.3): the client's first DCID (the
    /// token's after a Retry).
    original_dcid: Cid,
    /// retry_source_connection_id: after a Retry, the ID it carried (this Initial's DCID).
    retry_scid: ?Cid,
    /// The client proved its address (a valid Retry token): no amplification limit.
    address_validated: bool,
};

/// A connection's state in the endpoint, kept in the connection (`conn.endpoint_link`).
pub const Link = struct {
    handshaking: bool = false,
    cids_len: u8 = 0,
    /// Our IDs, all `cid_len` bytes: only their bytes are kept.
    cids: [cids_per_connection_max][cid_len]u8 = undefined,
    /// The client's first destination ID (at least `client_dcid_len_min` bytes), routed here
    /// until the handshake is confirmed (its Initials are resent to it until the client
    /// hears from us); empty when none.
    client_dcid: Cid = .{},
};

/// What became of a datagram.
pub const Outcome = enum {
    routed,
    accepted,
    version_negotiation,
    retry,
    stateless_reset,
    /// Draining (`Endpoint.refuseNew`): a new client's Initial answered with an Initial
    /// carrying CONNECTION_CLOSE (CONNECTION_REFUSED); no state kept.
    refused,
    /// Draining, and the answer past the rate bound (or the queue full): dropped.
    dropped_refused,
    /// Not a QUIC packet, or a header that does not parse.
    dropped_malformed,
    /// An Initial in a datagram shorter than 1200 bytes, or with a DCID under 8 bytes.
    dropped_initial_too_short,
    /// 0-RTT, Handshake, Retry or Version Negotiation for no connection of ours.
    dropped_unknown,
    /// An unknown version in a datagram too short to answer (no amplification).
    dropped_version,
    /// At `connections_max`. A CONNECTION_CLOSE (CONNECTION_REFUSED) would need Initial
    /// keys and a sealed packet per Initial: dropping costs the flood nothing and the
    /// client retries.
    dropped_connections_max,
    dropped_handshakes_max,
    /// A Retry token that does not open (RFC 9000 8.1.3 allows a close with INVALID_TOKEN;
    /// that too would be an Initial to build: dropped, the client gives up on its own).
    dropped_invalid_token,
    dropped_queue_full,
    /// Not long enough to answer with a smaller stateless reset (21 bytes and under).
    dropped_too_short_to_reset,
    dropped_reset_rate,
    /// A short header naming another worker's ID: steering failed; a reset would end a
    /// connection that lives elsewhere.
    dropped_other_worker,
    /// `Conn.open` refused (memory).
    dropped_open_failed,
};

/// The longest answer: Version Negotiation echoing two 255-byte IDs (RFC 8999).
pub const answer_len_max = 7 + 2 * packet.cid_len_max_any_version + 8;
pub const queue_len_max = 64;

/// An answer to send: bytes, to `path.peer` from `path.local`.
pub const Answer = struct {
    bytes: [answer_len_max]u8 = undefined,
    len: u16 = 0,
    path: Path = undefined,

    pub fn slice(a: *const Answer) []const u8 {
        return a.bytes[0..a.len];
    }
};

/// The answers waiting for the socket, first in first out, bounded.
pub const OutQueue = struct {
    items: [queue_len_max]Answer = undefined,
    head: usize = 0,
    len: usize = 0,

    /// A slot at the back to fill, or null when full.
    fn reserve(q: *OutQueue) ?*Answer {
        if (q.len == queue_len_max) return null;
        return &q.items[(q.head + q.len) % queue_len_max];
    }

    fn commit(q: *OutQueue, n: usize, path: Path) void {
        assert(q.len < queue_len_max and n > 0 and n <= answer_len_max);
        const a = &q.items[(q.head + q.len) % queue_len_max];
        a.len = @intCast(n);
        a.path = path;
        q.len += 1;
    }

    /// The oldest answer, still queued; `pop` it once sent.
    pub fn peek(q: *const OutQueue) ?*const Answer {
        if (q.len == 0) return null;
        return &q.items[q.head];
    }

    pub fn pop(q: *OutQueue) void {
        assert(q.len > 0);
        q.head = (q.head + 1) % queue_len_max;
        q.len -= 1;
    }
};

pub fn Endpoint(comptime Conn: type) type {
    comptime {
        assert(@hasDecl(Conn, "Context") and @hasDecl(Conn, "open") and @hasDecl(Conn, "receive"));
        assert(@hasField(Conn, "endpoint_link"));
    }
    return struct {
        const Self = @This();
        pub const Table = cid_table.Table(*Conn);

        config: Config,
        context: Conn.Context,
        table: Table,
        csprng: std.Random.DefaultCsprng,
        connections: u32 = 0,
        handshakes: u32 = 0,
        resets_in_interval: u32 = 0,
        /// Initials whose token from an earlier connection validated their address.
        tokens_accepted: u64 = 0,
        reset_interval_start_us: u64 = 0,
        /// The worker drains: new connections are refused (see the file's comment).
        refusing: bool = false,
        /// Retiring beside other workers: new clients are sent there by a Retry.
        redirect_to: ?u8 = null,

        /// Allocates the CID table (the endpoint's only allocation).
        pub fn init(allocator: std.mem.Allocator, config: Config, context: Conn.Context) error{OutOfMemory}!Self {
            assert(config.connections_max > 0 and config.handshakes_max > 0);
            assert(config.handshakes_max <= config.connections_max);
            assert(config.resets_per_interval_max > 0);
            // Each connection holds its IDs and, while handshaking, the client's first DCID.
            const capacity = @as(usize, config.connections_max) * (cids_per_connection_max + 1);
            return .{
                .config = config,
                .context = context,
                .table = try Table.init(allocator, capacity, config.table_key),
                .csprng = std.Random.DefaultCsprng.init(config.seed),
            };
        }

        pub fn deinit(self: *Self, allocator: std.mem.Allocator) void {
            self.table.deinit(allocator);
            // The shared keys are zeroed (`undefined` is no write in a release build).
            std.crypto.secureZero(u8, &self.config.retry_key);
            std.crypto.secureZero(u8, &self.config.reset_key);
            self.* = undefined;
        }

        fn random(self: *Self) std.Random {
            return self.csprng.random();
        }

        /// Takes one datagram from `peer` to `local`, `ecn` the ECN bits of its IP header
        /// (`udp.Received.ecn`, for the connection's counts); answers go to `out`.
        pub fn onDatagram(self: *Self, datagram: []const u8, peer: Peer, local: Peer, ecn: u2, now_us: u64, out: *OutQueue) Outcome {
            const path: Path = .{ .peer = peer, .local = local };
            const h = packet.parse(datagram, cid_len) catch return .dropped_malformed;
            if (self.table.get(h.dcid)) |conn| {
                conn.receive(datagram, &path, ecn, now_us);
                return .routed;
            }
            return switch (h.kind) {
                .one_rtt => self.answerReset(datagram, &h, &path, now_us, out),
                .unsupported_version => self.answerVersion(datagram, &h, &path, out),
                .initial => self.onInitial(datagram, &h, &path, ecn, now_us, out),
                .zero_rtt, .handshake, .retry, .version_negotiation => .dropped_unknown,
            };
        }

        fn answerVersion(self: *Self, datagram: []const u8, h: *const packet.Header, path: *const Path, out: *OutQueue) Outcome {
            if (!packet.wantsVersionNegotiation(h, datagram.len)) return .dropped_version;
            const a = out.reserve() orelse return .dropped_queue_full;
            // A reserved version beside ours (RFC 9000 6.3, 15): clients must cope with both.
            const grease = (self.random().int(u32) & 0xf0f0_f0f0) | 0x0a0a_0a0a;
            const n = packet.writeVersionNegotiation(&a.bytes, h, &.{ packet.version_1, grease }, self.random().int(u7)) catch unreachable;
            out.commit(n, path.*);
            return .version_negotiation;
        }

        fn answerReset(self: *Self, datagram: []const u8, h: *const packet.Header, path: *const Path, now_us: u64, out: *OutQueue) Outcome {
            assert(h.dcid.len == cid_len);
            if (datagram.len <= stateless_reset.len_min) return .dropped_too_short_to_reset;
            if (h.dcid[udp_steering.cid_worker_offset] != self.config.worker_index) return .dropped_other_worker;
            if (now_us -| self.reset_interval_start_us >= self.config.reset_interval_us) {
                self.reset_interval_start_us = now_us;
                self.resets_in_interval = 0;
            }
            if (!self.statelessBudget(now_us)) return .dropped_reset_rate;
            const a = out.reserve() orelse return .dropped_queue_full;
            const tok = stateless_reset.token(&self.config.reset_key, h.dcid);
            const n = stateless_reset.write(&a.bytes, &tok, datagram.len, self.random()) orelse
                return .dropped_too_short_to_reset;
            self.resets_in_interval += 1;
            out.commit(n, path.*);
            return .stateless_reset;
        }

        /// Whether one more stateless answer that costs work (a reset, a refusal) fits in
        /// this interval's bound; the caller counts it once made.
        fn statelessBudget(self: *Self, now_us: u64) bool {
            if (now_us -| self.reset_interval_start_us >= self.config.reset_interval_us) {
                self.reset_interval_start_us = now_us;
                self.resets_in_interval = 0;
            }
            return self.resets_in_interval < self.config.resets_per_interval_max;
        }

        /// From now on no new connection is made: the worker drains. Existing connections
        /// are routed as before. With `other_worker` (a worker that serves on), a new
        /// client is sent there by a Retry rather than refused.
        pub fn refuseNew(self: *Self, other_worker: ?u8) void {
            assert(other_worker != self.config.worker_index);
            self.refusing = true;
            self.redirect_to = other_worker;
        }

        /// A server Initial (packet number 0) with CONNECTION_CLOSE (CONNECTION_REFUSED),
        /// sealed with the Initial keys of the client's DCID, to the client's SCID.
        fn answerRefused(self: *Self, h: *const packet.Header, path: *const Path, now_us: u64, out: *OutQueue) Outcome {
            assert(h.kind == .initial and h.dcid.len <= packet.cid_len_max);
            if (!self.statelessBudget(now_us)) return .dropped_refused;
            const a = out.reserve() orelse return .dropped_refused;
            const close: frames.Frame = .{ .connection_close = .{
                .application = false,
                .error_code = @intFromEnum(frames.TransportError.connection_refused),
                .frame_type = 0,
                .reason = "server draining",
            } };
            // 1 + 1 + 1 + 1 + 15 bytes: above the 3 the header sample needs past a 1-byte pn.
            const frame_len = 4 + close.connection_close.reason.len;
            const scid = self.drawCid();
            const built = packet.writeLongHeader(&a.bytes, .{
                .long_type = .initial,
                .version = h.version,
                .dcid = h.scid,
                .scid = scid.slice(),
                .pn = 0,
                .pn_len = 1,
            }, frame_len, protection.tag_len) catch unreachable;
            var w: varint.Writer = .{ .buf = a.bytes[built.header_len..][0..frame_len] };
            frames.write(&w, close) catch unreachable;
            assert(w.pos == frame_len and frame_len >= protection.payloadLenMin(1));
            const total = built.header_len + frame_len + protection.tag_len;
            const keys = protection.initialKeys(h.dcid);
            protection.protect(&keys.server, a.bytes[0..total], built.pn_offset, 0);
            self.resets_in_interval += 1;
            out.commit(total, path.*);
            return .refused;
        }

        fn onInitial(self: *Self, datagram: []const u8, h: *const packet.Header, path: *const Path, ecn: u2, now_us: u64, out: *OutQueue) Outcome {
            if (!packet.initialDatagramLongEnough(datagram.len)) return .dropped_initial_too_short;
            if (h.dcid.len < client_dcid_len_min) return .dropped_initial_too_short;
            if (self.refusing) {
                if (self.redirect_to) |other| if (h.token.len == 0 or h.token[0] != retry_token.marker)
                    return self.answerRetryTo(h, path, now_us, out, other);
                return self.answerRefused(h, path, now_us, out);
            }
            if (self.connections >= self.config.connections_max) return .dropped_connections_max;
            var original_dcid = Cid.from(h.dcid);
            var validated = false;
            var after_retry = false;
            const key = &self.config.retry_key;
            // Only our tokens are read; any other (a NEW_TOKEN of another server) is as good
            // as none (RFC 9000 8.1.3).
            if (h.token.len > 0 and h.token[0] == retry_token.marker) {
                const life = self.config.retry_token_lifetime_us;
                const peer = &path.peer;
                const opened = retry_token.openRotating(h.token, key, peer, h.dcid, now_us, life);
                original_dcid = opened catch return .dropped_invalid_token;
                validated = true;
                after_retry = true;
            } else if (h.token.len > 0 and h.token[0] == new_token.marker) {
                // A token from an earlier connection that does not open (expired, another
                // address) is as good as none: the client may get a Retry (8.1.3).
                const life = self.config.new_token_lifetime_us;
                validated = life > 0 and new_token.opens(h.token, key, &path.peer, now_us, life);
                if (validated) self.tokens_accepted +|= 1;
            }
            if (!validated and self.wantsRetry()) return self.answerRetry(h, path, now_us, out);
            if (self.handshakes >= self.config.handshakes_max) return .dropped_handshakes_max;
            return self.accept(datagram, h, path, ecn, now_us, original_dcid, validated, after_retry);
        }

        fn wantsRetry(self: *const Self) bool {
            return switch (self.config.retry) {
                .never => false,
                .always => true,
                .auto => self.handshakes >= self.config.retry_handshakes_min,
            };
        }

        fn answerRetry(self: *Self, h: *const packet.Header, path: *const Path, now_us: u64, out: *OutQueue) Outcome {
            // Carries our index, so the client's next Initial is steered back to this worker
            // (any worker would accept the token; this one is the one it reaches).
            return self.answerRetryTo(h, path, now_us, out, self.config.worker_index);
        }

        /// A Retry whose source ID names `worker`: the client's next Initial is steered there.
        fn answerRetryTo(self: *Self, h: *const packet.Header, path: *const Path, now_us: u64, out: *OutQueue, worker: u8) Outcome {
            const a = out.reserve() orelse return .dropped_queue_full;
            var scid = self.drawCid();
            scid.bytes[udp_steering.cid_worker_offset] = worker;
            var tok: [retry_token.len]u8 = undefined;
            var nonce: [retry_token.nonce_len]u8 = undefined;
            self.random().bytes(&nonce);
            const key = &self.config.retry_key;
            retry_token.sealRotating(&tok, key, nonce, &path.peer, scid.slice(), h.dcid, now_us);
            const n = packet.writeRetry(&a.bytes, h.scid, scid.slice(), &tok, h.dcid, self.random().int(u4)) catch unreachable;
            out.commit(n, path.*);
            return .retry;
        }

        fn accept(
            self: *Self,
            datagram: []const u8,
            h: *const packet.Header,
            path: *const Path,
            ecn: u2,
            now_us: u64,
            original_dcid: Cid,
            validated: bool,
            after_retry: bool,
        ) Outcome {
            // Not the DCID either, which goes into the table beside it (after a Retry that
            // DCID is one of ours, drawn maybe by another worker).
            var scid = self.drawFreshCid();
            while (std.mem.eql(u8, scid.slice(), h.dcid)) scid = self.drawFreshCid();
            assert(validated or !after_retry);
            const info: Accept = .{
                .path = path.*,
                .version = h.version,
                .client_dcid = Cid.from(h.dcid),
                .client_scid = Cid.from(h.scid),
                .scid = scid,
                .reset_token = stateless_reset.token(&self.config.reset_key, scid.slice()),
                .original_dcid = original_dcid,
                .retry_scid = if (after_retry) Cid.from(h.dcid) else null,
                .address_validated = validated,
            };
            const conn = Conn.open(self.context, &info) orelse return .dropped_open_failed;
            assert(info.client_dcid.len >= client_dcid_len_min and scid.len == cid_len);
            conn.endpoint_link = .{ .handshaking = true, .client_dcid = info.client_dcid };
            // Room was kept for every connection's IDs; neither ID is in the table (the
            // DCID was looked up, ours was drawn fresh).
            self.table.insert(h.dcid, conn) catch unreachable;
            self.table.insert(scid.slice(), conn) catch unreachable;
            conn.endpoint_link.cids[0] = scid.bytes[0..cid_len].*;
            conn.endpoint_link.cids_len = 1;
            self.connections += 1;
            self.handshakes += 1;
            conn.receive(datagram, path, ecn, now_us);
            return .accepted;
        }

        /// A new ID of ours: the worker's byte, the rest random.
        fn drawCid(self: *Self) Cid {
            var c: Cid = .{ .len = cid_len };
            self.random().bytes(c.bytes[0..cid_len]);
            c.bytes[udp_steering.cid_worker_offset] = self.config.worker_index;
            return c;
        }

        /// A new ID not in the table (56 random bits: a second draw is already rare).
        fn drawFreshCid(self: *Self) Cid {
            while (true) {
                const c = self.drawCid();
                if (!self.table.contains(c.slice())) return c;
            }
        }

        /// An ID and its reset token, for NEW_CONNECTION_ID.
        pub const Issued = struct { cid: Cid, reset_token: stateless_reset.Token };

        /// Issues one more ID for `conn`, routed to it from now on; null once it holds
        /// `cids_per_connection_max`.
        pub fn issueCid(self: *Self, conn: *Conn) ?Issued {
            const link = &conn.endpoint_link;
            assert(link.cids_len > 0); // an open connection
            if (link.cids_len == cids_per_connection_max) return null;
            const cid = self.drawFreshCid();
            assert(cid.len == cid_len);
            self.table.insert(cid.slice(), conn) catch unreachable; // room kept per connection
            link.cids[link.cids_len] = cid.bytes[0..cid_len].*;
            link.cids_len += 1;
            return .{ .cid = cid, .reset_token = stateless_reset.token(&self.config.reset_key, cid.slice()) };
        }

        /// Stops routing `cid` to `conn` (RETIRE_CONNECTION_ID); false when it is not one of
        /// its IDs. The last ID is not retired (a connection is reachable by one at least).
        pub fn retireCid(self: *Self, conn: *Conn, cid: []const u8) bool {
            const link = &conn.endpoint_link;
            if (link.cids_len <= 1) return false;
            for (link.cids[0..link.cids_len], 0..) |*c, i| {
                if (!std.mem.eql(u8, c, cid)) continue;
                assert(self.table.remove(cid).? == conn);
                link.cids[i] = link.cids[link.cids_len - 1];
                link.cids_len -= 1;
                return true;
            }
            return false;
        }

        /// Brings `conn`'s IDs here in line with its transport connection `q`, which says
        /// which of its IDs the peer retired (`retiredCid`, then `forgetCid` once it is no
        /// longer routed) and whether it takes one more (`wantsCid`, `addCid`). Twice: the
        /// last ID is kept routed (`retireCid`), so when the peer retired every one, the
        /// last goes once its replacements are in.
        pub fn syncCids(self: *Self, conn: *Conn, q: anytype) void {
            for (0..2) |_| {
                while (q.retiredCid()) |cid| {
                    if (!self.retireCid(conn, cid.slice())) break;
                    q.forgetCid(cid.slice());
                }
                while (q.wantsCid()) {
                    const issued = self.issueCid(conn) orelse break;
                    q.addCid(issued.cid.slice(), issued.reset_token);
                }
            }
        }

        /// The handshake is confirmed: it no longer counts against `handshakes_max`, and the
        /// client's first DCID is no longer routed.
        /// Writes a token for the client at `peer`'s next connection (`new_token.zig`);
        /// false when tokens are off.
        pub fn newToken(
            self: *Self,
            peer: *const Peer,
            now_us: u64,
            out: *[new_token.len]u8,
        ) bool {
            if (self.config.new_token_lifetime_us == 0) return false;
            var nonce: [new_token.nonce_len]u8 = undefined;
            self.random().bytes(&nonce);
            new_token.seal(out, &self.config.retry_key, nonce, peer, now_us);
            return true;
        }

        pub fn handshakeConfirmed(self: *Self, conn: *Conn) void {
            const link = &conn.endpoint_link;
            if (!link.handshaking) return;
            link.handshaking = false;
            self.handshakes -= 1;
            self.forgetClientDcid(conn);
        }

        fn forgetClientDcid(self: *Self, conn: *Conn) void {
            const link = &conn.endpoint_link;
            if (link.client_dcid.len == 0) return;
            assert(self.table.remove(link.client_dcid.slice()).? == conn);
            link.client_dcid = .{};
        }

        /// The connection ends: none of its IDs route any more. Call before freeing it.
        pub fn remove(self: *Self, conn: *Conn) void {
            const link = &conn.endpoint_link;
            assert(link.cids_len > 0);
            if (link.handshaking) self.handshakes -= 1;
            self.forgetClientDcid(conn);
            for (link.cids[0..link.cids_len]) |*c| assert(self.table.remove(c).? == conn);
            link.* = .{};
            self.connections -= 1;
        }

        /// The reset token of one of our IDs.
        pub fn resetToken(self: *const Self, cid: []const u8) stateless_reset.Token {
            return stateless_reset.token(&self.config.reset_key, cid);
        }
    };
}
