"""Playbooks, in "suggest" mode: what the on-call should do about a diagnosed cause, in the order
the domain's playbooks give ("stop the bleeding" first), each with the console page that does it.

Applying actions (with an approval or automatically, time-boxed and reverted when the SLO holds
again) is not built yet: these are suggestions a person carries out through the audited pages.
No Django here: the incident page turns ``page`` names into links.
"""

from __future__ import annotations

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
