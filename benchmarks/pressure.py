"""Latency of fresh requests while a server holds 10,000 idle keep-alive connections and
1,000 slow clients (slowloris: heads that arrive a byte at a time), beside the same load
on an unburdened server, in one run.

    python benchmarks/pressure.py                       # zigcorn, uvicorn, granian; 10 s points
    python benchmarks/pressure.py --servers zigcorn --seconds 5 --idle 2000 --slow 200

For each server: wrk -c16 on the raw app's `/` without pressure, then again while the
idle and slow connections are held (the slow ones get one more byte every second, so
their heads never complete within the point). Reported: req/s, p50 and p99 of both, the
ratio of p99 under pressure to p99 without, errors, and how many of the held connections
the server still had open at the end (a server may close slow clients: that is its
defence, and is shown).
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import environment  # noqa: E402
from load import WRK_MISSING, run_wrk, wrk_path  # noqa: E402
from memory import _hold, _still_open, raise_nofile, tree_rss_kib  # noqa: E402
from servers import SERVERS, probe_env, start  # noqa: E402


class Slowloris:
    """`count` connections whose request heads never finish: a byte a second each."""

    def __init__(self, port: int, count: int):
        self.socks = []
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            self.socks.append(s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            for s in self.socks:
                try:
                    s.send(b"X")
                except OSError:
                    pass

    def close(self) -> int:
        self._stop.set()
        self._thread.join()
        alive = sum(_still_open(s) for s in self.socks)
        for s in self.socks:
            s.close()
        return alive


def measure(name: str, env, seconds: int, idle_count: int, slow_count: int) -> dict:
    with start(SERVERS[name], env, "raw") as server:
        server.wait_ready()
        url = f"http://127.0.0.1:{server.port}/"
        run_wrk(url, 16, 1)
        calm = run_wrk(url, 16, seconds)
        idle = _hold(server.port, idle_count)
        slow = Slowloris(server.port, slow_count)
        try:
            rss = tree_rss_kib(server.pid)
            loaded = run_wrk(url, 16, seconds)
            idle_alive = sum(_still_open(s) for s in idle)
        finally:
            slow_alive = slow.close()
            for s in idle:
                s.close()
        pick = ("rps", "p50_ms", "p99_ms", "socket_errors_total", "non_2xx_3xx")
        return {
            "server": name,
            "calm": {k: calm[k] for k in pick},
            "pressure": {k: loaded[k] for k in pick},
            "rss_under_pressure_kib": rss,
            "idle_alive": idle_alive,
            "slow_alive": slow_alive,
        }


def table(rows: list[dict], idle_count: int, slow_count: int) -> str:
    out = [f"| server | req/s calm | req/s with {idle_count} idle + {slow_count} slow | p99 calm | p99 under pressure | "
           "p99 ratio | errors | idle / slow still open | RSS under pressure |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "failed" in r:
            out.append(f"| {r['server']} | failed: {r['failed']} |" + " |" * 7)
            continue
        c, p = r["calm"], r["pressure"]
        errors = p["socket_errors_total"] + p["non_2xx_3xx"]
        out.append(f"| {r['server']} | {c['rps']:.0f} | {p['rps']:.0f} | {c['p99_ms']:.2f} ms | {p['p99_ms']:.2f} ms "
                   f"| {p['p99_ms'] / c['p99_ms']:.2f}x | {errors} | {r['idle_alive']} / {r['slow_alive']} "
                   f"| {r['rss_under_pressure_kib'] / 1024:.1f} MiB |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--idle", type=int, default=10_000)
    p.add_argument("--slow", type=int, default=1_000)
    p.add_argument("--servers", default="zigcorn,uvicorn,granian")
    p.add_argument("--no-venv", action="store_true")
    args = p.parse_args(argv)
    if wrk_path() is None:
        print(WRK_MISSING, file=sys.stderr)
        return 2
    raise_nofile()
    env = probe_env(sys.executable if args.no_venv else environment.ensure_venv())
    rows = []
    for name in args.servers.split(","):
        if not SERVERS[name].available(env):
            print(f"{name}: not installed, skipped", file=sys.stderr)
            continue
        print(f"{name} ...", file=sys.stderr, flush=True)
        try:
            rows.append(measure(name, env, args.seconds, args.idle, args.slow))
        except (OSError, RuntimeError) as exc:  # a server that cannot hold the load is a result too
            print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            rows.append({"server": name, "failed": f"{type(exc).__name__}: {exc}"})
        time.sleep(1)
    print(table(rows, args.idle, args.slow))
    return 0


if __name__ == "__main__":
    sys.exit(main())
