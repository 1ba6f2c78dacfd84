"""gRPC end to end: the real `grpcio` client against tests/apps/grpc_echo.py, a gRPC service
written as a plain ASGI app (raw byte messages, no protobuf).

gRPC needs HTTP/2 and response trailers: insecure channels speak h2c with prior knowledge
on the plain port, secure channels negotiate h2 over TLS by ALPN. Status goes out either
as trailers (a final HEADERS frame with END_STREAM) or "trailers-only" (the response's
only HEADERS frame carries grpc-status and ends the stream).
"""

import pytest

from tests.support.harness import Server, zigcorn_only
from tests.support.tools import require_module

pytestmark = zigcorn_only
grpc = require_module("grpc")
trustme = require_module("trustme")

TIMEOUT = 10
MB = 1024 * 1024


def identity(b: bytes) -> bytes:
    return b


def unary(channel, method: str):
    return channel.unary_unary(method, request_serializer=identity, response_deserializer=identity)


@pytest.fixture(scope="module")
def server():
    s = Server("grpc_echo:app")
    try:
        yield s.wait_ready()
    finally:
        s.kill()


@pytest.fixture
def channel(server):
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield ch


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """A TLS server for localhost and the CA certificate (PEM) that trusts it."""
    root = tmp_path_factory.mktemp("grpccerts")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    certfile = root / "server.pem"
    certfile.write_bytes(b"".join(p.bytes() for p in cert.cert_chain_pems))
    keyfile = root / "server.key"
    keyfile.write_bytes(cert.private_key_pem.bytes())
    s = Server("grpc_echo:app", "--ssl-certfile", str(certfile), "--ssl-keyfile", str(keyfile))
    try:
        yield s.wait_ready(), ca.cert_pem.bytes()
    finally:
        s.kill()


def test_unary_call(channel):
    response, call = unary(channel, "/test.Echo/Say").with_call(b"world", timeout=TIMEOUT)
    assert response == b"hello world"
    assert call.code() == grpc.StatusCode.OK


def test_unary_call_with_an_empty_message(channel):
    assert unary(channel, "/test.Echo/Say")(b"", timeout=TIMEOUT) == b"hello "


def test_server_streaming_delivers_every_message_in_order(channel):
    count = channel.unary_stream("/test.Echo/Count", request_serializer=identity, response_deserializer=identity)
    call = count(b"100", timeout=TIMEOUT)
    assert list(call) == [str(i).encode() for i in range(100)]
    assert call.code() == grpc.StatusCode.OK


def test_server_streaming_of_nothing(channel):
    count = channel.unary_stream("/test.Echo/Count", request_serializer=identity, response_deserializer=identity)
    call = count(b"0", timeout=TIMEOUT)
    assert list(call) == []
    assert call.code() == grpc.StatusCode.OK


def test_trailers_only_error_status(channel):
    with pytest.raises(grpc.RpcError) as info:
        unary(channel, "/test.Echo/Fail")(b"x", timeout=TIMEOUT)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert info.value.details() == "nothing here"


def test_unknown_method_is_unimplemented(channel):
    with pytest.raises(grpc.RpcError) as info:
        unary(channel, "/test.Echo/Nope")(b"x", timeout=TIMEOUT)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_the_channel_survives_errors(channel):
    """An error reply ends only its own stream: the connection carries on."""
    for _ in range(3):
        with pytest.raises(grpc.RpcError):
            unary(channel, "/test.Echo/Fail")(b"x", timeout=TIMEOUT)
        assert unary(channel, "/test.Echo/Say")(b"again", timeout=TIMEOUT) == b"hello again"


def test_concurrent_unary_calls_over_one_channel(channel):
    say = unary(channel, "/test.Echo/Say")
    futures = [say.future(f"n{i}".encode(), timeout=TIMEOUT) for i in range(50)]
    assert [f.result(timeout=TIMEOUT) for f in futures] == [f"hello n{i}".encode() for i in range(50)]


def test_a_one_mebibyte_request_is_echoed(channel):
    request = bytes(range(256)) * (MB // 256)
    response = unary(channel, "/test.Echo/Say")(request, timeout=TIMEOUT)
    assert len(response) == len(b"hello ") + MB
    assert response == b"hello " + request


def test_unary_call_over_tls(tls):
    server, ca_pem = tls
    credentials = grpc.ssl_channel_credentials(root_certificates=ca_pem)
    with grpc.secure_channel(f"localhost:{server.port}", credentials) as ch:
        response, call = unary(ch, "/test.Echo/Say").with_call(b"tls", timeout=TIMEOUT)
        assert response == b"hello tls"
        assert call.code() == grpc.StatusCode.OK
        with pytest.raises(grpc.RpcError) as info:
            unary(ch, "/test.Echo/Fail")(b"x", timeout=TIMEOUT)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert info.value.details() == "nothing here"
