"""The benchmark's own virtualenv, and a description of the machine the numbers come from."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
VENV = BENCH_DIR / ".venv"
# The peers whose configurations the figures name are pinned: a figure is for one version
# and one set of flags. granian 2.8.7 has --task-impl rust (Python 3.11 only) and --loop
# rloop (the rloop package, its `rloop` extra); uvicorn 0.52 and later carry --http zttp
# (the zttp package; HTTP/2 with --http2); h2corn 2.0.0 is the HTTP/2 peer.
REQUIREMENTS = [
    "uvicorn[standard]==0.55.0", "zttp==0.0.35", "httptools", "uvloop",
    "granian==2.8.7", "rloop==0.5.0", "saltare==1.13.0", "h2corn==2.0.0", "hypercorn", "fastapi",
]
MARKER = VENV / ".zigcorn-bench-requirements"


def venv_python() -> Path:
    return VENV / "bin" / "python"


def _pip(*args: str) -> None:
    subprocess.run([str(venv_python()), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args],
                   check=True)


def ensure_venv() -> str:
    """Create ``benchmarks/.venv`` on first use and install the servers plus zigcorn (editable).

    zigcorn is installed editable from the repository, so the venv always runs the
    working tree's code and its last built engine (rebuild with ``pip install -e .``).
    """
    wanted = "\n".join([*REQUIREMENTS, f"-e {ROOT}"]) + "\n"
    if not venv_python().exists():
        print(f"creating {VENV} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    if not MARKER.exists() or MARKER.read_text() != wanted:
        print("installing the servers into the benchmark venv (first run only) ...", flush=True)
        _pip("--upgrade", "pip")
        _pip(*REQUIREMENTS)
        _pip("-e", str(ROOT))
        MARKER.write_text(wanted)
    compile_bytecode(str(venv_python()))
    return str(venv_python())


def compile_bytecode(python: str) -> None:
    """Byte-compile, for plain and for ``-OO`` runs, zigcorn's own modules, the apps and
    the site-packages of ``python``, as installing a wheel does for plain runs.

    An editable install leaves zigcorn's modules as source, and pip writes no
    ``.opt-2.pyc`` files for the ``-OO`` rows; a module without cached bytecode is compiled
    at every start when ``PYTHONDONTWRITEBYTECODE`` is set (some machines set it), else
    at the first start, and the compiler's memory stays in that process: 2.9 MiB more RSS
    after importing zigcorn beside FastAPI (4.2 MiB against 1.3) than with its modules
    compiled. compileall skips what is up to date, so after the first run this is quick.
    """
    code = "import sysconfig; p = sysconfig.get_paths(); print(p['purelib']); print(p['platlib'])"
    libs = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    folders = [str(ROOT / "src" / "zigcorn"), str(BENCH_DIR / "apps"), *dict.fromkeys(libs)]
    subprocess.run([python, "-m", "compileall", "-q", "-o", "0", "-o", "2", *folders], check=False,
                   stdout=subprocess.DEVNULL,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})


def install(packages: list[str]) -> None:
    """pip-install ``packages`` into the benchmark venv (the HTTP/2 section's extras).

    Apart from ``REQUIREMENTS``, so that adding them does not reinstall zigcorn (and
    rebuild its engine) in a venv that already exists.
    """
    print(f"installing {' '.join(packages)} into the benchmark venv ...", flush=True)
    _pip(*packages)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git(*args: str) -> str:
    out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    return out.stdout.strip()


def machine() -> dict:
    return {
        "nproc": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "memory_kib": _mem_total_kib(),
    }


def _mem_total_kib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def provenance() -> dict:
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "zigcorn_commit": _git("rev-parse", "--short", "HEAD") or None,
        "zigcorn_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
    }
