"""WSGI apps for tests/frameworks/test_wsgi.py, each behind wsgiref.validate's validator (which
checks the environ, start_response, the input and error streams and the iterable's
close() against PEP 3333). Routed by PATH_INFO's first segment."""

import hashlib
import json
import os
import threading
import time
from wsgiref.validate import validator

FILES = os.environ.get("ZIGCORN_TEST_FILES", os.path.dirname(__file__))
CLOSED = {"count": 0}
_closed_lock = threading.Lock()


def _count_close() -> None:
    with _closed_lock:
        CLOSED["count"] += 1


def _text(start_response, text, status="200 OK"):
    body = text.encode() if isinstance(text, str) else text
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def _read_body(environ, how: str) -> bytes:
    stream = environ["wsgi.input"]
    if how == "all":
        length = environ.get("CONTENT_LENGTH")
        return stream.read(int(length)) if length else b"".join(iter(lambda: stream.read(65536), b""))
    if how == "n":
        parts = []
        while True:
            part = stream.read(1000)
            if not part:
                return b"".join(parts)
            assert len(part) <= 1000
            parts.append(part)
    if how == "readline":
        return b"".join(iter(stream.readline, b""))
    if how == "readlines":
        return b"".join(stream.readlines())
    if how == "iter":
        return b"".join(line for line in stream)
    raise ValueError(how)


class ClosingBody:
    """An iterable with close(): yields `n` chunks, `delay` seconds apart."""

    def __init__(self, n, delay=0.0, fail_at=None):
        self.n, self.delay, self.fail_at = n, delay, fail_at

    def __iter__(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise RuntimeError("failed in the middle of the body")
            if self.delay:
                time.sleep(self.delay)
            yield f"part{i};".encode()

    def close(self):
        _count_close()


def router(environ, start_response):
    path = environ["PATH_INFO"]
    query = dict(p.split("=", 1) for p in environ["QUERY_STRING"].split("&") if "=" in p)
    head = path.split("/")[1]
    if head == "env":
        shown = {k: v for k, v in environ.items() if isinstance(v, str)}
        shown["wsgi.version"] = list(environ["wsgi.version"])
        shown["wsgi.multithread"] = environ["wsgi.multithread"]
        return _text(start_response, json.dumps(shown))
    if head == "echo":
        body = _read_body(environ, query.get("how", "all"))
        return _text(start_response, f"{len(body)} {hashlib.sha256(body).hexdigest()}")
    if head == "echo-body":
        body = _read_body(environ, "all")
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return [body]
    if head == "gen":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return ClosingBody(int(query.get("n", "5")), float(query.get("delay", "0")), fail_at=None)
    if head == "fail-after":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return ClosingBody(5, fail_at=2)
    if head == "take-body":
        body = _read_body(environ, "all")
        with _closed_lock:
            CLOSED["bodies"] = CLOSED.get("bodies", 0) + 1
        return _text(start_response, str(len(body)))
    if head == "bodies":
        return _text(start_response, str(CLOSED.get("bodies", 0)))
    if head == "closed":
        return _text(start_response, str(CLOSED["count"]))
    if head == "write":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"written;")
        write(b"by write();")
        return [b"then returned"]
    if head == "file":
        f = open(os.path.join(FILES, "wsgi-file.bin"), "rb")
        size = os.fstat(f.fileno()).st_size
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(size))])
        return environ["wsgi.file_wrapper"](f, 65536)
    if head == "big":
        n = int(query.get("mib", "4"))
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return (bytes([i % 256]) * 65536 for i in range(16 * n))
    if head == "raise":
        raise RuntimeError("failed before start_response")
    if head == "exc-info":
        start_response("200 OK", [("Content-Type", "text/plain")])
        try:
            raise ValueError("found out late")
        except ValueError:
            import sys

            start_response("500 Internal Server Error", [("Content-Type", "text/plain")], sys.exc_info())
        return [b"handled"]
    if head == "errors":
        environ["wsgi.errors"].write("an app's complaint\n")
        environ["wsgi.errors"].flush()
        return _text(start_response, "logged")
    if head == "sleep":  # ?s=seconds; &mark=M prints "SLEEP-START M" as it starts
        if "mark" in query:
            print("SLEEP-START", query["mark"], flush=True)  # a test's sign that the app has it
        time.sleep(float(query.get("s", "1")))
        if "mark" in query:
            print("SLEEP-END", query["mark"], flush=True)
        return _text(start_response, "slept")
    if head == "head-empty":
        start_response("204 No Content", [])
        return []
    if head == "bytes":  # ?n=N: N bytes of text, one chunk with its content-length
        return _text(start_response, b"x" * int(query.get("n", "8")))
    if head == "admin":  # --drain-path tests: the app must never see these
        print("APP-SAW", path, flush=True)
    return _text(start_response, "not found", "404 Not Found")


app = validator(router)


def bad_status(environ, start_response):
    start_response("OK", [("Content-Type", "text/plain")])
    return [b"never"]


def bad_header(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain\r\nX-Injected: yes")])
    return [b"never"]


def file_app(environ, start_response):
    """wsgi.file_wrapper unwrapped by the validator, so the server sees its own FileWrapper."""
    f = open(os.path.join(FILES, "wsgi-file.bin"), "rb")
    if environ["QUERY_STRING"] == "skip":
        f.seek(10)  # not from the start: read through the iterable, not sent as a whole file
    start_response("200 OK", [("Content-Type", "application/octet-stream")])
    return environ["wsgi.file_wrapper"](f, 65536)
