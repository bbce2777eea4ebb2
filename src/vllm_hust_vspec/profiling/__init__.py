"""``vllm-hust-vspec-profile``: measure the host offline and fit a schema-v1 profile.

* :class:`ProfileGrid`: batch sizes x fixed gammas x output lengths.
* :func:`plan_profile`: settings (preset / flags) -> engine spec + output paths.
* :func:`collect`: run the grid on an in-process vLLM engine (``profiling.engine``, the only
  module here that imports vLLM, lazily), fit with ``adaptive.fit_profile``, pick the
  measured best gamma per batch, write ``profile.json`` and ``measurements.json``.
"""

from vllm_hust_vspec.profiling.collect import ProfilePlan, collect, plan_profile
from vllm_hust_vspec.profiling.grid import (
    Cell,
    CellRun,
    GridError,
    ProfileGrid,
    ProfileOutcome,
    acceptance_per_position,
    best_gammas,
    build_profile,
    cell_samples,
    gamma_table,
    measured_goodput,
)

__all__ = [
    "Cell",
    "CellRun",
    "GridError",
    "ProfileGrid",
    "ProfileOutcome",
    "ProfilePlan",
    "acceptance_per_position",
    "best_gammas",
    "build_profile",
    "cell_samples",
    "collect",
    "gamma_table",
    "measured_goodput",
    "plan_profile",
]
