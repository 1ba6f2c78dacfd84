//! Where an HTTP/2 session's output goes and how it tells streams' apps to go on: the
//! connection in the server (`connSink`), a recorder in the unit tests
//! (`session_tests.zig`), which read the frames the session queued as bytes and count
//! the wakes it raised, with no socket written.
const std = @import("std");
const outq = @import("../transport/output_queue.zig");
const Conn = @import("../core/connection.zig").Conn;
const Stream = @import("../core/stream.zig").Stream;

/// The output queue's buffer never grows past this (a header block plus `fill_target`).
pub const out_bytes_max: usize = 2 * 1024 * 1024;

pub const Sink = struct {
    ctx: *anyopaque,
    vtable: *const VTable,

    pub const VTable = struct {
        /// Copies `bytes` after the output queued so far.
        queue: *const fn (ctx: *anyopaque, bytes: []const u8) outq.Error!void,
        /// Room for at least `n` bytes written in place (a file's DATA frame, read by pread).
        stage: *const fn (ctx: *anyopaque, n: usize) outq.Error![]u8,
        /// The first `n` staged bytes join the output.
        commitStaged: *const fn (ctx: *anyopaque, n: usize) outq.Error!void,
        dropStaged: *const fn (ctx: *anyopaque) void,
        /// Bytes queued and not yet written.
        outputLen: *const fn (ctx: *anyopaque) usize,
        /// The stream's app may read (body bytes, the end, a reset) / write again.
        wakeRead: *const fn (ctx: *anyopaque, st: *Stream) void,
        wakeWrite: *const fn (ctx: *anyopaque, st: *Stream) void,
    };

    pub fn queue(self: Sink, bytes: []const u8) outq.Error!void {
        return self.vtable.queue(self.ctx, bytes);
    }
    pub fn stage(self: Sink, n: usize) outq.Error![]u8 {
        return self.vtable.stage(self.ctx, n);
    }
    pub fn commitStaged(self: Sink, n: usize) outq.Error!void {
        return self.vtable.commitStaged(self.ctx, n);
    }
    pub fn dropStaged(self: Sink) void {
        self.vtable.dropStaged(self.ctx);
    }
    pub fn outputLen(self: Sink) usize {
        return self.vtable.outputLen(self.ctx);
    }
    pub fn wakeRead(self: Sink, st: *Stream) void {
        self.vtable.wakeRead(self.ctx, st);
    }
    pub fn wakeWrite(self: Sink, st: *Stream) void {
        self.vtable.wakeWrite(self.ctx, st);
    }
};

/// The server's sink: the connection's output queue and the server's hooks.
pub fn connSink(conn: *Conn) Sink {
    return .{ .ctx = conn, .vtable = &conn_vtable };
}

const conn_vtable = Sink.VTable{
    .queue = connQueue,
    .stage = connStage,
    .commitStaged = connCommit,
    .dropStaged = connDrop,
    .outputLen = connOutputLen,
    .wakeRead = connWakeRead,
    .wakeWrite = connWakeWrite,
};

fn connOf(ctx: *anyopaque) *Conn {
    return @ptrCast(@alignCast(ctx));
}
fn connQueue(ctx: *anyopaque, bytes: []const u8) outq.Error!void {
    return connOf(ctx).queueCopy(bytes, null, out_bytes_max);
}
fn connStage(ctx: *anyopaque, n: usize) outq.Error![]u8 {
    return connOf(ctx).stageOut(n, out_bytes_max);
}
fn connCommit(ctx: *anyopaque, n: usize) outq.Error!void {
    const out = &connOf(ctx).a().out;
    out.addStaged(n);
    return out.commitStaged(null);
}
fn connDrop(ctx: *anyopaque) void {
    connOf(ctx).a().out.dropStaged();
}
fn connOutputLen(ctx: *anyopaque) usize {
    return connOf(ctx).outputLen();
}
fn connWakeRead(ctx: *anyopaque, st: *Stream) void {
    connOf(ctx).server.hooks.wakeRead(st);
}
fn connWakeWrite(ctx: *anyopaque, st: *Stream) void {
    connOf(ctx).server.hooks.wakeWrite(st);
}
