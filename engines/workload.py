"""Workload descriptions and deterministic request schedules.

A ``Workload`` says *how* requests arrive (an ``Arrival`` process) and *how long* they are (a
``LengthDist`` for input and output tokens, or an empirical list of (input_len, output_len) pairs),
plus how much of each prompt is a prefix shared with other requests of its prefix group.
``Workload.sample_requests(n=... or duration=..., seed=...)`` turns that into a ``RequestSchedule``
of numpy arrays, identical for the same seed on every machine (numpy ``PCG64``).

Both the virtual-time simulator (``engines.sim``) and the load harness use this module, so it has
no dependency on the rest of ``engines`` and stays JSON-serialisable (``to_dict``/``from_dict``).

Arrival processes (inter-arrival gaps ``g``):

* ``constant(rate)``: ``g = 1/rate`` exactly.
* ``poisson(rate)``: ``g ~ Exponential(mean 1/rate)``.
* ``gamma(rate, burstiness)``: ``g ~ Gamma(shape=burstiness, scale=1/(rate*burstiness))`` (mean
  ``1/rate``); ``burstiness < 1`` is burstier than Poisson, ``1`` is Poisson, ``> 1`` is smoother.
  Same definition as ``vllm bench serve --burstiness``.
* ``fixed_concurrency(n)``: closed loop: ``n`` clients, each sends its next request when the previous
  one finished. A schedule for it has no arrival times (``arrival_s`` is all zeros) and
  ``concurrency = n``; the sender owns the timing.

Offered rate (open-loop arrivals): a schedule of ``N`` requests offers exactly the named rate, by
one of two conventions (``Arrival.spacing``):

* ``"window"`` (default): the ``N`` gaps drawn from the process are rescaled so that they sum to
  ``N / rate``; the first request goes at ``t = 0`` and request ``k`` at the sum of the first ``k``
  gaps, so the stage's window (first send to one gap after the last) is ``N / rate`` seconds.
  A ``duration`` stage holds ``N = round(rate * duration)`` requests.
* ``"vllm"``: ``vllm bench serve``'s convention: the cumulative delays are rescaled so that the
  ``N``-th request goes at exactly ``N / rate`` (the first one a drawn gap after ``t = 0``).

Both keep the process's shape (Poisson gaps stay exponential in distribution up to the common
factor) and both mean "``N`` requests in ``N / rate`` seconds". Raw unscaled draws would not: 100
Poisson requests "at 8 req/s" can span 14.7 s, which offers 6.8 req/s. ``RequestSchedule.window_s``
is the planned window, so a sender can report the rate it actually offered.

Length distributions (rounded to integers, clipped to ``[min, max]``, ``min`` defaults to 1):

* ``fixed(value)``, ``uniform(low, high)`` (inclusive integers), ``normal(mean, std)``,
  ``lognormal(mean, sigma)`` (``sigma`` of the underlying normal; ``mu = ln(mean) - sigma^2/2`` so
  the mean is ``mean`` before rounding and clipping), ``empirical(path)``: JSONL lines with
  ``input_len`` and ``output_len``, sampled jointly with replacement.

Shared prefixes: with ``shared_prefix_ratio = r`` and ``prefix_groups = k``, each request belongs
to a uniformly drawn group ``0..k-1`` and its first ``floor(r * input_len)`` tokens are that group's
common text (so two requests of a group share ``min`` of their prefix lengths).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ARRIVAL_KINDS = ("constant", "poisson", "gamma", "concurrency")
SPACINGS = ("window", "vllm")
LENGTH_KINDS = ("fixed", "uniform", "normal", "lognormal")


@dataclass(frozen=True, slots=True)
class Arrival:
    """An arrival process; build it with ``constant``/``poisson``/``gamma``/``fixed_concurrency``."""

    kind: str
    rate: float | None = None
    burstiness: float = 1.0
    concurrency: int | None = None
    spacing: str = "window"  # how N drawn gaps are scaled to offer exactly ``rate`` (module docstring)

    def __post_init__(self) -> None:
        if self.kind not in ARRIVAL_KINDS:
            raise ValueError(f"unknown arrival kind {self.kind!r}")
        if self.spacing not in SPACINGS:
            raise ValueError(f"unknown arrival spacing {self.spacing!r}: use one of {', '.join(SPACINGS)}")
        if self.kind == "concurrency":
            if not self.concurrency or self.concurrency < 1:
                raise ValueError("fixed_concurrency needs n >= 1")
        elif self.rate is None or not math.isfinite(self.rate) or not self.rate > 0:
            raise ValueError(f"{self.kind} arrivals need a finite rate > 0 (got {self.rate!r})")
        if not self.burstiness > 0:
            raise ValueError("burstiness must be > 0")

    @property
    def closed_loop(self) -> bool:
        """Whether the sender, not a clock, decides when the next request goes (fixed concurrency)."""
        return self.kind == "concurrency"

    def to_dict(self) -> dict:
        if self.kind == "concurrency":
            return {"kind": "concurrency", "concurrency": self.concurrency}
        data: dict = {"kind": self.kind, "rate": self.rate}
        if self.kind == "gamma":
            data["burstiness"] = self.burstiness
        if self.spacing != "window":
            data["spacing"] = self.spacing
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Arrival:
        return cls(
            kind=data["kind"],
            rate=data.get("rate"),
            burstiness=data.get("burstiness", 1.0),
            concurrency=data.get("concurrency"),
            spacing=data.get("spacing") or "window",
        )

    def schedule(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, float]:
        """``n`` send offsets offering exactly ``rate`` by this arrival's spacing, and the window (s)."""
        if n <= 0:
            return np.zeros(0), 0.0
        rate = float(self.rate)  # type: ignore[arg-type]
        window = n / rate
        gaps = self.gaps(n, rng)
        total = float(gaps.sum())
        if not total > 0:  # all-zero draws cannot happen for rate > 0; keep the schedule defined
            gaps = np.full(n, 1.0 / rate)
            total = window
        scaled = gaps * (window / total)
        cum = np.cumsum(scaled)
        if self.spacing == "vllm":
            cum[-1] = window  # exactly, not up to summation rounding
            return cum, window
        return np.concatenate(([0.0], cum[:-1])), window

    def gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` inter-arrival gaps in seconds (zeros for a closed loop)."""
        if self.kind == "concurrency":
            return np.zeros(n)
        rate = float(self.rate)  # type: ignore[arg-type]
        if self.kind == "constant":
            return np.full(n, 1.0 / rate)
        if self.kind == "poisson":
            return rng.exponential(1.0 / rate, size=n)
        return rng.gamma(self.burstiness, 1.0 / (rate * self.burstiness), size=n)


def constant(rate: float) -> Arrival:
    """Requests exactly every ``1/rate`` seconds."""
    return Arrival(kind="constant", rate=rate)


def poisson(rate: float) -> Arrival:
    """A Poisson process of ``rate`` requests per second."""
    return Arrival(kind="poisson", rate=rate)


def gamma(rate: float, burstiness: float = 1.0) -> Arrival:
    """Gamma-distributed gaps with mean ``1/rate`` and shape ``burstiness`` (vLLM's definition)."""
    return Arrival(kind="gamma", rate=rate, burstiness=burstiness)


def fixed_concurrency(n: int) -> Arrival:
    """A closed loop of ``n`` clients that each send again as soon as their request finished."""
    return Arrival(kind="concurrency", concurrency=n)


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution; build it with ``fixed``/``uniform``/``normal``/``lognormal``."""

    kind: str
    value: float | None = None  # fixed
    low: int | None = None  # uniform
    high: int | None = None
    mean: float | None = None  # normal, lognormal
    std: float | None = None  # normal
    sigma: float | None = None  # lognormal
    min: int = 1
    max: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_KINDS:
            raise ValueError(f"unknown length distribution {self.kind!r}")
        needed = {
            "fixed": ("value",),
            "uniform": ("low", "high"),
            "normal": ("mean", "std"),
            "lognormal": ("mean", "sigma"),
        }[self.kind]
        for name in needed:
            if getattr(self, name) is None:
                raise ValueError(f"{self.kind} lengths need {name}")
        if self.kind == "uniform" and self.low > self.high:  # type: ignore[operator]
            raise ValueError("uniform lengths need low <= high")
        if self.min < 1 or (self.max is not None and self.max < self.min):
            raise ValueError("length bounds must satisfy 1 <= min <= max")

    def to_dict(self) -> dict:
        data = {"kind": self.kind}
        for name in ("value", "low", "high", "mean", "std", "sigma", "max"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        if self.min != 1:
            data["min"] = self.min
        return data

    @classmethod
    def from_dict(cls, data: dict) -> LengthDist:
        return cls(**data)

    @property
    def expected(self) -> float:
        """The mean before rounding and clipping."""
        if self.kind == "fixed":
            return float(self.value)  # type: ignore[arg-type]
        if self.kind == "uniform":
            return (self.low + self.high) / 2  # type: ignore[operator]
        return float(self.mean)  # type: ignore[arg-type]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` integer lengths (int64)."""
        if self.kind == "fixed":
            raw = np.full(n, float(self.value))  # type: ignore[arg-type]
        elif self.kind == "uniform":
            raw = rng.integers(self.low, self.high + 1, size=n).astype(float)  # type: ignore[operator]
        elif self.kind == "normal":
            raw = rng.normal(self.mean, self.std, size=n)
        else:
            sigma = float(self.sigma)  # type: ignore[arg-type]
            mu = math.log(float(self.mean)) - sigma * sigma / 2  # type: ignore[arg-type]
            raw = rng.lognormal(mu, sigma, size=n)
        out = np.rint(raw)
        upper = self.max if self.max is not None else np.inf
        return np.clip(out, self.min, upper).astype(np.int64)


def fixed(value: int) -> LengthDist:
    """Every request has exactly ``value`` tokens."""
    return LengthDist(kind="fixed", value=value)


def uniform(low: int, high: int) -> LengthDist:
    """Integers drawn uniformly from ``low..high`` inclusive."""
    return LengthDist(kind="uniform", low=low, high=high)


def normal(mean: float, std: float, *, min: int = 1, max: int | None = None) -> LengthDist:  # noqa: A002
    """Normal lengths, rounded and clipped to ``[min, max]``."""
    return LengthDist(kind="normal", mean=mean, std=std, min=min, max=max)


def lognormal(mean: float, sigma: float, *, min: int = 1, max: int | None = None) -> LengthDist:  # noqa: A002
    """Log-normal lengths with mean ``mean`` and log-space spread ``sigma``, rounded and clipped."""
    return LengthDist(kind="lognormal", mean=mean, sigma=sigma, min=min, max=max)


def load_empirical(path: str | Path) -> list[tuple[int, int]]:
    """(input_len, output_len) pairs from a JSONL file; blank lines are skipped.

    Every length must be a positive integer: a zero or negative length is an error naming its line,
    never silently clipped (a file of zeros would otherwise run as a file of ones).
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the length file ({exc.strerror or exc})") from exc
    return parse_empirical(raw, name=str(path))


def parse_empirical(raw: bytes, *, name: str = "length file") -> list[tuple[int, int]]:
    """``load_empirical`` on bytes already read (an upload): UTF-8 JSONL of positive lengths."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name}: not UTF-8 text (byte {exc.start})") from exc
    pairs = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            a, b = row["input_len"], row["output_len"]
            if isinstance(a, bool) or isinstance(b, bool) or int(a) != a or int(b) != b:
                raise ValueError
            a, b = int(a), int(b)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{name}:{lineno}: needs integer input_len and output_len") from exc
        if a < 1 or b < 1:
            raise ValueError(f"{name}:{lineno}: lengths must be >= 1 (input_len {a}, output_len {b})")
        pairs.append((a, b))
    if not pairs:
        raise ValueError(f"{name}: no rows (the file is empty)")
    return pairs


@dataclass(slots=True)
class RequestSchedule:
    """Sampled requests: arrival offsets (seconds from start), lengths and prefix sharing, as arrays."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    prefix_group: np.ndarray  # -1: no shared prefix
    prefix_len: np.ndarray  # tokens of the prompt that are the group's common text
    concurrency: int | None = None  # set for closed-loop workloads
    window_s: float = 0.0  # open loop: the planned window, len / rate seconds (module docstring)

    def __len__(self) -> int:
        return len(self.input_len)

    def rows(self) -> list[dict]:
        """One dict per request, for senders that iterate."""
        return [
            {
                "arrival_s": float(a),
                "input_len": int(i),
                "output_len": int(o),
                "prefix_group": int(g),
                "prefix_len": int(p),
            }
            for a, i, o, g, p in zip(
                self.arrival_s,
                self.input_len,
                self.output_len,
                self.prefix_group,
                self.prefix_len,
                strict=True,
            )
        ]


@dataclass(slots=True)
class Workload:
    """Arrival process + length distributions (or empirical pairs) + shared-prefix settings."""

    arrival: Arrival
    input: LengthDist | None = None
    output: LengthDist | None = None
    empirical_path: str | None = None
    empirical: list[tuple[int, int]] | None = field(default=None, repr=False)
    shared_prefix_ratio: float = 0.0
    prefix_groups: int = 1

    def __post_init__(self) -> None:
        if self.empirical is None and self.empirical_path:
            self.empirical = load_empirical(self.empirical_path)
        if self.empirical is None and (self.input is None or self.output is None):
            raise ValueError("a workload needs input and output distributions or empirical pairs")
        if self.empirical is not None:
            if not self.empirical:
                raise ValueError("empirical lengths: no pairs (the dataset is empty)")
            for k, (a, b) in enumerate(self.empirical):
                if a < 1 or b < 1:
                    raise ValueError(f"empirical lengths: pair {k + 1} has a length below 1 ({a}, {b})")
        if not 0.0 <= self.shared_prefix_ratio <= 1.0:
            raise ValueError("shared_prefix_ratio must be in [0, 1]")
        if self.prefix_groups < 1:
            raise ValueError("prefix_groups must be >= 1")

    def to_dict(self) -> dict:
        """JSON-able form; empirical pairs are stored inline unless they came from a path."""
        data: dict = {"arrival": self.arrival.to_dict()}
        if self.input is not None:
            data["input"] = self.input.to_dict()
        if self.output is not None:
            data["output"] = self.output.to_dict()
        if self.empirical_path:
            data["empirical_path"] = self.empirical_path
        elif self.empirical is not None:
            data["empirical"] = [list(p) for p in self.empirical]
        if self.shared_prefix_ratio:
            data["shared_prefix_ratio"] = self.shared_prefix_ratio
            data["prefix_groups"] = self.prefix_groups
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Workload:
        empirical = data.get("empirical")
        return cls(
            arrival=Arrival.from_dict(data["arrival"]),
            input=LengthDist.from_dict(data["input"]) if data.get("input") else None,
            output=LengthDist.from_dict(data["output"]) if data.get("output") else None,
            empirical_path=data.get("empirical_path"),
            empirical=[(int(a), int(b)) for a, b in empirical] if empirical else None,
            shared_prefix_ratio=float(data.get("shared_prefix_ratio", 0.0)),
            prefix_groups=int(data.get("prefix_groups", 1)),
        )

    def max_lengths(self) -> tuple[int | None, int | None]:
        """The longest input and output a sample can have (``None``: unbounded, e.g. normal without max)."""
        if self.empirical is not None:
            return max(p[0] for p in self.empirical), max(p[1] for p in self.empirical)

        def top(d: LengthDist) -> int | None:
            if d.kind == "fixed":
                bound = int(round(float(d.value)))  # type: ignore[arg-type]
            elif d.kind == "uniform":
                bound = int(d.high)  # type: ignore[arg-type]
            else:
                return d.max
            bound = max(bound, d.min)
            return min(bound, d.max) if d.max is not None else bound

        return top(self.input), top(self.output)  # type: ignore[arg-type]

    @property
    def mean_input_len(self) -> float:
        if self.empirical is not None:
            return float(np.mean([p[0] for p in self.empirical]))
        return self.input.expected  # type: ignore[union-attr]

    @property
    def mean_output_len(self) -> float:
        if self.empirical is not None:
            return float(np.mean([p[1] for p in self.empirical]))
        return self.output.expected  # type: ignore[union-attr]

    def sample_requests(
        self, n: int | None = None, *, duration: float | None = None, seed: int = 0
    ) -> RequestSchedule:
        """Sample ``n`` requests, or all requests arriving within ``duration`` seconds.

        Deterministic for a seed. Closed-loop (fixed-concurrency) workloads need ``n``: their
        arrival times depend on the server, so the count cannot follow from a duration.
        """
        if (n is None) == (duration is None):
            raise ValueError("give exactly one of n or duration")
        rng = np.random.Generator(np.random.PCG64(seed))
        if n is not None and n < 0:
            raise ValueError("n must be >= 0")
        if self.arrival.closed_loop:
            if n is None:
                raise ValueError("closed-loop (fixed_concurrency) workloads need n, not duration")
            arrivals, window = np.zeros(n), 0.0
        else:
            if n is None:
                assert duration is not None
                if not duration > 0:
                    raise ValueError("duration must be > 0")
                # The window holds exactly rate * duration requests (at least one).
                n = max(1, int(round(duration * float(self.arrival.rate))))  # type: ignore[arg-type]
            arrivals, window = self.arrival.schedule(n, rng)
        # Lengths come from a second stream so that the same seed gives the same lengths for any
        # arrival process (comparing processes then compares like with like).
        lrng = np.random.Generator(np.random.PCG64([seed, 1]))
        if self.empirical is not None:
            pairs = np.asarray(self.empirical, dtype=np.int64)
            idx = lrng.integers(0, len(pairs), size=n)
            inp = pairs[idx, 0].copy()
            out = pairs[idx, 1].copy()
        else:
            inp = self.input.sample(n, lrng)  # type: ignore[union-attr]
            out = self.output.sample(n, lrng)  # type: ignore[union-attr]
        if self.shared_prefix_ratio > 0:
            prng = np.random.Generator(np.random.PCG64([seed, 2]))
            groups = prng.integers(0, self.prefix_groups, size=n).astype(np.int64)
            plen = np.floor(self.shared_prefix_ratio * inp).astype(np.int64)
        else:
            groups = np.full(n, -1, dtype=np.int64)
            plen = np.zeros(n, dtype=np.int64)
        return RequestSchedule(
            arrival_s=np.asarray(arrivals, dtype=np.float64),
            input_len=inp,
            output_len=out,
            prefix_group=groups,
            prefix_len=plen,
            concurrency=self.arrival.concurrency if self.arrival.closed_loop else None,
            window_s=window,
        )
