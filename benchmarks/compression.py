"""Response compression: FastAPI returning a 20 KiB JSON document, wrk at 64 connections
with `Accept-Encoding`, zigcorn `--compression` beside uvicorn with Starlette's
GZipMiddleware (one worker each).

    python benchmarks/compression.py                      # 10 s points
    python benchmarks/compression.py --seconds 3 --encodings gzip

Figures: requests/s, p99, the bytes on the wire per response (the ratio achieved) and
the server's CPU seconds per compressed MB. Not a timed test: numbers depend on the
machine; write them into RESULTS.md from a quiet one.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
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


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wire_bytes(port: int, encoding: str) -> int:
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{size_download}", "-H",
                          f"accept-encoding: {encoding}", f"http://127.0.0.1:{port}/doc"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


def run(name: str, cmd: list[str], port: int, encoding: str, seconds: int) -> dict:
    proc = subprocess.Popen(cmd, cwd=HERE / "apps", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_port(port)
        size = wire_bytes(port, encoding)
        before = cpu_seconds(proc.pid)
        out = subprocess.run(["wrk", "-t1", "-c64", f"-d{seconds}s", "--latency", "-H",
                              f"accept-encoding: {encoding}", f"http://127.0.0.1:{port}/doc"],
                             capture_output=True, text=True, check=True).stdout
        cpu = cpu_seconds(proc.pid) - before
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+\w+)", out).group(1)
    mb = total * DOC_BYTES / 1e6
    return {"server": name, "encoding": encoding, "rps": rps, "p99": p99, "wire": size,
            "ratio": DOC_BYTES / size if size else 0.0, "cpu_s_per_mb": cpu / mb if mb else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--encodings", default="gzip,br,zstd")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed")
    rows = []
    for encoding in args.encodings.split(","):
        port = free_port()
        rows.append(run("zigcorn", [sys.executable, "-m", "zigcorn", "compress_fastapi_app:app", "--port", str(port),
                                    "--compression", encoding, "--no-access-log", "--log-level", "warning"],
                        port, encoding, args.seconds))
        if encoding == "gzip":
            port = free_port()
            rows.append(run("uvicorn+GZipMiddleware", [sys.executable, "-m", "uvicorn", "compress_fastapi_app:gzip_app",
                                                       "--port", str(port), "--no-access-log", "--log-level", "warning"],
                            port, encoding, args.seconds))
    print(f"{'server':24} {'enc':5} {'req/s':>9} {'p99':>9} {'bytes':>6} {'ratio':>6} {'CPU s/MB':>9}")
    for r in rows:
        print(f"{r['server']:24} {r['encoding']:5} {r['rps']:9.0f} {r['p99']:>9} {r['wire']:6d} {r['ratio']:6.2f} "
              f"{r['cpu_s_per_mb']:9.4f}")


if __name__ == "__main__":
    main()
