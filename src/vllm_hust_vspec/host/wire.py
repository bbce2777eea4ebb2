"""What one process writes for another to read: the names on the SchedulerOutput that the
EngineCore writes and every worker rank reads, and the K schedule the front end declares in
the speculative config and the EngineCore recognises (host/frontend/declared_schedule.py).

Each process imports them from here, so writer and reader agree without one process
importing the other's code.
"""

from __future__ import annotations

from typing import Any

# The SchedulerOutput field that carries the step's gamma to every worker (upstream vLLM's
# name; set as an attribute by the scheduler hook's own channel where the host lacks it).
K_FIELD = "num_spec_tokens_to_schedule"
# Set on a SchedulerOutput when the drafter must not run after this step (sticky gamma 0).
SKIP_ATTR = "vspec_skip_draft"
# The speculative config's batch-size -> K schedule (vLLM's dynamic speculative decoding).
SCHEDULE_FIELD = "num_speculative_tokens_per_batch_size"
# vLLM's default max_num_seqs is not yet set when the speculative config is built.
_UNKNOWN_MAX_SEQS = 1 << 16


def declared_schedule(
    max_gamma: int, max_num_seqs: int | None = None
) -> list[tuple[int, int, int]]:
    """A schedule in which every K in ``0..max_gamma`` appears.

    K grows with the batch size and the largest K covers the rest up to ``max_num_seqs``:
    vLLM's V1 capture list sizes each width tier by the widest batch that runs it, so the
    widest verify width keeps the sizes it has without a schedule. With fewer request slots
    than widths, the smallest K are the ones left out.
    """
    if max_gamma <= 0:
        raise ValueError("the declared schedule needs a gamma upper bound >= 1")
    slots = _UNKNOWN_MAX_SEQS if not max_num_seqs or max_num_seqs <= 0 else int(max_num_seqs)
    ks = list(range(max_gamma + 1))[-slots:]
    out = [(i + 1, i + 1, k) for i, k in enumerate(ks[:-1])]
    out.append((len(ks), max(len(ks), slots), ks[-1]))
    return out


def is_declared(spec_config: Any) -> bool:
    """True when ``spec_config``'s schedule is the one vSpec declares (not a user's)."""
    schedule = getattr(spec_config, SCHEDULE_FIELD, None)
    if not schedule:
        return False
    try:
        entries = [tuple(int(x) for x in entry) for entry in schedule]
        max_gamma = int(spec_config.num_speculative_tokens)
    except (TypeError, ValueError):
        return False
    if not entries or entries[-1][2] != max_gamma:
        return False
    return entries == declared_schedule(max_gamma, entries[-1][1])


__all__ = ["K_FIELD", "SCHEDULE_FIELD", "SKIP_ATTR", "declared_schedule", "is_declared"]
