"""Reads the whole request body, slowly if asked (?slow), and answers its length and SHA-256."""
import asyncio
import hashlib


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    slow = b"slow" in scope["query_string"]
    digest, size = hashlib.sha256(), 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        digest.update(chunk)
        size += len(chunk)
        if slow:
            await asyncio.sleep(0.001)
        if not message.get("more_body"):
            break
    body = f"{size} {digest.hexdigest()}".encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
