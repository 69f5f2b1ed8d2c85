"""Reading an SSE body the way a test checks it, independently of the gateway's own decoder."""

from __future__ import annotations

import json
from typing import Any


def parse_sse(text: str) -> list[tuple[str, Any]]:
    """``[(event name, parsed data)]`` of an SSE body; comments skipped; unparsable data kept
    as the raw string."""
    out: list[tuple[str, Any]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = "message", []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
        if data:
            joined = "\n".join(data)
            try:
                out.append((name, json.loads(joined)))
            except ValueError:
                out.append((name, joined))
    return out
