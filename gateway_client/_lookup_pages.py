"""A look-up read page after page (Stripe's listing of PaymentIntents, newest first).

`lookup_pages` asks the dialect's first page, and while a page holds none of ours and says
more follow (`Dialect.lookup_cursor`), the next one (`Dialect.lookup_page_request`), each
through `read` (one call of the client: its own attempts, breaker and budget). The last page
allowed is decoded whatever it says, so "none" is only ever said of a complete listing: an
incomplete one raises as a garbled answer does (`Dialect.decode_lookup`).
"""

from __future__ import annotations

from collections.abc import Callable

from ._call import Answer
from .dialect import Dialect, WireRequest
from .types import ActionRequired, Authorization

__all__ = ["LOOKUP_PAGES", "lookup_pages"]

#: Pages a paged look-up reads at most (Stripe: 100 PaymentIntents each): a payment older
#: than the account's newest 2,000 is "not known", which reconciliation never reads as absent.
LOOKUP_PAGES = 20

Found = list[Authorization | ActionRequired]
Decode = Callable[[Answer], Found]


def lookup_pages(
    dialect: Dialect,
    payment_reference: str,
    read: Callable[[WireRequest, Decode], Found],
) -> Found:
    """The authorizations filed under `payment_reference`, read as the module docstring says.
    `read(request, decode)` sends one page's request and returns what `decode` made of it."""
    request = dialect.lookup_request(payment_reference)
    for page in range(1, LOOKUP_PAGES + 1):
        following: list[str | None] = [None]

        def decode(
            answer: Answer,
            following: list[str | None] = following,
            last: bool = page == LOOKUP_PAGES,
        ) -> Found:
            if not last:
                following[0] = dialect.lookup_cursor(answer, payment_reference)
                if following[0] is not None:
                    return []
            return dialect.decode_lookup(answer, payment_reference)

        found = read(request, decode)
        after = following[0]
        if after is None:
            return found
        request = dialect.lookup_page_request(payment_reference, after)
    raise AssertionError("unreachable: the last page is decoded")  # pragma: no cover
