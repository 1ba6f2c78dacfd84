"""For tests/content/test_request_decompression.py: reads the whole request body and answers, as
JSON, its size, SHA-256 and the body-describing headers the app saw. `wsgi` is the same
for --interface wsgi."""
import hashlib
import json


def _answer(size, digest, seen):
    return json.dumps({"size": size, "sha256": digest.hexdigest(), "headers": seen}).encode()


def _body_headers(pairs):
    names = ("content-encoding", "content-length", "transfer-encoding")
    return {n: v for n, v in pairs if n in names}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    seen = _body_headers((k.decode(), v.decode()) for k, v in scope["headers"])
    if scope["query_string"] == b"early":
        # The response starts before the body is read: a bad body can only cut it.
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"started\n", "more_body": True})
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.body", "body": b"whole body read\n"})
        return
    digest, size = hashlib.sha256(), 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunk = message.get("body", b"")
        digest.update(chunk)
        size += len(chunk)
        if not message.get("more_body"):
            break
    body = _answer(size, digest, seen)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def wsgi(environ, start_response):
    pairs = [(k[5:].lower().replace("_", "-"), v) for k, v in environ.items() if k.startswith("HTTP_")]
    pairs += [(k.lower().replace("_", "-"), environ[k]) for k in ("CONTENT_LENGTH",) if environ.get(k)]
    seen = _body_headers(pairs)
    digest, size = hashlib.sha256(), 0
    stream = environ["wsgi.input"]
    while chunk := stream.read(8192):
        digest.update(chunk)
        size += len(chunk)
    body = _answer(size, digest, seen)
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
