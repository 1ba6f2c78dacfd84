"""zigcorn's I/O backends side by side: epoll and io_uring, the same build, one run.

    python benchmarks/backends.py                     # 3 alternating rounds of 5 s points
    python benchmarks/backends.py --rounds 1 --seconds 2 --idle 2000
    python benchmarks/backends.py --points h2c,h2_tls,https_c64,gzip_c64 --no-syscalls --no-idle

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

`--points` picks the points (default: the three above). The others are the protocols
beside plain HTTP/1.1, so a backend change can be judged on them too: `h2c` and `h2_tls`
(the raw app, h2load with 16 connections of 10 streams; needs nghttp2-client), `https_c64`
(the raw app over TLS, HTTP/1.1, wrk at 64 connections) and `gzip_c64` (FastAPI's 20 KiB
JSON document with `--compression gzip`, wrk at 64 connections asking for gzip).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import environment  # noqa: E402
from load import WRK_MISSING, cpu_seconds, run_wrk, wrk_path  # noqa: E402
from memory import idle_connection_cost, raise_nofile, settle  # noqa: E402
from servers import SERVERS, fresh_point, http_get, probe_env, start  # noqa: E402

BACKENDS = ("epoll", "io_uring")
# key -> (app, connections) for the plain HTTP/1.1 points (servers.fresh_point).
WRK_POINTS = {"raw_c1": ("raw", 1), "raw_c64": ("raw", 64), "fastapi_c64": ("fastapi", 64)}
PROTOCOL_POINTS = ("h2c", "h2_tls", "https_c64", "gzip_c64")
DEFAULT_POINTS = tuple(WRK_POINTS)
SPECS = {"epoll": "zigcorn-epoll", "io_uring": "zigcorn-io_uring"}
H2_CLIENTS, H2_STREAMS = 16, 10


def _with_flags(spec, extra: list[str]):
    """`spec` with `extra` options on its command line."""
    base = spec.command
    return dataclasses.replace(spec, command=lambda *a: base(*a) + extra)


def protocol_point(key: str, spec, env, seconds: int, certs, label: str) -> dict:
    """One of PROTOCOL_POINTS on a fresh process of `spec`: a 1 s warm-up, then `seconds`
    of load, with the server's CPU time per request."""
    import h2

    if key in ("h2c", "h2_tls"):
        tls = certs if key == "h2_tls" else None
        server = h2._started_h2(spec, env, "raw", tls)
        url = f"{'https' if tls else 'http'}://127.0.0.1:{server.port}/"

        def load(s: int) -> dict:
            return h2.run_h2load(url, H2_CLIENTS, H2_STREAMS, s, 0)
    elif key == "https_c64":
        server = h2._started_h2(spec, env, "raw", certs)  # zigcorn's TLS flags; ALPN checked
        url = f"https://127.0.0.1:{server.port}/"

        def load(s: int) -> dict:
            return run_wrk(url, 64, s)
    else:  # gzip_c64
        server = start(_with_flags(spec, ["--compression", "gzip"]), env, "compress_fastapi_app:app")
        url = f"http://127.0.0.1:{server.port}/doc"

        def load(s: int) -> dict:
            return run_wrk(url, 64, s, headers=("accept-encoding: gzip",))
    with server:
        if key == "gzip_c64":
            _wait_for(server, "/doc")
        load(1)  # warm-up
        before = cpu_seconds(server.pid)
        got = load(seconds)
        used = cpu_seconds(server.pid) - before
    errors = got["errors"] if "errors" in got else got["non_2xx_3xx"] + got["socket_errors_total"]
    if errors:
        raise RuntimeError(f"{label}: {errors} requests failed")
    got["server_cpu_us"] = round(used / max(got["requests"], 1) * 1e6, 2)
    print(f"{label} {got['rps']:10.0f} req/s {got['server_cpu_us']:7.2f} server CPU us/request", flush=True)
    return got


def _wait_for(server, path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.spec.name} exited:\n{server.output()}")
        try:
            if http_get(server.port, path)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{server.spec.name}: {path} not answering within {timeout:.0f}s")


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
    p.add_argument("--points", default=",".join(DEFAULT_POINTS),
                   help=f"comma-separated, of {', '.join((*WRK_POINTS, *PROTOCOL_POINTS))}")
    p.add_argument("--idle", type=int, default=10_000, help="idle keep-alive connections to hold (default 10000)")
    p.add_argument("--no-idle", action="store_true", help="leave out the idle-connection measurement")
    p.add_argument("--no-syscalls", action="store_true", help="leave out the strace count")
    p.add_argument("--strace-requests", type=int, default=100_000)
    p.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "backends.json")
    p.add_argument("--no-venv", action="store_true", help="run zigcorn from the current Python")
    args = p.parse_args()
    points = [k for k in args.points.split(",") if k]
    unknown = [k for k in points if k not in WRK_POINTS and k not in PROTOCOL_POINTS]
    if unknown:
        p.error(f"unknown points: {', '.join(unknown)}")
    if wrk_path() is None:
        print(WRK_MISSING, file=sys.stderr)
        return 2
    python = sys.executable if args.no_venv else str(Path(__file__).resolve().parent / ".venv" / "bin" / "python")
    env = probe_env(python)
    raise_nofile()
    certs = None
    if any(k in PROTOCOL_POINTS for k in points) and not args.no_venv:
        import h2
        missing = [pip for module, pip in h2.EXTRAS.items() if not env.has(module)]
        if missing:
            environment.install(missing)
            env = probe_env(python)
    if any(k in ("h2_tls", "https_c64") for k in points):
        import h2
        certs = h2.make_certs(env, Path(tempfile.mkdtemp(prefix="zigcorn-bench-backends-")))
    results: dict = {b: {key: [] for key in points} for b in BACKENDS}
    cpu: dict = {b: {key: [] for key in points} for b in BACKENDS}
    for r in range(args.rounds):
        for backend in BACKENDS if r % 2 == 0 else BACKENDS[::-1]:
            spec = SERVERS[SPECS[backend]]
            for key in points:
                label = f"round {r + 1} {backend:8} {key:12}"
                if key in WRK_POINTS:
                    app, conns = WRK_POINTS[key]
                    got = fresh_point(spec, env, app, conns, args.seconds, label)
                else:
                    got = protocol_point(key, spec, env, args.seconds, certs, label)
                results[backend][key].append(got["rps"])
                cpu[backend][key].append(got["server_cpu_us"])
    table = {}
    for backend in BACKENDS:
        row = {key: round(statistics.median(v)) for key, v in results[backend].items()}
        row["rounds"] = results[backend]
        row["server_cpu_us"] = {key: statistics.median(v) for key, v in cpu[backend].items()}
        row["server_cpu_us_rounds"] = cpu[backend]
        if not args.no_syscalls and shutil.which("strace"):
            with start(SERVERS[SPECS[backend]], env, "raw") as server:
                server.wait_ready()
                row["syscalls"] = syscalls_per_request(server.pid, server.port, args.strace_requests)
                print(f"{backend}: {row['syscalls']}", flush=True)
        if not args.no_idle:
            with start(SERVERS[SPECS[backend]], env, "raw") as server:
                server.wait_ready()
                settle(server.pid)
                row["idle"] = idle_connection_cost(server.pid, server.port, args.idle)
                print(f"{backend}: idle {row['idle']}", flush=True)
        table[backend] = row
    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": environment.machine(), "backends": table}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1))
    print("\n| backend | " + " | ".join(points) + " | server CPU us/request (" + " / ".join(points)
          + ") | syscalls/request c64 | idle conn bytes (slope) | RSS growth, idle |")
    print("|---|" + "---:|" * (len(points) + 4))
    for backend, row in table.items():
        sc = row.get("syscalls", {}).get("per_request", "n/a")
        idle = row.get("idle")
        growth = f"{(idle['rss_after_kib'] - idle['rss_before_kib']) / 1024:.1f} MiB for {idle['alive']:,}" \
            if idle else "n/a"
        us = " / ".join(f"{row['server_cpu_us'][key]:.1f}" for key in points)
        rates = " | ".join(f"{row[key]:,}" for key in points)
        print(f"| {backend} | {rates} | {us} | {sc} | {idle['bytes_per_connection'] if idle else 'n/a'} | {growth} |")
    print("\nio_uring / epoll per round: " + "; ".join(
        f"{key} " + ", ".join(f"{u / e:.2f}" for e, u in zip(results['epoll'][key], results['io_uring'][key]))
        for key in points))
    return 0


if __name__ == "__main__":
    sys.exit(main())
