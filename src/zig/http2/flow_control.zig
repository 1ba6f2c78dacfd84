//! HTTP/2 flow control (RFC 9113 6.9) and request bodies: the peer's WINDOW_UPDATEs open
//! our send windows; DATA frames use our receive windows, which are credited back as the
//! app reads (`receive()` is the backpressure).
const std = @import("std");
const assert = std.debug.assert;
const builtin = @import("builtin");
const frames = @import("frames.zig");
const FrameHeader = frames.FrameHeader;
const windowGrow = frames.windowGrow;
const windowUse = frames.windowUse;
const flag_end_stream = frames.flag_end_stream;
const flag_padded = frames.flag_padded;

const errors = @import("errors.zig");
const scheduler = @import("scheduler.zig");
const state = @import("state.zig");
const streams = @import("streams.zig");
const seam = @import("../core/protocol.zig"); // RFC 8441: a WebSocket stream's DATA goes to its session
const useless = errors.useless;
const connError = errors.connError;
const refuseStream = errors.refuseStream;
const sendReset = errors.sendReset;
const streamError = errors.streamError;
const streamErrorFor = errors.streamErrorFor;
const wasResetByUs = errors.wasResetByUs;
const queueControl = scheduler.queueControl;
const Session = state.Session;
const connection_window = state.connection_window;
const discard_bytes_max = state.discard_bytes_max;
const stream_window = state.stream_window;
const H2Stream = streams.H2Stream;
const discarding = streams.discarding;
const find = streams.find;
const freeStream = streams.freeStream;
const remoteEnded = streams.remoteEnded;

pub fn onWindowUpdate(s: *Session, id: u32, inc: u32) void {
    if (id == 0) {
        if (inc == 0) return connError(s, .protocol);
        s.send_window = windowGrow(s.send_window, inc) catch return connError(s, .flow_control);
        return;
    }
    const st = find(s, id) orelse {
        if (id > s.last_stream_id) return connError(s, .protocol);
        // A closed stream: frames in flight are expected, but many cost only work.
        return useless(s);
    };
    // A stream we reset that its app still holds: its frames are ignored (RFC 9113 5.1).
    if (st.base.reset) return useless(s);
    if (inc == 0) return streamError(s, st, .protocol);
    st.send_window = windowGrow(st.send_window, inc) catch return streamError(s, st, .flow_control);
}

pub fn dataBytes(s: *Session, fh: FrameHeader, bytes: []const u8) void {
    if (bytes.len == 0) return;
    const st = find(s, fh.stream) orelse return;
    if (st.base.reset or st.remote_closed) return;
    if (discarding(st)) {
        // The app is done: the rest of the body is counted and dropped.
        st.base.body_received += bytes.len;
        return;
    }
    st.body.appendSlice(s.gpa, bytes) catch return streamErrorFor(s, st, .internal, "out of memory for a request body");
    st.base.body_received += bytes.len;
    // From here these bytes are the body's: whoever frees or reads the body credits them.
    s.data_buffered += @intCast(bytes.len);
    assert(s.data_buffered <= fh.len);
}

/// The whole DATA frame was read: flow control, the stream's state, the app told.
pub fn dataEnd(s: *Session, fh: FrameHeader) void {
    const len = fh.len;
    if (len == 0 and fh.flags & flag_end_stream == 0) {
        useless(s);
        if (s.dead) return;
    }
    // Every DATA frame counts against the connection window, whatever its stream.
    if (len > s.recv_window) return connError(s, .flow_control);
    s.recv_window = windowUse(s.recv_window, len);
    // The frame's bytes that no body holds (padding, bytes dropped): credited here. Those
    // `dataBytes` put in a body are credited by whoever reads or frees that body, which
    // may have happened already, between two pieces of this frame (a reset, the app done).
    const buffered = s.data_buffered;
    s.data_buffered = 0;
    assert(buffered <= len);
    const unbuffered = len - buffered;
    const st = find(s, fh.stream) orelse {
        if (fh.stream > s.last_stream_id) return connError(s, .protocol);
        creditConnection(s, unbuffered);
        if (wasResetByUs(s, fh.stream)) return;
        return connError(s, .stream_closed);
    };
    if (st.remote_closed) {
        creditConnection(s, unbuffered);
        // The client reset the stream and still sends on it: the same connection error as
        // once the stream is freed (above), whether or not its app still holds it. Only
        // DATA in flight on a stream we reset is dropped quietly.
        if (st.peer_reset) return connError(s, .stream_closed);
        if (st.base.reset) return;
        return streamError(s, st, .stream_closed);
    }
    if (len > st.recv_window) {
        creditConnection(s, unbuffered);
        return streamError(s, st, .flow_control);
    }
    st.recv_window = windowUse(st.recv_window, len);
    if (discarding(st)) return discardedDataEnd(s, st, fh, unbuffered);
    // Neither reset nor discarding: every piece of the frame went into the body.
    assert(buffered == dataLenOf(fh, s));
    if (st.ws) |w| return wsDataEnd(s, st, w, fh);
    // Padding is never read by the app: credited back at once.
    const padding = len - dataLenOf(fh, s);
    if (padding > 0) {
        creditConnection(s, padding);
        st.recv_unacked += @intCast(padding);
    }
    if (st.base.body_received > s.conn.server.opts.body_bytes_max) {
        // Too late for a 413 once the app's response started: the stream is cancelled.
        if (st.base.resp_started) return streamError(s, st, .cancel);
        return refuseStream(s, st, 413);
    }
    if (st.content_length) |cl| if (st.base.body_received > cl) return streamError(s, st, .protocol);
    if (fh.flags & flag_end_stream != 0) {
        if (st.content_length) |cl| if (st.base.body_received != cl) return streamError(s, st, .protocol);
        remoteEnded(s, st);
    }
    if (st.awaiting_body) {
        st.awaiting_body = false;
        if (s.conn.timer.in(&s.conn.server.body_timeouts)) s.conn.timer.disarm();
    }
    if (st.held) s.sink.wakeRead(&st.base);
}

/// A DATA frame for a stream whose app is done: counted, checked and dropped.
pub fn discardedDataEnd(s: *Session, st: *H2Stream, fh: FrameHeader, unbuffered: u32) void {
    creditStream(s, st, unbuffered);
    if (st.content_length) |cl| if (st.base.body_received > cl) return streamError(s, st, .protocol);
    if (fh.flags & flag_end_stream != 0) {
        if (st.content_length) |cl| if (st.base.body_received != cl) return streamError(s, st, .protocol);
        return remoteEnded(s, st);
    }
    if (st.base.body_received > discard_bytes_max) {
        // A long upload nobody reads: the client is asked to stop (RFC 9113 8.1).
        sendReset(s, st.id, .no_error);
        st.remote_closed = true;
        return freeStream(s, st);
    }
}

/// The data bytes of a DATA frame (its length without pad length byte and padding).
pub fn dataLenOf(fh: FrameHeader, s: *const Session) u64 {
    if (fh.flags & flag_padded == 0) return fh.len;
    return fh.len - 1 - s.pad_len;
}

pub fn creditConnection(s: *Session, n: u64) void {
    s.recv_unacked += @intCast(n);
    // Contract: a byte is credited once, after its DATA frame used the window: what we
    // granted and what waits to be granted never add up past the window we advertise.
    // (The current DATA frame's buffered bytes may be credited before its end uses the window.)
    assert(s.recv_window >= 0 and s.recv_window + s.recv_unacked <= connection_window + s.data_buffered);
    if (s.recv_unacked >= connection_window / 4) {
        const inc = s.recv_unacked;
        s.recv_unacked = 0;
        s.recv_window = windowGrow(s.recv_window, inc) catch unreachable; // ours: at most connection_window
        assert(s.recv_window <= connection_window + s.data_buffered);
        sendWindowUpdate(s, 0, inc);
    }
}

pub fn creditStream(s: *Session, st: *H2Stream, n: usize) void {
    creditConnection(s, n);
    st.recv_unacked += @intCast(n);
    assert(st.recv_window >= 0 and st.recv_window + st.recv_unacked <= stream_window + s.data_buffered);
    if (st.remote_closed) return;
    if (st.recv_unacked >= stream_window / 4) {
        const inc = st.recv_unacked;
        st.recv_unacked = 0;
        st.recv_window = windowGrow(st.recv_window, inc) catch unreachable; // ours: at most stream_window
        assert(st.recv_window <= stream_window + s.data_buffered);
        sendWindowUpdate(s, st.id, inc);
    }
}

pub fn sendWindowUpdate(s: *Session, id: u32, inc: u32) void {
    // RFC 9113 6.9: an increment is 1..2^31-1 (a zero one is the peer's PROTOCOL_ERROR).
    assert(inc > 0 and inc <= frames.window_max);
    // After a GOAWAY for an error only the close follows (RFC 9113 5.4.1).
    if (s.dead) return;
    const h = frames.header_bytes;
    var buf: [h + 4]u8 = undefined;
    (FrameHeader{ .len = 4, .type = .window_update, .flags = 0, .stream = id }).write(buf[0..h]);
    std.mem.writeInt(u32, buf[h..][0..4], inc, .big);
    queueControl(s, &buf) catch return;
}

/// RFC 8441: a DATA frame of a WebSocket stream, its frames parsed as they come and
/// credited back as they are parsed.
pub fn wsDataEnd(s: *Session, st: *H2Stream, ws_session: seam.WebSocketHeld, fh: FrameHeader) void {
    const padding = fh.len - dataLenOf(fh, s);
    if (padding > 0) creditStream(s, st, padding);
    seam.webSocketProcess(s.conn, ws_session);
    if (fh.flags & flag_end_stream != 0) if (find(s, fh.stream)) |still| {
        // The client's side ended: after its frames, the session is over for the app.
        remoteEnded(s, still);
        if (find(s, fh.stream)) |again| if (again.ws) |w| seam.webSocketWake(s.conn, w);
    };
}
