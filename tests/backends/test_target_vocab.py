"""Target active vocabulary, pure parts: the restricted head equals the full head's argmax
whenever it is active, and the request conditions of ``--eagle-target-active-vocab-ids``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from vllm_hust_vspec.backends.draft_head import ActiveVocabError  # noqa: E402
from vllm_hust_vspec.backends.target_head import TargetHead, target_ids  # noqa: E402
from vllm_hust_vspec.host.worker.v1.target_vocab import engine_problem, request_problem  # noqa: E402


def _weights(rows: int = 64, hidden: int = 8) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(rows, hidden, generator=g), torch.randn(5, hidden, generator=g)


def test_full_set_matches_full_head_and_counts_rows() -> None:
    weight, h = _weights()
    head = TargetHead(weight, list(range(63, -1, -1)), 64)
    logits = head.logits(h)
    assert torch.allclose(logits, h @ weight.T, atol=1e-5)
    assert head.calls == 1 and head.tokens == 5 and head.rows == 64


def test_subset_is_minus_inf_outside_and_argmax_maps_back() -> None:
    weight, h = _weights()
    full = (h @ weight.T).argmax(-1)
    ids = sorted(set(full.tolist()) | {0, 3, 7})
    head = TargetHead(weight, ids, 64)
    out = head.logits(h)
    outside = [t for t in range(64) if t not in ids]
    assert torch.isinf(out[:, outside]).all() and head.rows == len(ids)
    assert torch.equal(head.greedy(h), full)  # exact: every argmax is active
    missing = TargetHead(weight, [t for t in range(64) if t != int(full[0])], 64)
    assert int(missing.greedy(h)[0]) != int(full[0])  # not exact: best active id instead


def test_bias_and_dtype() -> None:
    weight, h = _weights()
    bias = torch.randn(64)
    head = TargetHead(weight, [1, 5, 9], 64, dtype=torch.float64)
    out = head.logits(h, bias)
    assert out.dtype == torch.float64
    expected = (h.double() @ weight.double().T + bias.double())[:, [1, 5, 9]]
    assert torch.allclose(out[:, [1, 5, 9]], expected, atol=1e-6)


def test_ids_file_formats_and_errors(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("[3, 1, 3, 2]")
    (tmp_path / "b.txt").write_text("# top ids\n3\n1  # comment\n2\n")
    assert target_ids(tmp_path / "a.json", 10) == [3, 1, 2]
    assert target_ids(tmp_path / "b.txt", 10) == [3, 1, 2]
    (tmp_path / "c.json").write_text("[3, 10]")
    with pytest.raises(ActiveVocabError, match="outside the target vocabulary"):
        target_ids(tmp_path / "c.json", 10)
    (tmp_path / "d.json").write_text("[]")
    with pytest.raises(ActiveVocabError, match="no ids"):
        target_ids(tmp_path / "d.json", 10)


def _params(**kw: Any) -> SimpleNamespace:
    base: dict[str, Any] = {
        "temperature": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
        "frequency_penalty": 0.0, "logprobs": None, "prompt_logprobs": None,
        "structured_outputs": None, "logit_bias": None, "allowed_token_ids": None,
        "bad_words": None, "min_tokens": 0, "thinking_token_budget": None,
    }
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.parametrize(("field", "value"), [
    ("temperature", 0.7), ("repetition_penalty", 1.1), ("presence_penalty", 0.5),
    ("frequency_penalty", -0.2), ("logprobs", 0), ("prompt_logprobs", 1),
    ("structured_outputs", object()), ("logit_bias", {1: 2.0}), ("allowed_token_ids", [1]),
    ("bad_words", ["x"]), ("min_tokens", 2), ("thinking_token_budget", 8),
])
def test_each_condition_is_refused(field: str, value: Any) -> None:
    assert request_problem(_params()) is None
    problem = request_problem(_params(**{field: value}))
    assert problem is not None and problem[0] == field


def test_engine_conditions() -> None:
    ok = SimpleNamespace(use_v2_model_runner=False, model_config=SimpleNamespace(
        logits_processors=None))
    assert engine_problem(ok) is None
    v2 = SimpleNamespace(use_v2_model_runner=True, model_config=ok.model_config)
    assert "V1" in (engine_problem(v2) or "")
    lps = SimpleNamespace(use_v2_model_runner=False, model_config=SimpleNamespace(
        logits_processors=["x.Y"]))
    assert "logits processors" in (engine_problem(lps) or "")
