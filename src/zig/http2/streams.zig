//! A stream's HTTP/2 side (RFC 9113 5.1 states: idle, open, half-closed, closed) and the
//! session's list of streams: creation, lookup, reset, freeing.
const std = @import("std");
const assert = std.debug.assert;
const builtin = @import("builtin");
const stream_mod = @import("../core/stream.zig");
const Stream = stream_mod.Stream;
const seam = @import("../core/protocol.zig"); // RFC 8441: a WebSocket on a stream, through the seam's hand-over verbs

const errors = @import("errors.zig");
const flow_control = @import("flow_control.zig");
const scheduler = @import("scheduler.zig");
const state = @import("state.zig");
const streamErrorId = errors.streamErrorId;
const creditConnection = flow_control.creditConnection;
const creditStream = flow_control.creditStream;
const dropItems = scheduler.dropItems;
const Session = state.Session;
const settled = state.settled;
const connection_window = state.connection_window;
const stream_window = state.stream_window;

/// One response item waiting for `fill`: a header block (owned) or body bytes (borrowed
/// from `owner`, or an owned copy when `owned`).
pub const Item = struct {
    kind: enum(u8) { headers, data, file },
    end_stream: bool,
    owned: bool,
    bytes: []const u8,
    off: usize = 0,
    owner: ?*anyopaque = null,
    /// Owned: the allocation's length (a head block may use less of it than it has).
    alloc_len: usize = 0,
    /// A file (pathsend): its descriptor, owned, and what is left of it from `file_pos`.
    fd: i32 = -1,
    file_pos: u64 = 0,
    file_left: u64 = 0,
};

pub const H2Stream = struct {
    base: Stream,
    id: u32,
    session: *Session,
    prev: ?*H2Stream = null,
    next: ?*H2Stream = null,
    /// The app holds it (between `on_request` and finish/abort).
    held: bool = false,
    /// END_STREAM received / sent (queued into the connection's output).
    remote_closed: bool = false,
    local_closed: bool = false,
    /// The client reset it (RST_STREAM): any frame but PRIORITY on it from now on is the
    /// client's error (RFC 9113 5.1), unlike frames in flight on a stream we reset.
    peer_reset: bool = false,
    /// The peer may send this much more body; we may send this much more DATA.
    recv_window: i64 = stream_window,
    send_window: i64,
    /// Body bytes the app has read that were not yet credited back.
    recv_unacked: u32 = 0,
    /// The request's content-length, checked against the DATA that arrives.
    content_length: ?u64 = null,
    /// Request body bytes received but not read by the app: body[body_off..].
    body: std.ArrayListUnmanaged(u8) = .{},
    body_off: usize = 0,
    /// Bytes handed out by the last `takeBody`, released by `bodyConsumed`.
    body_taken: usize = 0,
    /// The app waits for body bytes (the connection's body timeout runs).
    awaiting_body: bool = false,
    /// The response head, encoded, until the first body message chooses END_STREAM;
    /// `head_alloc` bytes are allocated for it.
    head_block: ?[]u8 = null,
    head_alloc: usize = 0,
    /// END_STREAM is already queued (on the head: a response without body).
    end_queued: bool = false,
    /// Trailer fields gathered over `http.response.trailers` messages.
    trailer_block: std.ArrayListUnmanaged(u8) = .{},
    items: std.ArrayListUnmanaged(Item) = .{},
    item_head: usize = 0,
    /// RFC 8441: the WebSocket session this stream carries (its DATA are WebSocket frames).
    ws: ?seam.WebSocketHeld = null,

    pub fn of(st: *Stream) *H2Stream {
        return @fieldParentPtr("base", st);
    }

    pub fn hasOutput(self: *const H2Stream) bool {
        return self.item_head < self.items.items.len;
    }

    /// Closed both ways, or reset: nothing more goes out or comes in.
    pub fn closed(self: *const H2Stream) bool {
        return self.base.reset or (self.local_closed and self.remote_closed);
    }
};

pub fn newStream(s: *Session, id: u32) ?*H2Stream {
    // Contract: only client-initiated ids (odd) that the session already counted as read
    // (`last_stream_id` moved first, in `beginHeaders` or the h2c upgrade) open a stream.
    assert(id & 1 == 1 and id <= s.last_stream_id);
    if (builtin.mode == .Debug) assert(find(s, id) == null);
    const st = s.gpa.create(H2Stream) catch {
        streamErrorId(s, id, .refused_stream);
        return null;
    };
    st.* = .{
        .base = Stream.init(s.conn, .http2),
        .id = id,
        .session = s,
        .send_window = s.peer_initial_window,
    };
    st.prev = s.last;
    if (s.last) |l| l.next = st else s.first = st;
    s.last = st;
    s.live += 1;
    assert(s.held <= s.live);
    return st;
}

pub fn find(s: *Session, id: u32) ?*H2Stream {
    var it = s.first;
    while (it) |st| : (it = st.next) if (st.id == id) return st;
    return null;
}

/// The app is done and the response written: request body bytes are no longer kept.
pub fn discarding(st: *const H2Stream) bool {
    return !st.held and st.local_closed and !st.hasOutput();
}

pub fn remoteEnded(s: *Session, st: *H2Stream) void {
    st.remote_closed = true;
    st.base.body_done = true;
    if (st.closed()) maybeFree(s, st);
}

/// The stream is over (reset either way): its output is dropped, its app told.
pub fn resetLocal(s: *Session, st: *H2Stream) void {
    // Contract: every caller has closed the stream's remote side first (RFC 9113 5.1: a
    // reset stream is closed both ways), so `reset` implies `remote_closed` everywhere.
    assert(st.remote_closed);
    st.base.reset = true;
    st.local_closed = true;
    dropItems(s, st);
    // The body it was given is credited back to the connection.
    const unread = st.body.items.len - st.body_off;
    if (unread > 0) creditConnection(s, unread);
    st.body.clearAndFree(s.gpa);
    st.body_off = 0;
    st.body_taken = 0;
    // Nothing more goes out on it: its items and the bytes they counted are gone.
    assert(!st.hasOutput() and st.base.out.queued == 0);
    if (st.held) {
        s.sink.wakeRead(&st.base);
        st.base.write_blocked = false;
        s.sink.wakeWrite(&st.base);
        return;
    }
    maybeFree(s, st);
}

pub fn maybeFree(s: *Session, st: *H2Stream) void {
    if (st.held or st.hasOutput()) return;
    if (!st.closed()) {
        // Half-closed (local): the response is whole, the request body still comes. It is
        // read and dropped until the client ends the stream (`discarding`); what the app
        // left unread is credited back now.
        const unread = st.body.items.len - st.body_off;
        if (unread > 0) creditStream(s, st, unread);
        st.body.clearAndFree(s.gpa);
        st.body_off = 0;
        return;
    }
    // Closed both ways with body the app never read: the connection window gets it back
    // (the stream's own window no longer matters).
    const unread = st.body.items.len - st.body_off;
    if (unread > 0) creditConnection(s, unread);
    freeStream(s, st);
    if (s.goaway_sent and settled(s) and s.conn.state == .h2 and s.sink.outputLen() == 0) s.conn.lingerClose(true);
}

pub fn freeStream(s: *Session, st: *H2Stream) void {
    // Contract: no app holds a stream that is freed (its `Stream` would dangle).
    assert(!st.held);
    assert(s.live > 0 and s.live > s.held);
    dropItems(s, st);
    if (st.ws) |w| seam.webSocketDestroy(s.conn, w);
    st.ws = null;
    st.body.deinit(s.gpa);
    unlink(s, st);
    s.live -= 1;
    s.gpa.destroy(st);
    // Debug builds: with no stream left, every byte of DATA received was credited back
    // (granted, or waiting in `recv_unacked`), but those of a frame still being read.
    // Not after a connection error: the frame that caused it may never be credited.
    if (builtin.mode == .Debug and s.live == 0 and s.conn.state == .h2 and s.preface_settings and !s.dead)
        assert(s.recv_window + s.recv_unacked == connection_window + s.data_buffered);
}

pub fn unlink(s: *Session, st: *H2Stream) void {
    // The stream is in the list: its neighbours, or the list's ends, point at it.
    assert((st.prev == null) == (s.first == st));
    assert((st.next == null) == (s.last == st));
    if (st.prev) |p| p.next = st.next else s.first = st.next;
    if (st.next) |n| n.prev = st.prev else s.last = st.prev;
    st.prev = null;
    st.next = null;
}

/// Debug builds: the list of streams agrees with the session's counts (`live` streams,
/// `held` of them held by an app), and a reset stream has nothing left to send. O(n).
pub fn checkList(s: *const Session) void {
    if (builtin.mode != .Debug) return;
    var live: u32 = 0;
    var held: u32 = 0;
    var prev: ?*H2Stream = null;
    var it = s.first;
    while (it) |st| : (it = st.next) {
        assert(st.prev == prev and st.session == s);
        assert(!st.base.reset or (st.remote_closed and !st.hasOutput()));
        live += 1;
        if (st.held) held += 1;
        prev = st;
    }
    assert(s.last == prev);
    assert(live == s.live and held == s.held);
}

pub fn append(s: *Session, st: *H2Stream) void {
    assert(st.prev == null and st.next == null and s.last != st);
    st.prev = s.last;
    st.next = null;
    if (s.last) |l| l.next = st else s.first = st;
    s.last = st;
}
