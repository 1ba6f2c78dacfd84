//! Fixed-size I/O buffers, attached to a connection only while it reads or processes a
//! request, so an idle keep-alive connection owns none.
//!
//! Each buffer is its own anonymous mapping. A bounded free list makes the hot path a
//! pointer pop; `trim` unmaps what load left behind so RSS falls back after a burst.
const std = @import("std");
const linux = std.os.linux;
const sys = @import("sys.zig");

pub const buffer_bytes = 16 * 1024;
pub const Buffer = [buffer_bytes]u8;

const FreeNode = struct { next: ?*FreeNode };

pub const Pool = struct {
    free: ?*FreeNode = null,
    free_count: u32 = 0,
    /// Buffers kept for reuse at most; beyond this a released buffer is unmapped at once.
    free_count_max: u32 = 1024,
    /// Buffers kept through an idle trim: enough for a few requests without a syscall.
    reserve_count: u32 = 8,
    in_use_count: u32 = 0,
    acquired_since_trim: u32 = 0,
    idle_since_trim: bool = true,

    pub fn acquire(self: *Pool) ?*Buffer {
        self.acquired_since_trim +|= 1;
        if (self.free) |node| {
            self.free = node.next;
            self.free_count -= 1;
            self.in_use_count += 1;
            return @ptrCast(@alignCast(node));
        }
        const prot = linux.PROT.READ | linux.PROT.WRITE;
        const rc = linux.mmap(null, buffer_bytes, prot, .{ .TYPE = .PRIVATE, .ANONYMOUS = true }, -1, 0);
        if (sys.E.init(rc) != .SUCCESS) return null;
        self.in_use_count += 1;
        return @ptrFromInt(rc);
    }

    pub fn release(self: *Pool, buf: *Buffer) void {
        std.debug.assert(self.in_use_count > 0);
        self.in_use_count -= 1;
        if (self.free_count >= self.free_count_max) {
            _ = linux.munmap(@ptrCast(buf), buffer_bytes);
            return;
        }
        const node: *FreeNode = @ptrCast(@alignCast(buf));
        node.next = self.free;
        self.free = node;
        self.free_count += 1;
    }

    /// Called about once a second: when no buffer was taken since the last call, the
    /// load has passed and free buffers beyond the reserve go back to the OS. Returns
    /// true once per passing of load (the first idle call after a busy one).
    pub fn trim(self: *Pool) bool {
        const busy = self.acquired_since_trim != 0;
        self.acquired_since_trim = 0;
        if (busy) {
            self.idle_since_trim = false;
            return false;
        }
        const first_idle = !self.idle_since_trim;
        self.idle_since_trim = true;
        while (self.free_count > self.reserve_count) {
            const node = self.free.?;
            self.free = node.next;
            self.free_count -= 1;
            _ = linux.munmap(@ptrCast(node), buffer_bytes);
        }
        return first_idle;
    }

    pub fn deinit(self: *Pool) void {
        self.reserve_count = 0;
        self.acquired_since_trim = 0;
        _ = self.trim();
    }
};

test "pool reuses and trims buffers" {
    var pool = Pool{ .reserve_count = 1 };
    defer pool.deinit();
    const a = pool.acquire().?;
    const b = pool.acquire().?;
    a[0] = 1;
    b[buffer_bytes - 1] = 2;
    pool.release(a);
    pool.release(b);
    try std.testing.expectEqual(@as(u32, 2), pool.free_count);
    const c = pool.acquire().?;
    try std.testing.expect(c == b);
    pool.release(c);
    try std.testing.expect(!pool.trim()); // busy since the last trim: keeps everything
    try std.testing.expectEqual(@as(u32, 2), pool.free_count);
    try std.testing.expect(pool.trim()); // idle: back to the reserve, once
    try std.testing.expectEqual(@as(u32, 1), pool.free_count);
    try std.testing.expect(!pool.trim());
    try std.testing.expectEqual(@as(u32, 0), pool.in_use_count);
}
