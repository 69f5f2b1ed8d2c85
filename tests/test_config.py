"""gateway.config and ``python -m gateway check-config``: YAML → one typed, frozen config.

Errors must name the YAML path of the offending key (``upstreams[0].url: …``) so an operator can
find it; the CLI prints the normalized config as JSON (exit 0) or one line per problem (exit 2).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pydantic
import pytest

from gateway.config import GatewayConfig, load_config, parse_config, sidecar_config
from gateway.errors import ConfigError, GatewayError

ROOT = Path(__file__).resolve().parent.parent

TWO_UPSTREAMS = """\
listen:
  host: 0.0.0.0
  port: 9090
mode: observe
upstreams:
  - name: echo
    url: http://127.0.0.1:9999
    prefix: /
    timeouts:
      read: 600
  - name: scheduler
    url: http://worker-a.internal:8080/a2a/tock/
    prefix: /a2a/tick/
    jsonrpc_path: /rpc/
limits:
  max_event_bytes: 1048576
log:
  level: debug
  format: text
"""
MINIMAL = """\
upstreams:
  - name: worker
    url: https://worker.example.net/a2a
"""


def write(tmp_path: Path, text: str, name: str = "gateway.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems(data: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return info.value.problems


def one_upstream(**fields: object) -> dict:
    return {"upstreams": [{"name": "w", "url": "http://w.internal:8080/", **fields}]}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, check=False)


class TestLoad:
    def test_two_upstreams_load_into_a_typed_config(self, tmp_path):
        config = load_config(write(tmp_path, TWO_UPSTREAMS))
        assert isinstance(config, GatewayConfig)
        assert (config.listen.host, config.listen.port, config.mode) == ("0.0.0.0", 9090,
                                                                          "observe")
        echo, sched = config.upstreams
        assert (echo.name, echo.prefix, echo.timeouts.read) == ("echo", "/", 600)
        assert (sched.name, sched.prefix, sched.jsonrpc_path) == ("scheduler", "/a2a/tick", "/rpc")
        assert config.limits.max_event_bytes == 1048576
        assert (config.log.level, config.log.format) == ("debug", "text")

    def test_urls_are_normalized_to_one_trailing_slash(self, tmp_path):
        config = load_config(write(tmp_path, TWO_UPSTREAMS))
        assert [u.url for u in config.upstreams] == ["http://127.0.0.1:9999/",
                                                    "http://worker-a.internal:8080/a2a/tock/"]

    def test_prefixes_lose_their_trailing_slash_except_root(self):
        config = parse_config({"upstreams": [
            {"name": "a", "url": "http://a", "prefix": "/"},
            {"name": "b", "url": "http://b", "prefix": "/b/"},
            {"name": "c", "url": "http://c", "prefix": "/c/d"},
        ]})
        assert [u.prefix for u in config.upstreams] == ["/", "/b", "/c/d"]

    def test_defaults_of_a_minimal_file(self, tmp_path):
        config = load_config(write(tmp_path, MINIMAL))
        up = config.upstreams[0]
        assert (config.listen.host, config.listen.port) == ("127.0.0.1", 8080)
        assert config.mode == "enforce"
        assert (up.prefix, up.jsonrpc_path, up.url) == ("/", "/", "https://worker.example.net/a2a/")
        assert up.timeouts.read >= 60  # a blocking SendMessage may take minutes (pitfall 15)
        assert config.limits.max_event_bytes == 8 * 1024 * 1024  # F09's example cap
        assert config.limits.post_terminal_drain_seconds == 2.0  # F08's bounded close
        assert (config.log.level, config.log.format) == ("info", "json")

    def test_config_is_frozen(self, tmp_path):
        config = load_config(write(tmp_path, MINIMAL))
        with pytest.raises(pydantic.ValidationError):
            config.mode = "observe"  # type: ignore[misc]

    def test_normalized_form_validates_to_the_same_config(self, tmp_path):
        """The check-config JSON is itself a valid config (a fixed point)."""
        config = load_config(write(tmp_path, TWO_UPSTREAMS))
        again = parse_config(orjson.loads(orjson.dumps(config.model_dump(mode="json"))))
        assert again == config

    def test_sidecar_form_mounts_one_upstream_at_root(self):
        config = sidecar_config("http://127.0.0.1:9999", host="0.0.0.0", port=8000,
                                mode="observe", ledger="memory")
        assert [(u.name, u.url, u.prefix) for u in config.upstreams] == \
            [("worker", "http://127.0.0.1:9999/", "/")]
        assert (config.listen.port, config.mode) == (8000, "observe")

    def test_sidecar_form_rejects_a_bad_url(self):
        with pytest.raises(ConfigError) as info:
            sidecar_config("127.0.0.1:9999", host="h", port=1, mode="enforce", ledger="memory")
        assert info.value.problems[0].startswith("upstreams[0].url: ")
    def test_the_shipped_example_config_is_valid(self):
        config = load_config(ROOT / "config" / "gateway.example.yaml")
        assert [u.url for u in config.upstreams] == ["http://127.0.0.1:9999/"]  # the demo worker
        # the name the docs' `ledger show TASK_ID` and /tasks/worker/…/timeline take by default
        assert [u.name for u in config.upstreams] == ["worker"]


class TestErrors:
    def test_a_bad_url_names_its_yaml_path(self):
        lines = problems({"upstreams": [{"name": "a", "url": "http://a"},
                                        {"name": "b", "url": "ftp://b", "prefix": "/b"}]})
        assert len(lines) == 1
        assert lines[0].startswith("upstreams[1].url: ")
        assert "http" in lines[0]

    def test_a_prefix_without_leading_slash_names_its_path(self):
        lines = problems(one_upstream(prefix="a2a"))
        assert [ln.split(": ", 1)[0] for ln in lines] == ["upstreams[0].prefix"]

    def test_nested_timeout_errors_name_the_full_path(self):
        lines = problems(one_upstream(timeouts={"read": 0}))
        assert [ln.split(": ", 1)[0] for ln in lines] == ["upstreams[0].timeouts.read"]

    def test_an_unbounded_or_empty_pool_is_refused(self):
        for bad in (0, -1):
            lines = problems(one_upstream(pool={"max_connections": bad}))
            assert [ln.split(": ", 1)[0] for ln in lines] == ["upstreams[0].pool.max_connections"]
        lines = problems(one_upstream(pool={"wait_seconds": 0}))
        assert [ln.split(": ", 1)[0] for ln in lines] == ["upstreams[0].pool.wait_seconds"]

    def test_the_old_pool_timeout_is_still_read_as_the_pool_wait(self):
        """``timeouts.pool`` of earlier versions moved to ``pool.wait_seconds``: a file that
        sets it keeps working, and the new name wins when both are given."""
        assert parse_config(one_upstream(timeouts={"pool": 7})).upstreams[0].pool.wait_seconds == 7
        both = one_upstream(timeouts={"pool": 7}, pool={"wait_seconds": 2})
        assert parse_config(both).upstreams[0].pool.wait_seconds == 2
        assert problems(one_upstream(timeouts={"pool": 0}))[0].startswith("upstreams[0].pool.wait_seconds")

    def test_the_pool_defaults_sit_below_the_process_bound(self):
        config = parse_config(one_upstream())
        pool = config.upstreams[0].pool
        assert (pool.max_connections, pool.wait_seconds) == (5000, 5.0)
        # the bound an operator meets first is the pool, not the process's connection cap
        assert config.listen.max_connections >= 2 * pool.max_connections

    def test_every_problem_gets_its_own_line(self):
        data = {"listen": {"port": 70000, "hots": "x"}, "mode": "strict",
                **one_upstream(name="bad name!")}
        paths = sorted(ln.split(": ", 1)[0] for ln in problems(data))
        assert paths == ["listen.hots", "listen.port", "mode", "upstreams[0].name"]

    def test_pydantic_prefix_noise_is_removed(self):
        assert not any("Value error" in ln for ln in problems(one_upstream(url="x")))

    def test_missing_upstreams_is_reported(self):
        assert [ln.split(": ", 1)[0] for ln in problems({"mode": "enforce"})] == ["upstreams"]

    def test_an_empty_upstream_list_is_reported(self):
        assert [ln.split(": ", 1)[0] for ln in problems({"upstreams": []})] == ["upstreams"]

    def test_an_unknown_ledger_url_names_its_path(self):
        lines = problems({**one_upstream(), "ledger": {"url": "postgres://db/1"}})
        assert len(lines) == 1 and lines[0].startswith("ledger.url: ")

    def test_duplicate_prefixes_are_rejected(self):
        """Two mounts at one prefix would make routing ambiguous; /a and /a/ are the same."""
        lines = problems({"upstreams": [{"name": "a", "url": "http://a", "prefix": "/a"},
                                        {"name": "b", "url": "http://b", "prefix": "/a/"}]})
        assert len(lines) == 1
        assert "upstreams" in lines[0] and "duplicate prefix /a" in lines[0]

    def test_duplicate_names_are_rejected(self):
        lines = problems({"upstreams": [{"name": "a", "url": "http://a", "prefix": "/x"},
                                        {"name": "a", "url": "http://b", "prefix": "/y"}]})
        assert len(lines) == 1 and "duplicate name a" in lines[0]

    @pytest.mark.parametrize("doc", ["", "- a\n- b\n", "just a string\n", "42\n"])
    def test_a_document_that_is_not_a_mapping_is_rejected_naming_the_file(self, tmp_path, doc):
        path = write(tmp_path, doc)
        with pytest.raises(ConfigError) as info:
            load_config(path)
        empty = " (the file is empty)" if doc == "" else ""
        assert info.value.problems == [f"{path}: (top level): expected a mapping{empty}"]
        with pytest.raises(ConfigError) as info:
            parse_config(orjson.loads(b"[]"))  # a parsed document has no file to name
        assert info.value.problems == ["(top level): expected a mapping"]

    def test_serve_names_an_empty_config_file(self, tmp_path):
        from gateway.cli import _parser, resolve, serve_config

        path = write(tmp_path, "")
        args = _parser().parse_args(["serve", "--config", str(path)])
        with pytest.raises(ConfigError) as info:
            serve_config(resolve(args, environ={}))
        assert info.value.problems == [f"{path}: (top level): expected a mapping (the file is empty)"]

    def test_invalid_yaml_names_the_file_and_the_line(self, tmp_path):
        path = write(tmp_path, "upstreams:\n  - name: a\n    url: [http://a\n")
        with pytest.raises(ConfigError) as info:
            load_config(path)
        (line,) = info.value.problems
        assert line.startswith(f"{path}: invalid YAML")
        assert "line 3" in line

    def test_an_unreadable_file_is_a_config_error(self, tmp_path):
        with pytest.raises(ConfigError) as info:
            load_config(tmp_path / "absent.yaml")
        assert str(tmp_path / "absent.yaml") in info.value.problems[0]

    def test_config_error_is_a_gateway_error_joining_its_problems(self):
        err = ConfigError(["a: x", "b: y"])
        assert isinstance(err, GatewayError)
        assert str(err) == "a: x; b: y"


class TestCheckConfigCli:
    def test_valid_file_exits_0_and_prints_the_normalized_json(self, tmp_path):
        path = write(tmp_path, TWO_UPSTREAMS)
        proc = cli("check-config", str(path))
        assert proc.returncode == 0, proc.stderr
        printed = orjson.loads(proc.stdout)
        assert printed == load_config(path).model_dump(mode="json")
        assert [u["prefix"] for u in printed["upstreams"]] == ["/", "/a2a/tick"]

    def test_invalid_file_exits_2_with_one_path_line_per_problem(self, tmp_path):
        path = write(tmp_path, TWO_UPSTREAMS.replace("http://127.0.0.1:9999", "127.0.0.1:9999")
                     .replace("port: 9090", "port: -1"))
        proc = cli("check-config", str(path))
        assert proc.returncode == 2
        assert proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert sorted(ln.split(": ", 1)[0] for ln in lines) == ["listen.port", "upstreams[0].url"]

    def test_invalid_yaml_exits_2(self, tmp_path):
        proc = cli("check-config", str(write(tmp_path, "listen: [\n")))
        assert proc.returncode == 2
        assert "invalid YAML" in proc.stderr

    def test_files_missing_on_this_host_are_warnings_with_their_yaml_path(self, tmp_path):
        """serve would stop on them; check-config names them but exits 0 (a file is often
        checked away from its host: the image's and the Kubernetes configs are)."""
        (tmp_path / "server.pem").write_text("x")
        text = (f"listen: {{tls: {{cert_file: {tmp_path}/server.pem, key_file: {tmp_path}/gone.key}}}}\n"
                f"admin: {{token_file: {tmp_path}/token}}\n"
                f"ledger: {{url: 'sqlite:///{tmp_path}/no-dir/ledger.db'}}\n"
                "upstreams: [{name: w, url: 'http://127.0.0.1:9999/'}]\n")
        proc = cli("check-config", str(write(tmp_path, text)))
        assert proc.returncode == 0, proc.stderr
        assert orjson.loads(proc.stdout)["admin"]["token_file"] == f"{tmp_path}/token"
        assert proc.stderr.splitlines() == [
            f"warning: admin.token_file: {tmp_path}/token: not found on this host",
            f"warning: listen.tls.key_file: {tmp_path}/gone.key: not found on this host",
            f"warning: ledger.url: the directory {tmp_path}/no-dir does not exist on this host"]

    def test_missing_file_exits_2(self, tmp_path):
        proc = cli("check-config", str(tmp_path / "nope.yaml"))
        assert proc.returncode == 2
        assert "nope.yaml" in proc.stderr


def test_a_config_file_that_is_not_utf8_or_nested_too_deeply_is_a_config_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A ConfigError (exit 2, one line; on SIGHUP a refused reload), never a traceback."""
    from gateway.config import load_config
    from gateway.errors import ConfigError

    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"upstreams:\n  - {name: caf\xe9, url: 'http://x/'}\n")
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    for path, words in ((latin1, "not UTF-8"), (deep, "nested too deeply")):
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert words in info.value.problems[0]


class TestRedisLedgerSettings:
    """``ledger:`` settings of a highly available Redis ledger (docs/resume.md §4)."""

    SENTINEL = "redis+sentinel://app:hunter2@s1:26379,s2:26379,s3:26379/ledger/0"

    def test_sentinel_url_and_settings_reach_the_ledger(self, tmp_path):
        from gateway.ledger import ledger_from_url
        from gateway.ledger.redis import RedisLedger, RedisOptions

        config = parse_config({**one_upstream(), "ledger": {
            "url": "redis+sentinel://app@s1:26379,s2:26379/ledger/0", "min_replica_acks": 1,
            "replica_ack_timeout_seconds": 0.25, "password_file": "/run/secrets/redis",
            "sentinel_username": "watcher", "sentinel_password_file": "/run/secrets/sentinel"}})
        options = config.ledger.redis_options()
        assert options == RedisOptions(1, 0.25, "/run/secrets/redis", "watcher", "/run/secrets/sentinel")
        led = ledger_from_url(config.ledger.url, redis=options)
        assert isinstance(led, RedisLedger) and led.options is options
        redis = parse_config({**one_upstream(), "ledger": {"url": "redis://h:6379/0"}})
        assert redis.ledger.redis_options() == RedisOptions()
        # a ledger that is not Redis takes none: redis-py is then never imported
        assert parse_config(one_upstream()).ledger.redis_options() is None

    @pytest.mark.parametrize("ledger, problem", [
        ({"url": "sqlite:x.db", "min_replica_acks": 1}, "ledger: min_replica_acks: needs a Redis ledger URL"),
        ({"url": "memory", "password_file": "/p"}, "ledger: password_file: needs a Redis ledger URL"),
        ({"url": "redis://h:6379/0", "sentinel_password_file": "/p"},
         "ledger: sentinel_password_file: needs a redis+sentinel:// ledger URL"),
        ({"url": "redis://h:6379/0", "sentinel_username": "u"},
         "ledger: sentinel_username: needs a redis+sentinel:// ledger URL"),
        ({"url": "redis://:pw@h:6379/0", "password_file": "/p"},
         "ledger: password_file: the URL names a password too; give one of them"),
        ({"url": "redis://h:6379/0", "min_replica_acks": -1}, "ledger.min_replica_acks: "),
        ({"url": "redis://h:6379/0", "replica_ack_timeout_seconds": 0}, "ledger.replica_ack_timeout_seconds: "),
    ])
    def test_a_setting_that_does_not_fit_the_url_is_refused(self, ledger, problem):
        (line,) = problems({**one_upstream(), "ledger": ledger})
        assert line.startswith(problem), line

    def test_a_bad_sentinel_url_names_its_path_without_the_password(self):
        (line,) = problems({**one_upstream(), "ledger": {"url": self.SENTINEL.replace("/ledger/0", "")}})
        assert line.startswith("ledger.url: ") and "no Sentinel service name" in line
        assert "hunter2" not in line

    def test_check_config_prints_no_password(self, tmp_path):
        path = write(tmp_path, MINIMAL + f"ledger:\n  url: {self.SENTINEL}\n  min_replica_acks: 1\n")
        proc = cli("check-config", str(path))
        assert proc.returncode == 0, proc.stderr
        assert "hunter2" not in proc.stdout
        printed = orjson.loads(proc.stdout)["ledger"]
        assert printed["url"] == "redis+sentinel://app:***@s1:26379,s2:26379,s3:26379/ledger/0"
        assert printed["min_replica_acks"] == 1


def test_check_config_prints_no_upstream_password(tmp_path):
    """An upstream URL with basic-auth credentials is printed as the ledger's is: redacted."""
    path = write(tmp_path, "upstreams:\n  - {name: worker, url: 'https://gw:hunter2@worker.example.net/a2a'}\n")
    proc = cli("check-config", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "hunter2" not in proc.stdout
    assert orjson.loads(proc.stdout)["upstreams"][0]["url"] == "https://gw:***@worker.example.net/a2a/"


class TestReplayWindowSettings:
    """``replay_window:`` bounds (docs/resume.md §2.1)."""

    def test_the_bounds_reach_the_ledger_limits(self):
        from gateway.ledger.base import WindowLimits

        config = parse_config({**one_upstream(), "replay_window": {
            "max_events_per_task": 7, "max_bytes_per_task": 70, "max_events_total": 700,
            "max_bytes_total": 7000, "retention_seconds": 7.5}})
        assert config.replay_window.limits() == WindowLimits(
            max_events_per_task=7, max_bytes_per_task=70, max_events_total=700, max_bytes_total=7000,
            retention_seconds=7.5)
        assert parse_config(one_upstream()).replay_window.limits() == WindowLimits()
        assert WindowLimits().max_bytes_total == 256 * 1024 * 1024

    def test_ten_years_of_retention_is_the_longest(self):
        from gateway.config import TEN_YEARS

        config = parse_config({**one_upstream(), "replay_window": {"retention_seconds": TEN_YEARS}})
        assert config.replay_window.retention_seconds == TEN_YEARS == 315_360_000

    @pytest.mark.parametrize("field, value", [
        ("retention_seconds", float("inf")),  # int(inf * 1000) raised on every Redis append
        ("retention_seconds", float("nan")),
        ("retention_seconds", 1e17),  # past what a Redis key's expiry in ms holds
        ("retention_seconds", 315_360_001),
        ("retention_seconds", 0),
        ("max_bytes_total", 0),
        ("max_bytes_total", -1),
        ("max_bytes_total", 1.5),
        ("max_events_total", 0),
        ("max_bytes_per_task", "a lot"),
    ])
    def test_a_bound_out_of_range_is_refused(self, field, value):
        (line,) = problems({**one_upstream(), "replay_window": {field: value}})
        assert line.startswith(f"replay_window.{field}: "), line

    def test_a_yaml_inf_is_refused(self, tmp_path):
        from gateway.config import load_config

        path = write(tmp_path, MINIMAL + "replay_window:\n  retention_seconds: .inf\n")
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert info.value.problems[0].startswith("replay_window.retention_seconds: ")


class TestSweep:
    """The proactive sweep's section (docs/sweep.md §2)."""

    def test_the_defaults_are_on_and_bounded(self):
        sweep = parse_config(one_upstream()).sweep
        assert (sweep.enabled, sweep.interval_seconds, sweep.batch_size, sweep.requests_per_second,
                sweep.max_in_flight) == (True, 5.0, 100, 5.0, 4)

    def test_it_can_be_turned_off_and_tuned(self):
        sweep = parse_config({**one_upstream(), "sweep": {"enabled": False, "requests_per_second": 0.5,
                                                          "max_in_flight": 1, "batch_size": 10}}).sweep
        assert not sweep.enabled and sweep.requests_per_second == 0.5
        assert (sweep.max_in_flight, sweep.batch_size) == (1, 10)

    @pytest.mark.parametrize("field, value", [
        ("interval_seconds", 0), ("interval_seconds", float("inf")), ("requests_per_second", 0),
        ("requests_per_second", float("nan")), ("requests_per_second", float("inf")),
        ("batch_size", 0), ("max_in_flight", 0), ("max_in_flight", 1.5), ("enabled", "sometimes"),
        ("rate", 3),
    ])
    def test_a_bad_value_is_refused_naming_its_path(self, field, value):
        (line,) = problems({**one_upstream(), "sweep": {field: value}})
        assert line.startswith(f"sweep.{field}: "), line
SEVERAL_PROBLEMS = """\
listen:
  hots: 0.0.0.0
  host: "not a host"
upstreams:
  - name: a
    url: http://127.0.0.1:9999/
    card: {ttl: 5}
  - name: a
    url: ftp://b
    prefix: /b
"""


class TestCheckConfigReportsEverything:
    def test_several_errors_are_reported_at_once_with_their_yaml_paths(self, tmp_path):
        """An unknown key (with a hint), a bad host, a duplicate name at the duplicate's own
        path and a bad URL: one run of check-config names them all."""
        proc = cli("check-config", str(write(tmp_path, SEVERAL_PROBLEMS)))
        assert proc.returncode == 2 and proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        by_path = {ln.split(": ", 1)[0]: ln.split(": ", 1)[1] for ln in lines}
        assert sorted(by_path) == ["listen.host", "listen.hots", "upstreams[0].card.ttl",
                                   "upstreams[1].name", "upstreams[1].url"]
        assert "did you mean 'host'" in by_path["listen.hots"]
        assert "did you mean 'ttl_seconds'" in by_path["upstreams[0].card.ttl"]
        assert "duplicate name a" in by_path["upstreams[1].name"] and "upstreams[0].name" in by_path["upstreams[1].name"]
        assert "RFC 1123" in by_path["listen.host"]

    @pytest.mark.parametrize("host", ["127.0.0.1", "::", "0.0.0.0", "::1", "localhost", "gw-1.example.net",
                                      "gw.example.net."])
    def test_ip_literals_and_host_names_are_accepted(self, host):
        assert parse_config({"listen": {"host": host}, "admin": {"host": host}, **one_upstream()}).listen.host == host

    @pytest.mark.parametrize("host", ["not a host", "", "-bad.example", "a..b", "http://x", "x:80", "a" * 64])
    def test_anything_else_is_refused_as_a_host(self, host):
        assert [ln.split(": ", 1)[0] for ln in problems({"admin": {"host": host}, **one_upstream()})] == \
            ["admin.host"]

    def test_duplicate_prefixes_name_the_second_upstream(self):
        lines = problems({"upstreams": [{"name": "a", "url": "http://a", "prefix": "/x"},
                                        {"name": "b", "url": "http://b", "prefix": "/x/"}]})
        assert lines == ["upstreams[1].prefix: duplicate prefix /x (also upstreams[0].prefix)"]

    def test_an_invalid_prefix_is_not_also_called_a_duplicate(self):
        lines = problems({"upstreams": [{"name": "a", "url": "http://a", "prefix": "/x"},
                                        {"name": "b", "url": "http://b", "prefix": "x"}]})
        assert lines == ["upstreams[1].prefix: must start with '/'"]


class TestStateDirectory:
    def test_the_default_ledger_is_in_the_state_directory_by_the_documented_rule(self, monkeypatch, tmp_path):
        from gateway.config import state_dir

        monkeypatch.delenv("A2A_GATEWAY_STATE_DIR", raising=False)
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert state_dir() == tmp_path / "home" / ".local" / "state" / "a2a-gateway"
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
        assert state_dir() == tmp_path / "xdg" / "a2a-gateway"
        monkeypatch.setenv("A2A_GATEWAY_STATE_DIR", str(tmp_path / "state"))
        assert parse_config(one_upstream()).ledger.url == f"sqlite://{tmp_path}/state/ledger.db"

    def test_ledger_subcommands_find_the_default_ledger_from_any_directory(self, tmp_path):
        """``ledger stats`` run elsewhere reads the state directory's ledger (here one made
        by opening it, as serve does)."""
        import asyncio

        from gateway.ledger import ledger_from_url

        state = tmp_path / "state"
        state.mkdir()

        async def create() -> None:
            ledger = ledger_from_url(f"sqlite:///{state}/ledger.db")
            await ledger.open()
            await ledger.close()

        asyncio.run(create())
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        proc = subprocess.run([sys.executable, "-m", "gateway", "ledger", "stats"], cwd=elsewhere,
                              env={**os.environ, "A2A_GATEWAY_STATE_DIR": str(state),
                                   "PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert orjson.loads(proc.stdout)["url"] == f"sqlite://{state}/ledger.db"


PRECEDENCE_FILE = """\
listen: {port: 7001, host: 10.0.0.1, shutdown_grace_seconds: 1, pid_file: /tmp/from-file.pid}
admin: {port: 8001, host: 10.0.1.1}
mode: observe
ledger: {url: "sqlite:///tmp/from-file.db"}
upstreams:
  - {name: only, url: "http://file.internal:1/", prefix: /}
"""

#: setting -> (flag value, environment value, file value, how to read it off the config)
PRECEDENCE = {
    "port": ("7003", "7002", 7001, lambda c: c.listen.port),
    "mode": ("enforce", "observe", "observe", lambda c: c.mode),
    "ledger": ("memory", "sqlite:///tmp/from-env.db", "sqlite:///tmp/from-file.db", lambda c: c.ledger.url),
    "upstream": ("http://flag.internal:3/", "http://env.internal:2/", "http://file.internal:1/",
                 lambda c: c.upstreams[0].url),
    "host": ("10.0.0.3", "10.0.0.2", "10.0.0.1", lambda c: c.listen.host),
    "admin_host": ("10.0.1.3", "10.0.1.2", "10.0.1.1", lambda c: c.admin.host),
    "admin_port": ("8003", "8002", 8001, lambda c: c.admin.port),
    "shutdown_grace": ("3", "2", 1.0, lambda c: c.listen.shutdown_grace_seconds),
    "pid_file": ("/tmp/from-flag.pid", "/tmp/from-env.pid", "/tmp/from-file.pid", lambda c: c.listen.pid_file),
}


def _serve_config(tmp_path: Path, argv: list[str], env: dict[str, str]):
    from gateway.cli import _parser, resolve, serve_config

    args = _parser().parse_args(["serve", "--config", str(write(tmp_path, PRECEDENCE_FILE)), *argv])
    return serve_config(resolve(args, environ=env))


class TestPrecedence:
    """flag > A2A_GATEWAY_* > config file > default, for every setting."""

    @pytest.mark.parametrize("setting", sorted(PRECEDENCE))
    @pytest.mark.parametrize("given", ["file", "env", "flag"])
    def test_the_flag_wins_over_the_variable_which_wins_over_the_file(self, tmp_path, setting, given):
        flag, env, file_value, read = PRECEDENCE[setting]
        argv = [f"--{setting.replace('_', '-')}", flag] if given == "flag" else []
        environ = {f"A2A_GATEWAY_{setting.upper()}": env} if given in ("env", "flag") else {}
        expected = {"file": file_value, "env": env, "flag": flag}[given]
        expected = type(file_value)(expected)  # the file's value has the setting's type
        config = _serve_config(tmp_path, argv, environ)
        assert read(config) == expected
        # the other settings keep the file's values
        for other, (_, _, value, read_other) in PRECEDENCE.items():
            if other != setting:
                assert read_other(config) == value

    def test_the_matrix_holds_every_setting_that_sets_a_config_key(self):
        from gateway.cli import SERVE_SETTINGS

        assert {s.dest for s in SERVE_SETTINGS if s.path is not None} | {"upstream"} == set(PRECEDENCE)

    def test_the_upstream_variable_with_a_config_file_keeps_the_upstreams_other_settings(self, tmp_path):
        config = _serve_config(tmp_path, [], {"A2A_GATEWAY_UPSTREAM": "http://env.internal:2/"})
        assert [(u.name, u.url, u.prefix) for u in config.upstreams] == [("only", "http://env.internal:2/", "/")]

    def test_an_upstream_for_a_file_of_several_upstreams_is_refused_naming_its_source(self, tmp_path):
        from gateway.cli import _parser, resolve, serve_config

        path = write(tmp_path, TWO_UPSTREAMS)
        args = _parser().parse_args(["serve", "--config", str(path)])
        with pytest.raises(ConfigError) as info:
            serve_config(resolve(args, environ={"A2A_GATEWAY_UPSTREAM": "http://x:1/"}))
        assert info.value.problems[0].startswith("upstreams (A2A_GATEWAY_UPSTREAM): ")

    def test_a_value_error_names_the_variable_or_flag_it_came_from(self, tmp_path):
        from gateway.cli import UsageError, _parser, resolve

        args = _parser().parse_args(["serve", "--upstream", "http://w:1/"])
        with pytest.raises(UsageError, match=r"^A2A_GATEWAY_PORT: invalid int value 'x'$"):
            resolve(args, environ={"A2A_GATEWAY_PORT": "x"})
        with pytest.raises(UsageError, match=r"enableServiceLinks: false"):
            resolve(args, environ={"A2A_GATEWAY_PORT": "tcp://10.96.0.12:8080"})
        with pytest.raises(UsageError, match=r"^A2A_GATEWAY_MODE: invalid choice 'strict'"):
            resolve(args, environ={"A2A_GATEWAY_MODE": "strict"})
        with pytest.raises(ConfigError) as info:
            _serve_config(tmp_path, [], {"A2A_GATEWAY_PORT": "70000"})
        assert info.value.problems[0].startswith("listen.port (from A2A_GATEWAY_PORT): ")
        with pytest.raises(ConfigError) as info:
            _serve_config(tmp_path, ["--port", "70000"], {"A2A_GATEWAY_PORT": "7002"})
        assert info.value.problems[0].startswith("listen.port (from --port): ")

    @pytest.mark.parametrize("argv,env,source", [
        (["--upstream", "127.0.0.1:9999"], {}, "--upstream"),
        ([], {"A2A_GATEWAY_UPSTREAM": "127.0.0.1:9999"}, "A2A_GATEWAY_UPSTREAM"),
    ])
    def test_a_sidecar_upstream_error_names_its_flag_or_variable(self, argv, env, source):
        from gateway.cli import _parser, resolve, serve_config

        args = _parser().parse_args(["serve", *argv])
        with pytest.raises(ConfigError) as info:
            serve_config(resolve(args, environ=env))
        assert info.value.problems == [f"upstreams[0].url (from {source}): must be an http:// or https:// URL"]

    def test_heartbeat_and_card_ttl_flags_set_every_upstream_of_a_file(self, tmp_path):
        from gateway.cli import _parser, resolve, serve_config

        args = _parser().parse_args(["serve", "--config", str(write(tmp_path, TWO_UPSTREAMS)),
                                     "--heartbeat-interval", "7"])
        config = serve_config(resolve(args, environ={"A2A_GATEWAY_CARD_TTL": "9"}))
        assert [(u.heartbeat_seconds, u.card.ttl_seconds) for u in config.upstreams] == [(7, 9), (7, 9)]

    def test_an_environment_error_exits_2_with_the_variable_named(self):
        proc = subprocess.run([sys.executable, "-m", "gateway", "serve", "--upstream", "http://127.0.0.1:9/"],
                              cwd=ROOT, env={**os.environ, "A2A_GATEWAY_PORT": "x"},
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2
        assert proc.stderr.strip() == "a2a-gateway serve: A2A_GATEWAY_PORT: invalid int value 'x'"

    def test_a_workers_error_names_its_variable(self):
        proc = subprocess.run([sys.executable, "-m", "gateway", "serve", "--upstream", "http://127.0.0.1:9/",
                               "--ledger", "memory"], cwd=ROOT, env={**os.environ, "A2A_GATEWAY_WORKERS": "2"},
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2
        assert proc.stderr.startswith("a2a-gateway serve: 2 (from A2A_GATEWAY_WORKERS): --workers must be")

    @pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["ledger", "--help"]])
    def test_help_lists_every_environment_variable(self, argv):
        from gateway.cli import LEDGER_SETTINGS, SERVE_SETTINGS

        out = cli(*argv).stdout
        settings = LEDGER_SETTINGS if argv[0] == "ledger" else SERVE_SETTINGS
        for s in settings:
            assert s.env in out, s.env
        assert "A2A_GATEWAY_STATE_DIR" in out
        if argv[0] != "ledger":  # serve reads these too, without a flag
            assert "A2A_GATEWAY_CALLER_SECRET" in out and "OTEL_EXPORTER_OTLP_ENDPOINT" in out

    def test_help_names_every_variable_the_gateway_reads(self):
        """Every ``A2A_GATEWAY_*`` name in the gateway's code is in ``--help``, but the ones
        a supervisor sets for its workers (gateway/workers.py)."""
        import re

        from gateway import workers

        internal = {workers.LISTEN_FD_ENV, workers.SUPERVISOR_FD_ENV, workers.SUPERVISOR_PID_ENV,
                    workers.WORKER_INDEX_ENV, workers.ADMIN_FD_ENV}
        read = {name for path in (ROOT / "gateway").rglob("*.py")
                for name in re.findall(r"A2A_GATEWAY_[A-Z_]*[A-Z]", path.read_text())}
        out = cli("--help").stdout
        assert sorted(name for name in read - internal if name not in out) == []


# -- callers and auth (docs/callers.md §2, §5) ------------------------------------------------------

_UP = [{"name": "w", "url": "http://127.0.0.1:9"}]
_JWT = {"issuer": "https://i.test", "audience": "gw", "jwks_url": "https://i.test/jwks.json"}


def test_callers_default_to_the_authorization_header_and_auth_is_off() -> None:
    config = parse_config({"upstreams": _UP})
    assert (config.callers.enabled, config.callers.identity, config.callers.header) == (True, "header", "authorization")
    assert config.auth.jwt is None


@pytest.mark.parametrize("jwt,problem", [
    ({**_JWT, "algorithms": ["none"]}, "auth.jwt.algorithms: not allowed: none"),
    ({**_JWT, "algorithms": ["RS256", "HS256"]}, "auth.jwt.algorithms: not allowed: HS256"),
    ({**_JWT, "jwks_file": "/etc/jwks.json"}, "auth.jwt: exactly one of jwks_url and jwks_file"),
    ({"issuer": "https://i.test", "audience": "gw"}, "auth.jwt: exactly one of jwks_url and jwks_file"),
    ({**_JWT, "jwks_url": "file:///etc/jwks.json"}, "auth.jwt.jwks_url: must be an http:// or https:// URL"),
])
def test_a_jwt_setting_a_production_proxy_would_not_take_is_refused(jwt: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"upstreams": _UP, "auth": {"jwt": jwt}})
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


def test_the_jwt_subject_as_identity_needs_auth_jwt() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"upstreams": _UP, "callers": {"identity": "jwt_subject"}})
    assert any("jwt_subject needs auth.jwt" in p for p in info.value.problems)
    config = parse_config({"upstreams": _UP, "callers": {"identity": "jwt_subject"}, "auth": {"jwt": _JWT}})
    assert config.auth.jwt is not None and config.auth.jwt.algorithms == ["RS256", "ES256"]


class TestStateDirInUse:
    """The ``starting`` line names the state directory only when this run keeps something there
    (issue #34): the default SQLite ledger, or a Redis ledger's generated caller secret."""

    @pytest.mark.parametrize("ledger,secret,shown", [
        (None, None, True),                                    # the default ledger.db there
        ("memory", None, False),
        ("sqlite:///{elsewhere}/ledger.db", None, False),       # an explicit --ledger elsewhere
        ("sqlite:///{state}/other.db", None, True),
        ("redis://127.0.0.1:6379/0", None, True),               # the caller secret kept there
        ("redis://127.0.0.1:6379/0", "s" * 32, False),
    ])
    def test_only_when_used(self, tmp_path, monkeypatch, ledger, secret, shown):
        from gateway.cli import state_dir_in_use

        state = tmp_path / "state"
        monkeypatch.setenv("A2A_GATEWAY_STATE_DIR", str(state))
        doc: dict = {"upstreams": [{"name": "w", "url": "http://w:1/"}]}
        if ledger is not None:
            doc["ledger"] = {"url": ledger.format(state=state, elsewhere=tmp_path)}
        environ = {"A2A_GATEWAY_CALLER_SECRET": secret} if secret else {}
        got = state_dir_in_use(parse_config(doc), environ)
        assert got == ({"state_dir": str(state)} if shown else {})


def test_limits_default_off_and_caller_overrides_need_callers() -> None:
    """docs/limits.md §2: every fair-share limit is off by default; an override replaces only
    the fields it sets; ``limits.callers`` without callers told apart is refused."""
    from gateway.config import QuotaConfig

    config = parse_config({"upstreams": [{"name": "w", "url": "http://127.0.0.1:9/"}]})
    assert not config.limits.per_caller.configured and config.limits.max_body_bytes == 10 * 1024 * 1024
    base = QuotaConfig(requests_per_second=5, live_tasks=3)
    merged = base.over(QuotaConfig.model_validate({"live_tasks": 9}))
    assert (merged.requests_per_second, merged.live_tasks) == (5, 9)
    with pytest.raises(ConfigError, match="limits.callers: needs callers.enabled"):
        parse_config({"upstreams": [{"name": "w", "url": "http://127.0.0.1:9/"}], "callers": {"enabled": False},
                      "limits": {"callers": {"Bearer k": {"live_tasks": 1}}}})
    with pytest.raises(ConfigError, match="requests_per_second"):
        parse_config({"upstreams": [{"name": "w", "url": "http://127.0.0.1:9/"}],
                      "limits": {"per_caller": {"requests_per_second": 0}}})
