"""Preflight: refuse what does not fit (with the numbers), warn when the KV cache is short."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from deployments import services
from deployments.models import Deployment
from tests.deployments.factories import l40s, llama_8b_version, llama_70b_version
from tests.factories import GpuTypeFactory

pytestmark = pytest.mark.django_db


def candidate(**fields) -> Deployment:
    defaults = dict(
        name="x",
        slug="x",
        model_version=llama_8b_version(),
        engine_kind="simulated",
        gpu_type=GpuTypeFactory(),
        tensor_parallel_size=1,
        max_model_len=8192,
        max_num_seqs=32,
        max_num_batched_tokens=8192,
        gpu_memory_utilization=0.9,
    )
    defaults.update(fields)
    return Deployment(**defaults)


def test_llama_8b_bf16_fits_one_h100_without_warnings():
    result = services.deployment_preflight(deployment=candidate())
    assert result.ok and result.warnings == []
    assert result.estimate.max_concurrent_seqs >= 32


def test_llama_70b_bf16_on_one_h100_is_refused_with_the_numbers():
    result = services.deployment_preflight(deployment=candidate(model_version=llama_70b_version()))
    assert not result.ok
    (error,) = result.errors
    # weights 70.55e9 * 2 bytes = 131.4 GiB; usable 80 GiB * 0.9 = 72.0 GiB
    assert "weights 131.4 GiB" in error
    assert "72.0 GiB usable" in error
    assert "minimum KV reserve 4,096 tokens" in error
    assert "1 × H100 SXM" in error


def test_llama_70b_bf16_fits_on_four_h100s():
    result = services.deployment_preflight(
        deployment=candidate(model_version=llama_70b_version(), tensor_parallel_size=4)
    )
    assert result.ok, result.errors


def test_online_fp8_quantization_halves_the_weights_in_the_preflight():
    # 70B at fp8 is ~65.7 GiB: fits 2 × L40S (86.4 GiB usable), bf16 does not.
    version = llama_70b_version()
    bf16 = services.deployment_preflight(
        deployment=candidate(model_version=version, gpu_type=l40s(), tensor_parallel_size=2)
    )
    fp8 = services.deployment_preflight(
        deployment=candidate(
            model_version=version, gpu_type=l40s(), tensor_parallel_size=2, quantization="fp8"
        )
    )
    assert not bf16.ok and fp8.ok


def test_warns_when_kv_cache_holds_fewer_sequences_than_max_num_seqs():
    result = services.deployment_preflight(deployment=candidate(max_model_len=131072, max_num_seqs=256))
    assert result.ok
    (warning,) = result.warnings
    assert "fewer than max_num_seqs 256" in warning
    assert "max_model_len 131,072" in warning


def test_max_model_len_beyond_the_models_context_is_refused():
    result = services.deployment_preflight(deployment=candidate(max_model_len=262144))
    assert any("exceeds" in e for e in result.errors)


def test_tensor_parallel_must_divide_attention_heads():
    # 32 heads / 8 KV heads: TP 8 is fine; a hypothetical 12-head model is not with TP 8.
    assert services.deployment_preflight(deployment=candidate(tensor_parallel_size=8)).ok
    version = llama_8b_version()
    version.model.attention_heads = 12
    version.model.kv_heads = 4
    result = services.deployment_preflight(
        deployment=candidate(model_version=version, tensor_parallel_size=8)
    )
    assert any("does not divide" in e for e in result.errors)


def test_vllm_cpu_skips_the_gpu_fit():
    result = services.deployment_preflight(
        deployment=candidate(engine_kind="vllm-cpu", gpu_type=None, model_version=llama_70b_version())
    )
    assert result.ok


def test_service_refuses_create_that_does_not_fit(admin_user):
    with pytest.raises(ValidationError) as exc:
        services.deployment_create(
            actor=admin_user,
            name="too big",
            slug="too-big",
            model_version=llama_70b_version(),
            engine_kind="simulated",
            gpu_type=GpuTypeFactory(),
        )
    assert "Does not fit" in " ".join(exc.value.messages)
    assert not Deployment.objects.filter(slug="too-big").exists()


def test_refusal_says_where_memory_goes_and_where_the_gpu_figure_comes_from():
    result = services.deployment_preflight(deployment=candidate(model_version=llama_70b_version()))
    (error,) = result.errors
    # Weights by part: 128256 x 8192 x 2 bytes of embeddings and as much again for the untied lm_head.
    assert "embeddings 1.96, layers" in error and "lm_head 1.96)" in error
    assert "non-torch, activation peak and CUDA graphs" in error
    assert "datasheet figure (no driver-reported MiB recorded)" in error  # the factory's H100 has none


def test_70b_awq_on_one_driver_reported_l40s_holds_no_8k_sequence():
    """Issue 31: 27,248 tokens were promised here; the driver's 46068 MiB and 16-bit embeddings say otherwise."""
    from governor.demo import GPU_TYPES

    l40s_driver = GpuTypeFactory(
        **{**next(f for f in GPU_TYPES if f["name"] == "L40S"), "name": "L40S driver"}
    )
    result = services.deployment_preflight(
        deployment=candidate(model_version=llama_70b_version("awq-int4", "awq"), gpu_type=l40s_driver)
    )
    # The weights fit; at max_num_batched_tokens 8192 the profile's MLP peak (1.9 GiB) leaves ~2k tokens.
    (error,) = result.errors
    assert "Does not fit: weights 37.0 GiB (awq" in error and "44.99 GiB" in error
    assert 0 < result.estimate.kv_capacity_tokens < 4_096
