//! The system's zlib, opened with dlopen (`dynlib.zig`) the first time gzip responses,
//! gzip request bodies or WebSocket permessage-deflate need it. One loader and one
//! table of its functions serve all three.
const std = @import("std");
const dynlib = @import("dynlib.zig");

/// zlib's z_stream (zlib.h), as its ABI lays it out on every platform the engine builds
/// for (LP64: uLong is c_ulong).
pub const ZStream = extern struct {
    next_in: ?[*]const u8 = null,
    avail_in: c_uint = 0,
    total_in: c_ulong = 0,
    next_out: ?[*]u8 = null,
    avail_out: c_uint = 0,
    total_out: c_ulong = 0,
    msg: ?[*:0]const u8 = null,
    state: ?*anyopaque = null,
    zalloc: ?*anyopaque = null,
    zfree: ?*anyopaque = null,
    @"opaque": ?*anyopaque = null,
    data_type: c_int = 0,
    adler: c_ulong = 0,
    reserved: c_ulong = 0,
};

// zlib.h's return codes, flush values and method.
pub const Z_OK = 0;
pub const Z_STREAM_END = 1;
pub const Z_BUF_ERROR = -5;
pub const Z_NO_FLUSH = 0;
pub const Z_SYNC_FLUSH = 2;
pub const Z_FINISH = 4;
pub const Z_DEFLATED = 8;
pub const Z_DEFAULT_STRATEGY = 0;

pub const library_name = "libz.so.1";

/// The functions the engine calls, each looked up by its field's name.
pub const Api = struct {
    zlibVersion: *const fn () callconv(.c) [*:0]const u8,
    inflateInit2_: *const fn (*ZStream, c_int, [*:0]const u8, c_int) callconv(.c) c_int,
    inflate: *const fn (*ZStream, c_int) callconv(.c) c_int,
    inflateReset: *const fn (*ZStream) callconv(.c) c_int,
    inflateEnd: *const fn (*ZStream) callconv(.c) c_int,
    deflateInit2_: *const fn (
        *ZStream,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        [*:0]const u8,
        c_int,
    ) callconv(.c) c_int,
    deflate: *const fn (*ZStream, c_int) callconv(.c) c_int,
    deflateReset: *const fn (*ZStream) callconv(.c) c_int,
    deflateEnd: *const fn (*ZStream) callconv(.c) c_int,
    deflateBound: *const fn (*ZStream, c_ulong) callconv(.c) c_ulong,
};

/// Filled by `load`; only read once `load` returned true.
pub var api: Api = undefined;
var load_state: enum { not_tried, loaded, failed } = .not_tried;

/// Loads zlib once; a failure is remembered rather than retried on every request.
/// False when the system has none: gzip and permessage-deflate are then declined.
pub fn load() bool {
    switch (load_state) {
        .loaded => return true,
        .failed => return false,
        .not_tried => {},
    }
    load_state = .failed;
    if (!dynlib.loadApi(Api, &api, library_name)) return false;
    load_state = .loaded;
    return true;
}

pub fn loaded() bool {
    return load_state == .loaded;
}

test "zlib: loads once, and its version is 1.x" {
    if (!load()) return error.SkipZigTest;
    try std.testing.expect(loaded());
    try std.testing.expect(load());
    try std.testing.expectEqual(@as(u8, '1'), api.zlibVersion()[0]);
}
