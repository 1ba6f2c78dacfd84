"""Interop with Java: java.net.http.HttpClient and its WebSocket client, driven as Java
programs drive them, against tests/apps/interop.py.

The client is one program, tests/interop/java/Interop.java, compiled once per machine
(javac) into a temp folder keyed by a hash of its source and the JDK version. Each row runs
one of its checks, which answers with one JSON line: its result, or a message (shown here
together with the server's log). The checks run in one JVM (the program's ``serve`` mode),
each with clients of its own, so that the JVM's warm-up is paid once rather than per row.
Rows:
  HttpClient set to HTTP/2, over plain http (h2c) and over TLS (h2 by ALPN); every response
    must come over HTTP/2 (response.version() and the app's x-http-version). Over plain http
    HttpClient reaches HTTP/2 only by the Upgrade, so those rows run against a server with
    --h2c-upgrade; without it (zigcorn's default) HttpClient falls back to HTTP/1.1:
    - five requests on a fresh client, on one connection. Over plain http the first of them
      carries ``Upgrade: h2c`` (RFC 7540 section 3.2): it must be answered 101 Switching
      Protocols and its own response come over HTTP/2 on the upgraded connection.
    - by default the Upgrade is ignored: the same requests are answered over HTTP/1.1
    - 50 GET /download?n=1MiB sent at once with sendAsync, every response head in before any
      body is read (50 streams open at once on one connection), then each body checked
    - a 4 MiB POST echoed back, compared by SHA-256
    - a 32 MiB download read through BodyHandlers.ofInputStream and checked a read at a time
      against the pattern bytes(i % 251)
  the WebSocket client over ws:// and wss://: a text message echoed, a 1 MiB binary message
    echoed, a ping answered by its pong, a close with 1000 answered with 1000
  HttpClient whose SSLParameters allow TLSv1.2 only (the JDK's defaults otherwise), with an
    RSA and an ECDSA certificate: an ECDHE suite with AES-GCM or ChaCha20-Poly1305

Without `java` and `javac` on PATH the file skips (fails with CI=true); a failing build
fails. To see the frames of a failing HTTP/2 row, run the check by hand from the built
folder with ``java -Djdk.httpclient.HttpClient.log=frames,headers -cp DIR Interop CHECK ...``.
"""

import hashlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from tests.support.harness import ROOT, zigcorn_only
from tests.support.interop_support import (  # noqa: F401 (fixtures)
    CLIENT_CACHE, TLS12_AEAD_IANA, certs, ecdsa_tls_server, pattern_sha256, plain_server, text, tls_server,
    upgrade_server,
)
from tests.support.tools import require_tool


JAVA_SOURCES = ROOT / "tests" / "interop" / "java"
BUILD_CACHE = CLIENT_CACHE
BUILD_TIMEOUT = 120
TIMEOUT = 60
MB = 1024 * 1024

# HTTP/2 rows need a server that speaks it (uvicorn, the suite's reference, does not).
HTTP_TRANSPORTS = [pytest.param("h2c", marks=zigcorn_only), pytest.param("h2", marks=zigcorn_only)]
WS_TRANSPORTS = ["ws", "wss"]
TLS = {"h2", "wss"}
# The JIT's first tier and the serial collector: a JVM that runs a handful of short checks
# on a small machine is ready sooner. Neither changes what the clients do.
JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


def source_hash(javac: str) -> str:
    """Hash of the program's sources and the JDK that compiles it."""
    version = subprocess.run([javac, "-version"], capture_output=True, text=True, timeout=TIMEOUT)
    digest = hashlib.sha256((version.stdout + version.stderr).encode())
    for path in sorted(JAVA_SOURCES.glob("*.java")):
        digest.update(f"\0{path.name}\0".encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def build(javac: str, folder: Path) -> None:
    """Compiles into a folder of this process's own, then renames it into place: no run sees
    half a build."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = folder.with_name(f"{folder.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    cmd = [javac, "-Xlint:all", "-Werror", "-d", str(partial), *sorted(str(p) for p in JAVA_SOURCES.glob("*.java"))]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(partial, ignore_errors=True)
        pytest.fail(f"building the Java interop client took over {BUILD_TIMEOUT}s: {' '.join(cmd)}\n"
                    f"{text(exc.stdout)}{text(exc.stderr)}")
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        pytest.fail(f"building the Java interop client failed (exit {done.returncode}): {' '.join(cmd)}\n"
                    f"{done.stdout}{done.stderr}")
    try:
        os.rename(partial, folder)
    except OSError:
        # Another run put the same build in place first.
        shutil.rmtree(partial, ignore_errors=True)
        if not folder.is_dir():
            raise


@pytest.fixture(scope="session")
def java_client() -> tuple[str, Path]:
    """`java` and the folder of the compiled program, from the cache when nothing changed."""
    java, javac = require_tool("java", "javac", reason="the Java interop rows need a JDK (17 or later)")
    folder = BUILD_CACHE / f"java-{source_hash(javac)}"
    if not folder.is_dir():
        build(javac, folder)
    return java, folder


class Worker:
    """The program in ``serve`` mode: one JVM runs the checks one after another, each asked
    for by a line on its standard input and answered by a JSON line. Each check builds its
    own clients as a run of its own would; the JVM's start and warm-up (a second or two
    each time) are paid once. A check with no answer in TIMEOUT seconds fails, and so does
    the process: the next check starts another."""

    def __init__(self, cmd: list[str]):
        self.cmd = cmd
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, encoding="utf-8")
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.answers), daemon=True).start()

    @staticmethod
    def _read(proc: subprocess.Popen, answers: queue.Queue) -> None:
        for line in proc.stdout:
            answers.put(line)
        answers.put(None)

    def ask(self, args: list[str]) -> tuple[dict | None, str]:
        """The answer to one check (None if the process gave none) and what it wrote to stderr meanwhile."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        # The process writes through the same open file: pread leaves the offset alone.
        fd = self.log.fileno()
        logged = os.fstat(fd).st_size
        try:
            self.proc.stdin.write(" ".join(args) + "\n")
            self.proc.stdin.flush()
            line = self.answers.get(timeout=TIMEOUT)
        except (BrokenPipeError, queue.Empty):
            line = None
        if line is None:
            self.stop()
        stderr = os.pread(fd, os.fstat(fd).st_size - logged, logged).decode(errors="replace")
        return (json.loads(line) if line else None), stderr

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def worker(java_client):
    executable, folder = java_client
    w = Worker([executable, *JVM_FLAGS, "-cp", str(folder), "Interop", "serve"])
    try:
        yield w
    finally:
        w.stop()


@pytest.fixture
def java(request, worker):
    """``java(check, transport, *flags) -> dict``: runs one check of the program against the
    server for that transport (started on first use; h2c: the one with --h2c-upgrade; or the
    fixture named by `server_fixture`) and returns its result (with `expect_failure`, the
    failed answer)."""

    def run(check: str, transport: str, *flags: str, server_fixture: str | None = None,
            expect_failure: bool = False) -> dict:
        fixture = "tls_server" if transport in TLS else "upgrade_server" if transport == "h2c" else "plain_server"
        server = request.getfixturevalue(server_fixture or fixture)
        args = [check, "--transport", transport, "--port", str(server.port), "--timeout", str(TIMEOUT - 10), *flags]
        if transport in TLS:
            args += ["--ca", request.getfixturevalue("certs")["ca"]]
        answer, stderr = worker.ask(args)
        shown = f"{' '.join(worker.cmd)} <<< {' '.join(args)}"
        if answer is None:
            pytest.fail(f"{shown}: no answer within {TIMEOUT}s (the process: {worker.proc.returncode})\n{stderr}"
                        f"\n--- server output ---\n{server.output()[-4000:]}")
        if expect_failure:
            assert not answer["ok"], answer
            return answer
        if not answer.pop("ok"):
            pytest.fail(f"{shown}\n{check} over {transport}: {answer['error']}\n{stderr}"
                        f"\n--- server output ---\n{server.output()[-4000:]}")
        return answer

    return run


# ---- HttpClient over HTTP/2 -------------------------------------------------------------


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_http_client_sends_sequential_requests_on_one_http2_connection(java, transport):
    """Over h2c the first request is the Upgrade: its response already comes over HTTP/2."""
    result = java("reuse", transport, "--n", "5")
    assert result["version"] == "HTTP_2"
    assert result["requests"] == 5
    assert result["connections"] == 1


@zigcorn_only
def test_http_client_falls_back_to_http11_when_the_upgrade_is_ignored(java):
    """Without --h2c-upgrade (the default) the Upgrade is ignored: HttpClient's request is
    answered 200 over HTTP/1.1, which the check (wanting HTTP/2) reports as its failure."""
    answer = java("reuse", "h2c", "--n", "2", server_fixture="plain_server", expect_failure=True)
    assert "came over HTTP_1_1, want HTTP_2" in answer["error"], answer


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_http_client_holds_50_streams_open_at_once(java, transport):
    """50 x 1 MiB is more than HttpClient's 32 MiB connection window, which it reopens only
    as bodies are read: every response head must come all the same (HEADERS are not
    flow-controlled), and once the bodies are read the server must go on sending."""
    result = java("concurrent", transport, "--n", "50", "--size", str(MB))
    assert result["version"] == "HTTP_2"
    assert result["open_at_once"] == 50
    assert result["connections"] == 1


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_http_client_echoes_a_4_mib_upload(java, transport):
    result = java("echo", transport, "--size", str(4 * MB))
    assert result["version"] == "HTTP_2"
    assert result["bytes"] == 4 * MB


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_http_client_streams_a_32_mib_download(java, transport):
    """Over h2c, when stream 1's frames came right behind the 101, HttpClient lost the
    32 KiB it read after its first 16 KiB while it switched to HTTP/2, in 2-4% of runs
    under load (byte 16167: 223, want 103, the first DATA frame ending with bytes of the
    third; or a frame header read from DATA bytes), while the bytes on the wire were
    right. The server now holds stream 1 until the client's preface."""
    result = java("download", transport, "--size", str(32 * MB))
    assert result["version"] == "HTTP_2"
    assert result["bytes"] == 32 * MB
    assert result["sha256"] == pattern_sha256(32 * MB)
    assert result["reads"] > 1


# ---- the WebSocket client -----------------------------------------------------------------


@pytest.mark.parametrize("transport", WS_TRANSPORTS)
def test_websocket_text_message_is_echoed(java, transport):
    assert java("ws-text", transport)["text"] == "hello ünïcødé ✓ 𝄞"


@pytest.mark.parametrize("transport", WS_TRANSPORTS)
def test_websocket_one_mebibyte_binary_message_is_echoed(java, transport):
    """The program compares the bytes; its SHA-256 says what came back."""
    assert java("ws-binary", transport)["bytes"] == MB


@pytest.mark.parametrize("transport", WS_TRANSPORTS)
def test_websocket_ping_is_answered_by_its_pong(java, transport):
    assert java("ws-ping", transport)["pong"] == "ping from java"


@pytest.mark.parametrize("transport", WS_TRANSPORTS)
def test_websocket_close_1000_is_answered_with_1000(java, transport):
    assert java("ws-close", transport)["close_code"] == 1000


# ---- TLS 1.2 --------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["rsa", "ecdsa"])
def test_http_client_limited_to_tls12_negotiates_an_aead_suite(java, key):
    """The JDK's default TLS 1.2 suites, the server's default --ssl-ciphers: an ECDHE suite
    with AES-GCM or ChaCha20-Poly1305 for the certificate's key."""
    result = java("tls12", "h2", server_fixture="tls_server" if key == "rsa" else "ecdsa_tls_server")
    assert result["protocol"] == "TLSv1.2"
    assert result["cipher"] in TLS12_AEAD_IANA[key], result
    assert (result["status"], result["body"]) == (200, "hello")
