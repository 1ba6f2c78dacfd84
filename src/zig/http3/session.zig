//! The HTTP/3 server session (RFC 9114, RFC 9204), sans-IO on QUIC's streams.
//!
//! `Session(Transport, Owner)`: the transport is the QUIC connection (`quic/connection.zig`:
//! `nextEvent`, `streamRead`, `streamWrite`, `streamReset`, `streamStopSending`,
//! `streamReceiveOver`, `openUni`, `closeApplication`), the owner serves requests
//! (`core/stream.zig`; a recorder in tests). It reads events (`run`) and streams, and calls:
//!
//!     onRequest(stream_id, *const Head)   a request's head, checked (RFC 9114 4.3)
//!     onBody(stream_id, bytes, fin)       request body pieces; fin (empty bytes) at the end
//!     onTrailers(stream_id, []const Header)
//!     onReset(stream_id, code)            the stream ended unfinished (either side's reset,
//!                                         a stream error found here, the connection's end)
//!     onGoaway(id)                        the client's GOAWAY (a push ID: we never push)
//!     onWritable(stream_id)               a response that took less than offered may go on
//!
//! Every slice handed to the owner borrows the session until the callback returns. The
//! owner answers with `respond`, `earlyHint`, `writeBody`, `writeTrailers`, `abort`, and
//! may call them from inside its callbacks. HTTP/2's session hands `core/stream.zig`
//! the same things (a request view with method, path, query, authority, scheme and the
//! header list; body bytes; resets), so one server adapter can drive both.
//!
//! Limits: streams at once are QUIC's MAX_STREAMS (the transport), with `streams_max` as
//! a second bound (past it: H3_REQUEST_REJECTED); a HEADERS payload or decoded section
//! over our SETTINGS_MAX_FIELD_SECTION_SIZE, or more fields than `fields_max`, is a
//! stream error H3_EXCESSIVE_LOAD (documented choice: nothing is malformed, the request
//! is larger than we take; the client sees its request refused, as a 431 would say);
//! blocked QPACK sections are bounded by SETTINGS_QPACK_BLOCKED_STREAMS and each holds at
//! most one read's bytes; request bodies are handed on, not buffered (`pauseReading`
//! holds QUIC's flow control shut instead); peer resets of dispatched requests and empty
//! DATA frames are counted per second (H3_EXCESSIVE_LOAD past the budget). Unknown frames
//! are skipped by the frame reader at a constant cost per byte, which QUIC's flow control
//! already bounds.
const std = @import("std");
const frames = @import("frames.zig");
const varint = frames.varint;
const ErrorCode = frames.ErrorCode;
const frame_reader = @import("frame_reader.zig");
const qpack = @import("qpack.zig");
const qpack_decoder = @import("qpack_decoder.zig");
const qpack_encoder = @import("qpack_encoder.zig");
const streams = @import("streams.zig");
const request_fields = @import("../http/request_fields.zig");
const response = @import("../http/response.zig");

pub const Header = qpack.Header;
pub const RequestStream = streams.RequestStream;
pub const UniStream = streams.UniStream;

pub const Config = struct {
    /// Our SETTINGS_QPACK_MAX_TABLE_CAPACITY: the peer's dynamic table we hold.
    qpack_table_capacity: u32 = 4096,
    /// Our SETTINGS_QPACK_BLOCKED_STREAMS.
    qpack_blocked_streams: u16 = 16,
    /// Our SETTINGS_MAX_FIELD_SECTION_SIZE; also the HEADERS payload we gather.
    field_section_bytes_max: u32 = 16 * 1024,
    /// Header fields a request may carry (the app's list).
    fields_max: u16 = 128,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 9220): extended CONNECT is accepted.
    extended_connect: bool = false,
    /// A reserved setting in our SETTINGS (RFC 9114 7.2.4.1), so peers keep ignoring them.
    grease: bool = true,
    /// Request streams at once, beyond QUIC's own MAX_STREAMS (which should be lower).
    streams_max: u32 = 256,
    resets_per_second_max: u32 = 200,
    empty_frames_per_second_max: u32 = 10_000,
};

/// The request as the owner sees it (the shape of `core/stream.zig`'s `Request`).
pub const Head = struct {
    method: []const u8,
    /// As sent, before '?'.
    path: []const u8,
    /// After the first '?', "" if none.
    query: []const u8,
    authority: ?[]const u8,
    scheme: ?[]const u8,
    /// Extended CONNECT's `:protocol` (RFC 9220).
    protocol: ?[]const u8,
    /// Lower-case names, in order; `host` first (from `:authority` when absent); cookies joined.
    headers: []const Header,
    content_length: ?u64,
    te_trailers: bool,
};

pub const AbortReason = enum { internal, cancelled };

pub const VerbError = error{ UnknownStream, Closed, AlreadyStarted, NotStarted, AlreadyComplete, InvalidHeader, HeadTooLarge, FrameOpen, OutOfMemory };

/// One read from a stream at most; also the most a blocked stream holds.
pub const read_bytes_max = 16 * 1024;
/// Peer unidirectional streams at once. The transport bounds how many the peer has open
/// (initial_max_streams_uni, credited again only as streams close), and a record lives no
/// longer than its stream (freed at its FIN or reset, which the session sees before the
/// credit can reach the peer): a transport that lets the peer open more must not be paired
/// with this session (the worker asserts it). Three: the control and QPACK streams, all a
/// client needs (RFC 9114 6.2, RFC 9204 4.2).
pub const uni_streams_max = 3;
/// A DATA frame's payload at most: what the owner commits to when a write is cut short.
pub const data_frame_bytes_max = 64 * 1024;
/// Our control stream's bytes waiting for the transport (SETTINGS, GOAWAY).
const control_pending_max = streams.ControlBacklog.bytes_max;
const ControlBacklog = streams.ControlBacklog;
/// "No id yet" for the session's stream and push ids (all varints, below 2^62).
const no_id: u64 = std.math.maxInt(u64);
/// The reserved setting we send (0x1f * 1 + 0x21) and its value.
pub const grease_setting: u64 = 0x40;

/// The names a transport and an owner must have, checked when the session is built, so
/// a missing one is named here rather than deep inside a call.
fn checkInterface(comptime T: type, comptime names: []const []const u8) void {
    inline for (names) |name| if (!@hasDecl(T, name)) @compileError(@typeName(T) ++ " lacks " ++ name);
}

/// The session over `Transport` (a `*Transport` is called: nextEvent, streamRead,
/// streamWrite, streamReset, streamStopSending, streamReceiveOver, openUni, closeApplication) for `Owner`
/// (onRequest, onBody, onTrailers, onReset, onGoaway, onWritable). Created on the heap
/// (`create`): the peer's streams' readers point into it.
pub fn Session(comptime Transport: type, comptime Owner: type) type {
    comptime checkInterface(Transport, &.{ "nextEvent", "streamRead", "streamWrite", "streamReset", "streamStopSending", "streamReceiveOver", "openUni", "closeApplication" });
    comptime checkInterface(Owner, &.{ "onRequest", "onBody", "onTrailers", "onReset", "onGoaway", "onWritable" });
    return struct {
        const Self = @This();

        gpa: std.mem.Allocator,
        transport: *Transport,
        owner: *Owner,
        /// The caller's, kept for the session's life (`create`, `createShared`).
        config: *const Config,
        /// The QPACK decoder's state (the peer's table, blocked streams, our decoder
        /// stream's output), made when first needed (`useDecoder`): a section whose
        /// Required Insert Count is 0 decodes without it, so a client whose encoder stays
        /// static-only never costs one.
        decoder: ?*qpack_decoder.Decoder = null,
        requests: std.AutoHashMapUnmanaged(u64, *RequestStream) = .empty,
        /// The peer's unidirectional streams, each a heap record while it is open.
        uni: [uni_streams_max]?*UniStream = [_]?*UniStream{null} ** uni_streams_max,
        peer_control: bool = false,
        peer_encoder: bool = false,
        peer_decoder: bool = false,
        /// Of the peer's SETTINGS only this is used (our heads' size, RFC 9114 4.2.2):
        /// unlimited until they come.
        peer_field_section_max: u64 = frames.Settings.unlimited_field_section,
        /// Ids (varints, below 2^62) or `no_id`.
        peer_goaway: u64 = no_id,
        max_push_id: u64 = no_id,
        /// Our unidirectional streams, once the handshake is done.
        control_id: u64 = no_id,
        decoder_id: u64 = no_id,
        /// Control stream bytes the transport did not take yet (at most `control_pending_max`;
        /// room held only while some wait).
        control_pending: ?*ControlBacklog = null,
        /// The decoder stream's type byte is not yet accepted (its instructions wait).
        decoder_type_pending: bool = false,
        /// The lowest request stream id not yet seen (GOAWAY names it).
        next_request_id: u64 = 0,
        /// The GOAWAY we sent names it (`no_id`: none sent).
        goaway_id: u64 = no_id,
        closed: bool = false,
        now_ms: u64 = 0,
        window_start_ms: u64 = 0,
        resets_in_window: u32 = 0,
        empty_in_window: u32 = 0,
        /// Inside `handle` (or an owner callback it made): `read_buf` may be in use.
        read_depth: u32 = 0,
        /// Streams marked `resume_due`, read once `handle` is done.
        resume_due: u32 = 0,
        /// The working buffers (see `Buffers`): the caller's, shared between sessions, or (from
        /// `create`) this session's own on the heap (`shared` false; freed by `destroy`).
        bufs: *const Buffers,
        shared: bool = false,

        pub const frame_header_room = 16;

        /// The working buffers of a session (~64 KiB with the default limits): each is used
        /// only inside one call into the session (a read, a head decoded and handed to the
        /// owner, a head encoded and written), so sessions that are never entered at once
        /// (one thread's connections, driven in turn) may share one set (`createShared`).
        pub const Buffers = struct {
            read_buf: []u8,
            /// Decoding: Huffman strings and dynamic entries, the fields, the app's list.
            scratch: []u8,
            decoded: []Header,
            app_fields: []Header,
            cookies: []u8,
            /// A HEADERS frame being built: the frame header's room, then the section.
            encode_buf: []u8,

            pub fn init(gpa: std.mem.Allocator, config: Config) error{OutOfMemory}!Buffers {
                const read_buf = try gpa.alloc(u8, read_bytes_max);
                errdefer gpa.free(read_buf);
                const scratch = try gpa.alloc(u8, config.field_section_bytes_max);
                errdefer gpa.free(scratch);
                const decoded = try gpa.alloc(Header, config.fields_max + 8);
                errdefer gpa.free(decoded);
                const app_fields = try gpa.alloc(Header, config.fields_max + 1);
                errdefer gpa.free(app_fields);
                const cookies = try gpa.alloc(u8, config.field_section_bytes_max);
                errdefer gpa.free(cookies);
                const encode_buf = try gpa.alloc(u8, frame_header_room + config.field_section_bytes_max);
                return .{ .read_buf = read_buf, .scratch = scratch, .decoded = decoded, .app_fields = app_fields, .cookies = cookies, .encode_buf = encode_buf };
            }

            pub fn deinit(b: *Buffers, gpa: std.mem.Allocator) void {
                for ([_][]u8{ b.read_buf, b.scratch, b.cookies, b.encode_buf }) |x| gpa.free(x);
                gpa.free(b.decoded);
                gpa.free(b.app_fields);
                b.* = undefined;
            }
        };

        /// A session with buffers of its own.
        pub fn create(gpa: std.mem.Allocator, transport: *Transport, owner: *Owner, config: *const Config) error{OutOfMemory}!*Self {
            const bufs = try gpa.create(Buffers);
            errdefer gpa.destroy(bufs);
            bufs.* = try Buffers.init(gpa, config.*);
            errdefer bufs.deinit(gpa);
            const s = try createShared(gpa, transport, owner, config, bufs);
            s.shared = false;
            return s;
        }

        /// A session on `bufs`, which the caller keeps for the session's life and made
        /// with the same `config` limits.
        pub fn createShared(gpa: std.mem.Allocator, transport: *Transport, owner: *Owner, config: *const Config, bufs: *const Buffers) error{OutOfMemory}!*Self {
            std.debug.assert(config.qpack_blocked_streams <= qpack_decoder.blocked_streams_limit);
            std.debug.assert(config.field_section_bytes_max >= frames.settings_bytes_max);
            std.debug.assert(bufs.scratch.len == config.field_section_bytes_max and bufs.decoded.len == config.fields_max + 8);
            const s = try gpa.create(Self);
            s.* = .{
                .gpa = gpa,
                .transport = transport,
                .owner = owner,
                .config = config,
                .bufs = bufs,
                .shared = true,
            };
            return s;
        }

        fn decoderLimits(config: *const Config) qpack_decoder.Limits {
            return .{
                .table_capacity_max = config.qpack_table_capacity,
                .blocked_streams_max = config.qpack_blocked_streams,
                .field_section_bytes_max = config.field_section_bytes_max,
            };
        }

        /// The decoder's state, made the first time the peer's encoder stream carries an
        /// instruction, a section references the peer's table, or a stream's decoding is
        /// cancelled.
        fn useDecoder(s: *Self) error{OutOfMemory}!*qpack_decoder.Decoder {
            if (s.decoder) |d| return d;
            const d = try s.gpa.create(qpack_decoder.Decoder);
            d.* = qpack_decoder.Decoder.initWith(s.gpa, decoderLimits(s.config));
            s.decoder = d;
            return d;
        }

        /// Stream Cancellation (RFC 9204 4.4.2) for a stream whose sections we will not
        /// read: the peer's encoder may hold references for it (its inserts can still be on
        /// the way), so this makes the decoder's state if there is none.
        fn cancelDecoding(s: *Self, id: u64) void {
            if (s.config.qpack_table_capacity == 0) return; // no table: no instruction (4.4.2)
            const d = s.useDecoder() catch return s.connError(.internal_error, "out of memory");
            d.cancelStream(id) catch |err| s.decoderOutputFailed(err);
        }

        /// An instruction the decoder stream cannot take ends the connection: the peer's
        /// encoder would keep references we released, or wait for acknowledgments for ever.
        fn decoderOutputFailed(s: *Self, err: qpack_decoder.OutputError) void {
            switch (err) {
                error.DecoderStreamFull => s.connError(.excessive_load, "decoder stream full"),
                error.OutOfMemory => s.connError(.internal_error, "out of memory, decoder stream"),
            }
        }

        pub fn destroy(s: *Self) void {
            var it = s.requests.valueIterator();
            while (it.next()) |rs| {
                rs.*.deinit(s.gpa);
                s.gpa.destroy(rs.*);
            }
            s.requests.deinit(s.gpa);
            ControlBacklog.consume(&s.control_pending, s.gpa, control_pending_max);
            for (&s.uni) |*slot| if (slot.*) |u| {
                u.deinit(s.gpa);
                s.gpa.destroy(u);
                slot.* = null;
            };
            if (s.decoder) |d| {
                d.deinit();
                s.gpa.destroy(d);
            }
            if (!s.shared) {
                const bufs: *Buffers = @constCast(s.bufs);
                bufs.deinit(s.gpa);
                s.gpa.destroy(bufs);
            }
            s.gpa.destroy(s);
        }

        /// The clock the per-second budgets count in (the server's tick sets it).
        pub fn setNow(s: *Self, now_ms: u64) void {
            s.now_ms = now_ms;
        }

        pub fn liveStreams(s: *const Self) usize {
            return s.requests.count();
        }

        /// Handles the transport's events until it has none (or the connection is over).
        pub fn run(s: *Self) void {
            while (!s.closed) {
                const ev = s.transport.nextEvent() orelse return;
                s.handle(ev);
            }
        }

        pub fn handle(s: *Self, ev: anytype) void {
            if (s.closed) return;
            s.read_depth += 1;
            defer s.afterHandle();
            switch (ev) {
                .handshake_done => s.openOwnStreams(),
                .readable => |id| s.onReadable(id),
                .writable => |id| s.onWritable(id),
                .reset => |r| s.onPeerReset(r.id, r.code),
                .stop_sending => |r| s.onStopSending(r.id, r.code),
                .closed => |c| s.connectionOver(c.code),
                .datagram => unreachable, // none offered (no WebTransport yet)
            }
        }

        /// Streams the owner resumed from inside a callback are read now, when no read
        /// buffer is in use (`resumeReading`).
        fn afterHandle(s: *Self) void {
            s.read_depth -= 1;
            if (s.read_depth > 0) return;
            while (s.resume_due > 0 and !s.closed) {
                s.resume_due -= 1;
                var it = s.requests.valueIterator();
                const rs = while (it.next()) |r| {
                    if (r.*.resume_due) break r.*;
                } else break;
                rs.resume_due = false;
                s.read_depth += 1;
                s.pump(rs);
                s.read_depth -= 1;
            }
            s.resume_due = 0;
        }

        // ---- connection errors and the end -----------------------------------------------

        /// A connection error (RFC 9114 8): CONNECTION_CLOSE with `code`; every request the
        /// owner holds ends. Streams are freed by `destroy` (a caller may be inside one).
        pub fn connError(s: *Self, code: ErrorCode, reason: []const u8) void {
            if (s.closed) return;
            s.transport.closeApplication(@intFromEnum(code), reason);
            s.connectionOver(@intFromEnum(code));
        }

        fn connectionOver(s: *Self, code: u64) void {
            s.closed = true;
            var it = s.requests.valueIterator();
            while (it.next()) |rs| {
                const was = rs.*.dispatched and !rs.*.finished();
                rs.*.recv = .done;
                rs.*.send = .done;
                rs.*.dispatched = false;
                if (was) s.owner.onReset(rs.*.id, code);
            }
        }

        fn budget(s: *Self, counter: *u32, max: u32) void {
            if (s.now_ms -| s.window_start_ms >= 1000) {
                s.window_start_ms = s.now_ms;
                s.resets_in_window = 0;
                s.empty_in_window = 0;
            }
            counter.* += 1;
            if (counter.* > max) s.connError(.excessive_load, "too many resets or empty frames");
        }

        // ---- our unidirectional streams ---------------------------------------------------

        /// The control stream, once the handshake is done. The QPACK streams are not opened
        /// with it (an idle connection holds no QUIC stream records for them): our encoder is
        /// static-only, so its stream would never carry an instruction and is not created
        /// (RFC 9204 4.2 lets an endpoint avoid it); our decoder stream opens with its first
        /// instruction (`flushDecoderStream`), which only a peer using its dynamic table causes.
        fn openOwnStreams(s: *Self) void {
            if (s.control_id != no_id) return;
            s.control_id = s.transport.openUni() catch return s.connError(.internal_error, "no stream for the control stream");
            var buf: [control_pending_max]u8 = undefined;
            const n = s.controlPreface(&buf);
            s.controlWrite(buf[0..n]);
            s.flushDecoderStream();
        }

        /// The control stream's type and our SETTINGS (RFC 9114 6.2.1, 7.2.4).
        pub fn controlPreface(s: *const Self, buf: []u8) usize {
            var payload: [64]u8 = undefined;
            var p: usize = 0;
            const pairs = [_][2]u64{
                .{ frames.setting_qpack_max_table_capacity, s.config.qpack_table_capacity },
                .{ frames.setting_qpack_blocked_streams, s.config.qpack_blocked_streams },
                .{ frames.setting_max_field_section_size, s.config.field_section_bytes_max },
            };
            for (pairs) |kv| p = varint.write(&payload, varint.write(&payload, p, kv[0]) catch unreachable, kv[1]) catch unreachable;
            if (s.config.extended_connect) p = varint.write(&payload, varint.write(&payload, p, frames.setting_enable_connect_protocol) catch unreachable, 1) catch unreachable;
            if (s.config.grease) p = varint.write(&payload, varint.write(&payload, p, grease_setting) catch unreachable, 0) catch unreachable;
            var n = frames.writeStreamType(buf, .control) catch unreachable;
            n = frames.writeFrameHeader(buf, n, .settings, p) catch unreachable;
            @memcpy(buf[n..][0..p], payload[0..p]);
            return n + p;
        }

        fn controlWrite(s: *Self, bytes: []const u8) void {
            const id = s.control_id;
            if (id == no_id) return;
            var rest = bytes;
            if (s.control_pending == null) {
                const n = s.transport.streamWrite(id, bytes, false) catch return s.connError(.closed_critical_stream, "our control stream is gone");
                rest = bytes[n..];
                if (rest.len == 0) return;
            }
            ControlBacklog.push(&s.control_pending, s.gpa, rest) catch |err| return switch (err) {
                error.Full => s.connError(.excessive_load, "the control stream does not drain"),
                error.OutOfMemory => s.connError(.internal_error, "out of memory for the control stream"),
            };
            s.flushControl(id);
        }

        fn flushControl(s: *Self, id: u64) void {
            const b = s.control_pending orelse return;
            const n = s.transport.streamWrite(id, b.bytes[0..b.len], false) catch return s.connError(.closed_critical_stream, "our control stream is gone");
            ControlBacklog.consume(&s.control_pending, s.gpa, n);
        }

        /// Writes the QPACK decoder's instructions (after our stream type) as far as the
        /// transport takes them; the rest waits in the decoder's bounded output.
        fn flushDecoderStream(s: *Self) void {
            const decoder = s.decoder orelse return;
            if (decoder.output().len == 0) return;
            const id = if (s.decoder_id != no_id) s.decoder_id else blk: {
                if (s.control_id == no_id) return; // before the handshake's end: opened with the first flush after it
                const opened = s.transport.openUni() catch return s.connError(.internal_error, "no stream for the QPACK decoder");
                std.debug.assert(opened != no_id);
                s.decoder_id = opened;
                s.decoder_type_pending = true;
                break :blk opened;
            };
            if (s.decoder_type_pending) {
                var one = [1]u8{@intCast(frames.StreamType.wire(.qpack_decoder))};
                const n = s.transport.streamWrite(id, &one, false) catch return s.connError(.closed_critical_stream, "our decoder stream is gone");
                if (n == 0) return;
                s.decoder_type_pending = false;
            }
            const n = s.transport.streamWrite(id, decoder.output(), false) catch return s.connError(.closed_critical_stream, "our decoder stream is gone");
            decoder.consumeOutput(n);
        }

        // ---- events ---------------------------------------------------------------------------

        fn onReadable(s: *Self, id: u64) void {
            switch (streams.kindOf(id)) {
                .client_bidi => s.readRequest(id),
                .client_uni => s.readUni(id),
                // Streams we open have no receive side (ours are unidirectional).
                .server_bidi, .server_uni => {},
            }
        }

        fn onWritable(s: *Self, id: u64) void {
            if (s.control_id == id) return s.flushControl(id);
            if (s.decoder_id == id) return s.flushDecoderStream();
            const rs = s.requests.get(id) orelse return;
            if (!s.flushPending(rs)) return;
            if (rs.send == .open and !s.closed) s.owner.onWritable(id);
        }

        fn onPeerReset(s: *Self, id: u64, code: u64) void {
            switch (streams.kindOf(id)) {
                .client_bidi => {
                    const rs = s.requests.get(id) orelse return;
                    if (rs.dispatched) s.budget(&s.resets_in_window, s.config.resets_per_second_max);
                    if (s.closed) return;
                    s.endStream(rs, @intFromEnum(ErrorCode.request_cancelled), code, .peer_reset);
                },
                .client_uni => {
                    const slot = s.findUni(id) orelse return;
                    if (slot.critical()) return s.connError(.closed_critical_stream, "a critical stream was reset");
                    s.freeUni(id);
                },
                .server_bidi, .server_uni => {},
            }
        }

        fn onStopSending(s: *Self, id: u64, code: u64) void {
            if (id == s.control_id or id == s.decoder_id)
                return s.connError(.closed_critical_stream, "the peer stopped a critical stream");
            const rs = s.requests.get(id) orelse return;
            // The client wants no response: the stream ends both ways (RFC 9114 4.1.1).
            s.endStream(rs, code, code, .peer_stop);
        }

        const Ender = enum { peer_reset, peer_stop, stream_error, abort };

        /// Ends a request stream both ways: our send side reset with `send_code`, our
        /// receive side stopped unless its end was read, the owner told (with
        /// `owner_code`) unless it asked. The record goes once no caller is inside it.
        fn endStream(s: *Self, rs: *RequestStream, send_code: u64, owner_code: u64, by: Ender) void {
            if (rs.recv != .done) {
                if (by != .peer_reset) s.transport.streamStopSending(rs.id, send_code);
                s.cancelDecoding(rs.id);
                s.flushDecoderStream();
            }
            if (rs.send != .done) s.transport.streamReset(rs.id, send_code);
            rs.recv = .done;
            rs.send = .done;
            rs.pending.clearAndFree(s.gpa);
            rs.held.clearAndFree(s.gpa);
            rs.data_left = 0;
            const tell = rs.dispatched and by != .abort;
            rs.dispatched = false;
            if (tell) s.owner.onReset(rs.id, owner_code);
            s.maybeFree(rs);
        }

        fn streamError(s: *Self, rs: *RequestStream, code: ErrorCode) void {
            s.endStream(rs, @intFromEnum(code), @intFromEnum(code), .stream_error);
        }

        /// No request left and none being read: the request map gives back its room (an
        /// idle connection holds none). The caller must not be iterating the map.
        pub fn releaseIdle(s: *Self) void {
            if (s.read_depth == 0 and s.requests.count() == 0 and s.requests.capacity() > 0) s.requests.clearAndFree(s.gpa);
        }

        fn maybeFree(s: *Self, rs: *RequestStream) void {
            if (!rs.finished() or rs.busy) return;
            if (rs.resume_due) s.resume_due -= 1;
            std.debug.assert(rs.pending.items.len == 0 or s.closed);
            _ = s.requests.remove(rs.id);
            rs.deinit(s.gpa);
            s.gpa.destroy(rs);
            s.closeIfDrained();
        }

        fn closeIfDrained(s: *Self) void {
            if (s.goaway_id == no_id or s.closed or s.requests.count() > 0) return;
            // The QUIC connection closes once the last responses are acknowledged (a
            // transport without that verb, the tests' fake, closes now).
            if (@hasDecl(Transport, "closeApplicationWhenSent")) {
                s.transport.closeApplicationWhenSent(@intFromEnum(ErrorCode.no_error));
            } else s.transport.closeApplication(@intFromEnum(ErrorCode.no_error), "");
            s.closed = true;
        }

        // ---- shutdown -------------------------------------------------------------------------

        /// GOAWAY (RFC 9114 5.2): the first request stream id we will not serve. Streams
        /// below it are served; the connection closes with H3_NO_ERROR once none remains.
        pub fn goaway(s: *Self) void {
            if (s.closed or s.goaway_id != no_id) return;
            std.debug.assert(s.next_request_id != no_id);
            s.goaway_id = s.next_request_id;
            var buf: [24]u8 = undefined;
            const n = frames.writeIdFrame(&buf, .goaway, s.next_request_id) catch unreachable;
            s.controlWrite(buf[0..n]);
            s.closeIfDrained();
        }

        // ---- the peer's unidirectional streams ------------------------------------------------

        fn findUni(s: *Self, id: u64) ?*UniStream {
            for (s.uni) |slot| if (slot) |u| if (u.id == id) return u;
            return null;
        }

        fn freeUni(s: *Self, id: u64) void {
            for (&s.uni) |*slot| if (slot.*) |u| if (u.id == id) {
                u.deinit(s.gpa);
                s.gpa.destroy(u);
                slot.* = null;
            };
        }

        fn newUni(s: *Self, id: u64) ?*UniStream {
            for (&s.uni) |*slot| if (slot.* == null) {
                const u = s.gpa.create(UniStream) catch {
                    s.connError(.internal_error, "out of memory for a unidirectional stream");
                    return null;
                };
                const room = s.gpa.create([frames.settings_bytes_max]u8) catch {
                    s.gpa.destroy(u);
                    s.connError(.internal_error, "out of memory for a unidirectional stream");
                    return null;
                };
                u.start(id, room);
                slot.* = u;
                return u;
            };
            s.connError(.excessive_load, "too many unidirectional streams");
            return null;
        }

        fn readUni(s: *Self, id: u64) void {
            var fresh = s.findUni(id) == null;
            while (!s.closed) {
                const r = s.transport.streamRead(id, s.bufs.read_buf) catch return;
                if (r.n == 0 and !r.fin) return;
                // A slot only for a stream with bytes (a late event leaves nothing).
                if (fresh and s.newUni(id) == null) return;
                fresh = false;
                const u = s.findUni(id).?;
                s.uniBytes(u, s.bufs.read_buf[0..r.n]);
                if (s.closed) return;
                if (r.fin) return s.uniFin(u);
            }
        }

        fn uniFin(s: *Self, u: *UniStream) void {
            if (u.critical()) return s.connError(.closed_critical_stream, "a critical stream ended");
            s.freeUni(u.id);
        }

        fn uniBytes(s: *Self, u: *UniStream, bytes: []const u8) void {
            var rest = bytes;
            while (rest.len > 0 and !s.closed) switch (u.type) {
                .unread, .control => {
                    const step = u.reader.next(rest) catch |err| return s.connError(frames.errorCode(err), "control stream");
                    rest = rest[step.consumed..];
                    if (step.event) |ev| s.uniEvent(u, ev);
                },
                .qpack_encoder => {
                    s.encoderBytes(rest);
                    rest = &.{};
                },
                .qpack_decoder => {
                    s.peerDecoderBytes(u, rest);
                    rest = &.{};
                },
                .ignored => rest = &.{},
            };
        }

        fn uniEvent(s: *Self, u: *UniStream, ev: frame_reader.Event) void {
            switch (ev) {
                .stream_type => |t| s.uniType(u, t),
                .settings => |settings| {
                    s.peer_field_section_max = settings.max_field_section_size;
                    u.dropSettingsRoom(s.gpa);
                },
                .goaway => |id| {
                    // A client's GOAWAY names a push ID; it may only go down (5.2).
                    std.debug.assert(id != no_id); // a varint
                    if (s.peer_goaway != no_id and id > s.peer_goaway) return s.connError(.id_error, "GOAWAY went up");
                    s.peer_goaway = id;
                    s.owner.onGoaway(id);
                },
                .max_push_id => |id| {
                    std.debug.assert(id != no_id); // a varint
                    if (s.max_push_id != no_id and id < s.max_push_id) return s.connError(.id_error, "MAX_PUSH_ID went down");
                    s.max_push_id = id;
                },
                // We never promised a push: any push ID is one we did not name (7.2.3).
                .cancel_push => s.connError(.id_error, "CANCEL_PUSH for a push never promised"),
                .push_id, .headers, .push_promise, .data => s.connError(.frame_unexpected, "frame on the control stream"),
            }
        }

        fn uniType(s: *Self, u: *UniStream, t: frames.StreamType) void {
            const seen: *bool = switch (t) {
                .control => &s.peer_control,
                .qpack_encoder => &s.peer_encoder,
                .qpack_decoder => &s.peer_decoder,
                // A client's push stream is refused by the reader (6.2.2).
                .push => unreachable,
                .unknown => {
                    // Reserved or unknown types are ignored; the peer need not send more.
                    u.type = .ignored;
                    u.dropSettingsRoom(s.gpa);
                    s.transport.streamStopSending(u.id, @intFromEnum(ErrorCode.stream_creation_error));
                    return;
                },
            };
            if (seen.*) return s.connError(.stream_creation_error, "a second control or QPACK stream");
            seen.* = true;
            u.type = switch (t) {
                .control => .control,
                .qpack_encoder => .qpack_encoder,
                else => .qpack_decoder,
            };
            if (u.type != .control) u.dropSettingsRoom(s.gpa);
        }

        /// The peer's encoder stream: inserts into the table, then the streams they unblock.
        fn encoderBytes(s: *Self, bytes: []const u8) void {
            const decoder = s.useDecoder() catch return s.connError(.internal_error, "out of memory for the QPACK table");
            decoder.feedEncoderStream(bytes) catch |err| return switch (err) {
                error.OutOfMemory => s.connError(.internal_error, "out of memory for the QPACK table"),
                else => s.connError(.qpack_encoder_stream_error, "QPACK encoder stream"),
            };
            while (decoder.unblockedStream()) |id| {
                const rs = s.requests.get(id) orelse {
                    decoder.cancelStream(id) catch |err| return s.decoderOutputFailed(err);
                    continue;
                };
                s.resumeBlocked(rs);
                if (s.closed) return;
            }
            decoder.acknowledgeInserts() catch |err| return s.decoderOutputFailed(err);
            s.flushDecoderStream();
        }

        /// The peer's decoder stream. We keep no dynamic table and send no section that
        /// references one: a Section Acknowledgment or an Insert Count Increment can only
        /// be an error (RFC 9204 4.4.1, 4.4.3); Stream Cancellations are read and dropped.
        fn peerDecoderBytes(s: *Self, u: *UniStream, bytes: []const u8) void {
            for (bytes) |b| {
                if (u.partial_len == 0 and b & 0xc0 != 0x40) return s.connError(.qpack_decoder_stream_error, "acknowledgment of nothing we sent");
                u.partial[u.partial_len] = b;
                u.partial_len += 1;
                var pos: usize = 0;
                _ = qpack.decodeInt(u.partial[0..u.partial_len], &pos, 6) catch |err| switch (err) {
                    error.Truncated => {
                        if (u.partial_len == u.partial.len) return s.connError(.qpack_decoder_stream_error, "over-long integer");
                        continue;
                    },
                    error.Overflow => return s.connError(.qpack_decoder_stream_error, "over-long integer"),
                };
                u.partial_len = 0;
            }
        }

        // ---- request streams: reading -----------------------------------------------------

        fn readRequest(s: *Self, id: u64) void {
            if (s.requests.get(id)) |rs| return s.pump(rs);
            // A stream we ended (STOP_SENDING asked, or its FIN or reset read, or gone): late
            // bytes are read and dropped, never taken for a new request.
            if (s.transport.streamReceiveOver(id)) return s.drain(id);
            // A record only for a stream with something to read: a late event for a
            // stream the transport already forgot leaves nothing behind.
            const r = s.transport.streamRead(id, s.bufs.read_buf) catch return;
            if (r.n == 0 and !r.fin) return;
            const rs = s.openRequest(id) orelse return;
            rs.busy = true;
            s.requestBytes(rs, s.bufs.read_buf[0..r.n], r.fin);
            rs.busy = false;
            s.pump(rs);
        }

        /// Bytes of a stream we no longer keep: read and dropped.
        fn drain(s: *Self, id: u64) void {
            var guard: usize = 0;
            while (guard < 64) : (guard += 1) {
                const r = s.transport.streamRead(id, s.bufs.read_buf) catch return;
                if (r.n == 0 or r.fin) return;
            }
        }

        fn openRequest(s: *Self, id: u64) ?*RequestStream {
            if (s.closed) return null;
            s.next_request_id = @max(s.next_request_id, id + 4);
            // `no_id` is above every stream id: no GOAWAY refuses nothing.
            const refuse = id >= s.goaway_id or s.requests.count() >= s.config.streams_max;
            if (refuse) {
                // Not processed: the client may retry it elsewhere (RFC 9114 4.1.1).
                const code = @intFromEnum(ErrorCode.request_rejected);
                s.transport.streamStopSending(id, code);
                s.transport.streamReset(id, code);
                // Its HEADERS may reference the peer's table: release them (RFC 9204 4.4.2).
                s.cancelDecoding(id);
                s.flushDecoderStream();
                return null;
            }
            const gather = s.gpa.alloc(u8, s.config.field_section_bytes_max) catch {
                s.connError(.internal_error, "out of memory for a request stream");
                return null;
            };
            const rs = s.gpa.create(RequestStream) catch {
                s.gpa.free(gather);
                s.connError(.internal_error, "out of memory for a request stream");
                return null;
            };
            rs.* = RequestStream.init(id, gather);
            s.requests.put(s.gpa, id, rs) catch {
                rs.deinit(s.gpa);
                s.gpa.destroy(rs);
                s.connError(.internal_error, "out of memory for a request stream");
                return null;
            };
            return rs;
        }

        /// Reads a request stream while it may be read: not blocked, not paused, not done.
        fn pump(s: *Self, rs: *RequestStream) void {
            rs.busy = true;
            while (!s.closed and (rs.recv == .head or rs.recv == .body) and !rs.paused) {
                const r = s.transport.streamRead(rs.id, s.bufs.read_buf) catch break;
                if (r.n == 0 and !r.fin) break;
                s.requestBytes(rs, s.bufs.read_buf[0..r.n], r.fin);
                if (r.fin) break;
            }
            rs.busy = false;
            if (rs.recv == .done and rs.send == .done) s.maybeFree(rs);
        }

        fn requestBytes(s: *Self, rs: *RequestStream, bytes: []const u8, fin: bool) void {
            var rest = bytes;
            while (rest.len > 0 and !s.closed) {
                if (rs.recv == .done) return;
                if (rs.recv == .blocked) {
                    // Held until the section decodes: at most one read (the stream is not
                    // read again while blocked).
                    std.debug.assert(rs.held.items.len + rest.len <= read_bytes_max);
                    rs.held.appendSlice(s.gpa, rest) catch return s.connError(.internal_error, "out of memory");
                    break;
                }
                const step = rs.reader.next(rest) catch |err| return s.frameError(rs, err);
                rest = rest[step.consumed..];
                if (step.event) |ev| s.requestEvent(rs, ev);
            }
            if (!fin or s.closed) return;
            if (rs.recv == .blocked) {
                rs.fin_held = true;
                return;
            }
            s.requestFin(rs);
        }

        fn frameError(s: *Self, rs: *RequestStream, err: frames.Error) void {
            // A HEADERS payload past what we gather: the request is too large (see top).
            if (err == error.ExcessiveLoad) return s.streamError(rs, .excessive_load);
            s.connError(frames.errorCode(err), "request stream frames");
        }

        fn requestEvent(s: *Self, rs: *RequestStream, ev: frame_reader.Event) void {
            switch (ev) {
                .headers => |section| s.decodeSection(rs, section, rs.recv == .body),
                .data => |d| {
                    std.debug.assert(rs.recv == .body);
                    if (d.bytes.len == 0) return s.budget(&s.empty_in_window, s.config.empty_frames_per_second_max);
                    rs.body_received += d.bytes.len;
                    if (rs.content_length) |cl| if (rs.body_received > cl) return s.streamError(rs, .message_error);
                    s.owner.onBody(rs.id, d.bytes, false);
                },
                // The frame table keeps every other frame off a request stream to a server.
                else => s.connError(.frame_unexpected, "frame on a request stream"),
            }
        }

        fn requestFin(s: *Self, rs: *RequestStream) void {
            if (rs.recv == .done) return;
            rs.reader.finish() catch |err| return s.connError(frames.errorCode(err), "request stream cut inside a frame");
            // A stream that ends before its request is whole (RFC 9114 4.1.2).
            if (rs.recv == .head) return s.streamError(rs, .request_incomplete);
            if (rs.content_length) |cl| if (rs.body_received != cl) return s.streamError(rs, .message_error);
            rs.recv = .done;
            if (rs.dispatched) s.owner.onBody(rs.id, &.{}, true);
        }

        fn decodeSection(s: *Self, rs: *RequestStream, section: []const u8, trailers: bool) void {
            // An encoded Required Insert Count of 0 (the first byte, RFC 9204 4.5.1.1) means
            // no dynamic reference: without a decoder of our own, a fresh one on the stack
            // decodes it and is left as it was made (no block, no acknowledgment, 4.4.1).
            var fresh: qpack_decoder.Decoder = undefined;
            const decoder = if (s.decoder) |d| d else if (section.len > 0 and section[0] == 0) blk: {
                fresh = qpack_decoder.Decoder.initWith(s.gpa, decoderLimits(s.config));
                break :blk &fresh;
            } else s.useDecoder() catch return s.connError(.internal_error, "out of memory");
            defer if (decoder == &fresh) std.debug.assert(fresh.isPristine());
            const outcome = decoder.decodeSection(rs.id, section, s.bufs.scratch, s.bufs.decoded, .acknowledge) catch |err| return switch (err) {
                error.FieldSectionTooLarge => s.streamError(rs, .excessive_load),
                error.DecompressionFailed => s.connError(.qpack_decompression_failed, "field section"),
                error.DecoderStreamFull => s.connError(.excessive_load, "decoder stream full"),
                error.OutOfMemory => s.connError(.internal_error, "out of memory"),
                error.EncoderStream => unreachable,
            };
            s.flushDecoderStream();
            switch (outcome) {
                .blocked => {
                    // The reader hands the section in the stream's gather buffer, where it
                    // stays: the stream is not read until the section decodes.
                    std.debug.assert(section.ptr == rs.gather.ptr);
                    rs.recv = .blocked;
                    rs.blocked_len = section.len;
                    rs.blocked_trailers = trailers;
                },
                .fields => |list| if (trailers) s.trailersDecoded(rs, list) else s.requestDecoded(rs, list),
            }
        }

        fn resumeBlocked(s: *Self, rs: *RequestStream) void {
            std.debug.assert(rs.recv == .blocked);
            rs.busy = true;
            rs.recv = if (rs.blocked_trailers) .body else .head;
            s.decodeSection(rs, rs.gather[0..rs.blocked_len], rs.blocked_trailers);
            // The section left the gather buffer (its fields are delivered): what came
            // after it is read now, then the stream itself again.
            var held = rs.held;
            rs.held = .empty;
            defer held.deinit(s.gpa);
            const fin = rs.fin_held;
            rs.fin_held = false;
            if (!s.closed and rs.recv != .done and rs.recv != .blocked) s.requestBytes(rs, held.items, fin);
            rs.busy = false;
            if (!s.closed and rs.recv != .blocked) s.pump(rs) else s.maybeFree(rs);
        }

        fn requestDecoded(s: *Self, rs: *RequestStream, list: []const Header) void {
            var head: request_fields.RequestHead = .{};
            const opts = request_fields.Options{ .extended_connect = s.config.extended_connect };
            const headers = request_fields.check(list, &head, s.bufs.app_fields, s.bufs.cookies, opts) catch |err| return switch (err) {
                error.Malformed => s.streamError(rs, .message_error),
                error.TooMany, error.NoSpace => s.streamError(rs, .excessive_load),
            };
            const full = head.path orelse "";
            const q = std.mem.indexOfScalar(u8, full, '?');
            const view = Head{
                .method = head.method.?,
                .path = if (q) |i| full[0..i] else full,
                .query = if (q) |i| full[i + 1 ..] else "",
                .authority = head.authority orelse head.host,
                .scheme = head.scheme,
                .protocol = head.protocol,
                .headers = headers,
                .content_length = head.content_length,
                .te_trailers = head.te_trailers,
            };
            rs.content_length = head.content_length;
            rs.recv = .body;
            rs.dispatched = true;
            s.owner.onRequest(rs.id, &view);
        }

        fn trailersDecoded(s: *Self, rs: *RequestStream, list: []const Header) void {
            for (list) |f| {
                if (f.name.len == 0 or f.name[0] == ':') return s.streamError(rs, .message_error);
                for (f.name) |ch| if (ch >= 'A' and ch <= 'Z') return s.streamError(rs, .message_error);
                if (!response.validValue(f.value)) return s.streamError(rs, .message_error);
            }
            if (rs.dispatched) s.owner.onTrailers(rs.id, list);
        }

        /// The owner's backpressure on a request body: the stream is not read (QUIC's flow
        /// control then holds the client) until `resumeReading`.
        pub fn pauseReading(s: *Self, id: u64) void {
            if (s.requests.get(id)) |rs| rs.paused = true;
        }

        /// From inside a callback the stream is read once the event is handled: the read
        /// buffer may hold bytes still being delivered.
        pub fn resumeReading(s: *Self, id: u64) void {
            const rs = s.requests.get(id) orelse return;
            if (!rs.paused) return;
            rs.paused = false;
            if (rs.busy) return; // its own reading loop goes on
            if (s.read_depth > 0) {
                if (!rs.resume_due) s.resume_due += 1;
                rs.resume_due = true;
                return;
            }
            s.read_depth += 1;
            s.pump(rs);
            s.afterHandle();
        }

        // ---- request streams: responding ----------------------------------------------------

        const verbs = @import("stream_verbs.zig").Verbs(Self);
        pub const respond = verbs.respond;
        pub const earlyHint = verbs.earlyHint;
        pub const writeBody = verbs.writeBody;
        pub const writeTrailers = verbs.writeTrailers;
        pub const abort = verbs.abort;
        const flushPending = verbs.flushPending;

        pub fn abortStream(s: *Self, rs: *RequestStream, reason: AbortReason) void {
            const code: ErrorCode = switch (reason) {
                .internal => .internal_error,
                .cancelled => .request_cancelled,
            };
            s.endStream(rs, @intFromEnum(code), @intFromEnum(code), .abort);
        }

        pub fn freeIfDone(s: *Self, rs: *RequestStream) void {
            s.maybeFree(rs);
        }
    };
}

test {
    _ = @import("streams.zig");
    _ = @import("stream_verbs.zig");
    _ = @import("session_tests.zig");
}
