"""The Serve config compiler against golden files (``UPDATE_GOLDEN=1`` rewrites them after a review)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from deployments.compiler import autoscaling_config, compile_application, compile_serve_config, config_hash
from tests.deployments.factories import DeploymentFactory, l40s
from tests.factories import GpuTypeFactory, ModelFactory, ModelVersionFactory

GOLDEN = Path(__file__).parent / "golden"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _serve_url(settings):
    settings.RAY_SERVE_URL = "http://127.0.0.1:8100"


def assert_golden(name: str, data: dict) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN") == "1" or not path.exists():
        path.write_text(text)
    assert json.loads(path.read_text()) == json.loads(text), f"compiled config differs from {path}"


@pytest.fixture
def simulated():
    return DeploymentFactory(slug="llama-sim", name="Llama sim", num_replicas=2)


@pytest.fixture
def simulated_autoscaling():
    version = ModelVersionFactory(
        model=ModelFactory(
            name="Mistral-7B-Instruct-v0.3",
            parameter_count=7_248_023_552,
            vocab_size=32768,
            max_context=32768,
        ),
        label="bf16",
        weights_uri="hf://mistralai/Mistral-7B-Instruct-v0.3",
    )
    return DeploymentFactory(
        slug="mistral-sim",
        model_version=version,
        gpu_type=l40s(),
        served_model_name="",
        pool="batch",
        scaling_mode="autoscaling",
        min_replicas=1,
        max_replicas=4,
        target_ongoing_requests=16,
        upscale_delay_s=10,
        downscale_delay_s=300,
        look_back_period_s=20,
        max_model_len=None,
        enable_prefix_caching=False,
        time_scale=0.5,
    )


@pytest.fixture
def vllm_fp8():
    return DeploymentFactory(
        slug="llama-vllm",
        engine_kind="vllm",
        tensor_parallel_size=2,
        quantization="fp8",
        kv_cache_dtype="fp8",
        gpu_memory_utilization=0.92,
        scaling_mode="autoscaling",
        min_replicas=1,
        max_replicas=3,
        target_ongoing_requests=64,
        pool="long-context",
        max_model_len=131072,
        extra_engine_args={"enforce_eager": False},
    )


@pytest.fixture
def vllm_cpu():
    tiny = ModelVersionFactory(
        model=ModelFactory(
            name="tiny-llama",
            parameter_count=3_000_000,
            layers=4,
            hidden_size=256,
            attention_heads=4,
            kv_heads=2,
            head_dim=64,
            vocab_size=3072,
            max_context=2048,
        ),
        label="generated",
        weights_uri="file:///srv/models/tiny-llama",
    )
    return DeploymentFactory(
        slug="tiny-cpu",
        engine_kind="vllm-cpu",
        gpu_type=None,
        model_version=tiny,
        served_model_name="tiny",
        max_model_len=1024,
        max_num_seqs=8,
        max_num_batched_tokens=1024,
    )


def test_simulated_app_uses_engines_builder_with_spec_and_replica_override(simulated):
    app = compile_application(simulated)
    assert app["import_path"] == "engines.serve_app:build_app"
    assert app["route_prefix"] == "/d/llama-sim"
    assert app["deployments"] == [{"name": "SimulatedVLLM", "num_replicas": 2}]
    assert_golden("simulated_fixed", app)


def test_simulated_autoscaling_app_matches_golden(simulated_autoscaling):
    app = compile_application(simulated_autoscaling)
    assert app["deployments"][0]["autoscaling_config"] == {
        "min_replicas": 1,
        "max_replicas": 4,
        "target_ongoing_requests": 16,
        "upscale_delay_s": 10.0,
        "downscale_delay_s": 300.0,
        "look_back_period_s": 20.0,
    }
    assert app["args"]["model_name"] == "Mistral-7B-Instruct-v0.3"
    assert_golden("simulated_autoscaling", app)


def test_autoscaling_config_is_what_ray_serve_accepts_with_our_delays(simulated_autoscaling, vllm_fp8):
    """Ray's own model of the config takes every key we write and keeps our values (a renamed field
    in a Ray upgrade would fail here, not on the cluster)."""
    from ray.serve.config import AutoscalingConfig

    for d in (simulated_autoscaling, vllm_fp8):
        compiled = autoscaling_config(d)
        ray_side = AutoscalingConfig.model_validate(compiled)
        assert {k: getattr(ray_side, k) for k in compiled} == compiled
    # The vLLM one keeps Ray's defaults, written out.
    assert autoscaling_config(vllm_fp8)["downscale_delay_s"] == 600.0
    assert autoscaling_config(vllm_fp8)["upscale_delay_s"] == 30.0


def test_fixed_replicas_carry_no_delays(simulated):
    simulated.scaling_mode = "fixed"
    assert autoscaling_config(simulated) == {"min_replicas": 2, "max_replicas": 2}


def test_vllm_app_is_ray_serve_llm_openai_app_with_llm_config(vllm_fp8):
    app = compile_application(vllm_fp8)
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    (llm,) = app["args"]["llm_configs"]
    assert llm["model_loading_config"] == {
        "model_id": "llama-3.1-8b",
        "model_source": "meta-llama/Llama-3.1-8B-Instruct",
    }
    assert llm["accelerator_type"] == "H100"
    assert llm["engine_kwargs"]["tensor_parallel_size"] == 2
    assert llm["engine_kwargs"]["quantization"] == "fp8"
    assert llm["engine_kwargs"]["kv_cache_dtype"] == "fp8"
    assert llm["deployment_config"]["autoscaling_config"]["target_ongoing_requests"] == 64
    assert "deployments" not in app
    assert_golden("vllm_fp8_tp2_autoscaling", app)


def test_vllm_llm_config_validates_against_ray_serve_llm(vllm_fp8):
    try:
        from ray.serve.llm import LLMConfig as llm_config_cls
    except (ImportError, OSError) as exc:  # ray.serve.llm imports vLLM, which needs a working torch
        pytest.skip(f"ray.serve.llm is not importable here: {exc}")
    (llm,) = compile_application(vllm_fp8)["args"]["llm_configs"]
    config = llm_config_cls.model_validate(llm)
    assert config.accelerator_type == "H100"
    assert config.model_loading_config.model_id == "llama-3.1-8b"


def test_vllm_cpu_app_uses_vllm_cpu_builder(vllm_cpu):
    app = compile_application(vllm_cpu)
    assert app["import_path"] == "engines.vllm_serve_app:build_app"
    assert app["args"]["model_source"] == "/srv/models/tiny-llama"
    assert_golden("vllm_cpu_tiny", app)


def test_whole_config_has_every_app_sorted_and_serve_port_from_settings(
    simulated, simulated_autoscaling, vllm_fp8, vllm_cpu
):
    config = compile_serve_config([vllm_cpu, simulated, vllm_fp8, simulated_autoscaling])
    assert config["http_options"] == {"host": "127.0.0.1", "port": 8100}
    assert [a["name"] for a in config["applications"]] == [
        "llama-sim",
        "llama-vllm",
        "mistral-sim",
        "tiny-cpu",
    ]
    assert_golden("whole_config", config)


def test_empty_config_is_an_empty_application_list_not_a_delete():
    config = compile_serve_config([])
    assert config["applications"] == []
    assert_golden("empty_config", config)


def test_config_hash_ignores_order_and_changes_with_replicas(simulated):
    a = compile_serve_config([simulated])
    assert config_hash(a) == config_hash(json.loads(json.dumps(a, sort_keys=True)))
    simulated.num_replicas = 3
    assert config_hash(compile_serve_config([simulated])) != config_hash(a)


def test_import_path_override_drops_engine_deployment_override(simulated):
    simulated.import_path_override = "no_such_module:build"
    app = compile_application(simulated)
    assert app["import_path"] == "no_such_module:build"
    assert "deployments" not in app


def test_unknown_gpu_gets_no_accelerator_type(vllm_fp8):
    vllm_fp8.gpu_type = GpuTypeFactory(name="Homebrew X1")
    (llm,) = compile_application(vllm_fp8)["args"]["llm_configs"]
    assert "accelerator_type" not in llm


@pytest.mark.vllm
def test_an_embedding_deployment_runs_vllms_pooling_runner(vllm_fp8):
    """Checked against vLLM's own engine arguments: ``runner="pooling"`` with ``convert="embed"``."""
    vllm_fp8.task = "embed"
    (llm,) = compile_application(vllm_fp8)["args"]["llm_configs"]
    kwargs = llm["engine_kwargs"]
    assert (kwargs["runner"], kwargs["convert"]) == ("pooling", "embed")
    try:
        import typing

        from vllm.config.model import ConvertOption, RunnerOption
        from vllm.engine.arg_utils import AsyncEngineArgs
    except (ImportError, OSError) as exc:
        pytest.skip(f"vLLM is not importable here: {exc}")
    fields = AsyncEngineArgs.__dataclass_fields__
    assert "runner" in fields and "convert" in fields
    assert kwargs["runner"] in typing.get_args(RunnerOption)
    assert kwargs["convert"] in typing.get_args(ConvertOption)
    vllm_fp8.task = "generate"
    (llm,) = compile_application(vllm_fp8)["args"]["llm_configs"]
    assert "runner" not in llm["engine_kwargs"]


def test_an_embedding_deployment_on_vllm_cpu_gets_the_pooling_runner_flags(vllm_cpu):
    from engines.vllm_cpu import engine_kwargs_to_args

    vllm_cpu.task = "embed"
    engine = compile_application(vllm_cpu)["args"]["engine"]
    flags = engine_kwargs_to_args({k: engine[k] for k in ("runner", "convert")})
    assert flags == ["--runner", "pooling", "--convert", "embed"]
