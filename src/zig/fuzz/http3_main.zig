//! Time-bounded mutation fuzzer for HTTP/3's wire layer (`testing/fuzz_http3.zig`: the
//! frame reader and the QPACK decoder); the CI runner.
//!
//!   python -m ziglang build-exe -OReleaseSafe ... (docs/FUZZING.md) -femit-bin=fuzz_http3
//!   ./fuzz_http3 --seconds 60 [--seed S] [--out fuzz-crash.bin] [--max-len 2048]
//!
//! As `http1_main.zig`: starts from the target's corpus, applies stacked mutations
//! (bit flips, varints and frame headers of interesting sizes, QPACK prefix integers,
//! splices), runs `fuzz.checkOne`, and keeps inputs that set a feature bit not seen before.
//! ReleaseSafe keeps every safety check; a panic, a fatal signal or a violated invariant
//! writes the input to `--out` first. Exit status: 0 clean, 1 invariant violated,
//! abort/signal on panic.
const std = @import("std");
const fuzz = @import("engine").fuzz_http3;
const runner = @import("runner.zig");

pub const panic = runner.panic;
pub const std_options = runner.std_options;

// ---------------------------------------------------------------------------------------
// Mutations.

/// Frame headers, stream types, varints at their length boundaries, QPACK instructions and
/// prefix integers at theirs.
const dictionary = [_][]const u8{
    "\x00",
    "\x01",
    "\x02",
    "\x03",
    "\x04",
    "\x07",
    "\x0d",
    "\x21",
    "\x3f",
    "\x40",
    "\x7f",
    "\x80",
    "\xff",
    "\x40\x00",
    "\x7f\xff",
    "\x80\x00\x00\x00",
    "\xbf\xff\xff\xff",
    "\xc0\x00\x00\x00\x00\x00\x00\x00",
    "\xff\xff\xff\xff\xff\xff\xff\xff",
    "\x01\x00",
    "\x00\x00",
    "\x04\x00",
    "\x07\x01\x00",
    "\x01\x41\x00",
    "\x00\x40\x46",
    "\x5f\x01",
    "\x3f\xbd\x01",
    "\x20",
    "\x3f\xe1\x1f",
    "\xc0\x00",
    "\x4a",
    "\x00\x00",
    "\x03\x81",
    "\x05\x00",
    "\x10",
    "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
    "\x84",
    "\x48",
    "\x8c\xf1\xe3\xc2\xe5\xf2\x3a\x6b\xa0\xab\x90\xf4\xff",
};

const Mutator = runner.Mutator;

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

// ---------------------------------------------------------------------------------------
// Driver.

fn check(input: []const u8) void {
    fuzz.checkOne(input, .sampled) catch runner.violated(fuzz.last_failure);
}

fn mutate(random: std.Random, buf: []u8, len: usize, pool: []const []const u8) usize {
    return runner.stacked(random, buf, len, pool, mutateOnce);
}

pub fn main() !void {
    try runner.poolMain(fuzz, "fuzz_http3", .{ .max_len = 2048 }, 16, check, mutate);
}
