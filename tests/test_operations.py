"""Operations: pid file, process titles, privileges, --config, recycling by memory, the
access log's format, file and rotation, warm-up. Real servers in subprocesses, checked
from outside (files, /proc, HTTP)."""

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.harness import _children, wait_for, zigcorn_only

pytestmark = zigcorn_only


def status_ids(pid: int) -> dict[str, list[int]]:
    """The Uid/Gid/Groups lines of /proc/<pid>/status."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            found[key] = [int(v) for v in value.split()]
    return found


def start_workers(start_server, n: int, *args: str, app: str = "basic:app"):
    server = start_server(app, "--workers", str(n), *args)
    assert wait_for(lambda: len(_children(server.proc.pid)) == n, 10), server.output()
    assert wait_for(lambda: server.output().count("Application startup complete.") >= n, 10), server.output()
    return server


# ---- --pid-file ----------------------------------------------------------------------


def test_pid_file_holds_the_server_pid_and_goes_at_exit(start_server, tmp_path):
    pid_file = tmp_path / "zigcorn.pid"
    server = start_server("basic:app", "--pid-file", str(pid_file))
    assert wait_for(pid_file.exists)
    assert pid_file.read_text() == f"{server.proc.pid}\n"
    assert server.stop() == 0
    assert not pid_file.exists()


def test_pid_file_under_workers_is_the_masters(start_server, tmp_path):
    pid_file = tmp_path / "run" / "zigcorn.pid"
    pid_file.parent.mkdir()
    server = start_workers(start_server, 2, "--pid-file", str(pid_file))
    assert pid_file.read_text() == f"{server.proc.pid}\n"
    # A reload swaps the workers, not the master: the pid file stays.
    server.proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert pid_file.read_text() == f"{server.proc.pid}\n"
    assert server.stop() == 0
    assert not pid_file.exists()
    assert list(pid_file.parent.iterdir()) == []  # no temporary file left behind


def test_unwritable_pid_file_is_a_startup_error(start_server, tmp_path):
    server = start_server("basic:app", "--pid-file", str(tmp_path / "missing" / "x.pid"), wait=False)
    assert server.wait() == 3
    assert "Cannot write the pid file" in server.output()


# ---- process titles --------------------------------------------------------------------


def test_master_and_workers_have_process_titles(start_server):
    server = start_workers(start_server, 2)
    master = server.proc.pid
    assert Path(f"/proc/{master}/comm").read_text().strip() == "zigcorn: master"
    assert Path(f"/proc/{master}/cmdline").read_bytes().rstrip(b"\0").startswith(b"zigcorn: master")
    titles = set()
    for pid in _children(master):
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "zigcorn: worker"  # the kernel keeps 15 bytes
        titles.add(Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode())
    assert titles == {"zigcorn: worker [1]", "zigcorn: worker [2]"}
    # The rewritten command line does not disturb serving.
    assert httpx.get(server.url + "/pid").status_code == 200
    assert server.stop() == 0


# ---- --user / --group / --umask --------------------------------------------------------

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@root_only
def test_workers_drop_to_user_and_group_after_binding(start_server, tmp_path):
    tmp_path.chmod(0o777)
    pid_file = tmp_path / "zigcorn.pid"
    # hello:app imports nothing: the interpreter here may live where nobody cannot read.
    server = start_workers(start_server, 2, "--user", "nobody", "--group", "nogroup", "--umask", "027",
                           "--pid-file", str(pid_file), app="hello:app")  # fmt: skip
    import grp
    import pwd

    uid, gid = pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid
    for pid in [server.proc.pid, *_children(server.proc.pid)]:
        ids = status_ids(pid)
        assert ids["Uid"] == [uid] * 4, ids  # real, effective, saved, filesystem
        assert ids["Gid"] == [gid] * 4, ids
        assert 0 not in ids["Groups"], ids
        umask = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Umask"))
        assert umask.split()[1] == "0027"
    assert httpx.get(server.url).text == "Hello, world!"
    # Written as root before the switch; the directory lets nobody remove it again.
    assert pid_file.read_text() == f"{server.proc.pid}\n"
    assert server.stop() == 0
    assert not pid_file.exists()


@root_only
def test_single_server_drops_privileges_before_the_app_starts(start_server):
    server = start_server("hello:app", "--user", "65534")
    ids = status_ids(server.proc.pid)
    assert ids["Uid"] == [65534] * 4 and ids["Gid"] == [65534] * 4, ids  # the user's own group
    assert httpx.get(server.url).text == "Hello, world!"
    assert "Running as uid 65534, gid 65534" in server.output()
    assert server.stop() == 0


def test_unknown_user_is_a_clear_error(start_server):
    server = start_server("basic:app", "--user", "no-such-user-zc", wait=False)
    assert server.wait() == 2
    assert "user 'no-such-user-zc' does not exist" in server.output()
    server = start_server("basic:app", "--group", "no-such-group-zc", wait=False)
    assert server.wait() == 2
    assert "group 'no-such-group-zc' does not exist" in server.output()


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the refusal without root")
def test_switching_user_without_root_is_refused(start_server):
    server = start_server("basic:app", "--user", "0", wait=False)
    assert server.wait() == 3
    assert "need root" in server.output()
