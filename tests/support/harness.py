"""Start and stop the server under test in a subprocess.

The server command is ``python -m $ZIGCORN_TEST_SERVER`` (default ``zigcorn``), so the
same suite validates against uvicorn: ``ZIGCORN_TEST_SERVER=uvicorn pytest tests``.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER = os.environ.get("ZIGCORN_TEST_SERVER", "zigcorn")
IS_ZIGCORN = SERVER == "zigcorn"
zigcorn_only = pytest.mark.skipif(not IS_ZIGCORN, reason=f"zigcorn-only behaviour (server under test: {SERVER})")

# uvicorn is pinned to its h11 protocol, the strictest reference (httptools accepts a
# missing Host, for instance). Override with ZIGCORN_TEST_UVICORN_HTTP=httptools.
SERVER_ARGS = [] if IS_ZIGCORN else ["--http", os.environ.get("ZIGCORN_TEST_UVICORN_HTTP", "h11")]
# ZIGCORN_TEST_LOOP=asyncio|uvloop runs every server on that event loop (a test that picks
# its own --loop still gets its own: the last flag wins).
if os.environ.get("ZIGCORN_TEST_LOOP"):
    SERVER_ARGS += ["--loop", os.environ["ZIGCORN_TEST_LOOP"]]
# ZIGCORN_TEST_TASK_IMPL=asyncio|zigcorn runs every zigcorn server's requests on that task
# (the default, auto, is zigcorn's own on its loop on 3.11-3.15).
if IS_ZIGCORN and os.environ.get("ZIGCORN_TEST_TASK_IMPL"):
    SERVER_ARGS += ["--task-impl", os.environ["ZIGCORN_TEST_TASK_IMPL"]]

# Exit status after a graceful SIGTERM shutdown. uvicorn re-raises the captured signal
# once it has shut down, so it dies "by SIGTERM"; zigcorn exits 0.
CLEAN_SIGTERM_EXIT = 0 if IS_ZIGCORN else -signal.SIGTERM


def wait_for(predicate, timeout: float = 5.0) -> bool:
    """Polls `predicate` until it is true or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


class Server:
    """One server process running ``tests.apps.<app>``; output goes to a temp file."""

    def __init__(self, app: str, *args: str, env: dict | None = None, nofile: int | None = None, preexec=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.TemporaryFile()
        cmd = [sys.executable, "-m", SERVER, f"tests.apps.{app}",
               "--host", "127.0.0.1", "--port", str(self.port), *SERVER_ARGS, *args]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            preexec_fn=preexec if nofile is None else lambda: _limit_descriptors(nofile),
        )

    def wait_ready(self, timeout: float = 10.0) -> "Server":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited early with {self.proc.returncode}:\n{self.output()}")
            if port_open(self.port):
                return self
            time.sleep(0.05)
        self.kill()
        pytest.fail(f"server did not accept connections within {timeout}s:\n{self.output()}")

    def output(self) -> str:
        """Everything the process wrote to stdout and stderr so far.

        Read with pread, which leaves the file offset alone: the server writes through
        the same open file, so a seek here could land its next write at offset 0 and
        split a line it was printing piecewise (unbuffered print() writes each part).
        """
        fd = self._log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def wait(self, timeout: float = 10.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"server did not exit within {timeout}s:\n{self.output()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def rss_kb(self) -> int:
        """Resident memory of the server process and all its descendants, in KiB."""
        return rss_kb(self.proc.pid)


def _limit_descriptors(soft: int) -> None:
    """In the child before exec: at most `soft` open file descriptors (RLIMIT_NOFILE)."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids


def rss_kb(pid: int) -> int:
    total = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total = int(line.split()[1])
    except OSError:
        return 0
    return total + sum(rss_kb(k) for k in _children(pid))
