"""Property-based fuzzing of the whole API from its OpenAPI schema (schemathesis).

Every operation is called with generated data as a platform admin, a tenant admin, a tenant member
and an auditor; the suite fails on any 5xx and on any response that does not match the schema.
Deterministic (derandomized Hypothesis) and bounded (a few examples per operation), so it runs in
CI in a few minutes.
"""

from __future__ import annotations

import base64
import os

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase, settings
from schemathesis.specs.openapi.checks import response_schema_conformance

from governor.wsgi import application
from tests.factories import MembershipFactory, TenantFactory, UserFactory

PASSWORD = "pw-for-fuzz-1"
# Examples per operation for the platform admin (a third of it for each other role). The default
# keeps the whole fuzz to a few minutes on an idle 2-core CI machine; raise it for a deeper search:
# GOVERNOR_FUZZ_EXAMPLES=30 python -m pytest tests/governor/test_api_fuzz.py
MAX_EXAMPLES = int(os.environ.get("GOVERNOR_FUZZ_EXAMPLES", "8"))


def _load_schema():
    raw = SchemaGenerator().get_schema(request=None, public=True)
    # Round-trip through JSON so the generator's lazy strings and enums become plain data.
    import json

    from rest_framework.utils.encoders import JSONEncoder

    data = json.loads(json.dumps(raw, cls=JSONEncoder))
    schema = schemathesis.openapi.from_dict(data)
    schema.app = application
    return schema


schema = _load_schema()

# Every test here is the long fuzz: the fast tier does not even collect this file (tests/conftest.py).
pytestmark = pytest.mark.fuzz


@pytest.fixture
def _keep_test_connection():
    """Django's WSGI handler closes the DB connection when a request finishes; inside a test that
    is the test's transaction. Django's own test client unhooks that too."""
    from django.core import signals
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_users(db, _keep_test_connection):
    from django.contrib.auth.models import Group

    from core.access import AUDITOR_GROUP

    acme = TenantFactory(name="Acme Search", slug="acme")
    TenantFactory(name="Globex Support", slug="globex")
    users = {
        "admin": UserFactory(username="fuzz-admin", is_superuser=True, is_staff=True),
        "auditor": UserFactory(username="fuzz-auditor"),
        "tenant_admin": UserFactory(username="fuzz-tadmin"),
        "member": UserFactory(username="fuzz-member"),
    }
    users["auditor"].groups.add(Group.objects.get_or_create(name=AUDITOR_GROUP)[0])
    MembershipFactory(user=users["tenant_admin"], tenant=acme, role="admin")
    MembershipFactory(user=users["member"], tenant=acme, role="member")
    for u in users.values():
        u.set_password(PASSWORD)
        u.save()
    return users


def _basic(user) -> dict[str, str]:
    token = base64.b64encode(f"{user.username}:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def _not_a_server_error(ctx, response, case):
    if response.status_code >= 500:
        raise AssertionError(
            f"{case.method} {case.formatted_path} answered {response.status_code}: {response.text[:500]}"
        )
    return None


def _call(case, user):
    case.call_and_validate(headers=_basic(user), checks=[_not_a_server_error, response_schema_conformance])


_SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))


# A one-value parametrize only so that each operation's node id names it (as the other roles' do);
# schemathesis alone gives all of them one id, and a scheduler keyed by node id would run one.
@pytest.mark.parametrize("role", ["admin"])
@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, **_SETTINGS)
def test_api_as_platform_admin_never_answers_5xx_and_matches_its_schema(case, role, fuzz_users):
    _call(case, fuzz_users[role])


# A tenant admin may write only under /api/billing/ (their tenant's keys, members, budgets and
# limits); every other write is a platform admin's and is refused on the role before any body is
# read. The coverage phase's boundary cases go where their writes are accepted; elsewhere they get
# the generated examples, which still try every operation as them.
TENANT_ADMIN_WRITES = r"^/api/billing/"


@pytest.mark.parametrize("role", ["tenant_admin"])
@schema.include(path_regex=TENANT_ADMIN_WRITES).parametrize()
@settings(max_examples=max(2, MAX_EXAMPLES // 3), **_SETTINGS)
def test_api_as_tenant_admin_never_answers_5xx_and_matches_its_schema(case, role, fuzz_users):
    # Most of their writes are refused before any data is read, so fewer examples reach as far.
    _call(case, fuzz_users[role])


@pytest.mark.parametrize("role", ["tenant_admin"])
@schema.exclude(path_regex=TENANT_ADMIN_WRITES).parametrize()
@settings(max_examples=max(2, MAX_EXAMPLES // 3), phases=[Phase.generate], **_SETTINGS)
def test_api_as_tenant_admin_outside_billing_never_answers_5xx_and_matches_its_schema(case, role, fuzz_users):
    _call(case, fuzz_users[role])


# Members and auditors get the generated examples only, not schemathesis's coverage phase (about
# 120 boundary and wrong-type cases per operation, run as explicit examples). Neither may write
# anything, so every one of those cases stops at the same role check; the platform admin's run sends
# every coverage case through the validation behind it, and the tenant admin's does so where tenant
# admins may write. The generated examples still try every operation as each of them.
@pytest.mark.parametrize("role", ["member", "auditor"])
@schema.parametrize()
@settings(max_examples=max(2, MAX_EXAMPLES // 3), phases=[Phase.generate], **_SETTINGS)
def test_api_as_member_or_auditor_never_answers_5xx_and_matches_its_schema(case, role, fuzz_users):
    _call(case, fuzz_users[role])
