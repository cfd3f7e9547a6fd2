"""The trained tiny model and its RTN-quantized copies: the quantizer, what a copy changes, the cache.

Served by real vLLM (CPU) and judged by the quality gate in tests/evaluations/test_gate_vllm_cpu.py.
Training runs once per recipe (a few CPU minutes, cached under var/models).
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
from tests.engines.test_vllm_cpu import ROOT


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


def test_training_uses_bf16_only_where_the_cpu_has_it(monkeypatch):
    """Emulated BF16 on an AVX2-only CPU made the recipe take hours; there it trains in FP32, and the
    precision is part of the cache key (the two train different weights)."""
    import torch

    from engines.tiny_train import train_precision

    keys = {}
    for native, expected in ((False, "fp32"), (True, "bf16")):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda n=native: n, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
        assert train_precision() == expected
        keys[expected] = Recipe().key()
    assert keys["fp32"] != keys["bf16"]


@pytest.fixture(scope="module")
def models():
    trained = ensure_trained_model(Recipe(), root=ROOT / "var/models")
    return {
        "trained": trained,
        "rtn4g64": ensure_quantized_model(trained, bits=4, group_size=64),
    }


# Training takes minutes (13 on CI's machine beside two busy loops); this test may also wait on the
# lock while another worker trains the same recipe for the quality gate. So it is not fast-tier, and
# it gets the gate test's time limit, not the default 600 s.
@pytest.mark.slow
@pytest.mark.timeout(2400)
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
