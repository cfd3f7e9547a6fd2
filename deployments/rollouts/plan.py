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

from core.jsonschemas import schema_errors
from deployments.rollouts.schemas import (  # noqa: F401  (re-exported: the plan's vocabulary)
    ANALYSIS,
    MAX_PAUSE_S,
    MAX_STEPS,
    MAX_WINDOW_S,
    MIN_WINDOW_S,
    PAUSE,
    SET_WEIGHT,
    STEP_KINDS,
)
from deployments.rollouts.schemas import PLAN as PLAN_SCHEMA


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

# An analysis with too few samples measures again over a longer window, by default up to this
# many times its own window, before it gives up and pauses the rollout.
DEFAULT_WINDOW_GROWTH = 3


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
        super().__init__("; ".join(m for messages in errors.values() for m in messages))
        self.errors = errors


def _plan_errors(schema: dict, document: dict) -> dict[str, list[str]]:
    """The schema's messages keyed by the plan's field (steps, checks, failure_limit)."""
    errors: dict[str, list[str]] = {}
    for path, message in schema_errors(schema, document):
        errors.setdefault(str(path[0]) if path else "steps", []).append(message)
    return errors


def _forward_steps(steps: list[dict]) -> list[dict]:
    """Rules across steps (the schema checked each step alone), and the default longest windows."""
    errors: list[str] = []
    out: list[dict] = []
    weight = 0
    for i, step in enumerate(steps):
        where = f"steps[{i}]"
        if step["kind"] == SET_WEIGHT:
            w = int(step["weight"])
            if w < weight:
                errors.append(
                    f"{where}.weight: {w} % is below the previous {weight} %; a rollout only moves forward."
                )
            weight = max(weight, w)
            out.append({"kind": SET_WEIGHT, "weight": w})
        elif step["kind"] == PAUSE:
            seconds = step.get("seconds")
            out.append({"kind": PAUSE} if seconds is None else {"kind": PAUSE, "seconds": int(seconds)})
        elif weight == 0:
            errors.append(
                f"{where}: an analysis before any canary traffic measures nothing; set a weight first."
            )
        else:
            s = int(step["window_s"])
            most = step.get("max_window_s")
            most = min(s * DEFAULT_WINDOW_GROWTH, MAX_WINDOW_S) if most is None else int(most)
            if most < s:
                errors.append(
                    f"{where}.max_window_s (longest analysis window seconds): must be at least window_s ({s})."
                )
            out.append({"kind": ANALYSIS, "window_s": s, "max_window_s": most})
    if not errors and weight != 100:
        errors.append(f"The steps end at {weight} % canary traffic; the last weight must be 100 %.")
    if errors:
        raise PlanError({"steps": errors})
    return out


def validate_steps(steps: object) -> list[dict]:
    """The normalised steps, or PlanError naming every problem found."""
    errors = _plan_errors(PLAN_SCHEMA, {"steps": steps, "checks": [], "failure_limit": 0})
    if errors:
        raise PlanError(errors)
    return _forward_steps(steps)  # type: ignore[arg-type]


def validate_plan(
    *, steps: object, checks: object, failure_limit: object
) -> tuple[list[dict], list[dict], int]:
    """Normalised ``(steps, checks, failure_limit)``; PlanError with every field's problems.

    The schema (``schemas.PLAN``) first, then the rules across items it cannot say.
    """
    errors = _plan_errors(PLAN_SCHEMA, {"steps": steps, "checks": checks, "failure_limit": failure_limit})
    clean_steps: list[dict] = []
    if "steps" not in errors:
        try:
            clean_steps = _forward_steps(steps)  # type: ignore[arg-type]
        except PlanError as exc:
            errors.update(exc.errors)
    if "checks" in errors:
        raise PlanError(errors)
    clean_checks = [
        {"metric": c["metric"], "limit": float(c["limit"]), "relative": c.get("relative", False),
         "min_samples": int(c.get("min_samples", 20))}
        for c in checks  # type: ignore[union-attr]
    ]  # fmt: skip
    has_analysis = "steps" in errors or any(s["kind"] == ANALYSIS for s in clean_steps)
    check_errors = []
    if has_analysis and not clean_checks:
        check_errors.append("checks: the plan has analysis steps but no checks.")
    seen: set[tuple[str, bool]] = set()
    for i, c in enumerate(clean_checks):
        if (c["metric"], c["relative"]) in seen:
            check_errors.append(f"checks[{i}]: {c['metric']} is checked twice the same way.")
        seen.add((c["metric"], c["relative"]))
    if check_errors:
        errors["checks"] = check_errors
    elif "failure_limit" not in errors and int(failure_limit) >= max(len(clean_checks), 1):  # type: ignore[arg-type]
        errors["failure_limit"] = [
            f"failure_limit: must be smaller than the number of checks ({len(clean_checks)}) (got {failure_limit})."
        ]
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
