"""HTTP/3's limits as settings, seen by a real client (aioquic): the transport parameters the
server sends (streams, windows, idle timeout), the Retry and the drops of the worker's
endpoint (handshakes before Retry, handshakes and connections at once), the handshake
timeout, and both congestion controllers serving a download. Their bounds and how they reach
the engine: tests/http3/test_http3_options.py. qlog: tests/http3/test_http3_qlog.py."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import time

import pytest

from tests.support.h3_support import H3Certs, h3_certs, start_h3_server  # noqa: F401 (fixture)
from tests.support.harness import Server, wait_for
from tests.support.tools import require_module

require_module("aioquic")
from aioquic.quic.connection import QuicConnection  # noqa: E402

from tests.apps.h3_app import pattern  # noqa: E402
from tests.support.h3client import configuration, h3_connect  # noqa: E402


def run(coro, timeout: float = 60.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def server_with(certs: H3Certs, *args: str) -> Server:
    return start_h3_server(certs, 1, *args)


def transport_parameters(server: Server, certs: H3Certs) -> dict:
    """What the client learnt of the server's transport parameters in the handshake."""
    async def go():
        async with h3_connect("127.0.0.1", server.port, certs.cafile) as client:
            quic = client._quic
            return {"streams": quic._remote_max_streams_bidi, "stream_window": quic._remote_max_stream_data_bidi_remote,
                    "connection_window": quic._remote_max_data, "idle": quic._remote_max_idle_timeout,
                    "status": (await client.request("GET", "/info")).status}

    return run(go())


def test_the_client_sees_the_streams_windows_and_idle_timeout_it_was_given(h3_certs):
    server = server_with(h3_certs)
    try:
        assert transport_parameters(server, h3_certs) == {
            "streams": 128, "stream_window": 64 * 1024, "connection_window": 1 << 20, "idle": 30.0, "status": 200}
    finally:
        server.stop()
    server = server_with(h3_certs, "--http3-max-streams", "7", "--http3-stream-window", "40000",
                         "--http3-connection-window", "300000", "--http3-idle-timeout", "12.5")
    try:
        assert transport_parameters(server, h3_certs) == {
            "streams": 7, "stream_window": 40000, "connection_window": 300000, "idle": 12.5, "status": 200}
    finally:
        server.stop()


def test_a_client_can_open_no_more_streams_than_it_was_given(h3_certs):
    """Four requests at once on a connection that allows two: aioquic queues the other two
    until the server raises MAX_STREAMS as the first ones end, and all four are answered."""
    server = server_with(h3_certs, "--http3-max-streams", "2")

    async def go():
        async with h3_connect("127.0.0.1", server.port, h3_certs.cafile) as client:
            responses = await asyncio.gather(*(client.request("GET", f"/info?n={i}") for i in range(4)))
            return [r.status for r in responses], client._quic._remote_max_streams_bidi

    try:
        statuses, max_streams = run(go())
        assert statuses == [200] * 4
        assert max_streams >= 4  # raised as streams ended
    finally:
        server.stop()


def half_open(port: int, certs: H3Certs) -> socket.socket:
    """A client's first Initial, sent and never followed up: a handshake the server keeps
    pending (until its handshake timeout). The socket is returned so the caller closes it."""
    quic = QuicConnection(configuration=configuration(certs.cafile))
    quic.connect(("127.0.0.1", port), now=time.time())
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for data, addr in quic.datagrams_to_send(now=time.time()):
        sock.sendto(data, addr)
    return sock


async def try_connect(server: Server, certs: H3Certs, timeout: float) -> int | None:
    """The Retry count of a connection that completes within `timeout`, None if none does."""
    try:
        async with h3_connect("127.0.0.1", server.port, certs.cafile, timeout=timeout) as client:
            assert (await client.request("GET", "/info")).status == 200
            return client._quic._retry_count
    except (TimeoutError, ConnectionError):
        return None


def test_from_n_pending_handshakes_a_new_client_goes_through_a_retry(h3_certs):
    server = server_with(h3_certs, "--http3-handshakes-before-retry", "1", "--http3-max-handshakes", "2")
    try:
        assert run(try_connect(server, h3_certs, 10.0)) == 0  # none pending: no Retry
        with half_open(server.port, h3_certs):
            time.sleep(0.2)
            assert run(try_connect(server, h3_certs, 10.0)) == 1  # one pending: Retry first
    finally:
        server.stop()


def test_past_the_pending_handshakes_bound_an_initial_is_dropped_until_the_handshake_timeout(h3_certs):
    """One handshake pending of one allowed: a new client is dropped (after its Retry); once
    the pending one's handshake timeout passed, the next client gets in."""
    server = server_with(h3_certs, "--http3-handshakes-before-retry", "1", "--http3-max-handshakes", "1",
                         "--http3-handshake-timeout", "3")
    try:
        with half_open(server.port, h3_certs):
            started = time.monotonic()
            assert run(try_connect(server, h3_certs, 0.5)) is None
            waited = time.monotonic() - started
            assert waited < 3.0  # the pending handshake was still there
            time.sleep(3.3 - waited)
            assert run(try_connect(server, h3_certs, 10.0)) == 0
    finally:
        server.stop()


def test_past_the_connections_bound_an_initial_is_dropped(h3_certs):
    server = server_with(h3_certs, "--http3-max-connections", "1", "--http3-max-handshakes", "1",
                         "--http3-handshakes-before-retry", "1")

    async def go():
        async with h3_connect("127.0.0.1", server.port, h3_certs.cafile) as first:
            assert (await first.request("GET", "/info")).status == 200
            second = await try_connect(server, h3_certs, 1.0)
        return second

    try:
        assert run(go()) is None
        # Once the first connection is gone (its close, then the draining period), a new one fits.
        assert wait_for(lambda: run(try_connect(server, h3_certs, 1.0)) == 0, timeout=15)
    finally:
        server.stop()


@pytest.mark.parametrize("algorithm", ["newreno", "cubic"])
def test_both_congestion_controllers_serve_a_download(h3_certs, algorithm):
    server = server_with(h3_certs, "--http3-congestion", algorithm)
    size = 4 << 20

    async def go():
        async with h3_connect("127.0.0.1", server.port, h3_certs.cafile) as client:
            return await client.request("GET", f"/large?bytes={size}")

    try:
        response = run(go())
        assert response.status == 200
        assert hashlib.sha256(response.body).digest() == hashlib.sha256(pattern(size)).digest()
    finally:
        server.stop()
