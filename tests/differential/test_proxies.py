"""zigcorn behind nginx, HAProxy (also with send-proxy-v2 and an h2c front), Apache httpd
and Caddy: desync attempts (CL.TE, TE.CL, TE.TE obfuscations, CL.0, pipelined leftovers,
Expect tricks, h2c and WebSocket upgrade smuggling, H2.CL and H2.TE) must leave the app
seeing exactly the requests the front end answered, each answer going to its own client.
See tests/support/differential/proxies.py. The front ends run side by side, once."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.harness import zigcorn_only
from tests.support.tools import require_module, require_tool

require_module("h2")

FRONTS = {  # test id -> (front end, --proxy-protocol, program)
    "nginx": ("nginx", False, "nginx"),
    "haproxy": ("haproxy", False, "haproxy"),
    "haproxy-send-proxy-v2": ("haproxy", True, "haproxy"),
    "apache": ("apache", False, "apache2"),
    "caddy": ("caddy", False, "caddy"),
}


@pytest.fixture(scope="module")
def runs():
    from tests.support.differential import proxies

    with ThreadPoolExecutor(len(FRONTS)) as pool:
        futures = {key: pool.submit(proxies.run_front, front, pp) for key, (front, pp, binary) in FRONTS.items()}
        return {key: future.result() for key, future in futures.items()}


@zigcorn_only
@pytest.mark.parametrize("key", FRONTS)
def test_no_desync_behind(key, runs):
    require_tool(FRONTS[key][2], reason=f"{FRONTS[key][2]} is the front end under test (.ci/run installs it)")
    attempts = runs[key]
    failures = [f"{a.name}: {'; '.join(a.problems)} (answers {a.statuses}, echoes {a.received})"
                for a in attempts if a.problems]
    assert not failures, "\n".join(failures)
    assert len(attempts) >= 50
    baseline = [a for a in attempts if a.name == "h2.baseline"]
    assert all(a.received["attacker"] for a in baseline), baseline  # HTTP/2 reached the app through the front


H2C_UPGRADE = (b"GET /up HTTP/1.1\r\nHost: app.example\r\nConnection: Upgrade, HTTP2-Settings\r\n"
               b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n")


def _first_status(port: int, data: bytes) -> int:
    from tests.support.differential.client import exchange

    out = exchange(port, data, first=3.0, idle=0.3)
    return (out.interim or [0])[0] if out.interim else out.items[0].get("status", 200)


@zigcorn_only
@pytest.mark.parametrize("field", ["X-Forwarded-For: 10.0.0.1", "Via: 1.1 front", "Forwarded: for=10.0.0.1",
                                   "X-Real-IP: 10.0.0.1", "X-Forwarded-Proto: https"])
def test_h2c_upgrade_declined_for_a_proxied_request(start_server, field):
    """Regression (found behind HAProxy, which passes Upgrade on and tunnels the 101): a
    request a proxy forwarded is never upgraded to h2c, it is answered over HTTP/1.1, even
    with --h2c-upgrade (without it no request is)."""
    server = start_server("basic:app", "--h2c-upgrade")
    assert _first_status(server.port, H2C_UPGRADE + b"\r\n") == 101
    assert _first_status(server.port, H2C_UPGRADE + field.encode() + b"\r\n\r\n") == 200


@zigcorn_only
def test_h2c_upgrade_declined_with_proxy_protocol(start_server):
    server = start_server("basic:app", "--proxy-protocol", "--h2c-upgrade")
    header = b"PROXY TCP4 10.0.0.1 127.0.0.1 5555 80\r\n"
    assert _first_status(server.port, header + H2C_UPGRADE + b"\r\n") == 200
