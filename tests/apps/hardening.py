"""App for the hardening tests: prints markers to stdout so tests can see what the app observed.

Every request prints ``CALLED <path>?<query>``; paths take ``?id=...`` to make markers unique.
"""

import asyncio
from urllib.parse import parse_qs

from tests.apps.basic import respond

MB = 1024 * 1024


def mark(*parts) -> None:
    print(*parts, flush=True)


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
    tag = query.get("id", "-")
    mark("CALLED", f"{path}?{scope['query_string'].decode()}")

    if path == "/read-body":  # read the whole body; record a disconnect if one comes instead
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                mark("DISCONNECT", tag, size)
                return
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        mark("BODY-COMPLETE", tag, size)
        await respond(send, body=str(size).encode())

    elif path == "/sleep":  # ?s=seconds
        mark("SLEEP-START", tag)
        await asyncio.sleep(float(query.get("s", 1)))
        await respond(send, body=b"slept")

    elif path == "/forever":  # never finishes
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            mark("CANCELLED", tag)
            raise

    elif path == "/forever-started":  # starts a streamed response, then never finishes
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            mark("CANCELLED", tag)
            raise

    elif path == "/download":  # ?mb=N chunks of 1 MiB, streamed
        sent = 0
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for i in range(int(query.get("mb", 10))):
                await send({"type": "http.response.body", "body": bytes([i % 256]) * MB, "more_body": True})
                sent += 1
            await send({"type": "http.response.body", "body": b""})
        except BaseException as exc:
            mark("DOWNLOAD-END", tag, sent, type(exc).__name__)
            raise
        mark("DOWNLOAD-END", tag, sent, "complete")

    elif path == "/send-after":  # a complete response, then one more body message
        await respond(send, body=b"complete")
        try:
            await send({"type": "http.response.body", "body": b"too late"})
        except Exception as exc:
            mark("SEND-AFTER-RAISED", tag, type(exc).__name__)
            raise
        mark("SEND-AFTER-ACCEPTED", tag)

    elif path == "/ok":
        await respond(send, body=b"ok")

    else:
        await respond(send, body=path.encode())
