"""uvicorn's other application doors: --interface asgi2 and wsgi, --env-file,
--reset-contextvars, --h11-max-incomplete-event-size, and zigcorn --help naming every
flag uvicorn --help names."""

import os
import re
import subprocess
import sys

import httpx
import pytest

from tests.support.harness import ROOT, zigcorn_only
from tests.support.tools import require_module

pytestmark = [zigcorn_only, pytest.mark.every_python]


def test_asgi2_apps_are_detected_and_served(start_server):
    server = start_server("interfaces:Asgi2App")
    assert httpx.get(server.url + "/x").text == "asgi2 /x"
    explicit = start_server("interfaces:asgi2_function", "--interface", "asgi2")
    assert httpx.get(explicit.url + "/y").text == "asgi2 function /y"


def test_wsgi_apps_run_in_a_thread_pool_streaming_both_ways(start_server):
    server = start_server("interfaces:wsgi_app", "--interface", "wsgi")
    assert httpx.get(server.url + "/hello").text == "wsgi /hello"
    body = os.urandom(3 * 1024 * 1024)
    r = httpx.post(server.url + "/upload", content=body, timeout=30)
    assert r.text == str(len(body))
    r = httpx.get(server.url + "/stream", timeout=30)
    assert r.text == "".join(f"part{i};" for i in range(5))


def test_env_file_sets_the_environment_before_the_app_loads(start_server, tmp_path):
    require_module("dotenv")
    env = tmp_path / ".env"
    env.write_text("ZIGCORN_TEST_GREETING=from the env file\n")
    server = start_server("interfaces:env_app", "--env-file", str(env))
    assert httpx.get(server.url + "/").text == "from the env file"


def test_reset_contextvars_runs_each_request_in_a_fresh_context(start_server):
    plain = start_server("interfaces:context_app")
    assert httpx.get(plain.url + "/").text == "set while the server started"
    reset = start_server("interfaces:context_app", "--reset-contextvars")
    assert httpx.get(reset.url + "/").text == "unset"


def test_reset_contextvars_for_a_wsgi_app(start_server):
    # One thread, so that every request runs on the same one: what a request sets must not
    # reach the next, and the flag hides what was set as the server started, as for ASGI.
    plain = start_server("interfaces:wsgi_context_app", "--interface", "wsgi", "--wsgi-threads", "1")
    assert [httpx.get(plain.url + "/").text for _ in range(3)] == ["set while the server started"] * 3
    reset = start_server("interfaces:wsgi_context_app", "--interface", "wsgi", "--wsgi-threads", "1",
                         "--reset-contextvars")  # fmt: skip
    assert [httpx.get(reset.url + "/").text for _ in range(3)] == ["unset"] * 3


def test_h11_max_incomplete_event_size_is_the_head_limit(start_server):
    server = start_server("basic:app", "--h11-max-incomplete-event-size", "1024")
    assert httpx.get(server.url + "/ok", headers={"x-a": "a" * 500}).status_code == 200
    assert httpx.get(server.url + "/ok", headers={"x-a": "a" * 2000}).status_code == 431


def _flags(help_text: str) -> set[str]:
    return set(re.findall(r"(?m)^\s+(--[a-z0-9-]+)", help_text))


def test_help_names_every_uvicorn_flag():
    require_module("uvicorn", "compared with uvicorn's --help")
    theirs = subprocess.run([sys.executable, "-m", "uvicorn", "--help"], capture_output=True, text=True).stdout
    ours = subprocess.run([sys.executable, "-m", "zigcorn", "--help"], capture_output=True, text=True, cwd=ROOT).stdout
    theirs_flags = {f for f in _flags(theirs) if f != "--help"}
    ours_flags = _flags(ours) | {f.replace("--no-", "--") for f in _flags(ours)}
    # uvicorn writes on/off pairs as "--flag / --no-flag" on one line.
    for pair in re.findall(r"--([a-z0-9-]+) / --no-\1", theirs):
        theirs_flags.add(f"--{pair}")
    assert sorted(theirs_flags - ours_flags) == []
