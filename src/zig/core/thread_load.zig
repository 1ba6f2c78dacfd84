//! When the Python thread stops writing itself: the writer thread's `auto` measure, and
//! the busy poll that spins a moment after the last stream instead of sleeping.
//!
//! Both only measure and decide; the server acts on what they say (starts the writer
//! thread, hands a response over, schedules the spin).
const std = @import("std");
const sys = @import("../os/sys.zig");
const io = @import("../os/io.zig");

/// `auto` measures the Python thread over windows of `offload_window` responses: its
/// CPU time per response, and how busy it was (CPU time, plus the time it was runnable
/// but waited for a CPU another process held, over wall time: on a loaded machine a
/// saturated thread gets less CPU than wall time, yet never waits for work). It hands over
/// once the thread is saturated (`busy_above_pct`) and each response costs it more than
/// `offload_above_ns`; it stops when either falls (below `busy_below_pct` or
/// `offload_below_ns`; a handed-over write no longer counts). A thread that waits for
/// slow or few clients is not the bottleneck: handing over would only add work.
const offload_window: u32 = 16;
const offload_above_ns: u64 = 30_000;
const offload_below_ns: u64 = 20_000;
const busy_above_pct: u64 = 80;
const busy_below_pct: u64 = 50;

/// `auto`'s measure: responses in the current window, and the thread's CPU clock and
/// the wall clock when it began.
pub const Measure = struct {
    window_responses: u32 = 0,
    window_cpu_ns: u64 = 0,
    window_wall_ns: u64 = 0,
    window_waited_ns: u64 = 0,
    /// The Python thread's schedstat (run queue wait), opened at the first window; -1: none.
    schedstat_fd: i32 = -2,
    offloading: bool = false,

    /// Counts one complete plain response; at a window's end, decides whether the
    /// writer thread should take responses (`offloading`). `spun_ns`: the time spent busy
    /// polling so far, which is the thread waiting, not the app working.
    pub fn count(self: *Measure, spun_ns: u64) void {
        self.window_responses += 1;
        if (self.window_responses < offload_window) return;
        if (self.schedstat_fd == -2) self.schedstat_fd = sys.openThreadSchedStat();
        const cpu = sys.threadCpuNs() -| spun_ns;
        const wall = sys.monotonicNs();
        const waited = sys.runQueueWaitNs(self.schedstat_fd);
        const first = self.window_cpu_ns == 0; // no window measured yet
        const per_response = (cpu -| self.window_cpu_ns) / offload_window;
        const wanted_ns = (cpu -| self.window_cpu_ns) + (waited -| self.window_waited_ns);
        const busy_pct = wanted_ns * 100 / @max(wall -| self.window_wall_ns, 1);
        self.window_cpu_ns = cpu;
        self.window_wall_ns = wall;
        self.window_waited_ns = waited;
        self.window_responses = 0;
        if (first) {} else if (self.offloading) {
            if (per_response < offload_below_ns or busy_pct < busy_below_pct) self.offloading = false;
        } else if (per_response > offload_above_ns and busy_pct >= busy_above_pct) {
            self.offloading = true;
        }
    }

    pub fn deinit(self: *Measure) void {
        if (self.schedstat_fd >= 0) sys.close(self.schedstat_fd);
    }
};

/// Failed spins in a row make the next ones rarer: a client that answers within the
/// budget (a request/response ping-pong) keeps the spin, and one late answer costs
/// it one idle moment; sporadic traffic soon sleeps at once, paying one budget per
/// `spin_backoff_max` + 1 idle moments.
const spin_backoff_max = 32;

/// The busy poll's own state: its back-off after misses, and the time it spent.
pub const BusyPoll = struct {
    /// After a spin that found nothing, the next idle moments are let pass without one:
    /// 1, then 2, 4, ... up to `spin_backoff_max` after misses in a row.
    spin_skip: u8 = 0,
    spin_backoff: u8 = 0,
    /// Time spent spinning, in total (the writer thread's `auto` does not count it as work).
    spun_ns: u64 = 0,

    /// The last stream finished: whether this idle moment gets a spin (false while
    /// the back-off lets it pass).
    pub fn due(self: *BusyPoll) bool {
        if (self.spin_skip != 0) {
            self.spin_skip -= 1;
            return false;
        }
        return true;
    }

    /// Polls `backend` without blocking until an event is ready in `batch` (true) or
    /// `budget_ns` is spent. Touches only the poller and the batch, never a connection.
    pub fn wait(self: *BusyPoll, backend: *io.Backend, batch: *io.Backend.Batch, budget_ns: u64) bool {
        const start = sys.monotonicNs();
        while (true) {
            backend.wait(batch, 0);
            const spent = sys.monotonicNs() -% start;
            if (batch.len != 0) {
                self.spun_ns +%= spent;
                self.spin_backoff = 0;
                return true;
            }
            if (spent >= budget_ns) {
                self.spun_ns +%= spent;
                self.spin_backoff = if (self.spin_backoff == 0) 1 else @min(self.spin_backoff * 2, spin_backoff_max);
                self.spin_skip = self.spin_backoff;
                return false;
            }
            for (0..32) |_| std.atomic.spinLoopHint();
        }
    }
};
