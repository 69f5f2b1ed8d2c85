"""deploy/prometheus: the alert rules pass ``promtool check rules`` and their unit tests
(``promtool test rules`` on synthetic series), every alert is tested firing, carries a
runbook, and its runbook section exists in deploy/README.md; the scrape config is valid."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.conftest import DEPLOY, require_tool, run

PROM = DEPLOY / "prometheus"
RULES = PROM / "alerts.yaml"
TESTS = PROM / "tests.yaml"


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def test_promtool_check_rules() -> None:
    promtool = require_tool("promtool")
    proc = run([promtool, "check", "rules", str(RULES)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


def test_promtool_test_rules() -> None:
    promtool = require_tool("promtool")
    proc = run([promtool, "test", "rules", str(TESTS)], cwd=PROM)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_check_config(tmp_path: Path) -> None:
    """prometheus.yml with its rule file. Debian's Prometheus is built without Kubernetes
    service discovery, so the kubernetes_sd job is left out of what promtool sees (its
    selectors are checked against the rendered manifests in test_k8s.py)."""
    promtool = require_tool("promtool")
    config = yaml.safe_load((PROM / "prometheus.yml").read_text(encoding="utf-8"))
    assert config["rule_files"] == ["alerts.yaml"]
    config["scrape_configs"] = [j for j in config["scrape_configs"] if "kubernetes_sd_configs" not in j]
    assert config["scrape_configs"], "a static job remains to check"
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (tmp_path / "alerts.yaml").write_text(RULES.read_text(encoding="utf-8"), encoding="utf-8")
    proc = run([promtool, "check", "config", "prometheus.yml"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_is_unit_tested_firing_and_has_a_runbook() -> None:
    tests = yaml.safe_load(TESTS.read_text(encoding="utf-8"))
    assert tests["rule_files"] == ["alerts.yaml"]
    fired = {case["alertname"] for test in tests["tests"] for case in test["alert_rule_test"] if case["exp_alerts"]}
    quiet = {case["alertname"] for test in tests["tests"] for case in test["alert_rule_test"] if not case["exp_alerts"]}
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    headings = {h.strip() for h in re.findall(r"^#{2,4} +(.+)$", readme, flags=re.M)}
    for rule in alert_rules():
        name = rule["alert"]
        assert name in fired, f"{name}: no promtool test expects it to fire"
        assert rule["labels"]["severity"], name
        annotations = rule["annotations"]
        assert set(annotations) >= {"summary", "description", "runbook"}, name
        assert annotations["runbook"].startswith(f"deploy/README.md#{name.lower()}:"), name
        assert name in headings, f"deploy/README.md has no section '### {name}' (runbook anchor)"
    assert quiet, "some cases check that an alert does not fire"
    names = [r["alert"] for r in alert_rules()]
    assert len(names) == len(set(names))
