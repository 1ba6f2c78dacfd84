"""``--workers N``: a master that binds once, imports the app once and forks workers.

The master never runs the app. It imports it (and everything a worker needs) before
forking and calls ``gc.freeze()``, so the workers share those pages copy-on-write.
It then only watches: a worker that dies is replaced (with back-off when they keep
dying), signals are turned into actions the way gunicorn users expect:

- SIGTERM / SIGINT: every worker drains gracefully, then the master exits. A
  --drain-path request to any worker does the same, with --drain-delay.
- SIGHUP: a new generation of workers starts; once all of them accept, the old ones
  drain and exit. Both generations accept from the same socket meanwhile, so no
  connection is refused. (The app is not re-imported: workers fork from the master,
  like gunicorn's ``--preload``; restart the master to run new code.)
- SIGTTIN / SIGTTOU: one worker more / one fewer.

Workers ask the kernel for SIGTERM when the master dies, so none is left orphaned.
"""

from __future__ import annotations

import gc
import logging
import os
import select
import signal
import sys
import time
from dataclasses import dataclass, field

from zigcorn import _core
from zigcorn.accesslog import reopen_log_files
from zigcorn.config import STARTUP_FAILURE
from zigcorn.supervisors.process import DRAIN_SIGNAL, drop_privileges, rss_bytes, set_title, wants_privilege_drop, write_pid_file
from zigcorn.sockets import Listener, QuicSockets, bind, bind_quic, resolve_host, scheme_of, systemd_fds, url

logger = logging.getLogger("zigcorn.error")

MASTER_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD,
                  signal.SIGUSR1)  # fmt: skip
# A worker that dies younger than this counts as a crash; repeated crashes back off.
CRASH_AGE_SECONDS = 10.0
BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0
# Worker slots in the shared metrics counters (each worker, old or new, holds one).
METRICS_SLOTS_MAX = 2048
# After a graceful-shutdown timeout, workers still alive this much later are killed.
KILL_GRACE_SECONDS = 5.0
# A serving worker is pinged this often; --timeout-worker-healthcheck bounds its answer.
PING_INTERVAL_SECONDS = 1.0
# --workers-max-rss: how often each worker's resident memory is read (/proc/<pid>/statm).
RSS_CHECK_SECONDS = 1.0
MIB = 1024 * 1024


@dataclass
class Worker:
    pid: int
    slot: int
    generation: int
    ready_fd: int  # worker -> master: b"r" once it accepts, b"p" for each health-check pong, b"d" to drain
    started_at: float
    ping_fd: int = -1  # master -> worker: health-check pings
    ping_sent_at: float | None = None
    last_pong: float = 0.0
    ready: bool = False
    retiring: bool = False
    # --workers-max-rss: the pid of the worker this one replaces (retired once this one accepts),
    # and, on that worker, that its successor is on its way.
    replaces: int | None = None
    recycling: bool = False
    # --http3: the index of the UDP socket this worker serves (`Master.quic`).
    quic_index: int = 0


@dataclass
class Master:
    config: object
    listener: Listener | None = None
    target: int = 1
    generation: int = 0
    workers: dict[int, Worker] = field(default_factory=dict)
    pending_signals: list[int] = field(default_factory=list)
    crashes: int = 0
    respawn_at: float | None = None
    stopping: bool = False
    stop_deadline: float | None = None
    exit_code: int = 0
    pid_file: object = None
    next_rss_check: float = 0.0
    per_worker_sockets: bool = False
    # --http3: one UDP socket per worker, in worker order, open as long as the master runs.
    quic: QuicSockets | None = None

    def run(self) -> int:
        config = self.config
        self.target = config.workers
        per_worker_sockets = config.reuse_port and config.uds is None and config.fd is None and not systemd_fds()
        if config.reuse_port and not per_worker_sockets:
            logger.warning("--reuse-port applies to TCP sockets the workers bind themselves: ignored here.")
        set_title("zigcorn: master")
        self.per_worker_sockets = per_worker_sockets
        try:
            if not per_worker_sockets:
                self.listener = bind(config)
            if config.http3:
                port = self.listener.sock.getsockname()[1] if self.listener is not None else config.port
                self.quic = bind_quic(config, port, self.target)
            self.pid_file = write_pid_file(config.pid_file)
        except OSError as exc:
            logger.error("%s", exc.strerror or exc)
            if self.listener is not None:
                self.listener.close()
            if self.quic is not None:
                self.quic.close()
            return STARTUP_FAILURE
        try:
            return self._run()
        finally:
            if self.quic is not None:
                self.quic.close()
            if self.pid_file is not None:
                self.pid_file.remove()

    def _run(self) -> int:
        config = self.config
        try:
            self._preload()
        except OSError as exc:  # OpenSSL missing or too old
            logger.error("%s", exc)
            return STARTUP_FAILURE
        if config.metrics_path:
            # Shared counters, mapped before the fork: any worker can answer a scrape for all.
            _core.metrics_init(METRICS_SLOTS_MAX, {"metrics_buckets": config.metrics_bucket_seconds})
        if self.listener is not None:
            where = self.listener.description
        else:
            where = f"{url(scheme_of(config), resolve_host(config.host), config.port)} (SO_REUSEPORT in each worker)"
        logger.info("Zigcorn running on %s (Press CTRL+C to quit)", where)
        if self.quic is not None:
            logger.info("HTTP/3 on %s, one socket per worker", self.quic.description)
        logger.info("Started parent process [%d]", os.getpid())
        wakeup_r = self._install_signals()
        try:
            for _ in range(self.target):
                self._spawn(first=True)
            self._loop(wakeup_r)
        finally:
            if self.listener is not None:
                self.listener.remove_uds()
                self.listener.close()
        logger.info("Stopping parent process [%d]", os.getpid())
        return self.exit_code

    # ---- start-up --------------------------------------------------------------

    def _preload(self) -> None:
        """Import what every worker needs, once, so the pages are shared."""
        config = self.config
        config.loop_factory()  # imports the loop (zigcorn's, asyncio or uvloop) here, not in each worker
        if config.is_ssl:  # OpenSSL's pages are shared too; a missing library stops us here
            from zigcorn.tls import load_openssl

            load_openssl()
        import zigcorn.lifespan  # noqa: F401
        import zigcorn.server  # noqa: F401  (and with it http, websocket, sockets)

        if not self.per_worker_sockets and wants_privilege_drop(config):
            # Root's privileges end here, once the server's own modules are loaded: the
            # app is imported as --user. (With --reuse-port each worker drops them after binding.)
            drop_privileges(config.user, config.group, config.umask)
        config.load()
        gc.collect()
        gc.freeze()  # the collector never touches (and so never copies) the master's objects

    def _install_signals(self) -> int:
        wakeup_r, wakeup_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wakeup_w, warn_on_full_buffer=False)
        for sig in MASTER_SIGNALS:
            signal.signal(sig, self._on_signal)
        return wakeup_r

    def _on_signal(self, sig: int, frame) -> None:
        self.pending_signals.append(sig)

    # ---- the loop --------------------------------------------------------------

    def _loop(self, wakeup_r: int) -> None:
        while True:
            self._reap()
            self._handle_signals()
            if self.stopping:
                if not self.workers:
                    return
                if self.stop_deadline is not None and time.monotonic() >= self.stop_deadline:
                    self._kill_all(signal.SIGKILL)
            else:
                if self.respawn_at is not None and time.monotonic() >= self.respawn_at:
                    self.respawn_at = None
                    self._top_up()
                self._health_check()
                self._memory_check()
            fds = [wakeup_r] + [w.ready_fd for w in self.workers.values() if w.ready_fd >= 0]
            try:
                readable, _, _ = select.select(fds, [], [], 0.5)
            except InterruptedError:
                continue
            for fd in readable:
                if fd == wakeup_r:
                    _drain(wakeup_r)
                else:
                    self._on_ready_message(fd)

    def _handle_signals(self) -> None:
        while self.pending_signals:
            sig = self.pending_signals.pop(0)
            if sig in (signal.SIGINT, signal.SIGTERM):
                self._stop(sig)
            elif sig == signal.SIGHUP and not self.stopping:
                self._reload()
            elif sig == signal.SIGUSR1:
                logger.info("SIGUSR1: reopening log files.")
                reopen_log_files()
                for worker in self.workers.values():
                    _signal(worker.pid, signal.SIGUSR1)
            elif sig == signal.SIGTTIN and not self.stopping:
                self.target += 1
                logger.info("SIGTTIN: %d workers", self.target)
                self._spawn()
            elif sig == signal.SIGTTOU and not self.stopping:
                if self.target > 1:
                    self.target -= 1
                    logger.info("SIGTTOU: %d workers", self.target)
                    self._retire(sorted(self._serving(), key=lambda w: w.started_at)[-1:])

    def _stop(self, sig: int, drain: bool = False, now: bool = False) -> None:
        """SIGTERM / SIGINT, or (`drain`) a --drain-path request a worker passed on: every
        worker drains, going on accepting for --shutdown-delay / --drain-delay first
        (`now`: a worker failed to start, nothing waits)."""
        if self.stopping:
            if sig == signal.SIGINT:  # a second Ctrl+C: no more waiting
                logger.warning("Second interrupt: killing workers.")
                self._kill_all(signal.SIGKILL)
            return
        self.stopping = True
        if drain:
            logger.info("Drain requested: stopping %d worker(s).", len(self.workers))
        else:
            logger.info("Received %s: stopping %d worker(s).", signal.Signals(sig).name, len(self.workers))
        config = self.config
        delay = config.drain_delay if drain else config.shutdown_delay if sig == signal.SIGTERM and not now else 0.0
        if config.timeout_graceful_shutdown is not None:
            self.stop_deadline = time.monotonic() + delay + config.timeout_graceful_shutdown + KILL_GRACE_SECONDS
        # Each worker waits its own delay: SIGTERM (--shutdown-delay), DRAIN_SIGNAL
        # (--drain-delay), SIGINT (none).
        self._kill_all(DRAIN_SIGNAL if drain else signal.SIGINT if now or sig == signal.SIGINT else signal.SIGTERM)

    def _reload(self) -> None:
        if any(not w.ready and not w.retiring for w in self.workers.values()):
            logger.warning("SIGHUP: a reload is already in progress.")
            return
        self.generation += 1
        logger.info("SIGHUP: starting %d new worker(s); the old ones drain once these accept.", self.target)
        for _ in range(self.target):
            self._spawn()

    # ---- workers ---------------------------------------------------------------

    def _serving(self) -> list[Worker]:
        return [w for w in self.workers.values() if not w.retiring]

    def _memory_check(self) -> None:
        """--workers-max-rss: a serving worker past the limit gets a successor; once that one
        accepts, the old one drains (its requests in flight finish) and exits."""
        limit = self.config.workers_max_rss
        now = time.monotonic()
        if limit is None or now < self.next_rss_check:
            return
        self.next_rss_check = now + RSS_CHECK_SECONDS
        for worker in list(self.workers.values()):
            if not worker.ready or worker.retiring or worker.recycling or worker.generation != self.generation:
                continue
            rss = rss_bytes(worker.pid)
            if rss is None or rss <= limit * MIB:
                continue
            logger.info("Worker [%d] uses %.0f MiB, past --workers-max-rss %d: replacing it.", worker.pid,
                        rss / MIB, limit)  # fmt: skip
            worker.recycling = True
            if self._spawn(replaces=worker.pid) is None:
                worker.recycling = False  # no successor (yet): checked again next time

    def _spawn(self, replaces: int | None = None, first: bool = False) -> int | None:
        """A new worker; `first`: one of those started with the master, which (with
        --ready-path) listen before their app's startup is over."""
        used = {w.slot for w in self.workers.values()}
        slot = next(i for i in range(len(used) + 1) if i not in used)
        quic_index = self._quic_index(replaces)
        if len(used) >= METRICS_SLOTS_MAX:
            logger.error("Not starting a worker: %d are already running.", len(used))
            return None
        ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
        ping_r, ping_w = os.pipe2(os.O_CLOEXEC)
        # Signals stay blocked across the fork until the child has dropped the master's
        # handlers: a SIGTERM in between would otherwise be queued for a loop it never runs.
        signal.pthread_sigmask(signal.SIG_BLOCK, MASTER_SIGNALS)
        try:
            pid = os.fork()
        except OSError as exc:  # out of processes or memory: try again later
            signal.pthread_sigmask(signal.SIG_UNBLOCK, MASTER_SIGNALS)
            for fd in (ready_r, ready_w, ping_r, ping_w):
                os.close(fd)
            logger.error("Could not start a worker: %s; retrying in %.0fs.", exc, BACKOFF_MAX_SECONDS)
            self.respawn_at = time.monotonic() + BACKOFF_MAX_SECONDS
            return None
        if pid != 0:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, MASTER_SIGNALS)
        if pid == 0:  # the worker
            os.close(ready_r)
            os.close(ping_w)
            code = 1
            try:
                code = self._worker_main(slot, ready_w, ping_r, first, quic_index)
            except BaseException:
                logger.exception("Worker failed")
            finally:
                os._exit(code)
        os.close(ready_w)
        os.close(ping_r)
        self.workers[pid] = Worker(pid, slot, self.generation, ready_r, time.monotonic(), ping_fd=ping_w,
                                   replaces=replaces, quic_index=quic_index)  # fmt: skip
        return pid

    def _quic_index(self, replaces: int | None) -> int:
        """--http3: which UDP socket a new worker serves. A successor takes its
        predecessor's (the connection IDs the old one issued name it); otherwise the first
        that no serving worker of this generation holds (a reload's new workers share the
        old ones' sockets until those drain)."""
        if replaces is not None and replaces in self.workers:
            return self.workers[replaces].quic_index
        held = {w.quic_index for w in self._serving() if w.generation == self.generation}
        return next((i for i in range(self.target) if i not in held), 0)

    def _worker_main(self, slot: int, ready_w: int, ping_r: int, first: bool, quic_index: int = 0) -> int:
        master_pid = os.getppid()
        _core.set_parent_death_signal(signal.SIGTERM)
        if os.getppid() != master_pid:  # the master died before the request above took effect
            return 0
        signal.set_wakeup_fd(-1)
        for sig in MASTER_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        # Meant for the master; SIGUSR1 until the server installs its own (to reopen log files).
        for sig in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, MASTER_SIGNALS)
        for other in self.workers.values():
            for fd in (other.ready_fd, other.ping_fd):
                if fd >= 0:
                    os.close(fd)
        self.workers.clear()
        _answer_pings(ping_r, ready_w)
        from zigcorn.server import Server

        set_title(f"zigcorn: worker [{slot + 1}]")
        listener = self.listener
        if listener is None:  # --reuse-port: each worker binds its own socket
            listener = bind(self.config, reuse_port=True)
            config = self.config
            if wants_privilege_drop(config):
                try:
                    drop_privileges(config.user, config.group, config.umask)
                except OSError as exc:
                    logger.error("%s", exc)
                    return STARTUP_FAILURE
        # --drain-path: a drain request to any worker stops the whole server, through the
        # master, which passes it on to every worker (DRAIN_SIGNAL).
        server = Server(self.config, listener, on_ready=lambda: os.write(ready_w, b"r"), metrics_slot=slot,
                        on_drain=lambda: os.write(ready_w, b"d"), listen_early=first, drain_signal=True,
                        quic=(self.quic, quic_index) if self.quic is not None else None)  # fmt: skip
        try:
            server.run()
        except KeyboardInterrupt:
            pass
        return 0 if server.started else STARTUP_FAILURE

    def _on_ready_message(self, fd: int) -> None:
        worker = next((w for w in self.workers.values() if w.ready_fd == fd), None)
        try:
            data = os.read(fd, 16)
        except OSError:
            data = b""
        if worker is None:
            return
        if not data:  # the worker is gone; _reap tells why
            os.close(fd)
            worker.ready_fd = -1
            return
        if b"p" in data:
            worker.ping_sent_at = None
            worker.last_pong = time.monotonic()
        if b"d" in data:
            self._stop(signal.SIGTERM, drain=True)
        if worker.ready or b"r" not in data:
            return
        worker.ready = True
        if worker.replaces is not None:
            old = self.workers.get(worker.replaces)
            worker.replaces = None
            if old is not None and not old.retiring:
                logger.info("Worker [%d] accepts: worker [%d] drains and exits.", worker.pid, old.pid)
                self._retire([old])
            return
        if all(w.ready for w in self.workers.values() if w.generation == self.generation):
            self._retire([w for w in self._serving() if w.generation < self.generation])

    def _retire(self, workers: list[Worker]) -> None:
        """Workers whose successors accept (SIGHUP, --workers-max-rss, SIGTTOU) drain now:
        SIGINT, which skips --shutdown-delay, so the old ones stop accepting at once and
        the health and ready probes meet the new ones, not a worker saying 503."""
        for worker in workers:
            worker.retiring = True
            _signal(worker.pid, signal.SIGINT)

    def _kill_all(self, sig: int) -> None:
        for worker in self.workers.values():
            worker.retiring = True
            _signal(worker.pid, sig)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = self.workers.pop(pid, None)
            if worker is None:
                continue
            if worker.replaces is not None and worker.replaces in self.workers:
                self.workers[worker.replaces].recycling = False  # it died first: the old one serves on
            for fd in (worker.ready_fd, worker.ping_fd):
                if fd >= 0:
                    os.close(fd)
            self._after_exit(worker, status)

    def _after_exit(self, worker: Worker, status: int) -> None:
        if self.config.metrics_path:
            _core.metrics_retire(worker.slot, not (worker.retiring or self.stopping))
        if worker.retiring or self.stopping:
            logger.info("Worker [%d] stopped.", worker.pid)
            return
        reason = _describe(status)
        if not worker.ready and os.waitstatus_to_exitcode(status) == STARTUP_FAILURE:
            logger.error("Worker [%d] failed to start (%s): stopping.", worker.pid, reason)
            self.exit_code = STARTUP_FAILURE
            self._stop(signal.SIGTERM, now=True)
            return
        # A clean exit (--limit-max-requests) is routine, however soon it comes.
        crashed = os.waitstatus_to_exitcode(status) != 0
        young = time.monotonic() - worker.started_at < CRASH_AGE_SECONDS
        self.crashes = self.crashes + 1 if crashed and young else 0
        delay = 0.0 if not self.crashes else min(BACKOFF_FIRST_SECONDS * 2 ** (self.crashes - 1), BACKOFF_MAX_SECONDS)
        logger.warning("Worker [%d] %s; starting a new one in %.1fs.", worker.pid, reason, delay)
        when = time.monotonic() + delay
        self.respawn_at = when if self.respawn_at is None else min(self.respawn_at, when)

    def _health_check(self) -> None:
        """--timeout-worker-healthcheck: each serving worker answers a ping a second; one
        that does not answer in time (stopped, or stuck holding the GIL) is killed and
        replaced, as uvicorn does."""
        now = time.monotonic()
        timeout = self.config.timeout_worker_healthcheck
        for worker in list(self.workers.values()):
            if not worker.ready or worker.retiring or worker.ping_fd < 0:
                continue
            if worker.ping_sent_at is not None:
                if now - worker.ping_sent_at > timeout:
                    logger.warning("Worker [%d] did not answer a health check within %gs: killing it.",
                                   worker.pid, timeout)
                    worker.ping_sent_at = None
                    _signal(worker.pid, signal.SIGKILL)
            elif now - worker.last_pong >= PING_INTERVAL_SECONDS:
                try:
                    os.write(worker.ping_fd, b"p")
                    worker.ping_sent_at = now
                except OSError:
                    pass  # gone: _reap tells why

    def _top_up(self) -> None:
        missing = self.target - sum(1 for w in self._serving() if w.generation == self.generation)
        for _ in range(missing):
            self._spawn()


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        hint = " (out of memory?)" if sig == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    code = os.WEXITSTATUS(status)
    return "exited normally (--limit-max-requests?)" if code == 0 else f"exited with code {code}"


def _answer_pings(ping_r: int, ready_w: int) -> None:
    """In a worker: a thread answers the master's health-check pings while the process lives."""
    import threading

    def pong() -> None:
        try:
            while os.read(ping_r, 64):
                os.write(ready_w, b"p")
        except OSError:
            pass

    threading.Thread(target=pong, name="zigcorn-healthcheck", daemon=True).start()


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def run_master(config) -> None:
    sys.exit(Master(config).run())

