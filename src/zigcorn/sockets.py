"""Listening sockets: made here, in Python, once; then handed to the engine.

One place decides where the server listens, in this order: an inherited ``--fd``,
a Unix socket ``--uds``, sockets passed by systemd (``LISTEN_FDS``), else TCP on
``--host``/``--port``. The master of ``--workers`` binds before forking so every
worker accepts from the same socket; ``--reuse-port`` has each worker bind its own.
"""

from __future__ import annotations

import logging
import os
import socket
import stat

logger = logging.getLogger("zigcorn.error")

SD_LISTEN_FDS_START = 3  # systemd's first passed descriptor (sd_listen_fds(3))


class Listener:
    """A bound, listening socket and how to describe and clean it up.

    A plain class, not a dataclass: ``dataclasses`` imports ``inspect`` (with ``ast`` and
    ``dis``), about 1 MiB that a serving process otherwise never needs.
    """

    __slots__ = ("sock", "description", "uds_path", "uds_inode")

    def __init__(
        self, sock: socket.socket, description: str, uds_path: str | None = None, uds_inode: int | None = None
    ) -> None:
        self.sock = sock
        # Shown in the "running on" line, e.g. "http://127.0.0.1:8000" or "unix socket /run/app.sock".
        self.description = description
        # The Unix socket path we created, removed again on exit (only by the process that made it).
        self.uds_path = uds_path
        self.uds_inode = uds_inode

    def __repr__(self) -> str:
        return f"Listener({self.description!r}, fd={self.sock.fileno()})"

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def remove_uds(self) -> None:
        """Unlink our socket file, unless another server has replaced it since."""
        if self.uds_path is None:
            return
        try:
            if os.stat(self.uds_path).st_ino == self.uds_inode:
                os.unlink(self.uds_path)
        except OSError:
            pass


def resolve_host(host: str) -> str:
    """IP literals pass through; names are resolved once, at start-up."""
    if host == "localhost":
        return "127.0.0.1"
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return host
    except OSError:
        pass
    return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]


def url(scheme: str, host: str, port: int) -> str:
    """``http://127.0.0.1:8000``, with brackets around an IPv6 address."""
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


def scheme_of(config) -> str:
    return "https" if getattr(config, "is_ssl", False) else "http"


def systemd_fds() -> list[int]:
    """Descriptors systemd passed to this very process (socket activation), if any."""
    try:
        if int(os.environ.get("LISTEN_PID", "0")) != os.getpid():
            return []
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        return []
    return list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + max(count, 0)))


def bind(config, *, reuse_port: bool = False) -> Listener:
    """The listening socket `config` asks for. Raises OSError with a one-line message."""
    scheme = scheme_of(config)
    if config.fd is not None:
        return _inherited(config.fd, "file descriptor", scheme)
    if config.uds:
        return _unix(config.uds, config.uds_perms, config.backlog)
    passed = systemd_fds()
    if passed:
        if len(passed) > 1:
            logger.warning("systemd passed %d sockets; serving the first (fd %d) only.", len(passed), passed[0])
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(name, None)  # not for the app, nor for processes it starts
        return _inherited(passed[0], "systemd socket", scheme)
    return _tcp(resolve_host(config.host), config.port, config.backlog, reuse_port or config.reuse_port, scheme)


def _tcp(host: str, port: int, backlog: int, reuse_port: bool, scheme: str) -> Listener:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            # "::" and "0.0.0.0" can then be served side by side, as separate servers.
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        reason = (exc.strerror or str(exc)).lower()
        raise OSError(exc.errno, f"[Errno {exc.errno}] error while attempting to bind on address ({host!r}, {port}): {reason}") from None
    bound_host, bound_port = sock.getsockname()[:2]
    return Listener(sock, url(scheme, bound_host, bound_port))


def _unix(path: str, perms: int, backlog: int) -> Listener:
    _remove_stale_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, perms)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on unix socket {path}: {exc.strerror or exc}") from None
    return Listener(sock, f"unix socket {path}", uds_path=path, uds_inode=os.stat(path).st_ino)


def _remove_stale_socket(path: str) -> None:
    """A socket file left by a server that died is removed; a live one is an error."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(17, f"cannot listen on unix socket {path}: the path exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)  # nobody listens there any more
        return
    except OSError:
        return  # let bind() report what is wrong
    finally:
        probe.close()
    raise OSError(98, f"cannot listen on unix socket {path}: another server is listening there")


def _inherited(fd: int, what: str, scheme: str) -> Listener:
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot use {what} {fd}: {exc.strerror or exc}") from None
    if sock.type != socket.SOCK_STREAM or not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        sock.detach()
        raise OSError(22, f"cannot use {what} {fd}: not a listening stream socket")
    if sock.family == socket.AF_UNIX:
        return Listener(sock, f"unix socket {sock.getsockname()} ({what} {fd})")
    host, port = sock.getsockname()[:2]
    return Listener(sock, f"{url(scheme, host, port)} ({what} {fd})")


class QuicSockets:
    """``--http3``'s UDP sockets: one per worker, bound by the master in worker order on
    one port with SO_REUSEPORT, and kept open by it for as long as it runs.

    The kernel numbers a SO_REUSEPORT group's sockets in the order they joined, and the
    steering program (``_core.quic_steer``) returns that number, read from the connection
    ID's worker byte; when a socket of the group closes, the kernel moves the last one into
    its place. So the master makes them all and never closes one while serving: a worker
    that is replaced gets the same socket, and the order never changes. A single process
    has one socket and no program.
    """

    __slots__ = ("socks", "port", "description")

    def __init__(self, socks: list[socket.socket], port: int, description: str) -> None:
        self.socks = socks
        self.port = port
        self.description = description

    def __len__(self) -> int:
        return len(self.socks)

    def fileno(self, index: int) -> int:
        return self.socks[index].fileno()

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


def bind_quic(config, port: int, workers: int) -> QuicSockets:
    """`workers` UDP sockets on ``--host`` and `port` (``--http3-port`` when given), each
    non-blocking and close-on-exec, steered by connection ID when there are several.
    Raises OSError with a one-line message."""
    assert 1 <= workers <= 255, workers
    host = resolve_host(config.host)
    if config.http3_port is not None:
        port = config.http3_port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    socks: list[socket.socket] = []
    try:
        for _ in range(workers):
            sock = socket.socket(family, socket.SOCK_DGRAM)
            socks.append(sock)
            sock.setblocking(False)
            if workers > 1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as the TCP listener
            sock.bind((host, port))
            port = sock.getsockname()[1]  # port 0: every later socket joins the first one's
        if workers > 1:
            from zigcorn import _core

            _core.quic_steer(socks[0].fileno(), workers)
    except OSError as exc:
        for sock in socks:
            sock.close()
        reason = (exc.strerror or str(exc)).lower()
        raise OSError(exc.errno, f"[Errno {exc.errno}] error while attempting to bind UDP (HTTP/3) on address "
                                 f"({host!r}, {port}): {reason}") from None
    return QuicSockets(socks, port, url("https", host, port) + " (UDP)")
