//! What the server runs with: every option, as `python/options.zig` reads it from the
//! dict `Config.engine_options()` builds, and the TCP options of the listener.
const std = @import("std");
const linux = std.os.linux;
const sys = @import("../os/sys.zig");
const io = @import("../os/io.zig");
const http1 = @import("../http/http1_parser.zig"); // the server owns the request-head limits the protocols parse with
const compression = @import("../features/compression.zig"); // the server holds the --compression settings every protocol reads
const tracing = @import("../features/tracing.zig"); // the server holds the request-id and trace settings every protocol reads
const rate_limit = @import("../features/rate_limit.zig");
const forwarded = @import("../features/forwarded.zig"); // which peers may name the client, for the rate limit
const metrics = @import("../features/metrics.zig");
const static_paths = @import("../features/static_paths.zig"); // the --static mounts (their answer is `static_files.zig`)

/// Everything the server runs with, all given explicitly (python/options.zig reads them from
/// the dict `Config.engine_options()` builds): the engine keeps no defaults of its own.
pub const Options = struct {
    /// An idle keep-alive connection is closed after this long.
    timeout_keep_alive_ms: u64,
    /// A request head must be complete this long after its first byte (or the accept).
    timeout_header_ms: u64,
    /// An app waiting for request body bytes waits at most this long for the next ones.
    timeout_body_ms: u64,
    /// Pending output that makes no progress for this long closes the connection.
    timeout_write_ms: u64,
    /// A connection older than this ends after its current response (0 = no limit).
    timeout_connection_s: u32 = 0,
    server_header: bool,
    date_header: bool,
    /// Connections past this are accepted and closed at once.
    connections_max: u32,
    /// The response to the Nth request on one connection closes it.
    keep_alive_requests_max: u32,
    /// Request bodies larger than this get 413.
    body_bytes_max: u64,
    limits: http1.Limits,
    /// Paths the engine answers itself ("" = off); the memory belongs to the caller.
    metrics_path: []const u8,
    health_path: []const u8,
    /// `--ready-path`: 200 while the server wants new traffic, 503 before it is ready and
    /// from the drain's start.
    ready_path: []const u8,
    /// This process's slot in the shared counters, when metrics are on.
    metrics: ?*metrics.Slot,
    /// WebSocket upgrades are served (`--ws`); off, they are plain HTTP requests.
    ws_enabled: bool,
    /// permessage-deflate is negotiated when a client offers it.
    ws_deflate: bool,
    /// Larger messages close the connection with 1009.
    ws_message_bytes_max: u64,
    /// Whole messages waiting for the app before the socket stops being read.
    ws_queue_max: u32,
    /// 0: no server pings.
    ws_ping_interval_ms: u64,
    ws_ping_timeout_ms: u64,
    /// Who writes complete plain HTTP/1.1 responses: see `WriterMode`.
    writer: WriterMode,
    /// Busy poll after the last stream finishes, in ns (0: off). See `Server.spinWait`.
    spin_ns: u64,
    /// HTTP/2 is served: h2c with prior knowledge, and "h2" offered in TLS ALPN.
    http2: bool,
    /// `--h2c-upgrade`: an HTTP/1.1 request with `Upgrade: h2c` switches a plain connection
    /// to HTTP/2 (RFC 7540 3.2, with `http2`). Off, the upgrade is ignored (RFC 9110 7.8) and
    /// the request served as HTTP/1.1: behind a proxy, a 101 makes the connection a tunnel
    /// whose requests the proxy never sees (h2c smuggling).
    h2c_upgrade: bool = false,
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams one HTTP/2 connection may have at once.
    h2_max_streams: u32,
    /// The I/O backend asked for (io_uring falls back to epoll where refused: `io.fallback`).
    io: io.Config,
    /// Request ids, trace context and server-timing (all off by default).
    tracing: tracing.Options = .{},
    /// `--static` mounts answered by the engine (null: none); the caller owns them.
    static: ?*const static_paths.Config = null,
    /// The access log is on (and `zigcorn.access` takes INFO): the engine logs what it answers itself.
    access_log: bool = false,
    /// Socket options of the TCP listener, which accepted connections inherit.
    tcp: TcpOptions = .{},
    /// Connections past this many open from one address are closed at accept (0 = no limit).
    connections_per_ip_max: u32 = 0,
    /// Connections from peers in `trust` begin with a PROXY protocol header (v1 or v2).
    proxy_protocol: bool = false,
    /// Requests a second per client address, and the burst (`rate` 0 = no limit).
    rate_limit: rate_limit.Options = .{},
    /// The proxies that may name the client (`--forwarded-allow-ips`), for the rate limit;
    /// owned by the caller, null when proxy headers are off.
    trust: ?*const forwarded.Trust = null,
    /// `strict-transport-security` for HTTPS responses ("" = none): `--hsts`.
    hsts: []const u8 = "",
    /// `--compression*` (off unless it names encodings).
    compression: compression.Options = .{},
    /// `--request-decompression`: request bodies in gzip, br or zstd reach the app decoded.
    request_decompression: bool = false,
    /// `--http3`: QUIC on this worker's UDP socket (null: off).
    http3: ?Http3 = null,
};

/// Whether a client must prove its address with a Retry before the server keeps state:
/// `auto` asks only while many handshakes are pending (`quic/endpoint.zig` decides).
pub const Http3Retry = enum(u8) { never = 0, auto = 1, always = 2 };

/// The congestion controller of every QUIC connection (`quic/congestion.zig` has both).
pub const Http3Congestion = enum(u8) { newreno = 0, cubic = 1 };

/// The longest `--http3-qlog-dir` path, in bytes (with room for a file name after it).
pub const qlog_dir_bytes_max = 1024;

/// What HTTP/3 runs with, as `python/options.zig` reads it (the `http3_*` engine options).
pub const Http3 = struct {
    /// This worker's UDP socket: bound, non-blocking, close-on-exec; Python owns it (the
    /// engine never closes it).
    fd: i32,
    /// The port advertised in `alt-svc: h3=":PORT"; ma=86400` on HTTP/1.1 and HTTP/2 TLS responses.
    alt_svc_port: u16,
    retry: Http3Retry,
    /// Shared by every worker (the master makes them): Retry tokens and stateless resets.
    retry_key: [32]u8,
    reset_key: [32]u8,
    /// This worker's index (0 for a single process), carried in the CIDs it issues.
    worker_index: u8,
    workers: u8,
    /// QUIC's max_idle_timeout we advertise, and a handshake's deadline.
    idle_timeout_ms: u64,
    handshake_timeout_ms: u64,
    /// Each connection's QUIC limits: request streams at once (MAX_STREAMS), and the
    /// flow-control windows of a stream and of the connection, in bytes.
    max_streams: u32,
    stream_window: u32,
    connection_window: u64,
    /// The worker's endpoint: handshakes pending before `auto` asks for a Retry, past which
    /// an Initial is dropped, and connections at once (checked in that order of size).
    handshakes_before_retry: u32,
    handshakes_max: u32,
    connections_max: u32,
    congestion: Http3Congestion,
    /// `--http3-qlog-dir`, an absolute path (empty: qlog is off).
    qlog_dir_buf: [qlog_dir_bytes_max]u8 = undefined,
    qlog_dir_len: u16 = 0,
    /// The `alt-svc` value, made once from `alt_svc_port` (`setAltSvc`).
    alt_svc_buf: [24]u8 = undefined,
    alt_svc_len: u8 = 0,

    pub fn setAltSvc(h: *Http3) void {
        const value = std.fmt.bufPrint(&h.alt_svc_buf, "h3=\":{d}\"; ma=86400", .{h.alt_svc_port}) catch unreachable;
        h.alt_svc_len = @intCast(value.len);
    }

    /// The qlog directory, or null with qlog off.
    pub fn qlogDir(h: *const Http3) ?[]const u8 {
        return if (h.qlog_dir_len == 0) null else h.qlog_dir_buf[0..h.qlog_dir_len];
    }

    pub fn altSvc(h: *const Http3) []const u8 {
        std.debug.assert(h.alt_svc_len > 0);
        return h.alt_svc_buf[0..h.alt_svc_len];
    }
};

/// TCP options (0 = the kernel's default). Set once on the listening socket: Linux copies
/// keepalive, its timers and the user timeout into every connection accepted from it.
pub const TcpOptions = struct {
    nodelay: bool = true,
    /// Keepalive is on when any of the three is set.
    keepalive_idle_s: u32 = 0,
    keepalive_interval_s: u32 = 0,
    keepalive_count: u32 = 0,
    user_timeout_ms: u32 = 0,
    /// TCP Fast Open: the listener's queue of pending TFO requests.
    fastopen: u32 = 0,

    /// Applies the options to a listening socket; a Unix socket takes none. The name of
    /// the option the kernel refused, if one was.
    pub fn apply(self: TcpOptions, fd: i32) ?[]const u8 {
        var domain: c_int = 0;
        var len: linux.socklen_t = @sizeOf(c_int);
        if (sys.E.init(linux.getsockopt(fd, linux.SOL.SOCKET, linux.SO.DOMAIN, std.mem.asBytes(&domain), &len)) != .SUCCESS) return null;
        if (domain != linux.AF.INET and domain != linux.AF.INET6) return null;
        const keepalive = self.keepalive_idle_s != 0 or self.keepalive_interval_s != 0 or self.keepalive_count != 0;
        const tcp = linux.IPPROTO.TCP;
        const settings = [_]struct { []const u8, i32, u32, u32, bool }{
            .{ "SO_KEEPALIVE", linux.SOL.SOCKET, linux.SO.KEEPALIVE, 1, keepalive },
            .{ "TCP_KEEPIDLE", tcp, linux.TCP.KEEPIDLE, self.keepalive_idle_s, self.keepalive_idle_s != 0 },
            .{ "TCP_KEEPINTVL", tcp, linux.TCP.KEEPINTVL, self.keepalive_interval_s, self.keepalive_interval_s != 0 },
            .{ "TCP_KEEPCNT", tcp, linux.TCP.KEEPCNT, self.keepalive_count, self.keepalive_count != 0 },
            .{ "TCP_USER_TIMEOUT", tcp, linux.TCP.USER_TIMEOUT, self.user_timeout_ms, self.user_timeout_ms != 0 },
            .{ "TCP_FASTOPEN", tcp, linux.TCP.FASTOPEN, self.fastopen, self.fastopen != 0 },
        };
        for (settings) |o| {
            if (o[4] and !sys.setIntOption(fd, o[1], o[2], @intCast(o[3]))) return o[0];
        }
        return null;
    }
};

/// `off`: the Python thread writes every response itself. `on`: every complete response
/// goes to the writer thread (for tests). `auto`: the thread starts, and takes
/// responses, only while the app is slow enough per response that the Python thread is
/// the bottleneck and other connections are open; a fast app (where the
/// hand-over costs more than the write) and a lone connection keep writing inline.
pub const WriterMode = enum(u8) { off = 0, auto = 1, on = 2 };
