"""CPython's own asyncio tests (``test.test_asyncio``, shipped with the interpreter), run
with zigcorn's loop as the default event loop.

    python -m tests.support.asyncio_suite                 # the whole suite, zigcorn's loop
    python -m tests.support.asyncio_suite --loop asyncio  # the same run with asyncio's own loop
    python -m tests.support.asyncio_suite --json out.json

Every test that gets its loop from the policy (``asyncio.new_event_loop``,
``asyncio.run``, ``asyncio.Runner``, ``policy.new_event_loop``) gets a ``zigcorn.loop.Loop``;
tests that build a specific class themselves (``asyncio.SelectorEventLoop(...)``, the
test-only ``TestLoop``) keep it. To that, ``test_events`` gains one more member of its own
family of loop test classes, ``ZigcornEventLoopTests``: the event loop battery asyncio
runs against each of its selector loops (sockets, pipes, PTYs, servers, datagrams,
signals, subprocesses, TLS), run against zigcorn's loop.

Modules run two at a time, each in a fresh interpreter with a time limit. A test that
fails on zigcorn's loop is run again, alone (one that passes then lost a race with its
neighbour; it is reported), and then on asyncio's own loop: if it fails there too the
cause is this machine, not the loop. What is left must be in `EXPECTED`, with its reason;
anything else is a regression and the run exits 1.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pkgutil
import subprocess
import sys
import time
import unittest

MODULE_TIMEOUT_S = 600
RESULT_MARK = "@@asyncio-suite-result@@ "

# Tests that pass on asyncio's own loop and not on zigcorn's, each with why. Matched
# against the test id with the module prefix "test.test_asyncio." left off.
EXPECTED: dict[str, str] = {
}


def install(loop: str) -> None:
    """Makes `loop` the kind of loop asyncio's default policy creates."""
    if loop == "asyncio":
        return
    import asyncio.unix_events

    from zigcorn.loop import Loop

    asyncio.unix_events._UnixDefaultEventLoopPolicy._loop_factory = Loop


def _add_zigcorn_battery(module) -> None:
    """test_events runs one battery of tests against each of asyncio's selector loops;
    this adds zigcorn's loop to that family."""
    from zigcorn.loop import Loop

    utils = sys.modules["test.test_asyncio.utils"]
    # 3.14 folded the Unix-only tests (UnixEventLoopTestsMixin) into EventLoopTestsMixin.
    battery = getattr(module, "UnixEventLoopTestsMixin", module.EventLoopTestsMixin)

    class ZigcornEventLoopTests(battery, module.SubprocessTestsMixin, utils.TestCase):
        def create_event_loop(self):
            return Loop()

    ZigcornEventLoopTests.__module__ = module.__name__
    ZigcornEventLoopTests.__qualname__ = "ZigcornEventLoopTests"
    module.ZigcornEventLoopTests = ZigcornEventLoopTests


def _short(test_id: str) -> str:
    return test_id.removeprefix("test.test_asyncio.")


def modules() -> list[str]:
    import test.test_asyncio as package

    names = [m.name for m in pkgutil.iter_modules(package.__path__) if m.name.startswith("test_")]
    return sorted(n for n in names if not n.startswith("test_windows"))


class _Result(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed: list[str] = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed.append(test.id())


def worker(module_name: str | None, ids: list[str], loop: str) -> int:
    """Runs one module (or the given test ids) in this process; prints the result as JSON."""
    import faulthandler

    # A hang leaves every thread's stack in the report (then this process exits), before
    # the parent's timeout would kill it without a word.
    faulthandler.dump_traceback_later(MODULE_TIMEOUT_S - 30, exit=True)
    # Started in the background by a shell, a process inherits SIGINT ignored, and then
    # _thread.interrupt_main() does nothing: test_runners' interrupt tests wait forever (on
    # asyncio's own loop too). They need SIGINT as an interactive Python has it.
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
    install(loop)
    import importlib

    from test import support

    loader = unittest.TestLoader()
    if module_name:
        module = importlib.import_module(f"test.test_asyncio.{module_name}")
        if module_name == "test_events" and loop != "asyncio":
            _add_zigcorn_battery(module)
        suite = loader.loadTestsFromModule(module)
    else:
        for test_id in ids:
            if ".ZigcornEventLoopTests." in test_id and loop != "asyncio":
                _add_zigcorn_battery(importlib.import_module("test.test_asyncio.test_events"))
                break
        suite = unittest.TestSuite(loader.loadTestsFromName(f"test.test_asyncio.{i}") for i in ids)
    support.verbose = False
    with open(os.devnull, "w") as sink:
        result = unittest.TextTestRunner(stream=sink, resultclass=_Result, verbosity=0).run(suite)
    out = {
        "run": result.testsRun,
        "passed": [_short(t) for t in result.passed],
        "failed": [_short(t.id()) for t, _ in result.failures + result.errors]
        + [_short(t.id()) for t in result.unexpectedSuccesses],
        "skipped": len(result.skipped),
        "details": {_short(t.id()): tb[-1500:] for t, tb in result.failures + result.errors},
    }
    print(RESULT_MARK + json.dumps(out), flush=True)
    return 0


def _spawn(args: list[str], loop: str) -> dict:
    cmd = [sys.executable, "-m", "tests.support.asyncio_suite", "--loop", loop, *args]
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MODULE_TIMEOUT_S, cwd=_ROOT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"run": 0, "passed": [], "failed": [f"{args} timed out"], "skipped": 0, "details": {}}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK):])
            result["seconds"] = round(time.monotonic() - started, 1)
            return result
    tail = (proc.stdout + proc.stderr)[-3000:]
    return {"run": 0, "passed": [], "failed": [f"{args} crashed (exit {proc.returncode})"], "skipped": 0,
            "details": {f"{args} crashed": tail}}  # fmt: skip


_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_suite(loop: str, jobs: int) -> dict:
    """The whole suite on `loop`, then its failures again on asyncio's own loop."""
    names = modules()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        results = dict(zip(names, pool.map(lambda n: _spawn(["--module", n], loop), names)))
    # A module process killed from outside (SIGKILL: never the loop's own doing, whose
    # faults are SIGABRT or SIGSEGV) or one that hung runs again, alone; a second time
    # stands as a regression. test_runners did each once in CI while the machine was
    # loaded (not reproduced in 60 runs alone or in pairs): the first report is kept.
    for name, r in results.items():
        if any(f.endswith("crashed (exit -9)") or f.endswith("timed out") or "crashed (exit 1)" in f
               for f in r["failed"]):
            again = _spawn(["--module", name], loop)
            if not again["failed"]:
                print(f"RERUN {name} passed alone after: {r['failed']}\n{next(iter(r['details'].values()), '')[-3000:]}",
                      flush=True)
            results[name] = again
    failed = sorted({t for r in results.values() for t in r["failed"]})
    details = {k: v for r in results.values() for k, v in r["details"].items()}
    # A second chance, alone: a timing-sensitive test can lose a race with its neighbour
    # module on a 2-core machine. Those that pass now are reported, not counted.
    flaky: list[str] = []
    rerunnable_here = [t for t in failed if " " not in t]
    if rerunnable_here:
        again = _spawn(["--ids", *rerunnable_here], loop)
        flaky = sorted(set(rerunnable_here) & set(again["passed"]))
        failed = [t for t in failed if t not in flaky]
    # Tests that fail on asyncio's own loop here too: this machine's, not the loop's.
    also_stock: list[str] = []
    rerunnable = [t for t in failed if " " not in t and ".ZigcornEventLoopTests." not in t]
    if loop != "asyncio" and rerunnable:
        stock = _spawn(["--ids", *rerunnable], "asyncio")
        also_stock = sorted(set(rerunnable) - set(stock["passed"]))
    # The battery's own tests have twins on asyncio's epoll loop: those decide.
    twins = {t: t.replace(".ZigcornEventLoopTests.", ".EPollEventLoopTests.") for t in failed if ".ZigcornEventLoopTests." in t}
    if twins:
        stock = _spawn(["--ids", *twins.values()], "asyncio")
        also_stock += sorted(t for t, twin in twins.items() if twin not in stock["passed"])
    regressions = [t for t in failed if t not in also_stock and t not in EXPECTED]
    return {
        "loop": loop,
        "python": sys.version.split()[0],
        "modules": {n: {k: r[k] for k in ("run", "skipped", "seconds") if k in r} | {"failed": r["failed"]} for n, r in results.items()},
        "run": sum(r["run"] for r in results.values()),
        "skipped": sum(r["skipped"] for r in results.values()),
        "failed": failed,
        "passed_on_rerun": flaky,
        "failed_on_asyncio_too": also_stock,
        "expected": [t for t in failed if t in EXPECTED],
        "regressions": regressions,
        "details": {t: details.get(t, "") for t in regressions},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loop", choices=("zigcorn", "asyncio"), default="zigcorn")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--json", help="write the whole result here")
    p.add_argument("--module", help=argparse.SUPPRESS)
    p.add_argument("--ids", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.module or args.ids:
        return worker(args.module, args.ids or [], args.loop)
    started = time.monotonic()
    result = run_suite(args.loop, args.jobs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    for test_id in result["regressions"]:
        print(f"REGRESSION {test_id}\n{result['details'][test_id]}\n")
    for test_id in result["expected"]:
        print(f"expected: {test_id}: {EXPECTED[test_id]}")
    for test_id in result["failed_on_asyncio_too"]:
        print(f"fails on asyncio's own loop here too: {test_id}")
    for test_id in result["passed_on_rerun"]:
        print(f"failed once, passed when run again alone: {test_id}")
    passed = result["run"] - result["skipped"] - len(result["failed"])
    print(f"test.test_asyncio on {result['loop']}'s loop, Python {result['python']}: {result['run']} tests, "
          f"{passed} passed, {result['skipped']} skipped, {len(result['expected'])} expected differences, "
          f"{len(result['failed_on_asyncio_too'])} failing on asyncio too, {len(result['regressions'])} regressions "
          f"({time.monotonic() - started:.0f} s)")  # fmt: skip
    return 1 if result["regressions"] else 0


if __name__ == "__main__":
    sys.exit(main())
