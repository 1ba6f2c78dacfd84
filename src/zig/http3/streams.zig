//! The HTTP/3 session's per-stream records: a request stream (client bidirectional: its
//! frame reader, receive and send states, the bytes it owes the transport) and a peer
//! unidirectional stream (its type, and for the control stream its frame reader). Plain
//! data and the small rules on it; the session (`session.zig`) drives them.
const std = @import("std");
const frames = @import("frames.zig");
const frame_reader = @import("frame_reader.zig");

/// RFC 9000 2.1: bit 0 the initiator (1: server), bit 1 the direction (1: unidirectional).
pub const Kind = enum { client_bidi, server_bidi, client_uni, server_uni };

pub fn kindOf(id: u64) Kind {
    return switch (id & 3) {
        0 => .client_bidi,
        1 => .server_bidi,
        2 => .client_uni,
        else => .server_uni,
    };
}

/// Our control stream's bytes the transport did not take yet (SETTINGS, GOAWAY): a heap
/// record only while some wait, at most `bytes_max`.
pub const ControlBacklog = struct {
    pub const bytes_max = 128;
    bytes: [bytes_max]u8 = undefined,
    len: u8 = 0,

    comptime {
        std.debug.assert(bytes_max <= std.math.maxInt(u8));
    }

    /// Appends `more` to the backlog in `slot`, made when absent; error.Full past `bytes_max`.
    pub fn push(slot: *?*ControlBacklog, gpa: std.mem.Allocator, more: []const u8) error{ Full, OutOfMemory }!void {
        const b = slot.* orelse made: {
            const made = try gpa.create(ControlBacklog);
            made.* = .{};
            slot.* = made;
            break :made made;
        };
        if (bytes_max - b.len < more.len) return error.Full;
        @memcpy(b.bytes[b.len..][0..more.len], more);
        b.len += @intCast(more.len);
    }

    /// Drops the first `n` bytes (all of them when `n` is larger); the record is freed when
    /// none remain.
    pub fn consume(slot: *?*ControlBacklog, gpa: std.mem.Allocator, n: usize) void {
        const b = slot.* orelse return;
        const taken: u8 = @intCast(@min(n, b.len));
        std.mem.copyForwards(u8, b.bytes[0 .. b.len - taken], b.bytes[taken..b.len]);
        b.len -= taken;
        if (b.len > 0) return;
        gpa.destroy(b);
        slot.* = null;
    }
};

pub const Recv = enum {
    /// Frames are read; HEADERS not yet whole.
    head,
    /// A HEADERS section waits for encoder-stream inserts (RFC 9204 2.1.2).
    blocked,
    /// The request went to the owner: DATA and trailers follow.
    body,
    /// FIN read (and delivered), or reading was stopped (STOP_SENDING, reset).
    done,
};

pub const Send = enum {
    /// Nothing sent yet (a 103 may have gone out).
    idle,
    /// The final response's HEADERS are out (or owed): DATA and trailers may follow.
    open,
    /// Trailers sent: only the FIN remains.
    trailers,
    /// FIN accepted by the transport, or the stream reset.
    done,
};

pub const RequestStream = struct {
    id: u64,
    reader: frame_reader.FrameReader,
    /// The gather buffer the reader fills (a HEADERS payload at most this long).
    gather: []u8,
    recv: Recv = .head,
    send: Send = .idle,
    /// `onRequest` was called: the owner knows the stream and must hear how it ends.
    dispatched: bool = false,
    /// The session is inside this stream's reading (an owner callback may end it): the
    /// record is freed only once that returns.
    busy: bool = false,
    /// The blocked section's length at the start of `gather`, and whether it is trailers.
    blocked_len: usize = 0,
    blocked_trailers: bool = false,
    /// Bytes read after a blocked HEADERS frame, held until it decodes (one read at most).
    held: std.ArrayListUnmanaged(u8) = .empty,
    /// The request's FIN was read while the stream was blocked: delivered once unblocked.
    fin_held: bool = false,
    content_length: ?u64 = null,
    body_received: u64 = 0,
    /// The owner asked us to stop reading (backpressure on the request body).
    paused: bool = false,
    /// Resumed from inside an owner callback: read once the session's event is handled.
    resume_due: bool = false,
    /// Engine-made bytes (frame headers, HEADERS frames) the transport did not accept yet.
    pending: std.ArrayListUnmanaged(u8) = .empty,
    /// Payload bytes of the DATA frame already announced that the owner still owes.
    data_left: u64 = 0,
    /// The FIN goes out once `pending` is written (after trailers, or an empty end).
    fin_wanted: bool = false,

    pub fn init(id: u64, gather: []u8) RequestStream {
        std.debug.assert(kindOf(id) == .client_bidi);
        return .{ .id = id, .reader = frame_reader.FrameReader.initRequest(.server, gather), .gather = gather };
    }

    pub fn deinit(self: *RequestStream, gpa: std.mem.Allocator) void {
        self.held.deinit(gpa);
        self.pending.deinit(gpa);
        gpa.free(self.gather);
    }

    /// Both sides over: the record can go.
    pub fn finished(self: *const RequestStream) bool {
        return self.recv == .done and self.send == .done;
    }
};

pub const UniType = enum { unread, control, qpack_encoder, qpack_decoder, ignored };

/// A unidirectional stream the peer opened.
pub const UniStream = struct {
    id: u64,
    type: UniType = .unread,
    /// Reads the type, then (control stream) frames into its gather buffer: SETTINGS's
    /// room (on the heap) until the stream is known not to carry one more, then `small`,
    /// which holds the largest frame a control stream may still send (GOAWAY, MAX_PUSH_ID,
    /// CANCEL_PUSH: 8 bytes), so an idle connection keeps no SETTINGS room.
    reader: frame_reader.FrameReader,
    settings_buf: ?*[frames.settings_bytes_max]u8,
    small: [frame_reader.id_frame_bytes_max]u8 = undefined,
    /// The peer's decoder stream: a partial instruction (at most 10 bytes of integer).
    partial: [10]u8 = undefined,
    partial_len: u8 = 0,

    /// Set in place: the reader borrows the record, so it must not move afterwards.
    pub fn start(self: *UniStream, id: u64, settings_buf: *[frames.settings_bytes_max]u8) void {
        std.debug.assert(kindOf(id) == .client_uni);
        self.* = .{ .id = id, .reader = undefined, .settings_buf = settings_buf };
        self.reader = frame_reader.FrameReader.initUnidirectional(.server, settings_buf);
    }

    /// SETTINGS was read, or the stream is not a control stream: the room goes.
    pub fn dropSettingsRoom(self: *UniStream, gpa: std.mem.Allocator) void {
        const room = self.settings_buf orelse return;
        self.reader.shrinkGather(&self.small);
        gpa.destroy(room);
        self.settings_buf = null;
    }

    pub fn deinit(self: *UniStream, gpa: std.mem.Allocator) void {
        if (self.settings_buf) |room| gpa.destroy(room);
        self.settings_buf = null;
    }

    pub fn critical(self: *const UniStream) bool {
        return switch (self.type) {
            .control, .qpack_encoder, .qpack_decoder => true,
            .unread, .ignored => false,
        };
    }
};

test "stream id kinds (RFC 9000 2.1)" {
    try std.testing.expectEqual(Kind.client_bidi, kindOf(0));
    try std.testing.expectEqual(Kind.server_bidi, kindOf(1));
    try std.testing.expectEqual(Kind.client_uni, kindOf(2));
    try std.testing.expectEqual(Kind.server_uni, kindOf(3));
    try std.testing.expectEqual(Kind.client_bidi, kindOf(4 * 1000));
}

test "control backlog: made on the first bytes, full past its bound, freed when drained" {
    const gpa = std.testing.allocator;
    var slot: ?*ControlBacklog = null;
    ControlBacklog.consume(&slot, gpa, 5); // nothing waits: nothing to do
    try std.testing.expect(slot == null);
    try ControlBacklog.push(&slot, gpa, "abc");
    try ControlBacklog.push(&slot, gpa, &([_]u8{'x'} ** (ControlBacklog.bytes_max - 3)));
    try std.testing.expectEqual(@as(u8, ControlBacklog.bytes_max), slot.?.len);
    try std.testing.expectError(error.Full, ControlBacklog.push(&slot, gpa, "y"));
    ControlBacklog.consume(&slot, gpa, 1);
    try std.testing.expectEqualStrings("bcx", slot.?.bytes[0..3]);
    try ControlBacklog.push(&slot, gpa, "z");
    try std.testing.expectEqual(@as(u8, 'z'), slot.?.bytes[slot.?.len - 1]);
    ControlBacklog.consume(&slot, gpa, ControlBacklog.bytes_max);
    try std.testing.expect(slot == null);
}
