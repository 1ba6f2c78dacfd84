"""--compression: one-shot responses compressed by the engine (gzip, br, zstd), chosen
against accept-encoding with q-values; the cases never compressed; vary, ETag and length;
HTTP/2 and TLS. Every compressed body is decoded and compared with the app's bytes."""

import gzip
import zlib
import socket
import ssl

import httpx
import pytest

from tests.apps.compress_app import DOC
from tests.support.harness import Server, zigcorn_only
from tests.support.tools import require_module

pytestmark = zigcorn_only
brotli = require_module("brotli")
zstandard = require_module("zstandard")

DECODE = {
    "gzip": gzip.decompress,
    "br": brotli.decompress,
    "zstd": lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b),
}


@pytest.fixture(scope="module")
def server():
    s = Server("compress_app:app", "--compression", "zstd,br,gzip").wait_ready()
    yield s
    s.kill()


def raw_get(server, target: str, *headers: str, method: str = "GET") -> tuple[str, dict, bytes]:
    """One HTTP/1.1 request on a raw socket: the status line, the header fields, the body as sent."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        extra = "".join(f"{h}\r\n" for h in headers)
        s.sendall(f"{method} {target} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{extra}\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields.setdefault(name.strip().lower(), value.strip())
    return lines[0], fields, body


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
def test_each_encoding_round_trips_with_its_length(server, encoding):
    status, fields, body = raw_get(server, "/", f"accept-encoding: {encoding}")
    assert status.startswith("HTTP/1.1 200")
    assert fields["content-encoding"] == encoding
    assert fields["vary"] == "accept-encoding"
    assert int(fields["content-length"]) == len(body) < len(DOC) // 3
    assert "transfer-encoding" not in fields
    assert DECODE[encoding](body) == DOC


def test_httpx_decodes_the_servers_preference(server):
    r = httpx.get(server.url + "/", headers={"accept-encoding": "gzip, br, zstd"})
    assert r.headers["content-encoding"] == "zstd"
    assert r.content == DOC


@pytest.mark.parametrize(("accept", "chosen"), [
    ("gzip;q=1, br;q=0.5, zstd;q=0.1", "gzip"),
    ("zstd;q=0, br;q=0, gzip", "gzip"),
    ("*", "zstd"),
    ("zstd;q=0, *;q=0.3", "br"),
    ("*;q=0", None),
    ("identity", None),
    ("deflate", None),
    ("gzip;q=0", None),
    ("br;q=0.001", "br"),
])
def test_q_values(server, accept, chosen):
    _, fields, body = raw_get(server, "/", f"accept-encoding: {accept}")
    assert fields.get("content-encoding") == chosen
    assert (DECODE[chosen](body) if chosen else body) == DOC


@pytest.mark.parametrize("target", [
    "/?size=1023",                      # under --compression-min-size
    "/?type=image/png",                 # not a listed type
    "/?content-encoding=identity",      # already encoded
    "/?cache-control=no-transform",
    "/?status=206",
    "/?status=204",
])
def test_never_compressed(server, target):
    status, fields, body = raw_get(server, target, "accept-encoding: gzip")
    assert "content-encoding" not in fields or fields["content-encoding"] == "identity"
    assert "vary" not in fields
    if not status.startswith("HTTP/1.1 204"):
        assert int(fields["content-length"]) == len(body)


def test_several_accept_encoding_fields_are_one_list(server):
    _, fields, body = raw_get(server, "/", "accept-encoding: deflate", "accept-encoding: gzip")
    assert fields["content-encoding"] == "gzip" and gzip.decompress(body) == DOC


def test_no_accept_encoding_no_compression(server):
    _, fields, body = raw_get(server, "/")
    assert "content-encoding" not in fields and body == DOC


def test_head_is_not_compressed(server):
    status, fields, body = raw_get(server, "/", "accept-encoding: gzip", method="HEAD")
    assert status.startswith("HTTP/1.1 200")
    assert "content-encoding" not in fields and body == b""


def test_plus_json_and_text_types(server):
    for t in ("application/problem%2Bjson", "text/html;%20charset=utf-8", "image/svg%2Bxml"):
        _, fields, body = raw_get(server, f"/?type={t}", "accept-encoding: gzip")
        assert fields["content-encoding"] == "gzip", t
        assert gzip.decompress(body) == DOC


def test_vary_merged_etag_weakened_length_recomputed(server):
    _, fields, body = raw_get(server, '/?vary=Cookie&etag="v1"&length=1', "accept-encoding: br")
    assert fields["content-encoding"] == "br"
    assert fields["vary"] == "Cookie, accept-encoding"
    assert fields["etag"] == 'W/"v1"'
    assert int(fields["content-length"]) == len(body)
    assert brotli.decompress(body) == DOC
    _, fields, _ = raw_get(server, '/?vary=Accept-Encoding&etag=W/"w"', "accept-encoding: br")
    assert fields["vary"] == "Accept-Encoding"
    assert fields["etag"] == 'W/"w"'


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
def test_streamed_responses_are_compressed_chunked(server, encoding):
    with httpx.Client() as client:
        with client.stream("GET", server.url + "/?chunks=5&length=1&etag=%22s%22",
                           headers={"accept-encoding": encoding}) as r:
            assert r.headers["content-encoding"] == encoding
            assert r.headers["transfer-encoding"] == "chunked"
            assert "content-length" not in r.headers
            assert r.headers["etag"] == 'W/"s"'
            raw = b"".join(r.iter_raw())
    assert len(raw) < len(DOC) // 3
    assert DECODE[encoding](raw) == DOC


def streaming_decoder(encoding):
    if encoding == "gzip":
        return zlib.decompressobj(wbits=31).decompress
    if encoding == "br":
        return brotli.Decompressor().process
    return zstandard.ZstdDecompressor().decompressobj().decompress


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
@pytest.mark.parametrize("http2", [False, True])
def test_sse_events_arrive_one_by_one_compressed(start_server, encoding, http2):
    # The app sends event N+1 only after the client acknowledged event N: without a
    # flush per message the first event would sit in the compressor and this would hang.
    s = start_server("sse_app:app", "--compression", encoding)
    with httpx.Client(http2=http2, http1=not http2, timeout=10) as client:
        with client.stream("GET", s.url + "/events", headers={"accept-encoding": encoding}) as r:
            assert r.headers["content-encoding"] == encoding
            decode = streaming_decoder(encoding)
            text = ""
            raw = r.iter_raw()
            for n in range(3):
                while f"data: event {n}\n\n" not in text:
                    text += decode(next(raw)).decode()
                assert "no ack" not in text
                client.get(s.url + f"/ack?n={n}")
            assert text.count("data: event") == 3


def test_keep_alive_after_compressed_responses(server):
    with httpx.Client() as client:
        for encoding in ("gzip", "br", "zstd", "gzip"):
            r = client.get(server.url + "/", headers={"accept-encoding": encoding})
            assert r.headers["content-encoding"] == encoding and r.content == DOC


def test_many_connections_at_once_with_the_writer_thread(start_server):
    """With other connections open the writer thread writes complete responses (the codec
    has run on the loop's thread first): every body still decodes whole, with its length,
    on every keep-alive connection."""
    s = start_server("compress_app:app", "--compression", "zstd,br,gzip", "--writer-thread", "on")
    socks = [socket.create_connection(("127.0.0.1", s.port), timeout=10) for _ in range(6)]
    try:
        for encoding in ("gzip", "br", "zstd", "gzip"):
            for sock in socks:  # all in flight together
                sock.sendall(f"GET / HTTP/1.1\r\nhost: x\r\naccept-encoding: {encoding}\r\n\r\n".encode())
            for sock in socks:
                head, body = read_response(sock)
                assert head.startswith(b"HTTP/1.1 200") and f"content-encoding: {encoding}".encode() in head
                assert DECODE[encoding](body) == DOC
    finally:
        for sock in socks:
            sock.close()


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One content-length framed response from a keep-alive socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the head"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    field = next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    length = int(field.split(b":")[1])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside the body"
        body += chunk
    assert len(body) == length
    return head, body


def test_http2_compressed(server):
    with httpx.Client(http2=True, http1=False) as client:  # h2c with prior knowledge
        for encoding in ("gzip", "br", "zstd"):
            r = client.get(server.url + "/?etag=%22e%22&length=1", headers={"accept-encoding": encoding})
            assert r.http_version == "HTTP/2"
            assert r.headers["content-encoding"] == encoding
            assert r.headers["vary"] == "accept-encoding"
            assert r.headers["etag"] == 'W/"e"'
            assert r.content == DOC
            # HTTP/2 frames the body with DATA and END_STREAM; the app's length is never kept.
            assert r.num_bytes_downloaded < len(DOC) // 3
            assert r.headers.get("content-length", str(r.num_bytes_downloaded)) == str(r.num_bytes_downloaded)


def test_tls_http1_and_http2(tmp_path):
    trustme = require_module("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    pem = tmp_path / "server.pem"
    pem.write_bytes(cert.private_key_and_cert_chain_pem.bytes())
    s = Server("compress_app:app", "--compression", "gzip,br", "--ssl-certfile", str(pem))
    s.url = f"https://127.0.0.1:{s.port}"
    try:
        s.wait_ready()
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        for http2 in (False, True):
            with httpx.Client(verify=ctx, http2=http2) as client:
                r = client.get(s.url + "/", headers={"accept-encoding": "br, gzip"})
                assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
                assert r.headers["content-encoding"] == "gzip"
                assert r.content == DOC
    finally:
        s.kill()


def test_off_by_default(start_server):
    s = start_server("compress_app:app")
    _, fields, body = raw_get(s, "/", "accept-encoding: gzip, br, zstd")
    assert "content-encoding" not in fields and body == DOC


def test_levels_and_min_size_flags(start_server):
    s = start_server("compress_app:app", "--compression", "gzip", "--compression-min-size", "0",
                     "--compression-gzip-level", "1")
    _, fields, body = raw_get(s, "/?size=10", "accept-encoding: gzip")
    assert fields["content-encoding"] == "gzip" and gzip.decompress(body) == DOC[:10]


def test_custom_types(start_server):
    s = start_server("compress_app:app", "--compression", "gzip", "--compression-types", "image/*")
    _, fields, _ = raw_get(s, "/", "accept-encoding: gzip")
    assert "content-encoding" not in fields
    _, fields, body = raw_get(s, "/?type=image/png", "accept-encoding: gzip")
    assert fields["content-encoding"] == "gzip" and gzip.decompress(body) == DOC


@pytest.mark.parametrize("target", ["/?raise=1", "/?nobody=1"])
def test_held_back_head_ends_as_without_compression(server, start_server, target):
    # The head of a compressible response waits for its first body message; an app that
    # fails or returns before one gets what it would get without --compression.
    plain = start_server("compress_app:app")
    got = raw_get(server, target, "accept-encoding: gzip")
    want = raw_get(plain, target, "accept-encoding: gzip")
    assert got[0] == want[0]
    assert got[2] == want[2]
    assert "content-encoding" not in got[1]
