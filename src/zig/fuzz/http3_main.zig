//! Time-bounded mutation fuzzer for HTTP/3's wire layer (`testing/fuzz_http3.zig`: the
//! frame reader and the QPACK decoder); the CI runner.
//!
//!   python -m ziglang build-exe -OReleaseSafe src/zig/fuzz_http3_main.zig -femit-bin=fuzz_http3
//!   ./fuzz_http3 --seconds 60 [--seed S] [--out fuzz-crash.bin] [--max-len 2048]
//!
//! As `fuzz_http1_main.zig`: starts from the target's corpus, applies stacked mutations
//! (bit flips, varints and frame headers of interesting sizes, QPACK prefix integers,
//! splices), runs `fuzz.checkOne`, and keeps inputs that set a feature bit not seen before.
//! ReleaseSafe keeps every safety check; a panic, a fatal signal or a violated invariant
//! writes the input to `--out` first. Exit status: 0 clean, 1 invariant violated,
//! abort/signal on panic.
const std = @import("std");
const fuzz = @import("testing/fuzz_http3.zig");

pub const panic = std.debug.FullPanic(onPanic);
pub const std_options: std.Options = .{ .enable_segfault_handler = false };

var current_input: []const u8 = &.{};
var crash_path: []const u8 = "fuzz-crash.bin";
var saving = false;

fn saveCrash(reason: []const u8) void {
    if (saving) return; // A panic while saving: give up on the file, keep the report.
    saving = true;
    std.fs.cwd().writeFile(.{ .sub_path = crash_path, .data = current_input }) catch |err| {
        std.debug.print("fuzz: could not write {s}: {s}\n", .{ crash_path, @errorName(err) });
    };
    const shown = current_input[0..@min(current_input.len, 4096)];
    std.debug.print(
        "\nfuzz: FOUND {s}\nfuzz: input ({d} bytes) written to {s}\nfuzz: input = \"{f}\"\n",
        .{ reason, current_input.len, crash_path, std.zig.fmtString(shown) },
    );
}

fn onPanic(msg: []const u8, first_trace_addr: ?usize) noreturn {
    saveCrash("a panic");
    std.debug.defaultPanic(msg, first_trace_addr);
}

fn onSignal(sig: i32, info: *const std.posix.siginfo_t, ctx: ?*anyopaque) callconv(.c) void {
    _ = info;
    _ = ctx;
    saveCrash(if (sig == std.posix.SIG.SEGV) "a segmentation fault" else "a fatal signal");
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
}

// ---------------------------------------------------------------------------------------
// Mutations.

/// Frame headers, stream types, varints at their length boundaries, QPACK instructions and
/// prefix integers at theirs.
const dictionary = [_][]const u8{
    "\x00",             "\x01",                             "\x02",                                                 "\x03",
    "\x04",             "\x07",                             "\x0d",                                                 "\x21",
    "\x3f",             "\x40",                             "\x7f",                                                 "\x80",
    "\xff",             "\x40\x00",                         "\x7f\xff",                                             "\x80\x00\x00\x00",
    "\xbf\xff\xff\xff", "\xc0\x00\x00\x00\x00\x00\x00\x00", "\xff\xff\xff\xff\xff\xff\xff\xff",                     "\x01\x00",
    "\x00\x00",         "\x04\x00",                         "\x07\x01\x00",                                         "\x01\x41\x00",
    "\x00\x40\x46",     "\x5f\x01",                         "\x3f\xbd\x01",                                         "\x20",
    "\x3f\xe1\x1f",     "\xc0\x00",                         "\x4a",                                                 "\x00\x00",
    "\x03\x81",         "\x05\x00",                         "\x10",                                                 "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
    "\x84",             "\x48",                             "\x8c\xf1\xe3\xc2\xe5\xf2\x3a\x6b\xa0\xab\x90\xf4\xff",
};

const Mutator = struct {
    random: std.Random,
    buf: []u8,
    len: usize = 0,
    max_len: usize,

    fn pos(m: *Mutator, inclusive_end: bool) usize {
        const n = m.len + @intFromBool(inclusive_end);
        return if (n == 0) 0 else m.random.uintLessThan(usize, n);
    }

    fn insert(m: *Mutator, at: usize, bytes: []const u8) void {
        const take = @min(bytes.len, m.max_len - m.len);
        if (take == 0) return;
        std.mem.copyBackwards(u8, m.buf[at + take .. m.len + take], m.buf[at..m.len]);
        @memcpy(m.buf[at..][0..take], bytes[0..take]);
        m.len += take;
    }

    fn remove(m: *Mutator, at: usize, count: usize) void {
        const n = @min(count, m.len - at);
        std.mem.copyForwards(u8, m.buf[at .. m.len - n], m.buf[at + n .. m.len]);
        m.len -= n;
    }

    fn mutate(m: *Mutator, pool: []const []const u8) void {
        const rounds = 1 + m.random.uintLessThan(usize, if (m.random.boolean()) 2 else 8);
        for (0..rounds) |_| m.mutateOnce(pool);
    }

    /// One mutation, picked at random: one switch over every kind, each a few lines.
    fn mutateOnce(m: *Mutator, pool: []const []const u8) void {
        switch (m.random.uintLessThan(u8, 9)) {
            0 => if (m.len > 0) {
                m.buf[m.pos(false)] ^= @as(u8, 1) << m.random.int(u3);
            },
            1 => if (m.len > 0) {
                m.buf[m.pos(false)] = m.random.int(u8);
            },
            2 => m.insert(m.pos(true), &.{m.random.int(u8)}),
            3 => if (m.len > 0) {
                const at = m.pos(false);
                m.remove(at, 1 + m.random.uintLessThan(usize, 8));
            },
            4 => m.insert(m.pos(true), dictionary[m.random.uintLessThan(usize, dictionary.len)]),
            5 => if (m.len > 0) { // Repeat a chunk of the input.
                const start = m.pos(false);
                const count = @min(1 + m.random.uintLessThan(usize, 32), m.len - start);
                var chunk: [32]u8 = undefined;
                @memcpy(chunk[0..count], m.buf[start..][0..count]);
                for (0..1 + m.random.uintLessThan(usize, 16)) |_| m.insert(start, chunk[0..count]);
            },
            6 => { // Splice: a piece of another input, inserted or overwriting the tail.
                const other = pool[m.random.uintLessThan(usize, pool.len)];
                if (other.len == 0) return;
                const start = m.random.uintLessThan(usize, other.len);
                const count = @min(other.len - start, 1 + m.random.uintLessThan(usize, 256));
                const at = m.pos(true);
                if (m.random.boolean()) m.len = at;
                m.insert(at, other[start..][0..count]);
            },
            7 => if (m.len > 0) { // Truncate.
                m.len = m.pos(false);
            },
            8 => if (m.len > 0) { // A small increment or decrement (lengths, indexes).
                const at = m.pos(false);
                m.buf[at] +%= if (m.random.boolean()) 1 else 0xff;
            },
            else => unreachable,
        }
    }
};

// ---------------------------------------------------------------------------------------
// Driver.

const Args = struct {
    seconds: f64 = 10,
    seed: ?u64 = null,
    out: []const u8 = "fuzz-crash.bin",
    max_len: usize = 2048,
    pool_max: usize = 4096,
};

fn usage() noreturn {
    std.debug.print("usage: fuzz_http3 [--seconds N] [--seed S] [--out PATH] [--max-len N]\n", .{});
    std.process.exit(2);
}

fn parseArgs(argv: []const [:0]u8) Args {
    var args = Args{};
    var index: usize = 1;
    while (index < argv.len) : (index += 1) {
        const name = argv[index];
        if (index + 1 >= argv.len) usage();
        index += 1;
        const value = argv[index];
        if (std.mem.eql(u8, name, "--seconds")) {
            args.seconds = std.fmt.parseFloat(f64, value) catch usage();
        } else if (std.mem.eql(u8, name, "--seed")) {
            args.seed = std.fmt.parseInt(u64, value, 0) catch usage();
        } else if (std.mem.eql(u8, name, "--out")) {
            args.out = value;
        } else if (std.mem.eql(u8, name, "--max-len")) {
            args.max_len = std.fmt.parseInt(usize, value, 0) catch usage();
            args.max_len = @max(1, @min(args.max_len, fuzz.max_input_bytes));
        } else usage();
    }
    return args;
}

fn runOne(input: []const u8) void {
    current_input = input;
    fuzz.checkOne(input, .sampled) catch {
        saveCrash("an invariant violation");
        std.debug.print("fuzz: violated: {s}\n", .{fuzz.last_failure});
        std.process.exit(1);
    };
}

pub fn main() !void {
    installSignalHandlers();
    var arena_state = std.heap.ArenaAllocator.init(std.heap.page_allocator);
    defer arena_state.deinit();
    const arena = arena_state.allocator();

    const args = parseArgs(try std.process.argsAlloc(arena));
    crash_path = args.out;
    const seed = args.seed orelse @as(u64, @truncate(@as(u128, @bitCast(std.time.nanoTimestamp()))));
    std.debug.print("fuzz: seed {d}, {d} corpus inputs, {d:.1}s, max input {d} bytes\n", .{ seed, fuzz.corpus.len, args.seconds, args.max_len });

    var prng = std.Random.DefaultPrng.init(seed);
    const random = prng.random();
    var pool: std.ArrayList([]const u8) = .empty;
    var seen = fuzz.Features.initEmpty();
    var timer = try std.time.Timer.start();

    // The corpus itself first: any failure there is a regression.
    for (fuzz.corpus) |input| {
        runOne(input);
        try pool.append(arena, input);
        seen.setUnion(fuzz.features);
    }
    const corpus_len = pool.items.len;

    const buf = try arena.alloc(u8, args.max_len);
    var mutator = Mutator{ .random = random, .buf = buf, .max_len = args.max_len };
    const budget_ns: u64 = @intFromFloat(@max(args.seconds, 0) * std.time.ns_per_s);
    var iterations: u64 = 0;
    var added: u64 = 0;
    while (true) : (iterations += 1) {
        if (iterations % 16 == 0 and timer.read() >= budget_ns) break;
        const parent = pool.items[random.uintLessThan(usize, pool.items.len)];
        mutator.len = @min(parent.len, args.max_len);
        @memcpy(buf[0..mutator.len], parent[0..mutator.len]);
        mutator.mutate(pool.items);
        const input = buf[0..mutator.len];
        runOne(input);

        if (!fuzz.features.differenceWith(seen).eql(fuzz.Features.initEmpty())) {
            seen.setUnion(fuzz.features);
            const copy = try arena.dupe(u8, input);
            added += 1;
            if (pool.items.len < args.pool_max) {
                try pool.append(arena, copy);
            } else {
                // Keep the corpus; replace a random discovered input.
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
