"""The memory estimate against vLLM's own published startup logs (catalog/reference/vllm_kv_reference.json).

Each point quotes a log line from vLLM's issues or PRs with its link; ADR 0021 says which accounting the
estimate follows. A point is either asserted within the table's tolerance (10 %) or kept with the reason
it is excluded. ``-s`` prints the estimate-vs-reference table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog.models import GpuType
from engines.memory import GIB, estimate_memory, kv_blocks_for_pool
from engines.specs import GpuSpec, ModelSpec
from governor.demo import GPU_TYPES

TABLE = json.loads(
    (Path(__file__).resolve().parents[2] / "catalog/reference/vllm_kv_reference.json").read_text()
)
POINTS = TABLE["points"]
ASSERTED = [p for p in POINTS if not p.get("excluded")]


def _model(point: dict) -> ModelSpec:
    a = point["architecture"]
    return ModelSpec(
        name=point["model"],
        params=float(a["params"]),
        layers=a["layers"],
        hidden_size=a["hidden_size"],
        attention_heads=a["attention_heads"],
        kv_heads=a["kv_heads"],
        head_dim=a["head_dim"],
        vocab_size=a["vocab_size"],
        max_context=a["max_context"],
        precision=point["quantization"],
        kv_cache_dtype=point["kv_cache_dtype"],
        intermediate_size=a["intermediate_size"],
        tie_word_embeddings=a["tie_word_embeddings"],
        attention_bias=a["attention_bias"],
    )


def _gpu(point: dict) -> GpuSpec:
    g = point["gpu"]
    if "catalog" in g:
        # The catalog's own preset, through the model's conversion: the figures an admin's page uses.
        fields = next(f for f in GPU_TYPES if f["name"] == g["catalog"])
        return GpuType(**fields).to_spec()
    total_gib = g["nvidia_smi_mib"] / 1024 if g["nvidia_smi_mib"] else g["cuda_total_gib"]
    if total_gib is None:
        # The log names no GPU: only its weights are compared, which no GPU figure enters.
        assert point["figure"]["kind"] == "weights_gib", point["id"]
        total_gib = 1024.0
    return GpuSpec(
        name=g["name"],
        memory_gib=total_gib,
        hbm_bandwidth_gbps=1,
        bf16_tflops=1,
        memory_source=g["source"],
        cuda_total_gib=g["cuda_total_gib"],
    )


def estimated_figure(point: dict) -> float:
    """The estimate's value for the point's published figure, in the figure's unit."""
    model, kind, tp = _model(point), point["figure"]["kind"], point["tensor_parallel"]
    if kind == "kv_tokens_from_memory":
        blocks = kv_blocks_for_pool(
            model=model,
            tensor_parallel=tp,
            pool_bytes_per_gpu=point["figure"]["kv_memory_gib"] * GIB,
            block_size=point["block_size"],
        )
        return blocks * point["block_size"]
    est = estimate_memory(
        model=model,
        gpu=_gpu(point),
        tensor_parallel=tp,
        gpu_memory_utilization=point["gpu_memory_utilization"],
        context_len=point["max_model_len"],
        max_num_batched_tokens=point.get("max_num_batched_tokens"),
        max_num_seqs=point.get("max_num_seqs", 256),
        enforce_eager=point.get("enforce_eager", False),
        accounting=point["accounting"],
    )
    if kind == "weights_gib":
        return est.weight_bytes / tp / GIB
    if kind == "kv_memory_gib":
        return (est.kv_pool_bytes + est.kv_pool_shortfall_bytes) / tp / GIB
    if kind == "kv_tokens":
        return est.kv_capacity_tokens
    raise AssertionError(f"unknown figure kind {kind!r}")


def relative_error(point: dict) -> float:
    published = point["figure"]["value"]
    return (estimated_figure(point) - published) / abs(published)


def test_the_table_has_at_least_eight_asserted_vllm_points_each_with_a_link_and_a_log_line():
    assert len([p for p in ASSERTED if "engine" not in p]) >= 8  # other engines' logs only corroborate
    for point in POINTS:
        assert point["source"].startswith("https://github.com/"), point["id"]
        assert point["quote"] and point["vllm_version"], point["id"]
    assert len({p["id"] for p in POINTS}) == len(POINTS)


@pytest.mark.parametrize("point", ASSERTED, ids=[p["id"] for p in ASSERTED])
def test_estimate_is_within_tolerance_of_vllms_published_figure(point):
    error = relative_error(point)
    assert abs(error) <= TABLE["tolerance"], (
        f"{point['id']}: estimated {estimated_figure(point):,.2f} vs published {point['figure']['value']:,} "
        f"({error:+.1%})"
    )


def test_a_published_does_not_fit_is_a_does_not_fit():
    point = next(p for p in POINTS if p["id"] == "qwen25-7b-int4-rtx4060-does-not-fit")
    est = estimate_memory(
        model=_model(point),
        gpu=_gpu(point),
        gpu_memory_utilization=point["gpu_memory_utilization"],
        context_len=point["max_model_len"],
        max_num_batched_tokens=point["max_num_batched_tokens"],
        max_num_seqs=point["max_num_seqs"],
        accounting=point["accounting"],
    )
    assert not est.fits and est.kv_capacity_tokens == 0 and "exceed" in est.reason


def test_print_reference_table(capsys):
    """Not an assertion of its own: prints the table the closing note quotes (run with ``-s``)."""
    lines = [f"{'point':45} {'figure':22} {'published':>12} {'estimated':>12} {'error':>8}  status"]
    for p in POINTS:
        est = estimated_figure(p)
        status = "excluded" if p.get("excluded") else "asserted"
        lines.append(
            f"{p['id']:45} {p['figure']['kind']:22} {p['figure']['value']:>12,} {est:>12,.2f} "
            f"{relative_error(p):>+8.1%}  {status}"
        )
    with capsys.disabled():
        print("\n" + "\n".join(lines))
