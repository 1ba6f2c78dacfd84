"""Busy poll: once every request is answered, the engine polls for up to ``--busy-poll``
µs before the loop sleeps, so a client that sends its next request at once (a
request/response ping-pong) finds the server awake.

Observed from outside: the server's main thread sleeps (a voluntary context switch)
once per request without it and hardly ever with it; a spin that finds nothing backs
off, so sporadic traffic costs little CPU; timers keep running.
"""

import time
from pathlib import Path

import pytest

from tests.support.harness import IS_ZIGCORN
from tests.support.rawhttp import RawConn, get

pytestmark = pytest.mark.skipif(not IS_ZIGCORN, reason="a zigcorn engine option")


def sleeps(pid: int) -> int:
    """Voluntary context switches of the server's main thread so far."""
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches line")


def cpu_ns(pid: int) -> int:
    """CPU time of the server's main thread so far."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0])


def ping_pong(port: int, requests: int, pause: float = 0.0) -> None:
    with RawConn(port) as conn:
        for _ in range(requests):
            conn.send(get("/"))
            assert conn.read_response().body == b"ok"
            if pause:
                time.sleep(pause)


def _sleeps_per_request(start_server, budget_us: str, requests: int = 300) -> float:
    server = start_server("ticker:app", "--busy-poll", budget_us)
    ping_pong(server.port, 20)  # warm up
    before = sleeps(server.proc.pid)
    ping_pong(server.port, requests)
    return (sleeps(server.proc.pid) - before) / requests


def test_ping_pong_client_finds_the_server_awake(start_server):
    # A 5 ms budget: the test client answers well within it, even on a busy machine.
    spinning = _sleeps_per_request(start_server, "5000")
    sleeping = _sleeps_per_request(start_server, "0")
    # Without the spin the loop mostly sleeps between two requests (not always: when the
    # client's next request is already there, it has no reason to).
    assert sleeping > 0.2, sleeping
    assert spinning <= sleeping / 2, (spinning, sleeping)


def test_sporadic_requests_back_off(start_server):
    server = start_server("ticker:app", "--busy-poll", "5000")
    ping_pong(server.port, 5)
    before = cpu_ns(server.proc.pid)
    ping_pong(server.port, 40, pause=0.03)  # every spin finds nothing
    spent_ms = (cpu_ns(server.proc.pid) - before) / 1e6
    # Spinning after each of the 40 responses would burn 200 ms; backing off after a
    # miss spins after 2 of them (10 ms), plus the requests themselves.
    assert spent_ms < 100, spent_ms


def count(port: int, path: str) -> int:
    """The number an app's counting path (``/ticks``, ``/passes``, ``/reads``) answers."""
    with RawConn(port) as conn:
        conn.send(get(path))
        return int(conn.read_response().body)


def over_a_busy_second(port: int, path: str) -> int:
    """How far the count at `path` moves while a ping-pong client keeps the server busy
    for a second."""
    first = count(port, path)
    started = time.monotonic()
    while time.monotonic() - started < 1.0:
        ping_pong(port, 500)  # fresh connections: the keep-alive request limit is 10,000
    return count(port, path) - first


def test_timers_run_while_the_server_spins(start_server):
    server = start_server("ticker:app", "--busy-poll", "1000")
    # A 10 ms ticker over a busy second: about 100 runs, at least half of them here.
    assert over_a_busy_second(server.port, "/ticks") >= 50


def test_a_request_the_busy_poll_finds_runs_in_the_same_pass(start_server):
    # zigcorn's own loop: the busy poll at a pass's end is that pass's second wait, and
    # the request it finds runs at once, not after another pass (and its wait) begins.
    server = start_server("passes:app", "--busy-poll", "5000", "--loop", "zigcorn")
    with RawConn(server.port) as conn:
        for _ in range(20):  # warm up
            conn.send(get("/"))
            conn.read_response()
        before = count(server.port, "/passes")
        requests = 400
        for _ in range(requests):
            conn.send(get("/"))
            assert conn.read_response().body == b"ok"
    per_request = (count(server.port, "/passes") - before) / requests
    # A pass per request when each found request waited for the next pass; two per pass
    # now (a ping-pong client keeps the poll finding the next one), misses aside.
    assert per_request < 0.75, per_request


def test_other_descriptors_are_served_while_the_busy_poll_keeps_finding_requests(start_server):
    # The same-pass run is bounded: the loop's own wait (every descriptor asyncio holds)
    # still comes every second pass, however busy the server.
    server = start_server("passes:app", "--busy-poll", "1000")
    # A byte every 10 ms over a busy second: about 100 reads, at least half of them here
    # (a loop that waited on its descriptors only when the busy poll missed would read
    # a connection's 500 requests' worth of bytes at once).
    assert over_a_busy_second(server.port, "/reads") >= 50


def test_busy_poll_is_validated():
    from zigcorn import Config

    assert Config(app="tests.apps.ticker:app").busy_poll == 100
    with pytest.raises(ValueError, match="busy_poll"):
        Config(app="tests.apps.ticker:app", busy_poll=-1)
    with pytest.raises(ValueError, match="busy_poll"):
        Config(app="tests.apps.ticker:app", busy_poll=10_000)  # over 5 ms
