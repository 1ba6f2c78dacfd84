"""Where the server listens: Unix sockets, inherited descriptors, systemd activation, IPv6."""

import os
import socket
import stat
import subprocess
import sys

import httpx
import pytest

from tests.support.harness import ROOT, port_open, wait_for, zigcorn_only

pytestmark = zigcorn_only


def spawn(*args: str, env: dict | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "zigcorn", "tests.apps.scope:app", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, **popen,
    )  # fmt: skip


def stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.terminate()
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out.decode(errors="replace")


def uds_get(path: str, url: str = "http://localhost/uds") -> httpx.Response:
    with httpx.Client(transport=httpx.HTTPTransport(uds=path), timeout=5) as client:
        return client.get(url)


def can_connect_unix(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(path)
            return True
        except OSError:
            return False


@pytest.mark.parametrize("workers", ["1", "2"])
def test_uds_serves_sets_permissions_and_is_removed_on_exit(tmp_path, workers):
    path = str(tmp_path / "app.sock")
    proc = spawn("--uds", path, "--uds-perms", "660", "--workers", workers)
    try:
        assert wait_for(lambda: can_connect_unix(path), 10)
        r = uds_get(path)
        assert r.status_code == 200
        scope = r.json()
        assert scope["client"] is None and scope["server"] is None  # as uvicorn reports Unix sockets
        assert scope["path"] == "/uds"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert f"running on unix socket {path}" in out
    assert not os.path.exists(path)


def test_stale_uds_file_is_replaced_but_a_live_one_is_refused(tmp_path):
    path = str(tmp_path / "app.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()  # the file stays, nobody listens: what a crashed server leaves behind
    first = spawn("--uds", path)
    try:
        assert wait_for(lambda: can_connect_unix(path), 10)
        second = spawn("--uds", path)
        out = stop(second) if second.wait(10) is not None else ""
        assert second.returncode == 3
        assert "another server is listening there" in out
        assert uds_get(path).status_code == 200  # the first one was left alone
    finally:
        stop(first)


def test_inherited_fd(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    proc = spawn("--fd", str(sock.fileno()), pass_fds=[sock.fileno()])
    sock.close()  # the server holds its own copy
    try:
        assert wait_for(lambda: port_open(port), 10)
        assert httpx.get(f"http://127.0.0.1:{port}/fd").json()["server"] == ["127.0.0.1", port]
    finally:
        out = stop(proc)
    assert "file descriptor" in out


def test_fd_that_is_not_a_listening_socket_is_refused():
    r, w = os.pipe()
    proc = spawn("--fd", str(r), pass_fds=[r])
    os.close(r)
    os.close(w)
    out = stop(proc) if proc.wait(10) is not None else ""
    assert proc.returncode == 3
    assert "not a listening stream socket" in out or "cannot use file descriptor" in out


def test_systemd_socket_activation():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    fd = sock.fileno()

    def as_fd_3():  # what systemd does: the first socket is descriptor 3
        os.dup2(fd, 3)

    # LISTEN_PID must name the server process itself: exec from a shell that sets it.
    cmd = f'LISTEN_PID=$$ LISTEN_FDS=1 exec "{sys.executable}" -m zigcorn tests.apps.scope:app'
    proc = subprocess.Popen(["sh", "-c", cmd], cwd=ROOT, preexec_fn=as_fd_3, pass_fds=[3, fd],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sock.close()
    try:
        assert wait_for(lambda: port_open(port), 10)
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 200
    finally:
        out = stop(proc)
    assert "systemd socket 3" in out


def ipv6_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_available(), reason="no IPv6 loopback here")
def test_ipv6_host():
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    proc = spawn("--host", "::1", "--port", str(port))
    try:
        def up():
            try:
                socket.create_connection(("::1", port), timeout=0.5).close()
                return True
            except OSError:
                return False

        assert wait_for(up, 10)
        scope = httpx.get(f"http://[::1]:{port}/v6").json()
        assert scope["client"][0] == "::1" and scope["server"] == ["::1", port]
    finally:
        out = stop(proc)
    assert f"http://[::1]:{port}" in out


def test_port_in_use_gives_one_line_and_exit_3():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        proc = spawn("--port", str(port))
        out = stop(proc) if proc.wait(10) is not None else ""
    assert proc.returncode == 3
    assert f"error while attempting to bind on address ('127.0.0.1', {port}): address already in use" in out


def test_reuse_port_with_a_unix_socket_is_ignored_with_a_warning(tmp_path):
    path = str(tmp_path / "rp.sock")
    proc = spawn("--uds", path, "--workers", "2", "--reuse-port")
    try:
        assert wait_for(lambda: can_connect_unix(path), 10)
        assert all(uds_get(path).status_code == 200 for _ in range(5))
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert "--reuse-port applies to TCP sockets" in out
