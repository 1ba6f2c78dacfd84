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
//! `fuzz_quic_main.zig` (time-bounded, ReleaseSafe, for CI).
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

pub const Target = enum(u8) { datagram = 0, frames = 1, transport_params = 2 };

/// Checks one input; error.InvariantViolated (with `last_failure`) if the code broke its
/// contract. A panic is a failure too (the runners keep safety checks on).
pub fn checkOne(raw: []const u8) Failure!void {
    features = Features.initEmpty();
    if (raw.len == 0) return;
    const input = raw[1..@min(raw.len, max_input_bytes)];
    const target: Target = switch (raw[0] % 3) {
        0 => .datagram,
        1 => .frames,
        else => .transport_params,
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
    }
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
            feature('e', @intFromError(err) ^ (it.failed_type << 8));
            try check((it.next() catch null) == null, "the walk ends at an error");
            return;
        } orelse break;
        try check(count < payload.len, "frames each take a byte at least");
        feature('f', @intFromEnum(std.meta.activeTag(frame)));
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
    &([_]u8{2} ++ unhex("0f0101" ++ "0a0114" ++ "0b027fff" ++ "0e0102" ++ "0c00" ++ "03024400" ++ "9b0474657374")),
};

const testing = std.testing;

test "fuzz quic: the seed corpus passes every check" {
    for (corpus) |input| try checkOne(input);
}

test "fuzz quic: the seeds reach what they are for" {
    // The A.2 Initial opens (feature 'o') and its CRYPTO frame is walked.
    try checkOne(corpus[0]);
    var reached = features;
    features = Features.initEmpty();
    feature('o', @intFromEnum(packet.Kind.initial));
    try testing.expect(reached.supersetOf(features));
    try checkOne(corpus[9]);
    reached = features;
    features = Features.initEmpty();
    feature('y', 0);
    try testing.expect(reached.supersetOf(features));
}

test "fuzz quic: a fixed run of mutated inputs" {
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
/// and removed runs), shared by the test run and `fuzz_quic_main.zig`.
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
