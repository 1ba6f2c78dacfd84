//! Fuzz target for HTTP/3's wire layer: the frame reader (`http3/frame_reader.zig`) and
//! the QPACK decoder (`http3/qpack_decoder.zig`) on arbitrary input.
//!
//! `checkOne` runs one input three ways and asserts the contracts:
//!   - as a request stream and as a unidirectional stream (server and client side), fed
//!     whole and then split at input-derived points (every point in `.exhaustive` mode):
//!     the events and the outcome must not depend on the split; every step advances; a
//!     gathered payload stays within its buffer; DATA pieces add up to the frames' lengths;
//!   - as a QPACK connection: the input is cut into chunks, each either encoder-stream
//!     bytes or a field section on some stream. The table stays within its capacity and
//!     memory (no leak at the end, checked by the allocator), blocked streams within the
//!     limit, decoded sections within the field section limit; the encoder stream fed one
//!     byte at a time ends in the same table; every decoded section re-encoded by our
//!     static encoder decodes to the same fields.
//!
//! Runners: the tests below (the corpus, then a fixed number of seeded mutations) and
//! `fuzz/http3_main.zig` (time-bounded, ReleaseSafe).
const std = @import("std");
const builtin = @import("builtin");
const frames = @import("../http3/frames.zig");
const reader_mod = @import("../http3/frame_reader.zig");
const FrameReader = reader_mod.FrameReader;
const qpack = @import("../http3/qpack.zig");
const decoder_mod = @import("../http3/qpack_decoder.zig");
const encoder = @import("../http3/qpack_encoder.zig");
const Header = qpack.Header;

pub const max_input_bytes = 8 * 1024;

pub const Mode = enum { exhaustive, sampled };
pub const Failure = error{InvariantViolated};
pub var last_failure: []const u8 = "";
pub const Features = std.StaticBitSet(1 << 14);
pub var features: Features = Features.initEmpty();

fn check(ok: bool, comptime what: []const u8) Failure!void {
    if (ok) return;
    last_failure = what;
    if (builtin.is_test) std.debug.print("fuzz invariant violated: {s}\n", .{what});
    return error.InvariantViolated;
}

fn feature(comptime kind: u8, values: anytype) void {
    var hasher = std.hash.Wyhash.init(kind);
    inline for (values) |value| {
        const v: u64 = value;
        hasher.update(std.mem.asBytes(&v));
    }
    features.set(@intCast(hasher.final() % Features.bit_length));
}

fn errorFeature(err: anyerror) u64 {
    return @intFromError(err);
}

// ---- corpus ------------------------------------------------------------------------

/// Seeds: a request stream, a control stream, QPACK chunks (RFC 9204 Appendix B as
/// `chunk` records: tag, length, bytes; tag bit 0 = encoder stream, else a section).
pub const corpus = [_][]const u8{
    "\x01\x02\xc1\xd1\x21\x03abc\x00\x03xyz\x00\x00\x01\x01\xc0",
    "\x00\x04\x06\x01\x40\xdc\x07\x01\x08\x21\x01z\x0d\x01\x05\x07\x01\x04",
    "\x01\x22\x3f\xbd\x01\xc0\x0f\x77\x77\x77\x2e\x65\x78\x61\x6d\x70\x6c\x65\x2e\x63\x6f\x6d\xc1\x0c\x2f\x73\x61\x6d\x70\x6c\x65\x2f\x70\x61\x74\x68\x02\x04\x03\x81\x10\x11\x01\x18\x4a\x63\x75\x73\x74\x6f\x6d\x2d\x6b\x65\x79\x0c\x63\x75\x73\x74\x6f\x6d\x2d\x76\x61\x6c\x75\x65\x01\x01\x02\x04\x05\x05\x00\x80\xc1\x81\x01\x0f\x81\x0d\x63\x75\x73\x74\x6f\x6d\x2d\x76\x61\x6c\x75\x65\x32",
    "\x02\x04\x03\x81\x10\x11\x01\x0a\x3f\xbd\x01\xc0\x0f\x77\x77\x77\x2e\x65\x01\x18\x78\x61\x6d\x70\x6c\x65\x2e\x63\x6f\x6d\xc1\x0c\x2f\x73\x61\x6d\x70\x6c\x65\x2f\x70\x61\x74\x68\x00\x0f\x00\x00\x51\x0b\x2f\x69\x6e\x64\x65\x78\x2e\x68\x74\x6d\x6c",
    "\x00\x07\x00\x00\x51\x0b\x2f\x69\x6e\x64\x65\x78",
    "\x01\x04\x3f\x01\x41\x61\x01\x03\x01\x62\x00\x06\x02\x00\x80\x51\x81\x00",
    "\x01\x01\x02\x00\x02\x00\x00",
};

// ---- scratch (single-threaded; statics keep the stack small) --------------------------

var gather_buf: [512]u8 = undefined;
var scratch: [4096]u8 = undefined;
var fields_out: [64]Header = undefined;
var reencoded: [8192]u8 = undefined;
var scratch2: [8192]u8 = undefined;
var fields_out2: [64]Header = undefined;

pub fn checkOne(raw_input: []const u8, mode: Mode) Failure!void {
    const input = raw_input[0..@min(raw_input.len, max_input_bytes)];
    features = Features.initEmpty();
    const hash = std.hash.Wyhash.hash(0x4833, input);
    inline for (.{ .{ false, frames.Receiver.server }, .{ true, frames.Receiver.server }, .{ true, frames.Receiver.client } }) |c| {
        try checkFrames(input, c[0], c[1], mode, hash);
    }
    try checkQpack(input, limitsFor(hash));
    try checkQpack(input, rfc_limits);
}

/// The limits RFC 9204 Appendix B's examples assume, so its seeds decode.
const rfc_limits = decoder_mod.Limits{ .table_capacity_max = 220, .blocked_streams_max = 2, .field_section_bytes_max = 4096 };

// ---- frames -------------------------------------------------------------------------

/// What a run produced: a hash of its events (DATA pieces as bytes, not as pieces) and
/// how it ended.
const FrameRun = struct {
    digest: std.hash.Wyhash = std.hash.Wyhash.init(0),
    outcome: ?anyerror = null,
    events: u64 = 0,
    data_bytes: u64 = 0,
    foreign: bool = false,

    fn event(run: *FrameRun, e: reader_mod.Event) Failure!void {
        run.events += 1;
        const tag: u8 = @intFromEnum(e);
        // DATA pieces are hashed without their boundaries; the other events with theirs.
        if (e != .data) run.digest.update(&.{tag});
        switch (e) {
            .data => |d| {
                run.data_bytes += d.bytes.len;
                run.digest.update(d.bytes);
                if (d.last) run.digest.update("|");
            },
            .headers => |h| {
                try check(h.len <= gather_buf.len, "gathered HEADERS beyond its buffer");
                run.digest.update(h);
            },
            .push_promise => |p| run.digest.update(p.section),
            .stream_type => |t| {
                run.digest.update(&.{@intFromEnum(t)});
                run.foreign = t == .qpack_encoder or t == .qpack_decoder;
            },
            .settings => |s| run.digest.update(std.mem.asBytes(&s)),
            inline .goaway, .cancel_push, .max_push_id, .push_id => |id| run.digest.update(std.mem.asBytes(&id)),
        }
    }
};

fn newReader(uni: bool, receiver: frames.Receiver) FrameReader {
    return if (uni) FrameReader.initUnidirectional(receiver, &gather_buf) else FrameReader.initRequest(receiver, &gather_buf);
}

/// Feeds one piece; false once the reader failed or handed the stream to QPACK.
fn feedPiece(r: *FrameReader, run: *FrameRun, piece: []const u8) Failure!bool {
    var rest = piece;
    while (rest.len > 0) {
        if (run.foreign) return false;
        const step = r.next(rest) catch |err| {
            run.outcome = err;
            return false;
        };
        try check(step.consumed <= rest.len, "a step used more than its input");
        try check(step.consumed > 0 or step.event != null, "a step made no progress");
        rest = rest[step.consumed..];
        if (step.event) |e| try run.event(e);
    }
    return true;
}

fn runFrames(input: []const u8, uni: bool, receiver: frames.Receiver, cuts: []const usize) Failure!FrameRun {
    var r = newReader(uni, receiver);
    var run = FrameRun{};
    var start: usize = 0;
    for (cuts) |cut| {
        if (cut < start or cut > input.len) continue;
        if (!try feedPiece(&r, &run, input[start..cut])) return run;
        start = cut;
    }
    if (!try feedPiece(&r, &run, input[start..])) return run;
    r.finish() catch |err| {
        run.outcome = err;
    };
    return run;
}

fn checkFrames(input: []const u8, uni: bool, receiver: frames.Receiver, mode: Mode, hash: u64) Failure!void {
    var whole = try runFrames(input, uni, receiver, &.{});
    const whole_digest = whole.digest.final();
    try check(whole.data_bytes <= input.len, "DATA handed out more bytes than came in");
    feature('f', .{ @intFromBool(uni), @intFromEnum(receiver), if (whole.outcome) |e| errorFeature(e) else 0, @min(whole.events, 8) });
    var cuts: [3]usize = undefined;
    const points: usize = if (mode == .exhaustive and input.len <= 256) input.len + 1 else 8;
    for (0..points) |i| {
        const seed = hash +% i *% 0x9e3779b97f4a7c15;
        if (mode == .exhaustive and input.len <= 256) {
            cuts = .{ i, i, i };
        } else {
            const n = input.len + 1;
            cuts = .{ seed % n, (seed >> 16) % n, (seed >> 32) % n };
            std.mem.sort(usize, &cuts, {}, std.sort.asc(usize));
        }
        var split = try runFrames(input, uni, receiver, &cuts);
        try check(split.digest.final() == whole_digest, "events differ with the input split");
        try check(split.events >= whole.events or whole.foreign, "fewer events with the input split");
        try check(std.meta.eql(split.outcome, whole.outcome), "outcome differs with the input split");
    }
}

// ---- QPACK ----------------------------------------------------------------------------

const Chunk = struct { encoder_stream: bool, stream_id: u64, bytes: []const u8 };

/// Cuts the input into chunks: a tag byte (bit 0: encoder stream, else a section on
/// stream 4 * (tag >> 1)), a length byte, the bytes (fewer when the input ends).
fn nextChunk(input: []const u8, pos: *usize) ?Chunk {
    if (input.len - pos.* < 2) return null;
    const tag = input[pos.*];
    const len: usize = @min(input[pos.* + 1], input.len - pos.* - 2);
    const bytes = input[pos.* + 2 ..][0..len];
    pos.* += 2 + len;
    return .{ .encoder_stream = tag & 1 == 1, .stream_id = 4 * @as(u64, tag >> 1), .bytes = bytes };
}

fn limitsFor(hash: u64) decoder_mod.Limits {
    const capacities = [_]u32{ 0, 32, 220, 4096 };
    return .{
        .table_capacity_max = capacities[hash % capacities.len],
        .blocked_streams_max = @intCast((hash >> 8) % 4),
        .field_section_bytes_max = @intCast(64 + (hash >> 16) % 4096),
    };
}

fn checkQpack(input: []const u8, limits: decoder_mod.Limits) Failure!void {
    var debug_allocator: std.heap.DebugAllocator(.{}) = .init;
    var whole_state: [3]u64 = undefined;
    {
        var d = decoder_mod.Decoder.initWith(debug_allocator.allocator(), limits);
        defer d.deinit();
        whole_state = try runQpack(&d, input, false);
    }
    var bytewise_state: [3]u64 = undefined;
    {
        var d = decoder_mod.Decoder.initWith(debug_allocator.allocator(), limits);
        defer d.deinit();
        bytewise_state = try runQpack(&d, input, true);
    }
    try check(std.mem.eql(u64, &whole_state, &bytewise_state), "the encoder stream fed bytewise ends elsewhere");
    try check(debug_allocator.deinit() == .ok, "the decoder leaked memory");
}

/// Runs the chunks; returns (inserted, size, chunks done) for comparing runs.
fn runQpack(d: *decoder_mod.Decoder, input: []const u8, bytewise: bool) Failure![3]u64 {
    var pos: usize = 0;
    var done: u64 = 0;
    while (nextChunk(input, &pos)) |chunk| : (done += 1) {
        const ok = if (chunk.encoder_stream) feedEncoder(d, chunk.bytes, bytewise) else try decodeOne(d, chunk);
        try checkTable(d);
        d.consumeOutput(d.output().len);
        if (!ok) break;
    }
    return .{ d.inserted, d.size, done };
}

fn feedEncoder(d: *decoder_mod.Decoder, bytes: []const u8, bytewise: bool) bool {
    if (bytewise) {
        for (bytes) |b| d.feedEncoderStream(&.{b}) catch |err| return qpackFailed(err);
    } else {
        d.feedEncoderStream(bytes) catch |err| return qpackFailed(err);
    }
    d.acknowledgeInserts() catch |err| return qpackFailed(err);
    feature('e', .{ @min(d.count, 8), d.capacity / 64 });
    return true;
}

fn qpackFailed(err: anyerror) bool {
    feature('q', .{errorFeature(err)});
    return false;
}

fn checkTable(d: *const decoder_mod.Decoder) Failure!void {
    try check(d.size <= d.capacity and d.capacity <= d.limits.table_capacity_max, "table beyond its capacity");
    try check(d.count <= d.ring.len and d.count <= d.inserted, "ring count inconsistent");
    try check(d.ring.len <= @max(1, d.limits.table_capacity_max / qpack.entry_overhead), "ring beyond capacity / 32");
    try check(d.blockedCount() <= d.limits.blocked_streams_max, "more blocked streams than allowed");
    try check(d.pending.items.len <= d.instructionBytesMax(), "partial instruction beyond its bound");
    try check(d.acknowledged <= d.inserted, "acknowledged inserts we never had");
}

/// Decodes one section; false on a connection error. A decoded section must respect
/// the field section limit and round-trip through the static encoder.
fn decodeOne(d: *decoder_mod.Decoder, chunk: Chunk) Failure!bool {
    const outcome = d.decodeSection(chunk.stream_id, chunk.bytes, &scratch, &fields_out, .acknowledge) catch |err| {
        if (err == error.FieldSectionTooLarge) {
            // As the session does: an instruction that cannot be owed ends the connection.
            d.cancelStream(chunk.stream_id) catch |e| return qpackFailed(e);
            feature('s', .{1});
            return true;
        }
        return qpackFailed(err);
    };
    const fields = switch (outcome) {
        .blocked => {
            feature('b', .{d.blockedCount()});
            return true;
        },
        .fields => |f| f,
    };
    var section_bytes: usize = 0;
    for (fields) |f| section_bytes += f.name.len + f.value.len + qpack.entry_overhead;
    try check(section_bytes <= d.limits.field_section_bytes_max, "decoded section beyond the limit");
    feature('d', .{ @min(fields.len, 16), @intFromBool(d.inserted > 0) });
    try checkReencode(fields);
    return true;
}

fn checkReencode(fields: []const Header) Failure!void {
    const n = encoder.encodeTrailers(&reencoded, fields) catch return check(false, "re-encoding a decoded section ran out of room");
    var again = decoder_mod.Decoder.initWith(std.heap.page_allocator, .{ .table_capacity_max = 0, .blocked_streams_max = 0, .field_section_bytes_max = std.math.maxInt(u32) });
    defer again.deinit();
    const outcome = again.decodeSection(0, reencoded[0..n], &scratch2, &fields_out2, .acknowledge) catch return check(false, "our encoder's section does not decode");
    const back = outcome.fields;
    try check(back.len == fields.len, "re-encoded section has another field count");
    for (fields, back) |a, b| {
        try check(std.mem.eql(u8, a.name, b.name) and std.mem.eql(u8, a.value, b.value), "re-encoded field differs");
    }
}

// ---- tests ------------------------------------------------------------------------------

fn testOne(_: void, input: []const u8) anyerror!void {
    try checkOne(input, if (builtin.fuzz) .sampled else .exhaustive);
}

test "fuzz: http3 frame reader and QPACK decoder over the corpus" {
    try std.testing.fuzz({}, testOne, .{ .corpus = &corpus });
}

test "fuzz: http3 seeds do what they are for" {
    // The Appendix B seed runs to its end: five inserts, the last evicting the first.
    var d = decoder_mod.Decoder.init(rfc_limits);
    defer d.deinit();
    const state = try runQpack(&d, corpus[2], false);
    try std.testing.expectEqual([3]u64{ 5, 215, 6 }, state);
    // The request seed reads whole: its events, no error.
    const run = try runFrames(corpus[0], false, .server, &.{});
    try std.testing.expectEqual(@as(?anyerror, null), run.outcome);
    try std.testing.expectEqual(@as(u64, 4), run.events); // HEADERS, DATA, empty DATA, trailers
}

test "fuzz: http3 fixed run of seeded mutations" {
    var prng = std.Random.DefaultPrng.init(0x4833_2026);
    const random = prng.random();
    var buf: [512]u8 = undefined;
    for (0..3000) |_| {
        const parent = corpus[random.uintLessThan(usize, corpus.len)];
        var len: usize = @min(parent.len, buf.len);
        @memcpy(buf[0..len], parent[0..len]);
        for (0..1 + random.uintLessThan(usize, 6)) |_| {
            const at = if (len == 0) 0 else random.uintLessThan(usize, len);
            switch (random.uintLessThan(u8, 4)) {
                0 => if (len > 0) {
                    buf[at] ^= @as(u8, 1) << random.int(u3);
                },
                1 => if (len > 0) {
                    buf[at] = random.int(u8);
                },
                2 => if (len < buf.len) {
                    std.mem.copyBackwards(u8, buf[at + 1 .. len + 1], buf[at..len]);
                    buf[at] = random.int(u8);
                    len += 1;
                },
                else => len = at,
            }
        }
        try checkOne(buf[0..len], .sampled);
    }
}
