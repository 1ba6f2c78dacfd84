"""WebSocket over HTTP/3 (RFC 9220): what only HTTP/3 brings (its refusals, its stream
resets, QUIC's flow control under the app's sends, the drain's close) and hostile peers,
on both I/O backends. What HTTP/2 and HTTP/3 share runs over both in
test_websocket_streams.py.

The client is aioquic's H3Connection (tests/support/h3ws.py) with hand-made masked frames.
"""

import json
import signal
import struct
import time

import pytest

from tests.support.h3_support import h3_certs  # noqa: F401 (fixture)
from tests.support.harness import wait_for, zigcorn_only
from tests.websocket.test_websocket_streams import WsOverH3, frame, parse_frames_prefix, start_ws_server

pytestmark = zigcorn_only

H3_MESSAGE_ERROR = 0x10E
H3_REQUEST_CANCELLED = 0x10C
MAX_SIZE = 4096


@pytest.fixture(scope="module", params=["epoll", "io_uring"])
def server(request, h3_certs):  # noqa: F811 (fixture)
    s = start_ws_server(f"h3-{request.param}", h3_certs, "--ws-max-size", str(MAX_SIZE))
    yield s
    s.stop()


def still_serves(ws: WsOverH3) -> None:
    """A plain request on the same connection is answered: the session went on."""
    headers, body = ws.request("/plain")
    assert headers[":status"] == "200" and json.loads(body)["path"] == "/plain"


def events_seen(server) -> list:
    """What /disconnect-report and /flood recorded (tests/apps/ws.py), over a fresh session."""
    ws = WsOverH3(server.port, "/events", cafile=server.cafile)
    try:
        assert ws.response()[":status"] == "200"
        return json.loads(ws.frames(1)[0][1])
    finally:
        ws.close()


def test_a_connect_without_websocket_is_refused_as_over_http2(server):
    ws = WsOverH3(server.port, "/echo", cafile=server.cafile)
    try:
        h3 = ws.h3
        assert ws.response()[":status"] == "200"
        # Another protocol: 501; no version 13: 426 (the stream answered, not reset).
        assert h3.response(h3.connect("/echo", protocol="chat"))[0][":status"] == "501"
        sid = h3.quic.get_next_available_stream_id()
        h3.proto.http.send_headers(sid, [(b":method", b"CONNECT"), (b":protocol", b"websocket"),
                                         (b":scheme", b"https"), (b":path", b"/echo"),
                                         (b":authority", b"localhost")])
        h3.transmit()
        assert h3.response(sid)[0][":status"] == "426"
        # A plain CONNECT (a tunnel) is malformed here: the stream is reset.
        sid = h3.quic.get_next_available_stream_id()
        h3.proto.http.send_headers(sid, [(b":method", b"CONNECT"), (b":authority", b"localhost:443")])
        h3.transmit()
        assert h3.was_reset(sid) == H3_MESSAGE_ERROR
        # The WebSocket opened first is untouched.
        ws.send(frame(0x1, b"still here"))
        assert ws.frames(1)[0][:2] == (0x1, b"still here")
        still_serves(ws)
    finally:
        ws.close()


def test_a_stream_reset_reaches_the_app_as_1006(server):
    ws = WsOverH3(server.port, "/disconnect-report", cafile=server.cafile)
    try:
        assert ws.response()[":status"] == "200"
        ws.h3.reset(ws.sid, H3_REQUEST_CANCELLED)
        still_serves(ws)
    finally:
        ws.close()
    assert wait_for(lambda: (seen := events_seen(server)) and seen[0]["code"] == 1006, 10)


def test_frames_before_the_200_wait_for_the_accept(server):
    ws = WsOverH3(server.port, "/echo", cafile=server.cafile)
    try:
        ws.send(frame(0x1, b"early"))  # sent with the CONNECT, before any answer
        assert ws.response()[":status"] == "200"
        assert ws.frames(1)[0][:2] == (0x1, b"early")
    finally:
        ws.close()


def test_frames_sent_to_a_denial_are_dropped(server):
    ws = WsOverH3(server.port, "/deny", cafile=server.cafile)
    try:
        ws.send(frame(0x1, b"x" * 1000) * 50)
        headers, body = ws.denial()
        assert headers[":status"] == "401" and body == b"no entry"
        still_serves(ws)
    finally:
        ws.close()


def test_an_oversized_frame_gets_1009_and_the_connection_serves_on(server):
    ws = WsOverH3(server.port, "/echo", cafile=server.cafile)
    try:
        assert ws.response()[":status"] == "200"
        # Only the header: it announces more than --ws-max-size.
        ws.send(bytes([0x82, 0x80 | 127]) + struct.pack("!Q", MAX_SIZE + 1) + b"\x00\x00\x00\x00")
        assert ws.frames(1)[0][:2] == (0x8, struct.pack("!H", 1009))
        # Our side ends after the close frame.
        assert ws.ended()
        still_serves(ws)
    finally:
        ws.close()


def test_data_after_the_clients_fin_ends_its_connection_and_the_server_serves_on(server):
    ws = WsOverH3(server.port, "/disconnect-report", cafile=server.cafile)
    try:
        assert ws.response()[":status"] == "200"
        ws.end()
        # aioquic refuses to write after a FIN: its sender is told it never sent one, so
        # the next bytes go past the stream's final size (RFC 9000 4.5).
        ws.h3.quic._streams[ws.sid].sender._buffer_fin = None
        ws.h3.quic.send_stream_data(ws.sid, frame(0x1, b"after the end"))
        ws.h3.transmit()
        assert ws.h3.wait_until(lambda: ws.h3.quic._close_event is not None)
        assert ws.h3.quic._close_event.error_code == 0x06  # FINAL_SIZE_ERROR
    finally:
        ws.close()
    seen = events_seen(server)  # a new connection is served
    assert seen and seen[0]["type"] == "websocket.disconnect" and seen[0]["code"] == 1006


def test_an_app_waiting_after_its_close_sees_the_connection_end(server):
    ws = WsOverH3(server.port, "/close-then-wait", cafile=server.cafile)
    try:
        assert ws.response()[":status"] == "200"
        assert ws.frames(1)[0][:2] == (0x8, struct.pack("!H", 4000))
        assert ws.ended()  # our FIN followed the close frame
    finally:
        ws.close()  # the QUIC connection ends without the client's close frame
    seen = events_seen(server)
    assert seen and seen[0]["type"] == "websocket.disconnect", seen


def test_the_close_handshake_then_both_fins(server):
    ws = WsOverH3(server.port, "/disconnect-report", cafile=server.cafile)
    try:
        assert ws.response()[":status"] == "200"
        ws.send(frame(0x8, struct.pack("!H", 4000) + b"done"))
        ws.end()
        assert ws.frames(1)[0][:2] == (0x8, struct.pack("!H", 4000))
        assert ws.ended()
    finally:
        ws.close()
    seen = events_seen(server)
    assert seen and seen[0]["code"] == 4000 and seen[0]["reason"] == "done"


def test_the_apps_sends_wait_on_the_streams_flow_control(server):
    """The app's send() goes on as the client reads (2 MiB, more than QUIC's windows and the
    engine's queue hold), and waits while it does not: a client whose loop is stalled has
    been sent little when it resets the stream."""
    ws = WsOverH3(server.port, "/flood", cafile=server.cafile)
    try:
        assert ws.response()[":status"] == "200"
        assert [f[:1] for f in ws.frames(32)] == [(0x2,)] * 32
        ws.h3.reset(ws.sid, H3_REQUEST_CANCELLED)
    finally:
        ws.close()
    assert events_seen(server)[0]["sent"] >= 31
    ws = WsOverH3(server.port, "/flood", cafile=server.cafile)
    try:
        assert ws.response()[":status"] == "200"
        # aioquic runs only while we wait: for 0.5 s it reads and acknowledges nothing.
        time.sleep(0.5)
        ws.h3.reset(ws.sid, H3_REQUEST_CANCELLED)
        still_serves(ws)
    finally:
        ws.close()
    seen = events_seen(server)
    # 64 KiB messages: what QUIC took and 64 KiB queued, not the app's 100,000.
    assert seen and 1 <= seen[0]["sent"] < 40, seen


def test_the_drains_deadline_closes_with_1001(h3_certs):  # noqa: F811 (fixture)
    server = start_ws_server("h3-epoll", h3_certs, "--timeout-graceful-shutdown", "2")
    ws = WsOverH3(server.port, "/echo", cafile=server.cafile)
    try:
        assert ws.response()[":status"] == "200"
        sigterm_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        # Until the deadline the WebSocket goes on...
        time.sleep(0.5)
        ws.send(frame(0x1, b"during"))
        assert ws.frames(1)[0][:2] == (0x1, b"during")
        # ...then the close frame, 1001, comes.
        ws.h3.wait_until(lambda: len(parse_frames_prefix(ws.h3.data(ws.sid))) >= 2, timeout=8)
        closed_after = time.monotonic() - sigterm_at
        last = parse_frames_prefix(ws.h3.data(ws.sid))[-1]
        assert last[:2] == (0x8, struct.pack("!H", 1001))
        assert 1.5 < closed_after < 5, closed_after
        ws.send(frame(0x8, struct.pack("!H", 1001)))
        ws.end()
        assert ws.ended()
    finally:
        ws.close()
    assert server.wait(10) == 0


def test_websockets_on_four_workers(h3_certs):  # noqa: F811 (fixture)
    """Each QUIC connection stays with the worker that took it (its connection IDs carry the
    worker's index): WebSockets on several connections echo through 4 workers."""
    server = start_ws_server("h3-epoll", h3_certs, "--workers", "4")
    sessions = []
    try:
        for i in range(6):
            ws = WsOverH3(server.port, "/echo", cafile=server.cafile)
            sessions.append(ws)
            assert ws.response()[":status"] == "200"
        for i, ws in enumerate(sessions):
            ws.send(frame(0x2, bytes([i]) * 70_000))
        for i, ws in enumerate(sessions):
            assert ws.frames(1)[0][:2] == (0x2, bytes([i]) * 70_000)
    finally:
        for ws in sessions:
            ws.close()
        server.stop()
