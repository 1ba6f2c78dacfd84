"""zigcorn's own asyncio event loop (``--loop zigcorn``).

`Loop` is asyncio's selector event loop with its scheduler replaced by the engine's
(`zigcorn._core.LoopCore`): the ready queue, the timer heap, ``call_soon``,
``call_later``/``call_at``, ``call_soon_threadsafe`` (an eventfd), ``time``,
``create_future``, the handles and the pass (``_run_once``) are native, and a server's
engine is driven from inside that pass instead of through an ``add_reader`` callback.
Everything else (sockets, ``sock_*``, streams, TLS, subprocesses, signals, executors,
DNS, ``shutdown_asyncgens``, exception handlers) is asyncio's own code, unchanged, so it
behaves as asyncio does. Debug mode uses asyncio's Python handles, with their source
tracebacks and slow-callback warnings.

Use it outside the server like uvloop: ``asyncio.run(main(), loop_factory=zigcorn.loop.new_event_loop)``
(3.12+) or ``asyncio.Runner(loop_factory=zigcorn.loop.new_event_loop)`` (3.11+). The
policy, ``asyncio.set_event_loop_policy(zigcorn.loop.EventLoopPolicy())``, is there for
3.11-3.13 code: event loop policies are deprecated from 3.14 (to go in 3.16), where
``set_event_loop_policy`` warns. Importing this module touches none of asyncio's
deprecated names (it subclasses the class behind ``asyncio.DefaultEventLoopPolicy``).
"""

from __future__ import annotations

import asyncio
import functools
import selectors
import sys
import types
from asyncio import base_events, base_tasks, events, format_helpers, futures, tasks, unix_events
from asyncio.log import logger

from zigcorn._core import Handle, LoopCore, TaskCore, TimerHandle

_EPOLLIN = 0x001
_EPOLLOUT = 0x004
_CALLBACK_SOURCE_HAS_DEBUG = "debug" in format_helpers._format_callback_source.__code__.co_varnames


def _callback_source(handle, debug: bool) -> str:
    if _CALLBACK_SOURCE_HAS_DEBUG:
        return format_helpers._format_callback_source(handle._callback, handle._args, debug=debug)
    return format_helpers._format_callback_source(handle._callback, handle._args)


class Loop(LoopCore, asyncio.SelectorEventLoop):
    """An asyncio event loop whose scheduler is zigcorn's engine (Linux, epoll)."""

    # What create_task makes (without a task factory): None for asyncio's Task as the loop
    # is made (read then, not at import: CPython's tests swap in the pure-Python Task);
    # tests of zigcorn's own Task set it on a subclass (tests/support/task_suite.py).
    _zc_task_type = None

    def __init__(self, selector: selectors.EpollSelector | None = None) -> None:
        if selector is None:
            selector = selectors.EpollSelector()
        elif not isinstance(selector, selectors.EpollSelector):
            raise TypeError("zigcorn's loop waits on an epoll set: selector must be a selectors.EpollSelector")
        super().__init__(selector)
        task_type = self._zc_task_type or tasks.Task
        self._zc_setup(selector._selector.fileno(), futures.Future, self._clock_resolution, task_type)

    def close(self) -> None:
        super().close()
        if self.is_closed():
            self._zc_close()

    # With a task factory or in debug mode, create_task is asyncio's own.
    _zc_create_task = base_events.BaseEventLoop.create_task

    # --- called by the native pass -----------------------------------------------------

    def _zc_process_fds(self, ready: list[tuple[int, int]]) -> None:
        """Third-party descriptors the pass found ready: as asyncio's EpollSelector.select
        maps epoll's bits, then asyncio's own `_process_events`."""
        key_from_fd = self._selector._fd_to_key.get
        event_list = []
        for fd, bits in ready:
            mask = 0
            if bits & ~_EPOLLIN:
                mask |= selectors.EVENT_WRITE
            if bits & ~_EPOLLOUT:
                mask |= selectors.EVENT_READ
            key = key_from_fd(fd)
            if key:
                event_list.append((key, mask & key.events))
        self._process_events(event_list)

    def _zc_callback_error(self, handle, exc: BaseException) -> None:
        """A native handle's callback raised: as asyncio's Handle._run reports it."""
        context = {
            "message": f"Exception in callback {_callback_source(handle, self.get_debug())}",
            "exception": exc,
            "handle": handle,
        }
        self.call_exception_handler(context)

    def _zc_handle_repr(self, handle) -> str:
        info = [type(handle).__name__]
        if handle._cancelled:
            info.append("cancelled")
        if isinstance(handle, TimerHandle):
            info.insert(2 if handle._cancelled else 1, f"when={handle._when}")
        if handle._callback is not None:
            info.append(_callback_source(handle, self.get_debug()))
        return "<{}>".format(" ".join(info))

    # --- debug mode: asyncio's checks and its Python handles -------------------------------

    def _zc_call_soon_debug(self, callback, args, context, method="call_soon"):
        if method == "call_soon":  # call_soon_threadsafe may come from any thread
            self._check_thread()
        self._check_callback(callback, method)
        handle = events.Handle(callback, args, self, context)
        if handle._source_traceback:
            del handle._source_traceback[-1]
        self._add_callback(handle)
        return handle

    # A partial adds no Python frame: the source traceback's depth stays right.
    _zc_call_soon_threadsafe_debug = functools.partialmethod(_zc_call_soon_debug, method="call_soon_threadsafe")

    if hasattr(events, "_ThreadSafeHandle"):  # 3.14+, and 3.12/3.13 patch releases

        def call_soon_threadsafe(self, callback, *args, context=None):
            """As asyncio's: the handle is an ``asyncio.events._ThreadSafeHandle``, whose
            lock makes a ``cancel()`` from another thread wait for a callback already
            running, and keeps one that lost the race from running at all."""
            self._check_closed()
            if self.get_debug():
                self._check_callback(callback, "call_soon_threadsafe")
            handle = events._ThreadSafeHandle(callback, args, self, context)
            if handle._source_traceback:  # this frame and _ThreadSafeHandle.__init__'s
                del handle._source_traceback[-2:]
            self._add_callback(handle)
            self._write_to_self()
            return handle

    def _zc_call_at_debug(self, when, callback, args, context):
        self._check_thread()
        self._check_callback(callback, "call_at")
        timer = events.TimerHandle(when, callback, args, self, context)
        if timer._source_traceback:
            del timer._source_traceback[-1]
        self._zc_push_timer(timer)
        return timer

    def _zc_run_debug(self, handle) -> None:
        try:
            self._current_handle = handle
            t0 = self.time()
            handle._run()
            dt = self.time() - t0
            if dt >= self.slow_callback_duration:
                logger.warning("Executing %s took %.3f seconds", base_events._format_handle(handle), dt)
        finally:
            self._current_handle = None
            # A traceback's frames keep this frame alive: it must not keep the handle
            # (and whatever its callback holds) alive with it.
            handle = None


class Task(TaskCore):
    """A task run by the engine (`_core.TaskCore`: the steps, cancellation, callbacks,
    result): asyncio's Task protocol, for request coroutines on zigcorn's loop with
    ``--task-impl zigcorn``. Only ``isinstance(t, asyncio.Task)`` tells it apart. The
    methods here are the rarely called ones, asyncio's own helpers."""

    __slots__ = ()
    __class_getitem__ = classmethod(types.GenericAlias)

    def __repr__(self) -> str:
        if hasattr(base_tasks, "_task_repr"):  # 3.12+
            return base_tasks._task_repr(self)
        return "<{} {}>".format(self.__class__.__name__, " ".join(base_tasks._task_repr_info(self)))

    def get_stack(self, *, limit=None):
        return base_tasks._task_get_stack(self, limit)

    def print_stack(self, *, limit=None, file=None):
        return base_tasks._task_print_stack(self, limit, file)


class _WithZigcornTasks:
    """asyncio's own registry of tasks (the set ``asyncio.tasks.all_tasks()`` reads), with
    the pending tasks of zigcorn's native registry added to what iterating it yields.
    Everything else is the wrapped set's."""

    __slots__ = ("_inner",)

    def __init__(self, inner) -> None:
        self._inner = inner

    def __iter__(self):
        yield from list(self._inner)
        yield from TaskCore._zc_live()

    def __len__(self) -> int:
        return len(self._inner) + len(TaskCore._zc_live())

    def __getattr__(self, name):
        return getattr(self._inner, name)


def use_native_registry() -> bool:
    """zigcorn's Tasks skip asyncio's `_register_task` (a WeakSet entry per task) and link
    into the engine's registry, which ``asyncio.all_tasks()`` reads through
    `_WithZigcornTasks`. On 3.11-3.13 only, where ``all_tasks`` is Python code reading a
    module global (3.11 ``_all_tasks``, 3.12/3.13 ``_eager_tasks``); from 3.14 it is C, and
    tasks keep registering with asyncio. True when on."""
    if sys.version_info >= (3, 14):
        return False
    name = "_all_tasks" if sys.version_info < (3, 12) else "_eager_tasks"
    current = getattr(tasks, name)
    if not isinstance(current, _WithZigcornTasks):
        setattr(tasks, name, _WithZigcornTasks(current))
    TaskCore._zc_native_registry(True)
    return True


def new_event_loop() -> Loop:
    """A new zigcorn loop (a loop factory for ``asyncio.run``/``asyncio.Runner``)."""
    return Loop()


class EventLoopPolicy(unix_events._UnixDefaultEventLoopPolicy):
    """asyncio's default policy, making zigcorn loops. Policies are deprecated from Python
    3.14 (asyncio.set_event_loop_policy warns there): use ``loop_factory=new_event_loop``."""

    def _loop_factory(self) -> Loop:  # type: ignore[override]
        return Loop()


__all__ = ["EventLoopPolicy", "Handle", "Loop", "Task", "TimerHandle", "new_event_loop"]
