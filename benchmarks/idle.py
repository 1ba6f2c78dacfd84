"""Idle keep-alive connections on both I/O backends, and what a burst of them leaves behind.

    python benchmarks/idle.py                           # 1,000, 10,000 and the most the limit allows
    python benchmarks/idle.py --counts 1000,10000 --rounds 3

zigcorn runs from the current Python (the raw app, one worker). Per point, a fresh
server: `memory.idle_connection_cost` (RSS with half the connections, then all, read
once settled; the slope over the second half is the figure), then every connection
closes and RSS is read at once (0.2 s) and once settled: what the burst left held.
A point where a connection did not stay open to the end (`alive` below `opened`) is
flagged: its slope does not count them all.
The backends alternate within each round. The descriptor limit is raised to its hard
limit; "max" is that limit less what the server and this client need besides.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory import _hold, raise_nofile, settle, snapshot  # noqa: E402
from memory import idle_connection_cost  # noqa: E402
from servers import SERVERS, probe_env  # noqa: E402
from servers import start  # noqa: E402

BACKENDS = ("epoll", "io_uring")
SPECS = {"epoll": "zigcorn-epoll", "io_uring": "zigcorn-io_uring"}
# Descriptors the server and this client use besides the connections (listener, ring,
# eventfds, timers, Python's own).
SPARE_FDS = 100
# Opening 19,900 connections 50 at a time on a loaded machine, with the settling waits,
# can pass the benchmarks' usual 60 s keep-alive: the first ones would be closed under us.
KEEP_ALIVE_S = 900


def _spec(backend: str):
    spec = SERVERS[SPECS[backend]]
    base = spec.command
    return dataclasses.replace(spec, command=lambda *a: base(*a) + ["--timeout-keep-alive", str(KEEP_ALIVE_S)])


def burst_left(root: int, port: int, count: int) -> dict:
    """Open `count` connections (one request each), close them all, and read RSS: 0.2 s
    after the last close, and once settled. Each reading waits out two of the engine's
    once-a-second ticks first (the buffer pool, the heap and io_uring's receive ring
    give memory back on a tick that saw no traffic), so "before" holds nothing of the
    measurement before it and "settled" all that was given back."""
    before = settle(root, min_wait=2.5, tolerance_kib=16)
    socks = _hold(port, count)
    for sock in socks:
        sock.close()
    time.sleep(0.2)
    at_once = snapshot(root)
    settled = settle(root, min_wait=2.5, tolerance_kib=16)
    return {"rss_before_kib": before.rss_kib, "rss_at_once_kib": at_once.rss_kib,
            "rss_settled_kib": settled.rss_kib, "held_at_once_kib": at_once.rss_kib - before.rss_kib,
            "held_settled_kib": settled.rss_kib - before.rss_kib}


def point(backend: str, env, count: int) -> dict:
    with start(_spec(backend), env, "raw") as server:
        server.wait_ready()
        settle(server.pid)
        cost = idle_connection_cost(server.pid, server.port, count)
        cost["burst"] = burst_left(server.pid, server.port, count)
        return cost


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--counts", default="1000,10000,max", help="comma-separated; 'max': the descriptor limit")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "idle.json")
    args = p.parse_args()
    limit = raise_nofile()
    counts = [limit - SPARE_FDS if c == "max" else int(c) for c in args.counts.split(",") if c]
    env = probe_env(sys.executable)
    rows: dict = {b: {c: [] for c in counts} for b in BACKENDS}
    for r in range(args.rounds):
        for count in counts:
            for backend in BACKENDS if r % 2 == 0 else BACKENDS[::-1]:
                got = point(backend, env, count)
                rows[backend][count].append(got)
                b = got["burst"]
                flag = "" if got["alive"] == got["opened"] else " (NOT ALL ALIVE)"
                print(f"round {r + 1} {backend:8} {count:6}: {got['bytes_per_connection']} B/conn{flag}, "
                      f"RSS {got['rss_before_kib']} -> {got['rss_after_kib']} KiB, PSS {got['pss_before_kib']} -> "
                      f"{got['pss_after_kib']} KiB, alive {got['alive']}; burst closed: held "
                      f"{b['held_at_once_kib']} KiB at once, {b['held_settled_kib']} KiB settled", flush=True)
    print("\n| backend | connections | bytes per idle connection (each round) | RSS / PSS with all open, KiB "
          "| held after the burst closed: at once / settled, KiB |")
    print("|---|---:|---|---|---|")
    for backend in BACKENDS:
        for count in counts:
            got = rows[backend][count]
            per = ", ".join(str(g["bytes_per_connection"]) for g in got)
            mem = ", ".join(f"{g['rss_after_kib']:,} / {g['pss_after_kib']:,}" for g in got)
            held = ", ".join(f"{g['burst']['held_at_once_kib']} / {g['burst']['held_settled_kib']}" for g in got)
            med = statistics.median(g["bytes_per_connection"] for g in got)
            print(f"| {backend} | {count:,} | {per} (median {med:g}) | {mem} | {held} |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
