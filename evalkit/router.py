"""Routing by difficulty: learn from per-case eval results which requests a cheap version answers
right, and send the rest to the strong one.

The router sees only what the gateway sees before inference: the request's text. ``features``
turns it into a handful of lexical counts (length, numbers and their digits, operators, brackets,
lines, code fences, question marks); the same function runs when training and in the gateway, so
what was learned is what is served. ``fit`` is an L2-regularised logistic regression on
standardised features (Newton's method in numpy; ``tests/evalkit/test_router.py`` checks it against
a hand-solved case and a known optimum), predicting the probability that the cheap version's
answer is right. ``RouterModel.p_cheap`` scores one request in plain Python (no numpy per request).

``train`` splits the cases by id into train, validation and test (seeded, ``split``); fits on train;
sweeps the threshold on validation to choose the operating point — the cheapest threshold whose
quality, as a share of the strong version's, has a lower bound (paired bootstrap, 95 %) at or above
the target; and reports the whole cost–quality curve and the chosen point on the *test* cases,
which neither the fit nor the choice saw. ``judge`` is the gate's verdict on a set of cases: the
routed quality against the strong version alone, on the same interval.

A routed case is answered by the cheap version when ``p_cheap >= threshold``, else by the strong
one; its score is that version's score on the case and its cost that version's price times the
case's tokens. Everything here is Django-free (``docs/routing.md``, ADR 0040).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from evalkit.stats import wilson

DEFAULT_CONFIDENCE = 0.95
BOOTSTRAP_SAMPLES = 2000
# Fewer labelled cases than this and a router says nothing worth serving: refuse to train.
MIN_CASES = 60
DEFAULT_SPLIT = (0.5, 0.25, 0.25)  # train, validation, test
FEATURE_SPEC_VERSION = 1
# A threshold no probability reaches: every request goes to the strong version.
ALL_STRONG = 1.000001

_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_WORD = re.compile(r"\w+")

FEATURES = (
    "log_chars",  # log(1 + characters)
    "log_words",
    "numbers",  # how many numbers
    "digits",  # digits in all of them
    "max_number_digits",  # the longest number's digits
    "plus",
    "minus",
    "times",  # * or × or "times"
    "divide",  # / or ÷
    "brackets",  # ( [ {
    "lines",
    "code_fences",
    "questions",  # question marks
)


class RouterError(ValueError):
    """A router that cannot be trained or judged as asked (the message says why)."""


def request_text(messages: Sequence[Any] | None = None, prompt: Any = None) -> str:
    """What the router reads from a request: every message's text content, or the prompt.

    Chat contents may be a string or a list of parts; only text parts count (an image's bytes say
    nothing the router could learn from).
    """
    if messages:
        out = []
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out.extend(
                    p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
                )
        return "\n".join(t for t in out if isinstance(t, str))
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)
    return ""


def features(text: str) -> list[float]:
    """The request's features, in ``FEATURES`` order."""
    numbers = _NUMBER.findall(text)
    lengths = [sum(ch.isdigit() for ch in n) for n in numbers]
    lower = text.lower()
    return [
        math.log1p(len(text)),
        math.log1p(len(_WORD.findall(text))),
        float(len(numbers)),
        float(sum(lengths)),
        float(max(lengths, default=0)),
        float(text.count("+")),
        float(len(re.findall(r"(?<=\s)-(?=\s)|(?<=\d)-(?=\d)", text)) + lower.count(" minus ")),
        float(text.count("*") + text.count("×") + lower.count(" times ")),
        float(text.count("/") + text.count("÷")),
        float(text.count("(") + text.count("[") + text.count("{")),
        float(text.count("\n") + 1),
        float(text.count("```")),
        float(text.count("?")),
    ]


@dataclass(frozen=True, slots=True)
class RouterModel:
    """A fitted logistic regression on standardised features: what the gateway serves."""

    feature_names: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    spec_version: int = FEATURE_SPEC_VERSION

    def p_cheap(self, text: str) -> float:
        """Probability that the cheap version answers this request right."""
        return self.p_of(features(text))

    def p_of(self, x: Sequence[float]) -> float:
        z = self.intercept
        for xi, m, s, c in zip(x, self.mean, self.scale, self.coef, strict=True):
            z += c * (xi - m) / s
        if z >= 0:
            return 1.0 / (1.0 + math.exp(-z))
        e = math.exp(z)
        return e / (1.0 + e)

    def to_dict(self) -> dict:
        return {
            "features": list(self.feature_names),
            "mean": list(self.mean),
            "scale": list(self.scale),
            "coef": list(self.coef),
            "intercept": self.intercept,
            "spec_version": self.spec_version,
        }

    @classmethod
    def from_dict(cls, data: dict) -> RouterModel:
        names = tuple(data["features"])
        if names != FEATURES[: len(names)] or len(names) != len(FEATURES):
            raise RouterError(f"the router was trained on features {names}, this build computes {FEATURES}")
        if int(data.get("spec_version", 0)) != FEATURE_SPEC_VERSION:
            raise RouterError(
                f"feature spec version {data.get('spec_version')}, this build has {FEATURE_SPEC_VERSION}"
            )
        model = cls(
            feature_names=names,
            mean=tuple(float(v) for v in data["mean"]),
            scale=tuple(float(v) for v in data["scale"]),
            coef=tuple(float(v) for v in data["coef"]),
            intercept=float(data["intercept"]),
        )
        if not (len(model.mean) == len(model.scale) == len(model.coef) == len(names)):
            raise RouterError("the router's coefficients do not match its features")
        if any(s <= 0 for s in model.scale):
            raise RouterError("the router's feature scales must be positive")
        return model


def fit(
    x: np.ndarray,
    y: np.ndarray,
    *,
    l2: float = 1.0,
    names: tuple[str, ...] = FEATURES,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> RouterModel:
    """Logistic regression of ``y`` (0/1) on ``x`` (n × len(FEATURES)), L2 penalty ``l2`` on the
    standardised coefficients (not the intercept), by Newton's method (the loss is strictly convex)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.ndim != 2 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise RouterError("fit needs one row of features per label")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0  # a constant feature gets coefficient 0 through the penalty
    xs = np.hstack([np.ones((x.shape[0], 1)), (x - mean) / scale])
    penalty = np.full(xs.shape[1], float(l2))
    penalty[0] = 0.0
    w = np.zeros(xs.shape[1])
    if 0 < y.mean() < 1:
        w[0] = math.log(y.mean() / (1 - y.mean()))
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-(xs @ w)))
        grad = xs.T @ (p - y) + penalty * w
        hess = (xs * (p * (1 - p))[:, None]).T @ xs + np.diag(penalty) + 1e-9 * np.eye(xs.shape[1])
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.max(np.abs(step))) < tol:
            break
    return RouterModel(
        feature_names=names,
        mean=tuple(float(v) for v in mean),
        scale=tuple(float(v) for v in scale),
        coef=tuple(float(v) for v in w[1:]),
        intercept=float(w[0]),
    )


# --- labelled cases, splits, curves ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Labelled:
    """One case both versions answered: its request text, each version's score and cost."""

    case_id: str
    text: str
    cheap_score: float
    strong_score: float
    cheap_cost: float
    strong_cost: float
    category: str = ""


def pair_results(
    texts: dict[str, str],
    cheap: Iterable[dict],
    strong: Iterable[dict],
    *,
    cheap_usd_per_mtok: float,
    strong_usd_per_mtok: float,
) -> list[Labelled]:
    """Join two eval runs' case results by case id (rows with ``case_id``, ``score``, ``error``,
    ``prompt_tokens``, ``output_tokens``, ``category``). A case either run errored on is left out:
    an error says nothing about the case's difficulty. A case without token counts costs one token."""
    c_by = {r["case_id"]: r for r in cheap}
    s_by = {r["case_id"]: r for r in strong}
    out = []
    for cid in sorted(set(c_by) & set(s_by) & set(texts)):
        c, s = c_by[cid], s_by[cid]
        if c.get("error") or s.get("error") or c.get("score") is None or s.get("score") is None:
            continue
        out.append(
            Labelled(
                case_id=cid,
                text=texts[cid],
                cheap_score=float(c["score"]),
                strong_score=float(s["score"]),
                cheap_cost=cheap_usd_per_mtok * _tokens(c) / 1e6,
                strong_cost=strong_usd_per_mtok * _tokens(s) / 1e6,
                category=str(c.get("category") or ""),
            )
        )
    return out


def _tokens(row: dict) -> int:
    total = (row.get("prompt_tokens") or 0) + (row.get("output_tokens") or 0)
    return total if total > 0 else 1


def split(cases: Sequence[Labelled], *, seed: int, shares: tuple[float, float, float] = DEFAULT_SPLIT):
    """``(train, validation, test)``: each case goes by a seeded hash of its id, so a case keeps its
    side whatever other cases the runs hold, and a rerun of the same runs splits the same way."""
    if len(shares) != 3 or any(s <= 0 for s in shares) or not math.isclose(sum(shares), 1.0):
        raise RouterError("the split needs three positive shares that add up to 1")
    train, val, test = [], [], []
    edge1, edge2 = shares[0], shares[0] + shares[1]
    for c in cases:
        u = (
            int.from_bytes(hashlib.blake2b(f"{seed}\x00{c.case_id}".encode(), digest_size=8).digest(), "big")
            / 2**64
        )
        (train if u < edge1 else val if u < edge2 else test).append(c)
    return train, val, test


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """Routing at one threshold, on one set of cases."""

    threshold: float
    cheap_share: float  # share of requests the cheap version answers
    quality: float  # mean score of the routed answers
    quality_lo: float  # Wilson interval of that mean (binary scores) or bootstrap
    quality_hi: float
    quality_ratio: float  # quality ÷ strong-only quality
    ratio_lo: float  # paired bootstrap interval of the ratio
    ratio_hi: float
    cost_ratio: float  # routed cost ÷ strong-only cost

    def to_dict(self) -> dict:
        return {k: round(v, 6) for k, v in asdict(self).items()}


@dataclass(slots=True)
class Evaluation:
    """One set of cases, scored for the sweep: arrays aligned with ``cases``."""

    p: np.ndarray
    cheap: np.ndarray
    strong: np.ndarray
    cheap_cost: np.ndarray
    strong_cost: np.ndarray
    idx: np.ndarray  # bootstrap resamples (B × n), fixed per set so every threshold shares them

    @classmethod
    def of(cls, model: RouterModel, cases: Sequence[Labelled], *, seed: int) -> Evaluation:
        if not cases:
            raise RouterError("no cases to evaluate the router on")
        rng = np.random.default_rng(seed)
        n = len(cases)
        return cls(
            p=np.array([model.p_cheap(c.text) for c in cases]),
            cheap=np.array([c.cheap_score for c in cases]),
            strong=np.array([c.strong_score for c in cases]),
            cheap_cost=np.array([c.cheap_cost for c in cases]),
            strong_cost=np.array([c.strong_cost for c in cases]),
            idx=rng.integers(0, n, size=(BOOTSTRAP_SAMPLES, n)),
        )

    def routed(self, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """``(to_cheap mask, routed scores)`` at a threshold."""
        to_cheap = self.p >= threshold
        return to_cheap, np.where(to_cheap, self.cheap, self.strong)

    def point(self, threshold: float, *, confidence: float = DEFAULT_CONFIDENCE) -> CurvePoint:
        to_cheap, scores = self.routed(threshold)
        n = len(scores)
        q, q_strong = float(scores.mean()), float(self.strong.mean())
        if np.all((scores == 0) | (scores == 1)):
            q_lo, q_hi = wilson(float(scores.sum()), n, confidence)
        else:
            q_lo, q_hi = _percentiles(scores[self.idx].mean(axis=1), confidence)
        if to_cheap.any():
            ratio_lo, ratio_hi = ratio_interval(scores, self.strong, self.idx, confidence)
        else:
            # Every request to the strong version: its own answers, a ratio of exactly 1 whatever
            # the resample, even where the strong version got nothing right (a bootstrap would count
            # such a resample as 0 and leave training with no operating point at all).
            ratio_lo = ratio_hi = 1.0
        cost = float(np.where(to_cheap, self.cheap_cost, self.strong_cost).sum())
        strong_cost = float(self.strong_cost.sum())
        return CurvePoint(
            threshold=float(threshold),
            cheap_share=float(to_cheap.mean()),
            quality=q,
            quality_lo=q_lo,
            quality_hi=q_hi,
            quality_ratio=q / q_strong if q_strong > 0 else (0.0 if to_cheap.any() else 1.0),
            ratio_lo=ratio_lo,
            ratio_hi=ratio_hi,
            cost_ratio=cost / strong_cost if strong_cost > 0 else 0.0,
        )


def _percentiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(values, [alpha, 1 - alpha])
    return float(lo), float(hi)


def ratio_interval(
    routed: np.ndarray, strong: np.ndarray, idx: np.ndarray, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float]:
    """Paired percentile bootstrap of ``mean(routed) / mean(strong)``: both are scores of the same
    cases, so a case resampled counts for both (an unpaired interval would be several times wider
    and refuse every router that is as good as the strong version)."""
    r, s = routed[idx].mean(axis=1), strong[idx].mean(axis=1)
    ratios = np.divide(r, s, out=np.zeros_like(r), where=s > 0)
    return _percentiles(ratios, confidence)


def thresholds(p: np.ndarray) -> list[float]:
    """Every distinct cut of the scored cases, from all-cheap (0) to all-strong (just above 1)."""
    cuts = sorted({0.0, *(round(float(v), 6) for v in p)})
    return [*cuts, ALL_STRONG]


def sweep(
    ev: Evaluation, cuts: Sequence[float], *, confidence: float = DEFAULT_CONFIDENCE
) -> list[CurvePoint]:
    return [ev.point(t, confidence=confidence) for t in cuts]


def thin(points: list[CurvePoint], keep: int = 60) -> list[CurvePoint]:
    """At most ``keep`` points, evenly over the curve, its ends kept (what a page draws)."""
    if len(points) <= keep:
        return points
    step = (len(points) - 1) / (keep - 1)
    return [points[round(i * step)] for i in range(keep)]


@dataclass(slots=True)
class Trained:
    """What training produced: the model, its operating point and the evidence for both."""

    model: RouterModel
    threshold: float
    target: float
    validation_point: CurvePoint  # where the threshold was chosen
    test_point: CurvePoint  # the same threshold on cases nothing was fitted or chosen on
    test_curve: list[CurvePoint]
    counts: dict[str, int]
    strong_quality: float  # on the test cases
    cheap_quality: float
    met_target: bool  # a threshold that sends some traffic to cheap met the target (else: all strong)
    test_case_ids: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "threshold": self.threshold,
            "target": self.target,
            "validation": self.validation_point.to_dict(),
            "test": self.test_point.to_dict(),
            "counts": self.counts,
            "strong_quality": round(self.strong_quality, 6),
            "cheap_quality": round(self.cheap_quality, 6),
            "met_target": self.met_target,
        }


def check_target(target: Any) -> float:
    if isinstance(target, bool) or not isinstance(target, int | float) or not 0 < float(target) <= 1:
        raise RouterError(
            f"the quality target is a share of the strong version's quality in (0, 1], got {target!r}"
        )
    return float(target)


def train(
    cases: Sequence[Labelled],
    *,
    target: float,
    seed: int = 0,
    l2: float = 1.0,
    shares: tuple[float, float, float] = DEFAULT_SPLIT,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Trained:
    """Fit on the train cases, choose the threshold on validation, report on test (module docstring).

    The operating point is the lowest-cost threshold whose validation ratio interval's lower bound
    is ≥ ``target``; when no threshold that sends anything to the cheap version is, the threshold
    sends everything to the strong one (a router that cannot keep the quality must not save money by
    losing it) and ``met_target`` is False.
    """
    target = check_target(target)
    if len(cases) < MIN_CASES:
        raise RouterError(
            f"{len(cases)} cases both versions answered without error; a router needs at least {MIN_CASES}"
        )
    tr, va, te = split(cases, seed=seed, shares=shares)
    if min(len(tr), len(va), len(te)) < 10:
        raise RouterError(
            f"the split left too few cases (train {len(tr)}, validation {len(va)}, test {len(te)})"
        )
    y = np.array([1.0 if c.cheap_score >= 1.0 else 0.0 for c in tr])
    model = fit(np.array([features(c.text) for c in tr]), y, l2=l2)
    ev_val = Evaluation.of(model, va, seed=seed)
    # All-strong is always among them (its ratio is exactly 1), so there is always a choice.
    ok = [pt for pt in sweep(ev_val, thresholds(ev_val.p), confidence=confidence) if pt.ratio_lo >= target]
    best = min(ok, key=lambda pt: (pt.cost_ratio, -pt.quality))
    ev_test = Evaluation.of(model, te, seed=seed + 1)
    return Trained(
        model=model,
        threshold=best.threshold,
        target=target,
        validation_point=best,
        test_point=ev_test.point(best.threshold, confidence=confidence),
        test_curve=thin(sweep(ev_test, thresholds(ev_test.p), confidence=confidence)),
        counts={"train": len(tr), "validation": len(va), "test": len(te), "train_cheap_right": int(y.sum())},
        strong_quality=float(ev_test.strong.mean()),
        cheap_quality=float(ev_test.cheap.mean()),
        met_target=best.cheap_share > 0,
        test_case_ids=[c.case_id for c in te],
    )


def judge(
    model: RouterModel,
    threshold: float,
    cases: Sequence[Labelled],
    *,
    target: float,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> tuple[list[dict], str, CurvePoint]:
    """The gate's verdict on a router policy, like a version's quality gate: ``(checks, verdict,
    point)``. It passes only when the whole interval of the routed quality as a share of the strong
    version's lies at or above ``target``; an interval that straddles it is inconclusive and fails,
    as a version's does (``evaluations.judge``)."""
    target = check_target(target)
    if len(cases) < 10:
        raise RouterError(f"{len(cases)} cases to judge on; the gate needs at least 10")
    pt = Evaluation.of(model, cases, seed=seed).point(threshold, confidence=confidence)
    if pt.ratio_lo >= target:
        detail = "the whole interval is at or above the target"
    elif pt.ratio_hi < target:
        detail = "the whole interval is below the target"
    else:
        detail = "inconclusive: the interval straddles the target (more cases are needed)"
    checks = [
        {
            "name": "quality vs strong alone",
            "limit": target,
            "value": round(pt.quality_ratio, 4),
            "unit": "× strong",
            "passed": pt.ratio_lo >= target,
            "detail": f"{pt.quality_ratio:.3f} [{pt.ratio_lo:.3f}, {pt.ratio_hi:.3f}] over {len(cases)} cases; {detail}",
        }
    ]
    return checks, ("passed" if checks[0]["passed"] else "failed"), pt
