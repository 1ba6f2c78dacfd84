"""Command line and programmatic entry points."""

import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.harness import IS_ZIGCORN, ROOT, SERVER, free_port, port_open, zigcorn_only

pytestmark = pytest.mark.every_python


# uvicorn 0.54 exits 3 (its STARTUP_FAILURE code) when the app cannot be loaded; zigcorn's spec says 1.
APP_LOAD_FAILURE_EXIT = 1 if IS_ZIGCORN else 3


def run_cli(*args, timeout=20):
    return subprocess.run([sys.executable, "-m", SERVER, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@zigcorn_only
def test_version():
    result = run_cli("--version")
    assert result.returncode == 0
    assert "zigcorn" in result.stdout
    assert any(ch.isdigit() for ch in result.stdout)


def test_help_lists_uvicorn_flags():
    result = run_cli("--help")
    assert result.returncode == 0
    for flag in ("--host", "--port", "--root-path", "--lifespan", "--no-server-header",
                 "--no-date-header", "--header", "--version", "--ws", "--ws-max-size", "--ws-max-queue",
                 "--ws-ping-interval", "--ws-ping-timeout", "--ws-per-message-deflate", "--ssl-keyfile", "--ssl-certfile",
                 "--ssl-keyfile-password", "--ssl-version", "--ssl-cert-reqs", "--ssl-ca-certs", "--ssl-ciphers"):
        assert flag in result.stdout


def test_unimportable_app_fails_cleanly():
    result = run_cli("tests.apps.does_not_exist:app", "--port", str(free_port()))
    output = result.stdout + result.stderr
    assert result.returncode == APP_LOAD_FAILURE_EXIT
    assert len([line for line in output.splitlines() if "Could not import module" in line]) == 1
    assert "Traceback" not in output


def test_missing_attribute_fails_cleanly():
    result = run_cli("tests.apps.hello:nope", "--port", str(free_port()))
    output = result.stdout + result.stderr
    assert result.returncode == APP_LOAD_FAILURE_EXIT
    assert 'Attribute "nope" not found in module' in output
    assert "Traceback" not in output


def test_run_with_app_object(tmp_path):
    port = free_port()
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent(f"""
        import {SERVER} as server
        from tests.apps.hello import app

        server.run(app, host="127.0.0.1", port={port})
    """))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            if port_open(port) or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[0].decode()
        assert httpx.get(f"http://127.0.0.1:{port}/").text == "Hello, world!"
    finally:
        proc.kill()
        proc.wait()


def test_factory(start_server):
    server = start_server("hello:create_app", "--factory")
    assert httpx.get(server.url + "/").text == "Hello, world!"


def test_limit_max_requests_exits_after_n_requests(start_server):
    server = start_server("hello:app", "--limit-max-requests", "3")
    for _ in range(3):
        assert httpx.get(server.url + "/").status_code == 200
    assert server.wait() == 0


def test_limit_concurrency_answers_503(start_server):
    # uvicorn counts the new connection itself, zigcorn counts requests in progress: only
    # assert that some of four simultaneous requests over a limit of 2 are turned away.
    server = start_server("basic:app", "--limit-concurrency", "2")
    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(lambda _: httpx.get(server.url + "/sleep?s=0.5", timeout=10).status_code, range(4)))
    assert 200 in statuses and 503 in statuses, statuses
    assert httpx.get(server.url + "/after").status_code == 200


@zigcorn_only
def test_ws_flags_out_of_range_are_one_line_errors():
    for args in (["--ws", "bogus"], ["--ws-max-size", "0"], ["--ws-max-queue", "0"],
                 ["--ws-per-message-deflate", "maybe"], ["--ws-ping-interval", "-1"]):
        result = run_cli("tests.apps.ws:app", "--port", str(free_port()), *args)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert args[0].lstrip("-").split("-")[0] in result.stderr


@zigcorn_only
def test_run_accepts_uvicorn_ws_keywords():
    from zigcorn.config import Config

    config = Config("tests.apps.ws:app", ws="wsproto", ws_max_size=1024, ws_max_queue=4, ws_ping_interval=None,
                    ws_ping_timeout=5.0, ws_per_message_deflate=False)
    assert (config.ws, config.ws_max_size, config.ws_max_queue) == ("wsproto", 1024, 4)
    assert config.ws_ping_interval is None and config.ws_per_message_deflate is False
