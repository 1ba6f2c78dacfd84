"""Interop with Node: the built-in http2 and https modules and the npm package `ws`, driven
as Node programs drive them, against tests/apps/interop.py.

The client is one script, tests/interop/node/client.js, with `ws` pinned in its
package.json and package-lock.json. It is installed once per machine (`npm ci`) into a temp
folder keyed by a hash of those files and the Node version; each row runs one of its
checks, which prints one JSON line or fails with a message (shown here together with the
server's log). Rows:
  http2, h2c with prior knowledge and h2 over TLS (ALPN), one session per run: five
    requests on the session; 50 streams open at once (each a POST /echo that holds its body
    open until all 50 have their echo); a 4 MiB POST echoed back, compared by SHA-256; a
    32 MiB download checked chunk by chunk against the pattern bytes(i % 251)
  https (HTTP/1.1 over TLS) with a keep-alive Agent: the same checks in small (the socket
    reused, 10 requests open at once on 10 sockets, 1 MiB echo, 4 MiB download)
  ws over ws:// and wss://: a text message echoed, a 1 MiB binary message echoed, a ping
    answered by its pong, a close with 1000 answered with 1000

Without `node` and `npm` on PATH the file skips (fails with CI=true); a failing install
fails. The client runs by hand too:
``node client.js download --transport h2c --port PORT`` from the installed folder.
"""

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.harness import ROOT, zigcorn_only
from tests.support.interop_support import CLIENT_CACHE, certs, pattern_sha256, plain_server, text, tls_server  # noqa: F401 (fixtures)
from tests.support.tools import require_tool


NODE_SOURCES = ROOT / "tests" / "interop" / "node"
SOURCE_FILES = ["client.js", "package.json", "package-lock.json", ".npmrc"]
INSTALL_CACHE = CLIENT_CACHE
INSTALL_TIMEOUT = 300  # the first install fetches `ws` from the registry
TIMEOUT = 60
MB = 1024 * 1024

# HTTP/2 rows need a server that speaks it (uvicorn, the suite's reference, does not).
HTTP_TRANSPORTS = [pytest.param("h2c", marks=zigcorn_only), pytest.param("h2", marks=zigcorn_only), "https"]
WS_TRANSPORTS = ["ws", "wss"]
TLS = {"h2", "https", "wss"}
VERSION = {"h2c": "2", "h2": "2", "https": "1.1"}  # the app's x-http-version header
ALPN = {"h2c": "h2c", "h2": "h2"}  # http2 session.alpnProtocol
# https does the same checks in small.
CONCURRENT = {"h2c": 50, "h2": 50, "https": 10}
ECHO_BYTES = {"h2c": 4 * MB, "h2": 4 * MB, "https": 1 * MB}
DOWNLOAD_BYTES = {"h2c": 32 * MB, "h2": 32 * MB, "https": 4 * MB}


def source_hash(node: str) -> str:
    """Hash of the client's files and the Node version that runs it."""
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=TIMEOUT).stdout
    digest = hashlib.sha256(version.encode())
    for name in SOURCE_FILES:
        digest.update(f"\0{name}\0".encode() + (NODE_SOURCES / name).read_bytes())
    return digest.hexdigest()[:16]


def install(npm: str, folder: Path) -> None:
    """Copies the client into a folder of this process's own, installs `ws` there from the
    lock file, then renames it into place: no run sees half an install."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = folder.with_name(f"{folder.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    for name in SOURCE_FILES:
        shutil.copy2(NODE_SOURCES / name, partial / name)
    cmd = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]
    try:
        done = subprocess.run(cmd, cwd=partial, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(partial, ignore_errors=True)
        pytest.fail(f"installing the Node interop client took over {INSTALL_TIMEOUT}s: {' '.join(cmd)}\n"
                    f"{text(exc.stdout)}{text(exc.stderr)}")
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        pytest.fail(f"installing the Node interop client failed (exit {done.returncode}): {' '.join(cmd)} "
                    f"with the files of {NODE_SOURCES}\n{done.stdout}{done.stderr}")
    try:
        os.rename(partial, folder)
    except OSError:
        # Another run put the same install in place first.
        shutil.rmtree(partial, ignore_errors=True)
        if not folder.is_dir():
            raise


@pytest.fixture(scope="session")
def node_client() -> tuple[str, Path]:
    """`node` and the installed client's folder, from the cache when nothing changed."""
    node, npm = require_tool("node", "npm", reason="the Node interop rows need Node.js and npm")
    folder = INSTALL_CACHE / f"node-{source_hash(node)}"
    if not folder.is_dir():
        install(npm, folder)
    return node, folder


@pytest.fixture
def node(request, node_client):
    """``node(check, transport, *flags) -> dict``: runs one check of the client against the
    server for that transport (started on first use) and returns its JSON result."""
    executable, folder = node_client

    def run(check: str, transport: str, *flags: str) -> dict:
        server = request.getfixturevalue("tls_server" if transport in TLS else "plain_server")
        cmd = [executable, str(folder / "client.js"), check, "--transport", transport, "--port", str(server.port),
               "--timeout", str(TIMEOUT - 10), *flags]
        if transport in TLS:
            cmd += ["--ca", request.getfixturevalue("certs")["ca"]]
        try:
            done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{' '.join(cmd)} did not finish within {TIMEOUT}s\n{text(exc.stdout)}{text(exc.stderr)}"
                        f"\n--- server output ---\n{server.output()[-4000:]}")
        if done.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} exited {done.returncode}\n{done.stdout}{done.stderr}"
                        f"\n--- server output ---\n{server.output()[-4000:]}")
        return json.loads(done.stdout.splitlines()[-1])

    return run


def check_protocol(result: dict, transport: str) -> None:
    assert result["version"] == VERSION[transport]
    assert result.get("alpn") == ALPN.get(transport)


# ---- http2 and https ----------------------------------------------------------------


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_node_sends_sequential_requests_on_one_connection(node, transport):
    """http2: five streams of one session; https: the keep-alive Agent reuses its socket."""
    result = node("reuse", transport, "--n", "5")
    check_protocol(result, transport)
    assert result["requests"] == 5
    assert result["connections"] == 1


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_node_holds_requests_open_at_once(node, transport):
    """http2: streams of one session; https: a socket each."""
    n = CONCURRENT[transport]
    result = node("concurrent", transport, "--n", str(n))
    check_protocol(result, transport)
    assert result["open_at_once"] == n
    assert result["connections"] == (n if transport == "https" else 1)


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_node_echoes_an_upload(node, transport):
    size = ECHO_BYTES[transport]
    result = node("echo", transport, "--size", str(size))
    check_protocol(result, transport)
    assert result["bytes"] == size


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_node_streams_a_download(node, transport):
    size = DOWNLOAD_BYTES[transport]
    result = node("download", transport, "--size", str(size))
    check_protocol(result, transport)
    assert result["bytes"] == size
    assert result["sha256"] == pattern_sha256(size)
    assert result["reads"] > 1


# ---- ws -----------------------------------------------------------------------------


@pytest.mark.parametrize("transport", WS_TRANSPORTS)
def test_ws_text_message_is_echoed(node, transport):
    assert node("ws-text", transport)["text"] == "hello ünïcødé ✓ 𝄞"


@pytest.mark.parametrize("transport", WS_TRANSPORTS)
def test_ws_one_mebibyte_binary_message_is_echoed(node, transport):
    """The client compares the bytes; its SHA-256 says what came back."""
    result = node("ws-binary", transport)
    assert result["bytes"] == MB


@pytest.mark.parametrize("transport", WS_TRANSPORTS)
def test_ws_ping_is_answered_by_its_pong(node, transport):
    assert node("ws-ping", transport)["pong"] == "ping from node"


@pytest.mark.parametrize("transport", WS_TRANSPORTS)
def test_ws_close_1000_is_answered_with_1000(node, transport):
    assert node("ws-close", transport)["close_code"] == 1000
