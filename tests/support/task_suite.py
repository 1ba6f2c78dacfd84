"""CPython's asyncio task tests run against zigcorn's own Task (`zigcorn.loop.Task`).

    python -m tests.support.task_suite                 # our Task
    python -m tests.support.task_suite --task asyncio  # the same modules, asyncio's Task

Two parts, each in a fresh interpreter:
- ``test_tasks.BaseTaskTests`` and ``BaseCurrentLoopTests``: the battery CPython runs
  against each of its Task implementations (C, Python, subclasses), run against ours
  the same way (``Task = zigcorn.loop.Task``, ``Future = asyncio's C Future``). Left out:
  ``SetMethodsTest``, which calls ``asyncio.Future.set_result(task, ...)`` on the task,
  so needs a Task that *is* an ``asyncio.Future`` subclass (ours is not).
- The modules whose tests make tasks through ``create_task``/``ensure_future``/``gather``
  (`MODULES`), with zigcorn's loop as the default loop and its ``create_task`` making our
  Task; what fails there and passes with asyncio's Task on the same loop is a regression.

Our Task runs as the server runs it: linked into the engine's registry of tasks, which
``asyncio.all_tasks()`` reads (`zigcorn.loop.use_native_registry`, 3.11-3.13).

Prints one JSON line (`RESULT_MARK`) per part.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import unittest

from tests.support.asyncio_suite import _Result

RESULT_MARK = "@@task-suite-result@@ "
MODULES = ("test_tasks", "test_taskgroups", "test_timeouts", "test_waitfor", "test_locks", "test_queues",
           "test_pep492", "test_context", "test_eager_task_factory")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(suite: unittest.TestSuite) -> dict:
    from test import support

    support.verbose = False
    with open(os.devnull, "w") as sink:
        result = unittest.TextTestRunner(stream=sink, resultclass=_Result, verbosity=0).run(suite)
    return {
        "run": result.testsRun,
        "skipped": len(result.skipped),
        "passed": [t.split(".", 2)[-1] for t in result.passed],
        "failed": sorted(t.id().split(".", 2)[-1] for t, _ in result.failures + result.errors),
        "details": {t.id().split(".", 2)[-1]: tb[-1500:] for t, tb in result.failures + result.errors},
    }


def battery(task: str) -> dict:
    """BaseTaskTests and BaseCurrentLoopTests on our Task (or asyncio's C Task)."""
    from asyncio import futures, tasks
    from test.test_asyncio import test_tasks as m
    from test.test_asyncio import utils as test_utils

    from zigcorn.loop import Task, use_native_registry

    task_type = Task if task == "zigcorn" else tasks._CTask
    if task == "zigcorn":
        use_native_registry()  # as the server has it

    class TaskBattery(m.BaseTaskTests, test_utils.TestCase):
        Task = task_type
        Future = futures._CFuture

    class CurrentLoopBattery(m.BaseCurrentLoopTests, test_utils.TestCase):
        def new_task(self, coro):
            return task_type(coro, loop=self.loop)

    suite = unittest.TestSuite()
    for cls in (TaskBattery, CurrentLoopBattery):
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(cls))
    return _run(suite)


def modules(task: str) -> dict:
    """`MODULES` with zigcorn's loop as asyncio's default, making our Task (or asyncio's)."""
    import asyncio.unix_events
    import importlib
    import importlib.util

    from zigcorn.loop import Loop, Task, use_native_registry

    if task == "zigcorn":
        use_native_registry()
        loop_class = type("Loop", (Loop,), {"_zc_task_type": Task})
    else:
        loop_class = Loop
    asyncio.unix_events._UnixDefaultEventLoopPolicy._loop_factory = loop_class
    suite = unittest.TestSuite()
    for name in MODULES:
        if importlib.util.find_spec(f"test.test_asyncio.{name}") is None:
            continue  # e.g. test_eager_task_factory before 3.12
        module = importlib.import_module(f"test.test_asyncio.{name}")
        suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(module))
    return _run(suite)


def _spawn(part: str, task: str) -> dict:
    cmd = [sys.executable, "-m", "tests.support.task_suite", "--part", part, "--task", task]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=_ROOT, stdin=subprocess.DEVNULL)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    return {"run": 0, "skipped": 0, "passed": [], "failed": [f"{part} crashed (exit {proc.returncode})"],
            "details": {f"{part} crashed": (proc.stdout + proc.stderr)[-3000:]}}


def compare() -> dict:
    """Both parts on our Task; what fails there is run on asyncio's Task too: only what
    passes there counts as a regression."""
    out: dict = {"python": sys.version.split()[0]}
    for part in ("battery", "modules"):
        ours = _spawn(part, "zigcorn")
        theirs = _spawn(part, "asyncio") if ours["failed"] else {"passed": []}
        regressions = sorted(t for t in ours["failed"] if t in theirs["passed"] or " " in t)
        out[part] = {"run": ours["run"], "skipped": ours["skipped"], "failed": ours["failed"],
                     "regressions": regressions, "details": {t: ours["details"].get(t, "") for t in regressions}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("battery", "modules"))
    p.add_argument("--task", choices=("zigcorn", "asyncio"), default="zigcorn")
    p.add_argument("--json", help="write the comparison here")
    args = p.parse_args(argv)
    if args.part:
        result = battery(args.task) if args.part == "battery" else modules(args.task)
        print(RESULT_MARK + json.dumps(result), flush=True)
        return 0
    result = compare()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    for part in ("battery", "modules"):
        r = result[part]
        for t in r["regressions"]:
            print(f"REGRESSION {part} {t}\n{r['details'][t]}\n")
        print(f"{part}: {r['run']} tests, {r['skipped']} skipped, {len(r['failed'])} failed, "
              f"{len(r['regressions'])} regressions (Python {result['python']})")
    return 1 if result["battery"]["regressions"] or result["modules"]["regressions"] else 0


if __name__ == "__main__":
    sys.exit(main())
