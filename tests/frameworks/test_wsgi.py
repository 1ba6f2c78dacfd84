"""WSGI served by the engine (--interface wsgi): the environ built in Zig, the pool of
threads, wsgi.input streaming, start_response/write/iterables/close, file_wrapper,
errors, timeouts, HTTP/2, and memory that stays flat. The apps (tests/apps/wsgi_apps.py)
run behind wsgiref.validate's validator, so a PEP 3333 violation by the server fails
the request with a 500 and a traceback in the log."""

import hashlib
import json
import os
import re
import socket
import time

import httpx
import pytest

from tests.support.drain import check_drain_path
from tests.support.harness import wait_for, zigcorn_only
from tests.support.rawhttp import RawConn, get
from tests.support.tools import require_module

pytestmark = [zigcorn_only, pytest.mark.every_python]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("wsgifiles")
    (d / "wsgi-file.bin").write_bytes(os.urandom(300_000))
    return d


@pytest.fixture
def server(start_server, files):
    return start_server("wsgi_apps:app", "--interface", "wsgi", env={"ZIGCORN_TEST_FILES": str(files)})


def _no_app_errors(server):
    out = server.output()
    assert "AssertionError" not in out and "Traceback" not in out, out


def test_the_environ_is_pep_3333(server):
    r = httpx.get(server.url + "/env/a%20b/%C3%A9t%C3%A9", params={"x": "1", "y": "é"},
                  headers=[("X-Rep", "1"), ("X-Rep", "2"), ("Cookie", "a=1"), ("Cookie", "b=2"),
                           ("X_Spoof", "no")])  # fmt: skip
    assert r.status_code == 200, server.output()
    env = r.json()
    assert env["REQUEST_METHOD"] == "GET"
    # Percent-decoded bytes, each byte one latin-1 character (PEP 3333's "bytes in str").
    assert env["PATH_INFO"] == "/env/a b/" + "été".encode().decode("latin-1")
    assert env["QUERY_STRING"] == "x=1&y=%C3%A9"
    assert env["SCRIPT_NAME"] == ""
    assert env["SERVER_PROTOCOL"] == "HTTP/1.1"
    assert env["SERVER_NAME"] == "127.0.0.1" and env["SERVER_PORT"] == str(server.port)
    assert env["REMOTE_ADDR"] == "127.0.0.1" and env["REMOTE_PORT"].isdigit()
    assert env["HTTP_HOST"] == f"127.0.0.1:{server.port}"
    assert env["HTTP_X_REP"] == "1, 2"
    assert env["HTTP_COOKIE"] == "a=1; b=2"
    assert "HTTP_X_SPOOF" not in env  # an underscore could pose as a dash: left out
    assert env["wsgi.url_scheme"] == "http"
    assert env["wsgi.version"] == [1, 0] and env["wsgi.multithread"] is True
    assert "CONTENT_LENGTH" not in env
    r = httpx.post(server.url + "/env", content=b"abc", headers={"content-type": "text/x-test"})
    env = r.json()
    assert env["CONTENT_LENGTH"] == "3" and env["CONTENT_TYPE"] == "text/x-test"
    assert "HTTP_CONTENT_LENGTH" not in env and "HTTP_CONTENT_TYPE" not in env
    _no_app_errors(server)


def test_root_path_is_script_name_and_proxy_headers_are_resolved(start_server):
    server = start_server("wsgi_apps:app", "--interface", "wsgi", "--root-path", "/mount",
                          "--forwarded-allow-ips", "127.0.0.1")  # fmt: skip
    env = httpx.get(server.url + "/env/x", headers={"x-forwarded-for": "203.0.113.9", "x-forwarded-proto": "https"}).json()
    assert env["SCRIPT_NAME"] == "/mount" and env["PATH_INFO"] == "/env/x"
    assert env["REMOTE_ADDR"] == "203.0.113.9"
    assert env["wsgi.url_scheme"] == "https"


@pytest.mark.parametrize("how", ["all", "n", "readline", "readlines", "iter"])
def test_wsgi_input_every_way_of_reading(server, how):
    body = b"".join(b"line %d %s\n" % (i, os.urandom(40).hex().encode()) for i in range(20000)) + b"no newline at end"
    r = httpx.post(server.url + f"/echo?how={how}", content=body, timeout=30)
    assert r.text == f"{len(body)} {hashlib.sha256(body).hexdigest()}", server.output()
    _no_app_errors(server)


def test_chunked_upload_and_an_empty_body(server):
    def parts():
        for i in range(50):
            yield os.urandom(10_000)

    chunks = list(parts())
    body = b"".join(chunks)
    r = httpx.post(server.url + "/echo?how=n", content=iter(chunks), timeout=30)
    assert r.text == f"{len(body)} {hashlib.sha256(body).hexdigest()}"
    r = httpx.post(server.url + "/echo?how=all", content=b"")
    assert r.text == f"0 {hashlib.sha256(b'').hexdigest()}"
    _no_app_errors(server)


def test_a_32_mib_upload_is_streamed_with_bounded_memory(server):
    body = os.urandom(1 << 20)
    with httpx.Client(timeout=60) as client:
        for _ in range(2):  # warm: the pool, the buffers, a streamed upload's read-ahead
            client.post(server.url + "/echo?how=n", content=body * 3)
        before = server.rss_kb()
        big = body * 32
        r = client.post(server.url + "/echo?how=n", content=big)
        after = server.rss_kb()
    assert r.text == f"{len(big)} {hashlib.sha256(big).hexdigest()}"
    # The app reads 1000 bytes at a time: the server holds at most its 1 MiB read-ahead
    # (and the bytes being read into), not the body: an unbounded read-ahead grows 55 MiB
    # here. The margin covers a pool thread started meanwhile on a loaded machine (its
    # malloc arena; seen once in ten runs with another suite running).
    assert after - before < 16 * 1024, f"RSS grew {after - before} KiB over a 32 MiB upload"


def test_a_1_mib_post_echo(server):
    body = os.urandom(1 << 20)
    r = httpx.post(server.url + "/echo-body", content=body, timeout=30)
    assert r.content == body


def test_generators_write_and_close(server):
    r = httpx.get(server.url + "/gen?n=5")
    assert r.text == "".join(f"part{i};" for i in range(5))
    assert r.headers.get("transfer-encoding") == "chunked"
    assert httpx.get(server.url + "/closed").text == "1"
    r = httpx.get(server.url + "/write")
    assert r.text == "written;by write();then returned"
    r = httpx.get(server.url + "/big?mib=4", timeout=30)
    assert len(r.content) == 4 << 20
    assert r.content[:65536] == b"\x00" * 65536 and r.content[-1:] == b"\x3f"
    r = httpx.get(server.url + "/head-empty")
    assert r.status_code == 204 and r.content == b""
    r = httpx.head(server.url + "/gen")
    assert r.status_code == 200 and r.content == b""
    _no_app_errors(server)


def test_close_is_called_when_the_client_goes_away(server):
    closed = int(httpx.get(server.url + "/closed").text)
    with RawConn(server.port) as conn:
        conn.send(get("/gen?n=1000&delay=0.01"))
        conn.read_until(b"part1;")
    # The worker notices at its next chunk, stops, and closes the iterable.
    assert wait_for(lambda: int(httpx.get(server.url + "/closed").text) == closed + 1, 5), server.output()
    assert httpx.get(server.url + "/gen?n=2").text == "part0;part1;"


def test_file_wrapper_is_sent_by_the_engine(start_server, files):
    server = start_server("wsgi_apps:file_app", "--interface", "wsgi", env={"ZIGCORN_TEST_FILES": str(files)})
    data = (files / "wsgi-file.bin").read_bytes()
    r = httpx.get(server.url + "/")
    assert r.content == data and r.headers["content-length"] == str(len(data))
    r = httpx.get(server.url + "/?skip")
    assert r.content == data[10:]
    # Through the validator the wrapper is iterated: the same bytes.
    validated = start_server("wsgi_apps:app", "--interface", "wsgi", env={"ZIGCORN_TEST_FILES": str(files)})
    assert httpx.get(validated.url + "/file").content == data
    _no_app_errors(validated)
    # The descriptors were closed: no file left open after many requests.
    for _ in range(50):
        httpx.get(server.url + "/")
    fds = os.listdir(f"/proc/{server.proc.pid}/fd")
    assert len(fds) < 40, fds


def test_exceptions_before_and_after_the_response_started(server):
    r = httpx.get(server.url + "/raise")
    assert r.status_code == 500
    assert "failed before start_response" in server.output()
    # After the first chunk the connection is cut: the client sees a broken response.
    with pytest.raises(httpx.HTTPError):
        httpx.get(server.url + "/fail-after")
    assert "failed in the middle of the body" in server.output()
    # exc_info: a second start_response before anything was sent replaces the first.
    r = httpx.get(server.url + "/exc-info")
    assert r.status_code == 500 and r.text == "handled"
    # The server goes on.
    assert httpx.get(server.url + "/gen?n=1").text == "part0;"


@pytest.mark.parametrize("app", ["bad_status", "bad_header"])
def test_a_bad_status_or_header_is_a_500_and_one_log_line(start_server, app):
    server = start_server(f"wsgi_apps:{app}", "--interface", "wsgi")
    r = httpx.get(server.url + "/")
    assert r.status_code == 500
    assert "X-Injected" not in r.headers
    assert wait_for(lambda: "Exception in WSGI application" in server.output())
    assert server.output().count("Exception in WSGI application") == 1
    assert httpx.get(server.url + "/").status_code == 500  # and the server goes on


def test_wsgi_errors_go_to_the_error_log(server):
    assert httpx.get(server.url + "/errors").text == "logged"
    assert wait_for(lambda: "an app's complaint" in server.output())


def test_timeout_request_answers_503_and_drops_the_result(start_server):
    server = start_server("wsgi_apps:app", "--interface", "wsgi", "--timeout-request", "0.3")
    started = time.monotonic()
    r = httpx.get(server.url + "/sleep?s=3&mark=late", timeout=10)
    # Answered at 0.3 s, long before the app's 3 s (a margin for a loaded machine).
    assert r.status_code == 503 and time.monotonic() - started < 2.5
    assert "Request timed out" in server.output()
    assert wait_for(lambda: "SLEEP-END late" in server.output(), 10), server.output()  # its response is dropped
    assert httpx.get(server.url + "/sleep?s=0").text == "slept"
    assert "Traceback" not in server.output()


def test_the_pool_grows_for_blocked_requests_and_the_alias_flag(start_server):
    server = start_server("wsgi_apps:app", "--interface", "wsgi", "--blocking-threads", "6")
    with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=20)) as client:
        import concurrent.futures

        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(12) as ex:
            results = list(ex.map(lambda _: client.get(server.url + "/sleep?s=0.5").text, range(12)))
        elapsed = time.monotonic() - started
    assert results == ["slept"] * 12
    # 6 threads: two rounds of 0.5 s (one thread would take 6 s).
    assert elapsed < 4, elapsed
    threads = [t for t in os.listdir(f"/proc/{server.proc.pid}/task")
               if "zigcorn-wsgi" in open(f"/proc/{server.proc.pid}/task/{t}/comm").read()]  # fmt: skip
    assert len(threads) <= 6


def test_http2_prior_knowledge(server):
    with httpx.Client(http1=False, http2=True, timeout=30) as client:
        r = client.get(server.url + "/env/h2")
        assert r.http_version == "HTTP/2"
        env = r.json()
        assert env["SERVER_PROTOCOL"] == "HTTP/2" and env["HTTP_HOST"] == f"127.0.0.1:{server.port}"
        body = os.urandom(300_000)
        r = client.post(server.url + "/echo?how=readline", content=body)
        assert r.text == f"{len(body)} {hashlib.sha256(body).hexdigest()}"
        r = client.get(server.url + "/gen?n=3")
        assert r.text == "part0;part1;part2;"
    _no_app_errors(server)


def test_many_requests_keep_memory_flat(start_server, files):
    # Four keep-alive connections used in turn: a long keep-alive timeout, so that a
    # machine stalled for seconds (CI's, once) cannot close one as idle between its turns.
    server = start_server("wsgi_apps:app", "--interface", "wsgi", "--timeout-keep-alive", "120",
                          env={"ZIGCORN_TEST_FILES": str(files)})
    conns = [RawConn(server.port) for _ in range(4)]
    try:
        def batch(n):
            for i in range(n):
                conn = conns[i % len(conns)]
                conn.send(get("/gen?n=2"))
                assert conn.read_response().body == b"part0;part1;"

        batch(500)
        after_500 = server.rss_kb()
        batch(2500)
        after_3000 = server.rss_kb()
    finally:
        for conn in conns:
            conn.close()
    assert after_3000 - after_500 < 3 * 1024, f"RSS grew {after_3000 - after_500} KiB from request 500 to 3000"


@pytest.mark.parametrize("length", [100_000, 3_000_000])
def test_a_client_that_sends_half_a_body_and_leaves(server, length):
    """The app never takes part of a body for the whole: below the read-ahead it is not
    called at all; past it, wsgi.input raises once the bytes that came are read."""
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"POST /take-body HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length + b"x" * 5000)
        time.sleep(0.3)
    time.sleep(0.3)
    assert httpx.get(server.url + "/bodies").text == "0", server.output()
    assert httpx.post(server.url + "/take-body", content=b"y" * length).text == str(length)
    assert httpx.get(server.url + "/bodies").text == "1"
    assert httpx.get(server.url + "/gen?n=1").text == "part0;"
    assert json.loads(httpx.get(server.url + "/env").text)["REQUEST_METHOD"] == "GET"


def test_a_body_read_straight_from_the_socket_stops_at_its_end(server):
    """The next pipelined request stays the next request (the direct read takes only the body's bytes)."""
    body = os.urandom(3 << 20)
    head = b"POST /echo?how=n HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    with RawConn(server.port) as conn:
        conn.send(head + body + get("/gen?n=2"))
        first = conn.read_response()
        second = conn.read_response()
    assert first.body == f"{len(body)} {hashlib.sha256(body).hexdigest()}".encode()
    assert second.body == b"part0;part1;"


@pytest.mark.parametrize("http2", [False, True])
def test_over_tls_http1_and_h2(start_server, tmp_path, http2):
    import ssl

    trustme = require_module("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    certfile = tmp_path / "server.pem"
    certfile.write_bytes(cert.private_key_and_cert_chain_pem.bytes())
    context = ssl.create_default_context()
    ca.configure_trust(context)
    server = start_server("wsgi_apps:app", "--interface", "wsgi", "--ssl-certfile", str(certfile))
    url = f"https://127.0.0.1:{server.port}"
    with httpx.Client(http2=http2, verify=context, timeout=30) as client:
        r = client.get(url + "/env")
        assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
        assert r.json()["wsgi.url_scheme"] == "https"
        body = os.urandom(2 << 20)  # past the read-ahead: streamed, through OpenSSL
        r = client.post(url + "/echo?how=n", content=body)
        assert r.text == f"{len(body)} {hashlib.sha256(body).hexdigest()}"
    _no_app_errors(server)


def test_sigterm_drains_a_request_still_in_a_thread(start_server):
    import concurrent.futures

    server = start_server("wsgi_apps:app", "--interface", "wsgi")
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        pending = ex.submit(lambda: httpx.get(server.url + "/sleep?s=1&mark=inflight", timeout=10))
        assert wait_for(lambda: "SLEEP-START inflight" in server.output(), 10), server.output()
        assert server.stop() == 0
        r = pending.result()
    assert r.status_code == 200 and r.text == "slept"


# ---- operations flags: the same behaviour as for an ASGI app -------------------------------

TOKEN = "s3cret-token-0123456789"


def test_drain_path_is_answered_by_the_server_and_drains_gracefully(start_server):
    server = start_server("wsgi_apps:app", "--interface", "wsgi", "--drain-path", "/admin/drain",
                          "--admin-token", TOKEN)  # fmt: skip
    check_drain_path(server, TOKEN, "/gen?n=1")
    output = server.output()
    assert "APP-SAW" not in output, output  # the app never saw the drain path
    assert "Drain request refused" in output
    assert TOKEN not in output


def _access_lines(server, marker: str) -> list[str]:
    return [line for line in server.output().splitlines() if marker in line]


def test_access_log_format_and_exclude(start_server):
    fmt = ('%(h)s "%(r)s" %(s)s b=%(b)s B=%(B)s %(m)s %(U)s q=%(q)s %(H)s u=%(u)s in=%({x-test}i)s '
           'out=%({content-type}o)s a=%(a)s')
    server = start_server("wsgi_apps:app", "--interface", "wsgi", "--access-log-format", fmt,
                          "--access-log-exclude", "/env", "--compression", "gzip")  # fmt: skip
    httpx.get(server.url + "/bytes?n=8", headers={"x-test": "hi", "user-agent": "ua/1"}, auth=("bob", "pw"))
    httpx.get(server.url + "/env")
    with httpx.stream("GET", server.url + "/bytes?n=20000", headers={"accept-encoding": "gzip"}) as r:
        r.read()
        assert r.headers["content-encoding"] == "gzip"
        wire = r.num_bytes_downloaded
    with httpx.Client(http1=False, http2=True) as client:
        client.get(server.url + "/gen?n=2", headers={"accept-encoding": "identity"})
    assert wait_for(lambda: _access_lines(server, "/gen")), server.output()
    lines = _access_lines(server, '"GET /')
    assert lines == [
        '127.0.0.1 "GET /bytes?n=8 HTTP/1.1" 200 b=8 B=8 GET /bytes q=n=8 HTTP/1.1 u=bob in=hi out=text/plain a=ua/1',
        f'127.0.0.1 "GET /bytes?n=20000 HTTP/1.1" 200 b={wire} B={wire} GET /bytes q=n=20000 HTTP/1.1 u=- in=- '
        'out=text/plain a=python-httpx/' + httpx.__version__,
        '127.0.0.1 "GET /gen?n=2 HTTP/2" 200 b=12 B=12 GET /gen q=n=2 HTTP/2 u=- in=- out=text/plain a=python-httpx/'
        + httpx.__version__,
    ], server.output()  # /env is excluded
    assert wire < 20000


def test_access_log_exclude_with_the_default_line(start_server):
    server = start_server("wsgi_apps:app", "--interface", "wsgi", "--access-log-exclude", "/env")
    httpx.get(server.url + "/env")
    httpx.get(server.url + "/bytes?n=8")
    assert wait_for(lambda: _access_lines(server, "/bytes")), server.output()
    (line,) = _access_lines(server, '"GET /')
    # uvicorn's line, the body's 8 bytes as its size.
    assert re.search(r'127\.0\.0\.1:\d+ - "GET /bytes\?n=8 HTTP/1\.1" 200 8 \d+\.\dms$', line), line


def test_lifespan_on_is_refused_with_the_reason():
    import subprocess
    import sys

    from tests.support.harness import ROOT

    cmd = [sys.executable, "-m", "zigcorn", "tests.apps.wsgi_apps:app", "--interface", "wsgi", "--lifespan", "on",
           "--port", "0"]  # fmt: skip
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=20)
    assert result.returncode == 2, result
    assert "lifespan" in result.stderr and "WSGI" in result.stderr, result.stderr


def test_limit_concurrency_and_limit_max_requests(start_server):
    import concurrent.futures

    server = start_server("wsgi_apps:app", "--interface", "wsgi", "--limit-concurrency", "1")
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        pending = ex.submit(lambda: httpx.get(server.url + "/sleep?s=3&mark=busy", timeout=10))
        assert wait_for(lambda: "SLEEP-START busy" in server.output(), 10), server.output()
        assert httpx.get(server.url + "/gen?n=1").status_code == 503  # the app is not called
        assert pending.result().text == "slept"
    limited = start_server("wsgi_apps:app", "--interface", "wsgi", "--limit-max-requests", "3")
    assert [httpx.get(limited.url + "/gen?n=1").text for _ in range(3)] == ["part0;"] * 3
    assert limited.wait(10) == 0
    assert "Maximum request limit of 3 exceeded" in limited.output()
