"""vSpec graph-per-gamma (host/ascend/graph_widths.py) on the real vllm-ascend 0.23 runner.

One subprocess of the pair interpreter (``_pair_checks.py vspec``, and
``vspec-full-and-piecewise``) applies vSpec's Ascend ``install()`` (K backport +
graph-per-gamma, through a Patcher) with launch-like settings, builds ``NPUModelRunner`` for
the tiny MTP model (K = 3, FULL_DECODE_ONLY or FULL_AND_PIECEWISE, max_num_seqs 4, candidate
gammas 0..3, capture sizes batch x (1 + gamma) without 9 and 16), runs the host's own
``capture_model()`` on the fake ACL graph and then asks the runner's own dispatch, replays
each key and drafts through the real ``_propose``. Without the patches the same runner
captures width 4 only and a gamma < 3 batch runs eager
(test_import_pair.py::test_decode_batch_with_fewer_drafts_misses_the_graphs).
"""

from __future__ import annotations

from typing import Any

K = 3
SEQS = 4
# the widths' capture sizes: multiples of the width among the plan's sizes the config kept
# (all but 9 and 16), width .. width x max_num_seqs
SIZES = {1: [1, 2, 3, 4], 2: [2, 4, 6, 8], 3: [3, 6, 12], 4: [4, 8, 12]}


def test_abi_checks_for_graph_per_gamma_pass_live(pair_vspec: dict[str, Any]) -> None:
    abi = pair_vspec["abi"]
    for check in ("ascend.graph_dispatch", "ascend.draft_graph_params", "ascend.graph_widths",
                  "ascend.draft_graph_per_gamma", "ascend.k_channel"):
        assert abi[check]["ok"], (check, abi[check])
    # vSpec's own host/ascend install() with launch-like settings (adaptive MTP, K 3, gamma
    # 0..3, capture policy exact for 4 sequences): K backport + graph-per-gamma
    assert pair_vspec["plan_gammas"] == [0, 1, 2, 3]
    assert pair_vspec["plan_settings_sizes"] == [1, 2, 3, 4, 6, 8, 9, 12, 16]
    assert pair_vspec["k_channel"] == "backport"
    assert pair_vspec["plan_graph_widths"] == [1, 2, 3, 4]
    assert pair_vspec["patched"] == [
        "vllm.v1.cudagraph_dispatcher.CudagraphDispatcher.dispatch",
        "vllm_ascend.spec_decode.llm_base_proposer.AscendSpecDecodeBaseProposer._propose",
        "vllm_ascend.spec_decode.step3p5.AscendStep3p5MTPProposer._propose",
        "vllm_ascend.worker.model_runner_v1.NPUModelRunner._check_and_update_cudagraph_mode",
        "vllm_ascend.worker.model_runner_v1.NPUModelRunner._determine_batch_execution_and_padding",
        "vllm_ascend.worker.model_runner_v1.NPUModelRunner._pad_query_start_loc_for_fia",
        "vllm_ascend.worker.model_runner_v1.NPUModelRunner._warmup_and_capture",
        "vllm_ascend.worker.model_runner_v1.NPUModelRunner.propose_draft_token_ids",
    ]
    assert pair_vspec["undone"]


def test_keys_per_width_do_not_collide(pair_vspec: dict[str, Any]) -> None:
    v = pair_vspec
    assert v["widths"] == [1, 2, 3, 4]
    assert v["sizes"] == {str(w): s for w, s in SIZES.items()}
    expected = sorted([s, s // w, True] for w, sizes in SIZES.items() for s in sizes)
    assert v["full_keys"] == expected  # one uniform FULL key per (width, size)
    assert len(v["full_keys"]) == 14
    # 4 tokens exist at widths 1, 2 and 4: three keys, told apart by num_reqs
    assert [k for k in v["full_keys"] if k[0] == 4] == [[4, 1, True], [4, 2, True],
                                                         [4, 4, True]]
    assert v["capture_sizes"] == [1, 2, 3, 4, 6, 8, 12]


def test_capture_model_captures_every_width_and_every_draft_gamma(
        pair_vspec: dict[str, Any]) -> None:
    v = pair_vspec
    # target: one graph per key; draft: one merged graph per gamma >= 1 at its width's sizes
    assert v["target_entries"] == v["full_keys"]
    expected_draft = sorted([g, s, s // (g + 1), True]
                            for g in (1, 2, 3) for s in SIZES[g + 1])
    assert v["draft_entries"] == expected_draft
    assert v["captures_by_mode"]["FULL"] == 14 + 10
    if v["cudagraph_mode"] == "FULL_DECODE_ONLY":
        assert v["captures_by_mode"] == {"FULL": 24}
    else:  # FULL_AND_PIECEWISE: the host's piecewise graphs for mixed batches as well
        assert v["cudagraph_mode"] == "FULL_AND_PIECEWISE"
        assert v["captures_by_mode"]["PIECEWISE"] > 0
    assert v["graph_ids_unique"]
    assert v["draft_runnable"] == "GammaDraftGraphs"
    assert v["draft_graph_wrappers"] == {"1": "ACLGraphWrapper", "2": "ACLGraphWrapper",
                                         "3": "ACLGraphWrapper"}
    assert v["draft_wrappers_distinct"]
    assert v["draft_gammas"] == [1, 2, 3]
    assert v["missing_calls"] == []


def test_graph_params_isolated_per_width_and_per_gamma(pair_vspec: dict[str, Any]) -> None:
    v = pair_vspec
    assert v["target_params_type"] == "RoutedGraphParams"
    assert v["target_param_sizes"] == {str(w): s for w, s in SIZES.items()}
    assert v["draft_param_sizes"] == {str(g): SIZES[g + 1] for g in (1, 2, 3)}
    # every target graph recorded its 2 attention ops (2 layers) in its own width's params
    assert v["target_attn_params"] == {str(w): {str(s): 2 for s in sizes}
                                       for w, sizes in SIZES.items()}
    # the gamma-g merged draft graph holds g steps x 1 MTP layer: the loop ran g steps
    assert v["draft_attn_params"] == {str(g): {str(s): g for s in SIZES[g + 1]}
                                      for g in (1, 2, 3)}
    iso = v["same_tokens_isolated"]
    assert iso["4"]["widths"] == [1, 2, 4] and iso["8"]["widths"] == [2, 4]
    assert iso["6"]["widths"] == [2, 3] and iso["12"]["widths"] == [3, 4]
    assert all(e["handles_distinct"] for e in iso.values())


def test_each_gamma_and_batch_dispatches_its_own_graph(pair_vspec: dict[str, Any]) -> None:
    d = pair_vspec["dispatch"]
    for gamma in range(K + 1):
        w = gamma + 1
        for reqs in range(1, SEQS + 1):
            n = reqs * w
            hit = d[f"gamma={gamma},reqs={reqs}"]
            if n > SIZES[w][-1]:
                assert hit["target"] == ["NONE", n, None, False]  # 4 x width 4: no 16 graph
                continue
            padded = min(s for s in SIZES[w] if s >= n)
            assert hit["target"] == ["FULL", padded, padded // w, True], (gamma, reqs, hit)
            if gamma >= 1:  # the drafter's first pass: the same key, the gamma's draft graph
                assert hit["draft_first_pass"] == hit["target"]
                assert hit["draft_second_dispatch"] == hit["target"]
    # 3 requests at width 3 pad to the 12-token graph: a dummy 4th request of width 3
    assert d["gamma=2,reqs=3"]["target"] == ["FULL", 12, 4, True]
    assert d["gamma=2,reqs=3"]["fia_query_start_loc"] == [0, 3, 6, 9, 12]
    # not uniform decode: what the host does without vSpec (FULL_DECODE_ONLY: eager;
    # FULL_AND_PIECEWISE: its piecewise graphs at its own padded sizes, 5 -> 8 tokens)
    if pair_vspec["cudagraph_mode"] == "FULL_DECODE_ONLY":
        assert d["mixed"]["target"] == ["NONE", 5, None, False]
        assert d["prefill"]["target"] == ["NONE", 4, None, False]
    else:
        assert d["mixed"]["target"] == ["PIECEWISE", 8, None, False]
        assert d["prefill"]["target"] == ["PIECEWISE", 4, None, False]


def test_switching_frame_drafts_eager_only_where_it_must(pair_vspec: dict[str, Any]) -> None:
    s = pair_vspec["switching"]
    # the controller changed gamma: the target still replays its width's graph; the drafter
    # (gamma != width - 1: no graph for that pair) runs eager for this frame only
    for key in ("width=4,draft_gamma=1", "width=4,draft_gamma=2", "width=2,draft_gamma=3",
                "width=1,draft_gamma=1"):
        assert s[key]["target"][0] == "FULL", key
        assert s[key]["draft_first_pass"][0] == "NONE", key
        assert s[key]["draft_second_dispatch"][0] == "NONE", key
    assert s["width=3,draft_gamma=2"]["draft_first_pass"] == ["FULL", 6, 2, True]
    frames = pair_vspec["eager_frames"]
    assert {(f["width"], f["gamma"]) for f in frames} == {(4, 1), (4, 2), (2, 3), (1, 1)}


def test_replay_uses_its_own_graph_and_updates_only_its_own_params(
        pair_vspec: dict[str, Any]) -> None:
    r = pair_vspec["replays"]
    assert set(r) == {f"{w}x{s}" for w, sizes in SIZES.items() for s in sizes}
    for key, rep in r.items():
        w, n = (int(x) for x in key.split("x"))
        assert rep["captures"] == 0, key  # replay, never a capture after capture_model
        assert rep["replayed"] == rep["expected"], key  # target graph (+ gamma w-1 draft)
        expected = [["target", w, n]] + ([["draft", w - 1, n]] if w > 1 else [])
        assert sorted(rep["updated_params"]) == sorted(expected), key


def test_mtp_strict_graph_names_the_batch_descriptor(pair_vspec: dict[str, Any]) -> None:
    s = pair_vspec["strict"]
    err = s["gamma=3,reqs=4"]["error"]
    assert "vSpec mtp_strict_graph" in err and "4 requests x width 4" in err
    assert "BatchDescriptor(num_tokens=16, num_reqs=None, uniform=False" in err
    assert "Capture sizes: [4, 8, 12]" in err
    assert s["gamma=3,reqs=3"] == {"ok": ["FULL", 12, 3, True]}
    assert s["gamma=1,reqs=4"] == {"ok": ["FULL", 8, 4, True]}
    assert s["gamma=0,reqs=4"] == {"ok": ["FULL", 4, 4, True]}


def test_real_propose_through_the_k_backport_replays_the_gammas_draft_graph(
        pair_vspec: dict[str, Any]) -> None:
    """AscendSpecDecodeBaseProposer._propose (wrapped by vSpec's K backport) after a decode
    step of 2 requests: gamma from the scheduler output; steady frames replay the gamma's own
    merged draft graph and patch only its params, switching frames draft eager."""
    assert pair_vspec["k_channel"] == "backport"
    p = pair_vspec["proposes"]
    assert all("error" not in v for v in p.values()), {k: v.get("error") for k, v in p.items()}
    for width, gamma in ((2, 1), (3, 2), (4, 3)):  # steady: drafted gamma = width - 1
        r = p[f"width={width},gamma={gamma}"]
        assert r["target"] == ["FULL", 2 * width, 2, True]
        assert r["drafts_shape"] == [2, gamma]
        assert r["replayed"] == r["expected"] and len(r["replayed"]) == 1
        assert r["updated_params"] == [["draft", gamma, 2 * width]]
        assert r["captures"] == 0 and r["num_speculative_tokens_after"] == K
    for width, gamma in ((4, 1), (2, 3)):  # switching frames: eager, exactly gamma drafts
        r = p[f"width={width},gamma={gamma}"]
        assert r["target"][0] == "FULL"
        assert r["drafts_shape"] == [2, gamma]
        assert r["replayed"] == [] and r["updated_params"] == [] and r["captures"] == 0
