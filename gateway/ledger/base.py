"""The task ledger interface: per-task records behind one small async Protocol.

The ledger stores :class:`~gateway.invariants.model.TaskRecord` values keyed by
(``upstream``, ``task_id``) and updates them with compare-and-set on ``version``, so two
concurrent events for one task can never both win a transition out of the same state.
"""

from __future__ import annotations

from typing import Protocol

from gateway.invariants.model import TaskRecord


class VersionConflictError(Exception):
    """``put`` lost a compare-and-set race: the stored version was not ``expected_version``."""


class TaskLedger(Protocol):
    """Async per-task store. Implementations: :mod:`gateway.ledger.memory`."""

    backend: str

    async def get(self, upstream: str, task_id: str) -> TaskRecord | None:
        """The record of (``upstream``, ``task_id``), or ``None``."""
        ...

    async def put(self, record: TaskRecord, expected_version: int) -> TaskRecord:
        """Store ``record`` if the stored version equals ``expected_version`` (0: absent).

        Returns the stored record with ``version = expected_version + 1``.

        Raises:
            VersionConflictError: another writer got there first; re-read and re-judge.
        """
        ...

    def count_by_state(self) -> dict[str, int]:
        """Tracked tasks by canonical state (for the ``tracked_tasks`` gauge)."""
        ...

    async def close(self) -> None:
        """Release resources."""
        ...
