"""The io_uring backend (--io-backend io_uring): serving, the fallback to epoll when the
kernel refuses io_uring, buffer-ring exhaustion, and idle connections holding no buffer.

The whole suite runs on this backend by default (auto picks it under zigcorn's own loop
where the kernel allows), and CI runs it once more on epoll (ZIGCORN_IO_BACKEND=epoll).
"""

import concurrent.futures
import ctypes
import hashlib
import http.client
import os
import platform
import resource
import socket
import subprocess
import sys
import time

import pytest

from tests.support.harness import SERVER, cpu_seconds, wait_for

pytestmark = pytest.mark.skipif(SERVER != "zigcorn", reason="zigcorn's own backends")

IO_URING_SETUP = 425  # the same number on x86_64 and aarch64 (asm-generic)


def _io_uring_works() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    fd = libc.syscall(IO_URING_SETUP, 8, params)
    if fd < 0:
        return False
    os.close(fd)
    return True


needs_io_uring = pytest.mark.skipif(
    platform.system() != "Linux" or not _io_uring_works(),
    reason="this kernel (or its sysctl kernel.io_uring_disabled, or a seccomp profile) refuses io_uring",
)


def _rings(pid: int) -> int:
    """How many io_uring instances the process holds (run with --loop asyncio: libuv,
    under uvloop, keeps a ring of its own)."""
    n = 0
    for entry in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{entry}") == "anon_inode:[io_uring]"
        except OSError:
            pass
    return n


def _refuse_io_uring() -> None:
    """In the child before exec: a seccomp filter that fails io_uring_setup with EPERM,
    as container runtimes' default profiles do."""
    class Insn(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Insn))]

    ld_nr, jeq, ret = 0x20, 0x15, 0x06
    program = (Insn * 4)(
        Insn(ld_nr, 0, 0, 0),  # seccomp_data.nr
        Insn(jeq, 0, 1, IO_URING_SETUP),
        Insn(ret, 0, 0, 0x00050000 | 1),  # SECCOMP_RET_ERRNO | EPERM
        Insn(ret, 0, 0, 0x7FFF0000),  # SECCOMP_RET_ALLOW
    )
    prog = Prog(4, program)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:  # NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(22, ctypes.c_ulong(2), ctypes.byref(prog), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:  # SECCOMP filter
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def _upload(port: int, body: bytes, path: str = "/") -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, body=body)
        response = conn.getresponse()
        assert response.status == 200
        return response.read().decode()
    finally:
        conn.close()


def _expected(body: bytes) -> str:
    return f"{len(body)} {hashlib.sha256(body).hexdigest()}"


@needs_io_uring
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_io_uring_serves_keep_alive_pipelined_and_large_bodies(start_server, loop):
    """Under a loop that sleeps on the ring's descriptor without asking the engine first
    (uvloop's, asyncio's): the receive armed again once the buffer ring grew must be
    submitted, and a pipelined request's pass must come (both stalled under uvloop)."""
    server = start_server("upload_digest:app", "--io-backend", "io_uring", "--loop", loop)
    # libuv, under uvloop, may keep a ring of its own.
    assert _rings(server.proc.pid) >= 1 if loop == "uvloop" else _rings(server.proc.pid) == 1
    body = os.urandom(3 * 1024 * 1024 + 17)
    assert _upload(server.port, body) == _expected(body)
    # Three pipelined requests in one write, then a fourth on the same connection.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        request = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello"
        sock.sendall(request * 3)
        data = b""
        while data.count(b"HTTP/1.1 200") < 3 or not data.endswith(_expected(b"hello").encode()):
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
        assert data.count(_expected(b"hello").encode()) == 3
        sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
        assert rest.startswith(b"HTTP/1.1 200") and rest.endswith(_expected(b"").encode())


@needs_io_uring
def test_environment_variable_selects_the_backend_and_the_flag_wins(start_server):
    by_env = start_server("upload_digest:app", "--loop", "asyncio", env={"ZIGCORN_IO_BACKEND": "io_uring"})
    assert _rings(by_env.proc.pid) == 1
    flag = start_server("upload_digest:app", "--io-backend", "epoll", "--loop", "asyncio", env={"ZIGCORN_IO_BACKEND": "io_uring"})
    assert _rings(flag.proc.pid) == 0
    assert _upload(flag.port, b"x" * 1000) == _expected(b"x" * 1000)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="the filter names x86_64/aarch64's syscall number")
def test_a_refused_io_uring_falls_back_to_epoll_with_one_info_line(start_server):
    server = start_server("upload_digest:app", "--io-backend", "io_uring", "--log-level", "info", "--loop", "asyncio",
                          preexec=_refuse_io_uring)
    assert _upload(server.port, b"y" * 70000) == _expected(b"y" * 70000)
    assert _rings(server.proc.pid) == 0
    lines = [line for line in server.output().splitlines() if "io_uring" in line]
    assert len(lines) == 1 and lines[0].startswith("INFO:") and "serving with epoll" in lines[0], server.output()
    assert "ERROR" not in server.output()


def _metric(port: int, name: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    line = next(l for l in text.splitlines() if l.startswith(name + " "))
    return int(float(line.split()[1]))


@needs_io_uring
@pytest.mark.parametrize("workers, loop, backend", [(1, "zigcorn", "io_uring"), (2, "zigcorn", "io_uring"),
                                                    (1, "asyncio", "epoll")])
def test_auto_serves_on_io_uring_under_its_own_loop_and_says_so_once(start_server, workers, loop, backend):
    # The suite's epoll run sets the variable for every server: auto it is, here.
    server = start_server("upload_digest:app", "--log-level", "info", "--loop", loop, "--workers", str(workers),
                          env={"ZIGCORN_IO_BACKEND": "auto"})
    assert _upload(server.port, b"z" * 70000) == _expected(b"z" * 70000)
    if workers == 1:
        assert _rings(server.proc.pid) == (backend == "io_uring")

    def lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if "backend" in line or "io_uring" in line]

    # Each worker logs as it starts, whichever served the upload: the first worker's line,
    # then a moment for any other worker's to show.
    assert wait_for(lambda: lines(server.output()) and server.output().count("Application startup complete") == workers,
                    timeout=5), server.output()
    time.sleep(0.5)
    found = lines(server.output())
    assert len(found) == 1 and found[0].startswith("INFO:") and f"I/O backend: {backend} (auto)" in found[0], server.output()


@needs_io_uring
def test_the_buffer_ring_starts_with_16_and_doubles_to_its_bound(start_server):
    # 24 uploads streaming at once through 512-byte buffers: 16 are too few, then 32.
    server = start_server("upload_digest:app", "--io-backend", "io_uring", "--io-uring-buffers", "64",
                          "--io-uring-buffer-size", "512", "--metrics-path", "/metrics")
    # The gauge is refreshed with the engine's once-a-second housekeeping.
    assert wait_for(lambda: _metric(server.port, "zigcorn_io_uring_buffers") == 16, timeout=3)
    bodies = [os.urandom(384 * 1024) for _ in range(24)]
    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        results = list(pool.map(lambda b: _upload(server.port, b, "/?slow"), bodies))
    assert results == [_expected(b) for b in bodies]
    assert wait_for(lambda: _metric(server.port, "zigcorn_io_uring_buffers") == 64, timeout=3), \
        _metric(server.port, "zigcorn_io_uring_buffers")
    assert _upload(server.port, b"after") == _expected(b"after")
    # A quiet second later the burst's ring is back to its first 16 buffers.
    assert wait_for(lambda: _metric(server.port, "zigcorn_io_uring_buffers") == 16, timeout=5), \
        _metric(server.port, "zigcorn_io_uring_buffers")
    assert _upload(server.port, b"again") == _expected(b"again")


@needs_io_uring
def test_buffer_ring_exhaustion_waits_resumes_and_counts(start_server):
    # 16 buffers of 512 bytes for 24 concurrent 384 KiB uploads read slowly: the ring runs dry.
    server = start_server("upload_digest:app", "--io-backend", "io_uring", "--io-uring-buffers", "16",
                          "--io-uring-buffer-size", "512", "--metrics-path", "/metrics")
    bodies = [os.urandom(384 * 1024) for _ in range(24)]
    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        results = list(pool.map(lambda b: _upload(server.port, b, "/?slow"), bodies))
    assert results == [_expected(b) for b in bodies]

    assert wait_for(lambda: _metric(server.port, "zigcorn_io_uring_buffer_waits_total") > 0, timeout=3), \
        "the ring never ran out: the test did not test exhaustion"
    # Nothing spins once the uploads are done.
    before = cpu_seconds(server.proc.pid)
    time.sleep(1.0)
    assert cpu_seconds(server.proc.pid) - before < 0.2
    assert _upload(server.port, b"after") == _expected(b"after")


@needs_io_uring
def test_idle_connections_hold_no_ring_buffer(start_server):
    # A 64 MiB ring: were each idle connection to hold a 16 KiB buffer, 1,000 would cost 16 MiB.
    server = start_server("upload_digest:app", "--io-backend", "io_uring", "--io-uring-buffers", "4096",
                          "--io-uring-buffer-size", "16384", "--timeout-keep-alive", "60", "--timeout-header", "60")
    assert _upload(server.port, b"warm") == _expected(b"warm")
    time.sleep(0.3)
    before = server.rss_kb()
    sockets = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(1000)]
    try:
        time.sleep(1.0)
        grown = server.rss_kb() - before
        assert grown < 4096, f"1,000 idle connections grew RSS by {grown} KiB"
        assert _upload(server.port, b"still") == _expected(b"still")
    finally:
        for s in sockets:
            s.close()


BURST = 3000


def _open_burst(port: int, count: int) -> list[socket.socket]:
    """`count` keep-alive connections, 50 at a time, each answered once."""
    socks: list[socket.socket] = []
    while len(socks) < count:
        batch = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(min(50, count - len(socks)))]
        socks.extend(batch)
        for s in batch:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        for s in batch:
            data = b""
            while not data.endswith(b"Hello, world!"):
                chunk = s.recv(4096)
                assert chunk, "closed before its response"
                data += chunk
    return socks


@pytest.mark.parametrize("backend", ["io_uring", "epoll"])
def test_a_burst_of_connections_closed_leaves_nothing_behind(start_server, backend):
    """3,000 connections, a request each, then all closed: on io_uring the slot table
    follows the highest descriptor up and comes back to its first step at once, and the
    buffer ring back to 16; the connections gauge comes back to 0 on both backends (the
    engine's own counters, not RSS timing)."""
    if backend == "io_uring" and not _io_uring_works():
        pytest.skip("this kernel refuses io_uring")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = BURST + 200
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"the descriptor limit ({hard}) is below {want}")
    # The server inherits it.
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    try:
        server = start_server("hello:app", "--io-backend", backend, "--metrics-path", "/metrics",
                              "--limit-connections", str(BURST + 100))
        start_slots = 1024 if backend == "io_uring" else 0
        assert wait_for(lambda: _metric(server.port, "zigcorn_io_uring_slots") == start_slots, timeout=3)
        socks = _open_burst(server.port, BURST)
        try:
            assert wait_for(lambda: _metric(server.port, "zigcorn_connections_open") >= BURST, timeout=5)
            # The highest descriptor is past 3,000 (and under 3,200): the table covers it, in
            # steps of 1,024 (the gauge follows on the engine's once-a-second tick).
            want = (3072, 4096) if backend == "io_uring" else (0,)
            assert wait_for(lambda: _metric(server.port, "zigcorn_io_uring_slots") in want, timeout=3), \
                _metric(server.port, "zigcorn_io_uring_slots")
        finally:
            for s in socks:
                s.close()
        assert wait_for(lambda: _metric(server.port, "zigcorn_connections_open") <= 1, timeout=5)
        assert wait_for(lambda: _metric(server.port, "zigcorn_io_uring_slots") == start_slots, timeout=3), \
            _metric(server.port, "zigcorn_io_uring_slots")
        if backend == "io_uring":
            assert wait_for(lambda: _metric(server.port, "zigcorn_io_uring_buffers") == 16, timeout=5)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_ring_sizes_must_be_powers_of_two():
    proc = subprocess.run([sys.executable, "-m", "zigcorn", "tests.apps.hello:app", "--io-uring-buffers", "100"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "power of two" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "zigcorn", "tests.apps.hello:app", "--io-backend", "kqueue"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "io_uring" in proc.stderr
