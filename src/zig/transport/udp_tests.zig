//! transport/udp.zig through real sockets on loopback (IPv4, IPv6, dual-stack, adopted):
//! batches each way with destination addresses and ECN, GSO sends and GRO receives, the
//! send queue's runs at the kernel's bounds and its behaviour when the kernel's buffer is full.
const std = @import("std");
const linux = std.os.linux;
const sys = @import("../os/sys.zig");
const Peer = @import("peer.zig").Peer;
const udp = @import("udp.zig");
const Socket = udp.Socket;
const Outgoing = udp.Outgoing;
const RecvBatch = udp.RecvBatch;
const Received = udp.Received;
const SendQueue = udp.SendQueue;
const Flushed = udp.Flushed;
const Ecn = udp.Ecn;
const Cmsghdr = udp.Cmsghdr;
const In6Pktinfo = udp.In6Pktinfo;
const send = udp.send;
const receive = udp.receive;
const isV4Mapped = udp.isV4Mapped;
const toStorage = udp.toStorage;
const putCmsg = udp.putCmsg;
const readCmsgs = udp.readCmsgs;
const runLength = udp.runLength;
const control_len = udp.control_len;
const batch_len_max = udp.batch_len_max;
const datagram_len_max = udp.datagram_len_max;
const send_arena_bytes = udp.send_arena_bytes;
const send_datagrams_max = udp.send_datagrams_max;
const gro_area_bytes = udp.gro_area_bytes;
const gro_batch_len = udp.gro_batch_len;
const testing = std.testing;

fn loopback4(port: u16) Peer {
    var p: Peer = .{ .family = linux.AF.INET, .port = port, .addr = [_]u8{0} ** 16 };
    p.addr[0..4].* = .{ 127, 0, 0, 1 };
    return p;
}

fn loopback6(port: u16) Peer {
    var p: Peer = .{ .family = linux.AF.INET6, .port = port, .addr = [_]u8{0} ** 16 };
    p.addr[15] = 1;
    return p;
}

/// A socket on `local`, or the test skipped (no such address family here).
fn openOrSkip(local: Peer) !Socket {
    return switch (Socket.open(local, .{})) {
        .ok => |s| s,
        .err => error.SkipZigTest,
    };
}

/// Receives until `want` datagrams arrived or ~1 s passed (loopback delivers at once).
fn receiveAll(sock: *const Socket, batch: *RecvBatch, want: usize) !usize {
    var tries: usize = 0;
    while (tries < 1000) : (tries += 1) {
        const n = switch (receive(sock, batch)) {
            .ok => |n| n,
            .err => return error.ReceiveFailed,
        };
        if (n >= want) return n;
        if (n > 0) return n;
        std.Thread.sleep(std.time.ns_per_ms);
    }
    return 0;
}

test "udp: a batch each way over IPv4 loopback, with the destination address and ECN" {
    var server = try openOrSkip(loopback4(0));
    defer server.close();
    var client = try openOrSkip(loopback4(0));
    defer client.close();
    const server_addr = server.localAddress().?;
    var payloads: [batch_len_max][8]u8 = undefined;
    var out: [batch_len_max]Outgoing = undefined;
    for (&out, 0..) |*o, i| {
        payloads[i] = .{ 'q', 'u', 'i', 'c', '-', @intCast(i), 0, 0 };
        o.* = .{ .bytes = &payloads[i], .peer = server_addr, .ecn = 2 };
    }
    try testing.expectEqual(@as(usize, batch_len_max), send(&client, &out).ok);
    var batch: RecvBatch = .{};
    var got: usize = 0;
    while (got < batch_len_max) {
        const n = try receiveAll(&server, &batch, 1);
        try testing.expect(n > 0);
        for (0..n) |i| {
            const d = batch.get(i);
            try testing.expectEqualSlices(u8, &payloads[got + i], d.bytes);
            try testing.expectEqual(client.localAddress().?.port, d.peer.port);
            try testing.expectEqual(@as(u16, linux.AF.INET), d.local.family);
            try testing.expectEqualSlices(u8, &.{ 127, 0, 0, 1 }, d.local.addr[0..4]);
            try testing.expectEqual(@as(Ecn, 2), d.ecn);
        }
        got += n;
    }
    // The answer leaves from the address the datagram came in on, back to the sender.
    const d = batch.get(0);
    const answer = [_]Outgoing{.{ .bytes = "answer", .peer = d.peer, .local = d.local }};
    try testing.expectEqual(@as(usize, 1), send(&server, &answer).ok);
    try testing.expectEqual(@as(usize, 1), try receiveAll(&client, &batch, 1));
    try testing.expectEqualStrings("answer", batch.get(0).bytes);
    try testing.expectEqual(server_addr.port, batch.get(0).peer.port);
    // Nothing waiting: 0, not an error.
    try testing.expectEqual(@as(usize, 0), receive(&client, &batch).ok);
}

test "udp: a dual-stack socket on :: takes IPv4 and IPv6 and knows the destination of each" {
    var any6: Peer = .{ .family = linux.AF.INET6, .port = 0, .addr = [_]u8{0} ** 16 };
    var server = try openOrSkip(any6);
    defer server.close();
    any6.port = server.localAddress().?.port;
    var c4 = try openOrSkip(loopback4(0));
    defer c4.close();
    var c6 = try openOrSkip(loopback6(0)); // no IPv6 here
    defer c6.close();
    try testing.expectEqual(@as(usize, 1), send(&c4, &.{.{ .bytes = "four", .peer = loopback4(any6.port) }}).ok);
    try testing.expectEqual(@as(usize, 1), send(&c6, &.{.{ .bytes = "six", .peer = loopback6(any6.port), .ecn = 1 }}).ok);
    var batch: RecvBatch = .{};
    var seen: usize = 0;
    var rounds: usize = 0;
    while (seen < 2 and rounds < 100) : (rounds += 1) {
        const n = try receiveAll(&server, &batch, 2 - seen);
        for (0..n) |i| {
            const d = batch.get(i);
            if (std.mem.eql(u8, d.bytes, "four")) {
                try testing.expect(isV4Mapped(&d.peer.addr));
                try testing.expectEqual(@as(u16, linux.AF.INET), d.local.family);
                try testing.expectEqualSlices(u8, &.{ 127, 0, 0, 1 }, d.local.addr[0..4]);
                // Answer an IPv4 client from the IPv4 address it wrote to.
                try testing.expectEqual(@as(usize, 1), send(&server, &.{.{ .bytes = "back", .peer = d.peer, .local = d.local }}).ok);
            } else {
                try testing.expectEqualStrings("six", d.bytes);
                try testing.expectEqual(@as(u16, linux.AF.INET6), d.local.family);
                try testing.expectEqualSlices(u8, &loopback6(0).addr, &d.local.addr);
                try testing.expectEqual(@as(Ecn, 1), d.ecn);
            }
        }
        seen += n;
    }
    try testing.expectEqual(@as(usize, 2), seen);
    try testing.expectEqual(@as(usize, 1), try receiveAll(&c4, &batch, 1));
    try testing.expectEqualStrings("back", batch.get(0).bytes);
}

test "udp: GSO, when offered: one 3-segment send arrives as 3 datagrams" {
    var server = try openOrSkip(loopback4(0));
    defer server.close();
    var client = try openOrSkip(loopback4(0));
    defer client.close();
    if (!client.gso) return error.SkipZigTest;
    var bytes: [1200 * 2 + 500]u8 = undefined;
    for (&bytes, 0..) |*b, i| b.* = @truncate(i / 1200 + 1);
    const out = [_]Outgoing{.{ .bytes = &bytes, .peer = server.localAddress().?, .segment_len = 1200 }};
    try testing.expectEqual(@as(usize, 1), send(&client, &out).ok);
    var batch: RecvBatch = .{};
    var lens: [3]usize = undefined;
    var got: usize = 0;
    var rounds: usize = 0;
    while (got < 3 and rounds < 100) : (rounds += 1) {
        const n = try receiveAll(&server, &batch, 3 - got);
        for (0..n) |i| {
            try testing.expect(got < 3);
            const d = batch.get(i);
            lens[got] = d.bytes.len;
            try testing.expect(std.mem.allEqual(u8, d.bytes, @intCast(got + 1)));
            got += 1;
        }
    }
    try testing.expectEqual(@as(usize, 3), got);
    try testing.expectEqualSlices(usize, &.{ 1200, 1200, 500 }, &lens);
}

test "udp: bursts past what the receiver holds: each send reports a count within the batch" {
    var server = try openOrSkip(loopback4(0));
    defer server.close();
    var client = try openOrSkip(loopback4(0));
    defer client.close();
    // Loopback hands a datagram to the receiver at once (dropping it when the receiver's
    // buffer is full), so the sender's EAGAIN is hard to provoke here: only the count
    // returned is checked, never more than asked.
    _ = sys.setIntOption(client.fd, linux.SOL.SOCKET, linux.SO.SNDBUF, 4096);
    var payload: [1400]u8 = [_]u8{7} ** 1400;
    var out: [batch_len_max]Outgoing = undefined;
    for (&out) |*o| o.* = .{ .bytes = &payload, .peer = server.localAddress().? };
    var total: usize = 0;
    for (0..50) |_| {
        const n = send(&client, &out).ok;
        try testing.expect(n <= batch_len_max);
        total += n;
    }
    try testing.expect(total > 0);
    try testing.expectEqual(@as(usize, 0), send(&client, out[0..0]).ok);
}

test "udp: control messages are read defensively" {
    var buf: [control_len]u8 align(@alignOf(usize)) = undefined;
    var pos: usize = 0;
    const info: In6Pktinfo = .{ .addr = loopback6(0).addr, .ifindex = 3 };
    putCmsg(&buf, &pos, linux.IPPROTO.IPV6, linux.IPV6.PKTINFO, std.mem.asBytes(&info));
    const tclass: c_int = 0x03;
    putCmsg(&buf, &pos, linux.IPPROTO.IPV6, linux.IPV6.TCLASS, std.mem.asBytes(&tclass));
    const a = readCmsgs(buf[0..pos]);
    try testing.expectEqual(@as(u16, linux.AF.INET6), a.local.family);
    try testing.expectEqual(@as(Ecn, 3), a.ecn);
    // Cut anywhere: no read past the end, at most what the whole messages said.
    for (0..pos) |cut| _ = readCmsgs(buf[0..cut]);
    // A length field of 0 or past the buffer stops the walk.
    var bad = buf;
    std.mem.bytesAsValue(Cmsghdr, bad[0..@sizeOf(Cmsghdr)]).len = 0;
    try testing.expectEqual(@as(u16, 0), readCmsgs(bad[0..pos]).local.family);
    std.mem.bytesAsValue(Cmsghdr, bad[0..@sizeOf(Cmsghdr)]).len = 4096;
    try testing.expectEqual(@as(u16, 0), readCmsgs(bad[0..pos]).local.family);
}

fn loopback4At(last: u8, port: u16) Peer {
    var p = loopback4(port);
    p.addr[3] = last;
    return p;
}

/// From a client on 127.0.0.1, one datagram to 127.0.0.2 at `server`'s port; the server
/// answers it twice, from the local address it came in on and with the kernel's choice
/// (127.0.0.1 on loopback, for all of 127/8); the sources the client sees, in that order.
fn answerSources(server: *const Socket) ![2]Peer {
    var client = try openOrSkip(loopback4(0));
    defer client.close();
    const port = server.localAddress().?.port;
    const hello = [_]Outgoing{.{ .bytes = "hi", .peer = loopback4At(2, port) }};
    try testing.expectEqual(@as(usize, 1), send(&client, &hello).ok);
    var batch: RecvBatch = .{};
    try testing.expectEqual(@as(usize, 1), try receiveAll(server, &batch, 1));
    const d = batch.get(0);
    try testing.expect(d.local.family != 0);
    const last: usize = if (d.local.family == linux.AF.INET) 3 else 15;
    try testing.expectEqual(@as(u8, 2), d.local.addr[last]);
    const from_local = [_]Outgoing{.{ .bytes = "1", .peer = d.peer, .local = d.local }};
    const from_any = [_]Outgoing{.{ .bytes = "2", .peer = d.peer }};
    try testing.expectEqual(@as(usize, 1), send(server, &from_local).ok);
    try testing.expectEqual(@as(usize, 1), send(server, &from_any).ok);
    var sources: [2]Peer = undefined;
    var seen: usize = 0;
    while (seen < 2) {
        const n = try receiveAll(&client, &batch, 2 - seen);
        if (n == 0) return error.NoAnswer;
        for (0..n) |i| {
            const a = batch.get(i);
            sources[a.bytes[0] - '1'] = a.peer;
        }
        seen += n;
    }
    return sources;
}

fn expectFrom(last: u8, p: Peer) !void {
    try testing.expectEqual(@as(u16, linux.AF.INET), p.family);
    try testing.expectEqualSlices(u8, &.{ 127, 0, 0, last }, p.addr[0..4]);
}

/// Whether 127.0.0.2 is a local address here (Linux answers on all of 127/8).
fn secondLoopback() bool {
    var s = switch (Socket.open(loopback4At(2, 0), .{})) {
        .ok => |s| s,
        .err => return false,
    };
    s.close();
    return true;
}

test "udp: on 0.0.0.0 an answer leaves from the address the client wrote to, not the kernel's" {
    if (!secondLoopback()) return error.SkipZigTest;
    const any4: Peer = .{ .family = linux.AF.INET, .port = 0, .addr = [_]u8{0} ** 16 };
    var server = try openOrSkip(any4);
    defer server.close();
    const got = try answerSources(&server);
    try expectFrom(2, got[0]);
    try expectFrom(1, got[1]); // without IP_PKTINFO: what the test would see
}

test "udp: on a dual-stack :: an IPv4 client's answer leaves from its IPv4 destination" {
    if (!secondLoopback()) return error.SkipZigTest;
    const any6: Peer = .{ .family = linux.AF.INET6, .port = 0, .addr = [_]u8{0} ** 16 };
    var server = try openOrSkip(any6);
    defer server.close();
    const got = try answerSources(&server);
    try expectFrom(2, got[0]);
    try expectFrom(1, got[1]);
}

test "udp: a socket bound elsewhere, adopted, reports destinations and answers from them" {
    if (!secondLoopback()) return error.SkipZigTest;
    // As zigcorn's master makes them (src/zigcorn/sockets.py): socket, bind, nothing else.
    const cases = [_]struct { family: u32, v6only: c_int }{
        .{ .family = linux.AF.INET, .v6only = 0 },
        .{ .family = linux.AF.INET6, .v6only = 0 },
    };
    for (cases) |case| {
        const fd = switch (sys.socket(case.family, linux.SOCK.DGRAM, linux.IPPROTO.UDP)) {
            .ok => |fd| fd,
            .err => return error.SkipZigTest,
        };
        var server: Socket = .{ .fd = fd, .family = case.family, .gso = false };
        defer server.close();
        if (case.family == linux.AF.INET6) {
            const v6only = linux.IPV6.V6ONLY;
            try testing.expect(sys.setIntOption(fd, linux.IPPROTO.IPV6, v6only, case.v6only));
        }
        var st: linux.sockaddr.storage = undefined;
        const any: Peer = .{ .family = @intCast(case.family), .port = 0, .addr = [_]u8{0} ** 16 };
        const len = toStorage(&any, &st);
        try testing.expect(sys.bind(fd, @ptrCast(&st), len) == .ok);
        server = switch (Socket.adopt(fd)) {
            .ok => |s| s,
            .err => |e| {
                std.debug.print("adopt: {s}\n", .{@tagName(e)});
                return error.AdoptFailed;
            },
        };
        try testing.expectEqual(case.family, server.family);
        const got = try answerSources(&server);
        try expectFrom(2, got[0]);
    }
    // A descriptor that is no socket is refused.
    try testing.expect(Socket.adopt(-1) == .err);
}

/// A queue over a test arena, `lens` datagrams queued to `peer` (filled with their index).
fn testQueue(arena: []u8, lens: []const usize, peer: Peer) SendQueue {
    var q = SendQueue.init(arena);
    for (lens, 0..) |n, i| {
        const room = q.room().?;
        @memset(room[0..n], @truncate(i + 1));
        q.commit(n, peer, .{}, 0);
    }
    return q;
}

/// The run lengths the queue's datagrams fall into, in order.
fn testRuns(q: *const SendQueue, out: []usize) []usize {
    var i: usize = 0;
    var n: usize = 0;
    while (i < q.len) : (n += 1) {
        out[n] = runLength(q.items[0..q.len], i);
        i += out[n];
    }
    return out[0..n];
}

test "udp: GSO runs stop at 64 segments, at 65,000 bytes and after a shorter last segment" {
    const arena = try testing.allocator.alloc(u8, send_arena_bytes);
    defer testing.allocator.free(arena);
    var runs: [send_datagrams_max]usize = undefined;
    const p = loopback4(4433);
    // 65 datagrams of 1,000 bytes: 64 segments (65,000 bytes would be allowed), then 1.
    var q = testQueue(arena, &([_]usize{1000} ** 65), p);
    try testing.expectEqualSlices(usize, &.{ 64, 1 }, testRuns(&q, &runs));
    // 1,200-byte datagrams: 54 make 64,800 bytes, a 55th would pass 65,000.
    q = testQueue(arena, &([_]usize{1200} ** 55), p);
    try testing.expectEqualSlices(usize, &.{ 54, 1 }, testRuns(&q, &runs));
    // Exactly 65,000 bytes fit: 50 of 1,300.
    q = testQueue(arena, &([_]usize{1300} ** 51), p);
    try testing.expectEqualSlices(usize, &.{ 50, 1 }, testRuns(&q, &runs));
    // A shorter datagram ends its run; a longer one starts a new one.
    q = testQueue(arena, &.{ 1200, 1200, 500, 1200, 1300, 1300 }, p);
    try testing.expectEqualSlices(usize, &.{ 3, 1, 2 }, testRuns(&q, &runs));
    const m = q.message(0, 3);
    try testing.expectEqual(@as(usize, 2900), m.bytes.len);
    try testing.expectEqual(@as(u16, 1200), m.segment_len);
    try testing.expectEqual(@as(u16, 0), q.message(3, 1).segment_len);
    // Another peer, another local address or another ECN mark: another message.
    q = testQueue(arena, &.{ 1200, 1200 }, p);
    q.commit(1200, loopback4(4434), .{}, 0);
    _ = q.room().?;
    q.commit(1200, loopback4(4434), loopback4(0), 0);
    _ = q.room().?;
    q.commit(1200, loopback4(4434), loopback4(0), 2);
    try testing.expectEqualSlices(usize, &.{ 2, 1, 1, 1 }, testRuns(&q, &runs));
}

test "udp: the send queue holds what fits its arena and its count, then asks for a flush" {
    const arena = try testing.allocator.alloc(u8, send_arena_bytes);
    defer testing.allocator.free(arena);
    var q = SendQueue.init(arena);
    var n: usize = 0;
    while (q.room()) |room| : (n += 1) {
        try testing.expectEqual(@as(usize, datagram_len_max), room.len);
        q.commit(datagram_len_max, loopback4(1), .{}, 0);
    }
    try testing.expectEqual(send_arena_bytes / datagram_len_max, n);
    try testing.expect(!q.push("x", loopback4(1), .{}, 0));
    q = SendQueue.init(arena);
    for (0..send_datagrams_max) |_| try testing.expect(q.push("tiny", loopback4(1), .{}, 0));
    try testing.expect(q.room() == null);
}

/// Receives `lens.len` datagrams on `server`, each of its length and filled with its index
/// (`testQueue`'s), in order.
fn expectArrivals(server: *const Socket, lens: []const usize) !void {
    var batch: RecvBatch = .{};
    var got: usize = 0;
    var rounds: usize = 0;
    while (got < lens.len and rounds < 100) : (rounds += 1) {
        const n = try receiveAll(server, &batch, lens.len - got);
        for (0..n) |i| {
            try testing.expect(got < lens.len);
            const d = batch.get(i);
            try testing.expectEqual(lens[got], d.bytes.len);
            try testing.expect(std.mem.allEqual(u8, d.bytes, @truncate(got + 1)));
            got += 1;
        }
    }
    try testing.expectEqual(lens.len, got);
}

/// Two sockets on IPv4 loopback, a server and a client, and a send arena: the queue's tests'.
const Loop = struct {
    server: Socket,
    client: Socket,
    arena: []u8,

    fn open() !Loop {
        var server = try openOrSkip(loopback4(0));
        errdefer server.close();
        var client = try openOrSkip(loopback4(0));
        errdefer client.close();
        const arena = try testing.allocator.alloc(u8, send_arena_bytes);
        return .{ .server = server, .client = client, .arena = arena };
    }

    fn close(l: *Loop) void {
        l.server.close();
        l.client.close();
        testing.allocator.free(l.arena);
    }
};

test "udp: a flushed queue arrives whole and in order, with GSO or one datagram a message" {
    var l = try Loop.open();
    defer l.close();
    const server = &l.server;
    const client = &l.client;
    // 60 datagrams (the receiver's default buffer holds them): 54 of 1,200 bytes fill a GSO
    // message; the rest, with a short last one, a second.
    var lens: [60]usize = [_]usize{1200} ** 60;
    lens[59] = 700;
    for ([_]bool{ true, false }) |gso| {
        client.gso = gso and client.gso;
        var q = testQueue(l.arena, &lens, server.localAddress().?);
        try testing.expectEqual(Flushed.done, q.flush(client));
        try testing.expect(q.isEmpty() and q.used == 0);
        try testing.expectEqual(@as(u64, 60), q.stats.datagrams);
        try testing.expectEqual(@as(u64, if (client.gso) 1 else 2), q.stats.calls);
        try expectArrivals(server, &lens);
    }
}

test "udp: a full kernel buffer keeps the rest queued, in order, nothing dropped" {
    var l = try Loop.open();
    defer l.close();
    const server = &l.server;
    const client = &l.client;
    client.gso = false;
    const lens = [_]usize{1000} ** 40;
    var q = testQueue(l.arena, &lens, server.localAddress().?);
    q.full_every = 2; // every second call: "full"
    try testing.expectEqual(Flushed.blocked, q.flush(client)); // 32 taken, then full
    try testing.expectEqual(@as(usize, 32), q.head);
    try testing.expect(q.room() != null); // more may be queued behind them
    try testing.expectEqual(Flushed.done, q.flush(client));
    try testing.expectEqual(@as(u64, 1), q.stats.blocked);
    try testing.expectEqual(@as(u64, 40), q.stats.datagrams);
    try testing.expectEqual(@as(u64, 0), q.stats.dropped);
    try expectArrivals(server, &lens);
}

test "udp: queued datagrams keep their ECN marks, a GSO run one mark, over IPv4 and IPv6" {
    const arena = try testing.allocator.alloc(u8, send_arena_bytes);
    defer testing.allocator.free(arena);
    for ([_]bool{ false, true }) |v6| {
        const local = if (v6) loopback6(0) else loopback4(0);
        var server = try openOrSkip(local); // no IPv6 here
        defer server.close();
        var client = try openOrSkip(local);
        defer client.close();
        // ECT(0) on a run of three (one GSO message where offered), then CE, ECT(1), none.
        const marks = [_]Ecn{ 2, 2, 2, 3, 1, 0 };
        var q = SendQueue.init(arena);
        const to = server.localAddress().?;
        for (marks, 0..) |m, i| try testing.expect(q.push(&.{ @intCast(i), 0, 0 }, to, .{}, m));
        try testing.expectEqual(Flushed.done, q.flush(&client));
        try testing.expectEqual(@as(u64, 1), q.stats.calls);
        var batch: RecvBatch = .{};
        var got: usize = 0;
        var rounds: usize = 0;
        while (got < marks.len and rounds < 100) : (rounds += 1) {
            const n = try receiveAll(&server, &batch, marks.len - got);
            for (0..n) |i| {
                const d = batch.get(i);
                try testing.expectEqual(marks[d.bytes[0]], d.ecn);
            }
            got += n;
        }
        try testing.expectEqual(marks.len, got);
    }
}

test "udp: GRO hands over a GSO send as one message, split back into its datagrams" {
    const area = try testing.allocator.alloc(u8, gro_area_bytes);
    defer testing.allocator.free(area);
    var l = try Loop.open();
    defer l.close();
    const server = &l.server;
    const client = &l.client;
    if (!client.gso or !server.enableGro()) return error.SkipZigTest;
    // 10 datagrams of 1,200 bytes and a short last one, ECT(0), in one GSO message.
    var lens = [_]usize{1200} ** 11;
    lens[10] = 300;
    var q = testQueue(l.arena, &lens, server.localAddress().?);
    for (q.items[0..q.len]) |*d| d.ecn = 2;
    try testing.expectEqual(Flushed.done, q.flush(client));
    try testing.expectEqual(@as(u64, 1), q.stats.calls);
    var batch: RecvBatch = .{ .area = area };
    try testing.expectEqual(@as(usize, gro_batch_len), batch.capacity());
    var got: usize = 0;
    var messages: usize = 0;
    var rounds: usize = 0;
    while (got < lens.len and rounds < 100) : (rounds += 1) {
        const n = try receiveAll(server, &batch, 1);
        for (0..n) |i| {
            const m = batch.get(i);
            messages += 1;
            try testing.expectEqual(@as(Ecn, 2), m.ecn);
            try testing.expectEqual(client.localAddress().?.port, m.peer.port);
            try testing.expectEqualSlices(u8, &.{ 127, 0, 0, 1 }, m.local.addr[0..4]);
            var it = m.datagrams();
            while (it.next()) |d| {
                try testing.expect(got < lens.len);
                try testing.expectEqual(lens[got], d.len);
                try testing.expect(std.mem.allEqual(u8, d, @truncate(got + 1)));
                got += 1;
            }
        }
    }
    try testing.expectEqual(lens.len, got);
    try testing.expectEqual(@as(usize, 1), messages); // coalesced, as sent
}

test "udp: received messages split defensively: no segment size, a short tail, a long one" {
    var r: Received = .{ .bytes = &([_]u8{1} ** 3000), .peer = .{}, .local = .{}, .ecn = 0 };
    var it = r.datagrams();
    try testing.expectEqual(@as(usize, datagram_len_max), it.next().?.len); // cut, as without GRO
    try testing.expect(it.next() == null);
    r.segment_len = 1200;
    it = r.datagrams();
    for ([_]usize{ 1200, 1200, 600 }) |n| try testing.expectEqual(n, it.next().?.len);
    try testing.expect(it.next() == null);
    r.segment_len = 1;
    it = r.datagrams();
    var count: usize = 0;
    while (it.next()) |_| count += 1;
    try testing.expectEqual(@as(usize, 3000), count);
    // The GRO control message: its size read, a zero or oversized one read as none.
    var buf: [control_len]u8 align(@alignOf(usize)) = undefined;
    for ([_]struct { v: u32, want: u16 }{
        .{ .v = 1200, .want = 1200 },
        .{ .v = 0, .want = 0 },
        .{ .v = 70_000, .want = 0 },
    }) |case| {
        var pos: usize = 0;
        putCmsg(&buf, &pos, linux.IPPROTO.UDP, linux.UDP.GRO, std.mem.asBytes(&case.v));
        try testing.expectEqual(case.want, readCmsgs(buf[0..pos]).segment_len);
    }
}

test "udp: a GSO message the kernel refuses goes again one datagram a message" {
    var l = try Loop.open();
    defer l.close();
    if (!l.client.gso) return error.SkipZigTest;
    // Without UDP checksums (SO_NO_CHECK) the kernel refuses GSO sends (EINVAL): the queue
    // sends the run's datagrams singly, keeps GSO for later runs (only EIO turns it off).
    const so_no_check = 11;
    try testing.expect(sys.setIntOption(l.client.fd, linux.SOL.SOCKET, so_no_check, 1));
    var lens = [_]usize{1200} ** 10;
    lens[9] = 100;
    var q = testQueue(l.arena, &lens, l.server.localAddress().?);
    try testing.expectEqual(Flushed.done, q.flush(&l.client));
    try testing.expectEqual(@as(u64, 10), q.stats.datagrams);
    try testing.expectEqual(@as(u64, 0), q.stats.dropped);
    try testing.expectEqual(@as(u64, 1), q.stats.gso_refused);
    try testing.expect(l.client.gso);
    try expectArrivals(&l.server, &lens);
}
