"""WebSocket limits: message size, deflate bombs, slow readers, keepalive pings, idle memory, shutdown."""

import asyncio
import json
import signal
import subprocess
import time

import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from tests.support.harness import CLEAN_SIGTERM_EXIT, IS_ZIGCORN, wait_for, zigcorn_only
from tests.hardening.test_hardening_limits import raise_nofile
from tests.support.tools import require_tool
from tests.support.wsraw import RawWS, close_payload, compress

TEXT, BINARY, CLOSE, PING, PONG = 1, 2, 8, 9, 10


def url(server, path: str) -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_oversize_message_is_1009(start_server):
    server = start_server("ws:app", "--ws-max-size", "1000")

    async def go():
        async with websockets.connect(url(server, "/echo")) as ws:
            await ws.send(b"x" * 1000)  # exactly the limit passes
            assert await ws.recv() == b"x" * 1000
            await ws.send(b"x" * 1001)
            with pytest.raises(ConnectionClosed) as info:
                await ws.recv()
            assert info.value.rcvd.code == 1009

    run(go())
    # Over the limit across fragments, and a frame that only announces a huge length.
    ws = RawWS(server.port)
    ws.send_frame(BINARY, b"a" * 600, fin=False)
    ws.send_frame(0, b"a" * 600, fin=True)
    assert ws.recv_close()[0] == 1009
    assert ws.closed_by_peer()
    ws.close()
    ws = RawWS(server.port)
    ws.send(bytes([0x82, 0xFF]) + (1 << 40).to_bytes(8, "big") + b"mask")
    assert ws.recv_close()[0] == 1009
    ws.close()


def test_deflate_bomb_is_1009(start_server):
    server = start_server("ws:app", "--ws-max-size", "65536")
    bomb = compress(b"\0" * (8 << 20))  # 8 MiB of zeros in about 8 KiB
    assert len(bomb) < 65536
    ws = RawWS(server.port, extra="Sec-WebSocket-Extensions: permessage-deflate\r\n")
    try:
        assert ws.headers["sec-websocket-extensions"].startswith("permessage-deflate")
        rss_before = server.rss_kb()
        ws.send_frame(BINARY, bomb, rsv1=True)
        assert ws.recv_close()[0] == 1009
        assert ws.closed_by_peer()
        assert server.rss_kb() - rss_before < 4 * 1024
    finally:
        ws.close()
    # Garbage that is not deflate data fails the connection too (1002), nothing worse.
    ws = RawWS(server.port, extra="Sec-WebSocket-Extensions: permessage-deflate\r\n")
    ws.send_frame(BINARY, b"\xff" * 20, rsv1=True)
    assert ws.recv_close()[0] == 1002
    ws.close()


def test_client_that_stops_reading_does_not_grow_server_memory(start_server):
    server = start_server("ws:app", "--ws-ping-interval", "0")
    ws = RawWS(server.port, "/flood", timeout=10)
    assert ws.status == 101
    try:
        time.sleep(1.0)
        rss_1s = server.rss_kb()
        time.sleep(2.0)
        grown = server.rss_kb() - rss_1s
    finally:
        ws.close()
    assert grown < 2 * 1024, f"RSS grew {grown} KiB while the client did not read"

    async def sent():
        async with websockets.connect(url(server, "/events")) as client:
            return json.loads(await client.recv())

    events = run(sent())
    # The app was held back by send(): only what the socket buffers took, not 100k messages.
    assert events and events[0]["sent"] < 1000, events


def test_server_pings_and_closes_without_pong(start_server):
    server = start_server("ws:app", "--ws-ping-interval", "1", "--ws-ping-timeout", "1")
    answering = RawWS(server.port, "/idle", timeout=10)
    silent = RawWS(server.port, "/idle", timeout=10)
    try:
        # The answering client gets pings and stays open.
        for _ in range(2):
            fin, opcode, payload = answering.recv_frame()
            assert (fin, opcode) == (True, PING)
            answering.send_frame(PONG, payload)
        # The silent one is closed with 1011 about ping interval + timeout after its accept.
        assert silent.recv_frame()[1] == PING
        started = time.monotonic()
        assert silent.recv_close()[0] == 1011
        assert silent.closed_by_peer()
        assert time.monotonic() - started < 4
        answering.send_frame(PING, b"still here")
        while True:
            _, opcode, payload = answering.recv_frame()
            if opcode == PONG:
                assert payload == b"still here"
                break
    finally:
        answering.close()
        silent.close()


def test_graceful_shutdown_closes_websockets_going_away(start_server):
    """No --timeout-graceful-shutdown: once accepting stops, WebSockets are told to go:
    1001 (going away) from zigcorn, 1012 (service restart) from uvicorn."""
    server = start_server("ws:app")

    async def go():
        async with websockets.connect(url(server, "/echo")) as ws:
            await ws.send("hi")
            assert await ws.recv() == "hi"
            server.proc.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as info:
                await ws.recv()
            assert info.value.rcvd.code == (1001 if IS_ZIGCORN else 1012)

    run(go())
    assert server.wait(10) == CLEAN_SIGTERM_EXIT


@zigcorn_only  # uvicorn differs here (see the test)
def test_close_handshake_times_out_when_the_client_never_answers(start_server):
    server = start_server("ws:app")
    ws = RawWS(server.port, "/close-code?1000&bye", timeout=10)
    try:
        assert ws.recv_close() == (1000, "bye")
        started = time.monotonic()
        assert wait_for(ws.closed_by_peer, 6)  # we never send our close frame
        assert time.monotonic() - started < 5
    finally:
        ws.close()


def open_idle_websockets(port: int, n: int) -> list[RawWS]:
    return [RawWS(port, "/idle", timeout=10) for _ in range(n)]


@zigcorn_only  # uvicorn differs here (see the test)
def test_1000_idle_websockets_have_bounded_memory(start_server, record_property):
    raise_nofile(4000)
    server = start_server("ws:app", "--ws-ping-interval", "0")
    socks = open_idle_websockets(server.port, 100)
    try:
        assert all(s.status == 101 for s in socks)
        time.sleep(0.5)
        baseline = server.rss_kb()
        socks += open_idle_websockets(server.port, 1000)
        time.sleep(0.5)
        grown = server.rss_kb() - baseline
        # Every one is alive and served.
        for s in socks[::100]:
            s.send_frame(PING, b"?")
            assert s.recv_frame() == (True, PONG, b"?")
    finally:
        for s in socks:
            s.close()
    per_ws = grown * 1024 / 1000
    record_property("bytes_per_idle_websocket", per_ws)
    print(f"\nRSS per idle WebSocket: {per_ws:.0f} bytes")
    assert per_ws < 16 * 1024, f"{per_ws:.0f} bytes per idle WebSocket"


@zigcorn_only  # uvicorn differs here (see the test)
def test_engine_does_not_link_zlib():
    import zigcorn._core as core

    out = subprocess.run([require_tool("ldd", reason="lists the engine's libraries"), core.__file__],
                         capture_output=True, text=True).stdout
    assert "libz" not in out, out


def test_disconnect_while_app_waits_on_send_raises_in_app(start_server):
    server = start_server("ws:app", "--ws-ping-interval", "0")
    ws = RawWS(server.port, "/flood", timeout=10)
    time.sleep(0.5)
    ws.close()

    async def sent():
        async with websockets.connect(url(server, "/events")) as client:
            return json.loads(await client.recv())

    events = run(sent())
    assert events and events[0]["sent"] < 100_000
    assert "Traceback" not in server.output()


def test_no_memory_growth_over_many_sessions_and_messages(start_server):
    server = start_server("ws:app", "--ws-ping-interval", "0", "--no-access-log")

    async def sessions(n: int) -> None:
        for i in range(n):
            compression = "deflate" if i % 2 else None
            async with websockets.connect(url(server, "/echo"), compression=compression, max_size=None) as ws:
                for message in ["x" * 1000, b"y" * 70_000, "z" * 20]:
                    await ws.send(message)
                    assert await ws.recv() == message

    async def messages(n: int) -> None:
        async with websockets.connect(url(server, "/echo")) as ws:
            for i in range(n):
                await ws.send(f"message {i} " * 20)
                await ws.recv()

    run(sessions(60))
    run(messages(500))
    before = server.rss_kb()
    run(sessions(300))
    run(messages(3000))
    grown = server.rss_kb() - before
    assert grown < 3 * 1024, f"RSS grew {grown} KiB over 300 sessions and 3000 messages"


def test_random_garbage_after_the_handshake_never_kills_the_worker(start_server):
    import random

    server = start_server("ws:app", "--ws-ping-interval", "0")
    rng = random.Random(1234)
    for i in range(60):
        ws = RawWS(server.port, extra="Sec-WebSocket-Extensions: permessage-deflate\r\n" if i % 2 else "")
        try:
            ws.send(rng.randbytes(rng.choice([1, 2, 14, 200, 5000, 70_000])))
            ws.sock.settimeout(0.3)
            ws.closed_by_peer()
        except OSError:
            pass
        finally:
            ws.close()
    assert server.proc.poll() is None

    async def still_serving():
        async with websockets.connect(url(server, "/echo")) as ws:
            await ws.send("alive")
            return await ws.recv()

    assert run(still_serving()) == "alive"
