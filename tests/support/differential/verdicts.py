"""The written-down reason for each disagreement class, keyed by input tag and verdict.

A class whose verdict is looser or reads-differently and that has no reason here is a
finding: the CI test fails on it until the engine is fixed or a reason is written.
"""

from __future__ import annotations

# tag -> {verdict kind (before any ":part") -> reason}
REASONS: dict[str, dict[str, str]] = {}


def reason_for(tags: tuple, kind: str) -> tuple[str, str] | None:
    """(the tag whose reason applies, the reason), or None."""
    base = kind.split(":")[0].replace("split", "").strip(":") or kind
    for tag in tags:
        table = REASONS.get(tag, {})
        for key in (kind, kind.split(":", 1)[-1], base, "*"):
            if key in table:
                return tag, table[key]
    return None
