"""What the HTTP/3 real-client tests share: a test CA and a localhost certificate, and the
server started with ``--http3`` on them (tests/apps/h3_app.py), with 1 or 4 workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.harness import Server
from tests.support.tools import require_module

WORKERS = [1, 4]


class H3Certs:
    """A CA and a certificate for localhost and 127.0.0.1, as files."""

    def __init__(self, root: Path) -> None:
        trustme = require_module("trustme")
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("localhost", "127.0.0.1")
        self.root = root
        self.certfile = str(root / "server.pem")
        self.keyfile = str(root / "server.key")
        self.cafile = str(root / "ca.pem")
        Path(self.certfile).write_bytes(b"".join(p.bytes() for p in cert.cert_chain_pems))
        Path(self.keyfile).write_bytes(cert.private_key_pem.bytes())
        Path(self.cafile).write_bytes(self.ca.cert_pem.bytes())

    def server_args(self) -> tuple[str, ...]:
        return ("--ssl-certfile", self.certfile, "--ssl-keyfile", self.keyfile)


@pytest.fixture(scope="session")
def h3_certs(tmp_path_factory) -> H3Certs:
    return H3Certs(tmp_path_factory.mktemp("h3certs"))


def start_h3_server(certs: H3Certs, workers: int, *extra: str) -> Server:
    """The server with --http3 on its TLS port (TCP and UDP share the number)."""
    server = Server("h3_app:app", *certs.server_args(), "--http3", "--workers", str(workers), *extra)
    server.url = f"https://127.0.0.1:{server.port}"
    return server.wait_ready(timeout=30)


@pytest.fixture(scope="module", params=WORKERS, ids=lambda n: f"workers{n}")
def h3_server(request, h3_certs):
    server = start_h3_server(h3_certs, request.param)
    server.workers = request.param
    yield server
    server.stop()
