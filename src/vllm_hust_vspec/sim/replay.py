"""Replay a trace recorded by the plugin: fit acceptance and cost, build a scenario.

Trace format (JSON Lines, one object per controller step; extra keys are ignored):

    {"t": 12.5, "batch": 48, "gamma": 3, "drafted": 144, "accepted": 97,
     "interval_s": 0.0123, "reward": 11463.4}

``gamma`` is the gamma verified in that step, ``drafted``/``accepted`` are totals over the
batch, ``reward`` is committed tokens / interval_s. An optional boolean ``steady`` (false when
prefill shared the step) keeps those steps out of the cost fit.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._strict import ScenarioError, StrictObject
from .scenario import Scenario, parse_scenario

_MIN_RECORDS_PER_GAMMA = 20  # positional acceptance needs this many steps at each gamma


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One step of a recorded trace."""

    t: float
    batch: int
    gamma: int
    drafted: int
    accepted: int
    interval_s: float
    reward: float
    steady: bool = True

    @property
    def committed(self) -> float:
        """Committed tokens of the step (reward * interval)."""
        return self.reward * self.interval_s


def load_trace(path: str | Path) -> list[TraceRecord]:
    """Read and validate a JSONL trace; errors name the file, line and key."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read trace: {exc.strerror}") from None
    out: list[TraceRecord] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p}:{lineno}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"{where}: not valid JSON ({exc.msg})") from None
        obj = StrictObject(data, "", where)
        rec = TraceRecord(
            t=obj.number("t"),
            batch=int(obj.number("batch", lo=0.0)),
            gamma=int(obj.number("gamma", lo=0.0)),
            drafted=int(obj.number("drafted", lo=0.0)),
            accepted=int(obj.number("accepted", lo=0.0)),
            interval_s=obj.number("interval_s", lo=0.0),
            reward=obj.number("reward", lo=0.0),
            steady=obj.boolean("steady", True),
        )
        if rec.accepted > rec.drafted:
            raise obj.error("accepted", f"{rec.accepted} exceeds drafted ({rec.drafted})")
        out.append(rec)  # unknown keys are allowed: recorders may add fields
    if not out:
        raise ScenarioError(f"{p}: trace is empty")
    return out


def write_trace(path: str | Path, records: list[dict[str, float]]) -> None:
    """Write trace records (as produced by ``simulate(..., trace=True)``) as JSON Lines."""
    with Path(path).open("w", encoding="utf-8") as fh:
        for rec in records:
            row: dict[str, Any] = dict(rec)
            for key in ("batch", "gamma", "drafted", "accepted"):
                row[key] = int(row[key])
            fh.write(json.dumps(row) + "\n")


@dataclass(frozen=True, slots=True)
class AcceptanceFit:
    """Acceptance estimated from a trace."""

    per_gamma_rate: dict[int, float]  # accepted / drafted at each verified gamma
    mean_accepted: dict[int, float]  # accepted drafts per request at each gamma
    model: dict[str, Any]  # scenario "acceptance" object (iid or positional)


def fit_acceptance(records: list[TraceRecord]) -> AcceptanceFit:
    """Fit per-position acceptance under prefix acceptance (see docs/simulator.md)."""
    acc: dict[int, float] = {}
    dra: dict[int, float] = {}
    req: dict[int, float] = {}
    steps: dict[int, int] = {}
    for r in records:
        if r.batch <= 0 or r.drafted <= 0:
            continue
        g = max(1, round(r.drafted / r.batch))
        acc[g] = acc.get(g, 0.0) + r.accepted
        dra[g] = dra.get(g, 0.0) + r.drafted
        req[g] = req.get(g, 0.0) + r.batch
        steps[g] = steps.get(g, 0) + 1
    if not dra:
        raise ScenarioError("trace has no steps with drafted tokens: acceptance cannot be fitted")
    rate = {g: acc[g] / dra[g] for g in sorted(dra)}
    mean = {g: min(float(g), acc[g] / req[g]) for g in sorted(dra)}
    top = max(mean)
    full = all(steps.get(g, 0) >= _MIN_RECORDS_PER_GAMMA for g in range(1, top + 1))
    if full and top >= 2:
        uncond: list[float] = []
        prev_m = 0.0
        for g in range(1, top + 1):
            u = mean[g] - prev_m
            prev_m = mean[g]
            u = min(max(u, 0.0), uncond[-1] if uncond else 1.0)
            uncond.append(round(u, 6))
        if uncond[0] > 0:
            return AcceptanceFit(rate, mean, {"type": "positional", "rates": uncond})
    alpha = _fit_iid(mean, {g: float(steps[g]) for g in mean})
    return AcceptanceFit(rate, mean, {"type": "iid", "alpha": round(alpha, 6)})


def _fit_iid(mean: dict[int, float], weight: dict[int, float]) -> float:
    """Alpha minimising weighted squared error of E[accepted | g] = sum_{k=1..g} alpha^k."""

    def loss(a: float) -> float:
        return sum(w * (mean[g] - sum(a**k for k in range(1, g + 1))) ** 2
                   for g, w in weight.items())

    lo, hi = 0.0, 1.0
    for _ in range(80):  # golden-section search: the loss is unimodal in alpha
        m1 = hi - (hi - lo) * 0.618034
        m2 = lo + (hi - lo) * 0.618034
        if loss(m1) <= loss(m2):
            hi = m2
        else:
            lo = m1
    return 0.5 * (lo + hi)


def _bin(batch: int) -> int:
    return 1 << (max(batch, 1).bit_length() - 1)


def fit_cost(records: list[TraceRecord], max_gamma: int) -> dict[str, Any]:
    """Table cost over (batch bins, gamma 0..max_gamma).

    A step's interval covers verifying its own gamma and drafting the next record's gamma, so
    cell medians use only steps whose next step kept the same gamma (steady state, which is
    what a cost table means); where a cell has fewer than 3 such steps, a least-squares fit
    ``a + b*B + c*g + d*B*g`` over all steps (with g the mean of verified and drafted gamma)
    fills it.
    """
    rows: list[tuple[TraceRecord, float, bool]] = []
    for i, r in enumerate(records):
        if not (r.steady and r.interval_s > 0 and r.batch > 0):
            continue
        nxt = records[i + 1].gamma if i + 1 < len(records) else r.gamma
        rows.append((r, 0.5 * (r.gamma + nxt), nxt == r.gamma))
    if not rows:
        raise ScenarioError("trace has no steady steps with a positive interval: cost cannot "
                            "be fitted")
    coef = _least_squares([(1.0, r.batch, g, r.batch * g) for r, g, _ in rows],
                          [r.interval_s * 1e3 for r, _, _ in rows])
    cells: dict[tuple[int, int], list[float]] = {}
    members: dict[int, list[int]] = {}
    for r, _, same in rows:
        b = _bin(r.batch)
        members.setdefault(b, []).append(r.batch)
        if same:
            cells.setdefault((b, r.gamma), []).append(r.interval_s * 1e3)
    bins = sorted(members)
    reps = [float(statistics.median(members[b])) for b in bins]
    floor = min(r.interval_s for r, _, _ in rows) * 1e3
    table: list[list[float]] = []
    for b, rep in zip(bins, reps, strict=True):
        row: list[float] = []
        for g in range(max_gamma + 1):
            samples = cells.get((b, g), [])
            if len(samples) >= 3:
                row.append(statistics.median(samples))
            else:
                a0, a1, a2, a3 = coef
                row.append(max(floor, a0 + a1 * rep + a2 * g + a3 * rep * g))
        table.append([round(v, 6) for v in row])
    # representatives of power-of-two bins are distinct; keep them strictly increasing anyway
    for i in range(1, len(reps)):
        reps[i] = max(reps[i], reps[i - 1] + 1.0)
    return {"type": "table", "batch": reps, "gamma": list(range(max_gamma + 1)), "ms": table}


def _least_squares(xs: list[tuple[float, ...]], ys: list[float]) -> tuple[float, ...]:
    """Ordinary least squares via the normal equations (tiny, ridge-damped for rank loss)."""
    n = len(xs[0])
    ata = [[0.0] * n for _ in range(n)]
    aty = [0.0] * n
    for x, y in zip(xs, ys, strict=True):
        for i in range(n):
            aty[i] += x[i] * y
            for j in range(n):
                ata[i][j] += x[i] * x[j]
    for i in range(n):
        ata[i][i] += 1e-6 * (1.0 + ata[i][i])
    # Gaussian elimination with partial pivoting
    m = [row[:] + [aty[i]] for i, row in enumerate(ata)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        if abs(m[c][c]) < 1e-300:
            continue
        for r in range(c + 1, n):
            f = m[r][c] / m[c][c]
            for k in range(c, n + 1):
                m[r][k] -= f * m[c][k]
    sol = [0.0] * n
    for c in range(n - 1, -1, -1):
        if abs(m[c][c]) < 1e-300:
            continue
        sol[c] = (m[c][n] - sum(m[c][k] * sol[k] for k in range(c + 1, n))) / m[c][c]
    return tuple(sol)


def scenario_dict_from_trace(
    path: str | Path,
    *,
    max_gamma: int | None = None,
    output_len: int = 256,
    prompt_len: int = 256,
    phases: int = 1,
    seed: int = 0,
) -> dict[str, Any]:
    """Build a scenario object (JSON-ready) that replays the trace's workload offline.

    The workload is closed-loop at the trace's median batch; the number of requests makes the
    total output match the tokens the trace committed. With ``phases > 1`` the trace is cut
    into that many equal time slices, each with its own acceptance fit (a phased scenario).
    """
    records = load_trace(path)
    top = max_gamma if max_gamma is not None else max(1, max(r.gamma for r in records))
    batches = [r.batch for r in records if r.batch > 0]
    if not batches:
        raise ScenarioError(f"{path}: trace has no steps with a positive batch")
    concurrency = max(1, round(statistics.median(batches)))
    committed = sum(r.committed for r in records)
    num_requests = min(200_000, max(concurrency * 2, math.ceil(committed / output_len)))
    try:
        acceptance: dict[str, Any]
        if phases <= 1:
            acceptance = fit_acceptance(records).model
        else:
            t0, t1 = records[0].t, records[-1].t
            span = (t1 - t0) / phases or 1.0
            slices: list[list[TraceRecord]] = [[] for _ in range(phases)]
            for r in records:
                slices[min(phases - 1, int((r.t - t0) / span))].append(r)
            phase_objs: list[dict[str, Any]] = []
            for i, part in enumerate(slices):
                if not part:
                    continue
                item: dict[str, Any] = {"model": fit_acceptance(part).model}
                if i < phases - 1:
                    item["tokens"] = max(1, round(sum(r.committed for r in part)))
                phase_objs.append(item)
            phase_objs[-1].pop("tokens", None)
            acceptance = {"type": "phased", "phases": phase_objs}
        cost = fit_cost(records, top)
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None
    stem = Path(path).stem
    return {
        "schema_version": 1,
        "name": f"replay-{stem}",
        "description": f"Fitted from trace {Path(path).name} ({len(records)} steps).",
        "tags": ["stationary" if phases <= 1 else "non-stationary", "replay"],
        "seed": seed,
        "min_gamma": 0,
        "max_gamma": top,
        "max_num_seqs": max(batches),
        "max_num_batched_tokens": max(8192, max(batches) * (top + 1)),
        "workload": {
            "num_requests": num_requests,
            "arrival": {"type": "closed", "concurrency": concurrency},
            "prompt_len": {"type": "fixed", "value": prompt_len},
            "output_len": {"type": "fixed", "value": output_len},
        },
        "acceptance": acceptance,
        "cost": cost,
    }


def scenario_from_trace(path: str | Path, **kwargs: Any) -> Scenario:
    """:func:`scenario_dict_from_trace`, validated into a :class:`Scenario`."""
    return parse_scenario(scenario_dict_from_trace(path, **kwargs), f"replay of {path}")
