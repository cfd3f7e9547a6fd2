"""Router policies (ADR 0040): train one from two eval runs, judge it like a version, activate it.

- ``router_policy_train`` joins the cheap and the strong version's per-case results of one suite
  version, trains ``evalkit.router`` on them and saves a draft: the model, its threshold, the
  cost–quality curve and operating point on test cases. It takes well under a second for thousands of
  cases, so it runs in the request; no job row.
- ``router_policy_judge`` is its gate: on the policy's test cases (or two newer eval runs of the same
  versions), the routed quality against the strong version alone on a paired interval, with the
  gates' verdicts (passed only when the whole interval clears the target).
- ``router_policy_activate`` serves it (the previous active policy of the route is retired) when its
  gate passed, or when an admin overrides with a reason; ``router_policy_retire`` stops serving it.
  Each change is audited, and its event republishes the gateway's ``routers`` section.
"""

from __future__ import annotations

import time

import redis
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from audit.services import audit_record
from deployments.selectors import routing_table
from evalkit import router
from evalkit.suites import parse_jsonl
from evaluations.constants import EvidenceLabel, RouterStatus, Verdict
from evaluations.models import EvalRun, RouterPolicy
from evaluations.selectors.routing import routers_table
from snapshot.publish import publish_section

RESULT_FIELDS = ("case_id", "category", "score", "error", "prompt_tokens", "output_tokens")


def _labelled(cheap_run: EvalRun, strong_run: EvalRun, *, cheap_usd: float, strong_usd: float):
    """The two runs' cases both answered, with the request text the gateway will see."""
    texts = {
        c.id: router.request_text(c.chat_messages(), c.prompt)
        for c in parse_jsonl(cheap_run.suite_version.content)
    }
    return router.pair_results(
        texts,
        cheap_run.case_results.values(*RESULT_FIELDS),
        strong_run.case_results.values(*RESULT_FIELDS),
        cheap_usd_per_mtok=cheap_usd,
        strong_usd_per_mtok=strong_usd,
    )


def _check_runs(cheap_run: EvalRun, strong_run: EvalRun) -> dict:
    errors: dict[str, str] = {}
    for name, run in (("cheap_eval_run", cheap_run), ("strong_eval_run", strong_run)):
        if run.status != "succeeded":
            errors[name] = f"Eval run #{run.pk} is {run.status}; a router learns only from a finished run."
        elif run.model_version_id is None:
            errors[name] = f"Eval run #{run.pk} names no catalog version; a router routes between versions."
    if errors:
        return errors
    if cheap_run.model_version_id == strong_run.model_version_id:
        errors["strong_eval_run"] = (
            f"The cheap and the strong version are the same ({cheap_run.model_version}): a router between a "
            "version and itself saves nothing. Pick an eval run of a stronger version."
        )
    elif cheap_run.suite_version_id != strong_run.suite_version_id:
        errors["strong_eval_run"] = (
            f"The runs asked different suites ({cheap_run.suite_version} and {strong_run.suite_version}); a router "
            "learns from the same cases answered by both versions."
        )
    return errors


def router_policy_train(
    *,
    route,
    cheap_run: EvalRun,
    strong_run: EvalRun,
    quality_target: float,
    cheap_usd_per_mtok: float,
    strong_usd_per_mtok: float,
    actor,
    seed: int = 0,
) -> RouterPolicy:
    """Train a draft router policy for ``route``; a ``ValidationError`` names what is wrong."""
    errors = _check_runs(cheap_run, strong_run)
    try:
        target = router.check_target(quality_target)
    except router.RouterError as exc:
        errors["quality_target"] = str(exc)
    if not (0 < cheap_usd_per_mtok < strong_usd_per_mtok):
        errors["cheap_usd_per_mtok"] = (
            f"The cheap version must cost less per token than the strong one (${cheap_usd_per_mtok} against "
            f"${strong_usd_per_mtok} per Mtok); otherwise routing to it saves nothing."
        )
    if errors:
        raise ValidationError(errors)
    cases = _labelled(cheap_run, strong_run, cheap_usd=cheap_usd_per_mtok, strong_usd=strong_usd_per_mtok)
    try:
        trained = router.train(cases, target=target, seed=seed)
    except router.RouterError as exc:
        raise ValidationError({"__all__": f"Cannot train: {exc}."}) from exc
    label = (
        EvidenceLabel.SIMULATED
        if EvidenceLabel.SIMULATED in (cheap_run.label, strong_run.label)
        else EvidenceLabel.MEASURED
    )
    with transaction.atomic():
        number = (RouterPolicy.objects.filter(route=route).aggregate(n=Max("number"))["n"] or 0) + 1
        policy = RouterPolicy.objects.create(
            route=route,
            number=number,
            cheap_version_id=cheap_run.model_version_id,
            strong_version_id=strong_run.model_version_id,
            cheap_eval_run=cheap_run,
            strong_eval_run=strong_run,
            quality_target=target,
            cheap_usd_per_mtok=cheap_usd_per_mtok,
            strong_usd_per_mtok=strong_usd_per_mtok,
            seed=seed,
            threshold=trained.threshold,
            model=trained.model.to_dict(),
            curve=[p.to_dict() for p in trained.test_curve],
            summary=trained.summary(),
            test_case_ids=trained.test_case_ids,
            label=label,
            created_by=actor if getattr(actor, "pk", None) else None,
        )
        audit_record(
            actor=actor,
            action="router_policy.train",
            target=policy,
            after={"status": policy.status, "threshold": policy.threshold, "quality_target": target},
            evidence={
                "cheap_eval_run": cheap_run.pk,
                "strong_eval_run": strong_run.pk,
                "summary": policy.summary,
            },
        )
    return policy


def router_policy_judge(
    *, policy: RouterPolicy, actor, cheap_run: EvalRun | None = None, strong_run: EvalRun | None = None
) -> RouterPolicy:
    """The policy's gate, recorded on it and audited. Without runs it is judged on its own test cases
    (which neither the fit nor the threshold saw); with two newer runs of the same two versions, on
    every case of theirs."""
    if (cheap_run is None) != (strong_run is None):
        raise ValidationError({"__all__": "Give both eval runs (cheap and strong), or neither."})
    cheap_run = cheap_run or policy.cheap_eval_run
    strong_run = strong_run or policy.strong_eval_run
    if (cheap_run.model_version_id, strong_run.model_version_id) != (
        policy.cheap_version_id,
        policy.strong_version_id,
    ):
        raise ValidationError({"__all__": "The eval runs must be of the policy's cheap and strong versions."})
    own = cheap_run.pk == policy.cheap_eval_run_id and strong_run.pk == policy.strong_eval_run_id
    cases = _labelled(
        cheap_run, strong_run, cheap_usd=policy.cheap_usd_per_mtok, strong_usd=policy.strong_usd_per_mtok
    )
    if own:
        ids = set(policy.test_case_ids)
        cases = [c for c in cases if c.case_id in ids]
    try:
        model = router.RouterModel.from_dict(policy.model)
        checks, verdict, point = router.judge(
            model, policy.threshold, cases, target=policy.quality_target, seed=policy.seed
        )
        measured = point.to_dict()
    except router.RouterError as exc:
        checks, verdict, measured = (
            [{"name": "judge", "passed": False, "detail": str(exc)}],
            Verdict.ERROR,
            {},
        )
    with transaction.atomic():
        before = {"gate_verdict": policy.gate_verdict}
        policy.gate_verdict, policy.gate_checks, policy.gate_decided_at = verdict, checks, timezone.now()
        policy.save(update_fields=["gate_verdict", "gate_checks", "gate_decided_at"])
        audit_record(
            actor=actor,
            action="router_policy.gate",
            target=policy,
            before=before,
            after={"gate_verdict": verdict},
            reason=checks[0].get("detail", "")[:1000],
            evidence={"cheap_eval_run": cheap_run.pk, "strong_eval_run": strong_run.pk, "cases": len(cases),
                      "on": "test cases" if own else "every case", "measured": measured},
        )  # fmt: skip
    return policy


def router_policy_activate(*, policy: RouterPolicy, actor, override_reason: str = "") -> RouterPolicy:
    """Serve ``policy`` on its route (retiring the active one) once its gate passed or with a reason."""
    if policy.status == RouterStatus.RETIRED:
        raise ValidationError({"__all__": "A retired router policy stays retired; train a new one."})
    if policy.gate_verdict != Verdict.PASSED and not override_reason.strip():
        raise ValidationError(
            {"override_reason": f"Its gate has {'not been run' if not policy.gate_verdict else policy.gate_verdict}; "
             "run the gate, or give the reason for serving it anyway."}
        )  # fmt: skip
    served = {
        t["version_id"] for t in (routing_table().get(policy.route.public_name) or {}).get("targets", [])
    }
    missing = [str(v) for v in (policy.cheap_version, policy.strong_version) if v.pk not in served]
    if missing:
        raise ValidationError(
            {"__all__": f"The route {policy.route.public_name} has no deployment of {' or '.join(missing)}: add one as a "
             "target (weight 0 is enough) before the router can send requests to it."}
        )  # fmt: skip
    with transaction.atomic():
        previous = list(
            RouterPolicy.objects.select_for_update()
            .filter(route=policy.route, status=RouterStatus.ACTIVE)
            .exclude(pk=policy.pk)
        )
        for old in previous:
            old.status = RouterStatus.RETIRED
            old.save(update_fields=["status"])
            audit_record(actor=actor, action="router_policy.retire", target=old, before={"status": "active"},
                         after={"status": "retired"}, reason=f"replaced by v{policy.number}")  # fmt: skip
        before = policy.status
        policy.status, policy.activated_at = RouterStatus.ACTIVE, timezone.now()
        policy.override_reason = override_reason.strip() if policy.gate_verdict != Verdict.PASSED else ""
        policy.save(update_fields=["status", "activated_at", "override_reason"])
        audit_record(
            actor=actor,
            action="router_policy.activate",
            target=policy,
            before={"status": before},
            after={"status": policy.status, "threshold": policy.threshold},
            reason=policy.override_reason,
            evidence={"gate_verdict": policy.gate_verdict, "gate_checks": policy.gate_checks},
        )
    return policy


def router_policy_retire(*, policy: RouterPolicy, actor, reason: str = "") -> RouterPolicy:
    """Stop serving it: the route goes back to its weights alone."""
    if policy.status == RouterStatus.RETIRED:
        return policy
    with transaction.atomic():
        before = policy.status
        policy.status = RouterStatus.RETIRED
        policy.save(update_fields=["status"])
        audit_record(actor=actor, action="router_policy.retire", target=policy, before={"status": before},
                     after={"status": "retired"}, reason=reason)  # fmt: skip
    return policy


def routers_section_publish() -> int:
    """Publish the ``routers`` section of the gateway snapshot; returns the snapshot's new version."""
    client = redis.Redis.from_url(getattr(settings, "GATEWAY_REDIS_URL", None) or settings.REDIS_URL)
    try:
        data = {"generated_at": time.time(), "routers": routers_table()}
        return publish_section(
            client, prefix=getattr(settings, "GATEWAY_KEY_PREFIX", "gw:"), section="routers", data=data
        )
    finally:
        client.close()
