"""The load harness: a Django-free library that measures an OpenAI-compatible endpoint.

Layers, bottom up: ``client`` (one timed streamed request), ``loadgen`` (one process's share of a
stage), ``runner`` (a stage over several processes, with ``/metrics`` scraping), ``sweep``
(capacity goodput), ``metrics`` (docs/domain.md's definitions). ``paced_server`` is a calibration
engine with exact timings. The console wraps this in ``evaluations.services.benchmarks``.
"""

from .client import Target
from .metrics import Sla, summarize
from .records import ERROR_TYPES, RequestRecord
from .runner import HarnessError, StageConfig, StageResult, run_ladder, run_stage
from .sweep import SweepConfig, find_capacity, usd_per_million_tokens

__all__ = [
    "ERROR_TYPES",
    "HarnessError",
    "RequestRecord",
    "Sla",
    "StageConfig",
    "StageResult",
    "SweepConfig",
    "Target",
    "find_capacity",
    "run_ladder",
    "run_stage",
    "summarize",
    "usd_per_million_tokens",
]
