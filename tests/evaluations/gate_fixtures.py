"""Shared data of the gate tests: a tiny suite and a valid policy body (fixtures are in conftest)."""

from __future__ import annotations

SUITE = "\n".join(
    f'{{"id": "a{i}", "category": "arithmetic", "prompt": "What is {i} + 1?", "expected": {i + 1}, "scorer": "numeric"}}'
    for i in range(12)
)


def policy_body(**over) -> dict:
    body = {
        "quality": {"required": True, "suite": "tiny-arith", "baseline": "serving",
                    "default": {"max_drop": 0.5, "min_score": 0.0}},
        "performance": {"required": True, "workload": {"input": {"kind": "fixed", "value": 64},
                                                        "output": {"kind": "fixed", "value": 32}},
                        "sla": {"ttft_ms": 2000, "tpot_ms": 100}, "stage_duration_s": 10,
                        "min_goodput_ratio": 0.5, "max_p95_ttft_ms": 2000, "max_p95_tpot_ms": 100,
                        "kv_context_tokens": 8192, "min_kv_seqs": 4},
        "stability": {"required": True, "duration_s": 20, "length_mix": [{"input": 64, "output": 32, "weight": 3},
                                                                          {"input": 512, "output": 64, "weight": 1}],
                      "waves": {"low_rps": 1, "high_rps": 4, "period_s": 10},
                      "max_error_rate": 0.01, "max_preemptions": 0, "max_restarts": 0},
    }  # fmt: skip
    for key, value in over.items():
        body[key] = value
    return body
