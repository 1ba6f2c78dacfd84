"""Request and response bodies: chunked uploads, 100-continue, 10 MB both ways with bounded memory."""

import hashlib
import time

import httpx
import pytest

from tests.support.rawhttp import RawConn

pytestmark = pytest.mark.every_python

MB = 1024 * 1024


def test_chunked_upload_with_extension_and_trailer(basic):
    pieces = [
        b"POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"5;name=value\r\nhello\r\n",
        b"6\r\n wor",
        b"ld\r\n",
        b"A\r\n, chunked!\r\n",
        b"0\r\nX-Trailer: yes\r\n\r\n",
    ]
    with RawConn(basic.port) as conn:
        for piece in pieces:
            conn.send(piece)
            time.sleep(0.05)
        r = conn.read_response()
    assert r.status == 200
    assert r.body == b"hello world, chunked!"


def test_content_length_upload_in_pieces(basic):
    with RawConn(basic.port) as conn:
        conn.send(b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\r\n01234")
        time.sleep(0.1)
        conn.send(b"56789" + b"GET /after HTTP/1.1\r\nHost: test\r\n\r\n")
        assert conn.read_response().body == b"0123456789"
        assert conn.read_response().body == b"/after"


def test_expect_100_continue(basic):
    with RawConn(basic.port) as conn:
        conn.send(b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        interim = conn.read_until(b"\r\n\r\n")
        assert interim.startswith(b"HTTP/1.1 100 ")
        conn.send(b"hello")
        r = conn.read_response()
    assert r.status == 200
    assert r.body == b"hello"


def test_10mb_streamed_upload_with_bounded_memory(basic):
    httpx.get(basic.url + "/warmup")
    baseline = basic.rss_kb()
    peak = baseline
    digest = hashlib.sha256()

    def body():
        nonlocal peak
        for i in range(10):
            chunk = bytes([i]) * MB
            digest.update(chunk)
            yield chunk
            peak = max(peak, basic.rss_kb())

    r = httpx.post(basic.url + "/upload", content=body(), timeout=30)
    assert r.status_code == 200
    assert r.text == f"{10 * MB} {digest.hexdigest()}"
    assert peak - baseline < 60 * 1024, f"server RSS grew by {(peak - baseline) // 1024} MB during upload"


def test_10mb_streamed_download_with_bounded_memory(basic):
    httpx.get(basic.url + "/warmup")
    baseline = basic.rss_kb()
    peak = baseline
    size, digest = 0, hashlib.sha256()
    with httpx.stream("GET", basic.url + "/download?mb=10", timeout=30) as r:
        assert r.status_code == 200
        for chunk in r.iter_bytes(MB // 4):
            size += len(chunk)
            digest.update(chunk)
            peak = max(peak, basic.rss_kb())
    expected = hashlib.sha256(b"".join(bytes([i]) * MB for i in range(10))).hexdigest()
    assert (size, digest.hexdigest()) == (10 * MB, expected)
    assert peak - baseline < 60 * 1024, f"server RSS grew by {(peak - baseline) // 1024} MB during download"
