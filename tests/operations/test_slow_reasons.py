"""The slow-test rule of tests/conftest.py reads a test's reason by a pattern: every
"Slow" sentence the tests write must be one the pattern finds, or the reason is not seen
(CI once failed a test whose docstring said "Slow (the first case): ...")."""

import ast
from pathlib import Path

from tests.conftest import SLOW_REASON

TESTS = Path(__file__).resolve().parents[1]


def test_every_slow_sentence_in_a_docstring_is_one_the_rule_reads():
    unread = []
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node) or ""
                if "Slow" in doc.replace("Slowloris", "") and not SLOW_REASON.search(doc):
                    unread.append(f"{path.relative_to(TESTS)}::{node.name}")
    assert not unread, f"docstrings whose 'Slow' sentence tests/conftest.py does not read: {unread}"


def test_the_pattern_reads_both_forms():
    assert SLOW_REASON.search("Slow: it waits for the 30 s timeout.")
    assert SLOW_REASON.search("Slow (its first case): the module's fixture builds the library.")
    assert not SLOW_REASON.search("Slowloris heads")
    assert not SLOW_REASON.search("slow to start")
