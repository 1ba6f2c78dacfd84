"""HTTP/3's TLS on par with TCP's: session tickets that resume on any worker (the ticket
keys and the session id context are TCP's, shared by every worker), client certificates
(`--ssl-cert-reqs`) over QUIC, and the ASGI ``tls`` extension in an HTTP/3 request's scope,
compared with the same over HTTPS on TCP. aioquic is the client; the app is
tests/apps/h3_app.py (``/info`` and ``/tls`` answer with the worker's pid).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.request
from pathlib import Path

import pytest

from tests.support.h3_support import H3Certs, h3_certs, start_h3_server  # noqa: F401 (fixtures)
from tests.support.tools import require_module

require_module("aioquic")
trustme = require_module("trustme")
from aioquic.quic.configuration import QuicConfiguration  # noqa: E402
from aioquic.tls import SessionTicket  # noqa: E402

from tests.support.h3client import h3_connect  # noqa: E402

TIMEOUT = 60.0
# Resumed connections in the test across workers; with 4 workers about 3 in 4 of them
# reach a worker other than the ticket's issuer.
ROUNDS = 24


def run(coro, timeout: float = TIMEOUT):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def _ticket_arrives(tickets: list[SessionTicket], count: int, timeout: float = 5.0) -> None:
    """The server's NewSessionTicket comes at 1-RTT, after the handshake: wait for it."""
    async with asyncio.timeout(timeout):
        while len(tickets) < count:
            await asyncio.sleep(0.01)


async def _connection(server, certs: H3Certs, path: str = "/info", ticket: SessionTicket | None = None,
                      **extra) -> tuple[dict, bool, list[SessionTicket]]:
    """One connection (resuming `ticket` if given): the answer to `path`, whether the
    session was resumed, and the tickets it received (waited for when tickets are on)."""
    tickets: list[SessionTicket] = []
    async with h3_connect("127.0.0.1", server.port, certs.cafile, session_ticket_handler=tickets.append,
                          session_ticket=ticket, **extra) as client:
        response = await client.request("GET", path)
        assert response.status == 200, response.body
        resumed = client._quic.tls.session_resumed
        await _ticket_arrives(tickets, 1)
    return response.json(), resumed, tickets


@pytest.fixture(scope="module")
def four_workers(h3_certs):
    server = start_h3_server(h3_certs, 4, "--no-access-log")
    yield server
    server.stop()


def test_a_ticket_from_any_worker_resumes_on_any_other(four_workers, h3_certs):
    async def go():
        info, resumed, tickets = await _connection(four_workers, h3_certs)
        assert not resumed  # the first connection has no ticket to offer
        rounds = []
        for _ in range(ROUNDS):
            issuer = info["pid"]
            info, resumed, tickets = await _connection(four_workers, h3_certs, ticket=tickets[-1])
            rounds.append((issuer, info["pid"], resumed))
        return rounds

    rounds = run(go())
    assert all(resumed for _, _, resumed in rounds), rounds
    elsewhere = sum(1 for issuer, pid, _ in rounds if issuer != pid)
    print(f"resumed on a worker other than the ticket's issuer: {elsewhere} of {ROUNDS}")
    # Each connection lands on one of 4 workers; fewer than 6 of 24 elsewhere would be
    # far from the 18 expected (and none could resume there without the shared keys).
    assert elsewhere >= 6, rounds
    assert len({pid for _, pid, _ in rounds}) >= 3, rounds


def test_a_ticket_from_another_server_is_not_resumed(four_workers, h3_certs):
    """The keys are this server's: a ticket from another one (its own random keys) falls
    back to a full handshake, which still succeeds."""
    other = start_h3_server(h3_certs, 1, "--no-access-log")
    try:
        _, _, tickets = run(_connection(other, h3_certs))
    finally:
        other.stop()
    info, resumed, _ = run(_connection(four_workers, h3_certs, ticket=tickets[-1]))
    assert not resumed and info["http_version"] == "3"


def test_no_session_tickets_over_quic_either(h3_certs):
    server = start_h3_server(h3_certs, 1, "--no-ssl-session-tickets", "--no-access-log")
    try:
        async def go():
            tickets: list[SessionTicket] = []
            async with h3_connect("127.0.0.1", server.port, h3_certs.cafile,
                                  session_ticket_handler=tickets.append) as client:
                assert (await client.request("GET", "/info")).status == 200
                await asyncio.sleep(0.3)  # a ticket would have come with the answer
            return tickets

        assert run(go()) == []
    finally:
        server.stop()
