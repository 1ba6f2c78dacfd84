//! What the engine needs from the side that runs apps (`Hooks`: the Python bridge in
//! `python/`, a recording stub in `testing/`), and the levels of the lines it logs.
const std = @import("std");
const tracing = @import("../features/tracing.zig"); // an access line's request ids
const stream_mod = @import("stream.zig");
const Stream = stream_mod.Stream;

/// `access`: one line on `zigcorn.access` (INFO) for a request the engine answered itself.
pub const LogLevel = enum { warning, err, access };

/// What `Hooks.passSoon` did: asked the loop for a pass (`asked`); nothing, because the
/// loop asks `Server.needsPass` before every wait of its own (`loop_checks`: zigcorn's);
/// or nothing, because there is no loop to ask or it refused (`refused`: the engine's
/// wake-up descriptor must bring it).
pub const PassSoon = enum { asked, loop_checks, refused };

/// What the engine needs from the side that runs apps. The engine speaks of streams
/// (one request and its response), never of Python objects.
pub const Hooks = struct {
    ctx: *anyopaque,
    /// A request head arrived on a new stream; the hook must set `stream.handle`. False
    /// refuses it (500). `req` is valid only during the call.
    on_request: *const fn (ctx: *anyopaque, stream: *Stream, req: *const stream_mod.Request) bool,
    /// Body bytes, a disconnect, or the end of the response: a waiting receive() may go on.
    wake_read: *const fn (stream: *Stream) void,
    /// The stream's queued output drained, or the connection closed: a waiting send() may go on.
    wake_write: *const fn (stream: *Stream) void,
    retain_fn: *const fn (owner: *anyopaque) void,
    release_fn: *const fn (owner: *anyopaque) void,
    /// Work for the end of the app side's current pass (a busy poll, waking the writer
    /// thread): schedule `settle` to run after the callbacks already ready.
    on_settle: *const fn (ctx: *anyopaque) void,
    /// Another pass (`poll`) after the ready callbacks, asked of the app's loop (call_soon).
    pass_soon: *const fn (ctx: *anyopaque) PassSoon,
    /// One line on the `zigcorn.error` logger, at `level`: the engine dropped a connection
    /// for a reason the peer did not cause (it ran out of memory or buffers), or paused
    /// accepting (out of descriptors).
    log: *const fn (ctx: *anyopaque, level: LogLevel, message: []const u8) void,

    pub fn onRequest(self: Hooks, st: *Stream, req: *const stream_mod.Request) bool {
        // --static: the engine answers what falls under a mount (the server's wiring hands
        // the answer over: `server/static_files.zig`), the app the rest.
        if (st.conn.server.wiring.answerFirst(st, req)) return true;
        // --request-decompression: a coding the engine cannot undo never reaches the app.
        if (st.body_coding == .unsupported) {
            if (!st.refuseCoding()) return true;
            if (st.conn.server.opts.access_log) logAccess(st, req, 0);
            st.finish();
            return true;
        }
        if (self.on_request(self.ctx, st, req)) return true;
        st.dropDecoder();
        return false;
    }
    pub fn wakeRead(self: Hooks, st: *Stream) void {
        self.wake_read(st);
    }
    pub fn wakeWrite(self: Hooks, st: *Stream) void {
        self.wake_write(st);
    }
    pub fn retain(self: Hooks, o: *anyopaque) void {
        self.retain_fn(o);
    }
    pub fn release(self: Hooks, o: *anyopaque) void {
        self.release_fn(o);
    }
    pub fn onSettle(self: Hooks) void {
        self.on_settle(self.ctx);
    }
    pub fn passSoon(self: Hooks) PassSoon {
        return self.pass_soon(self.ctx);
    }
    pub fn logError(self: Hooks, message: []const u8) void {
        self.log(self.ctx, .err, message);
    }
    pub fn logWarning(self: Hooks, message: []const u8) void {
        self.log(self.ctx, .warning, message);
    }
};

/// The access log line the app's requests get (`zigcorn/protocols/http.py`), for an engine answer
/// (also the 415 of `--request-decompression`).
pub fn logAccess(st: *Stream, req: *const stream_mod.Request, elapsed_us: u64) void {
    var addr_buf: [64]u8 = undefined;
    const peer = st.peer();
    const addr = peer.format(&addr_buf);
    var line: [1024]u8 = undefined;
    const version = switch (req.version) {
        .http10 => "1.0",
        .http11 => "1.1",
        .http2 => "2",
        .http3 => "3",
    };
    const path = req.path[0..@min(req.path.len, 600)];
    const query = req.query[0..@min(req.query.len, 200)];
    var ids_buf: [160]u8 = undefined;
    const ids = tracing.logSuffix(st.conn.server.opts.tracing, &req.added, req.headers, &ids_buf);
    const text = std.fmt.bufPrint(&line, "{s}:{d} - \"{s} {s}{s}{s} HTTP/{s}\" {d} {d} {d}.{d}ms{s}", .{
        if (addr.len > 0) addr else "-",         peer.port,
        req.method[0..@min(req.method.len, 32)], path,
        if (query.len > 0) "?" else "",          query,
        version,                                 st.status,
        st.resp_body_bytes,                      elapsed_us / 1000,
        (elapsed_us % 1000) / 100,               ids,
    }) catch return;
    st.conn.server.hooks.log(st.conn.server.hooks.ctx, .access, text);
}
