//! What the engine needs from the side that runs apps (`Hooks`: the Python bridge in
//! `python/`, a recording stub in `testing/`), and the levels of the lines it logs.
const static_files = @import("static_files.zig"); // --static answers before the app
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
        // --static: the engine answers what falls under a mount, the app the rest.
        if (static_files.answer(st, req)) return true;
        // --request-decompression: a coding the engine cannot undo never reaches the app.
        if (st.body_coding == .unsupported) {
            if (!st.refuseCoding()) return true;
            if (st.conn.server.opts.access_log) static_files.logAccess(st, req, 0);
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
