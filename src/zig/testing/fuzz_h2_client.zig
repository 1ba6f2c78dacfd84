//! The HTTP/2 fuzzer's client (`testing/fuzz_http2.zig` runs the cases): frames as bytes,
//! an HPACK encoder that mirrors the server's decoder table, the grammar that draws the
//! client's frames (`Gen`), and the mutations of its bytes.
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;
const h2 = @import("../http2/session.zig");
const hpack = @import("../http2/hpack.zig");
const huffman_code = @import("../http/huffman.zig");
const sys = @import("../os/sys.zig");
const stream_mod = @import("../core/stream.zig");
const Stream = stream_mod.Stream;
const server_mod = @import("../core/server.zig");
const test_server = @import("test_server.zig");
const Recorder = test_server.Recorder;
const rec = &test_server.rec;

const gpa = std.heap.c_allocator;

const fuzz = @import("fuzz_http2.zig");
const window_max = fuzz.window_max;
const default_frame_size = fuzz.default_frame_size;
const frame_header_len = fuzz.frame_header_len;
const server_table_size = fuzz.server_table_size;
const stream_id_max = fuzz.stream_id_max;
const error_code_max = fuzz.error_code_max;
const FrameType = fuzz.FrameType;
const flag_end_stream = fuzz.flag_end_stream;
const flag_ack = fuzz.flag_ack;
const flag_end_headers = fuzz.flag_end_headers;
const flag_padded = fuzz.flag_padded;
const flag_priority = fuzz.flag_priority;
const setting_header_table_size = fuzz.setting_header_table_size;
const setting_enable_push = fuzz.setting_enable_push;
const setting_max_concurrent_streams = fuzz.setting_max_concurrent_streams;
const setting_initial_window_size = fuzz.setting_initial_window_size;
const setting_max_frame_size = fuzz.setting_max_frame_size;
const setting_max_header_list_size = fuzz.setting_max_header_list_size;
const setting_enable_connect_protocol = fuzz.setting_enable_connect_protocol;
const client_streams_max = fuzz.client_streams_max;
const outOfMemory = fuzz.outOfMemory;
const Case = fuzz.Case;

// ---- bytes and frames -----------------------------------------------------------------

pub const Bytes = struct {
    list: std.ArrayList(u8) = .empty,

    pub fn append(self: *Bytes, bytes: []const u8) void {
        self.list.appendSlice(gpa, bytes) catch outOfMemory();
    }

    pub fn byte(self: *Bytes, b: u8) void {
        self.list.append(gpa, b) catch outOfMemory();
    }

    /// `n` more bytes at the end, for the caller to fill.
    pub fn grow(self: *Bytes, n: usize) []u8 {
        return self.list.addManyAsSlice(gpa, n) catch outOfMemory();
    }

    pub fn items(self: *const Bytes) []u8 {
        return self.list.items;
    }

    pub fn clear(self: *Bytes) void {
        self.list.clearRetainingCapacity();
    }

    /// Drops the first `n` bytes.
    pub fn consume(self: *Bytes, n: usize) void {
        const rest = self.list.items.len - n;
        std.mem.copyForwards(u8, self.list.items[0..rest], self.list.items[n..]);
        self.list.items.len = rest;
    }

    pub fn deinit(self: *Bytes) void {
        self.list.deinit(gpa);
    }
};

pub const FrameHead = struct {
    len: u32,
    typ: FrameType,
    flags: u8,
    id: u32,
    /// The reserved bit of the stream id (a sender must leave it unset).
    reserved: bool,

    pub fn parse(b: *const [frame_header_len]u8) FrameHead {
        const raw = std.mem.readInt(u32, b[5..9], .big);
        return .{ .len = std.mem.readInt(u24, b[0..3], .big), .typ = @enumFromInt(b[3]), .flags = b[4], .id = raw & stream_id_max, .reserved = raw >> 31 != 0 };
    }
};

pub fn writeHead(out: *Bytes, len: usize, typ: u8, flags: u8, id: u32) void {
    var b: [frame_header_len]u8 = undefined;
    std.mem.writeInt(u24, b[0..3], @intCast(len), .big);
    b[3] = typ;
    b[4] = flags;
    std.mem.writeInt(u32, b[5..9], id, .big);
    out.append(&b);
}

/// The byte at `offset` of stream `id`'s response body: the app writes only these, so
/// every DATA byte the server sends is checked against its stream and offset.
pub fn responseByte(id: u32, offset: u64) u8 {
    const x = (offset +% 1) *% 0x9e37_79b9_7f4a_7c15 +% @as(u64, id) *% 0xc2b2_ae3d_27d4_eb4f;
    return @truncate(x >> 56);
}

/// The byte at `offset` of stream `id`'s request body (the client's DATA).
pub fn requestByte(id: u32, offset: u64) u8 {
    const x = (offset +% 7) *% 0xd6e8_feb8_6659_fd93 +% @as(u64, id) *% 0x9e37_79b9_7f4a_7c15;
    return @truncate(x >> 56);
}

pub fn fillPattern(buf: []u8, comptime byteAt: fn (u32, u64) u8, id: u32, offset: u64) void {
    for (buf, 0..) |*b, i| b.* = byteAt(id, offset + i);
}

/// One client action's bytes, with where each frame starts (for the length mutations).
pub const Step = struct {
    bytes: Bytes = .{},
    starts: [64]usize = undefined,
    frames: usize = 0,

    pub fn reset(self: *Step) void {
        self.bytes.clear();
        self.frames = 0;
    }

    pub fn head(self: *Step, len: usize, typ: FrameType, flags: u8, id: u32) void {
        self.headRaw(len, @intFromEnum(typ), flags, id);
    }

    pub fn headRaw(self: *Step, len: usize, typ: u8, flags: u8, id: u32) void {
        if (self.frames < self.starts.len) {
            self.starts[self.frames] = self.bytes.items().len;
            self.frames += 1;
        }
        writeHead(&self.bytes, len, typ, flags, id);
    }

    pub fn frame(self: *Step, typ: FrameType, flags: u8, id: u32, payload: []const u8) void {
        self.head(payload.len, typ, flags, id);
        self.bytes.append(payload);
    }

    /// A DATA frame of `len` request-body bytes from `offset`, padded by `pad` (< 256).
    pub fn data(self: *Step, id: u32, offset: u64, len: usize, pad: ?u8, end_stream: bool) void {
        const padded = pad != null;
        const total = len + if (pad) |p| @as(usize, p) + 1 else 0;
        var flags: u8 = if (end_stream) flag_end_stream else 0;
        if (padded) flags |= flag_padded;
        self.head(total, .data, flags, id);
        if (pad) |p| self.bytes.byte(p);
        fillPattern(self.bytes.grow(len), requestByte, id, offset);
        if (pad) |p| @memset(self.bytes.grow(p), 0);
    }
};

// ---- HPACK: the generator's encoder, mirroring the server's decoder table ---------------

/// The static entries (RFC 7541 Appendix A) the generator uses, by index.
pub const StaticField = struct { index: u8, name: []const u8, value: []const u8 };
pub const static_fields = [_]StaticField{
    .{ .index = 1, .name = ":authority", .value = "" },
    .{ .index = 2, .name = ":method", .value = "GET" },
    .{ .index = 3, .name = ":method", .value = "POST" },
    .{ .index = 4, .name = ":path", .value = "/" },
    .{ .index = 5, .name = ":path", .value = "/index.html" },
    .{ .index = 6, .name = ":scheme", .value = "http" },
    .{ .index = 7, .name = ":scheme", .value = "https" },
    .{ .index = 8, .name = ":status", .value = "200" },
    .{ .index = 16, .name = "accept-encoding", .value = "gzip, deflate" },
    .{ .index = 19, .name = "accept", .value = "" },
    .{ .index = 28, .name = "content-length", .value = "" },
    .{ .index = 31, .name = "content-type", .value = "" },
    .{ .index = 32, .name = "cookie", .value = "" },
    .{ .index = 38, .name = "host", .value = "" },
    .{ .index = 58, .name = "user-agent", .value = "" },
};
pub const static_table_len = 61;

pub fn staticExact(name: []const u8, value: []const u8) ?u8 {
    for (static_fields) |f| if (std.mem.eql(u8, f.name, name) and std.mem.eql(u8, f.value, value)) return f.index;
    return null;
}

pub fn staticName(name: []const u8) ?u8 {
    for (static_fields) |f| if (std.mem.eql(u8, f.name, name)) return f.index;
    return null;
}

/// RFC 7541 4.1: an entry's size is its name's and value's lengths plus 32.
pub const entry_overhead = 32;
/// Fields the generator indexes are at most this long (name and value together).
pub const entry_bytes_max = 96;

pub const Entry = struct {
    bytes: [entry_bytes_max]u8 = undefined,
    name_len: usize = 0,
    len: usize = 0,

    pub fn name(self: *const Entry) []const u8 {
        return self.bytes[0..self.name_len];
    }
    pub fn value(self: *const Entry) []const u8 {
        return self.bytes[self.name_len..self.len];
    }
    pub fn size(self: *const Entry) usize {
        return self.len + entry_overhead;
    }
};

/// The dynamic table as the server's decoder keeps it (RFC 7541 2.3.2, 4.4): entries
/// the generator refers to by index must be the ones the server has.
pub const Table = struct {
    ring: [server_table_size / entry_overhead]Entry = undefined,
    head: usize = 0,
    count: usize = 0,
    size: usize = 0,
    limit: usize = server_table_size,

    /// Entry `d`, 1 being the newest (dynamic index 62 is d = 1).
    pub fn entry(self: *const Table, d: usize) *const Entry {
        return &self.ring[(self.head + self.count - d) % self.ring.len];
    }

    pub fn evictTo(self: *Table, limit: usize) void {
        while (self.size > limit) {
            self.size -= self.ring[self.head].size();
            self.head = (self.head + 1) % self.ring.len;
            self.count -= 1;
        }
    }

    pub fn setLimit(self: *Table, limit: usize) void {
        self.limit = limit;
        self.evictTo(limit);
    }

    pub fn insert(self: *Table, name: []const u8, value: []const u8) void {
        const size = name.len + value.len + entry_overhead;
        if (size > self.limit) return self.evictTo(0);
        self.evictTo(self.limit - size);
        const e = &self.ring[(self.head + self.count) % self.ring.len];
        @memcpy(e.bytes[0..name.len], name);
        @memcpy(e.bytes[name.len..][0..value.len], value);
        e.name_len = name.len;
        e.len = name.len + value.len;
        self.count += 1;
        self.size += size;
    }

    pub fn find(self: *const Table, name: []const u8, value: []const u8) ?usize {
        for (1..self.count + 1) |d| {
            const e = self.entry(d);
            if (std.mem.eql(u8, e.name(), name) and std.mem.eql(u8, e.value(), value)) return d;
        }
        return null;
    }

    pub fn findName(self: *const Table, name: []const u8) ?usize {
        for (1..self.count + 1) |d| if (std.mem.eql(u8, self.entry(d).name(), name)) return d;
        return null;
    }
};

/// RFC 7541 5.1: `value` with an N-bit prefix, `first` holding the representation's bits.
pub fn encodeInt(out: *Bytes, first: u8, comptime prefix_bits: u4, value: u64) void {
    const max_prefix: u64 = (@as(u64, 1) << prefix_bits) - 1;
    if (value < max_prefix) return out.byte(first | @as(u8, @intCast(value)));
    out.byte(first | @as(u8, @intCast(max_prefix)));
    var rest = value - max_prefix;
    while (rest >= 128) : (rest >>= 7) out.byte(@as(u8, @truncate(rest)) | 0x80);
    out.byte(@intCast(rest));
}

/// RFC 7541 5.2: a string literal, Huffman-coded or plain.
pub fn encodeString(out: *Bytes, huffman: bool, s: []const u8) void {
    if (huffman) {
        const n = huffman_code.encodedLen(s);
        encodeInt(out, 0x80, 7, n);
        _ = huffman_code.encode(out.grow(n), s);
    } else {
        encodeInt(out, 0x00, 7, s.len);
        out.append(s);
    }
}

/// One field in a representation drawn at random: indexed (static or dynamic), or a
/// literal with incremental indexing (inserted), without indexing or never indexed,
/// its name indexed or literal, strings Huffman-coded or not.
pub fn encodeField(out: *Bytes, table: *Table, r: std.Random, name: []const u8, value: []const u8) void {
    if (r.uintLessThan(u8, 4) != 0) {
        if (staticExact(name, value)) |i| return encodeInt(out, 0x80, 7, i);
        if (table.find(name, value)) |d| return encodeInt(out, 0x80, 7, static_table_len + d);
    }
    const indexable = name.len + value.len <= entry_bytes_max;
    const indexing = indexable and r.uintLessThan(u8, 3) == 0;
    var name_index: u64 = 0;
    if (r.uintLessThan(u8, 4) != 0) {
        if (staticName(name)) |i| {
            name_index = i;
        } else if (table.findName(name)) |d| name_index = static_table_len + d;
    }
    if (indexing) {
        encodeInt(out, 0x40, 6, name_index);
    } else {
        encodeInt(out, if (r.boolean()) 0x10 else 0x00, 4, name_index);
    }
    if (name_index == 0) encodeString(out, r.boolean(), name);
    encodeString(out, r.boolean(), value);
    if (indexing) table.insert(name, value);
}

// ---- the client: frames from a grammar ----------------------------------------------------

pub const Method = enum { get, post, head, put, options, delete, connect };
pub const method_names = [_][]const u8{ "GET", "POST", "HEAD", "PUT", "OPTIONS", "DELETE", "CONNECT" };

/// A stream as the client means it (mutations may make the server see another).
pub const ClientStream = struct {
    id: u32,
    /// END_STREAM or RST_STREAM sent: no more DATA is meant for it.
    ended: bool = false,
    reset: bool = false,
    /// Request body bytes sent (the pattern's offset), and those the client means to send.
    sent: u64 = 0,
    planned: u64 = 0,
};

pub const Field = struct { name: []const u8, value: []const u8 };

/// One request's fields, and the text they point into.
pub const Fields = struct {
    items: [320]Field = undefined,
    len: usize = 0,
    text: [40 * 1024]u8 = undefined,
    text_len: usize = 0,

    pub fn add(self: *Fields, name: []const u8, value: []const u8) void {
        if (self.len == self.items.len) return;
        self.items[self.len] = .{ .name = name, .value = value };
        self.len += 1;
    }

    /// Text formatted into the fields' own storage ("" when it is full).
    pub fn print(self: *Fields, comptime fmt: []const u8, args: anytype) []const u8 {
        const s = std.fmt.bufPrint(self.text[self.text_len..], fmt, args) catch return "";
        self.text_len += s.len;
        return s;
    }

    /// `len` bytes of a header value (letters and digits).
    pub fn filler(self: *Fields, r: std.Random, len: usize) []const u8 {
        const n = @min(len, self.text.len - self.text_len);
        const s = self.text[self.text_len..][0..n];
        for (s) |*c| c.* = "abcdefghijklmnopqrstuvwxyz0123456789"[r.uintLessThan(usize, 36)];
        self.text_len += n;
        return s;
    }

    pub fn insertAt(self: *Fields, at: usize, f: Field) void {
        if (self.len == self.items.len) return;
        std.mem.copyBackwards(Field, self.items[at + 1 .. self.len + 1], self.items[at..self.len]);
        self.items[at] = f;
        self.len += 1;
    }
};

pub const ClientAction = enum { request, data, trailers, window_update, settings, ping, priority, rst_stream, goaway, unknown, oddity };
pub const client_weights = [_]u8{ 24, 16, 4, 14, 8, 5, 4, 5, 2, 3, 3 };

pub const Gen = struct {
    random: std.Random,
    /// A hostile client: now and then (`wild`) an action breaks a rule. A well-behaved
    /// one (most cases) keeps every rule, so its cases reach deep states.
    hostile: bool = false,
    table: Table = .{},
    streams: [client_streams_max]ClientStream = undefined,
    count: usize = 0,
    next_id: u32 = 1,
    fields: Fields = .{},
    block: Bytes = .{},
    /// The last block starts with a size update past the limit (a COMPRESSION_ERROR).
    block_invalid: bool = false,

    pub fn case(self: *Gen) *Case {
        return @alignCast(@fieldParentPtr("gen", self));
    }

    /// Whether this action breaks a rule: a hostile client does, one action in three.
    pub fn wild(self: *Gen) bool {
        return self.hostile and self.random.uintLessThan(u8, 3) == 0;
    }

    pub fn action(self: *Gen, step: *Step) void {
        const pick: ClientAction = @enumFromInt(self.random.weightedIndex(u8, &client_weights));
        switch (pick) {
            .request => self.request(step),
            .data => self.data(step),
            .trailers => self.trailers(step),
            .window_update => self.windowUpdate(step),
            .settings => self.settings(step),
            .ping => self.ping(step),
            .priority => self.priority(step),
            .rst_stream => self.rstStream(step),
            .goaway => self.goaway(step),
            .unknown => self.unknownFrame(step),
            .oddity => self.oddity(step),
        }
    }

    /// A stream the client means to send on (END_STREAM not sent, not reset).
    pub fn pickOpen(self: *Gen) ?*ClientStream {
        var open: [client_streams_max]*ClientStream = undefined;
        var n: usize = 0;
        for (self.streams[0..self.count]) |*cs| if (!cs.ended and !cs.reset) {
            open[n] = cs;
            n += 1;
        };
        if (n == 0) return null;
        return open[self.random.uintLessThan(usize, n)];
    }

    /// A stream the client opened: an open one most of the time, else any (closed ones
    /// too). Null before the first request.
    pub fn knownId(self: *Gen) ?u32 {
        if (self.random.uintLessThan(u8, 3) != 0) if (self.pickOpen()) |cs| return cs.id;
        if (self.count == 0) return null;
        return self.streams[self.random.uintLessThan(usize, self.count)].id;
    }

    /// A stream id where most frames are an error: idle, even, 0, the last one.
    pub fn badId(self: *Gen) u32 {
        const r = self.random;
        return switch (r.uintLessThan(u8, 4)) {
            0 => self.next_id +| 2 * r.uintLessThan(u32, 4),
            1 => 2 * r.intRangeAtMost(u32, 1, 8),
            2 => 0,
            else => stream_id_max,
        };
    }

    /// An id for a frame about "some stream" (WINDOW_UPDATE, RST_STREAM, ...): a known
    /// one, or when wild a bad one.
    pub fn someId(self: *Gen) u32 {
        if (self.wild()) return self.badId();
        return self.knownId() orelse self.badId();
    }

    /// The next stream id; when wild one skipped ahead, reused, even, 0 or the last.
    pub fn newId(self: *Gen) u32 {
        const r = self.random;
        if (!self.wild()) return self.next_id;
        return switch (r.uintLessThan(u8, 6)) {
            0 => self.next_id +| 2 * r.intRangeAtMost(u32, 1, 50),
            1 => if (self.count > 0) self.streams[r.uintLessThan(usize, self.count)].id else self.next_id,
            2 => self.next_id + 1,
            3 => 0,
            4 => stream_id_max,
            else => self.next_id,
        };
    }

    // ---- requests ----

    pub fn request(self: *Gen, step: *Step) void {
        if (self.count == self.streams.len or self.next_id > stream_id_max) return self.ping(step);
        const r = self.random;
        const id = self.newId();
        const method: Method = switch (r.uintLessThan(u8, 20)) {
            0...8 => .get,
            9...13 => .post,
            14, 15 => .head,
            16, 17 => .put,
            18 => .options,
            else => .delete,
        };
        const body: ?u64 = if (method == .post or method == .put or r.uintLessThan(u8, 10) == 0) bodySize(r) else null;
        self.planFields(method, body);
        const end_stream = if (body) |n| n == 0 and r.boolean() else r.uintLessThan(u8, 10) != 0;
        self.encodeBlock();
        self.headerFrames(step, id, end_stream);
        if (id & 1 == 1 and id >= self.next_id and id <= stream_id_max) {
            self.next_id = if (id >= stream_id_max - 1) stream_id_max + 2 else id + 2;
            self.streams[self.count] = .{ .id = id, .ended = end_stream, .planned = body orelse 0 };
            self.count += 1;
            if (!end_stream and body != null and r.boolean()) self.sendBody(step, &self.streams[self.count - 1]);
        }
    }

    pub fn planFields(self: *Gen, method: Method, body: ?u64) void {
        const r = self.random;
        const f = &self.fields;
        f.len = 0;
        f.text_len = 0;
        f.add(":method", method_names[@intFromEnum(method)]);
        f.add(":scheme", if (r.uintLessThan(u8, 4) == 0) "https" else "http");
        f.add(":path", switch (r.uintLessThan(u8, 4)) {
            0 => "/",
            1 => "/index.html",
            else => f.print("/p{d}?q={d}", .{ r.uintLessThan(u16, 1000), r.int(u8) }),
        });
        if (r.uintLessThan(u8, 5) != 0) f.add(":authority", if (r.boolean()) "x" else "example.com");
        if (r.boolean()) f.add("user-agent", "fuzz_h2");
        if (r.boolean()) f.add("accept-encoding", "gzip, deflate");
        if (r.uintLessThan(u8, 4) == 0) f.add("accept", "*/*");
        if (r.uintLessThan(u8, 5) == 0) f.add("te", "trailers");
        if (r.uintLessThan(u8, 4) == 0) {
            f.add("cookie", "a=1");
            f.add("cookie", f.print("b={d}", .{r.int(u8)}));
        }
        for (0..r.uintLessThan(usize, 4)) |i| f.add(f.print("x-h{d}", .{i}), f.filler(r, r.uintLessThan(usize, 24)));
        if (body) |n| if (r.uintLessThan(u8, 10) < 7) {
            const declared = if (self.wild() and r.boolean()) n +% 1 else n;
            f.add("content-length", f.print("{d}", .{declared}));
        };
        if (self.wild()) {
            if (r.boolean()) self.largeHead() else self.malform();
        } else if (r.uintLessThan(u8, 50) == 0) {
            // Within every limit the server may run with, and still past one frame now
            // and then (CONTINUATION).
            for (0..r.intRangeAtMost(usize, 1, 5)) |i| f.add(f.print("x-fill-{d}", .{i}), f.filler(r, r.intRangeAtMost(usize, 10, 40)));
        }
    }

    /// Many fields or a long one: past the server's head limits now and then, and a
    /// block that needs CONTINUATION frames.
    pub fn largeHead(self: *Gen) void {
        const r = self.random;
        const f = &self.fields;
        if (r.boolean()) {
            for (0..r.intRangeAtMost(usize, 20, 300)) |i| f.add(f.print("x-many-{d}", .{i}), f.filler(r, r.uintLessThan(usize, 40)));
        } else {
            f.add("x-long", f.filler(r, r.intRangeAtMost(usize, 1000, 30_000)));
        }
    }

    /// One thing RFC 9113 8.2-8.3 makes malformed (a stream error), or CONNECT.
    pub fn malform(self: *Gen) void {
        const r = self.random;
        const f = &self.fields;
        switch (r.uintLessThan(u8, 11)) {
            0 => f.items[r.uintLessThan(usize, 3)].name = ":bogus",
            1 => f.add(":path", "/again"),
            2 => f.add(":authority", "late"),
            3 => f.add("X-Upper", "1"),
            4 => f.add("connection", "keep-alive"),
            5 => f.add("te", "gzip"),
            6 => f.add("x-space", " padded"),
            7 => f.items[2].value = "",
            8 => f.insertAt(0, .{ .name = ":protocol", .value = "websocket" }),
            9 => f.items[0].value = "CONNECT",
            else => f.add("content-length", "12a"),
        }
    }

    /// The fields as one HPACK block, a dynamic table size update first now and then.
    pub fn encodeBlock(self: *Gen) void {
        const r = self.random;
        self.block.clear();
        self.block_invalid = false;
        if (r.uintLessThan(u8, 10) == 0) {
            const limit: u64 = if (self.wild()) server_table_size + 1 else switch (r.uintLessThan(u8, 4)) {
                0 => 0,
                1 => server_table_size,
                else => r.uintAtMost(u64, server_table_size),
            };
            encodeInt(&self.block, 0x20, 5, limit);
            if (limit <= server_table_size) self.table.setLimit(limit) else self.block_invalid = true;
        }
        for (self.fields.items[0..self.fields.len]) |f| encodeField(&self.block, &self.table, r, f.name, f.value);
    }

    /// The block as HEADERS (padded, with priority, now and then) and CONTINUATION frames.
    pub fn headerFrames(self: *Gen, step: *Step, id: u32, end_stream: bool) void {
        const r = self.random;
        var rest: []const u8 = self.block.items();
        const pad: ?u8 = if (r.uintLessThan(u8, 8) == 0) r.int(u8) else null;
        const prio = r.uintLessThan(u8, 8) == 0;
        const extra: usize = (if (pad) |p| @as(usize, p) + 1 else 0) + (if (prio) @as(usize, 5) else 0);
        const room = default_frame_size - extra;
        var first = @min(rest.len, if (r.boolean()) room else r.uintAtMost(usize, room));
        // When wild, the block never ends (END_HEADERS left off).
        const unfinished = self.wild() and r.uintLessThan(u8, 8) == 0;
        var flags: u8 = if (end_stream) flag_end_stream else 0;
        if (first == rest.len and !unfinished) flags |= flag_end_headers;
        if (pad != null) flags |= flag_padded;
        if (prio) flags |= flag_priority;
        step.head(first + extra, .headers, flags, id);
        if (pad) |p| step.bytes.byte(p);
        if (prio) self.priorityFields(step, id);
        step.bytes.append(rest[0..first]);
        if (pad) |p| @memset(step.bytes.grow(p), 0);
        rest = rest[first..];
        while (rest.len > 0) {
            first = @min(rest.len, r.intRangeAtMost(usize, 0, default_frame_size));
            const last = first == rest.len and !unfinished;
            step.frame(.continuation, if (last) flag_end_headers else 0, id, rest[0..first]);
            rest = rest[first..];
        }
    }

    /// A priority's dependency and weight; when wild, on the stream itself.
    pub fn priorityFields(self: *Gen, step: *Step, id: u32) void {
        const r = self.random;
        var dep: u32 = if (self.wild()) id else self.knownId() orelse 0;
        if (dep == id and !self.hostile) dep = 0;
        if (r.boolean()) dep |= 0x8000_0000; // exclusive
        var b: [5]u8 = undefined;
        std.mem.writeInt(u32, b[0..4], dep, .big);
        b[4] = r.int(u8);
        step.bytes.append(&b);
    }

    // ---- bodies ----

    pub fn data(self: *Gen, step: *Step) void {
        const cs = self.pickOpen() orelse {
            if (self.wild()) return self.dataElsewhere(step);
            return self.windowUpdate(step);
        };
        self.sendBody(step, cs);
    }

    /// Body bytes of the stream's plan, sized around the windows the server granted (a
    /// wild client goes past them), in frames of up to 16384 bytes, some padded.
    pub fn sendBody(self: *Gen, step: *Step, cs: *ClientStream) void {
        const r = self.random;
        const breaks = self.wild();
        const avail: u64 = @intCast(@max(self.case().clientWindow(cs.id), 0));
        var size: u64 = if (cs.planned > cs.sent) cs.planned - cs.sent else 0;
        if (breaks) size = switch (r.uintLessThan(u8, 4)) {
            0 => avail -| 1,
            1 => avail + 1,
            2 => size + r.uintAtMost(u64, 64),
            else => size,
        } else size = @min(size, avail);
        size = @min(size, 2 * h2.stream_window);
        var left = size;
        while (true) {
            const pad: ?u8 = if (r.uintLessThan(u8, 10) == 0) r.uintAtMost(u8, @intCast(@min(255, left))) else null;
            const overhead: u64 = if (pad) |p| @as(u64, p) + 1 else 0;
            const n = @min(left -| overhead, default_frame_size - overhead);
            const last = n + overhead >= left;
            const end = last and cs.sent + n >= cs.planned and (breaks or r.uintLessThan(u8, 8) != 0);
            step.data(cs.id, cs.sent, @intCast(n), pad, end);
            cs.sent += n;
            left -|= n + overhead;
            if (end) cs.ended = true;
            if (last or step.frames == step.starts.len) break;
        }
    }

    /// DATA where none may go: a closed or idle stream, stream 0, an even one.
    pub fn dataElsewhere(self: *Gen, step: *Step) void {
        const r = self.random;
        const id = if (r.boolean()) self.badId() else self.knownId() orelse 0;
        step.data(id, 0, r.uintAtMost(usize, 100), null, r.boolean());
    }

    pub fn trailers(self: *Gen, step: *Step) void {
        const r = self.random;
        const cs = self.pickOpen() orelse return self.ping(step);
        const breaks = self.wild();
        const f = &self.fields;
        f.len = 0;
        f.text_len = 0;
        f.add("x-trailer", f.filler(r, r.uintLessThan(usize, 16)));
        if (breaks and r.boolean()) f.add(":path", "/");
        self.encodeBlock();
        self.headerFrames(step, cs.id, !breaks or r.boolean());
        cs.ended = true;
    }

    // ---- control frames ----

    pub fn windowUpdate(self: *Gen, step: *Step) void {
        const r = self.random;
        const breaks = self.wild();
        const id: u32 = if (r.uintLessThan(u8, 5) < 2) 0 else if (breaks) self.badId() else self.knownId() orelse 0;
        const to_max = window_max - self.case().grantedWindow(id);
        var inc: u32 = if (breaks) switch (r.uintLessThan(u8, 6)) {
            0 => 0,
            1 => @intCast(std.math.clamp(to_max + 1, 1, window_max)),
            2 => @intCast(window_max),
            else => r.int(u31),
        } else if (to_max < 1) return self.ping(step) else switch (r.uintLessThan(u8, 8)) {
            0 => 1,
            1 => @intCast(@min(1 << 30, to_max)),
            2, 3 => @intCast(@min(to_max, window_max)),
            else => @intCast(@min(r.intRangeAtMost(i64, 1, 70_000), to_max)),
        };
        if (r.uintLessThan(u8, 20) == 0) inc |= 0x8000_0000; // the reserved bit, ignored
        var p: [5]u8 = undefined;
        std.mem.writeInt(u32, p[0..4], inc, .big);
        p[4] = 0;
        const len: usize = if (breaks and r.uintLessThan(u8, 8) == 0) r.uintAtMost(usize, 5) else 4;
        step.frame(.window_update, 0, id, p[0..len]);
    }

    pub fn settings(self: *Gen, step: *Step) void {
        const r = self.random;
        const breaks = self.wild();
        var p: [6 * 6]u8 = undefined;
        const n = r.uintAtMost(usize, 6);
        for (0..n) |i| {
            const id, var value = settingPick(r, breaks);
            if (id == setting_initial_window_size and !breaks) value = @min(value, self.case().initialWindowRoom());
            std.mem.writeInt(u16, p[i * 6 ..][0..2], id, .big);
            std.mem.writeInt(u32, p[i * 6 + 2 ..][0..4], value, .big);
        }
        var len = n * 6;
        if (breaks and r.uintLessThan(u8, 8) == 0 and len > 0) len -= 1;
        step.frame(.settings, 0, if (breaks and r.uintLessThan(u8, 8) == 0) 1 else 0, p[0..len]);
    }

    pub fn ping(self: *Gen, step: *Step) void {
        const r = self.random;
        const breaks = self.wild();
        var p: [9]u8 = undefined;
        r.bytes(&p);
        const len: usize = if (breaks and r.boolean()) r.uintAtMost(usize, 9) else 8;
        step.frame(.ping, if (r.uintLessThan(u8, 10) == 0) flag_ack else 0, if (breaks and r.boolean()) 1 else 0, p[0..len]);
    }

    /// PRIORITY (deprecated, still parsed): on a known, idle or new stream; when wild of
    /// the wrong length or on itself.
    pub fn priority(self: *Gen, step: *Step) void {
        const r = self.random;
        const id = switch (r.uintLessThan(u8, 3)) {
            0 => self.next_id,
            1 => self.next_id +| 2 * r.intRangeAtMost(u32, 1, 10),
            else => self.knownId() orelse self.next_id,
        };
        const len: usize = if (self.wild() and r.boolean()) 4 + 2 * r.uintAtMost(usize, 1) else 5;
        step.head(len, .priority, 0, id);
        const start = step.bytes.items().len;
        self.priorityFields(step, id);
        // A length of 4 or 6 (a frame size error): the payload follows the head's length.
        if (len < 5) step.bytes.list.items.len = start + len else if (len > 5) step.bytes.byte(0);
    }

    pub fn rstStream(self: *Gen, step: *Step) void {
        const r = self.random;
        var p: [4]u8 = undefined;
        const code: u32 = if (r.uintLessThan(u8, 10) == 0) r.int(u32) else r.uintAtMost(u32, error_code_max);
        std.mem.writeInt(u32, &p, code, .big);
        const id = self.someId();
        for (self.streams[0..self.count]) |*cs| if (cs.id == id) {
            cs.reset = true;
        };
        step.frame(.rst_stream, 0, id, &p);
    }

    pub fn goaway(self: *Gen, step: *Step) void {
        const r = self.random;
        var p: [24]u8 = undefined;
        r.bytes(&p);
        std.mem.writeInt(u32, p[0..4], r.uintAtMost(u32, self.next_id), .big);
        std.mem.writeInt(u32, p[4..8], if (r.boolean()) 0 else r.uintAtMost(u32, 16), .big);
        const len: usize = if (self.wild() and r.boolean()) 4 else 8 + r.uintAtMost(usize, 16);
        step.frame(.goaway, 0, 0, p[0..len]);
    }

    /// A frame of an unknown type (RFC 9113 5.5: ignored), on any stream.
    pub fn unknownFrame(self: *Gen, step: *Step) void {
        const r = self.random;
        var p: [64]u8 = undefined;
        r.bytes(&p);
        const len = r.uintAtMost(usize, p.len);
        step.headRaw(len, r.intRangeAtMost(u8, 10, 255), r.int(u8), if (r.boolean()) self.badId() else self.knownId() orelse 0);
        step.bytes.append(p[0..len]);
    }

    /// When wild, frames a client must never send: PUSH_PROMISE, a stray CONTINUATION, a
    /// frame past SETTINGS_MAX_FRAME_SIZE, a SETTINGS ACK with a payload. Else a SETTINGS ACK.
    pub fn oddity(self: *Gen, step: *Step) void {
        const r = self.random;
        if (!self.wild()) return step.frame(.settings, flag_ack, 0, "");
        var p: [8]u8 = undefined;
        r.bytes(&p);
        switch (r.uintLessThan(u8, 4)) {
            0 => step.frame(.push_promise, flag_end_headers, self.someId(), &p),
            1 => step.frame(.continuation, flag_end_headers, self.someId(), p[0..r.uintAtMost(usize, 8)]),
            2 => step.frame(.settings, flag_ack, 0, p[0..6]),
            else => {
                const id = if (self.pickOpen()) |cs| cs.id else self.next_id;
                step.data(id, 0, default_frame_size + 1, null, false);
            },
        }
    }

    pub fn deinit(self: *Gen) void {
        self.block.deinit();
    }
};

pub fn bodySize(r: std.Random) u64 {
    return switch (r.uintLessThan(u8, 20)) {
        0, 1 => 0,
        2...9 => r.intRangeAtMost(u64, 1, 100),
        10...16 => r.intRangeAtMost(u64, 100, 20_000),
        else => r.intRangeAtMost(u64, 20_000, 300_000),
    };
}

/// A setting and a value at or around its boundaries (RFC 9113 6.5.2), or an unknown one;
/// values the protocol refuses only when `breaks`.
pub fn settingPick(r: std.Random, breaks: bool) struct { u16, u32 } {
    const id: u16 = switch (r.uintLessThan(u8, 20)) {
        0...6 => setting_initial_window_size,
        7...10 => setting_max_frame_size,
        11 => setting_header_table_size,
        12 => setting_enable_push,
        13 => setting_max_concurrent_streams,
        14 => setting_max_header_list_size,
        15 => setting_enable_connect_protocol,
        else => switch (r.uintLessThan(u8, 4)) {
            0 => 0,
            1 => 7,
            2 => 9,
            else => 0xffff,
        },
    };
    const valid: []const u32, const invalid: []const u32 = switch (id) {
        setting_initial_window_size => .{ &.{ 0, 1, 100, 16_384, 65_535, 65_536, 1 << 20, 1 << 30, 0x7fff_ffff }, &.{ 0x8000_0000, 0xffff_ffff } },
        setting_max_frame_size => .{ &.{ 16_384, 16_385, 65_536, (1 << 24) - 1 }, &.{ 0, 16_383, 1 << 24, 0xffff_ffff } },
        setting_enable_push, setting_enable_connect_protocol => .{ &.{ 0, 1 }, &.{ 2, 0xffff_ffff } },
        setting_header_table_size => .{ &.{ 0, 4096, 0xffff_ffff }, &.{} },
        setting_max_concurrent_streams => .{ &.{ 0, 1, 100, 0xffff_ffff }, &.{} },
        else => .{ &.{ 0, 100, 0xffff_ffff }, &.{} },
    };
    if (breaks and invalid.len > 0) return .{ id, if (r.boolean()) r.int(u32) else invalid[r.uintLessThan(usize, invalid.len)] };
    const value = valid[r.uintLessThan(usize, valid.len)];
    // A random value where any is valid, or for the window (capped by the caller).
    if (r.uintLessThan(u8, 8) == 0 and (invalid.len == 0 or id == setting_initial_window_size)) return .{ id, r.int(u31) };
    return .{ id, value };
}

// ---- mutations of the client's bytes -----------------------------------------------------

pub fn mutate(step: *Step, r: std.Random) void {
    for (0..1 + r.uintLessThan(u8, 2)) |_| mutateOnce(step, r);
}

/// One change: a bit, a byte, a frame's length, type, flags or stream id, truncation,
/// inserted bytes, a frame repeated.
pub fn mutateOnce(step: *Step, r: std.Random) void {
    const b = step.bytes.items();
    if (b.len == 0) return;
    var frame_at = if (step.frames > 0) step.starts[r.uintLessThan(usize, step.frames)] else 0;
    // An earlier mutation of the step may have cut or moved its frames.
    if (frame_at >= b.len) frame_at = 0;
    switch (r.uintLessThan(u8, 8)) {
        0 => b[r.uintLessThan(usize, b.len)] ^= @as(u8, 1) << r.int(u3),
        1 => b[r.uintLessThan(usize, b.len)] = r.int(u8),
        2 => if (frame_at + 3 <= b.len) {
            const old = std.mem.readInt(u24, b[frame_at..][0..3], .big);
            const lengths = [_]u24{ 0, old -% 1, old +% 1, r.int(u14), 16_384, 16_385, std.math.maxInt(u24) };
            std.mem.writeInt(u24, b[frame_at..][0..3], lengths[r.uintLessThan(usize, lengths.len)], .big);
        },
        3 => if (frame_at + frame_header_len <= b.len) {
            b[frame_at + 3 + r.uintLessThan(usize, 2)] = r.int(u8);
        },
        4 => if (frame_at + frame_header_len <= b.len) {
            std.mem.writeInt(u32, b[frame_at + 5 ..][0..4], r.int(u32) & (if (r.boolean()) @as(u32, 0xff) else 0xffff_ffff), .big);
        },
        5 => step.bytes.list.items.len = r.uintLessThan(usize, b.len),
        6 => {
            var extra: [8]u8 = undefined;
            r.bytes(&extra);
            const at = r.uintAtMost(usize, b.len);
            step.bytes.list.insertSlice(gpa, at, extra[0..r.intRangeAtMost(usize, 1, 8)]) catch outOfMemory();
        },
        else => {
            const k = std.mem.indexOfScalarPos(usize, step.starts[0..step.frames], 0, frame_at) orelse return;
            const stop = if (k + 1 < step.frames) @min(step.starts[k + 1], b.len) else b.len;
            if (stop <= frame_at) return;
            const copy = gpa.dupe(u8, b[frame_at..stop]) catch outOfMemory();
            defer gpa.free(copy);
            step.bytes.append(copy);
        },
    }
}
