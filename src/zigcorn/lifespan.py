"""The ASGI lifespan protocol, run from the server's coroutine.

The app's lifespan handler runs as one long task: it receives
``lifespan.startup``, answers, then waits (typically holding resources open)
until ``lifespan.shutdown``. `startup()` and `shutdown()` each send one event
and wait for the answer, or for the task to end.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

logger = logging.getLogger("zigcorn.error")

_ALLOWED_REPLIES = {
    # reply type -> the event it answers
    "lifespan.startup.complete": "startup",
    "lifespan.startup.failed": "startup",
    "lifespan.shutdown.complete": "shutdown",
    "lifespan.shutdown.failed": "shutdown",
}


class LifespanOn:
    """Runs the app's lifespan handler, with uvicorn's rules for failures.

    With ``lifespan="auto"`` an app that raises before finishing startup is taken
    not to speak the protocol: logged at info, and the server carries on without
    it. With ``lifespan="on"`` the same is an error and `should_exit` is set.
    A ``*.failed`` reply, or an exception once startup has completed, is an
    error in either mode. The server itself logs "Waiting for application
    startup." and "Application startup complete."; this class logs the rest.
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        self.state: dict[str, Any] = {}  # scope["state"]; requests get shallow copies
        self.should_exit = False  # startup failed: the server must exit non-zero

        self._events: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        self._startup_done = asyncio.Event()
        self._shutdown_done = asyncio.Event()
        self._startup_failed = False
        self._shutdown_failed = False
        self._app_errored = False  # the app raised: its handler is gone
        self._task: asyncio.Task[None] | None = None  # strong ref, or the task may be collected

    async def startup(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._main())
        await self._events.put({"type": "lifespan.startup"})
        await self._startup_done.wait()
        if self._startup_failed or (self._app_errored and self.config.lifespan == "on"):
            logger.error("Application startup failed. Exiting.")
            self.should_exit = True

    async def shutdown(self) -> None:
        if self._app_errored:
            return  # the handler is gone; there is nobody to tell
        logger.info("Waiting for application shutdown.")
        await self._events.put({"type": "lifespan.shutdown"})
        await self._shutdown_done.wait()
        # Raising here is a failure in "auto" mode too: startup proved the protocol is supported.
        if self._shutdown_failed or self._app_errored:
            logger.error("Application shutdown failed. Exiting.")
            self.should_exit = True
        else:
            logger.info("Application shutdown complete.")

    async def _main(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        try:
            await self.config.loaded_app(scope, self._receive, self._send)
        except BaseException as exc:  # noqa: BLE001 - whatever the app raises, the server decides
            self._app_errored = True
            if self._startup_failed or self._shutdown_failed:
                pass  # the app already said what went wrong
            elif self.config.lifespan == "auto" and not self._startup_done.is_set():
                logger.info("ASGI 'lifespan' protocol appears unsupported.")
            else:
                logger.error("Exception in 'lifespan' protocol\n", exc_info=exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            # Whatever happened, nobody may stay waiting on a handler that has ended.
            self._startup_done.set()
            self._shutdown_done.set()

    async def _receive(self) -> dict[str, str]:
        return await self._events.get()

    async def _send(self, message: dict[str, Any]) -> None:
        message_type = message["type"]
        phase = _ALLOWED_REPLIES.get(message_type)
        if phase is None:
            raise RuntimeError(f"Unexpected ASGI message '{message_type}' sent, in the 'lifespan' protocol.")
        if phase == "startup":
            if self._startup_done.is_set():
                raise RuntimeError(f"Got '{message_type}' after startup was already answered.")
            self._startup_failed = message_type == "lifespan.startup.failed"
        else:
            if not self._startup_done.is_set():
                raise RuntimeError(f"Got '{message_type}' before startup was answered.")
            if self._shutdown_done.is_set():
                raise RuntimeError(f"Got '{message_type}' after shutdown was already answered.")
            self._shutdown_failed = message_type == "lifespan.shutdown.failed"
        if message_type.endswith(".failed") and message.get("message"):
            logger.error(message["message"])
        (self._startup_done if phase == "startup" else self._shutdown_done).set()


class LifespanOff:
    """``lifespan="off"``: the app never sees a lifespan scope."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.state: dict[str, Any] = {}
        self.should_exit = False

    async def startup(self) -> None:
        pass

    async def shutdown(self) -> None:
        pass
