"""When a cached answer may be served: a threshold per entry, learned online (vCache's manner).

Static-threshold caches (GPTCache, LiteLLM's Redis and Qdrant caches, Kong) serve a neighbour
whenever its cosine similarity clears one number. Nothing bounds their error: a pair of questions a
word apart ("the capital of Austria" / "of Australia") is as close as two paraphrases, and where the
line sits differs from one cached prompt to the next. vCache (Schroeder et al., ICLR 2026) learns,
per cached entry, how the probability that its answer is right for a new prompt grows with the
similarity, ``P(correct | s) = sigmoid(slope * (s - t_e))``, from verification samples, and serves
with a probability that keeps the error rate at or under a target ``delta``.

Here (docs/decisions/0042):

- Each entry keeps the log-likelihood of its observations ``(s, correct)`` on a fixed grid of
  candidate sigmoids (a threshold ``t_e`` and a slope each: ``GRID_T``, ``GRID_K``). The posterior
  over the grid, from the route's prior and those observations, gives the posterior mean probability
  that the entry's answer is wrong at a similarity ``s``: ``p_wrong``. Updating an entry is one
  vector add; a decision is a handful of vector operations over 256 numbers (microseconds). The
  route's prior is learned from its entries (``Policy.learned``, empirical Bayes).
- A would-be hit is served with probability ``min(1, delta / p_wrong)`` (vCache's exploration
  probability turned around): the chance this request gets a wrong answer is then at most
  ``delta`` under the posterior, so the error rate over all requests is at most ``delta``. An entry
  with no observations is served rarely (the prior puts its threshold anywhere on the grid); one whose
  neighbours proved right at lower similarities is served down to them; one with near-misses close by
  learns a threshold above them.
- A new entry is made when the model's answer differed from its neighbour's at a similarity ``s``:
  that is a near-miss for the new entry too, at the same ``s``, and it starts with that observation
  (the hook and the benchmark record it). Without it a new entry among prompts that share words
  across groups (a context, a template) was judged on the route's prior alone and served for the
  very near-miss it was made for (ADR 0042).
- The request not served is sent to the model and its answer compared with the entry's: that
  observation is what teaches the entry (nothing is spent on it: the model had to answer anyway).
  A share of the requests that *are* to be served (``verify_share``) is also sent to the model and
  compared: those samples are an unbiased estimate of how often served answers are wrong, which the
  route page shows with its interval next to the target.

The error rate is vCache's: the share of requests (that looked in the cache) answered with a cached
answer the model would not have given.
"""

from __future__ import annotations

import random

import numpy as np

from snapshot.contract import cache_target_refusal

# Candidate per-entry sigmoids: a threshold (similarities under 0.2 are never close enough to serve;
# one above 1 stands for an entry no neighbour may take, an answer that varies run to run) and a
# slope (how sharply correctness turns around it: sharp where paraphrases and near-misses are apart,
# shallow where they overlap). The posterior is over both, flattened: 64 x 4 points. Steeper slopes
# (256, 512) raised the hit rate by 2 points on the benchmark's 30,000 requests but put the error
# above the target on 4,000 (ADR 0042): an entry trusted them after too few observations.
THRESHOLDS = np.linspace(0.2, 1.04, 64)
SLOPES = np.array([16.0, 32.0, 64.0, 128.0])
GRID_T = np.tile(THRESHOLDS, len(SLOPES))
GRID_K = np.repeat(SLOPES, len(THRESHOLDS))
GRID_SIZE = GRID_T.size
# When an entry's posterior is added to the route's prior, and how much of the prior stays the base.
MILESTONES = frozenset({4, 16, 64})
BASE_SHARE = 0.2


def _base_prior() -> np.ndarray:
    """What is assumed of an entry before anything is known: any threshold and slope of the grid."""
    return np.full(GRID_SIZE, 1.0 / GRID_SIZE)


BASE_PRIOR = _base_prior()


def _log_sigmoid(z: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -z)


def observation(s: float, correct: bool) -> np.ndarray:
    """The log-likelihood of one observation over the grid of sigmoids."""
    z = GRID_K * (s - GRID_T)
    return _log_sigmoid(z if correct else -z)


class Policy:
    """The decision for one route's target error rate. Stateless but for the prior: entries carry
    their own log-likelihood vectors (``None``: no observation yet)."""

    def __init__(self, target: float, *, rng: random.Random | None = None) -> None:
        why = cache_target_refusal(target)
        if why:
            raise ValueError(why)
        self.target = float(target)
        self.rng = rng or random.Random()
        self.base = BASE_PRIOR
        self.log_prior = np.log(self.base)  # until entries have taught the route something
        self._pop = np.zeros(GRID_SIZE)
        self._pop_n = 0

    def learned(self, ll: np.ndarray, n: int) -> None:
        """An entry reached ``n`` observations (``MILESTONES``): its posterior joins the route's prior.

        The prior of a new entry is then what entries of this route turned out to be (empirical Bayes),
        mixed with the base one (``BASE_SHARE``, ``BASE_PRIOR``) so that no threshold is ever ruled out: a route
        where most entries take neighbours at 0.5 serves a new entry sooner than one full of
        near-misses, and one observation tells which kind a new entry is."""
        if n not in MILESTONES:
            return
        logw = ll - ll.max()
        w = np.exp(logw)
        self._pop += w / w.sum()
        self._pop_n += 1
        mix = (1 - BASE_SHARE) * self._pop / self._pop.sum() + BASE_SHARE * self.base
        self.log_prior = np.log(mix)

    def p_wrong(self, ll: np.ndarray | None, s: float) -> float:
        """Posterior mean probability that the entry's answer is wrong for a prompt at ``s``."""
        logw = self.log_prior if ll is None else self.log_prior + ll
        w = np.exp(logw - logw.max())
        wrong = 1.0 / (1.0 + np.exp(GRID_K * (s - GRID_T)))
        return float(w @ wrong / w.sum())

    def serve_probability(self, ll: np.ndarray | None, s: float) -> float:
        p = self.p_wrong(ll, s)
        return 1.0 if p <= self.target else self.target / p

    def serve(self, ll: np.ndarray | None, s: float) -> bool:
        """Whether to serve the entry at similarity ``s`` (random: see the module's docstring)."""
        q = self.serve_probability(ll, s)
        return q >= 1.0 or self.rng.random() < q
