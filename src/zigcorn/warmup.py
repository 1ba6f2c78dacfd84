"""``--warmup-path``: one request through the app, in-process, before a worker accepts.

Frameworks build much lazily on their first request (FastAPI's dependency solving and
validators, Django's URL resolver, template caches): the warm-up pays for that before any
client waits on it. Then the garbage goes and what is left is frozen (``gc.freeze``), so
later collections never walk (and so never write to) those objects again.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

logger = logging.getLogger("zigcorn.error")

# A warm-up that takes longer than this is cancelled; the worker serves anyway.
WARMUP_TIMEOUT_SECONDS = 30.0


async def warm_up(config, state: dict) -> None:
    """GET `config.warmup_path` through the app with a made-up client, then collect and freeze."""
    path, _, query = config.warmup_path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("latin-1"),
        "query_string": query.encode("latin-1"),
        "root_path": config.root_path or "",
        "headers": [(b"host", b"localhost"), (b"user-agent", b"zigcorn-warmup")],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
        "state": dict(state),
        "extensions": {},
    }
    status = None
    response_done = asyncio.Event()
    request_sent = False

    async def receive() -> dict:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await response_done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            response_done.set()

    started = time.perf_counter()
    if getattr(config, "interface", None) == "wsgi":
        call = asyncio.to_thread(_wsgi_get, config.loaded_app, scope)
    else:
        call = config.loaded_app(scope, receive, send)
    try:
        result = await asyncio.wait_for(call, WARMUP_TIMEOUT_SECONDS)
        if status is None:
            status = result
    except asyncio.TimeoutError:
        logger.warning("Warm-up GET %s took more than %ds: cancelled.", config.warmup_path, WARMUP_TIMEOUT_SECONDS)
    except Exception as exc:  # a warm-up must never keep a worker from serving
        logger.warning("Warm-up GET %s failed: %r", config.warmup_path, exc)
    else:
        logger.info("Warm-up GET %s: %s in %.1f ms", config.warmup_path, status, (time.perf_counter() - started) * 1000)
    response_done.set()
    gc.collect()
    gc.freeze()


def _wsgi_get(app, scope: dict) -> int | None:
    """The same GET through a WSGI app (in a thread, as the pool would run it): its status."""
    import io
    import sys

    environ = {
        "REQUEST_METHOD": "GET", "SCRIPT_NAME": scope["root_path"], "PATH_INFO": scope["path"],
        "QUERY_STRING": scope["query_string"].decode("latin-1"), "SERVER_NAME": "localhost", "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "localhost",
        "HTTP_USER_AGENT": "zigcorn-warmup", "wsgi.version": (1, 0), "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(b""), "wsgi.errors": sys.stderr, "wsgi.multithread": True,
        "wsgi.multiprocess": True, "wsgi.run_once": False,
    }  # fmt: skip
    seen: list[int] = []

    def start_response(status, headers, exc_info=None):
        seen.append(int(status.split(" ", 1)[0]))
        return lambda data: None

    body = app(environ, start_response)
    try:
        for _ in body:
            pass
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()
    return seen[0] if seen else None
