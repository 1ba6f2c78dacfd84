"""--reload: a changed file restarts the server process within about a second."""

import os
import signal
import subprocess
import sys
import time

import httpx

from tests.support.harness import ROOT, free_port, port_open, wait_for, zigcorn_only
from tests.support.tools import require_module

pytestmark = zigcorn_only
require_module("watchfiles")

APP = '''
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({{"type": "http.response.start", "status": 200, "headers": []}})
    await send({{"type": "http.response.body", "body": b"{version}"}})
'''


def body(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/", timeout=2).text
    except httpx.HTTPError:
        return ""


def test_editing_a_file_restarts_the_server_and_ignored_files_do_not(tmp_path):
    source = tmp_path / "reloadme.py"
    source.write_text(APP.format(version="one"))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "zigcorn", "reloadme:app", "--app-dir", str(tmp_path), "--port", str(port),
         "--reload", "--reload-dir", str(tmp_path), "--reload-exclude", "skip_*"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert wait_for(lambda: body(port) == "one", 15)
        time.sleep(0.5)  # let the watcher settle
        (tmp_path / "skip_me.py").write_text("x = 1\n")
        (tmp_path / "notes.txt").write_text("not python\n")
        time.sleep(1.5)
        saved = time.monotonic()
        source.write_text(APP.format(version="two"))
        assert wait_for(lambda: body(port) == "two", 10)
        took = time.monotonic() - saved
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    text = out.decode()
    assert proc.returncode == 0, text
    assert text.count("Reloading...") == 1, text  # skip_me.py and notes.txt did not count
    assert "reloadme.py" in text
    print(f"reloaded {took:.2f}s after the save")
    assert took < 8.0, f"reloaded {took:.2f}s after the save"  # a new interpreter starts: slow under load
    assert not port_open(port)


def test_reload_needs_an_import_string(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import zigcorn\nasync def app(s, r, se): pass\nzigcorn.run(app, reload=True)\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=20)
    assert result.returncode == 1
    assert "import string" in result.stderr
