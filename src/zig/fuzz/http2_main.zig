//! Time-bounded runner of the HTTP/2 session fuzzer (`testing/fuzz_http2.zig`); the CI runner.
//!
//!   python -m ziglang build-exe -OReleaseSafe -lc ... (docs/FUZZING.md) -femit-bin=fuzz_http2
//!   ./fuzz_http2 --seconds 60 [--seed N] [--out fuzz_h2-failure.txt]
//!   ./fuzz_http2 --replay CASE_SEED      (one case, every frame and app action printed)
//!
//! Case `i` of a run is `fuzz_h2.caseSeed(seed, i)`: the seed and the iteration reproduce
//! it, and so does the case seed alone (`--replay`). ReleaseSafe keeps every safety check:
//! an overflow, an out-of-bounds index or an `unreachable` in the engine panics, and the
//! panic handler (`runner.zig`) writes the case to `--out` first; so does a violated
//! invariant, a fatal signal, or a case that runs past the watchdog (a spin in `poll`). The runner
//! restarts itself with glibc's thread cache off so that the leak check (the C heap as
//! large after a case as before it) is exact.
//! Exit status: 0 clean, 1 invariant violated, abort/signal on panic or hang.
const std = @import("std");
const fuzz_h2 = @import("engine").fuzz_http2;
const runner = @import("runner.zig");

pub const panic = runner.panic;
pub const std_options = runner.std_options;

/// A case that takes longer than this is stuck (they take milliseconds).
const watchdog_seconds = 20;

extern "c" fn alarm(seconds: c_uint) c_uint;

/// The case under test, for the panic and signal handlers.
var run_seed: u64 = 0;
var iteration: u64 = 0;
var case_seed: u64 = 0;

/// The case's seeds rather than its bytes: `--replay` runs it again (`runner.save`).
fn saveFailure(reason: []const u8) void {
    const out_path = runner.out_path;
    var buf: [2048]u8 = undefined;
    const text = std.fmt.bufPrint(&buf,
        \\fuzz_h2 found {s}
        \\seed {d}
        \\iteration {d}
        \\case seed {d}
        \\invariant: {s}
        \\replay: fuzz_http2 --replay {d}
        \\
    , .{
        reason,
        run_seed,
        iteration,
        case_seed,
        fuzz_h2.last_failure,
        case_seed,
    }) catch "fuzz_h2: report too long\n";
    std.fs.cwd().writeFile(.{ .sub_path = out_path, .data = text }) catch |err| {
        std.debug.print("fuzz_h2: could not write {s}: {s}\n", .{ out_path, @errorName(err) });
    };
    std.debug.print("\n{s}fuzz_h2: written to {s}\n", .{ text, out_path });
}

const Args = struct {
    seconds: f64 = 10,
    seed: ?u64 = null,
    out: []const u8 = "fuzz_h2-failure.txt",
    tolerate_known: ?bool = null,
    replay: ?u64 = null,
};

const usage_line = "fuzz_http2 [--seconds S] [--seed N] [--out FILE] [--tolerate-known 0|1]" ++
    " | --replay CASE_SEED";

fn runOne() void {
    _ = alarm(watchdog_seconds);
    fuzz_h2.runCase(case_seed) catch {
        runner.fail("a broken invariant");
        std.process.exit(1);
    };
    _ = alarm(0);
}

/// The leak check needs glibc's thread cache off (see `fuzz_h2.tcache_count_off`), which
/// only the environment at start can do: the runner starts itself again with it.
fn execWithExactHeap(arena: std.mem.Allocator) !void {
    const old = std.posix.getenv("GLIBC_TUNABLES");
    if (old) |t| if (std.mem.indexOf(u8, t, fuzz_h2.tcache_count_off) != null) return;
    var env = try std.process.getEnvMap(arena);
    const tunables = if (old) |t| try std.fmt.allocPrint(
        arena,
        "{s}:{s}",
        .{ t, fuzz_h2.tcache_count_off },
    ) else fuzz_h2.tcache_count_off;
    try env.put("GLIBC_TUNABLES", tunables);
    const argv = try std.process.argsAlloc(arena);
    argv[0] = try arena.dupeZ(u8, "/proc/self/exe");
    return std.process.execve(arena, argv, &env);
}

pub fn main() !void {
    var arena_state = std.heap.ArenaAllocator.init(std.heap.page_allocator);
    defer arena_state.deinit();
    try execWithExactHeap(arena_state.allocator());
    runner.save = saveFailure;
    runner.installSignalHandlers(true);
    fuzz_h2.ignoreSigpipe();
    fuzz_h2.tolerateFromEnv();
    fuzz_h2.heapCheckFromEnv();
    const argv = try std.process.argsAlloc(arena_state.allocator());
    const args = runner.parseArgs(Args, .{}, argv, usage_line);
    runner.out_path = args.out;
    if (args.tolerate_known) |t| fuzz_h2.tolerate_known = t;

    if (args.replay) |seed| {
        fuzz_h2.trace = true;
        case_seed = seed;
        runOne();
        std.debug.print("fuzz_h2: case {d} passes\n", .{seed});
        return;
    }
    run_seed = runner.seedOr(args.seed);
    std.debug.print("fuzz_h2: seed {d}, {d:.1}s\n", .{ run_seed, args.seconds });
    const budget_ns = runner.budgetNs(args.seconds);
    var timer = try std.time.Timer.start();
    while (timer.read() < budget_ns) : (iteration += 1) {
        case_seed = fuzz_h2.caseSeed(run_seed, iteration);
        runOne();
    }
    const elapsed_s = @as(f64, @floatFromInt(timer.read())) / std.time.ns_per_s;
    printStats();
    std.debug.print(
        "fuzz_h2: OK: {d} iterations in {d:.1}s ({d:.0} iterations/s)\n",
        .{ iteration, elapsed_s, @as(f64, @floatFromInt(iteration)) / elapsed_s },
    );
}

/// What the cases reached (see `fuzz_h2.Stats`).
fn printStats() void {
    const s = fuzz_h2.stats;
    std.debug.print("fuzz_h2: {d} cases, {d} mutated, {d} closed early by the client, " ++
        "{d} with every completed response checked to arrive\n" ++
        "fuzz_h2: {d} streams handed out, {d} responses ended, {d} DATA frames ({d} bytes), " ++
        "{d} exhausting a window, {d} while a window setting was in flight, " ++
        "{d} CONTINUATION\n" ++
        "fuzz_h2: {d} h2c upgrades, {d} bodies sent from files\n", .{
        s.cases,
        s.mutated,
        s.early_close,
        s.liveness_checked,
        s.streams_handed_out,
        s.responses_ended,
        s.data_frames,
        s.data_bytes,
        s.window_exhausted,
        s.data_settings_in_flight,
        s.continuation_frames,
        s.h2c_upgrades,
        s.files_sent,
    });
    std.debug.print("fuzz_h2: GOAWAY by error code:", .{});
    for (s.goaway_by_code, 0..) |n, code| if (n > 0) std.debug.print(" {d}:{d}", .{ code, n });
    std.debug.print("\nfuzz_h2: RST_STREAM by error code:", .{});
    for (s.rst_by_code, 0..) |n, code| if (n > 0) std.debug.print(" {d}:{d}", .{ code, n });
    std.debug.print("\n", .{});
}
