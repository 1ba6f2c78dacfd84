"""An HTTP/3 client on aioquic for the real-client tests (tests/http3/test_http3.py) and for
checking those tests against another server (hypercorn --quic-bind).

`H3Client` is aioquic's `QuicConnectionProtocol` with an `H3Connection` on top: each
request is one stream, its answer a `Response` collected from the stream's events. Many
requests may be open at once on one connection (`asyncio.gather`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from aioquic.asyncio import QuicConnectionProtocol, connect
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import QuicEvent, StreamReset

H3_REQUEST_CANCELLED = 0x10C
MB = 1024 * 1024


class Response:
    """One stream's answer: status, headers, the body and how many DATA pieces brought it."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.pieces = 0
        self.done = asyncio.get_running_loop().create_future()
        self.first_data = asyncio.get_running_loop().create_future()

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)

    def json(self):
        import json

        return json.loads(bytes(self.body))


class H3Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.responses: dict[int, Response] = {}

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, StreamReset) and event.stream_id in self.responses:
            response = self.responses[event.stream_id]
            if not response.done.done():
                response.done.set_exception(ConnectionResetError(f"stream {event.stream_id} reset"))
                response.done.exception()  # a request cancelled on purpose may never be awaited
        for h3_event in self.http.handle_event(event):
            self._h3_event(h3_event)

    def _h3_event(self, event: H3Event) -> None:
        response = self.responses.get(getattr(event, "stream_id", -1))
        if response is None:
            return
        if isinstance(event, HeadersReceived):
            if response.status == 0:
                response.headers = list(event.headers)
                response.status = int(response.header(b":status") or 0)
        elif isinstance(event, DataReceived):
            response.body += event.data
            if event.data:
                response.pieces += 1
                if not response.first_data.done():
                    response.first_data.set_result(None)
        if getattr(event, "stream_ended", False) and not response.done.done():
            response.done.set_result(response)

    def start(self, method: str, path: str, body: bytes = b"", headers: Sequence[tuple[bytes, bytes]] = (),
              trailers: Sequence[tuple[bytes, bytes]] | None = None, authority: str = "localhost") -> int:
        """Sends a request (its body and trailers, if any) and returns its stream id."""
        stream_id = self._quic.get_next_available_stream_id()
        self.responses[stream_id] = Response()
        head = [(b":method", method.encode()), (b":scheme", b"https"), (b":authority", authority.encode()),
                (b":path", path.encode()), *headers]
        if body:
            head.append((b"content-length", str(len(body)).encode()))
        last = not body and trailers is None
        self.http.send_headers(stream_id, head, end_stream=last)
        if body:
            self.http.send_data(stream_id, body, end_stream=trailers is None)
        if trailers is not None:
            self.http.send_headers(stream_id, list(trailers), end_stream=True)
        self.transmit()
        return stream_id

    async def request(self, method: str, path: str, timeout: float = 30.0, **kwargs) -> Response:
        stream_id = self.start(method, path, **kwargs)
        try:
            return await asyncio.wait_for(asyncio.shield(self.responses[stream_id].done), timeout)
        finally:
            self.responses.pop(stream_id, None)

    def reset(self, stream_id: int) -> None:
        """Cancels a request (RFC 9114 4.1.1: H3_REQUEST_CANCELLED both ways)."""
        self._quic.reset_stream(stream_id, H3_REQUEST_CANCELLED)
        self._quic.stop_stream(stream_id, H3_REQUEST_CANCELLED)
        self.transmit()


def configuration(cafile: str | None, server_name: str = "localhost", **extra) -> QuicConfiguration:
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=server_name, **extra)
    if cafile is not None:
        config.load_verify_locations(cafile)
    return config


@contextlib.asynccontextmanager
async def h3_connect(host: str, port: int, cafile: str | None, timeout: float = 10.0,
                     session_ticket_handler=None, token_handler=None, **extra) -> AsyncIterator[H3Client]:
    """One verified HTTP/3 connection; the handshake must finish within `timeout`.
    `session_ticket_handler` is given each session ticket the server sends, `token_handler`
    each NEW_TOKEN token; `extra` goes to the `QuicConfiguration` (`session_ticket=` resumes
    with one, `token=` brings a token back)."""
    async with asyncio.timeout(timeout):
        manager = connect(host, port, configuration=configuration(cafile, **extra), create_protocol=H3Client,
                          session_ticket_handler=session_ticket_handler, token_handler=token_handler,
                          wait_connected=True)
        client = await manager.__aenter__()
    try:
        yield client  # type: ignore[misc]
    finally:
        await manager.__aexit__(None, None, None)
