//! Optional system libraries opened at run time (zlib, brotli, zstd): the engine links
//! none of them, so a server that never compresses never maps one, and a system without
//! one still runs, with that feature declined.
const std = @import("std");

/// Opens the shared library `name` and fills every field of `api` (a struct of function
/// pointers) with the symbol of the field's name. False when the library cannot be
/// opened or lacks a symbol; `api` is then only partly filled and must not be used.
pub fn loadApi(comptime Api: type, api: *Api, name: [:0]const u8) bool {
    const handle = std.c.dlopen(name, .{ .NOW = true }) orelse return false;
    inline for (@typeInfo(Api).@"struct".fields) |f| {
        const sym = std.c.dlsym(handle, f.name ++ "") orelse return false;
        @field(api, f.name) = @ptrCast(@alignCast(sym));
    }
    return true;
}
