//! The connection IDs of one connection (RFC 9000 5.1), both directions.
//!
//! Ours: sequence 0 is the ID of the handshake; the owner (the worker, through the
//! endpoint, which draws each ID with the worker's index in it and routes it here) adds
//! spare IDs while `wantsCid` says so: as many as the peer's active_connection_id_limit,
//! `ours_max` at most. Each goes out in a NEW_CONNECTION_ID with its stateless reset token
//! (again when lost). The peer's RETIRE_CONNECTION_ID marks one retired; the owner takes it
//! out of the endpoint's table (`retiredCid`, `forgetCid`) and issues a replacement.
//!
//! The peer's: sequence 0 is the client's handshake ID; its NEW_CONNECTION_ID frames add
//! more, at most our active_connection_id_limit (`peer_max` bounds the storage) active at
//! once. Retire Prior To retires the older ones: each retired sequence is owed a
//! RETIRE_CONNECTION_ID until acknowledged (at most `retire_owed_max` at once), and when
//! the ID we send to is retired we move to the oldest one left.
//!
//! Every count is bounded by a constant: a peer sending frames without end fills a list
//! (and is closed with CONNECTION_ID_LIMIT_ERROR) or is ignored; nothing grows.
const std = @import("std");
const assert = std.debug.assert;

const connection = @import("connection.zig");
const Connection = connection.Connection;
const frames = @import("frames.zig");
const packet = @import("packet.zig");
const sent_frames = @import("sent_frames.zig");
const transport_params = @import("transport_params.zig");
const varint = @import("varint.zig");
const Cid = transport_params.Cid;
const TE = frames.TransportError;

pub const Token = [frames.stateless_reset_token_len]u8;

/// Our IDs a connection holds at once, retired ones not yet taken by the owner included
/// (the endpoint's `cids_per_connection_max`, checked where the two meet).
pub const ours_max = 4;
/// The peer's IDs we keep at once: our active_connection_id_limit is at most this.
pub const peer_max = 4;
/// RETIRE_CONNECTION_ID frames owed or unacknowledged at once (RFC 9000 5.1.2: twice the
/// active_connection_id_limit); one more is CONNECTION_ID_LIMIT_ERROR.
pub const retire_owed_max = 2 * peer_max;

pub const OurState = enum(u8) { owed, sent, retired };

pub const Ours = struct { seq: u64, cid: Cid, token: Token, state: OurState };
pub const Peers = struct { seq: u64, cid: Cid, token: Token };
pub const Retire = struct { seq: u64, sent: bool };

pub const State = struct {
    ours: [ours_max]Ours = undefined,
    ours_len: u8 = 0,
    /// The sequence number of our next ID.
    next_seq: u64 = 1,
    /// How many of our IDs the peer takes at once (its active_connection_id_limit, at most
    /// `ours_max`).
    peer_limit: u8 = transport_params.active_connection_id_limit_min,
    peers: [peer_max]Peers = undefined,
    peers_len: u8 = 0,
    /// The sequence number of the peer's ID we send to (`Connection.peer_cid`).
    peer_seq: u64 = 0,
    /// The largest Retire Prior To received: every sequence below it is retired.
    retire_prior_to: u64 = 0,
    retire: [retire_owed_max]Retire = undefined,
    retire_len: u8 = 0,
    /// While a packet's frames are applied: the destination ID it was sent to.
    packet_dcid: Cid = .{},
    /// The destination ID of the peer's newest 1-RTT packet: when it changes, the peer
    /// moved to another of our IDs, and we move to another of its (`onNewestPacket`).
    rx_dcid: Cid = .{},

    /// Sequence 0 of both sides: our handshake ID and the client's.
    pub fn init(ours: []const u8, our_token: ?Token, peer: []const u8) State {
        var s: State = .{};
        const token = our_token orelse [_]u8{0} ** 16;
        s.ours[0] = .{ .seq = 0, .cid = Cid.init(ours), .token = token, .state = .sent };
        s.ours_len = 1;
        s.rx_dcid = Cid.init(ours);
        if (peer.len > 0) {
            s.peers[0] = .{ .seq = 0, .cid = Cid.init(peer), .token = [_]u8{0} ** 16 };
            s.peers_len = 1;
        }
        return s;
    }

    /// Whether `dcid` is one of our IDs not retired.
    pub fn isOurs(s: *const State, dcid: []const u8) bool {
        for (s.ours[0..s.ours_len]) |*o| {
            if (o.state != .retired and std.mem.eql(u8, o.cid.slice(), dcid)) return true;
        }
        return false;
    }

    pub fn activeOurs(s: *const State) usize {
        var n: usize = 0;
        for (s.ours[0..s.ours_len]) |*o| n += @intFromBool(o.state != .retired);
        return n;
    }

    fn findRetire(s: *const State, seq: u64) ?usize {
        for (s.retire[0..s.retire_len], 0..) |r, i| if (r.seq == seq) return i;
        return null;
    }

    /// A RETIRE_CONNECTION_ID owed for `seq` (once); false when `retire_owed_max` are
    /// already owed or unacknowledged.
    fn oweRetire(s: *State, seq: u64) bool {
        if (s.findRetire(seq)) |i| {
            s.retire[i].sent = false;
            return true;
        }
        if (s.retire_len == retire_owed_max) return false;
        s.retire[s.retire_len] = .{ .seq = seq, .sent = false };
        s.retire_len += 1;
        return true;
    }
};

// ---- the owner's side: our IDs in the endpoint ---------------------------------------

/// Whether the connection takes one more ID of ours (`addCid`): established, fewer active
/// than the peer takes, and a slot free.
pub fn wantsCid(c: *const Connection) bool {
    const s = &c.cids;
    if (c.state != .established) return false;
    return s.ours_len < ours_max and s.activeOurs() < s.peer_limit;
}

/// One more ID of ours, routed to this connection by the owner: announced to the peer.
pub fn addCid(c: *Connection, cid: []const u8, token: Token) void {
    const s = &c.cids;
    assert(s.ours_len < ours_max and cid.len >= 1 and cid.len <= packet.cid_len_max);
    // 2^62 sequence numbers: never reached at one per RETIRE_CONNECTION_ID received.
    assert(s.next_seq < varint.max);
    const seq = s.next_seq;
    s.ours[s.ours_len] = .{ .seq = seq, .cid = Cid.init(cid), .token = token, .state = .owed };
    s.ours_len += 1;
    s.next_seq += 1;
}

/// One of our IDs the peer retired, for the owner to take out of the endpoint's table
/// (then `forgetCid`); null when none is.
pub fn retiredCid(c: *const Connection) ?Cid {
    const s = &c.cids;
    for (s.ours[0..s.ours_len]) |o| if (o.state == .retired) return o.cid;
    return null;
}

/// The owner took a retired ID out of its table: its slot is free.
pub fn forgetCid(c: *Connection, cid: []const u8) void {
    const s = &c.cids;
    for (s.ours[0..s.ours_len], 0..) |o, i| {
        if (o.state != .retired or !std.mem.eql(u8, o.cid.slice(), cid)) continue;
        s.ours[i] = s.ours[s.ours_len - 1];
        s.ours_len -= 1;
        return;
    }
    unreachable; // only a retired ID is forgotten
}

// ---- frames received -------------------------------------------------------------------

pub const Error = error{Closed};

fn fail(c: *Connection, code: TE, frame_type: u64) Error {
    c.closeTransport(@intFromEnum(code), frame_type, "");
    return error.Closed;
}

pub const NewCid = @FieldType(frames.Frame, "new_connection_id");

/// The peer's NEW_CONNECTION_ID (RFC 9000 19.15, 5.1.1, 5.1.2). The frame parser already
/// refused an empty or too long ID and a Retire Prior To past the sequence number
/// (FRAME_ENCODING_ERROR).
pub fn onNewConnectionId(c: *Connection, f: NewCid, frame_type: u64) Error!void {
    const s = &c.cids;
    assert(f.retire_prior_to <= f.seq and f.cid.len >= 1 and f.cid.len <= packet.cid_len_max);
    // A peer that gave an empty ID sends without one: it has no IDs to issue.
    if (c.peer_cid.len == 0) return fail(c, .protocol_violation, frame_type);
    for (s.peers[0..s.peers_len]) |*p| {
        const same_seq = p.seq == f.seq;
        const same_cid = std.mem.eql(u8, p.cid.slice(), f.cid);
        if (same_seq and same_cid and std.mem.eql(u8, &p.token, f.reset_token)) return; // a copy
        if (same_seq or same_cid) return fail(c, .protocol_violation, frame_type);
    }
    // Already retired (below a Retire Prior To seen before): retired again, not kept.
    if (f.seq < s.retire_prior_to) {
        if (!s.oweRetire(f.seq)) return fail(c, .connection_id_limit_error, frame_type);
        return;
    }
    if (f.retire_prior_to > s.retire_prior_to) {
        s.retire_prior_to = f.retire_prior_to;
        var i: usize = 0;
        while (i < s.peers_len) {
            if (s.peers[i].seq >= s.retire_prior_to) {
                i += 1;
                continue;
            }
            if (!s.oweRetire(s.peers[i].seq))
                return fail(c, .connection_id_limit_error, frame_type);
            s.peers[i] = s.peers[s.peers_len - 1];
            s.peers_len -= 1;
        }
    }
    // Our limit counts the IDs active once this one is added and the old ones retired.
    const limit = c.config.active_connection_id_limit;
    assert(limit <= peer_max);
    if (s.peers_len >= limit) return fail(c, .connection_id_limit_error, frame_type);
    s.peers[s.peers_len] = .{ .seq = f.seq, .cid = Cid.init(f.cid), .token = f.reset_token.* };
    s.peers_len += 1;
    if (s.peer_seq < s.retire_prior_to) usePeerCid(c);
}

/// The ID we send to was retired: the oldest one left takes its place (one is: the frame
/// that retired it added one at or past its Retire Prior To).
fn usePeerCid(c: *Connection) void {
    const s = &c.cids;
    assert(s.peers_len > 0);
    var best: usize = 0;
    for (s.peers[0..s.peers_len], 0..) |p, i| if (p.seq < s.peers[best].seq) {
        best = i;
    };
    s.peer_seq = s.peers[best].seq;
    c.peer_cid = s.peers[best].cid;
}

/// The peer's newest 1-RTT packet so far was sent to `dcid`. When that is another of our
/// IDs than before, the peer changed IDs (a deliberate migration does, RFC 9000 9.5): we
/// move to the next of its IDs and retire the one we left, so that no ID of either side is
/// seen on two paths. With no other ID of the peer's, or no room for one more RETIRE owed,
/// we stay on the one we have.
pub fn onNewestPacket(c: *Connection, dcid: []const u8) void {
    const s = &c.cids;
    if (std.mem.eql(u8, s.rx_dcid.slice(), dcid)) return;
    s.rx_dcid = Cid.init(dcid);
    var next: ?Peers = null;
    for (s.peers[0..s.peers_len]) |p| if (p.seq > s.peer_seq) {
        if (next == null or p.seq < next.?.seq) next = p;
    };
    const to = next orelse return;
    if (!s.oweRetire(s.peer_seq)) return;
    for (s.peers[0..s.peers_len], 0..) |p, i| if (p.seq == s.peer_seq) {
        s.peers[i] = s.peers[s.peers_len - 1];
        s.peers_len -= 1;
        break;
    };
    s.peer_seq = to.seq;
    c.peer_cid = to.cid;
}

/// The peer's RETIRE_CONNECTION_ID (RFC 9000 19.16): one of ours it will not use again.
pub fn onRetireConnectionId(c: *Connection, seq: u64, frame_type: u64) Error!void {
    const s = &c.cids;
    if (seq >= s.next_seq) return fail(c, .protocol_violation, frame_type); // never issued
    for (s.ours[0..s.ours_len]) |*o| {
        if (o.seq != seq or o.state == .retired) continue;
        // The packet carrying it was sent to it: retiring it is a PROTOCOL_VIOLATION.
        if (std.mem.eql(u8, o.cid.slice(), s.packet_dcid.slice()))
            return fail(c, .protocol_violation, frame_type);
        o.state = .retired;
        return;
    }
    // Retired before: a copy.
}

// ---- frames sent -----------------------------------------------------------------------

/// The owed NEW_CONNECTION_ID and RETIRE_CONNECTION_ID frames that fit, each recorded
/// (one record stays free for the packet's ACK, as `conn_send` keeps it).
pub fn writeFrames(c: *Connection, w: *varint.Writer, p: *sent_frames.Packet) void {
    const s = &c.cids;
    for (s.ours[0..s.ours_len]) |*o| {
        if (o.state != .owed or !recordRoom(p)) continue;
        const f: NewCid = .{
            .seq = o.seq,
            .retire_prior_to = 0,
            .cid = o.cid.slice(),
            .reset_token = &o.token,
        };
        frames.write(w, .{ .new_connection_id = f }) catch return;
        o.state = .sent;
        p.add(.{ .new_connection_id = o.seq });
    }
    for (s.retire[0..s.retire_len]) |*r| {
        if (r.sent or !recordRoom(p)) continue;
        frames.write(w, .{ .retire_connection_id = r.seq }) catch return;
        r.sent = true;
        p.add(.{ .retire_connection_id = r.seq });
    }
}

fn recordRoom(p: *const sent_frames.Packet) bool {
    return p.count + 1 < sent_frames.records_per_packet;
}

/// A NEW_CONNECTION_ID of ours was lost: owed again while the ID is not retired.
pub fn onNewCidLost(c: *Connection, seq: u64) void {
    for (c.cids.ours[0..c.cids.ours_len]) |*o| if (o.seq == seq and o.state == .sent) {
        o.state = .owed;
    };
}

pub fn onRetireLost(c: *Connection, seq: u64) void {
    const s = &c.cids;
    if (s.findRetire(seq)) |i| s.retire[i].sent = false;
}

/// A RETIRE_CONNECTION_ID arrived: nothing is owed for that sequence any more.
pub fn onRetireAcked(c: *Connection, seq: u64) void {
    const s = &c.cids;
    const i = s.findRetire(seq) orelse return;
    s.retire[i] = s.retire[s.retire_len - 1];
    s.retire_len -= 1;
}
