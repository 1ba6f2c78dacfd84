"""--request-decompression: request bodies in gzip, br and zstd reach the app decoded over
HTTP/1.1 (Content-Length and chunked) and HTTP/2, plain and TLS, ASGI and WSGI; unknown or
stacked codings get 415, corrupt ones 400, and a decompression bomb 413 with flat memory."""

import gzip
import hashlib
import json
import socket
import ssl
import time
import zlib

import httpx
import pytest

from tests.support.harness import Server, zigcorn_only
from tests.support.tools import require_module

pytestmark = zigcorn_only
brotli = require_module("brotli")
zstandard = require_module("zstandard")

DOC = b"".join(b'{"id": %d, "name": "item %d", "tags": ["a", "b", "c"]}\n' % (i, i * 7) for i in range(6000))
ENCODE = {
    "gzip": lambda b: gzip.compress(b, 6),
    "br": lambda b: brotli.compress(b, quality=5),
    "zstd": lambda b: zstandard.ZstdCompressor(level=3).compress(b),
}
CODINGS = list(ENCODE)
LIMIT = 16 * 1024 * 1024


def expected(body: bytes) -> dict:
    return {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}


@pytest.fixture(scope="module")
def server():
    s = Server("decode_app:app", "--request-decompression", "--limit-request-body", str(LIMIT)).wait_ready()
    yield s
    s.kill()


@pytest.fixture(scope="module")
def wsgi_server():
    s = Server("decode_app:wsgi", "--interface", "wsgi", "--request-decompression").wait_ready()
    yield s
    s.kill()


def pieces(data: bytes, size: int = 997):
    for i in range(0, len(data), size):
        yield data[i:i + size]


def raw_post(server, body: bytes, *headers: str, chunked: bool = False, piece: int = 997,
             target: str = "/", version: str = "1.1") -> tuple[int, dict, bytes]:
    """One HTTP/1.x POST on a raw socket, its body written in small pieces (each a chunk
    when `chunked`); the status, the response's fields and its body."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        framing = "transfer-encoding: chunked" if chunked else f"content-length: {len(body)}"
        extra = "".join(f"{h}\r\n" for h in headers)
        s.sendall(f"POST {target} HTTP/{version}\r\nhost: x\r\nconnection: close\r\n{framing}\r\n{extra}\r\n".encode())
        try:
            for n, part in enumerate(pieces(body, piece)):
                s.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                if n % 16 == 0:
                    time.sleep(0.001)  # let pieces reach the server apart
            if chunked:
                s.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered early (413, 400) and closed
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), fields, rest


@pytest.mark.parametrize("coding", CODINGS)
@pytest.mark.parametrize("chunked", [False, True])
def test_http1_bodies_decoded(server, coding, chunked):
    status, _, body = raw_post(server, ENCODE[coding](DOC), f"content-encoding: {coding}", chunked=chunked, piece=61)
    assert status == 200
    got = json.loads(body)
    assert {k: got[k] for k in ("size", "sha256")} == expected(DOC)
    # The app sees a body of unknown length, as chunked: no coding, no length.
    assert got["headers"] == {"transfer-encoding": "chunked"}


def test_http10_body_decoded_without_a_chunked_field(server):
    # HTTP/1.0 has no chunked coding: the app sees neither a length nor transfer-encoding.
    status, _, body = raw_post(server, ENCODE["gzip"](DOC), "content-encoding: gzip", version="1.0")
    assert status == 200
    got = json.loads(body)
    assert {k: got[k] for k in ("size", "sha256")} == expected(DOC)
    assert got["headers"] == {}


@pytest.mark.parametrize("coding", CODINGS)
def test_http2_bodies_decoded(server, coding):
    with httpx.Client(http2=True, http1=False, timeout=20) as client:
        r = client.post(server.url + "/", content=pieces(ENCODE[coding](DOC), 113),
                        headers={"content-encoding": coding})
    assert r.http_version == "HTTP/2" and r.status_code == 200
    got = r.json()
    assert {k: got[k] for k in ("size", "sha256")} == expected(DOC)
    assert got["headers"] == {}


def test_x_gzip_and_gzip_members_in_series(server):
    two = gzip.compress(DOC[:5000]) + gzip.compress(DOC[5000:])
    status, _, body = raw_post(server, two, "content-encoding: x-gzip")
    assert status == 200 and json.loads(body)["sha256"] == expected(DOC)["sha256"]


def test_empty_coded_body_is_empty(server):
    status, _, body = raw_post(server, b"", "content-encoding: gzip")
    assert status == 200 and json.loads(body)["size"] == 0


@pytest.mark.parametrize("coding", ["deflate", "compress", "gzip, br", "br, gzip"])
def test_unknown_or_stacked_codings_get_415(server, coding):
    status, fields, body = raw_post(server, b"x" * 100, f"content-encoding: {coding}")
    assert status == 415
    assert fields["accept-encoding"] == "gzip, br, zstd"
    assert b"size" not in body  # the app never ran
    with httpx.Client(http2=True, http1=False, timeout=20) as client:
        r = client.post(server.url + "/", content=b"x" * 100, headers={"content-encoding": coding})
    assert r.http_version == "HTTP/2" and r.status_code == 415


@pytest.mark.parametrize("coding", CODINGS)
def test_corrupt_and_truncated_bodies_get_400(server, coding):
    coded = ENCODE[coding](DOC)
    for bad in (coded[: len(coded) // 2], b"\x00garbage" * 50, coded + b"trailing junk"):
        status, _, _ = raw_post(server, bad, f"content-encoding: {coding}")
        assert status == 400
    with httpx.Client(http2=True, http1=False, timeout=20) as client:
        r = client.post(server.url + "/", content=coded[: len(coded) // 2], headers={"content-encoding": coding})
    assert r.status_code == 400
    # The server goes on serving.
    status, _, _ = raw_post(server, coded, f"content-encoding: {coding}")
    assert status == 200


def test_limit_counts_decoded_bytes_at_its_bounds(start_server):
    s = start_server("decode_app:app", "--request-decompression", "--limit-request-body", str(len(DOC)))
    coded = gzip.compress(DOC)
    status, _, _ = raw_post(s, coded, "content-encoding: gzip")
    assert status == 200
    status, _, _ = raw_post(s, gzip.compress(DOC + b"x"), "content-encoding: gzip")
    assert status == 413


def gzip_bomb(decoded_bytes: int) -> bytes:
    """`decoded_bytes` of zeros gzipped: members of 64 MiB in series (about 1000:1)."""
    member = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    one = b"".join(member.compress(zeros) for _ in range(64)) + member.flush()
    return one * (decoded_bytes // (64 << 20))


def test_decompression_bomb_gets_413_with_flat_memory(server):
    bomb = gzip_bomb(10 << 30)  # 10 GiB of zeros in about 10 MB
    assert len(bomb) < 12 << 20
    raw_post(server, gzip.compress(DOC), "content-encoding: gzip")  # warm up
    before = server.rss_kb()
    status, _, _ = raw_post(server, bomb, "content-encoding: gzip", piece=65536)
    assert status == 413
    zbomb = zstandard.ZstdCompressor(level=3).compress(bytes(256 << 20))
    with httpx.Client(http2=True, http1=False, timeout=20) as client:
        r = client.post(server.url + "/", content=pieces(zbomb, 4096), headers={"content-encoding": "zstd"})
    assert r.status_code == 413
    # The decoder never runs more than a window ahead of the app: memory stays flat.
    assert server.rss_kb() - before < 24 * 1024


def test_off_by_default_the_app_sees_the_coded_body(start_server):
    s = start_server("decode_app:app")
    coded = gzip.compress(DOC)
    status, _, body = raw_post(s, coded, "content-encoding: gzip")
    got = json.loads(body)
    assert status == 200 and got["sha256"] == expected(coded)["sha256"]
    assert got["headers"] == {"content-encoding": "gzip", "content-length": str(len(coded))}
    status, _, _ = raw_post(s, b"x", "content-encoding: deflate")
    assert status == 200


@pytest.mark.parametrize("coding", CODINGS)
def test_wsgi_reads_decoded_bytes(wsgi_server, coding):
    coded = ENCODE[coding](DOC)
    for chunked in (False, True):
        status, _, body = raw_post(wsgi_server, coded, f"content-encoding: {coding}", chunked=chunked)
        got = json.loads(body)
        assert status == 200 and {k: got[k] for k in ("size", "sha256")} == expected(DOC)
        assert "content-encoding" not in got["headers"] and "content-length" not in got["headers"]
    with httpx.Client(http2=True, http1=False, timeout=20) as client:
        r = client.post(wsgi_server.url + "/", content=pieces(coded, 500), headers={"content-encoding": coding})
    assert r.status_code == 200 and r.json()["sha256"] == expected(DOC)["sha256"]


def test_tls_http1_and_http2(tmp_path):
    trustme = require_module("trustme")
    ca = trustme.CA()
    pem = tmp_path / "server.pem"
    pem.write_bytes(ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.bytes())
    s = Server("decode_app:app", "--request-decompression", "--ssl-certfile", str(pem))
    s.url = f"https://127.0.0.1:{s.port}"
    try:
        s.wait_ready()
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        for http2 in (False, True):
            with httpx.Client(verify=ctx, http2=http2, timeout=20) as client:
                for coding in CODINGS:
                    r = client.post(s.url + "/", content=pieces(ENCODE[coding](DOC), 300),
                                    headers={"content-encoding": coding})
                    assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
                    assert r.status_code == 200 and r.json()["sha256"] == expected(DOC)["sha256"]
    finally:
        s.kill()


def test_corrupt_body_after_the_response_started_cuts_it(server):
    bad = gzip.compress(DOC)[:3000] + b"\xff" * 3000
    status, fields, body = raw_post(server, bad, "content-encoding: gzip", chunked=True, target="/?early")
    # HTTP/1.1: the connection closes before the chunked body's last chunk.
    assert status == 200 and b"started" in body and not body.endswith(b"0\r\n\r\n")
    with httpx.Client(http2=True, http1=False, timeout=20) as client:
        with pytest.raises(httpx.RemoteProtocolError):  # HTTP/2: the stream is reset
            client.post(server.url + "/?early", content=bad, headers={"content-encoding": "gzip"})
    status, _, body = raw_post(server, gzip.compress(DOC), "content-encoding: gzip", target="/?early")
    assert status == 200 and b"whole body read" in body and body.endswith(b"0\r\n\r\n")


def test_missing_library_said_once_and_its_coding_refused(start_server, tmp_path):
    # An unloadable libbrotlidec.so.1 found first: dlopen fails as if it were absent.
    (tmp_path / "libbrotlidec.so.1").write_bytes(b"not a library")
    s = start_server("decode_app:app", "--request-decompression", "--log-level", "info",
                     env={"LD_LIBRARY_PATH": str(tmp_path)})
    status, fields, _ = raw_post(s, brotli.compress(DOC), "content-encoding: br")
    assert status == 415 and fields["accept-encoding"] == "gzip, zstd"
    status, _, _ = raw_post(s, gzip.compress(DOC), "content-encoding: gzip")
    assert status == 200
    assert s.output().count("libbrotlidec.so.1 cannot be loaded") == 1
    # The engine's 415 has its access line, as the app's answers do.
    assert '"POST / HTTP/1.1" 415' in s.output()


def test_decoded_body_beside_request_ids_and_trace_context(start_server):
    """Three fields appended to what the app sees at once (request id, traceparent and the
    decoded body's transfer-encoding), twice, so the engine's cached pairs are reused."""
    s = start_server("decode_app:app", "--request-decompression", "--request-id-header", "x-request-id",
                     "--trace-context")
    for _ in range(3):
        status, fields, body = raw_post(s, ENCODE["gzip"](DOC), "content-encoding: gzip", piece=4096)
        assert status == 200
        got = json.loads(body)
        assert {k: got[k] for k in ("size", "sha256")} == expected(DOC)
        assert got["headers"] == {"transfer-encoding": "chunked"}
        assert len(fields["x-request-id"]) == 32
    assert s.proc.poll() is None
