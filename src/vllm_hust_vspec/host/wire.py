"""Names on the SchedulerOutput that the EngineCore writes and every worker rank reads.

Both processes import them from here, so the scheduler hook and each runner's wrappers agree
on the attribute names without one process importing the other's code.
"""

from __future__ import annotations

# The SchedulerOutput field that carries the step's gamma to every worker (upstream vLLM's
# name; set as an attribute by the scheduler hook's own channel where the host lacks it).
K_FIELD = "num_spec_tokens_to_schedule"
# Set on a SchedulerOutput when the drafter must not run after this step (sticky gamma 0).
SKIP_ATTR = "vspec_skip_draft"

__all__ = ["K_FIELD", "SKIP_ATTR"]
