"""Memory of a server's whole process tree, read from /proc (Linux only).

RSS is summed over the tree (it counts pages shared between forked workers once per
process); PSS (``/proc/PID/smaps_rollup``) splits shared pages between the processes
that map them, so the tree's PSS sum is what the server really costs.
"""

from __future__ import annotations

import os
import resource
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


def raise_nofile() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (children inherit it); return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft


def _parent_map() -> dict[int, int]:
    """pid -> ppid for every live (non-zombie) process."""
    parents: dict[int, int] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    return parents


def tree_pids(root: int) -> list[int]:
    """``root`` and all its live descendants."""
    parents = _parent_map()
    if root not in parents:
        return []
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def pid_alive(pid: int) -> bool:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _kib_field(path: Path, field: str) -> int:
    """The ``field: N kB`` value of a /proc status-like file, 0 if the process is gone."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def rss_kib(pid: int) -> int:
    return _kib_field(PROC / str(pid) / "status", "VmRSS")


def pss_kib(pid: int) -> int:
    return _kib_field(PROC / str(pid) / "smaps_rollup", "Pss")


def tree_rss_kib(root: int) -> int:
    return sum(rss_kib(pid) for pid in tree_pids(root))


def tree_pss_kib(root: int) -> int:
    return sum(pss_kib(pid) for pid in tree_pids(root))


@dataclass
class TreeMemory:
    rss_kib: int
    pss_kib: int
    processes: int

    def as_dict(self) -> dict:
        return {"rss_kib": self.rss_kib, "pss_kib": self.pss_kib, "processes": self.processes}


def snapshot(root: int) -> TreeMemory:
    pids = tree_pids(root)
    return TreeMemory(sum(rss_kib(p) for p in pids), sum(pss_kib(p) for p in pids), len(pids))


def settle(root: int, min_wait: float = 1.0, max_wait: float = 15.0, min_processes: int = 1,
           tolerance_kib: int | None = None) -> TreeMemory:
    """Wait until the tree has ``min_processes`` and its size and RSS stop moving (by at
    most ``tolerance_kib`` per reading, 1% of RSS by default); snapshot it."""
    start = time.monotonic()
    stable, last = 0, snapshot(root)
    while time.monotonic() - start < max_wait:
        time.sleep(0.25)
        now = snapshot(root)
        same_shape = now.processes == last.processes and now.processes >= min_processes
        tolerance = last.rss_kib / 100 if tolerance_kib is None else tolerance_kib
        stable = stable + 1 if same_shape and abs(now.rss_kib - last.rss_kib) <= tolerance else 0
        last = now
        if stable >= 3 and time.monotonic() - start >= min_wait:
            break
    return snapshot(root)


class PeakSampler:
    """Samples the tree's RSS every ``interval`` seconds in a thread; ``peak_kib`` is the maximum."""

    def __init__(self, root: int, interval: float = 0.05):
        self.root = root
        self.interval = interval
        self.peak_kib = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._record(tree_rss_kib(self.root))
            self._stop.wait(self.interval)

    def _record(self, rss_kib: int) -> None:
        self.peak_kib = max(self.peak_kib, rss_kib)
        self.samples += 1

    def __enter__(self) -> "PeakSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class RssRecorder(PeakSampler):
    """A `PeakSampler` that also keeps every ``(seconds since start, RSS KiB)`` sample."""

    def __init__(self, root: int, interval: float = 0.5):
        super().__init__(root, interval)
        self.series: list[tuple[float, int]] = []
        self._began = time.monotonic()

    def _record(self, rss_kib: int) -> None:
        super()._record(rss_kib)
        self.series.append((round(time.monotonic() - self._began, 2), rss_kib))


def rss_trend(series: list[tuple[float, int]], skip_s: float) -> dict:
    """RSS growth over a constant load, ignoring the first ``skip_s`` seconds (pools filling).

    ``growth_kib`` is the last sample minus the first one after ``skip_s``; ``slope_kib_per_min``
    the least-squares slope over the same samples, which one late spike cannot fake.
    """
    kept = [(t, rss) for t, rss in series if t >= skip_s]
    if len(kept) < 2:
        return {"samples": len(kept), "growth_kib": None, "slope_kib_per_min": None}
    n = len(kept)
    mean_t = sum(t for t, _ in kept) / n
    mean_r = sum(r for _, r in kept) / n
    var = sum((t - mean_t) ** 2 for t, _ in kept)
    slope = sum((t - mean_t) * (r - mean_r) for t, r in kept) / var if var else 0.0
    return {"samples": n, "from_kib": kept[0][1], "to_kib": kept[-1][1], "growth_kib": kept[-1][1] - kept[0][1],
            "slope_kib_per_min": round(slope * 60, 1)}


# -- idle keep-alive connections ---------------------------------------------------------

REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: zigcorn-bench\r\n\r\n"
BATCH = 50  # connections opened at once: well under every server's listen backlog


def _read_response(sock: socket.socket) -> int:
    """Read one response whose body is framed by Content-Length; return its status."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed before a full response head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed mid-body")
        body += chunk
    return int(lines[0].split()[1])


def _open_batch(port: int, count: int) -> list[socket.socket]:
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]
    for sock in socks:
        sock.sendall(REQUEST)
    for sock in socks:
        status = _read_response(sock)
        if status != 200:
            raise RuntimeError(f"idle-connection request answered {status}")
    return socks


def _still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def _hold(port: int, count: int) -> list[socket.socket]:
    socks: list[socket.socket] = []
    try:
        while len(socks) < count:
            socks.extend(_open_batch(port, min(BATCH, count - len(socks))))
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def idle_connection_cost(root: int, port: int, count: int, wait: float = 3.0) -> dict:
    """Hold ``count`` keep-alive connections open, idle, after one request each; measure
    what each one costs.

    The figure is the slope: RSS with all ``count`` open minus RSS with the first half
    open, divided by the second half. That is what one more idle connection costs; the
    growth from the empty server to the first half also holds one-time costs that do
    not scale with connections (buffer reserves, allocator arenas the first burst
    grows: about 90 KiB for zigcorn), reported separately as ``total_bytes_per_connection``
    (whole growth over ``count``). Unlike a warm-up round, nothing freed by closed
    connections is reused, so a server's per-connection objects are counted in full.

    The wait lets every server finish whatever it does once a burst has passed (zigcorn
    gives buffers back on its first idle second) before RSS is read, and then RSS must
    have stopped moving.
    """
    half = count // 2
    # A tight tolerance: the figure is a difference of a few hundred KiB.
    before = settle(root, min_wait=0.5, tolerance_kib=16)
    socks = _hold(port, half)
    try:
        time.sleep(wait)
        middle = settle(root, min_wait=1.0, tolerance_kib=16)
        socks.extend(_hold(port, count - half))
        time.sleep(wait)
        after = settle(root, min_wait=1.0, tolerance_kib=16)
        alive = sum(_still_open(sock) for sock in socks)
    finally:
        for sock in socks:
            sock.close()
    return connection_cost(count, half, alive, before, middle, after)


def connection_cost(count: int, half: int, alive: int, before: TreeMemory, middle: TreeMemory,
                    after: TreeMemory) -> dict:
    """The figures of an idle-connection measurement: RSS before any, with ``half`` and
    with ``count`` connections held; the slope over the second half, and the whole growth."""
    marginal = (after.rss_kib - middle.rss_kib) * 1024
    total = (after.rss_kib - before.rss_kib) * 1024
    return {
        "opened": count,
        "alive": alive,
        "rss_before_kib": before.rss_kib,
        "rss_half_kib": middle.rss_kib,
        "rss_after_kib": after.rss_kib,
        "pss_before_kib": before.pss_kib,
        "pss_after_kib": after.pss_kib,
        "bytes_per_connection": round(marginal / (count - half)) if count - half else None,
        "total_bytes_per_connection": round(total / count) if count else None,
    }
