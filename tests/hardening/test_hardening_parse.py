"""Strict request parsing: every hostile request gets exactly one status, then the connection closes.

Each case is sent on a fresh connection; the test reads one response and asserts that nothing
follows it but EOF (no second response, no keep-alive).
"""

import json

import pytest

from tests.support.harness import Server, zigcorn_only
from tests.support.rawhttp import RawConn, get, request

pytestmark = zigcorn_only

H = b"Host: test\r\n"


@pytest.fixture(scope="module")
def echo():
    """One server for the module: tests/apps/echo_all.py reads the body and echoes the request."""
    server = Server("echo_all:app")
    try:
        yield server.wait_ready()
    finally:
        server.kill()


def refused(port: int, data: bytes, status: int) -> None:
    """Send ``data`` in one write; exactly one response with ``status`` arrives, then EOF."""
    with RawConn(port, timeout=5) as conn:
        conn.send(data)
        r = conn.read_response()
        assert r.status == status, f"{data!r} answered {r.status} {r.body!r}, expected {status}"
        leftover, _ = conn.h11.trailing_data
        assert leftover == b"", f"{data!r}: bytes after the {status} response: {leftover!r}"
        assert conn.is_closed(), f"{data!r}: connection left open after {status}"


def post(headers: bytes, body: bytes = b"", version: bytes = b"1.1", host: bytes = H) -> bytes:
    return b"POST / HTTP/" + version + b"\r\n" + host + headers + b"\r\n" + body


CHUNKED = b"Transfer-Encoding: chunked\r\n"

BAD_400 = {
    # framing (RFC 9112 6.3)
    "cl-and-te": post(b"Content-Length: 5\r\n" + CHUNKED, b"0\r\n\r\n"),
    "te-and-cl": post(CHUNKED + b"Content-Length: 5\r\n", b"0\r\n\r\n"),
    "two-different-cl": post(b"Content-Length: 5\r\nContent-Length: 6\r\n", b"hello"),
    "cl-list-different": post(b"Content-Length: 5, 6\r\n", b"hello"),
    "cl-negative": post(b"Content-Length: -5\r\n", b"hello"),
    "cl-plus": post(b"Content-Length: +5\r\n", b"hello"),
    "cl-space-inside": post(b"Content-Length: 5 5\r\n", b"hello"),
    "cl-hex": post(b"Content-Length: 0x5\r\n", b"hello"),
    "cl-empty": post(b"Content-Length: \r\n", b"hello"),
    "cl-25-digits": post(b"Content-Length: " + b"9" * 25 + b"\r\n", b"hello"),
    "cl-overflow-u64": post(b"Content-Length: 18446744073709551621\r\n", b"hello"),
    "te-chunked-twice": post(CHUNKED + CHUNKED, b"0\r\n\r\n"),
    "te-chunked-vtab": post(b"Transfer-Encoding: chunked\x0b\r\n", b"0\r\n\r\n"),
    "te-http10": post(CHUNKED, b"0\r\n\r\n", version=b"1.0", host=b""),
    # header syntax
    "space-before-colon-te": post(b"Transfer-Encoding : chunked\r\n", b"0\r\n\r\n"),
    "space-before-colon-host": b"GET / HTTP/1.1\r\nHost : test\r\n\r\n",
    "tab-before-colon": b"GET / HTTP/1.1\r\nHost: test\r\nX-A\t: 1\r\n\r\n",
    "obs-fold-sp": b"GET / HTTP/1.1\r\nHost: test\r\nX-A: 1\r\n continued\r\n\r\n",
    "obs-fold-htab": b"GET / HTTP/1.1\r\nHost: test\r\nX-A: 1\r\n\tcontinued\r\n\r\n",
    "bare-lf-everywhere": b"GET / HTTP/1.1\nHost: x\n\n",
    "bare-lf-request-line": b"GET / HTTP/1.1\nHost: test\r\n\r\n",
    "bare-lf-header-line": b"GET / HTTP/1.1\r\nHost: test\nX-A: 1\r\n\r\n",
    "bare-lf-head-end": b"GET / HTTP/1.1\r\nHost: test\r\n\n",
    "bare-cr-in-value": b"GET / HTTP/1.1\r\nHost: test\r\nX-A: a\rb\r\n\r\n",
    "bare-cr-line-end": b"GET / HTTP/1.1\r\nHost: test\rX-A: 1\r\n\r\n",
    "method-bad-token": b"G@T / HTTP/1.1\r\nHost: test\r\n\r\n",
    "header-name-paren": b"GET / HTTP/1.1\r\nHost: test\r\nX(Y): 1\r\n\r\n",
    "header-name-space": b"GET / HTTP/1.1\r\nHost: test\r\nX Y: 1\r\n\r\n",
    "header-name-empty": b"GET / HTTP/1.1\r\nHost: test\r\n: 1\r\n\r\n",
    "value-nul": b"GET / HTTP/1.1\r\nHost: test\r\nX-A: a\x00b\r\n\r\n",
    "value-ctrl-01": b"GET / HTTP/1.1\r\nHost: test\r\nX-A: a\x01b\r\n\r\n",
    "value-del": b"GET / HTTP/1.1\r\nHost: test\r\nX-A: a\x7fb\r\n\r\n",
    "missing-host": b"GET / HTTP/1.1\r\n\r\n",
    "two-hosts": b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    # chunked bodies (the app reads the body, so the decoder meets the bad bytes)
    "chunk-size-non-hex": post(CHUNKED, b"zz\r\nhello\r\n0\r\n\r\n"),
    "chunk-size-17-digits": post(CHUNKED, b"00000000000000005\r\nhello\r\n0\r\n\r\n"),
    "chunk-size-overflow": post(CHUNKED, b"10000000000000000\r\nhello\r\n0\r\n\r\n"),
    "chunk-size-20-digits": post(CHUNKED, b"FFFFFFFFFFFFFFFFFFFF\r\nhello\r\n0\r\n\r\n"),
    "chunk-data-no-crlf": post(CHUNKED, b"5\r\nhelloXX0\r\n\r\n"),
    "chunk-data-too-long": post(CHUNKED, b"3\r\nhello\r\n0\r\n\r\n"),
    "chunk-ext-over-4096": post(CHUNKED, b"5;name=" + b"v" * 5000 + b"\r\nhello\r\n0\r\n\r\n"),
    # request target and version
    "target-with-space": b"GET /a b HTTP/1.1\r\nHost: test\r\n\r\n",
    "target-with-ctrl": b"GET /a\x01b HTTP/1.1\r\nHost: test\r\n\r\n",
    "target-with-del": b"GET /a\x7fb HTTP/1.1\r\nHost: test\r\n\r\n",
    "absolute-form-userinfo": b"GET http://u@h/ HTTP/1.1\r\nHost: h\r\n\r\n",
    "version-http-1": b"GET / HTTP/1\r\nHost: test\r\n\r\n",
    "version-lowercase": b"GET / http/1.1\r\nHost: test\r\n\r\n",
}

NOT_IMPLEMENTED_501 = {
    "te-gzip": post(b"Transfer-Encoding: gzip\r\n", b"hello"),
    "te-chunked-identity": post(b"Transfer-Encoding: chunked, identity\r\n", b"0\r\n\r\n"),
    "te-identity": post(b"Transfer-Encoding: identity\r\n", b"hello"),
    "te-gzip-chunked": post(b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"),
}

VERSION_505 = {
    "http-2.0": b"GET / HTTP/2.0\r\nHost: test\r\n\r\n",
    "http-1.2": b"GET / HTTP/1.2\r\nHost: test\r\n\r\n",
    "http-3.0": b"GET / HTTP/3.0\r\nHost: test\r\n\r\n",
}


@pytest.mark.parametrize("data", BAD_400.values(), ids=BAD_400.keys())
def test_bad_request_gets_400_and_close(echo, data):
    refused(echo.port, data, 400)


@pytest.mark.parametrize("data", NOT_IMPLEMENTED_501.values(), ids=NOT_IMPLEMENTED_501.keys())
def test_unsupported_transfer_coding_gets_501_and_close(echo, data):
    refused(echo.port, data, 501)


@pytest.mark.parametrize("data", VERSION_505.values(), ids=VERSION_505.keys())
def test_unsupported_version_gets_505_and_close(echo, data):
    refused(echo.port, data, 505)


def test_server_survives_all_refusals(echo):
    for data in [*BAD_400.values(), *NOT_IMPLEMENTED_501.values(), *VERSION_505.values()]:
        with RawConn(echo.port, timeout=5) as conn:
            conn.send(data)
            conn.read_until_close()
    assert request(echo.port, get("/alive")).status == 200


def test_transfer_encoding_is_case_insensitive(echo):
    data = b"POST /up HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    with RawConn(echo.port, timeout=5) as conn:
        conn.send(data + get("/next"))
        r = conn.read_response()
        assert r.status == 200
        assert json.loads(r.body)["body"] == "hello world"
        # the body was consumed as chunked: the next request parses
        assert json.loads(conn.read_response().body)["path"] == "/next"


def test_single_valid_content_length_is_served(echo):
    # Control for the CL cases above: a single valid Content-Length is served.
    r = request(echo.port, b"POST /p HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello")
    assert (r.status, json.loads(r.body)["body"]) == (200, "hello")


def test_absolute_form_target_is_served_with_origin_path(echo):
    r = request(echo.port, b"GET http://example.com/p?q=1 HTTP/1.1\r\nHost: other\r\n\r\n")
    assert r.status == 200
    scope = json.loads(r.body)
    assert scope["path"] == "/p"
    assert scope["query_string"] == "q=1"
    assert scope["method"] == "GET"


@pytest.mark.parametrize("bad", [
    b"GET / HTTP/1.1\nHost: test\n\n",
    b"GET / HTTP/1.1\r\nHost: test\r\nX(Y): 1\r\n\r\n",
    b"GET / HTTP/1.1\r\n\r\n",
    post(b"Content-Length: 4\r\n" + CHUNKED, b"0\r\n\r\n"),  # CL.TE smuggling attempt
    post(CHUNKED, b"zz\r\n\r\n"),
    b"GET / HTTP/2.0\r\nHost: test\r\n\r\n",
], ids=["bare-lf", "bad-header-name", "missing-host", "cl-te-smuggle", "bad-chunk", "http-2.0"])
def test_bytes_pipelined_after_a_refused_request_are_never_parsed(echo, bad):
    with RawConn(echo.port, timeout=5) as conn:
        conn.send(bad + get("/smuggled"))
        r = conn.read_response()
        assert r.status in (400, 505)
        assert b"smuggled" not in r.body
        leftover, _ = conn.h11.trailing_data
        rest = leftover + conn.read_until_close()
        assert rest == b"", f"bytes after the refusal: {rest!r}"

