"""The limits' and the admin's defaults are the same in the settings, .env.example and
docs/configuration.md, and the in-flight cap stays below the web tier's threads."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VARIABLES = [
    "MERCHANT_RATE_LIMIT_REQUESTS",
    "MERCHANT_RATE_LIMIT_WINDOW_SECONDS",
    "MERCHANT_CONCURRENT_PAYMENTS",
    "MERCHANT_PAYMENT_LEASE_SECONDS",
    "MERCHANT_CONCURRENCY_RETRY_AFTER_SECONDS",
    "API_KEY_ROTATION_OVERLAP_SECONDS",
    "ADMIN_SESSION_SECONDS",
    "ADMIN_OTP_REQUIRED",
    "ADMIN_LOGIN_FAILURE_LIMIT",
    "ADMIN_LOGIN_LOCKOUT_MINUTES",
]


def settings_defaults() -> dict[str, str]:
    """``env.<cast>("X", default=<expr>)`` in config/settings/base.py: X -> the default as the
    .env.example writes it (``24 * 3600`` -> ``86400``, ``False`` -> ``false``)."""
    defaults = {}
    for node in ast.walk(ast.parse((ROOT / "config/settings/base.py").read_text())):
        if (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in VARIABLES
        ):
            for keyword in node.keywords:
                if keyword.arg == "default":
                    value = eval(ast.unparse(keyword.value), {"__builtins__": {}})
                    defaults[node.args[0].value] = str(value).lower()
    return defaults


def env_example_defaults() -> dict[str, str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    return dict(m.groups() for line in lines if (m := re.match(r"^# ([A-Z_0-9]+)=(.*)$", line)))


def docs_defaults() -> dict[str, str]:
    rows = (ROOT / "docs/configuration.md").read_text().splitlines()
    return dict(
        m.groups() for row in rows if (m := re.match(r"^\| `([A-Z_0-9]+)` \| `([^`]*)`", row))
    )


@pytest.mark.parametrize("name", VARIABLES)
def test_each_default_is_documented_as_the_settings_have_it(name: str) -> None:
    """settings == .env.example == the docs' table, for each of the limits' variables."""
    expected = settings_defaults()[name]
    assert env_example_defaults()[name] == expected
    assert docs_defaults()[name] == expected


def test_the_in_flight_cap_is_below_the_threads_of_a_worker() -> None:
    """MERCHANT_CONCURRENT_PAYMENTS < WEB_THREADS (config/gunicorn.conf.py): even with all of a
    merchant's payments on one worker, that worker has a thread for the others."""
    gunicorn = (ROOT / "config/gunicorn.conf.py").read_text()
    threads = int(re.search(r'"WEB_THREADS", "(\d+)"', gunicorn).group(1))
    assert 0 < int(settings_defaults()["MERCHANT_CONCURRENT_PAYMENTS"]) < threads
