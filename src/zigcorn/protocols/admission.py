"""What every request passes before its app, ASGI or WSGI alike: the --drain-path
request (the app never sees it), --limit-concurrency's 503 and --limit-max-requests'
count; and the error answer the server gives when the app cannot. `Admission` holds these once; each dispatcher (`protocols/http.py`,
`protocols/wsgi.py`) says where its scope keeps the path, method, client and
authorization.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("zigcorn.error")

ERROR_HEADERS = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
ERROR_BODIES = {500: b"Internal Server Error", 503: b"Service Unavailable"}

_DRAIN_ANSWERS = {
    202: b"draining\n",
    403: b"Forbidden\n",
    405: b"Method Not Allowed\n",
}


def answer_error(stream, status: int) -> None:
    """What the server answers when the app cannot (500, 503): the error status if the
    response has not started yet; a complete response stands; else the connection is cut."""
    if not stream.response_started and not stream.disconnected:
        try:
            stream.start(status, ERROR_HEADERS)
            stream.write(ERROR_BODIES[status], False)
        except RuntimeError:
            pass
        stream.finish()
    elif stream.response_complete:
        stream.finish()
    else:
        stream.abort()


def _drain_answer(stream, status: int, extra=()) -> None:
    stream.start(status, [*ERROR_HEADERS, *extra])
    stream.write(_DRAIN_ANSWERS[status], False)
    stream.finish()


def drain_token(admin_token: str | None) -> bytes:
    """The ``Authorization`` value a --drain-path request must carry (b"" matches nothing)."""
    return f"Bearer {admin_token}".encode() if admin_token else b""


def answer_drain(stream, method: str, authorization: bytes, client_addr: str, token: bytes, on_drain) -> None:
    """--drain-path: a POST carrying ``Authorization: Bearer <--admin-token>`` (compared in
    constant time) answers 202 and starts the graceful shutdown (`on_drain`); any request
    without the token gets 403, one with it but not a POST 405."""
    import hmac

    if not token or not hmac.compare_digest(authorization, token):
        logger.warning("Drain request refused: no valid admin token (from %s).", client_addr)
        _drain_answer(stream, 403)
        return
    if method != "POST":
        _drain_answer(stream, 405, [(b"allow", b"POST")])
        return
    logger.info("Drain requested by %s: shutting down gracefully.", client_addr)
    _drain_answer(stream, 202)
    on_drain()


class Admission:
    """The preamble of a dispatcher (the engine's on_request): `admit` answers the drain
    request and the requests past --limit-concurrency itself, and counts toward
    --limit-max-requests. A subclass gives `_is_drain_request` and `_drain_request`."""

    __slots__ = ("drain_path", "admin_token", "on_drain", "limit_concurrency", "limit_max_requests", "requests",
                 "on_limit", "engine")  # fmt: skip

    def __init__(self, *, limit_concurrency, limit_max_requests, on_limit, drain_path: str | None,
                 admin_token: str | None, on_drain) -> None:  # fmt: skip
        self.drain_path = drain_path
        self.admin_token = drain_token(admin_token)
        self.on_drain = on_drain
        self.limit_concurrency = limit_concurrency
        self.limit_max_requests = limit_max_requests
        self.requests = 0
        self.on_limit = on_limit
        self.engine = None  # the server sets it once the engine exists

    def admit(self, stream) -> bool:
        """False when the request was answered here and the app must not see it."""
        if self.drain_path is not None and self._is_drain_request(stream):
            self._drain_request(stream)
            return False
        if self.limit_concurrency is not None and self.engine.streams > self.limit_concurrency:
            # Like uvicorn: past the limit the app is not called at all.
            stream.start(503, ERROR_HEADERS)
            stream.write(ERROR_BODIES[503], False)
            stream.finish()
            return False
        if self.limit_max_requests is not None:
            self.requests += 1
            if self.requests == self.limit_max_requests:
                logger.warning("Maximum request limit of %d exceeded. Terminating process.", self.limit_max_requests)
                self.on_limit()
        return True

    def _is_drain_request(self, stream) -> bool:
        raise NotImplementedError

    def _drain_request(self, stream) -> None:
        raise NotImplementedError
