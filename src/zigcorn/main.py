"""The ``zigcorn`` command and `run()`, uvicorn's entry points under zigcorn's name.

argparse rather than click keeps the CLI dependency-free; it is imported only
when the command line is parsed, so programs calling `run()` never load it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import zigcorn
from zigcorn.config import LIFESPAN_CHOICES, LOG_LEVELS, LOOP_CHOICES, STARTUP_FAILURE, WRITER_CHOICES, WS_CHOICES, Config
from zigcorn.logging import LOGGING_CONFIG

if TYPE_CHECKING:
    import argparse


def run(app: Any, *, app_dir: str | None = None, **kwargs: Any) -> None:
    """Serve ``app`` (an ASGI app or a ``"module:attribute"`` string) until stopped.

    Takes `Config`'s keywords, as ``uvicorn.run`` does. ``app_dir`` is put first
    on ``sys.path`` ("" means the current directory) so the app string resolves
    against it. Exits with status 3 if the server could not start.
    """
    if app_dir is not None:
        sys.path.insert(0, app_dir or os.getcwd())
    serve(Config(app, **kwargs))


def serve(config: Config) -> None:
    """Run a server for `config` until it stops; exit 3 if it never started.

    With ``reload`` a supervisor restarts a fresh server process on code changes; with
    ``workers`` > 1 a master forks and tends the workers; else this process serves.
    """
    if config.reload:
        from zigcorn.reload import run_reloader

        run_reloader(config)
        return
    if config.workers > 1:
        from zigcorn.workers import run_master

        run_master(config)
        return
    config.loop_factory()  # before zigcorn.server imports asyncio: the loop decides how
    from zigcorn.server import Server

    server = Server(config)
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # Ctrl+C before signal handlers were installed: nothing to report
    if not server.started:
        sys.exit(STARTUP_FAILURE)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``zigcorn`` and ``python -m zigcorn``."""
    parser = build_parser()
    options = vars(parser.parse_args(argv))
    if options["log_config"] is None:
        options["log_config"] = LOGGING_CONFIG
    app, app_dir = options.pop("app"), options.pop("app_dir")
    if not app:
        parser.error("the following arguments are required: APP")
    sys.path.insert(0, app_dir or os.getcwd())
    try:
        config = Config(app, **options)
    except ValueError as exc:  # a setting out of range: one line, like argparse's own errors
        parser.error(str(exc))
    serve(config)


def build_parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog="zigcorn",
        description="Run an ASGI application on zigcorn.",
        usage="%(prog)s APP [options]",
        formatter_class=_help_formatter,
    )
    parser.add_argument(
        "app", metavar="APP", nargs="?", default=os.environ.get(ENV_PREFIX + "APP"),
        help='the application, as "module:attribute" (e.g. main:app); or $ZIGCORN_APP',
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=_version_line())
    on_off = argparse.BooleanOptionalAction

    server = parser.add_argument_group("Server")
    server.add_argument("--host", default="127.0.0.1", help="bind to this address (default: %(default)s)")
    server.add_argument("--port", type=_port, default=8000, help="bind to this port, 0 for any (default: %(default)s)")
    server.add_argument("--uds", metavar="PATH", help="bind to a Unix domain socket instead")
    server.add_argument(
        "--uds-perms", type=_octal, default=0o666, metavar="MODE", help="permissions of the --uds file (default: 666)"
    )
    server.add_argument("--fd", type=int, help="serve on this inherited, already listening socket")
    server.add_argument("--backlog", type=int, default=2048, metavar="N", help="listen backlog (default: %(default)s)")
    server.add_argument("--reuse-port", action="store_true", help="each worker binds its own SO_REUSEPORT socket")
    server.add_argument(
        "--loop", choices=LOOP_CHOICES, default="auto", help="event loop; auto is uvloop if installed (default: auto)"
    )

    procs = parser.add_argument_group("Processes")
    procs.add_argument(
        "--workers", type=int, metavar="N", help="worker processes (default: $WEB_CONCURRENCY or 1)"
    )
    procs.add_argument("--reload", action="store_true", help="restart when files change (needs watchfiles)")
    procs.add_argument(
        "--reload-dir", dest="reload_dirs", action="append", metavar="DIR", help="watch this directory; repeatable (default: cwd)"
    )
    procs.add_argument(
        "--reload-include", dest="reload_includes", action="append", metavar="GLOB",
        help="reload on files matching this; repeatable (default: *.py)",
    )  # fmt: skip
    procs.add_argument(
        "--reload-exclude", dest="reload_excludes", action="append", metavar="GLOB",
        help="ignore files matching this; repeatable (default: .* .py[cod] .sw.* ~*)",
    )  # fmt: skip
    procs.add_argument("--reload-delay", type=float, default=0.25, metavar="SECONDS", help="debounce (default: 0.25)")

    app = parser.add_argument_group("Application")
    app.add_argument("--factory", action="store_true", help="APP is a factory to call for the app")
    app.add_argument("--app-dir", default="", metavar="DIR", help="import APP from here (default: cwd)")
    app.add_argument("--lifespan", choices=LIFESPAN_CHOICES, default="auto", help="lifespan events (default: auto)")
    app.add_argument("--root-path", default="", metavar="PATH", help="the path prefix a proxy mounts the app at")

    logs = parser.add_argument_group("Logging")
    logs.add_argument("--log-level", choices=LOG_LEVELS, help="level of zigcorn's loggers (default: info)")
    logs.add_argument("--log-config", metavar="PATH", help="logging configuration file: .json, .yaml/.yml or .ini")
    logs.add_argument("--access-log", action=on_off, default=True, help="log each request (default: on)")
    logs.add_argument("--use-colors", action=on_off, help="colour the logs (default: on a terminal)")

    http = parser.add_argument_group("HTTP")
    http.add_argument(
        "--header", dest="headers", action="append", type=_header, default=[], metavar="NAME:VALUE",
        help="add this header to every response; repeatable",
    )  # fmt: skip
    http.add_argument(
        "--proxy-headers", action=on_off, default=True,
        help="trust X-Forwarded-* and Forwarded from --forwarded-allow-ips (default: on)",
    )  # fmt: skip
    http.add_argument(
        "--forwarded-allow-ips", metavar="IPS",
        help="comma-separated IPs/CIDRs to trust proxy headers from, * for all, unix: for --uds peers "
        "(default: $FORWARDED_ALLOW_IPS or 127.0.0.1)",
    )  # fmt: skip
    http.add_argument("--server-header", action=on_off, default=True, help="send a Server header (default: on)")
    http.add_argument("--date-header", action=on_off, default=True, help="send a Date header (default: on)")
    http.add_argument(
        "--writer-thread", choices=WRITER_CHOICES, default="auto",
        help="write complete responses from an engine thread: auto does while the app is the bottleneck (default: auto)",
    )
    http.add_argument(
        "--busy-poll", type=int, metavar="USEC", default=100,
        help="once every request is answered, poll this long before sleeping; 0 never (default: 100)",
    )  # fmt: skip

    ops = parser.add_argument_group("Metrics and health")
    ops.add_argument("--metrics-path", metavar="PATH", help="serve Prometheus metrics here, without the app (e.g. /metrics)")
    ops.add_argument("--health-path", metavar="PATH", help="answer 200 here without the app, 503 while draining")
    websockets = parser.add_argument_group("WebSockets")
    websockets.add_argument(
        "--ws", choices=WS_CHOICES, default="auto",
        help="WebSocket support; anything but none is the engine's own (default: auto)",
    )  # fmt: skip
    websockets.add_argument(
        "--ws-max-size", type=int, default=16 * 1024 * 1024, metavar="BYTES",
        help="close with 1009 on larger messages (default: %(default)s)",
    )  # fmt: skip
    websockets.add_argument(
        "--ws-max-queue", type=int, default=32, metavar="N",
        help="messages waiting for the app before the socket stops being read (default: %(default)s)",
    )  # fmt: skip
    websockets.add_argument(
        "--ws-ping-interval", type=float, default=20.0, metavar="SECONDS",
        help="ping every open WebSocket this often, 0 for never (default: %(default)s)",
    )  # fmt: skip
    websockets.add_argument(
        "--ws-ping-timeout", type=float, default=20.0, metavar="SECONDS",
        help="close with 1011 when a pong does not come within this (default: %(default)s)",
    )  # fmt: skip
    websockets.add_argument(
        "--ws-per-message-deflate", type=_boolean, default=True, metavar="BOOL",
        help="negotiate permessage-deflate when offered (default: true)",
    )  # fmt: skip

    timeouts = parser.add_argument_group("Timeouts")
    for flag, default, text in (
        ("--timeout-keep-alive", 5, "close an idle keep-alive connection after this (default: 5)"),
        ("--timeout-header", 30, "a request head must arrive within this, from its first byte (default: 30)"),
        ("--timeout-body", 30, "an app waiting for request body bytes waits at most this for more (default: 30)"),
        ("--timeout-write", 30, "close a connection whose pending output makes no progress for this (default: 30)"),
        ("--timeout-request", None, "cancel an app that has not finished a request after this (default: off)"),
        ("--timeout-graceful-shutdown", None, "max wait for in-flight requests at shutdown (default: forever)"),
    ):
        timeouts.add_argument(flag, type=float, default=default, metavar="SECONDS", help=text)

    tls = parser.add_argument_group("TLS (HTTPS)")
    tls.add_argument("--ssl-keyfile", metavar="PATH", help="the private key (PEM); default: in --ssl-certfile")
    tls.add_argument("--ssl-certfile", metavar="PATH", help="the certificate chain (PEM); turns HTTPS on")
    tls.add_argument("--ssl-keyfile-password", metavar="TEXT", help="password of an encrypted key")
    tls.add_argument(
        "--ssl-version", type=int, default=17, metavar="N",
        help="17 (PROTOCOL_TLS_SERVER): TLS 1.2 and 1.3; 5 (PROTOCOL_TLSv1_2): 1.2 only (default: %(default)s)",
    )  # fmt: skip
    tls.add_argument(
        "--ssl-cert-reqs", type=int, default=0, metavar="N",
        help="client certificates: 0 none, 1 optional, 2 required (default: %(default)s)",
    )  # fmt: skip
    tls.add_argument("--ssl-ca-certs", metavar="PATH", help="CA certificates (PEM) that verify client certificates")
    tls.add_argument("--ssl-ciphers", default="TLSv1", metavar="LIST", help="TLS 1.2 ciphers (default: %(default)s)")

    limits = parser.add_argument_group("Limits")
    for flag, default, text in (
        ("--limit-concurrency", None, "answer 503 past N requests in flight"),
        ("--limit-max-requests", None, "exit after N requests"),
        ("--limit-connections", 100_000, "accept and close at once connections past N (default: %(default)s)"),
        ("--limit-keep-alive-requests", 10_000, "close a connection after N requests (default: %(default)s)"),
        ("--limit-request-body", 1 << 30, "413 for request bodies over N bytes (default: %(default)s)"),
        ("--limit-request-line", 8190, "414 for request targets over N bytes (default: %(default)s)"),
        ("--limit-request-fields", 100, "431 for more than N header lines, at most 128 (default: %(default)s)"),
        ("--limit-request-head", 16384, "431 for a request head over N bytes, at most 16384 (default: %(default)s)"),
    ):
        limits.add_argument(flag, type=int, default=default, metavar="N", help=text)
    _defaults_from_environment(parser)
    return parser


ENV_PREFIX = "ZIGCORN_"
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


def _defaults_from_environment(parser: argparse.ArgumentParser) -> None:
    """Every option also reads ``ZIGCORN_<NAME>`` (e.g. ZIGCORN_PORT=9000); flags win."""
    import argparse

    for action in parser._actions:
        if not action.option_strings or action.dest in ("help", "version"):
            continue
        name = ENV_PREFIX + action.dest.upper()
        text = os.environ.get(name)
        if text is None:
            continue
        if isinstance(action, (argparse.BooleanOptionalAction, argparse._StoreTrueAction)):
            if text.lower() not in _TRUE | _FALSE:
                parser.error(f"{name}={text!r}: expected one of 1/0, true/false, yes/no, on/off")
            value = text.lower() in _TRUE
        elif isinstance(action, argparse._AppendAction):
            value = [action.type(item) if action.type else item for item in text.split(",") if item.strip()]
        else:
            try:
                value = action.type(text) if action.type else text
            except (ValueError, argparse.ArgumentTypeError) as exc:
                parser.error(f"{name}={text!r}: {exc}")
            if action.choices is not None and value not in action.choices:
                parser.error(f"{name}={text!r}: choose from {', '.join(map(str, action.choices))}")
        action.default = value
        action.required = False


def _help_formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's formatter, told the terminal's width as ``shutil.get_terminal_size`` would.

    Left to itself it imports ``shutil`` (and with it zlib, bz2 and lzma, about 0.6 MiB of
    a serving process) for that one number, on every ``add_argument``.
    """
    import argparse

    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return argparse.HelpFormatter(prog, width=(columns or 80) - 2)


def _version_line() -> str:
    """What ``platform`` would say, without importing it into every server process."""
    implementation = {"cpython": "CPython", "pypy": "PyPy"}.get(sys.implementation.name, sys.implementation.name)
    return f"zigcorn {zigcorn.__version__} with {implementation} {sys.version.split()[0]} on {os.uname().sysname}"


def _port(text: str) -> int:
    from argparse import ArgumentTypeError

    port = int(text) if text.isdigit() else -1
    if not 0 <= port <= 65535:
        raise ArgumentTypeError(f"{text} is not a port (0-65535)")
    return port


def _octal(text: str) -> int:
    from argparse import ArgumentTypeError

    try:
        return int(text, 8)
    except ValueError:
        raise ArgumentTypeError(f"{text!r} is not an octal mode like 660") from None
def _boolean(text: str) -> bool:
    from argparse import ArgumentTypeError

    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ArgumentTypeError(f"{text!r} is not a boolean (true or false)")


def _header(text: str) -> tuple[str, str]:
    from argparse import ArgumentTypeError

    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise ArgumentTypeError(f'{text!r} is not in format "NAME:VALUE"')
    return name.strip(), value.strip()


if __name__ == "__main__":
    main()
