"""The gateway's pid file (``listen.pid_file``, ``serve --pid-file``): held locked while the
gateway runs, so that a second gateway given the same file refuses to start.

``serve`` — the supervisor under ``--workers N``, the one process otherwise — opens the file,
takes an exclusive ``flock`` without waiting, writes its pid and keeps the lock until it exits.
By default the file is ``<db path>.pid`` beside a SQLite ledger (:func:`default_pid_file`), so
two gateways on one ledger file (and, in practice, one port) cannot both run; with a memory or
Redis ledger there is none unless one is given. The kernel drops the lock when the process ends
however it ends, ``kill -9`` included: a restart never finds a stale lock.

Only the lock says whether a gateway runs, never the file's existence or content. The file is
never deleted: a gateway deleting it at exit could leave a starting successor holding the lock
of a deleted file while a third gateway creates the file anew and locks that one — two
gateways, each holding "the" lock. At a clean exit the file is emptied instead (the lock still
held), so a pid in a file nobody holds is a gateway that was killed. The lock's descriptor is
not inherited across ``exec`` (PEP 446; ``subprocess`` passes only ``pass_fds``), so the
workers of ``--workers N`` never hold it; they do not take it either (``gateway.cli``).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from gateway.errors import PidFileHeldError


def default_pid_file(ledger_url: str) -> Path | None:
    """``<db path>.pid`` for a ``sqlite:`` ledger URL (the same directory, relative paths
    relative to the working directory); ``None`` for a memory or Redis ledger."""
    if not ledger_url.startswith("sqlite:"):
        return None
    from gateway.ledger import sqlite_path

    db = sqlite_path(ledger_url)
    return db.with_name(db.name + ".pid")


class PidFile:
    """The pid file at ``path``, locked by this process from construction to :meth:`release`.

    The file (mode 0644) and its directory are created when missing.

    Raises:
        PidFileHeldError: another process holds the lock (``pid``: the pid it wrote).
        OSError: the file cannot be created, opened or locked (a read-only directory, a path
            through a regular file, a file system without locks).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = os.path.abspath(path)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = os.pread(fd, 32, 0).strip()
            os.close(fd)
            raise PidFileHeldError(self.path, int(held) if held.isdigit() else None) from None
        except BaseException:
            os.close(fd)
            raise
        mine = f"{os.getpid()}\n".encode()
        os.pwrite(fd, mine, 0)  # then cut what a longer, killed predecessor's pid left behind
        os.ftruncate(fd, len(mine))
        self._fd = fd

    def release(self) -> None:
        """Empty the file, then close it, which drops the lock (call once, at a clean exit)."""
        os.ftruncate(self._fd, 0)
        os.close(self._fd)
