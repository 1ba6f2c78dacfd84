"""zigcorn's own Task (`zigcorn.loop.Task`, ``--task-impl zigcorn``): CPython's task tests
on it, a server's requests on it, and its references (nothing kept, nothing leaked)."""

import asyncio
import contextvars
import gc
import json
import os
import subprocess
import sys
import textwrap
import urllib.request
import weakref

import pytest

from tests.support.harness import ROOT, Server, zigcorn_only
from zigcorn.loop import Loop, Task

pytestmark = pytest.mark.every_python


def test_cpython_task_tests_pass_on_zigcorns_task(tmp_path):
    """test_tasks' BaseTaskTests on our Task as CPython runs them on each of its own, and
    the task modules (tasks, TaskGroup, timeouts, wait_for, locks, queues) with zigcorn's
    loop making our Task: nothing that passes with asyncio's Task fails with ours.

    Slow: test_tasks alone is some 900 tests with real sleeps (about 60 s)."""
    from tests.support.tools import skip_or_fail

    if importlib_find("test.test_asyncio") is None:
        skip_or_fail("this interpreter ships without its test suite, test.test_asyncio")
    out = tmp_path / "tasks.json"
    proc = subprocess.run([sys.executable, "-m", "tests.support.task_suite", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1500, stdin=subprocess.DEVNULL)  # fmt: skip
    print(proc.stdout[-5000:])
    result = json.loads(out.read_text())
    assert result["battery"]["regressions"] == [], proc.stdout[-20000:]
    assert result["modules"]["regressions"] == [], proc.stdout[-20000:]
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    assert result["battery"]["run"] > 100  # the battery really ran
    assert result["modules"]["run"] > 900


def importlib_find(name):
    import importlib.util

    return importlib.util.find_spec(name)


@zigcorn_only
@pytest.mark.parametrize("impl", ["asyncio", "zigcorn"])
def test_a_request_sees_the_same_task_api_on_either_task(impl):
    """The same app answers the same on both tasks: current_task() is the request's task,
    it is in all_tasks(), TaskGroup-style timeouts count on cancelling(), gather works,
    and only the type differs; a request cut by --timeout-request answers 503."""
    server = Server("task_app:app", "--task-impl", impl, "--timeout-request", "1").wait_ready()
    try:
        with urllib.request.urlopen(f"{server.url}/x", timeout=10) as r:
            report = json.loads(r.read())
        with pytest.raises(urllib.error.HTTPError) as cut:
            urllib.request.urlopen(f"{server.url}/sleep", timeout=10)
        assert cut.value.code == 503
    finally:
        server.stop()
    expected_type = "zigcorn.loop.Task" if impl == "zigcorn" else "_asyncio.Task"
    assert report == {"type": expected_type, "seen_before": "unset", "child": "/x", "gather": [1, 2], "timeout": 0,
                      "current_is_task": True, "in_all_tasks": True, "name": True}  # fmt: skip


def test_asyncio_and_uvloop_keep_asyncios_task():
    """--task-impl zigcorn applies to zigcorn's loop only (and not in debug mode); auto, the
    default, is asyncio's Task for now (server.py `_request_task_type` says why)."""
    from types import SimpleNamespace

    from zigcorn.server import _request_task_type

    config = SimpleNamespace(task_impl="zigcorn")
    auto = SimpleNamespace(task_impl="auto")
    loop = asyncio.new_event_loop()
    own = Loop()
    try:
        assert _request_task_type(config, loop) is None
        assert _request_task_type(auto, loop) is None
        assert _request_task_type(config, own) is Task
        assert _request_task_type(auto, own) is None
        assert _request_task_type(SimpleNamespace(task_impl="asyncio"), own) is None
        own.set_debug(True)
        assert _request_task_type(config, own) is None
    finally:
        loop.close()
        own.close()


def test_tasks_die_by_reference_counting_and_give_back_what_they_held():
    """Tasks that await futures and other tasks are freed without the garbage collector
    (no cycle through the task), and tasks that also fail or are cancelled leave the
    references of what they held (the loop, a context, arguments) as they were."""
    loop = Loop()
    marker = object()
    ctx = contextvars.copy_context()
    dead = []

    async def leaf(x):
        await asyncio.sleep(0)
        return x

    async def failing():
        await asyncio.sleep(0)
        raise ValueError(marker)

    async def body(i):
        fut = loop.create_future()
        loop.call_soon(fut.set_result, marker)
        got = await fut
        assert got is marker
        inner = Task(leaf(marker), loop=loop)
        assert await inner is marker
        if i % 3 == 0:
            f = Task(failing(), loop=loop)
            try:
                await f
            except ValueError:
                pass
        if i % 5 == 0:
            s = Task(asyncio.sleep(10), loop=loop)
            await asyncio.sleep(0)
            s.cancel(marker)
            try:
                await s
            except asyncio.CancelledError:
                pass
        return marker

    async def main():
        for i in range(300):
            t = Task(body(i), loop=loop, context=ctx.copy() if i % 2 else ctx)
            t.add_done_callback(lambda f: None)
            if i % 3 and i % 5:  # no exception: no traceback cycle through the frames
                dead.append(weakref.ref(t))
            assert await t is marker
            del t

    loop.run_until_complete(asyncio.sleep(0))  # the loop's own first-run state, made once
    gc.collect()
    refs_before = (sys.getrefcount(loop), sys.getrefcount(marker), sys.getrefcount(ctx))
    gc.disable()
    try:
        loop.run_until_complete(main())
        loop.run_until_complete(asyncio.sleep(0))
        assert len(dead) == 160 and [r for r in dead if r() is not None] == []
    finally:
        gc.enable()
    # An exception's traceback holds the frames that awaited it (asyncio's tasks alike):
    # those cycles are the collector's; after it, nothing of the tasks' is left.
    gc.collect()
    refs_after = (sys.getrefcount(loop), sys.getrefcount(marker), sys.getrefcount(ctx))
    loop.close()
    assert refs_after == refs_before


def test_a_busy_server_loop_of_tasks_keeps_rss_flat(tmp_path):
    """The leak check: 200,000 tasks (each awaiting a future, a child task, a callback),
    in a fresh process; RSS after the first round is the baseline."""
    script = tmp_path / "soak.py"
    script.write_text(textwrap.dedent("""
        import asyncio, gc, os
        from tests.support.harness import rss_kb
        from zigcorn.loop import Loop, Task

        loop = Loop()

        async def child():
            await asyncio.sleep(0)
            return 1

        async def request():
            fut = loop.create_future()
            loop.call_soon(fut.set_result, None)
            await fut
            return await Task(child(), loop=loop)

        async def one_round(n):
            for _ in range(n // 100):
                tasks = [Task(request(), loop=loop, eager_start=True) for _ in range(100)]
                for t in tasks:
                    t.add_done_callback(lambda f: None)
                await asyncio.gather(*tasks)

        loop.run_until_complete(one_round(20000))
        gc.collect()
        base = rss_kb(os.getpid())
        for _ in range(9):
            loop.run_until_complete(one_round(20000))
        gc.collect()
        print(base, rss_kb(os.getpid()))
        loop.close()
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the script imports tests.support.harness
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    base, end = map(int, proc.stdout.split())
    assert end - base < 2048, (base, end)  # KiB: a leak of even 16 bytes a task would show 3 MiB
