"""Process management: the pid file, process titles, dropping privileges, reading memory.

Nothing here is imported unless a setting asks for it (or the master tends workers), and
it needs nothing beyond the standard library: `setproctitle` is used when installed.
"""

from __future__ import annotations

import logging
import os
import signal

logger = logging.getLogger("zigcorn.error")

PR_SET_NAME = 15
# Under --workers, the master passes a --drain-path request on to every worker with this
# signal (their delay is then --drain-delay, not SIGTERM's --shutdown-delay).
DRAIN_SIGNAL = signal.SIGUSR2
_COMM_MAX = 15  # the kernel's task name holds 15 bytes and a NUL


# ---- the pid file ------------------------------------------------------------------


class PidFile:
    """``--pid-file``: written once the socket is bound, removed at a clean exit.

    Written to a temporary name and renamed, so a reader never sees it half written.
    Removed only if it still holds our pid (a second server may have taken it over), and
    through a descriptor of its directory opened before privileges were dropped: then
    only the directory itself must let ``--user`` remove files, not every folder above.
    """

    __slots__ = ("path", "pid", "name", "dir_fd")

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.pid = 0
        self.dir_fd = -1
        self.name = os.path.basename(self.path)

    def write(self) -> None:
        self.pid = os.getpid()
        self.dir_fd = os.open(os.path.dirname(self.path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        temporary = f".{self.name}.{self.pid}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644, dir_fd=self.dir_fd)
        try:
            os.write(fd, f"{self.pid}\n".encode())
        finally:
            os.close(fd)
        os.replace(temporary, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)

    def remove(self) -> None:
        if not self.pid or os.getpid() != self.pid or self.dir_fd < 0:
            return  # never from a forked worker
        try:
            fd = os.open(self.name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.dir_fd)
            try:
                mine = os.read(fd, 64).strip() == str(self.pid).encode()
            finally:
                os.close(fd)
            if mine:
                os.unlink(self.name, dir_fd=self.dir_fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("Could not remove the pid file %s: %s", self.path, exc.strerror or exc)
        finally:
            os.close(self.dir_fd)
            self.dir_fd = -1


def write_pid_file(path: str | None) -> PidFile | None:
    """The pid file for `path`, written; None without one. Raises OSError with a clear message."""
    if path is None:
        return None
    pid_file = PidFile(path)
    try:
        pid_file.write()
    except OSError as exc:
        raise OSError(exc.errno, f"Cannot write the pid file {pid_file.path}: {exc.strerror or exc}") from None
    return pid_file


def wants_privilege_drop(config) -> bool:
    return config.user is not None or config.group is not None or config.umask is not None


def after_bind(config):
    """What a process that bound its own socket does next: write the pid file (while it may
    still write where root may), then give up root. Returns the pid file; raises OSError."""
    pid_file = None
    if config.pid_file is not None:
        pid_file = write_pid_file(config.pid_file)
    if wants_privilege_drop(config):
        try:
            drop_privileges(config.user, config.group, config.umask)
        except OSError:
            if pid_file is not None:
                pid_file.remove()
            raise
    return pid_file


# ---- process titles ----------------------------------------------------------------


def set_title(title: str) -> None:
    """Name this process `title` in ps and top.

    With `setproctitle` installed, it does everything. Without it, the kernel's task name
    (``/proc/<pid>/comm``, what ``top`` and ``ps -o comm`` show, 15 bytes) is set with
    ``prctl(PR_SET_NAME)``, and the command line (``/proc/<pid>/cmdline``, what ``ps``
    shows) is rewritten in place, within the bytes the original command line occupied.
    Python keeps its own copy of ``sys.argv``, so nothing reads that memory again.
    """
    try:
        from setproctitle import setproctitle
    except ImportError:
        pass
    else:
        setproctitle(title)
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_NAME, ctypes.c_char_p(title.encode()[:_COMM_MAX]), 0, 0, 0)
    except (OSError, AttributeError):
        return
    _rewrite_cmdline(title.encode(), ctypes)


def _rewrite_cmdline(title: bytes, ctypes) -> None:
    try:
        with open("/proc/self/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
        # Fields 48 and 49 of stat (arg_start, arg_end), counted from after the command name.
        start, end = int(fields[45]), int(fields[46])
    except (OSError, IndexError, ValueError):
        return
    size = end - start
    if size <= 1 or start == 0:
        return
    data = title[: size - 1]
    # NULs to the end: the kernel then shows exactly the title (its last byte stays NUL).
    ctypes.memmove(start, data + b"\0" * (size - len(data)), size)


# ---- privileges --------------------------------------------------------------------


class Identity:
    """``--user`` / ``--group`` resolved to ids (names or numbers), checked at configuration."""

    __slots__ = ("uid", "gid", "user_name", "description")

    def __init__(self, user, group) -> None:
        import grp
        import pwd

        self.uid = None
        self.gid = None
        self.user_name = None
        if user is not None:
            entry = _lookup(pwd.getpwnam, pwd.getpwuid, user, "user")
            if entry is not None:
                self.uid, self.gid, self.user_name = entry.pw_uid, entry.pw_gid, entry.pw_name
            else:
                self.uid = int(user)
        if group is not None:
            entry = _lookup(grp.getgrnam, grp.getgrgid, group, "group")
            self.gid = entry.gr_gid if entry is not None else int(group)
        self.description = ", ".join(
            part for part in (
                f"user {self.user_name or self.uid}" if self.uid is not None else "",
                f"group {self.gid}" if self.gid is not None else "",
            ) if part
        )  # fmt: skip


def _lookup(by_name, by_id, value, what: str):
    """The passwd/group entry of a name or number; None for a number with no entry; else ValueError."""
    text = str(value)
    if text.isdigit():
        try:
            return by_id(int(text))
        except KeyError:
            return None
    try:
        return by_name(text)
    except KeyError:
        raise ValueError(f"{what} {text!r} does not exist") from None


def drop_privileges(user, group, umask) -> None:
    """Become `user`/`group` (after binding: ports below 1024 need root only for that).

    Supplementary groups first (the user's own, or none), then the group, then the user:
    once the user id changes, the groups can no longer be changed. Raises OSError saying
    what could not be done.
    """
    if umask is not None:
        os.umask(umask)
    if user is None and group is None:
        return
    identity = Identity(user, group)
    if os.geteuid() != 0 and (identity.uid not in (None, os.geteuid()) or identity.gid not in (None, os.getegid())):
        raise OSError(f"--user/--group need root to switch to {identity.description} (running as uid {os.geteuid()})")
    try:
        if identity.gid is not None:
            if identity.user_name is not None and identity.uid is not None:
                os.initgroups(identity.user_name, identity.gid)
            else:
                os.setgroups([identity.gid])
            os.setgid(identity.gid)
        if identity.uid is not None:
            os.setuid(identity.uid)
    except OSError as exc:
        raise OSError(f"Cannot switch to {identity.description}: {exc.strerror or exc}") from None
    if identity.uid not in (None, 0):
        try:  # a process that gave up root must not be able to take it back
            os.setuid(0)
        except PermissionError:
            pass
        else:
            raise OSError("Dropping privileges failed: root could be regained")
    logger.info("Running as uid %d, gid %d", os.getuid(), os.getgid())


# ---- memory ------------------------------------------------------------------------


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes(pid: int) -> int | None:
    """Resident memory of `pid` from ``/proc/<pid>/statm``; None once it is gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as file:
            return int(file.read().split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return None
