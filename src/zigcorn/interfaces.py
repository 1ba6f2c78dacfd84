"""The app interfaces zigcorn serves, each adapted to the ASGI 3 callable the engine calls:
ASGI 3 as is and ASGI 2 (``app(scope)`` then ``instance(receive, send)``); a WSGI app is
left as it is, for ``zigcorn.protocols.wsgi``. ``--interface auto`` tells ASGI 2 from 3 as uvicorn does.
"""

from __future__ import annotations

_CO_COROUTINE = 0x80  # code flag of an `async def` function (what inspect would check)


def _is_async(function) -> bool:
    code = getattr(getattr(function, "__func__", function), "__code__", None)
    return code is not None and bool(code.co_flags & _CO_COROUTINE)


def adapt(app, interface: str):
    """The app as an ASGI 3 callable. `auto` treats a class, or a plain (not async)
    function or `__call__`, as ASGI 2 (uvicorn's rule); anything it cannot tell is ASGI 3."""
    if interface == "auto":
        if isinstance(app, type):
            interface = "asgi3" if hasattr(app, "__await__") else "asgi2"
        elif hasattr(app, "__code__"):
            interface = "asgi3" if _is_async(app) else "asgi2"
        else:
            call = getattr(type(app), "__call__", None)
            interface = "asgi2" if hasattr(call, "__code__") and not _is_async(call) else "asgi3"
    if interface == "asgi2":
        return _ASGI2(app)
    # "wsgi": the app is called as is, by zigcorn.protocols.wsgi's threads (the server picks that dispatcher).
    return app


class _ASGI2:
    """An ASGI 2 app (``app(scope)`` returns a coroutine-callable instance) as ASGI 3."""

    __slots__ = ("app",)

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        instance = self.app(scope)
        await instance(receive, send)
