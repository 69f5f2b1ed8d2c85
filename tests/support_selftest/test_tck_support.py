"""Self-tests for tests/support/tck.py: reading the TCK's reports, comparing two runs, and what
happens when the TCK is not there (no TCK run here; tests/conformance/test_tck.py runs it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import tck
from tests.support.tck import Outcome, TckRun, describe, differences, read_reports


def _report(path: Path, *tests: dict) -> Path:
    path.write_text(json.dumps({"summary": {}, "tests": list(tests)}), encoding="utf-8")
    return path


def _run(outcomes: dict[str, Outcome], tmp_path: Path) -> TckRun:
    return TckRun("1.0", "http://127.0.0.1:1", outcomes, 0, 1.0, "", tmp_path)


def test_read_reports_takes_outcome_and_the_failure_or_skip_reason(tmp_path: Path) -> None:
    first = _report(
        tmp_path / "a.json",
        {"nodeid": "t.py::ok", "outcome": "passed", "setup": {"outcome": "passed"}, "call": {"outcome": "passed"}},
        {"nodeid": "t.py::bad", "outcome": "failed", "setup": {"outcome": "passed"},
         "call": {"outcome": "failed", "crash": {"message": "AssertionError: -32600 == -32602"},
                  "longrepr": "def test_bad():\n>   assert code == -32602\nE   AssertionError: -32600 == -32602"}},
        {"nodeid": "t.py::skip", "outcome": "skipped",
         "setup": {"outcome": "skipped", "longrepr": "('t.py', 3, 'Skipped: no push')"}},
    )
    second = _report(tmp_path / "b.json", {"nodeid": "u.py::err", "outcome": "error",
                                           "setup": {"outcome": "failed", "crash": {"message": "ConnectError"}}})
    outcomes, problems = read_reports([first, second])
    assert problems == []
    assert {k: v.outcome for k, v in outcomes.items()} == {
        "t.py::ok": "passed", "t.py::bad": "failed", "t.py::skip": "skipped", "u.py::err": "error"}
    assert outcomes["t.py::ok"].detail == ""
    assert "-32600 == -32602" in outcomes["t.py::bad"].detail
    assert "no push" in outcomes["t.py::skip"].detail
    assert outcomes["t.py::bad"].detail.startswith("def test_bad():")
    assert outcomes["u.py::err"].detail == "ConnectError"


def test_read_reports_names_unreadable_files_and_twice_reported_tests(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    one = _report(tmp_path / "one.json", {"nodeid": "t.py::x", "outcome": "passed"})
    two = _report(tmp_path / "two.json", {"nodeid": "t.py::x", "outcome": "failed"})
    outcomes, problems = read_reports([tmp_path / "broken.json", one, two])
    assert list(outcomes) == ["t.py::x"]
    assert len(problems) == 2
    assert problems[0].startswith("broken.json")
    assert "t.py::x reported twice" in problems[1]


def test_differences_allow_only_listed_failures_turned_into_passes(tmp_path: Path) -> None:
    direct = _run({"same": Outcome("failed", "d"), "gain": Outcome("failed", "compat -32600"),
                   "unlisted_gain": Outcome("failed"), "loss": Outcome("passed"),
                   "listed_but_skipped": Outcome("failed"), "only_direct": Outcome("passed")}, tmp_path)
    gateway = _run({"same": Outcome("failed", "g"), "gain": Outcome("passed"), "unlisted_gain": Outcome("passed"),
                    "loss": Outcome("failed", "E   AssertionError: no Task first"),
                    "listed_but_skipped": Outcome("skipped", "Skipped: no card"),
                    "only_gateway": Outcome("xfailed")}, tmp_path)
    allowed = {"gain": "why", "listed_but_skipped": "why"}
    found = differences(direct, gateway, allowed)
    assert [(d.node, d.direct, d.gateway) for d in found] == [
        ("listed_but_skipped", "failed", "skipped"),
        ("loss", "passed", "failed"),
        ("only_direct", "passed", "absent"),
        ("only_gateway", "absent", "xfailed"),
        ("unlisted_gain", "failed", "passed"),
    ]
    text = describe(found)
    assert "loss\n    direct: passed, through the gateway: failed" in text
    assert "E   AssertionError: no Task first" in text
    assert describe(found, limit=2).endswith("… and 3 more")


def test_a_gain_shows_what_the_direct_run_said(tmp_path: Path) -> None:
    direct = _run({"t": Outcome("failed", "E   assert -32600 == -32602")}, tmp_path)
    gateway = _run({"t": Outcome("passed")}, tmp_path)
    text = describe(differences(direct, gateway, {}))
    assert "directly:\n        E   assert -32600 == -32602" in text


def test_summary_counts_each_outcome(tmp_path: Path) -> None:
    run = _run({"a": Outcome("passed"), "b": Outcome("passed"), "c": Outcome("xfailed")}, tmp_path)
    assert run.summary().startswith("TCK 1.0 at http://127.0.0.1:1: 2 passed, 1 xfailed (3 tests")


def test_the_tck_directory_can_be_named_by_a_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tck.TCK_DIR_ENV, str(tmp_path))
    assert tck.tck_dir() == tmp_path.resolve()
    monkeypatch.delenv(tck.TCK_DIR_ENV)
    assert tck.tck_dir() == (tck.REPO.parent / "shared" / "tck").resolve()


def test_a_missing_tck_skips_with_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tck.TCK_DIR_ENV, str(tmp_path / "nowhere"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="a2aproject/a2a-tck.*A2A_GATEWAY_TCK_DIR"):
        tck.require_tck()


def test_a_missing_tck_fails_under_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "1.0").mkdir()
    (tmp_path / "1.0" / "run_tck.py").write_text("", encoding="utf-8")
    monkeypatch.setenv(tck.TCK_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"missing: .*requirements-tck\.txt.*0\.3/run_tck\.py"):
        tck.require_tck()
