"""Training and evaluation helpers for ``scripts/build_tiny_models.py`` (split out to keep
one job per file): next-token and draft-head training loops and greedy-agreement measurement.

Torch and transformers are imported inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Log = Callable[[str], None]

# Training sequence length (tokens per sample).
SEQ = 128
# Target 2 layers; EAGLE-3 reads the residual stream after 0, 1 and 2 layers.
EAGLE3_AUX_IDS = [0, 1, 2]


def _batches(data: Any, steps: int, batch: int, seed: int) -> Iterator[Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - SEQ - 2, (batch,), generator=gen)
        yield torch.stack([data[s : s + SEQ + 1] for s in starts.tolist()])


def _optimise(params: list[Any], steps: int, lr: float) -> tuple[Any, Callable[[int], None]]:
    import torch

    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    warm = max(1, steps // 15)

    def set_lr(step: int) -> None:
        f = step / warm if step < warm else 0.1 + 0.45 * (1 + math.cos(math.pi * step / steps))
        for g in opt.param_groups:
            g["lr"] = lr * f

    return opt, set_lr


def _step(opt: Any, params: list[Any], loss: Any) -> None:
    import torch

    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


def train_lm(model: Any, data: Any, steps: int, batch: int, lr: float, seed: int, clock: Log,
             name: str) -> float:
    """Next-token training; returns the last logged loss."""
    import torch.nn.functional as F

    params = [p for p in model.parameters() if p.requires_grad]
    opt, set_lr = _optimise(params, steps, lr)
    last = float("nan")
    for i, x in enumerate(_batches(data, steps, batch, seed)):
        set_lr(i)
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        _step(opt, params, loss)
        if i % 100 == 0 or i == steps - 1:
            last = float(loss.detach())
            clock(f"  {name} step {i + 1}/{steps} loss {last:.3f}")
    return last


def train_head(kind: str, head: Any, target: Any, data: Any, steps: int, batch: int, lr: float,
               seed: int, clock: Log) -> float:
    """Distil a hidden-state drafter (eagle/eagle3/mtp) from the frozen target, one step ahead.

    At position p the drafter sees token x[p+1] and the target's hidden state at p, and must
    predict the target's distribution at p+1 (this is how vLLM's EagleProposer feeds it).
    """
    import torch
    import torch.nn.functional as F

    params = [p for p in head.parameters() if p.requires_grad]
    opt, set_lr = _optimise(params, steps, lr)
    emb, lm_head, norm = target.model.embed_tokens, target.lm_head, target.model.norm
    pos = torch.arange(SEQ - 1)
    last = float("nan")
    for i, x in enumerate(_batches(data, steps, batch, seed)):
        set_lr(i)
        with torch.no_grad():
            res = target.residuals(x[:, :-1])
            h_final = norm(res[-1])
            soft = F.softmax(lm_head(h_final[:, 1:]), dim=-1)
            tok_emb = emb(x[:, 1:-1])
        if kind == "eagle":
            out = head(tok_emb, h_final[:, :-1], pos)
            logits = lm_head(out)
            loss = F.smooth_l1_loss(out, h_final[:, 1:])
            loss = loss + _soft_ce(logits, soft)
        else:
            # eagle3/mtp: vLLM feeds the drafter's own output back as the hidden state of
            # the next draft step; a second, shifted pass teaches it to use that input.
            if kind == "eagle3":
                aux = torch.cat([res[j][:, :-1] for j in EAGLE3_AUX_IDS], dim=-1)
                normed, fed = head(tok_emb, aux, pos)
                normed2, _ = head(tok_emb[:, 1:], None, pos[1:], fed=fed[:, :-1])
                logits, logits2 = head.lm_head(normed), head.lm_head(normed2)
            else:  # mtp: MiMoModel hands the pre-norm final residual stream to the MTP layer
                out1 = head(tok_emb, res[-1][:, :-1], pos)
                logits = lm_head(out1)
                logits2 = lm_head(head(tok_emb[:, 1:], out1[:, :-1], pos[1:]))
            loss = _soft_ce(logits, soft) + 0.5 * _soft_ce(logits2, soft[:, 1:])
        _step(opt, params, loss)
        if i % 100 == 0 or i == steps - 1:
            last = float(loss.detach())
            clock(f"  {kind} step {i + 1}/{steps} loss {last:.3f}")
    return last


def _soft_ce(logits: Any, soft: Any) -> Any:
    import torch.nn.functional as F

    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), soft.reshape(-1, soft.shape[-1]))


# --------------------------------------------------------------------------- evaluation


def eval_set(data: Any, bos: int, seed: int, n: int = 16, prompt: int = 48) -> Any:
    import torch

    gen = torch.Generator().manual_seed(seed + 7)
    starts = torch.randint(0, len(data) - prompt, (n,), generator=gen).tolist()
    return torch.stack([torch.cat([torch.tensor([bos]), data[s : s + prompt - 1]]) for s in starts])


def greedy(fn: Callable[[Any], Any], prompts: Any, new: int = 32) -> Any:
    """Greedy continuation (no KV cache; tiny models) -> [n, prompt + new]."""
    import torch

    seq = prompts
    with torch.no_grad():
        for _ in range(new):
            seq = torch.cat([seq, fn(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seq


def agreement(fn: Callable[[Any], Any], seq: Any, prompt_len: int) -> float:
    """Teacher-forced greedy agreement with the target continuation in ``seq``."""
    import torch

    with torch.no_grad():
        pred = fn(seq[:, :-1]).argmax(-1)[:, prompt_len - 1 :]
    return float((pred == seq[:, prompt_len:]).float().mean())


def head_agreement(kind: str, head: Any, target: Any, seq: Any, prompt_len: int) -> float:
    """Step-1 agreement of a hidden-state drafter: predicts token p+2 from (x[p+1], h[p])."""
    import torch

    with torch.no_grad():
        x = seq
        res = target.residuals(x)
        emb = target.model.embed_tokens(x[:, 1:])
        pos = torch.arange(x.shape[1] - 1)
        if kind == "eagle":
            logits = target.lm_head(head(emb, target.model.norm(res[-1])[:, :-1], pos))
        elif kind == "eagle3":
            aux = torch.cat([res[j][:, :-1] for j in EAGLE3_AUX_IDS], dim=-1)
            logits = head.lm_head(head(emb, aux, pos)[0])
        else:
            logits = target.lm_head(head(emb, res[-1][:, :-1], pos))
        # logits[p] predicts x[p+2]; compare on continuation tokens only
        pred = logits.argmax(-1)[:, prompt_len - 2 : -1]
    return float((pred == x[:, prompt_len:]).float().mean())


def hf_agreement(target_dir: Path, draft_dir: Path, seq: Any, prompt_len: int) -> float:
    """Agreement measured with ``transformers`` on the saved checkpoints (validates the files)."""
    import torch
    from transformers import AutoModelForCausalLM

    def load(d: Path) -> Callable[[Any], Any]:
        m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        return lambda ids: m(input_ids=ids).logits

    t_seq = greedy(load(target_dir), seq[:, :prompt_len])
    return agreement(load(draft_dir), t_seq, prompt_len)
