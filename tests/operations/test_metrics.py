"""--metrics-path and --health-path: answered by the engine, never by the app; summed across workers."""

import os
import signal
import socket
import threading
import time

import httpx

from tests.support.harness import _children, wait_for, zigcorn_only

pytestmark = zigcorn_only


def parse(text: str) -> dict[str, float]:
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def total(values: dict[str, float], name: str, **labels: str) -> float:
    """A labelled series summed over the labels not given (e.g. every method and status class)."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for key, v in values.items()
               if key.split("{", 1)[0] == name and all(w in key for w in want))


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
    count = total(after, "zigcorn_request_duration_seconds_count")
    assert count >= 22
    assert total(after, "zigcorn_request_duration_seconds_bucket", le="+Inf") == count
    assert total(after, "zigcorn_request_duration_seconds_count", method="GET", status_class="2xx") >= 21
    assert total(after, "zigcorn_request_duration_seconds_count", method="POST", status_class="2xx") == 1
    # The echo's 5000 bytes are in the POST cell's size histogram, above 1000 and at most 10000.
    assert total(after, "zigcorn_response_size_bytes_bucket", method="POST", le="1000") == 0
    assert total(after, "zigcorn_response_size_bytes_bucket", method="POST", le="10000") == 1
    assert total(after, "zigcorn_response_size_bytes_sum", method="POST") == 5000
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
    assert (total(values, "zigcorn_request_duration_seconds_bucket", le="0.5")
            < total(values, "zigcorn_request_duration_seconds_bucket", le="2.5"))
    assert total(values, "zigcorn_request_duration_seconds_count", status_class="5xx") >= 1


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
        assert wait_for(lambda: "Shutting down" in server.output(), 10), server.output()  # the drain has begun
        sock.sendall(b"\r\n")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 503 "), reply
    assert b"connection: close" in reply and reply.endswith(b"draining\n")
    assert server.wait() == 0


def test_histogram_buckets_are_set_by_flag_and_labelled_by_method_and_status(start_server):
    server = start_server("basic:app", "--metrics-path", "/metrics", "--no-access-log",
                          "--metrics-buckets", "0.2,0.75,3")
    with httpx.Client(base_url=server.url) as client:
        assert client.get("/sleep", params={"s": "0.3"}).status_code == 200
        assert client.get("/status/404").status_code == 404
        assert client.request("BREW", "/hello").status_code == 200
        assert client.delete("/hello").status_code == 200
    values = scrape(server)
    les = {key.split('le="')[1].split('"')[0] for key in values if key.startswith("zigcorn_request_duration_seconds_bucket")}
    assert les == {"0.2", "0.75", "3", "+Inf"}
    sleepy = dict(method="GET", status_class="2xx")
    assert total(values, "zigcorn_request_duration_seconds_bucket", le="0.2", **sleepy) == 0
    assert total(values, "zigcorn_request_duration_seconds_bucket", le="0.75", **sleepy) == 1
    assert total(values, "zigcorn_request_duration_seconds_count", method="GET", status_class="4xx") == 1
    # A method outside the table counts as "other": clients cannot grow the label set.
    assert total(values, "zigcorn_request_duration_seconds_count", method="other") == 1
    assert total(values, "zigcorn_request_duration_seconds_count", method="DELETE") == 1
    assert "BREW" not in httpx.get(server.url + "/metrics").text


def test_bad_histogram_buckets_are_refused_at_start(start_server):
    for bad in ("0.5,0.1", "0,1", "x", ",".join(["1"] * 3)):
        server = start_server("basic:app", "--metrics-path", "/metrics", "--metrics-buckets", bad, wait=False)
        assert server.proc.wait(20) != 0
