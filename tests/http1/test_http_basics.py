"""Hello world, default headers, keep-alive, pipelining, HEAD, empty statuses, HTTP/1.0, framing."""

import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.harness import SERVER
from tests.support.rawhttp import RawConn, get, request

pytestmark = pytest.mark.every_python

IMF_FIXDATE = re.compile(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
                         r"\d{4} \d\d:\d\d:\d\d GMT$")


def test_hello_world(start_server):
    server = start_server("hello:app")
    r = httpx.get(server.url + "/")
    assert r.status_code == 200
    assert r.text == "Hello, world!"
    assert r.headers["content-type"] == "text/plain"
    assert r.headers["content-length"] == "13"
    assert r.headers["server"] == SERVER
    assert IMF_FIXDATE.match(r.headers["date"])


def test_default_headers_can_be_disabled_or_extended(start_server):
    server = start_server("hello:app", "--no-server-header", "--no-date-header",
                          "--header", "x-extra:1", "--header", "X-Other:two words")
    r = httpx.get(server.url + "/")
    assert r.status_code == 200
    assert "server" not in r.headers
    assert "date" not in r.headers
    assert r.headers["x-extra"] == "1"
    assert r.headers["x-other"] == "two words"


def test_keep_alive_serves_two_requests_on_one_connection(basic):
    with RawConn(basic.port) as conn:
        conn.send(get("/first"))
        first = conn.read_response()
        conn.send(get("/second"))
        second = conn.read_response()
    assert (first.status, first.body) == (200, b"/first")
    assert (second.status, second.body) == (200, b"/second")
    assert first.header("connection") != "close"


def test_httpx_client_reuses_connection(basic):
    opened = []
    with httpx.Client(base_url=basic.url) as client:
        for i in range(5):
            r = client.get(f"/n{i}", extensions={"trace": lambda name, info: opened.append(name)})
            assert r.text == f"/n{i}"
    assert opened.count("connection.connect_tcp.complete") == 1


def test_concurrent_requests_are_served_concurrently(basic):
    # Each request waits in the app until all ten are in flight at once (or gives 504 after 5 s).
    with httpx.Client(base_url=basic.url, timeout=10) as client, ThreadPoolExecutor(10) as pool:
        responses = list(pool.map(lambda _: client.get("/barrier", params={"key": "ten", "n": 10}), range(10)))
    assert [(r.status_code, r.text) for r in responses] == [(200, "met")] * 10


def test_pipelined_requests_answered_in_order(basic):
    with RawConn(basic.port) as conn:
        conn.send(get("/a") + get("/stream") + get("/c"))
        bodies = [conn.read_response().body for _ in range(3)]
    assert bodies == [b"/a", b"one,two,three", b"/c"]


def test_head_has_content_length_but_no_body(basic):
    with RawConn(basic.port) as conn:
        conn.send(b"HEAD /length HTTP/1.1\r\nHost: test\r\n\r\n" + get("/after-head"))
        head = conn.read_response("HEAD")
        after = conn.read_response()  # would fail to parse if the HEAD response had a body
    assert head.status == 200
    assert head.header("content-length") == "11"
    assert head.body == b""
    assert after.body == b"/after-head"


def test_head_of_streamed_response_has_no_body(basic):
    with RawConn(basic.port) as conn:
        conn.send(b"HEAD /stream HTTP/1.1\r\nHost: test\r\n\r\n" + get("/after-head"))
        assert conn.read_response("HEAD").body == b""
        assert conn.read_response().body == b"/after-head"


def test_204_and_304_have_no_body(basic):
    for status in (204, 304):
        with RawConn(basic.port) as conn:
            conn.send(get(f"/status/{status}") + get("/next"))
            empty = conn.read_response()
            after = conn.read_response()  # would fail to parse if a body or chunk terminator was sent
        assert empty.status == status
        assert empty.body == b""
        assert empty.header("transfer-encoding") is None
        assert empty.header("content-length") in (None, "0")
        assert after.body == b"/next"


def test_http_1_0_request_gets_response_and_close(basic):
    with RawConn(basic.port) as conn:
        conn.send(get("/old", version="1.0"))
        raw = conn.read_until_close()  # the server must close: no keep-alive requested
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert body == b"/old"
    with RawConn(basic.port) as conn:
        conn.send(get("/old", version="1.0"))
        r = conn.read_response()
        assert r.http_version == "1.1"
        assert conn.is_closed()


def test_http_1_0_streamed_response_is_close_delimited(basic):
    with RawConn(basic.port) as conn:
        conn.send(get("/stream", version="1.0"))
        raw = conn.read_until_close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"transfer-encoding" not in head.lower()
    assert body == b"one,two,three"


def test_streamed_response_is_chunked_for_http_1_1(basic):
    with RawConn(basic.port) as conn:
        conn.send(get("/stream"))
        raw_head = conn.read_until(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in raw_head.lower()
        assert b"content-length" not in raw_head.lower()
        assert dechunk(conn.read_until(b"\r\n0\r\n\r\n")) == b"one,two,three"
    assert httpx.get(basic.url + "/stream").text == "one,two,three"


def dechunk(data: bytes) -> bytes:
    body = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return body
        body, data = body + data[:size], data[size + 2:]


def test_app_content_length_is_honoured(basic):
    r = request(basic.port, get("/length"))
    assert r.header("content-length") == "11"
    assert r.header("transfer-encoding") is None
    assert r.body == b"hello world"


def test_connection_close_request_closes_after_response(basic):
    with RawConn(basic.port) as conn:
        conn.send(get("/bye", headers="Connection: close\r\n"))
        r = conn.read_response()
        assert r.body == b"/bye"
        assert conn.is_closed()


def test_many_pipelined_requests_in_one_send(basic):
    paths = [f"/p{i}" for i in range(400)]  # ~20 kB of requests, more than one read buffer
    with RawConn(basic.port) as conn:
        conn.send(b"".join(get(p) for p in paths))
        assert [conn.read_response().body.decode() for _ in paths] == paths


def test_request_sent_byte_by_byte(basic):
    data = get("/slowly", headers="X-Long: " + "v" * 100 + "\r\n")
    with RawConn(basic.port) as conn:
        for i in range(len(data)):
            conn.send(data[i:i + 1])
            time.sleep(0.001)
        assert conn.read_response().body == b"/slowly"


def test_unread_request_body_is_skipped_before_next_request(basic):
    body = b"z" * 100_000  # the app at /ignored never calls receive()
    with RawConn(basic.port) as conn:
        conn.send(b"POST /ignored HTTP/1.1\r\nHost: test\r\nContent-Length: 100000\r\n\r\n" + body + get("/next"))
        assert conn.read_response().body == b"/ignored"
        assert conn.read_response().body == b"/next"


def test_large_single_body_message(basic):
    r = request(basic.port, get("/blob?mb=5"))
    assert r.header("content-length") == str(5 * 1024 * 1024)
    assert r.body == b"b" * (5 * 1024 * 1024)


def test_large_response_header(basic):
    r = request(basic.port, get("/big-header?kb=20"))
    assert r.header("x-big") == "h" * 20 * 1024
    assert r.body == b"ok"


def test_idle_keep_alive_connection_is_closed_after_timeout(start_server):
    server = start_server("hello:app", "--timeout-keep-alive", "1")
    with RawConn(server.port) as conn:
        conn.send(get("/"))
        conn.read_response()
        started = time.monotonic()
        assert conn.is_closed()  # blocks until the server closes (socket timeout 10 s)
    assert time.monotonic() - started < 5
