"""The --drain-path exchange both interfaces share: refusals first, then a drain while a
request is in flight (the app's /sleep?s=1&mark=drain prints SLEEP-START drain)."""

import threading

import httpx

from tests.support.harness import wait_for


def check_drain_path(server, token: str, alive_path: str, drain_path: str = "/admin/drain") -> None:
    """403 without the bearer token (also a wrong one or a bare token), 405 with it but not
    a POST, the server still serving (`alive_path` answers 200); then a POST with it is 202
    `draining`, the request in flight finishes, and the server exits 0."""
    url = server.url + drain_path
    assert httpx.post(url).status_code == 403
    assert httpx.post(url, headers={"authorization": "Bearer wrong-token-0123456789"}).status_code == 403
    assert httpx.post(url, headers={"authorization": token}).status_code == 403  # not a bearer token
    assert httpx.get(url).status_code == 403
    r = httpx.get(url, headers={"authorization": f"Bearer {token}"})
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert token not in server.output()
    assert server.proc.poll() is None and httpx.get(server.url + alive_path).status_code == 200
    # A request in flight when the drain starts still finishes.
    results: list = []
    slow = threading.Thread(target=lambda: results.append(httpx.get(server.url + "/sleep?s=1&mark=drain", timeout=10)))
    slow.start()
    assert wait_for(lambda: "SLEEP-START drain" in server.output(), 10), server.output()
    r = httpx.post(url, headers={"authorization": f"Bearer {token}"})
    assert r.status_code == 202 and r.text == "draining\n"
    slow.join(10)
    assert [x.status_code for x in results] == [200]
    assert server.wait(15) == 0
    assert "Drain requested by 127.0.0.1:" in server.output()
