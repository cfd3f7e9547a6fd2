"""Turn harness output into the stored report, its CSV export and the charts' data.

The stored ``results`` has one shape for every mode and kind:

- ``stages``: one summary per stage, in the order run (``metrics.summarize`` keys plus ``level``);
- ``curve``: per level, the figures the charts plot (sorted by level);
- ``capacity``: the capacity goodput and how it was found (a sweep's search, or the highest level
  of a ladder/single stage that met the SLA — the report says which), with per-GPU figures;
- ``cost``: GPU $/hour × GPUs and $ per million tokens at that goodput (docs/domain.md formula);
- ``warnings``: everything the reader must see (client-bound stages, errors, missing usage, a
  stage whose lengths or offered rate differ from the named ones by more than 2 %);
- ``cross_check`` (once asked for): per stage, the same requests replayed by ``vllm bench serve``
  and both tools' figures side by side (``loadtest.crosscheck``).
"""

from __future__ import annotations

import csv
import io

from loadtest.sweep import curve_point, stage_passes, usd_per_million_tokens

CSV_COLUMNS = [
    ("stage", "stage"),
    ("level", "offered level"),
    ("level_unit", "unit"),
    ("requests", "requests"),
    ("completed", "completed"),
    ("failed", "failed"),
    ("error_rate", "error rate"),
    ("errors", "errors by type"),
    ("attainment", "SLA attainment"),
    ("request_goodput", "request goodput (req/s)"),
    ("token_goodput", "token goodput (output tok/s)"),
    ("total_token_goodput", "total-token goodput (tok/s)"),
    ("request_throughput", "request throughput (req/s)"),
    ("output_token_throughput", "output throughput (tok/s)"),
    ("total_token_throughput", "total throughput (tok/s)"),
    ("ttft_ms.mean", "TTFT mean (ms)"),
    ("ttft_ms.p50", "TTFT p50 (ms)"),
    ("ttft_ms.p90", "TTFT p90 (ms)"),
    ("ttft_ms.p95", "TTFT p95 (ms)"),
    ("ttft_ms.p99", "TTFT p99 (ms)"),
    ("tpot_ms.mean", "TPOT mean (ms)"),
    ("tpot_ms.p50", "TPOT p50 (ms)"),
    ("tpot_ms.p90", "TPOT p90 (ms)"),
    ("tpot_ms.p95", "TPOT p95 (ms)"),
    ("tpot_ms.p99", "TPOT p99 (ms)"),
    ("itl_ms.mean", "ITL mean (ms)"),
    ("itl_ms.p50", "ITL p50 (ms)"),
    ("itl_ms.p99", "ITL p99 (ms)"),
    ("e2e_ms.mean", "E2E mean (ms)"),
    ("e2e_ms.p50", "E2E p50 (ms)"),
    ("e2e_ms.p90", "E2E p90 (ms)"),
    ("e2e_ms.p99", "E2E p99 (ms)"),
    ("schedule_delay_ms.p50", "schedule delay p50 (ms)"),
    ("offered.planned_offered_rate", "planned offered rate (req/s)"),
    ("offered.achieved_offered_rate", "achieved offered rate (req/s)"),
    ("offered.offered_rate_error_pct", "offered rate error (%)"),
    ("lengths.input.requested.mean", "input tokens requested mean"),
    ("lengths.input.actual.mean", "input tokens actual mean"),
    ("lengths.input.mean_error_pct", "input length error (%)"),
    ("lengths.output.requested.mean", "output tokens requested mean"),
    ("lengths.output.actual.mean", "output tokens actual mean"),
    ("lengths.output.mean_error_pct", "output length error (%)"),
    ("lengths.source", "token counts from"),
    ("warmup.requests", "warm-up requests (excluded)"),
    ("client_bound", "client-bound"),
    ("kv_usage_peak", "KV usage peak"),
    ("duration_s", "duration (s)"),
]


def level_of(offered: dict) -> tuple[float | None, str]:
    if offered.get("kind") == "concurrency":
        return offered.get("concurrency"), "concurrent streams"
    return offered.get("rate"), "req/s"


def build_results(
    *,
    stages: list,
    sla: dict,
    snapshot: dict,
    target_attainment: float,
    sweep: dict | None = None,
) -> tuple[dict, list[dict]]:
    """(results, series) from the StageResults run, plus the sweep's search record if there was one."""
    stage_dicts = []
    series: list[dict] = []
    offset = 0.0
    warnings: list[str] = []
    for k, st in enumerate(stages):
        s = dict(st.summary)
        level, unit = level_of(s.get("offered", {}))
        s.update(
            stage=k + 1,
            level=level,
            level_unit=unit,
            notes=st.notes,
            passed=stage_passes(s, target_attainment),
        )
        stage_dicts.append(s)
        for w in s.get("warnings", []):
            warnings.append(f"Stage {k + 1} ({level:g} {unit}): {w}" if level is not None else w)
        for note in st.notes:
            if note.startswith("no engine metrics"):
                warnings.append(f"Stage {k + 1}: {note}")
        # One time axis over all stages, so the KV chart reads left to right through the run.
        for sample in st.series:
            series.append({**sample, "stage": k + 1, "t": round(offset + sample["t"], 3)})
        offset += max([s.get("duration_s") or 0.0] + [x["t"] for x in st.series]) + 1.0
    curve = sorted(
        (
            {**curve_point(d["level"], st, target_attainment), "level": d["level"]}
            for d, st in zip(stage_dicts, stages, strict=True)
        ),
        key=lambda p: (p["level"] is None, p["level"] or 0),
    )
    capacity = _capacity(stage_dicts, snapshot=snapshot, sweep=sweep, target_attainment=target_attainment)
    cost = _cost(capacity, snapshot)
    if capacity["rate"] is None:
        warnings.append(
            f"No stage met the SLA at {target_attainment:.0%} attainment: there is no capacity goodput to price."
        )
    results = {
        "sla": sla,
        "target_attainment": target_attainment,
        "stages": stage_dicts,
        "curve": curve,
        "capacity": capacity,
        "cost": cost,
        "sweep": sweep or None,
        "totals": {
            "requests": sum(d["requests"] for d in stage_dicts),
            "failed": sum(d["failed"] for d in stage_dicts),
            "errors": _merge_errors(stage_dicts),
        },
        "client_bound": any(d["client_bound"] for d in stage_dicts),
        "warnings": warnings,
    }
    return results, series


def _merge_errors(stage_dicts: list[dict]) -> dict:
    out: dict[str, int] = {}
    for d in stage_dicts:
        for k, v in d.get("errors", {}).items():
            out[k] = out.get(k, 0) + v
    return out


def _capacity(
    stage_dicts: list[dict], *, snapshot: dict, sweep: dict | None, target_attainment: float
) -> dict:
    """The figure capacity and cost use: never peak throughput that breaks the SLA (docs/domain.md)."""
    rate_stages = [d for d in stage_dicts if d.get("level_unit") == "req/s"]
    passing = [d for d in (rate_stages or stage_dicts) if d["passed"]]
    best = max(passing, key=lambda d: d["level"] or 0.0, default=None)
    if sweep:
        method = "sweep"
        how = (
            f"Bracketing search over offered rate: highest rate with attainment ≥ {target_attainment:.0%}, "
            f"bracket {sweep.get('bracket')}, {'converged' if sweep.get('converged') else 'NOT converged'}."
        )
    else:
        method = "best_stage"
        how = (
            f"Highest offered level of this run that met the SLA at ≥ {target_attainment:.0%} attainment "
            "(no search: a sweep gives the tighter figure)."
        )
    gpus = snapshot.get("gpus") or 0
    out = {
        "method": method,
        "how": how,
        "rate": best["level"] if best else None,
        "level_unit": best["level_unit"] if best else None,
        "stage": best["stage"] if best else None,
        "attainment": best["attainment"] if best else None,
        "request_goodput": best["request_goodput"] if best else None,
        "token_goodput": best["token_goodput"] if best else None,
        "total_token_goodput": best["total_token_goodput"] if best else None,
        "gpus": gpus or None,
        "per_gpu": None,
    }
    if best and gpus:
        out["per_gpu"] = {
            "rate": (best["level"] or 0) / gpus if best["level_unit"] == "req/s" else None,
            "request_goodput": best["request_goodput"] / gpus,
            "token_goodput": best["token_goodput"] / gpus,
            "total_token_goodput": best["total_token_goodput"] / gpus,
        }
    return out


def _cost(capacity: dict, snapshot: dict) -> dict:
    """docs/domain.md: ``$ per million tokens = GPU $/hour / goodput tokens per hour * 1,000,000``."""
    per_gpu_hour = snapshot.get("gpu_usd_per_hour")
    gpus = snapshot.get("gpus") or 0
    if per_gpu_hour is None or not gpus:
        return {
            "available": False,
            "why": "No GPU type or GPU count is known for this target, so no cost basis.",
        }
    usd_per_hour = float(per_gpu_hour) * gpus
    tok = capacity.get("token_goodput") or 0.0
    total = capacity.get("total_token_goodput") or 0.0
    return {
        "available": True,
        "gpu_type": snapshot.get("gpu_type"),
        "gpu_usd_per_hour": float(per_gpu_hour),
        "gpus": gpus,
        "usd_per_hour": usd_per_hour,
        "usd_per_mtok_output": usd_per_million_tokens(usd_per_hour=usd_per_hour, tokens_per_s=tok),
        "usd_per_mtok_total": usd_per_million_tokens(usd_per_hour=usd_per_hour, tokens_per_s=total),
        "formula": "GPU $/hour × GPUs ÷ (goodput tokens/s × 3600) × 1,000,000",
    }


def _get(d: dict, dotted: str):
    cur = d
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def results_csv(results: dict) -> str:
    """One row per stage with every figure of the report, headers with units."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([label for _, label in CSV_COLUMNS])
    for st in results.get("stages", []):
        row = []
        for key, _ in CSV_COLUMNS:
            v = _get(st, key)
            if key == "errors":
                v = "; ".join(f"{k}={n}" for k, n in (v or {}).items())
            elif isinstance(v, float):
                v = f"{v:.6g}"
            row.append("" if v is None else v)
        w.writerow(row)
    return buf.getvalue()


def chart_data(results: dict, series: list[dict]) -> dict:
    """What the detail page's Chart.js charts plot (also used by the comparison page)."""
    curve = results.get("curve", [])
    stages = results.get("stages", [])
    best = results.get("capacity", {}).get("stage")
    hist_stage = next((s for s in stages if s["stage"] == best), stages[-1] if stages else None)
    return {
        "unit": stages[0]["level_unit"] if stages else "req/s",
        "levels": [p["level"] for p in curve],
        "attainment": [p["attainment"] for p in curve],
        "request_goodput": [p["request_goodput"] for p in curve],
        "request_throughput": [p["request_throughput"] for p in curve],
        "token_goodput": [p["token_goodput"] for p in curve],
        "ttft_p50": [p["ttft_p50"] for p in curve],
        "ttft_p99": [p["ttft_p99"] for p in curve],
        "tpot_p50": [p["tpot_p50"] for p in curve],
        "tpot_p99": [p["tpot_p99"] for p in curve],
        "hist_stage": hist_stage["stage"] if hist_stage else None,
        "ttft_hist": (hist_stage or {}).get("histograms", {}).get("ttft_ms", {"edges": [], "counts": []}),
        "tpot_hist": (hist_stage or {}).get("histograms", {}).get("tpot_ms", {"edges": [], "counts": []}),
        "series_t": [s["t"] for s in series],
        "series_kv": [s.get("kv_usage") for s in series],
        "series_running": [s.get("running") for s in series],
        "series_waiting": [s.get("waiting") for s in series],
    }
