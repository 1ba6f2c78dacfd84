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
