"""``manage.py benchmark``: start a benchmark run from the shell and watch it with a progress bar.

Examples::

    manage.py benchmark --url http://127.0.0.1:8100/v1 --model paced --rate 5 --duration 20
    manage.py benchmark --deployment 3 --mode sweep --ttft-ms 1000 --tpot-ms 50 --duration 30
    manage.py benchmark --kind predicted --model-version 2 --gpu-type 1 --tp 2 --mode sweep
    manage.py benchmark --deployment 3 --mode ladder --arrival concurrency --ladder 1,8,32 --num-requests 200
    manage.py benchmark --url http://127.0.0.1:8000/v1 --model tiny --tokenizer var/models/tiny-llama \
        --rate 2 --num-requests 40 --cross-check vllm

The run is stored like one started from the console (same row, same report); ``--enqueue`` hands
it to a Celery worker instead of running it in this process.
"""

from __future__ import annotations

import json
import time

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from evaluations.constants import RunKind, RunMode, TargetKind
from evaluations.services.benchmarks import (
    benchmark_run_create,
    benchmark_run_cross_check_execute,
    benchmark_run_cross_check_request,
    benchmark_run_execute,
)


def _length(kind: str, value: str) -> dict:
    """``128`` → fixed; ``uniform:64:256``; ``normal:512:128``; ``lognormal:512:0.6``."""
    parts = value.split(":")
    if len(parts) == 1:
        return {"kind": "fixed", "value": int(parts[0])}
    name, a, b = parts[0], parts[1], parts[2]
    if name == "uniform":
        return {"kind": "uniform", "low": int(a), "high": int(b)}
    if name == "normal":
        return {"kind": "normal", "mean": float(a), "std": float(b)}
    if name == "lognormal":
        return {"kind": "lognormal", "mean": float(a), "sigma": float(b)}
    raise CommandError(f"--{kind}-len: unknown distribution {name!r}")


class Command(BaseCommand):
    help = "Run a benchmark (single stage, ladder, or sweep to capacity goodput) and store its report."

    def add_arguments(self, p) -> None:
        t = p.add_argument_group("target")
        t.add_argument("--deployment", type=int, help="deployment id")
        t.add_argument("--url", help="OpenAI base URL ending in /v1")
        t.add_argument("--gateway", action="store_true", help="through the gateway (GATEWAY_PUBLIC_URL)")
        t.add_argument("--model", default="", help="model name to request")
        t.add_argument("--api", choices=["completions", "chat"], default="completions")
        t.add_argument(
            "--tokenizer",
            default="",
            help="directory with the served model's tokenizer.json: prompts exact in tokens, built locally",
        )
        t.add_argument("--kind", choices=RunKind.values, default=RunKind.MEASURED)
        t.add_argument("--model-version", type=int, help="catalog version id (predicted spec / cost basis)")
        t.add_argument("--gpu-type", type=int, help="GPU type id (predicted spec / cost basis)")
        t.add_argument("--gpus", type=int, help="GPUs behind a URL/gateway target (cost basis)")
        t.add_argument("--tp", type=int, default=1)
        t.add_argument("--replicas", type=int, default=1)
        w = p.add_argument_group("workload")
        w.add_argument("--mode", choices=RunMode.values, default=RunMode.SINGLE)
        w.add_argument(
            "--arrival", choices=["constant", "poisson", "gamma", "concurrency"], default="poisson"
        )
        w.add_argument("--rate", type=float, default=1.0, help="req/s (start rate of a sweep)")
        w.add_argument("--burstiness", type=float, default=1.0)
        w.add_argument(
            "--spacing",
            choices=["window", "vllm"],
            default="window",
            help="how N drawn gaps offer the named rate: first at 0 and N gaps in N/rate s (window), "
            "or the N-th request at N/rate s (vllm bench serve's convention)",
        )
        w.add_argument("--concurrency", type=int, default=1)
        w.add_argument("--ladder", default="", help="comma-separated rates or concurrencies")
        w.add_argument("--input-len", default="512")
        w.add_argument("--output-len", default="128")
        w.add_argument("--shared-prefix-ratio", type=float, default=0.0)
        w.add_argument("--prefix-groups", type=int, default=1)
        w.add_argument("--workload-json", help="a full Workload.to_dict() (overrides the options above)")
        s = p.add_argument_group("stages and SLA")
        s.add_argument("--duration", type=float, default=30.0)
        s.add_argument("--num-requests", type=int)
        s.add_argument("--warmup", type=int, default=4)
        s.add_argument("--processes", type=int, default=0, help="client processes (0 = auto)")
        s.add_argument("--seed", type=int, default=0)
        s.add_argument("--ttft-ms", type=float, default=1000.0)
        s.add_argument("--tpot-ms", type=float, default=50.0)
        s.add_argument("--e2e-ms", type=float)
        s.add_argument("--target-attainment", type=float, default=0.9)
        s.add_argument("--max-rate", type=float, default=10_000.0)
        s.add_argument("--rel-tol", type=float, default=0.05)
        s.add_argument("--max-stages", type=int, default=12)
        o = p.add_argument_group("output")
        o.add_argument("--name", default="")
        o.add_argument("--enqueue", action="store_true", help="run on a Celery worker instead of here")
        o.add_argument("--json", dest="json_path", help="also write the report to this file")
        o.add_argument(
            "--cross-check",
            choices=["vllm"],
            help="after the run, replay its requests and arrival times with `vllm bench serve` and compare",
        )

    def handle(self, *args, **o) -> None:
        from catalog.selectors import gpu_type_find, model_version_find
        from deployments.selectors import deployment_list

        deployment = deployment_list().filter(pk=o["deployment"]).first() if o["deployment"] else None
        if o["deployment"] and deployment is None:
            raise CommandError(f"no deployment {o['deployment']}")
        if o["kind"] == RunKind.PREDICTED:
            target_kind = TargetKind.DEPLOYMENT if deployment else TargetKind.URL
        elif deployment:
            target_kind = TargetKind.DEPLOYMENT
        elif o["gateway"]:
            target_kind = TargetKind.GATEWAY
        elif o["url"]:
            target_kind = TargetKind.URL
        else:
            raise CommandError("give --deployment, --url or --gateway (or --kind predicted with a spec)")
        if o["workload_json"]:
            workload = json.loads(o["workload_json"])
        else:
            if o["arrival"] == "concurrency":
                arrival = {"kind": "concurrency", "concurrency": o["concurrency"]}
            else:
                arrival = {"kind": o["arrival"], "rate": o["rate"]}
                if o["spacing"] != "window":
                    arrival["spacing"] = o["spacing"]
                if o["arrival"] == "gamma":
                    arrival["burstiness"] = o["burstiness"]
            workload = {
                "arrival": arrival,
                "input": _length("input", o["input_len"]),
                "output": _length("output", o["output_len"]),
            }
            if o["shared_prefix_ratio"]:
                workload.update(
                    shared_prefix_ratio=o["shared_prefix_ratio"], prefix_groups=o["prefix_groups"]
                )
        User = get_user_model()
        actor = User.objects.filter(is_superuser=True).order_by("pk").first()
        try:
            run = benchmark_run_create(
                actor=actor,
                kind=o["kind"],
                mode=o["mode"],
                target_kind=target_kind,
                deployment=deployment,
                base_url=o["url"] or "",
                model_name=o["model"],
                api=o["api"],
                model_version=model_version_find(pk=o["model_version"]) if o["model_version"] else None,
                gpu_type=gpu_type_find(pk=o["gpu_type"]),
                gpus=o["gpus"],
                tensor_parallel=o["tp"],
                replicas=o["replicas"],
                workload=workload,
                sla={"ttft_ms": o["ttft_ms"], "tpot_ms": o["tpot_ms"], "e2e_ms": o["e2e_ms"]},
                ladder=[float(x) for x in o["ladder"].split(",") if x.strip()],
                sweep={
                    "target_attainment": o["target_attainment"],
                    "start_rate": o["rate"],
                    "max_rate": o["max_rate"],
                    "rel_tol": o["rel_tol"],
                    "max_stages": o["max_stages"],
                },
                stage={
                    "duration_s": None if o["num_requests"] and o["mode"] != RunMode.SWEEP else o["duration"],
                    "num_requests": o["num_requests"],
                    "warmup_requests": o["warmup"],
                    "processes": o["processes"],
                    "seed": o["seed"],
                },
                tokenizer_dir=o["tokenizer"],
                name=o["name"],
                enqueue=o["enqueue"],
            )
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from exc
        self.stderr.write(f"benchmark run #{run.pk}: {run.name}")
        if o["enqueue"]:
            self.stdout.write(f"queued run {run.pk}; follow it at /benchmarks/{run.pk}/")
            return
        run = benchmark_run_execute(run_id=run.pk, on_progress=self._bar)
        self.stderr.write("")
        if o["cross_check"] and run.status == "succeeded":
            self._cross_check(run, actor)
            run.refresh_from_db()
        self._report(run, o["json_path"])

    def _cross_check(self, run, actor) -> None:
        """Replay the run with ``vllm bench serve`` in this process and print both tools side by side."""
        try:
            benchmark_run_cross_check_request(run=run, actor=actor, enqueue=False)
        except ValidationError as exc:
            raise CommandError(f"cross-check: {' '.join(exc.messages)}") from exc
        self.stderr.write("replaying the run with vllm bench serve …")
        state = benchmark_run_cross_check_execute(run_id=run.pk)
        if state["status"] != "done":
            raise CommandError(f"cross-check failed: {state.get('error', state['status'])}")
        for st in state["stages"]:
            self.stdout.write(
                f"cross-check, stage {st['stage']} ({st['requests']} requests): {st['command']}"
            )
            self.stdout.write(f"{'figure':<26} {'governor':>12} {'vllm bench':>12} {'diff':>8}")
            for row in st["rows"]:
                ours = "-" if row["governor"] is None else f"{row['governor']:.2f}"
                theirs = "-" if row["vllm"] is None else f"{row['vllm']:.2f}"
                diff = "-" if row["diff_pct"] is None else f"{row['diff_pct']:+.1f}%"
                self.stdout.write(
                    f"{row['metric'] + (' (' + row['unit'] + ')' if row['unit'] else ''):<26} {ours:>12} {theirs:>12} {diff:>8}"
                )

    _last = 0.0

    def _bar(self, frac: float, message: str) -> None:
        now = time.monotonic()
        if now - self._last < 0.25 and frac < 1.0:
            return
        self._last = now
        width = 30
        filled = int(frac * width)
        self.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {frac * 100:5.1f}% {message[:70]:<70}", ending=""
        )
        self.stderr.flush()

    def _report(self, run, json_path: str | None) -> None:
        if run.status != "succeeded":
            raise CommandError(f"run {run.pk} {run.status}: {run.error or run.progress_message}")
        r = run.results
        self.stdout.write(f"run {run.pk} {run.status} ({run.kind}) — {run.progress_message}")
        header = f"{'level':>10} {'reqs':>6} {'err':>5} {'attain':>7} {'goodput':>9} {'tok/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9} {'delay p50':>9}"
        self.stdout.write(header)
        for s in r["stages"]:

            def f(x, fmt="{:9.1f}"):
                return fmt.format(x) if x is not None else f"{'-':>9}"

            self.stdout.write(
                f"{s['level']:>10g} {s['requests']:>6} {s['failed']:>5} {s['attainment']:>7.1%} {f(s['request_goodput'], '{:9.2f}')} "
                f"{f(s['output_token_throughput'])} {f(s['ttft_ms']['p50'])} {f(s['ttft_ms']['p99'])} "
                f"{f(s['tpot_ms']['p50'])} {f(s['tpot_ms']['p99'])} {f(s['schedule_delay_ms']['p50'], '{:9.2f}')}"
                + ("  CLIENT-BOUND" if s["client_bound"] else "")
            )
        cap, cost = r["capacity"], r["cost"]
        if cap["rate"] is not None:
            self.stdout.write(
                f"capacity goodput: {cap['rate']:g} {cap['level_unit']} ({cap['method']}), "
                f"{cap['token_goodput']:.1f} output tok/s at {cap['attainment']:.1%} attainment"
            )
        if cost.get("available") and cost.get("usd_per_mtok_output") is not None:
            self.stdout.write(
                f"cost: ${cost['usd_per_hour']:.2f}/h ({cost['gpus']} × {cost['gpu_type']}) → "
                f"${cost['usd_per_mtok_output']:.3f} per M output tokens"
            )
        for w in r["warnings"]:
            self.stdout.write(self.style.WARNING(f"! {w}"))
        if json_path:
            with open(json_path, "w", encoding="utf-8") as fh:
                json.dump(
                    {
                        "id": run.pk,
                        "kind": run.kind,
                        "snapshot": run.snapshot,
                        "results": r,
                        "series": run.series,
                    },
                    fh,
                    indent=1,
                )
            self.stdout.write(f"wrote {json_path}")
