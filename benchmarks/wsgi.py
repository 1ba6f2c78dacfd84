"""WSGI: a Flask app on zigcorn (`--interface wsgi`, served by the engine), granian's
native WSGI interface and gunicorn (gthread with 10 threads; sync on request), one worker
each, in one run; then each with four workers, for their memory.

    python benchmarks/wsgi.py                  # 10 s points
    python benchmarks/wsgi.py --seconds 3 --servers zigcorn,granian
    python benchmarks/wsgi.py --rounds 5 --servers zigcorn,granian   # alternated rounds, medians
    python benchmarks/wsgi.py --rounds 4 --servers zigcorn,granian --burners 2 --hello-only --no-workers

With `--burners N`, N processes that only spin (`while True: pass`) run beside the whole
measurement, so the servers compete for the CPUs as they do on a busy host; they are
started before the first round and killed (their process group) when it ends.

With `--rounds N` each server is measured N times, the servers' order reversed every
round so that neither always runs first, and the medians are reported (every round's
figure too): on a shared machine the ratio of medians is the one to quote.

Figures: req/s and p99 of Flask's `GET /` (a JSON hello) at 64 connections (gunicorn sync
at 1, its design: one request at a time per worker); a 1 MiB `POST /echo` (Flask reads
the body and answers it back) at 4 connections, in MB/s each way; the idle RSS of one
worker after its first requests; the PSS of the whole tree with `--workers 4` (a master,
where the server has one, and four workers, each having served requests).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import environment  # noqa: E402
from load import WRK_MISSING, run_wrk, wrk_path  # noqa: E402
from memory import settle, tree_pids  # noqa: E402
from servers import APPS_DIR, free_port, http_get, named, server_environ  # noqa: E402

ECHO_LUA = 'wrk.method = "POST"\nwrk.body = string.rep("x", 1048576)\nwrk.path = "/echo"\n'
HELLO_CONNS = 64
ECHO_CONNS = 4


def commands(python: str, port: int, workers: int) -> dict[str, list[str]]:
    bind = f"127.0.0.1:{port}"
    w = str(workers)
    return {
        "zigcorn": [python, "-m", "zigcorn", "flask_app:app", "--interface", "wsgi", "--port", str(port),
                    "--workers", w, "--no-access-log", "--log-level", "warning"],
        "granian": [python, "-m", "granian", "--interface", "wsgi", "--host", "127.0.0.1", "--port", str(port),
                    "--workers", w, "--no-access-log", "flask_app:app"],
        "gunicorn-gthread": [python, "-m", "gunicorn", "-w", w, "-k", "gthread", "--threads", "10", "-b", bind,
                             "flask_app:app"],
        "gunicorn-sync": [python, "-m", "gunicorn", "-w", w, "-k", "sync", "-b", bind, "flask_app:app"],
    }


class Running:
    def __init__(self, name: str, python: str, workers: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(commands(python, self.port, workers)[name], cwd=APPS_DIR, env=server_environ(),
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if http_get(self.port, "/")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{name} did not start")

    def stop(self) -> None:
        for pid in tree_pids(self.proc.pid) or [self.proc.pid]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        self.proc.wait()


def measure(name: str, python: str, seconds: int, lua: str | None) -> dict:
    """One round of one server; `lua` None: the hello only (the echo figures read 0)."""
    server = Running(name, python, 1)
    try:
        for _ in range(20):
            http_get(server.port, "/")
        rss = settle(server.proc.pid).rss_kib
        conns = 1 if name == "gunicorn-sync" else HELLO_CONNS
        run_wrk(server.url + "/", conns, 1)
        hello = run_wrk(server.url + "/", conns, seconds)
        echo_conns = 1 if name == "gunicorn-sync" else ECHO_CONNS
        echo = {"rps": 0.0, "socket_errors_total": 0, "non_2xx_3xx": 0}
        if lua is not None:
            run_wrk_script(server.url, lua, echo_conns, 1)
            echo = run_wrk_script(server.url, lua, echo_conns, seconds)
    finally:
        server.stop()
    return {"server": name, "command": commands(python, server.port, 1)[name], "hello_rps": hello["rps"], "hello_p99_ms": hello["p99_ms"], "hello_conns": conns,
            "echo_rps": echo["rps"], "echo_mb_s": round(echo["rps"] * 1048576 / 1e6, 1), "echo_conns": echo_conns,
            "errors": hello["socket_errors_total"] + echo["socket_errors_total"] + hello["non_2xx_3xx"]
            + echo["non_2xx_3xx"], "idle_rss_kib": rss}


def workers_pss(name: str, python: str) -> int:
    """PSS of the tree with four workers, each having served requests (kernel load-balanced)."""
    server = Running(name, python, 4)
    try:
        run_wrk(server.url + "/", 16, 2)
        return settle(server.proc.pid, min_processes=5).pss_kib
    finally:
        server.stop()


class Burners:
    """`count` processes spinning on a CPU each, in one process group, for contention."""

    def __init__(self, count: int) -> None:
        self.procs = []
        for _ in range(count):
            kw = {"process_group": self.procs[0].pid} if self.procs else {"process_group": 0}
            self.procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"], **kw))

    def stop(self) -> None:
        if self.procs:
            os.killpg(self.procs[0].pid, 9)
            for proc in self.procs:
                proc.wait()


def run_wrk_script(url: str, lua: str, connections: int, seconds: int) -> dict:
    from load import parse_wrk

    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout=10s", "--latency", "-s", lua, url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    return parse_wrk(out.stdout)


def median_row(runs: list[dict]) -> dict:
    """The median of each figure over a server's rounds (errors summed)."""
    row = dict(runs[0])
    for key in ("hello_rps", "hello_p99_ms", "echo_rps", "echo_mb_s", "idle_rss_kib"):
        row[key] = statistics.median(r[key] for r in runs)
    row["errors"] = sum(r["errors"] for r in runs)
    return row


def _ratio(value: float, base: float) -> str:
    return f"{value:.0f} ({value / base:.2f}x)" if base else "-"


def print_table(rows: list[dict], rounds: dict[str, list[dict]] | None) -> None:
    base = next((r for r in rows if r["server"] == "zigcorn"), rows[0])
    print(f"| server | Flask hello req/s (c{HELLO_CONNS}) | hello p99 | 1 MiB POST echo MB/s (c{ECHO_CONNS}) "
          "| errors | idle RSS, 1 worker | PSS, 4 workers |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        pss = "-" if r["pss4_kib"] is None else f"{r['pss4_kib'] / 1024:.1f} MiB"
        print(f"| {named(r['server'], r.get('command'))} | {r['hello_rps']:.0f} ({r['hello_rps'] / base['hello_rps']:.2f}x) "
              f"| {r['hello_p99_ms']:.2f} ms | {_ratio(r['echo_mb_s'], base['echo_mb_s'])} "
              f"| {r['errors']} | {r['idle_rss_kib'] / 1024:.1f} MiB | {pss} |")
    if rounds:
        print()
        for name, runs in rounds.items():
            print(f"{name}: hello " + ", ".join(f"{r['hello_rps']:.0f}" for r in runs)
                  + "; echo MB/s " + ", ".join(f"{r['echo_mb_s']:.0f}" for r in runs))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--servers", default="zigcorn,granian,gunicorn-gthread")
    p.add_argument("--no-workers", action="store_true", help="skip the four-worker PSS")
    p.add_argument("--rounds", type=int, default=1, help="alternated rounds per server; medians reported")
    p.add_argument("--burners", type=int, default=0, help="spinning processes beside the run (CPU contention)")
    p.add_argument("--hello-only", action="store_true", help="skip the 1 MiB echo")
    args = p.parse_args(argv)
    if wrk_path() is None:
        print(WRK_MISSING, file=sys.stderr)
        return 2
    python = environment.ensure_venv()
    environment.install(["flask", "gunicorn"])
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(ECHO_LUA)
        lua = f.name
    names = args.servers.split(",")
    rounds: dict[str, list[dict]] = {name: [] for name in names}
    burners = Burners(args.burners)
    try:
        for i in range(args.rounds):
            for name in names if i % 2 == 0 else names[::-1]:
                print(f"{name} (round {i + 1}/{args.rounds}) ...", file=sys.stderr, flush=True)
                rounds[name].append(measure(name, python, args.seconds, None if args.hello_only else lua))
        rows = [median_row(rounds[name]) for name in names]
        for row in rows:
            row["pss4_kib"] = None if args.no_workers else workers_pss(row["server"], python)
    finally:
        burners.stop()
        os.unlink(lua)
    print_table(rows, rounds if args.rounds > 1 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
