"""Rollout plans: the steps, the analysis checks, the templates, and the rules a plan must follow.

Vocabulary from Argo Rollouts: ``set_weight`` (percent of the route's traffic to the canary),
``pause`` (for ``seconds``, or until an admin resumes it when ``seconds`` is absent) and
``analysis`` (measure both sides over ``window_s`` seconds, canary against stable at the same time;
when a check has too few samples the window grows by ``window_s`` up to ``max_window_s``, like
Argo's repeated measurements, before the rollout pauses for an admin).
Plain data (lists of dicts) so the plan is stored as JSON on the rollout and shown as it was run.
"""

from __future__ import annotations

from dataclasses import dataclass

SET_WEIGHT, PAUSE, ANALYSIS = "set_weight", "pause", "analysis"
STEP_KINDS = (SET_WEIGHT, PAUSE, ANALYSIS)


@dataclass(frozen=True)
class Metric:
    """A metric an analysis can check; ``higher_is_better`` flips the limit's direction."""

    key: str
    label: str
    unit: str
    higher_is_better: bool = False


METRICS: dict[str, Metric] = {
    m.key: m
    for m in (
        Metric("ttft_p95_ms", "p95 TTFT", "ms"),
        Metric("tpot_p95_ms", "p95 TPOT", "ms"),
        Metric("error_rate", "error rate", "%"),
        Metric("sla_attainment", "SLA attainment", "%", higher_is_better=True),
        Metric("cost_per_mtok_usd", "cost per M tokens", "$"),
    )
}

MIN_WINDOW_S, MAX_WINDOW_S = 5, 86_400
# An analysis with too few samples measures again over a longer window, by default up to this
# many times its own window, before it gives up and pauses the rollout.
DEFAULT_WINDOW_GROWTH = 3
MAX_PAUSE_S = 7 * 86_400
MAX_STEPS = 50


def default_checks(min_samples: int = 20) -> list[dict]:
    """Canary no worse than stable by a margin, plus an absolute error-rate ceiling."""
    return [
        {"metric": "ttft_p95_ms", "limit": 1.5, "relative": True, "min_samples": min_samples},
        {"metric": "tpot_p95_ms", "limit": 1.5, "relative": True, "min_samples": min_samples},
        {"metric": "error_rate", "limit": 0.05, "relative": False, "min_samples": min_samples},
        {"metric": "sla_attainment", "limit": 0.9, "relative": True, "min_samples": min_samples},
        {"metric": "cost_per_mtok_usd", "limit": 1.25, "relative": True, "min_samples": min_samples},
    ]


def _weights_with_analysis(weights: list[int], window_s: int) -> list[dict]:
    steps: list[dict] = []
    for w in weights:
        steps.append({"kind": SET_WEIGHT, "weight": w})
        if w < 100:
            steps.append({"kind": ANALYSIS, "window_s": window_s})
    return steps


TEMPLATES: dict[str, dict] = {
    "standard": {
        "label": "Standard: 5 → 25 → 50 → 100 %, 5-minute analysis at each step",
        "steps": _weights_with_analysis([5, 25, 50, 100], 300),
        "checks": default_checks(20),
        "failure_limit": 0,
    },
    "fast-demo": {
        "label": "Fast demo: 10 → 50 → 100 %, 30-second analysis at each step",
        "steps": _weights_with_analysis([10, 50, 100], 30),
        "checks": default_checks(10),
        "failure_limit": 0,
    },
    "manual-gate": {
        "label": "Manual gate: 10 %, 1-minute analysis, wait for an admin, then 50 → 100 %",
        "steps": [
            {"kind": SET_WEIGHT, "weight": 10},
            {"kind": ANALYSIS, "window_s": 60},
            {"kind": PAUSE},
            {"kind": SET_WEIGHT, "weight": 50},
            {"kind": ANALYSIS, "window_s": 60},
            {"kind": SET_WEIGHT, "weight": 100},
        ],
        "checks": default_checks(10),
        "failure_limit": 0,
    },
}


class PlanError(ValueError):
    """A plan that cannot run; ``errors`` maps a field (steps, checks, failure_limit) to messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def _int(value, name: str, lo: int, hi: int, errors: list[str]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        errors.append(f"{name} must be a whole number.")
        return None
    if not lo <= value <= hi:
        errors.append(f"{name} must be between {lo} and {hi} (got {value}).")
        return None
    return int(value)


def validate_steps(steps: object) -> list[dict]:
    """The normalised steps, or PlanError naming the first problems found."""
    errors: list[str] = []
    if not isinstance(steps, list) or not steps:
        raise PlanError({"steps": ["A plan needs at least one step (a list)."]})
    if len(steps) > MAX_STEPS:
        raise PlanError({"steps": [f"At most {MAX_STEPS} steps."]})
    out: list[dict] = []
    weight = 0
    for i, step in enumerate(steps, start=1):
        where = f"Step {i}"
        if not isinstance(step, dict) or step.get("kind") not in STEP_KINDS:
            errors.append(f"{where}: kind must be one of {', '.join(STEP_KINDS)}.")
            continue
        kind = step["kind"]
        if kind == SET_WEIGHT:
            w = _int(step.get("weight"), f"{where}: weight (percent)", 0, 100, errors)
            if w is None:
                continue
            if w < weight:
                errors.append(
                    f"{where}: weight {w} % is below the previous {weight} %; a rollout only moves forward."
                )
                continue
            weight = w
            out.append({"kind": kind, "weight": w})
        elif kind == PAUSE:
            seconds = step.get("seconds")
            if seconds in (None, ""):
                out.append({"kind": kind})
            else:
                s = _int(seconds, f"{where}: pause seconds", 1, MAX_PAUSE_S, errors)
                if s is not None:
                    out.append({"kind": kind, "seconds": s})
        else:
            if weight == 0:
                errors.append(
                    f"{where}: an analysis before any canary traffic measures nothing; set a weight first."
                )
                continue
            s = _int(
                step.get("window_s"), f"{where}: analysis window seconds", MIN_WINDOW_S, MAX_WINDOW_S, errors
            )
            if s is None:
                continue
            most = step.get("max_window_s")
            if most in (None, ""):
                most = min(s * DEFAULT_WINDOW_GROWTH, MAX_WINDOW_S)
            m = _int(most, f"{where}: longest analysis window seconds", s, MAX_WINDOW_S, errors)
            if m is not None:
                out.append({"kind": kind, "window_s": s, "max_window_s": m})
    if not errors and weight != 100:
        errors.append(f"The steps end at {weight} % canary traffic; the last weight must be 100 %.")
    if errors:
        raise PlanError({"steps": errors})
    return out


def validate_checks(checks: object, *, failure_limit: object, has_analysis: bool) -> list[dict]:
    errors: list[str] = []
    if not isinstance(checks, list):
        raise PlanError({"checks": ["Checks must be a list."]})
    if has_analysis and not checks:
        errors.append("The plan has analysis steps but no checks.")
    out: list[dict] = []
    seen: set[tuple[str, bool]] = set()
    for i, check in enumerate(checks, start=1):
        where = f"Check {i}"
        if not isinstance(check, dict) or check.get("metric") not in METRICS:
            errors.append(f"{where}: metric must be one of {', '.join(METRICS)}.")
            continue
        metric = check["metric"]
        relative = bool(check.get("relative", False))
        limit = check.get("limit")
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit < 0:
            errors.append(f"{where} ({metric}): limit must be a number ≥ 0.")
            continue
        if metric in ("error_rate", "sla_attainment") and not relative and limit > 1:
            errors.append(f"{where} ({metric}): an absolute limit is a fraction between 0 and 1.")
            continue
        if relative and limit == 0:
            errors.append(f"{where} ({metric}): a relative limit is a ratio to stable and must be > 0.")
            continue
        n = _int(check.get("min_samples", 20), f"{where} ({metric}): min_samples", 1, 1_000_000, errors)
        if n is None:
            continue
        if (metric, relative) in seen:
            errors.append(f"{where}: {metric} is checked twice the same way.")
            continue
        seen.add((metric, relative))
        out.append({"metric": metric, "limit": float(limit), "relative": relative, "min_samples": n})
    if errors:
        raise PlanError({"checks": errors})
    fl_errors: list[str] = []
    fl = _int(failure_limit, "failure_limit", 0, max(len(out) - 1, 0), fl_errors)
    if fl is None:
        raise PlanError({"failure_limit": [*fl_errors, "It must be smaller than the number of checks."]})
    return out


def validate_plan(
    *, steps: object, checks: object, failure_limit: object
) -> tuple[list[dict], list[dict], int]:
    """Normalised ``(steps, checks, failure_limit)``; PlanError with every field's problems."""
    errors: dict[str, list[str]] = {}
    clean_steps: list[dict] = []
    clean_checks: list[dict] = []
    try:
        clean_steps = validate_steps(steps)
    except PlanError as exc:
        errors.update(exc.errors)
    has_analysis = any(s["kind"] == ANALYSIS for s in clean_steps) or bool(errors)
    try:
        clean_checks = validate_checks(checks, failure_limit=failure_limit, has_analysis=has_analysis)
    except PlanError as exc:
        errors.update(exc.errors)
    if errors:
        raise PlanError(errors)
    return clean_steps, clean_checks, int(failure_limit)  # type: ignore[arg-type]


def describe_step(step: dict) -> str:
    if step["kind"] == SET_WEIGHT:
        return f"set canary weight {step['weight']} %"
    if step["kind"] == PAUSE:
        return f"pause {step['seconds']} s" if step.get("seconds") else "pause until an admin resumes"
    most = step.get("max_window_s", step["window_s"])
    if most > step["window_s"]:
        return f"analysis over {step['window_s']} s (up to {most} s while samples are too few)"
    return f"analysis over {step['window_s']} s"


def describe_check(check: dict) -> str:
    m = METRICS[check["metric"]]
    op = "≥" if m.higher_is_better else "≤"
    if check["relative"]:
        return f"canary {m.label} {op} {check['limit']:g} × stable (≥ {check['min_samples']} samples)"
    value = check["limit"] * 100 if m.unit == "%" else check["limit"]
    return f"canary {m.label} {op} {value:g} {m.unit} (≥ {check['min_samples']} samples)"
