//! HTTP/2 (RFC 9113) as a protocol over a connection: many streams at once.
//!
//! A connection becomes HTTP/2 when its first bytes are the client preface, over TLS
//! after ALPN chose "h2" or on a plain port (h2c with prior knowledge). From then on
//! the connection's bytes are frames, read here as they arrive (a frame may be larger
//! than the read buffer: payloads are consumed in pieces), and each request is a
//! `Stream` (`transport/stream.zig`) that the app side drives with the same verbs as HTTP/1.1.
//!
//! Output. What a stream sends (its response HEADERS, DATA, trailers) waits in the
//! stream's own list of items; `fill` moves frames from those lists into the
//! connection's output queue, one frame per stream in turn (fair interleaving), as
//! far as the peer's flow-control windows allow and only while the queue is short
//! (`fill_target`), so a fast app never buffers more than a stream's mark. Control
//! frames (SETTINGS and PING acks, WINDOW_UPDATE, RST_STREAM, GOAWAY) go straight into
//! the queue. Request bodies are buffered per stream up to the window we granted, and
//! credited back (WINDOW_UPDATE) only as the app reads them: `receive()` is the
//! backpressure.
//!
//! Limits: `Session.max_streams` streams at once (each one counts until its app is
//! done and its output written), header blocks bounded by the request head limit
//! across CONTINUATION frames, client resets and useless frames counted per second,
//! control-frame acks bounded by the output queue. Each ends the connection with
//! GOAWAY (ENHANCE_YOUR_CALM) rather than grow.
const std = @import("std");
const sys = @import("../os/sys.zig");
const hpack = @import("hpack.zig");
const response = @import("../http/response.zig");
const outq = @import("../transport/output_queue.zig");
const conn_mod = @import("../transport/connection.zig");
const Conn = conn_mod.Conn;
const stream_mod = @import("../transport/stream.zig");
const Stream = stream_mod.Stream;
const Server = @import("../transport/server.zig").Server;
const h1 = @import("../http1/session.zig"); // against the layers: h2c upgrade's request and the engine's own answers (opsAnswer) shared with HTTP/1.1
const http1 = @import("../http1/parser.zig"); // the header field type shared by both protocols
const ws = @import("../websocket/codec.zig"); // RFC 8441: WebSocket over an HTTP/2 stream
const wsconn = @import("../websocket/session.zig"); // RFC 8441: WebSocket over an HTTP/2 stream
const deflate = @import("../websocket/deflate.zig"); // RFC 8441: WebSocket over an HTTP/2 stream

const frames = @import("frames.zig");
const ErrorCode = frames.ErrorCode;
const FrameType = frames.FrameType;
const FrameHeader = frames.FrameHeader;
const windowGrow = frames.windowGrow;
const windowUse = frames.windowUse;
const flag_end_stream = frames.flag_end_stream;
const flag_ack = frames.flag_ack;
const flag_end_headers = frames.flag_end_headers;
const flag_padded = frames.flag_padded;
const flag_priority = frames.flag_priority;
const setting_enable_push = frames.setting_enable_push;
const setting_max_concurrent_streams = frames.setting_max_concurrent_streams;
const setting_initial_window_size = frames.setting_initial_window_size;
const setting_max_frame_size = frames.setting_max_frame_size;
const setting_max_header_list_size = frames.setting_max_header_list_size;
const setting_enable_connect_protocol = frames.setting_enable_connect_protocol;
pub const window_max = frames.window_max;
const request = @import("request.zig");
const scratch = @import("../http/scratch.zig");

pub const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// ---- constants (documented in the README's HTTP/2 section) ----------------------------

/// Our SETTINGS_MAX_FRAME_SIZE (the protocol's default; we never ask for more).
pub const frame_size_max: u32 = 16384;
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
const out_bytes_max: usize = 2 * 1024 * 1024;
/// Streams the client resets while their app runs, per second, before GOAWAY
/// ENHANCE_YOUR_CALM (Rapid Reset, CVE-2023-44487).
pub const resets_per_second_max: u32 = 200;
/// Frames that cost work and carry nothing (PING, SETTINGS, PRIORITY, empty DATA,
/// unknown types, WINDOW_UPDATE on closed streams), per second, before GOAWAY ENHANCE_YOUR_CALM.
pub const useless_frames_per_second_max: u32 = 10_000;
/// A request body still arriving after its response was sent is dropped up to this
/// much; past it the stream is reset (NO_ERROR) so the client stops sending.
const discard_bytes_max: u64 = 64 * 1024;
/// Stream ids we reset recently, whose in-flight frames are dropped without an error.
const recent_resets_len = 16;

// ---- a stream's HTTP/2 side ---------------------------------------------------------

/// One response item waiting for `fill`: a header block (owned) or body bytes (borrowed
/// from `owner`, or an owned copy when `owned`).
const Item = struct {
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
    ws: ?*wsconn.Session = null,

    fn of(st: *Stream) *H2Stream {
        return @fieldParentPtr("base", st);
    }

    fn hasOutput(self: *const H2Stream) bool {
        return self.item_head < self.items.items.len;
    }

    /// Closed both ways, or reset: nothing more goes out or comes in.
    fn closed(self: *const H2Stream) bool {
        return self.base.reset or (self.local_closed and self.remote_closed);
    }
};

// ---- the session: one per HTTP/2 connection -----------------------------------------

pub const Session = struct {
    conn: *Conn,
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
    goaway_sent: bool = false,
    /// A connection error was sent: nothing more is read; the connection closes once written.
    dead: bool = false,
    preface_settings: bool = false,
    /// After an h2c upgrade: the client's preface has not arrived yet.
    await_preface: bool = false,

    // The peer's settings.
    peer_initial_window: i64 = 65535,
    peer_frame_size: u32 = 16384,
    peer_connect_protocol: bool = false,

    send_window: i64 = 65535,
    recv_window: i64 = 65535,
    recv_unacked: u32 = 0,

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
};

fn sessionOf(conn: *Conn) *Session {
    return conn.a().proto.http2;
}

/// Module scratch for decoded header blocks and the request view (the GIL and the
/// single engine thread serialise every use; valid during `on_request` only).
var decoded_bytes: [@import("../transport/server.zig").request_head_bytes_max]u8 = undefined;
var decoded_fields: [@import("../transport/server.zig").request_fields_max + 8]hpack.Header = undefined;
var encode_scratch: [512]u8 = undefined;

// ---- starting -------------------------------------------------------------------------

/// Whether `data` (the first bytes of a connection) is, or may still become, the preface.
pub fn prefaceState(data: []const u8) enum { no, partial, yes } {
    const n = @min(data.len, preface.len);
    if (!std.mem.eql(u8, data[0..n], preface[0..n])) return .no;
    return if (data.len >= preface.len) .yes else .partial;
}

/// The connection's first bytes were the preface (now consumed): it speaks HTTP/2.
pub fn begin(conn: *Conn) void {
    const s = newSession(conn) orelse return;
    sendPreface(s) catch return;
    process(conn);
}

/// The answer that switches a connection to h2c (RFC 7540 3.2); HTTP/2 frames follow it.
const switching_protocols = "HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: h2c\r\n\r\n";

/// An HTTP/1.1 request asked to upgrade to h2c (RFC 7540 3.2) and `h1` found it fit
/// (plain connection, no body, one HTTP2-Settings field: `settings` is its decoded
/// payload, a whole number of settings). The connection answers 101 and speaks HTTP/2;
/// the request becomes stream 1, half-closed from the client's side; the client's
/// preface is expected next. The 101 acknowledges `settings`: no SETTINGS ack is sent.
pub fn beginUpgrade(conn: *Conn, req: *const http1.Request, settings: []const u8) void {
    std.debug.assert(settings.len % 6 == 0 and conn.session() == null);
    conn.queueCopy(switching_protocols, null, out_bytes_max) catch return conn.closeFor("out of memory for an h2c upgrade");
    const s = newSession(conn) orelse return;
    s.await_preface = true;
    sendPreface(s) catch return;
    var i: usize = 0;
    while (i < settings.len) : (i += 6) {
        applySetting(s, std.mem.readInt(u16, settings[i..][0..2], .big), std.mem.readInt(u32, settings[i + 2 ..][0..4], .big));
        if (s.dead) return;
    }
    s.last_stream_id = 1;
    const st = newStream(s, 1) orelse return;
    st.remote_closed = true;
    st.base.body_done = true;
    st.base.is_head_method = std.mem.eql(u8, req.method, "HEAD");
    for (req.headers) |f| if (std.mem.eql(u8, f.name, "te") and http1.connectionHas(f.value, "trailers")) {
        st.base.te_trailers = true;
    };
    var view = stream_mod.Request{
        .method = req.method,
        .path = req.path,
        .query = req.query,
        .authority = req.host,
        .scheme = "http",
        .headers = withoutHopByHop(req.headers),
        .version = .http2,
    };
    dispatch(s, st, &view, true);
    if (conn.state == .h2) process(conn);
}

/// The fields of an HTTP/1.1 request that HTTP/2 does not carry (RFC 9113 8.2.2),
/// removed in place: an upgraded request reaches the app as an HTTP/2 one would.
fn withoutHopByHop(fields: []http1.Header) []http1.Header {
    var n: usize = 0;
    for (fields) |f| {
        const hop = for (request.connection_specific ++ [_][]const u8{"http2-settings"}) |name| {
            if (std.mem.eql(u8, f.name, name)) break true;
        } else std.mem.eql(u8, f.name, "te") and !std.ascii.eqlIgnoreCase(f.value, "trailers");
        if (hop) continue;
        fields[n] = f;
        n += 1;
    }
    return fields[0..n];
}

fn newSession(conn: *Conn) ?*Session {
    const srv = conn.server;
    const s = std.heap.c_allocator.create(Session) catch {
        conn.closeFor("out of memory for an HTTP/2 session");
        return null;
    };
    s.* = .{
        .conn = conn,
        .decoder = hpack.Decoder.init(header_table_size),
        .max_streams = srv.opts.h2_max_streams,
    };
    // HTTP/2 replaces HTTP/1.1 before any HTTP/1.1 stream began (the preface, or the h2c
    // upgrade's request, which becomes HTTP/2's stream 1).
    const act = conn.a();
    std.debug.assert(act.stream == null);
    act.proto = .{ .http2 = s };
    conn.state = .h2;
    conn.timer.disarm();
    return s;
}

/// The server's preface: our settings, then the connection window opened to `connection_window`.
fn sendPreface(s: *Session) outq.Error!void {
    const srv = s.conn.server;
    var buf: [9 + 6 * 5 + 13]u8 = undefined;
    var n: usize = 9;
    const settings = [_][2]u32{
        .{ setting_max_concurrent_streams, s.max_streams },
        .{ setting_initial_window_size, stream_window },
        .{ setting_max_header_list_size, @intCast(srv.opts.limits.head_bytes_max) },
        .{ setting_enable_push, 0 },
        .{ setting_enable_connect_protocol, @intFromBool(srv.opts.ws_enabled) },
    };
    for (settings) |kv| {
        std.mem.writeInt(u16, buf[n..][0..2], @intCast(kv[0]), .big);
        std.mem.writeInt(u32, buf[n + 2 ..][0..4], kv[1], .big);
        n += 6;
    }
    (FrameHeader{ .len = @intCast(n - 9), .type = .settings, .flags = 0, .stream = 0 }).write(buf[0..9]);
    const inc = connection_window - 65535;
    (FrameHeader{ .len = 4, .type = .window_update, .flags = 0, .stream = 0 }).write(buf[n..][0..9]);
    std.mem.writeInt(u32, buf[n + 9 ..][0..4], inc, .big);
    n += 13;
    s.recv_window = connection_window;
    try queueControl(s.conn, buf[0..n]);
    s.conn.flush();
    if (s.conn.state == .closed) return error.OutOfMemory;
}

/// Frees the session and any stream no app holds (the connection is being freed).
pub fn destroy(s: *Session) void {
    while (s.first) |st| {
        std.debug.assert(!st.held);
        freeStream(s, st);
    }
    s.decoder.deinit();
    s.block.deinit(std.heap.c_allocator);
    std.heap.c_allocator.destroy(s);
}

// ---- reading frames -------------------------------------------------------------------

/// Consumes every complete piece of frame that is buffered.
pub fn process(conn: *Conn) void {
    const s = sessionOf(conn);
    const act = conn.a();
    // WebSocket streams that stopped parsing (their app was behind) go on first.
    var it = s.first;
    while (it) |st| {
        it = st.next;
        if (st.ws) |w| if (w.open and !wsInputEmpty(st)) wsconn.processSession(w);
        if (conn.state != .h2) return;
    }
    while (conn.state == .h2 and !s.dead) {
        if (s.await_preface and !consumePreface(s)) break;
        if (conn.outputLen() > read_pause_bytes) {
            // The client does not read what its frames made us write: stop reading it.
            conn.setReading(false);
            break;
        }
        const buf = act.rbuf orelse break;
        const avail = buf[act.rstart..act.rlen];
        if (s.frame == null) {
            if (avail.len < 9) break;
            act.rstart += 9;
            beginFrame(s, FrameHeader.parse(avail[0..9]));
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
fn consumePreface(s: *Session) bool {
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

fn beginFrame(s: *Session, fh: FrameHeader) void {
    s.frame = fh;
    s.frame_left = fh.len;
    s.fixed_len = 0;
    s.fixed_need = 0;
    s.pad_len = 0;
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
fn payload(s: *Session, bytes_in: []const u8) void {
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
            s.block.appendSlice(std.heap.c_allocator, part) catch return connErrorFor(s, "out of memory for an HTTP/2 header block");
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
fn bodyPart(s: *Session, bytes: []const u8) []const u8 {
    // `frame_left` already excludes `bytes`: the padding is the last `pad_len` bytes.
    const after = s.frame_left;
    if (after >= s.pad_len) return bytes;
    const pad_here = s.pad_len - after;
    return bytes[0 .. bytes.len - @min(bytes.len, pad_here)];
}

fn prefixDone(s: *Session, fh: FrameHeader) void {
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

fn endFrame(s: *Session) void {
    const fh = s.frame.?;
    s.frame = null;
    switch (fh.type) {
        .data => dataEnd(s, fh),
        .headers, .continuation => if (fh.flags & flag_end_headers != 0) headerBlockDone(s),
        .settings => if (fh.flags & flag_ack == 0) settingsDone(s),
        else => {},
    }
}

// ---- connection-level frames ----------------------------------------------------------

fn applySetting(s: *Session, id: u16, value: u32) void {
    switch (id) {
        setting_enable_push => if (value > 1) return connError(s, .protocol),
        setting_initial_window_size => {
            if (value > window_max) return connError(s, .flow_control);
            const delta = @as(i64, value) - s.peer_initial_window;
            s.peer_initial_window = value;
            var it = s.first;
            while (it) |st| : (it = st.next) {
                st.send_window = windowGrow(st.send_window, delta) catch return connError(s, .flow_control);
            }
        },
        setting_max_frame_size => {
            if (value < 16384 or value > 16777215) return connError(s, .protocol);
            s.peer_frame_size = @min(value, frame_size_max * 4);
        },
        setting_enable_connect_protocol => if (value > 1) return connError(s, .protocol),
        // The table size bounds the peer's decoder: our encoder never indexes, so any size suits it.
        else => {},
    }
}

fn settingsDone(s: *Session) void {
    useless(s);
    if (s.dead) return;
    s.preface_settings = true;
    var buf: [9]u8 = undefined;
    (FrameHeader{ .len = 0, .type = .settings, .flags = flag_ack, .stream = 0 }).write(&buf);
    queueControl(s.conn, &buf) catch return;
    // A larger window may let waiting streams go on.
    s.conn.flush();
}

fn onPing(s: *Session, fh: FrameHeader) void {
    if (fh.flags & flag_ack != 0) return;
    useless(s);
    if (s.dead) return;
    var buf: [17]u8 = undefined;
    (FrameHeader{ .len = 8, .type = .ping, .flags = flag_ack, .stream = 0 }).write(buf[0..9]);
    @memcpy(buf[9..17], s.fixed[0..8]);
    queueControl(s.conn, &buf) catch return;
}

/// The client will open no more streams; those open finish. Nothing to answer.
fn onGoaway(_: *Session) void {}

fn onWindowUpdate(s: *Session, id: u32, inc: u32) void {
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

fn onReset(s: *Session, id: u32, code: u32) void {
    _ = code;
    const st = find(s, id) orelse {
        // Both sides have now reset it: whatever the client sends on it next is an error.
        for (&s.recent_resets) |*r| if (r.* == id) {
            r.* = 0;
        };
        return;
    };
    if (st.held and !st.base.resp_complete) {
        // Rapid Reset: many streams opened and reset while their apps run.
        tick(s);
        s.resets_in_window += 1;
        if (s.resets_in_window > resets_per_second_max) return connError(s, .enhance_your_calm);
    }
    st.remote_closed = true;
    resetLocal(s, st);
}

/// Counts a frame that makes us work without carrying a request or response.
fn useless(s: *Session) void {
    tick(s);
    s.useless_in_window += 1;
    if (s.useless_in_window > useless_frames_per_second_max) connError(s, .enhance_your_calm);
}

fn tick(s: *Session) void {
    const now = s.conn.server.now_ms;
    if (now -% s.window_start_ms >= 1000) {
        s.window_start_ms = now;
        s.resets_in_window = 0;
        s.useless_in_window = 0;
    }
}

// ---- DATA ----------------------------------------------------------------------------

fn dataBytes(s: *Session, fh: FrameHeader, bytes: []const u8) void {
    if (bytes.len == 0) return;
    const st = find(s, fh.stream) orelse return;
    if (st.base.reset or st.remote_closed) return;
    if (discarding(st)) {
        // The app is done: the rest of the body is counted and dropped.
        st.base.body_received += bytes.len;
        return;
    }
    st.body.appendSlice(std.heap.c_allocator, bytes) catch return streamErrorFor(s, st, .internal, "out of memory for a request body");
    st.base.body_received += bytes.len;
}

/// The whole DATA frame was read: flow control, the stream's state, the app told.
fn dataEnd(s: *Session, fh: FrameHeader) void {
    const len = fh.len;
    if (len == 0 and fh.flags & flag_end_stream == 0) {
        useless(s);
        if (s.dead) return;
    }
    // Every DATA frame counts against the connection window, whatever its stream.
    if (len > s.recv_window) return connError(s, .flow_control);
    s.recv_window = windowUse(s.recv_window, len);
    const st = find(s, fh.stream) orelse {
        if (fh.stream > s.last_stream_id) return connError(s, .protocol);
        creditConnection(s, len);
        if (wasResetByUs(s, fh.stream)) return;
        return connError(s, .stream_closed);
    };
    if (st.remote_closed) {
        creditConnection(s, len);
        if (st.base.reset) return;
        return streamError(s, st, .stream_closed);
    }
    if (len > st.recv_window) return streamError(s, st, .flow_control);
    st.recv_window = windowUse(st.recv_window, len);
    if (st.ws) |session| if (!discarding(st)) return wsDataEnd(s, st, session, fh);
    if (discarding(st)) return discardedDataEnd(s, st, fh);
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
    if (st.held) s.conn.server.hooks.wakeRead(&st.base);
}

/// RFC 8441: a DATA frame of a WebSocket stream, its frames parsed as they come and
/// credited back as they are parsed.
fn wsDataEnd(s: *Session, st: *H2Stream, session: *wsconn.Session, fh: FrameHeader) void {
    const padding = fh.len - dataLenOf(fh, s);
    if (padding > 0) creditStream(s, st, padding);
    wsconn.processSession(session);
    if (fh.flags & flag_end_stream != 0) if (find(s, fh.stream)) |still| {
        // The client's side ended: after its frames, the session is over for the app.
        remoteEnded(s, still);
        if (find(s, fh.stream)) |again| if (again.ws) |w| w.wake();
    };
}

/// A DATA frame for a stream whose app is done: counted, checked and dropped.
fn discardedDataEnd(s: *Session, st: *H2Stream, fh: FrameHeader) void {
    creditStream(s, st, fh.len);
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
fn dataLenOf(fh: FrameHeader, s: *const Session) u64 {
    if (fh.flags & flag_padded == 0) return fh.len;
    return fh.len - 1 - s.pad_len;
}

/// The app is done and the response written: request body bytes are no longer kept.
fn discarding(st: *const H2Stream) bool {
    return !st.held and st.local_closed and !st.hasOutput();
}

fn remoteEnded(s: *Session, st: *H2Stream) void {
    st.remote_closed = true;
    st.base.body_done = true;
    if (st.closed()) maybeFree(s, st);
}

// ---- HEADERS -------------------------------------------------------------------------

fn beginHeaders(s: *Session, fh: FrameHeader) void {
    s.block.clearRetainingCapacity();
    s.block_active = true;
    s.block_stream = fh.stream;
    s.block_end_stream = fh.flags & flag_end_stream != 0;
    s.block_trailers = false;
    s.block_self_dependent = false;
    if (fh.stream <= s.last_stream_id) {
        const st = find(s, fh.stream) orelse return connError(s, .stream_closed);
        if (st.remote_closed) return connError(s, .stream_closed);
        // A second HEADERS on an open stream: the request's trailers, which end it.
        s.block_trailers = true;
        return;
    }
    s.last_stream_id = fh.stream;
}

fn headerBlockDone(s: *Session) void {
    s.block_active = false;
    const id = s.block_stream;
    const limit = s.conn.server.opts.limits.head_bytes_max;
    scratch.claim();
    const fields = s.decoder.decode(s.block.items, decoded_bytes[0..limit], &decoded_fields) catch |err| {
        // The decoder's table is out of step with the client's: the connection cannot go on.
        return connError(s, if (err == error.Compression) .compression else .enhance_your_calm);
    };
    shrinkBlock(s);
    if (s.block_trailers) return trailersDone(s, id, fields);
    if (s.block_self_dependent) return streamErrorId(s, id, .protocol);
    if (s.goaway_sent) return; // opened after our GOAWAY: ignored (RFC 9113 6.8)
    if (s.live >= s.max_streams) return streamErrorId(s, id, .refused_stream);
    openStream(s, id, fields);
}

/// A header block buffer that grew for one large block goes back to a small one.
fn shrinkBlock(s: *Session) void {
    if (s.block.capacity > 4096) {
        s.block.deinit(std.heap.c_allocator);
        s.block = .{};
    } else s.block.clearRetainingCapacity();
}

fn trailersDone(s: *Session, id: u32, fields: []const hpack.Header) void {
    const st = find(s, id) orelse return;
    if (!s.block_end_stream) return streamError(s, st, .protocol);
    for (fields) |f| if (f.name.len > 0 and f.name[0] == ':') return streamError(s, st, .protocol);
    if (st.content_length) |cl| if (st.base.body_received != cl) return streamError(s, st, .protocol);
    // ASGI has no request trailers: they end the body and are dropped.
    remoteEnded(s, st);
    if (find(s, id)) |still| if (still.held) s.conn.server.hooks.wakeRead(&still.base);
}

fn openStream(s: *Session, id: u32, fields: []const hpack.Header) void {
    const conn = s.conn;
    const srv = conn.server;
    var head = request.RequestHead{};
    request.cookie_len = 0;
    const headers = request.checkRequest(fields, &head, srv.headers_storage[0..srv.opts.limits.headers_count_max], srv.opts.ws_enabled) catch |err| switch (err) {
        error.Malformed => return streamErrorId(s, id, .protocol),
        error.TooMany, error.NoSpace => {
            const st = newStream(s, id) orelse return;
            st.remote_closed = s.block_end_stream;
            return refuseStream(s, st, 431);
        },
    };
    const st = newStream(s, id) orelse return;
    st.content_length = head.content_length;
    st.base.te_trailers = head.te_trailers;
    st.base.is_head_method = std.mem.eql(u8, head.method.?, "HEAD");
    st.base.body_done = false;
    if (s.block_end_stream) {
        if (head.content_length) |cl| if (cl != 0) return streamError(s, st, .protocol);
        st.remote_closed = true;
        st.base.body_done = true;
    }
    if (head.content_length orelse 0 > srv.opts.body_bytes_max) return refuseStream(s, st, 413);
    if (head.protocol) |protocol| {
        // RFC 8441: a WebSocket on this stream.
        if (!std.ascii.eqlIgnoreCase(protocol, "websocket")) return refuseStream(s, st, 501);
        var version: ?[]const u8 = null;
        for (headers) |f| if (std.mem.eql(u8, f.name, "sec-websocket-version")) {
            version = f.value;
        };
        if (!std.mem.eql(u8, version orelse "", "13")) return refuseStream(s, st, 426);
        var hs = ws.Handshake{ .accept = [_]u8{0} ** ws.accept_bytes, .deflate = null };
        if (srv.opts.ws_deflate) hs.deflate = ws.negotiateDeflate(headers);
        if (hs.deflate != null and !deflate.load()) hs.deflate = null;
        st.ws = wsconn.create(.{ .h2 = st }, hs) orelse return refuseStream(s, st, 500);
    }
    const full = head.path.?;
    const q = std.mem.indexOfScalar(u8, full, '?');
    var view = stream_mod.Request{
        .method = head.method.?,
        .path = if (q) |i| full[0..i] else full,
        .query = if (q) |i| full[i + 1 ..] else "",
        .authority = head.authority orelse (if (request.findField(headers, "host")) |i| headers[i].value else null),
        .scheme = head.scheme,
        .headers = headers,
        .version = .http2,
    };
    dispatch(s, st, &view, head.protocol == null);
}

/// A stream's request goes to the app (or is answered by the engine: `ops` lets a health
/// or metrics path be one).
fn dispatch(s: *Session, st: *H2Stream, view: *stream_mod.Request, ops: bool) void {
    const conn = s.conn;
    const srv = conn.server;
    conn.requests_count +|= 1;
    if (st.base.prepare(view)) |wait| return answerOps(s, st, h1.tooManyRequests(wait));
    if (ops) {
        if (h1.opsAnswer(srv, view.method, view.path)) |a| return answerOps(s, st, a);
    }
    st.held = true;
    s.held += 1;
    srv.streamStarted();
    if (!srv.hooks.onRequest(&st.base, view)) {
        st.held = false;
        s.held -= 1;
        st.base.handle = null;
        srv.streamFinished();
        return refuseStream(s, st, 500);
    }
}

fn newStream(s: *Session, id: u32) ?*H2Stream {
    const st = std.heap.c_allocator.create(H2Stream) catch {
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
    return st;
}

fn find(s: *Session, id: u32) ?*H2Stream {
    var it = s.first;
    while (it) |st| : (it = st.next) if (st.id == id) return st;
    return null;
}

// ---- errors ---------------------------------------------------------------------------

/// A connection error: GOAWAY with the code, then the connection closes once it is written.
fn connError(s: *Session, code: ErrorCode) void {
    if (s.dead) return;
    s.dead = true;
    sendGoaway(s, code);
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
    if (s.conn.state == .h2 and s.conn.outputLen() == 0) s.conn.lingerClose(true);
}

fn connErrorFor(s: *Session, reason: []const u8) void {
    s.conn.server.hooks.logError(reason);
    connError(s, .internal);
}

fn sendGoaway(s: *Session, code: ErrorCode) void {
    var buf: [17]u8 = undefined;
    (FrameHeader{ .len = 8, .type = .goaway, .flags = 0, .stream = 0 }).write(buf[0..9]);
    std.mem.writeInt(u32, buf[9..13], s.last_stream_id, .big);
    std.mem.writeInt(u32, buf[13..17], @intFromEnum(code), .big);
    s.goaway_sent = true;
    s.conn.queueCopy(&buf, null, out_bytes_max) catch {};
}

/// A stream error on a stream we keep no state for (refused, malformed before it opened).
fn streamErrorId(s: *Session, id: u32, code: ErrorCode) void {
    sendReset(s, id, code);
}

/// A stream error on stream `id`, whether or not it is open: an open one is reset here
/// too (its response stops, its app is told), not only on the wire.
fn streamErrorOn(s: *Session, id: u32, code: ErrorCode) void {
    const st = find(s, id) orelse return streamErrorId(s, id, code);
    if (st.base.reset) return;
    streamError(s, st, code);
}

fn streamError(s: *Session, st: *H2Stream, code: ErrorCode) void {
    sendReset(s, st.id, code);
    st.remote_closed = true;
    resetLocal(s, st);
}

fn streamErrorFor(s: *Session, st: *H2Stream, code: ErrorCode, reason: []const u8) void {
    s.conn.server.hooks.logError(reason);
    streamError(s, st, code);
}

fn sendReset(s: *Session, id: u32, code: ErrorCode) void {
    var buf: [13]u8 = undefined;
    (FrameHeader{ .len = 4, .type = .rst_stream, .flags = 0, .stream = id }).write(buf[0..9]);
    std.mem.writeInt(u32, buf[9..13], @intFromEnum(code), .big);
    queueControl(s.conn, &buf) catch return;
    s.recent_resets[s.recent_reset_at] = id;
    s.recent_reset_at = (s.recent_reset_at + 1) % recent_resets_len;
}

fn wasResetByUs(s: *const Session, id: u32) bool {
    for (s.recent_resets) |r| if (r == id) return true;
    return false;
}

/// The stream is over (reset either way): its output is dropped, its app told.
fn resetLocal(s: *Session, st: *H2Stream) void {
    st.base.reset = true;
    st.local_closed = true;
    dropItems(s, st);
    // The body it was given is credited back to the connection.
    const unread = st.body.items.len - st.body_off;
    if (unread > 0) creditConnection(s, unread);
    st.body.clearAndFree(std.heap.c_allocator);
    st.body_off = 0;
    st.body_taken = 0;
    if (st.held) {
        s.conn.server.hooks.wakeRead(&st.base);
        st.base.write_blocked = false;
        s.conn.server.hooks.wakeWrite(&st.base);
        return;
    }
    maybeFree(s, st);
}

/// The engine answers the request itself (413, 431, 500): a head with END_STREAM.
fn refuseStream(s: *Session, st: *H2Stream, status: u16) void {
    st.base.refused = true;
    st.base.status = status;
    dropItems(s, st);
    var buf: [64]u8 = undefined;
    const n = hpack.encodeStatus(&buf, status) catch unreachable;
    const block = std.heap.c_allocator.dupe(u8, buf[0..n]) catch return streamErrorFor(s, st, .internal, "out of memory for an error response");
    pushItem(st, .{ .kind = .headers, .end_stream = true, .owned = true, .bytes = block, .alloc_len = block.len }) catch {
        std.heap.c_allocator.free(block);
        return streamErrorFor(s, st, .internal, "out of memory for an error response");
    };
    st.base.resp_started = true;
    st.base.resp_complete = true;
    if (st.held) {
        s.conn.server.hooks.wakeRead(&st.base);
        s.conn.server.hooks.wakeWrite(&st.base);
    }
    observe(s, st, status);
}

/// A health or metrics path (`h1.opsAnswer`), answered by the engine: the head, then the
/// body (copied: it leaves when the peer's window lets it) with END_STREAM.
fn answerOps(s: *Session, st: *H2Stream, a: h1.OpsAnswer) void {
    const srv = s.conn.server;
    st.base.refused = true;
    st.base.status = a.status;
    const block = std.heap.c_allocator.alloc(u8, 256) catch return streamErrorFor(s, st, .internal, "out of memory for an engine-made response");
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
        std.heap.c_allocator.free(block);
        return streamErrorFor(s, st, .internal, "out of memory for an engine-made response");
    };
    if (body_too) {
        const body = std.heap.c_allocator.dupe(u8, a.body) catch return streamErrorFor(s, st, .internal, "out of memory for an engine-made response");
        pushItem(st, .{ .kind = .data, .end_stream = true, .owned = true, .bytes = body, .alloc_len = body.len }) catch {
            std.heap.c_allocator.free(body);
            return streamErrorFor(s, st, .internal, "out of memory for an engine-made response");
        };
    }
    st.base.resp_started = true;
    st.base.resp_complete = true;
    observe(s, st, a.status);
}

fn observe(s: *Session, st: *H2Stream, status: u16) void {
    const m = s.conn.server.metrics orelse return;
    const now = sys.monotonicUs();
    m.observe(st.base.method_class, status, if (st.base.started_us != 0 and now > st.base.started_us) now - st.base.started_us else 0, st.base.resp_body_bytes);
    st.base.started_us = 0;
}

// ---- flow control credit ------------------------------------------------------------

fn creditConnection(s: *Session, n: u64) void {
    s.recv_unacked += @intCast(n);
    if (s.recv_unacked >= connection_window / 4) {
        const inc = s.recv_unacked;
        s.recv_unacked = 0;
        s.recv_window = windowGrow(s.recv_window, inc) catch unreachable; // ours: at most connection_window
        sendWindowUpdate(s, 0, inc);
    }
}

fn creditStream(s: *Session, st: *H2Stream, n: usize) void {
    creditConnection(s, n);
    st.recv_unacked += @intCast(n);
    if (st.remote_closed) return;
    if (st.recv_unacked >= stream_window / 4) {
        const inc = st.recv_unacked;
        st.recv_unacked = 0;
        st.recv_window = windowGrow(st.recv_window, inc) catch unreachable; // ours: at most stream_window
        sendWindowUpdate(s, st.id, inc);
    }
}

fn sendWindowUpdate(s: *Session, id: u32, inc: u32) void {
    // After a GOAWAY for an error only the close follows (RFC 9113 5.4.1).
    if (s.dead) return;
    var buf: [13]u8 = undefined;
    (FrameHeader{ .len = 4, .type = .window_update, .flags = 0, .stream = id }).write(buf[0..9]);
    std.mem.writeInt(u32, buf[9..13], inc, .big);
    queueControl(s.conn, &buf) catch return;
}

fn queueControl(conn: *Conn, bytes: []const u8) outq.Error!void {
    conn.queueCopy(bytes, null, out_bytes_max) catch |err| {
        conn.closeFor("out of memory for HTTP/2 output");
        return err;
    };
}

// ---- output -------------------------------------------------------------------------

fn pushItem(st: *H2Stream, item: Item) error{OutOfMemory}!void {
    // Items already sent are dropped from the front before the list grows.
    if (st.item_head > 0 and st.item_head == st.items.items.len) {
        st.items.clearRetainingCapacity();
        st.item_head = 0;
    }
    try st.items.append(std.heap.c_allocator, item);
    if (item.kind == .data) st.base.out.queued += item.bytes.len;
}

fn releaseItem(s: *Session, item: *Item) void {
    if (item.fd >= 0) {
        sys.close(item.fd);
        item.fd = -1;
    }
    if (item.owned) {
        if (item.alloc_len > 0) std.heap.c_allocator.free(@constCast(item.bytes.ptr)[0..item.alloc_len]);
    } else if (item.owner) |o| {
        s.conn.server.hooks.release(o);
    }
    item.owner = null;
    item.owned = false;
}

fn dropItems(s: *Session, st: *H2Stream) void {
    for (st.items.items[st.item_head..]) |*item| {
        if (item.kind == .data) st.base.out.queued -= item.bytes.len - item.off;
        releaseItem(s, item);
    }
    st.items.clearAndFree(std.heap.c_allocator);
    st.item_head = 0;
    if (st.head_block) |b| std.heap.c_allocator.free(b.ptr[0..st.head_alloc]);
    st.head_block = null;
    st.trailer_block.clearAndFree(std.heap.c_allocator);
}

/// Moves frames from the streams' items into the connection's output, one frame per
/// stream in turn (round robin across calls: a stream that had its turn goes to the
/// back of the list), while the output is shorter than `fill_target` and the windows
/// allow. The target is checked before every frame, not once per round: with many
/// streams a round would queue a frame for each of them (50 streams, 800 KiB), and
/// output past `read_pause_bytes` stops the connection's reading.
pub fn fill(conn: *Conn) void {
    const s = sessionOf(conn);
    // Streams visited since the last one that moved a frame: a whole turn of the list
    // without progress ends the fill (every stream waits on a window or its app).
    var idle: u32 = 0;
    while (conn.outputLen() < fill_target and conn.state == .h2 and idle < s.live) {
        const st = s.first orelse break;
        // Its turn is taken: it goes to the back before it emits (emitting may free it).
        if (st.next != null) {
            unlink(s, st);
            append(s, st);
        }
        if (st.hasOutput() and emitOne(s, st)) idle = 0 else idle += 1;
    }
}

/// One frame (or one whole header block) of the stream's first item. False when the
/// windows stop it.
/// What `emitOne` did with a stream's first item: the windows (or memory) stopped it,
/// part of it went, or all of it did.
const Emitted = enum { blocked, partial, done };

fn emitOne(s: *Session, st: *H2Stream) bool {
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
    const conn = s.conn;
    const ended = item.end_stream;
    releaseItem(s, item);
    st.item_head += 1;
    if (ended) st.local_closed = true;
    if (st.base.write_blocked and !mustWait(&st.base)) {
        st.base.write_blocked = false;
        conn.server.hooks.wakeWrite(&st.base);
    }
    if (st.ws) |w| if (!st.hasOutput() or st.base.out.queued <= wsconn.out_bytes_high) wsconn.outputDrained(w);
    if (!st.hasOutput()) {
        st.items.clearRetainingCapacity();
        st.item_head = 0;
        if (st.local_closed) maybeFree(s, st);
    }
    return true;
}

/// One DATA frame of a file (pathsend), read with pread into the output queue.
fn emitFile(s: *Session, st: *H2Stream, item: *Item) Emitted {
    const conn = s.conn;
    if (item.file_left == 0) {
        var hdr: [9]u8 = undefined;
        (FrameHeader{ .len = 0, .type = .data, .flags = flag_end_stream, .stream = st.id }).write(&hdr);
        conn.queueCopy(&hdr, null, out_bytes_max) catch return blockedByMemory(conn);
        return .done;
    }
    const window = @min(s.send_window, st.send_window);
    if (window <= 0) return .blocked;
    const n: usize = @intCast(@min(item.file_left, @as(u64, @intCast(window)), s.peer_frame_size));
    const space = conn.stageOut(9 + n, out_bytes_max) catch return blockedByMemory(conn);
    const got: usize = switch (sys.pread(item.fd, space[9..][0..n], item.file_pos)) {
        .ok => |g| g,
        .err => 0,
    };
    const out = &conn.a().out;
    if (got == 0) {
        out.dropStaged();
        streamErrorFor(s, st, .internal, "pathsend: the file is shorter than it was when the response started (truncated while sent?): stream reset");
        return .partial;
    }
    const last = item.end_stream and got == item.file_left;
    (FrameHeader{ .len = @intCast(got), .type = .data, .flags = if (last) flag_end_stream else 0, .stream = st.id }).write(space[0..9]);
    out.addStaged(9 + got);
    out.commitStaged(null) catch return blockedByMemory(conn);
    item.file_pos += got;
    item.file_left -= got;
    if (conn.timer.in(&conn.server.stall_timeouts)) conn.timer.disarm();
    s.send_window = windowUse(s.send_window, got);
    st.send_window = windowUse(st.send_window, got);
    st.base.out.sent += got;
    return if (item.file_left > 0) .partial else .done;
}

/// One DATA frame of body bytes, as far as the windows and the peer's frame size allow.
fn emitData(s: *Session, st: *H2Stream, item: *Item) Emitted {
    const conn = s.conn;
    const left = item.bytes.len - item.off;
    var n: usize = left;
    if (left > 0) {
        const window = @min(s.send_window, st.send_window);
        if (window <= 0) return .blocked;
        n = @min(left, @as(usize, @intCast(window)), s.peer_frame_size);
    }
    const last = item.end_stream and item.off + n == item.bytes.len;
    var hdr: [9]u8 = undefined;
    (FrameHeader{ .len = @intCast(n), .type = .data, .flags = if (last) flag_end_stream else 0, .stream = st.id }).write(&hdr);
    conn.queueCopy(&hdr, null, out_bytes_max) catch return blockedByMemory(conn);
    conn.queueCopy(item.bytes[item.off..][0..n], null, out_bytes_max) catch return blockedByMemory(conn);
    item.off += n;
    s.send_window = windowUse(s.send_window, n);
    st.send_window = windowUse(st.send_window, n);
    // Progress through the windows: a stall's deadline starts again.
    if (n > 0 and conn.timer.in(&conn.server.stall_timeouts)) conn.timer.disarm();
    st.base.out.queued -= n;
    st.base.out.sent += n;
    return if (item.off < item.bytes.len) .partial else .done;
}

fn blockedByMemory(conn: *Conn) Emitted {
    outOfMemory(conn);
    return .blocked;
}

fn outOfMemory(conn: *Conn) void {
    conn.closeFor("out of memory for HTTP/2 output");
}

/// A header block as HEADERS and, past the peer's frame size, CONTINUATION frames.
fn writeBlock(s: *Session, id: u32, block: []const u8, end_stream: bool) outq.Error!void {
    const conn = s.conn;
    var rest = block;
    var first = true;
    while (true) {
        const n = @min(rest.len, s.peer_frame_size);
        const last = n == rest.len;
        var flags: u8 = if (last) flag_end_headers else 0;
        if (first and end_stream) flags |= flag_end_stream;
        var hdr: [9]u8 = undefined;
        (FrameHeader{ .len = @intCast(n), .type = if (first) .headers else .continuation, .flags = flags, .stream = id }).write(&hdr);
        conn.queueCopy(&hdr, null, out_bytes_max) catch |e| {
            outOfMemory(conn);
            return e;
        };
        conn.queueCopy(rest[0..n], null, out_bytes_max) catch |e| {
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
fn flushSoon(conn: *Conn) void {
    conn.server.flushSoon(conn);
}

/// The connection's output is written (called by the connection).
pub fn afterFlush(conn: *Conn) void {
    if (conn.state != .h2) return;
    const s = sessionOf(conn);
    if (s.dead) return conn.lingerClose(true);
    // Frames held back while the output was long are read now.
    if (!conn.interest.readable) {
        conn.setReading(true);
        const act = conn.a();
        if (act.rlen > act.rstart) conn.server.schedule(conn);
    }
    if (s.goaway_sent and settled(s)) return conn.lingerClose(true);
    rearm(conn);
}

/// The connection's one timer: idle (no stream), write (output waits on the peer's
/// window), body (an app waits for request body bytes), or none.
fn rearm(conn: *Conn) void {
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
    const want: ?*@import("../os/deadlines.zig").Queue = if (s.held == 0 and !blocked) &srv.idle_timeouts else if (blocked and conn.outputLen() == 0) &srv.stall_timeouts else if (awaiting) &srv.body_timeouts else null;
    if (want) |q| {
        if (!conn.timer.in(q)) q.arm(&conn.timer, srv.now_ms);
    } else conn.timer.disarm();
}

/// The connection's timer passed (see `rearm`): the connection ends.
pub fn timedOut(conn: *Conn) void {
    const s = sessionOf(conn);
    if (s.held == 0) {
        // Idle: a polite GOAWAY, then close.
        sendGoaway(s, .no_error);
        s.dead = true;
        conn.flush();
        if (conn.state == .h2 and conn.outputLen() == 0) conn.lingerClose(true);
        return;
    }
    conn.close();
}

/// Graceful shutdown: GOAWAY now; streams in flight finish, then the connection closes.
pub fn goAway(conn: *Conn) void {
    const s = sessionOf(conn);
    if (s.goaway_sent) return;
    sendGoaway(s, .no_error);
    // Open WebSockets are told the server is going away (1012), as over HTTP/1.1.
    var it = s.first;
    while (it) |st| {
        it = st.next;
        if (st.ws) |w| wsconn.goingAwaySession(w);
    }
    conn.flush();
}

/// The socket closed: every stream is over. Apps still running see a disconnect.
pub fn connClosed(conn: *Conn) void {
    const s = sessionOf(conn);
    var it = s.first;
    while (it) |st| {
        it = st.next;
        dropItems(s, st);
        if (st.held) {
            conn.server.hooks.wakeRead(&st.base);
            st.base.write_blocked = false;
            conn.server.hooks.wakeWrite(&st.base);
        } else {
            freeStream(s, st);
        }
    }
    if (s.held == 0) conn.server.retire(conn);
}

fn maybeFree(s: *Session, st: *H2Stream) void {
    if (st.held or st.hasOutput()) return;
    if (!st.closed()) {
        // Half-closed (local): the response is whole, the request body still comes. It is
        // read and dropped until the client ends the stream (`discarding`); what the app
        // left unread is credited back now.
        const unread = st.body.items.len - st.body_off;
        if (unread > 0) creditStream(s, st, unread);
        st.body.clearAndFree(std.heap.c_allocator);
        st.body_off = 0;
        return;
    }
    freeStream(s, st);
    if (s.goaway_sent and settled(s) and s.conn.state == .h2 and s.conn.outputLen() == 0) s.conn.lingerClose(true);
}

/// No app runs on the connection and nothing waits to be sent: after GOAWAY it may close.
fn settled(s: *const Session) bool {
    if (s.held != 0) return false;
    var it = s.first;
    while (it) |st| : (it = st.next) if (st.hasOutput()) return false;
    return true;
}

fn freeStream(s: *Session, st: *H2Stream) void {
    dropItems(s, st);
    if (st.ws) |w| wsconn.destroy(w);
    st.ws = null;
    st.body.deinit(std.heap.c_allocator);
    unlink(s, st);
    s.live -= 1;
    std.heap.c_allocator.destroy(st);
}

fn unlink(s: *Session, st: *H2Stream) void {
    if (st.prev) |p| p.next = st.next else s.first = st.next;
    if (st.next) |n| n.prev = st.prev else s.last = st.prev;
    st.prev = null;
    st.next = null;
}

fn append(s: *Session, st: *H2Stream) void {
    st.prev = s.last;
    st.next = null;
    if (s.last) |l| l.next = st else s.first = st;
    s.last = st;
}

// ---- the stream's verbs ------------------------------------------------------------

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
        if (h.body.capacity > 64 * 1024) h.body.clearAndFree(std.heap.c_allocator) else h.body.clearRetainingCapacity();
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
    if (need > srv.opts.limits.head_bytes_max + 1024 * 1024) return error.HeadTooLarge;
    const block = std.heap.c_allocator.alloc(u8, need) catch return error.OutOfMemory;
    errdefer std.heap.c_allocator.free(block);
    var n = encodeHeadStart(block, srv, status) catch return error.HeadTooLarge;
    for (extra) |f| n += encodeResponseField(block[n..], f[0], f[1], st) catch |e| return e;
    for (headers) |f| n += encodeResponseField(block[n..], f[0], f[1], st) catch |e| return e;
    // The unused tail of the allocation stays with it (freed as one).
    h.head_block = block[0..n];
    h.head_alloc = block.len;
    st.resp_started = true;
}

/// What every response head begins with: `:status`, then `server` and `date` as configured.
fn encodeHeadStart(block: []u8, srv: *Server, status: u16) error{NoSpace}!usize {
    var n = try hpack.encodeStatus(block, status);
    if (srv.opts.server_header) n += try hpack.encodeField(block[n..], "server", "zigcorn");
    if (srv.opts.date_header) {
        const line = srv.date.get();
        n += try hpack.encodeField(block[n..], "date", line["date: ".len .. line.len - 2]);
    }
    return n;
}

/// One response field, lower-cased; HTTP/1.1's connection-specific fields are dropped.
fn encodeResponseField(buf: []u8, name: []const u8, value: []const u8, st: *Stream) stream_mod.StartError!usize {
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
fn pushHead(st: *Stream, end_stream: bool) error{OutOfMemory}!void {
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
    if (need > 1024 * 1024) return error.HeadTooLarge;
    const block = std.heap.c_allocator.alloc(u8, need) catch return error.OutOfMemory;
    var n = hpack.encodeStatus(block, 103) catch unreachable;
    for (links) |l| n += hpack.encodeField(block[n..], "link", l) catch unreachable;
    pushItem(h, .{ .kind = .headers, .end_stream = false, .owned = true, .bytes = block[0..n], .alloc_len = block.len }) catch {
        std.heap.c_allocator.free(block);
        return error.OutOfMemory;
    };
    flushSoon(st.conn);
}

/// The response is whole: an app waiting in `receive()` after its body now sees the
/// disconnect (as over HTTP/1.1, once the response is sent).
fn responseCompleted(st: *Stream) void {
    if (st.handle != null) st.conn.server.hooks.wakeRead(st);
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
        if (body.len <= 4096 or owner == null) {
            // Small bodies are copied: no Python object waits on the connection.
            const copy = std.heap.c_allocator.dupe(u8, body) catch return error.OutOfMemory;
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
        if (!h1.trailerAllowed(f[0])) return error.Forbidden;
    }
    if (!more) st.resp_complete = true;
    if (st.gone()) return false;
    for (fields) |f| {
        if (f[0].len > encode_scratch.len) return error.InvalidHeader;
        scratch.claim();
        const lower = std.ascii.lowerString(encode_scratch[0..f[0].len], f[0]);
        const at = h.trailer_block.items.len;
        h.trailer_block.ensureUnusedCapacity(std.heap.c_allocator, f[0].len + f[1].len + 12) catch return error.OutOfMemory;
        h.trailer_block.items.len = at + (hpack.encodeField(h.trailer_block.unusedCapacitySlice(), lower, f[1]) catch return error.OutOfMemory);
        if (h.trailer_block.items.len > 1024 * 1024) return error.InvalidHeader;
    }
    if (more) return false;
    if (h.head_block != null) pushHead(st, false) catch return error.OutOfMemory;
    if (h.trailer_block.items.len == 0) {
        // No fields after all: an empty DATA frame ends the stream.
        pushItem(h, .{ .kind = .data, .end_stream = true, .owned = false, .bytes = &.{} }) catch return error.OutOfMemory;
    } else {
        const block = h.trailer_block.toOwnedSlice(std.heap.c_allocator) catch return error.OutOfMemory;
        h.trailer_block = .{};
        pushItem(h, .{ .kind = .headers, .end_stream = true, .owned = true, .bytes = block, .alloc_len = block.len }) catch {
            std.heap.c_allocator.free(block);
            return error.OutOfMemory;
        };
    }
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
    std.debug.assert(h.held);
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
    if (h.ws) |w| if (w.open) {
        // An accepted WebSocket: closed normally if the app did not; the stream ends
        // once the peer's close (and END_STREAM) arrives.
        wsconn.sessionFinished(w);
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
}

/// The app returned without a response: 500, as over HTTP/1.1.
fn refuseAfterApp(s: *Session, st: *H2Stream) void {
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

// ---- WebSocket over HTTP/2 (RFC 8441): what `wsconn` asks of a stream -------------------

pub fn wsSessionOf(st: *const Stream) ?*wsconn.Session {
    const h: *const H2Stream = @fieldParentPtr("base", st);
    return h.ws;
}

/// Frames can still move on the stream.
pub fn wsLive(h: *const H2Stream) bool {
    return !h.base.reset and h.base.conn.state == .h2;
}

pub fn wsInput(h: *H2Stream) []u8 {
    return h.body.items[h.body_off..];
}

pub fn wsInputEmpty(h: *const H2Stream) bool {
    return h.body_off == h.body.items.len;
}

/// `n` received bytes were parsed: they leave the buffer and the window opens by as much.
pub fn wsConsume(h: *H2Stream, n: usize) void {
    if (n == 0) return;
    h.body_off += n;
    if (h.body_off == h.body.items.len) {
        h.body_off = 0;
        h.body.clearRetainingCapacity();
    }
    creditStream(h.session, h, n);
}

/// One WebSocket frame (header and payload, copied) as DATA on the stream.
pub fn wsQueue(h: *H2Stream, head: []const u8, body: []const u8) error{OutOfMemory}!void {
    const bytes = try std.heap.c_allocator.alloc(u8, head.len + body.len);
    @memcpy(bytes[0..head.len], head);
    @memcpy(bytes[head.len..], body);
    pushItem(h, .{ .kind = .data, .end_stream = false, .owned = true, .bytes = bytes, .alloc_len = bytes.len }) catch {
        std.heap.c_allocator.free(bytes);
        return error.OutOfMemory;
    };
}

/// Our side of the WebSocket stream ends (after our close frame).
pub fn wsEnd(h: *H2Stream) error{OutOfMemory}!void {
    if (h.end_queued) return;
    try pushItem(h, .{ .kind = .data, .end_stream = true, .owned = false, .bytes = &.{} });
    h.end_queued = true;
}

/// The WebSocket failed beyond a close frame: the stream is reset.
pub fn wsAbort(h: *H2Stream) void {
    if (h.base.reset or h.base.conn.state != .h2) return;
    streamError(h.session, h, .cancel);
}

/// The app accepted the WebSocket: a 200 HEADERS (no END_STREAM) with the subprotocol,
/// the extension and the app's headers. Frames follow as DATA.
pub fn wsAccept(h: *H2Stream, subprotocol: ?[]const u8, extension: ?[]const u8, headers: []const [2][]const u8, extra: []const [2][]const u8) wsconn.AcceptError!void {
    const st = &h.base;
    if (st.resp_started) return error.NotPending;
    const srv = st.conn.server;
    var need: usize = 128;
    for (headers) |f| need += f[0].len + f[1].len + 12;
    for (extra) |f| need += f[0].len + f[1].len + 12;
    if (subprotocol) |p| need += p.len + 32;
    if (extension) |e| need += e.len + 32;
    const block = std.heap.c_allocator.alloc(u8, need) catch return error.OutOfMemory;
    errdefer std.heap.c_allocator.free(block);
    var n = hpack.encodeStatus(block, 200) catch return error.HeadTooLarge;
    if (srv.opts.server_header) n += hpack.encodeField(block[n..], "server", "zigcorn") catch return error.HeadTooLarge;
    if (srv.opts.date_header) {
        const line = srv.date.get();
        n += hpack.encodeField(block[n..], "date", line["date: ".len .. line.len - 2]) catch return error.HeadTooLarge;
    }
    if (subprotocol) |p| {
        if (p.len == 0 or !response.validValue(p)) return error.InvalidHeader;
        n += hpack.encodeField(block[n..], "sec-websocket-protocol", p) catch return error.HeadTooLarge;
    }
    if (extension) |e| n += hpack.encodeField(block[n..], "sec-websocket-extensions", e) catch return error.HeadTooLarge;
    for (extra) |f| n += encodeResponseField(block[n..], f[0], f[1], st) catch |e| return mapStart(e);
    outer: for (headers) |f| {
        for (wsconn.owned_fields) |o| if (std.ascii.eqlIgnoreCase(f[0], o)) continue :outer;
        if (subprotocol != null and std.ascii.eqlIgnoreCase(f[0], "sec-websocket-protocol")) continue;
        n += encodeResponseField(block[n..], f[0], f[1], st) catch |e| return mapStart(e);
    }
    pushItem(h, .{ .kind = .headers, .end_stream = false, .owned = true, .bytes = block[0..n], .alloc_len = block.len }) catch return error.OutOfMemory;
    st.status = 200;
    st.resp_started = true;
    st.resp_head_sent = true;
    flushSoon(st.conn);
}

fn mapStart(e: stream_mod.StartError) wsconn.AcceptError {
    return switch (e) {
        error.InvalidHeader, error.AlreadyStarted => error.InvalidHeader,
        error.HeadTooLarge => error.HeadTooLarge,
        error.OutOfMemory => error.OutOfMemory,
    };
}

// ---- tests ------------------------------------------------------------------------------

test "the preface is recognised whole, in part, or not at all" {
    try std.testing.expectEqual(.yes, prefaceState(preface ++ "\x00\x00\x00\x04"));
    try std.testing.expectEqual(.partial, prefaceState("PRI * HTTP/2"));
    try std.testing.expectEqual(.partial, prefaceState(""));
    try std.testing.expectEqual(.no, prefaceState("GET / HTTP/1.1\r\n"));
    try std.testing.expectEqual(.no, prefaceState("PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"));
}
