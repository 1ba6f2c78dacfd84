"""asyncio without ``ssl`` and ``inspect`` until first use (``zigcorn.lazy_asyncio``), and
both working exactly as before once something does use them.

The server under test runs its default loop (zigcorn's own) and ``--loop asyncio``, where
the deferral applies: neither module is imported after startup (nor uvloop); an app that later makes TLS connections through asyncio
(``open_connection(ssl=...)``, ``start_tls``) gets working ones, and asyncio's
inspect-backed helpers answer as usual. Also checked in a fresh interpreter.

From CPython 3.14 asyncio needs ``inspect`` while it imports (``asyncio.graph`` uses
``dataclasses``, which uses ``inspect``; 3.14's ``logging`` imports it as well): every
process with asyncio has ``inspect`` (and ``ast``, ``dis``), so only the ``ssl`` deferral
is checked there.
"""

import signal
import socket
import ssl
import subprocess
import sys
import threading

import httpx
import pytest

from tests.support.harness import ROOT, zigcorn_only
from tests.support.tools import require_module

trustme = require_module("trustme")
pytestmark = [zigcorn_only, pytest.mark.every_python]
# The default (zigcorn's own loop, no flag) and asyncio's loop: both defer ssl and inspect.
LOOPS = pytest.mark.parametrize("loop_args", [(), ("--loop", "asyncio")], ids=["default", "asyncio"])
#: Whether ``inspect`` can be kept out at all: 3.14's asyncio needs it (see above).
INSPECT_DEFERRED = sys.version_info < (3, 14)


@pytest.fixture(scope="module")
def tls_echo(tmp_path_factory):
    """A TLS server on a thread answering each line with ``pong:<line>``; yields (port, ca_file)."""
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    ca_file = tmp_path_factory.mktemp("lazyssl") / "ca.pem"
    ca_file.write_bytes(ca.cert_pem.bytes())
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def handle(raw):
        raw.settimeout(5)
        try:
            with ctx.wrap_socket(raw, server_side=True) as conn:
                line = conn.recv(100)
                conn.sendall(b"pong:" + line)
        except OSError:
            raw.close()

    def serve():
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=handle, args=(raw,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], str(ca_file)
    stop.set()
    thread.join(2)
    listener.close()


@LOOPS
def test_server_starts_without_ssl_and_tls_works_when_used(start_server, tls_echo, loop_args):
    port, ca = tls_echo
    server = start_server("tls_client:app", *loop_args)
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert client.get("/ssl-loaded").text == "no"
        assert client.get("/inspect-loaded").text == ("no" if INSPECT_DEFERRED else "yes")
        assert client.get("/fetch", params={"port": port, "ca": ca}).text == "pong:ping"
        assert client.get("/ssl-loaded").text == "yes"
        assert client.get("/start-tls", params={"port": port, "ca": ca}).text == "pong:ping"
        assert client.get("/fetch", params={"port": port, "ca": ca}).text == "pong:ping"
        # asyncio.iscoroutinefunction goes through inspect: loaded now, and right.
        assert client.get("/iscoroutinefunction").text == "True False"
        assert client.get("/inspect-loaded").text == "yes"


@LOOPS
def test_a_serving_process_skips_what_only_start_up_would_need(start_server, loop_args):
    """Regression guard for the start-up imports that were cut (each a few hundred KiB):
    argparse's shutil (and zlib, bz2, lzma), platform for --version, dataclasses (which
    imports inspect), and with them ast and dis; and uvloop, which the default loop is not."""
    server = start_server("tls_client:app", *loop_args)
    with httpx.Client(base_url=server.url, timeout=10) as client:
        modules = ("shutil", "bz2", "lzma", "platform", "ssl", "uvloop")
        if INSPECT_DEFERRED:
            modules += ("dataclasses", "inspect", "ast", "dis")
        for module in modules:
            assert client.get(f"/{module}-loaded").text == "no", module


@LOOPS
def test_signals_still_stop_the_server_without_inspect(start_server, loop_args):
    """SIGTERM and SIGINT are handled without ``loop.add_signal_handler`` (which loads inspect)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        server = start_server("tls_client:app", *loop_args)
        with httpx.Client(base_url=server.url, timeout=10) as client:
            assert client.get("/inspect-loaded").text == ("no" if INSPECT_DEFERRED else "yes")
        server.proc.send_signal(sig)
        assert server.proc.wait(timeout=10) == 0
        assert "Finished server process" in server.output()


SNIPPET = r"""
import sys
from zigcorn.lazy_asyncio import deferred, import_asyncio

asyncio = import_asyncio()
assert "ssl" not in sys.modules and deferred("ssl")
INSPECT_DEFERRED = sys.version_info < (3, 14)  # 3.14's asyncio uses inspect as it imports
assert ("inspect" not in sys.modules and deferred("inspect")) or not INSPECT_DEFERRED
from asyncio import base_events, coroutines, selector_events, sslproto, tasks

import inspect  # likewise: the real module, while asyncio keeps its stand-in
assert type(inspect).__name__ == "module" and deferred("inspect") == INSPECT_DEFERRED

async def coro():
    pass

assert asyncio.iscoroutinefunction(coro) and not asyncio.iscoroutinefunction(print)
assert not deferred("inspect") and coroutines.inspect is inspect and tasks.inspect is inspect

import ssl  # an ordinary import elsewhere is the real module
assert type(ssl).__name__ == "module" and hasattr(ssl, "SSLContext")
assert deferred()  # importing is not using: asyncio still holds the stand-in

port, ca = int(sys.argv[1]), sys.argv[2]

async def main():
    ctx = ssl.create_default_context(cafile=ca)
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
    writer.write(b"ping\n")
    await writer.drain()
    reply = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return reply

assert asyncio.run(main()) == b"pong:ping\n"
assert not deferred()
assert base_events.ssl is ssl and selector_events.ssl is ssl and sslproto.ssl is ssl
assert sslproto.SSLAgainErrors == (ssl.SSLWantReadError, ssl.SSLSyscallError)
print("ok")
"""


def test_lazy_imports_in_a_fresh_interpreter(tls_echo):
    port, ca = tls_echo
    result = subprocess.run(
        [sys.executable, "-c", SNIPPET, str(port), ca], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_no_deferral_once_ssl_or_asyncio_is_imported():
    snippet = (
        "import sys, ssl\n"
        "from zigcorn.lazy_asyncio import deferred, import_asyncio\n"
        "import_asyncio()\n"
        "from asyncio import base_events\n"
        "assert not deferred() and base_events.ssl is ssl\n"
    )
    result = subprocess.run([sys.executable, "-c", snippet], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
