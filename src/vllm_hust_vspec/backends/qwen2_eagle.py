"""EAGLE-1/2 drafter for Qwen2 / Qwen2.5 targets, in the EAGLE-Qwen2 checkpoint format.

Registered lazily with vLLM (``host.models``) under the architecture names EAGLE-Qwen2
checkpoints use, only when the host has no implementation of its own. The format (as in the
EAGLE-Qwen2.5-14B-Instruct releases):

* ``fc``: ``Linear(2H -> H)`` over ``[embedding(token); target hidden state]`` (bias optional);
* one Qwen2 decoder layer (``layers.0.*``) whose input RMSNorm is skipped (EAGLE-1 layout:
  the ``fc`` output is already normalised by training), no final norm;
* no ``lm_head`` (and often no ``embed_tokens``): vLLM shares the target's; a shipped copy
  identical to the target's is shared as well;
* tensor names with or without a leading ``model.``.

Qwen2 attention has q/k/v biases. EAGLE heads trained without them ship no bias tensors; those
biases (and a missing ``fc.bias``) are set to **zero**, which is exactly the bias-free layer the
head was trained as. This is logged once per model. This module imports vLLM and torch; it is
only imported by vLLM's model registry when such a checkpoint is loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch
from torch import nn
from vllm.compilation.decorators import support_torch_compile
from vllm.config import VllmConfig
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    VocabParallelEmbedding,
)
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.qwen2 import Qwen2DecoderLayer, Qwen2ForCausalLM
from vllm.model_executor.models.utils import (
    get_draft_quant_config,
    maybe_prefix,
    process_eagle_weight,
)

logger = logging.getLogger("vllm_hust_vspec.backends.qwen2_eagle")

# checkpoint projection -> (vLLM fused parameter, shard id)
STACKED = (
    (".q_proj", ".qkv_proj", "q"),
    (".k_proj", ".qkv_proj", "k"),
    (".v_proj", ".qkv_proj", "v"),
    (".gate_proj", ".gate_up_proj", 0),
    (".up_proj", ".gate_up_proj", 1),
)
# Architecture names this class serves (EAGLEConfig prefixes "Eagle" to the checkpoint's own).
ARCHITECTURES = ("EagleQwen2ForCausalLM", "Qwen2ForCausalLMEagle", "EagleQwen2ForCausalLMEagle")


def checkpoint_name(name: str) -> str:
    """Map a checkpoint tensor name to this module's parameter name."""
    if name.startswith("model."):
        name = name[len("model."):]
    if name.startswith("lm_head."):
        return name
    return "model." + name


# Explicit dims: this module uses postponed annotations, which the decorator cannot inspect.
@support_torch_compile(dynamic_arg_dims={"input_ids": 0, "positions": -1, "hidden_states": 0})
class Qwen2EagleModel(nn.Module):
    """``fc`` + Qwen2 decoder layer(s); returns (hidden, hidden) like vLLM's EAGLE models."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "",
                 start_layer_id: int = 0) -> None:
        super().__init__()
        spec = vllm_config.speculative_config
        assert spec is not None and spec.draft_model_config is not None
        self.config = spec.draft_model_config.hf_config
        quant_config = get_draft_quant_config(vllm_config)
        self.embed_tokens = VocabParallelEmbedding(
            self.config.vocab_size, self.config.hidden_size,
            prefix=maybe_prefix(prefix, "embed_tokens"),
        )
        self.layers = nn.ModuleList(
            Qwen2DecoderLayer(
                config=self.config, cache_config=vllm_config.cache_config,
                quant_config=quant_config,
                prefix=maybe_prefix(prefix, f"layers.{i + start_layer_id}"),
            )
            for i in range(self.config.num_hidden_layers)
        )
        # EAGLE-1 layout: the first layer has no input norm.
        self.layers[0].input_layernorm = nn.Identity()
        self.fc = ReplicatedLinear(
            input_size=self.config.hidden_size * 2, output_size=self.config.hidden_size,
            bias=True, params_dtype=vllm_config.model_config.dtype, quant_config=quant_config,
            prefix=maybe_prefix(prefix, "fc"), return_bias=False,
        )

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embeds = self.embed_tokens(input_ids)
        hidden_states = self.fc(torch.cat((embeds, hidden_states), dim=-1))
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual)
        hidden_states = hidden_states + residual
        return hidden_states, hidden_states


class EagleQwen2ForCausalLM(Qwen2ForCausalLM):
    """The drafter vLLM instantiates for an EAGLE-Qwen2 checkpoint."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        nn.Module.__init__(self)
        spec = vllm_config.speculative_config
        assert spec is not None and spec.draft_model_config is not None
        self.config = spec.draft_model_config.hf_config
        if getattr(self.config, "draft_vocab_size", None) is None:
            self.config.draft_vocab_size = self.config.vocab_size
        target_layers = vllm_config.model_config.get_num_layers(vllm_config.parallel_config)
        self.model = Qwen2EagleModel(
            vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"),
            start_layer_id=target_layers,
        )
        self.lm_head = ParallelLMHead(
            self.config.vocab_size, self.config.hidden_size,
            prefix=maybe_prefix(prefix, "lm_head"),
        )
        self.logits_processor = LogitsProcessor(
            self.config.vocab_size, scale=getattr(self.config, "logit_scale", 1.0)
        )

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_input_ids(input_ids)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                hidden_states: torch.Tensor,
                inputs_embeds: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if inputs_embeds is not None:
            raise NotImplementedError(f"{type(self).__name__} takes no multimodal inputs")
        return self.model(input_ids, positions, hidden_states)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        return self.logits_processor(self.lm_head, hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        biases = {n for n in params if n.endswith(".bias")}
        with torch.no_grad():
            for n in biases:
                params[n].zero_()  # missing biases are exact zeros, never uninitialised memory
        loaded: set[str] = set()
        skipped: list[str] = []
        for raw_name, tensor in weights:
            name = checkpoint_name(raw_name)
            process_eagle_weight(self, name)
            for ckpt, fused, shard in STACKED:
                if ckpt in name:
                    target = name.replace(ckpt, fused)
                    if target not in params:
                        break
                    param = params[target]
                    param.weight_loader(param, tensor, shard)  # type: ignore[operator]
                    loaded.add(target)
                    break
            else:
                if name not in params:
                    skipped.append(raw_name)  # e.g. layers.0.input_layernorm (not used)
                    continue
                param = params[name]
                getattr(param, "weight_loader", default_weight_loader)(param, tensor)
                loaded.add(name)
        missing_bias = sorted(n for n in biases if n not in loaded)
        if missing_bias:
            logger.warning(
                "vSpec Qwen2-EAGLE: checkpoint has no %s; using zero bias (the bias-free layer "
                "the head was trained as)", ", ".join(missing_bias),
            )
        if skipped:
            logger.info("vSpec Qwen2-EAGLE: ignored checkpoint tensors %s", skipped)
        # Zero biases count as loaded; lm_head / embed_tokens are shared from the target by
        # the proposer when the checkpoint has none (has_own_* flags stay False).
        loaded |= biases
        for n in params:
            if n.startswith("lm_head.") or n.startswith("model.embed_tokens."):
                loaded.add(n)
        return loaded


__all__ = ["ARCHITECTURES", "EagleQwen2ForCausalLM", "Qwen2EagleModel", "checkpoint_name"]
