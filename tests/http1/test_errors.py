"""Client disconnects, app exceptions, ASGI misuse and malformed requests."""

import h11
import httpx
import pytest

from tests.support.harness import wait_for
from tests.support.rawhttp import RawConn, get, request

pytestmark = pytest.mark.every_python


def test_disconnect_reaches_app_after_client_closes(basic):
    with RawConn(basic.port) as conn:
        conn.send(get("/hold"))
        conn.read_until(b"\r\n\r\n")  # the response has started; the app now waits in receive()
    assert wait_for(lambda: "http.disconnect" in httpx.get(basic.url + "/events").text), \
        f"app never received http.disconnect; events: {httpx.get(basic.url + '/events').text!r}"


@pytest.fixture
def errors(start_server):
    return start_server("errors:app")


def test_exception_before_response_gives_500_and_logs_traceback(errors):
    r = httpx.get(errors.url + "/raise-before")
    assert r.status_code == 500
    assert wait_for(lambda: "boom-before-start" in errors.output()), errors.output()
    assert "Traceback" in errors.output()
    assert httpx.get(errors.url + "/ok").text == "ok"


@pytest.mark.parametrize("path", ["/raise-after", "/raise-after-chunked"])
def test_exception_after_response_start_closes_connection(errors, path):
    with RawConn(errors.port) as conn:
        conn.send(get(path))
        with pytest.raises(h11.RemoteProtocolError):  # body cut short by the close
            conn.read_response()
    assert httpx.get(errors.url + "/ok").text == "ok"


def test_app_returning_without_response_gives_500(errors):
    assert httpx.get(errors.url + "/no-response").status_code == 500
    assert httpx.get(errors.url + "/ok").text == "ok"


def test_body_before_start_gives_500(errors):
    assert httpx.get(errors.url + "/body-before-start").status_code == 500
    assert httpx.get(errors.url + "/ok").text == "ok"


def test_second_response_start_is_rejected(errors):
    # The first start may already be on the wire, so the server either answers 500
    # or closes the connection before the message is complete.
    with RawConn(errors.port) as conn:
        conn.send(get("/double-start"))
        try:
            r = conn.read_response()
        except h11.RemoteProtocolError:
            pass
        else:
            assert r.status == 500, f"double start answered {r.status} {r.body!r}"
            assert b"should not be sent" not in r.body
    assert httpx.get(errors.url + "/ok").text == "ok"


def assert_400_and_closed(port: int, data: bytes):
    with RawConn(port) as conn:
        conn.send(data)
        r = conn.read_response()
        assert r.status == 400
        assert conn.is_closed()


def test_malformed_request_line_gives_400(basic):
    assert_400_and_closed(basic.port, b"GARBAGE\r\n\r\n")


def test_invalid_chunk_size_gives_400(basic):
    assert_400_and_closed(basic.port, b"POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
                                      b"zz\r\nhello\r\n0\r\n\r\n")


def test_missing_host_on_http_1_1_gives_400(basic):
    assert_400_and_closed(basic.port, b"GET / HTTP/1.1\r\n\r\n")


@pytest.mark.parametrize("junk", [
    b"\x00\x01\x02\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: test\r\nBad Header\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: test\r\nContent-Length: abc\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
])
def test_more_bad_requests_give_400_and_server_survives(basic, junk):
    assert_400_and_closed(basic.port, junk)
    assert request(basic.port, get("/alive")).body == b"/alive"


def test_large_request_header_is_accepted(basic):
    r = request(basic.port, get("/big", headers="X-Big: " + "a" * 8000 + "\r\n"))
    assert (r.status, r.body) == (200, b"/big")


def test_oversized_request_head_is_rejected(basic):
    with RawConn(basic.port) as conn:
        try:
            conn.send(get("/huge", headers="X-Huge: " + "a" * 200_000 + "\r\n"))
        except OSError:  # the server may close while we are still sending
            pass
        r = conn.read_response()
        assert r.status in (400, 431)
        assert conn.is_closed()
    assert request(basic.port, get("/alive")).body == b"/alive"
