//! libFuzzer's entry points for the QUIC connection fuzzer (`testing/fuzz_quic_conn.zig`):
//! a real handshake, then fuzzed frame sequences, timers and transport parameters against
//! one server Connection per input. Built as an object with Zig's coverage instrumentation
//! and linked with clang's libFuzzer (docs/FUZZING.md):
//!
//!   python -m ziglang build-obj -lc -fcompiler-rt -femit-bin=fuzz_quic_conn.o \
//!       $F --dep engine -Mroot=src/zig/fuzz/quic_conn_main.zig $F -Mengine=src/zig/engine.zig
//!   (F: -OReleaseSafe -ffuzz -fPIC -fno-stack-check, per module; docs/FUZZING.md)
//!   clang -fsanitize=fuzzer fuzz_quic_conn.o -o fuzz_quic_conn
//!   ./fuzz_quic_conn -max_total_time=60 corpus/ src/zig/testing/fuzz_corpus/quic_conn
//!
//! A panic (ReleaseSafe keeps every safety check) aborts: libFuzzer saves the input. An
//! invariant violation panics with `last_failure`. ZIGCORN_FUZZ_WRITE_SEEDS=DIR writes the
//! built-in seeds to DIR and exits.
const std = @import("std");
const engine = @import("engine");
const fuzz = engine.fuzz_quic_conn;
const support = engine.fuzz_support;

export fn LLVMFuzzerInitialize(argc: *c_int, argv: *[*][*:0]u8) c_int {
    _ = argc;
    _ = argv;
    support.registerCoverage();
    if (std.posix.getenv("ZIGCORN_FUZZ_WRITE_SEEDS")) |dir| {
        support.writeSeeds(dir, "quic_conn", &fuzz.seeds) catch |err| {
            std.debug.print("fuzz: writing seeds to {s}: {s}\n", .{ dir, @errorName(err) });
            std.process.exit(1);
        };
        std.process.exit(0);
    }
    fuzz.verbose = std.posix.getenv("ZIGCORN_FUZZ_VERBOSE") != null;
    if (std.posix.getenv("ZIGCORN_FUZZ_QUIC_MODE")) |m| {
        fuzz.mode = std.meta.stringToEnum(fuzz.Mode, m) orelse {
            std.debug.print("fuzz: ZIGCORN_FUZZ_QUIC_MODE is either, real or skipped\n", .{});
            std.process.exit(2);
        };
    }
    fuzz.setup() catch |err| {
        std.debug.print("fuzz: setup failed: {s}\n", .{@errorName(err)});
        std.process.exit(1);
    };
    fuzz.selfCheck() catch |err| {
        std.debug.print("fuzz: the harness's own handshake fails: {s}\n", .{@errorName(err)});
        std.process.exit(1);
    };
    return 0;
}

export fn LLVMFuzzerTestOneInput(data: [*]const u8, len: usize) c_int {
    fuzz.checkOne(data[0..len]) catch |err| switch (err) {
        error.Invariant => std.debug.panic("fuzz: invariant violated: {s}", .{fuzz.last_failure}),
        else => std.debug.panic("fuzz: harness failed: {s}", .{@errorName(err)}),
    };
    return 0;
}
