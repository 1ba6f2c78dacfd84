"""Outcomes normalised, zigcorn's compared with each reference's, a verdict per input."""

from __future__ import annotations

from collections import Counter
from itertools import zip_longest

from .client import Outcome
from .echo import HOP_PREFIX

#: framing and connection fields: their effect is compared (the body, the connection's
#: end), not their text, which a proxying front end rewrites
IGNORED_FIELDS = {"content-length", "transfer-encoding", "connection", "keep-alive"}


def normal_reading(reading: dict) -> tuple:
    """Field names lower-cased (zigcorn and the ASGI servers lower-case them too) with '_' as '-' (a WSGI environ cannot tell them apart),
    repeated fields joined with ',' as a WSGI environ does, sorted by name."""
    fields: dict[str, list[str]] = {}
    for name, value in reading["headers"]:
        name = name.lower().replace("_", "-")
        if name in IGNORED_FIELDS or name.startswith(HOP_PREFIX) or (name == "host" and value == ""):
            continue  # granian makes up an empty Host for HTTP/1.0 requests without one
        fields.setdefault(name, []).append(value)
    version = "1.0" if reading["version"] == "1" else reading["version"]  # granian says "1" for HTTP/1.0
    return (reading["method"], reading["target"], version,
            tuple(sorted((name, ",".join(values)) for name, values in fields.items())), reading["body"])


READING_PARTS = ("method", "target", "version", "fields", "body")


def normal_items(outcome: Outcome) -> list:
    return [("ok", normal_reading(item["reading"])) if "reading" in item else ("refused", item["status"])
            for item in outcome.items]


def _accepted(item) -> bool:
    return item is not None and item[0] == "ok"


def relation(zig: Outcome, ref: Outcome, ref_keeps_alive: bool = True) -> str:
    """How zigcorn's outcome relates to a reference's: "same", "stricter" (zigcorn refused
    what it accepted), "looser" (the reverse), "reads-differently:<part>" (both accepted,
    they read <part> differently), "closes" / "keeps-open" (same readings, but zigcorn
    closed a connection the reference kept, or the reverse)."""
    zi, ri = normal_items(zig), normal_items(ref)
    if not ref_keeps_alive:  # one request per connection: only the first is comparable
        zi, ri = zi[:1], ri[:1]
    for a, b in zip_longest(zi, ri):
        if a == b:
            continue
        if _accepted(a) and _accepted(b):
            part = next(p for p, x, y in zip(READING_PARTS, a[1], b[1]) if x != y)
            return f"reads-differently:{part}"
        if _accepted(a):
            return "looser"
        if _accepted(b):
            return "stricter"
        # Both refused (or one said nothing): the same for this purpose; refusals end the
        # connection's useful life, so nothing after them is compared.
        return "same"
    if ref_keeps_alive and zi and _accepted(zi[-1]) and zig.end != ref.end:
        return "closes" if zig.end == "closed" else "keeps-open"
    return "same"


def verdict(relations: dict[str, str]) -> str:
    """The input's class: "agree" when at least half the references relate to zigcorn as "same", else
    the most common other relation (ties broken toward the graver one)."""
    counts = Counter(relations.values())
    if counts["same"] * 2 >= len(relations):  # a tie: zigcorn sides with half the references
        return "agree"
    others = [(n, _GRAVITY.get(kind.split(":")[0], 0), kind) for kind, n in counts.items() if kind != "same"]
    if not others:
        return "agree"
    n, _, kind = max(others)
    return kind if n * 2 >= len(relations) - counts["same"] else "split:" + kind


_GRAVITY = {"looser": 3, "reads-differently": 2, "keeps-open": 1, "stricter": 0, "closes": 0}
