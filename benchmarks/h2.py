"""HTTP/2 figures: h2load over h2c and over TLS (ALPN h2), and the RSS of an idle h2 connection.

As a module (``run.py --http2``): for each server that speaks HTTP/2, three fresh
processes per app, one after another:

- h2c (plain port, prior knowledge): both routes checked over h2c, then ``h2load -t1 -c16
  -m10 -D<s> --warm-up-time=<s>`` on ``http://``;
- a fresh h2c process: the RSS an idle HTTP/2 connection costs once its stream is done
  (``idle_h2_cost``);
- TLS (the same port kind, ``https://``, ALPN must pick ``h2``): both routes checked over
  h2, then the same h2load run.

h2load prints min/max/mean/sd of the request time but no percentiles; p50 and p99 come
from its ``--log-file`` (one line per request of the measured phase, warm-up excluded).

As a script, under the servers' Python (the benchmark venv), for what needs the ``h2``
library or ``trustme`` (the harness itself stays on the standard library):

    python benchmarks/h2.py cert DIR                       # trustme CA + cert, key as PKCS#8
    python benchmarks/h2.py get [--ca PEM] [--deadline S] URL...   # one h2 GET per URL, JSON out
    python benchmarks/h2.py hold --port P                  # idle h2c connections, driven on stdin

(This file shadows the ``h2`` library for code that runs from this folder: the script
entry point takes its own folder off ``sys.path`` before importing the library.)
"""

from __future__ import annotations

import json
import re
import select
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from memory import PeakSampler, connection_cost, settle

BENCH_DIR = Path(__file__).resolve().parent
H2LOAD_MISSING = (
    "h2load is not installed: the HTTP/2 figures need it.\n"
    "Install it with:  apt-get install -y nghttp2-client   (Debian/Ubuntu)"
)
# What the servers' Python needs for this section, by module: its pip name. (uvicorn's
# zttp, for its HTTP/2, is in environment.REQUIREMENTS: the uvicorn-zttp row needs it.)
EXTRAS = {"h2": "h2", "trustme": "trustme"}
EXPECTED = {"/": {"message": "Hello, world!"}, "/items/7?q=x": {"item_id": 7, "q": "x"}}


def log(message: str) -> None:
    print(message, flush=True)


def h2load_path() -> str | None:
    return shutil.which("h2load")


# -- h2load and its output --------------------------------------------------------------------

_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_FINISHED = re.compile(r"^finished in ([\d.]+)(us|ms|s|m|h), ([\d.]+) req/s", re.M)
_REQUESTS = re.compile(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                       r"(\d+) errored, (\d+) timeout", re.M)
_STATUS = re.compile(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", re.M)
_PROTOCOL = re.compile(r"^Application protocol: (\S+)", re.M)
_REQUEST_TIME = re.compile(r"^time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)"
                           r"\s+([\d.]+)(us|ms|s)", re.M)


def parse_h2load(text: str) -> dict:
    """req/s, request counts, status classes, protocol and request-time summary from h2load.

    h2load's ``failed`` already counts the ``errored`` streams (reset, connection lost,
    timed out) and the 4xx/5xx answers; it counts 3xx as success. ``errors`` is therefore
    ``failed + 3xx``: every request that did not get a 2xx, each counted once.
    """
    finished = _FINISHED.search(text)
    requests = _REQUESTS.search(text)
    status = _STATUS.search(text)
    if finished is None or requests is None or status is None:
        raise ValueError(f"unrecognised h2load output:\n{text[-3000:]}")
    total, started, done, succeeded, failed, errored, timeout = map(int, requests.groups())
    s2xx, s3xx, s4xx, s5xx = map(int, status.groups())
    protocol = _PROTOCOL.search(text)
    result = {
        "rps": float(finished.group(3)),
        "requests": done,
        "started": started,
        "succeeded": succeeded,
        "failed": failed,
        "errored": errored,
        "timeout": timeout,
        "status": {"2xx": s2xx, "3xx": s3xx, "4xx": s4xx, "5xx": s5xx},
        "errors": failed + s3xx,
        "protocol": protocol.group(1) if protocol else None,
        "mean_ms": None,
        "max_ms": None,
    }
    rt = _REQUEST_TIME.search(text)
    if rt:
        g = rt.groups()
        ms = [round(float(g[i]) * _UNITS_MS[g[i + 1]], 3) for i in range(0, 8, 2)]
        result.update(min_ms=ms[0], max_ms=ms[1], mean_ms=ms[2], sd_ms=ms[3])
    return result


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` (0-100) of an ascending list."""
    if not sorted_values:
        return None
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def log_latencies(path: Path) -> dict:
    """p50/p90/p99 (ms) of the completed requests in an h2load ``--log-file``.

    Columns: start (µs since the epoch), status (-1 for a failed stream), µs until the
    end of the response. h2load writes only the measured phase, not the warm-up.
    """
    times = []
    with open(path) as f:
        for line in f:
            fields = line.split("\t")
            if len(fields) >= 3 and fields[1] != "-1":
                times.append(int(fields[2]) / 1000)
    times.sort()
    return {"logged": len(times), **{f"p{q}_ms": percentile(times, q) for q in (50, 90, 99)}}


def run_h2load(url: str, clients: int, streams: int, seconds: int, warmup_s: int) -> dict:
    """One h2load run, one thread: ``clients`` connections, ``streams`` requests in flight on each."""
    with tempfile.TemporaryDirectory(prefix="zigcorn-h2load-") as tmp:
        log_file = Path(tmp) / "requests.tsv"
        cmd = ["h2load", "-t1", f"-c{clients}", f"-m{streams}", f"-D{max(1, seconds)}",
               f"--warm-up-time={max(0, warmup_s)}s", f"--log-file={log_file}", url]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + warmup_s + 60)
        if proc.returncode != 0:
            raise RuntimeError(f"h2load failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")
        result = parse_h2load(proc.stdout)
        result.update(log_latencies(log_file) if log_file.exists() else {"logged": 0, "p50_ms": None,
                                                                             "p90_ms": None, "p99_ms": None})
    result.update(clients=clients, streams=streams, seconds=seconds, warmup_s=warmup_s, command=cmd[:-2] + [url])
    want = "h2" if url.startswith("https:") else "h2c"
    if result["protocol"] != want:
        raise RuntimeError(f"h2load negotiated {result['protocol'] or 'no protocol'}, not {want}:\n"
                           f"{(proc.stdout + proc.stderr)[-2000:]}")
    if result["succeeded"] == 0:
        raise RuntimeError(f"h2load: no request succeeded:\n{(proc.stdout + proc.stderr)[-2000:]}")
    return result


# -- server command lines ---------------------------------------------------------------------

@dataclass(frozen=True)
class Certs:
    cert: str  # the certificate chain (PEM)
    key: str   # its private key, PKCS#8 PEM (granian takes no other)
    ca: str    # the CA that signed it, for the validation client


def _insert_before_app(cmd: list[str], extra: list[str]) -> list[str]:
    """granian takes the app as its last argument: options go before it."""
    return [*cmd[:-1], *extra, cmd[-1]]


def h2_command(name: str, base_cmd: list[str], certs: Certs | None) -> list[str]:
    """The server's ordinary command line (servers.py) adjusted for h2c, or for TLS with ``certs``."""
    if name.startswith("zigcorn"):  # h2c on the plain port and ALPN h2 by default
        return base_cmd + (["--ssl-certfile", certs.cert, "--ssl-keyfile", certs.key] if certs else [])
    if _family(name) == "granian":  # every granian row: its loop and task stay as they are
        if certs is None:
            return _insert_before_app(base_cmd, ["--http", "2"])
        return _insert_before_app(base_cmd, ["--http", "auto", "--ssl-certificate", certs.cert,
                                             "--ssl-keyfile", certs.key])
    if _family(name) == "hypercorn":  # h2c with prior knowledge and ALPN h2 by default
        return base_cmd + (["--certfile", certs.cert, "--keyfile", certs.key] if certs else [])
    if _family(name) == "h2corn":  # h2c with prior knowledge on the plain port, ALPN h2 with TLS
        return base_cmd + (["--certfile", certs.cert, "--keyfile", certs.key] if certs else [])
    if _family(name) == "uvicorn":  # HTTP/2 needs the zttp protocol implementation
        cmd = list(base_cmd)
        cmd[cmd.index("--http") + 1] = "zttp"
        cmd.append("--http2")
        return cmd + (["--ssl-certfile", certs.cert, "--ssl-keyfile", certs.key] if certs else [])
    raise ValueError(f"{name}: no HTTP/2 command line")


def _family(name: str) -> str:
    """The server a row runs: ``granian-rloop-rust`` and ``granian-OO`` are granian."""
    return name.partition("-")[0]


@dataclass(frozen=True)
class Support:
    h2c: str | None   # None: runs; else why not
    tls: str | None


def _help(env, module: str) -> str:
    from servers import server_environ

    out = subprocess.run([env.python, "-m", module, "--help"], capture_output=True, text=True, timeout=60,
                         env=server_environ())
    return out.stdout + out.stderr


def support(spec, env) -> Support:
    """Which HTTP/2 modes a server can run here, from its ``--help`` and the modules it needs."""
    name = spec.name
    if not spec.is_app_server:
        return Support("static ceiling, not configured for HTTP/2", "static ceiling, not configured for HTTP/2")
    tls_missing = None if env.has("trustme") else "trustme is not installed (it makes the certificate)"
    if name.startswith("zigcorn"):
        ok = "--http2" in _help(env, "zigcorn")
        why = None if ok else "--http2 is not in zigcorn --help"
        return Support(why, why or tls_missing)
    family = _family(name)
    if family == "granian":
        ok = re.search(r"--http \[[^\]]*\b2\b", _help(env, "granian")) is not None
        why = None if ok else "granian --help offers no --http 2"
        return Support(why, why or tls_missing)
    if family == "hypercorn":
        why = None if env.has("h2") else "the h2 library is not installed"
        return Support(why, why or tls_missing)
    if family == "h2corn":
        return Support(None, tls_missing)
    if family == "uvicorn":
        if "--http2" not in _help(env, "uvicorn"):
            why = "uvicorn --help offers no --http2"
        elif not env.has("zttp"):
            why = "uvicorn's --http2 needs --http zttp, and zttp is not installed"
        else:
            why = None
        return Support(why, why or tls_missing)
    if family == "saltare":
        # 1.13.0: --http2 is h2 over TLS by ALPN only (an h2c preface gets "parse failed:
        # UnsupportedVersion" and a closed connection), and the CLI has no certificate
        # option (TLS only through the Python API, saltare.run(ssl_certfile=...)).
        return Support("its --http2 is for TLS (ALPN) only: an h2c prior-knowledge preface is refused",
                       "its command line has no certificate option (TLS only from its Python API)")
    return Support(f"{name}: HTTP/2 not set up in h2.py", f"{name}: HTTP/2 not set up in h2.py")


# -- the helper subprocess (runs under the servers' Python, which has h2 and trustme) ---------

def _helper_cmd(env, *args: str) -> list[str]:
    return [env.python, str(Path(__file__).resolve()), *args]


def make_certs(env, directory: Path) -> Certs:
    out = subprocess.run(_helper_cmd(env, "cert", str(directory)), capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"certificate: {out.stderr[-2000:]}")
    return Certs(str(directory / "cert.pem"), str(directory / "key.pem"), str(directory / "ca.pem"))


def _run_beside(server, cmd: list[str], timeout: float) -> str:
    """Run ``cmd`` while watching ``server``: fail as soon as the server exits."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        try:
            while proc.poll() is None:
                if server.proc.poll() is not None:
                    raise RuntimeError(f"{server.spec.name} exited with {server.proc.returncode}:\n"
                                       f"{server.output()[-1500:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{server.spec.name}: no HTTP/2 answer within {timeout:.0f}s:\n"
                                       f"{server.output()[-1500:]}")
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            lines = err.read().strip().splitlines() or ["(no output)"]
            raise RuntimeError(f"{server.spec.name}: HTTP/2 request failed: {lines[-1]}\n"
                               f"server output (tail):\n{server.output()[-1500:]}")
        return out.read()


def wait_ready_h2(server, env, scheme: str, certs: Certs | None, timeout: float = 60.0) -> None:
    """Poll ``GET /`` over HTTP/2 until it answers, then check both routes' bodies (and ALPN)."""
    base = f"{scheme}://127.0.0.1:{server.port}"
    args = ["get", "--deadline", str(timeout)] + (["--ca", certs.ca] if certs else [])
    answers = json.loads(_run_beside(server, _helper_cmd(env, *args, *(base + p for p in EXPECTED)), timeout + 15))
    for (path, want), answer in zip(EXPECTED.items(), answers):
        if answer["status"] != 200 or json.loads(answer["body"]) != want:
            raise RuntimeError(f"{server.spec.name} h2 GET {path} -> {answer['status']} {answer['body'][:200]!r}")
        if scheme == "https" and answer["alpn"] != "h2":
            raise RuntimeError(f"{server.spec.name}: ALPN chose {answer['alpn']!r}, not h2")


class Holder:
    """The ``hold`` helper: keeps h2c connections open, each after one finished request."""

    def __init__(self, env, port: int):
        self.proc = subprocess.Popen(_helper_cmd(env, "hold", "--port", str(port)), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def _ask(self, line: str, timeout: float = 180.0) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        answer = self.proc.stdout.readline() if ready else ""
        if not answer:
            raise RuntimeError(f"h2 connection holder: no answer to {line!r} (exit {self.proc.poll()})")
        reply = json.loads(answer)
        if "error" in reply:
            raise RuntimeError(f"h2 connection holder: {reply['error']}")
        return reply

    def open(self, count: int) -> int:
        return self._ask(f"open {count}")["open"]

    def alive(self) -> int:
        return self._ask("check")["alive"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "Holder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def idle_h2_cost(env, root: int, port: int, count: int, wait: float) -> dict:
    """RSS that one idle h2c connection costs after its one stream finished.

    The same slope as the HTTP/1.1 figure (memory.idle_connection_cost): tree RSS with all
    ``count`` connections held, minus RSS with the first half held, over the second half.
    ``total_bytes_per_connection`` is the whole growth from before the first connection
    over ``count``: it also holds one-time costs that do not scale with connections.
    """
    half = count // 2
    before = settle(root, min_wait=0.5, tolerance_kib=16)
    with Holder(env, port) as holder:
        holder.open(half)
        time.sleep(wait)
        middle = settle(root, min_wait=1.0, tolerance_kib=16)
        holder.open(count - half)
        time.sleep(wait)
        after = settle(root, min_wait=1.0, tolerance_kib=16)
        alive = holder.alive()
    return connection_cost(count, half, alive, before, middle, after)


# -- the section run.py calls ------------------------------------------------------------------

@dataclass(frozen=True)
class H2Config:
    duration_s: int
    warmup_s: int
    clients: int
    streams: int
    idle_connections: int
    idle_wait_s: float
    path: str


def _started_h2(spec, env, app: str, certs: Certs | None, workers: int = 1):
    from servers import start, wait_workers

    base = spec.command

    def command(env_, app_, port, workers_, workdir):
        return h2_command(spec.name, base(env_, app_, port, workers_, workdir), certs)

    server = start(replace(spec, command=command), env, app, workers)
    try:
        wait_ready_h2(server, env, "https" if certs else "http", certs)
        wait_workers(server, workers)
        server.check_configuration()
    except BaseException:
        server.stop()
        raise
    return server


def _load(server, scheme: str, cfg: H2Config) -> dict:
    from servers import configuration

    url = f"{scheme}://127.0.0.1:{server.port}{cfg.path}"
    with PeakSampler(server.pid) as sampler:
        point = run_h2load(url, cfg.clients, cfg.streams, cfg.duration_s, cfg.warmup_s)
    point["peak_rss_kib"] = sampler.peak_kib
    point["server_command"] = server.command
    point["configuration"] = configuration(server.command, server.spec.environ)
    return point


def fresh_h2_point(spec, env, app: str, certs: Certs | None, cfg: H2Config, workers: int = 1) -> dict:
    """One h2load figure on a fresh process (rounds.py): h2c, or h2 over TLS with ``certs``;
    both routes checked over HTTP/2 first, the warm-up is h2load's own, and the server's
    CPU time per request is beside it (as ``load.run_wrk_cpu``)."""
    from load import cpu_seconds

    scheme = "https" if certs else "http"
    with _started_h2(spec, env, app, certs, workers) as server:
        before = cpu_seconds(server.pid)
        point = _load(server, scheme, cfg)
        used = cpu_seconds(server.pid) - before
    # h2load's -D counts the measured phase only; the CPU also covers its warm-up, so the
    # figure is per request of both phases at the measured rate.
    total = point["requests"] * (cfg.duration_s + cfg.warmup_s) / max(cfg.duration_s, 1)
    point["server_cpu_us"] = round(used / max(total, 1) * 1e6, 2)
    return point


def _first_lines(exc: BaseException, n: int = 3) -> str:
    return "\n      ".join(str(exc).splitlines()[:n])


def _fmt_ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f} ms"


def _log_point(label: str, p: dict) -> None:
    log(f"    {label:<6} {p['rps']:>10,.0f} req/s  p50 {_fmt_ms(p['p50_ms'])}  p99 {_fmt_ms(p['p99_ms'])}  "
        f"mean {_fmt_ms(p['mean_ms'])}  max {_fmt_ms(p['max_ms'])}  errors {p['errors']}  "
        f"peak RSS {p['peak_rss_kib'] / 1024:.1f} MiB")


def measure_h2_server(spec, env, app: str, cfg: H2Config, certs: Certs | None) -> dict:
    """h2c load, idle h2c connections (a fresh process), h2/TLS load: each mode on its own process.

    A mode that fails keeps its error and the other modes still run.
    """
    result: dict = {"version": spec.version(env)}
    sup = support(spec, env)
    from servers import configuration

    def config_of(certs_: Certs | None) -> str:
        cmd = spec.command(env, "app", 0, 1, Path(tempfile.gettempdir()))
        try:
            cmd = h2_command(spec.name, cmd, certs_)
        except ValueError:  # no HTTP/2 here (saltare): its plain configuration
            pass
        return configuration(cmd, spec.environ)

    # What each mode runs (the certificate files aside): granian's h2c is --http 2, its TLS
    # --http auto; the report names both when they differ.
    if spec.is_app_server:
        modes = dict.fromkeys(config_of(c) for c in ((None, certs) if certs else (None,)))
        result["configuration"] = "; ".join(modes)
    if sup.h2c is None:
        try:
            with _started_h2(spec, env, app, None) as server:
                result["h2c"] = _load(server, "http", cfg)
            _log_point("h2c", result["h2c"])
        except Exception as exc:  # noqa: BLE001 - keep the other modes' numbers
            log(f"    h2c error: {_first_lines(exc)}")
            result["h2c"] = {"error": str(exc)}
        try:
            with _started_h2(spec, env, app, None) as server:  # fresh: no allocator state from the load
                idle = idle_h2_cost(env, server.pid, server.port, cfg.idle_connections, cfg.idle_wait_s)
            result["idle"] = idle
            log(f"    {idle['alive']}/{idle['opened']} idle h2c connections: {idle['bytes_per_connection']} B each"
                f" ({idle['total_bytes_per_connection']} B with one-time growth)")
        except Exception as exc:  # noqa: BLE001
            log(f"    idle h2 error: {_first_lines(exc)}")
            result["idle"] = {"error": str(exc)}
    else:
        result["h2c"] = result["idle"] = {"skipped": sup.h2c}
        log(f"    h2c skipped: {sup.h2c}")
    if sup.tls is None and certs is not None:
        try:
            with _started_h2(spec, env, app, certs) as server:
                result["tls"] = _load(server, "https", cfg)
            _log_point("h2/TLS", result["tls"])
        except Exception as exc:  # noqa: BLE001
            log(f"    h2/TLS error: {_first_lines(exc)}")
            result["tls"] = {"error": str(exc)}
    else:
        why = sup.tls or "no certificate"
        result["tls"] = {"skipped": why}
        log(f"    h2/TLS skipped: {why}")
    return result


def run_section(env, servers: list, apps: list[str], cfg: H2Config) -> dict:
    """The HTTP/2 section of the results document: ``{"config", "apps": {app: {server: ...}}}``."""
    section: dict = {"config": cfg.__dict__.copy(), "h2load": _h2load_version(), "apps": {}}
    tmp = Path(tempfile.mkdtemp(prefix="zigcorn-bench-h2-certs-"))
    try:
        certs = None
        if env.has("trustme"):
            certs = make_certs(env, tmp)
            section["certificate"] = "ECDSA P-256 from trustme, key as PKCS#8"
        else:
            log("h2/TLS points skipped: trustme is not installed in the servers' Python")
        for app in apps:
            section["apps"][app] = {}
            for spec in servers:
                log(f"[{app}] {spec.name} HTTP/2")
                began = time.monotonic()
                try:
                    result = measure_h2_server(spec, env, app, cfg, certs)
                except Exception as exc:  # noqa: BLE001 - one broken server must not lose the others
                    log(f"    error: {exc}")
                    result = {"version": spec.version(env), "error": str(exc)}
                result["elapsed_s"] = round(time.monotonic() - began, 1)
                section["apps"][app][spec.name] = result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return section


def _h2load_version() -> str | None:
    try:
        out = subprocess.run(["h2load", "--version"], capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return out.stdout.strip().rpartition("/")[2] or None


# -- script side: the h2 library and trustme ---------------------------------------------------

def _import_h2_library():
    """Import the ``h2`` library, not this file: take this folder off ``sys.path`` first."""
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions

    return h2


def _cert_main(directory: str) -> None:
    import trustme
    from cryptography.hazmat.primitives import serialization

    out = Path(directory)
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), password=None)
    (out / "cert.pem").write_bytes(b"".join(pem.bytes() for pem in cert.cert_chain_pems))
    (out / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    ca.cert_pem.write_to_path(str(out / "ca.pem"))


class _Client:
    """One HTTP/2 client connection (h2 library over a blocking socket)."""

    def __init__(self, h2lib, host: str, port: int, ctx: ssl.SSLContext | None, timeout: float = 10.0):
        sock = socket.create_connection((host, port), timeout=timeout)
        self.alpn = None
        if ctx is not None:
            sock = ctx.wrap_socket(sock, server_hostname=host)
            self.alpn = sock.selected_alpn_protocol()
        self.sock = sock
        self.h2 = h2lib
        self.scheme = "https" if ctx else "http"
        self.authority = f"{host}:{port}"
        self.conn = h2lib.connection.H2Connection(h2lib.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.flush()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def send_get(self, path: str) -> int:
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, [(":method", "GET"), (":scheme", self.scheme),
                                           (":authority", self.authority), (":path", path),
                                           ("user-agent", "zigcorn-bench")], end_stream=True)
        self.flush()
        return stream_id

    def read_response(self, stream_id: int) -> tuple[int, bytes]:
        events = self.h2.events
        status, body = 0, b""
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("connection closed before the response ended")
            for event in self.conn.receive_data(data):
                if isinstance(event, events.ResponseReceived) and event.stream_id == stream_id:
                    status = int(dict(event.headers)[":status"])
                elif isinstance(event, events.DataReceived):
                    body += event.data
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, events.StreamReset) and event.stream_id == stream_id:
                    raise ConnectionError(f"stream reset, error code {event.error_code}")
                elif isinstance(event, events.ConnectionTerminated):
                    raise ConnectionError(f"GOAWAY, error code {event.error_code}")
                elif isinstance(event, events.StreamEnded) and event.stream_id == stream_id:
                    self.flush()  # SETTINGS ack, WINDOW_UPDATE
                    return status, body
            self.flush()

    def still_open(self) -> bool:
        """Not closed by the peer and no GOAWAY among what it sent meanwhile (PINGs are answered)."""
        self.sock.setblocking(False)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return False
                for event in self.conn.receive_data(data):
                    if isinstance(event, self.h2.events.ConnectionTerminated):
                        return False
        except (BlockingIOError, ssl.SSLWantReadError):
            pass
        except OSError:
            return False
        finally:
            self.sock.setblocking(True)
        try:
            self.flush()
        except OSError:
            return False
        return True

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _client_context(ca: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl._create_unverified_context()
    ctx.check_hostname = False
    if not ca:
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    return ctx


def _get_main(h2lib, urls: list[str], ca: str | None, deadline_s: float) -> None:
    from urllib.parse import urlsplit

    answers = []
    deadline = time.monotonic() + deadline_s
    for i, url in enumerate(urls):
        parts = urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        ctx = _client_context(ca) if parts.scheme == "https" else None
        while True:
            try:
                client = _Client(h2lib, parts.hostname, parts.port, ctx)
                try:
                    status, body = client.read_response(client.send_get(path))
                finally:
                    client.close()
                break
            except (ConnectionRefusedError, ConnectionResetError):  # not listening yet
                if i > 0 or time.monotonic() > deadline:  # only the first request waits for the server
                    raise
                time.sleep(0.1)
        answers.append({"url": url, "status": status, "body": body.decode("utf-8", "replace"), "alpn": client.alpn})
    print(json.dumps(answers))


BATCH = 50  # connections opened at once: well under every server's listen backlog


def _hold_main(h2lib, port: int) -> None:
    """Line protocol on stdin: ``open N`` (N more connections, one finished GET each),
    ``check`` (how many are still open), end of input (close them all and exit)."""
    clients: list[_Client] = []

    def reply(obj: dict) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    try:
        for line in sys.stdin:
            command, _, arg = line.strip().partition(" ")
            try:
                if command == "open":
                    todo = int(arg)
                    while todo > 0:
                        batch = [_Client(h2lib, "127.0.0.1", port, None) for _ in range(min(BATCH, todo))]
                        clients.extend(batch)
                        streams = [c.send_get("/") for c in batch]
                        for client, stream_id in zip(batch, streams):
                            status, _ = client.read_response(stream_id)
                            if status != 200:
                                raise RuntimeError(f"idle-connection request answered {status}")
                        todo -= len(batch)
                    reply({"open": len(clients)})
                elif command == "check":
                    reply({"alive": sum(c.still_open() for c in clients)})
                else:
                    reply({"error": f"unknown command {command!r}"})
            except Exception as exc:  # noqa: BLE001 - the parent shows it
                reply({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        for client in clients:
            client.close()


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(description="HTTP/2 helper of the benchmark harness (run by run.py)")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("cert")
    c.add_argument("directory")
    g = sub.add_parser("get")
    g.add_argument("--ca")
    g.add_argument("--deadline", type=float, default=10.0)
    g.add_argument("urls", nargs="+")
    h = sub.add_parser("hold")
    h.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    if args.command == "cert":
        _cert_main(args.directory)
        return 0
    h2lib = _import_h2_library()
    if args.command == "get":
        _get_main(h2lib, args.urls, args.ca, args.deadline)
    else:
        _hold_main(h2lib, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
