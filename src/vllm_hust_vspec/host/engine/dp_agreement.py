"""One gamma per lockstep step across vLLM's data-parallel group (MoE data parallel).

Under MoE data parallel vLLM runs one ``DPEngineCoreProc`` per rank; their steps are in
lockstep (an idle rank runs a dummy batch) and every forward, the drafter's included, joins
collectives across the group (``coordinate_batch_across_dp``, the MoE dispatch and combine).
The drafter runs one such forward per drafted token and coordinates the batch once for the
first pass and once for the rest, so two ranks drafting a different gamma (one of them 0 or 1,
the other 2 or more) leave their collectives unpaired: a hang or wrong results.

So every rank's controller votes and the ranks agree on one gamma before the step runs:

* **Where:** in the EngineCore process, once per lockstep iteration on every rank: inside
  ``Scheduler.schedule()`` (the hook's ``decide``) on a rank with work, before the dummy batch
  (``EngineCore.execute_dummy_batch``) on an idle one. vLLM's loop gives every rank exactly one
  of the two per iteration, in the same order as its own DP collectives.
* **How:** one all-reduce SUM of four integers (adaptive/dp_vote.py: the batch-weighted mean
  of the votes) on a gloo group of vSpec's own, built on vLLM's DP store
  (``DPEngineCoreProc.dp_store``) under its own prefix, so an abandoned agreement can never
  block vLLM's own DP synchronisation (``dp_group``).
* **Idle ranks:** the dummy batch drafts the agreed gamma (at least one pass: a real rank's
  drafter runs its first pass even at gamma 0), set on the workers' proposer with the dummy.
* **Failure:** an all-reduce that does not complete in :data:`TIMEOUT_S` (a lost or stuck
  peer) switches the rank to the fixed gamma (the configured K) for good and it stops taking
  part, so every peer times out at its next step and switches too. On the step where the first
  rank gives up, a peer may still complete that all-reduce late; both settle that one step on
  a first-writer-wins key in vLLM's DP store (``compare_set``), so no step ever runs split.
* **Learning:** each rank's controller observes the agreed gamma and the interval between its
  scheduler's consecutive steps, which in lockstep already includes waiting for the slowest
  rank: it learns from the group's step time.
"""

from __future__ import annotations

import logging
import os
import time
import zlib
from collections import Counter
from datetime import timedelta
from typing import Any

from vllm_hust_vspec.adaptive import dp_vote

logger = logging.getLogger("vllm_hust_vspec.host")

DP_ENGINE_CORE_PROC = ("vllm.v1.engine.core", "DPEngineCoreProc")
TIMEOUT_S = 60.0
# Test-only: "off" leaves each rank with its own controller's gamma (the split agreement
# prevents), so a test can show what happens without it.
TEST_SWITCH_ENV = "VSPEC_TEST_DP_AGREEMENT"
STORE_PREFIX = "vspec_dp_gamma"
# Steps further apart than this are not one busy stretch (an idle engine between waves).
_BUSY_GAP_S = 1.0


class DPAgreement:
    """The agreement of one rank (EngineCore process) with its lockstep peers."""

    def __init__(self, group: Any, store: Any, rank: int, size: int, max_gamma: int, *,
                 fallback_gamma: int | None = None, timeout_s: float = TIMEOUT_S,
                 enabled: bool = True) -> None:
        self.group = group
        self.store = store
        self.rank = rank
        self.size = size
        self.max_gamma = max_gamma
        self.fallback_gamma = max_gamma if fallback_gamma is None else fallback_gamma
        self.timeout_s = timeout_s
        self.enabled = enabled
        self.failed: str | None = None  # why this rank stopped agreeing
        self.seq = 0
        self.split_votes = 0  # steps whose votes differed (the agreement mattered)
        self.arbitrated = 0  # steps settled on the store key
        self.agree_s = 0.0  # wall time inside agree() (the all-reduce, incl. waiting)
        self.busy_s = 0.0  # wall time of busy stretches between consecutive agreements
        self.busy_steps = 0
        self._last_done: float | None = None
        # every step's gamma, in order: equal digests on all ranks = no step ran split
        self.digest = 0
        self.gammas: Counter[int] = Counter()
        self._voted = False  # a rank decoded since the last step nobody did

    def agree(self, vote: int | None, weight: int) -> int:
        """The gamma every rank runs this step, from this rank's ``vote`` (None: an idle rank
        running a dummy batch) weighted by its batch size ``weight``."""
        self.seq += 1
        if not self.enabled:
            return self.fallback_gamma if vote is None else vote
        if self.failed is not None:
            self.gammas[self.fallback_gamma] += 1
            return self.fallback_gamma
        t0 = time.perf_counter()
        gap = None if self._last_done is None else t0 - self._last_done
        wave_end = False
        try:
            totals = self._all_reduce(dp_vote.encode(vote, weight))
        except Exception as exc:  # noqa: BLE001 - a timeout or a lost peer: gloo's own errors
            self._give_up(f"the gamma all-reduce failed ({type(exc).__name__}: {exc})")
            gamma = self._settle(self.fallback_gamma)
        else:
            gamma = dp_vote.decode(totals, self.max_gamma, self.fallback_gamma)
            wave_end = self._voted and totals[dp_vote.WEIGHT] == 0
            self._voted = totals[dp_vote.WEIGHT] > 0
            if vote is not None and totals[dp_vote.WEIGHTED] != vote * totals[dp_vote.WEIGHT]:
                self.split_votes += 1
            waited = time.perf_counter() - t0
            # A step that starts or ends a timeout's half after the last: a peer may have
            # given up on it (and run the fixed gamma), so the store key decides.
            if (gap is not None and gap > self.timeout_s / 2) or waited > self.timeout_s / 2:
                gamma = self._settle(gamma)
        done = time.perf_counter()
        self.agree_s += done - t0
        if gap is not None and gap < _BUSY_GAP_S:
            self.busy_s += done - t0 + gap  # from the previous agreement's end to this one's
            self.busy_steps += 1
        self._last_done = done
        self.digest = zlib.crc32(bytes((min(gamma, 255),)), self.digest)
        self.gammas[gamma] += 1
        if self.failed is None and wave_end:
            # the first step no rank decodes after busy ones: every rank logs at the same step
            logger.info("vSpec: %s", self.summary())
        return gamma

    def _all_reduce(self, share: list[int]) -> list[int]:
        import torch

        tensor = torch.tensor(share, dtype=torch.int64)
        self.group.allreduce([tensor]).wait()
        return [int(x) for x in tensor.tolist()]

    def _settle(self, proposal: int) -> int:
        """This step's gamma from the store: the first proposal any rank made wins."""
        self.arbitrated += 1
        key = f"{STORE_PREFIX}/step/{self.seq}"
        try:
            got = self.store.compare_set(key, "", str(proposal))
            return int(got.decode() if isinstance(got, bytes) else got)
        except Exception as exc:  # noqa: BLE001 - the store's host is gone: so is the group
            self._give_up(f"the DP store is unreachable ({type(exc).__name__}: {exc})")
            return self.fallback_gamma

    def _give_up(self, why: str) -> None:
        if self.failed is None:
            self.failed = why
            logger.warning("vSpec: DP rank %d cannot agree on gamma with its peers: %s; every "
                           "rank runs the fixed gamma %d from here on", self.rank, why,
                           self.fallback_gamma)

    def summary(self) -> str:
        """One line: steps, what the agreement cost per step and against the step time."""
        per_step = self.agree_s / self.seq if self.seq else 0.0
        step = self.busy_s / self.busy_steps if self.busy_steps else 0.0
        ratio = (per_step / step) if step else 0.0
        return (f"DP agreement rank {self.rank}/{self.size}: {self.seq} steps, "
                f"{self.split_votes} with differing votes, {self.arbitrated} settled on the "
                f"store, {per_step * 1e6:.0f} us/step inside the agreement, busy step "
                f"{step * 1e3:.2f} ms, ratio {ratio:.4f}, gamma counts "
                f"{dict(sorted(self.gammas.items()))}, digest {self.digest:08x}"
                + (f", fell back: {self.failed}" if self.failed else ""))


def make_group(store: Any, rank: int, size: int, timeout_s: float = TIMEOUT_S) -> Any:
    """vSpec's gloo group over ``store`` (vLLM's DP store), apart from vLLM's own groups."""
    import torch.distributed as dist

    return dist.ProcessGroupGloo(dist.PrefixStore(STORE_PREFIX, store), rank, size,
                                 timedelta(seconds=timeout_s))


def for_engine(core: Any, max_gamma: int) -> DPAgreement | None:
    """The agreement of a lockstep ``DPEngineCoreProc`` (None for any other engine)."""
    group = getattr(core, "dp_group", None)
    store = getattr(core, "dp_store", None)
    size = int(getattr(core, "dp_size", 1) or 1)
    if group is None or size <= 1:
        return None
    if store is None:
        raise RuntimeError(
            "vSpec: this DPEngineCoreProc has no dp_store (vLLM's DP TCP store), which vSpec's "
            "gamma agreement is built on; use a vLLM whose stateless_init_dp_group returns its "
            "store (0.32+) or --no-adaptive-speculation")
    rank = int(core.dp_rank)
    enabled = os.environ.get(TEST_SWITCH_ENV, "on").strip().lower() != "off"
    if not enabled:
        logger.warning("vSpec: DP gamma agreement switched off (%s=off, a test switch): "
                       "ranks may run different gamma", TEST_SWITCH_ENV)
        return DPAgreement(None, store, rank, size, max_gamma, enabled=False)
    agreement = DPAgreement(make_group(store, rank, size), store, rank, size, max_gamma)
    logger.info("vSpec: DP rank %d of %d agrees on one gamma per lockstep step (gloo, "
                "timeout %.0f s, fallback gamma %d)", rank, size, TIMEOUT_S, max_gamma)
    return agreement


def dummy_batch_at(worker: Any, gamma: int) -> None:
    """On a worker (``collective_rpc``): run vLLM's dummy batch with the proposer drafting
    ``gamma`` (at least its first pass, as a real step at gamma 0 runs it too)."""
    drafter = getattr(getattr(worker, "model_runner", None), "drafter", None)
    if drafter is not None and hasattr(drafter, "num_speculative_tokens"):
        drafter.num_speculative_tokens = max(1, int(gamma))
    worker.execute_dummy_batch()


__all__ = ["DP_ENGINE_CORE_PROC", "STORE_PREFIX", "TEST_SWITCH_ENV", "TIMEOUT_S",
           "DPAgreement", "dummy_batch_at", "for_engine", "make_group"]
