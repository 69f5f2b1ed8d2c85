"""Incremental Server-Sent Events decoder and encoder (sans-I/O).

Implements the WHATWG event-stream parsing rules as used by A2A streaming (docs/protocol.md §7,
§11 pitfalls 5-7; docs/field-cases.md F08, F09): bytes go in as they arrive, complete events and
comments come out. Lines may end in CRLF, LF or CR. An event split across reads is reassembled
and produced once. Comments (``: ping``) come out as :class:`Comment`, never as events.

Encoding always ends a frame with a blank line and uses LF.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

from gateway.errors import EventTooLargeError


@final
@dataclass(frozen=True, slots=True)
class Event:
    """One dispatched SSE event. ``data`` is the joined ``data:`` lines (UTF-8 text)."""

    data: str
    event: str | None = None
    id: str | None = None
    retry: int | None = None


@final
@dataclass(frozen=True, slots=True)
class Comment:
    """An SSE comment line (keep-alive); ``text`` excludes the leading colon."""

    text: str


class SSEDecoder:
    """Bytes in, :class:`Event` / :class:`Comment` out.

    Args:
        max_event_bytes: cap on the bytes of one pending event (and one pending line);
            exceeding it raises :class:`EventTooLargeError` from :meth:`feed`.
    """

    def __init__(self, max_event_bytes: int = 8 * 1024 * 1024) -> None:
        self._max = max_event_bytes
        self._buf = bytearray()
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None
        self._pending = 0
        self._saw_field = False
        self._last_cr = False
        self._started = False

    def feed(self, chunk: bytes) -> list[Event | Comment]:
        """Consume ``chunk`` and return every event and comment it completes, in order.

        Line ends are made LF first (every CR is a line end, CRLF one; a CRLF split across
        reads is remembered), then the complete lines are split out in one go.
        """
        out: list[Event | Comment] = []
        if not chunk:
            return out
        if not self._started:
            self._started = True
            chunk = chunk.removeprefix(b"\xef\xbb\xbf")  # a leading BOM is not part of a field
        if self._last_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CRLF split across reads
        self._last_cr = chunk.endswith(b"\r")
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf
        buf += chunk
        end = buf.rfind(b"\n")
        if end >= 0:
            lines = bytes(buf[:end]).split(b"\n")
            del buf[: end + 1]
            line = self._line
            for text in lines:
                line(text, out)
        if len(buf) + self._pending > self._max:
            raise EventTooLargeError(f"SSE event exceeds {self._max} bytes")
        return out

    @property
    def has_pending(self) -> bool:
        """True when bytes of an unfinished event remain (a frame with no closing blank line)."""
        tail = bytes(self._buf).strip()
        return self._saw_field or (bool(tail) and not tail.startswith(b":"))

    def flush(self) -> Event | None:
        """At EOF: the dangling last event, if its fields are complete lines or a final line.

        WHATWG discards such an event; the gateway offers it to the caller, which decides
        (F08 (i)). Resets the decoder.
        """
        out: list[Event | Comment] = []
        if self._buf:
            self._line(bytes(self._buf), out)
            self._buf.clear()
        self._line(b"", out)
        return next((e for e in out if isinstance(e, Event)), None)

    def _line(self, line: bytes, out: list[Event | Comment]) -> None:
        if not line:
            if self._saw_field:
                if self._data:
                    out.append(Event("\n".join(self._data), self._event, self._id, self._retry))
                self._data, self._event, self._retry = [], None, None
                self._pending = 0
                self._saw_field = False
            return
        text = line.decode("utf-8", errors="replace")
        if text.startswith(":"):
            out.append(Comment(text[1:].removeprefix(" ")))
            return
        name, sep, value = text.partition(":")
        if sep:
            value = value.removeprefix(" ")
        self._saw_field = True
        self._pending += len(line)
        if self._pending > self._max:
            raise EventTooLargeError(f"SSE event exceeds {self._max} bytes")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)


def encode_event(
    data: bytes | str, *, event: str | None = None, id: str | None = None, retry: int | None = None
) -> bytes:
    """Encode one SSE frame; multi-line data becomes several ``data:`` lines; ends with ``\\n\\n``."""
    raw = data.encode() if isinstance(data, str) else data
    parts: list[bytes] = []
    if event is not None:
        parts.append(b"event: " + event.encode() + b"\n")
    if id is not None:
        parts.append(b"id: " + id.encode() + b"\n")
    if retry is not None:
        parts.append(b"retry: " + str(retry).encode() + b"\n")
    for line in raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        parts.append(b"data: " + line + b"\n")
    parts.append(b"\n")
    return b"".join(parts)


def encode_comment(text: str) -> bytes:
    """Encode an SSE comment frame (``: text\\n\\n``), used for keep-alives."""
    return b": " + text.replace("\n", " ").encode() + b"\n\n"
