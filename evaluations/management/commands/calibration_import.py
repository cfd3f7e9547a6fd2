"""``manage.py calibration_import REPORT.json --gpu-type NAME``: make a simulator calibration the basis
of every later prediction on that GPU type (audited)."""

from __future__ import annotations

import json
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.core.management.base import BaseCommand, CommandError

from catalog.selectors import gpu_type_get, gpu_type_list
from evaluations.services.calibrations import calibration_import


class Command(BaseCommand):
    help = (
        "Import a calibration report (python -m benchmarks.simulator --calibration-points POINTS --json REPORT) "
        "for a GPU type: predictions on it then run with the fitted efficiencies and carry its interval."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("report", type=Path)
        parser.add_argument("--gpu-type", required=True, help="the catalog GPU type's name, e.g. 'H100 SXM'")
        parser.add_argument("--note", default="", help="why (kept in the audit trail)")
        parser.add_argument(
            "--actor", metavar="USER", help="record the import as this user's (default system:cli)"
        )

    def handle(self, *args, **options) -> None:
        path: Path = options["report"]
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CommandError(f"{path}: not a readable JSON report ({exc})") from exc
        try:
            gpu = gpu_type_get(name=options["gpu_type"])
        except ObjectDoesNotExist:
            known = ", ".join(g.name for g in gpu_type_list()) or "none"
            raise CommandError(
                f"--gpu-type: no GPU type named {options['gpu_type']!r} (known: {known})"
            ) from None
        actor = "system:cli"
        if options.get("actor"):
            actor = get_user_model().objects.filter(username=options["actor"]).first()
            if actor is None:
                raise CommandError(f"--actor: no user named {options['actor']!r}")
        try:
            cal = calibration_import(
                gpu_type=gpu, report=report, actor=actor, source=path.name, note=options["note"]
            )
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from exc
        iv = cal.interval_pct
        spans = (
            ", ".join(f"{m} {v[0]:+.1f} … {v[1]:+.1f} %" for m, v in iv.items() if v)
            or "no interval (in-sample)"
        )
        self.stdout.write(f"{cal}: efficiencies {cal.efficiency}; interval {spans}")
