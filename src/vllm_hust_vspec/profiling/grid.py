"""Pure logic of offline profiling: the grid, step samples, measured goodput, best gamma per
batch, acceptance per position and the fitted profile. No vLLM here (see engine.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_hust_vspec.adaptive.feedback import StepFeedback
from vllm_hust_vspec.adaptive.fitting import FitError, FitResult, FitSample, fit_profile
from vllm_hust_vspec.adaptive.profile import Profile, TableEntry


class GridError(ValueError):
    """A grid option is unusable; the message names the flag."""


@dataclass(frozen=True)
class ProfileGrid:
    """Batch sizes x fixed gammas x output lengths, each cell run ``repeats`` times."""

    batch_sizes: tuple[int, ...] = (1, 2, 4, 8)
    gammas: tuple[int, ...] = (0, 1, 2, 3, 4)
    output_lens: tuple[int, ...] = (64, 160)
    prompt_len: int = 32
    repeats: int = 3

    def validate(self, max_model_len: int | None = None) -> None:
        """Raise :class:`GridError` naming the flag at fault."""
        for flag, values, lo in (("--batch-sizes", self.batch_sizes, 1),
                                 ("--gammas", self.gammas, 0),
                                 ("--output-lens", self.output_lens, 2)):
            if not values:
                raise GridError(f"{flag} must list at least one value")
            if any(v < lo for v in values):
                raise GridError(f"{flag} values must be >= {lo}, got {list(values)}")
            if len(set(values)) != len(values):
                raise GridError(f"{flag} has duplicates: {list(values)}")
        if len([g for g in self.gammas]) < 2 or not any(g > 0 for g in self.gammas):
            raise GridError("--gammas needs at least two values, one of them > 0 (the fit "
                            "separates target and draft cost by varying gamma)")
        if self.prompt_len < 1:
            raise GridError(f"--prompt-len must be >= 1, got {self.prompt_len}")
        if self.repeats < 1:
            raise GridError(f"--repeats must be >= 1, got {self.repeats}")
        if max_model_len is not None:
            need = self.prompt_len + max(self.output_lens) + max(self.gammas) + 1
            if need > max_model_len:
                raise GridError(
                    f"--prompt-len {self.prompt_len} + largest --output-lens "
                    f"{max(self.output_lens)} + gamma {max(self.gammas)} needs max_model_len >= "
                    f"{need}, the engine has {max_model_len} (raise --max-model-len)"
                )

    @property
    def max_gamma(self) -> int:
        return max(self.gammas)

    def cells(self) -> list[Cell]:
        """Run order: output length, batch, then gamma innermost (adjacent cells compare the
        gammas of one batch under the same machine conditions)."""
        return [Cell(b, g, out, rep)
                for rep in range(self.repeats)
                for out in self.output_lens
                for b in self.batch_sizes
                for g in self.gammas]

    def to_dict(self) -> dict[str, Any]:
        return {"batch_sizes": list(self.batch_sizes), "gammas": list(self.gammas),
                "output_lens": list(self.output_lens), "prompt_len": self.prompt_len,
                "repeats": self.repeats}


@dataclass(frozen=True)
class Cell:
    """One grid point: ``batch`` requests of ``output_len`` tokens at a fixed ``gamma``."""

    batch: int
    gamma: int
    output_len: int
    repeat: int = 0


@dataclass
class CellRun:
    """The steps one cell produced (StepFeedback from the scheduler hook, in order)."""

    cell: Cell
    feedback: list[StepFeedback] = field(default_factory=list)
    wall_s: float = 0.0


def cell_samples(run: CellRun, prompt_len: int) -> list[dict[str, Any]]:
    """Fit samples of one cell: steady full-batch steps that verified the cell's gamma.

    Context (KV tokens summed over the batch) is the prompts plus every token committed so
    far; exact while the whole batch is running, which is why partial batches are dropped.
    """
    c = run.cell
    committed = c.batch  # the prefill step committed one token per request
    out: list[dict[str, Any]] = []
    for f in run.feedback:
        context = c.batch * prompt_len + committed
        if f.steady and f.gamma == c.gamma and f.batch_size == c.batch and f.interval_s > 0:
            out.append({
                "batch_size": c.batch,
                "gamma": c.gamma,
                "num_batched_tokens": c.batch + sum(f.drafted),
                "context_tokens": context,
                "step_s": f.interval_s,
                "committed": f.committed,
                "output_len": c.output_len,
                "repeat": c.repeat,
            })
        committed += f.committed
    return out


def run_goodput(run: CellRun, prompt_len: int) -> float:
    """Committed tokens per second over a cell's kept samples (0 when it has none)."""
    samples = cell_samples(run, prompt_len)
    secs = sum(float(x["step_s"]) for x in samples)
    return sum(float(x["committed"]) for x in samples) / secs if secs > 0 else 0.0


def select_median_runs(runs: Sequence[CellRun], prompt_len: int) -> list[CellRun]:
    """Per (batch, gamma, output length), the repeat with the median goodput.

    On a shared machine a burst of foreign load can slow a whole cell many times over;
    repeats of a cell run a full grid pass apart, so the median repeat is the one least
    likely to be hit. With one repeat this returns the runs unchanged.
    """
    groups: dict[tuple[int, int, int], list[CellRun]] = {}
    for r in runs:
        groups.setdefault((r.cell.batch, r.cell.gamma, r.cell.output_len), []).append(r)
    chosen: list[CellRun] = []
    for group in groups.values():
        ranked = sorted(group, key=lambda r: run_goodput(r, prompt_len))
        chosen.append(ranked[(len(ranked) - 1) // 2])
    return chosen


FIT_KEYS = ("batch_size", "gamma", "num_batched_tokens", "context_tokens", "step_s")


def to_fit_samples(samples: Iterable[dict[str, Any]]) -> list[FitSample]:
    """Samples (with extra bookkeeping keys) as the fitter's input."""
    return [FitSample(batch_size=int(s["batch_size"]), gamma=int(s["gamma"]),
                      num_batched_tokens=int(s["num_batched_tokens"]),
                      context_tokens=float(s["context_tokens"]), step_s=float(s["step_s"]))
            for s in samples]


def measured_goodput(samples: Iterable[dict[str, Any]]) -> dict[tuple[int, int], float]:
    """Committed tokens per second per (batch, gamma): total tokens over total time."""
    tok: dict[tuple[int, int], float] = {}
    sec: dict[tuple[int, int], float] = {}
    for s in samples:
        key = (int(s["batch_size"]), int(s["gamma"]))
        tok[key] = tok.get(key, 0.0) + float(s["committed"])
        sec[key] = sec.get(key, 0.0) + float(s["step_s"])
    return {k: tok[k] / sec[k] for k in tok if sec[k] > 0}


def best_gammas(goodput: dict[tuple[int, int], float]) -> dict[int, int]:
    """The measured best gamma per batch size (ties: the smaller gamma)."""
    best: dict[int, tuple[float, int]] = {}
    for (b, g), value in goodput.items():
        cur = best.get(b)
        if cur is None or value > cur[0] or (value == cur[0] and g < cur[1]):
            best[b] = (value, g)
    return {b: g for b, (_, g) in sorted(best.items())}


def gamma_table(best: dict[int, int], max_batch: int) -> tuple[TableEntry, ...]:
    """Contiguous ``[lo, hi, gamma]`` ranges from 1 to ``max_batch``: each measured batch
    size owns the sizes up to the next measured one; equal neighbours are merged."""
    sizes = sorted(best)
    if not sizes:
        return ()
    entries: list[TableEntry] = []
    for i, b in enumerate(sizes):
        lo = 1 if i == 0 else b
        hi = sizes[i + 1] - 1 if i + 1 < len(sizes) else max(max_batch, b)
        if entries and entries[-1].gamma == best[b]:
            entries[-1] = TableEntry(entries[-1].lo, hi, best[b])
        else:
            entries.append(TableEntry(lo, hi, best[b]))
    return tuple(entries)


def acceptance_per_position(feedback: Iterable[StepFeedback], width: int) -> list[float]:
    """Unconditional per-position acceptance: of the requests that drafted position k, the
    fraction whose first k+1 drafts were accepted; made non-increasing."""
    drafted = [0] * width
    accepted = [0] * width
    for f in feedback:
        for d, a in zip(f.drafted, f.accepted, strict=False):
            for k in range(min(d, width)):
                drafted[k] += 1
                if a > k:
                    accepted[k] += 1
    rates: list[float] = []
    for k in range(width):
        if not drafted[k]:
            break
        r = accepted[k] / drafted[k]
        rates.append(min(r, rates[-1]) if rates else r)
    return rates


@dataclass(frozen=True)
class ProfileOutcome:
    """The fitted profile with everything measurements.json records about it."""

    profile: Profile
    fit: FitResult
    goodput: dict[tuple[int, int], float]
    best: dict[int, int]
    acceptance: list[float]
    notes: list[str]


def build_profile(
    samples: Sequence[dict[str, Any]],
    feedback: Iterable[StepFeedback],
    grid: ProfileGrid,
    *,
    max_batch: int,
    name: str = "",
    method: str = "",
    notes: str = "",
    context_terms: bool = True,
) -> ProfileOutcome:
    """Fit the latency model, attach the measured table and acceptance, validate."""
    extra: list[str] = []
    fit_in = to_fit_samples(samples)
    acceptance = acceptance_per_position(feedback, grid.max_gamma) or [0.6]
    try:
        fit = fit_profile(fit_in, context_terms=context_terms, default_acceptance=acceptance,
                          name=name, method=method)
    except FitError as exc:
        if not context_terms or "context" not in str(exc):
            raise
        extra.append(f"fitted without context terms: {exc}")
        fit = fit_profile(fit_in, context_terms=False, default_acceptance=acceptance,
                          name=name, method=method)
    goodput = measured_goodput(samples)
    best = best_gammas(goodput)
    data = fit.profile.to_dict()
    table = gamma_table(best, max_batch)
    if table:
        data["batch_gamma_table"] = [[e.lo, e.hi, e.gamma] for e in table]
    if notes:
        data["notes"] = notes
    profile = Profile.from_dict(data, source="<measured profile>")
    return ProfileOutcome(profile, fit, goodput, best, acceptance, extra)


def summary_lines(outcome: ProfileOutcome) -> list[str]:
    """Human summary: residual, coefficients, goodput per cell and best gamma per batch."""
    p, f = outcome.profile, outcome.fit
    lines = [
        f"fit: {f.num_samples} samples ({f.mode}); residual rmse {f.residual * 1e3:.3f} ms "
        f"({f.relative_residual * 100:.1f}% of the mean step), max {f.max_abs_residual * 1e3:.3f}"
        " ms",
        f"target: {p.target.constant_s * 1e3:.3f} ms + {p.target.per_batched_token_s * 1e6:.2f} "
        f"us/token + {p.target.per_context_token_s * 1e9:.2f} ns/context token",
        f"draft:  {p.draft.constant_s * 1e3:.3f} ms + {p.draft.per_batched_token_s * 1e6:.2f} "
        f"us/request + {p.draft.per_context_token_s * 1e9:.2f} ns/context token (per gamma)",
        "acceptance per position: " + ", ".join(f"{a:.3f}" for a in outcome.acceptance),
    ]
    gammas = sorted({g for _, g in outcome.goodput})
    lines.append("measured goodput (tok/s): batch | " + " | ".join(f"g={g}" for g in gammas)
                 + " | best")
    for b, g_best in outcome.best.items():
        cells = [outcome.goodput.get((b, g)) for g in gammas]
        lines.append(f"  {b:5d} | " + " | ".join("-" if v is None else f"{v:.1f}" for v in cells)
                     + f" | {g_best}")
    lines += [f"note: {n}" for n in outcome.notes]
    return lines


def fmt_seconds(x: float) -> str:
    """Compact seconds for logs."""
    return f"{x:.1f} s" if x >= 1 or math.isclose(x, 0) else f"{x * 1e3:.0f} ms"


__all__ = [
    "FIT_KEYS",
    "Cell",
    "CellRun",
    "GridError",
    "ProfileGrid",
    "ProfileOutcome",
    "acceptance_per_position",
    "best_gammas",
    "build_profile",
    "cell_samples",
    "gamma_table",
    "measured_goodput",
    "run_goodput",
    "select_median_runs",
    "summary_lines",
    "to_fit_samples",
]
