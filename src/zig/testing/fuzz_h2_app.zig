//! The HTTP/2 fuzzer's app (`testing/fuzz_http2.zig` runs the cases): the streams the
//! hooks hand out, answered from memory or a file, streamed, with trailers, finished or
//! aborted through the `Stream` verbs; borrowed bodies poisoned when released.
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;
const h2 = @import("../http2/session.zig");
const hpack = @import("../http2/hpack.zig");
const huffman_code = @import("../http/huffman.zig");
const sys = @import("../os/sys.zig");
const stream_mod = @import("../core/stream.zig");
const Stream = stream_mod.Stream;
const server_mod = @import("../core/server.zig");
const test_server = @import("test_server.zig");
const Recorder = test_server.Recorder;
const rec = &test_server.rec;

const gpa = std.heap.c_allocator;

const fuzz = @import("fuzz_http2.zig");
const client = @import("fuzz_h2_client.zig");
const oracle = @import("fuzz_h2_oracle.zig");
const finish_rounds_max = fuzz.finish_rounds_max;
const copied_body_max = fuzz.copied_body_max;
const poison_byte = fuzz.poison_byte;
const Failure = fuzz.Failure;
const fail = fuzz.fail;
const note = fuzz.note;
const outOfMemory = fuzz.outOfMemory;
const Case = fuzz.Case;
const responseByte = client.responseByte;
const requestByte = client.requestByte;
const fillPattern = client.fillPattern;
const Streams = oracle.Streams;

// ---- the app: the streams the hooks hand out ---------------------------------------------

pub const AppPhase = enum { fresh, body, trailers, complete, done };
pub const AppPlan = enum { small, big, streamed, trailers, file };

pub const AppStream = struct {
    st: *Stream,
    /// Its index in the recorder (its wake-up flags).
    index: usize,
    id: u32,
    phase: AppPhase = .fresh,
    trailers: bool = false,
    /// `writeBody` said wait: the next write waits for `wake_write` (or the stream gone).
    blocked: bool = false,
    /// Response body bytes written, and planned.
    written: u64 = 0,
    total: u64 = 0,
    chunks_left: u32 = 0,
    /// Request body bytes read.
    read: u64 = 0,
};

/// A body the server borrows (`writeBody` with an owner): poisoned once released.
pub const Owned = struct {
    refs: i32 = 0,
    bytes: []u8,
};

pub var owner_misuse: bool = false;

pub fn onRetain(owner: *anyopaque) void {
    const o: *Owned = @ptrCast(@alignCast(owner));
    o.refs += 1;
}

pub fn onRelease(owner: *anyopaque) void {
    const o: *Owned = @ptrCast(@alignCast(owner));
    o.refs -= 1;
    if (o.refs < 0) owner_misuse = true;
    if (o.refs == 0) @memset(o.bytes, poison_byte);
}

pub var file_counter: u64 = 0;

pub const statuses = [_]u16{ 200, 200, 200, 200, 200, 201, 204, 304, 404, 500 };

pub const App = struct {
    random: std.Random,
    streams: [Recorder.capacity]AppStream = undefined,
    count: usize = 0,
    owned: std.ArrayList(*Owned) = .empty,
    scratch: [copied_body_max]u8 = undefined,

    pub fn case(self: *App) *Case {
        return @alignCast(@fieldParentPtr("app", self));
    }

    /// Streams the hooks handed out since the last look.
    pub fn discover(self: *App) void {
        while (self.count < rec.count) : (self.count += 1) {
            const st = rec.requests[self.count];
            const h: *h2.H2Stream = @fieldParentPtr("base", st);
            self.streams[self.count] = .{ .st = st, .index = self.count, .id = h.id };
            self.case().streams.get(h.id).is_head = st.is_head_method;
            note("A: stream {d} handed out", .{h.id});
            fuzz.stats.streams_handed_out += 1;
        }
    }

    pub fn held(self: *const App) u32 {
        var n: u32 = 0;
        for (self.streams[0..self.count]) |a| n += @intFromBool(a.phase != .done);
        return n;
    }

    pub fn pickLive(self: *App) ?*AppStream {
        var live: [Recorder.capacity]*AppStream = undefined;
        var n: usize = 0;
        for (self.streams[0..self.count]) |*a| if (a.phase != .done) {
            live[n] = a;
            n += 1;
        };
        if (n == 0) return null;
        return live[self.random.uintLessThan(usize, n)];
    }

    pub fn act(self: *App) Failure!void {
        self.discover();
        const a = self.pickLive() orelse return;
        if (self.random.uintLessThan(u8, 5) == 0) return self.takeBody(a);
        switch (a.phase) {
            .fresh => try self.actFresh(a),
            .body => try self.writeNext(a),
            .trailers => try self.sendTrailers(a),
            .complete => self.finish(a),
            .done => unreachable,
        }
    }

    pub fn actFresh(self: *App, a: *AppStream) Failure!void {
        const r = self.random;
        switch (r.uintLessThan(u8, 100)) {
            0...7 => try self.takeBody(a),
            8...12 => {
                note("A: {d} early hint", .{a.id});
                a.st.earlyHint(&.{"</a.css>; rel=preload"}) catch |e| return self.verbFailed(a, "earlyHint", e);
            },
            13...16 => a.st.awaitBody(),
            17...19 => self.finish(a), // no response: the engine answers 500 or resets
            20...22 => {
                note("A: {d} abort", .{a.id});
                a.st.abort();
                a.phase = .done;
            },
            else => try self.start(a),
        }
    }

    pub fn start(self: *App, a: *AppStream) Failure!void {
        const r = self.random;
        const plan: AppPlan = @enumFromInt(r.weightedIndex(u8, &.{ 8, 3, 5, 3, 2 }));
        const status = statuses[r.uintLessThan(usize, statuses.len)];
        a.total = switch (plan) {
            .small => r.uintAtMost(u64, 200),
            .big => r.intRangeAtMost(u64, 20_000, 400_000),
            .streamed, .trailers, .file => r.uintAtMost(u64, 100_000),
        };
        a.chunks_left = if (plan == .streamed or plan == .trailers) r.intRangeAtMost(u32, 1, 6) else 1;
        a.trailers = plan == .trailers;
        var len_text: [20]u8 = undefined;
        var headers: [3][2][]const u8 = undefined;
        var n: usize = 0;
        headers[n] = .{ "content-type", "application/octet-stream" };
        n += 1;
        if (plan != .trailers and r.boolean()) {
            headers[n] = .{ "content-length", std.fmt.bufPrint(&len_text, "{d}", .{a.total}) catch unreachable };
            n += 1;
        }
        if (r.uintLessThan(u8, 30) == 0) {
            // A head past the client's frame size: the server's CONTINUATION frames.
            headers[n] = .{ "x-big", &big_header_value };
            n += 1;
        }
        note("A: {d} start {d} {s} body {d} in {d}", .{ a.id, status, @tagName(plan), a.total, a.chunks_left });
        a.st.startResponse(status, headers[0..n], &.{}, a.trailers) catch |e| return self.verbFailed(a, "startResponse", e);
        if (!a.st.gone()) self.case().streams.get(a.id).app_status = status;
        a.phase = .body;
        if (plan == .small or plan == .big) try self.writeNext(a);
        if (plan == .file) try self.sendFile(a);
    }

    /// `http.response.pathsend`: the body from a file (http2/session.zig reads it into DATA frames
    /// as the windows open), the response pattern written to a temporary file first.
    pub fn sendFile(self: *App, a: *AppStream) Failure!void {
        var path_buf: [64]u8 = undefined;
        file_counter += 1;
        const path = std.fmt.bufPrintZ(&path_buf, "/tmp/zigcorn-fuzz-h2-{d}-{d}", .{ linux.getpid(), file_counter }) catch unreachable;
        const bytes = gpa.alloc(u8, @intCast(a.total)) catch outOfMemory();
        defer gpa.free(bytes);
        fillPattern(bytes, responseByte, a.id, 0);
        std.fs.cwd().writeFile(.{ .sub_path = path, .data = bytes }) catch |e| return fail("harness: cannot write {s} ({s})", .{ path, @errorName(e) });
        // The engine opens the file before sendFile returns: it may go at once.
        defer std.fs.cwd().deleteFile(path) catch {};
        note("A: {d} sendFile {d} bytes", .{ a.id, a.total });
        a.st.sendFile(path) catch |e| return self.verbFailed(a, "sendFile", e);
        fuzz.stats.files_sent += 1;
        a.written = a.total;
        a.phase = .complete;
        self.completed(a);
    }

    /// The next body message: the rest when it is the last, else some of it.
    pub fn writeNext(self: *App, a: *AppStream) Failure!void {
        const r = self.random;
        if (a.blocked) {
            if (!rec.write_woken[a.index] and !a.st.gone()) return;
            a.blocked = false;
        }
        const last = a.chunks_left <= 1;
        const left = a.total - a.written;
        const size = if (last) left else r.uintAtMost(u64, left);
        const body, const owner = self.bodyFor(a, @intCast(size));
        rec.write_woken[a.index] = false;
        note("A: {d} write {d} more={}", .{ a.id, size, !last });
        const wait = a.st.writeBody(body, !last, owner) catch |e| return self.verbFailed(a, "writeBody", e);
        a.written += size;
        a.chunks_left -|= 1;
        a.blocked = wait;
        if (!last) return;
        a.phase = if (a.trailers) .trailers else .complete;
        if (a.phase == .complete) self.completed(a);
    }

    /// `size` bytes of the response pattern at the stream's offset: copied by the server
    /// when small (or, now and then, given without an owner), else borrowed from an owner.
    pub fn bodyFor(self: *App, a: *const AppStream, size: usize) struct { []const u8, ?*anyopaque } {
        if (size <= self.scratch.len) {
            fillPattern(self.scratch[0..size], responseByte, a.id, a.written);
            return .{ self.scratch[0..size], null };
        }
        const bytes = gpa.alloc(u8, size) catch outOfMemory();
        fillPattern(bytes, responseByte, a.id, a.written);
        const o = gpa.create(Owned) catch outOfMemory();
        o.* = .{ .bytes = bytes };
        self.owned.append(gpa, o) catch outOfMemory();
        return .{ bytes, if (self.random.uintLessThan(u8, 10) < 7) @ptrCast(o) else null };
    }

    pub fn sendTrailers(self: *App, a: *AppStream) Failure!void {
        const more = self.random.uintLessThan(u8, 4) == 0;
        note("A: {d} trailers more={}", .{ a.id, more });
        const fields = [_][2][]const u8{.{ "x-checksum", "0123" }};
        const n: usize = if (self.random.uintLessThan(u8, 5) == 0) 0 else 1;
        _ = a.st.writeTrailers(fields[0..n], more) catch |e| return self.verbFailed(a, "writeTrailers", e);
        if (more) return;
        a.phase = .complete;
        self.completed(a);
    }

    /// A verb the app used as the protocol allows failed. Only a stream the engine already
    /// answered itself (413 for a body past the limit, while the app runs) may refuse the
    /// app's output so; the app is then done with it.
    pub fn verbFailed(self: *App, a: *AppStream, verb: []const u8, err: anyerror) Failure!void {
        _ = self;
        note("A: {d} {s}: {s} (gone: {})", .{ a.id, verb, @errorName(err), a.st.gone() });
        if (!a.st.gone()) return fail("stream {d}: {s}: {s}", .{ a.id, verb, @errorName(err) });
        a.blocked = false;
        a.phase = .complete;
    }

    /// The response is whole: unless the stream is gone, the client must get all of it.
    pub fn completed(self: *App, a: *const AppStream) void {
        if (a.st.gone()) return;
        self.case().streams.get(a.id).app_body = a.written;
    }

    /// Request body bytes: they must be the client's, in order (unless mutated).
    pub fn takeBody(self: *App, a: *AppStream) Failure!void {
        var segs: [4][]const u8 = undefined;
        const got = a.st.takeBody(&segs);
        if (got.failed) return;
        const c = self.case();
        for (segs[0..got.count]) |seg| {
            if (!c.mutated) for (seg, 0..) |b, i| {
                const want = requestByte(a.id, a.read + i);
                if (b != want) return fail("stream {d}: request body byte at {d} is 0x{x}, the client sent 0x{x}", .{ a.id, a.read + i, b, want });
            };
            a.read += seg.len;
        }
        note("A: {d} took {d} body bytes (done={})", .{ a.id, a.read, got.done });
        a.st.bodyConsumed();
    }

    pub fn finish(self: *App, a: *AppStream) void {
        _ = self;
        note("A: {d} finish", .{a.id});
        a.st.finish();
        a.phase = .done;
    }

    /// Drives every stream to its end: answers the fresh ones, writes what is left
    /// (waiting for wake-ups), finishes. `strict`: the windows are open and the client
    /// reads, so a writer that never gets its wake-up is a failure.
    pub fn finishAll(self: *App, strict: bool) Failure!void {
        const c = self.case();
        var rounds: usize = 0;
        self.discover();
        while (self.held() > 0) : (rounds += 1) {
            if (rounds == finish_rounds_max) {
                if (strict) return fail("stream(s) still held after {d} rounds: a writer never woken though the windows are open", .{rounds});
                for (self.streams[0..self.count]) |*a| if (a.phase != .done) {
                    a.st.abort();
                    a.phase = .done;
                };
                break;
            }
            for (self.streams[0..self.count]) |*a| try self.progress(a);
            try c.pump(true);
            self.discover();
        }
    }

    pub fn progress(self: *App, a: *AppStream) Failure!void {
        switch (a.phase) {
            .fresh => {
                if (self.random.uintLessThan(u8, 10) == 0) return self.finish(a);
                try self.start(a);
            },
            .body => while (a.phase == .body and (!a.blocked or rec.write_woken[a.index] or a.st.gone())) try self.writeNext(a),
            .trailers => try self.sendTrailers(a),
            .complete => self.finish(a),
            .done => {},
        }
    }

    pub fn deinit(self: *App) void {
        for (self.owned.items) |o| {
            gpa.free(o.bytes);
            gpa.destroy(o);
        }
        self.owned.deinit(gpa);
    }
};

pub const big_header_value: [20_000]u8 = @splat('v');
