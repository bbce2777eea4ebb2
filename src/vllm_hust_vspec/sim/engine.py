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
from collections.abc import Callable
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


def _holder(sc: Scenario, controller: object) -> RefillHold:
    """The scenario's refill hold, reading the controller's step-cost model when it has one."""
    holder = RefillHold(sc.refill_batch, sc.refill_hold, sc.refill_max_hold_steps,
                        max_gamma=sc.max_gamma)
    holder.share(controller)
    return holder


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


@dataclass(slots=True)
class _Run:
    """The loop state of one :meth:`Simulation.run`."""

    specs: list[RequestSpec]
    closed: bool
    released: int  # closed loop: specs allowed in
    lengths_fn: Any  # the controller's ``verify_lengths``, if it has one
    want_conf: bool
    conf_rng: random.Random
    sticky: bool
    zero_pass: bool
    settled: Callable[[], bool]
    holder: RefillHold
    warmup: tuple[float, ...]
    since_switch: int
    timeline: dict[str, list[float]]
    cohort: StickyCohort[int] = field(default_factory=StickyCohort)  # the host's sticky zero
    drafter_was_on: bool = True
    waiting: deque[_Req] = field(default_factory=deque)
    running: list[_Req] = field(default_factory=list)
    finished: list[_Req] = field(default_factory=list)
    next_spec: int = 0
    t: float = 0.0
    busy: float = 0.0
    g_prev: int = 0
    steps: int = 0
    drafted_total: int = 0
    accepted_total: int = 0
    committed_total: int = 0
    gamma_sum: int = 0
    gamma_steps: int = 0
    phase_tokens: int = 0
    phase_start: float = 0.0
    trace: list[dict[str, float]] = field(default_factory=list)


@dataclass(slots=True)
class _Step:
    """What one engine step scheduled, decided, verified and took."""

    decode: list[_Req]
    prefill: list[tuple[_Req, int]]
    verify: int  # drafts verified
    ctx: int  # context tokens of the scheduled requests
    admitted: int
    trimmed: bool  # a length policy cut drafts
    gamma: int = 0
    skip: bool = False  # the sticky host skips the drafter after this step
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    committed: int = 0
    done_now: bool = False  # a request finished
    pre_tokens: int = 0
    num_drafting: int = 0
    dt: float = 0.0


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
        st = self._start()
        n_specs = len(st.specs)
        while True:
            self._enqueue_arrivals(st)
            if not st.running and not st.waiting:
                if st.next_spec >= n_specs:
                    break
                st.t = max(st.t, st.specs[st.next_spec].arrival_s)  # idle until next arrival
                continue
            self.now = st.t
            step = self._schedule(st)  # 1. (a length policy first trims drafts to a prefix)
            self._decide(st, step)  # 2. for drafts made after this step
            self._verify(st, step)  # 3.
            self._advance(st, step)  # 4. time, then feedback
            self._feed_back(st, step)
            self._next_phase(st, step.committed)  # non-stationary acceptance
        return self._result(st)

    def _start(self) -> _Run:
        """The loop state of a fresh run: the workload's requests and the host's policies."""
        sc = self.scenario
        controller = self.controller
        sticky = sc.gamma0 == "sticky"
        settled = getattr(controller, "settled", None)
        warmup = sc.path_warmup if sticky else ()
        closed = sc.workload.arrival.kind == "closed"
        return _Run(
            specs=make_requests(sc.workload, self.seed),
            closed=closed,
            released=sc.workload.arrival.concurrency if closed else 0,
            # per-request verify lengths (adaptive.feedback.LengthPolicy), drafter confidence
            lengths_fn=getattr(controller, "verify_lengths", None),
            want_conf=bool(getattr(controller, "wants_confidence", False)),
            conf_rng=random.Random(f"vspec-confidence/{self.seed}"),
            sticky=sticky,
            zero_pass=sc.gamma0 != "free",
            settled=settled if callable(settled) else _never,
            holder=_holder(sc, controller),
            warmup=warmup,
            since_switch=len(warmup),
            timeline={"t": [], "gamma": [], "batch": [], "committed": [], "dt": []}
            if self.record else {},
        )

    @staticmethod
    def _enqueue_arrivals(st: _Run) -> None:
        """Queue the requests that have arrived (closed loop: that were released) by now."""
        specs, n_specs = st.specs, len(st.specs)
        if st.closed:
            while st.next_spec < n_specs and st.next_spec < st.released:
                st.waiting.append(_Req(specs[st.next_spec], st.t))
                st.next_spec += 1
        else:
            while st.next_spec < n_specs and specs[st.next_spec].arrival_s <= st.t:
                s = specs[st.next_spec]
                st.waiting.append(_Req(s, s.arrival_s))
                st.next_spec += 1

    def _trim_drafts(self, st: _Run) -> bool:
        """Let a length policy cut each decoding request's drafts to a prefix; True if any
        was cut."""
        trimmed = False
        dec = [r for r in st.running if r.decoding and r.pending > 0]
        if dec:
            query = VerifyQuery(
                tuple(r.rid for r in dec), tuple(r.pending for r in dec),
                self.scenario.max_num_batched_tokens,
                tuple(r.conf for r in dec) if st.want_conf else None)
            for r, n in zip(dec, st.lengths_fn(query), strict=True):
                n = max(0, min(r.pending, int(n)))
                trimmed |= n < r.pending
                r.pending = n
        return trimmed

    def _schedule(self, st: _Run) -> _Step:
        """Step 1: decoding requests first, then chunked prefill, then admissions (unless the
        refill holds them), all within the token budget."""
        trimmed = self._trim_drafts(st) if st.lengths_fn is not None else False
        sc = self.scenario
        running = st.running
        budget = sc.max_num_batched_tokens
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
        max_seqs = sc.max_num_seqs
        waiting = st.waiting
        hold = st.holder.decide(
            occupied=len(running), free=max_seqs - len(running), waiting=len(waiting),
            speculating=st.cohort.speculating(r.rid for r in running), gamma=st.g_prev)
        admitted = 0
        while not hold and waiting and len(running) < max_seqs and budget > 0:
            admitted += 1
            r = waiting.popleft()
            self._admit(r)
            running.append(r)
            chunk = min(r.prompt_len, budget)
            budget -= chunk
            prefill.append((r, chunk))
            ctx += chunk
        return _Step(decode=decode, prefill=prefill, verify=verify, ctx=ctx, admitted=admitted,
                     trimmed=trimmed)

    def _decide(self, st: _Run, step: _Step) -> None:
        """Step 2: the gamma of the drafts made after this step, and whether the sticky host
        skips the drafter."""
        sc = self.scenario
        self.batch = step.decode + [p[0] for p in step.prefill]
        self.batch_context = step.ctx
        if st.sticky and st.cohort.pinned():
            g = 0  # the host does not ask the controller while a cohort is pinned
        else:
            g = int(self.controller.decide(len(self.batch), sc.max_num_batched_tokens))
            g = sc.min_gamma if g < sc.min_gamma else (sc.max_gamma if g > sc.max_gamma else g)
        skip = False
        if st.sticky:
            g, skip = st.cohort.resolve(g, [r.rid for r in self.batch], st.settled)
        step.gamma = g
        step.skip = skip

    def _verify(self, st: _Run, step: _Step) -> None:
        """Step 3: verify last step's drafts, complete prefills, hand out the next drafts."""
        committed = 0
        for r in step.decode:
            d = r.pending
            step.drafted.append(d)
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
            step.accepted.append(a)
            if r.done >= r.out_len:
                r.finished = True
                step.done_now = True
        pre_tokens = 0
        for r, chunk in step.prefill:
            r.prefilled += chunk
            pre_tokens += chunk
            if r.prefilled >= r.prompt_len:
                r.decoding = True
                r.done = 1  # the prefill step samples the first output token
                committed += 1
                r.first_t = -1.0  # stamped once the step time is known
                if r.out_len <= 1:
                    r.finished = True
                    step.done_now = True
        g, skip, tainted = step.gamma, step.skip, st.cohort.tainted
        num_drafting = 0
        for r in self.batch:
            if r.decoding and not r.finished:
                if skip or r.rid in tainted:
                    r.pending = 0
                else:
                    r.pending = g
                    num_drafting += 1
                    if st.want_conf:
                        r.conf = self._confidence(r, g, st.conf_rng)
        step.committed = committed
        step.pre_tokens = pre_tokens
        step.num_drafting = num_drafting

    def _advance(self, st: _Run, step: _Step) -> None:
        """Step 4: price the step, advance time and retire the finished requests."""
        dt = self.cost.step_time(len(step.decode), step.verify, step.gamma, step.num_drafting,
                                 step.pre_tokens, step.ctx, zero_pass=st.zero_pass)
        warmup = st.warmup
        if warmup:
            on = not step.skip
            st.since_switch = st.since_switch + 1 if on == st.drafter_was_on else 0
            st.drafter_was_on = on
            if st.since_switch < len(warmup):
                dt *= warmup[st.since_switch]
        if self.noise is not None:
            dt *= self.noise.factor(st.t)
        step.dt = dt
        st.t += dt
        t = st.t
        st.busy += dt
        st.steps += 1
        st.committed_total += step.committed
        if step.num_drafting:
            st.gamma_sum += step.gamma
            st.gamma_steps += 1
        for r, _ in step.prefill:
            if r.first_t < 0.0:
                r.first_t = t
        if step.done_now:
            keep: list[_Req] = []
            for r in st.running:
                if r.finished:
                    r.finish_t = t
                    st.finished.append(r)
                    self.live.pop(r.rid, None)
                    st.released += 1
                    st.cohort.forget((r.rid,))
                else:
                    keep.append(r)
            st.running = keep

    def _feed_back(self, st: _Run, step: _Step) -> None:
        """Step 4: the feedback a host would send (``gamma`` = the gamma verified in this
        step), the trace row and the timeline point."""
        g, dt, decode = step.gamma, step.dt, step.decode
        if decode:
            sum_d = step.verify
            sum_a = sum(step.accepted)
            st.drafted_total += sum_d
            st.accepted_total += sum_a
            fb = StepFeedback(
                batch_size=len(decode),
                gamma=st.g_prev,
                drafted=tuple(step.drafted),
                accepted=tuple(step.accepted),
                committed=step.committed,
                interval_s=dt,
                token_budget=self.scenario.max_num_batched_tokens,
                steady=step.pre_tokens == 0,
                drafter_ran=not step.skip,
                next_gamma=g,
                request_ids=tuple(r.rid for r in decode),
                lengths_trimmed=step.trimmed,
                prefill_tokens=step.pre_tokens,
            )
            st.holder.observe(fb)
            self.controller.observe(fb)
            if self.want_trace:
                st.trace.append({
                    "t": st.t, "batch": float(len(decode)), "gamma": float(st.g_prev),
                    "drafted": float(sum_d), "accepted": float(sum_a),
                    "interval_s": dt, "reward": step.committed / dt,
                    "committed": step.committed, "steady": step.pre_tokens == 0,
                    "decided": g, "admitted": step.admitted,
                })
        st.g_prev = g
        if self.record:
            tl = st.timeline
            tl["t"].append(st.t)
            tl["gamma"].append(float(g))
            tl["batch"].append(float(len(self.batch)))
            tl["committed"].append(float(step.committed))
            tl["dt"].append(dt)

    def _next_phase(self, st: _Run, committed: int) -> None:
        """Move to the next acceptance phase once the current one has run its tokens or
        seconds, redrawing every running request's rates."""
        acceptance = self.scenario.acceptance
        phases = acceptance.phases
        if len(phases) <= 1:
            return
        ph = phases[self.phase_idx]
        st.phase_tokens += committed
        if (ph.tokens is not None and st.phase_tokens >= ph.tokens) or (
            ph.seconds is not None and st.t - st.phase_start >= ph.seconds
        ):
            # only the open-ended last phase never ends, so nxt is valid
            nxt = self.phase_idx + 1
            self.phase_idx = 0 if (acceptance.cycle and nxt >= len(phases)) else nxt
            self.phase_counter += 1
            st.phase_tokens = 0
            st.phase_start = st.t
            for r in st.running:
                self._draw_cond(r)

    def _result(self, st: _Run) -> RunResult:
        """The run's totals, per-request times and SLO attainment."""
        finished = st.finished
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
        snap = self.controller.snapshot()
        return RunResult(
            policy=self.policy,
            seed=self.seed,
            committed_tokens=st.committed_total,
            requested_tokens=sum(s.output_len for s in st.specs),
            sim_seconds=st.t,
            busy_seconds=st.busy,
            steps=st.steps,
            mean_gamma=st.gamma_sum / st.gamma_steps if st.gamma_steps else 0.0,
            drafted_tokens=st.drafted_total,
            accepted_tokens=st.accepted_total,
            mean_tpot_ms=1e3 * sum(tpots) / len(tpots) if tpots else 0.0,
            timeline=st.timeline,
            trace=st.trace,
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
