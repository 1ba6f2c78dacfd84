"""`--static ROUTE=DIR`: files answered by the engine before the app, checked from outside
with httpx (HTTP/1.1, h2c, TLS), h11 and raw sockets for the odd paths, on both I/O
backends: exact bytes and headers, conditional requests, ranges, HEAD, 405, index.html,
no listing, a dozen traversal attempts, dotfiles, and descriptors closed."""

import hashlib
import os
import socket
import ssl
import subprocess
import sys

import httpx
import pytest

from tests.support.harness import ROOT, Server, wait_for, zigcorn_only
from tests.support.tools import require_module

pytestmark = zigcorn_only

MB = 1024 * 1024


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    base = tmp_path_factory.mktemp("static")
    pub = base / "pub"
    (pub / "docs").mkdir(parents=True)
    (pub / "empty_dir").mkdir()
    (pub / "%2e%2e").mkdir()
    blobs = {
        "small.txt": b"hello static world\n",
        "big.bin": os.urandom(8 * MB),
        "app.js": b"console.log(1);\n",
        "style.CSS": b"body{}\n",
        "noext": b"raw",
        "empty.bin": b"",
        "docs/index.html": b"<h1>docs</h1>\n",
        "index.html": b"<h1>root</h1>\n",
        ".env": b"SECRET=1\n",
        "%2e%2e/literal.txt": b"literal\n",
        "sp ace.txt": b"space\n",
    }
    for name, data in blobs.items():
        (pub / name).write_bytes(data)
    (base / "secret.txt").write_bytes(b"TOP SECRET\n")
    os.symlink("../secret.txt", pub / "out")
    os.symlink(str(base / "secret.txt"), pub / "abs_out")
    os.symlink("small.txt", pub / "in.txt")
    os.symlink("..", pub / "up")
    return base, pub, blobs


@pytest.fixture(scope="module", params=["epoll", "io_uring"])
def server(request, tree):
    _, pub, _ = tree
    s = Server("hello:app", "--static", f"/static={pub}", "--metrics-path", "/metrics",
               env={"ZIGCORN_IO_BACKEND": request.param})
    try:
        yield s.wait_ready()
    finally:
        s.kill()


def raw(port: int, target: str, method: str = "GET", headers: str = "") -> tuple[int, bytes, bytes]:
    """One request with the target exactly as given; status, head and body (until close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{headers}\r\n".encode("latin-1"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


def test_exact_bytes_and_headers_on_a_keep_alive_connection(server, tree):
    _, pub, blobs = tree
    with httpx.Client(timeout=30) as client:
        for _ in range(2):
            r = client.get(f"{server.url}/static/small.txt")
            assert r.status_code == 200 and r.content == blobs["small.txt"]
            assert r.headers["content-type"] == "text/plain; charset=utf-8"
            assert r.headers["content-length"] == str(len(blobs["small.txt"]))
            assert r.headers["accept-ranges"] == "bytes"
            assert r.headers["etag"].startswith('"') and r.headers["etag"].endswith('"')
            assert r.headers["last-modified"].endswith(" GMT")
            assert "cache-control" not in r.headers
        r = client.get(f"{server.url}/static/big.bin")
        assert hashlib.sha256(r.content).digest() == hashlib.sha256(blobs["big.bin"]).digest()
        types = {"app.js": "text/javascript; charset=utf-8", "style.CSS": "text/css; charset=utf-8",
                 "noext": "application/octet-stream", "index.html": "text/html; charset=utf-8"}
        for name, ctype in types.items():
            r = client.get(f"{server.url}/static/{name}")
            assert r.content == blobs[name] and r.headers["content-type"] == ctype
        r = client.get(f"{server.url}/static/empty.bin")
        assert r.status_code == 200 and r.content == b"" and r.headers["content-length"] == "0"
        assert client.get(f"{server.url}/static/sp%20ace.txt").content == b"space\n"
        # The app still answers everything else, including a route's look-alike.
        assert client.get(f"{server.url}/other").text == "Hello, world!"
        assert client.get(f"{server.url}/staticx/small.txt").text == "Hello, world!"


def test_head_has_the_headers_and_no_body(server, tree):
    _, _, blobs = tree
    status, head, body = raw(server.port, "/static/big.bin", "HEAD")
    assert status == 200 and body == b""
    assert f"content-length: {len(blobs['big.bin'])}".encode() in head
    r = httpx.head(f"{server.url}/static/small.txt", headers={"range": "bytes=0-1"})
    assert r.status_code == 200 and r.content == b""


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
def test_other_methods_get_405_with_allow(server, method):
    r = httpx.request(method, f"{server.url}/static/small.txt")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"


def test_conditional_requests(server):
    url = f"{server.url}/static/small.txt"
    r = httpx.get(url)
    tag, modified = r.headers["etag"], r.headers["last-modified"]
    for inm in (tag, f'"nope", {tag}', f"W/{tag}", "*", f'"a",W/{tag}'):
        r = httpx.get(url, headers={"if-none-match": inm})
        assert r.status_code == 304 and r.content == b"", inm
        assert r.headers["etag"] == tag and "content-length" not in r.headers or r.headers["content-length"] == "0"
    assert httpx.get(url, headers={"if-none-match": '"other"'}).status_code == 200
    assert httpx.get(url, headers={"if-modified-since": modified}).status_code == 304
    assert httpx.get(url, headers={"if-modified-since": "Thu, 01 Jan 1970 00:00:00 GMT"}).status_code == 200
    assert httpx.get(url, headers={"if-modified-since": "garbage"}).status_code == 200
    # If-None-Match wins over If-Modified-Since.
    assert httpx.get(url, headers={"if-none-match": '"other"', "if-modified-since": modified}).status_code == 200
    assert httpx.head(url, headers={"if-none-match": tag}).status_code == 304
    assert httpx.get(url, headers={"if-match": '"other"'}).status_code == 412
    assert httpx.get(url, headers={"if-match": tag}).status_code == 200
    assert httpx.get(url, headers={"if-unmodified-since": "Thu, 01 Jan 1970 00:00:00 GMT"}).status_code == 412


def test_ranges(server, tree):
    _, _, blobs = tree
    data = blobs["big.bin"]
    url = f"{server.url}/static/big.bin"
    size = len(data)
    cases = {"bytes=0-0": (0, 1), "bytes=10-19": (10, 20), "bytes=100-": (100, size), "bytes=-500": (size - 500, size),
             f"bytes=0-{size * 2}": (0, size), f"bytes=-{size * 3}": (0, size)}
    for spec, (a, b) in cases.items():
        r = httpx.get(url, headers={"range": spec})
        assert r.status_code == 206, spec
        assert r.content == data[a:b], spec
        assert r.headers["content-range"] == f"bytes {a}-{b - 1}/{size}"
        assert r.headers["content-length"] == str(b - a)
    for spec in (f"bytes={size}-", f"bytes={size + 5}-{size + 9}", "bytes=-0"):
        r = httpx.get(url, headers={"range": spec})
        assert r.status_code == 416 and r.headers["content-range"] == f"bytes */{size}", spec
    # Ignored: several ranges, another unit, nonsense.
    for spec in ("bytes=0-1,5-6", "items=0-1", "bytes=5-2", "bytes=x-"):
        r = httpx.get(url, headers={"range": spec})
        assert r.status_code == 200 and len(r.content) == size, spec
    tag, modified = httpx.head(url).headers["etag"], httpx.head(url).headers["last-modified"]
    assert httpx.get(url, headers={"range": "bytes=0-9", "if-range": tag}).status_code == 206
    assert httpx.get(url, headers={"range": "bytes=0-9", "if-range": modified}).status_code == 206
    r = httpx.get(url, headers={"range": "bytes=0-9", "if-range": '"stale"'})
    assert r.status_code == 200 and len(r.content) == size
    assert httpx.get(url, headers={"range": "bytes=0-9", "if-range": f"W/{tag}"}).status_code == 200
    r = httpx.get(f"{server.url}/static/empty.bin", headers={"range": "bytes=0-"})
    assert r.status_code == 416 and r.headers["content-range"] == "bytes */0"


def test_a_directory_is_its_index_html_never_a_listing(server, tree):
    _, _, blobs = tree
    for path in ("/static/docs/", "/static/docs"):
        r = httpx.get(server.url + path)
        assert r.status_code == 200 and r.content == blobs["docs/index.html"]
        assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert httpx.get(f"{server.url}/static/").content == blobs["index.html"]
    assert httpx.get(f"{server.url}/static").content == blobs["index.html"]
    r = httpx.get(f"{server.url}/static/empty_dir/")
    assert r.status_code == 404 and b"small" not in r.content


TRAVERSALS = [
    "/static/../secret.txt",
    "/static/%2e%2e/secret.txt",
    "/static/%2E%2E/secret.txt",
    "/static/.%2e/secret.txt",
    "/static/%2e./secret.txt",
    "/static/..%2fsecret.txt",
    "/static/%2e%2e%2fsecret.txt",
    "/static/docs/../../secret.txt",
    "/static/docs/%2e%2e/%2e%2e/secret.txt",
    "/static/..\\secret.txt",
    "/static/%5c..%5csecret.txt",
    "/static/..%5csecret.txt",
    "/static/%2e%2e%5csecret.txt",
    "/static/out",
    "/static/abs_out",
    "/static/up/secret.txt",
    "/static//etc/passwd",
    "/static/%2fetc%2fpasswd",
    "/static/small.txt%00.png",
    "/static/%00",
    "/static/%zz",
    "/static/%",
    "/static/.env",
    "/static/%2eenv",
]


@pytest.mark.parametrize("target", TRAVERSALS)
def test_traversal_attempts_never_leave_the_directory(server, target):
    status, _, body = raw(server.port, target)
    assert status in (400, 404), (target, status)
    assert b"SECRET" not in body and b"root:" not in body


def test_double_encoding_stays_literal_and_symlinks_inside_are_followed(server, tree):
    status, _, body = raw(server.port, "/static/%252e%252e/literal.txt")
    assert status == 200 and body == b"literal\n"
    status, _, body = raw(server.port, "/static/in.txt")
    assert status == 200 and body == tree[2]["small.txt"]


def test_descriptors_are_closed_also_when_a_client_drops_a_download(server):
    pid = server.proc.pid
    with httpx.Client() as client:
        client.get(f"{server.url}/static/small.txt")
    before = len(os.listdir(f"/proc/{pid}/fd"))
    with httpx.Client() as client:
        for path in ("small.txt", "missing", "docs/", "out", "big.bin"):
            for _ in range(5):
                client.get(f"{server.url}/static/{path}")
                client.get(f"{server.url}/static/big.bin", headers={"range": "bytes=5-10"})
                client.get(f"{server.url}/static/small.txt", headers={"if-none-match": "*"})
    for _ in range(10):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            sock.sendall(b"GET /static/big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            assert sock.recv(65536)
    with httpx.Client(http1=False, http2=True) as client:
        with client.stream("GET", f"{server.url}/static/big.bin") as r:
            next(r.iter_bytes())
    assert wait_for(lambda: len(os.listdir(f"/proc/{pid}/fd")) <= before), (before, os.listdir(f"/proc/{pid}/fd"))
    assert httpx.get(f"{server.url}/static/small.txt").status_code == 200


def test_over_h2c(server, tree):
    _, _, blobs = tree
    with httpx.Client(http1=False, http2=True, timeout=30) as client:
        r = client.get(f"{server.url}/static/big.bin")
        assert r.http_version == "HTTP/2" and r.content == blobs["big.bin"]
        r = client.get(f"{server.url}/static/big.bin", headers={"range": "bytes=-100"})
        assert r.status_code == 206 and r.content == blobs["big.bin"][-100:]
        tag = r.headers["etag"]
        assert client.get(f"{server.url}/static/big.bin", headers={"if-none-match": tag}).status_code == 304
        r = client.head(f"{server.url}/static/small.txt")
        assert r.status_code == 200 and r.content == b"" and r.headers["content-length"] == str(len(blobs["small.txt"]))
        assert client.get(f"{server.url}/static/%2e%2e/secret.txt").status_code == 404
        assert client.get(f"{server.url}/static/out").status_code == 404
        assert client.post(f"{server.url}/static/small.txt").status_code == 405
        assert client.get(f"{server.url}/static/empty.bin").content == b""
        assert client.get(f"{server.url}/static/docs/").content == blobs["docs/index.html"]
        assert client.get(f"{server.url}/other").text == "Hello, world!"


def test_static_answers_are_counted_in_metrics(server):
    def count(text: str) -> float:
        for line in text.splitlines():
            if line.startswith('zigcorn_requests_total{status_class="4xx"}'):
                return float(line.split()[-1])
        return 0.0

    before = count(httpx.get(f"{server.url}/metrics").text)
    for _ in range(3):
        httpx.get(f"{server.url}/static/missing")
    assert count(httpx.get(f"{server.url}/metrics").text) >= before + 3


def test_dotfiles_expires_and_granian_aliases(tree):
    _, pub, blobs = tree
    s = Server("hello:app", "--static-path-route", "/assets", "--static-path-mount", str(pub),
               "--static-expires", "3600", "--static-dotfiles", "--header", "x-frame-options:DENY").wait_ready()
    try:
        r = httpx.get(f"{s.url}/assets/.env")
        assert r.status_code == 200 and r.content == blobs[".env"]
        assert r.headers["cache-control"] == "public, max-age=3600"
        assert r.headers["x-frame-options"] == "DENY"
        assert httpx.get(f"{s.url}/assets/missing").headers["x-frame-options"] == "DENY"
        assert httpx.get(f"{s.url}/assets/%2e%2e/secret.txt").status_code == 404
        assert httpx.get(f"{s.url}/static/small.txt").text == "Hello, world!"
    finally:
        s.kill()


def test_a_mount_at_the_root_and_several_mounts(tree):
    _, pub, blobs = tree
    s = Server("hello:app", "--static", f"/={pub}", "--static", f"/d/={pub / 'docs'}").wait_ready()
    try:
        assert httpx.get(f"{s.url}/small.txt").content == blobs["small.txt"]
        assert httpx.get(f"{s.url}/").content == blobs["index.html"]
        assert httpx.get(f"{s.url}/d/index.html").content == blobs["docs/index.html"]
        assert httpx.get(f"{s.url}/nothing").status_code == 404
    finally:
        s.kill()


@pytest.mark.parametrize("flag", ["static=pub", "/static", "/sta?tic=.", "/static=/no/such/dir"])
def test_bad_mounts_are_refused_at_startup(flag):
    arg = flag if flag.startswith("/") or "=" not in flag else flag
    r = subprocess.run([sys.executable, "-m", "zigcorn", "tests.apps.hello:app", "--static", arg],
                       cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "static" in r.stderr


def test_over_tls_http1_and_http2(tree, tmp_path):
    trustme = require_module("trustme")
    _, pub, blobs = tree
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    (tmp_path / "server.pem").write_bytes(cert.private_key_and_cert_chain_pem.bytes())
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem.bytes())
    s = Server("hello:app", "--static", f"/static={pub}", "--ssl-certfile", str(tmp_path / "server.pem")).wait_ready()
    try:
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        for h2 in (False, True):
            with httpx.Client(verify=ctx, http2=h2, timeout=30) as client:
                r = client.get(f"https://localhost:{s.port}/static/big.bin")
                assert r.http_version == ("HTTP/2" if h2 else "HTTP/1.1")
                assert r.content == blobs["big.bin"]
                r = client.get(f"https://localhost:{s.port}/static/big.bin", headers={"range": "bytes=1000-1999"})
                assert r.status_code == 206 and r.content == blobs["big.bin"][1000:2000]
                assert client.get(f"https://localhost:{s.port}/static/out").status_code == 404
    finally:
        s.kill()


def test_engine_answers_are_in_the_access_log(tree):
    _, pub, _ = tree
    s = Server("hello:app", "--static", f"/static={pub}").wait_ready()
    try:
        httpx.get(f"{s.url}/static/small.txt?v=1")
        httpx.get(f"{s.url}/static/missing")
        with httpx.Client(http1=False, http2=True) as client:
            client.head(f"{s.url}/static/small.txt")
        assert wait_for(lambda: '"GET /static/small.txt?v=1 HTTP/1.1" 200 19' in s.output())
        assert wait_for(lambda: '"GET /static/missing HTTP/1.1" 404' in s.output())
        assert wait_for(lambda: '"HEAD /static/small.txt HTTP/2" 200' in s.output())
    finally:
        s.kill()
    quiet = Server("hello:app", "--static", f"/static={pub}", "--no-access-log").wait_ready()
    try:
        httpx.get(f"{quiet.url}/static/small.txt")
        httpx.get(f"{quiet.url}/other")
        assert "small.txt" not in quiet.output()
    finally:
        quiet.kill()


def test_precompressed_siblings_by_accept_encoding(tmp_path):
    import gzip

    (tmp_path / "app.js").write_bytes(b"let x = 1;\n" * 100)
    (tmp_path / "app.js.gz").write_bytes(gzip.compress((tmp_path / "app.js").read_bytes()))
    (tmp_path / "app.js.br").write_bytes(b"BROTLI-BYTES")
    (tmp_path / "app.js.zst").write_bytes(b"ZSTD-BYTES")
    (tmp_path / "only.css").write_bytes(b"a{}")
    (tmp_path / "only.css.gz").write_bytes(gzip.compress(b"a{}"))
    s = Server("hello:app", "--static", f"/s={tmp_path}", "--static-precompressed").wait_ready()
    off = Server("hello:app", "--static", f"/s={tmp_path}").wait_ready()
    try:
        def get(server, path, accept):
            # httpx would decode gzip itself: the raw bytes are what is checked.
            status, head, body = raw(server.port, path, headers=f"Accept-Encoding: {accept}\r\n" if accept else "")
            fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
            return status, {k.decode().lower(): v.decode() for k, v in fields.items()}, body

        status, h, body = get(s, "/s/app.js", "gzip, deflate, br, zstd")
        assert status == 200 and body == b"BROTLI-BYTES" and h["content-encoding"] == "br"
        assert h["vary"] == "accept-encoding" and h["content-type"] == "text/javascript; charset=utf-8"
        status, h, body = get(s, "/s/app.js", "br;q=0.5, zstd;q=0.8")
        assert body == b"ZSTD-BYTES" and h["content-encoding"] == "zstd"
        status, h, body = get(s, "/s/app.js", "gzip")
        assert gzip.decompress(body) == (tmp_path / "app.js").read_bytes() and h["content-encoding"] == "gzip"
        gz_tag = h["etag"]
        status, h, body = get(s, "/s/app.js", "identity")
        assert body == (tmp_path / "app.js").read_bytes() and "content-encoding" not in h and h["vary"] == "accept-encoding"
        assert h["etag"] != gz_tag
        status, h, body = get(s, "/s/app.js", "br;q=0, gzip;q=0")
        assert "content-encoding" not in h
        status, h, body = get(s, "/s/only.css", "br, zstd, gzip;q=0.1")
        assert h["content-encoding"] == "gzip" and gzip.decompress(body) == b"a{}"
        status, h, _ = get(s, "/s/app.js", None)
        assert "content-encoding" not in h
        # Ranges and validators apply to the variant sent.
        status, h, body = get(s, "/s/app.js", "br")
        tag = h["etag"]
        status, _, body = raw(s.port, "/s/app.js", headers=f"Accept-Encoding: br\r\nIf-None-Match: {tag}\r\n")
        assert status == 304
        status, _, body = raw(s.port, "/s/app.js", headers="Accept-Encoding: br\r\nRange: bytes=0-5\r\n")
        assert status == 206 and body == b"BROTLI"
        # Off by default: the file itself, no vary.
        status, h, body = get(off, "/s/app.js", "br, gzip")
        assert body == (tmp_path / "app.js").read_bytes() and "content-encoding" not in h and "vary" not in h
    finally:
        s.kill()
        off.kill()


def test_sixteen_parallel_downloads_cost_no_file_sized_memory(server, tree):
    import threading
    import time

    _, _, blobs = tree
    want = hashlib.sha256(blobs["big.bin"]).digest()
    before = server.rss_kb()
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], server.rss_kb())
            time.sleep(0.02)

    def download(results, i):
        with httpx.Client(timeout=60) as client:
            results[i] = hashlib.sha256(client.get(f"{server.url}/static/big.bin").content).digest()

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
    assert results == [want] * 16
    # 16 x 8 MiB went out; the server grew by far less than one file.
    assert peak[0] - before < 4 * 1024, (before, peak[0])


def test_with_workers(tree):
    _, pub, blobs = tree
    s = Server("hello:app", "--static", f"/static={pub}", "--workers", "2").wait_ready()
    try:
        assert wait_for(lambda: httpx.get(f"{s.url}/static/small.txt").status_code == 200, timeout=20)
        for _ in range(10):
            assert httpx.get(f"{s.url}/static/small.txt").content == blobs["small.txt"]
    finally:
        s.stop()


def test_pipelined_static_and_app_requests_are_answered_in_order(server):
    import re

    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /static/small.txt HTTP/1.1\r\nHost: t\r\n\r\n"
                     b"POST /static/small.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nabcde"
                     b"GET /other HTTP/1.1\r\nHost: t\r\n\r\n"
                     b"GET /static/missing HTTP/1.1\r\nHost: t\r\n\r\n"
                     b"GET /static/small.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-4\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert re.findall(rb"HTTP/1.1 (\d+)", data) == [b"200", b"405", b"200", b"404", b"206"]
    assert data.endswith(b"\r\n\r\nhello")


def test_compression_brings_the_precompressed_siblings(tmp_path):
    import gzip

    (tmp_path / "app.js").write_bytes(b"let y = 2;\n" * 200)
    (tmp_path / "app.js.gz").write_bytes(gzip.compress((tmp_path / "app.js").read_bytes()))
    s = Server("hello:app", "--static", f"/s={tmp_path}", "--compression", "gzip").wait_ready()
    try:
        status, head, body = raw(s.port, "/s/app.js", headers="Accept-Encoding: gzip\r\n")
        assert status == 200 and b"content-encoding: gzip" in head.lower()
        assert gzip.decompress(body) == (tmp_path / "app.js").read_bytes()
        status, head, body = raw(s.port, "/s/app.js")
        assert b"content-encoding" not in head.lower() and body == (tmp_path / "app.js").read_bytes()
    finally:
        s.kill()
