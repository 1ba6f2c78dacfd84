"""--metrics-path and --health-path: answered by the engine, never by the app; summed across workers."""

import os
import signal
import socket
import threading
import time

import httpx

from tests.harness import _children, wait_for, zigcorn_only

pytestmark = zigcorn_only


def parse(text: str) -> dict[str, float]:
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def scrape(server) -> dict[str, float]:
    r = httpx.get(server.url + "/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(r.text)


def test_metrics_move_with_traffic_and_never_reach_the_app(start_server):
    server = start_server("basic:app", "--metrics-path", "/metrics", "--no-access-log")
    before = scrape(server)
    with httpx.Client(base_url=server.url) as client:
        for _ in range(20):
            assert client.get("/hello").status_code == 200
        client.get("/nothing-here-but-echo")
        raw = client.post("/echo", content=b"x" * 5000)
        assert raw.status_code == 200
    after = scrape(server)
    assert after['zigcorn_requests_total{status_class="2xx"}'] - before['zigcorn_requests_total{status_class="2xx"}'] >= 22
    assert after["zigcorn_received_bytes_total"] - before["zigcorn_received_bytes_total"] > 5000
    assert after["zigcorn_sent_bytes_total"] > before["zigcorn_sent_bytes_total"]
    assert after["zigcorn_request_duration_seconds_count"] >= 22
    assert after['zigcorn_request_duration_seconds_bucket{le="+Inf"}'] == after["zigcorn_request_duration_seconds_count"]
    assert after["zigcorn_resident_memory_bytes"] > 1_000_000
    assert after["zigcorn_workers"] == 1
    assert after["zigcorn_connections_open"] >= 1  # this scrape's own connection
    # The app never saw /metrics: basic:app would have echoed the path.
    assert "zigcorn_requests_in_flight" in httpx.get(server.url + "/metrics").text


def test_in_flight_and_5xx_are_counted(start_server):
    server = start_server("basic:app", "--metrics-path", "/metrics", "--limit-concurrency", "1")
    done = threading.Event()
    t = threading.Thread(target=lambda: (httpx.get(server.url + "/sleep?s=1", timeout=10), done.set()))
    t.start()
    assert wait_for(lambda: scrape(server)["zigcorn_requests_in_flight"] >= 1)
    assert httpx.get(server.url + "/x").status_code == 503  # over --limit-concurrency
    t.join(10)
    values = scrape(server)
    assert values['zigcorn_requests_total{status_class="5xx"}'] >= 1
    assert values['zigcorn_request_duration_seconds_bucket{le="0.5"}'] < values['zigcorn_request_duration_seconds_bucket{le="2.5"}']


def test_metrics_are_summed_across_workers_and_count_restarts(start_server):
    server = start_server("basic:app", "--workers", "2", "--metrics-path", "/metrics", "--no-access-log")
    assert wait_for(lambda: len(_children(server.proc.pid)) == 2)
    assert wait_for(lambda: scrape(server)["zigcorn_workers"] == 2, 10)
    pids = set()
    for _ in range(100):  # a new connection each time: both workers serve some
        pids.add(httpx.get(server.url + "/pid").text)
    assert len(pids) == 2
    # Whichever worker answers, the total is the same and includes both workers' requests.
    totals = {scrape(server)['zigcorn_requests_total{status_class="2xx"}'] for _ in range(6)}
    assert min(totals) >= 100
    os.kill(int(sorted(pids)[0]), signal.SIGKILL)
    assert wait_for(lambda: scrape(server)["zigcorn_worker_restarts_total"] == 1, 10)
    assert wait_for(lambda: scrape(server)["zigcorn_workers"] == 2, 10)
    # The replacement carries the dead worker's counters on.
    assert scrape(server)['zigcorn_requests_total{status_class="2xx"}'] >= 100


def test_health_path_answers_200_then_503_while_draining(start_server):
    server = start_server("basic:app", "--health-path", "/healthz", "--timeout-graceful-shutdown", "5")
    r = httpx.get(server.url + "/healthz")
    assert (r.status_code, r.text) == (200, "ok\n")
    assert r.headers["cache-control"] == "no-store"
    assert httpx.head(server.url + "/healthz").status_code == 200
    assert httpx.post(server.url + "/healthz").text == "/healthz"  # other methods reach the app
    # A probe whose head is still arriving when the drain starts is answered 503 and closed.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.2)
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        sock.sendall(b"\r\n")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 503 "), reply
    assert b"connection: close" in reply and reply.endswith(b"draining\n")
    assert server.wait() == 0
