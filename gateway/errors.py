"""Failures of the gateway itself. Invariant violations are never raised: they are
:class:`~gateway.invariants.model.Finding` values.

::

    GatewayError
    ├── ConfigError        the configuration file or flags are invalid
    ├── UpstreamError      the worker could not be reached or answered unusably
    └── LedgerError        the task ledger failed
"""

from __future__ import annotations


class GatewayError(Exception):
    """Base of every error the gateway raises about itself."""


class ConfigError(GatewayError):
    """Invalid configuration; ``problems`` holds one ``yaml.path: message`` line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class UpstreamError(GatewayError):
    """The worker failed at the transport level.

    ``reason`` is a metric label: ``connect``, ``timeout``, ``protocol``, ``status`` or
    ``invalid_response``. ``http_status`` is what the gateway answers (502 or 504).
    """

    def __init__(self, reason: str, message: str, *, http_status: int = 502) -> None:
        super().__init__(message)
        self.reason = reason
        self.http_status = http_status


class LedgerError(GatewayError):
    """The ledger could not read or store a record."""
