"""Every flag is also a ZIGCORN_* environment variable; flags given on the command line win."""

import os
import subprocess
import sys

import httpx

from tests.support.harness import ROOT, free_port, port_open, wait_for, zigcorn_only

pytestmark = zigcorn_only


def test_environment_sets_app_port_and_booleans(start_server):
    server = start_server("basic:app", env={"ZIGCORN_SERVER_HEADER": "false", "ZIGCORN_ROOT_PATH": "/api",
                                            "ZIGCORN_HEADERS": "x-a:1,x-b:2"})
    r = httpx.get(server.url + "/hello")
    assert "server" not in r.headers
    assert r.headers["x-a"] == "1" and r.headers["x-b"] == "2"


def test_command_line_wins_over_environment(start_server):
    server = start_server("basic:app", "--server-header", env={"ZIGCORN_SERVER_HEADER": "0"})
    assert httpx.get(server.url + "/").headers["server"] == "zigcorn"


def test_app_from_environment():
    # The harness passes the app positionally; here the environment names it instead.
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "zigcorn"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "ZIGCORN_APP": "tests.apps.basic:app", "ZIGCORN_PORT": str(port)})
    try:
        assert wait_for(lambda: port_open(port), 10)
        assert httpx.get(f"http://127.0.0.1:{port}/pid").text == str(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def test_bad_environment_value_is_one_line_error(start_server):
    server = start_server("basic:app", env={"ZIGCORN_PORT": "http"}, wait=False)
    assert server.wait() == 2
    assert "ZIGCORN_PORT='http'" in server.output()


def test_web_concurrency_sets_workers(start_server):
    server = start_server("basic:app", env={"WEB_CONCURRENCY": "2"})
    assert wait_for(lambda: "Started parent process" in server.output())
