"""Real frameworks end to end: FastAPI and Starlette."""

import httpx
import pytest

from tests.harness import Server


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
