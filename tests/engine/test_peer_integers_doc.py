"""docs/PEER_INTEGERS.md names, for every integer a peer controls, the Zig unit tests that take
it to its bound: each name it cites must be a `test "..."` block in src/zig, so the table
cannot drift from the tests (a renamed or deleted test fails here)."""

import re

from tests.support.harness import ROOT

DOC = ROOT / "docs" / "PEER_INTEGERS.md"
ZIG_DIR = ROOT / "src" / "zig"


def _table_rows() -> list[list[str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        if not line.startswith("|") or set(line) <= {"|", "-", " "}:
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if cells and cells[0] != "Field":
            rows.append(cells)
    return rows


def _cited_tests() -> set[str]:
    return {name for row in _table_rows() for name in re.findall(r"`([^`]+)`", row[-1])}


def _zig_test_names() -> set[str]:
    names = set()
    for path in ZIG_DIR.rglob("*.zig"):
        names.update(re.findall(r'^\s*test "((?:[^"\\]|\\.)*)"', path.read_text(), re.MULTILINE))
    return names


def test_every_row_has_five_cells_and_a_test():
    rows = _table_rows()
    assert len(rows) > 50
    for row in rows:
        assert len(row) == 5, row
        assert re.search(r"`[^`]+`", row[-1]), f"no test cited for {row[0]}"


def test_every_cited_test_exists_in_src_zig():
    cited = _cited_tests()
    missing = sorted(cited - _zig_test_names())
    assert not missing, f"docs/PEER_INTEGERS.md cites tests that src/zig does not have: {missing}"


def test_every_peer_integers_test_is_cited():
    new = {name for name in _zig_test_names() if name.startswith("peer integers: ")}
    uncited = sorted(new - _cited_tests())
    assert not uncited, f"add these tests to docs/PEER_INTEGERS.md: {uncited}"
