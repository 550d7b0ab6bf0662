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


#: IPv6 prefixes that carry an IPv4 address in their last 32 bits and reach it through a
#: translator: NAT64's well-known and local-use prefixes (RFC 6052, RFC 8215).
NAT64_PREFIXES = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to: IPv4-mapped, NAT64, 6to4 and Teredo."""
    found = [address.ipv4_mapped, address.sixtofour]
    if address.teredo is not None:
        found.extend(address.teredo)
    if any(address in prefix for prefix in NAT64_PREFIXES):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [ipv4 for ipv4 in found if ipv4 is not None]


def _allowed(address: IpAddress, *, allow_local: bool) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        elif embedded:  # a translated address is as safe as the IPv4 address it reaches
            return all(_allowed(ipv4, allow_local=False) for ipv4 in embedded)
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
