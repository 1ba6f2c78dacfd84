"""The app runs on a standard asyncio loop: tasks, contextvars, loop choice, IPv6."""

import json
import socket
import time

import httpx
import pytest

from tests.support.harness import IS_ZIGCORN, free_port
from tests.support.rawhttp import RawConn, get
from tests.support.tools import require_module

pytestmark = pytest.mark.every_python


def _fetch_json(port: int, paths: list[str]) -> list[dict]:
    with RawConn(port) as conn:
        out = []
        for path in paths:
            conn.send(get(path))
            out.append(json.loads(conn.read_response().body))
        return out


@pytest.mark.parametrize("loop", ["zigcorn", "asyncio", "uvloop"])
@pytest.mark.parametrize("busy_poll", ["0", "5000"])
def test_app_runs_in_a_task_with_its_own_context(start_server, loop, busy_poll):
    if loop == "uvloop":
        require_module("uvloop")
    # A long busy poll (zigcorn) catches the second request inside the spin the first
    # one's end scheduled: its task must not inherit the first one's context.
    extra = ("--busy-poll", busy_poll) if IS_ZIGCORN else ()
    server = start_server("tasks:app", "--loop", loop, *extra)
    first, second = _fetch_json(server.port, ["/one", "/two"])
    for seen, path in ((first, "/one"), (second, "/two")):
        assert seen["has_task"] and seen["same_task"]
        assert seen["leaked"] is None
        assert seen["mine"] == path
    assert seen["loop"].startswith(loop)


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 on this machine")
def test_ipv6_host(start_server):
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("::1 is not available")
    port = free_port()
    # The harness binds 127.0.0.1 by default; the last --host/--port given wins.
    server = start_server("hello:app", "--host", "::1", "--port", str(port), wait=False)
    for _ in range(200):
        try:
            r = httpx.get(f"http://[::1]:{port}/", timeout=5)
            break
        except httpx.ConnectError:
            if server.proc.poll() is not None:
                pytest.fail(server.output())
            time.sleep(0.05)
    else:
        pytest.fail(f"no answer on [::1]:{port}:\n{server.output()}")
    assert r.status_code == 200 and r.text == "Hello, world!"
    if IS_ZIGCORN:
        assert "http://[::1]:" in server.output()
