"""A real Celery worker process, a real Redis broker, a real task result."""

import pytest

from workers.tasks import ping


@pytest.mark.django_db(transaction=True)
def test_worker_process_runs_task_and_returns_result_through_redis(celery_worker_process, settings):
    assert settings.CELERY_TASK_ALWAYS_EAGER is False
    result = ping.delay()
    assert result.get(timeout=30) == {"pong": True, "db": True}
    assert celery_worker_process["process"].poll() is None
