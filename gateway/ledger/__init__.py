"""Task ledgers and :func:`ledger_from_url`, which picks one from a URL.

========================  =====================================================================
URL                       backend
========================  =====================================================================
``memory``                :class:`~gateway.ledger.memory.MemoryLedger` (bounded, one process)
``sqlite:///abs/path.db`` :class:`~gateway.ledger.sqlite.SqliteLedger` at an absolute path
``sqlite:rel/path.db``    the same at a path relative to the working directory
``redis://HOST:PORT/DB``  :class:`~gateway.ledger.redis.RedisLedger` (``rediss://`` for TLS)
========================  =====================================================================
"""

from __future__ import annotations

from pathlib import Path

from gateway.errors import VersionConflictError
from gateway.ledger.base import Stored, TaskLedger, WindowLimits

__all__ = ["Stored", "TaskLedger", "VersionConflictError", "ledger_from_url", "redact", "sqlite_path"]


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and printed config)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"


def sqlite_path(url: str) -> Path:
    """The file path of a ``sqlite:`` URL (``sqlite:///abs`` or ``sqlite:rel``)."""
    rest = url.removeprefix("sqlite:").removeprefix("//")
    if rest.startswith("/"):
        rest = "/" + rest.lstrip("/")  # sqlite:///abs and sqlite:////abs both mean /abs
    return Path(rest)


def ledger_from_url(url: str, *, max_tasks: int = 100_000, window: WindowLimits | None = None) -> TaskLedger:
    """Build (but do not open) the ledger a URL names; ``window`` bounds its replay window
    (default :class:`~gateway.ledger.base.WindowLimits`).

    Raises:
        ValueError: an unknown scheme or an empty path.
    """
    if url in ("memory", "memory:", "memory://"):
        from gateway.ledger.memory import MemoryLedger

        return MemoryLedger(max_tasks, window)
    if url.startswith("sqlite:"):
        path = sqlite_path(url)
        if not str(path) or str(path) == ".":
            raise ValueError(f"{url}: no database path")
        from gateway.ledger.sqlite import SqliteLedger

        return SqliteLedger(path, window=window)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from gateway.ledger.redis import RedisLedger

        return RedisLedger(url, window=window)
    raise ValueError(f"{url}: unknown ledger URL (use memory, sqlite:///PATH or redis://HOST:PORT/DB)")
