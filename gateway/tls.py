"""TLS contexts: the traffic listener's (``listen.tls``) and the one towards each upstream
(``upstreams[].tls``), built with the standard library's :mod:`ssl`.

* The listener's context is built once and handed to uvicorn as it is; a reload (SIGHUP)
  loads the certificate files again into the same context (:func:`reload_server_context`),
  which serves new handshakes with the new certificate while the listener and its open
  connections stay. The files are first loaded into a scratch context, so a reload whose
  files are broken or do not match changes nothing.
* An upstream's context verifies the worker against ``ca_file`` (else the system's CAs) and
  presents ``cert_file`` / ``key_file`` when given; both its requests and its Agent Card
  fetches use it (:class:`gateway.proxy.transport.UpstreamClient`).
"""

from __future__ import annotations

import ssl

from gateway.config import ListenTlsConfig, UpstreamTlsConfig
from gateway.errors import ConfigError

_CLIENT_CERT = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class _EncryptedKey(ValueError):
    pass


def _no_passphrase() -> bytes:
    """``load_cert_chain``'s ``password``: without one, OpenSSL asks for a passphrase on the
    terminal, and the gateway would hang at start or in a SIGHUP reload."""
    raise _EncryptedKey("the key file is encrypted; give it unencrypted (no passphrase prompt)")


def _problem(where: str, err: Exception) -> ConfigError:
    text = getattr(err, "strerror", None) or str(err)
    return ConfigError([f"{where}: {text}"])


def server_context(cfg: ListenTlsConfig) -> ssl.SSLContext:
    """The traffic listener's context (TLS 1.2 or later), certificate and key loaded, client
    certificates asked for per ``client_cert``.

    Raises:
        ConfigError: a file cannot be read, is not PEM, or the key does not match.
    """
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_server_files(ctx, cfg)
    return ctx


def _load_server_files(ctx: ssl.SSLContext, cfg: ListenTlsConfig) -> None:
    try:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file, password=_no_passphrase)
    except (OSError, ssl.SSLError, _EncryptedKey) as err:
        raise _problem("listen.tls.cert_file / key_file", err) from None
    if cfg.client_ca_file:
        try:
            ctx.load_verify_locations(cafile=cfg.client_ca_file)
        except (OSError, ssl.SSLError) as err:
            raise _problem("listen.tls.client_ca_file", err) from None
    ctx.verify_mode = _CLIENT_CERT[cfg.client_cert]


def reload_server_context(ctx: ssl.SSLContext, cfg: ListenTlsConfig) -> None:
    """Load ``cfg``'s files again into the live ``ctx`` (new handshakes get them), after
    checking them on a scratch context. CA certificates of ``client_ca_file`` are added to
    those already trusted (OpenSSL cannot remove one from a live context: restart for that).

    Raises:
        ConfigError: the files do not load (``ctx`` is unchanged).
    """
    _load_server_files(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH), cfg)
    _load_server_files(ctx, cfg)


def client_context(cfg: UpstreamTlsConfig, upstream: str = "") -> ssl.SSLContext | bool:
    """The context of connections to an upstream: ``True`` (aiohttp's default verification
    against the system's CAs) when ``cfg`` is all defaults, else a context of its own.

    Raises:
        ConfigError: a file cannot be read or is not PEM (the line names
            ``upstreams[<name>].tls``).
    """
    if cfg == UpstreamTlsConfig():
        return True
    where = f"upstreams[{upstream}].tls" if upstream else "upstreams[].tls"
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cfg.ca_file)
    except (OSError, ssl.SSLError) as err:
        raise _problem(f"{where}.ca_file", err) from None
    if not cfg.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file:
        try:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file, password=_no_passphrase)
        except (OSError, ssl.SSLError, _EncryptedKey) as err:
            raise _problem(f"{where}.cert_file / key_file", err) from None
    return ctx
