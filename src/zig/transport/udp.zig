//! UDP for QUIC, bytes only: one socket (IPv4, IPv6, dual-stack on `::`), datagrams received
//! and sent in batches (`recvmmsg`/`sendmmsg`), with what QUIC needs beside the bytes: the
//! peer, the local address each datagram came in on (answers must leave from it on a
//! multi-homed host), the ECN bits, and UDP GSO on send (one message, several datagrams
//! of one size) when the kernel offers it.
//!
//! Buffers are the caller's: a `RecvBatch` is a fixed array (`batch_len_max` datagrams of
//! `datagram_len_max` bytes) or, with GRO, the caller's area; a `SendQueue` writes into the
//! caller's arena. Nothing here allocates. Tests: `udp_tests.zig`.
const std = @import("std");
const assert = std.debug.assert;
const linux = std.os.linux;
const sys = @import("../os/sys.zig");
const Peer = @import("peer.zig").Peer;

/// Datagrams per system call, either way.
pub const batch_len_max = 32;
/// The largest datagram received: a QUIC endpoint's path MTU stays below Ethernet's.
pub const datagram_len_max = 1500;
/// The kernel's bound on segments in one GSO send (UDP_MAX_SEGMENTS).
pub const gso_segments_max = 64;
/// The bytes of one GSO message, at most (the kernel takes 64 KiB minus headers).
pub const gso_bytes_max = 65_000;
/// Room for the control messages of one datagram: PKTINFO (v4 or v6), TOS/TCLASS, GSO or GRO.
pub const control_len = 128;
/// With GRO, the messages one `receive` reads and the room of each: the kernel hands over up
/// to 64 KiB of one peer's datagrams at once, so a message's room is that whole (a shorter
/// one would cut the coalesced datagrams). 16 x 64 KiB = 1 MiB of address space, the
/// caller's (`RecvBatch.area`), of which only the pages messages reached become resident.
pub const gro_batch_len = 16;
pub const gro_message_len_max = 65_536;
pub const gro_area_bytes = gro_batch_len * gro_message_len_max;

comptime {
    assert(gro_batch_len <= batch_len_max);
}

/// The two ECN bits of the IP header (RFC 3168): 0 not ECT, 1 ECT(1), 2 ECT(0), 3 CE.
pub const Ecn = u2;

/// The socket's options, set at `open`.
pub const Options = struct {
    /// Several workers bind the same port (and a steering program picks one: `udp_steering.zig`).
    reuse_port: bool = false,
};

pub const Socket = struct {
    fd: i32,
    family: u32,
    /// The kernel sends GSO messages (probed once at `open`); without it each message
    /// carries one datagram.
    gso: bool,
    /// The kernel hands over a peer's datagrams coalesced (`enableGro`), split by `receive`.
    gro: bool = false,

    /// Opens and binds a UDP socket on `local` (its family, address and port; port 0 picks
    /// one). On `::` the socket is dual-stack (IPv4 peers appear as `::ffff:a.b.c.d`).
    pub fn open(local: Peer, options: Options) sys.Result(Socket) {
        assert(local.family == linux.AF.INET or local.family == linux.AF.INET6);
        const fd = switch (sys.socket(local.family, linux.SOCK.DGRAM, linux.IPPROTO.UDP)) {
            .ok => |fd| fd,
            .err => |e| return .{ .err = e },
        };
        if (configure(fd, local, options)) |e| {
            sys.close(fd);
            return .{ .err = e };
        }
        var st: linux.sockaddr.storage = undefined;
        const len = toStorage(&local, &st);
        switch (sys.bind(fd, @ptrCast(&st), len)) {
            .ok => {},
            .err => |e| {
                sys.close(fd);
                return .{ .err = e };
            },
        }
        const gso = sys.setIntOption(fd, linux.IPPROTO.UDP, linux.UDP.SEGMENT, 0);
        return .{ .ok = .{ .fd = fd, .family = local.family, .gso = gso } };
    }

    /// A socket made and bound elsewhere (zigcorn's master binds `--http3`'s sockets:
    /// src/zigcorn/sockets.py), given what `open` sets that may follow a bind: each
    /// datagram's destination address (so that answers leave from it), its ECN bits, path
    /// MTU probing; IPv4's as well on an IPv6 socket that is dual-stack. Its family is the
    /// bound address's.
    pub fn adopt(fd: i32) sys.Result(Socket) {
        var st: linux.sockaddr.storage = undefined;
        switch (sys.getsockname(fd, &st)) {
            .ok => {},
            .err => |e| return .{ .err = e },
        }
        const local = Peer.fromStorage(&st);
        if (local.family != linux.AF.INET and local.family != linux.AF.INET6)
            return .{ .err = .AFNOSUPPORT };
        const ipv4 = local.family == linux.AF.INET or !v6Only(fd);
        if (receiveOptions(fd, local.family, ipv4)) |e| return .{ .err = e };
        const gso = sys.setIntOption(fd, linux.IPPROTO.UDP, linux.UDP.SEGMENT, 0);
        return .{ .ok = .{ .fd = fd, .family = local.family, .gso = gso } };
    }

    /// Asks the kernel to coalesce received datagrams (UDP_GRO); only for a caller whose
    /// `RecvBatch` has its `area` (a message may then be 64 KiB). False where refused: then
    /// each message is one datagram, as before.
    pub fn enableGro(self: *Socket) bool {
        self.gro = sys.setIntOption(self.fd, linux.IPPROTO.UDP, linux.UDP.GRO, 1);
        return self.gro;
    }

    pub fn close(self: *Socket) void {
        sys.close(self.fd);
        self.fd = -1;
    }

    /// The bound address (the port the kernel chose for port 0).
    pub fn localAddress(self: *const Socket) ?Peer {
        var st: linux.sockaddr.storage = undefined;
        return switch (sys.getsockname(self.fd, &st)) {
            .ok => Peer.fromStorage(&st),
            .err => null,
        };
    }
};

fn configure(fd: i32, local: Peer, options: Options) ?sys.E {
    const v6 = local.family == linux.AF.INET6;
    if (options.reuse_port and !sys.setIntOption(fd, linux.SOL.SOCKET, linux.SO.REUSEPORT, 1)) return .INVAL;
    // Dual-stack only on the unspecified address; a named IPv6 address is IPv6 only.
    const any = std.mem.allEqual(u8, &local.addr, 0);
    if (v6 and !sys.setIntOption(fd, linux.IPPROTO.IPV6, linux.IPV6.V6ONLY, if (any) 0 else 1))
        return .INVAL;
    return receiveOptions(fd, local.family, !v6 or any);
}

/// What each datagram must report (its destination address, its ECN bits) and path MTU
/// probing, for `family`'s datagrams and, with `ipv4`, for IPv4's (a dual-stack socket).
fn receiveOptions(fd: i32, family: u32, ipv4: bool) ?sys.E {
    if (family == linux.AF.INET6) {
        if (!sys.setIntOption(fd, linux.IPPROTO.IPV6, linux.IPV6.RECVPKTINFO, 1)) return .INVAL;
        if (!sys.setIntOption(fd, linux.IPPROTO.IPV6, linux.IPV6.RECVTCLASS, 1)) return .INVAL;
        // Path MTU probing is QUIC's (DPLPMTUD): the kernel sets DF and never fragments.
        _ = sys.setIntOption(fd, linux.IPPROTO.IPV6, linux.IPV6.MTU_DISCOVER, pmtudisc_probe);
        if (!ipv4) return null;
    }
    // IPv4 datagrams (on a dual-stack socket too) report their destination and TOS here.
    if (!sys.setIntOption(fd, linux.IPPROTO.IP, linux.IP.PKTINFO, 1)) return .INVAL;
    if (!sys.setIntOption(fd, linux.IPPROTO.IP, linux.IP.RECVTOS, 1)) return .INVAL;
    _ = sys.setIntOption(fd, linux.IPPROTO.IP, linux.IP.MTU_DISCOVER, pmtudisc_probe);
    return null;
}

/// Whether an IPv6 socket takes IPv6 only (true too when the kernel does not say).
fn v6Only(fd: i32) bool {
    var value: c_int = 1;
    var len: linux.socklen_t = @sizeOf(c_int);
    const bytes = std.mem.asBytes(&value);
    const rc = linux.getsockopt(fd, linux.IPPROTO.IPV6, linux.IPV6.V6ONLY, bytes, &len);
    return sys.E.init(rc) != .SUCCESS or value != 0;
}

/// IP_PMTUDISC_PROBE / IPV6_PMTUDISC_PROBE: set DF, ignore the kernel's path MTU.
const pmtudisc_probe: c_int = 3;

/// A socket address for `p`; its length.
pub fn toStorage(p: *const Peer, st: *linux.sockaddr.storage) linux.socklen_t {
    st.* = std.mem.zeroes(linux.sockaddr.storage);
    if (p.family == linux.AF.INET) {
        const in: *linux.sockaddr.in = @ptrCast(@alignCast(st));
        in.* = .{ .port = std.mem.nativeToBig(u16, p.port), .addr = std.mem.bytesToValue(u32, p.addr[0..4]) };
        return @sizeOf(linux.sockaddr.in);
    }
    assert(p.family == linux.AF.INET6);
    const in6: *linux.sockaddr.in6 = @ptrCast(@alignCast(st));
    in6.* = .{ .port = std.mem.nativeToBig(u16, p.port), .flowinfo = 0, .addr = p.addr, .scope_id = 0 };
    return @sizeOf(linux.sockaddr.in6);
}

// ---- control messages (cmsg(3)) ------------------------------------------------------------

pub const Cmsghdr = extern struct { len: usize, level: i32, type: i32 };
const cmsg_header_len = std.mem.alignForward(usize, @sizeOf(Cmsghdr), @sizeOf(usize));

fn cmsgSpace(data_len: usize) usize {
    return cmsg_header_len + std.mem.alignForward(usize, data_len, @sizeOf(usize));
}

const InPktinfo = extern struct { ifindex: i32, spec_dst: [4]u8, addr: [4]u8 };
pub const In6Pktinfo = extern struct { addr: [16]u8, ifindex: u32 };

/// Appends one control message to `buf` at `pos.*`.
pub fn putCmsg(buf: []align(@alignOf(usize)) u8, pos: *usize, level: i32, kind: i32, data: []const u8) void {
    const space = cmsgSpace(data.len);
    assert(pos.* + space <= buf.len);
    const h: *Cmsghdr = @ptrCast(@alignCast(buf[pos.*..].ptr));
    h.* = .{ .len = cmsg_header_len + data.len, .level = level, .type = kind };
    @memset(buf[pos.* + cmsg_header_len ..][0 .. space - cmsg_header_len], 0);
    @memcpy(buf[pos.* + cmsg_header_len ..][0..data.len], data);
    pos.* += space;
}

/// What the control messages of a received datagram say: where it came in, its ECN bits,
/// the size of the datagrams GRO coalesced into it (0: one datagram).
const Ancillary = struct { local: Peer = .{}, ecn: Ecn = 0, segment_len: u16 = 0 };

pub fn readCmsgs(control: []const u8) Ancillary {
    var out: Ancillary = .{};
    var pos: usize = 0;
    while (pos + cmsg_header_len <= control.len) {
        const h = std.mem.bytesToValue(Cmsghdr, control[pos..][0..@sizeOf(Cmsghdr)]);
        if (h.len < cmsg_header_len or pos + h.len > control.len) break;
        const data = control[pos + cmsg_header_len .. pos + h.len];
        readOne(&out, h.level, h.type, data);
        pos += std.mem.alignForward(usize, h.len, @sizeOf(usize));
    }
    return out;
}

fn readOne(out: *Ancillary, level: i32, kind: i32, data: []const u8) void {
    if (level == linux.IPPROTO.IP and kind == linux.IP.PKTINFO and data.len >= @sizeOf(InPktinfo)) {
        const info = std.mem.bytesToValue(InPktinfo, data[0..@sizeOf(InPktinfo)]);
        out.local.family = linux.AF.INET;
        out.local.addr = [_]u8{0} ** 16;
        out.local.addr[0..4].* = info.addr;
    } else if (level == linux.IPPROTO.IPV6 and kind == linux.IPV6.PKTINFO and data.len >= @sizeOf(In6Pktinfo)) {
        const info = std.mem.bytesToValue(In6Pktinfo, data[0..@sizeOf(In6Pktinfo)]);
        out.local.family = linux.AF.INET6;
        out.local.addr = info.addr;
    } else if (level == linux.IPPROTO.IP and kind == linux.IP.TOS and data.len >= 1) {
        out.ecn = @truncate(data[0]);
    } else if (level == linux.IPPROTO.IPV6 and kind == linux.IPV6.TCLASS and data.len >= 4) {
        out.ecn = @truncate(std.mem.bytesToValue(u32, data[0..4]));
    } else if (level == linux.IPPROTO.UDP and kind == linux.UDP.GRO and data.len >= 4) {
        // The kernel's, but checked: a size of 0 or past a u16 reads as one datagram.
        out.segment_len = std.math.cast(u16, std.mem.bytesToValue(u32, data[0..4])) orelse 0;
    }
}

// ---- receiving ----------------------------------------------------------------------------

/// One message of a batch: its bytes (in the batch's buffer), who sent it, the local
/// address it was sent to (port 0: the socket's), its ECN bits; with GRO, several datagrams
/// of `segment_len` bytes each (the last may be shorter), all of one peer, path and mark.
pub const Received = struct {
    bytes: []const u8,
    peer: Peer,
    local: Peer,
    ecn: Ecn,
    segment_len: u16 = 0,

    /// The datagrams of the message, in order.
    pub fn datagrams(r: *const Received) Datagrams {
        return .{ .rest = r.bytes, .segment_len = r.segment_len };
    }
};

pub const Datagrams = struct {
    rest: []const u8,
    segment_len: u16,

    /// The next datagram; one longer than `datagram_len_max` is cut, as `receive` cuts one
    /// without GRO (QUIC then fails to open it).
    pub fn next(it: *Datagrams) ?[]const u8 {
        if (it.rest.len == 0) return null;
        const n = if (it.segment_len == 0) it.rest.len else @min(it.rest.len, it.segment_len);
        const d = it.rest[0..n];
        it.rest = it.rest[n..];
        return d[0..@min(n, datagram_len_max)];
    }
};

/// The caller's buffers for one `receive`: ~50 KiB, kept for the socket's life; on a socket
/// with GRO, `area` (`gro_area_bytes`, the caller's) holds the messages instead of `bufs`.
pub const RecvBatch = struct {
    bufs: [batch_len_max][datagram_len_max]u8 = undefined,
    area: []u8 = &.{},
    names: [batch_len_max]linux.sockaddr.storage = undefined,
    controls: [batch_len_max][control_len]u8 align(@alignOf(usize)) = undefined,
    iovs: [batch_len_max]std.posix.iovec = undefined,
    msgs: [batch_len_max]linux.mmsghdr = undefined,
    count: usize = 0,

    /// The messages one `receive` reads at most.
    pub fn capacity(self: *const RecvBatch) usize {
        return if (self.area.len > 0) gro_batch_len else batch_len_max;
    }

    /// Message `i` of the last `receive`.
    pub fn get(self: *const RecvBatch, i: usize) Received {
        assert(i < self.count);
        const m = &self.msgs[i].hdr;
        const anc = readCmsgs(self.controls[i][0..m.controllen]);
        const room = self.iovs[i].len;
        const bytes = self.iovs[i].base[0..@min(self.msgs[i].len, room)];
        return .{
            .bytes = bytes,
            .peer = Peer.fromStorage(&self.names[i]),
            .local = anc.local,
            .ecn = anc.ecn,
            // Without GRO's room, a message is one datagram whatever the kernel says.
            .segment_len = if (room == datagram_len_max) 0 else anc.segment_len,
        };
    }
};

/// Reads up to `capacity()` messages; how many (0 when none was waiting). Without GRO each
/// is one datagram, and one longer than `datagram_len_max` is cut (MSG_TRUNC in its flags):
/// QUIC then fails to open it, as it would any damaged datagram. With GRO a message may hold
/// several (`Received.datagrams`).
pub fn receive(sock: *const Socket, batch: *RecvBatch) sys.Result(usize) {
    const gro = batch.area.len > 0;
    // A socket coalescing datagrams needs the room of a coalesced message.
    assert(!sock.gro or gro);
    assert(!gro or batch.area.len == gro_area_bytes);
    const slots = batch.capacity();
    for (0..slots) |i| {
        batch.iovs[i] = if (gro)
            .{ .base = batch.area[i * gro_message_len_max ..].ptr, .len = gro_message_len_max }
        else
            .{ .base = &batch.bufs[i], .len = datagram_len_max };
        batch.msgs[i] = .{ .hdr = .{
            .name = @ptrCast(&batch.names[i]),
            .namelen = @sizeOf(linux.sockaddr.storage),
            .iov = @ptrCast(&batch.iovs[i]),
            .iovlen = 1,
            .control = &batch.controls[i],
            .controllen = control_len,
            .flags = 0,
        }, .len = 0 };
    }
    batch.count = 0;
    return switch (sys.recvmmsg(sock.fd, batch.msgs[0..slots])) {
        .ok => |n| blk: {
            assert(n <= slots);
            batch.count = n;
            break :blk .{ .ok = n };
        },
        .err => |e| if (e == .AGAIN) .{ .ok = 0 } else .{ .err = e },
    };
}

// ---- sending ------------------------------------------------------------------------------

/// One message to send: `bytes` (the caller's) to `peer`, from `local` (its address; family
/// 0: the kernel picks), with `ecn`. `segment_len` < `bytes.len` asks for GSO: the bytes go
/// as datagrams of `segment_len` (the last may be shorter); only on a socket with `gso`.
pub const Outgoing = struct {
    bytes: []const u8,
    peer: Peer,
    local: Peer = .{},
    ecn: Ecn = 0,
    segment_len: u16 = 0,

    fn segmented(o: *const Outgoing) bool {
        return o.segment_len != 0 and o.segment_len < o.bytes.len;
    }
};

/// Sends up to `batch_len_max` messages in one call; how many the kernel took (0 when its
/// buffer was full: EAGAIN). The caller keeps the rest for the next writable event.
pub fn send(sock: *const Socket, out: []const Outgoing) sys.Result(usize) {
    const n = @min(out.len, batch_len_max);
    if (n == 0) return .{ .ok = 0 };
    var names: [batch_len_max]linux.sockaddr.storage = undefined;
    var controls: [batch_len_max][control_len]u8 align(@alignOf(usize)) = undefined;
    var iovs: [batch_len_max]std.posix.iovec_const = undefined;
    var msgs: [batch_len_max]linux.mmsghdr_const = undefined;
    for (out[0..n], 0..) |*o, i| {
        assert(o.bytes.len > 0);
        assert(!o.segmented() or (sock.gso and o.bytes.len <= gso_bytes_max and
            (o.bytes.len + o.segment_len - 1) / o.segment_len <= gso_segments_max));
        const name_len = toStorage(&o.peer, &names[i]);
        const control = writeCmsgs(&controls[i], o);
        iovs[i] = .{ .base = o.bytes.ptr, .len = o.bytes.len };
        msgs[i] = .{ .hdr = .{
            .name = @ptrCast(&names[i]),
            .namelen = name_len,
            .iov = @ptrCast(&iovs[i]),
            .iovlen = 1,
            .control = if (control == 0) null else &controls[i],
            .controllen = control,
            .flags = 0,
        }, .len = 0 };
    }
    return switch (sys.sendmmsg(sock.fd, msgs[0..n])) {
        .ok => |sent| .{ .ok = sent },
        .err => |e| if (e == .AGAIN) .{ .ok = 0 } else .{ .err = e },
    };
}

// ---- the send queue: datagrams kept until the kernel takes them --------------------------

/// Bytes of a `SendQueue`'s arena: four full GSO messages. The caller maps it (pages it never
/// fills stay out of memory: without GSO a pass fills at most `batch_len_max` datagrams).
pub const send_arena_bytes = 4 * 65_536;
/// Datagrams a `SendQueue` holds at once (the arena fills first at 1,200 bytes and more).
pub const send_datagrams_max = 256;

/// One datagram waiting in a `SendQueue`: its bytes at `off` in the arena, where it goes.
const Queued = struct { off: u32, len: u16, peer: Peer, local: Peer, ecn: Ecn };

/// What a `SendQueue.flush` left: everything went, or the kernel's buffer is full and the
/// rest waits for the socket's writability (nothing is dropped for want of room).
pub const Flushed = enum { done, blocked };

/// Datagrams written back to back in one arena (the caller's, `send_arena_bytes` long), sent
/// by `flush` in `sendmmsg` batches; a run of them to one peer, from one local address, with
/// one ECN mark and of one size (the last may be shorter) goes as one GSO message on a
/// socket with `gso`. What the kernel does not take stays queued, in order.
pub const SendQueue = struct {
    arena: []u8,
    items: [send_datagrams_max]Queued = undefined,
    /// `items[head..len]` wait; `used` bytes of the arena are taken.
    head: usize = 0,
    len: usize = 0,
    used: usize = 0,
    /// Items below this index go one per message: the kernel refused them as one.
    single_until: usize = 0,
    /// Test hook (`ZIGCORN_TEST_UDP_FULL_EVERY`, 2 or more): every Nth `sendmmsg` is not
    /// made and the kernel's buffer taken as full (EAGAIN), as a slow device's queue would
    /// make it (loopback frees a datagram's buffer at once: its EAGAIN never comes).
    full_every: u32 = 0,
    calls: u64 = 0,
    /// Datagrams queued, `sendmmsg` calls, datagrams sent, times the kernel was full,
    /// datagrams refused (their address unreachable or refused: QUIC's loss recovery sees
    /// them as lost), GSO messages refused (their datagrams sent again singly).
    stats: struct {
        queued: u64 = 0,
        calls: u64 = 0,
        datagrams: u64 = 0,
        blocked: u64 = 0,
        dropped: u64 = 0,
        gso_refused: u64 = 0,
    } = .{},

    pub fn init(arena: []u8) SendQueue {
        assert(arena.len == send_arena_bytes);
        return .{ .arena = arena };
    }

    pub fn isEmpty(q: *const SendQueue) bool {
        return q.head == q.len;
    }

    /// Room for the next datagram (`datagram_len_max` bytes), or null when the queue is full:
    /// `flush` first.
    pub fn room(q: *SendQueue) ?[]u8 {
        if (q.len == send_datagrams_max or q.used + datagram_len_max > q.arena.len) return null;
        return q.arena[q.used..][0..datagram_len_max];
    }

    /// The datagram written into `room()`'s first `n` bytes joins the queue.
    pub fn commit(q: *SendQueue, n: usize, peer: Peer, local: Peer, ecn: Ecn) void {
        assert(n > 0 and n <= datagram_len_max and q.len < send_datagrams_max);
        assert(q.used + n <= q.arena.len);
        q.items[q.len] = .{
            .off = @intCast(q.used),
            .len = @intCast(n),
            .peer = peer,
            .local = local,
            .ecn = ecn,
        };
        q.len += 1;
        q.used += n;
        q.stats.queued += 1;
    }

    /// A copy of `bytes` joins the queue; false when it is full.
    pub fn push(q: *SendQueue, bytes: []const u8, peer: Peer, local: Peer, ecn: Ecn) bool {
        const dst = q.room() orelse return false;
        const n = @min(bytes.len, datagram_len_max);
        if (n == 0) return true;
        @memcpy(dst[0..n], bytes[0..n]);
        q.commit(n, peer, local, ecn);
        return true;
    }

    /// Sends what waits, as long as the kernel takes it. A GSO message the kernel refuses
    /// (EIO: the device has no checksum offload) turns GSO off for the socket, and its
    /// datagrams go again one per message; any other refusal of a GSO message sends its
    /// datagrams singly. A single datagram refused (its address) is dropped, counted.
    pub fn flush(q: *SendQueue, sock: *Socket) Flushed {
        while (!q.isEmpty()) {
            var msgs: [batch_len_max]Outgoing = undefined;
            var counts: [batch_len_max]usize = undefined;
            var n: usize = 0;
            var i = q.head;
            while (n < batch_len_max and i < q.len) : (n += 1) {
                const single = i < q.single_until or !sock.gso;
                counts[n] = if (single) 1 else runLength(q.items[0..q.len], i);
                msgs[n] = q.message(i, counts[n]);
                i += counts[n];
            }
            q.calls +%= 1;
            const faked = q.full_every != 0 and q.calls % q.full_every == 0;
            // The hook's "full" takes the path of the kernel's own EAGAIN.
            const r: sys.Result(usize) = if (faked) .{ .ok = 0 } else send(sock, msgs[0..n]);
            q.stats.calls += @intFromBool(!faked);
            switch (r) {
                .ok => |took| {
                    for (counts[0..took]) |c| {
                        q.head += c;
                        q.stats.datagrams += c;
                    }
                    if (took == 0) {
                        q.stats.blocked += 1;
                        return .blocked;
                    }
                },
                .err => |e| {
                    if (counts[0] > 1) {
                        q.stats.gso_refused += 1;
                        if (e == .IO) sock.gso = false;
                        q.single_until = q.head + counts[0];
                    } else {
                        q.head += 1;
                        q.stats.dropped += 1;
                    }
                },
            }
        }
        q.head = 0;
        q.len = 0;
        q.used = 0;
        q.single_until = 0;
        return .done;
    }

    /// Items `i..i+count` as one message (GSO when more than one).
    pub fn message(q: *const SendQueue, i: usize, count: usize) Outgoing {
        const first = &q.items[i];
        const last = &q.items[i + count - 1];
        const end = last.off + last.len;
        return .{
            .bytes = q.arena[first.off..end],
            .peer = first.peer,
            .local = first.local,
            .ecn = first.ecn,
            .segment_len = if (count > 1) first.len else 0,
        };
    }
};

/// How many datagrams from `items[start]` make one GSO message: a run to one peer, from one
/// local address, with one ECN mark, laid end to end, all of the first's size but the last
/// (which may be shorter and ends the run), within the kernel's bounds on segments and bytes.
pub fn runLength(items: []const Queued, start: usize) usize {
    const first = &items[start];
    var bytes: usize = first.len;
    var i = start + 1;
    while (i < items.len and i - start < gso_segments_max) : (i += 1) {
        const d = &items[i];
        const prev = &items[i - 1];
        if (d.len > first.len or bytes + d.len > gso_bytes_max) break;
        if (prev.len < first.len) break; // a shorter one ended the run
        if (d.off != prev.off + prev.len or d.ecn != first.ecn) break;
        if (!d.peer.eql(&first.peer) or !d.local.eql(&first.local)) break;
        bytes += d.len;
    }
    return i - start;
}

/// The control messages of one outgoing message: the source address, ECN, the GSO size.
fn writeCmsgs(buf: *align(@alignOf(usize)) [control_len]u8, o: *const Outgoing) usize {
    var pos: usize = 0;
    if (o.local.family == linux.AF.INET) {
        const info: InPktinfo = .{ .ifindex = 0, .spec_dst = o.local.addr[0..4].*, .addr = .{ 0, 0, 0, 0 } };
        putCmsg(buf, &pos, linux.IPPROTO.IP, linux.IP.PKTINFO, std.mem.asBytes(&info));
    } else if (o.local.family == linux.AF.INET6) {
        const info: In6Pktinfo = .{ .addr = o.local.addr, .ifindex = 0 };
        putCmsg(buf, &pos, linux.IPPROTO.IPV6, linux.IPV6.PKTINFO, std.mem.asBytes(&info));
    }
    if (o.ecn != 0) {
        const tos: c_int = o.ecn;
        // The peer's family says which header carries it (IPv4-mapped peers: IPv4's TOS).
        if (o.peer.family == linux.AF.INET or isV4Mapped(&o.peer.addr))
            putCmsg(buf, &pos, linux.IPPROTO.IP, linux.IP.TOS, std.mem.asBytes(&tos))
        else
            putCmsg(buf, &pos, linux.IPPROTO.IPV6, linux.IPV6.TCLASS, std.mem.asBytes(&tos));
    }
    if (o.segmented()) putCmsg(buf, &pos, linux.IPPROTO.UDP, linux.UDP.SEGMENT, std.mem.asBytes(&o.segment_len));
    assert(pos <= control_len);
    return pos;
}

pub fn isV4Mapped(addr: *const [16]u8) bool {
    return std.mem.allEqual(u8, addr[0..10], 0) and addr[10] == 0xff and addr[11] == 0xff;
}
