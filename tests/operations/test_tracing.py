"""--request-id-header, --trace-context and --server-timing: decided by the engine, seen by the
app in its headers, carried by the response; over HTTP/1.1 and HTTP/2."""

import re

import httpx
import pytest

from tests.support.harness import zigcorn_only

pytestmark = zigcorn_only

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def app_headers(response: httpx.Response) -> list[tuple[str, str]]:
    """The headers tests/apps/scope.py saw, in order."""
    return [(k, v) for k, v in response.json()["headers"]]


def values(headers: list[tuple[str, str]], name: str) -> list[str]:
    return [v for k, v in headers if k == name]


@pytest.fixture(scope="module", params=[False, True], ids=["http1", "h2c"])
def client(request):
    from tests.support.harness import Server

    server = Server("scope:app", "--request-id-header", "X-Request-ID", "--trace-context", "--server-timing",
                    "--no-access-log")
    try:
        server.wait_ready()
        with httpx.Client(base_url=server.url, http1=not request.param, http2=request.param) as c:
            yield c
    finally:
        server.kill()


def test_a_sane_incoming_request_id_reaches_the_app_and_comes_back(client):
    r = client.get("/", headers={"x-request-id": "edge-7f3a:01J8ZK"})
    assert r.headers["x-request-id"] == "edge-7f3a:01J8ZK"
    assert values(app_headers(r), "x-request-id") == ["edge-7f3a:01J8ZK"]


@pytest.mark.parametrize("bad", ["two words", "x" * 65, "quote\"d", "semi;colon", ""])
def test_an_unsafe_incoming_request_id_is_replaced(client, bad):
    r = client.get("/", headers={"x-request-id": bad})
    rid = r.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", rid)
    assert values(app_headers(r), "x-request-id") == [rid]


def test_request_ids_are_made_when_absent_and_are_unique(client):
    seen = set()
    for _ in range(1000):
        r = client.get("/")
        rid = r.headers["x-request-id"]
        assert values(app_headers(r), "x-request-id") == [rid]
        seen.add(rid)
    assert len(seen) == 1000


def test_a_valid_trace_context_passes_untouched(client):
    r = client.get("/", headers={"traceparent": PARENT, "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"})
    seen = app_headers(r)
    assert values(seen, "traceparent") == [PARENT]
    assert values(seen, "tracestate") == ["congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"]


@pytest.mark.parametrize("sent", [
    {},
    {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"},  # no flags
    {"traceparent": "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},  # version ff
    {"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "tracestate": "a=b"},
    {"traceparent": PARENT.upper()},
], ids=["absent", "short", "version-ff", "zero-trace-id", "upper-case"])
def test_an_absent_or_invalid_traceparent_starts_a_new_trace(client, sent):
    r = client.get("/", headers=sent)
    seen = app_headers(r)
    parents = values(seen, "traceparent")
    assert len(parents) == 1 and TRACEPARENT.match(parents[0]), parents
    assert parents[0] != sent.get("traceparent")
    assert values(seen, "tracestate") == []  # a state without its parent means nothing


def test_a_bad_tracestate_is_dropped_and_the_parent_kept(client):
    r = client.get("/", headers={"traceparent": PARENT, "tracestate": "Upper=1"})
    seen = app_headers(r)
    assert values(seen, "traceparent") == [PARENT]
    assert values(seen, "tracestate") == []


def test_new_traces_differ(client):
    ids = {TRACEPARENT.match(values(app_headers(client.get("/")), "traceparent")[0]).group(1) for _ in range(50)}
    assert len(ids) == 50


def test_server_timing_measures_the_app(client):
    r = client.get("/")
    m = re.fullmatch(r"app;dur=(\d+)\.(\d{3})", r.headers["server-timing"])
    assert m and 0 <= float(f"{m.group(1)}.{m.group(2)}") < 10_000


def test_the_apps_own_request_id_header_is_not_doubled(start_server):
    server = start_server("basic:app", "--request-id-header", "x-request-id", "--no-access-log")
    r = httpx.get(server.url + "/set-header", params={"name": "X-Request-ID", "value": "app-made"},
                  headers={"X-Request-ID": "abc"})
    assert r.headers.get_list("x-request-id") == ["app-made"]
    r = httpx.get(server.url + "/hello", headers={"X-Request-ID": "abc"})
    assert r.headers.get_list("x-request-id") == ["abc"]


def test_off_by_default(start_server):
    server = start_server("scope:app", "--no-access-log")
    r = httpx.get(server.url + "/", headers={"traceparent": "garbage", "x-request-id": "a b"})
    assert "x-request-id" not in r.headers
    assert "server-timing" not in r.headers
    seen = app_headers(r)
    assert values(seen, "traceparent") == ["garbage"]
    assert values(seen, "x-request-id") == ["a b"]


def test_a_bad_request_id_header_name_is_refused_at_start(start_server):
    server = start_server("basic:app", "--request-id-header", "bad name", wait=False)
    assert server.proc.wait(20) != 0
    assert "request_id_header" in server.output()


def test_the_json_access_log_carries_the_request_id_and_trace_id(start_server):
    import json
    import time

    server = start_server("basic:app", "--request-id-header", "x-request-id", "--trace-context",
                          "--access-log-format", "json")
    r = httpx.get(server.url + "/hello", headers={"traceparent": PARENT})
    deadline = time.monotonic() + 5
    while '"request_id"' not in server.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    (line,) = [line for line in server.output().splitlines() if '"request_id"' in line]
    entry = json.loads(line[line.index("{"):])
    assert entry["request_id"] == r.headers["x-request-id"]
    assert entry["trace_id"] == PARENT.split("-")[1]


def test_a_wsgi_app_sees_the_request_id_and_trace_context_too(start_server):
    server = start_server("wsgi_apps:app", "--interface", "wsgi", "--request-id-header", "x-request-id",
                          "--trace-context", "--no-access-log")
    r = httpx.get(server.url + "/env", headers={"x-request-id": "bad id", "traceparent": "nope", "tracestate": "a=b"})
    env = r.json()
    assert env["HTTP_X_REQUEST_ID"] == r.headers["x-request-id"] and re.fullmatch(r"[0-9a-f]{32}", env["HTTP_X_REQUEST_ID"])
    assert TRACEPARENT.match(env["HTTP_TRACEPARENT"])
    assert "HTTP_TRACESTATE" not in env
    r = httpx.get(server.url + "/env", headers={"x-request-id": "edge-1", "traceparent": PARENT})
    assert r.json()["HTTP_X_REQUEST_ID"] == "edge-1" and r.json()["HTTP_TRACEPARENT"] == PARENT


@pytest.mark.parametrize("path", ["/tuple", "/value"])
def test_a_request_id_the_app_keeps_never_changes(path):
    # The engine refills its last id header in place when nothing else holds it; an app
    # that kept the tuple or its value must not see later ids written into it.
    from tests.support.harness import Server

    server = Server("keep_ids:app", "--request-id-header", "x-request-id", "--no-access-log")
    try:
        server.wait_ready()
        sent = []
        with httpx.Client(base_url=server.url) as c:
            for i in range(50):
                # Every other request drops its own header: the reused objects then see both paths.
                r = c.get(path, headers={"x-request-id": f"kept-{i}"} if i % 2 else {})
                sent.append(r.headers["x-request-id"])
                assert r.json() == sent
            # Ids of the same length as the generated ones (32 bytes), kept and replaced alike.
            for i in range(20):
                r = c.get(path, headers={"x-request-id": f"{i:032d}"})
                sent.append(f"{i:032d}")
                assert r.json() == sent
    finally:
        server.kill()


def _access_lines(server, marker: str) -> list[str]:
    return [line for line in server.output().splitlines() if marker in line]


@pytest.mark.parametrize("interface", ["asgi", "wsgi"])
def test_the_default_access_line_carries_the_request_id_and_trace_id(start_server, interface):
    from tests.support.harness import wait_for

    app = ("wsgi_apps:app", "--interface", "wsgi") if interface == "wsgi" else ("basic:app",)
    server = start_server(*app, "--request-id-header", "x-request-id", "--trace-context")
    httpx.get(server.url + "/one", headers={"x-request-id": "edge-7f3a:01J8ZK", "traceparent": PARENT})
    made = httpx.get(server.url + "/two").headers["x-request-id"]
    assert wait_for(lambda: _access_lines(server, "GET /two")), server.output()
    (one,) = _access_lines(server, "GET /one")
    (two,) = _access_lines(server, "GET /two")
    assert re.search(r'"GET /one HTTP/1\.1" \d+ \d+ \d+\.\dms request_id=edge-7f3a:01J8ZK '
                     r"trace_id=4bf92f3577b34da6a3ce929d0e0e4736$", one), one  # fmt: skip
    assert re.search(rf" request_id={made} trace_id=[0-9a-f]{{32}}$", two), two
    assert "4bf92f3577b34da6a3ce929d0e0e4736" not in two  # a new trace


def test_the_default_access_line_with_the_request_id_alone(start_server):
    from tests.support.harness import wait_for

    server = start_server("wsgi_apps:app", "--interface", "wsgi", "--request-id-header", "x-request-id")
    with httpx.Client(http1=False, http2=True) as client:
        client.get(server.url + "/env", headers={"x-request-id": "abc-1"})
    assert wait_for(lambda: _access_lines(server, "GET /env")), server.output()
    (line,) = _access_lines(server, "GET /env")
    assert re.search(r'"GET /env HTTP/2" 200 \d+ \d+\.\dms request_id=abc-1$', line), line


def test_an_engine_answer_carries_the_ids_too(start_server, tmp_path):
    from tests.support.harness import wait_for

    (tmp_path / "a.txt").write_text("static!")
    server = start_server("basic:app", "--static", f"/s={tmp_path}", "--request-id-header", "x-request-id",
                          "--trace-context")  # fmt: skip
    assert httpx.get(server.url + "/s/a.txt", headers={"x-request-id": "st-1", "traceparent": PARENT}).text == "static!"
    assert wait_for(lambda: _access_lines(server, "GET /s/a.txt")), server.output()
    (line,) = _access_lines(server, "GET /s/a.txt")
    assert re.search(r'"GET /s/a\.txt HTTP/1\.1" 200 7 \d+\.\dms request_id=st-1 '
                     r"trace_id=4bf92f3577b34da6a3ce929d0e0e4736$", line), line  # fmt: skip
