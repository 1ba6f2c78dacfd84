//! HTTP/2's session state: the `Session` every concern of the protocol reads and changes,
//! its bounds, and the few questions asked of it alone (which session a connection holds,
//! whether it has settled, the connection's one timer). The concerns beside it import this
//! file, not `session.zig`, the entry point that imports them all; so they form no knot
//! with it (docs/ARCHITECTURE.md).
const std = @import("std");
const sink_mod = @import("sink.zig");
const hpack = @import("hpack.zig");
const conn_mod = @import("../core/connection.zig");
const Conn = conn_mod.Conn;
const deadlines = @import("../os/deadlines.zig");
const seam = @import("../core/protocol.zig"); // how the core holds the session (`Http2Held`)
const frames = @import("frames.zig");
const FrameHeader = frames.FrameHeader;
const H2Stream = @import("streams.zig").H2Stream;

/// Our SETTINGS_MAX_FRAME_SIZE (the protocol's default; we never ask for more).
pub const frame_size_max: u32 = frames.frame_size_default;

/// Our SETTINGS_HEADER_TABLE_SIZE: the HPACK dynamic table a client may fill.
pub const header_table_size: u32 = 4096;

/// The window each request body gets (SETTINGS_INITIAL_WINDOW_SIZE)...
pub const stream_window: u32 = 256 * 1024;

/// ...and all of a connection's bodies together: the most request body one connection buffers.
pub const connection_window: u32 = 1024 * 1024;

/// `fill` stops moving frames into the output queue past this many queued bytes.
pub const fill_target: usize = 64 * 1024;

/// A client that sends frames needing answers (PING, SETTINGS) faster than it reads
/// them: past this much queued output its frames are not read until the queue drains.
pub const read_pause_bytes: usize = 256 * 1024;

/// The output queue's buffer never grows past this (a header block plus `fill_target`).
pub const out_bytes_max = sink_mod.out_bytes_max;

/// Streams the client resets while their app runs, per second, before GOAWAY
/// ENHANCE_YOUR_CALM (Rapid Reset, CVE-2023-44487).
pub const resets_per_second_max: u32 = 200;

/// Frames that cost work and carry nothing (PING, SETTINGS, PRIORITY, empty DATA,
/// unknown types, WINDOW_UPDATE on closed streams), per second, before GOAWAY ENHANCE_YOUR_CALM.
pub const useless_frames_per_second_max: u32 = 10_000;

/// A request body still arriving after its response was sent is dropped up to this
/// much; past it the stream is reset (NO_ERROR) so the client stops sending.
pub const discard_bytes_max: u64 = 64 * 1024;

/// Stream ids we reset recently, whose in-flight frames are dropped without an error.
pub const recent_resets_len = 16;

pub const Session = struct {
    conn: *Conn,
    /// Streams, header blocks, bodies and response items come from it.
    gpa: std.mem.Allocator,
    /// Where frames go and wakes are raised (`connSink(conn)` but in unit tests).
    sink: sink_mod.Sink,
    decoder: hpack.Decoder,
    first: ?*H2Stream = null,
    last: ?*H2Stream = null,
    /// Streams allocated (the concurrency limit counts these).
    live: u32 = 0,
    /// Of those, the ones an app holds.
    held: u32 = 0,
    max_streams: u32,
    /// Highest stream id the client opened.
    last_stream_id: u32 = 0,
    /// The final GOAWAY went out: no new stream is taken; the connection closes once settled.
    goaway_sent: bool = false,
    /// The last stream id our latest GOAWAY named (none yet: the largest).
    goaway_last_id: u32 = frames.stream_id_max,
    /// The drain's first GOAWAY (no stream named) and its PING went out (`drainStarted`).
    drain_ping_sent: bool = false,
    /// A connection error was sent: nothing more is read; the connection closes once written.
    dead: bool = false,
    preface_settings: bool = false,
    /// After an h2c upgrade: the client's preface has not arrived yet. Until it does,
    /// only the 101 and our SETTINGS go out; stream 1's frames wait (see `scheduler.fill`).
    await_preface: bool = false,

    // The peer's settings.
    peer_initial_window: i64 = frames.initial_window_default,
    peer_frame_size: u32 = frames.frame_size_default,
    peer_connect_protocol: bool = false,

    send_window: i64 = frames.initial_window_default,
    recv_window: i64 = frames.initial_window_default,
    recv_unacked: u32 = 0,
    /// Bytes of the current DATA frame that `dataBytes` put into a stream's body: those are
    /// credited by whoever reads or frees the body, the rest by `dataEnd`.
    data_buffered: u32 = 0,

    // The frame being read.
    frame: ?FrameHeader = null,
    /// Bytes of the current frame's payload not yet consumed.
    frame_left: u32 = 0,
    /// The payload's fixed prefix (pad length, priority, control frames) gathered so far.
    fixed: [8]u8 = undefined,
    fixed_len: u8 = 0,
    fixed_need: u8 = 0,
    /// Padding at the end of the current DATA/HEADERS frame, skipped.
    pad_len: u32 = 0,

    // The header block being gathered (HEADERS then CONTINUATION frames).
    block: std.ArrayListUnmanaged(u8) = .{},
    block_stream: u32 = 0,
    block_end_stream: bool = false,
    block_active: bool = false,
    /// The block is the trailers of an open stream, not a new request.
    block_trailers: bool = false,
    /// Its HEADERS made the stream depend on itself: a stream error once decoded.
    block_self_dependent: bool = false,

    recent_resets: [recent_resets_len]u32 = [_]u32{0} ** recent_resets_len,
    recent_reset_at: u8 = 0,

    window_start_ms: u64 = 0,
    resets_in_window: u32 = 0,
    useless_in_window: u32 = 0,

    /// `--timeout-connection`: due when the connection is past its age (the server's
    /// `lifetime_timeouts`; armed only with a limit), for a GOAWAY then (`lifetimeDue`).
    lifetime_timer: deadlines.Entry = .{},
};

pub fn sessionOf(conn: *const Conn) *Session {
    return fromHeld(conn.a().proto.http2);
}

/// The session from what the connection's `Active` holds (`seam.Http2Session`, aligned as
/// a `Session` is: the cast is free).
pub fn fromHeld(held: seam.Http2Held) *Session {
    return @ptrCast(held);
}

/// The connection's one timer: idle (no stream), write (output waits on the peer's
/// window), body (an app waits for request body bytes), or none.
pub fn rearm(conn: *Conn) void {
    if (conn.state != .h2) return;
    const s = sessionOf(conn);
    const srv = conn.server;
    var blocked = false;
    var awaiting = false;
    var it = s.first;
    while (it) |st| : (it = st.next) {
        if (st.hasOutput()) blocked = true;
        if (st.awaiting_body) awaiting = true;
    }
    // A window stall runs on the connection's own timer (`stall_timeouts`, the write
    // timeout's length); `write_timeouts` holds the Active's timer for a socket that does not drain.
    const want: ?*@import("../os/deadlines.zig").Queue = if (s.held == 0 and !blocked) &srv.idle_timeouts else if (blocked and s.sink.outputLen() == 0) &srv.stall_timeouts else if (awaiting) &srv.body_timeouts else null;
    if (want) |q| {
        if (!conn.timer.in(q)) q.arm(&conn.timer, srv.now_ms);
    } else conn.timer.disarm();
}

/// No app runs on the connection and nothing waits to be sent: after GOAWAY it may close.
pub fn settled(s: *const Session) bool {
    if (s.held != 0) return false;
    var it = s.first;
    while (it) |st| : (it = st.next) if (st.hasOutput()) return false;
    return true;
}

/// The opaque data of the drain's PING (RFC 9113 6.7): its ACK sends the final GOAWAY.
pub const drain_ping_payload = [8]u8{ 'z', 'c', '-', 'd', 'r', 'a', 'i', 'n' };
