//! The engine's option table: every option the options dict carries (`python/options.zig`
//! reads it), its kind, its bounds and the field of `server.Options` it sets. `Config`
//! reads the bounds back (`_core.LIMITS`, `_core.MAXIMA`) and the settings table
//! (`zigcorn/settings.py`) is checked against the names (`_core.OPTIONS`).
const std = @import("std");
const server_mod = @import("../core/server.zig");
const metrics = @import("../features/metrics.zig");
const uring = @import("../os/io_uring.zig");
const forwarded = @import("../features/forwarded.zig");
const quic_connection = @import("../quic/connection.zig");
const core_options = @import("../core/options.zig");

// Every option is required: the defaults and help of each live in one place, the
// settings table (`zigcorn/settings.py`), and the engine runs with exactly what it is
// given. It refuses a value it cannot represent instead of clamping it to something
// else. What the engine knows of each option (its kind, its bounds, the `server.Options`
// field it sets) is written once, in `specs` below: the readers and the echo walk it,
// and `Config` reads it back as `_core.LIMITS`, `_core.MAXIMA` and `_core.OPTIONS`.

/// How an option's value is read, and what becomes of it in its field.
pub const Kind = enum {
    /// Truthiness, as `bool`.
    flag,
    /// An integer within `low`..`high`.
    int,
    /// An integer within `low`..`high` that is a power of two.
    power_of_two,
    /// Seconds, a float within `low`..`high`, kept as milliseconds.
    seconds,
    /// Microseconds, an integer within `low`..`high`, kept as nanoseconds.
    micros,
    /// An enum field's value, as its integer: the enum's values are its bounds.
    choice,
    /// Read by the `set*` function that says so (text, lists, paths, keys, callables).
    other,
};

/// When the options dict carries an option: always, with TLS on (`ssl_certfile` given),
/// with HTTP/3 on (`http3_fd` not -1), or as the server's plumbing (not a setting).
pub const When = enum { always, tls, http3, plumbing };

/// One engine option. `field` is the path of the field it sets (in `server.Options`, or
/// `server.Http3` for the `http3` ones), read generically by `readFields`; null when a
/// `set*` function reads it.
pub const Spec = struct {
    name: [:0]const u8,
    kind: Kind,
    low: i64 = 0,
    high: i64 = 0,
    field: ?[]const u8 = null,
    when: When = .always,

    fn bounded(s: Spec) bool {
        return switch (s.kind) {
            .int, .power_of_two, .seconds, .micros => true,
            .flag, .choice, .other => false,
        };
    }
};

/// The longest timeout or interval the engine takes (about 31 years).
pub const seconds_max = 1_000_000_000;
const u32_max = std.math.maxInt(u32);

/// Every option the engine reads, its bounds and where it goes. Where the engine takes 0
/// for "off" (the TCP options, the rates, the connection timeout), `Config` says None and
/// its lowest is 1; it may cap lower (`busy_poll`, `ws_max_queue`), never higher.
pub const specs = [_]Spec{
    .{ .name = "root_path", .kind = .other },
    .{ .name = "headers", .kind = .other },
    .{ .name = "server_header", .kind = .flag, .field = "server_header" },
    .{ .name = "date_header", .kind = .flag, .field = "date_header" },
    .{
        .name = "timeout_keep_alive",
        .kind = .seconds,
        .high = seconds_max,
        .field = "timeout_keep_alive_ms",
    },
    .{
        .name = "timeout_header",
        .kind = .seconds,
        .high = seconds_max,
        .field = "timeout_header_ms",
    },
    .{ .name = "timeout_body", .kind = .seconds, .high = seconds_max, .field = "timeout_body_ms" },
    .{
        .name = "timeout_write",
        .kind = .seconds,
        .high = seconds_max,
        .field = "timeout_write_ms",
    },
    .{
        .name = "timeout_connection",
        .kind = .int,
        .high = u32_max,
        .field = "timeout_connection_s",
    },
    .{ .name = "writer_thread", .kind = .choice, .field = "writer" },
    .{ .name = "io_backend", .kind = .choice, .field = "io.kind" },
    .{
        .name = "io_uring_buffers",
        .kind = .power_of_two,
        .low = uring.buffers_min,
        .high = uring.buffers_max,
        .field = "io.uring.buffers",
    },
    .{
        .name = "io_uring_buffer_size",
        .kind = .power_of_two,
        .low = uring.buffer_bytes_min,
        .high = uring.buffer_bytes_max,
        .field = "io.uring.buffer_bytes",
    },
    .{ .name = "http2", .kind = .flag, .field = "http2" },
    .{ .name = "h2c_upgrade", .kind = .flag, .field = "h2c_upgrade" },
    .{
        .name = "http2_max_concurrent_streams",
        .kind = .int,
        .low = 1,
        .high = std.math.maxInt(i32),
        .field = "h2_max_streams",
    },
    .{ .name = "busy_poll", .kind = .micros, .high = busy_poll_us_max, .field = "spin_ns" },
    .{
        .name = "limit_connections",
        .kind = .int,
        .low = 1,
        .high = u32_max,
        .field = "connections_max",
    },
    .{
        .name = "limit_keep_alive_requests",
        .kind = .int,
        .low = 1,
        .high = u32_max,
        .field = "keep_alive_requests_max",
    },
    .{
        .name = "limit_request_body",
        .kind = .int,
        .high = std.math.maxInt(i64),
        .field = "body_bytes_max",
    },
    .{
        .name = "limit_request_line",
        .kind = .int,
        .low = 16,
        .high = request_head_bytes_max,
        .field = "limits.target_bytes_max",
    },
    .{
        .name = "limit_request_fields",
        .kind = .int,
        .low = 1,
        .high = request_fields_max,
        .field = "limits.headers_count_max",
    },
    .{
        .name = "limit_request_head",
        .kind = .int,
        .low = request_head_bytes_min,
        .high = request_head_bytes_max,
        .field = "limits.head_bytes_max",
    },
    .{ .name = "forwarded_allow_ips", .kind = .other },
    .{ .name = "metrics_path", .kind = .other },
    .{ .name = "health_path", .kind = .other },
    .{ .name = "ready_path", .kind = .other },
    .{ .name = "metrics_buckets", .kind = .other },
    .{ .name = "request_id_header", .kind = .other },
    .{ .name = "trace_context", .kind = .flag, .field = "tracing.trace_context" },
    .{ .name = "server_timing", .kind = .flag, .field = "tracing.server_timing" },
    .{ .name = "tcp_nodelay", .kind = .flag, .field = "tcp.nodelay" },
    .{ .name = "tcp_keepalive_idle", .kind = .int, .high = 32767, .field = "tcp.keepalive_idle_s" },
    .{
        .name = "tcp_keepalive_interval",
        .kind = .int,
        .high = 32767,
        .field = "tcp.keepalive_interval_s",
    },
    .{ .name = "tcp_keepalive_count", .kind = .int, .high = 127, .field = "tcp.keepalive_count" },
    .{
        .name = "tcp_user_timeout",
        .kind = .int,
        .high = std.math.maxInt(i32),
        .field = "tcp.user_timeout_ms",
    },
    .{ .name = "tcp_fastopen", .kind = .int, .high = 65535, .field = "tcp.fastopen" },
    .{
        .name = "limit_connections_per_ip",
        .kind = .int,
        .high = u32_max,
        .field = "connections_per_ip_max",
    },
    .{ .name = "proxy_protocol", .kind = .flag, .field = "proxy_protocol" },
    .{ .name = "limit_request_rate", .kind = .int, .high = 1_000_000, .field = "rate_limit.rate" },
    .{
        .name = "limit_request_burst",
        .kind = .int,
        .high = 1_000_000,
        .field = "rate_limit.burst",
    },
    .{
        .name = "limit_request_table",
        .kind = .power_of_two,
        .low = 4,
        .high = 1 << 24,
        .field = "rate_limit.table_entries",
    },
    .{ .name = "hsts", .kind = .other },
    .{ .name = "static", .kind = .other },
    // None (no cache-control) or seconds: `setStatic` reads it within these bounds.
    .{ .name = "static_expires", .kind = .other, .high = u32_max },
    .{ .name = "static_dotfiles", .kind = .other },
    .{ .name = "static_precompressed", .kind = .other },
    .{ .name = "access_log", .kind = .flag, .field = "access_log" },
    .{ .name = "ws", .kind = .flag, .field = "ws_enabled" },
    .{
        .name = "ws_max_size",
        .kind = .int,
        .low = 1,
        .high = u32_max,
        .field = "ws_message_bytes_max",
    },
    .{ .name = "ws_max_queue", .kind = .int, .low = 1, .high = u32_max, .field = "ws_queue_max" },
    .{
        .name = "ws_ping_interval",
        .kind = .seconds,
        .high = seconds_max,
        .field = "ws_ping_interval_ms",
    },
    .{
        .name = "ws_ping_timeout",
        .kind = .seconds,
        .high = seconds_max,
        .field = "ws_ping_timeout_ms",
    },
    .{ .name = "ws_per_message_deflate", .kind = .flag, .field = "ws_deflate" },
    .{ .name = "compression", .kind = .other },
    .{
        .name = "compression_min_size",
        .kind = .int,
        .high = u32_max,
        .field = "compression.min_size",
    },
    .{
        .name = "compression_gzip_level",
        .kind = .int,
        .low = 1,
        .high = 9,
        .field = "compression.gzip_level",
    },
    .{
        .name = "compression_brotli_level",
        .kind = .int,
        .high = 11,
        .field = "compression.brotli_level",
    },
    .{
        .name = "compression_zstd_level",
        .kind = .int,
        .low = 1,
        .high = 19,
        .field = "compression.zstd_level",
    },
    .{ .name = "compression_types", .kind = .other },
    .{ .name = "request_decompression", .kind = .flag, .field = "request_decompression" },
    // None for plain HTTP; a path turns TLS on, and with it the `.tls` options.
    .{ .name = "ssl_certfile", .kind = .other },
    .{ .name = "ssl_keyfile", .kind = .other, .when = .tls },
    .{ .name = "ssl_keyfile_password", .kind = .other, .when = .tls },
    .{
        .name = "ssl_min_version",
        .kind = .other,
        .low = tls_version_min,
        .high = tls_version_max,
        .when = .tls,
    },
    .{
        .name = "ssl_max_version",
        .kind = .other,
        .low = tls_version_min,
        .high = tls_version_max,
        .when = .tls,
    },
    .{ .name = "ssl_cert_reqs", .kind = .other, .high = 2, .when = .tls },
    .{ .name = "ssl_session_tickets", .kind = .other, .when = .tls },
    .{ .name = "ssl_session_cache", .kind = .other, .high = 1 << 20, .when = .tls },
    .{ .name = "ssl_crl", .kind = .other, .when = .tls },
    .{ .name = "ssl_ticket_keys", .kind = .other, .when = .tls },
    .{ .name = "ssl_ca_certs", .kind = .other, .when = .tls },
    .{ .name = "ssl_ciphers", .kind = .other, .when = .tls },
    // -1 for HTTP/3 off; a UDP socket turns it on, and with it the `.http3` options (into
    // `server.Http3`). The index and the count fit the CID's one byte and `Http3`'s u8.
    .{
        .name = "http3_fd",
        .kind = .int,
        .high = std.math.maxInt(i32),
        .field = "fd",
        .when = .http3,
    },
    .{
        .name = "http3_alt_svc_port",
        .kind = .int,
        .low = 1,
        .high = 65535,
        .field = "alt_svc_port",
        .when = .http3,
    },
    .{ .name = "http3_retry", .kind = .choice, .field = "retry", .when = .http3 },
    .{ .name = "http3_retry_key", .kind = .other, .when = .http3 },
    .{ .name = "http3_reset_key", .kind = .other, .when = .http3 },
    .{
        .name = "http3_worker_index",
        .kind = .int,
        .high = std.math.maxInt(u8) - 1,
        .field = "worker_index",
        .when = .http3,
    },
    .{
        .name = "http3_workers",
        .kind = .int,
        .low = 1,
        .high = std.math.maxInt(u8),
        .field = "workers",
        .when = .http3,
    },
    // Each connection's and the worker's QUIC limits, each within what the engine's tables
    // hold: the stream table is scanned linearly (`connection.streams_max`), a stream's
    // receive buffer is allocated up to its window, the endpoint's CID table is allocated for
    // `connections_max` at start. `setHttp3` checks their order (retry <= drop <= all).
    .{
        .name = "http3_idle_timeout",
        .kind = .seconds,
        .low = 1,
        .high = 3600,
        .field = "idle_timeout_ms",
        .when = .http3,
    },
    .{
        .name = "http3_handshake_timeout",
        .kind = .seconds,
        .low = 1,
        .high = 600,
        .field = "handshake_timeout_ms",
        .when = .http3,
    },
    .{
        .name = "http3_max_streams",
        .kind = .int,
        .low = 1,
        .high = quic_connection.streams_max,
        .field = "max_streams",
        .when = .http3,
    },
    .{
        .name = "http3_stream_window",
        .kind = .int,
        .low = 1024,
        .high = 16 << 20,
        .field = "stream_window",
        .when = .http3,
    },
    .{
        .name = "http3_connection_window",
        .kind = .int,
        .low = 1024,
        .high = 1 << 30,
        .field = "connection_window",
        .when = .http3,
    },
    .{
        .name = "http3_handshakes_before_retry",
        .kind = .int,
        .low = 1,
        .high = http3_connections_max,
        .field = "handshakes_before_retry",
        .when = .http3,
    },
    .{
        .name = "http3_max_handshakes",
        .kind = .int,
        .low = 1,
        .high = http3_connections_max,
        .field = "handshakes_max",
        .when = .http3,
    },
    .{
        .name = "http3_max_connections",
        .kind = .int,
        .low = 1,
        .high = http3_connections_max,
        .field = "connections_max",
        .when = .http3,
    },
    .{ .name = "http3_congestion", .kind = .choice, .field = "congestion", .when = .http3 },
    // None (off) or an absolute directory path (`setHttp3` reads it).
    .{ .name = "http3_qlog_dir", .kind = .other, .when = .http3 },
    // The server's plumbing: the engine's callables and this process's metrics slot.
    .{ .name = "call_soon", .kind = .other, .when = .plumbing },
    .{ .name = "metrics_slot", .kind = .other, .high = metrics.slots_max - 1, .when = .plumbing },
    .{ .name = "wsgi_environ", .kind = .other, .when = .plumbing },
    .{ .name = "websocket_class", .kind = .other, .when = .plumbing },
};

// TLS 1.2 and 1.3 (OpenSSL's numbers: `python/tls_context.zig` checks they agree).
const tls_version_min = 0x0303;
const tls_version_max = 0x0304;

/// Option `name` in `specs`; a name not there does not compile.
pub fn spec(comptime name: []const u8) Spec {
    return comptime for (specs) |s| {
        if (std.mem.eql(u8, s.name, name)) break s;
    } else @compileError("no engine option " ++ name ++ " in `specs`");
}

/// The bounds of a number option in `specs`.
pub const Limit = struct { low: i64, high: i64 };

pub fn limit(comptime name: []const u8) Limit {
    const s = comptime spec(name);
    comptime std.debug.assert(s.bounded() or s.high > 0);
    return .{ .low = s.low, .high = s.high };
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
    .{ .name = "http3_qlog_dir", .most = core_options.qlog_dir_bytes_max }, // bytes
};

/// The most the engine takes of option `name` (`maxima`).
pub fn most(comptime name: []const u8) comptime_int {
    return comptime for (maxima) |m| {
        if (std.mem.eql(u8, m.name, name)) break m.most;
    } else @compileError("no engine maximum for option " ++ name);
}

/// The engine's own limits, which `Config` validates against (`_core.LIMITS`).
pub const request_head_bytes_max = server_mod.request_head_bytes_max;
pub const request_head_bytes_min = 256;
pub const request_fields_max = server_mod.request_fields_max;
/// A busy poll is a short spin: longer than a second would be a hang.
pub const busy_poll_us_max = 1_000_000;

/// QUIC connections per worker at most: the endpoint's CID table (about 32 bytes a slot, 8 to
/// 16 slots per connection) is allocated for them when the worker starts, 64 MiB at this.
pub const http3_connections_max = 1 << 17;

/// The most `--static` mounts the engine serves.
pub const static_mounts_max = 64;
