"""Graceful shutdown: SIGTERM under sustained keep-alive load, a second SIGINT, the graceful timeout."""

import signal
import socket
import threading
import time

import h11

from tests.support.harness import wait_for, zigcorn_only
from tests.support.rawhttp import RawConn, get

pytestmark = zigcorn_only

CLIENTS = 64


class LoadClient(threading.Thread):
    """One keep-alive connection sending /sleep?s=0.02 requests back to back until it is closed.

    Each request is classified by whether its bytes were fully sent before ``signalled`` was set
    (the flag is set just BEFORE the signal is sent, so "before" is conservative).
    """

    def __init__(self, port: int, signalled: threading.Event, deadline: float):
        super().__init__(daemon=True)
        self.port, self.signalled, self.deadline = port, signalled, deadline
        self.sent_before = self.completed_before = 0
        self.completed_after = self.closed_after = self.keep_alive_after = 0
        self.problems: list[str] = []
        self.finished_cleanly = False

    def run(self):
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.problems.append(f"client error: {exc!r}")

    def _run(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = h11.Connection(h11.CLIENT)
        with sock:
            while time.monotonic() < self.deadline:
                if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                    conn.start_next_cycle()
                try:
                    sock.sendall(get("/sleep?s=0.02"))
                    before = not self.signalled.is_set()
                except OSError:  # closed by the server between two requests
                    before = False
                    if not self.signalled.is_set():
                        self.problems.append("connection closed before the signal")
                    self.closed_after += 1
                    self.finished_cleanly = True
                    return
                if before:
                    self.sent_before += 1
                conn.send(h11.Request(method="GET", target="/", headers=[("Host", "test")]))
                conn.send(h11.EndOfMessage())
                outcome, closing = self._read_response(sock, conn)
                if outcome == "complete":
                    if before:
                        self.completed_before += 1
                    else:
                        self.completed_after += 1
                        if not closing:
                            self.keep_alive_after += 1
                    if closing:
                        self.finished_cleanly = sock.recv(1) == b""
                        if not self.finished_cleanly:
                            self.problems.append("bytes after a connection: close response")
                        return
                elif outcome == "closed-before-response":
                    if before:
                        self.problems.append("request sent before the signal: closed without a response")
                    else:
                        self.closed_after += 1
                        self.finished_cleanly = True
                    return
                else:
                    self.problems.append(f"{'before' if before else 'after'} the signal: {outcome}")
                    return
            self.problems.append("connection still open at the deadline")

    @staticmethod
    def _read_response(sock, conn):
        received = 0
        status, closing = None, False
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                return f"truncated/malformed response after {received} bytes: {exc}", False
            if event is h11.NEED_DATA:
                try:
                    data = sock.recv(65536)
                except ConnectionResetError:
                    data = b""
                except socket.timeout:
                    return f"no response within 10 s ({received} bytes)", False
                if not data and received == 0:
                    return "closed-before-response", False
                received += len(data)
                conn.receive_data(data)
            elif isinstance(event, h11.Response):
                status = event.status_code
                closing = any(k == b"connection" and b"close" in v.lower() for k, v in event.headers)
            elif isinstance(event, h11.EndOfMessage):
                if status != 200:
                    return f"status {status}", closing
                return "complete", closing
            elif isinstance(event, h11.ConnectionClosed):
                return f"truncated after {received} bytes", False


def test_sigterm_under_sustained_load_loses_no_sent_request(start_server):
    server = start_server("basic:app", "--no-access-log", "--timeout-graceful-shutdown", "10")
    signalled = threading.Event()
    clients = [LoadClient(server.port, signalled, time.monotonic() + 20) for _ in range(CLIENTS)]
    for client in clients:
        client.start()
    time.sleep(1.0)
    signalled.set()
    server.proc.send_signal(signal.SIGTERM)
    signalled_at = time.monotonic()
    returncode = server.wait(12)
    exited_after = time.monotonic() - signalled_at
    for client in clients:
        client.join(12)
    assert not any(client.is_alive() for client in clients), "clients still running"

    problems = [p for client in clients for p in client.problems]
    sent_before = sum(c.sent_before for c in clients)
    completed_before = sum(c.completed_before for c in clients)
    assert not problems, f"{len(problems)} problems, e.g. {problems[:5]}"
    assert sent_before > CLIENTS * 5, f"only {sent_before} requests before the signal: load did not run"
    assert completed_before == sent_before
    assert all(c.finished_cleanly for c in clients)
    # each connection is told to close soon after the signal, not served on as keep-alive
    assert max(c.keep_alive_after for c in clients) <= 2, [c.keep_alive_after for c in clients]
    assert returncode == 0, server.output()[-3000:]
    assert exited_after < 10


def test_request_in_flight_at_sigterm_completes_with_connection_close(start_server):
    server = start_server("hardening:app", "--timeout-graceful-shutdown", "10")
    with RawConn(server.port, timeout=10) as conn:
        conn.send(get("/sleep?s=1&id=drain"))
        assert wait_for(lambda: "SLEEP-START drain" in server.output())
        server.proc.send_signal(signal.SIGTERM)
        r = conn.read_response()
        assert (r.status, r.body) == (200, b"slept")
        assert r.header("connection") == "close"
        assert conn.is_closed()
    assert server.wait(5) == 0


def test_connection_accepted_just_before_sigterm_still_gets_its_answer(start_server):
    # The client has connected (the server accepted it) but its request is still on its way
    # when the drain starts: it must be served with connection: close, not cut unread.
    server = start_server("basic:app", "--timeout-graceful-shutdown", "10")
    with RawConn(server.port) as conn:
        # Connected: accepted now or by the drain itself, which takes what the kernel holds.
        server.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: "Shutting down" in server.output()), server.output()
        time.sleep(0.2)
        conn.send(get("/"))
        r = conn.read_response()
        assert r.status == 200
        assert r.header("connection") == "close"
    assert server.wait() == 0


def test_second_sigint_while_draining_exits_at_once(start_server):
    server = start_server("hardening:app")
    with RawConn(server.port, timeout=10) as conn:
        conn.send(get("/sleep?s=30&id=long"))
        assert wait_for(lambda: "SLEEP-START long" in server.output())
        server.proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert server.proc.poll() is None, "the first SIGINT did not wait for the in-flight request"
        server.proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        returncode = server.wait(15)
        assert time.monotonic() - started < 10  # not the 30 s the request would take (margin for load)
        assert returncode != 0


def test_graceful_shutdown_timeout_bounds_the_drain(start_server):
    server = start_server("hardening:app", "--timeout-graceful-shutdown", "1")
    with RawConn(server.port, timeout=10) as conn:
        conn.send(get("/sleep?s=30&id=long"))
        assert wait_for(lambda: "SLEEP-START long" in server.output())
        server.proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        server.wait(15)
        # Far from the request's 30 s; the margin is for a loaded machine's exit.
        assert time.monotonic() - started < 10, "the drain outlived --timeout-graceful-shutdown 1"
        try:
            rest = conn.read_until_close()
        except ConnectionResetError:
            rest = b""
        assert b"slept" not in rest


EMBEDDED = r"""
import os, signal, threading
import zigcorn

def mine(sig, frame):
    pass

signal.signal(signal.SIGTERM, mine)
before = signal.getsignal(signal.SIGINT)  # SIG_IGN when started in the background, else Python's
threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT)).start()
zigcorn.run("tests.apps.hello:app", port=0, log_level="warning", lifespan="off")
# Serving installed its own SIGINT/SIGTERM handlers; now the program's are back.
assert signal.getsignal(signal.SIGTERM) is mine, signal.getsignal(signal.SIGTERM)
assert signal.getsignal(signal.SIGINT) is before, (signal.getsignal(signal.SIGINT), before)
print("restored")
"""


@zigcorn_only
def test_run_puts_the_programs_signal_handlers_back():
    import subprocess
    import sys

    from tests.support.harness import ROOT

    result = subprocess.run([sys.executable, "-c", EMBEDDED], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "restored", result.stdout + result.stderr
