"""A tiny gRPC service as a plain ASGI app: no grpc server library, no protobuf.

Messages are raw bytes in gRPC's length-prefixed framing (1 byte compressed flag, 4 byte
big-endian length, the message). Replies end with trailers (``http.response.trailers``,
an HTTP/2 HEADERS frame with END_STREAM) or, for errors, are "trailers-only": one
``http.response.start`` carrying grpc-status, then one empty body.

Methods:
  /test.Echo/Say    unary: replies b"hello " + request
  /test.Echo/Count  server streaming: request is an ASCII integer N; replies b"0" .. b"N-1"
  /test.Echo/Fail   trailers-only, grpc-status 5 (NOT_FOUND), grpc-message "nothing here"
  anything else     trailers-only, grpc-status 12 (UNIMPLEMENTED)
"""

import struct

from tests.apps import hello

OK, INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED, INTERNAL = 0, 3, 5, 12, 13
CONTENT_TYPE = (b"content-type", b"application/grpc")


def frame(message: bytes) -> bytes:
    """One gRPC length-prefixed message, uncompressed."""
    return struct.pack(">BI", 0, len(message)) + message


def unframe(data: bytes) -> list[bytes]:
    """The messages in a complete request body; ValueError on bad framing or compression."""
    messages, offset = [], 0
    while offset < len(data):
        if len(data) - offset < 5:
            raise ValueError("truncated message prefix")
        compressed, length = struct.unpack_from(">BI", data, offset)
        if compressed:
            raise ValueError("compressed messages are not supported")
        offset += 5
        if len(data) - offset < length:
            raise ValueError("truncated message")
        messages.append(data[offset:offset + length])
        offset += length
    return messages


async def read_body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionError("client went away")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def trailers_only(send, status: int, text: str = "") -> None:
    headers = [CONTENT_TYPE, (b"grpc-status", str(status).encode())]
    if text:
        headers.append((b"grpc-message", text.encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def reply(send, messages: list[bytes]) -> None:
    """Headers, one body message per gRPC message, then grpc-status 0 as trailers."""
    await send({"type": "http.response.start", "status": 200, "headers": [CONTENT_TYPE], "trailers": True})
    for message in messages:
        await send({"type": "http.response.body", "body": frame(message), "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    await send({"type": "http.response.trailers", "headers": [(b"grpc-status", b"0")], "more_trailers": False})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await hello.app(scope, receive, send)
    assert scope["type"] == "http"

    try:
        body = await read_body(receive)
    except ConnectionError:
        return
    method = scope["path"]

    if method == "/test.Echo/Fail":
        return await trailers_only(send, NOT_FOUND, "nothing here")
    if method not in ("/test.Echo/Say", "/test.Echo/Count"):
        return await trailers_only(send, UNIMPLEMENTED, f"unknown method {method}")
    if "http.response.trailers" not in scope.get("extensions", {}):
        return await trailers_only(send, INTERNAL, "server lacks the http.response.trailers extension")
    try:
        messages = unframe(body)
    except ValueError as exc:
        return await trailers_only(send, INTERNAL, str(exc))
    if len(messages) != 1:
        return await trailers_only(send, INVALID_ARGUMENT, f"expected one request message, got {len(messages)}")
    request = messages[0]

    if method == "/test.Echo/Say":
        return await reply(send, [b"hello " + request])
    try:
        count = int(request.decode("ascii"))
    except ValueError:
        return await trailers_only(send, INVALID_ARGUMENT, "request must be an ASCII integer")
    await reply(send, [str(i).encode() for i in range(count)])
