"""An app that checks it runs as a real asyncio task with its own context."""

import asyncio
import contextvars
import json

request_id = contextvars.ContextVar("request_id", default=None)


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    task = asyncio.current_task()
    leaked = request_id.get()  # a previous request's value must not be visible here
    request_id.set(scope["path"])
    await asyncio.sleep(0)  # a real suspension: the task is resumed by the loop
    body = json.dumps({
        "has_task": task is not None,
        "same_task": asyncio.current_task() is task,
        "leaked": leaked,
        "mine": request_id.get(),
        "loop": type(asyncio.get_running_loop()).__module__,
    }).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
