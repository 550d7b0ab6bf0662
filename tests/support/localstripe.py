"""localstripe (PyPI, GPL-3.0: a stateful fake of Stripe's API) as a separate process on
127.0.0.1 for the Stripe connector's tests: served by gunicorn with devtools/localstripe.conf.py,
never imported here. Its own listings are the tests' oracle (``payment_intents()``,
``refunds()``); note that localstripe ignores ``Idempotency-Key`` (every POST creates).

    with LocalStripe.start() as stripe:
        client = AcquirerClient(AcquirerConfig(base_url=stripe.url, api_key=stripe.api_key, ...),
                                dialect=StripeDialect())
        ...
        stripe.payment_intents()  # every PaymentIntent, oldest first
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from tests.support.processes import free_port, wait_until

__all__ = ["LocalStripe"]

_ROOT = Path(__file__).resolve().parents[2]
#: A secret key localstripe accepts (it checks only the `sk_` prefix).
API_KEY = "sk_test_localstripe_connectors"


class LocalStripe:
    """A running localstripe; ``url`` (no trailing slash), ``api_key``, ``stop()``."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.process = process
        self.url = url
        self.api_key = API_KEY
        self.port = int(url.rsplit(":", 1)[1])
        self._log = log
        self._http = httpx.Client(base_url=url, auth=(API_KEY, ""), timeout=10, trust_env=False)

    @classmethod
    def start(cls, port: int | None = None, startup_timeout: float = 20.0) -> Self:
        """Start localstripe on 127.0.0.1 (``port`` None: a free one) and wait until it
        answers. Raises RuntimeError with its log if it does not."""
        port = port or free_port()
        log = Path(tempfile.mkstemp(prefix="localstripe-", suffix=".log")[1])
        command = [
            sys.executable, "-m", "gunicorn", "-c", "devtools/localstripe.conf.py",
            "-b", f"127.0.0.1:{port}", "localstripe.server:app",
        ]  # fmt: skip
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, cwd=_ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        started = cls(process, f"http://127.0.0.1:{port}", log)
        try:
            wait_until(started._answers, timeout=startup_timeout, what="localstripe")
        except AssertionError:
            text = log.read_text()
            started.stop()
            raise RuntimeError(f"localstripe did not start:\n{text}") from None
        return started

    def _answers(self) -> bool:
        try:
            return self._http.get("/v1/balance").status_code == 200
        except httpx.HTTPError:
            return False

    def flush(self) -> None:
        """Forget every object (localstripe's ``DELETE /_config/data``)."""
        self._http.delete("/_config/data").raise_for_status()

    def payment_intents(self) -> list[dict[str, Any]]:
        """Every PaymentIntent localstripe holds, oldest first (all pages)."""
        return self._all("/v1/payment_intents", {})

    def refunds(self, payment_intent: str) -> list[dict[str, Any]]:
        """Every refund of ``payment_intent`` localstripe holds (a partial capture's release
        included: localstripe records it as a refund without metadata)."""
        return self._all("/v1/refunds", {"payment_intent": payment_intent})

    def _all(self, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        after: dict[str, str] = {}
        while True:
            page = self._http.get(path, params={**params, "limit": "100", **after}).json()
            items += page["data"]
            if not page["has_more"]:
                return items
            after = {"starting_after": page["data"][-1]["id"]}

    def stop(self) -> None:
        """Terminate the process (idempotent) and remove its log."""
        self._http.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
