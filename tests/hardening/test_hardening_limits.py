"""--limit-* flags: body/line/fields/head sizes, connection and keep-alive caps, concurrency,
max requests, and the memory cost of idle keep-alive connections."""

import resource
import socket
import subprocess
import sys
import threading
import time

import h11
import pytest

from tests.support.harness import ROOT, SERVER, free_port, wait_for, zigcorn_only
from tests.support.rawhttp import RawConn, get, request

pytestmark = zigcorn_only


def refused(port: int, data: bytes, status: int, timeout: float = 5) -> None:
    with RawConn(port, timeout=timeout) as conn:
        try:
            conn.send(data)
        except OSError:  # the server may refuse while we are still sending
            pass
        r = conn.read_response()
        assert r.status == status, f"answered {r.status} {r.body!r}, expected {status}"
        assert r.header("connection") == "close"
        assert conn.h11.trailing_data[0] == b""
        assert conn.is_closed()


def headers(n: int, size: int = 1) -> str:
    """n extra header lines."""
    return "".join(f"X-H{i}: {'v' * size}\r\n" for i in range(n))


# --limit-request-body

def test_content_length_over_body_limit_gets_413_before_the_app_runs(start_server):
    server = start_server("hardening:app", "--limit-request-body", "1000")
    # No body is sent: the 413 must come from the head alone.
    refused(server.port, b"POST /read-body?id=big HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n", 413)
    r = request(server.port, b"POST /read-body?id=fits HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n"
                + b"x" * 1000)
    assert (r.status, r.body) == (200, b"1000")
    assert "CALLED /read-body?id=fits" in server.output()
    assert "id=big" not in server.output(), "the app was called for a body over the limit"


def test_default_body_limit_is_one_gib(start_server):
    server = start_server("hardening:app")
    refused(server.port, b"POST /read-body?id=big HTTP/1.1\r\nHost: t\r\nContent-Length: 1073741825\r\n\r\n", 413)
    assert "id=big" not in server.output()
    # exactly 1 GiB is allowed: the app is called (we then hang up without sending the body)
    with RawConn(server.port, timeout=5) as conn:
        conn.send(b"POST /read-body?id=gib HTTP/1.1\r\nHost: t\r\nContent-Length: 1073741824\r\n\r\nabc")
        assert wait_for(lambda: "CALLED /read-body?id=gib" in server.output()), server.output()


def chunked(*sizes: int) -> bytes:
    return b"".join(b"%x\r\n" % n + b"c" * n + b"\r\n" for n in sizes) + b"0\r\n\r\n"


def test_chunked_body_over_limit_gets_413_and_app_sees_disconnect(start_server):
    server = start_server("hardening:app", "--limit-request-body", "1000")
    r = request(server.port, b"POST /read-body?id=fits HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                + chunked(400, 400, 200))
    assert (r.status, r.body) == (200, b"1000")
    with RawConn(server.port, timeout=5) as conn:
        conn.send(b"POST /read-body?id=over HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        assert wait_for(lambda: "CALLED /read-body?id=over" in server.output())
        try:
            for _ in range(3):  # 1200 bytes in total
                conn.send(b"190\r\n" + b"c" * 400 + b"\r\n")
                time.sleep(0.05)
        except OSError:
            pass
        r = conn.read_response()
        assert r.status == 413
        assert conn.is_closed()
    assert wait_for(lambda: "DISCONNECT over" in server.output()), server.output()
    assert "BODY-COMPLETE over" not in server.output()


# --limit-request-line

def test_long_target_gets_414_with_default_limit(start_server):
    server = start_server("hardening:app")
    assert request(server.port, get("/" + "a" * 8000)).status == 200
    refused(server.port, get("/" + "a" * 9000), 414)


def test_long_incomplete_request_line_gets_414_without_waiting(start_server):
    server = start_server("hardening:app")
    with RawConn(server.port, timeout=5) as conn:
        conn.send(b"GET /" + b"a" * 9000)  # no newline: the line is still incomplete
        started = time.monotonic()
        r = conn.read_response()
        assert r.status == 414
        assert conn.is_closed()
    assert time.monotonic() - started < 3


def test_request_line_limit_flag(start_server):
    server = start_server("hardening:app", "--limit-request-line", "200")
    assert request(server.port, get("/" + "a" * 150)).status == 200
    refused(server.port, get("/" + "a" * 300), 414)
    refused(server.port, b"GET /" + b"a" * 300, 414)  # incomplete line


# --limit-request-fields

def test_too_many_header_fields_gets_431_with_default_limit(start_server):
    server = start_server("hardening:app")
    assert request(server.port, get("/", headers=headers(99))).status == 200  # 100 with Host
    refused(server.port, get("/", headers=headers(120)), 431)


def test_request_fields_limit_flag(start_server):
    server = start_server("hardening:app", "--limit-request-fields", "5")
    assert request(server.port, get("/", headers=headers(4))).status == 200  # 5 with Host
    refused(server.port, get("/", headers=headers(5)), 431)


# --limit-request-head

def test_head_over_default_limit_gets_431(start_server):
    server = start_server("hardening:app")
    assert request(server.port, get("/", headers=headers(3, 4000))).status == 200  # ~12 KB
    refused(server.port, get("/", headers=headers(5, 4000)), 431)  # ~20 KB


def test_request_head_limit_flag(start_server):
    server = start_server("hardening:app", "--limit-request-head", "2000")
    assert request(server.port, get("/", headers=headers(3, 400))).status == 200
    refused(server.port, get("/", headers=headers(3, 900)), 431)


# --limit-connections

def test_connections_past_the_limit_are_closed_at_once(start_server):
    server = start_server("hardening:app", "--limit-connections", "3")
    conns = []
    try:
        # The readiness probe's connection may not be released yet: retry refused ones briefly.
        deadline = time.monotonic() + 3
        while len(conns) < 3 and time.monotonic() < deadline:
            conn = RawConn(server.port, timeout=5)
            try:
                conn.send(get(f"/first{len(conns)}"))
                assert conn.read_response().body == f"/first{len(conns)}".encode()
                conns.append(conn)
            except (OSError, h11.RemoteProtocolError):
                conn.close()
                time.sleep(0.05)
        assert len(conns) == 3, "three connections were never served together"
        for _ in range(2):
            extra = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            try:
                started = time.monotonic()
                try:
                    data = extra.recv(1024)
                except ConnectionResetError:
                    data = b""
                assert data == b"", f"connection over the limit got {data!r}"
                assert time.monotonic() - started < 3
            finally:
                extra.close()
        for i, conn in enumerate(conns):  # the first three are still served
            conn.send(get(f"/again{i}"))
            assert conn.read_response().body == f"/again{i}".encode()
    finally:
        for conn in conns:
            conn.close()

    def new_connection_served():
        try:
            return request(server.port, get("/later")).body == b"/later"
        except Exception:  # noqa: BLE001 - retried until the deadline
            return False

    assert wait_for(new_connection_served), "no connection served after the first three closed"


# --limit-keep-alive-requests

def test_nth_response_on_a_connection_closes_it(start_server):
    server = start_server("hardening:app", "--limit-keep-alive-requests", "3")
    with RawConn(server.port, timeout=5) as conn:
        for i in range(3):
            conn.send(get(f"/r{i}"))
            r = conn.read_response()
            assert r.body == f"/r{i}".encode()
            if i < 2:
                assert r.header("connection") != "close", f"response {i + 1} closes early"
        assert r.header("connection") == "close"
        assert conn.is_closed()
    with RawConn(server.port, timeout=5) as conn:  # pipelined: exactly three answers
        conn.send(b"".join(get(f"/p{i}") for i in range(5)))
        assert [conn.read_response().body for _ in range(3)] == [b"/p0", b"/p1", b"/p2"]
        assert conn.h11.trailing_data[0] == b""
        assert conn.is_closed()


def test_default_keep_alive_request_limit_is_10000(start_server):
    server = start_server("hello:app")
    marker = b"Hello, world!"
    answered, tail, last_heads = 0, b"", b""
    with RawConn(server.port, timeout=10) as conn:
        for batch in range(20):  # 10000 requests, pipelined 500 at a time
            conn.send(get("/") * 500)
            while answered < (batch + 1) * 500:
                chunk = conn.recv()
                assert chunk, f"closed after {answered} responses"
                window = tail + chunk
                answered += window.count(marker)
                tail = window[-(len(marker) - 1):]
                last_heads = (last_heads + chunk)[-4096:]
        assert answered == 10_000
        assert conn.is_closed(), "connection still open after 10000 requests"
    last, before = last_heads.rsplit(b"HTTP/1.1 ", 1)[1], last_heads.rsplit(b"HTTP/1.1 ", 2)[1]
    assert b"\r\nconnection: close\r\n" in last.lower()
    assert b"\r\nconnection: close\r\n" not in before.lower()


# --limit-concurrency

def test_limit_concurrency_503_response_and_in_flight_requests_complete(start_server):
    server = start_server("hardening:app", "--limit-concurrency", "2")
    in_flight = [RawConn(server.port, timeout=10) for _ in range(2)]
    try:
        for i, conn in enumerate(in_flight):
            conn.send(get(f"/sleep?s=3&id=f{i}"))
        assert wait_for(lambda: server.output().count("SLEEP-START f") == 2), server.output()
        with RawConn(server.port, timeout=5) as conn:
            conn.send(get("/sleep?s=0&id=over"))
            started = time.monotonic()
            r = conn.read_response()
            assert time.monotonic() - started < 2  # not queued behind the 3 s sleepers (margin for load)
            assert r.status == 503
            assert r.body == b"Service Unavailable"
            assert r.header("content-type").startswith("text/plain")
            assert r.header("connection") == "close"
            assert conn.is_closed()
        assert "SLEEP-START over" not in server.output(), "the app was called past the limit"
        for conn in in_flight:
            r = conn.read_response()
            assert (r.status, r.body) == (200, b"slept")
    finally:
        for conn in in_flight:
            conn.close()
    assert request(server.port, get("/after")).status == 200


# --limit-max-requests

def test_limit_max_requests_answers_all_then_exits_0(start_server):
    server = start_server("hardening:app", "--limit-max-requests", "5")
    results = []

    def one(i):
        try:
            r = request(server.port, get(f"/sleep?s=0.3&id=m{i}"))
            results.append((r.status, r.body))
        except Exception as exc:  # noqa: BLE001 - recorded and asserted below
            results.append(repr(exc))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert results == [(200, b"slept")] * 5
    assert server.wait(10) == 0


# memory per idle connection

def raise_nofile(minimum: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < minimum:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {minimum}")
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def open_idle(port: int, n: int) -> list[socket.socket]:
    """n connections, each has made one request and read its (small) response."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        socks.append(s)
    for s in socks:
        data = b""
        while not data.endswith(b"Hello, world!"):
            chunk = s.recv(4096)
            assert chunk, f"closed after {data!r}"
            data += chunk
    return socks


def test_10000_idle_keep_alive_connections_cost_under_16_mb(start_server):
    raise_nofile(20_000)
    server = start_server("hello:app", "--timeout-keep-alive", "120", "--timeout-header", "120")
    socks = []
    try:
        socks += open_idle(server.port, 500)
        baseline = server.rss_kb()
        for _ in range(19):
            socks += open_idle(server.port, 500)
        grown = server.rss_kb() - baseline
        assert len(socks) == 10_000
        # every connection is still open and served
        for s in socks[::1000]:
            s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            assert s.recv(4096).endswith(b"Hello, world!")
    finally:
        for s in socks:
            s.close()
    assert grown < 16 * 1024, f"RSS grew {grown} KiB for 9500 idle connections"


@pytest.mark.parametrize("flag, value", [
    ("--limit-request-head", "16385"),
    ("--limit-request-fields", "129"),
    ("--limit-request-line", "0"),
])
def test_limit_out_of_range_is_refused_at_startup_without_traceback(flag, value):
    result = subprocess.run([sys.executable, "-m", SERVER, "tests.apps.hello:app", "--port", str(free_port()),
                             flag, value], cwd=ROOT, capture_output=True, text=True, timeout=20,
                            stdin=subprocess.DEVNULL)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert flag.lstrip("-").replace("-", "_") in output.replace("-", "_"), output
    assert "Traceback" not in output, output
