//! The engine's options: the dict `Server._new_engine` builds from `Config`, read into
//! `server.Options` and the per-server parts of every scope.
const std = @import("std");
const py = @import("py.zig");
const c = py.c;
const Object = py.Object;
const server_mod = @import("server.zig");
const scope = @import("scope.zig");
const response = @import("response.zig");
const metrics = @import("metrics.zig");
const EngineObjectCore = @import("engine.zig").EngineObjectCore;

const allocator = std.heap.c_allocator;

pub fn optBool(opts: *Object, comptime key: [:0]const u8, default: bool) ?bool {
    const v = c.PyDict_GetItemString(opts, key.ptr) orelse return default;
    const t = c.PyObject_IsTrue(v);
    if (t < 0) return null;
    return t != 0;
}

pub fn optInt(opts: *Object, comptime key: [:0]const u8, default: i64) ?i64 {
    const v = c.PyDict_GetItemString(opts, key.ptr) orelse return default;
    if (py.isNone(v)) return default;
    const n = c.PyLong_AsLongLong(v);
    if (n == -1 and c.PyErr_Occurred() != null) return null;
    return n;
}

pub fn optFloatMs(opts: *Object, comptime key: [:0]const u8, default_ms: u64) ?u64 {
    const v = c.PyDict_GetItemString(opts, key.ptr) orelse return default_ms;
    if (py.isNone(v)) return default_ms;
    const f = c.PyFloat_AsDouble(v);
    if (f == -1.0 and c.PyErr_Occurred() != null) return null;
    if (!(f >= 0) or f > 1e9) {
        c.PyErr_SetString(c.PyExc_ValueError, "timeouts must be between 0 and 1e9 seconds");
        return null;
    }
    return @intFromFloat(f * 1000.0);
}

/// Engine(on_request, wake, stream_class, options: dict)
pub fn setServerInfo(self: *EngineObjectCore, opts: *Object) bool {
    const root = c.PyDict_GetItemString(opts, "root_path") orelse blk: {
        break :blk py.intern("") orelse return false;
    };
    if (c.PyUnicode_Check(root) == 0) {
        c.PyErr_SetString(c.PyExc_TypeError, "root_path must be a str");
        return false;
    }
    py.incref(root);
    self.info.root_path = root;
    self.info.root_path_utf8 = py.strView(root) orelse return false;
    const scheme = c.PyDict_GetItemString(opts, "scheme") orelse py.intern("http") orelse return false;
    py.incref(scheme);
    self.info.scheme = scheme;
    self.info.server = py.none();
    self.info.state = null;
    return true;
}

/// metrics_path / health_path (str or None) and metrics_slot (int): engine-answered paths.
pub fn setOps(self: *EngineObjectCore, opts: *Object, out: *server_mod.Options) bool {
    inline for (.{ "metrics_path", "health_path" }) |key| {
        if (c.PyDict_GetItemString(opts, key)) |v| {
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
    }
    if (self.metrics_path == null) return true;
    const index = optInt(opts, "metrics_slot", 0) orelse return false;
    metrics.init(1) catch {
        c.PyErr_SetString(c.PyExc_OSError, "could not map the metrics counters");
        return false;
    };
    const pid: u64 = @intCast(std.os.linux.getpid());
    const slot = metrics.claim(@intCast(@max(index, 0)), pid) orelse {
        c.PyErr_SetString(c.PyExc_ValueError, "metrics_slot out of range");
        return false;
    };
    out.metrics = slot;
    return true;
}

/// forwarded_allow_ips: list of "*", "unix:", addresses and CIDR networks, or None
/// (proxy headers off).
pub fn setTrust(self: *EngineObjectCore, opts: *Object) bool {
    const list = c.PyDict_GetItemString(opts, "forwarded_allow_ips") orelse return true;
    if (py.isNone(list)) return true;
    const seq = c.PySequence_Fast(list, "forwarded_allow_ips must be a list of str") orelse return false;
    defer py.decref(seq);
    const items = py.seqItems(seq);
    for (0..@intCast(py.seqLen(seq))) |i| {
        const text = py.strView(items[i].?) orelse return false;
        self.trust.add(text) catch |err| {
            const why = if (err == error.TooMany) "too many entries (at most 64)" else "not an IP address, a CIDR network, '*' or 'unix:'";
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
    const list = c.PyDict_GetItemString(opts, "headers") orelse return true;
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
    const pool_buffer_bytes = @import("pool.zig").buffer_bytes;
    return server_mod.Options{
        .backlog = @intCast(std.math.clamp(optInt(opts, "backlog", 2048) orelse return null, 1, 65535)),
        .timeout_keep_alive_ms = optFloatMs(opts, "timeout_keep_alive", 5_000) orelse return null,
        .timeout_header_ms = optFloatMs(opts, "timeout_header", 30_000) orelse return null,
        .timeout_body_ms = optFloatMs(opts, "timeout_body", 30_000) orelse return null,
        .timeout_write_ms = optFloatMs(opts, "timeout_write", 30_000) orelse return null,
        .server_header = optBool(opts, "server_header", true) orelse return null,
        .date_header = optBool(opts, "date_header", true) orelse return null,
        .connections_max = @intCast(std.math.clamp(optInt(opts, "limit_connections", 100_000) orelse return null, 1, std.math.maxInt(u32))),
        .keep_alive_requests_max = @intCast(std.math.clamp(optInt(opts, "limit_keep_alive_requests", 10_000) orelse return null, 1, std.math.maxInt(u32))),
        .body_bytes_max = @intCast(std.math.clamp(optInt(opts, "limit_request_body", 1 << 30) orelse return null, 0, std.math.maxInt(i64))),
        .ws_enabled = (optBool(opts, "ws", true) orelse return null) and c.PyDict_GetItemString(opts, "websocket_class") != null,
        .ws_deflate = optBool(opts, "ws_per_message_deflate", true) orelse return null,
        .ws_message_bytes_max = @intCast(std.math.clamp(optInt(opts, "ws_max_size", 16 * 1024 * 1024) orelse return null, 1, std.math.maxInt(u32))),
        .ws_queue_max = @intCast(std.math.clamp(optInt(opts, "ws_max_queue", 32) orelse return null, 1, 1 << 20)),
        .ws_ping_interval_ms = optFloatMs(opts, "ws_ping_interval", 0) orelse return null,
        .ws_ping_timeout_ms = optFloatMs(opts, "ws_ping_timeout", 20_000) orelse return null,
        .spin_ns = @as(u64, @intCast(std.math.clamp(optInt(opts, "busy_poll_us", 0) orelse return null, 0, 1_000_000))) * 1000,
        .writer = std.meta.intToEnum(server_mod.WriterMode, std.math.clamp(optInt(opts, "writer", 1) orelse return null, 0, 2)) catch unreachable,
        .limits = .{
            // The whole head must fit in one pooled read buffer.
            .head_bytes_max = @intCast(std.math.clamp(optInt(opts, "limit_request_head", pool_buffer_bytes) orelse return null, 256, pool_buffer_bytes)),
            .target_bytes_max = @intCast(std.math.clamp(optInt(opts, "limit_request_line", 8190) orelse return null, 16, pool_buffer_bytes)),
            .headers_count_max = @intCast(std.math.clamp(optInt(opts, "limit_request_fields", 100) orelse return null, 1, 128)),
        },
    };
}
