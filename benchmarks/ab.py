"""A/B rounds of two zigcorn builds, to judge an engine change on a noisy machine.

    python benchmarks/ab.py --a /path/to/old/checkout --b . --rounds 3
    python benchmarks/ab.py --a ../baseline --b . --quick        # 1 s points, 1 round, no idle figure
    python benchmarks/ab.py --a . --b . --b-args="--metrics-path /m --request-id-header x-request-id"
                                                                 # the cost of options, one build

Each tree is a checkout whose ``src/zigcorn`` holds its built engine (``pip install -e .``
or a ``python -m ziglang build-lib`` into it); nothing is built here. The server runs with
that tree's ``src`` first on ``PYTHONPATH``, with the same command line as ``run.py``'s
zigcorn row. Rounds alternate the order (A then B, then B then A, ...) so drift in the
machine's load cancels out. Per round and build: raw app at 1 and 64 connections, FastAPI
app at 64 connections (wrk -t1, after a warm-up), and bytes per idle keep-alive
connection on the raw app (``memory.idle_connection_cost``). The printout gives each
round's B/A ratio and the median; ``--json`` keeps everything.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import WRK_MISSING, run_wrk, wrk_path  # noqa: E402
from memory import idle_connection_cost, raise_nofile  # noqa: E402
from servers import SERVERS, ServerSpec, probe_env, start  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
POINTS = (("raw", 1), ("raw", 64), ("fastapi", 64))


def commit_of(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def check_tree(tree: Path, python: str) -> None:
    """The tree has a built engine, and its zigcorn is the one the server will import."""
    if not list((tree / "src" / "zigcorn").glob("_core*.so")):
        raise SystemExit(f"{tree}: no built engine in src/zigcorn (run pip install -e . there)")
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out = subprocess.run([python, "-c", "import zigcorn; print(zigcorn.__file__)"], env=env,
                         capture_output=True, text=True, check=True)
    if not Path(out.stdout.strip()).resolve().is_relative_to((tree / "src").resolve()):
        raise SystemExit(f"{tree}: zigcorn is imported from {out.stdout.strip()} instead")


def with_args(extra: list[str]) -> ServerSpec:
    """run.py's zigcorn row with `extra` flags after its own."""
    base = SERVERS["zigcorn"]
    if not extra:
        return base
    return dataclasses.replace(base, command=lambda *a: base.command(*a) + extra)


def measure(tree: Path, python: str, seconds: int, warmup: int, idle: int, extra: list[str]) -> dict:
    """Every point for one build: one server per app, stopped after its points."""
    os.environ["PYTHONPATH"] = str(tree / "src")
    env = probe_env(python)
    spec = with_args(extra)
    result: dict = {}
    for app in ("raw", "fastapi"):
        with start(spec, env, app) as server:
            server.wait_ready()
            server.validate()
            url = f"http://127.0.0.1:{server.port}/"
            run_wrk(url, 64, warmup)
            for point_app, connections in POINTS:
                if point_app != app:
                    continue
                point = run_wrk(url, connections, seconds)
                result[f"{app} c{connections} req/s"] = point["rps"]
                result[f"{app} c{connections} p99 ms"] = point["p99_ms"]
    if idle:
        with start(spec, env, "raw") as server:
            server.wait_ready()
            cost = idle_connection_cost(server.pid, server.port, idle)
            result["raw bytes per idle conn"] = cost["bytes_per_connection"]
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", type=Path, required=True, help="the reference tree (e.g. the previous main)")
    p.add_argument("--b", type=Path, required=True, help="the tree with the change")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=5, help="per load point")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--idle-connections", type=int, default=2000, help="0 skips the idle figure")
    p.add_argument("--a-args", default="", help="extra zigcorn flags for A (one string)")
    p.add_argument("--b-args", default="", help="extra zigcorn flags for B (one string)")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--quick", action="store_true", help="1 s points, 1 round, no idle figure")
    p.add_argument("--json", type=Path, default=RESULTS / "ab.json")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.warmup, args.idle_connections = 1, 1, 1, 0
    if wrk_path() is None:
        raise SystemExit(WRK_MISSING)
    raise_nofile()
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    for tree in trees.values():
        check_tree(tree, args.python)
    commits = {k: commit_of(t) for k, t in trees.items()}
    print(f"A = {trees['A']} ({commits['A']}) {args.a_args}\nB = {trees['B']} ({commits['B']}) {args.b_args}", flush=True)
    rounds = []
    for i in range(args.rounds):
        order = ("A", "B") if i % 2 == 0 else ("B", "A")
        got = {}
        for key in order:
            started = time.monotonic()
            extra = shlex.split(args.a_args if key == "A" else args.b_args)
            got[key] = measure(trees[key], args.python, args.seconds, args.warmup, args.idle_connections, extra)
            print(f"round {i + 1} {key}: {got[key]} ({time.monotonic() - started:.0f} s)", flush=True)
        rounds.append(got)
    report(rounds)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"trees": {k: str(t) for k, t in trees.items()}, "commits": commits,
                                     "seconds": args.seconds, "rounds": rounds}, indent=2))
    print(f"\nwrote {args.json}")


def report(rounds: list[dict]) -> None:
    print("\n| metric | " + " | ".join(f"round {i + 1} A / B (B/A)" for i in range(len(rounds))) + " | median B/A |")
    print("|---|" + "---:|" * (len(rounds) + 1))
    for metric in rounds[0]["A"]:
        cells, ratios = [], []
        for r in rounds:
            a, b = r["A"][metric], r["B"][metric]
            ratio = b / a if a else float("nan")
            ratios.append(ratio)
            cells.append(f"{a:,.0f} / {b:,.0f} ({ratio:.2f}x)" if a >= 100 else f"{a:.2f} / {b:.2f} ({ratio:.2f}x)")
        print(f"| {metric} | " + " | ".join(cells) + f" | {statistics.median(ratios):.2f}x |")


if __name__ == "__main__":
    main()
