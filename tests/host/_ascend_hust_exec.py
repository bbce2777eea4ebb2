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

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _fork_import as fi  # noqa: E402

MAX_K = 4
BATCH = 3
HIDDEN = 8
VOCAB = 32
BUF = 64
FRAMES = (4, 2, 1, 0, 3, 4, 1, 2)


class CountingDraft:
    """A draft model that records each forward pass (its batch rows)."""

    def __init__(self, returns_tuple: bool) -> None:
        import torch

        gen = torch.Generator().manual_seed(0)
        self.embed = torch.randn(VOCAB, HIDDEN, generator=gen)
        self.head = torch.randn(HIDDEN, VOCAB, generator=gen)
        self.returns_tuple = returns_tuple
        self.passes: list[int] = []

    def __call__(self, input_ids: Any, positions: Any, inputs_embeds: Any = None,
                 hidden_states: Any = None) -> Any:
        self.passes.append(int(input_ids.shape[0]))
        h = self.embed[input_ids.long()] + (0 if hidden_states is None else hidden_states)
        return (h, h) if self.returns_tuple else h

    def compute_logits(self, hidden: Any) -> Any:
        return hidden @ self.head


def fork_module_globals(mod: Any, fc_holder: dict[str, Any]) -> None:
    """The NPU configuration the eager draft path reads: no LM-head TP, no reduce-sample, no
    flash-comm, the forward context this harness sets."""
    mod.lmhead_tp_enable = lambda: False
    mod.get_ascend_config = lambda: SimpleNamespace(enable_reduce_sample=False)
    mod._EXTRA_CTX = SimpleNamespace(flash_comm_v1_enabled=False, num_tokens=0,
                                     num_accept_tokens=0)

    @contextlib.contextmanager
    def set_ascend_forward_context(attn_metadata: Any, *args: Any, **kwargs: Any) -> Iterator[None]:
        fc_holder["fc"] = SimpleNamespace(attn_metadata=attn_metadata, moe_layer_index=0,
                                          cudagraph_runtime_mode=kwargs.get(
                                              "aclgraph_runtime_mode"),
                                          batch_descriptor=kwargs.get("batch_descriptor"))
        try:
            yield
        finally:
            fc_holder["fc"] = None

    mod.set_ascend_forward_context = set_ascend_forward_context
    mod.get_forward_context = lambda: fc_holder["fc"]


def make_proposer(cls: Any, mod: Any, *, async_on: bool, line: str) -> tuple[Any, dict[str, Any]]:
    """A proposer built without ``__init__`` (which loads NPU state): the attributes the eager
    ``_propose`` -> ``_run_merged_draft`` path reads, sized for ``MAX_K`` as ``__init__`` does."""
    import torch
    from vllm.config import CUDAGraphMode

    rec: dict[str, Any] = {"first_pass": 0, "attn_steps": []}
    p = object.__new__(cls)
    p.method = "eagle"
    p.num_speculative_tokens = MAX_K
    if line == "pearl":
        p.num_draft_steps = MAX_K
        p.tree_drafting, p.tree_width, p.tree_depth = False, None, None
        p.use_heterogeneous_vocab = False
    p.parallel_drafting = False
    p.pcp_size = p.dcp_size = 1
    p.use_cuda_graph = False
    p.supports_mm_inputs = p.uses_mrope = p.is_multimodal_model = False
    p.enable_enpu = False
    p.enable_shared_expert_dp = False
    p.use_compress = False
    p.draft_window_size = p.sliding_window = None
    p.decode_threshold = 1 + MAX_K
    p.use_async_scheduling = async_on
    p.pass_hidden_states_to_model = True
    p._share_mtp_indices = False
    p.device = torch.device("cpu")
    p.hidden_size = HIDDEN
    p.input_ids = torch.zeros(BUF, dtype=torch.int32)
    p.positions = torch.zeros(BUF, dtype=torch.int64)
    p.hidden_states = torch.zeros(BUF, HIDDEN)
    p.arange = torch.arange(BUF)
    p.token_indices_to_sample = torch.zeros(BUF, dtype=torch.int32)
    p.slot_mapping_group = [torch.zeros(BUF, dtype=torch.int32) for _ in range(MAX_K)]
    p.seq_lens_group = [torch.zeros(BUF, dtype=torch.int32) for _ in range(MAX_K)]
    p.query_start_loc_group = [torch.zeros(BUF, dtype=torch.int32) for _ in range(MAX_K)]
    p.attn_layer_names = ["draft.layers.0.attn"]
    p.model = CountingDraft(returns_tuple=True)
    p.dynamic_spec = None
    p._last_draft_probs = None
    builder = SimpleNamespace(build=lambda *a, **k: SimpleNamespace(
        num_prefills=0, causal=True, seq_lens_cpu=torch.full((BATCH,), 10)))
    p.draft_attn_groups = [SimpleNamespace(get_metadata_builder=lambda: builder,
                                           layer_names=p.attn_layer_names,
                                           kv_cache_spec=SimpleNamespace(block_size=16))]
    p.runner = SimpleNamespace(
        input_batch=SimpleNamespace(lora_id_to_lora_request={}),
        _sync_metadata_across_dp=lambda n, is_draft_model=False: (n, None, None),
        seq_lens=torch.full((BUF,), 10, dtype=torch.int32),
        optimistic_seq_lens_cpu=torch.full((BUF,), 10, dtype=torch.int32),
        uniform_decode_query_len=1 + MAX_K, dynamic_eplb=False, pcp_manager=None,
        get_model=lambda: None, eplb_heat_collection_status=False,
        use_async_scheduling=async_on, prev_num_spec_tokens=MAX_K,
    )
    p.vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(use_mla=False, max_model_len=1024, uses_mrope=False),
        scheduler_config=SimpleNamespace(max_num_seqs=BATCH),
        speculative_config=SimpleNamespace(parallel_drafting=False),
    )
    p.draft_model_config = None

    def set_inputs_first_pass(**kw: Any) -> Any:
        rec["first_pass"] += 1
        n = int(kw["target_token_ids"].shape[0])
        p.input_ids[:n] = kw["target_token_ids"]
        p.hidden_states[:n] = kw["target_hidden_states"]
        p.positions[:n] = kw["target_positions"]
        # the last token of each request is sampled (what the host's version returns)
        return n, kw["token_indices_to_sample"], kw["cad"], None

    def attn_update(draft_index: int, attn_metadata: Any, cad: Any, *args: Any,
                    **kwargs: Any) -> Any:
        rec["attn_steps"].append(draft_index)
        return cad, attn_metadata

    p.set_inputs_first_pass = set_inputs_first_pass
    p.attn_update_stack_num_spec_norm = attn_update
    p._runnable = p._run_merged_draft
    assert CUDAGraphMode.NONE is not None
    return p, rec


def cad() -> Any:
    import torch

    q = torch.arange(BATCH + 1, dtype=torch.int32)
    return SimpleNamespace(
        batch_size=lambda: BATCH, num_reqs=BATCH, query_start_loc=q, query_start_loc_cpu=q,
        block_table_tensor=torch.zeros(BATCH, 4, dtype=torch.int32),
        slot_mapping=torch.arange(BATCH, dtype=torch.int32),
        seq_lens=torch.full((BATCH,), 10, dtype=torch.int32),
        num_computed_tokens_cpu=None, num_input_tokens=BATCH,
    )


def call_kwargs(step: int) -> dict[str, Any]:
    import torch

    ids = torch.tensor([(5 * step + i) % VOCAB for i in range(BATCH)], dtype=torch.int32)
    return dict(
        target_token_ids=ids, target_positions=torch.full((BATCH,), 9 + step),
        target_hidden_states=torch.zeros(BATCH, HIDDEN), next_token_ids=ids,
        token_indices_to_sample=None, common_attn_metadata=cad(),
        target_model_batch_desc=SimpleNamespace(uniform=True), sampling_metadata=None,
    )


def frames(p: Any, rec: dict[str, Any], call: Any) -> list[dict[str, Any]]:
    """Run each frame's gamma through ``call(p, step, gamma)``; what the drafter did."""
    out = []
    for step, gamma in enumerate(FRAMES):
        before_passes, before_attn = len(p.model.passes), len(rec["attn_steps"])
        drafts = call(p, step, gamma)
        out.append({
            "gamma": gamma,
            "passes": len(p.model.passes) - before_passes,
            "attn_steps": len(rec["attn_steps"]) - before_attn,
            "shape": list(drafts.shape),
            "k_after": p.num_speculative_tokens,
            "steps_after": getattr(p, "num_draft_steps", None),
        })
    return out


def run_pearl(tree: Path) -> dict[str, Any]:
    mods = fi.load_fork({
        "vllm_ascend.compilation.acl_graph": tree / "vllm_ascend/compilation/acl_graph.py",
        "vllm_ascend.spec_decode.llm_base_proposer":
            tree / "vllm_ascend/spec_decode/llm_base_proposer.py",
    }, HERE.parent)
    mod = mods["vllm_ascend.spec_decode.llm_base_proposer"]
    fc: dict[str, Any] = {"fc": None}
    fork_module_globals(mod, fc)
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
    mods = fi.load_fork({
        "vllm_ascend.compilation.acl_graph": tree / "vllm_ascend/compilation/acl_graph.py",
        "vllm_ascend.spec_decode.llm_base_proposer":
            upstream / "vllm_ascend/spec_decode/llm_base_proposer.py",
    }, HERE.parent)
    mod = mods["vllm_ascend.spec_decode.llm_base_proposer"]
    fc: dict[str, Any] = {"fc": None}
    fork_module_globals(mod, fc)
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


def run_graphs(tree: Path, upstream: Path) -> dict[str, Any]:
    """FULL_DECODE_ONLY on the native-K shape: the fork runner's target dispatch per verify
    width, and the drafter (upstream's K-taking _propose) replaying the fork's ACLGraphWrapper,
    without vSpec and with vSpec's per-width / per-gamma graphs."""
    mods = fi.load_fork({
        "vllm_ascend.compilation.acl_graph": tree / "vllm_ascend/compilation/acl_graph.py",
        "vllm_ascend.spec_decode.llm_base_proposer":
            upstream / "vllm_ascend/spec_decode/llm_base_proposer.py",
        "vllm_ascend.worker.model_runner_v1": tree / "vllm_ascend/worker/model_runner_v1.py",
    }, HERE.parent)
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
            st = gw._state(r)
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
    mods = fi.load_fork({
        "vllm_ascend.compilation.acl_graph": tree / "vllm_ascend/compilation/acl_graph.py",
        "vllm_ascend.spec_decode.llm_base_proposer":
            upstream / "vllm_ascend/spec_decode/llm_base_proposer.py",
        "vllm_ascend.worker.model_runner_v1": tree / "vllm_ascend/worker/model_runner_v1.py",
    }, HERE.parent)
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
