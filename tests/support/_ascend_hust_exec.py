"""Run inside a subprocess: execute the saved vLLM-Ascend-HUST proposer on CPU, gamma per step.

    python _ascend_hust_exec.py pearl|upstream|rejection TREE UPSTREAM_TREE

``pearl``: the fork's PEARL-line ``llm_base_proposer.py`` (K-less ``_propose``, loops over
``num_draft_steps``) with vSpec's K backport installed, called as the line's own runner calls
it (``scheduler_output=``) and as the main-line runner calls it (``num_speculative_tokens=``).
``upstream``: upstream vllm-ascend's proposer of the same contract as the fork's main line
(``_propose(num_speculative_tokens, ...)``), which vSpec leaves as it is.

``rejection``: the fork's ``AscendRejectionSampler.forward`` with vSpec's relaxed acceptance.

The proposer runs execute the real ``_propose`` and ``_run_merged_draft`` bodies, sync and
async, over frames of changing gamma. Stubbed: the fake NPU (``tests/fake_npu``), the NPU
attention-metadata builders (``set_inputs_first_pass``, the metadata builder,
``attn_update_stack_num_spec_norm``: recorded, they return their inputs), the forward context
and the draft model, a tiny torch module that counts its forward passes. Prints one
``EXEC_JSON`` line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _fork_import as fi  # noqa: E402
from _ascend_hust_runner import run_graphs, run_runner_k  # noqa: E402
from _fork_proposer import (  # noqa: E402
    VOCAB,
    call_kwargs,
    fork_module_globals,
    frames,
    make_proposer,
)


def load_proposer(tree: Path, proposer_root: Path) -> Any:
    """The proposer module from ``proposer_root`` (the fork's tree or upstream's), with the
    fork's ACL graph module and the NPU configuration its eager path reads."""
    mods = fi.load_fork({
        "vllm_ascend.compilation.acl_graph": tree / "vllm_ascend/compilation/acl_graph.py",
        "vllm_ascend.spec_decode.llm_base_proposer":
            proposer_root / "vllm_ascend/spec_decode/llm_base_proposer.py",
    }, HERE.parent)
    mod = mods["vllm_ascend.spec_decode.llm_base_proposer"]
    fork_module_globals(mod, {"fc": None})
    return mod


def run_pearl(tree: Path) -> dict[str, Any]:
    mod = load_proposer(tree, tree)
    cls = mod.AscendSpecDecodeBaseProposer
    from vllm_hust_vspec.host.patching import Patcher
    from vllm_hust_vspec.host.worker.ascend.proposer import install_proposer

    result: dict[str, Any] = {"stubbed_vllm": sorted(set(fi.STUBBED_VLLM))}
    # without vSpec: what the line's own _propose drafts whatever the scheduler asks
    p, rec = make_proposer(cls, mod, async_on=False, line="pearl")
    result["host_alone"] = frames(p, rec, lambda q, s, g: q._propose(
        **call_kwargs(s), scheduler_output=SimpleNamespace(num_spec_tokens_to_schedule=g)))
    patcher = Patcher("fork-exec")
    result["k_channel"] = install_proposer(patcher, cls, lambda: "sync")
    for async_on in (False, True):
        tag = "async" if async_on else "sync"
        p, rec = make_proposer(cls, mod, async_on=async_on, line="pearl")
        result[f"scheduler_output_{tag}"] = frames(p, rec, lambda q, s, g: q._propose(
            **call_kwargs(s), scheduler_output=SimpleNamespace(num_spec_tokens_to_schedule=g)))
        # the main-line runner's call shape on this K-less proposer
        p, rec = make_proposer(cls, mod, async_on=async_on, line="pearl")
        result[f"k_keyword_{tag}"] = frames(p, rec, lambda q, s, g: q._propose(
            **call_kwargs(s), num_speculative_tokens=g, scheduler_output=None))
    patcher.undo()
    result["undone"] = not getattr(cls._propose, "__vspec_backport__", False)
    return result


def run_upstream(tree: Path, upstream: Path) -> dict[str, Any]:
    mod = load_proposer(tree, upstream)
    cls = mod.AscendSpecDecodeBaseProposer
    from vllm_hust_vspec.host.patching import Patcher
    from vllm_hust_vspec.host.worker.ascend.proposer import install_proposer

    result: dict[str, Any] = {"stubbed_vllm": sorted(set(fi.STUBBED_VLLM))}
    for zero in ("sticky", "sync"):
        patcher = Patcher("fork-exec")
        result["k_channel"] = install_proposer(patcher, cls, lambda z=zero: z)
        result[f"patched_{zero}"] = sorted(r.label for r in patcher.records)
        for async_on in (False, True):
            tag = "async" if async_on else "sync"
            p, rec = make_proposer(cls, mod, async_on=async_on, line="upstream")
            result[f"k_keyword_{tag}_{zero}"] = frames(p, rec, lambda q, s, g: q._propose(
                num_speculative_tokens=g, **call_kwargs(s)))
        patcher.undo()
    return result


def _sampling_metadata(batch: int, greedy: list[bool]) -> Any:
    import torch
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    temp = torch.tensor([0.0 if g else 1.0 for g in greedy])
    return SamplingMetadata(
        temperature=None if all(greedy) else temp, all_greedy=all(greedy),
        all_random=not any(greedy), top_p=None, top_k=None, generators={},
        max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=torch.zeros(batch), presence_penalties=torch.zeros(batch),
        repetition_penalties=torch.ones(batch), output_token_ids=[[0] * 20] * batch,
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=LogitsProcessors(),
    )


def core_sampler_output() -> type:
    """vLLM's SamplerOutput with the field the vLLM-HUST core's SpecSLO patch adds
    (``accepted_token_indices``), which the fork's sampler fills."""
    import dataclasses

    from vllm.v1.outputs import SamplerOutput

    @dataclasses.dataclass
    class CoreSamplerOutput(SamplerOutput):
        accepted_token_indices: Any = None

    return CoreSamplerOutput


def run_rejection(tree: Path) -> dict[str, Any]:
    """The fork's AscendRejectionSampler.forward, strict vs vSpec's relaxed top-2 acceptance,
    on an all-greedy batch (constraints return ``(logits, None)``) and a mixed one."""
    mods = fi.load_fork({
        "vllm_ascend.spec_decode.tree_kv": tree / "vllm_ascend/spec_decode/tree_kv.py",
        "vllm_ascend.sample.sampler": tree / "vllm_ascend/sample/sampler.py",
        "vllm_ascend.sample.rejection_sampler": tree / "vllm_ascend/sample/rejection_sampler.py",
    }, HERE.parent)
    import torch
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    from vllm_hust_vspec.backends.acceptance import params_from_settings
    from vllm_hust_vspec.host.patching import Patcher
    from vllm_hust_vspec.host.worker.ascend.rejection import install_rejection
    from vllm_hust_vspec.settings import Settings

    rs = mods["vllm_ascend.sample.rejection_sampler"]
    cfg = SimpleNamespace(enable_reduce_sample=False, rejection_sampler_config=SimpleNamespace(
        enable_block_verify=False, enable_entropy_verify=False, posterior_threshold=0.0,
        posterior_alpha=0.0))
    rs.get_ascend_config = mods["vllm_ascend.sample.sampler"].get_ascend_config = lambda: cfg
    rs.SamplerOutput = core_sampler_output()
    sampler = rs.AscendRejectionSampler(Sampler())
    # two requests, three drafts each; every draft is the target's second choice
    drafts = [[3, 5, 7], [2, 4, 6]]
    logits = torch.full((8, VOCAB), -10.0)
    rows = [(0, 3, 9), (1, 5, 9), (2, 7, 9), (4, 2, 11), (5, 4, 11), (6, 6, 11)]
    for row, draft, top in rows:
        logits[row, top], logits[row, draft] = 5.0, 4.0
    logits[3, 1] = logits[7, 1] = 5.0  # bonus rows

    def verify(greedy: list[bool]) -> list[int]:
        meta = SpecDecodeMetadata.make_dummy(drafts, torch.device("cpu"))
        meta.target_logits_indices = torch.tensor([0, 1, 2, 4, 5, 6])
        meta.bonus_logits_indices = torch.tensor([3, 7])
        meta.tree_parent_indices = meta.tree_depth = None
        out = sampler(meta, None, logits.clone(), _sampling_metadata(2, greedy))
        return [int((row != -1).sum()) for row in out.sampled_token_ids]

    constrained = rs.apply_sampling_constraints(
        logits[:6].clone(), torch.tensor([3, 6]), _sampling_metadata(2, [True, True]), None)
    result: dict[str, Any] = {
        "greedy_constraints_shape": type(constrained).__name__ + (
            f"[{len(constrained)}], indices={constrained[1]}"
            if isinstance(constrained, tuple) else ""),
        "strict_greedy": verify([True, True]),
    }
    settings = Settings(method="eagle", eagle_relaxed_accept_topk=2)
    patcher = Patcher("fork-exec")
    result["installed"] = install_rejection(patcher, rs, lambda: params_from_settings(settings))
    result["relaxed_greedy"] = verify([True, True])
    result["relaxed_mixed"] = verify([True, False])
    patcher.undo()
    result["undone_greedy"] = verify([True, True])
    return result


def main() -> None:
    mode, tree, upstream = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    runs = {"pearl": lambda: run_pearl(tree), "upstream": lambda: run_upstream(tree, upstream),
            "rejection": lambda: run_rejection(tree),
            "graphs": lambda: run_graphs(tree, upstream),
            "runner_k": lambda: run_runner_k(tree, upstream)}
    try:
        found = runs[mode]()
    except BaseException:  # noqa: BLE001 - report the traceback to the test
        import traceback

        found = {"error": traceback.format_exc()}
    print("EXEC_JSON " + json.dumps(found))


if __name__ == "__main__":
    main()
