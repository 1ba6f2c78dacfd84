"""ASGI response extensions over HTTP/1.1: 103 Early Hints and response trailers, on the
wire (raw sockets read with h11), and through Starlette."""

import json

import h11
import httpx
import pytest

from tests.support.harness import wait_for, zigcorn_only
from tests.support.rawhttp import RawConn

pytestmark = [zigcorn_only, pytest.mark.every_python]


@pytest.fixture(scope="module")
def server():
    from tests.support.harness import Server

    s = Server("extensions:app")
    try:
        yield s.wait_ready()
    finally:
        s.kill()


def events_of(conn: RawConn) -> list:
    """Every h11 event of the next response on `conn`, interim responses included.

    Raises h11.RemoteProtocolError when the connection closes before the message ends.
    """
    parser = conn.h11
    parser.send(h11.Request(method="GET", target="/", headers=[("Host", "t")]))
    parser.send(h11.EndOfMessage())
    events = []
    while True:
        event = parser.next_event()
        if event is h11.NEED_DATA:
            parser.receive_data(conn.recv())
            continue
        events.append(event)
        if isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            return events


def exchange(port: int, request: bytes, timeout: float = 5) -> list:
    with RawConn(port, timeout=timeout) as conn:
        conn.send(request)
        return events_of(conn)


def get(path: str, *headers: str, version: str = "1.1") -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"GET {path} HTTP/{version}\r\nHost: t\r\n{extra}\r\n".encode()


def test_scope_advertises_the_extensions(server):
    names = json.loads(httpx.get(f"{server.url}/scope").text)
    assert "http.response.early_hint" in names and "http.response.trailers" in names


def test_early_hints_are_103_responses_before_the_final_one(server):
    events = exchange(server.port, get("/hints"))
    interim = [e for e in events if isinstance(e, h11.InformationalResponse)]
    assert [e.status_code for e in interim] == [103, 103]
    links = [[v for n, v in e.headers if n == b"link"] for e in interim]
    assert links == [[b"</a.css>; rel=preload; as=style", b"</b.js>; rel=preload; as=script"],
                     [b"</c.png>; rel=preload; as=image"]]
    final = next(e for e in events if isinstance(e, h11.Response))
    assert final.status_code == 200
    assert b"".join(e.data for e in events if isinstance(e, h11.Data)) == b"done"


def test_early_hints_are_not_sent_to_http10_clients(server):
    events = exchange(server.port, get("/hints", version="1.0"))
    assert not [e for e in events if isinstance(e, h11.InformationalResponse)]
    assert next(e for e in events if isinstance(e, h11.Response)).status_code == 200


def test_an_early_hint_after_the_response_started_is_refused(server):
    events = exchange(server.port, get("/hint-late"))
    assert not [e for e in events if isinstance(e, h11.InformationalResponse)]
    body = b"".join(e.data for e in events if isinstance(e, h11.Data))
    assert b"after the response started" in body


def test_trailers_end_a_chunked_body_when_the_client_takes_them(server):
    events = exchange(server.port, get("/trailers", "TE: trailers"))
    response = next(e for e in events if isinstance(e, h11.Response))
    assert (b"transfer-encoding", b"chunked") in response.headers
    assert b"".join(e.data for e in events if isinstance(e, h11.Data)) == b"hello world"
    end = events[-1]
    assert isinstance(end, h11.EndOfMessage)
    assert list(end.headers) == [(b"x-checksum", b"abc"), (b"grpc-status", b"0"), (b"grpc-message", b"ok")]


def test_trailers_are_dropped_for_a_client_that_did_not_ask(server):
    events = exchange(server.port, get("/trailers"))
    assert b"".join(e.data for e in events if isinstance(e, h11.Data)) == b"hello world"
    end = events[-1]
    assert isinstance(end, h11.EndOfMessage) and list(end.headers) == []
    # The connection is still good for the next request.
    with RawConn(server.port) as conn:
        for _ in range(2):
            conn.send(get("/trailers-short", "TE: trailers"))
            r = conn.read_response()
            assert r.body == b"short"


def test_a_one_message_body_with_trailers_is_chunked(server):
    events = exchange(server.port, get("/trailers-short", "TE: trailers"))
    response = next(e for e in events if isinstance(e, h11.Response))
    assert (b"transfer-encoding", b"chunked") in response.headers
    assert list(events[-1].headers) == [(b"x-checksum", b"5")]


@pytest.mark.parametrize(("path", "logged"), [
    ("/trailers-forbidden", "may not carry framing"),
    ("/trailers-early", "before the body ended"),
    ("/trailers-missing", "returned without completing response"),
])
def test_misused_trailers_cut_the_response_short(server, path, logged):
    with RawConn(server.port, timeout=5) as conn:
        conn.send(get(path, "TE: trailers"))
        # The body never ends properly (no last chunk): the connection closes mid-message.
        with pytest.raises(h11.RemoteProtocolError):
            events_of(conn)
    assert wait_for(lambda: logged in server.output()), server.output()


def test_trailers_without_declaring_them_are_an_app_error(server):
    with RawConn(server.port, timeout=5) as conn:
        conn.send(get("/trailers-undeclared", "TE: trailers"))
        events = events_of(conn)
        # The response was already whole (its content-length); then the connection closes.
        assert b"".join(e.data for e in events if isinstance(e, h11.Data)) == b"short"
        assert conn.is_closed()
    assert wait_for(lambda: "'trailers' was not set" in server.output()), server.output()


def test_starlette_send_early_hints(start_server):
    server = start_server("starlette_app:app")
    events = exchange(server.port, get("/early-hints"))
    interim = [e for e in events if isinstance(e, h11.InformationalResponse)]
    assert [e.status_code for e in interim] == [103]
    assert [v for n, v in interim[0].headers if n == b"link"] == [b"</style.css>; rel=preload; as=style"]
    assert next(e for e in events if isinstance(e, h11.Response)).status_code == 200
