"""One-command demo: worker + gateway + client, then what the gateway saw.

``python -m demo.run`` (or ``bash scripts/demo.sh``, which also sets up the
virtualenv):

1. starts :mod:`demo.worker` (a real a2a-sdk worker), :mod:`demo.legacy_worker`
   (a misbehaving one) and the gateway (``python -m gateway serve --config``
   with the a2a-sdk worker at ``/``, the legacy one at ``/legacy`` and the
   embedded SQLite ledger, all in the run's temporary directory) as
   subprocesses on free 127.0.0.1 ports (the gateway's admin listener, which
   answers ``/readyz`` and ``/metrics``, on one more), and waits until they are
   ready: each worker's Agent Card answers, and the gateway's ``/readyz`` is
   200 — which it is only once it has fetched the card of every worker (a
   start-up fetch that came too early is retried after its back-off), so the
   client never races the gateway's first card fetch;
2. runs :func:`demo.client.run_demo` through the gateway (send, stream, get,
   cancel, subscribe and a v0.3 client);
3. scrapes the gateway's ``/metrics`` (admin listener) and prints a short summary, the
   tracked tasks by state read from the ledger (``a2a-gateway ledger stats``);
4. shows one invariant live: a raw JSON-RPC ``SendMessage`` continuing the
   COMPLETED task of step (a) is answered by the gateway itself with -32004
   (the ledger holds the task as terminal), without reaching the worker;
5. drives the legacy worker through the gateway: odd state spellings come
   back canonical, a canceled task that "completes" later stays canceled, and
   the normalizations and divergences show up in ``/metrics``.

All subprocesses are always stopped (SIGTERM, then SIGKILL after a bound).
Their logs (the gateway's are JSON lines) go to files in a temporary
directory whose path is printed. Exit status: 0 when everything worked, 1
otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from prometheus_client.parser import text_string_to_metric_families

from demo.client import DemoFailed, run_demo


__all__ = ['ledger_counts', 'main', 'summarize_metrics']

HOST = '127.0.0.1'
#: Default bound for a subprocess to become ready.
STARTUP_TIMEOUT_SECONDS = 30.0
#: How long a subprocess gets to exit after SIGTERM before it is killed.
STOP_TIMEOUT_SECONDS = 5.0
#: Lines of a subprocess's log shown when it fails.
LOG_TAIL_LINES = 40
#: A2A JSON-RPC UnsupportedOperationError: what a message to a terminal task
#: gets (a terminal task is never continued; a retry starts a new task).
UNSUPPORTED_OPERATION = -32004


class DemoError(Exception):
    """The demo could not run (a subprocess failed, an answer was wrong)."""


# --------------------------------------------------------------------------
# Subprocesses
# --------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass
class Service:
    """A started subprocess whose stdout and stderr go to ``log_path``."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(encoding='utf-8', errors='replace')
        except OSError as err:
            return f'(cannot read {self.log_path}: {err.strerror})'
        tail = text.splitlines()[-lines:]
        return '\n'.join(tail) if tail else '(empty)'

    def stop(self) -> None:
        """SIGTERM, wait up to :data:`STOP_TIMEOUT_SECONDS`, then SIGKILL."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                print(
                    f'{self.name} did not stop within '
                    f'{STOP_TIMEOUT_SECONDS:g}s of SIGTERM; killing it',
                    file=sys.stderr,
                )
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                self.proc.wait()
        self.log_file.close()


def start(name: str, args: list[str], log_path: Path, cwd: Path) -> Service:
    """Start ``python args...`` with both output streams sent to ``log_path``."""
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    log_file = log_path.open('wb')
    try:
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and modules
            [sys.executable, *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            # Own process group: a Ctrl-C in the terminal reaches only us,
            # and we stop the children in order in ``finally``.
            start_new_session=True,
        )
    except BaseException:
        log_file.close()
        raise
    return Service(name, proc, log_path, log_file)


def wait_ready(
    service: Service, url: str, timeout: float, http: httpx.Client
) -> float:
    """Poll ``url`` until it answers 200; return the seconds it took.

    Raises:
        DemoError: the process exited, or ``timeout`` passed; the message
            carries the last answer (for the gateway's ``/readyz``, its body:
            the card status of each upstream) and the end of the process's
            log (its stderr).
    """
    started = time.monotonic()
    deadline = started + timeout
    last = 'no answer yet'
    while True:
        code = service.proc.poll()
        if code is not None:
            raise DemoError(
                f'{service.name} exited with status {code} before it was ready '
                f'({url}).\n--- last lines of {service.log_path} ---\n'
                f'{service.log_tail()}'
            )
        try:
            response = http.get(url, timeout=1.0)
        except httpx.HTTPError as err:
            last = f'{type(err).__name__}: {err}'
        else:
            if response.status_code == 200:
                return time.monotonic() - started
            last = f'HTTP {response.status_code} {response.text[:500]}'.rstrip()
        if time.monotonic() >= deadline:
            raise DemoError(
                f'{service.name} was not ready after {timeout:g}s: GET {url} -> '
                f'{last}.\n--- last lines of {service.log_path} ---\n'
                f'{service.log_tail()}'
            )
        time.sleep(0.1)


# --------------------------------------------------------------------------
# Metrics summary
# --------------------------------------------------------------------------


def _counter_samples(
    families: dict[str, Any], name: str
) -> Iterator[tuple[dict[str, str], float]]:
    """``(labels, value)`` of the ``<name>_total`` samples of a counter."""
    family = families.get(name)
    if family is None:
        return
    for sample in family.samples:
        if sample.name == f'{name}_total':
            yield sample.labels, sample.value


def _table(rows: list[tuple[str, ...]], indent: str = '    ') -> list[str]:
    if not rows:
        return [f'{indent}none']
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=False)]
        lines.append(f'{indent}{"  ".join(cells)}  {row[-1]:>5}'.rstrip())
    return lines


def _n(value: float) -> str:
    return str(int(value)) if value == int(value) else f'{value:g}'


def _grouped(
    families: dict[str, Any], name: str, keys: tuple[str, ...]
) -> list[tuple[str, ...]]:
    """Non-zero counter totals summed over the labels not in ``keys``."""
    totals: dict[tuple[str, ...], float] = defaultdict(float)
    for labels, value in _counter_samples(families, name):
        totals[tuple(labels.get(k, '') for k in keys)] += value
    return [(*k, _n(v)) for k, v in sorted(totals.items()) if v]


def ledger_counts(ledger_url: str, repo: Path) -> dict[str, int]:
    """Tracked tasks by state, exact, as the ledger holds them now: the output of
    ``a2a-gateway ledger --ledger URL stats`` (the command the demo prints), not the
    ``a2a_gateway_tracked_tasks`` gauge, which is refreshed in the background
    (``admin.tracked_refresh_seconds``) and may lag a task's last state."""
    proc = subprocess.run(
        [sys.executable, '-m', 'gateway', 'ledger', '--ledger', ledger_url, 'stats'],
        cwd=repo, capture_output=True, text=True, timeout=30,
    )
    if proc.returncode != 0:
        raise DemoError(f'a2a-gateway ledger stats failed: {proc.stderr.strip()}')
    return dict(json.loads(proc.stdout)['by_state'])


def parse_metrics(text: str) -> dict[str, Any]:
    """Metric families of a Prometheus text exposition, by family name."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def summarize_metrics(text: str, by_state: dict[str, int] | None = None) -> list[str]:
    """A short, readable summary of the gateway's ``/metrics`` text; the tracked tasks by
    state from ``by_state`` (:func:`ledger_counts`) when given, else from the gauge (which
    lags: labelled so)."""
    families = parse_metrics(text)
    out: list[str] = []

    out.append('  requests by binding, method and outcome:')
    out += _table(_grouped(families, 'a2a_gateway_requests', ('binding', 'method', 'outcome')))

    out.append('  SSE events received from the worker, by kind:')
    out += _table(_grouped(families, 'a2a_gateway_sse_events', ('kind',)))

    rows = []
    if by_state is not None:
        out.append('  tracked tasks by state (the ledger now: a2a-gateway ledger stats):')
        rows = [(state, _n(n)) for state, n in sorted(by_state.items()) if n]
    else:
        out.append('  tracked tasks by state (the a2a_gateway_tracked_tasks gauge, refreshed '
                   'in the background: may lag):')
        gauge = families.get('a2a_gateway_tracked_tasks')
        for sample in gauge.samples if gauge is not None else []:
            if sample.value:
                rows.append((sample.labels.get('state', ''), _n(sample.value)))
    out += _table(rows)

    out.append('  state normalizations by spelling family:')
    out += _table(
        _grouped(families, 'a2a_gateway_state_normalizations', ('family',))
    )

    out.append('  divergences by kind (action):')
    out += _table(
        [
            (kind, f'({action})', n)
            for kind, action, n in _grouped(
                families, 'a2a_gateway_divergences', ('kind', 'action')
            )
        ]
    )

    out.append('  local rejections by reason (method, action):')
    out += _table(
        [
            (reason, f'({method}, {action})', n)
            for reason, method, action, n in _grouped(
                families,
                'a2a_gateway_local_rejections',
                ('reason', 'method', 'action'),
            )
        ]
    )
    return out


def rejection_count(text: str, reason: str) -> float:
    """Sum of ``a2a_gateway_local_rejections_total{reason=..., action="enforced"}``."""
    families = parse_metrics(text)
    return sum(
        value
        for labels, value in _counter_samples(
            families, 'a2a_gateway_local_rejections'
        )
        if labels.get('reason') == reason and labels.get('action') == 'enforced'
    )


# --------------------------------------------------------------------------
# The invariant, live
# --------------------------------------------------------------------------


def send_to_terminal_task(
    http: httpx.Client, gateway_url: str, metrics_url: str, task_id: str
) -> list[str]:
    """Continue a COMPLETED task and check the gateway refuses it itself.

    Raises:
        DemoError: the answer is not a -32004 error, or the gateway's
            local-rejection counter did not move (so the worker answered).
    """
    before = rejection_count(http.get(metrics_url).text, 'terminal_task')
    request = {
        'jsonrpc': '2.0',
        'id': 'demo-terminal-1',
        'method': 'SendMessage',
        'params': {
            'message': {
                'messageId': str(uuid.uuid4()),
                'role': 'ROLE_USER',
                'taskId': task_id,
                'parts': [{'text': 'one more thing'}],
            }
        },
    }
    response = http.post(
        gateway_url,
        json=request,
        headers={'A2A-Version': '1.0'},
    )
    after = rejection_count(http.get(metrics_url).text, 'terminal_task')
    lines = [
        f'  POST {gateway_url}  A2A-Version: 1.0',
        f'    SendMessage {{"message": {{"taskId": "{task_id}", '
        '"parts": [{"text": "one more thing"}], ...}}',
        f'  <- HTTP {response.status_code}',
    ]
    try:
        body = response.json()
    except ValueError as err:
        raise DemoError(
            f'the gateway answered HTTP {response.status_code} with a '
            f'non-JSON body: {response.text[:300]!r}'
        ) from err
    error = body.get('error') if isinstance(body, dict) else None
    if not isinstance(error, dict):
        raise DemoError(f'expected a JSON-RPC error, got {body!r}')
    lines.append(f'     error.code    {error.get("code")}')
    lines.append(f'     error.message {error.get("message")}')
    if error.get('code') != UNSUPPORTED_OPERATION:
        raise DemoError(
            f'expected error code {UNSUPPORTED_OPERATION}, got {error!r}'
        )
    lines.append(
        '  a2a_gateway_local_rejections_total{reason="terminal_task",'
        'action="enforced"}: '
        f'{_n(before)} -> {_n(after)}'
    )
    if after - before != 1:
        raise DemoError(
            'the answer was -32004 but the gateway did not count a local '
            'rejection: the worker answered, not the gateway'
        )
    lines.append(
        '  answered by the gateway itself: the worker never saw this request.'
    )
    return lines


def why_refused(
    http: httpx.Client, admin_url: str, ledger_url: str, task_id: str
) -> list[str]:
    """Why the gateway refused step 3's message, from the task's timeline on
    the admin listener (docs/observability.md §2), and the command that
    prints it from the ledger once the demo is over."""
    url = f'{admin_url}tasks/worker/{task_id}/timeline'
    response = http.get(url)
    if response.status_code != 200:
        raise DemoError(f'GET {url}: HTTP {response.status_code}')
    entries = response.json()['timeline']
    if not entries or entries[-1]['verdict'] != 'answered_locally':
        raise DemoError(f'the timeline does not end with the refusal: {entries!r}')
    last = entries[-1]
    findings = ', '.join(
        f'{f["category"]} {f["kind"]}' for f in last['findings']
    )
    return [
        f'  why? the task\'s timeline (GET {url}):',
        f'    {len(entries)} entries; the last: {last["direction"]} '
        f'{last["method"]} -> {last["verdict"]} ({findings})',
        '  the same, readable, once the demo is over (the ledger stays):',
        f'    .venv/bin/a2a-gateway ledger --ledger {ledger_url} show {task_id}',
    ]


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def legacy_step(http: httpx.Client, url: str, metrics_url: str) -> list[str]:
    """Drive the legacy worker through the gateway; check and show what the gateway fixed.

    Raises:
        DemoError: the gateway did not normalize or absorb as it must.
    """
    v1 = {'A2A-Version': '1.0'}
    lines: list[str] = []

    def call(method: str, params: dict[str, Any], headers: dict[str, str]) -> Any:
        body = {'jsonrpc': '2.0', 'id': method, 'method': method, 'params': params}
        return http.post(url, json=body, headers=headers).json()

    got = call('GetTask', {'id': 't-legacy-1'}, v1)['result']['status']['state']
    lines.append(f'  GetTask (v1.0 client):   worker said "input_required"        -> client got "{got}"')
    got03 = call('tasks/get', {'id': 't-legacy-2'}, {})['result']['status']['state']
    lines.append(f'  tasks/get (v0.3 client): worker said "TASK_STATE_CANCELLED"  -> client got "{got03}"')
    if (got, got03) != ('TASK_STATE_INPUT_REQUIRED', 'canceled'):
        raise DemoError(f'states were not normalized: {got!r}, {got03!r}')
    # a messageId of its own each run: the same one again would be a retry (docs/retries.md)
    message = {'messageId': f'm-legacy-{uuid.uuid4().hex[:8]}', 'role': 'ROLE_USER', 'parts': [{'text': 'go'}]}
    body = {'jsonrpc': '2.0', 'id': 's', 'method': 'SendStreamingMessage', 'params': {'message': message}}
    with http.stream('POST', url, json=body, headers={**v1, 'accept': 'text/event-stream'}) as response:
        raw = b''.join(response.iter_raw()).decode()
    seen = []
    for block in raw.split('\n\n'):  # each event: its gateway event id, then its data line
        data = [line[6:] for line in block.split('\n') if line.startswith('data: ')]
        if data:
            result = json.loads('\n'.join(data))['result']
            kind = next(iter(result))
            state = result[kind].get('status', {}).get('state', '')
            seen.append(f'{kind}{" " + state if state else ""}')
    lines.append('  SendStreamingMessage: worker sent task, Working, CANCELED, an artifact, COMPLETED')
    lines.append(f'                        client got  {", ".join(seen)}  (then the stream closed)')
    if not seen or 'CANCELED' not in seen[-1] or any('COMPLETED' in s or 'artifact' in s for s in seen):
        raise DemoError(f'the canceled task was not absorbing: {seen}')
    task = call('GetTask', {'id': 't-legacy-3'}, v1)['result']
    lines.append('  GetTask afterwards:   worker says COMPLETED with the late artifact')
    lines.append(f'                        client got  {task["status"]["state"]}, artifacts '
                 f'{[a["artifactId"] for a in task.get("artifacts", [])]}, metadata {task.get("metadata")}')
    if task['status']['state'] != 'TASK_STATE_CANCELED':
        raise DemoError('the gateway let a terminal task change state')
    deadline = time.monotonic() + 5
    text = http.get(metrics_url).text
    while 'kind="terminal_regression"' not in text and time.monotonic() < deadline:
        time.sleep(0.05)  # the late events are counted while the worker's stream drains
        text = http.get(metrics_url).text
    families = parse_metrics(text)
    lines.append('  the gateway counted (GET /metrics):')
    lines.append('    state normalizations by spelling family:')
    lines += _table(_grouped(families, 'a2a_gateway_state_normalizations', ('family',)), '      ')
    lines.append('    divergences by kind (action):')
    lines += _table([(kind, f'({action})', n) for kind, action, n in
                     _grouped(families, 'a2a_gateway_divergences', ('kind', 'action'))], '      ')
    return lines


def _say(line: str = '') -> None:
    print(line, flush=True)


def _heading(title: str) -> None:
    _say()
    _say(f'== {title}')


def _no_proxy_for_loopback() -> None:
    """Keep HTTP(S)_PROXY settings from routing 127.0.0.1 through a proxy.

    The demo client's httpx client honours the proxy environment variables.
    """
    for var in ('NO_PROXY', 'no_proxy'):
        current = os.environ.get(var, '')
        entries = [e for e in current.split(',') if e.strip()]
        for host in ('127.0.0.1', 'localhost'):
            if host not in entries:
                entries.append(host)
        os.environ[var] = ','.join(entries)


def run(startup_timeout: float) -> int:
    repo = Path(__file__).resolve().parent.parent
    log_dir = Path(tempfile.mkdtemp(prefix='a2a-gateway-demo-'))
    worker_port = free_port()
    gateway_port = free_port()
    legacy_port = free_port()
    admin_port = free_port()
    while len({worker_port, gateway_port, legacy_port, admin_port}) < 4:
        gateway_port, legacy_port, admin_port = free_port(), free_port(), free_port()
    worker_url = f'http://{HOST}:{worker_port}/'
    legacy_url = f'http://{HOST}:{legacy_port}/'
    gateway_url = f'http://{HOST}:{gateway_port}/'
    admin_url = f'http://{HOST}:{admin_port}/'
    metrics_url = f'{admin_url}metrics'
    config_path = log_dir / 'gateway.yaml'
    config_path.write_text(
        f'listen: {{host: {HOST}, port: {gateway_port}}}\n'
        f'admin: {{host: {HOST}, port: {admin_port}}}\n'
        'mode: enforce\n'
        f'ledger: {{url: "sqlite:///{log_dir / "ledger.db"}"}}\n'
        'upstreams:\n'  # small pools: two default ones (5 000 each) would crowd the open-files limit
        f'  - {{name: worker, url: "{worker_url}", prefix: /, pool: {{max_connections: 100}}}}\n'
        f'  - {{name: legacy, url: "{legacy_url}", prefix: /legacy, pool: {{max_connections: 100}}}}\n'
    )

    _say('a2a-gateway demo')
    _say(f'  logs: {log_dir}/  (gateway.log: JSON lines; worker.log)')
    services: list[Service] = []
    failed = False
    _no_proxy_for_loopback()
    with httpx.Client(trust_env=False, timeout=10.0) as http:
        try:
            worker = start(
                'demo worker',
                ['-m', 'demo.worker', '--host', HOST, '--port', str(worker_port),
                 '--log-level', 'info'],
                log_dir / 'worker.log',
                repo,
            )
            services.append(worker)
            legacy = start('legacy worker', ['-m', 'demo.legacy_worker', '--port', str(legacy_port)],
                           log_dir / 'legacy.log', repo)
            services.append(legacy)
            gateway = start(
                'gateway',
                ['-m', 'gateway', 'serve', '--config', str(config_path)],
                log_dir / 'gateway.log',
                repo,
            )
            services.append(gateway)
            took = wait_ready(
                worker, f'{worker_url}.well-known/agent-card.json',
                startup_timeout, http,
            )
            _say(f'  worker:  {worker_url}  (pid {worker.proc.pid}, ready in {took:.1f}s)')
            wait_ready(legacy, f'{legacy_url}.well-known/agent-card.json', startup_timeout, http)
            _say(f'  legacy worker: {legacy_url}  (pid {legacy.proc.pid}; odd spellings, reopens canceled tasks)')
            # 200 only once the gateway holds both workers' Agent Cards
            took = wait_ready(gateway, f'{admin_url}readyz', startup_timeout, http)
            _say(
                f'  gateway: {gateway_url}  (pid {gateway.proc.pid}, mode enforce, '
                f'ready in {took:.1f}s) -> / to {worker_url}, /legacy to {legacy_url}'
            )
            _say(f'  admin:   {admin_url}  (/metrics, /healthz, /readyz, /status, /tasks/worker/ID/timeline)')
            _say(f'  config:  {config_path}')
            _say(f'  ledger:  embedded SQLite at {log_dir / "ledger.db"}'
                 f'  (inspect: .venv/bin/a2a-gateway ledger --ledger sqlite:///{log_dir / "ledger.db"} stats)')

            _heading(f'1. the demo client, through the gateway ({gateway_url})')
            task_ids: dict[str, str] = {}
            try:
                asyncio.run(run_demo(gateway_url, task_ids=task_ids))
            except DemoFailed as err:
                failed = True
                _say(f'  demo client: {err}')

            _heading(f'2. what the gateway saw (GET {metrics_url}, and its ledger)')
            by_state = ledger_counts(f'sqlite:///{log_dir / "ledger.db"}', repo)
            for line in summarize_metrics(http.get(metrics_url).text, by_state):
                _say(line)

            _heading('3. an invariant, live: a terminal task stays terminal')
            task_id = task_ids.get('a')
            if task_id is None:
                raise DemoError('step (a) created no task; nothing to continue')
            _say(f'  task {task_id} from step (a) is TASK_STATE_COMPLETED.')
            _say('  Continuing it with another message must fail with -32004:')
            for line in send_to_terminal_task(http, gateway_url, metrics_url, task_id):
                _say(line)
            for line in why_refused(http, admin_url, f'sqlite:///{log_dir / "ledger.db"}', task_id):
                _say(line)

            _heading(f'4. a misbehaving legacy worker behind {gateway_url}legacy/')
            for line in legacy_step(http, gateway_url + 'legacy/', metrics_url):
                _say(line)
        except DemoError as err:
            failed = True
            _say()
            _say(f'ERROR: {err}')
        except httpx.HTTPError as err:
            failed = True
            _say()
            _say(f'ERROR: talking to the gateway: {type(err).__name__}: {err}')
        finally:
            for service in reversed(services):
                service.stop()

    _say()
    if failed:
        _say(f'demo FAILED; logs in {log_dir}/')
        return 1
    _say(f'demo OK; logs in {log_dir}/')
    return 0


def _raise_keyboard_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f'signal {signum}')


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 1 failure)."""
    parser = argparse.ArgumentParser(
        prog='python -m demo.run',
        description=(
            'Start the demo A2A worker and the gateway in front of it on free '
            '127.0.0.1 ports, drive a real a2a-sdk client through the gateway '
            '(send, stream, get, cancel, subscribe, v0.3), print what the '
            "gateway's metrics saw, and show it refusing to continue a "
            'terminal task (-32004). Logs go to a temporary directory.'
        ),
    )
    parser.add_argument(
        '--startup-timeout',
        type=float,
        default=STARTUP_TIMEOUT_SECONDS,
        metavar='SECONDS',
        help='how long the worker and the gateway may take to become ready '
        '(default: %(default)g)',
    )
    args = parser.parse_args(argv)
    # SIGTERM (e.g. from a CI runner) unwinds like Ctrl-C, so the
    # subprocesses are still stopped.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        return run(args.startup_timeout)
    except KeyboardInterrupt:
        print('interrupted', file=sys.stderr)
        return 130


if __name__ == '__main__':
    sys.exit(main())
