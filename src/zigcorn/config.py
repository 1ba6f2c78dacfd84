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
from zigcorn.logging import TRACE_LOG_LEVEL, apply_default_logging, is_default_logging

if TYPE_CHECKING:
    import asyncio

from zigcorn.settings import (  # noqa: F401 (also the names other modules import from here)
    CERT_NONE, COMPRESSION_ENCODINGS, DEFAULTS, engine_settings, IO_BACKEND_AUTO, LOG_LEVELS,
    LOOP_AUTO, LOOP_CHOICES, METRICS_BUCKETS, METRICS_BUCKETS_MAX, PROTOCOL_TLS_SERVER, Setting, SETTING, SETTINGS,
    SSL_VERSIONS, WRITER_MODES, _BUSY_POLL, _engine_limit, _engine_most, _HEAD_MAX, _HEAD_MIN, _SSL_VERSION_NAMES,
    _TLS13,
)  # fmt: skip

# Exit codes. Like uvicorn: 1 when the app (or loop) cannot be loaded, 3 when the
# server could not start (lifespan startup failed, bind failed).
LOAD_FAILURE = 1
STARTUP_FAILURE = 3


logger = logging.getLogger("zigcorn.error")


HeaderSpec = str | tuple[str, str] | list[str]


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
            from zigcorn.supervisors.process import Identity

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
        if not self.http3_handshakes_before_retry <= self.http3_max_handshakes <= self.http3_max_connections:
            raise ValueError("http3 wants http3_handshakes_before_retry <= http3_max_handshakes <= "
                             f"http3_max_connections, not {self.http3_handshakes_before_retry}, "
                             f"{self.http3_max_handshakes}, {self.http3_max_connections}")
        if self.http3_qlog_dir is not None:
            most = _engine_most("http3_qlog_dir")
            path = os.path.abspath(self.http3_qlog_dir)
            if not os.path.isdir(path):
                raise ValueError(f"http3_qlog_dir {self.http3_qlog_dir!r} is not a directory")
            if len(os.fsencode(path)) > most:
                raise ValueError(f"http3_qlog_dir: at most {most} bytes, not {path!r}")
        # One pair for the master and every worker it forks: a Retry token or a stateless
        # reset made by one worker is checked by another.
        self.http3_retry_key = os.urandom(32)
        self.http3_reset_key = os.urandom(32)

    def engine_http3_options(self, fd: int, alt_svc_port: int, worker_index: int, workers: int) -> dict[str, Any]:
        """The engine's HTTP/3 options for one worker's UDP socket `fd` (Python keeps it open)."""
        assert self.http3 and 0 <= worker_index < workers, (worker_index, workers)
        return {
            **{s.option: s.engine_value(self) for s in engine_settings("http3")},
            "http3_fd": fd,
            "http3_alt_svc_port": alt_svc_port,
            "http3_retry_key": self.http3_retry_key,
            "http3_reset_key": self.http3_reset_key,
            "http3_worker_index": worker_index,
            "http3_workers": workers,
        }

    def engine_tls_options(self) -> dict[str, Any]:
        """The engine's TLS options: empty for plain HTTP. Holds the password: never log it."""
        if not self.is_ssl:
            return {}
        return {s.option: s.engine_value(self) for s in engine_settings("tls")} | {"ssl_ticket_keys": self.ssl_ticket_keys}

    def engine_options(self) -> dict[str, Any]:
        """Every value the engine runs with, by its option name (see `_core.Engine.options`):
        each setting's `engine_value` (the settings table says which, and how).

        The Python side adds only its plumbing: the stream classes, ``call_soon`` and the
        metrics slot. Holds the TLS key's password when HTTPS is on: never log it.
        """
        return {
            **{s.option: s.engine_value(self) for s in engine_settings("always")},
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
            from zigcorn.lazy_asyncio import import_asyncio

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


def _load_env_file(path) -> None:
    """--env-file: the file's variables join the environment (existing ones win), as in uvicorn."""
    try:
        from dotenv import load_dotenv
    except ImportError:
        raise ValueError("env_file needs python-dotenv: pip install python-dotenv") from None
    if not os.path.isfile(path):
        raise ValueError(f"env_file {os.fspath(path)!r} is not a file")
    load_dotenv(dotenv_path=path)
