//! Fuzz target for the sans-IO HTTP/1.1 parser (`http/http1_parser.zig`).
//!
//! `checkOne` feeds one hostile input to `parseHead` and `ChunkedDecoder` under several
//! `Limits` and asserts the parser's contract: no panic (safety checks are on in every
//! build that runs this), bounded lengths, smuggling-relevant semantics of an accepted head,
//! and that splitting the same bytes into several reads never changes the outcome.
//!
//! Two runners share it:
//!   - `zig test src/zig/unit_tests.zig`: runs every file of `fuzz_corpus/` once (regression),
//!     through `std.testing.fuzz` (also usable with `zig build --fuzz` if a build.zig ever
//!     wires it up), and checks each file's expected first outcome.
//!   - `fuzz/http1_main.zig`: a time-bounded mutation fuzzer for CI.

const std = @import("std");
const builtin = @import("builtin");
const http1 = @import("../http/http1_parser.zig");
const http_fields = @import("../http/fields.zig");

const Limits = http1.Limits;
const Header = http1.Header;
const Head = http1.Head;
const ParseError = http1.ParseError;

/// Longer inputs are truncated: the head window is 16 KiB and bodies add nothing new.
pub const max_input_bytes = 32 * 1024;

pub const Mode = enum {
    /// Every prefix and every two-read split (corpus regression: slow but thorough).
    exhaustive,
    /// A handful of input-derived split points (mutation fuzzing: fast).
    sampled,
};

pub const Failure = error{InvariantViolated};

/// Description of the last violated invariant (for the fuzz driver's report).
pub var last_failure: []const u8 = "";
/// Behavioural features of the last `checkOne` (outcomes, error kinds, framing, size
/// buckets). The mutation fuzzer keeps inputs that set a feature bit never seen before:
/// cheap feedback without coverage instrumentation.
pub const Features = std.StaticBitSet(1 << 16);
pub var features: Features = Features.initEmpty();
/// Features are recorded for the default and tiny limits only (the derived limits are
/// pseudo-random per input and would make every input look new).
var feature_context: ?u8 = null;

fn check(ok: bool, comptime what: []const u8) Failure!void {
    if (!ok) return fail(what);
}

fn fail(comptime what: []const u8) Failure {
    last_failure = what;
    if (builtin.is_test) std.debug.print("fuzz invariant violated: {s}\n", .{what});
    return error.InvariantViolated;
}

fn feature(comptime kind: u8, values: anytype) void {
    const context = feature_context orelse return;
    var hasher = std.hash.Wyhash.init(kind);
    hasher.update(&.{context});
    inline for (values) |value| {
        const v: u64 = value;
        hasher.update(std.mem.asBytes(&v));
    }
    features.set(@intCast(hasher.final() % Features.bit_length));
}

fn log2Bucket(value: u64) u64 {
    return 64 - @clz(value);
}

// ---------------------------------------------------------------------------------------
// Corpus.

/// What the stream does under default limits: `ok` = every pipelined request (and body)
/// parsed and the input fully consumed; `incomplete` = a head or body is still waiting for
/// bytes; otherwise the first error, from the head (`bad_request`, ...) or a chunked body.
pub const Expect = enum {
    ok,
    incomplete,
    bad_request,
    uri_too_long,
    headers_too_large,
    version_not_supported,
    not_implemented,
    chunked_bad_request,
    chunked_headers_too_large,
};

pub const CorpusEntry = struct { name: []const u8, expect: Expect };

/// Every file of `fuzz_corpus/` (Zig cannot list a directory at comptime; a test checks
/// that this list and the directory agree when run from the repository root).
pub const corpus_entries = [_]CorpusEntry{
    .{ .name = "valid_get", .expect = .ok },
    .{ .name = "valid_post_content_length", .expect = .ok },
    .{ .name = "valid_chunked_body", .expect = .ok },
    .{ .name = "valid_chunked_trailers", .expect = .ok },
    .{ .name = "valid_chunked_extensions", .expect = .ok },
    .{ .name = "valid_chunked_hex_sizes", .expect = .ok },
    .{ .name = "valid_http10_keep_alive", .expect = .ok },
    .{ .name = "valid_http10_no_host", .expect = .ok },
    .{ .name = "valid_expect_continue", .expect = .ok },
    .{ .name = "valid_upgrade_websocket", .expect = .ok },
    .{ .name = "valid_header_value_obs_text", .expect = .ok },
    .{ .name = "valid_header_value_ows_trimmed", .expect = .ok },
    .{ .name = "valid_leading_empty_lines", .expect = .ok },
    .{ .name = "valid_percent_encoded_target", .expect = .ok },
    .{ .name = "valid_connection_close_multiple", .expect = .ok },
    .{ .name = "cl_duplicate_same", .expect = .bad_request },
    .{ .name = "cl_list_same", .expect = .bad_request },
    .{ .name = "cl_max_19_digits", .expect = .incomplete },
    .{ .name = "absolute_form_target", .expect = .ok },
    .{ .name = "absolute_form_no_path", .expect = .ok },
    .{ .name = "authority_form_connect", .expect = .ok },
    .{ .name = "asterisk_form_options", .expect = .ok },
    .{ .name = "pipelined_get_get", .expect = .ok },
    .{ .name = "pipelined_post_cl_then_get", .expect = .ok },
    .{ .name = "pipelined_chunked_then_get", .expect = .ok },
    .{ .name = "pipelined_chunked_smuggle_payload", .expect = .incomplete },
    .{ .name = "pipelined_three_with_crlf_between", .expect = .ok },
    .{ .name = "te_cl_conflict", .expect = .bad_request },
    .{ .name = "cl_te_conflict", .expect = .bad_request },
    .{ .name = "cl_te_gzip_conflict", .expect = .bad_request },
    .{ .name = "cl_duplicate_different", .expect = .bad_request },
    .{ .name = "cl_list_different", .expect = .bad_request },
    .{ .name = "cl_list_trailing_comma", .expect = .bad_request },
    .{ .name = "cl_signed_plus", .expect = .bad_request },
    .{ .name = "cl_signed_minus", .expect = .bad_request },
    .{ .name = "cl_overflow", .expect = .bad_request },
    .{ .name = "cl_too_many_digits", .expect = .bad_request },
    .{ .name = "cl_hex", .expect = .bad_request },
    .{ .name = "cl_empty", .expect = .bad_request },
    .{ .name = "cl_space_inside", .expect = .bad_request },
    .{ .name = "te_chunked_capitalized", .expect = .ok },
    .{ .name = "te_chunked_identity", .expect = .not_implemented },
    .{ .name = "te_gzip_chunked", .expect = .not_implemented },
    .{ .name = "te_chunked_chunked", .expect = .not_implemented },
    .{ .name = "te_tab_before_value", .expect = .ok },
    .{ .name = "te_vertical_tab", .expect = .bad_request },
    .{ .name = "te_form_feed_prefix", .expect = .bad_request },
    .{ .name = "te_second_header", .expect = .bad_request },
    .{ .name = "te_space_before_colon", .expect = .bad_request },
    .{ .name = "te_tab_before_colon", .expect = .bad_request },
    .{ .name = "te_obs_fold_value", .expect = .bad_request },
    .{ .name = "te_http10", .expect = .bad_request },
    .{ .name = "te_quoted", .expect = .bad_request },
    .{ .name = "te_leading_comma", .expect = .bad_request },
    .{ .name = "te_parameter", .expect = .bad_request },
    .{ .name = "te_xchunked", .expect = .not_implemented },
    .{ .name = "te_empty", .expect = .bad_request },
    .{ .name = "chunk_size_non_hex", .expect = .chunked_bad_request },
    .{ .name = "chunk_size_0x_prefix", .expect = .chunked_bad_request },
    .{ .name = "chunk_size_negative", .expect = .chunked_bad_request },
    .{ .name = "chunk_size_empty", .expect = .chunked_bad_request },
    .{ .name = "chunk_size_overflow", .expect = .chunked_bad_request },
    .{ .name = "chunk_size_too_many_digits", .expect = .chunked_bad_request },
    .{ .name = "chunk_size_16_digits_max", .expect = .incomplete },
    .{ .name = "chunk_size_trailing_space", .expect = .chunked_bad_request },
    .{ .name = "chunk_size_bare_lf", .expect = .chunked_bad_request },
    .{ .name = "chunk_ext_long", .expect = .chunked_bad_request },
    .{ .name = "chunk_ext_bare_cr", .expect = .chunked_bad_request },
    .{ .name = "chunk_ext_nul", .expect = .chunked_bad_request },
    .{ .name = "chunk_data_too_long", .expect = .chunked_bad_request },
    .{ .name = "chunk_data_bare_lf", .expect = .chunked_bad_request },
    .{ .name = "chunk_trailer_obs_fold", .expect = .chunked_bad_request },
    .{ .name = "chunk_trailer_bare_lf", .expect = .chunked_bad_request },
    .{ .name = "chunk_trailer_space_before_colon", .expect = .chunked_bad_request },
    .{ .name = "chunk_trailer_too_large", .expect = .chunked_headers_too_large },
    .{ .name = "chunk_incomplete", .expect = .incomplete },
    .{ .name = "bare_cr_request_line", .expect = .bad_request },
    .{ .name = "bare_cr_header_value", .expect = .bad_request },
    .{ .name = "bare_cr_in_target", .expect = .bad_request },
    .{ .name = "bare_cr_head_end", .expect = .bad_request },
    .{ .name = "bare_lf_request_line", .expect = .bad_request },
    .{ .name = "bare_lf_header_end", .expect = .bad_request },
    .{ .name = "bare_lf_only", .expect = .bad_request },
    .{ .name = "bare_lf_leading", .expect = .bad_request },
    .{ .name = "obs_fold_header", .expect = .bad_request },
    .{ .name = "obs_fold_first_header", .expect = .bad_request },
    .{ .name = "leading_empty_lines_too_many", .expect = .bad_request },
    .{ .name = "method_invalid_token", .expect = .bad_request },
    .{ .name = "method_too_long", .expect = .bad_request },
    .{ .name = "method_empty", .expect = .bad_request },
    .{ .name = "request_line_double_space", .expect = .bad_request },
    .{ .name = "request_line_tab_separator", .expect = .bad_request },
    .{ .name = "header_name_invalid_char", .expect = .bad_request },
    .{ .name = "header_name_nul", .expect = .bad_request },
    .{ .name = "header_name_empty", .expect = .bad_request },
    .{ .name = "header_name_space_before_colon", .expect = .bad_request },
    .{ .name = "header_value_nul", .expect = .bad_request },
    .{ .name = "header_value_control_chars", .expect = .bad_request },
    .{ .name = "header_value_escape_seq", .expect = .bad_request },
    .{ .name = "target_nul", .expect = .bad_request },
    .{ .name = "target_del", .expect = .bad_request },
    .{ .name = "host_missing", .expect = .bad_request },
    .{ .name = "host_duplicate", .expect = .bad_request },
    .{ .name = "host_invalid_chars", .expect = .bad_request },
    .{ .name = "host_with_slash", .expect = .bad_request },
    .{ .name = "absolute_form_userinfo", .expect = .bad_request },
    .{ .name = "absolute_form_empty_host", .expect = .bad_request },
    .{ .name = "absolute_form_bad_scheme", .expect = .bad_request },
    .{ .name = "asterisk_form_not_options", .expect = .bad_request },
    .{ .name = "authority_form_not_connect", .expect = .bad_request },
    .{ .name = "connect_origin_form", .expect = .bad_request },
    .{ .name = "version_http2", .expect = .version_not_supported },
    .{ .name = "version_http12", .expect = .version_not_supported },
    .{ .name = "version_http09", .expect = .version_not_supported },
    .{ .name = "version_lowercase", .expect = .bad_request },
    .{ .name = "version_two_digit_minor", .expect = .bad_request },
    .{ .name = "version_missing", .expect = .bad_request },
    .{ .name = "target_too_long", .expect = .uri_too_long },
    .{ .name = "head_too_long", .expect = .headers_too_large },
    .{ .name = "too_many_headers", .expect = .headers_too_large },
    .{ .name = "incomplete_head", .expect = .incomplete },
    .{ .name = "empty_input", .expect = .incomplete },
};

pub const corpus: [corpus_entries.len][]const u8 = blk: {
    var files: [corpus_entries.len][]const u8 = undefined;
    for (corpus_entries, 0..) |entry, index| {
        files[index] = @embedFile("fuzz_corpus/" ++ entry.name ++ ".http");
    }
    break :blk files;
};

// ---------------------------------------------------------------------------------------
// Scratch storage (the checks run single-threaded; statics keep the stack small).

var head_buf: [max_input_bytes]u8 = undefined;
var prefix_buf: [max_input_bytes]u8 = undefined;
var headers_full: [128]Header = undefined;
var headers_prefix: [128]Header = undefined;
var data_buf: [max_input_bytes]u8 = undefined;
var decode_buf: [max_input_bytes + 64]u8 = undefined;
var reference_buf: [max_input_bytes]u8 = undefined;

const Config = struct { limits: Limits, storage_len: usize };

const default_config = Config{ .limits = http1.test_limits, .storage_len = 128 };
/// Every limit tiny, and less header storage than the limit allows.
const tiny_config = Config{
    .limits = .{
        .head_bytes_max = 64,
        .target_bytes_max = 16,
        .headers_count_max = 3,
        .chunk_ext_bytes_max = 4,
        .trailer_bytes_max = 16,
    },
    .storage_len = 2,
};

/// Limits around the input's own size, so that every "exactly at the limit" edge is hit.
fn derivedConfig(input: []const u8, hash: u64) Config {
    const len = input.len;
    const head_choices = [_]usize{ len -| 1, len, len + 1, @intCast(hash % (len + 2)) };
    return .{
        .limits = .{
            .head_bytes_max = head_choices[@intCast((hash >> 8) % head_choices.len)],
            .target_bytes_max = @intCast((hash >> 12) % 80),
            .headers_count_max = @intCast((hash >> 20) % 10),
            .chunk_ext_bytes_max = @intCast((hash >> 28) % 24),
            .trailer_bytes_max = @intCast((hash >> 36) % 96),
        },
        .storage_len = @intCast((hash >> 44) % 12),
    };
}

// ---------------------------------------------------------------------------------------
// Entry point.

pub fn checkOne(raw_input: []const u8, mode: Mode) Failure!void {
    const input = raw_input[0..@min(raw_input.len, max_input_bytes)];
    const hash = std.hash.Wyhash.hash(0x5eed, input);
    features = Features.initEmpty();

    for ([_]Config{ default_config, tiny_config, derivedConfig(input, hash) }, 0..) |config, index| {
        feature_context = if (index < 2) @intCast(index) else null;
        _ = try checkStream(input, config, mode, hash);
    }
    feature_context = null;
    try checkLimitsMonotone(input);
    try checkPercentDecode(input[0..@min(input.len, 2048)], hash);
}

/// Runs the stream the way the engine would: head, body (Content-Length or chunked), next
/// pipelined head... Returns the stream's outcome.
fn checkStream(input: []const u8, config: Config, mode: Mode, hash: u64) Failure!Expect {
    var requests: usize = 0;
    const outcome = try checkStreamRequests(input, config, mode, hash, &requests);
    feature('s', .{ @intFromEnum(outcome), @min(requests, 4) });
    return outcome;
}

fn checkStreamRequests(input: []const u8, config: Config, mode: Mode, hash: u64, requests_out: *usize) Failure!Expect {
    var offset: usize = 0;
    const requests = requests_out;
    requests.* = 0;
    while (requests.* < 16) : (requests.* += 1) {
        const rest = input[offset..];
        const head = switch (try checkHead(rest, config, mode, hash +% requests.*)) {
            .head => |head| head,
            .incomplete => {
                if (requests.* == 0) _ = try checkChunked(input, config.limits, mode, hash);
                return .incomplete;
            },
            .failed => |err| {
                if (requests.* == 0) _ = try checkChunked(input, config.limits, mode, hash);
                return expectFromHeadError(err);
            },
        };
        const body = rest[head.len..];
        if (head.request.chunked) {
            const decoded = try checkChunked(body, config.limits, mode, hash);
            switch (decoded) {
                .done => |consumed| offset += head.len + consumed,
                .need_more => return .incomplete,
                .failed => |err| return switch (err) {
                    error.HeadersTooLarge => .chunked_headers_too_large,
                    else => .chunked_bad_request,
                },
            }
        } else {
            // No-body request: decoding the rest as chunked still exercises the decoder.
            if (requests.* == 0) _ = try checkChunked(body, config.limits, mode, hash);
            const length = head.request.content_length orelse 0;
            if (length > body.len) return .incomplete;
            offset += head.len + @as(usize, @intCast(length));
        }
        if (offset == input.len) return .ok;
    }
    return .ok;
}

fn expectFromHeadError(err: ParseError) Expect {
    return switch (err) {
        error.BadRequest => .bad_request,
        error.UriTooLong => .uri_too_long,
        error.HeadersTooLarge => .headers_too_large,
        error.VersionNotSupported => .version_not_supported,
        error.NotImplemented => .not_implemented,
    };
}

// ---------------------------------------------------------------------------------------
// Request head.

fn parseCopy(dst: []u8, input: []const u8, storage: []Header, limits: Limits) ParseError!?Head {
    @memcpy(dst[0..input.len], input);
    return http1.parseHead(dst[0..input.len], storage, limits);
}

const HeadResult = union(enum) { head: Head, incomplete, failed: ParseError };

/// Parses `input` (copied into `head_buf`) and checks the result and its split-read
/// consistency. The returned head points into `head_buf`.
fn checkHead(input: []const u8, config: Config, mode: Mode, hash: u64) Failure!HeadResult {
    const limits = config.limits;
    const full = parseCopy(&head_buf, input, headers_full[0..config.storage_len], limits);
    if (full) |maybe_head| {
        if (maybe_head) |head| {
            try checkAcceptedHead(head, input, config);
        } else {
            // null only while the head limit has not been reached.
            try check(input.len < limits.head_bytes_max, "parseHead returned null at or past head_bytes_max");
        }
    } else |err| feature('e', .{@intFromError(err)});

    // Re-parsing the (now lower-cased) buffer gives the same result.
    const again = http1.parseHead(head_buf[0..input.len], headers_prefix[0..config.storage_len], limits);
    try check(sameResult(full, again), "re-parsing the same buffer changed the result");

    // The engine re-parses the grown buffer after every read: a prefix must return null
    // (more bytes needed) or exactly the final result. A full head of length L means every
    // prefix shorter than L is null and every prefix of at least L bytes is that head.
    switch (mode) {
        .exhaustive => {
            const step: usize = if (input.len <= 2048) 1 else input.len / 512;
            var split: usize = 0;
            while (split < input.len) : (split += step) try checkPrefix(input, split, full, config);
            if (full catch null) |head| {
                try checkPrefix(input, head.len - 1, full, config);
                try checkPrefix(input, head.len, full, config);
            }
        },
        .sampled => {
            const n = input.len;
            var points = [_]usize{ 0, n / 2, n -| 1, @intCast(hash % (n + 1)), @intCast((hash >> 24) % (n + 1)), n, n };
            if (full catch null) |head| {
                points[5] = head.len - 1;
                points[6] = head.len;
            }
            for (points) |split| try checkPrefix(input, @min(split, n), full, config);
        },
    }
    const maybe_head = full catch |err| return .{ .failed = err };
    return if (maybe_head) |head| .{ .head = head } else .incomplete;
}

fn checkPrefix(input: []const u8, split: usize, full: ParseError!?Head, config: Config) Failure!void {
    const prefix = parseCopy(&prefix_buf, input[0..split], headers_prefix[0..config.storage_len], config.limits);
    const maybe_full_head = full catch |full_err| {
        // A prefix of an erroneous input: null, or the very same error.
        if (prefix) |prefix_head| {
            try check(prefix_head == null, "a prefix of an erroneous input parsed a head");
        } else |err| try check(err == full_err, "a prefix failed with a different error than the whole input");
        return;
    };
    const full_head = maybe_full_head orelse {
        const prefix_head = prefix catch return fail("a prefix of an incomplete input failed");
        return check(prefix_head == null, "a prefix of an incomplete input parsed a head");
    };
    const prefix_head = prefix catch return fail("a prefix of a valid head failed");
    if (split < full_head.len) {
        try check(prefix_head == null, "a prefix shorter than the head parsed a head");
    } else {
        try check(prefix_head != null, "a prefix containing the whole head returned null");
        try check(sameHead(full_head, prefix_head.?), "a prefix containing the whole head parsed differently");
    }
}

fn sameResult(a: ParseError!?Head, b: ParseError!?Head) bool {
    const maybe_a = a catch |err_a| {
        const err_b = if (b) |_| return false else |err| err;
        return err_a == err_b;
    };
    const maybe_b = b catch return false;
    const head_a = maybe_a orelse return maybe_b == null;
    const head_b = maybe_b orelse return false;
    return sameHead(head_a, head_b);
}

fn eqlOpt(a: ?[]const u8, b: ?[]const u8) bool {
    if (a == null or b == null) return a == null and b == null;
    return std.mem.eql(u8, a.?, b.?);
}

/// Same head, compared by content (the two may live in different buffers).
fn sameHead(a: Head, b: Head) bool {
    const ra = a.request;
    const rb = b.request;
    if (a.len != b.len) return false;
    if (!std.mem.eql(u8, ra.method, rb.method) or !std.mem.eql(u8, ra.target, rb.target)) return false;
    if (!std.mem.eql(u8, ra.path, rb.path) or !std.mem.eql(u8, ra.query, rb.query)) return false;
    if (ra.version != rb.version or ra.content_length != rb.content_length) return false;
    if (ra.chunked != rb.chunked or ra.keep_alive != rb.keep_alive) return false;
    if (ra.expect_continue != rb.expect_continue) return false;
    if (!eqlOpt(ra.host, rb.host) or !eqlOpt(ra.upgrade, rb.upgrade)) return false;
    if (ra.headers.len != rb.headers.len) return false;
    for (ra.headers, rb.headers) |ha, hb| {
        if (!std.mem.eql(u8, ha.name, hb.name) or !std.mem.eql(u8, ha.value, hb.value)) return false;
    }
    return true;
}

fn isTchar(c: u8) bool {
    return std.ascii.isAlphanumeric(c) or std.mem.indexOfScalar(u8, "!#$%&'*+-.^_`|~", c) != null;
}

fn within(inner: []const u8, outer: []const u8) bool {
    const start = @intFromPtr(inner.ptr);
    return start >= @intFromPtr(outer.ptr) and start + inner.len <= @intFromPtr(outer.ptr) + outer.len;
}

/// An accepted head: bounded, and its framing semantics are the unambiguous ones.
/// Long because it is the parser's contract written out as one list of checks.
fn checkAcceptedHead(head: Head, input: []const u8, config: Config) Failure!void {
    const limits = config.limits;
    const r = head.request;
    const bytes = head_buf[0..head.len];
    try check(head.len <= input.len, "head.len > input length");
    try check(head.len <= limits.head_bytes_max, "head.len > head_bytes_max");
    try check(std.mem.endsWith(u8, bytes, "\r\n\r\n"), "head does not end with CRLFCRLF");
    // Line endings: every CR is followed by LF and every LF preceded by CR.
    for (bytes, 0..) |c, index| {
        if (c == '\r') try check(index + 1 < bytes.len and bytes[index + 1] == '\n', "bare CR in an accepted head");
        if (c == '\n') try check(index > 0 and bytes[index - 1] == '\r', "bare LF in an accepted head");
    }
    try check(r.headers.len <= @min(config.storage_len, limits.headers_count_max), "more headers than storage/limit");

    try check(r.method.len > 0 and r.method.len <= 32, "method length");
    for (r.method) |c| try check(isTchar(c), "non-token byte in method");
    try check(within(r.method, bytes) and within(r.target, bytes), "method/target not inside the head");
    try check(r.target.len > 0 and r.target.len <= limits.target_bytes_max, "target length");
    for (r.target) |c| try check(c > 0x20 and c < 0x7f, "non-visible byte in target");
    if (r.target[0] == '/') {
        try check(std.mem.startsWith(u8, r.target, r.path), "origin-form path is not a prefix of the target");
        if (r.path.len < r.target.len) {
            try check(r.target[r.path.len] == '?', "origin-form path not followed by '?'");
            try check(std.mem.eql(u8, r.target[r.path.len + 1 ..], r.query), "origin-form query mismatch");
        } else try check(r.query.len == 0, "query without '?'");
    }

    var host_headers: usize = 0;
    var te_headers: usize = 0;
    var te_chunked = false;
    var cl_headers: usize = 0;
    var close = false;
    var keep_alive = false;
    for (r.headers) |header| {
        try check(header.name.len > 0 and within(header.name, bytes), "empty header name");
        for (header.name) |c| try check(isTchar(c) and !std.ascii.isUpper(c), "header name byte not a lower-case token char");
        for (header.value) |c| try check(c == '\t' or (c >= 0x20 and c != 0x7f), "control byte in an accepted header value");
        if (header.value.len > 0) {
            try check(!isOws(header.value[0]) and !isOws(header.value[header.value.len - 1]), "header value not trimmed");
        }
        if (std.mem.eql(u8, header.name, "host")) host_headers += 1;
        if (std.mem.eql(u8, header.name, "transfer-encoding")) {
            te_headers += 1;
            te_chunked = std.ascii.eqlIgnoreCase(std.mem.trim(u8, header.value, " \t"), "chunked");
        }
        if (std.mem.eql(u8, header.name, "content-length")) {
            // One field of 1*DIGIT, no list (`fields.contentLength`).
            cl_headers += 1;
            const digits = header.value;
            try check(digits.len > 0 and digits.len <= 19, "accepted Content-Length length");
            for (digits) |c| try check(std.ascii.isDigit(c), "Content-Length, a non-digit");
            const value = std.fmt.parseInt(u64, digits, 10) catch
                return fail("accepted Content-Length does not fit u64");
            try check(r.content_length == value, "Content-Length disagrees with the parsed length");
        }
        if (std.mem.eql(u8, header.name, "connection")) {
            if (referenceConnectionHas(header.value, "close")) close = true;
            if (referenceConnectionHas(header.value, "keep-alive")) keep_alive = true;
        }
    }
    // Framing: at most one of chunked / Content-Length, and only a sole "chunked" TE.
    try check(host_headers <= 1, "several Host headers accepted");
    try check(te_headers <= 1, "several Transfer-Encoding headers accepted");
    try check(cl_headers <= 1, "several Content-Length headers accepted");
    try check((te_headers == 1) == r.chunked, "a Transfer-Encoding header accepted without chunked framing");
    try check(!r.chunked or te_chunked, "chunked framing without a sole 'chunked' coding");
    try check(!(r.chunked and r.content_length != null), "both chunked and Content-Length");
    try check((cl_headers > 0) == (r.content_length != null), "Content-Length header/value mismatch");
    switch (r.version) {
        .http11 => {
            try check(host_headers == 1 and r.host != null, "HTTP/1.1 request without exactly one Host");
            try check(r.keep_alive == !close, "HTTP/1.1 keep-alive mismatch");
        },
        .http10 => {
            try check(!r.chunked, "chunked HTTP/1.0 request");
            try check(r.keep_alive == (keep_alive and !close), "HTTP/1.0 keep-alive mismatch");
        },
    }
    const form: u64 = switch (r.target[0]) {
        '/' => 0,
        '*' => 1,
        else => if (r.path.len == 0) 2 else 3,
    };
    const length_bucket = if (r.content_length) |length| 1 + log2Bucket(length) else 0;
    feature('f', .{ @intFromEnum(r.version), @intFromBool(r.chunked), length_bucket, form });
    feature('h', .{ @min(r.headers.len, 8), @intFromBool(r.keep_alive), @intFromBool(r.upgrade != null), @intFromBool(r.expect_continue) });
    for (r.headers) |header| feature('n', .{std.hash.Wyhash.hash(0, header.name) % 64});
    if (r.host) |host| for (host) |c| try check(c > 0x20 and c < 0x7f and c != '/' and c != '@', "bad byte in host");
    for ([_][]const u8{ r.target, r.path, r.query }) |text| _ = try checkPercentDecodeOne(text, text.len);
}

fn isOws(c: u8) bool {
    return c == ' ' or c == '\t';
}

fn referenceConnectionHas(value: []const u8, token: []const u8) bool {
    var elements = std.mem.splitScalar(u8, value, ',');
    while (elements.next()) |element| {
        if (std.ascii.eqlIgnoreCase(std.mem.trim(u8, element, " \t"), token)) return true;
    }
    return false;
}

/// Tighter limits can only turn a success into an error, never change an accepted head.
fn checkLimitsMonotone(input: []const u8) Failure!void {
    const tight = parseCopy(&prefix_buf, input, headers_prefix[0..tiny_config.storage_len], tiny_config.limits);
    const maybe_tight_head = tight catch return;
    const tight_head = maybe_tight_head orelse return;
    const loose = parseCopy(&head_buf, input, headers_full[0..default_config.storage_len], default_config.limits);
    const maybe_loose_head = loose catch return fail("accepted under tiny limits, rejected under default limits");
    const loose_head = maybe_loose_head orelse return fail("accepted under tiny limits, incomplete under default limits");
    try check(sameHead(tight_head, loose_head), "tiny and default limits parsed different heads");
    // connectionHas agrees with a straightforward reference on real header values.
    for (loose_head.request.headers) |header| {
        for ([_][]const u8{ "close", "keep-alive", "upgrade", "", header.name }) |token| {
            const expected = token.len > 0 and referenceConnectionHas(header.value, token);
            try check(http_fields.connectionHas(header.value, token) == expected, "connectionHas disagrees with the reference");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Chunked body.

const Decoded = union(enum) {
    /// Consumed bytes up to and including the trailer section's final CRLF.
    done: usize,
    /// Everything consumed, more bytes needed.
    need_more,
    failed: ParseError,
};

const DecodeRun = struct { decoded: Decoded, data_len: usize };

fn sameDecoded(a: Decoded, b: Decoded) bool {
    return switch (a) {
        .done => |consumed| b == .done and b.done == consumed,
        .need_more => b == .need_more,
        .failed => |err| b == .failed and b.failed == err,
    };
}

/// Decodes `body` whole and in several split patterns; all must agree.
fn checkChunked(body: []const u8, limits: Limits, mode: Mode, hash: u64) Failure!Decoded {
    const whole = try decodePieces(body, limits, &.{body.len}, .record);
    feature('c', .{
        @intFromEnum(whole.decoded),
        if (whole.decoded == .failed) @intFromError(whole.decoded.failed) else 0,
        log2Bucket(whole.data_len),
        if (whole.decoded == .done) log2Bucket(whole.decoded.done - whole.data_len) else 0,
    });
    if (whole.decoded == .done) {
        const consumed = whole.decoded.done;
        try check(consumed >= 5 and std.mem.endsWith(u8, body[0..consumed], "\r\n\r\n"), "chunked body does not end with CRLFCRLF");
        try check(whole.data_len + 5 <= consumed, "more data than framing allows");
    }

    const n = body.len;
    const split_a: usize = @intCast(hash % (n + 1));
    const split_b: usize = @intCast((hash >> 32) % (n + 1));
    const patterns = [_][]const usize{
        &.{ split_a, n },
        &.{ split_b, 1, n },
        &.{ 1, 2, 3, 5, 8, 13 },
        &.{ 7, 1, 64 },
    };
    for (patterns) |pieces| try compareDecode(body, limits, pieces, whole);
    if (mode == .exhaustive or n <= 256) try compareDecode(body, limits, &.{1}, whole);
    if (mode == .exhaustive and n > 1 and n <= 1024) {
        for (1..n) |split| try compareDecode(body, limits, &.{ split, n }, whole);
    }
    return whole.decoded;
}

fn compareDecode(body: []const u8, limits: Limits, pieces: []const usize, whole: DecodeRun) Failure!void {
    const split = try decodePieces(body, limits, pieces, .compare);
    try check(sameDecoded(whole.decoded, split.decoded), "split chunked decode ended differently than whole decode");
    try check(split.data_len == whole.data_len, "split chunked decode yielded a different amount of data");
}

/// Feeds `body` to a fresh decoder as if it arrived in pieces of the given sizes (cycled; a
/// size of 0 counts as 1), dropping consumed bytes like the engine. `.record` stores the
/// data in `data_buf`; `.compare` checks it against `data_buf`.
fn decodePieces(body: []const u8, limits: Limits, pieces: []const usize, comptime data_mode: enum { record, compare }) Failure!DecodeRun {
    var decoder = http1.ChunkedDecoder{};
    var consumed: usize = 0;
    var arrived: usize = @min(body.len, @max(pieces[0], 1));
    var piece_index: usize = 1;
    var data_len: usize = 0;
    var calls: usize = 0;
    while (true) {
        calls += 1;
        try check(calls <= 4 * body.len + 8, "chunked decode made no progress");
        const available = body[consumed..arrived];
        const step = decoder.decode(available, limits) catch |err| {
            // Sticky: the same error again, whatever comes next.
            const again = decoder.decode("0\r\n\r\n", limits);
            if (again) |_| return fail("chunked error not sticky") else |e| try check(e == err, "chunked error changed");
            return .{ .decoded = .{ .failed = err }, .data_len = data_len };
        };
        try check(step.consumed <= available.len, "chunked consumed more than given");
        try check(step.data.len <= step.consumed, "chunked data longer than consumed");
        if (step.data.len > 0) try check(within(step.data, available), "chunked data not a slice of the input");
        if (available.len > 0 and !step.done) try check(step.consumed > 0, "chunked made no progress on non-empty input");
        switch (data_mode) {
            .record => @memcpy(data_buf[data_len..][0..step.data.len], step.data),
            .compare => try check(std.mem.eql(u8, data_buf[data_len..][0..step.data.len], step.data), "split chunked decode yielded different data bytes"),
        }
        data_len += step.data.len;
        consumed += step.consumed;
        if (step.done) {
            const after = decoder.decode(body[consumed..], limits) catch return fail("finished decoder failed");
            try check(after.done and after.consumed == 0 and after.data.len == 0, "finished decoder consumed more");
            return .{ .decoded = .{ .done = consumed }, .data_len = data_len };
        }
        if (step.consumed == 0) {
            if (arrived == body.len) return .{ .decoded = .need_more, .data_len = data_len };
            arrived = @min(body.len, arrived + @max(pieces[piece_index % pieces.len], 1));
            piece_index += 1;
        }
    }
}

// ---------------------------------------------------------------------------------------
// percentDecode.

fn checkPercentDecode(input: []const u8, hash: u64) Failure!void {
    const full_len = try checkPercentDecodeOne(input, input.len);
    const reference_len = referencePercentDecode(input, &reference_buf);
    try check(full_len == reference_len, "percentDecode length differs from the reference");
    try check(std.mem.eql(u8, decode_buf[0..full_len], reference_buf[0..reference_len]), "percentDecode output differs from the reference");
    // A short destination truncates: the output is a prefix of the full decode.
    for ([_]usize{ 0, 1, input.len / 2, @intCast(hash % (input.len + 1)) }) |dst_len| {
        const short = @min(dst_len, input.len);
        const len = try checkPercentDecodeOne(input, short);
        try check(len == @min(short, reference_len), "truncated percentDecode length");
        try check(std.mem.eql(u8, decode_buf[0..len], reference_buf[0..len]), "truncated percentDecode is not a prefix");
    }
}

/// Decodes into `decode_buf[0..dst_len]` with a canary after it; returns the length.
fn checkPercentDecodeOne(src: []const u8, dst_len: usize) Failure!usize {
    const canary_len = 64;
    for (decode_buf[dst_len..][0..canary_len], 0..) |*c, index| c.* = @truncate(index *% 151 +% 7);
    const len = http_fields.percentDecode(src, decode_buf[0..dst_len]);
    try check(len <= dst_len and len <= src.len, "percentDecode output longer than dst or src");
    for (decode_buf[dst_len..][0..canary_len], 0..) |c, index| {
        try check(c == @as(u8, @truncate(index *% 151 +% 7)), "percentDecode wrote past dst");
    }
    return len;
}

fn referencePercentDecode(src: []const u8, dst: []u8) usize {
    var read: usize = 0;
    var written: usize = 0;
    while (read < src.len) : (written += 1) {
        if (src[read] == '%' and read + 2 < src.len) {
            const high = std.fmt.charToDigit(src[read + 1], 16) catch null;
            const low = std.fmt.charToDigit(src[read + 2], 16) catch null;
            if (high != null and low != null) {
                dst[written] = high.? * 16 + low.?;
                read += 3;
                continue;
            }
        }
        dst[written] = src[read];
        read += 1;
    }
    return written;
}

// ---------------------------------------------------------------------------------------
// Tests: the corpus as regression inputs.

fn testOne(_: void, input: []const u8) anyerror!void {
    try checkOne(input, if (builtin.fuzz) .sampled else .exhaustive);
}

test "fuzz: parser invariants over the corpus" {
    try std.testing.fuzz({}, testOne, .{ .corpus = &corpus });
}

test "fuzz: corpus files have their expected outcome" {
    var failures: usize = 0;
    for (corpus_entries, corpus) |entry, input| {
        const got = try checkStream(input, default_config, .sampled, 0);
        if (got != entry.expect) {
            std.debug.print("{s}.http: expected {s}, got {s}\n", .{ entry.name, @tagName(entry.expect), @tagName(got) });
            failures += 1;
        }
    }
    try std.testing.expectEqual(@as(usize, 0), failures);
}

test "fuzz: corpus list matches fuzz_corpus/ (from the repository root)" {
    var dir = std.fs.cwd().openDir("src/zig/testing/fuzz_corpus", .{ .iterate = true }) catch return error.SkipZigTest;
    defer dir.close();
    var iterator = dir.iterate();
    var files: usize = 0;
    while (try iterator.next()) |item| {
        if (!std.mem.endsWith(u8, item.name, ".http")) continue;
        files += 1;
        const stem = item.name[0 .. item.name.len - ".http".len];
        for (corpus_entries) |entry| {
            if (std.mem.eql(u8, entry.name, stem)) break;
        } else {
            std.debug.print("fuzz_corpus/{s} is not listed in testing/fuzz_http1.zig corpus_entries\n", .{item.name});
            return error.TestUnexpectedResult;
        }
    }
    try std.testing.expectEqual(corpus_entries.len, files);
}
