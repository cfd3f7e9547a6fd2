"""At least once, for real: a dispatcher process SIGKILLed between a reaction and the mark of its
delivery loses no event, and the sweep then delivers the rest with nothing applied twice."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from django.conf import settings as django_settings

from events.models import Delivery
from events.services import emit, events_sweep
from tests.conftest import ROOT, subprocess_env
from tests.events.reactions import _redis

REACTIONS = {"thing.*": ["tests.events.reactions.record"]}
# The dispatcher a beat worker runs, with the test's reaction registered.
DISPATCHER = (
    "import django; django.setup()\n"
    "from django.conf import settings\n"
    f"settings.GOVERNOR_REACTIONS = {REACTIONS!r}\n"
    "from events.services import events_sweep\n"
    "events_sweep()\n"
)


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_a_dispatcher_killed_mid_batch_loses_nothing_and_the_sweep_doubles_nothing(settings, monkeypatch):
    settings.GOVERNOR_REACTIONS = REACTIONS
    # The emitting process dies after its commits (no after-commit dispatch): the sweep owns them.
    monkeypatch.setattr("events.services._dispatch_after_commit", lambda ids: None)
    key = f"events-kill-{uuid.uuid4().hex[:8]}"
    total, block_at = 12, 5
    events = [emit("thing.change", payload={"key": key, "block_at": block_at}) for _ in range(total)]
    r = _redis()
    proc = subprocess.Popen(
        [sys.executable, "-c", DISPATCHER], cwd=ROOT, env=subprocess_env(REDIS_URL=django_settings.REDIS_URL)
    )
    try:
        deadline = time.monotonic() + 120
        while not r.get(f"{key}:blocked"):
            assert proc.poll() is None, "the dispatcher ended before its fifth reaction"
            assert time.monotonic() < deadline, "the dispatcher never reached its fifth reaction"
            time.sleep(0.05)
        # Its fifth reaction applied its effect; its delivery is not marked yet: kill it there.
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    try:
        assert Delivery.objects.filter(status="done").count() == block_at - 1
        assert r.hlen(f"{key}:effects") == block_at  # the fifth's effect happened, its mark did not

        # The beat's sweep: the killed dispatcher's lock goes with its connection, so it delivers
        # the fifth again and the seven it never reached (waiting only for PostgreSQL to notice).
        deadline = time.monotonic() + 60
        while Delivery.objects.exclude(status="done").exists():
            events_sweep()
            assert time.monotonic() < deadline, "the sweep did not deliver what the killed dispatcher left"
        assert set(Delivery.objects.values_list("status", "attempts")) == {("done", 1)}
        effects = {int(k) for k in r.hkeys(f"{key}:effects")}
        assert effects == {e.pk for e in events}  # no event lost
        calls = {int(k): int(v) for k, v in r.hgetall(f"{key}:calls_per_event").items()}
        blocked = int(r.get(f"{key}:blocked"))
        assert calls == {
            e.pk: 2 if e.pk == blocked else 1 for e in events
        }  # at least once, once more only there
        assert int(r.get(f"{key}:calls")) == total + 1
    finally:
        r.delete(*(f"{key}:{s}" for s in ("calls", "calls_per_event", "effects", "blocked")))
        r.close()
