"""--warmup-path: the summed PSS of four FastAPI workers with and without it, and the first
request's latency (RESULTS.md, warm-up section).

    python -m benchmarks.warmup_pss [--rounds 3] [--requests 400]

Each configuration starts a fresh server, sends the same requests (a new connection
each, so every worker serves some), lets memory settle, and reads PSS from
/proc/<pid>/smaps_rollup for the master and each worker.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

from benchmarks.memory import pss_kib, settle, tree_pids

APP = "benchmarks.apps.fastapi_app:app"
WARM = "/items/1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str) -> float:
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    conn.close()
    assert response.status == 200, response.status
    return time.perf_counter() - started


def start(port: int, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "zigcorn", APP, "--port", str(port), "--no-access-log", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not start")


def measure(workers: int, warmup: bool, requests: int) -> dict:
    port = free_port()
    args = ["--workers", str(workers)] if workers > 1 else []
    if warmup:
        args += ["--warmup-path", WARM]
    proc = start(port, *args)
    try:
        time.sleep(1.0 if workers > 1 else 0.2)  # every worker accepting
        first = get(port, "/items/2?q=x")
        for i in range(requests):
            get(port, f"/items/{i}?q=x")
        settle(proc.pid, min_processes=workers + (1 if workers > 1 else 0))
        pids = tree_pids(proc.pid)
        master = pss_kib(proc.pid)
        worker_pss = [pss_kib(pid) for pid in pids if pid != proc.pid]
        return {"total": master + sum(worker_pss), "master": master if workers > 1 else 0,
                "workers": sum(worker_pss) if workers > 1 else master, "first_ms": first * 1000}  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    rows = [("1 process", 1, False), ("1 process, warm-up", 1, True), ("4 workers", 4, False),
            ("4 workers, warm-up", 4, True)]  # fmt: skip
    results: dict[str, list[dict]] = {name: [] for name, _, _ in rows}
    for _ in range(args.rounds):
        for name, workers, warmup in rows:
            results[name].append(measure(workers, warmup, args.requests))
    print(f"zigcorn {os.environ.get('ZIGCORN_REV', '')} Python {sys.version.split()[0]}, median of {args.rounds}")
    print("| configuration | PSS, whole tree | master | workers | first request |")
    print("|---|---:|---:|---:|---:|")
    for name, _, _ in rows:
        med = {key: statistics.median(r[key] for r in results[name]) for key in results[name][0]}
        print(f"| {name} | {med['total'] / 1024:.1f} MiB | {med['master'] / 1024:.1f} MiB | "
              f"{med['workers'] / 1024:.1f} MiB | {med['first_ms']:.1f} ms |")  # fmt: skip


if __name__ == "__main__":
    main()
