"""The access log: one line per request, for ASGI and WSGI apps alike.

`log` writes a request's line: uvicorn's (with `` request_id=`` / `` trace_id=`` at its end
under ``--request-id-header`` / ``--trace-context``), or the ``--access-log-format`` one,
unless ``--access-log-exclude`` names its path. A request is seen through `Request` (an
ASGI scope) or `EnvironRequest` (a WSGI environ), so both interfaces share every line.

A format is compiled once, at configuration: the atoms it names (gunicorn's, e.g.
``%(h)s %(r)s %(s)s %(b)s %(D)s %({user-agent}i)s``) become a list of small functions,
and a request's line computes only those. Nothing here runs unless the access log is on
and its logger enabled (see `zigcorn.protocols.http.HTTPCycle.run`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time

access_logger = logging.getLogger("zigcorn.access")

_ATOM = re.compile(r"%\(([^)]*)\)")
_HEADER_ATOM = re.compile(r"\{([^}]*)\}([ioe])")
_JSON = json.JSONEncoder(separators=(",", ":"))  # made once: json.dumps with options makes one per call
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
#: Bytes a path shows as they are; any other is percent-encoded (a WSGI path is decoded).
_UNSAFE = re.compile(rb"[^A-Za-z0-9/\-._~!$&'()*+,;=:@]")

# gunicorn's atoms and what each means (docs/operations.md's table comes from the same words).
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
    "B": "response body bytes (compressed ones when compressed)",
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


# Set by the server from its Config (`configure`), read only when a line is due.
#: The compiled --access-log-format; None: uvicorn's line.
access_format = None
#: --access-log-exclude: paths that log no line.
access_exclude: frozenset = frozenset()
#: --request-id-header and --trace-context: the default and json lines carry the request's
#: id and trace id (the engine put both in the request's headers).
request_id_header: bytes | None = None
trace_context = False


def configure(config) -> None:
    """The access log's settings from a `zigcorn.config.Config`, for every request after."""
    global access_format, access_exclude, request_id_header, trace_context
    access_format = getattr(config, "access_format", None)
    access_exclude = frozenset(getattr(config, "access_log_exclude", ()) or ())
    request_id_header = config.request_id_header.encode() if getattr(config, "request_id_header", None) else None
    trace_context = bool(getattr(config, "trace_context", False))


class Request:
    """What one line may need of an ASGI request (its scope): gathered once per logged request.

    `size` is the response body's bytes (the engine's count: after compression, no head
    or framing); `duration` is in seconds; `response_headers` are the app's, when a
    ``%({name}o)s`` atom asked for them to be kept.
    """

    __slots__ = ("scope", "status", "size", "duration", "response_headers")

    def __init__(self, scope, status, size, duration, response_headers=None) -> None:
        self.scope = scope
        self.status = status
        self.size = size
        self.duration = duration  # seconds
        self.response_headers = response_headers

    def client(self):
        """(host, port), or None (a Unix socket)."""
        return self.scope.get("client")

    def method(self) -> str:
        return self.scope["method"]

    def path(self) -> str:
        """The path, decoded (with --root-path in front, as the app sees it)."""
        return self.scope["path"]

    def target(self) -> str:
        """The path as sent, and the query: what a request line shows."""
        scope = self.scope
        path = scope["raw_path"].decode("latin-1") if scope.get("raw_path") else scope["path"]
        query = scope["query_string"]
        return f"{path}?{query.decode('latin-1')}" if query else path

    def query(self) -> str:
        return self.scope["query_string"].decode("latin-1")

    def version(self) -> str:
        """``1.1``, ``1.0`` or ``2``."""
        return self.scope["http_version"]

    def header(self, name: bytes) -> str:
        """A request header (a lower-case name), repeated ones joined; '-' if absent."""
        return _header(self.scope["headers"], name)


_environ_keys: dict[bytes, str] = {}


def _environ_key(name: bytes) -> str:
    key = _environ_keys.get(name)
    if key is None:
        text = name.decode("latin-1").upper().replace("-", "_")
        key = text if text in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{text}"
        if len(_environ_keys) < 256:
            _environ_keys[name] = key
    return key


class EnvironRequest(Request):
    """The same for a WSGI request: `scope` holds its environ (PEP 3333's latin-1 strs)."""

    __slots__ = ()

    def client(self):
        environ = self.scope
        host = environ.get("REMOTE_ADDR")
        if not host:
            return None
        port = environ.get("REMOTE_PORT")
        return (host, int(port) if port and port.isdigit() else 0)

    def method(self) -> str:
        return self.scope["REQUEST_METHOD"]

    def path(self) -> str:
        # SCRIPT_NAME is --root-path (middleware may move a prefix between the two: the sum stays).
        return self.scope.get("SCRIPT_NAME", "") + self.scope["PATH_INFO"]

    def target(self) -> str:
        path = self.path()
        raw = path.encode("latin-1", "replace")
        if _UNSAFE.search(raw):  # PATH_INFO is decoded: shown percent-encoded, as a client sends it
            path = _UNSAFE.sub(lambda m: b"%%%02X" % m.group()[0], raw).decode("ascii")
        query = self.scope["QUERY_STRING"]
        return f"{path}?{query}" if query else path

    def query(self) -> str:
        return self.scope["QUERY_STRING"]

    def version(self) -> str:
        return self.scope["SERVER_PROTOCOL"][5:]  # HTTP/1.1 -> 1.1

    def header(self, name: bytes) -> str:
        return self.scope.get(_environ_key(name), "-")


def log(request: Request) -> None:
    """`request`'s access line, unless --access-log-exclude names its path."""
    if access_exclude and request.path() in access_exclude:
        return
    if access_format is not None:
        access_logger.info(access_format.line(request))
        return
    client = request.client()
    args = (
        f"{client[0]}:{client[1]}" if client else "-",
        request.method(),
        request.target(),
        request.version(),
        request.status,
        request.size,
        request.duration * 1000,
    )
    ids = _ids(request) if request_id_header is not None or trace_context else ""
    if ids:
        access_logger.info('%s - "%s %s HTTP/%s" %d %d %.1fms%s', *args, ids)
    else:
        access_logger.info('%s - "%s %s HTTP/%s" %d %d %.1fms', *args)


def _trace_id(request: Request) -> str:
    parent = request.header(b"traceparent")
    return parent[3:35] if len(parent) >= 55 else "-"


def _ids(request: Request) -> str:
    """`` request_id=<id>`` and `` trace_id=<32 hex>``, as the engine's own lines end
    (`tracing.logSuffix`); the engine vetted both (a kept id has no space or quote)."""
    text = ""
    if request_id_header is not None:
        text = f" request_id={request.header(request_id_header)}"
    if trace_context:
        text += f" trace_id={_trace_id(request)}"
    return text


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


def _user(r: Request) -> str:
    auth = r.header(b"authorization")
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


def _host(r: Request) -> str:
    client = r.client()
    return client[0] if client else "-"


_GETTERS = {
    "h": _host,
    "l": lambda r: "-",
    "u": _user,
    "t": lambda r: _date(time.time() - r.duration),
    "r": lambda r: f"{r.method()} {r.target()} HTTP/{r.version()}",
    "m": lambda r: r.method(),
    "U": lambda r: r.path(),
    "q": lambda r: r.query(),
    "H": lambda r: f"HTTP/{r.version()}",
    "s": lambda r: r.status,
    "B": lambda r: r.size,
    "b": lambda r: r.size if r.size else "-",
    "f": lambda r: r.header(b"referer"),
    "a": lambda r: r.header(b"user-agent"),
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
        return lambda r: r.header(encoded)
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

    def line(self, request: Request) -> str:
        """One request's line."""
        if self.json:
            return _json_line(request)
        return self.text % {key: getter(request) for key, getter in self.getters}


def _json_line(r: Request) -> str:
    client = r.client()
    started = time.time() - r.duration
    entry = {
        "time": _iso_time(started),
        "client": f"{client[0]}:{client[1]}" if client else None,
        "method": r.method(),
        "path": r.path(),
        "query": r.query(),
        "protocol": f"HTTP/{r.version()}",
        "status": r.status,
        "bytes": r.size,
        "duration_ms": round(r.duration * 1000, 3),
        "referer": r.header(b"referer"),
        "user_agent": r.header(b"user-agent"),
    }  # fmt: skip
    if request_id_header is not None:
        entry["request_id"] = r.header(request_id_header)
    if trace_context:
        entry["trace_id"] = _trace_id(r)
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
