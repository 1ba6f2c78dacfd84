"""WSGI: a Flask app on zigcorn (`--interface wsgi`, through a2wsgi's pool of 10 threads),
gunicorn (sync, and gthread with 10 threads) and granian's native WSGI interface, one
worker each, in one run.

    python benchmarks/wsgi.py                  # 10 s points
    python benchmarks/wsgi.py --seconds 3

Figures: req/s and p99 of `GET /` at 16 connections (gunicorn sync at 1, its design: one
request at a time per worker), and of a 1 MiB `POST /upload` at 4 connections (MB/s).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import environment  # noqa: E402
from load import WRK_MISSING, run_wrk, wrk_path  # noqa: E402
from memory import settle, tree_pids  # noqa: E402
from servers import APPS_DIR, free_port, http_get, server_environ  # noqa: E402

UPLOAD_LUA = 'wrk.method = "POST"\nwrk.body = string.rep("x", 1048576)\nwrk.path = "/upload"\n'


def commands(python: str, port: int) -> dict[str, list[str]]:
    bind = f"127.0.0.1:{port}"
    return {
        "zigcorn": [python, "-m", "zigcorn", "flask_app:app", "--interface", "wsgi", "--port", str(port),
                    "--no-access-log", "--log-level", "warning"],
        "gunicorn-sync": [python, "-m", "gunicorn", "-w", "1", "-k", "sync", "-b", bind, "flask_app:app"],
        "gunicorn-gthread": [python, "-m", "gunicorn", "-w", "1", "-k", "gthread", "--threads", "10", "-b", bind,
                             "flask_app:app"],
        "granian": [python, "-m", "granian", "--interface", "wsgi", "--host", "127.0.0.1", "--port", str(port),
                    "--workers", "1", "--no-access-log", "flask_app:app"],
    }


def measure(name: str, python: str, seconds: int, lua: str) -> dict:
    port = free_port()
    cmd = commands(python, port)[name]
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, cwd=APPS_DIR, env=server_environ(), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if http_get(port, "/")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"{name} did not start")
        rss = settle(proc.pid).rss_kib
        url = f"http://127.0.0.1:{port}"
        conns = 1 if name == "gunicorn-sync" else 16
        run_wrk(url + "/", conns, 1)
        hello = run_wrk(url + "/", conns, seconds)
        up_conns = 1 if name == "gunicorn-sync" else 4
        upload = run_wrk_script(url, lua, up_conns, seconds)
        return {"server": name, "hello_rps": hello["rps"], "hello_p99_ms": hello["p99_ms"], "hello_conns": conns,
                "upload_rps": upload["rps"], "upload_mb_s": round(upload["rps"] * 1048576 / 1e6, 1),
                "upload_conns": up_conns, "errors": hello["socket_errors_total"] + upload["socket_errors_total"]
                + hello["non_2xx_3xx"] + upload["non_2xx_3xx"], "idle_rss_kib": rss}
    finally:
        for pid in tree_pids(proc.pid) or [proc.pid]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        proc.wait()


def run_wrk_script(url: str, lua: str, connections: int, seconds: int) -> dict:
    from load import parse_wrk

    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout=10s", "--latency", "-s", lua, url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    return parse_wrk(out.stdout)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--servers", default="zigcorn,gunicorn-sync,gunicorn-gthread,granian")
    args = p.parse_args(argv)
    if wrk_path() is None:
        print(WRK_MISSING, file=sys.stderr)
        return 2
    python = environment.ensure_venv()
    environment.install(["flask", "a2wsgi", "gunicorn"])
    rows = []
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(UPLOAD_LUA)
        lua = f.name
    try:
        for name in args.servers.split(","):
            print(f"{name} ...", file=sys.stderr, flush=True)
            rows.append(measure(name, python, args.seconds, lua))
    finally:
        os.unlink(lua)
    base = next(r for r in rows if r["server"] == "zigcorn")
    print("| server | hello req/s (conns) | hello p99 | 1 MiB upload MB/s (conns) | errors | idle RSS |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['server']} | {r['hello_rps']:.0f} ({r['hello_conns']}, {r['hello_rps'] / base['hello_rps']:.2f}x) "
              f"| {r['hello_p99_ms']:.2f} ms | {r['upload_mb_s']:.0f} ({r['upload_conns']}, "
              f"{r['upload_mb_s'] / base['upload_mb_s']:.2f}x) | {r['errors']} | {r['idle_rss_kib'] / 1024:.1f} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
