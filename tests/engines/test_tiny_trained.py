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

# The arithmetic answer space is 20..198: guessing scores ~0.6 %. Trained for ~1,000 small steps the
# model gets ~10 % of fresh cases right (the suite's seed is not the training stream's); the floor is
# on the interval's lower bound, ~9x chance.
TRAINED_FLOOR = 0.05
N_CASES = 1000
SEED = 2026


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
    return {
        "trained": trained,
        "rtn4g64": ensure_quantized_model(trained, bits=4, group_size=64),
        # Coarser on purpose: at ~10 % accuracy the drops of the 4-bit, 3-bit and even 2-bit/64
        # copies stay inside the interval (measured, see docs/evalkit.md), so the copy whose drop
        # is asserted is 2-bit with one scale per row (group 688 covers every row of this model).
        "rtn2row": ensure_quantized_model(trained, bits=2, group_size=688),
    }


def test_quantized_copy_changes_only_the_decoder_linear_weights(models):
    trained, quantized = models["trained"], models["rtn4g64"]
    a = _read_bf16_safetensors(trained / "model.safetensors")
    b = _read_bf16_safetensors(quantized / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        if name.split(".")[-2] in QUANTIZED_SUFFIXES:
            assert not np.array_equal(a[name], b[name]), name
        else:
            assert np.array_equal(a[name], b[name]), name
    meta = json.loads((quantized / "governor_quantized.json").read_text())
    assert (meta["bits"], meta["group_size"], meta["quantized_tensors"]) == (4, 64, 7 * 4)
    assert ensure_quantized_model(trained, bits=4, group_size=64) == quantized  # cached


def _evaluate(path, log) -> list:
    with vllm_cpu_server(model_path=path, served_model_name="tiny", max_num_seqs=16, log_path=log,
                         timeout_s=900) as server:  # fmt: skip
        return run_cases(base_url=server.openai_base_url, model="tiny", api_key="unused",
                         cases=generate("arithmetic", seed=SEED, n=N_CASES), concurrency=16, timeout_s=300)  # fmt: skip


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_trained_model_answers_arithmetic_and_quantized_copies_measurably_differ(models, tmp_path):
    require_vllm()
    results = {name: _evaluate(path, tmp_path / f"{name}.log") for name, path in models.items()}
    errors = [r.error for rs in results.values() for r in rs if r.error]
    assert not errors, errors[:3]
    base = results["trained"]
    s_base = category_scores(base)["arithmetic"]
    print(f"\nmeasured on vLLM-CPU, arithmetic suite seed {SEED}, n={N_CASES}:")
    print(f"  trained   {s_base.mean:.3f} [{s_base.lo:.3f}, {s_base.hi:.3f}]")
    diffs = {}
    for name in ("rtn4g64", "rtn2row"):
        s = category_scores(results[name])["arithmetic"]
        d = diffs[name] = compare(results[name], base)["arithmetic"]
        changed = sum(a.output != b.output for a, b in zip(base, results[name], strict=True))
        print(f"  {name:9} {s.mean:.3f} [{s.lo:.3f}, {s.hi:.3f}]  vs trained {d.diff:+.3f} "
              f"[{d.lo:+.3f}, {d.hi:+.3f}] ({d.method}); outputs changed on {changed}/{N_CASES}")  # fmt: skip
        assert changed > 0, name  # quantisation changed what the served model answers
    assert s_base.lo >= TRAINED_FLOOR  # well above chance, judged on the interval
    assert diffs["rtn2row"].hi < 0  # the coarse copy is worse, and the interval says so


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
