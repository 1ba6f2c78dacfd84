"""The echo apps every server under comparison runs: each answers with a canonical JSON of
what it parsed (method, target, version, header fields in order, the body as the app
received it), so differences come from the servers, never from the apps.

``app`` is the ASGI one, ``wsgi_app`` the WSGI one (gunicorn). With ``DIFF_LOG`` set, each
request is also appended to that file as one JSON line (the proxy tests compare it with
what the clients sent).

A front end that is compared as a parser (nginx, proxying to this app) passes what it
read of the request line in ``x-diffhop-*`` headers, which take the place of what the
upstream saw; the generated inputs never carry those names.
"""

from __future__ import annotations

import json
import os

HOP_PREFIX = "x-diffhop-"
_LOG = os.environ.get("DIFF_LOG")


def _finish(reading: dict) -> bytes:
    headers = []
    hop_host = None
    from_front = False
    for name, value in reading["headers"]:
        if name.lower().startswith(HOP_PREFIX):
            from_front = True
            key = name.lower()[len(HOP_PREFIX):]
            if key in ("method", "target", "version"):
                reading[key] = value[5:] if key == "version" and value.startswith("HTTP/") else value
            elif key == "host":
                hop_host = value
            continue
        headers.append([name, value])
    if from_front:  # the Host the front end read (it sends none if empty), not its own
        headers = [h for h in headers if h[0].lower() != "host"]
        if hop_host:
            headers.insert(0, ["host", hop_host])
    reading["headers"] = headers
    data = json.dumps(reading, sort_keys=True).encode()
    if _LOG:
        fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data + b"\n")  # one write: lines from concurrent workers never mix
        finally:
            os.close(fd)
    return data


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    target = scope.get("raw_path") or scope["path"].encode("utf-8")
    if scope.get("query_string"):
        target += b"?" + scope["query_string"]
    data = _finish({
        "method": scope["method"],
        "target": target.decode("latin-1"),
        "version": scope["http_version"],
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
        "body": body.decode("latin-1"),
    })
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"x-diff-echo", b"1"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def wsgi_app(environ, start_response):
    body = environ["wsgi.input"].read()
    headers = []
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            name = key[5:]
        elif key in ("CONTENT_LENGTH", "CONTENT_TYPE") and value != "":
            name = key
        else:
            continue
        headers.append([name.lower().replace("_", "-"), value])
    target = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO", "")
    version = environ.get("SERVER_PROTOCOL", "")
    data = _finish({
        "method": environ["REQUEST_METHOD"],
        "target": target,
        "version": version[5:] if version.startswith("HTTP/") else version,
        "headers": headers,
        "body": body.decode("latin-1"),
    })
    start_response("200 OK", [("Content-Type", "application/json"), ("X-Diff-Echo", "1"),
                              ("Content-Length", str(len(data)))])
    return [data]
