"""vSpec graph-per-gamma (host/worker/ascend/graph_widths.py) on the real vllm-ascend 0.23 runner.

One subprocess of the pair interpreter (``_pair_checks.py vspec``, ``vspec-full-and-piecewise``
and ``vspec-full``) applies vSpec's Ascend ``install()`` (K backport + graph-per-gamma, through
a Patcher) with launch-like settings, builds ``NPUModelRunner`` for the tiny MTP model (K = 3,
FULL_DECODE_ONLY, FULL_AND_PIECEWISE or combined FULL, max_num_seqs 4, candidate
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
# combined FULL: one shared key per size (vLLM rounded the config's sizes to [4, 8, 12];
# vSpec adds the widths' sizes back), num_reqs = min(size, max_num_seqs), not uniform
SHARED = [1, 2, 3, 4, 6, 8, 12]
# gamma g < K: the shared sizes a steady width-(1 + g) batch pads to; gamma K: every key
DRAFT_SIZES = {1: SIZES[2], 2: SIZES[3], 3: SHARED}


def _combined(v: dict[str, Any]) -> bool:
    return v["cudagraph_mode"] == "FULL"


def _key(n: int) -> list[Any]:
    """The combined FULL key of a shared size."""
    return [n, min(n, SEQS), False]


def _pad(n: int) -> int:
    return min(s for s in SHARED if s >= n)


def test_abi_checks_for_graph_per_gamma_pass_live(pair_vspec: dict[str, Any]) -> None:
    abi = pair_vspec["abi"]
    for check in ("ascend.graph_dispatch", "ascend.draft_graph_params", "ascend.graph_widths",
                  "ascend.draft_capture", "ascend.draft_graph_per_gamma", "ascend.k_channel",
                  "ascend.async_draft_stride"):
        assert abi[check]["ok"], (check, abi[check])
    # vSpec's own host/worker/ascend install() with launch-like settings (adaptive MTP, K 3, gamma
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
        "vllm_ascend.worker.model_runner_v1.NPUModelRunner._copy_draft_token_ids_to_cpu",
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
    assert v["capture_sizes"] == [1, 2, 3, 4, 6, 8, 12]
    if _combined(v):
        # no per-width keys: the host's layout-free key per shared size, nothing uniform
        assert v["combined"] and v["shared_sizes"] == SHARED
        assert v["full_keys"] == [_key(n) for n in SHARED]
        assert v["draft_sizes"] == {str(g): s for g, s in DRAFT_SIZES.items()}
        return
    assert not v["combined"]
    expected = sorted([s, s // w, True] for w, sizes in SIZES.items() for s in sizes)
    assert v["full_keys"] == expected  # one uniform FULL key per (width, size)
    assert len(v["full_keys"]) == 14
    # 4 tokens exist at widths 1, 2 and 4: three keys, told apart by num_reqs
    assert [k for k in v["full_keys"] if k[0] == 4] == [[4, 1, True], [4, 2, True],
                                                         [4, 4, True]]


def test_capture_model_captures_every_width_and_every_draft_gamma(
        pair_vspec: dict[str, Any]) -> None:
    v = pair_vspec
    # target: one graph per key; draft: one merged graph per gamma >= 1 at its sizes
    assert v["target_entries"] == v["full_keys"]
    if _combined(v):
        # 7 shared target graphs; drafts 4 (gamma 1) + 3 (gamma 2) + 7 (gamma 3, the host's)
        assert v["draft_entries"] == sorted([g, *_key(n)] for g, ns in DRAFT_SIZES.items()
                                            for n in ns)
        assert v["captures_by_mode"] == {"FULL": 7 + 14}
    else:
        expected_draft = sorted([g, s, s // (g + 1), True]
                                for g in (1, 2, 3) for s in SIZES[g + 1])
        assert v["draft_entries"] == expected_draft
        assert v["captures_by_mode"]["FULL"] == 14 + 10
    if v["cudagraph_mode"] == "FULL_DECODE_ONLY":
        assert v["captures_by_mode"] == {"FULL": 24}
    elif v["cudagraph_mode"] == "FULL_AND_PIECEWISE":
        # the host's piecewise graphs for mixed batches as well
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
    draft_sizes = DRAFT_SIZES if _combined(v) else {g: SIZES[g + 1] for g in (1, 2, 3)}
    assert v["draft_param_sizes"] == {str(g): s for g, s in draft_sizes.items()}
    # the gamma-g merged draft graph holds g steps x 1 MTP layer: the loop ran g steps
    assert v["draft_attn_params"] == {str(g): {str(s): g for s in sizes}
                                      for g, sizes in draft_sizes.items()}
    # the same token count drafted at different gammas: different kernel handles
    diso = v["draft_same_tokens_isolated"]
    assert all(e["handles_distinct"] for e in diso.values())
    if _combined(v):
        # shared: the one GraphParams module global (not a router), every shared size, each
        # target graph's 2 attention ops (2 layers) recorded once
        assert v["target_params_type"] == "GraphParams" and v["target_params_is_global"]
        assert v["target_param_sizes"] == {"shared": SHARED}
        assert v["target_attn_params"] == {"shared": {str(s): 2 for s in SHARED}}
        assert diso["6"]["gammas"] == [1, 2, 3] and diso["12"]["gammas"] == [2, 3]
        return
    assert v["target_params_type"] == "RoutedGraphParams"
    assert v["target_param_sizes"] == {str(w): s for w, s in SIZES.items()}
    # every target graph recorded its 2 attention ops (2 layers) in its own width's params
    assert v["target_attn_params"] == {str(w): {str(s): 2 for s in sizes}
                                       for w, sizes in SIZES.items()}
    iso = v["same_tokens_isolated"]
    assert iso["4"]["widths"] == [1, 2, 4] and iso["8"]["widths"] == [2, 4]
    assert iso["6"]["widths"] == [2, 3] and iso["12"]["widths"] == [3, 4]
    assert all(e["handles_distinct"] for e in iso.values())
    assert diso["4"]["gammas"] == [1, 3] and diso["6"]["gammas"] == [1, 2]


def test_each_gamma_and_batch_dispatches_its_own_graph(pair_vspec: dict[str, Any]) -> None:
    d = pair_vspec["dispatch"]
    combined = _combined(pair_vspec)
    for gamma in range(K + 1):
        w = gamma + 1
        for reqs in range(1, SEQS + 1):
            n = reqs * w
            hit = d[f"gamma={gamma},reqs={reqs}"]
            if n > SIZES[w][-1]:
                assert hit["target"] == ["NONE", n, None, False]  # 4 x width 4: no 16 graph
                continue
            if combined:  # the shared graph of the padded token count, any width
                assert hit["target"] == ["FULL", *_key(_pad(n))], (gamma, reqs, hit)
            else:
                padded = min(s for s in SIZES[w] if s >= n)
                assert hit["target"] == ["FULL", padded, padded // w, True], (gamma, reqs, hit)
            if gamma >= 1:  # the drafter's first pass: the same key, the gamma's draft graph
                assert hit["draft_first_pass"] == hit["target"]
                assert hit["draft_second_dispatch"] == hit["target"]
    # 3 requests at width 3 pad to the 12-token graph: a dummy 4th request of width 3
    # (combined FULL: the host's one dummy request for the padding, here also 3 tokens)
    assert d["gamma=2,reqs=3"]["target"] == (["FULL", *_key(12)] if combined
                                             else ["FULL", 12, 4, True])
    assert d["gamma=2,reqs=3"]["fia_query_start_loc"] == [0, 3, 6, 9, 12]
    mode = pair_vspec["cudagraph_mode"]
    if mode == "FULL_DECODE_ONLY":
        # not uniform decode: what the host does without vSpec (eager)
        assert d["mixed"]["target"] == ["NONE", 5, None, False]
        assert d["prefill"]["target"] == ["NONE", 4, None, False]
    elif mode == "FULL_AND_PIECEWISE":
        # the host's piecewise graphs at its own padded sizes, 5 -> 8 tokens
        assert d["mixed"]["target"] == ["PIECEWISE", 8, None, False]
        assert d["prefill"]["target"] == ["PIECEWISE", 4, None, False]
    else:
        # combined FULL: the host replays the shared graph for mixed and prefill batches too
        # (5 tokens -> the 6-token graph, one dummy request of 1 token)
        assert d["mixed"]["target"] == ["FULL", *_key(6)]
        assert d["mixed"]["fia_query_start_loc"] == [0, 2, 3, 5, 6]
        assert d["prefill"]["target"] == ["FULL", *_key(4)]
        # drafting gamma < K after them: eager (the graph's rows do not bound the requests);
        # at gamma K the host's own draft graph, as without vSpec
        for key in ("mixed", "prefill"):
            assert d[key]["draft_first_pass"][0] == "NONE", key
        assert d["mixed_k"]["target"] == ["FULL", *_key(8)]
        assert d["mixed_k"]["draft_first_pass"] == ["FULL", *_key(8)]


def test_switching_frame_drafts_eager_only_where_it_must(pair_vspec: dict[str, Any]) -> None:
    s = pair_vspec["switching"]
    # the controller changed gamma: the target still replays its width's graph; the drafter
    # (gamma != width - 1: no graph for that pair) runs eager for this frame only
    for key in ("width=4,draft_gamma=1", "width=4,draft_gamma=2", "width=2,draft_gamma=3",
                "width=1,draft_gamma=1"):
        assert s[key]["target"][0] == "FULL", key
        assert s[key]["draft_first_pass"][0] == "NONE", key
        assert s[key]["draft_second_dispatch"][0] == "NONE", key
    steady = ["FULL", *_key(6)] if _combined(pair_vspec) else ["FULL", 6, 2, True]
    assert s["width=3,draft_gamma=2"]["draft_first_pass"] == steady
    frames = {(f["width"], f["gamma"]) for f in pair_vspec["eager_frames"]}
    switching = {(4, 1), (4, 2), (2, 3), (1, 1)}
    if _combined(pair_vspec):  # + gamma 1 after the mixed / prefill batches (no width)
        assert frames == switching | {(None, 1)}
    else:
        assert frames == switching


def test_replay_uses_its_own_graph_and_updates_only_its_own_params(
        pair_vspec: dict[str, Any]) -> None:
    r = pair_vspec["replays"]
    if _combined(pair_vspec):
        # every shared key, with each gamma that has a draft graph there, and target-only
        assert set(r) == {f"{n}:g{g}" for n in SHARED
                          for g in [0, *(g for g, ns in DRAFT_SIZES.items() if n in ns)]}
        for key, rep in r.items():
            n, g = int(key.split(":g")[0]), int(key.split(":g")[1])
            assert rep["captures"] == 0, key
            assert rep["replayed"] == rep["expected"], key  # shared target (+ gamma g draft)
            expected = [["target", "shared", n]] + ([["draft", g, n]] if g else [])
            assert sorted(rep["updated_params"]) == sorted(expected), key
        return
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
    if _combined(pair_vspec):  # hits on the shared keys
        assert s["gamma=3,reqs=3"] == {"ok": ["FULL", *_key(12)]}
        assert s["gamma=1,reqs=4"] == {"ok": ["FULL", *_key(8)]}
        assert s["gamma=0,reqs=4"] == {"ok": ["FULL", *_key(4)]}
        return
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
        assert r["target"] == (["FULL", *_key(2 * width)] if _combined(pair_vspec)
                               else ["FULL", 2 * width, 2, True])
        # async on a stride-K runner (vLLM 0.23): gamma drafts, zero-padded to K columns
        assert r["drafts_shape"] == [2, K] and r["drafts_padding_zero"]
        assert r["replayed"] == r["expected"] and len(r["replayed"]) == 1
        assert r["updated_params"] == [["draft", gamma, 2 * width]]
        assert r["captures"] == 0 and r["num_speculative_tokens_after"] == K
    for width, gamma in ((4, 1), (2, 3)):  # switching frames: eager, exactly gamma drafts
        r = p[f"width={width},gamma={gamma}"]
        assert r["target"][0] == "FULL"
        assert r["drafts_shape"] == [2, K] and r["drafts_padding_zero"]
        assert r["replayed"] == [] and r["updated_params"] == [] and r["captures"] == 0


DECODE_GAMMAS = (3, 3, 1, 1, 2, 2)  # _pair_checks.DECODE_GAMMAS: drafted gamma per frame


def test_async_decode_frames_switch_gamma_on_the_real_runner(pair_vspec: dict[str, Any]) -> None:
    """execute_model -> sample_tokens (-> propose_draft_token_ids) of the real runner, async
    scheduling, 2 requests: a prefill, then frames whose verify width is 1 + the gamma drafted
    in the frame before (as vLLM >= 0.31's async scheduler places it) and whose drafted gamma
    comes from num_spec_tokens_to_schedule (set on 0.23's SchedulerOutput, read by the K
    backport). Each frame's target replays its width's graph; a steady frame replays the
    gamma's draft graph, a switching frame drafts eager; the drafts reach the next frame's
    input ids (stride K: the backport pads them to K columns on this runner)."""
    d = pair_vspec["decode_steps"]
    assert "error" not in d, d.get("error")
    frames = d["frames"]
    assert [f["gamma"] for f in frames] == list(DECODE_GAMMAS)
    for f in frames:
        assert f["captures"] == 0, f  # nothing captured after capture_model
        assert f["drafts_shape"][1] == K and f["drafts_padding_zero"], f
        assert f["previous_drafts_in_input_ids"], f
        # one sampled token per request, plus at most its verified drafts
        assert len(f["sampled_lens"]) == 2, f
        assert all(1 <= n <= (f["width"] or 1) for n in f["sampled_lens"]), f
    prefill = frames[0]
    assert prefill["width"] is None
    if _combined(pair_vspec):  # the host replays the shared graph and its K draft graph
        assert prefill["replayed"] == [prefill["target_graph"], prefill["draft_graph"]]
    elif pair_vspec["cudagraph_mode"] == "FULL_DECODE_ONLY":
        assert prefill["replayed"] == []  # eager, target and drafter
    for prev, f in zip(frames, frames[1:], strict=False):
        assert f["width"] == 1 + prev["gamma"], f
        assert f["target_graph"] is not None and f["replayed"][0] == f["target_graph"], f
        if f["gamma"] == f["width"] - 1:  # steady: the gamma's own merged draft graph
            assert f["replayed"] == [f["target_graph"], f["draft_graph"]], f
            assert f["eager_drafts"] == [], f
        else:  # switching: the new gamma drafts eager, in this frame only
            assert f["replayed"] == [f["target_graph"]], f
            assert {(e["width"], e["gamma"]) for e in f["eager_drafts"]} == {
                (f["width"], f["gamma"])}, f
    # the frames after a switch verify at the new width and replay its graphs again
    assert [f["width"] for f in frames[1:]] == [4, 4, 2, 2, 3]
    assert [f["eager_drafts"] != [] for f in frames[1:]] == [False, True, False, True, False]


def test_a_hust_shaped_proposer_captures_and_drafts_gamma_steps(
        pair_vspec: dict[str, Any]) -> None:
    """The real proposer given vLLM-Ascend-HUST's ``num_draft_steps`` (its merged draft's loop
    count): each per-gamma draft graph is captured with both step attributes at its gamma, and
    each drafting call (eager switching frames included) runs with both at the step's gamma;
    both are back at K after."""
    captured = pair_vspec["hust_capture_steps"]
    assert captured and all(k == steps for k, steps in captured), captured
    assert {k for k, _ in captured} == set(pair_vspec["draft_gammas"])
    proposed = pair_vspec["hust_propose_steps"]
    assert proposed and all(k == steps for k, steps in proposed), proposed
    assert {k for k, _ in proposed} <= {1, 2, 3}
    assert pair_vspec["hust_steps_after"] == [K, K]
