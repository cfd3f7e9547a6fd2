"""Simulator calibrations: import one fitted on measured load levels, and what a prediction is based on.

A calibration comes from ``python -m benchmarks.simulator --calibration-points POINTS --json FILE``
(points measured by ``python -m benchmarks.vllm_cpu_points`` or the same tool against a GPU host):
the efficiencies it fitted, the load levels it fitted them on, and the error of the medians on the
levels it left out. Imported for a GPU type, it is what every later prediction on that GPU type
runs with, and each predicted figure carries its interval. Without one, predictions use the GPU
preset's documented default efficiencies and say that they come with no interval.
"""

from __future__ import annotations

import math

from django.core.exceptions import ValidationError
from django.db import transaction

from audit.services import audit_record
from engines.device import cpu_device, device_differences
from engines.perf import Efficiency, default_efficiency
from evaluations.models import SimulatorCalibration

METRICS = ("ttft", "tpot")
EVALUATIONS = ("held-out", "in-sample")
NO_CALIBRATION_WHY = (
    "no held-out measurements of this configuration; calibrate with benchmarks.vllm_cpu_points and "
    "benchmarks.simulator, then import the report (manage.py calibration_import, docs/engines.md)"
)


def _efficiency(params) -> Efficiency:
    if not isinstance(params, dict) or not params:
        raise ValidationError({"calib_params": "The report has no fitted efficiencies (calib_params)."})
    known = set(Efficiency.__dataclass_fields__)
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValidationError({"calib_params": f"Unknown efficiency fields: {', '.join(unknown)}."})
    bad = [
        k
        for k, v in params.items()
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
    ]
    if bad:
        raise ValidationError({"calib_params": f"Not finite numbers: {', '.join(sorted(bad))}."})
    try:
        return Efficiency(**{**default_efficiency("").as_dict(), **params})
    except ValueError as exc:
        raise ValidationError({"calib_params": str(exc)}) from exc


def _interval(value, evaluation: str) -> dict:
    if evaluation == "in-sample":
        return {}  # every level was in the fit: its residuals say nothing about unseen loads
    if not isinstance(value, dict):
        raise ValidationError({"calib_interval_pct": "A held-out calibration needs calib_interval_pct."})
    out = {}
    for metric in METRICS:
        pair = value.get(metric)
        if pair is None:
            out[metric] = None
            continue
        ok = (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in pair)
            and -100 < pair[0] <= pair[1]
        )
        if not ok:
            raise ValidationError(
                {"calib_interval_pct": f"{metric}: expected [low, high] in percent, low ≤ high, low > −100."}
            )
        out[metric] = [float(pair[0]), float(pair[1])]
    if not any(out.values()):
        raise ValidationError({"calib_interval_pct": "No metric has an interval: nothing was held out."})
    return out


def _device(value) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or value.get("kind") not in ("cpu", "gpu") or not value.get("model"):
        raise ValidationError(
            {
                "calib_device": "Expected the device record benchmarks.vllm_cpu_points writes (kind cpu or gpu, model)."
            }
        )
    return value


RANGE_KEYS = ("input_len", "output_len", "concurrency", "rate")


def _range(value) -> dict:
    if value is None:
        return {}
    ok = isinstance(value, dict) and all(
        k in RANGE_KEYS
        and (
            v is None
            or (
                isinstance(v, list)
                and len(v) == 2
                and all(
                    isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in v
                )
                and v[0] <= v[1]
            )
        )
        for k, v in value.items()
    )
    if not ok:
        raise ValidationError(
            {"calib_range": f"Expected {{name: [low, high]}} for names among {', '.join(RANGE_KEYS)}."}
        )
    return value


def _error(value, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValidationError({name: "Expected a non-negative number of percent."})
    return float(value)


def calibration_import(
    *, gpu_type, report: object, actor, source: str = "", note: str = ""
) -> SimulatorCalibration:
    """Store a ``benchmarks.simulator`` calibration report for ``gpu_type`` (audited); refuses a
    report that is not one, naming the field, and stores nothing then."""
    if not isinstance(report, dict):
        raise ValidationError({"report": "Expected the JSON object that benchmarks.simulator --json writes."})
    evaluation = report.get("calib_eval")
    if evaluation not in EVALUATIONS:
        raise ValidationError(
            {"calib_eval": "Not a calibration report: calib_eval must be held-out or in-sample "
                           "(run benchmarks.simulator with --calibration-points)."}
        )  # fmt: skip
    efficiency = _efficiency(report.get("calib_params"))
    interval = _interval(report.get("calib_interval_pct"), evaluation)
    device = _device(report.get("calib_device"))
    calibrated_range = _range(report.get("calib_range"))
    held_out = report.get("calib_held_out") or []
    fit_levels = report.get("calib_fit_levels") or []
    if not isinstance(held_out, list) or not isinstance(fit_levels, list):
        raise ValidationError({"calib_held_out": "calib_held_out and calib_fit_levels must be lists."})
    with transaction.atomic():
        row = SimulatorCalibration.objects.create(
            gpu_type=gpu_type,
            efficiency=efficiency.as_dict(),
            interval_pct=interval,
            evaluation=evaluation,
            fit_levels=[str(x) for x in fit_levels],
            held_out=held_out,
            device=device,
            calibrated_range=calibrated_range,
            ttft_err_pct=_error(report.get("calib_ttft_err_pct"), "calib_ttft_err_pct"),
            tpot_err_pct=_error(report.get("calib_tpot_err_pct"), "calib_tpot_err_pct"),
            source=str(source)[:300],
            measured_at=str(report.get("calib_measured_at") or "")[:40],
            note=note,
            created_by=actor if getattr(actor, "pk", None) else None,
        )
        audit_record(
            actor=actor,
            action="simulator_calibration.import",
            target=row,
            after={
                "gpu_type": gpu_type.name,
                "efficiency": row.efficiency,
                "interval_pct": row.interval_pct,
                "evaluation": evaluation,
                "fit_levels": row.fit_levels,
                "device": device,
                "source": row.source,
            },
            reason=note,
        )
    return row


def calibration_current(*, gpu_type_id: int) -> SimulatorCalibration | None:
    """The newest calibration of a GPU type, or None."""
    return SimulatorCalibration.objects.filter(gpu_type_id=gpu_type_id).order_by("-created_at", "-pk").first()


def prediction_device(*, gpu_type) -> dict:
    """The device a prediction on ``gpu_type`` is for: this host for the ``CPU`` type (vLLM-CPU runs
    where Governor runs it), otherwise the catalog's GPU model."""
    if gpu_type.name.strip().upper() == "CPU":
        return cpu_device()
    return {"kind": "gpu", "model": gpu_type.name, "memory_mib": float(gpu_type.memory_gib) * 1024}


def prediction_basis(*, gpu_type) -> tuple[Efficiency | None, dict]:
    """What a prediction on ``gpu_type`` runs with: ``(efficiency or None for the preset's default,
    the basis a report or page shows: calibration, efficiencies, interval or why there is none)``.

    A calibration measured on another device (engines.device) is not used: the prediction runs on
    the preset's defaults and its basis says "uncalibrated for this device" and why."""
    cal = calibration_current(gpu_type_id=gpu_type.pk)
    mismatch = device_differences(cal.device, prediction_device(gpu_type=gpu_type)) if cal else []
    if cal is None or mismatch:
        eff = default_efficiency(gpu_type.to_spec().name)
        basis = {
            "calibration": f"default efficiencies for {gpu_type.name} (engines.perf), not calibrated on measurements",
            "calibration_id": None,
            "efficiency": eff.as_dict(),
            "interval_pct": None,
            "interval_why": NO_CALIBRATION_WHY,
        }
        if mismatch:
            basis["calibration"] = (
                f"uncalibrated for this device: calibration #{cal.pk} for {gpu_type.name} was measured on "
                f"another device ({'; '.join(mismatch)}); default efficiencies, no interval"
            )
            basis["uncalibrated_device"] = mismatch
            basis["interval_why"] = "the only calibration was measured on another device: " + "; ".join(
                mismatch
            )
        return None, basis
    levels = ", ".join(cal.fit_levels) or "?"
    basis = {
        "calibration": f"simulator calibration #{cal.pk} for {gpu_type.name}, fitted on {levels}"
        + (f" ({cal.source})" if cal.source else ""),
        "calibration_id": cal.pk,
        "efficiency": cal.efficiency,
        "interval_pct": cal.interval_pct or None,
        "interval_why": ""
        if cal.interval_pct
        else "the calibration was judged in-sample only: no level was held out",
        "held_out_err_pct": {"ttft": cal.ttft_err_pct, "tpot": cal.tpot_err_pct},
        "calibrated_range": cal.calibrated_range or None,
    }
    return Efficiency.from_dict(cal.efficiency), basis


# How much wider a predicted median's interval is where the workload leaves the calibrated range:
# the held-out residuals were measured inside it and say nothing certain outside.
EXTRAPOLATION_WIDENING = 2.0


def extrapolation(calibrated_range: dict | None, **workload: float | None) -> list[str]:
    """Which of ``workload``'s figures (mean input_len/output_len, concurrency, rate) lie outside the
    calibrated range; empty when all lie inside or nothing is known."""
    out = []
    for name, value in workload.items():
        bounds = (calibrated_range or {}).get(name)
        if value is None or not bounds:
            continue
        if not bounds[0] <= value <= bounds[1]:
            out.append(f"{name} {value:g} outside the calibrated {bounds[0]:g}–{bounds[1]:g}")
    return out


def with_interval(
    value: float | None, interval_pct: dict | None, metric: str, *, widen: float = 1.0
) -> list[float] | None:
    """``[low, high]`` around a predicted median from a calibration's interval, or None; ``widen``
    multiplies both sides' percentages (the low side stays above −100 %)."""
    pair = (interval_pct or {}).get(metric)
    if value is None or not pair:
        return None
    lo = max(pair[0] * widen, -99.0) if pair[0] < 0 else pair[0] * widen
    hi = pair[1] * widen
    return [value * (1 + lo / 100), value * (1 + hi / 100)]
