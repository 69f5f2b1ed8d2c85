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
