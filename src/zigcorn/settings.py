"""The settings table: every server knob, written down once.

Each `Setting` is one option: its keyword (uvicorn's name where uvicorn has the knob, so
``uvicorn.run(...)`` calls port by changing the module name), its default, its bounds
(the engine's own where it has them: `_core.LIMITS`), its help text and group, how the
command line takes it, and the engine option it sets. `zigcorn.config.Config`, the
``zigcorn`` command line (`zigcorn.main`), the ``ZIGCORN_*`` environment variables, the
engine's options (`Config.engine_options`) and the reference page ``docs/settings.md``
all come from `SETTINGS`:

    python -m zigcorn.settings --markdown > docs/settings.md

Adding a setting: a row here (with ``engine=`` when the engine acts on it), an entry in
``specs`` in ``src/zig/python/options.zig`` with the field it sets (for an engine option),
the code that uses it, and the page regenerated (tests/operations/test_settings_table.py
fails until it is).
"""

from __future__ import annotations

import logging
import os

from zigcorn.logging import LOGGING_CONFIG, TRACE_LOG_LEVEL

LOG_LEVELS: dict[str, int] = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": TRACE_LOG_LEVEL,
}
LOOP_CHOICES = ("auto", "zigcorn", "asyncio", "uvloop")
# Request tasks: asyncio's Task, or the engine's (zigcorn.loop.Task, on zigcorn's loop only);
# auto: the engine's on zigcorn's loop on Python 3.11-3.15 (where CPython's task tests have
# run against it), asyncio's otherwise.
TASK_IMPL_CHOICES = ("auto", "asyncio", "zigcorn")
# What `auto` picks, by the benchmarks in benchmarks/RESULTS.md (event loop section).
LOOP_AUTO = "zigcorn"
LIFESPAN_CHOICES = ("auto", "on", "off")
WRITER_CHOICES = ("auto", "on", "off")
IO_BACKEND_CHOICES = ("auto", "epoll", "io_uring")
# What `auto` picks, by the benchmarks in benchmarks/RESULTS.md (io_uring section): the
# engine falls back to epoll where the kernel refuses io_uring, and says so at start.
IO_BACKEND_AUTO = "io_uring"
# uvicorn's --interface names; "wsgi" is served natively (zigcorn/protocols/wsgi.py, python/environ.zig).
INTERFACE_CHOICES = ("auto", "asgi3", "asgi2", "wsgi")
# uvicorn's --http names, accepted: the engine's own HTTP/1.1 parser serves all of them.
HTTP_CHOICES = ("auto", "h11", "httptools")
# uvicorn's names; every choice but "none" means the engine's own WebSocket implementation.
WS_CHOICES = ("auto", "none", "websockets", "websockets-sansio", "wsproto")
# --http3-retry, by the engine's Http3Retry values (src/zig/core/options.zig).
HTTP3_RETRY = {"never": 0, "auto": 1, "always": 2}
HTTP3_RETRY_CHOICES = tuple(HTTP3_RETRY)
# --http3-congestion, by the engine's Http3Congestion values (src/zig/core/options.zig).
HTTP3_CONGESTION = {"newreno": 0, "cubic": 1}
HTTP3_CONGESTION_CHOICES = tuple(HTTP3_CONGESTION)

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
                 "low", "high", "shown", "aliases", "engine", "option")  # fmt: skip

    def __init__(self, name, default, help, group, *, flag=None, kind="value", type=None, choices=None, also=None,
                 note=None, metavar=None, low=None, high=None, shown=None, aliases=(), engine=None,
                 option=None):  # fmt: skip
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
        # How the setting reaches the engine (None: it does not, Python acts on it): "value"
        # as Config holds it, "flag" as a bool, "seconds" as a float, "off" with None as
        # 0, "list" as a comma list, or a function of the Config for a value it derives.
        self.engine = engine
        # The engine option it sets (`_core.OPTIONS`; `src/zig/python/options.zig` `specs`).
        self.option = (option or name) if engine is not None else None

    def engine_value(self, config):
        """What the engine is given for this setting, from the resolved `config`."""
        value = getattr(config, self.name)
        if callable(self.engine):
            return self.engine(config)
        if self.engine == "value":
            return value
        if self.engine == "flag":
            return bool(value)
        if self.engine == "seconds":
            return float(value)
        if self.engine == "off":
            return value or 0
        if self.engine == "list":
            return ",".join(value)
        raise AssertionError(f"{self.name}: engine={self.engine!r}")

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
    _S("task_impl", "auto", "request tasks: asyncio's Task, or zigcorn's own (zigcorn's loop only); auto is "
       "asyncio's for now", "Server", choices=TASK_IMPL_CHOICES),
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
    _S("root_path", "", "the path prefix a proxy mounts the app at", "Application", metavar="PATH", engine=lambda c: c.root_path or ""),
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
    _S("access_log", True, "log each request", "Logging", kind="onoff", engine=lambda c: bool(c.access_log) and logging.getLogger("zigcorn.access").isEnabledFor(logging.INFO)),
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
       type="header", metavar="NAME:VALUE", shown="none", engine=lambda c: list(c.encoded_headers)),
    _S("proxy_headers", True, "trust X-Forwarded-* and Forwarded from --forwarded-allow-ips", "HTTP", kind="onoff"),
    _S("forwarded_allow_ips", None,
       "comma-separated IPs/CIDRs to trust proxy headers from, * for all, unix: for --uds peers", "HTTP",
       metavar="IPS", shown="$FORWARDED_ALLOW_IPS or 127.0.0.1", engine=lambda c: c.forwarded_allow_ips if c.proxy_headers else None),
    _S("proxy_protocol", False, "connections from --forwarded-allow-ips begin with a PROXY protocol header (v1 or "
       "v2, as HAProxy, AWS NLB and GCP send): its source address is the client", "HTTP", kind="switch", engine="flag"),
    _S("server_header", True, "send a Server header", "HTTP", kind="onoff", engine="flag"),
    _S("date_header", True, "send a Date header", "HTTP", kind="onoff", engine="flag"),
    _S("writer_thread", "auto",
       "write complete responses from an engine thread: auto does while the app is the bottleneck", "HTTP",
       choices=WRITER_CHOICES, engine=lambda c: WRITER_MODES[c.writer_thread]),
    _S("http", "auto", "HTTP/1.1 implementation; every choice is the engine's own parser (uvicorn's names)", "HTTP",
       choices=HTTP_CHOICES, note="zigcorn parses HTTP in its engine: a protocol class cannot be given"),
    _S("http2", True, "serve HTTP/2: h2 over TLS (ALPN) and h2c with prior knowledge", "HTTP", kind="onoff", engine="flag"),
    _S("h2c_upgrade", False, "honour the HTTP/1.1 Upgrade to h2c (RFC 7540 3.2, deprecated): off, it is ignored "
       "and the request served as HTTP/1.1; on behind a proxy, the upgraded connection is a tunnel the proxy no "
       "longer reads (a request that shows a proxy hop is never upgraded)", "HTTP", kind="switch", engine="flag"),
    _S("compression", None, "compress responses with these encodings, in the server's order of preference "
       "(a comma list of zstd, br, gzip), chosen against the request's accept-encoding", "Compression",
       metavar="LIST", shown="off", engine="list"),
    _S("compression_min_size", 1024, "a one-shot response body smaller than this is sent as it is", "Compression",
       type=int, metavar="BYTES", **_bounds("compression_min_size"), engine="value"),
    _S("compression_gzip_level", 6, "gzip level ({} fastest .. {} smallest)".format(*_GZIP), "Compression",
       type=int, metavar="N", **_bounds("compression_gzip_level"), engine="value"),
    _S("compression_brotli_level", 4, "brotli quality ({} fastest .. {} smallest)".format(*_BROTLI), "Compression",
       type=int, metavar="N", **_bounds("compression_brotli_level"), engine="value"),
    _S("compression_zstd_level", 3, "zstd level ({} fastest .. {} smallest)".format(*_ZSTD), "Compression",
       type=int, metavar="N", **_bounds("compression_zstd_level"), engine="value"),
    _S("compression_types", COMPRESSION_TYPES, "content types compressed (a comma list; type/* matches a whole "
       "type; +json and +xml suffixes always match)", "Compression", metavar="LIST", shown="text/*, json, "
       "js, xml, svg, wasm", engine="list"),
    _S("request_decompression", False, "decode request bodies sent with content-encoding gzip, br or zstd before "
       "the app reads them (others get 415; --limit-request-body counts decoded bytes)", "Compression",
       kind="switch", engine="flag"),
    _S("http2_max_concurrent_streams", 100, "streams one HTTP/2 connection may have open at once", "HTTP",
       type=int, metavar="N", **_bounds("http2_max_concurrent_streams"), engine="value"),
    _S("io_backend", None, "how the engine waits for sockets: epoll, io_uring (falls back to epoll where the "
       "kernel refuses it) or auto", "HTTP", choices=IO_BACKEND_CHOICES, shown="$ZIGCORN_IO_BACKEND or auto", engine=lambda c: 1 if c.resolved_io_backend == "io_uring" else 0),
    _S("io_uring_buffers", 256, "io_uring: receive buffers in the ring at most, a power of two (it starts with "
       "16 and doubles when a receive finds it empty; a buffer is taken only while bytes wait)", "HTTP", type=int,
       metavar="N", **_bounds("io_uring_buffers"), engine="value"),
    _S("io_uring_buffer_size", 4096, "io_uring: bytes per receive buffer, a power of two", "HTTP", type=int,
       metavar="BYTES", **_bounds("io_uring_buffer_size"), engine="value"),
    _S("busy_poll", None, "once every request is answered, poll this long before sleeping; 0 never", "HTTP",
       type=int, metavar="USEC", low=0, high=5000, shown="100, 0 with --interface wsgi", engine="value"),
    # Metrics and health
    _S("metrics_path", None, "serve Prometheus metrics here, without the app (e.g. /metrics)", "Metrics and health",
       metavar="PATH", shown="off", engine="value"),
    _S("health_path", None, "answer 200 here without the app from the moment the server listens (startup "
       "included), 503 from the drain's start", "Metrics and health", metavar="PATH", shown="off", engine="value"),
    _S("ready_path", None, "answer 200 here without the app while the server wants traffic, 503 during startup "
       "and warm-up (the server then listens from the start; other requests get 503 with retry-after) and from "
       "the drain's start", "Metrics and health", metavar="PATH", shown="off", engine="value"),
    _S("metrics_buckets", None, "upper bounds of the request-duration histogram, comma-separated, rising",
       "Metrics and health", metavar="SECONDS,...", shown=",".join(f"{b:g}" for b in METRICS_BUCKETS), engine=lambda c: list(c.metrics_bucket_seconds)),
    _S("request_id_header", None, "keep a sane incoming request id in this header, else make one (128 random "
       "bits); the app sees it, the response carries it", "Metrics and health", metavar="NAME", shown="off", engine="value"),
    _S("trace_context", False, "W3C Trace Context: drop an invalid traceparent/tracestate, start a trace when "
       "none came", "Metrics and health", kind="switch", engine="flag"),
    _S("server_timing", False, "add server-timing: app;dur=<ms> (request head to response head)",
       "Metrics and health", kind="switch", engine="flag"),
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
       "Static files", kind="append", metavar="ROUTE=DIR", shown="none", engine=lambda c: list(c.static_mounts)),
    _S("static_path_route", "/static", "granian's name: the route of --static-path-mount", "Static files",
       metavar="ROUTE"),
    _S("static_path_mount", None, "granian's name: serve this directory at --static-path-route", "Static files",
       metavar="DIR", shown="none"),
    _S("static_expires", None, "cache-control max-age of static files", "Static files", type=int,
       metavar="SECONDS", **_bounds("static_expires"), shown="no cache-control", engine="value"),
    _S("static_dotfiles", False, "serve static files whose path has a name starting with '.'", "Static files",
       kind="switch", engine="flag"),
    _S("static_precompressed", False, "send a static file's .br, .zst or .gz sibling to clients that accept "
       "that coding (on with --compression too)", "Static files", kind="switch", engine=lambda c: bool(c.static_precompressed) or bool(c.compression)),
    # WebSockets
    _S("ws", "auto", "WebSocket support; anything but none is the engine's own", "WebSockets", choices=WS_CHOICES, engine=lambda c: c.ws != "none" and c.interface != "wsgi"),
    _S("ws_max_size", 16 * 1024 * 1024, "close with 1009 on larger messages", "WebSockets", type=int,
       metavar="BYTES", **_bounds("ws_max_size"), engine="value"),
    _S("ws_max_queue", 32, "messages waiting for the app before the socket stops being read", "WebSockets",
       type=int, metavar="N", low=1, high=2**20, engine="value"),
    _S("ws_ping_interval", 20.0, "ping every open WebSocket this often, 0 for never", "WebSockets", type=float,
       metavar="SECONDS", **_bounds("ws_ping_interval"), engine=lambda c: float(c.ws_ping_interval or 0)),
    _S("ws_ping_timeout", 20.0, "close with 1011 when a pong does not come within this", "WebSockets",
       type=float, metavar="SECONDS", **_bounds("ws_ping_timeout"), engine=lambda c: float(c.ws_ping_timeout if c.ws_ping_timeout is not None else _SECONDS_MAX)),
    _S("ws_per_message_deflate", True, "negotiate permessage-deflate when offered", "WebSockets", type="boolean",
       metavar="BOOL", shown="true", engine="flag"),
    # Timeouts
    _S("timeout_keep_alive", 5, "close an idle keep-alive connection after this", "Timeouts", type=float,
       metavar="SECONDS", **_bounds("timeout_keep_alive"), engine="seconds"),
    _S("timeout_header", 30, "a request head must arrive within this, from its first byte", "Timeouts",
       type=float, metavar="SECONDS", **_bounds("timeout_header"), engine="seconds"),
    _S("timeout_body", 30, "an app waiting for request body bytes waits at most this for more", "Timeouts",
       type=float, metavar="SECONDS", **_bounds("timeout_body"), engine="seconds"),
    _S("timeout_write", 30, "close a connection whose pending output makes no progress for this", "Timeouts",
       type=float, metavar="SECONDS", **_bounds("timeout_write"), engine="seconds"),
    _S("timeout_connection", None, "a connection older than this ends after its current response (HTTP/1.1: "
       "connection: close, HTTP/2: GOAWAY); WebSockets are not cut", "Timeouts", type=int, metavar="SECONDS",
       **_bounds("timeout_connection", off_is_none=True), shown="off", engine="off"),
    _S("timeout_request", None, "cancel an app that has not finished a request after this", "Timeouts",
       type=float, metavar="SECONDS", shown="off"),
    _S("timeout_graceful_shutdown", None, "max wait for in-flight requests at shutdown", "Timeouts", type=float,
       metavar="SECONDS", shown="forever"),
    _S("timeout_worker_healthcheck", 5, "with --workers: replace a worker whose loop does not answer a ping in this",
       "Timeouts", type=float, metavar="SECONDS", low=0.1, high=_SECONDS_MAX),
    # TLS (HTTPS)
    _S("ssl_keyfile", None, "the private key (PEM)", "TLS (HTTPS)", metavar="PATH", shown="in --ssl-certfile", engine="value"),
    _S("ssl_certfile", None, "the certificate chain (PEM); turns HTTPS on", "TLS (HTTPS)", metavar="PATH", engine=lambda c: c.ssl_certfile or None),
    _S("ssl_keyfile_password", None, "password of an encrypted key", "TLS (HTTPS)", metavar="TEXT", engine=lambda c: c.ssl_keyfile_password.encode() if c.ssl_keyfile_password is not None else None),
    _S("ssl_version", PROTOCOL_TLS_SERVER,
       "17 (PROTOCOL_TLS_SERVER): TLS 1.2 and 1.3; 5 (PROTOCOL_TLSv1_2): 1.2 only", "TLS (HTTPS)", type=int,
       metavar="N", engine=lambda c: SSL_VERSIONS[c.ssl_version][1], option="ssl_max_version"),
    _S("ssl_cert_reqs", CERT_NONE, "client certificates: 0 none, 1 optional, 2 required", "TLS (HTTPS)", type=int,
       metavar="N", engine="value"),
    _S("ssl_ca_certs", None, "CA certificates (PEM) that verify client certificates", "TLS (HTTPS)", metavar="PATH", engine="value"),
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
       "(uvicorn's before 0.48), whose TLS 1.2 suites are SHA-1 CBC only", "TLS (HTTPS)", metavar="LIST", engine=lambda c: f"{c.ssl_ciphers}:!aNULL:!eNULL" if c.ssl_ciphers else None),
    _S("ssl_min_version", None, "the lowest TLS version accepted (raises --ssl-version's)", "TLS (HTTPS)",
       choices=("TLSv1.2", "TLSv1.3"), shown="TLSv1.2", engine=lambda c: _TLS13 if c.ssl_min_version == "TLSv1.3" else SSL_VERSIONS[c.ssl_version][0]),
    _S("ssl_session_tickets", True, "issue TLS session tickets (resumption without a server cache; the keys are "
       "shared by the workers and change at each start)", "TLS (HTTPS)", kind="onoff", engine="flag"),
    _S("ssl_session_cache", 0, "sessions a server-side cache holds per worker, 0 for none (about 1 KiB each)",
       "TLS (HTTPS)", type=int, metavar="N", **_bounds("ssl_session_cache"), engine="value"),
    _S("ssl_crl", None, "certificate revocation lists (PEM) that client certificates are checked against",
       "TLS (HTTPS)", metavar="PATH", engine="value"),
    _S("hsts", None, "HTTPS responses carry strict-transport-security: max-age=SECONDS (unless the app sets it)",
       "TLS (HTTPS)", type=int, metavar="SECONDS", low=0, high=2**31 - 1, shown="off", engine=lambda c: c.hsts_value),
    _S("hsts_include_subdomains", False, "--hsts: add includeSubDomains", "TLS (HTTPS)", kind="switch"),
    _S("hsts_preload", False, "--hsts: add preload (needs a max-age of a year or more and includeSubDomains)",
       "TLS (HTTPS)", kind="switch"),
    # HTTP/3 (QUIC): uvicorn has no such flag; hypercorn's is --quic-bind.
    _S("http3", False, "serve HTTP/3 over QUIC on a UDP port of the same host (needs --ssl-certfile and "
       "--ssl-keyfile); TLS responses advertise it with alt-svc", "HTTP/3", kind="switch"),
    _S("http3_port", None, "the UDP port HTTP/3 listens on, 0 for any", "HTTP/3", type="port",
       metavar="PORT", low=0, high=65535, shown="the TLS port"),
    _S("http3_retry", "auto", "QUIC Retry (the client proves its address before the server keeps state): auto "
       "while many handshakes are pending, always, or never", "HTTP/3", choices=HTTP3_RETRY_CHOICES, engine=lambda c: HTTP3_RETRY[c.http3_retry]),
    # Each worker's QUIC limits. The idle timeout is longer than HTTP/1.1's keep-alive: an
    # idle QUIC connection holds no socket and resumes without a handshake.
    _S("http3_max_streams", 128, "request streams a client may have open at once on one connection (QUIC's "
       "MAX_STREAMS, raised as streams end)", "HTTP/3", type=int, metavar="N", **_bounds("http3_max_streams"),
       engine="value"),
    _S("http3_stream_window", 64 * 1024, "bytes a client may send on one stream ahead of what the app read "
       "(QUIC's stream flow-control window: the most one stream buffers)", "HTTP/3", type=int, metavar="BYTES",
       **_bounds("http3_stream_window"), engine="value"),
    _S("http3_connection_window", 1 << 20, "bytes a client may send on all streams of a connection ahead of what "
       "the app read (QUIC's connection flow-control window)", "HTTP/3", type=int, metavar="BYTES",
       **_bounds("http3_connection_window"), engine="value"),
    _S("http3_idle_timeout", 30.0, "close a QUIC connection idle this long (its max_idle_timeout; a client's "
       "shorter one wins)", "HTTP/3", type=float, metavar="SECONDS", **_bounds("http3_idle_timeout"),
       engine="seconds"),
    _S("http3_handshake_timeout", 10.0, "drop, silently, a QUIC handshake not complete this long after the "
       "client's first Initial", "HTTP/3", type=float, metavar="SECONDS", **_bounds("http3_handshake_timeout"),
       engine="seconds"),
    _S("http3_handshakes_before_retry", 64, "with --http3-retry auto: from N handshakes pending in a worker, a new "
       "client proves its address with a Retry first", "HTTP/3", type=int, metavar="N",
       **_bounds("http3_handshakes_before_retry"), engine="value"),
    _S("http3_max_handshakes", 256, "past N handshakes pending in a worker, a new client's Initial is dropped "
       "(at least --http3-handshakes-before-retry)", "HTTP/3", type=int, metavar="N",
       **_bounds("http3_max_handshakes"), engine="value"),
    _S("http3_max_connections", 4096, "QUIC connections per worker; past it a new client's Initial is dropped "
       "(at least --http3-max-handshakes; the worker's connection-ID table takes 320 to 640 bytes per connection, at start)",
       "HTTP/3", type=int, metavar="N", **_bounds("http3_max_connections"), engine="value"),
    _S("http3_congestion", "newreno", "QUIC congestion controller: NewReno (RFC 9002) or CUBIC (RFC 9438)",
       "HTTP/3", choices=HTTP3_CONGESTION_CHOICES, engine=lambda c: HTTP3_CONGESTION[c.http3_congestion]),
    _S("http3_qlog_dir", None, "write a qlog file per QUIC connection into this directory (JSON-SEQ, for qvis; "
       "written on the worker's thread: for debugging)", "HTTP/3", metavar="DIR", shown="off",
       engine=lambda c: os.path.abspath(c.http3_qlog_dir) if c.http3_qlog_dir else None),
    # TCP
    _S("tcp_nodelay", True, "TCP_NODELAY on accepted connections: small responses leave at once", "TCP",
       kind="onoff", engine="flag"),
    _S("tcp_keepalive_idle", None, "TCP keepalive: probe a connection idle this long (any of the three turns "
       "keepalive on)", "TCP", type=int, metavar="SECONDS", **_bounds("tcp_keepalive_idle", off_is_none=True),
       shown="off", engine="off"),
    _S("tcp_keepalive_interval", None, "TCP keepalive: seconds between unanswered probes", "TCP", type=int,
       metavar="SECONDS", **_bounds("tcp_keepalive_interval", off_is_none=True), shown="the kernel's", engine="off"),
    _S("tcp_keepalive_count", None, "TCP keepalive: unanswered probes before the connection is dropped", "TCP",
       type=int, metavar="N", **_bounds("tcp_keepalive_count", off_is_none=True), shown="the kernel's", engine="off"),
    _S("tcp_user_timeout", None, "TCP_USER_TIMEOUT: drop a connection whose data stays unacknowledged this long",
       "TCP", type=int, metavar="MS", **_bounds("tcp_user_timeout", off_is_none=True), shown="off", engine="off"),
    _S("tcp_fastopen", None, "TCP Fast Open with a queue of N pending requests (the kernel's net.ipv4.tcp_fastopen "
       "must allow servers)", "TCP", type=int, metavar="N", **_bounds("tcp_fastopen", off_is_none=True), shown="off", engine="off"),
    _S("auto_raise_nofile", False, "raise the soft open-files limit to the hard limit at start (logged)", "TCP",
       kind="switch"),
    # Limits
    _S("limit_concurrency", None, "answer 503 past N requests in flight", "Limits", type=int, metavar="N",
       shown="off"),
    _S("limit_max_requests", None, "exit after N requests", "Limits", type=int, metavar="N", shown="off"),
    _S("limit_max_requests_jitter", 0, "add up to N to --limit-max-requests, per process, so workers restart apart",
       "Limits", type=int, metavar="N", low=0, high=_U32),
    _S("limit_connections", 100_000, "accept and close at once connections past N", "Limits", type=int,
       metavar="N", **_bounds("limit_connections"), engine="value"),
    _S("limit_connections_per_ip", None, "close at accept a client address's connections past N open at once",
       "Limits", type=int, metavar="N", **_bounds("limit_connections_per_ip", off_is_none=True), shown="off", engine="off"),
    _S("limit_request_rate", None, "requests a second per client address (after proxy headers); past it and "
       "--limit-request-burst: 429 with retry-after, from the engine", "Limits", type=int, metavar="N",
       **_bounds("limit_request_rate", off_is_none=True), shown="off", engine="off"),
    _S("limit_request_burst", None, "requests a client may send at once before --limit-request-rate applies",
       "Limits", type=int, metavar="N", **_bounds("limit_request_burst", off_is_none=True),
       shown="the rate", engine=lambda c: (c.limit_request_burst or c.limit_request_rate) if c.limit_request_rate else 0),
    _S("limit_request_table", 8192, "clients the rate limit tracks at once (a power of two; 32 bytes each, "
       "allocated when the limit is on)", "Limits", type=int, metavar="N", **_bounds("limit_request_table"), engine="value"),
    _S("limit_keep_alive_requests", 10_000, "close a connection after N requests", "Limits", type=int, metavar="N",
       **_bounds("limit_keep_alive_requests"), engine="value"),
    _S("limit_request_body", 1 << 30, "413 for request bodies over N bytes", "Limits", type=int, metavar="N",
       **_bounds("limit_request_body"), engine="value"),
    _S("limit_request_line", 8190, "414 for request targets over N bytes", "Limits", type=int, metavar="N",
       **_bounds("limit_request_line"), engine="value"),
    _S("limit_request_fields", 100, f"431 for more than N header lines, at most {_FIELDS_MAX}", "Limits", type=int,
       metavar="N", **_bounds("limit_request_fields"), engine="value"),
    _S("limit_request_head", _HEAD_MAX, f"431 for a request head over N bytes, at most {_HEAD_MAX}", "Limits",
       type=int, metavar="N", **_bounds("limit_request_head"), engine="value"),
    _S("h11_max_incomplete_event_size", None,
       f"uvicorn's name for the head limit: sets --limit-request-head (brought within {_HEAD_MIN}-{_HEAD_MAX})",
       "Limits", type=int, metavar="N", shown="unset"),
)  # fmt: skip
del _S
SETTING = {s.name: s for s in SETTINGS}
DEFAULTS = {s.name: s.default for s in SETTINGS}
WRITER_MODES = {"off": 0, "auto": 1, "on": 2}  # the engine's WriterMode


# Engine options no setting gives: the server fills them in (the shared TLS ticket keys,
# each worker's HTTP/3 socket and identity; `http3_fd` is there, -1, with HTTP/3 off too).
ENGINE_ONLY = {
    "tls": ("ssl_ticket_keys",),
    "http3": ("http3_fd", "http3_alt_svc_port", "http3_retry_key", "http3_reset_key", "http3_worker_index", "http3_workers"),
}


def engine_settings(when: str) -> tuple[Setting, ...]:
    """The settings that set an engine option carried `when` ("always", "tls", "http3")."""
    from zigcorn._core import OPTIONS

    return tuple(s for s in SETTINGS if s.option is not None and OPTIONS[s.option] == when)


def _check_range(name: str, value, low, high) -> None:
    """Limits are checked once here, so the engine never sees a value it cannot honour."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low} to {high}, not {value!r}")


def _shown_default(setting: Setting) -> str:
    """The default as ``--help`` says it."""
    if setting.shown is not None:
        return setting.shown
    default = setting.default
    if setting.kind == "onoff":
        return "on" if default else "off"
    if setting.kind == "switch":
        return "off"
    if isinstance(default, (tuple, list)):
        return " ".join(default)
    return "" if default is None else str(default)


def _values(setting: Setting) -> str:
    """What a setting takes, in a few words."""
    if setting.kind in ("onoff", "switch") or setting.type == "boolean":
        return "on / off"
    if setting.choices is not None:
        words = " / ".join(f"`{choice}`" for choice in setting.choices)
        return words + (f" or {setting.also[1]}" if setting.also else "")
    if setting.type == "port":
        return "0 to 65535"
    if setting.low is not None:
        return f"{setting.low:,} to {setting.high:,}"
    if setting.kind == "append":
        return (setting.metavar or "text") + ", repeatable"
    if setting.type is int:
        return "an integer"
    if setting.type is float:
        return "a number"
    return setting.metavar or "text"


def _cell(text: str) -> str:
    return text.replace("%%", "%").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def markdown() -> str:
    """The settings reference page: one table per group, in the table's order."""
    out = [
        "# Settings",
        "",
        "<!-- Generated from src/zigcorn/settings.py by `python -m zigcorn.settings --markdown`: "
        "do not edit by hand. -->",
        "",
        "Every setting is a command-line flag, a `ZIGCORN_<NAME>` environment variable, a key of a "
        "`--config` TOML file and a keyword of `zigcorn.run()` and `zigcorn.Config`, by the names below. "
        "The command line wins over the environment, which wins over the file. Bounds are checked when the "
        "server starts, by Python and again by the engine.",
        "",
    ]
    groups: dict[str, list[Setting]] = {}
    for setting in SETTINGS:
        groups.setdefault(setting.group, []).append(setting)
    for group, settings in groups.items():
        out += [f"## {group}", "", "| Flag | Keyword | Default | Values | What it does |", "|---|---|---|---|---|"]
        for s in settings:
            flags = "<br>".join(f"`{flag}`" for flag in (s.flag, *s.aliases))
            if s.kind == "onoff":
                flags += f"<br>`--no-{s.flag[2:]}`"
            default = _shown_default(s)
            engine = f" (engine option `{s.option}`)" if s.option is not None else ""
            out.append(f"| {flags} | `{s.name}` | {_cell(f'`{default}`' if default else '')} | {_cell(_values(s))} "
                       f"| {_cell(s.help)}{engine} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    import sys

    args = sys.argv[1:] if argv is None else argv
    if args != ["--markdown"]:
        sys.exit("usage: python -m zigcorn.settings --markdown > docs/settings.md")
    sys.stdout.write(markdown())


if __name__ == "__main__":
    main()
