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


def version_family(a2a_version: str) -> str:
    """``"1.0"`` for a client of major version 1 or later, ``"0.3"`` for an explicit 0.x,
    ``""`` for none (which means 0.3 too, sent without the header) or an unreadable value —
    only the major version decides (docs/protocol.md §5), so whatever clients send maps to
    one of three values (the card cache keeps at most that many variants per upstream)."""
    text = a2a_version.strip()
    major = text.split(".")[0]
    if major.isdigit() and int(major) >= 1:
        return "1.0"
    return "0.3" if major == "0" else ""
