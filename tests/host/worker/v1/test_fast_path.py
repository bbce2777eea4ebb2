"""Zero-draft fast path (host/worker/v1/fast_path.py): which steps qualify, and the swap is
undone."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from vllm_hust_vspec.host.worker.v1 import fast_path

SKIP = "vspec_skip_draft"


def _runner(**over: Any) -> SimpleNamespace:
    base: dict[str, Any] = {
        "speculative_config": object(),
        "use_async_scheduling": False,
        "parallel_config": SimpleNamespace(pipeline_parallel_size=1),
        "model_config": SimpleNamespace(is_hybrid=False, has_inner_state=False),
    }
    base.update(over)
    return SimpleNamespace(**base)


def _out(skip: bool = True, drafts: dict[str, list[int]] | None = None) -> SimpleNamespace:
    out = SimpleNamespace(scheduled_spec_decode_tokens=drafts or {})
    if skip:
        setattr(out, SKIP, True)
    return out


@pytest.mark.parametrize(
    ("runner", "out", "ok"),
    [
        (_runner(), _out(), True),
        (_runner(), _out(drafts={"a": [], "b": []}), True),
        (_runner(), _out(skip=False), False),
        (_runner(), _out(drafts={"a": [5]}), False),
        (_runner(speculative_config=None), _out(), False),
        (_runner(use_async_scheduling=True), _out(), False),
        (_runner(parallel_config=SimpleNamespace(pipeline_parallel_size=2)), _out(), False),
        (_runner(model_config=SimpleNamespace(is_hybrid=True, has_inner_state=False)), _out(),
         False),
        (_runner(model_config=SimpleNamespace(is_hybrid=False, has_inner_state=True)), _out(),
         False),
    ],
)
def test_eligible_steps(runner: Any, out: Any, ok: bool) -> None:
    assert fast_path.eligible(runner, out, SKIP) is ok


def _instrumented() -> tuple[Any, Any, list[tuple[str, object]]]:
    seen: list[tuple[str, object]] = []

    def execute_model(self: Any, scheduler_output: Any) -> str:
        seen.append(("execute", self.speculative_config))
        if getattr(scheduler_output, "boom", False):
            raise RuntimeError("boom")
        return "executed"

    def sample_tokens(self: Any, grammar: Any) -> str:
        seen.append(("sample", self.speculative_config))
        return "sampled"

    wrapped_exec = fast_path.make_execute_wrapper(SKIP, lambda: True)(execute_model)
    wrapped_sample = fast_path.make_sample_wrapper(sample_tokens)
    return wrapped_exec, wrapped_sample, seen


def test_eligible_step_hides_spec_config_for_both_calls_and_restores_it() -> None:
    execute, sample, seen = _instrumented()
    runner = _runner()
    cfg = runner.speculative_config
    assert execute(runner, _out()) == "executed"
    assert sample(runner, None) == "sampled"
    assert seen == [("execute", None), ("sample", None)]
    assert runner.speculative_config is cfg
    assert getattr(runner, fast_path.COUNT_ATTR) == 1
    # the next, speculative step is untouched
    seen.clear()
    execute(runner, _out(drafts={"a": [1, 2]}))
    sample(runner, None)
    assert seen == [("execute", cfg), ("sample", cfg)]


def test_failure_restores_config_and_unpairs_sample() -> None:
    execute, sample, seen = _instrumented()
    runner = _runner()
    cfg = runner.speculative_config
    bad = _out()
    bad.boom = True
    with pytest.raises(RuntimeError):
        execute(runner, bad)
    assert runner.speculative_config is cfg
    sample(runner, None)
    assert seen[-1] == ("sample", cfg)


def test_disabled_setting_is_read_per_step() -> None:
    flag = {"on": False}

    def execute_model(self: Any, scheduler_output: Any) -> object:
        return self.speculative_config

    wrapped = fast_path.make_execute_wrapper(SKIP, lambda: flag["on"])(execute_model)
    runner = _runner()
    assert wrapped(runner, _out()) is runner.speculative_config
    flag["on"] = True
    assert wrapped(runner, _out()) is None
