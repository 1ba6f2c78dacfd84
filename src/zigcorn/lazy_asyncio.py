"""Import asyncio without importing ``ssl`` or ``inspect`` until something uses them.

``import asyncio`` imports ``ssl``, which maps OpenSSL's libcrypto (about 4.5 MiB), and
``inspect``, which brings ``ast`` and ``dis`` (about 1 MiB). A server process may never
use either: zigcorn's TLS is the engine's, and asyncio calls ``inspect`` only from
functions such as ``iscoroutinefunction`` and task repr, never while it imports.

So asyncio is imported with ``ssl`` blocked and ``inspect`` replaced by a stand-in. Each
asyncio module that bound one of the two names (for ``ssl``, the ones left holding
``None``; on CPython 3.11 to 3.13 ``base_events``, ``selector_events`` and ``sslproto``,
and for ``inspect`` ``coroutines``, ``format_helpers`` and ``tasks``) then holds a
stand-in whose first attribute lookup imports the real module and rebinds every one of
them, so later lookups cost nothing. ``sslproto`` derives ``SSLAgainErrors`` from ``ssl``;
no SSL transport can exist before ``ssl`` is loaded, and loading it sets the real tuple.

Anything that uses TLS through asyncio (``open_connection(ssl=...)``, ``start_tls``, an
HTTPS client, a database driver) or an inspect-backed helper goes through one of those
lookups first, so it works exactly as with an eager import, one import later. An
``import ssl`` or ``import inspect`` anywhere else is untouched: ``sys.modules`` is
restored as soon as asyncio is imported.

From CPython 3.14 asyncio itself needs ``inspect`` while it imports (``asyncio.graph``
uses ``dataclasses``, which uses ``inspect``; 3.14's ``logging`` imports it too), so
there the real module is loaded at once and only ``ssl`` is deferred.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


class _NeverRaised(Exception):
    """``SSLAgainErrors`` until ssl loads: no SSL transport can exist before then."""


def _set_ssl_again_errors(ssl: ModuleType | None) -> None:
    sslproto = sys.modules.get("asyncio.sslproto")
    if sslproto is not None:
        sslproto.SSLAgainErrors = (ssl.SSLWantReadError, ssl.SSLSyscallError) if ssl else (_NeverRaised,)


class _Deferred:
    """Stands in for module ``name`` in the globals listed in ``bindings`` until first use."""

    __slots__ = ("name", "bindings", "on_load")
    # Answers the import system's ``module.__spec__`` check itself: ``import inspect`` while
    # the stand-in sits in ``sys.modules`` must bind it, not load the real module.
    __spec__ = None

    def __init__(self, name: str, on_load=None) -> None:
        self.name = name
        self.bindings: list[tuple[ModuleType, str]] = []
        self.on_load = on_load

    def __getattr__(self, attribute: str):
        return getattr(self.load(), attribute)

    def __repr__(self) -> str:
        return f"<{self.name}, imported on first use (zigcorn)>"

    def load(self) -> ModuleType:
        if sys.modules.get(self.name) is self:  # first used while asyncio was being imported
            del sys.modules[self.name]
        module = importlib.import_module(self.name)  # the import lock makes a racing thread wait
        for owner, attribute in self.bindings:
            if getattr(owner, attribute, None) is self:
                setattr(owner, attribute, module)
        if self.on_load is not None:
            self.on_load(module)
        return module


_STAND_INS = {"ssl": _Deferred("ssl", _set_ssl_again_errors), "inspect": _Deferred("inspect")}


def deferred(name: str = "ssl") -> bool:
    """Whether some asyncio module still holds the stand-in for ``name``."""
    stand_in = _STAND_INS[name]
    return any(getattr(owner, attribute, None) is stand_in for owner, attribute in stand_in.bindings)


def import_asyncio() -> ModuleType:
    """``import asyncio``, deferring ``ssl`` and ``inspect`` where neither is imported yet."""
    if "asyncio" in sys.modules:
        import asyncio

        return asyncio
    blocked = [name for name in _STAND_INS if name not in sys.modules]
    before = set(sys.modules)
    if "ssl" in blocked:
        sys.modules["ssl"] = None  # type: ignore[assignment]  # makes `import ssl` raise ImportError
    if "inspect" in blocked:
        sys.modules["inspect"] = _STAND_INS["inspect"]  # type: ignore[assignment]
    try:
        import asyncio
    finally:
        for name in blocked:
            if sys.modules.get(name) in (None, _STAND_INS[name]):
                sys.modules.pop(name, None)
    imported = [module for name, module in sys.modules.items() if name not in before]
    for name in blocked:
        stand_in = _STAND_INS[name]
        # ``ssl`` was None to asyncio (its modules catch the ImportError); ``inspect`` was the stand-in.
        held = None if name == "ssl" else stand_in
        # Used while asyncio was importing (3.14+: asyncio.graph's dataclasses uses inspect):
        # the real module is loaded already, and what held the stand-in gets it now.
        loaded = sys.modules.get(name) if name != "ssl" else None
        for module in imported:
            if isinstance(module, ModuleType) and name in vars(module) and vars(module)[name] is held:
                setattr(module, name, loaded or stand_in)
                if loaded is None:
                    stand_in.bindings.append((module, name))
        if name == "ssl" and stand_in.bindings:
            _set_ssl_again_errors(None)
    return asyncio
