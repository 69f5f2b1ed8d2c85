"""Agent Cards the card tests share: a v1.0 card and a v0.3 card of a worker mounted at
``/a2a/tock/`` (docs/field-cases.md F10), and interfaces of bindings the gateway does not
guard."""

from __future__ import annotations

from typing import Any

TOCK_CARD: dict[str, Any] = {
    "name": "Tock", "description": "scheduler", "version": "1.2.0",
    "supportedInterfaces": [
        {"url": "http://localhost:8080/a2a/tock/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "http://localhost:8080/a2a/tock/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}],
    "capabilities": {"streaming": True}, "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"], "skills": [],
}
TOCK_V03: dict[str, Any] = {
    "protocolVersion": "0.3.0", "name": "Tock", "description": "scheduler", "version": "1.2.0",
    "url": "http://localhost:8080/a2a/tock/", "preferredTransport": "JSONRPC",
    "additionalInterfaces": [{"url": "http://localhost:8080/a2a/tock/", "transport": "JSONRPC"}],
    "capabilities": {"streaming": True}, "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"], "skills": [],
}
GRPC_IFACE = {"url": "worker-a.internal:50051", "protocolBinding": "GRPC", "protocolVersion": "1.0"}
WS_IFACE = {"url": "wss://localhost:8080/a2a/tock/ws", "protocolBinding": "urn:example:websocket",
            "protocolVersion": "1.0"}
