"""deploy/k8s: both overlays render with ``kubectl kustomize``, every object is valid for
Kubernetes (offline schemas of ``kubernetes-validate``), and the manifests agree with the
gateway itself: its config passes ``check-config``, ports and probe paths are the ones it
serves (checked against a running gateway: probes and scrapes on the admin listener, the
Service on the traffic port), shutdown timing fits the config's grace."""

from __future__ import annotations

import json
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
        config["ledger"]["url"] = "memory"
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
