"""The pure core stays pure (docs/architecture.md, conventions 2 and 4).

gateway/a2a, gateway/invariants, the exchange layer gateway/exchange, the error tree
gateway/errors.py and the ledger's plain values gateway/records.py may use the standard library (minus I/O and concurrency),
orjson and rfc8785 (canonical JSON, gateway/a2a/card_signing.py), never a network, storage, metrics or web library, nor the proxy shell, the ledger or the
a2a SDK. Checked on the source with ``ast`` (so an import inside a function is caught too) and on
a fresh interpreter's ``sys.modules``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE_DIRS = [ROOT / "gateway" / "a2a", ROOT / "gateway" / "invariants", ROOT / "gateway" / "exchange"]
PURE_FILES = sorted([*(p for d in PURE_DIRS for p in d.rglob("*.py")), ROOT / "gateway" / "errors.py",
                     ROOT / "gateway" / "records.py"])
BANNED = ("asyncio", "httpx", "starlette", "uvicorn", "redis", "sqlite3", "prometheus_client",
          "socket", "gateway.proxy", "gateway.ledger", "gateway.observability", "a2a")


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """Every module a file imports, with relative imports resolved; plus importlib string calls.

    ``source`` replaces the file's text (the self-check scans a probe as if it lived at ``path``).
    """
    text = path.read_text(encoding="utf-8") if source is None else source
    tree = ast.parse(text, filename=str(path))
    package = module_of(path) if path.name == "__init__.py" else module_of(path).rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            found += [(node.lineno, f"{mod}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and node.args and \
                    isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def banned_hit(module: str) -> str | None:
    for banned in BANNED:
        if module == banned or module.startswith(banned + "."):
            return banned
    return None


def test_the_pure_packages_exist_and_are_scanned():
    names = {p.name for p in PURE_FILES}
    assert {"states.py", "jsonrpc.py", "sse.py", "payloads.py", "engine.py", "model.py",
            "artifacts.py", "version.py", "commands.py", "judge.py", "stream.py",
            "errors.py"} <= names


@pytest.mark.parametrize("path", PURE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_imports_no_io_library(path):
    hits = [f"{path.name}:{line} imports {mod}" for line, mod in imported_modules(path)
            if banned_hit(mod)]
    assert hits == []


def test_the_scanner_catches_what_it_should():
    """Self-check: direct, dotted, from-, relative, in-function and importlib imports are seen."""
    probe = (
        "import asyncio\n"
        "import httpx._client\n"
        "from starlette.responses import Response\n"
        "from ..ledger import memory\n"
        "def f():\n"
        "    import socket\n"
        "    importlib.import_module('redis')\n"
        "from a2a.types import Task\n"
        "from gateway.a2a import states\n"
        "from . import model\n"
    )
    found = imported_modules(ROOT / "gateway" / "invariants" / "probe.py", probe)
    assert "gateway.ledger" in {m for _, m in found}  # the relative import was resolved
    assert "gateway.invariants.model" in {m for _, m in found}
    hits = sorted({banned_hit(m) for _, m in found} - {None})
    assert hits == ["a2a", "asyncio", "gateway.ledger", "httpx", "redis", "socket", "starlette"]


def test_gateway_a2a_is_not_mistaken_for_the_sdk():
    assert banned_hit("gateway.a2a.states") is None
    assert banned_hit("a2a.types") == "a2a"
    assert banned_hit("asyncio_extras") is None


@pytest.mark.parametrize("path", sorted([*(ROOT / "gateway" / "invariants").rglob("*.py"),
                                         *(ROOT / "gateway" / "exchange").rglob("*.py")]),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_engine_and_the_exchanges_read_no_clock(path):
    """'No I/O, no awaits, no clock reads': time comes in as a Clock value (a Load's reply)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            bad += [f"import {m}" for m in mods if m in ("time", "random")]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("now", "utcnow", "today", "time", "monotonic", "perf_counter"):
            bad.append(f"line {node.lineno}: .{node.func.attr}()")
        if isinstance(node, ast.AsyncFunctionDef | ast.Await):
            bad.append(f"line {node.lineno}: async")
    assert bad == []


@pytest.mark.parametrize("module", ["gateway.invariants.engine", "gateway.a2a.sse",
                                    "gateway.a2a.jsonrpc", "gateway.exchange.jsonrpc",
                                    "gateway.offline", "gateway.replay"])
def test_importing_the_core_loads_no_io_library(module):
    """The offline run (gateway.offline, and the replay over it) performs commands with the
    gateway's own memory ledger (gateway.ledger.base and .memory): that is all of the shell it
    loads."""
    code = (
        "import sys, json\n"
        f"import {module}\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=30, check=True)
    loaded = json.loads(proc.stdout)
    assert module in loaded  # the import really happened
    leaked = sorted(m for m in loaded if banned_hit(m) in ("httpx", "starlette", "uvicorn",
                                                           "redis", "prometheus_client",
                                                           "gateway.proxy", "gateway.ledger",
                                                           "gateway.observability", "a2a"))
    if module in ("gateway.offline", "gateway.replay"):
        leaked = [m for m in leaked if m not in ("gateway.ledger", "gateway.ledger.base", "gateway.ledger.memory",
                                                 "gateway.ledger.urls")]
    assert leaked == []
