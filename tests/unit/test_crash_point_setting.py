"""``PAYMENTS_CRASH_POINT`` (payments/core/crashpoints.py) names one crash point or several,
comma-separated; a name that is not a crash point fails the request that reaches a point
instead of never firing. That the process dies at an armed point is tests/e2e/test_crash_points.py's
and the crash campaign's."""

from __future__ import annotations

import pytest

from payments.core.crashpoints import (
    AUTHORIZATION_CRASH_POINTS,
    CRASH_POINTS,
    OPERATION_CRASH_POINTS,
    armed_crash_points,
    crash_point,
)


def test_empty_arms_nothing_and_one_or_several_names_arm_those():
    assert armed_crash_points("") == frozenset()
    assert armed_crash_points("after_phase1_commit") == {"after_phase1_commit"}
    several = " after_phase1_commit, capture_after_phase1_commit ,void_after_phase1_commit,"
    assert armed_crash_points(several) == {
        "after_phase1_commit",
        "capture_after_phase1_commit",
        "void_after_phase1_commit",
    }


@pytest.mark.parametrize(
    "setting", ["after_acquirer_call", "after_phase1_commit,capture", "AFTER_PHASE1_COMMIT"]
)
def test_a_name_that_is_no_crash_point_is_refused_by_name(setting, settings):
    with pytest.raises(ValueError, match="unknown crash points in PAYMENTS_CRASH_POINT"):
        armed_crash_points(setting)
    settings.PAYMENTS_CRASH_POINT = setting
    with pytest.raises(ValueError, match="unknown crash points"):
        crash_point("after_phase1_commit")


def test_a_point_the_setting_does_not_name_passes(settings):
    """Every point but the armed ones returns (this process is alive to check it)."""
    settings.PAYMENTS_CRASH_POINT = ",".join(
        AUTHORIZATION_CRASH_POINTS[:1] + OPERATION_CRASH_POINTS[:1]
    )
    armed = armed_crash_points(settings.PAYMENTS_CRASH_POINT)
    for name in CRASH_POINTS:
        if name not in armed:
            crash_point(name)
    with pytest.raises(ValueError, match="unknown crash point"):
        crash_point("after_acquirer_call")
