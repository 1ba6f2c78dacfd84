"""What the server does when a resource runs out: it pauses, says so once, counts it,
and carries on by itself; it never spins."""

import socket
import time

import httpx

from tests.support.harness import cpu_seconds, wait_for, zigcorn_only

pytestmark = zigcorn_only

NOFILE = 64  # the server's descriptor limit: a few dozen connections fit
CLIENTS = 150


def test_out_of_descriptors_pauses_accepting_without_spinning_and_resumes(start_server):
    server = start_server("basic:app", "--metrics-path", "/metrics", "--log-level", "warning", nofile=NOFILE)
    clients = []
    try:
        # More connections than descriptors: the kernel completes them all (backlog),
        # the server can accept only some.
        for _ in range(CLIENTS):
            clients.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        assert wait_for(lambda: "Accepting paused" in server.output()), server.output()
        # The listener stays readable while accept fails: polling it again at once
        # would burn a whole core (about 2 s of CPU in 2 s).
        before = cpu_seconds(server.proc.pid)
        time.sleep(2.0)
        used = cpu_seconds(server.proc.pid) - before
        assert used < 0.5, f"the server used {used:.2f} s of CPU in 2 s while out of descriptors"
        # One warning, not one per failed accept (rate-limited to one a minute).
        assert server.output().count("Accepting paused") == 1, server.output()
        assert "out of file descriptors" in server.output()
    finally:
        for s in clients:
            s.close()
    # Descriptors come back as clients leave: accepting resumes by itself.
    assert wait_for(lambda: _get_ok(server.port), timeout=10), server.output()
    metrics = httpx.get(f"{server.url}/metrics", timeout=5).text
    pauses = next(line for line in metrics.splitlines() if line.startswith("zigcorn_accept_pauses_total "))
    assert int(pauses.split()[1]) >= 1, metrics


def _get_ok(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
