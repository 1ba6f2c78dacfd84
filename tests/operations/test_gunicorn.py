"""gunicorn with zigcorn's worker class: ``gunicorn -k zigcorn.workers.ZigcornWorker``.

Real gunicorn (from PyPI) is started in a subprocess; its arbiter forks the workers and
the tests drive it with signals, as a deployment would.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.harness import ROOT, free_port, port_open, wait_for, zigcorn_only
from tests.support.tools import require_module

pytestmark = [zigcorn_only, pytest.mark.every_python]
require_module("gunicorn")


class Gunicorn:
    def __init__(self, app: str, *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-k", "zigcorn.workers.ZigcornWorker", "-b", f"127.0.0.1:{self.port}",
             "--access-logfile", "-", *args, f"tests.apps.{app}"],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        if not wait_for(lambda: port_open(self.port) and self._ok(), timeout=20):
            self.proc.kill()
            pytest.fail(f"gunicorn did not serve:\n{self.output()}")

    def _ok(self) -> bool:
        try:
            return httpx.get(f"{self.url}/ok", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def output(self) -> str:
        # pread, not seek and read: the processes write through this same open file, and
        # a seek could land their next line at offset 0, over earlier ones (see harness).
        fd = self.log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def pids(self, n: int = 40) -> set[str]:
        with httpx.Client(timeout=5) as client:
            return {client.get(f"{self.url}/pid", headers={"connection": "close"}).text for _ in range(n)}

    def stop(self, sig=signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def gunicorn():
    started = []

    def start(app="basic:app", *args):
        g = Gunicorn(app, *args)
        started.append(g)
        return g

    yield start
    for g in started:
        g.stop(signal.SIGKILL)


def test_workers_serve_with_the_engine_and_log_through_gunicorn(gunicorn):
    g = gunicorn("basic:app", "-w", "2")
    r = httpx.get(f"{g.url}/hello")
    assert r.text == "/hello" and r.headers["server"] == "zigcorn"
    assert wait_for(lambda: g.output().count("Booting worker with pid") == 2)
    booted = set(re.findall(r"Booting worker with pid: (\d+)", g.output()))
    # Both serve the one socket; which of them accepts is the kernel's choice.
    assert g.pids() <= booted
    assert wait_for(lambda: '"GET /hello HTTP/1.1" 200' in g.output())


def test_sigterm_is_a_graceful_stop_for_requests_in_flight(gunicorn):
    g = gunicorn("basic:app", "-w", "1", "--graceful-timeout", "10")
    results = []
    t = threading.Thread(target=lambda: results.append(httpx.get(f"{g.url}/sleep?s=1.5&mark=inflight", timeout=10).text))
    t.start()
    assert wait_for(lambda: "SLEEP-START inflight" in g.output(), 10), g.output()
    assert g.stop() == 0
    t.join(10)
    assert results == ["slept"]


def test_a_killed_worker_is_replaced(gunicorn):
    g = gunicorn("basic:app", "-w", "1")
    (pid,) = g.pids(1)
    os.kill(int(pid), signal.SIGKILL)
    assert wait_for(lambda: g._ok() and g.pids(1) != {pid}, timeout=15)


def test_a_worker_whose_master_dies_exits(gunicorn):
    # Killed with SIGKILL, the arbiter cannot stop its workers: each one must notice and go
    # (else it holds the port for ever), as gunicorn's own workers do.
    g = gunicorn("basic:app", "--timeout", "2")
    (pid,) = g.pids(5)
    g.proc.kill()
    g.proc.wait()

    def gone() -> bool:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        # An exited child of init is reaped at once; a zombie counts as gone too.
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"

    assert wait_for(gone, timeout=10), "the worker outlived its master"


def test_max_requests_recycles_workers(gunicorn):
    g = gunicorn("basic:app", "-w", "1", "--max-requests", "5")
    seen = set()
    for _ in range(20):
        try:
            seen |= g.pids(1)
        except httpx.HTTPError:
            time.sleep(0.2)
    assert len(seen) >= 2, g.output()


def test_the_heartbeat_keeps_an_idle_worker_alive_and_a_stuck_one_is_replaced(gunicorn):
    g = gunicorn("basic:app", "-w", "1", "--timeout", "2")
    (pid,) = g.pids(1)
    time.sleep(4)  # idle past --timeout: the heartbeat keeps it
    assert g.pids(1) == {pid}
    # An app that blocks the loop for longer than --timeout stops the heartbeat.
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{g.url}/spin?us=8000000", timeout=10)
    assert wait_for(lambda: g._ok() and g.pids(1) != {pid}, timeout=15)
    assert "WORKER TIMEOUT" in g.output()


def test_sighup_replaces_the_workers(gunicorn):
    g = gunicorn("basic:app", "-w", "2")
    before = g.pids()
    g.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: g._ok() and not (g.pids(10) & before), timeout=20), g.output()


def test_an_app_that_cannot_be_imported_stops_gunicorn(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-k", "zigcorn.workers.ZigcornWorker", "-b", f"127.0.0.1:{free_port()}",
         "tests.apps.no_such_module:app"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert "no_such_module" in proc.stdout + proc.stderr


def test_sigquit_stops_at_once(gunicorn):
    g = gunicorn("basic:app", "-w", "1", "--graceful-timeout", "30")
    results = []
    t = threading.Thread(target=lambda: results.append(_get_or_error(f"{g.url}/sleep?s=20&mark=long")))
    t.start()
    assert wait_for(lambda: "SLEEP-START long" in g.output(), 10), g.output()
    started = time.monotonic()
    g.proc.send_signal(signal.SIGQUIT)
    assert g.proc.wait(15) == 0
    # Quick: the 20 s request was cut, not waited for.
    assert time.monotonic() - started < 10
    t.join(15)
    assert results and results[0] != "slept"


def _get_or_error(url):
    try:
        return httpx.get(url, timeout=30).text
    except httpx.HTTPError as exc:
        return type(exc).__name__
