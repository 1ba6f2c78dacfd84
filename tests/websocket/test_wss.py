"""WebSockets over TLS (wss): the engine's TLS under the engine's WebSocket protocol."""

import asyncio
import json

import pytest

from tests.support.harness import zigcorn_only
from tests.support.tools import require_module
from tests.tls.test_tls import Certs, tls_server

websockets = require_module("websockets")
pytestmark = zigcorn_only


@pytest.fixture(scope="module")
def wss(tmp_path_factory):
    certs = Certs(tmp_path_factory.mktemp("wss-certs"))
    server = tls_server("ws:app", *certs.server_args())
    try:
        yield server.wait_ready(), certs
    finally:
        server.kill()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_wss_echo_text_binary_and_a_large_compressed_message(wss):
    server, certs = wss
    ctx = certs.client_context()

    async def main():
        async with websockets.connect(f"wss://localhost:{server.port}/echo", ssl=ctx, max_size=None) as ws:
            await ws.send("héllo over tls")
            assert await ws.recv() == "héllo over tls"
            await ws.send(b"\x00\x01\x02")
            assert await ws.recv() == b"\x00\x01\x02"
            big = "z" * (1 << 20)
            await ws.send(big)
            assert await ws.recv() == big

    run(main())


def test_wss_scope_has_wss_scheme_and_the_tls_extension(wss):
    server, certs = wss
    ctx = certs.client_context()

    async def main():
        async with websockets.connect(f"wss://localhost:{server.port}/scope", ssl=ctx) as ws:
            return json.loads(await ws.recv())

    scope = run(main())
    assert scope["scheme"] == "wss"
    assert "websocket.http.response" in scope["extensions"]
    assert scope["extensions"]["tls"]["tls_version"] in (0x0303, 0x0304)
    assert scope["extensions"]["tls"]["server_name"] == "localhost"


@pytest.fixture(scope="module")
def wss_no_ping(tmp_path_factory):
    """A server whose ping timer never fires during a test: input that waits for an event
    that never comes shows as a timeout, not as a slow pass (the ping's write would
    otherwise wake the connection)."""
    certs = Certs(tmp_path_factory.mktemp("wss-no-ping-certs"))
    server = tls_server("ws:app", *certs.server_args(), "--ws-ping-interval", "3600")
    try:
        yield server.wait_ready(), certs
    finally:
        server.kill()


@pytest.mark.parametrize("size", [1 << 20, 100_000, 16 * 1024 + 1])
def test_wss_uncompressed_messages_over_many_records_echo_without_waiting_for_a_timer(wss_no_ping, size):
    """A message spread over many TLS records, not compressed (random bytes): every record
    is decrypted and read at once, on either backend; a record left inside OpenSSL or held
    by io_uring with no event to come would stall it until a timer (here: never)."""
    import os

    server, certs = wss_no_ping
    ctx = certs.client_context()

    async def main():
        async with websockets.connect(f"wss://localhost:{server.port}/echo", ssl=ctx, max_size=None,
                                      compression=None, ping_interval=None) as ws:
            for _ in range(3):
                data = os.urandom(size)
                await ws.send(data)
                assert await asyncio.wait_for(ws.recv(), 10) == data

    run(main())


def _masked_binary_frame(payload: bytes) -> bytes:
    import os
    import struct

    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        length = bytes([0x80 | n])
    elif n < 65536:
        length = bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        length = bytes([0x80 | 127]) + struct.pack("!Q", n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x82]) + length + mask + masked


def test_wss_a_frame_header_cut_by_a_record_boundary_does_not_hold_back_the_frame(wss_no_ping):
    """Two frames in one write, so that the first TLS record (16 KiB of plaintext) ends 5
    bytes into the second frame's header and the next record holds the rest of that frame:
    the server's read buffer keeps the cut header, so the next record does not fit in what
    is left and its last bytes stay decrypted inside OpenSSL, with nothing more to come from
    the socket. They must be read all the same (on epoll they waited for the client's next
    bytes; here, with no ping timer, forever)."""
    import base64
    import os
    import socket

    server, certs = wss_no_ping
    ctx = certs.client_context()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as sock:
            key = base64.b64encode(os.urandom(16)).decode()
            sock.sendall(f"GET /echo HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = sock.recv(4096)
                assert chunk, "the server closed during the handshake"
                got += chunk
            head, got = got.split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.1 101")
            record = 16 * 1024  # OpenSSL's largest record: one sendall is cut into these
            cut = 5  # bytes of the second frame's 8-byte header in the first record
            first = _masked_binary_frame(os.urandom(record - cut - 8))
            second = _masked_binary_frame(os.urandom(record + 3 - 8))
            assert len(first) == record - cut and len(second) == record + 3
            sock.sendall(first + second)
            # The echoes: unmasked, so each header is 4 bytes.
            want = (len(first) - 8 + 4) + (len(second) - 8 + 4)
            sock.settimeout(10)
            while len(got) < want:
                chunk = sock.recv(65536)
                assert chunk, "the server closed the connection"
                got += chunk
            assert len(got) == want
