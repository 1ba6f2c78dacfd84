"""WebSockets end to end: the `websockets` client library and raw frames against tests/apps/ws.py."""

import asyncio
import json
import os
import struct
import zlib

import httpx
import pytest
import websockets
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.support.harness import Server, zigcorn_only
from tests.support.rawhttp import RawConn
from tests.support.wsraw import (BINARY, CLOSE, PING, PONG, PROTOCOL_ERRORS, TEXT, RawWS, close_payload, compress,
                                 upgrade_request)

pytestmark = pytest.mark.every_python



@pytest.fixture(scope="module")
def ws_server():
    server = Server("ws:app")
    try:
        yield server.wait_ready()
    finally:
        server.kill()


def url(server, path: str) -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


# ---- the websockets client library ------------------------------------------------


def test_text_and_binary_echo(ws_server):
    async def go():
        async with websockets.connect(url(ws_server, "/echo")) as ws:
            for message in ["hello", "ünïcødé ✓ 𝄞", "", b"\x00\x01\xff", b""]:
                await ws.send(message)
                assert await ws.recv() == message

    run(go())


@pytest.mark.parametrize("compression", ["deflate", None])
def test_one_mebibyte_message(ws_server, compression):
    big = os.urandom(1 << 19) * 2
    text = "z" * (1 << 20)

    async def go():
        async with websockets.connect(url(ws_server, "/echo"), compression=compression, max_size=None) as ws:
            await ws.send(big)
            assert await ws.recv() == big
            await ws.send(text)
            assert await ws.recv() == text

    run(go())


def test_deflate_negotiated_when_offered(ws_server):
    async def go():
        async with websockets.connect(url(ws_server, "/echo")) as ws:
            extensions = ws.response.headers["sec-websocket-extensions"]
            assert extensions.startswith("permessage-deflate")
            await ws.send("compress me " * 1000)
            assert await ws.recv() == "compress me " * 1000
        async with websockets.connect(url(ws_server, "/echo"), compression=None) as ws:
            assert "sec-websocket-extensions" not in ws.response.headers
            await ws.send("plain")
            assert await ws.recv() == "plain"

    run(go())


def test_deflate_off_flag(start_server):
    server = start_server("ws:app", "--ws-per-message-deflate", "false")

    async def go():
        async with websockets.connect(url(server, "/echo")) as ws:
            assert "sec-websocket-extensions" not in ws.response.headers
            await ws.send("x" * 10000)
            assert await ws.recv() == "x" * 10000

    run(go())


def test_deflate_context_parameters(ws_server):
    offer = "permessage-deflate; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits"
    ws = RawWS(ws_server.port, extra=f"Sec-WebSocket-Extensions: {offer}\r\n")
    try:
        assert ws.status == 101
        params = {p.strip() for p in ws.headers["sec-websocket-extensions"].split(";")}
        assert {"permessage-deflate", "client_no_context_takeover", "server_max_window_bits=10"} <= params
        # Two compressed messages, each compressed afresh (the server was told so), and
        # one sent uncompressed; one decompressor reads all answers, whatever the server's context use.
        inflater = zlib.decompressobj(wbits=-10)
        for text in ["first " * 50, "second " * 50, "raw"]:
            if text == "raw":
                ws.send_frame(TEXT, text.encode())
            else:
                ws.send_frame(TEXT, compress(text.encode()), rsv1=True)
            fin, opcode, payload = ws.recv_frame()
            assert (fin, opcode) == (True, TEXT)
            assert inflater.decompress(payload + b"\x00\x00\xff\xff").decode() == text
    finally:
        ws.close()


def test_subprotocol_negotiation_and_scope(ws_server):
    async def go():
        async with websockets.connect(url(ws_server, "/scope?a=1"), subprotocols=["chat", "superchat"]) as ws:
            assert ws.subprotocol == "superchat"
            assert ws.response.headers["x-custom"] == "yes"
            scope = json.loads(await ws.recv())
        return scope

    scope = run(go())
    assert scope["type"] == "websocket"
    assert scope["subprotocols"] == ["chat", "superchat"]
    assert scope["scheme"] == "ws"
    assert scope["path"] == "/scope"
    assert scope["query_string"] == "a=1"
    assert scope["asgi"]["version"] == "3.0"
    assert scope["extensions"] == {"websocket.http.response": {}}
    assert scope["client"][0] == "127.0.0.1"
    assert scope["server"] == ["127.0.0.1", ws_server.port]
    assert "method" not in scope
    assert "sec-websocket-key" in scope["header_names"]


def test_server_close_code_and_reason_reach_the_client(ws_server):
    async def go():
        async with websockets.connect(url(ws_server, "/close-code?4001&going-now")) as ws:
            with pytest.raises(ConnectionClosed) as info:
                await ws.recv()
            assert info.value.rcvd.code == 4001
            assert info.value.rcvd.reason == "going-now"

    run(go())


def test_client_close_code_and_reason_reach_the_app(ws_server):
    async def go():
        async with websockets.connect(url(ws_server, "/disconnect-report")) as ws:
            await ws.close(4002, "client leaves")
        async with websockets.connect(url(ws_server, "/events")) as ws:
            return json.loads(await ws.recv())

    events = run(go())
    assert events == [{"type": "websocket.disconnect", "code": 4002, "reason": "client leaves"}]


@zigcorn_only  # uvicorn differs here (see the test)
def test_abrupt_disconnect_is_1006_for_the_app(ws_server):
    ws = RawWS(ws_server.port, "/disconnect-report")
    assert ws.status == 101
    ws.close()

    async def go():
        async with websockets.connect(url(ws_server, "/events")) as client:
            return json.loads(await client.recv())

    assert run(go()) == [{"type": "websocket.disconnect", "code": 1006, "reason": ""}]


def test_send_after_the_client_left_raises_an_oserror_that_is_not_logged(start_server):
    """An app that sends after the client's close gets an OSError from send(); letting it
    propagate is not an error of the app's (uvicorn does not log it either)."""
    server = start_server("ws:app")
    ws = RawWS(server.port, "/send-after-disconnect")
    assert ws.status == 101
    ws.send_frame(CLOSE, close_payload(1000))
    assert ws.recv_close()[0] == 1000
    ws.close()

    async def go():
        async with websockets.connect(url(server, "/events")) as client:
            return json.loads(await client.recv())

    raised = run(go())
    assert raised and raised[0]["oserror"] is True, raised
    server.stop()
    assert "Exception in ASGI application" not in server.output(), server.output()
    assert "Traceback" not in server.output(), server.output()


def test_close_before_accept_is_403(ws_server):
    async def go():
        with pytest.raises(InvalidStatus) as info:
            async with websockets.connect(url(ws_server, "/reject")):
                pass
        assert info.value.response.status_code == 403

    run(go())
    ws = RawWS(ws_server.port, "/reject")
    assert ws.status == 403
    assert ws.closed_by_peer()


def test_denial_response(ws_server):
    ws = RawWS(ws_server.port, "/deny")
    try:
        assert ws.status == 401
        assert ws.headers["x-denied"] == "1"
        assert ws.headers["connection"] == "close"
        assert ws.read_body() == b"no entry"
        assert ws.closed_by_peer()
    finally:
        ws.close()


@zigcorn_only  # uvicorn differs here (see the test)
def test_app_error_before_accept_is_500_after_accept_1011(ws_server):
    ws = RawWS(ws_server.port, "/raise-early")
    assert ws.status == 500
    ws.close()
    ws = RawWS(ws_server.port, "/raise")
    assert ws.status == 101
    assert ws.recv_close()[0] == 1011
    ws.close()


@zigcorn_only  # uvicorn differs here (see the test)
def test_app_returning_closes_with_1000(ws_server):
    ws = RawWS(ws_server.port, "/return")
    assert ws.recv_frame() == (True, TEXT, b"bye")
    assert ws.recv_close()[0] == 1000
    ws.send_frame(CLOSE, close_payload(1000))
    assert ws.closed_by_peer()
    ws.close()


def test_plain_http_on_websocket_app_is_untouched(ws_server):
    r = httpx.get(ws_server.url + "/anything")
    assert r.json() == {"type": "http", "path": "/anything"}


# ---- raw frames --------------------------------------------------------------------


def test_fragmented_message_with_ping_in_the_middle(ws_server):
    ws = RawWS(ws_server.port)
    try:
        ws.send_frame(TEXT, "Hé".encode()[:2], fin=False)  # splits the é across frames
        ws.send_frame(PING, b"mid")
        ws.send_frame(0, "Hé".encode()[2:], fin=False)
        ws.send_frame(0, b"llo", fin=True)
        assert ws.recv_frame() == (True, PONG, b"mid")
        assert ws.recv_frame() == (True, TEXT, "Héllo".encode())
        ws.send_frame(CLOSE, close_payload(1000, "done"))
        assert ws.recv_close()[0] == 1000
        assert ws.closed_by_peer()
    finally:
        ws.close()


def test_ping_is_answered_with_its_payload(ws_server):
    ws = RawWS(ws_server.port)
    try:
        ws.send_frame(PING, b"x" * 125)
        assert ws.recv_frame() == (True, PONG, b"x" * 125)
        ws.send_frame(PONG, b"unsolicited")  # ignored
        ws.send_frame(BINARY, b"after")
        assert ws.recv_frame() == (True, BINARY, b"after")
    finally:
        ws.close()


@pytest.mark.parametrize("frames, code", PROTOCOL_ERRORS)
def test_protocol_errors_close_with_their_code(ws_server, frames, code):
    ws = RawWS(ws_server.port)
    try:
        for opcode, payload, fin in frames:
            ws.send_frame(opcode, payload, fin=fin)
        assert ws.recv_close()[0] == code
        assert ws.closed_by_peer()
    finally:
        ws.close()


def test_unmasked_frame_is_1002(ws_server):
    ws = RawWS(ws_server.port)
    try:
        ws.send_frame(TEXT, b"hello", mask=False)
        assert ws.recv_close()[0] == 1002
        assert ws.closed_by_peer()
    finally:
        ws.close()


def test_reserved_bits_are_1002(ws_server):
    ws = RawWS(ws_server.port, extra="Sec-WebSocket-Extensions: permessage-deflate\r\n")
    try:
        ws.send(bytes([0xA1, 0x80, 0, 0, 0, 0]))  # RSV2
        assert ws.recv_close()[0] == 1002
    finally:
        ws.close()
    ws = RawWS(ws_server.port)  # no extension: RSV1 is reserved too
    try:
        ws.send_frame(TEXT, b"x", rsv1=True)
        assert ws.recv_close()[0] == 1002
    finally:
        ws.close()


def test_frames_split_byte_by_byte(ws_server):
    from tests.support.wsraw import frame

    ws = RawWS(ws_server.port)
    try:
        data = frame(BINARY, bytes(range(200))) + frame(TEXT, "ok".encode())
        for i in range(len(data)):
            ws.send(data[i:i + 1])
        assert ws.recv_frame() == (True, BINARY, bytes(range(200)))
        assert ws.recv_frame() == (True, TEXT, b"ok")
    finally:
        ws.close()


def test_close_without_code_is_echoed_empty_and_app_sees_1005(ws_server):
    ws = RawWS(ws_server.port, "/disconnect-report")
    ws.send_frame(CLOSE, b"")
    assert ws.recv_close()[0] == None
    ws.close()

    async def go():
        async with websockets.connect(url(ws_server, "/events")) as client:
            return json.loads(await client.recv())

    assert run(go()) == [{"type": "websocket.disconnect", "code": 1005, "reason": ""}]


# ---- handshakes --------------------------------------------------------------------


@pytest.mark.parametrize("request_bytes, status", [
    pytest.param(upgrade_request(key=""), 400, id="missing-key"),
    pytest.param(upgrade_request(key="short"), 400, id="key-not-16-bytes"),
    pytest.param(upgrade_request(key="!!!!!!!!!!!!!!!!!!!!!!=="), 400, id="key-not-base64"),
    # RFC 6455 4.2.2 asks for 426 here; uvicorn (the websockets library) answers 400.
    pytest.param(upgrade_request(version="8"), 426, id="version-8", marks=zigcorn_only),
    pytest.param(upgrade_request(version=""), 426, id="version-missing", marks=zigcorn_only),
    pytest.param(upgrade_request().replace(b"GET", b"POST", 1), 400, id="post", marks=zigcorn_only),
    pytest.param(upgrade_request().replace(b"HTTP/1.1", b"HTTP/1.0", 1), 400, id="http10", marks=zigcorn_only),
])
def test_bad_handshakes(ws_server, request_bytes, status):
    with RawConn(ws_server.port) as conn:
        conn.send(request_bytes)
        r = conn.read_response()
        assert r.status == status
        if status == 426:
            assert r.header("sec-websocket-version") == "13"
        assert conn.is_closed()


def test_accept_key(ws_server):
    ws = RawWS(ws_server.port, key="dGhlIHNhbXBsZSBub25jZQ==")
    assert ws.status == 101
    assert ws.headers["sec-websocket-accept"] == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    assert ws.headers["upgrade"].lower() == "websocket"
    ws.close()


def test_ws_none_serves_upgrades_as_http(start_server):
    server = start_server("ws:app", "--ws", "none")
    ws = RawWS(server.port, "/echo")
    try:
        assert ws.status == 200
        assert json.loads(ws.read_body()) == {"type": "http", "path": "/echo"}
    finally:
        ws.close()
