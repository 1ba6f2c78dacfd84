//! The QPACK decoder (RFC 9204): the peer's dynamic table, its encoder stream read
//! incrementally, field sections decoded (or blocked until their inserts arrive), and the
//! decoder-stream instructions we owe the peer. Sans-IO: bytes in, fields and bytes out.
//!
//! Memory, all bounded by our SETTINGS: the table's entries (their sizes sum to at most
//! the capacity we advertise; one allocation per entry, owning its name and value), the
//! ring of entries (at most capacity / 32 slots), one partial encoder-stream instruction
//! (`instructionBytesMax`), a list of blocked streams (held only while one is) and an output buffer (held only while bytes wait in it).
//!
//! Decoded fields are slices into the caller's scratch buffer (Huffman strings, copies
//! of dynamic entries), into the section itself (plain literals) or into the static
//! table, as `http2/hpack.zig`'s decoder hands them out.
const std = @import("std");
const builtin = @import("builtin");
const qpack = @import("qpack.zig");

pub const Header = qpack.Header;
const static_table = qpack.static_table;

/// Which error a failure is on the wire (`frames.ErrorCode`): DecompressionFailed is
/// QPACK_DECOMPRESSION_FAILED, EncoderStream QPACK_ENCODER_STREAM_ERROR, both connection
/// errors. FieldSectionTooLarge is the request's fault alone (431, or the stream reset):
/// the table is untouched, and the session then calls `cancelStream`. DecoderStreamFull
/// means the caller did not drain `output()`: our contract, not the peer's.
pub const Error = error{ DecompressionFailed, EncoderStream, FieldSectionTooLarge, DecoderStreamFull, OutOfMemory };
/// What may keep a decoder-stream instruction from being owed: no room left in `output()`
/// (the caller did not drain it) or no memory for it.
pub const OutputError = error{ DecoderStreamFull, OutOfMemory };

/// The table's bytes when no allocator is given; as `http2/hpack.zig` chooses.
const default_allocator = if (builtin.link_libc)
    std.heap.c_allocator
else if (builtin.is_test)
    std.testing.allocator
else
    std.heap.page_allocator;

/// The most blocked streams any SETTINGS_QPACK_BLOCKED_STREAMS of ours may allow: the
/// list is a fixed array.
pub const blocked_streams_limit = 64;
/// Decoder-stream bytes held until the caller takes them (one instruction is at most 10).
pub const output_bytes_max = 256;
const instruction_len_max = 10;

pub const Limits = struct {
    /// Our SETTINGS_QPACK_MAX_TABLE_CAPACITY.
    table_capacity_max: u32 = 4096,
    /// Our SETTINGS_QPACK_BLOCKED_STREAMS.
    blocked_streams_max: u16 = 16,
    /// Our SETTINGS_MAX_FIELD_SECTION_SIZE (RFC 9114 4.2.2: names, values, 32 per field).
    field_section_bytes_max: u32 = 16384,
};

/// A decodeSection result: the fields, or blocked until more inserts arrive (the caller
/// keeps the section and calls again once `unblockedStream` names the stream).
pub const Outcome = union(enum) { fields: []Header, blocked };

/// Whether decodeSection emits the Section Acknowledgment itself (the session always
/// does); `.deferred` leaves it to the caller (`acknowledgeSection`) or to a cancel.
pub const Ack = enum { acknowledge, deferred };

pub const Entry = struct {
    /// name ++ value, owned.
    bytes: []u8,
    name_len: u32,

    pub fn header(e: *const Entry) Header {
        return .{ .name = e.bytes[0..e.name_len], .value = e.bytes[e.name_len..] };
    }
    fn size(e: *const Entry) usize {
        return e.bytes.len + qpack.entry_overhead;
    }
};

const Blocked = struct { stream_id: u64, required_insert_count: u64 };

pub const Decoder = struct {
    gpa: std.mem.Allocator,
    limits: Limits,
    /// The capacity the peer last set (starts at 0, RFC 9204 3.2.3).
    capacity: u32 = 0,
    /// Sum of the entries' sizes.
    size: usize = 0,
    /// Ring of entries: `head` the oldest, absolute index `inserted - count` .. `inserted - 1`.
    ring: []Entry = &.{},
    head: usize = 0,
    count: usize = 0,
    /// Inserts received in all (the Insert Count).
    inserted: u64 = 0,
    /// The Known Received Count as the peer will learn it from what we emitted.
    acknowledged: u64 = 0,
    /// A partial encoder-stream instruction, waiting for the rest.
    pending: std.ArrayListUnmanaged(u8) = .empty,
    /// Room for `limits.blocked_streams_max` blocked streams, allocated when the first one
    /// blocks and freed when none is (an idle session holds none).
    blocked: []Blocked = &.{},
    blocked_len: usize = 0,
    /// Decoder-stream bytes owed (`output_bytes_max` of room, allocated by the first
    /// instruction and freed once all was sent: an idle session holds none).
    out: []u8 = &.{},
    out_len: usize = 0,

    pub fn init(limits: Limits) Decoder {
        return initWith(default_allocator, limits);
    }

    pub fn initWith(gpa: std.mem.Allocator, limits: Limits) Decoder {
        std.debug.assert(limits.blocked_streams_max <= blocked_streams_limit);
        return .{ .gpa = gpa, .limits = limits };
    }

    pub fn deinit(self: *Decoder) void {
        while (self.count > 0) self.evictOldest();
        if (self.ring.len > 0) self.gpa.free(self.ring);
        self.ring = &.{};
        self.pending.deinit(self.gpa);
        self.gpa.free(self.blocked);
        self.blocked = &.{};
        self.blocked_len = 0;
        self.gpa.free(self.out);
        self.out = &.{};
        self.out_len = 0;
    }

    /// Nothing inserted, blocked, owed or allocated: as `initWith` made it.
    pub fn isPristine(self: *const Decoder) bool {
        return self.inserted == 0 and self.capacity == 0 and self.ring.len == 0 and self.blocked.len == 0 and
            self.out.len == 0 and self.pending.capacity == 0;
    }

    /// RFC 9204 4.5.1.1's MaxEntries, from the capacity we advertise.
    fn maxEntries(self: *const Decoder) u64 {
        return self.limits.table_capacity_max / qpack.entry_overhead;
    }

    /// The longest encoder-stream instruction we may have to hold: two prefix integers
    /// and two strings each no longer than a table entry may be, coded at worst.
    pub fn instructionBytesMax(self: *const Decoder) usize {
        return 2 * instruction_len_max + 2 * @as(usize, @intCast(qpack.rawLenMax(self.limits.table_capacity_max)));
    }

    // ---- output: the decoder stream ------------------------------------------------

    /// Decoder-stream bytes to send; the caller sends them and calls `consumeOutput`.
    pub fn output(self: *const Decoder) []const u8 {
        return self.out[0..self.out_len];
    }

    pub fn consumeOutput(self: *Decoder, n: usize) void {
        std.debug.assert(n <= self.out_len);
        std.mem.copyForwards(u8, self.out[0 .. self.out_len - n], self.out[n..self.out_len]);
        self.out_len -= n;
        if (self.out_len == 0 and self.out.len > 0) {
            self.gpa.free(self.out);
            self.out = &.{};
        }
    }

    fn emit(self: *Decoder, flags: u8, comptime prefix: u4, value: u64) OutputError!void {
        if (output_bytes_max - self.out_len < instruction_len_max) return error.DecoderStreamFull;
        if (self.out.len == 0) self.out = try self.gpa.alloc(u8, output_bytes_max);
        std.debug.assert(self.out.len == output_bytes_max);
        self.out_len = qpack.encodeInt(self.out, self.out_len, flags, prefix, value) catch unreachable;
    }

    /// Insert Count Increment (4.4.3) for every insert the peer cannot yet know we have.
    /// The session calls it after feeding the encoder stream (RFC 9204 allows the delay).
    pub fn acknowledgeInserts(self: *Decoder) OutputError!void {
        std.debug.assert(self.acknowledged <= self.inserted);
        if (self.inserted == self.acknowledged) return;
        try self.emit(0x00, 6, self.inserted - self.acknowledged);
        self.acknowledged = self.inserted;
    }

    /// Section Acknowledgment (4.4.1) of a decoded section with dynamic references.
    pub fn acknowledgeSection(
        self: *Decoder,
        stream_id: u64,
        required_insert_count: u64,
    ) OutputError!void {
        std.debug.assert(required_insert_count <= self.inserted);
        if (required_insert_count == 0) return;
        try self.emit(0x80, 7, stream_id);
        self.acknowledged = @max(self.acknowledged, required_insert_count);
    }

    /// A stream reset or abandoned before its sections were decoded (4.4.2): it stops
    /// counting as blocked, and the peer learns its references are released. With a
    /// table capacity of 0 there are none, and nothing is sent.
    pub fn cancelStream(self: *Decoder, stream_id: u64) OutputError!void {
        self.unblock(stream_id);
        if (self.limits.table_capacity_max == 0) return;
        try self.emit(0x40, 6, stream_id);
    }

    // ---- blocked streams --------------------------------------------------------------

    /// A blocked stream whose inserts have all arrived (its section decodes now), if any.
    pub fn unblockedStream(self: *const Decoder) ?u64 {
        for (self.blocked[0..self.blocked_len]) |b| {
            if (b.required_insert_count <= self.inserted) return b.stream_id;
        }
        return null;
    }

    pub fn blockedCount(self: *const Decoder) usize {
        return self.blocked_len;
    }

    fn unblock(self: *Decoder, stream_id: u64) void {
        for (self.blocked[0..self.blocked_len], 0..) |b, i| {
            if (b.stream_id != stream_id) continue;
            self.blocked[i] = self.blocked[self.blocked_len - 1];
            self.blocked_len -= 1;
            if (self.blocked_len == 0) {
                self.gpa.free(self.blocked);
                self.blocked = &.{};
            }
            return;
        }
    }

    fn block(self: *Decoder, stream_id: u64, required_insert_count: u64) Error!void {
        for (self.blocked[0..self.blocked_len]) |b| {
            if (b.stream_id == stream_id) return;
        }
        // RFC 9204 2.1.2: more blocked streams than we allow is a connection error.
        if (self.blocked_len >= self.limits.blocked_streams_max) return error.DecompressionFailed;
        if (self.blocked.len == 0) self.blocked = try self.gpa.alloc(Blocked, self.limits.blocked_streams_max);
        std.debug.assert(self.blocked.len == self.limits.blocked_streams_max);
        self.blocked[self.blocked_len] = .{ .stream_id = stream_id, .required_insert_count = required_insert_count };
        self.blocked_len += 1;
    }

    // ---- the dynamic table ------------------------------------------------------------

    /// The entry at an absolute index, if it is still in the table. Its slices live until
    /// the next `feedEncoderStream`.
    pub fn entryAt(self: *const Decoder, absolute: u64) ?*const Entry {
        const dropped = self.inserted - self.count;
        if (absolute < dropped or absolute >= self.inserted) return null;
        const offset: usize = @intCast(absolute - dropped);
        return &self.ring[(self.head + offset) % self.ring.len];
    }

    fn evictOldest(self: *Decoder) void {
        std.debug.assert(self.count > 0 and self.count <= self.ring.len);
        const e = self.ring[self.head];
        std.debug.assert(e.size() <= self.size);
        self.size -= e.size();
        self.gpa.free(e.bytes);
        self.head = (self.head + 1) % self.ring.len;
        self.count -= 1;
    }

    fn evictTo(self: *Decoder, limit: usize) void {
        while (self.size > limit) self.evictOldest();
        std.debug.assert(self.size <= limit and (self.count > 0 or self.size == 0));
    }

    /// Adds an entry whose bytes are already ours (RFC 9204 3.2.2: evict to make room;
    /// an entry larger than the capacity is the peer's error).
    fn insert(self: *Decoder, bytes: []u8, name_len: usize) Error!void {
        errdefer self.gpa.free(bytes);
        const entry_size = bytes.len + qpack.entry_overhead;
        if (entry_size > self.capacity) return error.EncoderStream;
        self.evictTo(self.capacity - entry_size);
        if (self.count == self.ring.len) try self.grow();
        self.ring[(self.head + self.count) % self.ring.len] = .{ .bytes = bytes, .name_len = @intCast(name_len) };
        self.count += 1;
        self.size += entry_size;
        self.inserted += 1;
        std.debug.assert(self.size <= self.capacity and self.capacity <= self.limits.table_capacity_max);
    }

    fn grow(self: *Decoder) error{OutOfMemory}!void {
        std.debug.assert(self.count == self.ring.len);
        // Every entry takes at least 32 of the capacity: the ring never needs more slots.
        const slots_max = @max(1, self.limits.table_capacity_max / qpack.entry_overhead);
        const new_len = @min(@max(8, self.ring.len * 2), slots_max);
        std.debug.assert(new_len > self.ring.len);
        const ring = try self.gpa.alloc(Entry, new_len);
        for (0..self.count) |i| ring[i] = self.ring[(self.head + i) % self.ring.len];
        if (self.ring.len > 0) self.gpa.free(self.ring);
        self.ring = ring;
        self.head = 0;
    }

    // ---- the encoder stream (RFC 9204 4.3) -------------------------------------------

    /// Feeds the peer's encoder-stream bytes (after the stream type), split anywhere.
    /// Complete instructions are applied; a partial one is held (bounded). Then
    /// `unblockedStream` may name streams to retry and `acknowledgeInserts` may be due.
    pub fn feedEncoderStream(self: *Decoder, input: []const u8) Error!void {
        var rest = input;
        while (self.pending.items.len > 0 and rest.len > 0) {
            const room = self.instructionBytesMax() - self.pending.items.len;
            if (room == 0) return error.EncoderStream;
            const take = @min(room, rest.len);
            try self.pending.appendSlice(self.gpa, rest[0..take]);
            rest = rest[take..];
            const used = try self.applyAll(self.pending.items);
            const left = self.pending.items.len - used;
            // A partial instruction is shorter than the longest whole one.
            if (left >= self.instructionBytesMax()) return error.EncoderStream;
            std.mem.copyForwards(u8, self.pending.items[0..left], self.pending.items[used..]);
            self.pending.shrinkRetainingCapacity(left);
        }
        if (rest.len == 0) return;
        const used = try self.applyAll(rest);
        if (used < rest.len) {
            // A partial instruction is shorter than the longest whole one.
            std.debug.assert(rest.len - used < self.instructionBytesMax());
            try self.pending.appendSlice(self.gpa, rest[used..]);
        }
        if (self.pending.items.len == 0) self.pending.clearAndFree(self.gpa);
    }

    /// Applies the complete instructions at the start of `bytes`; returns the bytes used.
    fn applyAll(self: *Decoder, bytes: []const u8) Error!usize {
        var pos: usize = 0;
        while (pos < bytes.len) {
            const n = self.applyOne(bytes[pos..]) catch |err| switch (err) {
                error.Truncated => break,
                else => |e| return e,
            };
            std.debug.assert(n > 0);
            pos += n;
        }
        return pos;
    }

    const ApplyError = Error || error{Truncated};

    fn readInt(bytes: []const u8, pos: *usize, comptime prefix: u4) ApplyError!u64 {
        return qpack.decodeInt(bytes, pos, prefix) catch |err| switch (err) {
            error.Truncated => error.Truncated,
            error.Overflow => error.EncoderStream,
        };
    }

    /// A string of an instruction, its length checked against the capacity before its
    /// bytes are waited for: an entry can never be larger than the table.
    fn readString(self: *const Decoder, bytes: []const u8, pos: *usize, comptime prefix: u4) ApplyError!qpack.RawString {
        var p = pos.*;
        if (p >= bytes.len) return error.Truncated;
        const coded = bytes[p] & (@as(u8, 1) << prefix) != 0;
        const len = try readInt(bytes, &p, prefix);
        const len_max = if (coded) qpack.rawLenMax(self.capacity) else self.capacity;
        if (len > len_max) return error.EncoderStream;
        return qpack.readRawString(bytes, pos, prefix) catch |err| switch (err) {
            error.Truncated => error.Truncated,
            error.Overflow => error.EncoderStream,
        };
    }

    /// Applies one instruction at the start of `bytes`; nothing changes unless it is
    /// complete. Returns its length.
    fn applyOne(self: *Decoder, bytes: []const u8) ApplyError!usize {
        var pos: usize = 0;
        const b = bytes[0];
        if (b & 0x80 != 0) {
            // Insert With Name Reference: T (0x40), 6-bit name index, value.
            const index = try readInt(bytes, &pos, 6);
            const value = try self.readString(bytes, &pos, 7);
            const name = if (b & 0x40 != 0) try staticName(index) else try self.relativeName(index);
            try self.insertDecoded(.{ .bytes = name, .huffman = false }, value);
        } else if (b & 0x40 != 0) {
            // Insert With Literal Name: H (0x20), 5-bit name length, name, value.
            const name = try self.readString(bytes, &pos, 5);
            const value = try self.readString(bytes, &pos, 7);
            try self.insertDecoded(name, value);
        } else if (b & 0x20 != 0) {
            // Set Dynamic Table Capacity: 5-bit prefix, at most what we advertised.
            const capacity = try readInt(bytes, &pos, 5);
            if (capacity > self.limits.table_capacity_max) return error.EncoderStream;
            self.capacity = @intCast(capacity);
            self.evictTo(self.capacity);
        } else {
            // Duplicate: 5-bit relative index.
            const index = try readInt(bytes, &pos, 5);
            const e = (try self.relativeEntry(index)).header();
            const copy = try self.gpa.alloc(u8, e.name.len + e.value.len);
            @memcpy(copy[0..e.name.len], e.name);
            @memcpy(copy[e.name.len..], e.value);
            try self.insert(copy, e.name.len);
        }
        return pos;
    }

    fn staticName(index: u64) ApplyError![]const u8 {
        if (index >= static_table.len) return error.EncoderStream;
        return static_table[@intCast(index)].name;
    }

    /// An encoder-stream relative index: 0 is the newest entry (4.3 / 3.2.5).
    fn relativeEntry(self: *const Decoder, index: u64) ApplyError!*const Entry {
        if (index >= self.inserted) return error.EncoderStream;
        return self.entryAt(self.inserted - 1 - index) orelse error.EncoderStream;
    }

    fn relativeName(self: *const Decoder, index: u64) ApplyError![]const u8 {
        return (try self.relativeEntry(index)).header().name;
    }

    /// Decodes name and value into one new allocation (copied before any eviction: the
    /// name may be an entry's) and inserts it.
    fn insertDecoded(self: *Decoder, name: qpack.RawString, value: qpack.RawString) ApplyError!void {
        const room: usize = self.capacity -| qpack.entry_overhead;
        const bound = @min(room, decodedLenMax(name) + decodedLenMax(value));
        var bytes = try self.gpa.alloc(u8, bound);
        var used: usize = 0;
        const n = qpack.decodeString(name, bytes, &used) catch |err| return self.dropDecoded(bytes, err);
        if (!name.huffman) used = copyInto(bytes, 0, n) catch |err| return self.dropDecoded(bytes, err);
        const name_len = used;
        const v = qpack.decodeString(value, bytes, &used) catch |err| return self.dropDecoded(bytes, err);
        if (!value.huffman) used = copyInto(bytes, used, v) catch |err| return self.dropDecoded(bytes, err);
        if (used < bytes.len) bytes = self.gpa.realloc(bytes, used) catch |err| return self.dropDecoded(bytes, err);
        try self.insert(bytes, name_len);
    }

    fn dropDecoded(self: *Decoder, bytes: []u8, err: anyerror) ApplyError {
        self.gpa.free(bytes);
        return switch (err) {
            error.OutOfMemory => error.OutOfMemory,
            // Too long for the table, or a bad Huffman code.
            else => error.EncoderStream,
        };
    }

    fn decodedLenMax(raw: qpack.RawString) usize {
        // The shortest Huffman code is 5 bits.
        return if (raw.huffman) raw.bytes.len * 8 / 5 else raw.bytes.len;
    }

    // ---- field sections (RFC 9204 4.5) --------------------------------------------

    /// RFC 9204 4.5.1.1: the Required Insert Count from its encoded form.
    pub fn requiredInsertCount(self: *const Decoder, encoded: u64) Error!u64 {
        if (encoded == 0) return 0;
        const max_entries = self.maxEntries();
        const full_range = 2 * max_entries;
        if (encoded > full_range) return error.DecompressionFailed;
        const max_value = self.inserted + max_entries;
        const max_wrapped = (max_value / full_range) * full_range;
        var required = max_wrapped + encoded - 1;
        if (required > max_value) {
            if (required <= full_range) return error.DecompressionFailed;
            required -= full_range;
        }
        if (required == 0) return error.DecompressionFailed;
        return required;
    }

    /// Decodes one complete field section (a HEADERS payload) of `stream_id`. See
    /// `Outcome` and `Ack`; `fields` borrow `scratch` and `section`. A dynamic entry may
    /// be referenced only below the Required Insert Count and while still in the table.
    pub fn decodeSection(self: *Decoder, stream_id: u64, section: []const u8, scratch: []u8, out: []Header, ack: Ack) Error!Outcome {
        var pos: usize = 0;
        const required = try self.requiredInsertCount(try sectionInt(section, &pos, 8));
        if (pos >= section.len) return error.DecompressionFailed;
        const negative = section[pos] & 0x80 != 0;
        const delta = try sectionInt(section, &pos, 7);
        const base = if (!negative) required + delta else if (delta < required) required - delta - 1 else return error.DecompressionFailed;
        if (required > self.inserted) {
            try self.block(stream_id, required);
            return .blocked;
        }
        self.unblock(stream_id);
        var lines = Lines{ .decoder = self, .section = section, .pos = pos, .base = base, .required = required, .scratch = scratch, .out = out };
        while (lines.pos < section.len) try lines.next();
        // 2.2.3: a Required Insert Count above what the section references is an error.
        if (required > 0 and lines.referenced_max + 1 != required) return error.DecompressionFailed;
        if (ack == .acknowledge) try self.acknowledgeSection(stream_id, required);
        return .{ .fields = out[0..lines.n] };
    }
};

fn sectionInt(bytes: []const u8, pos: *usize, comptime prefix: u4) Error!u64 {
    return qpack.decodeInt(bytes, pos, prefix) catch error.DecompressionFailed;
}

fn copyInto(dst: []u8, at: usize, s: []const u8) error{NoSpace}!usize {
    if (s.len > dst.len - at) return error.NoSpace;
    @memcpy(dst[at..][0..s.len], s);
    return at + s.len;
}

/// One section's field lines as they are decoded.
const Lines = struct {
    decoder: *const Decoder,
    section: []const u8,
    pos: usize,
    base: u64,
    required: u64,
    scratch: []u8,
    used: usize = 0,
    out: []Header,
    n: usize = 0,
    section_bytes: usize = 0,
    /// The largest absolute index referenced (valid when anything was).
    referenced_max: u64 = 0,

    fn next(l: *Lines) Error!void {
        const b = l.section[l.pos];
        var field: Header = undefined;
        if (b & 0x80 != 0) {
            // Indexed Field Line: T (0x40), 6-bit index.
            const index = try sectionInt(l.section, &l.pos, 6);
            field = if (b & 0x40 != 0) try staticField(index) else try l.dynamic(try l.relative(index), true);
        } else if (b & 0x40 != 0) {
            // Literal Field Line With Name Reference: N (0x20), T (0x10), 4-bit index.
            const index = try sectionInt(l.section, &l.pos, 4);
            field.name = if (b & 0x10 != 0) (try staticField(index)).name else (try l.dynamic(try l.relative(index), false)).name;
            field.value = try l.string(7);
        } else if (b & 0x20 != 0) {
            // Literal Field Line With Literal Name: N (0x10), H (0x08), 3-bit length.
            field.name = try l.string(3);
            field.value = try l.string(7);
        } else if (b & 0x10 != 0) {
            // Indexed Field Line With Post-Base Index: 4-bit index.
            const index = try sectionInt(l.section, &l.pos, 4);
            field = try l.dynamic(try l.postBase(index), true);
        } else {
            // Literal Field Line With Post-Base Name Reference: N (0x08), 3-bit index.
            const index = try sectionInt(l.section, &l.pos, 3);
            field.name = (try l.dynamic(try l.postBase(index), false)).name;
            field.value = try l.string(7);
        }
        l.section_bytes += field.name.len + field.value.len + qpack.entry_overhead;
        if (l.section_bytes > l.decoder.limits.field_section_bytes_max) return error.FieldSectionTooLarge;
        if (l.n == l.out.len) return error.FieldSectionTooLarge;
        l.out[l.n] = field;
        l.n += 1;
    }

    fn staticField(index: u64) Error!Header {
        if (index >= static_table.len) return error.DecompressionFailed;
        return static_table[@intCast(index)];
    }

    fn relative(l: *const Lines, index: u64) Error!u64 {
        if (index >= l.base) return error.DecompressionFailed;
        return l.base - 1 - index;
    }

    fn postBase(l: *const Lines, index: u64) Error!u64 {
        if (index >= l.required) return error.DecompressionFailed; // also keeps the sum small
        return l.base + index;
    }

    /// A dynamic entry, copied into scratch (the value only when `whole`).
    fn dynamic(l: *Lines, absolute: u64, whole: bool) Error!Header {
        if (absolute >= l.required) return error.DecompressionFailed;
        const e = (l.decoder.entryAt(absolute) orelse return error.DecompressionFailed).header();
        l.referenced_max = @max(l.referenced_max, absolute);
        const name = try l.copy(e.name);
        return .{ .name = name, .value = if (whole) try l.copy(e.value) else "" };
    }

    fn copy(l: *Lines, s: []const u8) Error![]const u8 {
        const end = copyInto(l.scratch, l.used, s) catch return error.FieldSectionTooLarge;
        defer l.used = end;
        return l.scratch[l.used..end];
    }

    fn string(l: *Lines, comptime prefix: u4) Error![]const u8 {
        const raw = qpack.readRawString(l.section, &l.pos, prefix) catch return error.DecompressionFailed;
        // Checked before decoding: a string alone past the limit is never worked on.
        if (raw.bytes.len > l.decoder.limits.field_section_bytes_max and !raw.huffman) return error.FieldSectionTooLarge;
        return qpack.decodeString(raw, l.scratch, &l.used) catch |err| switch (err) {
            error.NoSpace => error.FieldSectionTooLarge,
            error.Compression => error.DecompressionFailed,
        };
    }
};

test {
    _ = @import("qpack_decoder_tests.zig");
}
