"""HTTP load from ``wrk`` (one thread, ``--latency``) and the parsing of its report."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

WRK_MISSING = (
    "wrk is not installed: the benchmark needs it for load generation.\n"
    "Install it with:  apt-get install -y wrk   (Debian/Ubuntu)"
)

_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_LATENCY = re.compile(r"^\s*(50|75|90|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m|h)\s*$", re.M)
_RPS = re.compile(r"^Requests/sec:\s+([\d.]+)", re.M)
_TOTAL = re.compile(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m|h)", re.M)
_NON_2XX = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
_SOCKET = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")


def wrk_path() -> str | None:
    return shutil.which("wrk")


def parse_wrk(text: str) -> dict:
    """Requests/second, latency percentiles (ms), request count and error counts from wrk's output."""
    rps = _RPS.search(text)
    total = _TOTAL.search(text)
    if rps is None or total is None:
        raise ValueError(f"unrecognised wrk output:\n{text}")
    percentiles = {f"p{p}_ms": float(v) * _UNITS_MS[u] for p, v, u in _LATENCY.findall(text)}
    non_2xx = _NON_2XX.search(text)
    sock = _SOCKET.search(text)
    errors = dict(zip(("connect", "read", "write", "timeout"), map(int, sock.groups()))) if sock else \
        {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    return {
        "rps": float(rps.group(1)),
        "requests": int(total.group(1)),
        "seconds": float(total.group(2)) * _UNITS_MS[total.group(3)] / 1000,
        "p50_ms": percentiles.get("p50_ms"),
        "p99_ms": percentiles.get("p99_ms"),
        "latency_ms": percentiles,
        "non_2xx_3xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": errors,
        "socket_errors_total": sum(errors.values()),
    }


def run_wrk(url: str, connections: int, seconds: int, timeout_s: int = 5, headers: tuple[str, ...] = ()) -> dict:
    """One wrk run (``-t1``); whole seconds, as wrk takes durations in seconds."""
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, seconds)}s", f"--timeout={timeout_s}s", "--latency",
           *(arg for header in headers for arg in ("-H", header)), url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + timeout_s + 30)
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stderr or proc.stdout}")
    result = parse_wrk(proc.stdout)
    result["connections"] = connections
    return result


def cpu_by_process(pid: int) -> dict[int, float]:
    """User and system CPU time of `pid` and each of its live descendants so far."""
    from memory import tree_pids

    tick = os.sysconf("SC_CLK_TCK")
    times = {}
    for p in tree_pids(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        times[p] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return times


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of `pid` and its live descendants so far."""
    return sum(cpu_by_process(pid).values())


def run_wrk_cpu(url: str, connections: int, seconds: int, pid: int) -> dict:
    """`run_wrk` with the server's CPU time per request beside (``server_cpu_us``: user and
    system time of `pid` and its children over the run, divided by the requests). It
    counts zigcorn's busy poll too, so a saturated or spinning server shows about its
    wall time per request; where the server has idle time it shows what a request cost."""
    before = cpu_by_process(pid)
    result = run_wrk(url, connections, seconds)
    after = cpu_by_process(pid)
    used = {p: after[p] - before.get(p, 0.0) for p in after}
    total = sum(used.values())
    result["server_cpu_us"] = round(total / max(result["requests"], 1) * 1e6, 2)
    # Each process's share of that CPU time, largest first: with several workers, whether
    # the load spread over them (0.5 and 0.5) or one served nearly all of it.
    shares = sorted((u / total for u in used.values() if total > 0), reverse=True)
    result["cpu_share_by_process"] = [round(x, 3) for x in shares]
    return result
