"""Playbooks: what to do about a diagnosed cause, in the order the domain's playbooks give ("stop
the bleeding" first).

Two outputs. ``suggest`` gives the on-call's checklist, each item with the console page that does
it. ``plan`` gives concrete actions (drain this deployment, limit that tenant to N requests a
minute) that ``operations.mitigations`` applies through the same audited services a person uses,
after an approval or automatically, time-boxed and reverted when the SLO holds again. No Django
here: plain data in, plain data out.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from operations.diagnosis import NO_DEPLOYMENT


@dataclass(frozen=True)
class Suggestion:
    action: str
    why: str
    page: str  # a URL name the incident page links to


def _worst(diagnosis: dict, cause: str) -> str | None:
    for b in diagnosis.get("branches", []):
        if b["cause"] == cause:
            ev = b.get("evidence") or {}
            if ev.get("worst"):
                return ev["worst"]
            by = ev.get("by_deployment") or {}
            if by:
                return max(by, key=by.get)
            deps = ev.get("deployments") or {}
            if deps:
                return next(iter(deps))
    return None


def suggest(diagnosis: dict) -> list[dict]:
    """Suggestions for the diagnosis's cause (none when no cause was named)."""
    cause = diagnosis.get("cause")
    dep = _worst(diagnosis, cause) if cause else None
    if dep == NO_DEPLOYMENT:
        dep = None
    S = Suggestion
    table = {
        "deployment_regression": [
            S(
                f"Shift the route's weight away from {dep or 'the regressed deployment'}",
                "one deployment slowed while the others held: the others can carry the traffic",
                "route",
            ),
            S(
                "Pause or roll back the rollout that brought it in",
                "a slower release or a regressed kernel",
                "rollouts",
            ),
            S("Add replicas to the healthy deployments", "they take the shifted load", "deployments"),
        ],
        "errors_one_deployment": [
            S(
                f"Set {dep or 'the failing deployment'}'s weight to 0",
                "its server errors burn the budget",
                "route",
            ),
            S("Restart it or add a replica", "a lost replica", "deployments"),
        ],
        "long_prompts": [
            S(
                "Send long prompts to an isolated pool (the route's long-context threshold)",
                "prefill of long prompts saturates the online pool",
                "route",
            ),
            S(
                "Lower the route's maximum input tokens for tenants that flood it",
                "stop the bleeding",
                "tenants",
            ),
            S("Add prefill capacity (replicas)", "more prefill throughput", "deployments"),
        ],
        "longer_outputs": [
            S(
                "Cap max output tokens for the tenants whose outputs grew",
                "longer outputs mean larger batches",
                "tenants",
            ),
            S("Check the latest prompt or model release", "outputs often grow after one", "rollouts"),
        ],
        "load_surge": [
            S(
                "Rate-limit the tenants behind the surge",
                "stop the bleeding; keep the others within SLO",
                "tenants",
            ),
            S("Add replicas", "the surge may be real demand", "deployments"),
            S("Shed batch or low-priority traffic from the online pool", "online traffic first", "tenants"),
        ],
        "prefix_cache_collapse": [
            S(
                "Check what changed the shared prompt prefix (a prompt or template release)",
                "a changed system prompt stops prefix reuse",
                "audit",
            ),
            S("Roll back that release", "restore the cache hit rate", "rollouts"),
        ],
        "queue_vs_prefill": [
            S("Add replicas (capacity)", "requests wait in the engine's queue", "deployments"),
            S("Move batch traffic out of the online pool", "batch fills the queue", "tenants"),
            S("Rate-limit the heaviest tenants", "stop the bleeding", "tenants"),
        ],
        "kv_pressure": [
            S(
                "Lower max concurrency (max_num_seqs) or cap max output tokens",
                "the KV cache is full and preempts",
                "deployments",
            ),
            S("Route to a lighter quantization or a smaller model", "more KV room per GPU", "route"),
        ],
        "recent_change": [
            S(
                "Roll back the change named in the diagnosis",
                "nothing measured moved but a change happened",
                "audit",
            ),
        ],
    }
    return [asdict(s) for s in table.get(cause, [])]


# --- actions: what a playbook can change, through the same services a person uses -------------------

LONG_POOL = "long-context"  # the pool the gateway sends prompts over a route's threshold to

ACTIONS = {
    "pause_rollout": "Pause the route's rollout",
    "shift_weight": "Shift the route's weight away from a deployment (to the others, or to a smaller model's)",
    "isolate_long_prompts": "Send long prompts to the route's long-context pool",
    "add_replicas": "Add a replica to a deployment",
    "rate_limit": "Rate-limit a tenant",
    "cap_input_tokens": "Cap a tenant's prompt tokens",
    "cap_output_tokens": "Cap a tenant's output tokens",
}


def _branch(diagnosis: dict, cause: str) -> dict:
    return next((b for b in diagnosis.get("branches", []) if b["cause"] == cause), {})


def _grown(rows: dict, key: str, base_key: str, ratio: float) -> list[tuple[str, dict]]:
    """Tenants whose figure grew by ``ratio`` over their own baseline (or who are new), largest first."""
    out = []
    for tenant, r in rows.items():
        now, before = r.get(key), r.get(base_key)
        if now and (not before or now >= ratio * before):
            out.append((tenant, r))
    return sorted(out, key=lambda kv: -(kv[1].get(key) or 0))[:3]


def _pressed(diagnosis: dict, cause: str, targets: dict) -> list[str]:
    """The route's deployments whose engines show the branch's pressure (a full KV cache with
    preemptions; most of TTFT spent queueing), by the branch's own evidence."""
    rows = (_branch(diagnosis, cause).get("evidence") or {}).get("deployments") or {}
    out = []
    for dep, r in rows.items():
        if dep not in targets or targets[dep]["weight"] <= 0:
            continue
        kv_full = (r.get("preemptions_per_s") or 0) > 0 or (r.get("kv_usage") or 0) >= 0.9
        queueing = (r.get("share") or 0) >= 0.5
        if kv_full if cause == "kv_pressure" else queueing:
            out.append(dep)
    return sorted(out)


def plan(diagnosis: dict, state: dict) -> list[dict]:
    """Concrete actions for a diagnosis, in the order to apply them, within the route's policy.

    ``state`` (plain data, built by ``operations.mitigations``): ``targets`` {slug: {weight,
    num_replicas, scaling_mode, max_model_len, and optionally pool and parameters (the model's
    parameter count)}}, ``route`` ({long_context_threshold}), ``rollout`` ({id, phase} or None), ``limits``
    {tenant id: the tenant's four limits}, ``policy`` (allowed ``actions``, ``min_rpm``,
    ``min_input_tokens``, ``min_output_tokens``, ``max_extra_replicas``). Returns dicts with
    ``kind``, ``params``, ``summary`` and ``why``; nothing when no cause was named.
    """
    from operations.diagnosis import LATENCY_RATIO, OUTPUT_RATIO, PROMPT_RATIO, RATE_RATIO

    cause = diagnosis.get("cause")
    if not cause:
        return []
    policy, targets, limits = state["policy"], state["targets"], state.get("limits", {})
    tenants = diagnosis.get("tenants") or {}
    allowed = set(policy.get("actions") or ACTIONS)
    actions: list[dict] = []

    def add(kind: str, params: dict, summary: str, why: str) -> None:
        actions.append({"kind": kind, "params": params, "summary": summary, "why": why})

    def pause(why: str) -> None:
        rollout = state.get("rollout")
        if rollout and rollout.get("phase") == "progressing":
            add("pause_rollout", {"rollout_id": rollout["id"]}, f"Pause rollout #{rollout['id']}",
                why + "; a running rollout would move the weights back")  # fmt: skip

    def drain(dep: str | None, why: str) -> None:
        t = targets.get(dep or "")
        others = sum(o["weight"] for d, o in targets.items() if d != dep)
        if t and t["weight"] > 0 and others > 0:
            add("shift_weight", {"deployment": dep, "weight": 0}, f"Set {dep}'s weight to 0 (was {t['weight']})",
                why + f"; the route's other deployments carry weight {others}")  # fmt: skip

    def scale(dep: str | None, why: str) -> None:
        t = targets.get(dep or "")
        if t and t.get("scaling_mode") == "fixed" and policy["max_extra_replicas"] > 0:
            add("add_replicas", {"deployment": dep, "num_replicas": t["num_replicas"] + 1},
                f"Scale {dep} to {t['num_replicas'] + 1} replicas (from {t['num_replicas']})", why)  # fmt: skip

    def rate_limit(why: str) -> None:
        for tenant, r in _grown(tenants, "rpm", "baseline_rpm", RATE_RATIO):
            rpm = max(policy["min_rpm"], math.ceil((r.get("baseline_rpm") or 0) * 1.2))
            current = limits.get(tenant, {}).get("rpm_limit", 0)
            if rpm < r["rpm"] and (current == 0 or rpm < current):
                add("rate_limit", {"tenant_id": int(tenant), "rpm_limit": rpm},
                    f"Limit {r.get('name') or 'tenant ' + tenant} to {rpm} requests/min (it sends {r['rpm']:g})", why)  # fmt: skip

    def cap(kind: str, key: str, base_key: str, ratio: float, route_base, floor: int, why: str) -> None:
        field = "max_input_tokens" if kind == "cap_input_tokens" else "max_output_tokens"
        context = min((t["max_model_len"] for t in targets.values() if t.get("max_model_len")), default=None)
        for tenant, r in _grown(tenants, key, base_key, ratio):
            value = max(floor, int(2 * (r.get(base_key) or route_base or 0)))
            if context:
                value = min(value, context)
            current = limits.get(tenant, {}).get(field, 0)
            if value < (r.get(key) or 0) and (current == 0 or value < current):
                add(kind, {"tenant_id": int(tenant), field: value},
                    f"Cap {r.get('name') or 'tenant ' + tenant}'s {field.replace('_', ' ')} at {value} (its {key.replace('_', ' ')}: "
                    f"{r[key]:g})", why)  # fmt: skip

    def isolate(base, why: str) -> bool:
        """Prompts over twice the route's usual long prompt go to its long-context pool, when it has
        one with weight: nobody is refused, and short prompts stop queueing behind long prefills."""
        pool = sorted(d for d, t in targets.items() if t.get("pool") == LONG_POOL and t["weight"] > 0)
        if not pool or "isolate_long_prompts" not in allowed:
            return False
        threshold = max(policy["min_input_tokens"], int(2 * (base or 0)))
        context = min(targets[d]["max_model_len"] for d in pool)
        current = (state.get("route") or {}).get("long_context_threshold")
        if threshold < context and (not current or threshold < current):
            add("isolate_long_prompts", {"threshold": threshold},
                f"Send prompts over {threshold} tokens to {', '.join(pool)} (the long-context pool)"
                + (f"; the threshold was {current}" if current else ""), why)  # fmt: skip
        return True

    def lighten(pressed: list[str], why: str) -> None:
        """Halve a pressed deployment's weight where the route has a smaller model's deployment that
        is not pressed: the smaller model takes the larger share (more KV room, faster steps)."""
        size = {d: t.get("parameters") or 0 for d, t in targets.items()}
        for dep in pressed:
            smaller = [d for d, t in targets.items() if d not in pressed and t["weight"] > 0
                       and t.get("pool") != LONG_POOL and 0 < size[d] < size[dep]]  # fmt: skip
            w = targets[dep]["weight"]
            if smaller and w >= 2:
                add("shift_weight", {"deployment": dep, "weight": w // 2},
                    f"Halve {dep}'s weight ({w} → {w // 2}) so that {', '.join(sorted(smaller))} (a smaller model) "
                    "takes a larger share", why)  # fmt: skip

    worst = _worst(diagnosis, cause)
    if worst == NO_DEPLOYMENT:
        worst = None
    if cause in ("deployment_regression", "errors_one_deployment"):
        what = "slower than before" if cause == "deployment_regression" else "answering server errors"
        pause(f"{worst} is {what}")
        drain(worst, f"{worst} is {what} (at least {LATENCY_RATIO:g}× its baseline)"
              if cause == "deployment_regression" else f"{worst} is {what}")  # fmt: skip
    elif cause == "long_prompts":
        base = (_branch(diagnosis, "long_prompts").get("evidence") or {}).get("baseline_p90_prompt_tokens")
        if not isolate(base, "long prompts saturate prefill for everyone; an isolated pool takes them"):
            cap("cap_input_tokens", "p90_prompt_tokens", "baseline_p90_prompt_tokens", PROMPT_RATIO, base,
                policy["min_input_tokens"], "long prompts saturate prefill for everyone")  # fmt: skip
    elif cause in ("longer_outputs", "kv_pressure"):
        base = (_branch(diagnosis, "longer_outputs").get("evidence") or {}).get(
            "baseline_median_output_tokens"
        )
        cap("cap_output_tokens", "median_output_tokens", "baseline_median_output_tokens", OUTPUT_RATIO, base,
            policy["min_output_tokens"], "longer outputs fill the batch and the KV cache")  # fmt: skip
        if cause == "kv_pressure":
            pressed = _pressed(diagnosis, "kv_pressure", targets)
            lighten(pressed, "the KV cache is full and preempts: a smaller model needs less KV per request")
            for dep in pressed:
                scale(dep, "the KV cache is full and preempts: more replicas, more KV cache")
    elif cause in ("load_surge", "queue_vs_prefill"):
        rate_limit("stop the bleeding: the surge queues everyone else's requests")
        pressed = _pressed(diagnosis, "queue_vs_prefill", targets)
        lighten(pressed, "requests wait in the engine's queue: a smaller model serves more of them")
        for dep in pressed or [d for d in targets if targets[d]["weight"] > 0]:
            scale(dep, "requests wait in the engine's queue: more capacity")
    elif cause in ("prefix_cache_collapse", "recent_change"):
        pause("a change just before the breach is the likeliest trigger")
    return [a for a in actions if a["kind"] in allowed]
