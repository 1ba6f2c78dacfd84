"""Coverage of the old mutation fuzzers against the coverage-guided ones, same time budget.

    python scripts/fuzz_coverage/measure.py --seconds 60 [--work /tmp/fuzzcov] [--seed 1]

For each pair (QUIC: fuzz/quic_main.zig against fuzz/quic_conn_main.zig; HTTP/3:
fuzz/http3_main.zig against fuzz/h3_session_main.zig) every fuzzer is built with Zig's
-ffuzz instrumentation: the old runners linked with counters.c (no libFuzzer), run for the
budget from their built-in seeds; the new ones linked with libFuzzer, run for the budget
from their built-in seeds only (not the committed corpus), then their corpus replayed by a
build linked with counters.c -DREPLAY_MAIN. counters.c writes each instrumented PC and
whether it was hit; llvm-symbolizer names their source files, and the PCs are counted per
engine folder (src/zig/quic/, src/zig/http3/...). Needs clang, libFuzzer's runtime and
llvm-symbolizer. Prints a table (docs/FUZZING.md keeps the figures).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ZIG_DIR = ROOT / "src" / "zig"
HERE = Path(__file__).resolve().parent
PAIRS = [
    ("quic", "quic_main.zig", "quic_conn_main.zig", "quic_conn"),
    ("http3", "http3_main.zig", "h3_session_main.zig", "h3_session"),
]
ZIG_FLAGS = ["-OReleaseSafe", "-ffuzz", "-fno-stack-check"]


def zig(*args: str, cwd: Path) -> None:
    subprocess.run([sys.executable, "-m", "ziglang", *args], cwd=cwd, check=True)


def with_engine(root: str, flags: list[str], sources: tuple[str, ...] = ()) -> list[str]:
    """The root (in src/zig/fuzz/, with C `sources`) and the engine as its named module
    `engine`; per-module flags go before each -M (docs/ARCHITECTURE.md)."""
    return [*flags, *sources, "--dep", "engine", f"-Mroot={ZIG_DIR / 'fuzz' / root}",
            *flags, f"-Mengine={ZIG_DIR / 'engine.zig'}"]


def build_old(root: str, work: Path, counters: Path) -> Path:
    exe = work / f"old_{root[:-4]}"
    zig("build-exe", "-fno-PIE", "-lc", f"-femit-bin={exe}",
        *with_engine(root, ZIG_FLAGS, (str(counters),)), cwd=work)
    return exe


def build_new(root: str, work: Path, replay: Path) -> tuple[Path, Path]:
    obj = work / f"{root[:-4]}.o"
    zig("build-obj", "-lc", "-fcompiler-rt", f"-femit-bin={obj}",
        *with_engine(root, [*ZIG_FLAGS, "-fPIC"]), cwd=work)
    fuzzer = work / root[:-4]
    counting = work / f"{root[:-4]}_replay"
    subprocess.run(["clang", "-fsanitize=fuzzer", str(obj), "-o", str(fuzzer)], check=True)
    subprocess.run(["clang", "-no-pie", str(obj), str(replay), "-o", str(counting)], check=True)
    return fuzzer, counting


def folder(path: str) -> str:
    marker = "/src/zig/"
    if marker not in path:
        return "std" if "/lib/std/" in path else "other"
    rest = path.split(marker, 1)[1]
    return rest.split("/", 1)[0] + "/" if "/" in rest else "(root)"


def tally(exe: Path, dump: Path) -> tuple[collections.Counter, collections.Counter]:
    """PCs per folder: (hit, instrumented)."""
    pcs, hits = [], []
    for line in dump.read_text().split("\n"):
        if line:
            pc, hit = line.split()
            pcs.append(pc)
            hits.append(hit == "1")
    out = subprocess.run(["llvm-symbolizer", f"--obj={exe}", "--no-inlines"], input="\n".join(pcs) + "\n",
                         capture_output=True, text=True, check=True).stdout
    blocks = [b for b in out.split("\n\n") if b.strip()]
    hit_by, all_by = collections.Counter(), collections.Counter()
    for block, hit in zip(blocks, hits):
        lines = block.strip().split("\n")
        where = folder(lines[1] if len(lines) > 1 else "")
        all_by[where] += 1
        if hit:
            hit_by[where] += 1
    return hit_by, all_by


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path("/tmp/zigcorn-fuzz-coverage"))
    ap.add_argument("--only", choices=[p[0] for p in PAIRS])
    args = ap.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    counters, replay = work / "counters.o", work / "replay.o"
    source = HERE / "counters.c"
    subprocess.run(["clang", "-O1", "-c", str(source), "-o", str(counters)], check=True)
    subprocess.run(["clang", "-O1", "-DREPLAY_MAIN", "-c", str(source), "-o", str(replay)], check=True)
    rows = []
    for name, old_root, new_root, seeds_name in PAIRS:
        if args.only and args.only != name:
            continue
        old = build_old(old_root, work, counters)
        old_dump = work / f"{name}_old.pcs"
        subprocess.run([str(old), "--seconds", str(args.seconds), "--seed", str(args.seed)], cwd=work,
                       env={**os.environ, "ZIGCORN_COVERAGE_OUT": str(old_dump)}, check=True)
        fuzzer, counting = build_new(new_root, work, replay)
        seeds, corpus = work / f"{name}_seeds", work / f"{name}_corpus"
        for d in (seeds, corpus):
            shutil.rmtree(d, ignore_errors=True)
        subprocess.run([str(fuzzer)], env={**os.environ, "ZIGCORN_FUZZ_WRITE_SEEDS": str(seeds)}, check=True)
        corpus.mkdir()
        run = subprocess.run([str(fuzzer), f"-max_total_time={args.seconds}", f"-seed={args.seed}",
                              f"-artifact_prefix={work}/", str(corpus), str(seeds)], cwd=work,
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stderr[-3000:], file=sys.stderr)
        new_dump = work / f"{name}_new.pcs"
        subprocess.run([str(counting), str(seeds), str(corpus)], cwd=work,
                       env={**os.environ, "ZIGCORN_COVERAGE_OUT": str(new_dump)}, check=True)
        for label, exe, dump in ((old_root, old, old_dump), (new_root, counting, new_dump)):
            hit, everything = tally(exe, dump)
            rows.append((label, hit, everything))
    folders = ["quic/", "http3/", "http/", "transport/", "testing/", "std"]
    print(f"{'fuzzer':28} " + " ".join(f"{f:>16}" for f in folders))
    for label, hit, everything in rows:
        print(f"{label:28} " + " ".join(f"{hit[f]:>7}/{everything[f]:<8}" for f in folders))
    return 0


if __name__ == "__main__":
    sys.exit(main())
