"""Error budgets and burn rates, as the Google SRE workbook defines them ("Alerting on SLOs").

An SLO says that a share ``target`` of valid events are good over a period (say 99 % of requests
have their first token within 500 ms, over 30 days). The error budget is the rest, ``1 - target``.
The **burn rate** over a window is how fast the window spends it: the bad share of its events over
the budget, ``(bad / valid) / (1 - target)``. A burn rate of 1 spends exactly the whole budget over
the period; 14.4 spends 2 % of a 30-day budget in one hour.

**Multiwindow, multi-burn-rate alerts** (the workbook's recommendation, its table 5-8): alert when
both a long window and a short one (a twelfth of it) burn faster than the threshold. The long
window makes the alert significant; the short one makes it stop soon after the burning stops.

    page:   1 h and 5 min  above 14.4  (2 % of a 30-day budget spent in 1 h)
    page:   6 h and 30 min above 6     (5 % in 6 h)
    ticket: 3 d and 6 h    above 1     (10 % in 3 d)

This module is plain arithmetic, with no Django: the SLO evaluation feeds it counts.
"""

from __future__ import annotations

from dataclasses import dataclass

HOUR = 3600.0
DAY = 24 * HOUR


def burn_rate(*, bad: int, valid: int, target: float) -> float | None:
    """The window's burn rate; None without valid events (no data is not a breach)."""
    if not 0.0 < target < 1.0:
        raise ValueError(f"an SLO target is a fraction between 0 and 1, not {target}")
    if valid <= 0:
        return None
    return (bad / valid) / (1.0 - target)


def budget_spent(*, rate: float, window_s: float, period_s: float) -> float:
    """The share of the period's error budget a window burning at ``rate`` spends."""
    return rate * window_s / period_s


def threshold_for(*, budget_share: float, window_s: float, period_s: float) -> float:
    """The burn rate that spends ``budget_share`` of the budget in ``window_s`` (the workbook's
    14.4 = 2 % of 30 days in one hour)."""
    return budget_share * period_s / window_s


@dataclass(frozen=True)
class AlertWindow:
    """One multiwindow alert condition: both windows above ``burn``."""

    name: str
    severity: str  # "page" or "ticket"
    long_s: float
    short_s: float
    burn: float


def workbook_windows(period_s: float = 30 * DAY) -> tuple[AlertWindow, ...]:
    """The workbook's three conditions for an SLO period, thresholds derived from the budget shares
    (2 % in 1 h, 5 % in 6 h, 10 % in 3 d), short windows a twelfth of the long ones."""
    return (
        AlertWindow("fast", "page", HOUR, HOUR / 12, threshold_for(budget_share=0.02, window_s=HOUR, period_s=period_s)),
        AlertWindow("slow", "page", 6 * HOUR, 6 * HOUR / 12, threshold_for(budget_share=0.05, window_s=6 * HOUR, period_s=period_s)),
        AlertWindow("ticket", "ticket", 3 * DAY, 3 * DAY / 12, threshold_for(budget_share=0.10, window_s=3 * DAY, period_s=period_s)),
    )  # fmt: skip


def firing(windows: tuple[AlertWindow, ...], rates: dict[tuple[str, str], float | None]) -> list[AlertWindow]:
    """The conditions that hold: ``rates[(name, "long")]`` and ``rates[(name, "short")]`` both
    above the condition's burn rate. Pages first."""
    out = []
    for w in windows:
        long_rate, short_rate = rates.get((w.name, "long")), rates.get((w.name, "short"))
        if long_rate is not None and short_rate is not None and long_rate > w.burn and short_rate > w.burn:
            out.append(w)
    return sorted(out, key=lambda w: (w.severity != "page", -w.burn))
