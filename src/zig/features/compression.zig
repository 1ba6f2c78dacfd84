//! Response compression (`--compression`): which encoding a response gets, whether it
//! may be compressed at all, how its head changes, and the codecs.
//!
//! The codecs are the system's zlib, libbrotlienc and libzstd, opened with dlopen when
//! `--compression` names them (as zlib is for WebSocket permessage-deflate): the engine
//! links none of them, and a server without `--compression` never maps them. An
//! encoding asked for whose library cannot be opened is an error at start.
//!
//! One-shot bodies are compressed with each library's one-call API into one output
//! buffer bounded by the library's own worst-case bound (`bound`), so memory for one
//! response is its input plus that bound plus the codec's working state while it runs
//! (gzip level 6, window 32 KiB: about 256 KiB; brotli quality 4, window 2^18 capped to
//! the input: under 1 MiB; zstd level 3 with the window capped to the input: under
//! 1.5 MiB for a 1 MiB body), all freed before the response is queued.
const std = @import("std");

pub const Encoding = enum(u2) {
    gzip,
    br,
    zstd,

    pub fn token(self: Encoding) []const u8 {
        return switch (self) {
            .gzip => "gzip",
            .br => "br",
            .zstd => "zstd",
        };
    }

    pub fn parse(name: []const u8) ?Encoding {
        if (std.ascii.eqlIgnoreCase(name, "gzip") or std.ascii.eqlIgnoreCase(name, "x-gzip")) return .gzip;
        if (std.ascii.eqlIgnoreCase(name, "br")) return .br;
        if (std.ascii.eqlIgnoreCase(name, "zstd")) return .zstd;
        return null;
    }
};

pub const encodings_max = 3;

/// What `--compression*` set. `count` 0: compression is off.
pub const Options = struct {
    /// The server's preference, best first.
    order: [encodings_max]Encoding = undefined,
    count: u8 = 0,
    min_size: u64 = 1024,
    gzip_level: u8 = 6,
    brotli_level: u8 = 4,
    zstd_level: u8 = 3,
    /// Comma list of media types, lower case ("text/*" matches a whole type); the
    /// memory belongs to the caller.
    types: []const u8 = "",

    pub fn enabled(self: *const Options) bool {
        return self.count > 0;
    }

    /// Fills `order` from "zstd,br,gzip". False on an unknown or repeated name.
    pub fn setOrder(self: *Options, list: []const u8) bool {
        self.count = 0;
        var it = std.mem.tokenizeScalar(u8, list, ',');
        while (it.next()) |raw| {
            const name = std.mem.trim(u8, raw, " \t");
            if (name.len == 0) continue;
            const e = Encoding.parse(name) orelse return false;
            if (std.mem.eql(u8, name, "x-gzip")) return false;
            for (self.order[0..self.count]) |have| if (have == e) return false;
            if (self.count == encodings_max) return false;
            self.order[self.count] = e;
            self.count += 1;
        }
        return true;
    }

    /// "zstd,br,gzip": `order` as --compression spells it.
    pub fn orderText(self: *const Options, buf: *[16]u8) []const u8 {
        var n: usize = 0;
        for (self.order[0..self.count], 0..) |e, i| {
            if (i > 0) {
                buf[n] = ',';
                n += 1;
            }
            @memcpy(buf[n..][0..e.token().len], e.token());
            n += e.token().len;
        }
        return buf[0..n];
    }

    pub fn level(self: *const Options, e: Encoding) u8 {
        return switch (e) {
            .gzip => self.gzip_level,
            .br => self.brotli_level,
            .zstd => self.zstd_level,
        };
    }
};

// ---------------------------------------------------------------------------
// Accept-Encoding (RFC 9110 12.5.3)

/// q-values in thousandths; null: the coding is not named.
const Accept = struct {
    q: [encodings_max]?u16 = .{ null, null, null },
    star: ?u16 = null,
    identity: ?u16 = null,
};

/// "1", "0.5", "0.125"; null when malformed (the element is then ignored).
fn parseQ(text: []const u8) ?u16 {
    if (text.len == 0 or text.len > 5) return null;
    if (text[0] == '1') {
        if (text.len == 1) return 1000;
        if (text[1] != '.') return null;
        for (text[2..]) |ch| if (ch != '0') return null;
        return 1000;
    }
    if (text[0] != '0') return null;
    if (text.len == 1) return 0;
    if (text[1] != '.') return null;
    var v: u16 = 0;
    var scale: u16 = 100;
    for (text[2..]) |ch| {
        if (ch < '0' or ch > '9') return null;
        v += (ch - '0') * scale;
        scale /= 10;
    }
    return v;
}

fn parseAccept(value: []const u8) Accept {
    var out = Accept{};
    var elems = std.mem.splitScalar(u8, value, ',');
    while (elems.next()) |elem| {
        var parts = std.mem.splitScalar(u8, elem, ';');
        const name = std.mem.trim(u8, parts.first(), " \t");
        if (name.len == 0) continue;
        var q: u16 = 1000;
        var bad = false;
        while (parts.next()) |param| {
            const p = std.mem.trim(u8, param, " \t");
            if (p.len >= 2 and (p[0] == 'q' or p[0] == 'Q') and p[1] == '=') {
                q = parseQ(std.mem.trim(u8, p[2..], " \t")) orelse {
                    bad = true;
                    break;
                };
            }
        }
        if (bad) continue;
        // The highest q wins when a coding is named twice.
        const slot: *?u16 = if (std.mem.eql(u8, name, "*"))
            &out.star
        else if (std.ascii.eqlIgnoreCase(name, "identity"))
            &out.identity
        else if (Encoding.parse(name)) |e|
            &out.q[@intFromEnum(e)]
        else
            continue;
        slot.* = @max(slot.* orelse 0, q);
    }
    return out;
}

/// The encoding for a request whose accept-encoding is `value` (null: absent, which
/// gets none). The highest q the client gives among the server's encodings wins; ties
/// go to the server's order. `q=0` forbids a coding, `*` stands for every coding not
/// named. Identity is always acceptable to us as the fallback (no 406).
pub fn choose(opts: *const Options, value: ?[]const u8) ?Encoding {
    const v = value orelse return null;
    return chooseFrom(opts, parseAccept(v));
}

/// `choose` over every accept-encoding field of a request (`headers` has lower-case
/// `name` and `value`): several fields are one comma list (RFC 9110 5.3).
pub fn chooseFields(opts: *const Options, headers: anytype) ?Encoding {
    var acc = Accept{};
    var seen = false;
    for (headers) |h| {
        if (!std.mem.eql(u8, h.name, "accept-encoding")) continue;
        seen = true;
        const one = parseAccept(h.value);
        for (&acc.q, one.q) |*have, got| have.* = maxQ(have.*, got);
        acc.star = maxQ(acc.star, one.star);
        acc.identity = maxQ(acc.identity, one.identity);
    }
    return if (seen) chooseFrom(opts, acc) else null;
}

fn maxQ(a: ?u16, b: ?u16) ?u16 {
    if (a == null) return b;
    if (b == null) return a;
    return @max(a.?, b.?);
}

fn chooseFrom(opts: *const Options, acc: Accept) ?Encoding {
    var best: ?Encoding = null;
    var best_q: u16 = 0;
    for (opts.order[0..opts.count]) |e| {
        const q = acc.q[@intFromEnum(e)] orelse acc.star orelse 0;
        if (q > best_q) {
            best = e;
            best_q = q;
        }
    }
    return best;
}

// ---------------------------------------------------------------------------
// May this response be compressed?

/// The media type of a content-type value, lower-cased into `buf` (parameters and
/// spaces dropped); null when it does not fit or has no slash.
fn mediaType(value: []const u8, buf: []u8) ?[]const u8 {
    const end = std.mem.indexOfScalar(u8, value, ';') orelse value.len;
    const t = std.mem.trim(u8, value[0..end], " \t");
    if (t.len == 0 or t.len > buf.len or std.mem.indexOfScalar(u8, t, '/') == null) return null;
    return std.ascii.lowerString(buf[0..t.len], t);
}

/// Whether `content_type` is in the `types` list (or has a +json / +xml suffix).
pub fn typeCompressible(types: []const u8, content_type: []const u8) bool {
    var buf: [128]u8 = undefined;
    const t = mediaType(content_type, &buf) orelse return false;
    if (std.mem.endsWith(u8, t, "+json") or std.mem.endsWith(u8, t, "+xml")) return true;
    const slash = std.mem.indexOfScalar(u8, t, '/').?;
    var it = std.mem.tokenizeScalar(u8, types, ',');
    while (it.next()) |raw| {
        const want = std.mem.trim(u8, raw, " \t");
        if (std.mem.endsWith(u8, want, "/*")) {
            if (std.mem.eql(u8, want[0 .. want.len - 1], t[0 .. slash + 1])) return true;
        } else if (std.mem.eql(u8, want, t)) return true;
    }
    return false;
}

/// Whether a cache-control value carries no-transform.
fn noTransform(value: []const u8) bool {
    var it = std.mem.splitScalar(u8, value, ',');
    while (it.next()) |d| {
        if (std.ascii.eqlIgnoreCase(std.mem.trim(u8, d, " \t"), "no-transform")) return true;
    }
    return false;
}

/// What the request says: its method and accept-encoding.
pub const RequestInfo = struct {
    head: bool = false,
    accept_encoding: ?[]const u8 = null,
};

/// The encoding this response gets from its head, or null: sent as it is. `status` and
/// the app's `headers` are the response's; the body size is checked separately
/// (`bodyLargeEnough`) once the first body message shows it.
pub fn decide(opts: *const Options, req: RequestInfo, status: u16, headers: []const [2][]const u8) ?Encoding {
    if (!opts.enabled()) return null;
    const enc = choose(opts, req.accept_encoding) orelse return null;
    return if (mayCompress(opts, req.head, status, headers)) enc else null;
}

/// Whether a response with this head may be compressed: not for HEAD, 1xx, 204, 206 and
/// 304, nor one already encoded, ranged, marked no-transform, or of a type not listed.
pub fn mayCompress(opts: *const Options, head: bool, status: u16, headers: []const [2][]const u8) bool {
    if (head) return false;
    if (status < 200 or status == 204 or status == 206 or status == 304) return false;
    var typed = false;
    for (headers) |h| {
        const name = h[0];
        if (std.ascii.eqlIgnoreCase(name, "content-encoding")) {
            return false;
        } else if (std.ascii.eqlIgnoreCase(name, "content-range")) {
            return false;
        } else if (std.ascii.eqlIgnoreCase(name, "cache-control")) {
            if (noTransform(h[1])) return false;
        } else if (std.ascii.eqlIgnoreCase(name, "content-type")) {
            if (!typeCompressible(opts.types, h[1])) return false;
            typed = true;
        }
    }
    return typed;
}

/// A one-shot body (the whole body in one message) is compressed from `min_size` up.
pub fn bodyLargeEnough(opts: *const Options, len: usize) bool {
    return len > 0 and len >= opts.min_size;
}

// ---------------------------------------------------------------------------
// The head of a compressed response

/// The longest rewritten value (a merged vary or a weakened etag).
pub const value_bytes_max = 1024;

/// The head of a compressed response, from the app's `headers`: content-length is
/// dropped (the caller frames the new body), content-encoding added, `vary` merged with
/// accept-encoding (added when absent), a strong ETag made weak. `out` gets at most
/// `headers.len + 2` entries; `scratch` holds the rewritten values. Returns the count,
/// or null when a value does not fit `scratch` (the response then goes uncompressed).
pub fn rewriteHead(enc: Encoding, headers: []const [2][]const u8, out: [][2][]const u8, scratch: []u8) ?usize {
    std.debug.assert(out.len >= headers.len + 2);
    var n: usize = 0;
    var used: usize = 0;
    var vary_seen = false;
    for (headers) |h| {
        const name = h[0];
        if (std.ascii.eqlIgnoreCase(name, "content-length")) continue;
        if (std.ascii.eqlIgnoreCase(name, "vary")) {
            vary_seen = true;
            const v = std.mem.trim(u8, h[1], " \t");
            if (varyHasAcceptEncoding(v)) {
                out[n] = h;
            } else {
                const merged = std.fmt.bufPrint(scratch[used..], "{s}{s}accept-encoding", .{ v, if (v.len > 0) ", " else "" }) catch return null;
                used += merged.len;
                out[n] = .{ name, merged };
            }
            n += 1;
            continue;
        }
        if (std.ascii.eqlIgnoreCase(name, "etag")) {
            const v = std.mem.trim(u8, h[1], " \t");
            if (v.len > 0 and v[0] == '"') {
                const weak = std.fmt.bufPrint(scratch[used..], "W/{s}", .{v}) catch return null;
                used += weak.len;
                out[n] = .{ name, weak };
                n += 1;
                continue;
            }
        }
        out[n] = h;
        n += 1;
    }
    out[n] = .{ "content-encoding", enc.token() };
    n += 1;
    if (!vary_seen) {
        out[n] = .{ "vary", "accept-encoding" };
        n += 1;
    }
    return n;
}

fn varyHasAcceptEncoding(value: []const u8) bool {
    var it = std.mem.splitScalar(u8, value, ',');
    while (it.next()) |raw| {
        const f = std.mem.trim(u8, raw, " \t");
        if (std.mem.eql(u8, f, "*") or std.ascii.eqlIgnoreCase(f, "accept-encoding")) return true;
    }
    return false;
}

// ---------------------------------------------------------------------------
// Codecs, loaded with dlopen

/// zlib (gzip) is the one shared with request decompression and WebSocket deflate:
/// `os/zlib.zig` loads it; brotli's and zstd's encoders are this file's own.
const zlib_lib = @import("../os/zlib.zig");
const dynlib = @import("../os/dynlib.zig");
pub const ZStream = zlib_lib.ZStream;
const zlib = &zlib_lib.api;

const BrotliApi = struct {
    BrotliEncoderCompress: *const fn (c_int, c_int, c_int, usize, [*]const u8, *usize, [*]u8) callconv(.c) c_int,
    BrotliEncoderMaxCompressedSize: *const fn (usize) callconv(.c) usize,
    BrotliEncoderCreateInstance: *const fn (?*anyopaque, ?*anyopaque, ?*anyopaque) callconv(.c) ?*anyopaque,
    BrotliEncoderSetParameter: *const fn (*anyopaque, c_int, u32) callconv(.c) c_int,
    BrotliEncoderCompressStream: *const fn (*anyopaque, c_int, *usize, *[*]const u8, *usize, *[*]u8, ?*usize) callconv(.c) c_int,
    BrotliEncoderHasMoreOutput: *const fn (*anyopaque) callconv(.c) c_int,
    BrotliEncoderDestroyInstance: *const fn (*anyopaque) callconv(.c) void,
};

const ZstdApi = struct {
    ZSTD_compressCCtx: *const fn (*anyopaque, [*]u8, usize, [*]const u8, usize, c_int) callconv(.c) usize,
    ZSTD_compressBound: *const fn (usize) callconv(.c) usize,
    ZSTD_isError: *const fn (usize) callconv(.c) c_uint,
    ZSTD_createCCtx: *const fn () callconv(.c) ?*anyopaque,
    ZSTD_freeCCtx: *const fn (*anyopaque) callconv(.c) usize,
    ZSTD_CCtx_setParameter: *const fn (*anyopaque, c_int, c_int) callconv(.c) usize,
    ZSTD_compressStream2: *const fn (*anyopaque, *ZstdOut, *ZstdIn, c_int) callconv(.c) usize,
};

const ZstdOut = extern struct { dst: [*]u8, size: usize, pos: usize };
const ZstdIn = extern struct { src: [*]const u8, size: usize, pos: usize };

var brotli: BrotliApi = undefined;
var zstd: ZstdApi = undefined;
var loaded_set = [_]bool{ false, false, false };

/// The shared library an encoding needs.
pub fn libraryName(e: Encoding) [:0]const u8 {
    return switch (e) {
        .gzip => zlib_lib.library_name,
        .br => "libbrotlienc.so.1",
        .zstd => "libzstd.so.1",
    };
}

/// Opens the library of `e` once. False when it cannot be opened or lacks a symbol.
pub fn load(e: Encoding) bool {
    const i = @intFromEnum(e);
    if (loaded_set[i]) return true;
    const ok = switch (e) {
        .gzip => zlib_lib.load(),
        .br => dynlib.loadApi(BrotliApi, &brotli, libraryName(e)),
        .zstd => dynlib.loadApi(ZstdApi, &zstd, libraryName(e)),
    };
    loaded_set[i] = ok;
    return ok;
}

/// Every encoding of `opts` loaded, or the first that cannot be.
pub fn loadAll(opts: *const Options) ?Encoding {
    for (opts.order[0..opts.count]) |e| if (!load(e)) return e;
    return null;
}

/// The most bytes `compress` can produce from `len` input bytes.
pub fn bound(e: Encoding, len: usize) usize {
    std.debug.assert(loaded_set[@intFromEnum(e)]);
    return switch (e) {
        // deflateBound needs a stream; zlib's documented worst case plus the gzip wrapper.
        .gzip => len + (len >> 12) + (len >> 14) + (len >> 25) + 13 + 18,
        .br => brotli.BrotliEncoderMaxCompressedSize(len),
        .zstd => zstd.ZSTD_compressBound(len),
    };
}

pub const CompressError = error{ OutOfMemory, Failed };

/// `input` compressed whole with `e` at `level`; the caller frees the result with
/// `allocator`. On any codec failure the response goes uncompressed.
pub fn compress(allocator: std.mem.Allocator, e: Encoding, level: u8, input: []const u8) CompressError![]u8 {
    if (!load(e)) return error.Failed;
    const cap = bound(e, input.len);
    const out = try allocator.alloc(u8, if (cap == 0) 64 else cap);
    errdefer allocator.free(out);
    const n: usize = switch (e) {
        .gzip, .zstd => try compressKept(e, level, input, out),
        .br => blk: {
            var size: usize = out.len;
            // BROTLI_DEFAULT_WINDOW (22) and BROTLI_MODE_GENERIC; the encoder trims the
            // window to the input itself for small inputs.
            const lgwin: c_int = @min(22, @max(10, std.math.log2_int_ceil(usize, @max(input.len, 2)) + 1));
            if (brotli.BrotliEncoderCompress(level, lgwin, 0, input.len, input.ptr, &size, out.ptr) == 0) return error.Failed;
            break :blk size;
        },
    };
    return allocator.realloc(out, n) catch out[0..n];
}

// One-shot codec states, kept between responses. Setting up zlib's deflate state
// (windowBits 15, memLevel 8: about 268 KiB) or a zstd context costs more than
// compressing a 20 KiB body with it (zlib level 6 here: 114 us with a fresh state, 62 us
// with a reset one), so a state goes back to a small shelf after each body, for the next
// body on any thread. At most `kept_states_max` per encoding rest there (one is all a
// single event loop uses; WSGI threads compressing at once take more); a state is made
// when the shelf is empty and freed when it is full. brotli's one-shot call keeps no state.

pub const kept_states_max = 4;

const Kept = struct {
    level: u8,
    /// gzip's stream (its state allocated by zlib); unused for zstd.
    z: ZStream = .{},
    /// zstd's context; null for gzip.
    cctx: ?*anyopaque = null,
};

const Shelf = struct {
    lock: std.Thread.Mutex = .{},
    items: [kept_states_max]*Kept = undefined,
    len: usize = 0,
};

var shelves = [_]Shelf{ .{}, .{}, .{} };

fn takeKept(e: Encoding, level: u8) ?*Kept {
    const shelf = &shelves[@intFromEnum(e)];
    shelf.lock.lock();
    const top: ?*Kept = if (shelf.len > 0) blk: {
        shelf.len -= 1;
        break :blk shelf.items[shelf.len];
    } else null;
    shelf.lock.unlock();
    if (top) |k| {
        if (k.level == level) return k;
        freeKept(e, k);
    }
    return makeKept(e, level);
}

fn putKept(e: Encoding, k: *Kept) void {
    const shelf = &shelves[@intFromEnum(e)];
    shelf.lock.lock();
    const room = shelf.len < kept_states_max;
    if (room) {
        shelf.items[shelf.len] = k;
        shelf.len += 1;
    }
    shelf.lock.unlock();
    if (!room) freeKept(e, k);
}

fn makeKept(e: Encoding, level: u8) ?*Kept {
    const k = std.heap.c_allocator.create(Kept) catch return null;
    k.* = .{ .level = level };
    const ok = switch (e) {
        // windowBits 15 + 16: a gzip wrapper; memLevel 8; Z_DEFAULT_STRATEGY.
        .gzip => zlib.deflateInit2_(&k.z, level, 8, 15 + 16, 8, 0, zlib.zlibVersion(), @sizeOf(ZStream)) == 0,
        .zstd => blk: {
            k.cctx = zstd.ZSTD_createCCtx();
            break :blk k.cctx != null;
        },
        .br => unreachable,
    };
    if (!ok) {
        std.heap.c_allocator.destroy(k);
        return null;
    }
    return k;
}

fn freeKept(e: Encoding, k: *Kept) void {
    switch (e) {
        .gzip => _ = zlib.deflateEnd(&k.z),
        .zstd => _ = zstd.ZSTD_freeCCtx(k.cctx.?),
        .br => unreachable,
    }
    std.heap.c_allocator.destroy(k);
}

/// States on the shelf of `e` (for tests).
fn keptCount(e: Encoding) usize {
    const shelf = &shelves[@intFromEnum(e)];
    shelf.lock.lock();
    defer shelf.lock.unlock();
    return shelf.len;
}

fn compressKept(e: Encoding, level: u8, input: []const u8, out: []u8) CompressError!usize {
    const k = takeKept(e, level) orelse return error.OutOfMemory;
    // A state that failed mid-body is not trusted again.
    var good = false;
    defer if (good) putKept(e, k) else freeKept(e, k);
    const n = switch (e) {
        .gzip => try gzipOnce(&k.z, input, out),
        .zstd => blk: {
            // Compresses at `level` whatever the context held before.
            const r = zstd.ZSTD_compressCCtx(k.cctx.?, out.ptr, out.len, input.ptr, input.len, level);
            if (zstd.ZSTD_isError(r) != 0) return error.Failed;
            break :blk r;
        },
        .br => unreachable,
    };
    good = true;
    return n;
}

fn gzipOnce(z: *ZStream, input: []const u8, out: []u8) CompressError!usize {
    if (input.len > std.math.maxInt(c_uint) or out.len > std.math.maxInt(c_uint)) return error.Failed;
    z.next_in = input.ptr;
    z.avail_in = @intCast(input.len);
    z.next_out = out.ptr;
    z.avail_out = @intCast(out.len);
    // Z_FINISH (4) with room for the bound: one call ends the stream (Z_STREAM_END, 1);
    // the reset readies the state for the next body (Z_OK, 0).
    if (zlib.deflate(z, 4) != 1) return error.Failed;
    if (zlib.deflateReset(z) != 0) return error.Failed;
    return out.len - z.avail_out;
}

// ---------------------------------------------------------------------------
// Streaming: one encoder per streamed response, flushed after every app message

/// Small windows keep a streamed response's state small (resident per encoder after one
/// 8 KiB message, at the default levels; the README has them): gzip window 2^14 with
/// memLevel 7, 128 KiB allocated (about 85 KiB touched); brotli window 2^16, about
/// 560 KiB at quality 4; zstd window 2^17 with hash and chain tables of 2^15, about
/// 320 KiB at level 3. Created at the first body message of
/// a compressed streamed response, destroyed with its last: no state for idle connections.
pub const stream_gzip_window_bits = 14;
pub const stream_gzip_mem_level = 7;
pub const stream_brotli_lgwin = 16;
pub const stream_zstd_window_log = 17;
pub const stream_zstd_table_log = 15;

pub const Encoder = struct {
    enc: Encoding,
    z: ZStream = .{},
    state: ?*anyopaque = null,

    pub fn create(e: Encoding, level: u8) ?*Encoder {
        if (!load(e)) return null;
        const self = std.heap.c_allocator.create(Encoder) catch return null;
        self.* = .{ .enc = e };
        const ok = switch (e) {
            .gzip => zlib.deflateInit2_(&self.z, level, 8, stream_gzip_window_bits + 16, stream_gzip_mem_level, 0, zlib.zlibVersion(), @sizeOf(ZStream)) == 0,
            .br => blk: {
                const st = brotli.BrotliEncoderCreateInstance(null, null, null) orelse break :blk false;
                self.state = st;
                // BROTLI_PARAM_QUALITY 1, BROTLI_PARAM_LGWIN 2.
                _ = brotli.BrotliEncoderSetParameter(st, 1, level);
                _ = brotli.BrotliEncoderSetParameter(st, 2, stream_brotli_lgwin);
                break :blk true;
            },
            .zstd => blk: {
                const cc = zstd.ZSTD_createCCtx() orelse break :blk false;
                self.state = cc;
                // compressionLevel 100, windowLog 101, hashLog 102, chainLog 103.
                _ = zstd.ZSTD_CCtx_setParameter(cc, 100, level);
                _ = zstd.ZSTD_CCtx_setParameter(cc, 101, stream_zstd_window_log);
                _ = zstd.ZSTD_CCtx_setParameter(cc, 102, stream_zstd_table_log);
                _ = zstd.ZSTD_CCtx_setParameter(cc, 103, stream_zstd_table_log);
                break :blk true;
            },
        };
        if (!ok) {
            std.heap.c_allocator.destroy(self);
            return null;
        }
        return self;
    }

    pub fn destroy(self: *Encoder) void {
        switch (self.enc) {
            .gzip => _ = zlib.deflateEnd(&self.z),
            .br => if (self.state) |st| brotli.BrotliEncoderDestroyInstance(st),
            .zstd => if (self.state) |cc| {
                _ = zstd.ZSTD_freeCCtx(cc);
            },
        }
        std.heap.c_allocator.destroy(self);
    }

    /// Compresses `input` and flushes (so the client can decode everything so far), or
    /// ends the stream when `last`; the output is appended to `out`.
    pub fn feed(self: *Encoder, allocator: std.mem.Allocator, input: []const u8, last: bool, out: *std.ArrayListUnmanaged(u8)) CompressError!void {
        const step = 16 * 1024;
        switch (self.enc) {
            .gzip => {
                if (input.len > std.math.maxInt(c_uint)) return error.Failed;
                self.z.next_in = input.ptr;
                self.z.avail_in = @intCast(input.len);
                // Z_SYNC_FLUSH 2, Z_FINISH 4: done when output room is left over.
                const flush: c_int = if (last) 4 else 2;
                while (true) {
                    try out.ensureUnusedCapacity(allocator, step);
                    const room = out.unusedCapacitySlice();
                    const give: c_uint = @intCast(@min(room.len, std.math.maxInt(c_uint)));
                    self.z.next_out = room.ptr;
                    self.z.avail_out = give;
                    const r = zlib.deflate(&self.z, flush);
                    out.items.len += give - self.z.avail_out;
                    if (r == 1) break; // Z_STREAM_END
                    if (r != 0 and r != -5) return error.Failed;
                    if (self.z.avail_out != 0 and !last) break;
                }
            },
            .br => {
                const st = self.state.?;
                var avail_in = input.len;
                var next_in: [*]const u8 = input.ptr;
                // BROTLI_OPERATION_FLUSH 1, BROTLI_OPERATION_FINISH 2.
                const op: c_int = if (last) 2 else 1;
                while (true) {
                    try out.ensureUnusedCapacity(allocator, step);
                    const room = out.unusedCapacitySlice();
                    var avail_out = room.len;
                    var next_out: [*]u8 = room.ptr;
                    if (brotli.BrotliEncoderCompressStream(st, op, &avail_in, &next_in, &avail_out, &next_out, null) == 0) return error.Failed;
                    out.items.len += room.len - avail_out;
                    if (avail_in == 0 and brotli.BrotliEncoderHasMoreOutput(st) == 0) break;
                }
            },
            .zstd => {
                const cc = self.state.?;
                var in = ZstdIn{ .src = input.ptr, .size = input.len, .pos = 0 };
                // ZSTD_e_flush 1, ZSTD_e_end 2: the return value is what is left to write.
                const op: c_int = if (last) 2 else 1;
                while (true) {
                    try out.ensureUnusedCapacity(allocator, step);
                    const room = out.unusedCapacitySlice();
                    var o = ZstdOut{ .dst = room.ptr, .size = room.len, .pos = 0 };
                    const left = zstd.ZSTD_compressStream2(cc, &o, &in, op);
                    if (zstd.ZSTD_isError(left) != 0) return error.Failed;
                    out.items.len += o.pos;
                    if (left == 0 and in.pos == in.size) break;
                }
            },
        }
    }
};

// ---------------------------------------------------------------------------
// Tests

const testing = std.testing;

fn testOpts(list: []const u8) Options {
    var o = Options{ .types = "text/*,application/json,application/javascript,image/svg+xml" };
    std.debug.assert(o.setOrder(list));
    return o;
}

test "setOrder takes each known encoding once" {
    var o = Options{};
    try testing.expect(o.setOrder("zstd, br,gzip"));
    try testing.expectEqual(@as(u8, 3), o.count);
    var buf: [16]u8 = undefined;
    try testing.expectEqualStrings("zstd,br,gzip", o.orderText(&buf));
    try testing.expectEqual(Encoding.zstd, o.order[0]);
    try testing.expectEqual(Encoding.gzip, o.order[2]);
    try testing.expect(o.setOrder(""));
    try testing.expect(!o.enabled());
    try testing.expect(!o.setOrder("gzip,gzip"));
    try testing.expect(!o.setOrder("deflate"));
    try testing.expect(!o.setOrder("x-gzip"));
}

test "q-values" {
    try testing.expectEqual(@as(?u16, 1000), parseQ("1"));
    try testing.expectEqual(@as(?u16, 1000), parseQ("1.000"));
    try testing.expectEqual(@as(?u16, null), parseQ("1.001"));
    try testing.expectEqual(@as(?u16, 0), parseQ("0"));
    try testing.expectEqual(@as(?u16, 500), parseQ("0.5"));
    try testing.expectEqual(@as(?u16, 125), parseQ("0.125"));
    try testing.expectEqual(@as(?u16, null), parseQ("0.1234"));
    try testing.expectEqual(@as(?u16, null), parseQ("2"));
    try testing.expectEqual(@as(?u16, null), parseQ(""));
    try testing.expectEqual(@as(?u16, null), parseQ("0.x"));
}

test "choose: server order breaks ties, the client's q decides" {
    const o = testOpts("zstd,br,gzip");
    try testing.expectEqual(@as(?Encoding, null), choose(&o, null));
    try testing.expectEqual(@as(?Encoding, null), choose(&o, ""));
    try testing.expectEqual(@as(?Encoding, .gzip), choose(&o, "gzip"));
    try testing.expectEqual(@as(?Encoding, .gzip), choose(&o, "x-gzip"));
    try testing.expectEqual(@as(?Encoding, .zstd), choose(&o, "gzip, deflate, br, zstd"));
    try testing.expectEqual(@as(?Encoding, .br), choose(&o, "gzip;q=0.5, br"));
    try testing.expectEqual(@as(?Encoding, .gzip), choose(&o, "gzip;q=1, br;q=0.9, zstd;q=0.8"));
    try testing.expectEqual(@as(?Encoding, .zstd), choose(&o, "*"));
    try testing.expectEqual(@as(?Encoding, .br), choose(&o, "zstd;q=0, *"));
    try testing.expectEqual(@as(?Encoding, null), choose(&o, "gzip;q=0, br;q=0, zstd;q=0"));
    try testing.expectEqual(@as(?Encoding, null), choose(&o, "*;q=0"));
    try testing.expectEqual(@as(?Encoding, .gzip), choose(&o, "*;q=0, gzip"));
    try testing.expectEqual(@as(?Encoding, null), choose(&o, "identity"));
    try testing.expectEqual(@as(?Encoding, null), choose(&o, "deflate, compress"));
    // A malformed q drops that element only.
    try testing.expectEqual(@as(?Encoding, .gzip), choose(&o, "br;q=abc, gzip"));
    try testing.expectEqual(@as(?Encoding, .gzip), choose(&o, " GZIP ; Q=0.3 "));
    // Named twice: the higher q.
    try testing.expectEqual(@as(?Encoding, .gzip), choose(&o, "gzip;q=0, gzip;q=0.5"));
    const g = testOpts("gzip");
    try testing.expectEqual(@as(?Encoding, null), choose(&g, "br, zstd"));
    try testing.expectEqual(@as(?Encoding, .gzip), choose(&g, "br, *;q=0.1"));
    const off = Options{};
    try testing.expectEqual(@as(?Encoding, null), choose(&off, "gzip"));
}

test "chooseFields merges several accept-encoding fields" {
    const o = testOpts("zstd,br,gzip");
    const H = struct { name: []const u8, value: []const u8 };
    const two = [_]H{ .{ .name = "accept-encoding", .value = "gzip" }, .{ .name = "x", .value = "zstd" }, .{ .name = "accept-encoding", .value = "br;q=0.5" } };
    try testing.expectEqual(@as(?Encoding, .gzip), chooseFields(&o, &two));
    const none = [_]H{.{ .name = "accept", .value = "*/*" }};
    try testing.expectEqual(@as(?Encoding, null), chooseFields(&o, &none));
    const forbid = [_]H{ .{ .name = "accept-encoding", .value = "zstd;q=0" }, .{ .name = "accept-encoding", .value = "zstd, br;q=0.2" } };
    try testing.expectEqual(@as(?Encoding, .zstd), chooseFields(&o, &forbid));
}

test "content types" {
    const types = "text/*,application/json,image/svg+xml";
    try testing.expect(typeCompressible(types, "text/html; charset=utf-8"));
    try testing.expect(typeCompressible(types, "Text/Plain"));
    try testing.expect(typeCompressible(types, "application/json"));
    try testing.expect(typeCompressible(types, "application/problem+json"));
    try testing.expect(typeCompressible(types, "application/atom+xml;charset=utf-8"));
    try testing.expect(typeCompressible(types, "image/svg+xml"));
    try testing.expect(!typeCompressible(types, "image/png"));
    try testing.expect(!typeCompressible(types, "application/octet-stream"));
    try testing.expect(!typeCompressible(types, "application/jsonx"));
    try testing.expect(!typeCompressible(types, "textual/html"));
    try testing.expect(!typeCompressible(types, ""));
    try testing.expect(!typeCompressible(types, "text"));
    try testing.expect(!typeCompressible("", "text/html"));
}

test "decide: the never-compressed cases" {
    const o = testOpts("gzip");
    const req = RequestInfo{ .accept_encoding = "gzip" };
    const json = [_][2][]const u8{.{ "content-type", "application/json" }};
    try testing.expectEqual(@as(?Encoding, .gzip), decide(&o, req, 200, &json));
    try testing.expectEqual(@as(?Encoding, .gzip), decide(&o, req, 404, &json));
    try testing.expectEqual(@as(?Encoding, null), decide(&o, .{ .head = true, .accept_encoding = "gzip" }, 200, &json));
    try testing.expectEqual(@as(?Encoding, null), decide(&o, .{}, 200, &json));
    for ([_]u16{ 101, 204, 206, 304 }) |status| {
        try testing.expectEqual(@as(?Encoding, null), decide(&o, req, status, &json));
    }
    const encoded = [_][2][]const u8{ .{ "content-type", "text/html" }, .{ "Content-Encoding", "br" } };
    try testing.expectEqual(@as(?Encoding, null), decide(&o, req, 200, &encoded));
    const nt = [_][2][]const u8{ .{ "content-type", "text/html" }, .{ "cache-control", "public, No-Transform" } };
    try testing.expectEqual(@as(?Encoding, null), decide(&o, req, 200, &nt));
    const cc = [_][2][]const u8{ .{ "content-type", "text/html" }, .{ "cache-control", "max-age=60" } };
    try testing.expectEqual(@as(?Encoding, .gzip), decide(&o, req, 200, &cc));
    const png = [_][2][]const u8{.{ "content-type", "image/png" }};
    try testing.expectEqual(@as(?Encoding, null), decide(&o, req, 200, &png));
    const untyped = [_][2][]const u8{.{ "x-a", "b" }};
    try testing.expectEqual(@as(?Encoding, null), decide(&o, req, 200, &untyped));
    const ranged = [_][2][]const u8{ .{ "content-type", "text/html" }, .{ "content-range", "bytes 0-1/2" } };
    try testing.expectEqual(@as(?Encoding, null), decide(&o, req, 200, &ranged));
    try testing.expect(!bodyLargeEnough(&o, 1023));
    try testing.expect(bodyLargeEnough(&o, 1024));
    const zero = Options{ .min_size = 0 };
    try testing.expect(!bodyLargeEnough(&zero, 0));
    try testing.expect(bodyLargeEnough(&zero, 1));
}

test "rewriteHead: encoding, vary, length, etag" {
    var out: [8][2][]const u8 = undefined;
    var scratch: [value_bytes_max]u8 = undefined;
    const in = [_][2][]const u8{
        .{ "content-type", "text/html" },
        .{ "content-length", "5000" },
        .{ "ETag", "\"abc\"" },
        .{ "Vary", "Cookie" },
    };
    const n = rewriteHead(.br, &in, &out, &scratch).?;
    try testing.expectEqual(@as(usize, 4), n);
    try testing.expectEqualStrings("content-type", out[0][0]);
    try testing.expectEqualStrings("W/\"abc\"", out[1][1]);
    try testing.expectEqualStrings("Cookie, accept-encoding", out[2][1]);
    try testing.expectEqualStrings("content-encoding", out[3][0]);
    try testing.expectEqualStrings("br", out[3][1]);

    const plain = [_][2][]const u8{ .{ "content-type", "text/html" }, .{ "etag", "W/\"weak\"" } };
    const m = rewriteHead(.gzip, &plain, &out, &scratch).?;
    try testing.expectEqual(@as(usize, 4), m);
    try testing.expectEqualStrings("W/\"weak\"", out[1][1]);
    try testing.expectEqualStrings("gzip", out[2][1]);
    try testing.expectEqualStrings("vary", out[3][0]);
    try testing.expectEqualStrings("accept-encoding", out[3][1]);

    const already = [_][2][]const u8{.{ "vary", "Accept-Encoding, Origin" }};
    try testing.expectEqual(@as(usize, 2), rewriteHead(.zstd, &already, &out, &scratch).?);
    try testing.expectEqualStrings("Accept-Encoding, Origin", out[0][1]);
    const star = [_][2][]const u8{.{ "vary", "*" }};
    try testing.expectEqual(@as(usize, 2), rewriteHead(.zstd, &star, &out, &scratch).?);
    try testing.expectEqualStrings("*", out[0][1]);

    // A value that does not fit the scratch: not compressed.
    var tiny: [8]u8 = undefined;
    try testing.expectEqual(@as(?usize, null), rewriteHead(.gzip, &in, &out, &tiny));
}

fn roundTripGzip(input: []const u8) !void {
    const gz = try compress(testing.allocator, .gzip, 6, input);
    defer testing.allocator.free(gz);
    try expectGunzips(gz, input);
}

fn expectGunzips(gz: []const u8, input: []const u8) !void {
    var in_reader = std.Io.Reader.fixed(gz);
    var window: [std.compress.flate.max_window_len]u8 = undefined;
    var d = std.compress.flate.Decompress.init(&in_reader, .gzip, &window);
    var got: std.Io.Writer.Allocating = .init(testing.allocator);
    defer got.deinit();
    _ = try d.reader.streamRemaining(&got.writer);
    try testing.expectEqualSlices(u8, input, got.written());
}

test "codecs compress, and gzip and zstd decode back" {
    var text: [20000]u8 = undefined;
    for (&text, 0..) |*b, i| b.* = "{\"key\": \"value\", \"n\": 12345}\n"[i % 30];
    if (load(.gzip)) {
        try roundTripGzip(&text);
        try roundTripGzip("");
        try roundTripGzip("x");
    }
    if (load(.zstd)) {
        const z = try compress(testing.allocator, .zstd, 3, &text);
        defer testing.allocator.free(z);
        try testing.expect(z.len < text.len / 10);
        var in_reader = std.Io.Reader.fixed(z);
        const buf = try testing.allocator.alloc(u8, std.compress.zstd.default_window_len + std.compress.zstd.block_size_max);
        defer testing.allocator.free(buf);
        var d = std.compress.zstd.Decompress.init(&in_reader, buf, .{});
        var got: std.Io.Writer.Allocating = .init(testing.allocator);
        defer got.deinit();
        _ = try d.reader.streamRemaining(&got.writer);
        try testing.expectEqualSlices(u8, &text, got.written());
    }
    if (load(.br)) {
        const b = try compress(testing.allocator, .br, 4, &text);
        defer testing.allocator.free(b);
        try testing.expect(b.len > 0 and b.len < text.len / 10);
        const one = try compress(testing.allocator, .br, 4, "a");
        defer testing.allocator.free(one);
        try testing.expect(one.len > 0);
    }
}

test "one-shot states are kept, reset between bodies and bounded" {
    var text: [20000]u8 = undefined;
    for (&text, 0..) |*b, i| b.* = "{\"key\": \"value\", \"n\": 12345}\n"[i % 30];
    inline for (.{ Encoding.gzip, Encoding.zstd }) |e| if (load(e)) {
        // The same body twice: a kept state gives the same bytes as a fresh one.
        const first = try compress(testing.allocator, e, 3, &text);
        defer testing.allocator.free(first);
        try testing.expect(keptCount(e) >= 1);
        const again = try compress(testing.allocator, e, 3, &text);
        defer testing.allocator.free(again);
        try testing.expectEqualSlices(u8, first, again);
        // A short body after a long one is not polluted by the last one's stream.
        const short = try compress(testing.allocator, e, 3, "x");
        defer testing.allocator.free(short);
        if (e == .gzip) try expectGunzips(short, "x");
        // More states out at once than the shelf holds: the extra ones are freed.
        var held: [kept_states_max + 2]*Kept = undefined;
        for (&held) |*k| k.* = takeKept(e, 3).?;
        try testing.expectEqual(@as(usize, 0), keptCount(e));
        for (held) |k| putKept(e, k);
        try testing.expectEqual(@as(usize, kept_states_max), keptCount(e));
        // Another level replaces a kept state rather than using it at the old level.
        const other = try compress(testing.allocator, e, 1, &text);
        defer testing.allocator.free(other);
        try testing.expect(other.len > 0);
    };
}

test "streaming encoders flush each message and end the stream" {
    var text: [30000]u8 = undefined;
    for (&text, 0..) |*b, i| b.* = "data: {\"tick\": 1}\n\n"[i % 18];
    inline for (.{ Encoding.gzip, Encoding.zstd, Encoding.br }) |e| if (load(e)) {
        const enc = Encoder.create(e, 3).?;
        defer enc.destroy();
        var out: std.ArrayListUnmanaged(u8) = .empty;
        defer out.deinit(testing.allocator);
        try enc.feed(testing.allocator, text[0..100], false, &out);
        // The flush put out something for the first message on its own.
        try testing.expect(out.items.len > 0);
        const first = out.items.len;
        try enc.feed(testing.allocator, text[100..], false, &out);
        try enc.feed(testing.allocator, "", true, &out);
        try testing.expect(out.items.len > first and out.items.len < text.len / 5);
        if (e == .gzip) {
            var in_reader = std.Io.Reader.fixed(out.items);
            var window: [std.compress.flate.max_window_len]u8 = undefined;
            var d = std.compress.flate.Decompress.init(&in_reader, .gzip, &window);
            var got: std.Io.Writer.Allocating = .init(testing.allocator);
            defer got.deinit();
            _ = try d.reader.streamRemaining(&got.writer);
            try testing.expectEqualSlices(u8, &text, got.written());
        }
    };
}
