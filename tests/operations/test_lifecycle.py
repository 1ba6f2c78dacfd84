"""The server's life as an orchestrator sees it: --ready-path during startup, a drain that
goes on serving for --drain-delay / --shutdown-delay while the health and ready paths say
503, connections told to leave in each protocol's way, and the drain's deadline for
WebSockets and streaming responses. From outside, with real clients; the suite's
epoll run covers the second I/O backend."""

import asyncio
import signal
import socket
import threading
import time

import httpx
import pytest
import websockets
from websockets.exceptions import ConnectionClosed, InvalidStatus
from hyperframe.frame import GoAwayFrame, HeadersFrame, PingFrame

from tests.support.h2raw import H2Conn
from tests.support.harness import port_open, wait_for, zigcorn_only

pytestmark = zigcorn_only

TOKEN = "s3cret-token-0123456789"
OPS = ("--health-path", "/healthz", "--ready-path", "/readyz")
INTERFACES = {"asgi": ("lifecycle:app",), "wsgi": ("lifecycle:wsgi", "--interface", "wsgi", "--warmup-path", "/warm")}


def get(port: int, path: str, headers: bytes = b"") -> tuple[int, dict, bytes, socket.socket]:
    """One HTTP/1.1 request on a new connection: (status, headers, body, the socket)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\n" + headers + b"\r\n")
    return (*read_response(sock), sock)


def read_response(sock: socket.socket) -> tuple[int, dict, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed in the body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def answer(port: int, path: str) -> tuple[int, bytes]:
    status, headers, body, sock = get(port, path)
    sock.close()
    return status, body


def ping_ack(ping: PingFrame) -> bytes:
    ack = PingFrame(0)
    ack.opaque_data = ping.opaque_data
    ack.flags.add("ACK")
    return ack.serialize()


@pytest.fixture
def gate(tmp_path):
    return tmp_path / "gate"


# ---- --ready-path during startup ----------------------------------------------------------


@pytest.mark.parametrize("interface", ["asgi", "wsgi"])
def test_ready_path_says_503_until_startup_is_over_and_requests_get_503_not_a_hang(start_server, gate, interface):
    server = start_server(*INTERFACES[interface], *OPS, env={"ZIGCORN_TEST_GATE": str(gate)})
    assert wait_for(lambda: "STARTUP-BEGIN" in server.output(), 10), server.output()
    # Listening from the start: the process is alive (health), not ready (ready path).
    assert answer(server.port, "/healthz") == (200, b"ok\n")
    assert answer(server.port, "/readyz") == (503, b"starting\n")
    status, headers, body, sock = get(server.port, "/")
    sock.close()
    assert (status, headers["retry-after"], body) == (503, "1", b"starting\n")
    # The same over HTTP/2 (prior knowledge), where the engine answers too.
    conn = H2Conn(server.port)
    try:
        for path, want in (("/readyz", 503), ("/healthz", 200), ("/", 503)):
            sid = conn.request(path)
            headers, body, _ = conn.response(sid)
            assert int(headers[":status"]) == want, (path, headers)
    finally:
        conn.close()
    assert "STARTUP-END" not in server.output()
    gate.touch()
    # Ready within a second of the end of startup.
    assert wait_for(lambda: "STARTUP-END" in server.output(), 5), server.output()
    ended = time.monotonic()
    assert wait_for(lambda: answer(server.port, "/readyz")[0] == 200, 5)
    assert time.monotonic() - ended < 1.0
    assert answer(server.port, "/") == (200, b"hello")
    server.proc.send_signal(signal.SIGTERM)
    assert server.wait(10) == 0


def test_websocket_before_ready_gets_503(start_server, gate):
    server = start_server("lifecycle:app", *OPS, env={"ZIGCORN_TEST_GATE": str(gate)})
    assert wait_for(lambda: "STARTUP-BEGIN" in server.output(), 10), server.output()

    async def connect():
        with pytest.raises(InvalidStatus) as info:
            async with websockets.connect(f"ws://127.0.0.1:{server.port}/ws", open_timeout=5):
                pass
        return info.value.response.status_code

    assert asyncio.run(connect()) == 503
    gate.touch()
    assert wait_for(lambda: answer(server.port, "/readyz")[0] == 200, 10)


def test_without_ready_path_nothing_listens_before_startup_is_over(start_server, gate):
    server = start_server("lifecycle:app", "--health-path", "/healthz", env={"ZIGCORN_TEST_GATE": str(gate)},
                          wait=False)  # fmt: skip
    assert wait_for(lambda: "STARTUP-BEGIN" in server.output(), 10), server.output()
    time.sleep(0.3)
    assert not port_open(server.port)
    gate.touch()
    server.wait_ready()
    assert answer(server.port, "/healthz") == (200, b"ok\n")


# ---- the drain: still serving for a delay, with the health and ready paths at 503 ------------


def start_drain(server, how: str) -> None:
    if how == "drain-path":
        r = httpx.post(server.url + "/admin/drain", headers={"authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 202
    else:
        server.proc.send_signal(signal.SIGTERM)


@pytest.mark.parametrize("interface", ["asgi", "wsgi"])
@pytest.mark.parametrize("how", ["drain-path", "sigterm"])
def test_drain_says_503_and_keeps_serving_for_the_delay_then_stops_accepting(start_server, interface, how):
    server = start_server(*INTERFACES[interface], *OPS, "--drain-path", "/admin/drain", "--admin-token", TOKEN,
                          "--drain-delay", "2", "--shutdown-delay", "2", "--timeout-keep-alive", "30")  # fmt: skip
    assert wait_for(lambda: answer(server.port, "/readyz")[0] == 200, 10)
    # A keep-alive connection, idle after one response, and one whose response is in flight.
    status, headers, _, idle = get(server.port, "/")
    assert status == 200 and headers.get("connection") != "close"
    busy = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    if interface == "asgi":
        busy.sendall(b"GET /sleep?s=1 HTTP/1.1\r\nHost: t\r\n\r\n")
        assert wait_for(lambda: "SLEEP-START" in server.output(), 5)
    started = time.monotonic()
    start_drain(server, how)
    # At once: both paths say 503, on new connections (still accepted).
    assert wait_for(lambda: answer(server.port, "/healthz") == (503, b"draining\n"), 1)
    assert answer(server.port, "/readyz") == (503, b"draining\n")
    # The idle keep-alive connection is closed now, not at its 30 s timeout.
    assert closed_within(idle, 1.5)
    # New connections are served, each told to leave after its response.
    status, headers, body, sock = get(server.port, "/")
    assert (status, body, headers.get("connection")) == (200, b"hello", "close")
    assert closed_within(sock, 2)
    if interface == "asgi":
        # The response in flight is answered whole, with connection: close.
        status, headers, body = read_response(busy)
        assert (status, body, headers.get("connection")) == (200, b"hello", "close")
    assert time.monotonic() - started < 1.8, "these all happened within the delay"
    # After the delay: no more connections, and the process ends.
    assert wait_for(lambda: not port_open(server.port), 5), server.output()
    assert time.monotonic() - started >= 1.9
    assert server.wait(10) == 0
    for sock in (idle, busy):
        sock.close()
    assert "still accepting for 2s" in server.output()


def test_shutdown_delay_is_not_for_sigint(start_server):
    server = start_server("lifecycle:app", *OPS, "--shutdown-delay", "5")
    started = time.monotonic()
    server.proc.send_signal(signal.SIGINT)
    assert server.wait(10) == 0
    assert time.monotonic() - started < 3


def test_drain_with_workers_passes_the_drain_delay_to_every_worker(start_server):
    server = start_server("lifecycle:app", "--workers", "2", *OPS, "--drain-path", "/admin/drain", "--admin-token",
                          TOKEN, "--drain-delay", "2")  # fmt: skip
    assert wait_for(lambda: server.output().count("Application startup complete") == 2, 15), server.output()
    start_drain(server, "drain-path")
    # Every new connection, whichever worker takes it, hears 503 from the health path.
    assert wait_for(lambda: answer(server.port, "/healthz")[0] == 503, 2)
    assert all(answer(server.port, "/healthz")[0] == 503 for _ in range(20))
    assert answer(server.port, "/") == (200, b"hello")
    assert server.output().count("still accepting for 2s") == 2
    assert server.wait(15) == 0
    assert "Drain requested: stopping 2 worker(s)." in server.output()


# ---- HTTP/2: GOAWAY twice (RFC 9113 6.8) -------------------------------------------------------


def test_http2_drain_sends_goaway_for_every_stream_then_the_last_after_a_ping(start_server):
    server = start_server("lifecycle:app", *OPS, "--shutdown-delay", "3")
    conn = H2Conn(server.port)
    try:
        sid = conn.request("/")
        assert conn.response(sid)[1] == b"hello"
        server.proc.send_signal(signal.SIGTERM)
        frames = conn.raw_frames(timeout=10)
        first = next(f for f in frames if isinstance(f, (GoAwayFrame, PingFrame)))
        assert isinstance(first, GoAwayFrame) and (first.last_stream_id, first.error_code) == (2**31 - 1, 0)
        ping = next(f for f in frames if isinstance(f, (GoAwayFrame, PingFrame)))
        assert isinstance(ping, PingFrame) and "ACK" not in ping.flags
        # A stream the client sends before it answers the PING is still served...
        late = conn.request("/")
        got = []
        for f in frames:
            got.append(f)
            if isinstance(f, HeadersFrame) and f.stream_id == late:
                break
        assert not any(isinstance(f, GoAwayFrame) for f in got)
        # ...and the answer to the PING brings the final GOAWAY, naming that stream.
        conn.send_raw(ping_ack(ping))
        final = next(f for f in frames if isinstance(f, GoAwayFrame))
        assert (final.last_stream_id, final.error_code) == (late, 0)
        # Nothing in flight: the connection closes, while the server still accepts.
        assert next(frames, None) is None and conn.closed
        assert answer(server.port, "/healthz") == (503, b"draining\n")
        assert server.wait(10) == 0
    finally:
        conn.close()


def test_http2_connection_opened_during_the_delay_is_told_to_go_after_its_first_requests(start_server):
    server = start_server("lifecycle:app", *OPS, "--shutdown-delay", "3")
    server.proc.send_signal(signal.SIGTERM)
    assert wait_for(lambda: answer(server.port, "/healthz")[0] == 503, 2)
    conn = H2Conn(server.port)
    try:
        sid = conn.request("/")
        # (Read frame by frame: the h2 library stops at a GOAWAY, even for streams it names.)
        seen = []
        for f in conn.raw_frames(timeout=5):
            seen.append(f)
            if "END_STREAM" in f.flags and f.stream_id == sid:
                break
        goaways = [f for f in seen if isinstance(f, GoAwayFrame)]
        assert [(g.last_stream_id, g.error_code) for g in goaways] == [(2**31 - 1, 0)]
        ping = next(f for f in seen if isinstance(f, PingFrame) and "ACK" not in f.flags)
        assert any(isinstance(f, HeadersFrame) and f.stream_id == sid for f in seen)
        conn.send_raw(ping_ack(ping))
        final = next(f for f in conn.raw_frames(timeout=5) if isinstance(f, GoAwayFrame))
        assert (final.last_stream_id, final.error_code) == (sid, 0)
    finally:
        conn.close()
    assert server.wait(10) == 0


# ---- the deadline: WebSockets get 1001, streaming responses a disconnect ----------------------


def test_websocket_and_stream_go_on_until_the_deadline_then_1001_and_disconnect(start_server):
    server = start_server("lifecycle:app", *OPS, "--timeout-graceful-shutdown", "2")
    stream = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    stream.sendall(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
    assert wait_for(lambda: "STREAM-OPEN" in server.output(), 5)
    ticks_after_sigterm = []

    def count_ticks():
        stream.settimeout(10)
        seen = b""
        while True:
            try:
                data = stream.recv(65536)
            except OSError:
                return
            if not data:
                return
            seen += data
            if server.proc.returncode is None and sigterm_at:
                ticks_after_sigterm.append(time.monotonic() - sigterm_at[0])

    sigterm_at: list = []
    reader = threading.Thread(target=count_ticks)
    reader.start()

    async def websocket_session():
        async with websockets.connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
            await ws.send("before")
            assert await ws.recv() == "before"
            sigterm_at.append(time.monotonic())
            server.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(1.0)
            # Not cut before the deadline: the app still answers.
            await ws.send("during")
            assert await ws.recv() == "during"
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(ws.recv(), 5)
            return info.value.rcvd.code, time.monotonic() - sigterm_at[0]

    code, after = asyncio.run(websocket_session())
    assert code == 1001 and 1.8 < after < 4, (code, after)
    reader.join(10)
    stream.close()
    # The stream went on after SIGTERM, past the first second, until the deadline.
    assert ticks_after_sigterm and max(ticks_after_sigterm) > 1.5
    assert wait_for(lambda: "WS-DISCONNECT 1001" in server.output() and "STREAM-DISCONNECT" in server.output(), 5), \
        server.output()
    assert server.wait(10) == 0


def test_without_a_deadline_websockets_get_1001_when_accepting_stops(start_server):
    server = start_server("lifecycle:app", *OPS, "--shutdown-delay", "1")

    async def websocket_session():
        async with websockets.connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
            started = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(ws.recv(), 5)
            return info.value.rcvd.code, time.monotonic() - started

    code, after = asyncio.run(websocket_session())
    assert code == 1001 and after >= 0.9
    assert wait_for(lambda: "WS-DISCONNECT 1001" in server.output(), 5), server.output()
    assert server.wait(10) == 0


def test_websocket_over_http2_goes_on_until_the_deadline_then_1001(start_server):
    from hyperframe.frame import DataFrame

    from tests.websocket.test_websocket_streams import WsOverH2, frame, parse_frames

    server = start_server("lifecycle:app", *OPS, "--timeout-graceful-shutdown", "2")
    ws = WsOverH2(server.port, "/ws")
    try:
        assert ws.response()[":status"] == "200"
        ws.send(frame(0x1, b"before"))
        assert ws.frames(1)[0][:2] == (0x1, b"before")
        sigterm_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        frames = ws.h2.raw_frames(timeout=8)
        ping = next(f for f in frames if isinstance(f, PingFrame))
        ws.h2.send_raw(ping_ack(ping))
        final = next(f for f in frames if isinstance(f, GoAwayFrame) and f.last_stream_id != 2**31 - 1)
        assert final.last_stream_id == ws.sid
        # The stream named by the final GOAWAY is not cut: its app still answers...
        time.sleep(0.5)
        ws.h2.send_raw(DataFrame(ws.sid, data=frame(0x1, b"during")).serialize())
        payloads = []
        for f in frames:
            if isinstance(f, DataFrame) and f.stream_id == ws.sid:
                payloads += parse_frames(f.data)
                if any(op == 0x8 for op, _, _ in payloads):
                    break
        closed_after = time.monotonic() - sigterm_at
        # ...until the deadline, which brings the close frame, 1001.
        assert payloads[0][:2] == (0x1, b"during")
        assert payloads[-1][0] == 0x8 and int.from_bytes(payloads[-1][1][:2], "big") == 1001
        assert 1.8 < closed_after < 4, closed_after
    finally:
        ws.h2.close()
    assert wait_for(lambda: "WS-DISCONNECT 1001" in server.output(), 5), server.output()
    assert server.wait(10) == 0


def test_sighup_retires_old_workers_at_once_and_the_probes_never_see_503(start_server):
    """--shutdown-delay is for the server going away, not for a worker whose successor
    already accepts: the old generation stops accepting at once, so a probe meets the new
    workers, never an old one saying 503."""
    from tests.support.harness import _children

    server = start_server("lifecycle:app", "--workers", "2", *OPS, "--shutdown-delay", "30")
    assert wait_for(lambda: server.output().count("Application startup complete") == 2, 15), server.output()
    old = set(_children(server.proc.pid))
    statuses = []
    server.proc.send_signal(signal.SIGHUP)
    started = time.monotonic()
    while time.monotonic() - started < 15:
        statuses.append(answer(server.port, "/readyz")[0])
        children = set(_children(server.proc.pid))
        if len(children) == 2 and not children & old:
            break
    assert not set(_children(server.proc.pid)) & old, "the old workers went"
    assert time.monotonic() - started < 10, "they did not wait for --shutdown-delay"
    assert set(statuses) == {200}, statuses
    server.proc.send_signal(signal.SIGINT)  # no delay for Ctrl+C
    assert server.wait(10) == 0
