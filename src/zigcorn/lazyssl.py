"""Import asyncio without importing ``ssl`` until something actually uses it.

``import asyncio`` imports ``ssl``, which maps OpenSSL's libcrypto: about 4.5 MiB of a
server process that may never speak TLS through asyncio (zigcorn's own TLS is the
engine's). Three asyncio modules bind the name (``base_events``, ``selector_events``,
``sslproto``) and ``sslproto`` derives ``SSLAgainErrors`` from it; nothing else in
asyncio reaches ``ssl`` except through those bindings, on CPython 3.11 to 3.13.

So asyncio is imported with ``ssl`` blocked, and those bindings then point at a stand-in
whose first attribute lookup imports the real module and rebinds all of them. Anything
that touches TLS through asyncio (``open_connection(ssl=...)``, ``start_tls``, an HTTPS
client, a database driver) goes through one of those lookups before it can need
``SSLAgainErrors``, so it works exactly as with an eager import, one import later. An
``import ssl`` anywhere else is untouched: ``sys.modules`` is restored at once.
"""

from __future__ import annotations

import sys
from types import ModuleType

_BINDERS = ("asyncio.base_events", "asyncio.selector_events", "asyncio.sslproto")


class _DeferredSSL:
    """Stands in for the ``ssl`` module inside asyncio until first use."""

    __slots__ = ()

    def __getattr__(self, name: str):
        return getattr(_load(), name)

    def __repr__(self) -> str:
        return "<ssl, imported on first use (zigcorn)>"


_STAND_IN = _DeferredSSL()


class _NeverRaised(Exception):
    """``SSLAgainErrors`` until ssl loads: no SSL transport can exist before then."""


def _rebind(current, new, again_errors: tuple) -> None:
    """Points asyncio's ``ssl`` bindings that are `current` at `new`, and sets ``SSLAgainErrors``."""
    for name in _BINDERS:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "ssl", ...) is current:
            module.ssl = new
    sslproto = sys.modules.get("asyncio.sslproto")
    if sslproto is not None:
        sslproto.SSLAgainErrors = again_errors


def _load() -> ModuleType:
    import ssl

    _rebind(_STAND_IN, ssl, (ssl.SSLWantReadError, ssl.SSLSyscallError))
    return ssl


def deferred() -> bool:
    """Whether asyncio's ssl bindings are still the stand-in."""
    module = sys.modules.get("asyncio.base_events")
    return module is not None and getattr(module, "ssl", None) is _STAND_IN


def import_asyncio() -> ModuleType:
    """``import asyncio``, deferring ``ssl`` when neither is imported yet."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        import asyncio

        return asyncio
    sys.modules["ssl"] = None  # type: ignore[assignment]  # makes `import ssl` raise ImportError
    try:
        import asyncio
    finally:
        del sys.modules["ssl"]
    _rebind(None, _STAND_IN, (_NeverRaised,))
    return asyncio
