"""Adaptive test-time scaling: self-consistency voting that stops when the majority is confident
(docs/voting.md, docs/decisions/0041-adaptive-voting-in-the-gateway.md).

This module is the rule and nothing else: no I/O, no gateway objects, so the benchmark
(``benchmarks.voting``) runs exactly what the gateway runs (``gateway.vote_forward``).

- **Answers** are extracted from each sample and normalised (``extract``): the final number of the
  text for arithmetic-like answers (``"number"``; ``"auto"`` when the text has a number), else the
  text with case, surrounding whitespace, quotes and trailing punctuation dropped (``"text"``). A
  sample with no answer (empty, or no number where one was asked for) abstains: it is spent and
  counted, but votes for nothing.
- **Rounds**: the first round draws ``first_round`` samples at once (the engine's ``n``), every
  later one ``round_size``; never more than the budget left.
- **The stopping rule** (Aggarwal et al. 2023, "Let's sample step by step", the Beta criterion):
  with ``a`` votes for the leading answer and ``b`` for the runner-up, the probability that the
  leader's share exceeds the runner-up's, under a uniform prior on the two shares, is
  ``P(X > 1/2)`` for ``X ~ Beta(a + 1, b + 1)``, which for integer counts is exactly
  ``P(Binomial(a + b + 1, 1/2) <= a)``. Stop once it reaches ``confidence``. A unanimous round of
  ``k`` scores ``1 - 2^-(k+1)``: ESC's window rule (Li et al. 2024, stop when a window of samples
  all agree) is the case ``b = 0``. The vote also stops when it is **decided**: the leader is ahead
  by more than the samples left could close, so further samples could not change the answer.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

# Where a voting request keeps its state on the request context (``ctx.state``).
STATE = "vote"

# The most samples one request may ask for; a tenant's per-period sample budget caps it further.
MAX_SAMPLES_CAP = 64
DEFAULT_MAX_SAMPLES = 8
DEFAULT_CONFIDENCE = 0.95
DEFAULT_FIRST_ROUND = 4
DEFAULT_ROUND_SIZE = 2
EXTRACTORS = ("auto", "number", "text")
OPTIONS = ("max_samples", "confidence", "first_round", "round_size", "extract")

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
_WS = re.compile(r"\s+")
_TRIM = " \t\n\"'`*.,;:!?"


class VoteError(ValueError):
    """A vote's options are wrong; ``param`` names the field (for the 400)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class VoteSpec:
    """What one request asked for."""

    max_samples: int = DEFAULT_MAX_SAMPLES
    confidence: float = DEFAULT_CONFIDENCE
    first_round: int = DEFAULT_FIRST_ROUND
    round_size: int = DEFAULT_ROUND_SIZE
    extract: str = "auto"
    via_n: bool = False  # asked with ``n`` on a route whose voting mode is "n"


def _int(opts: dict, name: str, default: int, lo: int, hi: int) -> int:
    value = opts.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise VoteError(f"governor.vote.{name} must be an integer from {lo} to {hi}", f"governor.vote.{name}")
    return value


def parse_spec(opts, *, cap: int = MAX_SAMPLES_CAP) -> VoteSpec:
    """The vote a request's ``governor.vote`` asks for; raises ``VoteError`` for anything else."""
    if opts is True:
        opts = {}
    if not isinstance(opts, dict):
        raise VoteError("governor.vote must be an object (or true for the defaults)", "governor.vote")
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise VoteError(
            f"governor.vote has unknown field(s) {', '.join(map(repr, unknown))}; known: {', '.join(OPTIONS)}",
            f"governor.vote.{unknown[0]}",
        )
    max_samples = opts.get("max_samples", DEFAULT_MAX_SAMPLES)
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) or not 1 <= max_samples <= cap:
        raise VoteError(
            f"governor.vote.max_samples must be an integer from 1 to {cap} (the samples this request "
            f"may spend); got {max_samples!r}",
            "governor.vote.max_samples",
        )
    conf = opts.get("confidence", DEFAULT_CONFIDENCE)
    if isinstance(conf, bool) or not isinstance(conf, int | float) or not 0.5 < conf < 1:
        raise VoteError(
            f"governor.vote.confidence must be a number strictly between 0.5 and 1; got {conf!r}",
            "governor.vote.confidence",
        )
    first = _int(opts, "first_round", min(DEFAULT_FIRST_ROUND, max_samples), 1, max_samples)
    step = _int(opts, "round_size", min(DEFAULT_ROUND_SIZE, max_samples), 1, max_samples)
    extract = opts.get("extract", "auto")
    if extract not in EXTRACTORS:
        raise VoteError(
            f"governor.vote.extract must be one of {', '.join(EXTRACTORS)}", "governor.vote.extract"
        )
    return VoteSpec(max_samples, float(conf), first, step, extract)


# ------------------------------------------------------------------ answers


def _number(text: str) -> str | None:
    """The last number in ``text``, canonical (``"1,200.50"`` and ``"1200.5"`` are ``"1200.5"``)."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        d = Decimal(found[-1].replace(",", ""))
    except InvalidOperation:
        return None
    if not d.is_finite():
        return None
    if d == d.to_integral_value():
        return str(int(d))
    return format(d.normalize(), "f")


def _text(text: str) -> str | None:
    t = _WS.sub(" ", text).strip(_TRIM).casefold()
    return t or None


def extract(text, how: str = "auto") -> str | None:
    """The answer a sample votes for, normalised; None when it has none (it abstains)."""
    if not isinstance(text, str):
        return None
    if how == "number":
        return _number(text)
    if how == "text":
        return _text(text)
    return _number(text) or _text(text)


# ------------------------------------------------------------------ the stopping rule


def leader_probability(a: int, b: int) -> float:
    """P(the leader's share > the runner-up's) with ``a`` and ``b`` votes: ``P(X > 1/2)`` for
    ``X ~ Beta(a + 1, b + 1)``, computed exactly as ``P(Binomial(a + b + 1, 1/2) <= a)``."""
    if a < 0 or b < 0:
        raise ValueError("vote counts are not negative")
    n = a + b + 1
    return math.fsum(math.comb(n, j) for j in range(a + 1)) / 2**n


def round_size(spec: VoteSpec, spent: int, budget: int) -> int:
    """How many samples the next round draws (0: none left)."""
    left = budget - spent
    if left <= 0:
        return 0
    return min(spec.first_round if spent == 0 else spec.round_size, left)


@dataclass(slots=True)
class Tally:
    """The votes so far, in the order the samples arrived (ties go to the answer seen first)."""

    counts: Counter = field(default_factory=Counter)
    spent: int = 0
    abstained: int = 0

    def add(self, answer: str | None) -> None:
        self.spent += 1
        if answer is None:
            self.abstained += 1
        else:
            self.counts[answer] += 1

    def top(self) -> tuple[str | None, int, int]:
        """(the leading answer, its votes, the runner-up's votes)."""
        best = self.counts.most_common(2)
        if not best:
            return None, 0, 0
        return best[0][0], best[0][1], best[1][1] if len(best) > 1 else 0

    def share(self) -> float:
        """The leader's votes over the samples spent (abstentions count against it)."""
        return self.top()[1] / self.spent if self.spent else 0.0


def should_stop(tally: Tally, spec: VoteSpec, budget: int) -> str | None:
    """Why the vote stops now (``"budget"``, ``"decided"``, ``"confident"``) or None to go on."""
    if tally.spent >= budget:
        return "budget"
    _, a, b = tally.top()
    if a > b + (budget - tally.spent):
        return "decided"
    if a and leader_probability(a, b) >= spec.confidence:
        return "confident"
    return None


def run(spec: VoteSpec, budget: int, draw) -> tuple[Tally, str]:
    """Vote to the end with ``draw(k)`` returning ``k`` answers (already extracted): the loop the
    gateway runs over the network, here over a function (the benchmark's sampler, the tests')."""
    tally = Tally()
    while True:
        why = should_stop(tally, spec, budget)
        if why is not None:
            return tally, why
        answers = draw(round_size(spec, tally.spent, budget))
        if not answers:
            return tally, "exhausted"
        for answer in answers:
            tally.add(answer)
