"""The webhooks' rules without a database: where a webhook may go (a generated corpus of
addresses per forbidden range), our signatures against the ``standardwebhooks`` package, and
the retry schedule."""

from __future__ import annotations

import base64
import ipaddress
import json
import random
import socket
from datetime import UTC, datetime

import pytest
import standardwebhooks

from webhooks.delivery import RETRY_SCHEDULE, retry_wait
from webhooks.signing import new_secret, signature, webhook_headers
from webhooks.url_safety import UnsafeUrl, resolve_allowed

#: Every range a webhook must never reach, and a public one that it may.
FORBIDDEN_NETWORKS = [
    "127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16",
    "100.64.0.0/10", "0.0.0.0/8", "224.0.0.0/4", "240.0.0.0/4", "192.0.2.0/24",
    "198.18.0.0/15", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "::/128",
    # IANA special-purpose blocks that ipaddress.is_global let through on some Pythons, and
    # IPv6 forms that carry an IPv4 address (IPv4-compatible, IPv4-translated, 6to4, Teredo):
    "192.0.0.0/24", "192.88.99.0/24", "192.31.196.0/24", "192.52.193.0/24", "192.175.48.0/24",
    "198.51.100.0/24", "203.0.113.0/24", "255.255.255.255/32", "::/96", "::ffff:0:0:0/96",
    "2002::/16", "2001::/32", "2001::/23", "2001:db8::/32", "3fff::/20", "fec0::/10",
    "100::/64", "5f00::/16", "2620:4f:8000::/48", "4000::/2", "::/8",
]  # fmt: skip


def resolver_of(*addresses: str):
    def resolve(host, port, type=None):
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in addresses
        ]

    return resolve


def samples(network: str, rng: random.Random, n: int = 6) -> list[str]:
    net = ipaddress.ip_network(network)
    return [str(net[rng.randrange(net.num_addresses)]) for _ in range(n)]


@pytest.mark.parametrize("network", FORBIDDEN_NETWORKS)
def test_every_address_of_a_forbidden_range_is_refused(network):
    """Sampled addresses of each range, alone, mixed with a public one, and IPv4 ones also
    as IPv4-mapped IPv6: refused (``forbidden_address``), in production and development."""
    rng = random.Random(network)
    for address in samples(network, rng):
        variants = [[address], ["93.184.216.34", address]]
        if "." in address:
            variants.append([f"::ffff:{address}"])
        for resolved in variants:
            for allow_local in (False, True):
                last = ipaddress.ip_address(resolved[-1])
                mapped = getattr(last, "ipv4_mapped", None)
                if allow_local and (mapped or last).is_loopback:
                    continue  # development accepts a loopback receiver
                with pytest.raises(UnsafeUrl) as refused:
                    resolve_allowed(
                        "https://hooks.example/x", allow_local=allow_local,
                        resolver=resolver_of(*resolved),
                    )  # fmt: skip
                assert refused.value.code == "forbidden_address"


def test_public_addresses_are_allowed_and_returned_for_pinning():
    got = resolve_allowed(
        "https://hooks.example:8443/x?a=1", allow_local=False,
        resolver=resolver_of("93.184.216.34", "2606:2800:220:1::1"),
    )  # fmt: skip
    assert got == ["93.184.216.34", "2606:2800:220:1::1"]


@pytest.mark.parametrize(
    ("url", "allow_local", "code"),
    [
        ("http://hooks.example/x", False, "insecure_scheme"),
        ("http://127.0.0.1:8000/x", False, "insecure_scheme"),
        ("https://user@hooks.example/x", False, "invalid_url"),
        ("https://hooks.example/x#f", False, "invalid_url"),
        ("gopher://hooks.example/x", True, "invalid_url"),
        ("https://hooks.example:0/x", True, "invalid_url"),
        ("https://hooks.example:22/x", False, "forbidden_port"),
        ("https://hooks.example:6379/x", False, "forbidden_port"),
        ("https://hooks.example:80/x", False, "forbidden_port"),
        ("https://hooks.example:65535/x", False, "forbidden_port"),
    ],
)
def test_scheme_and_form_rules(url, allow_local, code):
    with pytest.raises(UnsafeUrl) as refused:
        resolve_allowed(url, allow_local=allow_local, resolver=resolver_of("93.184.216.34"))
    assert refused.value.code == code
    assert url not in refused.value.message


def test_development_allows_http_to_loopback_only():
    assert resolve_allowed(
        "http://127.0.0.1:8000/x", allow_local=True, resolver=resolver_of("127.0.0.1")
    ) == ["127.0.0.1"]
    with pytest.raises(UnsafeUrl) as refused:  # http to a public host: still https only
        resolve_allowed(
            "http://hooks.example/x", allow_local=True, resolver=resolver_of("93.184.216.34")
        )
    assert refused.value.code == "insecure_scheme"


def test_a_host_that_does_not_resolve_is_refused():
    def fail(*args, **kwargs):
        raise socket.gaierror("no such host")

    with pytest.raises(UnsafeUrl) as refused:
        resolve_allowed("https://nowhere.invalid/x", allow_local=False, resolver=fail)
    assert refused.value.code == "unresolvable"


def test_our_signatures_are_standardwebhooks_signatures():
    """For random secrets, ids, timestamps and bodies (unicode, long, empty strings): our
    signature equals the package's, and its verifier accepts our headers."""
    rng = random.Random(13)
    for _ in range(50):
        secret = new_secret()
        msg_id = "evt_" + rng.randbytes(12).hex()
        timestamp = int(datetime.now(UTC).timestamp()) - rng.randrange(0, 200)
        body = json.dumps({"n": rng.random(), "s": rng.choice(["", "é😀", "x" * 5000])}).encode()
        theirs = standardwebhooks.Webhook(secret).sign(
            msg_id, datetime.fromtimestamp(timestamp, UTC), body.decode()
        )
        assert signature(secret, msg_id=msg_id, timestamp=timestamp, body=body) == theirs
        headers = webhook_headers(
            [new_secret(), secret], msg_id=msg_id, timestamp=timestamp, body=body
        )
        assert standardwebhooks.Webhook(secret).verify(body, headers) == json.loads(body)


def test_a_new_secret_is_whsec_and_32_random_bytes():
    secrets = {new_secret() for _ in range(100)}
    assert len(secrets) == 100
    assert all(len(base64.b64decode(s.removeprefix("whsec_"))) == 32 for s in secrets)


def test_the_retry_schedule_is_full_jitter_first_within_30_seconds_spanning_about_3_days():
    assert [retry_wait(n, schedule=RETRY_SCHEDULE, random=lambda: 0.999999) for n in (1, 2)] == [
        pytest.approx(30, rel=1e-5), pytest.approx(300, rel=1e-5),
    ]  # fmt: skip
    assert retry_wait(1, schedule=RETRY_SCHEDULE, random=lambda: 0.0) == 0.0
    assert retry_wait(40, schedule=RETRY_SCHEDULE, random=lambda: 0.5) == 18000
    # The bounds of the first attempts of a 3-day window: 30 s, 5 min, 30 min, 2 h, 5 h, 10 h...
    bounds, total = [], 0.0
    while total < 3 * 24 * 3600:
        bound = RETRY_SCHEDULE[min(len(bounds), len(RETRY_SCHEDULE) - 1)]
        bounds.append(bound)
        total += bound
    assert bounds[:6] == [30, 300, 1800, 7200, 18000, 36000] and len(bounds) == 12


def test_a_translated_ipv6_address_is_judged_by_the_ipv4_address_it_reaches():
    """NAT64 (64:ff9b::/96) and 6to4 addresses of a public IPv4 are allowed, of a private one
    refused, whatever the IPv6 prefix's own classification."""
    from webhooks.url_safety import _allowed

    assert _allowed(ipaddress.ip_address("64:ff9b::808:808"), allow_local=False)
    assert not _allowed(ipaddress.ip_address("64:ff9b::7f00:1"), allow_local=False)
    assert not _allowed(ipaddress.ip_address("2002:a00:1::"), allow_local=False)
    assert not _allowed(ipaddress.ip_address("64:ff9b::7f00:1"), allow_local=True)


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("2600:1f18::5efe:808:808", True),  # ISATAP id of a public IPv4
        ("2600:1f18::5efe:a00:1", False),  # ... of 10.0.0.1
        ("2600:1f18::200:5efe:7f00:1", False),  # ... of 127.0.0.1, the "u" bit set
        ("2600:1f18::200:5efe:a9fe:a9fe", False),  # ... of the cloud metadata address
        ("::ffff:0:808:808", False),  # IPv4-translated: a translator's form, never a host's
        ("::808:808", False),  # IPv4-compatible, deprecated (RFC 4291 section 2.5.5.1)
    ],
)
def test_an_ipv6_address_that_carries_an_ipv4_one(address, allowed):
    from webhooks.url_safety import _allowed

    assert _allowed(ipaddress.ip_address(address), allow_local=False) is allowed


def test_the_allowed_ports():
    for port in ("", ":443", ":8443"):
        assert resolve_allowed(
            f"https://hooks.example{port}/x", allow_local=False,
            resolver=resolver_of("93.184.216.34"),
        ) == ["93.184.216.34"]  # fmt: skip
    assert resolve_allowed(  # a developer's receiver listens where it likes
        "http://127.0.0.1:8765/x", allow_local=True, resolver=resolver_of("127.0.0.1")
    ) == ["127.0.0.1"]
