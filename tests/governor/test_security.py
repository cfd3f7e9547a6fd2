"""Console-wide hardening: CSP and no inline script, NUL bytes, 401 for anonymous API calls,
API docs served from local static files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.urls import reverse

ROOT = Path(__file__).resolve().parents[2]

# Executable inline script: a <script> without src whose type is absent or a JavaScript type.
_SCRIPT_TAG = re.compile(r"<script\b([^>]*)>", re.IGNORECASE)
_STYLE_TAG = re.compile(r"<style\b[^>]*>", re.IGNORECASE)  # style-src 'self' blocks a <style> element
_HANDLER = re.compile(
    r"""\son[a-z]+\s*=|\shx-on[:\-]|\sstyle\s*=|javascript:|\shx-vals\s*=\s*['"]\s*js:""", re.IGNORECASE
)


def _template_files() -> list[Path]:
    dirs = [ROOT / "templates", *ROOT.glob("*/templates")]
    return sorted(p for d in dirs if d.is_dir() for p in d.rglob("*.html") if ".venv" not in p.parts)


def inline_script_problems(text: str) -> list[str]:
    problems = []
    for m in _SCRIPT_TAG.finditer(text):
        attrs = m.group(1)
        if re.search(r"\bsrc\s*=", attrs):
            continue
        t = re.search(r"""\btype\s*=\s*["']?([^"'\s>]+)""", attrs)
        if t and t.group(1).lower() not in ("text/javascript", "module", "application/javascript"):
            continue  # data blocks (application/json) are not executed and CSP allows them
        problems.append(f"inline <script{attrs}>")
    problems += [f"inline attribute {m.group(0).strip()!r}" for m in _HANDLER.finditer(text)]
    problems += [f"inline {m.group(0)!r} element" for m in _STYLE_TAG.finditer(text)]
    return problems


def test_the_scan_recognises_what_it_must_refuse():
    assert inline_script_problems("<form onsubmit=\"return confirm('x')\">")
    assert inline_script_problems('<button onclick="go()">')
    assert inline_script_problems("<script>alert(1)</script>")
    assert inline_script_problems('<script type="text/javascript">x()</script>')
    assert inline_script_problems('<div hx-on:click="x()">') and inline_script_problems(
        '<div hx-on-click="x()">'
    )
    assert inline_script_problems('<div style="width: 5%">')
    assert inline_script_problems("<style>.chart-box { height: 260px; }</style>")
    assert not inline_script_problems('<script src="/static/x.js" defer></script>')
    assert not inline_script_problems('<script id="d" type="application/json">{}</script>')
    assert not inline_script_problems('<form data-confirm="Delete?" class="online">')


def test_no_template_has_inline_javascript_handlers_or_styles():
    files = _template_files()
    assert len(files) > 20, "the scan found too few templates to be looking in the right place"
    found = {
        str(p.relative_to(ROOT)): probs for p in files if (probs := inline_script_problems(p.read_text()))
    }
    assert not found, f"inline JavaScript/style in templates (move it to static files): {found}"


def _csp(response) -> dict[str, str]:
    header = response.headers.get("Content-Security-Policy", "")
    return {d.split()[0]: d for d in (x.strip() for x in header.split(";")) if d}


@pytest.mark.parametrize("url", ["/", "/catalog/versions/", "/billing/tenants/", "/accounts/login/"])
def test_pages_send_a_csp_that_forbids_inline_script(admin_client, url):
    response = admin_client.get(url)
    assert response.status_code == 200
    csp = _csp(response)
    assert csp["script-src"] == "script-src 'self'"
    assert "unsafe-inline" not in csp.get("style-src", "") and "unsafe-eval" not in str(csp)
    assert csp["object-src"] == "object-src 'none'"


def test_base_page_loads_the_confirm_behaviour_and_turns_off_htmx_inline_styles(admin_client):
    html = admin_client.get("/").content.decode()
    assert "/static/governor.js" in html
    assert '"includeIndicatorStyles":false' in html
    assert (ROOT / "static" / "governor.js").read_text().count("data-confirm") >= 2


# --- NUL bytes ---------------------------------------------------------------------------------

NUL_API = [
    "/api/evaluations/runs/?status=%00",
    "/api/evaluations/runs/?kind=%00",
    "/api/evaluations/runs/?mode=%00",
    "/api/evaluations/runs/?status=running%00x",
    "/api/billing/usage/?tenant=%00",
    "/api/billing/keys/?search=%00",
    "/api/catalog/versions/?lifecycle=%00",
    "/api/deployments/deployments/?status=%00",
    "/api/billing/tenants/?ordering=%00",
]
NUL_PAGES = [
    "/benchmarks/?status=%00",
    "/deployments/?q=%00",
    "/catalog/versions/?q=%00",
    "/billing/usage/?tenant=%00",
    "/billing/keys/?page=%00",
    "/billing/tenants/?q=%00",
]


@pytest.mark.parametrize("url", NUL_API)
def test_api_list_filters_answer_400_to_a_nul_byte(admin_client, url):
    response = admin_client.get(url)
    assert response.status_code == 400, (url, response.status_code)
    assert "NUL" in response.json()["detail"]


@pytest.mark.parametrize("url", NUL_PAGES)
def test_console_list_pages_answer_400_to_a_nul_byte(admin_client, url):
    response = admin_client.get(url)
    assert response.status_code == 400, (url, response.status_code)
    assert "NUL" in response.content.decode()


def test_a_form_post_with_a_nul_byte_is_refused_and_saves_nothing(admin_client, tenant):
    from billing.models import Tenant

    before = Tenant.objects.count()
    response = admin_client.post("/billing/tenants/new/", {"name": "Evil\x00Corp", "slug": "evil"})
    assert response.status_code == 400
    assert Tenant.objects.count() == before


def test_clean_query_strings_still_work(admin_client):
    assert admin_client.get("/api/evaluations/runs/?status=running").status_code == 200
    assert admin_client.get("/benchmarks/?status=running").status_code == 200


def test_unknown_choice_in_an_api_filter_is_a_400_naming_it(admin_client):
    response = admin_client.get("/api/evaluations/runs/?status=bogus")
    assert response.status_code == 400
    assert "status" in response.json()


# --- anonymous API calls -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,url",
    [
        ("get", "/api/evaluations/runs/"),
        ("post", "/api/evaluations/runs/"),
        ("get", "/api/billing/tenants/"),
        ("get", "/api/catalog/versions/"),
        ("get", "/api/deployments/routing-table/"),
        ("get", "/api/schema/"),
        ("get", "/api/docs/"),
    ],
)
def test_anonymous_api_calls_get_401_with_a_challenge(anon_client, db, method, url):
    response = getattr(anon_client, method)(url)
    assert response.status_code == 401, (url, response.status_code)
    assert response.headers["WWW-Authenticate"].startswith("Basic")


def test_basic_auth_works_for_the_api(client, admin_user):
    import base64

    admin_user.set_password("pw-for-tests-1")
    admin_user.save()
    token = base64.b64encode(b"admin:pw-for-tests-1").decode()
    response = client.get("/api/catalog/versions/", HTTP_AUTHORIZATION=f"Basic {token}")
    assert response.status_code == 200


# --- API docs -----------------------------------------------------------------------------------


def _asset_urls(html: str) -> list[str]:
    return re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)


@pytest.mark.parametrize("url", ["/api/docs/", "/api/redoc/"])
def test_api_docs_reference_only_local_static_files(admin_client, url):
    response = admin_client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    urls = _asset_urls(html)
    assert urls, html
    external = [u for u in urls if re.match(r"^(https?:)?//", u)]
    assert not external, external
    assert any(u.startswith("/static/drf_spectacular_sidecar/") for u in urls), urls
    assert "<script>" not in html  # the init script is a separate request
    for u in urls:
        if u.startswith("/static/"):
            assert admin_client.get(u).status_code == 200, u
    assert _csp(response)["script-src"] == "script-src 'self'"


def test_swagger_init_script_is_served_as_a_file(admin_client):
    response = admin_client.get("/api/docs/?script=")
    assert response.status_code == 200
    assert "SwaggerUIBundle" in response.content.decode()
    assert "/api/schema/" in response.content.decode()


# --- messages -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url,body",
    [
        ("/api/evaluations/runs/", {"kind": "predicted"}),
        ("/api/catalog/gpu-types/", {"name": "X"}),
    ],
)
def test_an_auditors_refused_write_says_what_happened(auditor_client, url, body):
    response = auditor_client.post(url, body, content_type="application/json")
    assert response.status_code == 403
    assert response.json()["detail"] == "Auditors can read everything but change nothing."


def test_a_members_refused_write_says_who_may(member_client):
    response = member_client.post("/api/catalog/gpu-types/", {"name": "X"}, content_type="application/json")
    assert response.status_code == 403
    assert response.json()["detail"] == "Only platform admins may change this."


def test_an_auditor_on_an_admin_page_reads_why(auditor_client):
    response = auditor_client.get(reverse("deployments:create"))
    assert response.status_code == 403
    assert "Auditors can read everything but do nothing" not in response.content.decode()
    assert "Auditors can read everything but change nothing." in response.content.decode()


def test_a_json_body_with_an_escaped_nul_is_refused_and_saves_nothing(admin_client):
    from evaluations.models import BenchmarkRun

    body = '{"kind": "predicted", "sampling": {"stop": "a\\u0000b"}}'
    response = admin_client.post("/api/evaluations/runs/", body, content_type="application/json")
    assert response.status_code == 400 and "NUL" in response.json()["detail"]
    assert not BenchmarkRun.objects.exists()


def test_json_bodies_without_nul_still_reach_the_view(admin_client):
    response = admin_client.post(
        "/api/evaluations/runs/", '{"kind": "bogus"}', content_type="application/json"
    )
    assert response.status_code == 400 and "kind" in response.json()
