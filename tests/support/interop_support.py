"""What the interop matrix's files share: where the clients are cached, the servers they
talk to (tests/apps/interop.py, plain, plain with --h2c-upgrade and over TLS, each started once
per test module),
the test CA, and the download pattern's digest."""

import hashlib
import tempfile
from pathlib import Path

import pytest

from tests.support.harness import Server

trustme = pytest.importorskip("trustme")

# Built clients, one folder per language and source hash (kept across runs on a machine).
CLIENT_CACHE = Path(tempfile.gettempdir()) / "zigcorn-interop"


def text(output: str | bytes | None) -> str:
    """A subprocess's captured output, which TimeoutExpired hands over as bytes."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def pattern_sha256(n: int) -> str:
    """SHA-256 of the app's /download body: bytes(i % 251 for i in range(n))."""
    return hashlib.sha256((bytes(range(251)) * (n // 251 + 1))[:n]).hexdigest()


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict:
    """A CA and a certificate for localhost it signed, as PEM files."""
    root = tmp_path_factory.mktemp("interopcerts")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    files = {"certfile": root / "server.pem", "keyfile": root / "server.key", "ca": root / "ca.pem"}
    files["certfile"].write_bytes(b"".join(p.bytes() for p in cert.cert_chain_pems))
    files["keyfile"].write_bytes(cert.private_key_pem.bytes())
    files["ca"].write_bytes(ca.cert_pem.bytes())
    return {name: str(path) for name, path in files.items()}


@pytest.fixture(scope="module")
def plain_server():
    server = Server("interop:app")
    try:
        yield server.wait_ready()
    finally:
        server.kill()


@pytest.fixture(scope="module")
def upgrade_server():
    """The plain server with --h2c-upgrade, for clients that reach HTTP/2 over plain http only
    by the HTTP/1.1 Upgrade (Java's HttpClient); zigcorn ignores that Upgrade by default."""
    server = Server("interop:app", "--h2c-upgrade")
    try:
        yield server.wait_ready()
    finally:
        server.kill()


@pytest.fixture(scope="module")
def tls_server(certs):
    server = Server("interop:app", "--ssl-certfile", certs["certfile"], "--ssl-keyfile", certs["keyfile"])
    try:
        yield server.wait_ready()
    finally:
        server.kill()
