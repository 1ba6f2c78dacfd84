"""``--access-log-format``, ``--access-log-file`` and ``--access-log-exclude``.

A format is compiled once, at configuration: the atoms it names (gunicorn's, e.g.
``%(h)s %(r)s %(s)s %(b)s %(D)s %({user-agent}i)s``) become a list of small functions,
and a request's line computes only those. Nothing here runs unless the access log is on
and its logger enabled (see `zigcorn.http.HTTPCycle.run`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time

_ATOM = re.compile(r"%\(([^)]*)\)")
_HEADER_ATOM = re.compile(r"\{([^}]*)\}([ioe])")
_JSON = json.JSONEncoder(separators=(",", ":"))  # made once: json.dumps with options makes one per call
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

# gunicorn's atoms and what each means (the README's table comes from the same words).
ATOMS = {
    "h": "remote address",
    "l": "'-'",
    "u": "user name (HTTP Basic authentication), else '-'",
    "t": "date of the request, [10/Oct/2000:13:55:36 -0700]",
    "r": "request line, GET /path?query HTTP/1.1",
    "m": "request method",
    "U": "URL path without the query",
    "q": "query string",
    "H": "protocol, HTTP/1.1",
    "s": "status",
    "B": "response body bytes",
    "b": "response body bytes, '-' for none",
    "f": "referer",
    "a": "user agent",
    "T": "request time in whole seconds",
    "M": "request time in milliseconds",
    "D": "request time in microseconds",
    "L": "request time in decimal seconds",
    "p": "process id, <1234>",
    "{name}i": "request header",
    "{name}o": "response header",
    "{name}e": "environment variable",
}


# Set by the server from --request-id-header and --trace-context: the json format then
# carries the request's id and trace id (the engine put both in the request's headers).
request_id_header: bytes | None = None
trace_context = False


class Request:
    """What one line may need: gathered once per logged request."""

    __slots__ = ("scope", "status", "size", "duration", "response_headers")

    def __init__(self, scope, status, size, duration, response_headers) -> None:
        self.scope = scope
        self.status = status
        self.size = size
        self.duration = duration  # seconds
        self.response_headers = response_headers


def _header(headers, name: bytes) -> str:
    """A request header's value (scope names are lower case), repeated ones joined; '-' if absent."""
    found = None
    for key, value in headers:
        if key == name:
            text = value.decode("latin-1")
            found = text if found is None else f"{found}, {text}"
    return "-" if found is None else found


def _response_header(headers, name: bytes) -> str:
    """The same for the headers the app sent (any case, maybe none)."""
    return _header([(key.lower(), value) for key, value in headers], name) if headers else "-"


def _target(scope) -> str:
    path = scope["raw_path"].decode("latin-1") if scope.get("raw_path") else scope["path"]
    query = scope["query_string"]
    return f"{path}?{query.decode('latin-1')}" if query else path


def _user(scope) -> str:
    auth = _header(scope["headers"], b"authorization")
    if auth[:6].lower() != "basic ":
        return "-"
    import base64
    import binascii

    try:
        return base64.b64decode(auth[6:].strip(), validate=True).decode("utf-8", "replace").partition(":")[0] or "-"
    except (binascii.Error, ValueError):
        return "-"


_date_cache: list = [None, ""]  # [second, its text]: one formatting per second, not per line
_iso_cache: list = [None, ""]


def _date(started: float) -> str:
    second = int(started)
    if _date_cache[0] == second:
        return _date_cache[1]
    local = time.localtime(second)
    offset = local.tm_gmtoff // 60
    sign = "-" if offset < 0 else "+"
    offset = abs(offset)
    text = (f"[{local.tm_mday:02d}/{_MONTHS[local.tm_mon - 1]}/{local.tm_year}:{local.tm_hour:02d}:"
            f"{local.tm_min:02d}:{local.tm_sec:02d} {sign}{offset // 60:02d}{offset % 60:02d}]")  # fmt: skip
    _date_cache[0], _date_cache[1] = second, text
    return text


def _iso_time(started: float) -> str:
    second = int(started)
    if _iso_cache[0] != second:
        _iso_cache[0], _iso_cache[1] = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_iso_cache[1]}.{int(started * 1000) % 1000:03d}Z"


_GETTERS = {
    "h": lambda r: r.scope["client"][0] if r.scope.get("client") else "-",
    "l": lambda r: "-",
    "u": lambda r: _user(r.scope),
    "t": lambda r: _date(time.time() - r.duration),
    "r": lambda r: f"{r.scope['method']} {_target(r.scope)} HTTP/{r.scope['http_version']}",
    "m": lambda r: r.scope["method"],
    "U": lambda r: r.scope["path"],
    "q": lambda r: r.scope["query_string"].decode("latin-1"),
    "H": lambda r: f"HTTP/{r.scope['http_version']}",
    "s": lambda r: r.status,
    "B": lambda r: r.size,
    "b": lambda r: r.size if r.size else "-",
    "f": lambda r: _header(r.scope["headers"], b"referer"),
    "a": lambda r: _header(r.scope["headers"], b"user-agent"),
    "T": lambda r: int(r.duration),
    "M": lambda r: int(r.duration * 1000),
    "D": lambda r: int(r.duration * 1_000_000),
    "L": lambda r: f"{r.duration:.6f}",
    "p": lambda r: f"<{os.getpid()}>",
}


def _getter(key: str):
    getter = _GETTERS.get(key)
    if getter is not None:
        return getter
    match = _HEADER_ATOM.fullmatch(key)
    if match is None:
        return None
    name, kind = match.groups()
    if kind == "e":
        return lambda r: os.environ.get(name, "-")
    encoded = name.lower().encode("latin-1")
    if kind == "i":
        return lambda r: _header(r.scope["headers"], encoded)
    return lambda r: _response_header(r.response_headers, encoded)


class AccessFormat:
    """A compiled ``--access-log-format``: gunicorn atoms, or ``json``."""

    __slots__ = ("text", "getters", "json", "response_headers")

    def __init__(self, text: str) -> None:
        self.text = text
        self.json = text == "json"
        self.getters: list[tuple[str, object]] = []
        self.response_headers = False
        if self.json:
            return
        for key in dict.fromkeys(_ATOM.findall(text)):
            getter = _getter(key)
            if getter is None:
                known = " ".join(f"%({atom})s" for atom in ATOMS)
                raise ValueError(f"access_log_format: unknown atom %({key}); the atoms are {known}, or the format json")
            self.getters.append((key, getter))
            self.response_headers |= key.endswith("}o")
        try:
            text % {key: "-" for key, _ in self.getters}
        except (TypeError, ValueError) as exc:
            raise ValueError(f"access_log_format {text!r} is not a valid %-format: {exc}") from None

    def format(self, scope, status: int, size: int, duration: float, response_headers=None) -> str:
        """One request's line (`duration` in seconds)."""
        request = Request(scope, status, size, duration, response_headers)
        if self.json:
            return _json_line(request)
        return self.text % {key: getter(request) for key, getter in self.getters}


def _json_line(r: Request) -> str:
    scope = r.scope
    client = scope.get("client")
    started = time.time() - r.duration
    entry = {
        "time": _iso_time(started),
        "client": f"{client[0]}:{client[1]}" if client else None,
        "method": scope["method"],
        "path": scope["path"],
        "query": scope["query_string"].decode("latin-1"),
        "protocol": f"HTTP/{scope['http_version']}",
        "status": r.status,
        "bytes": r.size,
        "duration_ms": round(r.duration * 1000, 3),
        "referer": _header(scope["headers"], b"referer"),
        "user_agent": _header(scope["headers"], b"user-agent"),
    }  # fmt: skip
    if request_id_header is not None:
        entry["request_id"] = _header(scope["headers"], request_id_header)
    if trace_context:
        parent = _header(scope["headers"], b"traceparent")
        entry["trace_id"] = parent[3:35] if len(parent) >= 55 else "-"
    return _JSON.encode(entry)


class ReopenableFileHandler(logging.Handler):
    """``--access-log-file``: appends whole lines, each in one ``write``; `reopen` (on
    SIGUSR1, after logrotate renamed the file) swaps in the file at the path again.

    The descriptor is opened ``O_APPEND``, and every line goes out in a single write(2),
    so workers sharing the file never split each other's lines. `reopen` puts the new
    file on the same descriptor number with dup2, under the handler's lock: a line is
    written either to the old file or to the new one, never lost in between.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = os.path.abspath(os.fspath(path))
        self.fd = self._open()

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
        except Exception:
            self.handleError(record)

    def reopen(self) -> None:
        try:
            fd = self._open()
        except OSError as exc:
            logging.getLogger("zigcorn.error").error("Cannot reopen the access log %s: %s", self.path, exc.strerror)
            return
        with self.lock:
            os.dup2(fd, self.fd, inheritable=False)
        os.close(fd)

    def close(self) -> None:
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
        super().close()


def reopen_log_files() -> None:
    """SIGUSR1: every reopenable handler of zigcorn's loggers opens its path again."""
    for name in ("zigcorn", "zigcorn.access", "zigcorn.error"):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, ReopenableFileHandler):
                handler.reopen()


def has_log_files() -> bool:
    return any(
        isinstance(handler, ReopenableFileHandler)
        for name in ("zigcorn", "zigcorn.access", "zigcorn.error")
        for handler in logging.getLogger(name).handlers
    )
