//! HTTP/2's wire format (RFC 9113 section 4, 6): frame headers, types, flags, settings
//! identifiers, error codes, and the flow-control window arithmetic (section 6.9). Pure:
//! no connection, no allocation.
const std = @import("std");

pub const ErrorCode = enum(u32) {
    no_error = 0,
    protocol = 1,
    internal = 2,
    flow_control = 3,
    settings_timeout = 4,
    stream_closed = 5,
    frame_size = 6,
    refused_stream = 7,
    cancel = 8,
    compression = 9,
    connect = 10,
    enhance_your_calm = 11,
    inadequate_security = 12,
    http_1_1_required = 13,
};

pub const FrameType = enum(u8) {
    data = 0,
    headers = 1,
    priority = 2,
    rst_stream = 3,
    settings = 4,
    push_promise = 5,
    ping = 6,
    goaway = 7,
    window_update = 8,
    continuation = 9,
    _,
};

pub const flag_end_stream: u8 = 0x1;
pub const flag_ack: u8 = 0x1;
pub const flag_end_headers: u8 = 0x4;
pub const flag_padded: u8 = 0x8;
pub const flag_priority: u8 = 0x20;

pub const setting_header_table_size = 1;
pub const setting_enable_push = 2;
pub const setting_max_concurrent_streams = 3;
pub const setting_initial_window_size = 4;
pub const setting_max_frame_size = 5;
pub const setting_max_header_list_size = 6;
pub const setting_enable_connect_protocol = 8;

/// Every frame starts with a header of this many bytes (RFC 9113 4.1).
pub const header_bytes = 9;
/// The flow-control window every stream and the connection start with, before
/// SETTINGS_INITIAL_WINDOW_SIZE or WINDOW_UPDATE (RFC 9113 6.9.2).
pub const initial_window_default: u32 = 65535;
/// SETTINGS_MAX_FRAME_SIZE: its initial value, also the smallest allowed, and the largest
/// allowed, 2^24-1 (RFC 9113 6.5.2).
pub const frame_size_default: u32 = 16384;
pub const frame_size_limit: u32 = (1 << 24) - 1;

/// The largest flow-control window RFC 9113 6.9.1 allows: 2^31-1.
pub const window_max: i64 = std.math.maxInt(i32);

/// The largest stream identifier (31 bits): a drain's first GOAWAY names it.
pub const stream_id_max: u32 = std.math.maxInt(u31);

/// A flow-control window grown by `delta` (a WINDOW_UPDATE increment, or the change of
/// SETTINGS_INITIAL_WINDOW_SIZE applied to an open stream, which may be negative).
/// A window may go below zero after a SETTINGS decrease (RFC 9113 6.9.2) but never
/// above `window_max`: past it is a FLOW_CONTROL_ERROR, and the window is unchanged.
pub fn windowGrow(window: i64, delta: i64) error{FlowControl}!i64 {
    // Contract: a window stays within ±window_max (we never send on a window <= 0, so
    // the lowest is a window used to 0 then lowered by the largest setting).
    std.debug.assert(window >= -window_max and window <= window_max);
    std.debug.assert(delta >= -window_max and delta <= window_max);
    const grown = window + delta;
    if (grown > window_max) return error.FlowControl;
    std.debug.assert(grown >= -window_max);
    return grown;
}

/// A window after `n` bytes were sent or received on it (`n` never exceeds what it
/// allowed). Nothing sent leaves any window as it is, a negative one too: an empty DATA
/// frame that only ends a stream is not flow-controlled (RFC 9113 6.9).
pub fn windowUse(window: i64, n: u64) i64 {
    std.debug.assert(window >= -window_max and window <= window_max);
    std.debug.assert(n == 0 or (n <= window_max and @as(i64, @intCast(n)) <= window));
    const used = window - @as(i64, @intCast(n));
    // Using a window never takes it below zero, nor lower than it was when negative.
    std.debug.assert(used >= @min(window, 0));
    return used;
}

pub const FrameHeader = struct {
    len: u32,
    type: FrameType,
    flags: u8,
    stream: u32,

    pub fn parse(b: *const [header_bytes]u8) FrameHeader {
        return .{
            .len = std.mem.readInt(u24, b[0..3], .big),
            .type = @enumFromInt(b[3]),
            .flags = b[4],
            .stream = std.mem.readInt(u32, b[5..9], .big) & 0x7fff_ffff,
        };
    }

    pub fn write(self: FrameHeader, b: *[header_bytes]u8) void {
        // Contract: every frame we write fits the 24-bit length and names a 31-bit stream
        // (the reserved bit clear), whatever the caller built it from.
        std.debug.assert(self.len <= frame_size_limit);
        std.debug.assert(self.stream <= stream_id_max);
        std.mem.writeInt(u24, b[0..3], @intCast(self.len), .big);
        b[3] = @intFromEnum(self.type);
        b[4] = self.flags;
        std.mem.writeInt(u32, b[5..9], self.stream, .big);
    }
};

/// The client connection preface (RFC 9113 3.4), before its SETTINGS.
pub const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether `data` (the first bytes of a connection) is, or may still become, the preface.
pub fn prefaceState(data: []const u8) enum { no, partial, yes } {
    const n = @min(data.len, preface.len);
    if (!std.mem.eql(u8, data[0..n], preface[0..n])) return .no;
    return if (data.len >= preface.len) .yes else .partial;
}

// ---- tests ------------------------------------------------------------------------------

test "frame headers round-trip and the reserved bit is ignored" {
    var b: [9]u8 = undefined;
    (FrameHeader{ .len = 16384, .type = .headers, .flags = flag_end_headers | flag_end_stream, .stream = 0x7fff_ffff }).write(&b);
    try std.testing.expectEqualSlices(u8, &.{ 0x00, 0x40, 0x00, 0x01, 0x05, 0x7f, 0xff, 0xff, 0xff }, &b);
    b[5] |= 0x80;
    const fh = FrameHeader.parse(&b);
    try std.testing.expectEqual(@as(u32, 16384), fh.len);
    try std.testing.expectEqual(FrameType.headers, fh.type);
    try std.testing.expectEqual(@as(u32, 0x7fff_ffff), fh.stream);
    b[3] = 0xee;
    try std.testing.expectEqual(@as(u8, 0xee), @intFromEnum(FrameHeader.parse(&b).type));
}

test "window arithmetic: up to 2^31-1 and not one more" {
    const t = std.testing;
    try t.expectEqual(@as(i64, 2147483647), window_max);
    // Go and grpc-go open the connection window by 2^30 at start: 65535 + 2^30 fits.
    try t.expectEqual(@as(i64, 65535 + (1 << 30)), try windowGrow(65535, 1 << 30));
    // Exactly the maximum, from the default window and from zero.
    try t.expectEqual(window_max, try windowGrow(65535, window_max - 65535));
    try t.expectEqual(window_max, try windowGrow(0, window_max));
    // One past it (2^31) is a flow-control error, whatever the route there.
    try t.expectError(error.FlowControl, windowGrow(65535, window_max - 65535 + 1));
    try t.expectError(error.FlowControl, windowGrow(window_max, 1));
    try t.expectError(error.FlowControl, windowGrow(1, window_max));
}

test "window arithmetic: a SETTINGS decrease makes a window negative, updates bring it back" {
    const t = std.testing;
    // 65535 granted, 60000 sent, then SETTINGS_INITIAL_WINDOW_SIZE 65535 -> 0.
    var w = windowUse(65535, 60000);
    w = try windowGrow(w, 0 - 65535);
    try t.expectEqual(@as(i64, -60000), w);
    // An empty DATA frame that only ends the stream uses nothing, even of a negative window.
    try t.expectEqual(@as(i64, -60000), windowUse(w, 0));
    // The lowest a window can be: all of 2^31-1 used, then the setting to 0.
    try t.expectEqual(-window_max, try windowGrow(windowUse(window_max, @intCast(window_max)), -window_max));
    // Back up by the setting's increase, then by updates: negative windows add normally.
    w = try windowGrow(w, 65535);
    try t.expectEqual(@as(i64, 5535), w);
    w = try windowGrow(-window_max, window_max);
    try t.expectEqual(@as(i64, 0), w);
    // From a negative window the largest increment fits; from a positive one it does not.
    try t.expectEqual(window_max - 1, try windowGrow(-1, window_max));
    try t.expectError(error.FlowControl, windowGrow(1, window_max));
}

test "window arithmetic: many small updates add up exactly and stop at the maximum" {
    const t = std.testing;
    var w: i64 = 0;
    for (0..100_000) |_| w = try windowGrow(w, 1);
    try t.expectEqual(@as(i64, 100_000), w);
    // Updates of 2^20 from the default: the last that fits, then the first that does not.
    w = 65535;
    var updates: u32 = 0;
    while (windowGrow(w, 1 << 20)) |grown| : (updates += 1) w = grown else |_| {}
    try t.expectEqual(@as(u32, (window_max - 65535) >> 20), updates);
    try t.expect(w <= window_max and w + (1 << 20) > window_max);
    // Sending uses it down to zero exactly.
    try t.expectEqual(@as(i64, 0), windowUse(w, @intCast(w)));
}

test "the preface is recognised whole, in part, or not at all" {
    try std.testing.expectEqual(.yes, prefaceState(preface ++ "\x00\x00\x00\x04"));
    try std.testing.expectEqual(.partial, prefaceState("PRI * HTTP/2"));
    try std.testing.expectEqual(.partial, prefaceState(""));
    try std.testing.expectEqual(.no, prefaceState("GET / HTTP/1.1\r\n"));
    try std.testing.expectEqual(.no, prefaceState("PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"));
}
