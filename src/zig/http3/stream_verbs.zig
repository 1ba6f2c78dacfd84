//! The response verbs of an HTTP/3 session (`session.zig`), for the owner: a response's
//! HEADERS (QPACK, static-only), a 103, DATA with the transport's backpressure, trailers,
//! an abort. What the transport does not accept of an engine-made frame waits in the
//! stream's `pending` and goes first on `writable`; a DATA frame cut short stays open
//! (`data_left`): the owner offers the bytes it was not able to write again, first.
const std = @import("std");
const frames = @import("frames.zig");
const varint = frames.varint;
const qpack = @import("qpack.zig");
const qpack_encoder = @import("qpack_encoder.zig");
const streams = @import("streams.zig");
const response = @import("../http/response.zig");
const session = @import("session.zig");

const Header = qpack.Header;
const RequestStream = streams.RequestStream;
const VerbError = session.VerbError;
const AbortReason = session.AbortReason;
const data_frame_bytes_max = session.data_frame_bytes_max;

pub fn Verbs(comptime S: type) type {
    return struct {
        /// The errors of `get` (and of `abort`): the session holds no such stream.
        pub const Gone = error{ Closed, UnknownStream };

        fn get(s: *S, id: u64) Gone!*RequestStream {
            if (s.closed) return error.Closed;
            return s.requests.get(id) orelse error.UnknownStream;
        }

        /// The final response's HEADERS (status 200..999: a 1xx is `earlyHint`'s).
        pub fn respond(s: *S, id: u64, status: u16, headers: []const Header) VerbError!void {
            const rs = try get(s, id);
            if (rs.send != .idle) return error.AlreadyStarted;
            if (status < 200 or status > 999) return error.InvalidHeader;
            try checkFields(headers);
            const frame = try encodeHead(s, status, headers, .response);
            rs.send = .open;
            try writeEngine(s, rs, frame, false);
        }

        /// A 103 (Early Hints, RFC 8297) before the final response.
        pub fn earlyHint(s: *S, id: u64, headers: []const Header) VerbError!void {
            const rs = try get(s, id);
            if (rs.send != .idle) return error.AlreadyStarted;
            try checkFields(headers);
            try writeEngine(s, rs, try encodeHead(s, 103, headers, .response), false);
        }

        /// Trailers end the response (with the FIN).
        pub fn writeTrailers(s: *S, id: u64, headers: []const Header) VerbError!void {
            const rs = try get(s, id);
            switch (rs.send) {
                .idle => return error.NotStarted,
                .open => {},
                .trailers, .done => return error.AlreadyComplete,
            }
            if (rs.data_left > 0) return error.FrameOpen;
            try checkFields(headers);
            const frame = try encodeHead(s, 0, headers, .trailers);
            rs.send = .trailers;
            try writeEngine(s, rs, frame, true);
        }

        /// Body bytes in DATA frames; returns how many the transport accepted (the rest
        /// is offered again after `onWritable`). `fin` ends the response once every byte
        /// is accepted; an empty write with `fin` ends it after what was sent.
        pub fn writeBody(s: *S, id: u64, bytes: []const u8, fin: bool) VerbError!usize {
            const rs = try get(s, id);
            switch (rs.send) {
                .idle => return error.NotStarted,
                .open => {},
                .trailers, .done => return error.AlreadyComplete,
            }
            if (fin and rs.data_left > bytes.len) return error.FrameOpen;
            if (rs.pending.items.len > 0) {
                _ = flushPending(s, rs);
                if (rs.pending.items.len > 0) {
                    if (fin and bytes.len == 0 and rs.data_left == 0) {
                        rs.fin_wanted = true;
                        rs.send = .trailers;
                    }
                    return 0;
                }
            }
            var done: usize = 0;
            while (done < bytes.len) {
                if (rs.data_left == 0 and !try announceData(s, rs, @min(bytes.len - done, data_frame_bytes_max))) return done;
                const rest = bytes[done..];
                const take: usize = @intCast(@min(rest.len, rs.data_left));
                const last = fin and take == rest.len and take == rs.data_left;
                const n = s.transport.streamWrite(rs.id, rest[0..take], last) catch return gone(s, rs);
                done += n;
                rs.data_left -= n;
                if (n < take) return done;
                if (last) {
                    rs.send = .done;
                    s.freeIfDone(rs);
                    return done;
                }
            }
            if (fin) try writeEngine(s, rs, &.{}, true);
            return done;
        }

        /// A DATA frame header for `len` payload bytes; false when it did not all go.
        fn announceData(s: *S, rs: *RequestStream, len: usize) VerbError!bool {
            std.debug.assert(rs.data_left == 0 and rs.pending.items.len == 0 and len > 0);
            var hdr: [16]u8 = undefined;
            const h = frames.writeFrameHeader(&hdr, 0, .data, len) catch unreachable;
            rs.data_left = len;
            const n = s.transport.streamWrite(rs.id, hdr[0..h], false) catch return gone(s, rs);
            if (n == h) return true;
            rs.pending.appendSlice(s.gpa, hdr[n..h]) catch return error.OutOfMemory;
            return false;
        }

        /// RESET_STREAM and STOP_SENDING (H3_INTERNAL_ERROR or H3_REQUEST_CANCELLED).
        pub fn abort(s: *S, id: u64, reason: AbortReason) Gone!void {
            const rs = try get(s, id);
            s.abortStream(rs, reason);
        }

        /// Writes what waits; true when nothing does and the response may go on.
        pub fn flushPending(s: *S, rs: *RequestStream) bool {
            if (rs.send == .done) return false;
            const fin = rs.fin_wanted;
            if (rs.pending.items.len > 0 or fin) {
                const n = s.transport.streamWrite(rs.id, rs.pending.items, fin) catch {
                    forget(s, rs);
                    return false;
                };
                const left = rs.pending.items.len - n;
                std.mem.copyForwards(u8, rs.pending.items[0..left], rs.pending.items[n..]);
                rs.pending.shrinkRetainingCapacity(left);
                if (left > 0) return false;
                rs.pending.clearAndFree(s.gpa);
                if (fin) {
                    rs.fin_wanted = false;
                    rs.send = .done;
                    s.freeIfDone(rs);
                    return false;
                }
            }
            return rs.send == .open;
        }

        /// An engine-made frame (or the bare FIN): written, or its rest kept in order.
        fn writeEngine(s: *S, rs: *RequestStream, bytes: []const u8, fin: bool) VerbError!void {
            var rest = bytes;
            if (rs.pending.items.len == 0) {
                const n = s.transport.streamWrite(rs.id, rest, fin) catch return gone(s, rs);
                if (n == rest.len) {
                    if (fin) {
                        rs.send = .done;
                        s.freeIfDone(rs);
                    }
                    return;
                }
                rest = rest[n..];
            }
            rs.pending.appendSlice(s.gpa, rest) catch return error.OutOfMemory;
            if (fin) rs.fin_wanted = true;
        }

        /// The transport no longer knows the stream: our side of it is over, and the
        /// verb that found it so fails with UnknownStream.
        fn gone(s: *S, rs: *RequestStream) VerbError {
            forget(s, rs);
            return error.UnknownStream;
        }

        /// Our side of a stream the transport no longer knows is over (`flushPending`
        /// reports it as nothing more to write; a verb, with `gone`).
        fn forget(s: *S, rs: *RequestStream) void {
            rs.send = .done;
            rs.pending.clearAndFree(s.gpa);
            rs.data_left = 0;
            rs.fin_wanted = false;
            s.freeIfDone(rs);
        }

        const Section = enum { response, trailers };

        /// A HEADERS frame in the session's encode buffer: the section is written after
        /// room for the frame header, which then goes just before it.
        fn encodeHead(s: *S, status: u16, headers: []const Header, kind: Section) VerbError![]const u8 {
            // RFC 9114 4.2.2: no section past the peer's SETTINGS_MAX_FIELD_SECTION_SIZE.
            var size: u64 = if (kind == .response) ":status".len + 3 + qpack.entry_overhead else 0;
            for (headers) |h| size += h.name.len + h.value.len + qpack.entry_overhead;
            if (size > s.peer_field_section_max) return error.HeadTooLarge;
            const room = S.frame_header_room;
            const body = s.bufs.encode_buf[room..];
            const p = switch (kind) {
                .response => qpack_encoder.encodeResponse(body, status, headers),
                .trailers => qpack_encoder.encodeTrailers(body, headers),
            } catch return error.HeadTooLarge;
            const k = varint.len(@intFromEnum(frames.FrameType.headers)) + varint.len(p);
            const end = frames.writeFrameHeader(s.bufs.encode_buf, room - k, .headers, p) catch unreachable;
            std.debug.assert(end == room);
            return s.bufs.encode_buf[room - k .. room + p];
        }

        /// Response fields: lower-case valid names (HTTP/3 forbids upper case on the
        /// wire, RFC 9114 4.2), values without CR, LF or NUL, no pseudo-header.
        fn checkFields(headers: []const Header) VerbError!void {
            for (headers) |h| {
                if (!response.validName(h.name) or !response.validValue(h.value)) return error.InvalidHeader;
                for (h.name) |ch| if (ch >= 'A' and ch <= 'Z') return error.InvalidHeader;
            }
        }
    };
}
