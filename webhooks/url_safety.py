"""Where a webhook may be sent (server-side request forgery).

An endpoint URL must be ``https`` on port 443 or 8443 (:data:`ALLOWED_PORTS`), carry no user
name or password, and its host must resolve only to addresses a merchant's public server can
have. The rule is an allow list, not ``ipaddress``'s ``is_global`` (whose tables lag the
registries and differ between Python versions):

- IPv4: any address outside every block of IANA's IPv4 Special-Purpose Address Registry
  (RFC 6890 and its updates; :data:`IPV4_SPECIAL`), multicast and the reserved 240/4 included;
- IPv6: only global unicast (``2000::/3``, RFC 4291) outside IANA's IPv6 Special-Purpose
  Address Registry (:data:`IPV6_SPECIAL`: the IETF protocol assignments with Teredo, 6to4,
  documentation and the rest); an IPv6 address that leads to an IPv4 address is judged by that
  address: IPv4-mapped (RFC 4291), NAT64 (RFC 6052, RFC 8215) and an ISATAP interface id (RFC
  5214). So IPv4-compatible (``::a.b.c.d``), IPv4-translated (``::ffff:0:a.b.c.d``),
  unique-local, link-local, site-local and multicast addresses are all refused.

It is checked when the endpoint is created and again before every delivery (DNS can change),
and the delivery connects to the address that was checked (no second resolution in between:
no DNS rebinding).

``allow_local`` (``WEBHOOK_ALLOW_LOCAL_URLS``, development and test settings only) also accepts
``http``, any port and loopback addresses, for a receiver on the developer's machine.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import SplitResult, urlsplit

__all__ = [
    "ALLOWED_PORTS",
    "IPV4_SPECIAL",
    "IPV6_SPECIAL",
    "MAX_URL_LENGTH",
    "UnsafeUrl",
    "check_url",
    "resolve_allowed",
    "url_pattern",
]

MAX_URL_LENGTH = 2048
#: The ports a production endpoint may use: HTTPS's own and its common alternative. Any other
#: port is where internal services listen (a database, an admin console, a metadata service).
ALLOWED_PORTS = frozenset({443, 8443})

_net = ipaddress.ip_network
#: IANA's IPv4 Special-Purpose Address Registry, every block (also those marked globally
#: reachable, such as AS112's: no merchant's webhook lives there), plus multicast (RFC 5771).
IPV4_SPECIAL = tuple(
    _net(block)
    for block in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24",
        "192.88.99.0/24", "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15",
        "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    )
)  # fmt: skip
#: The only IPv6 space a webhook may reach: global unicast (RFC 4291 section 2.4).
IPV6_GLOBAL_UNICAST = _net("2000::/3")
#: IANA's IPv6 Special-Purpose Address Registry blocks inside ``2000::/3``: the IETF protocol
#: assignments (Teredo, benchmarking, ORCHID, AMT, AS112 ...), documentation (RFC 3849, RFC
#: 9637), 6to4 (RFC 3056, deprecated by RFC 7526) and AS112-v6's direct delegation.
IPV6_SPECIAL = tuple(
    _net(block)
    for block in ("2001::/23", "2001:db8::/32", "2002::/16", "2620:4f:8000::/48", "3fff::/20")
)

#: A host name of letters, digits and hyphens, at least two labels, the last alphabetic.
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}"
#: A TCP port 1-65535 in decimal (no leading zero).
_ANY_PORT = (
    r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
)
#: A path and a query of RFC 3986 characters (percent-encoded or not); no fragment.
_PATH_QUERY = r"(?:/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?(?:\?[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*)?"


def url_pattern(*, allow_local: bool) -> str:
    """A regular expression (Python and ECMA-262: an OpenAPI ``pattern``) of URLs whose form
    :func:`check_url` accepts: ``https``, a host name, one of :data:`ALLOWED_PORTS`, and with
    ``allow_local`` also ``http(s)://127.0.0.1`` on any port. A subset of what is accepted
    (an IP literal or an internationalised name are accepted too); whether the host resolves,
    and only to allowed addresses, no pattern can say (``unresolvable``, ``forbidden_address``,
    ``insecure_scheme``)."""
    ports = "|".join(str(port) for port in sorted(ALLOWED_PORTS))
    hosts = rf"https://{_HOST}(?::(?:{ports}))?"
    if allow_local:
        hosts += rf"|https?://127\.0\.0\.1(?::{_ANY_PORT})?"
    return rf"^(?:{hosts}){_PATH_QUERY}(?![\s\S])"


Resolver = Callable[..., list]
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeUrl(ValueError):
    """The URL is refused. ``code``: ``invalid_url``, ``insecure_scheme``, ``forbidden_port``,
    ``unresolvable`` or ``forbidden_address``; the message never repeats the URL."""

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
    if not allow_local and (443 if port is None else port) not in ALLOWED_PORTS:
        raise UnsafeUrl(
            "forbidden_port", f"Must use port {' or '.join(map(str, sorted(ALLOWED_PORTS)))}."
        )
    return parts


#: IPv6 prefixes that carry an IPv4 address in their last 32 bits and reach it through a
#: translator: NAT64's well-known and local-use prefixes (RFC 6052, RFC 8215).
NAT64_PREFIXES = (_net("64:ff9b::/96"), _net("64:ff9b:1::/48"))
#: An ISATAP interface id (RFC 5214 section 6.1): ``0000:5efe`` or ``0200:5efe`` and an IPv4.
_ISATAP_IDS = (0x0000_5EFE, 0x0200_5EFE)


def _leads_to_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address is carried to, where it carries one: IPv4-mapped,
    NAT64, or an ISATAP interface id; else ``None``."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    low = int(address) & 0xFFFF_FFFF
    if any(address in prefix for prefix in NAT64_PREFIXES) or (
        (int(address) >> 32) & 0xFFFF_FFFF in _ISATAP_IDS
    ):
        return ipaddress.IPv4Address(low)
    return None


def _allowed(address: IpAddress, *, allow_local: bool) -> bool:
    if allow_local and address.is_loopback:
        return True
    if isinstance(address, ipaddress.IPv6Address):
        ipv4 = _leads_to_ipv4(address)
        if ipv4 is not None:
            # A mapped loopback is the developer's own receiver; a translated one is not.
            return _allowed(ipv4, allow_local=allow_local and address.ipv4_mapped is not None)
        return address in IPV6_GLOBAL_UNICAST and not any(
            address in block for block in IPV6_SPECIAL
        )
    return not any(address in block for block in IPV4_SPECIAL)


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
