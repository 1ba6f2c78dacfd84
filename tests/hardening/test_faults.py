"""Fault injection: clients and peers that misbehave at scale, and what can be seen from
outside while they do: every fresh request answered, RSS and CPU of the server bounded,
descriptors given back, responses complete and in order.

Each scenario is bounded in count and time and stops by itself; the test process raises
its own descriptor limit where it needs thousands of sockets.
"""

import os
import resource
import socket
import ssl
import struct
import threading
import time

import httpx
import pytest

from tests.support.harness import cpu_seconds, wait_for, zigcorn_only
from tests.support.rawhttp import RawConn, get
from tests.support.tools import require_module

pytestmark = zigcorn_only
MB = 1024 * 1024


@pytest.fixture(scope="module", autouse=True)
def descriptors():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 16384)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def idle_connection(port: int) -> socket.socket:
    """A keep-alive connection that made one request and read its answer."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(get("/idle"))
    got = b""
    while b"/idle" not in got:
        got += sock.recv(4096)
    return sock


def test_idle_and_slow_clients_at_scale_do_not_starve_fresh_requests(start_server):
    server = start_server("basic:app", "--timeout-keep-alive", "60", "--timeout-header", "30",
                          "--limit-connections", "10000")
    idle = [idle_connection(server.port) for _ in range(2000)]
    slow = []
    try:
        # Slowloris: 500 heads that arrive a few bytes at a time.
        for _ in range(500):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            s.sendall(b"GET /slow HTTP/1.1\r\n")
            slow.append(s)
        before = cpu_seconds(server.proc.pid)
        started = time.monotonic()
        answered = 0
        with httpx.Client(timeout=5) as client:
            for i in range(200):
                if i % 20 == 0:
                    for s in slow:
                        s.sendall(b"X")  # a byte each: the heads stay incomplete
                assert client.get(f"{server.url}/fresh{i}").text == f"/fresh{i}"
                answered += 1
        elapsed = time.monotonic() - started
        assert answered == 200
        # Holding 2,500 connections costs no CPU of its own: what was used served the requests.
        used = cpu_seconds(server.proc.pid) - before
        assert used < elapsed, (used, elapsed)
        assert all(s.fileno() >= 0 for s in idle)
        # The idle ones are still served.
        idle[0].sendall(get("/again"))
        assert b"/again" in idle[0].recv(4096)
    finally:
        for s in idle + slow:
            s.close()


def test_a_churn_of_short_connections_leaves_rss_flat(start_server):
    server = start_server("basic:app")

    def churn(n):
        for i in range(n):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
                s.sendall(get(f"/c{i}", headers="Connection: close\r\n"))
                while s.recv(4096):
                    pass

    churn(1000)
    before = server.rss_kb()
    churn(4000)
    after = server.rss_kb()
    assert after - before < 2048, (before, after)
    assert wait_for(lambda: open_fds(server.proc.pid) < 40)


def test_a_client_that_pipelines_faster_than_it_reads_is_held_back(start_server):
    server = start_server("basic:app", "--limit-keep-alive-requests", "100000")
    base = server.rss_kb()
    count = 20_000
    wire = b"".join(get(f"/p{i}") for i in range(count))
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    sent = [0]

    def writer():
        try:
            sock.sendall(wire)
            sent[0] = len(wire)
        except OSError:
            pass

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    # Not reading: the server answers what the socket buffers hold, then stops parsing
    # (its answers are not read), so neither its memory nor its CPU grows with what the
    # client sends: it settles to no CPU at all, not a spin.
    def quiet():
        before = cpu_seconds(server.proc.pid)
        time.sleep(0.5)
        return cpu_seconds(server.proc.pid) - before < 0.05

    assert wait_for(quiet, timeout=10)
    peak = server.rss_kb()
    assert peak - base < 16 * 1024, (base, peak)
    # Reading now: every answer, in order.
    got, expect, n = b"", 0, 0
    sock.settimeout(10)
    while n < count:
        chunk = sock.recv(1 << 20)
        assert chunk, f"closed after {n} responses"
        got += chunk
        while True:
            end = got.find(b"\r\n\r\n")
            if end < 0:
                break
            head = got[:end].decode()
            length = int(head.lower().split("content-length: ")[1].split("\r\n")[0])
            if len(got) < end + 4 + length:
                break
            body = got[end + 4 : end + 4 + length]
            assert body == f"/p{expect}".encode()
            expect += 1
            n += 1
            got = got[end + 4 + length :]
    t.join(10)
    sock.close()


def test_tls_garbage_and_stalled_handshakes_are_dropped(start_server, tmp_path):
    trustme = require_module("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    pem = tmp_path / "server.pem"
    pem.write_bytes(cert.private_key_and_cert_chain_pem.bytes())
    server = start_server("basic:app", "--ssl-certfile", str(pem), "--timeout-header", "1")
    baseline = open_fds(server.proc.pid)
    socks = []
    for i in range(60):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        if i % 2:
            s.sendall(os.urandom(300))  # not TLS at all
        else:
            # The first half of a ClientHello record, then nothing.
            s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(40))
        socks.append(s)
    for s in socks:
        s.settimeout(10)
        try:
            while s.recv(4096):
                pass
        except (ConnectionResetError, TimeoutError):
            pass
        s.close()
    assert wait_for(lambda: open_fds(server.proc.pid) <= baseline, timeout=10)
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    assert httpx.get(f"https://localhost:{server.port}/ok", verify=ctx).text == "/ok"


def test_a_half_closed_client_still_gets_its_response(start_server):
    server = start_server("basic:app")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(get("/half"))
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(4096):
            got += chunk
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"/half")


def test_clients_that_reset_mid_response_free_everything_and_the_app_is_told(start_server):
    server = start_server("basic:app")
    baseline = open_fds(server.proc.pid)
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.sendall(get("/download?mb=50"))
        s.recv(65536)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST
    with RawConn(server.port) as c:
        c.send(get("/hold"))
        c.sock.recv(4096)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    assert wait_for(lambda: "http.disconnect" in httpx.get(f"{server.url}/events").text)
    assert wait_for(lambda: open_fds(server.proc.pid) <= baseline + 1)


def test_an_app_that_blocks_the_loop_delays_but_loses_no_request(start_server):
    server = start_server("basic:app")
    results = []

    def call(path):
        results.append(httpx.get(f"{server.url}{path}", timeout=20).text)

    blocker = threading.Thread(target=call, args=("/spin?us=1500000",))
    blocker.start()
    time.sleep(0.2)
    others = [threading.Thread(target=call, args=(f"/w{i}",)) for i in range(30)]
    for t in others:
        t.start()
    for t in [blocker, *others]:
        t.join(30)
    assert sorted(results) == sorted(["spun", *[f"/w{i}" for i in range(30)]])


def test_an_app_that_fails_to_import_under_workers_exits_non_zero_without_respawning(start_server):
    server = start_server("no_such_module:app", "--workers", "3", wait=False)
    assert server.wait(timeout=20) != 0
    assert "no_such_module" in server.output()
    # Once, not a storm of workers failing in turn.
    assert server.output().count("Traceback") <= 1


def test_an_app_that_leaks_tasks_keeps_serving_and_still_shuts_down(start_server):
    server = start_server("basic:app", "--timeout-graceful-shutdown", "3")
    with httpx.Client(timeout=10) as client:
        for _ in range(300):
            assert client.get(f"{server.url}/leak").status_code == 200
        assert client.get(f"{server.url}/leak").text == "301"
    started = time.monotonic()
    assert server.stop() == 0
    # The leaked tasks do not hold the process past its graceful timeout.
    assert time.monotonic() - started < 8


def test_sigterm_while_idle_and_slow_clients_are_held_drains_and_exits(start_server):
    server = start_server("basic:app", "--timeout-keep-alive", "60")
    idle = [idle_connection(server.port) for _ in range(300)]
    slow = []
    for _ in range(100):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.sendall(b"GET /slow HTTP/1.1\r\n")
        slow.append(s)
    inflight = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    inflight.sendall(get("/sleep?s=1&mark=inflight"))
    assert wait_for(lambda: "SLEEP-START inflight" in server.output(), 10), server.output()
    started = time.monotonic()
    try:
        assert server.stop() == 0
        assert time.monotonic() - started < 8
        got = b""
        while chunk := inflight.recv(4096):
            got += chunk
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"slept")
    finally:
        for s in idle + slow + [inflight]:
            s.close()
