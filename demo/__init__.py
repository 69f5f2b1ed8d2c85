"""Demo upstream agent and demo client for a2a-gateway.

* :mod:`demo.worker` -- a real a2a-sdk 1.3.0 agent (JSON-RPC v1.0 + v0.3 compat,
  HTTP+JSON REST) whose behaviour is driven by the user's message text, used
  as the upstream in demos and end-to-end tests.
* :mod:`demo.client` -- drives real a2a-sdk clients (v1.0 and v0.3 JSON-RPC)
  through every core operation against a base URL, normally the gateway.

Both modules need the ``demo`` extra (``a2a-sdk[http-server]``); the gateway
package itself never imports a2a-sdk.
"""
