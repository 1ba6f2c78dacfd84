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
LOOP_CHOICES = ("auto", "asyncio", "uvloop")
LIFESPAN_CHOICES = ("auto", "on", "off")
WRITER_CHOICES = ("auto", "on", "off")
# uvicorn's names; every choice but "none" means the engine's own WebSocket implementation.
WS_CHOICES = ("auto", "none", "websockets", "websockets-sansio", "wsproto")

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


class Config:
    """Server settings. Construct, then the server calls `load()` inside its loop."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 8000,
        uds: str | None = None,
        uds_perms: int = 0o666,
        fd: int | None = None,
        reuse_port: bool = False,
        workers: int | None = None,
        reload: bool = False,
        reload_dirs: Sequence[str] | str | None = None,
        reload_includes: Sequence[str] | str | None = None,
        reload_excludes: Sequence[str] | str | None = None,
        reload_delay: float = 0.25,
        proxy_headers: bool = True,
        forwarded_allow_ips: Sequence[str] | str | None = None,
        metrics_path: str | None = None,
        health_path: str | None = None,
        loop: str = "auto",
        lifespan: str = "auto",
        log_config: dict[str, Any] | str | os.PathLike[str] | None = LOGGING_CONFIG,
        log_level: str | int | None = None,
        access_log: bool = True,
        use_colors: bool | None = None,
        factory: bool = False,
        root_path: str = "",
        timeout_keep_alive: float = 5,
        timeout_graceful_shutdown: float | None = None,
        timeout_header: float = 30,
        timeout_body: float = 30,
        timeout_write: float = 30,
        timeout_request: float | None = None,
        server_header: bool = True,
        date_header: bool = True,
        headers: Sequence[HeaderSpec] | None = None,
        backlog: int = 2048,
        limit_concurrency: int | None = None,
        limit_max_requests: int | None = None,
        limit_connections: int = 100_000,
        limit_keep_alive_requests: int = 10_000,
        limit_request_body: int = 1 << 30,
        limit_request_line: int = 8190,
        limit_request_fields: int = 100,
        limit_request_head: int = 16384,
        ws: str = "auto",
        ws_max_size: int = 16 * 1024 * 1024,
        ws_max_queue: int = 32,
        ws_ping_interval: float | None = 20.0,
        ws_ping_timeout: float | None = 20.0,
        ws_per_message_deflate: bool = True,
        writer_thread: str = "auto",
        busy_poll: int = 100,
        ssl_keyfile: str | os.PathLike[str] | None = None,
        ssl_certfile: str | os.PathLike[str] | None = None,
        ssl_keyfile_password: str | None = None,
        ssl_version: int = PROTOCOL_TLS_SERVER,
        ssl_cert_reqs: int = CERT_NONE,
        ssl_ca_certs: str | os.PathLike[str] | None = None,
        ssl_ciphers: str = "TLSv1",
    ) -> None:
        # Everything needed to build this Config again in a fresh process (--reload).
        self.arguments = {name: value for name, value in locals().items() if name != "self"}
        if loop not in LOOP_CHOICES and ":" not in loop:
            choices = ", ".join(LOOP_CHOICES)
            raise ValueError(f"loop must be one of {choices} or a '<module>:<attribute>' string, not {loop!r}")
        if lifespan not in LIFESPAN_CHOICES:
            raise ValueError(f"lifespan must be one of {', '.join(LIFESPAN_CHOICES)}, not {lifespan!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an integer from 0 to 65535, not {port!r}")
        if ws not in WS_CHOICES:
            raise ValueError(f"ws must be one of {', '.join(WS_CHOICES)}, not {ws!r}")
        if isinstance(log_level, str) and log_level.lower() not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}, not {log_level!r}")

        self.app = app
        self.host = host
        self.port = port
        self.uds = uds
        self.uds_perms = uds_perms
        self.fd = fd
        self.reuse_port = reuse_port
        if workers is None:
            concurrency = os.environ.get("WEB_CONCURRENCY")
            workers = int(concurrency) if concurrency and concurrency.isdigit() else 1
        self.workers = workers
        _check_range("workers", workers, 1, 1024)
        self.reload = reload
        self.reload_dirs = _as_list(reload_dirs) or [os.getcwd()]
        self.reload_includes = _as_list(reload_includes) or ["*.py"]
        self.reload_excludes = _as_list(reload_excludes) or [".*", ".py[cod]", ".sw.*", "~*"]
        self.reload_delay = reload_delay
        self.proxy_headers = proxy_headers
        if forwarded_allow_ips is None:
            forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
        self.forwarded_allow_ips = [ip.strip() for ip in _as_list(forwarded_allow_ips) for ip in ip.split(",") if ip.strip()]
        _check_networks(self.forwarded_allow_ips)
        for name, path in (("metrics_path", metrics_path), ("health_path", health_path)):
            if path is not None and (not path.startswith("/") or any(ch in path for ch in " ?#\r\n")):
                raise ValueError(f"{name} must be a path starting with '/', not {path!r}")
        self.metrics_path = metrics_path
        self.health_path = health_path
        self.loop = loop
        self.lifespan = lifespan
        self.log_config = log_config
        self.log_level = log_level
        self.access_log = access_log
        self.use_colors = use_colors
        self.factory = factory
        self.root_path = root_path
        self.timeout_keep_alive = timeout_keep_alive
        self.timeout_graceful_shutdown = timeout_graceful_shutdown
        self.server_header = server_header
        self.date_header = date_header
        self.headers: list[tuple[str, str]] = [_split_header(h) for h in headers or ()]
        self.backlog = backlog
        self.limit_concurrency = limit_concurrency
        self.limit_max_requests = limit_max_requests
        self.timeout_header = timeout_header
        self.timeout_body = timeout_body
        self.timeout_write = timeout_write
        self.timeout_request = timeout_request
        self.limit_connections = limit_connections
        self.limit_keep_alive_requests = limit_keep_alive_requests
        self.limit_request_body = limit_request_body
        self.limit_request_line = limit_request_line
        self.limit_request_fields = limit_request_fields
        self.limit_request_head = limit_request_head
        self.ws = ws
        self.ws_max_size = ws_max_size
        self.ws_max_queue = ws_max_queue
        self.ws_ping_interval = ws_ping_interval
        self.ws_ping_timeout = ws_ping_timeout
        self.ws_per_message_deflate = bool(ws_per_message_deflate)
        if writer_thread not in WRITER_CHOICES:
            raise ValueError(f"writer_thread must be one of {', '.join(WRITER_CHOICES)}, not {writer_thread!r}")
        self.writer_thread = writer_thread
        _check_range("busy_poll", busy_poll, 0, 5000)
        self.busy_poll = int(busy_poll)
        _check_range("ws_max_size", ws_max_size, 1, 2**32 - 1)
        _check_range("ws_max_queue", ws_max_queue, 1, 2**20)
        for name in ("ws_ping_interval", "ws_ping_timeout"):
            if getattr(self, name) is not None:
                _check_range(name, getattr(self, name), 0, 10**9)
        _check_range("limit_request_head", limit_request_head, 256, 16384)
        _check_range("limit_request_line", limit_request_line, 16, 16384)
        _check_range("limit_request_fields", limit_request_fields, 1, 128)
        for name in ("limit_connections", "limit_keep_alive_requests"):
            _check_range(name, getattr(self, name), 1, 2**32 - 1)
        _check_range("limit_request_body", limit_request_body, 0, 2**63 - 1)
        for name in ("timeout_keep_alive", "timeout_header", "timeout_body", "timeout_write"):
            _check_range(name, getattr(self, name), 0, 10**9)

        self.ssl_keyfile = os.fspath(ssl_keyfile) if ssl_keyfile is not None else None
        self.ssl_certfile = os.fspath(ssl_certfile) if ssl_certfile is not None else None
        self.ssl_keyfile_password = ssl_keyfile_password
        self.ssl_version = ssl_version
        self.ssl_cert_reqs = ssl_cert_reqs
        self.ssl_ca_certs = os.fspath(ssl_ca_certs) if ssl_ca_certs is not None else None
        self.ssl_ciphers = ssl_ciphers
        self._check_tls()

        # Extra response headers for the engine, ready to copy into each response.
        # `server` and `date` are not here: the engine adds them itself.
        self.encoded_headers: list[tuple[bytes, bytes]] = [
            (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in self.headers
        ]

        self.loaded = False
        self.loaded_app: Any = None
        self.lifespan_class: type | None = None

        self.configure_logging()

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

    def engine_tls_options(self) -> dict[str, Any]:
        """The engine's TLS options: empty for plain HTTP. Holds the password: never log it."""
        if not self.is_ssl:
            return {}
        low, high = SSL_VERSIONS[self.ssl_version]
        password = self.ssl_keyfile_password
        return {
            "ssl_certfile": self.ssl_certfile,
            "ssl_keyfile": self.ssl_keyfile,
            "ssl_keyfile_password": password.encode() if password is not None else None,
            "ssl_min_version": low,
            "ssl_max_version": high,
            "ssl_cert_reqs": self.ssl_cert_reqs,
            "ssl_ca_certs": self.ssl_ca_certs,
            # Never anonymous or unencrypted suites, whatever the list says ("TLSv1" has both).
            "ssl_ciphers": f"{self.ssl_ciphers}:!aNULL:!eNULL" if self.ssl_ciphers else None,
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

    def load(self) -> None:
        """Import the app (and call its factory), pick the lifespan runner.

        Import-string mistakes end the process with one log line and exit code 1,
        like uvicorn; exceptions raised by the app's own module propagate as is.
        """
        if self.loaded:
            return
        from zigcorn.lifespan import LifespanOff, LifespanOn

        self.lifespan_class = LifespanOff if self.lifespan == "off" else LifespanOn

        try:
            app = import_from_string(self.app)
        except ImportFromStringError as exc:
            _fail(f"Error loading ASGI app. {exc}")
        if self.factory:
            if not callable(app):
                _fail(f"Error loading ASGI app factory: {app!r} is not callable.")
            try:
                app = app()
            except TypeError as exc:
                _fail(f"Error loading ASGI app factory: {exc}")
        if not callable(app):
            _fail(f"Error loading ASGI app. {app!r} is not callable.")

        self.loaded_app = app
        self.loaded = True

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        """A fresh event loop of the configured kind."""
        return self.loop_factory()()

    def loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        """The callable that makes loops: uvloop's, asyncio's, or a user's ``module:function``."""
        if self.loop in LOOP_CHOICES:
            from zigcorn.lazyimport import import_asyncio

            # ssl and inspect load only if something uses them (uvloop imports ssl itself).
            asyncio = import_asyncio()
            if self.loop in ("auto", "uvloop"):
                try:
                    import uvloop
                except ImportError:
                    if self.loop == "uvloop":
                        _fail('Event loop "uvloop" is not installed: pip install uvloop (or use --loop asyncio).')
                else:
                    return uvloop.new_event_loop
            # Not asyncio.new_event_loop(): an installed policy could hand back another kind.
            return asyncio.SelectorEventLoop
        try:
            return import_from_string(self.loop)
        except ImportFromStringError as exc:
            _fail(f"Error loading custom loop factory. {exc}")


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


def _check_networks(entries: list[str]) -> None:
    """What the engine accepts: "*", "unix:", IP addresses and CIDR networks (at most 64).

    Plain addresses (the default, 127.0.0.1) are checked with ``inet_pton``; ``ipaddress``
    (a quarter MiB of a serving process) is imported only for networks and scoped addresses.
    """
    import socket

    if len(entries) > 64:
        raise ValueError("forwarded_allow_ips takes at most 64 entries")
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


def _as_list(value: Sequence[str] | str | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _fail(message: str) -> NoReturn:
    """Log one line and exit: a configuration mistake, not a crash worth a traceback."""
    logger.error(message)
    sys.exit(LOAD_FAILURE)


def _check_range(name: str, value, low, high) -> None:
    """Limits are checked once here, so the engine never sees a value it cannot honour."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low} to {high}, not {value!r}")
