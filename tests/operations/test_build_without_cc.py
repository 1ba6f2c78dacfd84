"""`pip install .` with a Debian-packaged CPython and no C compiler anywhere: the README
(and docs/getting-started.md) says a Python and libc are all the build needs.

Debian's and Ubuntu's pyconfig.h is a wrapper that includes
``<x86_64-linux-gnu/python3.X/pyconfig.h>``, a folder next to the include folder. Zig
compiles against its own bundled libc headers unless a system C compiler tells it where
the system's are: std/zig/LibCInstallation.zig runs ``cc -E -Wp,-v -xc /dev/null`` ($CC
or `cc` on PATH) and adds the folders it lists. Without one, the multiarch folder is
unknown and the build stopped at "'x86_64-linux-gnu/python3.X/pyconfig.h' file not
found"; setup.py now passes that folder itself.

The test builds a wheel from a copy of the sources with this interpreter (setuptools and
ziglang from its environment, nothing downloaded), with PATH holding only the
environment's own bin folder and none of the variables that point Zig or a compiler at
other headers, then imports ``zigcorn._core`` from the unpacked wheel. It runs where the
interpreter's headers are Debian's multiarch layout: the chroot legs of .ci/run
(``scripts/sid_chroot.sh venv 3.14``/``3.15``, Debian unstable's python3.X-dev, with
build-essential installed but out of reach), or a venv of a Debian or Ubuntu python3.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support.harness import ROOT
from tests.support.tools import require_module

pytestmark = pytest.mark.every_python

require_module("ziglang")

# What could hand Zig or a compiler the system's header folders another way.
COMPILER_ENV = ("CC", "CXX", "CPP", "CFLAGS", "CPPFLAGS", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
                "NIX_CFLAGS_COMPILE", "NIX_LDFLAGS", "ZIG_LIBC", "ZIG_IS_DETECTING_LIBC_PATHS",
                "PYTHONPATH", "PIP_CONSTRAINT", "PIP_REQUIRE_VIRTUALENV")
COMPILERS = ("cc", "gcc", "c89", "c99", "clang", "tcc", f"{sysconfig.get_config_var('MULTIARCH')}-gcc")


def debian_multiarch_pyconfig() -> Path | None:
    """This interpreter's real pyconfig.h when its include folder's pyconfig.h is Debian's
    multiarch wrapper, else None."""
    include = Path(sysconfig.get_paths()["include"])
    multiarch = sysconfig.get_config_var("MULTIARCH")
    real = include.parent / (multiarch or "-") / include.name / "pyconfig.h"
    try:
        wrapper = (include / "pyconfig.h").read_text()
    except OSError:
        return None
    return real if multiarch and real.exists() and f"<{multiarch}/{include.name}/pyconfig.h>" in wrapper else None


def test_pip_builds_the_engine_with_debian_headers_and_no_c_compiler(tmp_path):
    if debian_multiarch_pyconfig() is None:
        pytest.skip(f"{sys.executable}'s pyconfig.h is not a Debian multiarch wrapper (the chroot legs test this)")
    require_module("setuptools", "the build runs with this environment's setuptools (--no-build-isolation)")
    src = tmp_path / "zigcorn"
    ignore = shutil.ignore_patterns("*.so", "__pycache__", "*.egg-info", ".zig-cache", "zig-cache")
    shutil.copytree(ROOT / "src", src / "src", ignore=ignore)
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)

    bindir = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in COMPILER_ENV}
    env["PATH"] = bindir
    env["ZIGCORN_OPTIMIZE"] = "Debug"  # the fastest to compile: what is tested is finding the headers
    reachable = [c for c in COMPILERS if shutil.which(c, path=bindir)]
    assert reachable == [], f"a C compiler is reachable on the test's PATH {bindir}: {reachable}"

    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "--no-index",
                            "--disable-pip-version-check", "-w", str(wheels), str(src)],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600, stdin=subprocess.DEVNULL)
    output = built.stdout + built.stderr
    errors = "\n".join(line for line in output.splitlines() if "error:" in line)
    assert built.returncode == 0, f"{errors}\n--- the end of pip's output ---\n{output[-3000:]}"

    (wheel,) = wheels.glob("zigcorn-*.whl")
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(unpacked)
    env["PYTHONPATH"] = str(unpacked)
    loaded = subprocess.run([sys.executable, "-c", "import zigcorn._core as core; print(core.__file__)"],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.strip().startswith(str(unpacked)), loaded.stdout
