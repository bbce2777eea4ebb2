"""Replay a trace recorded by the plugin: fit acceptance and cost, build a scenario.

Trace format: JSON Lines. Each run of the plugin (each server start) opens with a header line,
a JSON object with a ``run`` key and no ``step`` key::

    {"run": "3f9c0a12b4de", "started": 1764580000.5, "pid": 4242, "vspec": "0.3.0",
     "settings": "9f8e7d6c"}

followed by one object per controller step (extra keys are ignored)::

    {"t": 12.5, "step": 1, "batch": 48, "gamma": 3, "drafted": 144, "accepted": 97,
     "interval_s": 0.0123, "reward": 11463.4}

``gamma`` is the gamma verified in that step, ``drafted``/``accepted`` are totals over the
batch, ``reward`` is committed tokens / interval_s, ``step`` counts the run's steps from 1. An
optional boolean ``steady`` (false when prefill shared the step) keeps those steps out of the
cost fit.

The plugin appends, so one file may hold several runs. :func:`read_trace_runs` splits it: at
every header line, and where the step counter does not increase (a restart that wrote no
header); steps before the first header form an unnamed run (traces from before headers
existed). Runs are never merged: :func:`select_trace_run` picks one. A cut-off last line
(invalid JSON on the final non-empty line, what a crash leaves) is skipped with a warning;
invalid JSON anywhere else is an error.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..adaptive._files import read_utf8_text
from ..adaptive.trace_record import TraceRecord as TraceRecord
from ._strict import ScenarioError, StrictObject
from .scenario import Scenario, parse_scenario

_MIN_RECORDS_PER_GAMMA = 20  # positional acceptance needs this many steps at each gamma

Warn = Callable[[str], None]
RunSelector = str | int


@dataclass(frozen=True, slots=True)
class TraceRun:
    """One run of a trace file: a header's steps, or an unnamed stretch without a header."""

    index: int  # 1-based position in the file
    first_line: int  # the header's line, or the first step's
    run_id: str | None = None  # None: no header (older trace, or a restart without one)
    started: float | None = None
    pid: int | None = None
    vspec: str | None = None
    settings: str | None = None
    host: dict[str, Any] | None = None  # the engine facts of the header (host/engine/trace.py)
    records: list[TraceRecord] = field(default_factory=list)

    def describe(self) -> str:
        """One line: which run, when it started, how many steps, where in the file."""
        parts = [f"id {self.run_id}" if self.run_id else "no header"]
        if self.started is not None:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
            parts.append(f"started {stamp}")
        if self.pid is not None:
            parts.append(f"pid {self.pid}")
        if self.vspec:
            parts.append(f"vspec {self.vspec}")
        parts.append(f"{len(self.records)} steps from line {self.first_line}")
        return f"run {self.index} ({', '.join(parts)})"

    def short(self) -> str:
        """``index (id, steps)`` for lists of runs in error messages."""
        name = f"id {self.run_id}" if self.run_id else "no header"
        return f"{self.index} ({name}, {len(self.records)} steps)"


def _warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _header(obj: StrictObject, index: int, lineno: int) -> TraceRun:
    run_id = obj.string("run")
    if not run_id:
        raise obj.error("run", "expected a non-empty run id")
    started = obj.number("started") if obj.has("started") else None
    pid = obj.integer("pid") if obj.has("pid") else None
    vspec = obj.string("vspec") if obj.has("vspec") else None
    settings = obj.string("settings") if obj.has("settings") else None
    host = obj.raw("host") if obj.has("host") else None
    if host is not None and not isinstance(host, dict):
        raise obj.error("host", "expected an object of engine facts")
    return TraceRun(index=index, first_line=lineno, run_id=run_id, started=started, pid=pid,
                    vspec=vspec, settings=settings, host=host)


def _optional_int(obj: StrictObject, key: str) -> int | None:
    return obj.integer(key, lo=0) if obj.has(key) and obj.raw(key) is not None else None


def _record(obj: StrictObject) -> TraceRecord:
    rec = TraceRecord(
        t=obj.number("t"),
        batch=int(obj.number("batch", lo=0.0)),
        gamma=int(obj.number("gamma", lo=0.0)),
        drafted=int(obj.number("drafted", lo=0.0)),
        accepted=int(obj.number("accepted", lo=0.0)),
        interval_s=obj.number("interval_s", lo=0.0),
        reward=obj.number("reward", lo=0.0),
        steady=obj.boolean("steady", True),
        step=_optional_int(obj, "step"),
        decided=_optional_int(obj, "decided"),
        committed=_optional_int(obj, "committed"),
        tokens=_optional_int(obj, "tokens"),
        admitted=_optional_int(obj, "admitted") or 0,
        waiting=_optional_int(obj, "waiting") or 0,
        held=obj.boolean("held", False),
        skip=obj.boolean("skip", False),
        fallback=obj.boolean("fallback", False),
    )
    if rec.accepted > rec.drafted:
        raise obj.error("accepted", f"{rec.accepted} exceeds drafted ({rec.drafted})")
    return rec  # unknown keys are allowed: recorders may add fields


def _is_header(line: str) -> bool:
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return False
    return isinstance(data, dict) and "run" in data and "step" not in data


def read_trace_runs(path: str | Path, *, warn: Warn | None = None) -> list[TraceRun]:
    """Read and validate a JSONL trace, split into runs; errors name the file, line and key.

    ``warn`` receives the message about a skipped cut-off last line (default: stderr).
    """
    p = Path(path)
    lines = read_utf8_text(p, "trace", ScenarioError).splitlines()
    filled = [i for i, line in enumerate(lines, 1) if line.strip()]
    # A line a crash cut off is the last of its run: the file's last, or one a restart's header
    # follows (the writer starts that header on a fresh line).
    ends = {i for i, nxt in zip(filled, filled[1:], strict=False) if _is_header(lines[nxt - 1])}
    ends.update(filled[-1:])
    runs: list[TraceRun] = []
    current: TraceRun | None = None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p}:{lineno}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if lineno in ends and runs:
                (warn or _warn_stderr)(f"{where}: skipping the cut-off last line of a run (not"
                                       f" valid JSON: {exc.msg}); the writer probably stopped "
                                       "mid-write")
                continue
            raise ScenarioError(f"{where}: not valid JSON ({exc.msg})") from None
        obj = StrictObject(data, "", where)
        if isinstance(data, dict) and "run" in data and "step" not in data:
            current = _header(obj, len(runs) + 1, lineno)
            runs.append(current)
            continue
        rec = _record(obj)
        prev = current.records[-1].step if current and current.records else None
        # A counter that does not increase is a restart that wrote no header.
        if current is None or (rec.step is not None and prev is not None and rec.step <= prev):
            current = TraceRun(index=len(runs) + 1, first_line=lineno)
            runs.append(current)
        current.records.append(rec)
    if not any(r.records for r in runs):
        raise ScenarioError(f"{p}: trace is empty (no steps)" if runs else f"{p}: trace is empty")
    return runs


def select_trace_run(runs: list[TraceRun], selector: RunSelector = "last", *,
                     source: str = "trace") -> TraceRun:
    """The run named by ``selector``: ``"last"`` (the last run with steps), a 1-based index,
    a run id or a unique prefix of one. Raises ScenarioError listing what the file holds."""
    def fail(message: str) -> ScenarioError:
        return ScenarioError(f"{source}: {message}; the trace holds {len(runs)} run"
                             f"{'s' if len(runs) != 1 else ''}: "
                             + ", ".join(r.short() for r in runs))

    text = str(selector).strip()
    chosen: TraceRun | None = None
    if text.lower() == "last":
        chosen = next((r for r in reversed(runs) if r.records), None)
        if chosen is None:
            raise fail("no run has steps")
        return chosen
    exact = [r for r in runs if r.run_id == text]
    if exact:
        chosen = exact[-1]
    elif text.isdigit() and 1 <= int(text) <= len(runs):
        chosen = runs[int(text) - 1]
    else:
        prefixed = [r for r in runs if r.run_id and text and r.run_id.startswith(text)]
        if len(prefixed) > 1:
            raise fail(f"run id prefix {text!r} is ambiguous")
        if not prefixed:
            raise fail(f"no run {text!r} (give last, an index 1..{len(runs)} or a run id)")
        chosen = prefixed[0]
    if not chosen.records:
        raise fail(f"run {chosen.index} has no steps")
    return chosen


def load_trace(path: str | Path, run: RunSelector | None = None, *,
               warn: Warn | None = None) -> list[TraceRecord]:
    """The steps of one run of a JSONL trace (see :func:`select_trace_run` for ``run``).

    ``run=None`` requires the file to hold a single run with steps: a trace appended over
    several server starts raises ScenarioError rather than merging them.
    """
    return pick_run(read_trace_runs(path, warn=warn), run, path).records


def pick_run(runs: list[TraceRun], run: RunSelector | None, path: str | Path) -> TraceRun:
    """The run ``run`` selects (:func:`select_trace_run`); None: the only run with steps."""
    if run is not None:
        return select_trace_run(runs, run, source=str(path))
    with_steps = [r for r in runs if r.records]  # read_trace_runs returns at least one
    if len(with_steps) > 1:
        raise ScenarioError(
            f"{path}: the trace holds {len(runs)} runs (appended over server restarts); pick "
            "one with run='last', a 1-based index or a run id (vllm-hust-vspec-sim "
            "--trace-run)")
    return with_steps[0]


def write_trace(path: str | Path, records: list[dict[str, float]]) -> None:
    """Write trace records (as produced by ``simulate(..., trace=True)``) as JSON Lines."""
    with Path(path).open("w", encoding="utf-8") as fh:
        for rec in records:
            row: dict[str, Any] = dict(rec)
            for key in ("batch", "gamma", "drafted", "accepted"):
                row[key] = int(row[key])
            if "committed" in row:
                row["committed"] = int(row["committed"])
            if "steady" in row:
                row["steady"] = bool(row["steady"])
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
    run: RunSelector | None = None,
    max_gamma: int | None = None,
    output_len: int = 256,
    prompt_len: int = 256,
    phases: int = 1,
    seed: int = 0,
    warn: Warn | None = None,
) -> dict[str, Any]:
    """Build a scenario object (JSON-ready) that replays one run of the trace offline.

    ``run`` as in :func:`load_trace` (None: the file must hold one run). See
    :func:`scenario_dict_from_run` for what is fitted.
    """
    chosen = pick_run(read_trace_runs(path, warn=warn), run, path)
    return scenario_dict_from_run(chosen, path, max_gamma=max_gamma, output_len=output_len,
                                  prompt_len=prompt_len, phases=phases, seed=seed)


def scenario_dict_from_run(
    trace_run: TraceRun,
    path: str | Path,
    *,
    max_gamma: int | None = None,
    output_len: int = 256,
    prompt_len: int = 256,
    phases: int = 1,
    seed: int = 0,
) -> dict[str, Any]:
    """Build a scenario object (JSON-ready) from one run of the trace at ``path``.

    The workload is closed-loop at the run's median batch; the number of requests makes the
    total output match the tokens the run committed. With ``phases > 1`` the run is cut into
    that many equal time slices, each with its own acceptance fit (a phased scenario).
    """
    records = trace_run.records
    top = max_gamma if max_gamma is not None else max(1, max(r.gamma for r in records))
    batches = [r.batch for r in records if r.batch > 0]
    if not batches:
        raise ScenarioError(f"{path}: trace has no steps with a positive batch")
    concurrency = max(1, round(statistics.median(batches)))
    committed = sum(r.committed_tokens() for r in records)
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
                    item["tokens"] = max(1, round(sum(r.committed_tokens() for r in part)))
                phase_objs.append(item)
            phase_objs[-1].pop("tokens", None)
            acceptance = {"type": "phased", "phases": phase_objs}
        cost = fit_cost(records, top)
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None
    stem = Path(path).stem
    which = "" if trace_run.run_id is None and trace_run.index == 1 else (
        f", run {trace_run.index}" + (f" (id {trace_run.run_id})" if trace_run.run_id else ""))
    return {
        "schema_version": 1,
        "name": f"replay-{stem}",
        "description": f"Fitted from trace {Path(path).name}{which} ({len(records)} steps).",
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
