"""--proxy-headers / --forwarded-allow-ips: proxy headers count only from trusted peers."""

import os
import socket
import subprocess
import sys

import httpx
import pytest

from tests.support.harness import ROOT, wait_for, zigcorn_only

pytestmark = zigcorn_only

FORWARDED = {"x-forwarded-for": "203.0.113.7, 10.0.0.2", "x-forwarded-proto": "https", "x-forwarded-host": "shop.example"}


def scope_of(server, headers) -> dict:
    return httpx.get(server.url + "/", headers=headers).json()


def test_trusted_peer_rewrites_client_scheme_and_host(start_server):
    # The test client connects from 127.0.0.1 (trusted by default); 10.0.0.2 is a trusted hop too.
    server = start_server("scope:app", "--forwarded-allow-ips", "127.0.0.1,10.0.0.0/8")
    scope = scope_of(server, FORWARDED)
    assert scope["client"] == ["203.0.113.7", 0]
    assert scope["scheme"] == "https"
    assert dict(scope["headers"])["host"] == "shop.example"


def test_default_trusts_only_loopback_and_takes_rightmost_untrusted_hop(start_server):
    server = start_server("scope:app")
    scope = scope_of(server, FORWARDED)
    assert scope["client"] == ["10.0.0.2", 0]  # 10.0.0.2 is not trusted by default: it is the client


def test_untrusted_peer_cannot_spoof(start_server):
    server = start_server("scope:app", "--forwarded-allow-ips", "192.0.2.1")
    scope = scope_of(server, {**FORWARDED, "forwarded": "for=198.51.100.1;proto=https"})
    assert scope["client"][0] == "127.0.0.1" and scope["client"][1] != 0
    assert scope["scheme"] == "http"
    assert dict(scope["headers"])["host"] == f"127.0.0.1:{server.port}"


def test_no_proxy_headers_ignores_them_even_from_trusted_peers(start_server):
    server = start_server("scope:app", "--no-proxy-headers", "--forwarded-allow-ips", "*")
    scope = scope_of(server, FORWARDED)
    assert scope["client"][0] == "127.0.0.1" and scope["scheme"] == "http"


def test_rfc7239_forwarded_wins_and_handles_ipv6_with_port(start_server):
    server = start_server("scope:app", "--forwarded-allow-ips", "*")
    scope = scope_of(server, {"x-forwarded-for": "1.1.1.1",
                              "forwarded": 'for="[2001:db8:cafe::17]:4711";proto=https;host=api.example'})
    assert scope["client"] == ["2001:db8:cafe::17", 4711]
    assert scope["scheme"] == "https"
    assert dict(scope["headers"])["host"] == "api.example"


def test_garbage_values_are_ignored_not_echoed(start_server):
    server = start_server("scope:app", "--forwarded-allow-ips", "*")
    scope = scope_of(server, {"x-forwarded-for": "<script>alert(1)</script>", "x-forwarded-proto": "javascript",
                              "x-forwarded-host": "evil host"})
    assert scope["client"][0] == "127.0.0.1" and scope["scheme"] == "http"
    assert dict(scope["headers"])["host"] == f"127.0.0.1:{server.port}"


def test_forwarded_allow_ips_from_environment(start_server):
    server = start_server("scope:app", env={"FORWARDED_ALLOW_IPS": "192.0.2.1"})
    assert scope_of(server, FORWARDED)["client"][0] == "127.0.0.1"


def test_bad_forwarded_allow_ips_is_one_line_error(start_server):
    server = start_server("scope:app", "--forwarded-allow-ips", "10.0.0.0/99", wait=False)
    assert server.wait() != 0
    assert "forwarded_allow_ips" in server.output() and "Traceback" not in server.output()


@pytest.mark.parametrize("allow, trusted", [("unix:", True), ("127.0.0.1", False)])
def test_unix_socket_peers_trusted_only_when_listed(tmp_path, allow, trusted):
    path = str(tmp_path / "p.sock")
    proc = subprocess.Popen([sys.executable, "-m", "zigcorn", "tests.apps.scope:app", "--uds", path,
                             "--forwarded-allow-ips", allow], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def up():
            with socket.socket(socket.AF_UNIX) as s:
                return s.connect_ex(path) == 0

        assert wait_for(up, 10)
        with httpx.Client(transport=httpx.HTTPTransport(uds=path)) as client:
            scope = client.get("http://localhost/", headers=FORWARDED).json()
        assert (scope["client"] == ["10.0.0.2", 0]) is trusted
        assert (scope["scheme"] == "https") is trusted
    finally:
        proc.terminate()
        proc.wait(10)
