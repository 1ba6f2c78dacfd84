"""A raw-socket HTTP/1.1 client: send exact bytes, parse responses with h11."""

import socket
from dataclasses import dataclass

import h11

TIMEOUT = 10


@dataclass
class Response:
    status: int
    http_version: str
    headers: list[tuple[str, str]]  # lower-cased names, in order
    body: bytes
    trailers: list[tuple[str, str]]

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k == name]
        return ",".join(values) if values else None


def get(path: str = "/", headers: str = "", version: str = "1.1") -> bytes:
    """Bytes of a GET request; ``headers`` is extra raw header text ending in CRLF."""
    host = "Host: test\r\n" if version == "1.1" else ""
    return f"GET {path} HTTP/{version}\r\n{host}{headers}\r\n".encode()


class RawConn:
    """One TCP connection; requests are sent as raw bytes, responses parsed with h11."""

    def __init__(self, port: int, timeout: float = TIMEOUT):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.h11 = h11.Connection(h11.CLIENT)
        self._pending = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    @property
    def local_port(self) -> int:
        return self.sock.getsockname()[1]

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self) -> bytes:
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        return self.sock.recv(65536)

    def read_until(self, marker: bytes) -> bytes:
        """Raw bytes up to and including ``marker``; anything after it stays buffered."""
        data = b""
        while marker not in data:
            chunk = self.recv()
            if not chunk:
                raise ConnectionError(f"closed before {marker!r}; got {data!r}")
            data += chunk
        head, _, self._pending = data.partition(marker)
        return head + marker

    def read_until_close(self) -> bytes:
        data = b""
        while chunk := self.recv():
            data += chunk
        return data

    def is_closed(self) -> bool:
        """True if the server closed the connection (EOF or reset) with nothing more to read."""
        try:
            return self.recv() == b""
        except ConnectionResetError:
            return True

    def read_response(self, method: str = "GET") -> Response:
        """Parse the next response. ``method`` must match the request it answers (HEAD has no body).

        Raises ``h11.RemoteProtocolError`` if the response is malformed or cut short.
        """
        conn = self.h11
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
        # Tell h11 which request this response answers; the real bytes were sent raw.
        conn.send(h11.Request(method=method, target="/", headers=[("Host", "test")]))
        conn.send(h11.EndOfMessage())
        head, body, trailers = None, b"", []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    conn.receive_data(self.recv())
                except ConnectionResetError:
                    conn.receive_data(b"")
            elif isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                trailers = [(k.decode(), v.decode("latin-1")) for k, v in event.headers]
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise h11.RemoteProtocolError("connection closed before a response")
        return Response(
            status=head.status_code,
            http_version=head.http_version.decode(),
            headers=[(k.decode(), v.decode("latin-1")) for k, v in head.headers],
            body=body,
            trailers=trailers,
        )


def request(port: int, data: bytes, method: str = "GET") -> Response:
    """Send one raw request on a fresh connection and return the response."""
    with RawConn(port) as conn:
        conn.send(data)
        return conn.read_response(method)
