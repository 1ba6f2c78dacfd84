//! The io_uring backend: the same interface as epoll's (`os/io.zig`), completion-based.
//!
//! - **Receiving**: every connection that wants to read has one multishot receive in
//!   the ring, drawing buffers from a provided-buffer ring. The kernel takes a buffer
//!   only when bytes arrive, so an idle connection holds none. A completion's bytes wait
//!   in their ring buffer ("held") until the connection's `recv` copies them into its own
//!   read buffer, in the same pass as a rule; the ring buffer then goes straight back.
//!   `recv` keeps its meaning: "give me what is there", `.AGAIN` when nothing is.
//!   Readability is level-triggered, as epoll's: a connection given a read event whose
//!   slot still has something to read after the pass (held bytes it did not take, or the
//!   end of the stream or an error behind the bytes it took) gets the event again next
//!   pass, whether or not it called `recv` (a TLS read served from OpenSSL's own buffer
//!   does not), since no completion will come for what is already here.
//! - **Readiness the connection still needs**: a connection that stops reading has its
//!   receive cancelled and a one-shot poll for the peer's hang-up armed instead (the app
//!   must still see `http.disconnect`); a connection that waits to write gets a one-shot
//!   POLLOUT, re-armed every pass while it still wants it (the level-triggered behaviour
//!   the connection code is written for).
//! - **Sending**: while other requests are in flight, a whole HTTP/1.1 response goes into
//!   the ring as one `sendmsg` (`sendAsync`, the owner keeps the bytes until its `sent`
//!   event); everything else (a lone response, streaming, TLS, WebSocket, HTTP/2,
//!   pathsend's `sendfile`) writes directly, as on epoll.
//! - **Accepting**: a one-shot exclusive poll on the listener, then accept4 until EAGAIN
//!   (a multishot accept in each worker sharing a socket let one worker take them all).
//! - **At most one `io_uring_enter` per call to `wait`**, none when nothing is queued and
//!   the kernel flags no task work: it submits what the pass queued and collects
//!   completions. Work queued outside a `wait` (an app's `send` that met a full
//!   socket, a close) calls `kick`, which has the server submit at the end of the pass.
//!
//! - **Events** wait as bits in their descriptor's slot (`queued_*`), the descriptor queued
//!   once on the `ready` queue, and are handed out one per descriptor, read, write and
//!   hang-up together, as epoll reports them: nothing is reserved per connection, nothing
//!   can be dropped. Completions carry the slot's generation, so one for a descriptor
//!   closed meanwhile (and perhaps reused) is recognised and dropped; a closed
//!   descriptor's bits are cleared and the queue's walk passes over it.
//! - **Memory follows the load**: the slot table (16 bytes a descriptor) covers the
//!   highest descriptor open and shrinks at the end of the pass that closed the others;
//!   the buffer ring shrinks back to its first size once a second passed quietly.
const std = @import("std");
const linux = std.os.linux;
const IoUring = linux.IoUring;
const sys = @import("sys.zig");
const slots_mod = @import("io_uring_slots.zig");
pub const Slot = slots_mod.Slot;
const FdQueue = slots_mod.FdQueue;

const page = std.heap.page_size_min;

pub const Event = struct {
    token: usize,
    readable: bool,
    writable: bool,
    hangup: bool,
    /// io_uring: a `sendAsync` finished; `result` is bytes sent or -errno.
    sent: bool = false,
    result: i32 = 0,
};

/// Provided buffers: how many at most and how large (powers of two; defaults and help
/// live in `zigcorn/config.py`).
pub const Config = struct {
    buffers: u16,
    buffer_bytes: u32,
};

pub const buffers_min = 16;
/// The ring starts with this many buffers (or `Config.buffers` if fewer) and doubles,
/// up to `Config.buffers`, at the end of a pass in which a receive found it empty. The
/// kernel takes buffers in ring order, so every buffer handed to it is touched sooner or
/// later and stays resident: a ring sized by the load it met, not by its bound, keeps a
/// lightly loaded server's RSS down (16 x 4 KiB against 256 x 4 KiB).
pub const buffers_start = buffers_min;
pub const buffers_max = 32768;
pub const buffer_bytes_min = 512;
pub const buffer_bytes_max = 65536;

const group_id: u16 = 1;
const no_buf = slots_mod.no_buf;
/// The rings are mapped whole from the start (their pages count in RSS): 256 entries of
/// 64 bytes and 2,048 completions of 16 bytes, 48 KiB. A pass that queues more submits
/// the full queue first (`sqe`); completions past the queue's room wait in the kernel
/// (IORING_FEAT_NODROP) until the next `wait` flushes them, and a multishot receive the
/// kernel ended for want of room is armed again.
const sq_entries: u16 = 256;
/// The completion queue is this many times the submission queue.
const cq_per_sq = 8;
/// Completions copied out of the ring at once.
const cqe_batch = 256;
pub const slot_step = slots_mod.slot_step;
/// An io_uring_enter interrupted by a signal is retried at most this many times more;
/// then the work stays queued for the next pass.
const enter_retries_max = 3;
/// Token events waiting at once: one per pollable, the listener's and a pollable's
/// writability (`watchWritable`) (`queueToken` keeps one each).
const pollables_max = 4;
const tokens_max = pollables_max + 2;
/// POLLRDHUP (the same value on every Linux architecture the engine builds for).
const poll_rdhup: u32 = 0x2000;

const Op = enum(u8) {
    none = 0,
    recv = 1,
    pollout = 2,
    pollhup = 3,
    accept = 4,
    pollable = 5,
    cancel = 6,
    close = 7,
    send = 8,
    pollable_out = 9,
};

/// A submission's user data: the operation in the top byte; below it the slot's
/// generation (24 bits) and the descriptor (32 bits), or a send's owner token (56 bits).
const op_shift = 56;
const gen_shift = 32;
const gen_mask: u32 = 0xffffff;
const send_token_mask: u64 = (@as(u64, 1) << op_shift) - 1;
/// Tokens are pointers: user-space addresses fit 48 bits (the slot's `token` field).
const token_bits = 48;

fn userData(op: Op, gen: u32, fd: i32) u64 {
    return (@as(u64, @intFromEnum(op)) << op_shift) | (@as(u64, gen & gen_mask) << gen_shift) | @as(u32, @bitCast(fd));
}

const Seg = struct { off: u32 = 0, len: u32 = 0, next: u16 = no_buf };

const Kind = enum(u8) { read, write, hangup, token, token_write, sent };
const Pending = struct { fd: i32, gen: u32, kind: Kind, token: usize = 0, result: i32 = 0 };

const Pollable = struct { fd: i32, token: usize };

pub const Kick = struct {
    ctx: *anyopaque,
    func: *const fn (ctx: *anyopaque) void,
};

/// What `enter` did: the work went in, waits for the next pass (the kernel was short of
/// memory or completions were not yet reaped), or the ring is broken (`failures`).
const Entered = enum { done, deferred, failed };

pub const EnterError = @typeInfo(@typeInfo(@TypeOf(IoUring.enter)).@"fn".return_type.?).error_union.error_set;

pub const Uring = struct {
    ring: IoUring,
    br: *align(page) linux.io_uring_buf_ring,
    mem: []align(page) u8,
    buf_bytes: u32,
    /// The ring's entries (`Config.buffers`): the most buffers it can hold.
    buf_cap: u16,
    /// Buffers handed to the kernel so far (`buffers_start`, doubled by `grow`).
    buf_provided: u16,
    segs: []Seg,
    /// The slots by descriptor (`io_uring_slots.zig`).
    table: slots_mod.SlotTable = .{},
    /// The next registration's generation: one counter for every descriptor, so a slot
    /// cut off by a shrink and made again starts where no old completion can match it.
    gen_next: u24 = 1,
    /// Descriptors with events waiting for `fill` (their `queued_*` bits), in the order
    /// the first of them came.
    ready: FdQueue(Slot, "on_ready") = .{},
    /// The token and `sent` events waiting for `fill`. Its room is reserved when a send
    /// is queued (`reserve`), so a completion never finds it full.
    queue: std.ArrayListUnmanaged(Pending) = .{},
    /// Registered descriptors, and `sendAsync`s whose `sent` event is not handed out yet
    /// (what the queue's room is counted from).
    registered_count: u32 = 0,
    sends_pending: u32 = 0,
    /// io_uring_enter failed in a way no retry mends: how often, and the last error
    /// (the server reports them on `zigcorn.error`, `takeFailures`).
    failures: u32 = 0,
    last_failure: ?EnterError = null,
    /// Descriptors given a writable event: POLLOUT is armed again next pass if still wanted.
    delivered_out: std.ArrayListUnmanaged(Pending) = .{},
    /// Descriptors given a read event: reported again next pass if still readable.
    delivered_in: std.ArrayListUnmanaged(Pending) = .{},
    /// Descriptors whose receive ended for want of buffers: re-armed when one comes back.
    starved: FdQueue(Slot, "is_starved") = .{},
    listen_fd: i32 = -1,
    listen_token: usize = 0,
    listen_armed: bool = false,
    pollables: [pollables_max]Pollable = undefined,
    pollables_len: usize = 0,
    /// The one pollable whose writability is watched (`watchWritable`): a one-shot POLLOUT,
    /// armed again each pass while wanted.
    out_fd: i32 = -1,
    out_token: usize = 0,
    out_want: bool = false,
    out_armed: bool = false,
    in_wait: bool = false,
    kick: ?Kick = null,
    /// Times a receive found the buffer ring empty (the connection waited for a buffer).
    buffer_waits: u64 = 0,
    /// Buffers in the ring now (not held by a connection).
    buffers_free: u32,
    /// The most buffers held at once since the last `trim` (the load the ring met).
    held_peak: u32 = 0,
    /// `trim` unregistered the ring and the kernel refused it back: `grow` tries again.
    ring_down: bool = false,
    /// Completions copied out of the ring, a batch at a time. A field, not a local of
    /// `waitFor`: safe builds fill a local `undefined` array (4 KiB) on every call, and
    /// the busy poll calls it in a loop.
    cqes: [cqe_batch]linux.io_uring_cqe = undefined,

    const allocator = std.heap.c_allocator;

    /// Sets up the ring and its buffers; an error means the kernel (or a sysctl or
    /// seccomp profile) refuses io_uring, and the caller falls back to epoll.
    pub fn init(cfg: Config) !*Uring {
        std.debug.assert(std.math.isPowerOfTwo(cfg.buffers) and std.math.isPowerOfTwo(cfg.buffer_bytes));
        // Cooperative task running: completions are posted when this thread next enters
        // the kernel, with no interrupt of a running thread; the kernel flags pending
        // task work in the ring, so `wait` enters only when there is some. (Deferred task running would
        // save more, but then the ring's descriptor does not wake the asyncio loop's
        // epoll, since completions are posted only inside io_uring_enter; a registered
        // eventfd instead was tried and lost wake-ups under load: the kernel signals it
        // only when the completion queue's tail moved, which deferred work has not done.)
        var params = std.mem.zeroInit(linux.io_uring_params, .{
            .flags = linux.IORING_SETUP_SINGLE_ISSUER | linux.IORING_SETUP_COOP_TASKRUN |
                linux.IORING_SETUP_TASKRUN_FLAG | linux.IORING_SETUP_CQSIZE | linux.IORING_SETUP_SUBMIT_ALL,
            .cq_entries = @as(u32, sq_entries) * cq_per_sq,
        });
        // Kernels before 6.0 lack these flags, and multishot receive with them: the error
        // makes the server fall back to epoll.
        var ring = try IoUring.init_params(sq_entries, &params);
        errdefer ring.deinit();
        const br = try IoUring.setup_buf_ring(ring.fd, cfg.buffers, group_id, .{ .inc = false });
        errdefer IoUring.free_buf_ring(ring.fd, br, cfg.buffers, group_id);
        // Pages are touched only when the kernel fills a buffer.
        const mem = try std.posix.mmap(null, @as(usize, cfg.buffers) * cfg.buffer_bytes, std.posix.PROT.READ | std.posix.PROT.WRITE, .{ .TYPE = .PRIVATE, .ANONYMOUS = true }, -1, 0);
        errdefer std.posix.munmap(mem);
        const segs = try allocator.alloc(Seg, cfg.buffers);
        errdefer allocator.free(segs);
        @memset(segs, .{});
        const self = try allocator.create(Uring);
        errdefer allocator.destroy(self);
        self.* = .{ .ring = ring, .br = br, .mem = mem, .buf_bytes = cfg.buffer_bytes, .buf_cap = cfg.buffers, .buf_provided = 0, .segs = segs, .buffers_free = 0 };
        try self.queue.ensureTotalCapacityPrecise(allocator, tokens_max);
        IoUring.buf_ring_init(br);
        self.provide(@min(cfg.buffers, buffers_start));
        return self;
    }

    pub fn deinit(self: *Uring) void {
        // Queued closes (cancel + close pairs) happen before the ring goes.
        if (self.ring.sq_ready() != 0) _ = self.enter(linux.IORING_ENTER_GETEVENTS);
        IoUring.free_buf_ring(self.ring.fd, self.br, self.buf_cap, group_id);
        self.ring.deinit();
        std.posix.munmap(self.mem);
        allocator.free(self.segs);
        self.table.deinit();
        self.ready.deinit();
        self.starved.deinit();
        self.queue.deinit(allocator);
        self.delivered_out.deinit(allocator);
        self.delivered_in.deinit(allocator);
        allocator.destroy(self);
    }

    pub fn fd(self: *const Uring) i32 {
        return self.ring.fd;
    }

    fn bufferOf(self: *Uring, bid: u16) []u8 {
        const start = @as(usize, bid) * self.buf_bytes;
        return self.mem[start .. start + self.buf_bytes];
    }

    /// Hands the next `count` buffers of the mapping to the kernel (ids in order).
    fn provide(self: *Uring, count: u16) void {
        std.debug.assert(count > 0 and @as(u32, self.buf_provided) + count <= self.buf_cap);
        const mask = IoUring.buf_ring_mask(self.buf_cap);
        var i: u16 = 0;
        while (i < count) : (i += 1) IoUring.buf_ring_add(self.br, self.bufferOf(self.buf_provided + i), self.buf_provided + i, mask, i);
        IoUring.buf_ring_advance(self.br, count);
        self.buf_provided += count;
        self.buffers_free += count;
    }

    /// A receive found the ring empty since the last pass: twice the buffers, up to the
    /// bound (the ring has an entry for every buffer of the bound, so there is room).
    fn grow(self: *Uring) void {
        if (self.ring_down) {
            // Its buffers are in it already (`trim` put them there).
            if (self.registerRing(.REGISTER_PBUF_RING)) self.ring_down = false;
            return;
        }
        if (self.buf_provided == self.buf_cap) return;
        self.provide(@min(self.buf_provided, self.buf_cap - self.buf_provided));
    }

    /// Once a second (the server's tick): a ring grown for a burst that has passed (the
    /// last second held at most half its first size at once) goes back to its first
    /// size, and every page its buffers touched goes back to the kernel. A buffer in the
    /// ring is the kernel's to fill at any moment (task work runs at any return to user
    /// mode), so its pages are dropped only with the ring unregistered, when no receive
    /// can take one, and once the completions of bytes it took before are in. Then the
    /// same ring memory is filled again and registered. A multishot receive armed across
    /// it looks the ring up by its group when bytes come; one that met no ring ends with
    /// ENOBUFS and waits on the starved queue as for a ring run dry. True if it shrank.
    pub fn trim(self: *Uring) bool {
        const peak = self.held_peak;
        self.held_peak = self.buf_provided - self.buffers_free;
        const first = @min(self.buf_cap, buffers_start);
        if (self.ring_down or self.buf_provided <= first or peak > first / 2) return false;
        // Receives queued this pass go in while the ring is there (met with none, they
        // would wait as starved and grow it again at the pass's end).
        self.reap();
        // A connection holds bytes in a buffer (the pass ended inside a read).
        if (self.buffers_free != self.buf_provided) return false;
        if (!self.registerRing(.UNREGISTER_PBUF_RING)) return false;
        // Bytes the kernel put in a buffer before it let go of the ring: now held.
        self.reap();
        IoUring.buf_ring_init(self.br);
        const shrank = self.buffers_free == self.buf_provided;
        if (shrank) {
            // Failure only leaves the pages resident (the kernel checks nothing else).
            _ = linux.madvise(self.mem.ptr, self.mem.len, linux.MADV.DONTNEED);
            self.buf_provided = 0;
            self.buffers_free = 0;
            self.provide(first);
        } else {
            // Some came: the ring goes back as it was, less the buffers now held.
            var added: u16 = 0;
            for (self.segs[0..self.buf_provided], 0..) |seg, bid| {
                if (seg.len != 0) continue;
                const b: u16 = @intCast(bid);
                const mask = IoUring.buf_ring_mask(self.buf_cap);
                IoUring.buf_ring_add(self.br, self.bufferOf(b), b, mask, added);
                added += 1;
            }
            IoUring.buf_ring_advance(self.br, added);
            self.buffers_free = added;
        }
        // Refused: receives wait on the starved queue, and `grow` registers it again.
        if (!self.registerRing(.REGISTER_PBUF_RING)) self.ring_down = true;
        return shrank;
    }

    /// Registers the buffer ring (mapped at `br`) with the kernel, or unregisters it.
    fn registerRing(self: *Uring, op: linux.IORING_REGISTER) bool {
        const reg = std.mem.zeroInit(linux.io_uring_buf_reg, .{
            .ring_addr = @intFromPtr(self.br),
            .ring_entries = self.buf_cap,
            .bgid = group_id,
        });
        return sys.E.init(linux.io_uring_register(self.ring.fd, op, &reg, 1)) == .SUCCESS;
    }

    fn giveBack(self: *Uring, bid: u16) void {
        std.debug.assert(bid < self.buf_provided);
        IoUring.buf_ring_add(self.br, self.bufferOf(bid), bid, IoUring.buf_ring_mask(self.buf_cap), 0);
        IoUring.buf_ring_advance(self.br, 1);
        self.buffers_free += 1;
    }

    // ---- submission -----------------------------------------------------------------

    /// Submits what is queued (and with `IORING_ENTER_GETEVENTS` runs the task work that
    /// posts completions). A signal retries; a kernel short of memory, or completions not
    /// yet reaped, leave the entries queued for the next pass; anything else means the
    /// ring is broken, counted for the server to report.
    fn enter(self: *Uring, flags: u32) Entered {
        var tries: u32 = 0;
        while (true) : (tries += 1) {
            _ = self.ring.enter(self.ring.flush_sq(), 0, flags) catch |err| switch (err) {
                error.SignalInterrupt => if (tries < enter_retries_max) continue else return .deferred,
                error.SystemResources, error.CompletionQueueOvercommitted => return .deferred,
                else => {
                    self.failures +|= 1;
                    self.last_failure = err;
                    return .failed;
                },
            };
            return .done;
        }
    }

    /// The failed io_uring_enter calls since the last call, and the last one's error.
    pub fn takeFailures(self: *Uring) ?struct { count: u32, err: EnterError } {
        if (self.failures == 0) return null;
        defer self.failures = 0;
        return .{ .count = self.failures, .err = self.last_failure.? };
    }

    /// Room in the queue for every token and `sent` event that can wait at once: one per
    /// send in flight, the tokens. False when memory is short: the caller refuses the
    /// send rather than lose its event later.
    fn reserve(self: *Uring, sends: u32) bool {
        self.queue.ensureTotalCapacity(allocator, @as(usize, sends) + tokens_max) catch return false;
        return true;
    }

    /// Marks an event of `kind` waiting on the slot and puts the slot on the ready list.
    fn queueEvent(self: *Uring, fd_: i32, s: *Slot, comptime kind: enum { read, write, hangup }) void {
        switch (kind) {
            .read => s.queued_read = true,
            .write => s.queued_write = true,
            .hangup => s.queued_hup = true,
        }
        if (!s.on_ready) {
            s.on_ready = true;
            self.ready.push(fd_);
        }
    }

    /// Queues an event; `reserve` made room for it.
    fn push(self: *Uring, p: Pending) void {
        std.debug.assert(self.queue.items.len < self.queue.capacity);
        self.queue.appendAssumeCapacity(p);
    }

    /// An SQE, submitting what is queued first if the ring is full. Null only if the
    /// kernel refuses the submission itself (then the operation is lost and logged by
    /// the caller's timeouts: a connection without its receive is reaped by them).
    fn sqe(self: *Uring) ?*linux.io_uring_sqe {
        if (self.ring.get_sqe()) |s| {
            self.kicked();
            return s;
        } else |_| {}
        _ = self.enter(0);
        return self.ring.get_sqe() catch null;
    }

    fn kicked(self: *Uring) void {
        if (self.in_wait) return;
        if (self.kick) |k| k.func(k.ctx);
    }

    /// Submits what is queued (the end of a pass of the loop). True when completions
    /// are already there (a loopback send usually completes inside the submission).
    pub fn submit(self: *Uring) bool {
        if (self.ring.sq_ready() != 0) _ = self.enter(linux.IORING_ENTER_GETEVENTS);
        return self.ring.cq_ready() != 0;
    }

    fn armRecv(self: *Uring, fd_: i32, s: *Slot) void {
        if (s.recv_armed or s.eof or s.err != 0) return;
        const q = self.sqe() orelse return;
        q.prep_rw(.RECV, fd_, 0, 0, 0);
        q.flags |= linux.IOSQE_BUFFER_SELECT;
        q.buf_index = group_id;
        q.ioprio |= linux.IORING_RECV_MULTISHOT;
        q.user_data = userData(.recv, s.gen, fd_);
        s.recv_armed = true;
    }

    fn armPoll(self: *Uring, op: Op, fd_: i32, s: *Slot, mask: u32) void {
        const q = self.sqe() orelse return;
        q.prep_poll_add(fd_, mask);
        q.user_data = userData(op, s.gen, fd_);
        if (op == .pollout) s.out_armed = true else s.hup_armed = true;
    }

    fn cancelRecv(self: *Uring, fd_: i32, s: *Slot) void {
        if (!s.recv_armed) return;
        const q = self.sqe() orelse return;
        q.prep_cancel(userData(.recv, s.gen, fd_), 0);
        q.user_data = userData(.cancel, 0, fd_);
        // Completes with -ECANCELED (or its last bytes first): recv_armed clears then.
    }

    // ---- registration ---------------------------------------------------------------

    pub fn register(self: *Uring, fd_: i32, token: usize, readable: bool, writable: bool) bool {
        const s = self.table.at(fd_) orelse return false;
        std.debug.assert(!s.registered);
        if (token >> token_bits != 0) return false;
        self.registered_count += 1;
        self.table.top = @max(self.table.top, @as(usize, @intCast(fd_)) + 1);
        s.* = .{
            .token = @intCast(token),
            .gen = self.gen_next,
            .registered = true,
            .on_ready = s.on_ready,
            .is_starved = s.is_starved,
        };
        self.gen_next +%= 1;
        self.apply(fd_, s, readable, writable);
        return true;
    }

    /// An eventfd or timerfd: a multishot poll for input, reported with its token.
    pub fn registerPollable(self: *Uring, fd_: i32, token: usize) bool {
        if (self.pollables_len == self.pollables.len) return false;
        self.pollables[self.pollables_len] = .{ .fd = fd_, .token = token };
        self.pollables_len += 1;
        self.armPollable(self.pollables_len - 1);
        return true;
    }

    fn armPollable(self: *Uring, i: usize) void {
        const p = &self.pollables[i];
        const q = self.sqe() orelse return;
        q.prep_poll_add(p.fd, linux.POLL.IN);
        q.len = linux.IORING_POLL_ADD_MULTI;
        q.user_data = userData(.pollable, @intCast(i), p.fd);
    }

    /// A pollable's writability, reported under `token` while `on` (one descriptor at a time:
    /// the HTTP/3 worker's socket when the kernel's buffer was full).
    pub fn watchWritable(self: *Uring, fd_: i32, token: usize, on: bool) bool {
        std.debug.assert(self.out_fd == -1 or self.out_fd == fd_);
        self.out_fd = fd_;
        self.out_token = token;
        self.out_want = on;
        if (on) self.armOut();
        return true;
    }

    fn armOut(self: *Uring) void {
        if (self.out_armed or !self.out_want) return;
        const q = self.sqe() orelse return;
        q.prep_poll_add(self.out_fd, linux.POLL.OUT);
        q.user_data = userData(.pollable_out, 0, self.out_fd);
        self.out_armed = true;
    }

    pub fn registerListener(self: *Uring, fd_: i32, token: usize) bool {
        self.listen_fd = fd_;
        self.listen_token = token;
        self.armAccept();
        return true;
    }

    /// The listener is watched with a one-shot exclusive poll, and connections are taken
    /// with accept4 until it says EAGAIN: a multishot accept in every worker sharing the
    /// socket let one worker take every connection (measured: the workers tests saw one
    /// pid), where an exclusive wait wakes one waiter per connection, as epoll's does.
    fn armAccept(self: *Uring) void {
        if (self.listen_armed or self.listen_fd < 0) return;
        const q = self.sqe() orelse return;
        q.prep_poll_add(self.listen_fd, linux.POLL.IN | linux.EPOLL.EXCLUSIVE);
        q.user_data = userData(.accept, 0, self.listen_fd);
        self.listen_armed = true;
    }

    pub fn update(self: *Uring, fd_: i32, readable: bool, writable: bool) bool {
        const s = self.table.known(fd_) orelse return false;
        self.apply(fd_, s, readable, writable);
        return true;
    }

    fn apply(self: *Uring, fd_: i32, s: *Slot, readable: bool, writable: bool) void {
        if (readable and !s.want_read) {
            s.want_read = true;
            self.armRecv(fd_, s);
            if (hasInput(s)) self.queueRead(fd_, s);
        } else if (!readable and s.want_read) {
            s.want_read = false;
            self.cancelRecv(fd_, s);
            // The app must still learn that the peer went away.
            if (!s.hup_armed and !s.eof) self.armPoll(.pollhup, fd_, s, poll_rdhup | linux.POLL.HUP | linux.POLL.ERR);
        }
        if (writable and !s.want_write) {
            s.want_write = true;
            if (!s.out_armed) self.armPoll(.pollout, fd_, s, linux.POLL.OUT);
        } else if (!writable) {
            s.want_write = false;
        }
    }

    /// Bytes already here for a connection that reads (again): its event waits in the
    /// queue, and outside `wait` the server is told, so the loop comes back for it (on
    /// epoll the descriptor's readiness would wake the loop; here nothing else would).
    fn queueRead(self: *Uring, fd_: i32, s: *Slot) void {
        if (s.queued_read) return;
        self.queueEvent(fd_, s, .read);
        self.kicked();
    }

    /// The descriptor leaves the ring: its operations are cancelled, its held bytes freed.
    pub fn unregister(self: *Uring, fd_: i32) void {
        if (fd_ == self.listen_fd) {
            if (self.listen_armed) if (self.sqe()) |q| {
                q.prep_cancel(userData(.accept, 0, fd_), 0);
                q.user_data = userData(.cancel, 0, fd_);
            };
            // Counted as not armed at once: its -ECANCELED completion does not matter.
            self.listen_armed = false;
            self.listen_fd = -1;
            return;
        }
        const s = self.table.known(fd_) orelse return;
        // Always: a `sendAsync` may be in flight too (its owner waits for the completion).
        if (self.sqe()) |q| {
            q.prep_cancel_fd(fd_, linux.IORING_ASYNC_CANCEL_ALL);
            q.user_data = userData(.cancel, 0, fd_);
        }
        self.forget(fd_, s);
    }

    /// The slot is free again: held bytes back to the ring, and a new generation, so
    /// completions still on their way for the old connection are recognised and dropped.
    fn forget(self: *Uring, fd_: i32, s: *Slot) void {
        self.dropHeld(s);
        std.debug.assert(s.registered and self.registered_count > 0);
        self.registered_count -= 1;
        // Its waiting events leave with it (the bits); it stays linked where it is, and
        // the lists' walks pass over a slot with nothing waiting.
        s.* = .{ .gen = s.gen +% 1, .on_ready = s.on_ready, .is_starved = s.is_starved };
        self.table.lowerTop(fd_);
    }

    /// Cancels the descriptor's operations, then closes it, in order, from the ring: the
    /// number cannot be reused by an accept before its receive is gone.
    pub fn close(self: *Uring, fd_: i32) void {
        if (fd_ == self.listen_fd) self.unregister(fd_);
        const s = self.table.known(fd_) orelse return sys.close(fd_);
        const armed = s.recv_armed or s.out_armed or s.hup_armed;
        self.forget(fd_, s);
        // Nothing of the ring's on it: closed at once.
        if (armed) self.closeLinked(fd_) else sys.close(fd_);
    }

    /// Two entries in one submission: a cancel of whatever the ring still has on the
    /// descriptor, hard-linked to its close (a cancel queued earlier by `unregister` runs
    /// before it too, being earlier in the queue).
    pub fn closeLinked(self: *Uring, fd_: i32) void {
        const linked_entries = 2;
        if (self.ring.sq.sqes.len - self.ring.sq_ready() < linked_entries) {
            _ = self.enter(0);
            // Still full (the kernel took nothing): closed at once rather than not at all.
            if (self.ring.sq.sqes.len - self.ring.sq_ready() < linked_entries) return sys.close(fd_);
        }
        const cancel = self.sqe() orelse return sys.close(fd_);
        cancel.prep_cancel_fd(fd_, linux.IORING_ASYNC_CANCEL_ALL);
        cancel.user_data = userData(.cancel, 0, fd_);
        cancel.flags |= linux.IOSQE_IO_HARDLINK;
        const cl = self.ring.get_sqe() catch unreachable;
        cl.prep_close(fd_);
        cl.user_data = userData(.close, 0, fd_);
    }

    fn dropHeld(self: *Uring, s: *Slot) void {
        var bid = s.held_head;
        while (bid != no_buf) {
            const next = self.segs[bid].next;
            self.segs[bid] = .{};
            self.giveBack(bid);
            bid = next;
        }
        s.held_head = no_buf;
        s.held_tail = no_buf;
    }

    // ---- operations -----------------------------------------------------------------

    /// The held bytes, copied into `buf`; `.ok = 0` is the peer's end of stream.
    pub fn recv(self: *Uring, fd_: i32, buf: []u8) sys.Result(usize) {
        const s = self.table.known(fd_) orelse return sys.read(fd_, buf);
        var n: usize = 0;
        while (s.held_head != no_buf and n < buf.len) {
            const bid = s.held_head;
            const seg = &self.segs[bid];
            const take = @min(seg.len, buf.len - n);
            const from = self.bufferOf(bid)[seg.off..][0..take];
            @memcpy(buf[n..][0..take], from);
            n += take;
            seg.off += @intCast(take);
            seg.len -= @intCast(take);
            if (seg.len == 0) {
                s.held_head = seg.next;
                if (s.held_head == no_buf) s.held_tail = no_buf;
                seg.* = .{};
                self.giveBack(bid);
            }
        }
        if (n > 0) {
            // Level-triggered: what did not fit, or the end of the stream (or an error)
            // that came behind these bytes, is reported again next pass: by `rearm` for a
            // connection given its event in this pass (TLS reads a record's header, then
            // its body: queued at the header, the event would be stale by the pass's end
            // and cost a wake-up), else queued now.
            if (hasInput(s) and s.want_read and !s.read_delivered) self.queueRead(fd_, s);
            return .{ .ok = n };
        }
        if (s.err != 0) return .{ .err = @enumFromInt(s.err) };
        if (s.eof) return .{ .ok = 0 };
        if (s.want_read and !s.recv_armed) self.armRecv(fd_, s);
        return .{ .err = .AGAIN };
    }

    /// Something waits for `recv`: held bytes, the end of the stream, or an error.
    fn hasInput(s: *const Slot) bool {
        return s.held_head != no_buf or s.eof or s.err != 0;
    }

    /// A full socket arms POLLOUT for a connection that wants to write (and may not
    /// call `update` again, since its interest did not change).
    fn wouldBlock(self: *Uring, fd_: i32) void {
        const s = self.table.known(fd_) orelse return;
        if (s.want_write and !s.out_armed) self.armPoll(.pollout, fd_, s, linux.POLL.OUT);
    }

    pub fn sendv(self: *Uring, fd_: i32, iov: []const std.posix.iovec_const) sys.Result(usize) {
        const r = sys.writev(fd_, iov);
        if (r == .err and r.err == .AGAIN) self.wouldBlock(fd_);
        return r;
    }

    pub fn sendfile(self: *Uring, fd_: i32, file_fd: i32, offset: *u64, count: usize) sys.Result(usize) {
        const r = sys.sendfile(fd_, file_fd, offset, count);
        if (r == .err and r.err == .AGAIN) self.wouldBlock(fd_);
        return r;
    }

    /// A whole response, sent from the ring: the owner (`token`) keeps `msg` and the bytes
    /// it points at alive until the `sent` event. False: nothing was queued.
    pub fn sendAsync(self: *Uring, fd_: i32, msg: *const std.posix.msghdr_const, token: usize) bool {
        std.debug.assert(token >> op_shift == 0 and token != 0);
        if (!self.reserve(self.sends_pending + 1)) return false;
        const q = self.sqe() orelse return false;
        q.prep_sendmsg(fd_, msg, linux.MSG.NOSIGNAL);
        q.user_data = (@as(u64, @intFromEnum(Op.send)) << op_shift) | token;
        self.sends_pending += 1;
        return true;
    }

    /// A new connection (non-blocking, close-on-exec) and its peer; at EAGAIN the
    /// listener's poll is armed again.
    pub fn accept(self: *Uring, listen_fd: i32, peer: *linux.sockaddr.storage) sys.Result(i32) {
        var len: linux.socklen_t = undefined;
        const r = sys.accept(listen_fd, peer, &len);
        if (r == .err and r.err == .AGAIN and listen_fd == self.listen_fd) self.armAccept();
        return r;
    }

    // ---- events ---------------------------------------------------------------------

    /// After the events of a batch were handled: POLLOUT again for those still waiting to
    /// write (the level-triggered writability the connection code expects: TLS asks for
    /// it to come back for decrypted bytes), and receives again for those that waited
    /// for a buffer, if one is free.
    pub fn rearm(self: *Uring) void {
        // The server stops after a bounded number of accepts: the rest wait in the backlog.
        if (self.listen_fd >= 0 and !self.listen_armed) self.armAccept();
        self.armOut();
        for (self.delivered_out.items) |p| {
            const s = &self.table.slots[@intCast(p.fd)];
            if (s.gen == p.gen and s.registered and s.want_write and !s.out_armed) self.armPoll(.pollout, p.fd, s, linux.POLL.OUT);
        }
        self.delivered_out.clearRetainingCapacity();
        // Level-triggered reads: a connection that did not take everything (it read from a
        // buffer of its own, or stopped at a limit) hears of the rest again.
        for (self.delivered_in.items) |p| {
            const s = &self.table.slots[@intCast(p.fd)];
            if (s.gen != p.gen) continue;
            s.read_delivered = false;
            if (s.registered and s.want_read and hasInput(s)) self.queueRead(p.fd, s);
        }
        self.delivered_in.clearRetainingCapacity();
        if (!self.starved.isEmpty()) self.grow();
        while (self.buffers_free > 0 and !self.ring_down) {
            const fd_ = self.starved.pop(self.table.slots) orelse break;
            const s = &self.table.slots[@intCast(fd_)];
            // A descriptor closed since is passed over (a new one on its number arms its own).
            if (s.registered and s.want_read) self.armRecv(fd_, s);
        }
        self.table.shrink();
    }

    /// Submits the queued work, collects completions, and fills `events` (never blocks).
    pub fn wait(self: *Uring, events: []Event) usize {
        return self.waitFor(events, false);
    }

    /// `wait` at the end of a pass: only the `sent` events are handed out (their streams
    /// finish in this pass); the rest wait for the next pass's `wait`, where epoll would
    /// report them too. A request read here would reach its app only after that next
    /// `wait`, behind events that came after it (a client's end of stream).
    pub fn waitSent(self: *Uring, events: []Event) usize {
        return self.waitFor(events, true);
    }

    fn waitFor(self: *Uring, events: []Event, sent_only: bool) usize {
        self.in_wait = true;
        defer self.in_wait = false;
        self.reap();
        return self.fill(events, sent_only);
    }

    /// Submits what is queued and takes in every completion there is. A system call only
    /// when there is something for the kernel to do: entries to submit, or task work
    /// (completions) waiting to run, which the kernel flags in the ring. A busy poll then
    /// spins on memory, not on io_uring_enter.
    fn reap(self: *Uring) void {
        if (self.ring.sq_ready() != 0 or self.taskWorkPending()) _ = self.enter(linux.IORING_ENTER_GETEVENTS);
        while (true) {
            const n = self.ring.copy_cqes(&self.cqes, 0) catch 0;
            for (self.cqes[0..n]) |cqe| self.complete(cqe);
            if (n < self.cqes.len) break;
        }
    }

    /// Task work (completions to post) waits, or completions overflowed the queue and wait
    /// in the kernel to be flushed into it: both need an io_uring_enter.
    fn taskWorkPending(self: *const Uring) bool {
        if (self.ring.flags & linux.IORING_SETUP_TASKRUN_FLAG == 0) return true;
        const flags = @atomicLoad(u32, self.ring.sq.flags, .acquire);
        return flags & (linux.IORING_SQ_TASKRUN | linux.IORING_SQ_CQ_OVERFLOW) != 0;
    }

    /// Whether a `wait` now would find work that the ring's descriptor does not show yet:
    /// entries to submit, completions already posted or queued here, or task work the
    /// kernel runs only when this thread enters the ring (COOP_TASKRUN). A loop about to
    /// sleep on the ring's descriptor must pass through `wait` first when this is true.
    pub fn needsWait(self: *Uring) bool {
        return self.unsubmitted() or self.ring.cq_ready() != 0 or self.hasBacklog() or self.taskWorkPending();
    }

    /// Entries wait in the submission queue (`rearm` queued them).
    pub fn unsubmitted(self: *Uring) bool {
        return self.ring.sq_ready() != 0;
    }

    /// More events wait than the last batch held: the server makes sure the loop comes
    /// back for them (its wake-up descriptor).
    pub fn hasBacklog(self: *const Uring) bool {
        return self.queue.items.len != 0 or !self.ready.isEmpty();
    }

    fn fill(self: *Uring, events: []Event, sent_only: bool) usize {
        if (sent_only) return self.fillSent(events);
        // Room for every read and write event of the batch up front: one that missed its
        // list could leave its connection waiting for a completion that will not come.
        // Short of memory, the events stay queued for the next pass.
        self.delivered_in.ensureUnusedCapacity(allocator, events.len) catch return 0;
        self.delivered_out.ensureUnusedCapacity(allocator, events.len) catch return 0;
        var n: usize = 0;
        var i: usize = 0;
        while (i < self.queue.items.len and n < events.len) : (i += 1) {
            const p = self.queue.items[i];
            // Delivered whatever became of a `sent` event's descriptor: the owner waits for it.
            const w = p.kind == .token_write;
            const ev: Event = .{ .token = p.token, .readable = !w, .writable = w, .hangup = false };
            events[n] = if (p.kind == .sent) self.sentEvent(p) else ev;
            n += 1;
        }
        // What did not fit stays, in order.
        const rest = self.queue.items.len - i;
        std.mem.copyForwards(Pending, self.queue.items[0..rest], self.queue.items[i..]);
        self.queue.shrinkRetainingCapacity(rest);
        // A descriptor's waiting events go out as one, as epoll reports them.
        while (n < events.len) {
            const fd_ = self.ready.pop(self.table.slots) orelse break;
            const s = &self.table.slots[@intCast(fd_)];
            const readable = s.queued_read and s.want_read;
            const writable = s.queued_write and s.want_write;
            const hangup = s.queued_hup;
            s.queued_read = false;
            s.queued_write = false;
            s.queued_hup = false;
            if (!(readable or writable or hangup)) continue;
            std.debug.assert(s.registered);
            if (readable) {
                self.delivered_in.appendAssumeCapacity(.{ .fd = fd_, .gen = s.gen, .kind = .read });
                s.read_delivered = true;
            }
            if (writable) self.delivered_out.appendAssumeCapacity(.{ .fd = fd_, .gen = s.gen, .kind = .write });
            events[n] = .{ .token = @as(usize, s.token), .readable = readable, .writable = writable, .hangup = hangup };
            n += 1;
        }
        return n;
    }

    /// The `sent` events only; everything else stays queued, in order.
    fn fillSent(self: *Uring, events: []Event) usize {
        var n: usize = 0;
        var kept: usize = 0;
        for (self.queue.items) |p| {
            if (p.kind == .sent and n < events.len) {
                events[n] = self.sentEvent(p);
                n += 1;
            } else {
                self.queue.items[kept] = p;
                kept += 1;
            }
        }
        self.queue.shrinkRetainingCapacity(kept);
        return n;
    }

    /// A `sent` event handed out: its room in the queue is free again.
    fn sentEvent(self: *Uring, p: Pending) Event {
        std.debug.assert(self.sends_pending > 0);
        self.sends_pending -= 1;
        return .{ .token = p.token, .readable = false, .writable = false, .hangup = false, .sent = true, .result = p.result };
    }

    fn complete(self: *Uring, cqe: linux.io_uring_cqe) void {
        const ud = cqe.user_data;
        const op: Op = std.meta.intToEnum(Op, @as(u8, @truncate(ud >> op_shift))) catch return;
        if (op == .send) {
            const token: usize = @intCast(ud & send_token_mask);
            // Room reserved by `sendAsync`: without the event the owner would wait forever.
            self.push(.{ .fd = -1, .gen = 0, .kind = .sent, .token = token, .result = cqe.res });
            return;
        }
        const gen: u32 = @truncate((ud >> gen_shift) & gen_mask);
        const fd_: i32 = @bitCast(@as(u32, @truncate(ud)));
        const more = cqe.flags & linux.IORING_CQE_F_MORE != 0;
        switch (op) {
            .none, .cancel, .close, .send => {},
            .recv => self.completeRecv(cqe, fd_, gen, more),
            .pollout => {
                const s = self.live(fd_, gen) orelse return;
                s.out_armed = false;
                if (s.want_write and !s.queued_write) self.queueEvent(fd_, s, .write);
            },
            .pollhup => {
                const s = self.live(fd_, gen) orelse return;
                s.hup_armed = false;
                if (cqe.res > 0 and !s.queued_hup) self.queueEvent(fd_, s, .hangup);
            },
            .accept => {
                if (fd_ != self.listen_fd) return;
                self.listen_armed = false;
                if (cqe.res == -@as(i32, @intFromEnum(sys.E.CANCELED))) return;
                // The server accepts until EAGAIN, which arms the poll again.
                self.queueToken(self.listen_token, .token);
            },
            .pollable_out => {
                if (fd_ != self.out_fd) return;
                self.out_armed = false;
                if (self.out_want and cqe.res > 0) self.queueToken(self.out_token, .token_write);
            },
            .pollable => {
                const i: usize = gen;
                if (i >= self.pollables_len) return;
                const p = &self.pollables[i];
                if (!more) self.armPollable(i);
                if (cqe.res > 0) self.queueToken(p.token, .token);
            },
        }
    }

    /// A multishot receive's completion: bytes into the slot's held buffers, the end of
    /// the stream, or an error; a receive the kernel ended is armed again.
    fn completeRecv(self: *Uring, cqe: linux.io_uring_cqe, fd_: i32, gen: u32, more: bool) void {
        const bid: ?u16 = if (cqe.flags & linux.IORING_CQE_F_BUFFER != 0) @intCast(cqe.flags >> 16) else null;
        if (bid != null) {
            self.buffers_free -= 1;
            self.held_peak = @max(self.held_peak, self.buf_provided - self.buffers_free);
        }
        const s = self.live(fd_, gen) orelse {
            if (bid) |b| self.giveBack(b);
            return;
        };
        if (!more) s.recv_armed = false;
        if (cqe.res > 0) {
            const b = bid orelse return;
            self.segs[b] = .{ .off = 0, .len = @intCast(cqe.res) };
            if (s.held_tail == no_buf) s.held_head = b else self.segs[s.held_tail].next = b;
            s.held_tail = b;
            if (s.want_read) {
                self.queueRead(fd_, s);
                // The kernel ended the multishot (its completion queue overflowed).
                if (!more) self.armRecv(fd_, s);
            }
        } else if (cqe.res == 0) {
            if (bid) |b| self.giveBack(b);
            s.eof = true;
            self.queueRead(fd_, s);
        } else {
            if (bid) |b| self.giveBack(b);
            const e: sys.E = @enumFromInt(-cqe.res);
            switch (e) {
                // Cancelled when the connection stopped reading: it may want to
                // read again by now, before this completion came.
                .CANCELED => if (s.want_read) self.armRecv(fd_, s),
                .NOBUFS => {
                    self.buffer_waits += 1;
                    if (s.want_read and !s.is_starved) {
                        s.is_starved = true;
                        self.starved.push(fd_);
                    }
                },
                else => {
                    s.err = std.math.cast(u8, -cqe.res) orelse @intFromEnum(sys.E.IO);
                    self.queueRead(fd_, s);
                },
            }
        }
    }

    fn queueToken(self: *Uring, token: usize, kind: Kind) void {
        for (self.queue.items) |p| if (p.kind == kind and p.token == token) return;
        self.push(.{ .fd = -1, .gen = 0, .kind = kind, .token = token });
    }

    /// The slot of a completion's descriptor, if it is still the same connection.
    fn live(self: *Uring, fd_: i32, gen: u32) ?*Slot {
        const s = self.table.known(fd_) orelse return null;
        return if (s.gen == gen) s else null;
    }
};
