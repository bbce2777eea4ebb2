"""Relaxed acceptance on Model Runner V2 (host/worker/v2/acceptance.py).

V2's ``rejection_sample`` is a Triton kernel, which cannot run on CPU; the tests give the
wrapper a pure-torch stand-in with the kernel's greedy semantics (read from
``rejection_sampler_utils._rejection_kernel``) and check the rows the wrapper writes."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from vllm_hust_vspec.backends.acceptance import AcceptanceParams  # noqa: E402
from vllm_hust_vspec.host.patching import Patcher  # noqa: E402
from vllm_hust_vspec.host.worker.v2 import acceptance as acceptance_v2  # noqa: E402
from vllm_hust_vspec.settings import Settings  # noqa: E402

pytestmark = pytest.mark.vllm

V, K = 8, 3
SAMPLED_MARK = 777  # what the stand-in writes for requests with temperature > 0


def strict_kernel(target_logits: Any, draft_logits: Any, draft_sampled: Any, cu: Any,
                  pos: Any, idx_mapping: Any, eim: Any, elp: Any, temperature: Any,
                  seed: Any, num_speculative_steps: int, *args: Any,
                  **kwargs: Any) -> tuple[Any, Any]:
    """V2's kernel for greedy rows: keep drafts while they equal the target argmax (a -1 is
    rejected), store the argmax at the first rejection, or the bonus argmax."""
    num_reqs = cu.shape[0] - 1
    sampled = torch.full((num_reqs, num_speculative_steps + 1), -5, dtype=torch.int64)
    num_sampled = torch.zeros(num_reqs, dtype=torch.int32)
    for r in range(num_reqs):
        start, end = int(cu[r]), int(cu[r + 1])
        if float(temperature[idx_mapping[r]]) != 0.0:
            sampled[r, :] = SAMPLED_MARK
            num_sampled[r] = 1
            continue
        n = 0
        for i in range(end - start - 1):
            draft = int(draft_sampled[start + i + 1])
            top = int(target_logits[start + i].argmax())
            if draft >= 0 and draft == top:
                sampled[r, i] = draft
                n += 1
                continue
            sampled[r, i] = top
            break
        else:
            sampled[r, end - start - 1] = int(target_logits[end - 1].argmax())
        num_sampled[r] = n + 1
    return sampled, num_sampled


def _logits(rows: list[tuple[int, int]]) -> torch.Tensor:
    """One row per (argmax id, runner-up id)."""
    out = torch.zeros(len(rows), V)
    for i, (top, second) in enumerate(rows):
        out[i, top] = 5.0
        out[i, second] = 4.0
    return out


def _call(params: AcceptanceParams | None, logits: torch.Tensor, drafts: list[int],
          cu: list[int], temps: list[float], prompt_len: Any = None,
          pos: list[int] | None = None) -> tuple[list[list[int]], list[int]]:
    wrapped = acceptance_v2.make_rejection_wrapper(strict_kernel)
    num_reqs = len(cu) - 1
    args = (logits, None, torch.tensor(drafts), torch.tensor(cu),
            torch.tensor(pos if pos is not None else list(range(len(drafts)))),
            torch.arange(num_reqs), None, None, torch.tensor(temps), None, K)
    if params is None:
        sampled, num = wrapped(*args)
    else:
        token = acceptance_v2._CONTEXT.set(acceptance_v2.V2VerifyContext(params, prompt_len))
        try:
            sampled, num = wrapped(*args)
        finally:
            acceptance_v2._CONTEXT.reset(token)
    n = num.tolist()
    return [sampled[r, :n[r]].tolist() for r in range(num_reqs)], n


# request 0: drafts 3, 4, 1 at rows whose (argmax, runner-up) are (3,6) (2,4) (1,0), bonus 7;
# request 1: draft 2 where the argmax is 5 and the runner-up 2, bonus 6
LOGITS = _logits([(3, 6), (2, 4), (1, 0), (7, 0), (5, 2), (6, 0)])
DRAFTS = [0, 3, 4, 1, 0, 2]  # draft_sampled: each row holds the next row's input token
CU = [0, 4, 6]


def test_outside_a_verify_context_and_in_strict_mode_vllms_result_stands() -> None:
    strict = (([3, 2], [5]), [2, 1])
    got = _call(None, LOGITS, DRAFTS, CU, [0.0, 0.0])
    assert (tuple(got[0]), got[1]) == strict
    got = _call(AcceptanceParams(), LOGITS, DRAFTS, CU, [0.0, 0.0])
    assert (tuple(got[0]), got[1]) == strict


def test_top2_keeps_runner_up_drafts_of_greedy_requests() -> None:
    rows, n = _call(AcceptanceParams(topk=2), LOGITS, DRAFTS, CU, [0.0, 0.0])
    assert rows == [[3, 4, 1, 7], [2, 6]] and n == [4, 2]


def test_sampled_requests_keep_vllms_exact_result_in_a_mixed_batch() -> None:
    rows, n = _call(AcceptanceParams(topk=2), LOGITS, DRAFTS, CU, [0.0, 0.8])
    assert rows[0] == [3, 4, 1, 7]
    assert rows[1] == [SAMPLED_MARK] and n[1] == 1


def test_a_rejected_placeholder_draft_ends_verification_as_in_vllm() -> None:
    drafts = [0, 3, -1, 1, 0, 2]  # request 0's second draft is invalid (-1)
    rows, n = _call(AcceptanceParams(topk=2), LOGITS, drafts, CU, [0.0, 0.0])
    assert rows[0] == [3, 2] and n[0] == 2  # kept 3, then the argmax at the invalid slot
    # even the measurement-only forced length never keeps a placeholder
    rows, n = _call(AcceptanceParams(forced_length=3), LOGITS, drafts, CU, [0.0, 0.0])
    assert rows[0] == [3, 2] and -1 not in rows[0]


def test_after_tokens_uses_the_tokens_generated_so_far() -> None:
    params = AcceptanceParams(topk=2, topk_after_tokens=10)
    prompt = torch.tensor([5, 5])
    # request 0 starts at position 9 (5 generated: strict), request 1 at 20 (16: relaxed)
    pos = [9, 10, 11, 12, 20, 21]
    rows, _ = _call(params, LOGITS, DRAFTS, CU, [0.0, 0.0], prompt_len=prompt, pos=pos)
    assert rows == [[3, 2], [2, 6]]
    rows, _ = _call(params, LOGITS, DRAFTS, CU, [0.0, 0.0], prompt_len=None, pos=pos)
    assert rows == [[3, 2], [5]]  # progress unknown: strict


def test_installed_on_v2s_real_module_and_runner() -> None:
    import importlib

    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    from vllm_hust_vspec.host.patching import is_patched

    module = importlib.import_module(acceptance_v2.V2_REJECTION_MODULE)
    before = module.rejection_sample
    patcher = Patcher("test-acceptance-v2")
    relaxed = Settings(method="eagle", eagle_relaxed_accept_topk=2)
    try:
        assert acceptance_v2.install_acceptance_v2(patcher, lambda: relaxed)
        assert module.rejection_sample is not before
        assert is_patched(GPUModelRunner, "sample")
    finally:
        patcher.undo()
    assert module.rejection_sample is before
    assert not acceptance_v2.install_acceptance_v2(Patcher("strict"), lambda: Settings())
