"""Shared decision plumbing: token-budget caps, step limits and the hysteresis switch rule."""

from __future__ import annotations

import math


def bucket_index(batch_size: int) -> int:
    """Power-of-two bucket of a batch size: 1 -> 0, 2..3 -> 1, 4..7 -> 2, ... (0 -> 0)."""
    return batch_size.bit_length() - 1 if batch_size > 1 else 0


def bucket_batches(max_batch: int) -> list[int]:
    """The lower edge of every bucket up to ``max_batch``: 1, 2, 4, ... (at least [1])."""
    out, b = [], 1
    while b <= max(1, max_batch):
        out.append(b)
        b *= 2
    return out


def calibration_batches(max_batch: int) -> list[int]:
    """The batch each bucket up to ``max_batch`` is calibrated at: the middle of the bucket
    ``[b, 2b)`` (1, 3, 6, 12, ...), the last one capped at ``max_batch``. A bucket's one set
    of cost coefficients stands for every batch in it, and step costs are not linear in the
    batch (vLLM's H100 table: a draft increment costs 1.55x a target-only step at batch 128,
    1.87x at 255), so its lower edge misrepresents it."""
    out: list[int] = []
    for b in bucket_batches(max_batch):
        mid = min(b + b // 2, max(1, max_batch))
        if mid not in out:
            out.append(mid)
    return out


def budget_cap(batch_size: int, token_budget: int, min_gamma: int, max_gamma: int) -> int:
    """Largest gamma whose verify width ``batch * (1 + gamma)`` fits ``token_budget``.

    Never below ``min_gamma``: when even ``min_gamma`` does not fit, the floor is returned
    (the host cannot run fewer draft tokens than its configured minimum, and gamma 0 always
    fits a decode-only step the scheduler already admitted). A non-positive budget or batch
    means "no budget information" and leaves ``max_gamma`` as the cap.
    """
    if batch_size <= 0 or token_budget <= 0:
        return max_gamma
    cap = token_budget // batch_size - 1
    if cap >= max_gamma:
        return max_gamma
    return cap if cap > min_gamma else min_gamma


def step_toward(current: int, target: int, max_step: int) -> int:
    """Move from ``current`` toward ``target`` by at most ``max_step``."""
    if target > current + max_step:
        return current + max_step
    if target < current - max_step:
        return current - max_step
    return target


def should_switch(best_score: float, current_score: float, hysteresis: float) -> bool:
    """Switch only when the challenger beats the current arm by the relative margin.

    An unknown (``inf``) current score never loses: the current arm is being measured. An
    unknown challenger always wins: it has to be measured once.
    """
    if math.isinf(current_score):
        return False
    if math.isinf(best_score):
        return True
    return best_score > current_score * (1.0 + hysteresis)


class ZeroProbe:
    """Re-measures acceptance while speculation is off.

    At gamma 0 nothing is drafted, so nothing tells the controller that acceptance has come
    back. Every ``interval`` decisions at gamma 0 it drafts one token once; the interval
    doubles (up to ``max_interval``) each time speculation stays off, and resets when the
    controller turns speculation back on by itself. ``interval == 0`` disables probing.
    (The profile policy's; the online policy re-opens speculation through its acceptance drift.)
    """

    __slots__ = ("_base", "_max", "interval", "probes", "run")

    def __init__(self, interval: int, max_interval: int) -> None:
        self._base = interval
        self._max = max_interval
        self.interval = interval
        self.run = 0
        self.probes = 0

    def left_zero(self) -> None:
        """The controller chose a positive gamma on its own estimate."""
        self.run = 0
        self.interval = self._base

    def due(self) -> bool:
        """Called once per decision that stays at gamma 0: True when a probe is due."""
        if not self.interval:
            return False
        self.run += 1
        if self.run < self.interval:
            return False
        self.run = 0
        self.interval = min(2 * self.interval, self._max)
        self.probes += 1
        return True
