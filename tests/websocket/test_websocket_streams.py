"""WebSocket over a stream of a multiplexed protocol: HTTP/2's extended CONNECT (RFC 8441) and
HTTP/3's (RFC 9220). `:protocol websocket` opens a `websocket` scope served by the same engine
session as an HTTP/1.1 upgrade; its WebSocket frames travel in the stream's DATA frames.

Every test runs over each carrier (`ws_server`): HTTP/2 (the `h2` library,
tests/support/h2raw.py) and HTTP/3 on both I/O backends (aioquic's H3Connection,
tests/support/h3ws.py), with hand-made masked frames, since no Python WebSocket client speaks
either protocol.
"""

import json
import os
import struct
import zlib

import h2.events
import h2.settings
import pytest

from tests.support.h2raw import H2Conn
from tests.support.h3_support import h3_certs  # noqa: F401 (fixture)
from tests.support.harness import Server, zigcorn_only
from tests.support.wsraw import PROTOCOL_ERRORS

pytestmark = zigcorn_only

CARRIERS = ["h2", "h3-epoll", "h3-io_uring"]


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
    at = 0
    while at < len(data):
        b0, b1 = data[at], data[at + 1]
        n, head = b1 & 0x7F, 2
        if n == 126:
            n, head = struct.unpack("!H", data[at + 2 : at + 4])[0], 4
        elif n == 127:
            n, head = struct.unpack("!Q", data[at + 2 : at + 10])[0], 10
        out.append((b0 & 0x0F, data[at + head : at + head + n], bool(b0 & 0x40)))
        at += head + n
    return out


class WsOverH2:
    http_version, scheme = "2", "ws"

    def __init__(self, port: int, path: str, headers=(), cafile: str | None = None):
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

    def end(self) -> None:
        self.h2.conn.end_stream(self.sid)
        self.h2.flush()

    def received(self) -> bytes:
        return b"".join(e.data for e in self.h2.events
                        if isinstance(e, h2.events.DataReceived) and e.stream_id == self.sid)

    def wait_until(self, condition) -> bool:
        return condition() or self.h2.wait_for(lambda _: condition()) is not None

    def request(self, path: str) -> tuple[dict, bytes]:
        """A plain GET on the same connection, answered whole."""
        headers, body, _ = self.h2.response(self.h2.request(path))
        return headers, body

    def denial(self) -> tuple[dict, bytes]:
        headers, body, _ = self.h2.response(self.sid)
        return headers, body

    def close(self) -> None:
        self.h2.close()


class WsOverH3:
    """The same over HTTP/3 (RFC 9220), its SETTINGS checked first (section 3)."""

    http_version, scheme = "3", "wss"

    def __init__(self, port: int, path: str, headers=(), cafile: str | None = None):
        from tests.support.h3ws import SETTINGS_ENABLE_CONNECT_PROTOCOL, H3Raw

        self.h3 = H3Raw(port, cafile)
        assert self.h3.settings().get(SETTINGS_ENABLE_CONNECT_PROTOCOL) == 1
        self.sid = self.h3.connect(path, headers=headers)

    def response(self) -> dict:
        return self.h3.headers(self.sid)

    def send(self, data: bytes) -> None:
        self.h3.send_data(self.sid, data)

    def frames(self, count: int) -> list[tuple[int, bytes, bool]]:
        self.h3.wait_until(lambda: len(parse_frames_prefix(self.h3.data(self.sid))) >= count)
        return parse_frames_prefix(self.h3.data(self.sid))[:count]

    def ended(self) -> bool:
        return self.h3.ended(self.sid)

    def end(self) -> None:
        self.h3.end_stream(self.sid)

    def received(self) -> bytes:
        return self.h3.data(self.sid)

    def wait_until(self, condition) -> bool:
        return self.h3.wait_until(condition)

    def request(self, path: str) -> tuple[dict, bytes]:
        return self.h3.response(self.h3.request(path))

    def denial(self) -> tuple[dict, bytes]:
        return self.h3.response(self.sid)

    def close(self) -> None:
        self.h3.close()


def parse_frames_prefix(data: bytes):
    """The whole frames at the start of `data`."""
    at = 0
    while len(data) - at >= 2:
        n, head = data[at + 1] & 0x7F, 2
        if n == 126:
            if len(data) - at < 4:
                break
            n, head = struct.unpack("!H", data[at + 2 : at + 4])[0], 4
        elif n == 127:
            if len(data) - at < 10:
                break
            n, head = struct.unpack("!Q", data[at + 2 : at + 10])[0], 10
        if len(data) - at < head + n:
            break
        at += head + n
    return parse_frames(data[:at])


def _backend_or_skip(backend: str) -> None:
    if backend == "io_uring":
        from tests.engine.test_io_uring import _io_uring_works

        if not _io_uring_works():
            pytest.skip("this kernel refuses io_uring")


def start_ws_server(carrier: str, certs, *extra: str) -> Server:
    """tests/apps/ws.py over `carrier`: plain HTTP/2, or HTTP/3 on TLS with an I/O backend."""
    if carrier == "h2":
        server = Server("ws:app", *extra)
    else:
        backend = carrier.split("-", 1)[1]
        _backend_or_skip(backend)
        server = Server("ws:app", *certs.server_args(), "--http3", *extra, env={"ZIGCORN_IO_BACKEND": backend})
    server.carrier = carrier
    server.cafile = certs.cafile
    return server.wait_ready(timeout=30)


@pytest.fixture(scope="module", params=CARRIERS)
def server(request, h3_certs):  # noqa: F811 (fixture)
    s = start_ws_server(request.param, h3_certs)
    yield s
    s.stop()


def open_ws(server: Server, path: str, headers=()):
    """The carrier's client, its extended CONNECT sent."""
    kind = WsOverH2 if server.carrier == "h2" else WsOverH3
    return kind(server.port, path, headers=headers, cafile=server.cafile)


def test_echo_over_an_extended_connect(server):
    ws = open_ws(server, "/echo")
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
        ws.end()
        assert ws.ended()
    finally:
        ws.close()


def test_a_websockets_client_speaks_through_the_stream(server):
    """The frame layer of a real client: the `websockets` library's sans-IO ClientProtocol,
    in the OPEN state the 200 leaves it in, with the permessage-deflate the server's answer
    negotiated (its own factory reads the answer)."""
    from websockets.client import ClientProtocol
    from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
    from websockets.frames import Opcode
    from websockets.headers import build_extension, parse_extension
    from websockets.protocol import State
    from websockets.uri import parse_uri

    factory = ClientPerMessageDeflateFactory()
    offer = build_extension([(factory.name, factory.get_request_params())])
    ws = open_ws(server, "/echo", headers=[("sec-websocket-extensions", offer)])
    try:
        headers = ws.response()
        assert headers[":status"] == "200"
        [(name, params)] = parse_extension(headers["sec-websocket-extensions"])
        assert name == "permessage-deflate"
        client = ClientProtocol(parse_uri("wss://localhost/echo"), state=State.OPEN, max_size=None)
        client.extensions = [factory.process_response_params(params, [])]
        fed, frames = 0, []

        def read(count: int) -> bool:
            nonlocal fed
            data = ws.received()
            if len(data) > fed:
                client.receive_data(data[fed:])
                fed = len(data)
                frames.extend(client.events_received())
            return len(frames) >= count

        client.send_text("héllo".encode())
        client.send_binary(bytes(range(256)) * 400)
        client.send_ping(b"hi")
        ws.send(b"".join(client.data_to_send()))
        assert ws.wait_until(lambda: read(3)), frames
        # The engine answers the ping itself; the app echoes the two messages, in order.
        got = {f.opcode: f.data for f in frames}
        assert got == {Opcode.TEXT: "héllo".encode(), Opcode.BINARY: bytes(range(256)) * 400,
                       Opcode.PONG: b"hi"}
        assert [f.opcode for f in frames if f.opcode != Opcode.PONG] == [Opcode.TEXT, Opcode.BINARY]
        # Both came compressed (RSV1), as the extension asks.
        assert [rsv1 for op, _, rsv1 in parse_frames_prefix(ws.received()) if op in (1, 2)] == [True, True]
        # The close handshake: the client's close is echoed, then each side ends the stream.
        client.send_close(1000, "bye")
        out = client.data_to_send()
        ws.send(b"".join(out))
        assert ws.wait_until(lambda: read(4) or client.state is State.CLOSED)
        assert client.close_rcvd is not None and client.close_rcvd.code == 1000
        ws.end()
        assert ws.ended()
    finally:
        ws.close()


def test_messages_held_back_for_a_slow_app_are_all_read(server):
    """More messages than --ws-max-queue (32) while the app reads nothing: the session
    stops parsing, and parses the rest as the app takes its messages, though the client
    sends nothing more."""
    ws = open_ws(server, "/slow-echo")
    try:
        assert ws.response()[":status"] == "200"
        ws.send(b"".join(frame(0x1, f"m{i}".encode()) for i in range(40)))
        assert [p for _, p, _ in ws.frames(40)] == [f"m{i}".encode() for i in range(40)]
    finally:
        ws.close()


def test_the_scope_is_a_websocket_scope(server):
    ws = open_ws(server, "/scope?x=1", headers=[("sec-websocket-protocol", "chat, superchat")])
    try:
        headers = ws.response()
        assert headers[":status"] == "200"
        assert headers["sec-websocket-protocol"] == "superchat" and headers["x-custom"] == "yes"
        scope = json.loads(ws.frames(1)[0][1])
        assert scope["type"] == "websocket" and scope["http_version"] == ws.http_version
        assert scope["scheme"] == ws.scheme and scope["path"] == "/scope" and scope["query_string"] == "x=1"
        assert scope["subprotocols"] == ["chat", "superchat"]
    finally:
        ws.close()


def test_websocket_and_http_streams_share_one_connection(server):
    ws = open_ws(server, "/echo")
    try:
        assert ws.response()[":status"] == "200"
        ws.send(frame(0x1, b"one"))
        _, body = ws.request("/plain")
        assert json.loads(body) == {"type": "http", "path": "/plain"}
        assert ws.frames(1)[0][:2] == (0x1, b"one")
    finally:
        ws.close()


def test_the_app_closing_ends_the_stream(server):
    ws = open_ws(server, "/close-code?4001&bye")
    try:
        assert ws.response()[":status"] == "200"
        assert ws.frames(1)[0][:2] == (0x8, struct.pack("!H", 4001) + b"bye")
        ws.send(frame(0x8, struct.pack("!H", 4001)))
        assert ws.ended()
    finally:
        ws.close()


def test_a_denial_is_an_http_response_on_the_stream(server):
    ws = open_ws(server, "/deny")
    try:
        headers, body = ws.denial()
        assert headers[":status"] == "401" and headers["x-denied"] == "1" and body == b"no entry"
    finally:
        ws.close()


def test_a_protocol_error_fails_the_session_with_1002(server):
    ws = open_ws(server, "/echo")
    try:
        assert ws.response()[":status"] == "200"
        ws.send(b"\x81\x05hello")  # unmasked: clients must mask
        assert ws.frames(1)[0][:2] == (0x8, struct.pack("!H", 1002))
    finally:
        ws.close()


@pytest.mark.parametrize("frames, code", PROTOCOL_ERRORS)
def test_protocol_errors_close_with_their_code(server, frames, code):
    """HTTP/1.1's cases (tests/websocket/test_websocket.py), each carrier: the close frame
    with the failure's code, then the end of our side of the stream."""
    ws = open_ws(server, "/echo")
    try:
        assert ws.response()[":status"] == "200"
        ws.send(b"".join(frame(opcode, payload, fin=fin) for opcode, payload, fin in frames))
        opcode, payload, _ = ws.frames(1)[0]
        assert opcode == 0x8 and struct.unpack("!H", payload[:2])[0] == code
        assert ws.ended()
    finally:
        ws.close()


def test_frames_split_across_data_frames(server):
    """Each byte its own DATA frame, a ping between a message's fragments: the frames are
    read across the stream's DATA frames as across TCP reads."""
    ws = open_ws(server, "/echo")
    try:
        assert ws.response()[":status"] == "200"
        data = frame(0x1, "Hé".encode()[:2], fin=False) + frame(0x9, b"mid")
        data += frame(0x0, "Hé".encode()[2:] + b"llo") + frame(0x2, bytes(range(100)))
        for i in range(len(data)):
            ws.send(data[i : i + 1])
        got = ws.frames(3)
        assert got[0][:2] == (0xA, b"mid")
        assert [f[:2] for f in got[1:]] == [(0x1, "Héllo".encode()), (0x2, bytes(range(100)))]
    finally:
        ws.close()


def test_permessage_deflate(server):
    ws = open_ws(server, "/echo", headers=[("sec-websocket-extensions", "permessage-deflate")])
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
        ws.close()


@pytest.mark.parametrize("carrier", ["h2", "h3-epoll"])
def test_without_ws_the_connect_protocol_is_not_offered(carrier, h3_certs):  # noqa: F811 (fixture)
    s = start_ws_server(carrier, h3_certs, "--ws", "none")
    try:
        if carrier == "h2":
            conn = H2Conn(s.port)
            settings = conn.wait_for(lambda e: isinstance(e, h2.events.RemoteSettingsChanged))
            code = h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL
            assert code not in settings.changed_settings or settings.changed_settings[code].new_value == 0
        else:
            from tests.support.h3ws import SETTINGS_ENABLE_CONNECT_PROTOCOL, H3Raw

            conn = H3Raw(s.port, s.cafile)
            assert conn.settings().get(SETTINGS_ENABLE_CONNECT_PROTOCOL, 0) == 0
        conn.close()
    finally:
        s.stop()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_server_pings_a_stream_and_ends_it_without_pong(carrier, h3_certs):  # noqa: F811 (fixture)
    """--ws-ping-interval and --ws-ping-timeout apply to a stream's WebSocket as to an
    HTTP/1.1 one: its session's own timer pings it, and no pong in time closes it (1011)."""
    s = start_ws_server(carrier, h3_certs, "--ws-ping-interval", "1", "--ws-ping-timeout", "1")
    answering, silent = open_ws(s, "/idle"), open_ws(s, "/idle")
    try:
        assert answering.response()[":status"] == "200" and silent.response()[":status"] == "200"
        # The answering client gets pings and stays open.
        for n in (1, 2):
            opcode, payload, _ = answering.frames(n)[n - 1]
            assert opcode == 0x9
            answering.send(frame(0xA, payload))
        # The silent one is closed with 1011 about ping interval + timeout after its accept.
        assert silent.frames(1)[0][0] == 0x9
        assert silent.frames(2)[1][:2] == (0x8, struct.pack("!H", 1011) + b"keepalive ping timeout")
        assert silent.ended()
        answering.send(frame(0x9, b"still here"))
        assert answering.frames(3)[2][:2] == (0xA, b"still here")
    finally:
        answering.close()
        silent.close()
        s.stop()
