//! Worker steering for QUIC over a `SO_REUSEPORT` group: a classic BPF program, attached
//! with `SO_ATTACH_REUSEPORT_CBPF`, that sends every datagram of a connection to the worker
//! that owns it, whatever the client's address (a client that moves keeps its connection).
//!
//! Every connection ID a worker issues carries the worker's index in one byte,
//! `cid_worker_offset` bytes into the ID (`quic/endpoint.zig` writes it). The program reads
//! that byte of the datagram's destination connection ID:
//! - a short header: at `1 + cid_worker_offset` (the ID follows the first byte);
//! - a long header: at `6 + cid_worker_offset` (after the first byte, the version and the
//!   ID's length), when the ID is long enough; a shorter one (never one of ours) goes to 0;
//! - a client's first Initial carries a destination ID the client drew at random: the same
//!   byte is then a random number, and the datagram lands on worker `byte % workers`, which
//!   issues IDs carrying its own index: from then on the connection's datagrams come back to
//!   it. Its later Initials (same random ID) land on the same worker too.
//! and returns it modulo `workers`. A datagram too short to hold the byte returns 0 (a cBPF
//! load past the end ends the program with 0).
//!
//! Assumptions (the server's to keep): one socket per worker, all bound before traffic, in
//! worker order: the kernel indexes the group's sockets in the order they joined it, and the
//! value returned is that index. When a socket of the group closes, the kernel moves the last
//! one into its place, so the sockets are opened by the master and outlive any one worker.
//! A value at or past the group's size makes the kernel fall back to its own hash.
const std = @import("std");
const assert = std.debug.assert;
const linux = std.os.linux;
const sys = @import("../os/sys.zig");

/// Where the worker's index sits in each of our connection IDs.
pub const cid_worker_offset = 0;
/// Workers a group may have: the index is one byte.
pub const workers_max = 256;

/// One classic BPF instruction (struct sock_filter).
pub const Instruction = extern struct { code: u16, jt: u8, jf: u8, k: u32 };
/// struct sock_fprog.
const Program = extern struct { len: u16, filter: [*]const Instruction };

// Classic BPF opcodes (linux/filter.h).
const ld_b_abs: u16 = 0x00 | 0x10 | 0x20; // BPF_LD | BPF_B | BPF_ABS
const jmp_ja: u16 = 0x05 | 0x00;
const jmp_jset_k: u16 = 0x05 | 0x40;
const jmp_jgt_k: u16 = 0x05 | 0x20;
const alu_mod_k: u16 = 0x04 | 0x90;
const ret_k: u16 = 0x06 | 0x00;
const ret_a: u16 = 0x06 | 0x10;

pub const program_len = 10;

/// The steering program for `workers` sockets (1 to 256).
pub fn build(workers: u32) [program_len]Instruction {
    assert(workers >= 1 and workers <= workers_max);
    const off: u32 = cid_worker_offset;
    return .{
        .{ .code = ld_b_abs, .jt = 0, .jf = 0, .k = 0 }, // 0: the first byte
        .{ .code = jmp_jset_k, .jt = 2, .jf = 0, .k = 0x80 }, // 1: long header? -> 4
        .{ .code = ld_b_abs, .jt = 0, .jf = 0, .k = 1 + off }, // 2: short: the ID's byte
        .{ .code = jmp_ja, .jt = 0, .jf = 0, .k = 4 }, // 3: -> 8
        .{ .code = ld_b_abs, .jt = 0, .jf = 0, .k = 5 }, // 4: long: the ID's length
        .{ .code = jmp_jgt_k, .jt = 1, .jf = 0, .k = off }, // 5: long enough? -> 7
        .{ .code = ret_k, .jt = 0, .jf = 0, .k = 0 }, // 6: no byte to read: socket 0
        .{ .code = ld_b_abs, .jt = 0, .jf = 0, .k = 6 + off }, // 7: the ID's byte
        .{ .code = alu_mod_k, .jt = 0, .jf = 0, .k = workers }, // 8
        .{ .code = ret_a, .jt = 0, .jf = 0, .k = 0 }, // 9
    };
}

/// Attaches the steering program to the `SO_REUSEPORT` group of `fd` (any one socket of
/// the group: the program is the group's).
pub fn attach(fd: i32, workers: u32) sys.Result(void) {
    const code = build(workers);
    const prog: Program = .{ .len = program_len, .filter = &code };
    return sys.setOption(fd, linux.SOL.SOCKET, linux.SO.ATTACH_REUSEPORT_CBPF, std.mem.asBytes(&prog));
}

/// What the program returns for `datagram`, computed here: the same rules, for tests and
/// for a worker to check that a datagram reached the socket it should have.
pub fn workerOf(datagram: []const u8, workers: u32) u32 {
    assert(workers >= 1 and workers <= workers_max);
    if (datagram.len == 0) return 0;
    const at: usize = if (datagram[0] & 0x80 == 0) 1 + cid_worker_offset else blk: {
        if (datagram.len < 6 or datagram[5] <= cid_worker_offset) return 0;
        break :blk 6 + cid_worker_offset;
    };
    if (at >= datagram.len) return 0;
    return datagram[at] % workers;
}

const testing = std.testing;
const udp = @import("udp.zig");
const Peer = @import("peer.zig").Peer;

fn loopback(port: u16) Peer {
    var p: Peer = .{ .family = linux.AF.INET, .port = port, .addr = [_]u8{0} ** 16 };
    p.addr[0..4].* = .{ 127, 0, 0, 1 };
    return p;
}

const group_size = 4;

/// Datagrams that must land on socket `k`: short and long headers carrying `k` (plus a
/// multiple of the group's size, to check the modulo) and a client's random first Initial.
fn datagramFor(buf: []u8, k: u8, shape: usize) []const u8 {
    @memset(buf, 0xa5);
    switch (shape % 3) {
        0 => { // short header, our 8-byte ID
            buf[0] = 0x41;
            buf[1 + cid_worker_offset] = k;
            return buf[0..40];
        },
        1 => { // Handshake to our ID
            buf[0] = 0xe0;
            std.mem.writeInt(u32, buf[1..5], 1, .big);
            buf[5] = 8;
            buf[6 + cid_worker_offset] = k + group_size * @as(u8, @intCast(shape % 7));
            return buf[0..60];
        },
        else => { // a client's first Initial: a random 16-byte ID whose byte happens to be k
            buf[0] = 0xc0;
            std.mem.writeInt(u32, buf[1..5], 1, .big);
            buf[5] = 16;
            buf[6 + cid_worker_offset] = k + group_size * 9;
            return buf[0..1200];
        },
    }
}

test "steering: the program matches its description in Zig" {
    var buf: [1200]u8 = undefined;
    for (0..group_size) |k| for (0..6) |shape| {
        try testing.expectEqual(@as(u32, @intCast(k)), workerOf(datagramFor(&buf, @intCast(k), shape), group_size));
    };
    try testing.expectEqual(@as(u32, 0), workerOf(&.{}, 4));
    try testing.expectEqual(@as(u32, 0), workerOf(&.{0x41}, 4));
    try testing.expectEqual(@as(u32, 0), workerOf(&.{ 0xc0, 0, 0, 0, 1, 0 }, 4)); // empty DCID
    try testing.expectEqual(@as(u32, 3), workerOf(&.{ 0xc0, 0, 0, 0, 1, 1, 7 }, 4));
    try testing.expectEqual(@as(u32, 0), workerOf(&.{ 0x40, 200 }, 1));
    const code = build(256);
    try testing.expectEqual(@as(u32, 256), code[8].k);
}

test "steering: N SO_REUSEPORT sockets on one port, each datagram to the socket its ID names" {
    var socks: [group_size]udp.Socket = undefined;
    var opened: usize = 0;
    defer for (socks[0..opened]) |*s| s.close();
    var port: u16 = 0;
    while (opened < group_size) : (opened += 1) {
        socks[opened] = switch (udp.Socket.open(loopback(port), .{ .reuse_port = true })) {
            .ok => |s| s,
            .err => return error.SkipZigTest,
        };
        if (opened == 0) port = socks[0].localAddress().?.port;
    }
    switch (attach(socks[0].fd, group_size)) {
        .ok => {},
        .err => return error.SkipZigTest, // a kernel without reuseport BPF
    }
    // From several client ports: the 4-tuple hash would scatter them; the program must not.
    var clients: [3]udp.Socket = undefined;
    var made: usize = 0;
    defer for (clients[0..made]) |*c| c.close();
    while (made < clients.len) : (made += 1) {
        clients[made] = switch (udp.Socket.open(loopback(0), .{})) {
            .ok => |s| s,
            .err => return error.SkipZigTest,
        };
    }
    var buf: [1200]u8 = undefined;
    var batch: udp.RecvBatch = .{};
    for (&clients) |*c| for (0..group_size) |k| for (0..3) |shape| {
        const d = datagramFor(&buf, @intCast(k), shape);
        try testing.expectEqual(@as(usize, 1), udp.send(c, &.{.{ .bytes = d, .peer = loopback(port) }}).ok);
        try testing.expectEqual(@as(usize, 1), try waitOne(&socks[k], &batch));
        try testing.expectEqualSlices(u8, d, batch.get(0).bytes);
        for (&socks, 0..) |*other, j| if (j != k) {
            try testing.expectEqual(@as(usize, 0), udp.receive(other, &batch).ok);
        };
    };
}

fn waitOne(sock: *const udp.Socket, batch: *udp.RecvBatch) !usize {
    for (0..1000) |_| {
        const n = udp.receive(sock, batch).ok;
        if (n > 0) return n;
        std.Thread.sleep(std.time.ns_per_ms);
    }
    return 0;
}
