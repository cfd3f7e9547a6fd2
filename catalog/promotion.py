"""The seam through which the lifecycle and the rollouts ask the promotion rule (ADR 0027).

The rule (may this version be approved? may it take production traffic?) reads the eval gates'
policies and decisions, which the evaluations app owns, one layer above the catalog and
deployments in ``pyproject.toml``'s layers: neither may import it. So the catalog declares here
the question and the shape of the answer, and ``settings.GOVERNOR_PROMOTION_RULE`` names the one
function that answers it, ``evaluations.selectors.gates.version_promotion``. Callers act on the
answer and never restate the rule: the catalog's state machine reads ``may_approve``, the rollouts
read ``may_take_traffic``. Without a configured rule nothing passes: approval then needs an
admin's override, and no version takes traffic through a rollout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.utils.module_loading import import_string


@dataclass(frozen=True)
class Promotion:
    """The promotion rule's answer for one version, with what it rests on."""

    # Every gate the model's current policy requires passed: the move to approved needs no override.
    may_approve: bool
    # The version may take production traffic now (its lifecycle, and its gates or an override).
    may_take_traffic: bool
    # A platform admin approved the version despite its gates, with a reason the catalog recorded.
    gates_overridden: bool
    # Why the gates have not passed (empty when they have), and why no traffic ("" when it may).
    blocking: tuple[str, ...] = ()
    traffic_refusal: str = ""
    # The gate status the answer rests on, recorded as evidence with the lifecycle move.
    evidence: dict = field(default_factory=dict)


def version_promotion(*, version) -> Promotion:
    """Ask the promotion rule named by ``settings.GOVERNOR_PROMOTION_RULE`` about ``version``."""
    path = getattr(settings, "GOVERNOR_PROMOTION_RULE", "")
    if not path:
        why = "no promotion rule is configured (settings.GOVERNOR_PROMOTION_RULE)"
        return Promotion(
            may_approve=False,
            may_take_traffic=False,
            gates_overridden=version.gates_overridden,
            blocking=(why,),
            traffic_refusal=f"{version} may not take traffic: {why}.",
        )
    return import_string(path)(version=version)
