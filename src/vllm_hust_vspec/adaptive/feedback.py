"""Data that crosses the host/controller boundary: plain numbers only."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class StepFeedback:
    """What the scheduler measured for one completed engine step.

    ``drafted[i]`` / ``accepted[i]`` are per decoding request of the step; ``committed`` is the
    number of tokens the step appended to outputs (accepted drafts plus one target/bonus token
    per decoding request). ``interval_s`` is the wall time between this step's completion and
    the previous one as the scheduler consumed them, so intervals never overlap and their sum
    is the wall time the user saw.
    """

    batch_size: int
    gamma: int
    drafted: tuple[int, ...]
    accepted: tuple[int, ...]
    committed: int
    interval_s: float
    token_budget: int
    steady: bool = True
    # accept_flags[i][k] is True when request i's draft token at position k was accepted.
    accept_flags: tuple[tuple[bool, ...], ...] | None = None
    # False when the drafter did not run in this step (a sticky gamma 0: the host skipped it).
    drafter_ran: bool = True
    # Gamma drafted after this step (what the next step verifies), as the host ran it; None:
    # the controller's own latest decision. The host reports it because it may hold gamma
    # without asking the controller (a sticky gamma 0 pins the cohort). A step whose
    # next_gamma differs from gamma mixes the costs of two arms.
    next_gamma: int | None = None
    # Request ids in the order of ``drafted``/``accepted`` (hashable; the host's strings, the
    # simulator's ints), for policies that learn per request. None: not reported.
    request_ids: tuple[Hashable, ...] | None = None
    # True when per-request verify lengths left some drafts of this step unverified because
    # their request was judged unlikely to accept them: deep positions were then tried only by
    # the requests kept, so the step's per-position counts over-represent easy requests.
    lengths_trimmed: bool = False
    # Prompt tokens the step prefilled beside its decodes (admitted requests' chunks); 0 on a
    # decode-only step. A step with ``steady`` False and no count is not priced by it.
    prefill_tokens: int = 0

    @property
    def reward(self) -> float:
        """Goodput of the step: committed tokens per second."""
        return self.committed / self.interval_s if self.interval_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class VerifyQuery:
    """The drafts a step is about to verify, for a policy that sets per-request lengths.

    ``drafted[i]`` drafts wait for request ``request_ids[i]``; ``confidence[i][k]``, when the
    host reports it, is the drafter's probability of its draft at position ``k`` of request
    ``i`` (the answer trims each request's drafts to a prefix, so only the ranking of
    positions matters).
    """

    request_ids: tuple[Hashable, ...]
    drafted: tuple[int, ...]
    token_budget: int
    confidence: tuple[tuple[float, ...], ...] | None = None


@runtime_checkable
class LengthPolicy(Protocol):
    """A controller that also chooses how many of each request's drafts to verify.

    ``verify_lengths`` is called once per step before the target runs, with the drafts made
    after the previous step; it returns one length per request, each at most its drafts.
    """

    def verify_lengths(self, query: VerifyQuery) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class ControllerSnapshot:
    """What the host shows of a controller (its metrics): the policy's name, the latest
    decision, and per-arm goodput estimates in tokens per second for the batch-size bucket it
    last decided for (arms without an estimate yet are absent)."""

    policy: str
    gamma: int
    arm_goodput: Mapping[int, float] = field(default_factory=dict)


@runtime_checkable
class Controller(Protocol):
    """A gamma policy. ``decide`` is called once per scheduler step, ``observe`` once per
    completed step, both in the EngineCore process.

    ``settled()`` tells whether a gamma-0 decision is the controller's considered choice and
    not exploration (warm-up, a sweep, a re-check): a sticky host pins the running cohort at
    gamma 0 only then, since that ends speculation for the cohort's lifetime. ``report()`` is
    what the host's metrics read; ``snapshot()`` is the full JSON state for people and traces.
    """

    def decide(self, batch_size: int, token_budget: int) -> int: ...

    def observe(self, feedback: StepFeedback) -> None: ...

    def settled(self) -> bool: ...

    def report(self) -> ControllerSnapshot: ...

    def snapshot(self) -> dict[str, Any]: ...


class SettledPolicy:
    """``settled`` and ``report`` for a policy that never explores (every decision, zero
    included, is a considered one) and publishes no per-arm estimates. Subclasses provide
    ``decide``, ``observe`` and ``snapshot`` (with "policy" and "gamma" keys)."""

    def settled(self) -> bool:
        """Always."""
        return True

    def report(self) -> ControllerSnapshot:
        """Policy name and latest gamma from the snapshot; no estimates."""
        snap: dict[str, Any] = self.snapshot()  # type: ignore[attr-defined]
        return ControllerSnapshot(str(snap.get("policy", type(self).__name__)),
                                  int(snap.get("gamma", 0)))


__all__ = ["Controller", "ControllerSnapshot", "LengthPolicy", "SettledPolicy", "StepFeedback",
           "VerifyQuery"]
