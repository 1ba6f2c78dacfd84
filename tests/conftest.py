"""Fixtures. Run against uvicorn to validate the suite itself: ``ZIGCORN_TEST_SERVER=uvicorn pytest tests``."""

import os
import re

import pytest

from tests.support.harness import SERVER, Server

# A test whose setup, call and teardown take over SLOW_SECONDS says why in its docstring, in
# a sentence beginning "Slow:" (what it waits for and why that cannot be shorter): CI's
# budget is spent one such test at a time. The check is wall time, which a loaded machine
# stretches more than its load says (a 25 s Zig build took 93 s at a load of 3 per core):
# a test without the sentence is reported as a warning past the limit, and fails on CI
# only past twice the limit times the load per core (at least 1), so that a test near the
# limit on a busy CI machine (a 28 s setup took 34 s at 1 per core) is not a failure.
SLOW_SECONDS = 30.0
SLOW_REASON = re.compile(r"\bSlow(?: \([^)]*\))?:\s*\S")


def load_per_core() -> float:
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def pytest_report_header(config):
    return f"server under test: {SERVER}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    if call.when == "setup":
        item._slow_load = load_per_core()  # noqa: SLF001 - pytest's own items carry plugin state
    outcome = yield
    report = outcome.get_result()
    item._slow_spent = getattr(item, "_slow_spent", 0.0) + report.duration  # noqa: SLF001
    if call.when != "teardown" or not report.passed:
        return
    spent = item._slow_spent  # noqa: SLF001
    load = max(getattr(item, "_slow_load", 1.0), load_per_core())
    limit = 2 * SLOW_SECONDS * load
    doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
    if spent <= SLOW_SECONDS or SLOW_REASON.search(doc):
        return
    message = (f"{item.nodeid} took {spent:.0f} s (over {SLOW_SECONDS:.0f} s; load per core {load:.1f}) and its "
               "docstring does not say why in a sentence beginning 'Slow:' (tests/conftest.py)")
    if os.environ.get("CI") and spent > limit:
        report.outcome = "failed"
        report.longrepr = message
    else:
        item.warn(pytest.PytestWarning(message))


@pytest.fixture
def start_server():
    """Factory: ``start_server("hello:app", "--flag", env={...}, wait=True) -> Server``.

    Every server started through it is killed at teardown.
    """
    servers = []

    def start(app: str, *args: str, env: dict | None = None, wait: bool = True, nofile: int | None = None,
              preexec=None) -> Server:
        server = Server(app, *args, env=env, nofile=nofile, preexec=preexec)
        servers.append(server)
        return server.wait_ready() if wait else server

    yield start
    for server in servers:
        server.kill()


@pytest.fixture(scope="module")
def basic():
    """A shared server running tests/apps/basic.py (for tests that do not stop it)."""
    server = Server("basic:app")
    try:
        yield server.wait_ready()
    finally:
        server.kill()
