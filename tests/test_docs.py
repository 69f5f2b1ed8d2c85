"""The documents the code cites live in the repository, every citation resolves, and the docs
site builds and shows what the code does.

The site (``mkdocs.yml``, ``docs/``) is built with ``mkdocs build --strict`` into a temporary
directory: a broken link or anchor, or a page left out of the nav, fails it. The README and the
site's own pages (:data:`SITE_PAGES`) are read for the commands, ``A2A_GATEWAY_*`` variables,
metric names and defaults they show, each checked against the code.

Comments, docstrings and tests cite ``docs/protocol.md`` (sections ``§N`` / ``§N.M`` and
``§11 pitfall N``), ``docs/bridge.md`` (sections ``§N`` / ``§N.M``), ``docs/field-cases.md`` (cases ``Fnn``, their parts such as ``F05 (c)``,
and the unknown-state policy) and ``docs/architecture.md`` (``convention N``). This fails when
a file cites a document kept outside the repository (the former shared protocol notes, field
cases and style guide), when a section sign has no source named before it, or when a cited
section, pitfall, case, part or convention is missing from the docs.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SITE_PAGES = ("docs/index.md", "docs/quickstart.md", "docs/how-it-works.md", "docs/development.md",
              "docs/performance.md", "docs/known-limits.md", "docs/upgrading.md", "docs/guide", "docs/tutorials")
"""The pages written for the site (the README's former sections among them): scanned like the
README, for citations, commands, variables and metric names."""
SCANNED = ("gateway", "tests", "bench", "demo", "deploy", "config", "README.md", *SITE_PAGES)
SUFFIXES = {".py", ".md", ".jsonl", ".json", ".yaml", ".yml", ".toml", ".txt", ".sh", ".mjs"}
SKIPPED_DIRS = {"node_modules", "__pycache__", ".pytest_cache"}
SKIPPED_PREFIXES = ("bench/results/",)  # generated benchmark output, not prose
THIS_FILE = "tests/test_docs.py"


# Built from pieces so that this file does not cite them itself.
_OUTSIDE = re.compile(
    "|".join([r"PROTOCOL\.md", "FIELD" + r"-CASES", "STYLE" + r"\.md", r"\.\./shared/(?:a2a|STYLE)",
              "/work" + "/shared/"])
)
# A section sign and what follows it: a number or a range ("§3.4-3.5", "§6.1/6.2"), and for
# §11 an optional pitfall list ("pitfall 15", "pitfalls 5-7", "pitfalls 9, 10", "2 and 13").
_SECTION = re.compile(
    r"§\s?(\d+(?:\.\d+)*)(?:\s?[-–/]\s?(\d+(?:\.\d+)*))?"
    r"(?:\s+pitfalls?\s+(\d+(?:\s*(?:[-–,]|and)\s*\d+)*))?"
)
# Whatever names the document a "§" belongs to, written right before it.
_SOURCE = re.compile(
    r"(docs/protocol\.md|docs/[\w-]+\.md|PROTOCOL\.md|SPEC03|SPEC11|SPEC|RFC\s?\d+|JSON-RPC"
    r"|issue\s+\"[^\"]+\"|[\w./-]+\.md)\s*$"
)
_INHERIT_WITHIN = 200  # a bare "§6" after "docs/protocol.md §1.2 (…)," belongs to the same source
_CASE = re.compile(r"(?<![\w#])F(\d{2})(?!\w)")
_CASE_PART = re.compile(r"(?<![\w#])(F\d{2}) \(([a-z]{1,4})\)")
_CONVENTION = re.compile(
    r"docs/architecture\.md,?\s+conventions?\s+(\d+(?:\s*(?:,|and)\s*\d+)*)"
)


def _scanned_files() -> list[tuple[str, str]]:
    """(repo-relative path, text) of every scanned text file, minus this one."""
    out = []
    for top in SCANNED:
        base = ROOT / top
        paths = [base] if base.is_file() else sorted(base.rglob("*"))
        for path in paths:
            rel = path.relative_to(ROOT).as_posix()
            if not path.is_file() or SKIPPED_DIRS & set(path.parts) or rel == THIS_FILE:
                continue
            if rel.startswith(SKIPPED_PREFIXES) or (path.suffix not in SUFFIXES and path != base):
                continue
            try:
                out.append((rel, path.read_text(encoding="utf-8")))
            except UnicodeDecodeError:
                continue
    return out



def flatten(text: str) -> str:
    """Join wrapped lines (and ``#`` comment continuations) into one line of prose."""
    return re.sub(r"[ \t]*\n[ \t]*(?:#+[ \t]*)?", " ", text)


def _numbers(listing: str) -> list[int]:
    """``"5-7"`` → 5, 6, 7; ``"9, 10"`` → 9, 10; ``"2 and 13"`` → 2, 13."""
    out: list[int] = []
    for token in re.split(r"\s*(?:,|\band\b)\s*", listing.strip()):
        if not token:
            continue
        low, _, high = re.sub(r"\s", "", token).replace("–", "-").partition("-")
        out += range(int(low), int(high or low) + 1)
    return out


def section_citations(text: str) -> list[tuple[str | None, str, list[int]]]:
    """Every "§" in ``text`` as (source, section, pitfalls), one row per section named.

    The source is the document named right before the "§" (``docs/protocol.md``, ``SPEC``,
    ``RFC 9110``, ``JSON-RPC``, an ``issue "…"``, a ``*.md`` path); a "§" without one belongs to
    the "§" just before it when that is close, else its source is ``None``.
    """
    flat = flatten(text)
    rows: list[tuple[str | None, str, list[int]]] = []
    last_source: str | None = None
    last_end = -(10**9)
    for m in _SECTION.finditer(flat):
        named = _SOURCE.search(flat[max(0, m.start() - 60):m.start()])
        if named:
            source: str | None = re.sub(r"\s+", " ", named.group(1))
        elif m.start() - last_end <= _INHERIT_WITHIN:
            source = last_source
        else:
            source = None
        pitfalls = _numbers(m.group(3)) if m.group(3) else []
        rows.append((source, m.group(1), pitfalls))
        if m.group(2):
            rows.append((source, m.group(2), []))
        last_source, last_end = source, m.end()
    return rows


def _doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _sections_of(text: str) -> dict[str, str]:
    """Heading text (lower-case, with its number) → the body under it, for every heading."""
    out: dict[str, str] = {}
    parts = re.split(r"^(#{2,4} .+)$", text, flags=re.M)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        out[heading.lstrip("#").strip()] = body
    return out


def protocol_index() -> tuple[set[str], set[int]]:
    """The section numbers of docs/protocol.md, and the pitfall numbers of its §11."""
    numbers: set[str] = set()
    pitfalls: set[int] = set()
    for heading, body in _sections_of(_doc("protocol.md")).items():
        m = re.match(r"(\d+(?:\.\d+)*)\.?\s", heading)
        if not m:
            continue
        numbers.add(m.group(1))
        if m.group(1) == "11":
            pitfalls = {int(n) for n in re.findall(r"^(\d+)\.\s", body, flags=re.M)}
    return numbers, pitfalls


def section_index(name: str) -> set[str]:
    """The section numbers of a numbered document (``docs/bridge.md``)."""
    numbers = set()
    for heading in _sections_of(_doc(name)):
        m = re.match(r"(\d+(?:\.\d+)*)\.?\s", heading)
        if m:
            numbers.add(m.group(1))
    return numbers


def field_case_index() -> tuple[dict[str, set[str]], set[str]]:
    """Case id → the labels of its parts ("a", "ii", …), and every heading of the file."""
    cases: dict[str, set[str]] = {}
    sections = _sections_of(_doc("field-cases.md"))
    for heading, body in sections.items():
        m = re.match(r"(F\d{2})\b", heading)
        if m:
            cases[m.group(1)] = set(re.findall(r"^\s*-\s+(?:\*\*)?\(([a-z]{1,4})\)", body, flags=re.M))
    return cases, {h.lower() for h in sections}


def convention_index() -> set[int]:
    body = _sections_of(_doc("architecture.md")).get("Conventions", "")
    return {int(n) for n in re.findall(r"^(\d+)\.\s", body, flags=re.M)}


def test_the_docs_exist_and_have_their_anchors():
    numbers, pitfalls = protocol_index()
    assert {"1.2", "2", "3.1", "4.3", "6.3", "7", "11"} <= numbers
    assert pitfalls == set(range(1, 19))
    cases, headings = field_case_index()
    assert {"F01", "F05", "F08", "F17"} <= cases.keys()
    assert {"a", "b", "c", "d", "e"} <= cases["F05"] and {"i", "ii"} <= cases["F08"]
    assert "unknown-state policy" in headings
    assert set(range(1, 11)) <= convention_index()
    assert "## The exchange layer" in _doc("architecture.md")
    assert {"1", "1.1", "1.9", "1.10", "2"} <= section_index("bridge.md")


def test_no_file_cites_a_document_outside_the_repository():
    hits = [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for rel, text in _scanned_files() for m in _OUTSIDE.finditer(text)]
    assert hits == []


def test_every_section_sign_names_its_source():
    unowned = [f"{rel}: §{section}" for rel, text in _scanned_files()
               for source, section, _ in section_citations(text) if source is None]
    assert unowned == []


def test_every_protocol_citation_resolves():
    numbers, pitfalls = protocol_index()
    missing = []
    for rel, text in _scanned_files():
        for source, section, cited_pitfalls in section_citations(text):
            if source != "docs/protocol.md":
                continue
            if section not in numbers:
                missing.append(f"{rel}: docs/protocol.md §{section}")
            missing += [f"{rel}: docs/protocol.md §{section} pitfall {n}"
                        for n in cited_pitfalls if section != "11" or n not in pitfalls]
    assert missing == []


def test_every_bridge_citation_resolves():
    numbers = section_index("bridge.md")
    missing = [f"{rel}: docs/bridge.md §{section}" for rel, text in _scanned_files()
               for source, section, _ in section_citations(text)
               if source == "docs/bridge.md" and section not in numbers]
    assert missing == []


def test_every_resume_citation_resolves():
    """``docs/resume.md §N.M`` (event ids, the replay window, generations, the Redis ledger)."""
    numbers = section_index("resume.md")
    assert {"3", "3.1", "3.2", "3.3", "3.4", "3.5", "3.6"} <= numbers
    missing = [f"{rel}: docs/resume.md §{section}" for rel, text in _scanned_files()
               for source, section, _ in section_citations(text)
               if source == "docs/resume.md" and section not in numbers]
    assert missing == []


def test_every_callers_citation_resolves():
    """``docs/callers.md §N.M`` (tenants, callers, the secret, JWTs)."""
    numbers = section_index("callers.md")
    assert {"1", "2", "2.1", "2.2", "2.3", "3", "4", "5", "6"} <= numbers
    missing = [f"{rel}: docs/callers.md §{section}" for rel, text in _scanned_files()
               for source, section, _ in section_citations(text)
               if source == "docs/callers.md" and section not in numbers]
    assert missing == []


def test_every_push_citation_resolves():
    """``docs/push.md §N`` (the relay, the callback, the outbox, SSRF)."""
    numbers = section_index("push.md")
    assert {"1", "2", "2.1", "3", "4"} <= numbers
    missing = [f"{rel}: docs/push.md §{section}" for rel, text in _scanned_files()
               for source, section, _ in section_citations(text)
               if source == "docs/push.md" and section not in numbers]
    assert missing == []


def test_the_bridge_scanner_catches_a_missing_section():
    """Self-check: a bridge citation is read with its source, and a wrong number is seen."""
    rows = section_citations("docs/bridge.md §1.8 (blocking), §1.99")
    assert rows == [("docs/bridge.md", "1.8", []), ("docs/bridge.md", "1.99", [])]
    assert "1.8" in section_index("bridge.md") and "1.99" not in section_index("bridge.md")


def test_every_field_case_citation_resolves():
    cases, headings = field_case_index()
    missing = []
    for rel, text in _scanned_files():
        if Path(rel).suffix not in {".py", ".md", ".jsonl"}:
            continue
        flat = flatten(text)
        missing += [f"{rel}: F{m.group(1)}" for m in _CASE.finditer(flat)
                    if f"F{m.group(1)}" not in cases]
        missing += [f"{rel}: {m.group(1)} ({m.group(2)})" for m in _CASE_PART.finditer(flat)
                    if m.group(1) in cases and m.group(2) not in cases[m.group(1)]]
        if "unknown-state policy" in flat and "unknown-state policy" not in headings:
            missing.append(f"{rel}: the unknown-state policy")
    assert missing == []


def test_every_convention_citation_resolves():
    conventions = convention_index()
    missing = [f"{rel}: convention {n}" for rel, text in _scanned_files()
               for m in _CONVENTION.finditer(flatten(text)) for n in _numbers(m.group(1))
               if n not in conventions]
    assert missing == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("docs/protocol.md §7,\n§11 pitfalls 5-7; x", [("docs/protocol.md", "7", []),
                                                       ("docs/protocol.md", "11", [5, 6, 7])]),
        ("(docs/protocol.md §1.2 (method names), §6 (error codes)", [("docs/protocol.md", "1.2", []),
                                                                     ("docs/protocol.md", "6", [])]),
        ("docs/protocol.md §3.4-3.5 and §11 pitfalls 9,\n    10)", [("docs/protocol.md", "3.4", []),
                                                                    ("docs/protocol.md", "3.5", []),
                                                                    ("docs/protocol.md", "11", [9, 10])]),
        ("# see docs/protocol.md §11 pitfalls 2 and\n# 13", [("docs/protocol.md", "11", [2, 13])]),
        ("(F05; SPEC §3.1.1, §3.1.5)", [("SPEC", "3.1.1", []), ("SPEC", "3.1.5", [])]),
        ('RFC 9110 §7.6.1; issue "Card" §1-2', [("RFC 9110", "7.6.1", []), ('issue "Card"', "1", []),
                                                ('issue "Card"', "2", [])]),
        ("workers close streams (SDK, §7)", [(None, "7", [])]),
    ],
)
def test_the_section_scanner_reads_what_it_should(text, expected):
    """Self-check of the scanner: wrapped lines, ranges, pitfall lists and sources."""
    assert section_citations(text) == expected


def test_the_outside_pattern_catches_the_old_names():
    old = ["PROTOCOL" + ".md §7", "FIELD" + "-CASES.md F05", "FIELD" + "-CASES F08",
           "STYLE" + ".md convention 6", ".." + "/shared/a2a/x"]
    assert all(_OUTSIDE.search(s) for s in old)
    assert not _OUTSIDE.search("docs/protocol.md §7 and deploy/k8s/shared/gateway.yaml")


def test_the_configuration_reference_is_generated_from_the_models():
    """docs/configuration.md is what ``python -m gateway.config_reference`` writes: rerun it
    after changing gateway/config.py."""
    from gateway.config_reference import TARGET, render

    assert TARGET.read_text(encoding="utf-8") == render(), "run: python -m gateway.config_reference"


def test_the_command_table_is_generated_from_the_commands():
    """docs/architecture.md's command table is what ``python -m gateway.command_reference``
    writes: rerun it after changing gateway/exchange/commands.py."""
    from gateway.command_reference import TARGET, render

    current = TARGET.read_text(encoding="utf-8")
    assert current == render(current), "run: python -m gateway.command_reference"
    assert "`Enqueue(callback_id, task_id, body, tenant)`" in current  # the fields the code has


def test_the_command_table_needs_a_reply_line_and_its_markers():
    from gateway import command_reference
    from gateway.exchange.commands import Command, command

    @command
    class Undocumented(Command):
        """Does something, but says nothing of its reply."""

    with pytest.raises(ValueError, match="Reply:"):
        command_reference._parts(Undocumented)
    with pytest.raises(ValueError, match="markers"):
        command_reference.render("# Architecture\n")


def test_every_config_field_has_a_description_in_its_model():
    from gateway.config import GatewayConfig
    from gateway.config_reference import _models

    sections: list = []
    _models(GatewayConfig, "", sections)
    missing = [f"{path}.{name}" for path, model in sections
               for name, field in model.model_fields.items() if not field.description]
    assert missing == []
    for key in ("listen.tls.client_cert", "upstreams[].tls.ca_file", "ledger.url", "log.format"):
        assert f"`{key}`" in (ROOT / "docs" / "configuration.md").read_text()


def test_every_observability_citation_resolves():
    """``docs/observability.md §N.M`` (tracing, the task timeline, the status page)."""
    numbers = section_index("observability.md")
    assert {"1", "1.1", "1.2", "2", "2.1", "2.3", "3"} <= numbers
    missing = [f"{rel}: docs/observability.md §{section}" for rel, text in _scanned_files()
               for source, section, _ in section_citations(text)
               if source == "docs/observability.md" and section not in numbers]
    assert missing == []


def test_every_limits_citation_resolves():
    """``docs/limits.md §N`` (what each limit counts, config, the answer, the stores, observing)."""
    numbers = section_index("limits.md")
    assert {"1", "2", "3", "4", "5"} <= numbers
    missing = [f"{rel}: docs/limits.md §{section}" for rel, text in _scanned_files()
               for source, section, _ in section_citations(text)
               if source == "docs/limits.md" and section not in numbers]
    assert missing == []


# ------------------------------------------------------------------------------ the docs site

def _build_site(root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(root / "mkdocs.yml"), "--site-dir", str(out)], cwd=root,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict``: every link and anchor resolves, every page is in the nav; the
    diagrams are Mermaid blocks the theme renders."""
    proc = _build_site(ROOT, tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
    site = tmp_path / "site"
    for page in ("index.html", "quickstart/index.html", "how-it-works/index.html",
                 "tutorials/kubernetes/index.html", "guide/running/index.html", "configuration/index.html"):
        assert (site / page).is_file(), page
    diagrams = (site / "how-it-works" / "index.html").read_text(encoding="utf-8")
    assert diagrams.count('class="mermaid"') >= 5


def test_a_broken_link_fails_the_site_build(tmp_path: Path) -> None:
    """Self-check of the link checking: the same site with one link to a missing page fails."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs")
    with (tmp_path / "docs" / "quickstart.md").open("a", encoding="utf-8") as fh:
        fh.write("\nSee [the missing page](no-such-page.md).\n")
    proc = _build_site(tmp_path, tmp_path / "site")
    assert proc.returncode != 0 and "no-such-page.md" in proc.stderr


def test_the_readme_is_one_screen_to_250_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    text = "\n".join(lines)
    assert "bash scripts/demo.sh" in text and "bash scripts/test.sh" in text


def _shown_pages() -> list[tuple[str, str]]:
    """(path, text) of the README and every site page written for people."""
    return [(rel, text) for rel, text in _scanned_files()
            if rel == "README.md" or (rel.startswith("docs/") and rel.endswith(".md"))]


def _code_blocks(text: str) -> list[str]:
    """The shell code blocks of a page (fenced ``bash``, ``sh``, ``console`` or unnamed)."""
    blocks: list[str] = []
    fence: str | None = None  # the open block's language, while in one
    lines: list[str] = []
    for line in text.splitlines():
        if fence is None and line.startswith("```"):
            fence, lines = line[3:].strip(), []
        elif fence is not None and line.strip() == "```":
            if fence in ("", "bash", "sh", "console"):
                blocks.append("\n".join(lines) + "\n")
            fence = None
        elif fence is not None:
            lines.append(line)
    return blocks


def shown_commands() -> list[tuple[str, list[str]]]:
    """Every ``a2a-gateway …`` command in a code block of the README and the site's pages, as
    (where, argv after the program name): continuation lines joined, a trailing ``# comment``,
    leading ``VAR=value`` assignments and an ``&`` dropped."""
    found = []
    for rel, text in _shown_pages():
        for block in _code_blocks(text):
            for line in block.replace("\\\n", " ").splitlines():
                if "a2a-gateway" not in line:
                    continue
                words = shlex.split(line, comments=True)
                while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                    words.pop(0)
                if words and words[0].endswith("a2a-gateway") and "/" not in words[0].replace(".venv/bin/", ""):
                    found.append((rel, [w for w in words[1:] if w != "&"]))
    return found


def test_every_command_the_docs_show_is_one_the_cli_takes() -> None:
    from gateway.cli import _parser

    commands = shown_commands()
    assert len(commands) >= 10 and any(argv[:1] == ["serve"] for _, argv in commands)
    refused = []
    for rel, argv in commands:
        try:
            _parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code not in (0, None):  # --help exits 0
                refused.append(f"{rel}: a2a-gateway {' '.join(argv)}")
    assert refused == []


def test_every_variable_the_docs_name_is_one_the_gateway_reads() -> None:
    from gateway.cli import CALLER_SECRET_ENV, SERVE_SETTINGS, STATE_DIR_ENV

    known = {s.env for s in SERVE_SETTINGS} | {STATE_DIR_ENV, CALLER_SECRET_ENV}
    known.add("A2A_GATEWAY_TCK_DIR")  # the tests' (tests/support/tck.py), named in docs/development.md
    named = {(rel, v) for rel, text in _shown_pages() for v in re.findall(r"\bA2A_GATEWAY_[A-Z][A-Z_]*[A-Z]", text)}
    assert sorted((rel, v) for rel, v in named if v not in known) == []


def test_every_metric_the_docs_name_is_one_the_gateway_exports() -> None:
    from prometheus_client import CollectorRegistry

    from gateway.observability.metrics import Metrics

    registry = CollectorRegistry()
    Metrics(registry)
    exported = set()
    for family in registry.collect():
        exported |= {family.name, *(family.name + suffix for suffix in ("_total", "_bucket", "_count", "_sum"))}
    named = {(rel, m) for rel, text in _shown_pages() for m in re.findall(r"\ba2a_gateway_[a-z_]*[a-z]", text)}
    assert sorted((rel, m) for rel, m in named if m not in exported) == []


def test_the_defaults_the_quickstart_shows_are_the_codes() -> None:
    """The quickstart's addresses: traffic 127.0.0.1:8080, admin :8081, the demo worker :9999."""
    from gateway.config import parse_config

    config = parse_config({"upstreams": [{"name": "worker", "url": "http://127.0.0.1:9999/"}]})
    assert (config.listen.host, config.listen.port, config.admin.host, config.admin.port) == \
        ("127.0.0.1", 8080, "127.0.0.1", 8081)
    demo = (ROOT / "demo" / "worker.py").read_text(encoding="utf-8")
    assert "'--port', type=int, default=9999" in demo
    quickstart = (DOCS / "quickstart.md").read_text(encoding="utf-8")
    assert "It listens on `127.0.0.1:8080` for traffic and on `127.0.0.1:8081`" in quickstart
    assert ".venv/bin/python -m demo.worker                      # http://127.0.0.1:9999/" in quickstart
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "serve --upstream http://127.0.0.1:9999/     # your agent's URL; traffic on :8080" in readme
    assert "localhost:8081/readyz" in readme
