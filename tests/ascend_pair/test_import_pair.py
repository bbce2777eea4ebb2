"""vllm-ascend 0.23.0.post1 against its own upstream (vLLM 0.23.0) on CPU, with only the NPU
stack faked (tests/fake_npu: torch_npu, torch.npu, ACL graphs; triton hidden).

Skips with the setup command when .cache/ascend023 is not built. See docs/ascend-pair.md.
"""

from __future__ import annotations

from typing import Any

import pytest

RUNNER_MODULES = (
    "vllm_ascend.compilation.acl_graph",
    "vllm_ascend.worker.model_runner_v1",
    "vllm_ascend.spec_decode",
    "vllm_ascend.spec_decode.llm_base_proposer",
    "vllm_ascend.spec_decode.eagle_proposer",
    "vllm_ascend.spec_decode.draft_proposer",
    "vllm_ascend.spec_decode.step3p5",
    "vllm_ascend.sample.rejection_sampler",
)


def test_pair_layering(pair_findings: dict[str, Any]) -> None:
    imp = pair_findings["imports"]
    assert imp["vllm"] == "0.23.0"
    assert "/.cache/ascend023/venv/" in imp["vllm_file"]
    assert imp["vllm_ascend"] == "0.23.0.post1"
    assert imp["torch"].startswith("2.13.")
    # vllm-ascend's platform plugin (entry point of the built wheel) is the active platform
    assert (imp["platform_module"], imp["platform"]) == ("vllm_ascend.platform", "NPUPlatform")
    assert imp["has_triton"] is False  # vLLM's TritonPlaceholder stands in for triton-ascend


def test_runner_graph_and_spec_modules_import(pair_findings: dict[str, Any]) -> None:
    imported = pair_findings["imports"]["imported"]
    failed = {m: err for m, err in imported.items() if err}
    assert not failed, failed
    assert set(RUNNER_MODULES) <= set(imported)
    imp = pair_findings["imports"]
    assert {"AscendEagleProposer", "AscendDraftModelProposer",
            "AscendStep3p5MTPProposer"} <= set(imp["proposers"])
    assert imp["runner_mro"][:2] == ["NPUModelRunner", "GPUModelRunner"]
    assert imp["runner_has"]["capture_model"] and imp["runner_has"]["propose_draft_token_ids"]


def test_acl_graph_wrapper_capture_and_replay(pair_findings: dict[str, Any]) -> None:
    g = pair_findings["graph"]
    # two batch descriptors captured once each, replayed once each; NONE/mismatched mode eager
    assert g["entries"] == [[2, 2, True], [4, 4, True]]
    assert g["num_cudagraph_captured_delta"] == 2
    assert [c["batch_descriptor"]["num_tokens"] for c in g["captures"][:2]] == [4, 2]
    assert all(c["runtime_mode"] == "FULL" for c in g["captures"])
    assert [r["captured_for"]["num_tokens"] for r in g["replays"][:2]] == [4, 2]
    assert g["replay_returns_captured_output"] and g["replay_output_matches_eager"]
    assert g["runnable_calls"] == 6  # 2 captures + 2 emulated replays + NONE + PIECEWISE
    assert g["wrapper_pool"][0] == "fake-pool"
    # graph params: set once per process; workspaces recorded per size at capture time
    assert g["double_set_raises"]
    assert g["captures"][0]["graph_params"]["target"]["sizes"] == [1, 2, 4]
    assert g["target_workspaces"] == [4]


def test_graph_task_update_bookkeeping(pair_findings: dict[str, Any]) -> None:
    g = pair_findings["graph"]
    kinds = [k for k, _ in g["task_groups"]]
    assert kinds == ["task_group_begin", "task_group_end", "task_update_begin", "task_update_end"]
    assert len({graph for _, graph in g["task_groups"]}) == 1  # all on the captured graph
    assert g["handle_updates"] == [1]
    params = g["last_capture_graph_params"]["target"]
    assert params["attn_params"] == {"1": 1} and params["handles"] == {"1": 1}


def test_fake_npu_ops(pair_findings: dict[str, Any]) -> None:
    g = pair_findings["graph"]
    assert g["missing_op_raises"] == (
        "fake NPU: torch_npu.npu_moe_distribute_dispatch has no CPU equivalent")
    assert g["format_cast_identity"]
    assert g["fia_matches_sdpa"]


def _runner(pair_findings: dict[str, Any]) -> dict[str, Any]:
    r = pair_findings["runner"]
    if "skipped" in r:
        pytest.skip(r["skipped"])
    return r


def test_npu_model_runner_captures_target_and_draft_graphs(pair_findings: dict[str, Any]) -> None:
    r = _runner(pair_findings)
    k = r["k"]
    assert r["uniform_decode_query_len"] == k + 1
    assert r["use_aclgraph"] and r["drafter_use_cuda_graph"] and r["use_async_scheduling"]
    assert r["drafter"] == "AscendEagleProposer"  # MTP goes through the eagle proposer
    assert r["model_wrapper"] == r["draft_runnable"] == "ACLGraphWrapper"
    # FULL_DECODE_ONLY: sizes rounded up to multiples of 1 + k; one uniform FULL key each
    assert r["cudagraph_mode"] == "FULL_DECODE_ONLY"
    assert all(s % (k + 1) == 0 for s in r["capture_sizes"])
    assert r["full_keys"] == [[s, s // (k + 1), True] for s in r["capture_sizes"]]
    assert r["piecewise_keys"] == 0
    assert r["graph_param_sizes"] == r["draft_graph_param_sizes"] == r["capture_sizes"]
    # capture_model: per size (largest first) the target graph, then the merged draft graph
    sizes = sorted(r["capture_sizes"], reverse=True)
    assert [c[1] for c in r["captures"]] == [s for s in sizes for _ in (0, 1)]
    assert r["target_entries"] == r["draft_entries"] == r["capture_sizes"]
    # the draft graph holds k steps x (1 MTP layer) attention ops per size, keyed by size only
    assert set(r["draft_attn_params"].values()) == {k}
    assert set(r["target_attn_params"].values()) == {2}  # the tiny target has 2 layers
    assert r["missing_calls"] == []


def test_decode_batch_with_fewer_drafts_misses_the_graphs(pair_findings: dict[str, Any]) -> None:
    r = _runner(pair_findings)
    k, d = r["k"], r["dispatch"]
    assert d[f"gamma={k},reqs=2"]["target"] == ["FULL", 2 * (k + 1), 2, True]
    assert d[f"gamma={k},reqs=2"]["draft_first_pass"][0] == "FULL"
    assert d[f"gamma={k},reqs=3"]["target"][:3] == ["FULL", 16, 4]  # padded to the 16 graph
    for gamma in (k - 1, 1, 0):
        hit = d[f"gamma={gamma},reqs=2"]
        # 1 + gamma tokens per request != uniform_decode_query_len: not uniform -> no key
        assert hit["target"] == ["NONE", 2 * (gamma + 1), None, False]
        assert hit["draft_first_pass"][0] == "NONE"
