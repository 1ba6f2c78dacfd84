"""The docs name what the tree holds: every Zig file and Python module in
docs/ARCHITECTURE.md's map, nothing there that does not exist, every README section in
its Contents line, every docs page linked from the README, and the engine's numbers as
the HTTP/3 page states them. Reads files only: no server, no engine (the site's build is
test_docs_site.py).
"""

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ZIG = ROOT / "src" / "zig"
PY = ROOT / "src" / "zigcorn"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# Build and cache folders that are not the source (zig's cache, a local build's output).
SKIPPED_DIRS = {".zig-cache", "zig-cache", "zig-out", "__pycache__"}
# A file named in prose: a path or a bare name ending in one of these.
NAMED_FILE = re.compile(r"(?<![\w./*-])([\w*-][\w./*-]*\.(?:zig|py))(?![\w])")


def source_files(root: Path, suffix: str) -> set[str]:
    """Paths relative to `root` of its files ending in `suffix`, build caches left out."""
    return {
        path.relative_to(root).as_posix()
        for path in root.rglob(f"*{suffix}")
        if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(root).parts)
    }


def tree_block() -> list[str]:
    """The lines of ARCHITECTURE.md's map: the code block that starts with `src/zig/`."""
    lines = ARCHITECTURE.read_text().splitlines()
    start = lines.index("src/zig/")
    assert lines[start - 1] == "```", "the map is a code block whose first line is src/zig/"
    end = lines.index("```", start)
    return lines[start:end]


def mapped_zig_files() -> list[str]:
    """The map's Zig files by their path under src/zig, read as the map is written: a
    folder header (`  os/`, two spaces deeper per level) opens a folder's block, and a
    file belongs to the folder whose header is two spaces less indented than its name;
    a file at the top level (two spaces, before any header) is in src/zig itself. Lines
    indented deeper (a description carried on) are skipped."""
    block = tree_block()
    zigcorn_at = block.index("src/zigcorn/")
    folders: list[str] = []  # the open folder at each depth
    named = []
    for line in block[1:zigcorn_at]:
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if not stripped or indent % 2 or indent == 0:
            continue
        depth = indent // 2 - 1  # 0: a top-level entry
        if depth > len(folders):
            continue  # a description carried on to the next line
        token = stripped.split()[0]
        if token.endswith("/"):
            folders[depth:] = [token.rstrip("/")]
        elif token.endswith(".zig"):
            named.append("/".join([*folders[:depth], token]))
    return named


def mapped_python_modules() -> set[str]:
    """The modules named in the map's src/zigcorn/ block, by their path under src/zigcorn."""
    block = tree_block()
    text = "\n".join(block[block.index("src/zigcorn/") + 1 :])
    return set(re.findall(r"(?<![\w./-])([\w/]+\.py)\b", text))


def test_every_zig_file_is_in_its_folders_block_of_the_map():
    mapped = mapped_zig_files()
    missing = sorted(source_files(ZIG, ".zig") - set(mapped))
    assert missing == [], f"not in docs/ARCHITECTURE.md's map (in their folder's block): {missing}"


def test_every_python_module_is_in_the_map():
    missing = sorted(source_files(PY, ".py") - mapped_python_modules())
    assert missing == [], f"not in docs/ARCHITECTURE.md's src/zigcorn/ block: {missing}"


def test_the_map_names_only_files_that_exist():
    stale = [name for name in mapped_zig_files() if not (ZIG / name).is_file()]
    stale += [name for name in sorted(mapped_python_modules()) if not (PY / name).is_file()]
    assert stale == [], f"docs/ARCHITECTURE.md's map names files that do not exist: {stale}"


# A section that designs what is not built yet names the files to come.
DESIGN_HEADING = "## A third protocol: HTTP/3 over QUIC"


def prose_names() -> set[str]:
    """The file names ARCHITECTURE.md mentions, but in the design of files to come."""
    text = ARCHITECTURE.read_text()
    start = text.find(DESIGN_HEADING)
    if start >= 0:
        end = text.find("\n## ", start + len(DESIGN_HEADING))
        text = text[:start] + (text[end:] if end >= 0 else "")
    return set(NAMED_FILE.findall(text))


def exists(name: str) -> bool:
    """A path names a file under the repository's root, src/zig, src (zigcorn/...) or src/zigcorn
    (protocols/http.py), and may be a glob (tests/interop/test_interop_*.py); a bare name, a
    file anywhere in the source."""
    if "/" in name:
        return any(any(base.glob(name)) for base in (ROOT, ZIG, ROOT / "src", PY))
    return any(any(base.rglob(name)) for base in (ZIG, PY))


def test_the_architecture_page_names_only_files_that_exist():
    stale = sorted(name for name in prose_names() if not exists(name))
    assert stale == [], f"docs/ARCHITECTURE.md names files that do not exist: {stale}"


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower-case, punctuation dropped (letters, digits,
    spaces, '-' and '_' kept), each space a '-'."""
    kept = "".join(
        ch for ch in heading.strip().lower()
        if ch in " -_" or unicodedata.category(ch)[0] in "LN"
    )
    return kept.replace(" ", "-")


def readme_headings() -> list[tuple[int, str]]:
    """(level, text) of the README's headings, outside code blocks (a shell comment is not one)."""
    headings, fenced = [], False
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"(#{1,6}) (.+)", line)):
            headings.append((len(m[1]), m[2]))
    return headings


def contents_links() -> list[str]:
    """The anchors the README's **Contents:** paragraph links to."""
    text = README.read_text()
    start = text.index("**Contents:**")
    paragraph = text[start : text.find("\n\n", start)]
    return re.findall(r"\]\(#([^)]+)\)", paragraph)


def test_github_anchor():
    assert github_anchor("HTTP/2") == "http2"
    assert github_anchor("I/O backend: epoll or io_uring") == "io-backend-epoll-or-io_uring"
    assert github_anchor("Event loop, writer thread and busy poll") == "event-loop-writer-thread-and-busy-poll"


def test_every_readme_section_is_in_the_contents_line():
    links = contents_links()
    missing = [text for level, text in readme_headings() if level == 2 and github_anchor(text) not in links]
    assert missing == [], f"README sections missing from its **Contents:** line: {missing}"


def test_the_contents_line_links_only_to_headings():
    anchors = {github_anchor(text) for _, text in readme_headings()}
    broken = [link for link in contents_links() if link not in anchors]
    assert broken == [], f"README **Contents:** links to no heading: {broken}"


def _zig_number(path: str, pattern: str) -> int:
    """The integer a Zig declaration in src/zig/`path` gives (`pattern`'s one group: digits,
    underscores, and `a * b` products)."""
    match = re.search(pattern, (ZIG / path).read_text())
    assert match, f"{path}: no {pattern!r}"
    value = 1
    for factor in match.group(1).split("*"):
        value *= int(factor.strip().replace("_", ""))
    return value


def _page_text(name: str) -> str:
    """A docs page's text, whitespace folded to single spaces so a number and its words
    may wrap."""
    return " ".join((DOCS / name).read_text().split())


def test_the_http3_sections_numbers_are_the_engines():
    """Each number the HTTP/3 page (docs/http3.md) states is read from the engine's own
    declaration or the settings table's default, so a changed limit fails here until the
    text says it too."""
    section = _page_text("http3.md")
    from zigcorn.settings import DEFAULTS

    stated = {
        "connections": (DEFAULTS["http3_max_connections"], "{:,} QUIC connections at once"),
        "retry from": (DEFAULTS["http3_handshakes_before_retry"],
                       "from {} still handshaking, with `--http3-retry auto`"),
        "dropped past": (DEFAULTS["http3_max_handshakes"],
                         "past {} still handshaking a new client's Initial is dropped"),
        "handshake timeout": (int(DEFAULTS["http3_handshake_timeout"]),
                              "a handshake not complete {} s after the client's first Initial ends silently"),
        "streams": (DEFAULTS["http3_max_streams"], "{} request streams open at once"),
        "body": (_zig_number("http3/server_stream.zig", r"const body_buffer_max = ([\d_ *]+);") // 1024,
                 "up to {} KiB per stream"),
        "idle": (int(DEFAULTS["http3_idle_timeout"]), "an idle connection is closed after {} s"),
        "reset rate": (_zig_number("quic/endpoint.zig", r"resets_per_interval_max: u32 = ([\d_]+),"),
                       "stateless resets' rate bound, {} per"),
        "reset interval": (_zig_number("quic/endpoint.zig", r"reset_interval_us: u64 = ([\d_]+) \* std.time.us_per_ms"),
                           "per {} ms"),
    }
    wrong = {name: phrase.format(value) for name, (value, phrase) in stated.items() if phrase.format(value) not in section}
    assert not wrong, f"docs/http3.md should say: {wrong}"
    # Packet protection is the engine's (std.crypto); OpenSSL runs the TLS handshake only.
    assert "`std.crypto`" in section and "libcrypto's primitives" not in section


def readme_links_into_docs() -> set[str]:
    """The docs pages the README links to (`docs/NAME.md`, an anchor left off)."""
    return set(re.findall(r"\]\(docs/([\w.-]+\.md)(?:#[^)]*)?\)", README.read_text()))


def test_the_readme_links_to_every_docs_page_and_only_to_pages_that_exist():
    """The README is the front door: each page of the site is one link away from it."""
    pages = {path.name for path in DOCS.glob("*.md")}
    linked = readme_links_into_docs()
    assert sorted(linked - pages) == [], "the README links to docs pages that do not exist"
    assert sorted(pages - linked) == [], "docs pages the README does not link to"
