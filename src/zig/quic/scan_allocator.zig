//! Test-only: an allocator that looks for given byte strings (keys, secrets) in each block
//! as it is given back, before the block goes to the child allocator. A key left in freed
//! memory is a hit. `Allocator.destroy` hands the block over as it is; `free` overwrites it
//! first (with `undefined`), so only what is destroyed can be checked this way.
const std = @import("std");

pub const Scan = struct {
    child: std.mem.Allocator,
    needles: []const []const u8 = &.{},
    hits: usize = 0,
    frees: usize = 0,

    pub fn allocator(self: *Scan) std.mem.Allocator {
        const vtable: std.mem.Allocator.VTable = .{
            .alloc = alloc,
            .resize = resize,
            .remap = remap,
            .free = free,
        };
        return .{ .ptr = self, .vtable = &vtable };
    }

    fn alloc(ctx: *anyopaque, len: usize, a: std.mem.Alignment, ret: usize) ?[*]u8 {
        const self: *Scan = @ptrCast(@alignCast(ctx));
        return self.child.rawAlloc(len, a, ret);
    }

    fn resize(ctx: *anyopaque, m: []u8, a: std.mem.Alignment, n: usize, ret: usize) bool {
        const self: *Scan = @ptrCast(@alignCast(ctx));
        return self.child.rawResize(m, a, n, ret);
    }

    fn remap(ctx: *anyopaque, m: []u8, a: std.mem.Alignment, n: usize, ret: usize) ?[*]u8 {
        const self: *Scan = @ptrCast(@alignCast(ctx));
        return self.child.rawRemap(m, a, n, ret);
    }

    fn free(ctx: *anyopaque, m: []u8, a: std.mem.Alignment, ret: usize) void {
        const self: *Scan = @ptrCast(@alignCast(ctx));
        self.frees += 1;
        for (self.needles) |needle| if (std.mem.indexOf(u8, m, needle) != null) {
            self.hits += 1;
        };
        self.child.rawFree(m, a, ret);
    }
};
