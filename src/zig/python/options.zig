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
const io = @import("../os/io.zig");
const uring = @import("../os/io_uring.zig");
const forwarded = @import("../features/forwarded.zig");
const EngineObjectCore = @import("engine.zig").EngineObjectCore;

const allocator = std.heap.c_allocator;

// Every option is required: the defaults and help of each live in one place,
// `zigcorn/config.py`, and the engine runs with exactly what it is given. It refuses a
// value it cannot represent instead of clamping it to something else. Its bounds are
// written once, in `limits` and `maxima` below, which `Config` reads (`_core.LIMITS`,
// `_core.MAXIMA`); the checks here stay as the contract for a direct caller.

/// A required option, or null with KeyError set.
pub fn required(opts: *Object, comptime key: [:0]const u8) ?*Object {
    return c.PyDict_GetItemString(opts, key.ptr) orelse {
        _ = c.PyErr_Format(c.PyExc_KeyError, "engine option '%s' is missing", key.ptr);
        return null;
    };
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
        _ = c.PyErr_Format(c.PyExc_ValueError, "engine option '%s' must be from %lld to %lld, not %R", key.ptr, @as(c_longlong, @intCast(low)), @as(c_longlong, @intCast(high)), v);
        return null;
    }
    if (n < low or n > high) {
        _ = c.PyErr_Format(c.PyExc_ValueError, "engine option '%s' must be from %lld to %lld, not %lld", key.ptr, @as(c_longlong, @intCast(low)), @as(c_longlong, @intCast(high)), n);
        return null;
    }
    return @intCast(n);
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
        _ = c.PyErr_Format(c.PyExc_ValueError, "engine option '%s' must be a power of two, not %lld", key.ptr, @as(c_longlong, @intCast(n)));
        return null;
    }
    return n;
}

/// Seconds (a float within the option's bounds in `limits`) as milliseconds.
pub fn optMs(opts: *Object, comptime key: [:0]const u8) ?u64 {
    const l = comptime limit(key);
    const f = c.PyFloat_AsDouble(required(opts, key) orelse return null);
    if (f == -1.0 and c.PyErr_Occurred() != null) return null;
    if (!(f >= @as(f64, @floatFromInt(l.low))) or f > @as(f64, @floatFromInt(l.high))) {
        _ = c.PyErr_Format(c.PyExc_ValueError, "engine option '%s' must be from %lld to %lld seconds", key.ptr, @as(c_longlong, l.low), @as(c_longlong, l.high));
        return null;
    }
    return @intFromFloat(f * 1000.0);
}

/// The longest timeout or interval the engine takes (about 31 years).
pub const seconds_max = 1_000_000_000;

/// One of the engine's bounds: an option's lowest and highest value, inclusive.
pub const Limit = struct { name: [:0]const u8, low: i64, high: i64 };

/// The engine's bounds of its number options: what `optLimited`, `optPowerOfTwo` and
/// `optMs` check, and (as `_core.LIMITS`, {name: (low, high)}) what `Config`'s settings
/// take their bounds from, so each number is written here only. Where the engine takes
/// 0 for "off" (the TCP options, the rates, the connection timeout), `Config` says None
/// and its lowest is 1; it may cap lower (`busy_poll`, `ws_max_queue`), never higher.
pub const limits = [_]Limit{
    .{ .name = "limit_request_head", .low = request_head_bytes_min, .high = request_head_bytes_max },
    .{ .name = "limit_request_line", .low = 16, .high = request_head_bytes_max },
    .{ .name = "limit_request_fields", .low = 1, .high = request_fields_max },
    .{ .name = "limit_request_body", .low = 0, .high = std.math.maxInt(i64) },
    .{ .name = "limit_connections", .low = 1, .high = std.math.maxInt(u32) },
    .{ .name = "limit_keep_alive_requests", .low = 1, .high = std.math.maxInt(u32) },
    .{ .name = "limit_connections_per_ip", .low = 0, .high = std.math.maxInt(u32) },
    .{ .name = "limit_request_rate", .low = 0, .high = 1_000_000 },
    .{ .name = "limit_request_burst", .low = 0, .high = 1_000_000 },
    .{ .name = "limit_request_table", .low = 4, .high = 1 << 24 },
    .{ .name = "timeout_keep_alive", .low = 0, .high = seconds_max },
    .{ .name = "timeout_header", .low = 0, .high = seconds_max },
    .{ .name = "timeout_body", .low = 0, .high = seconds_max },
    .{ .name = "timeout_write", .low = 0, .high = seconds_max },
    .{ .name = "timeout_connection", .low = 0, .high = std.math.maxInt(u32) },
    .{ .name = "ws_max_size", .low = 1, .high = std.math.maxInt(u32) },
    .{ .name = "ws_max_queue", .low = 1, .high = std.math.maxInt(u32) },
    .{ .name = "ws_ping_interval", .low = 0, .high = seconds_max },
    .{ .name = "ws_ping_timeout", .low = 0, .high = seconds_max },
    .{ .name = "busy_poll", .low = 0, .high = busy_poll_us_max },
    .{ .name = "http2_max_concurrent_streams", .low = 1, .high = std.math.maxInt(i32) },
    .{ .name = "io_uring_buffers", .low = uring.buffers_min, .high = uring.buffers_max },
    .{ .name = "io_uring_buffer_size", .low = uring.buffer_bytes_min, .high = uring.buffer_bytes_max },
    .{ .name = "tcp_keepalive_idle", .low = 0, .high = 32767 },
    .{ .name = "tcp_keepalive_interval", .low = 0, .high = 32767 },
    .{ .name = "tcp_keepalive_count", .low = 0, .high = 127 },
    .{ .name = "tcp_user_timeout", .low = 0, .high = std.math.maxInt(i32) },
    .{ .name = "tcp_fastopen", .low = 0, .high = 65535 },
    .{ .name = "compression_min_size", .low = 0, .high = std.math.maxInt(u32) },
    .{ .name = "compression_gzip_level", .low = 1, .high = 9 },
    .{ .name = "compression_brotli_level", .low = 0, .high = 11 },
    .{ .name = "compression_zstd_level", .low = 1, .high = 19 },
    .{ .name = "static_expires", .low = 0, .high = std.math.maxInt(u32) },
    .{ .name = "ssl_session_cache", .low = 0, .high = 1 << 20 },
    // HTTP/3 (`setHttp3`): the index and the count fit the CID's one byte and `Http3`'s u8.
    .{ .name = "http3_fd", .low = 0, .high = std.math.maxInt(i32) },
    .{ .name = "http3_alt_svc_port", .low = 1, .high = 65535 },
    .{ .name = "http3_worker_index", .low = 0, .high = std.math.maxInt(u8) - 1 },
    .{ .name = "http3_workers", .low = 1, .high = std.math.maxInt(u8) },
    .{ .name = "http3_idle_timeout_ms", .low = 1_000, .high = 3_600_000 },
};

/// The bounds of option `name` in `limits`.
pub fn limit(comptime name: []const u8) Limit {
    return comptime for (limits) |l| {
        if (std.mem.eql(u8, l.name, name)) break l;
    } else @compileError("no engine limit for option " ++ name);
}

/// The most the engine takes of a list or text option, in its unit.
pub const Maximum = struct { name: [:0]const u8, most: i64 };

/// The engine's caps on its list and text options, checked here and exported as
/// `_core.MAXIMA` ({name: most}) for `Config`.
pub const maxima = [_]Maximum{
    .{ .name = "compression_types", .most = 4096 }, // bytes of the comma list
    .{ .name = "request_id_header", .most = 64 }, // bytes of the name
    .{ .name = "forwarded_allow_ips", .most = forwarded.networks_max }, // entries
    .{ .name = "metrics_buckets", .most = metrics.buckets_max }, // bounds
    .{ .name = "metrics_bucket_seconds", .most = 1_000_000 }, // each bound, in seconds
    .{ .name = "static", .most = static_mounts_max }, // mounts
    .{ .name = "static_route", .most = 1024 }, // bytes of a mount's route
};

/// The most the engine takes of option `name` (`maxima`).
pub fn most(comptime name: []const u8) comptime_int {
    return comptime for (maxima) |m| {
        if (std.mem.eql(u8, m.name, name)) break m.most;
    } else @compileError("no engine maximum for option " ++ name);
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

/// metrics_path / health_path / ready_path (str or None) and metrics_slot (int): engine-answered paths.
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
    const index = optInt(opts, "metrics_slot", usize, 0, metrics.slots_max - 1) orelse return false;
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
    const seq = c.PySequence_Fast(v, "metrics_buckets must be a list of seconds") orelse return null;
    defer py.decref(seq);
    const n: usize = @intCast(py.seqLen(seq));
    if (n > most("metrics_buckets")) {
        c.PyErr_SetString(c.PyExc_ValueError, std.fmt.comptimePrint("metrics_buckets: at most {d} bounds", .{most("metrics_buckets")}));
        return null;
    }
    const items = py.seqItems(seq);
    for (0..n) |i| {
        const f = c.PyFloat_AsDouble(items[i].?);
        if (f == -1.0 and c.PyErr_Occurred() != null) return null;
        if (!(f > 0) or f > most("metrics_bucket_seconds")) {
            c.PyErr_SetString(c.PyExc_ValueError, std.fmt.comptimePrint("metrics_buckets: each bound is above 0 and at most {d} seconds", .{most("metrics_bucket_seconds")}));
            return null;
        }
        out[i] = @intFromFloat(@round(f * 1e6));
    }
    if (!metrics.validBounds(out[0..n])) {
        c.PyErr_SetString(c.PyExc_ValueError, "metrics_buckets must rise, with at least one bound (microsecond precision)");
        return null;
    }
    return n;
}

/// request_id_header (a lower-case str or None), trace_context, server_timing.
pub fn setTracing(self: *EngineObjectCore, opts: *Object, out: *server_mod.Options) bool {
    out.tracing.trace_context = optBool(opts, "trace_context") orelse return false;
    out.tracing.server_timing = optBool(opts, "server_timing") orelse return false;
    const name = required(opts, "request_id_header") orelse return false;
    if (py.isNone(name)) return true;
    const text = py.strView(name) orelse return false;
    if (text.len == 0 or text.len > most("request_id_header") or !response.validName(text)) {
        c.PyErr_SetString(c.PyExc_ValueError, std.fmt.comptimePrint("request_id_header must be a header name (a token of at most {d} bytes)", .{most("request_id_header")}));
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
/// static_dotfiles, static_precompressed; access_log (the engine's own answers are logged). Each directory is opened once, here; the engine owns the mounts.
pub fn setStatic(self: *EngineObjectCore, opts: *Object, out: *server_mod.Options) bool {
    const list = required(opts, "static") orelse return false;
    const expires = required(opts, "static_expires") orelse return false;
    // Checked with or without mounts, like every option.
    const expires_s: ?u32 = if (py.isNone(expires)) null else optLimited(opts, "static_expires", u32) orelse return false;
    const dotfiles = optBool(opts, "static_dotfiles") orelse return false;
    const precompressed = optBool(opts, "static_precompressed") orelse return false;
    out.access_log = optBool(opts, "access_log") orelse return false;
    const seq = c.PySequence_Fast(list, "static must be a list of (route, directory)") orelse return false;
    defer py.decref(seq);
    const n: usize = @intCast(py.seqLen(seq));
    if (n == 0) return true;
    if (n > most("static")) {
        c.PyErr_SetString(c.PyExc_ValueError, std.fmt.comptimePrint("static: at most {d} mounts", .{most("static")}));
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
    cfg.* = .{ .mounts = mounts[0..0], .mounts_cap = n, .dotfiles = dotfiles, .precompressed = precompressed, .extra = self.extra_headers, .expires = expires_s };
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
        if (route.len == 0 or route[0] != '/' or route.len > most("static_route") or dir.len == 0 or dir.len >= 4096) {
            c.PyErr_SetString(c.PyExc_ValueError, "static: a route starts with '/', and a directory is a path");
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
        const rc = std.os.linux.open(path[0..dir.len :0], .{ .PATH = true, .DIRECTORY = true, .CLOEXEC = true }, 0);
        if (std.os.linux.E.init(rc) != .SUCCESS) {
            allocator.free(owned);
            _ = c.PyErr_Format(c.PyExc_OSError, "static: %s is not a directory that can be opened", path[0..dir.len :0].ptr);
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

pub const static_mounts_max = 64;

/// The TCP options (0 = the kernel's default) and the HSTS value ("" = none).
pub fn setEdge(self: *EngineObjectCore, opts: *Object, out: *server_mod.Options) bool {
    out.tcp = .{
        .nodelay = optBool(opts, "tcp_nodelay") orelse return false,
        .keepalive_idle_s = optLimited(opts, "tcp_keepalive_idle", u32) orelse return false,
        .keepalive_interval_s = optLimited(opts, "tcp_keepalive_interval", u32) orelse return false,
        .keepalive_count = optLimited(opts, "tcp_keepalive_count", u32) orelse return false,
        .user_timeout_ms = optLimited(opts, "tcp_user_timeout", u32) orelse return false,
        .fastopen = optLimited(opts, "tcp_fastopen", u32) orelse return false,
    };
    out.connections_per_ip_max = optLimited(opts, "limit_connections_per_ip", u32) orelse return false;
    out.rate_limit = .{
        .rate = optLimited(opts, "limit_request_rate", u32) orelse return false,
        .burst = optLimited(opts, "limit_request_burst", u32) orelse return false,
        .table_entries = optPowerOfTwo(opts, "limit_request_table", u32) orelse return false,
    };
    if ((out.rate_limit.rate == 0) != (out.rate_limit.burst == 0)) {
        c.PyErr_SetString(c.PyExc_ValueError, "limit_request_rate and limit_request_burst are both 0 or both set");
        return false;
    }
    // After setTrust: the rate limit counts the client the trusted proxies name, and
    // only they may send a PROXY header.
    out.trust = self.info.trust;
    out.proxy_protocol = optBool(opts, "proxy_protocol") orelse return false;
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
    var h = server_mod.Http3{
        .fd = fd,
        .alt_svc_port = optLimited(opts, "http3_alt_svc_port", u16) orelse return false,
        .retry = std.meta.intToEnum(server_mod.Http3Retry, optInt(opts, "http3_retry", u8, 0, 2) orelse return false) catch unreachable,
        .retry_key = undefined,
        .reset_key = undefined,
        .worker_index = optLimited(opts, "http3_worker_index", u8) orelse return false,
        .workers = optLimited(opts, "http3_workers", u8) orelse return false,
        .idle_timeout_ms = optLimited(opts, "http3_idle_timeout_ms", u32) orelse return false,
    };
    if (h.worker_index >= h.workers) {
        _ = c.PyErr_Format(c.PyExc_ValueError, "http3_worker_index %d must be below http3_workers %d", @as(c_int, h.worker_index), @as(c_int, h.workers));
        return false;
    }
    if (!optKey(opts, "http3_retry_key", &h.retry_key) or !optKey(opts, "http3_reset_key", &h.reset_key)) return false;
    h.setAltSvc();
    out.http3 = h;
    return true;
}

/// A 32-byte key (bytes) into `out`.
fn optKey(opts: *Object, comptime key: [:0]const u8, out: *[32]u8) bool {
    const b = py.bytesView(required(opts, key) orelse return false) orelse {
        c.PyErr_SetString(c.PyExc_TypeError, key ++ " must be bytes");
        return false;
    };
    if (b.len != out.len) {
        _ = c.PyErr_Format(c.PyExc_ValueError, "%s must be 32 bytes, not %zd", key.ptr, @as(isize, @intCast(b.len)));
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
    var o = compression.Options{
        .min_size = optLimited(opts, "compression_min_size", u64) orelse return false,
        .gzip_level = optLimited(opts, "compression_gzip_level", u8) orelse return false,
        .brotli_level = optLimited(opts, "compression_brotli_level", u8) orelse return false,
        .zstd_level = optLimited(opts, "compression_zstd_level", u8) orelse return false,
    };
    if (!o.setOrder(list)) {
        c.PyErr_SetString(c.PyExc_ValueError, "compression must be a comma list of zstd, br and gzip, each at most once");
        return false;
    }
    const types = required(opts, "compression_types") orelse return false;
    const text = py.strView(types) orelse return false;
    if (text.len > most("compression_types")) {
        c.PyErr_SetString(c.PyExc_ValueError, std.fmt.comptimePrint("compression_types is longer than {d} bytes", .{most("compression_types")}));
        return false;
    }
    if (compression.loadAll(&o)) |missing| {
        _ = c.PyErr_Format(c.PyExc_ValueError, "compression %s needs %s, which cannot be loaded", missing.token().ptr, compression.libraryName(missing).ptr);
        return false;
    }
    py.incref(types);
    self.compression_types = types;
    o.types = text;
    out.compression = o;
    out.request_decompression = optBool(opts, "request_decompression") orelse return false;
    if (out.request_decompression) loadDecoders();
    return true;
}

/// The decoders' libraries, opened once at start; each one missing is said once (its
/// coding is then refused with 415 like an unknown one).
fn loadDecoders() void {
    for ([_]compression.Encoding{ .gzip, .br, .zstd }) |e| {
        if (decompression.load(e)) continue;
        var buf: [160]u8 = undefined;
        const line = std.fmt.bufPrintZ(&buf, "request-decompression: {s} request bodies get 415: {s} cannot be loaded", .{ e.token(), decompression.libraryName(e) }) catch continue;
        logInfo(line);
    }
}

/// One INFO line on `zigcorn.error`.
fn logInfo(line: [:0]const u8) void {
    const logging = c.PyImport_ImportModule("logging") orelse return c.PyErr_WriteUnraisable(null);
    defer py.decref(logging);
    const logger = c.PyObject_CallMethod(logging, "getLogger", "s", "zigcorn.error") orelse return c.PyErr_WriteUnraisable(null);
    defer py.decref(logger);
    const r = c.PyObject_CallMethod(logger, "info", "s", line.ptr) orelse return c.PyErr_WriteUnraisable(null);
    py.decref(r);
}

/// forwarded_allow_ips: list of "*", "unix:", addresses and CIDR networks, or None
/// (proxy headers off).
pub fn setTrust(self: *EngineObjectCore, opts: *Object) bool {
    const list = required(opts, "forwarded_allow_ips") orelse return false;
    if (py.isNone(list)) return true;
    const seq = c.PySequence_Fast(list, "forwarded_allow_ips must be a list of str") orelse return false;
    defer py.decref(seq);
    const items = py.seqItems(seq);
    for (0..@intCast(py.seqLen(seq))) |i| {
        const text = py.strView(items[i].?) orelse return false;
        self.trust.add(text) catch |err| {
            const why = if (err == error.TooMany) std.fmt.comptimePrint("too many entries (at most {d})", .{most("forwarded_allow_ips")}) else "not an IP address, a CIDR network, '*' or 'unix:'";
            _ = c.PyErr_Format(c.PyExc_ValueError, "forwarded_allow_ips: %R is %s", items[i].?, why.ptr);
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
    const seq = c.PySequence_Fast(list, "headers must be a list of (bytes, bytes)") orelse return false;
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

/// The server's options from the dict, or null with a Python exception set.
pub fn serverOptions(opts: *Object) ?server_mod.Options {
    return server_mod.Options{
        // setOps fills these in when the paths are given.
        .metrics_path = "",
        .health_path = "",
        .ready_path = "",
        .metrics = null,
        .timeout_keep_alive_ms = optMs(opts, "timeout_keep_alive") orelse return null,
        .timeout_header_ms = optMs(opts, "timeout_header") orelse return null,
        .timeout_body_ms = optMs(opts, "timeout_body") orelse return null,
        .timeout_write_ms = optMs(opts, "timeout_write") orelse return null,
        .timeout_connection_s = optLimited(opts, "timeout_connection", u32) orelse return null,
        .server_header = optBool(opts, "server_header") orelse return null,
        .date_header = optBool(opts, "date_header") orelse return null,
        .connections_max = optLimited(opts, "limit_connections", u32) orelse return null,
        .keep_alive_requests_max = optLimited(opts, "limit_keep_alive_requests", u32) orelse return null,
        .body_bytes_max = optLimited(opts, "limit_request_body", u64) orelse return null,
        .ws_enabled = optBool(opts, "ws") orelse return null,
        .ws_deflate = optBool(opts, "ws_per_message_deflate") orelse return null,
        .ws_message_bytes_max = optLimited(opts, "ws_max_size", u64) orelse return null,
        .ws_queue_max = optLimited(opts, "ws_max_queue", u32) orelse return null,
        .ws_ping_interval_ms = optMs(opts, "ws_ping_interval") orelse return null,
        .ws_ping_timeout_ms = optMs(opts, "ws_ping_timeout") orelse return null,
        .spin_ns = (optLimited(opts, "busy_poll", u64) orelse return null) * std.time.ns_per_us,
        .http2 = optBool(opts, "http2") orelse return null,
        .h2c_upgrade = optBool(opts, "h2c_upgrade") orelse return null,
        .h2_max_streams = optLimited(opts, "http2_max_concurrent_streams", u32) orelse return null,
        .writer = std.meta.intToEnum(server_mod.WriterMode, optInt(opts, "writer_thread", u8, 0, 2) orelse return null) catch unreachable,
        .io = .{
            .kind = std.meta.intToEnum(io.Kind, optInt(opts, "io_backend", u8, 0, 1) orelse return null) catch unreachable,
            .uring = .{
                .buffers = optPowerOfTwo(opts, "io_uring_buffers", u16) orelse return null,
                .buffer_bytes = optPowerOfTwo(opts, "io_uring_buffer_size", u32) orelse return null,
            },
        },
        .limits = .{
            .head_bytes_max = optLimited(opts, "limit_request_head", usize) orelse return null,
            .target_bytes_max = optLimited(opts, "limit_request_line", usize) orelse return null,
            .headers_count_max = optLimited(opts, "limit_request_fields", usize) orelse return null,
        },
    };
}

/// The engine's own limits, which `Config` validates against (`_core.LIMITS`).
pub const request_head_bytes_max = server_mod.request_head_bytes_max;
pub const request_head_bytes_min = 256;
pub const request_fields_max = server_mod.request_fields_max;
/// A busy poll is a short spin: longer than a second would be a hang.
pub const busy_poll_us_max = 1_000_000;

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
    inline for (seconds) |f| {
        if (!py.dictSetSteal(d, py.intern(f[0]) orelse return fail(d), c.PyFloat_FromDouble(@as(f64, @floatFromInt(f[1])) / 1000.0))) return fail(d);
    }
    if (!putCounts(d, s)) return fail(d);
    const bools = .{
        .{ "server_header", s.opts.server_header },
        .{ "date_header", s.opts.date_header },
        .{ "ws", s.opts.ws_enabled },
        .{ "ws_per_message_deflate", s.opts.ws_deflate },
        .{ "http2", s.opts.http2 },
        .{ "h2c_upgrade", s.opts.h2c_upgrade },
        .{ "proxy_headers", self.info.trust != null },
        .{ "trace_context", s.opts.tracing.trace_context },
        .{ "tcp_nodelay", s.opts.tcp.nodelay },
        .{ "proxy_protocol", s.opts.proxy_protocol },
        .{ "server_timing", s.opts.tracing.server_timing },
        .{ "request_decompression", s.opts.request_decompression },
    };
    inline for (bools) |f| {
        if (!py.dictSetSteal(d, py.intern(f[0]) orelse return fail(d), py.boolean(f[1]))) return fail(d);
    }
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
        if (!py.dictSetSteal(d, py.intern(f[0]) orelse return fail(d), py.str(f[1]))) return fail(d);
    }
    var order: [16]u8 = undefined;
    if (!py.dictSetSteal(d, py.intern("compression") orelse return fail(d), py.str(s.opts.compression.orderText(&order)))) return fail(d);
    if (s.opts.http3) |h| if (!putHttp3(d, h)) return fail(d);
    return d;
}

/// The report's counts and sizes (false: an error is set).
fn putCounts(d: *Object, s: *const server_mod.Server) bool {
    const ints = .{
        .{ "limit_connections", s.opts.connections_max },
        .{ "timeout_connection", s.opts.timeout_connection_s },
        .{ "limit_keep_alive_requests", s.opts.keep_alive_requests_max },
        .{ "limit_request_body", s.opts.body_bytes_max },
        .{ "limit_request_head", s.opts.limits.head_bytes_max },
        .{ "limit_request_line", s.opts.limits.target_bytes_max },
        .{ "limit_request_fields", s.opts.limits.headers_count_max },
        .{ "ws_max_size", s.opts.ws_message_bytes_max },
        .{ "ws_max_queue", s.opts.ws_queue_max },
        .{ "busy_poll", s.spin_ns / std.time.ns_per_us },
        .{ "writer_thread", @intFromEnum(s.writer_mode_configured) },
        .{ "http2_max_concurrent_streams", s.opts.h2_max_streams },
        .{ "io_uring_buffers", s.opts.io.uring.buffers },
        .{ "io_uring_buffer_size", s.opts.io.uring.buffer_bytes },
        .{ "tcp_keepalive_idle", s.opts.tcp.keepalive_idle_s },
        .{ "tcp_keepalive_interval", s.opts.tcp.keepalive_interval_s },
        .{ "tcp_keepalive_count", s.opts.tcp.keepalive_count },
        .{ "tcp_user_timeout", s.opts.tcp.user_timeout_ms },
        .{ "tcp_fastopen", s.opts.tcp.fastopen },
        .{ "limit_connections_per_ip", s.opts.connections_per_ip_max },
        .{ "limit_request_rate", s.opts.rate_limit.rate },
        .{ "limit_request_burst", s.opts.rate_limit.burst },
        .{ "limit_request_table", s.opts.rate_limit.table_entries },
        .{ "compression_min_size", s.opts.compression.min_size },
        .{ "compression_gzip_level", s.opts.compression.gzip_level },
        .{ "compression_brotli_level", s.opts.compression.brotli_level },
        .{ "compression_zstd_level", s.opts.compression.zstd_level },
    };
    inline for (ints) |f| {
        if (!py.dictSetSteal(d, py.intern(f[0]) orelse return false, c.PyLong_FromUnsignedLongLong(@intCast(f[1])))) return false;
    }
    return true;
}

/// With --http3 on: what this worker serves (never the keys).
fn putHttp3(d: *Object, h: server_mod.Http3) bool {
    const ints = .{
        .{ "http3_fd", h.fd },
        .{ "http3_alt_svc_port", h.alt_svc_port },
        .{ "http3_retry", @intFromEnum(h.retry) },
        .{ "http3_worker_index", h.worker_index },
        .{ "http3_workers", h.workers },
        .{ "http3_idle_timeout_ms", h.idle_timeout_ms },
    };
    inline for (ints) |f| {
        if (!py.dictSetSteal(d, py.intern(f[0]) orelse return false, c.PyLong_FromLongLong(@intCast(f[1])))) return false;
    }
    return true;
}

fn fail(d: *Object) ?*Object {
    py.decref(d);
    return null;
}
