//! The stream verbs over HTTP/2, called by `core/stream.zig` for the app: read the
//! request body, start a response, write its body, trailers or a file, finish, abort.
const std = @import("std");
const sys = @import("../os/sys.zig");
const hpack = @import("hpack.zig");
const response = @import("../http/response.zig");
const stream_mod = @import("../core/stream.zig");
const Stream = stream_mod.Stream;
const answers = @import("../features/answers.zig");
const seam = @import("../core/protocol.zig"); // RFC 8441: a WebSocket on a stream, through the seam's hand-over verbs
const request = @import("request.zig");
const scratch = @import("../http/scratch.zig");

const errors = @import("errors.zig");
const flow_control = @import("flow_control.zig");
const header_blocks = @import("header_blocks.zig");
const scheduler = @import("scheduler.zig");
const state = @import("state.zig");
const streams = @import("streams.zig");
const observe = errors.observe;
const refuseStream = errors.refuseStream;
const streamError = errors.streamError;
const streamErrorFor = errors.streamErrorFor;
pub const encodeHeadStart = errors.encodeHeadStart;
const creditStream = flow_control.creditStream;
const flushSoon = scheduler.flushSoon;
const mustWait = scheduler.mustWait;
const pushItem = scheduler.pushItem;
const releaseItem = scheduler.releaseItem;
const Session = state.Session;
const rearm = state.rearm;
const H2Stream = streams.H2Stream;
const Item = streams.Item;
const freeStream = streams.freeStream;
const maybeFree = streams.maybeFree;

pub var encode_scratch: [512]u8 = undefined;

/// Body messages up to this size are copied into the stream's output, so no Python
/// object waits on the connection; larger ones are borrowed from their owner.
const copy_bytes_max = 4096;
/// A request body buffer up to this capacity is kept for the next bytes once read.
const body_keep_bytes = 64 * 1024;
/// The most an engine-made header block (early hints, trailers) may take, and what a
/// response head may take beyond the request head limit.
const block_bytes_max = 1024 * 1024;

pub fn takeBody(st: *Stream, segs: [][]const u8) stream_mod.TakeResult {
    const h = H2Stream.of(st);
    var r = stream_mod.TakeResult{ .count = 0, .done = false, .failed = false };
    if (st.gone()) {
        r.failed = true;
        return r;
    }
    const avail = h.body.items[h.body_off..];
    if (avail.len > 0 and segs.len > 0) {
        segs[0] = avail;
        r.count = 1;
        h.body_taken = avail.len;
    }
    r.done = h.remote_closed;
    return r;
}

pub fn bodyConsumed(st: *Stream) void {
    const h = H2Stream.of(st);
    const s = h.session;
    if (h.body_taken == 0 or st.gone()) return;
    const n = h.body_taken;
    h.body_taken = 0;
    h.body_off += n;
    if (h.body_off == h.body.items.len) {
        h.body_off = 0;
        // A body buffer that grew large is given back; a small one is kept for the next.
        if (h.body.capacity > body_keep_bytes) h.body.clearAndFree(h.session.gpa) else h.body.clearRetainingCapacity();
    }
    creditStream(s, h, n);
    flushSoon(s.conn);
}

pub fn awaitBody(st: *Stream) void {
    const h = H2Stream.of(st);
    if (h.remote_closed or st.gone()) return;
    h.awaiting_body = true;
    rearm(st.conn);
}

/// Serialises the response head (HPACK) into the stream's staged block.
pub fn startResponse(st: *Stream, status: u16, headers: []const [2][]const u8, extra: []const [2][]const u8, trailers: bool) stream_mod.StartError!void {
    const h = H2Stream.of(st);
    if (st.resp_started) return error.AlreadyStarted;
    st.resp_trailers = trailers;
    if (st.gone()) {
        st.resp_started = true;
        return;
    }
    st.status = status;
    st.resp_no_body = response.statusHasNoBody(status) or st.is_head_method;
    const srv = st.conn.server;
    var need: usize = 64 + 48;
    for (headers) |f| need += f[0].len + f[1].len + 12;
    for (extra) |f| need += f[0].len + f[1].len + 12;
    if (need > srv.opts.limits.head_bytes_max + block_bytes_max) return error.HeadTooLarge;
    const block = h.session.gpa.alloc(u8, need) catch return error.OutOfMemory;
    errdefer h.session.gpa.free(block);
    var n = encodeHeadStart(block, srv, status) catch return error.HeadTooLarge;
    for (extra) |f| n += encodeResponseField(block[n..], f[0], f[1], st) catch |e| return e;
    for (headers) |f| n += encodeResponseField(block[n..], f[0], f[1], st) catch |e| return e;
    // The unused tail of the allocation stays with it (freed as one).
    h.head_block = block[0..n];
    h.head_alloc = block.len;
    st.resp_started = true;
}

/// One response field, lower-cased; HTTP/1.1's connection-specific fields are dropped.
pub fn encodeResponseField(buf: []u8, name: []const u8, value: []const u8, st: *Stream) stream_mod.StartError!usize {
    if (!response.validName(name) or !response.validValue(value)) return error.InvalidHeader;
    if (name.len > encode_scratch.len) return error.HeadTooLarge;
    scratch.claim();
    const lower = std.ascii.lowerString(encode_scratch[0..name.len], name);
    for (request.connection_specific) |cs| if (std.mem.eql(u8, lower, cs)) return 0;
    if (std.mem.eql(u8, lower, "content-length")) {
        if (st.resp_length != null) return error.InvalidHeader;
        st.resp_length = std.fmt.parseInt(u64, std.mem.trim(u8, value, " \t"), 10) catch return error.InvalidHeader;
    }
    return hpack.encodeField(buf, lower, value) catch error.HeadTooLarge;
}

/// The staged head joins the stream's output, with END_STREAM when nothing follows.
pub fn pushHead(st: *Stream, end_stream: bool) error{OutOfMemory}!void {
    const h = H2Stream.of(st);
    const block = h.head_block orelse return;
    try pushItem(h, .{ .kind = .headers, .end_stream = end_stream, .owned = true, .bytes = block, .alloc_len = h.head_alloc });
    h.head_block = null;
    if (end_stream) h.end_queued = true;
}

pub fn earlyHint(st: *Stream, links: []const []const u8) stream_mod.StartError!void {
    const h = H2Stream.of(st);
    if (st.resp_started) return error.AlreadyStarted;
    for (links) |l| if (!response.validValue(l)) return error.InvalidHeader;
    if (st.gone()) return;
    var need: usize = 16;
    for (links) |l| need += l.len + 12;
    if (need > block_bytes_max) return error.HeadTooLarge;
    const block = h.session.gpa.alloc(u8, need) catch return error.OutOfMemory;
    var n = hpack.encodeStatus(block, 103) catch unreachable;
    for (links) |l| n += hpack.encodeField(block[n..], "link", l) catch unreachable;
    pushItem(h, .{ .kind = .headers, .end_stream = false, .owned = true, .bytes = block[0..n], .alloc_len = block.len }) catch {
        h.session.gpa.free(block);
        return error.OutOfMemory;
    };
    flushSoon(st.conn);
}

/// The response is whole: an app waiting in `receive()` after its body now sees the
/// disconnect (as over HTTP/1.1, once the response is sent).
pub fn responseCompleted(st: *Stream) void {
    if (st.handle != null) H2Stream.of(st).session.sink.wakeRead(st);
}

pub fn writeBody(st: *Stream, data: []const u8, more: bool, owner: ?*anyopaque) stream_mod.WriteError!bool {
    const h = H2Stream.of(st);
    const conn = st.conn;
    if (!st.resp_started) return error.NotStarted;
    if (st.resp_complete or st.resp_body_done) return error.AlreadyComplete;
    if (st.gone()) {
        if (!more) {
            st.resp_body_done = true;
            if (!st.resp_trailers) st.resp_complete = true;
        }
        return false;
    }
    if (st.resp_length) |n| if (!st.resp_no_body) {
        if (st.resp_body_bytes + data.len > n) return error.TooMuchBody;
        if (!more and st.resp_body_bytes + data.len < n) return error.TooLittleBody;
    };
    const body = if (st.resp_no_body) data[0..0] else data;
    const ends = !more and !st.resp_trailers;
    if (h.head_block != null) {
        pushHead(st, ends and body.len == 0) catch return error.OutOfMemory;
    }
    st.resp_body_bytes += body.len;
    if (body.len > 0 or (ends and !h.end_queued)) {
        var item = Item{ .kind = .data, .end_stream = ends, .owned = false, .bytes = body };
        if (body.len <= copy_bytes_max or owner == null) {
            // Small bodies are copied: no Python object waits on the connection.
            const copy = h.session.gpa.dupe(u8, body) catch return error.OutOfMemory;
            item.owned = true;
            item.bytes = copy;
            item.alloc_len = copy.len;
        } else {
            item.owner = owner;
            conn.server.hooks.retain(owner.?);
        }
        pushItem(h, item) catch {
            releaseItem(h.session, &item);
            return error.OutOfMemory;
        };
    }
    if (!more) {
        st.resp_body_done = true;
        if (!st.resp_trailers) st.resp_complete = true;
    }
    flushSoon(conn);
    if (st.resp_complete) responseCompleted(st);
    if (conn.state == .closed or st.gone()) return false;
    const wait = mustWait(st);
    st.write_blocked = wait;
    return wait;
}

pub fn writeTrailers(st: *Stream, fields: []const [2][]const u8, more: bool) stream_mod.TrailersError!bool {
    const h = H2Stream.of(st);
    const conn = st.conn;
    if (!st.resp_trailers) return error.NotDeclared;
    if (st.resp_complete) return error.AlreadyComplete;
    if (!st.resp_body_done) return error.BodyNotDone;
    for (fields) |f| {
        if (!response.validName(f[0]) or !response.validValue(f[1])) return error.InvalidHeader;
        if (!answers.trailerAllowed(f[0])) return error.Forbidden;
    }
    if (st.gone()) {
        if (!more) st.resp_complete = true;
        return false;
    }
    // The response is complete only once its last frame is queued: a trailer block that
    // fails here (memory, size) leaves it incomplete, so the app's finish resets the
    // stream instead of leaving it open with no END_STREAM.
    for (fields) |f| {
        if (f[0].len > encode_scratch.len) return error.InvalidHeader;
        scratch.claim();
        const lower = std.ascii.lowerString(encode_scratch[0..f[0].len], f[0]);
        const at = h.trailer_block.items.len;
        h.trailer_block.ensureUnusedCapacity(h.session.gpa, f[0].len + f[1].len + 12) catch return error.OutOfMemory;
        h.trailer_block.items.len = at + (hpack.encodeField(h.trailer_block.unusedCapacitySlice(), lower, f[1]) catch return error.OutOfMemory);
        if (h.trailer_block.items.len > block_bytes_max) return error.InvalidHeader;
    }
    if (more) return false;
    if (h.head_block != null) pushHead(st, false) catch return error.OutOfMemory;
    if (h.trailer_block.items.len == 0) {
        // No fields after all: an empty DATA frame ends the stream.
        pushItem(h, .{ .kind = .data, .end_stream = true, .owned = false, .bytes = &.{} }) catch return error.OutOfMemory;
    } else {
        const block = h.trailer_block.toOwnedSlice(h.session.gpa) catch return error.OutOfMemory;
        h.trailer_block = .{};
        pushItem(h, .{ .kind = .headers, .end_stream = true, .owned = true, .bytes = block, .alloc_len = block.len }) catch {
            h.session.gpa.free(block);
            return error.OutOfMemory;
        };
    }
    st.resp_complete = true;
    flushSoon(conn);
    responseCompleted(st);
    return false;
}

/// `http.response.pathsend` over HTTP/2: the file goes out as DATA frames read as the
/// windows open (the app does not wait for them). A file that cannot be opened, or is
/// shorter than the app's content-length, resets the stream (logged).
pub fn sendFile(st: *Stream, path: [:0]const u8) stream_mod.FileError!void {
    const h = H2Stream.of(st);
    const s = h.session;
    // Stream.sendFile checked the call and marked the response complete.
    var line: [512]u8 = undefined;
    const shown = path[0..@min(path.len, 300)];
    const file = switch (sys.openFile(path.ptr)) {
        .ok => |f| f,
        .err => |e| return streamErrorFor(s, h, .internal, std.fmt.bufPrint(&line, "pathsend: {s} cannot be opened ({s}): stream reset", .{ shown, @tagName(e) }) catch "pathsend: a file cannot be opened"),
    };
    const length = st.resp_length orelse file.size;
    if (length > file.size or st.resp_no_body or length == 0) {
        sys.close(file.fd);
        if (length > file.size) return streamErrorFor(s, h, .internal, std.fmt.bufPrint(&line, "pathsend: {s} is shorter than the response's content-length: stream reset", .{shown}) catch "pathsend: a file is too short");
        pushHead(st, true) catch return error.OutOfMemory;
        flushSoon(st.conn);
        return;
    }
    pushHead(st, false) catch {
        sys.close(file.fd);
        return error.OutOfMemory;
    };
    st.resp_body_bytes = length;
    pushItem(h, .{ .kind = .file, .end_stream = true, .owned = false, .bytes = &.{}, .fd = file.fd, .file_left = length }) catch {
        sys.close(file.fd);
        return error.OutOfMemory;
    };
    h.end_queued = true;
    flushSoon(st.conn);
    responseCompleted(st);
}

/// `Stream.sendFd`: `len` bytes of the open file `fd` from `offset` go out as DATA
/// frames, as pathsend's do. Owns `fd`.
pub fn sendFd(st: *Stream, fd: i32, offset: u64, len: u64) stream_mod.FileError!void {
    const h = H2Stream.of(st);
    if (st.resp_no_body or len == 0) {
        sys.close(fd);
        pushHead(st, true) catch return error.OutOfMemory;
        flushSoon(st.conn);
        return;
    }
    pushHead(st, false) catch {
        sys.close(fd);
        return error.OutOfMemory;
    };
    st.resp_body_bytes = len;
    pushItem(h, .{ .kind = .file, .end_stream = true, .owned = false, .bytes = &.{}, .fd = fd, .file_pos = offset, .file_left = len }) catch {
        sys.close(fd);
        return error.OutOfMemory;
    };
    h.end_queued = true;
    flushSoon(st.conn);
    responseCompleted(st);
}

pub fn finishStream(st: *Stream) void {
    const h = H2Stream.of(st);
    const s = h.session;
    const conn = st.conn;
    std.debug.assert(h.held and s.held > 0 and s.held <= s.live);
    h.held = false;
    s.held -= 1;
    st.handle = null;
    st.write_blocked = false;
    if (!st.refused) observe(s, h, if (st.resp_started) st.status else 500);
    conn.server.streamFinished();
    if (conn.state == .closed) {
        freeStream(s, h);
        if (s.held == 0) conn.server.retire(conn);
        return;
    }
    if (h.ws) |w| if (seam.webSocketOpen(st.conn, w)) {
        // An accepted WebSocket: closed normally if the app did not; the stream ends
        // once the peer's close (and END_STREAM) arrives.
        seam.webSocketFinished(st.conn, w);
        st.resp_complete = true;
    };
    if (!st.resp_complete and !st.reset) {
        // The app ended without completing its response: the stream is reset.
        if (!st.resp_started and h.head_block == null) {
            return refuseAfterApp(s, h);
        }
        return streamError(s, h, .internal);
    }
    if (st.reset or !h.hasOutput()) maybeFree(s, h);
    rearm(conn);
    header_blocks.expireIfOld(s);
}

/// The app returned without a response: 500, as over HTTP/1.1.
pub fn refuseAfterApp(s: *Session, st: *H2Stream) void {
    refuseStream(s, st, 500);
    s.conn.flush();
}

pub fn abortStream(st: *Stream) void {
    const h = H2Stream.of(st);
    if (!st.reset and st.conn.state == .h2) {
        streamError(h.session, h, .internal);
        st.conn.flush();
    }
}
