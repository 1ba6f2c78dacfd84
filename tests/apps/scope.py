"""Echoes the HTTP scope as JSON (bytes as latin-1 strings, tuples as lists)."""

import json


def jsonable(value):
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    echoed = jsonable(scope)
    # Record the Python types too: the spec requires bytes / tuples here.
    echoed["types"] = {key: type(scope.get(key)).__name__
                       for key in ("raw_path", "query_string", "client", "server", "state")}
    body = json.dumps(echoed).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
