"""Real drivers in an app served by zigcorn on its own loop: asyncpg against a real
PostgreSQL, redis-py's asyncio client against a real Redis, httpx over TLS.

PostgreSQL and Redis come from Debian's packages (`.ci/run` installs them); the fixtures
start a private instance of each on loopback and stop it afterwards. Where one cannot
be found the tests that need it skip, saying which (with CI=true they fail).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile

import httpx
import pytest

from tests.support.harness import free_port, port_open, wait_for, zigcorn_only
from tests.support.tools import require_module, require_tool, skip_or_fail

pytestmark = [zigcorn_only, pytest.mark.every_python]
LOOPS = ["zigcorn", "asyncio"]


def _postgres_bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _stop(proc: subprocess.Popen, sig: int) -> None:
    """Stops a backend by its own process group (it was started in a new session)."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def postgres():
    initdb, server = _postgres_bin("initdb"), _postgres_bin("postgres")
    if not (initdb and server):
        skip_or_fail("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    # PostgreSQL refuses to run as root: as root, run it as the package's own user.
    user = None
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            skip_or_fail("running as root and there is no 'postgres' user (Debian's postgresql package makes it)")
    data = tempfile.mkdtemp(prefix="zigcorn-pg-")
    as_user = {"user": user.pw_uid, "group": user.pw_gid} if user else {}
    if user:
        os.chown(data, user.pw_uid, user.pw_gid)
    port = free_port()
    try:
        subprocess.run([initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"], check=True,
                       capture_output=True, stdin=subprocess.DEVNULL, cwd=data, **as_user)  # fmt: skip
        proc = subprocess.Popen(
            [server, "-D", data, "-h", "127.0.0.1", "-p", str(port), "-k", data, "-F", "-c", "max_connections=20"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=data,
            start_new_session=True, **as_user,
        )  # fmt: skip
        try:
            ready = _postgres_bin("pg_isready")
            check = (lambda: subprocess.run([ready, "-q", "-h", "127.0.0.1", "-p", str(port)]).returncode == 0) if ready \
                else (lambda: port_open(port))  # fmt: skip
            if not wait_for(check, 30):
                pytest.fail("PostgreSQL did not start within 30 s")
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            _stop(proc, signal.SIGINT)  # PostgreSQL's fast shutdown
    finally:
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="module")
def redis_url():
    server = require_tool("redis-server", reason="Redis is not installed (Debian: apt-get install redis-server)")
    port = free_port()
    work = tempfile.mkdtemp(prefix="zigcorn-redis-")
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", work],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        if not wait_for(lambda: port_open(port), 15):
            pytest.fail("Redis did not start within 15 s")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        _stop(proc, signal.SIGTERM)
        shutil.rmtree(work, ignore_errors=True)


def _get(server, path: str, **params) -> dict:
    r = httpx.get(server.url + path, params=params, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("loop", LOOPS)
def test_the_app_runs_on_the_loop_it_asked_for(start_server, loop):
    server = start_server("drivers:app", "--loop", loop)
    expected = "zigcorn.loop.Loop" if loop == "zigcorn" else "asyncio.unix_events._UnixSelectorEventLoop"
    assert _get(server, "/loop")["loop"] == expected


def test_the_default_loop_is_zigcorns(start_server):
    server = start_server("drivers:app")
    assert _get(server, "/loop")["loop"] == "zigcorn.loop.Loop"


@pytest.mark.parametrize("loop", LOOPS)
def test_asyncpg_against_a_real_postgresql(start_server, postgres, loop):
    require_module("asyncpg")
    server = start_server("drivers:app", "--loop", loop)
    result = _get(server, "/pg", dsn=postgres)
    assert result == {"rows": ["n0", "n50", "n100", "n150"], "notify": "hello", "timed_out": True, "count": 200,
                      "pool": 2 * sum(range(40))}  # fmt: skip


@pytest.mark.parametrize("loop", LOOPS)
def test_redis_asyncio_client_against_a_real_redis(start_server, redis_url, loop):
    require_module("redis")
    server = start_server("drivers:app", "--loop", loop)
    result = _get(server, "/redis", url=redis_url)
    assert result == {"value": "value", "pipeline": [5, 12], "message": "message", "blpop": None, "many": 50}


def test_httpx_over_tls_to_a_local_server(start_server, tmp_path):
    trustme = require_module("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    ca_path, key_path, cert_path = tmp_path / "ca.pem", tmp_path / "key.pem", tmp_path / "cert.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    cert.private_key_pem.write_to_path(str(key_path))
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    https = start_server("hello:app", "--ssl-certfile", str(cert_path), "--ssl-keyfile", str(key_path))
    server = start_server("drivers:app", "--loop", "zigcorn")
    result = _get(server, "/https", url=f"https://localhost:{https.port}/", ca=str(ca_path))
    assert result == {"status": 200, "text": "Hello, world!", "all": [200]}
