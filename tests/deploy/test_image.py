"""The container image (Dockerfile): lint, consistency with the gateway, and its install step.

No Docker engine runs here, so the image is not built; instead the Dockerfile's own build-stage
install line is run against a copy of what its COPY lines take from the build context, into a
fresh virtual environment, and the installed command is run on the config the image bakes in.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import venv
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import gateway
from tests.deploy.conftest import ROOT, require_tool, run

DOCKERFILE = ROOT / "Dockerfile"


@dataclass
class Stage:
    """One ``FROM`` stage: its instructions as ``(KEYWORD, arguments)`` in order."""

    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        assert found, f"stage {self.name or self.base} has no {keyword}"
        return found[-1]


def parse_dockerfile(text: str) -> list[Stage]:
    """Split a Dockerfile into stages of instructions (comments dropped, continuations joined)."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            current += line[:-1].rstrip() + " "
            continue
        logical.append(current + line)
        current = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        else:
            assert stages, "instruction before FROM"
            stages[-1].instructions.append((keyword, args.strip()))
    return stages


def exec_form(args: str) -> list[str]:
    """``["a", "b"]`` (JSON exec form) -> list."""
    value = json.loads(args)
    assert isinstance(value, list), f"not exec form: {args}"
    return value


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------ lint


def test_hadolint_has_no_findings() -> None:
    hadolint = require_tool("hadolint")
    proc = run([hadolint, "--no-color", "--format", "json", "--failure-threshold", "style",
                str(DOCKERFILE)])
    findings = json.loads(proc.stdout or "[]")
    assert findings == [] and proc.returncode == 0, "hadolint findings:\n" + "\n".join(
        f"  line {f['line']} {f['code']} {f['level']}: {f['message']}" for f in findings) + proc.stderr


def test_every_hadolint_ignore_gives_a_reason() -> None:
    for number, line in enumerate(DOCKERFILE.read_text(encoding="utf-8").splitlines(), 1):
        match = re.search(r"#\s*hadolint\s+ignore=([A-Z0-9,]+)(.*)", line)
        if match:
            assert len(match.group(2).strip(" -:")) >= 10, f"Dockerfile:{number}: an ignore needs a reason: {line}"


# ------------------------------------------------------------------- consistency with the gateway


def test_runtime_stage_is_slim_non_root_and_serves_8080_and_the_admin_8081(stages: list[Stage]) -> None:
    assert len(stages) >= 2, "multi-stage: build, then runtime"
    build, runtime = stages[0], stages[-1]
    for stage in (build, runtime):
        assert re.fullmatch(r"python:3\.11[\w.-]*-slim[\w.-]*", stage.base), stage.base
    assert any("--from=" + (build.name or "0") in c for c in runtime.all("COPY")), "runtime copies the build's install"
    user = runtime.last("USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER must be a numeric non-root uid (runAsNonRoot checks it): {user}"
    assert runtime.last("EXPOSE").split() == ["8080", "8081"]
    volumes = runtime.all("VOLUME")
    assert any("/var/lib/a2a-gateway" in v for v in volumes), volumes
    assert exec_form(runtime.last("ENTRYPOINT")) == ["a2a-gateway"]
    health = runtime.last("HEALTHCHECK")
    assert "http://127.0.0.1:8081/healthz" in health, health  # the admin listener


def baked_config(runtime: Stage) -> tuple[Path, str]:
    """(source file in the repository, path in the image) of the config the image bakes in."""
    cmd = exec_form(runtime.last("CMD"))
    assert cmd[:2] == ["serve", "--config"], cmd
    image_path = cmd[2]
    for args in runtime.all("COPY"):
        words = args.split()
        if not words[0].startswith("--") and words[-1] == image_path:
            return ROOT / words[0], image_path
    raise AssertionError(f"no COPY puts the config at {image_path} (CMD {cmd})")


def test_baked_config_passes_check_config_and_matches_the_image(stages: list[Stage]) -> None:
    runtime = stages[-1]
    source, image_path = baked_config(runtime)
    assert image_path == "/etc/a2a-gateway/gateway.yaml"
    proc = run([sys.executable, "-m", "gateway", "check-config", str(source)], cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    config = json.loads(proc.stdout)
    assert config["listen"]["host"] == "0.0.0.0"
    assert config["listen"]["port"] == 8080
    assert (config["admin"]["enabled"], config["admin"]["host"], config["admin"]["port"]) == (True, "0.0.0.0", 8081)
    assert config["ledger"]["url"].startswith("sqlite:////var/lib/a2a-gateway/"), config["ledger"]
    assert exec_form(runtime.last("ENTRYPOINT")) + exec_form(runtime.last("CMD")) == [
        "a2a-gateway", "serve", "--config", image_path]


# --------------------------------------------------------------------- the install step, for real


def _copy_build_context(build: Stage, dest_root: Path) -> Path:
    """Do the build stage's COPY lines from the repository into ``dest_root`` + WORKDIR."""
    workdir = dest_root / build.last("WORKDIR").lstrip("/")
    workdir.mkdir(parents=True)
    for args in build.all("COPY"):
        *sources, dest = shlex.split(args)
        assert not any(s.startswith("--") for s in sources), f"unexpected COPY flag: {args}"
        target = workdir / dest
        for src in sources:
            path = ROOT / src
            assert path.exists(), f"COPY source {src} missing from the build context"
            if path.is_dir():  # a directory's contents go to dest
                shutil.copytree(path, target, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif dest.endswith("/") or len(sources) > 1:  # into the directory dest
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / path.name)
            else:  # to the file dest
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
    return workdir


def _install_command(build: Stage, pip: Path, prefix: Path) -> list[str]:
    """The build stage's ``pip install`` line with this venv's pip and a temporary prefix."""
    lines = [r for r in build.all("RUN") if "pip install" in r]
    assert len(lines) == 1, f"expected one pip install RUN line in the build stage, got {lines}"
    words = shlex.split(lines[0])
    assert words[0] == "pip" and words[1] == "install" and words[-1] == ".", lines[0]
    out = [str(pip)]
    for word in words[1:]:
        if word.startswith("--prefix="):
            assert word == "--prefix=/install", word
            word = f"--prefix={prefix}"
        out.append(word)
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dockerfile_install_step_gives_a_working_command(stages: list[Stage], tmp_path: Path) -> None:
    """The build stage's ``pip install … .`` from a copy of the build context into a fresh venv
    (dependencies from the package index, as in the image), then the installed
    ``a2a-gateway --version`` and ``check-config`` on the image's baked config."""
    build, runtime = stages[0], stages[-1]
    context = _copy_build_context(build, tmp_path / "context")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    prefix = tmp_path / "install"  # the image's /install, later copied to /usr/local
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    proc = run(_install_command(build, env_dir / "bin" / "pip", prefix), cwd=context, env=env, timeout=540)
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"

    site = next(prefix.glob("lib/python3*/site-packages"))
    env["PYTHONPATH"] = str(site)  # what /usr/local is to the image's python
    command = prefix / "bin" / "a2a-gateway"
    assert command.exists(), sorted(p.name for p in (prefix / "bin").iterdir())
    version = run([str(command), "--version"], cwd=tmp_path, env=env)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"a2a-gateway {gateway.__version__}"

    where = run([str(env_dir / "bin" / "python"), "-c", "import gateway; print(gateway.__file__)"],
                cwd=tmp_path, env=env)
    assert Path(where.stdout.strip()).is_relative_to(site), f"gateway imported from {where.stdout}"

    source, _ = baked_config(runtime)
    checked = run([str(command), "check-config", str(source)], cwd=tmp_path, env=env)
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["upstreams"][0]["url"] == "http://127.0.0.1:9999/"

    # the package data the image needs came along (py.typed is declared package data)
    assert (site / "gateway" / "py.typed").exists()


def test_parse_dockerfile_joins_continuations() -> None:
    stages = parse_dockerfile("FROM a AS b\nRUN x \\\n    # note\n    && y\nFROM c\nUSER 1\n")
    assert [(s.base, s.name) for s in stages] == [("a", "b"), ("c", None)]
    assert stages[0].all("RUN") == ["x && y"]
    assert stages[1].last("USER") == "1"
