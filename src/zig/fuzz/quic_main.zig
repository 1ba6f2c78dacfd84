//! Time-bounded mutation fuzzer for QUIC's wire layer (`testing/fuzz_quic.zig`); the CI runner.
//!
//!   python -m ziglang build-exe -OReleaseSafe src/zig/fuzz_quic_main.zig -femit-bin=fuzz_quic
//!   ./fuzz_quic --seconds 60 [--seed S] [--out fuzz-crash.bin]
//!
//! Starts from the target's seed corpus (RFC 9001 Appendix A's packets, frame payloads,
//! transport parameters), applies stacked mutations (`fuzz.mutate`) and runs `fuzz.checkOne`
//! on each input. Inputs that set a feature bit not seen before (`fuzz.features`) join the
//! pool. ReleaseSafe keeps every safety check, so an overflow, out-of-bounds index or
//! `unreachable` panics: the panic handler writes the input being checked to `--out`
//! first; an invariant violation is saved the same way. Exit status: 0 clean, 1 invariant
//! violated, abort on panic.
const std = @import("std");
const fuzz = @import("testing/fuzz_quic.zig");

pub const panic = std.debug.FullPanic(onPanic);

var current_input: []const u8 = &.{};
var crash_path: []const u8 = "fuzz-crash.bin";
var saving = false;

fn saveCrash(reason: []const u8) void {
    if (saving) return; // a panic while saving: keep the report, give up on the file
    saving = true;
    std.fs.cwd().writeFile(.{ .sub_path = crash_path, .data = current_input }) catch |err| {
        std.debug.print("fuzz: could not write {s}: {s}\n", .{ crash_path, @errorName(err) });
    };
    std.debug.print("\nfuzz: FOUND {s}\nfuzz: input ({d} bytes) written to {s}\n", .{ reason, current_input.len, crash_path });
}

fn onPanic(msg: []const u8, first_trace_addr: ?usize) noreturn {
    saveCrash("a panic");
    std.debug.defaultPanic(msg, first_trace_addr);
}

const Args = struct {
    seconds: f64 = 10,
    seed: ?u64 = null,
    out: []const u8 = "fuzz-crash.bin",
    /// Inputs kept at most (the corpus plus discoveries; past it a discovery replaces one).
    pool_max: usize = 4096,
};

fn usage() noreturn {
    std.debug.print("usage: fuzz_quic [--seconds N] [--seed S] [--out PATH]\n", .{});
    std.process.exit(2);
}

fn parseArgs(argv: []const [:0]u8) Args {
    var args = Args{};
    var index: usize = 1;
    while (index + 1 < argv.len) : (index += 2) {
        const name = argv[index];
        const value = argv[index + 1];
        if (std.mem.eql(u8, name, "--seconds")) {
            args.seconds = std.fmt.parseFloat(f64, value) catch usage();
        } else if (std.mem.eql(u8, name, "--seed")) {
            args.seed = std.fmt.parseInt(u64, value, 0) catch usage();
        } else if (std.mem.eql(u8, name, "--out")) {
            args.out = value;
        } else usage();
    }
    if (index != argv.len) usage();
    return args;
}

fn runOne(input: []const u8) void {
    current_input = input;
    fuzz.checkOne(input) catch {
        saveCrash("an invariant violation");
        std.debug.print("fuzz: violated: {s}\n", .{fuzz.last_failure});
        std.process.exit(1);
    };
}

pub fn main() !void {
    var arena_state = std.heap.ArenaAllocator.init(std.heap.page_allocator);
    defer arena_state.deinit();
    const arena = arena_state.allocator();

    const args = parseArgs(try std.process.argsAlloc(arena));
    crash_path = args.out;
    const seed = args.seed orelse @as(u64, @truncate(@as(u128, @bitCast(std.time.nanoTimestamp()))));
    std.debug.print("fuzz: seed {d}, {d} corpus inputs, {d:.1}s\n", .{ seed, fuzz.corpus.len, args.seconds });

    var prng = std.Random.DefaultPrng.init(seed);
    const random = prng.random();
    var pool: std.ArrayList([]const u8) = .empty;
    var seen = fuzz.Features.initEmpty();
    var timer = try std.time.Timer.start();

    for (fuzz.corpus) |input| {
        runOne(input);
        try pool.append(arena, input);
        seen.setUnion(fuzz.features);
    }
    const corpus_len = pool.items.len;

    const buf = try arena.alloc(u8, fuzz.max_input_bytes);
    const budget_ns: u64 = @intFromFloat(@max(args.seconds, 0) * std.time.ns_per_s);
    var iterations: u64 = 0;
    var added: u64 = 0;
    while (true) : (iterations += 1) {
        if (iterations % 64 == 0 and timer.read() >= budget_ns) break;
        const parent = pool.items[random.uintLessThan(usize, pool.items.len)];
        var len = @min(parent.len, buf.len);
        @memcpy(buf[0..len], parent[0..len]);
        const rounds = 1 + random.uintLessThan(usize, if (random.boolean()) 2 else 8);
        for (0..rounds) |_| len = fuzz.mutate(random, buf, len);
        const input = buf[0..len];
        runOne(input);

        if (!fuzz.features.differenceWith(seen).eql(fuzz.Features.initEmpty())) {
            seen.setUnion(fuzz.features);
            const copy = try arena.dupe(u8, input);
            added += 1;
            if (pool.items.len < args.pool_max) {
                try pool.append(arena, copy);
            } else {
                pool.items[corpus_len + random.uintLessThan(usize, pool.items.len - corpus_len)] = copy;
            }
        }
    }
    const elapsed_s = @as(f64, @floatFromInt(timer.read())) / std.time.ns_per_s;
    std.debug.print(
        "fuzz: OK: {d} iterations in {d:.1}s ({d:.0} iterations/s), {d} feature bits, {d} inputs kept, {d} in pool\n",
        .{ iterations, elapsed_s, @as(f64, @floatFromInt(iterations)) / elapsed_s, seen.count(), added, pool.items.len },
    );
}
