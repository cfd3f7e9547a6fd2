"""Evaluations models by concept: benchmark runs, eval suites and runs, gates, cost.

Re-exported here so Django finds them under the ``evaluations`` app label; the tables are the
ones the migrations created (no table was renamed when the app was cut by concept, ADR 0027).
"""

from evaluations.models.benchmarks import BenchmarkRun
from evaluations.models.cost import CapacityPlan, SimulatorCalibration
from evaluations.models.evals import EvalCaseResult, EvalRun, EvalSuite, EvalSuiteVersion
from evaluations.models.gates import GateDecision, GatePolicy, GateRun
from evaluations.models.routing import RouterPolicy

__all__ = [
    "BenchmarkRun",
    "CapacityPlan",
    "EvalCaseResult",
    "EvalRun",
    "EvalSuite",
    "EvalSuiteVersion",
    "GateDecision",
    "GatePolicy",
    "GateRun",
    "RouterPolicy",
    "SimulatorCalibration",
]
