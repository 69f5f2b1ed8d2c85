"""Every exception the gateway defines, in one tree. Invariant violations are never raised:
they are :class:`~gateway.invariants.model.Finding` values (docs/architecture.md, convention 6).

::

    GatewayError
    ├── ConfigError              the configuration file or flags are invalid
    ├── UpstreamError            the worker could not be reached or answered unusably
    ├── LedgerError              the task ledger failed
    ├── PidFileHeldError         another gateway holds the pid file (``serve`` exits 3)
    ├── VersionConflictError     a ledger compare-and-set lost a race (retried, not a failure)
    ├── BridgeError              a request that has no equivalent in the worker's protocol version
    ├── PushLimitError           the push outbox or the relayed push configs are full
    ├── ClientError              a client request the gateway answers itself
    │   ├── BodyTooLargeError    the body passed ``limits.max_body_bytes`` (HTTP 413)
    │   ├── ClientGoneError      the client left before its body was complete
    │   ├── BodyBudgetError      the bodies in flight passed ``limits.max_inflight_body_bytes`` (HTTP 503)
    │   └── BadPathError         a path that would leave its mount (HTTP 400)
    ├── ProtocolError            a payload that breaks the A2A wire format
    │   ├── UnknownStateError    a taskState outside the spelling table: refused, never guessed
    │   ├── EventTooLargeError   an SSE event over ``limits.max_event_bytes``
    │   ├── NestingTooDeepError  a JSON body nested deeper than ``limits.max_json_depth``
    │   └── UnencodableError     a JSON value nested deeper than the gateway can write
    └── TranscriptError          a replay transcript line is malformed

``BadPathError``, ``ProtocolError`` and ``TranscriptError`` are also ``ValueError``\\ s. Pure:
no imports, so the protocol core (``gateway/a2a``) and the exchange layer raise them too.
"""

from __future__ import annotations


class GatewayError(Exception):
    """Base of every error the gateway raises about itself."""


class ConfigError(GatewayError):
    """Invalid configuration; ``problems`` holds one ``yaml.path: message`` line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


POOL_EXHAUSTED = "pool_exhausted"
"""The :class:`UpstreamError` reason of a request that got no pooled connection to its worker
(the gateway at capacity, not a failure of the worker's)."""


class UpstreamError(GatewayError):
    """The worker failed at the transport level.

    ``reason`` is a metric label: ``connect``, ``timeout``, ``protocol``, ``status``,
    ``invalid_response``, ``answer_too_large``, ``nesting_too_deep`` — or ``pool_exhausted``,
    which is no failure of the worker: the gateway had no free pooled connection to it
    ("gateway at capacity"). ``http_status`` is what the gateway answers (502, 504; 503 for
    ``pool_exhausted``); ``retry_after`` the seconds of the answer's ``Retry-After`` header
    (``None``: none).
    """

    def __init__(self, reason: str, message: str, *, http_status: int = 502,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.http_status = http_status
        self.retry_after = retry_after


class LedgerError(GatewayError):
    """The ledger could not read or store a record."""


class PidFileHeldError(GatewayError):
    """Another gateway holds the pid file's lock. ``path``: the file, absolute; ``pid``: the
    holder's pid as the file gives it (``None`` when it holds none yet, or no longer)."""

    def __init__(self, path: str, pid: int | None) -> None:
        holder = "another a2a-gateway" if pid is None else f"another a2a-gateway (pid {pid})"
        super().__init__(f"{holder} holds {path}: stop it first, or give it another ledger/pid_file")
        self.path = path
        self.pid = pid


class VersionConflictError(GatewayError):
    """``put`` lost a compare-and-set race: the stored version was not ``expected_version``."""


class BridgeError(GatewayError):
    """A request that has no equivalent in the worker's protocol version (docs/bridge.md §1.9).

    ``code`` is the A2A / JSON-RPC error code the client gets (-32004 UnsupportedOperation for
    an operation the worker's version lacks, -32602 for a request that cannot be expressed
    there); ``message`` is the text of that error.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class PushLimitError(GatewayError):
    """A bound of the push relay is reached (outbox or configs, docs/push.md §3); nothing was added."""


class ClientError(GatewayError):
    """A client request the gateway answers itself, without forwarding it."""


class BodyTooLargeError(ClientError):
    """The client's request body passed ``max_body_bytes``; answer HTTP 413."""


class BodyBudgetError(ClientError):
    """The client request bodies this process holds would pass
    ``limits.max_inflight_body_bytes``; answer HTTP 503 with ``Retry-After``."""


class ClientGoneError(ClientError):
    """The client disconnected before its request body was complete; nothing is forwarded."""


class BadPathError(ClientError, ValueError):
    """A request path the gateway refuses (HTTP 400): dot segments, or a path that would not
    stay below the mount and on the configured upstream host."""


class ProtocolError(GatewayError, ValueError):
    """A payload that breaks the A2A wire format (docs/protocol.md)."""


class UnknownStateError(ProtocolError):
    """A taskState string outside the alias table (docs/field-cases.md F03: refused, never
    guessed). ``raw`` holds the offending value for logs; it must never become a metric label."""

    def __init__(self, raw: object) -> None:
        super().__init__(f"unknown task state {raw!r}")
        self.raw = raw


class EventTooLargeError(ProtocolError):
    """The SSE event being assembled passed the decoder's ``max_event_bytes`` cap (F09)."""


class NestingTooDeepError(ProtocolError):
    """A JSON body (a client's request or a worker's answer) nests objects and arrays deeper
    than ``limits.max_json_depth``; refused before any recursive code reads it."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels (limits.max_json_depth)")
        self.limit = limit


class UnencodableError(ProtocolError):
    """A JSON value the gateway had to write (a worker payload it changed) is nested deeper
    than its encoders go; the payload is refused as an invalid agent response, never a 500."""


class TranscriptError(GatewayError, ValueError):
    """A transcript line is not valid JSON or lacks a required member; names the line."""
