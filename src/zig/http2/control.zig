//! HTTP/2 connection-level frames (SETTINGS, PING, GOAWAY, RST_STREAM) and the
//! per-second budgets for frames that cost work and carry nothing.
const std = @import("std");
const frames = @import("frames.zig");
const FrameHeader = frames.FrameHeader;
const windowGrow = frames.windowGrow;
const flag_ack = frames.flag_ack;
const setting_enable_push = frames.setting_enable_push;
const setting_initial_window_size = frames.setting_initial_window_size;
const setting_max_frame_size = frames.setting_max_frame_size;
const setting_enable_connect_protocol = frames.setting_enable_connect_protocol;
const window_max = frames.window_max;

const errors = @import("errors.zig");
const scheduler = @import("scheduler.zig");
const state = @import("state.zig");
const streams = @import("streams.zig");
const connError = errors.connError;
/// The per-second budgets live with the connection errors they end in (`errors.zig`).
pub const useless = errors.useless;
pub const tick = errors.tick;
const queueControl = scheduler.queueControl;
const Session = state.Session;
const frame_size_max = state.frame_size_max;
const resets_per_second_max = state.resets_per_second_max;
const find = streams.find;
const resetLocal = streams.resetLocal;

pub fn applySetting(s: *Session, id: u16, value: u32) void {
    switch (id) {
        setting_enable_push => if (value > 1) return connError(s, .protocol),
        setting_initial_window_size => {
            if (value > window_max) return connError(s, .flow_control);
            std.debug.assert(s.peer_initial_window >= 0 and s.peer_initial_window <= window_max);
            const delta = @as(i64, value) - s.peer_initial_window;
            s.peer_initial_window = value;
            var it = s.first;
            while (it) |st| : (it = st.next) {
                st.send_window = windowGrow(st.send_window, delta) catch return connError(s, .flow_control);
            }
        },
        setting_max_frame_size => {
            if (value < frames.frame_size_default or value > frames.frame_size_limit) return connError(s, .protocol);
            s.peer_frame_size = @min(value, frame_size_max * 4);
            // What the scheduler cuts frames to: within RFC 9113 6.5.2's range and our cap.
            std.debug.assert(s.peer_frame_size >= frames.frame_size_default and s.peer_frame_size <= frame_size_max * 4);
        },
        setting_enable_connect_protocol => if (value > 1) return connError(s, .protocol),
        // The table size bounds the peer's decoder: our encoder never indexes, so any size suits it.
        else => {},
    }
}

pub fn settingsDone(s: *Session) void {
    useless(s);
    if (s.dead) return;
    s.preface_settings = true;
    var buf: [frames.header_bytes]u8 = undefined;
    (FrameHeader{ .len = 0, .type = .settings, .flags = flag_ack, .stream = 0 }).write(&buf);
    queueControl(s, &buf) catch return;
    // A larger window may let waiting streams go on.
    s.conn.flush();
}

pub fn onPing(s: *Session, fh: FrameHeader) void {
    if (fh.flags & flag_ack != 0) {
        // The drain's PING came back: streams the client sent before our first GOAWAY
        // have arrived, so the final one can name the last of them.
        if (s.drain_ping_sent and std.mem.eql(u8, s.fixed[0..8], &state.drain_ping_payload)) errors.finalGoaway(s);
        return;
    }
    std.debug.assert(fh.len == 8 and fh.stream == 0 and s.fixed_len == 8);
    useless(s);
    if (s.dead) return;
    const h = frames.header_bytes;
    var buf: [h + 8]u8 = undefined;
    (FrameHeader{ .len = 8, .type = .ping, .flags = flag_ack, .stream = 0 }).write(buf[0..h]);
    @memcpy(buf[h..][0..8], s.fixed[0..8]);
    queueControl(s, &buf) catch return;
}

/// The client will open no more streams; those open finish. Nothing to answer.
pub fn onGoaway(_: *Session) void {}

pub fn onReset(s: *Session, id: u32, code: u32) void {
    _ = code;
    const st = find(s, id) orelse {
        // Both sides have now reset it: whatever the client sends on it next is an error.
        for (&s.recent_resets) |*r| if (r.* == id) {
            r.* = 0;
        };
        return;
    };
    // RST_STREAM on an idle stream was a connection error (`beginFrame`).
    std.debug.assert(id != 0 and id <= s.last_stream_id);
    if (st.held and !st.base.resp_complete) {
        // Rapid Reset: many streams opened and reset while their apps run.
        tick(s);
        s.resets_in_window += 1;
        if (s.resets_in_window > resets_per_second_max) return connError(s, .enhance_your_calm);
    }
    st.remote_closed = true;
    st.peer_reset = true;
    resetLocal(s, st);
}
