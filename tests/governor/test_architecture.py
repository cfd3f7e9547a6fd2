"""The architecture contracts in pyproject.toml hold, and they catch the imports they forbid."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))
# The packages the contracts know (a new top-level package joins them in pyproject.toml only).
PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([LINT_IMPORTS], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_contracts_hold():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.fixture(scope="module")
def copy_of_the_code(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("arch")
    for package in PACKAGES:
        if (ROOT / package).is_dir():
            shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.process
@pytest.mark.parametrize(
    "module,line,contract",
    [
        (
            "engines/_probe.py",
            "import django.db\n",
            "Libraries (engines, loadtest, evalkit, gateway, asgistream)",
        ),
        (
            "gateway/_probe.py",
            "from billing.selectors import usage\n",
            "Libraries (engines, loadtest, evalkit, gateway, asgistream)",
        ),
        ("gateway/_probe.py", "from core.text import REASON_MAX_CHARS\n", "Libraries (engines"),
        ("snapshot/_probe.py", "import gateway.limits\n", "envconf, snapshot and http1, the leaves"),
        ("envconf/_probe.py", "import django.conf\n", "envconf, snapshot and http1, the leaves"),
        ("http1/_probe.py", "import gateway.upstream\n", "envconf, snapshot and http1, the leaves"),
        ("http1/_probe.py", "import envconf\n", "envconf, snapshot and http1, the leaves"),
        ("http1/_probe.py", "import django.conf\n", "envconf, snapshot and http1, the leaves"),
        ("audit/_probe.py", "import catalog.selectors\n", "The audit app is a leaf"),
        ("audit/_probe.py", "from core.access import is_auditor\n", "The audit app is a leaf"),
        ("events/_probe.py", "import audit.services\n", "The event spine is the bottom leaf"),
        ("events/_probe.py", "from deployments import reactions\n", "The event spine is the bottom leaf"),
        ("catalog/_probe.py", "import deployments.selectors\n", "Apps are layered"),
        ("core/_probe.py", "from catalog.selectors import catalog_counts\n", "Apps are layered"),
        ("billing/_probe.py", "import workers.celery\n", "Apps are layered"),
        ("deployments/_probe.py", "from governor.demo import GPU_TYPES\n", "Apps are layered"),
        ("evaluations/_probe.py", "from billing.models import Tenant\n", "imports billing only through"),
        ("governor/_probe.py", "from catalog.models import Model\n", "imports catalog only through"),
        ("benchmarks/_probe.py", "from tests.support.servers import free_port\n", "never imports the tests"),
    ],
)
def test_a_forbidden_import_breaks_its_contract(copy_of_the_code, module, line, contract):
    probe = copy_of_the_code / module
    probe.write_text(line)
    try:
        result = _lint(copy_of_the_code)
    finally:
        probe.unlink()
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout


@pytest.mark.process
@pytest.mark.parametrize("app", ["catalog", "deployments", "evaluations", "billing", "audit", "events"])
def test_a_new_module_is_private_to_its_app_until_listed_as_public(copy_of_the_code, app):
    """Allow-lists, not deny-lists: a module nobody has named yet (here ``<app>/_fresh.py``) may be
    imported inside its app, but not by another app or by the console on top, until a contract
    lists it as public."""
    fresh = copy_of_the_code / app / "_fresh.py"
    inside = copy_of_the_code / app / "_uses_fresh.py"
    outside = copy_of_the_code / "governor" / "_probe.py"
    fresh.write_text("VALUE = 1\n")
    inside.write_text(f"from {app}._fresh import VALUE\n")
    try:
        kept = _lint(copy_of_the_code)
        outside.write_text(f"from {app}._fresh import VALUE\n")
        broken = _lint(copy_of_the_code)
    finally:
        for probe in (fresh, inside, outside):
            probe.unlink(missing_ok=True)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert broken.returncode != 0
    report = broken.stdout.split("Broken contracts", 1)[-1]
    assert f"imports {app} only through" in report, broken.stdout
    assert f"governor._probe -> {app}._fresh" in report, broken.stdout


@pytest.mark.process
def test_a_public_name_at_any_depth_is_public_and_a_listed_module_must_exist(copy_of_the_code):
    """A concept sub-package's ``services`` is public like the app's own; a public module that is
    listed but gone breaks the contract instead of leaving a stale allow-list."""
    package = copy_of_the_code / "billing" / "_concept"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "services.py").write_text("VALUE = 1\n")
    probe = copy_of_the_code / "evaluations" / "_probe.py"
    probe.write_text("from billing._concept.services import VALUE\n")
    pyproject = copy_of_the_code / "pyproject.toml"
    original = pyproject.read_text()
    try:
        assert _lint(copy_of_the_code).returncode == 0
        listed = 'public_modules = ["catalog.constants", "catalog.promotion"]'
        assert listed in original
        pyproject.write_text(
            original.replace(
                listed, 'public_modules = ["catalog.constants", "catalog.promotion", "catalog.gone"]'
            )
        )
        stale = _lint(copy_of_the_code)
    finally:
        pyproject.write_text(original)
        probe.unlink()
        shutil.rmtree(package)
    assert stale.returncode != 0
    assert "catalog.gone is listed as public but does not exist" in stale.stdout, stale.stdout
