"""The A2A TCK (a2aproject/a2a-tck) as a tool of the tests: find it, give it a venv, run a line of
it against a base URL, and read back the outcome of every TCK test.

Where the TCK is
----------------
Two plain checkouts and a pinned requirements file, in ``shared/tck`` beside the repository (or the
directory named by ``A2A_GATEWAY_TCK_DIR``)::

    1.0/                  branch 1.0-dev: A2A 1.0, JSON-RPC and HTTP+JSON
    0.3/                  tag 0.3.0.beta4: A2A 0.3, JSON-RPC
    requirements-tck.txt  the packages both runners need (Python 3.11)

:func:`require_tck` skips the calling test with how to get it when it is missing — and fails it
under CI (``CI=true``), where it must be there.

The venv
--------
``.venv-tck/`` at the repository root, made by the first test that needs it (``python -m venv``
with this interpreter, then ``pip install -r requirements-tck.txt``, about a minute) and reused
while its stamp (a digest of the requirements file and the Python version) matches; a file lock
keeps two pytest processes from installing at once. Delete it to start over.

Running a line
--------------
:func:`run_line` copies the line's checkout to a temporary directory (its runner writes
``reports/`` beside itself; the checkout stays untouched) and runs its own ``run_tck.py``:

* ``1.0``: ``run_tck.py --sut-host BASE --transport jsonrpc,http_json -- --json-report …``; the
  TCK fetches ``BASE/.well-known/agent-card.json`` and talks to the first interface of each
  binding the card lists in ``supportedInterfaces``;
* ``0.3``: ``run_tck.py --sut-url BASE/ --category all --transports jsonrpc --compliance-report
  …`` with ``TCK_STREAMING_TIMEOUT=2.0``; it runs its five categories one after the other and
  leaves a pytest JSON report of each in ``reports/``.

Both end in a :class:`TckRun`: every TCK test's node id with its outcome (``passed``,
``failed``, ``skipped``, ``xfailed``, ``xpassed``, ``error``) and what pytest said about it
(the failure, the skip reason), read from pytest-json-report's files.

Comparing
---------
:func:`differences` lists the TCK tests whose outcome through the gateway is not the one the
worker gets directly, leaving out the allowed gains (a test the gateway turns from a failure
into a pass, each with its reason); :func:`describe` writes them for an assertion message.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.peers import _ci, install_lock

__all__ = [
    "LINES",
    "Difference",
    "Outcome",
    "TckRun",
    "describe",
    "differences",
    "read_reports",
    "require_tck",
    "run_line",
    "tck_dir",
]

REPO = Path(__file__).resolve().parents[2]
TCK_DIR_ENV = "A2A_GATEWAY_TCK_DIR"
VENV = REPO / ".venv-tck"
REQUIREMENTS = "requirements-tck.txt"
STAMP = ".a2a-gateway-tck-stamp"
INSTALL_TIMEOUT = 900.0  # seconds, each install command
RUN_TIMEOUT = 600.0  # seconds, one run of one line
#: What a run must at least have collected to count as a run of that line (1.0: 265, 0.3: 154
#: tests when this was written).
MIN_TESTS = {"1.0": 200, "0.3": 100}


@dataclass(frozen=True)
class Line:
    """One line of the TCK: its folder and how its runner is called."""

    name: str  # "1.0" or "0.3"
    folder: str
    report_glob: str  # pytest-json-report files the run leaves, relative to the copy

    def command(self, python: Path, base: str) -> list[str]:
        if self.name == "1.0":
            return [str(python), "run_tck.py", "--sut-host", base, "--transport", "jsonrpc,http_json", "--",
                    "-p", "no:cacheprovider", "--json-report", "--json-report-file=reports/tck.json"]
        return [str(python), "run_tck.py", "--sut-url", base + "/", "--category", "all", "--transports", "jsonrpc",
                "--compliance-report", "reports/compliance.json"]

    def env(self) -> dict[str, str]:
        return {"TCK_STREAMING_TIMEOUT": "2.0"} if self.name == "0.3" else {}


LINES: dict[str, Line] = {
    "1.0": Line("1.0", "1.0", "reports/tck.json"),
    "0.3": Line("0.3", "0.3", "reports/*_results.json"),
}


# --------------------------------------------------------------------------- finding and installing


def tck_dir() -> Path:
    """Where the TCK checkouts are: ``$A2A_GATEWAY_TCK_DIR``, else ``shared/tck`` beside the repository."""
    named = os.environ.get(TCK_DIR_ENV, "").strip()
    return Path(named).expanduser().resolve() if named else (REPO.parent / "shared" / "tck").resolve()


def _missing(where: Path) -> str | None:
    wanted = [where / REQUIREMENTS, *(where / line.folder / "run_tck.py" for line in LINES.values())]
    absent = [str(path) for path in wanted if not path.is_file()]
    if not absent:
        return None
    return (f"the A2A TCK is not at {where} (missing: {', '.join(absent)}). Put the a2a-tck checkouts "
            f"there — 1.0/ (a2aproject/a2a-tck, branch 1.0-dev), 0.3/ (tag 0.3.0.beta4) and a pinned "
            f"{REQUIREMENTS} — or name their directory in {TCK_DIR_ENV}")


def _unavailable(message: str) -> None:
    if _ci():
        pytest.fail(f"{message} (under CI the TCK must be there and installable)", pytrace=False)
    pytest.skip(message)


def _install(where: Path) -> Path | str:
    """``.venv-tck/bin/python`` with the TCK's requirements (made on first use), or why not."""
    python = VENV / "bin" / "python"
    stamp = VENV / STAMP
    requirements = where / REQUIREMENTS
    want = hashlib.sha256(requirements.read_bytes() + f"{sys.version_info[:2]}".encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return python
    command = f"{sys.executable} -m venv {VENV} && {python} -m pip install -r {requirements}"
    with install_lock("tck"):
        if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
            return python  # another process installed it while we waited
        stamp.unlink(missing_ok=True)
        for cmd in ([sys.executable, "-m", "venv", "--clear", str(VENV)],
                    [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", "-r",
                     str(requirements)],
                    [str(python), "-c", "import pytest, pytest_jsonreport, a2a, httpx"]):
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT,
                                      stdin=subprocess.DEVNULL, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"cannot set up the TCK venv ({VENV}): {' '.join(cmd)}: {exc!r}\nby hand: {command}"
            if done.returncode != 0:
                detail = (done.stdout + done.stderr).strip()[-2000:]
                return (f"cannot set up the TCK venv ({VENV}): {' '.join(cmd)} exited {done.returncode}:\n"
                        f"{detail}\nby hand: {command}")
        stamp.write_text(want + "\n")
    return python


_installed: dict[Path, Path | str] = {}


def require_tck() -> tuple[Path, Path]:
    """``(tck directory, venv python)``; skips the test with how to get them when either is
    missing (fails it under CI)."""
    where = tck_dir()
    problem = _missing(where)
    if problem is not None:
        _unavailable(problem)
    if where not in _installed:
        _installed[where] = _install(where)
    python = _installed[where]
    if isinstance(python, str):
        _unavailable(python)
    assert isinstance(python, Path)
    return where, python


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Outcome:
    """One TCK test's outcome and what pytest said about it (empty for a pass)."""

    outcome: str
    detail: str = ""


@dataclass
class TckRun:
    """One run of one line against one base URL."""

    line: str
    base: str
    outcomes: dict[str, Outcome]
    returncode: int | None
    seconds: float
    output: str  # the runner's stdout and stderr (pytest's own summary lines included)
    workdir: Path
    problems: list[str] = field(default_factory=list)  # unreadable or duplicated report entries

    def counts(self) -> Counter[str]:
        return Counter(o.outcome for o in self.outcomes.values())

    def summary(self) -> str:
        counts = self.counts()
        order = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
        shown = [f"{counts[k]} {k}" for k in order if counts[k]]
        shown += [f"{n} {k}" for k, n in sorted(counts.items()) if k not in order]
        return f"TCK {self.line} at {self.base}: " + ", ".join(shown) + f" ({len(self.outcomes)} tests, {self.seconds:.0f} s)"

    def tail(self, chars: int = 3000) -> str:
        return self.output[-chars:]


def _detail(test: Mapping[str, Any]) -> str:
    """What pytest-json-report kept of a test's failure, error or skip: the traceback pytest
    printed (``--tb=short``; its end), else the crash line."""
    for phase in ("setup", "call", "teardown"):
        stage = test.get(phase)
        if not isinstance(stage, dict) or stage.get("outcome") == "passed":
            continue
        crash = stage.get("crash") if isinstance(stage.get("crash"), dict) else {}
        longrepr = str(stage.get("longrepr", "") or "").strip()
        return (longrepr or str(crash.get("message", "")).strip())[-2000:]
    return ""


def read_reports(paths: list[Path]) -> tuple[dict[str, Outcome], list[str]]:
    """Every test of the pytest-json-report files ``paths``: node id → :class:`Outcome`; and the
    problems met (a file that does not parse, a node id seen twice)."""
    outcomes: dict[str, Outcome] = {}
    problems: list[str] = []
    for path in paths:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{path.name}: {exc}")
            continue
        for test in doc.get("tests", []) if isinstance(doc, dict) else []:
            node = test.get("nodeid")
            if not isinstance(node, str):
                problems.append(f"{path.name}: a test without a node id")
                continue
            if node in outcomes:
                problems.append(f"{path.name}: {node} reported twice")
            outcomes[node] = Outcome(str(test.get("outcome")), _detail(test))
    return outcomes, problems


def _tck_env(line: Line) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "VIRTUAL_ENV", "PYTHONPATH", "COV_CORE_"))}
    env.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
                "PYTHONDONTWRITEBYTECODE": "1", **line.env()})
    return env


def run_line(line_name: str, base: str, workdir: Path, *, tck: Path, python: Path,
             timeout: float = RUN_TIMEOUT) -> TckRun:
    """Run TCK line ``line_name`` (``"1.0"`` or ``"0.3"``) against ``base`` (``http://HOST:PORT``,
    no trailing slash) in a copy of its checkout under ``workdir``; the outcome of each test."""
    line = LINES[line_name]
    copy = workdir / f"tck-{line.name}"
    shutil.copytree(tck / line.folder, copy, ignore=shutil.ignore_patterns("reports", ".git", "__pycache__",
                                                                          ".pytest_cache"))
    (copy / "reports").mkdir()
    started = time.monotonic()
    # a session of its own: the 0.3 runner starts pytest once per category, and a kill must
    # reach those too
    with subprocess.Popen(line.command(python, base), cwd=copy, env=_tck_env(line), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True) as proc:
        try:
            raw, _ = proc.communicate(timeout=timeout)
            returncode: int | None = proc.returncode
            note = ""
        except BaseException as exc:  # the timeout, or the test's own (pytest-timeout, Ctrl-C)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raw, _ = proc.communicate()
            if not isinstance(exc, subprocess.TimeoutExpired):
                raise
            returncode, note = None, f"\n(killed after {timeout} s)"
    output = raw.decode("utf-8", "replace") + note
    seconds = time.monotonic() - started
    (copy / "reports" / "runner-output.txt").write_text(output, encoding="utf-8")
    outcomes, problems = read_reports(sorted(copy.glob(line.report_glob)))
    return TckRun(line.name, base, outcomes, returncode, seconds, output, copy, problems)


# --------------------------------------------------------------------------- comparing


@dataclass(frozen=True)
class Difference:
    node: str
    direct: str
    gateway: str
    gateway_detail: str  # what pytest said about the test in the gateway run
    direct_detail: str  # … and in the direct one


def differences(direct: TckRun, gateway: TckRun, allowed_gains: Mapping[str, str]) -> list[Difference]:
    """The TCK tests whose outcome through the gateway differs from the direct one — except
    those in ``allowed_gains`` (node id → why) that went from ``failed`` directly to ``passed``
    through the gateway. A test seen in one run only is a difference too (outcome ``absent``)."""
    out = []
    for node in sorted(set(direct.outcomes) | set(gateway.outcomes)):
        mine = direct.outcomes.get(node, Outcome("absent"))
        theirs = gateway.outcomes.get(node, Outcome("absent"))
        if mine.outcome == theirs.outcome:
            continue
        if node in allowed_gains and (mine.outcome, theirs.outcome) == ("failed", "passed"):
            continue
        out.append(Difference(node, mine.outcome, theirs.outcome, theirs.detail, mine.detail))
    return out


def _indented(detail: str, lines: int = 12) -> str:
    return "\n        ".join(detail.strip().splitlines()[-lines:])


def describe(found: list[Difference], *, limit: int = 40) -> str:
    """The differences, one block each: node id, both outcomes, and what pytest said about the test
    through the gateway (and directly, when it said something there)."""
    blocks = []
    for diff in found[:limit]:
        block = [f"  {diff.node}", f"    direct: {diff.direct}, through the gateway: {diff.gateway}"]
        if diff.gateway_detail.strip():
            block.append(f"      through the gateway:\n        {_indented(diff.gateway_detail)}")
        if diff.direct_detail.strip():
            block.append(f"      directly:\n        {_indented(diff.direct_detail, 4)}")
        blocks.append("\n".join(block))
    if len(found) > limit:
        blocks.append(f"  … and {len(found) - limit} more")
    return "\n".join(blocks)
