"""Step-time models: how long one engine step takes for a given batch shape.

One step verifies the drafts chosen at the previous step (``verify_tokens`` draft tokens in
total over ``num_decode`` decoding requests), prefills ``prefill_tokens`` prompt tokens, and
then drafts ``gamma_draft`` tokens for each of ``num_drafting`` requests (the decision of this
step, verified in the next one).
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass
from typing import Protocol

from ._strict import StrictObject
from .host_cost import HostCost, describe_host_cost, parse_host_cost


class CostModel(Protocol):
    """Anything that prices one step, in seconds."""

    def step_time(
        self,
        num_decode: int,
        verify_tokens: int,
        gamma_draft: int,
        num_drafting: int,
        prefill_tokens: int,
        context_tokens: int,
        *,
        zero_pass: bool = False,
    ) -> float:
        """Seconds for one step; ``zero_pass``: at ``gamma_draft == 0`` the drafter still
        runs its first pass over the step's tokens (the host's sync gamma 0)."""
        ...

    def steady_time(self, batch: int, gamma: int, context_tokens: int) -> float:
        """Time of a decode-only step at ``batch`` verifying and drafting ``gamma``."""
        ...


@dataclass(frozen=True, slots=True)
class LinearCost:
    """Linear step-time model (milliseconds per unit).

    target:  target_base_ms + target_per_token_ms * scheduled tokens
             + target_per_ctx_ktoken_ms * context tokens / 1000
    draft:   when gamma > 0: spec_overhead_ms + gamma * (per_gamma_ms + draft_step_ms
             + draft_per_token_ms * drafting requests)
             + draft_ingest_per_token_ms * scheduled tokens;
             at gamma 0 nothing, unless the drafter still runs its first pass (``zero_pass``,
             the host's sync zero): the same with one pass
    A serial draft model pays ``draft_ingest_per_token_ms`` (it must run over every verified and
    prefilled token to keep its own KV cache); an in-model MTP/EAGLE head reuses the target's
    hidden states and leaves it at 0.
    """

    target_base_ms: float
    target_per_token_ms: float
    target_per_ctx_ktoken_ms: float = 0.0
    draft_step_ms: float = 0.0
    draft_per_token_ms: float = 0.0
    draft_ingest_per_token_ms: float = 0.0
    spec_overhead_ms: float = 0.0
    per_gamma_ms: float = 0.0

    def step_time(
        self,
        num_decode: int,
        verify_tokens: int,
        gamma_draft: int,
        num_drafting: int,
        prefill_tokens: int,
        context_tokens: int,
        *,
        zero_pass: bool = False,
    ) -> float:
        """Seconds for one step."""
        tokens = num_decode + verify_tokens + prefill_tokens
        ms = (
            self.target_base_ms
            + self.target_per_token_ms * tokens
            + self.target_per_ctx_ktoken_ms * context_tokens * 1e-3
        )
        passes = gamma_draft if gamma_draft > 0 else (1 if zero_pass else 0)
        if passes and num_drafting > 0:
            ms += self.spec_overhead_ms + passes * (
                self.per_gamma_ms + self.draft_step_ms + self.draft_per_token_ms * num_drafting
            )
            ms += self.draft_ingest_per_token_ms * tokens
        return ms * 1e-3

    def steady_time(self, batch: int, gamma: int, context_tokens: int) -> float:
        """Decode-only step verifying and drafting ``gamma`` for ``batch`` requests."""
        return self.step_time(batch, batch * gamma, gamma, batch, 0, context_tokens)


def _interp(xs: tuple[float, ...], ys: list[float], x: float) -> float:
    """Piecewise-linear through (xs, ys); linear extrapolation from the two end points."""
    n = len(xs)
    if n == 1:
        return ys[0]
    if x <= xs[0]:
        i = 0
    elif x >= xs[-1]:
        i = n - 2
    else:
        i = bisect.bisect_right(xs, x) - 1
    x0, x1 = xs[i], xs[i + 1]
    w = (x - x0) / (x1 - x0)
    return ys[i] + w * (ys[i + 1] - ys[i])


@dataclass(frozen=True, slots=True)
class TableCost:
    """Measured decode step times (ms) over a (batch, gamma) grid, interpolated.

    Interpolation is bilinear; outside the grid it extrapolates linearly along gamma from the
    two largest gammas and along batch from the two largest batches (a step never gets cheaper
    than the smallest measured value, and batches below the first row use the first row). A
    step verifying g_v drafts per request on average and drafting g_d uses the table at gamma
    ``s * g_v + (1 - s) * g_d`` with ``s = verify_share``: the table was measured at steady
    state where both are equal, verify and draft cost are both roughly linear in gamma, and
    ``s`` is the share of a gamma increment that is verification (the target's extra token
    per request) rather than drafting (one more drafter pass); 0.5 unless the preset says
    otherwise. Prefill adds ``prefill_per_token_ms`` per prompt token. The table's gamma-0
    column is whatever the measured host did at gamma 0 (``zero_pass`` does not change it).
    """

    batches: tuple[float, ...]
    gammas: tuple[float, ...]
    ms: tuple[tuple[float, ...], ...]  # ms[i][j] at batches[i], gammas[j]
    prefill_per_token_ms: float = 0.0
    verify_share: float = 0.5

    def __post_init__(self) -> None:
        if len(self.ms) != len(self.batches) or any(len(r) != len(self.gammas) for r in self.ms):
            raise ValueError("table shape must be len(batch) x len(gamma)")
        if list(self.batches) != sorted(set(self.batches)):
            raise ValueError("table batch values must be strictly increasing")
        if list(self.gammas) != sorted(set(self.gammas)):
            raise ValueError("table gamma values must be strictly increasing")

    def ms_at(self, batch: float, gamma: float) -> float:
        """Interpolated decode step time in ms."""
        b = max(batch, self.batches[0])
        col = [_interp(self.gammas, list(row), gamma) for row in self.ms]
        floor = min(min(r) for r in self.ms)
        return max(floor, _interp(self.batches, col, b))

    def step_time(
        self,
        num_decode: int,
        verify_tokens: int,
        gamma_draft: int,
        num_drafting: int,
        prefill_tokens: int,
        context_tokens: int,
        *,
        zero_pass: bool = False,
    ) -> float:
        """Seconds for one step."""
        g_verify = verify_tokens / num_decode if num_decode else 0.0
        g_draft = gamma_draft if num_drafting else 0
        s = self.verify_share
        if num_decode and num_drafting:
            g = s * g_verify + (1.0 - s) * g_draft
        else:
            g = g_verify if num_decode else (1.0 - s) * g_draft
        batch = max(num_decode, num_drafting, 1)
        return (self.ms_at(batch, g) + self.prefill_per_token_ms * prefill_tokens) * 1e-3

    def steady_time(self, batch: int, gamma: int, context_tokens: int) -> float:
        """Decode-only step at ``batch`` with ``gamma``."""
        return self.ms_at(max(batch, 1), gamma) * 1e-3


AnyCost = LinearCost | TableCost | HostCost

# vLLM's published median ITL (ms), Llama-3.1-8B + EAGLE on H100, K = 0/1/3/5.
_H100_LLAMA8B_EAGLE = TableCost(
    batches=(1.0, 16.0, 64.0, 256.0),
    gammas=(0.0, 1.0, 3.0, 5.0),
    ms=(
        (6.52, 7.37, 8.84, 10.33),
        (6.90, 7.85, 9.52, 11.20),
        (7.77, 9.66, 13.50, 16.83),
        (14.49, 27.14, 41.85, 57.40),
    ),
    prefill_per_token_ms=0.02,
)

COST_PRESETS: dict[str, AnyCost] = {
    "h100-llama8b-eagle": _H100_LLAMA8B_EAGLE,
    # The same table with a gamma increment priced 85% verification, 15% drafting: what the
    # FLOPs say once the batch is compute-bound (Llama-3.1-8B: ~15 GFLOP per verified token;
    # an EAGLE-1 pass, one decoder layer plus the shared LM head, ~1.5 GFLOP). Steps that
    # verify fewer drafts than they draft (per-request verify lengths) save accordingly.
    "h100-llama8b-eagle-verify-bound": dataclasses.replace(_H100_LLAMA8B_EAGLE,
                                                           verify_share=0.85),
    # A parallel drafter (DFlash / DSpark-like: one pass proposes every position, so drafting
    # costs the same at any depth) on a compute-bound ~8B target: the per-token slope is the
    # H100 table's between 64 and 256 tokens ((14.49 - 7.77) / 192 ms), the draft pass ~1/7 of
    # a target step. Deep drafts are nearly free to make; verifying them is what costs.
    "parallel-draft": LinearCost(
        target_base_ms=7.0,
        target_per_token_ms=0.035,
        spec_overhead_ms=1.0,
    ),
    # A ~70B-class target with a separate ~1B draft model run serially: one draft step costs
    # ~1/6 of a batch-1 target step, and the draft must also ingest every verified token.
    "serial-draft": LinearCost(
        target_base_ms=24.0,
        target_per_token_ms=0.09,
        target_per_ctx_ktoken_ms=0.02,
        draft_step_ms=4.0,
        draft_per_token_ms=0.012,
        draft_ingest_per_token_ms=0.01,
        spec_overhead_ms=0.6,
    ),
    # In-model MTP head (one extra decoder layer) on an ~8B-class target: a head pass costs
    # ~1/12 of a target step and needs no separate ingest.
    "mtp-head": LinearCost(
        target_base_ms=7.0,
        target_per_token_ms=0.03,
        target_per_ctx_ktoken_ms=0.006,
        draft_step_ms=0.55,
        draft_per_token_ms=0.004,
        spec_overhead_ms=0.25,
        per_gamma_ms=0.05,
    ),
}


def parse_cost(value: object, obj: StrictObject, key: str) -> AnyCost:
    """Parse the scenario's ``cost``: a preset name, or a linear / table / host object."""
    if isinstance(value, str):
        if value not in COST_PRESETS:
            raise obj.error(key, f"unknown cost preset {value!r} (known: "
                            f"{', '.join(sorted(COST_PRESETS))})")
        return COST_PRESETS[value]
    c = obj.child(key)
    kind = c.string("type", choices=("linear", "table", "host"))
    if kind == "host":
        out: AnyCost = parse_host_cost(c)
    elif kind == "linear":
        out = LinearCost(
            target_base_ms=c.number("target_base_ms", lo=0.0, lo_open=True),
            target_per_token_ms=c.number("target_per_token_ms", lo=0.0),
            target_per_ctx_ktoken_ms=c.number("target_per_ctx_ktoken_ms", 0.0, lo=0.0),
            draft_step_ms=c.number("draft_step_ms", 0.0, lo=0.0),
            draft_per_token_ms=c.number("draft_per_token_ms", 0.0, lo=0.0),
            draft_ingest_per_token_ms=c.number("draft_ingest_per_token_ms", 0.0, lo=0.0),
            spec_overhead_ms=c.number("spec_overhead_ms", 0.0, lo=0.0),
            per_gamma_ms=c.number("per_gamma_ms", 0.0, lo=0.0),
        )
    else:
        batches = c.numbers("batch", lo=1.0)
        gammas = c.numbers("gamma", lo=0.0)
        rows = c.raw("ms")
        if not isinstance(rows, list) or len(rows) != len(batches):
            raise c.error("ms", f"expected {len(batches)} rows (one per batch value)")
        table: list[tuple[float, ...]] = []
        for i, row in enumerate(rows):
            if (not isinstance(row, list) or len(row) != len(gammas)
                    or any(isinstance(v, bool) or not isinstance(v, int | float) or v <= 0
                           for v in row)):
                raise c.error(f"ms[{i}]", f"expected {len(gammas)} positive numbers "
                              "(one per gamma value)")
            table.append(tuple(float(v) for v in row))
        try:
            out = TableCost(
                batches=tuple(batches),
                gammas=tuple(gammas),
                ms=tuple(table),
                prefill_per_token_ms=c.number("prefill_per_token_ms", 0.0, lo=0.0),
                verify_share=c.number("verify_share", 0.5, lo=0.0, hi=1.0),
            )
        except ValueError as exc:
            raise c.error("batch", str(exc)) from None
    c.finish()
    return out


def describe_cost(cost: AnyCost) -> str:
    """One-line summary for reports."""
    if isinstance(cost, HostCost):
        return describe_host_cost(cost)
    if isinstance(cost, TableCost):
        return (f"table {len(cost.batches)}x{len(cost.gammas)} "
                f"(batch {cost.batches[0]:g}..{cost.batches[-1]:g}, "
                f"gamma {cost.gammas[0]:g}..{cost.gammas[-1]:g})")
    return (f"linear (target {cost.target_base_ms:g} ms + {cost.target_per_token_ms:g} ms/token, "
            f"draft step {cost.draft_step_ms:g} ms)")

