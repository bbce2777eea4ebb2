"""Acceptance modes on hand-made logits: per-mode limits, protected ids, edge cases,
and the upstream ``rejection_sample`` wrapper with a stand-in original."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from vllm_hust_vspec.backends.acceptance import (  # noqa: E402
    STRICT,
    AcceptanceParams,
    accepted_lengths,
    greedy_accept,
    params_from_settings,
)
from vllm_hust_vspec.host.worker.v1 import acceptance as host_acc  # noqa: E402
from vllm_hust_vspec.settings import Settings  # noqa: E402

V = 8


def logits_for(rows: list[dict[int, float]]) -> Any:
    out = torch.full((len(rows), V), -10.0)
    for i, row in enumerate(rows):
        for tok, val in row.items():
            out[i, tok] = val
    return out


# Draft 3 is the target's close second everywhere; target's argmax is 5.
SECOND = {5: 2.0, 3: 1.99}


def test_all_accepted_gets_bonus_and_empty_batch() -> None:
    out = greedy_accept(torch.tensor([5, 5]), [2], logits_for([{5: 1}, {5: 1}]),
                        torch.tensor([7]))
    assert out.tolist() == [[5, 5, 7]]
    empty = greedy_accept(torch.tensor([], dtype=torch.long), [], torch.empty(0, V),
                          torch.tensor([], dtype=torch.long))
    assert empty.shape == (0, 1)


def test_all_requests_without_drafts_get_bonus_only() -> None:
    out = greedy_accept(torch.tensor([], dtype=torch.long), [0, 0], torch.empty(0, V),
                        torch.tensor([4, 6]), AcceptanceParams(topk=2), max_spec_len=3)
    assert out.tolist() == [[4, -1, -1, -1], [6, -1, -1, -1]]


def test_relaxed_top_k_after_tokens_is_per_output_token() -> None:
    # One request, 3 drafts of the second choice, 8 tokens generated so far; top-2 only from
    # output token 9 on: draft 0 is output token 8 -> strict (corrected to 5).
    drafts = torch.tensor([3, 3, 3])
    logits = logits_for([SECOND, SECOND, SECOND])
    p = AcceptanceParams(topk=2, topk_after_tokens=9)
    out = greedy_accept(drafts, [3], logits, torch.tensor([7]), p, num_output_tokens=[8])
    assert out.tolist() == [[5, -1, -1, -1]]
    out = greedy_accept(drafts, [3], logits, torch.tensor([7]), p, num_output_tokens=[9])
    assert out.tolist() == [[3, 3, 3, 7]]


def test_margin_from_position_and_after_tokens_are_separate_from_top_k() -> None:
    drafts = torch.tensor([3, 3])
    logits = logits_for([SECOND, SECOND])
    late = AcceptanceParams(margin=0.05, margin_from_position=1)
    assert greedy_accept(drafts, [2], logits, torch.tensor([7]), late).tolist() == [[5, -1, -1]]
    # top-K is not limited by the margin's from_position.
    both = AcceptanceParams(topk=2, margin=0.05, margin_from_position=1)
    assert greedy_accept(drafts, [2], logits, torch.tensor([7]), both).tolist() == [[3, 3, 7]]
    assert both.limits("margin") == (1, 0) and both.limits("topk") == (0, 0)
    with pytest.raises(ValueError, match="unknown acceptance mode"):
        both.limits("typical")


def test_protected_ids_never_relaxed_either_side() -> None:
    eos = 3
    drafts = torch.tensor([eos, 4])
    # position 0: draft EOS is a near tie with 5 -> protected, not accepted.
    # position 1 (separate request): target's choice is the protected EOS, draft 4 close.
    logits = logits_for([{5: 2.0, eos: 1.99}, {eos: 2.0, 4: 1.99}])
    p = AcceptanceParams(margin=0.5, topk=2, protected_token_ids=frozenset({eos}))
    out = greedy_accept(drafts, [1, 1], logits, torch.tensor([7, 7]), p)
    assert out.tolist() == [[5, -1], [eos, -1]]
    # Without protection both would have been relaxed.
    loose = AcceptanceParams(margin=0.5, topk=2)
    assert accepted_lengths(greedy_accept(drafts, [1, 1], logits, torch.tensor([7, 7]),
                                          loose)).tolist() == [1, 1]


def test_protecting_every_id_is_strict_and_with_protected() -> None:
    drafts = torch.tensor([3, 1, 3])
    logits = logits_for([SECOND, {1: 3}, SECOND])
    p = AcceptanceParams(topk=3, margin=0.9).with_protected(range(V))
    assert greedy_accept(drafts, [2, 1], logits, torch.tensor([7, 7]), p).tolist() == \
        greedy_accept(drafts, [2, 1], logits, torch.tensor([7, 7]), STRICT).tolist()
    assert STRICT.with_protected([1, 2]) is STRICT  # strict has nothing to protect


def test_draft_id_outside_target_vocab_is_never_relaxed() -> None:
    out = greedy_accept(torch.tensor([V + 5]), [1], logits_for([{5: 1.0}]), torch.tensor([0]),
                        AcceptanceParams(margin=1.0, topk=V))
    assert out.tolist() == [[5, -1]]


def test_k_larger_than_drafts_and_ragged_batch() -> None:
    drafts = torch.tensor([5, 2, 3])
    logits = logits_for([{5: 1}, {2: 1}, SECOND])
    out = greedy_accept(drafts, [0, 2, 1], logits, torch.tensor([1, 2, 3]),
                        AcceptanceParams(topk=2), max_spec_len=4)
    assert out.tolist() == [[1, -1, -1, -1, -1], [5, 2, 2, -1, -1], [3, 3, -1, -1, -1]]


def test_params_from_settings_maps_each_option_to_its_mode() -> None:
    s = Settings(method="eagle", eagle_relaxed_accept_topk=3,
                 eagle_relaxed_accept_after_tokens=4, confidence_accept_margin=0.1,
                 confidence_accept_from_position=1, confidence_accept_after_tokens=2,
                 confidence_protected_token_ids=[9, 8])
    p = params_from_settings(s)
    assert p.topk == 3 and p.margin == 0.1
    assert p.limits("topk") == (0, 4) and p.limits("margin") == (1, 2)
    assert p.protected_token_ids == frozenset({8, 9})
    assert params_from_settings(Settings(method="draft")).strict
    # top-K is an EAGLE mode: ignored for other methods even if present.
    assert params_from_settings(s, method="draft").topk is None


# ---- the upstream rejection_sample wrapper -----------------------------------------------
def _meta(all_greedy: bool, temperature: list[float] | None = None) -> Any:
    return SimpleNamespace(
        all_greedy=all_greedy, all_random=False,
        temperature=None if temperature is None else torch.tensor(temperature),
    )


def _call(wrapped: Any, meta: Any, **kwargs: Any) -> Any:
    drafts = torch.tensor([3, 3, 3, 3])
    logits = logits_for([SECOND] * 4)
    return wrapped(drafts, [2, 2], 2, torch.tensor([2, 4]), None, logits,
                   torch.tensor([[7], [7]]), meta, **kwargs)


def _original(*args: Any, **kwargs: Any) -> Any:
    # Stand-in for vLLM's exact path: strict greedy for every row.
    drafts, counts, width, _, _, logits, bonus, _ = args[:8]
    return greedy_accept(drafts, counts, logits, bonus, STRICT, max_spec_len=width)


def test_wrapper_outside_a_verify_context_is_the_original() -> None:
    wrapped = host_acc.make_rejection_wrapper(_original)
    assert _call(wrapped, _meta(True)).tolist() == [[5, -1, -1], [5, -1, -1]]


def test_wrapper_relaxes_greedy_rows_only() -> None:
    wrapped = host_acc.make_rejection_wrapper(_original)
    ctx = host_acc.VerifyContext(AcceptanceParams(topk=2), (10, 10))
    token = host_acc._CONTEXT.set(ctx)
    try:
        assert _call(wrapped, _meta(True)).tolist() == [[3, 3, 7], [3, 3, 7]]
        mixed = _call(wrapped, _meta(False, [0.0, 0.8]))
        assert mixed.tolist() == [[3, 3, 7], [5, -1, -1]]  # row 1 samples: vLLM's result
        synthetic = _call(wrapped, _meta(True), synthetic_mode=True)
        assert synthetic.tolist() == [[5, -1, -1], [5, -1, -1]]
    finally:
        host_acc._CONTEXT.reset(token)


def test_describe_and_eos_ids() -> None:
    p = AcceptanceParams(topk=2, margin=0.1, protected_token_ids=frozenset({1}),
                         topk_after_tokens=3)
    text = host_acc.describe(p)
    assert "top-2" in text and "after 3 tokens" in text and "margin 0.1" in text
    cfg = SimpleNamespace(hf_text_config=SimpleNamespace(eos_token_id=[2, 5]),
                          hf_config=SimpleNamespace(eos_token_id=2))
    assert host_acc.eos_token_ids(cfg) == [2, 5]
    assert host_acc.eos_token_ids(None) == []
