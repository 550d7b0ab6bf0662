"""The sandbox's records on disk: an append-only JSON lines journal in ``--data-dir``.

A real acquirer remembers its charges and idempotency keys across its own restarts; with
``--data-dir DIR`` the sandbox does too. Every charge, capture, void and refund the store
records is appended to ``DIR/journal.jsonl`` as one JSON object per line, written and flushed
under the store's lock before the answer is sent; on start the store replays the file, so a
same-key re-send after a restart replays its stored answer instead of charging again, and
``GET /charges`` still finds the charge. ``POST /_sandbox/reset`` empties the file.

The file survives the process being killed at any line (each line is flushed to the operating
system); a line torn by a kill in the middle of a write is the last one, and is skipped when
read. Not kept: the counters of ``/_sandbox/stats`` other than what replaying the records
recounts, keys whose request was still running (a restart answers them as new, as a request
that died with the process), and a token's per-operation faults of charges made before the
restart (their captures, voids and refunds then behave as ``tok_visa``'s).

Standard library only, like the rest of the sandbox.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from sandbox_acquirer.models import Charge, Refund, StoredResponse

__all__ = [
    "JOURNAL_NAME",
    "Journal",
    "charge_from_json",
    "charge_to_json",
    "refund_from_json",
    "refund_to_json",
    "response_from_json",
    "response_to_json",
]

#: The journal's file name inside the data directory.
JOURNAL_NAME = "journal.jsonl"


class Journal:
    """``DIR/journal.jsonl``, created with ``DIR`` if absent. ``append`` writes one entry (a
    JSON-ready dict) and flushes; ``entries`` reads them back in order; ``clear`` empties it.
    Thread-safe (the store calls it under its own lock anyway)."""

    def __init__(self, data_dir: Path | str) -> None:
        self.path = Path(data_dir) / JOURNAL_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._drop_torn_tail()
        self._file = self.path.open("a", encoding="utf-8")

    def _drop_torn_tail(self) -> None:
        """Cut a last line without its newline (a write torn by a kill), so the next entry
        starts on a line of its own."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as target:
                target.truncate(data.rfind(b"\n") + 1)

    def entries(self) -> Iterator[dict[str, Any]]:
        """Every complete entry, oldest first; an incomplete last line (a torn write) is
        skipped."""
        with self.path.open(encoding="utf-8") as source:
            for line in source:
                if not line.endswith("\n"):
                    return  # torn by a kill mid-write: it was never acknowledged
                yield json.loads(line)

    def append(self, entry: dict[str, Any]) -> None:
        """Write ``entry`` as one line and flush it to the operating system."""
        line = json.dumps(entry, separators=(",", ":"), sort_keys=True) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def clear(self) -> None:
        """Forget every entry (``POST /_sandbox/reset``)."""
        with self._lock:
            self._file.close()
            self._file = self.path.open("w", encoding="utf-8")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def _dates_to_json(value: Any) -> dict[str, Any]:
    return {
        name: item.isoformat() if isinstance(item, datetime) else item
        for name, item in dataclasses.asdict(value).items()
    }


def _dates_from_json(data: dict[str, Any]) -> dict[str, Any]:
    return {
        name: datetime.fromisoformat(item) if name.endswith("_at") and item else item
        for name, item in data.items()
    }


def charge_to_json(charge: Charge) -> dict[str, Any]:
    """A ``Charge`` as a JSON object (datetimes in ISO 8601)."""
    return _dates_to_json(charge)


def charge_from_json(data: dict[str, Any]) -> Charge:
    """The inverse of :func:`charge_to_json`."""
    return Charge(**_dates_from_json(data))


def refund_to_json(refund: Refund) -> dict[str, Any]:
    """A ``Refund`` as a JSON object (datetimes in ISO 8601)."""
    return _dates_to_json(refund)


def refund_from_json(data: dict[str, Any]) -> Refund:
    """The inverse of :func:`refund_to_json`."""
    return Refund(**_dates_from_json(data))


def response_to_json(response: StoredResponse) -> dict[str, Any]:
    """A ``StoredResponse`` as a JSON object; the body in base64, so replays stay
    byte-identical."""
    return {
        "status": response.status,
        "body": base64.b64encode(response.body).decode("ascii"),
        "content_type": response.content_type,
    }


def response_from_json(data: dict[str, Any]) -> StoredResponse:
    """The inverse of :func:`response_to_json`."""
    return StoredResponse(
        status=data["status"],
        body=base64.b64decode(data["body"]),
        content_type=data["content_type"],
    )
