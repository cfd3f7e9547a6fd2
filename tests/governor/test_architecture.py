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
        ("audit/_probe.py", "import catalog.selectors\n", "The audit app is a leaf"),
        ("catalog/_probe.py", "import deployments.selectors\n", "Apps are layered"),
        ("evaluations/_probe.py", "from billing.models import Tenant\n", "reaches billing only through"),
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
