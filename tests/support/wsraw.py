"""A raw-socket WebSocket client: exact bytes on the wire, for what real clients never send."""

from __future__ import annotations

import base64
import os
import socket
import struct
import zlib

import pytest

TIMEOUT = 5.0
TEXT, BINARY, CLOSE, PING, PONG = 1, 2, 8, 9, 10

# Client frames the engine refuses, and the close code each gets: (opcode, payload, fin)
# in order. Every carrier runs them (tests/websocket/test_websocket.py over HTTP/1.1,
# test_websocket_streams.py over HTTP/2 and HTTP/3).
PROTOCOL_ERRORS = [
    pytest.param([(TEXT, b"\xff", True)], 1007, id="invalid-utf8"),
    pytest.param([(TEXT, b"ok\xed\xa0\x80", True)], 1007, id="surrogate"),
    pytest.param([(TEXT, b"\xe2\x82", False), (0, b"x", True)], 1007, id="invalid-utf8-across-fragments"),
    pytest.param([(TEXT, b"\xe2\x82", True)], 1007, id="truncated-utf8"),
    pytest.param([(0, b"x", True)], 1002, id="continuation-without-start"),
    pytest.param([(TEXT, b"a", False), (TEXT, b"b", True)], 1002, id="new-message-inside-fragmented"),
    pytest.param([(3, b"", True)], 1002, id="reserved-opcode"),
    pytest.param([(PING, b"", False)], 1002, id="fragmented-ping"),
    pytest.param([(PING, b"p" * 126, True)], 1002, id="ping-too-long"),
    pytest.param([(CLOSE, b"\x03", True)], 1002, id="close-one-byte"),
    pytest.param([(CLOSE, struct.pack("!H", 1005), True)], 1002, id="close-code-1005"),
    pytest.param([(CLOSE, struct.pack("!H", 999), True)], 1002, id="close-code-999"),
    pytest.param([(CLOSE, struct.pack("!H", 1000) + b"\xff", True)], 1007, id="close-reason-not-utf8"),
]


def upgrade_request(path: str = "/echo", extra: str = "", key: str | None = None, version: str = "13") -> bytes:
    key = key if key is not None else base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Upgrade: websocket", "Connection: Upgrade"]
    if key:
        lines.append(f"Sec-WebSocket-Key: {key}")
    if version:
        lines.append(f"Sec-WebSocket-Version: {version}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def frame(opcode: int, payload: bytes = b"", fin: bool = True, mask: bool = True, rsv1: bool = False) -> bytes:
    head = bytes([(0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode])
    n = len(payload)
    bit = 0x80 if mask else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 65536:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload)) if n < 4096 else _mask_fast(payload, key)
    return head + key + masked


def _mask_fast(payload: bytes, key: bytes) -> bytes:
    n = len(payload)
    k = int.from_bytes((key * (n // 4 + 1))[:n], "little")
    return (int.from_bytes(payload, "little") ^ k).to_bytes(n, "little")


def close_payload(code: int, reason: str = "") -> bytes:
    return struct.pack("!H", code) + reason.encode()


def compress(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-15)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]


class RawWS:
    def __init__(self, port: int, path: str = "/echo", extra: str = "", timeout: float = TIMEOUT, **kw):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.sock.sendall(upgrade_request(path, extra, **kw))
        head = self._read_until(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ")[1])
        self.headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed before {marker!r}: {self.buf!r}")
            self.buf += chunk
        i = self.buf.index(marker) + len(marker)
        data, self.buf = self.buf[:i], self.buf[i:]
        return data

    def _read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise ConnectionError(f"closed with {len(self.buf)} of {n} bytes")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_body(self) -> bytes:
        """The body of an HTTP answer (denials, errors): content-length or chunked."""
        if self.headers.get("transfer-encoding") != "chunked":
            return self._read_exact(int(self.headers.get("content-length", "0")))
        body = b""
        while True:
            size = int(self._read_until(b"\r\n")[:-2], 16)
            if size == 0:
                self._read_until(b"\r\n")
                return body
            body += self._read_exact(size + 2)[:-2]

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, opcode: int, payload: bytes = b"", **kw) -> None:
        self.sock.sendall(frame(opcode, payload, **kw))

    def recv_frame(self) -> tuple[bool, int, bytes]:
        """(fin, opcode, payload) of the next server frame; server frames must not be masked."""
        b0, b1 = self._read_exact(2)
        assert b1 & 0x80 == 0, "server frames are never masked"
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._read_exact(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read_exact(8))[0]
        return bool(b0 & 0x80), b0 & 0x0F, self._read_exact(n)

    def recv_close(self) -> tuple[int | None, str]:
        """Skips data/ping frames until a close frame; returns its (code, reason)."""
        while True:
            _, opcode, payload = self.recv_frame()
            if opcode == 8:
                if not payload:
                    return None, ""
                return struct.unpack("!H", payload[:2])[0], payload[2:].decode()

    def closed_by_peer(self) -> bool:
        """True when the server closed the TCP connection (EOF or reset), after any buffered bytes."""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except ConnectionResetError:
            return True
        except (socket.timeout, TimeoutError):
            return False

    def close(self) -> None:
        self.sock.close()
