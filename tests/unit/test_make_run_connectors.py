"""make run's acquirers (the Makefile's ACQUIRERS default) parse, with the stripe connector's
secret from LOCALSTRIPE_SECRET_KEY as make run exports it, and route as documented: JPY to
stripe (localstripe, Procfile.connectors), everything else to the sandboxes."""

from __future__ import annotations

import re
from pathlib import Path

from acquirers.specs import parse_acquirers
from payments.core.money import CURRENCY_EXPONENTS

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = (ROOT / "Makefile").read_text()


def _exported(name: str) -> str:
    """make run's default of ``name``, with the make variables it names (the ports) given
    their own defaults, as make expands them."""
    match = re.search(rf"^run(?: key)?: export {name} \?= (.+)$", MAKEFILE, re.MULTILINE)
    assert match, name
    return re.sub(r"\$\((\w+)\)", lambda m: _exported(m.group(1)), match.group(1))


def test_make_runs_three_acquirers_and_jpy_goes_to_stripe():
    environ = {"LOCALSTRIPE_SECRET_KEY": _exported("LOCALSTRIPE_SECRET_KEY")}
    specs = parse_acquirers(
        _exported("ACQUIRERS"), known_currencies=frozenset(CURRENCY_EXPONENTS), environ=environ
    )
    assert specs is not None
    assert [(s.name, s.type) for s in specs] == [
        ("stripe", "stripe"),
        ("alpha", "sandbox"),
        ("beta", "sandbox"),
    ]
    stripe = specs[0]
    assert stripe.api_key == environ["LOCALSTRIPE_SECRET_KEY"]
    assert dict(stripe.policy) == {"ACQUIRER_HONOURS_IDEMPOTENCY_KEYS": False}
    assert [s.name for s in specs if s.supports("JPY", "manual")] == ["stripe", "alpha", "beta"]
    assert [s.name for s in specs if s.supports("EUR", "automatic")] == ["alpha", "beta"]


def test_localstripe_runs_on_the_port_make_run_configures_bound_to_loopback():
    (line,) = (ROOT / "Procfile.connectors").read_text().splitlines()
    assert line.startswith("localstripe: python -m gunicorn -c devtools/localstripe.conf.py ")
    assert "-b 127.0.0.1:${LOCALSTRIPE_PORT:-8092} localstripe.server:app" in line
    assert _exported("LOCALSTRIPE_PORT") == "8092"
    assert '"base_url": "http://127.0.0.1:8092"' in _exported("ACQUIRERS")
