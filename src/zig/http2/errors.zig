//! HTTP/2 errors (RFC 9113 5.4): connection errors end with GOAWAY, stream errors with
//! RST_STREAM; and the answers the engine makes itself on a stream (413, 431, 500, ops).
const std = @import("std");
const sys = @import("../os/sys.zig");
const hpack = @import("hpack.zig");
const answers = @import("../features/answers.zig");
const frames = @import("frames.zig");
const ErrorCode = frames.ErrorCode;
const FrameHeader = frames.FrameHeader;

const scheduler = @import("scheduler.zig");
const state = @import("state.zig");
const Server = @import("../core/server.zig").Server;
const streams = @import("streams.zig");
const dropItems = scheduler.dropItems;
const pushItem = scheduler.pushItem;
const queueControl = scheduler.queueControl;
const Session = state.Session;
const recent_resets_len = state.recent_resets_len;
const useless_frames_per_second_max = state.useless_frames_per_second_max;
const H2Stream = streams.H2Stream;
const find = streams.find;
const resetLocal = streams.resetLocal;

/// A connection error: GOAWAY with the code, then the connection closes once it is written.
pub fn connError(s: *Session, code: ErrorCode) void {
    if (s.dead) return;
    // An error's GOAWAY carries an error code; NO_ERROR GOAWAYs are the drain's and the
    // final one's. Once dead, no second error GOAWAY follows (the guard above).
    std.debug.assert(code != .no_error);
    s.dead = true;
    sendGoaway(s, code);
    // Not queued: the connection closed, and its streams were told (`connClosed`).
    if (s.conn.state == .closed) return;
    // Every stream is over: apps see the disconnect now, not when the socket closes.
    var it = s.first;
    while (it) |st| {
        it = st.next;
        if (!st.base.reset) {
            st.remote_closed = true;
            resetLocal(s, st);
        }
    }
    s.conn.flush();
    if (s.conn.state == .h2 and s.sink.outputLen() == 0) s.conn.lingerClose(true);
}

pub fn connErrorFor(s: *Session, reason: []const u8) void {
    s.conn.server.hooks.logError(reason);
    connError(s, .internal);
}

/// The final GOAWAY: it names the last stream read; no later stream is taken.
pub fn sendGoaway(s: *Session, code: ErrorCode) void {
    s.goaway_sent = true;
    // A later GOAWAY never names more than an earlier one (RFC 9113 6.8): streams read
    // after the first final GOAWAY were ignored, not processed.
    sendGoawayWith(s, @min(s.last_stream_id, s.goaway_last_id), code);
}

/// A GOAWAY naming `last_id` (a drain's first one names the largest id: streams the
/// client already sent are still taken, see `session.drainStarted`).
pub fn sendGoawayWith(s: *Session, last_id: u32, code: ErrorCode) void {
    // Contract: the ids our GOAWAYs name never increase, and never name a stream the
    // client did not open, but for a drain's first (the largest id).
    std.debug.assert(last_id <= s.goaway_last_id);
    std.debug.assert(last_id <= s.last_stream_id or last_id == frames.stream_id_max);
    s.goaway_last_id = last_id;
    const h = frames.header_bytes;
    var buf: [h + 8]u8 = undefined;
    (FrameHeader{ .len = 8, .type = .goaway, .flags = 0, .stream = 0 }).write(buf[0..h]);
    std.mem.writeInt(u32, buf[h..][0..4], last_id, .big);
    std.mem.writeInt(u32, buf[h + 4 ..][0..4], @intFromEnum(code), .big);
    // A GOAWAY that cannot be queued (no memory, the output at its bound): the
    // connection closes without it, which the peer reads as the same end.
    s.sink.queue(&buf) catch s.conn.closeFor("out of memory for an HTTP/2 GOAWAY");
}

/// A stream error on a stream we keep no state for (refused, malformed before it opened).
pub fn streamErrorId(s: *Session, id: u32, code: ErrorCode) void {
    sendReset(s, id, code);
}

/// A stream error on stream `id`, whether or not it is open: an open one is reset here
/// too (its response stops, its app is told), not only on the wire.
pub fn streamErrorOn(s: *Session, id: u32, code: ErrorCode) void {
    const st = find(s, id) orelse return streamErrorId(s, id, code);
    if (st.base.reset) return;
    streamError(s, st, code);
}

pub fn streamError(s: *Session, st: *H2Stream, code: ErrorCode) void {
    // A stream is reset once: RST_STREAM is not sent on a stream already reset (5.4.2).
    std.debug.assert(!st.base.reset);
    sendReset(s, st.id, code);
    st.remote_closed = true;
    resetLocal(s, st);
}

pub fn streamErrorFor(s: *Session, st: *H2Stream, code: ErrorCode, reason: []const u8) void {
    s.conn.server.hooks.logError(reason);
    streamError(s, st, code);
}

pub fn sendReset(s: *Session, id: u32, code: ErrorCode) void {
    // RST_STREAM names a stream, never the connection (an idle one may be named: a bad
    // PRIORITY frame's stream error).
    std.debug.assert(id != 0 and id <= frames.stream_id_max);
    const h = frames.header_bytes;
    var buf: [h + 4]u8 = undefined;
    (FrameHeader{ .len = 4, .type = .rst_stream, .flags = 0, .stream = id }).write(buf[0..h]);
    std.mem.writeInt(u32, buf[h..][0..4], @intFromEnum(code), .big);
    queueControl(s, &buf) catch return;
    s.recent_resets[s.recent_reset_at] = id;
    s.recent_reset_at = (s.recent_reset_at + 1) % recent_resets_len;
}

pub fn wasResetByUs(s: *const Session, id: u32) bool {
    for (s.recent_resets) |r| if (r == id) return true;
    return false;
}

/// The engine answers the request itself (413, 431, 500): a head with END_STREAM.
pub fn refuseStream(s: *Session, st: *H2Stream, status: u16) void {
    st.base.refused = true;
    st.base.status = status;
    dropItems(s, st);
    var buf: [64]u8 = undefined;
    const n = hpack.encodeStatus(&buf, status) catch unreachable;
    const block = s.gpa.dupe(u8, buf[0..n]) catch return streamErrorFor(s, st, .internal, "out of memory for an error response");
    pushItem(st, .{ .kind = .headers, .end_stream = true, .owned = true, .bytes = block, .alloc_len = block.len }) catch {
        s.gpa.free(block);
        return streamErrorFor(s, st, .internal, "out of memory for an error response");
    };
    st.base.resp_started = true;
    st.base.resp_complete = true;
    if (st.held) {
        s.sink.wakeRead(&st.base);
        s.sink.wakeWrite(&st.base);
    }
    observe(s, st, status);
}

/// A health or metrics path (`answers.opsAnswer`), answered by the engine: the head, then the
/// body (copied: it leaves when the peer's window lets it) with END_STREAM.
pub fn answerOps(s: *Session, st: *H2Stream, a: answers.OpsAnswer) void {
    const srv = s.conn.server;
    st.base.refused = true;
    st.base.status = a.status;
    const block = s.gpa.alloc(u8, 256) catch return streamErrorFor(s, st, .internal, "out of memory for an engine-made response");
    // Bounded: the status, server, date and these four fit the block.
    var n = encodeHeadStart(block, srv, a.status) catch unreachable;
    var len_buf: [20]u8 = undefined;
    const len_text = std.fmt.bufPrint(&len_buf, "{d}", .{a.body.len}) catch unreachable;
    const fields = [_][2][]const u8{ .{ "content-type", a.content_type }, .{ "cache-control", "no-store" }, .{ "content-length", len_text } };
    for (fields) |f| n += hpack.encodeField(block[n..], f[0], f[1]) catch unreachable;
    if (a.retry_after != 0) {
        var wait_buf: [10]u8 = undefined;
        n += hpack.encodeField(block[n..], "retry-after", std.fmt.bufPrint(&wait_buf, "{d}", .{a.retry_after}) catch unreachable) catch unreachable;
    }
    const body_too = !a.head_only and !st.base.is_head_method and a.body.len > 0;
    pushItem(st, .{ .kind = .headers, .end_stream = !body_too, .owned = true, .bytes = block[0..n], .alloc_len = block.len }) catch {
        s.gpa.free(block);
        return streamErrorFor(s, st, .internal, "out of memory for an engine-made response");
    };
    if (body_too) {
        const body = s.gpa.dupe(u8, a.body) catch return streamErrorFor(s, st, .internal, "out of memory for an engine-made response");
        pushItem(st, .{ .kind = .data, .end_stream = true, .owned = true, .bytes = body, .alloc_len = body.len }) catch {
            s.gpa.free(body);
            return streamErrorFor(s, st, .internal, "out of memory for an engine-made response");
        };
    }
    st.base.resp_started = true;
    st.base.resp_complete = true;
    observe(s, st, a.status);
}

pub fn observe(s: *Session, st: *H2Stream, status: u16) void {
    const m = s.conn.server.metrics orelse return;
    const now = sys.monotonicUs();
    m.observe(st.base.method_class, status, if (st.base.started_us != 0 and now > st.base.started_us) now - st.base.started_us else 0, st.base.resp_body_bytes);
    st.base.started_us = 0;
}

/// The drain's final GOAWAY (the drain's PING came back, or accepting stops): it names
/// the last stream read; the streams in flight finish.
pub fn finalGoaway(s: *Session) void {
    if (s.goaway_sent or s.dead) return;
    sendGoaway(s, .no_error);
    // Once written, a settled connection closes (`afterFlush`).
    if (s.conn.state == .h2) s.conn.flush();
}

// ---- the per-second budgets (Rapid Reset, useless frames): past one, a connection error

/// Counts a frame that makes us work without carrying a request or response.
pub fn useless(s: *Session) void {
    tick(s);
    s.useless_in_window += 1;
    if (s.useless_in_window > useless_frames_per_second_max) connError(s, .enhance_your_calm);
}
pub fn tick(s: *Session) void {
    const now = s.conn.server.now_ms;
    if (now -% s.window_start_ms >= 1000) {
        s.window_start_ms = now;
        s.resets_in_window = 0;
        s.useless_in_window = 0;
    }
}

// ---- the head of every response, the engine's own answers' and the app's

/// What every response head begins with: `:status`, then `server` and `date` as configured.
pub fn encodeHeadStart(block: []u8, srv: *Server, status: u16) error{NoSpace}!usize {
    var n = try hpack.encodeStatus(block, status);
    if (srv.opts.server_header) n += try hpack.encodeField(block[n..], "server", "zigcorn");
    if (srv.opts.date_header) {
        const line = srv.date.get();
        n += try hpack.encodeField(block[n..], "date", line["date: ".len .. line.len - 2]);
    }
    return n;
}
