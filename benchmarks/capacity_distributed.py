"""``python -m benchmarks.capacity_distributed --json FILE [--smoke]``: load beyond one process.

``max_streams_sched_ok`` (the highest number of concurrent streams whose requests the client sent
with a median schedule delay under 10 ms and no errors, ``benchmarks.harness``) across 4 load worker
processes, beside the same ladder sent by one worker process, against the paced engine. Each
level's schedule is split over the workers and their records merged exactly
(``loadtest.distributed``, ADR 0037).

The engine is one process, so the token interval is long, 250 ms: at N streams it writes N × 4
tokens a second (32,000 at 8,000 streams), and its CPU per level (``server_cpu_pct``, 100 = one
core, over the level and in its busiest 2 s) is in the figures to show whether it limited the run;
its measured TTFT and TPOT against the true 100 ms and 250 ms say when it fell behind. Streams are the harness's
128 tokens after a 100 ms TTFT (31.85 s), 2.2 stream times of arrivals per level. A full run takes
about 15 minutes; ``--smoke`` runs two tiny levels each way in well under a minute.

``measure(smoke)`` returns the figures (``benchmarks.capacity`` reports them with its own).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import distributed_capacity, print_distributed  # noqa: E402

WORKERS = 4
TPOT_MS = 250.0
LEVELS = [2000, 4000, 8000, 12000]
SINGLE_LEVELS = LEVELS  # the same ladder, so neither figure is capped lower than the other
# Smoke: the same code path, two levels of short streams each way.
SMOKE = {"levels": [24, 48], "tpot_ms": 20.0, "output_tokens": 8, "duration_s": 1.5}


def measure(smoke: bool = False) -> dict:
    """The distributed figure, the single-process one at the same interval, and their conditions."""
    load_at_start = os.getloadavg()
    if smoke:
        figures = distributed_capacity(
            SMOKE["levels"],
            workers=WORKERS,
            tpot_ms=SMOKE["tpot_ms"],
            output_tokens=SMOKE["output_tokens"],
            duration_s=SMOKE["duration_s"],
        )
    else:
        figures = distributed_capacity(LEVELS, workers=WORKERS, tpot_ms=TPOT_MS, single_levels=SINGLE_LEVELS)
    figures["conditions"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_start": load_at_start,
        "loadavg_at_end": os.getloadavg(),
        "paced_server_processes": 1,
        "token_interval_ms": figures["tpot_ms"],
        "why_this_interval": (
            "the paced engine is one process; at this interval it writes 4 tokens a second per stream "
            "and its CPU (server_cpu_pct over each level, server_cpu_peak_pct in its busiest 2 s) stays "
            "under a core on an idle machine, so the client is what is measured; its TTFT and TPOT per "
            "level show when a busy machine starves it anyway"
        ),
    }
    figures["smoke"] = smoke
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", dest="json_path")
    p.add_argument("--smoke", action="store_true", help="two tiny levels each way; its figures mean nothing")
    a = p.parse_args(argv)
    load = os.getloadavg()
    print(f"Conditions: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    figures = measure(smoke=a.smoke)
    print_distributed(figures)
    figures["command"] = "python -m benchmarks.capacity_distributed " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    if a.json_path:
        Path(a.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json_path).write_text(json.dumps(figures, indent=1))
        print(f"wrote {a.json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
