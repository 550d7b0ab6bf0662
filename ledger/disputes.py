"""The ledger audit's count of disputes (docs/operations.md, "Disputes").

Disputes exist only at the acquirer and reach us only as notifications
(payments/notifications/), so there is no acquirer record to match them against here; the
audit counts them per status and sums their amounts per currency (ISO 4217 minor units), and
checks that each audited payment's ``amount_disputed`` is the sum of its disputes not won
(open or lost), the rule ``payments.core.dispute_states`` keeps.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db.models import Q

from payments.models import Dispute, DisputeStatus, Payment

__all__ = ["DisputeCounts", "dispute_counts"]

_CHUNK = 5000


@dataclass
class DisputeCounts:
    """``by_status``: disputes per status; ``amounts``: ``{status: {currency: minor units}}``;
    ``inconsistent``: ids of payments whose ``amount_disputed`` is not the sum of their open and
    lost disputes (none in a healthy database)."""

    by_status: dict[str, int] = field(default_factory=dict)
    amounts: dict[str, dict[str, int]] = field(default_factory=dict)
    inconsistent: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        """How many disputes were counted."""
        return sum(self.by_status.values())

    def add(self, other: DisputeCounts) -> None:
        """Add ``other``'s counts to these (merging per-acquirer reports)."""
        for status, count in other.by_status.items():
            self.by_status[status] = self.by_status.get(status, 0) + count
        for status, amounts in other.amounts.items():
            mine = self.amounts.setdefault(status, {})
            for currency, amount in amounts.items():
                mine[currency] = mine.get(currency, 0) + amount
        self.inconsistent.extend(other.inconsistent)

    def summary(self) -> str:
        """One line: counts and amounts per status."""
        if not self.total:
            return "disputes: 0"
        parts = []
        for status in DisputeStatus.values:
            if status in self.by_status:
                money = ", ".join(f"{a} {c}" for c, a in sorted(self.amounts[status].items()))
                parts.append(f"{status} {self.by_status[status]} ({money})")
        line = f"disputes: {self.total}: " + "; ".join(parts)
        if self.inconsistent:
            line += f"; amount_disputed inconsistent on {len(self.inconsistent)} payments"
        return line

    def as_json(self) -> dict[str, object]:
        """JSON-ready counts."""
        return {
            "by_status": dict(sorted(self.by_status.items())),
            "amounts": {s: dict(sorted(a.items())) for s, a in sorted(self.amounts.items())},
            "inconsistent": sorted(self.inconsistent),
        }


def dispute_counts(payment_ids: Iterable[str]) -> DisputeCounts:
    """Count the disputes of the payments ``payment_ids`` (see the module docstring)."""
    ids = list(payment_ids)
    counts = DisputeCounts()
    held: dict[str, int] = defaultdict(int)
    with_disputes: set[str] = set()
    for start in range(0, len(ids), _CHUNK):
        rows = Dispute.objects.filter(payment_id__in=ids[start : start + _CHUNK]).values_list(
            "payment_id", "status", "amount", "currency"
        )
        for payment_id, status, amount, currency in rows:
            with_disputes.add(payment_id)
            counts.by_status[status] = counts.by_status.get(status, 0) + 1
            per_currency = counts.amounts.setdefault(status, {})
            per_currency[currency] = per_currency.get(currency, 0) + amount
            if status != DisputeStatus.WON:
                held[payment_id] += amount
    for start in range(0, len(ids), _CHUNK):
        stored = Payment.objects.filter(pk__in=ids[start : start + _CHUNK]).filter(
            Q(amount_disputed__gt=0) | Q(pk__in=with_disputes)
        )
        for payment_id, amount_disputed in stored.values_list("pk", "amount_disputed"):
            if amount_disputed != held.get(payment_id, 0):
                counts.inconsistent.append(payment_id)
    return counts
