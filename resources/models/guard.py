"""Models are local: refuse endpoints that are not loopback or private unless allow-listed.

A refusal's message shows the endpoint as `display_url` writes it: an operator's URL may carry
credentials (`https://user:secret@host`, `?api-key=...`), and the message reaches logs (a
`memflow serve` reload that fails, a run's failure in Dagster)."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

ENV_PREFIX = "MEMFLOW_"


class NonLocalEndpointError(ValueError):
    """The endpoint's host is neither loopback/private nor allow-listed by the operator."""


def _is_local_ip(text: str) -> bool:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local


def display_url(url: str) -> str:
    """`url` as a message may show it: scheme, host, port and path, never user info, query or
    fragment; a URL without an http(s) scheme and host is not shown at all (it may be a secret
    pasted into the wrong setting). Never raises."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a URL that cannot be parsed>"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "<not an http(s) URL>"
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        host += ":<invalid port>"
        port = None
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def check_local_endpoint(url: str, allow_hosts: Iterable[str] = ()) -> str:
    """Return `url` if its host is local (loopback, private, link-local) or allow-listed.

    A hostname is resolved and every address it resolves to must be local; `localhost` is
    accepted without resolving. Raises NonLocalEndpointError otherwise.
    """
    shown = display_url(url)
    try:
        parts = urlsplit(url)
        _ = parts.port  # a port that is not a number raises, quoting it
    except ValueError:
        raise NonLocalEndpointError(f"model endpoint {shown} is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NonLocalEndpointError(
            "a model endpoint is not an http(s) URL (its value is not shown: it may hold a secret)"
        )
    host = parts.hostname.lower()
    allowed = {h.strip().lower() for h in allow_hosts if h and h.strip()}
    if host in allowed or host == "localhost" or _is_local_ip(host):
        return url
    try:
        infos = socket.getaddrinfo(host, parts.port or 80, proto=socket.IPPROTO_TCP)
        addresses = {info[4][0] for info in infos}
    except OSError:
        addresses = set()
    if addresses and all(_is_local_ip(a) for a in addresses):
        return url
    raise NonLocalEndpointError(
        f"model endpoint {shown} is not a loopback or private address; models must be local. "
        f"Allow the host explicitly with MEMFLOW_ALLOW_MODEL_HOSTS={host} if it is yours."
    )


def scrubbed_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for an operator's command provider, without memflow's own variables."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if not k.upper().startswith(ENV_PREFIX)}
