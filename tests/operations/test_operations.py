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

from tests.support.drain import check_drain_path
from tests.support.harness import _children, wait_for, zigcorn_only

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
    # The socket listens (bound as root) a moment before root is given up: only an answer
    # from the app says the switch is behind us, and no earlier check may be trusted.
    assert httpx.get(server.url).text == "Hello, world!"
    ids = status_ids(server.proc.pid)
    assert ids["Uid"] == [65534] * 4 and ids["Gid"] == [65534] * 4, ids  # the user's own group
    output = server.output()
    assert "Running as uid 65534, gid 65534" in output, output
    assert output.index("Running as uid") < output.index("Started server process"), output
    assert server.stop() == 0


def test_unknown_user_is_a_clear_error(start_server):
    server = start_server("basic:app", "--user", "no-such-user-zc", wait=False)
    assert server.wait() == 2
    assert "user 'no-such-user-zc' does not exist" in server.output()
    server = start_server("basic:app", "--group", "no-such-group-zc", wait=False)
    assert server.wait() == 2
    assert "group 'no-such-group-zc' does not exist" in server.output()


def test_switching_user_without_root_is_refused(start_server):
    """Checked in a forked child that gave up root first (the interpreter here may not be
    readable by another user, so not a server of its own)."""
    import grp  # noqa: F401  (imported before the child gives up root)
    import pwd  # noqa: F401

    from zigcorn.supervisors.process import drop_privileges

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        message = b"no error"
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            drop_privileges("root", None, None)
        except OSError as exc:
            message = str(exc).encode()
        finally:
            os.write(write, message)
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    message = os.read(read, 1000).decode()
    os.close(read)
    assert message == "--user/--group need root to switch to user root, group 0 (running as uid 65534)", message


# ---- --config FILE ---------------------------------------------------------------------


def run_cli(*args: str, timeout: float = 20) -> "subprocess.CompletedProcess":
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "zigcorn", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=Path(__file__).resolve().parents[2])  # fmt: skip


def test_config_file_sets_options_and_the_command_line_wins(start_server, tmp_path):
    config = tmp_path / "zigcorn.toml"
    config.write_text(
        'headers = ["x-from-file:1", "x-second:2"]\n'
        "server_header = false\n"
        "date_header = false\n"
        "timeout_keep_alive = 7.5\n"
        'metrics_path = "/file-metrics"\n'
        'log_level = "warning"\n'
    )
    # The command line: the app, --date-header back on, another header list, the log level.
    server = start_server("basic:app", "--config", str(config), "--date-header", "--header", "x-cli:3",
                          "--log-level", "info")  # fmt: skip
    r = httpx.get(server.url + "/pid")
    assert "server" not in r.headers  # from the file
    assert "date" in r.headers  # the command line wins
    assert r.headers.get("x-cli") == "3" and "x-from-file" not in r.headers  # a repeatable flag replaces the list
    assert httpx.get(server.url + "/file-metrics").text.startswith("# HELP")
    assert "Application startup complete." in server.output()  # --log-level info beat the file's warning


def test_config_file_may_name_the_app(tmp_path):
    import subprocess
    import sys

    from tests.support.harness import free_port, port_open

    port = free_port()
    config = tmp_path / "zigcorn.toml"
    config.write_text(f'app = "tests.apps.hello:app"\nport = {port}\nworkers = 1\n')
    proc = subprocess.Popen([sys.executable, "-m", "zigcorn", "--config", str(config)],  # no APP, no --port
                            cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        assert wait_for(lambda: port_open(port), 10)
        assert httpx.get(f"http://127.0.0.1:{port}/").text == "Hello, world!"
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("prot = 8000\n", "unknown key 'prot'"),
        ("timeout-keep-alive = 5\n", "unknown key 'timeout-keep-alive' (did you mean 'timeout_keep_alive'?)"),
        ('port = "8000"\n', "'port': expected an integer, not '8000' (str)"),
        ("http2 = 1\n", "'http2': expected true or false, not 1 (int)"),
        ("backlog = 0\n", "'backlog': backlog must be a number from 1 to 65535, not 0"),
        ('loop = "tokio"\n', "'loop': loop must be one of"),
        ("headers = [1]\n", "'headers': expected a string or an array of strings"),
        ("port = \n", "not valid TOML"),
    ],
)
def test_config_file_errors_name_the_file_and_the_key(tmp_path, text, message):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    result = run_cli("tests.apps.hello:app", "--config", str(config))
    assert result.returncode == 2, result.stderr
    assert f"{config}: " in result.stderr and message in result.stderr, result.stderr


def test_config_keys_are_the_settings_and_runs_arguments():
    import inspect

    from zigcorn.config import SETTINGS
    from zigcorn.main import _FILE_ONLY_KEYS, run

    parameters = set(inspect.signature(run).parameters) - {"kwargs"}
    assert parameters <= set(_FILE_ONLY_KEYS)  # app, app_dir: run()'s own
    for setting in SETTINGS:  # every setting a file may set, with the value the table holds
        from zigcorn.main import _file_value

        if setting.default is not None and setting.name not in ("log_config", "reload_includes", "reload_excludes"):
            assert _file_value(setting, setting.default) == setting.default, setting.name


# ---- --workers-max-rss -----------------------------------------------------------------


class Load(threading.Thread):
    """Requests without pause from a thread, a new connection each time; counts failures."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.ok, self.failures, self.pids = url, 0, [], set()
        self.running = True

    def run(self):
        # No keep-alive: every request opens a new connection (one client: its setup is not cheap).
        client = httpx.Client(timeout=10, limits=httpx.Limits(max_keepalive_connections=0))
        while self.running:
            try:
                r = client.get(self.url + "/pid")
                if r.status_code == 200:
                    self.ok += 1
                    self.pids.add(int(r.text))
                else:
                    self.failures.append(r.status_code)
            except httpx.HTTPError as exc:
                self.failures.append(repr(exc))
        client.close()

    def stop(self):
        self.running = False
        self.join(15)


def test_worker_past_max_rss_is_replaced_gracefully_under_load(start_server):
    server = start_workers(start_server, 2, "--workers-max-rss", "80")
    first = set(_children(server.proc.pid))
    load = Load(server.url)
    load.start()
    try:
        assert wait_for(lambda: load.ok > 20, 20)
        # One keep-alive connection: /grow, then at once a slow request on the same connection,
        # so it is in flight on the worker being recycled, and must still finish.
        results: list = []

        def grow_then_sleep():
            with httpx.Client(timeout=20) as client:
                results.append(client.get(server.url + "/grow", params={"mb": 120}))
                results.append(client.get(server.url + "/sleep", params={"s": 2}))

        slow = threading.Thread(target=grow_then_sleep)
        slow.start()
        assert wait_for(lambda: results, 10)
        grown = int(results[0].text)
        assert grown in first
        draining = f"worker [{grown}] drains and exits."
        assert wait_for(lambda: len(results) == 2 or draining in server.output(), 15), server.output()
        assert len(results) == 1, "the slow request finished before the worker was retired: nothing was tested"
        assert wait_for(lambda: grown not in _children(server.proc.pid), 15), server.output()
        slow.join(20)
        children = set(_children(server.proc.pid))
        assert len(children) == 2 and children - first, (children, first)
        seen = load.ok
        assert wait_for(lambda: load.ok > seen + 50, 30)
    finally:
        load.stop()
    assert load.failures == []
    assert [r.status_code for r in results] == [200, 200] and results[1].text == "slept"
    assert load.pids & (children - first), "the new worker served requests"
    assert f"Worker [{grown}] uses" in server.output() and "past --workers-max-rss 80" in server.output()
    assert f"Worker [{grown}] stopped." in server.output()


def test_max_rss_runs_a_master_for_one_worker(start_server):
    server = start_server("basic:app", "--workers-max-rss", "1000")
    assert wait_for(lambda: len(_children(server.proc.pid)) == 1, 10)
    assert int(httpx.get(server.url + "/pid").text) != server.proc.pid


# ---- access log: format, exclusions, file and rotation -----------------------------------


def access_lines(server, marker: str) -> list[str]:
    return [line for line in server.output().splitlines() if marker in line]


def test_access_log_format_with_gunicorn_atoms(start_server):
    fmt = ('%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s %(B)s "%(f)s" "%(a)s" D=%(D)s T=%(T)s M=%(M)s L=%(L)s '
           '%(m)s %(U)s q=%(q)s %(H)s %(p)s in=%({X-Test}i)s out=%({content-type}o)s env=%({ZC_ENV_ATOM}e)s')
    server = start_server("basic:app", "--access-log-format", fmt, env={"ZC_ENV_ATOM": "from-env"})
    r = httpx.get(server.url + "/sleep", params={"s": "0.05"}, headers={"x-test": "hi", "referer": "http://r/",
                  "user-agent": "ua/1"}, auth=("bob", "pw"))  # fmt: skip
    assert r.status_code == 200
    httpx.get(server.url + "/status/204")
    assert wait_for(lambda: len(access_lines(server, '"GET /')) == 2), server.output()
    line, empty = access_lines(server, '"GET /')
    import re

    pattern = (r'127\.0\.0\.1 - bob \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "GET /sleep\?s=0\.05 HTTP/1\.1" '
               r'200 (\d+) \1 "http://r/" "ua/1" D=(\d+) T=0 M=(\d+) L=(0\.\d{6}) GET /sleep q=s=0\.05 HTTP/1\.1 '
               rf"<{server.proc.pid}> in=hi out=- env=from-env$")  # fmt: skip
    match = re.match(pattern, line)
    assert match, line
    size, micros, millis, seconds = match.groups()
    assert int(size) >= len("slept") and 50_000 <= int(micros) < 10_000_000
    assert int(millis) == int(micros) // 1000 and abs(float(seconds) - int(micros) / 1e6) < 1e-5
    assert " 204 " in empty and ' "-" "python-httpx/' in empty  # no referer: '-'
    assert "INFO:" not in line  # the line is the format, nothing added


def test_access_log_response_header_atom(start_server):
    server = start_server("basic:app", "--access-log-format", "%(s)s ct=%({Content-Type}o)s")
    httpx.get(server.url + "/stream")
    assert wait_for(lambda: access_lines(server, "ct=")), server.output()
    assert access_lines(server, "ct=") == ["200 ct=text/plain"]


def test_access_log_json(start_server):
    import json

    server = start_server("basic:app", "--access-log-format", "json")
    httpx.get(server.url + "/pid", params={"a": "b\"c"}, headers={"user-agent": 'we"ird\\'})
    assert wait_for(lambda: access_lines(server, '"method"')), server.output()
    (line,) = access_lines(server, '"method"')
    entry = json.loads(line)
    assert entry["method"] == "GET" and entry["path"] == "/pid" and entry["query"] == "a=b%22c"
    assert entry["status"] == 200 and entry["bytes"] > 0 and entry["duration_ms"] >= 0
    assert entry["user_agent"] == 'we"ird\\' and entry["referer"] == "-" and entry["protocol"] == "HTTP/1.1"
    assert entry["client"].startswith("127.0.0.1:") and entry["time"].endswith("Z")


def test_access_log_exclude(start_server):
    server = start_server("basic:app", "--access-log-exclude", "/pid", "--access-log-exclude", "/status/204")
    for path in ("/pid", "/status/204", "/stream", "/pid"):
        httpx.get(server.url + path)
    assert wait_for(lambda: access_lines(server, '"GET /stream')), server.output()
    time.sleep(0.2)
    assert access_lines(server, '"GET /') == access_lines(server, '"GET /stream')


def test_access_log_format_errors_are_clear():
    result = run_cli("tests.apps.hello:app", "--access-log-format", "%(h)s %(zz)s")
    assert result.returncode == 2 and "unknown atom %(zz)" in result.stderr, result.stderr


def test_access_log_file_rotation_under_load_loses_and_splits_no_line(start_server, tmp_path):
    import json

    log = tmp_path / "access.log"
    server = start_workers(start_server, 2, "--access-log-file", str(log), "--access-log-format", "json")
    load = Load(server.url)
    load.start()
    try:
        assert wait_for(lambda: load.ok > 50, 20)
        rotated = tmp_path / "access.log.1"
        log.rename(rotated)  # what logrotate does, then it signals the server
        server.proc.send_signal(signal.SIGUSR1)
        assert wait_for(log.exists, 5), server.output()
        seen = load.ok
        assert wait_for(lambda: load.ok > seen + 100, 30)
        size = rotated.stat().st_size
        time.sleep(0.5)
        assert rotated.stat().st_size == size, "the old file still grows after SIGUSR1"
    finally:
        load.stop()
    time.sleep(0.3)
    assert server.stop() == 0
    old, new = rotated.read_text().splitlines(), log.read_text().splitlines()
    assert old and new
    entries = [json.loads(line) for line in old + new]  # no split or interleaved line
    assert sum(1 for entry in entries if entry["path"] == "/pid") == load.ok
    assert load.failures == []
    assert "SIGUSR1: reopening log files." in server.output()
    assert '"path":"/pid"' not in server.output()  # nothing on stdout


def test_access_log_file_single_server_reopens_on_sigusr1(start_server, tmp_path):
    log = tmp_path / "access.log"
    server = start_server("basic:app", "--access-log-file", str(log))
    httpx.get(server.url + "/first")
    assert wait_for(lambda: log.exists() and "/first" in log.read_text())
    log.rename(tmp_path / "old.log")
    server.proc.send_signal(signal.SIGUSR1)
    assert wait_for(log.exists, 5), server.output()
    httpx.get(server.url + "/second")
    assert wait_for(lambda: "/second" in log.read_text())
    assert "/second" not in (tmp_path / "old.log").read_text()
    line = log.read_text().splitlines()[0]
    assert line.startswith("INFO:     127.0.0.1:") and '"GET /second HTTP/1.1" 200' in line  # uvicorn's line, no colour
    assert server.stop() == 0


# ---- --warmup-path ---------------------------------------------------------------------


def test_warmup_request_runs_before_accepting_then_freezes(start_server):
    server = start_server("basic:app", "--warmup-path", "/warm")
    # The socket listens before "Zigcorn running on" is logged; an answer comes after it.
    warmed, frozen = httpx.get(server.url + "/warmed").text.split()
    output = server.output()
    assert "Warm-up GET /warm: 200 in" in output, output
    assert output.index("Warm-up GET /warm") < output.index("Zigcorn running on"), output
    assert warmed == "zigcorn-warmup"  # once, before any client
    assert int(frozen) > 1000


def test_warmup_in_every_worker(start_server):
    server = start_workers(start_server, 2, "--warmup-path", "/warm")
    assert wait_for(lambda: server.output().count("Warm-up GET /warm: 200") == 2), server.output()


def test_failing_warmup_does_not_stop_the_server(start_server):
    server = start_server("errors:app", "--warmup-path", "/raise-before")
    assert "Warm-up GET /raise-before failed: RuntimeError('boom-before-start')" in server.output()
    assert httpx.get(server.url + "/ok").status_code == 200


# ---- --drain-path with --admin-token --------------------------------------------------------

TOKEN = "s3cret-token-0123456789"


@pytest.mark.parametrize("workers", [1, 2])
def test_drain_path_needs_the_token_and_drains_gracefully(start_server, workers):
    args = ("--drain-path", "/admin/drain", "--admin-token", TOKEN, "--health-path", "/healthz")
    server = start_workers(start_server, workers, *args) if workers > 1 else start_server("basic:app", *args)
    check_drain_path(server, TOKEN, "/pid")


def test_drain_path_without_token_is_refused():
    result = run_cli("tests.apps.hello:app", "--drain-path", "/drain")
    assert result.returncode == 2 and "drain_path needs admin_token" in result.stderr, result.stderr
    result = run_cli("tests.apps.hello:app", "--drain-path", "/drain", "--admin-token", "short")
    assert result.returncode == 2 and "at least 16 characters" in result.stderr, result.stderr


def test_gunicorn_spellings_of_the_flags():
    from zigcorn.config import Config
    from zigcorn.main import build_parser

    options = vars(build_parser().parse_args(["app:app", "--pid", "/tmp/x.pid", "--access-logfile", "-",
                                              "--access-logformat", "%(h)s %(s)s"]))  # fmt: skip
    assert options["pid_file"] == "/tmp/x.pid" and options["access_log_format"] == "%(h)s %(s)s"
    config = Config("tests.apps.hello:app", access_log_file=options["access_log_file"])
    assert config.access_log_file is None  # "-": stdout, as in gunicorn


def test_pid_file_under_reload_is_the_supervisors(start_server, tmp_path):
    pid_file = tmp_path / "zigcorn.pid"
    server = start_server("hello:app", "--reload", "--reload-dir", str(tmp_path), "--pid-file", str(pid_file))
    assert wait_for(pid_file.exists)
    assert pid_file.read_text() == f"{server.proc.pid}\n"
    # The supervisor writes its pid as it starts: its serving child may come a moment later.
    assert wait_for(lambda: len(_children(server.proc.pid)) == 1), _children(server.proc.pid)
    assert httpx.get(server.url).text == "Hello, world!"
    assert server.stop() == 0
    assert not pid_file.exists()
