"""What a test needs from the machine: a program on PATH, a Python package, a toolchain.

Locally a missing one skips the test, saying what to install. On CI (``CI=true``, which
the CI runner and .ci/run set) the tools are installed by .ci/run and the packages by
``pip install -e '.[test]'``, so a missing one is a broken setup: the test FAILS instead
of skipping, and a green run cannot hide a whole group of tests that never ran. At module
level (``require_module`` before the imports that need it), the failure is a collection
error, which fails the run too.

One exception on CI: scripts/sid_chroot.sh installs the [test] extra into the chroot's
venvs (CPython 3.14, 3.15) one package at a time and records the ones with no wheel or
build for that interpreter yet in ``<venv>/zigcorn-uninstallable.txt``; their tests skip
there, naming the file.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ON_CI = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
UNINSTALLABLE = Path(sys.prefix) / "zigcorn-uninstallable.txt"

#: import name -> distribution name, where they differ (the [test] extra's names)
DISTRIBUTIONS = {"grpc": "grpcio", "yaml": "pyyaml", "dotenv": "python-dotenv"}


def skip_or_fail(reason: str) -> None:
    """Skips with `reason` locally; fails with it on CI, where the thing is installed."""
    __tracebackhide__ = True  # reports name the test's line, not this one
    if ON_CI:
        pytest.fail(f"{reason} [CI=true: .ci/run installs this, so its absence is a failure, not a skip]",
                    pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_tool(*names: str, reason: str) -> str | tuple[str, ...]:
    """The path of each program in `names` (one path, or a tuple for several) from PATH;
    if one is missing, ``skip_or_fail(reason)``."""
    __tracebackhide__ = True
    found = tuple(shutil.which(name) for name in names)
    missing = [name for name, path in zip(names, found) if path is None]
    if missing:
        skip_or_fail(f"{reason} (not on PATH: {', '.join(missing)})")
    return found[0] if len(found) == 1 else found


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def uninstallable() -> set[str]:
    """The [test] packages scripts/sid_chroot.sh could not install into this venv."""
    try:
        return {_normalize(line) for line in UNINSTALLABLE.read_text().split() if line}
    except OSError:
        return set()


def require_module(name: str, reason: str | None = None) -> ModuleType:
    """``pytest.importorskip(name)``, but a failure on CI unless the package is one the
    chroot's venv recorded as having no wheel or build for this interpreter."""
    __tracebackhide__ = True
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        dist = DISTRIBUTIONS.get(name.split(".")[0], name.split(".")[0])
        why = f"{reason or f'needs {dist}'}: could not import {name} ({exc})"
        if _normalize(dist) in uninstallable():
            pytest.skip(f"{why}; {dist} does not install on Python {sys.version_info.major}."
                        f"{sys.version_info.minor} (listed in {UNINSTALLABLE})", allow_module_level=True)
        skip_or_fail(why)
        raise  # unreachable: skip_or_fail raised


ENGINE_MODULE = Path(__file__).resolve().parents[2] / "src" / "zig" / "engine.zig"


def zig_root_with_engine(root: Path, *module_flags: str) -> list[str]:
    """The zig arguments that build `root` (a fuzzer in src/zig/fuzz/ or a test library in
    src/zig/testlib/) with the engine as the named module `engine` (src/zig/engine.zig):
    Zig 0.15 lets a root import only files below its own folder. Per-module flags (-O,
    -ffuzz, -fPIC, -fno-stack-check) reset after each -M, so both modules get them."""
    return [*module_flags, "--dep", "engine", f"-Mroot={root}",
            *module_flags, f"-Mengine={ENGINE_MODULE}"]
