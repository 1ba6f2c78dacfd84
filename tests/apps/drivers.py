"""An app that uses real asyncio drivers against real backends, on whatever loop serves it.

``/loop``: the running loop's class (module.name).
``/pg?dsn=...``: asyncpg: a temporary table filled with ``executemany``, a filtered
``fetch``, ``LISTEN``/``NOTIFY`` delivered while the connection idles, a server-side
``pg_sleep`` racing a client timeout, and 40 queries over a 4-connection pool at once.
``/redis?url=...``: redis-py's asyncio client: strings, a pipeline, pub/sub, a blocking
pop that times out on the server, and 50 commands at once over its connection pool.
``/https?url=...&ca=...``: httpx over TLS (asyncio's ssl support) to a local server.
Each answers a JSON object the test checks field by field.
"""

import asyncio
import json
from urllib.parse import parse_qs


async def _pg(dsn: str) -> dict:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TEMP TABLE t (id int PRIMARY KEY, name text)")
        await conn.executemany("INSERT INTO t VALUES ($1, $2)", [(i, f"n{i}") for i in range(200)])
        rows = await conn.fetch("SELECT name FROM t WHERE id % 50 = 0 ORDER BY id")
        notified = asyncio.get_running_loop().create_future()

        def on_notify(connection, pid, channel, payload):
            if not notified.done():
                notified.set_result(payload)

        await conn.add_listener("zigcorn", on_notify)
        await conn.execute("NOTIFY zigcorn, 'hello'")
        payload = await asyncio.wait_for(notified, 5)
        try:
            await conn.fetchval("SELECT pg_sleep(5)", timeout=0.2)
            timed_out = False
        except asyncio.TimeoutError:
            timed_out = True
        # The connection is still good after the cancelled query.
        after = await conn.fetchval("SELECT count(*) FROM t")
    finally:
        await conn.close()
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    try:
        doubled = await asyncio.gather(*(pool.fetchval("SELECT $1::int * 2", i) for i in range(40)))
    finally:
        await pool.close()
    return {"rows": [r["name"] for r in rows], "notify": payload, "timed_out": timed_out, "count": after,
            "pool": sum(doubled)}  # fmt: skip


async def _redis(url: str) -> dict:
    import redis.asyncio as redis

    client = redis.from_url(url)
    try:
        await client.set("zigcorn:key", "value")
        value = (await client.get("zigcorn:key")).decode()
        await client.delete("zigcorn:count")
        async with client.pipeline(transaction=True) as pipe:
            counted = await pipe.incrby("zigcorn:count", 5).incrby("zigcorn:count", 7).execute()
        pubsub = client.pubsub()
        await pubsub.subscribe("zigcorn:channel")
        await client.publish("zigcorn:channel", "message")
        message = None
        for _ in range(50):
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
            if message is not None:
                break
        await pubsub.unsubscribe("zigcorn:channel")
        await pubsub.aclose()
        popped = await client.blpop(["zigcorn:empty"], timeout=0.2)
        many = await asyncio.gather(*(client.incr("zigcorn:many") for _ in range(50)))
        await client.delete("zigcorn:many")
    finally:
        await client.aclose()
    return {"value": value, "pipeline": counted, "message": message and message["data"].decode(), "blpop": popped,
            "many": max(many)}  # fmt: skip


async def _https(url: str, ca: str) -> dict:
    import ssl

    import httpx

    context = ssl.create_default_context(cafile=ca)
    async with httpx.AsyncClient(verify=context) as client:
        first = await client.get(url)
        several = await asyncio.gather(*(client.get(url) for _ in range(10)))
    return {"status": first.status_code, "text": first.text, "all": sorted({r.status_code for r in several})}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
    path = scope["path"]
    status = 200
    try:
        if path == "/loop":
            loop = type(asyncio.get_running_loop())
            result = {"loop": f"{loop.__module__}.{loop.__qualname__}"}
        elif path == "/pg":
            result = await _pg(query["dsn"])
        elif path == "/redis":
            result = await _redis(query["url"])
        elif path == "/https":
            result = await _https(query["url"], query["ca"])
        else:
            status, result = 404, {}
    except Exception as exc:  # the test prints what went wrong
        status, result = 500, {"error": repr(exc)}
    body = json.dumps(result).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
