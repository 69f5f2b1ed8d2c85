"""The package's layers and types are contracts (docs/architecture.md §3).

import-linter checks the import contracts of pyproject's ``[tool.importlinter]`` (``layers``:
the package's layers, highest first; ``pure-core``: the core never imports the shell or an I/O
library; ``acyclic``: no cycle between the packages or modules of one package), grimp (its
import graph) that no two modules import each other at all, mypy the types of ``[tool.mypy]`` (strict for the pure core). Both read the source,
import nothing of the gateway and need no network. Beside them: every module of ``gateway/``
sits in a layer, the strict set is the pure core of tests/test_purity.py, and docs/architecture.md
§3 lists pyproject's layers.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

from tests.test_purity import PURE_FILES

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
CONTRACTS = {c["id"]: c for c in PYPROJECT["tool"]["importlinter"]["contracts"]}
CORE = {"gateway." + p.relative_to(ROOT / "gateway").parts[0].removesuffix(".py") for p in PURE_FILES}


def _layers() -> list[list[str]]:
    return [[m.strip() for m in line.split("|")] for line in CONTRACTS["layers"]["layers"]]


def _top_level_modules() -> set[str]:
    pkg = ROOT / "gateway"
    found = {f"gateway.{p.stem}" for p in pkg.glob("*.py") if p.stem != "__init__"}
    found |= {f"gateway.{p.name}" for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_import_contracts_hold() -> None:
    # --no-cache: a stale import graph could pass a broken contract
    lint = Path(sys.executable).with_name("lint-imports")
    done = _run(str(lint), "--no-cache")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in done.stdout, done.stdout


def _cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in imports.get(module, ()):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return found


def test_no_two_modules_import_each_other() -> None:
    """No import cycle between modules, with no exception (the contracts' ``ignore_imports``
    do not apply here), ``if TYPE_CHECKING:`` imports included."""
    graph = grimp.build_graph("gateway", cache_dir=None)
    imports = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(imports) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_type_checker_passes() -> None:
    done = _run(sys.executable, "-m", "mypy")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Success"), done.stdout


def test_relaxed_shell_modules_keep_their_error_budget(tmp_path: Path) -> None:
    """Each shell module mypy does not report on has at most the errors pyproject's comment
    beside it counts, and at least one: a clean module leaves the list."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    budget = {m: int(n) for m, n in re.findall(r'^    "(gateway\.[\w.]+)",\s+# (\d+)', text, re.M)}
    relaxed = [m for o in PYPROJECT["tool"]["mypy"]["overrides"] if o.get("ignore_errors") for m in o["module"]]
    assert sorted(budget) == sorted(relaxed)
    config = tmp_path / "mypy.toml"
    config.write_text(text.replace("ignore_errors = true", "ignore_errors = false"), encoding="utf-8")
    done = _run(sys.executable, "-m", "mypy", "--config-file", str(config))
    found = {m: 0 for m in budget}
    for path in re.findall(r"^(gateway/\S+)\.py:\d+: error:", done.stdout, re.M):
        module = path.replace("/", ".").removesuffix(".__init__")
        assert module in found, f"{module} is not relaxed but has errors:\n{done.stdout}"
        found[module] += 1
    over = {m: (found[m], budget[m]) for m in budget if not 0 < found[m] <= budget[m]}
    assert over == {}, f"(errors, budget) off budget, or clean (take it off the list):\n{done.stdout}"


def test_every_module_sits_in_a_layer() -> None:
    layered = [m for layer in _layers() for m in layer]
    assert len(layered) == len(set(layered)), layered
    assert set(layered) == _top_level_modules()


def test_the_core_is_the_bottom_and_forbids_the_shell() -> None:
    layers = _layers()
    bottom = {m for layer in layers[-len(CORE):] for m in layer}
    assert bottom == CORE
    pure = CONTRACTS["pure-core"]
    assert set(pure["source_modules"]) == CORE
    shell = {m for layer in layers[:-len(CORE)] for m in layer} - {"gateway.__main__"}
    assert shell <= set(pure["forbidden_modules"])


def test_mypy_is_strict_on_the_core_and_relaxes_only_the_shell() -> None:
    mypy = PYPROJECT["tool"]["mypy"]
    strict, relaxed = [o for o in mypy["overrides"] if o.get("disallow_untyped_defs")], \
        [o for o in mypy["overrides"] if o.get("ignore_errors")]
    assert {m.removesuffix(".*") for o in strict for m in o["module"]} == CORE
    for flag in ("disallow_any_generics", "warn_return_any", "no_implicit_reexport", "strict_equality",
                 "check_untyped_defs", "disallow_untyped_calls", "extra_checks"):
        assert strict[0][flag] is True, flag
    for module in (m for o in relaxed for m in o["module"]):
        assert not any(module == c or module.startswith(c + ".") for c in CORE), module


def test_the_architecture_doc_lists_the_layers() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = doc.split("## 3. Which way dependencies point", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block is not None
    assert block.group(1).splitlines() == CONTRACTS["layers"]["layers"]
