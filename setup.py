"""Builds the Zig engine (``zigcorn._core``) with the Zig compiler from the ``ziglang`` wheel.

setuptools only knows C compilers, so the build_ext step is replaced: for the one
extension we call ``python -m ziglang build-lib`` and let setuptools place the result
(in the wheel, or next to the sources for ``pip install -e .``).
"""

import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ZIG_DIR = os.path.join("src", "zig")
OPTIMIZE_MODES = ("ReleaseSafe", "ReleaseFast", "ReleaseSmall", "Debug")


def python_includes(scratch: str) -> list[str]:
    """The folders Python.h needs: the include folder and, for Debian's and Ubuntu's own
    CPythons, one that resolves their pyconfig.h.

    There, <include>/pyconfig.h is a wrapper that includes
    <x86_64-linux-gnu/python3.X/pyconfig.h> (the folder named by the MULTIARCH config
    variable, beside the include folder). Zig looks in the system's /usr/include only when
    a system C compiler (`cc -E -Wp,-v`) lists it; otherwise it compiles against its own
    libc headers and the wrapper's target is "file not found". Adding /usr/include itself
    would mix the system's libc headers with Zig's, so `scratch` gets a folder holding
    <multiarch>/python3.X/pyconfig.h alone (a copy of the real one)."""
    include = sysconfig.get_paths()["include"]
    multiarch = sysconfig.get_config_var("MULTIARCH") or getattr(sys.implementation, "_multiarch", "")
    name = os.path.basename(include.rstrip(os.sep))
    real = os.path.join(os.path.dirname(include.rstrip(os.sep)), multiarch, name, "pyconfig.h")
    if not multiarch or not os.path.isfile(real):
        return [include]
    shim = os.path.join(scratch, "multiarch-include")
    folder = os.path.join(shim, multiarch, name)
    os.makedirs(folder, exist_ok=True)
    shutil.copyfile(real, os.path.join(folder, "pyconfig.h"))
    return [include, shim]


class ZigBuildExt(build_ext):
    def build_extension(self, ext: Extension) -> None:
        mode = os.environ.get("ZIGCORN_OPTIMIZE", "ReleaseSafe")
        if mode not in OPTIMIZE_MODES:
            raise SystemExit(f"ZIGCORN_OPTIMIZE must be one of {', '.join(OPTIMIZE_MODES)}, not {mode!r}")
        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        cache = os.path.abspath(os.path.join(self.build_temp, "zig-cache"))
        os.makedirs(cache, exist_ok=True)
        includes = [arg for folder in python_includes(os.path.abspath(self.build_temp)) for arg in ("-I", folder)]
        cmd = [
            sys.executable, "-m", "ziglang", "build-lib",
            "-dynamic", "-fPIC", "-lc", f"-O{mode}",
            # No .eh_frame: nothing unwinds through the engine (its panic handler prints two
            # addresses, it never walks the stack), and the table is ~28 KiB of a read-only
            # segment every worker maps and touches.
            "-fno-unwind-tables",
            *includes,
            "--cache-dir", cache,
            "--name", "_core",
            ext.sources[0],
            f"-femit-bin={out}",
        ]
        print(" ".join(cmd))
        subprocess.check_call(cmd)


setup(
    ext_modules=[Extension("zigcorn._core", sources=[os.path.join(ZIG_DIR, "extension.zig")])],
    cmdclass={"build_ext": ZigBuildExt},
)
