//! libFuzzer's entry points for the HTTP/3 session fuzzer (`testing/fuzz_h3_session.zig`):
//! http3/session.zig's Session over a fake QUIC transport or a real QUIC Connection (byte
//! 0's bit 3, or ZIGCORN_FUZZ_H3_TRANSPORT=fake or real), fuzzed control, QPACK and
//! request stream bytes and the application's answers. Built as the QUIC connection
//! fuzzer is (`quic_conn_main.zig`, docs/FUZZING.md):
//!
//!   python -m ziglang build-obj -lc -fcompiler-rt -femit-bin=fuzz_h3_session.o \
//!       $F --dep engine -Mroot=src/zig/fuzz/h3_session_main.zig $F -Mengine=src/zig/engine.zig
//!   (F: -OReleaseSafe -ffuzz -fPIC -fno-stack-check, per module; docs/FUZZING.md)
//!   clang -fsanitize=fuzzer fuzz_h3_session.o -o fuzz_h3_session
//!   ./fuzz_h3_session -max_total_time=60 corpus/ src/zig/testing/fuzz_corpus/h3_session
//!
//! A panic aborts (libFuzzer saves the input); an invariant violation panics with
//! `last_failure`. ZIGCORN_FUZZ_WRITE_SEEDS=DIR writes the built-in seeds and exits.
const std = @import("std");
const engine = @import("engine");
const fuzz = engine.fuzz_h3_session;
const support = engine.fuzz_support;

export fn LLVMFuzzerInitialize(argc: *c_int, argv: *[*][*:0]u8) c_int {
    _ = argc;
    _ = argv;
    support.registerCoverage();
    if (std.posix.getenv("ZIGCORN_FUZZ_WRITE_SEEDS")) |dir| {
        support.writeSeeds(dir, "h3_session", &fuzz.seeds) catch |err| {
            std.debug.print("fuzz: writing seeds to {s}: {s}\n", .{ dir, @errorName(err) });
            std.process.exit(1);
        };
        std.process.exit(0);
    }
    if (std.posix.getenv("ZIGCORN_FUZZ_H3_TRANSPORT")) |m| {
        fuzz.mode = std.meta.stringToEnum(fuzz.Mode, m) orelse {
            std.debug.print("fuzz: ZIGCORN_FUZZ_H3_TRANSPORT is either, fake or real\n", .{});
            std.process.exit(2);
        };
    }
    fuzz.selfCheck() catch |err| {
        const why = @errorName(err);
        std.debug.print("fuzz: no request reaches the session over QUIC: {s}\n", .{why});
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
