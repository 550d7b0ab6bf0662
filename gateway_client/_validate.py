"""
The check of a call's request id (`check_request_id`); the number checks of the configuration
values are resilience's (`resilience.validate`).
"""

from __future__ import annotations

__all__ = ["MAX_REQUEST_ID_LENGTH", "check_request_id"]

#: The longest request id a call may carry.
MAX_REQUEST_ID_LENGTH = 200


def check_request_id(value: object) -> None:
    """
    Raise ValueError unless `value` is None or 1-200 visible ASCII characters (`%x21-7E`: an
    HTTP field value without spaces or controls, so it cannot split or forge a header).
    """
    if value is None:
        return
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_REQUEST_ID_LENGTH
        or not all("!" <= char <= "~" for char in value)
    ):
        raise ValueError(f"request_id must be 1-{MAX_REQUEST_ID_LENGTH} visible ASCII characters")
