"""A blocking HTTP/3 client for WebSocket tests (RFC 9220): aioquic's `H3Connection` under
a loop of its own, driven only while a call waits, so that tests written for the HTTP/2
client (tests/support/h2raw.py) read the same over HTTP/3.

`H3Raw` keeps every HTTP/3 event (and the QUIC stream resets) in `events`; `wait_for`
runs the loop until one matches. The extended CONNECT itself is `connect`.
"""

from __future__ import annotations

import asyncio
import time

from aioquic.asyncio import QuicConnectionProtocol, connect
from aioquic.h3.connection import H3Connection
from aioquic.quic.events import QuicEvent, StopSendingReceived, StreamReset

from tests.support.h3client import configuration

SETTINGS_ENABLE_CONNECT_PROTOCOL = 0x08


class _Protocol(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.events: list = []

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, (StreamReset, StopSendingReceived)):
            self.events.append(event)
        self.events.extend(self.http.handle_event(event))


class H3Raw:
    """One HTTP/3 connection to 127.0.0.1:`port`, verified against `cafile`."""

    def __init__(self, port: int, cafile: str, timeout: float = 10.0) -> None:
        self.loop = asyncio.new_event_loop()
        self.timeout = timeout
        self._manager = connect("127.0.0.1", port, configuration=configuration(cafile),
                                create_protocol=_Protocol, wait_connected=True)
        self.proto: _Protocol = self.loop.run_until_complete(
            asyncio.wait_for(self._manager.__aenter__(), timeout))
        self.closed = False

    @property
    def events(self) -> list:
        return self.proto.events

    @property
    def quic(self):
        return self.proto._quic

    def transmit(self) -> None:
        self.proto.transmit()

    def step(self, seconds: float = 0.01) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    def wait_for(self, predicate, timeout: float | None = None):
        """The first event that matches, waiting up to `timeout`; None if none came."""
        deadline = time.monotonic() + (timeout or self.timeout)
        seen = 0
        while True:
            for event in self.events[seen:]:
                if predicate(event):
                    return event
            seen = len(self.events)
            if time.monotonic() > deadline:
                return None
            self.step()

    def wait_until(self, condition, timeout: float | None = None) -> bool:
        """Runs the loop until `condition()` holds (checked once per step); its last value."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while not condition():
            if time.monotonic() > deadline:
                return False
            self.step()
        return True

    def settings(self) -> dict:
        """The server's SETTINGS (they come on its control stream after the handshake)."""
        deadline = time.monotonic() + self.timeout
        while self.proto.http.received_settings is None and time.monotonic() < deadline:
            self.step()
        assert self.proto.http.received_settings is not None
        return dict(self.proto.http.received_settings)

    def connect(self, path: str, protocol: str = "websocket", headers=(), end: bool = False) -> int:
        """An extended CONNECT (RFC 9220 3); its stream id."""
        sid = self.quic.get_next_available_stream_id()
        head = [(b":method", b"CONNECT"), (b":protocol", protocol.encode()), (b":scheme", b"https"),
                (b":path", path.encode()), (b":authority", b"localhost"), (b"sec-websocket-version", b"13"),
                *[(k.encode(), v.encode()) for k, v in headers]]
        self.proto.http.send_headers(sid, head, end_stream=end)
        self.transmit()
        return sid

    def request(self, path: str, method: str = "GET", headers=(), end: bool = True) -> int:
        sid = self.quic.get_next_available_stream_id()
        head = [(b":method", method.encode()), (b":scheme", b"https"), (b":path", path.encode()),
                (b":authority", b"localhost"), *headers]
        self.proto.http.send_headers(sid, head, end_stream=end)
        self.transmit()
        return sid

    def send_data(self, sid: int, data: bytes, end: bool = False) -> None:
        self.proto.http.send_data(sid, data, end_stream=end)
        self.transmit()

    def end_stream(self, sid: int) -> None:
        self.send_data(sid, b"", end=True)

    def reset(self, sid: int, code: int) -> None:
        """RESET_STREAM and STOP_SENDING with `code`."""
        self.quic.reset_stream(sid, code)
        self.quic.stop_stream(sid, code)
        self.transmit()

    def headers(self, sid: int) -> dict:
        ev = self.wait_for(lambda e: type(e).__name__ == "HeadersReceived" and e.stream_id == sid)
        assert ev is not None, self.events
        return {k.decode(): v.decode() for k, v in ev.headers}

    def data(self, sid: int) -> bytes:
        return b"".join(e.data for e in self.events if type(e).__name__ == "DataReceived" and e.stream_id == sid)

    def ended(self, sid: int) -> bool:
        """The stream's end came: its FIN, or a reset."""
        return self.wait_for(lambda e: (getattr(e, "stream_ended", False) or isinstance(e, StreamReset))
                             and e.stream_id == sid) is not None

    def was_reset(self, sid: int) -> int | None:
        """The code of the server's RESET_STREAM for `sid` (waits for it), or None."""
        ev = self.wait_for(lambda e: isinstance(e, StreamReset) and e.stream_id == sid)
        return None if ev is None else ev.error_code

    def response(self, sid: int) -> tuple[dict, bytes]:
        headers = self.headers(sid)
        assert self.ended(sid)
        return headers, self.data(sid)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            # CONNECTION_CLOSE goes out; its closing period (3 PTO) is not waited for in full,
            # since a test that stalled the loop on purpose leaves aioquic a long PTO.
            self.proto.close()
            try:
                self.loop.run_until_complete(asyncio.wait_for(self.proto.wait_closed(), 1))
            except TimeoutError:
                pass
            self.proto._transport.close()
            self.step(0)
        finally:
            self.loop.close()
