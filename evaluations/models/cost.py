"""Cost and capacity: saved capacity plans and the simulator calibrations predictions rest on."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.runs import Run
from evaluations.models.append_only import APPEND_ONLY_KEEP_USERS


class CapacityPlan(Run):
    """A saved capacity plan: the traffic and SLA asked for, the candidates compared, and the answer.

    ``rows`` holds one result per candidate (model version × GPU type × tensor parallel): per-GPU
    goodput (measured where a matching run exists, else predicted by the simulator, labelled),
    GPUs and replicas needed, and the monthly cost. Shared by its ``token`` URL. Computing it is a
    run like the others (``Run``), which ends ``done`` or ``failed`` and cannot be cancelled.
    """

    SUCCEEDED = "done"
    CANCELLED = None
    WHAT = "this plan"

    token = models.UUIDField(unique=True, editable=False)
    name = models.CharField(max_length=128)
    inputs = models.JSONField(help_text="peak QPS, length distributions, SLA, redundancy")
    candidates = models.JSONField(help_text="[{model_version_id, gpu_type_id, tensor_parallel}]")
    rows = models.JSONField(default=list)
    status = models.CharField(max_length=10, default="queued", help_text="queued, running, done or failed")
    created_at = models.DateTimeField(auto_now_add=True)
    # One short task computes a plan, bounded by its time limit: it keeps no progress message or
    # task id, and beats only when it is claimed. A plan still running once that heartbeat is older
    # than the task's hard limit has no worker, and the reaper fails it.
    TIME_LIMIT_S = 960
    STALE_AFTER_S = TIME_LIMIT_S + 60
    progress_message = None
    task_id = None

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name


class SimulatorCalibration(models.Model):
    """Simulator efficiencies fitted on measured load levels of one GPU type, and the error they
    showed on levels left out of the fit. Predicted runs and planner rows on that GPU type use the
    newest one and carry its interval; an imported calibration never changes.

    ``interval_pct`` is ``{"ttft": [lo, hi] | None, "tpot": [lo, hi] | None}``: the smallest and
    largest ``(measured − predicted) / predicted`` of the medians on held-out levels, in percent, so
    a predicted median ``p`` comes with ``[p · (1 + lo/100), p · (1 + hi/100)]``. Empty when the fit
    was judged in-sample only (no level was held out): such a calibration gives no interval.
    """

    gpu_type = models.ForeignKey(
        "catalog.GpuType", on_delete=models.PROTECT, related_name="simulator_calibrations"
    )
    efficiency = models.JSONField(help_text="engines.perf.Efficiency fields")
    interval_pct = models.JSONField(default=dict, blank=True)
    evaluation = models.CharField(max_length=10, help_text="held-out or in-sample")
    fit_levels = models.JSONField(default=list, blank=True)
    held_out = models.JSONField(default=list, blank=True, help_text="Per level: measured vs predicted")
    ttft_err_pct = models.FloatField(null=True, blank=True, help_text="Worst held-out median error")
    tpot_err_pct = models.FloatField(null=True, blank=True, help_text="Worst held-out median error")
    device = models.JSONField(
        default=dict, blank=True, help_text="engines.device record of what was measured; empty: not recorded"
    )
    calibrated_range = models.JSONField(
        default=dict,
        blank=True,
        help_text="{input_len|output_len|concurrency|rate: [low, high]} of the points",
    )
    source = models.CharField(max_length=300, blank=True)
    measured_at = models.CharField(max_length=40, blank=True)
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        triggers = APPEND_ONLY_KEEP_USERS

    def __str__(self) -> str:
        return f"simulator calibration #{self.pk} ({self.gpu_type.name}, {self.evaluation})"
