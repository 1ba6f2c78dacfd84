//! Time-bounded mutation fuzzer for QUIC's wire layer (`testing/fuzz_quic.zig`); the CI runner.
//!
//!   python -m ziglang build-exe -OReleaseSafe ... (docs/FUZZING.md) -femit-bin=fuzz_quic
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
const fuzz = @import("engine").fuzz_quic;
const runner = @import("runner.zig");

pub const panic = runner.panic;
pub const std_options = runner.std_options;

fn check(input: []const u8) void {
    fuzz.checkOne(input) catch runner.violated(fuzz.last_failure);
}

/// Stacked mutations of the target's own kinds (`fuzz.mutate`).
fn mutate(random: std.Random, buf: []u8, len: usize, pool: []const []const u8) usize {
    _ = pool;
    var n = len;
    const rounds = 1 + random.uintLessThan(usize, if (random.boolean()) 2 else 8);
    for (0..rounds) |_| n = fuzz.mutate(random, buf, n);
    return n;
}

pub fn main() !void {
    try runner.poolMain(fuzz, "fuzz_quic", .{ .max_len = fuzz.max_input_bytes }, 64, check, mutate);
}
