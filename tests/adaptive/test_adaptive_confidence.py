"""Confidence stop rules."""

from __future__ import annotations

import pytest

from vllm_hust_vspec.adaptive import confidence_keep, confidence_keep_batch, position_uncertain

SURE = [0.97, 0.02, 0.01]
UNSURE = [0.4, 0.35, 0.1]


def test_entropy_rule_keeps_through_first_uncertain_position() -> None:
    assert confidence_keep([SURE, SURE, UNSURE, SURE], rule="entropy", threshold=0.5) == 3
    assert confidence_keep([UNSURE, SURE], rule="entropy", threshold=0.5) == 1
    assert confidence_keep([SURE, SURE], rule="entropy", threshold=0.5) == 2
    assert confidence_keep([], rule="entropy", threshold=0.5) == 0


def test_entropy_counts_mass_outside_top_k() -> None:
    # top-1 only: 0.5 in the top-k and 0.5 elsewhere is as uncertain as a fair coin
    assert position_uncertain([0.5], "entropy", 0.6)
    assert not position_uncertain([1.0], "entropy", 0.01)


def test_margin_rule() -> None:
    assert confidence_keep([SURE, [0.5, 0.45], SURE], rule="margin", threshold=0.1) == 2
    assert confidence_keep([SURE, [0.45, 0.5]], rule="margin", threshold=0.1) == 2  # any order
    assert not position_uncertain([0.9], "margin", 0.5)  # no runner-up: margin 0.9


def test_min_keep_and_batch_helper() -> None:
    assert confidence_keep([UNSURE, SURE, SURE], rule="margin", threshold=0.2, min_keep=2) == 2
    assert confidence_keep([UNSURE], rule="margin", threshold=0.2, min_keep=5) == 1
    got = confidence_keep_batch([[SURE, UNSURE], [SURE, SURE, SURE], []],
                                rule="entropy", threshold=0.5)
    assert got == [2, 3, 0]


def test_bad_rule_and_threshold() -> None:
    with pytest.raises(ValueError, match="entropy, margin"):
        confidence_keep([SURE], rule="topk", threshold=0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threshold"):
        confidence_keep_batch([[SURE]], rule="margin", threshold=-1.0)
