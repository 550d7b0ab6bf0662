"""The Adyen-compatible fake (tests/support/adyen_fake.py) as a separate process on 127.0.0.1,
and the validation of everything it received and answered against Adyen's published OpenAPI
description of Checkout v71 (tests/support/specs/adyen/, MIT, trimmed to the five paths the
connector uses, with every schema they reference), by openapi-core, offline.

    with AdyenFake.start() as adyen:
        client = AcquirerClient(AcquirerConfig(base_url=adyen.base_url, api_key=adyen.api_key),
                                dialect=AdyenDialect(merchant_account=..., return_url=...))
        ...
        adyen.payments()          # the oracle: every payment with its modifications
        adyen.validate_journal()  # AssertionError naming the first exchange off the spec
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
from openapi_core import Config, OpenAPI
from openapi_core.testing import MockRequest, MockResponse

from tests.support.processes import free_port, wait_until

__all__ = ["HMAC_KEY", "AdyenFake", "checkout_spec"]

_ROOT = Path(__file__).resolve().parents[2]
_SPEC = Path(__file__).parent / "specs" / "adyen" / "CheckoutService-v71.json"
API_KEY = "AQEfakeAdyenApiKeyForTests"
#: The HMAC key the fake signs its notifications with (hex, as the Customer Area shows it).
HMAC_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
_HOST = "https://checkout-test.adyen.com"


@cache
def checkout_spec() -> OpenAPI:
    """Adyen's Checkout v71 description, loaded once (its own validity is Adyen's: the
    spec validator's 6 s are not spent on every run)."""
    return OpenAPI.from_dict(json.loads(_SPEC.read_text()), config=Config(spec_validator_cls=None))


def validate_exchange(exchange: dict[str, Any]) -> None:
    """One journal entry (request and answer) against the description; raises openapi-core's
    validation error."""
    headers = {"Content-Type": "application/json", **exchange["headers"]}
    if exchange["api_key"]:
        headers["X-API-Key"] = "present"
    request = MockRequest(
        _HOST, exchange["method"], exchange["path"], headers=headers,
        data=exchange["body"], content_type="application/json",
    )  # fmt: skip
    response = MockResponse(
        json.dumps(exchange["answer"]).encode(),
        status_code=exchange["status"],
        content_type="application/json",
    )
    spec = checkout_spec()
    spec.validate_request(request)
    spec.validate_response(request, response)


class AdyenFake:
    """A running fake: ``url`` (no trailing slash), ``base_url`` (``url`` + ``/v71``, the
    acquirer's), ``api_key``, ``hmac_key``, ``port``, ``stop()``."""

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.base_url = self.url + "/v71"
        self.api_key = API_KEY
        self.hmac_key = HMAC_KEY
        self._http = httpx.Client(base_url=self.url, timeout=10, trust_env=False)

    @classmethod
    def start(cls, startup_timeout: float = 20.0) -> Self:
        """Start the fake on a free port of 127.0.0.1 and wait until it answers."""
        port = free_port()
        command = [
            sys.executable, "-m", "tests.support.adyen_fake", "--port", str(port),
            "--api-key", API_KEY, "--hmac-key", HMAC_KEY,
        ]  # fmt: skip
        process = subprocess.Popen(command, cwd=_ROOT, stdin=subprocess.DEVNULL)
        started = cls(process, port)
        try:
            wait_until(started._answers, timeout=startup_timeout, what="the Adyen fake")
        except AssertionError:
            started.stop()
            raise
        return started

    def _answers(self) -> bool:
        try:
            return self._http.get("/_fake/health").status_code == 200
        except httpx.HTTPError:
            return False

    def reset(self) -> None:
        """Forget every payment, key, fault, journal entry and notification."""
        self._http.post("/_fake/reset").raise_for_status()

    def fault(self, *faults: dict[str, Any]) -> None:
        """Queue faults for the next writes: ``{"status": 500, "applied": True}``."""
        self._http.post("/_fake/faults", json={"faults": list(faults)}).raise_for_status()

    def payments(self) -> list[dict[str, Any]]:
        """Every payment the fake holds, with its modifications, oldest first."""
        return self._http.get("/_fake/payments").json()

    def notifications(self) -> bytes:
        """The notification body of every event so far (Adyen's JSON, HMAC-signed)."""
        return self._http.get("/_fake/notifications").content

    def journal(self) -> list[dict[str, Any]]:
        """Every request to /v71 with the answer given, in order."""
        return self._http.get("/_fake/journal").json()

    def validate_journal(self) -> int:
        """Validate every exchange so far against Adyen's description; returns how many.
        AssertionError naming the first one off the description."""
        exchanges = self.journal()
        for index, exchange in enumerate(exchanges):
            try:
                validate_exchange(exchange)
            except Exception as exc:  # openapi-core's errors share no public base
                raise AssertionError(
                    f"exchange {index} ({exchange['path']}, {exchange['status']}) is not "
                    f"Checkout v71's: {exc}"
                ) from exc
        return len(exchanges)

    def stop(self) -> None:
        """Terminate the process (idempotent)."""
        self._http.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
