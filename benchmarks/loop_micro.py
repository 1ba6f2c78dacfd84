"""asyncio event loops head to head on the loop's own work, no server: the
micro-benchmark of the own-event-loop issue: asyncio, uvloop and zigcorn's loop.

    python benchmarks/loop_micro.py                    # every loop importable here
    python benchmarks/loop_micro.py --loops asyncio --rounds 5

Each figure is the best of `--rounds` runs, in a fresh loop, in this process:
- call_soon chain: a callback that schedules itself again, 200,000 times;
- sleep(0) ping-pong: two tasks taking turns through `await asyncio.sleep(0)`, 100,000
  turns each;
- gather 100k tasks: create and gather 100,000 trivial coroutines;
- timer storm: 50,000 `call_later` timers at spread-out delays within 50 ms, half of
  them cancelled, until the last one fires;
- futures: 100,000 futures resolved with `call_soon` and awaited.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from typing import Callable


def _loops(names: list[str]) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    factories: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {}
    for name in names:
        if name == "asyncio":
            factories[name] = asyncio.SelectorEventLoop
        elif name == "zigcorn":
            from zigcorn.loop import new_event_loop

            factories[name] = new_event_loop
        elif name == "uvloop":
            try:
                import uvloop
            except ImportError:
                continue
            factories[name] = uvloop.new_event_loop
    return factories


def call_soon_chain(loop: asyncio.AbstractEventLoop, n: int = 200_000) -> float:
    done = loop.create_future()
    left = n

    def step() -> None:
        nonlocal left
        left -= 1
        if left:
            loop.call_soon(step)
        else:
            done.set_result(None)

    start = time.perf_counter()
    loop.call_soon(step)
    loop.run_until_complete(done)
    return time.perf_counter() - start


def sleep0_ping_pong(loop: asyncio.AbstractEventLoop, n: int = 100_000) -> float:
    async def player() -> None:
        for _ in range(n):
            await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(player(), player())

    start = time.perf_counter()
    loop.run_until_complete(main())
    return time.perf_counter() - start


def gather_tasks(loop: asyncio.AbstractEventLoop, n: int = 100_000) -> float:
    async def nothing(i: int) -> int:
        return i

    async def main() -> None:
        results = await asyncio.gather(*(nothing(i) for i in range(n)))
        assert len(results) == n

    start = time.perf_counter()
    loop.run_until_complete(main())
    return time.perf_counter() - start


def timer_storm(loop: asyncio.AbstractEventLoop, n: int = 50_000) -> float:
    fired = 0
    done = loop.create_future()

    def fire() -> None:
        nonlocal fired
        fired += 1
        if fired == n // 2:
            done.set_result(None)

    start = time.perf_counter()
    handles = [loop.call_later((i % 500) / 10_000, fire) for i in range(n)]
    for h in handles[1::2]:
        h.cancel()
    loop.run_until_complete(done)
    return time.perf_counter() - start


def futures(loop: asyncio.AbstractEventLoop, n: int = 100_000) -> float:
    async def main() -> None:
        for i in range(n):
            fut = loop.create_future()
            loop.call_soon(fut.set_result, i)
            assert await fut == i

    start = time.perf_counter()
    loop.run_until_complete(main())
    return time.perf_counter() - start


POINTS = {"call_soon chain": call_soon_chain, "sleep(0) ping-pong": sleep0_ping_pong,
          "gather 100k tasks": gather_tasks, "timer storm": timer_storm, "futures": futures}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loops", default="asyncio,uvloop,zigcorn")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    factories = _loops(args.loops.split(","))
    results: dict[str, dict[str, float]] = {}
    for point, run in POINTS.items():
        for name, factory in factories.items():
            best = float("inf")
            for _ in range(args.rounds):
                loop = factory()
                try:
                    gc.collect()
                    best = min(best, run(loop))
                finally:
                    loop.close()
            results.setdefault(point, {})[name] = best
    names = list(factories)
    print("| point | " + " | ".join(f"{n} (ms)" for n in names) + " |")
    print("|---|" + "---:|" * len(names))
    for point, row in results.items():
        print(f"| {point} | " + " | ".join(f"{row[n] * 1000:.1f}" for n in names) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"python": sys.version.split()[0], "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
