"""``--reload``: serve from a child process and start a fresh one when code changes.

The supervisor binds the socket once and passes it to each child, so a restart
never refuses connections that arrive meanwhile (they wait in the backlog). Each
child is a new interpreter (not a fork) so edited modules are imported afresh.
File events come from ``watchfiles`` (the ``reload`` extra).
"""

from __future__ import annotations

import base64
import fnmatch
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
from pathlib import Path

from zigcorn.config import LOAD_FAILURE, STARTUP_FAILURE
from zigcorn.supervisors.process import after_bind
from zigcorn.sockets import Listener, bind

logger = logging.getLogger("zigcorn.error")

_CHILD_ENV = "ZIGCORN_RELOAD_CHILD"
# How long a child may take to stop before it is killed.
_STOP_TIMEOUT_SECONDS = 5.0


def run_reloader(config) -> None:
    if not isinstance(config.app, str):
        logger.error("You must pass the application as an import string to enable 'reload'.")
        sys.exit(LOAD_FAILURE)
    try:
        import watchfiles
    except ImportError:
        logger.error("--reload needs the watchfiles package: pip install 'zigcorn[reload]'")
        sys.exit(LOAD_FAILURE)
    try:
        listener = bind(config)
        pid_file = after_bind(config)  # the supervisor's pid; children run with its privileges
    except OSError as exc:
        logger.error("%s", exc.strerror or exc)
        sys.exit(STARTUP_FAILURE)
    logger.info("Zigcorn running on %s (Press CTRL+C to quit)", listener.description)
    dirs = [str(Path(d).resolve()) for d in config.reload_dirs]
    logger.info("Will watch for changes in these directories: %s", dirs)
    logger.info("Started reloader process [%d] using WatchFiles", os.getpid())

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    child = _start_child(config, listener)
    try:
        changes = watchfiles.watch(
            *dirs,
            watch_filter=_Filter(config.reload_includes, config.reload_excludes),
            debounce=int(config.reload_delay * 1000),
            step=50,
            stop_event=stop,
            rust_timeout=500,
            yield_on_timeout=True,
            raise_interrupt=False,
        )
        for changed in changes:
            if stop.is_set():
                break
            if not changed:
                continue
            names = sorted({os.path.relpath(path) for _, path in changed})
            logger.warning("%s detected changes in %s. Reloading...", "WatchFiles", ", ".join(map(repr, names)))
            _stop_child(child)
            child = _start_child(config, listener)
    finally:
        _stop_child(child)
        listener.remove_uds()
        listener.close()
        if pid_file is not None:
            pid_file.remove()
        logger.info("Stopping reloader process [%d]", os.getpid())


class _Filter:
    """Include/exclude glob patterns, matched against file names and directory names."""

    def __init__(self, includes: list[str], excludes: list[str]) -> None:
        self.includes = includes
        self.excludes = [p for p in excludes if p not in includes]

    def __call__(self, change, path: str) -> bool:
        parts = Path(path).parts
        name = parts[-1]
        if any(fnmatch.fnmatch(part, pattern) for pattern in self.excludes for part in parts):
            return False
        return any(fnmatch.fnmatch(name, pattern) for pattern in self.includes)


def _start_child(config, listener: Listener) -> subprocess.Popen:
    arguments = dict(config.arguments, reload=False, workers=1, fd=None, uds=None, pid_file=None, user=None,
                     group=None, umask=None)  # fmt: skip
    payload = pickle.dumps((arguments, listener.fileno(), listener.description, sys.path))
    env = dict(os.environ, **{_CHILD_ENV: base64.b64encode(payload).decode()})
    code = "from zigcorn.supervisors.reload import child_main; child_main()"
    return subprocess.Popen([sys.executable, "-c", code], env=env, pass_fds=[listener.fileno()])


def _stop_child(child: subprocess.Popen) -> None:
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(_STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def child_main() -> None:
    """A reload child: rebuild the Config, serve on the inherited socket."""
    import socket

    from zigcorn import _core
    from zigcorn.config import Config
    from zigcorn.server import Server

    _core.set_parent_death_signal(signal.SIGTERM)  # never outlive the supervisor
    arguments, fd, description, path = pickle.loads(base64.b64decode(os.environ.pop(_CHILD_ENV)))
    sys.path[:] = path
    config = Config(**arguments)
    listener = Listener(socket.socket(fileno=fd), description)
    server = Server(config, listener)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    if not server.started:
        sys.exit(STARTUP_FAILURE)
