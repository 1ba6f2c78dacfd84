"""Datagram sizes and ECN on the wire (RFC 9000 14.3 and 13.4): aioquic's client downloads
through a UDP relay on loopback (`Relay`, a thread in this process) that reads each server
datagram's size and the ECN bits of its IP header (IP_RECVTOS), and marks the client's
datagrams ECT(0) on their way to the server. aioquic sends no path MTU probes of its own and
takes datagrams of any size: the server's path MTU search must raise its datagrams from 1,200
bytes to loopback's ceiling here (our 1,500-byte buffers). aioquic reports no ECN counts in
its ACK frames, so the server's ECN validation must fail at its first ACK of marked packets,
and the rest go unmarked (13.4.2.1). quic-go's client reads the marks and reports them (the relay
passes the server's on, `keep_marks`): validation passes, and every datagram after the
handshake stays marked. Both I/O backends.
"""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import subprocess
import threading

import pytest

from tests.http3.test_http3_interop import quic_go  # noqa: F401 (fixture)
from tests.support.h3_support import H3Certs, h3_certs  # noqa: F401 (fixture)
from tests.support.harness import Server
from tests.support.tools import require_module

require_module("aioquic")
from tests.apps.h3_app import pattern  # noqa: E402
from tests.support.h3client import MB, h3_connect  # noqa: E402

ECT0 = 2


class Relay:
    """Forwards the client's datagrams to the server from `outside` (marked ECT(0) with
    IP_TOS) and the server's back; notes each server datagram's (size, ECN bits)."""

    def __init__(self, server_port: int, keep_marks: bool = False, hole_after: int = 0) -> None:
        self.server = ("127.0.0.1", server_port)
        self.keep_marks = keep_marks
        # After this many server datagrams (0: never), those over 1,200 bytes are dropped:
        # a route that stopped carrying them, with no ICMP to say so.
        self.hole_after = hole_after
        self.inside = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.inside.bind(("127.0.0.1", 0))
        self.port = self.inside.getsockname()[1]
        self.outside = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.outside.bind(("127.0.0.1", 0))
        self.outside.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, ECT0)
        self.outside.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        self.client = None
        self.from_server: list[tuple[int, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            ready, _, _ = select.select([self.inside, self.outside], [], [], 0.05)
            for s in ready:
                if s is self.inside:
                    data, self.client = self.inside.recvfrom(65535)
                    self.outside.sendto(data, self.server)
                    continue
                data, ancillary, _, _ = self.outside.recvmsg(65535, socket.CMSG_SPACE(4))
                tos = 0
                for level, kind, value in ancillary:
                    if level == socket.IPPROTO_IP and kind == socket.IP_TOS and value:
                        tos = value[0]
                self.from_server.append((len(data), tos & 3))
                if self.client is None:
                    continue
                if 0 < self.hole_after < len(self.from_server) and len(data) > 1200:
                    continue
                if self.keep_marks:
                    mark = [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", tos & 3))]
                    self.inside.sendmsg([data], mark, 0, self.client)
                else:
                    self.inside.sendto(data, self.client)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.inside.close()
        self.outside.close()


@pytest.fixture(scope="module", params=["epoll", "io_uring"])
def server(request, h3_certs):
    if request.param == "io_uring":
        from tests.engine.test_io_uring import _io_uring_works

        if not _io_uring_works():
            pytest.skip("this kernel refuses io_uring")
    server = Server("h3_app:app", *h3_certs.server_args(), "--http3", "--workers", "1",
                    env={"ZIGCORN_IO_BACKEND": request.param})
    server.wait_ready(timeout=30)
    yield server
    server.stop()


async def _download(server: Server, certs: H3Certs, size: int, **relay_args) -> tuple[bytes, Relay]:
    relay = Relay(server.port, **relay_args)
    try:
        async with h3_connect("127.0.0.1", relay.port, certs.cafile) as client:
            response = await client.request("GET", f"/large?bytes={size}", timeout=60)
            assert response.status == 200
            return response.body, relay
    finally:
        relay.close()


def test_datagrams_grow_past_1200_and_ecn_stops_without_counts(server, h3_certs):
    body, relay = asyncio.run(asyncio.wait_for(_download(server, h3_certs, 2 * MB), 90))
    assert body == pattern(2 * MB)
    sizes = [size for size, _ in relay.from_server]
    # Every datagram within our ceiling; the search reached it, and the bulk of the
    # download went at the larger size.
    assert max(sizes) == 1500, sorted(set(sizes))
    full = sum(1 for s in sizes if s == 1500)
    assert full > len(sizes) // 2, (full, len(sizes))
    # ECN: the datagrams after the handshake went ECT(0) until aioquic's first ACK of one,
    # which carried no counts: validation failed and marking stopped for good. One short
    # run of marks, then none (the handshake's datagrams are never marked).
    marks = [ecn for _, ecn in relay.from_server]
    marked = [i for i, m in enumerate(marks) if m == ECT0]
    assert marked and marked[-1] - marked[0] + 1 == len(marked), marked
    assert len(marked) < 64 and len(marks) > 1000, (len(marked), len(marks))
    assert all(m in (0, ECT0) for m in marks)
    assert marks[0] == 0  # the handshake's first flight
    assert marks[-1] == 0


def test_quic_go_reports_the_marks_and_ecn_stays_on(server, h3_certs, quic_go):  # noqa: F811
    relay = Relay(server.port, keep_marks=True)
    try:
        cmd = [str(quic_go), "download", "-size", str(4 * MB), "-addr", f"127.0.0.1:{relay.port}",
               "-ca", h3_certs.cafile, "-timeout", "50s"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{server.output()[-4000:]}"
    finally:
        relay.close()
    sizes = [size for size, _ in relay.from_server]
    marks = [ecn for _, ecn in relay.from_server]
    # quic-go's max_udp_payload_size is 1,452: the search stops exactly there.
    assert max(sizes) == 1452, sorted(set(sizes))
    assert sum(1 for s in sizes if s == 1452) > len(sizes) // 2
    # After the handshake's few datagrams, the ten testing packets, then (validated by
    # quic-go's counts) every datagram to the end.
    assert marks[0] == 0
    assert sum(1 for m in marks if m == ECT0) > len(marks) // 2, marks[:40]
    assert marks[-1] == ECT0, marks[-40:]


def test_a_black_hole_for_large_datagrams_falls_back_to_1200(server, h3_certs):
    """Large datagrams vanish from the 300th on: the server's PTO probes go at 1,200 bytes
    from the second timeout, are acknowledged, the large packets are found lost, and the size
    falls back to 1,200: the download completes, its rest in 1,200-byte datagrams."""
    body, relay = asyncio.run(asyncio.wait_for(_download(server, h3_certs, 2 * MB, hole_after=300), 90))
    assert body == pattern(2 * MB)
    sizes = [size for size, _ in relay.from_server]
    assert max(sizes[:300]) == 1500
    late = sizes[len(sizes) // 2:]
    assert max(late) <= 1200 and len(late) > 300, (max(late), len(late))
