//! Request body decoding (`--request-decompression`): which coding a request's
//! content-encoding names, and the decoders that turn its body back into what the
//! client compressed, a bounded window at a time.
//!
//! The decoders are the system's zlib, libbrotlidec and libzstd, opened with dlopen when
//! the option is on (as the encoders are for `--compression`); a coding whose library
//! cannot be opened is refused with 415 like an unknown one.
//!
//! Memory per decoding stream, from its first body bytes to its end (nothing before:
//! a request whose app never reads its body costs nothing): the decoded window
//! (`window_bytes`), a copy of the encoded bytes the protocol handed over in one go
//! (at most its read buffer, 16 KiB, over HTTP/1.1; at most the stream's receive
//! window, 256 KiB, over HTTP/2), and the codec's state: gzip about 44 KiB (a 32 KiB
//! window), zstd at most a 2^`window_log_max` window (8 MiB, the bound RFC 9659 sets
//! for the zstd coding) plus about 160 KiB, brotli at most `brotli_state_bytes_max`
//! (its ring buffer is the sender's window; streams that need more are refused as
//! corrupt). The decoder never runs more than one window ahead of the app.
const std = @import("std");
const compression = @import("compression.zig");
const Encoding = compression.Encoding;
/// zlib (gzip) is shared with response compression and WebSocket deflate: `os/zlib.zig`
/// loads it; brotli's and zstd's decoders are this file's own.
const zlib_lib = @import("../os/zlib.zig");
const dynlib = @import("../os/dynlib.zig");
const ZStream = zlib_lib.ZStream;
const zlib = &zlib_lib.api;

/// Decoded bytes held ahead of the app at most.
pub const window_bytes = 64 * 1024;
/// The largest zstd window taken (2^23 = 8 MiB); a frame that needs more is corrupt to us.
pub const window_log_max = 23;
/// What one brotli decoder may allocate: an 8 MiB ring buffer and its tables.
pub const brotli_state_bytes_max = (1 << window_log_max) + 1024 * 1024;

/// What a request's content-encoding asks of the engine.
pub const Coding = enum(u8) {
    /// None (or only `identity`): the body goes to the app as it came.
    identity,
    gzip,
    br,
    zstd,
    /// An unknown coding, one whose library is missing, or stacked codings: 415.
    unsupported,

    pub fn encoding(self: Coding) ?Encoding {
        return switch (self) {
            .gzip => .gzip,
            .br => .br,
            .zstd => .zstd,
            .identity, .unsupported => null,
        };
    }
};

/// The coding of a request from its content-encoding fields (`headers` have lower-case
/// `name` and `value`; several fields are one list). Stacked codings (`gzip, br`) are
/// refused rather than undone in reverse order (RFC 9110 8.4 allows either): no client
/// sends them, and each layer would need its own window.
pub fn codingOf(headers: anytype) Coding {
    var found: ?Encoding = null;
    var count: usize = 0;
    for (headers) |h| {
        if (!std.mem.eql(u8, h.name, "content-encoding")) continue;
        var it = std.mem.splitScalar(u8, h.value, ',');
        while (it.next()) |raw| {
            const name = std.mem.trim(u8, raw, " \t");
            if (name.len == 0 or std.ascii.eqlIgnoreCase(name, "identity")) continue;
            count += 1;
            found = Encoding.parse(name) orelse return .unsupported;
        }
    }
    if (count == 0) return .identity;
    if (count > 1) return .unsupported;
    const e = found.?;
    if (!available(e)) return .unsupported;
    return switch (e) {
        .gzip => .gzip,
        .br => .br,
        .zstd => .zstd,
    };
}

/// "gzip, br, zstd": the codings this server decodes, for a 415's accept-encoding.
pub fn availableText(buf: *[24]u8) []const u8 {
    var n: usize = 0;
    for ([_]Encoding{ .gzip, .br, .zstd }) |e| {
        if (!available(e)) continue;
        if (n > 0) {
            @memcpy(buf[n..][0..2], ", ");
            n += 2;
        }
        @memcpy(buf[n..][0..e.token().len], e.token());
        n += e.token().len;
    }
    return buf[0..n];
}

// ---------------------------------------------------------------------------
// The libraries

const AllocFn = *const fn (?*anyopaque, usize) callconv(.c) ?*anyopaque;
const FreeFn = *const fn (?*anyopaque, ?*anyopaque) callconv(.c) void;

const BrotliApi = struct {
    BrotliDecoderCreateInstance: *const fn (
        ?AllocFn,
        ?FreeFn,
        ?*anyopaque,
    ) callconv(.c) ?*anyopaque,
    BrotliDecoderDestroyInstance: *const fn (*anyopaque) callconv(.c) void,
    BrotliDecoderDecompressStream: *const fn (
        *anyopaque,
        *usize,
        *[*]const u8,
        *usize,
        *[*]u8,
        ?*usize,
    ) callconv(.c) c_int,
};

const ZstdApi = struct {
    ZSTD_createDCtx: *const fn () callconv(.c) ?*anyopaque,
    ZSTD_freeDCtx: *const fn (*anyopaque) callconv(.c) usize,
    ZSTD_DCtx_setParameter: *const fn (*anyopaque, c_int, c_int) callconv(.c) usize,
    ZSTD_decompressStream: *const fn (*anyopaque, *ZstdOut, *ZstdIn) callconv(.c) usize,
    ZSTD_isError: *const fn (usize) callconv(.c) c_uint,
};

const ZstdOut = extern struct { dst: [*]u8, size: usize, pos: usize };
const ZstdIn = extern struct { src: [*]const u8, size: usize, pos: usize };

var brotli: BrotliApi = undefined;
var zstd: ZstdApi = undefined;
var loaded_set = [_]bool{ false, false, false };

/// The shared library a decoder needs.
pub fn libraryName(e: Encoding) [:0]const u8 {
    return switch (e) {
        .gzip => zlib_lib.library_name,
        .br => "libbrotlidec.so.1",
        .zstd => "libzstd.so.1",
    };
}

/// Opens the decoder library of `e` once. False when it cannot be opened.
pub fn load(e: Encoding) bool {
    const i = @intFromEnum(e);
    if (loaded_set[i]) return true;
    const ok = switch (e) {
        .gzip => zlib_lib.load(),
        .br => dynlib.loadApi(BrotliApi, &brotli, libraryName(e)),
        .zstd => dynlib.loadApi(ZstdApi, &zstd, libraryName(e)),
    };
    loaded_set[i] = ok;
    return ok;
}

/// Whether `e` can be decoded (its library was loaded by `load`).
pub fn available(e: Encoding) bool {
    return loaded_set[@intFromEnum(e)];
}

// ---------------------------------------------------------------------------
// The decoder

pub const Error = error{ Corrupt, TooLarge, OutOfMemory };

pub const Decoder = struct {
    enc: Encoding,
    z: ZStream = .{},
    state: ?*anyopaque = null,
    /// Bytes the brotli decoder holds (its allocations go through `brotliAlloc`).
    brotli_bytes: usize = 0,
    /// Encoded bytes handed over and not yet decoded: in[in_off..].
    in: std.ArrayListUnmanaged(u8) = .empty,
    in_off: usize = 0,
    /// Decoded bytes not yet taken by the app: out[out_start..out_end].
    out: *[window_bytes]u8,
    out_start: usize = 0,
    out_end: usize = 0,
    decoded_bytes: u64 = 0,
    /// The codec has seen input since it last completed a stream (a gzip member, a zstd
    /// frame, the brotli stream): an end now would be a truncation.
    open: bool = false,
    /// Brotli's stream is complete: nothing may follow it.
    closed: bool = false,
    /// The last step filled all the room it had: the codec may hold more output even
    /// with no input left (each keeps some internally).
    more_output: bool = false,

    const allocator = std.heap.c_allocator;

    pub fn create(e: Encoding) ?*Decoder {
        if (!load(e)) return null;
        const self = allocator.create(Decoder) catch return null;
        const out = allocator.create([window_bytes]u8) catch {
            allocator.destroy(self);
            return null;
        };
        self.* = .{ .enc = e, .out = out };
        const ok = switch (e) {
            // windowBits 15 + 16: a gzip wrapper only (x-gzip is the same).
            .gzip => zlib.inflateInit2_(
                &self.z,
                15 + 16,
                zlib.zlibVersion(),
                @sizeOf(ZStream),
            ) == 0,
            .br => blk: {
                self.state = brotli.BrotliDecoderCreateInstance(&brotliAlloc, &brotliFree, self);
                break :blk self.state != null;
            },
            .zstd => blk: {
                const dctx = zstd.ZSTD_createDCtx() orelse break :blk false;
                self.state = dctx;
                // ZSTD_d_windowLogMax (100): a frame asking for a larger window fails.
                break :blk zstd.ZSTD_isError(
                    zstd.ZSTD_DCtx_setParameter(dctx, 100, window_log_max),
                ) == 0;
            },
        };
        if (!ok) {
            self.destroy();
            return null;
        }
        return self;
    }

    pub fn destroy(self: *Decoder) void {
        switch (self.enc) {
            .gzip => if (self.z.state != null) {
                _ = zlib.inflateEnd(&self.z);
            },
            .br => if (self.state) |st| brotli.BrotliDecoderDestroyInstance(st),
            .zstd => if (self.state) |dctx| {
                _ = zstd.ZSTD_freeDCtx(dctx);
            },
        }
        std.debug.assert(self.brotli_bytes == 0);
        self.in.deinit(allocator);
        allocator.destroy(self.out);
        allocator.destroy(self);
    }

    /// Encoded bytes from the protocol, copied (its buffer is reused). Only once the
    /// previous ones are decoded, so the copy holds at most one hand-over.
    pub fn feed(self: *Decoder, segs: []const []const u8) error{OutOfMemory}!void {
        std.debug.assert(!self.hasInput());
        self.in.clearRetainingCapacity();
        self.in_off = 0;
        for (segs) |seg| try self.in.appendSlice(allocator, seg);
    }

    pub fn hasInput(self: *const Decoder) bool {
        return self.in_off < self.in.items.len;
    }

    /// Whether `run` has something to do: input to decode, or output the codec holds.
    pub fn canRun(self: *const Decoder) bool {
        return self.hasInput() or self.more_output;
    }

    /// Decoded bytes waiting for the app.
    pub fn pending(self: *const Decoder) []const u8 {
        return self.out[self.out_start..self.out_end];
    }

    /// The app took `n` of the `pending` bytes.
    pub fn consumed(self: *Decoder, n: usize) void {
        std.debug.assert(n <= self.out_end - self.out_start);
        self.out_start += n;
        if (self.out_start == self.out_end) {
            self.out_start = 0;
            self.out_end = 0;
        }
    }

    /// Decodes buffered input into the window until the window is full or the input
    /// used up. More than `limit` decoded bytes in all is `TooLarge`, found after at
    /// most one byte past the limit (a bomb is never inflated further).
    pub fn run(self: *Decoder, limit: u64) Error!void {
        std.debug.assert(self.pending().len == 0);
        while (self.canRun() and self.out_end < window_bytes) {
            const allowed: u64 = (limit -| self.decoded_bytes) + 1;
            const room: usize = @intCast(@min(window_bytes - self.out_end, allowed));
            const in_before = self.in_off;
            const out_before = self.out_end;
            const had_input = self.hasInput();
            try self.step(room);
            self.decoded_bytes += self.out_end - out_before;
            if (self.decoded_bytes > limit) return error.TooLarge;
            self.more_output = self.out_end - out_before == room;
            if (self.in_off == in_before and self.out_end == out_before) {
                // No progress with input left: the codec cannot go on (zlib's Z_BUF_ERROR).
                if (had_input) return error.Corrupt;
                break;
            }
        }
    }

    /// The encoded body ended: so must the coded stream.
    pub fn finish(self: *const Decoder) Error!void {
        std.debug.assert(!self.more_output);
        if (self.hasInput() or self.open) return error.Corrupt;
    }

    fn step(self: *Decoder, room: usize) Error!void {
        const input = self.in.items[self.in_off..];
        const dst = self.out[self.out_end..][0..room];
        switch (self.enc) {
            .gzip => try self.stepGzip(input, dst),
            .br => try self.stepBrotli(input, dst),
            .zstd => {
                var in = ZstdIn{ .src = input.ptr, .size = input.len, .pos = 0 };
                var out = ZstdOut{ .dst = dst.ptr, .size = dst.len, .pos = 0 };
                const r = zstd.ZSTD_decompressStream(self.state.?, &out, &in);
                if (zstd.ZSTD_isError(r) != 0) return error.Corrupt;
                self.in_off += in.pos;
                self.out_end += out.pos;
                // 0: a frame is complete and flushed; another may follow.
                self.open = r != 0;
            },
        }
    }

    fn stepGzip(self: *Decoder, input: []const u8, dst: []u8) Error!void {
        if (!self.open) {
            if (input.len == 0) return; // a member ended: nothing held
            // Another gzip member after a complete one (RFC 1952 2.2 allows a series).
            if (self.z.total_in > 0 and zlib.inflateReset(&self.z) != 0) return error.Corrupt;
        }
        const give_in: c_uint = @intCast(@min(input.len, std.math.maxInt(c_uint)));
        const give_out: c_uint = @intCast(dst.len);
        self.z.next_in = input.ptr;
        self.z.avail_in = give_in;
        self.z.next_out = dst.ptr;
        self.z.avail_out = give_out;
        self.open = true;
        const r = zlib.inflate(&self.z, 0);
        self.in_off += give_in - self.z.avail_in;
        self.out_end += give_out - self.z.avail_out;
        switch (r) {
            0, -5 => {}, // Z_OK, Z_BUF_ERROR (no progress possible now)
            1 => self.open = false, // Z_STREAM_END
            -4 => return error.OutOfMemory,
            else => return error.Corrupt, // Z_NEED_DICT, Z_DATA_ERROR, Z_STREAM_ERROR
        }
    }

    fn stepBrotli(self: *Decoder, input: []const u8, dst: []u8) Error!void {
        if (self.closed) {
            if (input.len > 0) return error.Corrupt; // bytes after the end of the stream
            return;
        }
        var avail_in = input.len;
        var next_in: [*]const u8 = input.ptr;
        var avail_out = dst.len;
        var next_out: [*]u8 = dst.ptr;
        self.open = true;
        const r = brotli.BrotliDecoderDecompressStream(
            self.state.?,
            &avail_in,
            &next_in,
            &avail_out,
            &next_out,
            null,
        );
        self.in_off += input.len - avail_in;
        self.out_end += dst.len - avail_out;
        switch (r) {
            1 => { // BROTLI_DECODER_RESULT_SUCCESS
                self.open = false;
                self.closed = true;
                if (avail_in > 0) return error.Corrupt;
            },
            2, 3 => {}, // needs more input / more output
            else => return error.Corrupt, // an error, or over `brotli_state_bytes_max`
        }
    }
};

/// The brotli decoder's allocations, counted against `brotli_state_bytes_max`. Each
/// block carries its size in 16 bytes before it (keeping malloc's alignment).
fn brotliAlloc(ctx: ?*anyopaque, size: usize) callconv(.c) ?*anyopaque {
    const self: *Decoder = @ptrCast(@alignCast(ctx.?));
    if (size > brotli_state_bytes_max - self.brotli_bytes) return null;
    const raw: [*]u8 = @ptrCast(std.c.malloc(size + 16) orelse return null);
    std.mem.writeInt(usize, raw[0..@sizeOf(usize)], size, .little);
    self.brotli_bytes += size;
    return raw + 16;
}

fn brotliFree(ctx: ?*anyopaque, ptr: ?*anyopaque) callconv(.c) void {
    const p: [*]u8 = @ptrCast(ptr orelse return);
    const self: *Decoder = @ptrCast(@alignCast(ctx.?));
    const raw = p - 16;
    const size = std.mem.readInt(usize, raw[0..@sizeOf(usize)], .little);
    std.debug.assert(size <= self.brotli_bytes);
    self.brotli_bytes -= size;
    std.c.free(raw);
}

// ---------------------------------------------------------------------------
// Tests

const testing = std.testing;

/// Decodes `encoded`, handed over `piece` bytes at a time, taking every decoded byte
/// as the app would; the decoded bytes are appended to `got`.
fn decodeAll(
    e: Encoding,
    encoded: []const u8,
    piece: usize,
    limit: u64,
    got: *std.ArrayListUnmanaged(u8),
) Error!void {
    const d = Decoder.create(e) orelse return error.OutOfMemory;
    defer d.destroy();
    var at: usize = 0;
    while (at < encoded.len) {
        const n = @min(piece, encoded.len - at);
        try d.feed(&.{encoded[at..][0..n]});
        at += n;
        while (d.canRun()) {
            try d.run(limit);
            try got.appendSlice(testing.allocator, d.pending());
            d.consumed(d.pending().len);
        }
    }
    try d.finish();
}

test "codingOf: one known coding, identity, unknown and stacked" {
    const H = struct { name: []const u8, value: []const u8 };
    _ = load(.gzip);
    const none = [_]H{.{ .name = "content-type", .value = "text/plain" }};
    try testing.expectEqual(Coding.identity, codingOf(&none));
    const ident = [_]H{.{ .name = "content-encoding", .value = " identity " }};
    try testing.expectEqual(Coding.identity, codingOf(&ident));
    const empty = [_]H{.{ .name = "content-encoding", .value = "" }};
    try testing.expectEqual(Coding.identity, codingOf(&empty));
    if (available(.gzip)) {
        const gz = [_]H{.{ .name = "content-encoding", .value = "GZip" }};
        try testing.expectEqual(Coding.gzip, codingOf(&gz));
        const xgz = [_]H{.{ .name = "content-encoding", .value = "x-gzip" }};
        try testing.expectEqual(Coding.gzip, codingOf(&xgz));
        const with_identity = [_]H{.{ .name = "content-encoding", .value = "identity, gzip" }};
        try testing.expectEqual(Coding.gzip, codingOf(&with_identity));
        const stacked = [_]H{.{ .name = "content-encoding", .value = "gzip, gzip" }};
        try testing.expectEqual(Coding.unsupported, codingOf(&stacked));
        const two_fields = [_]H{
            .{ .name = "content-encoding", .value = "gzip" },
            .{ .name = "content-encoding", .value = "br" },
        };
        try testing.expectEqual(Coding.unsupported, codingOf(&two_fields));
    }
    const unknown = [_]H{.{ .name = "content-encoding", .value = "deflate" }};
    try testing.expectEqual(Coding.unsupported, codingOf(&unknown));
}

test "decoder at the limit's bounds: empty, exactly the limit, one past it" {
    if (!load(.gzip) or !compression.load(.gzip)) return error.SkipZigTest;
    var text: [100_000]u8 = undefined;
    for (&text, 0..) |*b, i| b.* = "abcdefghij"[i % 10];
    const gz = try compression.compress(testing.allocator, .gzip, 6, &text);
    defer testing.allocator.free(gz);
    var got: std.ArrayListUnmanaged(u8) = .empty;
    defer got.deinit(testing.allocator);
    // Exactly the limit, over pieces of 1 and 7 bytes and all at once.
    for ([_]usize{ 1, 7, gz.len }) |piece| {
        got.clearRetainingCapacity();
        try decodeAll(.gzip, gz, piece, text.len, &got);
        try testing.expectEqualSlices(u8, &text, got.items);
    }
    // One byte under the size: refused, and no more than limit + 1 bytes were decoded.
    got.clearRetainingCapacity();
    try testing.expectError(error.TooLarge, decodeAll(.gzip, gz, 4096, text.len - 1, &got));
    try testing.expect(got.items.len <= text.len);
    // An empty coded body decodes to nothing; an empty gzip stream too.
    got.clearRetainingCapacity();
    try decodeAll(.gzip, "", 1, 0, &got);
    try testing.expectEqual(@as(usize, 0), got.items.len);
    const gz_empty = try compression.compress(testing.allocator, .gzip, 6, "");
    defer testing.allocator.free(gz_empty);
    try decodeAll(.gzip, gz_empty, 3, 0, &got);
    try testing.expectEqual(@as(usize, 0), got.items.len);
    // A limit of 0 with one byte of content: one past it.
    const gz_one = try compression.compress(testing.allocator, .gzip, 6, "x");
    defer testing.allocator.free(gz_one);
    try testing.expectError(error.TooLarge, decodeAll(.gzip, gz_one, 64, 0, &got));
}

test "decoder refuses truncated and corrupt streams, takes gzip members in series" {
    if (!load(.gzip) or !compression.load(.gzip)) return error.SkipZigTest;
    const gz = try compression.compress(testing.allocator, .gzip, 6, "hello, world");
    defer testing.allocator.free(gz);
    var got: std.ArrayListUnmanaged(u8) = .empty;
    defer got.deinit(testing.allocator);
    try testing.expectError(error.Corrupt, decodeAll(.gzip, gz[0 .. gz.len - 1], 5, 1000, &got));
    got.clearRetainingCapacity();
    try testing.expectError(error.Corrupt, decodeAll(.gzip, "not gzip at all", 5, 1000, &got));
    var two: [256]u8 = undefined;
    @memcpy(two[0..gz.len], gz);
    @memcpy(two[gz.len..][0..gz.len], gz);
    got.clearRetainingCapacity();
    try decodeAll(.gzip, two[0 .. 2 * gz.len], 4, 1000, &got);
    try testing.expectEqualStrings("hello, worldhello, world", got.items);
    // Garbage after a complete member.
    @memcpy(two[gz.len..][0..4], "junk");
    got.clearRetainingCapacity();
    try testing.expectError(error.Corrupt, decodeAll(.gzip, two[0 .. gz.len + 4], 64, 1000, &got));
}

test "brotli and zstd decoders round-trip the encoders' output" {
    // Several windows of output from little input: the codecs hold output between runs.
    const text = try testing.allocator.alloc(u8, 5 * window_bytes + 17);
    defer testing.allocator.free(text);
    for (text, 0..) |*b, i| b.* = "{\"k\": \"v\", \"n\": 1}\n"[i % 20];
    inline for (.{ Encoding.br, Encoding.zstd }) |e| if (load(e) and compression.load(e)) {
        const coded = try compression.compress(testing.allocator, e, 4, text);
        defer testing.allocator.free(coded);
        var got: std.ArrayListUnmanaged(u8) = .empty;
        defer got.deinit(testing.allocator);
        for ([_]usize{ 11, coded.len }) |piece| {
            got.clearRetainingCapacity();
            try decodeAll(e, coded, piece, text.len, &got);
            try testing.expectEqualSlices(u8, text, got.items);
        }
        got.clearRetainingCapacity();
        try testing.expectError(error.TooLarge, decodeAll(e, coded, 11, text.len - 1, &got));
        got.clearRetainingCapacity();
        try testing.expectError(
            error.Corrupt,
            decodeAll(e, coded[0 .. coded.len - 2], 11, text.len, &got),
        );
    };
}
