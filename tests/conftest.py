"""Shared fixtures: one user per role, logged-in clients, and real worker processes.

Roles (see core.access): ``admin_user`` (platform admin), ``auditor_user``, ``member_user``
(member of ``tenant``), ``tenant_admin_user`` (admin of ``tenant``) and ``outsider_user`` (member of
``other_tenant`` only). ``norole_user`` is signed in but holds no role at all.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path

import pytest
from django.contrib.auth.models import Group

from core.access import AUDITOR_GROUP
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.support.browser import browser, page  # noqa: F401  (fixtures for every app's browser tests)
from tests.support.vllm import tiny_vllm, tiny_vllm_model  # noqa: F401  (the shared vLLM server)

ROOT = Path(__file__).resolve().parent.parent
# This run's tasks go to a queue only its own worker consumes, so a platform running on the same
# Redis never takes them (and never runs them against the wrong database).
TEST_QUEUE = f"governor-test-{os.getpid()}"


# What ``--fast`` leaves out: tests that start Ray clusters or vLLM, drive a browser, fuzz for
# minutes, start their own worker or command processes and wait on them, or are marked slow. The
# rest is the day-to-day loop (README, ADR 0023).
SLOW_TIER_MARKERS = ("vllm", "ray", "browser", "fuzz", "process", "slow")
# The order files are handed to the workers in: longest kinds first (pytest_collection_modifyitems).
LONGEST_FIRST = ("vllm", "ray", "fuzz", "browser", "slow", "process")


def pytest_addoption(parser):
    parser.addoption(
        "--fast",
        action="store_true",
        default=False,
        help="the fast tier: leave out tests marked " + ", ".join(SLOW_TIER_MARKERS),
    )


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Four workers for the full suite (the addopts), two for ``--fast`` unless ``-n`` was given.

    The full suite mostly waits (on vLLM and Ray starting, Celery tasks, browsers, outages held for
    a minute), so four workers on two cores overlap those waits; beside two busy loops it took 23
    minutes with four where it took 66 with two (ADR 0013). The fast tier is in-process CPU work,
    where two more workers only add two more test databases and collections: 92 s with two, 130 s
    with four on a quiet 2-core host."""
    args = config.invocation_params.args
    explicit = any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in args)
    if config.getoption("--fast", default=False) and not explicit and config.option.numprocesses:
        config.option.numprocesses = 2


def _pytestmark_nodes(path: Path) -> list[ast.AST]:
    """Every AST node of a test file's module-level ``pytestmark`` assignment (no import: importing
    is what costs the time)."""
    source = path.read_text(encoding="utf-8")
    if "pytestmark" not in source:
        return []
    return [
        sub
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        for sub in ast.walk(node.value)
    ]


def _module_marks(path: Path) -> set[str]:
    """The markers a test file's module-level ``pytestmark`` names, read from its source."""
    return {
        sub.attr
        for sub in _pytestmark_nodes(path)
        if isinstance(sub, ast.Attribute)
        and isinstance(sub.value, ast.Attribute)
        and sub.value.attr == "mark"
    }


@functools.cache
def _module_xdist_group(path: Path) -> str | None:
    """The group a file's ``pytestmark`` names with ``pytest.mark.xdist_group("name")``, if any."""
    if not path.is_file():
        return None
    for sub in _pytestmark_nodes(path):
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "xdist_group"
            and sub.args
            and isinstance(sub.args[0], ast.Constant)
            and isinstance(sub.args[0].value, str)
        ):
            return sub.args[0].value
    return None


def pytest_xdist_make_scheduler(config, log):
    """Whole files to workers (``--dist loadfile``), except that files naming one xdist group go to
    one worker together, as one unit: they share a session fixture too slow to start once per
    file (the tiny vLLM server, ``tests/support/vllm.py``). Under any other ``--dist`` mode,
    pytest-xdist's own scheduler."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class GroupedFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            group = _module_xdist_group(Path(config.rootpath, file))
            return f"xdist_group:{group}" if group else file

    return GroupedFileScheduling(config, log)


def pytest_ignore_collect(collection_path, config):
    """Under ``--fast`` a file whose module-level ``pytestmark`` puts every test in the slow tier is
    not even imported: collecting the API fuzz alone builds schemathesis's coverage cases for every
    operation (about 40 s per worker), and the vLLM files import torch. Such files are then
    absent from the run rather than counted as deselected. ``None`` leaves the decision to pytest."""
    if not config.getoption("--fast", default=False):
        return None
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    if _module_marks(collection_path) & set(SLOW_TIER_MARKERS):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    """The longest files go first: those that start vLLM, then Ray clusters, the API fuzz, the
    browser and other processes, then the rest. pytest-xdist hands whole files out in this order
    (``--no-loadscope-reorder`` in the addopts, ADR 0013), so the one worker that takes the
    vLLM quality gate (minutes) starts it at once while the other works through the short files,
    instead of the gate starting last and running alone at the end.

    Under ``--fast`` the slow tier is deselected (reported as deselected, not skipped)."""
    if config.getoption("--fast"):
        slow = [item for item in items if any(item.get_closest_marker(m) for m in SLOW_TIER_MARKERS)]
        if slow:
            config.hook.pytest_deselected(items=slow)
            slow_ids = {id(item) for item in slow}
            items[:] = [item for item in items if id(item) not in slow_ids]
    # A file ranks by its longest kind of test; among files of one rank, those whose every test
    # is of that kind (a whole vLLM file) go before those with one such test among quick ones.
    ranks: dict[Path, list[int]] = {}
    for item in items:
        ranks.setdefault(item.path, []).append(
            next((i for i, m in enumerate(LONGEST_FIRST) if item.get_closest_marker(m)), len(LONGEST_FIRST))
        )
    # Within a rank, files with more tests go first, as pytest-xdist's own default order does.
    key = {path: (min(r), max(r) != min(r), -len(r)) for path, r in ranks.items()}
    items.sort(key=lambda item: key[item.path])  # stable: order within a file is kept


@pytest.fixture(scope="session", autouse=True)
def _ray_task_routes():
    """Reconciles and Ray watches reach only a worker that knows the test's Ray cluster
    (``tests.support.celery_worker.route_ray_tasks``); otherwise a queue nobody reads."""
    from tests.support.celery_worker import install_ray_task_routes

    install_ray_task_routes()


@pytest.fixture(autouse=True)
def _cheap_test_settings(settings):
    """Hashing cost is irrelevant to what the tests check; PBKDF2 would dominate their run time.

    Each test client builds its own middleware stack, and WhiteNoise's middleware indexes every static file
    the finders know (about 220) when it is built: 90 ms per client, a fifth of a page test's time.
    With autorefresh it looks a static URL up when one is asked for instead; what it serves, and
    with which headers, is the same."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.WHITENOISE_AUTOREFRESH = True


@pytest.fixture(autouse=True)
def _own_audit_witness(settings, tmp_path_factory):
    """Each test database's chain starts empty: its signed checkpoints go to a fresh witness file,
    never to one left by an earlier run of the same test database (ADR 0018)."""
    settings.AUDIT_WITNESS_PATH = str(tmp_path_factory.mktemp("audit-witness") / "witness.jsonl")
    # A test's own transaction is invisible to a background sealer's connection: seal in-thread.
    settings.AUDIT_SEAL_IN_BACKGROUND = False


@pytest.fixture
def tenant(db):
    return TenantFactory(name="Acme Search", slug="acme")


@pytest.fixture
def other_tenant(db):
    return TenantFactory(name="Globex Support", slug="globex")


@pytest.fixture
def admin_user(db):
    return UserFactory(username="admin", is_superuser=True, is_staff=True)


@pytest.fixture
def auditor_user(db):
    user = UserFactory(username="auditor")
    user.groups.add(Group.objects.get_or_create(name=AUDITOR_GROUP)[0])
    return user


@pytest.fixture
def member_user(tenant):
    user = UserFactory(username="member")
    MembershipFactory(user=user, tenant=tenant, role="member")
    return user


@pytest.fixture
def tenant_admin_user(tenant):
    user = UserFactory(username="tenantadmin")
    MembershipFactory(user=user, tenant=tenant, role="admin")
    return user


@pytest.fixture
def outsider_user(other_tenant):
    user = UserFactory(username="outsider")
    MembershipFactory(user=user, tenant=other_tenant, role="member")
    return user


@pytest.fixture
def norole_user(db):
    return UserFactory(username="norole")


def _client_for(client_factory, user):
    from django.test import Client

    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def admin_client(admin_user):
    return _client_for(None, admin_user)


@pytest.fixture
def auditor_client(auditor_user):
    return _client_for(None, auditor_user)


@pytest.fixture
def member_client(member_user):
    return _client_for(None, member_user)


@pytest.fixture
def tenant_admin_client(tenant_admin_user):
    return _client_for(None, tenant_admin_user)


@pytest.fixture
def outsider_client(outsider_user):
    return _client_for(None, outsider_user)


@pytest.fixture
def norole_client(norole_user):
    return _client_for(None, norole_user)


@pytest.fixture
def anon_client():
    from django.test import Client

    return Client()


@pytest.fixture
def role_clients(admin_client, auditor_client, member_client, outsider_client, anon_client):
    """All roles at once, for tests that walk a view through every role."""
    return {
        "admin": admin_client,
        "auditor": auditor_client,
        "member": member_client,
        "outsider": outsider_client,
        "anon": anon_client,
    }


def test_database_url() -> str:
    """The URL of pytest-django's test database, for processes the tests start."""
    from django.db import connection

    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgresql://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a child process that must see the test database and Redis."""
    env = dict(os.environ)
    env.update(
        DATABASE_URL=test_database_url(), PYTHONUNBUFFERED="1", DJANGO_SETTINGS_MODULE="governor.settings"
    )
    env.setdefault("SECRET_KEY", "governor-test-secret-key-not-for-production")
    # One platform start for every process, as the launcher gives its children: otherwise a worker
    # started later would call every deployment observed before it "unknown" and publish routes the
    # gateway refuses to use.
    from django.conf import settings

    env.setdefault("GOVERNOR_STARTED_AT", f"{settings.PLATFORM_STARTED_AT:.3f}")
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker, tmp_path_factory):
    """A real Celery worker process consuming from Redis against the test database.

    Tests that use it must also use ``transactional_db`` so the rows they write are committed and
    visible to the worker.
    """
    from tests.support.celery_worker import celery_worker

    with django_db_blocker.unblock():
        env = subprocess_env()
    log_path = tmp_path_factory.mktemp("celery") / "worker.log"
    with celery_worker(env=env, queue=TEST_QUEUE, log_path=log_path, name=f"test-{os.getpid()}") as worker:
        yield worker
