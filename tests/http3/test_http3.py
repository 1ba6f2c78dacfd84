"""HTTP/3 with real clients: aioquic's HTTP/3 client and curl (built with HTTP/3) against
``zigcorn --http3`` (tests/apps/h3_app.py), with 1 and with 4 workers; the alt-svc header
that advertises it over TLS; and hostile datagrams that must leave it serving with its
memory flat. quic-go's client and Chromium: tests/http3/test_http3_interop.py.

The clients were checked against hypercorn's HTTP/3 (``--quic-bind``), so a failure here
is the server's: everything passed there but trailers (which stop hypercorn's UDP server)
and ``http.disconnect`` on a stream reset (which hypercorn never sends).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

from tests.support.harness import ROOT, Server, wait_for
from tests.support.h3_support import H3Certs, h3_certs, h3_server, start_h3_server  # noqa: F401 (fixtures)
from tests.support.tools import require_module, skip_or_fail

require_module("aioquic")
from tests.apps.h3_app import pattern  # noqa: E402
from tests.support.h3client import MB, h3_connect  # noqa: E402

TIMEOUT = 30.0


def run(coro, timeout: float = 60.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def connect(server: Server, certs: H3Certs):
    return h3_connect("127.0.0.1", server.port, certs.cafile)


# ---- aioquic's HTTP/3 client ------------------------------------------------------------


def test_get_sees_http3_https_and_one_pid_per_connection(h3_server, h3_certs):
    async def go():
        async with connect(h3_server, h3_certs) as client:
            return [await client.request("GET", f"/info?n={i}") for i in range(5)]

    responses = run(go())
    assert {r.status for r in responses} == {200}
    infos = [r.json() for r in responses]
    assert {i["http_version"] for i in infos} == {"3"}
    assert {i["scheme"] for i in infos} == {"https"}
    # Every request of one connection is answered by the same worker.
    assert len({i["pid"] for i in infos}) == 1


def test_connections_spread_over_the_workers_each_kept_by_one(h3_server, h3_certs):
    async def one():
        async with connect(h3_server, h3_certs) as client:
            return {(await client.request("GET", "/info")).json()["pid"] for _ in range(4)}

    async def go():
        return [await one() for _ in range(12)]

    per_connection = run(go())
    assert all(len(pids) == 1 for pids in per_connection), per_connection
    if h3_server.workers > 1:
        # Each first Initial lands on a random worker: 12 on one of 4 is 4**-11 likely.
        assert len(set().union(*per_connection)) > 1


def test_post_of_1_mib_is_hashed_by_the_app(h3_server, h3_certs):
    body = os.urandom(MB)

    async def go():
        async with connect(h3_server, h3_certs) as client:
            return await client.request("POST", "/echo", body=body)

    response = run(go())
    assert response.status == 200
    got = response.json()
    assert got["bytes"] == MB and got["sha256"] == hashlib.sha256(body).hexdigest()
    assert got["http_version"] == "3"


def test_a_streamed_response_arrives_whole(h3_server, h3_certs):
    async def go():
        async with connect(h3_server, h3_certs) as client:
            return await client.request("GET", "/stream?chunks=300&size=1000")

    response = run(go())
    assert response.status == 200
    assert bytes(response.body) == b"".join(bytes([i % 256]) * 1000 for i in range(300))
    assert response.pieces > 1  # sent as it was made, not gathered into one piece


def test_100_concurrent_streams_on_one_connection(h3_server, h3_certs):
    async def go():
        async with connect(h3_server, h3_certs) as client:
            return await asyncio.gather(*(client.request("GET", f"/info?i={i}") for i in range(100)))

    responses = run(go())
    assert [r.status for r in responses] == [200] * 100
    assert len({r.json()["pid"] for r in responses}) == 1


def test_request_trailers_are_ignored(h3_server, h3_certs):
    async def go():
        async with connect(h3_server, h3_certs) as client:
            first = await client.request("POST", "/echo", body=b"hello", trailers=[(b"x-checksum", b"abc")])
            second = await client.request("GET", "/info")  # the connection is still good
            return first, second

    first, second = run(go())
    assert first.status == 200
    assert first.json()["bytes"] == 5 and first.json()["sha256"] == hashlib.sha256(b"hello").hexdigest()
    assert second.status == 200


def test_a_stream_reset_reaches_the_app_as_http_disconnect(h3_server, h3_certs):
    async def go():
        async with connect(h3_server, h3_certs) as client:
            before = (await client.request("GET", "/disconnects")).json()["count"]
            stream_id = client.start("GET", "/wait")
            await asyncio.wait_for(client.responses[stream_id].first_data, TIMEOUT)
            client.reset(stream_id)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                now = (await client.request("GET", "/disconnects")).json()
                if now["count"] > before:
                    return now
                await asyncio.sleep(0.05)
            return now

    got = run(go())
    assert got["count"] >= 1 and got["waiting"] == 0, got


def test_a_large_response_respects_flow_control(h3_server, h3_certs):
    size = 16 * MB  # many times aioquic's default windows (1 MiB a stream)

    async def go():
        async with connect(h3_server, h3_certs) as client:
            return await client.request("GET", f"/large?bytes={size}", timeout=60)

    response = run(go(), timeout=90)
    assert response.status == 200
    assert len(response.body) == size
    assert bytes(response.body) == pattern(size)


def test_with_retry_always_each_client_comes_back_with_its_token_and_is_served(h3_certs):
    """``--http3-retry always``: every first Initial gets a Retry whose token is sealed with
    the current 5-minute period's key (quic/retry_token.zig's rotation); the client's next
    Initial brings it back to the worker its ID names, which opens it. A token that did not
    open would leave the client without a connection."""
    server = start_h3_server(h3_certs, 2, "--http3-retry", "always")
    try:
        async def go():
            out = []
            for i in range(4):
                async with connect(server, h3_certs) as client:
                    out.append(await client.request("GET", f"/info?n={i}"))
            return out

        responses = run(go())
        assert [r.status for r in responses] == [200] * 4
        assert {r.json()["http_version"] for r in responses} == {"3"}
    finally:
        server.stop()


def test_a_returning_client_brings_its_new_token_and_skips_the_retry(h3_certs):
    """RFC 9000 8.1.3: after a handshake the server sends NEW_TOKEN; the client's next
    connection brings the token back and, under ``--http3-retry always``, is served without
    a Retry. A changed token counts as none: that connection gets its Retry."""
    server = start_h3_server(h3_certs, 1, "--http3-retry", "always")
    try:
        async def once(**extra):
            tokens: list[bytes] = []
            async with h3_connect("127.0.0.1", server.port, h3_certs.cafile,
                                  token_handler=tokens.append, **extra) as client:
                response = await client.request("GET", "/info")
                retries = client._quic._retry_count
                for _ in range(50):  # NEW_TOKEN follows the handshake's end
                    if tokens:
                        break
                    await asyncio.sleep(0.02)
            return response.status, retries, tokens

        async def go():
            first = await once()
            token = first[2][0]
            again = await once(token=token)
            changed = await once(token=token[:-1] + bytes([token[-1] ^ 1]))
            return first, again, changed

        first, again, changed = run(go())
        assert first[:2] == (200, 1) and len(first[2]) == 1
        assert again[:2] == (200, 0)
        assert changed[:2] == (200, 1)
    finally:
        server.stop()


# ---- alt-svc on the TLS listener ----------------------------------------------------------


def test_a_drain_refuses_new_connections_while_one_in_flight_finishes(h3_certs):
    """Once the drain begins, a new client's Initial is answered with CONNECTION_CLOSE
    (CONNECTION_REFUSED): its handshake fails at once, well within its own timeout, while
    the request already in flight on an older connection is answered whole."""
    server = start_h3_server(h3_certs, 1)
    try:
        async def main():
            async with connect(server, h3_certs) as client:
                stream_id = client.start("GET", "/slow?ms=2000")
                pending = client.responses[stream_id]
                assert await asyncio.to_thread(wait_for, lambda: "SLOW-START" in server.output(), 10)
                server.proc.send_signal(signal.SIGTERM)
                assert await asyncio.to_thread(wait_for, lambda: "Shutting down" in server.output(), 10)
                await asyncio.sleep(0.2)
                started = time.monotonic()
                refused = None
                try:
                    async with connect(server, h3_certs) as late:
                        await late.request("GET", "/info", timeout=5)
                except (ConnectionError, TimeoutError) as e:
                    refused = e
                took = time.monotonic() - started
                response = await asyncio.wait_for(pending.done, 10)
                return response, refused, took

        response, refused, took = run(main())
        assert isinstance(refused, ConnectionError), refused
        assert took < 3, took
        assert response.status == 200 and response.json()["slept_ms"] == 2000
        assert server.wait(15) == 0, server.output()
    finally:
        server.kill()


def send_unanswered_initial(port: int, idle_timeout_s: float = 60.0) -> None:
    """A real client Initial (aioquic's ClientHello) from a socket that never reads: the
    server's handshake state for a client that never answers, or a forged address."""
    from aioquic.h3.connection import H3_ALPN
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.connection import QuicConnection

    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, idle_timeout=idle_timeout_s)
    quic = QuicConnection(configuration=config)
    quic.connect(("127.0.0.1", port), now=time.monotonic())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as deaf:
        for datagram, addr in quic.datagrams_to_send(now=time.monotonic()):
            deaf.sendto(datagram, addr)


def test_a_handshake_whose_client_went_silent_does_not_hold_up_shutdown(h3_certs):
    """The server's first flight and its probes use up the anti-amplification budget
    (3x the client's 1,200 bytes) within about two seconds; the drain's close then cannot
    be sent. The closing period once started only when the close went out, so such a
    connection was kept for ever and SIGTERM never finished (seen: over 100 s)."""
    server = start_h3_server(h3_certs, 1)
    try:
        send_unanswered_initial(server.port)
        time.sleep(2.5)
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert server.wait(15) == 0, server.output()
        assert time.monotonic() - started < 5, server.output()
    finally:
        server.kill()


def test_a_response_body_must_match_its_content_length(h3_server, h3_certs):
    """More body than the content-length declares, or less at its end: `send` raises (as
    over HTTP/1.1 and HTTP/2) and the stream is reset; the connection serves on."""
    async def main():
        async with connect(h3_server, h3_certs) as client:
            outcomes = {}
            for path in ("/cl-over", "/cl-under"):
                try:
                    r = await client.request("GET", path, timeout=10)
                    outcomes[path] = (r.status, bytes(r.body))
                except ConnectionResetError as e:
                    outcomes[path] = e
            ok = await client.request("GET", "/info")
            return outcomes, ok

    outcomes, ok = run(main())
    assert all(isinstance(v, ConnectionResetError) for v in outcomes.values()), outcomes
    assert ok.status == 200 and ok.json()["http_version"] == "3"
    out = h3_server.output()
    assert wait_for(lambda: "CL-ERROR Response content longer than Content-Length" in h3_server.output(), 5), out
    assert wait_for(lambda: "CL-ERROR Response content shorter than Content-Length" in h3_server.output(), 5), out


def https_get(port: int, certs: H3Certs, path: str) -> dict[str, str]:
    """The response headers of an HTTP/1.1 request over TLS."""
    import http.client

    ctx = ssl.create_default_context(cafile=certs.cafile)
    conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()


def test_alt_svc_is_advertised_over_tls_and_the_apps_own_wins(h3_server, h3_certs):
    headers = https_get(h3_server.port, h3_certs, "/info")
    assert headers.get("alt-svc") == f'h3=":{h3_server.port}"; ma=86400'
    assert https_get(h3_server.port, h3_certs, "/own-alt-svc").get("alt-svc") == "clear"


def test_alt_svc_is_advertised_over_http2_too(h3_server, h3_certs):
    import httpx

    ctx = ssl.create_default_context(cafile=h3_certs.cafile)
    with httpx.Client(http2=True, verify=ctx, timeout=10) as client:
        response = client.get(f"https://localhost:{h3_server.port}/info")
        own = client.get(f"https://localhost:{h3_server.port}/own-alt-svc")
    assert response.http_version == "HTTP/2"
    assert response.headers.get("alt-svc") == f'h3=":{h3_server.port}"; ma=86400'
    assert own.headers.get_list("alt-svc") == ["clear"]


def test_http3_port_is_advertised(h3_certs):
    from tests.support.harness import free_port

    udp_port = free_port()
    server = start_h3_server(h3_certs, 1, "--http3-port", str(udp_port))
    try:
        assert https_get(server.port, h3_certs, "/info").get("alt-svc") == f'h3=":{udp_port}"; ma=86400'
    finally:
        server.stop()


def test_hsts_is_sent_over_http3_as_over_tls(h3_certs):
    """HTTP/3 is always HTTPS: --hsts reaches its responses too, once, and the app's own wins."""
    server = start_h3_server(h3_certs, 1, "--hsts", "600")
    try:
        async def go():
            async with connect(server, h3_certs) as client:
                return await client.request("GET", "/info"), await client.request("GET", "/own-hsts")

        plain, own = run(go())
        assert [v for k, v in plain.headers if k == b"strict-transport-security"] == [b"max-age=600"]
        assert [v for k, v in own.headers if k == b"strict-transport-security"] == [b"max-age=5"]
        assert https_get(server.port, h3_certs, "/info").get("strict-transport-security") == "max-age=600"
    finally:
        server.stop()


def test_no_alt_svc_without_http3(h3_certs):
    server = Server("h3_app:app", *h3_certs.server_args()).wait_ready()
    try:
        assert "alt-svc" not in https_get(server.port, h3_certs, "/info")
    finally:
        server.stop()


def test_http3_without_tls_is_refused_clearly():
    done = subprocess.run([sys.executable, "-m", "zigcorn", "tests.apps.h3_app:app", "--http3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "http3 needs TLS" in done.stdout + done.stderr


# ---- curl built with HTTP/3 ---------------------------------------------------------------


def curl_h3() -> list[str]:
    """A curl that speaks HTTP/3: this machine's, else the Debian unstable chroot's
    (scripts/sid_chroot.sh; its curl is built with ngtcp2), whose fresh /tmp sees no file
    of ours: the CA goes in on stdin."""
    local = shutil.which("curl")
    if local and "HTTP3" in subprocess.run([local, "--version"], capture_output=True, text=True).stdout:
        return [local]
    sid = ROOT / "scripts" / "sid_chroot.sh"
    status = subprocess.run(["bash", str(sid), "status"], capture_output=True, text=True, timeout=60)
    if status.returncode != 0 or "ready" not in status.stdout:
        skip_or_fail("no curl with HTTP/3 here, and the Debian unstable chroot (whose curl has it) is not built: "
                     "scripts/sid_chroot.sh create")
    return ["bash", str(sid), "run", "--"]


def curl(server: Server, certs: H3Certs, script: str) -> str:
    """Runs `script` (sh) with curl built with HTTP/3; in it, $CURL is that curl with the
    test CA trusted and localhost:PORT resolved to 127.0.0.1, $URL the server's origin and
    $TMP a scratch folder. Returns its stdout."""
    prefix = curl_h3()
    binary = "curl" if prefix[0] == "bash" else prefix[0]
    setup = ('TMP=$(mktemp -d) && cat > "$TMP/ca.pem" && '
             f'CURL="{binary} -sS --http3-only --max-time 30 --cacert $TMP/ca.pem '
             f'--resolve localhost:{server.port}:127.0.0.1" && URL="https://localhost:{server.port}" && ')
    cmd = [*prefix, "sh", "-c", setup + script] if prefix[0] == "bash" else ["sh", "-c", setup + script]
    done = subprocess.run(cmd, input=open(certs.cafile).read(), capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr + server.output()[-2000:]
    return done.stdout


def test_curl_http3_only(h3_server, h3_certs):
    body, version = curl(h3_server, h3_certs, '$CURL -w "\n%{http_version}" "$URL/info"').rsplit("\n", 1)
    assert version == "3"
    assert json.loads(body)["http_version"] == "3"


def test_curl_posts_1_mib(h3_server, h3_certs):
    out = curl(h3_server, h3_certs, 'head -c 1048576 /dev/urandom > "$TMP/body" && sha256sum "$TMP/body" && '
                                    '$CURL --data-binary @"$TMP/body" "$URL/echo"')
    digest, answer = out.split("\n", 1)
    got = json.loads(answer)
    assert got["bytes"] == MB and got["sha256"] == digest.split()[0] and got["http_version"] == "3"


def test_curl_reads_a_streamed_response(h3_server, h3_certs):
    out = curl(h3_server, h3_certs, '$CURL "$URL/stream?chunks=300&size=1000" | sha256sum')
    expected = hashlib.sha256(b"".join(bytes([i % 256]) * 1000 for i in range(300))).hexdigest()
    assert out.split()[0] == expected


def test_curl_runs_100_requests_at_once_on_one_connection(h3_server, h3_certs):
    out = curl(h3_server, h3_certs, '$CURL --parallel --parallel-max 100 -o /dev/null '
                                    '-w "%{http_version} %{response_code} %{num_connects}\n" "$URL/info?i=[1-100]"')
    rows = [line.split() for line in out.splitlines()]
    assert len(rows) == 100 and {(v, code) for v, code, _ in rows} == {("3", "200")}
    assert sum(int(n) for _, _, n in rows) == 1  # one connection made, 99 streams on it


# ---- hostile datagrams ------------------------------------------------------------------


def forged_initial(rng) -> bytes:
    """A client Initial (RFC 9000 17.2.2) with a random DCID and junk where the sealed
    payload goes, padded to 1200 bytes: the cheapest packet that makes a server work."""
    dcid = rng.randbytes(rng.randint(8, 20))
    scid = rng.randbytes(8)
    head = bytes([0xC3]) + (1).to_bytes(4, "big") + bytes([len(dcid)]) + dcid + bytes([len(scid)]) + scid
    head += b"\x00"  # no token
    length = 1200 - len(head) - 2
    head += (0x4000 | length).to_bytes(2, "big")
    return head + rng.randbytes(length)


def garbage(rng) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:
        return rng.randbytes(rng.randint(1, 1500))  # anything
    if kind == 1:
        return bytes([0x40 | rng.randrange(64)]) + rng.randbytes(rng.randint(0, 60))  # short header
    if kind == 2:
        return bytes([0xC0]) + rng.randbytes(4) + rng.randbytes(rng.randint(0, 40))  # unknown version
    return forged_initial(rng)[: rng.randint(1, 1199)]  # a truncated Initial


def test_garbage_and_a_flood_of_forged_initials_leave_it_serving_with_flat_memory(h3_server, h3_certs):
    import random

    rng = random.Random(38)

    async def get_info():
        async with connect(h3_server, h3_certs) as client:
            return (await client.request("GET", "/info")).status

    assert run(get_info()) == 200
    before_kb = h3_server.rss_kb()
    family = socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as raw:
        raw.setblocking(False)
        target = ("127.0.0.1", h3_server.port)

        def send_all(datagrams) -> None:
            for datagram in datagrams:
                for _ in range(100):  # the send buffer fills: wait for it, bounded
                    try:
                        raw.sendto(datagram, target)
                        break
                    except BlockingIOError:
                        time.sleep(0.001)

        send_all(garbage(rng) for _ in range(2_000))
        started = time.monotonic()
        send_all(forged_initial(rng) for _ in range(20_000))
        assert time.monotonic() - started < 60
    # Still serving, for new connections, once the flood is over.
    assert wait_for(lambda: run(get_info()) == 200, timeout=20)
    after_kb = h3_server.rss_kb()
    growth_mib = (after_kb - before_kb) / 1024
    # Bounded: the endpoint's handshake and connection limits, not 20,000 connections'
    # state (a few KiB each would be 50+ MiB).
    assert growth_mib < 16 * h3_server.workers, (before_kb, after_kb)
    assert h3_server.proc.poll() is None


def _worker_pids(server: Server) -> set[int]:
    from tests.support.harness import _children

    return set(_children(server.proc.pid))


def test_a_peer_idle_timeout_past_2_to_the_61_is_saturated_never_a_crash(h3_server, h3_certs):
    """RFC 9000 18.2 lets max_idle_timeout be any varint (up to 2^62 - 1 ms): the engine once
    multiplied it by 1,000 unchecked and one Initial killed the process. Both ways a peer can
    send it: one datagram from a socket that never reads (the address could be forged), and a
    whole handshake through which the request is answered. Every worker keeps its pid."""
    huge_s = 2**61 / 1000  # aioquic sends int(idle_timeout * 1000): 2^61 ms, times 1,000 past 2^64
    workers_before = _worker_pids(h3_server)
    for _ in range(8):  # on 4 workers the Initials land on several of them
        send_unanswered_initial(h3_server.port, huge_s)
        time.sleep(0.05)
    assert h3_server.proc.poll() is None and "panic" not in h3_server.output(), h3_server.output()

    async def handshake():
        async with h3_connect("127.0.0.1", h3_server.port, h3_certs.cafile, idle_timeout=huge_s) as client:
            return (await client.request("GET", "/info")).status

    assert [run(handshake()) for _ in range(4 * h3_server.workers)] == [200] * (4 * h3_server.workers)
    time.sleep(0.2)
    assert h3_server.proc.poll() is None, h3_server.output()
    assert "panic" not in h3_server.output(), h3_server.output()
    assert _worker_pids(h3_server) == workers_before, h3_server.output()
    assert run(handshake()) == 200
