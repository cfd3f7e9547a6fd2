"""A real Celery worker process, a real Redis broker, a real task result."""

import pytest

from workers.tasks import ping

# Starts its own processes and waits on them: the full suite's, not the fast tier's (ADR 0023).
pytestmark = pytest.mark.process


@pytest.mark.django_db(transaction=True)
def test_worker_process_runs_task_and_returns_result_through_redis(celery_worker_process, settings):
    assert settings.CELERY_TASK_ALWAYS_EAGER is False
    result = ping.delay()
    assert result.get(timeout=30) == {"pong": True, "db": True}
    assert celery_worker_process["process"].poll() is None


def test_ray_tasks_reach_only_a_worker_that_knows_the_ray_cluster(settings):
    """The session's worker (default queue) must never take a reconcile: it would find no Ray
    cluster and mark every deployment of the shared test database UNKNOWN for minutes."""
    import redis

    from deployments.tasks import reconcile, watch
    from tests.support.celery_worker import RAY_TASKS_VOID, ray_tasks_to
    from workers.celery import app

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    aware, default = "governor-test-ray-aware-probe", "governor-test-default-probe"
    queues = (RAY_TASKS_VOID, aware, default)
    previous, app.conf.task_default_queue = app.conf.task_default_queue, default  # no worker reads it
    try:
        client.delete(*queues)
        reconcile.delay(trigger="probe")
        watch.delay(token="probe")
        assert (client.llen(RAY_TASKS_VOID), client.llen(default)) == (2, 0)
        with ray_tasks_to(aware):
            reconcile.delay(trigger="probe")
        assert (client.llen(aware), client.llen(RAY_TASKS_VOID)) == (1, 2)
        ping.delay()  # every other task still goes to the default queue
        assert client.llen(default) == 1
    finally:
        app.conf.task_default_queue = previous
        client.delete(*queues)
        client.close()


def test_every_beat_entry_names_a_task_the_workers_register():
    """A renamed or moved task leaves its beat entry firing into nothing: Celery beat sends the name
    and no worker knows it. Every entry must name a task the worker app has registered."""
    from workers.celery import app

    app.loader.import_default_modules()  # what a worker does at start: autodiscover every app's tasks
    registered = set(app.tasks)
    schedule = app.conf.beat_schedule
    assert schedule, "the beat schedule is empty"
    unknown = {name: entry["task"] for name, entry in schedule.items() if entry["task"] not in registered}
    assert not unknown, f"beat entries naming tasks no worker registers: {unknown}"
