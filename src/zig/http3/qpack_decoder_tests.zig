//! The QPACK decoder's tests: RFC 9204 Appendix B byte for byte (encoder-stream and
//! section bytes in; fields, the table and the decoder-stream bytes we emit checked), the
//! Required Insert Count arithmetic, blocked streams, and every error path.
const std = @import("std");
const testing = std.testing;
const qpack = @import("qpack.zig");
const decoder_mod = @import("qpack_decoder.zig");
const Decoder = decoder_mod.Decoder;
const Header = qpack.Header;

pub fn unhex(buf: []u8, s: []const u8) []u8 {
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

const rfc_limits = decoder_mod.Limits{ .table_capacity_max = 220, .blocked_streams_max = 1, .field_section_bytes_max = 16384 };

fn feedHex(d: *Decoder, hex: []const u8) !void {
    var buf: [256]u8 = undefined;
    try d.feedEncoderStream(unhex(&buf, hex));
}

/// Feeds the encoder-stream bytes one at a time (the split-anywhere path).
fn feedHexBytewise(d: *Decoder, hex: []const u8) !void {
    var buf: [256]u8 = undefined;
    for (unhex(&buf, hex)) |b| try d.feedEncoderStream(&.{b});
}

fn expectFields(expected: []const [2][]const u8, outcome: decoder_mod.Outcome) !void {
    const got = switch (outcome) {
        .fields => |f| f,
        .blocked => return error.TestUnexpectedBlocked,
    };
    try testing.expectEqual(expected.len, got.len);
    for (expected, got) |e, g| {
        try testing.expectEqualStrings(e[0], g.name);
        try testing.expectEqualStrings(e[1], g.value);
    }
}

/// `expected` oldest first, by absolute index from `first`, as the RFC draws the table.
fn expectTable(d: *const Decoder, first: u64, expected: []const [2][]const u8, size: usize) !void {
    try testing.expectEqual(size, d.size);
    try testing.expectEqual(expected.len, d.count);
    try testing.expectEqual(first + expected.len, d.inserted);
    for (expected, 0..) |e, i| {
        const h = d.entryAt(first + i).?.header();
        try testing.expectEqualStrings(e[0], h.name);
        try testing.expectEqualStrings(e[1], h.value);
    }
}

fn expectOutput(d: *Decoder, hex: []const u8) !void {
    var buf: [64]u8 = undefined;
    try testing.expectEqualSlices(u8, unhex(&buf, hex), d.output());
    d.consumeOutput(d.output().len);
}

fn decodeHex(d: *Decoder, stream_id: u64, hex: []const u8, ack: decoder_mod.Ack) !decoder_mod.Outcome {
    const S = struct {
        var block: [256]u8 = undefined;
        var scratch: [1024]u8 = undefined;
        var out: [16]Header = undefined;
    };
    return d.decodeSection(stream_id, unhex(&S.block, hex), &S.scratch, &S.out, ack);
}

test "B.1-B.5: the RFC's exchange, byte for byte" {
    var d = Decoder.init(rfc_limits);
    defer d.deinit();
    // B.1: static only.
    try expectFields(&.{.{ ":path", "/index.html" }}, try decodeHex(&d, 0, "0000 510b 2f69 6e64 6578 2e68 746d 6c", .acknowledge));
    try expectTable(&d, 0, &.{}, 0);
    try expectOutput(&d, "");
    // B.2: capacity 220, two inserts, a section of post-base references, its ack.
    try feedHex(&d, "3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d c10c 2f73 616d 706c 652f 7061 7468");
    try expectTable(&d, 0, &.{ .{ ":authority", "www.example.com" }, .{ ":path", "/sample/path" } }, 106);
    try expectFields(&.{ .{ ":authority", "www.example.com" }, .{ ":path", "/sample/path" } }, try decodeHex(&d, 4, "0381 10 11", .acknowledge));
    try expectOutput(&d, "84");
    // B.3: an insert with a literal name; we acknowledge it.
    try feedHex(&d, "4a63 7573 746f 6d2d 6b65 790c 6375 7374 6f6d 2d76 616c 7565");
    try d.acknowledgeInserts();
    try expectOutput(&d, "01");
    try expectTable(&d, 0, &.{ .{ ":authority", "www.example.com" }, .{ ":path", "/sample/path" }, .{ "custom-key", "custom-value" } }, 160);
    // B.4: a duplicate; stream 8 decoded, then reset before its acknowledgment.
    try feedHex(&d, "02");
    try expectFields(&.{ .{ ":authority", "www.example.com" }, .{ ":path", "/" }, .{ "custom-key", "custom-value" } }, try decodeHex(&d, 8, "0500 80 c1 81", .deferred));
    try d.cancelStream(8);
    try expectOutput(&d, "48");
    try expectTable(&d, 0, &.{ .{ ":authority", "www.example.com" }, .{ ":path", "/sample/path" }, .{ "custom-key", "custom-value" }, .{ ":authority", "www.example.com" } }, 217);
    // B.5: an insert with a dynamic name reference evicts the oldest entry.
    try feedHex(&d, "810d 6375 7374 6f6d 2d76 616c 7565 32");
    try expectTable(&d, 1, &.{ .{ ":path", "/sample/path" }, .{ "custom-key", "custom-value" }, .{ ":authority", "www.example.com" }, .{ "custom-key", "custom-value2" } }, 215);
}

test "B.2 with the encoder stream split at every byte and the section arriving first (blocked)" {
    var d = Decoder.init(rfc_limits);
    defer d.deinit();
    try testing.expectEqual(decoder_mod.Outcome.blocked, try decodeHex(&d, 4, "0381 10 11", .acknowledge));
    try testing.expectEqual(@as(usize, 1), d.blockedCount());
    try testing.expectEqual(@as(?u64, null), d.unblockedStream());
    try feedHexBytewise(&d, "3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d");
    try testing.expectEqual(@as(?u64, null), d.unblockedStream());
    try feedHexBytewise(&d, "c10c 2f73 616d 706c 652f 7061 7468");
    try testing.expectEqual(@as(?u64, 4), d.unblockedStream());
    try expectFields(&.{ .{ ":authority", "www.example.com" }, .{ ":path", "/sample/path" } }, try decodeHex(&d, 4, "0381 10 11", .acknowledge));
    try testing.expectEqual(@as(usize, 0), d.blockedCount());
    try expectOutput(&d, "84");
    // The section acknowledged both inserts: no Insert Count Increment is due.
    try d.acknowledgeInserts();
    try expectOutput(&d, "");
}

test "blocked streams: one more than SETTINGS_QPACK_BLOCKED_STREAMS fails; cancel frees a slot" {
    var d = Decoder.init(.{ .table_capacity_max = 220, .blocked_streams_max = 2 });
    defer d.deinit();
    try testing.expectEqual(decoder_mod.Outcome.blocked, try decodeHex(&d, 0, "0200 80", .acknowledge));
    try testing.expectEqual(decoder_mod.Outcome.blocked, try decodeHex(&d, 4, "0200 80", .acknowledge));
    // The same stream again does not count twice.
    try testing.expectEqual(decoder_mod.Outcome.blocked, try decodeHex(&d, 4, "0200 80", .acknowledge));
    try testing.expectError(error.DecompressionFailed, decodeHex(&d, 8, "0200 80", .acknowledge));
    try d.cancelStream(4);
    try expectOutput(&d, "44");
    try testing.expectEqual(decoder_mod.Outcome.blocked, try decodeHex(&d, 8, "0200 80", .acknowledge));
    // With no blocking allowed, any section ahead of the inserts fails.
    var z = Decoder.init(.{ .table_capacity_max = 220, .blocked_streams_max = 0 });
    defer z.deinit();
    try testing.expectError(error.DecompressionFailed, decodeHex(&z, 0, "0200 80", .acknowledge));
}

test "Required Insert Count: wrapping, and every invalid encoding" {
    // MaxEntries = 220 / 32 = 6, FullRange = 12.
    var d = Decoder.init(rfc_limits);
    defer d.deinit();
    try testing.expectEqual(@as(u64, 0), try d.requiredInsertCount(0));
    try testing.expectEqual(@as(u64, 1), try d.requiredInsertCount(2));
    try testing.expectError(error.DecompressionFailed, d.requiredInsertCount(13));
    // With 10 inserts, encoded 11 is 10 and encoded 1 wraps to 12.
    d.inserted = 10;
    try testing.expectEqual(@as(u64, 10), try d.requiredInsertCount(11));
    try testing.expectEqual(@as(u64, 12), try d.requiredInsertCount(1));
    d.inserted = 0;
    // MaxValue = 6: encoded 8 gives 7 > 6 and 7 <= FullRange: invalid.
    try testing.expectError(error.DecompressionFailed, d.requiredInsertCount(8));
    // A table capacity of 0: any non-zero encoding is invalid.
    var z = Decoder.init(.{ .table_capacity_max = 0 });
    defer z.deinit();
    try testing.expectError(error.DecompressionFailed, z.requiredInsertCount(1));
}

test "sections: malformed prefixes and references fail with QPACK_DECOMPRESSION_FAILED" {
    var d = Decoder.init(rfc_limits);
    defer d.deinit();
    try feedHex(&d, "3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d c10c 2f73 616d 706c 652f 7061 7468");
    const bad = [_][]const u8{
        "", // no prefix
        "00", // no Base
        "0000 ff", // truncated integer
        "0000 c0ff 7f", // static index past 98 (6-bit prefix: 63 + 127 + ...)
        "0000 ff24", // static index 99
        "0000 80", // dynamic reference with Required Insert Count 0
        "0000 10", // post-base reference with Required Insert Count 0
        "0381 12", // post-base index beyond the Required Insert Count
        "0200 81", // relative index at the Base
        "0381 ff", // base 0 with sign: relative index underflows
        "0282", // sign bit with delta >= Required Insert Count
        "0381 10", // Required Insert Count 2 but only entry 0 referenced
        "0000 5f", // literal with static name: value missing
        "0000 2f", // literal name truncated
        "0000 5181 00", // Huffman value that is bad padding
    };
    for (bad) |hex| {
        try testing.expectError(error.DecompressionFailed, decodeHex(&d, 0, hex, .acknowledge));
    }
    try expectOutput(&d, "");
}

test "sections: literal forms, post-base name reference, never-indexed bit" {
    var d = Decoder.init(rfc_limits);
    defer d.deinit();
    try feedHex(&d, "3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d");
    // RIC 1, Base 0 (sign, delta 0): post-base name ref (N set) to entry 0 with value "x";
    // literal with literal name (N set) "a"="b"; literal with static name (N set) :path "/p".
    try expectFields(
        &.{ .{ ":authority", "x" }, .{ "a", "b" }, .{ ":path", "/p" } },
        try decodeHex(&d, 0, "0280 0801 78 3161 0162 7102 2f70", .acknowledge),
    );
    try expectOutput(&d, "80");
    // RIC 1, Base 1: literal with dynamic name ref (relative 0).
    try expectFields(&.{.{ ":authority", "y" }}, try decodeHex(&d, 4, "0200 4001 79", .acknowledge));
}

test "sections: the field section limit, scratch and out" {
    var d = Decoder.init(.{ .table_capacity_max = 220, .field_section_bytes_max = 32 + 6 });
    defer d.deinit();
    // ":path" "/" is 6 + 32: at the limit; a second field is past it.
    try expectFields(&.{.{ ":path", "/" }}, try decodeHex(&d, 0, "0000 c1", .acknowledge));
    try testing.expectError(error.FieldSectionTooLarge, decodeHex(&d, 0, "0000 c1 c1", .acknowledge));
    var block: [8]u8 = undefined;
    var scratch: [2]u8 = undefined;
    var out: [1]Header = undefined;
    var e = Decoder.init(.{ .table_capacity_max = 220 });
    defer e.deinit();
    try testing.expectError(error.FieldSectionTooLarge, e.decodeSection(0, unhex(&block, "0000 c1 c1"), &scratch, &out, .acknowledge));
    // A Huffman value larger than scratch.
    try testing.expectError(error.FieldSectionTooLarge, e.decodeSection(0, unhex(&block, "0000 5183 f1e3 c2"), &scratch, &out, .acknowledge));
}

test "encoder stream: every error is QPACK_ENCODER_STREAM_ERROR" {
    const bad = [_][]const u8{
        "3fbe01", // capacity 221 > 220
        "c000", // an insert while the capacity is still 0: the entry cannot fit
        "3f01 4161 0162", // capacity 32: a 34-byte entry does not fit
        "3fbd01 ff24 00", // static name index 99
        "3fbd01 8000", // dynamic name reference with an empty table
        "3fbd01 00", // duplicate of nothing
        "3fbd01 6100 00", // Huffman name with bad padding
        "3fbd01 7fff ffff ffff ffff ffff ff", // integer past 62 bits
        "3fbd01 c07f ff7f", // value length longer than any entry could be
    };
    for (bad) |hex| {
        var d = Decoder.init(rfc_limits);
        defer d.deinit();
        feedHex(&d, hex) catch |err| {
            try testing.expectEqual(error.EncoderStream, err);
            continue;
        };
        std.debug.print("accepted: {s}\n", .{hex});
        return error.TestExpectedError;
    }
}

test "encoder stream: capacity cuts evict; Huffman inserts; partial instruction bound" {
    var d = Decoder.init(rfc_limits);
    defer d.deinit();
    try feedHex(&d, "3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d c10c 2f73 616d 706c 652f 7061 7468");
    // Capacity 60 keeps only the newest (49), capacity 0 empties the table.
    try feedHex(&d, "3f1d");
    try expectTable(&d, 1, &.{.{ ":path", "/sample/path" }}, 49);
    try feedHex(&d, "20");
    try expectTable(&d, 2, &.{}, 0);
    // Huffman value (www.example.com coded) through a static name reference, split bytewise.
    try feedHex(&d, "3fbd01");
    try feedHexBytewise(&d, "c08c f1e3 c2e5 f23a 6ba0 ab90 f4ff");
    try expectTable(&d, 2, &.{.{ ":authority", "www.example.com" }}, 57);
    // A partial instruction is held, the rest applies when it arrives.
    try feedHex(&d, "c10c 2f73");
    try testing.expectEqual(@as(usize, 4), d.pending.items.len);
    try feedHex(&d, "616d 706c 652f 7061 7468 01");
    try testing.expectEqual(@as(usize, 0), d.pending.items.len);
    try testing.expectEqual(@as(u64, 5), d.inserted);
    try d.acknowledgeInserts();
    try expectOutput(&d, "05");
}

test "decoder stream: ints past the prefix and a full output" {
    var d = Decoder.init(rfc_limits);
    defer d.deinit();
    try d.acknowledgeSection(0, 0); // nothing for a static-only section
    try expectOutput(&d, "");
    d.inserted = 200;
    try d.acknowledgeSection(300, 200);
    try expectOutput(&d, "ffad01");
    var z = Decoder.init(.{ .table_capacity_max = 0 });
    defer z.deinit();
    try z.cancelStream(4); // capacity 0: nothing to say
    try testing.expectEqual(@as(usize, 0), z.output().len);
    // Never drained: the buffer refuses rather than overflow.
    var n: usize = 0;
    while (d.cancelStream(1 << 40)) |_| n += 1 else |err| try testing.expectEqual(error.DecoderStreamFull, err);
    try testing.expect(n > 10 and n * 7 <= decoder_mod.output_bytes_max);
}

test "dynamic table: memory stays within the capacity under a flood of inserts" {
    var d = Decoder.init(rfc_limits);
    defer d.deinit();
    try feedHex(&d, "3fbd01");
    for (0..500) |_| try feedHex(&d, "4161 0162"); // "a" = "b", 34 bytes each
    try testing.expectEqual(@as(usize, 6), d.count);
    try testing.expectEqual(@as(usize, 204), d.size);
    try testing.expect(d.ring.len <= 220 / 32);
}
