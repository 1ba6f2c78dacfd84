"""Real frameworks end to end: FastAPI and Starlette."""

import asyncio
import json

import httpx
import pytest
import websockets
from websockets.exceptions import InvalidStatus

from tests.support.harness import Server

pytestmark = pytest.mark.every_python


@pytest.fixture(scope="module")
def fastapi_server():
    server = Server("fastapi_app:app")
    try:
        yield server.wait_ready()
    finally:
        server.kill()


@pytest.fixture(scope="module")
def starlette_server():
    server = Server("starlette_app:app")
    try:
        yield server.wait_ready()
    finally:
        server.kill()


def test_fastapi_path_and_query_params(fastapi_server):
    r = httpx.get(fastapi_server.url + "/items/42", params={"q": "zig corn"})
    assert r.status_code == 200
    assert r.json() == {"item_id": 42, "q": "zig corn"}
    assert httpx.get(fastapi_server.url + "/items/7").json() == {"item_id": 7, "q": None}


def test_fastapi_json_body(fastapi_server):
    r = httpx.post(fastapi_server.url + "/items", json={"name": "corn", "price": 1.5, "tags": ["a", "b"]})
    assert r.status_code == 201
    assert r.json() == {"name": "corn", "price": 1.5, "tags": ["a", "b"], "double": 3.0}


def test_fastapi_sync_route(fastapi_server):
    assert httpx.get(fastapi_server.url + "/sync").json() == {"sync": True}


def test_fastapi_errors(fastapi_server):
    assert httpx.get(fastapi_server.url + "/nope").status_code == 404
    assert httpx.get(fastapi_server.url + "/items/not-a-number").status_code == 422
    r = httpx.post(fastapi_server.url + "/items", json={"name": "corn"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "price"]
    assert httpx.post(fastapi_server.url + "/items", content=b"{not json",
                      headers={"content-type": "application/json"}).status_code == 422


def test_starlette_routes(starlette_server):
    with httpx.Client(base_url=starlette_server.url) as client:
        home = client.get("/")
        assert (home.status_code, home.text) == (200, "starlette home")
        assert home.headers["content-type"].startswith("text/plain")
        assert client.get("/users/ada", params={"q": "x"}).json() == {"user": "ada", "q": "x"}
        assert client.get("/missing").status_code == 404
        assert client.get("/echo").status_code == 405


def test_starlette_request_body(starlette_server):
    body = "abcdefghij" * 10_000  # 100 kB, more than one read
    r = httpx.post(starlette_server.url + "/echo", content=body.encode())
    assert r.json() == {"length": 100_000, "reversed": body[::-1]}


def test_starlette_streaming_response(starlette_server):
    with httpx.stream("GET", starlette_server.url + "/stream") as r:
        assert r.headers.get("transfer-encoding") == "chunked"
        assert r.read() == b"0\n1\n2\n3\n4\n"


# ---- WebSocket endpoints ---------------------------------------------------------------


def ws_url(server, path: str) -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


def test_starlette_websocket_endpoint(starlette_server):
    async def go():
        async with websockets.connect(ws_url(starlette_server, "/ws"), subprotocols=["upper"]) as ws:
            assert ws.subprotocol == "upper"
            for text in ["hello", "straße", "x" * 100_000]:
                await ws.send(text)
                assert await ws.recv() == text.upper()
            await ws.close(4321)
        await asyncio.sleep(0.1)
        async with websockets.connect(ws_url(starlette_server, "/ws/disconnects")) as ws:
            return json.loads(await ws.recv())

    assert 4321 in asyncio.run(asyncio.wait_for(go(), 20))


def test_starlette_websocket_denial_response(starlette_server):
    async def go():
        with pytest.raises(InvalidStatus) as info:
            async with websockets.connect(ws_url(starlette_server, "/ws/denied")):
                pass
        response = info.value.response
        assert response.status_code == 401
        assert response.body == b"members only"

    asyncio.run(asyncio.wait_for(go(), 20))


def test_fastapi_websocket_endpoint(fastapi_server):
    async def go():
        async with websockets.connect(ws_url(fastapi_server, "/ws/lobby?token=abc")) as ws:
            assert json.loads(await ws.recv()) == {"room": "lobby", "token": "abc"}
            await ws.send(b"\x01\x02\x03")
            assert await ws.recv() == b"\x03\x02\x01"
        with pytest.raises(InvalidStatus) as info:
            async with websockets.connect(ws_url(fastapi_server, "/ws/lobby?token=bad")):
                pass
        assert info.value.response.status_code == 403

    asyncio.run(asyncio.wait_for(go(), 20))
