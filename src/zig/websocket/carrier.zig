//! What carries a WebSocket session's frames, and all the session asks of it: the bytes
//! received and not parsed yet, their consumption, frames queued out, the output's
//! length, waking the app, ending our side, failing the carrier, and whether frames can
//! still move at all.
//!
//! Two carriers implement it. After an HTTP/1.1 upgrade (RFC 6455) the connection
//! itself carries the frames: its read buffer and output queue, which this file reads
//! directly (`core/connection.zig` is below the protocols). Over a stream of a
//! multiplexed protocol (HTTP/2 extended CONNECT, RFC 8441; HTTP/3's, RFC 9220) the
//! stream's DATA carries them: the stream verbs of `core/protocol.zig` pick the
//! protocol from `Stream.protocol`, so this folder imports no other protocol's. The
//! choice is a tagged union, not a table of function pointers: each call is one switch.
const std = @import("std");
const Conn = @import("../core/connection.zig").Conn;
const Stream = @import("../core/stream.zig").Stream;
const seam = @import("../core/protocol.zig"); // a stream carrier's verbs: the seam picks its protocol (docs/ARCHITECTURE.md)

pub const Carrier = union(enum) {
    /// HTTP/1.1 upgrade: the connection's read buffer and output queue.
    conn: *Conn,
    /// Extended CONNECT (HTTP/2, RFC 8441; HTTP/3, RFC 9220): one stream's DATA both ways.
    stream: *Stream,

    /// The connection underneath, whichever carrier (the server, its options, flushing).
    pub fn connection(c: Carrier) *Conn {
        return switch (c) {
            .conn => |x| x,
            .stream => |st| st.conn,
        };
    }

    /// Frames can still move both ways.
    pub fn live(c: Carrier) bool {
        return switch (c) {
            .conn => |x| x.state == .websocket,
            .stream => |st| seam.carrierLive(st),
        };
    }

    /// The carrier ended for the app: the connection closed, or the stream ended with
    /// nothing left to parse.
    pub fn ended(c: Carrier) bool {
        return switch (c) {
            .conn => |x| x.state == .closed or x.state == .lingering,
            .stream => |st| seam.carrierEnded(st),
        };
    }

    /// The received bytes not parsed yet (unmasked in place).
    pub fn input(c: Carrier) []u8 {
        return switch (c) {
            .conn => |x| blk: {
                const act = x.a();
                const buf = act.rbuf orelse break :blk &.{};
                break :blk buf[act.rstart..act.rlen];
            },
            .stream => |st| seam.carrierInput(st),
        };
    }

    /// `n` bytes of `input` were parsed.
    pub fn consume(c: Carrier, n: usize) void {
        switch (c) {
            .conn => |x| x.a().rstart += @intCast(n),
            .stream => |st| seam.carrierConsume(st, n),
        }
    }

    /// Bytes queued for the client and not written yet.
    pub fn outLen(c: Carrier) usize {
        return switch (c) {
            .conn => |x| x.outputLen(),
            .stream => |st| seam.carrierOutLen(st),
        };
    }

    /// The app waits on this carrier's stream: it is woken (a message, the close).
    pub fn wake(c: Carrier) void {
        switch (c) {
            .conn => |x| if (x.a().stream) |st| x.server.hooks.wakeRead(st),
            .stream => |st| if (seam.carrierHeld(st)) st.conn.server.hooks.wakeRead(st),
        }
    }

    /// One whole frame, header and payload copied, onto the carrier's output.
    pub fn queue(c: Carrier, head: []const u8, payload: []const u8, frames_bytes_max: usize) error{OutOfMemory}!void {
        switch (c) {
            .conn => |x| {
                // A full segment queue is out of room like any allocation: the caller closes.
                x.queueCopy(head, null, frames_bytes_max) catch return error.OutOfMemory;
                x.queueCopy(payload, null, frames_bytes_max) catch return error.OutOfMemory;
            },
            .stream => |st| try seam.carrierQueue(st, head, payload),
        }
    }

    /// Our close frame is queued. A connection waits for the peer's within the linger
    /// time; a stream's side ends with the frame (RFC 8441 5), the peer's follows.
    pub fn closeSent(c: Carrier) error{OutOfMemory}!void {
        switch (c) {
            .conn => |x| x.server.linger_timeouts.arm(&x.timer, x.server.now_ms),
            .stream => |st| try seam.carrierEnd(st),
        }
    }

    /// The session cannot go on: the connection closes, or the stream alone is reset.
    pub fn abort(c: Carrier, reason: []const u8) void {
        switch (c) {
            .conn => |x| x.closeFor(reason),
            .stream => |st| {
                st.conn.server.hooks.logError(reason);
                seam.carrierAbort(st);
            },
        }
    }

    /// Reading paused (the app or the client is behind): a connection stops reading its
    /// socket; a stream's DATA stays in its buffer, its window closed.
    pub fn pause(c: Carrier) void {
        switch (c) {
            .conn => |x| x.setReading(false),
            .stream => {},
        }
    }

    /// Reading resumes: what waits is parsed on the connection's next pass.
    pub fn resumeReading(c: Carrier) void {
        switch (c) {
            .conn => |x| if (!x.interest.readable) {
                x.setReading(true);
                x.server.schedule(x);
            },
            .stream => |st| seam.carrierResumeInput(st),
        }
    }
};
