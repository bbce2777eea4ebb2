"""Run with the ascend023 environment's python (see scripts/setup_ascend_pair.sh):

    .cache/ascend023/venv/bin/python tests/ascend_pair/_pair_checks.py [imports|graph|runner|all]
    .cache/ascend023/venv/bin/python tests/ascend_pair/_pair_checks.py vspec
        (vspec: FULL_DECODE_ONLY; vspec-full-and-piecewise; vspec-full: combined FULL)

Installs the fake NPU (tests/fake_npu), imports vllm-ascend 0.23.0.post1 against vLLM 0.23.0
and executes vllm-ascend's ACL graph bookkeeping on CPU. Prints one line
``PAIR_JSON {...}`` with the findings (the pytest side asserts on it).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

# The import order vLLM itself uses: resolve the platform plugin, then the worker module
# (vllm_ascend.worker.worker imports vllm_ascend.ops first, which breaks the
# device_op <-> ops import cycle that a cold `import vllm_ascend.worker.model_runner_v1` hits).
TARGETS = (
    "vllm_ascend.worker.worker",
    "vllm_ascend.compilation.acl_graph",
    "vllm_ascend.worker.model_runner_v1",
    "vllm_ascend.spec_decode",
    "vllm_ascend.spec_decode.llm_base_proposer",
    "vllm_ascend.spec_decode.eagle_proposer",
    "vllm_ascend.spec_decode.draft_proposer",
    "vllm_ascend.spec_decode.step3p5",
    "vllm_ascend.sample.rejection_sampler",
)


def check_imports() -> dict[str, Any]:
    import torch
    import vllm
    import vllm_ascend
    from vllm.platforms import current_platform

    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "vllm": vllm.__version__,
        "vllm_file": vllm.__file__,
        "vllm_ascend_file": vllm_ascend.__file__,
        "platform": type(current_platform).__qualname__,
        "platform_module": type(current_platform).__module__,
        "imported": {},
    }
    try:
        from vllm_ascend import _version

        out["vllm_ascend"] = _version.version
    except ImportError:
        out["vllm_ascend"] = None
    for name in TARGETS:
        try:
            importlib.import_module(name)
            out["imported"][name] = None
        except Exception as exc:  # report, don't stop: the test names the failing module
            out["imported"][name] = f"{type(exc).__name__}: {exc}"
    from vllm.triton_utils import HAS_TRITON

    out["has_triton"] = HAS_TRITON
    sd = sys.modules.get("vllm_ascend.spec_decode")
    if sd is not None:
        out["proposers"] = sorted(n for n in dir(sd) if n.startswith("Ascend"))
    runner = sys.modules.get("vllm_ascend.worker.model_runner_v1")
    if runner is not None:
        cls = runner.NPUModelRunner
        out["runner_mro"] = [c.__name__ for c in cls.__mro__[:3]]
        out["runner_has"] = {m: hasattr(cls, m) for m in (
            "capture_model", "_capture_aclgraphs", "_dummy_run", "propose_draft_token_ids",
            "_update_full_graph_params_if_needed", "initialize_aclgraph_capture")}
    return out


def check_graph() -> dict[str, Any]:
    """vllm-ascend's real ACLGraphWrapper and graph-params helpers, on the fake ACL graph."""
    import torch
    from vllm.compilation.counter import compilation_counter
    from vllm.compilation.cuda_graph import CUDAGraphOptions
    from vllm.config import CompilationConfig, CUDAGraphMode, VllmConfig
    from vllm.forward_context import BatchDescriptor, set_forward_context
    from vllm_ascend.compilation import acl_graph as ag

    import fake_npu

    log = fake_npu.graph_log
    log.clear()
    out: dict[str, Any] = {}
    cfg = VllmConfig(compilation_config=CompilationConfig(
        cudagraph_mode="FULL_DECODE_ONLY", cudagraph_capture_sizes=[1, 2, 4]))
    out["cudagraph_mode"] = cfg.compilation_config.cudagraph_mode.name

    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    calls = {"n": 0}

    def body(x: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        return lin(x).relu()

    runnable = fake_npu.replaying(body)
    wrapper = ag.ACLGraphWrapper(runnable, cfg, CUDAGraphMode.FULL,
                                 CUDAGraphOptions(debug_log_enable=False))
    out["wrapper_pool"] = list(wrapper.graph_pool) if wrapper.graph_pool else None

    # Graph params the runner sets up for its capture sizes (target and draft).
    ag._graph_params = ag._draft_graph_params = ag._draft_graph_prefill_params = None
    ag.set_graph_params([1, 2, 4])
    ag.set_draft_graph_params([1, 2, 4])
    try:
        ag.set_graph_params([1, 2, 4])
        out["double_set_raises"] = False
    except ValueError:
        out["double_set_raises"] = True

    captured_before = compilation_counter.num_cudagraph_captured
    bufs = {n: torch.zeros(n, 8) for n in (2, 4)}  # static input buffers per padded size

    def step(n: int, mode: CUDAGraphMode, fill: float) -> torch.Tensor:
        bufs[n].fill_(fill)
        desc = BatchDescriptor(num_tokens=n, num_reqs=n, uniform=True)
        with set_forward_context(None, cfg, num_tokens=n, cudagraph_runtime_mode=mode,
                                 batch_descriptor=desc):
            return wrapper(bufs[n])

    o1 = step(4, CUDAGraphMode.FULL, 1.0)            # capture (4)
    ag.update_graph_params_workspaces(4, torch.empty(16))
    ag.update_draft_graph_params_workspaces(2, torch.empty(8))
    o2 = step(4, CUDAGraphMode.FULL, 2.0)            # replay (4) with new input in place
    out["replay_returns_captured_output"] = o2 is o1
    out["replay_output_matches_eager"] = bool(torch.allclose(o2, lin(bufs[4]).relu()))
    step(2, CUDAGraphMode.FULL, 3.0)                 # capture (2)
    step(2, CUDAGraphMode.FULL, 4.0)                 # replay (2)
    step(4, CUDAGraphMode.NONE, 5.0)                 # eager: no graph activity
    step(4, CUDAGraphMode.PIECEWISE, 6.0)            # mode mismatch: eager
    out["runnable_calls"] = calls["n"]
    captured = compilation_counter.num_cudagraph_captured
    out["num_cudagraph_captured_delta"] = captured - captured_before
    out["entries"] = sorted(
        [d.num_tokens, d.num_reqs, d.uniform] for d in wrapper.concrete_aclgraph_entries)
    out["captures"] = [
        {"graph": c["graph"], "batch_descriptor": c.get("batch_descriptor"),
         "runtime_mode": c.get("runtime_mode"), "graph_params": c.get("graph_params")}
        for c in log.captures]
    out["replays"] = [{"graph": r["graph"], "captured_for": r["captured_for"]}
                      for r in log.replays]
    out["target_workspaces"] = sorted(
        k for k, v in ag.get_graph_params().workspaces.items() if v is not None)

    # Graph-task bookkeeping as the attention backends use it: during capture a kernel is
    # wrapped in a task group whose handle is stored per size; before replay the runner
    # patches it inside graph_task_update_begin/end and records an ExternalEvent.
    npu = torch.npu
    upd = npu.Stream()
    params = ag.get_graph_params()

    def attn_like(x: torch.Tensor) -> torch.Tensor:
        s = npu.current_stream()
        ev = npu.ExternalEvent()
        ev.wait(s)
        ev.reset(s)
        npu.graph_task_group_begin(s)
        y = x * 2
        handle = npu.graph_task_group_end(s)
        n = x.shape[0]
        params.attn_params[n].append(("seq_lens", n))
        params.handles[n].append(handle)
        params.events[n].append(ev)
        return y

    # not wrapped in fake_npu.replaying: the body has bookkeeping side effects, which a real
    # replay does not repeat (replaying() re-runs Python, so it suits pure tensor bodies only)
    w2 = ag.ACLGraphWrapper(attn_like, cfg, CUDAGraphMode.FULL,
                            CUDAGraphOptions(debug_log_enable=False))
    x = torch.ones(1, 8)
    desc = BatchDescriptor(num_tokens=1, num_reqs=1, uniform=True)
    with set_forward_context(None, cfg, num_tokens=1, cudagraph_runtime_mode=CUDAGraphMode.FULL,
                             batch_descriptor=desc):
        w2(x)
        # the update side (update_graph_params): patch each handle, then record its event
        with npu.stream(upd):
            for handle, ev in zip(params.handles[1], params.events[1], strict=True):
                npu.graph_task_update_begin(upd, handle)
                npu.graph_task_update_end(upd)
                ev.record(upd)
        w2(x)
    out["task_groups"] = [(e["event"], e.get("graph")) for e in log.events
                          if e["event"].startswith("task_")]
    out["handle_updates"] = [h.updates for h in params.handles[1]]
    out["last_capture_graph_params"] = log.captures[-1]["graph_params"]

    # Ops with no CPU equivalent fail loudly and are recorded.
    import torch_npu

    try:
        torch_npu.npu_moe_distribute_dispatch(x)
        out["missing_op_raises"] = None
    except NotImplementedError as exc:
        out["missing_op_raises"] = str(exc)
    out["format_cast_identity"] = torch_npu.npu_format_cast(x, 29) is x
    out["fia_matches_sdpa"] = _check_fia(torch_npu)
    return out


def _check_fia(torch_npu: Any) -> bool:
    """The CPU FIA (TND, causal, unpaged and paged) against torch's SDPA per request."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    lens, n, nkv, d, bs = [3, 5], 4, 2, 8, 4
    q = torch.randn(sum(lens), n, d, generator=g)
    k = torch.randn(sum(lens), nkv, d, generator=g)
    v = torch.randn(sum(lens), nkv, d, generator=g)
    cum = torch.tensor(lens).cumsum(0).tolist()
    ref = []
    for s, e in zip([0, *cum[:-1]], cum, strict=True):
        qi, ki, vi = (t[s:e].transpose(0, 1) for t in (q, k, v))
        ki, vi = ki.repeat_interleave(n // nkv, 0), vi.repeat_interleave(n // nkv, 0)
        ref.append(F.scaled_dot_product_attention(qi, ki, vi, is_causal=True).transpose(0, 1))
    ref_t = torch.cat(ref)
    out, _ = torch_npu.npu_fused_infer_attention_score(
        q, k, v, input_layout="TND", actual_seq_lengths=cum, actual_seq_lengths_kv=cum,
        num_key_value_heads=nkv, num_heads=n, scale=d ** -0.5, sparse_mode=3)
    # paged: scatter K/V into a block cache (req 0 -> blocks 2,0; req 1 -> blocks 1,3)
    kc, vc = torch.zeros(4, bs, nkv, d), torch.zeros(4, bs, nkv, d)
    table = torch.tensor([[2, 0], [1, 3]])
    slots = torch.tensor([table[0, i // bs] * bs + i % bs for i in range(lens[0])]
                         + [table[1, i // bs] * bs + i % bs for i in range(lens[1])])
    torch_npu._npu_reshape_and_cache(key=k, value=v, key_cache=kc, value_cache=vc,
                                     slot_indices=slots)
    paged, _ = torch_npu.npu_fused_infer_attention_score(
        query=q, key=kc.view(4, bs, -1), value=vc.view(4, bs, -1), block_table=table,
        input_layout="TND", block_size=bs, actual_seq_lengths=cum, actual_seq_lengths_kv=lens,
        num_key_value_heads=nkv, num_heads=n, scale=d ** -0.5, sparse_mode=3)
    return bool(torch.allclose(out, ref_t, atol=1e-5) and torch.allclose(paged, ref_t, atol=1e-5))


MODELS = Path(os.environ.get("VSPEC_TEST_MODELS")
              or Path(__file__).resolve().parents[2] / ".cache" / "models")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _engine_config(engine_args: Any, model: Path, k: int, max_num_seqs: int,
                   capture_sizes: list[int] | None = None,
                   graph_mode: str = "FULL_DECODE_ONLY") -> Any:
    no_fusions = {k_: False for k_ in ("enable_npugraph_ex", "fuse_norm_quant", "fuse_qknorm_rope",
                                       "fuse_allreduce_rms", "fuse_muls_add")}
    compilation: dict[str, Any] = {"cudagraph_mode": graph_mode}
    if capture_sizes:
        compilation["cudagraph_capture_sizes"] = capture_sizes
    args = engine_args(
        model=str(model), dtype="float32", max_model_len=256, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=256,
        speculative_config={"method": "mtp", "num_speculative_tokens": k},
        compilation_config=compilation,
        additional_config={"ascend_compilation_config": no_fusions},
    )
    return args.create_engine_config()


def _init_parallel(cfg: Any) -> None:
    import torch
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
    from vllm.v1.worker.workspace import init_workspace_manager
    from vllm_ascend.distributed.parallel_state import init_ascend_model_parallel

    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
    ensure_model_parallel_initialized(1, 1)
    init_ascend_model_parallel(cfg.parallel_config)
    init_workspace_manager(torch.device("cpu"), 1)


def check_runner(k: int = 3) -> dict[str, Any]:
    """The real NPUModelRunner on CPU: MTP (k draft tokens) + FULL_DECODE_ONLY ACL graphs.

    Builds the engine config from the tiny local MiMo-MTP model, constructs NPUModelRunner,
    loads target + MTP drafter, sets up the KV cache (which resolves the cudagraph mode and
    capture sizes and sets the target/draft graph params), runs capture_model() (target graph
    and merged draft graph per decode size, on the fake ACL graph) and then asks the runner's
    own dispatch which graph a decode batch with gamma < k draft tokens would use.
    """
    importlib.import_module("vllm_ascend.worker.worker")  # production import order (see TARGETS)
    import numpy as np
    import torch
    from vllm.config import CUDAGraphMode, set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
    from vllm_ascend.compilation import acl_graph as ag
    from vllm_ascend.worker.model_runner_v1 import NPUModelRunner

    import fake_npu

    model = MODELS / "mtp-target"
    if not (model / "config.json").exists():
        return {"skipped": f"tiny model {model} not built (scripts/build_tiny_models.py)"}
    cfg = _engine_config(EngineArgs, model, k, max_num_seqs=8)
    out: dict[str, Any] = {"k": k,
                           "config_capture_sizes": cfg.compilation_config.cudagraph_capture_sizes}
    log = fake_npu.graph_log
    log.clear()
    missing_before = len(fake_npu.MISSING_CALLS)
    ag._graph_params = ag._draft_graph_params = ag._draft_graph_prefill_params = None
    with set_current_vllm_config(cfg):
        _init_parallel(cfg)
        runner = NPUModelRunner(cfg, torch.device("cpu"))
        out.update(
            uniform_decode_query_len=runner.uniform_decode_query_len,
            use_async_scheduling=runner.use_async_scheduling,
            use_aclgraph=runner.use_aclgraph,
            drafter=type(runner.drafter).__name__,
            drafter_use_cuda_graph=runner.drafter.use_cuda_graph,
        )
        runner.load_model()
        out["model_wrapper"] = type(runner.model).__name__
        out["draft_runnable"] = type(runner.drafter._runnable).__name__
        spec = runner.get_kv_cache_spec()
        kv_cfg = get_kv_cache_configs(cfg, [spec], [64 * 1024 * 1024])[0]
        runner.initialize_kv_cache(kv_cfg)
        cc = runner.compilation_config
        out["cudagraph_mode"] = cc.cudagraph_mode.name
        out["capture_sizes"] = list(cc.cudagraph_capture_sizes)
        keys = runner.cudagraph_dispatcher.cudagraph_keys
        out["full_keys"] = sorted([d.num_tokens, d.num_reqs, d.uniform]
                                  for d in keys[CUDAGraphMode.FULL])
        out["piecewise_keys"] = len(keys[CUDAGraphMode.PIECEWISE])
        out["graph_param_sizes"] = sorted(ag.get_graph_params().workspaces)
        out["draft_graph_param_sizes"] = sorted(ag.get_draft_graph_params().workspaces)
        runner.capture_model()
        out["captures"] = [[c["graph"], (c.get("batch_descriptor") or {}).get("num_tokens"),
                            (c.get("batch_descriptor") or {}).get("num_reqs")]
                           for c in log.captures]
        out["target_attn_params"] = {str(n): len(v) for n, v in
                                     ag.get_graph_params().attn_params.items()}
        out["draft_attn_params"] = {str(n): len(v) for n, v in
                                    ag.get_draft_graph_params().attn_params.items()}
        out["draft_entries"] = sorted(d.num_tokens for d in
                                      runner.drafter._runnable.concrete_aclgraph_entries)
        out["target_entries"] = sorted(d.num_tokens for d in
                                       runner.model.concrete_aclgraph_entries)
        # Which graph would a decode step use? gamma draft tokens per request -> 1 + gamma
        # scheduled tokens each (all requests already past prefill).
        dispatch: dict[str, Any] = {}
        for gamma, reqs in ((k, 2), (k, 3), (k - 1, 2), (1, 2), (0, 2)):
            lens = np.full(reqs, 1 + gamma, dtype=np.int32)
            runner.input_batch.num_computed_tokens_cpu[:reqs] = 16
            mode, desc, *_ = runner._determine_batch_execution_and_padding(
                num_tokens=int(lens.sum()), num_reqs=reqs, num_scheduled_tokens_np=lens,
                max_num_scheduled_tokens=int(lens.max()), use_cascade_attn=False)
            # the drafter's first pass dispatches on the target's dispatcher with the
            # target batch's uniform flag (llm_base_proposer._propose)
            dmode, ddesc = runner.cudagraph_dispatcher.dispatch(
                num_tokens=int(lens.sum()), uniform_decode=desc.uniform, has_lora=False)
            dispatch[f"gamma={gamma},reqs={reqs}"] = {
                "target": [mode.name, desc.num_tokens, desc.num_reqs, desc.uniform],
                "draft_first_pass": [dmode.name, ddesc.num_tokens, ddesc.num_reqs]}
        out["dispatch"] = dispatch
    out["missing_calls"] = sorted(set(fake_npu.MISSING_CALLS[missing_before:]))
    return out


# The vSpec graph-per-gamma check: k = 3, 4 sequences, candidate gammas 0..3, the config's
# capture sizes = the launcher's batch x (1 + gamma) for batch 1..4 with 9 (3 x width 3) left
# out (as vllm-ascend's platform may cut the list), so that 3
# requests at gamma 2 pad to the 12-token width-3 graph (4 requests), and 16 (4 x width 4)
# left out, so that 4 requests at gamma 3 miss their graph and mtp_strict_graph has to fire.
VSPEC_K = 3
VSPEC_SEQS = 4
VSPEC_GAMMAS = (0, 1, 2, 3)
VSPEC_SIZES = [1, 2, 3, 4, 6, 8, 12]


def _desc(d: Any) -> list[Any] | None:
    return None if d is None else [d.num_tokens, d.num_reqs, d.uniform]


def check_vspec_graphs(graph_mode: str = "FULL_DECODE_ONLY") -> dict[str, Any]:
    """vSpec's graph-per-gamma patches on the real NPUModelRunner (fake NPU).

    Applies vSpec's host/worker/ascend install() (K backport + graph_widths) through a Patcher with
    launch-like settings, builds the runner, runs the real
    capture_model(), then: the keys, captures and graph params per width / gamma; the runner's
    own dispatch for every gamma and batch (target and the drafter's first pass, steady and
    switching frames); a replay per width through _dummy_run (target graph + merged draft
    graph replayed, each updating only its own graph params); mtp_strict_graph.
    """
    importlib.import_module("vllm_ascend.worker.worker")
    import numpy as np
    import torch
    from vllm.config import CUDAGraphMode, set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher
    from vllm_ascend.compilation import acl_graph as ag
    from vllm_ascend.worker.model_runner_v1 import NPUModelRunner

    import fake_npu
    from vllm_hust_vspec.host import abi
    from vllm_hust_vspec.host.patching import Patcher
    from vllm_hust_vspec.host.worker import ascend
    from vllm_hust_vspec.host.worker.ascend import graph_widths as gw
    from vllm_hust_vspec.host.worker.ascend.graphs import MtpStrictGraphError
    from vllm_hust_vspec.settings import Settings

    model = MODELS / "mtp-target"
    if not (model / "config.json").exists():
        return {"skipped": f"tiny model {model} not built (scripts/build_tiny_models.py)"}
    out: dict[str, Any] = {"k": VSPEC_K, "gammas": list(VSPEC_GAMMAS), "plan_sizes": VSPEC_SIZES}

    # the doctor's live tier on this pair, for the Ascend graph checks this patch relies on
    report = abi.check_live("mtp", True, hosts=(abi.ASCEND,),
                            features=("graph_per_gamma", "mtp_strict_graph"))
    out["abi"] = {r.check.id: {"ok": r.passed, "missing": [p.missing for p in r.results
                                                            if not p.found]}
                  for t in report.tiers for r in t.results if r.check.id.startswith("ascend.")}

    # vSpec's own Ascend install() with the settings a launch would have: adaptive MTP, K 3,
    # gamma 0..3, FULL decode graphs, capture plan "exact" for 4 sequences (its sizes are
    # batch x (1 + gamma) for batch 1..4; the config below keeps all but 9 and 16, and the
    # per-width sizes are the plan's sizes the config kept)
    settings = {"now": Settings(
        method="mtp", gamma=VSPEC_K, adaptive_speculation=True, adaptive_min_gamma=0,
        graph_mode={"FULL_DECODE_ONLY": "full-decode-only", "FULL": "full"}.get(
            graph_mode, "full-and-piecewise"),
        max_num_seqs=VSPEC_SEQS, capture_policy="exact", ascend={"mtp_strict_graph": False})}
    out["plan_gammas"] = list(gw.plan_from_settings(settings["now"]).gammas)
    out["plan_settings_sizes"] = list(gw.plan_from_settings(settings["now"]).sizes)
    patcher = Patcher("pair-graph-widths")
    plan = ascend.install(patcher, lambda: settings["now"])
    out["k_channel"] = plan.k_channel
    out["plan_graph_widths"] = list(plan.graph_widths)
    out["patched"] = sorted(r.label for r in patcher.records)
    cfg = _engine_config(EngineArgs, model, VSPEC_K, VSPEC_SEQS, capture_sizes=VSPEC_SIZES,
                         graph_mode=graph_mode)
    out["cudagraph_mode"] = cfg.compilation_config.cudagraph_mode.name
    log = fake_npu.graph_log
    log.clear()
    missing_before = len(fake_npu.MISSING_CALLS)
    ag._graph_params = ag._draft_graph_params = ag._draft_graph_prefill_params = None
    # vLLM-Ascend-HUST's proposer shape: its merged draft loops over num_draft_steps (set in
    # __init__, the tree depth, else K) beside num_speculative_tokens. The real 0.23 proposer
    # gets that attribute at build, and every _run_merged_draft call (capture, eager draft)
    # records both: vSpec must keep them equal to the step's gamma.
    from vllm_ascend.spec_decode.llm_base_proposer import AscendSpecDecodeBaseProposer

    merged = AscendSpecDecodeBaseProposer._run_merged_draft
    hust_steps: list[list[int]] = []

    def _run_merged_draft(self: Any, *args: Any, **kwargs: Any) -> Any:
        hust_steps.append([int(self.num_speculative_tokens), int(self.num_draft_steps)])
        return merged(self, *args, **kwargs)

    AscendSpecDecodeBaseProposer._run_merged_draft = _run_merged_draft
    try:
        with set_current_vllm_config(cfg):
            _init_parallel(cfg)
            runner = NPUModelRunner(cfg, torch.device("cpu"))
            runner.drafter.num_draft_steps = runner.drafter.num_speculative_tokens
            runner.load_model()
            spec = runner.get_kv_cache_spec()
            kv_cfg = get_kv_cache_configs(cfg, [spec], [64 * 1024 * 1024])[0]
            runner.initialize_kv_cache(kv_cfg)
            st = runner.__dict__[gw.STATE_ATTR]
            out["widths"] = list(st.widths)
            out["sizes"] = {str(w): v for w, v in st.sizes.items()}
            out["draft_gammas"] = list(st.draft_gammas)
            out["combined"] = st.combined
            out["shared_sizes"] = list(st.shared_sizes)
            out["draft_sizes"] = {str(g): v for g, v in st.draft_sizes.items()}
            out["capture_sizes"] = list(runner.compilation_config.cudagraph_capture_sizes)
            keys = runner.cudagraph_dispatcher.cudagraph_keys[CUDAGraphMode.FULL]
            out["full_keys"] = sorted(_desc(d) for d in keys)
            target_params = ag.get_graph_params()
            draft_params = ag.get_draft_graph_params()
            out["target_params_type"] = type(target_params).__name__
            out["target_param_sizes"] = {str(w): sorted(p.workspaces)
                                         for w, p in _by_key(target_params).items()}
            out["target_params_is_global"] = target_params is ag._graph_params
            out["draft_param_sizes"] = {str(g): sorted(p.workspaces)
                                        for g, p in draft_params.by_key.items()}
            drafter = runner.drafter
            graphs = drafter.__dict__[gw.GAMMA_RUNNABLES_ATTR]
            out["draft_runnable"] = type(drafter._runnable).__name__
            out["draft_graph_wrappers"] = {str(g): type(w).__name__ for g, w in graphs.items()}
            out["draft_wrappers_distinct"] = len({id(w) for w in graphs.values()}) == len(graphs)

            hust_steps.clear()
            runner.capture_model()
            out["hust_capture_steps"] = list(hust_steps)
            hust_steps.clear()
            captures = [{"graph": c["graph"], "desc": _desc_dict(c.get("batch_descriptor"))}
                        for c in log.captures]
            out["num_captures"] = len(captures)
            by_mode: dict[str, int] = {}
            for c in log.captures:
                by_mode[str(c.get("runtime_mode"))] = by_mode.get(str(c.get("runtime_mode")), 0) + 1
            out["captures_by_mode"] = by_mode
            target_graph = {tuple(_desc(d)): e.aclgraph.id
                            for d, e in runner.model.concrete_aclgraph_entries.items()}
            draft_graph = {(g, *_desc(d)): e.aclgraph.id
                           for g, w in graphs.items()
                           for d, e in w.concrete_aclgraph_entries.items()}
            out["target_entries"] = sorted(list(k_) for k_ in target_graph)
            out["draft_entries"] = sorted(list(k_) for k_ in draft_graph)
            out["graph_ids_unique"] = (
                len(set(target_graph.values()) | set(draft_graph.values()))
                == len(target_graph) + len(draft_graph) == by_mode.get("FULL"))
            out["target_attn_params"] = {
                str(w): {str(n): len(v) for n, v in p.attn_params.items()}
                for w, p in _by_key(target_params).items()}
            out["draft_attn_params"] = {
                str(g): {str(n): len(v) for n, v in p.attn_params.items()}
                for g, p in draft_params.by_key.items()}
            # the same token count captured at different widths: different handle objects
            shared = {}
            for n in (4, 6, 8, 12):
                owners = [w for w, p in _by_key(target_params).items() if p.handles.get(n)]
                ids = [id(h) for w in owners for h in _by_key(target_params)[w].handles[n]]
                shared[str(n)] = {"widths": owners, "handles_distinct": len(ids) == len(set(ids))}
            out["same_tokens_isolated"] = shared
            # the same token count captured for different gammas: different draft handles
            dshared = {}
            for n in (4, 6, 8, 12):
                owners = [g for g, p in draft_params.by_key.items() if p.handles.get(n)]
                ids = [id(h) for g in owners for h in draft_params.by_key[g].handles[n]]
                dshared[str(n)] = {"gammas": owners, "handles_distinct": len(ids) == len(set(ids))}
            out["draft_same_tokens_isolated"] = dshared

            # dispatch: the runner's own decision for each gamma / batch, then the drafter's
            # first pass under that target descriptor (steady: gamma drafted = width - 1;
            # switching: the controller changed gamma, drafts differ from the verify width)
            dispatch: dict[str, Any] = {}
            for gamma in VSPEC_GAMMAS:
                for reqs in range(1, VSPEC_SEQS + 1):
                    lens = np.full(reqs, 1 + gamma, dtype=np.int32)
                    dispatch[f"gamma={gamma},reqs={reqs}"] = _dispatch(runner, gw, lens)
            dispatch["mixed"] = _dispatch(runner, gw, np.array([2, 1, 2], dtype=np.int32))
            dispatch["prefill"] = _dispatch(runner, gw, np.array([2, 2], dtype=np.int32),
                                            computed=0)
            # mixed at gamma K (max query 4): the host's own draft graph where it has one
            dispatch["mixed_k"] = _dispatch(runner, gw, np.array([4, 1, 3], dtype=np.int32))
            out["dispatch"] = dispatch
            switching: dict[str, Any] = {}
            for width, gamma in ((4, 1), (4, 2), (2, 3), (1, 1), (3, 2)):
                reqs = 2
                lens = np.full(reqs, width, dtype=np.int32)
                switching[f"width={width},draft_gamma={gamma}"] = _dispatch(
                    runner, gw, lens, draft_gamma=gamma)
            out["switching"] = switching
            out["eager_frames"] = list(st.eager_frames)

            # replay per width: target graph + merged draft graph of gamma = width - 1
            replays: dict[str, Any] = {}
            # combined FULL: every shared key, once with each gamma that has a draft graph
            # there (and once without a drafter, as a target-only width-1 step)
            for n in st.shared_sizes:
                for g in [0, *(g for g in st.draft_gammas if n in st.draft_sizes[g])]:
                    desc_key = (n, min(n, VSPEC_SEQS), False)
                    before = _handle_updates(target_params, draft_params)
                    log.clear()
                    with gw.as_width(runner, g + 1):
                        runner._dummy_run(n, cudagraph_runtime_mode=CUDAGraphMode.FULL,
                                          uniform_decode=False)
                    after = _handle_updates(target_params, draft_params)
                    expect = [target_graph[desc_key]]
                    if g:
                        expect.append(draft_graph[(g, *desc_key)])
                    changed = sorted({k_[:3] for k_ in after if after[k_] != before.get(k_)})
                    replays[f"{n}:g{g}"] = {"replayed": [r["graph"] for r in log.replays],
                                            "expected": expect, "captures": len(log.captures),
                                            "updated_params": [list(c) for c in changed]}
            for w in () if st.combined else st.widths:
                for n in st.sizes[w]:
                    desc_key = (n, n // w, True)
                    before = _handle_updates(target_params, draft_params)
                    log.clear()
                    with gw.as_width(runner, w):
                        runner._dummy_run(n, cudagraph_runtime_mode=CUDAGraphMode.FULL,
                                          uniform_decode=True)
                    after = _handle_updates(target_params, draft_params)
                    replayed = [r["graph"] for r in log.replays]
                    expect = [target_graph[desc_key]]
                    if w > 1:
                        expect.append(draft_graph[(w - 1, *desc_key)])
                    changed = sorted({k_[:3] for k_ in after if after[k_] != before.get(k_)})
                    replays[f"{w}x{n}"] = {"replayed": replayed, "expected": expect,
                                           "captures": len(log.captures),
                                           "updated_params": [list(c) for c in changed]}
            out["replays"] = replays

            # the real drafting call: the K backport's _propose on the real proposer, the step's
            # gamma from the scheduler output, under the target batch descriptor of the step
            proposes: dict[str, Any] = {}
            for width, gamma in ((2, 1), (3, 2), (4, 3), (4, 1), (2, 3)):
                key = f"width={width},gamma={gamma}"
                try:
                    proposes[key] = _propose(runner, gw, width, gamma, target_params,
                                             draft_params, draft_graph, log)
                except Exception:  # report, the test names the frame
                    proposes[key] = {"error": traceback.format_exc()[-3000:]}
            out["proposes"] = proposes
            out["hust_propose_steps"] = list(hust_steps)
            out["hust_steps_after"] = [int(runner.drafter.num_speculative_tokens),
                                       int(runner.drafter.num_draft_steps)]

            # a real decode step sequence (execute_model -> sample_tokens -> the runner's own
            # propose_draft_token_ids), async scheduling, the drafted gamma changing
            try:
                out["decode_steps"] = _decode_steps(runner, st, log, target_graph, draft_graph)
            except Exception:  # report, the test names the failure
                out["decode_steps"] = {"error": traceback.format_exc()[-4000:]}

            # mtp_strict_graph: 4 requests at gamma 3 (16 tokens: no width-4 graph of that size)
            settings["now"] = dataclasses.replace(settings["now"],
                                                  ascend={"mtp_strict_graph": True})
            strict_out: dict[str, Any] = {}
            for gamma, reqs in ((3, 4), (3, 3), (1, 4), (0, 4)):
                lens = np.full(reqs, 1 + gamma, dtype=np.int32)
                try:
                    res = _dispatch(runner, gw, lens)
                    strict_out[f"gamma={gamma},reqs={reqs}"] = {"ok": res["target"]}
                except MtpStrictGraphError as exc:
                    strict_out[f"gamma={gamma},reqs={reqs}"] = {"error": str(exc)}
            settings["now"] = dataclasses.replace(settings["now"],
                                                  ascend={"mtp_strict_graph": False})
            out["strict"] = strict_out
    finally:
        AscendSpecDecodeBaseProposer._run_merged_draft = merged
        patcher.undo()
    out["undone"] = not any(hasattr(fn, "__vspec_original__") for fn in (
        NPUModelRunner._determine_batch_execution_and_padding, NPUModelRunner._warmup_and_capture,
        CudagraphDispatcher.dispatch))
    out["missing_calls"] = sorted(set(fake_npu.MISSING_CALLS[missing_before:]))
    return out


class _CpuSlotMapping:
    """vLLM's triton ``_compute_slot_mapping_kernel`` (no pytorch fallback; with triton hidden
    it is a plain function that cannot be launched) as CPU torch, launched as
    ``kernel[grid](...)``: context parallelism off (world size 1, rank 0) only."""

    def __getitem__(self, grid: Any) -> Any:
        return self

    def __call__(self, num_tokens: int, max_num_tokens: int, query_start_loc: Any,
                 positions: Any, block_table: Any, block_table_stride: int, block_size: int,
                 slot_mapping: Any, TOTAL_CP_WORLD_SIZE: int, TOTAL_CP_RANK: int,  # noqa: N803
                 CP_KV_CACHE_INTERLEAVE_SIZE: int, PAD_ID: int, BLOCK_SIZE: int) -> None:  # noqa: N803
        import torch

        if TOTAL_CP_WORLD_SIZE != 1:
            raise NotImplementedError("fake NPU: CPU slot mapping without context parallelism")
        qsl = query_start_loc.tolist()
        flat = block_table.reshape(-1)
        for req, (start, end) in enumerate(zip(qsl[:-1], qsl[1:], strict=True)):
            pos = positions[start:end].to(torch.int64)
            blocks = flat[req * block_table_stride + pos // block_size].to(torch.int64)
            slot_mapping[start:end] = blocks * block_size + pos % block_size
        slot_mapping[num_tokens:max_num_tokens] = PAD_ID


# drafted gamma per frame: frame 0 is the prefill; frame i verifies frame i-1's drafts
DECODE_GAMMAS = (3, 3, 1, 1, 2, 2)


def _decode_steps(runner: Any, st: Any, log: Any, target_graph: dict[Any, int],
                  draft_graph: dict[Any, int]) -> dict[str, Any]:
    """Drive the real runner through a prefill and decode frames of 2 requests, as an async
    scheduler of vLLM >= 0.31 with vSpec's hook would schedule them: frame i schedules the
    gamma drafted in frame i-1 as -1 placeholders (the async scheduler's), sets
    ``num_spec_tokens_to_schedule`` to the gamma drafted in frame i (vLLM 0.23's
    SchedulerOutput has no such field; set as an attribute, which the K backport reads), and
    sees the previous frame's output one frame late (the engine's batch queue). Each frame:
    execute_model -> sample_tokens (which calls propose_draft_token_ids)."""
    import vllm_ascend.worker.block_table as npu_block_table

    saved_kernel = npu_block_table._compute_slot_mapping_kernel
    npu_block_table._compute_slot_mapping_kernel = _CpuSlotMapping()
    try:
        return _run_frames(runner, st, log, target_graph, draft_graph)
    finally:
        npu_block_table._compute_slot_mapping_kernel = saved_kernel


def _run_frames(runner: Any, st: Any, log: Any, target_graph: dict[Any, int],
                draft_graph: dict[Any, int]) -> dict[str, Any]:
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput

    reqs, prompt_len = ("r0", "r1"), 6
    prev_drafts: Any = None
    sched_computed = dict.fromkeys(reqs, 0)  # the scheduler's request.num_computed_tokens
    sched_out = dict.fromkeys(reqs, 0)  # len(request.output_token_ids) in the scheduler
    pending: list[tuple[Any, dict[str, int]]] = []  # (output, drafts scheduled) per frame
    frames: list[dict[str, Any]] = []
    prev = None
    for i, gamma in enumerate(DECODE_GAMMAS):
        if len(pending) == 2:  # the engine updates frame i-2's output before scheduling i
            output, drafted = pending.pop(0)
            for j, r in enumerate(reqs):
                gen = output.sampled_token_ids[j]
                sched_out[r] += len(gen)
                sched_computed[r] -= drafted.get(r, 0) - (len(gen) - 1) if drafted else 0
        if i == 0:
            new = [NewRequestData(
                req_id=r, prompt_token_ids=list(range(10 + 7 * j, 10 + 7 * j + prompt_len)),
                mm_features=[], sampling_params=SamplingParams(temperature=0.0, max_tokens=64),
                pooling_params=None, block_ids=([j + 1],), num_computed_tokens=0,
                lora_request=None) for j, r in enumerate(reqs)]
            cached = CachedRequestData.make_empty()
            nsched = dict.fromkeys(reqs, prompt_len)
            spec: dict[str, list[int]] = {}
        else:
            new = []
            cached = CachedRequestData(
                req_ids=list(reqs), resumed_req_ids=set(), new_token_ids=[], all_token_ids={},
                new_block_ids=[None] * len(reqs),
                num_computed_tokens=[sched_computed[r] for r in reqs],
                num_output_tokens=[sched_out[r] for r in reqs])
            nsched = dict.fromkeys(reqs, 1 + prev)
            spec = {r: [-1] * prev for r in reqs} if prev else {}
        so = SchedulerOutput(
            scheduled_new_reqs=new, scheduled_cached_reqs=cached, num_scheduled_tokens=nsched,
            total_num_scheduled_tokens=sum(nsched.values()), scheduled_spec_decode_tokens=spec,
            scheduled_encoder_inputs={}, num_common_prefix_blocks=[0], finished_req_ids=set(),
            free_encoder_mm_hashes=[])
        so.num_spec_tokens_to_schedule = gamma
        for r in reqs:
            sched_computed[r] += nsched[r]
        eager_before = len(st.eager_frames)
        log.clear()
        assert runner.execute_model(so) is None
        # the target's input ids of this frame: each request's sampled token, then the
        # previous frame's first `prev` drafts (the async path copies them on device)
        n_in = sum(nsched.values())
        ids = runner.input_ids.gpu[:n_in].view(len(reqs), -1) if i else None
        carried = bool(i == 0 or not prev or torch.equal(
            ids[:, 1:].to(torch.int64), prev_drafts[:len(reqs), :prev].to(torch.int64)))
        result = runner.sample_tokens(None)
        output = result.get_output() if hasattr(result, "get_output") else result
        pending.append((output, {r: len(v) for r, v in spec.items()}))
        drafts = runner._draft_token_ids
        prev_drafts = drafts.clone()
        width = None if i == 0 else 1 + prev
        replays = [r["graph"] for r in log.replays]
        frame: dict[str, Any] = {
            "frame": i, "width": width, "gamma": gamma,
            "replayed": replays, "captures": len(log.captures),
            "drafts_shape": list(drafts.shape) if hasattr(drafts, "shape") else None,
            "sampled_lens": [len(t) for t in output.sampled_token_ids],
            "previous_drafts_in_input_ids": carried,
            "drafts_padding_zero": bool((drafts[:, gamma:] == 0).all()),
            "eager_drafts": [dict(f) for f in st.eager_frames[eager_before:]],
        }
        if width is None and st.combined:  # the prefill: the shared graph of 12 tokens
            key = (2 * prompt_len, VSPEC_SEQS, False)
            frame["target_graph"] = target_graph.get(key)
            frame["draft_graph"] = draft_graph.get((gamma, *key))
        if width is not None:
            n = 2 * width
            key = (n, min(n, VSPEC_SEQS), False) if st.combined else (n, 2, True)
            frame["target_graph"] = target_graph.get(key)
            frame["draft_graph"] = draft_graph.get((gamma, *key))
        frames.append(frame)
        prev = gamma
    return {"frames": frames}


def _propose(runner: Any, gw: Any, width: int, gamma: int, target_params: Any,
             draft_params: Any, draft_graph: dict[Any, int], log: Any) -> dict[str, Any]:
    """One drafting call as propose_draft_token_ids makes it after a decode step of 2
    requests x ``width`` tokens, with ``gamma`` drafts asked for by the scheduler output."""
    from types import SimpleNamespace

    import numpy as np
    import torch
    from vllm_ascend.attention.utils import AscendCommonAttentionMetadata

    reqs = 2
    n = reqs * width
    lens = np.full(reqs, width, dtype=np.int32)
    runner.input_batch.num_computed_tokens_cpu[:reqs] = 16
    mode, desc, *_ = runner._determine_batch_execution_and_padding(
        num_tokens=n, num_reqs=reqs, num_scheduled_tokens_np=lens,
        max_num_scheduled_tokens=width, use_cascade_attn=False)
    qsl = runner.query_start_loc
    qsl.cpu[: reqs + 1] = torch.arange(0, (reqs + 1) * width, width, dtype=torch.int32)
    qsl.gpu[: reqs + 1] = qsl.cpu[: reqs + 1]
    runner.optimistic_seq_lens_cpu[:reqs] = 16 + width
    runner.optimistic_seq_lens_cpu[reqs:] = 0
    runner.seq_lens[:reqs] = 16 + width
    block_table = runner.input_batch.block_table[0]
    block_table.slot_mapping.gpu[:n] = torch.arange(n) + 64
    cad = AscendCommonAttentionMetadata(
        query_start_loc=qsl.gpu[: reqs + 1], query_start_loc_cpu=qsl.cpu[: reqs + 1],
        seq_lens_cpu=runner.optimistic_seq_lens_cpu, _seq_lens_cpu=runner.optimistic_seq_lens_cpu,
        seq_lens_cpu_upper_bound=runner.optimistic_seq_lens_cpu,
        seq_lens=runner.seq_lens[:reqs], num_reqs=reqs, num_actual_tokens=n,
        num_input_tokens=n, max_query_len=width,
        num_computed_tokens_cpu=runner.input_batch.num_computed_tokens_cpu_tensor[:reqs],
        actual_seq_lengths_q=runner.actual_seq_lengths_q,
        block_table_tensor=block_table.get_device_tensor()[:reqs],
        slot_mapping=block_table.slot_mapping.gpu[:n], positions=runner.positions,
        attn_state=runner.attn_state, decode_token_per_req=runner.decode_token_per_req,
        is_prefilling=torch.zeros(reqs, dtype=torch.bool), max_seq_len=16 + width)
    hidden = runner.model_config.get_hidden_size()
    before = _handle_updates(target_params, draft_params)
    log.clear()
    drafter = runner.drafter
    # the runner's execute_model / sample_tokens run under inference mode (so does capture)
    with torch.inference_mode(), gw.drafting(runner, desc):
        drafts = drafter._propose(
            target_token_ids=torch.ones(n, dtype=torch.int32),
            target_positions=torch.arange(n, dtype=torch.int64) + 16,
            target_hidden_states=torch.zeros(n, hidden),
            next_token_ids=torch.ones(reqs, dtype=torch.int32), token_indices_to_sample=None,
            common_attn_metadata=cad, target_model_batch_desc=desc, sampling_metadata=None,
            scheduler_output=SimpleNamespace(num_spec_tokens_to_schedule=gamma))
    after = _handle_updates(target_params, draft_params)
    return {"target": [mode.name, *_desc(desc)],
            "drafts_shape": list(drafts.shape),
            "drafts_padding_zero": bool((drafts[:, gamma:] == 0).all()),
            "num_speculative_tokens_after": drafter.num_speculative_tokens,
            "replayed": [r["graph"] for r in log.replays],
            "expected": [draft_graph[(gamma, *_desc(desc))]]
            if (gamma, *_desc(desc)) in draft_graph else [],
            "captures": len(log.captures),
            "updated_params": sorted({k_[:3] for k_ in after if after[k_] != before.get(k_)})}


def _desc_dict(d: Any) -> list[Any] | None:
    if not d:
        return None
    return [d.get("num_tokens"), d.get("num_reqs"), d.get("uniform")]


def _by_key(params: Any) -> dict[Any, Any]:
    """A RoutedGraphParams' GraphParams per key; a plain (shared) GraphParams as "shared"."""
    return dict(params.by_key) if hasattr(params, "by_key") else {"shared": params}


def _handle_updates(target: Any, draft: Any) -> dict[tuple[Any, ...], int]:
    out: dict[tuple[Any, ...], int] = {}
    for label, router in (("target", target), ("draft", draft)):
        for key, params in _by_key(router).items():
            for n, handles in params.handles.items():
                for i, h in enumerate(handles):
                    out[(label, key, n, i)] = h.updates
    return out


def _dispatch(runner: Any, gw: Any, lens: Any, computed: int = 16,
              draft_gamma: int | None = None) -> dict[str, Any]:
    import numpy as np

    reqs = len(lens)
    runner.input_batch.num_computed_tokens_cpu[:reqs] = computed
    mode, desc, *_ = runner._determine_batch_execution_and_padding(
        num_tokens=int(lens.sum()), num_reqs=reqs, num_scheduled_tokens_np=lens,
        max_num_scheduled_tokens=int(lens.max()), use_cascade_attn=False)
    res: dict[str, Any] = {"target": [mode.name, *_desc(desc)]}
    if mode.name == "FULL" and desc.num_reqs > reqs:
        # execute_model pads query_start_loc for the dummy requests of the padded graph
        qsl = runner.query_start_loc
        qsl.np[0] = 0
        qsl.np[1:reqs + 1] = np.cumsum(lens)
        padded = runner._pad_query_start_loc_for_fia(qsl, desc.num_tokens, desc.num_reqs, reqs,
                                                     mode, desc.num_reqs)
        res["fia_query_start_loc"] = [int(x) for x in qsl.np[:padded + 1]]
    gamma = int(lens.max()) - 1 if draft_gamma is None else draft_gamma
    if gamma >= 1:
        # what _propose asks the runner's dispatcher (twice, as it does), with the
        # drafter's num_speculative_tokens set to the step's gamma as the K backport does
        drafter = runner.drafter
        saved = drafter.num_speculative_tokens
        drafter.num_speculative_tokens = gamma
        try:
            with gw.drafting(runner, desc):
                dmode, ddesc = runner.cudagraph_dispatcher.dispatch(
                    num_tokens=int(lens.sum()), uniform_decode=desc.uniform, has_lora=False)
                dmode2, ddesc2 = runner.cudagraph_dispatcher.dispatch(
                    num_tokens=ddesc.num_tokens, uniform_decode=desc.uniform, has_lora=False)
        finally:
            drafter.num_speculative_tokens = saved
        res["draft_first_pass"] = [dmode.name, *_desc(ddesc)]
        res["draft_second_dispatch"] = [dmode2.name, *_desc(ddesc2)]
    return res


def main(argv: list[str]) -> int:
    # vLLM inspects model classes in a subprocess: the env's zzz_fake_npu.pth installs the
    # fake NPU there too when this is set. Compile cache off: torch 2.13's AOT-autograd cache
    # rejects vllm-ascend 0.23's compiled graphs (it expects OutputCode; 0.23 pins torch 2.10).
    os.environ.setdefault("VSPEC_FAKE_NPU", str(TESTS))
    os.environ.setdefault("VLLM_DISABLE_COMPILE_CACHE", "1")
    import fake_npu

    fake_npu.install()
    what = argv[1] if len(argv) > 1 else "all"
    result: dict[str, Any] = {}
    try:
        if what in ("imports", "all"):
            result["imports"] = check_imports()
        if what in ("graph", "all"):
            result["graph"] = check_graph()
        if what in ("runner", "all"):
            result["runner"] = check_runner()
        if what == "vspec":
            result["vspec"] = check_vspec_graphs()
        if what == "vspec-full-and-piecewise":
            result["vspec"] = check_vspec_graphs("FULL_AND_PIECEWISE")
        if what == "vspec-full":  # combined FULL
            result["vspec"] = check_vspec_graphs("FULL")
    except Exception:
        result["error"] = traceback.format_exc()
    print("PAIR_JSON " + json.dumps(result, default=repr), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
