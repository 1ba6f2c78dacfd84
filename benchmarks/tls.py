"""HTTPS figures: zigcorn beside uvicorn, same certificate, same raw app, one worker each.

    python benchmarks/tls.py [--seconds 4] [--idle-connections 1000]

For each server: wrk over HTTPS at 1 and 64 connections (keep-alive: one handshake per
connection), then the RSS growth per idle TLS keep-alive connection (each did its
handshake and one request). The certificate is an ECDSA one made by trustme.
"""

from __future__ import annotations

import argparse
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory import _read_response, raise_nofile, settle  # noqa: E402
from servers import named  # noqa: E402

APPS_DIR = Path(__file__).resolve().parent / "apps"
REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: zigcorn-bench\r\n\r\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(server: str, port: int, cert: str, key: str) -> list[str]:
    common = ["--host", "127.0.0.1", "--port", str(port), "--ssl-certfile", cert, "--ssl-keyfile", key,
              "--no-access-log", "--log-level", "warning", "--timeout-keep-alive", "60", "--loop", "uvloop"]
    if server == "zigcorn":
        return [sys.executable, "-m", "zigcorn", "raw_app:app", *common, "--limit-connections", "10000"]
    return [sys.executable, "-m", "uvicorn", "raw_app:app", *common, "--http", "httptools"]


def wait_ready(port: int, ctx: ssl.SSLContext, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=2)) as s:
                s.sendall(REQUEST)
                if _read_response(s) == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server on {port} not ready")


def wrk(port: int, connections: int, seconds: float) -> float:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", f"https://127.0.0.1:{port}/"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", out)
    if errors:
        print(f"    wrk reported: {errors.group(0)}", file=sys.stderr)
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def idle_tls_cost(pid: int, port: int, ctx: ssl.SSLContext, count: int) -> int:
    before = settle(pid, min_wait=0.5)
    socks = []
    try:
        for _ in range(count):
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10))
            s.sendall(REQUEST)
            if _read_response(s) != 200:
                raise RuntimeError("idle-connection request failed")
            socks.append(s)
        time.sleep(2.0)
        after = settle(pid, min_wait=0.5)
    finally:
        for s in socks:
            s.close()
    return round((after.rss_kib - before.rss_kib) * 1024 / count)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=4)
    p.add_argument("--idle-connections", type=int, default=1000)
    p.add_argument("--servers", default="zigcorn,uvicorn")
    args = p.parse_args()
    raise_nofile()
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    tmp = Path(tempfile.mkdtemp(prefix="zigcorn-tls-bench-"))
    cert_file, key_file = tmp / "cert.pem", tmp / "key.pem"
    cert_file.write_bytes(b"".join(pem.bytes() for pem in cert.cert_chain_pems))
    key_file.write_bytes(cert.private_key_pem.bytes())
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    ctx.check_hostname = False

    rows = []
    for server in args.servers.split(","):
        port = free_port()
        proc = subprocess.Popen(command(server, port, str(cert_file), str(key_file)), cwd=APPS_DIR)
        try:
            wait_ready(port, ctx)
            wrk(port, 8, 1)  # warm-up
            c1 = wrk(port, 1, args.seconds)
            c64 = wrk(port, 64, args.seconds)
            idle = idle_tls_cost(proc.pid, port, ctx, args.idle_connections)
            rows.append((named(server, command(server, 0, "cert", "key")), c1, c64, idle))
            print(f"{server}: {c1:,.0f} req/s c1, {c64:,.0f} req/s c64, {idle:,} B per idle TLS connection", file=sys.stderr)
        finally:
            proc.terminate()
            proc.wait(10)
    print("| server | HTTPS req/s c1 | HTTPS req/s c64 | per idle TLS conn |")
    print("|---|---:|---:|---:|")
    for server, c1, c64, idle in rows:
        print(f"| {server} | {c1:,.0f} | {c64:,.0f} | {idle / 1024:.1f} KiB |")


if __name__ == "__main__":
    main()
