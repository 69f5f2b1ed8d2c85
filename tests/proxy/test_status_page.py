"""The admin listener's status page (docs/observability.md §3), loaded in headless Chromium from
the running gateway: the rendered DOM (upstreams and their card, tracked tasks by state, the
latest divergences linking to their timelines) and a screenshot that is not blank."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.proxy.conftest import Harness
from tests.support.objects import task

V1 = {"A2A-Version": "1.0"}
WIDTH, HEIGHT = 1200, 900


def chromium() -> str:
    """Debian's ``chromium``; skipped when missing (fails under CI, which installs it)."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run must install it")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return binary


def headless(*args: str) -> subprocess.CompletedProcess[str]:
    profile = tempfile.mkdtemp(prefix="a2a-gw-chromium-")
    try:
        return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               f"--user-data-dir={profile}", "--hide-scrollbars", *args],
                              capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered rows of an 8-bit RGB/RGBA PNG (stdlib only)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = depth = color = 0
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    assert depth == 8 and color in (2, 6), (depth, color)
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        filt, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if filt == 1:
                line[i] = (line[i] + a) & 255
            elif filt == 2:
                line[i] = (line[i] + b) & 255
            elif filt == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif filt == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r[i:i + 3]) for r in rows for i in range(0, stride, bpp)]  # type: ignore[misc]


def diverge(h: Harness, tid: str) -> None:
    """The worker reopens a completed task (a terminal_regression divergence)."""
    h.worker.on("GetTask", json_result=task(tid, "TASK_STATE_COMPLETED"))
    h.worker.on("GetTask", json_result=task(tid, "TASK_STATE_WORKING"))
    for n in (1, 2):
        h.rpc({"jsonrpc": "2.0", "id": n, "method": "GetTask", "params": {"id": tid}}, headers=V1)


def test_status_page_in_headless_chromium(h: Harness, tmp_path: Path) -> None:
    chromium()
    h.worker.on("GetTask", json_result=task("t-live", "TASK_STATE_WORKING"))
    h.rpc({"jsonrpc": "2.0", "id": 9, "method": "GetTask", "params": {"id": "t-live"}}, headers=V1)
    diverge(h, "t-<b>odd</b>")  # a task id that must come out as text, not markup
    url = h.admin.url + "/status"

    dom = headless("--dump-dom", url)
    assert dom.returncode == 0, dom.stderr
    page = dom.stdout
    assert "<h1>a2a-gateway status</h1>" in page
    assert '<tr data-upstream="worker">' in page
    assert '<td class="card-state fresh">fresh</td>' in page
    assert "JSONRPC 1.0" in page  # the worker's advertised interfaces
    etag = h.on_gateway_loop(h.runtime.ledger.get("worker", "t-live")).record.card_etag
    row = page.split('<tr data-upstream="worker">', 1)[1].split("</tr>", 1)[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert etag and cells[2] == f"<code>{etag}</code>"  # the card's ETag, as the ledger records it
    assert re.fullmatch(r"\d+ s", cells[3]), cells[3]  # its age
    assert cells[4:6] == ["no", "yes"]  # not signed; admitting new tasks
    assert '<tr data-state="TASK_STATE_WORKING"><td>TASK_STATE_WORKING</td><td>1</td></tr>' in page
    assert '<tr data-state="TASK_STATE_COMPLETED"><td>TASK_STATE_COMPLETED</td><td>1</td></tr>' in page
    assert page.count('<tr class="divergence">') == 1
    assert "terminal_regression" in page
    assert "<b>odd</b>" not in page and "t-&lt;b&gt;odd&lt;/b&gt;" in page  # escaped, never markup
    href = "/tasks/worker/t-%3Cb%3Eodd%3C%2Fb%3E/timeline"
    assert f'href="{href}"' in page
    linked = httpx.get(h.admin.url + href, trust_env=False)  # the link leads to the task's timeline
    assert linked.status_code == 200 and linked.json()["task_id"] == "t-<b>odd</b>"
    assert [e["verdict"] for e in linked.json()["timeline"]] == ["forwarded", "rewritten"]

    shot = tmp_path / "status.png"
    taken = headless(f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", url)
    assert taken.returncode == 0 and shot.is_file(), taken.stderr
    width, height, pixels = png_pixels(shot.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    colours = set(pixels)
    assert len(colours) > 20, "a blank (or nearly blank) screenshot"
    assert any(max(p) < 80 for p in colours), "no dark text pixels"


def test_status_and_timeline_need_the_admin_token(make_harness: Any, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    h = make_harness(admin={"token_file": str(token)})
    for path in ("/status", "/tasks/worker/t-1/timeline"):
        assert httpx.get(h.admin.url + path, trust_env=False).status_code == 401
        ok = httpx.get(h.admin.url + path, headers={"Authorization": "Bearer s3cret"}, trust_env=False)
        assert ok.status_code in (200, 404)
    page = httpx.get(h.admin.url + "/status", headers={"Authorization": "Bearer s3cret"}, trust_env=False)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert "s3cret" not in page.text


def test_the_status_page_shows_no_upstream_password(make_harness: Any) -> None:
    h = make_harness(upstream={"url": "http://gw:hunter2@127.0.0.1:9/"})  # nobody listens: the card is unreachable
    page = httpx.get(h.admin.url + "/status", trust_env=False, timeout=10).text
    assert "hunter2" not in page and "http://gw:***@127.0.0.1:9/" in page


def test_a_divergence_of_a_tenants_task_links_to_that_tenants_timeline(h: Harness) -> None:
    """docs/callers.md §1: the task t-acme of tenant acme is not the task t-acme of no tenant;
    the status page's link names the tenant, and the timeline it opens is that task's."""
    import html
    import re

    h.worker.on("GetTask", json_result=task("t-acme", "TASK_STATE_COMPLETED"))
    h.worker.on("GetTask", json_result=task("t-acme", "TASK_STATE_WORKING"))
    for n in (1, 2):
        h.rpc({"jsonrpc": "2.0", "id": n, "method": "GetTask", "params": {"id": "t-acme", "tenant": "a/c me"}},
              headers=V1)
    page = httpx.get(h.admin.url + "/status", trust_env=False, timeout=10).text
    (href,) = {html.unescape(m) for m in re.findall(r'<a href="([^"]+)">t-acme</a>', page)}
    assert href == "/tasks/worker/t-acme/timeline?tenant=a%2Fc%20me"
    opened = httpx.get(h.admin.url + href, trust_env=False, timeout=10)
    assert opened.status_code == 200, opened.text
    doc = opened.json()
    assert doc["tenant"] == "a/c me" and doc["record"]["state"] == "TASK_STATE_COMPLETED"
    assert [f["kind"] for e in doc["timeline"] for f in e["findings"]] == ["terminal_regression"]
