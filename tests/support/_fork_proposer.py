"""The proposer the fork-execution runs share (subprocess only): a vLLM-Ascend proposer class
built without ``__init__`` (which loads NPU state), with the attributes its eager
``_propose`` -> ``_run_merged_draft`` path reads, a draft model that counts its forward
passes, and the NPU configuration the fork's module globals read."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

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


