//! HTTP/3's requests as `core/stream.zig` `Stream`s (protocol `.http3`): the owner side of
//! `session.zig` for one QUIC connection (`worker.zig` `QuicConn`), and the stream verbs
//! the seam (`core/protocol.zig`) reaches through `verbs`, as it reaches
//! `http2/stream_verbs.zig`'s.
//!
//! Request bodies are kept per stream until the app takes them, at most `body_buffer_max`
//! bytes before the stream's reading pauses (QUIC's flow control then holds the client).
//! Response bytes the transport does not take at once (its windows) wait in the stream's
//! `out`, copied; the app's writer waits past `stream.queued_bytes_high` and is woken when
//! `onWritable` drained them. A file body (`sendFd`) is read into `out` one
//! `file_chunk_bytes` piece at a time as it drains.
const std = @import("std");
const sys = @import("../os/sys.zig");
const stream_mod = @import("../core/stream.zig");
const Stream = stream_mod.Stream;
const seam = @import("../core/protocol.zig");
const response = @import("../http/response.zig");
const session_mod = @import("session.zig");
const worker = @import("worker.zig");
const QuicConn = worker.QuicConn;
const Header = session_mod.Header;
const websocket = @import("websocket.zig");

/// Request body bytes kept before the stream's reading pauses (also a WebSocket's
/// received bytes not parsed yet).
pub const body_buffer_max = 256 * 1024;
const file_chunk_bytes = 64 * 1024;
/// Fields of a response head, engine's and app's together.
const head_fields_max = 160;

pub const H3Stream = struct {
    base: Stream,
    qc: *QuicConn,
    id: u64,
    body: std.ArrayListUnmanaged(u8) = .empty,
    body_fin: bool = false,
    /// Response bytes waiting for the transport, from `out_at`.
    out: std.ArrayListUnmanaged(u8) = .empty,
    out_at: usize = 0,
    /// The response ends after `out` (no trailers follow).
    out_fin: bool = false,
    /// Trailers to send once `out` is written.
    trailers: std.ArrayListUnmanaged([2][]u8) = .empty,
    trailers_ready: bool = false,
    file_fd: i32 = -1,
    file_off: u64 = 0,
    file_left: u64 = 0,
    /// The app holds the stream (until `finishStream`).
    held: bool = true,
    /// The session is done with it (sent whole, or reset).
    ended: bool = false,
    /// An extended CONNECT's WebSocket (RFC 9220): `body` from `body_off` holds its
    /// frames not parsed yet, `out` the frames for the client.
    ws: ?seam.WebSocketHeld = null,
    body_off: usize = 0,

    pub fn of(st: *const Stream) *H3Stream {
        return @alignCast(@constCast(@fieldParentPtr("base", st)));
    }

    pub fn gpa(h: *const H3Stream) std.mem.Allocator {
        return h.qc.worker.gpa;
    }

    pub fn pending(h: *const H3Stream) usize {
        return h.out.items.len - h.out_at;
    }
};

// ---- the session's owner callbacks (through `QuicConn`) -------------------------------

pub fn onRequest(qc: *QuicConn, id: u64, head: *const session_mod.Head) void {
    const gpa = qc.worker.gpa;
    const srv = qc.carrier.server;
    const h = gpa.create(H3Stream) catch return abortInSession(qc, id);
    h.* = .{ .base = Stream.init(&qc.carrier, .http3), .qc = qc, .id = id };
    qc.streams.put(gpa, id, h) catch {
        gpa.destroy(h);
        return abortInSession(qc, id);
    };
    qc.held += 1;
    const st = &h.base;
    st.is_head_method = std.mem.eql(u8, head.method, "HEAD");
    st.te_trailers = head.te_trailers;
    if (head.content_length) |n| {
        st.body_kind = if (n == 0) .none else .length;
        st.body_remaining = n;
        st.body_done = n == 0;
    } else {
        // No length: the body ends with the stream (an empty one at once, for most GETs).
        st.body_kind = .chunked;
        st.body_done = false;
    }
    var req: stream_mod.Request = .{
        .method = head.method,
        .path = head.path,
        .query = head.query,
        .authority = head.authority,
        .scheme = head.scheme,
        .headers = head.headers,
        .version = .http3,
    };
    srv.streamStarted();
    if (head.protocol) |protocol| if (websocket.open(h, protocol, head.headers)) |status| {
        _ = st.answerPlain(status, &.{}, response.reasonPhrase(status), &.{});
        st.finish();
        return;
    };
    if (st.prepare(&req)) |retry_after| {
        var buf: [16]u8 = undefined;
        const text = std.fmt.bufPrint(&buf, "{d}", .{retry_after}) catch "1";
        const fields = [_][2][]const u8{.{ "retry-after", text }};
        _ = st.answerPlain(429, &fields, response.reasonPhrase(429), &.{});
        st.finish();
        return;
    }
    if (!srv.hooks.onRequest(st, &req)) {
        _ = st.answerPlain(500, &.{}, response.reasonPhrase(500), &.{});
        st.finish();
    }
}

pub fn onBody(qc: *QuicConn, id: u64, bytes: []const u8, fin: bool) void {
    const h = qc.streams.get(id) orelse return;
    if (h.ws) |w| return websocket.onData(h, w, bytes, fin);
    const st = &h.base;
    if (bytes.len > 0) {
        h.body.appendSlice(h.gpa(), bytes) catch {
            abortStream(st);
            return;
        };
        st.body_received += bytes.len;
    }
    if (fin) {
        h.body_fin = true;
        st.body_done = true;
    }
    if (h.body.items.len >= body_buffer_max) qc.session.pauseReading(id);
    if (st.handle != null) st.conn.server.hooks.wakeRead(st);
}

pub fn onReset(qc: *QuicConn, id: u64) void {
    const h = qc.streams.get(id) orelse return;
    h.ended = true;
    h.base.reset = true;
    h.out.clearAndFree(h.gpa());
    h.out_at = 0;
    closeFile(h);
    if (h.held) {
        const st = &h.base;
        st.conn.server.hooks.wakeRead(st);
        st.conn.server.hooks.wakeWrite(st);
    }
    maybeFree(h);
}

pub fn onWritable(qc: *QuicConn, id: u64) void {
    const h = qc.streams.get(id) orelse return;
    // A WebSocket whose output went down reads again (its app was told to wait).
    if (h.ws) |w| {
        pushOutKept(h);
        if (h.pending() <= seam.websocket_out_bytes_high)
            seam.webSocketOutputDrained(&qc.carrier, w);
    }
    pushOut(h);
}

/// The drain's deadline: the connection's WebSockets are closed with 1001. True when
/// there was one. No stream leaves the map meanwhile: a session still to be closed is
/// open with its close unsent, so its app holds the stream (its end sends the close).
pub fn closeWebSockets(qc: *QuicConn) bool {
    var any = false;
    var it = qc.streams.valueIterator();
    while (it.next()) |hp| if (hp.*.ws) |w| {
        any = true;
        seam.webSocketGoingAway(&qc.carrier, w);
    };
    return any;
}

/// The QUIC connection is over: every stream is gone for its app.
pub fn connectionOver(qc: *QuicConn) void {
    var list: [64]*H3Stream = undefined;
    while (true) {
        var n: usize = 0;
        var it = qc.streams.valueIterator();
        while (it.next()) |hp| {
            if (hp.*.ended) continue;
            list[n] = hp.*;
            n += 1;
            if (n == list.len) break;
        }
        if (n == 0) return;
        for (list[0..n]) |h| onReset(qc, h.id);
    }
}

/// The server stops: streams an app holds are left to it no more (the engine goes).
pub fn detachAll(qc: *QuicConn) void {
    var it = qc.streams.valueIterator();
    while (it.next()) |hp| hp.*.held = false;
}

/// Frees every stream record (the connection is being freed).
pub fn freeAll(qc: *QuicConn) void {
    var it = qc.streams.valueIterator();
    while (it.next()) |hp| release(hp.*);
    qc.streams.clearRetainingCapacity();
}

fn release(h: *H3Stream) void {
    const a = h.gpa();
    if (h.ws) |w| seam.webSocketDestroy(&h.qc.carrier, w);
    h.ws = null;
    h.body.deinit(a);
    h.out.deinit(a);
    freeTrailers(h);
    closeFile(h);
    h.base.dropDecoder();
    a.destroy(h);
}

fn freeTrailers(h: *H3Stream) void {
    const a = h.gpa();
    for (h.trailers.items) |f| {
        a.free(f[0]);
        a.free(f[1]);
    }
    h.trailers.deinit(a);
    h.trailers = .empty;
}

fn closeFile(h: *H3Stream) void {
    if (h.file_fd >= 0) sys.close(h.file_fd);
    h.file_fd = -1;
    h.file_left = 0;
}

/// Freed once the app let go and the session is done with it (or it was reset).
fn maybeFree(h: *H3Stream) void {
    if (h.held or !h.ended) return;
    const qc = h.qc;
    _ = qc.streams.remove(h.id);
    release(h);
    qc.touched();
}

// ---- output -----------------------------------------------------------------------------

/// Moves waiting response bytes (a file's next piece, trailers, the FIN) to the session;
/// the stream is freed if that was its end and its app let go.
fn pushOut(h: *H3Stream) void {
    pushOutKept(h);
    maybeFree(h);
}

/// `pushOut`, the stream kept: a WebSocket's frames are queued from inside its session.
pub fn pushOutKept(h: *H3Stream) void {
    const st = &h.base;
    const s = h.qc.session;
    var guard: usize = 0;
    while (!h.ended and guard < 1024) : (guard += 1) {
        if (h.pending() == 0 and h.file_left > 0) {
            if (!readFileChunk(h)) return abortStream(st);
        }
        const rest = h.out.items[h.out_at..];
        const fin_now = h.out_fin and h.file_left == 0;
        if (rest.len > 0 or (fin_now and !h.trailers_ready)) {
            const n = s.writeBody(h.id, rest, fin_now and !h.trailers_ready) catch return gone(h);
            h.out_at += n;
            if (n < rest.len) break;
            h.out.clearRetainingCapacity();
            h.out_at = 0;
            if (h.file_left > 0) continue;
            if (fin_now) h.ended = true;
        }
        if (h.pending() == 0 and h.file_left == 0 and h.trailers_ready) {
            var fields: [head_fields_max]Header = undefined;
            const n = @min(h.trailers.items.len, fields.len);
            for (h.trailers.items[0..n], 0..) |f, i| fields[i] = .{ .name = f[0], .value = f[1] };
            s.writeTrailers(h.id, fields[0..n]) catch return gone(h);
            h.trailers_ready = false;
            freeTrailers(h);
            h.ended = true;
        }
        break;
    }
    if (h.pending() == 0 and h.out.capacity > file_chunk_bytes) {
        h.out.clearAndFree(h.gpa());
        h.out_at = 0;
    }
    h.qc.touched();
    if (st.write_blocked and !mustWait(st)) {
        st.write_blocked = false;
        if (h.held) st.conn.server.hooks.wakeWrite(st);
    }
}

fn readFileChunk(h: *H3Stream) bool {
    const n: usize = @intCast(@min(h.file_left, file_chunk_bytes));
    h.out.clearRetainingCapacity();
    h.out_at = 0;
    h.out.ensureTotalCapacity(h.gpa(), n) catch return false;
    const buf = h.out.allocatedSlice()[0..n];
    const rc = std.os.linux.pread(h.file_fd, buf.ptr, n, @intCast(h.file_off));
    if (sys.E.init(rc) != .SUCCESS or rc == 0) return false;
    h.out.items.len = rc;
    h.file_off += rc;
    h.file_left -= rc;
    if (h.file_left == 0) closeFile(h);
    return true;
}

/// The session no longer has the stream (the connection ended): the app sees a disconnect.
fn gone(h: *H3Stream) void {
    onReset(h.qc, h.id);
}

// ---- the stream verbs -------------------------------------------------------------------

pub const verbs: seam.Http3Verbs = .{
    .stream = .{
        .mustWait = mustWait,
        .takeBody = takeBody,
        .bodyConsumed = bodyConsumed,
        .awaitBody = awaitBody,
        .startResponse = startResponse,
        .earlyHint = earlyHint,
        .writeTrailers = writeTrailers,
        .writeBody = writeBody,
        .sendFd = sendFd,
        .finishStream = finishStream,
    },
    .abortStream = abortStream,
    .tlsSummary = tlsSummary,
    .wsSession = websocket.sessionOf,
    .carrier = websocket.carrier_verbs,
};

fn tlsSummary(st: *const Stream) ?*const @import("../transport/openssl.zig").SessionSummary {
    return H3Stream.of(st).qc.quic.tlsSummary();
}

fn mustWait(st: *const Stream) bool {
    const h = H3Stream.of(st);
    return h.pending() > stream_mod.queued_bytes_high or h.file_left > 0;
}

fn takeBody(st: *Stream, segs: [][]const u8) stream_mod.TakeResult {
    const h = H3Stream.of(st);
    if (st.gone()) return .{ .count = 0, .done = false, .failed = true };
    if (h.body.items.len > 0) {
        segs[0] = h.body.items;
        return .{ .count = 1, .done = h.body_fin, .failed = false };
    }
    return .{ .count = 0, .done = h.body_fin, .failed = false };
}

fn bodyConsumed(st: *Stream) void {
    const h = H3Stream.of(st);
    const had = h.body.items.len;
    if (h.body.capacity > body_buffer_max) h.body.clearAndFree(h.gpa()) else h.body.clearRetainingCapacity();
    if (had >= body_buffer_max and !h.ended) {
        h.qc.session.resumeReading(h.id);
        h.qc.touched();
    }
}

fn awaitBody(st: *Stream) void {
    // QUIC's idle timeout bounds a client that stops sending.
    _ = st;
}

/// HTTP/1.1's connection-specific fields, which HTTP/3 forbids (RFC 9114 4.2).
fn connectionSpecific(name: []const u8) bool {
    for ([_][]const u8{ "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade" }) |n| {
        if (std.ascii.eqlIgnoreCase(name, n)) return true;
    }
    return false;
}

/// The head's fields, names lower-cased into `names` (the engine's `server` and `date`
/// first, then `extra`, then the app's).
fn headFields(st: *Stream, headers: []const [2][]const u8, extra: []const [2][]const u8, out: []Header, names: []u8) stream_mod.StartError![]Header {
    const srv = st.conn.server;
    var n: usize = 0;
    var at: usize = 0;
    if (srv.opts.server_header) {
        out[n] = .{ .name = "server", .value = "zigcorn" };
        n += 1;
    }
    if (srv.opts.date_header) {
        const line = srv.date.get();
        out[n] = .{ .name = "date", .value = line["date: ".len .. line.len - 2] };
        n += 1;
    }
    for ([_][]const [2][]const u8{ extra, headers }) |list| for (list) |f| {
        if (connectionSpecific(f[0])) continue;
        if (!response.validName(f[0]) or !response.validValue(f[1])) return error.InvalidHeader;
        if (n == out.len or at + f[0].len > names.len) return error.HeadTooLarge;
        // The body's length is checked against it as it is written (`writeBody`).
        if (std.ascii.eqlIgnoreCase(f[0], "content-length")) {
            if (st.resp_length != null) return error.InvalidHeader;
            st.resp_length = std.fmt.parseInt(u64, std.mem.trim(u8, f[1], " \t"), 10) catch return error.InvalidHeader;
        }
        const name = names[at..][0..f[0].len];
        for (f[0], 0..) |ch, i| name[i] = std.ascii.toLower(ch);
        at += f[0].len;
        out[n] = .{ .name = name, .value = f[1] };
        n += 1;
    };
    return out[0..n];
}

pub fn startResponse(
    st: *Stream,
    status: u16,
    headers: []const [2][]const u8,
    extra: []const [2][]const u8,
    trailers: bool,
) stream_mod.StartError!void {
    const h = H3Stream.of(st);
    if (st.resp_started) return error.AlreadyStarted;
    st.resp_trailers = trailers;
    st.status = status;
    st.resp_no_body = response.statusHasNoBody(status) or st.is_head_method;
    if (st.gone()) {
        st.resp_started = true;
        return;
    }
    var fields: [head_fields_max]Header = undefined;
    var names: [8 * 1024]u8 = undefined;
    const list = try headFields(st, headers, extra, &fields, &names);
    h.qc.session.respond(h.id, status, list) catch |e| switch (e) {
        error.InvalidHeader => return error.InvalidHeader,
        error.HeadTooLarge => return error.HeadTooLarge,
        error.OutOfMemory => return error.OutOfMemory,
        else => {
            gone(h);
            st.resp_started = true;
            return;
        },
    };
    st.resp_started = true;
    st.resp_head_sent = true;
    h.qc.touched();
}

fn earlyHint(st: *Stream, links: []const []const u8) stream_mod.StartError!void {
    const h = H3Stream.of(st);
    if (st.resp_started) return error.AlreadyStarted;
    if (st.gone()) return;
    var fields: [32]Header = undefined;
    const n = @min(links.len, fields.len);
    for (links[0..n], 0..) |l, i| {
        if (!response.validValue(l)) return error.InvalidHeader;
        fields[i] = .{ .name = "link", .value = l };
    }
    h.qc.session.earlyHint(h.id, fields[0..n]) catch |e| switch (e) {
        error.InvalidHeader => return error.InvalidHeader,
        error.HeadTooLarge => return error.HeadTooLarge,
        error.OutOfMemory => return error.OutOfMemory,
        else => return,
    };
    h.qc.touched();
}

fn writeBody(st: *Stream, data: []const u8, more: bool, owner: ?*anyopaque) stream_mod.WriteError!bool {
    _ = owner; // what the transport does not take is copied
    const h = H3Stream.of(st);
    if (!st.resp_started) return error.NotStarted;
    if (st.resp_complete or st.resp_body_done) return error.AlreadyComplete;
    // As over HTTP/1.1 and HTTP/2: more body than the content-length, or less at its end,
    // is refused (the app's send raises; the stream is reset when the app ends).
    if (!st.gone()) if (st.resp_length) |n| if (!st.resp_no_body) {
        if (st.resp_body_bytes + data.len > n) return error.TooMuchBody;
        if (!more and st.resp_body_bytes + data.len < n) return error.TooLittleBody;
    };
    if (!more) {
        st.resp_body_done = true;
        if (!st.resp_trailers) st.resp_complete = true;
    }
    if (st.gone()) return false;
    const body = if (st.resp_no_body) data[0..0] else data;
    st.resp_body_bytes += body.len;
    h.out.appendSlice(h.gpa(), body) catch return error.OutOfMemory;
    if (!more and !st.resp_trailers) h.out_fin = true;
    pushOut(h);
    if (mustWait(st)) {
        st.write_blocked = true;
        return true;
    }
    return false;
}

fn writeTrailers(st: *Stream, fields: []const [2][]const u8, more: bool) stream_mod.TrailersError!bool {
    const h = H3Stream.of(st);
    if (!st.resp_trailers) return error.NotDeclared;
    if (!st.resp_body_done) return error.BodyNotDone;
    if (st.resp_complete) return error.AlreadyComplete;
    if (!more) st.resp_complete = true;
    if (st.gone()) return false;
    const a = h.gpa();
    for (fields) |f| {
        if (!response.validName(f[0]) or !response.validValue(f[1])) return error.InvalidHeader;
        if (h.trailers.items.len >= head_fields_max) return error.InvalidHeader;
        const name = a.alloc(u8, f[0].len) catch return error.OutOfMemory;
        for (f[0], 0..) |ch, i| name[i] = std.ascii.toLower(ch);
        const value = a.dupe(u8, f[1]) catch {
            a.free(name);
            return error.OutOfMemory;
        };
        h.trailers.append(a, .{ name, value }) catch {
            a.free(name);
            a.free(value);
            return error.OutOfMemory;
        };
    }
    if (!more) {
        h.trailers_ready = true;
        pushOut(h);
    }
    return false;
}

fn sendFd(st: *Stream, fd: i32, offset: u64, len: u64) stream_mod.FileError!void {
    const h = H3Stream.of(st);
    st.resp_body_done = true;
    st.resp_complete = true;
    if (st.gone() or st.resp_no_body or len == 0) {
        sys.close(fd);
        h.out_fin = true;
        if (!st.gone()) pushOut(h);
        return;
    }
    closeFile(h);
    h.file_fd = fd;
    h.file_off = offset;
    h.file_left = len;
    h.out_fin = true;
    pushOut(h);
}

fn finishStream(st: *Stream) void {
    const h = H3Stream.of(st);
    std.debug.assert(h.held);
    st.handle = null;
    st.write_blocked = false;
    st.conn.server.streamFinished();
    if (h.ws) |w| if (seam.webSocketOpen(st.conn, w)) {
        // An accepted WebSocket: closed normally if the app did not; the stream ends
        // with our close frame, the peer's close follows.
        seam.webSocketFinished(st.conn, w);
        st.resp_complete = true;
    };
    // Still held while it is answered or aborted here: only the last line frees it.
    if (!h.ended and !st.resp_complete and !st.reset) {
        if (!st.resp_started) {
            // The app ended without a response: 500, as over HTTP/2.
            _ = st.answerPlain(500, &.{}, response.reasonPhrase(500), &.{});
            if (!st.resp_complete) abortStream(st);
        } else abortStream(st);
    }
    h.held = false;
    h.qc.held -= 1;
    maybeFree(h);
}

/// RESET_STREAM and STOP_SENDING (H3_INTERNAL_ERROR) for a stream we do not serve to
/// the end. The session refuses only a stream it no longer holds (the connection closed,
/// or the stream ended both ways and was freed): then nothing is left to reset.
fn abortInSession(qc: *QuicConn, id: u64) void {
    qc.session.abort(id, .internal) catch |err| switch (err) {
        error.Closed, error.UnknownStream => {},
    };
}

pub fn abortStream(st: *Stream) void {
    const h = H3Stream.of(st);
    if (h.ended) return;
    abortInSession(h.qc, h.id);
    h.ended = true;
    st.reset = true;
    h.out.clearAndFree(h.gpa());
    h.out_at = 0;
    closeFile(h);
    h.qc.touched();
    maybeFree(h);
}
