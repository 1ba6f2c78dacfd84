"""What a plain HTTP server process does not import (issue 39: idle memory).

Each module here costs a serving process memory it never uses unless a feature asks for
it: the WebSocket stream class loads with the first upgrade, the TLS loader with HTTPS,
the WSGI adapter with ``--interface wsgi``, the master with ``--workers``, the reloader
with ``--reload``; argparse and gettext are the CLI's and are forgotten once it has
parsed. These tests hold that, so a top-level import cannot bring them back silently.
"""

import json
import os
import subprocess
import sys
import textwrap

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from zigcorn import _core
from zigcorn.config import Config
from zigcorn.protocols.http import HTTPCycle, wake
from zigcorn.protocols.websocket import WebSocketCycle
from tests.support.harness import ROOT, Server, free_port, port_open, wait_for, zigcorn_only

pytestmark = [zigcorn_only, pytest.mark.every_python]


def test_plain_http_server_imports_no_websocket_tls_wsgi_workers_or_cli_modules():
    server = Server("modules:app").wait_ready()
    try:
        assert json.loads(httpx.get(server.url + "/", timeout=5).content) == []
    finally:
        server.stop()


def test_a_server_started_with_a_config_file_forgets_tomllib(tmp_path):
    config = tmp_path / "zigcorn.toml"
    config.write_text('log_level = "warning"\n')
    server = Server("modules:app", "--config", str(config)).wait_ready()
    try:
        assert json.loads(httpx.get(server.url + "/", timeout=5).content) == []
    finally:
        server.stop()


def test_the_first_websocket_loads_the_websocket_class_and_only_it():
    server = Server("modules:app").wait_ready()
    try:
        assert json.loads(httpx.get(server.url + "/", timeout=5).content) == []
        for _ in range(2):  # the loader runs once; the second upgrade uses the loaded class
            with connect(f"ws://127.0.0.1:{server.port}/", open_timeout=5) as ws:
                assert json.loads(ws.recv(timeout=5)) == ["zigcorn.protocols.websocket"]
        assert json.loads(httpx.get(server.url + "/", timeout=5).content) == ["zigcorn.protocols.websocket"]
    finally:
        server.stop()
    assert "Traceback" not in server.output()


def _options() -> dict:
    options = Config("tests.apps.basic:app").engine_options()
    options["metrics_slot"] = 0
    return options


def test_the_engine_takes_a_websocket_class_or_a_loader_and_calls_the_loader_lazily():
    calls = []

    def loader():
        calls.append(1)
        return WebSocketCycle

    for websocket_class in (WebSocketCycle, loader):
        engine = _core.Engine(lambda stream: None, wake, HTTPCycle, {**_options(), "websocket_class": websocket_class})
        engine.close()
    assert calls == []  # not at construction: only an upgrade calls it


@pytest.mark.parametrize("websocket_class", [None, 42, "zigcorn.protocols.websocket:WebSocketCycle", dict])
def test_the_engine_refuses_a_websocket_class_that_is_neither_a_stream_class_nor_callable(websocket_class):
    with pytest.raises(TypeError, match="websocket_class"):
        engine = _core.Engine(lambda stream: None, wake, HTTPCycle, {**_options(), "websocket_class": websocket_class})
        engine.close()


def test_a_failing_loader_refuses_that_upgrade_and_the_server_goes_on(tmp_path):
    # The loader is the server's own; if it ever fails (or returns something else than a
    # Stream subclass) the upgrade is refused, reported once per attempt, and HTTP goes on.
    port = free_port()
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent(f"""
        import zigcorn, zigcorn.server

        zigcorn.server._websocket_class = lambda: dict
        zigcorn.run("tests.apps.modules:app", host="127.0.0.1", port={port})
    """))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert wait_for(lambda: port_open(port) or proc.poll() is not None, timeout=10)
        with pytest.raises(InvalidStatus):
            with connect(f"ws://127.0.0.1:{port}/", open_timeout=5):
                pass
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200
    finally:
        proc.kill()
        output = proc.communicate()[0].decode()
    assert "must return a subclass of zigcorn._core.Stream" in output
