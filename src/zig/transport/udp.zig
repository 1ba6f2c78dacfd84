//! UDP for QUIC, bytes only: one socket (IPv4, IPv6, dual-stack on `::`), datagrams received
//! and sent in batches (`recvmmsg`/`sendmmsg`), with what QUIC needs beside the bytes: the
//! peer, the local address each datagram came in on (answers must leave from it on a
//! multi-homed host), the ECN bits, and UDP GSO on send (one message, several datagrams
//! of one size) when the kernel offers it.
//!
//! Buffers are the caller's: a `RecvBatch` is a fixed array (`batch_len_max` datagrams of
//! `datagram_len_max` bytes); a send names the caller's bytes. Nothing here allocates.
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
const control_len = 128;
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

const Cmsghdr = extern struct { len: usize, level: i32, type: i32 };
const cmsg_header_len = std.mem.alignForward(usize, @sizeOf(Cmsghdr), @sizeOf(usize));

fn cmsgSpace(data_len: usize) usize {
    return cmsg_header_len + std.mem.alignForward(usize, data_len, @sizeOf(usize));
}

const InPktinfo = extern struct { ifindex: i32, spec_dst: [4]u8, addr: [4]u8 };
const In6Pktinfo = extern struct { addr: [16]u8, ifindex: u32 };

/// Appends one control message to `buf` at `pos.*`.
fn putCmsg(buf: []align(@alignOf(usize)) u8, pos: *usize, level: i32, kind: i32, data: []const u8) void {
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

fn readCmsgs(control: []const u8) Ancillary {
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
    /// `sendmmsg` calls, datagrams sent, times the kernel was full, datagrams refused (their
    /// address unreachable or refused: QUIC's loss recovery sees them as lost).
    stats: struct { calls: u64 = 0, datagrams: u64 = 0, blocked: u64 = 0, dropped: u64 = 0 } = .{},

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
            if (faked) {
                q.stats.blocked += 1;
                return .blocked;
            }
            const r = send(sock, msgs[0..n]);
            q.stats.calls += 1;
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
    fn message(q: *const SendQueue, i: usize, count: usize) Outgoing {
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
fn runLength(items: []const Queued, start: usize) usize {
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
    var server = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
    defer server.close();
    var client = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
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
    var server = switch (Socket.open(any6, .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
    defer server.close();
    any6.port = server.localAddress().?.port;
    var c4 = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
    defer c4.close();
    var c6 = switch (Socket.open(loopback6(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest, // no IPv6 here
    };
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
    var server = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
    defer server.close();
    var client = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
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
    var server = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
    defer server.close();
    var client = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
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
    var client = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
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
    var server = switch (Socket.open(any4, .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
    defer server.close();
    const got = try answerSources(&server);
    try expectFrom(2, got[0]);
    try expectFrom(1, got[1]); // without IP_PKTINFO: what the test would see
}

test "udp: on a dual-stack :: an IPv4 client's answer leaves from its IPv4 destination" {
    if (!secondLoopback()) return error.SkipZigTest;
    const any6: Peer = .{ .family = linux.AF.INET6, .port = 0, .addr = [_]u8{0} ** 16 };
    var server = switch (Socket.open(any6, .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
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

test "udp: a flushed queue arrives whole and in order, with GSO or one datagram a message" {
    const arena = try testing.allocator.alloc(u8, send_arena_bytes);
    defer testing.allocator.free(arena);
    var server = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
    defer server.close();
    var client = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
    defer client.close();
    // 60 datagrams (the receiver's default buffer holds them): 54 of 1,200 bytes fill a GSO
    // message; the rest, with a short last one, a second.
    var lens: [60]usize = [_]usize{1200} ** 60;
    lens[59] = 700;
    for ([_]bool{ true, false }) |gso| {
        client.gso = gso and client.gso;
        var q = testQueue(arena, &lens, server.localAddress().?);
        try testing.expectEqual(Flushed.done, q.flush(&client));
        try testing.expect(q.isEmpty() and q.used == 0);
        try testing.expectEqual(@as(u64, 60), q.stats.datagrams);
        try testing.expectEqual(@as(u64, if (client.gso) 1 else 2), q.stats.calls);
        try expectArrivals(&server, &lens);
    }
}

test "udp: a full kernel buffer keeps the rest queued, in order, nothing dropped" {
    const arena = try testing.allocator.alloc(u8, send_arena_bytes);
    defer testing.allocator.free(arena);
    var server = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
    defer server.close();
    var client = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
    defer client.close();
    client.gso = false;
    const lens = [_]usize{1000} ** 40;
    var q = testQueue(arena, &lens, server.localAddress().?);
    q.full_every = 2; // every second call: "full"
    try testing.expectEqual(Flushed.blocked, q.flush(&client)); // 32 taken, then full
    try testing.expectEqual(@as(usize, 32), q.head);
    try testing.expect(q.room() != null); // more may be queued behind them
    try testing.expectEqual(Flushed.done, q.flush(&client));
    try testing.expectEqual(@as(u64, 1), q.stats.blocked);
    try testing.expectEqual(@as(u64, 40), q.stats.datagrams);
    try testing.expectEqual(@as(u64, 0), q.stats.dropped);
    try expectArrivals(&server, &lens);
}

test "udp: queued datagrams keep their ECN marks, a GSO run one mark, over IPv4 and IPv6" {
    const arena = try testing.allocator.alloc(u8, send_arena_bytes);
    defer testing.allocator.free(arena);
    for ([_]bool{ false, true }) |v6| {
        const local = if (v6) loopback6(0) else loopback4(0);
        var server = switch (Socket.open(local, .{})) {
            .ok => |s| s,
            .err => return error.SkipZigTest, // no IPv6 here
        };
        defer server.close();
        var client = switch (Socket.open(local, .{})) {
            .ok => |s| s,
            .err => return error.SkipZigTest,
        };
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
    var server = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
    defer server.close();
    var client = switch (Socket.open(loopback4(0), .{})) {
        .ok => |s| s,
        .err => return error.SkipZigTest,
    };
    defer client.close();
    if (!client.gso or !server.enableGro()) return error.SkipZigTest;
    // 10 datagrams of 1,200 bytes and a short last one, ECT(0), in one GSO message.
    var lens = [_]usize{1200} ** 11;
    lens[10] = 300;
    const send_arena = try testing.allocator.alloc(u8, send_arena_bytes);
    defer testing.allocator.free(send_arena);
    var q = testQueue(send_arena, &lens, server.localAddress().?);
    for (q.items[0..q.len]) |*d| d.ecn = 2;
    try testing.expectEqual(Flushed.done, q.flush(&client));
    try testing.expectEqual(@as(u64, 1), q.stats.calls);
    var batch: RecvBatch = .{ .area = area };
    try testing.expectEqual(@as(usize, gro_batch_len), batch.capacity());
    var got: usize = 0;
    var messages: usize = 0;
    var rounds: usize = 0;
    while (got < lens.len and rounds < 100) : (rounds += 1) {
        const n = try receiveAll(&server, &batch, 1);
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
