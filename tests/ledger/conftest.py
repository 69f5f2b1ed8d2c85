"""Fixtures of the ledger tests: a real redis-server per test module, a real 3-primary Redis
Cluster per session (started at the first test that asks for it), and ledgers of every backend
with the replay window's limits a test asks for."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from gateway.ledger import ledger_from_url
from gateway.ledger.base import TaskLedger, WindowLimits
from gateway.ledger.memory import MemoryLedger
from gateway.ledger.redis import RedisLedger
from gateway.ledger.redis_cluster import RedisClusterLedger
from gateway.ledger.sqlite import SqliteLedger
from tests.support.redis_cluster import redis_cluster
from tests.support.redis_server import redis_server

MakeLedger = Callable[..., Awaitable[TaskLedger]]


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """``redis+cluster://…`` of a 3-primary cluster shared by the session's tests (each test
    keeps to a key prefix of its own)."""
    with redis_cluster() as url:
        yield url


#: The backends every contract test runs on; the cluster's is ``slow`` (it starts a cluster).
BACKENDS = ["memory", "sqlite", "redis", pytest.param("redis-cluster", marks=pytest.mark.slow)]


@pytest.fixture(params=BACKENDS)
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskLedger]:
    """An opened ledger of every backend (the contract tests'), closed at the end; each Redis
    test keeps to a key prefix of its own."""
    if request.param == "memory":
        url = "memory"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/ledger.db"
    elif request.param == "redis-cluster":
        url = request.getfixturevalue("redis_cluster_url")
    else:
        base = request.getfixturevalue("redis_url")
        url = base
    led = ledger_from_url(url)
    if request.param.startswith("redis"):
        led.prefix = f"t{uuid.uuid4().hex[:12]}"  # type: ignore[attr-defined]  # isolate tests on one server
    await led.open()
    yield led
    await led.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def make_ledger(request: pytest.FixtureRequest, backend: str,
                      tmp_path: Path) -> AsyncIterator[MakeLedger]:
    """``await make_ledger(limits)``: an opened ledger of ``backend``, closed at the end.

    Every call of one test shares the test's store — the same SQLite file, the same Redis key
    prefix (unique to the test) — so a second call is a second process on the same ledger
    (memory: a new, empty ledger). ``name`` picks another file / prefix within the test."""
    url = (request.getfixturevalue("redis_url") if backend == "redis"
           else request.getfixturevalue("redis_cluster_url") if backend == "redis-cluster" else "")
    run = uuid.uuid4().hex[:12]
    opened: list[TaskLedger] = []

    async def make(limits: WindowLimits | None = None, *, name: str = "ledger") -> TaskLedger:
        led: TaskLedger
        if backend == "memory":
            led = MemoryLedger(window=limits)
        elif backend == "sqlite":
            led = SqliteLedger(tmp_path / f"{name}.db", window=limits)
        elif backend == "redis-cluster":
            led = RedisClusterLedger(url, prefix=f"t{run}{name}", window=limits)
        else:
            led = RedisLedger(url, prefix=f"t{run}{name}", window=limits)
        await led.open()
        opened.append(led)
        return led

    yield make
    for led in opened:
        await led.close()
