//! The engine's options: the dict `Server._new_engine` builds from `Config`, read into
//! `server.Options` and the per-server parts of every scope.
const std = @import("std");
const py = @import("capi.zig");
const c = py.c;
const Object = py.Object;
const server_mod = @import("../core/server.zig");
const scope = @import("scope.zig");
const response = @import("../http/response.zig");
const compression = @import("../features/compression.zig");
const decompression = @import("../features/decompression.zig");
const metrics = @import("../features/metrics.zig");
const static_files = @import("../server/static_files.zig");
const EngineObjectCore = @import("engine.zig").EngineObjectCore;

const allocator = std.heap.c_allocator;

// The option table (kinds, bounds, the fields the options set) is `option_specs.zig`.
const option_specs = @import("option_specs.zig");
pub const specs = option_specs.specs;
pub const maxima = option_specs.maxima;
pub const spec = option_specs.spec;
pub const limit = option_specs.limit;
pub const most = option_specs.most;
pub const seconds_max = option_specs.seconds_max;
const When = option_specs.When;

/// A required option, or null with KeyError set.
pub fn required(opts: *Object, comptime key: [:0]const u8) ?*Object {
    _ = comptime spec(key);
    return c.PyDict_GetItemString(opts, key.ptr) orelse {
        _ = c.PyErr_Format(c.PyExc_KeyError, "engine option '%s' is missing", key.ptr);
        return null;
    };
}

/// Every key of `opts` is an option in `specs` (a misspelt or retired one is refused
/// rather than ignored); false with ValueError set.
pub fn knownKeys(opts: *Object) bool {
    var pos: c.Py_ssize_t = 0;
    var key: ?*Object = null;
    var value: ?*Object = null;
    while (c.PyDict_Next(opts, &pos, &key, &value) != 0) {
        const name = py.strView(key.?) orelse return false;
        for (specs) |s| {
            if (std.mem.eql(u8, s.name, name)) break;
        } else {
            _ = c.PyErr_Format(c.PyExc_ValueError, "unknown engine option %R", key.?);
            return false;
        }
    }
    return true;
}

/// Reads every option of group `when` that has a field into `out` (a `server.Options`
/// or `server.Http3`), each within its bounds; false with a Python exception set.
pub fn readFields(opts: *Object, comptime when: When, out: anytype) bool {
    @setEvalBranchQuota(100_000);
    inline for (specs) |s| {
        const path = comptime s.field orelse continue;
        if (comptime s.when != when) continue;
        const dest = fieldPtr(out, path);
        const T = @TypeOf(dest.*);
        dest.* = switch (comptime s.kind) {
            .flag => optBool(opts, s.name) orelse return false,
            .seconds => optMs(opts, s.name) orelse return false,
            .micros => (optLimited(opts, s.name, u64) orelse return false) * std.time.ns_per_us,
            .power_of_two => optPowerOfTwo(opts, s.name, T) orelse return false,
            .int => optLimited(opts, s.name, T) orelse return false,
            .choice => optChoice(opts, s.name, T) orelse return false,
            .other => comptime unreachable,
        };
    }
    return true;
}

/// A pointer to the field at dotted `path` inside `*root`.
fn fieldPtr(root: anytype, comptime path: []const u8) FieldPtr(@TypeOf(root), path) {
    if (comptime std.mem.indexOfScalar(u8, path, '.')) |dot|
        return fieldPtr(&@field(root.*, path[0..dot]), path[dot + 1 ..]);
    return &@field(root.*, path);
}

fn FieldPtr(comptime Root: type, comptime path: []const u8) type {
    const Struct = @typeInfo(Root).pointer.child;
    if (comptime std.mem.indexOfScalar(u8, path, '.')) |dot|
        return FieldPtr(*@FieldType(Struct, path[0..dot]), path[dot + 1 ..]);
    return *@FieldType(Struct, path);
}

/// The echo of every option with a field (`Engine.options()`), in the options' units
/// (seconds, microseconds, counts; an enum by its value); false with an error set.
pub fn putFields(d: *Object, comptime when: When, from: anytype) bool {
    @setEvalBranchQuota(100_000);
    inline for (specs) |s| {
        const path = comptime s.field orelse continue;
        if (comptime s.when != when) continue;
        const v = fieldPtr(@constCast(from), path).*;
        const obj = switch (comptime s.kind) {
            .flag => py.boolean(v),
            .seconds => c.PyFloat_FromDouble(@as(f64, @floatFromInt(v)) / 1000.0),
            .micros => c.PyLong_FromUnsignedLongLong(v / std.time.ns_per_us),
            .int, .power_of_two => c.PyLong_FromLongLong(@intCast(v)),
            .choice => c.PyLong_FromLongLong(@intFromEnum(v)),
            .other => comptime unreachable,
        };
        if (!py.dictSetSteal(d, py.intern(s.name) orelse return false, obj)) return false;
    }
    return true;
}

pub fn optBool(opts: *Object, comptime key: [:0]const u8) ?bool {
    const t = c.PyObject_IsTrue(required(opts, key) orelse return null);
    if (t < 0) return null;
    return t != 0;
}

/// An integer option from `low` to `high` (inclusive).
pub fn optInt(opts: *Object, comptime key: [:0]const u8, comptime T: type, low: T, high: T) ?T {
    const v = required(opts, key) orelse return null;
    const n = c.PyLong_AsLongLong(v);
    if (n == -1 and c.PyErr_Occurred() != null) {
        // Past 64 bits: out of range like any other value, not an OverflowError.
        if (c.PyErr_ExceptionMatches(c.PyExc_OverflowError) == 0) return null;
        c.PyErr_Clear();
    } else if (n >= low and n <= high) {
        return @intCast(n);
    }
    _ = c.PyErr_Format(
        c.PyExc_ValueError,
        "engine option '%s' must be from %lld to %lld, not %R",
        key.ptr,
        @as(c_longlong, @intCast(low)),
        @as(c_longlong, @intCast(high)),
        v,
    );
    return null;
}

/// An integer option within its bounds in `limits`.
pub fn optLimited(opts: *Object, comptime key: [:0]const u8, comptime T: type) ?T {
    const l = comptime limit(key);
    return optInt(opts, key, T, l.low, l.high);
}

/// A power of two within its bounds in `limits`.
pub fn optPowerOfTwo(opts: *Object, comptime key: [:0]const u8, comptime T: type) ?T {
    const n = optLimited(opts, key, T) orelse return null;
    if (!std.math.isPowerOfTwo(n)) {
        _ = c.PyErr_Format(
            c.PyExc_ValueError,
            "engine option '%s' must be a power of two, not %lld",
            key.ptr,
            @as(c_longlong, @intCast(n)),
        );
        return null;
    }
    return n;
}

/// One of enum `E`'s values, by its integer.
pub fn optChoice(opts: *Object, comptime key: [:0]const u8, comptime E: type) ?E {
    const fields = @typeInfo(E).@"enum".fields;
    const low = fields[0].value;
    const high = fields[fields.len - 1].value;
    const n = optInt(opts, key, i64, low, high) orelse return null;
    return std.meta.intToEnum(E, n) catch {
        _ = c.PyErr_Format(
            c.PyExc_ValueError,
            "engine option '%s' has no choice %lld",
            key.ptr,
            @as(c_longlong, n),
        );
        return null;
    };
}

/// Seconds (a float within the option's bounds in `limits`) as milliseconds.
pub fn optMs(opts: *Object, comptime key: [:0]const u8) ?u64 {
    const l = comptime limit(key);
    const f = c.PyFloat_AsDouble(required(opts, key) orelse return null);
    if (f == -1.0 and c.PyErr_Occurred() != null) return null;
    if (!(f >= @as(f64, @floatFromInt(l.low))) or f > @as(f64, @floatFromInt(l.high))) {
        _ = c.PyErr_Format(
            c.PyExc_ValueError,
            "engine option '%s' must be from %lld to %lld seconds",
            key.ptr,
            @as(c_longlong, l.low),
            @as(c_longlong, l.high),
        );
        return null;
    }
    return @intFromFloat(f * 1000.0);
}

/// Engine(on_request, wake, stream_class, options: dict)
pub fn setServerInfo(self: *EngineObjectCore, opts: *Object) bool {
    const root = required(opts, "root_path") orelse return false;
    if (c.PyUnicode_Check(root) == 0) {
        c.PyErr_SetString(c.PyExc_TypeError, "root_path must be a str");
        return false;
    }
    py.incref(root);
    self.info.root_path = root;
    self.info.root_path_utf8 = py.strView(root) orelse return false;
    // Plain HTTP's scheme; a TLS session makes it https (python/scope.zig).
    self.info.scheme = py.intern("http") orelse return false;
    self.info.server = py.none();
    self.info.state = null;
    return true;
}

/// metrics_path / health_path / ready_path (str or None) and metrics_slot (int):
/// engine-answered paths.
pub fn setOps(self: *EngineObjectCore, opts: *Object, out: *server_mod.Options) bool {
    inline for (.{ "metrics_path", "health_path", "ready_path" }) |key| {
        const v = required(opts, key) orelse return false;
        if (!py.isNone(v)) {
            const text = py.strView(v) orelse return false;
            if (text.len == 0 or text[0] != '/') {
                c.PyErr_SetString(c.PyExc_ValueError, key ++ " must start with '/'");
                return false;
            }
            py.incref(v);
            @field(self, key) = v;
            @field(out, key) = text;
        }
    }
    const index = optLimited(opts, "metrics_slot", usize) orelse return false;
    var bounds: [metrics.buckets_max]u64 = undefined;
    const n = bucketBounds(opts, &bounds) orelse return false;
    if (self.metrics_path == null) return true;
    // A no-op under --workers: the master mapped the counters, with the same bounds.
    metrics.init(1, bounds[0..n]) catch {
        c.PyErr_SetString(c.PyExc_OSError, "could not map the metrics counters");
        return false;
    };
    const pid: u64 = @intCast(std.os.linux.getpid());
    const slot = metrics.claim(index, pid) orelse {
        c.PyErr_SetString(c.PyExc_ValueError, "metrics_slot out of range");
        return false;
    };
    out.metrics = slot;
    return true;
}

/// metrics_buckets: rising seconds (1 to `metrics.buckets_max` of them) as microseconds.
pub fn bucketBounds(opts: *Object, out: *[metrics.buckets_max]u64) ?usize {
    const v = required(opts, "metrics_buckets") orelse return null;
    const seq = c.PySequence_Fast(v, "metrics_buckets must be a list of seconds") orelse
        return null;
    defer py.decref(seq);
    const n: usize = @intCast(py.seqLen(seq));
    if (n > most("metrics_buckets")) {
        c.PyErr_SetString(
            c.PyExc_ValueError,
            std.fmt.comptimePrint(
                "metrics_buckets: at most {d} bounds",
                .{most("metrics_buckets")},
            ),
        );
        return null;
    }
    const items = py.seqItems(seq);
    for (0..n) |i| {
        const f = c.PyFloat_AsDouble(items[i].?);
        if (f == -1.0 and c.PyErr_Occurred() != null) return null;
        if (!(f > 0) or f > most("metrics_bucket_seconds")) {
            c.PyErr_SetString(
                c.PyExc_ValueError,
                std.fmt.comptimePrint(
                    "metrics_buckets: each bound is above 0 and at most {d} seconds",
                    .{most("metrics_bucket_seconds")},
                ),
            );
            return null;
        }
        out[i] = @intFromFloat(@round(f * 1e6));
    }
    if (!metrics.validBounds(out[0..n])) {
        c.PyErr_SetString(
            c.PyExc_ValueError,
            "metrics_buckets must rise, with at least one bound (microsecond precision)",
        );
        return null;
    }
    return n;
}

/// request_id_header (a lower-case str or None), trace_context, server_timing.
pub fn setTracing(self: *EngineObjectCore, opts: *Object, out: *server_mod.Options) bool {
    const name = required(opts, "request_id_header") orelse return false;
    if (py.isNone(name)) return true;
    const text = py.strView(name) orelse return false;
    if (text.len == 0 or text.len > most("request_id_header") or !response.validName(text)) {
        c.PyErr_SetString(
            c.PyExc_ValueError,
            std.fmt.comptimePrint(
                "request_id_header must be a header name (a token of at most {d} bytes)",
                .{most("request_id_header")},
            ),
        );
        return false;
    }
    for (text) |ch| if (std.ascii.isUpper(ch)) {
        c.PyErr_SetString(c.PyExc_ValueError, "request_id_header must be lower-case");
        return false;
    };
    py.incref(name);
    self.request_id_header = name;
    out.tracing.request_id_header = text;
    return true;
}

/// static: a list of (route, directory) str pairs; static_expires: seconds or None;
/// static_dotfiles, static_precompressed. Each directory is opened once, here; the engine
/// owns the mounts.
pub fn setStatic(self: *EngineObjectCore, opts: *Object, out: *server_mod.Options) bool {
    const list = required(opts, "static") orelse return false;
    const expires = required(opts, "static_expires") orelse return false;
    // Checked with or without mounts, like every option.
    const expires_s: ?u32 = if (py.isNone(expires))
        null
    else
        optLimited(opts, "static_expires", u32) orelse return false;
    const dotfiles = optBool(opts, "static_dotfiles") orelse return false;
    const precompressed = optBool(opts, "static_precompressed") orelse return false;
    const seq = c.PySequence_Fast(list, "static must be a list of (route, directory)") orelse
        return false;
    defer py.decref(seq);
    const n: usize = @intCast(py.seqLen(seq));
    if (n == 0) return true;
    if (n > most("static")) {
        c.PyErr_SetString(
            c.PyExc_ValueError,
            std.fmt.comptimePrint(
                "static: at most {d} mounts",
                .{most("static")},
            ),
        );
        return false;
    }
    const cfg = allocator.create(static_files.Config) catch {
        _ = c.PyErr_NoMemory();
        return false;
    };
    const mounts = allocator.alloc(static_files.Mount, n) catch {
        allocator.destroy(cfg);
        _ = c.PyErr_NoMemory();
        return false;
    };
    cfg.* = .{
        .mounts = mounts[0..0],
        .mounts_cap = n,
        .dotfiles = dotfiles,
        .precompressed = precompressed,
        .extra = self.extra_headers,
        .expires = expires_s,
    };
    self.static_cfg = cfg;
    const items = py.seqItems(seq);
    for (0..n) |i| {
        const pair = items[i].?;
        if (c.PyTuple_Check(pair) == 0 or c.PyTuple_Size(pair) != 2) {
            c.PyErr_SetString(c.PyExc_TypeError, "static must be a list of (route, directory)");
            return false;
        }
        const route = py.strView(c.PyTuple_GetItem(pair, 0).?) orelse return false;
        const dir = py.strView(c.PyTuple_GetItem(pair, 1).?) orelse return false;
        const route_ok = route.len > 0 and route[0] == '/' and route.len <= most("static_route");
        if (!route_ok or dir.len == 0 or dir.len >= 4096) {
            c.PyErr_SetString(
                c.PyExc_ValueError,
                "static: a route starts with '/', and a directory is a path",
            );
            return false;
        }
        const trimmed = std.mem.trimRight(u8, route, "/");
        const owned = allocator.dupe(u8, trimmed) catch {
            _ = c.PyErr_NoMemory();
            return false;
        };
        var path: [4096]u8 = undefined;
        @memcpy(path[0..dir.len], dir);
        path[dir.len] = 0;
        const flags: std.os.linux.O = .{ .PATH = true, .DIRECTORY = true, .CLOEXEC = true };
        const rc = std.os.linux.open(path[0..dir.len :0], flags, 0);
        if (std.os.linux.E.init(rc) != .SUCCESS) {
            allocator.free(owned);
            _ = c.PyErr_Format(
                c.PyExc_OSError,
                "static: %s is not a directory that can be opened",
                path[0..dir.len :0].ptr,
            );
            return false;
        }
        mounts[i] = .{ .route = owned, .dir_fd = @intCast(rc) };
        cfg.mounts = mounts[0 .. i + 1];
    }
    out.static = cfg;
    return true;
}

/// Frees what `setStatic` made (the mounts' routes and directory descriptors).
pub fn freeStatic(self: *EngineObjectCore) void {
    const cfg = self.static_cfg orelse return;
    self.static_cfg = null;
    for (cfg.mounts) |m| {
        allocator.free(m.route);
        std.posix.close(m.dir_fd);
    }
    // The allocation's length is the list's: free what was allocated.
    allocator.free(cfg.mounts.ptr[0..cfg.mounts_cap]);
    allocator.destroy(cfg);
}

/// The TCP options (0 = the kernel's default) and the HSTS value ("" = none).
pub fn setEdge(self: *EngineObjectCore, opts: *Object, out: *server_mod.Options) bool {
    if ((out.rate_limit.rate == 0) != (out.rate_limit.burst == 0)) {
        c.PyErr_SetString(
            c.PyExc_ValueError,
            "limit_request_rate and limit_request_burst are both 0 or both set",
        );
        return false;
    }
    // After setTrust: the rate limit counts the client the trusted proxies name, and
    // only they may send a PROXY header.
    out.trust = self.info.trust;
    const hsts = required(opts, "hsts") orelse return false;
    const text = py.strView(hsts) orelse return false;
    if (!response.validValue(text)) {
        c.PyErr_SetString(c.PyExc_ValueError, "hsts is not a valid header value");
        return false;
    }
    py.incref(hsts);
    self.hsts = hsts;
    out.hsts = text;
    return true;
}

/// The `http3_*` options: off (null left in `out.http3`) when `http3_fd` is absent or -1.
/// HTTP/3 needs the TLS certificate (`ssl_certfile`) and a UDP socket.
pub fn setHttp3(opts: *Object, out: *server_mod.Options) bool {
    const fd_obj = c.PyDict_GetItemString(opts, "http3_fd") orelse return true;
    const fd_raw = c.PyLong_AsLongLong(fd_obj);
    if (fd_raw == -1) return c.PyErr_Occurred() == null;
    const fd = optLimited(opts, "http3_fd", i32) orelse return false;
    const cert = c.PyDict_GetItemString(opts, "ssl_certfile");
    if (cert == null or py.isNone(cert.?)) {
        c.PyErr_SetString(c.PyExc_ValueError, "http3 needs TLS: ssl_certfile must be given");
        return false;
    }
    if (!isUdpSocket(fd)) {
        _ = c.PyErr_Format(c.PyExc_ValueError, "http3_fd %d is not a UDP socket", @as(c_int, fd));
        return false;
    }
    comptime checkCovered(server_mod.Http3, "", .http3);
    var h = initial(server_mod.Http3);
    if (!readFields(opts, .http3, &h)) return false;
    if (h.worker_index >= h.workers) {
        _ = c.PyErr_Format(
            c.PyExc_ValueError,
            "http3_worker_index %d must be below http3_workers %d",
            @as(c_int, h.worker_index),
            @as(c_int, h.workers),
        );
        return false;
    }
    const ordered = h.handshakes_before_retry <= h.handshakes_max and
        h.handshakes_max <= h.connections_max;
    if (!ordered) {
        _ = c.PyErr_Format(
            c.PyExc_ValueError,
            "http3_handshakes_before_retry %u <= http3_max_handshakes %u <= " ++
                "http3_max_connections %u does not hold",
            @as(c_uint, h.handshakes_before_retry),
            @as(c_uint, h.handshakes_max),
            @as(c_uint, h.connections_max),
        );
        return false;
    }
    if (!optKey(opts, "http3_retry_key", &h.retry_key)) return false;
    if (!optKey(opts, "http3_reset_key", &h.reset_key)) return false;
    if (!optQlogDir(opts, &h)) return false;
    h.setAltSvc();
    out.http3 = h;
    return true;
}

/// `http3_qlog_dir`: None (off) or an absolute path of at most `most("http3_qlog_dir")`
/// bytes, copied into `h` (the worker names each connection's file after it).
fn optQlogDir(opts: *Object, h: *server_mod.Http3) bool {
    const v = required(opts, "http3_qlog_dir") orelse return false;
    if (py.isNone(v)) return true;
    if (c.PyUnicode_Check(v) == 0) {
        c.PyErr_SetString(c.PyExc_TypeError, "http3_qlog_dir must be a str or None");
        return false;
    }
    const path = py.strView(v) orelse return false;
    const ok = path.len > 0 and path.len <= most("http3_qlog_dir") and path[0] == '/' and
        std.mem.indexOfScalar(u8, path, 0) == null;
    if (!ok) {
        c.PyErr_SetString(
            c.PyExc_ValueError,
            "http3_qlog_dir must be an absolute path of at most " ++
                std.fmt.comptimePrint("{d}", .{most("http3_qlog_dir")}) ++ " bytes",
        );
        return false;
    }
    @memcpy(h.qlog_dir_buf[0..path.len], path);
    h.qlog_dir_len = @intCast(path.len);
    return true;
}

/// A 32-byte key (bytes) into `out`.
fn optKey(opts: *Object, comptime key: [:0]const u8, out: *[32]u8) bool {
    const b = py.bytesView(required(opts, key) orelse return false) orelse {
        c.PyErr_SetString(c.PyExc_TypeError, key ++ " must be bytes");
        return false;
    };
    if (b.len != out.len) {
        _ = c.PyErr_Format(
            c.PyExc_ValueError,
            "%s must be 32 bytes, not %zd",
            key.ptr,
            @as(isize, @intCast(b.len)),
        );
        return false;
    }
    @memcpy(out, b);
    return true;
}

/// `fd` is an open datagram socket (the engine never closes it: Python owns it).
fn isUdpSocket(fd: i32) bool {
    const linux = std.os.linux;
    var kind: c_int = 0;
    var len: linux.socklen_t = @sizeOf(c_int);
    const rc = linux.getsockopt(fd, linux.SOL.SOCKET, linux.SO.TYPE, std.mem.asBytes(&kind), &len);
    return linux.E.init(rc) == .SUCCESS and kind == linux.SOCK.DGRAM;
}

/// compression ("zstd,br,gzip" or ""), its levels, minimum size and content types. Every
/// encoding asked for must load (its library is opened here), else ValueError naming it.
pub fn setCompression(self: *EngineObjectCore, opts: *Object, out: *server_mod.Options) bool {
    const list = py.strView(required(opts, "compression") orelse return false) orelse return false;
    // The levels and the minimum size are in already (`readFields`).
    var o = out.compression;
    if (!o.setOrder(list)) {
        c.PyErr_SetString(
            c.PyExc_ValueError,
            "compression must be a comma list of zstd, br and gzip, each at most once",
        );
        return false;
    }
    const types = required(opts, "compression_types") orelse return false;
    const text = py.strView(types) orelse return false;
    if (text.len > most("compression_types")) {
        c.PyErr_SetString(
            c.PyExc_ValueError,
            std.fmt.comptimePrint(
                "compression_types is longer than {d} bytes",
                .{most("compression_types")},
            ),
        );
        return false;
    }
    if (compression.loadAll(&o)) |missing| {
        _ = c.PyErr_Format(
            c.PyExc_ValueError,
            "compression %s needs %s, which cannot be loaded",
            missing.token().ptr,
            compression.libraryName(missing).ptr,
        );
        return false;
    }
    py.incref(types);
    self.compression_types = types;
    o.types = text;
    out.compression = o;
    if (out.request_decompression) loadDecoders();
    return true;
}

/// The decoders' libraries, opened once at start; each one missing is said once (its
/// coding is then refused with 415 like an unknown one).
fn loadDecoders() void {
    for ([_]compression.Encoding{ .gzip, .br, .zstd }) |e| {
        if (decompression.load(e)) continue;
        var buf: [160]u8 = undefined;
        const line = std.fmt.bufPrintZ(
            &buf,
            "request-decompression: {s} request bodies get 415: {s} cannot be loaded",
            .{ e.token(), decompression.libraryName(e) },
        ) catch continue;
        logInfo(line);
    }
}

/// One INFO line on `zigcorn.error`.
fn logInfo(line: [:0]const u8) void {
    const logging = c.PyImport_ImportModule("logging") orelse return c.PyErr_WriteUnraisable(null);
    defer py.decref(logging);
    const logger = c.PyObject_CallMethod(logging, "getLogger", "s", "zigcorn.error") orelse
        return c.PyErr_WriteUnraisable(null);
    defer py.decref(logger);
    const r = c.PyObject_CallMethod(logger, "info", "s", line.ptr) orelse
        return c.PyErr_WriteUnraisable(null);
    py.decref(r);
}

/// forwarded_allow_ips: list of "*", "unix:", addresses and CIDR networks, or None
/// (proxy headers off).
pub fn setTrust(self: *EngineObjectCore, opts: *Object) bool {
    const list = required(opts, "forwarded_allow_ips") orelse return false;
    if (py.isNone(list)) return true;
    const seq = c.PySequence_Fast(list, "forwarded_allow_ips must be a list of str") orelse
        return false;
    defer py.decref(seq);
    const items = py.seqItems(seq);
    for (0..@intCast(py.seqLen(seq))) |i| {
        const text = py.strView(items[i].?) orelse return false;
        self.trust.add(text) catch |err| {
            const too_many = std.fmt.comptimePrint(
                "too many entries (at most {d})",
                .{most("forwarded_allow_ips")},
            );
            const why = if (err == error.TooMany)
                too_many
            else
                "not an IP address, a CIDR network, '*' or 'unix:'";
            _ = c.PyErr_Format(
                c.PyExc_ValueError,
                "forwarded_allow_ips: %R is %s",
                items[i].?,
                why.ptr,
            );
            return false;
        };
    }
    self.info.trust = &self.trust;
    return true;
}

/// Extra response headers (--header) are copied once into one bytes object that the
/// header slices point into.
pub fn setExtraHeaders(self: *EngineObjectCore, opts: *Object) bool {
    const list = required(opts, "headers") orelse return false;
    const seq = c.PySequence_Fast(list, "headers must be a list of (bytes, bytes)") orelse
        return false;
    defer py.decref(seq);
    const n: usize = @intCast(py.seqLen(seq));
    if (n == 0) return true;
    const items = py.seqItems(seq);
    var total: usize = 0;
    for (0..n) |i| {
        const pair = items[i].?;
        if (c.PyTuple_Check(pair) == 0 or c.PyTuple_Size(pair) != 2) {
            c.PyErr_SetString(c.PyExc_TypeError, "headers must be a list of (bytes, bytes)");
            return false;
        }
        for (0..2) |j| {
            const b = py.bytesView(c.PyTuple_GetItem(pair, @intCast(j)).?) orelse {
                c.PyErr_SetString(c.PyExc_TypeError, "headers must be a list of (bytes, bytes)");
                return false;
            };
            total += b.len;
        }
    }
    const storage = c.PyBytes_FromStringAndSize(null, @intCast(total)) orelse return false;
    self.extra_storage = storage;
    const dst: [*]u8 = @ptrCast(c.PyBytes_AsString(storage));
    const slices = allocator.alloc([2][]const u8, n) catch {
        _ = c.PyErr_NoMemory();
        return false;
    };
    var at: usize = 0;
    for (0..n) |i| {
        const pair = items[i].?;
        for (0..2) |j| {
            const b = py.bytesView(c.PyTuple_GetItem(pair, @intCast(j)).?).?;
            @memcpy(dst[at..][0..b.len], b);
            slices[i][j] = dst[at..][0..b.len];
            at += b.len;
        }
        if (!response.validName(slices[i][0]) or !response.validValue(slices[i][1])) {
            allocator.free(slices);
            c.PyErr_SetString(c.PyExc_ValueError, "invalid header name or value");
            return false;
        }
    }
    self.extra_headers = slices;
    return true;
}

/// The server's options from the dict, or null with a Python exception set: every field
/// `specs` names is read from its option; the rest start from `server.Options`' own
/// initial values (off, empty) and are set by the `set*` functions.
pub fn serverOptions(opts: *Object) ?server_mod.Options {
    comptime checkCovered(server_mod.Options, "", .always);
    if (!knownKeys(opts)) return null;
    var out = initial(server_mod.Options);
    // setOps fills these in when the paths are given.
    out.metrics_path = "";
    out.health_path = "";
    out.ready_path = "";
    out.metrics = null;
    if (!readFields(opts, .always, &out)) return null;
    return out;
}

/// A `T` with every field that has an initial value set to it, in nested structs too
/// (`limits` keeps the chunk-extension bound it does not take from an option); the others
/// are undefined, which `checkCovered` makes sure `readFields` or the caller sets.
fn initial(comptime T: type) T {
    var out: T = undefined;
    inline for (std.meta.fields(T)) |f| {
        if (f.defaultValue()) |v| {
            @field(out, f.name) = v;
        } else if (@typeInfo(f.type) == .@"struct") {
            @field(out, f.name) = initial(f.type);
        }
    }
    return out;
}

/// Fields of `server.Options` and `server.Http3` that no option sets: `serverOptions` and
/// `setHttp3` set them by hand.
const set_by_hand = [_][]const u8{
    "metrics_path", "health_path", "ready_path", "metrics", "retry_key", "reset_key",
};

/// Every field of `T` (at `prefix`) without an initial value is set by an option of
/// group `when` in `specs`, or is one of `set_by_hand`: a field added to `server.Options`
/// without an option does not compile.
fn checkCovered(comptime T: type, comptime prefix: []const u8, comptime when: When) void {
    @setEvalBranchQuota(100_000);
    inline for (std.meta.fields(T)) |f| {
        if (f.default_value_ptr != null) continue;
        const path = prefix ++ f.name;
        const by_hand = for (set_by_hand) |h| {
            if (std.mem.eql(u8, h, path)) break true;
        } else false;
        if (by_hand) continue;
        var whole = false;
        var inner = false;
        for (specs) |s| {
            const field = s.field orelse continue;
            if (s.when != when) continue;
            if (std.mem.eql(u8, field, path)) whole = true;
            if (std.mem.startsWith(u8, field, path ++ ".")) inner = true;
        }
        if (whole) continue;
        if (inner and @typeInfo(f.type) == .@"struct") {
            checkCovered(f.type, path ++ ".", when);
            continue;
        }
        @compileError("no engine option in `specs` sets " ++ @typeName(T) ++ "." ++ f.name);
    }
}

/// New reference: what the server runs with, in `Config`'s units (seconds, bytes, counts).
pub fn report(self: *EngineObjectCore) ?*Object {
    const s = self.server orelse return py.runtimeError("the engine is closed");
    const d = c.PyDict_New() orelse return null;
    const seconds = .{
        .{ "timeout_keep_alive", s.idle_timeouts.timeout_ms },
        .{ "timeout_header", s.header_timeouts.timeout_ms },
        .{ "timeout_body", s.body_timeouts.timeout_ms },
        .{ "timeout_write", s.write_timeouts.timeout_ms },
        .{ "ws_ping_interval", if (s.ws_ping_enabled) s.ws_ping_timeouts.timeout_ms else 0 },
        .{ "ws_ping_timeout", s.ws_pong_timeouts.timeout_ms },
    };
    // Every option with a field, from `s.opts`; then what the server's own state says.
    if (!putFields(d, .always, &s.opts)) return fail(d);
    inline for (seconds) |f| {
        const v = c.PyFloat_FromDouble(@as(f64, @floatFromInt(f[1])) / 1000.0);
        if (!py.dictSetSteal(d, py.intern(f[0]) orelse return fail(d), v)) return fail(d);
    }
    const live = .{
        .{ "busy_poll", s.spin_ns / std.time.ns_per_us },
        .{ "writer_thread", @intFromEnum(s.writer_mode_configured) },
    };
    inline for (live) |f| {
        const v = c.PyLong_FromUnsignedLongLong(f[1]);
        if (!py.dictSetSteal(d, py.intern(f[0]) orelse return fail(d), v)) return fail(d);
    }
    const proxy = py.boolean(self.info.trust != null);
    const proxy_key = py.intern("proxy_headers") orelse return fail(d);
    if (!py.dictSetSteal(d, proxy_key, proxy)) return fail(d);
    const strs = .{
        .{ "metrics_path", s.opts.metrics_path },
        .{ "health_path", s.opts.health_path },
        .{ "ready_path", s.opts.ready_path },
        .{ "root_path", self.info.root_path_utf8 },
        .{ "request_id_header", s.opts.tracing.request_id_header },
        .{ "hsts", s.opts.hsts },
        .{ "compression_types", s.opts.compression.types },
        // What was asked for (`Engine.backend()` says what serves).
        .{ "io_backend", @tagName(s.opts.io.kind) },
    };
    inline for (strs) |f| {
        const key = py.intern(f[0]) orelse return fail(d);
        if (!py.dictSetSteal(d, key, py.str(f[1]))) return fail(d);
    }
    var order: [16]u8 = undefined;
    const order_key = py.intern("compression") orelse return fail(d);
    const order_text = py.str(s.opts.compression.orderText(&order));
    if (!py.dictSetSteal(d, order_key, order_text)) return fail(d);
    if (s.opts.http3) |h| if (!putHttp3(d, h)) return fail(d);
    return d;
}

/// With --http3 on: what this worker serves (never the keys).
fn putHttp3(d: *Object, h: server_mod.Http3) bool {
    if (!putFields(d, .http3, &h)) return false;
    const dir = if (h.qlogDir()) |path| py.str(path) else py.none();
    return py.dictSetSteal(d, py.intern("http3_qlog_dir") orelse return false, dir);
}

fn fail(d: *Object) ?*Object {
    py.decref(d);
    return null;
}
