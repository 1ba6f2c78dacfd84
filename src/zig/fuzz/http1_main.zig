//! Time-bounded mutation fuzzer for the HTTP/1.1 parser (`testing/fuzz_http1.zig`); the CI runner.
//!
//!   python -m ziglang build-exe -OReleaseSafe ... (docs/FUZZING.md) -femit-bin=fuzz_http1
//!   ./fuzz_http1 --seconds 60 [--seed S] [--out fuzz-crash.bin] [--max-len 4096]
//!
//! Starts from the checked-in corpus (`fuzz_corpus/`), applies stacked mutations, and runs
//! `fuzz.checkOne` (the same checks as the `std.testing.fuzz` target). Inputs that set a
//! behavioural feature bit not seen before (`fuzz.features`) join the pool
//! (`runner.runPool`). ReleaseSafe keeps every safety check, so an overflow, out-of-bounds
//! index or `unreachable` in the parser panics: the panic handler (`runner.zig`) writes the
//! input being checked to `--out` first. An invariant violation is saved the same way.
//! Exit status: 0 clean, 1 invariant violated, abort/signal on panic.
//!
//! (Zig 0.15's coverage-guided `zig build --fuzz` runs until interrupted behind a web UI,
//! so it is not used for time-bounded CI runs.)

const std = @import("std");
const fuzz = @import("engine").fuzz_http1;
const runner = @import("runner.zig");

pub const panic = runner.panic;
pub const std_options = runner.std_options;

// ---------------------------------------------------------------------------------------
// Mutations.

const interesting_bytes = "\r\n \t:,;=\"\\/?%#*@0123456789abcdefABCDEFxX-+" ++
    "\x00\x01\x0b\x0c\x7f\x80\xff";

const dictionary = [_][]const u8{
    "\r\n",                   "\r\n\r\n",                "\n",
    "\r",                     " ",                       "\t",
    ":",                      ", ",                      "Transfer-Encoding: chunked\r\n",
    "Content-Length: 5\r\n",  "Host: h\r\n",             "Connection: close\r\n",
    "Transfer-Encoding",      "Content-Length",          "chunked",
    "Chunked",                "identity",                "gzip",
    "keep-alive",             "upgrade",                 "Expect: 100-continue\r\n",
    "Upgrade: websocket\r\n", "Connection: upgrade\r\n", "GET / HTTP/1.1\r\n",
    "POST / HTTP/1.1\r\n",    "HTTP/1.1",                "HTTP/1.0",
    "HTTP/2.0",               "CONNECT h:1 ",            "OPTIONS * ",
    "http://h",               "https://",                "0\r\n\r\n",
    "5\r\nhello\r\n",         "ffffffffffffffff",        "fffffffffffffffff",
    "18446744073709551615",   "18446744073709551616",    "9999999999999999999",
    "00000000000000000000",   "-1",                      "+1",
    "0x",                     ";ext=\"v\"",              ";",
    "\r\n ",                  "\r\n\t",                  "%",
    "%zz",                    "%2F",                     "%C3%A9",
    "\x0b",                   "\x00",                    "\x7f",
    "\xff",
};

const Mutator = runner.Mutator;

fn smallLen(m: *Mutator) usize {
    // Mostly short, sometimes long.
    const most: usize = if (m.random.uintLessThan(u8, 8) == 0) 256 else 8;
    return 1 + m.random.uintLessThan(usize, most);
}

/// One mutation, picked at random: long because it is one switch over every kind
/// (flips, splices, inserted tokens...), each a few lines, best read side by side.
fn mutateOnce(m: *Mutator, pool: []const []const u8) void {
    switch (m.random.uintLessThan(u8, 13)) {
        0 => if (m.len > 0) {
            m.buf[m.pos(false)] ^= @as(u8, 1) << m.random.int(u3);
        },
        1 => if (m.len > 0) {
            m.buf[m.pos(false)] = m.random.int(u8);
        },
        2 => if (m.len > 0) {
            m.buf[m.pos(false)] = interesting_bytes[
                m.random.uintLessThan(
                    usize,
                    interesting_bytes.len,
                )
            ];
        },
        3 => {
            const pick = m.random.uintLessThan(usize, interesting_bytes.len);
            const byte = if (m.random.boolean()) m.random.int(u8) else interesting_bytes[pick];
            m.insert(m.pos(true), &.{byte});
        },
        4 => if (m.len > 0) {
            const at = m.pos(false);
            m.remove(at, smallLen(m));
        },
        5 => m.insert(m.pos(true), dictionary[m.random.uintLessThan(usize, dictionary.len)]),
        6 => if (m.len > 0) { // Repeat a chunk of the input.
            const start = m.pos(false);
            const count = @min(smallLen(m), m.len - start);
            var chunk: [256]u8 = undefined;
            @memcpy(chunk[0..count], m.buf[start..][0..count]);
            const times = 1 + m.random.uintLessThan(usize, if (m.random.boolean()) 2 else 64);
            for (0..times) |_| m.insert(start, chunk[0..count]);
        },
        7, 8 => { // Splice: a piece of another input, inserted or overwriting the tail.
            const other = pool[m.random.uintLessThan(usize, pool.len)];
            if (other.len == 0) return;
            const start = m.random.uintLessThan(usize, other.len);
            const count = @min(other.len - start, 1 + m.random.uintLessThan(usize, 512));
            const at = m.pos(true);
            if (m.random.boolean()) m.len = at;
            m.insert(at, other[start..][0..count]);
        },
        9 => if (m.len > 0) { // Truncate.
            m.len = m.pos(false);
        },
        10 => { // Swap CRLF for a bare CR or LF, or vice versa.
            if (m.len < 2) return;
            const at = m.pos(false);
            if (std.mem.indexOfPos(u8, m.buf[0..m.len], at, "\r\n")) |crlf| {
                m.remove(crlf + @intFromBool(m.random.boolean()), 1);
            } else if (std.mem.indexOfAnyPos(u8, m.buf[0..m.len], at, "\r\n")) |lone| {
                m.insert(lone, if (m.buf[lone] == '\n') "\r" else "\n");
            }
        },
        11 => if (m.len > 0) { // Replace a digit run by an interesting number.
            const at = m.pos(false);
            const start = std.mem.indexOfAnyPos(
                u8,
                m.buf[0..m.len],
                at,
                "0123456789abcdefABCDEF",
            ) orelse return;
            var end = start;
            while (end < m.len and std.ascii.isHex(m.buf[end])) end += 1;
            m.remove(start, end - start);
            const numbers = [_][]const u8{
                "0",
                "1",
                "00",
                "7fffffffffffffff",
                "ffffffffffffffff",
                "10000000000000000",
                "18446744073709551615",
                "18446744073709551616",
                "99999999999999999999",
                "-0",
                "+0",
                "1e3",
                "0x10",
            };
            m.insert(start, numbers[m.random.uintLessThan(usize, numbers.len)]);
        },
        12 => if (m.len > 0) { // Flip the case of a letter (header names, "chunked", ...).
            const at = m.pos(false);
            if (std.ascii.isAlphabetic(m.buf[at])) m.buf[at] ^= 0x20;
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
    try runner.poolMain(fuzz, "fuzz_http1", .{ .max_len = 4096 }, 64, check, mutate);
}
