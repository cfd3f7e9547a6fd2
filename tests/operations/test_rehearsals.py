"""Rehearsals end to end in virtual time: each of the eight causes, produced on simulated
deployments, is detected by the route's SLOs, diagnosed as what it is, mitigated by the playbook in
automatic mode, and the mitigation is undone once the SLOs held again."""

from __future__ import annotations

import datetime as dt

import pytest

from engines.rehearsal import SCENARIOS, scenario
from operations.models import Incident, Mitigation
from operations.rehearsals import rehearsal_run, rehearsal_setup

# Committed transactions: the breach reactions run after commit, as in production.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]  # a minute of simulation each
START = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_rehearsal_is_detected_and_diagnosed_as_its_cause(name):
    sc = scenario(name, fault_at_s=240, fault_for_s=60)
    route, deps, tenants = rehearsal_setup(f"rehearsal-{name}", sc, actor="system:test")
    r = rehearsal_run(
        scenario=sc, route=route, deployments=deps, tenants=tenants, start=START, duration_s=300
    )
    # Virtual time: these are the simulation's seconds, not this host's.
    assert r["false_incidents"] == 0, r
    assert r["detect_s"] is not None and r["detect_s"] <= 30, r
    assert r["cause_named"], r
    incident = Incident.objects.get(pk=r["incident"])
    assert incident.rehearsal and incident.diagnosis["cause"] in sc.causes
    if name != "prefix_cache_collapse":  # rolling back a prompt release is a person's call
        assert r["playbook_applied"], r


def test_the_playbook_drains_a_lost_replica_and_gives_the_weight_back_once_the_slos_held():
    sc = scenario("lost_replica", fault_at_s=240, fault_for_s=30)
    route, deps, tenants = rehearsal_setup("rehearsal-lost", sc, actor="system:test")
    r = rehearsal_run(
        scenario=sc, route=route, deployments=deps, tenants=tenants, start=START, duration_s=600
    )
    assert r["recover_s"] is not None and r["recover_s"] <= 60, r
    m = Mitigation.objects.get(incident_id=r["incident"])
    assert (m.kind, m.params["deployment"], m.state, m.applied_by) == ("shift_weight", deps["b"].slug, "reverted",
                                                                       "playbook")  # fmt: skip
    assert m.outcome.startswith("the SLOs held for 1 min")
    assert {t.deployment.slug: t.weight for t in route.targets.all()} == {
        deps["a"].slug: 50,
        deps["b"].slug: 50,
    }
    assert Incident.objects.get(pk=r["incident"]).status == "resolved"
