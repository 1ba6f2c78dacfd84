//! HPACK, the header compression of HTTP/2 (RFC 7541). Sans-IO.
//!
//! `Decoder` decodes complete header blocks and keeps the peer's dynamic table: a ring
//! of entries whose bytes it owns (one allocation per inserted entry, the only
//! allocations it makes). Decoded headers are slices into the caller's scratch buffer
//! (Huffman-decoded strings, copies of dynamic table entries), into the block itself
//! (plain literal strings), or into the static table.
//!
//! The encoder keeps no dynamic table: every field is an indexed static entry or a
//! literal "without indexing", so the peer's decoder never has to store anything of
//! ours, and encoding needs no state and no allocation.
const std = @import("std");
const builtin = @import("builtin");
const huffman = @import("../http/huffman.zig");
const prefix_int = @import("../http/prefix_int.zig");

/// The dynamic table's bytes when no allocator is given (`Decoder.init`). The engine
/// always links libc; a plain `zig test` of this file does not, and then gets the
/// testing allocator (which also checks for leaks).
const default_allocator = if (builtin.link_libc)
    std.heap.c_allocator
else if (builtin.is_test)
    std.testing.allocator
else
    std.heap.page_allocator;

/// The shared field type: a decoded list goes to `http/request_fields.zig` as it is.
pub const Header = @import("../http/fields.zig").Header;
pub const Error = error{ Compression, HeaderListTooLarge, OutOfMemory };

/// RFC 7541 4.1: an entry's size is its name's and value's lengths plus 32.
const entry_overhead = 32;

/// RFC 7541 Appendix A.
const static_table = [61]Header{
    .{ .name = ":authority", .value = "" },
    .{ .name = ":method", .value = "GET" },
    .{ .name = ":method", .value = "POST" },
    .{ .name = ":path", .value = "/" },
    .{ .name = ":path", .value = "/index.html" },
    .{ .name = ":scheme", .value = "http" },
    .{ .name = ":scheme", .value = "https" },
    .{ .name = ":status", .value = "200" },
    .{ .name = ":status", .value = "204" },
    .{ .name = ":status", .value = "206" },
    .{ .name = ":status", .value = "304" },
    .{ .name = ":status", .value = "400" },
    .{ .name = ":status", .value = "404" },
    .{ .name = ":status", .value = "500" },
    .{ .name = "accept-charset", .value = "" },
    .{ .name = "accept-encoding", .value = "gzip, deflate" },
    .{ .name = "accept-language", .value = "" },
    .{ .name = "accept-ranges", .value = "" },
    .{ .name = "accept", .value = "" },
    .{ .name = "access-control-allow-origin", .value = "" },
    .{ .name = "age", .value = "" },
    .{ .name = "allow", .value = "" },
    .{ .name = "authorization", .value = "" },
    .{ .name = "cache-control", .value = "" },
    .{ .name = "content-disposition", .value = "" },
    .{ .name = "content-encoding", .value = "" },
    .{ .name = "content-language", .value = "" },
    .{ .name = "content-length", .value = "" },
    .{ .name = "content-location", .value = "" },
    .{ .name = "content-range", .value = "" },
    .{ .name = "content-type", .value = "" },
    .{ .name = "cookie", .value = "" },
    .{ .name = "date", .value = "" },
    .{ .name = "etag", .value = "" },
    .{ .name = "expect", .value = "" },
    .{ .name = "expires", .value = "" },
    .{ .name = "from", .value = "" },
    .{ .name = "host", .value = "" },
    .{ .name = "if-match", .value = "" },
    .{ .name = "if-modified-since", .value = "" },
    .{ .name = "if-none-match", .value = "" },
    .{ .name = "if-range", .value = "" },
    .{ .name = "if-unmodified-since", .value = "" },
    .{ .name = "last-modified", .value = "" },
    .{ .name = "link", .value = "" },
    .{ .name = "location", .value = "" },
    .{ .name = "max-forwards", .value = "" },
    .{ .name = "proxy-authenticate", .value = "" },
    .{ .name = "proxy-authorization", .value = "" },
    .{ .name = "range", .value = "" },
    .{ .name = "referer", .value = "" },
    .{ .name = "refresh", .value = "" },
    .{ .name = "retry-after", .value = "" },
    .{ .name = "server", .value = "" },
    .{ .name = "set-cookie", .value = "" },
    .{ .name = "strict-transport-security", .value = "" },
    .{ .name = "transfer-encoding", .value = "" },
    .{ .name = "user-agent", .value = "" },
    .{ .name = "vary", .value = "" },
    .{ .name = "via", .value = "" },
    .{ .name = "www-authenticate", .value = "" },
};

/// Name -> the first (1-based) static index with that name; entries that share a name
/// are adjacent in the table.
const static_names = blk: {
    @setEvalBranchQuota(20_000);
    var kvs: [static_table.len]struct { []const u8, u8 } = undefined;
    var n: usize = 0;
    for (static_table, 0..) |h, i| {
        if (i > 0 and std.mem.eql(u8, static_table[i - 1].name, h.name)) continue;
        kvs[n] = .{ h.name, i + 1 };
        n += 1;
    }
    const final = kvs[0..n].*;
    break :blk std.StaticStringMap(u8).initComptime(final);
};

// ---------------------------------------------------------------------------------
// Integers (RFC 7541 5.1)

/// Reads an integer with an N-bit prefix at `pos.*` (the prefix's flag bits are ignored).
/// Values beyond u32, over-long encodings and truncated input (a header block arrives
/// whole) are `Compression` errors.
fn decodeInt(block: []const u8, pos: *usize, comptime prefix: u4) error{Compression}!u32 {
    const value = prefix_int.decode(block, pos, prefix, std.math.maxInt(u32)) catch
        return error.Compression;
    return @intCast(value);
}

const encodeInt = prefix_int.encode;

// ---------------------------------------------------------------------------------
// Decoder

const Entry = struct {
    /// name ++ value, owned.
    bytes: []u8,
    name_len: u32,

    fn header(e: *const Entry) Header {
        return .{ .name = e.bytes[0..e.name_len], .value = e.bytes[e.name_len..] };
    }
    fn size(e: *const Entry) usize {
        return e.bytes.len + entry_overhead;
    }
};

pub const Decoder = struct {
    /// The dynamic table's entries and ring come from it.
    gpa: std.mem.Allocator,
    /// Our SETTINGS_HEADER_TABLE_SIZE: the most a size update may ask for.
    max_table_size: u32,
    /// The table's current maximum size, as last set by the peer (RFC 7541 4.2).
    table_size_limit: u32,
    /// Sum of the entries' sizes (RFC 7541 4.1).
    table_size: usize = 0,
    /// Ring of entries: `head` is the oldest, `head + count - 1` (mod len) the newest.
    ring: []Entry = &.{},
    head: usize = 0,
    count: usize = 0,

    /// max_table_size: our SETTINGS_HEADER_TABLE_SIZE (the bound the peer may set with a
    /// dynamic table size update). The table starts at that size.
    pub fn init(max_table_size: u32) Decoder {
        return initWith(default_allocator, max_table_size);
    }

    /// `init` with the table's memory from `gpa` (an HTTP/2 session's allocator).
    pub fn initWith(gpa: std.mem.Allocator, max_table_size: u32) Decoder {
        return .{
            .gpa = gpa,
            .max_table_size = max_table_size,
            .table_size_limit = max_table_size,
        };
    }

    /// Frees the dynamic table.
    pub fn deinit(self: *Decoder) void {
        while (self.count > 0) self.evictOldest();
        if (self.ring.len > 0) self.gpa.free(self.ring);
        self.ring = &.{};
        self.head = 0;
    }

    /// Decodes one complete header block. Decoded names and values are written into
    /// `scratch` (Huffman-decoded strings and copies of dynamic table entries) and `out`
    /// receives, in order, slices into `scratch`, into `block` (plain literal strings) or
    /// into the static table. Returns the filled part of `out`.
    ///
    /// error.HeaderListTooLarge when `scratch` or `out` runs out; error.Compression for any
    /// malformed input. After an error the table may be out of step with the peer's: the
    /// connection must be closed (COMPRESSION_ERROR).
    pub fn decode(self: *Decoder, block: []const u8, scratch: []u8, out: []Header) Error![]Header {
        var pos: usize = 0;
        var used: usize = 0;
        var n: usize = 0;
        var fields_seen = false;
        while (pos < block.len) {
            const b = block[pos];
            if (b & 0x80 != 0) {
                // 6.1 Indexed Header Field.
                const index = try decodeInt(block, &pos, 7);
                const h = try self.field(index);
                if (n == out.len) return error.HeaderListTooLarge;
                out[n] = if (index > static_table.len) .{
                    .name = try copyToScratch(scratch, &used, h.name),
                    .value = try copyToScratch(scratch, &used, h.value),
                } else h;
                n += 1;
                fields_seen = true;
            } else if (b & 0xe0 == 0x20) {
                // 6.3 Dynamic Table Size Update: only before the block's first field (4.2).
                if (fields_seen) return error.Compression;
                const limit = try decodeInt(block, &pos, 5);
                if (limit > self.max_table_size) return error.Compression;
                self.table_size_limit = limit;
                self.evictTo(limit);
                std.debug.assert(self.table_size <= self.table_size_limit);
            } else {
                // 6.2 Literal Header Field: with incremental indexing (01), without
                // indexing (0000) or never indexed (0001).
                const indexing = b & 0x40 != 0;
                const index = if (indexing)
                    try decodeInt(block, &pos, 6)
                else
                    try decodeInt(block, &pos, 4);
                const name = if (index == 0)
                    try readString(block, &pos, scratch, &used)
                else if (index > static_table.len)
                    try copyToScratch(scratch, &used, (try self.field(index)).name)
                else
                    static_table[index - 1].name;
                const value = try readString(block, &pos, scratch, &used);
                if (n == out.len) return error.HeaderListTooLarge;
                out[n] = .{ .name = name, .value = value };
                n += 1;
                if (indexing) try self.insert(name, value);
                fields_seen = true;
            }
        }
        return out[0..n];
    }

    /// The field at a 1-based index of the combined static and dynamic tables (2.3.3).
    /// A dynamic entry's slices stay valid only until the next insertion or eviction.
    fn field(self: *const Decoder, index: u32) error{Compression}!Header {
        if (index == 0) return error.Compression;
        if (index <= static_table.len) return static_table[index - 1];
        const d = index - static_table.len;
        if (d > self.count) return error.Compression;
        return self.entry(d).header();
    }

    /// Dynamic entry `d`, 1 being the newest.
    fn entry(self: *const Decoder, d: usize) *const Entry {
        return &self.ring[(self.head + self.count - d) % self.ring.len];
    }

    fn evictOldest(self: *Decoder) void {
        std.debug.assert(self.count > 0 and self.count <= self.ring.len);
        const e = self.ring[self.head];
        std.debug.assert(e.size() <= self.table_size);
        self.table_size -= e.size();
        self.gpa.free(e.bytes);
        self.head = (self.head + 1) % self.ring.len;
        self.count -= 1;
    }

    fn evictTo(self: *Decoder, limit: usize) void {
        while (self.table_size > limit) self.evictOldest();
        // An empty table has no size left: the entries and the sum agree.
        std.debug.assert(self.table_size <= limit and (self.count > 0 or self.table_size == 0));
    }

    /// Adds an entry (4.4): evicts oldest entries to make room; an entry larger than
    /// the table empties it and is not added.
    fn insert(self: *Decoder, name: []const u8, value: []const u8) Error!void {
        const size = name.len + value.len + entry_overhead;
        if (size > self.table_size_limit) {
            self.evictTo(0);
            return;
        }
        // Copied before evicting: `name` may be an entry that eviction frees.
        const bytes = try self.gpa.alloc(u8, name.len + value.len);
        errdefer self.gpa.free(bytes);
        @memcpy(bytes[0..name.len], name);
        @memcpy(bytes[name.len..], value);
        self.evictTo(self.table_size_limit - size);
        if (self.count == self.ring.len) try self.grow();
        self.ring[(self.head + self.count) % self.ring.len] = .{
            .bytes = bytes,
            .name_len = @intCast(name.len),
        };
        self.count += 1;
        self.table_size += size;
        // RFC 7541 4.4: after an insertion the table is within its current maximum, which
        // is within our SETTINGS_HEADER_TABLE_SIZE.
        std.debug.assert(self.table_size <= self.table_size_limit);
        std.debug.assert(self.table_size_limit <= self.max_table_size);
        std.debug.assert(self.count <= self.ring.len);
    }

    fn grow(self: *Decoder) error{OutOfMemory}!void {
        // Only a full ring grows (its entries are copied in order from `head`).
        std.debug.assert(self.count == self.ring.len);
        const new_len = @max(8, self.ring.len * 2);
        const ring = try self.gpa.alloc(Entry, new_len);
        for (0..self.count) |i| ring[i] = self.ring[(self.head + i) % self.ring.len];
        if (self.ring.len > 0) self.gpa.free(self.ring);
        self.ring = ring;
        self.head = 0;
    }
};

fn copyToScratch(scratch: []u8, used: *usize, s: []const u8) error{HeaderListTooLarge}![]const u8 {
    if (s.len > scratch.len - used.*) return error.HeaderListTooLarge;
    const dst = scratch[used.*..][0..s.len];
    @memcpy(dst, s);
    used.* += s.len;
    return dst;
}

/// A string literal (5.2): a plain one is returned as a slice of `block`, a Huffman one
/// is decoded into `scratch`.
fn readString(block: []const u8, pos: *usize, scratch: []u8, used: *usize) Error![]const u8 {
    if (pos.* >= block.len) return error.Compression;
    const coded = block[pos.*] & 0x80 != 0;
    const len = try decodeInt(block, pos, 7);
    if (len > block.len - pos.*) return error.Compression;
    const raw = block[pos.*..][0..len];
    pos.* += len;
    if (!coded) return raw;
    const dst = scratch[used.*..];
    const n = huffman.decode(dst, raw) catch |err| switch (err) {
        error.NoSpace => return error.HeaderListTooLarge,
        error.Compression => return error.Compression,
    };
    used.* += n;
    return dst[0..n];
}

// ---------------------------------------------------------------------------------
// Encoder

/// Writes `:status` for `status` into `buf`: an indexed static entry for 200, 204, 206,
/// 304, 400, 404 and 500, else a literal without indexing with the indexed name 8.
/// Returns the bytes written.
pub fn encodeStatus(buf: []u8, status: u16) error{NoSpace}!usize {
    const index: u8 = switch (status) {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        else => 0,
    };
    if (index != 0) return encodeInt(buf, 0, 0x80, 7, index);
    var digits: [5]u8 = undefined;
    const len = std.fmt.printInt(&digits, status, 10, .lower, .{});
    const p = try encodeInt(buf, 0, 0x00, 4, 8);
    return writeString(buf, p, digits[0..len]);
}

/// Writes one field into `buf`: an indexed static entry when both name and value match
/// one, else a literal without indexing, its name indexed when the static table has it.
/// Names are emitted as given (the caller lower-cases them). Returns the bytes written.
pub fn encodeField(buf: []u8, name: []const u8, value: []const u8) error{NoSpace}!usize {
    if (static_names.get(name)) |first| {
        var i: usize = first;
        while (i <= static_table.len and std.mem.eql(
            u8,
            static_table[i - 1].name,
            name,
        )) : (i += 1) {
            if (std.mem.eql(
                u8,
                static_table[i - 1].value,
                value,
            )) return encodeInt(buf, 0, 0x80, 7, i);
        }
        const p = try encodeInt(buf, 0, 0x00, 4, first);
        return writeString(buf, p, value);
    }
    var p = try encodeInt(buf, 0, 0x00, 4, 0);
    p = try writeString(buf, p, name);
    return writeString(buf, p, value);
}

/// A string literal at `buf[pos]`, Huffman-encoded when that is shorter. Returns the
/// position after it.
fn writeString(buf: []u8, pos: usize, s: []const u8) error{NoSpace}!usize {
    const hlen = huffman.encodedLen(s);
    if (hlen < s.len) {
        const p = try encodeInt(buf, pos, 0x80, 7, hlen);
        if (buf.len - p < hlen) return error.NoSpace;
        const written = huffman.encode(buf[p..][0..hlen], s);
        // The encoder writes exactly the length its length function promised.
        std.debug.assert(written == hlen);
        return p + written;
    }
    const p = try encodeInt(buf, pos, 0x00, 7, s.len);
    if (buf.len - p < s.len) return error.NoSpace;
    @memcpy(buf[p..][0..s.len], s);
    return p + s.len;
}

// ---------------------------------------------------------------------------------
// Tests

const testing = std.testing;

fn unhex(buf: []u8, s: []const u8) []u8 {
    var n: usize = 0;
    var i: usize = 0;
    while (i < s.len) {
        if (s[i] == ' ') {
            i += 1;
            continue;
        }
        buf[n] = std.fmt.parseInt(u8, s[i..][0..2], 16) catch unreachable;
        n += 1;
        i += 2;
    }
    return buf[0..n];
}

fn expectHeaders(expected: []const [2][]const u8, got: []const Header) !void {
    try testing.expectEqual(expected.len, got.len);
    for (expected, got) |e, g| {
        try testing.expectEqualStrings(e[0], g.name);
        try testing.expectEqualStrings(e[1], g.value);
    }
}

/// `expected` newest first, as the RFC's examples list the table.
fn expectTable(d: *const Decoder, expected: []const [2][]const u8, size: usize) !void {
    try testing.expectEqual(size, d.table_size);
    try testing.expectEqual(expected.len, d.count);
    for (expected, 1..) |e, i| {
        const h = d.entry(i).header();
        try testing.expectEqualStrings(e[0], h.name);
        try testing.expectEqualStrings(e[1], h.value);
    }
}

/// Decodes `hex_block` with `d` into fresh buffers and compares.
fn expectDecode(d: *Decoder, hex_block: []const u8, expected: []const [2][]const u8) !void {
    var block_buf: [512]u8 = undefined;
    var scratch: [1024]u8 = undefined;
    var out: [16]Header = undefined;
    const got = try d.decode(unhex(&block_buf, hex_block), &scratch, &out);
    try expectHeaders(expected, got);
}

fn expectDecodeError(err: Error, max_table_size: u32, hex_block: []const u8) !void {
    var d = Decoder.init(max_table_size);
    defer d.deinit();
    var block_buf: [64]u8 = undefined;
    var scratch: [256]u8 = undefined;
    var out: [16]Header = undefined;
    try testing.expectError(err, d.decode(unhex(&block_buf, hex_block), &scratch, &out));
}

test "every public declaration compiles" {
    testing.refAllDecls(@This());
    testing.refAllDecls(Decoder);
}

test "C.1 integers: HPACK's u32 bound, every failure a Compression error" {
    // The codec and RFC 7541 C.1's examples are tested in http/prefix_int.zig; here what
    // HPACK adds: the largest u32 round-trips, one more and a cut integer are refused.
    var buf: [8]u8 = undefined;
    const n = try encodeInt(&buf, 0, 0, 7, std.math.maxInt(u32));
    var pos: usize = 0;
    try testing.expectEqual(@as(u32, std.math.maxInt(u32)), try decodeInt(buf[0..n], &pos, 7));
    const m = try encodeInt(&buf, 0, 0, 7, @as(usize, std.math.maxInt(u32)) + 1);
    pos = 0;
    try testing.expectError(error.Compression, decodeInt(buf[0..m], &pos, 7));
    pos = 0;
    try testing.expectError(error.Compression, decodeInt(buf[0 .. n - 1], &pos, 7));
}

test "C.2.1 literal header field with indexing" {
    var d = Decoder.init(4096);
    defer d.deinit();
    try expectDecode(
        &d,
        "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
        &.{.{ "custom-key", "custom-header" }},
    );
    try expectTable(&d, &.{.{ "custom-key", "custom-header" }}, 55);
}

test "C.2.2 literal header field without indexing" {
    var d = Decoder.init(4096);
    defer d.deinit();
    try expectDecode(&d, "040c 2f73 616d 706c 652f 7061 7468", &.{.{ ":path", "/sample/path" }});
    try expectTable(&d, &.{}, 0);
}

test "C.2.3 literal header field never indexed" {
    var d = Decoder.init(4096);
    defer d.deinit();
    try expectDecode(
        &d,
        "1008 7061 7373 776f 7264 0673 6563 7265 74",
        &.{.{ "password", "secret" }},
    );
    try expectTable(&d, &.{}, 0);
}

test "C.2.4 indexed header field" {
    var d = Decoder.init(4096);
    defer d.deinit();
    try expectDecode(&d, "82", &.{.{ ":method", "GET" }});
    try expectTable(&d, &.{}, 0);
}

const request1 = [_][2][]const u8{
    .{ ":method", "GET" },
    .{ ":scheme", "http" },
    .{ ":path", "/" },
    .{ ":authority", "www.example.com" },
};
const request2 = request1 ++ [_][2][]const u8{.{ "cache-control", "no-cache" }};
const request3 = [_][2][]const u8{
    .{ ":method", "GET" },
    .{ ":scheme", "https" },
    .{ ":path", "/index.html" },
    .{ ":authority", "www.example.com" },
    .{ "custom-key", "custom-value" },
};

fn expectRequests(blocks: [3][]const u8) !void {
    var d = Decoder.init(4096);
    defer d.deinit();
    try expectDecode(&d, blocks[0], &request1);
    try expectTable(&d, &.{.{ ":authority", "www.example.com" }}, 57);
    try expectDecode(&d, blocks[1], &request2);
    try expectTable(
        &d,
        &.{ .{ "cache-control", "no-cache" }, .{ ":authority", "www.example.com" } },
        110,
    );
    try expectDecode(&d, blocks[2], &request3);
    try expectTable(
        &d,
        &.{
            .{ "custom-key", "custom-value" },
            .{ "cache-control", "no-cache" },
            .{ ":authority", "www.example.com" },
        },
        164,
    );
}

test "C.3 requests without Huffman coding" {
    try expectRequests(.{
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    });
}

test "C.4 requests with Huffman coding" {
    try expectRequests(.{
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    });
}

const date1 = "Mon, 21 Oct 2013 20:13:21 GMT";
const date2 = "Mon, 21 Oct 2013 20:13:22 GMT";
const location = "https://www.example.com";
const cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";

fn expectResponses(blocks: [3][]const u8) !void {
    var d = Decoder.init(256);
    defer d.deinit();
    try expectDecode(
        &d,
        blocks[0],
        &.{
            .{ ":status", "302" },
            .{ "cache-control", "private" },
            .{ "date", date1 },
            .{ "location", location },
        },
    );
    try expectTable(
        &d,
        &.{
            .{ "location", location },
            .{ "date", date1 },
            .{ "cache-control", "private" },
            .{ ":status", "302" },
        },
        222,
    );
    try expectDecode(
        &d,
        blocks[1],
        &.{
            .{ ":status", "307" },
            .{ "cache-control", "private" },
            .{ "date", date1 },
            .{ "location", location },
        },
    );
    try expectTable(
        &d,
        &.{
            .{ ":status", "307" },
            .{ "location", location },
            .{ "date", date1 },
            .{ "cache-control", "private" },
        },
        222,
    );
    try expectDecode(
        &d,
        blocks[2],
        &.{
            .{ ":status", "200" },
            .{ "cache-control", "private" },
            .{ "date", date2 },
            .{ "location", location },
            .{ "content-encoding", "gzip" },
            .{ "set-cookie", cookie },
        },
    );
    try expectTable(
        &d,
        &.{ .{ "set-cookie", cookie }, .{ "content-encoding", "gzip" }, .{ "date", date2 } },
        215,
    );
}

test "C.5 responses without Huffman coding, table size 256" {
    try expectResponses(.{
        "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 " ++
            "2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 " ++
            "6c65 2e63 6f6d",
        "4803 3330 37c1 c0bf",
        "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d " ++
            "54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 " ++
            "5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e " ++
            "3d31",
    });
}

test "C.6 responses with Huffman coding, table size 256" {
    try expectResponses(.{
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 " ++
            "2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        "4883 640e ffc1 c0bf",
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab " ++
            "77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f " ++
            "9587 3160 65c0 03ed 4ee5 b106 3d50 07",
    });
}

test "a Huffman value holding EOS fails the block" {
    // Literal without indexing, name :path, Huffman value holding EOS.
    try expectDecodeError(error.Compression, 4096, "0484 ffff ffff");
}

test "decoder rejects malformed blocks" {
    // Index 0, as an indexed field.
    try expectDecodeError(error.Compression, 4096, "80");
    // Index beyond the (empty) dynamic table, and beyond a table of one entry.
    try expectDecodeError(error.Compression, 4096, "be");
    try expectDecodeError(error.Compression, 4096, "4001 6101 62 bf");
    // A literal whose indexed name is beyond the table.
    try expectDecodeError(error.Compression, 4096, "7e01 61");
    // Table size update above our setting (257 > 256); 256 itself is accepted.
    try expectDecodeError(error.Compression, 256, "3fe2 01");
    // Table size update after a field.
    try expectDecodeError(error.Compression, 4096, "8220");
    // Integer beyond u32 (127 + 0xffffffff), and too many continuation bytes.
    try expectDecodeError(error.Compression, 4096, "ffff ffff ff0f");
    try expectDecodeError(error.Compression, 4096, "ff80 8080 8080 00");
    // Truncated: integer, string, missing value, Huffman string.
    try expectDecodeError(error.Compression, 4096, "ff");
    try expectDecodeError(error.Compression, 4096, "040c 2f73");
    try expectDecodeError(error.Compression, 4096, "04");
    try expectDecodeError(error.Compression, 4096, "0085 f1e3");
    try expectDecodeError(error.Compression, 4096, "00");

    var d = Decoder.init(256);
    defer d.deinit();
    var block_buf: [16]u8 = undefined;
    var scratch: [16]u8 = undefined;
    var out: [4]Header = undefined;
    try expectHeaders(&.{}, try d.decode(unhex(&block_buf, "3fe1 01"), &scratch, &out));
    try testing.expectEqual(@as(u32, 256), d.table_size_limit);
    // Two size updates at the start of a block are fine.
    try expectHeaders(
        &.{.{ ":method", "GET" }},
        try d.decode(unhex(&block_buf, "203f e101 82"), &scratch, &out),
    );
}

test "decoder reports a header list too large for the caller's buffers" {
    var d = Decoder.init(4096);
    defer d.deinit();
    var block_buf: [64]u8 = undefined;
    var scratch: [64]u8 = undefined;
    var out: [2]Header = undefined;
    try testing.expectError(
        error.HeaderListTooLarge,
        d.decode(unhex(&block_buf, "8286 84"), &scratch, &out),
    );
    // Huffman "www.example.com" (15 bytes) into 10 bytes of scratch.
    try testing.expectError(
        error.HeaderListTooLarge,
        d.decode(unhex(&block_buf, "418c f1e3 c2e5 f23a 6ba0 ab90 f4ff"), scratch[0..10], &out),
    );
    // A dynamic entry copied into too small a scratch.
    var d2 = Decoder.init(4096);
    defer d2.deinit();
    _ = try d2.decode(
        unhex(&block_buf, "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"),
        &scratch,
        &out,
    );
    try testing.expectError(
        error.HeaderListTooLarge,
        d2.decode(unhex(&block_buf, "be"), scratch[0..20], &out),
    );
    try expectHeaders(
        &.{.{ "custom-key", "custom-header" }},
        try d2.decode(unhex(&block_buf, "be"), scratch[0..23], &out),
    );
}

test "dynamic table eviction, size updates and oversized entries" {
    var d = Decoder.init(4096);
    defer d.deinit();
    var block_buf: [4096]u8 = undefined;
    var scratch: [4096]u8 = undefined;
    var out: [64]Header = undefined;
    // A table of 100 bytes holds two entries "a: b" ... of 34 bytes each.
    _ = try d.decode(unhex(&block_buf, "3f45"), &scratch, &out);
    try testing.expectEqual(@as(u32, 100), d.table_size_limit);
    _ = try d.decode(unhex(&block_buf, "4001 6101 31 4001 6101 32"), &scratch, &out);
    try expectTable(&d, &.{ .{ "a", "2" }, .{ "a", "1" } }, 68);
    _ = try d.decode(unhex(&block_buf, "4001 6101 33"), &scratch, &out);
    try expectTable(&d, &.{ .{ "a", "3" }, .{ "a", "2" } }, 68);
    // Name taken from the entry that its own insertion evicts (RFC 7541 4.4): 'a' from
    // index 63 (the oldest, "a: 2"), with a value long enough to evict both.
    try expectHeaders(
        &.{.{ "a", "0123456789012345678901234567890123456789" }},
        try d.decode(
            unhex(
                &block_buf,
                "7f00 2830 3132 3334 3536 3738 3930 3132 3334 3536 3738 3930 3132 3334 3536 " ++
                    "3738 3930 3132 3334 3536 3738 39",
            ),
            &scratch,
            &out,
        ),
    );
    try expectTable(&d, &.{.{ "a", "0123456789012345678901234567890123456789" }}, 73);
    // An entry larger than the table empties it and is not added.
    var big: [80]u8 = undefined;
    @memset(&big, 'x');
    var blk: [100]u8 = undefined;
    blk[0] = 0x40; // literal with incremental indexing, new name
    var p = try encodeInt(&blk, 1, 0, 7, 1);
    blk[p] = 'b';
    p += 1;
    p = try encodeInt(&blk, p, 0, 7, big.len);
    @memcpy(blk[p..][0..big.len], &big);
    p += big.len;
    const got = try d.decode(blk[0..p], &scratch, &out);
    try testing.expectEqualStrings(&big, got[0].value);
    try expectTable(&d, &.{}, 0);
    // Fill again, then a size update to 0 empties the table; the limit stays 0.
    _ = try d.decode(unhex(&block_buf, "4001 6101 31"), &scratch, &out);
    try expectTable(&d, &.{.{ "a", "1" }}, 34);
    _ = try d.decode(unhex(&block_buf, "20"), &scratch, &out);
    try expectTable(&d, &.{}, 0);
    _ = try d.decode(unhex(&block_buf, "4001 6101 31"), &scratch, &out);
    try expectTable(&d, &.{}, 0);
    // Many entries through the ring (growth and wrap-around) at the full size.
    _ = try d.decode(unhex(&block_buf, "3fe1 1f"), &scratch, &out);
    try testing.expectEqual(@as(u32, 4096), d.table_size_limit);
    var i: usize = 0;
    while (i < 1000) : (i += 1) {
        var b: [16]u8 = undefined;
        const v = std.fmt.bufPrint(b[4..], "{d}", .{i}) catch unreachable;
        b[0] = 0x40;
        b[1] = 0x01;
        b[2] = 'k';
        b[3] = @intCast(v.len);
        _ = try d.decode(b[0 .. 4 + v.len], &scratch, &out);
        // Entries are 32 + 1 + digits: the table holds the newest ones that fit in 4096.
        var value_buf: [8]u8 = undefined;
        const newest = (try d.decode(&.{0xbe}, &value_buf, &out))[0];
        try testing.expectEqualStrings(v, newest.value);
        try testing.expect(d.table_size <= 4096);
    }
    try testing.expectEqual(@as(usize, 4096 / 36), d.count);
    const oldest = (try d.decode(&.{ 0xff, @intCast(61 + d.count - 127) }, &scratch, &out))[0];
    try testing.expectEqualStrings("887", oldest.value);
}

test "encoder output decodes to the same response headers" {
    const headers = [_][2][]const u8{
        .{ "content-type", "text/html; charset=utf-8" },
        .{ "content-length", "1234" },
        .{ "date", date1 },
        .{ "server", "uvicorn" },
        .{ "set-cookie", cookie },
        .{ "cache-control", "no-cache" },
        .{ "x-request-id", "5f2b9c1e-0c6b-4f5e-9a57-1a2b3c4d5e6f" },
        .{ "x-empty", "" },
        .{ "vary", "" },
        .{ "accept-encoding", "gzip, deflate" },
        .{ "x-binary", "\x00\x01\xfe\xff" },
    };
    for ([_]u16{ 200, 204, 206, 304, 400, 404, 500, 302, 101, 599, 999 }) |status| {
        var buf: [1024]u8 = undefined;
        var n = try encodeStatus(&buf, status);
        for (headers) |h| n += try encodeField(buf[n..], h[0], h[1]);

        var d = Decoder.init(4096);
        defer d.deinit();
        var scratch: [1024]u8 = undefined;
        var out: [16]Header = undefined;
        const got = try d.decode(buf[0..n], &scratch, &out);
        var status_buf: [3]u8 = undefined;
        const status_str = std.fmt.bufPrint(&status_buf, "{d}", .{status}) catch unreachable;
        try testing.expectEqualStrings(":status", got[0].name);
        try testing.expectEqualStrings(status_str, got[0].value);
        try expectHeaders(&headers, got[1..]);
        try expectTable(&d, &.{}, 0);
    }
}

test "encoder representations" {
    var buf: [64]u8 = undefined;
    // Indexed static entries.
    try testing.expectEqual(@as(usize, 1), try encodeStatus(&buf, 200));
    try testing.expectEqual(@as(u8, 0x88), buf[0]);
    try testing.expectEqual(@as(usize, 1), try encodeStatus(&buf, 500));
    try testing.expectEqual(@as(u8, 0x8e), buf[0]);
    try testing.expectEqual(
        @as(usize, 1),
        try encodeField(&buf, "accept-encoding", "gzip, deflate"),
    );
    try testing.expectEqual(@as(u8, 0x90), buf[0]);
    // 302: literal without indexing, name index 8, Huffman "302" (15 bits -> 2 bytes).
    var n = try encodeStatus(&buf, 302);
    try testing.expectEqualSlices(u8, &.{ 0x08, 0x82, 0x64, 0x02 }, buf[0..n]);
    // Indexed name (content-length = 28 > 15: 4-bit prefix 15 + 13).
    n = try encodeField(&buf, "content-length", "0");
    try testing.expectEqualSlices(u8, &.{ 0x0f, 0x0d, 0x01, '0' }, buf[0..n]);
    // A new name, plain where Huffman is not shorter.
    n = try encodeField(&buf, "x", "\x00");
    try testing.expectEqualSlices(u8, &.{ 0x00, 0x01, 'x', 0x01, 0x00 }, buf[0..n]);
    // Short buffers.
    try testing.expectError(error.NoSpace, encodeStatus(buf[0..0], 200));
    try testing.expectError(error.NoSpace, encodeStatus(buf[0..3], 302));
    try testing.expectError(
        error.NoSpace,
        encodeField(buf[0..10], "content-type", "text/html; charset=utf-8"),
    );
    try testing.expectError(error.NoSpace, encodeField(buf[0..4], "x", "\x00"));
}

test "random and mutated blocks never crash the decoder" {
    var prng = std.Random.DefaultPrng.init(0x7541);
    const rand = prng.random();
    var seed_buf: [512]u8 = undefined;
    const seed = unhex(
        &seed_buf,
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 " ++
            "2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3 4883 640e ffc1 c0bf",
    );
    var d = Decoder.init(256);
    defer d.deinit();
    var block: [64]u8 = undefined;
    var scratch: [256]u8 = undefined;
    var out: [8]Header = undefined;
    for (0..20_000) |round| {
        var len: usize = undefined;
        if (round % 2 == 0) {
            len = rand.uintAtMost(usize, block.len);
            rand.bytes(block[0..len]);
        } else {
            len = @min(seed.len, block.len);
            @memcpy(block[0..len], seed[0..len]);
            const flips = 1 + rand.uintLessThan(usize, 4);
            for (0..flips) |_| block[rand.uintLessThan(usize, len)] = rand.int(u8);
            len = rand.uintAtMost(usize, len);
        }
        if (d.decode(block[0..len], &scratch, &out)) |headers| {
            for (headers) |h| _ = h.name.len + h.value.len;
        } else |_| {
            // After an error a connection is closed: start again with a new table.
            d.deinit();
            d = Decoder.init(256);
        }
        try testing.expect(d.table_size <= d.table_size_limit);
    }
    var dec: [256]u8 = undefined;
    for (0..20_000) |_| {
        const len = rand.uintAtMost(usize, 40);
        rand.bytes(block[0..len]);
        if (huffman.decode(&dec, block[0..len])) |n| {
            try testing.expect(n <= dec.len);
        } else |err| switch (err) {
            // Random bytes are mostly no Huffman string (RFC 7541 5.2), or too long a one.
            error.Compression, error.NoSpace => {},
        }
    }
}
