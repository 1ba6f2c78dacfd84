//! What the engine adds to a request and its response for operators, off unless asked:
//! request ids (`--request-id-header`), W3C Trace Context (`--trace-context`), and
//! `server-timing` (`--server-timing`). Protocol-neutral: both sessions call `prepare`
//! before the request reaches the app, `python/scope.zig` applies `Added` to the headers
//! the app sees, and `responseFields` gives the fields the response head carries.
const std = @import("std");

/// An incoming request id longer than this is not kept (a fresh one replaces it).
pub const request_id_bytes_max = 64;
/// A generated id: 128 random bits as lower-case hex.
pub const generated_id_len = 32;
/// `00-` trace-id `-` parent-id `-` flags (W3C Trace Context, version 00).
pub const traceparent_len = 55;
/// Trace Context caps `tracestate` at 32 list members; 512 bytes is what every vendor
/// must propagate (longer values may be cut): longer ones are dropped here.
pub const tracestate_bytes_max = 512;
pub const tracestate_members_max = 32;

/// What the engine changes in the request's headers before the app sees them. Slices
/// point at the stream's own id or at this thread's scratch: valid during `on_request`.
pub const appended_max = 3;

pub const Added = struct {
    /// The request id the app sees under `request_id_name` ("" = the feature is off).
    request_id: []const u8 = "",
    request_id_name: []const u8 = "",
    /// A traceparent that replaces the incoming one ("" = keep what came).
    traceparent: []const u8 = "",
    // Each drop flag is set only when the request has a field it drops (`prepare`'s scan
    // counted one; `--request-decompression` saw a content-encoding), so `dropsSome`
    // is exact and the usual request (nothing to drop) is copied without asking
    // `drops` of every field.
    /// Incoming fields named `request_id_name` came: `request_id` replaces them.
    drop_request_id: bool = false,
    drop_traceparent: bool = false,
    drop_tracestate: bool = false,
    /// `--request-decompression` decodes the body: its content-encoding and
    /// content-length no longer describe what the app reads.
    drop_body_fields: bool = false,
    /// ... and over HTTP/1.x a body that had a content-length reads as chunked.
    add_chunked: bool = false,

    pub fn any(self: *const Added) bool {
        return self.request_id.len > 0 or self.traceparent.len > 0 or self.dropsSome() or self.add_chunked;
    }

    /// Whether some incoming field is replaced or dropped: whenever `drops` holds for
    /// a field, some flag it reads is set, so this is never false then.
    pub fn dropsSome(self: *const Added) bool {
        return self.drop_request_id or self.drop_traceparent or self.drop_tracestate or self.drop_body_fields;
    }

    /// Whether an incoming header (a lower-case name) is replaced or dropped.
    pub fn drops(self: *const Added, name: []const u8) bool {
        if (self.drop_request_id and nameIs(name, self.request_id_name)) return true;
        if (self.drop_traceparent and nameIs(name, "traceparent")) return true;
        if (self.drop_tracestate and nameIs(name, "tracestate")) return true;
        if (self.drop_body_fields and (nameIs(name, "content-encoding") or nameIs(name, "content-length"))) return true;
        return false;
    }

    /// The fields appended after the kept ones, in order (at most `appended_max`).
    pub fn appended(self: *const Added, out: *[appended_max][2][]const u8) []const [2][]const u8 {
        var n: usize = 0;
        if (self.request_id.len > 0) {
            out[n] = .{ self.request_id_name, self.request_id };
            n += 1;
        }
        if (self.traceparent.len > 0) {
            out[n] = .{ "traceparent", self.traceparent };
            n += 1;
        }
        if (self.add_chunked) {
            out[n] = .{ "transfer-encoding", "chunked" };
            n += 1;
        }
        return out[0..n];
    }
};

pub const Options = struct {
    /// Lower-case field name; "" = no request ids.
    request_id_header: []const u8 = "",
    trace_context: bool = false,
    server_timing: bool = false,
};

pub const Header = struct { name: []const u8, value: []const u8 };

/// The request id a stream keeps for its response.
pub const RequestId = struct {
    bytes: [request_id_bytes_max]u8 = undefined,
    len: u8 = 0,

    pub fn get(self: *const RequestId) []const u8 {
        return self.bytes[0..self.len];
    }
};

threadlocal var traceparent_scratch: [traceparent_len]u8 = undefined;

/// What one pass over the request's fields found.
const Scan = struct {
    /// The last field named `--request-id-header`, and how many there were.
    id_value: []const u8 = "",
    ids: usize = 0,
    parent: []const u8 = "",
    parents: usize = 0,
    states: usize = 0,
    state_bytes: usize = 0,
    state_members: usize = 0,
    state_ok: bool = true,
};

/// `std.mem.eql` with the length compared first, inline: most names differ in length,
/// and the call to the byte comparison is then never made.
inline fn nameIs(name: []const u8, wanted: []const u8) bool {
    return name.len == wanted.len and std.mem.eql(u8, name, wanted);
}

fn scan(opts: Options, headers: anytype) Scan {
    var s = Scan{};
    for (headers) |h| {
        if (opts.request_id_header.len > 0 and nameIs(h.name, opts.request_id_header)) {
            s.id_value = h.value;
            s.ids += 1;
        }
        if (!opts.trace_context) continue;
        if (nameIs(h.name, "traceparent")) {
            s.parent = h.value;
            s.parents += 1;
        } else if (nameIs(h.name, "tracestate")) {
            // Several fields are one list (RFC 9110 5.3): every one must be valid.
            s.states += 1;
            s.state_bytes += h.value.len;
            s.state_members += countMembers(h.value) orelse {
                s.state_ok = false;
                continue;
            };
        }
    }
    return s;
}

/// Decides what the request gains. `headers` are the request's (lower-case names);
/// `id` is where the stream keeps its request id. One pass over the fields.
pub fn prepare(opts: Options, headers: anytype, id: *RequestId) Added {
    var added = Added{};
    const s = scan(opts, headers);
    if (opts.request_id_header.len > 0) {
        if (s.ids == 1 and saneRequestId(s.id_value)) {
            @memcpy(id.bytes[0..s.id_value.len], s.id_value);
            id.len = @intCast(s.id_value.len);
        } else {
            generateId(id.bytes[0..generated_id_len]);
            id.len = generated_id_len;
        }
        added.request_id = id.get();
        added.request_id_name = opts.request_id_header;
        added.drop_request_id = s.ids > 0;
    }
    if (opts.trace_context) {
        if (s.parents != 1 or !validTraceparent(s.parent)) {
            // A new trace starts here; a tracestate without its traceparent means nothing.
            newTraceparent(&traceparent_scratch);
            added.traceparent = &traceparent_scratch;
            added.drop_traceparent = s.parents > 0;
            added.drop_tracestate = s.states > 0;
        } else if (!s.state_ok or s.state_bytes > tracestate_bytes_max or s.state_members > tracestate_members_max) {
            std.debug.assert(s.states > 0);
            added.drop_tracestate = true;
        }
    }
    return added;
}

/// The trace id (32 hex digits) the request goes on with under `--trace-context`: the new
/// traceparent's, else the incoming one's (`prepare` kept it: valid and sent once); ""
/// when the feature is off. `headers` are the request's as received.
pub fn traceId(opts: Options, added: *const Added, headers: anytype) []const u8 {
    if (!opts.trace_context) return "";
    var parent = added.traceparent;
    if (parent.len == 0) for (headers) |h| {
        if (nameIs(h.name, "traceparent")) parent = h.value;
    };
    return if (parent.len == traceparent_len) parent[3..35] else "";
}

/// What the default access line ends with: ` request_id=<id>` under `--request-id-header`,
/// ` trace_id=<32 hex>` under `--trace-context` (`zigcorn/accesslog.py` writes the same for
/// the app's requests). A kept id is sane (`saneRequestId`): it cannot break the line.
pub fn logSuffix(opts: Options, added: *const Added, headers: anytype, buf: []u8) []const u8 {
    const trace = traceId(opts, added, headers);
    return std.fmt.bufPrint(buf, "{s}{s}{s}{s}", .{
        if (added.request_id.len > 0) " request_id=" else "", added.request_id,
        if (trace.len > 0) " trace_id=" else "",              trace,
    }) catch "";
}

/// An incoming id is kept when it is 1 to 64 bytes of letters, digits and `-_.:+/=@`
/// (UUIDs, ULIDs, base64 and hex ids, what load balancers send); anything else could
/// smuggle text into logs, and is replaced.
pub fn saneRequestId(value: []const u8) bool {
    if (value.len == 0 or value.len > request_id_bytes_max) return false;
    for (value) |ch| {
        const ok = std.ascii.isAlphanumeric(ch) or switch (ch) {
            '-', '_', '.', ':', '+', '/', '=', '@' => true,
            else => false,
        };
        if (!ok) return false;
    }
    return true;
}

/// Random bytes for ids, drawn from the CSPRNG a batch at a time: one
/// `std.crypto.random` call (a per-thread ChaCha8 seeded from getrandom, wiped on fork)
/// per 32 ids instead of one per id. The bytes are as unpredictable as the CSPRNG's; they
/// are not erased after use as the CSPRNG's own buffer is, because each becomes a public
/// id at once. A fork empties the pool (`fork_generation`): parent and child never hand
/// out the same bytes.
const IdPool = struct {
    bytes: [512]u8 = undefined,
    used: usize = 512,
    generation: u32 = 0,

    fn take(self: *IdPool, comptime n: usize) *const [n]u8 {
        comptime std.debug.assert(n <= 512);
        const gen = fork_generation.load(.monotonic);
        if (self.used + n > self.bytes.len or self.generation != gen) {
            once_atfork.call();
            std.crypto.random.bytes(&self.bytes);
            self.used = 0;
            self.generation = fork_generation.load(.monotonic);
        }
        const out = self.bytes[self.used..][0..n];
        self.used += n;
        return out;
    }
};

threadlocal var id_pool: IdPool = .{};
/// Bumped in a forked child, before it runs anything else: every pool refills.
var fork_generation = std.atomic.Value(u32).init(1);
var once_atfork = std.once(installAtfork);

fn installAtfork() void {
    const rc = std.c.pthread_atfork(null, null, onForkChild);
    // Without the handler a forked child could repeat its parent's pending ids: no pool then.
    if (rc != 0) pool_disabled = true;
}

var pool_disabled = false;

fn onForkChild() callconv(.c) void {
    _ = fork_generation.fetchAdd(1, .monotonic);
}

fn randomBytes(comptime n: usize, out: *[n]u8) void {
    if (pool_disabled) return std.crypto.random.bytes(out);
    out.* = id_pool.take(n).*;
}

/// 128 random bits as hex, from the CSPRNG (ids must not be guessable or collide).
pub fn generateId(out: *[generated_id_len]u8) void {
    var raw: [16]u8 = undefined;
    randomBytes(16, &raw);
    hex(16, &raw, out);
}

/// Lower-case hex of `n` bytes, all at once in vector lanes.
fn hex(comptime n: usize, raw: *const [n]u8, out: *[2 * n]u8) void {
    const v: @Vector(n, u8) = raw.*;
    const high = v >> @splat(4);
    const low = v & @as(@Vector(n, u8), @splat(15));
    // Interleave: byte i's high nibble goes to 2i, its low one to 2i + 1.
    const mask = comptime blk: {
        var m: [2 * n]i32 = undefined;
        for (0..n) |i| {
            m[2 * i] = @intCast(i);
            m[2 * i + 1] = ~@as(i32, @intCast(i));
        }
        break :blk m;
    };
    const nibbles: @Vector(2 * n, u8) = @shuffle(u8, high, low, mask);
    const is_digit = nibbles < @as(@Vector(2 * n, u8), @splat(10));
    const base = @select(u8, is_digit, @as(@Vector(2 * n, u8), @splat('0')), @as(@Vector(2 * n, u8), @splat('a' - 10)));
    out.* = nibbles + base;
}

/// A fresh `00-<trace-id>-<parent-id>-01`: the trace is sampled, so that the app's
/// tracer (parent-based sampling, OpenTelemetry's default) records it.
pub fn newTraceparent(out: *[traceparent_len]u8) void {
    var raw: [24]u8 = undefined;
    while (true) {
        randomBytes(24, &raw);
        // All-zero ids are invalid; 2^-64 odds, but the check costs nothing.
        if (!allZero(raw[0..16]) and !allZero(raw[16..24])) break;
    }
    out[0..3].* = "00-".*;
    hex(16, raw[0..16], out[3..35]);
    out[35] = '-';
    hex(8, raw[16..24], out[36..52]);
    out[52..55].* = "-01".*;
}

fn allZero(b: []const u8) bool {
    for (b) |x| if (x != 0) return false;
    return true;
}

fn isLowerHex(s: []const u8) bool {
    for (s) |ch| {
        if (!((ch >= '0' and ch <= '9') or (ch >= 'a' and ch <= 'f'))) return false;
    }
    return true;
}

/// W3C Trace Context `traceparent`: version, trace-id, parent-id and flags in lower-case
/// hex; version ff and all-zero ids are invalid; a later version may append fields
/// after a `-`, version 00 may not.
pub fn validTraceparent(v: []const u8) bool {
    if (v.len < traceparent_len) return false;
    if (v[2] != '-' or v[35] != '-' or v[52] != '-') return false;
    const version = v[0..2];
    if (!isLowerHex(version) or std.mem.eql(u8, version, "ff")) return false;
    if (!isLowerHex(v[3..35]) or !isLowerHex(v[36..52]) or !isLowerHex(v[53..55])) return false;
    if (std.mem.allEqual(u8, v[3..35], '0') or std.mem.allEqual(u8, v[36..52], '0')) return false;
    if (v.len == traceparent_len) return true;
    return !std.mem.eql(u8, version, "00") and v[55] == '-';
}

/// The list members of a `tracestate` value, or null when one is malformed
/// (`key=value`, keys `[a-z0-9][a-z0-9_\-*/]*` with an optional `@vendor`, values of
/// printable ASCII but `,` and `=`, not ending in a space). Empty members are allowed.
pub fn countMembers(v: []const u8) ?usize {
    var n: usize = 0;
    var it = std.mem.splitScalar(u8, v, ',');
    while (it.next()) |raw| {
        const m = std.mem.trim(u8, raw, " \t");
        if (m.len == 0) continue;
        const eq = std.mem.indexOfScalar(u8, m, '=') orelse return null;
        if (!validKey(m[0..eq])) return null;
        const value = m[eq + 1 ..];
        if (value.len == 0 or value.len > 256 or value[value.len - 1] == ' ') return null;
        for (value) |ch| if (ch < 0x20 or ch > 0x7e or ch == ',' or ch == '=') return null;
        n += 1;
    }
    return n;
}

fn validKey(k: []const u8) bool {
    if (k.len == 0 or k.len > 256) return false;
    const at = std.mem.indexOfScalar(u8, k, '@');
    const tenant = if (at) |i| k[0..i] else k;
    if (tenant.len == 0 or !keyChars(tenant, true)) return false;
    if (at) |i| {
        const vendor = k[i + 1 ..];
        if (vendor.len == 0 or vendor.len > 14 or !keyChars(vendor, false)) return false;
    }
    return true;
}

fn keyChars(s: []const u8, digit_first: bool) bool {
    if (!(std.ascii.isLower(s[0]) or (digit_first and std.ascii.isDigit(s[0])))) return false;
    for (s[1..]) |ch| {
        const ok = std.ascii.isLower(ch) or std.ascii.isDigit(ch) or switch (ch) {
            '_', '-', '*', '/' => true,
            else => false,
        };
        if (!ok) return false;
    }
    return true;
}

/// `app;dur=<ms>` with microsecond precision: the time from the request head to the
/// response head.
/// Written by hand: `std.fmt` took some 300 instructions a response for this field.
pub fn serverTiming(buf: *[40]u8, elapsed_us: u64) []const u8 {
    const prefix = "app;dur=";
    buf[0..prefix.len].* = prefix.*;
    // The whole milliseconds, at most 17 digits (2^64 us), written backwards.
    var digits: [20]u8 = undefined;
    var ms = elapsed_us / 1000;
    var first: usize = digits.len;
    while (true) {
        first -= 1;
        digits[first] = '0' + @as(u8, @intCast(ms % 10));
        ms /= 10;
        if (ms == 0) break;
    }
    const whole = digits[first..];
    @memcpy(buf[prefix.len..][0..whole.len], whole);
    const at = prefix.len + whole.len;
    const frac: u16 = @intCast(elapsed_us % 1000);
    buf[at..][0..4].* = .{ '.', '0' + @as(u8, @intCast(frac / 100)), '0' + @as(u8, @intCast(frac / 10 % 10)), '0' + @as(u8, @intCast(frac % 10)) };
    return buf[0 .. at + 4];
}

/// Whether the app's response fields hold `name` (in any case).
pub fn hasField(app_headers: []const [2][]const u8, name: []const u8) bool {
    for (app_headers) |h| {
        if (std.ascii.eqlIgnoreCase(h[0], name)) return true;
    }
    return false;
}

/// The fields the engine adds to a response head: the request id (unless the app set
/// that field itself) and server-timing. `app_headers` are the app's (any case).
pub fn responseFields(
    opts: Options,
    id: *const RequestId,
    elapsed_us: ?u64,
    app_headers: []const [2][]const u8,
    out: *[2][2][]const u8,
    timing_buf: *[40]u8,
) []const [2][]const u8 {
    var n: usize = 0;
    if (opts.request_id_header.len > 0 and id.len > 0) {
        if (!hasField(app_headers, opts.request_id_header)) {
            out[n] = .{ opts.request_id_header, id.get() };
            n += 1;
        }
    }
    if (opts.server_timing) {
        if (elapsed_us) |us| {
            out[n] = .{ "server-timing", serverTiming(timing_buf, us) };
            n += 1;
        }
    }
    return out[0..n];
}

// ---- tests ---------------------------------------------------------------------------

const testing = std.testing;
const H = Header;

test "tracing: a sane incoming request id is kept, anything else replaced" {
    const opts = Options{ .request_id_header = "x-request-id" };
    var id = RequestId{};
    const kept = prepare(opts, &[_]H{.{ .name = "x-request-id", .value = "3f2a-ULID_01:ab+c/d=@x" }}, &id);
    try testing.expectEqualStrings("3f2a-ULID_01:ab+c/d=@x", kept.request_id);
    try testing.expectEqualStrings("x-request-id", kept.request_id_name);
    try testing.expect(kept.drops("x-request-id"));
    try testing.expect(!kept.drops("x-other"));

    const bad = [_][]const u8{ "", "a b", "a\"b", "line\nbreak", "é", "x" ** 65 };
    for (bad) |v| {
        var id2 = RequestId{};
        const a = prepare(opts, &[_]H{.{ .name = "x-request-id", .value = v }}, &id2);
        try testing.expectEqual(generated_id_len, a.request_id.len);
        try testing.expect(isLowerHex(a.request_id));
    }
    // Exactly 64 bytes is kept.
    var id3 = RequestId{};
    try testing.expectEqualStrings("y" ** 64, prepare(opts, &[_]H{.{ .name = "x-request-id", .value = "y" ** 64 }}, &id3).request_id);
    // Two incoming ids: which one would the app trust? Neither.
    var id4 = RequestId{};
    const two = prepare(opts, &[_]H{ .{ .name = "x-request-id", .value = "a" }, .{ .name = "x-request-id", .value = "b" } }, &id4);
    try testing.expectEqual(generated_id_len, two.request_id.len);
    // Absent: generated.
    var id5 = RequestId{};
    try testing.expectEqual(generated_id_len, prepare(opts, &[_]H{}, &id5).request_id.len);
}

test "tracing: generated ids differ" {
    var seen = std.StringHashMap(void).init(testing.allocator);
    defer {
        var it = seen.keyIterator();
        while (it.next()) |k| testing.allocator.free(k.*);
        seen.deinit();
    }
    for (0..1000) |_| {
        var b: [generated_id_len]u8 = undefined;
        generateId(&b);
        const r = try seen.getOrPut(try testing.allocator.dupe(u8, &b));
        try testing.expect(!r.found_existing);
    }
}

test "tracing: hex at the nibble edges" {
    var out: [32]u8 = undefined;
    hex(16, &.{ 0x00, 0x09, 0x0a, 0x0f, 0x10, 0x90, 0xa0, 0xf0, 0xff, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde }, &out);
    try testing.expectEqualStrings("00090a0f1090a0f0ff123456789abcde", &out);
    var short: [16]u8 = undefined;
    hex(8, &.{ 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10 }, &short);
    try testing.expectEqualStrings("fedcba9876543210", &short);
}

test "tracing: the id pool refills when empty and after a fork" {
    var first: [16]u8 = undefined;
    randomBytes(16, &first);
    const used = id_pool.used;
    try testing.expect(used >= 16 and used <= id_pool.bytes.len);
    // A fork's child handler empties every pool: the next id comes from fresh bytes.
    onForkChild();
    var second: [16]u8 = undefined;
    randomBytes(16, &second);
    try testing.expectEqual(@as(usize, 16), id_pool.used);
    // Drawing past the pool's end refills it rather than reading beyond.
    var last: [24]u8 = undefined;
    while (id_pool.used + 24 <= id_pool.bytes.len) randomBytes(24, &last);
    randomBytes(24, &last);
    try testing.expectEqual(@as(usize, 24), id_pool.used);
}

test "tracing: dropsSome is exactly whether some field is dropped" {
    const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const both = Options{ .request_id_header = "x-request-id", .trace_context = true };
    const coded = H{ .name = "content-encoding", .value = "gzip" };
    // `body`: --request-decompression decodes the body (`Stream.decideCoding` sets
    // `drop_body_fields` for a request with a content-encoding).
    const cases = [_]struct { opts: Options, hs: []const H, body: bool = false }{
        .{ .opts = .{ .request_id_header = "x-request-id" }, .hs = &.{.{ .name = "host", .value = "a" }} },
        .{ .opts = .{ .request_id_header = "x-request-id" }, .hs = &.{.{ .name = "x-request-id", .value = "ok" }} },
        .{ .opts = .{ .request_id_header = "x-request-id" }, .hs = &.{.{ .name = "x-request-id", .value = "bad id" }} },
        .{ .opts = .{ .trace_context = true }, .hs = &.{.{ .name = "host", .value = "a" }} },
        .{ .opts = .{ .trace_context = true }, .hs = &.{.{ .name = "tracestate", .value = "a=b" }} },
        .{ .opts = .{ .trace_context = true }, .hs = &.{.{ .name = "traceparent", .value = parent }} },
        .{ .opts = .{ .trace_context = true }, .hs = &.{.{ .name = "traceparent", .value = "bad" }} },
        .{ .opts = .{ .trace_context = true }, .hs = &.{ .{ .name = "traceparent", .value = parent }, .{ .name = "tracestate", .value = "Bad=1" } } },
        .{ .opts = .{ .trace_context = true, .request_id_header = "traceparent" }, .hs = &.{.{ .name = "traceparent", .value = parent }} },
        .{ .opts = both, .hs = &.{.{ .name = "host", .value = "a" }} },
        .{ .opts = both, .hs = &.{ .{ .name = "host", .value = "a" }, coded }, .body = true },
        .{ .opts = .{}, .hs = &.{ .{ .name = "content-length", .value = "9" }, coded }, .body = true },
    };
    var dropping: usize = 0;
    for (cases) |case| {
        var id = RequestId{};
        var a = prepare(case.opts, case.hs, &id);
        a.drop_body_fields = case.body;
        var some = false;
        for (case.hs) |h| some = some or a.drops(h.name);
        try testing.expectEqual(some, a.dropsSome());
        dropping += @intFromBool(some);
    }
    // Both answers occur: the cases tell a wrong derivation from a right one.
    try testing.expect(dropping > 0 and dropping < cases.len);
}

test "tracing: traceparent validation at its edges" {
    const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    try testing.expect(validTraceparent(ok));
    try testing.expect(!validTraceparent(ok[0..54]));
    try testing.expect(!validTraceparent(ok ++ "-x")); // version 00 takes nothing more
    try testing.expect(validTraceparent("01" ++ ok[2..] ++ "-later")); // a later version may
    try testing.expect(!validTraceparent("01" ++ ok[2..] ++ "xlater"));
    try testing.expect(!validTraceparent("ff" ++ ok[2..]));
    try testing.expect(!validTraceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));
    try testing.expect(!validTraceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
    try testing.expect(!validTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));
    try testing.expect(!validTraceparent("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    try testing.expect(!validTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g"));
    var fresh: [traceparent_len]u8 = undefined;
    newTraceparent(&fresh);
    try testing.expect(validTraceparent(&fresh));
}

test "tracing: trace context kept, restarted or its state dropped" {
    const opts = Options{ .trace_context = true };
    var id = RequestId{};
    const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    // Valid: nothing changes.
    const a = prepare(opts, &[_]H{ .{ .name = "traceparent", .value = parent }, .{ .name = "tracestate", .value = "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7" } }, &id);
    try testing.expect(!a.any());
    // Absent: a new trace, nothing dropped from the request but a stray tracestate.
    const b = prepare(opts, &[_]H{.{ .name = "tracestate", .value = "a=b" }}, &id);
    try testing.expect(validTraceparent(b.traceparent));
    try testing.expect(!b.drop_traceparent and b.drop_tracestate);
    // Invalid or doubled parent: replaced, with its state.
    const c = prepare(opts, &[_]H{ .{ .name = "traceparent", .value = "garbage" }, .{ .name = "tracestate", .value = "a=b" } }, &id);
    try testing.expect(c.drop_traceparent and c.drop_tracestate and c.traceparent.len == traceparent_len);
    // ... and with no state there is none to drop.
    const c2 = prepare(opts, &[_]H{.{ .name = "traceparent", .value = "garbage" }}, &id);
    try testing.expect(c2.drop_traceparent and !c2.drop_tracestate and c2.traceparent.len == traceparent_len);
    const d = prepare(opts, &[_]H{ .{ .name = "traceparent", .value = parent }, .{ .name = "traceparent", .value = parent } }, &id);
    try testing.expect(d.drop_traceparent);
    // A valid parent with a bad state keeps the parent, drops the state.
    const e = prepare(opts, &[_]H{ .{ .name = "traceparent", .value = parent }, .{ .name = "tracestate", .value = "Bad=1" } }, &id);
    try testing.expect(e.traceparent.len == 0 and !e.drop_traceparent and e.drop_tracestate);
}

test "tracing: the access line's ids" {
    var buf: [160]u8 = undefined;
    var id = RequestId{};
    const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const both = Options{ .request_id_header = "x-request-id", .trace_context = true };
    const kept = [_]H{ .{ .name = "x-request-id", .value = "edge-1" }, .{ .name = "traceparent", .value = parent } };
    var a = prepare(both, &kept, &id);
    try testing.expectEqualStrings(" request_id=edge-1 trace_id=4bf92f3577b34da6a3ce929d0e0e4736", logSuffix(both, &a, &kept, &buf));
    // A new trace: its id, not the refused one's.
    const refused = [_]H{.{ .name = "traceparent", .value = "garbage" }};
    a = prepare(both, &refused, &id);
    const line = logSuffix(both, &a, &refused, &buf);
    try testing.expectEqualStrings(a.traceparent[3..35], line[line.len - 32 ..]);
    try testing.expect(std.mem.startsWith(u8, line, " request_id=") and line.len == " request_id= trace_id=".len + 64);
    // Either alone, or neither.
    const ids_only = Options{ .request_id_header = "x-request-id" };
    a = prepare(ids_only, &kept, &id);
    try testing.expectEqualStrings(" request_id=edge-1", logSuffix(ids_only, &a, &kept, &buf));
    const trace_only = Options{ .trace_context = true };
    a = prepare(trace_only, &kept, &id);
    try testing.expectEqualStrings(" trace_id=4bf92f3577b34da6a3ce929d0e0e4736", logSuffix(trace_only, &a, &kept, &buf));
    try testing.expectEqualStrings("", logSuffix(.{}, &Added{}, &kept, &buf));
}

test "tracing: tracestate members and bounds" {
    try testing.expectEqual(@as(?usize, 2), countMembers("a=1,b@vendor=2"));
    try testing.expectEqual(@as(?usize, 1), countMembers(" a=1 , ,"));
    try testing.expectEqual(@as(?usize, null), countMembers("a"));
    try testing.expectEqual(@as(?usize, null), countMembers("a="));
    try testing.expectEqual(@as(?usize, null), countMembers("A=1"));
    try testing.expectEqual(@as(?usize, null), countMembers("a@=1"));
    try testing.expectEqual(@as(?usize, null), countMembers("a@vendorvendorvendor=1"));
    try testing.expectEqual(@as(?usize, null), countMembers("a=b=c"));
    const opts = Options{ .trace_context = true };
    var id = RequestId{};
    const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const members = "k=v," ** 32;
    try testing.expect(!prepare(opts, &[_]H{ .{ .name = "traceparent", .value = parent }, .{ .name = "tracestate", .value = members } }, &id).drop_tracestate);
    try testing.expect(prepare(opts, &[_]H{ .{ .name = "traceparent", .value = parent }, .{ .name = "tracestate", .value = members ++ "z=1" } }, &id).drop_tracestate);
}

test "tracing: response fields" {
    var id = RequestId{};
    @memcpy(id.bytes[0..3], "abc");
    id.len = 3;
    var out: [2][2][]const u8 = undefined;
    var tb: [40]u8 = undefined;
    const opts = Options{ .request_id_header = "x-request-id", .server_timing = true };
    const f = responseFields(opts, &id, 12_345, &.{}, &out, &tb);
    try testing.expectEqual(@as(usize, 2), f.len);
    try testing.expectEqualStrings("abc", f[0][1]);
    try testing.expectEqualStrings("app;dur=12.345", f[1][1]);
    // The app's own id stands.
    const g = responseFields(opts, &id, 7, &.{.{ "X-Request-ID", "mine" }}, &out, &tb);
    try testing.expectEqual(@as(usize, 1), g.len);
    try testing.expectEqualStrings("app;dur=0.007", g[0][1]);
    try testing.expectEqual(@as(usize, 0), responseFields(.{}, &id, 7, &.{}, &out, &tb).len);
    try testing.expectEqualStrings("app;dur=0.000", serverTiming(&tb, 0));
    try testing.expectEqualStrings("app;dur=1.000", serverTiming(&tb, 1000));
    try testing.expectEqualStrings("app;dur=999.999", serverTiming(&tb, 999_999));
    try testing.expectEqualStrings("app;dur=18446744073709551.615", serverTiming(&tb, std.math.maxInt(u64)));
}
