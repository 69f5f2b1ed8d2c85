"""The push-notification relay's shell (docs/push.md): :mod:`~gateway.push.relay` rewrites push
configs and serves the callback URLs, :mod:`~gateway.push.delivery` empties the durable outbox
into the clients' webhooks, :mod:`~gateway.push.ssrf` decides which webhook addresses may be
reached. What a notification means is decided by :mod:`gateway.exchange.push`."""
