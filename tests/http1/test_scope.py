"""The HTTP connection scope handed to the app (tests/apps/scope.py echoes it as JSON)."""

import json
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.harness import Server
from tests.support.rawhttp import RawConn, get

pytestmark = pytest.mark.every_python


@pytest.fixture(scope="module")
def scope_server():
    server = Server("scope:app")
    try:
        yield server.wait_ready()
    finally:
        server.kill()


def echo_scope(conn: RawConn, raw_request: bytes) -> dict:
    conn.send(raw_request)
    r = conn.read_response()
    assert r.status == 200
    return json.loads(r.body)


def test_scope_fields(scope_server):
    with RawConn(scope_server.port) as conn:
        scope = echo_scope(conn, b"GET /caf%C3%A9/a%20b?x=1&y=%20z HTTP/1.1\r\n"
                                 b"Host: test\r\nX-Dup: a\r\nX-Mixed-Case: Value\r\nx-dup: b\r\n\r\n")
        local_port = conn.local_port
    assert scope["type"] == "http"
    assert scope["asgi"]["version"] == "3.0"
    assert scope["http_version"] == "1.1"
    assert scope["method"] == "GET"
    assert scope["scheme"] == "http"
    assert scope["path"] == "/café/a b"
    assert scope["raw_path"] == "/caf%C3%A9/a%20b"
    assert scope["query_string"] == "x=1&y=%20z"
    assert scope["root_path"] == ""
    assert scope["headers"] == [["host", "test"], ["x-dup", "a"], ["x-mixed-case", "Value"], ["x-dup", "b"]]
    assert scope["client"] == ["127.0.0.1", local_port]
    assert scope["server"] == ["127.0.0.1", scope_server.port]
    assert scope["types"]["raw_path"] == "bytes"
    assert scope["types"]["query_string"] == "bytes"
    assert scope["types"]["client"] in ("tuple", "list")
    assert scope["types"]["state"] == "dict"


def test_scope_http_1_0_and_other_methods(scope_server):
    with RawConn(scope_server.port) as conn:
        scope = echo_scope(conn, b"GET /old HTTP/1.0\r\n\r\n")
    assert scope["http_version"] == "1.0"
    assert scope["headers"] == []
    with RawConn(scope_server.port) as conn:
        for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
            scope = echo_scope(conn, f"{method} /m HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n".encode())
            assert scope["method"] == method


def test_keep_alive_requests_share_client_port(scope_server):
    with RawConn(scope_server.port) as conn:
        first = echo_scope(conn, get("/one"))
        second = echo_scope(conn, get("/two"))
        assert first["client"] == second["client"] == ["127.0.0.1", conn.local_port]
    assert (first["path"], second["path"]) == ("/one", "/two")


def test_empty_query_string(scope_server):
    with RawConn(scope_server.port) as conn:
        assert echo_scope(conn, get("/plain"))["query_string"] == ""
        assert echo_scope(conn, get("/q?"))["query_string"] == ""


def test_root_path(start_server):
    # uvicorn >= 0.26: root_path is set, and path / raw_path are prefixed with it
    # (the proxy in front is assumed to have stripped the prefix).
    server = start_server("scope:app", "--root-path", "/api")
    with RawConn(server.port) as conn:
        scope = echo_scope(conn, get("/x%20y?q=1"))
    assert scope["root_path"] == "/api"
    assert scope["path"] == "/api/x y"
    assert scope["raw_path"] == "/api/x%20y"
    assert scope["query_string"] == "q=1"


path_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segments=st.lists(path_text, min_size=1, max_size=4), query=st.binary(max_size=20))
def test_percent_decoding_roundtrip(scope_server, segments, query):
    raw_path = "/" + "/".join(quote(s, safe="") for s in segments)
    raw_query = quote(query, safe="=&")
    with RawConn(scope_server.port) as conn:
        scope = echo_scope(conn, get(f"{raw_path}?{raw_query}"))
    assert scope["path"] == "/" + "/".join(segments)
    assert scope["raw_path"] == raw_path
    assert scope["query_string"] == raw_query
