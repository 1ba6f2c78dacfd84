"""Response compression: FastAPI returning a 20 KiB JSON document, wrk at 64 connections
with `Accept-Encoding`, zigcorn `--compression` beside uvicorn with Starlette's
GZipMiddleware and saltare's engine compression (`--response-gzip`, `--response-brotli`,
`--response-zstd`), one worker each, each server's default level for the encoding;
uvicorn twice: with the middleware's defaults (gzip level 9) and at zigcorn's level 6.

    python benchmarks/compression.py                      # 10 s points
    python benchmarks/compression.py --seconds 3 --encodings gzip
    python benchmarks/compression.py --rounds 3           # alternated rounds, medians
    python benchmarks/compression.py --encodings off,gzip # with the uncompressed ceiling

It runs the servers from the current interpreter: use the benchmark venv's
(`benchmarks/.venv/bin/python`, which has uvicorn, FastAPI and saltare) for every row.

Figures: requests/s, p99, the bytes on the wire per response (the ratio achieved) and
the server's CPU seconds per compressed MB. Not a timed test: numbers depend on the
machine; write them into RESULTS.md from a quiet one.

Where the work runs (`--placement`): an `off` row joins the encodings, the server's CPU
is split by thread (the event loop's thread, which holds the GIL except while a codec
runs, against the engine's writer thread and the rest), and each codec is timed alone on
the same document at the same level, in this process: the microseconds per response that
moving compression to another thread would take off the loop's thread.

    python benchmarks/compression.py --placement --seconds 5
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from load import cpu_seconds  # noqa: E402
from servers import configuration  # noqa: E402

DOC_BYTES = 20 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"server on port {port} did not start")


def wire_bytes(port: int, encoding: str) -> int:
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{size_download}", "-H",
                          f"accept-encoding: {encoding}", f"http://127.0.0.1:{port}/doc"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread of `pid`: `loop` is the main thread, the others by name."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = "loop" if int(task.name) == pid else (task / "comm").read_text().strip()
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def codec_us(encoding: str, rounds: int = 2000) -> float:
    """CPU microseconds one compression of the 20 KiB document takes here, at the server's
    default level (gzip 6, brotli 4, zstd 3), through the same system libraries. Python's
    zlib sets up a fresh deflate state per body (the engine resets a kept one), so the
    gzip figure includes that setup."""
    sys.path.insert(0, str(HERE / "apps"))
    from compress_fastapi_app import DOC  # noqa: PLC0415

    if encoding == "gzip":
        import zlib  # noqa: PLC0415

        def one():
            c = zlib.compressobj(6, zlib.DEFLATED, 31)
            return c.compress(DOC) + c.flush()
    elif encoding == "br":
        import brotli  # noqa: PLC0415

        def one():
            return brotli.compress(DOC, quality=4)
    elif encoding == "zstd":
        import zstandard  # noqa: PLC0415

        z = zstandard.ZstdCompressor(level=3)

        def one():
            return z.compress(DOC)
    else:
        return 0.0
    # CPU time, not wall time: on a loaded machine the wall clock counts other processes.
    start = time.process_time()
    for _ in range(rounds):
        one()
    return (time.process_time() - start) / rounds * 1e6


def run(name: str, cmd: list[str], port: int, encoding: str, seconds: int) -> dict:
    proc = subprocess.Popen(cmd, cwd=HERE / "apps", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_port(port)
        size = wire_bytes(port, encoding)
        before = cpu_seconds(proc.pid)
        threads_before = thread_cpu(proc.pid)
        out = subprocess.run(["wrk", "-t1", "-c64", f"-d{seconds}s", "--latency", "-H",
                              f"accept-encoding: {encoding}", f"http://127.0.0.1:{port}/doc"],
                             capture_output=True, text=True, check=True).stdout
        cpu = cpu_seconds(proc.pid) - before
        threads = {k: v - threads_before.get(k, 0.0) for k, v in thread_cpu(proc.pid).items()}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+\w+)", out).group(1)
    mb = total * DOC_BYTES / 1e6
    loop = threads.pop("loop", 0.0)
    return {"server": name, "encoding": encoding, "rps": rps, "p99": p99, "wire": size,
            "ratio": DOC_BYTES / size if size else 0.0, "cpu_s_per_mb": cpu / mb if mb else 0.0,
            "loop_us": loop / total * 1e6 if total else 0.0,
            "other_us": sum(threads.values()) / total * 1e6 if total else 0.0,
            "threads": {k: round(v, 2) for k, v in threads.items() if v > 0.05}}


# What uvicorn's `auto` picks when both are installed (runs before 2026-12-08 left it to
# `auto`), written out so that the rows name it.
UVICORN = ("--http", "httptools", "--loop", "uvloop")
SALTARE_FLAG = {"gzip": "--response-gzip", "br": "--response-brotli", "zstd": "--response-zstd"}


def commands(encoding: str, port: int) -> dict[str, list[str]]:
    """The servers measured for one encoding (uvicorn only has gzip, through Starlette)."""
    py = sys.executable
    flags = [] if encoding == "off" else ["--compression", encoding]
    out = {"zigcorn": [py, "-m", "zigcorn", "compress_fastapi_app:app", "--port", str(port), *flags,
                       "--no-access-log", "--log-level", "warning"]}
    if encoding == "off":
        # The ceiling: the same app uncompressed on each server.
        out["uvicorn"] = [py, "-m", "uvicorn", "compress_fastapi_app:app", "--port", str(port), "--no-access-log",
                          "--log-level", "warning", *UVICORN]
        return out
    if encoding == "gzip":
        for name, target in (("uvicorn+GZipMiddleware-6", "gzip_app"), ("uvicorn+GZipMiddleware", "gzip_default_app")):
            out[name] = [py, "-m", "uvicorn", f"compress_fastapi_app:{target}", "--port", str(port),
                         "--no-access-log", "--log-level", "warning", *UVICORN]
    out["saltare"] = [py, "-m", "saltare", "--host", "127.0.0.1", "--port", str(port), SALTARE_FLAG[encoding],
                      "compress_fastapi_app:app"]
    return out


def available(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def median(runs: list[dict]) -> dict:
    row = dict(runs[0])
    for key in ("rps", "cpu_s_per_mb", "loop_us", "other_us"):
        row[key] = statistics.median(r[key] for r in runs)
    row["rounds"] = [r["rps"] for r in runs]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--encodings", default="gzip,br,zstd")
    ap.add_argument("--placement", action="store_true",
                    help="add an off row, split the CPU by thread and time each codec alone (no peers)")
    ap.add_argument("--rounds", type=int, default=1, help="alternated rounds per server; medians reported")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed")
    rows = []
    encodings = args.encodings.split(",")
    if args.placement and "off" not in encodings:
        encodings.insert(0, "off")
    for encoding in encodings:
        names = [n for n in commands(encoding, 0) if available(n.split("+")[0])]
        if args.placement:
            names = ["zigcorn"]
        accept = "gzip, br, zstd" if encoding == "off" else encoding
        runs: dict[str, list[dict]] = {n: [] for n in names}
        for i in range(args.rounds):
            for name in names if i % 2 == 0 else names[::-1]:
                port = free_port()
                runs[name].append(run(name, commands(encoding, port)[name], port, accept, args.seconds))
                runs[name][-1]["encoding"] = encoding
        rows += [median(runs[n]) for n in names]
    print(f"{'server':24} {'enc':5} {'req/s':>9} {'p99':>9} {'bytes':>6} {'ratio':>6} {'CPU s/MB':>9}  rounds"
          "  (configuration)")
    for r in rows:
        config = configuration(commands(r["encoding"], 0)[r["server"]])
        print(f"{r['server']:24} {r['encoding']:5} {r['rps']:9.0f} {r['p99']:>9} {r['wire']:6d} {r['ratio']:6.2f} "
              f"{r['cpu_s_per_mb']:9.4f}  {', '.join(f'{x:.0f}' for x in r['rounds'])}  ({config})")
    if args.placement:
        print(f"\n{'enc':5} {'loop us/req':>12} {'others us/req':>14} {'codec alone us':>15}  other threads (CPU s)")
        for r in rows:
            print(f"{r['encoding']:5} {r['loop_us']:12.1f} {r['other_us']:14.1f} {codec_us(r['encoding']):15.1f}  "
                  f"{r['threads']}")


if __name__ == "__main__":
    main()
