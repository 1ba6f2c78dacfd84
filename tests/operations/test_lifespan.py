"""Lifespan protocol and graceful shutdown on SIGTERM."""

import socket
import time

import httpx
import pytest

from tests.support.harness import CLEAN_SIGTERM_EXIT, wait_for
from tests.support.rawhttp import RawConn, get

pytestmark = pytest.mark.every_python


@pytest.fixture
def markers(tmp_path):
    path = tmp_path / "markers.txt"
    path.touch()
    return path


def test_startup_state_and_shutdown(start_server, markers):
    server = start_server("lifespan:app", env={"ZIGCORN_TEST_MARKERS": str(markers)})
    assert markers.read_text() == "startup\n"  # startup completes before the port is served
    assert httpx.get(server.url + "/").text == "hello from startup"
    assert server.stop() == CLEAN_SIGTERM_EXIT
    assert markers.read_text() == "startup\nshutdown\n"


def test_startup_failed_exits_nonzero_with_message(start_server):
    server = start_server("lifespan:startup_failed", wait=False)
    assert server.wait() != 0
    assert "boom-startup-failed" in server.output()


def test_lifespan_on_with_raising_app_exits_nonzero(start_server):
    server = start_server("lifespan:raising", "--lifespan", "on", wait=False)
    assert server.wait() != 0
    assert "boom-lifespan-raised" in server.output()


def test_lifespan_auto_tolerates_raising_app(start_server):
    server = start_server("lifespan:raising")
    assert httpx.get(server.url + "/").text == "served"


def test_lifespan_off_never_calls_app_with_lifespan(start_server, markers):
    server = start_server("lifespan:scope_types", "--lifespan", "off", env={"ZIGCORN_TEST_MARKERS": str(markers)})
    assert httpx.get(server.url + "/").text == "ok"
    assert server.stop() == CLEAN_SIGTERM_EXIT
    assert markers.read_text() == "http\n"


def test_lifespan_on_calls_app_with_lifespan(start_server, markers):
    server = start_server("lifespan:scope_types", "--lifespan", "on", env={"ZIGCORN_TEST_MARKERS": str(markers)})
    assert httpx.get(server.url + "/").text == "ok"
    assert server.stop() == CLEAN_SIGTERM_EXIT
    assert markers.read_text() == "lifespan\nhttp\n"


def test_sigterm_drains_in_flight_request(start_server):
    server = start_server("basic:app")
    with RawConn(server.port) as conn:
        conn.send(get("/sleep?s=2&mark=drain"))
        assert wait_for(lambda: "SLEEP-START drain" in server.output(), 10), server.output()
        server.proc.terminate()
        # Logged once the server has stopped accepting (its request still sleeps a while).
        assert wait_for(lambda: "Shutting down" in server.output(), 10), server.output()
        try:  # best effort: the listening socket is closed once shutdown starts
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
            new_connection_accepted = server.proc.poll() is None
        except OSError:
            new_connection_accepted = False
        r = conn.read_response()
    assert (r.status, r.body) == (200, b"slept")
    assert server.wait() == CLEAN_SIGTERM_EXIT
    assert not new_connection_accepted, "new connections were still accepted after SIGTERM"


def test_sigterm_on_idle_server_exits_promptly(start_server):
    server = start_server("hello:app")
    with RawConn(server.port) as conn:  # an idle keep-alive connection must not block shutdown
        conn.send(get("/"))
        conn.read_response()
        started = time.monotonic()
        assert server.stop(timeout=5) == CLEAN_SIGTERM_EXIT
    assert time.monotonic() - started < 3
