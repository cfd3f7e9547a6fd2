"""Wall time of a full gate run (quality + performance + stability) of the demo's FP8 version.

What is timed is what an admin waits for after pressing "Run gates" in predicted mode: the gate
run's task body (``evaluations.services.gates.gate_run_execute``) from start to its last decision —

- quality: the ``governor-core`` suite (320 cases) against the FP8 and the bf16 simulated engines,
  32 in flight, each answering at its demo quality profile, at real-time speed (``--time-scale 1``);
- performance: predicted capacity sweeps of the FP8 and bf16 versions (30 s stages) on an H100;
- stability: a predicted 600 s soak in load waves with the demo's length mix.

It builds a throwaway database next to ``DATABASE_URL``'s (migrate + ``seed_demo``), starts two
simulated engines behind a ``/d/<slug>`` router (what Ray Serve's proxy does for the demo), runs
the gates in this process, and drops the database. Nothing is reused from an earlier run.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/x REDIS_URL=redis://127.0.0.1:6379/3 \\
        python -m benchmarks.gates --json var/bench-gates.json [--time-scale 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.smoke import add_smoke_flag, apply_smoke  # noqa: E402


def _database_urls() -> tuple[str, str, str]:
    """(server admin URL, throwaway database URL, its name)."""
    base = os.environ.get("DATABASE_URL")
    if not base:
        raise SystemExit("set DATABASE_URL to a PostgreSQL server the benchmark may create a database on")
    name = f"gatebench_{os.getpid()}"
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path="/postgres")), urlunsplit(parts._replace(path=f"/{name}")), name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--time-scale", type=float, default=1.0, help="simulated engines' speed (1 = real time)")
    add_smoke_flag(ap, time_scale=50.0)
    args = apply_smoke(ap.parse_args())

    import psycopg

    admin_url, db_url, db_name = _database_urls()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db_name}"')
    os.environ["DATABASE_URL"] = db_url
    os.environ.setdefault("SECRET_KEY", "benchmark-only-secret-key-0123456789")
    # Tasks the seed enqueues on commit (reconciles) go to a queue nobody consumes.
    os.environ["CELERY_TASK_DEFAULT_QUEUE"] = f"gatebench-void-{os.getpid()}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "governor.settings")
    try:
        figures = _run(args)
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


def _run(args) -> dict:
    import logging

    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per eval request otherwise
    from django.conf import settings
    from django.core.management import call_command

    from catalog.models import ModelVersion
    from engines.local import prefix_router, simulated_engine
    from evaluations.demo import BF16_PROFILE, FP8_PROFILE
    from evaluations.models import GateDecision
    from evaluations.services.gates import gate_run_execute, gate_run_start
    from governor.demo import seed_demo

    call_command("migrate", verbosity=0)
    seed_demo()
    fp8 = ModelVersion.objects.get(model__name="Llama-3.1-8B-Instruct", label="fp8")
    load_before = os.getloadavg()
    with (
        simulated_engine(model_name="Llama-3.1-8B-Instruct", quality=BF16_PROFILE, time_scale=args.time_scale) as bf16,
        simulated_engine(model_name="Llama-3.1-8B-Instruct", quality=FP8_PROFILE, time_scale=args.time_scale) as fp8_url,
        prefix_router({"llama-3-1-8b-h100": bf16, "llama-3-1-8b-fp8-h100": fp8_url}) as router,
    ):  # fmt: skip
        settings.RAY_SERVE_URL = router
        run = gate_run_start(version=fp8, actor="benchmark", enqueue=False)
        started = time.perf_counter()
        run = gate_run_execute(run_id=run.pk)
        wall = time.perf_counter() - started
    decisions = list(GateDecision.objects.filter(gate_run=run).order_by("pk"))
    times, previous = {}, run.started_at
    for d in decisions:
        times[d.kind] = round((d.created_at - previous).total_seconds(), 2)
        previous = d.created_at
    return {
        "gate_wall_s": round(wall, 2),
        "gate_s": times,
        "verdicts": {d.kind: d.verdict for d in decisions},
        "labels": {d.kind: d.label for d in decisions},
        "quality_cases_per_version": decisions[0].eval_run.cases_total
        if decisions and decisions[0].eval_run
        else None,
        "smoke": args.smoke,
        "conditions": {
            "mode": "predicted (quality on simulated engines)",
            "engine_time_scale": args.time_scale,
            "cpu_cores": os.cpu_count(),
            "load_avg_1m_before": round(load_before[0], 2),
            "load_avg_1m_after": round(os.getloadavg()[0], 2),
        },
    }


if __name__ == "__main__":
    main()
