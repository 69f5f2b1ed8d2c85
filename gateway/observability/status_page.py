"""The admin listener's pages for a person: ``GET /status`` (docs/observability.md §3) and the
readable form of a task timeline (docs/observability.md §2), shared by ``a2a-gateway ledger
show`` and the status page's links.

Server-rendered from string templates; every value from a worker, a card or the ledger goes
through :func:`html.escape`. No script, no external resource: the page works offline and under
a strict Content-Security-Policy. It shows upstreams, task counts and findings — never a
message body, a header or anything about a caller.
"""

from __future__ import annotations

import html
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gateway.invariants.timeline import TimelineEntry

CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'"
"""The page's ``Content-Security-Policy``: its one inline style sheet, nothing else."""


def iso(at: float | None) -> str:
    """Epoch seconds as ISO-8601 UTC with milliseconds (``2026-12-01T18:32:30.125Z``); ``-``
    for ``None``."""
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def printable(text: str) -> str:
    """``text`` safe for a terminal: every character ``str.isprintable`` refuses — controls
    (an escape sequence, a newline), format characters (a bidi override), separators other
    than the space — a worker put in a state or an error, as ``\\xNN`` / ``\\uNNNN``, so a line
    of ``ledger show`` is one line and moves no cursor."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else
                   (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}") for c in text)


def timeline_lines(entries: Iterable[TimelineEntry]) -> list[str]:
    """A timeline as text, one entry per line (and one indented line per finding, forced
    ``GetTask`` and error), oldest first, each :func:`printable` — what ``ledger show`` prints::

        2026-12-01T18:40:01.000Z  event    SendStreamingMessage jsonrpc 1.0  state completed -> TASK_STATE_COMPLETED  rewritten
            normalization legacy_v03: …
    """
    lines: list[str] = []
    for e in entries:
        state = e.state or "-"
        if e.state_received is not None and e.state_received != e.state:
            state = f"{e.state_received} -> {state}"
        call = " ".join(part for part in (e.method, e.binding, e.version) if part)
        lines.append(f"{iso(e.at)}  {e.direction:<8} {call}  state {state}  {e.verdict.upper()}")
        if e.forced_get is not None:
            lines.append(f"    forced GetTask: {e.forced_get}")
        for category, kind, detail in e.findings:
            lines.append(f"    {category} {kind}: {detail}" if detail else f"    {category} {kind}")
        if e.error is not None:
            lines.append(f"    answered with error {e.error}")
    return [printable(line) for line in lines]


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def timeline_href(upstream: str, task_id: str, tenant: str = "") -> str:
    """The admin path of a task's timeline (JSON): ``/tasks/{upstream}/{task_id}/timeline``,
    with ``?tenant=`` for a task of a tenant."""
    quote = urllib.parse.quote
    query = f"?tenant={quote(tenant, safe='')}" if tenant else ""
    return f"/tasks/{quote(upstream, safe='')}/{quote(task_id, safe='')}/timeline{query}"


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2433;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;min-width:40em}th,td{border:1px solid #ccd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#eef1f7}.fresh{color:#11772d}.stale{color:#9a6700}.unreachable,.invalid{color:#b3261e;font-weight:bold}
.muted{color:#667}code{font-size:.95em}.when{white-space:nowrap}
"""


def _signature(u: Mapping[str, Any]) -> str:
    """The worker-signature cell: the verification's outcome (``verified``, ``unverified``,
    ``unsigned``, ``invalid``), or — when signatures are not checked — ``yes`` / ``no`` for
    whether the card carries any."""
    state = u.get("signature") or "unchecked"
    if state == "unchecked":
        return "yes" if u["signed"] else "no"
    return str(state)


def _limits_table(limits: Sequence[Mapping[str, Any]]) -> str:
    """The fair-share section: one row per scope and limit, use against the limit."""
    e = html.escape
    if not limits:
        return '<p class="muted" id="limits-none">no request has met a limit\'s scope yet</p>'
    rows = []
    for scope in limits:
        for item in scope["limits"]:
            use = "-" if item["use"] is None else f'{item["use"]} / {item["max"]}'
            rows.append(f'<tr><td>{e(str(scope["kind"]))}</td><td>{e(str(scope["label"]))}</td>'
                        f'<td>{e(str(item["limit"]))}</td><td>{e(str(item["max"]))}</td>'
                        f'<td class="limit-use" data-limit="{e(str(item["limit"]))}">{e(use)}</td></tr>')
    return ('<table id="limits"><tr><th>scope</th><th>name</th><th>limit</th><th>configured</th>'
            f'<th>use / limit</th></tr>{"".join(rows)}</table>')


def render_status(*, upstreams: list[Mapping[str, Any]], by_state: Mapping[str, int] | None,
                  divergences: list[Mapping[str, Any]], mode: str, version: str,
                  now: float | None = None, limits: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The status page's HTML.

    Args:
        upstreams: one mapping per upstream: ``name``, ``url``, ``card`` (``fresh``, ``stale``,
            ``pending``, ``unreachable``, ``invalid``), ``reason``, ``etag``, ``age_s``,
            ``signed``, ``interfaces`` (``[(binding, version, url)]``), ``admitting``,
            ``signature`` (the worker's card signatures: ``verified``, ``unverified``,
            ``unsigned``, ``invalid``, ``unchecked``; docs/protocol.md §4.5) and
            ``signing_kids`` (the ``kid`` of each key the gateway signs served cards with).
        by_state: tracked tasks by canonical state (``None``: the ledger did not answer).
        divergences: the latest divergences, newest first (``at``, ``upstream``, ``kind``,
            ``task_id``, ``tenant``, ``detail``, ``action``).
        limits: the fair-share scopes seen most recently, each ``kind``, ``label`` and
            ``limits`` (``[{"limit", "use", "max"}]``; docs/limits.md §5); ``None``: the
            section is left out (no limit configured).
    """
    e = html.escape
    now = time.time() if now is None else now
    rows = []
    for u in upstreams:
        interfaces = "<br>".join(f"{e(b)} {e(v)} <code>{e(url)}</code>" for b, v, url in u["interfaces"]) or "-"
        state = str(u["card"])
        reason = f'<br><span class="muted">{e(str(u["reason"]))}</span>' if u.get("reason") else ""
        rows.append(
            f'<tr data-upstream="{e(str(u["name"]))}"><td>{e(str(u["name"]))}<br>'
            f'<span class="muted">{e(str(u["url"]))}</span></td>'
            f'<td class="card-state {e(state)}">{e(state)}{reason}</td>'
            f'<td><code>{e(str(u["etag"] or "-"))}</code></td><td>{e(_age(u["age_s"]))}</td>'
            f'<td class="signature {e(_signature(u))}">{e(_signature(u))}</td>'
            f'<td>{"yes" if u["admitting"] else "no"}</td>'
            f'<td>{interfaces}</td><td class="signing-kid">{e(", ".join(u.get("signing_kids") or ())) or "-"}</td></tr>')
    if by_state is None:
        tasks = '<p class="unreachable" id="tasks-unavailable">the task ledger did not answer</p>'
    elif not by_state:
        tasks = '<p class="muted" id="tasks-none">no tracked tasks</p>'
    else:
        cells = "".join(f'<tr data-state="{e(s)}"><td>{e(s)}</td><td>{n}</td></tr>'
                        for s, n in sorted(by_state.items()))
        tasks = (f'<table id="tasks"><tr><th>state</th><th>tasks</th></tr>{cells}'
                 f"<tr><th>all</th><th>{sum(by_state.values())}</th></tr></table>")
    if divergences:
        items = []
        for d in divergences:
            task = str(d.get("task_id") or "")
            href = timeline_href(str(d["upstream"]), task, str(d.get("tenant") or ""))
            link = f'<a href="{e(href)}">{e(task)}</a>' if task else "-"
            items.append(f'<tr class="divergence"><td class="when">{e(iso(d["at"]))}</td><td>{e(str(d["upstream"]))}</td>'
                         f'<td>{e(str(d["kind"]))}</td><td>{link}</td><td>{e(str(d["action"]))}</td>'
                         f'<td>{e(str(d["detail"]))}</td></tr>')
        found = ('<table id="divergences"><tr><th>when (UTC)</th><th>upstream</th><th>kind</th><th>task</th>'
                 f'<th>action</th><th>detail</th></tr>{"".join(items)}</table>')
    else:
        found = '<p class="muted" id="divergences-none">no divergence since this process started</p>'
    shares = "" if limits is None else "<h2>Fair-share limits</h2>" + _limits_table(limits)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>a2a-gateway status</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_STYLE}</style></head>
<body><h1>a2a-gateway status</h1>
<p class="muted">version {e(version)} · mode {e(mode)} · {e(iso(now))} · this process only</p>
<h2>Upstreams</h2>
<table id="upstreams"><tr><th>upstream</th><th>Agent Card</th><th>ETag</th><th>age</th><th>worker signature</th>
<th>admitting new tasks</th><th>advertised interfaces</th><th>served card signed by (kid)</th></tr>{"".join(rows)}</table>
<h2>Tracked tasks</h2>{tasks}
<h2>Latest divergences</h2>{found}{shares}
</body></html>
"""
