//! HTTP/3's wire format (RFC 9114 6-8): QUIC variable-length integers, frame headers,
//! the frame and unidirectional stream types, SETTINGS, the error codes of RFC 9114 8.1
//! and RFC 9204 6, which frame may come on which stream, and `FrameReader`: one QUIC
//! stream's bytes, in order and split anywhere, read into frames. Sans-IO: it depends on
//! no QUIC file; the session hands it a stream's bytes and writes what these functions
//! produce onto streams.
//!
//! Frame size limits (documented choice): a frame whose length contradicts its format
//! (GOAWAY, CANCEL_PUSH or MAX_PUSH_ID not exactly one varint; a truncated frame at the
//! stream's end) is H3_FRAME_ERROR, as RFC 9114 7.1 says. A well-formed length past what
//! we agree to hold (a HEADERS or PUSH_PROMISE payload over the gather buffer, a SETTINGS
//! payload over `settings_bytes_max`) is H3_EXCESSIVE_LOAD (RFC 9114 10.5): nothing is
//! malformed, the peer asks for more memory than we give. DATA and unknown frames are
//! never held, so their length is not limited here (DATA's is the session's flow control).
const std = @import("std");

// ---------------------------------------------------------------------------------
// QUIC variable-length integers (RFC 9000 16): a local helper, no QUIC file needed.

pub const varint = struct {
    pub const value_max: u64 = (1 << 62) - 1;

    /// Bytes the encoding starting with `first` takes: 1, 2, 4 or 8.
    pub fn lenFromFirst(first: u8) usize {
        return @as(usize, 1) << @intCast(first >> 6);
    }

    /// Bytes `v` takes in its shortest encoding.
    pub fn len(v: u64) usize {
        std.debug.assert(v <= value_max);
        if (v < 1 << 6) return 1;
        if (v < 1 << 14) return 2;
        if (v < 1 << 30) return 4;
        return 8;
    }

    /// Reads a varint at `pos.*`; null when the input ends inside it (`pos.*` unmoved).
    pub fn read(bytes: []const u8, pos: *usize) ?u64 {
        if (pos.* >= bytes.len) return null;
        const n = lenFromFirst(bytes[pos.*]);
        if (bytes.len - pos.* < n) return null;
        var v: u64 = bytes[pos.*] & 0x3f;
        for (bytes[pos.* + 1 ..][0 .. n - 1]) |b| v = (v << 8) | b;
        pos.* += n;
        return v;
    }

    /// Writes `v` at `buf[pos..]` in its shortest encoding; returns the position after it.
    pub fn write(buf: []u8, pos: usize, v: u64) error{NoSpace}!usize {
        const n = len(v);
        if (buf.len < pos or buf.len - pos < n) return error.NoSpace;
        var rest = v;
        var i = n;
        while (i > 0) {
            i -= 1;
            buf[pos + i] = @truncate(rest);
            rest >>= 8;
        }
        buf[pos] |= @as(u8, @intCast(std.math.log2_int(usize, n))) << 6;
        return pos + n;
    }
};

// ---------------------------------------------------------------------------------
// Error codes (RFC 9114 8.1, RFC 9204 6)

pub const ErrorCode = enum(u64) {
    no_error = 0x100,
    general_protocol_error = 0x101,
    internal_error = 0x102,
    stream_creation_error = 0x103,
    closed_critical_stream = 0x104,
    frame_unexpected = 0x105,
    frame_error = 0x106,
    excessive_load = 0x107,
    id_error = 0x108,
    settings_error = 0x109,
    missing_settings = 0x10a,
    request_rejected = 0x10b,
    request_cancelled = 0x10c,
    request_incomplete = 0x10d,
    message_error = 0x10e,
    connect_error = 0x10f,
    version_fallback = 0x110,
    qpack_decompression_failed = 0x200,
    qpack_encoder_stream_error = 0x201,
    qpack_decoder_stream_error = 0x202,
    /// RFC 9114 8.1: unknown codes (including the reserved 0x1f * N + 0x21) mean no_error.
    _,
};

/// The errors this file's readers return, one per wire code (`errorCode`).
pub const Error = error{ FrameUnexpected, FrameError, ExcessiveLoad, SettingsError, MissingSettings, StreamCreationError, ClosedCriticalStream };

pub fn errorCode(err: Error) ErrorCode {
    return switch (err) {
        error.FrameUnexpected => .frame_unexpected,
        error.FrameError => .frame_error,
        error.ExcessiveLoad => .excessive_load,
        error.SettingsError => .settings_error,
        error.MissingSettings => .missing_settings,
        error.StreamCreationError => .stream_creation_error,
        error.ClosedCriticalStream => .closed_critical_stream,
    };
}

// ---------------------------------------------------------------------------------
// Frame and stream types

pub const FrameType = enum(u64) {
    data = 0x00,
    headers = 0x01,
    cancel_push = 0x03,
    settings = 0x04,
    push_promise = 0x05,
    goaway = 0x07,
    max_push_id = 0x0d,
    _,
};

/// RFC 9114 7.2.8: 0x1f * N + 0x21, sent to exercise the rule that unknown types are
/// ignored. The same formula reserves stream types, settings and error codes.
pub fn isReserved(value: u64) bool {
    return value >= 0x21 and (value - 0x21) % 0x1f == 0;
}

/// RFC 9114 7.2.8 / 11.2.1: HTTP/2's PRIORITY, PING, WINDOW_UPDATE and CONTINUATION
/// have no HTTP/3 frame; receiving one is H3_FRAME_UNEXPECTED.
pub fn isHttp2Only(frame_type: u64) bool {
    return switch (frame_type) {
        0x02, 0x06, 0x08, 0x09 => true,
        else => false,
    };
}

/// A unidirectional stream's type (RFC 9114 6.2, RFC 9204 4.2): its first varint.
pub const StreamType = enum {
    control,
    push,
    qpack_encoder,
    qpack_decoder,
    /// Reserved or unknown: the stream is read and ignored (RFC 9114 6.2).
    unknown,

    pub fn fromWire(value: u64) StreamType {
        return switch (value) {
            0x00 => .control,
            0x01 => .push,
            0x02 => .qpack_encoder,
            0x03 => .qpack_decoder,
            else => .unknown,
        };
    }

    pub fn wire(t: StreamType) u64 {
        return switch (t) {
            .control => 0x00,
            .push => 0x01,
            .qpack_encoder => 0x02,
            .qpack_decoder => 0x03,
            .unknown => unreachable,
        };
    }
};

// ---------------------------------------------------------------------------------
// Which frame on which stream (RFC 9114 7.2, Table 1)

/// The streams frames travel on.
pub const StreamKind = enum { request, control, push };
/// Which end reads: some frames go one way only (PUSH_PROMISE to clients, MAX_PUSH_ID
/// to servers).
pub const Receiver = enum { server, client };

const Allowed = enum { never, always, to_client, to_server };

/// Rows: the frame types this file knows; columns: request, control, push.
const frame_table = [_]struct { FrameType, [3]Allowed }{
    .{ .data, .{ .always, .never, .always } },
    .{ .headers, .{ .always, .never, .always } },
    .{ .cancel_push, .{ .never, .always, .never } },
    .{ .settings, .{ .never, .always, .never } },
    .{ .push_promise, .{ .to_client, .never, .never } },
    .{ .goaway, .{ .never, .always, .never } },
    .{ .max_push_id, .{ .never, .to_server, .never } },
};

/// Whether a known frame type may arrive on `kind` at `receiver` (the table alone; the
/// order rules are `Sequence`'s). Unknown and reserved types are always allowed (and
/// skipped); HTTP/2's are never.
pub fn frameAllowed(kind: StreamKind, receiver: Receiver, frame_type: u64) bool {
    if (isHttp2Only(frame_type)) return false;
    for (frame_table) |row| {
        if (@intFromEnum(row[0]) != frame_type) continue;
        return switch (row[1][@intFromEnum(kind)]) {
            .never => false,
            .always => true,
            .to_client => receiver == .client,
            .to_server => receiver == .server,
        };
    }
    return true;
}

/// The order frames must come in on one stream, past the table: the control stream
/// starts with SETTINGS, and has one; a message is HEADERS, DATA*, optional trailing
/// HEADERS, then nothing (RFC 9114 4.1, 6.2.1, 7.2.4).
pub const Sequence = struct {
    kind: StreamKind,
    receiver: Receiver,
    frames_seen: u64 = 0,
    phase: enum { head, body, trailers } = .head,

    pub const Action = enum { process, skip };

    pub fn check(self: *Sequence, frame_type: u64) Error!Action {
        defer self.frames_seen += 1;
        const first = self.frames_seen == 0;
        if (self.kind == .control) {
            if (first and frame_type != @intFromEnum(FrameType.settings)) return error.MissingSettings;
            if (!first and frame_type == @intFromEnum(FrameType.settings)) return error.FrameUnexpected;
        }
        if (!frameAllowed(self.kind, self.receiver, frame_type)) return error.FrameUnexpected;
        const known = for (frame_table) |row| {
            if (@intFromEnum(row[0]) == frame_type) break true;
        } else false;
        if (!known) return .skip;
        if (self.kind != .control) try self.message(@enumFromInt(frame_type));
        return .process;
    }

    fn message(self: *Sequence, frame_type: FrameType) Error!void {
        switch (frame_type) {
            .headers => self.phase = switch (self.phase) {
                .head => .body,
                .body => .trailers,
                .trailers => return error.FrameUnexpected,
            },
            .data => if (self.phase != .body) return error.FrameUnexpected,
            // PUSH_PROMISE may come anywhere on a response stream (RFC 9114 4.1).
            else => {},
        }
    }
};

// ---------------------------------------------------------------------------------
// SETTINGS (RFC 9114 7.2.4, RFC 9204 5)

pub const setting_qpack_max_table_capacity: u64 = 0x01;
pub const setting_max_field_section_size: u64 = 0x06;
pub const setting_qpack_blocked_streams: u64 = 0x07;
/// RFC 9220 (extended CONNECT, for WebSocket over HTTP/3).
pub const setting_enable_connect_protocol: u64 = 0x08;
/// RFC 9297.
pub const setting_h3_datagram: u64 = 0x33;

/// The most SETTINGS payload bytes we hold; also bounds the pairs a duplicate check scans.
pub const settings_bytes_max = 256;

pub const Settings = struct {
    qpack_max_table_capacity: u64 = 0,
    /// Unlimited unless sent (RFC 9114 7.2.4.1).
    max_field_section_size: u64 = unlimited_field_section,
    qpack_blocked_streams: u64 = 0,
    enable_connect_protocol: bool = false,
    h3_datagram: bool = false,

    /// Parses a SETTINGS payload with every check: a truncated pair is H3_FRAME_ERROR;
    /// a duplicate identifier, one of HTTP/2's (0x00, 0x02-0x05) or a boolean setting
    /// above 1 is H3_SETTINGS_ERROR; unknown identifiers are ignored.
    pub const unlimited_field_section: u64 = varint.value_max;

    pub fn parse(payload: []const u8) Error!Settings {
        if (payload.len > settings_bytes_max) return error.ExcessiveLoad;
        var s = Settings{};
        var pos: usize = 0;
        while (pos < payload.len) {
            const pair_start = pos;
            const id = varint.read(payload, &pos) orelse return error.FrameError;
            const value = varint.read(payload, &pos) orelse return error.FrameError;
            var seen: usize = 0;
            while (seen < pair_start) {
                const earlier = varint.read(payload, &seen).?;
                _ = varint.read(payload, &seen).?;
                if (earlier == id) return error.SettingsError;
            }
            try s.apply(id, value);
        }
        return s;
    }

    fn apply(s: *Settings, id: u64, value: u64) Error!void {
        switch (id) {
            0x00, 0x02, 0x03, 0x04, 0x05 => return error.SettingsError,
            setting_qpack_max_table_capacity => s.qpack_max_table_capacity = value,
            setting_max_field_section_size => s.max_field_section_size = value,
            setting_qpack_blocked_streams => s.qpack_blocked_streams = value,
            setting_enable_connect_protocol => s.enable_connect_protocol = try boolean(value),
            setting_h3_datagram => s.h3_datagram = try boolean(value),
            else => {},
        }
    }

    fn boolean(value: u64) Error!bool {
        if (value > 1) return error.SettingsError;
        return value == 1;
    }

    /// Writes a whole SETTINGS frame: the QPACK capacity, blocked streams and the field
    /// section size always (explicit, so the peer need not know defaults), the booleans
    /// when set. Returns the bytes written.
    pub fn encode(s: Settings, buf: []u8) error{NoSpace}!usize {
        var payload: [64]u8 = undefined;
        var n: usize = 0;
        n = try pair(&payload, n, setting_qpack_max_table_capacity, s.qpack_max_table_capacity);
        n = try pair(&payload, n, setting_qpack_blocked_streams, s.qpack_blocked_streams);
        n = try pair(&payload, n, setting_max_field_section_size, s.max_field_section_size);
        if (s.enable_connect_protocol) n = try pair(&payload, n, setting_enable_connect_protocol, 1);
        if (s.h3_datagram) n = try pair(&payload, n, setting_h3_datagram, 1);
        const p = try writeFrameHeader(buf, 0, .settings, n);
        if (buf.len - p < n) return error.NoSpace;
        @memcpy(buf[p..][0..n], payload[0..n]);
        return p + n;
    }

    fn pair(buf: []u8, pos: usize, id: u64, value: u64) error{NoSpace}!usize {
        return varint.write(buf, try varint.write(buf, pos, id), value);
    }
};

// ---------------------------------------------------------------------------------
// Writers

/// A frame header (type, length) at `buf[pos..]`; returns the position after it.
pub fn writeFrameHeader(buf: []u8, pos: usize, frame_type: FrameType, payload_len: u64) error{NoSpace}!usize {
    return varint.write(buf, try varint.write(buf, pos, @intFromEnum(frame_type)), payload_len);
}

/// A frame whose payload is one varint: GOAWAY, CANCEL_PUSH, MAX_PUSH_ID.
pub fn writeIdFrame(buf: []u8, frame_type: FrameType, id: u64) error{NoSpace}!usize {
    std.debug.assert(frame_type == .goaway or frame_type == .cancel_push or frame_type == .max_push_id);
    return varint.write(buf, try writeFrameHeader(buf, 0, frame_type, varint.len(id)), id);
}

/// The first bytes of a unidirectional stream we open.
pub fn writeStreamType(buf: []u8, stream_type: StreamType) error{NoSpace}!usize {
    return varint.write(buf, 0, stream_type.wire());
}

test {
    _ = @import("frame_reader.zig");
    _ = @import("frames_tests.zig");
}
