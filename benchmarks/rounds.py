"""zigcorn beside its peers in alternated rounds, a fresh server process per point.

    python benchmarks/rounds.py                                 # zigcorn, granian, uvicorn; 3 rounds
    python benchmarks/rounds.py --servers zigcorn,granian --rounds 5 --seconds 5

`run.py` measures every concurrency on one process of each server, one server after
another; a server's rate at one point then depends on what ran before it on the same
process (granian's at 64 connections drops about 18% after a one-connection run), and
drift in a shared machine's load lands on whichever server ran at that moment. Here each
point (raw app at 1 and 64 connections, FastAPI at 64) gets a fresh process of each
server after a one-second warm-up, and each round runs the servers in a different order
(rotated), so drift spreads over all of them. Reported: the median and the range of
req/s over the rounds, and zigcorn's ratio to each peer per round (the ratio of one
round's two figures, which the machine's drift disturbs least), with its median; each
point's server CPU time per request is printed as it runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import environment  # noqa: E402
from load import WRK_MISSING, wrk_path  # noqa: E402
from memory import raise_nofile  # noqa: E402
from servers import SERVERS, fresh_point, probe_env  # noqa: E402

POINTS = (("raw", "raw_c1", 1), ("raw", "raw_c64", 64), ("fastapi", "fastapi_c64", 64))
BASE = "zigcorn"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", default="zigcorn,granian,uvicorn", help="comma-separated, zigcorn first")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--points", default=",".join(key for _, key, _ in POINTS), help="of " + ", ".join(k for _, k, _ in POINTS))
    p.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "rounds.json")
    p.add_argument("--no-venv", action="store_true", help="run the servers from the current Python")
    args = p.parse_args()
    if wrk_path() is None:
        print(WRK_MISSING, file=sys.stderr)
        return 2
    names = [n for n in args.servers.split(",") if n]
    unknown = [n for n in names if n not in SERVERS]
    if unknown or not names or names[0] != BASE:
        raise SystemExit(f"--servers: zigcorn first, then any of {', '.join(SERVERS)} (unknown: {unknown})")
    points = [pt for pt in POINTS if pt[1] in args.points.split(",")]
    python = sys.executable if args.no_venv else environment.ensure_venv()
    env = probe_env(python)
    missing = [n for n in names if not SERVERS[n].available(env)]
    if missing:
        raise SystemExit(f"not installed in {python}: {', '.join(missing)}")
    raise_nofile()
    rps: dict = {n: {key: [] for _, key, _ in points} for n in names}
    for r in range(args.rounds):
        shift = r % len(names)
        order = names[shift:] + names[:shift]
        for app, key, conns in points:
            for name in order:
                label = f"round {r + 1} {name:10} {key:12}"
                got = fresh_point(SERVERS[name], env, app, conns, args.seconds, label)
                errors = got["non_2xx_3xx"] + got["socket_errors_total"]
                if errors:
                    raise SystemExit(f"{name} {key}: {errors} errors or non-2xx answers: not a valid point")
                rps[name][key].append(got["rps"])
    table: dict = {}
    for name in names:
        row: dict = {"rounds": rps[name]}
        for _, key, _ in points:
            values = rps[name][key]
            row[key] = {"median": round(statistics.median(values)), "min": round(min(values)), "max": round(max(values))}
            if name != BASE:
                ratios = [a / b for a, b in zip(rps[BASE][key], values)]
                row[key]["zigcorn_ratio_rounds"] = [round(x, 3) for x in ratios]
                row[key]["zigcorn_ratio_median"] = round(statistics.median(ratios), 3)
        table[name] = row
    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": environment.machine(), "seconds": args.seconds,
           "servers": table}  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1))
    print("\n| server | " + " | ".join(key for _, key, _ in points) + " |")
    print("|---|" + "---:|" * len(points))
    for name, row in table.items():
        cells = []
        for _, key, _ in points:
            cell = f"{row[key]['median']:,} ({row[key]['min']:,}-{row[key]['max']:,})"
            if name != BASE:
                rounds = ", ".join(f"{x:.2f}" for x in row[key]["zigcorn_ratio_rounds"])
                cell += f"; zigcorn {row[key]['zigcorn_ratio_median']:.2f}x ({rounds})"
            cells.append(cell)
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
