"""Leak check by counting, not timing: RSS must stay flat over thousands of keep-alive requests."""

import pytest

from tests.support.rawhttp import RawConn, get

pytestmark = pytest.mark.every_python


def test_no_growth_over_3000_keep_alive_requests(start_server):
    server = start_server("hello:app")
    conns = [RawConn(server.port) for _ in range(4)]
    try:
        def batch(n):
            for i in range(n):
                conn = conns[i % len(conns)]
                conn.send(get("/"))
                assert conn.read_response().body == b"Hello, world!"

        batch(500)
        after_500 = server.rss_kb()
        batch(2500)
        after_3000 = server.rss_kb()
    finally:
        for conn in conns:
            conn.close()
    assert after_3000 - after_500 < 3 * 1024, f"RSS grew {after_3000 - after_500} KiB from request 500 to 3000"
