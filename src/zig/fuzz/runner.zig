//! What the time-bounded fuzzers (`*_main.zig` here, built as executables) share: the
//! failing case saved on a panic, a fatal signal, a hang or a violated invariant, and their
//! command-line arguments. A main hands its root declarations over:
//!
//!     pub const panic = runner.panic;
//!     pub const std_options = runner.std_options;
//!
//! ReleaseSafe keeps every safety check, so an overflow, out-of-bounds index or
//! `unreachable` panics, and the panic handler saves the case before the report.
const std = @import("std");

pub const panic = std.debug.FullPanic(onPanic);
/// std's own handler is chained after ours (`onSignal`), not installed in its place.
pub const std_options: std.Options = .{ .enable_segfault_handler = false };

/// The input under test, for the panic and signal handlers.
pub var current_input: []const u8 = &.{};
/// Where the failing case goes (`--out`).
pub var out_path: []const u8 = "fuzz-crash.bin";
/// How the failing case is saved: the input itself by default; a fuzzer that replays from
/// a seed (HTTP/2's) writes its seeds instead.
pub var save: *const fn (reason: []const u8) void = saveInput;
var saving = false;

/// Saves the failing case once: a panic while saving gives up on the file, keeps the report.
pub fn fail(reason: []const u8) void {
    if (saving) return;
    saving = true;
    save(reason);
}

/// Writes `current_input` to `out_path` and shows it (its first 4 KiB) escaped.
pub fn saveInput(reason: []const u8) void {
    std.fs.cwd().writeFile(.{ .sub_path = out_path, .data = current_input }) catch |err| {
        std.debug.print("fuzz: could not write {s}: {s}\n", .{ out_path, @errorName(err) });
    };
    const shown = current_input[0..@min(current_input.len, 4096)];
    const cut = if (shown.len < current_input.len) " (truncated)" else "";
    std.debug.print(
        "\nfuzz: FOUND {s}\nfuzz: input ({d} bytes) written to {s}\nfuzz: input = \"{f}\"{s}\n",
        .{ reason, current_input.len, out_path, std.zig.fmtString(shown), cut },
    );
}

/// An invariant violated by the current case: saved, `detail` shown, exit status 1.
pub fn violated(detail: []const u8) noreturn {
    fail("an invariant violation");
    std.debug.print("fuzz: violated: {s}\n", .{detail});
    std.process.exit(1);
}

fn onPanic(msg: []const u8, first_trace_addr: ?usize) noreturn {
    fail("a panic");
    std.debug.defaultPanic(msg, first_trace_addr);
}

fn onSignal(sig: i32, info: *const std.posix.siginfo_t, ctx: ?*anyopaque) callconv(.c) void {
    _ = info;
    _ = ctx;
    fail(switch (sig) {
        std.posix.SIG.SEGV => "a segmentation fault",
        std.posix.SIG.ALRM => "a hang (the case ran past the watchdog: a spin?)",
        else => "a fatal signal",
    });
    if (sig == std.posix.SIG.ALRM) std.process.abort();
    // Returning re-executes the faulting instruction; std's handler then prints the trace.
    std.debug.attachSegfaultHandler();
}

/// Fatal signals save the case first. With `watchdog`, SIGALRM too: a case that runs past
/// the `alarm` its fuzzer sets is a hang.
pub fn installSignalHandlers(watchdog: bool) void {
    const act = std.posix.Sigaction{
        .handler = .{ .sigaction = onSignal },
        .mask = std.posix.sigemptyset(),
        .flags = std.posix.SA.SIGINFO | std.posix.SA.RESETHAND,
    };
    std.debug.updateSegfaultHandler(&act);
    if (watchdog) std.posix.sigaction(std.posix.SIG.ALRM, &act, null);
}

/// The fuzzer's arguments as `Args`, from `defaults`: each field `some_name` is the option
/// `--some-name VALUE`, a number, a string or a 0/1 switch. Anything else prints
/// `usage_line` and exits with status 2.
pub fn parseArgs(
    comptime Args: type,
    defaults: Args,
    argv: []const [:0]u8,
    usage_line: []const u8,
) Args {
    var args = defaults;
    var index: usize = 1;
    while (index < argv.len) : (index += 2) {
        if (index + 1 >= argv.len) usage(usage_line);
        const name = argv[index];
        const value = argv[index + 1];
        const known = inline for (@typeInfo(Args).@"struct".fields) |f| {
            if (std.mem.eql(u8, name, comptime optionName(f.name))) {
                @field(args, f.name) = parseValue(f.type, value) orelse usage(usage_line);
                break true;
            }
        } else false;
        if (!known) usage(usage_line);
    }
    return args;
}

fn optionName(comptime field: []const u8) []const u8 {
    var name: [field.len + 2]u8 = undefined;
    @memcpy(name[0..2], "--");
    for (field, 2..) |c, i| name[i] = if (c == '_') '-' else c;
    const final = name;
    return &final;
}

fn parseValue(comptime T: type, value: []const u8) ?T {
    const Plain = switch (@typeInfo(T)) {
        .optional => |o| o.child,
        else => T,
    };
    if (Plain == []const u8) return value;
    if (Plain == bool) {
        if (std.mem.eql(u8, value, "1")) return true;
        if (std.mem.eql(u8, value, "0")) return false;
        return null;
    }
    return switch (@typeInfo(Plain)) {
        .float => std.fmt.parseFloat(Plain, value) catch null,
        .int => std.fmt.parseInt(Plain, value, 0) catch null,
        else => @compileError("no parser for " ++ @typeName(Plain)),
    };
}

fn usage(line: []const u8) noreturn {
    std.debug.print("usage: {s}\n", .{line});
    std.process.exit(2);
}

/// `--seed` when given, else one from the clock (printed by the fuzzer, to replay a run).
pub fn seedOr(seed: ?u64) u64 {
    return seed orelse @as(u64, @truncate(@as(u128, @bitCast(std.time.nanoTimestamp()))));
}

/// `--seconds` as a budget in nanoseconds; a negative value is no time at all.
pub fn budgetNs(seconds: f64) u64 {
    return @intFromFloat(@max(seconds, 0) * std.time.ns_per_s);
}

/// The last line of a clean mutation run.
pub fn printDone(iterations: u64, elapsed_ns: u64, bits: usize, kept: u64, pooled: usize) void {
    const elapsed_s = @as(f64, @floatFromInt(elapsed_ns)) / std.time.ns_per_s;
    const rate = @as(f64, @floatFromInt(iterations)) / elapsed_s;
    std.debug.print(
        "fuzz: OK: {d} iterations in {d:.1}s ({d:.0} iterations/s), {d} feature bits, " ++
            "{d} inputs kept, {d} in pool\n",
        .{ iterations, elapsed_s, rate, bits, kept, pooled },
    );
}

pub const Pool = struct {
    seconds: f64,
    seed: u64,
    /// The longest input a mutation makes.
    max_len: usize,
    /// Inputs kept at most (the corpus plus discoveries; past it a discovery replaces one).
    pool_max: usize = 4096,
    /// Iterations between looks at the clock.
    clock_every: u64 = 64,
};

/// The mutation loop of the time-bounded fuzzers. `Target` (the fuzz target's file) has
/// `corpus`, `Features` and `features` (the bits the last input set). The corpus runs
/// first (a failure there is a regression), then inputs mutated from the pool until the
/// time is up; one that sets a feature bit not seen before joins the pool.
pub fn runPool(
    comptime Target: type,
    arena: std.mem.Allocator,
    opts: Pool,
    check: *const fn (input: []const u8) void,
    mutate: *const fn (std.Random, buf: []u8, len: usize, pool: []const []const u8) usize,
) !void {
    var prng = std.Random.DefaultPrng.init(opts.seed);
    const random = prng.random();
    var pool: std.ArrayList([]const u8) = .empty;
    var seen = Target.Features.initEmpty();
    var timer = try std.time.Timer.start();

    for (Target.corpus) |input| {
        current_input = input;
        check(input);
        try pool.append(arena, input);
        seen.setUnion(Target.features);
    }
    const corpus_len = pool.items.len;

    const buf = try arena.alloc(u8, opts.max_len);
    const budget_ns = budgetNs(opts.seconds);
    var iterations: u64 = 0;
    var added: u64 = 0;
    while (true) : (iterations += 1) {
        if (iterations % opts.clock_every == 0 and timer.read() >= budget_ns) break;
        const parent = pool.items[random.uintLessThan(usize, pool.items.len)];
        const start_len = @min(parent.len, buf.len);
        @memcpy(buf[0..start_len], parent[0..start_len]);
        const input = buf[0..mutate(random, buf, start_len, pool.items)];
        current_input = input;
        check(input);

        if (!Target.features.differenceWith(seen).eql(Target.Features.initEmpty())) {
            seen.setUnion(Target.features);
            const copy = try arena.dupe(u8, input);
            added += 1;
            if (pool.items.len < opts.pool_max) {
                try pool.append(arena, copy);
            } else {
                // Keep the corpus; replace a random discovered input.
                const discovered = pool.items.len - corpus_len;
                pool.items[corpus_len + random.uintLessThan(usize, discovered)] = copy;
            }
        }
    }
    printDone(iterations, timer.read(), seen.count(), added, pool.items.len);
}

/// A mutation fuzzer's arguments.
pub const PoolArgs = struct {
    seconds: f64 = 10,
    seed: ?u64 = null,
    out: []const u8 = "fuzz-crash.bin",
    max_len: usize = 4096,
    pool_max: usize = 4096,
};

/// The whole `main` of a mutation fuzzer over `Target` (which also has `max_input_bytes`):
/// its arguments (from `defaults`), its seed, then `runPool`.
pub fn poolMain(
    comptime Target: type,
    comptime name: []const u8,
    defaults: PoolArgs,
    clock_every: u64,
    check: *const fn (input: []const u8) void,
    mutate: *const fn (std.Random, buf: []u8, len: usize, pool: []const []const u8) usize,
) !void {
    installSignalHandlers(false);
    var arena_state = std.heap.ArenaAllocator.init(std.heap.page_allocator);
    defer arena_state.deinit();
    const arena = arena_state.allocator();

    const argv = try std.process.argsAlloc(arena);
    const usage_line = name ++ " [--seconds N] [--seed S] [--out PATH] [--max-len N]";
    var args = parseArgs(PoolArgs, defaults, argv, usage_line);
    args.max_len = @max(1, @min(args.max_len, Target.max_input_bytes));
    out_path = args.out;
    const seed = seedOr(args.seed);
    std.debug.print(
        "fuzz: seed {d}, {d} corpus inputs, {d:.1}s, max input {d} bytes\n",
        .{ seed, Target.corpus.len, args.seconds, args.max_len },
    );
    try runPool(Target, arena, .{
        .seconds = args.seconds,
        .seed = seed,
        .max_len = args.max_len,
        .pool_max = args.pool_max,
        .clock_every = clock_every,
    }, check, mutate);
}

/// An input being mutated in place: the edits the mutation fuzzers' own kinds are made of.
pub const Mutator = struct {
    random: std.Random,
    buf: []u8,
    len: usize = 0,
    max_len: usize,

    /// A position in the input (`inclusive_end`: the end too, to insert there).
    pub fn pos(m: *Mutator, inclusive_end: bool) usize {
        const n = m.len + @intFromBool(inclusive_end);
        return if (n == 0) 0 else m.random.uintLessThan(usize, n);
    }

    /// Inserts what fits of `bytes` at `at`.
    pub fn insert(m: *Mutator, at: usize, bytes: []const u8) void {
        const take = @min(bytes.len, m.max_len - m.len);
        if (take == 0) return;
        std.mem.copyBackwards(u8, m.buf[at + take .. m.len + take], m.buf[at..m.len]);
        @memcpy(m.buf[at..][0..take], bytes[0..take]);
        m.len += take;
    }

    pub fn remove(m: *Mutator, at: usize, count: usize) void {
        const n = @min(count, m.len - at);
        std.mem.copyForwards(u8, m.buf[at .. m.len - n], m.buf[at + n .. m.len]);
        m.len -= n;
    }
};

/// 1 to 8 mutations by `once` stacked on `buf[0..len]` (mostly 1 or 2); the new length.
pub fn stacked(
    random: std.Random,
    buf: []u8,
    len: usize,
    pool: []const []const u8,
    comptime once: fn (*Mutator, []const []const u8) void,
) usize {
    var m = Mutator{ .random = random, .buf = buf, .len = len, .max_len = buf.len };
    const rounds = 1 + random.uintLessThan(usize, if (random.boolean()) 2 else 8);
    for (0..rounds) |_| once(&m, pool);
    return m.len;
}
