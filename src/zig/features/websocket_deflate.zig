//! permessage-deflate (RFC 7692) on the system's zlib (`os/zlib.zig`), loaded with
//! dlopen the first time a connection negotiates the extension: the engine does not
//! link zlib, and a server whose clients never ask for compression never maps it.
//!
//! Compression always resets per message (we answer `server_no_context_takeover`),
//! so one compressor per window size serves every connection. Decompression keeps a
//! per-connection context only when the client keeps its own (context takeover);
//! otherwise one shared decompressor is reset after each message.
const std = @import("std");

const zlib = @import("../os/zlib.zig");
const ZStream = zlib.ZStream;
const api = &zlib.api;

/// zlib's own default level: a fair trade of CPU for bytes.
const compression_level = 6;
/// 8 is zlib's default; the memory is one shared compressor per window size.
const mem_level = 8;
/// RFC 7692 7.2.1: every compressed message ends with these bytes, removed on the wire.
const sync_tail = [4]u8{ 0x00, 0x00, 0xff, 0xff };

/// zlib is loaded once for the whole engine (`os/zlib.zig`): false when the system has
/// none, and the extension is then declined.
pub const load = zlib.load;
pub const loaded = zlib.loaded;

pub const Error = error{ TooBig, Corrupt, OutOfMemory };

const allocator = std.heap.c_allocator;

pub const Inflater = struct {
    z: ZStream = .{},

    /// Null when zlib is missing or out of memory.
    pub fn create() ?*Inflater {
        if (!load()) return null;
        const self = allocator.create(Inflater) catch return null;
        self.* = .{};
        // Raw deflate (negative bits) with the largest window: fits any client window.
        if (api.inflateInit2_(&self.z, -15, api.zlibVersion(), @sizeOf(ZStream)) != zlib.Z_OK) {
            allocator.destroy(self);
            return null;
        }
        return self;
    }

    pub fn destroy(self: *Inflater) void {
        _ = api.inflateEnd(&self.z);
        allocator.destroy(self);
    }

    pub fn reset(self: *Inflater) void {
        _ = api.inflateReset(&self.z);
    }

    /// Inflates one message's compressed bytes, appending to `out`. More than
    /// `limit` bytes of output is `TooBig` (a deflate bomb stops there, at most
    /// `limit` + one step of output allocated).
    pub fn message(
        self: *Inflater,
        input: []const u8,
        out: *std.ArrayListUnmanaged(u8),
        limit: usize,
    ) Error!void {
        try self.feed(input, out, limit);
        try self.feed(&sync_tail, out, limit);
    }

    fn feed(
        self: *Inflater,
        input: []const u8,
        out: *std.ArrayListUnmanaged(u8),
        limit: usize,
    ) Error!void {
        var in = input;
        while (true) {
            const chunk: usize = @min(in.len, std.math.maxInt(c_uint));
            self.z.next_in = in.ptr;
            self.z.avail_in = @intCast(chunk);
            if (out.unusedCapacitySlice().len == 0) {
                if (out.items.len > limit) return error.TooBig;
                const grow = std.math.clamp(out.items.len, 4096, 1 << 20);
                try out.ensureUnusedCapacity(allocator, @min(grow, limit + 1 - out.items.len + 1));
            }
            const room = out.unusedCapacitySlice();
            const room_len: usize = @min(room.len, std.math.maxInt(c_uint));
            self.z.next_out = room.ptr;
            self.z.avail_out = @intCast(room_len);
            const rc = api.inflate(&self.z, zlib.Z_SYNC_FLUSH);
            const consumed = chunk - self.z.avail_in;
            const produced = room_len - self.z.avail_out;
            // zlib reads and writes within what it was given.
            std.debug.assert(consumed <= chunk and produced <= room_len);
            out.items.len += produced;
            in = in[consumed..];
            if (out.items.len > limit) return error.TooBig;
            switch (rc) {
                zlib.Z_OK => {},
                // A final block: the stream starts afresh for the next message.
                zlib.Z_STREAM_END => {
                    self.reset();
                    if (in.len != 0) return error.Corrupt;
                    return;
                },
                zlib.Z_BUF_ERROR => if (in.len == 0) return,
                else => return error.Corrupt,
            }
            if (in.len == 0 and self.z.avail_out != 0) return;
        }
    }
};

pub const Deflater = struct {
    z: ZStream = .{},

    pub fn create(window_bits: u4) ?*Deflater {
        // A negotiated server_max_window_bits: 9..15 (8 is declined in `negotiateDeflate`), or 15.
        std.debug.assert(window_bits >= 8);
        if (!load()) return null;
        const self = allocator.create(Deflater) catch return null;
        self.* = .{};
        const bits: c_int = -@as(c_int, @max(window_bits, 9));
        if (api.deflateInit2_(
            &self.z,
            compression_level,
            zlib.Z_DEFLATED,
            bits,
            mem_level,
            zlib.Z_DEFAULT_STRATEGY,
            api.zlibVersion(),
            @sizeOf(ZStream),
        ) != zlib.Z_OK) {
            allocator.destroy(self);
            return null;
        }
        return self;
    }

    pub fn destroy(self: *Deflater) void {
        _ = api.deflateEnd(&self.z);
        allocator.destroy(self);
    }

    /// Compresses one message into `out` (replacing its contents), without the
    /// trailing 00 00 ff ff, starting from an empty context.
    pub fn message(
        self: *Deflater,
        input: []const u8,
        out: *std.ArrayListUnmanaged(u8),
    ) Error!void {
        _ = api.deflateReset(&self.z);
        out.clearRetainingCapacity();
        if (input.len > std.math.maxInt(c_uint)) return error.TooBig;
        const bound: usize = @intCast(api.deflateBound(&self.z, @intCast(input.len)));
        try out.ensureTotalCapacity(allocator, bound + 16);
        self.z.next_in = input.ptr;
        self.z.avail_in = @intCast(input.len);
        while (true) {
            const room = out.unusedCapacitySlice();
            const room_len: usize = @min(room.len, std.math.maxInt(c_uint));
            self.z.next_out = room.ptr;
            self.z.avail_out = @intCast(room_len);
            const rc = api.deflate(&self.z, zlib.Z_SYNC_FLUSH);
            out.items.len += room_len - self.z.avail_out;
            if (rc != zlib.Z_OK and rc != zlib.Z_BUF_ERROR) return error.Corrupt;
            if (self.z.avail_out != 0) break;
            try out.ensureUnusedCapacity(allocator, 4096);
        }
        if (std.mem.endsWith(u8, out.items, &sync_tail)) out.items.len -= 4;
    }
};

/// The compressors and the context-free decompressor one server shares.
pub const Shared = struct {
    deflaters: [16]?*Deflater = [_]?*Deflater{null} ** 16,
    inflater: ?*Inflater = null,
    scratch: std.ArrayListUnmanaged(u8) = .{},

    pub fn deflater(self: *Shared, window_bits: u4) ?*Deflater {
        const slot = &self.deflaters[window_bits];
        if (slot.* == null) slot.* = Deflater.create(window_bits);
        return self.deflaters[window_bits];
    }

    pub fn sharedInflater(self: *Shared) ?*Inflater {
        if (self.inflater == null) self.inflater = Inflater.create();
        return self.inflater;
    }

    /// Large scratch space goes back to the allocator once a big message is sent.
    pub fn trimScratch(self: *Shared) void {
        if (self.scratch.capacity > 64 * 1024) self.scratch.clearAndFree(allocator);
    }

    pub fn deinit(self: *Shared) void {
        for (&self.deflaters) |*d| if (d.*) |x| {
            x.destroy();
            d.* = null;
        };
        if (self.inflater) |i| i.destroy();
        self.inflater = null;
        self.scratch.deinit(allocator);
    }
};

test "deflate round trip and bomb limit" {
    if (!load()) return error.SkipZigTest;
    var shared = Shared{};
    defer shared.deinit();
    const text = "hello hello hello hello, permessage-deflate! " ** 50;
    try shared.deflater(15).?.message(text, &shared.scratch);
    try std.testing.expect(shared.scratch.items.len < text.len / 4);
    var out: std.ArrayListUnmanaged(u8) = .{};
    defer out.deinit(allocator);
    const inf = shared.sharedInflater().?;
    try inf.message(shared.scratch.items, &out, 1 << 20);
    try std.testing.expectEqualStrings(text, out.items);
    // RFC 7692 7.2.3.1: "Hello" compressed by the RFC's example.
    out.clearRetainingCapacity();
    inf.reset();
    try inf.message(&.{ 0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00 }, &out, 100);
    try std.testing.expectEqualStrings("Hello", out.items);
    // A megabyte of zeros compresses to about a kilobyte; a 64 KiB limit stops it.
    const zeros = try allocator.alloc(u8, 1 << 20);
    defer allocator.free(zeros);
    @memset(zeros, 0);
    try shared.deflater(15).?.message(zeros, &shared.scratch);
    try std.testing.expect(shared.scratch.items.len < 4096);
    out.clearRetainingCapacity();
    inf.reset();
    try std.testing.expectError(error.TooBig, inf.message(shared.scratch.items, &out, 64 * 1024));
    try std.testing.expect(out.capacity < 200 * 1024);
    // Garbage is refused, not a crash.
    out.clearRetainingCapacity();
    inf.reset();
    try std.testing.expectError(
        error.Corrupt,
        inf.message(&.{ 0xff, 0xff, 0xff, 0xff, 0xff }, &out, 100),
    );
    // Empty message.
    try shared.deflater(9).?.message("", &shared.scratch);
    out.clearRetainingCapacity();
    inf.reset();
    try inf.message(shared.scratch.items, &out, 10);
    try std.testing.expectEqual(@as(usize, 0), out.items.len);
}
