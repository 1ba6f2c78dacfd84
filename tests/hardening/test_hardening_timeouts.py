"""--timeout-* flags (keep-alive, header, body, write, request) and app failures that must leave
the worker serving others. The engine checks timeouts once a second, so a timeout of T fires
between T and T+1 seconds; the bounds below leave room for that."""

import select
import socket
import threading
import time

import h11
import pytest

from tests.support.harness import wait_for, zigcorn_only
from tests.support.rawhttp import RawConn, get, request

pytestmark = zigcorn_only

MB = 1024 * 1024


def trickle(sock: socket.socket, data: bytes, interval: float, limit: float) -> tuple[float, bytes]:
    """Send ``data`` one byte per ``interval`` until the server closes (or ``limit`` seconds pass).

    Returns (seconds until EOF, bytes received); the time is ``inf`` if the server never closed.
    """
    started = time.monotonic()
    received, i = b"", 0
    while time.monotonic() - started < limit:
        readable, _, _ = select.select([sock], [], [], interval)
        if readable:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return time.monotonic() - started, received
            received += chunk
            continue
        if i < len(data):
            try:
                sock.sendall(data[i:i + 1])
            except OSError:  # closed under us: the next recv reports EOF or reset
                pass
            i += 1
    return float("inf"), received


def assert_408_or_nothing(received: bytes) -> None:
    assert received == b"" or received.startswith(b"HTTP/1.1 408 "), f"got {received!r}"
    if received:
        conn = h11.Connection(h11.CLIENT)
        conn.send(h11.Request(method="GET", target="/", headers=[("Host", "t")]))
        conn.send(h11.EndOfMessage())
        conn.receive_data(received)
        conn.receive_data(b"")
        event = conn.next_event()
        assert isinstance(event, h11.Response) and event.status_code == 408
        while not isinstance(event, h11.EndOfMessage):  # one complete response, nothing after it
            event = conn.next_event()
        assert conn.trailing_data[0] == b""


# --timeout-keep-alive

def test_keep_alive_timeout_accepts_fractions(start_server):
    server = start_server("hardening:app", "--timeout-keep-alive", "0.5")
    with RawConn(server.port, timeout=6) as conn:
        conn.send(get("/"))
        assert conn.read_response().status == 200
        started = time.monotonic()
        assert conn.is_closed()
    assert 0.3 < time.monotonic() - started < 2.5


# --timeout-header

def test_slowloris_head_is_cut_off(start_server):
    server = start_server("hardening:app", "--timeout-header", "1", "--timeout-keep-alive", "30")
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with sock:
        head = b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 100 + b"\r\n\r\n"
        closed_after, received = trickle(sock, head, 0.3, 6)
    assert closed_after < 4, "a head trickling one byte every 0.3 s was not cut off"
    assert closed_after > 0.5
    assert_408_or_nothing(received)
    assert request(server.port, get("/ok")).status == 200


def test_silent_connection_is_closed_by_header_timeout(start_server):
    server = start_server("hardening:app", "--timeout-header", "1", "--timeout-keep-alive", "30")
    with socket.create_connection(("127.0.0.1", server.port), timeout=6) as sock:
        started = time.monotonic()
        try:
            data = sock.recv(1024)
        except ConnectionResetError:
            data = b""
        elapsed = time.monotonic() - started
    assert data == b"", f"a silent connection got {data!r}"
    assert elapsed < 4


def test_header_timeout_applies_to_the_next_request_on_a_keep_alive_connection(start_server):
    server = start_server("hardening:app", "--timeout-header", "1", "--timeout-keep-alive", "30")
    with RawConn(server.port, timeout=5) as conn:
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.send(get("/first"))
        assert conn.read_response().body == b"/first"
        closed_after, received = trickle(conn.sock, get("/second", headers="X-Slow: " + "a" * 100 + "\r\n"), 0.3, 6)
    assert closed_after < 4
    assert_408_or_nothing(received)


def test_head_completed_in_time_is_served(start_server):
    server = start_server("hardening:app", "--timeout-header", "3")
    with RawConn(server.port, timeout=5) as conn:
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for piece in (b"GET /slow-but-fine HTTP/1.1\r\n", b"Host: t\r\n", b"X-A: 1\r\n", b"\r\n"):
            conn.send(piece)
            time.sleep(0.2)
        assert conn.read_response().body == b"/slow-but-fine"


# --timeout-body

def test_stalled_body_gets_408_and_app_sees_disconnect(start_server):
    server = start_server("hardening:app", "--timeout-body", "1", "--timeout-keep-alive", "30")
    with RawConn(server.port, timeout=6) as conn:
        conn.send(b"POST /read-body?id=stall HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        started = time.monotonic()
        r = conn.read_response()
        assert r.status == 408
        assert conn.is_closed()
    assert 0.5 < time.monotonic() - started < 4
    assert wait_for(lambda: "DISCONNECT stall 10" in server.output()), server.output()
    assert request(server.port, get("/ok")).status == 200


def test_slow_but_steady_body_is_not_cut_off(start_server):
    server = start_server("hardening:app", "--timeout-body", "2")
    with RawConn(server.port, timeout=6) as conn:
        conn.send(b"POST /read-body?id=steady HTTP/1.1\r\nHost: t\r\nContent-Length: 30\r\n\r\n")
        for _ in range(3):
            time.sleep(0.3)
            conn.send(b"x" * 10)
        assert conn.read_response().body == b"30"


# --timeout-write

def test_client_that_never_reads_is_closed_and_memory_stays_bounded(start_server):
    server = start_server("hardening:app", "--timeout-write", "1", "--timeout-keep-alive", "30")
    assert request(server.port, get("/ok")).status == 200
    baseline = peak = server.rss_kb()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", server.port))
    with sock:
        sock.sendall(get("/download?mb=50&id=stuck"))
        started = time.monotonic()
        ended = None
        while time.monotonic() - started < 8:
            peak = max(peak, server.rss_kb())
            if "DOWNLOAD-END stuck" in server.output():
                ended = time.monotonic() - started
                break
            time.sleep(0.1)
        assert ended is not None, f"the app is still sending 8 s later:\n{server.output()[-2000:]}"
        # the server has given up on the connection: what is buffered drains, then EOF or reset
        total = 0
        try:
            while chunk := sock.recv(MB):
                total += len(chunk)
        except ConnectionResetError:
            pass
    assert ended < 5
    assert total < 40 * MB, f"the client received {total} bytes: the response was not cut off"
    assert peak - baseline < 20 * 1024, f"RSS grew {(peak - baseline) // 1024} MB while the client did not read"
    assert request(server.port, get("/ok")).status == 200


# --timeout-request and app failures

def test_app_that_never_finishes_gets_503_and_worker_keeps_serving(start_server):
    server = start_server("hardening:app", "--timeout-request", "1")
    result = {}

    def hang():
        started = time.monotonic()
        try:
            with RawConn(server.port, timeout=6) as conn:
                conn.send(get("/forever?id=hang"))
                result["response"] = conn.read_response()
                result["closed"] = conn.is_closed()
        except Exception as exc:  # noqa: BLE001 - asserted below
            result["error"] = repr(exc)
        result["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=hang)
    thread.start()
    assert wait_for(lambda: "CALLED /forever?id=hang" in server.output())
    assert request(server.port, get("/ok")).status == 200  # served while the other one hangs
    thread.join(8)
    assert "error" not in result, result
    r = result["response"]
    assert r.status == 503
    assert 0.5 < result["elapsed"] < 4
    assert wait_for(lambda: "CANCELLED hang" in server.output()), server.output()
    assert request(server.port, get("/ok")).status == 200


def test_request_timeout_after_response_started_closes_connection(start_server):
    server = start_server("hardening:app", "--timeout-request", "1")
    with RawConn(server.port, timeout=6) as conn:
        conn.send(get("/forever-started?id=started"))
        started = time.monotonic()
        with pytest.raises(h11.RemoteProtocolError):  # the body is cut short by the close
            conn.read_response()
    assert time.monotonic() - started < 4
    assert wait_for(lambda: "CANCELLED started" in server.output()), server.output()
    assert request(server.port, get("/ok")).status == 200


def test_request_timeout_does_not_cut_a_fast_app(start_server):
    server = start_server("hardening:app", "--timeout-request", "2")
    assert request(server.port, get("/sleep?s=0.3&id=fast")).body == b"slept"


def test_send_after_response_completed_raises_in_app_and_client_is_unaffected(start_server):
    server = start_server("hardening:app")
    with RawConn(server.port, timeout=5) as conn:
        conn.send(get("/send-after?id=late"))
        r = conn.read_response()
        assert (r.status, r.body) == (200, b"complete")
        assert wait_for(lambda: "SEND-AFTER-" in server.output()), server.output()
        try:
            conn.send(get("/ok"))
            next_ok = conn.read_response().body == b"ok"
        except (OSError, h11.RemoteProtocolError):
            next_ok = False
        assert conn.h11.trailing_data[0] == b"", "bytes of the late message reached the client"
    if not next_ok:  # the same connection may be closed; a new one must work
        next_ok = request(server.port, get("/ok")).body == b"ok"
    assert next_ok
    output = server.output()
    assert "SEND-AFTER-RAISED late RuntimeError" in output, output
    assert wait_for(lambda: "Traceback" in server.output() and "RuntimeError" in server.output())
