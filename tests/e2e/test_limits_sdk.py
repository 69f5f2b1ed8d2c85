"""Fair shares as a genuine a2a-sdk 1.3 client meets them (docs/limits.md §3): the client
follows the card the gateway serves, to the real a2a-sdk demo worker. A caller with one live
task gets its second new task refused (HTTP 429, the limit named) over JSON-RPC and REST, and
once its task completes, by the client's own follow-up, a new task goes through."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry

from a2a.client import ClientConfig, create_client
from a2a.client.errors import A2AClientError
from a2a.helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState

from demo.client import fetch_card, rewrite_card_urls
from demo.worker import build_worker_app
from gateway.app import build_app
from gateway.config import LimitsConfig, QuotaConfig, sidecar_config
from tests.support.gateway import serve_gateway
from tests.support.servers import serve_in_thread, wait_until


def request(text: str, task: object = None) -> SendMessageRequest:
    ids = {"task_id": task.id, "context_id": task.context_id} if task is not None else {}  # type: ignore[attr-defined]
    return SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER, **ids))


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_second_live_task_is_refused_until_the_first_completes(binding: str) -> None:
    worker_app = build_worker_app("http://worker.invalid:1/")
    with serve_in_thread(worker_app, name="sdk-worker") as worker:
        config = sidecar_config(worker.url, host="127.0.0.1", port=0, mode="enforce", ledger="memory")
        config = config.model_copy(update={"limits": LimitsConfig(per_caller=QuotaConfig(live_tasks=1))})
        registry = CollectorRegistry()
        app = build_app(config, registry=registry)
        with serve_gateway(app, name="limits-gateway") as (gateway, _admin):
            wait_until(lambda: app.state.runtime.cards_known(), message="the worker's card")
            async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
                card = rewrite_card_urls(await fetch_card(http, gateway.url), gateway.url)
                client = await create_client(card, ClientConfig(
                    streaming=False, supported_protocol_bindings=[binding], httpx_client=http))

                async def send(req: SendMessageRequest) -> object:
                    (answer,) = [r async for r in client.send_message(req)]
                    return answer.task

                parked = await send(request("ask for a date"))
                assert parked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED  # type: ignore[attr-defined]
                # a2a-sdk 1.3 raises on the HTTP status before it reads the body (docs/limits.md §3)
                with pytest.raises(A2AClientError, match="HTTP Error 429"):
                    await send(request("ask for a date"))
                done = await send(request("tomorrow", parked))
                assert done.status.state == TaskState.TASK_STATE_COMPLETED  # type: ignore[attr-defined]
                again = await send(request("ask for a date"))
                assert again.status.state == TaskState.TASK_STATE_INPUT_REQUIRED  # type: ignore[attr-defined]
                await client.close()
        limited = sum(s.value for f in registry.collect() for s in f.samples
                      if s.name == "a2a_gateway_limited_total" and s.labels.get("limit") == "caller.live_tasks")
        assert limited == 1
