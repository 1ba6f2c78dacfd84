"""WebSocket echo throughput and idle cost, zigcorn beside uvicorn (a small, bounded run).

    python benchmarks/ws_echo.py --seconds 3 --clients 4 [--servers zigcorn uvicorn]

For each server: start it on tests/apps/ws.py, run `--clients` websockets clients that
each send a 32-byte text message and wait for its echo for `--seconds`, report echoes
per second (compression off, then on; best of `--rounds`, servers alternating); then
open `--idle` raw WebSockets that sit idle and report the server's RSS growth per
connection. The client runs on the same machine,
so the numbers compare servers, not absolute capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.harness import free_port, port_open, rss_kb, wait_for  # noqa: E402
from tests.support.wsraw import RawWS  # noqa: E402


# What each server runs with the flags below (none of them chooses an implementation):
# uvicorn picks httptools, uvloop and websockets when they are installed.
CONFIGURATION = {"uvicorn": "--http auto --loop auto --ws auto"}


def start(server: str, port: int) -> subprocess.Popen:
    args = [sys.executable, "-m", server, "tests.apps.ws:app", "--port", str(port), "--log-level", "warning",
            "--no-access-log", "--ws-ping-interval", "0"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_for(lambda: port_open(port), 10):
        proc.kill()
        raise SystemExit(f"{server} did not start")
    return proc


async def echo_clients(port: int, clients: int, seconds: float, compression) -> float:
    import websockets

    counts = [0] * clients
    deadline = time.monotonic() + seconds

    async def one(i: int) -> None:
        async with websockets.connect(f"ws://127.0.0.1:{port}/echo", compression=compression) as ws:
            message = "x" * 32
            while time.monotonic() < deadline:
                await ws.send(message)
                await ws.recv()
                counts[i] += 1

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(clients)))
    return sum(counts) / (time.monotonic() - started)


def idle_cost(proc: subprocess.Popen, port: int, n: int) -> float:
    warm = [RawWS(port, "/idle") for _ in range(50)]
    time.sleep(0.5)
    before = rss_kb(proc.pid)
    socks = [RawWS(port, "/idle") for _ in range(n)]
    time.sleep(1.0)
    after = rss_kb(proc.pid)
    for s in warm + socks:
        s.close()
    return (after - before) * 1024 / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", nargs="+", default=["zigcorn", "uvicorn"])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="best of this many runs, servers alternating")
    opts = parser.parse_args()
    procs = {}
    for server in opts.servers:
        port = free_port()
        procs[server] = (start(server, port), port)
    best = {(server, mode): 0.0 for server in opts.servers for mode in (None, "deflate")}
    try:
        # Alternating rounds, best of each: the machine is shared and noisy.
        for _ in range(opts.rounds):
            for server, (proc, port) in procs.items():
                for mode in (None, "deflate"):
                    rate = asyncio.run(echo_clients(port, opts.clients, opts.seconds, mode))
                    best[server, mode] = max(best[server, mode], rate)
        print("| server | echo msg/s (no compression) | echo msg/s (deflate) | RSS per idle WebSocket |")
        print("|---|---:|---:|---:|")
        for server, (proc, port) in procs.items():
            per_idle = idle_cost(proc, port, opts.idle)
            print(f"| {server} ({CONFIGURATION.get(server, 'defaults')}) | {best[server, None]:,.0f} | {best[server, 'deflate']:,.0f} | {per_idle:,.0f} B |")
    finally:
        for proc, _ in procs.values():
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
