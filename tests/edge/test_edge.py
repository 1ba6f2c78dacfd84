"""At the edge: TCP socket options read back from the server's own sockets, HSTS on HTTPS
only, --ssl-min-version, --auto-raise-nofile, per-address limits, PROXY protocol (plain and
before TLS) and --timeout-connection."""

import ctypes
import os
import resource
import shutil
import socket
import ssl
import subprocess
import time

import httpx
import pytest

from tests.support.harness import Server, wait_for, zigcorn_only
from tests.tls.test_tls import certs, tls_server  # noqa: F401 (the fixture)

pytestmark = zigcorn_only

SYS_pidfd_getfd = 438  # the same number on x86_64 and aarch64


def socket_inode(pid: int, local_port: int, remote_port: int | None) -> str:
    """The inode of the server's TCP socket on `local_port` (the listener when remote_port is None)."""
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                local, remote, state, inode = parts[1], parts[2], parts[3], parts[9]
                if int(local.rsplit(":", 1)[1], 16) != local_port:
                    continue
                if remote_port is None and state == "0A":  # LISTEN
                    return inode
                if remote_port is not None and int(remote.rsplit(":", 1)[1], 16) == remote_port:
                    return inode
    raise AssertionError("no such socket")


def server_socket(pid: int, local_port: int, remote_port: int | None = None) -> socket.socket:
    """A duplicate of the server process's own socket (pidfd_getfd), to read its options."""
    inode = socket_inode(pid, local_port, remote_port)
    fd_dir = f"/proc/{pid}/fd"
    target = next(int(fd) for fd in os.listdir(fd_dir) if os.readlink(f"{fd_dir}/{fd}") == f"socket:[{inode}]")
    pidfd = os.pidfd_open(pid)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        dup = libc.syscall(SYS_pidfd_getfd, pidfd, target, 0)
        if dup < 0:
            pytest.skip(f"pidfd_getfd refused: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(pidfd)
    return socket.socket(fileno=dup)


def options(sock: socket.socket) -> dict[str, int]:
    tcp = socket.IPPROTO_TCP
    return {
        "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
        "idle": sock.getsockopt(tcp, socket.TCP_KEEPIDLE),
        "interval": sock.getsockopt(tcp, socket.TCP_KEEPINTVL),
        "count": sock.getsockopt(tcp, socket.TCP_KEEPCNT),
        "user_timeout": sock.getsockopt(tcp, socket.TCP_USER_TIMEOUT),
        "nodelay": sock.getsockopt(tcp, socket.TCP_NODELAY),
    }


def connected(server: Server) -> tuple[socket.socket, socket.socket]:
    """A client connection that has been served once, and the server's end of it."""
    client = socket.create_connection(("127.0.0.1", server.port))
    client.sendall(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
    assert client.recv(4096).startswith(b"HTTP/1.1 200")
    return client, server_socket(server.proc.pid, server.port, client.getsockname()[1])


def test_keepalive_and_user_timeout_reach_every_accepted_connection(start_server):
    server = start_server("basic:app", "--tcp-keepalive-idle", "37", "--tcp-keepalive-interval", "7",
                          "--tcp-keepalive-count", "4", "--tcp-user-timeout", "12345", "--no-access-log")
    for _ in range(2):  # not only the first
        client, theirs = connected(server)
        with client, theirs:
            assert options(theirs) == {"keepalive": 1, "idle": 37, "interval": 7, "count": 4,
                                       "user_timeout": 12345, "nodelay": 1}
    if shutil.which("ss"):
        client = socket.create_connection(("127.0.0.1", server.port))
        with client:
            out = subprocess.run(["ss", "-tno", "state", "established", f"( sport = :{server.port} )"],
                                 capture_output=True, text=True).stdout
            assert "keepalive" in out, out


def test_defaults_leave_the_kernels_options_and_nodelay_on(start_server):
    server = start_server("basic:app", "--no-access-log")
    client, theirs = connected(server)
    with client, theirs:
        got = options(theirs)
        assert got["keepalive"] == 0 and got["user_timeout"] == 0 and got["nodelay"] == 1


def test_nodelay_can_be_turned_off(start_server):
    server = start_server("basic:app", "--no-tcp-nodelay", "--no-access-log")
    client, theirs = connected(server)
    with client, theirs:
        assert options(theirs)["nodelay"] == 0


def test_fastopen_is_set_on_the_listener(start_server):
    server = start_server("basic:app", "--tcp-fastopen", "64", "--no-access-log")
    with server_socket(server.proc.pid, server.port) as listener:
        assert listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_FASTOPEN) == 64
    assert httpx.get(server.url + "/hello").status_code == 200


def test_unix_sockets_take_no_tcp_options(start_server, tmp_path):
    path = str(tmp_path / "s.sock")
    server = start_server("basic:app", "--uds", path, "--tcp-keepalive-idle", "30", "--no-access-log", wait=False)
    assert wait_for(lambda: os.path.exists(path), 20)
    transport = httpx.HTTPTransport(uds=path)
    assert wait_for(lambda: _get_uds(transport) == 200, 20)


def _get_uds(transport) -> int:
    try:
        return httpx.Client(transport=transport).get("http://x/hello").status_code
    except httpx.HTTPError:
        return 0


def test_hsts_on_https_only_and_never_doubled(start_server, certs):  # noqa: F811
    server = tls_server("basic:app", *certs.server_args("--hsts", "31536000", "--hsts-include-subdomains",
                                                       "--hsts-preload", "--no-access-log"))
    try:
        server.wait_ready()
        ctx = certs.client_context()
        for http2 in (False, True):
            with httpx.Client(verify=ctx, http2=http2) as client:
                r = client.get(server.url + "/hello")
                assert r.headers.get_list("strict-transport-security") == [
                    "max-age=31536000; includeSubDomains; preload"]
    finally:
        server.kill()
    plain = start_server("basic:app", "--hsts", "600", "--no-access-log")
    assert "strict-transport-security" not in httpx.get(plain.url + "/hello").headers


def test_the_apps_own_hsts_stands(certs):  # noqa: F811
    server = tls_server("basic:app", *certs.server_args("--hsts", "600", "--no-access-log"))
    try:
        server.wait_ready()
        r = httpx.get(server.url + "/set-header", verify=certs.client_context(),
                      params={"name": "Strict-Transport-Security", "value": "max-age=5"})
        assert r.headers.get_list("strict-transport-security") == ["max-age=5"]
    finally:
        server.kill()


def test_ssl_min_version_refuses_older_clients(certs):  # noqa: F811
    server = tls_server("basic:app", *certs.server_args("--ssl-min-version", "TLSv1.3", "--no-access-log"))
    try:
        server.wait_ready()
        old = certs.client_context(maximum_version=ssl.TLSVersion.TLSv1_2)
        with pytest.raises(httpx.ConnectError):
            httpx.get(server.url + "/hello", verify=old)
        new = certs.client_context()
        with httpx.Client(verify=new) as client:
            assert client.get(server.url + "/hello").status_code == 200
    finally:
        server.kill()


def test_auto_raise_nofile_lifts_the_soft_limit_to_the_hard_one(start_server):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 1024:
        pytest.skip(f"hard limit {hard}: nothing to raise to")

    def lower():
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

    server = start_server("basic:app", "--auto-raise-nofile", preexec=lower)
    with open(f"/proc/{server.proc.pid}/limits") as f:
        line = next(line for line in f if line.startswith("Max open files"))
    assert line.split()[3] == str(hard), line
    assert f"raised from 1024 to {hard}" in server.output()
    plain = start_server("basic:app", preexec=lower)
    with open(f"/proc/{plain.proc.pid}/limits") as f:
        assert next(line for line in f if line.startswith("Max open files")).split()[3] == "1024"


def _served(sock: socket.socket) -> bool:
    """Whether the server answers a request on this connection (False: closed at accept)."""
    try:
        sock.sendall(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        return sock.recv(4096).startswith(b"HTTP/1.1 200")
    except (ConnectionResetError, BrokenPipeError):
        return False


def test_connections_per_ip_are_capped_at_accept(start_server):
    server = start_server("basic:app", "--limit-connections-per-ip", "3", "--metrics-path", "/metrics",
                          "--no-access-log")
    address = ("127.0.0.1", server.port)
    held: list[socket.socket] = []

    def a_place_is_free() -> bool:
        s = socket.create_connection(address)
        if _served(s):
            held.append(s)
            return True
        s.close()
        return False

    # The harness's readiness probe counts until the server reads its close.
    for _ in range(3):
        assert wait_for(a_place_is_free, 5)
    with socket.create_connection(address) as over:
        assert not _served(over)
    # Another address has its own count (all of 127/8 is loopback).
    with socket.create_connection(address, source_address=("127.0.0.2", 0)) as other:
        assert _served(other)
    # A closed connection frees its place once the server reads its end.
    held.pop().close()
    assert wait_for(a_place_is_free, 5)
    with socket.create_connection(address) as over:
        assert not _served(over)
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.3")) as client:
        text = client.get(server.url + "/metrics").text
    rejected = float(text.split('zigcorn_connections_rejected_total{cause="limit_per_ip"} ')[1].split()[0])
    assert rejected >= 2
    assert 'zigcorn_connections_rejected_total{cause="limit_connections"} 0' in text
    for s in held:
        s.close()
    assert "over --limit-connections-per-ip" in server.output()


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2c"])
def test_request_rate_is_limited_per_client_with_429_from_the_engine(start_server, http2):
    server = start_server("basic:app", "--limit-request-rate", "1", "--limit-request-burst", "5",
                          "--metrics-path", "/metrics", "--forwarded-allow-ips", "127.0.0.1", "--no-access-log")
    with httpx.Client(base_url=server.url, http1=not http2, http2=http2) as client:
        statuses = [client.get("/hello").status_code for _ in range(8)]
        # The burst, then 429s (one token a second may refill one on a slow machine).
        assert statuses[:5] == [200] * 5 and statuses.count(429) >= 2, statuses
        r = client.get("/hello")
        if r.status_code == 429:
            assert r.headers["retry-after"] == "1" and r.text == "Too Many Requests\n"
        # Each HTTP/2 stream, each pipelined HTTP/1.1 request counts: other clients named by the
        # trusted proxy (this test's own address) have their own buckets.
        for i in range(3):
            assert client.get("/hello", headers={"x-forwarded-for": f"10.0.0.{i + 1}"}).status_code == 200
        time.sleep(1.1)
        assert client.get("/hello").status_code == 200
        # The app never saw the refused ones: the scrape (itself limited by now) comes from a second address.
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as other:
        text = other.get(server.url + "/metrics").text
    limited = float(text.split("\nzigcorn_requests_rate_limited_total ")[1].split()[0])
    assert limited >= 3
    assert 'status_class="4xx"' in text


def test_an_untrusted_peer_cannot_escape_the_limit_with_forwarded_headers(start_server):
    server = start_server("basic:app", "--limit-request-rate", "1", "--limit-request-burst", "2",
                          "--forwarded-allow-ips", "192.0.2.1", "--no-access-log")
    with httpx.Client(base_url=server.url) as client:
        statuses = [client.get("/hello", headers={"x-forwarded-for": f"10.1.1.{i}"}).status_code for i in range(6)]
    assert statuses.count(429) >= 3, statuses


def test_rate_limit_needs_both_or_neither(start_server):
    server = start_server("basic:app", "--limit-request-burst", "5", wait=False)
    assert server.proc.wait(20) != 0
    assert "limit_request_burst needs limit_request_rate" in server.output()


def _resumed(port: int, ctx: ssl.SSLContext, session) -> tuple[bool, object]:
    """One TLS connection offering `session`; whether it resumed, and the session to offer next."""
    with socket.create_connection(("127.0.0.1", port)) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as tls:
            tls.sendall(b"GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            data = b""
            while chunk := tls.recv(65536):  # reading lets TLS 1.3's tickets arrive
                data += chunk
            assert data.startswith(b"HTTP/1.1 200")
            return tls.session_reused, tls.session


@pytest.mark.parametrize("version", ["TLSv1_2", "TLSv1_3"])
def test_session_tickets_resume_on_every_worker(start_server, certs, version):  # noqa: F811
    server = start_server("basic:app", *certs.server_args("--workers", "2", "--no-access-log"))
    ctx = certs.client_context(maximum_version=getattr(ssl.TLSVersion, version))
    reused, session = _resumed(server.port, ctx, None)
    assert not reused
    results = []
    for _ in range(12):  # new connections land on either worker
        reused, session = _resumed(server.port, ctx, session)
        results.append(reused)
    assert all(results), results


def test_no_session_tickets_means_no_resumption_unless_a_cache(start_server, certs):  # noqa: F811
    server = start_server("basic:app", *certs.server_args("--no-ssl-session-tickets", "--no-access-log"))
    ctx = certs.client_context(maximum_version=ssl.TLSVersion.TLSv1_2)
    _, session = _resumed(server.port, ctx, None)
    assert _resumed(server.port, ctx, session)[0] is False
    cached = start_server("basic:app", *certs.server_args("--no-ssl-session-tickets", "--ssl-session-cache", "64",
                                                          "--no-access-log"))
    _, session = _resumed(cached.port, ctx, None)
    assert _resumed(cached.port, ctx, session)[0] is True


def test_a_revoked_client_certificate_is_refused(start_server, certs, tmp_path):  # noqa: F811
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    revoked = certs.ca.issue_cert("revoked@example.org")
    ca_key = serialization.load_pem_private_key(certs.ca.private_key_pem.bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(certs.ca.cert_pem.bytes())
    leaf = x509.load_pem_x509_certificate(revoked.cert_chain_pems[0].bytes())
    now = datetime.datetime.now(datetime.timezone.utc)
    crl = (x509.CertificateRevocationListBuilder().issuer_name(ca_cert.subject)
           .last_update(now - datetime.timedelta(days=1)).next_update(now + datetime.timedelta(days=1))
           .add_revoked_certificate(x509.RevokedCertificateBuilder().serial_number(leaf.serial_number)
                                    .revocation_date(now - datetime.timedelta(hours=1)).build())
           .sign(ca_key, hashes.SHA256()))
    crl_file = tmp_path / "ca.crl.pem"
    crl_file.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    server = start_server("basic:app", *certs.server_args("--ssl-cert-reqs", "2", "--ssl-ca-certs", certs.ca_file,
                                                          "--ssl-crl", str(crl_file), "--no-access-log"))
    url = f"https://127.0.0.1:{server.port}/hello"
    assert httpx.get(url, verify=certs.client_context(certs.client)).status_code == 200
    with pytest.raises(httpx.HTTPError):
        httpx.get(url, verify=certs.client_context(revoked))
    # And the server goes on.
    assert httpx.get(url, verify=certs.client_context(certs.client)).status_code == 200


# ---- PROXY protocol -------------------------------------------------------------------------

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def v2_header(src: str, src_port: int, command: int = 1) -> bytes:
    import ipaddress

    ip = ipaddress.ip_address(src)
    if command == 0:
        return V2_SIGNATURE + bytes([0x20, 0x00, 0, 0])
    if ip.version == 4:
        body = ip.packed + bytes([10, 0, 0, 1]) + src_port.to_bytes(2, "big") + (443).to_bytes(2, "big")
        fam = 0x11
    else:
        body = ip.packed + ipaddress.ip_address("2001:db8::1").packed + src_port.to_bytes(2, "big") + (443).to_bytes(2, "big")
        fam = 0x21
    body += bytes([0xEA, 0x00, 0x02, ord("v"), ord("x")])  # a TLV, skipped
    return V2_SIGNATURE + bytes([0x21, fam]) + len(body).to_bytes(2, "big") + body


def _client_seen(port: int, prefix: bytes, pieces: int = 1) -> tuple[str, int] | None:
    """Sends `prefix` then a GET to scope:app, in `pieces` writes; the client the app saw,
    or None when the server closed the connection without a response."""
    import json

    data = prefix + b"GET /x HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        step = max(1, len(data) // pieces)
        try:
            for i in range(0, len(data), step):
                sock.sendall(data[i:i + step])
                time.sleep(0.01 if pieces > 1 else 0)
        except (BrokenPipeError, ConnectionResetError):
            return None
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except ConnectionResetError:
            pass
    if not got.startswith(b"HTTP/1.1 200"):
        return None if not got else ("status", int(got.split()[1]))
    client = json.loads(got.split(b"\r\n\r\n", 1)[1])["client"]
    return client[0], client[1]


@pytest.fixture(scope="module")
def proxied():
    server = Server("scope:app", "--proxy-protocol", "--forwarded-allow-ips", "127.0.0.1", "--no-access-log")
    try:
        yield server.wait_ready()
    finally:
        server.kill()


@pytest.mark.parametrize("pieces", [1, 7, 200], ids=["whole", "7-pieces", "byte-by-byte"])
def test_proxy_v1_names_the_client(proxied, pieces):
    header = b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 443\r\n"
    assert _client_seen(proxied.port, header, pieces) == ("203.0.113.7", 51000)
    assert _client_seen(proxied.port, b"PROXY TCP6 2001:db8::7 2001:db8::1 40000 443\r\n") == ("2001:db8::7", 40000)


@pytest.mark.parametrize("pieces", [1, 5, 100], ids=["whole", "5-pieces", "byte-by-byte"])
def test_proxy_v2_names_the_client(proxied, pieces):
    assert _client_seen(proxied.port, v2_header("198.51.100.9", 50000), pieces) == ("198.51.100.9", 50000)
    assert _client_seen(proxied.port, v2_header("2001:db8::9", 4444)) == ("2001:db8::9", 4444)


def test_proxy_local_and_unknown_keep_the_real_peer(proxied):
    assert _client_seen(proxied.port, v2_header("0.0.0.0", 0, command=0))[0] == "127.0.0.1"
    assert _client_seen(proxied.port, b"PROXY UNKNOWN\r\n")[0] == "127.0.0.1"


@pytest.mark.parametrize("prefix", [
    b"",  # missing: a trusted balancer must send it
    b"PROXY TCP4 1.2.3.999 10.0.0.1 1 2\r\n",
    b"PROXY TCP4 " + b"1" * 120,
    V2_SIGNATURE + bytes([0x21, 0x11, 0xFF, 0xFF]),
    V2_SIGNATURE + bytes([0x22, 0x11, 0, 12]) + bytes(12),
], ids=["missing", "bad-address", "too-long", "v2-oversized", "v2-bad-command"])
def test_a_missing_or_malformed_header_closes_before_any_http(proxied, prefix):
    assert _client_seen(proxied.port, prefix) is None
    # And the server goes on.
    assert _client_seen(proxied.port, b"PROXY TCP4 203.0.113.8 10.0.0.1 1 2\r\n") == ("203.0.113.8", 1)


def test_an_untrusted_peer_cannot_send_a_proxy_header(start_server):
    server = start_server("scope:app", "--proxy-protocol", "--forwarded-allow-ips", "192.0.2.1", "--no-access-log")
    # Not parsed: the line is HTTP, and not valid HTTP at that.
    assert _client_seen(server.port, b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 443\r\n") == ("status", 400)
    assert _client_seen(server.port, b"")[0] == "127.0.0.1"


def test_proxy_then_h2c_and_the_per_ip_limit_counts_the_client(start_server):
    import h2.config
    import h2.connection
    import h2.events

    server = start_server("scope:app", "--proxy-protocol", "--forwarded-allow-ips", "127.0.0.1",
                          "--limit-connections-per-ip", "1", "--no-access-log")
    # The harness's readiness probe counts (as the balancer's address) until its close is read.
    assert wait_for(lambda: _client_seen(server.port, b"PROXY TCP4 198.51.100.99 10.0.0.1 1 2\r\n") is not None, 5)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        sock.sendall(v2_header("198.51.100.20", 1234) + conn.data_to_send())
        conn.send_headers(1, [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "t")],
                          end_stream=True)
        sock.sendall(conn.data_to_send())
        body, done = b"", False
        while not done:
            data = sock.recv(65536)
            assert data, "closed"
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.DataReceived):
                    body += ev.data
                    conn.acknowledge_received_data(len(ev.data), ev.stream_id)
                if isinstance(ev, h2.events.StreamEnded):
                    done = True
            sock.sendall(conn.data_to_send())
        import json

        assert json.loads(body)["client"][0] == "198.51.100.20"
        # The balancer's own address is not what the limit counts: a second client through
        # it is admitted, a second connection of the same client is not.
        assert _client_seen(server.port, b"PROXY TCP4 198.51.100.21 10.0.0.1 1 2\r\n") == ("198.51.100.21", 1)
        assert _client_seen(server.port, b"PROXY TCP4 198.51.100.20 10.0.0.1 9 2\r\n") is None


# ---- PROXY protocol in front of TLS ---------------------------------------------------------


def _pieces(data: bytes, pieces: int):
    step = max(1, len(data) // pieces)
    for i in range(0, len(data), step):
        yield data[i:i + step]


class _MemoryTls:
    """A TLS client driven by hand over a raw socket (ssl.MemoryBIO), so that its first
    bytes, the ClientHello, can be sent in the same write as a PROXY header."""

    def __init__(self, sock: socket.socket, ctx: ssl.SSLContext):
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")

    def client_hello(self) -> bytes:
        with pytest.raises(ssl.SSLWantReadError):
            self.tls.do_handshake()
        return self.outgoing.read()

    def _pump(self) -> bool:
        """Sends what TLS wrote, reads what the server sent; False once the server closed."""
        if pending := self.outgoing.read():
            self.sock.sendall(pending)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.incoming.write_eof()
            return False
        self.incoming.write(data)
        return True

    def handshake(self) -> bool:
        while True:
            try:
                self.tls.do_handshake()
                self.sock.sendall(self.outgoing.read())
                return True
            except ssl.SSLWantReadError:
                if not self._pump():
                    return False
            except (ssl.SSLError, OSError):
                return False

    def request(self, data: bytes) -> bytes:
        self.tls.write(data)
        self.sock.sendall(self.outgoing.read())
        got = b""
        while True:
            try:
                chunk = self.tls.read(65536)
                if not chunk:
                    return got
                got += chunk
            except ssl.SSLWantReadError:
                if not self._pump():
                    return got
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return got


GET_CLOSE = b"GET /x HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n"


def _tls_scope(port: int, ctx: ssl.SSLContext, header: bytes, pieces: int = 1, with_hello: bool = True) -> dict | None:
    """A PROXY header, then TLS and a GET to scope:app: the scope the app saw, or None when
    the server closed the connection first. `with_hello`: the ClientHello goes in the
    header's last write (its bytes follow the header in the server's first read)."""
    import json

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        client = _MemoryTls(sock, ctx)
        first = header + client.client_hello() if with_hello else header
        for piece in _pieces(first, pieces):
            sock.sendall(piece)
            time.sleep(0.005 if pieces > 1 else 0)
        if not with_hello:
            time.sleep(0.05)
            sock.sendall(client.client_hello())
        if not client.handshake():
            return None
        got = client.request(GET_CLOSE)
    if not got.startswith(b"HTTP/1.1 200"):
        return None
    return json.loads(got.split(b"\r\n\r\n", 1)[1])


@pytest.fixture(scope="module")
def proxied_tls(certs):  # noqa: F811
    server = tls_server("scope:app", *certs.server_args("--proxy-protocol", "--forwarded-allow-ips", "127.0.0.1",
                                                        "--no-access-log"))
    try:
        yield server.wait_ready()
    finally:
        server.kill()


V1_HEADER = b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 443\r\n"


@pytest.mark.parametrize("pieces", [1, 7, 120], ids=["one-write", "7-pieces", "small-pieces"])
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_proxy_header_before_the_client_hello(proxied_tls, certs, version, pieces):  # noqa: F811
    # The header and the ClientHello in the same writes: the server reads past the header
    # and must hand those bytes to the TLS handshake.
    header, client = {"v1": (V1_HEADER, ["203.0.113.7", 51000]),
                      "v2": (v2_header("2001:db8::9", 4444), ["2001:db8::9", 4444])}[version]
    scope = _tls_scope(proxied_tls.port, certs.client_context(), header, pieces)
    assert scope is not None
    assert scope["client"] == client and scope["scheme"] == "https"


@pytest.mark.parametrize("pieces", [1, 5], ids=["whole", "5-pieces"])
def test_proxy_header_alone_then_ssl_wrap_socket(proxied_tls, certs, pieces):  # noqa: F811
    import json

    for header, client in ((V1_HEADER, ["203.0.113.7", 51000]), (v2_header("198.51.100.9", 50000), ["198.51.100.9", 50000])):
        with socket.create_connection(("127.0.0.1", proxied_tls.port), timeout=10) as raw:
            for piece in _pieces(header, pieces):
                raw.sendall(piece)
                time.sleep(0.01 if pieces > 1 else 0)
            with certs.client_context().wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(GET_CLOSE)
                got = b""
                while chunk := tls.recv(65536):
                    got += chunk
        assert got.startswith(b"HTTP/1.1 200"), got[:100]
        assert json.loads(got.split(b"\r\n\r\n", 1)[1])["client"] == client


def test_proxy_local_before_tls_keeps_the_balancer(proxied_tls, certs):  # noqa: F811
    scope = _tls_scope(proxied_tls.port, certs.client_context(), v2_header("0.0.0.0", 0, command=0))
    assert scope["client"][0] == "127.0.0.1"


@pytest.mark.parametrize("prefix", [
    b"",  # missing: the ClientHello itself is not a PROXY header
    b"PROXY TCP4 1.2.3.999 10.0.0.1 1 2\r\n",
    V2_SIGNATURE + bytes([0x21, 0x11, 0xFF, 0xFF]),
], ids=["missing", "bad-address", "v2-oversized"])
def test_a_missing_or_malformed_header_closes_before_the_handshake(proxied_tls, certs, prefix):  # noqa: F811
    assert _tls_scope(proxied_tls.port, certs.client_context(), prefix) is None
    assert _tls_scope(proxied_tls.port, certs.client_context(), V1_HEADER)["client"] == ["203.0.113.7", 51000]


def test_an_untrusted_peer_cannot_send_a_proxy_header_before_tls(start_server, certs):  # noqa: F811
    server = start_server("scope:app", *certs.server_args("--proxy-protocol", "--forwarded-allow-ips", "192.0.2.1",
                                                          "--no-access-log"))
    # Not read as a header: OpenSSL takes it for a broken ClientHello.
    assert _tls_scope(server.port, certs.client_context(), V1_HEADER) is None
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with certs.client_context().wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(GET_CLOSE)
            assert tls.recv(65536).startswith(b"HTTP/1.1 200")


def test_proxy_before_tls_then_http2_by_alpn(proxied_tls, certs):  # noqa: F811
    import json

    import h2.config
    import h2.connection
    import h2.events

    ctx = certs.client_context()
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", proxied_tls.port), timeout=10) as raw:
        raw.sendall(v2_header("198.51.100.30", 3030))
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.selected_alpn_protocol() == "h2"
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            conn.send_headers(1, [(":method", "GET"), (":path", "/"), (":scheme", "https"), (":authority", "t")],
                              end_stream=True)
            tls.sendall(conn.data_to_send())
            body, done = b"", False
            while not done:
                data = tls.recv(65536)
                assert data, "closed"
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.DataReceived):
                        body += ev.data
                        conn.acknowledge_received_data(len(ev.data), ev.stream_id)
                    done = done or isinstance(ev, h2.events.StreamEnded)
                tls.sendall(conn.data_to_send())
    assert json.loads(body)["client"] == ["198.51.100.30", 3030]


def test_proxy_before_tls_reaches_the_access_log_and_the_per_ip_limit(start_server, certs):  # noqa: F811
    server = start_server("basic:app", *certs.server_args("--proxy-protocol", "--forwarded-allow-ips", "127.0.0.1",
                                                          "--limit-connections-per-ip", "1", "--metrics-path",
                                                          "/metrics"))
    ctx = certs.client_context()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as held:
        # One connection of 198.51.100.40, kept open: its address is what counts.
        first = _MemoryTls(held, ctx)
        held.sendall(b"PROXY TCP4 198.51.100.40 10.0.0.1 4040 443\r\n" + first.client_hello())
        assert first.handshake()
        first.tls.write(b"GET /hello HTTP/1.1\r\nhost: t\r\n\r\n")
        held.sendall(first.outgoing.read())
        assert wait_for(lambda: '198.51.100.40:4040 - "GET /hello HTTP/1.1" 200' in server.output(), 5), \
            server.output()
        # The same client through the balancer again: over its limit, closed before the handshake.
        assert _tls_scope(server.port, ctx, b"PROXY TCP4 198.51.100.40 10.0.0.1 4041 443\r\n") is None
        # Another client through the same balancer is served.
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            other = _MemoryTls(sock, ctx)
            sock.sendall(b"PROXY TCP4 198.51.100.41 10.0.0.1 4141 443\r\n" + other.client_hello())
            assert other.handshake()
            assert other.request(GET_CLOSE).startswith(b"HTTP/1.1 200")
        assert wait_for(lambda: '198.51.100.41:4141 - "GET /x HTTP/1.1" 200' in server.output(), 5)
        text = first.request(b"GET /metrics HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n").decode()
    assert 'zigcorn_connections_rejected_total{cause="limit_per_ip"} 1' in text


# ---- --timeout-connection ---------------------------------------------------------------------


def _read_response(sock: socket.socket, buffered: bytes = b"") -> tuple[bytes, bytes, bytes]:
    """One HTTP/1.1 response (content-length or chunked): its head, body and what followed."""
    data = buffered
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a head: {data!r}"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lower = head.lower()
    if b"content-length:" in lower:
        length = int(lower.split(b"content-length:")[1].split(b"\r\n")[0])
        while len(rest) < length:
            chunk = sock.recv(65536)
            assert chunk, "closed mid-body"
            rest += chunk
        return head, rest[:length], rest[length:]
    assert b"transfer-encoding: chunked" in lower, head
    while not rest.endswith(b"0\r\n\r\n"):
        chunk = sock.recv(65536)
        assert chunk, f"closed mid-body: {rest!r}"
        rest += chunk
    return head, rest, b""


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_an_old_keep_alive_connection_gets_connection_close(start_server):
    server = start_server("basic:app", "--timeout-connection", "2", "--timeout-keep-alive", "60", "--no-access-log")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        head, body, _ = _read_response(sock)
        assert head.startswith(b"HTTP/1.1 200") and b"connection: close" not in head.lower()
        # Idle past its age (counted in whole seconds, never early, at most one late):
        # still open, and its next request is served as its last.
        time.sleep(3.3)
        sock.sendall(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        head, body, _ = _read_response(sock)
        assert head.startswith(b"HTTP/1.1 200") and b"connection: close" in head.lower()
        assert body == b"/hello"
        assert _closed_by_server(sock)
    # Off by default: the same wait keeps the connection.
    plain = start_server("basic:app", "--timeout-keep-alive", "60", "--no-access-log")
    with socket.create_connection(("127.0.0.1", plain.port), timeout=10) as sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        _read_response(sock)
        time.sleep(3.3)
        sock.sendall(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        head, _, _ = _read_response(sock)
        assert b"connection: close" not in head.lower()


def test_a_streaming_response_crossing_the_age_is_not_cut(start_server):
    server = start_server("basic:app", "--timeout-connection", "2", "--timeout-keep-alive", "60", "--no-access-log")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /drip?n=8&every=0.5 HTTP/1.1\r\nhost: x\r\n\r\n")
        head, body, _ = _read_response(sock)
        # Begun young (kept alive), ended old: whole, then the connection closes.
        assert head.startswith(b"HTTP/1.1 200") and b"connection: close" not in head.lower()
        assert body.count(b"drop,") == 8 and body.endswith(b"0\r\n\r\n")
        assert _closed_by_server(sock)


def test_an_old_http2_connection_gets_goaway_and_its_streams_finish(start_server):
    from hyperframe.frame import DataFrame, GoAwayFrame

    from tests.support.h2raw import H2Conn

    server = start_server("basic:app", "--timeout-connection", "2", "--timeout-keep-alive", "60", "--no-access-log")
    conn = H2Conn(server.port, timeout=15)
    try:
        assert conn.response(conn.request("/hello"))[1] == b"/hello"
        slow = conn.request("/sleep?s=6")  # in flight across the age
        time.sleep(4)
        late = conn.request("/hello")  # sent after the GOAWAY left: not served
        frames = list(conn.raw_frames(timeout=10))
    finally:
        conn.close()
    goaways = [f for f in frames if isinstance(f, GoAwayFrame)]
    # GOAWAY when the age passed, naming the last stream read then (not one sent later).
    assert [(g.last_stream_id, g.error_code) for g in goaways] == [(slow, 0)]
    data = {sid: [f for f in frames if isinstance(f, DataFrame) and f.stream_id == sid] for sid in (slow, late)}
    assert data[late] == []
    # The stream in flight when GOAWAY left completes, then the server closes.
    assert frames.index(goaways[0]) < frames.index(data[slow][0])
    assert b"".join(f.data for f in data[slow]) == b"slept" and "END_STREAM" in data[slow][-1].flags
    assert conn.closed


def _closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closed `sock` (recv b"" or a reset), failing past `seconds`."""
    began = time.monotonic()
    sock.settimeout(seconds)
    try:
        extra = sock.recv(65536)
    except ConnectionResetError:
        extra = b""
    except TimeoutError:
        raise AssertionError(f"the server kept the connection open for {seconds}s after the response") from None
    assert extra == b"", extra
    return time.monotonic() - began


def test_a_response_whose_head_goes_out_past_the_age_closes_the_connection(start_server):
    """Begun young, answered after --timeout-connection 1: the head says connection: close
    and the server closes right after the body, not at the (30 s) keep-alive timeout."""
    server = start_server("basic:app", "--timeout-connection", "1", "--timeout-keep-alive", "30", "--no-access-log")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /sleep?s=1.5 HTTP/1.1\r\nhost: x\r\n\r\n")
        head, body, rest = _read_response(sock)
        assert head.startswith(b"HTTP/1.1 200") and body == b"slept" and rest == b""
        assert b"connection: close" in head.lower(), head
        assert _closed_within(sock, 1.0) < 1.0


def test_a_response_whose_body_ends_past_the_age_closes_the_connection_after_it(start_server):
    """The head goes out young (kept alive), the body streams past the age: the response is
    whole, then the server closes (not at the keep-alive timeout)."""
    server = start_server("basic:app", "--timeout-connection", "1", "--timeout-keep-alive", "30", "--no-access-log")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /drip?n=3&every=0.5 HTTP/1.1\r\nhost: x\r\n\r\n")
        head, body, _ = _read_response(sock)
        assert head.startswith(b"HTTP/1.1 200") and b"connection: close" not in head.lower(), head
        assert body.count(b"drop,") == 3 and body.endswith(b"0\r\n\r\n")
        assert _closed_within(sock, 1.0) < 1.0


def _h2_until_closed(conn, timeout: float) -> list:
    """(seconds since the call, frame) for each frame until the server closes the connection."""
    began = time.monotonic()
    return [(time.monotonic() - began, f) for f in conn.raw_frames(timeout=timeout)]


def test_http2_gets_goaway_when_the_age_passes_and_closes_after_its_streams(start_server):
    """GOAWAY as the age passes, while a stream is in flight and nothing else happens on
    the connection; the stream finishes whole, then the server closes (not at the 30 s
    keep-alive timeout). Before, the GOAWAY waited for a stream to open or end."""
    from hyperframe.frame import DataFrame, GoAwayFrame

    from tests.support.h2raw import H2Conn

    server = start_server("basic:app", "--timeout-connection", "1", "--timeout-keep-alive", "30", "--no-access-log")
    conn = H2Conn(server.port, timeout=15)
    try:
        slow = conn.request("/sleep?s=3.5")
        frames = _h2_until_closed(conn, 8)
    finally:
        conn.close()
    goaways = [(t, f) for t, f in frames if isinstance(f, GoAwayFrame)]
    data = [(t, f) for t, f in frames if isinstance(f, DataFrame) and f.stream_id == slow]
    assert [(g.last_stream_id, g.error_code) for _, g in goaways] == [(slow, 0)], frames
    # The lifetime (1 s) passes, the server's timers run once a second: well before the 3.5 s answer.
    assert goaways[0][0] < 2.8 and goaways[0][0] < data[0][0], frames
    assert b"".join(f.data for _, f in data) == b"slept" and "END_STREAM" in data[-1][1].flags
    assert conn.closed and frames[-1][0] - data[-1][0] < 1.0, frames


def test_an_idle_http2_connection_gets_goaway_and_closes_when_the_age_passes(start_server):
    from hyperframe.frame import GoAwayFrame

    from tests.support.h2raw import H2Conn

    server = start_server("basic:app", "--timeout-connection", "1", "--timeout-keep-alive", "30", "--no-access-log")
    conn = H2Conn(server.port, timeout=15)
    try:
        sid = conn.request("/hello")
        assert conn.response(sid)[1] == b"/hello"
        frames = _h2_until_closed(conn, 8)
    finally:
        conn.close()
    goaways = [f for _, f in frames if isinstance(f, GoAwayFrame)]
    assert [(g.last_stream_id, g.error_code) for g in goaways] == [(sid, 0)], frames
    assert conn.closed and frames[-1][0] < 3.0, frames


def test_a_websocket_outlives_the_connection_age(start_server):
    import asyncio

    import websockets

    server = start_server("ws:app", "--timeout-connection", "1", "--ws-ping-interval", "0", "--no-access-log")

    async def go():
        async with websockets.connect(f"ws://127.0.0.1:{server.port}/echo") as ws:
            await ws.send("young")
            assert await ws.recv() == "young"
            await asyncio.sleep(2.5)
            for _ in range(3):  # past the age: the session goes on
                await ws.send("old")
                assert await ws.recv() == "old"

    asyncio.run(asyncio.wait_for(go(), 20))
