"""A reload of settings that need a restart (gateway/proxy/runtime.py ``apply_config``): the
warning names exactly the sections that changed, and the running values stay in force."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from gateway.app import build_app
from gateway.config import parse_config

BASE = {"upstreams": [{"name": "w", "url": "http://127.0.0.1:9/"}], "ledger": {"url": "memory"}}


def test_the_restart_warning_names_only_what_changed(caplog: pytest.LogCaptureFixture) -> None:
    runtime = build_app(parse_config(BASE), registry=CollectorRegistry()).state.runtime
    changed = parse_config({**BASE, "replay_window": {"max_events_per_task": 5}})
    with caplog.at_level(logging.WARNING, logger="a2a_gateway"):
        runtime.apply_config(changed)
    [record] = [r for r in caplog.records if r.getMessage() == "config_needs_restart"]
    assert record.keys == ["replay_window"]
    assert runtime.config.replay_window.max_events_per_task == 1000  # still the running value
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="a2a_gateway"):
        runtime.apply_config(parse_config(BASE))
    assert not [r for r in caplog.records if r.getMessage() == "config_needs_restart"]


def test_a_reload_that_changes_log_or_the_answer_bound_warns_and_keeps_them(caplog: pytest.LogCaptureFixture) -> None:
    """``log`` and ``limits.max_answer_bytes`` are read at start (docs/guide/running.md): a SIGHUP
    that changes them says so and keeps the running values; the rest of ``limits`` applies."""
    runtime = build_app(parse_config(BASE), registry=CollectorRegistry()).state.runtime
    changed = parse_config({**BASE, "log": {"level": "debug"},
                            "limits": {"max_answer_bytes": 1024 * 1024, "max_body_bytes": 4096}})
    with caplog.at_level(logging.WARNING, logger="a2a_gateway"):
        runtime.apply_config(changed)
    [record] = [r for r in caplog.records if r.getMessage() == "config_needs_restart"]
    assert record.keys == ["log", "limits.max_answer_bytes"]
    assert runtime.config.log.level == "info" and runtime.config.limits.max_answer_bytes == 16 * 1024 * 1024
    assert runtime.config.limits.max_body_bytes == 4096
