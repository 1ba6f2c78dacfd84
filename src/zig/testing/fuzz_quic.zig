//! Fuzz targets for QUIC's wire layer (`quic/`): hostile datagrams, frame payloads and
//! transport parameters, each checked against the code's contract, not just for crashes.
//!
//! An input's first byte picks the target, the rest is its bytes:
//!   - 0, datagram: every coalesced packet's header is parsed (`packet.parse`); the bounds
//!     of what it returns are checked; Initials are unprotected with the Initial keys of
//!     their DCID and 1-RTT packets with fixed keys, and a packet that opens must protect
//!     back to the very bytes received; its frames are then walked as below. Version
//!     Negotiation answers are built and parsed back; Retry tags checked.
//!   - 1, frames: the second byte picks the packet type; the frame iterator walks the
//!     rest. Every frame's slices lie inside the payload, and every frame written again
//!     (`frames.write`, ACKs through `frames.writeAck` from their ranges) parses back equal.
//!   - 2, transport parameters: `decodeClient`; what it accepts is encoded by
//!     `encodeServer` and decodes back equal.
//!
//! Runners: the tests below (the seed corpus, then a fixed number of mutated inputs) and
//! `fuzz/quic_main.zig` (time-bounded, ReleaseSafe, for CI).
const std = @import("std");
const builtin = @import("builtin");
const varint = @import("../quic/varint.zig");
const packet = @import("../quic/packet.zig");
const protection = @import("../quic/protection.zig");
const frames = @import("../quic/frames.zig");
const transport_params = @import("../quic/transport_params.zig");
const suite = @import("../quic/suite.zig");

/// Longer inputs are cut: a UDP datagram carries at most 65527 bytes, but nothing in the
/// code depends on lengths past a few KiB.
pub const max_input_bytes = 4096;
/// The server's short header connection ID length the datagram target assumes.
const short_dcid_len = 8;
/// Coalesced packets walked per datagram at most (each is at least one byte anyway).
const packets_max = 64;

pub const Failure = error{InvariantViolated};
pub var last_failure: []const u8 = "";
/// Outcomes of the last `checkOne` (target, packet kinds, errors, frame types): the
/// mutation fuzzer keeps inputs that set a bit never seen before.
pub const Features = std.StaticBitSet(1 << 12);
pub var features: Features = Features.initEmpty();

fn check(ok: bool, comptime what: []const u8) Failure!void {
    if (ok) return;
    last_failure = what;
    if (builtin.is_test) std.debug.print("fuzz invariant violated: {s}\n", .{what});
    return error.InvariantViolated;
}

fn feature(comptime kind: u8, value: u64) void {
    var hasher = std.hash.Wyhash.init(kind);
    hasher.update(std.mem.asBytes(&value));
    features.set(@intCast(hasher.final() % Features.bit_length));
}

pub const Target = enum(u8) { datagram = 0, frames = 1, transport_params = 2, sealed = 3 };

/// Checks one input; error.InvariantViolated (with `last_failure`) if the code broke its
/// contract. A panic is a failure too (the runners keep safety checks on).
pub fn checkOne(raw: []const u8) Failure!void {
    features = Features.initEmpty();
    if (raw.len == 0) return;
    const input = raw[1..@min(raw.len, max_input_bytes)];
    const target: Target = switch (raw[0] % 4) {
        0 => .datagram,
        1 => .frames,
        2 => .transport_params,
        else => .sealed,
    };
    feature('t', @intFromEnum(target));
    switch (target) {
        .datagram => try checkDatagram(input),
        .frames => {
            if (input.len == 0) return;
            const kinds = [_]packet.Kind{ .initial, .zero_rtt, .handshake, .one_rtt };
            try checkFrames(input[1..], kinds[input[0] % kinds.len], if (input[0] & 0x80 != 0) .server else .client);
        },
        .transport_params => try checkTransportParams(input),
        .sealed => try checkSealed(input),
    }
}

var sealed_buf: [max_input_bytes + 128]u8 = undefined;

/// Mutated packets never authenticate, so this target seals its input first: a packet
/// number and a DCID from the first bytes, the rest as frames, built into an Initial or a
/// 1-RTT packet, protected, then parsed and unprotected as received. The frames must come
/// back, the packet number too, then they are walked like the frames target.
fn checkSealed(input: []const u8) Failure!void {
    if (input.len < 6) return;
    const pn_len: usize = (input[0] & 3) + 1;
    const largest = std.mem.readInt(u32, input[1..5], .big);
    const pn: u64 = @as(u64, largest) + 1 + (input[0] >> 2);
    const dcid = input[6..][0..@min(input[5] % (packet.cid_len_max + 1), input.len - 6)];
    const payload = input[6 + dcid.len ..];
    const padding = protection.payloadLenMin(pn_len) -| payload.len;
    const one_rtt = input[0] & 0x80 != 0;
    const keys = if (one_rtt) protection.Keys.init(&fixed_secret) else protection.initialKeys(dcid).client;
    const b = if (one_rtt)
        packet.writeShortHeader(&sealed_buf, dcid, pn, pn_len, 0, false) catch unreachable
    else
        packet.writeLongHeader(&sealed_buf, .{ .long_type = .initial, .dcid = dcid, .scid = "s", .pn = pn, .pn_len = pn_len }, payload.len + padding, protection.tag_len) catch unreachable;
    @memcpy(sealed_buf[b.header_len..][0..payload.len], payload);
    @memset(sealed_buf[b.header_len + payload.len ..][0..padding], 0);
    const len = b.header_len + payload.len + padding + protection.tag_len;
    protection.protect(&keys, sealed_buf[0..len], b.pn_offset, pn);
    const h = packet.parse(sealed_buf[0..len], dcid.len) catch return check(false, "a sealed packet parses");
    try check(h.len == len and h.pn_offset == b.pn_offset, "a sealed packet's bounds are found");
    const opened = protection.unprotect(&keys, sealed_buf[0..len], h.pn_offset, largest) catch return check(false, "a sealed packet opens");
    try check(opened.header.pn == pn, "the packet number comes back");
    try check(std.mem.eql(u8, opened.payload[0..payload.len], payload), "the frames come back");
    feature('s', @intFromBool(one_rtt));
    try checkFrames(opened.payload, if (one_rtt) .one_rtt else .initial, .client);
}

var datagram_buf: [max_input_bytes]u8 = undefined;

fn checkDatagram(datagram: []const u8) Failure!void {
    var offset: usize = 0;
    var count: usize = 0;
    while (offset < datagram.len and count < packets_max) : (count += 1) {
        const rest = datagram[offset..];
        const h = packet.parse(rest, short_dcid_len) catch |err| {
            feature('p', @intFromError(err));
            return;
        };
        feature('k', @intFromEnum(h.kind));
        try check(h.len > 0 and h.len <= rest.len, "a packet's end lies inside the datagram");
        try check(h.pn_offset <= h.len, "the packet number starts inside the packet");
        try checkInside(rest, h.dcid);
        try checkInside(rest, h.scid);
        try checkInside(rest, h.token);
        try checkPacket(rest[0..h.len], &h, datagram.len);
        offset += h.len;
    }
}

fn checkInside(outer: []const u8, inner: []const u8) Failure!void {
    if (inner.len == 0) return;
    const start = @intFromPtr(inner.ptr);
    try check(start >= @intFromPtr(outer.ptr) and start + inner.len <= @intFromPtr(outer.ptr) + outer.len, "a slice lies inside its input");
}

fn checkPacket(bytes: []const u8, h: *const packet.Header, datagram_len: usize) Failure!void {
    switch (h.kind) {
        .initial => {
            const keys = protection.initialKeys(h.dcid).client;
            try checkUnprotect(&keys, bytes, h);
        },
        .one_rtt, .handshake, .zero_rtt => {
            const keys = protection.Keys.init(&fixed_secret);
            try checkUnprotect(&keys, bytes, h);
        },
        .retry => feature('r', @intFromBool(packet.retryTagValid("odcid", bytes))),
        .version_negotiation => {
            var it = packet.negotiatedVersions(bytes, h);
            var n: usize = 0;
            while (it.next()) |_| n += 1;
            try check(n <= bytes.len / 4, "VN versions fit the packet");
        },
        .unsupported_version => if (packet.wantsVersionNegotiation(h, datagram_len)) {
            var out: [600]u8 = undefined;
            const n = packet.writeVersionNegotiation(&out, h, &.{packet.version_1}, 0) catch unreachable;
            const vn = packet.parse(out[0..n], 0) catch return check(false, "a VN packet built parses");
            try check(vn.kind == .version_negotiation, "a VN packet built is one");
            try check(std.mem.eql(u8, vn.dcid, h.scid) and std.mem.eql(u8, vn.scid, h.dcid), "VN swaps the connection IDs");
        },
    }
}

const fixed_secret = suite.Secret.init(.chacha20_poly1305_sha256, &([_]u8{0x5a} ** 32));

fn checkUnprotect(keys: *const protection.Keys, bytes: []const u8, h: *const packet.Header) Failure!void {
    const copy = datagram_buf[0..bytes.len];
    @memcpy(copy, bytes);
    const opened = protection.unprotect(keys, copy, h.pn_offset, null) catch |err| {
        feature('u', @intFromError(err));
        return;
    };
    feature('o', @intFromEnum(h.kind));
    try check(opened.header.header_len + opened.payload.len + protection.tag_len == bytes.len, "header, payload and tag make the packet");
    const frames_copy = try copyPayload(opened.payload);
    // Sealing the opened packet again with the same keys gives back the bytes received.
    protection.protect(keys, copy, h.pn_offset, opened.header.pn);
    try check(std.mem.eql(u8, copy, bytes), "unprotect then protect is the identity");
    try checkFrames(frames_copy, h.kind, .client);
}

var payload_buf: [max_input_bytes]u8 = undefined;

fn copyPayload(payload: []const u8) Failure![]const u8 {
    @memcpy(payload_buf[0..payload.len], payload);
    return payload_buf[0..payload.len];
}

fn checkFrames(payload: []const u8, kind: packet.Kind, sender: frames.Sender) Failure!void {
    var it = frames.Iterator.init(payload, kind, sender);
    var count: usize = 0;
    while (true) : (count += 1) {
        const frame = it.next() catch |err| {
            feature('e', @as(u64, @intFromError(err)) ^ (@as(u64, @min(it.failed_type, 0x20)) << 16));
            try check((it.next() catch null) == null, "the walk ends at an error");
            return;
        } orelse {
            feature('n', std.math.log2_int_ceil(usize, count + 1));
            break;
        };
        try check(count < payload.len, "frames each take a byte at least");
        feature('f', @intFromEnum(std.meta.activeTag(frame)));
        try check(frames.allowedIn(frames.typeOf(frame), kind), "a frame read is allowed in its packet type");
        try check(sender == .server or !frames.serverOnly(frames.typeOf(frame)), "a client's frames are not the server's own");
        try checkFrameSlices(payload, frame);
        try checkRewrite(frame);
    }
}

fn checkFrameSlices(payload: []const u8, frame: frames.Frame) Failure!void {
    switch (frame) {
        .crypto => |f| try checkInside(payload, f.data),
        .stream => |f| try checkInside(payload, f.data),
        .new_token => |t| try checkInside(payload, t),
        .new_connection_id => |f| {
            try checkInside(payload, f.cid);
            try checkInside(payload, f.reset_token);
        },
        .connection_close => |f| try checkInside(payload, f.reason),
        .ack => |a| try checkInside(payload, a.range_bytes),
        else => {},
    }
}

var rewrite_buf: [max_input_bytes + 64]u8 = undefined;

/// Writes a parsed frame again and parses the result: the same frame.
fn checkRewrite(frame: frames.Frame) Failure!void {
    var w: varint.Writer = .{ .buf = &rewrite_buf };
    if (frame == .ack) return checkAckRewrite(&frame.ack);
    if (frame == .new_token and frame.new_token.len == 0) return;
    frames.write(&w, frame) catch return check(false, "a parsed frame fits the rewrite buffer");
    var it = frames.Iterator.init(w.written(), .one_rtt, .server);
    const again = (it.next() catch return check(false, "a rewritten frame parses")) orelse return check(false, "a rewritten frame is there");
    try check(it.reader.done(), "a rewritten frame is all its bytes");
    try check(frameEql(frame, again), "a rewritten frame parses back equal");
}

fn frameEql(a: frames.Frame, b: frames.Frame) bool {
    var ba: [max_input_bytes + 64]u8 = undefined;
    var bb: [max_input_bytes + 64]u8 = undefined;
    var wa: varint.Writer = .{ .buf = &ba };
    var wb: varint.Writer = .{ .buf = &bb };
    frames.write(&wa, a) catch return false;
    frames.write(&wb, b) catch return false;
    return std.mem.eql(u8, wa.written(), wb.written());
}

fn checkAckRewrite(a: *const frames.Ack) Failure!void {
    var ranges: [frames.ack_ranges_max + 1]frames.AckRange = undefined;
    var n: usize = 0;
    var rit = a.ranges();
    while (rit.next()) |r| : (n += 1) {
        try check(n < ranges.len, "an ACK's ranges are capped");
        try check(r.smallest <= r.largest, "an ACK range is ordered");
        if (n > 0) try check(r.largest + 2 <= ranges[n - 1].smallest, "ACK ranges descend with gaps");
        ranges[n] = r;
    }
    try check(n == a.range_count + 1, "an ACK yields its count of ranges");
    var w: varint.Writer = .{ .buf = &rewrite_buf };
    frames.writeAck(&w, ranges[0..n], a.ack_delay, 0, a.ecn) catch return check(false, "an ACK fits the rewrite buffer");
    var it = frames.Iterator.init(w.written(), .one_rtt, .server);
    const again = (it.next() catch return check(false, "a rewritten ACK parses")) orelse return check(false, "a rewritten ACK is there");
    try check(again == .ack and again.ack.largest == a.largest and again.ack.ack_delay == a.ack_delay and again.ack.range_count == a.range_count, "a rewritten ACK parses back equal");
}

fn checkTransportParams(bytes: []const u8) Failure!void {
    var p = transport_params.decodeClient(bytes) catch |err| {
        feature('x', @intFromError(err));
        return;
    };
    feature('y', @intFromBool(p.disable_active_migration));
    p.original_destination_connection_id = transport_params.Cid.init("o");
    var out: [512]u8 = undefined;
    const n = transport_params.encodeServer(&out, &p) catch return check(false, "accepted parameters encode");
    // Leave out the server-only original_destination_connection_id (3 bytes) the client may not send.
    var back = transport_params.decodeClient(out[3..n]) catch return check(false, "encoded parameters decode");
    back.original_destination_connection_id = p.original_destination_connection_id;
    try check(std.meta.eql(p, back), "parameters decode back equal");
}

// ---- the seed corpus ---------------------------------------------------------------------

fn unhex(comptime s: []const u8) [s.len / 2]u8 {
    @setEvalBranchQuota(200_000);
    var out: [s.len / 2]u8 = undefined;
    _ = std.fmt.hexToBytes(&out, s) catch unreachable;
    return out;
}

/// Seeds: each a target byte and its bytes (RFC 9001 Appendix A's packets among them).
pub const corpus = [_][]const u8{
    &([_]u8{0} ++ unhex(protection.a2_packet_hex)),
    &([_]u8{0} ++ unhex(protection.a3_packet_hex)),
    &([_]u8{0} ++ unhex("ff000000010008f067a5502a4262b5746f6b656e04a265ba2eff4d829058fb3f0f2496ba")),
    &([_]u8{0} ++ unhex("8000000000020102030a0b0c00000001")),
    &([_]u8{0} ++ unhex("c0ff00001d04010203040405060708") ++ [_]u8{0} ** 1200),
    &([_]u8{0} ++ unhex("4c0102030405060708aabbccddeeff00112233445566778899")),
    &([_]u8{ 1, 3 } ++ unhex("0201000000" ++ "030a00010206000102030405" ++ "0e0400036162630f080005" ++ "0405060708" ++ "1800001408090a0b0c0d0e0f101112131415161718191a1b" ++ "00112233445566778899aabbccddeeff")),
    &([_]u8{ 1, 0 } ++ unhex("06004005" ++ "6869686968" ++ "1c0700026f6b" ++ "000000" ++ "01")),
    &([_]u8{ 1, 0x83 } ++ unhex("1e07026869" ++ "1a0102030405060708" ++ "1b0102030405060708" ++ "1d0500" ++ "10405012400a13011401150102160117021904")),
    &([_]u8{2} ++ unhex("0408ffffffffffffffff05048000ffff07048000ffff0801100104800075300901100f088394c8f03e51570806048000ffff")),
    &([_]u8{ 3, 0x01, 0, 0, 0, 9, 8 } ++ "abcdefgh".* ++ unhex("0600056869686968" ++ "0200000000")),
    &([_]u8{ 3, 0x82, 0xff, 0xff, 0xff, 0xf0, 0 } ++ unhex("0f0400036162631c0700026f6b")),
    &([_]u8{2} ++ unhex("0f0101" ++ "0a0114" ++ "0b027fff" ++ "0e0102" ++ "0c00" ++ "030244b0" ++ "1b0474657374")),
};

const testing = std.testing;

test "fuzz: quic, the seed corpus passes every check" {
    for (corpus) |input| try checkOne(input);
}

fn reaches(input: []const u8, comptime kind: u8, value: u64) !bool {
    try checkOne(input);
    const reached = features;
    features = Features.initEmpty();
    feature(kind, value);
    return reached.supersetOf(features);
}

test "fuzz: quic, the seeds reach what they are for" {
    // The A.2 Initial opens and protects back; the sealed seeds open; parameters decode.
    try testing.expect(try reaches(corpus[0], 'o', @intFromEnum(packet.Kind.initial)));
    try testing.expect(try reaches(corpus[9], 'y', 0));
    try testing.expect(try reaches(corpus[10], 's', 0));
    try testing.expect(try reaches(corpus[11], 's', 1));
    try testing.expect(try reaches(corpus[12], 'y', 1));
}

test "fuzz: quic, a fixed run of mutated inputs" {
    var prng = std.Random.DefaultPrng.init(0x9000);
    const random = prng.random();
    var buf: [max_input_bytes]u8 = undefined;
    for (0..3000) |_| {
        const seed = corpus[random.uintLessThan(usize, corpus.len)];
        var len = seed.len;
        @memcpy(buf[0..len], seed);
        for (0..1 + random.uintLessThan(usize, 6)) |_| len = mutate(random, &buf, len);
        try checkOne(buf[0..len]);
    }
}

/// A few kinds of mutation (flips, set bytes, varint-shaped values, truncation, inserted
/// and removed runs), shared by the test run and `fuzz/quic_main.zig`.
pub fn mutate(random: std.Random, buf: []u8, len: usize) usize {
    var n = len;
    switch (random.uintLessThan(u8, 7)) {
        0 => if (n > 1) {
            buf[1 + random.uintLessThan(usize, n - 1)] ^= @as(u8, 1) << random.int(u3);
        },
        1 => if (n > 1) {
            buf[1 + random.uintLessThan(usize, n - 1)] = random.int(u8);
        },
        2 => if (n > 1) { // a varint-shaped value: a length prefix and all-ones or zeros
            const at = 1 + random.uintLessThan(usize, n - 1);
            const values = [_]u8{ 0x00, 0x3f, 0x40, 0x7f, 0x80, 0xbf, 0xc0, 0xff, 0x14, 0x15 };
            buf[at] = values[random.uintLessThan(usize, values.len)];
        },
        3 => if (n > 1) {
            n = 1 + random.uintLessThan(usize, n - 1);
        },
        4 => if (n > 1) { // remove a run
            const at = 1 + random.uintLessThan(usize, n - 1);
            const count = @min(n - at, 1 + random.uintLessThan(usize, 16));
            std.mem.copyForwards(u8, buf[at .. n - count], buf[at + count .. n]);
            n -= count;
        },
        5 => { // insert random bytes
            const count = @min(buf.len - n, 1 + random.uintLessThan(usize, 16));
            const at = if (n > 1) 1 + random.uintLessThan(usize, n - 1) else n;
            std.mem.copyBackwards(u8, buf[at + count .. n + count], buf[at..n]);
            random.bytes(buf[at..][0..count]);
            n += count;
        },
        6 => if (n > 0) { // another target for the same bytes
            buf[0] = random.int(u8);
        },
        else => unreachable,
    }
    return n;
}
