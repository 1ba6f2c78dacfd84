"""Benchmark zigcorn against other ASGI servers (and nginx as the machine's ceiling).

    python benchmarks/run.py                      # full run, every server, HTTP/1.1 and HTTP/2, ~20 minutes
    python benchmarks/run.py --quick              # ~1 s points, the servers already installed
    python benchmarks/run.py --servers zigcorn,granian --apps raw --markdown table.md
    python benchmarks/run.py --http2-only --servers zigcorn,granian,hypercorn   # HTTP/2 only
    python benchmarks/run.py --quick --http2      # the quick run plus 1 s HTTP/2 points

Servers run one after another, one worker each, on 127.0.0.1, each on a fresh port, and
their whole process tree is killed after its measurements. Each load point (connection
count) runs on a fresh process after its own warm-up at that count: a server's rate at 64
connections after a one-connection run on the same process is not its rate on a fresh
one (granian's drops about 18%). To compare servers, `rounds.py` also rotates their order
over several rounds. The full run installs the
servers into ``benchmarks/.venv`` on first use; ``--no-venv`` uses the current Python.
HTTP/1.1 load comes from ``wrk``, HTTP/2 load (h2c and h2 over TLS, in the full run by
default, ``--http2`` with ``--quick``) from ``h2load`` (h2.py); see README.md in this
folder for what each number means.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import environment  # noqa: E402
import h2 as h2bench  # noqa: E402  (this folder's h2.py, not the h2 library)
import report  # noqa: E402
from load import WRK_MISSING, run_wrk, wrk_path  # noqa: E402
from memory import PeakSampler, RssRecorder, idle_connection_cost, raise_nofile, rss_trend, settle  # noqa: E402
from servers import APPS, SERVERS, Env, RunningServer, ServerSpec, configuration, probe_env, start  # noqa: E402

RESULTS = environment.BENCH_DIR / "results"


@dataclass(frozen=True)
class Config:
    duration_s: int
    warmup_s: int
    connections: list[int]
    idle_connections: int
    idle_wait_s: float
    workers: int
    path: str
    quick: bool
    soak_s: int
    soak_servers: list[str]
    http1: bool = True   # the wrk section (off with --http2-only)
    http2: bool = False  # the h2load section (h2.py)


def log(message: str) -> None:
    print(message, flush=True)


# -- one server ----------------------------------------------------------------------------

def measure_load(spec: ServerSpec, env: Env, app: str, cfg: Config) -> dict[str, dict]:
    """One wrk run per connection count, each on a fresh process after a warm-up at that count."""
    points = {}
    for connections in cfg.connections:
        with started(spec, env, app) as server:
            url = f"http://127.0.0.1:{server.port}{cfg.path}"
            run_wrk(url, connections, cfg.warmup_s)
            with PeakSampler(server.pid) as sampler:
                point = run_wrk(url, connections, cfg.duration_s)
        point["peak_rss_kib"] = sampler.peak_kib
        points[str(connections)] = point
        log(f"    c={connections:<4} {point['rps']:>10,.0f} req/s  p50 {point['p50_ms']:.2f} ms  "
            f"p99 {point['p99_ms']:.2f} ms  peak RSS {sampler.peak_kib / 1024:.1f} MiB")
    return points


def measure_soak(server: RunningServer, cfg: Config) -> dict:
    """RSS over ``cfg.soak_s`` seconds of constant load at the largest connection count.

    A leak shows as a steady climb; the first sixth (at most 10 s) is left out, while pools
    and caches fill. The server has already had a warm-up at that count.
    """
    url = f"http://127.0.0.1:{server.port}{cfg.path}"
    connections = max(cfg.connections)
    with RssRecorder(server.pid) as recorder:
        point = run_wrk(url, connections, cfg.soak_s)
    trend = rss_trend(recorder.series, skip_s=min(10.0, cfg.soak_s / 6))
    result = {"seconds": cfg.soak_s, "connections": connections, "rps": point["rps"],
              "errors": point["non_2xx_3xx"] + point["socket_errors_total"], **trend, "series": recorder.series}
    if trend["growth_kib"] is not None:
        log(f"    soak {cfg.soak_s} s c={connections}: {point['rps']:,.0f} req/s, RSS {trend['from_kib'] / 1024:.1f}"
            f" -> {trend['to_kib'] / 1024:.1f} MiB ({trend['growth_kib']:+} KiB, {trend['slope_kib_per_min']:+} KiB/min)")
    return result


def started(spec: ServerSpec, env: Env, app: str, workers: int = 1) -> RunningServer:
    server = start(spec, env, app, workers)
    try:
        server.wait_ready()
        server.validate()
    except BaseException:
        server.stop()
        raise
    return server


def measure_workers(spec: ServerSpec, env: Env, app: str, cfg: Config, single_pss: int) -> dict:
    """Idle PSS of the tree with ``cfg.workers`` workers, next to the one-worker figure."""
    if not spec.supports_workers(env):
        return {"supported": False}
    with started(spec, env, app, cfg.workers) as server:
        mem = settle(server.pid, min_wait=2.0, min_processes=cfg.workers)
    extra = (mem.pss_kib - single_pss) / (cfg.workers - 1) if cfg.workers > 1 else None
    return {"supported": True, "workers": cfg.workers, **mem.as_dict(),
            "pss_1_worker_kib": single_pss, "pss_per_extra_worker_kib": extra}


def measure_idle_connections(server: RunningServer, cfg: Config) -> dict:
    result = idle_connection_cost(server.pid, server.port, cfg.idle_connections, cfg.idle_wait_s)
    log(f"    {result['alive']}/{result['opened']} idle connections: {result['bytes_per_connection']} B each"
        f" ({result['total_bytes_per_connection']} B with one-time growth)")
    return result


def measure_server(spec: ServerSpec, env: Env, app: str, cfg: Config) -> dict:
    """Idle memory (and the soak) on one process; each load point and the idle connections
    on fresh ones; then N workers.

    ``--quick`` skips the multi-worker figure, to stay within seconds.
    """
    result: dict = {"version": spec.version(env)}
    with started(spec, env, app) as server:
        result["command"] = server.command
        result["configuration"] = configuration(server.command, spec.environ)
        result["environ"] = dict(spec.environ)  # set on top of the harness's own environment
        result["idle"] = settle(server.pid, min_wait=0.5 if cfg.quick else 1.0).as_dict()
        log(f"    idle RSS {result['idle']['rss_kib'] / 1024:.1f} MiB, PSS {result['idle']['pss_kib'] / 1024:.1f} MiB")
        if cfg.soak_s and spec.name in cfg.soak_servers:
            run_wrk(f"http://127.0.0.1:{server.port}{cfg.path}", max(cfg.connections), cfg.warmup_s)
            result["soak"] = measure_soak(server, cfg)
    result["load"] = measure_load(spec, env, app, cfg)
    result["peak_rss_kib"] = max(p["peak_rss_kib"] for p in result["load"].values())
    with started(spec, env, app) as server:  # a fresh process: no allocator state left by the load
        result["idle_connections"] = measure_idle_connections(server, cfg)
    if cfg.quick:
        result["workers"] = {"supported": spec.supports_workers(env), "skipped": "quick"}
        return result
    result["workers"] = measure_workers(spec, env, app, cfg, result["idle"]["pss_kib"])
    if result["workers"]["supported"]:
        log(f"    {cfg.workers} workers: PSS {result['workers']['pss_kib'] / 1024:.1f} MiB")
    return result


# -- selection and the whole run -----------------------------------------------------------

def choose_env(args: argparse.Namespace) -> Env:
    if args.no_venv:
        return probe_env(sys.executable)
    if args.quick:  # never installs: the venv if it is there, else this interpreter
        python = environment.venv_python()
        return probe_env(str(python) if python.exists() else sys.executable)
    return probe_env(environment.ensure_venv())


def choose_servers(requested: list[str] | None, env: Env, quick: bool) -> list[ServerSpec]:
    unknown = [name for name in requested or [] if name not in SERVERS]
    if unknown:
        raise SystemExit(f"unknown server(s): {', '.join(unknown)}; known: {', '.join(SERVERS)}")
    names = requested or list(SERVERS)
    missing = [name for name in names if not SERVERS[name].available(env)]
    if missing and (requested or not quick) and set(missing) != {"nginx"}:
        raise SystemExit(f"not installed in {env.python}: {', '.join(missing)}")
    for name in missing:
        log(f"skipping {name}: not installed")
    names = [name for name in names if name not in missing]
    return [SERVERS[name] for name in sorted(names, key=lambda n: n != report.BASELINE)]


def choose_apps(requested: list[str], env: Env) -> list[str]:
    apps = []
    for app in requested:
        if app not in APPS:
            raise SystemExit(f"unknown app {app!r}; known: {', '.join(APPS)}")
        if app == "fastapi" and not env.has("fastapi"):
            log("skipping the fastapi app: fastapi is not installed")
            continue
        apps.append(app)
    return apps


def run(cfg: Config, env: Env, servers: list[ServerSpec], apps: list[str],
        h2cfg: h2bench.H2Config | None = None) -> dict:
    doc = {**environment.provenance(), "machine": environment.machine(), "config": asdict(cfg),
           "python_env": env.python, "apps": {}}
    for app in apps if cfg.http1 else []:
        doc["apps"][app] = {}
        for spec in servers:
            log(f"[{app}] {spec.name}")
            began = time.monotonic()
            try:
                result = measure_server(spec, env, app, cfg)
            except Exception as exc:  # one broken server must not lose the others' numbers
                log(f"    error: {exc}")
                result = {"version": spec.version(env), "error": str(exc)}
            result["elapsed_s"] = round(time.monotonic() - began, 1)
            doc["apps"][app][spec.name] = result
    if h2cfg is not None:
        doc["http2"] = h2bench.run_section(env, servers, apps, h2cfg)
    return doc


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="1 s points, raw app, the servers already installed (the venv if it exists), no multi-worker")
    p.add_argument("--servers", type=lambda s: [x for x in s.split(",") if x],
                   help=f"comma-separated, from {','.join(SERVERS)} (default: all)")
    p.add_argument("--apps", type=lambda s: [x for x in s.split(",") if x],
                   help="comma-separated, from raw,fastapi (default: both; raw only with --quick)")
    p.add_argument("--no-venv", action="store_true", help="run the servers from the current Python")
    p.add_argument("--json", type=Path, help="results file (default: benchmarks/results/latest.json, "
                                             "quick.json with --quick)")
    p.add_argument("--markdown", type=Path, help="also write the tables as Markdown here")
    p.add_argument("--plot", type=Path, help="also draw the ratios against zigcorn as an SVG here (plot.py)")
    p.add_argument("--duration", type=int, help="seconds per load point (default 10, 1 with --quick)")
    p.add_argument("--warmup", type=int, help="warm-up seconds (default 2, 1 with --quick)")
    p.add_argument("--connections", type=lambda s: [int(x) for x in s.split(",")], default=[1, 64])
    p.add_argument("--idle-connections", type=int, default=2000)
    p.add_argument("--workers", type=int, default=4, help="workers for the multi-worker PSS figure")
    p.add_argument("--path", default="/", help="request path for the load (default /)")
    p.add_argument("--soak", type=int, help="seconds of constant load watching RSS for a leak (default 60, 2 with --quick; 0 skips)")
    p.add_argument("--soak-servers", type=lambda s: [x for x in s.split(",") if x], default=[report.BASELINE],
                   help=f"servers that get the soak (default: {report.BASELINE})")
    h2 = p.add_argument_group("HTTP/2 (h2load; h2.py)")
    h2.add_argument("--http2", action=argparse.BooleanOptionalAction, default=None,
                    help="the HTTP/2 section: h2c and h2/TLS load, bytes per idle h2 connection "
                         "(default: on in the full run if h2load is installed, off with --quick)")
    h2.add_argument("--http2-only", action="store_true", help="only the HTTP/2 section (no wrk points)")
    h2.add_argument("--h2-duration", type=int, help="h2load -D seconds (default: --duration: 10, 1 with --quick)")
    h2.add_argument("--h2-warmup", type=int, default=1, help="h2load --warm-up-time seconds (default 1)")
    h2.add_argument("--h2-clients", type=int, default=16, help="h2load -c, connections (default 16)")
    h2.add_argument("--h2-streams", type=int, default=10, help="h2load -m, streams in flight per connection (default 10)")
    h2.add_argument("--h2-idle-connections", type=int,
                    help="idle h2c connections held for the per-connection figure (default 1000, 200 with --quick)")
    return p.parse_args(argv)


def config(args: argparse.Namespace) -> Config:
    return Config(
        duration_s=args.duration or (1 if args.quick else 10),
        warmup_s=args.warmup or (1 if args.quick else 2),
        connections=args.connections,
        idle_connections=args.idle_connections,
        idle_wait_s=2.5,
        workers=args.workers,
        path=args.path,
        quick=args.quick,
        soak_s=(2 if args.quick else 60) if args.soak is None else args.soak,
        soak_servers=args.soak_servers,
        http1=not args.http2_only,
        http2=bool(args.http2_only or args.http2 or (args.http2 is None and not args.quick)),
    )


def h2_config(args: argparse.Namespace, cfg: Config) -> h2bench.H2Config:
    return h2bench.H2Config(
        duration_s=args.h2_duration or args.duration or (1 if args.quick else 10),
        warmup_s=args.h2_warmup,
        clients=args.h2_clients,
        streams=args.h2_streams,
        idle_connections=args.h2_idle_connections or (200 if args.quick else 1000),
        idle_wait_s=cfg.idle_wait_s,
        path=cfg.path,
    )


def ensure_http2_tools(args: argparse.Namespace, cfg: Config, env: Env) -> tuple[Config, Env]:
    """h2load on the PATH, and in the benchmark venv the h2 client and trustme
    (installed when missing; the quick run installs nothing). Without h2load or h2, an
    explicit ``--http2`` / ``--http2-only`` stops the run; the full run's default leaves the
    section out and says so."""
    explicit = bool(args.http2 or args.http2_only)
    if h2bench.h2load_path() is None:
        if explicit:
            raise SystemExit(h2bench.H2LOAD_MISSING)
        log("skipping the HTTP/2 section: h2load is not installed (apt-get install -y nghttp2-client)")
        return replace(cfg, http2=False), env
    if not args.quick and not args.no_venv:
        missing = [pip for module, pip in h2bench.EXTRAS.items() if not env.has(module)]
        if missing:
            environment.install(missing)
            env = probe_env(env.python)
    if not env.has("h2"):
        message = f"the HTTP/2 section needs the h2 library in {env.python} (pip install h2)"
        if explicit:
            raise SystemExit(message)
        log(f"skipping the HTTP/2 section: {message}")
        return replace(cfg, http2=False), env
    return cfg, env


def write_outputs(doc: dict, json_path: Path, markdown_path: Path | None) -> None:
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(doc, indent=2) + "\n")
    log(f"\nwrote {json_path}")
    if markdown_path:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(report.render(doc, markdown=True))
        log(f"wrote {markdown_path}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = config(args)
    if cfg.http1 and wrk_path() is None:
        print(WRK_MISSING, file=sys.stderr)
        return 2
    nofile = raise_nofile()
    h2cfg = h2_config(args, cfg) if cfg.http2 else None
    most = max(cfg.idle_connections if cfg.http1 else 0, h2cfg.idle_connections if h2cfg else 0)
    if nofile < most + 100:
        raise SystemExit(f"RLIMIT_NOFILE hard limit {nofile} is too low for {most} connections")
    env = choose_env(args)
    environment.compile_bytecode(env.python)  # no compiling in the measured processes, -OO rows included
    if cfg.http2:
        cfg, env = ensure_http2_tools(args, cfg, env)
        h2cfg = h2cfg if cfg.http2 else None
    servers = choose_servers(args.servers, env, args.quick)
    apps = choose_apps(args.apps or (["raw"] if args.quick else list(APPS)), env)
    sections = ", ".join(name for name, on in (("HTTP/1.1", cfg.http1), ("HTTP/2", cfg.http2)) if on)
    log(f"servers: {', '.join(s.name for s in servers)}; apps: {', '.join(apps)}; {sections}; python: {env.python}")
    doc = run(cfg, env, servers, apps, h2cfg)
    print("\n" + report.render(doc))
    write_outputs(doc, args.json or RESULTS / ("quick.json" if args.quick else "latest.json"), args.markdown)
    if args.plot:
        import plot

        plot.write(doc, args.plot)
        print(f"wrote {args.plot}")
    failed = any(r.get("error") for app in doc["apps"].values() for r in app.values())
    failed = failed or report.http2_failed(doc)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
