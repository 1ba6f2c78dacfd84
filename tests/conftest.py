"""Fixtures. Run against uvicorn to validate the suite itself: ``ZIGCORN_TEST_SERVER=uvicorn pytest tests``."""

import pytest

from tests.support.harness import SERVER, Server


def pytest_report_header(config):
    return f"server under test: {SERVER}"


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
