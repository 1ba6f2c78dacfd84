"""A client's address changing under a live HTTP/3 connection (RFC 9000 9): aioquic's client
behind a NAT on loopback (`Nat`, a UDP relay in this process), which moves the connection to
a new source port as a NAT rebinding does, or lets an attacker race a copy of one client
datagram from an address of its own. The server must follow the client to its new address
after validating it (PATH_CHALLENGE, which aioquic answers), send an unvalidated address no
more than three times what came from it, and go back to the address it knew when the new
one does not answer. With 4 workers the moved packets must still reach the worker that owns
the connection (the BPF steering reads the connection ID, not the address).
"""

from __future__ import annotations

import asyncio

from tests.support.h3_support import H3Certs, h3_certs, h3_server  # noqa: F401 (fixtures)
from tests.support.harness import Server
from tests.support.tools import require_module

require_module("aioquic")
from tests.apps.h3_app import pattern  # noqa: E402
from tests.support.h3client import MB, h3_connect  # noqa: E402


def run(coro, timeout: float = 60.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


class _Side(asyncio.DatagramProtocol):
    def __init__(self, on_datagram) -> None:
        self.on_datagram = on_datagram

    def datagram_received(self, data: bytes, addr) -> None:
        self.on_datagram(data, addr)


class Nat:
    """The client talks to `port`; its datagrams leave for the server from the current
    outside socket. `rebind()` opens a new outside socket (a new source port) and closes the
    old one. `race_next_from_attacker()` sends the client's next datagram first from an
    attacker's socket, which forwards nothing back and counts what reaches it."""

    def __init__(self, server_port: int) -> None:
        self.server = ("127.0.0.1", server_port)
        self.client_addr = None
        self.outside = None
        self.attacker = None
        self.attacker_sent = 0
        self.attacker_received = 0
        self.race = False
        # The destination IDs of the server's short-header packets, by the outside port
        # they reached (aioquic's IDs are 8 bytes).
        self.dcids_by_port: dict[int, set[bytes]] = {}

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.inside, _ = await loop.create_datagram_endpoint(lambda: _Side(self._from_client),
                                                             local_addr=("127.0.0.1", 0))
        self.port = self.inside.get_extra_info("sockname")[1]
        self.outside = await self._socket(self._from_server)

    async def _socket(self, handler):
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _Side(handler), local_addr=("127.0.0.1", 0))
        return transport

    def outside_port(self) -> int:
        return self.outside.get_extra_info("sockname")[1]

    async def rebind(self) -> None:
        old, self.outside = self.outside, await self._socket(self._from_server)
        old.close()

    async def race_next_from_attacker(self) -> None:
        self.attacker = await self._socket(self._at_attacker)
        self.race = True

    def _from_client(self, data: bytes, addr) -> None:
        self.client_addr = addr
        if self.race:
            self.race = False
            self.attacker.sendto(data, self.server)
            self.attacker_sent += len(data)
        self.outside.sendto(data, self.server)

    def _from_server(self, data: bytes, addr) -> None:
        if data and not data[0] & 0x80:
            self.dcids_by_port.setdefault(self.outside_port(), set()).add(data[1:9])
        if self.client_addr is not None:
            self.inside.sendto(data, self.client_addr)

    def _at_attacker(self, data: bytes, addr) -> None:
        self.attacker_received += len(data)

    def close(self) -> None:
        for t in (self.inside, self.outside, self.attacker):
            if t is not None:
                t.close()


async def _through_nat(server: Server, certs: H3Certs, body):
    nat = Nat(server.port)
    await nat.start()
    try:
        async with h3_connect("127.0.0.1", nat.port, certs.cafile) as client:
            return await body(nat, client)
    finally:
        nat.close()


def test_a_nat_rebinding_moves_the_connection_after_validation(h3_server, h3_certs):
    async def body(nat: Nat, client):
        before = (await client.request("GET", "/info")).json()
        first_port = nat.outside_port()
        await nat.rebind()
        # The old mapping is gone: only the new address can carry the answers.
        after = [(await client.request("GET", f"/info?n={i}")).json() for i in range(3)]
        # A 1 MiB download goes at full speed only once the new address is validated: an
        # unvalidated one gets three times the client's ACKs, a few hundred bytes each.
        large = await client.request("GET", f"/large?bytes={MB}", timeout=20)
        return first_port, nat.outside_port(), before, after, large

    first_port, second_port, before, after, large = run(_through_nat(h3_server, h3_certs, body))
    assert before["client"][1] == first_port
    assert {i["client"][1] for i in after} == {second_port} != {first_port}
    assert {i["pid"] for i in after} == {before["pid"]}  # the same worker kept it
    assert large.status == 200 and bytes(large.body) == pattern(MB)


def test_a_raced_copy_from_an_attacker_gets_three_times_its_bytes_and_the_connection_stays(h3_server, h3_certs):
    async def body(nat: Nat, client):
        before = (await client.request("GET", "/info")).json()
        await nat.race_next_from_attacker()
        # The copy of the request for 1 MiB is the newest packet: the server moves to the
        # attacker's address, sends it a challenge it cannot answer and no more than three
        # times the copy's bytes, and comes back when the client's next packet (newer)
        # arrives from the address validated before.
        large = await client.request("GET", f"/large?bytes={MB}", timeout=20)
        later = [(await client.request("GET", f"/info?n={i}")).json() for i in range(3)]
        await asyncio.sleep(0.5)
        return before, large, later, nat.attacker_sent, nat.attacker_received

    before, large, later, sent, received = run(_through_nat(h3_server, h3_certs, body))
    assert large.status == 200 and bytes(large.body) == pattern(MB)
    assert {i["client"][1] for i in later} == {before["client"][1]}
    assert sent > 0 and received <= 3 * sent, (sent, received)


async def _spare_id(client, timeout: float = 5.0) -> None:
    """Waits until the client holds one of the server's spare connection IDs."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not client._quic._peer_cid_available:
        assert loop.time() < deadline, "the server issued no spare connection ID"
        await asyncio.sleep(0.01)


def test_a_client_moves_on_purpose_to_a_spare_id_and_a_new_port(h3_server, h3_certs):
    """RFC 9000 9.5: a client that migrates on purpose uses a new connection ID on the new
    path. The server issued spare IDs (NEW_CONNECTION_ID, as many as the client takes, 3
    beside the handshake's with aioquic's limit) and replaces each one the client retires;
    every one carries the worker's index, so with 4 workers each move still reaches the
    worker that owns the connection. Six moves: an ID steered at random would land on
    another of 4 workers with probability 3/4 each time. The server changes IDs too: no
    ID of the client's is seen on two ports."""

    async def body(nat: Nat, client):
        before = (await client.request("GET", "/info")).json()
        await _spare_id(client)
        offered = 1 + len(client._quic._peer_cid_available)
        first_cid = client._quic._peer_cid.cid
        moves = []
        for i in range(6):
            await _spare_id(client)
            client._quic.change_connection_id()  # retires the ID it used (RETIRE_CONNECTION_ID)
            await nat.rebind()
            info = (await client.request("GET", f"/info?move={i}", timeout=10)).json()
            moves.append((client._quic._peer_cid.cid, client._quic._peer_cid.sequence_number,
                          nat.outside_port(), info))
        large = await client.request("GET", f"/large?bytes={MB}", timeout=20)
        return before, offered, first_cid, moves, large, nat.dcids_by_port

    before, offered, first_cid, moves, large, dcids = run(_through_nat(h3_server, h3_certs, body))
    assert offered == 4  # the handshake's ID and 3 spares: aioquic's limit is 8, ours 4
    cids = [first_cid] + [cid for cid, _, _, _ in moves]
    assert len(set(cids)) == len(cids)  # a new ID each time, never one retired
    # Replacements were issued, each used once; the client takes them in the order their
    # NEW_CONNECTION_ID frames arrived, which a lost and resent packet can swap.
    assert sorted(seq for _, seq, _, _ in moves) == list(range(1, 7))
    # The worker's index, in the byte the steering program reads, is the same in every ID.
    assert {cid[0] % 256 for cid in cids} == {first_cid[0]}
    # Each request came from its new port and was served by the same worker process.
    assert [info["client"][1] for _, _, _, info in moves] == [port for _, _, port, _ in moves]
    assert len({port for _, _, port, _ in moves} | {before["client"][1]}) == 7
    assert {info["pid"] for _, _, _, info in moves} == {before["pid"]}
    assert large.status == 200 and bytes(large.body) == pattern(MB)
    # The server moved to a new ID of the client's with each move: none on two ports.
    assert len(dcids) == 7
    seen = [cid for port_cids in dcids.values() for cid in port_cids]
    assert len(seen) == len(set(seen)), dcids
