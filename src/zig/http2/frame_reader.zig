//! HTTP/2 frame reading: the connection's buffered bytes become frame headers and
//! payload pieces (a frame may be larger than the read buffer), checked against RFC 9113
//! section 6 as they come, and handed to the file that owns each frame type.
const std = @import("std");
const conn_mod = @import("../core/connection.zig");
const Conn = conn_mod.Conn;
const seam = @import("../core/protocol.zig"); // RFC 8441: a WebSocket on a stream, through the seam's hand-over verbs
const frames = @import("frames.zig");
const FrameHeader = frames.FrameHeader;
const flag_ack = frames.flag_ack;
const flag_end_headers = frames.flag_end_headers;
const flag_padded = frames.flag_padded;
const flag_priority = frames.flag_priority;

const control = @import("control.zig");
const errors = @import("errors.zig");
const flow_control = @import("flow_control.zig");
const header_blocks = @import("header_blocks.zig");
const state = @import("state.zig");
const websocket = @import("websocket.zig");
const applySetting = control.applySetting;
const onGoaway = control.onGoaway;
const onPing = control.onPing;
const onReset = control.onReset;
const settingsDone = control.settingsDone;
const useless = control.useless;
const connError = errors.connError;
const connErrorFor = errors.connErrorFor;
const streamErrorOn = errors.streamErrorOn;
const dataBytes = flow_control.dataBytes;
const dataEnd = flow_control.dataEnd;
const onWindowUpdate = flow_control.onWindowUpdate;
const beginHeaders = header_blocks.beginHeaders;
const headerBlockDone = header_blocks.headerBlockDone;
const Session = state.Session;
const frame_size_max = state.frame_size_max;
const preface = frames.preface;
const prefaceState = frames.prefaceState;
const read_pause_bytes = state.read_pause_bytes;
const rearm = state.rearm;
const sessionOf = state.sessionOf;
const wsInputEmpty = websocket.wsInputEmpty;

/// Consumes every complete piece of frame that is buffered.
pub fn process(conn: *Conn) void {
    const s = sessionOf(conn);
    const act = conn.a();
    // WebSocket streams that stopped parsing (their app was behind) go on first.
    var it = s.first;
    while (it) |st| {
        it = st.next;
        if (st.ws) |w| if (seam.webSocketOpen(conn, w) and !wsInputEmpty(st))
            seam.webSocketProcess(conn, w);
        if (conn.state != .h2) return;
    }
    while (conn.state == .h2 and !s.dead) {
        if (s.await_preface and !consumePreface(s)) break;
        if (s.sink.outputLen() > read_pause_bytes) {
            // The client does not read what its frames made us write: stop reading it.
            conn.setReading(false);
            break;
        }
        const buf = act.rbuf orelse break;
        const avail = buf[act.rstart..act.rlen];
        if (s.frame == null) {
            if (avail.len < frames.header_bytes) break;
            act.rstart += frames.header_bytes;
            beginFrame(s, FrameHeader.parse(avail[0..frames.header_bytes]));
            continue;
        }
        if (s.frame_left > 0 and avail.len == 0) break;
        const take: u32 = @intCast(@min(avail.len, s.frame_left));
        act.rstart += take;
        s.frame_left -= take;
        payload(s, avail[0..take]);
        if (s.frame != null and s.frame_left == 0 and !s.dead and conn.state == .h2) endFrame(s);
    }
    if (conn.state == .closed) return;
    if (act.rstart == act.rlen) {
        conn.releaseReadBuffer();
    } else if (act.rstart > 0) {
        conn.compact();
    }
    rearm(conn);
    conn.flush();
}

/// After an h2c upgrade the client's preface comes first. False while it is incomplete
/// (or was not the preface: the connection then ends with PROTOCOL_ERROR).
pub fn consumePreface(s: *Session) bool {
    const act = s.conn.a();
    const buf = act.rbuf orelse return false;
    switch (prefaceState(buf[act.rstart..act.rlen])) {
        .yes => {
            act.rstart += preface.len;
            s.await_preface = false;
            return true;
        },
        .partial => return false,
        .no => {
            connError(s, .protocol);
            return false;
        },
    }
}

pub fn beginFrame(s: *Session, fh: FrameHeader) void {
    s.frame = fh;
    s.frame_left = fh.len;
    s.fixed_len = 0;
    s.fixed_need = 0;
    s.pad_len = 0;
    s.data_buffered = 0;
    if (fh.len > frame_size_max) return connError(s, .frame_size);
    // Inside a header block only its CONTINUATION frames may come.
    if (s.block_active and (fh.type != .continuation or fh.stream != s.block_stream)) return connError(s, .protocol);
    switch (fh.type) {
        .data => {
            if (fh.stream == 0) return connError(s, .protocol);
            if (fh.flags & flag_padded != 0) {
                if (fh.len < 1) return connError(s, .frame_size);
                s.fixed_need = 1;
            }
        },
        .headers => {
            if (fh.stream == 0 or fh.stream & 1 == 0) return connError(s, .protocol);
            if (fh.flags & flag_padded != 0) s.fixed_need += 1;
            if (fh.flags & flag_priority != 0) s.fixed_need += 5;
            if (fh.len < s.fixed_need) return connError(s, .frame_size);
            beginHeaders(s, fh);
        },
        .continuation => {
            if (!s.block_active) return connError(s, .protocol);
            // An empty one that does not end the block carries nothing: its flood costs
            // work for nothing (the CONTINUATION flood's other half), counted as useless.
            if (fh.len == 0 and fh.flags & flag_end_headers == 0) useless(s);
        },
        .priority => {
            if (fh.stream == 0) return connError(s, .protocol);
            if (fh.len != 5) return streamErrorOn(s, fh.stream, .frame_size);
            s.fixed_need = 5;
        },
        .rst_stream => {
            if (fh.stream == 0) return connError(s, .protocol);
            if (fh.len != 4) return connError(s, .frame_size);
            if (fh.stream > s.last_stream_id) return connError(s, .protocol);
            s.fixed_need = 4;
        },
        .settings => {
            if (fh.stream != 0) return connError(s, .protocol);
            if (fh.flags & flag_ack != 0) {
                if (fh.len != 0) return connError(s, .frame_size);
            } else if (fh.len % 6 != 0) return connError(s, .frame_size);
        },
        .push_promise => return connError(s, .protocol),
        .ping => {
            if (fh.stream != 0) return connError(s, .protocol);
            if (fh.len != 8) return connError(s, .frame_size);
            s.fixed_need = 8;
        },
        .goaway => {
            if (fh.stream != 0) return connError(s, .protocol);
            if (fh.len < 8) return connError(s, .frame_size);
            s.fixed_need = 8;
        },
        .window_update => {
            if (fh.len != 4) return connError(s, .frame_size);
            s.fixed_need = 4;
        },
        _ => useless(s),
    }
}

/// Part of the current frame's payload.
pub fn payload(s: *Session, bytes_in: []const u8) void {
    const fh = s.frame.?;
    var bytes = bytes_in;
    // The fixed prefix first.
    if (s.fixed_len < s.fixed_need) {
        const n = @min(bytes.len, s.fixed_need - s.fixed_len);
        @memcpy(s.fixed[s.fixed_len..][0..n], bytes[0..n]);
        s.fixed_len += @intCast(n);
        bytes = bytes[n..];
        if (s.fixed_len < s.fixed_need) return;
        prefixDone(s, fh);
        if (s.dead or s.frame == null) return;
    }
    switch (fh.type) {
        .data => dataBytes(s, fh, bodyPart(s, bytes)),
        .headers, .continuation => {
            const part = bodyPart(s, bytes);
            if (s.block.items.len + part.len > s.conn.server.opts.limits.head_bytes_max) {
                // A header block too large to decode (CONTINUATION flood, CVE-2024-27316).
                return connError(s, .enhance_your_calm);
            }
            s.block.appendSlice(s.gpa, part) catch return connErrorFor(s, "out of memory for an HTTP/2 header block");
        },
        .settings => {
            var rest = bytes;
            while (rest.len > 0) {
                const n = @min(rest.len, 6 - s.fixed_len);
                @memcpy(s.fixed[s.fixed_len..][0..n], rest[0..n]);
                s.fixed_len += @intCast(n);
                rest = rest[n..];
                if (s.fixed_len == 6) {
                    s.fixed_len = 0;
                    applySetting(s, std.mem.readInt(u16, s.fixed[0..2], .big), std.mem.readInt(u32, s.fixed[2..6], .big));
                    if (s.dead) return;
                }
            }
        },
        // GOAWAY's debug data, unknown frames: skipped.
        else => {},
    }
}

/// The part of `bytes` before the current frame's padding (which is skipped).
pub fn bodyPart(s: *Session, bytes: []const u8) []const u8 {
    // `frame_left` already excludes `bytes`: the padding is the last `pad_len` bytes.
    const after = s.frame_left;
    if (after >= s.pad_len) return bytes;
    const pad_here = s.pad_len - after;
    return bytes[0 .. bytes.len - @min(bytes.len, pad_here)];
}

pub fn prefixDone(s: *Session, fh: FrameHeader) void {
    switch (fh.type) {
        .data => {
            s.pad_len = s.fixed[0];
            if (s.pad_len > fh.len - 1) return connError(s, .protocol);
        },
        .headers => {
            var at: usize = 0;
            if (fh.flags & flag_padded != 0) {
                s.pad_len = s.fixed[0];
                at = 1;
                if (s.pad_len > fh.len - s.fixed_need) return connError(s, .protocol);
            }
            if (fh.flags & flag_priority != 0) {
                const dep = std.mem.readInt(u32, s.fixed[at..][0..4], .big) & 0x7fff_ffff;
                // A stream cannot depend on itself: its block is still decoded (HPACK state).
                if (dep == fh.stream) s.block_self_dependent = true;
            }
        },
        .priority => {
            const dep = std.mem.readInt(u32, s.fixed[0..4], .big) & 0x7fff_ffff;
            if (dep == fh.stream) return streamErrorOn(s, fh.stream, .protocol);
            useless(s);
        },
        .rst_stream => onReset(s, fh.stream, std.mem.readInt(u32, s.fixed[0..4], .big)),
        .ping => onPing(s, fh),
        .goaway => onGoaway(s),
        .window_update => onWindowUpdate(s, fh.stream, std.mem.readInt(u32, s.fixed[0..4], .big) & 0x7fff_ffff),
        else => {},
    }
}

pub fn endFrame(s: *Session) void {
    const fh = s.frame.?;
    s.frame = null;
    switch (fh.type) {
        .data => dataEnd(s, fh),
        .headers, .continuation => if (fh.flags & flag_end_headers != 0) headerBlockDone(s),
        .settings => if (fh.flags & flag_ack == 0) settingsDone(s),
        else => {},
    }
}
