"""Generate a tiny Llama-architecture checkpoint locally, so real vLLM can run on CPU hosts and in CI.

Nothing is downloaded: the tokenizer is a byte-level BPE trained here on a built-in corpus and the
weights are seeded random numbers. The model talks nonsense, but it exercises the real engine:
the scheduler, PagedAttention, the OpenAI server, streaming and the Prometheus metrics.

Shape constraints come from vLLM's CPU backend: ``head_dim`` must be 64 or 128 (its attention
kernels are only built for those), so the model uses 4 heads of 64 over a hidden size of 256.

    python -m engines.tiny_model --out var/models/tiny-llama [--seed 0]
    python -m engines.tiny_model --train [--quantize-bits 4 --group-size 64]

``--train`` also fine-tunes the model for a few CPU minutes on the built-in arithmetic suite's
format and derives a round-to-nearest quantised copy (see ``engines.tiny_train``); both are cached
next to ``--out`` under names keyed by a hash of the training recipe.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_PATH = Path("var/models/tiny-llama")
# Bump when the generated files change shape, so old checkouts regenerate instead of reusing them.
FORMAT_VERSION = 3
MARKER = "governor_tiny_model.json"

HIDDEN = 256
LAYERS = 4
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS  # 64: one of the two head sizes vLLM's CPU attention supports
INTERMEDIATE = 688
TARGET_VOCAB = 3072
MAX_POSITIONS = 2048

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
SPECIAL_TOKENS = [BOS, EOS, *ROLE_TOKENS]

# A plain template: role marker, content, end-of-text. vLLM renders it for /v1/chat/completions.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

_SEED_TEXT = """\
Prefill processes the whole prompt in one parallel pass and sets the time to first token.
Decode emits one token per step for every running sequence and reads all weights plus the KV cache.
Continuous batching keeps the accelerator busy while requests arrive and leave at different times.
PagedAttention stores the key and value cache in fixed blocks so memory is not fragmented.
Goodput counts only the requests that meet every limit of the service level agreement.
The gateway authenticates tenants, enforces rate limits and budgets, and streams server sent events.
A rollout moves traffic step by step and pauses for analysis before it promotes a new version.
Quantization lowers the bytes per weight; the quality gate compares it with the baseline first.
The quick brown fox jumps over the lazy dog while the capacity planner counts tokens per second.
Hello, how are you today? I am fine, thank you. What would you like to know about the model?
What is the sum? Extract name, age and city as JSON. She is 34 years old and lives in the city.
{"name": "Alice", "age": 34, "city": "Lisbon"} {"name": "Bruno", "age": 27, "city": "Oslo"}
"""

_SYLLABLES = tuple(
    [
        "ka",
        "ri",
        "to",
        "na",
        "me",
        "su",
        "lo",
        "pe",
        "vi",
        "da",
        "ne",
        "mo",
        "ru",
        "sa",
        "te",
        "ki",
        "ho",
        "ba",
        "zu",
        "fe",
        "gi",
        "la",
        "no",
        "pi",
        "re",
        "so",
        "tu",
        "wa",
        "ye",
        "an",
        "el",
        "in",
        "on",
        "un",
        "ar",
        "er",
        "ir",
        "or",
        "ur",
        "st",
        "tr",
        "pl",
        "gr",
        "br",
        "ch",
        "sh",
        "th",
        "qu",
        "ex",
    ]
)


def _corpus(seed: int) -> list[str]:
    """The tokenizer's training text: real sentences plus seeded pseudo-words, so BPE finds ~3k merges."""
    rng = random.Random(seed)
    words = sorted({"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(6000)})
    lines = _SEED_TEXT.splitlines() * 20
    for _ in range(3000):
        n = rng.randint(4, 14)
        sentence = " ".join(rng.choice(words) for _ in range(n))
        lines.append(sentence.capitalize() + rng.choice([".", "?", "!", ","]))
    digits = [" ".join(str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in range(8)) for _ in range(200)]
    return lines + digits


def _train_tokenizer(seed: int):
    """Train a byte-level BPE (every byte is in the alphabet, so any UTF-8 text round-trips)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    # Digits are split one per token (as Llama 3 and most modern vocabularies do): with merged digit
    # runs a number's tokens depend on its neighbours, and the trained variant could not learn addition.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TARGET_VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    # Plain ``encode`` (completions) prepends BOS like Llama tokenizers; chat prompts carry their own
    # BOS from the template and are encoded without special tokens by vLLM.
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return tok


def _config(vocab_size: int, bos_id: int, eos_id: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "vocab_size": vocab_size,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "torch_dtype": "bfloat16",
    }


def _weights(seed: int, vocab_size: int) -> dict[str, np.ndarray]:
    """Seeded random weights in Hugging Face Llama naming (what vLLM's LlamaForCausalLM loader expects)."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    tensors: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": normal(vocab_size, HIDDEN),
        "model.norm.weight": np.ones(HIDDEN, dtype=np.float32),
        "lm_head.weight": normal(vocab_size, HIDDEN),
    }
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": np.ones(HIDDEN, dtype=np.float32),
            p + "post_attention_layernorm.weight": np.ones(HIDDEN, dtype=np.float32),
            p + "self_attn.q_proj.weight": normal(HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.weight": normal(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.weight": normal(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.o_proj.weight": normal(HIDDEN, HEADS * HEAD_DIM),
            p + "mlp.gate_proj.weight": normal(INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": normal(INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": normal(HIDDEN, INTERMEDIATE),
        }
    return tensors


def _to_bf16_bits(array: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (round to nearest even); numpy has no bfloat16 dtype."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _save_bf16_safetensors(tensors: dict[str, np.ndarray], path: Path) -> None:
    """Write a safetensors file of BF16 tensors (the format is an 8-byte header size, JSON, raw bytes).

    Written by hand because ``safetensors.numpy`` cannot express bfloat16, and importing torch just to
    save 9 MB would make generation ten times slower.
    """
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        data = _to_bf16_bits(tensors[name]).tobytes()
        header[name] = {
            "dtype": "BF16",
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned
    with path.open("wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for blob in blobs:
            f.write(blob)


def tiny_model_params(vocab_size: int) -> int:
    """Total parameter count of the generated model (embeddings and untied LM head included)."""
    per_layer = (
        2 * HIDDEN
        + HIDDEN * HEADS * HEAD_DIM * 2
        + 2 * HIDDEN * KV_HEADS * HEAD_DIM
        + 3 * HIDDEN * INTERMEDIATE
    )
    return 2 * vocab_size * HIDDEN + HIDDEN + LAYERS * per_layer


def _is_current(path: Path, seed: int) -> bool:
    marker = path / MARKER
    if not marker.is_file():
        return False
    try:
        meta = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    required = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
    return (
        meta.get("seed") == seed
        and meta.get("format_version") == FORMAT_VERSION
        and all((path / name).is_file() for name in required)
    )


def ensure_tiny_model(path: str | Path = DEFAULT_PATH, *, seed: int = 0) -> Path:
    """Create the tiny checkpoint at ``path`` unless one with the same seed is already there.

    Returns the absolute path. Files are written to a temporary sibling directory and renamed into
    place, so a concurrent caller or an interrupted run never leaves a half-written model behind.
    """
    path = Path(path).resolve()
    if _is_current(path, seed):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{seed}-{time.time_ns()}")
    tmp.mkdir()
    tok = _train_tokenizer(seed)
    vocab_size = tok.get_vocab_size()
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    tok.save(str(tmp / "tokenizer.json"))
    (tmp / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": BOS,
                "eos_token": EOS,
                "pad_token": EOS,
                "add_bos_token": True,
                "add_eos_token": False,
                "model_max_length": MAX_POSITIONS,
                "clean_up_tokenization_spaces": False,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=2,
        )
    )
    (tmp / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS, "pad_token": EOS}, indent=2)
    )
    (tmp / "config.json").write_text(json.dumps(_config(vocab_size, bos_id, eos_id), indent=2))
    (tmp / "generation_config.json").write_text(
        json.dumps({"bos_token_id": bos_id, "eos_token_id": eos_id, "do_sample": True}, indent=2)
    )
    _save_bf16_safetensors(_weights(seed, vocab_size), tmp / "model.safetensors")
    (tmp / MARKER).write_text(
        json.dumps(
            {
                "seed": seed,
                "format_version": FORMAT_VERSION,
                "vocab_size": vocab_size,
                "params": tiny_model_params(vocab_size),
            },
            indent=2,
        )
    )
    if path.exists():
        # Replaced only when stale (different seed or format); move it aside first so the swap is atomic.
        stale = path.with_name(f".{path.name}.old-{time.time_ns()}")
        path.rename(stale)
        tmp.rename(path)
        _rmtree(stale)
    else:
        try:
            tmp.rename(path)
        except OSError:
            # Another process won the race; its model is just as good.
            _rmtree(tmp)
    return path


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_PATH, help="checkpoint directory")
    parser.add_argument("--seed", type=int, default=0, help="seed for the tokenizer corpus and weights")
    parser.add_argument("--train", action="store_true", help="also train it on the built-in tasks (cached)")
    parser.add_argument("--quantize-bits", type=int, default=4, help="with --train: RTN bits of the copy")
    parser.add_argument("--group-size", type=int, default=64, help="with --train: RTN group size")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.train:
        from engines.tiny_train import TRAINED_MARKER, Recipe, ensure_quantized_model, ensure_trained_model

        trained = ensure_trained_model(Recipe(seed=args.seed), root=args.out.parent)
        quantized = ensure_quantized_model(trained, bits=args.quantize_bits, group_size=args.group_size)
        print(f"trained model at {trained}: {(trained / TRAINED_MARKER).read_text()}")
        print(f"RTN {args.quantize_bits}-bit g{args.group_size} copy at {quantized}")
        print(f"({time.perf_counter() - started:.1f} s)")
        return 0
    path = ensure_tiny_model(args.out, seed=args.seed)
    meta = json.loads((path / MARKER).read_text())
    print(
        f"tiny model at {path}: vocab {meta['vocab_size']}, {meta['params'] / 1e6:.2f}M params, "
        f"seed {meta['seed']} ({time.perf_counter() - started:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
