//! The engine's writer thread (`--writer-thread`): the last write of a complete HTTP/1.1
//! response leaves the Python thread, so the app's next step runs while the kernel
//! moves the bytes (on loopback the sender's writev also runs the receiver's TCP stack).
//!
//! The thread only ever sees a `Job`: a descriptor and up to `outq.segments_max` byte ranges. It never
//! touches a connection, Python, or the GIL. The connection that submitted a job is
//! `io_busy` until its completion is applied on the Python thread (`Server.poll`):
//! until then nobody modifies its output, closes its descriptor or frees it.
const std = @import("std");
const linux = std.os.linux;
const sys = @import("../os/sys.zig");
const outq = @import("output_queue.zig");

/// Jobs in flight at once; past this the Python thread writes inline as before.
pub const jobs_max = 1024;

pub const Job = struct {
    /// The submitter (a `*Conn`), handed back untouched with the completion.
    owner: *anyopaque,
    fd: i32,
    iov: [outq.segments_max]std.posix.iovec_const = undefined,
    iov_len: u8 = 0,
    // Filled by the writer thread.
    written: usize = 0,
    /// .SUCCESS (everything written), .AGAIN (the socket is full), or the write's error.
    err: sys.E = .SUCCESS,
    /// io_uring: the same job as a `sendmsg` in the ring (the message points at `iov`).
    msg: std.posix.msghdr_const = undefined,

    pub fn bytes(self: *const Job) usize {
        var n: usize = 0;
        for (self.iov[0..self.iov_len]) |v| n += v.len;
        return n;
    }
};

/// A fixed ring of job pointers; callers hold the writer's mutex.
const Ring = struct {
    items: [jobs_max]*Job = undefined,
    head: u32 = 0,
    len: u32 = 0,

    fn push(self: *Ring, j: *Job) void {
        std.debug.assert(self.len < jobs_max);
        self.items[(self.head + self.len) % jobs_max] = j;
        self.len += 1;
    }

    fn pop(self: *Ring) ?*Job {
        if (self.len == 0) return null;
        const j = self.items[self.head];
        self.head = (self.head + 1) % jobs_max;
        self.len -= 1;
        return j;
    }
};

pub const Writer = struct {
    mutex: std.Thread.Mutex = .{},
    cond: std.Thread.Condition = .{},
    todo: Ring = .{},
    done: Ring = .{},
    stopping: bool = false,
    idle: bool = false,
    thread: ?std.Thread = null,
    /// The engine's eventfd: written when completions wait, so its poll runs.
    wake_fd: i32,
    /// Submitted and not yet taken back (Python thread only). Bounds both rings.
    in_flight: u32 = 0,

    pub fn start(self: *Writer) !void {
        self.thread = try std.Thread.spawn(.{ .stack_size = 64 * 1024 }, run, .{self});
    }

    /// Finishes the queued jobs, then joins. Their completions stay to be taken.
    pub fn stop(self: *Writer) void {
        const t = self.thread orelse return;
        self.mutex.lock();
        self.stopping = true;
        self.cond.signal();
        self.mutex.unlock();
        t.join();
        self.thread = null;
    }

    /// False when the queue is full or the thread is gone: the caller writes inline.
    /// A busy thread picks the job up by itself; an idle one waits for `kick`, so the
    /// jobs handed over in one pass of the loop cost one wake-up, not one each.
    pub fn submit(self: *Writer, job: *Job) bool {
        if (self.thread == null or self.in_flight >= jobs_max) return false;
        self.in_flight += 1;
        self.mutex.lock();
        defer self.mutex.unlock();
        self.todo.push(job);
        return true;
    }

    /// Wakes the thread if it sleeps with jobs queued.
    pub fn kick(self: *Writer) void {
        if (self.in_flight == 0) return;
        self.mutex.lock();
        defer self.mutex.unlock();
        if (self.idle and self.todo.len != 0) self.cond.signal();
    }

    /// Moves finished jobs into `out`; returns how many.
    pub fn take(self: *Writer, out: []*Job) usize {
        if (self.in_flight == 0) return 0;
        self.mutex.lock();
        defer self.mutex.unlock();
        var n: usize = 0;
        while (n < out.len) : (n += 1) out[n] = self.done.pop() orelse break;
        self.in_flight -= @intCast(n);
        return n;
    }

    fn run(self: *Writer) void {
        // Signals are Python's to handle, on its own threads: one landing here would not
        // interrupt the loop's wait, so a SIGTERM could sit until the next wake-up.
        const all = std.posix.sigfillset();
        std.posix.sigprocmask(std.posix.SIG.BLOCK, &all, null);
        self.mutex.lock();
        while (true) {
            const job = self.todo.pop() orelse {
                if (self.stopping) break;
                self.idle = true;
                self.cond.wait(&self.mutex);
                self.idle = false;
                continue;
            };
            self.mutex.unlock();
            write(job);
            self.mutex.lock();
            const was_empty = self.done.len == 0;
            self.done.push(job);
            if (was_empty) {
                const one: u64 = 1;
                _ = linux.write(self.wake_fd, std.mem.asBytes(&one), 8);
            }
        }
        self.mutex.unlock();
    }

    /// Writes until everything is out, the socket is full, or it fails.
    fn write(job: *Job) void {
        var iov = job.iov;
        var first: usize = 0;
        const total = job.bytes();
        job.written = 0;
        job.err = .SUCCESS;
        while (job.written < total) {
            switch (sys.writev(job.fd, iov[first..job.iov_len])) {
                .ok => |n| {
                    // A socket never takes zero of a non-empty write; do not spin on it.
                    if (n == 0) {
                        job.err = .PIPE;
                        return;
                    }
                    job.written += n;
                    var left = n;
                    while (left > 0 and first < job.iov_len) {
                        const step = @min(left, iov[first].len);
                        iov[first].base += step;
                        iov[first].len -= step;
                        left -= step;
                        if (iov[first].len == 0) first += 1;
                    }
                },
                .err => |e| {
                    if (e == .INTR) continue;
                    job.err = e;
                    return;
                },
            }
        }
    }
};
