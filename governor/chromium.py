"""Where Debian's chromium is and how Playwright starts it (tests and ``manage.py screenshots``;
never a downloaded browser build)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CHROMIUM = os.environ.get("GOVERNOR_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    if Path(CHROMIUM).exists():
        return CHROMIUM
    return shutil.which("chromium")
