"""Apps for tests/frameworks/test_interfaces.py: ASGI 2, WSGI, --env-file and --reset-contextvars."""

import contextvars
import os

GREETING = os.environ.get("ZIGCORN_TEST_GREETING", "not set at import")
VAR = contextvars.ContextVar("var", default="unset")
VAR.set("set while the server started")  # in the context the server's own callbacks run in


class Asgi2App:
    """ASGI 2: the class is the app; an instance per scope, called with receive and send."""

    def __init__(self, scope):
        self.scope = scope

    async def __call__(self, receive, send):
        if self.scope["type"] != "http":
            return
        await _plain(send, f"asgi2 {self.scope['path']}".encode())


def asgi2_function(scope):
    async def instance(receive, send):
        if scope["type"] == "http":
            await _plain(send, f"asgi2 function {scope['path']}".encode())

    return instance


def wsgi_app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/upload":
        size = 0
        stream = environ["wsgi.input"]
        while chunk := stream.read(65536):
            size += len(chunk)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [str(size).encode()]
    if path == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return (f"part{i};".encode() for i in range(5))
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"wsgi {path}".encode()]


def wsgi_context_app(environ, start_response):
    """What VAR holds as the request starts; then the request sets it (a later request must not see that)."""
    seen = VAR.get()
    VAR.set("set by a request")
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [seen.encode()]


async def env_app(scope, receive, send):
    if scope["type"] == "http":
        await _plain(send, GREETING.encode())


async def context_app(scope, receive, send):
    if scope["type"] == "http":
        await _plain(send, VAR.get().encode())


async def _plain(send, body: bytes) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})
