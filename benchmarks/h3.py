"""HTTP/3 figures: zigcorn's HTTP/3 beside hypercorn's HTTP/3 and zigcorn's HTTP/2 over
TLS, one worker each, all driven by the same client: quic-go's (tests/interop/go/h3),
which speaks HTTP/3 and, with ``-proto h2``, HTTP/2 over TLS through Go's net/http.

    python benchmarks/h3.py [--seconds 5] [--idle 200] [--idle-only] [--only zigcorn-h3,...] [--out FILE]

For each server, a fresh process (tests/apps/h3_app.py, the app the HTTP/3 tests use):

- requests a second at 1 and at 64 requests open at once on one connection (``/info``, a
  small JSON answer), ``--seconds`` each after one warm-up request, with the CPU time each
  side spent per request (the server's from /proc, its workers included; the client's
  from its rusage): at one stream each request is a round trip, so the client's share
  bounds the rate whatever the server does;
- the time to download 10 MiB (``/large``), the median of 3;
- memory per idle connection, on a second fresh process (after one request): N connections
  (``--idle``), each after one request, held open; the server's RSS delta over N once they
  are all up (``--idle-only``: this figure alone).

Needs Go (the client is built once into the temp folder the tests use), the [test]
extra (trustme, hypercorn) and OpenSSL 3. Prints a Markdown table and writes JSON
(default benchmarks/results/h3.json). A figure from a shared or busy machine is a
rough one: run it on a quiet machine before quoting it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import cpu_seconds  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GO_SOURCES = ROOT / "tests" / "interop" / "go" / "h3"
CACHE = Path(tempfile.gettempdir()) / "zigcorn-interop"
DOWNLOAD_BYTES = 10 * 1024 * 1024


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_client() -> Path:
    go = shutil.which("go")
    if go is None:
        sys.exit("benchmarks/h3.py needs Go to build the quic-go client (Debian: golang-go)")
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout
    digest = hashlib.sha256(version.encode())
    for path in sorted([*GO_SOURCES.glob("*.go"), GO_SOURCES / "go.mod", GO_SOURCES / "go.sum"]):
        digest.update(f"\0{path.name}\0".encode() + path.read_bytes())
    binary = CACHE / f"go-h3-{digest.hexdigest()[:16]}" / "h3client"
    if not binary.exists():
        log("building the quic-go client")
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_name(f"h3client.{os.getpid()}.partial")
        subprocess.run([go, "build", "-buildvcs=false", "-o", str(partial), "."], cwd=GO_SOURCES, check=True,
                       timeout=600)
        os.replace(partial, binary)
    return binary


def make_certs(directory: Path) -> dict[str, str]:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    files = {"cert": directory / "cert.pem", "key": directory / "key.pem", "ca": directory / "ca.pem"}
    files["cert"].write_bytes(b"".join(p.bytes() for p in cert.cert_chain_pems))
    files["key"].write_bytes(cert.private_key_pem.bytes())
    files["ca"].write_bytes(ca.cert_pem.bytes())
    return {k: str(v) for k, v in files.items()}


def free_port() -> int:
    """A port free for TCP and UDP both."""
    for _ in range(50):
        with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            tcp.bind(("127.0.0.1", 0))
            port = tcp.getsockname()[1]
            try:
                udp.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no port free for both TCP and UDP")


def server_command(name: str, port: int, certs: dict[str, str]) -> list[str]:
    app = "tests.apps.h3_app:app"
    tls = ["--ssl-certfile", certs["cert"], "--ssl-keyfile", certs["key"]]
    if name == "zigcorn-h3":
        return [sys.executable, "-m", "zigcorn", app, "--port", str(port), *tls, "--http3", "--no-access-log"]
    if name == "zigcorn-h2":
        return [sys.executable, "-m", "zigcorn", app, "--port", str(port), *tls, "--no-access-log"]
    if name == "hypercorn-h3":
        return [sys.executable, "-m", "hypercorn", "--certfile", certs["cert"], "--keyfile", certs["key"],
                "--bind", f"127.0.0.1:{port}", "--quic-bind", f"127.0.0.1:{port}", "--workers", "1", app]
    raise ValueError(name)


SERVERS = {"zigcorn-h3": "h3", "hypercorn-h3": "h3", "zigcorn-h2": "h2"}
# Each row's configuration, as servers.configuration names it in the other harnesses.
CONFIGURATION = {"zigcorn-h3": "--http3", "hypercorn-h3": "--quic-bind, aioquic, asyncio worker",
                 "zigcorn-h2": "defaults, h2 over TLS"}


def rss_kb(pid: int) -> int:
    """The RSS of `pid` and its descendants."""
    total = 0
    pending = [pid]
    while pending:
        p = pending.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{p}/task").iterdir():
                children = (task / "children").read_text().split()
                pending += [int(c) for c in children]
        except OSError:
            continue
    return total


def wait_listening(proc: subprocess.Popen, port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the server did not listen in time")


def client(binary: Path, check: str, port: int, proto: str, ca: str, *flags: str, timeout: float = 120) -> dict:
    """The client's JSON answer, with its own CPU seconds (`client_cpu_s`) added."""
    cmd = [str(binary), check, "-addr", f"127.0.0.1:{port}", "-proto", proto, "-ca", ca, "-timeout",
           f"{int(timeout) - 5}s", *flags]
    before = os.times()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    after = os.times()
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    answer = json.loads(done.stdout.splitlines()[-1])
    answer["client_cpu_s"] = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return answer


def idle_cost(binary: Path, pid: int, port: int, proto: str, ca: str, count: int) -> float:
    """KiB of server RSS per idle connection, `count` of them held open."""
    time.sleep(0.5)
    before = rss_kb(pid)
    cmd = [str(binary), "idle", "-addr", f"127.0.0.1:{port}", "-proto", proto, "-ca", ca, "-n", str(count),
           "-timeout", "110s"]
    holder = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"the idle client said {line!r}")
        time.sleep(1.0)  # let the server settle (timers, freed handshake state)
        after = rss_kb(pid)
    finally:
        holder.stdin.close()
        holder.wait(30)
    return (after - before) / count


def started(name: str, port: int, certs: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen(server_command(name, port, certs), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_listening(proc, port)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, 15)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()


def measure(name: str, binary: Path, certs: dict[str, str], seconds: int, idle: int, load: bool = True) -> dict:
    proto = SERVERS[name]
    ca = certs["ca"]
    result = {"server": name, "proto": proto}
    if load:
        port = free_port()
        proc = started(name, port, certs)
        try:
            client(binary, "get", port, proto, ca, "-n", "1", timeout=30)  # up, and answering in this protocol
            for streams in (1, 64):
                server_before = cpu_seconds(proc.pid)
                got = client(binary, "bench", port, proto, ca, "-c", str(streams), "-duration", f"{seconds}s")
                server_cpu = cpu_seconds(proc.pid) - server_before
                result[f"rps_{streams}"] = round(got["rps"])
                # CPU per request on each side (the one-stream row is a round trip per request:
                # what the client spends bounds the rate whatever the server does).
                requests = max(got["requests"], 1)
                result[f"server_cpu_us_{streams}"] = round(server_cpu / requests * 1e6)
                result[f"client_cpu_us_{streams}"] = round(got["client_cpu_s"] / requests * 1e6)
            times = [client(binary, "download", port, proto, ca, "-size", str(DOWNLOAD_BYTES))["seconds"]
                     for _ in range(3)]
            result["download_10mib_s"] = round(statistics.median(times), 3)
        finally:
            stop(proc)
    # The idle figure on a process of its own: one that served the load above would hand the
    # idle connections memory it had freed, and its RSS would not grow by what they cost.
    port = free_port()
    proc = started(name, port, certs)
    try:
        client(binary, "get", port, proto, ca, "-n", "1", timeout=30)
        result["idle_kib_per_connection"] = round(idle_cost(binary, proc.pid, port, proto, ca, idle), 2)
    finally:
        stop(proc)
    return result


def table(rows: list[dict]) -> str:
    lines = ["| server | req/s, 1 stream | req/s, 64 streams | 10 MiB download | RSS per idle connection "
             "| CPU µs a request, 1 stream: server / client | 64 streams: server / client |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['server']} | {r['error']} | | | | | |")
            continue
        cpu = [f"{r.get(f'server_cpu_us_{n}', '-')} / {r.get(f'client_cpu_us_{n}', '-')}" for n in (1, 64)]
        lines.append(f"| {r['server']} ({CONFIGURATION[r['server']]}) | {r.get('rps_1', '-')} | {r.get('rps_64', '-')} | {r.get('download_10mib_s', '-')} s | "
                     f"{r['idle_kib_per_connection']} KiB | {cpu[0]} | {cpu[1]} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--idle", type=int, default=200, help="idle connections held for the memory figure")
    parser.add_argument("--idle-only", action="store_true", help="only the idle connections' memory")
    parser.add_argument("--only", default=",".join(SERVERS), help="comma list of " + ", ".join(SERVERS))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "h3.json"))
    args = parser.parse_args()
    binary = build_client()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        certs = make_certs(Path(tmp))
        for name in args.only.split(","):
            log(f"measuring {name}")
            try:
                rows.append(measure(name, binary, certs, args.seconds, args.idle, load=not args.idle_only))
            except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
                rows.append({"server": name, "error": str(exc).splitlines()[0][:200]})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
