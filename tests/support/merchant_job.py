"""A merchant's payment job as a process of its own, for the restart test:

    python -m tests.support.merchant_job JOB_FILE API_URL API_KEY

The job file is the job's record (JSON: amount, currency, payment_method, reference, and the
idempotency_key once there is one). The first run has no key: the client generates one and
the job stores it in its record (written and fsynced) before the first request is sent, as a
merchant's Celery task stores it in its job row. A run after a crash finds the key and sends
the same one. Prints the result as one JSON line: id, status, replayed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from merchant_client import MerchantClient, Pending


def main(job_file: str, url: str, api_key: str) -> None:
    path = Path(job_file)
    job = json.loads(path.read_text())

    def persist_key(key: str) -> None:
        job["idempotency_key"] = key
        temporary = path.with_suffix(".tmp")
        with open(temporary, "w") as handle:
            json.dump(job, handle)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(path)

    with MerchantClient(url, api_key) as client:
        result = client.create_payment(
            job["amount"],
            job["currency"],
            job["payment_method"],
            reference=job["reference"],
            idempotency_key=job.get("idempotency_key"),
            persist_key=persist_key,
        )
    payment = result.object if isinstance(result, Pending) else result
    print(json.dumps({"id": payment.id, "status": payment.status, "replayed": result.replayed}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
