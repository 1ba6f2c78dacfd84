"""The ASGI and WSGI sides of what the engine serves: HTTP (`http`), WebSocket
(`websocket`), WSGI (`wsgi`), and the preamble each request passes first (`admission`)."""
