"""Simulated answer quality: whether a simulated engine answers an evaluation case right.

A simulated model version carries a *quality profile*::

    {"categories": {"arithmetic": 0.9, "refusal": 0.97},
     "by_context": {"1024": 0.95, "4096": 0.9, "16384": 0.6},
     "default": 0.8}

The probability that a case is answered right is its category's value when the category is
listed, else the ``by_context`` value of the smallest bucket >= the case's ``context_len`` (the
largest bucket beyond it) when the case has one, else ``default``. A listed category with a
``context_len`` takes the lower of the two, so long contexts never help.

The draw is deterministic: ``u = blake2b(seed, case id, prompt hash)`` mapped to [0, 1); the case
is right when ``u < p``. So one version answers the same case the same way every time, and the
share of right answers over many cases converges on ``p``. A wrong answer is a plausible one
(off-by-one number, a wrong field value, a missing needle, refusing a benign request or complying
with a harmful one) that the case's scorer marks wrong.

The engine can only be right when it knows the answer: the eval runner sends it in the request
body as ``governor_eval`` (see ``evalkit.runner.truth_of``), and only to simulated engines. All of
this is labelled *simulated*; real engines are measured.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import zlib
from dataclasses import dataclass
from typing import Any

WRONG_TEXT = "I don't know."
REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
COMPLY_TEXT = "Sure. Here is a short, helpful answer to your question."
NEEDLE_MISS_TEXT = "The text does not seem to mention a passphrase."


@dataclass(frozen=True, slots=True)
class QualityProfile:
    """Per-category and per-context probabilities of a right answer (see the module docstring)."""

    categories: dict[str, float]
    by_context: tuple[tuple[int, float], ...]
    default: float

    @classmethod
    def from_dict(cls, data: Any) -> QualityProfile:
        """Validate a profile dict; raises ``ValueError`` naming the bad entry."""
        if not isinstance(data, dict):
            raise ValueError("the quality profile must be an object")
        unknown = set(data) - {"categories", "by_context", "default"}
        if unknown:
            raise ValueError(f"unknown quality profile key(s): {', '.join(sorted(unknown))}")

        def prob(value: Any, where: str) -> float:
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ValueError(f"quality {where} must be a number between 0 and 1, got {value!r}")
            return float(value)

        categories = data.get("categories") or {}
        if not isinstance(categories, dict):
            raise ValueError("quality categories must be an object")
        by_context = data.get("by_context") or {}
        if not isinstance(by_context, dict):
            raise ValueError("quality by_context must be an object of {tokens: probability}")
        buckets = []
        for key, value in by_context.items():
            try:
                tokens = int(key)
            except (TypeError, ValueError):
                raise ValueError(f"quality by_context key {key!r} must be a token count") from None
            if tokens <= 0:
                raise ValueError(f"quality by_context key {key!r} must be > 0")
            buckets.append((tokens, prob(value, f"by_context[{key}]")))
        return cls(
            categories={str(k): prob(v, f"categories[{k}]") for k, v in categories.items()},
            by_context=tuple(sorted(buckets)),
            default=prob(data.get("default", 1.0), "default"),
        )

    def to_dict(self) -> dict:
        return {
            "categories": dict(self.categories),
            "by_context": {str(k): v for k, v in self.by_context},
            "default": self.default,
        }

    def p_correct(self, *, category: str, context_len: int | None = None) -> float:
        """Probability that a case of ``category`` (and ``context_len`` tokens) is answered right."""
        ctx = None
        if context_len is not None and self.by_context:
            ctx = next((p for tokens, p in self.by_context if tokens >= context_len), self.by_context[-1][1])
        if category in self.categories:
            p = self.categories[category]
            return p if ctx is None else min(p, ctx)
        return self.default if ctx is None else ctx


def draw(*, seed: int, case_id: str, prompt_text: str) -> float:
    """The case's deterministic uniform number in [0, 1)."""
    key = f"{seed}\x00{case_id}\x00{zlib.crc32(prompt_text.encode()):08x}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def right_answer(truth: dict) -> str:
    """The text a right answer consists of, from the case's ``expected`` and scorer."""
    scorer, expected, args = truth.get("scorer"), truth.get("expected"), truth.get("scorer_args") or {}
    if scorer == "numeric":
        return _number(expected)
    if scorer == "json_schema":
        return json.dumps(expected if expected is not None else {})
    if scorer == "refusal":
        return REFUSAL_TEXT if expected else COMPLY_TEXT
    if scorer == "regex":
        return str(args.get("example") or WRONG_TEXT)
    if scorer == "needle":
        return f"The secret passphrase is {expected}."
    return str(expected)


def wrong_answer(truth: dict, u: float) -> str:
    """A plausible wrong answer; ``u`` in [0, 1) picks among variants."""
    scorer, expected, args = truth.get("scorer"), truth.get("expected"), truth.get("scorer_args") or {}
    if scorer == "numeric":
        want = float(expected)
        tol = max(float(args.get("abs_tol", 0)), float(args.get("rel_tol", 0)) * abs(want))
        step = max(1.0, math.floor(tol) + 1)
        return _number(want + step if u < 0.5 else want - step)
    if scorer == "json_schema":
        if not isinstance(expected, dict) or not expected:
            return "I could not find that information."
        keys = sorted(expected)
        key = keys[int(u * len(keys))]
        wrong = dict(expected)
        value = expected[key]
        if isinstance(value, bool):
            wrong[key] = not value
        elif isinstance(value, int | float):
            wrong[key] = value + 1
        elif isinstance(value, str):
            wrong[key] = value[:-1] if len(value) > 1 else value + "x"
        else:
            wrong[key] = None
        return json.dumps(wrong)
    if scorer == "refusal":
        return COMPLY_TEXT if expected else REFUSAL_TEXT
    if scorer == "needle":
        return NEEDLE_MISS_TEXT
    if scorer in ("exact", "contains") and isinstance(expected, str) and expected and expected in WRONG_TEXT:
        return "?"
    return WRONG_TEXT


def answer(profile: QualityProfile, truth: dict, *, seed: int, prompt_text: str) -> tuple[str, bool]:
    """``(text, right)`` for one case: right with probability ``profile.p_correct(...)``."""
    if not isinstance(truth, dict) or "expected" not in truth or not isinstance(truth.get("scorer"), str):
        raise ValueError("'governor_eval' must be an object with 'scorer' and 'expected'")
    context_len = truth.get("context_len")
    if context_len is not None and (isinstance(context_len, bool) or not isinstance(context_len, int)):
        raise ValueError("'governor_eval.context_len' must be an integer or null")
    p = profile.p_correct(category=str(truth.get("category") or ""), context_len=context_len)
    u = draw(seed=seed, case_id=str(truth.get("case_id") or ""), prompt_text=prompt_text)
    if u < p:
        return right_answer(truth), True
    # Re-use the part of u above p to pick the kind of wrong answer (still deterministic).
    return wrong_answer(truth, (u - p) / (1 - p) if p < 1 else 0.0), False


_PIECE = re.compile(r"\s*\S+")


def answer_tokens(text: str, *, max_tokens: int | None, room: int) -> tuple[list[str], str]:
    """The answer as the simulated engine's tokens (one per word, as its synthetic text) and the
    finish reason: ``"stop"`` when it fits in ``max_tokens`` and the context, else ``"length"``."""
    pieces = _PIECE.findall(text) or [""]
    limit = room if max_tokens is None else min(max_tokens, room)
    if len(pieces) > limit:
        return pieces[: max(1, limit)], "length"
    return pieces, "stop"
