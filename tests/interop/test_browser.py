"""A real browser: Debian's Chromium, headless, trusting a test CA (an NSS database in
its own HOME), loads a page from zigcorn over HTTPS, downloads a file, opens a
WebSocket from the page and echoes through it, all over HTTP/2 (checked from the
browser's side: the navigation's protocol). It keeps a screenshot under
benchmarks/results/browser.png."""

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import time

import httpx
import pytest
import websockets

from tests.support.harness import ROOT, Server, free_port, zigcorn_only
from tests.support.tools import require_module, skip_or_fail

pytestmark = zigcorn_only
trustme = require_module("trustme")
require_module("starlette")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CERTUTIL = shutil.which("certutil")


@pytest.fixture(scope="module")
def browser_env(tmp_path_factory):
    if CHROMIUM is None or CERTUTIL is None:
        skip_or_fail("Chromium or certutil (Debian: chromium, libnss3-tools) is not installed")
    root = tmp_path_factory.mktemp("browser")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    (root / "server.pem").write_bytes(cert.private_key_and_cert_chain_pem.bytes())
    (root / "ca.pem").write_bytes(ca.cert_pem.bytes())
    home = root / "home"
    nssdb = home / ".pki" / "nssdb"
    nssdb.mkdir(parents=True)
    subprocess.run([CERTUTIL, "-d", f"sql:{nssdb}", "-N", "--empty-password"], check=True, capture_output=True)
    subprocess.run([CERTUTIL, "-d", f"sql:{nssdb}", "-A", "-t", "C,,", "-n", "zigcorn-test-ca", "-i",
                    str(root / "ca.pem")], check=True, capture_output=True)
    files = root / "files"
    files.mkdir()
    (files / "data.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    return root, home, files


class Chromium:
    """Headless Chromium driven over the DevTools protocol (its own WebSocket)."""

    def __init__(self, home, url: str):
        self.port = free_port()
        env = {**os.environ, "HOME": str(home)}
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={home / 'profile'}", f"--remote-debugging-port={self.port}",
             "--window-size=900,500", url],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.ws_url = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.ws_url is None:
            try:
                pages = httpx.get(f"http://127.0.0.1:{self.port}/json/list", timeout=2).json()
                self.ws_url = next(p["webSocketDebuggerUrl"] for p in pages if p.get("type") == "page")
            except (httpx.HTTPError, StopIteration, ValueError):
                time.sleep(0.2)
        assert self.ws_url, "Chromium's DevTools endpoint did not come up"
        self._id = 0

    async def call(self, conn, method: str, **params):
        self._id += 1
        await conn.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            reply = json.loads(await conn.recv())
            if reply.get("id") == self._id:
                return reply.get("result", {})

    async def result_and_screenshot(self, shot_path, timeout: float = 30):
        async with websockets.connect(self.ws_url, max_size=None) as conn:
            deadline = time.monotonic() + timeout
            text = "running"
            while time.monotonic() < deadline:
                got = await self.call(conn, "Runtime.evaluate",
                                      expression="document.getElementById('result')?.textContent || 'running'")
                text = got.get("result", {}).get("value", "running")
                if text != "running":
                    break
                await asyncio.sleep(0.2)
            shot = await self.call(conn, "Page.captureScreenshot", format="png")
            shot_path.write_bytes(base64.b64decode(shot["data"]))
            return text

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)


def test_a_page_over_https_h2_downloads_and_echoes_through_a_websocket(browser_env):
    root, home, files = browser_env
    server = Server("browser_app:app", "--ssl-certfile", str(root / "server.pem"),
                    env={"ZIGCORN_TEST_FILES": str(files)}).wait_ready()
    browser = Chromium(home, f"https://localhost:{server.port}/")
    try:
        shots = ROOT / "benchmarks" / "results"
        shots.mkdir(parents=True, exist_ok=True)
        text = asyncio.run(browser.result_and_screenshot(shots / "browser.png"))
        assert text != "running", "the page's script did not finish"
        result = json.loads(text)
        assert result.get("error") is None, result
        assert result["download"] == 3 * 1024 * 1024
        # The browser's own account of the protocol: HTTP/2, negotiated by ALPN.
        assert result["protocol"] == "h2"
        version, echo = result["echo"]
        assert echo == "echo: hello from the browser"
        # Chromium opens the WebSocket on the HTTP/2 connection (RFC 8441) when offered.
        assert version in ("http_version 2", "http_version 1.1")
        print("websocket over:", version)
        assert (shots / "browser.png").stat().st_size > 1000
    finally:
        browser.close()
        server.kill()
