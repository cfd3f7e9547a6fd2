"""Traffic classes and admission control (gateway.admission, docs/decisions/0035).

Who can do what: a tenant's key sends at most its class (a request may lower its own, never raise
it: 403); under saturation the gateway queues by class and sheds sheddable first, then standard,
and never admits a lower class while an interactive request waits. The controller's tests drive it
directly with asyncio; the pipeline's run the whole ASGI app in this process (tests/gateway/inproc.py)
with a fake engine that holds its answers until the test lets them go."""

from __future__ import annotations

import asyncio
import random

import orjson
import pytest

from gateway.admission import AdmissionController, Gate, parse_per_class
from gateway.replies import Reply
from gateway.stages.parse import request_class
from gateway.validation import BadRequest
from snapshot.contract import CLASS_RANK, Target
from tests.gateway.inproc import chat, target, tenant_budget

FLAT = {"interactive": 1.0, "standard": 1.0, "sheddable": 1.0}
LONG = {"interactive": 30.0, "standard": 30.0, "sheddable": 30.0}


def _target(dep: int, limit: int | None) -> Target:
    return Target(dep, f"d{dep}", None, "http://x/v1", "m", 1.0, "online", "RUNNING", max_inflight=limit)


# ------------------------------------------------------------------ the class a request is served in


@pytest.mark.parametrize(
    "key,header,tier,expected",
    [
        ("standard", None, None, "standard"),
        ("interactive", None, None, "interactive"),
        ("standard", None, "flex", "sheddable"),
        ("standard", None, "auto", "standard"),
        ("standard", None, "default", "standard"),
        ("interactive", None, "priority", "interactive"),
        ("interactive", b"standard", None, "standard"),
        ("standard", b"batch", None, "sheddable"),
        ("standard", b" Sheddable ", None, "sheddable"),
        # Both given: the lower of the two.
        ("interactive", b"standard", "flex", "sheddable"),
    ],
)
def test_a_request_gets_its_keys_class_or_a_lower_one_it_asks_for(key, header, tier, expected):
    body = {"model": "m"} | ({"service_tier": tier} if tier else {})
    assert request_class(key, header, body) == expected
    assert "service_tier" not in body  # the gateway's to read, never forwarded


@pytest.mark.parametrize(
    "key,header,tier,status,code",
    [
        ("standard", None, "priority", 403, "traffic_class_not_allowed"),
        ("sheddable", b"standard", None, 403, "traffic_class_not_allowed"),
        ("sheddable", b"interactive", "flex", 403, "traffic_class_not_allowed"),
        ("standard", None, "scale", 400, "invalid_service_tier"),
        ("standard", None, 3, 400, "invalid_service_tier"),
        ("standard", b"urgent", None, 400, "invalid_traffic_class"),
    ],
)
def test_a_class_above_the_keys_or_unknown_is_refused_with_what_to_send(key, header, tier, status, code):
    with pytest.raises(BadRequest) as exc:
        request_class(key, header, {"service_tier": tier} if tier is not None else {})
    assert exc.value.status == status and exc.value.code == code and exc.value.message


# ------------------------------------------------------------------ the controller


async def test_a_deployment_without_a_limit_is_never_held_back():
    ac = AdmissionController(wait_s=LONG)
    t = _target(1, None)
    slots = [await ac.acquire(t, [t], "sheddable") for _ in range(1000)]
    assert all(not isinstance(s, Reply) for s in slots) and ac.gates == {}


async def test_each_class_fills_only_its_share_and_then_is_shed_with_retry_after():
    ac = AdmissionController(wait_s={"interactive": 0.05, "standard": 0.05, "sheddable": 0.05})
    t = _target(1, 8)  # shares: interactive 8, standard floor(7.2) = 7, sheddable 6
    held = [await ac.acquire(t, [t], "sheddable") for _ in range(6)]
    assert all(isinstance(h, tuple) for h in held)
    shed = await ac.acquire(t, [t], "sheddable")
    assert isinstance(shed, Reply) and shed.status == 503 and shed.reason == "shed_sheddable"
    assert (b"retry-after", b"10") in shed.headers
    assert orjson.loads(shed.body)["error"]["code"] == "overloaded"
    # The room sheddable may not take is there for the others.
    assert isinstance(await ac.acquire(t, [t], "standard"), tuple)
    assert isinstance(await ac.acquire(t, [t], "interactive"), tuple)
    assert isinstance(await ac.acquire(t, [t], "standard"), Reply)  # standard's 7 are used
    assert ac.stats()[1] == {
        "limit": 8,
        "inflight": 8,
        "waiting": 0,
        "admitted": 8,
        "shed": 2,
        "saturated": False,
    }
    for slot, _ in held:
        slot.release()
        slot.release()  # idempotent
    assert ac.gates[1].inflight == 2


async def test_a_freed_slot_goes_to_the_most_important_waiter_first():
    ac = AdmissionController(shares=FLAT, wait_s=LONG)
    t = _target(1, 2)
    running = [await ac.acquire(t, [t], "standard") for _ in range(2)]
    order: list[str] = []

    async def ask(cls):
        slot, _ = await ac.acquire(t, [t], cls)
        order.append(cls)
        return slot

    tasks = []
    for cls in ("sheddable", "standard", "sheddable", "interactive", "standard"):
        tasks.append(asyncio.create_task(ask(cls)))
        await asyncio.sleep(0)  # queued in this order
    await asyncio.sleep(0)
    assert len(ac.gates[1].waiters) == 5 and order == []
    for slot, _ in running:
        slot.release()
    for _ in range(3):
        await asyncio.sleep(0)
    assert order == ["interactive", "standard"]
    released: set = set()
    while len(order) < 5:
        for task in tasks:
            if task.done() and task not in released:
                released.add(task)
                task.result().release()
        await asyncio.sleep(0)
    assert order == ["interactive", "standard", "standard", "sheddable", "sheddable"]
    for task in tasks:
        if task not in released:
            task.result().release()
    assert ac.gates[1].inflight == 0


async def test_no_lower_class_is_admitted_while_an_interactive_request_waits():
    """A random mix at three times what the deployment takes: whenever a standard or sheddable
    request is admitted, no interactive request is waiting (and the limit is never exceeded)."""
    rng = random.Random(7)
    violations: list[str] = []
    peak = 0

    class Watched(AdmissionController):
        def _admit(self, gate, rank):
            nonlocal peak
            if rank > 0 and any(w[0] == 0 and not w[2].done() for w in gate.waiters):
                violations.append(f"class {rank} admitted while an interactive request waits")
            super()._admit(gate, rank)
            peak = max(peak, gate.inflight)

    ac = Watched(wait_s={"interactive": 5.0, "standard": 0.02, "sheddable": 0.01})
    t = _target(1, 6)
    outcomes = {c: {"ok": 0, "shed": 0} for c in CLASS_RANK}

    async def one(cls):
        got = await ac.acquire(t, [t], cls)
        if isinstance(got, Reply):
            outcomes[cls]["shed"] += 1
            return
        outcomes[cls]["ok"] += 1
        await asyncio.sleep(rng.uniform(0.001, 0.01))
        got[0].release()

    classes = rng.choices(list(CLASS_RANK), weights=(2, 3, 5), k=600)
    tasks = []
    for cls in classes:
        tasks.append(asyncio.create_task(one(cls)))
        await asyncio.sleep(rng.uniform(0, 0.001))
    await asyncio.gather(*tasks)
    assert violations == [] and peak <= 6
    assert outcomes["interactive"]["shed"] == 0 and outcomes["interactive"]["ok"] == classes.count(
        "interactive"
    )
    assert outcomes["sheddable"]["shed"] > 0  # the mix really saturated it
    assert ac.gates[1].inflight == 0 and not ac.gates[1].waiters


async def test_less_important_waiters_do_not_hold_back_a_request_that_has_room():
    ac = AdmissionController(wait_s=LONG)
    t = _target(1, 8)  # sheddable may fill 6
    held = [await ac.acquire(t, [t], "sheddable") for _ in range(6)]
    waiting = asyncio.create_task(ac.acquire(t, [t], "sheddable"))
    await asyncio.sleep(0)
    assert len(ac.gates[1].waiters) == 1
    slot, _ = await asyncio.wait_for(ac.acquire(t, [t], "interactive"), 1)  # not queued behind it
    assert ac.gates[1].inflight == 7 and not waiting.done()
    slot.release()
    held[0][0].release()
    got, _ = await waiting
    for s in (got, *(h[0] for h in held[1:])):
        s.release()
    assert ac.gates[1].inflight == 0


async def test_a_full_deployment_sends_the_request_to_another_with_room():
    ac = AdmissionController(shares=FLAT, wait_s=LONG)
    a, b = _target(1, 1), _target(2, 3)
    first, _ = await ac.acquire(a, [a, b], "standard")
    slot, where = await ac.acquire(a, [a, b], "standard")
    assert where is b and ac.gates[2].inflight == 1
    slot.release()
    first.release()


async def test_workers_split_a_limit_and_a_changed_limit_applies_at_once():
    ac = AdmissionController(workers=4, shares=FLAT, wait_s=LONG)
    assert ac.gate(_target(1, 10)).limit == 3 and ac.gate(_target(2, 2)).limit == 1
    t = _target(1, 1)
    slot, _ = await ac.acquire(t, [t], "standard")
    waiter = asyncio.create_task(ac.acquire(t, [t], "standard"))
    await asyncio.sleep(0)
    assert not waiter.done()
    ac.gate(_target(1, 8))  # the operator raised it: the waiter goes now
    got, _ = await waiter
    assert ac.gates[1].inflight == 2
    got.release()
    slot.release()


async def test_a_request_cancelled_while_it_waits_leaves_no_slot_taken():
    ac = AdmissionController(shares=FLAT, wait_s=LONG)
    t = _target(1, 1)
    slot, _ = await ac.acquire(t, [t], "standard")
    waiter = asyncio.create_task(ac.acquire(t, [t], "standard"))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert ac.gates[1].waiters == []
    slot.release()
    assert ac.gates[1].inflight == 0


def test_per_class_settings_are_checked():
    assert parse_per_class("", {"a": 1}, what="X") == {"a": 1}
    assert parse_per_class("1,0.5,0.25", {}, what="X") == {
        "interactive": 1.0,
        "standard": 0.5,
        "sheddable": 0.25,
    }
    for bad in ("1,2", "1,x,2", "1,-1,1", "1,nan,1"):
        with pytest.raises(ValueError, match="X"):
            parse_per_class(bad, {}, what="X")
    assert Gate(limit=1).room_for(2, (1.0, 0.9, 0.1))  # a share never rounds a limit down to nothing


# ------------------------------------------------------------------ through the pipeline


async def test_through_the_gateway_a_flex_request_is_served_and_metered_as_sheddable(inproc):
    inproc.install(tenant={"budget": tenant_budget(cap=10**9)})
    ans = await inproc.post(chat(service_tier="flex"))
    assert ans.status == 200 and ans.headers["x-governor-traffic-class"] == "sheddable"
    assert "service_tier" not in inproc.engine.requests[-1][1]
    ans = await inproc.post(chat(), headers=[(b"x-governor-traffic-class", b"batch")])
    assert ans.headers["x-governor-traffic-class"] == "sheddable"
    refused = await inproc.post(chat(service_tier="priority"))
    assert refused.status == 403 and refused.json()["error"]["code"] == "traffic_class_not_allowed"
    assert [e["traffic_class"] for e in inproc.events()] == ["sheddable", "sheddable"]
    assert (await inproc.budget())["held"] == 0


async def test_through_the_gateway_a_saturated_deployment_sheds_sheddable_and_serves_interactive(inproc):
    """A deployment that takes 2 at once: two standard requests fill it, a sheddable one is shed
    (503, Retry-After, metered at no cost with its reason), an interactive one waits for the first
    free slot and is served; the engine never held more than 2."""
    inproc.install(
        targets=[target(1, inproc.engine.url, max_inflight=2)],
        key={"class": "interactive"},
        tenant={"budget": tenant_budget(cap=10**9)},
    )
    inproc.gw.admission = AdmissionController(shares=FLAT, wait_s={"interactive": 30.0, "standard": 30.0,
                                                                   "sheddable": 0.05})  # fmt: skip
    inproc.engine.hold = asyncio.Event()
    standard = [asyncio.create_task(inproc.post(chat(), headers=[(b"x-governor-traffic-class", b"standard")]))
                for _ in range(2)]  # fmt: skip
    while inproc.engine.active < 2:
        await asyncio.sleep(0.005)
    shed = await inproc.post(chat(service_tier="flex"))
    assert shed.status == 503 and shed.headers["retry-after"] == "10"
    assert shed.json()["error"]["code"] == "overloaded"
    interactive = asyncio.create_task(inproc.post(chat()))
    while not inproc.gw.admission.gates[1].waiters:
        await asyncio.sleep(0.005)
    inproc.engine.hold.set()
    answers = await asyncio.gather(*standard, interactive)
    assert [a.status for a in answers] == [200, 200, 200] and inproc.engine.peak == 2
    by_class = {(e["traffic_class"], e["error_type"], e["cost_nanos"]) for e in inproc.events()}
    assert ("sheddable", "shed_sheddable", 0) in by_class and (
        "interactive",
        "",
        8000 + 10 * 1000,
    ) in by_class
    assert (await inproc.budget())["held"] == 0
    assert inproc.gw.admission.gates[1].inflight == 0
