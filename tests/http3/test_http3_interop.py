"""HTTP/3 interop: quic-go's HTTP/3 client (tests/interop/go/h3, quic-go v0.65.0) and
headless Chromium (forced onto QUIC: a page, then its fetches of a 1 MiB POST, a streamed
response and 100 requests at once; and switching to h3 by the server's alt-svc), against
``zigcorn --http3`` (tests/apps/h3_app.py) with
1 and 4 workers. aioquic and curl: tests/http3/test_http3.py.

The Go program is built once per machine (its modules come from the Go module proxy at
the first build) into a temp folder keyed by its sources; without ``go`` the Go rows skip
(fail with CI=true). Chromium trusts the test CA through an NSS database in its own HOME
and must report ``h3`` as the navigation's protocol.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.harness import ROOT, free_port, zigcorn_only
from tests.support.h3_support import h3_certs, h3_server  # noqa: F401 (fixtures)
from tests.support.interop_support import CLIENT_CACHE, text
from tests.support.tools import require_module, require_tool, skip_or_fail

pytestmark = zigcorn_only

GO_SOURCES = ROOT / "tests" / "interop" / "go" / "h3"
BUILD_TIMEOUT = 600  # the first build downloads quic-go and compiles it
TIMEOUT = 60
MB = 1024 * 1024


def go_binary(go: str) -> Path:
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=TIMEOUT).stdout
    digest = hashlib.sha256(version.encode())
    for path in sorted([*GO_SOURCES.glob("*.go"), GO_SOURCES / "go.mod", GO_SOURCES / "go.sum"]):
        digest.update(f"\0{path.name}\0".encode() + path.read_bytes())
    return CLIENT_CACHE / f"go-h3-{digest.hexdigest()[:16]}" / "h3client"


@pytest.fixture(scope="session")
def quic_go() -> Path:
    """The built quic-go client, from the cache when its sources have not changed."""
    go = require_tool("go", reason="the quic-go rows need a Go toolchain to build their client")
    binary = go_binary(go)
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f"{binary.name}.{os.getpid()}.partial")
    cmd = [go, "build", "-buildvcs=false", "-o", str(partial), "."]
    try:
        done = subprocess.run(cmd, cwd=GO_SOURCES, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"building the quic-go client took over {BUILD_TIMEOUT}s\n{text(exc.stderr)}")
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        pytest.fail(f"building the quic-go client failed (exit {done.returncode}) in {GO_SOURCES}\n{done.stdout}{done.stderr}")
    os.replace(partial, binary)
    return binary


@pytest.fixture
def go_h3(quic_go, h3_server, h3_certs):
    """``go_h3(check, *flags) -> dict``: one check of the quic-go client against the server."""

    def run(check: str, *flags: str) -> dict:
        cmd = [str(quic_go), check, "-addr", f"127.0.0.1:{h3_server.port}", "-ca", h3_certs.cafile,
               "-timeout", f"{TIMEOUT - 10}s", *flags]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{' '.join(cmd)} did not finish within {TIMEOUT}s\n{text(exc.stdout)}{text(exc.stderr)}"
                        f"\n--- server output ---\n{h3_server.output()[-4000:]}")
        if done.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} exited {done.returncode}\n{done.stdout}{done.stderr}"
                        f"\n--- server output ---\n{h3_server.output()[-4000:]}")
        return json.loads(done.stdout.splitlines()[-1])

    return run


def test_quic_go_gets_on_one_connection_from_one_worker(go_h3):
    result = go_h3("get", "-n", "5")
    assert result["proto"] == "HTTP/3.0"
    assert result["http_version"] == "3" and result["scheme"] == "https"
    assert len(set(result["pids"])) == 1


def test_quic_go_posts_1_mib(go_h3):
    result = go_h3("post", "-size", str(MB))
    assert result == {"proto": "HTTP/3.0", "bytes": MB, "sha_ok": True}


def test_quic_go_reads_a_streamed_response(go_h3):
    result = go_h3("stream", "-chunks", "300", "-chunk-size", "1000")
    assert result == {"proto": "HTTP/3.0", "bytes": 300_000, "ok": True}


def test_quic_go_holds_100_requests_open_at_once(go_h3):
    result = go_h3("concurrent", "-n", "100")
    assert result == {"proto": "HTTP/3.0", "ok": 100, "pids": 1}


# ---- Chromium ---------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CERTUTIL = shutil.which("certutil")


@pytest.fixture(scope="module")
def chromium_home(tmp_path_factory, h3_certs):
    if CHROMIUM is None or CERTUTIL is None:
        skip_or_fail("Chromium or certutil (Debian: chromium, libnss3-tools) is not installed")
    home = tmp_path_factory.mktemp("chromium-h3")
    nssdb = home / ".pki" / "nssdb"
    nssdb.mkdir(parents=True)
    subprocess.run([CERTUTIL, "-d", f"sql:{nssdb}", "-N", "--empty-password"], check=True, capture_output=True)
    subprocess.run([CERTUTIL, "-d", f"sql:{nssdb}", "-A", "-t", "C,,", "-n", "zigcorn-h3-ca", "-i", h3_certs.cafile],
                   check=True, capture_output=True)
    return home


async def _evaluate(ws_url: str, expression: str, timeout: float) -> str:
    websockets = require_module("websockets")
    async with websockets.connect(ws_url, max_size=None) as conn:
        deadline = time.monotonic() + timeout
        value = ""
        call_id = 0
        while time.monotonic() < deadline:
            call_id += 1
            await conn.send(json.dumps({"id": call_id, "method": "Runtime.evaluate",
                                        "params": {"expression": expression, "returnByValue": True}}))
            while True:
                reply = json.loads(await conn.recv())
                if reply.get("id") == call_id:
                    break
            value = reply.get("result", {}).get("result", {}).get("value") or ""
            if value:
                return value
            await asyncio.sleep(0.2)
        return value


# What the page runs once it loaded over h3 (awaited by `_evaluate_async`).
FETCHES = """(async () => {
  const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, "0")).join("");
  const body = new Uint8Array(1048576);
  for (let i = 0; i < body.length; i += 65536) crypto.getRandomValues(body.subarray(i, i + 65536));
  const sha256 = hex(await crypto.subtle.digest("SHA-256", body));
  const echo = await (await fetch("/echo", {method: "POST", body})).json();
  const streamed = new Uint8Array(await (await fetch("/stream?chunks=300&size=1000")).arrayBuffer());
  let streamed_ok = true;
  for (let i = 0; i < streamed.length; i++) if (streamed[i] !== Math.floor(i / 1000) % 256) { streamed_ok = false; break; }
  const many = await Promise.all(Array.from({length: 100}, (_, i) => fetch("/info?many=" + i).then((r) => r.json())));
  const protocols = [...new Set(performance.getEntriesByType("resource").map((e) => e.nextHopProtocol))];
  return JSON.stringify({sha256, echo, streamed_bytes: streamed.length, streamed_ok, many: many.length,
                         many_pids: new Set(many.map((m) => m.pid)).size, protocols});
})()"""


async def _evaluate_async(ws_url: str, expression: str, timeout: float) -> str:
    """The value of an expression that returns a promise, awaited in the page."""
    websockets = require_module("websockets")
    async with websockets.connect(ws_url, max_size=None) as conn:
        await conn.send(json.dumps({"id": 1, "method": "Runtime.evaluate",
                                    "params": {"expression": expression, "awaitPromise": True, "returnByValue": True}}))
        while True:
            reply = json.loads(await asyncio.wait_for(conn.recv(), timeout))
            if reply.get("id") == 1:
                result = reply.get("result", {})
                assert "exceptionDetails" not in result, result
                return result["result"]["value"]


def _kill(proc: subprocess.Popen) -> None:
    """Chromium and every process it started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def _devtools_page(debug_port: int) -> str:
    """The DevTools WebSocket URL of Chromium's first page, once its endpoint is up."""
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            pages = httpx.get(f"http://127.0.0.1:{debug_port}/json/list", timeout=2).json()
            return next(p["webSocketDebuggerUrl"] for p in pages if p.get("type") == "page")
        except (httpx.HTTPError, StopIteration, ValueError):
            time.sleep(0.2)
    pytest.fail("Chromium's DevTools endpoint did not come up")


def test_chromium_forced_onto_quic_loads_a_page_over_h3(chromium_home, h3_server, h3_certs):
    # 127.0.0.1, not localhost: Chromium tries ::1 first, where the server does not listen,
    # and a forced QUIC origin does not fall back (the certificate names both).
    origin = f"127.0.0.1:{h3_server.port}"
    debug_port = free_port()
    proc = subprocess.Popen(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={chromium_home / 'profile'}", f"--remote-debugging-port={debug_port}",
         "--enable-quic", f"--origin-to-force-quic-on={origin}", f"https://{origin}/info"],
        env={**os.environ, "HOME": str(chromium_home)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        ws_url = _devtools_page(debug_port)
        expression = ("(() => { const e = performance.getEntries()[0]; const t = document.body && "
                      "document.body.innerText; return e && t && t.includes('http_version') ? "
                      "JSON.stringify({protocol: e.nextHopProtocol, body: t}) : ''; })()")
        value = asyncio.run(_evaluate(ws_url, expression, 30))
        assert value, f"the page did not load\n--- server output ---\n{h3_server.output()[-3000:]}"
        result = json.loads(value)
        assert result["protocol"] == "h3"
        assert json.loads(result["body"])["http_version"] == "3"
        # The page's own fetches: a 1 MiB POST, a streamed response, 100 requests at once.
        done = json.loads(asyncio.run(_evaluate_async(ws_url, FETCHES, 60)))
        assert done["echo"]["bytes"] == MB and done["echo"]["sha256"] == done["sha256"], done
        assert done["streamed_bytes"] == 300_000 and done["streamed_ok"], done
        assert done["many"] == 100 and done["many_pids"] == 1, done
        assert done["protocols"] == ["h3"], done
    finally:
        _kill(proc)


@pytest.mark.parametrize("workers", [1, 4])
def test_chromium_loaded_over_http11_tls_switches_to_h3_by_the_servers_alt_svc(chromium_home, h3_certs, workers):
    """No forcing for the server's origin: Chromium learns HTTP/3 from the alt-svc the
    server adds to its HTTP/1.1 response over TLS and uses it for a later navigation.
    (Chromium follows alt-svc only for publicly trusted roots, unless QUIC is forced for
    some origin of the host: another port of 127.0.0.1 is, one nothing listens on.)"""
    from tests.support.h3_support import start_h3_server

    server = start_h3_server(h3_certs, workers, "--no-http2")
    origin = f"https://127.0.0.1:{server.port}"
    debug_port = free_port()
    proc = subprocess.Popen(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={chromium_home / f'profile-alt-svc-{workers}'}", f"--remote-debugging-port={debug_port}",
         "--enable-quic", f"--origin-to-force-quic-on=127.0.0.1:{free_port()}", "about:blank"],
        env={**os.environ, "HOME": str(chromium_home)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        ws_url = _devtools_page(debug_port)
        protocols = asyncio.run(_navigate_until_h3(ws_url, origin, tries=8))
        assert protocols[0] == "http/1.1", protocols
        assert protocols[-1] == "h3", f"{protocols}\n--- server output ---\n{server.output()[-3000:]}"
    finally:
        _kill(proc)
        server.stop()


async def _navigate_until_h3(ws_url: str, origin: str, tries: int) -> list[str]:
    """Navigates to `origin`/info until a load comes over h3 (at most `tries` loads); the
    protocol of each load, as the page's navigation entry reports it."""
    websockets = require_module("websockets")
    protocols = []
    async with websockets.connect(ws_url, max_size=None) as conn:
        call_id = 0

        async def call(method: str, **params) -> dict:
            nonlocal call_id
            call_id += 1
            await conn.send(json.dumps({"id": call_id, "method": method, "params": params}))
            while True:
                reply = json.loads(await conn.recv())
                if reply.get("id") == call_id:
                    return reply

        expression = ("(() => { const e = performance.getEntriesByType('navigation')[0]; return e && document.body "
                      "&& document.body.innerText.includes('http_version') ? e.nextHopProtocol : ''; })()")
        for i in range(tries):
            await call("Page.navigate", url=f"{origin}/info?load={i}")
            protocol = ""
            deadline = time.monotonic() + 15
            while not protocol and time.monotonic() < deadline:
                reply = await call("Runtime.evaluate", expression=expression, returnByValue=True)
                protocol = reply.get("result", {}).get("result", {}).get("value") or ""
                if not protocol:
                    await asyncio.sleep(0.1)
            protocols.append(protocol or "(not loaded)")
            if protocol == "h3":
                break
            await asyncio.sleep(0.5)  # the alt-svc is cached as the response is read
    return protocols
