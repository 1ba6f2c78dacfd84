"""Instructions per request of the Flask hello over WSGI, zigcorn against granian, counted
by valgrind's callgrind over every thread and process of the server: a CPU-cost
comparison that the machine's load cannot blur.

    python benchmarks/wsgi_instructions.py                       # both servers, 8 connections
    python benchmarks/wsgi_instructions.py --servers zigcorn --connections 1
    python benchmarks/wsgi_instructions.py --servers zigcorn --src /tmp/baseline/src   # A/B

Each server (one worker, the benchmark venv's Python, `benchmarks/apps/flask_app.py`)
runs under callgrind twice, serving N1 and then N2 requests of `GET /` over
`--connections` keep-alive connections (each connection sends its next request once
its previous answer came: `--connections` requests in flight); the difference of the
totals over N2 - N1 is what one more request costs, start-up and shutdown cancelling
out. Child processes are traced too (granian runs its worker in one). Under valgrind
threads run one at a time, so the count includes what threads spend handing work to
each other (wake-ups, lock and GIL handoffs) but not time spent waiting for a CPU.
"""

from __future__ import annotations

import argparse
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import environment  # noqa: E402
from servers import APPS_DIR, free_port, server_environ  # noqa: E402

REQUEST = b"GET / HTTP/1.1\r\nhost: bench\r\nuser-agent: instructions\r\naccept: */*\r\n\r\n"


def command(name: str, python: str, port: int) -> list[str]:
    if name == "zigcorn":
        return [python, "-m", "zigcorn", "flask_app:app", "--interface", "wsgi", "--port", str(port),
                "--no-access-log", "--log-level", "warning"]
    return [python, "-m", "granian", "--interface", "wsgi", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--no-access-log", "flask_app:app"]


def answered(buf: bytes) -> int:
    """Length of the first whole response in buf, or 0."""
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return 0
    length = int(re.search(rb"content-length: *(\d+)", buf[:head_end], re.I).group(1))
    end = head_end + 4 + length
    return end if len(buf) >= end else 0


def drive(port: int, connections: int, requests: int) -> None:
    """`requests` requests over `connections` connections, each one in flight per connection."""
    sel = selectors.DefaultSelector()
    conns = [socket.create_connection(("127.0.0.1", port), timeout=120) for _ in range(connections)]
    left = {c: requests // connections + (i < requests % connections) for i, c in enumerate(conns)}
    bufs = {c: b"" for c in conns}
    for c in conns:
        if left[c]:
            c.sendall(REQUEST)
            sel.register(c, selectors.EVENT_READ)
    while sel.get_map():
        for key, _ in sel.select(120):
            c = key.fileobj
            data = c.recv(65536)
            if not data:
                raise SystemExit("the server closed a connection")
            bufs[c] += data
            while (n := answered(bufs[c])):
                bufs[c] = bufs[c][n:]
                left[c] -= 1
                if left[c]:
                    c.sendall(REQUEST)
                else:
                    sel.unregister(c)
    for c in conns:
        c.close()


def serve(name: str, python: str, connections: int, requests: int, src: str | None) -> int:
    """Total instructions of every process of a server that answered `requests` requests."""
    port = free_port()
    out_dir = Path(tempfile.mkdtemp(prefix="zigcorn-wsgi-callgrind-"))
    cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes",
           f"--callgrind-out-file={out_dir}/callgrind.out.%p", *command(name, python, port)]
    env = {**server_environ(), "PYTHONHASHSEED": "0"}
    if src:  # another tree's src/ (with its engine built) before the venv's editable zigcorn
        env["PYTHONPATH"] = os.pathsep.join([src, env["PYTHONPATH"]])
    proc = subprocess.Popen(cmd, cwd=APPS_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=60).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"{name} did not start under valgrind")
                time.sleep(0.5)
        drive(port, connections, requests)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    total = 0
    for f in out_dir.iterdir():
        m = re.search(r"^(?:summary|totals): (\d+)", f.read_text(errors="replace"), re.M)
        if m:
            total += int(m.group(1))
        f.unlink()
    out_dir.rmdir()
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--servers", default="zigcorn,granian")
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--n1", type=int, default=200)
    p.add_argument("--n2", type=int, default=1200)
    p.add_argument("--src", help="zigcorn from this src/ directory (built) instead of the working tree")
    args = p.parse_args()
    python = environment.ensure_venv()
    for name in args.servers.split(","):
        t2 = serve(name, python, args.connections, args.n2, args.src)
        t1 = serve(name, python, args.connections, args.n1, args.src)
        print(f"{name}: {(t2 - t1) / (args.n2 - args.n1):,.0f} instructions per request "
              f"(c{args.connections}, {args.n2} - {args.n1} requests)", flush=True)


if __name__ == "__main__":
    main()
