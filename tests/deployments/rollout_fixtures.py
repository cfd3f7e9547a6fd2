"""Builders shared by the rollout tests: a route served by a stable deployment, and a canary."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from django.utils import timezone

from billing.models import UsageEvent
from deployments.models import Deployment, ModelRoute, RouteTarget
from tests.deployments.factories import DeploymentFactory, ModelRouteFactory
from tests.factories import ModelFactory, ModelVersionFactory


@dataclass
class Setup:
    route: ModelRoute
    stable: Deployment
    canary: Deployment


def route_with_canary(
    *, canary_lifecycle: str = "approved", public_name: str | None = None, gates_overridden: bool = True
) -> Setup:
    """A route served by a stable deployment, and a canary whose version is ``canary_lifecycle``.

    The canary's eval gates are overridden (as a platform admin would with a reason) unless told not
    to: the gate checks themselves are the evaluations app's tests.
    """
    model = ModelFactory()
    stable_version = ModelVersionFactory(
        model=model, label=f"bf16-{uuid.uuid4().hex[:6]}", lifecycle="serving"
    )
    canary_version = ModelVersionFactory(
        model=model,
        label=f"fp8-{uuid.uuid4().hex[:6]}",
        precision="fp8",
        lifecycle=canary_lifecycle,
        gate_override_at=timezone.now() if gates_overridden else None,
        gate_override_reason="overridden for the rollout tests" if gates_overridden else "",
    )
    stable = DeploymentFactory(model_version=stable_version)
    canary = DeploymentFactory(model_version=canary_version)
    route = ModelRouteFactory(**({"public_name": public_name} if public_name else {}))
    RouteTarget.objects.create(route=route, deployment=stable, weight=100)
    return Setup(route=route, stable=stable, canary=canary)


def weights(route: ModelRoute) -> dict[int, int]:
    return dict(RouteTarget.objects.filter(route=route).values_list("deployment_id", "weight"))


def usage(
    deployment: Deployment,
    *,
    at: dt.datetime,
    n: int,
    ttft_ms: float = 100,
    tpot_ms: float = 20,
    status: str = "ok",
    cost_nanos: int = 1000,
    tenant_id: int = 1,
) -> None:
    """``n`` metered requests of ``deployment`` that started at ``at`` (as the gateway ships them)."""
    UsageEvent.objects.bulk_create(
        UsageEvent(
            event_id=uuid.uuid4(),
            tenant_id=tenant_id,
            public_model="m",
            deployment_id=deployment.pk,
            deployment_slug=deployment.slug,
            prompt_tokens=10,
            completion_tokens=10,
            cost_nanos=cost_nanos,
            ttft_ms=ttft_ms if status == "ok" else None,
            tpot_ms=tpot_ms if status == "ok" else None,
            e2e_ms=ttft_ms + 9 * tpot_ms,
            status=status,
            error_type="" if status == "ok" else "upstream_error",
            http_status=200 if status == "ok" else 502,
            stream=True,  # streamed, so TPOT is defined
            started_at=at,
            finished_at=at,
            received_at=at,
        )
        for _ in range(n)
    )


FAST_STEPS = [
    {"kind": "set_weight", "weight": 20},
    {"kind": "analysis", "window_s": 30},
    {"kind": "set_weight", "weight": 100},
]
# FAST_STEPS as a rollout stores it: the analysis's longest window filled in (3 × its window).
FAST_STEPS_STORED = [FAST_STEPS[0], {**FAST_STEPS[1], "max_window_s": 90}, FAST_STEPS[2]]
TTFT_CHECK = [{"metric": "ttft_p95_ms", "limit": 1.5, "relative": True, "min_samples": 5}]
