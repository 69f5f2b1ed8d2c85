"""a2a-gateway: an ASGI gateway for the A2A protocol that keeps task state true."""

__version__ = "0.1.0"
