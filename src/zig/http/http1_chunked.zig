//! HTTP/1.1's chunked transfer coding (RFC 9112 7.1), decoded as it arrives.
//!
//! Apart from the head parser (`http/http1_parser.zig`) because it is its opposite: the head
//! parser is stateless and re-run on the grown buffer, while `ChunkedDecoder` is stateful
//! and streaming, so that the caller never has to buffer a whole chunk-size line or
//! trailer section. Every input byte is hostile: no allocation, no panic, all work
//! bounded by the head parser's `Limits` (extension and trailer bytes), and a broken
//! framing is sticky.
const std = @import("std");
const parser = @import("http1_parser.zig");
const Limits = parser.Limits;
const ParseError = parser.ParseError;
const test_limits = parser.test_limits;
const hex_value_table = @import("fields.zig").hex_value;
const tchar_table = parser.tchar_table;
const field_value_table = parser.field_value_table;

/// 16 hex digits fill exactly a u64.
const chunk_size_digits_max = 16;

pub const ChunkedDecoder = struct {
    state: State = .size,
    /// While in .size: the value parsed so far. While in .data: bytes left in this chunk.
    chunk_bytes: u64 = 0,
    size_digits: u8 = 0,
    ext_bytes: usize = 0,
    trailer_bytes: usize = 0,
    /// Sticky: once the framing is broken the rest of the stream is meaningless.
    failure: ?ParseError = null,

    const State = enum {
        size,
        size_bws, // SP/HTAB after the size: only ';' may follow.
        ext,
        size_lf,
        data,
        data_cr,
        data_lf,
        trailer_line,
        trailer_name,
        trailer_value,
        trailer_value_lf,
        trailer_end_lf,
        done,
    };

    pub const Step = struct { consumed: usize, data: []const u8, done: bool };

    /// Consumes bytes from `input` (which the caller then drops from its buffer) and returns
    /// at most one slice of body data (a sub-slice of input; may be empty). `done` is true
    /// once the last-chunk and the trailer section (incl. final CRLF) are fully consumed;
    /// bytes after that belong to the next pipelined request and are not consumed.
    /// Partial structure is kept in `self`, so every non-empty input is consumed unless done.
    pub fn decode(self: *ChunkedDecoder, input: []const u8, limits: Limits) ParseError!Step {
        if (self.failure) |err| return err;
        var index: usize = 0;
        while (index < input.len) {
            switch (self.state) {
                .done => break,
                .data => return self.takeData(input, index),
                else => {
                    self.stepByte(input[index], limits) catch |err| {
                        self.failure = err;
                        return err;
                    };
                    index += 1;
                },
            }
        }
        return .{ .consumed = index, .data = input[0..0], .done = self.state == .done };
    }

    fn takeData(self: *ChunkedDecoder, input: []const u8, start: usize) Step {
        std.debug.assert(self.chunk_bytes > 0);
        const available = input.len - start;
        const take: usize = if (self.chunk_bytes < available) @intCast(self.chunk_bytes) else available;
        self.chunk_bytes -= take;
        if (self.chunk_bytes == 0) self.state = .data_cr;
        return .{ .consumed = start + take, .data = input[start..][0..take], .done = false };
    }

    fn stepByte(self: *ChunkedDecoder, c: u8, limits: Limits) ParseError!void {
        switch (self.state) {
            .size, .size_bws, .ext, .size_lf => try self.stepSizeLine(c, limits),
            .data_cr => self.state = if (c == '\r') .data_lf else return error.BadRequest,
            .data_lf => {
                if (c != '\n') return error.BadRequest;
                self.startSizeLine();
            },
            .trailer_line,
            .trailer_name,
            .trailer_value,
            .trailer_value_lf,
            .trailer_end_lf,
            => try self.stepTrailer(c, limits),
            .data, .done => unreachable, // Handled by `decode`.
        }
    }

    fn startSizeLine(self: *ChunkedDecoder) void {
        self.state = .size;
        self.chunk_bytes = 0;
        self.size_digits = 0;
        self.ext_bytes = 0;
    }

    /// chunk-size [ chunk-ext ] CRLF. Extensions are validated byte-wise and skipped.
    fn stepSizeLine(self: *ChunkedDecoder, c: u8, limits: Limits) ParseError!void {
        switch (self.state) {
            .size => {
                const digit = hex_value_table[c];
                if (digit != 0xff) return self.addSizeDigit(digit);
                if (self.size_digits == 0) return error.BadRequest;
                self.state = switch (c) {
                    ';' => .ext,
                    ' ', '\t' => .size_bws,
                    '\r' => .size_lf,
                    else => return error.BadRequest,
                };
                if (self.state != .size_lf) try self.countExtByte(limits);
            },
            .size_bws => switch (c) {
                ' ', '\t' => try self.countExtByte(limits),
                ';' => {
                    try self.countExtByte(limits);
                    self.state = .ext;
                },
                else => return error.BadRequest,
            },
            .ext => {
                if (c == '\r') {
                    self.state = .size_lf;
                } else if (field_value_table[c]) {
                    try self.countExtByte(limits);
                } else return error.BadRequest;
            },
            .size_lf => {
                if (c != '\n') return error.BadRequest;
                self.state = if (self.chunk_bytes == 0) .trailer_line else .data;
            },
            else => unreachable,
        }
    }

    fn addSizeDigit(self: *ChunkedDecoder, digit: u8) ParseError!void {
        if (self.size_digits == chunk_size_digits_max) return error.BadRequest;
        // At most 16 digits: the shift can never drop set bits.
        self.chunk_bytes = (self.chunk_bytes << 4) | digit;
        self.size_digits += 1;
    }

    fn countExtByte(self: *ChunkedDecoder, limits: Limits) ParseError!void {
        self.ext_bytes += 1;
        if (self.ext_bytes > limits.chunk_ext_bytes_max) return error.BadRequest;
    }

    /// trailer-section = *( field-line CRLF ) CRLF; validated like header fields, discarded.
    fn stepTrailer(self: *ChunkedDecoder, c: u8, limits: Limits) ParseError!void {
        self.trailer_bytes += 1;
        if (self.trailer_bytes > limits.trailer_bytes_max) return error.HeadersTooLarge;
        switch (self.state) {
            .trailer_line => self.state = if (c == '\r')
                .trailer_end_lf
            else if (tchar_table[c])
                .trailer_name
            else
                return error.BadRequest, // Includes obs-fold and an empty name.
            .trailer_name => {
                if (c == ':') {
                    self.state = .trailer_value;
                } else if (!tchar_table[c]) return error.BadRequest;
            },
            .trailer_value => {
                if (c == '\r') {
                    self.state = .trailer_value_lf;
                } else if (!field_value_table[c]) return error.BadRequest;
            },
            .trailer_value_lf => self.state = if (c == '\n') .trailer_line else return error.BadRequest,
            .trailer_end_lf => self.state = if (c == '\n') .done else return error.BadRequest,
            else => unreachable,
        }
    }
};

// ---- tests -------------------------------------------------------------------------------

const testing = std.testing;

const DecodeResult = struct {
    data: [4096]u8 = undefined,
    data_len: usize = 0,
    consumed: usize = 0,

    fn slice(self: *const DecodeResult) []const u8 {
        return self.data[0..self.data_len];
    }
};

/// Feeds `encoded` to a decoder as if it arrived in pieces of the given sizes (cycled),
/// dropping consumed bytes like the engine does. Returns the body and the bytes consumed.
fn decodeInPieces(encoded: []const u8, piece_bytes: []const usize, limits: Limits) !DecodeResult {
    var result = DecodeResult{};
    var decoder = ChunkedDecoder{};
    var arrived: usize = 0;
    var piece_index: usize = 0;
    while (true) {
        const step = try decoder.decode(encoded[result.consumed..arrived], limits);
        // Progress rule: non-empty input is consumed unless the body is done.
        if (arrived > result.consumed and !step.done) try testing.expect(step.consumed > 0);
        @memcpy(result.data[result.data_len..][0..step.data.len], step.data);
        result.data_len += step.data.len;
        result.consumed += step.consumed;
        if (step.done) return result;
        if (step.consumed == 0) {
            if (arrived == encoded.len) return error.TestUnexpectedEnd;
            const piece = piece_bytes[piece_index % piece_bytes.len];
            piece_index += 1;
            arrived = @min(encoded.len, arrived + piece);
        }
    }
}

fn decodeAll(encoded: []const u8) !DecodeResult {
    return decodeInPieces(encoded, &.{std.math.maxInt(usize) / 2}, test_limits);
}

test "chunked simple body" {
    const encoded = "5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n";
    const result = try decodeAll(encoded);
    try testing.expectEqualStrings("hello, world", result.slice());
    try testing.expectEqual(encoded.len, result.consumed);
}

test "chunked empty body" {
    const result = try decodeAll("0\r\n\r\n");
    try testing.expectEqualStrings("", result.slice());
    try testing.expectEqual(@as(usize, 5), result.consumed);
}

test "chunked hex sizes, upper and lower case, leading zeros" {
    const body = "x" ** 26;
    const result = try decodeAll("1a\r\n" ++ body ++ "\r\n001A\r\n" ++ body ++ "\r\n0000\r\n\r\n");
    try testing.expectEqualStrings(body ++ body, result.slice());
}

test "chunked extensions skipped" {
    const result = try decodeAll("5;name=value\r\nhello\r\n3 ; a=\"q;u\\\"o\" ;b\r\nabc\r\n0;last\r\n\r\n");
    try testing.expectEqualStrings("helloabc", result.slice());
}

test "chunked trailers consumed and discarded" {
    const encoded = "3\r\nabc\r\n0\r\nExpires: never\r\nX-Checksum: abc \t\r\n\r\n";
    const result = try decodeAll(encoded);
    try testing.expectEqualStrings("abc", result.slice());
    try testing.expectEqual(encoded.len, result.consumed);
}

test "chunked pipelined bytes after the terminator are not consumed" {
    const body = "4\r\nwiki\r\n0\r\n\r\n";
    const encoded = body ++ "GET / HTTP/1.1\r\n\r\n";
    const result = try decodeAll(encoded);
    try testing.expectEqualStrings("wiki", result.slice());
    try testing.expectEqual(body.len, result.consumed);
    // A finished decoder consumes nothing more.
    var decoder = ChunkedDecoder{};
    var step = try decoder.decode(encoded, test_limits);
    var consumed = step.consumed;
    while (!step.done) {
        step = try decoder.decode(encoded[consumed..], test_limits);
        consumed += step.consumed;
    }
    try testing.expectEqual(body.len, consumed);
    const after = try decoder.decode(encoded[consumed..], test_limits);
    try testing.expectEqual(@as(usize, 0), after.consumed);
    try testing.expect(after.done);
}

test "chunked every split point and random splits produce the same data" {
    const encoded = "5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n10\r\nabcdefghijklmnop\r\n" ++
        "0\r\nTrailer: yes\r\n\r\n";
    const expected = "hello 0123456789abcdefghijklmnop";
    // Byte by byte.
    const single = try decodeInPieces(encoded, &.{1}, test_limits);
    try testing.expectEqualStrings(expected, single.slice());
    try testing.expectEqual(encoded.len, single.consumed);
    // Every two-piece split.
    for (1..encoded.len) |split| {
        const result = try decodeInPieces(encoded, &.{ split, encoded.len }, test_limits);
        try testing.expectEqualStrings(expected, result.slice());
        try testing.expectEqual(encoded.len, result.consumed);
    }
    // Random splits.
    var prng = std.Random.DefaultPrng.init(42);
    const random = prng.random();
    for (0..500) |_| {
        var pieces: [8]usize = undefined;
        for (&pieces) |*piece| piece.* = 1 + random.uintLessThan(usize, 12);
        const result = try decodeInPieces(encoded, &pieces, test_limits);
        try testing.expectEqualStrings(expected, result.slice());
        try testing.expectEqual(encoded.len, result.consumed);
    }
}

fn expectChunkedError(expected: ParseError, encoded: []const u8, limits: Limits) !void {
    // Whole, then byte by byte: the same failure either way.
    for ([_]usize{ encoded.len, 1 }) |piece_bytes| {
        if (decodeInPieces(encoded, &.{piece_bytes}, limits)) |_| {
            return error.TestExpectedError;
        } else |err| try testing.expectEqual(@as(anyerror, expected), err);
    }
}

test "chunked invalid sizes rejected" {
    try expectChunkedError(error.BadRequest, "g\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "-1\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "0x5\r\nhello\r\n0\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, ";ext\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "5 \r\nhello\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "5\nhello\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "5\rhello\r\n", test_limits);
    // 17 digits, even if the value would fit.
    try expectChunkedError(error.BadRequest, "00000000000000001\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "10000000000000000\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "fffffffffffffffff\r\n", test_limits);
}

test "chunked 16 hex digit size accepted" {
    var decoder = ChunkedDecoder{};
    const step = try decoder.decode("ffffffffffffffff\r\nabc", test_limits);
    try testing.expectEqualStrings("abc", step.data);
    try testing.expectEqual(@as(u64, std.math.maxInt(u64) - 3), decoder.chunk_bytes);
}

test "chunked missing CRLF after data rejected" {
    try expectChunkedError(error.BadRequest, "5\r\nhelloX\r\n0\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "5\r\nhello\rX0\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "5\r\nhello\n0\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "5\r\nhello0\r\n\r\n", test_limits);
}

test "chunked extension too long rejected" {
    const limits = Limits{ .chunk_ext_bytes_max = 8, .head_bytes_max = test_limits.head_bytes_max, .target_bytes_max = test_limits.target_bytes_max, .headers_count_max = test_limits.headers_count_max };
    const ok = try decodeInPieces("1;abcdefg\r\nx\r\n0\r\n\r\n", &.{100}, limits);
    try testing.expectEqualStrings("x", ok.slice());
    try expectChunkedError(error.BadRequest, "1;abcdefgh\r\nx\r\n0\r\n\r\n", limits);
    try expectChunkedError(error.BadRequest, "1" ++ " " ** 9 ++ ";\r\nx\r\n0\r\n\r\n", limits);
    // Default limit: 4 KiB.
    try expectChunkedError(error.BadRequest, "1;" ++ "a" ** 4096 ++ "\r\n", test_limits);
}

test "chunked extension bytes validated" {
    try expectChunkedError(error.BadRequest, "1;a\x00\r\nx\r\n0\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "1;a\nb\r\nx\r\n0\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "1;a\rb\r\nx\r\n0\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "1 x\r\nx\r\n0\r\n\r\n", test_limits);
}

test "chunked trailer validation" {
    try expectChunkedError(error.BadRequest, "0\r\nX: a\nb\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "0\r\nX: a\rb\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "0\r\nX: a\r\n b\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "0\r\nX : a\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "0\r\n: a\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "0\r\nX: \x01\r\n\r\n", test_limits);
    try expectChunkedError(error.BadRequest, "0\r\n\n", test_limits);
    try expectChunkedError(error.BadRequest, "0\r\n\rX", test_limits);
}

test "chunked trailer section too large -> 431" {
    const limits = Limits{ .trailer_bytes_max = 16, .head_bytes_max = test_limits.head_bytes_max, .target_bytes_max = test_limits.target_bytes_max, .headers_count_max = test_limits.headers_count_max };
    _ = try decodeInPieces("0\r\nX: 012345678\r\n\r\n", &.{100}, limits); // 16 bytes.
    try expectChunkedError(error.HeadersTooLarge, "0\r\nX: 0123456789\r\n\r\n", limits);
}

test "chunked errors are sticky" {
    var decoder = ChunkedDecoder{};
    try testing.expectError(error.BadRequest, decoder.decode("z", test_limits));
    try testing.expectError(error.BadRequest, decoder.decode("0\r\n\r\n", test_limits));
}

test "chunked hostile bytes never crash" {
    var prng = std.Random.DefaultPrng.init(7);
    const random = prng.random();
    const alphabet = "0123456789abcdefABCDEFxyz;= \t\r\n:\"\\\x00\x80";
    var input: [128]u8 = undefined;
    const limits = Limits{ .chunk_ext_bytes_max = 16, .trailer_bytes_max = 32, .head_bytes_max = test_limits.head_bytes_max, .target_bytes_max = test_limits.target_bytes_max, .headers_count_max = test_limits.headers_count_max };
    for (0..20_000) |_| {
        const len = random.uintLessThan(usize, input.len);
        for (input[0..len]) |*c| c.* = alphabet[random.uintLessThan(usize, alphabet.len)];
        var decoder = ChunkedDecoder{};
        var offset: usize = 0;
        while (offset < len) {
            const step = decoder.decode(input[offset..len], limits) catch break;
            try testing.expect(step.consumed <= len - offset);
            if (step.consumed == 0) break;
            offset += step.consumed;
        }
    }
}
