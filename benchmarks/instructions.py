"""Instructions per request, counted by valgrind's callgrind: an A/B that machine load
cannot blur (the same binary, inputs and environment give the same count).

    python benchmarks/instructions.py --b-args="--metrics-path /m --request-id-header x-request-id"
    python benchmarks/instructions.py --a-tree ../baseline --b-tree .

The server (the raw app, one process) runs under callgrind twice per side: once serving
N1 requests and once N2, each over one keep-alive connection; the difference of the two
totals over N2 - N1 is what one more request costs, start-up and shutdown cancelling
out. Python's hash seed is fixed so both sides do the same work. Needs valgrind.

The one count that scheduling still moves is the engine's spin while it waits for the
GIL (`spinWithoutGil`, some +-100 instructions a request between runs); each figure is
also given without it, which repeats within a few instructions.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

APPS_DIR = Path(__file__).resolve().parent / "apps"
REQUEST = b"GET / HTTP/1.1\r\nhost: bench\r\nuser-agent: instructions\r\naccept: */*\r\n\r\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_for_valgrind(tree: Path, python: str) -> Path:
    """A copy of tree/src whose engine is built for x86-64-v3; returns the copy's path."""
    dest = Path(tempfile.mkdtemp(prefix="zigcorn-callgrind-src-")) / "src"
    shutil.copytree(tree / "src", dest, ignore=shutil.ignore_patterns("_core*.so", "__pycache__"))
    include = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    suffix = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([python, "-m", "ziglang", "build-lib", "-dynamic", "-fPIC", "-lc", "-OReleaseSafe",
                    "-mcpu=x86_64_v3", "-I", include, "--name", "_core", str(dest / "zig" / "extension.zig"),
                    f"-femit-bin={dest / 'zigcorn' / ('_core' + suffix)}"], check=True, cwd=dest.parent)
    return dest


def spin_instructions(out: Path) -> int:
    """Instructions spent in the engine's GIL spin (inclusive), from a callgrind file."""
    text = subprocess.run(["callgrind_annotate", "--auto=no", "--inclusive=yes", "--threshold=100", str(out)],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    for line in text.splitlines():
        if "engine.zig:python.engine.spinWithoutGil [" in line:
            return int(line.split()[0].replace(",", ""))
    return 0


def serve(src: Path, python: str, extra: list[str], requests: int, app: str = "raw_app:app") -> tuple[int, int]:
    """Total instructions of a server process that answered `requests` requests, and
    those of them spent spinning for the GIL."""
    port = free_port()
    out = Path(tempfile.mkdtemp(prefix="zigcorn-callgrind-")) / "callgrind.out"
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"}
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", python, "-m", "zigcorn", app,
           "--port", str(port), "--no-access-log", "--log-level", "warning", *extra]
    proc = subprocess.Popen(cmd, cwd=APPS_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 600  # callgrind on a loaded 2-core machine starts slowly
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=60)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"server did not start: {shlex.join(cmd)}")
                time.sleep(0.2)
        with conn:
            for _ in range(requests):
                conn.sendall(REQUEST)
                got = b""
                while b"\r\n\r\n" not in got:
                    got += conn.recv(65536)
                head, _, body = got.partition(b"\r\n\r\n")
                length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))
                while len(body) < length:
                    body += conn.recv(65536)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = out.read_text(errors="replace")
    total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    if total is None:
        raise SystemExit(f"no total in {out}")
    spin = spin_instructions(out)
    shutil.rmtree(out.parent, ignore_errors=True)
    return int(total.group(1)), spin


def per_request(src: Path, python: str, extra: list[str], n1: int, n2: int, app: str) -> tuple[float, float]:
    """Instructions per request, with and without the GIL spin."""
    (t2, s2), (t1, s1) = serve(src, python, extra, n2, app), serve(src, python, extra, n1, app)
    return (t2 - t1) / (n2 - n1), ((t2 - s2) - (t1 - s1)) / (n2 - n1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a-tree", type=Path, default=Path("."))
    p.add_argument("--b-tree", type=Path, default=Path("."))
    p.add_argument("--a-args", default="", help="extra zigcorn flags for A (one string)")
    p.add_argument("--b-args", default="", help="extra zigcorn flags for B (one string)")
    p.add_argument("--n1", type=int, default=200)
    p.add_argument("--n2", type=int, default=1200)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--app", default="raw_app:app", help="the app, from benchmarks/apps (e.g. fastapi_app:app)")
    args = p.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install -y valgrind)")
    srcs = {tree: build_for_valgrind(tree, args.python) for tree in {args.a_tree.resolve(), args.b_tree.resolve()}}
    a = per_request(srcs[args.a_tree.resolve()], args.python, shlex.split(args.a_args), args.n1, args.n2, args.app)
    b = per_request(srcs[args.b_tree.resolve()], args.python, shlex.split(args.b_args), args.n1, args.n2, args.app)
    for src in srcs.values():
        shutil.rmtree(src.parent, ignore_errors=True)
    print(f"A {args.a_tree} {args.a_args}: {a[0]:,.0f} instructions per request ({a[1]:,.0f} without the GIL spin)")
    print(f"B {args.b_tree} {args.b_args}: {b[0]:,.0f} instructions per request ({b[1]:,.0f} without the GIL spin)")
    print(f"B/A: {b[0] / a[0]:.4f} ({(b[0] / a[0] - 1) * 100:+.2f}%); without the spin "
          f"{b[1] / a[1]:.4f} ({(b[1] / a[1] - 1) * 100:+.2f}%)")  # fmt: skip


if __name__ == "__main__":
    main()
