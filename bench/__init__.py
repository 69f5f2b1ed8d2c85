"""Benchmarks (not tests): see docs/performance.md. ``run_and_save`` is what each one's
``main`` ends with."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any


def run_and_save(coro: Coroutine[Any, Any, list[str]], prefix: str) -> None:
    """Run a benchmark's main coroutine (on uvloop when installed), print its lines and save
    them as ``bench/results/<prefix>-<timestamp>.txt``."""
    import asyncio
    import time
    from pathlib import Path

    try:
        import uvloop
    except ImportError:
        lines = asyncio.run(coro)
    else:
        lines = uvloop.run(coro)
    text = "\n".join(lines)
    print(text)
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    out = results / f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}.txt"
    out.write_text(text + "\n")
    print(f"\nsaved to {out}")
