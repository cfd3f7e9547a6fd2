"""Router policies: routing a route's requests between a cheap and a strong version by difficulty."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from evaluations.constants import EvidenceLabel, RouterStatus
from evaluations.models.evals import EvalRun


class RouterPolicy(models.Model):
    """One trained version of a route's router policy (ADR 0040).

    Trained from two eval runs of one suite version (the cheap and the strong version's per-case
    results): the model (coefficients and feature spec), the threshold chosen on validation cases,
    the cost–quality curve and the operating point on test cases. What it learned never changes;
    only its status moves (draft → active → retired) and its gate verdict is recorded, each audited.
    At most one policy per route is active; the gateway serves that one (snapshot section ``routers``).
    """

    route = models.ForeignKey(
        "deployments.ModelRoute", on_delete=models.PROTECT, related_name="router_policies"
    )
    number = models.PositiveIntegerField()
    cheap_version = models.ForeignKey("catalog.ModelVersion", on_delete=models.PROTECT, related_name="+")
    strong_version = models.ForeignKey("catalog.ModelVersion", on_delete=models.PROTECT, related_name="+")
    cheap_eval_run = models.ForeignKey(EvalRun, on_delete=models.PROTECT, related_name="+")
    strong_eval_run = models.ForeignKey(EvalRun, on_delete=models.PROTECT, related_name="+")
    quality_target = models.FloatField(help_text="Share of the strong version's quality to keep, in (0, 1]")
    cheap_usd_per_mtok = models.FloatField("cheap $ per Mtok")
    strong_usd_per_mtok = models.FloatField("strong $ per Mtok")
    seed = models.IntegerField(default=0, help_text="Seeds the train/validation/test split and the bootstrap")
    threshold = models.FloatField(
        help_text="Requests with P(cheap is right) at or above it go to the cheap version"
    )
    model = models.JSONField(help_text="Feature spec and coefficients (evalkit.router.RouterModel)")
    curve = models.JSONField(default=list, help_text="Cost–quality points on the test cases")
    summary = models.JSONField(default=dict, help_text="Operating point on validation and test, counts")
    test_case_ids = models.JSONField(default=list)
    label = models.CharField(max_length=10, choices=EvidenceLabel.choices)
    status = models.CharField(
        max_length=8, choices=RouterStatus.choices, default=RouterStatus.DRAFT, db_index=True
    )
    gate_verdict = models.CharField(
        max_length=8, blank=True, help_text="passed, failed or error; empty: not judged"
    )
    gate_checks = models.JSONField(default=list, blank=True)
    gate_decided_at = models.DateTimeField(null=True, blank=True)
    override_reason = models.TextField(
        blank=True, help_text="Why an admin activated it without a passed gate"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    activated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["route__public_name", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["route", "number"], name="unique_router_policy_number"),
            models.UniqueConstraint(
                fields=["route"],
                condition=models.Q(status="active"),
                name="one_active_router_policy_per_route",
            ),
        ]

    def __str__(self) -> str:
        return f"router policy v{self.number} of {self.route.public_name}"

    def get_absolute_url(self) -> str:
        return reverse("gates:router_detail", args=[self.pk])
