"""The engine's writer thread: complete responses written off the Python thread.

Most tests force it with ``--writer-thread on`` so every complete response crosses the
thread boundary; the races worth testing are the ones between that thread's write and
what the Python thread does meanwhile (a disconnect, a slow reader, a pipelined request,
a shutdown). ``auto`` is checked by whether the thread exists at all.
"""

import socket
import threading
from pathlib import Path

import httpx
import pytest

from tests.support.harness import IS_ZIGCORN, wait_for
from tests.support.rawhttp import RawConn, get

pytestmark = [pytest.mark.skipif(not IS_ZIGCORN, reason="a zigcorn engine option"), pytest.mark.every_python]

MB = 1024 * 1024


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def test_on_starts_the_thread_and_serves(start_server):
    server = start_server("basic:app", "--writer-thread", "on")
    assert threads(server.proc.pid) == 2
    with httpx.Client(base_url=server.url) as client:
        for _ in range(50):
            response = client.post("/echo", content=b"ping")
            assert response.status_code == 200 and response.content == b"ping"


def test_off_never_starts_it(start_server):
    server = start_server("basic:app", "--writer-thread", "off")
    _concurrent_spin(server.port, requests=200, us=300)
    assert threads(server.proc.pid) == 1


def _concurrent_spin(port: int, requests: int, us: int, clients: int = 8) -> None:
    """`clients` keep-alive connections asking for `us` µs of app CPU each, all at once."""
    errors = []

    def client():
        try:
            with RawConn(port) as conn:
                for _ in range(requests // clients):
                    conn.send(get(f"/spin?us={us}"))
                    assert conn.read_response().body == b"spun"
        except Exception as exc:  # reported below, not lost in the thread
            errors.append(exc)

    workers = [threading.Thread(target=client) for _ in range(clients)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert not errors, errors


def test_auto_stays_inline_for_a_lone_connection(start_server):
    # Whether a fast app under full load stays inline is a matter of speed: the benchmark
    # shows it (raw app, c64). Here: a slow app, but nothing could run during a hand-over.
    server = start_server("basic:app", "--writer-thread", "auto")  # the default; explicit against ZIGCORN_WRITER_THREAD
    with RawConn(server.port) as conn:
        for _ in range(300):
            conn.send(get("/spin?us=300"))
            assert conn.read_response().body == b"spun"
    assert threads(server.proc.pid) == 1


def test_auto_starts_the_thread_when_the_app_is_the_bottleneck(start_server):
    server = start_server("basic:app", "--writer-thread", "auto")
    # 2 ms of app CPU per request and 16 waiting: the Python thread is surely saturated,
    # even when the clients' own threads are slow to send the next request.
    _concurrent_spin(server.port, requests=320, us=2000, clients=16)
    assert threads(server.proc.pid) == 2
    # Still correct afterwards, with the thread taking some responses.
    _concurrent_spin(server.port, requests=200, us=100)


def test_pipelined_requests_answered_in_order(start_server):
    server = start_server("basic:app", "--writer-thread", "on")
    with RawConn(server.port) as conn:
        conn.send(b"".join(
            b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%d" % (len(str(i)), i) for i in range(200)
        ))  # fmt: skip
        for i in range(200):
            assert conn.read_response().body == str(i).encode()


def test_slow_reader_gets_every_byte_of_a_large_response(start_server):
    # 50 MiB cannot fit in the socket: the thread's write stops at EAGAIN and the rest
    # goes out inline on writable events.
    server = start_server("basic:app", "--writer-thread", "on")
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(get("/blob?mb=50"))
        received = bytearray()
        head_end = -1
        while head_end < 0:
            received += sock.recv(65536)
            head_end = received.find(b"\r\n\r\n")
        head = bytes(received[:head_end]).lower()
        assert b"content-length: %d" % (50 * MB) in head
        body = len(received) - head_end - 4
        while body < 50 * MB:
            chunk = sock.recv(256 * 1024)
            assert chunk, f"closed after {body} bytes"
            body += len(chunk)
        assert body == 50 * MB
    assert httpx.post(server.url + "/echo", content=b"after").content == b"after"


def test_clients_that_vanish_mid_write_leave_the_server_healthy(start_server):
    server = start_server("basic:app", "--writer-thread", "on", "--metrics-path", "/metrics")
    for _ in range(30):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(get("/blob?mb=8") * 3)
        sock.recv(1000)
        # RST instead of FIN: the thread's writev then fails mid-response.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()
    assert wait_for(lambda: _open_connections(server.url) == 1)  # only the one asking
    with httpx.Client(base_url=server.url) as client:
        for _ in range(20):
            assert client.post("/echo", content=b"x").content == b"x"
    assert server.proc.poll() is None


def _open_connections(url: str) -> int:
    text = httpx.get(url + "/metrics").text
    for line in text.splitlines():
        if line.startswith("zigcorn_connections_open"):
            return int(float(line.split()[-1]))
    raise AssertionError(text)


def test_sigterm_with_writes_in_flight_exits_cleanly(start_server):
    server = start_server("basic:app", "--writer-thread", "on", "--timeout-graceful-shutdown", "2")
    socks = []
    for _ in range(16):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        sock.sendall(get("/blob?mb=4"))
        socks.append(sock)
    wait_for(lambda: server.rss_kb() > 0)
    for sock in socks[:8]:
        sock.recv(1000)  # some responses are mid-way, some not started reading at all
    assert server.stop(timeout=15) == 0
    output = server.output()
    assert "panic" not in output.lower() and "Traceback" not in output, output
    for sock in socks:
        sock.close()


def test_rss_flat_over_thousands_of_handed_over_responses(start_server):
    server = start_server("hello:app", "--writer-thread", "on")
    conns = [RawConn(server.port) for _ in range(4)]
    try:
        def batch(n):
            for i in range(n):
                conn = conns[i % len(conns)]
                conn.send(get("/"))
                assert conn.read_response().body == b"Hello, world!"

        batch(500)
        after_500 = server.rss_kb()
        batch(4500)
        after_5000 = server.rss_kb()
    finally:
        for conn in conns:
            conn.close()
    assert after_5000 - after_500 < 3 * 1024, f"RSS grew {after_5000 - after_500} KiB from request 500 to 5000"
