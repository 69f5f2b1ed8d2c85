"""deploy/k8s: every overlay renders with ``kubectl kustomize``, every object is valid for
Kubernetes (offline schemas of ``kubernetes-validate``), and the manifests agree with the
gateway itself: its config passes ``check-config``, ports and probe paths are the ones it
serves (checked against a running gateway: probes and scrapes on the admin listener, the
Service on the traffic port), shutdown timing fits the config's grace."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import kubernetes_validate
import pytest
import yaml

from gateway.app import build_app
from gateway.config import parse_config
from tests.deploy.conftest import DEPLOY, K8S, OVERLAYS, ROOT, find, one, run
from tests.support.gateway import serve_gateway
from tests.support.scripted_worker import ScriptedWorker
from tests.support.servers import serve_in_thread, wait_until

#: Oldest Kubernetes the manifests are written for (preStop `sleep` action: 1.30), and the
#: newest whose schemas kubernetes-validate ships.
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
GATEWAY_PORT = 8080
ADMIN_PORT = 8081
CONFIG_DIR = "/etc/a2a-gateway"
CONFIG_FILE = CONFIG_DIR + "/gateway.yaml"
LEDGER_DIR = "/var/lib/a2a-gateway"


# ------------------------------------------------------------------------------ helpers


def gateway_deployment(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "Deployment", "a2a-gateway")


def pod_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]


def container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in pod_spec(deployment)["containers"] if c["name"] == name]
    assert len(found) == 1, f"container {name}: {found}"
    return found[0]


def port_number(c: dict[str, Any], port: int | str) -> int:
    """A probe's port (a number or a container port name) as a number."""
    if isinstance(port, int):
        return port
    named = [p["containerPort"] for p in c.get("ports", []) if p.get("name") == port]
    assert named, f"container {c['name']} has no port named {port}"
    return int(named[0])


def gateway_config_text(objects: list[dict[str, Any]]) -> str:
    """The gateway.yaml inside the ConfigMap the gateway container mounts at /etc/a2a-gateway."""
    dep = gateway_deployment(objects)
    mount = [m for m in container(dep, "gateway")["volumeMounts"] if m["mountPath"] == CONFIG_DIR]
    assert len(mount) == 1, "the config directory is mounted once"
    volume = [v for v in pod_spec(dep)["volumes"] if v["name"] == mount[0]["name"]][0]
    cm = one(objects, "ConfigMap", volume["configMap"]["name"])
    assert "gateway.yaml" in cm["data"], sorted(cm["data"])
    return str(cm["data"]["gateway.yaml"])


def checked_config(objects: list[dict[str, Any]], tmp_path: Path) -> dict[str, Any]:
    """The ConfigMap's config through ``python -m gateway check-config`` (normalized JSON)."""
    path = tmp_path / "gateway.yaml"
    path.write_text(gateway_config_text(objects), encoding="utf-8")
    proc = run([sys.executable, "-m", "gateway", "check-config", str(path)], cwd=ROOT)
    assert proc.returncode == 0, f"check-config rejected the ConfigMap's gateway.yaml:\n{proc.stderr}"
    return dict(json.loads(proc.stdout))


def prestop_seconds(c: dict[str, Any]) -> int:
    """The preStop delay of a container: ``sleep: {seconds}`` or ``exec: [sleep, N]``."""
    pre = c.get("lifecycle", {}).get("preStop")
    if not pre:
        return 0
    if "sleep" in pre:
        return int(pre["sleep"]["seconds"])
    command = pre["exec"]["command"]
    assert command[0] == "sleep", command
    return int(command[1])


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# --------------------------------------------------------------------------- rendering


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_valid_kubernetes_objects(rendered: dict[str, Any], overlay: str) -> None:
    objects = rendered[overlay]
    assert objects, "nothing rendered"
    problems = []
    for obj in objects:
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                problems.append(f"{obj['kind']}/{obj['metadata']['name']} (k8s {version}): {err.message}")
    assert not problems, "\n".join(problems)


def test_kustomizations_stay_readable_by_debians_kubectl() -> None:
    """Debian's kubectl (1.20) embeds kustomize v2.0: directories go in `bases`, patches in
    `patchesStrategicMerge`; newer fields (`patches`, `labels`, `replicas`, ...) would fail there."""
    known = {"apiVersion", "kind", "resources", "bases", "configMapGenerator", "secretGenerator",
             "generatorOptions", "patchesStrategicMerge", "patchesJson6902", "namePrefix",
             "nameSuffix", "namespace", "commonLabels", "commonAnnotations", "images", "vars"}
    for path in sorted(K8S.glob("*/kustomization.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert set(doc) <= known, f"{path}: {sorted(set(doc) - known)} unknown to kustomize v2.0"
        for entry in doc.get("resources", []):
            assert (path.parent / entry).is_file(), f"{path}: resources entry {entry} must be a file (dirs go in bases)"


# -------------------------------------------------------------- consistency with the gateway


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_configmap_passes_check_config_and_matches_the_container(
        rendered: dict[str, Any], overlay: str, tmp_path: Path) -> None:
    objects = rendered[overlay]
    config = checked_config(objects, tmp_path)
    dep = gateway_deployment(objects)
    gw = container(dep, "gateway")
    assert gw["args"] == ["serve", "--config", CONFIG_FILE]
    assert config["listen"] == {**config["listen"], "host": "0.0.0.0", "port": GATEWAY_PORT}
    assert config["admin"] == {**config["admin"], "enabled": True, "host": "0.0.0.0", "port": ADMIN_PORT}
    ports = {p["name"]: p["containerPort"] for p in gw["ports"]}
    assert ports == {"http": config["listen"]["port"], "admin": config["admin"]["port"]}

    ledger = config["ledger"]["url"]
    mounts = {m["mountPath"]: m for m in gw["volumeMounts"]}
    assert LEDGER_DIR in mounts and not mounts[LEDGER_DIR].get("readOnly"), "writable ledger volume"
    assert "/tmp" in mounts and not mounts["/tmp"].get("readOnly")
    if ledger.startswith("sqlite:"):
        assert ledger.startswith(f"sqlite:///{LEDGER_DIR}/"), f"SQLite ledger outside the volume: {ledger}"
    # every mount is backed by a declared volume
    volumes = {v["name"] for v in pod_spec(dep)["volumes"]}
    assert {m["name"] for m in gw["volumeMounts"]} <= volumes


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_hit_what_a_running_gateway_serves(rendered: dict[str, Any], overlay: str, tmp_path: Path) -> None:
    """Start the gateway with the overlay's config (upstreams pointed at a scripted worker, an
    in-memory ledger) and GET every probe path of the manifest, plus the scrape path, on the
    admin listener; the traffic port does not answer them (they would reach the worker)."""
    objects = rendered[overlay]
    config = checked_config(objects, tmp_path)
    gw = container(gateway_deployment(objects), "gateway")
    probes = {kind: gw[kind]["httpGet"] for kind in ("readinessProbe", "livenessProbe", "startupProbe")}
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["startupProbe"]["path"] == "/healthz"
    for probe in probes.values():
        assert port_number(gw, probe["port"]) == config["admin"]["port"] == ADMIN_PORT
    annotations = gateway_deployment(objects)["spec"]["template"]["metadata"].get("annotations", {})
    assert annotations.get("prometheus.io/port") == str(ADMIN_PORT)
    assert not config["listen"]["probes"] and config["admin"]["token_file"] is None

    worker = ScriptedWorker()
    with serve_in_thread(worker, name="worker") as wsrv:
        config["upstreams"] = [{**u, "url": wsrv.url + "/"} for u in config["upstreams"]]
        config["ledger"] = {"url": "memory"}  # (a Redis ledger's other settings need Redis)
        if config.get("callers", {}).get("secret_file"):  # the mounted Secret's file, here
            secret = tmp_path / "callers-secret"
            secret.write_text("0123456789abcdef0123456789abcdef\n")
            config["callers"] = {**config["callers"], "secret_file": str(secret)}
        app = build_app(parse_config(config))
        with serve_gateway(app) as (gsrv, admin), httpx.Client(trust_env=False, timeout=5) as http:
            scrape_path = annotations.get("prometheus.io/path", "/metrics")
            # readiness is 503 until the worker's card is in (fetched in the background)
            ready_path = probes["readinessProbe"]["path"]
            wait_until(lambda: http.get(admin.url + ready_path).status_code == 200,
                       message=f"{ready_path} 200 once the card is in")
            for kind, probe in probes.items():
                response = http.get(admin.url + probe["path"])
                assert response.status_code == 200, f"{kind} {probe['path']}: {response.status_code}"
            scrape = http.get(admin.url + scrape_path)
            assert scrape.status_code == 200 and "a2a_gateway_build_info" in scrape.text
            for path in (*{p["path"] for p in probes.values()}, scrape_path):  # relayed: the worker's 404
                assert http.get(gsrv.url + path).status_code == 404, path


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_security_context_resources_and_shutdown_timing(rendered: dict[str, Any], overlay: str,
                                                         tmp_path: Path) -> None:
    objects = rendered[overlay]
    dep = gateway_deployment(objects)
    spec = pod_spec(dep)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["fsGroup"] == 10001
    for c in spec["containers"]:
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True, c["name"]
        assert sc["readOnlyRootFilesystem"] is True, c["name"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["capabilities"]["drop"] == ["ALL"], c["name"]
        assert set(c["resources"]["requests"]) >= {"cpu", "memory"}, c["name"]
        assert set(c["resources"]["limits"]) >= {"cpu", "memory"}, c["name"]
    gw = container(dep, "gateway")
    assert gw["securityContext"]["runAsUser"] == 10001  # the image's USER

    # preStop sleep, then SIGTERM: unary requests get listen.shutdown_grace_seconds
    grace = checked_config(objects, tmp_path)["listen"]["shutdown_grace_seconds"]
    drained_by = prestop_seconds(gw) + grace
    assert spec["terminationGracePeriodSeconds"] > drained_by
    assert spec["terminationGracePeriodSeconds"] <= drained_by + 15, "a bit above, not far above"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_reaches_the_gateway_port(rendered: dict[str, Any], overlay: str) -> None:
    objects = rendered[overlay]
    dep = gateway_deployment(objects)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert selects(dep["spec"]["selector"]["matchLabels"], labels)
    svc = one(objects, "Service", "a2a-gateway")
    assert selects(svc["spec"]["selector"], labels)
    (port,) = svc["spec"]["ports"]
    assert port_number(container(dep, "gateway"), port["targetPort"]) == GATEWAY_PORT


# ------------------------------------------------------------------------------ sidecar


def test_sidecar_worker_is_loopback_only_and_stops_after_the_gateway(rendered: dict[str, Any],
                                                                    tmp_path: Path) -> None:
    objects = rendered["sidecar"]
    config = checked_config(objects, tmp_path)
    dep = gateway_deployment(objects)
    assert dep["spec"]["replicas"] == 1
    assert [c["name"] for c in pod_spec(dep)["containers"]] == ["worker", "gateway"]
    worker = container(dep, "worker")
    assert worker["image"] == "example.com/my-a2a-worker:latest"
    assert "ports" not in worker, "the worker is reachable only through the gateway"
    assert worker["args"] == ["--host", "127.0.0.1", "--port", "9999"]
    (upstream,) = config["upstreams"]
    assert upstream["url"] == "http://127.0.0.1:9999/" and upstream["prefix"] == "/"
    assert config["ledger"]["url"] == f"sqlite:///{LEDGER_DIR}/ledger.db"
    gw = container(dep, "gateway")
    assert prestop_seconds(worker) > prestop_seconds(gw) + config["listen"]["shutdown_grace_seconds"]
    assert pod_spec(dep)["terminationGracePeriodSeconds"] > prestop_seconds(worker)
    assert not find(objects, "PodDisruptionBudget")


# ------------------------------------------------------------------------------- shared


def _service_for(objects: list[dict[str, Any]], url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    svc = one(objects, "Service", str(parts.hostname))
    assert parts.port in [p["port"] for p in svc["spec"]["ports"]], f"{url}: port not on the Service"
    backends = [d for d in find(objects, "Deployment")
                if selects(svc["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])]
    assert len(backends) == 1, f"Service {parts.hostname} selects {len(backends)} Deployments"
    return backends[0]


def test_shared_routes_by_prefix_to_worker_services_and_shares_redis(rendered: dict[str, Any],
                                                                     tmp_path: Path) -> None:
    objects = rendered["shared"]
    config = checked_config(objects, tmp_path)
    dep = gateway_deployment(objects)
    assert dep["spec"]["replicas"] == 2
    assert [c["name"] for c in pod_spec(dep)["containers"]] == ["gateway"]

    upstreams = config["upstreams"]
    assert len(upstreams) >= 2
    assert len({u["prefix"] for u in upstreams}) == len(upstreams)
    assert all(u["prefix"] != "/" for u in upstreams), "each worker at its own prefix"
    for u in upstreams:
        worker = _service_for(objects, u["url"])
        assert worker["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "a2a-worker"

    ledger = config["ledger"]["url"]
    assert ledger.startswith("redis://"), "replicas must share one ledger"
    redis = _service_for(objects, ledger)
    volumes = pod_spec(redis)["volumes"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v]
    assert claims and one(objects, "PersistentVolumeClaim", claims[0])
    assert redis["spec"]["strategy"]["type"] == "Recreate"


def test_shared_disruption_budget_and_network_policies(rendered: dict[str, Any]) -> None:
    objects = rendered["shared"]
    dep = gateway_deployment(objects)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    (pdb,) = find(objects, "PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)
    assert 0 < pdb["spec"]["minAvailable"] < dep["spec"]["replicas"]

    policies = find(objects, "NetworkPolicy")
    protected = {}
    for policy in policies:
        (rule,) = policy["spec"]["ingress"]
        assert [selects(f["podSelector"]["matchLabels"], labels) for f in rule["from"]] == [True]
        for d in find(objects, "Deployment"):
            if selects(policy["spec"]["podSelector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"]):
                protected[d["metadata"]["name"]] = [p["port"] for p in rule["ports"]]
    others = {d["metadata"]["name"] for d in find(objects, "Deployment")} - {"a2a-gateway"}
    assert set(protected) == others, "Redis and every worker admit only the gateways"


# ------------------------------------------------------------------------- scrape targets


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_podmonitor_and_scrape_job_select_the_gateway_port(rendered: dict[str, Any], overlay: str) -> None:
    import re

    objects = rendered[overlay]
    dep = gateway_deployment(objects)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    monitor = yaml.safe_load((DEPLOY / "prometheus" / "podmonitor.yaml").read_text(encoding="utf-8"))
    assert selects(monitor["spec"]["selector"]["matchLabels"], labels)
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    named = {p["name"]: c["name"] for d in find(objects, "Deployment")
             if selects(monitor["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"])
             for c in pod_spec(d)["containers"] for p in c.get("ports", [])}
    assert named == {"http": "gateway", "admin": "gateway"}, "the worker has no port"
    assert endpoint["port"] == "admin", "only the gateway's admin listener is scraped"
    assert port_number(container(dep, "gateway"), endpoint["port"]) == ADMIN_PORT
    assert endpoint["path"] == "/metrics"

    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    (job,) = [j for j in prom["scrape_configs"] if "kubernetes_sd_configs" in j]
    keeps = {r["source_labels"][0]: r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
    assert re.fullmatch(keeps["__meta_kubernetes_pod_label_app_kubernetes_io_name"], labels["app.kubernetes.io/name"])
    assert re.fullmatch(keeps["__meta_kubernetes_pod_container_port_name"], endpoint["port"])
    assert not re.fullmatch(keeps["__meta_kubernetes_pod_container_port_name"], "http")


# ------------------------------------------------------------------------------ shared-ha

HA_SECRET = "a2a-gateway-redis-auth"
HA_SECRET_KEYS = {"password", "sentinel-password"}


def _statefulset_for(objects: list[dict[str, Any]], host: str) -> tuple[dict[str, Any], int]:
    """The StatefulSet whose pod ``host`` (``NAME-N.SERVICE``) names, through its headless
    Service, and ``N``."""
    pod, _, service_name = host.partition(".")
    sets = [s for s in find(objects, "StatefulSet") if pod.rsplit("-", 1)[0] == s["metadata"]["name"]]
    assert len(sets) == 1, f"{host}: no StatefulSet"
    sts = sets[0]
    ordinal = int(pod.rsplit("-", 1)[1])
    assert 0 <= ordinal < sts["spec"]["replicas"], f"{host}: no such pod"
    assert sts["spec"]["serviceName"] == service_name, f"{host}: not the StatefulSet's service"
    svc = one(objects, "Service", service_name)
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"].get("publishNotReadyAddresses") is True
    assert selects(svc["spec"]["selector"], sts["spec"]["template"]["metadata"]["labels"])
    return sts, ordinal


def _secret_files(spec: dict[str, Any], c: dict[str, Any]) -> dict[str, str]:
    """Where container ``c`` sees each key of the HA Secret: key -> file path."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    out = {}
    for m in c.get("volumeMounts", []):
        secret = volumes.get(m["name"], {}).get("secret")  # (claim templates are not volumes)
        if secret and secret["secretName"] == HA_SECRET:
            assert m.get("readOnly") is True
            assert "items" not in secret, "every key, under its own name"
            out.update({key: f"{m['mountPath']}/{key}" for key in HA_SECRET_KEYS})
    return out


def test_shared_ha_ledger_is_found_through_the_sentinels_with_passwords_from_the_secret(
        rendered: dict[str, Any], tmp_path: Path) -> None:
    from gateway.ledger.redis import parse_sentinel_url

    objects = rendered["shared-ha"]
    ledger = checked_config(objects, tmp_path)["ledger"]
    target = parse_sentinel_url(ledger["url"])
    sentinels = [_statefulset_for(objects, host) for host, _ in target.sentinels]
    assert {s["metadata"]["name"] for s, _ in sentinels} == {"a2a-gateway-redis-sentinel"}
    sentinel_sts = sentinels[0][0]
    assert sorted(n for _, n in sentinels) == list(range(sentinel_sts["spec"]["replicas"])), "every Sentinel"
    assert sentinel_sts["spec"]["replicas"] >= 3
    (sentinel_c,) = pod_spec(sentinel_sts)["containers"]
    assert {port for _, port in target.sentinels} == {p["containerPort"] for p in sentinel_c["ports"]}
    assert target.password is None and target.username is None, "no password in the ConfigMap"

    dep = gateway_deployment(objects)
    files = _secret_files(pod_spec(dep), container(dep, "gateway"))
    assert ledger["password_file"] == files["password"]
    assert ledger["sentinel_password_file"] == files["sentinel-password"]
    redis = one(objects, "StatefulSet", "a2a-gateway-redis")
    assert _secret_files(pod_spec(redis), pod_spec(redis)["containers"][0]).keys() == HA_SECRET_KEYS
    assert _secret_files(pod_spec(sentinel_sts), sentinel_c).keys() == HA_SECRET_KEYS
    assert not find(objects, "Secret"), "no password ships in the repository: the Secret is made once"
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    assert f"kubectl create secret generic {HA_SECRET}" in readme
    assert all(f"--from-literal={key}=" in readme for key in HA_SECRET_KEYS)

    # a terminal state waits for replicas there are, and one server may be down meanwhile
    assert ledger["min_replica_acks"] >= 1
    assert ledger["min_replica_acks"] <= redis["spec"]["replicas"] - 2
    assert ledger["on_unavailable"] == "reject"


def test_shared_ha_replaces_the_single_redis_and_guards_the_ledger_pods(rendered: dict[str, Any]) -> None:
    objects = rendered["shared-ha"]
    assert not find(objects, "Deployment", "a2a-gateway-redis")
    assert not find(objects, "PersistentVolumeClaim"), "the servers' volumes come from claim templates"
    gateway_labels = gateway_deployment(objects)["spec"]["template"]["metadata"]["labels"]
    ledger_sets = {s["metadata"]["name"]: s for s in find(objects, "StatefulSet")}
    assert set(ledger_sets) == {"a2a-gateway-redis", "a2a-gateway-redis-sentinel"}
    redis = ledger_sets["a2a-gateway-redis"]
    assert redis["spec"]["replicas"] >= 3 and redis["spec"]["volumeClaimTemplates"]
    ports = {"a2a-gateway-redis": 6379, "a2a-gateway-redis-sentinel": 26379}
    for name, sts in ledger_sets.items():
        labels = sts["spec"]["template"]["metadata"]["labels"]
        spec = pod_spec(sts)
        assert spec["securityContext"]["runAsNonRoot"] is True
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert set(c["resources"]["limits"]) >= {"cpu", "memory"}
            assert [p["containerPort"] for p in c["ports"]] == [ports[name]]
        (policy,) = [p for p in find(objects, "NetworkPolicy")
                     if selects(p["spec"]["podSelector"]["matchLabels"], labels)]
        (rule,) = policy["spec"]["ingress"]
        assert [p["port"] for p in rule["ports"]] == [ports[name]]
        admitted = [f["podSelector"]["matchLabels"] for f in rule["from"]]
        allowed = [gateway_labels] + [s["spec"]["template"]["metadata"]["labels"] for s in ledger_sets.values()]
        assert all(any(selects(sel, lab) for lab in allowed) for sel in admitted), "no one else"
        assert all(any(selects(sel, lab) for sel in admitted) for lab in allowed), f"{name}: someone shut out"
        (pdb,) = [p for p in find(objects, "PodDisruptionBudget")
                  if selects(p["spec"]["selector"]["matchLabels"], labels)]
        assert pdb["spec"]["minAvailable"] == sts["spec"]["replicas"] - 1, "one at a time"


def test_shared_ha_gateway_yaml_differs_from_shared_only_in_the_ledger() -> None:
    shared, ha = (yaml.safe_load((K8S / o / "gateway.yaml").read_text(encoding="utf-8")) for o in ("shared", "shared-ha"))
    assert {k: v for k, v in shared.items() if k != "ledger"} == {k: v for k, v in ha.items() if k != "ledger"}


#: Redis' own cost of the replay window (docs/resume.md §2.3, measured with Redis 7.0): per window
#: (a stream whose first node is preallocated at stream-node-max-bytes, its hash, the bookkeeping
#: entries) and per event beside its payload.
REDIS_BYTES_PER_WINDOW = 5 * 1024
REDIS_BYTES_PER_EVENT = 100


def _maxmemory(text: str) -> int:
    """``maxmemory`` of a redis-server's arguments (``- --maxmemory`` then ``- 768mb``) or of a
    redis.conf line (``maxmemory 768mb``), in bytes."""
    found = re.search(r"(?:--maxmemory\s*\n\s*-\s*|^maxmemory\s+)(\d+)mb\b", text, flags=re.M)
    assert found, "no maxmemory in mb"
    return int(found[1]) * 1024 * 1024


def test_shared_overlays_size_the_replay_window_inside_redis_maxmemory() -> None:
    """The window's worst case in Redis (every event its own task's window, the byte total
    full) takes at most a quarter of ``maxmemory``; the rest is the task records'."""
    for overlay, redis_file in (("shared", "redis.yaml"), ("shared-ha", "redis-start.sh")):
        redis_text = (K8S / overlay / redis_file).read_text(encoding="utf-8")
        assert "noeviction" in redis_text
        maxmemory = _maxmemory(redis_text)
        window = parse_config(yaml.safe_load((K8S / overlay / "gateway.yaml").read_text(encoding="utf-8"))).replay_window
        worst = (window.max_bytes_total
                 + window.max_events_total * (REDIS_BYTES_PER_WINDOW + REDIS_BYTES_PER_EVENT))
        assert worst <= maxmemory // 4, (overlay, worst, maxmemory)
        assert window.max_bytes_per_task <= window.max_bytes_total


def _run_start_script(name: str, tmp_path: Path, hostname: str, answers: dict[str, str]) -> tuple[str, list[str]]:
    """Run a shared-ha start script with ``hostname`` and ``redis-cli`` answering ``answers``
    (host -> first line; absent: no answer), its paths under ``tmp_path``; returns the config
    it wrote and the command it exec'd (recorded, not run)."""
    fake = tmp_path / "bin"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "hostname").write_text(f"#!/bin/sh\necho {hostname}\n")
    table = "".join(f'  "{host}") echo "{answer}" ;;\n' for host, answer in answers.items())
    (fake / "redis-cli").write_text('#!/bin/sh\nwhile [ "$1" != "-h" ]; do shift; done\ncase "$2" in\n'
                                    f'{table}  *) exit 1 ;;\nesac\n')
    for server in ("redis-server", "redis-sentinel"):
        (fake / server).write_text(f'#!/bin/sh\necho {server} "$@" > "{tmp_path}/exec"\n')
    for tool in fake.iterdir():
        tool.chmod(0o755)
    (tmp_path / "auth").mkdir(exist_ok=True)
    (tmp_path / "auth" / "password").write_text("data-pw")
    (tmp_path / "auth" / "sentinel-password").write_text("sentinel-pw")
    (tmp_path / "conf").mkdir(exist_ok=True)
    script = (K8S / "shared-ha" / name).read_text(encoding="utf-8")
    script = script.replace("/etc/redis-auth/", f"{tmp_path}/auth/").replace("/conf", f"{tmp_path}/conf")
    proc = run(["sh", "-c", script], env={"PATH": f"{fake}:/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    conf = next((tmp_path / "conf").iterdir()).read_text()
    return conf, (tmp_path / "exec").read_text().split()


REDIS_0 = "a2a-gateway-redis-0.a2a-gateway-redis-headless"
REDIS_2 = "a2a-gateway-redis-2.a2a-gateway-redis-headless"
SENTINEL_1 = "a2a-gateway-redis-sentinel-1.a2a-gateway-redis-sentinel"


@pytest.mark.parametrize("hostname, answers, primary", [
    ("a2a-gateway-redis-0", {}, None),  # the very first start: pod 0 is the primary
    ("a2a-gateway-redis-1", {}, REDIS_0),
    ("a2a-gateway-redis-0", {SENTINEL_1: REDIS_2}, REDIS_2),  # after a failover
    ("a2a-gateway-redis-2", {SENTINEL_1: REDIS_2}, None),  # the primary restarted, still primary
    ("a2a-gateway-redis-1", {SENTINEL_1: "NOAUTH Authentication required."}, REDIS_0),  # an error is no answer
])
def test_shared_ha_redis_start_script(tmp_path: Path, hostname: str, answers: dict[str, str],
                                      primary: str | None) -> None:
    conf, command = _run_start_script("redis-start.sh", tmp_path, hostname, answers)
    assert command == ["redis-server", f"{tmp_path}/conf/redis.conf"]
    lines = conf.splitlines()
    assert 'requirepass "data-pw"' in lines and 'masterauth "data-pw"' in lines
    assert f"replica-announce-ip {hostname}.a2a-gateway-redis-headless" in lines
    assert [ln for ln in lines if ln.startswith("replicaof")] == ([f"replicaof {primary} 6379"] if primary else [])
    assert "appendfsync always" in lines and "maxmemory-policy noeviction" in lines


def test_shared_ha_sentinel_start_script_keeps_its_id_and_asks_its_peers(tmp_path: Path) -> None:
    first, command = _run_start_script("sentinel-start.sh", tmp_path / "a", "a2a-gateway-redis-sentinel-0", {})
    assert command == ["redis-sentinel", f"{tmp_path}/a/conf/sentinel.conf"]
    again, _ = _run_start_script("sentinel-start.sh", tmp_path / "b", "a2a-gateway-redis-sentinel-0",
                                 {SENTINEL_1: REDIS_2})
    other, _ = _run_start_script("sentinel-start.sh", tmp_path / "c", "a2a-gateway-redis-sentinel-2", {})

    def line(conf: str, prefix: str) -> str:
        (found,) = [ln for ln in conf.splitlines() if ln.startswith(prefix)]
        return found

    assert line(first, "sentinel monitor ") == f"sentinel monitor ledger {REDIS_0} 6379 2"
    assert line(again, "sentinel monitor ") == f"sentinel monitor ledger {REDIS_2} 6379 2"
    myid = line(first, "sentinel myid ").split()[2]
    assert len(myid) == 40 and int(myid, 16) >= 0
    assert line(again, "sentinel myid ") == line(first, "sentinel myid ") != line(other, "sentinel myid ")
    assert line(first, "requirepass ") == 'requirepass "sentinel-pw"'
    assert line(first, "sentinel sentinel-pass ") == 'sentinel sentinel-pass "sentinel-pw"'
    assert line(first, "sentinel auth-pass ") == 'sentinel auth-pass ledger "data-pw"'


def test_shared_ha_start_scripts_write_configs_redis_accepts(tmp_path: Path) -> None:
    """The written configs, with the port and address made local, start a real redis-server
    and redis-sentinel that take the passwords (Debian's Redis 7.0; the image has 7.2)."""
    import redis as redis_py

    from tests.support.redis_ha import RedisProcess, SentinelProcess, poll, require_redis_sentinel
    from tests.support.redis_server import require_redis_server

    conf, _ = _run_start_script("redis-start.sh", tmp_path / "r", "a2a-gateway-redis-0", {})
    server = RedisProcess([], client_options={"password": "data-pw"})
    (server.workdir / "redis.conf").write_text(conf.replace("dir /data", f"dir {server.workdir}"))
    server.command = lambda: [require_redis_server(), str(server.workdir / "redis.conf"),  # type: ignore[method-assign]
                              "--port", str(server.port), "--bind", "127.0.0.1", "--logfile", str(server.log)]
    sconf, _ = _run_start_script("sentinel-start.sh", tmp_path / "s", "a2a-gateway-redis-sentinel-0",
                                 {SENTINEL_1: "127.0.0.1"})
    sentinel = SentinelProcess(1)  # its own config is replaced by the script's
    try:
        server.start()
        assert server.client().config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        with pytest.raises(redis_py.exceptions.AuthenticationError):
            redis_py.Redis(host="127.0.0.1", port=server.port).ping()
        sentinel.conf.write_text(sconf.replace(f"dir {tmp_path}/s/conf", f"dir {sentinel.workdir}")
                                 .replace("127.0.0.1 6379", f"127.0.0.1 {server.port}")
                                 .replace("port 26379", f"port {sentinel.port}"))
        sentinel.client_options = {"password": "sentinel-pw"}
        require_redis_sentinel()
        sentinel.start()
        poll(lambda: sentinel.master()["role-reported"] == "master" and not sentinel.master()["is_sdown"],
             20, "the Sentinel does not reach the server with auth-pass")
    finally:
        sentinel.cleanup()
        server.cleanup()
