"""Default logging setup and the formatters it names.

The logger tree mirrors uvicorn's with zigcorn names, so a uvicorn log config
ports by renaming loggers: ``zigcorn`` owns the stderr handler, ``zigcorn.error``
propagates to it, ``zigcorn.access`` writes access lines to stdout.
"""

from __future__ import annotations

import copy
import http
import logging
import sys
from typing import Any, Literal, TextIO

TRACE_LOG_LEVEL = 5

LOGGING_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "default": {
            "()": "zigcorn.logging.DefaultFormatter",
            "fmt": "%(levelprefix)s %(message)s",
            "use_colors": None,
        },
        "access": {
            "()": "zigcorn.logging.AccessFormatter",
            "fmt": "%(levelprefix)s %(message)s",
            "use_colors": None,
        },
    },
    "handlers": {
        "default": {"formatter": "default", "class": "logging.StreamHandler", "stream": "ext://sys.stderr"},
        "access": {"formatter": "access", "class": "logging.StreamHandler", "stream": "ext://sys.stdout"},
    },
    "loggers": {
        "zigcorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
        "zigcorn.error": {"level": "INFO"},
        "zigcorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
    },
}

# As shipped: the shortcut below applies only while LOGGING_CONFIG still equals it.
_PRISTINE = copy.deepcopy(LOGGING_CONFIG)


def is_default_logging(log_config: Any) -> bool:
    return log_config is LOGGING_CONFIG and log_config == _PRISTINE


def apply_default_logging(use_colors: bool | None = None) -> None:
    """What ``dictConfig(LOGGING_CONFIG)`` does, without importing ``logging.config``.

    Loggers it names get exactly the handlers, level and propagation listed there;
    other loggers are left alone (``disable_existing_loggers`` is false).
    """
    formatters = {}
    for name, spec in LOGGING_CONFIG["formatters"].items():
        cls = DefaultFormatter if spec["()"].endswith("DefaultFormatter") else AccessFormatter
        formatters[name] = cls(fmt=spec["fmt"], use_colors=spec["use_colors"] if use_colors is None else use_colors)
    handlers = {}
    for name, spec in LOGGING_CONFIG["handlers"].items():
        handler = logging.StreamHandler(sys.stderr if spec["stream"] == "ext://sys.stderr" else sys.stdout)
        handler.name = name
        handler.setFormatter(formatters[spec["formatter"]])
        handlers[name] = handler
    for name, spec in LOGGING_CONFIG["loggers"].items():
        logger = logging.getLogger(name)
        for old in logger.handlers[:]:
            logger.removeHandler(old)
        for handler in spec.get("handlers", ()):
            logger.addHandler(handlers[handler])
        logger.setLevel(spec["level"])
        logger.propagate = spec.get("propagate", True)
        logger.disabled = False


# SGR codes; kept to the handful used here rather than pulling in a colour library.
_RESET = "\x1b[0m"
_LEVEL_COLORS = {
    TRACE_LOG_LEVEL: "\x1b[34m",  # blue
    logging.DEBUG: "\x1b[36m",  # cyan
    logging.INFO: "\x1b[32m",  # green
    logging.WARNING: "\x1b[33m",  # yellow
    logging.ERROR: "\x1b[31m",  # red
    logging.CRITICAL: "\x1b[91m",  # bright red
}
_STATUS_COLORS = {1: "\x1b[97m", 2: "\x1b[32m", 3: "\x1b[33m", 4: "\x1b[31m", 5: "\x1b[91m"}
_BOLD = "\x1b[1m"


def _paint(text: str, code: str | None) -> str:
    return f"{code}{text}{_RESET}" if code else text


class ColourizedFormatter(logging.Formatter):
    """Adds ``%(levelprefix)s`` ("INFO:     ", coloured on a terminal).

    A record may carry ``extra={"color_message": ...}``: a format string with
    colour codes used instead of ``msg`` when colours are on.
    """

    def __init__(
        self,
        fmt: str | None = None,
        datefmt: str | None = None,
        style: Literal["%", "{", "$"] = "%",
        use_colors: bool | None = None,
    ) -> None:
        if use_colors is None:
            stream = self.default_stream()
            use_colors = stream is not None and stream.isatty()
        self.use_colors = use_colors
        super().__init__(fmt=fmt, datefmt=datefmt, style=style)

    def formatMessage(self, record: logging.LogRecord) -> str:
        # Work on a copy: other handlers of the same record must see it unchanged.
        record = copy.copy(record)
        levelname = record.levelname
        padding = " " * max(0, 8 - len(levelname))
        if self.use_colors:
            levelname = _paint(levelname, _LEVEL_COLORS.get(record.levelno))
            color_message = record.__dict__.get("color_message")
            if color_message is not None:
                record.message = color_message % record.args if record.args else color_message
        record.levelprefix = f"{levelname}:{padding}"
        self.decorate(record)
        return super().formatMessage(record)

    def default_stream(self) -> TextIO | None:
        """The stream whose tty-ness decides ``use_colors=None``."""
        return sys.stderr

    def decorate(self, record: logging.LogRecord) -> None:
        """Hook for subclasses to add fields to the (copied) record."""


class DefaultFormatter(ColourizedFormatter):
    """Formatter for server messages (stderr)."""


class AccessFormatter(ColourizedFormatter):
    """Formatter for access lines (stdout).

    The server logs ``'%s - "%s %s HTTP/%s" %d %d %.1fms'`` with args
    ``(client_addr, method, path, http_version, status, bytes_sent, duration_ms)``
    (``bytes_sent``: the response body's bytes), and with ``--request-id-header`` or
    ``--trace-context`` an eighth, ``ids`` (`` request_id=... trace_id=...``, at the
    line's end). Besides ``%(message)s``, the record gains uvicorn's ``%(client_addr)s``,
    ``%(request_line)s`` and ``%(status_code)s`` ("200 OK") for custom formats, plus
    ``%(bytes_sent)s``, ``%(duration_ms)s`` and ``%(ids)s``. Records with other args pass through.
    """

    def default_stream(self) -> TextIO | None:
        return sys.stdout

    def decorate(self, record: logging.LogRecord) -> None:
        args = record.args
        if not isinstance(args, tuple) or not 7 <= len(args) <= 8:
            return
        client_addr, method, path, http_version, status, bytes_sent, duration_ms = args[:7]
        ids = args[7] if len(args) == 8 else ""
        request_line = f"{method} {path} HTTP/{http_version}"
        status_code = f"{status} {_phrase(status)}".rstrip()
        if self.use_colors:
            color = _STATUS_COLORS.get(status // 100)
            request_line = _paint(request_line, _BOLD)
            status_code = _paint(status_code, color)
            record.message = (
                f'{client_addr} - "{request_line}" {_paint(str(status), color)} {bytes_sent} {duration_ms:.1f}ms{ids}'
            )
        record.client_addr = client_addr
        record.request_line = request_line
        record.status_code = status_code
        record.bytes_sent = bytes_sent
        record.duration_ms = duration_ms
        record.ids = ids


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""
