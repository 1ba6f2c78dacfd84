"""A raw ASGI app with one behaviour per path."""

import asyncio
import hashlib
import os
import time
from urllib.parse import parse_qs

MB = 1024 * 1024
EVENTS = []  # what /hold observed, served by /events
BARRIERS = {}  # key -> [arrived, asyncio.Event] for /barrier
LEAKED = []  # tasks /leak left running
HELD = []  # what /grow allocated
WARMED = []  # user agents that reached /warm


async def read_body(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def respond(send, status=200, body=b"", headers=()):
    headers = [(b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}

    if path == "/echo":  # the request body
        await respond(send, body=await read_body(receive))

    elif path == "/upload":  # byte count and sha256 of the request body, read chunk by chunk
        size, digest, more = 0, hashlib.sha256(), True
        while more:
            message = await receive()
            size += len(message.get("body", b""))
            digest.update(message.get("body", b""))
            more = message.get("more_body", False)
        await respond(send, body=f"{size} {digest.hexdigest()}".encode())

    elif path == "/download":  # ?mb=N: N chunks of 1 MiB, no content-length
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(int(query.get("mb", 10))):
            await send({"type": "http.response.body", "body": bytes([i % 256]) * MB, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    elif path == "/blob":  # ?mb=N: one body message of N MiB with content-length
        await respond(send, body=b"b" * int(float(query.get("mb", 5)) * MB))

    elif path == "/big-header":  # ?kb=N: a response header of N KiB
        await respond(send, body=b"ok", headers=[(b"x-big", b"h" * (int(query.get("kb", 20)) * 1024))])

    elif path == "/stream":  # three chunks, no content-length
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for part in (b"one,", b"two,", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    elif path == "/drip":  # ?n=N&every=S: N chunks, one every S seconds, no content-length
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(int(query.get("n", 3))):
            await asyncio.sleep(float(query.get("every", 0.5)))
            await send({"type": "http.response.body", "body": b"drop,", "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    elif path == "/length":  # content-length set by the app, body sent in two parts
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"11")]})
        await send({"type": "http.response.body", "body": b"hello ", "more_body": True})
        await send({"type": "http.response.body", "body": b"world"})

    elif path.startswith("/status/"):  # an empty response with the given status
        await send({"type": "http.response.start", "status": int(path[8:]), "headers": []})
        await send({"type": "http.response.body", "body": b""})

    elif path == "/sleep":  # ?s=seconds, then a 200; &mark=M prints "SLEEP-START M" as it starts
        if "mark" in query:
            print("SLEEP-START", query["mark"], flush=True)  # a test's sign that the app has it
        await asyncio.sleep(float(query.get("s", 1)))
        await respond(send, body=b"slept")

    elif path == "/barrier":  # ?key=K&n=N: answers 200 once N requests with key K are in flight together
        arrived, event = BARRIERS.setdefault(query["key"], [0, asyncio.Event()])
        BARRIERS[query["key"]][0] = arrived = arrived + 1
        if arrived == int(query["n"]):
            event.set()
        try:
            await asyncio.wait_for(event.wait(), 5)
            await respond(send, body=b"met")
        except asyncio.TimeoutError:
            await respond(send, status=504, body=f"only {arrived} arrived".encode())

    elif path == "/hold":  # start streaming, then wait for the client to go away
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x" * 1000, "more_body": True})
        while True:
            message = await receive()
            EVENTS.append(message["type"])
            if message["type"] == "http.disconnect":
                return

    elif path == "/spin":  # ?us=N: N microseconds of CPU on the app's thread, then a 200
        until = time.perf_counter() + int(query.get("us", 100)) / 1e6
        while time.perf_counter() < until:
            pass
        await respond(send, body=b"spun")

    elif path == "/leak":  # leaves a task behind that never ends
        LEAKED.append(asyncio.get_running_loop().create_task(asyncio.sleep(3600)))
        await respond(send, body=str(len(LEAKED)).encode())

    elif path == "/pid":  # which worker process answered
        await respond(send, body=str(os.getpid()).encode())

    elif path == "/grow":  # ?mb=N: keep N MiB more, touched, for as long as the process lives; answers its pid
        HELD.append(b"g" * (int(query.get("mb", 10)) * MB))
        await respond(send, body=str(os.getpid()).encode())

    elif path == "/warm":  # what a warm-up reaches: remembers who asked
        WARMED.append(dict(scope["headers"]).get(b"user-agent", b"").decode())
        await respond(send, body=b"warm")

    elif path == "/warmed":  # who reached /warm, and how many objects the collector has frozen
        import gc

        await respond(send, body=f"{','.join(WARMED)} {gc.get_freeze_count()}".encode())

    elif path == "/events":
        await respond(send, body=",".join(EVENTS).encode())

    elif path == "/set-header":  # ?name=N&value=V: the app sets that response header itself
        await respond(send, body=b"set", headers=[(query["name"].encode(), query["value"].encode())])

    else:  # echo the path, so pipelined responses can be told apart
        await respond(send, body=path.encode(), headers=[(b"content-type", b"text/plain")])
