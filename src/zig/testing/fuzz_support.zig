//! What the coverage-guided fuzzers share: a counting allocator (the leak check after each
//! input, and one allocation made to fail on request), a reader that turns fuzz bytes into
//! values (zeros once the input is spent, so every input is a complete program), and the
//! glue that hands the coverage counters of an object built with `-ffuzz` to libFuzzer.
const std = @import("std");
const Allocator = std.mem.Allocator;
const Alignment = std.mem.Alignment;

/// Counts live allocations and bytes; `fail_at` makes that allocation (counted from 1 since
/// the last `arm`) return null.
pub const Counting = struct {
    child: Allocator = std.heap.c_allocator,
    live: usize = 0,
    live_bytes: usize = 0,
    made: usize = 0,
    fail_at: usize = 0,

    pub fn allocator(self: *Counting) Allocator {
        return .{ .ptr = self, .vtable = &vtable };
    }

    /// The next `n`th allocation fails (0: none does).
    pub fn arm(self: *Counting, n: usize) void {
        self.made = 0;
        self.fail_at = n;
    }

    const vtable: Allocator.VTable = .{
        .alloc = alloc,
        .resize = resize,
        .remap = remap,
        .free = free,
    };

    fn alloc(ctx: *anyopaque, len: usize, alignment: Alignment, ret: usize) ?[*]u8 {
        const self: *Counting = @ptrCast(@alignCast(ctx));
        self.made += 1;
        if (self.fail_at != 0 and self.made == self.fail_at) return null;
        const p = self.child.rawAlloc(len, alignment, ret) orelse return null;
        self.live += 1;
        self.live_bytes += len;
        return p;
    }

    fn resize(ctx: *anyopaque, memory: []u8, a: Alignment, new_len: usize, ret: usize) bool {
        const self: *Counting = @ptrCast(@alignCast(ctx));
        if (!self.child.rawResize(memory, a, new_len, ret)) return false;
        self.live_bytes = self.live_bytes - memory.len + new_len;
        return true;
    }

    fn remap(ctx: *anyopaque, memory: []u8, a: Alignment, new_len: usize, ret: usize) ?[*]u8 {
        const self: *Counting = @ptrCast(@alignCast(ctx));
        const p = self.child.rawRemap(memory, a, new_len, ret) orelse return null;
        self.live_bytes = self.live_bytes - memory.len + new_len;
        return p;
    }

    fn free(ctx: *anyopaque, memory: []u8, alignment: Alignment, ret: usize) void {
        const self: *Counting = @ptrCast(@alignCast(ctx));
        std.debug.assert(self.live > 0);
        self.live -= 1;
        self.live_bytes -= memory.len;
        self.child.rawFree(memory, alignment, ret);
    }
};

/// Fuzz bytes read as values; past the end every read is zero and `done` is true.
pub const Reader = struct {
    bytes: []const u8,
    pos: usize = 0,

    pub fn done(r: *const Reader) bool {
        return r.pos >= r.bytes.len;
    }

    pub fn byte(r: *Reader) u8 {
        if (r.pos >= r.bytes.len) return 0;
        defer r.pos += 1;
        return r.bytes[r.pos];
    }

    pub fn boolean(r: *Reader) bool {
        return r.byte() & 1 != 0;
    }

    /// Up to `n` bytes of the input (fewer at its end).
    pub fn take(r: *Reader, n: usize) []const u8 {
        const k = @min(n, r.bytes.len -| r.pos);
        defer r.pos += k;
        return r.bytes[r.pos..][0..k];
    }

    /// A varint-sized value (below 2^62): a selector byte picks 1, 2, 4 or 8 bytes that
    /// follow (big-endian), or one of the boundaries.
    pub fn value(r: *Reader) u64 {
        const sel = r.byte();
        return switch (sel >> 5) {
            0, 1 => r.byte(),
            2 => std.mem.readInt(u16, &pad(2, r.take(2)), .big),
            3 => std.mem.readInt(u32, &pad(4, r.take(4)), .big),
            4 => std.mem.readInt(u64, &pad(8, r.take(8)), .big) & ((1 << 62) - 1),
            5 => (@as(u64, 1) << 62) - 1 - (sel & 0x1f),
            6 => @as(u64, 1) << @intCast(sel & 0x1f),
            else => @as(u64, sel & 0x1f) << 14,
        };
    }

    fn pad(comptime n: usize, got: []const u8) [n]u8 {
        var out = [_]u8{0} ** n;
        @memcpy(out[n - got.len ..], got);
        return out;
    }
};

// ---- libFuzzer: the coverage counters of an object built with -ffuzz ----------------------

// Zig's -ffuzz emits inline 8-bit counters and a table of their PCs in these sections, but
// no constructor that registers them (its own fuzzer reads the sections itself): libFuzzer
// is told here, from LLVMFuzzerInitialize.
extern var __start___sancov_cntrs: u8;
extern var __stop___sancov_cntrs: u8;
extern const __start___sancov_pcs1: usize;
extern fn __sanitizer_cov_8bit_counters_init(start: [*]u8, stop: [*]u8) void;
extern fn __sanitizer_cov_pcs_init(beg: [*]const usize, end: [*]const usize) void;

/// Registers the counters and a PC table (libFuzzer's: a PC and flags per counter).
pub fn registerCoverage() void {
    const start: [*]u8 = @ptrCast(&__start___sancov_cntrs);
    const stop: [*]u8 = @ptrCast(&__stop___sancov_cntrs);
    const n = @intFromPtr(stop) - @intFromPtr(start);
    const pcs: [*]const usize = @ptrCast(&__start___sancov_pcs1);
    const table = std.heap.page_allocator.alloc(usize, 2 * n) catch
        @panic("fuzz: no memory for the PC table");
    for (0..n) |i| {
        table[2 * i] = pcs[i];
        table[2 * i + 1] = 0;
    }
    __sanitizer_cov_8bit_counters_init(start, stop);
    __sanitizer_cov_pcs_init(table.ptr, table.ptr + 2 * n);
}

/// Writes `seeds` as files `prefix-NN` into `dir` (made if missing).
pub fn writeSeeds(dir_path: []const u8, prefix: []const u8, seeds: []const []const u8) !void {
    var dir = try std.fs.cwd().makeOpenPath(dir_path, .{});
    defer dir.close();
    for (seeds, 0..) |seed, i| {
        var name: [64]u8 = undefined;
        const path = try std.fmt.bufPrint(&name, "{s}-{d:0>2}", .{ prefix, i });
        try dir.writeFile(.{ .sub_path = path, .data = seed });
    }
}

/// Every file of a committed corpus folder (relative to the repository's root, the unit
/// tests' working folder) through `check`; their names are printed when one fails.
pub fn runCorpus(
    dir_path: []const u8,
    check: *const fn ([]const u8) anyerror!void,
    why: ?*const []const u8,
) !usize {
    var dir = try std.fs.cwd().openDir(dir_path, .{ .iterate = true });
    defer dir.close();
    var it = dir.iterate();
    var buf: [64 * 1024]u8 = undefined;
    var count: usize = 0;
    while (try it.next()) |entry| {
        if (entry.kind != .file) continue;
        const bytes = try dir.readFile(entry.name, &buf);
        check(bytes) catch |err| {
            const name = entry.name;
            const what = if (why) |w| w.* else "";
            const e = @errorName(err);
            std.debug.print("fuzz: {s}/{s} fails: {s} {s}\n", .{ dir_path, name, e, what });
            return err;
        };
        count += 1;
    }
    return count;
}
