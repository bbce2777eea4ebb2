"""The vLLM-Ascend-HUST proposers, executed on CPU: the drafter runs exactly gamma passes.

Each code line runs in its own subprocess (``_ascend_hust_exec.py``: the fork's saved files
imported against the installed vLLM with the NPU faked), over frames of changing gamma, sync
and async. Counted: the draft model's forward passes, the per-step attention metadata built,
the width of the drafts handed back, and the proposer's step attributes after each call.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(TESTS))
from _ascend_hust_tree import ascend_hust_tree, ascend_hust_upstream_comparison  # noqa: E402

# every test runs the fork's files in a subprocess (tens of seconds each on 2 cores)
pytestmark = pytest.mark.slow

MAX_K = 4
_cache: dict[str, dict[str, Any]] = {}


def run(line: str) -> dict[str, Any]:
    if line not in _cache:
        tree, upstream = ascend_hust_tree(), ascend_hust_upstream_comparison()
        proc = subprocess.run(
            [sys.executable, str(TESTS / "support" / "_ascend_hust_exec.py"), line, str(tree),
             str(upstream)],
            capture_output=True, text=True, timeout=600,
        )
        out = next((ln for ln in proc.stdout.splitlines() if ln.startswith("EXEC_JSON ")), None)
        assert out, f"fork run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        found = json.loads(out[len("EXEC_JSON "):])
        assert "error" not in found, found["error"]
        _cache[line] = found
    return _cache[line]


def _check_gamma_frames(frames: list[dict[str, Any]], *, restores: bool,
                        sync_zero: bool = True) -> None:
    assert {f["gamma"] for f in frames} >= {0, 1, 2, 3, MAX_K}
    for f in frames:
        gamma = f["gamma"]
        # gamma 0 in sync mode drafts one token (draft KV cache kept in step) and hands none
        assert f["passes"] == max(gamma, 1 if sync_zero else 0), f
        assert f["attn_steps"] == max(gamma - 1, 0), f
        assert f["shape"] == [3, gamma], f
        if restores:
            assert f["k_after"] == MAX_K and f["steps_after"] == MAX_K, f


def test_pearl_line_alone_drafts_its_configured_k_whatever_is_asked() -> None:
    """Why the backport exists: the line's K-less _propose loops num_draft_steps (fixed)."""
    frames = run("pearl")["host_alone"]
    assert all(f["passes"] == MAX_K and f["shape"] == [3, MAX_K] for f in frames)


@pytest.mark.parametrize("call", ["scheduler_output", "k_keyword"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_pearl_line_with_vspec_drafts_gamma_passes(call: str, mode: str) -> None:
    """The backport on the real K-less _propose: gamma from the scheduler output (the line's
    own runner) or from the main-line runner's num_speculative_tokens keyword."""
    found = run("pearl")
    assert found["k_channel"] == "backport"
    _check_gamma_frames(found[f"{call}_{mode}"], restores=True)
    assert found["undone"]


@pytest.mark.parametrize("zero", ["sticky", "sync"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_native_k_line_drafts_gamma_passes(mode: str, zero: str) -> None:
    """Upstream's K-taking _propose (the fork main line's contract): the runner's K reaches
    the loops. vSpec patches nothing there, but for sync gamma 0, where the host's K = 0 path
    would skip the drafter's first pass."""
    found = run("upstream")
    assert found["k_channel"] == "native"
    assert bool(found[f"patched_{zero}"]) == (zero == "sync")
    _check_gamma_frames(found[f"k_keyword_{mode}_{zero}"], restores=False,
                        sync_zero=zero == "sync")


def test_only_the_core_tree_module_is_stubbed_on_the_vllm_side() -> None:
    """What of vLLM was not real in these runs (the core's tree verifier is a fork patch)."""
    assert set(run("pearl")["stubbed_vllm"]) <= {"vllm._deepselect_C", "vllm.v1.spec_decode.tree"}


def test_relaxed_acceptance_applies_to_the_forks_all_greedy_batches() -> None:
    """The fork's constraints hand all-greedy batches over as ``(logits, None)``; relaxed
    top-2 acceptance keeps the second-choice drafts there, strict (the host) rejects them."""
    found = run("rejection")
    assert found["greedy_constraints_shape"] == "tuple[2], indices=None"
    assert found["installed"]
    assert found["strict_greedy"] == [1, 1]
    assert found["relaxed_greedy"] == [4, 4]
    # a batch with a sampled request keeps the host's own rejection sampling: its greedy
    # request is verified strictly (the sampled one's count is random)
    assert found["relaxed_mixed"][0] == found["strict_greedy"][0]
    assert found["undone_greedy"] == found["strict_greedy"]


GAMMAS = {1, 2, 3, MAX_K}


def test_full_decode_only_without_vspec_leaves_every_narrower_verify_width_eager() -> None:
    """The fork runner's uniform-decode test needs 1 + configured K tokens a request."""
    host = run("graphs")["host_FULL_DECODE_ONLY"]
    assert host["target"] == {"1": "NONE", "2": "NONE", "3": "NONE", "4": "NONE",
                              str(MAX_K + 1): "FULL"}
    narrow = [f for f in host["frames"] if f["gamma"] < MAX_K]
    assert narrow and all(f["target_mode"] == "NONE" and f["draft"] == "eager" for f in narrow)


def test_combined_full_without_vspec_replays_one_draft_graph_whatever_gamma() -> None:
    """Graphs keyed by BatchDescriptor only: every frame at the shared token count replays the
    draft graph captured first (K steps, its batch), whatever the step asked for."""
    frames = run("graphs")["host_FULL"]["frames"]
    assert len({f["graph"] for f in frames}) == 1
    wrong = [f for f in frames if f["shape"] != [f["batch"], f["gamma"]]]
    assert {f["gamma"] for f in wrong} == {1, 2, 3}
    assert all(f["draft_steps"] == MAX_K for f in frames)


@pytest.mark.parametrize("mode", ["FULL_DECODE_ONLY", "FULL"])
def test_vspec_graphs_every_verify_width_and_draft_gamma_on_the_native_k_shape(mode: str) -> None:
    """vSpec's per-width target keys and per-gamma draft graphs on the fork's runner and
    ACLGraphWrapper with upstream's K-taking proposer: every frame's target runs FULL, every
    draft replays a graph captured with exactly gamma steps, one graph per gamma."""
    found = run("graphs")[f"vspec_{mode}"]
    assert set(found["target"].values()) == {"FULL"}
    frames = found["frames"]
    assert {f["gamma"] for f in frames} == GAMMAS
    for f in frames:
        assert f["target_mode"] == "FULL", f
        if mode == "FULL_DECODE_ONLY":
            assert f["target_width"] == 1 + f["gamma"], f
        assert f["draft"] == "replay" and f["draft_steps"] == f["gamma"], f
        assert f["shape"] == [f["batch"], f["gamma"]], f
    graph_of = {f["gamma"]: f["graph"] for f in frames}
    assert all(graph_of[f["gamma"]] == f["graph"] for f in frames)
    assert len(set(graph_of.values())) == len(GAMMAS)
    assert found["draft_gammas"] == sorted(GAMMAS)


def test_the_main_line_runner_drives_the_drafter_from_the_scheduler_output() -> None:
    """The fork's own ``propose_draft_token_ids`` passes ``num_spec_tokens_to_schedule`` (the
    field vSpec's hook writes) to a K-taking ``_propose``; its draft copy and
    ``take_draft_token_ids`` hand the scheduler exactly gamma drafts per request."""
    frames = run("runner_k")["frames"]
    assert {f["gamma"] for f in frames} >= {0, 1, 2, 3, MAX_K}
    for f in frames:
        gamma = f["gamma"]
        assert f["passes"] == gamma and f["shape"] == [3, gamma], f
        assert f["prev_num_spec_tokens"] == gamma, f
        assert f["scheduler_gets"] == [gamma] * 3, f
