"""A small HTTP/2 client over a raw socket with the `h2` library, for tests that need
to see (or misbehave at) the frame level: resets, windows, floods, GOAWAY."""

import socket
import ssl
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
from hyperframe.frame import Frame


class H2Conn:
    def __init__(self, port: int, *, tls_ca: str | None = None, settings: dict | None = None, timeout: float = 10.0):
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls_ca is not None:
            ctx = ssl.create_default_context(cafile=tls_ca)
            ctx.set_alpn_protocols(["h2"])
            raw = ctx.wrap_socket(raw, server_hostname="localhost")
            assert raw.selected_alpn_protocol() == "h2"
        self.sock = raw
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.events: list = []
        self.closed = False

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, path: str, method: str = "GET", body: bytes | None = None, headers=(), end: bool = True) -> int:
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":scheme", "http"), (":authority", "localhost"), (":path", path), *headers]
        self.conn.send_headers(sid, hdrs, end_stream=end and not body)
        if body:
            self.send_body(sid, body, end=end)
        self.flush()
        return sid

    def send_body(self, sid: int, body: bytes, end: bool = True) -> None:
        """Sends as much as the windows allow, waiting for WINDOW_UPDATEs for the rest."""
        view = memoryview(body)
        while view:
            window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if window <= 0:
                self.flush()
                self.pump()
                continue
            n = min(window, len(view))
            self.conn.send_data(sid, bytes(view[:n]), end_stream=end and n == len(view))
            view = view[n:]
            self.flush()
        if end and not body:
            self.conn.end_stream(sid)
            self.flush()

    def pump(self, timeout: float | None = None) -> list:
        """Reads once (blocking up to the socket timeout) and returns the new events."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return []
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.closed = True
            return []
        new = self.conn.receive_data(data)
        for ev in new:
            if isinstance(ev, h2.events.DataReceived):
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        self.flush()
        self.events.extend(new)
        return new

    def wait_for(self, predicate, timeout: float = 10.0):
        """Pumps until an event matches `predicate` (returned), or the connection closes (None)."""
        deadline = time.monotonic() + timeout
        for ev in self.events:
            if predicate(ev):
                return ev
        while time.monotonic() < deadline and not self.closed:
            for ev in self.pump(timeout=max(0.05, deadline - time.monotonic())):
                if predicate(ev):
                    return ev
        return None

    def response(self, sid: int, timeout: float = 10.0):
        """(headers dict, body bytes, trailers dict or None) of a finished stream."""
        ended = self.wait_for(lambda e: isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)) and e.stream_id == sid, timeout)
        assert ended is not None, f"stream {sid} did not end; events: {self.events[-5:]}"
        assert isinstance(ended, h2.events.StreamEnded), f"stream {sid} was reset: {ended}"
        headers, body, trailers = {}, b"", None
        for ev in self.events:
            if getattr(ev, "stream_id", None) != sid:
                continue
            if isinstance(ev, h2.events.ResponseReceived):
                headers = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                body += ev.data
            elif isinstance(ev, h2.events.TrailersReceived):
                trailers = dict(ev.headers)
        return headers, body, trailers

    def goaway(self, timeout: float = 10.0):
        return self.wait_for(lambda e: isinstance(e, h2.events.ConnectionTerminated), timeout)

    def raw_frames(self, timeout: float = 10.0):
        """The frames that arrive, parsed without the `h2` state machine (which stops at
        GOAWAY), until the connection closes or `timeout` passes."""
        buf = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while len(buf) >= 9:
                frame, length = Frame.parse_frame_header(memoryview(buf[:9]))
                if len(buf) < 9 + length:
                    break
                frame.parse_body(memoryview(buf[9 : 9 + length]))
                buf = buf[9 + length :]
                yield frame
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                self.closed = True
                return
            buf += data

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
