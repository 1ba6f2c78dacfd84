"""Every server knob, validated and resolved once.

Keyword names are uvicorn's wherever uvicorn has the knob, so ``uvicorn.Config(...)``
and ``uvicorn.run(...)`` calls port by changing the module name. Importing this
module is cheap: asyncio, the lifespan runners and ``logging.config`` load only
when the server actually starts.
"""

from __future__ import annotations

import copy
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from zigcorn.importer import ImportFromStringError, import_from_string
from zigcorn.logging import LOGGING_CONFIG, TRACE_LOG_LEVEL, apply_default_logging, is_default_logging

if TYPE_CHECKING:
    import asyncio

LOG_LEVELS: dict[str, int] = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": TRACE_LOG_LEVEL,
}
LOOP_CHOICES = ("auto", "zigcorn", "asyncio", "uvloop")
# What `auto` picks, by the benchmarks in benchmarks/RESULTS.md (event loop section).
LOOP_AUTO = "zigcorn"
LIFESPAN_CHOICES = ("auto", "on", "off")
WRITER_CHOICES = ("auto", "on", "off")
IO_BACKEND_CHOICES = ("auto", "epoll", "io_uring")
# What `auto` picks, by the benchmarks in benchmarks/RESULTS.md (io_uring section): the
# engine falls back to epoll where the kernel refuses io_uring, and says so at start.
IO_BACKEND_AUTO = "io_uring"
# uvicorn's --interface names; "wsgi" is served natively (zigcorn/wsgi.py, python/environ.zig).
INTERFACE_CHOICES = ("auto", "asgi3", "asgi2", "wsgi")
# uvicorn's --http names, accepted: the engine's own HTTP/1.1 parser serves all of them.
HTTP_CHOICES = ("auto", "h11", "httptools")
# uvicorn's names; every choice but "none" means the engine's own WebSocket implementation.
WS_CHOICES = ("auto", "none", "websockets", "websockets-sansio", "wsproto")
# --http3-retry, by the engine's Http3Retry values (src/zig/server/options.zig).
HTTP3_RETRY = {"never": 0, "auto": 1, "always": 2}
HTTP3_RETRY_CHOICES = tuple(HTTP3_RETRY)
# QUIC's max_idle_timeout the server advertises (RFC 9000 10.1): longer than HTTP/1.1's
# keep-alive, since an idle QUIC connection holds no socket and resumes without a handshake.
HTTP3_IDLE_TIMEOUT_MS = 30_000

# Exit codes. Like uvicorn: 1 when the app (or loop) cannot be loaded, 3 when the
# server could not start (lifespan startup failed, bind failed).
LOAD_FAILURE = 1
STARTUP_FAILURE = 3

logger = logging.getLogger("zigcorn.error")

HeaderSpec = str | tuple[str, str] | list[str]

# The values of Python's ssl constants, so that importing this module never loads ssl.
PROTOCOL_TLS_SERVER = 17
CERT_NONE = 0
# --ssl-version -> (lowest, highest) TLS version the engine accepts: TLS 1.2 and 1.3 only.
_TLS12, _TLS13 = 0x0303, 0x0304
SSL_VERSIONS = {2: (_TLS12, _TLS13), 17: (_TLS12, _TLS13), 5: (_TLS12, _TLS12)}
_SSL_VERSION_NAMES = {3: "PROTOCOL_TLSv1", 4: "PROTOCOL_TLSv1_1", 16: "PROTOCOL_TLS_CLIENT"}


class Setting:
    """One option: its keyword (uvicorn's name where uvicorn has the knob), its default,
    its bounds, its help text, and how the command line takes it. `SETTINGS` below is
    the only place any of these is written down: `Config`, the ``zigcorn`` command line,
    the ``ZIGCORN_*`` environment variables and the engine's options all come from it.
    """

    __slots__ = ("name", "default", "help", "group", "flag", "kind", "type", "choices", "also", "note", "metavar",
                 "low", "high", "shown", "aliases")  # fmt: skip

    def __init__(self, name, default, help, group, *, flag=None, kind="value", type=None, choices=None, also=None,
                 note=None, metavar=None, low=None, high=None, shown=None, aliases=()):  # fmt: skip
        self.name = name
        self.default = default
        self.help = help
        self.group = group
        self.flag = flag or "--" + name.replace("_", "-")
        # value: --flag VALUE; onoff: --flag / --no-flag; switch: --flag; append: repeatable
        self.kind = kind
        self.type = type
        self.choices = choices
        # (predicate, words): values beyond `choices` that are accepted, and how to name them.
        self.also = also
        # Said after a refused value, when the refusal needs a reason.
        self.note = note
        self.metavar = metavar
        self.low = low
        self.high = high
        # How --help shows the default, where the value itself would mislead.
        self.shown = shown
        # Other command-line flags for the same setting (another server's name for it).
        self.aliases = tuple(aliases)

    def check(self, value) -> None:
        """Bounds and choices are checked once, here, so the engine never sees a value it cannot honour."""
        if value is None:
            return
        if self.low is not None:
            _check_range(self.name, value, self.low, self.high)
        if self.choices is None or (isinstance(value, str) and value in self.choices):
            return
        if self.also is not None and self.also[0](value):
            return
        wanted = ", ".join(self.choices) + (f" or {self.also[1]}" if self.also else "")
        note = f": {self.note}" if self.note else ""
        raise ValueError(f"{self.name} must be one of {wanted}, not {value!r}{note}")


def _engine_limit(name: str) -> tuple[int, int]:
    """The engine's own bounds of an option (a request head must fit one pooled buffer):
    `_core.LIMITS`, the one place they are written (src/zig/python/options.zig)."""
    from zigcorn._core import LIMITS

    return LIMITS[name]


def _engine_most(name: str) -> int:
    """The most the engine takes of a list or text option (`_core.MAXIMA`), in its unit."""
    from zigcorn._core import MAXIMA

    return MAXIMA[name]


def _bounds(name: str, *, off_is_none: bool = False) -> dict[str, int]:
    """A setting's ``low``/``high``: the engine's bounds of its option. With `off_is_none`
    the engine's 0 ("off") is Config's None, so Config's lowest is 1."""
    low, high = _engine_limit(name)
    if off_is_none:
        assert low == 0, name
        low = 1
    return {"low": low, "high": high}


_HEAD_MIN, _HEAD_MAX = _engine_limit("limit_request_head")
_FIELDS_MAX = _engine_limit("limit_request_fields")[1]
_GZIP = _engine_limit("compression_gzip_level")
_BROTLI = _engine_limit("compression_brotli_level")
_ZSTD = _engine_limit("compression_zstd_level")
_U32 = 2**32 - 1
# The longest timeout the engine takes; Config's own seconds settings stop there too.
_SECONDS_MAX = _engine_limit("timeout_write")[1]

# The request-duration histogram's default bounds, in seconds (Prometheus' defaults from 1 ms).
METRICS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
METRICS_BUCKETS_MAX = _engine_most("metrics_buckets")

# What --compression offers, and the content types compressed unless --compression-types says otherwise.
COMPRESSION_ENCODINGS = ("zstd", "br", "gzip")
COMPRESSION_TYPES = ("text/*,application/json,application/javascript,application/x-javascript,application/xml,"
                     "image/svg+xml,application/wasm")

_BUSY_POLL = 100  # µs, --busy-poll's default for ASGI apps

_S = Setting
SETTINGS: tuple[Setting, ...] = (
    # Server
    _S("host", "127.0.0.1", "bind to this address", "Server"),
    _S("port", 8000, "bind to this port, 0 for any", "Server", type="port"),
    _S("uds", None, "bind to a Unix domain socket instead", "Server", metavar="PATH"),
    _S("uds_perms", 0o666, "permissions of the --uds file", "Server", type="octal", metavar="MODE", shown="666"),
    _S("fd", None, "serve on this inherited, already listening socket", "Server", type=int),
    _S("backlog", 2048, "listen backlog", "Server", type=int, metavar="N", low=1, high=65535),
    _S("reuse_port", False, "each worker binds its own SO_REUSEPORT socket", "Server", kind="switch"),
    _S("loop", "auto", "event loop; auto is zigcorn's own", "Server", choices=LOOP_CHOICES,
       also=(lambda v: isinstance(v, str) and ":" in v, "a '<module>:<attribute>' string")),
    # Processes
    _S("workers", None, "worker processes", "Processes", type=int, metavar="N", low=1, high=1024,
       shown="$WEB_CONCURRENCY or 1"),
    _S("reload", False, "restart when files change (needs watchfiles)", "Processes", kind="switch"),
    _S("reload_dirs", None, "watch this directory; repeatable", "Processes", kind="append", flag="--reload-dir",
       metavar="DIR", shown="cwd"),
    _S("reload_includes", ("*.py",), "reload on files matching this; repeatable", "Processes", kind="append",
       flag="--reload-include", metavar="GLOB"),
    _S("reload_excludes", (".*", ".py[cod]", ".sw.*", "~*"), "ignore files matching this; repeatable", "Processes",
       kind="append", flag="--reload-exclude", metavar="GLOB"),
    _S("reload_delay", 0.25, "debounce", "Processes", type=float, metavar="SECONDS"),
    _S("workers_max_rss", None, "replace a worker whose resident memory passes this, gracefully (a new one starts "
       "first); runs a master even for one worker", "Processes", type=int, metavar="MIB", low=1, high=2**20,
       shown="off"),
    _S("pid_file", None, "write the server's pid here once the socket is bound (the master's with --workers); "
       "removed at exit", "Processes", metavar="PATH", shown="none", aliases=("--pid",)),
    _S("user", None, "switch to this user (name or uid) once the socket is bound", "Processes", metavar="USER",
       shown="unchanged"),
    _S("group", None, "switch to this group (name or gid) once the socket is bound; default the user's group",
       "Processes", metavar="GROUP", shown="unchanged"),
    _S("umask", None, "the process umask, set once the socket is bound (e.g. 027)", "Processes", type="octal",
       metavar="MODE", low=0, high=0o777, shown="unchanged"),
    # Application
    _S("warmup_path", None, "after lifespan startup, GET this path through the app once (in-process) before "
       "accepting (with --ready-path: before it says 200), then freeze what is left (gc.freeze)", "Application", metavar="PATH", shown="off"),
    _S("factory", False, "APP is a factory to call for the app", "Application", kind="switch"),
    _S("lifespan", "auto", "lifespan events", "Application", choices=LIFESPAN_CHOICES),
    _S("root_path", "", "the path prefix a proxy mounts the app at", "Application", metavar="PATH"),
    _S("interface", "auto", "the app's interface: auto is ASGI 3, or ASGI 2 for a class or a plain-function app",
       "Application", choices=INTERFACE_CHOICES),
    _S("wsgi_threads", None, "threads that run a WSGI app (--interface wsgi); started as requests need them",
       "Application", type=int, metavar="N", low=1, high=1024, shown="4 per CPU, 4 to 32",
       aliases=("--blocking-threads",)),
    _S("env_file", None, "load environment variables from this file first (needs python-dotenv)", "Application",
       metavar="PATH"),
    _S("reset_contextvars", False, "run each request in a fresh contextvars.Context (hides what lifespan set)",
       "Application", kind="switch"),
    # Logging
    _S("log_level", None, "level of zigcorn's loggers", "Logging", choices=tuple(LOG_LEVELS), shown="info",
       also=(lambda v: (isinstance(v, str) and v.lower() in LOG_LEVELS) or (isinstance(v, int) and not isinstance(v, bool)),
             "a logging level number")),
    _S("log_config", LOGGING_CONFIG, "logging configuration file: .json, .yaml/.yml or .ini", "Logging",
       metavar="PATH", shown="zigcorn's own"),
    _S("access_log", True, "log each request", "Logging", kind="onoff"),
    _S("access_log_format", None, "access line format: gunicorn's atoms (%%(h)s %%(r)s %%(s)s %%(b)s %%(D)s "
       "%%({header}i)s ...) or json", "Logging", metavar="FORMAT", shown="uvicorn's line",
       aliases=("--access-logformat",)),
    _S("access_log_file", None, "write access lines to this file (reopened on SIGUSR1) instead of stdout",
       "Logging", metavar="PATH", shown="stdout", aliases=("--access-logfile",)),
    _S("access_log_exclude", None, "log no line for requests to this path; repeatable", "Logging", kind="append",
       metavar="PATH", shown="none"),
    _S("use_colors", None, "colour the logs", "Logging", kind="onoff", shown="on a terminal"),
    # HTTP
    _S("headers", None, "add this header to every response; repeatable", "HTTP", kind="append", flag="--header",
       type="header", metavar="NAME:VALUE", shown="none"),
    _S("proxy_headers", True, "trust X-Forwarded-* and Forwarded from --forwarded-allow-ips", "HTTP", kind="onoff"),
    _S("forwarded_allow_ips", None,
       "comma-separated IPs/CIDRs to trust proxy headers from, * for all, unix: for --uds peers", "HTTP",
       metavar="IPS", shown="$FORWARDED_ALLOW_IPS or 127.0.0.1"),
    _S("proxy_protocol", False, "connections from --forwarded-allow-ips begin with a PROXY protocol header (v1 or "
       "v2, as HAProxy, AWS NLB and GCP send): its source address is the client", "HTTP", kind="switch"),
    _S("server_header", True, "send a Server header", "HTTP", kind="onoff"),
    _S("date_header", True, "send a Date header", "HTTP", kind="onoff"),
    _S("writer_thread", "auto",
       "write complete responses from an engine thread: auto does while the app is the bottleneck", "HTTP",
       choices=WRITER_CHOICES),
    _S("http", "auto", "HTTP/1.1 implementation; every choice is the engine's own parser (uvicorn's names)", "HTTP",
       choices=HTTP_CHOICES, note="zigcorn parses HTTP in its engine: a protocol class cannot be given"),
    _S("http2", True, "serve HTTP/2: h2 over TLS (ALPN) and h2c with prior knowledge", "HTTP", kind="onoff"),
    _S("h2c_upgrade", False, "honour the HTTP/1.1 Upgrade to h2c (RFC 7540 3.2, deprecated): off, it is ignored "
       "and the request served as HTTP/1.1; on behind a proxy, the upgraded connection is a tunnel the proxy no "
       "longer reads (a request that shows a proxy hop is never upgraded)", "HTTP", kind="switch"),
    _S("compression", None, "compress responses with these encodings, in the server's order of preference "
       "(a comma list of zstd, br, gzip), chosen against the request's accept-encoding", "Compression",
       metavar="LIST", shown="off"),
    _S("compression_min_size", 1024, "a one-shot response body smaller than this is sent as it is", "Compression",
       type=int, metavar="BYTES", **_bounds("compression_min_size")),
    _S("compression_gzip_level", 6, "gzip level ({} fastest .. {} smallest)".format(*_GZIP), "Compression",
       type=int, metavar="N", **_bounds("compression_gzip_level")),
    _S("compression_brotli_level", 4, "brotli quality ({} fastest .. {} smallest)".format(*_BROTLI), "Compression",
       type=int, metavar="N", **_bounds("compression_brotli_level")),
    _S("compression_zstd_level", 3, "zstd level ({} fastest .. {} smallest)".format(*_ZSTD), "Compression",
       type=int, metavar="N", **_bounds("compression_zstd_level")),
    _S("compression_types", COMPRESSION_TYPES, "content types compressed (a comma list; type/* matches a whole "
       "type; +json and +xml suffixes always match)", "Compression", metavar="LIST", shown="text/*, json, "
       "js, xml, svg, wasm"),
    _S("request_decompression", False, "decode request bodies sent with content-encoding gzip, br or zstd before "
       "the app reads them (others get 415; --limit-request-body counts decoded bytes)", "Compression",
       kind="switch"),
    _S("http2_max_concurrent_streams", 100, "streams one HTTP/2 connection may have open at once", "HTTP",
       type=int, metavar="N", **_bounds("http2_max_concurrent_streams")),
    _S("io_backend", None, "how the engine waits for sockets: epoll, io_uring (falls back to epoll where the "
       "kernel refuses it) or auto", "HTTP", choices=IO_BACKEND_CHOICES, shown="$ZIGCORN_IO_BACKEND or auto"),
    _S("io_uring_buffers", 256, "io_uring: receive buffers in the ring at most, a power of two (it starts with "
       "16 and doubles when a receive finds it empty; a buffer is taken only while bytes wait)", "HTTP", type=int,
       metavar="N", **_bounds("io_uring_buffers")),
    _S("io_uring_buffer_size", 4096, "io_uring: bytes per receive buffer, a power of two", "HTTP", type=int,
       metavar="BYTES", **_bounds("io_uring_buffer_size")),
    _S("busy_poll", None, "once every request is answered, poll this long before sleeping; 0 never", "HTTP",
       type=int, metavar="USEC", low=0, high=5000, shown="100, 0 with --interface wsgi"),
    # Metrics and health
    _S("metrics_path", None, "serve Prometheus metrics here, without the app (e.g. /metrics)", "Metrics and health",
       metavar="PATH", shown="off"),
    _S("health_path", None, "answer 200 here without the app from the moment the server listens (startup "
       "included), 503 from the drain's start", "Metrics and health", metavar="PATH", shown="off"),
    _S("ready_path", None, "answer 200 here without the app while the server wants traffic, 503 during startup "
       "and warm-up (the server then listens from the start; other requests get 503 with retry-after) and from "
       "the drain's start", "Metrics and health", metavar="PATH", shown="off"),
    _S("metrics_buckets", None, "upper bounds of the request-duration histogram, comma-separated, rising",
       "Metrics and health", metavar="SECONDS,...", shown=",".join(f"{b:g}" for b in METRICS_BUCKETS)),
    _S("request_id_header", None, "keep a sane incoming request id in this header, else make one (128 random "
       "bits); the app sees it, the response carries it", "Metrics and health", metavar="NAME", shown="off"),
    _S("trace_context", False, "W3C Trace Context: drop an invalid traceparent/tracestate, start a trace when "
       "none came", "Metrics and health", kind="switch"),
    _S("server_timing", False, "add server-timing: app;dur=<ms> (request head to response head)",
       "Metrics and health", kind="switch"),
    _S("drain_path", None, "a POST here with the --admin-token starts the graceful shutdown (of every worker); "
       "other requests get 403", "Metrics and health", metavar="PATH", shown="off"),
    _S("admin_token", None, "the bearer token --drain-path asks for (or $ZIGCORN_ADMIN_TOKEN)", "Metrics and health",
       metavar="TOKEN", shown="none"),
    _S("drain_delay", 0.0, "after a --drain-path request: health and ready paths answer 503 at once, the server "
       "keeps accepting and serving this long, then stops accepting and drains (5-10 s behind a load balancer)",
       "Metrics and health", type=float, metavar="SECONDS", low=0, high=3600),
    _S("shutdown_delay", 0.0, "the same on SIGTERM: keep accepting and serving this long after it (Kubernetes' "
       "preStop sleep built in); SIGINT does not wait", "Metrics and health", type=float, metavar="SECONDS", low=0,
       high=3600),
    # Static files
    _S("static", None, "serve the files under DIR at ROUTE from the engine, without the app; repeatable",
       "Static files", kind="append", metavar="ROUTE=DIR", shown="none"),
    _S("static_path_route", "/static", "granian's name: the route of --static-path-mount", "Static files",
       metavar="ROUTE"),
    _S("static_path_mount", None, "granian's name: serve this directory at --static-path-route", "Static files",
       metavar="DIR", shown="none"),
    _S("static_expires", None, "cache-control max-age of static files", "Static files", type=int,
       metavar="SECONDS", **_bounds("static_expires"), shown="no cache-control"),
    _S("static_dotfiles", False, "serve static files whose path has a name starting with '.'", "Static files",
       kind="switch"),
    _S("static_precompressed", False, "send a static file's .br, .zst or .gz sibling to clients that accept "
       "that coding (on with --compression too)", "Static files", kind="switch"),
    # WebSockets
    _S("ws", "auto", "WebSocket support; anything but none is the engine's own", "WebSockets", choices=WS_CHOICES),
    _S("ws_max_size", 16 * 1024 * 1024, "close with 1009 on larger messages", "WebSockets", type=int,
       metavar="BYTES", **_bounds("ws_max_size")),
    _S("ws_max_queue", 32, "messages waiting for the app before the socket stops being read", "WebSockets",
       type=int, metavar="N", low=1, high=2**20),
    _S("ws_ping_interval", 20.0, "ping every open WebSocket this often, 0 for never", "WebSockets", type=float,
       metavar="SECONDS", **_bounds("ws_ping_interval")),
    _S("ws_ping_timeout", 20.0, "close with 1011 when a pong does not come within this", "WebSockets",
       type=float, metavar="SECONDS", **_bounds("ws_ping_timeout")),
    _S("ws_per_message_deflate", True, "negotiate permessage-deflate when offered", "WebSockets", type="boolean",
       metavar="BOOL", shown="true"),
    # Timeouts
    _S("timeout_keep_alive", 5, "close an idle keep-alive connection after this", "Timeouts", type=float,
       metavar="SECONDS", **_bounds("timeout_keep_alive")),
    _S("timeout_header", 30, "a request head must arrive within this, from its first byte", "Timeouts",
       type=float, metavar="SECONDS", **_bounds("timeout_header")),
    _S("timeout_body", 30, "an app waiting for request body bytes waits at most this for more", "Timeouts",
       type=float, metavar="SECONDS", **_bounds("timeout_body")),
    _S("timeout_write", 30, "close a connection whose pending output makes no progress for this", "Timeouts",
       type=float, metavar="SECONDS", **_bounds("timeout_write")),
    _S("timeout_connection", None, "a connection older than this ends after its current response (HTTP/1.1: "
       "connection: close, HTTP/2: GOAWAY); WebSockets are not cut", "Timeouts", type=int, metavar="SECONDS",
       **_bounds("timeout_connection", off_is_none=True), shown="off"),
    _S("timeout_request", None, "cancel an app that has not finished a request after this", "Timeouts",
       type=float, metavar="SECONDS", shown="off"),
    _S("timeout_graceful_shutdown", None, "max wait for in-flight requests at shutdown", "Timeouts", type=float,
       metavar="SECONDS", shown="forever"),
    _S("timeout_worker_healthcheck", 5, "with --workers: replace a worker whose loop does not answer a ping in this",
       "Timeouts", type=float, metavar="SECONDS", low=0.1, high=_SECONDS_MAX),
    # TLS (HTTPS)
    _S("ssl_keyfile", None, "the private key (PEM)", "TLS (HTTPS)", metavar="PATH", shown="in --ssl-certfile"),
    _S("ssl_certfile", None, "the certificate chain (PEM); turns HTTPS on", "TLS (HTTPS)", metavar="PATH"),
    _S("ssl_keyfile_password", None, "password of an encrypted key", "TLS (HTTPS)", metavar="TEXT"),
    _S("ssl_version", PROTOCOL_TLS_SERVER,
       "17 (PROTOCOL_TLS_SERVER): TLS 1.2 and 1.3; 5 (PROTOCOL_TLSv1_2): 1.2 only", "TLS (HTTPS)", type=int,
       metavar="N"),
    _S("ssl_cert_reqs", CERT_NONE, "client certificates: 0 none, 1 optional, 2 required", "TLS (HTTPS)", type=int,
       metavar="N"),
    _S("ssl_ca_certs", None, "CA certificates (PEM) that verify client certificates", "TLS (HTTPS)", metavar="PATH"),
    # The default: TLS 1.2 gets ECDHE (forward secrecy) with AEAD suites only, AES-GCM and
    # ChaCha20-Poly1305, for ECDSA and RSA certificates: Mozilla's "intermediate" TLS 1.2
    # suites less DHE (the server sets no DH parameters). Not "TLSv1", uvicorn's default
    # before 0.48 (since then it leaves the list to Python's ssl): in OpenSSL's cipher
    # grammar that names the suites TLS 1.0 defined, under TLS 1.2 SHA-1 CBC suites only,
    # none of which Python's default client (!SHA1) offers: it got handshake_failure.
    _S("ssl_ciphers",
       "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
       "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305",
       "TLS 1.2 cipher suites in OpenSSL's syntax, less anonymous and null ones (TLS 1.3's are OpenSSL's). The "
       "default, ECDHE with AES-GCM or ChaCha20-Poly1305 as in Mozilla's intermediate profile, is not TLSv1 "
       "(uvicorn's before 0.48), whose TLS 1.2 suites are SHA-1 CBC only", "TLS (HTTPS)", metavar="LIST"),
    _S("ssl_min_version", None, "the lowest TLS version accepted (raises --ssl-version's)", "TLS (HTTPS)",
       choices=("TLSv1.2", "TLSv1.3"), shown="TLSv1.2"),
    _S("ssl_session_tickets", True, "issue TLS session tickets (resumption without a server cache; the keys are "
       "shared by the workers and change at each start)", "TLS (HTTPS)", kind="onoff"),
    _S("ssl_session_cache", 0, "sessions a server-side cache holds per worker, 0 for none (about 1 KiB each)",
       "TLS (HTTPS)", type=int, metavar="N", **_bounds("ssl_session_cache")),
    _S("ssl_crl", None, "certificate revocation lists (PEM) that client certificates are checked against",
       "TLS (HTTPS)", metavar="PATH"),
    # HTTP/3 (QUIC): uvicorn has no such flag; hypercorn's is --quic-bind.
    _S("http3", False, "serve HTTP/3 over QUIC on a UDP port of the same host (needs --ssl-certfile and "
       "--ssl-keyfile); TLS responses advertise it with alt-svc", "TLS (HTTPS)", kind="switch"),
    _S("http3_port", None, "the UDP port HTTP/3 listens on, 0 for any", "TLS (HTTPS)", type="port",
       metavar="PORT", low=0, high=65535, shown="the TLS port"),
    _S("http3_retry", "auto", "QUIC Retry (the client proves its address before the server keeps state): auto "
       "while many handshakes are pending, always, or never", "TLS (HTTPS)", choices=HTTP3_RETRY_CHOICES),
    _S("hsts", None, "HTTPS responses carry strict-transport-security: max-age=SECONDS (unless the app sets it)",
       "TLS (HTTPS)", type=int, metavar="SECONDS", low=0, high=2**31 - 1, shown="off"),
    _S("hsts_include_subdomains", False, "--hsts: add includeSubDomains", "TLS (HTTPS)", kind="switch"),
    _S("hsts_preload", False, "--hsts: add preload (needs a max-age of a year or more and includeSubDomains)",
       "TLS (HTTPS)", kind="switch"),
    # TCP
    _S("tcp_nodelay", True, "TCP_NODELAY on accepted connections: small responses leave at once", "TCP",
       kind="onoff"),
    _S("tcp_keepalive_idle", None, "TCP keepalive: probe a connection idle this long (any of the three turns "
       "keepalive on)", "TCP", type=int, metavar="SECONDS", **_bounds("tcp_keepalive_idle", off_is_none=True),
       shown="off"),
    _S("tcp_keepalive_interval", None, "TCP keepalive: seconds between unanswered probes", "TCP", type=int,
       metavar="SECONDS", **_bounds("tcp_keepalive_interval", off_is_none=True), shown="the kernel's"),
    _S("tcp_keepalive_count", None, "TCP keepalive: unanswered probes before the connection is dropped", "TCP",
       type=int, metavar="N", **_bounds("tcp_keepalive_count", off_is_none=True), shown="the kernel's"),
    _S("tcp_user_timeout", None, "TCP_USER_TIMEOUT: drop a connection whose data stays unacknowledged this long",
       "TCP", type=int, metavar="MS", **_bounds("tcp_user_timeout", off_is_none=True), shown="off"),
    _S("tcp_fastopen", None, "TCP Fast Open with a queue of N pending requests (the kernel's net.ipv4.tcp_fastopen "
       "must allow servers)", "TCP", type=int, metavar="N", **_bounds("tcp_fastopen", off_is_none=True), shown="off"),
    _S("auto_raise_nofile", False, "raise the soft open-files limit to the hard limit at start (logged)", "TCP",
       kind="switch"),
    # Limits
    _S("limit_concurrency", None, "answer 503 past N requests in flight", "Limits", type=int, metavar="N",
       shown="off"),
    _S("limit_max_requests", None, "exit after N requests", "Limits", type=int, metavar="N", shown="off"),
    _S("limit_max_requests_jitter", 0, "add up to N to --limit-max-requests, per process, so workers restart apart",
       "Limits", type=int, metavar="N", low=0, high=_U32),
    _S("limit_connections", 100_000, "accept and close at once connections past N", "Limits", type=int,
       metavar="N", **_bounds("limit_connections")),
    _S("limit_connections_per_ip", None, "close at accept a client address's connections past N open at once",
       "Limits", type=int, metavar="N", **_bounds("limit_connections_per_ip", off_is_none=True), shown="off"),
    _S("limit_request_rate", None, "requests a second per client address (after proxy headers); past it and "
       "--limit-request-burst: 429 with retry-after, from the engine", "Limits", type=int, metavar="N",
       **_bounds("limit_request_rate", off_is_none=True), shown="off"),
    _S("limit_request_burst", None, "requests a client may send at once before --limit-request-rate applies",
       "Limits", type=int, metavar="N", **_bounds("limit_request_burst", off_is_none=True),
       shown="the rate"),
    _S("limit_request_table", 8192, "clients the rate limit tracks at once (a power of two; 32 bytes each, "
       "allocated when the limit is on)", "Limits", type=int, metavar="N", **_bounds("limit_request_table")),
    _S("limit_keep_alive_requests", 10_000, "close a connection after N requests", "Limits", type=int, metavar="N",
       **_bounds("limit_keep_alive_requests")),
    _S("limit_request_body", 1 << 30, "413 for request bodies over N bytes", "Limits", type=int, metavar="N",
       **_bounds("limit_request_body")),
    _S("limit_request_line", 8190, "414 for request targets over N bytes", "Limits", type=int, metavar="N",
       **_bounds("limit_request_line")),
    _S("limit_request_fields", 100, f"431 for more than N header lines, at most {_FIELDS_MAX}", "Limits", type=int,
       metavar="N", **_bounds("limit_request_fields")),
    _S("limit_request_head", _HEAD_MAX, f"431 for a request head over N bytes, at most {_HEAD_MAX}", "Limits",
       type=int, metavar="N", **_bounds("limit_request_head")),
    _S("h11_max_incomplete_event_size", None,
       f"uvicorn's name for the head limit: sets --limit-request-head (brought within {_HEAD_MIN}-{_HEAD_MAX})",
       "Limits", type=int, metavar="N", shown="unset"),
)  # fmt: skip
del _S
SETTING = {s.name: s for s in SETTINGS}
DEFAULTS = {s.name: s.default for s in SETTINGS}
WRITER_MODES = {"off": 0, "auto": 1, "on": 2}  # the engine's WriterMode


def _static_mounts(static, route, mount) -> list[tuple[str, str]]:
    """``--static ROUTE=DIR`` entries (or (route, dir) pairs) and granian's
    ``--static-path-route/--static-path-mount`` as checked (route, absolute dir) pairs."""
    entries: list[tuple[str, str]] = []
    for item in _as_list(static):
        if isinstance(item, (tuple, list)) and len(item) == 2:
            entries.append((str(item[0]), os.fspath(item[1])))
        elif isinstance(item, str) and "=" in item:
            entries.append(tuple(item.split("=", 1)))  # type: ignore[arg-type]
        else:
            raise ValueError(f"static must be ROUTE=DIR, not {item!r}")
    if mount is not None:
        entries.append((route or "/static", os.fspath(mount)))
    mounts = []
    for route, directory in entries:
        if not route.startswith("/") or any(ch in route for ch in " ?#%\\\r\n\0") or "/." in route \
                or len(route) > _engine_most("static_route"):
            raise ValueError(f"a static route must be a plain path starting with '/', not {route!r}")
        if not os.path.isdir(directory):
            raise ValueError(f"static directory {directory!r} (for {route}) is not a directory")
        mounts.append((route.rstrip("/") or "/", os.path.abspath(directory)))
    if len(mounts) > _engine_most("static"):
        raise ValueError(f"static: at most {_engine_most('static')} mounts")
    return mounts


class Config:
    """Server settings. Construct, then the server calls `load()` inside its loop.

    Takes `SETTINGS`' keywords (uvicorn's names); each one left out has its default there.
    """

    def __init__(self, app: Any, **options: Any) -> None:
        unknown = sorted(set(options) - SETTING.keys())
        if unknown:
            raise TypeError(f"Config() got an unexpected keyword argument {unknown[0]!r}")
        # Everything needed to build this Config again in a fresh process (--reload).
        self.arguments = {"app": app, **options}
        env_file = options.get("env_file")
        if env_file is not None:
            _load_env_file(env_file)
        values = {**DEFAULTS, **options}
        if values["io_backend"] is None:
            values["io_backend"] = os.environ.get("ZIGCORN_IO_BACKEND") or "auto"
        # uvicorn's alias of the head limit, unless the limit itself was changed.
        if values["h11_max_incomplete_event_size"] is not None and values["limit_request_head"] == _HEAD_MAX:
            values["limit_request_head"] = min(max(int(values["h11_max_incomplete_event_size"]), _HEAD_MIN), _HEAD_MAX)
        for setting in SETTINGS:
            setting.check(values[setting.name])
        for name, value in values.items():
            setattr(self, name, value)
        self.app = app
        self._check_choices()
        if self.user is not None or self.group is not None:
            from zigcorn.process import Identity

            Identity(self.user, self.group)  # an unknown user or group is a configuration error
        if self.workers is None:
            concurrency = os.environ.get("WEB_CONCURRENCY")
            self.workers = int(concurrency) if concurrency and concurrency.isdigit() else 1
            SETTING["workers"].check(self.workers)
        self.reload_dirs = _as_list(self.reload_dirs) or [os.getcwd()]
        for name in ("reload_includes", "reload_excludes"):  # an empty list means the default
            setattr(self, name, _as_list(getattr(self, name)) or list(DEFAULTS[name]))
        forwarded_allow_ips = self.forwarded_allow_ips
        if forwarded_allow_ips is None:
            forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
        self.forwarded_allow_ips = [ip.strip() for ip in _as_list(forwarded_allow_ips) for ip in ip.split(",") if ip.strip()]
        _check_networks(self.forwarded_allow_ips)
        if self.drain_path is not None and not self.admin_token:
            raise ValueError("drain_path needs admin_token (the bearer token a drain request must carry)")
        if self.admin_token is not None and (len(self.admin_token) < 16 or any(c in self.admin_token for c in " \t\r\n")):
            raise ValueError("admin_token must be at least 16 characters, without spaces")
        for name in ("metrics_path", "health_path", "ready_path", "warmup_path", "drain_path"):
            path = getattr(self, name)
            if path is not None and (not path.startswith("/") or any(ch in path for ch in " ?#\r\n")):
                raise ValueError(f"{name} must be a path starting with '/', not {path!r}")
        self.metrics_bucket_seconds = _bucket_seconds(self.metrics_buckets)
        self.static_mounts = _static_mounts(self.static, self.static_path_route, self.static_path_mount)
        if self.limit_request_table & (self.limit_request_table - 1):
            raise ValueError(f"limit_request_table must be a power of two, not {self.limit_request_table}")
        if self.limit_request_burst is not None and self.limit_request_rate is None:
            raise ValueError("limit_request_burst needs limit_request_rate")
        self.hsts_value = ""
        if self.hsts is not None:
            self.hsts_value = f"max-age={int(self.hsts)}" + "; includeSubDomains" * bool(self.hsts_include_subdomains) \
                + "; preload" * bool(self.hsts_preload)
        if self.request_id_header is not None:
            name = str(self.request_id_header).strip().lower()
            if not name or len(name) > _engine_most("request_id_header") or any(ch not in _TOKEN_CHARS for ch in name):
                raise ValueError(f"request_id_header must be a header name, not {self.request_id_header!r}")
            self.request_id_header = name
        self.headers: list[tuple[str, str]] = [_split_header(h) for h in self.headers or ()]
        self.access_log_exclude = frozenset(_as_list(self.access_log_exclude))
        if self.access_log_file == "-":  # gunicorn's spelling of stdout
            self.access_log_file = None
        self.access_format = None
        if self.access_log_format is not None:
            from zigcorn.accesslog import AccessFormat

            self.access_format = AccessFormat(self.access_log_format)
        self.ws_per_message_deflate = bool(self.ws_per_message_deflate)
        self.compression = _compression_list(self.compression)
        self.compression_types = _compression_types(self.compression_types)
        if self.busy_poll is None:
            # A WSGI app's threads need the CPU the spin would take (Flask hello: 6.1k req/s with it, 7.9k without).
            self.busy_poll = 0 if self.interface == "wsgi" else _BUSY_POLL
        self.busy_poll = int(self.busy_poll)
        ssl_keyfile, ssl_certfile, ssl_ca_certs = self.ssl_keyfile, self.ssl_certfile, self.ssl_ca_certs
        self.ssl_keyfile = os.fspath(ssl_keyfile) if ssl_keyfile is not None else None
        self.ssl_certfile = os.fspath(ssl_certfile) if ssl_certfile is not None else None
        self.ssl_ca_certs = os.fspath(ssl_ca_certs) if ssl_ca_certs is not None else None
        self._check_tls()
        self._check_http3()
        # One set of ticket keys for the master and every worker it forks, so a ticket
        # resumes whichever worker accepts the client's next connection.
        self.ssl_ticket_keys = os.urandom(80) if self.is_ssl and self.ssl_session_tickets else None

        # Extra response headers for the engine, ready to copy into each response.
        # `server` and `date` are not here: the engine adds them itself.
        self.encoded_headers: list[tuple[bytes, bytes]] = [
            (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in self.headers
        ]

        self.loaded = False
        self.loaded_app: Any = None
        self.lifespan_class: type | None = None

        self.configure_logging()
        if self.proxy_protocol and not self.proxy_headers:
            logger.warning("--proxy-protocol does nothing with --no-proxy-headers: the balancers it trusts are "
                           "--forwarded-allow-ips, which that turns off.")

    def _check_choices(self) -> None:
        """What the settings table cannot say alone (choices and bounds are checked there)."""
        if self.interface == "wsgi" and self.lifespan == "on":
            # Not ignored quietly: "on" asks for startup to fail without the protocol.
            raise ValueError("lifespan 'on' needs an ASGI app: a WSGI app (interface wsgi) has no lifespan "
                             "protocol; use lifespan auto or off")
        port = self.port
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an integer from 0 to 65535, not {port!r}")
        for name in ("io_uring_buffers", "io_uring_buffer_size"):
            value = getattr(self, name)
            if value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")

    @property
    def resolved_io_backend(self) -> str:
        """The backend asked of the engine (which may still fall back to epoll). `auto` is
        io_uring only under zigcorn's own loop, which asks the ring for work before it
        sleeps (`loop/wait.zig`). Under uvloop or asyncio io_uring serves too (the engine
        asks those loops for its extra passes through call_soon), but it was not clearly
        the faster there (2026-12-03: FastAPI 0.94x, raw app 1.17x at 64 connections,
        4 alternated rounds under uvloop), so another loop gets epoll."""
        if self.io_backend != "auto":
            return self.io_backend
        return IO_BACKEND_AUTO if self.resolved_loop == "zigcorn" else "epoll"

    @property
    def resolved_loop(self) -> str:
        """The loop's kind, `auto` resolved (a custom ``module:function`` stays as given)."""
        return LOOP_AUTO if self.loop == "auto" else self.loop

    @property
    def is_ssl(self) -> bool:
        """HTTPS: a certificate was given (the key may sit in the same file, as with uvicorn)."""
        return bool(self.ssl_certfile)

    def _check_tls(self) -> None:
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ValueError("ssl_keyfile needs ssl_certfile (the certificate chain to serve)")
        version = self.ssl_version
        if isinstance(version, bool) or not isinstance(version, int) or version not in SSL_VERSIONS:
            name = _SSL_VERSION_NAMES.get(version, repr(version))
            raise ValueError(
                f"ssl_version {name} is not supported: use 17 (PROTOCOL_TLS_SERVER, TLS 1.2 and 1.3) "
                "or 5 (PROTOCOL_TLSv1_2, TLS 1.2 only)"
            )
        if self.ssl_cert_reqs not in (0, 1, 2) or isinstance(self.ssl_cert_reqs, bool):
            raise ValueError(
                f"ssl_cert_reqs must be 0 (CERT_NONE), 1 (CERT_OPTIONAL) or 2 (CERT_REQUIRED), not {self.ssl_cert_reqs!r}"
            )
        if self.ssl_cert_reqs and self.is_ssl and not self.ssl_ca_certs:
            raise ValueError("ssl_cert_reqs asks for client certificates: ssl_ca_certs must name the CAs to verify them")
        if self.ssl_keyfile_password is not None and not isinstance(self.ssl_keyfile_password, str):
            raise ValueError("ssl_keyfile_password must be a str")
        if self.ssl_crl is not None:
            self.ssl_crl = os.fspath(self.ssl_crl)
            if not self.ssl_ca_certs:
                raise ValueError("ssl_crl checks client certificates: it needs ssl_ca_certs and ssl_cert_reqs")
        if self.ssl_min_version == "TLSv1.3" and SSL_VERSIONS[version][1] < _TLS13:
            raise ValueError("ssl_min_version TLSv1.3 is above what ssl_version 5 (TLS 1.2 only) allows")

    def _check_http3(self) -> None:
        """--http3 needs the certificate and key, a TCP host to share, and a worker count its
        connection IDs can name; the keys every worker shares are made here, once."""
        self.http3_retry_key = self.http3_reset_key = None
        if not self.http3:
            return
        if not (self.ssl_certfile and self.ssl_keyfile):
            raise ValueError("http3 needs TLS: give ssl_certfile and ssl_keyfile (QUIC always encrypts)")
        if self.fd is not None or self.uds:
            raise ValueError("http3 listens on a UDP port of --host: not with --fd or --uds, which name no UDP "
                             "socket")
        most = _engine_limit("http3_workers")[1]
        if self.workers > most:
            raise ValueError(f"http3 serves at most {most} workers (a connection ID names its worker in one "
                             f"byte), not {self.workers}")
        # One pair for the master and every worker it forks: a Retry token or a stateless
        # reset made by one worker is checked by another.
        self.http3_retry_key = os.urandom(32)
        self.http3_reset_key = os.urandom(32)

    def engine_http3_options(self, fd: int, alt_svc_port: int, worker_index: int, workers: int) -> dict[str, Any]:
        """The engine's HTTP/3 options for one worker's UDP socket `fd` (Python keeps it open)."""
        assert self.http3 and 0 <= worker_index < workers, (worker_index, workers)
        return {
            "http3_fd": fd,
            "http3_alt_svc_port": alt_svc_port,
            "http3_retry": HTTP3_RETRY[self.http3_retry],
            "http3_retry_key": self.http3_retry_key,
            "http3_reset_key": self.http3_reset_key,
            "http3_worker_index": worker_index,
            "http3_workers": workers,
            "http3_idle_timeout_ms": HTTP3_IDLE_TIMEOUT_MS,
        }

    def engine_tls_options(self) -> dict[str, Any]:
        """The engine's TLS options: empty for plain HTTP. Holds the password: never log it."""
        if not self.is_ssl:
            return {}
        low, high = SSL_VERSIONS[self.ssl_version]
        if self.ssl_min_version == "TLSv1.3":
            low = _TLS13
        password = self.ssl_keyfile_password
        return {
            "ssl_certfile": self.ssl_certfile,
            "ssl_keyfile": self.ssl_keyfile,
            "ssl_keyfile_password": password.encode() if password is not None else None,
            "ssl_min_version": low,
            "ssl_max_version": high,
            "ssl_cert_reqs": self.ssl_cert_reqs,
            "ssl_session_tickets": bool(self.ssl_session_tickets),
            "ssl_session_cache": self.ssl_session_cache,
            "ssl_crl": self.ssl_crl,
            "ssl_ticket_keys": self.ssl_ticket_keys,
            "ssl_ca_certs": self.ssl_ca_certs,
            # Never anonymous or unencrypted suites, whatever the list says ("TLSv1" has both).
            "ssl_ciphers": f"{self.ssl_ciphers}:!aNULL:!eNULL" if self.ssl_ciphers else None,
        }

    def engine_options(self) -> dict[str, Any]:
        """Every value the engine runs with, by its option name (see `_core.Engine.options`).

        The Python side adds only its plumbing: the stream classes, ``call_soon`` and the
        metrics slot. Holds the TLS key's password when HTTPS is on: never log it.
        """
        # Upgrade requests are then plain HTTP requests, as in uvicorn; a WSGI app has no WebSocket.
        ws_on = self.ws != "none" and self.interface != "wsgi"
        return {
            "root_path": self.root_path or "",
            "headers": list(self.encoded_headers),
            "server_header": self.server_header,
            "date_header": self.date_header,
            "timeout_keep_alive": float(self.timeout_keep_alive),
            "timeout_header": float(self.timeout_header),
            "timeout_body": float(self.timeout_body),
            "timeout_write": float(self.timeout_write),
            "timeout_connection": self.timeout_connection or 0,
            "writer_thread": WRITER_MODES[self.writer_thread],
            "io_backend": 1 if self.resolved_io_backend == "io_uring" else 0,
            "io_uring_buffers": self.io_uring_buffers,
            "io_uring_buffer_size": self.io_uring_buffer_size,
            "http2": bool(self.http2),
            "h2c_upgrade": bool(self.h2c_upgrade),
            "http2_max_concurrent_streams": self.http2_max_concurrent_streams,
            "busy_poll": self.busy_poll,
            "limit_connections": self.limit_connections,
            "limit_keep_alive_requests": self.limit_keep_alive_requests,
            "limit_request_body": self.limit_request_body,
            "limit_request_line": self.limit_request_line,
            "limit_request_fields": self.limit_request_fields,
            "limit_request_head": self.limit_request_head,
            "forwarded_allow_ips": self.forwarded_allow_ips if self.proxy_headers else None,
            "metrics_path": self.metrics_path,
            "health_path": self.health_path,
            "ready_path": self.ready_path,
            "metrics_buckets": list(self.metrics_bucket_seconds),
            "request_id_header": self.request_id_header,
            "trace_context": bool(self.trace_context),
            "server_timing": bool(self.server_timing),
            "tcp_nodelay": bool(self.tcp_nodelay),
            "tcp_keepalive_idle": self.tcp_keepalive_idle or 0,
            "tcp_keepalive_interval": self.tcp_keepalive_interval or 0,
            "tcp_keepalive_count": self.tcp_keepalive_count or 0,
            "tcp_user_timeout": self.tcp_user_timeout or 0,
            "tcp_fastopen": self.tcp_fastopen or 0,
            "limit_connections_per_ip": self.limit_connections_per_ip or 0,
            "proxy_protocol": bool(self.proxy_protocol),
            "limit_request_rate": self.limit_request_rate or 0,
            "limit_request_burst": (self.limit_request_burst or self.limit_request_rate or 0)
            if self.limit_request_rate else 0,
            "limit_request_table": self.limit_request_table,
            "hsts": self.hsts_value,
            "static": list(self.static_mounts),
            "static_expires": self.static_expires,
            "static_dotfiles": bool(self.static_dotfiles),
            # --compression brings the precompressed siblings with it (files are never
            # compressed on the fly: the engine answers them before any encoder).
            "static_precompressed": bool(self.static_precompressed) or bool(self.compression),
            # For the requests the engine answers itself (static files).
            "access_log": bool(self.access_log) and logging.getLogger("zigcorn.access").isEnabledFor(logging.INFO),
            "ws": ws_on,
            "ws_max_size": self.ws_max_size,
            "ws_max_queue": self.ws_max_queue,
            # None and 0 both mean: no server pings; no pong timeout is the longest the engine takes.
            "ws_ping_interval": float(self.ws_ping_interval or 0),
            "ws_ping_timeout": float(self.ws_ping_timeout if self.ws_ping_timeout is not None else _SECONDS_MAX),
            "ws_per_message_deflate": self.ws_per_message_deflate,
            "compression": ",".join(self.compression),
            "compression_min_size": self.compression_min_size,
            "compression_gzip_level": self.compression_gzip_level,
            "compression_brotli_level": self.compression_brotli_level,
            "compression_zstd_level": self.compression_zstd_level,
            "compression_types": ",".join(self.compression_types),
            "request_decompression": bool(self.request_decompression),
            "ssl_certfile": None,
            "http3_fd": -1,  # the server adds its UDP socket's (`engine_http3_options`)
            **self.engine_tls_options(),
        }

    def configure_logging(self) -> None:
        """Apply `log_config`, then the `log_level` / `access_log` / `use_colors` overrides."""
        logging.addLevelName(TRACE_LOG_LEVEL, "TRACE")
        log_config = self.log_config
        if isinstance(log_config, os.PathLike):
            log_config = os.fspath(log_config)

        if is_default_logging(log_config):
            # The default, applied without logging.config (about 1 MiB of modules).
            apply_default_logging(self.use_colors)
        elif log_config is not None:
            from logging.config import dictConfig, fileConfig  # pulls in socket & co: only now

            if isinstance(log_config, dict):
                if self.use_colors is not None:
                    log_config = copy.deepcopy(log_config)  # never edit the caller's (or our default) dict
                    for formatter in ("default", "access"):
                        if formatter in log_config.get("formatters", {}):
                            log_config["formatters"][formatter]["use_colors"] = self.use_colors
                dictConfig(log_config)
            elif log_config.endswith(".json"):
                import json

                with open(log_config) as file:
                    dictConfig(json.load(file))
            elif log_config.endswith((".yaml", ".yml")):
                try:
                    import yaml
                except ImportError:
                    raise ImportError("Reading a YAML --log-config needs PyYAML: pip install pyyaml") from None
                with open(log_config) as file:
                    dictConfig(yaml.safe_load(file))
            else:  # .ini and other configparser formats
                fileConfig(log_config, disable_existing_loggers=False)

        if self.log_level is not None:
            level = LOG_LEVELS[self.log_level.lower()] if isinstance(self.log_level, str) else self.log_level
            logging.getLogger("zigcorn.error").setLevel(level)
            logging.getLogger("zigcorn.access").setLevel(level)
        if self.access_log is False:
            access_logger = logging.getLogger("zigcorn.access")
            access_logger.handlers = []
            access_logger.propagate = False
        elif self.access_log_file is not None or self.access_log_format is not None:
            self._configure_access_output(is_default_logging(log_config))

    def _configure_access_output(self, default_logging: bool) -> None:
        """--access-log-file replaces the access logger's handlers with the file; a custom
        --access-log-format is the whole line (no level prefix) on zigcorn's own handlers."""
        from zigcorn.accesslog import ReopenableFileHandler
        from zigcorn.logging import AccessFormatter

        access_logger = logging.getLogger("zigcorn.access")
        if self.access_log_format is not None:
            formatter = logging.Formatter("%(message)s")
        else:
            formatter = AccessFormatter(fmt="%(levelprefix)s %(message)s", use_colors=False)
        if self.access_log_file is not None:
            for old in access_logger.handlers[:]:
                access_logger.removeHandler(old)
                if isinstance(old, ReopenableFileHandler):
                    old.close()
            try:
                handler = ReopenableFileHandler(self.access_log_file)
            except OSError as exc:
                raise ValueError(f"access_log_file {self.access_log_file!r}: {exc.strerror or exc}") from None
            handler.setFormatter(formatter)
            access_logger.addHandler(handler)
            access_logger.propagate = False
        elif default_logging:
            for handler in access_logger.handlers:
                handler.setFormatter(formatter)

    def load(self) -> None:
        """Import the app (and call its factory), pick the lifespan runner.

        Import-string mistakes end the process with one log line and exit code 1,
        like uvicorn; exceptions raised by the app's own module propagate as is.
        """
        if self.loaded:
            return
        from zigcorn.lifespan import LifespanOff, LifespanOn

        # A WSGI app has no lifespan protocol.
        self.lifespan_class = LifespanOff if self.lifespan == "off" or self.interface == "wsgi" else LifespanOn

        try:
            app = import_from_string(self.app)
        except ImportFromStringError as exc:
            fail(f"Error loading ASGI app. {exc}")
        if self.factory:
            if not callable(app):
                fail(f"Error loading ASGI app factory: {app!r} is not callable.")
            try:
                app = app()
            except TypeError as exc:
                fail(f"Error loading ASGI app factory: {exc}")
        if not callable(app):
            fail(f"Error loading ASGI app. {app!r} is not callable.")

        from zigcorn.interfaces import adapt

        self.loaded_app = adapt(app, self.interface)
        self.loaded = True

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        """A fresh event loop of the configured kind."""
        return self.loop_factory()()

    def loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        """The callable that makes loops: zigcorn's, uvloop's, asyncio's, or a user's ``module:function``."""
        if self.loop in LOOP_CHOICES:
            from zigcorn.lazyimport import import_asyncio

            # ssl and inspect load only if something uses them (uvloop imports ssl itself).
            asyncio = import_asyncio()
            kind = self.resolved_loop
            if kind == "zigcorn":
                from zigcorn.loop import Loop

                return Loop
            if kind == "uvloop":
                try:
                    import uvloop
                except ImportError:
                    fail('Event loop "uvloop" is not installed: pip install uvloop (or use --loop zigcorn).')
                return uvloop.new_event_loop
            # Not asyncio.new_event_loop(): an installed policy could hand back another kind.
            return asyncio.SelectorEventLoop
        try:
            return import_from_string(self.loop)
        except ImportFromStringError as exc:
            fail(f"Error loading custom loop factory. {exc}")


def _split_header(header: HeaderSpec) -> tuple[str, str]:
    """``"name:value"`` or ``(name, value)`` -> ``(name, value)``, refusing what would break the response."""
    if isinstance(header, str):
        name, sep, value = header.partition(":")
        if not sep:
            raise ValueError(f'header {header!r} must be in format "name:value"')
        name, value = name.strip(), value.strip()
    else:
        name, value = header
    if not name or any(c in name for c in " \t:") or any(c in name + value for c in "\r\n\0"):
        raise ValueError(f"invalid header {header!r}")
    return name, value


# RFC 9110 5.6.2's token characters: what a header name may hold.
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _bucket_seconds(value) -> tuple[float, ...]:
    """``"0.01,0.1,1"`` or a sequence of numbers -> rising bounds (the defaults for None)."""
    if value is None:
        return METRICS_BUCKETS
    items = value.split(",") if isinstance(value, str) else list(value)
    try:
        bounds = tuple(float(item) for item in items)
    except (TypeError, ValueError):
        raise ValueError(f"metrics_buckets must be numbers of seconds, not {value!r}") from None
    if not 1 <= len(bounds) <= METRICS_BUCKETS_MAX:
        raise ValueError(f"metrics_buckets takes 1 to {METRICS_BUCKETS_MAX} bounds, not {len(bounds)}")
    micros = [round(b * 1e6) for b in bounds]
    most = _engine_most("metrics_bucket_seconds")
    if not all(0 < b <= most for b in bounds) or any(b <= a for a, b in zip(micros, micros[1:])) or micros[0] <= 0:
        raise ValueError(f"metrics_buckets must rise, each above 0 and at most {most} seconds (microsecond steps): {value!r}")
    return bounds


def _check_networks(entries: list[str]) -> None:
    """What the engine accepts: "*", "unix:", IP addresses and CIDR networks (`_core.MAXIMA`'s number of them).

    Plain addresses (the default, 127.0.0.1) are checked with ``inet_pton``; ``ipaddress``
    (a quarter MiB of a serving process) is imported only for networks and scoped addresses.
    """
    import socket

    most = _engine_most("forwarded_allow_ips")
    if len(entries) > most:
        raise ValueError(f"forwarded_allow_ips takes at most {most} entries")
    for entry in entries:
        if entry in ("*", "unix:"):
            continue
        try:
            socket.inet_pton(socket.AF_INET6 if ":" in entry else socket.AF_INET, entry)
            continue
        except OSError:
            pass
        import ipaddress

        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ValueError(
                f"forwarded_allow_ips: {entry!r} is not an IP address, a CIDR network, '*' or 'unix:'"
            ) from None


def _comma_items(value) -> list[str]:
    return [item.strip().lower() for item in _as_list(value) for item in item.split(",") if item.strip()]


def _compression_list(value) -> list[str]:
    """--compression: the encodings in the server's order, each once; empty is off."""
    names = _comma_items(value)
    for name in names:
        if name not in COMPRESSION_ENCODINGS:
            raise ValueError(f"compression takes {', '.join(COMPRESSION_ENCODINGS)}, not {name!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"compression names an encoding twice: {value!r}")
    return names


def _compression_types(value) -> list[str]:
    """--compression-types: media types (type/subtype or type/*), without parameters."""
    types = _comma_items(value)
    for t in types:
        main, _, sub = t.partition("/")
        if not main or not sub or any(ch not in _TOKEN_CHARS for ch in main + sub.replace("*", "")) \
                or ("*" in sub and sub != "*"):
            raise ValueError(f"compression_types must be media types like text/html or text/*, not {t!r}")
    most = _engine_most("compression_types")
    if len(",".join(types)) > most:
        raise ValueError(f"compression_types is longer than {most} bytes")
    return types


def _as_list(value: Sequence[str] | str | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def fail(message: str) -> NoReturn:
    """Log one line and exit: a configuration mistake, not a crash worth a traceback."""
    logger.error(message)
    sys.exit(LOAD_FAILURE)


def _check_range(name: str, value, low, high) -> None:
    """Limits are checked once here, so the engine never sees a value it cannot honour."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low} to {high}, not {value!r}")


def _load_env_file(path) -> None:
    """--env-file: the file's variables join the environment (existing ones win), as in uvicorn."""
    try:
        from dotenv import load_dotenv
    except ImportError:
        raise ValueError("env_file needs python-dotenv: pip install python-dotenv") from None
    if not os.path.isfile(path):
        raise ValueError(f"env_file {os.fspath(path)!r} is not a file")
    load_dotenv(dotenv_path=path)
