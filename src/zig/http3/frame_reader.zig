//! One QUIC stream's bytes, in order and in pieces of any size, read into HTTP/3 frames
//! (RFC 9114 7). Sans-IO and allocation-free: a HEADERS, PUSH_PROMISE or SETTINGS
//! payload is gathered into the caller's buffer (its length is the limit), a DATA
//! payload is handed out in pieces of the input without being copied, unknown and
//! reserved frames are skipped unread. Every frame header is checked against the stream
//! it comes on (`frames.Sequence`) before its payload is read. For the size limits and
//! which error they are, see `frames.zig`.
//!
//!     var r = FrameReader.initRequest(.server, &buf);
//!     while (input.len > 0) {
//!         const step = try r.next(input);
//!         input = input[step.consumed..];
//!         if (step.event) |event| handle(event);
//!     }
//!     try r.finish(); // at the stream's end
const std = @import("std");
const frames = @import("frames.zig");
const varint = frames.varint;
const Error = frames.Error;

pub const Event = union(enum) {
    /// A unidirectional stream's type, its first event. For the QPACK streams the rest
    /// is not frames: the caller hands it to the QPACK decoder and no longer calls
    /// `next`. An unknown type's bytes are read and dropped.
    stream_type: frames.StreamType,
    /// A push stream's push ID (client side only).
    push_id: u64,
    /// A whole HEADERS payload (a field section), borrowing the gather buffer until
    /// the next call.
    headers: []const u8,
    push_promise: struct { push_id: u64, section: []const u8 },
    /// A piece of a DATA payload, borrowing the input; `last` on the frame's final piece.
    data: struct { bytes: []const u8, last: bool },
    settings: frames.Settings,
    goaway: u64,
    cancel_push: u64,
    max_push_id: u64,
};

pub const Step = struct { consumed: usize, event: ?Event = null };

/// The payload of GOAWAY, CANCEL_PUSH and MAX_PUSH_ID: one varint.
pub const id_frame_bytes_max = 8;

const State = enum { stream_type, push_id, frame_header, gather, data, skip, foreign, ignored };

pub const FrameReader = struct {
    state: State,
    sequence: frames.Sequence,
    /// The gather buffer: HEADERS, PUSH_PROMISE and SETTINGS payloads up to its length.
    buf: []u8,
    /// A varint or frame header being assembled (type and length: at most 16 bytes).
    head: [16]u8 = undefined,
    head_len: u8 = 0,
    frame_type: frames.FrameType = .data,
    /// Payload bytes of the current frame still to come.
    remaining: u64 = 0,
    gathered: usize = 0,

    /// A bidirectional (request) stream: frames from the first byte.
    pub fn initRequest(receiver: frames.Receiver, buf: []u8) FrameReader {
        std.debug.assert(buf.len >= frames.settings_bytes_max);
        return .{ .state = .frame_header, .sequence = .{ .kind = .request, .receiver = receiver }, .buf = buf };
    }

    /// A unidirectional stream the peer opened: its type first.
    pub fn initUnidirectional(receiver: frames.Receiver, buf: []u8) FrameReader {
        std.debug.assert(buf.len >= frames.settings_bytes_max);
        return .{ .state = .stream_type, .sequence = .{ .kind = .control, .receiver = receiver }, .buf = buf };
    }

    /// A control stream past its SETTINGS gathers only GOAWAY, MAX_PUSH_ID and
    /// CANCEL_PUSH payloads (at most `id_frame_bytes_max`): a smaller gather buffer will do.
    pub fn shrinkGather(self: *FrameReader, buf: []u8) void {
        std.debug.assert(buf.len >= id_frame_bytes_max);
        std.debug.assert(self.state != .gather); // nothing gathered is in the old buffer
        std.debug.assert(self.sequence.kind != .request);
        // Not a control stream, or its SETTINGS (always its first frame) is read.
        std.debug.assert(self.state == .foreign or self.state == .ignored or self.sequence.frames_seen > 0);
        self.buf = buf;
    }

    /// Reads from `input`; returns how much was used and at most one event. A step
    /// uses at least one byte of a non-empty input or yields an event (so a caller's
    /// loop always advances), except on a QPACK stream, where it uses nothing.
    pub fn next(self: *FrameReader, input: []const u8) Error!Step {
        return switch (self.state) {
            .stream_type => self.readStreamType(input),
            .push_id => self.readPushId(input),
            .frame_header => self.readFrameHeader(input),
            .gather => self.gather(input),
            .data => self.data(input),
            .skip => self.skip(input),
            .foreign => .{ .consumed = 0 },
            .ignored => .{ .consumed = input.len },
        };
    }

    /// The stream ended (FIN). A critical stream must not end; a frame cut short is
    /// H3_FRAME_ERROR (RFC 9114 7.1). Whether a request was whole is the session's call.
    pub fn finish(self: *const FrameReader) Error!void {
        switch (self.state) {
            .foreign => return error.ClosedCriticalStream,
            .ignored, .stream_type => return,
            else => {},
        }
        if (self.sequence.kind == .control) return error.ClosedCriticalStream;
        if (self.state != .frame_header or self.head_len > 0) return error.FrameError;
    }

    /// Collects one varint into `head`; its value once whole.
    fn collectVarint(self: *FrameReader, input: []const u8, used: *usize) ?u64 {
        while (used.* < input.len) {
            self.head[self.head_len] = input[used.*];
            self.head_len += 1;
            used.* += 1;
            if (self.head_len == varint.lenFromFirst(self.head[0])) {
                var pos: usize = 0;
                const v = varint.read(self.head[0..self.head_len], &pos).?;
                self.head_len = 0;
                return v;
            }
        }
        return null;
    }

    fn readStreamType(self: *FrameReader, input: []const u8) Error!Step {
        var used: usize = 0;
        const value = self.collectVarint(input, &used) orelse return .{ .consumed = used };
        const t = frames.StreamType.fromWire(value);
        switch (t) {
            .control => self.state = .frame_header,
            .push => {
                // Only servers push (RFC 9114 6.2.2).
                if (self.sequence.receiver == .server) return error.StreamCreationError;
                self.sequence.kind = .push;
                self.state = .push_id;
            },
            .qpack_encoder, .qpack_decoder => self.state = .foreign,
            .unknown => self.state = .ignored,
        }
        return .{ .consumed = used, .event = .{ .stream_type = t } };
    }

    fn readPushId(self: *FrameReader, input: []const u8) Error!Step {
        var used: usize = 0;
        const id = self.collectVarint(input, &used) orelse return .{ .consumed = used };
        self.state = .frame_header;
        return .{ .consumed = used, .event = .{ .push_id = id } };
    }

    /// Collects a frame header (type varint, length varint), then checks it.
    fn readFrameHeader(self: *FrameReader, input: []const u8) Error!Step {
        var used: usize = 0;
        while (used < input.len) {
            self.head[self.head_len] = input[used];
            self.head_len += 1;
            used += 1;
            const type_len = varint.lenFromFirst(self.head[0]);
            if (self.head_len <= type_len) continue;
            if (self.head_len == type_len + varint.lenFromFirst(self.head[type_len])) break;
        } else return .{ .consumed = used };
        var pos: usize = 0;
        const frame_type = varint.read(self.head[0..self.head_len], &pos).?;
        const length = varint.read(self.head[0..self.head_len], &pos).?;
        std.debug.assert(pos == self.head_len);
        self.head_len = 0;
        return .{ .consumed = used, .event = try self.startFrame(frame_type, length) };
    }

    /// Picks how a checked frame's payload is read; a frame of no payload may be done.
    fn startFrame(self: *FrameReader, frame_type: u64, length: u64) Error!?Event {
        self.remaining = length;
        self.gathered = 0;
        if (try self.sequence.check(frame_type) == .skip) {
            self.state = if (length == 0) .frame_header else .skip;
            return null;
        }
        self.frame_type = @enumFromInt(frame_type);
        switch (self.frame_type) {
            .data => {
                if (length == 0) return .{ .data = .{ .bytes = &.{}, .last = true } };
                self.state = .data;
                return null;
            },
            .headers, .push_promise => if (length > self.buf.len) return error.ExcessiveLoad,
            .settings => if (length > frames.settings_bytes_max) return error.ExcessiveLoad,
            .goaway, .cancel_push, .max_push_id => if (length == 0 or length > id_frame_bytes_max) return error.FrameError,
            _ => unreachable, // unknown types were skipped
        }
        self.state = .gather;
        if (length == 0) return try self.finishGather();
        return null;
    }

    fn gather(self: *FrameReader, input: []const u8) Error!Step {
        const take: usize = @intCast(@min(self.remaining, input.len));
        @memcpy(self.buf[self.gathered..][0..take], input[0..take]);
        self.gathered += take;
        self.remaining -= take;
        if (self.remaining > 0) return .{ .consumed = take };
        return .{ .consumed = take, .event = try self.finishGather() };
    }

    /// A gathered payload, parsed into its event.
    fn finishGather(self: *FrameReader) Error!Event {
        std.debug.assert(self.remaining == 0);
        self.state = .frame_header;
        const payload = self.buf[0..self.gathered];
        var pos: usize = 0;
        switch (self.frame_type) {
            .headers => return .{ .headers = payload },
            .settings => return .{ .settings = try frames.Settings.parse(payload) },
            .push_promise => {
                const id = varint.read(payload, &pos) orelse return error.FrameError;
                return .{ .push_promise = .{ .push_id = id, .section = payload[pos..] } };
            },
            .goaway, .cancel_push, .max_push_id => {
                const id = varint.read(payload, &pos) orelse return error.FrameError;
                if (pos != payload.len) return error.FrameError;
                return switch (self.frame_type) {
                    .goaway => .{ .goaway = id },
                    .cancel_push => .{ .cancel_push = id },
                    else => .{ .max_push_id = id },
                };
            },
            .data, _ => unreachable,
        }
    }

    fn data(self: *FrameReader, input: []const u8) Error!Step {
        std.debug.assert(self.remaining > 0);
        const take: usize = @intCast(@min(self.remaining, input.len));
        self.remaining -= take;
        if (self.remaining == 0) self.state = .frame_header;
        if (take == 0) return .{ .consumed = 0 };
        return .{ .consumed = take, .event = .{ .data = .{ .bytes = input[0..take], .last = self.remaining == 0 } } };
    }

    fn skip(self: *FrameReader, input: []const u8) Error!Step {
        const take: usize = @intCast(@min(self.remaining, input.len));
        self.remaining -= take;
        if (self.remaining == 0) self.state = .frame_header;
        return .{ .consumed = take };
    }
};
