"""One Content-Length rule on every protocol: a request carries at most one Content-Length
field, whose value is 1*DIGIT. A second field (even with the same value, even `5` beside
`05`) or a list (`5, 5`) is refused: 400 then close over HTTP/1.1, RST_STREAM
PROTOCOL_ERROR over HTTP/2 (H3_MESSAGE_ERROR over HTTP/3, in the Zig unit tests). The app
never sees such a request; a single field reaches it once, as sent.

The rule, and why it refuses rather than folds identical values (RFC 9110 8.6 allows
both), is `fields.contentLength` in src/zig/http/fields.zig and the parsing policy in
docs/security.md."""

import json

import h2.errors
import hpack
import pytest
from hyperframe.frame import DataFrame, HeadersFrame, RstStreamFrame

from tests.support.h2raw import H2Conn
from tests.support.harness import zigcorn_only
from tests.support.rawhttp import RawConn

pytestmark = zigcorn_only

# The Content-Length fields of each refused case, as HTTP/1.1 field lines would carry them.
REFUSED = {
    "two-identical": [b"5", b"5"],
    "5-beside-05": [b"5", b"05"],
    "list-identical": [b"5, 5"],
    "list-no-space": [b"5,5"],
    "list-5-05": [b"5, 05"],
}


# tests/apps/echo_all.py, one server for the module: reads the body, echoes the request.
from tests.hardening.test_hardening_parse import echo  # noqa: E402,F401 (the fixture)


def http1(port: int, lengths: list[bytes]):
    head = b"POST /cl HTTP/1.1\r\nHost: test\r\n" + b"".join(b"Content-Length: " + v + b"\r\n" for v in lengths)
    with RawConn(port, timeout=5) as conn:
        conn.send(head + b"\r\nhello")
        r = conn.read_response()
        return r, conn.is_closed()


def content_lengths(body: bytes) -> list[str]:
    return [v for k, v in json.loads(body)["headers"] if k == "content-length"]


def test_http1_one_content_length_reaches_the_app_once_as_sent(echo):
    r, _ = http1(echo.port, [b"05"])
    assert r.status == 200
    assert content_lengths(r.body) == ["05"]
    assert json.loads(r.body)["body"] == "hello"


@pytest.mark.parametrize("lengths", REFUSED.values(), ids=REFUSED.keys())
def test_http1_more_than_one_content_length_is_400_and_close(echo, lengths):
    r, closed = http1(echo.port, lengths)
    # The engine's own 400: not the app's JSON echo of the request.
    assert r.status == 400, (r.status, r.body)
    assert b"content-length" not in r.body.lower()
    assert closed


def h2_requests(port: int, cases: list[list[bytes]]) -> dict[int, tuple]:
    """Each case's Content-Length values on its own stream (1, 3, ...), all in one write;
    returns per stream ("reset", code) or (status, body)."""
    conn = H2Conn(port)
    encoder = hpack.Encoder()
    decoder = hpack.Decoder()
    out = b""
    for i, lengths in enumerate(cases):
        sid = 2 * i + 1
        fields = [(":method", "POST"), (":scheme", "http"), (":path", "/cl"), (":authority", "test"),
                  *(("content-length", v.decode()) for v in lengths)]
        out += HeadersFrame(sid, data=encoder.encode(fields), flags=["END_HEADERS"]).serialize()
        out += DataFrame(sid, data=b"hello", flags=["END_STREAM"]).serialize()
    results: dict[int, tuple] = {}
    status: dict[int, int] = {}
    body: dict[int, bytes] = {}
    try:
        conn.send_raw(out)
        for frame in conn.raw_frames(timeout=10):
            sid = frame.stream_id
            if isinstance(frame, RstStreamFrame):
                results[sid] = ("reset", frame.error_code)
            elif isinstance(frame, HeadersFrame):
                status[sid] = int(dict(decoder.decode(frame.data))[":status"])
            elif isinstance(frame, DataFrame) and sid:
                body[sid] = body.get(sid, b"") + frame.data
            if sid and "END_STREAM" in getattr(frame, "flags", ()):
                results[sid] = (status[sid], body.get(sid, b""))
            if len(results) == len(cases):
                break
    finally:
        conn.close()
    return results


def test_http2_the_same_rule_one_content_length_served_a_second_one_reset(echo):
    cases = [[b"05"], *REFUSED.values(), [b"5"]]
    got = h2_requests(echo.port, cases)
    assert set(got) == {2 * i + 1 for i in range(len(cases))}, got
    # The first and the last are served: the connection went on past the refusals.
    for sid, want in ((1, "05"), (2 * len(cases) - 1, "5")):
        status, body = got[sid]
        assert status == 200 and content_lengths(body) == [want] and json.loads(body)["body"] == "hello"
    for i, name in enumerate(REFUSED, start=1):
        assert got[2 * i + 1] == ("reset", h2.errors.ErrorCodes.PROTOCOL_ERROR), (name, got[2 * i + 1])
