"""ASGI HTTP on top of the engine's streams.

The engine parses, frames and writes; this module is the thin part an app sees:
`receive()` and `send()`, message validation, and what happens when an app fails.
`HTTPCycle` *is* the engine's per-request object (a subclass of `_core.Stream`), so a
request costs one Python object besides the scope, the coroutine and its task.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import os
import sys
import time

from zigcorn import accesslog
from zigcorn._core import Stream
from zigcorn.protocols.admission import Admission, answer_drain, answer_error

logger = logging.getLogger("zigcorn.error")

_EAGER_TASKS = sys.version_info >= (3, 12)
_TIMEOUT_MESSAGE = "zigcorn: request timeout"


def _expire(task: asyncio.Task) -> None:
    task.cancel(_TIMEOUT_MESSAGE)


def access_fields(scope: dict) -> tuple[str, str]:
    """``("host:port" or "-", "/path?query")`` for an access log line."""
    client = scope.get("client")
    client_addr = f"{client[0]}:{client[1]}" if client else "-"
    path = scope["raw_path"].decode("latin-1")
    if scope["query_string"]:
        path = f"{path}?{scope['query_string'].decode('latin-1')}"
    return client_addr, path


def wake(future: asyncio.Future) -> None:
    """Called by the engine to resume a receive() or send() waiting on `future`."""
    if not future.done():
        future.set_result(None)


class HTTPCycle(Stream):
    """One request and its response, as the app sees them."""

    __slots__ = ()

    async def receive(self) -> dict:
        message = self.read()
        while message is None:
            future = asyncio.get_running_loop().create_future()
            self.read_waiter = future
            await future
            message = self.read()
        return message

    # send(message): start and body messages in a plain dict go straight to the engine
    # and come back as an awaitable already done (no coroutine per message); every
    # other message, and a body the client must drain first, ends up in `_send` or
    # `_wait_write` below.
    send = Stream.send_plain

    async def _wait_write(self) -> None:
        future = asyncio.get_running_loop().create_future()
        self.write_waiter = future
        await future

    async def _send(self, message: dict) -> None:
        message_type = message["type"]
        if message_type == "http.response.body":
            if self.write(message.get("body", b""), message.get("more_body", False)):
                # The client reads slowly: hold the app back until the engine drains.
                future = asyncio.get_running_loop().create_future()
                self.write_waiter = future
                await future
        elif message_type == "http.response.start":
            if self.response_started:
                raise RuntimeError("Expected ASGI message 'http.response.body', but got 'http.response.start'.")
            self.start(message["status"], message.get("headers", ()), message.get("trailers", False))
        elif message_type == "http.response.trailers":
            try:
                wait = self.write_trailers(message.get("headers", ()), message.get("more_trailers", False))
            except RuntimeError:
                # Misused trailers: nothing more may be sent honestly, the connection ends here.
                self.abort()
                raise
            if wait:
                future = asyncio.get_running_loop().create_future()
                self.write_waiter = future
                await future
        elif message_type == "http.response.early_hint":
            self.early_hint(message["links"])
        elif message_type == "http.response.pathsend":
            # The engine sends the file (sendfile(2) where it can); send() returns at once.
            self.send_file(os.fsencode(message["path"]))
        else:
            raise RuntimeError(f"Unexpected ASGI message '{message_type}' sent, in response to an HTTP request.")

    async def run(self, app, access_log: bool, timeout: float | None) -> None:
        started_at = time.perf_counter() if access_log else 0.0
        send = self.send
        response_headers = None
        if access_log:
            access_format = accesslog.access_format
            if access_format is not None and access_format.response_headers:
                response_headers = []  # %({name}o)s: the headers the app sends, seen on their way
                send = _recording_send(send, response_headers)
        timer = None
        if timeout is not None:
            timer = asyncio.get_running_loop().call_later(timeout, _expire, asyncio.current_task())
        try:
            result = await app(self.scope, self.receive, send)
        except asyncio.CancelledError as exc:
            if exc.args != (_TIMEOUT_MESSAGE,):
                self._fail()
                raise
            logger.error("Request timed out after %ss: the app was cancelled.", timeout)
            self._fail(503)
        except BaseException as exc:  # the worker must survive anything an app raises
            logger.error("Exception in ASGI application\n", exc_info=exc)
            self._fail()
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        else:
            if result is not None:
                logger.error("ASGI callable should return None, but returned '%s'.", result)
            if not self.response_started:
                if not self.disconnected:
                    logger.error("ASGI callable returned without starting response.")
                self._fail()
            elif not self.response_complete:
                if not self.disconnected:
                    logger.error("ASGI callable returned without completing response.")
                self.abort()
            else:
                self.finish()
        finally:
            if timer is not None:
                timer.cancel()
        if access_log:
            self._log_access(started_at, response_headers)

    def _fail(self, status: int = 500) -> None:
        """An error status if nothing was sent yet; a complete response stands; otherwise the connection is cut."""
        answer_error(self, status)

    def _log_access(self, started_at: float, response_headers=None) -> None:
        duration = time.perf_counter() - started_at
        accesslog.log(accesslog.Request(self.scope, self.status, self.body_bytes, duration, response_headers))


def _recording_send(send, headers: list):
    async def recording_send(message: dict) -> None:
        if message["type"] == "http.response.start":
            headers.extend(message.get("headers", ()))
        await send(message)

    return recording_send


class Dispatcher(Admission):
    """Turns each stream the engine hands over into a task running the app, once it is
    admitted (`Admission`: the drain path and the limits)."""

    __slots__ = ("app", "loop", "access_log", "timeout_request", "reset_contextvars", "task_type")

    def __init__(
        self, app, loop, *, access_log: bool, limit_concurrency, limit_max_requests, timeout_request, on_limit,
        reset_contextvars: bool = False, drain_path: str | None = None, admin_token: str | None = None, on_drain=None,
        task_type=None,
    ) -> None:
        super().__init__(limit_concurrency=limit_concurrency, limit_max_requests=limit_max_requests,
                         on_limit=on_limit, drain_path=drain_path, admin_token=admin_token, on_drain=on_drain)
        self.reset_contextvars = reset_contextvars
        self.timeout_request = timeout_request
        self.app = app
        self.loop = loop
        self.access_log = access_log
        # --task-impl zigcorn: zigcorn.loop.Task (zigcorn's loop only), started eagerly on
        # every Python; None: asyncio's Task.
        self.task_type = task_type

    def __call__(self, stream: HTTPCycle) -> None:
        if not self.admit(stream):
            return
        coro = stream.run(self.app, self.access_log, self.timeout_request)
        # --reset-contextvars: a fresh, empty context per request; else a copy of the current one.
        if self.task_type is not None:
            context = contextvars.Context() if self.reset_contextvars else None
            self.task_type(coro, loop=self.loop, eager_start=True, context=context)
        elif _EAGER_TASKS:
            context = contextvars.Context() if self.reset_contextvars else None
            asyncio.Task(coro, loop=self.loop, eager_start=True, context=context)
        elif self.reset_contextvars:
            self.loop.create_task(coro, context=contextvars.Context())
        else:
            self.loop.create_task(coro)  # no keywords: zigcorn's loop then makes the Task with none either

    def plain(self):
        """What the engine takes as its on_request when each request only becomes a task
        running the app (no drain path, limits or per-request context): the tuple
        (create_task, app, access_log, timeout_request), and the engine then calls
        ``create_task(stream.run(app, access_log, timeout_request))`` itself, without a
        Python call into this dispatcher. None when any of those applies."""
        if (self.drain_path is not None or self.limit_concurrency is not None or self.limit_max_requests is not None
                or self.reset_contextvars):  # fmt: skip
            return None
        if self.task_type is not None:
            create_task = self.task_type._zc_starter(self.loop)  # task_type(coro, loop=, eager_start=True)
        elif _EAGER_TASKS:
            create_task = functools.partial(asyncio.Task, loop=self.loop, eager_start=True)
        else:
            create_task = self.loop.create_task
        return (create_task, self.app, self.access_log, self.timeout_request)

    def _is_drain_request(self, stream: HTTPCycle) -> bool:
        return stream.scope["path"] == self.drain_path and stream.scope["type"] == "http"

    def _drain_request(self, stream: HTTPCycle) -> None:
        scope = stream.scope
        given = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                given = value
        answer_drain(stream, scope["method"], given, access_fields(scope)[0], self.admin_token, self.on_drain)
