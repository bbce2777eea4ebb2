"""Host-independent greedy acceptance on hand-made logits."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from vllm_hust_vspec.backends.acceptance import (  # noqa: E402
    STRICT,
    AcceptanceParams,
    accepted_lengths,
    greedy_accept,
)

V = 8


def logits_for(rows: list[dict[int, float]]) -> torch.Tensor:
    """One row per draft position: {token: logit}; others -10."""
    out = torch.full((len(rows), V), -10.0)
    for i, row in enumerate(rows):
        for tok, val in row.items():
            out[i, tok] = val
    return out


def test_strict_prefix_then_correction_then_bonus() -> None:
    # req0 drafts [1, 2, 3]: target argmax [1, 2, 5] -> keep 1, 2, correct to 5.
    # req1 drafts [4]: target argmax [4] -> keep 4 + bonus 7.
    # req2 drafts []: only the bonus.
    drafts = torch.tensor([1, 2, 3, 4])
    logits = logits_for([{1: 5}, {2: 5}, {5: 5, 3: 4.9}, {4: 5}])
    out = greedy_accept(drafts, [3, 1, 0], logits, torch.tensor([6, 7, 9]), STRICT)
    assert out.tolist() == [[1, 2, 5, -1], [4, 7, -1, -1], [9, -1, -1, -1]]
    assert accepted_lengths(out).tolist() == [2, 1, 0]


def test_first_rejected_and_max_spec_len_wider_than_drafts() -> None:
    drafts = torch.tensor([3, 1])
    logits = logits_for([{2: 5}, {1: 5}])
    out = greedy_accept(drafts, [2], logits, torch.tensor([[0]]), max_spec_len=4)
    assert out.tolist() == [[2, -1, -1, -1, -1]]


def test_relaxed_topk_accepts_second_choice_but_not_third() -> None:
    drafts = torch.tensor([3, 4, 6])
    logits = logits_for([{5: 5, 3: 4}, {5: 5, 4: 4.5}, {5: 5, 1: 4, 6: 3}])
    strict = greedy_accept(drafts, [3], logits, torch.tensor([7]))
    top2 = greedy_accept(drafts, [3], logits, torch.tensor([7]), AcceptanceParams(topk=2))
    assert strict.tolist() == [[5, -1, -1, -1]]
    assert top2.tolist() == [[3, 4, 5, -1]]  # third draft is 3rd choice -> corrected


def test_relaxed_never_touches_protected_ids_and_respects_positions() -> None:
    eos = 4
    drafts = torch.tensor([3, eos])
    logits = logits_for([{5: 5, 3: 4.9}, {5: 5, eos: 4.9}])
    p = AcceptanceParams(topk=2, protected_token_ids=frozenset({eos}))
    assert greedy_accept(drafts, [2], logits, torch.tensor([7]), p).tolist() == [[3, 5, -1]]
    late = AcceptanceParams(topk=2, from_position=1)
    assert greedy_accept(drafts, [2], logits, torch.tensor([7]), late).tolist() == [[5, -1, -1]]


def test_margin_and_after_tokens() -> None:
    drafts = torch.tensor([3, 3])
    # position 0: p(5) ~ p(3) (tiny margin); in request 1 the same.
    logits = logits_for([{5: 2.0, 3: 1.99}, {5: 2.0, 3: 1.99}])
    p = AcceptanceParams(margin=0.05, after_tokens=10)
    out = greedy_accept(drafts, [1, 1], logits, torch.tensor([1, 2]), p,
                        num_output_tokens=[12, 3])
    assert out.tolist() == [[3, 1], [5, -1]]  # req1 has only 3 tokens -> strict
    no_lens = greedy_accept(drafts, [1, 1], logits, torch.tensor([1, 2]), p)
    assert accepted_lengths(no_lens).tolist() == [0, 0]


def test_forced_length_keeps_exactly_n_then_the_target_token() -> None:
    import torch

    from vllm_hust_vspec.backends.acceptance import AcceptanceParams, greedy_accept

    logits = torch.zeros(5, 8)
    logits[torch.arange(5), torch.tensor([1, 2, 3, 4, 5])] = 1.0  # target argmax per position
    drafts = torch.tensor([7, 7, 7, 6, 6])  # never the argmax
    out = greedy_accept(drafts, [3, 2], logits, torch.tensor([0, 0]),
                        AcceptanceParams(forced_length=2), max_spec_len=3)
    assert out.tolist() == [[7, 7, 3, -1], [6, 6, 0, -1]]  # 2 kept; then argmax or bonus
    assert not AcceptanceParams(forced_length=2).strict
