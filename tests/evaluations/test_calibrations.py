"""Simulator calibrations: importing a benchmarks.simulator report, refusing what is not one, and
predicted runs and planner rows that run with it and carry its interval on every predicted median."""

from __future__ import annotations

import json
import math

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.urls import reverse

from audit.models import AuditEvent
from evaluations.models import SimulatorCalibration
from evaluations.services.benchmarks import benchmark_run_create, benchmark_run_execute
from evaluations.services.calibrations import calibration_import, prediction_basis, with_interval
from tests.factories import GpuTypeFactory, ModelVersionFactory

pytestmark = pytest.mark.django_db

# The shape benchmarks.simulator --calibration-points … --json writes (trimmed to what is imported).
REPORT = {
    "calib_eval": "held-out",
    "calib_params": {"mfu": 0.3, "mbu": 0.5, "step_overhead_s": 0.005, "per_seq_overhead_s": 0.0001,
                     "tp_comm_efficiency": 0.7, "allreduce_latency_s": 1e-05, "request_overhead_s": 0.4},
    "calib_interval_pct": {"ttft": [-12.5, 20.0], "tpot": [-5.0, 8.0]},
    "calib_fit_levels": ["c1", "c8", "r2"],
    "calib_held_out": [{"level": "c4", "ttft_err_pct": 11.0, "tpot_err_pct": -4.0}],
    "calib_ttft_err_pct": 18.2,
    "calib_tpot_err_pct": 7.1,
    "calib_measured_at": "2026-11-30T10:00:00Z",
    # What nvidia-smi reports for an H100 SXM (the factory's GPU type).
    "calib_device": {"kind": "gpu", "model": "NVIDIA H100 80GB HBM3", "driver": "550.54.15", "memory_mib": 81559},
}  # fmt: skip


def _run(gpu, actor):
    run = benchmark_run_create(
        actor=actor,
        kind="predicted",
        model_version=ModelVersionFactory(),
        gpu_type=gpu,
        workload={
            "arrival": {"kind": "concurrency", "concurrency": 2},
            "input": {"kind": "fixed", "value": 128},
            "output": {"kind": "fixed", "value": 16},
        },
        sla={"ttft_ms": 5000, "tpot_ms": 500},
        stage={"num_requests": 8},
        enqueue=False,
    )
    return benchmark_run_execute(run_id=run.pk)


def test_import_stores_the_fit_and_its_interval_and_audits_it(admin_user):
    gpu = GpuTypeFactory()
    cal = calibration_import(
        gpu_type=gpu, report=REPORT, actor=admin_user, source="tiny.json", note="quiet host"
    )
    assert cal.interval_pct == {"ttft": [-12.5, 20.0], "tpot": [-5.0, 8.0]}
    assert cal.efficiency["request_overhead_s"] == 0.4 and cal.fit_levels == ["c1", "c8", "r2"]
    event = AuditEvent.objects.get(action="simulator_calibration.import")
    assert event.actor == admin_user.username and event.reason == "quiet host"
    efficiency, basis = prediction_basis(gpu_type=gpu)
    assert efficiency.request_overhead_s == 0.4 and basis["calibration_id"] == cal.pk
    assert "fitted on c1, c8, r2 (tiny.json)" in basis["calibration"]


def test_an_in_sample_fit_is_stored_without_an_interval(admin_user):
    gpu = GpuTypeFactory()
    calibration_import(gpu_type=gpu, report={**REPORT, "calib_eval": "in-sample"}, actor=admin_user)
    _, basis = prediction_basis(gpu_type=gpu)
    assert basis["interval_pct"] is None and "in-sample" in basis["interval_why"]


@pytest.mark.parametrize(
    ("report", "field"),
    [
        ([1, 2], "report"),
        ({**REPORT, "calib_eval": None}, "calib_eval"),
        ({**REPORT, "calib_params": {}}, "calib_params"),
        ({**REPORT, "calib_params": {"mfu": 0.3, "warp_speed": 9}}, "calib_params"),
        ({**REPORT, "calib_params": {"mfu": 2.0}}, "calib_params"),
        ({**REPORT, "calib_params": {"mfu": math.nan}}, "calib_params"),
        ({**REPORT, "calib_interval_pct": {"ttft": [20.0, -12.5], "tpot": None}}, "calib_interval_pct"),
        ({**REPORT, "calib_interval_pct": {"ttft": [-150.0, 1.0], "tpot": None}}, "calib_interval_pct"),
        ({**REPORT, "calib_interval_pct": {"ttft": None, "tpot": None}}, "calib_interval_pct"),
        ({**REPORT, "calib_interval_pct": None}, "calib_interval_pct"),
        ({**REPORT, "calib_ttft_err_pct": -3}, "calib_ttft_err_pct"),
        ({**REPORT, "calib_held_out": "c4"}, "calib_held_out"),
    ],
)
def test_what_is_not_a_calibration_report_is_refused_and_nothing_is_stored(admin_user, report, field):
    with pytest.raises(ValidationError) as exc:
        calibration_import(gpu_type=GpuTypeFactory(), report=report, actor=admin_user)
    assert field in exc.value.message_dict
    assert not SimulatorCalibration.objects.exists()
    assert not AuditEvent.objects.filter(action="simulator_calibration.import").exists()


def test_interval_around_a_median():
    assert with_interval(100.0, {"ttft": [-10.0, 25.0]}, "ttft") == [90.0, 125.0]
    assert with_interval(100.0, {"ttft": None}, "ttft") is None
    assert with_interval(None, {"ttft": [-10.0, 25.0]}, "ttft") is None


def test_a_predicted_run_runs_with_the_calibration_and_shows_each_median_with_its_interval(
    admin_user, auditor_client
):
    gpu = GpuTypeFactory()
    before = _run(gpu, admin_user)
    assert before.results["prediction"]["calibration_id"] is None
    assert all(st["p50_interval"] == {"ttft_ms": None, "tpot_ms": None} for st in before.results["stages"])

    cal = calibration_import(gpu_type=gpu, report=REPORT, actor=admin_user)
    after = _run(gpu, admin_user)
    basis = after.results["prediction"]
    assert basis["calibration_id"] == cal.pk and basis["efficiency"]["request_overhead_s"] == 0.4
    stage = after.results["stages"][0]
    # The fitted 400 ms per-request overhead is in every TTFT the simulator predicts.
    assert stage["ttft_ms"]["p50"] >= 400 > before.results["stages"][0]["ttft_ms"]["p50"]
    lo, hi = stage["p50_interval"]["ttft_ms"]
    assert lo == pytest.approx(stage["ttft_ms"]["p50"] * 0.875) and hi == pytest.approx(
        stage["ttft_ms"]["p50"] * 1.2
    )
    html = auditor_client.get(reverse("evaluations:run_detail", args=[after.pk])).content.decode()
    assert f"simulator calibration #{cal.pk}" in html
    assert html.count('class="text-muted p50-interval"') == 2 * len(after.results["stages"])
    assert f"p50 in [{lo:.1f} … {hi:.1f}]" in html


def test_the_planner_says_which_calibration_a_predicted_row_came_from(admin_user):
    from evaluations.services.planner import plan_row

    gpu = GpuTypeFactory()
    cal = calibration_import(gpu_type=gpu, report=REPORT, actor=admin_user)
    version = ModelVersionFactory()
    inputs = {"peak_qps": 1, "input_mean": 128, "input_sigma": 0.1, "output_mean": 16, "output_sigma": 0.1,
              "ttft_ms": 5000, "tpot_ms": 500, "redundancy": 1}  # fmt: skip
    row = plan_row(version_id=version.pk, gpu_type_id=gpu.pk, tensor_parallel=1, inputs=inputs)
    assert row["label"] == "predicted" and f"simulator calibration #{cal.pk}" in row["basis"]


def test_the_command_imports_a_report_and_refuses_bad_files_with_a_reason(tmp_path, admin_user):
    gpu = GpuTypeFactory()
    path = tmp_path / "calib.json"
    path.write_text(json.dumps(REPORT))
    call_command("calibration_import", str(path), "--gpu-type", gpu.name, "--actor", admin_user.username)
    assert SimulatorCalibration.objects.get().source == "calib.json"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CommandError, match="not a readable JSON report"):
        call_command("calibration_import", str(bad), "--gpu-type", gpu.name)
    with pytest.raises(CommandError, match="no GPU type named 'B300'"):
        call_command("calibration_import", str(path), "--gpu-type", "B300")
    path.write_text(json.dumps({"calib_eval": "held-out"}))
    with pytest.raises(CommandError, match="calib_params"):
        call_command("calibration_import", str(path), "--gpu-type", gpu.name)
    assert SimulatorCalibration.objects.count() == 1


# Two real hosts' /proc/cpuinfo (abridged): the AVX2-only EPYC the committed calibration was
# measured on, and an EPYC with AVX-512 BF16 where that calibration predicted TTFT 15x-660x too slow.
AVX2_EPYC = "model name\t: AMD EPYC 7B12\nflags\t\t: fpu sse sse2 ssse3 fma avx f16c avx2 bmi2\n"
AVX512_EPYC = (
    "model name\t: AMD EPYC 9B14\nflags\t\t: fpu sse sse2 fma avx f16c avx2 avx512f avx512dq avx512_bf16 "
    "avx512_vnni avx512vl\n"
)


def test_a_device_record_names_the_instruction_sets_that_decide_matmul_speed():
    from engines.device import cpu_device, device_differences

    avx2, avx512 = cpu_device(cpuinfo=AVX2_EPYC), cpu_device(cpuinfo=AVX512_EPYC)
    assert avx2["model"] == "AMD EPYC 7B12" and avx2["isa"] == ["avx2", "fma"]
    assert avx512["isa"] == ["avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"]
    why = device_differences(avx2, avx512)
    assert "this host adds avx512f, avx512_bf16, avx512_vnni" in " ".join(why)
    assert device_differences(avx2, cpu_device(cpuinfo=AVX2_EPYC)) == []
    assert device_differences(None, avx2) == ["the calibration does not record the device it was measured on"]
    # A measured peak far from the calibration's is another device even with the same flags.
    slow = {**avx2, "peak_tflops": 0.08}
    assert device_differences(slow, {**avx2, "peak_tflops": 0.4})
    assert device_differences(slow, {**avx2, "peak_tflops": 0.09}) == []


def test_gpu_devices_match_by_family_and_driver_reported_memory():
    from engines.device import device_differences

    smi = REPORT["calib_device"]
    assert device_differences(smi, {"kind": "gpu", "model": "H100 SXM", "memory_mib": 80 * 1024}) == []
    assert device_differences(smi, {"kind": "gpu", "model": "A100 80GB", "memory_mib": 80 * 1024})
    h200 = {"kind": "gpu", "model": "H100 NVL", "memory_mib": 94 * 1024}  # same family, other memory
    assert "81,559 MiB" in " ".join(device_differences(smi, h200))


def test_a_calibration_from_another_device_is_not_used_and_the_prediction_says_so(admin_user):
    """The failure the issue found: a calibration fitted on one CPU applied on another. A prediction
    for a device other than the calibration's runs on the defaults and is labelled, never silently."""
    from engines.device import cpu_device

    cpu_type = GpuTypeFactory(name="CPU", memory_gib=8, hbm_bandwidth_gbps=20, bf16_tflops=0.2)
    here = cpu_device()
    # Whatever this host is, the calibration's host differs in its instruction sets.
    other_isa = ["avx2", "fma"] if "avx512f" in here["isa"] else ["avx2", "fma", "avx512f", "avx512_bf16"]
    report = {**REPORT, "calib_device": {**here, "isa": other_isa}}
    cal = calibration_import(gpu_type=cpu_type, report=report, actor=admin_user)
    efficiency, basis = prediction_basis(gpu_type=cpu_type)
    assert efficiency is None and basis["calibration_id"] is None and basis["interval_pct"] is None
    assert basis["calibration"].startswith(f"uncalibrated for this device: calibration #{cal.pk}")
    assert "instruction sets differ" in " ".join(basis["uncalibrated_device"])

    # Measured on this host: used.
    same = calibration_import(gpu_type=cpu_type, report={**REPORT, "calib_device": here}, actor=admin_user)
    efficiency, basis = prediction_basis(gpu_type=cpu_type)
    assert basis["calibration_id"] == same.pk and efficiency is not None


def test_a_calibration_that_records_no_device_is_not_vouched_for(admin_user):
    gpu = GpuTypeFactory()
    report = {k: v for k, v in REPORT.items() if k != "calib_device"}
    calibration_import(gpu_type=gpu, report=report, actor=admin_user)
    efficiency, basis = prediction_basis(gpu_type=gpu)
    assert efficiency is None and "does not record the device" in basis["calibration"]
    run = _run(gpu, admin_user)
    assert run.results["prediction"]["calibration"].startswith("uncalibrated for this device")
    assert all(st["p50_interval"] == {"ttft_ms": None, "tpot_ms": None} for st in run.results["stages"])


def test_a_prediction_outside_the_calibrated_lengths_says_it_extrapolates_with_a_wider_interval(admin_user):
    gpu = GpuTypeFactory()
    inside = {"input_len": [64, 256], "output_len": [8, 32], "concurrency": [1, 8], "rate": None}
    calibration_import(gpu_type=gpu, report={**REPORT, "calib_range": inside}, actor=admin_user)
    run = _run(gpu, admin_user)  # 128 in / 16 out at concurrency 2: inside
    stage = run.results["stages"][0]
    assert "extrapolating" not in stage
    assert stage["p50_interval"]["ttft_ms"][1] == pytest.approx(stage["ttft_ms"]["p50"] * 1.2)

    short = {**inside, "input_len": [512, 1024]}
    calibration_import(gpu_type=gpu, report={**REPORT, "calib_range": short}, actor=admin_user)
    stage = _run(gpu, admin_user).results["stages"][0]
    assert stage["extrapolating"] == ["input_len 128 outside the calibrated 512–1024"]
    lo, hi = stage["p50_interval"]["ttft_ms"]
    assert lo == pytest.approx(stage["ttft_ms"]["p50"] * 0.75) and hi == pytest.approx(
        stage["ttft_ms"]["p50"] * 1.4
    )


def test_a_malformed_device_or_range_is_refused(admin_user):
    gpu = GpuTypeFactory()
    for report, field in (
        ({**REPORT, "calib_device": "avx2"}, "calib_device"),
        ({**REPORT, "calib_range": {"input_len": [9, 1]}}, "calib_range"),
        ({**REPORT, "calib_range": {"colour": [1, 2]}}, "calib_range"),
    ):
        with pytest.raises(ValidationError) as exc:
            calibration_import(gpu_type=gpu, report=report, actor=admin_user)
        assert field in exc.value.message_dict
    assert not SimulatorCalibration.objects.exists()
