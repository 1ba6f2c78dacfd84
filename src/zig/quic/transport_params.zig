//! QUIC transport parameters (RFC 9000 18): the server's, encoded for its TLS
//! quic_transport_parameters extension, and the client's, decoded with every check of 18.2.
//! Sans-IO, no allocation: connection IDs are copied into fixed arrays (20 bytes at most).
const std = @import("std");
const assert = std.debug.assert;
const varint = @import("varint.zig");
const packet = @import("packet.zig");

pub const Id = enum(u64) {
    original_destination_connection_id = 0x00,
    max_idle_timeout = 0x01,
    stateless_reset_token = 0x02,
    max_udp_payload_size = 0x03,
    initial_max_data = 0x04,
    initial_max_stream_data_bidi_local = 0x05,
    initial_max_stream_data_bidi_remote = 0x06,
    initial_max_stream_data_uni = 0x07,
    initial_max_streams_bidi = 0x08,
    initial_max_streams_uni = 0x09,
    ack_delay_exponent = 0x0a,
    max_ack_delay = 0x0b,
    disable_active_migration = 0x0c,
    preferred_address = 0x0d,
    active_connection_id_limit = 0x0e,
    initial_source_connection_id = 0x0f,
    retry_source_connection_id = 0x10,
    /// RFC 9221 3.
    max_datagram_frame_size = 0x20,
    _,
};

/// The largest id RFC 9000 defines; anything above (GREASE ids 31 * N + 27 among them) is
/// skipped (RFC 9000 18.1), but for the extensions we speak (`known`).
const id_known_max = @intFromEnum(Id.retry_source_connection_id);

fn known(id: u64) bool {
    return id <= id_known_max or id == @intFromEnum(Id.max_datagram_frame_size);
}
/// Bounds from RFC 9000 18.2.
pub const udp_payload_size_min = 1200;
pub const ack_delay_exponent_max = 20;
pub const max_ack_delay_ms_limit = 1 << 14; // values at or above are invalid
pub const streams_max: u64 = 1 << 60;
pub const active_connection_id_limit_min = 2;
pub const stateless_reset_token_len = 16;

pub const Cid = struct {
    len: u8 = 0,
    bytes: [packet.cid_len_max]u8 = [_]u8{0} ** packet.cid_len_max,

    pub fn init(s: []const u8) Cid {
        assert(s.len <= packet.cid_len_max);
        var c: Cid = .{ .len = @intCast(s.len) };
        @memcpy(c.bytes[0..s.len], s);
        return c;
    }

    pub fn slice(c: *const Cid) []const u8 {
        return c.bytes[0..c.len];
    }
};

/// One side's parameters; the defaults are RFC 9000 18.2's for an absent parameter.
pub const Params = struct {
    original_destination_connection_id: ?Cid = null,
    initial_source_connection_id: ?Cid = null,
    retry_source_connection_id: ?Cid = null,
    stateless_reset_token: ?[stateless_reset_token_len]u8 = null,
    /// 0: no idle timeout from this side.
    max_idle_timeout_ms: u64 = 0,
    max_udp_payload_size: u64 = 65527,
    initial_max_data: u64 = 0,
    initial_max_stream_data_bidi_local: u64 = 0,
    initial_max_stream_data_bidi_remote: u64 = 0,
    initial_max_stream_data_uni: u64 = 0,
    initial_max_streams_bidi: u64 = 0,
    initial_max_streams_uni: u64 = 0,
    ack_delay_exponent: u64 = 3,
    max_ack_delay_ms: u64 = 25,
    disable_active_migration: bool = false,
    active_connection_id_limit: u64 = 2,
    /// RFC 9221: the largest DATAGRAM frame this side takes; 0: none at all.
    max_datagram_frame_size: u64 = 0,
};

/// The integer parameters, with their fields: one table for the encoder and the decoder.
const integer_fields = [_]struct { id: Id, field: []const u8 }{
    .{ .id = .max_idle_timeout, .field = "max_idle_timeout_ms" },
    .{ .id = .max_udp_payload_size, .field = "max_udp_payload_size" },
    .{ .id = .initial_max_data, .field = "initial_max_data" },
    .{ .id = .initial_max_stream_data_bidi_local, .field = "initial_max_stream_data_bidi_local" },
    .{ .id = .initial_max_stream_data_bidi_remote, .field = "initial_max_stream_data_bidi_remote" },
    .{ .id = .initial_max_stream_data_uni, .field = "initial_max_stream_data_uni" },
    .{ .id = .initial_max_streams_bidi, .field = "initial_max_streams_bidi" },
    .{ .id = .initial_max_streams_uni, .field = "initial_max_streams_uni" },
    .{ .id = .ack_delay_exponent, .field = "ack_delay_exponent" },
    .{ .id = .max_ack_delay, .field = "max_ack_delay_ms" },
    .{ .id = .active_connection_id_limit, .field = "active_connection_id_limit" },
    .{ .id = .max_datagram_frame_size, .field = "max_datagram_frame_size" },
};

/// Whether an integer value is within 18.2's bounds.
fn integerValid(id: Id, v: u64) bool {
    return switch (id) {
        .max_udp_payload_size => v >= udp_payload_size_min,
        .initial_max_streams_bidi, .initial_max_streams_uni => v <= streams_max,
        .ack_delay_exponent => v <= ack_delay_exponent_max,
        .max_ack_delay => v < max_ack_delay_ms_limit,
        .active_connection_id_limit => v >= active_connection_id_limit_min,
        else => true,
    };
}

/// Encodes the server's parameters: the connection IDs it must send (original destination
/// and initial source, retry source after a Retry), the reset token if set, and every
/// other value that differs from its default. Returns the length, or error.NoSpace.
pub fn encodeServer(out: []u8, p: *const Params) error{NoSpace}!usize {
    assert(p.original_destination_connection_id != null and p.initial_source_connection_id != null);
    var w: varint.Writer = .{ .buf = out };
    try writeBytes(&w, .original_destination_connection_id, p.original_destination_connection_id.?.slice());
    if (p.stateless_reset_token) |t| try writeBytes(&w, .stateless_reset_token, &t);
    const defaults: Params = .{};
    inline for (integer_fields) |f| {
        const v = @field(p, f.field);
        assert(integerValid(f.id, v));
        if (v != @field(defaults, f.field)) {
            try w.varint(@intFromEnum(f.id));
            try w.varint(varint.len(v));
            try w.varint(v);
        }
    }
    if (p.disable_active_migration) try writeBytes(&w, .disable_active_migration, "");
    try writeBytes(&w, .initial_source_connection_id, p.initial_source_connection_id.?.slice());
    if (p.retry_source_connection_id) |c| try writeBytes(&w, .retry_source_connection_id, c.slice());
    return w.pos;
}

fn writeBytes(w: *varint.Writer, id: Id, value: []const u8) error{NoSpace}!void {
    try w.varint(@intFromEnum(id));
    try w.varint(value.len);
    try w.bytes(value);
}

/// Any violation of RFC 9000 18.2 in the client's parameters: the connection closes with
/// TRANSPORT_PARAMETER_ERROR.
pub const DecodeError = error{TransportParameter};

/// Decodes the client's parameters: truncation, a parameter twice, a value out of its
/// bounds or of the wrong length, a parameter only a server sends, or no
/// initial_source_connection_id (RFC 9000 7.3) are refused; unknown ids (GREASE among them)
/// are skipped.
pub fn decodeClient(bytes: []const u8) DecodeError!Params {
    var p: Params = .{};
    var seen = std.StaticBitSet(@intFromEnum(Id.max_datagram_frame_size) + 1).initEmpty();
    var r: varint.Reader = .{ .bytes = bytes };
    while (!r.done()) {
        const id_number = r.varint() catch return error.TransportParameter;
        const value = r.take(r.varint() catch return error.TransportParameter) catch return error.TransportParameter;
        if (!known(id_number)) continue;
        if (seen.isSet(@intCast(id_number))) return error.TransportParameter;
        seen.set(@intCast(id_number));
        try decodeOne(&p, @enumFromInt(id_number), value);
    }
    if (p.initial_source_connection_id == null) return error.TransportParameter;
    return p;
}

fn decodeOne(p: *Params, id: Id, value: []const u8) DecodeError!void {
    switch (id) {
        // Only a server sends these (RFC 9000 18.2).
        .original_destination_connection_id, .stateless_reset_token, .preferred_address, .retry_source_connection_id => return error.TransportParameter,
        .initial_source_connection_id => {
            if (value.len > packet.cid_len_max) return error.TransportParameter;
            p.initial_source_connection_id = Cid.init(value);
        },
        .disable_active_migration => {
            if (value.len != 0) return error.TransportParameter;
            p.disable_active_migration = true;
        },
        _ => unreachable, // not `known`: skipped by the caller
        else => inline for (integer_fields) |f| {
            if (f.id == id) {
                const d = varint.decode(value) catch return error.TransportParameter;
                if (d.len != value.len or !integerValid(id, d.value)) return error.TransportParameter;
                @field(p, f.field) = d.value;
                return;
            }
        } else unreachable,
    }
}

const testing = std.testing;

fn param(w: *varint.Writer, id: u64, value: []const u8) !void {
    try w.varint(id);
    try w.varint(value.len);
    try w.bytes(value);
}

test "RFC 9001 A.2: the client's parameters in its ClientHello decode" {
    // The quic_transport_parameters extension's body from the A.2 ClientHello.
    var raw: [50]u8 = undefined;
    const bytes = try std.fmt.hexToBytes(&raw, "0408ffffffffffffffff05048000ffff07048000ffff0801100104800075300901100f088394c8f03e51570806048000ffff");
    const p = try decodeClient(bytes);
    try testing.expectEqual(@as(u64, 0x3fffffffffffffff), p.initial_max_data);
    try testing.expectEqual(@as(u64, 0xffff), p.initial_max_stream_data_bidi_local);
    try testing.expectEqual(@as(u64, 0xffff), p.initial_max_stream_data_uni);
    try testing.expectEqual(@as(u64, 0x10), p.initial_max_streams_bidi);
    try testing.expectEqual(@as(u64, 30000), p.max_idle_timeout_ms);
    try testing.expectEqual(@as(u64, 0x10), p.initial_max_streams_uni);
    try testing.expectEqualSlices(u8, &.{ 0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08 }, p.initial_source_connection_id.?.slice());
    try testing.expectEqual(@as(u64, 0xffff), p.initial_max_stream_data_bidi_remote);
    try testing.expectEqual(@as(u64, 3), p.ack_delay_exponent); // absent: the default
}

test "the server's parameters encode, and decode back (server-only ones aside)" {
    var p: Params = .{
        .original_destination_connection_id = Cid.init("odcid"),
        .initial_source_connection_id = Cid.init("iscid123"),
        .retry_source_connection_id = Cid.init("rscid"),
        .stateless_reset_token = [_]u8{9} ** 16,
        .max_idle_timeout_ms = 30_000,
        .max_udp_payload_size = 1452,
        .initial_max_data = 1 << 20,
        .initial_max_stream_data_bidi_local = 1 << 18,
        .initial_max_stream_data_bidi_remote = 1 << 18,
        .initial_max_stream_data_uni = 1 << 16,
        .initial_max_streams_bidi = 100,
        .initial_max_streams_uni = 3,
        .ack_delay_exponent = 3,
        .max_ack_delay_ms = 20,
        .disable_active_migration = true,
        .active_connection_id_limit = 4,
        .max_datagram_frame_size = 1200,
    };
    var buf: [256]u8 = undefined;
    const n = try encodeServer(&buf, &p);
    try testing.expectError(error.NoSpace, encodeServer(buf[0 .. n - 1], &p));
    // A client may not send the server's own: refused as they are.
    try testing.expectError(error.TransportParameter, decodeClient(buf[0..n]));
    // Walk what was written: each known id once, in order.
    var r: varint.Reader = .{ .bytes = buf[0..n] };
    var ids: [20]u64 = undefined;
    var count: usize = 0;
    while (!r.done()) : (count += 1) {
        ids[count] = try r.varint();
        _ = try r.take(try r.varint());
    }
    try testing.expectEqualSlices(u64, &.{ 0x00, 0x02, 0x01, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0b, 0x0e, 0x20, 0x0c, 0x0f, 0x10 }, ids[0..count]);
    // Without the server-only parameters the rest reads back equal.
    p.retry_source_connection_id = null;
    p.stateless_reset_token = null;
    const m = try encodeServer(&buf, &p);
    const odcid_len = 2 + 5;
    var back = try decodeClient(buf[odcid_len..m]);
    back.original_destination_connection_id = p.original_destination_connection_id;
    try testing.expectEqualDeep(p, back);
}

test "client parameters: duplicates, bounds at their edges, lengths, GREASE" {
    var buf: [128]u8 = undefined;
    const Case = struct { id: u64, value: []const u8, ok: bool };
    const cases = [_]Case{
        .{ .id = 0x03, .value = &.{ 0x44, 0xaf }, .ok = false }, // 1199
        .{ .id = 0x03, .value = &.{ 0x44, 0xb0 }, .ok = true }, // 1200
        .{ .id = 0x0a, .value = &.{20}, .ok = true },
        .{ .id = 0x0a, .value = &.{21}, .ok = false },
        .{ .id = 0x0b, .value = &.{ 0x7f, 0xff }, .ok = true }, // 2^14 - 1
        .{ .id = 0x0b, .value = &.{ 0x80, 0, 0x40, 0 }, .ok = false }, // 2^14
        .{ .id = 0x0e, .value = &.{2}, .ok = true },
        .{ .id = 0x0e, .value = &.{1}, .ok = false },
        .{ .id = 0x08, .value = &.{ 0xd0, 0, 0, 0, 0, 0, 0, 0 }, .ok = true }, // 2^60
        .{ .id = 0x09, .value = &.{ 0xd0, 0, 0, 0, 0, 0, 0, 1 }, .ok = false },
        .{ .id = 0x04, .value = &.{ 5, 0 }, .ok = false }, // a varint and a stray byte
        .{ .id = 0x04, .value = &.{}, .ok = false },
        .{ .id = 0x0c, .value = &.{0}, .ok = false },
        .{ .id = 0x0c, .value = &.{}, .ok = true },
        .{ .id = 0x0f, .value = &([_]u8{1} ** 21), .ok = false },
        .{ .id = 0x0d, .value = &([_]u8{0} ** 41), .ok = false }, // preferred_address
        .{ .id = 31 * 5 + 27, .value = "grease", .ok = true },
        .{ .id = 0x4000, .value = "", .ok = true },
        // RFC 9221's max_datagram_frame_size: any varint, 0 and 2^62 - 1 included.
        .{ .id = 0x20, .value = &.{0}, .ok = true },
        .{ .id = 0x20, .value = &([_]u8{0xff} ** 8), .ok = true },
        .{ .id = 0x20, .value = &.{ 0x44, 0xb0, 0 }, .ok = false },
        .{ .id = 0x1f, .value = "", .ok = true }, // between the two: unknown, skipped
    };
    for (cases) |c| {
        var w: varint.Writer = .{ .buf = &buf };
        try param(&w, 0x0f, "c");
        try param(&w, c.id, c.value);
        if (c.ok) {
            _ = try decodeClient(w.written());
            try param(&w, c.id, c.value); // twice: refused unless unknown
            const twice = decodeClient(w.written());
            if (!known(c.id)) _ = try twice else try testing.expectError(error.TransportParameter, twice);
        } else try testing.expectError(error.TransportParameter, decodeClient(w.written()));
    }
    // No initial_source_connection_id; a truncated value; an empty list.
    try testing.expectError(error.TransportParameter, decodeClient(&.{ 0x01, 0x01, 0x05 }));
    try testing.expectError(error.TransportParameter, decodeClient(&.{ 0x0f, 0x02, 0x05 }));
    try testing.expectError(error.TransportParameter, decodeClient(&.{}));
    try testing.expectEqual(@as(usize, 0), (try decodeClient(&.{ 0x0f, 0x00 })).initial_source_connection_id.?.len);
}
