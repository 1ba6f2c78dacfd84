"""zigcorn on its event loops side by side (its own, uvloop, asyncio's), with saltare's
memory beside them: the own-loop issue's figures, in one run.

    python benchmarks/loops.py                        # 3 alternating rounds of 5 s points
    python benchmarks/loops.py --rounds 1 --seconds 2

- Throughput: raw app at 1 and 64 connections, FastAPI at 64 (wrk), for `zigcorn`
  (default flags: `--loop auto`, which is zigcorn's loop), `zigcorn-uvloop` and
  `zigcorn-asyncio`. The rounds alternate the loops and the median is reported, since
  these machines are shared and noisy. Beside each point, the server's CPU time per
  request (user and system, busy poll included).
- Idle RSS: a fresh process of each (and of saltare) with the raw app and with FastAPI,
  once it has answered and its memory stopped moving, median of the rounds. Whether
  `ssl` and `uvloop` are imported in that process is read from /proc/PID/maps
  (libssl/libcrypto, uvloop's extension).
- The loop's own work, no server: `loop_micro.py`'s five points for asyncio, uvloop and
  zigcorn's loop (best of 3), in the same interpreter as the servers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import environment  # noqa: E402
from load import WRK_MISSING, wrk_path  # noqa: E402
from memory import raise_nofile, settle  # noqa: E402
from servers import SERVERS, fresh_point, probe_env, start  # noqa: E402

LOOPS = {"zigcorn": "zigcorn", "uvloop": "zigcorn-uvloop", "asyncio": "zigcorn-asyncio"}
POINTS = (("raw", "raw_c1", 1), ("raw", "raw_c64", 64), ("fastapi", "fastapi_c64", 64))


def mapped(pid: int) -> dict:
    """Which of libssl/libcrypto and uvloop's extension the process has mapped."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return {}
    return {"ssl": "libssl" in text or "_ssl." in text, "uvloop": "uvloop/loop." in text}


def idle(spec_name: str, env, app: str) -> dict:
    with start(SERVERS[spec_name], env, app) as server:
        server.wait_ready()
        snap = settle(server.pid)
        return {"rss_kib": snap.rss_kib, "pss_kib": snap.pss_kib, **mapped(server.pid)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "loops.json")
    p.add_argument("--no-venv", action="store_true", help="run the servers from the current Python")
    args = p.parse_args()
    if wrk_path() is None:
        print(WRK_MISSING, file=sys.stderr)
        return 2
    python = sys.executable if args.no_venv else environment.ensure_venv()
    env = probe_env(python)
    raise_nofile()
    loops = [name for name in LOOPS if SERVERS[LOOPS[name]].available(env)]
    rps: dict = {loop: {key: [] for _, key, _ in POINTS} for loop in loops}
    cpu: dict = {loop: {key: [] for _, key, _ in POINTS} for loop in loops}
    rss: dict = {name: {"raw": [], "fastapi": []} for name in [*loops, "saltare"]}
    for r in range(args.rounds):
        order = loops if r % 2 == 0 else loops[::-1]
        for loop in order:
            for app, key, conns in POINTS:
                label = f"round {r + 1} {loop:8} {key:12}"
                got = fresh_point(SERVERS[LOOPS[loop]], env, app, conns, args.seconds, label)
                rps[loop][key].append(got["rps"])
                cpu[loop][key].append(got["server_cpu_us"])
        for name in rss:
            spec = LOOPS.get(name, name)
            if not SERVERS[spec].available(env):
                continue
            for app in ("raw", "fastapi"):
                rss[name][app].append(idle(spec, env, app))
                print(f"round {r + 1} {name:8} idle {app:8} {rss[name][app][-1]}", flush=True)
    micro = subprocess.run([python, str(Path(__file__).resolve().parent / "loop_micro.py"), "--rounds", "3",
                            "--json", "/tmp/zigcorn-loop-micro.json"], capture_output=True, text=True)  # fmt: skip
    print(micro.stdout, micro.stderr, flush=True)
    micro_doc = json.loads(Path("/tmp/zigcorn-loop-micro.json").read_text()) if micro.returncode == 0 else {}
    table = {}
    for name in rss:
        row: dict = {}
        if name in rps:
            row.update({key: round(statistics.median(v)) for key, v in rps[name].items()})
            row["rounds"] = rps[name]
            row["server_cpu_us"] = {key: statistics.median(v) for key, v in cpu[name].items()}
            row["server_cpu_us_rounds"] = cpu[name]
        for app in ("raw", "fastapi"):
            samples = rss[name][app]
            if samples:
                row[f"idle_{app}_kib"] = round(statistics.median(s["rss_kib"] for s in samples))
                row[f"idle_{app}_maps"] = {k: v for k, v in samples[-1].items() if k in ("ssl", "uvloop")}
        table[name] = row
    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": environment.machine(),
           "python": subprocess.run([python, "-V"], capture_output=True, text=True).stdout.strip(),
           "loops": table, "micro": micro_doc}  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1))
    print("\n| zigcorn on | raw c1 | raw c64 | FastAPI c64 | idle RSS raw | idle RSS FastAPI |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, row in table.items():
        cells = [f"{row[k]:,}" if k in row else "n/a" for k in ("raw_c1", "raw_c64", "fastapi_c64")]
        mem = [f"{row[k] / 1024:.1f} MiB" if k in row else "n/a" for k in ("idle_raw_kib", "idle_fastapi_kib")]
        print(f"| {name} | {' | '.join(cells)} | {' | '.join(mem)} |")
    print("\n| zigcorn on | server CPU us/request: raw c1 | raw c64 | FastAPI c64 |")
    print("|---|---:|---:|---:|")
    for name, row in table.items():
        if "server_cpu_us" in row:
            print(f"| {name} | " + " | ".join(f"{row['server_cpu_us'][k]:.1f}" for _, k, _ in POINTS) + " |")
    base = table.get("uvloop", {})
    own = table.get("zigcorn", {})
    if base and own:
        print("\nzigcorn's loop / uvloop: " + ", ".join(
            f"{k} {own[k] / base[k]:.3f}x" for k in ("raw_c1", "raw_c64", "fastapi_c64") if base.get(k)))
        print("server CPU per request, zigcorn's loop / uvloop: " + ", ".join(
            f"{k} {own['server_cpu_us'][k] / base['server_cpu_us'][k]:.3f}x"
            for _, k, _ in POINTS if base["server_cpu_us"].get(k)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
