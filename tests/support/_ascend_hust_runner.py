"""The fork's NPU runner and ACL graphs executed on CPU (subprocess only; modes ``graphs`` and
``runner_k`` of ``_ascend_hust_exec.py``)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import _fork_import as fi
from _fork_proposer import (
    BATCH,
    BUF,
    FRAMES,
    HIDDEN,
    MAX_K,
    VOCAB,
    cad,
    fork_module_globals,
    make_proposer,
)

HERE = Path(__file__).resolve().parent


GRAPH_SEQS = 8
# (gamma, batch): steady frames (verify width 1 + gamma); the first two share a token count
# (10) and so a host batch descriptor
GRAPH_FRAMES = ((4, 2), (1, 5), (2, 3), (4, 2), (1, 5), (3, 2), (2, 3))


def npu_runner(rmod: Any, max_k: int, mode_name: str) -> Any:
    """The fork's NPUModelRunner (its methods real) with the state its graph-dispatch path
    reads, and vLLM's CudagraphDispatcher keyed as the fork's ``_check_and_update_cudagraph_mode``
    keys it. That method itself passes ``tensor_parallel_size=`` to a vLLM resolver the installed
    vLLM lacks, so its three calls (the dispatcher's keys, the target and draft graph params)
    are made here."""
    import numpy as np
    import torch
    from vllm.config import CUDAGraphMode, VllmConfig
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

    ag = sys.modules["vllm_ascend.compilation.acl_graph"]
    vc = VllmConfig()
    cc = vc.compilation_config
    mode = CUDAGraphMode[mode_name]
    cc.cudagraph_mode = mode
    # the host's sizes after vLLM rounds them to multiples of 1 + K
    cc.cudagraph_capture_sizes = [s for s in graph_sizes(max_k) if s % (1 + max_k) == 0]
    cc.max_cudagraph_capture_size = cc.cudagraph_capture_sizes[-1]
    vc.scheduler_config.max_num_seqs = GRAPH_SEQS
    vc.scheduler_config.max_num_batched_tokens = BUF
    r = object.__new__(rmod.NPUModelRunner)
    r.vllm_config, r.compilation_config, r.scheduler_config = vc, cc, vc.scheduler_config
    r.uniform_decode_query_len = 1 + max_k
    r.use_aclgraph = True
    r.drafter = None
    r.dcp_size = r.pcp_size = 1
    r.model_config = SimpleNamespace(is_hybrid=False, is_encoder_decoder=False)
    r.input_batch = SimpleNamespace(num_computed_tokens_cpu=np.full(BUF, 10),
                                    num_prompt_tokens=np.full(BUF, 5), lora_id_to_lora_request={})
    r.arange_np = np.arange(BUF + 1, dtype=np.int32)
    r.seq_lens = torch.full((BUF,), 10, dtype=torch.int32)
    r.optimistic_seq_lens_cpu = torch.full((BUF,), 10, dtype=torch.int32)
    r._sync_metadata_across_dp = lambda n, is_draft_model=False, **kw: (n, None, None)
    r.get_model = lambda: None
    r.eplb_heat_collection_status = r.dynamic_eplb = False
    d = CudagraphDispatcher(vc)
    d.uniform_decode_query_len = 1 + max_k  # what a VllmConfig with K speculative tokens sets
    d.initialize_cudagraph_keys(mode, 1 + max_k)
    r.cudagraph_dispatcher = d
    sizes = sorted({x.num_tokens for _, descs in d.get_capture_descs() for x in descs})
    ag.reset_graph_params()
    ag.set_graph_params(sizes)
    ag.set_draft_graph_params(sizes)
    return r


def graph_sizes(max_k: int) -> list[int]:
    """The launcher's plan: every batch x every verify width."""
    return sorted({b * w for w in range(1, max_k + 2) for b in range(1, GRAPH_SEQS + 1)})


def target_dispatch(r: Any, width: int, batch: int) -> Any:
    """The fork runner's own batch decision for a steady decode of ``batch`` x ``width``."""
    import numpy as np

    mode, desc, *_ = r._determine_batch_execution_and_padding(
        batch * width, batch, np.full(batch, width), width, False)
    return mode, desc


def load_runner_modules(tree: Path, upstream: Path) -> dict[str, Any]:
    """The fork's ACL graph and runner modules with upstream's K-taking proposer."""
    return fi.load_fork({
        "vllm_ascend.compilation.acl_graph": tree / "vllm_ascend/compilation/acl_graph.py",
        "vllm_ascend.spec_decode.llm_base_proposer":
            upstream / "vllm_ascend/spec_decode/llm_base_proposer.py",
        "vllm_ascend.worker.model_runner_v1": tree / "vllm_ascend/worker/model_runner_v1.py",
    }, HERE.parent)


def run_graphs(tree: Path, upstream: Path) -> dict[str, Any]:
    """FULL_DECODE_ONLY on the native-K shape: the fork runner's target dispatch per verify
    width, and the drafter (upstream's K-taking _propose) replaying the fork's ACLGraphWrapper,
    without vSpec and with vSpec's per-width / per-gamma graphs."""
    mods = load_runner_modules(tree, upstream)
    import torch
    from vllm.compilation.monitor import set_cudagraph_capturing_enabled
    from vllm.config import CUDAGraphMode
    from vllm.forward_context import set_forward_context
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

    from vllm_hust_vspec.host.patching import Patcher
    from vllm_hust_vspec.host.worker.ascend import graph_widths as gw

    rmod = mods["vllm_ascend.worker.model_runner_v1"]
    ag = mods["vllm_ascend.compilation.acl_graph"]
    pmod = mods["vllm_ascend.spec_decode.llm_base_proposer"]
    rmod.enable_sp = pmod.enable_sp = lambda *a, **k: False
    rmod.enable_dsa_cp = lambda *a, **k: False
    # fake NPU: no caching-allocator pool, weak refs are the tensors themselves
    ag.weak_ref_tensors = lambda x: x
    ag.current_platform = SimpleNamespace(get_global_graph_pool=lambda: None)
    ag._EXTRA_CTX = SimpleNamespace(is_draft_model=True)
    fc: dict[str, Any] = {"fc": None}
    fork_module_globals(pmod, fc)
    from vllm.forward_context import get_forward_context

    pmod.get_forward_context = get_forward_context

    def drafter_for(r: Any) -> tuple[Any, dict[str, Any]]:
        p, rec = make_proposer(pmod.AscendSpecDecodeBaseProposer, pmod, async_on=False,
                               line="upstream")
        p.use_cuda_graph = True
        p.runner = r
        from vllm.v1.utils import CpuGpuBuffer

        p.query_start_loc = CpuGpuBuffer(BUF + 1, dtype=torch.int32, device=torch.device("cpu"),
                                         pin_memory=False)
        p._update_full_graph_params = lambda *a, **k: None  # NPU attention kernel params

        @contextlib.contextmanager
        def forward(attn_metadata: Any, vllm_config: Any, num_tokens: int = 0,
                    aclgraph_runtime_mode: Any = None, batch_descriptor: Any = None,
                    **kwargs: Any) -> Iterator[None]:
            # the engine's VllmConfig (the proposer here holds a stand-in of its model config)
            with set_forward_context(attn_metadata, r.vllm_config, num_tokens=num_tokens,
                                     cudagraph_runtime_mode=aclgraph_runtime_mode
                                     or CUDAGraphMode.NONE,
                                     batch_descriptor=batch_descriptor):
                yield

        pmod.set_ascend_forward_context = forward
        p._runnable = ag.ACLGraphWrapper(p._run_merged_draft, r.vllm_config,
                                         runtime_mode=CUDAGraphMode.FULL, use_eagle=True)
        r.drafter = p
        return p, rec

    def graph_steps(p: Any) -> dict[int, int]:
        """Graph id -> draft passes run while it was captured."""
        return p.__dict__.setdefault("_graph_steps", {})

    def count_captures(p: Any) -> None:
        """Record how many draft passes each captured graph holds."""
        wrappers = list(getattr(p._runnable, "graphs", {0: p._runnable}).values())
        for w in wrappers:
            inner = w.runnable

            def counted(*a: Any, _inner: Any = inner, **kw: Any) -> Any:
                before = len(p.model.passes)
                out = _inner(*a, **kw)
                from fake_npu.acl_graph import current_capture

                g = current_capture()
                if g is not None:
                    graph_steps(p)[g.id] = len(p.model.passes) - before
                return out

            w.runnable = counted

    def step(p: Any, r: Any, gamma: int, batch: int, vspec: bool) -> dict[str, Any]:
        from fake_npu import graph_log

        width = 1 + gamma
        mode, desc = target_dispatch(r, width, batch)
        ids = torch.tensor([(3 * i) % VOCAB for i in range(batch * width)], dtype=torch.int32)
        q = torch.arange(0, batch * width + 1, width, dtype=torch.int32)
        c = cad()
        c.batch_size = lambda: batch
        c.num_reqs, c.query_start_loc, c.query_start_loc_cpu = batch, q, q
        c.block_table_tensor = torch.zeros(batch, 4, dtype=torch.int32)
        c.slot_mapping = torch.arange(batch * width, dtype=torch.int32)
        c.seq_lens = torch.full((batch,), 10, dtype=torch.int32)
        c._seq_lens_cpu = None
        kwargs = dict(
            target_token_ids=ids, target_positions=torch.full((batch * width,), 9),
            target_hidden_states=torch.zeros(batch * width, HIDDEN), next_token_ids=ids[:batch],
            token_indices_to_sample=q[1:] - 1, common_attn_metadata=c,
            target_model_batch_desc=desc, sampling_metadata=None)
        before_passes, before_replays = len(p.model.passes), len(graph_log.replays)
        before_captures = len(graph_log.captures)
        ctx = gw.drafting(r, desc) if vspec else contextlib.nullcontext()
        with ctx:
            out = p._propose(num_speculative_tokens=gamma, **kwargs)
        replays = graph_log.replays[before_replays:]
        ran = len(p.model.passes) - before_passes
        replayed = replays[-1]["graph"] if replays else None
        return {
            "gamma": gamma, "batch": batch, "target_mode": mode.name,
            "target_width": desc.num_tokens // desc.num_reqs if desc.num_reqs else None,
            "draft": "replay" if replayed is not None else (
                "capture" if len(graph_log.captures) > before_captures else "eager"),
            "graph": replayed,
            "draft_steps": graph_steps(p).get(replayed, -1) if replayed is not None else ran,
            "shape": list(out.shape),
        }

    def serve(vspec: bool, mode: str) -> dict[str, Any]:
        r = npu_runner(rmod, MAX_K, mode)
        patcher = Patcher("fork-graphs")
        if vspec:
            gw.install_graph_widths(patcher, rmod.NPUModelRunner, CudagraphDispatcher,
                                    lambda: gw.WidthPlan((0, 1, 2, 3, 4)), lambda: False)
        p, _ = drafter_for(r)
        if vspec:
            gw.setup_widths(r, gw.WidthPlan((0, 1, 2, 3, 4), tuple(graph_sizes(MAX_K))),
                            graph_sizes(MAX_K), lambda: False)
        count_captures(p)
        out: dict[str, Any] = {"frames": []}
        # capture: the first sight of each (gamma, batch) while capturing is allowed
        set_cudagraph_capturing_enabled(True)
        for gamma, batch in dict.fromkeys(GRAPH_FRAMES):
            step(p, r, gamma, batch, vspec)
        set_cudagraph_capturing_enabled(False)
        for gamma, batch in GRAPH_FRAMES:
            out["frames"].append(step(p, r, gamma, batch, vspec))
        out["target"] = {w: target_dispatch(r, w, 3)[0].name for w in range(1, MAX_K + 2)}
        if vspec:
            st = gw.state_of(r)
            out["draft_gammas"] = list(st.draft_gammas)
            out["graph_params"] = repr(ag.get_graph_params())
            out["draft_graph_params"] = repr(ag.get_draft_graph_params())
        patcher.undo()
        return out

    return {f"{who}_{mode}": serve(who == "vspec", mode)
            for mode in ("FULL_DECODE_ONLY", "FULL") for who in ("host", "vspec")}


def run_runner_k(tree: Path, upstream: Path) -> dict[str, Any]:
    """The fork main line's own runner drives the drafter: ``propose_draft_token_ids`` passes
    the scheduler output's ``num_spec_tokens_to_schedule`` (the field vSpec's hook writes) to
    upstream's K-taking ``_propose``; then the runner's draft copy and ``take_draft_token_ids``
    hand the scheduler what was drafted. Eager drafting, synchronous scheduling."""
    mods = load_runner_modules(tree, upstream)
    import torch

    rmod = mods["vllm_ascend.worker.model_runner_v1"]
    pmod = mods["vllm_ascend.spec_decode.llm_base_proposer"]
    fc: dict[str, Any] = {"fc": None}
    fork_module_globals(pmod, fc)
    # proposer classes of modules not in the saved tree: types nothing is an instance of
    for name in ("AscendNgramProposer", "AscendNgramProposerNPU", "AscendSuffixDecodingProposer",
                 "AscendMedusaProposer", "AscendExtractHiddenStatesProposer"):
        setattr(rmod, name, type(name, (), {}))
    p, rec = make_proposer(pmod.AscendSpecDecodeBaseProposer, pmod, async_on=False,
                           line="upstream")
    spec = SimpleNamespace(use_eagle=lambda: True, uses_draft_model=lambda: False,
                           uses_extract_hidden_states=lambda: False, method="eagle",
                           disable_padded_drafter_batch=False)
    r = object.__new__(rmod.NPUModelRunner)
    r.drafter = p
    r.speculative_config = spec
    r.vllm_config = SimpleNamespace(speculative_config=spec)
    r.num_spec_tokens = MAX_K
    r.use_async_scheduling = False
    r.dcp_size = r.pcp_size = 1
    r.requests = {}
    r.num_discarded_requests = 0
    r.discard_request_indices = SimpleNamespace(gpu=None)
    r.valid_sampled_token_count_event = None
    r.use_aux_hidden_state_outputs = False
    r.get_model = lambda: object()
    r.input_ids = SimpleNamespace(gpu=torch.arange(BUF, dtype=torch.int32) % VOCAB)
    r._get_positions = lambda n: torch.full((n,), 9)
    r.draft_token_ids_event = torch.npu.Event()
    r.draft_token_ids_copy_stream = torch.npu.Stream()
    r.draft_token_ids_cpu = torch.zeros(BUF, MAX_K, dtype=torch.int64)
    r._draft_token_req_ids = None
    req_ids = [f"r{i}" for i in range(BATCH)]
    r.input_batch = SimpleNamespace(req_ids=req_ids, num_reqs=BATCH, lora_id_to_lora_request={},
                                    sampling_metadata=SimpleNamespace(output_token_ids=[]))
    p.prepare_next_token_ids_padded = lambda sampled, *a: (
        sampled[:, 0].to(torch.int32), torch.ones(BATCH, dtype=torch.int32))
    frames_out = []
    for step, gamma in enumerate(FRAMES):
        before = len(p.model.passes)
        sched = SimpleNamespace(num_spec_tokens_to_schedule=gamma,
                                num_scheduled_tokens=dict.fromkeys(req_ids, 1),
                                has_structured_output_requests=False)
        drafts = r.propose_draft_token_ids(
            valid_sampled_token_ids=torch.full((BATCH, 1), 5 + step),
            sampling_metadata=None, scheduler_output=sched, spec_decode_metadata=None,
            spec_decode_common_attn_metadata=cad(), positions=torch.full((BATCH,), 9),
            num_scheduled_tokens=BATCH, hidden_states=torch.zeros(BATCH, HIDDEN),
            target_model_batch_desc=SimpleNamespace(uniform=False))
        r._draft_token_ids = drafts
        r._copy_draft_token_ids_to_cpu(sched)
        taken = r.take_draft_token_ids()
        frames_out.append({
            "gamma": gamma, "passes": len(p.model.passes) - before,
            "shape": list(drafts.shape), "prev_num_spec_tokens": r.prev_num_spec_tokens,
            "scheduler_gets": [len(t) for t in taken.draft_token_ids] if taken else None,
        })
    return {"frames": frames_out}


