"""Reports on the request's task: its type, whether current_task() is it, its context,
and how a cancellation reaches it (tests/loop/test_own_task.py)."""

import asyncio
import contextvars
import json

request_var = contextvars.ContextVar("request_var", default="unset")


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                request_var.set("lifespan")
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    task = asyncio.current_task()
    report = {"type": f"{type(task).__module__}.{type(task).__qualname__}", "seen_before": request_var.get()}
    request_var.set(scope["path"])
    if scope["path"] == "/sleep":
        await asyncio.sleep(30)  # cut short by --timeout-request
    child = asyncio.get_running_loop().create_task(asyncio.sleep(0, result=request_var.get()))
    report["child"] = await child
    report["gather"] = await asyncio.gather(asyncio.sleep(0, result=1), asyncio.sleep(0.001, result=2))
    try:
        async with asyncio.timeout(0.001):
            await asyncio.sleep(1)
    except TimeoutError:
        report["timeout"] = task.cancelling()
    report["current_is_task"] = asyncio.current_task() is task
    report["in_all_tasks"] = task in asyncio.all_tasks()
    report["name"] = task.get_name().startswith("Task-")
    body = json.dumps(report).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
