"""An app that is a TLS client through asyncio, importing ``ssl`` only when asked to.

``/<module>-loaded`` (``/ssl-loaded``, ``/inspect-loaded``...): whether that module is
imported in the server process (``yes``/``no``).
``/iscoroutinefunction``: ``asyncio.iscoroutinefunction`` of this app and of ``print``.
``/fetch?port=N&ca=PATH``: opens an asyncio TLS connection to 127.0.0.1:N trusting the
CA in PATH, sends ``ping`` and answers with what came back.
``/start-tls?port=N&ca=PATH``: the same, but connects in plain TCP and upgrades with
``start_tls``.
"""

import asyncio
import sys
from urllib.parse import parse_qs


async def _roundtrip(port: int, ca: str, upgrade: bool) -> bytes:
    import ssl  # late, on purpose

    ctx = ssl.create_default_context(cafile=ca)
    if upgrade:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await writer.start_tls(ctx, server_hostname="localhost")
    else:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
    writer.write(b"ping\n")
    await writer.drain()
    reply = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return reply.strip()


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
    if scope["path"].endswith("-loaded"):
        body = b"yes" if scope["path"][1:-7] in sys.modules else b"no"
    elif scope["path"] == "/iscoroutinefunction":
        body = f"{asyncio.iscoroutinefunction(app)} {asyncio.iscoroutinefunction(print)}".encode()
    else:
        body = await _roundtrip(int(query["port"]), query["ca"], upgrade=scope["path"] == "/start-tls")
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
