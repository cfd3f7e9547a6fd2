"""Incident rehearsals: time to detect, whether the diagnosis names the cause, time to recover.

``python -m benchmarks.incidents --json FILE`` runs each of the eight rehearsals
(``engines.rehearsal.SCENARIOS``) on its own route of two simulated deployments (Llama-3.1-8B on
L40S, the virtual-time engine simulator) with the playbook in automatic mode, then a steady run with
no fault, and reports per scenario:

- ``detect_s``: from the fault's start to the incident (SLOs evaluated every ``--tick`` s);
- ``cause_named``: whether the diagnosis named the injected cause;
- ``recover_s``: from the detection to the route's SLOs holding again (the last fast long window,
  1 h at full scale, within every objective), where a playbook action applies; ``cleared_s`` is
  until every alert condition is off, the slow ticket windows (3 d / 6 h) included (the prefix-cache collapse has none: rolling back a prompt release is a person's call, so
  its fault runs out by itself and its recovery is not the playbook's);
- ``false_incidents``: incidents opened during ``--steady-minutes`` of traffic with no fault.

Virtual time: the engines are simulated (vLLM's scheduler, KV blocks, prefix cache and step times),
so each virtual second costs milliseconds; SLOs, incidents, diagnosis, playbook actions and their
reverts are the platform's own code against PostgreSQL (a scratch database, created and dropped
here). The gateway process is not in the loop: its admission (weights, rate limits, token caps) is
modelled from the limits it would read. SLO windows are the SRE workbook's scaled by
``--window-scale`` (0.01: the 1 h / 5 min page windows become 36 s / 3 s).

Needs ``DATABASE_URL`` (a server where the user may create databases).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rollouts import scratch_database  # noqa: E402
from benchmarks.smoke import add_smoke_flag, apply_smoke  # noqa: E402

TARGETS = {"detect_s": 30.0, "recover_s": 60.0, "false_incidents": 0}
ACTOR = "system:bench"


def run(a: argparse.Namespace) -> dict:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "governor.settings")
    django.setup()
    from django.core.management import call_command

    from engines.rehearsal import SCENARIOS, scenario
    from operations.rehearsals import rehearsal_run, rehearsal_setup

    call_command("migrate", verbosity=0)
    start = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)
    results = []
    names = a.scenarios or list(SCENARIOS)
    for i, name in enumerate(names):
        sc = scenario(name, fault_at_s=a.steady_s, fault_for_s=a.fault_s)
        route, deps, tenants = rehearsal_setup(
            f"rehearsal-{name}", sc, actor=ACTOR, window_scale=a.window_scale
        )
        t0 = time.perf_counter()
        r = rehearsal_run(scenario=sc, route=route, deployments=deps, tenants=tenants,
                          start=start + dt.timedelta(days=i), duration_s=a.steady_s + a.fault_s + a.after_s,
                          tick_s=a.tick, seed=a.seed)  # fmt: skip
        r["wall_s"] = round(time.perf_counter() - t0, 2)
        results.append(r)
        print(f"{name}: detect {r['detect_s']} s, cause {r['cause']} ({'right' if r['cause_named'] else 'WRONG'}), "
              f"recover {r['recover_s']} s, actions {[x['kind'] for x in r['actions']]}", file=sys.stderr)  # fmt: skip
    base = scenario(names[0], fault_at_s=a.steady_minutes * 60, fault_for_s=0)
    route, deps, tenants = rehearsal_setup("rehearsal-steady", base, actor=ACTOR, window_scale=a.window_scale)
    t0 = time.perf_counter()
    steady = rehearsal_run(scenario=base, route=route, deployments=deps, tenants=tenants,
                           start=start + dt.timedelta(days=len(names)), duration_s=a.steady_minutes * 60,
                           tick_s=a.tick, seed=a.seed, fault=False)  # fmt: skip
    steady_wall = time.perf_counter() - t0
    applies = [r for r in results if r["playbook_applied"]]
    detect = [r["detect_s"] for r in results]
    recover = [r["recover_s"] for r in applies]
    summary = {
        "detect_s_max": max(detect) if all(d is not None for d in detect) else None,
        "causes_named": sum(r["cause_named"] for r in results),
        "scenarios_run": len(results),
        "recover_s_max": max(recover) if recover and all(x is not None for x in recover) else None,
        "false_incidents": steady["false_incidents"],
    }
    summary["targets_met"] = bool(
        summary["detect_s_max"] is not None and summary["detect_s_max"] <= TARGETS["detect_s"]
        and summary["causes_named"] == len(results)
        and (not applies or (summary["recover_s_max"] is not None and summary["recover_s_max"] <= TARGETS["recover_s"]))
        and summary["false_incidents"] == TARGETS["false_incidents"]
    )  # fmt: skip
    return {
        **summary,
        "scenarios": results,
        "steady": {
            "virtual_s": steady["virtual_s"],
            "false_incidents": steady["false_incidents"],
            "wall_s": round(steady_wall, 2),
        },  # fmt: skip
        "targets": TARGETS,
        "conditions": {
            "time": "virtual (engines.sim); SLOs, incidents, diagnosis and playbooks real, on PostgreSQL",
            "gateway": "modelled (weights, rate limits, token caps), not the gateway process",
            "engines": "Llama-3.1-8B bf16 on L40S, 2 deployments per route (3 in slower_release)",
            "slos": "TTFT <= 500 ms, TPOT <= 40 ms, no 5xx; each 99 % over 30 days",
            "window_scale": a.window_scale,
            "tick_s": a.tick,
            "steady_s_before_fault": a.steady_s,
            "fault_s": a.fault_s,
            "playbook": "automatic, time box 10 min, undone after the SLOs held 1 min",
            "cpus": os.cpu_count(),
            "load_average": round(os.getloadavg()[0], 2),
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Incident rehearsals: detect, diagnose, mitigate, recover.")
    p.add_argument("--json", dest="json_path")
    p.add_argument(
        "--scenarios", nargs="*", help="names from engines.rehearsal.SCENARIOS (default: all eight)"
    )
    p.add_argument("--tick", type=float, default=5.0, help="SLO evaluation period (virtual s)")
    p.add_argument("--steady-s", type=float, default=300.0, help="traffic before the fault (the baseline)")
    p.add_argument(
        "--fault-s", type=float, default=240.0, help="how long the fault lasts if nothing stops it"
    )
    p.add_argument("--after-s", type=float, default=60.0, help="virtual seconds after the fault's end")
    p.add_argument("--steady-minutes", type=float, default=20.0, help="the no-fault run for false incidents")
    p.add_argument("--window-scale", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    add_smoke_flag(
        p, scenarios=["lost_replica"], steady_s=60.0, fault_s=30.0, after_s=0.0, steady_minutes=1.0
    )
    a = apply_smoke(p.parse_args(argv))
    if not os.environ.get("DATABASE_URL"):
        print("DATABASE_URL must point at PostgreSQL", file=sys.stderr)
        return 2
    os.environ.setdefault("SECRET_KEY", "benchmark-only-secret-key-0123456789")
    print(f"conditions: virtual time, tick {a.tick:g} s, window scale {a.window_scale:g}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}", file=sys.stderr)  # fmt: skip
    with scratch_database(os.environ["DATABASE_URL"]) as url:
        os.environ["DATABASE_URL"] = url
        result = run(a)
    result["smoke"] = a.smoke
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if a.json_path:
        Path(a.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json_path).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
