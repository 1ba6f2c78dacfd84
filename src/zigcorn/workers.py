"""A gunicorn worker class: ``gunicorn -k zigcorn.workers.ZigcornWorker app:app``.

gunicorn's arbiter binds the socket, forks the workers, replaces the dead ones and
turns signals into actions; each worker serves gunicorn's socket with zigcorn's engine
on zigcorn's own asyncio event loop (``loop="auto"``), as uvicorn's worker does on its
loop. What each gunicorn setting becomes:

- ``--graceful-timeout``: ``timeout_graceful_shutdown``; ``--keep-alive``: ``timeout_keep_alive``
- ``--timeout``: the worker's heartbeat (a loop that stops turning is killed by the arbiter)
- ``--max-requests`` and ``--max-requests-jitter``: the worker exits gracefully after that many
- ``--limit-request-line``, ``--limit-request-fields``, ``--limit-request-field_size``
  (mapped onto the head limit), ``--backlog``, ``--forwarded-allow-ips``
- ``--certfile``, ``--keyfile``, ``--ca-certs``, ``--cert-reqs``, ``--ciphers``: HTTPS
- logging: zigcorn's loggers write to gunicorn's error and access logs

Signals to a worker: SIGTERM drains (gunicorn's graceful stop, and what the arbiter
sends on SIGHUP to old workers), SIGINT and SIGQUIT stop it at once, SIGUSR1 reopens the
log files. Only one listening socket (one ``--bind``) is served.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from gunicorn.arbiter import Arbiter
from gunicorn.workers.base import Worker

from zigcorn.config import SETTING, Config
from zigcorn.server import Server
from zigcorn.sockets import Listener


class ZigcornWorker(Worker):
    """Serves gunicorn's listening socket with zigcorn's engine."""

    #: Extra `zigcorn.Config` keyword arguments; subclass to change them (as with uvicorn's worker).
    CONFIG_KWARGS: dict = {"loop": "auto"}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name, target in (("zigcorn.error", self.log.error_log), ("zigcorn.access", self.log.access_log)):
            logger = logging.getLogger(name)
            logger.handlers = target.handlers
            logger.setLevel(target.level)
            logger.propagate = False
        cfg = self.cfg
        kwargs = {
            "log_config": None,
            "access_log": bool(cfg.accesslog),
            "timeout_keep_alive": cfg.keepalive,
            "timeout_graceful_shutdown": cfg.graceful_timeout,
            "limit_max_requests": self.max_requests if cfg.max_requests > 0 else None,
            "forwarded_allow_ips": cfg.forwarded_allow_ips,
            "backlog": cfg.backlog,
        }
        # gunicorn's 0 means "no limit": the engine's own maximum then; values past the
        # engine's bounds are brought within them.
        for ours, theirs in (("limit_request_line", cfg.limit_request_line),
                             ("limit_request_fields", cfg.limit_request_fields),
                             ("limit_request_head", cfg.limit_request_field_size)):
            bounds = SETTING[ours]
            kwargs[ours] = min(max(theirs, bounds.low), bounds.high) if theirs else bounds.high
        if cfg.is_ssl:
            kwargs.update(
                ssl_certfile=cfg.certfile, ssl_keyfile=cfg.keyfile, ssl_ca_certs=cfg.ca_certs,
                ssl_cert_reqs=int(cfg.cert_reqs), ssl_ciphers=cfg.ciphers or SETTING["ssl_ciphers"].default,
            )
        kwargs.update(self.CONFIG_KWARGS)
        self.config_kwargs = kwargs
        self.server: Server | None = None

    def init_signals(self) -> None:
        # The server installs its own SIGTERM/SIGINT handlers while it serves; gunicorn's
        # would only set `alive`, which nothing here reads.
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, self.handle_usr1)
        signal.siginterrupt(signal.SIGUSR1, False)
        signal.signal(signal.SIGQUIT, self._quit)

    def _quit(self, sig, frame) -> None:
        """SIGQUIT: gunicorn's quick shutdown: connections are cut, apps see a disconnect."""
        server = self.server
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving yet (or any more)
            sys.exit(0)
        if server is not None:
            server.force_exit = True
            # From a signal handler: through the loop's thread-safe door, which wakes it.
            loop.call_soon_threadsafe(server.handle_exit_request)

    def run(self) -> None:
        if len(self.sockets) != 1:
            self.log.error("zigcorn's worker serves one listening socket; got %d (--bind once)", len(self.sockets))
            sys.exit(Arbiter.WORKER_BOOT_ERROR)
        config = Config(self.wsgi, **self.config_kwargs)
        gsock = self.sockets[0]
        listener = Listener(gsock.sock, str(gsock))
        self.server = Server(config, listener=listener, on_ready=self._heartbeat)
        self.server.run()
        if not self.server.started:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)

    def _heartbeat(self) -> None:
        """Tells the arbiter the loop turns, from the loop itself: a loop that stops
        turning (an app blocking it) stops notifying, and the arbiter replaces the worker
        after --timeout."""
        loop = asyncio.get_running_loop()
        interval = max(min(self.timeout / 2, 5.0), 0.25)

        def beat() -> None:
            if os.getppid() != self.ppid:
                # The arbiter died (SIGKILL, OOM): nobody will stop this worker, and it
                # would hold the port. Stop as gunicorn's own workers do.
                self.log.info("Parent changed, shutting down: %s", self)
                if self.server is not None:
                    self.server.handle_exit_request()
                return
            self.notify()
            loop.call_later(interval, beat)

        beat()
