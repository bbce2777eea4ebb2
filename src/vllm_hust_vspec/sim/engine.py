"""The discrete-step engine: continuous batching with speculative decoding, like vLLM V1.

Each loop iteration is one engine step:

1. schedule: decoding requests first (each needs 1 + its pending drafts tokens of the budget),
   then chunked prefill of admitted and newly admitted requests (up to ``max_num_seqs``);
2. ``controller.decide(batch_size, token_budget)`` picks gamma for the drafts made *after* this
   step (verified in the next one);
3. verify last step's drafts; a request commits accepted + 1 tokens, truncated at its output
   length; a request whose prefill completes commits its first token;
4. price the step with the cost model, advance time, call ``controller.observe`` with the
   feedback a host would send (``gamma`` = the gamma verified in this step).

The scenario's ``gamma0`` says what a gamma-0 step is: ``free`` (no drafter cost, an ideal
host), ``sync`` (the drafter still runs its first pass, as vLLM does at K=0) or ``sticky``
(vSpec's host, host/engine/hook.py: a settled zero pins the running cohort at 0 without asking the
controller until the cohort has finished, skips the drafter meanwhile, and the requests
scheduled in a skipped step never draft again). ``refill_batch`` holds admissions as the
host's cohort refill does, and ``path_warmup`` slows the first steps after the drafter is
switched off or on.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..adaptive.admission import RefillHold
from ..adaptive.feedback import Controller, StepFeedback, VerifyQuery
from ..adaptive.step_loop import StickyCohort
from .acceptance import StationaryModel, expected_accept_prefix
from .cost import CostModel
from .noise import NoiseSource
from .scenario import Scenario
from .workload import RequestSpec, make_requests

# The drafter's confidence in a draft, for policies that read it (vLLM's adaptive
# verification): the true conditional acceptance of the position, blurred in logit space by
# this standard deviation (a drafter's probability ranks its drafts well, never exactly).
CONFIDENCE_LOGIT_SD = 0.8


class _Req:
    """Mutable per-request state (slots: this is touched every step)."""

    __slots__ = (
        "rid", "prompt_len", "out_len", "arrival", "prefilled", "done", "pending", "u",
        "cond", "spre", "first_t", "finish_t", "decoding", "finished", "conf", "slo_class",
        "slo_tpot_ms",
    )

    def __init__(self, spec: RequestSpec, arrival: float) -> None:
        self.rid = spec.rid
        self.prompt_len = spec.prompt_len
        self.out_len = spec.output_len
        self.arrival = arrival
        self.prefilled = 0
        self.done = 0  # output tokens committed
        self.pending = 0  # drafts waiting to be verified in the next step
        self.u: list[float] = []
        self.cond: tuple[float, ...] = ()
        self.spre: tuple[float, ...] = (1.0,)
        self.first_t = 0.0
        self.finish_t = 0.0
        self.decoding = False
        self.finished = False
        self.conf: tuple[float, ...] = ()
        self.slo_class = spec.slo_class
        self.slo_tpot_ms = spec.slo_tpot_ms


def _never() -> bool:
    return False


@dataclass(slots=True)
class RunResult:
    """Outcome of one (scenario, policy, seed) run."""

    policy: str
    seed: int
    committed_tokens: int
    requested_tokens: int
    sim_seconds: float  # makespan, idle gaps included
    busy_seconds: float  # sum of step times
    steps: int
    mean_gamma: float  # mean gamma decided over steps that drafted
    drafted_tokens: int
    accepted_tokens: int
    mean_tpot_ms: float
    timeline: dict[str, list[float]] = field(default_factory=dict)
    trace: list[dict[str, float]] = field(default_factory=list)
    controller_state: dict[str, Any] = field(default_factory=dict)
    # (request id, arrival s, first token s, finish s), sorted by request id
    requests: list[tuple[int, float, float, float]] = field(default_factory=list)
    # per SLO class: requests with a TPOT (output > 1 token), and those whose mean TPOT over
    # their decode interval (first token to finish) met the class's SLO
    slo_total: dict[str, int] = field(default_factory=dict)
    slo_met: dict[str, int] = field(default_factory=dict)

    @property
    def slo_attainment(self) -> float:
        """Share of SLO-carrying requests whose mean TPOT met their SLO (nan: none)."""
        total = sum(self.slo_total.values())
        return sum(self.slo_met.values()) / total if total else math.nan

    @property
    def goodput(self) -> float:
        """Committed tokens per busy second (what the controller optimises)."""
        return self.committed_tokens / self.busy_seconds if self.busy_seconds > 0 else 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted over the run."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0


class SimulationAware(Protocol):
    """A controller that wants to look inside the simulation (the oracle)."""

    def bind_simulation(self, sim: Simulation) -> None: ...


class Simulation:
    """One run of ``scenario`` under ``controller`` with ``seed``."""

    def __init__(self, scenario: Scenario, controller: Controller, seed: int,
                 *, policy: str = "", record: bool = False, trace: bool = False,
                 cost: CostModel | None = None) -> None:
        self.scenario = scenario
        self.controller = controller
        self.seed = seed
        self.policy = policy
        self.record = record
        self.want_trace = trace
        # ``cost`` overrides the scenario's model (the calibration records step features)
        self.cost: CostModel = scenario.cost if cost is None else cost
        noisy = scenario.timing_noise.active
        self.noise = NoiseSource(scenario.timing_noise, seed) if noisy else None
        self.depth = max(scenario.max_gamma, 1)
        self.phase_idx = 0
        self.phase_counter = 0
        self.batch: list[_Req] = []  # requests scheduled in the current step
        self.live: dict[int, _Req] = {}  # admitted, unfinished requests by id
        self.batch_context = 0
        self.now = 0.0  # simulated time at the start of the current step (for policies)
        bind = getattr(controller, "bind_simulation", None)
        if callable(bind):
            bind(self)

    # -- acceptance -------------------------------------------------------------------------
    def _model(self) -> StationaryModel:
        return self.scenario.acceptance.phases[self.phase_idx].model

    def _draw_cond(self, r: _Req) -> None:
        rng = random.Random(f"vspec-accept/{self.seed}/{r.rid}/{self.phase_counter}")
        r.cond = self._model().draw(rng, self.depth)
        r.spre = expected_accept_prefix(r.cond)

    def _admit(self, r: _Req) -> None:
        rnd = random.Random(f"vspec-tokens/{self.seed}/{r.rid}").random
        r.u = [rnd() for _ in range(r.out_len + self.depth)]
        self._draw_cond(r)
        self.live[r.rid] = r

    @staticmethod
    def _confidence(r: _Req, depth: int, rng: random.Random) -> tuple[float, ...]:
        """The drafter's confidence in each of ``r``'s next ``depth`` drafts."""
        out = []
        for k in range(depth):
            c = min(max(r.cond[k], 1e-4), 1.0 - 1e-4)
            z = math.log(c / (1.0 - c)) + rng.gauss(0.0, CONFIDENCE_LOGIT_SD)
            out.append(1.0 / (1.0 + math.exp(-z)))
        return tuple(out)

    # -- oracle support -----------------------------------------------------------------------
    def expected_goodput(self, gamma: int) -> float:
        """Expected committed tokens / steady step time if the current batch ran ``gamma``.

        Uses each request's true conditional acceptance rates (known only to the simulator).
        """
        batch = self.batch
        if not batch:
            return 0.0
        tokens = 0.0
        for r in batch:
            rem = r.out_len - r.done
            k = gamma if gamma < rem else rem - 1
            tokens += r.spre[k if k > 0 else 0]
        return tokens / self.cost.steady_time(len(batch), gamma, self.batch_context)

    # -- main loop ----------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Simulate until every request has finished."""
        sc = self.scenario
        specs = make_requests(sc.workload, self.seed)
        arrival = sc.workload.arrival
        closed = arrival.kind == "closed"
        min_g, max_g = sc.min_gamma, sc.max_gamma
        max_seqs, max_tokens = sc.max_num_seqs, sc.max_num_batched_tokens
        phases = sc.acceptance.phases
        cycle = sc.acceptance.cycle
        cost = self.cost
        noise = self.noise
        controller = self.controller
        decide, observe = controller.decide, controller.observe
        # per-request verify lengths (adaptive.feedback.LengthPolicy), and drafter confidence
        lengths_fn = getattr(controller, "verify_lengths", None)
        want_conf = bool(getattr(controller, "wants_confidence", False))
        conf_rng = random.Random(f"vspec-confidence/{self.seed}")

        mode = sc.gamma0
        sticky = mode == "sticky"
        zero_pass = mode != "free"
        settled = getattr(controller, "settled", None)
        if not callable(settled):
            settled = _never
        cohort: StickyCohort[int] = StickyCohort()  # the host's sticky zero (adaptive/step_loop)
        skip = False
        holder = RefillHold(sc.refill_batch, sc.refill_hold, sc.refill_max_hold_steps)
        warmup = sc.path_warmup if sticky else ()
        drafter_was_on, since_switch = True, len(warmup)

        waiting: deque[_Req] = deque()
        running: list[_Req] = []
        next_spec = 0
        released = arrival.concurrency if closed else 0  # closed loop: specs allowed in
        t = busy = 0.0
        g_prev = 0
        steps = drafted_total = accepted_total = committed_total = 0
        gamma_sum = gamma_steps = 0
        phase_tokens = 0
        phase_start = 0.0
        finished: list[_Req] = []
        tl_t: list[float] = []
        tl_g: list[float] = []
        tl_b: list[float] = []
        tl_c: list[float] = []
        tl_dt: list[float] = []
        trace: list[dict[str, float]] = []
        n_specs = len(specs)

        while True:
            if closed:
                while next_spec < n_specs and next_spec < released:
                    waiting.append(_Req(specs[next_spec], t))
                    next_spec += 1
            else:
                while next_spec < n_specs and specs[next_spec].arrival_s <= t:
                    s = specs[next_spec]
                    waiting.append(_Req(s, s.arrival_s))
                    next_spec += 1
            if not running and not waiting:
                if next_spec >= n_specs:
                    break
                t = max(t, specs[next_spec].arrival_s)  # idle until the next arrival
                continue

            self.now = t
            # 1. schedule (a length policy first trims each request's drafts to a prefix)
            trimmed = False
            if lengths_fn is not None:
                dec = [r for r in running if r.decoding and r.pending > 0]
                if dec:
                    query = VerifyQuery(
                        tuple(r.rid for r in dec), tuple(r.pending for r in dec), max_tokens,
                        tuple(r.conf for r in dec) if want_conf else None)
                    for r, n in zip(dec, lengths_fn(query), strict=True):
                        n = max(0, min(r.pending, int(n)))
                        trimmed |= n < r.pending
                        r.pending = n
            budget = max_tokens
            decode: list[_Req] = []
            prefill: list[tuple[_Req, int]] = []
            verify = ctx = 0
            for r in running:
                if r.decoding:
                    d = r.pending
                    need = 1 + d
                    if need > budget:
                        if budget <= 0:
                            continue  # not scheduled this step; keeps its drafts
                        d = budget - 1  # the scheduler trims spec tokens to the budget
                        r.pending = d
                        need = budget
                    budget -= need
                    decode.append(r)
                    verify += d
                    ctx += r.prompt_len + r.done
                elif budget > 0:
                    chunk = min(r.prompt_len - r.prefilled, budget)
                    budget -= chunk
                    prefill.append((r, chunk))
                    ctx += r.prefilled + chunk
            hold = holder.decide(
                occupied=len(running), free=max_seqs - len(running), waiting=len(waiting),
                speculating=cohort.speculating(r.rid for r in running), gamma=g_prev)
            admitted_now = 0
            while not hold and waiting and len(running) < max_seqs and budget > 0:
                admitted_now += 1
                r = waiting.popleft()
                self._admit(r)
                running.append(r)
                chunk = min(r.prompt_len, budget)
                budget -= chunk
                prefill.append((r, chunk))
                ctx += chunk

            # 2. decide (for drafts made after this step)
            self.batch = decode + [p[0] for p in prefill]
            self.batch_context = ctx
            if sticky and cohort.pinned():
                g = 0  # the host does not ask the controller while a cohort is pinned
            else:
                g = int(decide(len(self.batch), max_tokens))
                g = min_g if g < min_g else (max_g if g > max_g else g)
            skip = False
            if sticky:
                g, skip = cohort.resolve(g, [r.rid for r in self.batch], settled)
            tainted = cohort.tainted

            # 3. verify
            committed = 0
            accs: list[int] = []
            ds: list[int] = []
            done_now = False
            for r in decode:
                d = r.pending
                ds.append(d)
                n0 = r.done
                u = r.u
                c = r.cond
                a = 0
                while a < d and u[n0 + a] < c[a]:
                    a += 1
                rem = r.out_len - n0
                k = a + 1 if a < rem else rem
                r.done = n0 + k
                committed += k
                accs.append(a)
                if r.done >= r.out_len:
                    r.finished = True
                    done_now = True
            pre_tokens = 0
            num_drafting = 0
            for r, chunk in prefill:
                r.prefilled += chunk
                pre_tokens += chunk
                if r.prefilled >= r.prompt_len:
                    r.decoding = True
                    r.done = 1  # the prefill step samples the first output token
                    committed += 1
                    r.first_t = -1.0  # stamped below, once the step time is known
                    if r.out_len <= 1:
                        r.finished = True
                        done_now = True
            for r in self.batch:
                if r.decoding and not r.finished:
                    if skip or r.rid in tainted:
                        r.pending = 0
                    else:
                        r.pending = g
                        num_drafting += 1
                        if want_conf:
                            r.conf = self._confidence(r, g, conf_rng)

            # 4. time and feedback
            dt = cost.step_time(len(decode), verify, g, num_drafting, pre_tokens, ctx,
                                zero_pass=zero_pass)
            if warmup:
                on = not skip
                since_switch = since_switch + 1 if on == drafter_was_on else 0
                drafter_was_on = on
                if since_switch < len(warmup):
                    dt *= warmup[since_switch]
            if noise is not None:
                dt *= noise.factor(t)
            t += dt
            busy += dt
            steps += 1
            committed_total += committed
            if num_drafting:
                gamma_sum += g
                gamma_steps += 1
            for r, _ in prefill:
                if r.first_t < 0.0:
                    r.first_t = t
            if done_now:
                keep: list[_Req] = []
                for r in running:
                    if r.finished:
                        r.finish_t = t
                        finished.append(r)
                        self.live.pop(r.rid, None)
                        released += 1
                        cohort.forget((r.rid,))
                    else:
                        keep.append(r)
                running = keep
            if decode:
                holder.observe(len(decode), g_prev, dt, pre_tokens)
                sum_d = verify
                sum_a = sum(accs)
                drafted_total += sum_d
                accepted_total += sum_a
                fb = StepFeedback(
                    batch_size=len(decode),
                    gamma=g_prev,
                    drafted=tuple(ds),
                    accepted=tuple(accs),
                    committed=committed,
                    interval_s=dt,
                    token_budget=max_tokens,
                    steady=pre_tokens == 0,
                    drafter_ran=not skip,
                    next_gamma=g,
                    request_ids=tuple(r.rid for r in decode),
                    lengths_trimmed=trimmed,
                )
                observe(fb)
                if self.want_trace:
                    trace.append({
                        "t": t, "batch": float(len(decode)), "gamma": float(g_prev),
                        "drafted": float(sum_d), "accepted": float(sum_a),
                        "interval_s": dt, "reward": committed / dt,
                        "committed": committed, "steady": pre_tokens == 0,
                        "decided": g, "admitted": admitted_now,
                    })
            g_prev = g
            if self.record:
                tl_t.append(t)
                tl_g.append(float(g))
                tl_b.append(float(len(self.batch)))
                tl_c.append(float(committed))
                tl_dt.append(dt)

            # phase change (non-stationary acceptance)
            if len(phases) > 1:
                ph = phases[self.phase_idx]
                phase_tokens += committed
                if (ph.tokens is not None and phase_tokens >= ph.tokens) or (
                    ph.seconds is not None and t - phase_start >= ph.seconds
                ):
                    # only the open-ended last phase never ends, so nxt is valid
                    nxt = self.phase_idx + 1
                    self.phase_idx = 0 if (cycle and nxt >= len(phases)) else nxt
                    self.phase_counter += 1
                    phase_tokens = 0
                    phase_start = t
                    for r in running:
                        self._draw_cond(r)

        tpots = [
            (r.finish_t - r.first_t) / (r.out_len - 1) for r in finished if r.out_len > 1
        ]
        slo_total: dict[str, int] = {}
        slo_met: dict[str, int] = {}
        for r in finished:
            if r.slo_class is None or r.slo_tpot_ms is None or r.out_len <= 1:
                continue
            slo_total[r.slo_class] = slo_total.get(r.slo_class, 0) + 1
            tpot_ms = 1e3 * (r.finish_t - r.first_t) / (r.out_len - 1)
            if tpot_ms <= r.slo_tpot_ms:
                slo_met[r.slo_class] = slo_met.get(r.slo_class, 0) + 1
        timeline: dict[str, list[float]] = {}
        if self.record:
            timeline = {"t": tl_t, "gamma": tl_g, "batch": tl_b, "committed": tl_c, "dt": tl_dt}
        snap = controller.snapshot()
        return RunResult(
            policy=self.policy,
            seed=self.seed,
            committed_tokens=committed_total,
            requested_tokens=sum(s.output_len for s in specs),
            sim_seconds=t,
            busy_seconds=busy,
            steps=steps,
            mean_gamma=gamma_sum / gamma_steps if gamma_steps else 0.0,
            drafted_tokens=drafted_total,
            accepted_tokens=accepted_total,
            mean_tpot_ms=1e3 * sum(tpots) / len(tpots) if tpots else 0.0,
            timeline=timeline,
            trace=trace,
            controller_state=snap if isinstance(snap, dict) else {},
            requests=sorted((r.rid, r.arrival, r.first_t, r.finish_t) for r in finished),
            slo_total=slo_total,
            slo_met={c: slo_met.get(c, 0) for c in slo_total},
        )


def simulate(scenario: Scenario, controller: Controller, seed: int, *, policy: str = "",
             record: bool = False, trace: bool = False,
             cost: CostModel | None = None) -> RunResult:
    """Run ``scenario`` once under ``controller`` (see :class:`Simulation`); ``cost``
    replaces the scenario's cost model."""
    return Simulation(scenario, controller, seed, policy=policy, record=record,
                      trace=trace, cost=cost).run()
