"""Static files: Starlette `FileResponse` of a 32 MiB and a 4 KiB file, zigcorn beside
uvicorn and granian (and hypercorn), one worker each, in one run; or, with `--mount`,
files served by the servers themselves without the app: zigcorn's `--static`, granian's
`--static-path-mount` and nginx (when installed) as the machine's ceiling.

    python benchmarks/static.py                  # 10 s points; the servers from benchmarks/.venv
    python benchmarks/static.py --seconds 3 --servers zigcorn,uvicorn
    python benchmarks/static.py --mount          # zigcorn --static, granian, nginx

`--mount` figures per server: requests/s and p99 for a 1 KiB and a 256 KiB file at 64
connections (wrk), and the tree RSS at idle and its peak over 16 parallel downloads of a
32 MiB file.

Figures per server: MB/s downloading the 32 MiB file over 4 and 16 connections
(wrk, whole responses), requests/s and p99 for the 4 KiB file at 64 connections, and the
tree RSS at idle and its peak during the 16-connection large-file point. zigcorn serves
both with `http.response.pathsend` (sendfile(2)); granian advertises pathsend too;
uvicorn and hypercorn read the file through Python.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import environment  # noqa: E402
from load import WRK_MISSING, run_wrk, wrk_path  # noqa: E402
from memory import PeakSampler, raise_nofile, settle, tree_rss_kib  # noqa: E402
from servers import SERVERS, ServerSpec, http_get, named, probe_env, start  # noqa: E402

BIG = 32 * 1024 * 1024
SMALL = 4096


def measure(name: str, env, root: Path, seconds: int) -> dict:
    spec = SERVERS[name]
    os.environ["BENCH_STATIC_DIR"] = str(root)
    with start(spec, env, "static_app:app") as server:
        server.wait_ready()
        for file, size in (("big.bin", BIG), ("small.bin", SMALL)):
            status, body = http_get(server.port, f"/files/{file}", timeout=30)
            if status != 200 or len(body) != size:
                raise RuntimeError(f"{name} /files/{file} -> {status}, {len(body)} bytes")
        idle = settle(server.pid).rss_kib
        out: dict = {"server": name, "command": server.command, "idle_rss_kib": idle}
        url = f"http://127.0.0.1:{server.port}/files/"
        run_wrk(url + "small.bin", 64, 1)  # warm-up
        for conns in (4, 16):
            with PeakSampler(server.pid) as peak:
                r = run_wrk(url + "big.bin", conns, seconds, timeout_s=30)
            out[f"big_c{conns}"] = {
                "mb_per_s": round(r["requests"] * BIG / r["seconds"] / 1e6, 1),
                "responses": r["requests"],
                "errors": r["non_2xx_3xx"] + r["socket_errors_total"],
                "peak_rss_kib": peak.peak_kib,
                "rss_growth_kib": peak.peak_kib - idle,
            }
        r = run_wrk(url + "small.bin", 64, seconds)
        out["small_c64"] = {"rps": round(r["rps"]), "p99_ms": r["p99_ms"],
                            "errors": r["non_2xx_3xx"] + r["socket_errors_total"]}
        out["rss_after_kib"] = tree_rss_kib(server.pid)
        return out


def table(rows: list[dict]) -> str:
    base = next((r for r in rows if r["server"] == "zigcorn"), rows[0])
    lines = [
        "| server | 32 MiB, 4 conns MB/s | 32 MiB, 16 conns MB/s | RSS growth, 16 downloads | 4 KiB req/s c64 | 4 KiB p99 | idle RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        def ratio(key, sub):
            return f"{r[key][sub] / base[key][sub]:.2f}x" if base[key][sub] else "n/a"
        lines.append(
            f"| {named(r['server'], r['command'])} | {r['big_c4']['mb_per_s']:.0f} ({ratio('big_c4', 'mb_per_s')}) "
            f"| {r['big_c16']['mb_per_s']:.0f} ({ratio('big_c16', 'mb_per_s')}) "
            f"| {r['big_c16']['rss_growth_kib'] / 1024:.1f} MiB "
            f"| {r['small_c64']['rps']} ({ratio('small_c64', 'rps')}) | {r['small_c64']['p99_ms']:.2f} ms "
            f"| {r['idle_rss_kib'] / 1024:.1f} MiB |"
        )
    return "\n".join(lines)


MOUNT_FILES = {"1k.bin": 1024, "256k.bin": 256 * 1024, "big.bin": BIG}

NGINX_STATIC_CONF = """\
daemon off;
master_process on;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location = / {{ return 200 "ok"; }}
        location /static/ {{ alias {root}/; }}
    }}
}}
"""


def mount_specs(root: Path) -> dict[str, ServerSpec]:
    """The three servers, each serving `root` at /static/ itself (the app answers only `GET /`)."""
    def zigcorn(env, app, port, workers, workdir):
        return SERVERS["zigcorn"].command(env, app, port, workers, workdir) + ["--static", f"/static={root}"]

    def granian(env, app, port, workers, workdir):
        cmd = SERVERS["granian"].command(env, app, port, workers, workdir)
        return cmd[:-1] + ["--static-path-route", "/static", "--static-path-mount", str(root), cmd[-1]]

    def nginx(env, app, port, workers, workdir):
        conf = workdir / "nginx.conf"
        conf.write_text(NGINX_STATIC_CONF.format(tmp=workdir, port=port, root=root))
        return ["nginx", "-p", str(workdir), "-e", f"{workdir}/error.log", "-c", str(conf)]

    return {
        "zigcorn": ServerSpec("zigcorn", zigcorn, ("zigcorn",)),
        "granian": ServerSpec("granian", granian, ("granian",)),
        "nginx": ServerSpec("nginx", nginx, binary="nginx", is_app_server=False),
    }


def measure_mount(spec: ServerSpec, env, seconds: int) -> dict:
    with start(spec, env, "raw") as server:
        server.wait_ready()
        for file, size in MOUNT_FILES.items():
            status, body = http_get(server.port, f"/static/{file}", timeout=30)
            if status != 200 or len(body) != size:
                raise RuntimeError(f"{spec.name} /static/{file} -> {status}, {len(body)} bytes")
        idle = settle(server.pid).rss_kib
        out: dict = {"server": spec.name, "command": server.command, "version": spec.version(env), "idle_rss_kib": idle,
                     "loadavg_before": round(os.getloadavg()[0], 2)}  # other work on a shared machine
        url = f"http://127.0.0.1:{server.port}/static/"
        run_wrk(url + "1k.bin", 64, 1)  # warm-up
        for file, key in (("1k.bin", "1k_c64"), ("256k.bin", "256k_c64")):
            r = run_wrk(url + file, 64, seconds)
            out[key] = {"rps": round(r["rps"]), "p99_ms": r["p99_ms"],
                        "mb_per_s": round(r["requests"] * MOUNT_FILES[file] / r["seconds"] / 1e6, 1),
                        "errors": r["non_2xx_3xx"] + r["socket_errors_total"]}
        with PeakSampler(server.pid) as peak:
            r = run_wrk(url + "big.bin", 16, seconds, timeout_s=30)
        out["big_c16"] = {"mb_per_s": round(r["requests"] * BIG / r["seconds"] / 1e6, 1),
                          "errors": r["non_2xx_3xx"] + r["socket_errors_total"],
                          "peak_rss_kib": peak.peak_kib, "rss_growth_kib": peak.peak_kib - idle}
        return out


def mount_table(rows: list[dict]) -> str:
    z = next((r for r in rows if r["server"] == "zigcorn"), None)
    lines = [
        "| server | 1 KiB req/s c64 | p99 | 256 KiB req/s c64 | p99 | 32 MiB c16 MB/s | RSS growth, 16 downloads | idle RSS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        def vs(key):
            # zigcorn's figure over this server's: >1 means zigcorn is faster.
            if z is None or r is z or not r[key]["rps"]:
                return ""
            return f" (zigcorn {z[key]['rps'] / r[key]['rps']:.2f}x)"
        lines.append(
            f"| {named(r['server'], r['command'])} | {r['1k_c64']['rps']:,}{vs('1k_c64')} | {r['1k_c64']['p99_ms']:.2f} ms "
            f"| {r['256k_c64']['rps']:,}{vs('256k_c64')} | {r['256k_c64']['p99_ms']:.2f} ms "
            f"| {r['big_c16']['mb_per_s']:,.0f} | {r['big_c16']['rss_growth_kib'] / 1024:.1f} MiB "
            f"| {r['idle_rss_kib'] / 1024:.1f} MiB |"
        )
    return "\n".join(lines)


def main_mount(args, env) -> int:
    rows = []
    with tempfile.TemporaryDirectory(prefix="zigcorn-static-mount-") as tmp:
        root = Path(tmp)
        for name, size in MOUNT_FILES.items():
            (root / name).write_bytes(os.urandom(size))
        os.chmod(tmp, 0o755)  # nginx's workers may run as another user
        specs = mount_specs(root)
        for name in args.servers.split(","):
            spec = specs[name]
            if not spec.available(env):
                print(f"{name}: not installed, skipped", file=sys.stderr)
                continue
            print(f"{name} ...", file=sys.stderr, flush=True)
            rows.append(measure_mount(spec, env, args.seconds))
            time.sleep(1)
    result = {"date": time.strftime("%Y-%m-%d"), "machine": environment.machine(), "mount": True, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(mount_table(rows))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--servers", help="default: zigcorn,uvicorn,granian,hypercorn; with --mount zigcorn,granian,nginx")
    p.add_argument("--mount", action="store_true", help="files served by the servers themselves, not the app")
    p.add_argument("--no-venv", action="store_true", help="run the servers from this interpreter")
    p.add_argument("--json", help="write the results here too")
    args = p.parse_args(argv)
    if wrk_path() is None:
        print(WRK_MISSING, file=sys.stderr)
        return 2
    raise_nofile()
    env = probe_env(sys.executable if args.no_venv else environment.ensure_venv())
    if args.mount:
        args.servers = args.servers or "zigcorn,granian,nginx"
        return main_mount(args, env)
    args.servers = args.servers or "zigcorn,uvicorn,granian,hypercorn"
    rows = []
    with tempfile.TemporaryDirectory(prefix="zigcorn-static-") as tmp:
        root = Path(tmp)
        (root / "big.bin").write_bytes(os.urandom(BIG))
        (root / "small.bin").write_bytes(os.urandom(SMALL))
        for name in args.servers.split(","):
            if not SERVERS[name].available(env):
                print(f"{name}: not installed, skipped", file=sys.stderr)
                continue
            print(f"{name} ...", file=sys.stderr, flush=True)
            rows.append(measure(name, env, root, args.seconds))
            time.sleep(1)
    result = {"date": time.strftime("%Y-%m-%d"), "machine": environment.machine(), "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
