"""The servers compared: zigcorn and the references, each started once per run on a free
loopback port, each in its own process group (stopped by that group's id, nothing else).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.harness import ROOT, free_port, port_open

ASGI_APP = "tests.support.differential.echo:app"
WSGI_APP = "tests.support.differential.echo:wsgi_app"


class Proc:
    """One server process (or a master and its workers) in its own session."""

    #: what the server speaks to clients: {"h1"} or {"h1", "h2c"}
    protocols = frozenset({"h1"})
    #: False for servers that answer one request per connection (gunicorn's sync worker)
    keep_alive = True

    def __init__(self, name: str, cmd: list[str], port: int, env: dict | None = None, cwd: Path = ROOT):
        self.name = name
        self.port = port
        self.cmd = cmd
        self.log = tempfile.NamedTemporaryFile(prefix=f"diff-{name}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, start_new_session=True)

    def wait_ready(self, timeout: float = 20.0) -> "Proc":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()}")
            if port_open(self.port):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.name} did not listen within {timeout}s:\n{self.output()}")

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the group this Popen started
                self.proc.wait(5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


def python_server(name: str, args: list[str], env: dict | None = None) -> Proc:
    port = free_port()
    argv = [a.replace("{port}", str(port)) for a in args]
    return Proc(name, [sys.executable, "-m", *argv], port, env)


def zigcorn(env: dict | None = None, *extra: str) -> Proc:
    server = python_server("zigcorn", ["zigcorn", ASGI_APP, "--host", "127.0.0.1", "--port", "{port}",
                                       "--log-level", "warning", *extra], env)
    server.protocols = frozenset({"h1", "h2c"})
    return server


def uvicorn(http: str, env: dict | None = None) -> Proc:
    return python_server(f"uvicorn-{http}", ["uvicorn", ASGI_APP, "--http", http, "--host", "127.0.0.1",
                                             "--port", "{port}", "--log-level", "warning", "--no-access-log",
                                             "--lifespan", "off"], env)


def hypercorn(env: dict | None = None) -> Proc:
    server = python_server("hypercorn", ["hypercorn", ASGI_APP, "--bind", "127.0.0.1:{port}", "--log-level", "warning"], env)
    server.protocols = frozenset({"h1", "h2c"})
    return server


def granian(env: dict | None = None) -> Proc:
    server = python_server("granian", ["granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", "{port}",
                                       "--workers", "1", "--runtime-threads", "1", "--no-ws", "--log-level", "warning",
                                       ASGI_APP], env)
    server.protocols = frozenset({"h1", "h2c"})
    return server


def gunicorn(env: dict | None = None) -> Proc:
    server = python_server("gunicorn", ["gunicorn", "-w", "1", "-k", "sync", "-b", "127.0.0.1:{port}",
                                        "--log-level", "warning", WSGI_APP], env)
    server.keep_alive = False
    return server


class Nginx(Proc):
    """nginx as a parser: it proxies to an echo upstream (uvicorn with h11) and passes what
    it read of the request line in x-diffhop-* headers."""

    def __init__(self, upstream_port: int, extra_http: str = ""):
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        self.prefix = Path(tempfile.mkdtemp(prefix="diff-nginx-"))
        port = free_port()
        user = "user root root;\n" if os.geteuid() == 0 else ""
        conf = f"""{user}daemon off;
worker_processes 1;
pid {self.prefix}/nginx.pid;
error_log {self.prefix}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log off;
    client_body_temp_path {self.prefix}/body;
    proxy_temp_path {self.prefix}/proxy;
    fastcgi_temp_path {self.prefix}/fastcgi;
    uwsgi_temp_path {self.prefix}/uwsgi;
    scgi_temp_path {self.prefix}/scgi;
    upstream echo {{ server 127.0.0.1:{upstream_port}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://echo;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host diffhop.invalid;
            proxy_set_header X-Diffhop-Host $http_host;
            proxy_set_header X-Diffhop-Method $request_method;
            proxy_set_header X-Diffhop-Target $request_uri;
            proxy_set_header X-Diffhop-Version $server_protocol;
        }}
    }}
    {extra_http}
}}
"""
        (self.prefix / "nginx.conf").write_text(conf)
        super().__init__("nginx", [binary, "-p", str(self.prefix), "-c", str(self.prefix / "nginx.conf"),
                                   "-e", str(self.prefix / "error.log")], port)

    def output(self) -> str:
        try:
            return (self.prefix / "error.log").read_text(errors="replace") + super().output()
        except OSError:
            return super().output()

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.prefix, ignore_errors=True)


class Group:
    """Servers that stop together (nginx and its upstream)."""

    def __init__(self, main: Proc, *helpers: Proc):
        self.main, self.helpers = main, helpers

    def __getattr__(self, name):
        return getattr(self.main, name)

    def wait_ready(self, timeout: float = 20.0):
        for helper in self.helpers:
            helper.wait_ready(timeout)
        self.main.wait_ready(timeout)
        return self

    def stop(self) -> None:
        self.main.stop()
        for helper in self.helpers:
            helper.stop()


def nginx() -> Group:
    upstream = uvicorn("h11")
    upstream.name = "nginx-upstream"
    return Group(Nginx(upstream.port), upstream)


#: reference name -> factory. zigcorn is always started on its own.
REFERENCES = {
    "uvicorn-h11": lambda: uvicorn("h11"),
    "uvicorn-httptools": lambda: uvicorn("httptools"),
    "hypercorn": hypercorn,
    "gunicorn": gunicorn,
    "granian": granian,
    "nginx": nginx,
}


def start_all(names: list[str]) -> dict[str, Proc]:
    """Starts zigcorn and the named references; returns them ready. Stops them all if one fails."""
    started: dict[str, Proc] = {"zigcorn": zigcorn()}
    try:
        for name in names:
            started[name] = REFERENCES[name]()
        for server in started.values():
            server.wait_ready()
    except BaseException:
        for server in started.values():
            server.stop()
        raise
    return started
