"""h2c smuggling through a real HAProxy: the HTTP/1.1 Upgrade to h2c (RFC 7540 section 3.2,
deprecated by RFC 9113) turns a proxied connection into a tunnel the proxy no longer reads.

HAProxy in its default HTTP mode forwards ``Upgrade: h2c``; when the server answers 101 it
switches the connection to a tunnel, and every HTTP/2 request that follows reaches the app
past the proxy's rules and logs. Here HAProxy denies ``/admin`` (403) and logs each request;
the client asks for the upgrade on ``GET /`` and, if it is answered 101, asks for ``/admin``
over HTTP/2.

- zigcorn's default (no ``--h2c-upgrade``): the upgrade is ignored, ``GET /`` is a plain
  HTTP/1.1 200, and ``/admin`` through HAProxy is HAProxy's 403.
- ``--h2c-upgrade`` behind HAProxy in its default configuration (which adds no
  forwarding field): the smuggling the flag allows, shown: 101, then ``/admin`` reaches
  the app over HTTP/2 and HAProxy's log never names it.
- ``--h2c-upgrade`` behind HAProxy with ``send-proxy-v2`` (zigcorn ``--proxy-protocol``):
  the upgrade is declined all the same, since a connection that began with a PROXY header
  comes through a proxy (as is a request naming a proxy hop: tests/differential/).

The default both with HAProxy speaking plain HTTP/1.1 to zigcorn and with
``send-proxy-v2``. Without the ``haproxy`` binary (Debian's package) the file skips (on CI, CI=true, it fails).
"""

import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import h2.config
import h2.connection
import h2.events
import pytest

from tests.support.harness import free_port, port_open, wait_for, zigcorn_only
from tests.support.tools import require_tool

pytestmark = zigcorn_only


@pytest.fixture(autouse=True)
def haproxy_installed():
    """.ci/run installs HAProxy: on CI its absence fails these tests."""
    require_tool("haproxy", reason="haproxy is not installed (apt-get install haproxy)")

TIMEOUT = 10.0

CONFIG = """\
global
    maxconn 100
    log stdout format raw local0 info

defaults
    mode http
    log global
    option httplog
    option dontlognull
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout tunnel 30s

frontend fe
    bind 127.0.0.1:{port}
    http-request deny if {{ path_beg /admin }}
    default_backend be

backend be
    server app 127.0.0.1:{backend}{server_options}
"""


class HAProxy:
    """HAProxy in the foreground (-db) on loopback, in front of `backend`; stopped by its pid."""

    def __init__(self, backend: int, proxy_v2: bool):
        self.port = free_port()
        self.dir = tempfile.TemporaryDirectory(prefix="zigcorn-haproxy-")
        cfg = os.path.join(self.dir.name, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(CONFIG.format(port=self.port, backend=backend, server_options=" send-proxy-v2" if proxy_v2 else ""))
        self._log = tempfile.TemporaryFile()
        check = subprocess.run(["haproxy", "-c", "-f", cfg], capture_output=True, text=True, timeout=TIMEOUT)
        assert check.returncode == 0, check.stdout + check.stderr
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", cfg], stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        if not wait_for(lambda: self.proc.poll() is not None or port_open(self.port), TIMEOUT) or self.proc.poll() is not None:
            self.stop()
            pytest.fail(f"haproxy did not listen within {TIMEOUT}s:\n{self.output()}")

    def output(self) -> str:
        fd = self._log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(TIMEOUT)
        self.dir.cleanup()


@pytest.fixture(params=[False, True], ids=["plain", "proxy-v2"])
def front(request, start_server):
    """``front(*zigcorn_flags) -> (haproxy, server)``: zigcorn running the scope app behind HAProxy."""
    proxies = []

    def start(*flags: str):
        extra = ("--proxy-protocol", "--forwarded-allow-ips", "127.0.0.1") if request.param else ()
        server = start_server("scope:app", *extra, *flags)
        proxy = HAProxy(server.port, proxy_v2=request.param)
        proxies.append(proxy)
        return proxy, server

    yield start
    for proxy in proxies:
        proxy.stop()


UPGRADE = (b"GET / HTTP/1.1\r\nHost: example.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
           b"HTTP2-Settings: \r\n\r\n")  # base64url of an empty SETTINGS payload


def read_response(sock: socket.socket, buf: bytes = b"") -> tuple[bytes, bytes, bytes]:
    """An HTTP/1.1 response (head, body by content-length) and the bytes after it."""
    deadline = time.monotonic() + TIMEOUT
    while b"\r\n\r\n" not in buf:
        assert time.monotonic() < deadline, buf
        chunk = sock.recv(65536)
        assert chunk, f"closed before a whole head: {buf!r}"
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    if head.startswith(b"HTTP/1.1 101 "):
        return head, b"", rest
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        assert time.monotonic() < deadline, rest
        chunk = sock.recv(65536)
        assert chunk, "closed before the whole body"
        rest += chunk
    return head, rest[:length], rest[length:]


def h2_after_upgrade(sock: socket.socket, rest: bytes, path: str) -> dict:
    """Speaks HTTP/2 on the upgraded connection: stream 1 (the upgraded GET /) and a new
    request for `path`; the latter's status and the app's JSON scope."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_upgrade_connection()
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", "GET"), (":scheme", "http"), (":authority", "example.test"), (":path", path)],
                      end_stream=True)
    sock.sendall(conn.data_to_send())
    headers, body, ended = {}, b"", set()
    events = conn.receive_data(rest) if rest else []
    deadline = time.monotonic() + TIMEOUT
    while True:
        for ev in events:
            if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                headers = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if ev.stream_id == sid:
                    body += ev.data
            elif isinstance(ev, h2.events.StreamEnded):
                ended.add(ev.stream_id)
        sock.sendall(conn.data_to_send())
        if {1, sid} <= ended:
            return {"status": headers[":status"], "scope": json.loads(body)}
        assert time.monotonic() < deadline, f"no end of streams 1 and {sid}: {ended}"
        data = sock.recv(65536)
        assert data, "the upgraded connection closed"
        events = conn.receive_data(data)


def wait_logged(proxy: HAProxy, needle: str) -> str:
    assert wait_for(lambda: needle in proxy.output(), TIMEOUT), proxy.output()
    return proxy.output()


def test_by_default_the_upgrade_is_ignored_and_haproxy_denies_admin(front):
    proxy, _ = front()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT) as sock:
        sock.sendall(UPGRADE)
        head, body, rest = read_response(sock)
        assert head.startswith(b"HTTP/1.1 200 "), head
        scope = json.loads(body)
        assert scope["http_version"] == "1.1" and scope["path"] == "/"
        # The connection is still HTTP/1.1 through the proxy, which sees and denies /admin.
        sock.sendall(b"GET /admin HTTP/1.1\r\nHost: example.test\r\n\r\n")
        head, body, _ = read_response(sock, rest)
        assert head.startswith(b"HTTP/1.1 403 "), head
        assert b"request forbidden" in body.lower()
    log = wait_logged(proxy, "GET /admin HTTP/1.1")
    assert "be/<NOSRV> 403" in log or " 403 " in log, log


def test_with_h2c_upgrade_requests_are_smuggled_past_haproxy(front, request):
    proxy, _ = front("--h2c-upgrade")
    through_proxy_protocol = request.node.callspec.id == "proxy-v2"
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT) as sock:
        sock.sendall(UPGRADE)
        head, body, rest = read_response(sock)
        if through_proxy_protocol:
            # A PROXY header shows the proxy: the upgrade is declined even with the flag.
            assert head.startswith(b"HTTP/1.1 200 "), head
            assert json.loads(body)["http_version"] == "1.1"
            sock.sendall(b"GET /admin HTTP/1.1\r\nHost: example.test\r\n\r\n")
            head, _, _ = read_response(sock, rest)
            assert head.startswith(b"HTTP/1.1 403 "), head
            return
        assert head.startswith(b"HTTP/1.1 101 "), head
        got = h2_after_upgrade(sock, rest, "/admin")
    # HAProxy would have answered 403: the request reached the app, over HTTP/2.
    assert got["status"] == "200"
    assert got["scope"]["path"] == "/admin" and got["scope"]["http_version"] == "2"
    # The proxy logged the upgrade request (at the tunnel's end) and never /admin.
    log = wait_logged(proxy, "GET / HTTP/1.1")
    assert "/admin" not in log, log
