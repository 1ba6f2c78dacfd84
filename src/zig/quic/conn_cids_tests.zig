//! Connection IDs both ways (conn_cids.zig, RFC 9000 5.1), driven through a real connection
//! with `connection_tests.zig`'s harness: our spare IDs and their retirement, the client's IDs
//! up to our limit, Retire Prior To, and the RETIRE_CONNECTION_ID frames owed.
const std = @import("std");
const testing = std.testing;
const connection = @import("connection.zig");
const frames = @import("frames.zig");
const varint = @import("varint.zig");
const harness = @import("connection_tests.zig");
const T = harness.T;
const client_cid = harness.client_cid;
const our_cid = harness.our_cid;
const TE = frames.TransportError;

const cids_receive = @import("conn_receive.zig");

/// A NEW_CONNECTION_ID frame's bytes, in `buf`.
fn newCid(buf: []u8, seq: u64, retire_prior_to: u64, cid: []const u8, token_byte: u8) []const u8 {
    const token = [_]u8{token_byte} ** 16;
    var w: varint.Writer = .{ .buf = buf };
    const f: connection.conn_cids.NewCid = .{
        .seq = seq,
        .retire_prior_to = retire_prior_to,
        .cid = cid,
        .reset_token = &token,
    };
    frames.write(&w, .{ .new_connection_id = f }) catch unreachable;
    return buf[0..w.pos];
}

fn retireCid(buf: []u8, seq: u64) []const u8 {
    var w: varint.Writer = .{ .buf = buf };
    frames.write(&w, .{ .retire_connection_id = seq }) catch unreachable;
    return buf[0..w.pos];
}

/// What our next datagram carries of the connection-ID frames, and its destination ID.
const CidFrames = struct {
    dcid: [8]u8 = undefined,
    new: [8]u64 = undefined,
    new_len: usize = 0,
    new_cids: [8][8]u8 = undefined,
    tokens: [8][16]u8 = undefined,
    retired: [16]u64 = undefined,
    retired_len: usize = 0,
};

fn cidFrames(t: *T) !CidFrames {
    var out: CidFrames = .{};
    const d = t.next() orelse return error.NothingSent;
    @memcpy(&out.dcid, d[1..9]);
    const p = try t.open(d);
    var it = frames.Iterator.init(p.payload, p.kind, .server);
    while (try it.next()) |f| switch (f) {
        .new_connection_id => |n| {
            try testing.expectEqual(@as(u64, 0), n.retire_prior_to);
            out.new[out.new_len] = n.seq;
            @memcpy(&out.new_cids[out.new_len], n.cid);
            out.tokens[out.new_len] = n.reset_token.*;
            out.new_len += 1;
        },
        .retire_connection_id => |seq| {
            out.retired[out.retired_len] = seq;
            out.retired_len += 1;
        },
        else => {},
    };
    return out;
}

fn spare(i: u8) [8]u8 {
    return .{ 's', 'p', 'a', 'r', 'e', '0', '0', '0' + i };
}

test "cids: spare IDs up to the peer's limit (at most 4), announced with tokens, accepted" {
    for ([_]u64{ 2, 3, 4, 8 }) |peer_limit| {
        var t: T = undefined;
        try t.init(.{});
        defer t.deinit();
        try testing.expect(!t.c.wantsCid()); // still handshaking
        t.establish();
        t.c.cids.peer_limit = @intCast(@min(peer_limit, connection.conn_cids.ours_max));
        var added: u8 = 0;
        while (t.c.wantsCid()) : (added += 1) t.c.addCid(&spare(added), [_]u8{added} ** 16);
        try testing.expectEqual(@min(peer_limit, 4) - 1, added);
        const got = try cidFrames(&t);
        try testing.expectEqual(@as(usize, added), got.new_len);
        for (0..added) |i| {
            try testing.expectEqual(@as(u64, i + 1), got.new[i]);
            try testing.expectEqualSlices(u8, &spare(@intCast(i)), &got.new_cids[i]);
            try testing.expectEqualSlices(u8, &([_]u8{@intCast(i)} ** 16), &got.tokens[i]);
        }
        // A packet to a spare ID is read; to an ID never issued, dropped.
        t.feed(t.oneRttTo(&spare(0), 0, "\x01"));
        try testing.expectEqual(@as(?u64, 0), t.c.recovery.largestReceived(.application));
        t.feed(t.oneRttTo(&spare(7), 1, "\x01"));
        try testing.expectEqual(@as(?u64, 0), t.c.recovery.largestReceived(.application));
    }
}

test "cids: a lost NEW_CONNECTION_ID goes again; a lost RETIRE_CONNECTION_ID too, until acked" {
    var t: T = undefined;
    try t.init(.{});
    defer t.deinit();
    t.establish();
    t.c.cids.peer_limit = 2;
    t.c.addCid(&spare(0), [_]u8{9} ** 16);
    try testing.expectEqual(@as(usize, 1), (try cidFrames(&t)).new_len);
    try testing.expectEqual(@as(?[]u8, null), t.next());
    cids_receive.lost(t.c, .{ .new_connection_id = 1 });
    try testing.expectEqual(@as(u64, 1), (try cidFrames(&t)).new[0]);
    // Once retired, a lost announcement is not owed.
    t.feed(t.oneRtt(0, retireCid(&t.out, 1)));
    cids_receive.lost(t.c, .{ .new_connection_id = 1 });
    try testing.expectEqual(@as(usize, 0), (cidFrames(&t) catch CidFrames{}).new_len);
    // The peer's seq 0 retired by Retire Prior To 1: owed, lost, sent again, acknowledged.
    var b: [64]u8 = undefined;
    t.feed(t.oneRtt(1, newCid(&b, 1, 1, "newcid02", 1)));
    try testing.expectEqual(@as(usize, 1), (try cidFrames(&t)).retired_len);
    cids_receive.lost(t.c, .{ .retire_connection_id = 0 });
    try testing.expectEqual(@as(u64, 0), (try cidFrames(&t)).retired[0]);
    connection.conn_cids.onRetireAcked(t.c, 0);
    try testing.expectEqual(@as(u8, 0), t.c.cids.retire_len);
}

test "cids: the peer's RETIRE_CONNECTION_ID frees the ID for a replacement; checks at bounds" {
    var t: T = undefined;
    try t.init(.{});
    defer t.deinit();
    t.establish();
    t.c.cids.peer_limit = 4;
    for (0..3) |i| t.c.addCid(&spare(@intCast(i)), [_]u8{1} ** 16);
    _ = try cidFrames(&t);
    try testing.expect(!t.c.wantsCid());
    var b: [16]u8 = undefined;
    // Retiring seq 1 from a packet sent to seq 0: retired, no longer read, taken by the owner.
    t.feed(t.oneRtt(0, retireCid(&b, 1)));
    try testing.expect(!t.c.isClosed());
    try testing.expectEqualSlices(u8, &spare(0), t.c.retiredCid().?.slice());
    try testing.expect(!t.c.wantsCid()); // the slot is still held until the owner takes it
    t.feed(t.oneRttTo(&spare(0), 1, "\x01"));
    try testing.expectEqual(@as(?u64, 0), t.c.recovery.largestReceived(.application));
    t.feed(t.oneRtt(2, retireCid(&b, 1))); // again: a copy
    try testing.expect(!t.c.isClosed());
    t.c.forgetCid(&spare(0));
    try testing.expectEqual(@as(?connection.Cid, null), t.c.retiredCid());
    try testing.expect(t.c.wantsCid());
    t.c.addCid(&spare(3), [_]u8{2} ** 16);
    try testing.expectEqual(@as(u64, 4), (try cidFrames(&t)).new[0]);
    // The highest sequence issued (4) may be retired, from a packet to another ID.
    t.feed(t.oneRttTo(&spare(1), 3, retireCid(&b, 4)));
    try testing.expect(!t.c.isClosed());
    // Retiring the ID the packet was sent to: PROTOCOL_VIOLATION.
    t.feed(t.oneRttTo(&spare(2), 4, retireCid(&b, 3)));
    try testing.expectEqual(@intFromEnum(TE.protocol_violation), try t.closeCode());
}

test "cids: retiring a sequence never issued (next, and 2^62 - 1) is PROTOCOL_VIOLATION" {
    for ([_]u64{ 1, 2, (1 << 62) - 1 }) |seq| {
        var t: T = undefined;
        try t.init(.{});
        defer t.deinit();
        t.establish();
        t.c.cids.peer_limit = 2;
        t.c.addCid(&spare(0), [_]u8{1} ** 16); // seq 1 issued, 2 not
        var b: [16]u8 = undefined;
        t.feed(t.oneRtt(0, retireCid(&b, seq)));
        if (seq == 1) {
            try testing.expect(!t.c.isClosed());
        } else {
            try testing.expectEqual(@intFromEnum(TE.protocol_violation), try t.closeCode());
        }
    }
}

test "cids: the peer's IDs up to our limit (2, 3, 4); one more is CONNECTION_ID_LIMIT_ERROR" {
    for ([_]u64{ 2, 3, 4 }) |limit| {
        var t: T = undefined;
        try t.init(.{ .active_connection_id_limit = limit });
        defer t.deinit();
        t.establish();
        var b: [64]u8 = undefined;
        var cid = "newcid00".*;
        // Sequence 0 is the handshake's: limit - 1 more fit.
        var seq: u64 = 1;
        while (seq < limit) : (seq += 1) {
            cid[7] = '0' + @as(u8, @intCast(seq));
            t.feed(t.oneRtt(seq, newCid(&b, seq, 0, &cid, 1)));
            try testing.expect(!t.c.isClosed());
        }
        try testing.expectEqual(@as(u8, @intCast(limit)), t.c.cids.peers_len);
        // A copy changes nothing; the limit + 1st is refused.
        t.feed(t.oneRtt(seq, newCid(&b, seq - 1, 0, &cid, 1)));
        try testing.expect(!t.c.isClosed());
        cid[7] = 'x';
        t.feed(t.oneRtt(seq + 1, newCid(&b, seq, 0, &cid, 1)));
        try testing.expectEqual(@intFromEnum(TE.connection_id_limit_error), try t.closeCode());
    }
}

test "cids: one past the limit fits when Retire Prior To retires an older one in the same frame" {
    var t: T = undefined;
    try t.init(.{ .active_connection_id_limit = 2 });
    defer t.deinit();
    t.establish();
    var b: [64]u8 = undefined;
    t.feed(t.oneRtt(0, newCid(&b, 1, 0, "newcid01", 1)));
    // Seq 2 would be the third, but Retire Prior To 1 retires seq 0 (the ID we send to).
    t.feed(t.oneRtt(1, newCid(&b, 2, 1, "newcid02", 1)));
    try testing.expect(!t.c.isClosed());
    const got = try cidFrames(&t);
    try testing.expectEqual(@as(usize, 1), got.retired_len);
    try testing.expectEqual(@as(u64, 0), got.retired[0]);
    try testing.expectEqualSlices(u8, "newcid01", &got.dcid); // the oldest one left
    try testing.expectEqualStrings("newcid01", t.c.peer_cid.slice());
}

test "cids: Retire Prior To at the sequence is allowed, past it an error; 2^62 - 1 is safe" {
    var b: [64]u8 = undefined;
    {
        var t: T = undefined;
        try t.init(.{});
        defer t.deinit();
        t.establish();
        // Hand-written (our writer refuses it): seq 1, Retire Prior To 2.
        const bad = "\x18\x01\x02\x08newcid01" ++ [_]u8{1} ** 16;
        t.feed(t.oneRtt(0, bad));
        try testing.expectEqual(@intFromEnum(TE.frame_encoding_error), try t.closeCode());
    }
    {
        var t: T = undefined;
        try t.init(.{});
        defer t.deinit();
        t.establish();
        const max: u64 = (1 << 62) - 1;
        // At the sequence, the largest: every other ID retired, this one used.
        t.feed(t.oneRtt(0, newCid(&b, 5, 5, "newcid05", 1)));
        try testing.expect(!t.c.isClosed());
        try testing.expectEqualStrings("newcid05", t.c.peer_cid.slice());
        t.feed(t.oneRtt(1, newCid(&b, max, max, "newcidmx", 1)));
        try testing.expect(!t.c.isClosed());
        try testing.expectEqualStrings("newcidmx", t.c.peer_cid.slice());
        try testing.expectEqual(max, t.c.cids.peer_seq);
        try testing.expectEqual(@as(u8, 1), t.c.cids.peers_len);
        const got = try cidFrames(&t);
        try testing.expectEqual(@as(usize, 2), got.retired_len); // 0 and 5
        try testing.expectEqualSlices(u8, "newcidmx", &got.dcid);
    }
}

test "cids: a sequence reused with another ID, an ID with another sequence: PROTOCOL_VIOLATION" {
    var b: [64]u8 = undefined;
    for (0..3) |case| {
        var t: T = undefined;
        try t.init(.{});
        defer t.deinit();
        t.establish();
        t.feed(t.oneRtt(0, newCid(&b, 1, 0, "newcid01", 1)));
        t.feed(t.oneRtt(1, switch (case) {
            0 => newCid(&b, 1, 0, "newcid0x", 1), // same sequence, another ID
            1 => newCid(&b, 2, 0, "newcid01", 1), // same ID, another sequence
            else => newCid(&b, 1, 0, "newcid01", 2), // same both, another token
        }));
        try testing.expectEqual(@intFromEnum(TE.protocol_violation), try t.closeCode());
    }
}

test "cids: NEW_CONNECTION_ID to a peer that uses an empty ID is PROTOCOL_VIOLATION" {
    var t: T = undefined;
    try t.init(.{});
    defer t.deinit();
    t.establish();
    t.c.peer_cid = .{};
    var b: [64]u8 = undefined;
    t.feed(t.oneRtt(0, newCid(&b, 1, 0, "newcid01", 1)));
    try testing.expect(t.c.isClosed() or t.c.state == .closing);
    try testing.expectEqual(@as(?u64, @intFromEnum(TE.protocol_violation)), t.c.closed_code);
}

test "cids: RETIRE_CONNECTION_ID owed at once: 8 kept, the 9th CONNECTION_ID_LIMIT_ERROR" {
    var t: T = undefined;
    try t.init(.{});
    defer t.deinit();
    t.establish();
    var b: [64]u8 = undefined;
    var cid = "newcid00".*;
    // Retire Prior To 100 retires seq 0: one RETIRE owed, never acknowledged.
    t.feed(t.oneRtt(0, newCid(&b, 100, 100, "newcid99", 1)));
    const owed_max = connection.conn_cids.retire_owed_max;
    // Older sequences arriving late: each is retired at once, not kept.
    var seq: u64 = 1;
    while (seq < owed_max) : (seq += 1) {
        cid[7] = '0' + @as(u8, @intCast(seq));
        t.feed(t.oneRtt(seq, newCid(&b, seq, 0, &cid, 1)));
        try testing.expect(!t.c.isClosed());
    }
    try testing.expectEqual(@as(u8, owed_max), t.c.cids.retire_len);
    try testing.expectEqual(@as(u8, 1), t.c.cids.peers_len);
    // The same sequence again owes nothing more.
    t.feed(t.oneRtt(seq, newCid(&b, seq - 1, 0, &cid, 1)));
    try testing.expect(!t.c.isClosed());
    cid[7] = 'z';
    t.feed(t.oneRtt(seq + 1, newCid(&b, seq, 0, &cid, 1)));
    try testing.expectEqual(@intFromEnum(TE.connection_id_limit_error), try t.closeCode());
}

test "cids: when the peer moves to another of our IDs, we move to its next ID and retire the last" {
    var t: T = undefined;
    try t.init(.{});
    defer t.deinit();
    t.establish();
    t.c.cids.peer_limit = 4;
    for (0..3) |i| t.c.addCid(&spare(@intCast(i)), [_]u8{1} ** 16);
    var b: [64]u8 = undefined;
    t.feed(t.oneRtt(0, newCid(&b, 1, 0, "newcid01", 1)));
    t.feed(t.oneRtt(1, newCid(&b, 2, 0, "newcid02", 1)));
    var got = try cidFrames(&t);
    try testing.expectEqualSlices(u8, client_cid, &got.dcid); // same ID as the peer: no move
    try testing.expectEqual(@as(usize, 0), got.retired_len);
    // The newest packet went to a spare ID: ours moves to seq 1 and seq 0 is retired.
    t.feed(t.oneRttTo(&spare(0), 5, "\x01"));
    got = try cidFrames(&t);
    try testing.expectEqualSlices(u8, "newcid01", &got.dcid);
    try testing.expectEqual(@as(usize, 1), got.retired_len);
    try testing.expectEqual(@as(u64, 0), got.retired[0]);
    // A late packet to the ID it left (older than the newest) moves nothing.
    t.feed(t.oneRtt(3, "\x01"));
    try testing.expectEqualStrings("newcid01", t.c.peer_cid.slice());
    // Another move: seq 2; then with no ID of the peer's left, it stays on seq 2.
    t.feed(t.oneRttTo(&spare(1), 6, "\x01"));
    try testing.expectEqualStrings("newcid02", t.c.peer_cid.slice());
    t.feed(t.oneRttTo(&spare(2), 7, "\x01"));
    try testing.expectEqualStrings("newcid02", t.c.peer_cid.slice());
    try testing.expectEqual(@as(u8, 1), t.c.cids.peers_len);
    try testing.expect(!t.c.isClosed());
}
