"""WSGI (PEP 3333) served by the engine: ``--interface wsgi``.

The engine builds each request's environ (``src/zig/python/environ.zig``) where it would
build an ASGI scope, and a bounded pool of threads runs the app. The engine is driven by
the event loop's thread only: a worker thread never touches a stream. What a worker
produces (the head, body chunks, the end) goes into one outbox that the loop's thread
applies in a batch, woken once per batch with ``call_soon_threadsafe``; what it needs
(request body bytes, room for more output) it waits for on the dispatcher's condition,
without the GIL. So HTTP/2, TLS, the writer thread, limits, drain, metrics and the
access log are the same code as for ASGI apps.

Memory is bounded per request: the loop reads at most ``_INPUT_HIGH`` body bytes ahead of
the app (the engine stops reading the socket meanwhile), and a worker waits once more
than ``_OUTPUT_HIGH`` bytes it wrote are not yet taken by the engine.
"""

from __future__ import annotations

import contextvars
import logging
import os
import queue
import re
import sys
import threading
import time
from collections import deque

from zigcorn import accesslog
from zigcorn.protocols.admission import Admission, answer_drain, answer_error

logger = logging.getLogger("zigcorn.error")

#: Request body bytes read ahead of the app, at most (then the engine stops reading the socket).
_INPUT_HIGH = 1024 * 1024
#: Response bytes a worker may have handed over and the engine not yet taken before it waits.
_OUTPUT_HIGH = 256 * 1024
#: A header name: an RFC 9110 token.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+").fullmatch
#: Threads of the pool that start as soon as requests come; more start only for blocked requests.
_HOT = 2
#: A request running longer than this is taken to be blocked (waiting on I/O), not computing.
_STUCK = 0.02


def default_threads() -> int:
    """--wsgi-threads' default: 4 per CPU, from 4 to 32. Only blocked requests make the
    pool grow past its first two threads (see `Pool`), so the bound is how many requests
    may wait on I/O at once, as gunicorn's advice of 2-4 threads per core."""
    return max(4, min(32, (os.cpu_count() or 1) * 4))


class ErrorStream:
    """``wsgi.errors``: what the app writes goes to the ``zigcorn.error`` logger, a line at a time."""

    __slots__ = ("_buffer", "_lock")

    def __init__(self) -> None:
        self._buffer = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._buffer += text
            *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            logger.error("%s", line)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with self._lock:
            rest, self._buffer = self._buffer, ""
        if rest:
            logger.error("%s", rest)


class FileWrapper:
    """``wsgi.file_wrapper``: a file with a real descriptor, read from its start, is sent
    by the engine (sendfile(2)); anything else is read in blocks of `blksize`."""

    __slots__ = ("filelike", "blksize")

    def __init__(self, filelike, blksize: int = 8192) -> None:
        self.filelike = filelike
        self.blksize = blksize

    def __iter__(self):
        read = self.filelike.read
        while True:
            block = read(self.blksize)
            if not block:
                return
            yield block

    def close(self) -> None:
        close = getattr(self.filelike, "close", None)
        if close is not None:
            close()

    def path(self) -> bytes | None:
        """A path the engine can open to send the whole file, or None."""
        try:
            fd = self.filelike.fileno()
            if self.filelike.tell() != 0:
                return None
            import stat

            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
        except (AttributeError, OSError, ValueError):
            return None
        return f"/proc/self/fd/{fd}".encode()


class Outbox:
    """Work for the loop's thread, from any thread: one wake-up per batch."""

    __slots__ = ("loop", "items", "scheduled")

    def __init__(self, loop) -> None:
        self.loop = loop
        self.items = deque()
        self.scheduled = False

    def post(self, fn, *args) -> None:
        self.items.append((fn, args))
        if not self.scheduled:
            self.scheduled = True
            try:
                self.loop.call_soon_threadsafe(self.run)
            except RuntimeError:  # the loop is closed: serving is over
                pass

    def run(self) -> None:
        self.scheduled = False
        items = self.items
        while items:
            fn, args = items.popleft()
            try:
                fn(*args)
            except Exception:
                logger.exception("WSGI response handling failed")


def _bad(message: str):
    raise ValueError(message)


def _check_status(status) -> int:
    if not isinstance(status, str):
        _bad(f"WSGI status must be a str, not {type(status).__name__}")
    code = status[:3]
    if len(status) < 4 or status[3] != " " or not code.isdigit() or int(code) < 100 or "\n" in status:
        _bad(f"invalid WSGI status {status!r}: it must be 'NNN Reason'")
    return int(code)


def _encode_headers(headers) -> tuple[list, int | None]:
    """The app's (str, str) headers as the engine's (bytes, bytes) pairs, and the content-length."""
    if type(headers) is not list:
        _bad(f"WSGI headers must be a list, not {type(headers).__name__}")
    out = []
    length = None
    for item in headers:
        if type(item) is not tuple or len(item) != 2:
            _bad(f"each WSGI header must be a (name, value) tuple, not {item!r}")
        name, value = item
        if type(name) is not str or type(value) is not str:
            _bad(f"WSGI header names and values must be str: {item!r}")
        if not _TOKEN(name) or "\r" in value or "\n" in value or "\0" in value:
            _bad(f"invalid WSGI header {item!r}")
        try:
            pair = (name.encode("latin-1"), value.encode("latin-1"))
        except UnicodeEncodeError:
            _bad(f"WSGI header {item!r} is not latin-1")
        if len(name) == 14 and name.lower() == "content-length":
            try:
                length = int(value)
            except ValueError:
                _bad(f"invalid content-length {value!r}")
        out.append(pair)
    return out, length


class Exchange:
    """One request: what the worker thread and the loop's thread share. It is also the
    request's ``wsgi.input`` (read, readline, readlines, iteration)."""

    __slots__ = (
        "stream", "outbox", "cond", "lock", "started_at", "closed", "gone",
        # input: chunks read ahead (loop thread appends, worker takes), their size, the end seen
        "chunks", "offset", "buffered", "received", "truncated", "body_done", "pumping",
        # output: bytes handed over / taken by the engine (each side writes one counter)
        "posted", "acked",
        # the response as the worker knows it
        "status", "headers", "length", "head_sent", "final_sent", "sent",
        "timer", "owner", "pending", "waiting", "want", "out_waiting", "deferred", "complete_after",
    )  # fmt: skip

    def __init__(self, stream, owner) -> None:
        self.stream = stream
        self.owner = owner
        self.outbox = owner.outbox
        self.cond = owner.cond  # one for every exchange: waits are rare, a Condition per request is not free
        self.lock = owner.lock
        self.started_at = 0.0
        self.closed = False  # the loop is done with the stream (finished, failed or timed out)
        self.gone = False  # the client went away, or the request timed out: stop producing
        self.chunks = deque()
        self.offset = 0  # where the unread part of chunks[0] starts
        self.received = 0  # body bytes read from the engine so far
        self.truncated = False  # the client went away before the body's end
        self.buffered = 0
        self.body_done = False
        self.pumping = False
        self.want = 0  # bytes the worker waits for (0: it does not wait for input)
        self.out_waiting = False  # the worker waits for the engine to take its output
        self.complete_after = False  # the worker finished while its last writes still waited
        self.deferred = None  # the job, held until the body is read ahead (a body up to _INPUT_HIGH)
        self.posted = 0
        self.acked = 0
        self.status = None
        self.headers = None
        self.length = None
        self.head_sent = False
        self.final_sent = False
        self.sent = 0
        self.timer = None
        self.pending = deque()  # the worker's writes not yet given to the engine
        self.waiting = False  # the engine said wait: the next write waits for write_waiter

    # ---- the loop's thread ----------------------------------------------------------

    def pump(self) -> None:
        """Read request body bytes from the engine, up to `_INPUT_HIGH` ahead of the app."""
        stream = self.stream
        self.pumping = False
        got = []
        ahead = start = self.buffered  # an estimate: the worker may take bytes meanwhile
        done = False
        read_body = stream.read_body
        while ahead < _INPUT_HIGH:
            body = read_body(_INPUT_HIGH - ahead)
            if body is None:
                stream.read_waiter = self.pump
                self.pumping = True
                break
            if not body:
                done = True
                if stream.disconnected and not stream.response_complete:
                    self.gone = True
                    length = stream.scope.get("CONTENT_LENGTH")
                    # The client left before its body ended: the app must not take a part for the whole.
                    self.truncated = length is None or not length.isdigit() or self.received + ahead - start < int(length)
                break
            got.append(body)
            ahead += len(body)
        with self.lock:  # the condition's own lock, taken without Condition's Python-level __enter__
            chunks = self.chunks
            for body in got:
                chunks.append(body)
            self.buffered += ahead - start
            self.received += ahead - start
            if done:
                self.body_done = True
            # The worker wakes (and takes the GIL from the loop) only once it has what it asked for.
            if self.want and (self.buffered >= self.want or done or self.gone):
                self.cond.notify_all()
        if self.deferred is not None and (done or self.gone or self.closed or ahead >= _INPUT_HIGH):
            job, self.deferred = self.deferred, None
            if self.truncated:
                self.complete(True)  # the app is not called for half a request
            else:
                self.owner.pool.submit(job)

    def _ack(self, n: int) -> None:
        with self.lock:
            self.acked += n
            if self.stream.disconnected and not self.stream.response_complete:
                self.gone = True
            if self.out_waiting:
                self.cond.notify_all()

    def _release(self) -> None:
        """Wake a worker waiting for room or input: it will see `gone`."""
        with self.cond:
            self.gone = True
            self.cond.notify_all()

    def apply_write(self, status, headers, data, more, file_path) -> None:
        """A part of the response from the worker: to the engine now, or after the engine's
        previous write drained (it takes one at a time once it said wait)."""
        self.pending.append((status, headers, data, more, file_path))
        if not self.waiting:
            self._flush()

    def _flush(self) -> None:
        stream = self.stream
        pending = self.pending
        while pending and not self.waiting:
            status, headers, data, more, file_path = pending.popleft()
            n = len(data) or 1
            if self.closed:
                self._ack(n)
                continue
            try:
                if status is not None:
                    stream.start(status, headers)
                if file_path is not None:
                    stream.send_file(file_path)
                    wait = False
                else:
                    wait = stream.write(data, more)
            except RuntimeError as exc:  # content-length broken, and the like: the exchange cannot finish
                logger.error("WSGI response: %s", exc)
                self.fail()
                self._ack(n)
                continue
            if wait and more:
                self.waiting = True
                stream.write_waiter = self._writable
            self._ack(n)

    def _writable(self) -> None:
        self.waiting = False
        self._flush()
        if not self.waiting:
            self._ack(0)  # a worker waiting on a client that went away sees it now
        if self.complete_after and not self.pending:
            self.complete_after = False
            self.complete(False)

    def complete(self, failed: bool) -> None:
        """The worker is done: the stream goes back to the engine (if a timeout did not
        already), and the links that would make a cycle of every request are cut: environ
        -> wsgi.input (this exchange) -> stream -> environ, and the wakers."""
        if self.pending and not self.closed and not failed:
            # Writes still wait for the engine to drain: complete after the last of them.
            self.complete_after = True
            return
        stream = self.stream
        try:
            if not self.closed:
                self._complete(failed)
        finally:
            stream.read_waiter = stream.write_waiter = None
            stream.scope.pop("wsgi.input", None)
            self.pending.clear()

    def _complete(self, failed: bool) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        stream = self.stream
        if failed or not stream.response_started:
            self._fail_stream(500)
        elif stream.response_complete:
            stream.finish()
        else:
            stream.abort()
        self._log_access()

    def fail(self, status: int = 500) -> None:
        if self.closed:
            return
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        self._fail_stream(status)
        self._release()
        self._log_access()
        if self.deferred is not None:  # the app never ran: nothing will complete this exchange
            self.deferred = None
            self.complete(True)

    def expire(self, timeout: float) -> None:
        if self.closed:
            return
        logger.error("Request timed out after %ss: the WSGI app's result will be dropped.", timeout)
        self.timer = None
        self.fail(503)

    def _fail_stream(self, status: int) -> None:
        answer_error(self.stream, status)

    def _log_access(self) -> None:
        """The request's access line: the same code and format as an ASGI request's."""
        if not self.owner.access_log:
            return
        stream = self.stream
        access_format = accesslog.access_format
        headers = self.headers if access_format is not None and access_format.response_headers else None
        duration = time.perf_counter() - self.started_at
        accesslog.log(accesslog.EnvironRequest(stream.scope, stream.status, stream.body_bytes, duration, headers))

    # ---- the worker thread: output -------------------------------------------------

    def _post(self, status, headers, data: bytes, more: bool, file_path=None) -> None:
        # Wait before handing over more (the chunk itself is already in memory): the app
        # may produce its next chunk only once the engine took most of what came before.
        if self.posted - self.acked > _OUTPUT_HIGH:
            with self.cond:
                self.out_waiting = True
                while self.posted - self.acked > _OUTPUT_HIGH and not self.gone:
                    self.cond.wait()
                self.out_waiting = False
        self.posted += len(data) or 1
        self.outbox.post(self.apply_write, status, headers, data, more, file_path)

    def flushed(self) -> None:
        """Wait until the engine took everything handed over (a file must stay open until then)."""
        with self.cond:
            self.out_waiting = True
            while self.posted != self.acked and not self.gone:
                self.cond.wait()
            self.out_waiting = False

    def send(self, data: bytes) -> None:
        """One body chunk from the app (or the write() callable)."""
        if self.gone:
            raise OSError("the client went away")
        if self.status is None:
            raise AssertionError("write() before start_response()")
        if self.final_sent:
            if data:
                raise RuntimeError("response content longer than its Content-Length")
            return
        if not data:
            return
        self.sent += len(data)
        more = self.length is None or self.sent < self.length
        if not self.head_sent:
            self.head_sent = True
            self._post(self.status, self.headers, data, more)
        else:
            self._post(None, None, data, more)
        if not more:
            self.final_sent = True

    def end(self) -> None:
        if not self.head_sent:
            self.head_sent = True
            self.final_sent = True
            self._post(self.status, self.headers, b"", False)
        elif not self.final_sent:
            self.final_sent = True
            self._post(None, None, b"", False)

    # ---- the worker thread: wsgi.input -------------------------------------------

    def _fill(self, want: int) -> None:
        """Wait until `want` bytes are read ahead or the body ended (GIL released while waiting)."""
        want = min(want, _INPUT_HIGH)
        with self.cond:
            self.want = want
            while self.buffered < want and not self.body_done and not self.gone:
                if not self.pumping:
                    self.pumping = True
                    self.outbox.post(self.pump)
                self.cond.wait()
            self.want = 0
            if self.truncated and not self.buffered:
                raise OSError("the client went away before the request body ended")

    def _take(self, n: int) -> bytes:
        """Up to n buffered bytes (n < 0: all of them), and ask for more when low. The first
        chunk is read from `offset` on, never sliced into a shorter copy of itself."""
        with self.lock:
            chunks = self.chunks
            off = self.offset
            if n < 0 or n >= self.buffered:
                if not chunks:
                    data = b""
                else:
                    if off:
                        chunks[0] = chunks[0][off:]
                    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    chunks.clear()
                self.offset = 0
            else:
                parts = []
                left = n
                while left:
                    head = chunks[0]
                    avail = len(head) - off
                    if avail <= left:
                        parts.append(head[off:] if off else head)
                        chunks.popleft()
                        off = 0
                        left -= avail
                    else:
                        parts.append(head[off : off + left])
                        off += left
                        left = 0
                self.offset = off
                data = parts[0] if len(parts) == 1 else b"".join(parts)
            self.buffered -= len(data)
            if not self.body_done and not self.pumping and self.buffered < _INPUT_HIGH // 2:
                self.pumping = True
                self.outbox.post(self.pump)
        return data

    def _line_end(self) -> int:
        """Bytes up to and including the first buffered newline, or -1 (the lock held)."""
        seen = 0
        off = self.offset
        for chunk in self.chunks:
            at = chunk.find(b"\n", off)
            if at >= 0:
                return seen + at - off + 1
            seen += len(chunk) - off
            off = 0
        return -1

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            parts = []
            while True:
                self._fill(_INPUT_HIGH)
                data = self._take(-1)
                if data:
                    parts.append(data)
                if self.body_done and not self.buffered:
                    break
                if self.gone:
                    break
            return b"".join(parts)
        parts = []
        while size > 0:
            self._fill(size)
            data = self._take(size)
            if not data:
                break
            parts.append(data)
            size -= len(data)
        return b"".join(parts) if len(parts) != 1 else parts[0]

    def readline(self, size: int | None = -1) -> bytes:
        limit = -1 if size is None else size
        want = 1
        while True:
            self._fill(want)
            with self.lock:
                buffered = self.buffered
                ended = self.body_done or self.gone
                line = self._line_end()
            if line >= 0 and (limit < 0 or line <= limit):
                return self._take(line)
            if limit >= 0 and buffered >= limit:
                return self._take(limit)
            if ended or buffered >= _INPUT_HIGH:
                # The end, or a line longer than what is read ahead: returned in pieces.
                return self._take(-1)
            want = buffered + 1

    def readlines(self, hint: int = -1) -> list[bytes]:
        lines = []
        total = 0
        while True:
            line = self.readline()
            if not line:
                return lines
            lines.append(line)
            total += len(line)
            if 0 < hint <= total:
                return lines

    def __iter__(self):
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line


class Pool:
    """The threads that run the app, at most `size`, started as requests need them.

    Under the GIL more threads only help an app that blocks (a database, a remote
    call): for one that computes they take turns with the loop's thread and each other,
    and throughput falls (Flask 'hello': 10.6k req/s with 2 threads, 7.0k with 8, here).
    So the first `_HOT` threads start at once, and another only when every thread has
    been on its current request for more than `_STUCK` seconds while using less than
    half of that on the CPU (it waits on I/O, not computing, and not only for the GIL,
    which a few switch intervals bound); a timer looks again while requests wait.
    """

    __slots__ = ("size", "jobs", "idle", "threads", "loop", "recheck")

    def __init__(self, size: int, loop) -> None:
        self.size = size
        self.loop = loop
        self.jobs = queue.SimpleQueue()
        self.idle = []  # one entry per thread waiting for a job (list append/pop are atomic)
        self.threads = []  # [started_at of the current request, or 0.0 when idle] per thread
        self.recheck = None

    def submit(self, job) -> None:
        self.jobs.put(job)
        if len(self.idle) >= self.jobs.qsize() or len(self.threads) >= self.size:
            return
        if len(self.threads) < _HOT or self._all_stuck():
            self._spawn()
        elif self.recheck is None:
            self.recheck = self.loop.call_later(_STUCK, self._recheck)

    def _all_stuck(self) -> bool:
        """Whether every thread waits on something else than the GIL: on its request for
        over `_STUCK`, having spent less than half of the time since this method last
        sampled it on the CPU (at least `_STUCK` / 2 ago, on the same request). (A thread
        waiting for the GIL spends no CPU either, but not for longer than a few switch
        intervals.) The thread's CPU clock is read here, on the rare look at a long
        request, not by the worker per request: reading it is a system call."""
        now = time.perf_counter()
        stuck = True
        for state in self.threads:
            started, clock, sampled_for, sampled_at, cpu_then = state
            if not started or now - started < _STUCK:
                return False
            if sampled_for == started and now - sampled_at < _STUCK / 2:
                stuck = False  # too soon after the last sample to tell
                continue
            try:
                cpu = time.clock_gettime(clock)
            except OSError:  # the thread is gone
                return False
            state[2:] = started, now, cpu
            if sampled_for != started or cpu - cpu_then > (now - sampled_at) / 2:
                stuck = False  # a first sample of this request, or computing
        return stuck

    def _recheck(self) -> None:
        self.recheck = None
        if len(self.idle) >= self.jobs.qsize() or len(self.threads) >= self.size:
            return
        if self._all_stuck():
            self._spawn()
        self.recheck = self.loop.call_later(_STUCK, self._recheck)

    def _spawn(self) -> None:
        state = [0.0, time.CLOCK_THREAD_CPUTIME_ID, 0.0, 0.0, 0.0]
        self.threads.append(state)
        thread = threading.Thread(target=self._work, args=(state,), name=f"zigcorn-wsgi-{len(self.threads)}",
                                  daemon=True)  # fmt: skip
        thread.start()

    def _work(self, state: list) -> None:
        """`state`: [when the current request started or 0.0, this thread's CPU clock, and
        `_all_stuck`'s last sample of it: the request's start then, the time, the CPU time]."""
        get = self.jobs.get
        idle = self.idle
        clock = time.perf_counter
        state[1] = time.pthread_getcpuclockid(threading.get_ident())
        while True:
            idle.append(None)
            job = get()
            idle.pop()
            if job is None:
                return
            state[0] = clock()
            try:
                job()
            except BaseException:  # KeyboardInterrupt/SystemExit from an app: logged, the thread goes on
                logger.exception("WSGI worker thread")
            state[0] = 0.0
            del job

    def shutdown(self) -> None:
        if self.recheck is not None:
            self.recheck.cancel()
            self.recheck = None
        for _ in self.threads:
            self.jobs.put(None)


class WSGIDispatcher(Admission):
    """The engine's on_request for a WSGI app: each request becomes a job for the pool.

    The operations flags behave as for an ASGI app (`zigcorn.protocols.http.Dispatcher`):
    --drain-path is answered here (the app never sees it), --limit-concurrency,
    --limit-max-requests and --timeout-request apply, and each request runs in a copy of
    the server's `contextvars` context (a fresh, empty one with --reset-contextvars), so
    that what one request sets is never seen by the next one on the same thread.
    """

    __slots__ = ("app", "loop", "outbox", "pool", "access_log", "timeout_request", "cond", "lock", "context")

    def __init__(self, app, loop, *, threads: int, access_log: bool, limit_concurrency, limit_max_requests,
                 timeout_request, on_limit, reset_contextvars: bool = False, drain_path: str | None = None,
                 admin_token: str | None = None, on_drain=None) -> None:  # fmt: skip
        super().__init__(limit_concurrency=limit_concurrency, limit_max_requests=limit_max_requests,
                         on_limit=on_limit, drain_path=drain_path, admin_token=admin_token, on_drain=on_drain)
        self.app = app
        self.loop = loop
        self.outbox = Outbox(loop)
        self.pool = Pool(threads, loop)
        # What a worker waits on (body bytes read ahead, room for output): each rechecks its own exchange.
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.access_log = access_log
        self.timeout_request = timeout_request
        # The server's context as it starts serving (what the app's import set), copied per
        # request; None: --reset-contextvars, an empty one per request.
        self.context = None if reset_contextvars else contextvars.copy_context()

    def __call__(self, stream) -> None:
        if not self.admit(stream):
            return
        environ = stream.scope
        exchange = Exchange(stream, self)
        if self.access_log:
            exchange.started_at = time.perf_counter()
        environ["wsgi.input"] = exchange
        if self.timeout_request is not None:
            exchange.timer = self.loop.call_later(self.timeout_request, exchange.expire, self.timeout_request)
        context = contextvars.Context() if self.context is None else self.context.copy()
        job = lambda: context.run(run, self.app, exchange)  # noqa: E731
        length = environ.get("CONTENT_LENGTH")
        if length is not None or "HTTP_TRANSFER_ENCODING" in environ or environ["SERVER_PROTOCOL"] == "HTTP/2":
            # A body that fits the read-ahead is read before a thread is given the request:
            # the app finds it whole and no thread waits on the client (granian does the same).
            whole = length is not None and length.isdigit() and int(length) <= _INPUT_HIGH
            if whole:
                exchange.deferred = job
            exchange.pump()
            if whole:
                return  # pump() submits the job once the body is in
        else:
            exchange.body_done = True
        self.pool.submit(job)

    def _is_drain_request(self, stream) -> bool:
        environ = stream.scope
        return environ["SCRIPT_NAME"] + environ["PATH_INFO"] == self.drain_path

    def _drain_request(self, stream) -> None:
        """--drain-path: the same answers as for an ASGI app (`admission.answer_drain`)."""
        environ = stream.scope
        client = environ.get("REMOTE_ADDR")
        client_addr = f"{client}:{environ.get('REMOTE_PORT')}" if client else "-"
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1")
        answer_drain(stream, environ["REQUEST_METHOD"], given, client_addr, self.admin_token, self.on_drain)


def run(app, exchange: Exchange) -> None:
    """One request, in a worker thread."""
    environ = exchange.stream.scope
    result = None

    def write(data: bytes) -> None:
        if type(data) is not bytes:
            raise TypeError(f"WSGI write() takes bytes, not {type(data).__name__}")
        exchange.send(data)

    def start_response(status, headers, exc_info=None):
        if exc_info is not None:
            try:
                if exchange.head_sent:
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None
        elif exchange.status is not None:
            raise AssertionError("start_response() called again without exc_info")
        code = _check_status(status)
        exchange.headers, exchange.length = _encode_headers(headers)
        exchange.status = code
        return write

    failed = False
    try:
        result = app(environ, start_response)
        path = None
        if type(result) is FileWrapper and exchange.status is not None and not exchange.head_sent:
            path = result.path()
        if path is not None:
            exchange.head_sent = exchange.final_sent = True
            exchange._post(exchange.status, exchange.headers, b"", False, path)
            exchange.flushed()  # the engine opened the file: it may be closed now
        else:
            if type(result) in (list, tuple) and len(result) == 1 and exchange.length is None:
                # One chunk: sent with its content-length, as one write.
                chunk = result[0]
                if type(chunk) is not bytes:
                    raise TypeError(f"WSGI body chunks must be bytes, not {type(chunk).__name__}")
                if exchange.status is None:
                    raise AssertionError("the WSGI app returned without calling start_response()")
                if not exchange.head_sent:
                    exchange.length = len(chunk)
                exchange.send(chunk)
            else:
                for chunk in result:
                    if type(chunk) is not bytes:
                        raise TypeError(f"WSGI body chunks must be bytes, not {type(chunk).__name__}")
                    exchange.send(chunk)
                    if exchange.gone:
                        break
            if exchange.status is None:
                raise AssertionError("the WSGI app returned without calling start_response()")
            if not exchange.gone:
                exchange.end()
    except BaseException as exc:  # the worker must survive anything an app raises
        failed = True
        if not exchange.gone:
            logger.error("Exception in WSGI application\n", exc_info=exc)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            try:
                close()
            except Exception as exc:
                failed = True
                logger.error("Exception in the WSGI iterable's close()\n", exc_info=exc)
        # Head sent but the body failed: complete() cuts the connection; nothing sent: a 500.
        exchange.outbox.post(exchange.complete, failed and not exchange.final_sent)
        del result


def environ_template(root_path: str, workers: int) -> dict:
    """The constant keys of every environ (the engine copies this dict per request)."""
    return {
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": workers > 1,
        "wsgi.run_once": False,
        # wsgi.input ends where the body ends (b""), so frameworks need not count (werkzeug reads it whole).
        "wsgi.input_terminated": True,
        "wsgi.errors": ErrorStream(),
        "wsgi.file_wrapper": FileWrapper,
        "SCRIPT_NAME": root_path.rstrip("/"),
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "0",
    }


def set_server(template: dict, bound) -> None:
    """SERVER_NAME and SERVER_PORT from the bound address (a Unix socket keeps the defaults)."""
    if bound:
        template["SERVER_NAME"], template["SERVER_PORT"] = bound[0], str(bound[1])


__all__ = ["WSGIDispatcher", "environ_template", "default_threads", "set_server", "FileWrapper", "ErrorStream"]

if sys.version_info < (3, 11):  # pragma: no cover
    raise ImportError("zigcorn needs Python 3.11 or newer")
