"""Fixtures for the Batch API's tests: a tenant with a key and prices, a simulated engine on a route,
a gateway passing /v1/files and /v1/batches to the live console, and a Celery worker running batches."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest

from tests.batches.stack import Gateway, Worker
from tests.gateway.conftest import PREFIX, publish, route, start_engine

MODEL = "batch-llama"


@pytest.fixture(autouse=True)
def _batch_settings(settings):
    settings.GATEWAY_KEY_PREFIX = PREFIX


@pytest.fixture
def queue():
    from workers.celery import app

    previous = app.conf.task_default_queue
    name = app.conf.task_default_queue = f"batchtest-{uuid.uuid4().hex}"
    try:
        yield name
    finally:
        app.conf.task_default_queue = previous


@pytest.fixture(scope="session")
def batch_engine(tmp_path_factory):
    proc, url = start_engine(
        tmp_path_factory.mktemp("batch-engine"), name="batch-engine", model=MODEL, ttft_ms=5, tpot_ms=1
    )
    yield url
    proc.stop()


@pytest.fixture
def priced(transactional_db):
    """Online and batch prices for the model: batch lines bill at the batch one."""
    from billing.services.prices import price_publish, price_set

    online = price_set(
        public_model=MODEL, input_per_million=Decimal("2"), output_per_million=Decimal("8"), actor=None
    )
    batch = price_publish(
        public_model=MODEL, input_per_million=Decimal("1"), output_per_million=Decimal("4"), actor=None,
        provenance={"formula": "test: half the online price"}, kind="batch",
    )  # fmt: skip
    return online, batch


@pytest.fixture
def keys(transactional_db, tenant, other_tenant):
    from billing.services.keys import api_key_create

    key, secret = api_key_create(tenant=tenant, name="batch", actor=None)
    other, other_secret = api_key_create(tenant=other_tenant, name="other", actor=None)
    narrow, narrow_secret = api_key_create(
        tenant=tenant, name="narrow", actor=None, allowed_models=["another"]
    )
    return {"key": key, "secret": secret, "other": other_secret, "narrow": narrow_secret}


@pytest.fixture
def stack(tmp_path, live_server, batch_engine, keys, priced, queue):
    """Gateway + console + worker; routes and tenancy published. Yields a dict of the parts."""
    from tests.conftest import test_database_url

    gw = Gateway(tmp_path, database_url=test_database_url(), console_url=live_server.url)
    gw.start()
    worker = Worker(tmp_path, queue=queue, GATEWAY_INTERNAL_URL=gw.url, GATEWAY_KEY_PREFIX=PREFIX,
                    BATCH_LINE_LEASE_S="3", BATCH_CONCURRENCY="8", BATCH_RUN_SLICE_S="5")  # fmt: skip
    worker.start()
    publish(gw.url, route(MODEL, (1, "batch-dep", batch_engine, 1.0)))
    try:
        yield {"gateway": gw, "worker": worker, **keys}
    finally:
        worker.kill()
        gw.stop()
