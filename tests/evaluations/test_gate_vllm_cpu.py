"""The quality gate deciding on real vLLM (CPU): the trained tiny model against its quantized copies.

Everything goes through the product: a suite uploaded as an admin would, deployments of three catalog
versions (trained bf16 serving; 4-bit RTN per 64 weights and 2-bit RTN per row as candidates), a
gate policy, and gate runs executed by ``evaluations.services.gates``. The only stand-in is the prefix router
in front of the vLLM servers, doing what Ray Serve's proxy does (``/d/<slug>/…``).

Training runs once per recipe (a few CPU minutes, cached under var/models); each vLLM start takes
~45 s alone and several minutes on a busy 2-core host, so the trained model is served by the
``tiny-vllm`` group's shared server (``tests/support/vllm.py``) and only the two copies start here. Figures are printed (``-s``) and written to var/benchmarks/gate-vllm-cpu.json.
"""

from __future__ import annotations

import contextlib
import json
import os

import pytest

from engines.tiny_train import ensure_quantized_model
from engines.vllm_cpu import vllm_cpu_server
from evalkit.builtin import generate
from evalkit.suites import dump_jsonl
from evaluations.models import GateDecision
from evaluations.services.evals import eval_suite_upload
from evaluations.services.gates import gate_policy_save, gate_run_execute, gate_run_start
from tests.engines.test_vllm_cpu import ROOT
from tests.evaluations.factories import DeploymentFactory
from tests.evaluations.gate_fixtures import policy_body
from tests.factories import GpuTypeFactory, ModelFactory, ModelVersionFactory
from tests.support.servers import prefix_router
from tests.support.vllm import MAX_MODEL_LEN, MAX_NUM_SEQS, MODEL_NAME

# The arithmetic answer space is 20..198: guessing scores ~0.6 %. Trained for ~1,000 small steps the
# model gets ~10 % of fresh cases right (the suite's seed is not the training stream's). The floor
# is the policy's min_score, judged on the mean; ~8x chance.
N_CASES, SEED = 1000, 2026
# 4 pp sits between the two copies' intervals measured before (docs/evalkit.md): 4-bit [−2.7, +2.5],
# 2-bit per row [−9.4, −5.1] (CI's host: [−2.6, +2.8] and [−8.3, −3.6]).
MIN_SCORE, MAX_DROP = 0.05, 0.04

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.timeout(2400),
    pytest.mark.xdist_group("tiny-vllm"),
]


@contextlib.contextmanager
def _serving(routes: dict, slug: str, path, tmp_path):
    with vllm_cpu_server(model_path=path, served_model_name=MODEL_NAME, max_num_seqs=MAX_NUM_SEQS,
                         max_model_len=MAX_MODEL_LEN, log_path=tmp_path / f"{slug}.log", timeout_s=900) as server:  # fmt: skip
        routes[slug] = server.base_url
        try:
            yield server
        finally:
            routes.pop(slug, None)


def _decide(version, actor) -> GateDecision:
    run = gate_run_execute(
        run_id=gate_run_start(version=version, actor=actor, kinds=["quality"], enqueue=False).pk
    )
    assert run.status == "done", (run.status, run.error)
    return GateDecision.objects.get(gate_run=run, kind="quality")


def _report(name: str, d: GateDecision) -> None:
    cand, comp = d.measured["candidate"]["arithmetic"], d.measured["comparison"]["arithmetic"]
    print(f"  {name:9} {cand['mean']:.3f} [{cand['low']:.3f}, {cand['high']:.3f}]  vs trained "
          f"{comp['delta']:+.3f} [{comp['low']:+.3f}, {comp['high']:+.3f}]  gate: {d.verdict} ({d.summary})")  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_quality_gate_on_vllm_cpu_blocks_the_coarse_copy_and_passes_the_4bit_copy(
    tmp_path, settings, admin_user, tiny_vllm, tiny_vllm_model
):
    trained_dir = tiny_vllm_model  # served by the group's shared server (tests/support/vllm.py)
    dirs = {
        "trained": trained_dir,
        "rtn4g64": ensure_quantized_model(trained_dir, bits=4, group_size=64),
        # At ~10 % accuracy the drops of the 4-bit, 3-bit and even 2-bit/64 copies stay inside the
        # interval (measured, docs/evalkit.md); 2-bit with one scale per row (688 covers every row of
        # this model) is the copy whose drop is large enough to be seen on 1,000 cases.
        "rtn2row": ensure_quantized_model(trained_dir, bits=2, group_size=688),
    }
    gpu = GpuTypeFactory(name="CPU (vLLM-CPU)", memory_gib=16, hbm_bandwidth_gbps=50, bf16_tflops=1,
                         fp8_tflops=1, interconnect="none")  # fmt: skip
    model = ModelFactory(name="tiny-llama-arith")
    trained = ModelVersionFactory(model=model, label="trained-bf16", lifecycle="serving")
    rtn4 = ModelVersionFactory(model=model, label="rtn4-g64", precision="w4a16", lifecycle="candidate",
                               baseline=trained)  # fmt: skip
    rtn2 = ModelVersionFactory(model=model, label="rtn2-row", precision="w4a16", lifecycle="candidate",
                               baseline=trained)  # fmt: skip
    common = dict(engine_kind="vllm-cpu", gpu_type=gpu, tensor_parallel_size=1, status="RUNNING",
                  served_model_name=MODEL_NAME, max_model_len=MAX_MODEL_LEN, max_num_seqs=MAX_NUM_SEQS)  # fmt: skip
    for version, slug in ((trained, "tiny-trained"), (rtn4, "tiny-rtn4"), (rtn2, "tiny-rtn2")):
        DeploymentFactory(model_version=version, slug=slug, **common)
    cases = generate("arithmetic", seed=SEED, n=N_CASES)
    eval_suite_upload(name="tiny-arith", content=dump_jsonl(cases), actor=admin_user)
    body = policy_body()
    body["quality"] = {"required": True, "suite": "tiny-arith", "baseline": "serving",
                       "default": {"max_drop": MAX_DROP, "min_score": MIN_SCORE}}  # fmt: skip
    body["performance"]["required"] = body["stability"]["required"] = False
    gate_policy_save(model=model, gpu_type=gpu, actor=admin_user, **body)

    routes: dict[str, str] = {}
    with prefix_router(routes) as router:
        settings.RAY_SERVE_URL = router
        routes["tiny-trained"] = tiny_vllm.base_url
        with _serving(routes, "tiny-rtn2", dirs["rtn2row"], tmp_path):
            coarse = _decide(rtn2, admin_user)
        with _serving(routes, "tiny-rtn4", dirs["rtn4g64"], tmp_path):
            fine = _decide(rtn4, admin_user)

    base = coarse.measured["baseline"]["arithmetic"]
    figures = {"suite": f"arithmetic seed {SEED}", "cases": N_CASES, "max_drop": MAX_DROP, "min_score": MIN_SCORE,
               "trained": base, "load_avg": os.getloadavg()}  # fmt: skip
    for name, d in (("rtn4g64", fine), ("rtn2row", coarse)):
        figures[name] = {"verdict": d.verdict, "summary": d.summary, "candidate": d.measured["candidate"]["arithmetic"],
                         "vs_trained": d.measured["comparison"]["arithmetic"]}  # fmt: skip
    out = ROOT / "var/benchmarks/gate-vllm-cpu.json"  # the figures outlive a captured CI run
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2))
    print(f"\nquality gate on vLLM-CPU, arithmetic suite seed {SEED}, n={N_CASES}, max drop {MAX_DROP}:")
    print(f"  trained   {base['mean']:.3f} [{base['low']:.3f}, {base['high']:.3f}]")
    _report("rtn4g64", fine)
    _report("rtn2row", coarse)
    for d in (coarse, fine):
        assert (
            d.label == "measured"
            and d.eval_run.cases_failed == 0
            and d.eval_run.case_results.count() == N_CASES
        )
    assert base["mean"] >= MIN_SCORE  # the trained model really answers, well above chance
    # The baseline was evaluated once and reused by the second decision (same suite version).
    assert fine.baseline_eval_run_id == coarse.baseline_eval_run_id
    # Quantisation changed what the served model answers, case by case.
    base_out = dict(coarse.baseline_eval_run.case_results.values_list("case_id", "output"))
    for d in (coarse, fine):
        assert any(base_out[c] != o for c, o in d.eval_run.case_results.values_list("case_id", "output"))
    # The coarse copy is measurably worse (its whole interval lies below zero): the gate blocks it and
    # names the drop. Whether the interval also clears the 4-pp line varies with the host's training
    # run (its upper end measured −5.1 pp on one host, −3.6 pp on CI's), and either way it does not pass:
    # an interval that straddles the limit is "inconclusive" (evaluations/judge.py).
    assert coarse.verdict == "failed"
    assert coarse.measured["comparison"]["arithmetic"]["high"] < 0
    assert "arithmetic: drop vs baseline" in coarse.summary
    # The 4-bit copy's whole interval is within the allowed drop: the gate passes it.
    assert fine.verdict == "passed", fine.summary
