"""`await send(...)` for start and body messages skips the coroutine; every other case
must behave as the Python send did (errors at the await, waits for slow clients)."""

import json
import time

import httpx
import pytest

from tests.support.rawhttp import RawConn, get

pytestmark = pytest.mark.every_python


@pytest.fixture(scope="module")
def kinds():
    from tests.support.harness import Server

    server = Server("send_kinds:app")
    try:
        yield server.wait_ready()
    finally:
        server.kill()


def test_start_returns_a_done_awaitable_and_a_dict_subclass_takes_the_python_send(kinds):
    r = httpx.get(kinds.url + "/kinds")
    assert r.status_code == 200
    report = json.loads(r.text)
    assert report == {"start_awaitable": True, "start_coroutine": False, "start_result": "None",
                      "same_awaitable_twice": "None"}  # fmt: skip


def test_second_start_is_refused_at_the_await_not_the_call(kinds):
    r = httpx.get(kinds.url + "/double")
    assert r.text.startswith("refused at the await: Expected ASGI message 'http.response.body'"), r.text


def test_a_slow_reader_makes_body_sends_wait_and_gets_every_byte(kinds):
    with RawConn(kinds.port, timeout=30) as conn:
        conn.send(get("/big"))
        time.sleep(0.5)  # the socket buffer fills: later sends must wait for the client
        r = conn.read_response()
    assert r.status == 200 and len(r.body) == 65536 * 128 and set(r.body) == {ord("x")}
    seen = httpx.get(kinds.url + "/big-kinds").json()
    assert seen["big_sends"] == 128
    assert 0 < seen["big_waited"] < 128, seen
