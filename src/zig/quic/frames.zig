//! QUIC v1 frames (RFC 9000 19): a parser into a tagged union that slices the packet (no
//! copies, no allocation), an iterator over a packet's frames that checks which frames its
//! packet type may carry (12.4, Table 3), the transport error codes (20.1), and writers for
//! every frame a server sends, each returning error.NoSpace rather than overflowing (and
//! writing nothing then).
//!
//! Limits: an ACK frame's ranges are walked at most `ack_ranges_max` times (a hostile ACK
//! may claim 2^62 of them); more is refused as FRAME_ENCODING_ERROR, so a frame costs
//! bounded work whatever it claims. Every length is checked against the bytes left.
const std = @import("std");
const assert = std.debug.assert;
const varint = @import("varint.zig");
const packet = @import("packet.zig");

/// The most ACK ranges (after the first) a parsed ACK frame may carry. The server's own
/// ACK tracking keeps far fewer; a peer's ACK with more is refused rather than walked.
pub const ack_ranges_max = 256;
/// MAX_STREAMS and STREAMS_BLOCKED may not exceed 2^60 (RFC 9000 19.11, 19.14).
pub const streams_max: u64 = 1 << 60;
/// A stream's or the crypto stream's bytes end at or before 2^62 - 1 (RFC 9000 19.6, 19.8).
pub const offset_max: u64 = varint.max;
pub const stateless_reset_token_len = 16;
pub const path_data_len = 8;

/// Transport error codes (RFC 9000 20.1); 0x0100-0x01ff carry a TLS alert (`crypto`).
pub const TransportError = enum(u64) {
    no_error = 0x00,
    internal_error = 0x01,
    connection_refused = 0x02,
    flow_control_error = 0x03,
    stream_limit_error = 0x04,
    stream_state_error = 0x05,
    final_size_error = 0x06,
    frame_encoding_error = 0x07,
    transport_parameter_error = 0x08,
    connection_id_limit_error = 0x09,
    protocol_violation = 0x0a,
    invalid_token = 0x0b,
    application_error = 0x0c,
    crypto_buffer_exceeded = 0x0d,
    key_update_error = 0x0e,
    aead_limit_reached = 0x0f,
    no_viable_path = 0x10,
    _,

    /// CRYPTO_ERROR for a TLS alert (RFC 9001 4.8).
    pub fn crypto(alert: u8) TransportError {
        return @enumFromInt(0x0100 + @as(u64, alert));
    }
};

/// Frame type numbers (RFC 9000 Table 3). STREAM is 0x08-0x0f: the low bits are flags.
pub const Type = enum(u64) {
    padding = 0x00,
    ping = 0x01,
    ack = 0x02,
    ack_ecn = 0x03,
    reset_stream = 0x04,
    stop_sending = 0x05,
    crypto = 0x06,
    new_token = 0x07,
    stream = 0x08,
    max_data = 0x10,
    max_stream_data = 0x11,
    max_streams_bidi = 0x12,
    max_streams_uni = 0x13,
    data_blocked = 0x14,
    stream_data_blocked = 0x15,
    streams_blocked_bidi = 0x16,
    streams_blocked_uni = 0x17,
    new_connection_id = 0x18,
    retire_connection_id = 0x19,
    path_challenge = 0x1a,
    path_response = 0x1b,
    connection_close = 0x1c,
    connection_close_app = 0x1d,
    handshake_done = 0x1e,
    /// RFC 9221: DATAGRAM to the packet's end, and with a length.
    datagram = 0x30,
    datagram_len = 0x31,
    _,

    /// The type of a type number on the wire (the 8 STREAM numbers are one type).
    pub fn of(number: u64) Type {
        return if (number >= 0x08 and number <= 0x0f) .stream else @enumFromInt(number);
    }
};

const stream_off_bit: u64 = 0x04;
const stream_len_bit: u64 = 0x02;
const stream_fin_bit: u64 = 0x01;

pub const AckRange = struct { smallest: u64, largest: u64 };
pub const Ecn = struct { ect0: u64, ect1: u64, ce: u64 };

/// An ACK frame, its ranges left in the packet and read on demand by `ranges()`; the parser
/// has already walked and checked them (so the iterator cannot fail).
pub const Ack = struct {
    largest: u64,
    /// In units of 2^ack_delay_exponent microseconds (the peer's transport parameter).
    ack_delay: u64,
    first_range: u64,
    range_count: u64,
    /// The Gap / ACK Range Length pairs, as sent.
    range_bytes: []const u8,
    ecn: ?Ecn = null,

    pub fn ranges(a: *const Ack) AckRangeIterator {
        return .{ .reader = .{ .bytes = a.range_bytes }, .left = a.range_count, .next_range = .{ .smallest = a.largest - a.first_range, .largest = a.largest }, .first = true };
    }
};

/// The acknowledged ranges of an ACK frame, largest first.
pub const AckRangeIterator = struct {
    reader: varint.Reader,
    left: u64,
    next_range: AckRange,
    first: bool,

    pub fn next(it: *AckRangeIterator) ?AckRange {
        if (it.first) {
            it.first = false;
            return it.next_range;
        }
        if (it.left == 0) return null;
        it.left -= 1;
        const r = stepAckRange(&it.reader, it.next_range.smallest) catch unreachable; // checked by the parser
        it.next_range = r;
        return r;
    }
};

/// Reads one Gap / ACK Range Length pair below a range starting at `previous_smallest`
/// (RFC 9000 19.3.1): gap and length must not take the numbers below 0.
fn stepAckRange(r: *varint.Reader, previous_smallest: u64) FrameError!AckRange {
    const gap = r.varint() catch return error.FrameEncoding;
    const length = r.varint() catch return error.FrameEncoding;
    if (gap + 2 > previous_smallest) return error.FrameEncoding;
    const largest = previous_smallest - gap - 2;
    if (length > largest) return error.FrameEncoding;
    return .{ .smallest = largest - length, .largest = largest };
}

pub const Frame = union(enum) {
    /// A run of PADDING bytes, counted.
    padding: usize,
    ping,
    ack: Ack,
    reset_stream: struct { stream_id: u64, error_code: u64, final_size: u64 },
    stop_sending: struct { stream_id: u64, error_code: u64 },
    crypto: struct { offset: u64, data: []const u8 },
    new_token: []const u8,
    stream: struct { stream_id: u64, offset: u64, data: []const u8, fin: bool },
    max_data: u64,
    max_stream_data: struct { stream_id: u64, max: u64 },
    max_streams: struct { bidi: bool, max: u64 },
    data_blocked: u64,
    stream_data_blocked: struct { stream_id: u64, limit: u64 },
    streams_blocked: struct { bidi: bool, limit: u64 },
    new_connection_id: struct { seq: u64, retire_prior_to: u64, cid: []const u8, reset_token: *const [stateless_reset_token_len]u8 },
    retire_connection_id: u64,
    path_challenge: *const [path_data_len]u8,
    path_response: *const [path_data_len]u8,
    /// `application` for type 0x1d (then `frame_type` is 0).
    connection_close: struct { application: bool, error_code: u64, frame_type: u64, reason: []const u8 },
    handshake_done,
    /// RFC 9221: an unreliable datagram's bytes, and the frame's size on the wire (type and
    /// length included), which the receiver checks against its max_datagram_frame_size.
    datagram: struct { data: []const u8, frame_len: usize },
};

pub const FrameError = error{
    /// Truncated, malformed or out of range: FRAME_ENCODING_ERROR.
    FrameEncoding,
    /// A frame type not in RFC 9000 (and no extension spoken): FRAME_ENCODING_ERROR (12.4).
    UnknownFrameType,
    /// A frame its packet type may not carry, a frame only a server sends arriving at one,
    /// or a frame type not in its shortest encoding: PROTOCOL_VIOLATION (12.4).
    ProtocolViolation,
};

/// The transport error a parse error closes the connection with.
pub fn transportError(err: FrameError) TransportError {
    return switch (err) {
        error.FrameEncoding, error.UnknownFrameType => .frame_encoding_error,
        error.ProtocolViolation => .protocol_violation,
    };
}

/// Reads one frame at the start of `r`'s bytes. `type_number` has been read.
fn parseBody(r: *varint.Reader, type_number: u64) FrameError!Frame {
    return parseBodyOrTruncated(r, type_number) catch |err| switch (err) {
        error.Truncated => error.FrameEncoding,
        else => |e| e,
    };
}

fn parseBodyOrTruncated(r: *varint.Reader, type_number: u64) (FrameError || varint.Error)!Frame {
    switch (Type.of(type_number)) {
        .padding => {
            var n: usize = 1;
            while (r.pos < r.bytes.len and r.bytes[r.pos] == 0) : (r.pos += 1) n += 1;
            return .{ .padding = n };
        },
        .ping => return .ping,
        .ack, .ack_ecn => return .{ .ack = try parseAck(r, type_number == @intFromEnum(Type.ack_ecn)) },
        .reset_stream => return .{ .reset_stream = .{ .stream_id = try r.varint(), .error_code = try r.varint(), .final_size = try r.varint() } },
        .stop_sending => return .{ .stop_sending = .{ .stream_id = try r.varint(), .error_code = try r.varint() } },
        .crypto => {
            const offset = try r.varint();
            const data = try r.take(try r.varint());
            if (data.len > offset_max - offset) return error.FrameEncoding;
            return .{ .crypto = .{ .offset = offset, .data = data } };
        },
        .new_token => {
            const token = try r.take(try r.varint());
            if (token.len == 0) return error.FrameEncoding; // RFC 9000 19.7
            return .{ .new_token = token };
        },
        .stream => return parseStream(r, type_number),
        .max_data => return .{ .max_data = try r.varint() },
        .max_stream_data => return .{ .max_stream_data = .{ .stream_id = try r.varint(), .max = try r.varint() } },
        .max_streams_bidi, .max_streams_uni => {
            const max = try r.varint();
            if (max > streams_max) return error.FrameEncoding;
            return .{ .max_streams = .{ .bidi = type_number == @intFromEnum(Type.max_streams_bidi), .max = max } };
        },
        .data_blocked => return .{ .data_blocked = try r.varint() },
        .stream_data_blocked => return .{ .stream_data_blocked = .{ .stream_id = try r.varint(), .limit = try r.varint() } },
        .streams_blocked_bidi, .streams_blocked_uni => {
            const limit = try r.varint();
            if (limit > streams_max) return error.FrameEncoding;
            return .{ .streams_blocked = .{ .bidi = type_number == @intFromEnum(Type.streams_blocked_bidi), .limit = limit } };
        },
        .new_connection_id => return parseNewConnectionId(r),
        .retire_connection_id => return .{ .retire_connection_id = try r.varint() },
        .path_challenge => return .{ .path_challenge = (try r.take(path_data_len))[0..path_data_len] },
        .path_response => return .{ .path_response = (try r.take(path_data_len))[0..path_data_len] },
        .connection_close, .connection_close_app => {
            const application = type_number == @intFromEnum(Type.connection_close_app);
            const error_code = try r.varint();
            const frame_type = if (application) 0 else try r.varint();
            const reason = try r.take(try r.varint());
            return .{ .connection_close = .{ .application = application, .error_code = error_code, .frame_type = frame_type, .reason = reason } };
        },
        .handshake_done => return .handshake_done,
        .datagram, .datagram_len => {
            const type_len = varint.len(type_number);
            const start = r.pos;
            const data = if (type_number == @intFromEnum(Type.datagram_len))
                try r.take(try r.varint())
            else
                try r.take(r.bytes.len - r.pos);
            return .{ .datagram = .{ .data = data, .frame_len = type_len + r.pos - start } };
        },
        _ => return error.UnknownFrameType,
    }
}

fn parseAck(r: *varint.Reader, with_ecn: bool) (FrameError || varint.Error)!Ack {
    var a: Ack = .{ .largest = try r.varint(), .ack_delay = try r.varint(), .range_count = try r.varint(), .first_range = try r.varint(), .range_bytes = &.{} };
    if (a.first_range > a.largest) return error.FrameEncoding;
    if (a.range_count > ack_ranges_max) return error.FrameEncoding;
    // Walk the ranges once to find the frame's end and check every gap; bounded above.
    const start = r.pos;
    var smallest = a.largest - a.first_range;
    for (0..@intCast(a.range_count)) |_| smallest = (try stepAckRange(r, smallest)).smallest;
    a.range_bytes = r.bytes[start..r.pos];
    if (with_ecn) a.ecn = .{ .ect0 = try r.varint(), .ect1 = try r.varint(), .ce = try r.varint() };
    return a;
}

fn parseStream(r: *varint.Reader, type_number: u64) varint.Error!Frame {
    const stream_id = try r.varint();
    const offset = if (type_number & stream_off_bit != 0) try r.varint() else 0;
    // Without a Length field the data runs to the end of the packet.
    const data = if (type_number & stream_len_bit != 0) try r.take(try r.varint()) else r.take(r.rest().len) catch unreachable;
    if (data.len > offset_max - offset) return error.Truncated; // reported as FrameEncoding
    return .{ .stream = .{ .stream_id = stream_id, .offset = offset, .data = data, .fin = type_number & stream_fin_bit != 0 } };
}

fn parseNewConnectionId(r: *varint.Reader) (FrameError || varint.Error)!Frame {
    const seq = try r.varint();
    const retire_prior_to = try r.varint();
    const cid_len = try r.byte();
    if (cid_len < 1 or cid_len > packet.cid_len_max) return error.FrameEncoding;
    if (retire_prior_to > seq) return error.FrameEncoding;
    const cid = try r.take(cid_len);
    const token = try r.take(stateless_reset_token_len);
    return .{ .new_connection_id = .{ .seq = seq, .retire_prior_to = retire_prior_to, .cid = cid, .reset_token = token[0..stateless_reset_token_len] } };
}

/// The packet types a frame may travel in (RFC 9000 12.4, Table 3). `kind` is the packet's.
pub fn allowedIn(t: Type, kind: packet.Kind) bool {
    const initial_or_handshake = kind == .initial or kind == .handshake;
    return switch (t) {
        .padding, .ping, .connection_close => kind != .retry and kind != .version_negotiation and kind != .unsupported_version,
        .ack, .ack_ecn, .crypto => initial_or_handshake or kind == .one_rtt,
        .new_token, .path_response, .handshake_done => kind == .one_rtt,
        .datagram, .datagram_len => kind == .zero_rtt or kind == .one_rtt,
        .reset_stream, .stop_sending, .stream, .max_data, .max_stream_data, .max_streams_bidi, .max_streams_uni, .data_blocked, .stream_data_blocked, .streams_blocked_bidi, .streams_blocked_uni, .new_connection_id, .retire_connection_id, .path_challenge, .connection_close_app => kind == .zero_rtt or kind == .one_rtt,
        _ => false,
    };
}

/// Whether a frame of this type makes its packet ack-eliciting (RFC 9000 13.2.1): all but
/// ACK, PADDING and CONNECTION_CLOSE. Loss recovery counts packets by it.
pub fn ackEliciting(t: Type) bool {
    return switch (t) {
        .ack, .ack_ecn, .padding, .connection_close, .connection_close_app => false,
        else => true,
    };
}

/// Whether a frame of this type is a probing frame (RFC 9000 9.1): a packet of only these
/// does not move the connection to a new path.
pub fn probing(t: Type) bool {
    return switch (t) {
        .path_challenge, .path_response, .new_connection_id, .padding => true,
        else => false,
    };
}

/// The type of a parsed frame (STREAM as the one type 0x08, ACK with ECN as `.ack_ecn`).
pub fn typeOf(frame: Frame) Type {
    return switch (frame) {
        .padding => .padding,
        .ping => .ping,
        .ack => |a| if (a.ecn == null) .ack else .ack_ecn,
        .reset_stream => .reset_stream,
        .stop_sending => .stop_sending,
        .crypto => .crypto,
        .new_token => .new_token,
        .stream => .stream,
        .max_data => .max_data,
        .max_stream_data => .max_stream_data,
        .max_streams => |f| if (f.bidi) .max_streams_bidi else .max_streams_uni,
        .data_blocked => .data_blocked,
        .stream_data_blocked => .stream_data_blocked,
        .streams_blocked => |f| if (f.bidi) .streams_blocked_bidi else .streams_blocked_uni,
        .new_connection_id => .new_connection_id,
        .retire_connection_id => .retire_connection_id,
        .path_challenge => .path_challenge,
        .path_response => .path_response,
        .connection_close => |f| if (f.application) .connection_close_app else .connection_close,
        .handshake_done => .handshake_done,
        .datagram => .datagram_len,
    };
}

/// Frames only a server sends (RFC 9000 19.7, 19.20): a client's are PROTOCOL_VIOLATION.
pub fn serverOnly(t: Type) bool {
    return t == .new_token or t == .handshake_done;
}

/// Whether a type is RFC 9000's or RFC 9221's (the extension a receiver then checks was
/// negotiated).
fn known(t: Type) bool {
    const rfc9000 = @intFromEnum(t) <= @intFromEnum(Type.handshake_done);
    return rfc9000 or t == .datagram or t == .datagram_len;
}

/// Who sent the packet whose frames are read.
pub const Sender = enum { client, server };

/// The frames of one packet's payload, in order. The first error ends the walk;
/// `failed_type` then holds the frame type for CONNECTION_CLOSE.
pub const Iterator = struct {
    reader: varint.Reader,
    kind: packet.Kind,
    sender: Sender,
    failed_type: u64 = 0,
    failed: bool = false,

    pub fn init(payload: []const u8, kind: packet.Kind, sender: Sender) Iterator {
        assert(kind != .retry and kind != .version_negotiation and kind != .unsupported_version);
        return .{ .reader = .{ .bytes = payload }, .kind = kind, .sender = sender };
    }

    pub fn next(it: *Iterator) FrameError!?Frame {
        if (it.failed or it.reader.done()) return null;
        errdefer it.failed = true;
        const start = it.reader.pos;
        const type_number = it.reader.varint() catch return error.FrameEncoding;
        it.failed_type = type_number;
        // RFC 9000 12.4: a frame type in its shortest encoding only.
        if (it.reader.pos - start != varint.len(type_number)) return error.ProtocolViolation;
        const t = Type.of(type_number);
        if (!known(t)) return error.UnknownFrameType;
        if (!allowedIn(t, it.kind)) return error.ProtocolViolation;
        if (it.sender == .client and serverOnly(t)) return error.ProtocolViolation;
        return try parseBody(&it.reader, type_number);
    }
};

// ---- writers ----------------------------------------------------------------------------

/// Writes `frame` whole (STREAM and CRYPTO with offset and length; see `writeStream` and
/// `writeCrypto` to fit data into a packet's room), or nothing and error.NoSpace. ACK
/// frames are written from ranges by `writeAck`.
pub fn write(w: *varint.Writer, frame: Frame) error{NoSpace}!void {
    const start = w.pos;
    errdefer w.pos = start;
    switch (frame) {
        .padding => |n| try writePadding(w, n),
        .ping => try w.varint(@intFromEnum(Type.ping)),
        .ack => unreachable, // writeAck
        .reset_stream => |f| try varints(w, &.{ @intFromEnum(Type.reset_stream), f.stream_id, f.error_code, f.final_size }),
        .stop_sending => |f| try varints(w, &.{ @intFromEnum(Type.stop_sending), f.stream_id, f.error_code }),
        .crypto => |f| {
            try varints(w, &.{ @intFromEnum(Type.crypto), f.offset, f.data.len });
            try w.bytes(f.data);
        },
        .new_token => |token| {
            assert(token.len > 0);
            try varints(w, &.{ @intFromEnum(Type.new_token), token.len });
            try w.bytes(token);
        },
        .stream => |f| {
            var t: u64 = @intFromEnum(Type.stream) | stream_len_bit;
            if (f.offset != 0) t |= stream_off_bit;
            if (f.fin) t |= stream_fin_bit;
            try varints(w, &.{ t, f.stream_id });
            if (f.offset != 0) try w.varint(f.offset);
            try w.varint(f.data.len);
            try w.bytes(f.data);
        },
        .max_data => |v| try varints(w, &.{ @intFromEnum(Type.max_data), v }),
        .max_stream_data => |f| try varints(w, &.{ @intFromEnum(Type.max_stream_data), f.stream_id, f.max }),
        .max_streams => |f| {
            assert(f.max <= streams_max);
            try varints(w, &.{ @intFromEnum(if (f.bidi) Type.max_streams_bidi else Type.max_streams_uni), f.max });
        },
        .data_blocked => |v| try varints(w, &.{ @intFromEnum(Type.data_blocked), v }),
        .stream_data_blocked => |f| try varints(w, &.{ @intFromEnum(Type.stream_data_blocked), f.stream_id, f.limit }),
        .streams_blocked => |f| {
            assert(f.limit <= streams_max);
            try varints(w, &.{ @intFromEnum(if (f.bidi) Type.streams_blocked_bidi else Type.streams_blocked_uni), f.limit });
        },
        .new_connection_id => |f| {
            assert(f.cid.len >= 1 and f.cid.len <= packet.cid_len_max);
            assert(f.retire_prior_to <= f.seq);
            try varints(w, &.{ @intFromEnum(Type.new_connection_id), f.seq, f.retire_prior_to });
            try w.byte(@intCast(f.cid.len));
            try w.bytes(f.cid);
            try w.bytes(f.reset_token);
        },
        .retire_connection_id => |seq| try varints(w, &.{ @intFromEnum(Type.retire_connection_id), seq }),
        .path_challenge => |data| {
            try w.varint(@intFromEnum(Type.path_challenge));
            try w.bytes(data);
        },
        .path_response => |data| {
            try w.varint(@intFromEnum(Type.path_response));
            try w.bytes(data);
        },
        .connection_close => |f| {
            if (f.application) {
                try varints(w, &.{ @intFromEnum(Type.connection_close_app), f.error_code });
            } else {
                try varints(w, &.{ @intFromEnum(Type.connection_close), f.error_code, f.frame_type });
            }
            try w.varint(f.reason.len);
            try w.bytes(f.reason);
        },
        .handshake_done => try w.varint(@intFromEnum(Type.handshake_done)),
        .datagram => |f| {
            try varints(w, &.{ @intFromEnum(Type.datagram_len), f.data.len });
            try w.bytes(f.data);
        },
    }
}

/// The bytes a DATAGRAM frame with a length takes for `len` bytes of data.
pub fn datagramFrameLen(len: usize) usize {
    return varint.len(@intFromEnum(Type.datagram_len)) + varint.len(len) + len;
}

fn varints(w: *varint.Writer, values: []const u64) error{NoSpace}!void {
    for (values) |v| try w.varint(v);
}

/// `n` PADDING frames (zero bytes).
pub fn writePadding(w: *varint.Writer, n: usize) error{NoSpace}!void {
    if (w.room() < n) return error.NoSpace;
    @memset(w.buf[w.pos..][0..n], 0);
    w.pos += n;
}

/// An ACK frame for `ranges` (largest first, disjoint and not adjacent), the delay since the
/// largest arrived in microseconds scaled down by our `ack_delay_exponent` (RFC 9000 18.2),
/// with ECN counts if given. Writes all the ranges or nothing: trimming to fit is the ACK
/// tracker's choice (the oldest ranges go first).
pub fn writeAck(w: *varint.Writer, ranges: []const AckRange, ack_delay_us: u64, ack_delay_exponent: u6, ecn: ?Ecn) error{NoSpace}!void {
    assert(ranges.len > 0);
    assert(ack_delay_exponent <= 20);
    const start = w.pos;
    errdefer w.pos = start;
    const first = ranges[0];
    assert(first.smallest <= first.largest and first.largest <= packet.pn_max);
    const t: Type = if (ecn == null) .ack else .ack_ecn;
    try varints(w, &.{ @intFromEnum(t), first.largest, @min(ack_delay_us >> ack_delay_exponent, varint.max), ranges.len - 1, first.largest - first.smallest });
    var previous_smallest = first.smallest;
    for (ranges[1..]) |r| {
        assert(r.smallest <= r.largest);
        assert(r.largest + 2 <= previous_smallest); // descending, with a gap of at least one
        try varints(w, &.{ previous_smallest - r.largest - 2, r.largest - r.smallest });
        previous_smallest = r.smallest;
    }
    if (ecn) |e| try varints(w, &.{ e.ect0, e.ect1, e.ce });
}

/// Writes a STREAM frame carrying as much of `data` (at `offset`) as fits in `w`'s room;
/// returns how many bytes of `data` it took. The offset is left out when 0; the length is
/// left out when `last_in_packet` (the data then runs to the packet's end). FIN is set only
/// if all of `data` fits. error.NoSpace when not even one byte (or an empty FIN) fits.
pub fn writeStream(w: *varint.Writer, stream_id: u64, offset: u64, data: []const u8, fin: bool, last_in_packet: bool) error{NoSpace}!usize {
    assert(data.len <= offset_max - offset);
    var t: u64 = @intFromEnum(Type.stream);
    if (offset != 0) t |= stream_off_bit;
    const head = 1 + varint.len(stream_id) + (if (offset != 0) varint.len(offset) else 0);
    if (w.room() < head) return error.NoSpace;
    const n = fitData(w.room() - head, data.len, !last_in_packet) orelse return error.NoSpace;
    if (n == 0 and !(fin and data.len == 0)) return error.NoSpace;
    if (!last_in_packet) t |= stream_len_bit;
    if (fin and n == data.len) t |= stream_fin_bit;
    const start = w.pos;
    try varints(w, &.{ t, stream_id });
    if (offset != 0) try w.varint(offset);
    if (!last_in_packet) try w.varint(n);
    try w.bytes(data[0..n]);
    assert(w.pos - start <= head + varint.len(n) + n);
    return n;
}

/// Writes a CRYPTO frame with as much of `data` (at `offset`) as fits; returns how many bytes
/// it took, error.NoSpace when none fits.
pub fn writeCrypto(w: *varint.Writer, offset: u64, data: []const u8) error{NoSpace}!usize {
    assert(data.len > 0 and data.len <= offset_max - offset);
    const head = 1 + varint.len(offset);
    if (w.room() < head) return error.NoSpace;
    const n = fitData(w.room() - head, data.len, true) orelse return error.NoSpace;
    if (n == 0) return error.NoSpace;
    try varints(w, &.{ @intFromEnum(Type.crypto), offset, n });
    try w.bytes(data[0..n]);
    return n;
}

/// How many of `want` data bytes fit in `room` bytes, after a length field if `with_len`
/// (whose own size depends on the count); null if not even the length field fits.
fn fitData(room: usize, want: usize, with_len: bool) ?usize {
    if (!with_len) return @min(room, want);
    var n = @min(room, want);
    while (true) {
        const need = varint.len(n) + n;
        if (need <= room) return n;
        const over = need - room;
        if (over > n) return if (room >= 1) 0 else null; // room for an empty length field only
        n -= over; // the length field only gets shorter, so this fits
    }
}

const testing = std.testing;

fn parseOne(bytes: []const u8, kind: packet.Kind) FrameError!Frame {
    var it = Iterator.init(bytes, kind, .client);
    const f = (try it.next()).?;
    if (!it.reader.done()) return error.FrameEncoding; // one frame, all the bytes: else a test fails
    return f;
}

test "every frame written is parsed back the same, and every truncation refused" {
    const token = [_]u8{0xaa} ** stateless_reset_token_len;
    const path = [_]u8{ 1, 2, 3, 4, 5, 6, 7, 8 };
    const cases = [_]Frame{
        .ping,
        .{ .padding = 3 },
        .{ .reset_stream = .{ .stream_id = 4, .error_code = 0x10c, .final_size = 70000 } },
        .{ .stop_sending = .{ .stream_id = 8, .error_code = 1 } },
        .{ .crypto = .{ .offset = 5, .data = "hello" } },
        .{ .stream = .{ .stream_id = 0, .offset = 0, .data = "abc", .fin = true } },
        .{ .stream = .{ .stream_id = 1 << 40, .offset = 1 << 20, .data = "", .fin = false } },
        .{ .max_data = varint.max },
        .{ .max_stream_data = .{ .stream_id = 3, .max = 1 << 30 } },
        .{ .max_streams = .{ .bidi = true, .max = streams_max } },
        .{ .max_streams = .{ .bidi = false, .max = 0 } },
        .{ .data_blocked = 99 },
        .{ .stream_data_blocked = .{ .stream_id = 2, .limit = 64 } },
        .{ .streams_blocked = .{ .bidi = false, .limit = 7 } },
        .{ .new_connection_id = .{ .seq = 3, .retire_prior_to = 3, .cid = "01234567", .reset_token = &token } },
        .{ .retire_connection_id = 2 },
        .{ .path_challenge = &path },
        .{ .path_response = &path },
        .{ .connection_close = .{ .application = false, .error_code = 7, .frame_type = 0x1c, .reason = "bad" } },
        .{ .connection_close = .{ .application = true, .error_code = 0x100, .frame_type = 0, .reason = "" } },
        .{ .datagram = .{ .data = "dgram", .frame_len = 7 } },
        .{ .datagram = .{ .data = "", .frame_len = 2 } },
    };
    for (cases) |frame| {
        var buf: [64]u8 = undefined;
        var w: varint.Writer = .{ .buf = &buf };
        try write(&w, frame);
        const got = try parseOne(w.written(), .one_rtt);
        try testing.expectEqualDeep(frame, got);
        try testing.expectEqual(Type.of(w.written()[0] & 0x3f), typeOf(got));
        // Every shorter room is NoSpace with nothing written; every shorter input refused
        // (PADDING and the last STREAM bytes excepted: they are their own lengths).
        for (0..w.pos) |room| {
            var small: varint.Writer = .{ .buf = buf[0..room] };
            var scratch: [64]u8 = undefined;
            small.buf = scratch[0..room];
            try testing.expectError(error.NoSpace, write(&small, frame));
            try testing.expectEqual(@as(usize, 0), small.pos);
            if (frame == .padding or room == 0) continue;
            var it = Iterator.init(buf[0..room], .one_rtt, .client);
            try testing.expectError(error.FrameEncoding, it.next());
        }
    }
    // Server-only frames, read as a client would.
    var buf: [32]u8 = undefined;
    var w: varint.Writer = .{ .buf = &buf };
    try write(&w, .{ .new_token = "tok" });
    try write(&w, .handshake_done);
    var it = Iterator.init(w.written(), .one_rtt, .server);
    try testing.expectEqualStrings("tok", (try it.next()).?.new_token);
    try testing.expect((try it.next()).? == .handshake_done);
    try testing.expectEqual(@as(?Frame, null), try it.next());
    it = Iterator.init(w.written(), .one_rtt, .client);
    try testing.expectError(error.ProtocolViolation, it.next());
    try testing.expectEqual(@as(?Frame, null), try it.next()); // the walk ends at the error
}

test "ACK: written from ranges, read back lazily, ECN counts, delay scaling" {
    const ranges = [_]AckRange{ .{ .smallest = 95, .largest = 100 }, .{ .smallest = 90, .largest = 93 }, .{ .smallest = 0, .largest = 10 } };
    var buf: [64]u8 = undefined;
    var w: varint.Writer = .{ .buf = &buf };
    try writeAck(&w, &ranges, 8000, 3, .{ .ect0 = 1, .ect1 = 2, .ce = 3 });
    const f = try parseOne(w.written(), .handshake);
    try testing.expectEqual(@as(u64, 100), f.ack.largest);
    try testing.expectEqual(@as(u64, 1000), f.ack.ack_delay);
    try testing.expectEqual(Ecn{ .ect0 = 1, .ect1 = 2, .ce = 3 }, f.ack.ecn.?);
    var rit = f.ack.ranges();
    for (ranges) |r| try testing.expectEqual(r, rit.next().?);
    try testing.expectEqual(@as(?AckRange, null), rit.next());
    // Too little room: nothing written.
    var small: varint.Writer = .{ .buf = buf[0 .. w.pos - 1] };
    try testing.expectError(error.NoSpace, writeAck(&small, &ranges, 8000, 3, .{ .ect0 = 1, .ect1 = 2, .ce = 3 }));
    try testing.expectEqual(@as(usize, 0), small.pos);
    // A single range of one packet: 02 00 00 00 00.
    w = .{ .buf = &buf };
    try writeAck(&w, &.{.{ .smallest = 0, .largest = 0 }}, 0, 3, null);
    try testing.expectEqualSlices(u8, &.{ 2, 0, 0, 0, 0 }, w.written());
}

test "ACK: underflowing ranges, a first range past the largest, the range cap" {
    // first range 6 below largest 5.
    try testing.expectError(error.FrameEncoding, parseOne(&.{ 2, 5, 0, 0, 6 }, .one_rtt));
    // largest 10, first 2 (8..10), gap 6 -> largest 0 (8 - 6 - 2), length 1 -> below 0.
    try testing.expectError(error.FrameEncoding, parseOne(&.{ 2, 10, 0, 1, 2, 6, 1 }, .one_rtt));
    // ... and a gap that reaches below 0.
    try testing.expectError(error.FrameEncoding, parseOne(&.{ 2, 10, 0, 1, 2, 7, 0 }, .one_rtt));
    try testing.expect((try parseOne(&.{ 2, 10, 0, 1, 2, 6, 0 }, .one_rtt)) == .ack);
    // A count of 2^62-1 ranges is refused at once, whatever bytes follow.
    try testing.expectError(error.FrameEncoding, parseOne(&.{ 2, 10, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0 }, .one_rtt));
    // The cap itself: ack_ranges_max ranges pass, one more does not.
    var buf: [4 + 2 * 2 + 2 * (ack_ranges_max + 1) + 8]u8 = undefined;
    for ([_]u64{ ack_ranges_max, ack_ranges_max + 1 }) |count| {
        var w: varint.Writer = .{ .buf = &buf };
        try varints(&w, &.{ 2, 4 * (count + 1), 0, count, 0 });
        for (0..count) |_| try varints(&w, &.{ 2, 0 });
        const result = parseOne(w.written(), .one_rtt);
        if (count == ack_ranges_max) {
            var rit = (try result).ack.ranges();
            var n: usize = 0;
            while (rit.next()) |_| n += 1;
            try testing.expectEqual(@as(usize, ack_ranges_max + 1), n);
        } else try testing.expectError(error.FrameEncoding, result);
    }
}

test "STREAM: all eight type variants parse" {
    for (0x08..0x10) |t| {
        var buf: [16]u8 = undefined;
        var w: varint.Writer = .{ .buf = &buf };
        try varints(&w, &.{ t, 4 });
        if (t & stream_off_bit != 0) try w.varint(9);
        if (t & stream_len_bit != 0) try w.varint(2);
        try w.bytes("xy");
        const f = (try parseOne(w.written(), .zero_rtt)).stream;
        try testing.expectEqual(@as(u64, 4), f.stream_id);
        try testing.expectEqual(@as(u64, if (t & stream_off_bit != 0) 9 else 0), f.offset);
        try testing.expectEqualStrings("xy", f.data);
        try testing.expectEqual(t & stream_fin_bit != 0, f.fin);
    }
    // Offset plus length past 2^62 - 1.
    try testing.expectError(error.FrameEncoding, parseOne(&.{ 0x0e, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 'a' }, .one_rtt));
}

test "writeStream and writeCrypto fit the room, with the smallest encoding" {
    const data = "a" ** 100;
    var buf: [200]u8 = undefined;
    // Offset 0 and a length: type, id, len, data.
    var w: varint.Writer = .{ .buf = buf[0..10] };
    try testing.expectEqual(@as(usize, 7), try writeStream(&w, 0, 0, data, true, false));
    try testing.expectEqualSlices(u8, &.{ 0x0a, 0, 7 }, buf[0..3]);
    try testing.expectEqual(@as(usize, 10), w.pos);
    // Last in the packet: no length, fills the room.
    w = .{ .buf = buf[0..10] };
    try testing.expectEqual(@as(usize, 7), try writeStream(&w, 0, 63, data, true, true));
    try testing.expectEqual(@as(u8, 0x0c), buf[0]);
    // Everything fits: FIN set, and the frame parses back.
    w = .{ .buf = &buf };
    try testing.expectEqual(@as(usize, 100), try writeStream(&w, 4, 1, data, true, false));
    const f = (try parseOne(w.written(), .one_rtt)).stream;
    try testing.expect(f.fin and f.offset == 1 and f.data.len == 100);
    // A FIN alone, and no room at all.
    w = .{ .buf = buf[0..3] };
    try testing.expectEqual(@as(usize, 0), try writeStream(&w, 4, 0, "", true, false));
    w = .{ .buf = buf[0..2] };
    try testing.expectError(error.NoSpace, writeStream(&w, 4, 0, data, false, false));
    try testing.expectError(error.NoSpace, writeStream(&w, 4, 0, "", true, false));
    // Around a length field's growth from 1 to 2 bytes, every room is filled or one short.
    for (3..90) |room| {
        w = .{ .buf = buf[0..room] };
        const n = writeCrypto(&w, 0, data) catch |err| {
            try testing.expect(room <= 3);
            try testing.expectEqual(error.NoSpace, err);
            continue;
        };
        try testing.expect(room - w.pos <= 1);
        const c = (try parseOne(w.written(), .initial)).crypto;
        try testing.expectEqual(n, c.data.len);
    }
}

test "Table 3: which frames each packet type carries" {
    try testing.expect(allowedIn(.crypto, .initial) and !allowedIn(.crypto, .zero_rtt));
    try testing.expect(allowedIn(.ack, .handshake) and !allowedIn(.ack, .zero_rtt));
    try testing.expect(!allowedIn(.stream, .initial) and allowedIn(.stream, .zero_rtt));
    try testing.expect(allowedIn(.connection_close, .initial) and !allowedIn(.connection_close_app, .initial));
    try testing.expect(!allowedIn(.path_response, .zero_rtt) and allowedIn(.path_challenge, .zero_rtt));
    try testing.expect(!allowedIn(.handshake_done, .handshake) and !allowedIn(.new_token, .zero_rtt));
    // A STREAM frame in an Initial, a PING in one, an unknown type, a padded type number.
    try testing.expectError(error.ProtocolViolation, parseOne(&.{ 0x08, 0 }, .initial));
    try testing.expect((try parseOne(&.{0x01}, .initial)) == .ping);
    try testing.expectError(error.UnknownFrameType, parseOne(&.{0x1f}, .one_rtt));
    try testing.expectError(error.UnknownFrameType, parseOne(&.{ 0x80, 0, 0x40, 0 }, .one_rtt));
    try testing.expectError(error.ProtocolViolation, parseOne(&.{ 0x40, 0x01 }, .one_rtt));
    try testing.expectEqual(TransportError.protocol_violation, transportError(error.ProtocolViolation));
    try testing.expect(!ackEliciting(.ack) and !ackEliciting(.padding) and !ackEliciting(.connection_close_app));
    try testing.expect(ackEliciting(.ping) and ackEliciting(.stream) and ackEliciting(.handshake_done));
    try testing.expect(probing(.path_challenge) and probing(.padding) and !probing(.ping));
    try testing.expectEqual(Type.max_streams_uni, typeOf(.{ .max_streams = .{ .bidi = false, .max = 1 } }));
    try testing.expectEqual(@as(u64, 0x12a), @intFromEnum(TransportError.crypto(0x2a)));
}

test "DATAGRAM (RFC 9221): to the packet's end or with a length; 0-RTT and 1-RTT only" {
    // 0x30: the rest of the packet, whatever it holds; 0x31: its length, then other frames.
    const rest = (try parseOne(&.{ 0x30, 0x01, 0x02, 0x03 }, .one_rtt)).datagram;
    try testing.expectEqualSlices(u8, &.{ 1, 2, 3 }, rest.data);
    try testing.expectEqual(@as(usize, 4), rest.frame_len);
    try testing.expectEqual(@as(usize, 0), (try parseOne(&.{0x30}, .zero_rtt)).datagram.data.len);
    var it = Iterator.init(&.{ 0x31, 0x02, 0xaa, 0xbb, 0x01 }, .one_rtt, .client);
    const with_len = (try it.next()).?.datagram;
    try testing.expectEqualSlices(u8, &.{ 0xaa, 0xbb }, with_len.data);
    try testing.expectEqual(@as(usize, 4), with_len.frame_len);
    try testing.expect((try it.next()).? == .ping);
    // A length past the packet; a type not in its shortest form; the packet types that may
    // not carry it; the next type number is still unknown.
    try testing.expectError(error.FrameEncoding, parseOne(&.{ 0x31, 0x03, 0xaa }, .one_rtt));
    try testing.expectError(error.ProtocolViolation, parseOne(&.{ 0x40, 0x30 }, .one_rtt));
    try testing.expectError(error.ProtocolViolation, parseOne(&.{ 0x30, 0x00 }, .initial));
    try testing.expectError(error.ProtocolViolation, parseOne(&.{ 0x31, 0x00 }, .handshake));
    try testing.expectError(error.UnknownFrameType, parseOne(&.{ 0x32, 0x00 }, .one_rtt));
    try testing.expect(ackEliciting(.datagram) and ackEliciting(.datagram_len));
    try testing.expect(!probing(.datagram));
    // The writer's size is the frame's on the wire, at the varint length boundaries.
    for ([_]usize{ 0, 63, 64, 16383, 16384 }) |n| {
        var buf: [16400]u8 = undefined;
        var w: varint.Writer = .{ .buf = &buf };
        const data = [_]u8{0x5a} ** 16384;
        try write(&w, .{ .datagram = .{ .data = data[0..n], .frame_len = 0 } });
        try testing.expectEqual(datagramFrameLen(n), w.pos);
        try testing.expectEqual(w.pos, (try parseOne(w.written(), .one_rtt)).datagram.frame_len);
    }
}

test "range checks: MAX_STREAMS, STREAMS_BLOCKED, NEW_CONNECTION_ID, NEW_TOKEN, PADDING runs" {
    // 2^60 + 1 in 8 bytes.
    const over = [_]u8{ 0xd0, 0, 0, 0, 0, 0, 0, 1 };
    for ([_]u8{ 0x12, 0x13, 0x16, 0x17 }) |t| try testing.expectError(error.FrameEncoding, parseOne(&([_]u8{t} ++ over), .one_rtt));
    const token = [_]u8{0} ** 16;
    // Length 0, length 21, retire_prior_to above the sequence number.
    try testing.expectError(error.FrameEncoding, parseOne(&([_]u8{ 0x18, 1, 0, 0 } ++ token), .one_rtt));
    try testing.expectError(error.FrameEncoding, parseOne(&([_]u8{ 0x18, 1, 0, 21 } ++ [_]u8{7} ** 21 ++ token), .one_rtt));
    try testing.expectError(error.FrameEncoding, parseOne(&([_]u8{ 0x18, 1, 2, 1, 7 } ++ token), .one_rtt));
    try testing.expect((try parseOne(&([_]u8{ 0x18, 1, 0, 20 } ++ [_]u8{7} ** 20 ++ token), .one_rtt)) == .new_connection_id);
    var it = Iterator.init(&.{ 0x07, 0 }, .one_rtt, .server);
    try testing.expectError(error.FrameEncoding, it.next());
    it = Iterator.init(&.{ 0, 0, 0, 1, 0 }, .initial, .client);
    try testing.expectEqual(@as(usize, 3), (try it.next()).?.padding);
    try testing.expect((try it.next()).? == .ping);
    try testing.expectEqual(@as(usize, 1), (try it.next()).?.padding);
    try testing.expectEqual(@as(?Frame, null), try it.next());
}
