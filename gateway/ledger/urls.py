"""Ledger URLs made safe to show: :func:`redact` (re-exported as ``gateway.ledger.redact``).

Its own module so that the backends, which the package's :func:`~gateway.ledger.ledger_from_url`
imports, need not import the package back (docs/architecture.md §3: no import cycles).
"""

from __future__ import annotations


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and printed config): the
    userinfo's, and the value of every query argument whose name holds ``password``
    (``ssl_password=``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    userinfo, at, tail = rest.rpartition("@")
    if at and ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    path, question, query = tail.partition("?")
    if question:
        pairs = (pair.partition("=") for pair in query.split("&"))
        query = "&".join(f"{name}{eq}***" if eq and "password" in name.lower() else f"{name}{eq}{value}"
                         for name, eq, value in pairs)
    return f"{scheme}://{userinfo}{at}{path}{question}{query}"
