"""WebSockets over TLS (wss): the engine's TLS under the engine's WebSocket protocol."""

import asyncio
import json

import pytest

from tests.harness import zigcorn_only
from tests.test_tls import Certs, tls_server

websockets = pytest.importorskip("websockets")
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
