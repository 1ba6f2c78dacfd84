"""What the interop matrix's files share: where the clients are cached, the servers they
talk to (tests/apps/interop.py, plain, plain with --h2c-upgrade, and over TLS with an RSA or
an ECDSA certificate, each started once per test module), the test CA and the download
pattern's digest (a missing client tool: tests/support/tools.py)."""

import hashlib
import tempfile
from pathlib import Path

import pytest

from tests.support.harness import Server
from tests.support.tools import require_module

trustme = require_module("trustme")

# The TLS 1.2 suites the server's default --ssl-ciphers allows, by the certificate's key
# type, by their IANA names (which Go and Java use): ECDHE with AES-GCM or ChaCha20-Poly1305.
TLS12_AEAD_IANA = {
    key: {f"TLS_ECDHE_{auth}_WITH_{cipher}" for cipher in ("AES_128_GCM_SHA256", "AES_256_GCM_SHA384",
                                                          "CHACHA20_POLY1305_SHA256")}
    for key, auth in (("rsa", "RSA"), ("ecdsa", "ECDSA"))
}

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
    """A CA and two certificates for localhost it signed, as PEM files: an RSA one
    (certfile, keyfile) and an ECDSA P-256 one (ecdsa_certfile, ecdsa_keyfile)."""
    root = tmp_path_factory.mktemp("interopcerts")
    ca = trustme.CA()
    files = {"ca": root / "ca.pem"}
    files["ca"].write_bytes(ca.cert_pem.bytes())
    for prefix, key_type in (("", trustme.KeyType.RSA), ("ecdsa_", trustme.KeyType.ECDSA)):
        cert = ca.issue_cert("localhost", "127.0.0.1", key_type=key_type)
        files[prefix + "certfile"] = root / f"{prefix}server.pem"
        files[prefix + "keyfile"] = root / f"{prefix}server.key"
        files[prefix + "certfile"].write_bytes(b"".join(p.bytes() for p in cert.cert_chain_pems))
        files[prefix + "keyfile"].write_bytes(cert.private_key_pem.bytes())
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


@pytest.fixture(scope="module")
def ecdsa_tls_server(certs):
    """The same app over TLS with the ECDSA certificate (ECDHE-ECDSA suites under TLS 1.2)."""
    server = Server("interop:app", "--ssl-certfile", certs["ecdsa_certfile"], "--ssl-keyfile", certs["ecdsa_keyfile"])
    try:
        yield server.wait_ready()
    finally:
        server.kill()
