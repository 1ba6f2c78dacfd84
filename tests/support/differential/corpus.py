"""Inputs: a seed corpus of valid requests, named mutations that make them nearly valid,
and a grammar-based generator that combines odd choices. Every input carries the names of
its odd features (its tags); the report groups disagreements by them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace


@dataclass
class Chunked:
    """A chunked body: (size line text, data, what follows the data) per chunk, then the
    last-chunk line, trailer lines and the final line ending."""

    chunks: list = field(default_factory=lambda: [(b"5", b"hello", b"\r\n"), (b"6", b" world", b"\r\n")])
    last: bytes = b"0"
    trailers: list = field(default_factory=list)
    eol: bytes = b"\r\n"
    end: bytes = b"\r\n"

    def to_bytes(self) -> bytes:
        out = b""
        for size, data, after in self.chunks:
            out += size + self.eol + data + after
        out += self.last + self.eol
        for line in self.trailers:
            out += line + self.eol
        return out + self.end


@dataclass
class Req:
    method: bytes = b"GET"
    target: bytes = b"/"
    version: bytes = b"HTTP/1.1"
    headers: list = field(default_factory=lambda: [b"Host: example.com"])
    body: bytes | Chunked = b""
    sp1: bytes = b" "
    sp2: bytes = b" "
    line_end: bytes = b"\r\n"  # after the request line
    eol: bytes = b"\r\n"  # after each field line
    head_end: bytes = b"\r\n"
    prefix: bytes = b""
    after: bytes = b""  # pipelined bytes

    def to_bytes(self) -> bytes:
        head = self.prefix + self.method + self.sp1 + self.target + self.sp2 + self.version + self.line_end
        for line in self.headers:
            head += line + self.eol
        body = self.body.to_bytes() if isinstance(self.body, Chunked) else self.body
        return head + self.head_end + body + self.after

    def copy(self) -> "Req":
        body = replace(self.body, chunks=list(self.body.chunks), trailers=list(self.body.trailers)) \
            if isinstance(self.body, Chunked) else self.body
        return replace(self, headers=list(self.headers), body=body)


@dataclass(frozen=True)
class Input:
    tags: tuple
    data: bytes

    @property
    def key(self) -> str:
        return "+".join(self.tags) or "valid"


def get() -> Req:
    return Req(headers=[b"Host: example.com", b"User-Agent: difftest", b"Accept: */*"])


def post_cl() -> Req:
    return Req(method=b"POST", target=b"/upload?x=1", headers=[b"Host: example.com", b"Content-Type: text/plain",
                                                             b"Content-Length: 11"], body=b"hello world")


def post_chunked() -> Req:
    return Req(method=b"POST", target=b"/upload", headers=[b"Host: example.com", b"Transfer-Encoding: chunked"],
               body=Chunked())


def get_10() -> Req:
    return Req(version=b"HTTP/1.0", headers=[b"User-Agent: difftest"])


SEEDS = {"get": get, "post-cl": post_cl, "post-chunked": post_chunked, "get-1.0": get_10}

NEXT = b"GET /next HTTP/1.1\r\nHost: example.com\r\n\r\n"


def _set_header(req: Req, name: bytes, line: bytes) -> Req:
    """Replaces the field line(s) called `name` (any case) by `line`, or appends it."""
    kept = [h for h in req.headers if h.split(b":", 1)[0].strip().lower() != name.lower()]
    index = next((i for i, h in enumerate(req.headers) if h.split(b":", 1)[0].strip().lower() == name.lower()), len(kept))
    kept.insert(min(index, len(kept)), line)
    req.headers = kept
    return req


def _cl(req: Req, value: bytes) -> Req:
    return _set_header(req, b"content-length", b"Content-Length: " + value)


def _te(req: Req, value: bytes, name: bytes = b"Transfer-Encoding") -> Req:
    return _set_header(req, b"transfer-encoding", name + b": " + value)


def _chunk0(req: Req, size: bytes | None = None, data: bytes | None = None, after: bytes | None = None) -> Req:
    s, d, a = req.body.chunks[0]
    req.body.chunks[0] = (s if size is None else size, d if data is None else data, a if after is None else after)
    return req


def _smuggle(req: Req) -> Req:
    req.after = NEXT
    return req


# Each mutation: name -> (seed names it applies to, function(req) -> req).
# The names are the tags the report groups by; the verdicts (verdicts.py) are keyed by them.
M = {}


def mutation(name, *seeds):
    def register(fn):
        M[name] = (seeds or tuple(SEEDS), fn)
        return fn
    return register


# --- line endings and whitespace in the head
mutation("bare-lf-field-lines", "get", "post-cl")(lambda r: replace(r, eol=b"\n"))
mutation("bare-lf-everywhere", "get", "post-cl")(lambda r: replace(r, eol=b"\n", line_end=b"\n", head_end=b"\n"))
mutation("bare-lf-request-line", "get")(lambda r: replace(r, line_end=b"\n"))
mutation("bare-cr-field-line", "get")(lambda r: replace(r, headers=r.headers + [b"X-A: 1\rX-B: 2"]))
mutation("bare-cr-in-value", "get")(lambda r: replace(r, headers=r.headers + [b"X-A: a\rb"]))
mutation("bare-lf-head-end", "get")(lambda r: replace(r, head_end=b"\n"))
mutation("obs-fold", "get", "post-cl")(lambda r: replace(r, headers=r.headers + [b"X-Folded: a\r\n b"]))
mutation("obs-fold-tab", "get")(lambda r: replace(r, headers=r.headers + [b"X-Folded: a\r\n\tb"]))
mutation("obs-fold-first-line", "get")(lambda r: replace(r, headers=[b" X-Lead: 1"] + r.headers))
mutation("ws-before-colon", "get")(lambda r: replace(r, headers=r.headers + [b"X-Space : v"]))
mutation("tab-before-colon", "get")(lambda r: replace(r, headers=r.headers + [b"X-Tab\t: v"]))
mutation("no-space-after-colon", "get")(lambda r: replace(r, headers=r.headers + [b"X-Tight:v"]))
mutation("tabs-around-value", "get")(lambda r: replace(r, headers=r.headers + [b"X-Tabs:\t v \t"]))
mutation("double-space-request-line", "get")(lambda r: replace(r, sp1=b"  "))
mutation("double-space-before-version", "get")(lambda r: replace(r, sp2=b"  "))
mutation("tab-request-line", "get")(lambda r: replace(r, sp1=b"\t"))
mutation("trailing-space-request-line", "get")(lambda r: replace(r, version=r.version + b" "))
mutation("leading-space-request-line", "get")(lambda r: replace(r, prefix=b" "))
mutation("leading-empty-line", "get")(lambda r: replace(r, prefix=b"\r\n"))
mutation("leading-empty-lines-8", "get")(lambda r: replace(r, prefix=b"\r\n" * 8))
mutation("leading-bare-lf", "get")(lambda r: replace(r, prefix=b"\n"))
mutation("space-in-target", "get")(lambda r: replace(r, target=b"/a b"))
mutation("empty-field-name", "get")(lambda r: replace(r, headers=r.headers + [b": v"]))
mutation("field-line-without-colon", "get")(lambda r: replace(r, headers=r.headers + [b"X-NoColon"]))
# --- control and non-ASCII bytes
mutation("nul-in-value", "get")(lambda r: replace(r, headers=r.headers + [b"X-Nul: a\x00b"]))
mutation("nul-in-name", "get")(lambda r: replace(r, headers=r.headers + [b"X-N\x00ul: v"]))
mutation("nul-in-target", "get")(lambda r: replace(r, target=b"/a\x00b"))
mutation("nul-in-method", "get")(lambda r: replace(r, method=b"GE\x00T"))
mutation("ctl-in-value", "get")(lambda r: replace(r, headers=r.headers + [b"X-Ctl: a\x01b"]))
mutation("del-in-value", "get")(lambda r: replace(r, headers=r.headers + [b"X-Del: a\x7fb"]))
mutation("vtab-in-value", "get")(lambda r: replace(r, headers=r.headers + [b"X-Vt: a\x0bb"]))
mutation("formfeed-in-value", "get")(lambda r: replace(r, headers=r.headers + [b"X-Ff: a\x0cb"]))
mutation("utf8-in-value", "get")(lambda r: replace(r, headers=r.headers + ["X-Utf8: caf\u00e9".encode()]))
mutation("latin1-in-value", "get")(lambda r: replace(r, headers=r.headers + [b"X-L1: caf\xe9"]))
mutation("utf8-in-name", "get")(lambda r: replace(r, headers=r.headers + ["X-caf\u00e9: v".encode()]))
mutation("utf8-in-target", "get")(lambda r: replace(r, target="/caf\u00e9".encode()))
mutation("utf8-in-method", "get")(lambda r: replace(r, method="G\u00c9T".encode()))
mutation("del-in-target", "get")(lambda r: replace(r, target=b"/a\x7fb"))
# --- field names
mutation("underscore-in-name", "get")(lambda r: replace(r, headers=r.headers + [b"X_Under: v"]))
mutation("bad-char-in-name", "get")(lambda r: replace(r, headers=r.headers + [b"X(y): v"]))
mutation("at-in-name", "get")(lambda r: replace(r, headers=r.headers + [b"X@y: v"]))
mutation("slash-in-name", "get")(lambda r: replace(r, headers=r.headers + [b"X/y: v"]))
mutation("upper-case-names", "get", "post-cl", "post-chunked")(
    lambda r: replace(r, headers=[h.split(b":", 1)[0].upper() + b":" + h.split(b":", 1)[1] for h in r.headers]))
mutation("lower-case-names", "get", "post-cl", "post-chunked")(
    lambda r: replace(r, headers=[h.split(b":", 1)[0].lower() + b":" + h.split(b":", 1)[1] for h in r.headers]))
mutation("duplicate-field", "get")(lambda r: replace(r, headers=r.headers + [b"X-Dup: 1", b"X-Dup: 2"]))
mutation("empty-value", "get")(lambda r: replace(r, headers=r.headers + [b"X-Empty:"]))
# --- methods and versions
mutation("lower-case-method", "get", "post-cl")(lambda r: replace(r, method=r.method.lower()))
mutation("mixed-case-method", "get")(lambda r: replace(r, method=b"GeT"))
mutation("unknown-method", "get")(lambda r: replace(r, method=b"FOO"))
mutation("method-with-tchar-punct", "get")(lambda r: replace(r, method=b"G!T"))
mutation("long-method", "get")(lambda r: replace(r, method=b"A" * 40))
mutation("lower-case-version", "get")(lambda r: replace(r, version=b"http/1.1"))
mutation("version-1.2", "get")(lambda r: replace(r, version=b"HTTP/1.2"))
mutation("version-2.0", "get")(lambda r: replace(r, version=b"HTTP/2.0"))
mutation("version-0.9", "get")(lambda r: replace(r, version=b"HTTP/0.9"))
mutation("version-leading-zero", "get")(lambda r: replace(r, version=b"HTTP/01.1"))
mutation("version-two-digits", "get")(lambda r: replace(r, version=b"HTTP/1.10"))
mutation("version-missing", "get")(lambda r: replace(r, sp2=b"", version=b""))
mutation("version-9.9", "get")(lambda r: replace(r, version=b"HTTP/9.9"))
# --- targets
mutation("absolute-form", "get")(lambda r: replace(r, target=b"http://other.example/p?q=1"))
mutation("absolute-form-https", "get")(lambda r: replace(r, target=b"https://other.example/p"))
mutation("absolute-form-no-path", "get")(lambda r: replace(r, target=b"http://other.example"))
mutation("absolute-form-userinfo", "get")(lambda r: replace(r, target=b"http://user@other.example/p"))
mutation("absolute-form-upper-scheme", "get")(lambda r: replace(r, target=b"HTTP://other.example/p"))
mutation("absolute-form-other-scheme", "get")(lambda r: replace(r, target=b"ftp://other.example/p"))
mutation("asterisk-form-get", "get")(lambda r: replace(r, target=b"*"))
mutation("asterisk-form-options", "get")(lambda r: replace(r, method=b"OPTIONS", target=b"*"))
mutation("authority-form-get", "get")(lambda r: replace(r, target=b"example.com:80"))
mutation("target-without-slash", "get")(lambda r: replace(r, target=b"foo/bar"))
mutation("target-fragment", "get")(lambda r: replace(r, target=b"/p#frag"))
mutation("target-backslash", "get")(lambda r: replace(r, target=b"/a\\b"))
mutation("target-percent-nul", "get")(lambda r: replace(r, target=b"/a%00b"))
mutation("target-dot-segments", "get")(lambda r: replace(r, target=b"/a/../b/./c"))
mutation("target-double-slash", "get")(lambda r: replace(r, target=b"//a//b"))
mutation("target-empty-query", "get")(lambda r: replace(r, target=b"/p?"))
mutation("long-target-8k", "get")(lambda r: replace(r, target=b"/" + b"a" * 8000))
mutation("long-target-20k", "get")(lambda r: replace(r, target=b"/" + b"a" * 20000))
# --- Host
mutation("missing-host", "get")(lambda r: replace(r, headers=[h for h in r.headers if not h.lower().startswith(b"host:")]))
mutation("duplicate-host-same", "get")(lambda r: replace(r, headers=r.headers + [b"Host: example.com"]))
mutation("duplicate-host-different", "get")(lambda r: replace(r, headers=r.headers + [b"Host: evil.example"]))
mutation("empty-host", "get")(lambda r: _set_header(r, b"host", b"Host:"))
mutation("host-with-space", "get")(lambda r: _set_header(r, b"host", b"Host: exa mple.com"))
mutation("host-with-userinfo", "get")(lambda r: _set_header(r, b"host", b"Host: user@example.com"))
mutation("host-with-path", "get")(lambda r: _set_header(r, b"host", b"Host: example.com/p"))
mutation("host-with-port", "get")(lambda r: _set_header(r, b"host", b"Host: example.com:8080"))
mutation("host-ipv6", "get")(lambda r: _set_header(r, b"host", b"Host: [::1]:8080"))
mutation("host-bad-port", "get")(lambda r: _set_header(r, b"host", b"Host: example.com:80x"))
mutation("absolute-form-host-mismatch", "get")(
    lambda r: _set_header(replace(r, target=b"http://other.example/p"), b"host", b"Host: example.com"))
# --- Content-Length
mutation("cl-plus-sign", "post-cl")(lambda r: _cl(r, b"+11"))
mutation("cl-minus-sign", "post-cl")(lambda r: _cl(r, b"-11"))
mutation("cl-leading-zeros", "post-cl")(lambda r: _cl(r, b"0011"))
mutation("cl-hex", "post-cl")(lambda r: _cl(r, b"0xb"))
mutation("cl-decimal-point", "post-cl")(lambda r: _cl(r, b"11.0"))
mutation("cl-trailing-garbage", "post-cl")(lambda r: _cl(r, b"11a"))
mutation("cl-inner-space", "post-cl")(lambda r: _cl(r, b"1 1"))
mutation("cl-empty", "post-cl")(lambda r: _cl(r, b""))
mutation("cl-list-same", "post-cl")(lambda r: _cl(r, b"11, 11"))
mutation("cl-list-different", "post-cl")(lambda r: _cl(r, b"11, 5"))
mutation("cl-list-trailing-comma", "post-cl")(lambda r: _cl(r, b"11,"))
mutation("cl-two-lines-same", "post-cl")(lambda r: replace(r, headers=r.headers + [b"Content-Length: 11"]))
mutation("cl-two-lines-different", "post-cl")(lambda r: replace(r, headers=r.headers + [b"Content-Length: 5"]))
mutation("cl-overflow", "post-cl")(lambda r: _cl(r, b"99999999999999999999999"))
mutation("cl-unicode-digit", "post-cl")(lambda r: _cl(r, "1\u0661".encode()))
mutation("cl-shorter-than-body", "post-cl")(lambda r: _cl(r, b"5"))
mutation("cl-longer-than-body", "post-cl")(lambda r: _cl(r, b"20"))
mutation("cl-tab-around", "post-cl")(lambda r: _cl(r, b"\t11\t"))
mutation("cl-on-get", "get")(lambda r: replace(r, headers=r.headers + [b"Content-Length: 4"], body=b"abcd"))
mutation("cl-0-with-smuggled", "get")(lambda r: replace(r, headers=r.headers + [b"Content-Length: 0"], after=NEXT))
mutation("cl-name-underscore", "post-cl")(
    lambda r: replace(r, headers=[h.replace(b"Content-Length", b"Content_Length") for h in r.headers]))
mutation("cl-name-space-before-colon", "post-cl")(
    lambda r: replace(r, headers=[h.replace(b"Content-Length:", b"Content-Length :") for h in r.headers]))
mutation("no-framing-post-body", "post-cl")(
    lambda r: replace(r, headers=[h for h in r.headers if not h.startswith(b"Content-Length")]))
# --- Transfer-Encoding
mutation("te-upper-case", "post-chunked")(lambda r: _te(r, b"CHUNKED"))
mutation("te-mixed-case", "post-chunked")(lambda r: _te(r, b"ChUnKeD"))
mutation("te-leading-space", "post-chunked")(lambda r: _te(r, b"  chunked"))
mutation("te-trailing-space", "post-chunked")(lambda r: _te(r, b"chunked  "))
mutation("te-vtab", "post-chunked")(lambda r: _te(r, b"\x0bchunked"))
mutation("te-xchunked", "post-chunked")(lambda r: _te(r, b"xchunked"))
mutation("te-chunked-x", "post-chunked")(lambda r: _te(r, b"chunkedx"))
mutation("te-quoted", "post-chunked")(lambda r: _te(r, b'"chunked"'))
mutation("te-chunked-identity", "post-chunked")(lambda r: _te(r, b"chunked, identity"))
mutation("te-identity-chunked", "post-chunked")(lambda r: _te(r, b"identity, chunked"))
mutation("te-gzip-chunked", "post-chunked")(lambda r: _te(r, b"gzip, chunked"))
mutation("te-chunked-chunked", "post-chunked")(lambda r: _te(r, b"chunked, chunked"))
mutation("te-chunked-param", "post-chunked")(lambda r: _te(r, b"chunked;q=1"))
mutation("te-empty-element", "post-chunked")(lambda r: _te(r, b", chunked"))
mutation("te-identity", "post-cl")(lambda r: replace(r, headers=r.headers + [b"Transfer-Encoding: identity"]))
mutation("te-two-lines", "post-chunked")(lambda r: replace(r, headers=r.headers + [b"Transfer-Encoding: identity"]))
mutation("te-two-lines-chunked", "post-chunked")(lambda r: replace(r, headers=r.headers + [b"Transfer-Encoding: chunked"]))
mutation("te-obs-fold", "post-chunked")(lambda r: _te(r, b"\r\n chunked"))
mutation("te-name-space-before-colon", "post-chunked")(lambda r: _te(r, b"chunked", b"Transfer-Encoding "))
mutation("te-name-underscore", "post-chunked")(lambda r: _te(r, b"chunked", b"Transfer_Encoding"))
mutation("te-on-http10", "post-chunked")(lambda r: replace(r, version=b"HTTP/1.0"))
mutation("cl-and-te", "post-chunked")(lambda r: replace(r, headers=r.headers + [b"Content-Length: 5"]))
mutation("te-and-cl", "post-chunked")(lambda r: replace(r, headers=[b"Content-Length: 100"] + r.headers))
mutation("cl-and-te-smuggle", "post-chunked")(
    lambda r: replace(r, headers=r.headers + [b"Content-Length: 4"], body=b"0\r\n\r\n" + NEXT))
# --- chunked bodies
mutation("chunk-size-leading-zeros", "post-chunked")(lambda r: _chunk0(r, size=b"0005"))
mutation("chunk-size-upper-hex", "post-chunked")(
    lambda r: _chunk0(r, size=b"A", data=b"0123456789"))
mutation("chunk-size-0x", "post-chunked")(lambda r: _chunk0(r, size=b"0x5"))
mutation("chunk-size-plus", "post-chunked")(lambda r: _chunk0(r, size=b"+5"))
mutation("chunk-size-minus", "post-chunked")(lambda r: _chunk0(r, size=b"-5"))
mutation("chunk-size-leading-space", "post-chunked")(lambda r: _chunk0(r, size=b" 5"))
mutation("chunk-size-trailing-space", "post-chunked")(lambda r: _chunk0(r, size=b"5 "))
mutation("chunk-size-trailing-tab", "post-chunked")(lambda r: _chunk0(r, size=b"5\t"))
mutation("chunk-size-underscore", "post-chunked")(lambda r: _chunk0(r, size=b"5_0"))
mutation("chunk-size-17-digits", "post-chunked")(lambda r: _chunk0(r, size=b"00000000000000005"))
mutation("chunk-size-overflow", "post-chunked")(lambda r: _chunk0(r, size=b"10000000000000005"))
mutation("chunk-size-empty", "post-chunked")(lambda r: _chunk0(r, size=b""))
mutation("chunk-ext", "post-chunked")(lambda r: _chunk0(r, size=b"5;name=value"))
mutation("chunk-ext-quoted", "post-chunked")(lambda r: _chunk0(r, size=b'5;name="a;b c"'))
mutation("chunk-ext-bws", "post-chunked")(lambda r: _chunk0(r, size=b"5 ; name = value"))
mutation("chunk-ext-bare-semicolon", "post-chunked")(lambda r: _chunk0(r, size=b"5;"))
mutation("chunk-ext-no-name", "post-chunked")(lambda r: _chunk0(r, size=b"5;=v"))
mutation("chunk-ext-space-in-value", "post-chunked")(lambda r: _chunk0(r, size=b"5;a=b c"))
mutation("chunk-ext-bad-char", "post-chunked")(lambda r: _chunk0(r, size=b"5;a@b"))
mutation("chunk-ext-non-ascii", "post-chunked")(lambda r: _chunk0(r, size=b"5;a=\xff"))
mutation("chunk-ext-ctl", "post-chunked")(lambda r: _chunk0(r, size=b"5;a=\x01"))
mutation("chunk-ext-bare-cr", "post-chunked")(lambda r: _chunk0(r, size=b"5;a\rb"))
mutation("chunk-ext-unterminated-quote", "post-chunked")(lambda r: _chunk0(r, size=b'5;a="b'))
mutation("chunk-ext-on-last", "post-chunked")(lambda r: replace(r, body=replace(r.body, last=b"0;done")))
mutation("chunk-size-bare-lf", "post-chunked")(lambda r: replace(r, body=replace(r.body, eol=b"\n")))
mutation("chunk-data-bare-lf", "post-chunked")(lambda r: _chunk0(r, after=b"\n"))
mutation("chunk-data-no-crlf", "post-chunked")(lambda r: _chunk0(r, after=b""))
mutation("chunk-data-garbage-crlf", "post-chunked")(lambda r: _chunk0(r, after=b"XX"))
mutation("chunk-data-longer", "post-chunked")(lambda r: _chunk0(r, data=b"hello!"))
mutation("chunk-last-00", "post-chunked")(lambda r: replace(r, body=replace(r.body, last=b"00")))
mutation("chunk-trailer", "post-chunked")(lambda r: replace(r, body=replace(r.body, trailers=[b"X-Trailer: t"])))
mutation("chunk-trailer-obs-fold", "post-chunked")(
    lambda r: replace(r, body=replace(r.body, trailers=[b"X-Trailer: t", b" folded"])))
mutation("chunk-trailer-bare-lf", "post-chunked")(
    lambda r: replace(r, body=replace(r.body, trailers=[b"X-Trailer: t\nX-B: u"])))
mutation("chunk-trailer-no-colon", "post-chunked")(lambda r: replace(r, body=replace(r.body, trailers=[b"nocolon"])))
mutation("chunk-trailer-content-length", "post-chunked")(
    lambda r: replace(r, body=replace(r.body, trailers=[b"Content-Length: 5"])))
mutation("chunk-end-bare-lf", "post-chunked")(lambda r: replace(r, body=replace(r.body, end=b"\n")))
mutation("chunk-end-missing", "post-chunked")(lambda r: replace(r, body=replace(r.body, end=b"")))
mutation("chunk-smuggled-after-last", "post-chunked")(lambda r: replace(r, after=NEXT))
# --- Expect, Connection, Upgrade
mutation("expect-100-continue", "post-cl")(lambda r: replace(r, headers=r.headers + [b"Expect: 100-continue"]))
mutation("expect-100-continue-upper", "post-cl")(lambda r: replace(r, headers=r.headers + [b"Expect: 100-CONTINUE"]))
mutation("expect-unknown", "post-cl")(lambda r: replace(r, headers=r.headers + [b"Expect: something"]))
mutation("expect-on-get", "get")(lambda r: replace(r, headers=r.headers + [b"Expect: 100-continue"]))
mutation("http10-keep-alive", "get-1.0")(lambda r: replace(r, headers=r.headers + [b"Connection: keep-alive"]))
mutation("http10-keep-alive-pipelined", "get-1.0")(
    lambda r: replace(r, headers=r.headers + [b"Connection: keep-alive"], after=NEXT))
mutation("http10-pipelined", "get-1.0")(_smuggle)
mutation("http10-with-host", "get-1.0")(lambda r: replace(r, headers=r.headers + [b"Host: example.com"]))
mutation("connection-close", "get")(lambda r: replace(r, headers=r.headers + [b"Connection: close"]))
mutation("connection-close-pipelined", "get")(
    lambda r: replace(r, headers=r.headers + [b"Connection: close"], after=NEXT))
mutation("connection-close-upper", "get")(lambda r: replace(r, headers=r.headers + [b"Connection: CLOSE"]))
mutation("connection-keep-alive-close", "get")(lambda r: replace(r, headers=r.headers + [b"Connection: keep-alive, close"]))
mutation("upgrade-h2c-no-settings", "get")(
    lambda r: replace(r, headers=r.headers + [b"Connection: Upgrade", b"Upgrade: h2c"]))
mutation("upgrade-websocket-incomplete", "get")(
    lambda r: replace(r, headers=r.headers + [b"Connection: Upgrade", b"Upgrade: websocket"], after=NEXT))
mutation("upgrade-unknown", "get")(lambda r: replace(r, headers=r.headers + [b"Connection: Upgrade", b"Upgrade: foo/1"]))
# --- pipelining and sizes
mutation("pipelined", "get", "post-cl", "post-chunked")(_smuggle)
mutation("pipelined-three", "get")(lambda r: replace(r, after=NEXT + NEXT))
mutation("pipelined-after-bad", "get")(lambda r: replace(r, headers=r.headers + [b"X: a\x00"], after=NEXT))
mutation("long-value-10k", "get")(lambda r: replace(r, headers=r.headers + [b"X-Long: " + b"v" * 10000]))
mutation("long-value-70k", "get")(lambda r: replace(r, headers=r.headers + [b"X-Long: " + b"v" * 70000]))
mutation("many-fields-120", "get")(lambda r: replace(r, headers=r.headers + [b"X-F%d: v" % i for i in range(120)]))
mutation("many-fields-300", "get")(lambda r: replace(r, headers=r.headers + [b"X-F%d: v" % i for i in range(300)]))


def corpus() -> list[Input]:
    """Every seed as is, and every mutation on each seed it applies to (the fixed corpus)."""
    inputs = [Input((f"seed:{name}",), make().to_bytes()) for name, make in SEEDS.items()]
    for name, (seeds, fn) in M.items():
        for seed in seeds:
            inputs.append(Input((name,) if len(seeds) == 1 else (name, f"seed:{seed}"), fn(SEEDS[seed]().copy()).to_bytes()))
    return inputs


# --- the grammar-based generator: a request from weighted choices, each odd choice tagged
_METHODS = [(b"GET", None), (b"POST", None), (b"PUT", None), (b"DELETE", None), (b"get", "lower-case-method"),
            (b"Post", "mixed-case-method"), (b"PATCH", None), (b"X-CUSTOM", "unknown-method")]
_TARGETS = [(b"/", None), (b"/a/b?c=d&e", None), (b"/%7euser/%2F", None), (b"http://h.example/x", "absolute-form"),
            (b"/p#f", "target-fragment"), (b"/a;b=c", None), (b"/" + b"z" * 3000, None), (b"/q?" + b"x=%20" * 50, None)]
_VERSIONS = [(b"HTTP/1.1", None)] * 6 + [(b"HTTP/1.0", "http10"), (b"HTTP/1.2", "version-1.2"), (b"HTTP/1.1 ", "trailing-space-request-line")]
_FIELDS = [b"Accept: text/html", b"Accept-Encoding: gzip, br", b"Cookie: a=b; c=d", b"X-Request-Id: 42",
           b"Cache-Control: no-cache", b"User-Agent: Mozilla/5.0 (X11)", b"Referer: http://r.example/",
           b"X-Forwarded-For: 10.0.0.1", b"Authorization: Bearer x.y.z", b"If-None-Match: \"abc\""]
_ODD_FIELDS = [(b"X-Sp : v", "ws-before-colon"), (b"X-Fold: a\r\n b", "obs-fold"), (b"X_U: v", "underscore-in-name"),
               (b"X-Nul: \x00", "nul-in-value"), (b"X-Hi: \xc3\xa9", "utf8-in-value"), (b"X-Tab:\tv\t", None),
               (b"x-lower: v", None), (b"X-UPPER: V", None), (b"X-Empty:", None), (b"Connection: close", "connection-close"),
               (b"Connection: keep-alive", None), (b"Expect: 100-continue", "expect-100-continue"),
               (b"Upgrade: h2c", None), (b"TE: trailers", None)]
_FRAMINGS = ["none", "none", "cl", "cl", "chunked", "chunked", "cl+te", "te-odd", "cl-odd", "chunk-odd"]
_TE_ODD = [(b"Chunked", "te-mixed-case"), (b"chunked ", "te-trailing-space"), (b" chunked", "te-leading-space"),
           (b"identity, chunked", "te-identity-chunked"), (b"chunked, gzip", "te-chunked-gzip"), (b"xchunked", "te-xchunked")]
_CL_ODD = [(b"+{n}", "cl-plus-sign"), (b"0{n}", "cl-leading-zeros"), (b"{n}, {n}", "cl-list-same"), (b" {n} ", None),
           (b"{n}, 1", "cl-list-different")]
_CHUNK_ODD = [(b"0{h}", "chunk-size-leading-zeros"), (b"{h};a=b", "chunk-ext"), (b"{h} ", "chunk-size-trailing-space"),
              (b"{H}", None), (b"{h};a=\"q\"", "chunk-ext-quoted"), (b"0x{h}", "chunk-size-0x")]


def generate(rng: random.Random) -> Input:
    tags = []

    def pick(options):
        value, tag = rng.choice(options)
        if tag:
            tags.append(tag)
        return value

    req = Req(method=pick(_METHODS), target=pick(_TARGETS), version=pick(_VERSIONS), headers=[])
    if req.version != b"HTTP/1.0" or rng.random() < 0.5:
        req.headers.append(rng.choice([b"Host: example.com", b"host: example.com", b"HOST: example.com:8000"]))
    for _ in range(rng.randrange(4)):
        req.headers.insert(rng.randrange(len(req.headers) + 1), rng.choice(_FIELDS))
    if rng.random() < 0.4:
        req.headers.insert(rng.randrange(len(req.headers) + 1), pick(_ODD_FIELDS))
    body = bytes(rng.choice(b"abcdefghij\r\n0;") for _ in range(rng.randrange(1, 40)))
    framing = rng.choice(_FRAMINGS)
    n = str(len(body)).encode()
    h = b"%x" % len(body)
    if framing == "cl":
        req.headers.append(b"Content-Length: " + n)
        req.body = body
    elif framing == "cl-odd":
        value, tag = rng.choice(_CL_ODD)
        if tag == "cl-list-different" and n == b"1":
            tag = "cl-list-same"
        if tag:
            tags.append(tag)
        req.headers.append(b"Content-Length: " + value.replace(b"{n}", n))
        req.body = body
    elif framing in ("chunked", "te-odd", "chunk-odd", "cl+te"):
        value = pick(_TE_ODD) if framing == "te-odd" else b"chunked"
        req.headers.append(b"Transfer-Encoding: " + value)
        size = pick(_CHUNK_ODD).replace(b"{h}", h).replace(b"{H}", h.upper()) if framing == "chunk-odd" else h
        req.body = Chunked(chunks=[(size, body, b"\r\n")])
        if req.version == b"HTTP/1.0":
            tags.append("te-on-http10")
        if framing == "cl+te":
            tags.append("cl-and-te")
            req.headers.insert(rng.randrange(len(req.headers) + 1), b"Content-Length: " + n)
    if req.version == b"HTTP/1.0" and b"Connection: keep-alive" in req.headers:
        tags.append("http10-keep-alive")
    if rng.random() < 0.25:
        tags.append("pipelined")
        req.after = NEXT
    if rng.random() < 0.3:
        name = rng.choice(sorted(M))
        seeds, fn = M[name]
        if "get" in seeds and framing == "none" or "post-cl" in seeds and framing == "cl" \
                or "post-chunked" in seeds and framing == "chunked":
            try:
                req = fn(req.copy())
                tags.append(name)
            except (AttributeError, IndexError, TypeError):
                pass
    return Input(tuple(sorted(set(tags))) or ("generated",), req.to_bytes())


def inputs(seed: int, count: int) -> list[Input]:
    """The fixed corpus, then `count` generated inputs from `seed`."""
    rng = random.Random(seed)
    return corpus() + [generate(rng) for _ in range(count)]
