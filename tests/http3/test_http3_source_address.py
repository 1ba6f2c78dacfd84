"""HTTP/3 on a wildcard address (``--host 0.0.0.0`` or ``::``) of a host with several
addresses: every datagram the server sends leaves from the address its client sent to
(src/zig/transport/udp.zig sets it with IP_PKTINFO / IPV6_PKTINFO), on both I/O backends.
The master binds the UDP socket (src/zigcorn/sockets.py); the worker asks for each
datagram's destination on it (`udp.Socket.adopt`). A dual-stack socket (IPv4-mapped
peers) is never bound by zigcorn (``::`` is IPv6 only): udp.zig's unit tests cover it.

The loopback interface answers on all of 127.0.0.0/8 and the kernel's own choice of source
for any of them is 127.0.0.1: a reply to what came in on 127.0.0.2 that left without the
control message would come from 127.0.0.1, and a real client (aioquic's, here) drops it.
Each kind of datagram is checked with a plain socket and ``recvfrom``: the connection's
own (the handshake's first flight), a Retry, a Version Negotiation, a Stateless Reset.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time

import pytest

from tests.support.harness import Server
from tests.support.h3_support import H3Certs, h3_certs  # noqa: F401 (the fixture)
from tests.support.tools import require_module

require_module("aioquic")
from aioquic.quic.connection import QuicConnection  # noqa: E402

from tests.support.h3client import configuration, h3_connect  # noqa: E402

OTHER = "127.0.0.2"
QUIC_V1 = 0x00000001


def _loopback_answers_on(addr: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((addr, 0))
        return True
    except OSError:
        return False


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _loopback_answers_on(OTHER), reason=f"{OTHER} is not a local address here")


def _backend_or_skip(backend: str) -> str:
    if backend == "io_uring":
        from tests.engine.test_io_uring import _io_uring_works

        if not _io_uring_works():
            pytest.skip("this kernel refuses io_uring")
    return backend


def start(certs: H3Certs, host: str, backend: str, *extra: str, workers: int = 1) -> Server:
    server = Server("h3_app:app", *certs.server_args(), "--http3", "--workers", str(workers), "--host", host,
                    *extra, env={"ZIGCORN_IO_BACKEND": backend})
    if host != "::":
        return server.wait_ready(timeout=30)
    # On :: the listeners take IPv6 only (IPV6_V6ONLY, as zigcorn binds them).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"server exited early:\n{server.output()}")
        try:
            socket.create_connection(("::1", server.port), timeout=0.5).close()
            return server
        except OSError:
            time.sleep(0.05)
    server.kill()
    pytest.fail(f"server did not listen on [::1]:{server.port}:\n{server.output()}")


@pytest.fixture(scope="module", params=["epoll", "io_uring"])
def backend(request) -> str:
    return _backend_or_skip(request.param)


@pytest.fixture(scope="module")
def wildcard_server(h3_certs, backend):
    """One worker on 0.0.0.0."""
    server = start(h3_certs, "0.0.0.0", backend)
    yield server
    server.stop()


def client_initial(certs: H3Certs, addr: tuple[str, int]) -> list[bytes]:
    """The first flight of a fresh aioquic client to `addr` (its Initial, padded)."""
    conn = QuicConnection(configuration=configuration(certs.cafile))
    conn.connect(addr, now=time.monotonic())
    return [data for data, _ in conn.datagrams_to_send(now=time.monotonic())]


def exchange(datagrams: list[bytes], to: tuple[str, int], family: int = socket.AF_INET,
             bind: str = "") -> list[tuple[bytes, tuple]]:
    """Sends `datagrams` from a fresh socket to `to`; every datagram that comes back within
    a moment of the first, with the address it came from."""
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.bind((bind, 0))
        for d in datagrams:
            s.sendto(d, to)
        s.settimeout(5.0)
        got = [s.recvfrom(65535)]
        s.settimeout(0.3)
        try:
            while True:
                got.append(s.recvfrom(65535))
        except TimeoutError:
            pass
    return got


def sources(replies: list[tuple[bytes, tuple]]) -> set[str]:
    return {addr[0] for _, addr in replies}


def version_negotiation_probe() -> bytes:
    """A long-header packet of a version nobody speaks (0x?a?a?a?a is reserved to force
    Version Negotiation, RFC 9000 15), as long as an Initial must be."""
    dcid, scid = os.urandom(8), os.urandom(8)
    head = bytes([0xC0]) + (0x1A2A3A4A).to_bytes(4, "big") + bytes([len(dcid)]) + dcid + bytes([len(scid)]) + scid
    return head + os.urandom(1200 - len(head))


def short_header_probe() -> bytes:
    """A 1-RTT packet for a connection the server never had: its answer is a Stateless Reset.
    The connection ID's first byte names the worker (0, the only one) that answers."""
    return bytes([0x40 | (os.urandom(1)[0] & 0x3F), 0]) + os.urandom(98)


@pytest.mark.parametrize("dest", ["127.0.0.1", OTHER])
def test_handshake_reply_leaves_from_the_address_the_client_used(wildcard_server, h3_certs, dest):
    to = (dest, wildcard_server.port)
    replies = exchange(client_initial(h3_certs, to), to)
    assert sources(replies) == {dest}


@pytest.mark.parametrize("dest", ["127.0.0.1", OTHER])
def test_version_negotiation_leaves_from_the_address_the_client_used(wildcard_server, dest):
    replies = exchange([version_negotiation_probe()], (dest, wildcard_server.port))
    assert replies[0][0][1:5] == b"\0\0\0\0", "not a Version Negotiation packet"
    assert sources(replies) == {dest}


@pytest.mark.parametrize("dest", ["127.0.0.1", OTHER])
def test_stateless_reset_leaves_from_the_address_the_client_used(wildcard_server, dest):
    replies = exchange([short_header_probe()], (dest, wildcard_server.port))
    assert replies[0][0][0] & 0xC0 == 0x40, "not a Stateless Reset (a short header)"
    assert sources(replies) == {dest}


def test_on_ipv6_any_the_answers_leave_from_the_ipv6_address(h3_certs, backend):
    """The IPv6 control message (IPV6_PKTINFO) on both ways, and a request through it.
    Loopback has one IPv6 address: this checks that the path works, not the choice."""
    if not _ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    server = start(h3_certs, "::", backend)
    try:
        to = ("::1", server.port)
        assert sources(exchange(client_initial(h3_certs, to), to, family=socket.AF_INET6)) == {"::1"}
        assert sources(exchange([version_negotiation_probe()], to, family=socket.AF_INET6)) == {"::1"}

        async def go():
            async with h3_connect("::1", server.port, h3_certs.cafile) as client:
                return await client.request("GET", "/info")

        assert asyncio.run(asyncio.wait_for(go(), 30)).status == 200
    finally:
        server.stop()


@pytest.mark.parametrize("dest", ["127.0.0.1", OTHER])
def test_a_request_completes_through_the_address_the_client_used(wildcard_server, h3_certs, dest):
    async def go():
        async with h3_connect(dest, wildcard_server.port, h3_certs.cafile) as client:
            return await client.request("GET", "/info")

    response = asyncio.run(asyncio.wait_for(go(), 30))
    assert response.status == 200
    assert response.json()["http_version"] == "3"


def test_with_four_workers_each_worker_answers_from_the_address_the_client_used(h3_certs, backend):
    """Each worker has its own socket of the port's SO_REUSEPORT group: each is adopted."""
    server = start(h3_certs, "0.0.0.0", backend, workers=4)
    try:
        async def go():
            pids = set()
            for _ in range(12):
                async with h3_connect(OTHER, server.port, h3_certs.cafile) as client:
                    response = await client.request("GET", "/info")
                    assert response.status == 200
                    pids.add(response.json()["pid"])
            return pids

        # Each first Initial lands on a random worker: 12 on one of 4 is 4**-11 likely.
        assert len(asyncio.run(asyncio.wait_for(go(), 60))) > 1
    finally:
        server.stop()


def test_retry_leaves_from_the_address_the_client_used(h3_certs, backend):
    server = start(h3_certs, "0.0.0.0", backend, "--http3-retry", "always")
    try:
        to = (OTHER, server.port)
        replies = exchange(client_initial(h3_certs, to), to)
        first = replies[0][0]
        assert first[0] & 0xF0 == 0xF0 and first[1:5] == QUIC_V1.to_bytes(4, "big"), "not a Retry"
        assert sources(replies) == {OTHER}

        async def go():
            async with h3_connect(OTHER, server.port, h3_certs.cafile) as client:
                return await client.request("GET", "/info")

        assert asyncio.run(asyncio.wait_for(go(), 30)).status == 200
    finally:
        server.stop()


def test_a_refusal_while_draining_leaves_from_the_address_the_client_used(h3_certs, backend):
    """Once the drain begins, a new client's Initial is answered with an Initial carrying
    CONNECTION_CLOSE (CONNECTION_REFUSED), made by the endpoint without a connection."""
    from tests.support.harness import wait_for

    server = start(h3_certs, "0.0.0.0", backend)
    try:
        async def main():
            async with h3_connect("127.0.0.1", server.port, h3_certs.cafile) as client:
                stream_id = client.start("GET", "/slow?ms=2000")
                pending = client.responses[stream_id]
                assert await asyncio.to_thread(wait_for, lambda: "SLOW-START" in server.output(), 10)
                server.proc.send_signal(signal.SIGTERM)
                assert await asyncio.to_thread(wait_for, lambda: "Shutting down" in server.output(), 10)
                await asyncio.sleep(0.2)
                to = (OTHER, server.port)
                replies = await asyncio.to_thread(exchange, client_initial(h3_certs, to), to)
                await asyncio.wait_for(pending.done, 10)
                return replies

        replies = asyncio.run(asyncio.wait_for(main(), 30))
        first = replies[0][0]
        assert first[0] & 0xF0 == 0xC0 and first[1:5] == QUIC_V1.to_bytes(4, "big"), "not an Initial"
        assert sources(replies) == {OTHER}
        assert server.wait(15) == 0, server.output()
    finally:
        server.kill()
