"""Roofline performance model of one engine step (one forward pass of vLLM's continuous batch).

For a model ``M`` (params ``P``, ``L`` layers, ``H`` attention heads of size ``d``, hidden size ``h``),
a GPU group of ``tp`` devices (peak ``F`` FLOP/s and ``W`` bytes/s each) and a step that computes
``T`` new tokens (prefill chunks plus one token per decoding sequence)::

    flops  = 2 * P * T                                  # every weight multiplies every new token
           + 4 * L * H * d * sum_attn                   # QK^T and AV: 2 matmuls * 2 FLOPs per MAC
    sum_attn = sum over decode seqs of ctx_i            # one query over ctx_i keys
             + sum over prefill chunks (p, c) of c*p + c*(c+1)/2   # causal: chunk c after p cached tokens
    bytes  = weight_bytes                                # all weights are read once per step
           + kv_bytes_per_token * (sum over decode seqs of ctx_i + sum over prefill chunks of p + c)
    t_compute = flops / (tp * F * mfu)
    t_memory  = bytes / (tp * W * mbu)
    t_comm    = 2 * L * [T * h * act_bytes * 2 * (tp - 1) / tp / (link_bw * tp_comm_efficiency)
                         + allreduce_latency_s]          # two ring all-reduces per layer, only if tp > 1
    step_time = max(t_compute, t_memory) + t_comm + step_overhead_s + per_seq_overhead_s * num_seqs

``mfu`` (model FLOPs utilisation), ``mbu`` (memory bandwidth utilisation), ``step_overhead_s``
(scheduler, sampler, kernel launches, CUDA-graph replay) and the all-reduce figures are the
``Efficiency`` parameters. ``request_overhead_s`` is not part of a step: it is the fixed latency the
API server adds to every request outside the engine (HTTP, tokenizing, hand-off to the engine core
process, the first SSE chunk); ``engines.sim`` adds it to TTFT and E2E. Defaults per GPU are in ``DEFAULT_EFFICIENCY`` with their reasoning;
``engines.calibrate`` fits them to measured points.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from engines.specs import GpuSpec, ModelSpec

# Activations travel between TP ranks in the model's 16-bit activation dtype.
ACTIVATION_BYTES = 2.0


@dataclass(frozen=True, slots=True)
class Efficiency:
    """How much of the datasheet a real engine gets, plus fixed costs per step.

    * ``mfu``: fraction of dense peak FLOP/s reached by prefill-sized matmuls.
    * ``mbu``: fraction of peak memory bandwidth reached when streaming weights and KV in decode.
    * ``step_overhead_s``: fixed time per step (scheduling, sampling, launches), independent of size.
    * ``per_seq_overhead_s``: extra time per running sequence per step (sampler, detokenizer share).
    * ``tp_comm_efficiency``: fraction of the per-direction link bandwidth an all-reduce reaches.
    * ``allreduce_latency_s``: fixed latency of one all-reduce call (2 per layer with TP > 1).
    * ``request_overhead_s``: fixed latency per request outside the engine (API server: HTTP, tokenizer,
      IPC to the engine core, first SSE chunk). Not step time: it adds to TTFT and E2E only, and a
      closed-loop client's next request reaches the engine that much later.
    """

    mfu: float = 0.5
    mbu: float = 0.7
    step_overhead_s: float = 0.001
    per_seq_overhead_s: float = 0.0
    tp_comm_efficiency: float = 0.7
    allreduce_latency_s: float = 10e-6
    request_overhead_s: float = 0.002

    def __post_init__(self) -> None:
        if not 0 < self.mfu <= 1 or not 0 < self.mbu <= 1:
            raise ValueError("mfu and mbu must be in (0, 1]")
        if (
            min(
                self.step_overhead_s,
                self.per_seq_overhead_s,
                self.allreduce_latency_s,
                self.request_overhead_s,
            )
            < 0
        ):
            raise ValueError("overheads must be >= 0")
        if not 0 < self.tp_comm_efficiency <= 1:
            raise ValueError("tp_comm_efficiency must be in (0, 1]")

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Efficiency:
        return cls(**data)

    def with_(self, **changes: float) -> Efficiency:
        """A copy with some fields replaced (calibration explores parameters this way)."""
        return replace(self, **changes)


# Defaults by GPU name. Reasoning and sources (see docs/engines.md, "Efficiency defaults"):
# * Hopper (H100/H200): large GEMMs in vLLM prefill reach ~55-65% of the 989 TFLOPS dense BF16 peak;
#   decode GEMV-like kernels stream weights at ~75-80% of HBM bandwidth. With 0.78 the single-stream
#   TPOT of Llama-3.1-8B bf16 is ~6.8 ms, inside the 6-9 ms vLLM/NVIDIA publish for that setup.
#   ~0.6 ms per step is the CPU-side scheduling + sampling cost of vLLM v1 with CUDA graphs.
# * A100: similar fractions (Ampere reaches a little higher MBU, slower launch path).
# * L40S: GDDR6 reaches a lower fraction of its bandwidth; PCIe-only all-reduce.
# * CPU: a rough starting point that calibration corrects (vLLM-CPU has much larger per-step Python overhead).
# * request_overhead_s: vLLM's OpenAI server adds ~1-3 ms per request on a GPU host (HTTP parsing,
#   tokenizing a short prompt, ZMQ hand-off to the engine core, first SSE chunk): 2 ms. On a small,
#   shared CPU host the same Python path competes with the engine for cores: ~10 ms was measured on the
#   2-core dev box (client TTFT 30 ms vs vLLM's own prefill 14 ms at concurrency 1); calibrate it.
DEFAULT_EFFICIENCY: dict[str, Efficiency] = {
    "H100": Efficiency(mfu=0.6, mbu=0.78, step_overhead_s=0.0006),
    "H200": Efficiency(mfu=0.6, mbu=0.78, step_overhead_s=0.0006),
    "A100-80GB": Efficiency(mfu=0.6, mbu=0.8, step_overhead_s=0.0008),
    "L40S": Efficiency(mfu=0.55, mbu=0.72, step_overhead_s=0.0008, tp_comm_efficiency=0.6),
    "CPU": Efficiency(mfu=0.3, mbu=0.5, step_overhead_s=0.005, request_overhead_s=0.01),
}
GENERIC_EFFICIENCY = Efficiency()


def default_efficiency(gpu_name: str) -> Efficiency:
    """The documented default for a GPU name (preset names and aliases), else the generic one."""
    if gpu_name in DEFAULT_EFFICIENCY:
        return DEFAULT_EFFICIENCY[gpu_name]
    from engines.presets import GPU_ALIASES

    alias = GPU_ALIASES.get(gpu_name.strip().lower())
    if alias and alias in DEFAULT_EFFICIENCY:
        return DEFAULT_EFFICIENCY[alias]
    return GENERIC_EFFICIENCY


@dataclass(frozen=True, slots=True)
class StepCost:
    """The pieces of one step's predicted time, for explaining a prediction."""

    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.comm_s + self.overhead_s

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"


class PerfModel:
    """Step-time predictor for one (model, GPU, tensor-parallel size, efficiency).

    The hot path (``step_time``) takes aggregated numbers so that the simulator never builds
    per-token objects: ``new_tokens`` (T), ``attn_ctx`` (sum_attn) and ``kv_tokens_read``.
    """

    __slots__ = (
        "model",
        "gpu",
        "tp",
        "eff",
        "_flops_per_token",
        "_flops_per_attn",
        "_weight_bytes",
        "_kv_bytes",
        "_compute_rate",
        "_memory_rate",
        "_comm_per_token",
        "_comm_fixed",
        "_overhead",
        "_per_seq",
    )

    def __init__(
        self,
        *,
        model: ModelSpec,
        gpu: GpuSpec,
        tensor_parallel: int = 1,
        efficiency: Efficiency | None = None,
    ) -> None:
        if tensor_parallel < 1:
            raise ValueError("tensor_parallel must be >= 1")
        self.model = model
        self.gpu = gpu
        self.tp = tensor_parallel
        self.eff = efficiency or default_efficiency(gpu.name)
        eff = self.eff
        self._flops_per_token = 2.0 * model.params
        self._flops_per_attn = 4.0 * model.layers * model.attention_heads * model.head_dim
        self._weight_bytes = model.weight_bytes
        self._kv_bytes = model.kv_bytes_per_token
        self._compute_rate = tensor_parallel * gpu.peak_flops(model.precision) * eff.mfu
        self._memory_rate = tensor_parallel * gpu.hbm_bandwidth_gbps * 1e9 * eff.mbu
        if tensor_parallel > 1:
            # Without a published link figure assume PCIe Gen4 (the slowest thing we would deploy on).
            link = (gpu.interconnect_gbps or 32.0) * 1e9 * eff.tp_comm_efficiency
            ring = 2.0 * (tensor_parallel - 1) / tensor_parallel
            self._comm_per_token = 2 * model.layers * model.hidden_size * ACTIVATION_BYTES * ring / link
            self._comm_fixed = 2 * model.layers * eff.allreduce_latency_s
        else:
            self._comm_per_token = 0.0
            self._comm_fixed = 0.0
        self._overhead = eff.step_overhead_s
        self._per_seq = eff.per_seq_overhead_s

    def step_time(self, new_tokens: int, attn_ctx: float, kv_tokens_read: float, num_seqs: int) -> float:
        """Seconds for one step; see the module docstring for the formula. 0 when nothing runs."""
        if new_tokens <= 0:
            return 0.0
        t_c = (self._flops_per_token * new_tokens + self._flops_per_attn * attn_ctx) / self._compute_rate
        t_m = (self._weight_bytes + self._kv_bytes * kv_tokens_read) / self._memory_rate
        return (
            (t_c if t_c > t_m else t_m)
            + self._comm_per_token * new_tokens
            + self._comm_fixed
            + self._overhead
            + self._per_seq * num_seqs
        )

    def step_cost(self, new_tokens: int, attn_ctx: float, kv_tokens_read: float, num_seqs: int) -> StepCost:
        """The same prediction broken into its terms."""
        flops = self._flops_per_token * new_tokens + self._flops_per_attn * attn_ctx
        nbytes = self._weight_bytes + self._kv_bytes * kv_tokens_read
        return StepCost(
            flops=flops,
            bytes=nbytes,
            compute_s=flops / self._compute_rate,
            memory_s=nbytes / self._memory_rate,
            comm_s=(self._comm_per_token * new_tokens + self._comm_fixed) if new_tokens else 0.0,
            overhead_s=self._overhead + self._per_seq * num_seqs,
        )

    # Convenience predictions (used by tests, docs and the console's "predicted" figures).

    def decode_step_time(self, batch: int, context: int) -> float:
        """One decode step for ``batch`` sequences that each hold ``context`` tokens (incl. the new one)."""
        return self.step_time(batch, float(batch * context), float(batch * context), batch)

    def prefill_time(self, prompt_len: int, chunk: int | None = None) -> float:
        """Time to prefill one prompt alone, in chunks of ``chunk`` tokens (default: one pass)."""
        chunk = chunk or prompt_len
        total = 0.0
        done = 0
        while done < prompt_len:
            c = min(chunk, prompt_len - done)
            attn = c * done + c * (c + 1) / 2
            total += self.step_time(c, attn, float(done + c), 1)
            done += c
        return total
