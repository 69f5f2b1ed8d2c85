"""The A2A protocol versions the gateway speaks (docs/protocol.md §5, §11 pitfall 1). Pure.

One JSON-RPC endpoint can serve both: the method name tells them apart (``SendMessage`` is
v1.0, ``message/send`` v0.3), the URL alone does not.
"""

from __future__ import annotations

import enum


class ProtocolVersion(enum.StrEnum):
    """The A2A protocol major.minor a client or exchange speaks."""

    V0_3 = "0.3"
    V1_0 = "1.0"
