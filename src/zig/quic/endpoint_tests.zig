//! The endpoint's tests, with a fake connection type that records what reaches it: routing,
//! Version Negotiation, Retry and its tokens, stateless resets, the bounds under a flood.
const std = @import("std");
const testing = std.testing;
const linux = std.os.linux;
const endpoint = @import("endpoint.zig");
const packet = @import("packet.zig");
const stateless_reset = @import("stateless_reset.zig");
const retry_token = @import("retry_token.zig");
const new_token = @import("new_token.zig");
const Peer = @import("../transport/peer.zig").Peer;
const udp_steering = @import("../transport/udp_steering.zig");
const protection = @import("protection.zig");
const frames = @import("frames.zig");

/// Where the fake connections live: a fixed pool, so a test sees every one ever made.
const Pool = struct {
    conns: [256]Fake = undefined,
    made: usize = 0,
    refuse: bool = false,
};

const Fake = struct {
    pub const Context = *Pool;
    endpoint_link: endpoint.Link = .{},
    accept: endpoint.Accept,
    received: usize = 0,
    last_len: usize = 0,

    pub fn open(pool: *Pool, accept: *const endpoint.Accept) ?*Fake {
        if (pool.refuse or pool.made == pool.conns.len) return null;
        const c = &pool.conns[pool.made];
        c.* = .{ .accept = accept.* };
        pool.made += 1;
        return c;
    }

    pub fn receive(self: *Fake, datagram: []const u8, path: *const endpoint.Path, ecn: u2, now_us: u64) void {
        _ = ecn;
        _ = path;
        _ = now_us;
        self.received += 1;
        self.last_len = datagram.len;
    }
};

const E = endpoint.Endpoint(Fake);
const worker: u8 = 3;

fn config(retry: endpoint.RetryMode) endpoint.Config {
    return .{
        .worker_index = worker,
        .seed = [_]u8{0x5e} ** 32,
        .table_key = [_]u8{0x7a} ** 16,
        .retry_key = [_]u8{0x4b} ** 32,
        .reset_key = [_]u8{0x2c} ** 32,
        .retry = retry,
        .retry_handshakes_min = 2,
        .connections_max = 8,
        .handshakes_max = 4,
        .resets_per_interval_max = 3,
        .reset_interval_us = 1000,
    };
}

pub fn peer4(last: u8, port: u16) Peer {
    var p: Peer = .{ .family = linux.AF.INET, .port = port, .addr = [_]u8{0} ** 16 };
    p.addr[0..4].* = .{ 198, 51, 100, last };
    return p;
}

pub const local = peer4(1, 443);

/// A client Initial of `total` bytes (the payload is noise: the endpoint does not open it).
fn initial(buf: []u8, dcid: []const u8, scid: []const u8, token: []const u8, total: usize) []const u8 {
    const h = packet.writeLongHeader(buf, .{ .long_type = .initial, .dcid = dcid, .scid = scid, .token = token, .pn = 0, .pn_len = 4 }, total - headerLen(dcid, scid, token) - 4, 0) catch unreachable;
    @memset(buf[h.header_len..total], 0xee);
    return buf[0..total];
}

fn headerLen(dcid: []const u8, scid: []const u8, token: []const u8) usize {
    // first byte, version, two ID lengths, the IDs, the token's varint and bytes, a 2-byte Length
    return 1 + 4 + 1 + dcid.len + 1 + scid.len + varintLen(token.len) + token.len + 2;
}

fn varintLen(v: usize) usize {
    return if (v < 64) 1 else if (v < 16384) 2 else 4;
}

fn shortHeader(buf: []u8, dcid: []const u8, total: usize) []const u8 {
    buf[0] = 0x41;
    @memcpy(buf[1..][0..dcid.len], dcid);
    @memset(buf[1 + dcid.len .. total], 0x33);
    return buf[0..total];
}

pub const Fixture = struct {
    pool: Pool = .{},
    out: endpoint.OutQueue = .{},
    ep: E = undefined,

    pub fn init(self: *Fixture, retry: endpoint.RetryMode) !void {
        self.* = .{};
        self.ep = try E.init(testing.allocator, config(retry), &self.pool);
    }

    pub fn deinit(self: *Fixture) void {
        self.ep.deinit(testing.allocator);
    }

    pub fn take(self: *Fixture) ?[]const u8 {
        const a = self.out.peek() orelse return null;
        self.out.pop();
        return a.slice();
    }
};

test "endpoint: an Initial makes a connection; its IDs route everything after to it" {
    var f: Fixture = undefined;
    try f.init(.never);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    const d = initial(&buf, "client-dcid-1", "cs", "", 1200);
    try testing.expectEqual(endpoint.Outcome.accepted, f.ep.onDatagram(d, peer4(9, 5000), local, 0, 10, &f.out));
    try testing.expectEqual(@as(usize, 1), f.pool.made);
    const c = &f.pool.conns[0];
    try testing.expectEqual(@as(usize, 1), c.received);
    try testing.expectEqual(@as(usize, endpoint.cid_len), c.accept.scid.len);
    try testing.expectEqual(worker, c.accept.scid.bytes[udp_steering.cid_worker_offset]);
    try testing.expectEqualStrings("client-dcid-1", c.accept.original_dcid.slice());
    try testing.expectEqualStrings("cs", c.accept.client_scid.slice());
    try testing.expect(c.accept.retry_scid == null and !c.accept.address_validated);
    try testing.expectEqualSlices(u8, &f.ep.resetToken(c.accept.scid.slice()), &c.accept.reset_token);
    // The client resends its Initial (same DCID), from another port even: the same connection.
    try testing.expectEqual(endpoint.Outcome.routed, f.ep.onDatagram(d, peer4(9, 5001), local, 0, 20, &f.out));
    // Short and long headers to our ID.
    try testing.expectEqual(endpoint.Outcome.routed, f.ep.onDatagram(shortHeader(&buf, c.accept.scid.slice(), 50), peer4(9, 5000), local, 0, 30, &f.out));
    var hs: [64]u8 = undefined;
    const built = try packet.writeLongHeader(&hs, .{ .long_type = .handshake, .dcid = c.accept.scid.slice(), .scid = "cs", .pn = 1, .pn_len = 1 }, 20, 16);
    const hs_len = built.header_len + 20 + 16;
    try testing.expectEqual(endpoint.Outcome.routed, f.ep.onDatagram(hs[0..hs_len], peer4(9, 5000), local, 0, 40, &f.out));
    try testing.expectEqual(@as(usize, 4), c.received);
    try testing.expectEqual(@as(usize, 1), f.pool.made);
    // 0-RTT and Handshake for IDs we do not know: dropped, nothing made or answered.
    hs[6] ^= 0xff;
    try testing.expectEqual(endpoint.Outcome.dropped_unknown, f.ep.onDatagram(hs[0..hs_len], peer4(9, 5000), local, 0, 50, &f.out));
    try testing.expectEqual(@as(?[]const u8, null), f.take());
    try testing.expectEqual(@as(u32, 1), f.ep.connections);
    try testing.expectEqual(@as(u32, 1), f.ep.handshakes);
}

test "endpoint: further IDs, retired IDs, a confirmed handshake, a removed connection" {
    var f: Fixture = undefined;
    try f.init(.never);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    _ = f.ep.onDatagram(initial(&buf, "client-dcid-2", "", "", 1300), peer4(9, 5000), local, 0, 10, &f.out);
    const c = &f.pool.conns[0];
    var ids: [endpoint.cids_per_connection_max]endpoint.Cid = undefined;
    ids[0] = c.accept.scid;
    for (1..endpoint.cids_per_connection_max) |i| {
        const issued = f.ep.issueCid(c).?;
        try testing.expectEqual(worker, issued.cid.bytes[udp_steering.cid_worker_offset]);
        try testing.expectEqualSlices(u8, &f.ep.resetToken(issued.cid.slice()), &issued.reset_token);
        ids[i] = issued.cid;
    }
    try testing.expectEqual(@as(?E.Issued, null), f.ep.issueCid(c));
    for (&ids) |*id| try testing.expectEqual(endpoint.Outcome.routed, f.ep.onDatagram(shortHeader(&buf, id.slice(), 40), peer4(9, 5000), local, 0, 20, &f.out));
    try testing.expect(f.ep.retireCid(c, ids[1].slice()));
    try testing.expect(!f.ep.retireCid(c, ids[1].slice()));
    try testing.expectEqual(endpoint.Outcome.stateless_reset, f.ep.onDatagram(shortHeader(&buf, ids[1].slice(), 40), peer4(9, 5000), local, 0, 20, &f.out));
    // Confirmed: the client's first DCID no longer routes; the handshake no longer counts.
    f.ep.handshakeConfirmed(c);
    try testing.expectEqual(@as(u32, 0), f.ep.handshakes);
    try testing.expectEqual(endpoint.Outcome.accepted, f.ep.onDatagram(initial(&buf, "client-dcid-2", "", "", 1300), peer4(9, 5000), local, 0, 30, &f.out));
    try testing.expectEqual(@as(usize, 2), f.pool.made);
    f.ep.remove(c);
    f.ep.remove(&f.pool.conns[1]);
    try testing.expectEqual(@as(u32, 0), f.ep.connections);
    try testing.expectEqual(@as(u32, 0), f.ep.handshakes);
    try testing.expectEqual(@as(usize, 0), f.ep.table.used);
    // Gone: its first ID now earns a reset like any unknown one.
    try testing.expectEqual(endpoint.Outcome.stateless_reset, f.ep.onDatagram(shortHeader(&buf, ids[0].slice(), 40), peer4(9, 5000), local, 0, 21, &f.out));
}

test "endpoint: every spare ID, replacements too, is steered to its worker among 4 and routed" {
    var f: Fixture = undefined;
    try f.init(.never);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    const first = initial(&buf, "client-dcid-3", "cs", "", 1200);
    _ = f.ep.onDatagram(first, peer4(9, 5000), local, 0, 10, &f.out);
    const c = &f.pool.conns[0];
    f.ep.handshakeConfirmed(c);
    var current = c.accept.scid;
    // The client moves to a fresh ID 50 times, from a new port each time, retiring the
    // one it left: the replacement is always steered to worker 3 of 4 and reaches `c`.
    for (0..50) |i| {
        const issued = f.ep.issueCid(c).?;
        const d = shortHeader(&buf, issued.cid.slice(), 40);
        try testing.expectEqual(@as(u32, worker), udp_steering.workerOf(d, 4));
        const before = c.received;
        const port: u16 = @intCast(6000 + i);
        const outcome = f.ep.onDatagram(d, peer4(9, port), local, 0, 20, &f.out);
        try testing.expectEqual(endpoint.Outcome.routed, outcome);
        try testing.expectEqual(before + 1, c.received);
        try testing.expect(f.ep.retireCid(c, current.slice()));
        current = issued.cid;
    }
    try testing.expectEqual(@as(u8, 1), c.endpoint_link.cids_len);
    try testing.expectEqual(@as(usize, 1), f.ep.table.used);
    // The last ID is never retired: the connection stays reachable.
    try testing.expect(!f.ep.retireCid(c, current.slice()));
}

/// The transport side of `syncCids`, as `quic/conn_cids.zig` keeps it: IDs with a retired
/// mark, as many active as the peer takes.
const FakeIds = struct {
    ids: [endpoint.cids_per_connection_max]endpoint.Cid = undefined,
    retired: [endpoint.cids_per_connection_max]bool = undefined,
    len: usize = 0,
    peer_limit: usize = 4,

    fn active(q: *const FakeIds) usize {
        var n: usize = 0;
        for (q.retired[0..q.len]) |r| n += @intFromBool(!r);
        return n;
    }
    pub fn wantsCid(q: *const FakeIds) bool {
        return q.len < q.ids.len and q.active() < q.peer_limit;
    }
    pub fn addCid(q: *FakeIds, cid: []const u8, token: stateless_reset.Token) void {
        _ = token;
        q.ids[q.len] = endpoint.Cid.from(cid);
        q.retired[q.len] = false;
        q.len += 1;
    }
    pub fn retiredCid(q: *const FakeIds) ?endpoint.Cid {
        for (q.ids[0..q.len], q.retired[0..q.len]) |id, r| if (r) return id;
        return null;
    }
    pub fn forgetCid(q: *FakeIds, cid: []const u8) void {
        for (q.ids[0..q.len], 0..) |*id, i| if (std.mem.eql(u8, id.slice(), cid)) {
            q.ids[i] = q.ids[q.len - 1];
            q.retired[i] = q.retired[q.len - 1];
            q.len -= 1;
            return;
        };
        unreachable;
    }
};

test "endpoint: syncCids issues up to the peer's limit, replaces retired IDs, all 4 at once too" {
    var f: Fixture = undefined;
    try f.init(.never);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    const first = initial(&buf, "client-dcid-4", "cs", "", 1200);
    _ = f.ep.onDatagram(first, peer4(9, 5000), local, 0, 10, &f.out);
    const c = &f.pool.conns[0];
    f.ep.handshakeConfirmed(c);
    for ([_]usize{ 2, 3, 4 }) |limit| {
        var q: FakeIds = .{ .peer_limit = limit };
        q.addCid(c.accept.scid.slice(), undefined);
        f.ep.syncCids(c, &q);
        try testing.expectEqual(limit, q.len);
        try testing.expectEqual(@as(u8, @intCast(limit)), c.endpoint_link.cids_len);
        // Back to the handshake's ID alone, for the next limit.
        for (1..limit) |i| q.retired[i] = true;
        q.peer_limit = 1;
        f.ep.syncCids(c, &q);
        try testing.expectEqual(@as(usize, 1), q.len);
    }
    var q: FakeIds = .{};
    q.addCid(c.accept.scid.slice(), undefined);
    f.ep.syncCids(c, &q);
    // The peer retires every ID at once: 4 new ones route, none of the old.
    var old: [4]endpoint.Cid = undefined;
    @memcpy(&old, &q.ids);
    @memset(&q.retired, true);
    f.ep.syncCids(c, &q);
    try testing.expectEqual(@as(usize, 4), q.len);
    try testing.expectEqual(@as(usize, 4), q.active());
    try testing.expectEqual(@as(u8, 4), c.endpoint_link.cids_len);
    for (&old) |*id| try testing.expect(!f.ep.table.contains(id.slice()));
    for (&q.ids) |*id| try testing.expect(f.ep.table.get(id.slice()).? == c);
}

test "endpoint: Version Negotiation for an unknown version, never for a short datagram or VN" {
    var f: Fixture = undefined;
    try f.init(.never);
    defer f.deinit();
    var buf = [_]u8{0} ** 1200;
    const hdr = [_]u8{ 0xc0, 0x1a, 0x2a, 0x3a, 0x4a, 8, 1, 2, 3, 4, 5, 6, 7, 8, 3, 's', 'r', 'c' };
    @memcpy(buf[0..hdr.len], &hdr);
    try testing.expectEqual(endpoint.Outcome.version_negotiation, f.ep.onDatagram(&buf, peer4(9, 7), local, 0, 1, &f.out));
    const a = f.out.peek().?;
    try testing.expectEqual(peer4(9, 7).port, a.path.peer.port);
    try testing.expectEqualSlices(u8, local.addr[0..4], a.path.local.addr[0..4]);
    const vn = f.take().?;
    const h = try packet.parse(vn, 0);
    try testing.expectEqual(packet.Kind.version_negotiation, h.kind);
    try testing.expectEqualStrings("src", h.dcid);
    try testing.expectEqualSlices(u8, hdr[6..14], h.scid);
    var it = packet.negotiatedVersions(vn, &h);
    try testing.expectEqual(@as(?u32, packet.version_1), it.next());
    try testing.expectEqual(@as(u32, 0x0a0a0a0a), it.next().? & 0x0f0f0f0f);
    try testing.expectEqual(@as(?u32, null), it.next());
    try testing.expectEqual(endpoint.Outcome.dropped_version, f.ep.onDatagram(buf[0..1199], peer4(9, 7), local, 0, 1, &f.out));
    try testing.expectEqual(endpoint.Outcome.dropped_unknown, f.ep.onDatagram(vn, peer4(9, 7), local, 0, 1, &f.out));
    try testing.expectEqual(@as(?[]const u8, null), f.take());
    try testing.expectEqual(@as(usize, 0), f.pool.made);
    // Garbage: a long header cut short, a fixed bit of 0.
    try testing.expectEqual(endpoint.Outcome.dropped_malformed, f.ep.onDatagram(buf[0..4], peer4(9, 7), local, 0, 1, &f.out));
    try testing.expectEqual(endpoint.Outcome.dropped_malformed, f.ep.onDatagram(&.{ 0x01, 2, 3 }, peer4(9, 7), local, 0, 1, &f.out));
    try testing.expectEqual(endpoint.Outcome.dropped_malformed, f.ep.onDatagram(&.{}, peer4(9, 7), local, 0, 1, &f.out));
}

test "endpoint: Initials too short, or with a DCID under 8 bytes, are dropped" {
    var f: Fixture = undefined;
    try f.init(.never);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    try testing.expectEqual(endpoint.Outcome.dropped_initial_too_short, f.ep.onDatagram(initial(&buf, "client-dcid", "", "", 1199), peer4(9, 1), local, 0, 1, &f.out));
    try testing.expectEqual(endpoint.Outcome.dropped_initial_too_short, f.ep.onDatagram(initial(&buf, "7bytes!", "", "", 1200), peer4(9, 1), local, 0, 1, &f.out));
    try testing.expectEqual(endpoint.Outcome.accepted, f.ep.onDatagram(initial(&buf, "8bytes!!", "", "", 1200), peer4(9, 1), local, 0, 1, &f.out));
    f.pool.refuse = true;
    try testing.expectEqual(endpoint.Outcome.dropped_open_failed, f.ep.onDatagram(initial(&buf, "8bytes!?", "", "", 1200), peer4(9, 1), local, 0, 1, &f.out));
    try testing.expectEqual(@as(u32, 1), f.ep.connections);
    try testing.expectEqual(@as(usize, 2), f.ep.table.used);
}

/// Sends an Initial that earns a Retry; returns the token and the Retry's source ID.
fn getRetry(f: *Fixture, buf: []u8, odcid: []const u8, from: Peer, now_us: u64, token: *[retry_token.len]u8) !endpoint.Cid {
    try testing.expectEqual(endpoint.Outcome.retry, f.ep.onDatagram(initial(buf, odcid, "client-scid", "", 1200), from, local, 0, now_us, &f.out));
    const r = f.take().?;
    try testing.expect(packet.retryTagValid(odcid, r));
    const h = try packet.parse(r, 0);
    try testing.expectEqual(packet.Kind.retry, h.kind);
    try testing.expectEqualStrings("client-scid", h.dcid);
    try testing.expectEqual(@as(usize, endpoint.cid_len), h.scid.len);
    try testing.expectEqual(worker, h.scid[udp_steering.cid_worker_offset]);
    try testing.expectEqual(retry_token.len, h.token.len);
    token.* = h.token[0..retry_token.len].*;
    return endpoint.Cid.from(h.scid);
}

test "endpoint: Retry always, and the token's round trip gives the original DCID" {
    var f: Fixture = undefined;
    try f.init(.always);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    var tok: [retry_token.len]u8 = undefined;
    const client = peer4(20, 6000);
    const rscid = try getRetry(&f, &buf, "first-dcid", client, 1000, &tok);
    try testing.expectEqual(@as(usize, 0), f.pool.made); // a Retry keeps nothing
    try testing.expectEqual(endpoint.Outcome.accepted, f.ep.onDatagram(initial(&buf, rscid.slice(), "client-scid", &tok, 1200), client, local, 0, 2000, &f.out));
    const c = &f.pool.conns[0];
    try testing.expect(c.accept.address_validated);
    try testing.expectEqualStrings("first-dcid", c.accept.original_dcid.slice());
    try testing.expectEqualSlices(u8, rscid.slice(), c.accept.retry_scid.?.slice());
    try testing.expectEqualSlices(u8, rscid.slice(), c.accept.client_dcid.slice());
    try testing.expect(!std.mem.eql(u8, rscid.slice(), c.accept.scid.slice()));
}

test "endpoint: a token from another address, expired, tampered or for another ID is refused" {
    var f: Fixture = undefined;
    try f.init(.always);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    var tok: [retry_token.len]u8 = undefined;
    const client = peer4(20, 6000);
    const rscid = try getRetry(&f, &buf, "first-dcid", client, 1000, &tok);
    const refused = endpoint.Outcome.dropped_invalid_token;
    try testing.expectEqual(refused, f.ep.onDatagram(initial(&buf, rscid.slice(), "cs", &tok, 1200), peer4(21, 6000), local, 0, 2000, &f.out));
    try testing.expectEqual(refused, f.ep.onDatagram(initial(&buf, rscid.slice(), "cs", &tok, 1200), peer4(20, 6001), local, 0, 2000, &f.out));
    const late = 1000 + retry_token.lifetime_us_default + 1;
    try testing.expectEqual(refused, f.ep.onDatagram(initial(&buf, rscid.slice(), "cs", &tok, 1200), client, local, 0, late, &f.out));
    try testing.expectEqual(refused, f.ep.onDatagram(initial(&buf, "another-dcid", "cs", &tok, 1200), client, local, 0, 2000, &f.out));
    for (1..tok.len) |i| {
        var bad = tok;
        bad[i] ^= 0x80;
        try testing.expectEqual(refused, f.ep.onDatagram(initial(&buf, rscid.slice(), "cs", &bad, 1200), client, local, 0, 2000, &f.out));
    }
    // A token that is not ours (another marker) counts as none: a fresh Retry.
    var other = tok;
    other[0] ^= 1;
    try testing.expectEqual(endpoint.Outcome.retry, f.ep.onDatagram(initial(&buf, rscid.slice(), "cs", &other, 1200), client, local, 0, 2000, &f.out));
    try testing.expectEqual(@as(usize, 0), f.pool.made);
    // The right one, at the edge of its lifetime.
    try testing.expectEqual(endpoint.Outcome.accepted, f.ep.onDatagram(initial(&buf, rscid.slice(), "cs", &tok, 1200), client, local, 0, late - 1, &f.out));
}

test "endpoint: a NEW_TOKEN token validates a returning client without a Retry; a bad one is none" {
    var f: Fixture = undefined;
    try f.init(.always);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    var tok: [new_token.len]u8 = undefined;
    const client = peer4(30, 7000);
    try testing.expect(f.ep.newToken(&client, 1000, &tok));
    // Another address, a changed byte, past its lifetime: as good as none, so a Retry.
    const retry = endpoint.Outcome.retry;
    const other = peer4(31, 7000);
    var d = initial(&buf, "next-dcid", "cs", &tok, 1200);
    try testing.expectEqual(retry, f.ep.onDatagram(d, other, local, 0, 2000, &f.out));
    var bad = tok;
    bad[new_token.len - 1] ^= 1;
    d = initial(&buf, "next-dcid", "cs", &bad, 1200);
    try testing.expectEqual(retry, f.ep.onDatagram(d, client, local, 0, 2000, &f.out));
    const late = 1000 + new_token.lifetime_us_default + 1;
    d = initial(&buf, "next-dcid", "cs", &tok, 1200);
    try testing.expectEqual(retry, f.ep.onDatagram(d, client, local, 0, late, &f.out));
    try testing.expectEqual(@as(usize, 0), f.pool.made);
    try testing.expectEqual(@as(u64, 0), f.ep.tokens_accepted);
    // From its address (another port: the next connection's), within its lifetime: accepted
    // at once, validated, no Retry in its transport parameters.
    d = initial(&buf, "next-dcid", "cs", &tok, 1200);
    const accepted = endpoint.Outcome.accepted;
    try testing.expectEqual(accepted, f.ep.onDatagram(d, peer4(30, 7001), local, 0, late - 1, &f.out));
    const c = &f.pool.conns[0];
    try testing.expect(c.accept.address_validated and c.accept.retry_scid == null);
    try testing.expectEqualStrings("next-dcid", c.accept.original_dcid.slice());
    try testing.expectEqual(@as(u64, 1), f.ep.tokens_accepted);
    // Tokens off: none is made, and one brought back is not honoured.
    f.ep.config.new_token_lifetime_us = 0;
    try testing.expect(!f.ep.newToken(&client, 1000, &tok));
    d = initial(&buf, "third-dcid", "cs", &tok, 1200);
    try testing.expectEqual(retry, f.ep.onDatagram(d, client, local, 0, 2000, &f.out));
}

test "endpoint: Retry auto starts once enough handshakes are in progress" {
    var f: Fixture = undefined;
    try f.init(.auto);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    var dcid = "client-dcid-0".*;
    for (0..2) |i| {
        dcid[12] = @intCast('0' + i);
        try testing.expectEqual(endpoint.Outcome.accepted, f.ep.onDatagram(initial(&buf, &dcid, "", "", 1200), peer4(30, 1), local, 0, 1, &f.out));
    }
    dcid[12] = 'x';
    try testing.expectEqual(endpoint.Outcome.retry, f.ep.onDatagram(initial(&buf, &dcid, "", "", 1200), peer4(30, 1), local, 0, 1, &f.out));
    f.ep.handshakeConfirmed(&f.pool.conns[0]);
    try testing.expectEqual(endpoint.Outcome.accepted, f.ep.onDatagram(initial(&buf, &dcid, "", "", 1200), peer4(30, 1), local, 0, 1, &f.out));
}

test "endpoint: draining, a new client's Initial gets CONNECTION_REFUSED; its connections still route" {
    var f: Fixture = undefined;
    try f.init(.always);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    // A connection made before the drain (with a Retry token: .always).
    const d0 = initial(&buf, "client-dcid-0", "c0", "", 1200);
    try testing.expectEqual(endpoint.Outcome.retry, f.ep.onDatagram(d0, peer4(9, 5000), local, 0, 10, &f.out));
    _ = f.take().?;
    f.ep.config.retry = .never;
    try testing.expectEqual(endpoint.Outcome.accepted, f.ep.onDatagram(d0, peer4(9, 5000), local, 0, 10, &f.out));
    const c = &f.pool.conns[0];
    f.ep.refuseNew(null);
    // Its datagrams still reach it.
    try testing.expectEqual(endpoint.Outcome.routed, f.ep.onDatagram(d0, peer4(9, 5000), local, 0, 20, &f.out));
    try testing.expectEqual(endpoint.Outcome.routed, f.ep.onDatagram(shortHeader(&buf, c.accept.scid.slice(), 60), peer4(9, 5000), local, 0, 20, &f.out));
    try testing.expectEqual(@as(usize, 3), c.received);
    // A new client: refused, nothing made.
    const d1 = initial(&buf, "client-dcid-1", "new-client", "", 1200);
    try testing.expectEqual(endpoint.Outcome.refused, f.ep.onDatagram(d1, peer4(10, 6000), local, 0, 30, &f.out));
    try testing.expectEqual(@as(usize, 1), f.pool.made);
    try testing.expectEqual(@as(u32, 1), f.ep.connections);
    const a = f.out.peek().?;
    try testing.expectEqual(@as(u16, 6000), a.path.peer.port);
    var answer: [endpoint.answer_len_max]u8 = undefined;
    const bytes = answer[0..a.len];
    @memcpy(bytes, a.slice());
    f.out.pop();
    try testing.expect(bytes.len < 100);
    // What the client sees: a server Initial to its SCID, opened with its DCID's keys.
    const h = try packet.parse(bytes, endpoint.cid_len);
    try testing.expectEqual(packet.Kind.initial, h.kind);
    try testing.expectEqualStrings("new-client", h.dcid);
    try testing.expectEqual(h.len, bytes.len);
    const keys = protection.initialKeys("client-dcid-1");
    const opened = try protection.unprotect(&keys.server, bytes[0..h.len], h.pn_offset, null);
    try testing.expectEqual(@as(u64, 0), opened.header.pn);
    var it = frames.Iterator.init(opened.payload, .initial, .server);
    const fr = (try it.next()).?;
    try testing.expectEqual(@as(u64, 0x02), fr.connection_close.error_code);
    try testing.expect(!fr.connection_close.application);
    try testing.expect((try it.next()) == null);
    // Too short an Initial is still dropped unanswered; a Retry token changes nothing.
    try testing.expectEqual(endpoint.Outcome.dropped_initial_too_short, f.ep.onDatagram(initial(&buf, "client-dcid-2", "x", "", 1100), peer4(10, 6001), local, 0, 40, &f.out));
    // The refusals share the resets' rate bound (3 per interval in this config).
    try testing.expectEqual(endpoint.Outcome.refused, f.ep.onDatagram(initial(&buf, "client-dcid-3", "x", "", 1200), peer4(10, 6002), local, 0, 40, &f.out));
    try testing.expectEqual(endpoint.Outcome.refused, f.ep.onDatagram(initial(&buf, "client-dcid-4", "x", "", 1200), peer4(10, 6003), local, 0, 40, &f.out));
    try testing.expectEqual(endpoint.Outcome.dropped_refused, f.ep.onDatagram(initial(&buf, "client-dcid-5", "x", "", 1200), peer4(10, 6004), local, 0, 40, &f.out));
    try testing.expectEqual(endpoint.Outcome.refused, f.ep.onDatagram(initial(&buf, "client-dcid-5", "x", "", 1200), peer4(10, 6004), local, 0, 2000, &f.out));
    try testing.expectEqual(@as(usize, 1), f.pool.made);
}

test "endpoint: a worker retiring beside others sends a new client to the next by a Retry" {
    var f: Fixture = undefined;
    try f.init(.never);
    defer f.deinit();
    var g: Fixture = undefined; // the worker that serves on (index 5), with the shared keys
    try g.init(.never);
    defer g.deinit();
    g.ep.config.worker_index = 5;
    g.ep.csprng = std.Random.DefaultCsprng.init([_]u8{0x77} ** 32);
    f.ep.refuseNew(5);
    var buf: [1500]u8 = undefined;
    const client = peer4(30, 7000);
    try testing.expectEqual(endpoint.Outcome.retry, f.ep.onDatagram(initial(&buf, "first-dcid", "client-scid", "", 1200), client, local, 0, 1000, &f.out));
    const r = f.take().?;
    try testing.expect(packet.retryTagValid("first-dcid", r));
    const h = try packet.parse(r, 0);
    try testing.expectEqual(@as(u8, 5), h.scid[udp_steering.cid_worker_offset]);
    var tok: [retry_token.len]u8 = undefined;
    tok = h.token[0..retry_token.len].*;
    const rscid = endpoint.Cid.from(h.scid);
    try testing.expectEqual(@as(usize, 0), f.pool.made);
    // The next worker honours the token: a validated connection, original DCID kept.
    try testing.expectEqual(endpoint.Outcome.accepted, g.ep.onDatagram(initial(&buf, rscid.slice(), "client-scid", &tok, 1200), client, local, 0, 2000, &g.out));
    try testing.expect(g.pool.conns[0].accept.address_validated);
    try testing.expectEqualStrings("first-dcid", g.pool.conns[0].accept.original_dcid.slice());
    // Back at the retiring worker with a token (one Retry only): refused, not retried again.
    try testing.expectEqual(endpoint.Outcome.refused, f.ep.onDatagram(initial(&buf, rscid.slice(), "client-scid", &tok, 1200), client, local, 0, 2000, &f.out));
    try testing.expectEqual(@as(usize, 0), f.pool.made);
}

test "endpoint: stateless resets for unknown short headers; never tiny, foreign or past the rate" {
    var f: Fixture = undefined;
    try f.init(.never);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    var id = [_]u8{ worker, 1, 2, 3, 4, 5, 6, 7 };
    try testing.expectEqual(endpoint.Outcome.dropped_too_short_to_reset, f.ep.onDatagram(shortHeader(&buf, &id, 21), peer4(9, 1), local, 0, 0, &f.out));
    try testing.expectEqual(endpoint.Outcome.stateless_reset, f.ep.onDatagram(shortHeader(&buf, &id, 22), peer4(9, 1), local, 0, 0, &f.out));
    const tok = stateless_reset.token(&config(.never).reset_key, &id);
    const r1 = f.take().?;
    try testing.expectEqual(@as(usize, 21), r1.len);
    try testing.expect(stateless_reset.matches(r1, &tok));
    try testing.expectEqual(endpoint.Outcome.stateless_reset, f.ep.onDatagram(shortHeader(&buf, &id, 1200), peer4(9, 1), local, 0, 0, &f.out));
    const r2 = f.take().?;
    try testing.expect(r2.len < 1200 and r2.len <= stateless_reset.len_max);
    try testing.expect(stateless_reset.matches(r2, &tok));
    try testing.expectEqual(endpoint.Outcome.stateless_reset, f.ep.onDatagram(shortHeader(&buf, &id, 100), peer4(9, 1), local, 0, 999, &f.out));
    // Three in the interval, then none until it ends.
    try testing.expectEqual(endpoint.Outcome.dropped_reset_rate, f.ep.onDatagram(shortHeader(&buf, &id, 100), peer4(9, 1), local, 0, 999, &f.out));
    try testing.expectEqual(endpoint.Outcome.stateless_reset, f.ep.onDatagram(shortHeader(&buf, &id, 100), peer4(9, 1), local, 0, 1000, &f.out));
    // Another worker's ID: steering went wrong; that worker may hold the connection.
    id[udp_steering.cid_worker_offset] = worker + 1;
    try testing.expectEqual(endpoint.Outcome.dropped_other_worker, f.ep.onDatagram(shortHeader(&buf, &id, 100), peer4(9, 1), local, 0, 5000, &f.out));
    // A short header too short for our ID is not ours at all.
    try testing.expectEqual(endpoint.Outcome.dropped_malformed, f.ep.onDatagram(shortHeader(&buf, id[0..7], 8), peer4(9, 1), local, 0, 5000, &f.out));
}

test "endpoint: a full queue drops answers, never more than it holds" {
    var f: Fixture = undefined;
    try f.init(.always);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    for (0..endpoint.queue_len_max) |_| {
        try testing.expectEqual(endpoint.Outcome.retry, f.ep.onDatagram(initial(&buf, "client-dcid", "", "", 1200), peer4(9, 1), local, 0, 0, &f.out));
    }
    try testing.expectEqual(endpoint.Outcome.dropped_queue_full, f.ep.onDatagram(initial(&buf, "client-dcid", "", "", 1200), peer4(9, 1), local, 0, 0, &f.out));
    var n: usize = 0;
    while (f.take()) |_| n += 1;
    try testing.expectEqual(@as(usize, endpoint.queue_len_max), n);
}

test "endpoint: 100,000 forged Initials from random addresses make at most the bound's connections" {
    inline for (.{ endpoint.RetryMode.never, endpoint.RetryMode.auto }) |mode| {
        // The endpoint's memory comes from a fixed buffer: after init, nothing more.
        var memory: [64 * 1024]u8 = undefined;
        var fba = std.heap.FixedBufferAllocator.init(&memory);
        var pool: Pool = .{};
        var out: endpoint.OutQueue = .{};
        var ep = try E.init(fba.allocator(), config(mode), &pool);
        const used_after_init = fba.end_index;
        var prng = std.Random.DefaultPrng.init(99);
        const r = prng.random();
        var buf: [1500]u8 = undefined;
        var counts = std.EnumArray(endpoint.Outcome, usize).initFill(0);
        for (0..100_000) |i| {
            var dcid: [16]u8 = undefined;
            r.bytes(&dcid);
            const from = peer4(r.int(u8), r.int(u16));
            const o = ep.onDatagram(initial(&buf, &dcid, "", "", 1200), from, local, 0, i, &out);
            counts.getPtr(o).* += 1;
            while (out.peek()) |_| out.pop();
        }
        const bound = config(mode).handshakes_max;
        try testing.expect(pool.made <= bound);
        try testing.expectEqual(@as(usize, if (mode == .never) bound else 2), pool.made);
        try testing.expectEqual(pool.made, counts.get(.accepted));
        try testing.expectEqual(@as(usize, 100_000) - pool.made, counts.get(if (mode == .never) .dropped_handshakes_max else .retry));
        try testing.expectEqual(used_after_init, fba.end_index);
        try testing.expectEqual(pool.made * 2, ep.table.used);
    }
}

test "endpoint: connections_max bounds the connections whatever their state" {
    var f: Fixture = undefined;
    try f.init(.never);
    defer f.deinit();
    var buf: [1500]u8 = undefined;
    var dcid = "client-dcid-00".*;
    for (0..8) |i| {
        dcid[13] = @intCast('a' + i);
        try testing.expectEqual(endpoint.Outcome.accepted, f.ep.onDatagram(initial(&buf, &dcid, "", "", 1200), peer4(1, 1), local, 0, 1, &f.out));
        f.ep.handshakeConfirmed(&f.pool.conns[i]);
    }
    dcid[13] = 'z';
    try testing.expectEqual(endpoint.Outcome.dropped_connections_max, f.ep.onDatagram(initial(&buf, &dcid, "", "", 1200), peer4(1, 1), local, 0, 1, &f.out));
    // Every connection at its most IDs: the table's room was kept for them.
    for (f.pool.conns[0..8]) |*c| while (f.ep.issueCid(c)) |_| {};
    try testing.expectEqual(@as(usize, 8 * endpoint.cids_per_connection_max), f.ep.table.used);
    f.ep.remove(&f.pool.conns[3]);
    try testing.expectEqual(endpoint.Outcome.accepted, f.ep.onDatagram(initial(&buf, &dcid, "", "", 1200), peer4(1, 1), local, 0, 1, &f.out));
}

test "endpoint: hostile datagrams (random, and valid ones mutated) never break its bounds" {
    var f: Fixture = undefined;
    try f.init(.auto);
    defer f.deinit();
    var prng = std.Random.DefaultPrng.init(2024);
    const r = prng.random();
    var seeds: [3][1500]u8 = undefined;
    var seed_lens: [3]usize = undefined;
    seed_lens[0] = initial(&seeds[0], "client-dcid-h", "cs", "", 1200).len;
    var tok: [retry_token.len]u8 = undefined;
    const nonce = [_]u8{1} ** retry_token.nonce_len;
    const key = &config(.auto).retry_key;
    retry_token.sealRotating(&tok, key, nonce, &peer4(1, 1), "retry-id", "odcid-odcid", 0);
    seed_lens[1] = initial(&seeds[1], "retry-id", "cs", &tok, 1250).len;
    seed_lens[2] = shortHeader(&seeds[2], &.{ worker, 9, 9, 9, 9, 9, 9, 9 }, 60).len;
    var buf: [1500]u8 = undefined;
    for (0..30_000) |i| {
        const len = if (r.boolean()) blk: {
            const s = r.uintLessThan(usize, 3);
            @memcpy(buf[0..seed_lens[s]], seeds[s][0..seed_lens[s]]);
            for (0..r.intRangeAtMost(usize, 1, 4)) |_| buf[r.uintLessThan(usize, seed_lens[s])] = r.int(u8);
            break :blk r.intRangeAtMost(usize, 0, seed_lens[s]);
        } else blk: {
            const n = r.intRangeAtMost(usize, 0, buf.len);
            r.bytes(buf[0..n]);
            break :blk n;
        };
        _ = f.ep.onDatagram(buf[0..len], peer4(r.int(u8), r.int(u16)), local, 0, i * 10, &f.out);
        try testing.expect(f.ep.connections <= config(.auto).connections_max);
        try testing.expect(f.ep.handshakes <= config(.auto).handshakes_max);
        try testing.expect(f.out.len <= endpoint.queue_len_max);
        // Every answer is shorter than what it answered or a Version Negotiation to 1200+ bytes.
        if (f.take()) |a| try testing.expect(a.len < len or len >= packet.initial_datagram_len_min);
        while (f.take()) |_| {}
        // Connections end now and then, as handshakes time out.
        if (f.pool.made > 200 or r.uintLessThan(usize, 8) == 0) {
            for (f.pool.conns[0..f.pool.made]) |*c| if (c.endpoint_link.cids_len > 0) f.ep.remove(c);
            try testing.expectEqual(@as(usize, 0), f.ep.table.used);
            if (f.pool.made > 200) f.pool.made = 0;
        }
    }
}
