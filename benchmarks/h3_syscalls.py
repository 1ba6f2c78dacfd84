"""HTTP/3's system calls per MiB and download rate beside HTTP/2 over TLS, one worker, all
through quic-go's client (tests/interop/go/h3, built as benchmarks/h3.py builds it).

    python benchmarks/h3_syscalls.py [--rounds 3] [--python PY --root DIR]

- system calls per MiB: ``strace -c -f`` on the server's processes while the client
  downloads 10 MiB three times over HTTP/3 (after one warm-up download); the total and
  the UDP ones (``sendmmsg``, ``sendmsg``, ``recvmmsg``, ``recvmsg``). strace slows the
  server: these runs give counts, not rates.
- the rate: 10 MiB over HTTP/3 and over HTTP/2 over TLS from one server, alternated
  ``--rounds`` times, without strace; the median of each and their ratio.

``--python``/``--root`` run another build's server (its interpreter and its checkout, the
app ``tests.apps.h3_app`` from there), to compare before and after a change.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import h3  # noqa: E402

MIB = 1024 * 1024
UDP_CALLS = ("sendmmsg", "sendmsg", "recvmmsg", "recvmsg")


def pids_of(pid: int) -> list[int]:
    """`pid` and its descendants."""
    found, pending = [], [pid]
    while pending:
        p = pending.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").iterdir():
            pending += [int(c) for c in (task / "children").read_text().split()]
    return found


def strace_counts(out: str) -> dict[str, int]:
    counts = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 5 and re.fullmatch(r"[\d.]+", parts[0]) and parts[-1] not in ("total",):
            counts[parts[-1]] = int(parts[3])
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--root", default=str(h3.ROOT))
    args = parser.parse_args()
    binary = h3.build_client()
    with tempfile.TemporaryDirectory() as tmp:
        certs = h3.make_certs(Path(tmp))
        port = h3.free_port()
        cmd = [args.python, "-m", "zigcorn", "tests.apps.h3_app:app", "--port", str(port), "--ssl-certfile",
               certs["cert"], "--ssl-keyfile", certs["key"], "--http3", "--no-access-log"]
        proc = subprocess.Popen(cmd, cwd=args.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            h3.wait_listening(proc, port)
            size = str(10 * MIB)
            h3.client(binary, "download", port, "h3", certs["ca"], "-size", size)
            trace = Path(tmp) / "strace.txt"
            attach = [a for p in pids_of(proc.pid) for a in ("-p", str(p))]
            tracer = subprocess.Popen(["strace", "-c", "-f", "-o", str(trace), *attach])
            time.sleep(1.0)
            for _ in range(3):
                h3.client(binary, "download", port, "h3", certs["ca"], "-size", size)
            tracer.send_signal(signal.SIGINT)
            tracer.wait(30)
            counts = strace_counts(trace.read_text())
            total = sum(counts.values())
            udp = {k: counts.get(k, 0) for k in UDP_CALLS}
            print(f"system calls per MiB over HTTP/3: {total / 30:.1f} in all; "
                  + ", ".join(f"{k} {v / 30:.1f}" for k, v in udp.items()))
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:6]
            print("the most frequent, per MiB: " + ", ".join(f"{k} {v / 30:.1f}" for k, v in top))
            rates = {"h3": [], "h2": []}
            for _ in range(args.rounds):
                for proto in ("h3", "h2"):
                    got = h3.client(binary, "download", port, proto, certs["ca"], "-size", size)
                    rates[proto].append(10 / got["seconds"])
            h3_rate, h2_rate = statistics.median(rates["h3"]), statistics.median(rates["h2"])
            print(f"10 MiB download, MiB/s (median of {args.rounds}, alternated): HTTP/3 {h3_rate:.0f} "
                  f"{[round(r) for r in rates['h3']]}, HTTP/2 over TLS {h2_rate:.0f} "
                  f"{[round(r) for r in rates['h2']]}, ratio {h3_rate / h2_rate:.2f}")
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)


if __name__ == "__main__":
    main()
