"""Models are local: refuse endpoints that are not loopback or private unless allow-listed."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

ENV_PREFIX = "MEMFLOW_"


class NonLocalEndpointError(ValueError):
    """The endpoint's host is neither loopback/private nor allow-listed by the operator."""


def _is_local_ip(text: str) -> bool:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local


def check_local_endpoint(url: str, allow_hosts: Iterable[str] = ()) -> str:
    """Return `url` if its host is local (loopback, private, link-local) or allow-listed.

    A hostname is resolved and every address it resolves to must be local; `localhost` is
    accepted without resolving. Raises NonLocalEndpointError otherwise.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NonLocalEndpointError(f"model endpoint {url!r} is not an http(s) URL")
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
        f"model endpoint {url!r} is not a loopback or private address; models must be local. "
        f"Allow the host explicitly with MEMFLOW_ALLOW_MODEL_HOSTS={host} if it is yours."
    )


def scrubbed_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for an operator's command provider, without memflow's own variables."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if not k.upper().startswith(ENV_PREFIX)}
