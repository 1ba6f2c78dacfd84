"""Builds the Zig engine (``zigcorn._core``) with the Zig compiler from the ``ziglang`` wheel.

setuptools only knows C compilers, so the build_ext step is replaced: for the one
extension we call ``python -m ziglang build-lib`` and let setuptools place the result
(in the wheel, or next to the sources for ``pip install -e .``).
"""

import os
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ZIG_DIR = os.path.join("src", "zig")
OPTIMIZE_MODES = ("ReleaseSafe", "ReleaseFast", "ReleaseSmall", "Debug")


class ZigBuildExt(build_ext):
    def build_extension(self, ext: Extension) -> None:
        mode = os.environ.get("ZIGCORN_OPTIMIZE", "ReleaseSafe")
        if mode not in OPTIMIZE_MODES:
            raise SystemExit(f"ZIGCORN_OPTIMIZE must be one of {', '.join(OPTIMIZE_MODES)}, not {mode!r}")
        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        cache = os.path.abspath(os.path.join(self.build_temp, "zig-cache"))
        os.makedirs(cache, exist_ok=True)
        cmd = [
            sys.executable, "-m", "ziglang", "build-lib",
            "-dynamic", "-fPIC", "-lc", f"-O{mode}",
            "-I", sysconfig.get_paths()["include"],
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
