"""ASGI WebSocket on top of the engine's streams.

The engine does the protocol (handshake checks, frames, UTF-8, pings, the close
handshake, permessage-deflate); this module is what an app sees: the websocket
scope, `receive()` with whole messages, `send()` with the ASGI messages, and the
Denial Response extension (an HTTP answer to the upgrade request).
"""

from __future__ import annotations

import asyncio
import logging

from zigcorn._core import Stream
from zigcorn.protocols.admission import ERROR_HEADERS as _ERROR_HEADERS
from zigcorn.protocols.http import access_fields

logger = logging.getLogger("zigcorn.error")
access_logger = logging.getLogger("zigcorn.access")


# Where the session is, from the app's side.
_HANDSHAKE = 0  # websocket.connect delivered or pending; no answer yet
_OPEN = 1  # accepted
_CLOSED = 2  # the app sent websocket.close (or its 403 went out)
_RESPONSE = 3  # denial response started, body pending
_DONE = 4  # denial response complete


class ClientDisconnected(OSError):
    """send() on a WebSocket whose client has gone (an OSError, as frameworks expect)."""


def _websocket_scope(scope: dict) -> dict:
    """The engine builds an HTTP scope for the upgrade request; it becomes a websocket scope here."""
    scope["type"] = "websocket"
    scope.pop("method", None)
    scope["scheme"] = "wss" if scope.get("scheme") == "https" else "ws"
    scope["asgi"] = {"version": "3.0", "spec_version": "2.4"}
    subprotocols = []
    for name, value in scope["headers"]:
        if name == b"sec-websocket-protocol":
            subprotocols += [p.strip() for p in value.decode("latin-1").split(",") if p.strip()]
    scope["subprotocols"] = subprotocols
    # The engine's extensions are HTTP's; a WebSocket keeps only TLS (on wss) and gains its own.
    extensions = {"websocket.http.response": {}}
    tls = scope.get("extensions", {}).get("tls")
    if tls is not None:
        extensions["tls"] = tls
    scope["extensions"] = extensions
    return scope


class WebSocketCycle(Stream):
    """One WebSocket session (or its refusal), as the app sees it."""

    __slots__ = ("_state", "_connect_sent", "_disconnect_seen", "_access_log")

    async def receive(self) -> dict:
        if not self._connect_sent:
            self._connect_sent = True
            return {"type": "websocket.connect"}
        message = self.ws_receive()
        while message is None:
            future = asyncio.get_running_loop().create_future()
            self.read_waiter = future
            await future
            message = self.ws_receive()
        if message["type"] == "websocket.disconnect":
            self._disconnect_seen = True
        return message

    async def send(self, message: dict) -> None:
        message_type = message["type"]
        state = self._state
        if state == _OPEN:
            if message_type == "websocket.send":
                data = message.get("text")
                if data is None:
                    data = message.get("bytes")
                    if data is None:
                        raise RuntimeError("websocket.send needs 'bytes' or 'text'.")
                    if not isinstance(data, bytes):
                        data = bytes(data)
                result = self.ws_send(data)
                if result == 1:
                    future = asyncio.get_running_loop().create_future()
                    self.write_waiter = future
                    await future
                elif result == 2:
                    raise ClientDisconnected()
            elif message_type == "websocket.close":
                self._state = _CLOSED
                self.ws_close(message.get("code", 1000), message.get("reason") or "")
            else:
                raise RuntimeError(f"Expected ASGI message 'websocket.send' or 'websocket.close', but got '{message_type}'.")
        elif state == _HANDSHAKE:
            if message_type == "websocket.accept":
                self._state = _OPEN
                self.ws_accept(message.get("subprotocol"), message.get("headers") or ())
                if self._access_log:
                    self._log_access("[accepted]")
            elif message_type == "websocket.close":
                # Closing before accepting refuses the upgrade with 403, as in uvicorn.
                self._state = _CLOSED
                self.start(403, [(b"content-type", b"text/plain; charset=utf-8")])
                self.write(b"", False)
                if self._access_log:
                    self._log_access("403")
            elif message_type == "websocket.http.response.start":
                self._state = _RESPONSE
                self.start(message["status"], message.get("headers") or ())
                if self._access_log:
                    self._log_access(str(message["status"]))
            else:
                raise RuntimeError(
                    "Expected ASGI message 'websocket.accept', 'websocket.close', or "
                    f"'websocket.http.response.start' but got '{message_type}'."
                )
        elif state == _RESPONSE:
            if message_type != "websocket.http.response.body":
                raise RuntimeError(f"Expected ASGI message 'websocket.http.response.body', but got '{message_type}'.")
            more = message.get("more_body", False)
            if not more:
                self._state = _DONE
            if self.write(message.get("body", b""), more):
                future = asyncio.get_running_loop().create_future()
                self.write_waiter = future
                await future
        else:
            if self.ws_finished:
                raise ClientDisconnected()
            raise RuntimeError(f"Unexpected ASGI message '{message_type}', after sending 'websocket.close' or response already completed.")

    async def run(self, app, access_log: bool, timeout: float | None) -> None:
        self._state = _HANDSHAKE
        self._connect_sent = False
        self._disconnect_seen = False
        self._access_log = access_log
        scope = _websocket_scope(self.scope)
        try:
            result = await app(scope, self.receive, self.send)
        except ClientDisconnected:
            # Our own send() raised it because the client had gone: an echo loop racing a
            # client's close meets it, and it is no error of the app's (nor in uvicorn).
            self._fail()
        except BaseException as exc:  # the worker must survive anything an app raises
            if not isinstance(exc, asyncio.CancelledError):
                logger.error("Exception in ASGI application\n", exc_info=exc)
            self._fail()
            if isinstance(exc, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
                raise
        else:
            if result is not None:
                logger.error("ASGI callable should return None, but returned '%s'.", result)
            if self._state == _HANDSHAKE:
                if not self.disconnected:
                    logger.error("ASGI callable returned without sending handshake.")
                self._fail()
            elif self._state == _RESPONSE:
                logger.error("ASGI callable returned without completing response.")
                self.abort()
            else:
                self.finish()

    def _fail(self) -> None:
        state = self._state
        if state == _HANDSHAKE:
            if not self.disconnected:
                try:
                    self.start(500, _ERROR_HEADERS)
                    self.write(b"Internal Server Error", False)
                except RuntimeError:
                    pass
            self.finish()
        elif state == _OPEN:
            self.ws_close(1011, "")
            self.finish()
        elif state == _RESPONSE:
            self.abort()
        else:
            self.finish()

    def _log_access(self, outcome: str) -> None:
        client_addr, path = access_fields(self.scope)
        access_logger.info('%s - "WebSocket %s" %s', client_addr, path, outcome)
