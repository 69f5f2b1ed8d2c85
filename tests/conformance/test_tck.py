"""The A2A TCK as a parity gate: a worker must fare no worse through the gateway than directly.

Both lines of the official TCK (``tests/support/tck.py`` finds, installs and runs them) run
against the a2a-sdk 1.3 worker of ``tests/conformance/tck_worker.py`` directly, and through an
``a2a-gateway serve`` in front of another such worker (sidecar form, mounted at ``/``, SQLite
ledger, enforce mode, the served Agent Card rewritten to name the gateway, so the TCK follows it
there):

* TCK 1.0 over JSON-RPC and HTTP+JSON (v1.0 clients);
* TCK 0.3 over JSON-RPC (v0.3 clients);

each with the version bridge on and off (``bridge.enabled``). The worker run directly speaks
both versions (the a2a-sdk's v0.3 compat layer, a card of both), and so does the one behind the
gateway with the bridge off: the gateway passes both versions on as they are. With the bridge on
the worker behind the gateway speaks v1.0 alone (``--v1-only``), so the gateway must make up the
difference: a card both TCK lines can use (docs/bridge.md §2.2), and every v0.3 call of the TCK
0.3 bridged onto the worker's v1.0 interface (docs/bridge.md §3.2) — measured against the
a2a-sdk's own v0.3 layer.

The rule: every TCK test has the same outcome through the gateway as directly (``passed``,
``failed``, ``skipped``, ``xfailed``, ``xpassed``, ``error``), except the tests listed in
:data:`ALLOWED_GAINS`, which the gateway may turn from a failure into a pass — each with its
reason. Any other difference fails with the TCK test's node id, both outcomes and what the TCK
said through the gateway.

The runs are slow (the TCK 1.0 spends most of its minute in six 10 s waits of its multi-stream
tests), so the first test starts every run the session's selected tests need at once — the
direct baseline of each line once, shared by its bridge-on and bridge-off tests — and the
others read the results. ``bash scripts/test.sh tests/conformance -m slow`` runs just these.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway import gateway_process
from tests.support.servers import free_port, subprocess_server
from tests.support.tck import MIN_TESTS, TckRun, describe, differences, require_tck, run_line

WORKER_SCRIPT = Path(__file__).resolve().parent / "tck_worker.py"
LINE_PARAMS = [pytest.param("1.0", id="tck1.0"), pytest.param("0.3", id="tck0.3")]
BRIDGE_PARAMS = [pytest.param("on", id="bridge-on"), pytest.param("off", id="bridge-off")]
#: Venv install (first run only, ~1 min) and every selected run at once (~1.5 min).
TIMEOUT = 1200

_INVALID_PARAMS = (
    "bridge on: the v0.3 message/send whose params do not validate is bridged to the worker's "
    "v1.0 JSON-RPC handler, which answers -32602 Invalid params as JSON-RPC 2.0 and the TCK want; "
    "directly, a2a-sdk 1.3's v0.3 compat layer answers -32600 Invalid Request"
)
#: TCK tests the gateway may turn from a failure (directly) into a pass, per TCK line: node id →
#: why. Anything else must come out the same through the gateway as directly.
ALLOWED_GAINS: dict[str, dict[str, str]] = {
    "1.0": {},
    "0.3": {
        "tests/mandatory/jsonrpc/test_json_rpc_compliance.py::test_rejects_invalid_json_rpc_requests"
        "[invalid_request4--32602]": _INVALID_PARAMS,
        "tests/mandatory/jsonrpc/test_json_rpc_compliance.py::test_rejects_invalid_params": _INVALID_PARAMS,
        "tests/mandatory/protocol/test_message_send_method.py::test_message_send_invalid_params": _INVALID_PARAMS,
        "tests/optional/capabilities/test_a2a_v030_method_enhancements.py::TestA2AV030MethodEnhancements"
        "::test_method_parameter_validation_enhancements": _INVALID_PARAMS,
        "tests/optional/features/test_invalid_business_logic.py::test_missing_required_message_fields":
            _INVALID_PARAMS,
    },
}


def _selected(items: list[pytest.Item]) -> set[tuple[str, str]]:
    """``(line, bridge)`` of every selected test of this module."""
    out = set()
    for item in items:
        spec = getattr(item, "callspec", None)
        if item.path.resolve() == Path(__file__).resolve() and spec is not None and {"line", "bridge"} <= spec.params.keys():
            out.add((spec.params["line"], spec.params["bridge"]))
    return out


@dataclass(repr=False)
class Runs:
    """The TCK runs of this session: ``direct[line]``, ``gateway[(line, bridge)]``, and each
    gateway's metric samples (name, labels, value) once its runs were done."""

    direct: dict[str, TckRun]
    gateway: dict[tuple[str, str], TckRun]
    metrics: dict[str, list[tuple[str, dict[str, str], float]]]

    def metric(self, bridge: str, name: str, **labels: str) -> float:
        return sum(v for n, lbls, v in self.metrics[bridge]
                   if n == name and all(lbls.get(k) == want for k, want in labels.items()))


@contextlib.contextmanager
def _worker(*, v1_only: bool = False) -> Iterator[str]:
    """The TCK worker on 127.0.0.1 (its own process); yields its base URL once its card answers."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, str(WORKER_SCRIPT), "--port", str(port), *(["--v1-only"] if v1_only else [])]
    with subprocess_server(cmd, base + "/.well-known/agent-card.json", timeout=30):
        yield base


def _gateway_config(path: Path, bridge: str) -> Path:
    path.write_text(
        "# tests/conformance/test_tck.py: the gateway in front of the TCK worker\n"
        f"bridge: {{enabled: {'true' if bridge == 'on' else 'false'}}}\n"
        "upstreams:\n"
        "  - name: worker\n"
        "    url: http://127.0.0.1:1/   # replaced by --upstream\n"
        "    # the TCK reuses messageIds across its tests for different requests: keyed by them,\n"
        "    # its later sends would be refused as conflicting retries (docs/retries.md §1)\n"
        "    retries: {message_id_keys: false}\n",
        encoding="utf-8",
    )
    return path


def _scrape(admin: str) -> list[tuple[str, dict[str, str], float]]:
    text = httpx.get(admin + "/metrics", timeout=10.0, trust_env=False).raise_for_status().text
    return [(s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples]


@pytest.fixture(scope="session")
def tck_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """Every run the session's selected tests need, all at once."""
    tck, python = require_tck()
    wanted = _selected(request.session.items)
    lines = sorted({line for line, _ in wanted})
    bridges = sorted({bridge for _, bridge in wanted})
    work = tmp_path_factory.mktemp("tck")
    with contextlib.ExitStack() as stack:
        targets: dict[tuple[str, str], str] = {}  # (line, "direct" | bridge) → base URL
        direct = stack.enter_context(_worker())
        targets.update({(line, "direct"): direct for line in lines})
        admins = {}
        for bridge in bridges:
            worker = stack.enter_context(_worker(v1_only=bridge == "on"))
            config = _gateway_config(work / f"gateway-bridge-{bridge}.yaml", bridge)
            ledger = f"sqlite:///{work}/ledger-bridge-{bridge}.db"
            url, _proc, admins[bridge] = stack.enter_context(gateway_process(worker + "/", ledger, "--config",
                                                                             str(config)))
            targets.update({(line, bridge): url for line, b in wanted if b == bridge})
        with ThreadPoolExecutor(max_workers=len(targets)) as pool:
            futures = {key: pool.submit(run_line, key[0], base, work / f"{key[1]}-{key[0]}", tck=tck, python=python)
                       for key, base in targets.items()}
            done = {key: future.result() for key, future in futures.items()}
        metrics = {bridge: _scrape(admin) for bridge, admin in admins.items()}
    return Runs(direct={line: run for (line, target), run in done.items() if target == "direct"},
                gateway={key: run for key, run in done.items() if key[1] != "direct"},
                metrics=metrics)


def _check_run(run: TckRun, what: str) -> None:
    """The run ran: the runner left reports of at least the line's usual number of tests."""
    assert not run.problems, f"{what}: unreadable TCK reports: {run.problems}\n{run.tail()}"
    assert len(run.outcomes) >= MIN_TESTS[run.line], (
        f"{what}: only {len(run.outcomes)} TCK test outcomes (runner exit {run.returncode}); "
        f"the runner's output ends:\n{run.tail()}")


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("bridge", BRIDGE_PARAMS)
@pytest.mark.parametrize("line", LINE_PARAMS)
def test_tck_outcomes_through_the_gateway_match_direct(tck_runs: Runs, line: str, bridge: str) -> None:
    direct, gateway = tck_runs.direct[line], tck_runs.gateway[(line, bridge)]
    print(f"direct:  {direct.summary()}\ngateway: {gateway.summary()} (bridge {bridge})")  # shown by -rP
    _check_run(direct, "direct")
    _check_run(gateway, f"through the gateway (bridge {bridge})")
    assert direct.counts()["passed"] >= MIN_TESTS[line] // 4, f"the worker itself fails the TCK:\n{direct.summary()}"

    allowed = ALLOWED_GAINS[line]
    stale = sorted(set(allowed) - set(direct.outcomes))
    assert not stale, f"ALLOWED_GAINS[{line!r}] names TCK tests this line does not have: {stale}"
    found = differences(direct, gateway, allowed)
    assert not found, (
        f"{len(found)} TCK {line} outcomes differ through the gateway (bridge {bridge}):\n{describe(found)}\n"
        f"direct:  {direct.summary()}\ngateway: {gateway.summary()}\n"
        f"(each run's copy of the TCK, its reports and output: {direct.workdir}, {gateway.workdir})")

    # … and it went through the gateway (the card it followed named the gateway), on every binding
    requests = "a2a_gateway_requests_total"
    if line == "1.0":
        for binding in ("jsonrpc", "rest"):
            sent = tck_runs.metric(bridge, requests, binding=binding, method="SendMessage")
            assert sent > 0, f"no v1.0 SendMessage reached the gateway over {binding}"
    else:
        sent = tck_runs.metric(bridge, requests, binding="jsonrpc", method="message/send")
        assert sent > 0, "no v0.3 message/send reached the gateway"
        bridged = tck_runs.metric(bridge, "a2a_gateway_bridged_requests_total", client_version="0.3")
        assert (bridged > 0) == (bridge == "on"), f"{bridged:.0f} v0.3 requests bridged with the bridge {bridge}"
