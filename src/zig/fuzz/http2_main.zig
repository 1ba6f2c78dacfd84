//! Time-bounded runner of the HTTP/2 session fuzzer (`testing/fuzz_http2.zig`); the CI runner.
//!
//!   python -m ziglang build-exe -OReleaseSafe -lc src/zig/fuzz_http2_main.zig -femit-bin=fuzz_http2
//!   ./fuzz_http2 --seconds 60 [--seed N] [--out fuzz_h2-failure.txt]
//!   ./fuzz_http2 --replay CASE_SEED      (one case, every frame and app action printed)
//!
//! Case `i` of a run is `fuzz_h2.caseSeed(seed, i)`: the seed and the iteration reproduce
//! it, and so does the case seed alone (`--replay`). ReleaseSafe keeps every safety check:
//! an overflow, an out-of-bounds index or an `unreachable` in the engine panics, and the
//! panic handler below writes the case to `--out` first; so does a violated invariant, a
//! fatal signal, or a case that runs past the watchdog (a spin in `poll`). The runner
//! restarts itself with glibc's thread cache off so that the leak check (the C heap as
//! large after a case as before it) is exact.
//! Exit status: 0 clean, 1 invariant violated, abort/signal on panic or hang.
const std = @import("std");
const fuzz_h2 = @import("testing/fuzz_http2.zig");

pub const panic = std.debug.FullPanic(onPanic);
pub const std_options: std.Options = .{ .enable_segfault_handler = false };

/// A case that takes longer than this is stuck (they take milliseconds).
const watchdog_seconds = 20;

extern "c" fn alarm(seconds: c_uint) c_uint;

/// The case under test, for the panic and signal handlers.
var run_seed: u64 = 0;
var iteration: u64 = 0;
var case_seed: u64 = 0;
var out_path: []const u8 = "fuzz_h2-failure.txt";
var saving = false;

fn saveFailure(reason: []const u8) void {
    if (saving) return; // A panic while saving: give up on the file, keep the report.
    saving = true;
    var buf: [2048]u8 = undefined;
    const text = std.fmt.bufPrint(&buf,
        \\fuzz_h2 found {s}
        \\seed {d}
        \\iteration {d}
        \\case seed {d}
        \\invariant: {s}
        \\replay: fuzz_http2 --replay {d}
        \\
    , .{ reason, run_seed, iteration, case_seed, fuzz_h2.last_failure, case_seed }) catch "fuzz_h2: report too long\n";
    std.fs.cwd().writeFile(.{ .sub_path = out_path, .data = text }) catch |err| {
        std.debug.print("fuzz_h2: could not write {s}: {s}\n", .{ out_path, @errorName(err) });
    };
    std.debug.print("\n{s}fuzz_h2: written to {s}\n", .{ text, out_path });
}

fn onPanic(msg: []const u8, first_trace_addr: ?usize) noreturn {
    saveFailure("a panic");
    std.debug.defaultPanic(msg, first_trace_addr);
}

fn onSignal(sig: i32, info: *const std.posix.siginfo_t, ctx: ?*anyopaque) callconv(.c) void {
    _ = info;
    _ = ctx;
    saveFailure(switch (sig) {
        std.posix.SIG.SEGV => "a segmentation fault",
        std.posix.SIG.ALRM => "a hang (the case ran past the watchdog: a spin?)",
        else => "a fatal signal",
    });
    if (sig == std.posix.SIG.ALRM) std.process.abort();
    // Returning re-executes the faulting instruction; std's handler then prints the trace.
    std.debug.attachSegfaultHandler();
}

fn installSignalHandlers() void {
    const act = std.posix.Sigaction{
        .handler = .{ .sigaction = onSignal },
        .mask = std.posix.sigemptyset(),
        .flags = std.posix.SA.SIGINFO | std.posix.SA.RESETHAND,
    };
    std.debug.updateSegfaultHandler(&act);
    std.posix.sigaction(std.posix.SIG.ALRM, &act, null);
    fuzz_h2.ignoreSigpipe();
}

const Args = struct {
    seconds: f64 = 10,
    seed: ?u64 = null,
    replay: ?u64 = null,
};

fn usage() noreturn {
    std.debug.print("usage: fuzz_http2 [--seconds S] [--seed N] [--out FILE] [--tolerate-known 0|1] | --replay CASE_SEED\n", .{});
    std.process.exit(2);
}

fn parseArgs(argv: []const [:0]u8) Args {
    var args = Args{};
    var index: usize = 1;
    while (index < argv.len) : (index += 2) {
        if (index + 1 >= argv.len) usage();
        const name = argv[index];
        const value = argv[index + 1];
        if (std.mem.eql(u8, name, "--seconds")) {
            args.seconds = std.fmt.parseFloat(f64, value) catch usage();
        } else if (std.mem.eql(u8, name, "--seed")) {
            args.seed = std.fmt.parseInt(u64, value, 0) catch usage();
        } else if (std.mem.eql(u8, name, "--out")) {
            out_path = value;
        } else if (std.mem.eql(u8, name, "--tolerate-known")) {
            fuzz_h2.tolerate_known = std.mem.eql(u8, value, "1");
        } else if (std.mem.eql(u8, name, "--replay")) {
            args.replay = std.fmt.parseInt(u64, value, 0) catch usage();
        } else usage();
    }
    return args;
}

fn runOne() void {
    _ = alarm(watchdog_seconds);
    fuzz_h2.runCase(case_seed) catch {
        saveFailure("a broken invariant");
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
    const tunables = if (old) |t| try std.fmt.allocPrint(arena, "{s}:{s}", .{ t, fuzz_h2.tcache_count_off }) else fuzz_h2.tcache_count_off;
    try env.put("GLIBC_TUNABLES", tunables);
    const argv = try std.process.argsAlloc(arena);
    argv[0] = try arena.dupeZ(u8, "/proc/self/exe");
    return std.process.execve(arena, argv, &env);
}

pub fn main() !void {
    var arena_state = std.heap.ArenaAllocator.init(std.heap.page_allocator);
    defer arena_state.deinit();
    try execWithExactHeap(arena_state.allocator());
    installSignalHandlers();
    fuzz_h2.tolerateFromEnv();
    fuzz_h2.heapCheckFromEnv();
    const args = parseArgs(try std.process.argsAlloc(arena_state.allocator()));

    if (args.replay) |seed| {
        fuzz_h2.trace = true;
        case_seed = seed;
        runOne();
        std.debug.print("fuzz_h2: case {d} passes\n", .{seed});
        return;
    }
    run_seed = args.seed orelse @as(u64, @truncate(@as(u128, @bitCast(std.time.nanoTimestamp()))));
    std.debug.print("fuzz_h2: seed {d}, {d:.1}s\n", .{ run_seed, args.seconds });
    const budget_ns: u64 = @intFromFloat(@max(args.seconds, 0) * std.time.ns_per_s);
    var timer = try std.time.Timer.start();
    while (timer.read() < budget_ns) : (iteration += 1) {
        case_seed = fuzz_h2.caseSeed(run_seed, iteration);
        runOne();
    }
    const elapsed_s = @as(f64, @floatFromInt(timer.read())) / std.time.ns_per_s;
    printStats();
    std.debug.print("fuzz_h2: OK: {d} iterations in {d:.1}s ({d:.0} iterations/s)\n", .{ iteration, elapsed_s, @as(f64, @floatFromInt(iteration)) / elapsed_s });
}

/// What the cases reached (see `fuzz_h2.Stats`).
fn printStats() void {
    const s = fuzz_h2.stats;
    std.debug.print(
        \\fuzz_h2: {d} cases, {d} mutated, {d} closed early by the client, {d} with every completed response checked to arrive
        \\fuzz_h2: {d} streams handed out, {d} responses ended, {d} DATA frames ({d} bytes), {d} exhausting a window, {d} while a window setting was in flight, {d} CONTINUATION
        \\fuzz_h2: {d} h2c upgrades, {d} bodies sent from files
        \\
    , .{ s.cases, s.mutated, s.early_close, s.liveness_checked, s.streams_handed_out, s.responses_ended, s.data_frames, s.data_bytes, s.window_exhausted, s.data_settings_in_flight, s.continuation_frames, s.h2c_upgrades, s.files_sent });
    std.debug.print("fuzz_h2: GOAWAY by error code:", .{});
    for (s.goaway_by_code, 0..) |n, code| if (n > 0) std.debug.print(" {d}:{d}", .{ code, n });
    std.debug.print("\nfuzz_h2: RST_STREAM by error code:", .{});
    for (s.rst_by_code, 0..) |n, code| if (n > 0) std.debug.print(" {d}:{d}", .{ code, n });
    std.debug.print("\n", .{});
}
