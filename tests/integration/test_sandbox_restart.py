"""The sandbox acquirer keeps its records across a restart with ``--data-dir``, as a real
acquirer does: a same-key re-send after it was killed replays instead of charging again."""

from __future__ import annotations

import httpx

from sandbox_acquirer.journal import JOURNAL_NAME
from tests.support.sandbox import SandboxProcess

CHARGE = {"amount": 1999, "currency": "EUR", "payment_method": "tok_visa", "reference": "pay_1"}


def _charge(sandbox: SandboxProcess, key: str, body: dict | None = None) -> httpx.Response:
    return httpx.post(
        f"{sandbox.url}/charges",
        json=body or CHARGE,
        headers={**sandbox.auth_headers(), "Idempotency-Key": key},
        trust_env=False,
    )


def test_a_killed_sandbox_replays_a_same_key_resend_after_its_restart(tmp_path):
    data_dir = ("--data-dir", str(tmp_path / "sandbox"))
    with SandboxProcess.start(extra_args=data_dir) as first:
        created = _charge(first, "authorize-pay_1")
        assert created.status_code == 201
        refund = httpx.post(
            f"{first.url}/refunds",
            json={"charge": created.json()["id"], "reference": "re_1", "amount": 500},
            headers={**first.auth_headers(), "Idempotency-Key": "refund-re_1"},
            trust_env=False,
        )
        assert refund.status_code == 201, refund.text
        first.process.kill()  # no clean shutdown: the journal must already hold both
        first.process.wait(10)

    with SandboxProcess.start(extra_args=data_dir) as second:
        replay = _charge(second, "authorize-pay_1")
        assert replay.status_code == 201
        assert replay.content == created.content  # the stored answer, byte for byte
        assert replay.headers.get("Idempotent-Replayed") == "true"
        assert _charge(second, "authorize-pay_1", {**CHARGE, "amount": 1}).status_code == 422
        assert [c["id"] for c in second.charges("pay_1")] == [created.json()["id"]]
        assert second.refunds("re_1")[0]["amount"] == 500
        assert second.stats()["charges_total"] == 1

        second.reset()  # the control API's reset forgets the records on disk too
        assert (tmp_path / "sandbox" / JOURNAL_NAME).read_text() == ""

    with SandboxProcess.start(extra_args=data_dir) as third:
        assert third.charges("pay_1") == []
