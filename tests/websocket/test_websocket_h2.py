"""WebSocket over HTTP/2 (RFC 8441): an extended CONNECT with `:protocol websocket` is a
`websocket` scope served by the same engine session as an HTTP/1.1 upgrade; its
WebSocket frames travel in the stream's DATA frames.

The client is the `h2` library (tests/support/h2raw.py) with hand-made masked frames, since no
Python WebSocket client speaks RFC 8441.
"""

import json
import os
import struct
import zlib

import h2.events
import h2.settings
import pytest

from tests.support.h2raw import H2Conn
from tests.support.harness import Server, zigcorn_only

pytestmark = zigcorn_only


def frame(opcode: int, payload: bytes, fin: bool = True, rsv1: bool = False) -> bytes:
    """A masked client frame."""
    head = bytes([(0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def parse_frames(data: bytes) -> list[tuple[int, bytes, bool]]:
    """Unmasked server frames: (opcode, payload, rsv1)."""
    out = []
    while data:
        b0, b1 = data[0], data[1]
        n, at = b1 & 0x7F, 2
        if n == 126:
            n, at = struct.unpack("!H", data[2:4])[0], 4
        elif n == 127:
            n, at = struct.unpack("!Q", data[2:10])[0], 10
        out.append((b0 & 0x0F, data[at : at + n], bool(b0 & 0x40)))
        data = data[at + n :]
    return out


class WsOverH2:
    def __init__(self, port: int, path: str, headers=()):
        self.h2 = H2Conn(port)
        settings = self.h2.wait_for(lambda e: isinstance(e, h2.events.RemoteSettingsChanged))
        assert settings is not None
        assert settings.changed_settings[h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL].new_value == 1
        self.sid = self.h2.conn.get_next_available_stream_id()
        self.h2.conn.send_headers(self.sid, [
            (":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "http"), (":path", path),
            (":authority", "localhost"), ("sec-websocket-version", "13"), *headers,
        ])
        self.h2.flush()
        self.buf = b""

    def response(self) -> dict:
        ev = self.h2.wait_for(lambda e: isinstance(e, h2.events.ResponseReceived) and e.stream_id == self.sid)
        assert ev is not None, self.h2.events
        return dict(ev.headers)

    def send(self, data: bytes) -> None:
        self.h2.send_body(self.sid, data, end=False)

    def frames(self, count: int) -> list[tuple[int, bytes, bool]]:
        def enough(_):
            self.buf = b"".join(e.data for e in self.h2.events
                                if isinstance(e, h2.events.DataReceived) and e.stream_id == self.sid)
            return len(parse_frames_prefix(self.buf)) >= count

        self.h2.wait_for(enough)
        return parse_frames_prefix(self.buf)[:count]

    def ended(self) -> bool:
        return self.h2.wait_for(lambda e: isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset))
                                and e.stream_id == self.sid) is not None


def parse_frames_prefix(data: bytes):
    """The whole frames at the start of `data`."""
    whole = b""
    rest = data
    while len(rest) >= 2:
        n, at = rest[1] & 0x7F, 2
        if n == 126:
            if len(rest) < 4:
                break
            n, at = struct.unpack("!H", rest[2:4])[0], 4
        elif n == 127:
            if len(rest) < 10:
                break
            n, at = struct.unpack("!Q", rest[2:10])[0], 10
        if len(rest) < at + n:
            break
        whole += rest[: at + n]
        rest = rest[at + n :]
    return parse_frames(whole)


@pytest.fixture(scope="module")
def server():
    s = Server("ws:app").wait_ready()
    yield s
    s.stop()


def test_echo_over_an_extended_connect(server):
    ws = WsOverH2(server.port, "/echo")
    try:
        assert ws.response()[":status"] == "200"
        ws.send(frame(0x1, "héllo".encode()))
        ws.send(frame(0x2, b"\x00\x01" * 40_000))
        got = ws.frames(2)
        assert got[0][:2] == (0x1, "héllo".encode())
        assert got[1][:2] == (0x2, b"\x00\x01" * 40_000)
        # The close handshake: our close is echoed, then the stream ends.
        ws.send(frame(0x8, struct.pack("!H", 1000)))
        assert ws.frames(3)[2][:2] == (0x8, struct.pack("!H", 1000))
        ws.h2.conn.end_stream(ws.sid)
        ws.h2.flush()
        assert ws.ended()
    finally:
        ws.h2.close()


def test_the_scope_is_a_websocket_scope_over_http2(server):
    ws = WsOverH2(server.port, "/scope?x=1", headers=[("sec-websocket-protocol", "chat, superchat")])
    try:
        headers = ws.response()
        assert headers[":status"] == "200"
        assert headers["sec-websocket-protocol"] == "superchat" and headers["x-custom"] == "yes"
        scope = json.loads(ws.frames(1)[0][1])
        assert scope["type"] == "websocket" and scope["http_version"] == "2"
        assert scope["scheme"] == "ws" and scope["path"] == "/scope" and scope["query_string"] == "x=1"
        assert scope["subprotocols"] == ["chat", "superchat"]
    finally:
        ws.h2.close()


def test_websocket_and_http_streams_share_one_connection(server):
    ws = WsOverH2(server.port, "/echo")
    try:
        assert ws.response()[":status"] == "200"
        sid = ws.h2.request("/plain")
        ws.send(frame(0x1, b"one"))
        _, body, _ = ws.h2.response(sid)
        assert json.loads(body) == {"type": "http", "path": "/plain"}
        assert ws.frames(1)[0][:2] == (0x1, b"one")
    finally:
        ws.h2.close()


def test_the_app_closing_ends_the_stream(server):
    ws = WsOverH2(server.port, "/close-code?4001&bye")
    try:
        assert ws.response()[":status"] == "200"
        assert ws.frames(1)[0][:2] == (0x8, struct.pack("!H", 4001) + b"bye")
        ws.send(frame(0x8, struct.pack("!H", 4001)))
        assert ws.ended()
    finally:
        ws.h2.close()


def test_a_denial_is_an_http_response_on_the_stream(server):
    ws = WsOverH2(server.port, "/deny")
    try:
        headers, body, _ = ws.h2.response(ws.sid)
        assert headers[":status"] == "401" and headers["x-denied"] == "1" and body == b"no entry"
    finally:
        ws.h2.close()


def test_a_protocol_error_fails_the_session_with_1002(server):
    ws = WsOverH2(server.port, "/echo")
    try:
        assert ws.response()[":status"] == "200"
        ws.send(b"\x81\x05hello")  # unmasked: clients must mask
        assert ws.frames(1)[0][:2] == (0x8, struct.pack("!H", 1002))
    finally:
        ws.h2.close()


def test_permessage_deflate_over_http2(server):
    ws = WsOverH2(server.port, "/echo", headers=[("sec-websocket-extensions", "permessage-deflate")])
    try:
        headers = ws.response()
        assert headers["sec-websocket-extensions"].startswith("permessage-deflate")
        c = zlib.compressobj(wbits=-15)
        data = c.compress(b"a" * 1000) + c.flush(zlib.Z_SYNC_FLUSH)
        ws.send(frame(0x1, data[:-4], rsv1=True))
        opcode, payload, rsv1 = ws.frames(1)[0]
        assert opcode == 0x1
        text = zlib.decompressobj(wbits=-15).decompress(payload + b"\x00\x00\xff\xff") if rsv1 else payload
        assert text == b"a" * 1000
    finally:
        ws.h2.close()


def test_without_ws_the_connect_protocol_is_not_offered():
    s = Server("ws:app", "--ws", "none").wait_ready()
    try:
        conn = H2Conn(s.port)
        settings = conn.wait_for(lambda e: isinstance(e, h2.events.RemoteSettingsChanged))
        code = h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL
        assert code not in settings.changed_settings or settings.changed_settings[code].new_value == 0
        conn.close()
    finally:
        s.stop()
