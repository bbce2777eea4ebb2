"""Step costs timed at engine start-up: a cold controller's cost prior.

Right after vLLM has profiled memory, allocated the KV cache and warmed the model up
(``EngineCore._initialize_kv_caches``), and before the scheduler exists, every worker runs the
runner's own dummy batches once more, timed: ``GPUModelRunner._dummy_run(T)`` (the target
over ``T`` tokens, then the drafter's ``dummy_run(T)``) and the drafter's ``dummy_run(T)``
alone, for ``T = B * (1 + gamma)`` at every power-of-two batch ``B`` up to ``max_num_seqs``
and every gamma up to the maximum. Upstream's adaptive mechanisms (Model Runner V2's adaptive
verification in vLLM 0.33, its DFlash adaptive K after it) profile step costs at start-up the
same way instead of exploring.

From those times a step is modelled as the target over its verified tokens plus the drafter's
passes: the first over the verified tokens, each further one over ``B`` tokens (one pass in
all for parallel drafting). A dummy batch has no scheduling, sampling or output processing,
so the prior is marked ``needs_anchor``: the controller re-anchors its level on the first
real steps. Ranks run the same dummy batches in step (tensor parallel
stays in lockstep); a step waits for its slowest rank, so the slowest rank's time is kept.

Only on the V1 runner: Model Runner V2 and vLLM-Ascend's NPU runner have other dummy-run
paths, and there the runner table (host/abi/runners.py) turns the profile off with a warning.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.adaptive._limits import bucket_batches
from vllm_hust_vspec.adaptive.cost_prior import CostPrior, CostSample

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")

SOURCE = "start-up profile"
REPEATS = 3  # timed runs per shape (after one untimed), median kept
BUDGET_S = 20.0  # no larger batch is profiled once this much time has gone
# Methods whose drafter has a dummy_run (ngram drafts on the host: nothing to time).
PROFILED_METHODS = frozenset({"draft_model", "eagle", "eagle3", "mtp"})

# vllm_config id -> the prior measured for the engine being built (taken by the scheduler)
_PENDING: dict[int, CostPrior] = {}


def profile_batches(max_num_seqs: int) -> list[int]:
    """The batch sizes profiled: every power of two up to ``max_num_seqs`` (the controllers'
    bucket edges)."""
    return bucket_batches(max_num_seqs)


@dataclass
class WorkerTimes:
    """One worker's dummy-run medians, by token count (what ``collective_rpc`` returns)."""

    step: dict[int, float] = field(default_factory=dict)  # target over T + the passes over T
    draft: dict[int, float] = field(default_factory=dict)  # the drafter's passes alone
    passes: int = 1  # drafter passes per proposer dummy_run
    parallel: bool = False  # parallel drafting: one pass per step, whatever gamma


def time_worker(worker: Any, batches: list[int], max_gamma: int,
                budget_s: float = BUDGET_S) -> WorkerTimes:
    """Run on each worker (``collective_rpc``): seconds per dummy run, by token count."""
    import torch

    runner = worker.model_runner
    drafter = runner.drafter
    sync: Callable[[], None] = getattr(runner, "_sync_device", None) or (lambda: None)
    limit = min(int(runner.max_num_tokens), int(getattr(drafter, "max_num_tokens", 1 << 30)))

    def median_time(fn: Callable[[], Any]) -> float:
        fn()
        sync()
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    step: dict[int, float] = {}
    draft: dict[int, float] = {}
    start = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            if step and time.perf_counter() - start > budget_s:
                break
            for gamma in range(max_gamma + 1):
                tokens = batch * (1 + gamma)
                if tokens > limit or tokens in step:
                    continue
                step[tokens] = median_time(lambda t=tokens: runner._dummy_run(t))
                draft[tokens] = median_time(lambda t=tokens: drafter.dummy_run(t))
    parallel = bool(getattr(drafter, "parallel_drafting", False))
    passes = 1 if parallel else max(1, int(getattr(drafter, "num_speculative_tokens",
                                                   max_gamma)))
    return WorkerTimes(step, draft, passes, parallel)


def target_time(step: dict[int, float], draft: dict[int, float], tokens: int) -> float:
    """The target's forward alone over ``tokens``: the step's time less the drafter's (the
    difference of two medians, kept physically plausible)."""
    return max(step[tokens] - draft[tokens], 0.05 * step[tokens])


def verify_times(step: dict[int, float], draft: dict[int, float]) -> tuple[tuple[int, float],
                                                                            ...]:
    """(tokens, target seconds) for every timed token count, ascending."""
    return tuple((t, target_time(step, draft, t)) for t in sorted(step))


def step_samples(step: dict[int, float], draft: dict[int, float], passes: int,
                 batches: Iterable[int], max_gamma: int,
                 parallel: bool = False) -> tuple[CostSample, ...]:
    """Step times per (batch, gamma, drafter ran) from dummy-run times by token count.

    ``step[T]``: target over T tokens plus ``passes`` drafter passes over T; ``draft[T]``:
    those passes alone. Shapes whose token count was not timed are left out."""
    def one_pass(t: int) -> float:
        return draft[t] / passes

    out: list[CostSample] = []
    for b in batches:
        if b not in step:
            continue
        alone = target_time(step, draft, b)
        out.append(CostSample(b, 0, alone, drafter_ran=False))
        out.append(CostSample(b, 0, alone + one_pass(b)))
        for g in range(1, max_gamma + 1):
            t = b * (1 + g)
            if t not in step:
                break
            drafting = one_pass(t) + (0.0 if parallel else (g - 1) * one_pass(b))
            out.append(CostSample(b, g, target_time(step, draft, t) + drafting))
    return tuple(out)


def _slowest(results: list[WorkerTimes]) -> WorkerTimes:
    """Per token count, the slowest rank's time (a step waits for every rank)."""
    merged = WorkerTimes(passes=results[0].passes, parallel=results[0].parallel)
    for res in results:
        for into, table in ((merged.step, res.step), (merged.draft, res.draft)):
            for tokens, seconds in table.items():
                into[tokens] = max(into.get(tokens, 0.0), seconds)
    return merged


def wanted(settings: Settings, vllm_config: Any) -> bool:
    """True when this engine should be profiled: adaptive gamma with a drafter to time on a
    runner that can (the runner table turns the option off elsewhere, with a warning)."""
    from vllm_hust_vspec.host.abi import runners

    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None or not settings.adaptive_speculation:
        return False
    if str(getattr(spec, "method", "")) not in PROFILED_METHODS:
        return False
    effective = runners.plan(settings, runners.runner_of(vllm_config)).settings
    return effective.startup_profile()


def profile_engine(executor: Any, vllm_config: Any, settings: Settings) -> CostPrior | None:
    """Time the dummy batches on every worker and keep the prior for this engine's
    scheduler (:func:`take`). Never fails the launch: a host whose dummy runs cannot be
    timed logs why and the controller starts without a prior."""
    if not wanted(settings, vllm_config):
        return None
    spec = vllm_config.speculative_config
    max_gamma = int(spec.num_speculative_tokens)
    batches = profile_batches(int(vllm_config.scheduler_config.max_num_seqs))
    start = time.perf_counter()
    try:
        results = executor.collective_rpc(time_worker, args=(batches, max_gamma))
    except Exception as exc:  # noqa: BLE001 - a profile is optional; say why it is missing
        logger.warning("vSpec: start-up cost profile not taken (%s: %s); the controller "
                       "starts without a cost prior", type(exc).__name__, exc)
        return None
    merged = _slowest(list(results))
    samples = step_samples(merged.step, merged.draft, merged.passes, batches, max_gamma,
                           merged.parallel)
    if not samples:
        logger.warning("vSpec: start-up cost profile timed nothing; the controller starts "
                       "without a cost prior")
        return None
    prior = CostPrior(SOURCE, samples, needs_anchor=True,
                      verify=verify_times(merged.step, merged.draft))
    _PENDING[id(vllm_config)] = prior
    logger.info("vSpec: start-up cost profile: %d step shapes (batch %d..%d, gamma 0..%d) in "
                "%.1f s", len(samples), min(s.batch for s in samples),
                max(s.batch for s in samples), max_gamma, time.perf_counter() - start)
    return prior


def take(vllm_config: Any) -> CostPrior | None:
    """The prior :func:`profile_engine` measured for this engine (once; None if none)."""
    return _PENDING.pop(id(vllm_config), None)


__all__ = ["SOURCE", "WorkerTimes", "profile_batches", "profile_engine", "step_samples", "take",
           "target_time", "time_worker", "verify_times", "wanted"]
