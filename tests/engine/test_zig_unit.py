"""Runs the engine's Zig unit tests (every `test "..."` block, through the one test root
src/zig/unit_tests.zig) with the ziglang wheel, and the connection tests again on io_uring."""

import os
import subprocess
import sys
import sysconfig

import pytest

from tests.support.harness import ROOT, zigcorn_only
from tests.support.tools import require_module

require_module("ziglang", "the ziglang wheel is not installed")

ZIG_DIR = ROOT / "src" / "zig"
TEST_ROOT = ZIG_DIR / "unit_tests.zig"


def run_unit_tests(cache, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ziglang", "test", "-lc", "-I", sysconfig.get_paths()["include"],
         "--cache-dir", str(cache), *extra, str(TEST_ROOT)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=env,
    )


def test_every_file_with_tests_is_under_the_test_root():
    named = TEST_ROOT.read_text()
    with_tests = sorted(p.relative_to(ZIG_DIR).as_posix() for p in ZIG_DIR.rglob("*.zig") if 'test "' in p.read_text())
    missing = [path for path in with_tests if f'@import("{path}")' not in named]
    assert not missing, f"add these to {TEST_ROOT.name}: {missing}"


@zigcorn_only
def test_zig_unit_tests(tmp_path_factory):
    """The engine's Zig unit tests (src/zig/unit_tests.zig).

    Slow: compiling the test binary (the whole engine with its tests, in Debug) is most of
    its 25 s; the 600 tests themselves take a few seconds."""
    result = run_unit_tests(tmp_path_factory.getbasetemp() / "zig-cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All " in result.stderr + result.stdout and " tests passed" in result.stderr + result.stdout


@zigcorn_only
def test_connection_tests_on_io_uring(tmp_path_factory):
    """The connection tests (and their protocol fuzzing) again, on the io_uring backend."""
    from tests.engine.test_io_uring import _io_uring_works

    if not _io_uring_works():
        pytest.skip("this kernel refuses io_uring")
    result = run_unit_tests(tmp_path_factory.getbasetemp() / "zig-cache", "--test-filter", "connection_tests",
                            env={**os.environ, "ZIGCORN_IO_BACKEND": "io_uring"})
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_engine_is_formatted_by_zig_fmt():
    result = subprocess.run([sys.executable, "-m", "ziglang", "fmt", "--check", str(ZIG_DIR)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"run `python -m ziglang fmt src/zig`; these differ:\n{result.stdout}{result.stderr}"
