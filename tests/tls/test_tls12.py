"""TLS 1.2 clients at their defaults, against the real server with RSA and ECDSA certificates.

The server's default --ssl-ciphers allows TLS 1.2 only ECDHE suites with AES-GCM or
ChaCha20-Poly1305 (Mozilla's "intermediate" profile without DHE). It used to be "TLSv1",
uvicorn's default before 0.48, which in OpenSSL's cipher-string grammar is not "TLS 1.0
and later" but "the suites defined by TLS 1.0": SHA-1 CBC suites only, none of TLS 1.2's
GCM, ChaCha20 or SHA-256/384 suites. Python's default client context leaves SHA-1 out
(``!SHA1``) and got a handshake_failure alert. An explicit --ssl-ciphers, "TLSv1" included, is passed to
OpenSSL as given (less anonymous and null suites).

Clients: Python's ssl default context and curl (``--tlsv1.2 --tls-max 1.2``) here; Go's
crypto/tls and Java's HttpClient in tests/interop. Without curl its rows skip, on CI
(CI=true) they fail.
"""

import re
import socket
import ssl
import subprocess

import pytest

from tests.support.harness import Server, zigcorn_only
from tests.support.tools import require_tool

trustme = pytest.importorskip("trustme")

KEYS = ["rsa", "ecdsa"]
# What the default allows under TLS 1.2, by the certificate's key, in OpenSSL's names.
AEAD = {
    key: {f"ECDHE-{auth}-AES128-GCM-SHA256", f"ECDHE-{auth}-AES256-GCM-SHA384", f"ECDHE-{auth}-CHACHA20-POLY1305"}
    for key, auth in (("rsa", "RSA"), ("ecdsa", "ECDSA"))
}
TIMEOUT = 10


class Pki:
    """A CA and two certificates for localhost it signed: an RSA one and an ECDSA (P-256) one."""

    def __init__(self, root):
        ca = trustme.CA()
        self.ca_file = str(root / "ca.pem")
        ca.cert_pem.write_to_path(self.ca_file)
        self.files = {}
        for key, key_type in (("rsa", trustme.KeyType.RSA), ("ecdsa", trustme.KeyType.ECDSA)):
            cert = ca.issue_cert("localhost", "127.0.0.1", key_type=key_type)
            certfile, keyfile = root / f"{key}.pem", root / f"{key}.key"
            certfile.write_bytes(b"".join(p.bytes() for p in cert.cert_chain_pems))
            cert.private_key_pem.write_to_path(str(keyfile))
            self.files[key] = (str(certfile), str(keyfile))

    def server_args(self, key: str, *extra: str) -> tuple[str, ...]:
        certfile, keyfile = self.files[key]
        return ("--ssl-certfile", certfile, "--ssl-keyfile", keyfile, "--no-access-log", *extra)

    def client(self, ciphers: str | None = None, tls13: bool = False) -> ssl.SSLContext:
        """Python's default client context, limited to TLS 1.2 (or to 1.3), `ciphers` if given."""
        ctx = ssl.create_default_context(cafile=self.ca_file)
        version = ssl.TLSVersion.TLSv1_3 if tls13 else ssl.TLSVersion.TLSv1_2
        ctx.minimum_version = min(ctx.minimum_version, version)
        ctx.maximum_version = version
        if ciphers is not None:
            ctx.set_ciphers(ciphers)
        return ctx


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("tls12"))


@pytest.fixture(scope="module", params=KEYS)
def https(request, pki):
    """The server with its default --ssl-ciphers and an RSA or an ECDSA certificate."""
    server = Server("hello:app", *pki.server_args(request.param))
    server.key = request.param
    try:
        yield server.wait_ready()
    finally:
        server.kill()


def fetch(port: int, ctx: ssl.SSLContext) -> tuple[str, str, bytes]:
    """Handshake, one GET: the protocol version, the cipher suite and the response's head line and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            return s.version(), s.cipher()[0], data


# A client offering AEAD suites only. (Python's own defaults leave SHA-1 CBC suites out up
# to 3.14 with OpenSSL 3.0-3.5, but not 3.15 with OpenSSL 3.6: a refusal is asked of a
# client that says what it offers.)
AEAD_ONLY = "ECDHE+AESGCM:ECDHE+CHACHA20"


def refused(port: int, ctx: ssl.SSLContext) -> bool:
    """Whether the server refuses the handshake (a TLS alert, or the connection closed)."""
    try:
        fetch(port, ctx)
    except (ssl.SSLError, ConnectionError):
        return True
    return False


def assert_hello(response: bytes) -> None:
    assert response.startswith(b"HTTP/1.1 200 ") and response.endswith(b"\r\n\r\nHello, world!"), response[:200]


def curl(port: int, ca_file: str) -> tuple[str, str, str]:
    """curl limited to TLS 1.2, its defaults otherwise: the version and suite it reports, the status."""
    curl = require_tool("curl", reason="the curl rows run curl against the server")
    url = f"https://localhost:{port}/"
    cmd = [curl, "-sS", "-v", "--tlsv1.2", "--tls-max", "1.2", "--cacert", ca_file,
           "--resolve", f"localhost:{port}:127.0.0.1", "-o", "/dev/null", "-w", "%{http_code}", url]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}\n{done.stderr}"
    # "* SSL connection using TLSv1.2 / ECDHE-RSA-AES128-GCM-SHA256" (curl 8 adds "/ group / sigalg")
    used = re.search(r"SSL connection using (TLSv[\d.]+) / ([\w-]+)", done.stderr)
    assert used, done.stderr
    return used[1], used[2], done.stdout


# ---- the default --ssl-ciphers ------------------------------------------------------------


def test_python_default_client_limited_to_tls12_gets_an_aead_suite(https, pki):
    version, cipher, response = fetch(https.port, pki.client())
    assert version == "TLSv1.2"
    assert cipher in AEAD[https.key]
    assert_hello(response)


def test_curl_limited_to_tls12_gets_an_aead_suite(https, pki):
    version, cipher, status = curl(https.port, pki.ca_file)
    assert version == "TLSv1.2"
    assert cipher in AEAD[https.key]
    assert status == "200"


def test_tls13_is_unchanged(https, pki):
    version, cipher, response = fetch(https.port, pki.client(tls13=True))
    assert version == "TLSv1.3"
    assert cipher in {"TLS_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256"}
    assert_hello(response)


@zigcorn_only
def test_default_accepts_no_cbc_suite_only_ecdhe_aead(https, pki):
    """Every TLS 1.2 suite this OpenSSL knows, offered alone: only the ECDHE AES-GCM and
    ChaCha20-Poly1305 suites for the certificate's key are accepted; no CBC suite (SHA-1 or
    SHA-2), no DHE, no static RSA, no anonymous or PSK suite."""
    offered = pki.client("ALL:COMPLEMENTOFALL:@SECLEVEL=0")
    names = sorted({c["name"] for c in offered.get_ciphers() if c["protocol"] != "TLSv1.3"})
    assert len(names) > 30, names
    accepted = set()
    for name in names:
        try:
            ctx = pki.client(f"{name}:@SECLEVEL=0")
        except ssl.SSLError:  # not usable by this client on its own
            continue
        if not refused(https.port, ctx):
            accepted.add(name)
    assert accepted == AEAD[https.key]
    auth = "RSA" if https.key == "rsa" else "ECDSA"
    assert refused(https.port, pki.client(f"ECDHE-{auth}-AES128-SHA"))


# ---- an explicit --ssl-ciphers --------------------------------------------------------------


def test_explicit_ciphers_are_honoured(start_server, pki):
    chacha = start_server("hello:app", *pki.server_args("rsa", "--ssl-ciphers", "ECDHE-RSA-CHACHA20-POLY1305"))
    version, cipher, response = fetch(chacha.port, pki.client())
    assert (version, cipher) == ("TLSv1.2", "ECDHE-RSA-CHACHA20-POLY1305")
    assert_hello(response)
    assert refused(chacha.port, pki.client("ECDHE-RSA-AES128-GCM-SHA256"))
    # A CBC suite, when asked for by name, is served to a client that offers it.
    cbc = start_server("hello:app", *pki.server_args("rsa", "--ssl-ciphers", "ECDHE-RSA-AES128-SHA"))
    version, cipher, response = fetch(cbc.port, pki.client("ECDHE-RSA-AES128-SHA"))
    assert (version, cipher) == ("TLSv1.2", "ECDHE-RSA-AES128-SHA")
    assert_hello(response)
    assert refused(cbc.port, pki.client(AEAD_ONLY))


@pytest.mark.parametrize("key", KEYS)
def test_explicit_tlsv1_gives_what_openssl_gives_for_it_as_under_uvicorn(start_server, pki, key):
    """uvicorn's old default, asked for by name: OpenSSL's TLS 1.0 suites (SHA-1 CBC) under
    TLS 1.2, which curl's defaults include; an AEAD-only client is refused; TLS 1.3 unaffected."""
    server = start_server("hello:app", *pki.server_args(key, "--ssl-ciphers", "TLSv1"))
    auth = "RSA" if key == "rsa" else "ECDSA"
    version, cipher, status = curl(server.port, pki.ca_file)
    assert (version, cipher, status) == ("TLSv1.2", f"ECDHE-{auth}-AES256-SHA", "200")
    version, cipher, response = fetch(server.port, pki.client(f"ECDHE-{auth}-AES128-SHA"))
    assert (version, cipher) == ("TLSv1.2", f"ECDHE-{auth}-AES128-SHA")
    assert_hello(response)
    assert refused(server.port, pki.client(AEAD_ONLY))
    assert fetch(server.port, pki.client(tls13=True))[0] == "TLSv1.3"
