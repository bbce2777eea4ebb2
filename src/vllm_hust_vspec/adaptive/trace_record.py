"""The trace format: one :class:`TraceHeader` line per run, one :class:`TraceRecord` line per
completed engine step. The plugin writes these; the simulator's replay reads them.

A record's core fields (``t`` to ``reward``) are what the replay needs; the rest describe the
host's scheduling around the step and default to "unknown/none" for traces written by other
recorders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TraceHeader:
    """The first line of a run: ``{"run": id, "started", "pid", "vspec", "settings",
    "prior", "host"}``; ``prior`` says what the controller started from ("none", or the
    source of its cost prior, e.g. a persisted state file); ``host`` the engine facts a
    re-calibration of the step cost needs (``max_gamma``, ``refill``, ``max_num_seqs``,
    ``max_num_batched_tokens``, ``graph_mode``, ``capture_sizes``: empty without graphs)."""

    run: str
    started: float
    pid: int
    vspec: str
    settings: str
    prior: str = "none"
    host: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the line."""
        out = {"run": self.run, "started": self.started, "pid": self.pid,
               "vspec": self.vspec, "settings": self.settings, "prior": self.prior}
        if self.host is not None:
            out["host"] = self.host
        return out


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One completed engine step.

    ``gamma`` is the gamma verified in this step (the arm the reward belongs to), ``decided``
    the gamma chosen at this step's schedule (drafted after it); ``drafted`` / ``accepted``
    are totals over the step's decoding requests; ``committed`` the tokens they appended
    (accepted drafts plus one each), ``tokens`` every token the step appended (prefills
    included); ``reward`` is ``committed / interval_s``. ``steady``: no prefill shared the
    step; ``admitted``: requests admitted; ``waiting``: queue length after scheduling;
    ``held``: refill admission held the queue; ``skip``: the drafter was skipped after the
    step (sticky gamma 0); ``fallback``: the controller failed and the fixed bound rules;
    ``lengths``: per-request verify lengths of the step, ascending (only with per-request
    lengths on).
    """

    t: float
    batch: int
    gamma: int
    drafted: int
    accepted: int
    interval_s: float
    reward: float
    steady: bool = True
    step: int | None = None
    decided: int | None = None
    committed: int | None = None
    tokens: int | None = None
    admitted: int = 0
    waiting: int = 0
    held: bool = False
    skip: bool = False
    fallback: bool = False
    lengths: tuple[int, ...] | None = None

    def committed_tokens(self) -> float:
        """Decode tokens the step committed (``reward * interval_s`` when not recorded)."""
        if self.committed is not None:
            return float(self.committed)
        return self.reward * self.interval_s

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the line, fields in the documented order."""
        out: dict[str, Any] = {
            "t": self.t, "step": self.step, "batch": self.batch, "gamma": self.gamma,
            "decided": self.decided, "drafted": self.drafted, "accepted": self.accepted,
            "committed": self.committed, "tokens": self.tokens,
            "interval_s": round(self.interval_s, 9), "reward": round(self.reward, 6),
            "steady": self.steady, "admitted": self.admitted, "waiting": self.waiting,
            "held": self.held, "skip": self.skip, "fallback": self.fallback,
        }
        if self.lengths is not None:
            out["lengths"] = list(self.lengths)
        return out


__all__ = ["TraceHeader", "TraceRecord"]
