"""The A2A protocol versions and bindings the gateway speaks (docs/protocol.md §1.1, §5, §11
pitfall 1). Pure.

One JSON-RPC endpoint can serve both: the method name tells them apart (``SendMessage`` is
v1.0, ``message/send`` v0.3), the URL alone does not.
"""

from __future__ import annotations

import enum


class ProtocolVersion(enum.StrEnum):
    """The A2A protocol major.minor a client or exchange speaks."""

    V0_3 = "0.3"
    V1_0 = "1.0"


class Binding(enum.StrEnum):
    """The A2A protocol binding a client request came over (docs/protocol.md §1.1); the value
    is the ``binding`` label of the request metrics and log lines."""

    JSONRPC = "jsonrpc"
    REST = "rest"
