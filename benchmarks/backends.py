"""zigcorn's I/O backends side by side: epoll and io_uring, the same build, one run.

    python benchmarks/backends.py                     # 3 alternating rounds of 5 s points
    python benchmarks/backends.py --rounds 1 --seconds 2 --idle 2000

Per backend (the `backend` column): raw app req/s at 1 and 64 connections and FastAPI at
64 (wrk; a fresh server per point, rounds alternate the order, epoll first then io_uring
first, and the median is reported, since these machines are shared and noisy), with the
server's CPU time per request over each point (user and system, busy poll included);
system calls per request at 64 connections (strace -c -f attached to the server over a
fixed number of requests: every call of every thread, the asyncio loop's own included);
and idle connections: RSS per connection over the second half of `--idle` keep-alive
connections, and the growth for all of them (io_uring's includes the pages of its
receive buffer ring that traffic has touched: `--io-uring-buffers` times
`--io-uring-buffer-size` at most, kept while the server runs).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import environment  # noqa: E402
from load import WRK_MISSING, run_wrk, wrk_path  # noqa: E402
from memory import idle_connection_cost, raise_nofile, settle  # noqa: E402
from servers import SERVERS, fresh_point, probe_env, start  # noqa: E402

BACKENDS = ("epoll", "io_uring")
POINTS = (("raw", "raw_c1", 1), ("raw", "raw_c64", 64), ("fastapi", "fastapi_c64", 64))
SPECS = {"epoll": "zigcorn-epoll", "io_uring": "zigcorn-io_uring"}


def syscalls_per_request(pid: int, port: int, requests: int, connections: int = 64) -> dict:
    """strace -c -f on the running server while wrk sends about `requests` requests."""
    out = Path(f"/tmp/zigcorn-strace-{pid}.txt")
    tracer = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", str(out)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(1.0)
    # wrk counts completed requests; strace slows the server, so the count decides, not time.
    done, deadline = 0, time.monotonic() + 120
    while done < requests and time.monotonic() < deadline:
        result = run_wrk(f"http://127.0.0.1:{port}/", connections, 2)
        done += result["requests"]
    tracer.send_signal(signal.SIGINT)
    tracer.wait(30)
    text = out.read_text()
    out.unlink()
    calls, per_name = 0, {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0].replace(".", "").isdigit() and parts[-1] != "total":
            n = int(parts[3])
            per_name[parts[-1]] = n
            calls += n
    top = dict(sorted(per_name.items(), key=lambda kv: -kv[1])[:6])
    return {"requests": done, "calls": calls, "per_request": round(calls / max(done, 1), 3),
            "top": {k: round(v / max(done, 1), 3) for k, v in top.items()}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--idle", type=int, default=10_000, help="idle keep-alive connections to hold (default 10000)")
    p.add_argument("--strace-requests", type=int, default=100_000)
    p.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "backends.json")
    p.add_argument("--no-venv", action="store_true", help="run zigcorn from the current Python")
    args = p.parse_args()
    if wrk_path() is None:
        print(WRK_MISSING, file=sys.stderr)
        return 2
    python = sys.executable if args.no_venv else str(Path(__file__).resolve().parent / ".venv" / "bin" / "python")
    env = probe_env(python)
    raise_nofile()
    results: dict = {b: {key: [] for _, key, _ in POINTS} for b in BACKENDS}
    cpu: dict = {b: {key: [] for _, key, _ in POINTS} for b in BACKENDS}
    for r in range(args.rounds):
        for backend in BACKENDS if r % 2 == 0 else BACKENDS[::-1]:
            for app, key, conns in POINTS:
                label = f"round {r + 1} {backend:8} {key:12}"
                got = fresh_point(SERVERS[SPECS[backend]], env, app, conns, args.seconds, label)
                results[backend][key].append(got["rps"])
                cpu[backend][key].append(got["server_cpu_us"])
    table = {}
    for backend in BACKENDS:
        row = {key: round(statistics.median(v)) for key, v in results[backend].items()}
        row["rounds"] = results[backend]
        row["server_cpu_us"] = {key: statistics.median(v) for key, v in cpu[backend].items()}
        row["server_cpu_us_rounds"] = cpu[backend]
        with start(SERVERS[SPECS[backend]], env, "raw") as server:
            server.wait_ready()
            if shutil.which("strace"):
                row["syscalls"] = syscalls_per_request(server.pid, server.port, args.strace_requests)
                print(f"{backend}: {row['syscalls']}", flush=True)
        with start(SERVERS[SPECS[backend]], env, "raw") as server:
            server.wait_ready()
            settle(server.pid)
            row["idle"] = idle_connection_cost(server.pid, server.port, args.idle)
            print(f"{backend}: idle {row['idle']}", flush=True)
        table[backend] = row
    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": environment.machine(), "backends": table}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1))
    print("\n| backend | raw c1 | raw c64 | FastAPI c64 | server CPU us/request (c1 / c64 / FastAPI c64) "
          "| syscalls/request c64 | idle conn bytes (slope) | RSS growth, idle |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for backend, row in table.items():
        sc = row.get("syscalls", {}).get("per_request", "n/a")
        idle = row["idle"]
        growth = (idle["rss_after_kib"] - idle["rss_before_kib"]) / 1024
        us = " / ".join(f"{row['server_cpu_us'][key]:.1f}" for _, key, _ in POINTS)
        print(f"| {backend} | {row['raw_c1']:,} | {row['raw_c64']:,} | {row['fastapi_c64']:,} | {us} | {sc} | "
              f"{idle['bytes_per_connection']} | {growth:.1f} MiB for {idle['alive']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
