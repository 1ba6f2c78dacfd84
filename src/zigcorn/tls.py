"""Where the engine's OpenSSL comes from: loaded at run time (HTTPS only), so a plain
HTTP server never maps libssl."""

from __future__ import annotations

import os

from zigcorn import _core


def load_openssl() -> str:
    """Loads OpenSSL 3 into the engine (HTTPS only) and returns its version.

    ``libssl.so.3`` as the system finds it, else the libssl Python's own ``_ssl`` module
    uses; ``ZIGCORN_LIBSSL`` names another library. Raises OSError with one line.
    """
    chosen = os.environ.get("ZIGCORN_LIBSSL")
    if chosen:
        return _core.tls_load(chosen)
    try:
        return _core.tls_load("libssl.so.3")
    except OSError as first:
        path = _python_libssl()
        if path is None:
            raise first from None
        return _core.tls_load(path)


def _python_libssl() -> str | None:
    """The libssl mapped into this process by Python's ``_ssl`` (imported only now)."""
    try:
        import _ssl  # noqa: F401  (maps Python's libssl)
    except ImportError:
        return None
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith("libssl.so"):
                return fields[5].strip()
    return None
