"""Tables (plain text and Markdown) from a results document, with ratios against zigcorn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

BASELINE = "zigcorn"
Getter = Callable[[dict], float | None]


@dataclass(frozen=True)
class Column:
    title: str
    get: Getter
    fmt: Callable[[float], str]
    ratio: bool = True  # append "(0.72x)": this server's value over zigcorn's


def _dig(result: dict, *keys: str) -> float | None:
    value: object = result
    for key in keys:
        if not isinstance(value, dict) or value.get(key) is None:
            return None
        value = value[key]
    return value  # type: ignore[return-value]


def _mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


def _bytes(n: float) -> str:
    return f"{n / 1024:.1f} KiB" if abs(n) >= 1024 else f"{n:.0f} B"


def _errors(result: dict) -> float | None:
    points = result.get("load") or {}
    if not points:
        return None
    return sum(p["non_2xx_3xx"] + p["socket_errors_total"] for p in points.values())


def columns(connections: list[int]) -> list[Column]:
    cols: list[Column] = []
    for c in connections:
        key = str(c)
        cols += [
            Column(f"req/s c{c}", lambda r, k=key: _dig(r, "load", k, "rps"), lambda v: f"{v:,.0f}"),
            Column(f"p50 c{c}", lambda r, k=key: _dig(r, "load", k, "p50_ms"), lambda v: f"{v:.2f} ms", False),
            Column(f"p99 c{c}", lambda r, k=key: _dig(r, "load", k, "p99_ms"), lambda v: f"{v:.2f} ms", False),
        ]
    return cols + [
        Column("errors", _errors, lambda v: f"{v:.0f}", False),
        Column("idle RSS", lambda r: _dig(r, "idle", "rss_kib"), _mib),
        Column("idle PSS", lambda r: _dig(r, "idle", "pss_kib"), _mib),
        Column("peak RSS", lambda r: _dig(r, "peak_rss_kib"), _mib),
        Column("per idle conn", lambda r: _dig(r, "idle_connections", "bytes_per_connection"), _bytes),
        Column("PSS 4 workers", lambda r: _dig(r, "workers", "pss_kib"), _mib),
        Column("RSS growth, soak", lambda r: _dig(r, "soak", "growth_kib"), lambda v: f"{v:+,.0f} KiB", False),
    ]


def _cell(col: Column, result: dict, base: dict | None, is_base: bool) -> str:
    if result.get("error"):
        return "error"
    value = col.get(result)
    if value is None:
        return "n/a"
    text = col.fmt(value)
    base_value = col.get(base) if base and not base.get("error") else None
    if col.ratio and not is_base and base_value:
        text += f" ({value / base_value:.2f}x)"
    return text


def rows(app_results: dict[str, dict], connections: list[int]) -> tuple[list[str], list[list[str]]]:
    cols = columns(connections)
    base = app_results.get(BASELINE)
    header = ["server", *(c.title for c in cols)]
    body = []
    for name, result in app_results.items():
        body.append([label(name, result), *(_cell(c, result, base, name == BASELINE) for c in cols)])
    return header, body


def label(name: str, result: dict) -> str:
    """A row's name: the server, its version and the configuration it ran, in its own flags
    (``granian-rust 2.8.7 (--loop uvloop --task-impl rust)``), so that no figure stands
    for a server without saying how it was started."""
    text = f"{name} {result.get('version', '')}".strip()
    config = result.get("configuration")
    return f"{text} ({config})" if config else text


def text_table(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(out)


def _title(app: str, doc: dict) -> str:
    cfg = doc["config"]
    return (f"{app} app: wrk -t1, {cfg['duration_s']} s per point after a {cfg['warmup_s']} s warm-up, "
            f"{cfg['idle_connections']} idle keep-alive connections, ratios against {BASELINE}")


# -- HTTP/2 (h2.py) ----------------------------------------------------------------------------

H2_MODES = {"h2c": "h2c", "tls": "h2/TLS", "idle": "idle h2c"}


def h2_columns() -> list[tuple[str, Column]]:
    """(mode, column): the mode's own error shows as "error" in its cells."""
    cols: list[tuple[str, Column]] = []
    for mode, label in (("h2c", "h2c"), ("tls", "h2/TLS")):
        cols += [
            (mode, Column(f"{label} req/s", lambda r, m=mode: _dig(r, m, "rps"), lambda v: f"{v:,.0f}")),
            (mode, Column(f"{label} p50", lambda r, m=mode: _dig(r, m, "p50_ms"), lambda v: f"{v:.2f} ms", False)),
            (mode, Column(f"{label} p99", lambda r, m=mode: _dig(r, m, "p99_ms"), lambda v: f"{v:.2f} ms", False)),
        ]
    return cols + [
        ("", Column("errors", _h2_errors, lambda v: f"{v:.0f}", False)),
        ("h2c", Column("peak RSS h2c", lambda r: _dig(r, "h2c", "peak_rss_kib"), _mib)),
        ("idle", Column("per idle h2 conn", lambda r: _dig(r, "idle", "bytes_per_connection"), _bytes)),
        ("idle", Column("idle h2, with one-time", lambda r: _dig(r, "idle", "total_bytes_per_connection"), _bytes)),
    ]


def _h2_errors(result: dict) -> float | None:
    points = [result[m] for m in ("h2c", "tls") if isinstance(result.get(m), dict) and "rps" in result[m]]
    return sum(p["errors"] for p in points) if points else None


def _h2_cell(mode: str, col: Column, result: dict, base: dict | None, is_base: bool) -> str:
    if mode and isinstance(result.get(mode), dict) and result[mode].get("error"):
        return "error"
    return _cell(col, result, base, is_base)


def h2_rows(app_results: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    cols = h2_columns()
    base = app_results.get(BASELINE)
    header = ["server", *(c.title for _, c in cols)]
    body = []
    for name, result in app_results.items():
        if all("skipped" in (result.get(m) or {}) for m in H2_MODES):
            continue  # listed under the table instead
        body.append([label(name, result), *(_h2_cell(m, c, result, base, name == BASELINE) for m, c in cols)])
    return header, body


def h2_notes(app_results: dict[str, dict]) -> list[str]:
    """What did not run (and why) and what failed, one line per server."""
    notes = []
    for name, result in app_results.items():
        if result.get("error"):
            notes.append(f"{name}: error: {result['error'].splitlines()[0][:200]}")
            continue
        skipped = {result[m]["skipped"]: [] for m in H2_MODES if "skipped" in (result.get(m) or {})}
        for m, label in H2_MODES.items():
            if "skipped" in (result.get(m) or {}):
                skipped[result[m]["skipped"]].append(label)
        for why, labels in skipped.items():
            notes.append(f"{name}: {', '.join(labels)} not run: {why}")
        for m, label in H2_MODES.items():
            if (result.get(m) or {}).get("error"):
                notes.append(f"{name}: {label} error: {result[m]['error'].splitlines()[0][:200]}")
    return notes


def http2_failed(doc: dict) -> bool:
    """A server, or one of its HTTP/2 modes, ended in an error (skipped modes are not failures)."""
    for app_results in (doc.get("http2") or {}).get("apps", {}).values():
        for result in app_results.values():
            if result.get("error") or any((result.get(m) or {}).get("error") for m in H2_MODES):
                return True
    return False


def _h2_title(app: str, section: dict) -> str:
    cfg = section["config"]
    return (f"{app} app, HTTP/2: h2load -t1 -c{cfg['clients']} -m{cfg['streams']}, {cfg['duration_s']} s per point "
            f"after a {cfg['warmup_s']} s warm-up, p50/p99 from h2load's per-request log; "
            f"{cfg['idle_connections']} idle h2c connections; ratios against {BASELINE}")


def render_http2(section: dict, markdown: bool) -> list[str]:
    parts = []
    for app, app_results in section["apps"].items():
        header, body = h2_rows(app_results)
        notes = h2_notes(app_results)
        title = _h2_title(app, section)
        table = markdown_table(header, body) if markdown else text_table(header, body)
        part = f"**{title}**\n\n{table}" if markdown else f"{title}\n{table}"
        if notes:
            part += "\n\n" + "\n".join(f"- {n}" if markdown else f"  {n}" for n in notes)
        parts.append(part)
    return parts


def render(doc: dict, markdown: bool = False) -> str:
    connections = doc["config"]["connections"]
    parts = []
    for app, app_results in doc["apps"].items():
        header, body = rows(app_results, connections)
        if markdown:
            parts.append(f"**{_title(app, doc)}**\n\n{markdown_table(header, body)}")
        else:
            parts.append(f"{_title(app, doc)}\n{text_table(header, body)}")
    if doc.get("http2"):
        parts += render_http2(doc["http2"], markdown)
    if markdown:
        m = doc["machine"]
        parts.append(f"_{m['cpu_model']}, {m['nproc']} CPUs, Linux {m['kernel']}, Python {m['python']}, "
                     f"{doc['date'][:10]}; zigcorn {doc.get('zigcorn_commit') or '?'}{' + local changes' if doc.get('zigcorn_dirty') else ''}; "
                     f"loopback, one worker each"
                     f"{', PSS 4 workers summed over the process tree' if doc['apps'] else ''}"
                     f"{', h2load ' + doc['http2'].get('h2load', '?') if doc.get('http2') else ''}._")
    return "\n\n".join(parts) + "\n"
