"""HTTP/3's send path under a full socket: what congestion control let go is never dropped
when the kernel's buffer is full. Loopback frees a datagram's buffer as soon as it is sent,
so its sendmmsg never says EAGAIN; the worker's test hook ``ZIGCORN_TEST_UDP_FULL_EVERY=N``
makes every Nth call take half its batch and then report the buffer full, as a slow device
would. The worker keeps the rest, waits for the socket's writability (epoll and io_uring)
and prints its counts when it stops; aioquic's client downloads several MiB meanwhile.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.support.h3_support import H3Certs, h3_certs  # noqa: F401 (fixture)
from tests.support.harness import Server, zigcorn_only
from tests.support.tools import require_module

require_module("aioquic")
from tests.apps.h3_app import pattern  # noqa: E402
from tests.support.h3client import MB, h3_connect  # noqa: E402

pytestmark = zigcorn_only

FIELDS = ("queued", "waiting", "calls", "datagrams", "blocked", "dropped", "writable")
COUNTS = re.compile("zigcorn-test udp: " + " ".join(rf"{f}=(\d+)" for f in FIELDS))


@pytest.mark.parametrize("backend", ["epoll", "io_uring"])
def test_a_full_socket_keeps_every_datagram_until_writable(h3_certs, backend):
    size = 6 * MB
    server = _start(h3_certs, backend)
    try:

        async def go():
            async with h3_connect("127.0.0.1", server.port, h3_certs.cafile) as client:
                return await client.request("GET", f"/large?bytes={size}", timeout=60)

        response = asyncio.run(asyncio.wait_for(go(), 90))
        assert response.status == 200
        assert bytes(response.body) == pattern(size)
    finally:
        server.stop()
    found = COUNTS.search(server.output())
    assert found, server.output()[-2000:]
    queued, waiting, calls, datagrams, blocked, dropped, writable = map(int, found.groups())
    # 6 MiB in 1,200-byte datagrams: ~5,000 of them, the socket "full" every third call.
    assert datagrams > size // 1500
    assert calls > 0 and blocked >= 10
    assert dropped == 0
    # Every datagram queued went to the kernel (but what the stop left waiting).
    assert queued == datagrams + waiting
    # Each "full" was followed by the socket's writability, reported by the backend.
    assert writable >= blocked // 2


def _start(certs: H3Certs, backend: str):
    server = Server(
        "h3_app:app", *certs.server_args(), "--http3", "--workers", "1", "--io-backend", backend,
        env={"ZIGCORN_TEST_UDP_FULL_EVERY": "3"},
    )
    server.url = f"https://127.0.0.1:{server.port}"
    return server.wait_ready(timeout=30)
