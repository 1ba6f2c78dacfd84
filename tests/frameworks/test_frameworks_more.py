"""More frameworks, tried as a user would: Django (ASGI, and WSGI), Flask (WSGI), Litestar 2, Quart, and
server-sent events read as they arrive."""

import asyncio
import hashlib
import os

import httpx
import pytest
import websockets

from tests.support.harness import Server
from tests.support.tools import require_module

pytestmark = pytest.mark.every_python


def serve(app: str, **env):
    server = Server(app, env=env or None)
    return server.wait_ready()


@pytest.fixture(scope="module")
def django_server(tmp_path_factory):
    require_module("django")
    files = tmp_path_factory.mktemp("djfiles")
    (files / "data.bin").write_bytes(os.urandom(200_000))
    server = serve("django_app:app", ZIGCORN_TEST_FILES=str(files))
    yield server, files
    server.kill()


def test_django_async_views_bodies_streaming_and_files(django_server):
    server, files = django_server
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert client.get("/hello", params={"q": "zig"}).json() == {"framework": "django", "method": "GET", "q": "zig"}
        body = os.urandom(300_000)
        assert client.post("/echo", content=body).content == body
        r = client.get("/stream")
        assert r.text == "".join(f"chunk{i};" for i in range(5)) and "content-length" not in r.headers
        assert client.get("/sync").text == "sync ok"
        r = client.get("/files/data.bin")
        assert r.content == (files / "data.bin").read_bytes()
    # Over HTTP/2 too.
    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=10) as client:
        r = client.get("/files/data.bin")
        assert r.http_version == "HTTP/2" and r.content == (files / "data.bin").read_bytes()


@pytest.fixture(scope="module")
def litestar_server():
    require_module("litestar")
    server = serve("litestar_app:app")
    yield server
    server.kill()


def test_litestar_http_and_websocket(litestar_server):
    url = litestar_server.url
    assert httpx.get(url + "/hello", params={"q": "x"}).json() == {"framework": "litestar", "q": "x"}
    assert httpx.post(url + "/echo", content=b"abc").content == b"abc"
    assert httpx.get(url + "/stream").text == "".join(f"chunk{i};" for i in range(5))

    async def ws():
        async with websockets.connect(url.replace("http", "ws") + "/ws") as conn:
            await conn.send("hi")
            return await conn.recv()

    assert asyncio.run(ws()) == "echo: hi"


@pytest.fixture(scope="module")
def quart_server():
    require_module("quart")
    server = serve("quart_app:app")
    yield server
    server.kill()


def test_quart_http_and_websocket(quart_server):
    url = quart_server.url
    assert httpx.get(url + "/hello", params={"q": "y"}).json() == {"framework": "quart", "q": "y"}
    assert httpx.post(url + "/echo", content=b"xyz").content == b"xyz"
    assert httpx.get(url + "/stream").text == "".join(f"chunk{i};" for i in range(5))

    async def ws():
        async with websockets.connect(url.replace("http", "ws") + "/ws") as conn:
            await conn.send("one")
            first = await conn.recv()
            await conn.send("two")
            return first, await conn.recv()

    assert asyncio.run(ws()) == ("echo: one", "echo: two")


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2"])
def test_sse_events_arrive_one_by_one_as_they_are_sent(http2):
    server = serve("sse_app:app")
    try:
        with httpx.Client(base_url=server.url, http1=not http2, http2=http2, timeout=15) as client:
            seen = []
            with client.stream("GET", "/events") as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        seen.append(line[6:])
                        assert line != "data: no ack", seen
                        # Only now does the app produce the next event.
                        with httpx.Client(base_url=server.url, timeout=5) as other:
                            other.get("/ack", params={"n": len(seen) - 1})
        assert seen == ["event 0", "event 1", "event 2"]
    finally:
        server.kill()


@pytest.fixture(scope="module")
def wsgi_files(tmp_path_factory):
    files = tmp_path_factory.mktemp("wsgifiles")
    (files / "data.bin").write_bytes(os.urandom(200_000))
    return files


@pytest.mark.parametrize("framework", ["flask", "django"])
def test_wsgi_frameworks_sync_views_uploads_streaming_and_files(framework, wsgi_files):
    require_module(framework)
    server = Server(f"{framework}_wsgi:app", "--interface", "wsgi", "--root-path", "/mnt",
                    env={"ZIGCORN_TEST_FILES": str(wsgi_files)})  # fmt: skip
    try:
        server.wait_ready()
        with httpx.Client(base_url=server.url, timeout=30) as client:
            r = client.get("/hello", params={"q": "zig"})
            assert r.status_code == 200, server.output()
            assert r.json()["framework"] == framework and r.json()["q"] == "zig"
            if framework == "django":
                assert r.json()["script_name"] == "/mnt" and r.json()["path"] == "/mnt/hello"
            upload = os.urandom(3 << 20)  # past Django's in-memory limit: it spools to a temporary file
            r = client.post("/upload", files={"file": ("up.bin", upload)}, data={"note": "hi"})
            assert r.json() == {"name": "up.bin", "size": len(upload), "sha256": hashlib.sha256(upload).hexdigest(),
                                "field": "hi"}, server.output()  # fmt: skip
            assert client.get("/stream").text == "".join(f"chunk{i};" for i in range(5))
            r = client.get("/file")
            assert r.content == (wsgi_files / "data.bin").read_bytes()
        assert "Traceback" not in server.output()
    finally:
        server.kill()
