"""Where a webhook may be sent (server-side request forgery).

An endpoint URL must be ``https``, carry no user name or password, and its host must resolve
only to public (globally routable) addresses: never loopback, private, link-local (the cloud
metadata address 169.254.169.254 among them), shared, reserved, multicast or unspecified ones,
IPv4-mapped IPv6 included. It is checked when the endpoint is created and again before every
delivery (DNS can change), and the delivery connects to the address that was checked (no
second resolution in between: no DNS rebinding).

``allow_local`` (``WEBHOOK_ALLOW_LOCAL_URLS``, development and test settings only) also accepts
``http`` and loopback addresses, for a receiver on the developer's machine.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import SplitResult, urlsplit

__all__ = ["MAX_URL_LENGTH", "UnsafeUrl", "check_url", "resolve_allowed"]

MAX_URL_LENGTH = 2048

Resolver = Callable[..., list]
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeUrl(ValueError):
    """The URL is refused. ``code``: ``invalid_url``, ``insecure_scheme``, ``unresolvable`` or
    ``forbidden_address``; the message never repeats the URL."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


def _split(url: str, *, allow_local: bool) -> SplitResult:
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH:
        raise UnsafeUrl(
            "invalid_url", f"Must be an absolute URL of at most {MAX_URL_LENGTH} characters."
        )
    if not url.isascii() or not url.isprintable() or any(c.isspace() for c in url):
        raise UnsafeUrl("invalid_url", "Must be an absolute URL in printable ASCII.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeUrl("invalid_url", "Must be an absolute URL.") from exc
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise UnsafeUrl("invalid_url", "Must be an absolute https URL.")
    if parts.scheme == "http" and not allow_local:
        raise UnsafeUrl("insecure_scheme", "Must use https.")
    if parts.username is not None or parts.password is not None:
        raise UnsafeUrl("invalid_url", "Must not contain a user name or password.")
    if parts.fragment:
        raise UnsafeUrl("invalid_url", "Must not contain a fragment.")
    if port == 0:
        raise UnsafeUrl("invalid_url", "Must not use port 0.")
    return parts


def _allowed(address: IpAddress, *, allow_local: bool) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if allow_local and address.is_loopback:
        return True
    return address.is_global and not address.is_multicast


def resolve_allowed(
    url: str, *, allow_local: bool, resolver: Resolver = socket.getaddrinfo
) -> list[str]:
    """Check ``url`` (the rules in the module's docstring) and return the addresses its host
    resolves to, as strings, every one of them allowed. Raises :class:`UnsafeUrl`."""
    parts = _split(url, allow_local=allow_local)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = resolver(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UnsafeUrl("unresolvable", "The host name does not resolve.") from exc
    addresses: list[str] = []
    for info in infos:
        text = info[4][0].split("%", 1)[0]
        address = ipaddress.ip_address(text)
        if not _allowed(address, allow_local=allow_local):
            raise UnsafeUrl(
                "forbidden_address",
                "The host resolves to a loopback, private, link-local or reserved address.",
            )
        if text not in addresses:
            addresses.append(text)
    if not addresses:
        raise UnsafeUrl("unresolvable", "The host name does not resolve.")
    if parts.scheme == "http" and not all(ipaddress.ip_address(a).is_loopback for a in addresses):
        raise UnsafeUrl("insecure_scheme", "Must use https (http only for a loopback receiver).")
    return addresses


def check_url(url: str, *, allow_local: bool, resolver: Resolver = socket.getaddrinfo) -> str:
    """:func:`resolve_allowed`, for the endpoint's creation: returns ``url`` unchanged."""
    resolve_allowed(url, allow_local=allow_local, resolver=resolver)
    return url
