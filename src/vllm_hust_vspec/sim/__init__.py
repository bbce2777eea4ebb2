"""Pure-Python offline simulator of continuous-batching speculative decoding.

Use it to compare gamma policies (vSpec's controllers, fixed gamma, published baselines and an
oracle) on scenarios with common random numbers, or to replay a trace recorded by the plugin.
See docs/simulator.md.

The simulator is this package's top level (:mod:`.engine` the step loop, :mod:`.scenario`,
:mod:`.policies`, :mod:`.runner`, :mod:`.replay`, ...); other systems' gamma policies are in
:mod:`.baselines`, the calibration of the NPU scenarios on measured runs in :mod:`.calibration`.
"""

from ._strict import ScenarioError
from .acceptance import ACCEPTANCE_PRESETS, AcceptanceSpec, unconditional_to_conditional
from .baselines.per_batch import NightjarBandit, SglangPerBatchEma
from .baselines.reference import FixedGamma, HfHeuristic, SglangAdaptive, Ucb1, VllmBatchSchedule
from .baselines.vllm_upstream import AcceptanceAdaptiveK, DflashAdaptiveK
from .cost import COST_PRESETS, LinearCost, TableCost
from .engine import RunResult, Simulation, simulate
from .host_cost import HostCost
from .oracle import Oracle
from .policies import PolicyError, all_policies, make_controller
from .replay import (
    TraceRecord,
    TraceRun,
    fit_acceptance,
    fit_cost,
    load_trace,
    read_trace_runs,
    scenario_dict_from_run,
    scenario_dict_from_trace,
    scenario_from_trace,
    select_trace_run,
    write_trace,
)
from .runner import PolicySummary, ScenarioReport, evaluate, geomean, run_many, summarise
from .scenario import (
    Scenario,
    list_scenarios,
    load_scenario,
    load_scenario_file,
    parse_scenario,
)

__all__ = [
    "ACCEPTANCE_PRESETS",
    "COST_PRESETS",
    "AcceptanceAdaptiveK",
    "AcceptanceSpec",
    "DflashAdaptiveK",
    "FixedGamma",
    "HfHeuristic",
    "HostCost",
    "LinearCost",
    "NightjarBandit",
    "Oracle",
    "PolicyError",
    "PolicySummary",
    "RunResult",
    "Scenario",
    "ScenarioError",
    "ScenarioReport",
    "SglangAdaptive",
    "SglangPerBatchEma",
    "Simulation",
    "TableCost",
    "TraceRecord",
    "TraceRun",
    "Ucb1",
    "VllmBatchSchedule",
    "all_policies",
    "evaluate",
    "fit_acceptance",
    "fit_cost",
    "geomean",
    "list_scenarios",
    "load_scenario",
    "load_scenario_file",
    "load_trace",
    "make_controller",
    "parse_scenario",
    "read_trace_runs",
    "run_many",
    "scenario_dict_from_run",
    "scenario_dict_from_trace",
    "scenario_from_trace",
    "select_trace_run",
    "simulate",
    "summarise",
    "unconditional_to_conditional",
    "write_trace",
]
