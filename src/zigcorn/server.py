"""The server's life: bind, lifespan, serve on the asyncio loop, drain, exit.

The engine owns every socket; this module only wires it into the loop and decides when
to stop. On zigcorn's own loop the engine is driven from inside the loop's pass; on any
other loop, through one `add_reader` on the engine's descriptor.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
import logging
import os
import signal


from zigcorn import _core, accesslog
from zigcorn.accesslog import has_log_files, reopen_log_files
from zigcorn.protocols.http import Dispatcher, HTTPCycle, wake
from zigcorn.supervisors.process import DRAIN_SIGNAL, after_bind
from zigcorn.sockets import Listener, QuicSockets, bind, bind_quic

logger = logging.getLogger("zigcorn.error")

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# At the drain's deadline, WebSockets closed with 1001 have this long for the client's
# close frame before their connections are cut.
WEBSOCKET_CLOSE_GRACE_SECONDS = 1.0


def _request_task_type(config, loop):
    """--task-impl zigcorn: `zigcorn.loop.Task` for request tasks, on zigcorn's loop only
    (asyncio's and uvloop's keep asyncio's Task); None: asyncio's Task. `auto` (the
    default) is asyncio's for now: under a SIGTERM drain at sustained load, zigcorn's task
    answered 500 to a request in about 1 run in 10 (tests/hardening/test_hardening_shutdown.py,
    3.11, where it also starts requests eagerly); it becomes the default once that is
    understood."""
    impl = getattr(config, "task_impl", "auto")
    if impl == "auto":
        impl = "asyncio"
    if impl != "zigcorn":
        return None
    from zigcorn.loop import Loop, Task, use_native_registry

    if not isinstance(loop, Loop) or loop.get_debug():
        return None
    use_native_registry()
    return Task


def _with_jitter(limit: int | None, jitter: int) -> int | None:
    """--limit-max-requests plus a random 0..jitter of this process's own (so workers part)."""
    if limit is None or jitter <= 0:
        return limit
    return limit + int.from_bytes(os.urandom(4), "big") % (jitter + 1)


def _websocket_class():
    from zigcorn.protocols.websocket import WebSocketCycle

    return WebSocketCycle


def _attach(loop, engine) -> None:
    """zigcorn's loop handles the engine's events in its own pass (and settles it at the
    end of each); another loop calls `engine.poll` when the descriptor is readable."""
    attach = getattr(loop, "_zc_attach", None)
    if attach is not None:
        attach(engine)
    else:
        loop.add_reader(engine.fileno(), engine.poll)


def _detach(loop, engine) -> None:
    detach = getattr(loop, "_zc_detach", None)
    if detach is not None:
        detach()
    else:
        loop.remove_reader(engine.fileno())


class Server:
    """One serving process. `listener` comes from a master or reload supervisor; without
    one the server binds its own socket. `on_ready` is called once it accepts."""

    def __init__(self, config, listener: Listener | None = None, on_ready=None, metrics_slot: int = 0,
                 owns_listener: bool = False, pid_file=None, on_drain=None, listen_early: bool = True,
                 drain_signal: bool = False, quic: tuple[QuicSockets, int] | None = None) -> None:  # fmt: skip
        self.config = config
        self.listener = listener
        # --http3 under a master: its UDP sockets and this worker's index among them (the
        # master keeps them open). Without one, the server binds its own single socket.
        self.quic = quic
        # True when this process bound `listener` for itself (before dropping privileges):
        # it then announces it, writes the pid file and removes a Unix socket's file.
        self.owns_listener = owns_listener or listener is None
        self.pid_file = pid_file
        # --drain-path: what an authorised drain request does (a worker asks its master).
        self.on_drain = on_drain
        # --ready-path: listen before the app's startup (not for a worker that joins others
        # already serving: it would answer their traffic with 503).
        self.listen_early = listen_early
        # Under --workers: DRAIN_SIGNAL is the master passing a drain request on.
        self.drain_signal = drain_signal
        # How long to go on accepting once the drain starts (--drain-delay, --shutdown-delay).
        self.drain_delay = 0.0
        # A worker retired while the others serve on (DRAIN_SIGNAL's sibling, SIGINT).
        self.retiring = False
        self.on_ready = on_ready
        self.metrics_slot = metrics_slot
        self.started = False
        self.should_exit = False
        self.force_exit = False
        self.engine = None
        self._exit_event: asyncio.Event | None = None
        self._previous_handlers: dict[int, object] = {}
        self._wsgi_environ: dict | None = None

    def run(self) -> None:
        loop = self.config.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.serve())
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    async def serve(self) -> None:
        config = self.config
        if not getattr(config, "loaded", False):
            config.load()
            # The app's import leaves garbage behind: collected before the lifespan's
            # objects (alive as long as the server) are allocated among it.
            gc.collect()
        loop = asyncio.get_running_loop()
        self._exit_event = asyncio.Event()
        self._install_signal_handlers(loop)
        try:
            await self._serve(config, loop)
        finally:
            self._restore_signal_handlers()

    async def _serve(self, config, loop) -> None:
        if config.is_ssl:
            # Before the app's startup: a missing library is one line and exit 3, at once.
            from zigcorn.tls import load_openssl  # HTTPS only: a plain HTTP server never loads it

            try:
                load_openssl()
            except OSError as exc:
                logger.error("%s", exc)
                return
        logger.info("Started server process [%d]", os.getpid())
        lifespan = config.lifespan_class(config)
        serving = None
        if config.ready_path is not None and self.listen_early:
            # --ready-path: the server listens from the start. Until the app's startup and
            # warm-up are over, the ready path says 503 and other requests get 503 with
            # retry-after (the health path says 200: the process is alive).
            serving = self._listen(config, loop, ready=False)
            if serving is None:
                return
        try:
            announce = config.lifespan != "off" and config.interface != "wsgi"
            if announce:
                logger.info("Waiting for application startup.")
            await lifespan.startup()
            if lifespan.should_exit:
                return
            if announce:
                logger.info("Application startup complete.")
            if getattr(config, "warmup_path", None) is not None:
                from zigcorn.warmup import warm_up

                await warm_up(config, lifespan.state)
            if serving is None:
                serving = self._listen(config, loop, ready=True)
                if serving is None:
                    await lifespan.shutdown()
                    return
            engine = serving.engine
            engine.set_state(lifespan.state)
            engine.set_ready(True)
            self.started = True
            # Startup (imports, argument parsing, the app's own setup) leaves garbage and
            # freed heap behind: collect it and give the pages back before serving.
            gc.collect()
            _core.trim_memory()
            if self.on_ready is not None:
                self.on_ready()
            await self._exit_event.wait()
            await self._shutdown(loop, engine)
            serving.closed = True
            await lifespan.shutdown()
        finally:
            if serving is not None:
                serving.close(loop)
        logger.info("Finished server process [%d]", os.getpid())

    def _listen(self, config, loop, ready: bool) -> _Serving | None:
        """The engine, serving the listener (bound here unless given): None, with the
        reason logged, when it cannot start."""
        accesslog.configure(config)
        wsgi = config.interface == "wsgi"
        # What both dispatchers take: every operations flag means the same for ASGI and WSGI apps.
        common = dict(
            access_log=bool(config.access_log) and logging.getLogger("zigcorn.access").isEnabledFor(logging.INFO),
            limit_concurrency=config.limit_concurrency,
            limit_max_requests=_with_jitter(config.limit_max_requests, config.limit_max_requests_jitter),
            reset_contextvars=config.reset_contextvars,
            timeout_request=config.timeout_request,
            on_limit=self.handle_exit_request,
            drain_path=getattr(config, "drain_path", None),
            admin_token=getattr(config, "admin_token", None),
            on_drain=self.on_drain or self.handle_drain_request,
        )
        if wsgi:
            from zigcorn.protocols.wsgi import WSGIDispatcher, default_threads

            threads = config.wsgi_threads or default_threads()
            dispatcher = WSGIDispatcher(config.loaded_app, loop, threads=threads, **common)
        else:
            dispatcher = Dispatcher(config.loaded_app, loop, task_type=_request_task_type(config, loop), **common)
        serving = _Serving(dispatcher, self.owns_listener, self.pid_file)
        listener = self.listener
        bound_here = False
        if config.http3 and self.quic is None:
            # One process: its UDP socket shares the TCP listener's port (bound now, before
            # the engine reads the socket from its options), unless --http3-port names one.
            try:
                if listener is None:
                    listener, bound_here = bind(config), True
                    serving.listener = listener
                serving.quic = bind_quic(config, listener.sock.getsockname()[1], 1)
            except OSError as exc:
                logger.error("%s", exc.strerror or exc)
                serving.close(loop)
                return None
            self.quic = (serving.quic, 0)
        try:
            engine = self._new_engine(dispatcher)
        except (OSError, ValueError, TypeError) as exc:
            # A bad certificate, key or password: one line naming which (never the key's bytes).
            logger.error("%s", exc)
            serving.close(loop)
            return None
        dispatcher.engine = engine
        serving.engine = engine
        self.engine = engine
        # The first worker says which backend serves (every worker of a host gets the same).
        backend, refused = engine.backend()
        if self.metrics_slot == 0:
            if refused:
                logger.info("io_uring is not available here (%s): serving with epoll", refused)
            else:
                logger.info("I/O backend: %s%s", backend, " (auto)" if config.io_backend == "auto" else "")
        engine.set_ready(ready)
        try:
            if self.listener is None:
                if not bound_here:
                    listener = bind(config)
                serving.pid_file = after_bind(config)
            serving.listener = listener
            bound = engine.adopt(listener.sock.detach())  # the engine owns the descriptor now
        except OSError as exc:
            logger.error("%s", exc.strerror or exc)
            serving.close(loop)
            return None
        if wsgi:
            from zigcorn.protocols.wsgi import set_server

            set_server(self._wsgi_environ, bound)
        _attach(loop, engine)
        serving.attached = True
        if serving.own_listener:
            logger.info("Zigcorn running on %s (Press CTRL+C to quit)", listener.description)
        if self.quic is not None and serving.own_listener:
            logger.info("HTTP/3 on %s", self.quic[0].description)
        return serving

    def _new_engine(self, dispatcher):
        options = self.config.engine_options()
        # Plumbing, not settings: the classes the engine instantiates, and where `settle`
        # is scheduled. The busy poll is scheduled from inside a finishing request:
        # without a context of its own it would run in that request's, and the next
        # requests' tasks would inherit its context variables.
        options["call_soon"] = functools.partial(asyncio.get_running_loop().call_soon, context=contextvars.copy_context())
        options["metrics_slot"] = self.metrics_slot
        if self.quic is not None:
            sockets, index = self.quic
            options.update(self.config.engine_http3_options(sockets.fileno(index), sockets.port, index, len(sockets)))
        if self.config.interface == "wsgi":
            from zigcorn.protocols.wsgi import environ_template

            # The engine copies this dict into each request's environ; SERVER_NAME/PORT are set once bound.
            self._wsgi_environ = options["wsgi_environ"] = environ_template(options["root_path"], self.config.workers)
            # The engine's wake(waiter) for WSGI streams: their waiters are the exchange's own
            # callbacks, run on the loop after the engine's pass, never inside it.
            return _core.Engine(dispatcher, asyncio.get_running_loop().call_soon, _core.Stream, options)
        if options["ws"]:
            # A loader, called by the engine at the first upgrade: a server that never sees
            # a WebSocket never imports zigcorn.protocols.websocket.
            options["websocket_class"] = _websocket_class
        # The plain case (most servers) is done by the engine itself: see Dispatcher.plain.
        return _core.Engine(dispatcher.plain() or dispatcher, wake, HTTPCycle, options)

    async def _shutdown(self, loop, engine) -> None:
        # The drain's start: the health and ready paths answer 503, idle keep-alive
        # connections close, busy ones after their current response, HTTP/2 ones get
        # GOAWAY. With --drain-delay / --shutdown-delay the server goes on accepting
        # and serving meanwhile, until the balancer has seen the 503 and sends no more.
        if self.retiring:
            engine.retire()  # the other workers serve on: the probes are theirs to answer
        else:
            engine.drain()
        delay = self.drain_delay
        if delay > 0:
            logger.info("Draining: health and ready paths answer 503; still accepting for %gs.", delay)
            await asyncio.sleep(delay)
        # Then no new connections. Logged after: the line says accepting has stopped.
        timeout = self.config.timeout_graceful_shutdown
        engine.stop_accepting(timeout is None)  # no deadline will come: WebSockets go now (1001)
        logger.info("Shutting down")
        deadline = None if timeout is None else loop.time() + timeout
        while engine.connections and not self.force_exit:
            if deadline is not None and loop.time() >= deadline:
                logger.error("Cancel %d running task(s), timeout graceful shutdown exceeded", engine.streams)
                # WebSockets get 1001 and a moment for the client's close frame; other
                # connections close now (streaming apps see http.disconnect).
                engine.deadline()
                end = loop.time() + WEBSOCKET_CLOSE_GRACE_SECONDS
                while engine.connections and loop.time() < end:
                    await asyncio.sleep(0.02)
                break
            await asyncio.sleep(0.05)
        # Whatever is left is cut; apps still running see http.disconnect.
        engine.close_all()
        for _ in range(20):
            if not engine.streams:
                break
            await asyncio.sleep(0.01)
        _detach(loop, engine)
        engine.poll()
        engine.close()

    def _install_signal_handlers(self, loop) -> None:
        """Plain ``signal.signal`` handlers, as uvicorn installs, put back when serving ends.

        Not ``loop.add_signal_handler``: it asks ``inspect`` whether the callback is a
        coroutine function, which would load ``inspect`` (with ``ast`` and ``dis``, about
        1 MiB) into every server. The handler runs in the main thread between bytecodes;
        a wait in the loop's selector is interrupted by the signal, so it runs at once.
        The engine's writer thread blocks signals, so they never land where no Python runs.
        """

        def on_signal(sig: int, frame) -> None:
            if self.should_exit and sig == signal.SIGINT:
                self.handle_exit(sig)  # the second Ctrl+C exits here, even with the loop stuck
            try:
                loop.call_soon_threadsafe(self.handle_exit, sig)
            except RuntimeError:  # the loop is closed: serving is over
                pass

        def on_reopen(sig: int, frame) -> None:
            try:
                loop.call_soon_threadsafe(reopen_log_files)
            except RuntimeError:
                pass

        try:
            for sig in HANDLED_SIGNALS + ((DRAIN_SIGNAL,) if self.drain_signal else ()):
                self._previous_handlers[sig] = signal.signal(sig, on_signal)
            if has_log_files():  # --access-log-file: SIGUSR1 reopens it (logrotate)
                self._previous_handlers[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, on_reopen)
        except ValueError:  # not the main thread: whoever runs us handles signals
            self._restore_signal_handlers()

    def _restore_signal_handlers(self) -> None:
        while self._previous_handlers:
            sig, handler = self._previous_handlers.popitem()
            # None: the old handler was not set from Python; the default is the nearest thing.
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def handle_exit(self, sig: int) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
            logger.warning("Second interrupt: exiting now.")
            os._exit(1)
        if sig == signal.SIGINT and self.drain_signal and not self.should_exit:
            # A worker told to go while its successors serve (the master retires it with
            # SIGINT): it drains at once, its health and ready paths still saying 200.
            self.retiring = True
        if sig == signal.SIGTERM:
            self.handle_exit_request(self.config.shutdown_delay)
        elif sig == DRAIN_SIGNAL:
            self.handle_drain_request()
        else:
            self.handle_exit_request()

    def handle_drain_request(self) -> None:
        """--drain-path (or, in a worker, the master passing one on): --drain-delay."""
        self.handle_exit_request(self.config.drain_delay)

    def handle_exit_request(self, delay: float = 0.0) -> None:
        """Shut down gracefully, accepting for `delay` seconds more (the first request's)."""
        if not self.should_exit:
            self.drain_delay = delay
        self.should_exit = True
        if self._exit_event is not None:
            self._exit_event.set()


class _Serving:
    """What serving holds, released once whatever happens: the engine (and its place on
    the loop), the listener, the pid file, the WSGI threads."""

    __slots__ = ("dispatcher", "engine", "listener", "own_listener", "pid_file", "attached", "closed", "quic")

    def __init__(self, dispatcher, own_listener: bool, pid_file) -> None:
        self.dispatcher = dispatcher
        self.engine = None
        self.listener = None
        self.own_listener = own_listener
        self.pid_file = pid_file
        self.attached = False
        self.closed = False  # the engine was shut down (`Server._shutdown`)
        self.quic: QuicSockets | None = None  # --http3's socket this process bound for itself

    def close(self, loop) -> None:
        engine = self.engine
        if engine is not None and not self.closed:
            self.closed = True
            if self.attached:
                _detach(loop, engine)
            engine.close()
        if self.quic is not None:  # after the engine, which reads it but never closes it
            self.quic.close()
            self.quic = None
        if self.own_listener and self.listener is not None:
            self.listener.remove_uds()
        if self.pid_file is not None:
            self.pid_file.remove()
            self.pid_file = None
        pool = getattr(self.dispatcher, "pool", None)
        if pool is not None:
            pool.shutdown()


__all__ = ["Server"]
