"""Hypothesis settings and the shared real-server harness of the property-based fuzz suite.

Profile ``a2a-fuzz-ci`` (registered here; every property takes it as its parent through
:func:`fuzz`): derandomized — the same examples on every run, so CI is reproducible —
with no example database (nothing is written into the repository), no per-example deadline
(real servers on a shared machine), and each property bounded to its own small number of
examples so the whole suite stays well under a minute.

Deep local runs: ``A2A_FUZZ_EXAMPLES=N`` gives every property N examples and a fresh random
seed per run (profile ``a2a-fuzz-deep``), e.g.::

    A2A_FUZZ_EXAMPLES=3000 bash scripts/test.sh tests/fuzz -q -o timeout=0

A failure prints the shrunk example and a ``@reproduce_failure`` line to replay it.

One scripted worker and one gateway (both under real uvicorn on 127.0.0.1, as in
tests/proxy/conftest.py) serve a whole test module: Hypothesis runs many examples inside one
test call, so a per-function harness would be rebuilt for nothing. Each property resets what
it scripts itself and tells examples apart by the worker's request log (before / after) and,
where the ledger matters, by task ids no other example uses.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, settings
from prometheus_client import CollectorRegistry

from gateway.app import build_app
from tests.proxy.conftest import Harness, _config
from tests.support.scripted_worker import ScriptedWorker
from tests.support.gateway import serve_gateway
from tests.support.servers import serve_in_thread, wait_until

_DEEP = os.environ.get("A2A_FUZZ_EXAMPLES", "").strip()

settings.register_profile(
    "a2a-fuzz-ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "a2a-fuzz-deep",
    parent=settings.get_profile("a2a-fuzz-ci"),
    derandomize=False,
    max_examples=int(_DEEP) if _DEEP.isdigit() else 1000,
)
PROFILE = "a2a-fuzz-deep" if _DEEP else "a2a-fuzz-ci"


def fuzz(examples: int) -> settings:
    """The settings of one property: the suite's profile with ``examples`` examples (the
    ``A2A_FUZZ_EXAMPLES`` count instead, for a deep run)."""
    parent = settings.get_profile(PROFILE)
    return settings(parent=parent, max_examples=parent.max_examples if _DEEP else examples)


@contextlib.contextmanager
def running_harness(**overrides: Any) -> Iterator[Harness]:
    """A scripted worker behind a real gateway (``overrides`` as for tests/proxy/conftest.py's
    ``make_harness``), stopped again on exit — servers never outlive the module."""
    worker = ScriptedWorker()
    # examples reuse messageIds for different requests: keyed by them, later examples would be
    # answered as conflicting retries (docs/retries.md §1) instead of reaching the worker
    overrides.setdefault("retries", {"enabled": False})
    with serve_in_thread(worker, name="worker") as wsrv:
        registry = CollectorRegistry()
        app = build_app(_config(wsrv.url + "/", **overrides), registry=registry)
        with serve_gateway(app) as (gsrv, asrv), httpx.Client(trust_env=False, timeout=20) as http:
            harness = Harness(worker, gsrv, asrv, registry, http)
            # the start-up card fetch runs in the background: properties begin once it has ended
            wait_until(lambda: harness.metric("a2a_gateway_card_fetches_total") >= 1,
                       message="the start-up card fetch")
            yield harness


@pytest.fixture(scope="module")
def fh() -> Iterator[Harness]:
    """One gateway + scripted worker for a whole test module (enforce mode, default limits)."""
    with running_harness() as harness:
        yield harness
