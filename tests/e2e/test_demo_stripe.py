"""make demo's Stripe step (scripts/demo_stripe.py) against the stack make run starts for it:
gunicorn serving the API with make run's own ACQUIRERS value (the Makefile's, localstripe's
port swapped for a free one) and localstripe as a separate process on 127.0.0.1. The step's
own checks (one PaymentIntent, succeeded, ¥500 authorized, ¥300 captured, one refund of ¥100)
are asserted, and the payment's amounts in the database."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from payments.models import Payment
from scripts.demo_stripe import stripe_payment
from tests.support.localstripe import LocalStripe
from tests.support.processes import (
    GUNICORN,
    ROOT,
    STARTUP_SECONDS,
    answers_healthz,
    free_port,
    service_env,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def make_run_value(name: str) -> str:
    """make run's default of ``name``, the make variables in it (the ports) expanded."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^run(?: key)?: export {name} \?= (.+)$", text, re.MULTILINE)
    assert match, name
    return re.sub(r"\$\((\w+)\)", lambda m: make_run_value(m.group(1)), match.group(1))


@pytest.fixture
def stack(transactional_db, tmp_path) -> Iterator[tuple[str, str, str]]:
    with LocalStripe.start() as localstripe:
        port = free_port()
        acquirers = make_run_value("ACQUIRERS").replace(
            "127.0.0.1:8092", f"127.0.0.1:{localstripe.port}"
        )
        env = service_env(
            WEB_BIND=f"127.0.0.1:{port}",
            WEB_CONCURRENCY="1",
            ACQUIRERS=acquirers,
            LOCALSTRIPE_SECRET_KEY=make_run_value("LOCALSTRIPE_SECRET_KEY"),
        )
        log = (tmp_path / "gunicorn.log").open("w")
        web = subprocess.Popen(GUNICORN, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until(lambda: answers_healthz(url), timeout=STARTUP_SECONDS, what="gunicorn")
            key = subprocess.run(
                [sys.executable, "manage.py", "create_merchant", "demo-stripe"],
                cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=60,
            ).stdout.strip().splitlines()[-1]  # fmt: skip
            yield url, key, localstripe.url
        finally:
            web.terminate()
            web.wait(10)
            log.close()


def test_make_demo_takes_a_payment_through_the_stripe_connector(stack):
    url, api_key, localstripe = stack
    _title, ok, expected = stripe_payment(url, api_key, localstripe)
    assert ok, expected
    payment = Payment.objects.get(acquirer="stripe")
    assert (payment.currency, payment.amount, payment.amount_captured, payment.amount_refunded) == (
        "JPY",
        500,
        300,
        100,
    )
    assert payment.acquirer_reference.startswith("pi_")
