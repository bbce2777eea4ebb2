"""Minimal torch modules mirroring vLLM's Llama / EAGLE / EAGLE-3 / MiMo-MTP forward passes.

Used by ``scripts/build_tiny_models.py`` to train the tiny fixtures. Parameter names equal the
Hugging Face / vLLM checkpoint names, so a ``state_dict()`` can be saved as-is (or loaded into
a ``transformers`` model and written with ``save_pretrained``). The math follows vLLM 0.32:
RMSNorm in float32, neox-style rotary embeddings, pre-norm residual blocks, SwiGLU MLP.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Shape:
    """Transformer hyper-parameters shared by the modules below."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    inter: int
    eps: float = 1e-5
    theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * self.weight


def rope(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [T, head_dim] for neox-style rotation (HF ``rotate_half``)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = positions.float()[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


class Attention(nn.Module):
    def __init__(self, s: Shape, in_dim: int | None = None, qkv_bias: bool = False) -> None:
        super().__init__()
        d = in_dim or s.hidden
        self.s = s
        self.q_proj = nn.Linear(d, s.heads * s.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(d, s.kv_heads * s.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(d, s.kv_heads * s.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(s.heads * s.head_dim, s.hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        hd = self.s.head_dim
        q = self.q_proj(x).view(b, t, self.s.heads, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.s.kv_heads, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.s.kv_heads, hd).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        rep = self.s.heads // self.s.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden, s.inter, bias=False)
        self.up_proj = nn.Linear(s.hidden, s.inter, bias=False)
        self.down_proj = nn.Linear(s.inter, s.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """Pre-norm decoder layer. ``input_norm=False`` is EAGLE-1's first layer (no input norm)."""

    def __init__(self, s: Shape, input_norm: bool = True, qkv_bias: bool = False) -> None:
        super().__init__()
        if input_norm:
            self.input_layernorm = RMSNorm(s.hidden, s.eps)
        self.self_attn = Attention(s, qkv_bias=qkv_bias)
        self.post_attention_layernorm = RMSNorm(s.hidden, s.eps)
        self.mlp = MLP(s)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        norm_in = getattr(self, "input_layernorm", None)
        h = x + self.self_attn(norm_in(x) if norm_in is not None else x, cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class Inner(nn.Module):
    def __init__(self, s: Shape, qkv_bias: bool = False) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab, s.hidden)
        self.layers = nn.ModuleList([Block(s, qkv_bias=qkv_bias) for _ in range(s.layers)])
        self.norm = RMSNorm(s.hidden, s.eps)


class TinyLM(nn.Module):
    """Llama-style causal LM (``qkv_bias=True`` gives the Qwen2/MiMo layout)."""

    def __init__(self, s: Shape, qkv_bias: bool = False) -> None:
        super().__init__()
        self.s = s
        self.model = Inner(s, qkv_bias=qkv_bias)
        self.lm_head = nn.Linear(s.hidden, s.vocab, bias=False)
        init_weights(self)

    def residuals(self, ids: torch.Tensor) -> list[torch.Tensor]:
        """Residual stream after 0..L layers (vLLM's aux hidden state ids index this list)."""
        cos, sin = rope(torch.arange(ids.shape[1]), self.s.head_dim, self.s.theta)
        h = self.model.embed_tokens(ids)
        out = [h]
        for layer in self.model.layers:
            h = layer(h, cos, sin)
            out.append(h)
        return out

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.model.norm(self.residuals(ids)[-1]))


class EagleHead(nn.Module):
    """vLLM ``EagleLlamaForCausalLM``: fc(cat(embed, h)) -> 1 layer without input norm.

    Embedding and lm_head are the target's (frozen, not part of the saved checkpoint).
    """

    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.s = s
        self.fc = nn.Linear(2 * s.hidden, s.hidden, bias=False)
        self.layers = nn.ModuleList([Block(s, input_norm=False)])
        init_weights(self)

    def forward(self, emb: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cos, sin = rope(pos, self.s.head_dim, self.s.theta)
        return self.layers[0](self.fc(torch.cat([emb, hidden], dim=-1)), cos, sin)


class Eagle3Layer(nn.Module):
    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(s.hidden, s.eps)
        self.hidden_norm = RMSNorm(s.hidden, s.eps)
        self.self_attn = Attention(s, in_dim=2 * s.hidden)
        self.post_attention_layernorm = RMSNorm(s.hidden, s.eps)
        self.mlp = MLP(s)


class Eagle3Head(nn.Module):
    """vLLM ``Eagle3LlamaForCausalLM`` (one ``midlayer``, fc over concatenated aux states)."""

    def __init__(self, s: Shape, num_aux: int) -> None:
        super().__init__()
        self.s = s
        self.fc = nn.Linear(num_aux * s.hidden, s.hidden, bias=False)
        self.midlayer = Eagle3Layer(s)
        self.norm = RMSNorm(s.hidden, s.eps)
        self.lm_head = nn.Linear(s.hidden, s.vocab, bias=False)
        init_weights(self)

    def forward(
        self, emb: torch.Tensor, aux: torch.Tensor | None, pos: torch.Tensor,
        fed: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (normed output for lm_head, pre-norm output fed to the next draft step).

        Step 1 projects the target's aux states with ``fc``; later steps pass the previous
        step's pre-norm output as ``fed`` instead (as vLLM's EagleProposer does).
        """
        cos, sin = rope(pos, self.s.head_dim, self.s.theta)
        m = self.midlayer
        g = self.fc(aux) if fed is None else fed
        x = torch.cat([m.input_layernorm(emb), m.hidden_norm(g)], dim=-1)
        res = g + m.self_attn(x, cos, sin)
        pre = res + m.mlp(m.post_attention_layernorm(res))
        return self.norm(pre), pre


class MtpLayer(nn.Module):
    """vLLM ``MiMoMultiTokenPredictorLayer`` (Qwen2 block with q/k/v bias)."""

    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.s = s
        self.token_layernorm = RMSNorm(s.hidden, s.eps)
        self.hidden_layernorm = RMSNorm(s.hidden, s.eps)
        self.input_proj = nn.Linear(2 * s.hidden, s.hidden, bias=False)
        self.block = Block(s, qkv_bias=True)
        self.final_layernorm = RMSNorm(s.hidden, s.eps)
        init_weights(self)

    def forward(self, emb: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cos, sin = rope(pos, self.s.head_dim, self.s.theta)
        emb = torch.where(pos[None, :, None] == 0, torch.zeros_like(emb), emb)
        x = self.input_proj(
            torch.cat([self.hidden_layernorm(hidden), self.token_layernorm(emb)], dim=-1)
        )
        return self.final_layernorm(self.block(x, cos, sin))

    def checkpoint_tensors(self) -> dict[str, torch.Tensor]:
        """Weights named as in a MiMo checkpoint (``model.mtp_layers.0.*``)."""
        out = {}
        for name, t in self.state_dict().items():
            out["model.mtp_layers.0." + name.replace("block.", "")] = t
        return out


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """Normal(0, std) for linear/embedding weights, zero biases (norm weights stay 1)."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
