"""Interop with Go: the standard library's net/http and google.golang.org/grpc, driven as Go
programs drive them, against tests/apps/interop.py.

The client is one Go program, tests/interop/go, built once per machine into a temp folder
keyed by a hash of its sources and the Go version; each row runs one of its checks, which
prints one JSON line or fails with a message (shown here together with the server's log).
Rows:
  net/http over HTTP/1.1, h2c with prior knowledge and h2 over TLS (ALPN):
    several requests reusing one connection; 50 requests open at once (over HTTP/2, 50
    streams of one connection); a 4 MiB POST echoed back, compared by SHA-256; a 32 MiB
    download read incrementally and checked against the pattern bytes(i % 251)
  gRPC over h2c (insecure credentials) and TLS: a unary call, server streaming, and an
    error status
  net/http limited to TLS 1.2 (MaxVersion tls.VersionTLS12, Go's defaults otherwise), with
    an RSA and an ECDSA certificate: an ECDHE suite with AES-GCM or ChaCha20-Poly1305

Without `go` on PATH the file skips (fails with CI=true); a failing build fails. To see
the frames of a failing HTTP/2 row:
``GODEBUG=http2debug=2 pytest tests/interop/test_interop_go.py -k ...``.
"""

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.harness import ROOT, zigcorn_only
from tests.support.interop_support import (  # noqa: F401 (fixtures)
    CLIENT_CACHE, TLS12_AEAD_IANA, certs, ecdsa_tls_server, pattern_sha256, plain_server, text, tls_server,
)
from tests.support.tools import require_tool


GO_SOURCES = ROOT / "tests" / "interop" / "go"
BUILD_CACHE = CLIENT_CACHE
BUILD_TIMEOUT = 600  # the first build downloads the gRPC module and compiles it
TIMEOUT = 60
MB = 1024 * 1024

# HTTP/2 rows need a server that speaks it (uvicorn, the suite's reference, does not).
HTTP_TRANSPORTS = ["http1", pytest.param("h2c", marks=zigcorn_only), pytest.param("h2", marks=zigcorn_only)]
GRPC_TRANSPORTS = [pytest.param("h2c", marks=zigcorn_only), pytest.param("h2", marks=zigcorn_only)]
PROTO = {"http1": "HTTP/1.1", "h2c": "HTTP/2.0", "h2": "HTTP/2.0"}


def source_hash(go: str) -> str:
    """Hash of the Go program's sources, go.mod, go.sum and the Go version that builds it."""
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=TIMEOUT).stdout
    digest = hashlib.sha256(version.encode())
    for path in sorted([*GO_SOURCES.glob("*.go"), GO_SOURCES / "go.mod", GO_SOURCES / "go.sum"]):
        digest.update(f"\0{path.name}\0".encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def build(go: str, binary: Path) -> None:
    """Builds into a name of this process's own, then renames: no run sees half a binary."""
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f"{binary.name}.{os.getpid()}.partial")
    cmd = [go, "build", "-buildvcs=false", "-o", str(partial), "."]
    try:
        done = subprocess.run(cmd, cwd=GO_SOURCES, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"building the Go interop client took over {BUILD_TIMEOUT}s: {' '.join(cmd)}\n{text(exc.stderr)}")
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        pytest.fail(f"building the Go interop client failed (exit {done.returncode}): {' '.join(cmd)} in {GO_SOURCES}\n"
                    f"{done.stdout}{done.stderr}")
    os.replace(partial, binary)


@pytest.fixture(scope="session")
def go_client() -> Path:
    """The built Go program, from the cache when its sources have not changed."""
    go = require_tool("go", reason="the Go interop rows need a Go toolchain to build their client")
    binary = BUILD_CACHE / f"go-{source_hash(go)}" / "interop"
    if not binary.exists():
        build(go, binary)
    return binary


@pytest.fixture
def go(request, go_client):
    """``go(check, transport, *flags, tls_server="tls_server") -> dict``: runs one check of
    the Go program against the server for that transport (started on first use; over h2
    the fixture named by `tls_server`) and returns its JSON result."""

    def run(check: str, transport: str, *flags: str, tls_server: str = "tls_server") -> dict:
        server = request.getfixturevalue(tls_server if transport == "h2" else "plain_server")
        cmd = [str(go_client), check, "-addr", f"127.0.0.1:{server.port}", "-transport", transport,
               "-timeout", f"{TIMEOUT - 10}s", *flags]
        if transport == "h2":
            cmd += ["-ca", request.getfixturevalue("certs")["ca"]]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{' '.join(cmd)} did not finish within {TIMEOUT}s\n{text(exc.stdout)}{text(exc.stderr)}"
                        f"\n--- server output ---\n{server.output()[-4000:]}")
        if done.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} exited {done.returncode}\n{done.stdout}{done.stderr}"
                        f"\n--- server output ---\n{server.output()[-4000:]}")
        return json.loads(done.stdout.splitlines()[-1])

    return run


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_net_http_sends_sequential_requests_on_one_reused_connection(go, transport):
    result = go("reuse", transport, "-n", "5")
    assert result["proto"] == PROTO[transport]
    assert result["connections"] == 1
    assert result["dials"] == 1


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_net_http_holds_50_requests_open_at_once(go, transport):
    """Over HTTP/2 they are 50 concurrent streams of one connection."""
    result = go("concurrent", transport, "-n", "50")
    assert result["proto"] == PROTO[transport]
    assert result["open_at_once"] == 50
    assert result["connections"] == (50 if transport == "http1" else 1)


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_net_http_echoes_a_4_mib_upload(go, transport):
    result = go("echo", transport, "-size", str(4 * MB))
    assert result["proto"] == PROTO[transport]
    assert result["bytes"] == 4 * MB


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_net_http_streams_a_32_mib_download(go, transport):
    result = go("download", transport, "-size", str(32 * MB))
    assert result["proto"] == PROTO[transport]
    assert result["bytes"] == 32 * MB
    assert result["sha256"] == pattern_sha256(32 * MB)
    assert result["reads"] > 1


@pytest.mark.parametrize("transport", GRPC_TRANSPORTS)
def test_grpc_go_unary_call(go, transport):
    result = go("grpc-unary", transport)
    assert result["reply"] == "hello x"
    assert result["alpn"] == ("h2" if transport == "h2" else "")


@pytest.mark.parametrize("transport", GRPC_TRANSPORTS)
def test_grpc_go_server_streaming_call(go, transport):
    assert go("grpc-stream", transport, "-n", "5")["messages"] == ["0", "1", "2", "3", "4"]


@pytest.mark.parametrize("transport", GRPC_TRANSPORTS)
def test_grpc_go_error_status(go, transport):
    result = go("grpc-error", transport)
    assert (result["code"], result["message"]) == ("NotFound", "nothing here")


@pytest.mark.parametrize("key", ["rsa", "ecdsa"])
def test_net_http_limited_to_tls12_negotiates_an_aead_suite(go, key):
    """Go's default TLS 1.2 suites, the server's default --ssl-ciphers: an ECDHE suite with
    AES-GCM or ChaCha20-Poly1305 for the certificate's key (before the default became
    those suites, uvicorn's "TLSv1" gave TLS 1.2 clients CBC-SHA1 suites only)."""
    result = go("tls12", "h2", tls_server="tls_server" if key == "rsa" else "ecdsa_tls_server")
    assert result["version"] == "TLS 1.2"
    assert result["cipher"] in TLS12_AEAD_IANA[key], result
    assert (result["status"], result["body"]) == (200, "hello")
