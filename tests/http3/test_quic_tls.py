"""QUIC's TLS 1.3 handshake (src/zig/quic/tls.zig) against an independent client: aioquic's
pure-Python TLS 1.3 state machine (``aioquic.tls.Context``), exchanging CRYPTO bytes per
encryption level with our `Handshake`. Both sides must derive the same traffic secret at
each level and direction and agree on ALPN and on each other's transport parameters.

Our side runs in a test-only shared library (src/zig/testlib/quic_tls_testlib.zig) that
this module builds with ``python -m ziglang build-lib -dynamic`` and loads with ctypes: the `_core`
extension carries no test hooks. The certificates are the interop suite's (trustme: a CA and
an RSA and an ECDSA certificate for localhost), which aioquic verifies.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.interop_support import certs  # noqa: F401  (the fixture)
from tests.support.tools import require_module, zig_root_with_engine

aioquic_tls = require_module("aioquic.tls")
aioquic_buffer = require_module("aioquic.buffer")

ROOT = Path(__file__).resolve().parents[2]
TESTLIB = ROOT / "src" / "zig" / "testlib" / "quic_tls_testlib.zig"

TRANSPORT_PARAMETERS = 0x39
CLIENT_PARAMS = bytes.fromhex("0104800075300404801000000f08") + b"cid-test"
SERVER_PARAMS = bytes.fromhex("0104800075300404800100000e0104") + b"server-side"

Epoch = aioquic_tls.Epoch
Direction = aioquic_tls.Direction
CipherSuite = aioquic_tls.CipherSuite
# Our levels (0 Initial, 1 Handshake, 2 1-RTT) and aioquic's epochs.
LEVELS = ((0, Epoch.INITIAL), (1, Epoch.HANDSHAKE), (2, Epoch.ONE_RTT))
RUNNING, DONE, FAILED = 0, 1, 2


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> ctypes.CDLL:
    out = tmp_path_factory.mktemp("quic_tls") / "libzq.so"
    cache = tmp_path_factory.mktemp("zig-cache")
    build = subprocess.run(
        [sys.executable, "-m", "ziglang", "build-lib", "-dynamic", "-lc", "--name", "zq",
         "--cache-dir", str(cache), f"-femit-bin={out}",
         *zig_root_with_engine(TESTLIB, "-OReleaseSafe")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    so = ctypes.CDLL(str(out))
    vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
    so.zq_context_new.restype = vp
    so.zq_context_new.argtypes = [cp, cp, cp, sz]
    so.zq_context_free.argtypes = [vp]
    so.zq_handshake_new.restype = vp
    so.zq_handshake_new.argtypes = [vp, cp, sz]
    so.zq_handshake_free.argtypes = [vp]
    so.zq_provide.argtypes = [vp, ctypes.c_int, cp, sz]
    for name in ("zq_take_output", "zq_peer_params", "zq_alpn", "zq_server_name"):
        getattr(so, name).restype = ctypes.c_ssize_t
    for name in ("zq_peer_params", "zq_alpn", "zq_server_name"):
        getattr(so, name).argtypes = [vp, cp, sz]
    so.zq_take_output.argtypes = [vp, ctypes.c_int, cp, sz]
    so.zq_secret.restype = ctypes.c_ssize_t
    so.zq_secret.argtypes = [vp, ctypes.c_int, ctypes.c_int, cp, sz]
    for name in ("zq_suite", "zq_state", "zq_holds_ssl"):
        getattr(so, name).argtypes = [vp]
    so.zq_error_code.restype = ctypes.c_uint64
    so.zq_error_code.argtypes = [vp]
    assert so.zq_load() == 0, "libssl.so.3 did not load"
    return so


class Server:
    """Our Handshake, through the test library."""

    def __init__(self, lib: ctypes.CDLL, certfile: str, keyfile: str):
        self.lib = lib
        err = ctypes.create_string_buffer(400)
        self.ctx = lib.zq_context_new(certfile.encode(), keyfile.encode(), err, len(err))
        assert self.ctx, err.value.decode()
        self.hs = lib.zq_handshake_new(self.ctx, SERVER_PARAMS, len(SERVER_PARAMS))
        assert self.hs

    def close(self) -> None:
        self.lib.zq_handshake_free(self.hs)
        self.lib.zq_context_free(self.ctx)

    def provide(self, level: int, data: bytes) -> None:
        self.lib.zq_provide(self.hs, level, data, len(data))

    def take(self, level: int) -> bytes:
        buf = ctypes.create_string_buffer(65536)
        n = self.lib.zq_take_output(self.hs, level, buf, len(buf))
        assert n >= 0
        return buf.raw[:n]

    def _bytes(self, fn, *args) -> bytes | None:
        buf = ctypes.create_string_buffer(4096)
        n = fn(self.hs, *args, buf, len(buf))
        return None if n < 0 else buf.raw[:n]

    def secret(self, level: int, direction: int) -> bytes | None:
        return self._bytes(self.lib.zq_secret, level, direction)

    @property
    def state(self) -> int:
        return self.lib.zq_state(self.hs)


def client_for(certs, *, suite=CipherSuite.AES_128_GCM_SHA256, alpn=("h3",), params=True):
    client = aioquic_tls.Context(
        is_client=True, alpn_protocols=list(alpn), cadata=Path(certs["ca"]).read_bytes(),
        cipher_suites=[suite], server_name="localhost")
    if params:
        client.handshake_extensions = [(TRANSPORT_PARAMETERS, CLIENT_PARAMS)]
    client.secrets = {}
    client.tickets = []

    def on_key(direction, epoch, cipher_suite, secret):
        client.secrets[(direction, epoch)] = (cipher_suite, secret)

    client.update_traffic_key_cb = on_key
    client.new_session_ticket_cb = client.tickets.append
    return client


def exchange(client, server: Server) -> None:
    """CRYPTO bytes both ways, level by level, until neither side has more (bounded)."""
    outputs = {epoch: aioquic_buffer.Buffer(capacity=65536) for _, epoch in LEVELS}
    client.handle_message(b"", outputs)
    for _ in range(10):
        moved = False
        for level, epoch in LEVELS:
            data = outputs[epoch].data
            if data:
                moved = True
                server.provide(level, data)
        if server.state == FAILED:
            return
        outputs = {epoch: aioquic_buffer.Buffer(capacity=65536) for _, epoch in LEVELS}
        for level, epoch in LEVELS:
            data = server.take(level)
            if data:
                moved = True
                client.handle_message(data, outputs)
        if not moved:
            return
    pytest.fail("the handshake did not settle in 10 rounds")


@pytest.mark.parametrize("key", ["rsa", "ecdsa"])
@pytest.mark.parametrize("suite", [CipherSuite.AES_128_GCM_SHA256, CipherSuite.AES_256_GCM_SHA384,
                                   CipherSuite.CHACHA20_POLY1305_SHA256], ids=lambda s: s.name)
def test_aioquic_client_and_our_handshake_agree(lib, certs, key, suite):
    """aioquic's client and our handshake agree for each cipher suite and key type.

    Slow (its first case, on a loaded machine): the module's `lib` fixture, counted there,
    builds the QUIC TLS test library with Zig in ReleaseSafe (under 30 s quiet)."""
    prefix = "" if key == "rsa" else "ecdsa_"
    server = Server(lib, certs[prefix + "certfile"], certs[prefix + "keyfile"])
    try:
        client = client_for(certs, suite=suite)
        exchange(client, server)
        assert server.state == DONE, hex(lib.zq_error_code(server.hs))
        assert client.state == aioquic_tls.State.CLIENT_POST_HANDSHAKE
        assert lib.zq_holds_ssl(server.hs) == 0  # OpenSSL's object is freed on completion
        assert lib.zq_suite(server.hs) == suite.value
        for level, epoch in LEVELS[1:]:
            mine = server.secret(level, 0), server.secret(level, 1)
            theirs = client.secrets[(Direction.ENCRYPT, epoch)], client.secrets[(Direction.DECRYPT, epoch)]
            assert theirs[0] == (suite, mine[0]), f"the client's secret at {epoch}"
            assert theirs[1] == (suite, mine[1]), f"the server's secret at {epoch}"
        assert server.secret(0, 0) is None
        assert client.alpn_negotiated == "h3"
        assert server._bytes(lib.zq_alpn) == b"h3"
        assert server._bytes(lib.zq_peer_params) == CLIENT_PARAMS
        assert dict(client.received_extensions)[TRANSPORT_PARAMETERS] == SERVER_PARAMS
        assert server._bytes(lib.zq_server_name) == b"localhost"
        assert len(client.tickets) == 1  # our NewSessionTicket, sent at 1-RTT
    finally:
        server.close()


@pytest.mark.parametrize(("client_args", "code"), [
    ({"alpn": ("h2", "http/1.1")}, 0x178),  # no_application_protocol
    ({"params": False}, 0x16D),  # missing_extension
], ids=["no-alpn-overlap", "no-transport-parameters"])
def test_refused_client_hellos_close_with_crypto_error(lib, certs, client_args, code):
    server = Server(lib, certs["certfile"], certs["keyfile"])
    try:
        exchange(client_for(certs, **client_args), server)
        assert server.state == FAILED
        assert lib.zq_error_code(server.hs) == code
        assert lib.zq_holds_ssl(server.hs) == 0
        assert server.take(0) == b"" and server.take(1) == b""
    finally:
        server.close()
