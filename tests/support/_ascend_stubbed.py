"""Run inside a subprocess: import the real vllm-ascend (from an unpacked sdist) with
torch_npu / triton stubbed, apply vSpec's Ascend patches to the real classes and execute the
pure-torch parts on CPU. Prints one JSON object of findings.

    python _ascend_stubbed.py SDIST_ROOT

Stubs (the way vllm-ascend's own CPU unit tests work): ``torch_npu`` and friends are modules
whose every attribute is a MagicMock, ``torch.npu`` is a MagicMock, ``triton.runtime`` is a
MagicMock, and ``vllm_ascend._build_info`` (generated at build time) is stubbed.
``vllm_ascend.ops`` is loaded as a bare package (its ``__init__`` registers NPU custom ops and
on 0.23.0.post1 imports ``FusedMoE`` from ``vllm.model_executor.layers.fused_moe.layer``,
which vLLM 0.32 no longer exports); the submodules the spec-decode and sampler modules import
load normally.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import sys
import types
from types import SimpleNamespace
from typing import Any
from unittest.mock import MagicMock

from _fork_import import AnyModule  # this script's folder is on sys.path


def stub(name: str, path: str | None = None) -> types.ModuleType:
    mod = AnyModule(name)
    mod.__spec__ = importlib.util.spec_from_loader(name, loader=None)
    mod.__path__ = [path] if path else []  # type: ignore[attr-defined]
    sys.modules[name] = mod
    return mod


def install_stubs(root: str) -> None:
    runtime = MagicMock()
    runtime.driver.active.utils.get_device_properties.return_value = {
        "num_aic": 8, "num_vectorcore": 8,
    }
    sys.modules["triton.runtime"] = runtime
    for name in ("torch_npu", "torch_npu._C", "torch_npu._C._distributed_c10d", "torch_npu.npu",
                 "torch_npu.op_plugin", "torch_npu.op_plugin.atb",
                 "torch_npu.op_plugin.atb._atb_ops", "torch_npu.profiler", "torch_npu.contrib",
                 "torch_npu.dynamo", "torch_npu._inductor", "acl", "acl.rt",
                 "vllm_ascend._build_info"):
        stub(name)
    import torch

    torch.npu = MagicMock()  # type: ignore[attr-defined]
    sys.path.insert(0, root)
    stub("vllm_ascend.ops", os.path.join(root, "vllm_ascend", "ops"))


def ascend_config() -> Any:
    rs = SimpleNamespace(enable_block_verify=False, enable_entropy_verify=False,
                         posterior_threshold=0.0, posterior_alpha=0.0)
    return SimpleNamespace(rejection_sampler_config=rs, enable_reduce_sample=False)


def run(root: str) -> dict[str, Any]:
    install_stubs(root)
    import torch

    from vllm_hust_vspec.backends.acceptance import STRICT, greedy_accept
    from vllm_hust_vspec.host.patching import Patcher
    from vllm_hust_vspec.host.worker import ascend
    from vllm_hust_vspec.settings import Settings

    out: dict[str, Any] = {}
    rs = importlib.import_module("vllm_ascend.sample.rejection_sampler")
    base_mod = importlib.import_module("vllm_ascend.spec_decode.llm_base_proposer")
    eagle = importlib.import_module("vllm_ascend.spec_decode.eagle_proposer").AscendEagleProposer
    draft = importlib.import_module("vllm_ascend.spec_decode.draft_proposer")
    draft_cls = draft.AscendDraftModelProposer
    step = importlib.import_module("vllm_ascend.spec_decode.step3p5").AscendStep3p5MTPProposer
    try:
        importlib.import_module("vllm_ascend.worker.model_runner_v1")
        out["runner_import_error"] = None
    except ImportError as exc:  # an upstream symbol the pairing vLLM has and 0.32 lacks
        out["runner_import_error"] = str(exc)
    out["imported"] = True
    out["draft_mro"] = [c.__name__ for c in draft_cls.__mro__][:4]

    # --- live doctor tier on the real (stubbed) import ---------------------------------------
    from vllm_hust_vspec.host import abi

    live = abi.check_live("mtp", True, hosts=("vllm", "vllm_ascend"),
                          features=("acceptance",))
    out["live_ok"] = live.ok
    out["live_failures"] = live.failures()
    out["live_k_channel"] = live.decisions.get("k_channel")

    # --- strict: the host's own rejection path, executed on CPU, vs greedy_accept -------------
    rs.get_ascend_config = ascend_config
    gen = torch.Generator().manual_seed(0)
    same = True
    for _ in range(20):
        counts = torch.randint(0, 5, (6,), generator=gen).tolist()
        if max(counts) == 0:
            counts[0] = 1
        total = sum(counts)
        logits = torch.randn(total, 11, generator=gen)
        argmax = logits.argmax(-1)
        # int32 like vLLM's SpecDecodeMetadata / sampler outputs.
        drafts = torch.where(torch.rand(total, generator=gen) < 0.7, argmax,
                             torch.randint(0, 11, (total,), generator=gen)).to(torch.int32)
        bonus = torch.randint(0, 11, (6, 1), generator=gen, dtype=torch.int32)
        meta = SimpleNamespace(all_greedy=True, all_random=False, temperature=None)
        cu = torch.cumsum(torch.tensor(counts), 0)
        host_out = rs.rejection_sample(drafts.contiguous(), counts, max(counts), cu, None,
                                       logits.contiguous(), bonus.contiguous(), meta)
        ours = greedy_accept(drafts, counts, logits, bonus, STRICT, max_spec_len=max(counts))
        same = same and torch.equal(host_out.to(torch.int32), ours)
    out["strict_matches_host"] = same

    # --- install the adapter on the real classes ---------------------------------------------
    def plan_for(settings: Any) -> dict[str, Any]:
        patcher = Patcher("ascend-test")
        plan = ascend.install(patcher, lambda: settings)
        info = {
            "k_channel": plan.k_channel,
            "relaxed": plan.relaxed_acceptance,
            "strict_graph": plan.strict_graph,
            "eagle_wrapped": getattr(eagle._propose, "__vspec_backport__", False),
            "draft_wrapped": getattr(draft_cls._propose, "__vspec_backport__", False),
            "step3p5_wrapped": hasattr(step._propose, "__vspec_original__"),
            "rejection_wrapped": hasattr(rs.rejection_sample, "__vspec_original__"),
            "patched": sorted(r.label for r in patcher.records),
        }
        if plan.relaxed_acceptance:
            logits = torch.full((3, 8), -10.0)
            logits[0, 5], logits[0, 3] = 5.0, 4.0  # draft 3 is the target's 2nd choice
            logits[1, 2] = 5.0
            logits[2, 6], logits[2, 1] = 5.0, 4.0
            meta = SimpleNamespace(all_greedy=True, all_random=False, temperature=None,
                                   output_token_ids=[[0] * 20, [0] * 20])
            res = rs.rejection_sample(torch.tensor([3, 2, 1], dtype=torch.int32), [2, 1], 2,
                                      torch.tensor([2, 3]), None, logits,
                                      torch.tensor([[7], [7]], dtype=torch.int32), meta)
            info["relaxed_output"] = res.tolist()
        if plan.k_channel == "backport":
            info["backport_exec"] = exercise_backport(eagle, base_mod)
        patcher.undo()
        info["undone"] = not hasattr(rs.rejection_sample, "__vspec_original__") and not (
            getattr(eagle._propose, "__vspec_backport__", False))
        return info

    out["eagle_strict"] = plan_for(Settings(method="eagle"))
    out["eagle_relaxed"] = plan_for(Settings(method="eagle", eagle_relaxed_accept_topk=2))
    out["draft"] = plan_for(Settings(method="draft"))
    if out["runner_import_error"] is None:
        out["mtp_strict_graph"] = plan_for(
            Settings(method="mtp", ascend={"mtp_strict_graph": True}))
    return out


class Reached(Exception):
    """Raised by a stub one call into the real _propose body."""


def exercise_backport(eagle: type, base_mod: Any) -> dict[str, Any]:
    """Call the patched real class: the real ``_propose`` body runs with K = gamma.

    Its first statements run for real (batch size, the default sample indices); the next call
    (``set_inputs_first_pass``, which builds NPU attention inputs) is stubbed to report the K
    it sees and stop. Then ``self.num_speculative_tokens`` must be back at the maximum.
    """
    import torch

    p = object.__new__(eagle)
    p.num_speculative_tokens = 4
    p.method = "eagle"
    seen: list[int] = []

    def first_pass(**kwargs: Any) -> Any:
        seen.append(p.num_speculative_tokens)
        raise Reached

    p.set_inputs_first_pass = first_pass
    cad = SimpleNamespace(batch_size=lambda: 2, query_start_loc=torch.tensor([0, 1, 2]))
    result: dict[str, Any] = {}
    for gamma in (4, 2, 1):
        with contextlib.suppress(Reached):
            p._propose(
                target_token_ids=torch.zeros(2, dtype=torch.long),
                target_positions=torch.zeros(2, dtype=torch.long),
                target_hidden_states=torch.zeros(2, 4), next_token_ids=torch.zeros(2),
                token_indices_to_sample=None, common_attn_metadata=cad,
                target_model_batch_desc=None, sampling_metadata=None,
                scheduler_output=SimpleNamespace(num_spec_tokens_to_schedule=gamma),
            )
    result["k_seen_by_real_propose"] = seen
    result["k_after"] = p.num_speculative_tokens
    empty = p._propose(
        target_token_ids=torch.zeros(2, dtype=torch.long), common_attn_metadata=cad,
        scheduler_output=SimpleNamespace(num_spec_tokens_to_schedule=0),
    )
    result["gamma0_shape"] = list(empty.shape)
    return result


if __name__ == "__main__":
    print("VSPEC_JSON " + json.dumps(run(sys.argv[1])))
