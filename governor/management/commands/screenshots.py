"""Screenshots of a running console for the README, taken with Playwright on Debian's chromium."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from governor.chromium import CHROMIUM_ARGS, chromium_path

# (file name, path, text that must be on the page before the shot is taken)
PAGES = [
    ("catalog.png", "/catalog/versions/?precision=", "Model versions"),
    ("deployments.png", "/deployments/", "Deployments"),
    ("benchmarks.png", "/benchmarks/", "Benchmark"),
    ("usage.png", "/billing/usage/", "Usage"),
]


class Command(BaseCommand):
    help = "Sign in to a running console as the demo admin and save screenshots under docs/screenshots/."

    def add_arguments(self, parser):
        parser.add_argument("--base-url", default="http://127.0.0.1:8000")
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default="governor-admin")
        parser.add_argument("--out", default="docs/screenshots")
        parser.add_argument("--version-page", action="store_true", help="also shoot the first version's page")
        parser.add_argument("--only", action="store_true", help="only the pages given with --page")
        parser.add_argument(
            "--page",
            action="append",
            default=[],
            metavar="FILE=PATH",
            help="another page, e.g. run.png=/benchmarks/1/; end it with #id to shoot from that element down",
        )

    def handle(self, *args, base_url, username, password, out, version_page, only, page, **options):
        from playwright.sync_api import sync_playwright

        path = chromium_path()
        if not path:
            raise CommandError("Debian's chromium is not installed (apt-get install chromium)")
        out_dir = Path(out)
        out_dir.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
            extra = [(*item.split("=", 1), "Governor") for item in page]
            page = browser.new_page(viewport={"width": 1400, "height": 860})
            page.goto(f"{base_url}/accounts/login/")
            page.fill("#id_username", username)
            page.fill("#id_password", password)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base_url}/")
            shots = ([] if only else list(PAGES)) + extra
            if version_page:
                shots.insert(0, ("catalog-version.png", "/catalog/versions/1/", "Memory estimate"))
            for name, url, marker in shots:
                url, _, anchor = url.partition("#")
                response = page.goto(f"{base_url}{url}")
                if response is None or response.status >= 400:
                    self.stderr.write(f"skip {url}: HTTP {response.status if response else '?'}")
                    continue
                page.get_by_text(marker).first.wait_for()
                page.wait_for_timeout(1500)  # let htmx polls and charts settle
                if anchor:
                    element = page.locator(f"#{anchor}")
                    if element.count() == 0:
                        self.stderr.write(f"skip {url}: no element #{anchor}")
                        continue
                    page.evaluate("id => document.getElementById(id).scrollIntoView()", anchor)
                    page.wait_for_timeout(300)
                page.screenshot(path=str(out_dir / name), full_page=False)
                self.stdout.write(f"wrote {out_dir / name}")
            browser.close()
