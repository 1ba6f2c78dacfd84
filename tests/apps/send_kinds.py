"""What `await send(...)` gives an app for each kind of message (the engine's
coroutine-free send for start and body messages, the Python one for the rest).

``GET /kinds``  -> JSON: what each send returned and what awaiting it gave
``GET /big``    -> 8 MiB in 64 KiB messages; ``/big-kinds`` then tells whether any of
                   those sends had to wait for the client (returned a coroutine)
``GET /double`` -> a second http.response.start: its error comes at the await
"""

import inspect
import json


class Message(dict):
    """A dict subclass: the engine's fast path takes plain dicts only."""


CHUNK = b"x" * 65536
CHUNKS = 128
seen = {"big_waited": 0, "big_sends": 0}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/kinds":
        started = send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        report = {"start_awaitable": inspect.isawaitable(started), "start_coroutine": inspect.iscoroutine(started)}
        report["start_result"] = repr(await started)
        report["same_awaitable_twice"] = repr(await started)
        body = json.dumps(report).encode()
        sent = send(Message(type="http.response.body", body=body))
        report_body = await sent
        assert report_body is None and inspect.iscoroutine(sent)
    elif path == "/big":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(CHUNK) * CHUNKS).encode())]})
        for i in range(CHUNKS):
            awaitable = send({"type": "http.response.body", "body": CHUNK, "more_body": i < CHUNKS - 1})
            seen["big_sends"] += 1
            seen["big_waited"] += inspect.iscoroutine(awaitable)
            assert await awaitable is None
    elif path == "/big-kinds":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps(seen).encode()})
    elif path == "/double":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        second = send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            await second
        except RuntimeError as exc:
            body = f"refused at the await: {exc}".encode()
        else:
            body = b"accepted"
        await send({"type": "http.response.body", "body": body})
