//! The QPACK encoder (RFC 9204), static-only: every field is an indexed static field
//! line, a literal with a static name reference, or a literal with a literal name, and
//! every section's Required Insert Count is 0. The peer's decoder then never blocks and
//! never has to store anything of ours; encoding needs no state, no allocation and no
//! encoder stream (we send the stream type and nothing more). Strings are Huffman-coded
//! when that is shorter.
const std = @import("std");
const qpack = @import("qpack.zig");

pub const Header = qpack.Header;
const static_table = qpack.static_table;

/// Name ++ "\x00" ++ value -> static index, for exact matches (a NUL is in no name).
const static_fields = blk: {
    @setEvalBranchQuota(100_000);
    var kvs: [static_table.len]struct { []const u8, u8 } = undefined;
    for (static_table, 0..) |h, i| kvs[i] = .{ h.name ++ "\x00" ++ h.value, i };
    const final = kvs;
    break :blk std.StaticStringMap(u8).initComptime(final);
};

/// Name -> its lowest static index.
const static_names = blk: {
    @setEvalBranchQuota(100_000);
    var kvs: [static_table.len]struct { []const u8, u8 } = undefined;
    var n: usize = 0;
    for (static_table, 0..) |h, i| {
        const seen = for (kvs[0..n]) |kv| {
            if (std.mem.eql(u8, kv[0], h.name)) break true;
        } else false;
        if (seen) continue;
        kvs[n] = .{ h.name, i };
        n += 1;
    }
    const final = kvs[0..n].*;
    break :blk std.StaticStringMap(u8).initComptime(final);
};

/// The static index of `:status` (any value) for a literal with a name reference.
const status_name_index = 24;

/// The field section prefix of a static-only section: Required Insert Count 0, Base 0.
pub fn encodePrefix(buf: []u8) error{NoSpace}!usize {
    if (buf.len < 2) return error.NoSpace;
    buf[0] = 0x00;
    buf[1] = 0x00;
    return 2;
}

/// Writes `:status` at `buf[pos..]`: indexed when the static table has the code, else
/// a literal with the static name `:status`. Returns the position after it.
pub fn encodeStatus(buf: []u8, pos: usize, status: u16) error{NoSpace}!usize {
    std.debug.assert(status >= 100 and status <= 999);
    var digits: [3]u8 = undefined;
    const len = std.fmt.printInt(&digits, status, 10, .lower, .{});
    std.debug.assert(len == 3);
    var key: [":status".len + 1 + 3]u8 = undefined;
    const k = std.fmt.bufPrint(&key, ":status\x00{s}", .{digits[0..3]}) catch unreachable;
    if (static_fields.get(k)) |index| return qpack.encodeInt(buf, pos, 0xc0, 6, index);
    const p = try qpack.encodeInt(buf, pos, 0x50, 4, status_name_index);
    return qpack.writeString(buf, p, 0x00, 7, digits[0..3]);
}

/// Writes one field line at `buf[pos..]`. Names are emitted as given: the caller
/// lower-cases them (HTTP/3 forbids upper case on the wire). Returns the position after.
pub fn encodeField(buf: []u8, pos: usize, name: []const u8, value: []const u8) error{NoSpace}!usize {
    if (findExact(name, value)) |index| return qpack.encodeInt(buf, pos, 0xc0, 6, index);
    if (static_names.get(name)) |index| {
        // 01NT: N = 0 (intermediaries may index it), T = 1 (static).
        const p = try qpack.encodeInt(buf, pos, 0x50, 4, index);
        return qpack.writeString(buf, p, 0x00, 7, value);
    }
    // 001NH: the name's H bit is 0x08, its length a 3-bit prefix.
    const p = try qpack.writeString(buf, pos, 0x20, 3, name);
    return qpack.writeString(buf, p, 0x00, 7, value);
}

fn findExact(name: []const u8, value: []const u8) ?u8 {
    // Short keys on the stack: the longest static name and value fit well within.
    var key: [128]u8 = undefined;
    if (name.len + 1 + value.len > key.len) return null;
    @memcpy(key[0..name.len], name);
    key[name.len] = 0;
    @memcpy(key[name.len + 1 ..][0..value.len], value);
    return static_fields.get(key[0 .. name.len + 1 + value.len]);
}

/// A whole response field section: the prefix, `:status`, then `headers` in order.
/// Returns the bytes written (a HEADERS frame's payload).
pub fn encodeResponse(buf: []u8, status: u16, headers: []const Header) error{NoSpace}!usize {
    var p = try encodePrefix(buf);
    p = try encodeStatus(buf, p, status);
    for (headers) |h| p = try encodeField(buf, p, h.name, h.value);
    return p;
}

/// A trailer section: the prefix and the fields (no pseudo-header).
pub fn encodeTrailers(buf: []u8, headers: []const Header) error{NoSpace}!usize {
    var p = try encodePrefix(buf);
    for (headers) |h| p = try encodeField(buf, p, h.name, h.value);
    return p;
}

// ---------------------------------------------------------------------------------
// Tests

const testing = std.testing;
const decoder_mod = @import("qpack_decoder.zig");

fn roundTrip(status: u16, headers: []const Header) !void {
    var buf: [4096]u8 = undefined;
    const n = try encodeResponse(&buf, status, headers);
    var d = decoder_mod.Decoder.init(.{ .table_capacity_max = 0, .blocked_streams_max = 0 });
    defer d.deinit();
    var scratch: [4096]u8 = undefined;
    var out: [64]Header = undefined;
    const got = (try d.decodeSection(0, buf[0..n], &scratch, &out, .acknowledge)).fields;
    try testing.expectEqual(headers.len + 1, got.len);
    var digits: [3]u8 = undefined;
    _ = std.fmt.printInt(&digits, status, 10, .lower, .{});
    try testing.expectEqualStrings(":status", got[0].name);
    try testing.expectEqualStrings(&digits, got[0].value);
    for (headers, got[1..]) |e, g| {
        try testing.expectEqualStrings(e.name, g.name);
        try testing.expectEqualStrings(e.value, g.value);
    }
    // Static-only: nothing for the decoder stream, ever.
    try testing.expectEqual(@as(usize, 0), d.output().len);
    // Every shorter buffer is refused, never overrun.
    for (0..n) |short| try testing.expectError(error.NoSpace, encodeResponse(buf[0..short], status, headers));
}

test "round trip through the decoder: every static :status and others, all three forms" {
    const headers = [_]Header{
        .{ .name = "content-type", .value = "text/plain" }, // indexed (53)
        .{ .name = "content-type", .value = "application/x-zig" }, // static name
        .{ .name = "x-request-id", .value = "a1b2c3" }, // literal name, Huffman
        .{ .name = "x-bin", .value = "\x00\xff~" }, // literal, plain (Huffman longer)
        .{ .name = "set-cookie", .value = "" },
        .{ .name = "server", .value = "zigcorn" },
        .{ .name = "x-long", .value = "v" ** 300 }, // multi-byte length prefix
    };
    for ([_]u16{ 100, 103, 200, 204, 206, 302, 304, 400, 403, 404, 421, 425, 500, 503, 201, 299, 418, 999 }) |status| {
        try roundTrip(status, &headers);
    }
    try roundTrip(200, &.{});
}

test "exact bytes: indexed :status 200, static name reference, literal name" {
    var buf: [64]u8 = undefined;
    var n = try encodeResponse(&buf, 200, &.{});
    try testing.expectEqualSlices(u8, &.{ 0x00, 0x00, 0xd9 }, buf[0..n]); // 0xc0 | 25
    n = try encodeResponse(&buf, 201, &.{});
    // 0x50 | 15, then 24 - 15 = 9: the name reference; "201" Huffman-coded (5-bit digits:
    // 00010 00000 00001, then ones), 2 bytes instead of 3.
    try testing.expectEqualSlices(u8, &.{ 0x00, 0x00, 0x5f, 0x09, 0x82, 0x10, 0x03 }, buf[0..n]);
    n = try encodeTrailers(&buf, &.{.{ .name = "a", .value = "b" }});
    try testing.expectEqualSlices(u8, &.{ 0x00, 0x00, 0x21, 'a', 0x01, 'b' }, buf[0..n]);
    // Static index 98 needs a continuation byte: 0xff then 98 - 63.
    n = try encodeField(&buf, 0, "x-frame-options", "sameorigin");
    try testing.expectEqualSlices(u8, &.{ 0xff, 98 - 63 }, buf[0..n]);
}
