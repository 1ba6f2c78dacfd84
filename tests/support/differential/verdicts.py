"""The written-down reason for each disagreement class, keyed by input tag and verdict.

A class whose verdict is looser or reads-differently and that has no reason here is a
finding: the CI test fails on it until the engine is fixed or a reason is written. A
stricter class is fine when the RFCs allow the refusal; its reason says where.
"""

from __future__ import annotations

# tag -> {verdict kind (or "kind:part", or "*" for any) -> reason}
REASONS: dict[str, dict[str, str]] = {}


def _add(tags: str, kind: str, reason: str) -> None:
    for tag in tags.split():
        REASONS.setdefault(tag, {})[kind] = reason


# ---- zigcorn accepts what most references refuse
_add("lower-case-method mixed-case-method", "looser",
     "RFC 9110 9.1: methods are case-sensitive tokens; `get` is a valid token naming another method and reaches "
     "the app as sent (h11, hypercorn, granian agree); llhttp, gunicorn and nginx refuse methods they do not know")
_add("chunk-ext-bws", "looser",
     "RFC 9112 7.1.1: chunk-ext = *( BWS \";\" BWS name [ BWS \"=\" BWS value ] ): the whitespace is in the grammar")
_add("http10-pipelined http10-keep-alive-pipelined http10 connection-close", "split",
     "the references split on pipelined bytes after an HTTP/1.0 request (hypercorn answers 400); zigcorn answers "
     "the first request and closes (no keep-alive asked) as RFC 9112 9.3 says")
# ---- both accept, the reading differs
for _tag in ("absolute-form absolute-form-https absolute-form-no-path absolute-form-upper-scheme "
             "absolute-form-host-mismatch").split():
    _add(_tag, "reads-differently:target",
         "RFC 9112 3.2.2: an absolute-form target's path is the request's path; ASGI's raw_path is that path "
         "(llhttp via uvicorn, granian and nginx agree); h11, hypercorn and gunicorn give the app the whole URI")
    _add(_tag, "split", "the references split between the whole URI and its path (RFC 9112 3.2.2); zigcorn gives the path")
_add("target-fragment", "reads-differently:target",
     "a '#' is not allowed in a request-target (RFC 9112 3.2); h11, hypercorn, gunicorn and nginx pass it through "
     "like zigcorn, llhttp and granian cut it off")
# ---- same reading, the connection's end differs
_add("http10-keep-alive http10", "keeps-open",
     "RFC 9112 9.3: an HTTP/1.0 request with Connection: keep-alive may persist; zigcorn answers with "
     "Connection: keep-alive and a Content-Length, the references close")
_add("http10-keep-alive-pipelined http10-keep-alive", "looser",
     "RFC 9112 9.3: zigcorn keeps an HTTP/1.0 connection that asked for keep-alive, so it reads the request "
     "pipelined after it (nginx and granian too); the references that close never read it")
# ---- zigcorn refuses what most references accept
_S = {
    "bare-lf-everywhere bare-lf-field-lines bare-lf-head-end bare-lf-request-line leading-bare-lf chunk-end-bare-lf "
    "chunk-trailer-bare-lf chunk-size-bare-lf chunk-data-bare-lf":
        "RFC 9112 2.2: a recipient MAY accept a bare LF; zigcorn does not (a smuggling lever, docs/security.md, Parsing policy)",
    "obs-fold obs-fold-tab chunk-trailer-obs-fold te-obs-fold":
        "RFC 9112 5.2: a server MUST either reject obs-fold with 400 or replace it; zigcorn rejects",
    "ctl-in-value del-in-value vtab-in-value formfeed-in-value nul-in-value chunk-ext-ctl pipelined-after-bad":
        "RFC 9110 5.5: field values (and chunk extensions, RFC 9112 7.1.1) exclude CTL and DEL; a recipient MAY reject them",
    "chunk-size-trailing-space chunk-size-trailing-tab":
        "RFC 9112 7.1: whitespace after a chunk size is only allowed before ';' (BWS of chunk-ext)",
    "chunk-size-17-digits":
        "RFC 9112 7.1: recipients must guard against overflow; zigcorn bounds a size at 16 hex digits, leading zeros included",
    "cl-list-same cl-two-lines-same":
        "RFC 9110 8.6: a recipient MAY refuse a list or repeat of identical Content-Length values; zigcorn refuses "
        "more than one on every protocol, as llhttp, gunicorn and nginx do (h11 and hypercorn fold identical bytes)",
    "cl-and-te cl-and-te-smuggle te-and-cl":
        "RFC 9112 6.3 (3): Content-Length with Transfer-Encoding MAY be refused as a smuggling attempt; zigcorn refuses",
    "te-on-http10":
        "RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 message MUST be treated as faulty framing",
    "te-gzip-chunked te-identity-chunked te-chunked-identity te-chunked-gzip":
        "RFC 9112 6.1: a transfer coding the server does not implement SHOULD get 501 (chunked must be the only one here)",
    "te-leading-space te-xchunked":
        "the same Transfer-Encoding rules as above: anything but a sole chunked is 501 (or 400 on HTTP/1.0)",
    "missing-host":
        "RFC 9112 3.2: a request without Host MUST get 400",
    "host-with-path host-with-space host-with-userinfo host-bad-port":
        "RFC 9110 7.2 / 4.2.4: Host is uri-host [ \":\" port ], without userinfo; anything else is refused",
    "absolute-form-userinfo":
        "RFC 9110 4.2.4: a recipient SHOULD treat userinfo in an http(s) URI as an error",
    "absolute-form-other-scheme":
        "RFC 9112 3.2.2: zigcorn serves http and https only; another scheme in absolute-form is refused",
    "asterisk-form-get":
        "RFC 9112 3.2.4: asterisk-form is only for OPTIONS",
    "authority-form-get":
        "RFC 9112 3.2.3: authority-form is only for CONNECT",
    "leading-empty-lines-8":
        "RFC 9112 2.2: a server SHOULD ignore at least one empty line; zigcorn ignores up to four",
    "long-method":
        "no RFC length; zigcorn caps methods at 32 bytes (longer than any registered method)",
    "long-target-20k long-value-70k many-fields-120 many-fields-300":
        "RFC 9110 15.5.15 / RFC 6585 5: the server's limits (414, 431), configurable (docs/http1.md, Limits and timeouts)",
    "version-1.2 version-2.0 version-0.9 version-9.9":
        "RFC 9110 6.2: 505 for a version the server does not serve; zigcorn serves exactly HTTP/1.0 and 1.1 "
        "(RFC 9110 2.5 would have it read 1.2 as 1.1: a deliberate choice, docs/security.md, Parsing policy)",
    "upgrade-websocket-incomplete":
        "RFC 6455 4.2.1: a WebSocket upgrade without Sec-WebSocket-Key/Version is refused with 400",
    "underscore-in-name":
        "gunicorn and nginx drop fields with '_' (a WSGI environ cannot tell them from '-'); zigcorn passes them",
}
for _tags, _reason in _S.items():
    _add(_tags, "stricter", _reason)
    _add(_tags, "split", _reason)
_add("underscore-in-name", "reads-differently:fields", _S["underscore-in-name"])


def reason_for(tags: tuple, kind: str) -> tuple[str, str] | None:
    """(the tag whose reason applies, the reason), or None."""
    base = kind.split(":")[0]
    rest = kind.split(":", 1)[1] if ":" in kind else ""
    for key in (kind, rest, base, "*"):
        if not key:
            continue
        for tag in tags:
            table = REASONS.get(tag, {})
            if key in table:
                return tag, table[key]
    return None
