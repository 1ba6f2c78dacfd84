"""zigcorn beside its peers in alternated rounds, a fresh server process per point.

    python benchmarks/rounds.py                                 # zigcorn, granian, uvicorn; 3 rounds
    python benchmarks/rounds.py --servers zigcorn,granian --rounds 5 --seconds 5
    python benchmarks/rounds.py --servers zigcorn,granian-rust --points raw_c64,fastapi_c64 --workers 1,2
    python benchmarks/rounds.py --servers zigcorn,h2corn --points raw_h2c,raw_h2_tls

`run.py` measures every concurrency on one process of each server, one server after
another; a server's rate at one point then depends on what ran before it on the same
process (granian's at 64 connections drops about 18% after a one-connection run), and
drift in a shared machine's load lands on whichever server ran at that moment. Here each
point gets a fresh process of each server after a one-second warm-up, and each round runs
the servers in a different order (rotated), so drift spreads over all of them. Reported:
the median and the range of req/s over the rounds, and zigcorn's ratio to each peer per
round (the ratio of one round's two figures, which the machine's drift disturbs least),
with its median; each point's server CPU time per request is printed as it runs.

Every row names its configuration in the server's own flags (servers.configuration):
`granian-rust (--loop uvloop --task-impl rust)`, not "granian". With `--workers 1,2`
every point runs at each worker count, and the table adds how each server scales from one
worker (the per-round ratio of its two figures). The CPU time stolen by the hypervisor
(/proc/stat's steal) and the load average are read around every point: a round taken
while another guest or process took the CPUs is visible in the JSON and in the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import environment  # noqa: E402
import h2 as h2bench  # noqa: E402  (this folder's h2.py, not the h2 library)
from load import WRK_MISSING, wrk_path  # noqa: E402
from memory import raise_nofile  # noqa: E402
from servers import SERVERS, fresh_point, probe_env  # noqa: E402

BASE = "zigcorn"
STAT = Path("/proc/stat")


@dataclass(frozen=True)
class Point:
    app: str
    protocol: str  # "http1" (wrk), "h2c" or "h2_tls" (h2load)
    connections: int
    streams: int = 1  # HTTP/2: streams in flight on each connection


POINTS = {
    "raw_c1": Point("raw", "http1", 1),
    "raw_c64": Point("raw", "http1", 64),
    "fastapi_c64": Point("fastapi", "http1", 64),
    # h2load -c16 -m10, as run.py's HTTP/2 section
    "raw_h2c": Point("raw", "h2c", 16, 10),
    "raw_h2_tls": Point("raw", "h2_tls", 16, 10),
    "fastapi_h2c": Point("fastapi", "h2c", 16, 10),
    "fastapi_h2_tls": Point("fastapi", "h2_tls", 16, 10),
}
DEFAULT_POINTS = "raw_c1,raw_c64,fastapi_c64"


def cpu_times() -> list[int]:
    """The machine's CPU time so far, in ticks: user, nice, system, idle, iowait, irq,
    softirq, steal (/proc/stat's first line; guest time is already inside user)."""
    fields = STAT.read_text().splitlines()[0].split()
    return [int(x) for x in fields[1:9]]


def steal_share(before: list[int], after: list[int]) -> float:
    """Of the CPU time that passed between two `cpu_times` readings, the share the
    hypervisor gave to another guest (steal): 0.0 on a machine that has its CPUs."""
    delta = [b - a for a, b in zip(before, after)]
    total = sum(delta)
    return delta[7] / total if total > 0 else 0.0


def key_of(point: str, workers: int) -> str:
    return point if workers == 1 else f"{point}_w{workers}"


def measure(name: str, env, point: Point, args: argparse.Namespace, workers: int, certs, label: str) -> dict:
    """One point on a fresh process; raises SystemExit on a point with errors."""
    spec = SERVERS[name]
    before, load_before = cpu_times(), os.getloadavg()[0]
    if point.protocol == "http1":
        got = fresh_point(spec, env, point.app, point.connections, args.seconds, label, workers)
        errors = got["non_2xx_3xx"] + got["socket_errors_total"]
    else:
        cfg = h2bench.H2Config(duration_s=args.seconds, warmup_s=1, clients=point.connections,
                               streams=point.streams, idle_connections=0, idle_wait_s=0, path="/")
        got = h2bench.fresh_h2_point(spec, env, point.app, certs if point.protocol == "h2_tls" else None,
                                     cfg, workers)
        errors = got["errors"]
        print(f"{label} {got['rps']:10.0f} req/s {got['server_cpu_us']:7.2f} server CPU us/request", flush=True)
    got["steal"] = round(steal_share(before, cpu_times()), 4)
    got["load_before"] = load_before
    if got["steal"] >= 0.01:
        print(f"    steal {got['steal']:.1%} during this point", flush=True)
    if errors:
        raise SystemExit(f"{name} {label.split()[-1]}: {errors} errors or non-2xx answers: not a valid point")
    return got


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values)), "min": round(min(values)), "max": round(max(values))}


def ratios(top: list[float], bottom: list[float]) -> dict:
    """Round-by-round ratios of two series taken in the same rounds, and their median."""
    per_round = [a / b for a, b in zip(top, bottom)]
    return {"rounds": [round(x, 3) for x in per_round], "median": round(statistics.median(per_round), 3)}


def tabulate(names: list[str], keys: list[str], rps: dict, workers: list[int], points: list[str]) -> dict:
    """Per server: each key's median and range, zigcorn's ratios to it, and, with several
    worker counts, each point's scaling from one worker."""
    table: dict = {}
    for name in names:
        row: dict = {"rounds": rps[name]}
        for key in keys:
            row[key] = summary(rps[name][key])
            if name != BASE:
                r = ratios(rps[BASE][key], rps[name][key])
                row[key]["zigcorn_ratio_rounds"], row[key]["zigcorn_ratio_median"] = r["rounds"], r["median"]
        if 1 in workers:
            row["scaling"] = {key_of(p, w): ratios(rps[name][key_of(p, w)], rps[name][p])
                              for p in points for w in workers if w != 1}
        table[name] = row
    return table


def print_table(names: list[str], keys: list[str], table: dict, steal: dict) -> None:
    print("\n| server version (configuration) | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for name in names:
        row = table[name]
        cells = []
        for key in keys:
            cell = f"{row[key]['median']:,} ({row[key]['min']:,}-{row[key]['max']:,})"
            if name != BASE:
                rounds = ", ".join(f"{x:.2f}" for x in row[key]["zigcorn_ratio_rounds"])
                cell += f"; zigcorn {row[key]['zigcorn_ratio_median']:.2f}x ({rounds})"
            cells.append(cell)
        print(f"| {name} {row['version']} ({row['configuration']}) | " + " | ".join(cells) + " |")
    if any(table[n].get("scaling") for n in names):
        print("\nscaling from one worker (per-round ratios, median first):")
        for name in names:
            for key, r in table[name].get("scaling", {}).items():
                print(f"  {name:20} {key:18} {r['median']:.2f}x ({', '.join(f'{x:.2f}' for x in r['rounds'])})")
    print(f"\nsteal over the points: median {statistics.median(steal['all']):.2%}, max {max(steal['all']):.2%}; "
          f"load average before the points {min(steal['load']):.2f}-{max(steal['load']):.2f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", default="zigcorn,granian,uvicorn",
                   help=f"comma-separated, zigcorn first, from {', '.join(SERVERS)}")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--points", default=DEFAULT_POINTS, help="of " + ", ".join(POINTS))
    p.add_argument("--workers", default="1", help="worker counts, each point at each: 1,2 adds the scaling")
    p.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "rounds.json")
    p.add_argument("--no-venv", action="store_true", help="run the servers from the current Python")
    args = p.parse_args()
    names = [n for n in args.servers.split(",") if n]
    unknown = [n for n in names if n not in SERVERS]
    if unknown or not names or names[0] != BASE:
        raise SystemExit(f"--servers: zigcorn first, then any of {', '.join(SERVERS)} (unknown: {unknown})")
    points = [x for x in args.points.split(",") if x]
    if not points or any(x not in POINTS for x in points):
        raise SystemExit(f"--points: any of {', '.join(POINTS)}")
    workers = sorted({int(w) for w in args.workers.split(",")})
    if any(POINTS[x].protocol == "http1" for x in points) and wrk_path() is None:
        print(WRK_MISSING, file=sys.stderr)
        return 2
    if any(POINTS[x].protocol != "http1" for x in points) and h2bench.h2load_path() is None:
        raise SystemExit(h2bench.H2LOAD_MISSING)
    python = sys.executable if args.no_venv else environment.ensure_venv()
    env = probe_env(python)
    missing = [n for n in names if not SERVERS[n].available(env)]
    if missing:
        raise SystemExit(f"not installed in {python}: {', '.join(missing)}")
    for x in points:
        mode = {"h2c": "h2c", "h2_tls": "tls"}.get(POINTS[x].protocol)
        for n in names if mode else []:
            why = getattr(h2bench.support(SERVERS[n], env), mode)
            if why:
                raise SystemExit(f"{n} cannot run {x}: {why}")
    raise_nofile()
    keys = [key_of(x, w) for x in points for w in workers]
    rps: dict = {n: {key: [] for key in keys} for n in names}
    configs: dict = {}
    steal: dict = {"all": [], "load": []}
    detail: list = []
    with tempfile.TemporaryDirectory(prefix="zigcorn-rounds-certs-") as tmp:
        needs_tls = any(POINTS[x].protocol == "h2_tls" for x in points)
        certs = h2bench.make_certs(env, Path(tmp)) if needs_tls else None
        for r in range(args.rounds):
            shift = r % len(names)
            order = names[shift:] + names[:shift]
            for x in points:
                for w in workers:
                    for name in order:
                        key = key_of(x, w)
                        got = measure(name, env, POINTS[x], args, w, certs, f"round {r + 1} {name:18} {key:16}")
                        rps[name][key].append(got["rps"])
                        configs.setdefault(name, {})[got["configuration"]] = None
                        steal["all"].append(got["steal"])
                        steal["load"].append(got["load_before"])
                        detail.append({"round": r + 1, "server": name, "point": key, "rps": got["rps"],
                                       "server_cpu_us": got["server_cpu_us"], "steal": got["steal"],
                                       "cpu_share_by_process": got.get("cpu_share_by_process"),
                                       "load_before": got["load_before"], "configuration": got["configuration"]})
    table = tabulate(names, keys, rps, workers, points)
    for name in names:
        # every configuration the row ran, in order: granian's h2c is --http 2, its TLS
        # --http auto; a second worker count adds --workers N
        table[name]["configuration"] = "; ".join(configs[name])
        table[name]["version"] = SERVERS[name].version(env)
    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": environment.machine(), "seconds": args.seconds,
           "workers": workers, "points": {x: POINTS[x].__dict__ for x in points}, "servers": table,
           "steal_median": statistics.median(steal["all"]), "steal_max": max(steal["all"]),
           "points_detail": detail}  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1))
    print_table(names, keys, table, steal)
    return 0


if __name__ == "__main__":
    sys.exit(main())
