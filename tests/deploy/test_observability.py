"""The alert rules and the Grafana dashboard use only what the gateway exposes.

A real gateway (``build_app`` under uvicorn) runs in front of a scripted worker; a GetTask, a
stream and a malformed request go through it; then ``/metrics`` is scraped. Every metric name
in a rule expression, a dashboard panel query or a dashboard variable must belong to a metric
family of that scrape (counters as ``_total``, histograms as ``_bucket``/``_sum``/``_count``),
every label a query matches on must be one the metric has (or one the scrape adds), and the
label values the queries name (divergence kinds, methods) must be ones the gateway uses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gateway.a2a.jsonrpc import METHODS
from gateway.app import build_app
from gateway.config import parse_config
from gateway.invariants.model import DIVERGENCE_KINDS
from gateway.observability.metrics import Metrics
from tests.deploy.conftest import DEPLOY
from tests.support.gateway import serve_gateway
from tests.support.scripted_worker import Event, ScriptedWorker
from tests.support.servers import serve_in_thread

RULES = DEPLOY / "prometheus" / "alerts.yaml"
DASHBOARD = DEPLOY / "grafana" / "a2a-gateway.json"
#: labels the scrape adds (prometheus.yml relabeling, the Prometheus Operator)
TARGET_LABELS = {"namespace", "job", "instance", "pod", "container", "service", "endpoint"}
V1 = {"A2A-Version": "1.0", "content-type": "application/json"}

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
             "unless", "offset", "inf", "nan", "Inf", "NaN"}
_GROUPING = r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)"


# ------------------------------------------------------------------------ PromQL, roughly


def _strip(expr: str) -> str:
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # range selectors, durations
    return re.sub(_GROUPING, " ", s)  # grouping label lists


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, aggregation
    operators, keywords or label names."""
    s = _strip(expr)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        token, rest = match.group(0), s[match.end():].lstrip()
        if rest.startswith("(") or token in _KEYWORDS:
            continue
        names.add(token)
    return names


def selectors(expr: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """``(metric, [(label, op, value), ...])`` for every ``metric{...}`` in the expression."""
    out = []
    for match in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}", expr):
        matchers = re.findall(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', match.group(2))
        out.append((match.group(1), matchers))
    return out


def grouping_labels(expr: str) -> set[str]:
    return {label.strip() for group in re.findall(_GROUPING, expr) for label in group.split(",") if label.strip()}


def test_promql_name_extraction() -> None:
    expr = ('histogram_quantile(0.99, sum by (upstream, le) (rate(a_bucket{method!~"x|y", u=~"$u"}[$__rate_interval])))'
            ' / on (job) group_left sum by (job) (increase(b_total[5m])) > 0 and absent(c)')
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}
    assert selectors(expr) == [("a_bucket", [("method", "!~", "x|y"), ("u", "=~", "$u")])]
    assert grouping_labels(expr) == {"upstream", "le", "job"}


# --------------------------------------------------------------------- what the repo queries


def rule_queries() -> list[tuple[str, str]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [(f"alert {r.get('alert') or r.get('record')}", r["expr"]) for g in doc["groups"] for r in g["rules"]]


def dashboard_queries() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out = []
    panels = list(doc["panels"])
    while panels:
        panel = panels.pop()
        panels.extend(panel.get("panels", []))
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r}", target["expr"]))
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = re.fullmatch(r"label_values\((.*),\s*([A-Za-z_]+)\)", query)
            assert match, f"variable {var['name']}: {query}"
            out.append((f"variable {var['name']}", match.group(1)))
    return out


def test_dashboard_has_the_panels_operators_need() -> None:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert doc["uid"] == "a2a-gateway"
    used = {name for _, expr in dashboard_queries() for name in metric_names(expr)}
    for family in ("a2a_gateway_requests_total",  # traffic
                   "a2a_gateway_request_duration_seconds_bucket",  # latency
                   "a2a_gateway_divergences_total",  # divergences by kind
                   "a2a_gateway_forced_get_total",  # forced resyncs
                   "a2a_gateway_tracked_tasks",  # tasks by state
                   "a2a_gateway_card_fetches_total", "a2a_gateway_upstream_degraded"):  # card freshness
        assert family in used, f"no dashboard panel queries {family}"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))


# ----------------------------------------------------------------- what the gateway exposes


def _task(tid: str, state: str) -> dict[str, Any]:
    return {"id": tid, "contextId": "c-" + tid, "status": {"state": state}}


def _status(tid: str, state: str) -> dict[str, Any]:
    return {"statusUpdate": {"taskId": tid, "contextId": "c-" + tid, "status": {"state": state}}}


@pytest.fixture(scope="module")
def scrape() -> Iterator[str]:
    """``/metrics`` of a real gateway's admin listener after a GetTask, a stream and a
    malformed request."""
    worker = ScriptedWorker()
    worker.on("GetTask", json_result=_task("t-1", "TASK_STATE_WORKING"))
    worker.on("SendStreamingMessage", sse=[
        Event(result={"task": _task("t-2", "TASK_STATE_SUBMITTED")}),
        Event(result=_status("t-2", "TASK_STATE_WORKING")),
        Event(result=_status("t-2", "TASK_STATE_COMPLETED")),
    ])
    with serve_in_thread(worker, name="worker") as wsrv:
        config = parse_config({"upstreams": [{"name": "worker", "url": wsrv.url + "/", "prefix": "/"}],
                               "ledger": {"url": "memory"}})
        app = build_app(config, registry=CollectorRegistry())
        with serve_gateway(app) as (gsrv, admin), \
                httpx.Client(base_url=gsrv.url, trust_env=False, timeout=10) as http:
            got = http.post("/", headers=V1, content=orjson.dumps(
                {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t-1"}}))
            assert got.json()["result"]["status"]["state"] == "TASK_STATE_WORKING"
            message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}
            with http.stream("POST", "/", headers={**V1, "accept": "text/event-stream"}, content=orjson.dumps(
                    {"jsonrpc": "2.0", "id": 2, "method": "SendStreamingMessage", "params": {"message": message}})) as r:
                body = b"".join(r.iter_raw())
            assert b"TASK_STATE_COMPLETED" in body
            bad = http.post("/", headers=V1, content=b"{not json")
            assert bad.json()["error"]["code"] == -32700
            metrics = http.get(admin.url + "/metrics")
            assert metrics.status_code == 200
            yield metrics.text


def exposed_names(text: str) -> dict[str, str]:
    """Every series name the scrape's metric families stand for -> the family's type."""
    names: dict[str, str] = {}
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                "summary": ("", "_sum", "_count", "_created"), "gauge": ("",), "info": ("_info",),
                "unknown": ("",), "stateset": ("",), "gaugehistogram": ("_bucket", "_gsum", "_gcount")}
    for family in text_string_to_metric_families(text):
        for suffix in suffixes[family.type]:
            names[family.name + suffix] = family.type
    return names


def label_names(scrape: str) -> dict[str, set[str]]:
    """Series name -> label names, from the gateway's metric definitions (also those without
    a sample yet) and from the scrape's samples."""
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(scrape):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    metrics = Metrics(CollectorRegistry())
    for obj in vars(metrics).values():
        obj = getattr(obj, "metric", obj)  # Labelled wraps the prometheus_client metric
        labels = getattr(obj, "_labelnames", None)
        if labels is None:
            continue
        for family in obj.describe():
            base = family.name
            for suffix in ("", "_total", "_bucket", "_sum", "_count"):
                out.setdefault(base + suffix, set()).update(labels, {"le"} if suffix == "_bucket" else ())
    return out


def test_traffic_shows_up_in_the_scrape(scrape: str) -> None:
    samples = [s for f in text_string_to_metric_families(scrape) for s in f.samples]
    methods = {(s.labels.get("method"), s.labels.get("outcome")) for s in samples
               if s.name == "a2a_gateway_requests_total"}
    assert ("GetTask", "ok") in methods
    assert any(m == "SendStreamingMessage" for m, _ in methods)
    assert any(o == "malformed" for _, o in methods)
    assert any(s.name == "a2a_gateway_sse_events_total" for s in samples)


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_queries_use_only_exposed_metrics_and_labels(scrape: str, source: str) -> None:
    exposed = exposed_names(scrape)
    labels = label_names(scrape)
    queries = rule_queries() if source == "rules" else dashboard_queries()
    assert queries
    problems = []
    for where, expr in queries:
        names = metric_names(expr)
        if not names:
            problems.append(f"{where}: no metric found in {expr!r}")
        for name in sorted(names):
            if not name.startswith("a2a_gateway_"):
                problems.append(f"{where}: {name} is not a gateway metric")
            elif name not in exposed:
                problems.append(f"{where}: {name} is not exposed by the gateway")
        known = set().union(*(labels.get(n, set()) for n in names)) | TARGET_LABELS
        for metric, matchers in selectors(expr):
            for label, op, value in matchers:
                if label not in labels.get(metric, set()) | TARGET_LABELS:
                    problems.append(f"{where}: {metric} has no label {label}")
                values = set(value.split("|")) if op in ("=~", "!~") else {value}
                if "$" in value:
                    continue  # a dashboard variable
                if label == "kind" and metric == "a2a_gateway_divergences_total":
                    problems += [f"{where}: unknown divergence kind {v}" for v in values - set(DIVERGENCE_KINDS)]
                if label == "method":
                    allowed = set(METHODS) | {"card", "invalid", "other"}
                    problems += [f"{where}: unknown method label {v}" for v in values - allowed]
        for label in sorted(grouping_labels(expr) - known):
            problems.append(f"{where}: groups by {label}, which none of {sorted(names)} has")
    assert not problems, "\n".join(problems)
