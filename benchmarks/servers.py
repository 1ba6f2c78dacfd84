"""The servers under test: their command lines, and starting / stopping one process tree.

Every server runs one worker on 127.0.0.1 unless asked for more, with access logs off,
uvloop where the server can use it, and two settings that only the idle-connection
measurement needs: a 60 s keep-alive timeout and room for thousands of connections.

Like for like: every row runs under the same Python flags. saltare re-executes itself
under ``python -OO`` with ``MALLOC_ARENA_MAX=1`` unless ``SALTARE_NO_OPTIMIZE`` is set, so
its default row sets it; the ``-OO`` rows (``zigcorn-OO``, ``saltare-OO``, ...) run every
Python server as ``python -OO -m SERVER`` with ``MALLOC_ARENA_MAX=1``.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from memory import pid_alive, tree_pids

BENCH_DIR = Path(__file__).resolve().parent
APPS_DIR = BENCH_DIR / "apps"
APPS = {"raw": "raw_app:app", "fastapi": "fastapi_app:app"}
MAX_CONNECTIONS = 20_000
KEEP_ALIVE_S = 60


@dataclass(frozen=True)
class Env:
    """The Python environment the servers run from (the benchmark venv, or the current one)."""

    python: str
    modules: frozenset[str]  # importable top-level modules among those we ask about

    def has(self, *names: str) -> bool:
        return all(name in self.modules for name in names)

    @property
    def loop(self) -> str:
        return "uvloop" if self.has("uvloop") else "asyncio"


Command = Callable[[Env, str, int, int, Path], list[str]]


def _zigcorn(env: Env, app: str, port: int, workers: int, workdir: Path) -> list[str]:
    """zigcorn as a user runs it: the default loop (zigcorn's own) and I/O backend."""
    cmd = [env.python, "-m", "zigcorn", app, "--host", "127.0.0.1", "--port", str(port),
           "--no-access-log", "--log-level", "warning",
           "--timeout-keep-alive", str(KEEP_ALIVE_S), "--limit-connections", str(MAX_CONNECTIONS)]
    return cmd + (["--workers", str(workers)] if workers > 1 else [])


def _zigcorn_loop(loop: str) -> Command:
    """zigcorn on another event loop: uvloop, or the stdlib's (which leaves ssl unloaded)."""
    def command(env: Env, app: str, port: int, workers: int, workdir: Path) -> list[str]:
        return _zigcorn(env, app, port, workers, workdir) + ["--loop", loop]
    return command


def _zigcorn_backend(backend: str) -> Command:
    """zigcorn with its I/O backend pinned (backends.py compares them)."""
    def command(env: Env, app: str, port: int, workers: int, workdir: Path) -> list[str]:
        return _zigcorn(env, app, port, workers, workdir) + ["--io-backend", backend]
    return command


def _uvicorn(http: str) -> Command:
    """uvicorn on uvloop with the HTTP/1.1 parser ``http``: ``httptools`` (llhttp, its
    fastest before 0.52) or ``zttp`` (a Zig parser, 0.52 on; the only one that can serve
    HTTP/2). Its ``--loop zuvloop`` needs Python 3.14 and is not a row here."""
    def command(env: Env, app: str, port: int, workers: int, workdir: Path) -> list[str]:
        return [env.python, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
                "--http", http, "--loop", "uvloop", "--no-access-log", "--log-level", "warning",
                "--timeout-keep-alive", str(KEEP_ALIVE_S), "--workers", str(workers)]
    return command


def _granian(loop: str | None, task: str) -> Command:
    """granian's ASGI interface on the event loop ``loop`` (None: uvloop when installed)
    with the request task ``task``: ``asyncio`` (its default) or ``rust`` (its own
    asyncio-compatible task, Python 3.11 only: on 3.12+ granian falls back to asyncio's
    with a warning). Both flags are always written out: granian's own default loop,
    ``auto``, picks rloop whenever rloop is installed, so a row that left ``--loop`` out
    would change with the venv."""
    def command(env: Env, app: str, port: int, workers: int, workdir: Path) -> list[str]:
        return [env.python, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
                "--workers", str(workers), "--loop", loop or env.loop, "--task-impl", task,
                "--no-access-log", "--log-level", "warning", "--backlog", "2048", app]
    return command


def _h2corn(env: Env, app: str, port: int, workers: int, workdir: Path) -> list[str]:
    """h2corn (Rust, HTTP/1.1 and HTTP/2, h2c on the plain port) with its defaults written
    out: uvloop when installed, two Tokio runtime threads per worker."""
    return [env.python, "-m", "h2corn", app, "--bind", f"127.0.0.1:{port}", "--loop", env.loop,
            "--runtime-threads", "2", "--no-access-log", "--timeout-keep-alive", str(KEEP_ALIVE_S),
            "--limit-connections", str(MAX_CONNECTIONS), "--backlog", "2048", "--workers", str(workers)]


def _saltare(env: Env, app: str, port: int, workers: int, workdir: Path) -> list[str]:
    return [env.python, "-m", "saltare", "--host", "127.0.0.1", "--port", str(port),
            "--workers", str(workers), "--keep-alive-timeout", str(KEEP_ALIVE_S),
            "--max-concurrent-connections", str(MAX_CONNECTIONS), app]


def optimized(command: Command) -> Command:
    """The same server under ``python -OO`` (no docstrings, no asserts) with one malloc
    arena, the settings saltare picks for itself by default."""
    def command_oo(env: Env, app: str, port: int, workers: int, workdir: Path) -> list[str]:
        cmd = command(env, app, port, workers, workdir)
        assert cmd[0] == env.python, cmd
        return [cmd[0], "-OO", *cmd[1:]]
    return command_oo


OPTIMIZED_ENVIRON = (("MALLOC_ARENA_MAX", "1"),)


def _hypercorn(env: Env, app: str, port: int, workers: int, workdir: Path) -> list[str]:
    return [env.python, "-m", "hypercorn", app, "-b", f"127.0.0.1:{port}", "-k", env.loop,
            "--log-level", "warning", "--keep-alive", str(KEEP_ALIVE_S), "--workers", str(workers)]


NGINX_CONF = """\
daemon off;
master_process on;
worker_processes {workers};
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections {max_connections}; }}
http {{
    access_log off;
    keepalive_timeout {keep_alive}s;
    keepalive_requests 1000000;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 "Hello, world!"; }}
    }}
}}
"""


def _nginx(env: Env, app: str, port: int, workers: int, workdir: Path) -> list[str]:
    """A static 200 from nginx: the machine's ceiling. Config, pid and temp files live in ``workdir``."""
    tmp = str(workdir)
    conf = workdir / "nginx.conf"
    conf.write_text(NGINX_CONF.format(workers=workers, tmp=tmp, port=port, keep_alive=KEEP_ALIVE_S,
                                      max_connections=MAX_CONNECTIONS))
    return ["nginx", "-p", tmp, "-e", f"{tmp}/error.log", "-c", str(conf)]


@dataclass(frozen=True)
class ServerSpec:
    name: str
    command: Command
    modules: tuple[str, ...] = ()  # Python modules it needs; empty for an external binary
    binary: str | None = None
    is_app_server: bool = True  # False for the static nginx ceiling
    environ: tuple[tuple[str, str], ...] = ()  # set for this server on top of server_environ()
    # Lines in the server's log that say it runs another configuration than its flags ask
    # for (granian on Python 3.12+ runs asyncio's task in place of --task-impl rust)
    fallbacks: tuple[str, ...] = ()

    def available(self, env: Env) -> bool:
        if self.binary is not None:
            return shutil.which(self.binary) is not None
        return env.has(*self.modules)

    def supports_workers(self, env: Env) -> bool:
        """Whether ``--workers`` (or ``-w``) appears in the server's ``--help``."""
        if not self.is_app_server:
            return True
        out = subprocess.run([env.python, "-m", self.modules[0], "--help"], capture_output=True, text=True,
                             timeout=60, env=server_environ(self.environ))
        text = out.stdout + out.stderr
        return "--workers" in text or "-w WORKERS" in text

    def version(self, env: Env) -> str:
        if not self.is_app_server:
            out = subprocess.run([self.binary or self.name, "-v"], capture_output=True, text=True)
            return (out.stderr or out.stdout).strip().rpartition("/")[2]
        code = f"import importlib.metadata as m; print(m.version({self.modules[0]!r}))"
        out = subprocess.run([env.python, "-c", code], capture_output=True, text=True)
        return out.stdout.strip() or "?"


# The flags that choose how a server runs, the ones every figure must name: event loop,
# request task, HTTP/1.1 parser and HTTP/2 mode, I/O backend, runtime threads, worker
# class and count. Ports, limits, timeouts and log settings are left out.
CONFIG_OPTIONS = ("--interface", "--loop", "--task-impl", "--http", "--io-backend", "--runtime-threads", "-k",
                  "--threads", "--workers", "-w")
CONFIG_SWITCHES = ("--http2", "--no-http2", "--http3")
# Values every row has, left out: one worker, and granian's ASGI interface.
CONFIG_IMPLIED = {("--workers", "1"), ("-w", "1"), ("--interface", "asgi")}


def configuration(command: list[str], environ: tuple[tuple[str, str], ...] = ()) -> str:
    """The configuration of one server command line, as its own flags: ``--http zttp
    --loop uvloop``, ``--loop rloop --task-impl rust``, ``python -OO ... MALLOC_ARENA_MAX=1``.

    One worker is not written (every row's default); a command with none of these flags
    runs the server's defaults ("defaults"; for zigcorn: its own loop, io_uring).
    """
    picked = ["python -OO"] if "-OO" in command[1:3] else []
    i = 0
    while i < len(command):
        arg = command[i]
        if arg in CONFIG_OPTIONS and i + 1 < len(command):
            if (arg, command[i + 1]) not in CONFIG_IMPLIED:
                picked.append(f"{arg} {command[i + 1]}")
            i += 2
            continue
        if arg in CONFIG_SWITCHES:
            picked.append(arg)
        i += 1
    picked += [f"{key}={value}" for key, value in environ]
    return " ".join(picked) or "defaults"


def named(server: str, command: list[str] | None, environ: tuple[tuple[str, str], ...] = ()) -> str:
    """A table row's name: the server and, in parentheses, its configuration."""
    return f"{server} ({configuration(command, environ)})" if command else server


GRANIAN_RUST = ("falling back to asyncio",)  # granian 2.8.7's warning on Python 3.12+
SERVERS: dict[str, ServerSpec] = {
    "zigcorn": ServerSpec("zigcorn", _zigcorn, ("zigcorn",)),
    "zigcorn-asyncio": ServerSpec("zigcorn-asyncio", _zigcorn_loop("asyncio"), ("zigcorn",)),
    "zigcorn-uvloop": ServerSpec("zigcorn-uvloop", _zigcorn_loop("uvloop"), ("zigcorn", "uvloop")),
    "zigcorn-epoll": ServerSpec("zigcorn-epoll", _zigcorn_backend("epoll"), ("zigcorn",)),
    "zigcorn-io_uring": ServerSpec("zigcorn-io_uring", _zigcorn_backend("io_uring"), ("zigcorn",)),
    "uvicorn": ServerSpec("uvicorn", _uvicorn("httptools"), ("uvicorn", "httptools", "uvloop")),
    "uvicorn-zttp": ServerSpec("uvicorn-zttp", _uvicorn("zttp"), ("uvicorn", "zttp", "uvloop")),
    "granian": ServerSpec("granian", _granian(None, "asyncio"), ("granian",)),
    "granian-rust": ServerSpec("granian-rust", _granian(None, "rust"), ("granian",), fallbacks=GRANIAN_RUST),
    "granian-rloop": ServerSpec("granian-rloop", _granian("rloop", "asyncio"), ("granian", "rloop")),
    "granian-rloop-rust": ServerSpec("granian-rloop-rust", _granian("rloop", "rust"), ("granian", "rloop"),
                                     fallbacks=GRANIAN_RUST),
    "h2corn": ServerSpec("h2corn", _h2corn, ("h2corn",)),
    # Without it saltare re-executes itself under -OO: its -OO row is saltare-OO.
    "saltare": ServerSpec("saltare", _saltare, ("saltare",), environ=(("SALTARE_NO_OPTIMIZE", "1"),)),
    "hypercorn": ServerSpec("hypercorn", _hypercorn, ("hypercorn",)),
    "nginx": ServerSpec("nginx", _nginx, binary="nginx", is_app_server=False),
}
# The -OO rows: each Python server (not zigcorn's loop and backend variants) under
# `python -OO` with MALLOC_ARENA_MAX=1.
OPTIMIZED_OF = ("zigcorn", "uvicorn", "granian", "saltare", "hypercorn")
SERVERS.update({
    f"{name}-OO": ServerSpec(f"{name}-OO", optimized(SERVERS[name].command), SERVERS[name].modules,
                             environ=SERVERS[name].environ + OPTIMIZED_ENVIRON)
    for name in OPTIMIZED_OF
})
PROBE_MODULES = ("zigcorn", "uvicorn", "httptools", "uvloop", "granian", "rloop", "saltare", "hypercorn",
                 "h2corn", "fastapi", "zttp",
                 "h2", "trustme")  # the last two for the HTTP/2 section (h2.py)


def probe_env(python: str) -> Env:
    """Which of the modules we care about ``python`` can import (without importing them)."""
    code = ("import importlib.util, sys; "
            "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))")
    out = subprocess.run([python, "-c", code, *PROBE_MODULES], capture_output=True, text=True, check=True)
    return Env(python, frozenset(out.stdout.split()))


def server_environ(extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """The servers' environment. Without PYTHONDONTWRITEBYTECODE (some machines set it):
    a module with no cached bytecode for the interpreter's flags is compiled at every
    start, and the compiler's garbage stays in the process (MiBs for FastAPI under -OO,
    whose .opt-2.pyc files are written only by a -OO start); environment.compile_bytecode
    writes them beforehand."""
    path = os.pathsep.join(filter(None, [str(APPS_DIR), os.environ.get("PYTHONPATH")]))
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **dict(extra)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(port: int, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@dataclass
class RunningServer:
    """One server process tree, started in its own session so it can be killed whole."""

    spec: ServerSpec
    command: list[str]
    port: int
    proc: subprocess.Popen = field(repr=False)
    workdir: Path = field(repr=False)

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Poll ``GET /`` until it answers 200 (a bound port alone can precede the workers)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.spec.name} exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if http_get(self.port, "/")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.spec.name} not ready within {timeout:.0f}s:\n{self.output()}")

    def validate(self) -> None:
        """Both routes answer what the apps promise (nginx serves its static body)."""
        status, body = http_get(self.port, "/")
        if not self.spec.is_app_server:
            if status != 200:
                raise RuntimeError(f"nginx answered {status}")
            return
        expected = {"/": {"message": "Hello, world!"}, "/items/7?q=x": {"item_id": 7, "q": "x"}}
        for path, want in expected.items():
            status, body = http_get(self.port, path)
            if status != 200 or json.loads(body) != want:
                raise RuntimeError(f"{self.spec.name} GET {path} -> {status} {body[:200]!r}")
        self.check_configuration()

    def check_configuration(self) -> None:
        """Refuse a server whose log says it fell back from the configuration it is named for."""
        log = self.output()
        for line in self.spec.fallbacks:
            if line in log:
                raise RuntimeError(f"{self.spec.name} does not run the configuration it is named for: {line!r}")

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the session and every process of the tree, SIGKILL what is left after ``grace``."""
        pids = tree_pids(self.pid) or [self.pid]
        self._signal(pids, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
            self.proc.poll()
            time.sleep(0.05)
        self._signal([p for p in pids if pid_alive(p)], signal.SIGKILL)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _signal(self, pids: list[int], sig: signal.Signals) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def __enter__(self) -> "RunningServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(spec: ServerSpec, env: Env, app: str, workers: int = 1) -> RunningServer:
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix=f"zigcorn-bench-{spec.name}-"))
    # An app by its short name (APPS), or as module:attribute from benchmarks/apps.
    command = spec.command(env, APPS.get(app, app), port, workers, workdir)
    with open(workdir / "server.log", "wb") as log:
        proc = subprocess.Popen(command, cwd=APPS_DIR, env=server_environ(spec.environ), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return RunningServer(spec, command, port, proc, workdir)


def wait_workers(server: RunningServer, workers: int, timeout: float = 60.0) -> None:
    """With several workers, wait until the tree holds a supervisor and ``workers``
    workers: the first answer can come while the second worker still imports the app,
    and a point taken then measures one worker."""
    if workers <= 1:
        return
    deadline = time.monotonic() + timeout
    while len(tree_pids(server.pid)) < workers + 1:
        if server.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{server.spec.name}: {workers} workers not up:\n{server.output()}")
        time.sleep(0.1)


def fresh_point(spec: ServerSpec, env: Env, app: str, connections: int, seconds: int, label: str,
                workers: int = 1) -> dict:
    """One figure on a fresh process of `spec` with `workers` workers: both routes checked,
    a 1 s warm-up, then `seconds` of wrk at `connections`, with the server's CPU time per
    request (`load.run_wrk_cpu`) and its command line and configuration; printed as one
    progress line starting with `label`."""
    from load import run_wrk, run_wrk_cpu

    with start(spec, env, app, workers) as server:
        server.wait_ready()
        wait_workers(server, workers)
        server.validate()
        url = f"http://127.0.0.1:{server.port}/"
        run_wrk(url, connections, 1)  # warm-up
        got = run_wrk_cpu(url, connections, seconds, server.pid)
        got["command"] = server.command
        got["configuration"] = configuration(server.command, spec.environ)
    spread = f"  CPU by process {'/'.join(f'{x:.2f}' for x in got['cpu_share_by_process'])}" if workers > 1 else ""
    print(f"{label} {got['rps']:10.0f} req/s {got['server_cpu_us']:7.2f} server CPU us/request{spread}", flush=True)
    return got
