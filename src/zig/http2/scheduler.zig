//! HTTP/2 output: each stream's response items, and the scheduler (`fill`) that moves
//! them into the connection's output as frames, one stream at a time in turn, as far
//! as the windows and `fill_target` allow.
const std = @import("std");
const assert = std.debug.assert;
const sys = @import("../os/sys.zig");
const outq = @import("../transport/output_queue.zig");
const conn_mod = @import("../core/connection.zig");
const Conn = conn_mod.Conn;
const stream_mod = @import("../core/stream.zig");
const Stream = stream_mod.Stream;
const seam = @import("../core/protocol.zig"); // RFC 8441: a WebSocket on a stream, through the seam's hand-over verbs
const frames = @import("frames.zig");
const FrameHeader = frames.FrameHeader;
const windowUse = frames.windowUse;
const flag_end_stream = frames.flag_end_stream;
const flag_end_headers = frames.flag_end_headers;

const errors = @import("errors.zig");
const state = @import("state.zig");
const streams = @import("streams.zig");
const streamErrorFor = errors.streamErrorFor;
const Session = state.Session;
const fill_target = state.fill_target;
const sessionOf = state.sessionOf;
const H2Stream = streams.H2Stream;
const Item = streams.Item;
const append = streams.append;
const maybeFree = streams.maybeFree;
const unlink = streams.unlink;

/// A control frame (an ack, WINDOW_UPDATE, RST_STREAM) straight into the output, not
/// through a stream's items. One that cannot be queued closes the connection (logged), so a
/// caller that gets the error only stops: nothing is dropped while the connection lives.
pub fn queueControl(s: *Session, bytes: []const u8) outq.Error!void {
    s.sink.queue(bytes) catch |err| {
        s.conn.closeFor("out of memory for HTTP/2 output");
        return err;
    };
}

pub fn pushItem(st: *H2Stream, item: Item) error{OutOfMemory}!void {
    // Contract: a stream we (or the peer) reset is not written to again (RFC 9113 5.1:
    // closed), and nothing follows the item that carried END_STREAM.
    assert(!st.base.reset);
    assert(!st.local_closed);
    assert(item.kind != .file or (item.fd >= 0 and item.file_left > 0 and item.end_stream));
    assert(!st.hasOutput() or !st.items.items[st.items.items.len - 1].end_stream);
    // Items already sent are dropped from the front before the list grows.
    if (st.item_head > 0 and st.item_head == st.items.items.len) {
        st.items.clearRetainingCapacity();
        st.item_head = 0;
    }
    try st.items.append(st.session.gpa, item);
    if (item.kind == .data) st.base.out.queued += item.bytes.len;
}

pub fn releaseItem(s: *Session, item: *Item) void {
    if (item.fd >= 0) {
        sys.close(item.fd);
        item.fd = -1;
    }
    if (item.owned) {
        if (item.alloc_len > 0) s.gpa.free(@constCast(item.bytes.ptr)[0..item.alloc_len]);
    } else if (item.owner) |o| {
        s.conn.server.hooks.release(o);
    }
    item.owner = null;
    item.owned = false;
}

pub fn dropItems(s: *Session, st: *H2Stream) void {
    for (st.items.items[st.item_head..]) |*item| {
        if (item.kind == .data) st.base.out.queued -= item.bytes.len - item.off;
        releaseItem(s, item);
    }
    // What `pushItem` counted in, `emitData` and the loop above counted out.
    assert(st.base.out.queued == 0);
    st.items.clearAndFree(s.gpa);
    st.item_head = 0;
    if (st.head_block) |b| s.gpa.free(b.ptr[0..st.head_alloc]);
    st.head_block = null;
    st.trailer_block.clearAndFree(s.gpa);
}

/// Moves frames from the streams' items into the connection's output, one frame per
/// stream in turn (round robin across calls: a stream that had its turn goes to the
/// back of the list), while the output is shorter than `fill_target` and the windows
/// allow. The target is checked before every frame, not once per round: with many
/// streams a round would queue a frame for each of them (50 streams, 800 KiB), and
/// output past `read_pause_bytes` stops the connection's reading.
pub fn fill(conn: *Conn) void {
    const s = sessionOf(conn);
    // h2c upgrade: stream 1's response waits for the client's preface, a round trip at
    // most (the client sends it on reading the 101); RFC 9113 3.2 lets the server wait.
    // Java's HttpClient (17 and 25) can lose what it reads while it switches to HTTP/2:
    // under load, 32 KiB after its first 16 KiB read, so a DATA frame ended with bytes
    // from further on, while the bytes on the wire were right (interop issue 24, bug E).
    if (s.await_preface) return;
    // Streams visited since the last one that moved a frame: a whole turn of the list
    // without progress ends the fill (every stream waits on a window or its app).
    var idle: u32 = 0;
    while (s.sink.outputLen() < fill_target and conn.state == .h2 and idle < s.live) {
        const st = s.first orelse break;
        // Its turn is taken: it goes to the back before it emits (emitting may free it).
        if (st.next != null) {
            unlink(s, st);
            append(s, st);
        }
        if (st.hasOutput() and emitOne(s, st)) idle = 0 else idle += 1;
    }
    streams.checkList(s);
}

/// One frame (or one whole header block) of the stream's first item. False when the
/// windows stop it.
/// What `emitOne` did with a stream's first item: the windows (or memory) stopped it,
/// part of it went, or all of it did.
pub const Emitted = enum { blocked, partial, done };

pub fn emitOne(s: *Session, st: *H2Stream) bool {
    // The pair of `pushItem`'s: a reset stream's items were dropped, a closed side sends nothing.
    assert(!st.base.reset and !st.local_closed);
    assert(st.item_head < st.items.items.len);
    const item = &st.items.items[st.item_head];
    const emitted: Emitted = switch (item.kind) {
        .headers => if (writeBlock(s, st.id, item.bytes, item.end_stream)) .done else |_| .blocked,
        .file => emitFile(s, st, item),
        .data => emitData(s, st, item),
    };
    switch (emitted) {
        .blocked => return false,
        .partial => return true,
        .done => {},
    }
    const ended = item.end_stream;
    releaseItem(s, item);
    st.item_head += 1;
    // END_STREAM went with the stream's last item: nothing is queued after it.
    if (ended) assert(!st.hasOutput());
    if (ended) st.local_closed = true;
    if (st.base.write_blocked and !mustWait(&st.base)) {
        st.base.write_blocked = false;
        s.sink.wakeWrite(&st.base);
    }
    if (st.ws) |w| if (!st.hasOutput() or st.base.out.queued <= seam.websocket_out_bytes_high)
        seam.webSocketOutputDrained(st.base.conn, w);
    if (!st.hasOutput()) {
        st.items.clearRetainingCapacity();
        st.item_head = 0;
        if (st.local_closed) maybeFree(s, st);
    }
    return true;
}

/// One DATA frame of a file (pathsend), read with pread into the output queue.
pub fn emitFile(s: *Session, st: *H2Stream, item: *Item) Emitted {
    const conn = s.conn;
    if (item.file_left == 0) {
        var hdr: [frames.header_bytes]u8 = undefined;
        (FrameHeader{ .len = 0, .type = .data, .flags = flag_end_stream, .stream = st.id }).write(&hdr);
        s.sink.queue(&hdr) catch return blockedByMemory(conn);
        return .done;
    }
    const window = @min(s.send_window, st.send_window);
    if (window <= 0) return .blocked;
    const n: usize = @intCast(@min(item.file_left, @as(u64, @intCast(window)), s.peer_frame_size));
    assert(n > 0 and n <= s.peer_frame_size);
    const h = frames.header_bytes;
    const space = s.sink.stage(h + n) catch return blockedByMemory(conn);
    const got: usize = switch (sys.pread(item.fd, space[h..][0..n], item.file_pos)) {
        .ok => |g| g,
        .err => 0,
    };
    if (got == 0) {
        s.sink.dropStaged();
        streamErrorFor(s, st, .internal, "pathsend: the file is shorter than it was when the response started (truncated while sent?): stream reset");
        return .partial;
    }
    // pread fills at most the room it was given.
    assert(got <= n and got <= item.file_left);
    const last = item.end_stream and got == item.file_left;
    (FrameHeader{ .len = @intCast(got), .type = .data, .flags = if (last) flag_end_stream else 0, .stream = st.id }).write(space[0..h]);
    s.sink.commitStaged(h + got) catch return blockedByMemory(conn);
    item.file_pos += got;
    item.file_left -= got;
    if (conn.timer.in(&conn.server.stall_timeouts)) conn.timer.disarm();
    s.send_window = windowUse(s.send_window, got);
    st.send_window = windowUse(st.send_window, got);
    st.base.out.sent += got;
    return if (item.file_left > 0) .partial else .done;
}

/// One DATA frame of body bytes, as far as the windows and the peer's frame size allow.
pub fn emitData(s: *Session, st: *H2Stream, item: *Item) Emitted {
    const conn = s.conn;
    const left = item.bytes.len - item.off;
    var n: usize = left;
    if (left > 0) {
        const window = @min(s.send_window, st.send_window);
        if (window <= 0) return .blocked;
        n = @min(left, @as(usize, @intCast(window)), s.peer_frame_size);
    }
    const last = item.end_stream and item.off + n == item.bytes.len;
    var hdr: [frames.header_bytes]u8 = undefined;
    (FrameHeader{ .len = @intCast(n), .type = .data, .flags = if (last) flag_end_stream else 0, .stream = st.id }).write(&hdr);
    s.sink.queue(&hdr) catch return blockedByMemory(conn);
    s.sink.queue(item.bytes[item.off..][0..n]) catch return blockedByMemory(conn);
    item.off += n;
    s.send_window = windowUse(s.send_window, n);
    st.send_window = windowUse(st.send_window, n);
    // A DATA frame with bytes is sent only within both windows: neither goes negative.
    assert(n == 0 or (s.send_window >= 0 and st.send_window >= 0));
    assert(item.off <= item.bytes.len and n <= st.base.out.queued);
    // Progress through the windows: a stall's deadline starts again.
    if (n > 0 and conn.timer.in(&conn.server.stall_timeouts)) conn.timer.disarm();
    st.base.out.queued -= n;
    st.base.out.sent += n;
    return if (item.off < item.bytes.len) .partial else .done;
}

pub fn blockedByMemory(conn: *Conn) Emitted {
    outOfMemory(conn);
    return .blocked;
}

pub fn outOfMemory(conn: *Conn) void {
    conn.closeFor("out of memory for HTTP/2 output");
}

/// A header block as HEADERS and, past the peer's frame size, CONTINUATION frames.
pub fn writeBlock(s: *Session, id: u32, block: []const u8, end_stream: bool) outq.Error!void {
    const conn = s.conn;
    var rest = block;
    var first = true;
    while (true) {
        const n = @min(rest.len, s.peer_frame_size);
        // Each frame of the block fits the peer's SETTINGS_MAX_FRAME_SIZE (never below 16384).
        assert(n <= s.peer_frame_size and s.peer_frame_size >= frames.frame_size_default);
        const last = n == rest.len;
        var flags: u8 = if (last) flag_end_headers else 0;
        if (first and end_stream) flags |= flag_end_stream;
        var hdr: [frames.header_bytes]u8 = undefined;
        (FrameHeader{ .len = @intCast(n), .type = if (first) .headers else .continuation, .flags = flags, .stream = id }).write(&hdr);
        s.sink.queue(&hdr) catch |e| {
            outOfMemory(conn);
            return e;
        };
        s.sink.queue(rest[0..n]) catch |e| {
            outOfMemory(conn);
            return e;
        };
        rest = rest[n..];
        first = false;
        if (last) return;
    }
}

/// Whether the stream's writer must wait: too much of its body is still waiting to go.
pub fn mustWait(st: *const Stream) bool {
    return st.out.queued > stream_mod.queued_bytes_high;
}

/// Output an app queued: written when the loop's pass ends, with every other stream's
/// of the same pass (one write for many responses).
pub fn flushSoon(conn: *Conn) void {
    conn.server.flushSoon(conn);
}
