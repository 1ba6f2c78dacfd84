//! A real `Server` for tests and fuzzers, without Python: it serves one end of a
//! socketpair, the caller plays the client on the other end and the app through the
//! stream verbs. The hooks record what the engine handed out in `rec`.
//!
//! Used by testing/connection_tests.zig (connection and stream state machines) and testing/fuzz_http2.zig (the
//! HTTP/2 session fuzzer). Holds no tests itself.
const std = @import("std");
const linux = std.os.linux;
const server_mod = @import("../core/server.zig");
const wiring = @import("../server/wiring.zig"); // each protocol's verbs, handed to the server as the engine does
const Server = server_mod.Server;
const conn_mod = @import("../core/connection.zig");
const stream_mod = @import("../core/stream.zig");
const Stream = stream_mod.Stream;
const sys = @import("../os/sys.zig");

/// What the hooks saw. One at a time: the tests run serially.
pub const Recorder = struct {
    /// Requests taken at most; past it every request is refused (500).
    pub const capacity = 64;

    requests: [capacity]*Stream = undefined,
    paths: [capacity][64]u8 = undefined,
    path_lens: [capacity]usize = .{0} ** capacity,
    methods: [capacity][16]u8 = undefined,
    /// Per request: a wake-up for reading / writing came since the flag was last cleared.
    read_woken: [capacity]bool = .{false} ** capacity,
    write_woken: [capacity]bool = .{false} ** capacity,
    count: usize = 0,
    wake_reads: usize = 0,
    wake_writes: usize = 0,
    retained: usize = 0,
    released: usize = 0,
    errors: usize = 0,
    /// Refuse every request (as a failing dispatcher would).
    refuse: bool = false,
    /// Told of every retain and release (after it is counted): a fuzzer keeps count per
    /// owner and poisons a body once nothing holds it.
    on_retain: ?*const fn (owner: *anyopaque) void = null,
    on_release: ?*const fn (owner: *anyopaque) void = null,

    pub fn path(self: *const Recorder, i: usize) []const u8 {
        return self.paths[i][0..self.path_lens[i]];
    }

    /// The index of the request `st` is, newest first: a freed stream's memory may be
    /// reused by a later one, and wake-ups only go to streams an app still holds.
    pub fn indexOf(self: *const Recorder, st: *const Stream) ?usize {
        var i = self.count;
        while (i > 0) {
            i -= 1;
            if (self.requests[i] == st) return i;
        }
        return null;
    }
};

pub var rec: Recorder = .{};
/// Stands in for the Python object the hooks would hand out.
pub var handle_token: u8 = 0;

fn onRequest(_: *anyopaque, st: *Stream, req: *const stream_mod.Request) bool {
    if (rec.refuse or rec.count == rec.requests.len) return false;
    const i = rec.count;
    rec.requests[i] = st;
    const n = @min(req.path.len, 64);
    @memcpy(rec.paths[i][0..n], req.path[0..n]);
    rec.path_lens[i] = n;
    const m = @min(req.method.len, 16);
    @memcpy(rec.methods[i][0..m], req.method[0..m]);
    rec.read_woken[i] = false;
    rec.write_woken[i] = false;
    rec.count += 1;
    st.handle = &handle_token;
    return true;
}
fn wakeRead(st: *Stream) void {
    rec.wake_reads += 1;
    if (rec.indexOf(st)) |i| rec.read_woken[i] = true;
}
fn wakeWrite(st: *Stream) void {
    rec.wake_writes += 1;
    if (rec.indexOf(st)) |i| rec.write_woken[i] = true;
}
fn retain(owner: *anyopaque) void {
    rec.retained += 1;
    if (rec.on_retain) |f| f(owner);
}
fn release(owner: *anyopaque) void {
    rec.released += 1;
    if (rec.on_release) |f| f(owner);
}
fn onSettle(_: *anyopaque) void {}
fn passSoon(_: *anyopaque) server_mod.PassSoon {
    return .refused;
}
fn log(_: *anyopaque, _: server_mod.LogLevel, _: []const u8) void {
    rec.errors += 1;
}

var hooks_ctx: u8 = 0;

pub fn hooks() server_mod.Hooks {
    return .{
        .ctx = &hooks_ctx,
        .on_request = onRequest,
        .wake_read = wakeRead,
        .wake_write = wakeWrite,
        .retain_fn = retain,
        .release_fn = release,
        .on_settle = onSettle,
        .pass_soon = passSoon,
        .log = log,
    };
}

pub fn testOptions() server_mod.Options {
    return .{
        .timeout_keep_alive_ms = 5_000,
        .timeout_header_ms = 30_000,
        .timeout_body_ms = 30_000,
        .timeout_write_ms = 30_000,
        .server_header = false,
        .date_header = false,
        .connections_max = 100,
        .keep_alive_requests_max = 100,
        .body_bytes_max = 1 << 20,
        .limits = .{ .head_bytes_max = 16 * 1024, .target_bytes_max = 8190, .headers_count_max = 100 },
        .http2 = true,
        // The tests exercise the h2c upgrade (off by default: `--h2c-upgrade`).
        .h2c_upgrade = true,
        .h2_max_streams = 100,
        .metrics_path = "",
        .health_path = "",
        .ready_path = "",
        .metrics = null,
        .ws_enabled = false,
        .ws_deflate = false,
        .ws_message_bytes_max = 1 << 20,
        .ws_queue_max = 32,
        .ws_ping_interval_ms = 0,
        .ws_ping_timeout_ms = 20_000,
        .writer = .off,
        .spin_ns = 0,
        // The same tests on either backend (tests/test_zig_unit.py runs both).
        .io = .{
            .kind = if (std.posix.getenv("ZIGCORN_IO_BACKEND")) |b| (if (std.mem.eql(u8, b, "io_uring")) .io_uring else .epoll) else .epoll,
            .uring = .{ .buffers = 256, .buffer_bytes = 4096 },
        },
    };
}

/// A server with one connection; `client` is the other end of its socket.
pub const Fixture = struct {
    server: *Server,
    client: i32,
    conn: *conn_mod.Conn,

    pub fn init() !Fixture {
        return initWith(testOptions());
    }

    /// A fixture whose server runs with `opts` (`testOptions()` with some changed).
    pub fn initWith(opts: server_mod.Options) !Fixture {
        rec = .{};
        const server = try Server.init(std.heap.c_allocator, hooks(), opts, &wiring.verbs);
        errdefer server.deinit();
        var fds: [2]i32 = undefined;
        const rc = linux.socketpair(linux.AF.UNIX, linux.SOCK.STREAM | linux.SOCK.NONBLOCK | linux.SOCK.CLOEXEC, 0, &fds);
        if (sys.E.init(rc) != .SUCCESS) return error.SocketPair;
        const c = server.addConnection(fds[0], .{}) orelse {
            sys.close(fds[1]);
            return error.AddFailed;
        };
        return .{ .server = server, .client = fds[1], .conn = c };
    }

    pub fn deinit(self: *Fixture) void {
        if (self.client >= 0) sys.close(self.client);
        self.server.deinit();
    }

    pub fn send(self: *Fixture, bytes: []const u8) !void {
        switch (sys.writev(self.client, &.{.{ .base = bytes.ptr, .len = bytes.len }})) {
            .ok => |n| if (n != bytes.len) return error.ShortWrite,
            .err => return error.WriteFailed,
        }
        self.server.poll();
    }

    /// Everything the server has written so far (the client end is non-blocking).
    pub fn receive(self: *Fixture, buf: []u8) ![]const u8 {
        self.server.poll();
        // The end of the loop's pass: output deferred to it (HTTP/2) is written.
        _ = self.server.settleBegin();
        var len: usize = 0;
        while (len < buf.len) {
            switch (sys.read(self.client, buf[len..])) {
                .ok => |n| {
                    if (n == 0) break;
                    len += n;
                },
                .err => |e| {
                    if (e == .AGAIN) break;
                    return error.ReadFailed;
                },
            }
        }
        return buf[0..len];
    }

    /// Whether the server closed its end: the client reads to the end of the stream.
    pub fn peerClosed(self: *Fixture) bool {
        self.server.poll();
        var b: [4096]u8 = undefined;
        while (true) switch (sys.read(self.client, &b)) {
            .ok => |n| if (n == 0) return true,
            .err => return false,
        };
    }
};
