"""Runs the Zig unit tests (`test "..."` blocks in src/zig/*.zig) with the ziglang wheel."""

import os
import subprocess
import sys
import sysconfig

import pytest

from tests.harness import ROOT, zigcorn_only

pytest.importorskip("ziglang", reason="the ziglang wheel is not installed")

ZIG_FILES = sorted(p for p in (ROOT / "src" / "zig").glob("*.zig") if 'test "' in p.read_text())


@zigcorn_only
@pytest.mark.parametrize("path", ZIG_FILES, ids=lambda p: p.name)
def test_zig_unit_tests(path, tmp_path_factory):
    cache = tmp_path_factory.getbasetemp() / "zig-cache"
    result = subprocess.run(
        [sys.executable, "-m", "ziglang", "test", "-lc", "-I", sysconfig.get_paths()["include"],
         "--cache-dir", str(cache), str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@zigcorn_only
def test_connection_tests_on_io_uring(tmp_path_factory):
    """conn_test.zig's connections (and its protocol fuzzing) again, on the io_uring backend."""
    from tests.test_io_uring import _io_uring_works

    if not _io_uring_works():
        pytest.skip("this kernel refuses io_uring")
    cache = tmp_path_factory.getbasetemp() / "zig-cache"
    result = subprocess.run(
        [sys.executable, "-m", "ziglang", "test", "-lc", "-I", sysconfig.get_paths()["include"],
         "--cache-dir", str(cache), str(ROOT / "src" / "zig" / "conn_test.zig")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "ZIGCORN_IO_BACKEND": "io_uring"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
