"""`http.response.pathsend`: the engine sends a file the app names (sendfile(2) on plain
connections, read and encrypted in pieces over TLS, DATA frames over HTTP/2), checked on
the wire with h11 and raw sockets, with httpx over TLS and HTTP/2, and through
Starlette's FileResponse and StaticFiles."""

import hashlib
import os
import socket
import ssl
import threading
import time

import h11
import httpx
import pytest

from tests.support.harness import Server, wait_for, zigcorn_only
from tests.support.tools import require_module

pytestmark = [zigcorn_only, pytest.mark.every_python]
trustme = require_module("trustme")

MB = 1024 * 1024


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("files")
    blobs = {"big.bin": os.urandom(32 * MB), "small.bin": os.urandom(4096), "empty.bin": b"", "page.html": b"<p>hi</p>"}
    for name, data in blobs.items():
        (root / name).write_bytes(data)
    return root, blobs


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pscerts")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    (root / "server.pem").write_bytes(cert.private_key_and_cert_chain_pem.bytes())
    (root / "ca.pem").write_bytes(ca.cert_pem.bytes())
    return str(root / "server.pem"), str(root / "ca.pem")


@pytest.fixture(scope="module")
def server(files):
    s = Server("pathsend:app", env={"ZIGCORN_TEST_FILES": str(files[0])})
    try:
        yield s.wait_ready()
    finally:
        s.kill()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def h11_get(port: int, targets: list[str], method: str = "GET") -> list[tuple[h11.Response, bytes]]:
    """Requests on one keep-alive connection, each response read whole with h11."""
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        conn = h11.Connection(h11.CLIENT)
        for target in targets:
            sock.sendall(conn.send(h11.Request(method=method, target=target, headers=[("Host", "t")])))
            sock.sendall(conn.send(h11.EndOfMessage()))
            response, body = None, b""
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(sock.recv(1 << 20))
                elif isinstance(event, h11.Response):
                    response = event
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
            out.append((response, body))
            conn.start_next_cycle()
    return out


def test_the_scope_advertises_pathsend(server):
    names = httpx.get(f"{server.url}/scope").text.split(",")
    assert "http.response.pathsend" in names


def test_a_file_is_the_body_with_its_length_on_a_keep_alive_connection(server, files):
    _, blobs = files
    (r1, b1), (r2, b2), (r3, b3) = h11_get(server.port, ["/raw/big.bin", "/raw/small.bin", "/raw/empty.bin"])
    assert r1.status_code == 200 and dict(r1.headers)[b"content-length"] == str(32 * MB).encode()
    assert sha(b1) == sha(blobs["big.bin"])
    assert b2 == blobs["small.bin"] and dict(r2.headers)[b"content-length"] == b"4096"
    assert b3 == b"" and dict(r3.headers)[b"content-length"] == b"0"


def test_head_sends_no_body(server):
    ((r, body),) = h11_get(server.port, ["/file/small.bin"], method="HEAD")
    assert r.status_code == 200 and body == b"" and dict(r.headers)[b"content-length"] == b"4096"


def test_the_apps_content_length_may_announce_less_than_the_file(server, files):
    ((r, body),) = h11_get(server.port, ["/declared/small.bin?cl=100"])
    assert dict(r.headers)[b"content-length"] == b"100" and body == files[1]["small.bin"][:100]


def test_a_file_shorter_than_the_content_length_closes_and_is_logged(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /declared/small.bin?cl=5000 HTTP/1.1\r\nHost: t\r\n\r\n")
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    assert b" 200 " not in got[:20]  # nothing honest could be sent: no response at all
    assert wait_for(lambda: "is shorter than the response's content-length" in server.output())
    assert httpx.get(f"{server.url}/raw/small.bin").status_code == 200


def test_a_missing_file_closes_the_connection_and_is_logged(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /raw/nope.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        assert sock.recv(65536) == b""
    assert wait_for(lambda: "nope.bin cannot be opened (NOENT)" in server.output())
    assert httpx.get(f"{server.url}/raw/small.bin").status_code == 200


@pytest.mark.parametrize("kind", ["after-body", "trailers"])
def test_misuse_is_an_app_error(server, kind):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(f"GET /{kind}/small.bin HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        while sock.recv(65536):
            pass
    text = httpx.get(f"{server.url}/outcome").text
    assert "pathsend" in text and text != "sent"


def test_starlette_file_response_and_static_files(server, files):
    _, blobs = files
    r = httpx.get(f"{server.url}/file/big.bin", timeout=30)
    assert r.status_code == 200 and sha(r.content) == sha(blobs["big.bin"])
    assert r.headers["etag"] and r.headers["content-length"] == str(32 * MB)
    r = httpx.get(f"{server.url}/static/page.html")
    assert r.text == "<p>hi</p>" and r.headers["content-type"].startswith("text/html")
    # Ranges are Starlette's own (read through Python), and still work.
    r = httpx.get(f"{server.url}/static/small.bin", headers={"range": "bytes=10-19"})
    assert r.status_code == 206 and r.content == blobs["small.bin"][10:20]


def test_over_tls_the_file_is_read_and_encrypted(files, certs):
    certfile, ca = certs
    s = Server("pathsend:app", "--ssl-certfile", certfile, env={"ZIGCORN_TEST_FILES": str(files[0])}).wait_ready()
    try:
        ctx = ssl.create_default_context(cafile=ca)
        with httpx.Client(verify=ctx, timeout=30) as client:
            r = client.get(f"https://localhost:{s.port}/file/big.bin")
            assert sha(r.content) == sha(files[1]["big.bin"])
            with httpx.Client(verify=ctx, http2=True, timeout=30) as c2:
                r = c2.get(f"https://localhost:{s.port}/static/big.bin")
                assert r.http_version == "HTTP/2" and sha(r.content) == sha(files[1]["big.bin"])
    finally:
        s.kill()


def test_over_http2(server, files):
    with httpx.Client(http1=False, http2=True, timeout=30) as client:
        r = client.get(f"{server.url}/file/big.bin")
        assert r.http_version == "HTTP/2" and sha(r.content) == sha(files[1]["big.bin"])
        r = client.head(f"{server.url}/file/small.bin")
        assert r.content == b"" and r.headers["content-length"] == "4096"
        assert client.get(f"{server.url}/raw/empty.bin").content == b""


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_client_that_goes_mid_file_frees_the_file(server):
    before = open_fds(server.proc.pid)
    for _ in range(10):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            sock.sendall(b"GET /raw/big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            assert sock.recv(65536)
    assert wait_for(lambda: open_fds(server.proc.pid) <= before)
    assert httpx.get(f"{server.url}/raw/small.bin").status_code == 200


def test_a_file_truncated_while_it_is_sent_closes_the_connection(files):
    root, _ = files
    victim = root / "victim.bin"
    victim.write_bytes(os.urandom(64 * MB))
    s = Server("pathsend:app", env={"ZIGCORN_TEST_FILES": str(root)}).wait_ready()
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            sock.sendall(b"GET /raw/victim.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            got = sock.recv(65536)
            os.truncate(victim, MB)
            while chunk := sock.recv(1 << 20):
                got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        assert b"content-length: 67108864" in head and len(body) < 64 * MB
        assert wait_for(lambda: "truncated" in s.output())
        assert httpx.get(f"{s.url}/raw/small.bin").status_code == 200
    finally:
        s.kill()


def test_sixteen_parallel_downloads_cost_no_file_sized_memory(server, files):
    before = server.rss_kb()
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], server.rss_kb())
            time.sleep(0.02)

    def download(results, i):
        with httpx.Client(timeout=60) as client:
            results[i] = sha(client.get(f"{server.url}/raw/big.bin").content)

    results = [None] * 16
    sampler = threading.Thread(target=sample)
    sampler.start()
    workers = [threading.Thread(target=download, args=(results, i)) for i in range(16)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.set()
    sampler.join()
    assert results == [sha(files[1]["big.bin"])] * 16
    # 16 x 32 MiB went out; the server grew by far less than one file.
    assert peak[0] - before < 8 * 1024, (before, peak[0])
