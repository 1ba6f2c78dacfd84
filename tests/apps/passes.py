"""Counts the event loop's passes (calls of ``loop._run_once`` from asyncio's
``run_forever``) and serves reads of a socket pair fed by a thread, for the busy-poll
tests: how many passes a ping-pong client's request costs, and whether a descriptor
registered with ``add_reader`` is still served while the busy poll keeps finding work.

``/passes`` and ``/reads`` (the reads that found bytes) answer the counts so far;
anything else answers ``ok``.
"""

import asyncio
import socket
import sys
import threading

PASSES = [0]
READS = [0]


def _profile(frame, event, arg):
    if event == "c_call" and getattr(arg, "__name__", None) == "_run_once":
        PASSES[0] += 1


def _feed(sock: socket.socket, stop: threading.Event) -> None:
    # One byte every 10 ms, for the loop's reader to count.
    while not stop.wait(0.01):
        try:
            sock.send(b"x")
        except OSError:
            return


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        stop = threading.Event()

        def on_readable() -> None:
            # The reads, not the bytes: a loop that waited on its descriptors only now
            # and then would read many bytes at once.
            try:
                if ours.recv(4096):
                    READS[0] += 1
            except BlockingIOError:
                pass

        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                loop.add_reader(ours.fileno(), on_readable)
                threading.Thread(target=_feed, args=(theirs, stop), daemon=True).start()
                sys.setprofile(_profile)  # this thread's: the loop's
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                sys.setprofile(None)
                stop.set()
                loop.remove_reader(ours.fileno())
                ours.close()
                theirs.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    counts = {"/passes": PASSES, "/reads": READS}
    body = str(counts[scope["path"]][0]).encode() if scope["path"] in counts else b"ok"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
