"""Task ledgers and :func:`ledger_from_url`, which picks one from a URL.

===============================================  ==============================================
URL                                              backend
===============================================  ==============================================
``memory``                                       :class:`~gateway.ledger.memory.MemoryLedger`
                                                 (bounded, one process)
``sqlite:///abs/path.db``                        :class:`~gateway.ledger.sqlite.SqliteLedger` at
                                                 an absolute path
``sqlite:rel/path.db``                           the same at a path relative to the working
                                                 directory
``redis://[USER:PASS@]HOST:PORT/DB``             :class:`~gateway.ledger.redis.RedisLedger`
                                                 (``rediss://`` for TLS, ``unix://``)
``redis+sentinel://[USER:PASS@]H:P,H:P/NAME/DB`` the same, the primary found through Sentinels
                                                 (``rediss+sentinel://`` for TLS)
``redis+cluster://[USER:PASS@]H:P[,H:P…]``       :class:`~gateway.ledger.redis_cluster.RedisClusterLedger`
                                                 (Redis Cluster; ``rediss+cluster://`` for TLS)
===============================================  ==============================================
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gateway.errors import VersionConflictError
from gateway.ledger.base import Stored, TaskLedger, TimelineLimits, WindowLimits
from gateway.ledger.urls import redact

if TYPE_CHECKING:
    from gateway.ledger.redis import RedisOptions

__all__ = ["Stored", "TaskLedger", "VersionConflictError", "ledger_from_url", "redact", "sqlite_path"]


def sqlite_path(url: str) -> Path:
    """The file path of a ``sqlite:`` URL (``sqlite:///abs`` or ``sqlite:rel``)."""
    rest = url.removeprefix("sqlite:").removeprefix("//")
    if rest.startswith("/"):
        rest = "/" + rest.lstrip("/")  # sqlite:///abs and sqlite:////abs both mean /abs
    return Path(rest)


def ledger_from_url(url: str, *, max_tasks: int = 100_000, window: WindowLimits | None = None,
                    redis: RedisOptions | None = None, timeline: TimelineLimits | None = None) -> TaskLedger:
    """Build (but do not open) the ledger a URL names; ``window`` bounds its replay window
    (default :class:`~gateway.ledger.base.WindowLimits`), ``timeline`` its task timeline
    (default :class:`~gateway.ledger.base.TimelineLimits`), ``redis`` gives a Redis ledger its
    authentication and replica acknowledgement (:class:`~gateway.ledger.redis.RedisOptions`,
    default none).

    Raises:
        ValueError: an unknown scheme, an empty path, a Redis URL that does not parse, or
            ``redis.min_replica_acks`` > 0 with a ``redis+cluster://`` URL.
    """
    ledger = _ledger_from_url(url, max_tasks=max_tasks, window=window, redis=redis)
    if timeline is not None:
        ledger.timeline_limits = timeline  # type: ignore[attr-defined]  # every backend has it
    return ledger


def _ledger_from_url(url: str, *, max_tasks: int, window: WindowLimits | None,
                     redis: RedisOptions | None) -> TaskLedger:
    if url in ("memory", "memory:", "memory://"):
        from gateway.ledger.memory import MemoryLedger

        return MemoryLedger(max_tasks, window)
    if url.startswith("sqlite:"):
        path = sqlite_path(url)
        if not str(path) or str(path) == ".":
            raise ValueError(f"{url}: no database path")
        from gateway.ledger.sqlite import SqliteLedger

        return SqliteLedger(path, window=window)
    if url.startswith(("redis+cluster://", "rediss+cluster://")):
        from gateway.ledger.redis_cluster import RedisClusterLedger

        return RedisClusterLedger(url, window=window, options=redis)
    if url.startswith(("redis://", "rediss://", "unix://", "redis+sentinel://", "rediss+sentinel://")):
        from gateway.ledger.redis import RedisLedger

        return RedisLedger(url, window=window, options=redis)
    raise ValueError(f"{redact(url)}: unknown ledger URL (use memory, sqlite:///PATH, "
                     "redis://HOST:PORT/DB, redis+sentinel://HOST:PORT,…/SERVICE/DB or "
                     "redis+cluster://HOST:PORT,…)")
