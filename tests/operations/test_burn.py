"""Burn rates against the figures the SRE workbook publishes ("Alerting on SLOs", table 5-8,
recommended parameters for a 30-day SLO, https://sre.google/workbook/alerting-on-slos/):

    severity  long window  short window  burn rate  budget consumed
    page      1 hour       5 minutes     14.4       2 %
    page      6 hours      30 minutes    6          5 %
    ticket    3 days       6 hours       1          10 %

Our conditions are derived from the budget shares, not copied, so this checks the arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operations import burn

HOUR, MINUTE, DAY = 3600.0, 60.0, 86400.0
WORKBOOK_TABLE_5_8 = [
    ("page", 1 * HOUR, 5 * MINUTE, 14.4, 0.02),
    ("page", 6 * HOUR, 30 * MINUTE, 6.0, 0.05),
    ("ticket", 3 * DAY, 6 * HOUR, 1.0, 0.10),
]


def test_the_workbook_conditions_for_a_30_day_slo():
    ours = burn.workbook_windows(period_s=30 * DAY)
    assert len(ours) == len(WORKBOOK_TABLE_5_8)
    for w, (severity, long_s, short_s, rate, consumed) in zip(ours, WORKBOOK_TABLE_5_8, strict=True):
        assert (w.severity, w.long_s, w.short_s) == (severity, long_s, short_s)
        assert w.burn == pytest.approx(rate)
        assert burn.budget_spent(rate=w.burn, window_s=w.long_s, period_s=30 * DAY) == pytest.approx(consumed)


def test_the_workbooks_worked_example():
    # 99.9 % SLO: an error rate of 1.44 % is a burn rate of 14.4; it spends 2 % of 30 days in 1 h.
    assert burn.burn_rate(bad=144, valid=10_000, target=0.999) == pytest.approx(14.4)
    # A burn rate of 1 spends exactly the whole budget over the period.
    assert burn.budget_spent(rate=1.0, window_s=30 * DAY, period_s=30 * DAY) == pytest.approx(1.0)


def test_no_events_is_no_data_and_targets_are_fractions():
    assert burn.burn_rate(bad=0, valid=0, target=0.99) is None
    for bad_target in (0.0, 1.0, 99.0, -0.5):
        with pytest.raises(ValueError, match="fraction"):
            burn.burn_rate(bad=1, valid=10, target=bad_target)


def test_both_windows_must_burn():
    fast = burn.workbook_windows()[0]
    rates = {("fast", "long"): 20.0, ("fast", "short"): 1.0}
    assert burn.firing((fast,), rates) == []  # the burning stopped: the short window resets it
    rates[("fast", "short")] = 15.0
    assert burn.firing((fast,), rates) == [fast]
    rates[("fast", "long")] = None  # too few events in the long window
    assert burn.firing((fast,), rates) == []


@given(
    bad=st.integers(0, 10_000),
    extra=st.integers(0, 10_000),
    target=st.floats(0.5, 0.99999),
)
def test_burn_rate_is_the_bad_share_over_the_budget(bad, extra, target):
    valid = bad + extra
    rate = burn.burn_rate(bad=bad, valid=valid, target=target)
    if valid == 0:
        assert rate is None
        return
    assert rate >= 0
    assert rate * (1 - target) == pytest.approx(bad / valid)
