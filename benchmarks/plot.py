"""A chart of a run's ratios against zigcorn, as an SVG with no plotting library:

    python benchmarks/plot.py benchmarks/results/latest.json benchmarks/ratios.svg
    python benchmarks/run.py --plot benchmarks/ratios.svg        # at the end of a run

One group of bars per figure (requests/s at the largest connection count for each app,
HTTP/2 requests/s where measured, idle RSS, memory per idle connection), one bar per
server, each the server's value over zigcorn's (zigcorn is 1.00). For throughput higher
is better, for memory lower is: the chart says which under each group.
"""

from __future__ import annotations

import json
import sys
from html import escape
from pathlib import Path

COLORS = {"zigcorn": "#d9480f", "uvicorn": "#1c7ed6", "granian": "#2b8a3e", "saltare": "#7048e8",
          "hypercorn": "#868e96", "zigcorn-asyncio": "#f08c00", "nginx": "#495057"}


def figures(doc: dict) -> list[tuple[str, str, dict[str, float]]]:
    """(title, 'higher'/'lower' is better, server -> value) for each figure in the run."""
    out = []
    connections = max((doc.get("config") or {}).get("connections") or [64])
    for app, results in (doc.get("apps") or {}).items():
        rps = {s: r["load"][str(connections)]["rps"] for s, r in results.items()
               if not r.get("error") and (r.get("load") or {}).get(str(connections))}
        if rps:
            out.append((f"{app}: req/s c{connections}", "higher", rps))
    for app, section in ((doc.get("http2") or {}).get("apps") or {}).items():
        h2 = {s: r["h2c"]["rps"] for s, r in section.items() if isinstance(r, dict) and (r.get("h2c") or {}).get("rps")}
        if h2:
            out.append((f"{app}: HTTP/2 req/s (h2c)", "higher", h2))
    first = next(iter((doc.get("apps") or {}).values()), {})
    idle = {s: r["idle"]["rss_kib"] for s, r in first.items() if (r.get("idle") or {}).get("rss_kib")}
    if idle:
        out.append(("idle RSS", "lower", idle))
    per_conn = {s: r["idle_connections"]["bytes_per_connection"] for s, r in first.items()
                if (r.get("idle_connections") or {}).get("bytes_per_connection")}
    if per_conn:
        out.append(("memory per idle connection", "lower", per_conn))
    return out


def svg(doc: dict) -> str:
    groups = [(t, better, {s: v / vals["zigcorn"] for s, v in vals.items()})
              for t, better, vals in figures(doc) if vals.get("zigcorn")]
    servers = [s for s in COLORS if any(s in g[2] for g in groups)]
    bar, gap, group_gap, height, top, left = 20, 3, 60, 240, 50, 50
    width_group = len(servers) * (bar + gap)
    width = left + len(groups) * (width_group + group_gap) + 20
    # Bars stop at 4x (their labels say the whole value): a 250x memory ratio would
    # otherwise flatten every other bar.
    cap = 4.0
    peak = max([1.0] + [min(v, cap) for g in groups for v in g[2].values()])
    scale = height / peak
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 110}" '
             f'font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="20" font-size="14" font-weight="bold">Each server over zigcorn '
             f'(zigcorn = 1.00), {escape(doc.get("date", "")[:10])}, one run; bars stop at {cap:.0f}x</text>']
    base_y = top + height
    one = base_y - scale
    parts.append(f'<line x1="{left - 5}" y1="{one:.1f}" x2="{width - 10}" y2="{one:.1f}" stroke="#000" '
                 'stroke-dasharray="4 3"/>')
    parts.append(f'<text x="5" y="{one + 4:.1f}">1.00</text>')
    for i, (title, better, ratios) in enumerate(groups):
        x0 = left + i * (width_group + group_gap)
        for j, server in enumerate(servers):
            if server not in ratios:
                continue
            value = ratios[server]
            h = min(value, peak) * scale
            x = x0 + j * (bar + gap)
            parts.append(f'<rect x="{x}" y="{base_y - h:.1f}" width="{bar}" height="{h:.1f}" '
                         f'fill="{COLORS[server]}"><title>{escape(title)}, {escape(server)}: {value:.2f}x</title></rect>')
            label = f"{value:.0f}" if value >= 10 else f"{value:.1f}"
            parts.append(f'<text x="{x + bar / 2}" y="{base_y - h - 3:.1f}" text-anchor="middle" '
                         f'font-size="9">{label}</text>')
        first, _, second = title.partition(": ")
        parts.append(f'<text x="{x0}" y="{base_y + 15}" font-weight="bold">{escape(first)}</text>')
        if second:
            parts.append(f'<text x="{x0}" y="{base_y + 28}" font-weight="bold">{escape(second)}</text>')
        parts.append(f'<text x="{x0}" y="{base_y + 42}" fill="#555">{better} is better</text>')
    for j, server in enumerate(servers):
        x = left + j * 120
        parts.append(f'<rect x="{x}" y="{base_y + 60}" width="12" height="12" fill="{COLORS[server]}"/>')
        parts.append(f'<text x="{x + 16}" y="{base_y + 70}">{escape(server)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write(doc: dict, path: str | Path) -> None:
    Path(path).write_text(svg(doc))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    write(json.loads(Path(sys.argv[1]).read_text()), sys.argv[2])
