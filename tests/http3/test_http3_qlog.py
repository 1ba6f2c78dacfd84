"""--http3-qlog-dir: one qlog file per QUIC connection, read back after a request made with
aioquic's client: JSON-SEQ records (RFC 7464), the header first, then the events of the
connection and of the request in both directions, the close last; and a directory that goes
away costs a warning, never the connection."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from tests.support.h3_support import H3Certs, h3_certs, start_h3_server  # noqa: F401 (fixture)
from tests.support.harness import wait_for
from tests.support.tools import require_module

require_module("aioquic")
from tests.support.h3client import h3_connect  # noqa: E402

BODY = b"q" * 3000


def run(coro, timeout: float = 60.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def request(port: int, certs: H3Certs) -> tuple[bytes, dict]:
    """One POST on a new connection, closed at the end; its original destination ID and the
    echo's answer."""
    async def go():
        async with h3_connect("127.0.0.1", port, certs.cafile) as client:
            odcid = client._quic._original_destination_connection_id
            response = await client.request("POST", "/echo", body=BODY)
            return odcid, response.json()

    return run(go())


def records(path: Path) -> list[dict]:
    """The file's JSON-SEQ records: each is 0x1E, one JSON text, LF."""
    data = path.read_bytes()
    assert data.startswith(b"\x1e") and data.endswith(b"\n")
    parts = data.split(b"\x1e")[1:]
    assert all(part.endswith(b"\n") for part in parts)
    return [json.loads(part) for part in parts]


def frames_of(events: list[dict], name: str, stream_id: int) -> list[dict]:
    return [f for e in events if e["name"] == name for f in e["data"]["frames"]
            if f["frame_type"] == "stream" and f["stream_id"] == stream_id]


def test_a_request_is_in_its_connections_qlog_file(h3_certs, tmp_path):
    qlog_dir = tmp_path / "qlog"
    qlog_dir.mkdir()
    server = start_h3_server(h3_certs, 1, "--http3-qlog-dir", str(qlog_dir))
    try:
        odcid, echoed = request(server.port, h3_certs)
        assert echoed["bytes"] == len(BODY)
        path = qlog_dir / f"{odcid.hex()}.sqlog"
        # Written when the connection ends: after the client's close and the draining period.
        assert wait_for(lambda: path.exists() and b"connection_closed" in path.read_bytes(), timeout=15)
    finally:
        server.stop()
    header, *events = records(path)
    assert header["qlog_format"] == "JSON-SEQ" and header["qlog_version"] == "0.3"
    assert header["title"] and header["trace"]["vantage_point"]["type"] == "server"
    assert header["trace"]["common_fields"]["ODCID"] == odcid.hex()
    assert header["trace"]["common_fields"]["time_format"] == "relative"
    times = [e["time"] for e in events]
    assert times == sorted(times) and times[0] >= 0

    names = [e["name"] for e in events]
    assert names[0] == "connectivity:connection_started"
    assert names[-1] == "connectivity:connection_closed"
    assert events[0]["data"]["src_ip"] == "127.0.0.1" and events[0]["data"]["dst_port"] == server.port
    owners = {e["data"]["owner"]: e["data"] for e in events if e["name"] == "transport:parameters_set"}
    assert owners["local"]["initial_max_streams_bidi"] == 128
    assert owners["local"]["max_idle_timeout"] == 30_000
    assert owners["remote"]["initial_max_data"] > 0

    sent = [e for e in events if e["name"] == "transport:packet_sent"]
    received = [e for e in events if e["name"] == "transport:packet_received"]
    for packet in sent + received:
        assert packet["data"]["header"]["packet_type"] in ("initial", "handshake", "1RTT")
        assert isinstance(packet["data"]["header"]["packet_number"], int)
    assert {p["data"]["header"]["packet_type"] for p in sent} == {"initial", "handshake", "1RTT"}
    assert {p["data"]["header"]["packet_type"] for p in received} >= {"initial", "handshake", "1RTT"}
    # The request on stream 0: HEADERS and the body, up to its FIN, in the client's packets;
    # the response's in ours, with its FIN.
    request_frames = frames_of(events, "transport:packet_received", 0)
    assert request_frames and request_frames[-1]["fin"] is True
    assert sum(f["length"] for f in request_frames) > len(BODY)
    assert all({"offset", "length", "fin"} <= set(f) for f in request_frames)
    response_frames = frames_of(events, "transport:packet_sent", 0)
    assert response_frames and response_frames[-1]["fin"] is True
    assert any(f["frame_type"] == "crypto" for p in received for f in p["data"]["frames"])
    assert any(f["frame_type"] == "ack" for p in received for f in p["data"]["frames"])

    metrics = [e["data"] for e in events if e["name"] == "recovery:metrics_updated"]
    assert metrics and {"congestion_window", "bytes_in_flight", "smoothed_rtt", "latest_rtt"} <= set(metrics[-1])
    closed = events[-1]["data"]
    assert closed.get("application_code", closed.get("connection_code")) is not None


def test_a_directory_that_goes_away_costs_a_warning_not_the_connection(h3_certs, tmp_path):
    qlog_dir = tmp_path / "qlog"
    qlog_dir.mkdir()
    server = start_h3_server(h3_certs, 1, "--http3-qlog-dir", str(qlog_dir))
    try:
        shutil.rmtree(qlog_dir)
        for _ in range(2):
            _, echoed = request(server.port, h3_certs)
            assert echoed["bytes"] == len(BODY)
        assert wait_for(lambda: server.output().count("qlog: cannot create") == 2, timeout=5), server.output()
    finally:
        server.stop()
    assert not qlog_dir.exists()
