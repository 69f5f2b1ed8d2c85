"""What only the Redis Cluster ledger has (docs/resume.md §4.6): the URL, the hash tags, the
refused replica acknowledgement, and — on a real 3-primary cluster (tests/ledger/conftest.py) —
one slot per task, tasks spread over the nodes, the scans that heal the global bookkeeping and
the scripts loaded again after ``SCRIPT FLUSH``. The contract itself runs on the cluster in
test_contract.py and test_window.py."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from contextlib import closing

import pytest
import redis

from gateway.a2a.states import TaskState
from gateway.config import parse_config
from gateway.errors import ConfigError
from gateway.invariants.model import TaskRecord
from gateway.ledger import codec, ledger_from_url, redact
from gateway.ledger.redis import RedisOptions
from gateway.ledger.redis_cluster import ClusterURL, RedisClusterLedger, parse_cluster_url, task_tag

#: task ids that would break a naive tag: braces, colons, a percent sign, non-ASCII
AWKWARD = ["t-1", "a}b", "{x}", "a:b", "%7D", "ünï", "", "}{"]


def rec(task_id: str = "t-1", state: TaskState = TaskState.WORKING, upstream: str = "w",
        **kw: object) -> TaskRecord:
    base = TaskRecord(upstream=upstream, task_id=task_id, context_id="c-1", state=state,
                      observed_at=1000.0)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


# -- without a server --------------------------------------------------------------------------

def test_the_tag_holds_no_closing_brace_and_names_one_task() -> None:
    pairs = [(u, t) for u in ["w", "w:x", "w}", "{w", "%"] for t in AWKWARD]
    tags = {task_tag(u, t) for u, t in pairs}
    assert len(tags) == len(pairs)  # never shared (the escaping is injective)
    for tag in tags:
        assert tag.startswith("{") and tag.endswith("}") and "}" not in tag[1:-1] and "{" not in tag[1:-1]
    assert task_tag("w", "t-1") == "{w:t-1}"
    assert task_tag("a:b", "c") == "{a%3Ab:c}" != task_tag("a", "b:c") == "{a:b%3Ac}"


def test_cluster_urls_parse() -> None:
    assert parse_cluster_url("redis+cluster://h1:7000,h2,[::1]:7002") == ClusterURL(
        (("h1", 7000), ("h2", 6379), ("::1", 7002)))
    parsed = parse_cluster_url("rediss+cluster://app:p%40ss@h1:7000/0?ssl_ca_certs=/ca.pem"
                               "&ssl_certfile=/c.pem&ssl_keyfile=/c.key&socket_timeout=3")
    assert parsed.nodes == (("h1", 7000),) and parsed.tls
    assert (parsed.username, parsed.password) == ("app", "p@ss")
    assert parsed.options == {"ssl_ca_certs": "/ca.pem", "ssl_certfile": "/c.pem",
                              "ssl_keyfile": "/c.key", "socket_timeout": 3.0}
    parsed = parse_cluster_url("redis+cluster://h:1?username=u&password=p")
    assert (parsed.username, parsed.password) == ("u", "p")


@pytest.mark.parametrize("url,message", [
    ("redis+cluster://h:7000/1", "only DB 0"),
    ("redis+cluster://h:7000?db=2", "only DB 0"),
    ("redis+cluster://h:99999", "bad cluster node port"),
    ("redis+cluster://:7000", "without a host"),
    ("redis+cluster://h:7000?ssl_ca_certs=/ca.pem", r"need rediss\+cluster://"),
    ("redis://h:7000", r"not a redis\+cluster:// URL"),
])
def test_bad_cluster_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cluster_url(url)


def test_ledger_from_url_builds_a_cluster_ledger_and_refuses_replica_acks() -> None:
    led = ledger_from_url("redis+cluster://app:secret@h1:7000,h2:7001")
    assert isinstance(led, RedisClusterLedger) and led.backend == "redis"
    assert led.url == "redis+cluster://app:secret@h1:7000,h2:7001"
    assert redact(led.url) == "redis+cluster://app:***@h1:7000,h2:7001"
    assert isinstance(ledger_from_url("rediss+cluster://h1:7000"), RedisClusterLedger)
    with pytest.raises(ValueError, match="min_replica_acks: not supported with a redis\\+cluster://"):
        ledger_from_url("redis+cluster://h1:7000", redis=RedisOptions(min_replica_acks=1))


def _config(ledger: dict[str, object]) -> dict[str, object]:
    return {"upstreams": [{"name": "w", "url": "http://127.0.0.1:9999/"}], "ledger": ledger}


def test_config_refuses_replica_acks_on_a_cluster_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="min_replica_acks: not supported with a redis\\+cluster:// ledger URL"):
        parse_config(_config({"url": "redis+cluster://h1:7000", "min_replica_acks": 1}))
    config = parse_config(_config({"url": "redis+cluster://app@h1:7000,h2:7001",
                                   "password_file": "/run/secrets/redis"}))
    assert config.ledger.redis_options() == RedisOptions(password_file="/run/secrets/redis")
    with pytest.raises(ConfigError, match="sentinel_username: needs a redis\\+sentinel://"):
        parse_config(_config({"url": "redis+cluster://h1:7000", "sentinel_username": "u"}))


async def test_a_prefix_with_a_brace_is_refused_at_open() -> None:
    led = RedisClusterLedger("redis+cluster://127.0.0.1:1", prefix="a{b")
    with pytest.raises(ValueError, match="prefix"):
        await led.open()


# -- on a real cluster -------------------------------------------------------------------------

@pytest.fixture
async def cluster_ledger(redis_cluster_url: str) -> AsyncIterator[RedisClusterLedger]:
    led = RedisClusterLedger(redis_cluster_url, prefix=f"c{uuid.uuid4().hex[:12]}")
    await led.open()
    yield led
    await led.close()


def _nodes(url: str) -> list[redis.Redis]:
    return [redis.Redis(host=h, port=p) for h, p in parse_cluster_url(url).nodes]


def _keys_by_node(url: str, prefix: str) -> list[set[str]]:
    found = []
    for node in _nodes(url):
        with closing(node):
            found.append({k.decode() for k in node.scan_iter(match=f"{prefix}:*")})
    return found


@pytest.mark.slow
async def test_a_record_and_its_window_are_in_one_slot(cluster_ledger: RedisClusterLedger,
                                                       redis_cluster_url: str) -> None:
    led = cluster_ledger
    for upstream in ("w", "w:x", "{w}"):
        for task_id in AWKWARD:
            await led.put(rec(task_id, upstream=upstream), 0)
            await led.append_event(upstream, task_id, None, b"payload", 1000.0)
            keys = [led._key(upstream, task_id), led._events_key(upstream, task_id),
                    led._window_key(upstream, task_id)]
            slots = {await led._redis.cluster_keyslot(key) for key in keys}  # the server's CLUSTER KEYSLOT
            assert len(slots) == 1, (upstream, task_id, keys, slots)
            got = await led.get(upstream, task_id)
            assert got is not None and got.record.task_id == task_id and got.record.upstream == upstream
    on_nodes = _keys_by_node(redis_cluster_url, led.prefix)
    every = set().union(*on_nodes)
    for upstream in ("w", "w:x", "{w}"):
        for task_id in AWKWARD:
            assert {led._key(upstream, task_id), led._events_key(upstream, task_id),
                    led._window_key(upstream, task_id)} <= every


@pytest.mark.slow
async def test_tasks_spread_over_the_nodes(cluster_ledger: RedisClusterLedger, redis_cluster_url: str) -> None:
    led = cluster_ledger
    tasks = [f"t-{i}" for i in range(30)]
    for task_id in tasks:
        await led.put(rec(task_id), 0)
        await led.append_event("w", task_id, None, task_id.encode(), 1000.0)
    on_nodes = _keys_by_node(redis_cluster_url, led.prefix)
    holding = [{t for t in tasks if led._key("w", t) in keys} for keys in on_nodes]
    assert sum(1 for held in holding if held) == 3, holding  # every primary holds some tasks
    for held, keys in zip(holding, on_nodes):  # and each task's window is where its record is
        assert {led._events_key("w", t) for t in held} <= keys
    assert (await led.count_by_state()) == {"TASK_STATE_WORKING": 30}
    for task_id in tasks:
        got = await led.get("w", task_id)
        assert got is not None and got.version == 1


async def _cas_only(led: RedisClusterLedger, record: TaskRecord, expected: int) -> None:
    """What a process that died right after the compare-and-set left: the script's write only."""
    done = await led._call("EVALSHA", led._cas_sha, 1, led._key(record.upstream, record.task_id),
                           expected, expected + 1, record.state.value, int(record.terminal),
                           repr(record.observed_at), codec.encode(record))
    assert done[0] == 1


@pytest.mark.slow
async def test_the_resync_scan_and_the_prune_heal_what_a_crash_left(cluster_ledger: RedisClusterLedger) -> None:
    led = cluster_ledger
    r = led._redis
    live, terminal = f"{led.prefix}:live", f"{led.prefix}:terminal"
    await led.put(rec("t-crashed"), 0)  # live, then completed by a process that died after the script
    await _cas_only(led, rec("t-crashed", TaskState.COMPLETED, observed_at=100.0), 1)
    await led.put(rec("t-gone"), 0)
    await r.delete(led._key("w", "t-gone"))  # a live member whose task vanished
    await led.put(rec("t-live"), 0)
    assert await r.zscore(terminal, led._key("w", "t-crashed")) is None
    assert await led.mark_resync() == 1
    assert {m.decode() for m in await r.smembers(live)} == {led._key("w", "t-live")}
    assert await r.zscore(terminal, led._key("w", "t-crashed")) == 100.0  # indexed: prunable
    live_task = await led.get("w", "t-live")
    assert live_task is not None and live_task.needs_resync
    crashed = await led.get("w", "t-crashed")
    assert crashed is not None and not crashed.needs_resync
    # the prune checks each task itself: a stale score is corrected, a vanished task forgotten
    await led.put(rec("t-newer", TaskState.COMPLETED, observed_at=900.0), 0)
    await r.zadd(terminal, {led._key("w", "t-newer"): 50.0, led._key("w", "t-never"): 50.0})
    assert await led.prune(older_than=500.0) == 1
    assert await led.get("w", "t-crashed") is None
    assert await r.zscore(terminal, led._key("w", "t-newer")) == 900.0
    assert await r.zscore(terminal, led._key("w", "t-never")) is None
    # the counts are what is approximate (docs/resume.md §4.6): the crashed put's move was never
    # counted (t-crashed is still WORKING there, and its prune took one COMPLETED: t-newer's), and
    # t-gone was deleted behind the ledger's back
    assert await led.count_by_state() == {"TASK_STATE_WORKING": 3}


@pytest.mark.slow
async def test_scripts_lost_on_every_node_are_loaded_again(cluster_ledger: RedisClusterLedger,
                                                           redis_cluster_url: str) -> None:
    led = cluster_ledger
    tasks = [f"t-{i}" for i in range(12)]
    for task_id in tasks:
        await led.put(rec(task_id), 0)
    for node in _nodes(redis_cluster_url):
        with closing(node):
            node.script_flush()
    versions = [await led.put(rec(t, TaskState.COMPLETED), 1) for t in tasks]
    assert versions == [2] * 12
    event_id, _ = await led.append_event("w", "t-0", None, b"x", 1000.0)
    assert (await led.events_after("w", "t-0", event_id)).found
    assert await led.count_by_state() == {"TASK_STATE_COMPLETED": 12}
    with pytest.raises(Exception, match="version moved"):
        await led.put(rec("t-0", TaskState.FAILED), 1)
