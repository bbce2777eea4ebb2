"""One gamma per lockstep step across data-parallel ranks (host/engine/dp_agreement.py).

The ranks here are threads with real gloo groups on a real TCP store, as vLLM's DP engines
build them (one store, a group per rank); no engine runs.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from vllm_hust_vspec.adaptive import dp_vote  # noqa: E402
from vllm_hust_vspec.host.engine import dp_agreement  # noqa: E402
from vllm_hust_vspec.host.engine.dp_agreement import DPAgreement  # noqa: E402

MAX_GAMMA = 5


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ranks(size: int, timeout_s: float = 20.0) -> list[DPAgreement]:
    """``size`` agreements on one store, built concurrently (the group waits for all)."""
    port = _port()
    stores = [dist.TCPStore("127.0.0.1", port, size, r == 0, wait_for_workers=False)
              for r in range(size)]
    out: list[Any] = [None] * size

    def build(r: int) -> None:
        group = dp_agreement.make_group(stores[r], r, size, timeout_s)
        out[r] = DPAgreement(group, stores[r], r, size, MAX_GAMMA, timeout_s=timeout_s)

    _together([lambda r=r: build(r) for r in range(size)])
    return out


def _together(fns: list[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = fns[i]()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    if errors:
        raise errors[0]
    return results


def test_the_vote_is_the_batch_weighted_mean_and_the_fallback_wins() -> None:
    assert dp_vote.agree([(1, 3), (5, 1)], MAX_GAMMA, 4) == 2  # (3 + 5) / 4
    assert dp_vote.agree([(1, 1), (2, 1)], MAX_GAMMA, 4) == 2  # 1.5 rounds up
    assert dp_vote.agree([(3, 2), (None, 0)], MAX_GAMMA, 4) == 3  # an idle rank weighs 0
    assert dp_vote.agree([(None, 0), (None, 0)], MAX_GAMMA, 4, idle_gamma=1) == 1
    totals = [a + b for a, b in zip(dp_vote.encode(1, 2), dp_vote.encode(2, 2, fallback=True),
                                    strict=True)]
    assert dp_vote.decode(totals, MAX_GAMMA, 4) == 4
    with pytest.raises(ValueError, match="expected 4"):
        dp_vote.decode([1, 2], MAX_GAMMA, 4)


def test_ranks_with_different_votes_and_loads_run_one_gamma() -> None:
    a, b = _ranks(2)
    steps = [((1, 6), (4, 2)), ((5, 1), (None, 0)), ((0, 3), (5, 3)), ((None, 0), (None, 0))]
    for (va, wa), (vb, wb) in steps:
        got = _together([lambda va=va, wa=wa: a.agree(va, wa),
                         lambda vb=vb, wb=wb: b.agree(vb, wb)])
        assert got[0] == got[1] == dp_vote.agree([(va, wa), (vb, wb)], MAX_GAMMA, MAX_GAMMA)
    assert a.split_votes >= 2 and a.failed is None and b.failed is None
    assert a.seq == b.seq == len(steps)
    assert "4 steps" in a.summary()


def test_a_lost_peer_makes_every_rank_fall_back_to_the_fixed_gamma() -> None:
    a, b = _ranks(2, timeout_s=1.0)
    assert _together([lambda: a.agree(1, 1), lambda: b.agree(1, 1)]) == [1, 1]
    start = time.monotonic()
    assert a.agree(0, 4) == MAX_GAMMA  # b never comes: a gives up after its timeout
    assert time.monotonic() - start < 10
    assert a.failed is not None
    # from here on a no longer takes part, so b gives up at its next step too
    assert a.agree(0, 4) == MAX_GAMMA
    assert b.agree(0, 4) == MAX_GAMMA and b.failed is not None


def test_a_peer_arriving_after_the_timeout_runs_the_fallback_too() -> None:
    a, b = _ranks(2, timeout_s=1.0)
    assert _together([lambda: a.agree(2, 1), lambda: b.agree(2, 1)]) == [2, 2]

    def late() -> int:
        time.sleep(1.6)  # past a's timeout: a has run the fixed gamma for this step
        return b.agree(0, 1)

    got = _together([lambda: a.agree(0, 1), late])
    assert got == [MAX_GAMMA, MAX_GAMMA], got  # never a split, whatever gloo did late
    assert b.arbitrated >= 1


def test_the_test_switch_leaves_each_rank_its_own_gamma(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dp_agreement.TEST_SWITCH_ENV, "off")
    core = SimpleNamespace(dp_group=object(), dp_store=object(), dp_size=2, dp_rank=1)
    agreement = dp_agreement.for_engine(core, MAX_GAMMA)
    assert agreement is not None and not agreement.enabled
    assert [agreement.agree(v, 1) for v in (0, 3, 1)] == [0, 3, 1]
    assert dp_agreement.for_engine(SimpleNamespace(), MAX_GAMMA) is None  # not lockstep


def test_an_idle_ranks_dummy_batch_drafts_the_agreed_gamma() -> None:
    seen: list[int] = []
    drafter = SimpleNamespace(num_speculative_tokens=MAX_GAMMA)
    worker = SimpleNamespace(model_runner=SimpleNamespace(drafter=drafter),
                             execute_dummy_batch=lambda: seen.append(
                                 drafter.num_speculative_tokens))
    for gamma in (3, 0, 1):
        dp_agreement.dummy_batch_at(worker, gamma)
    # gamma 0 still runs the drafter's first pass on a busy rank: one pass here too
    assert seen == [3, 1, 1]
