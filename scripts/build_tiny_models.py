#!/usr/bin/env python3
"""Build deterministic tiny REAL models for end-to-end speculative-decoding tests.

Everything is built offline from Python's own standard-library sources: a byte-level BPE
tokenizer, a briefly trained Llama target, drafters of controlled quality (trained 1-layer
draft, exact copy, Gaussian-noise copies), a goodput-adaptation pair (a deep target whose
extra layers are exact no-ops, an agreeing cheap draft and a random cheap draft), an EAGLE-1
head, an EAGLE-3 head and a MiMo-style MTP target. All weights are float32 safetensors.

A ``manifest.json`` in the output directory records each model (path, architecture, params,
measured greedy agreement with its target), the script version and the seed; a rebuild is
skipped while both are unchanged (``--force`` rebuilds). The build has two stages (``lm``: the
target and its draft models; ``heads``: the EAGLE, EAGLE-3 and MTP drafters), and ``--only lm``
builds the first alone (what the demo needs); a later full build adds the second, with the
files a build of both at once makes.

Usage: ``python scripts/build_tiny_models.py [--out DIR] [--seed N] [--force] [--only STAGE]``
(``TINY_MODELS_THREADS=N`` sets torch's thread count; default: all cores, or 1 when busy).
``python scripts/build_tiny_models.py check [--models DIR] [--bench]`` runs every built drafter
in real vLLM and checks its greedy output equals target-only's (``check --help``).
Importable: ``build_models(out_dir, seed=..., force=False, stages=...) -> dict`` (the
manifest).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPT_VERSION = "1"
DEFAULT_SEED = 1234
DEFAULT_OUT = Path(__file__).resolve().parents[1] / ".cache" / "models"
MANIFEST = "manifest.json"

VOCAB = 2048
BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
CORPUS_CHARS = 2_500_000
MAX_POS = 1024
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
DEEP_EXTRA_LAYERS = 10
NOISE_GOALS = {"draft-noise-medium": 0.7, "draft-noise-poor": 0.2}
# The build in two stages, each a set of models: "lm" (the target and its draft models, all a
# draft-model demo or test needs) and "heads" (EAGLE, EAGLE-3 and MTP drafters of the target).
STAGES = ("lm", "heads")
STAGE_MODELS = {
    "lm": ("target", "draft", "draft-copy", *NOISE_GOALS, "target-deep", "draft-cheap-agree",
           "draft-cheap-random"),
    "heads": ("eagle", "eagle3", "mtp-target"),
}

Log = Callable[[str], None]


# --------------------------------------------------------------------------- helpers


class _Clock:
    def __init__(self, log: Log) -> None:
        self.t0 = time.monotonic()
        self.log = log

    def __call__(self, msg: str) -> None:
        self.log(f"[build_tiny_models {time.monotonic() - self.t0:6.1f}s] {msg}")


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """Serialise concurrent builders (e.g. parallel pytest workers) on one directory."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".build.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def load_manifest(out: Path) -> dict[str, Any] | None:
    """The manifest in ``out`` or None when absent/unreadable."""
    try:
        data = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _stage_current(out: Path, man: dict[str, Any], stage: str) -> bool:
    """True when ``man`` lists every model of ``stage`` and each is on disk."""
    models = man.get("models") or {}
    return all(name in models and (out / models[name]["path"] / "config.json").is_file()
               for name in STAGE_MODELS[stage])


def is_current(out: Path, seed: int = DEFAULT_SEED, stages: tuple[str, ...] = STAGES) -> bool:
    """True when ``out`` holds a complete build of ``stages`` (and the models derived from
    them) of this script version and seed."""
    man = load_manifest(out)
    if not man or man.get("script_version") != SCRIPT_VERSION or man.get("seed") != seed:
        return False
    # every stage is trained on the lm stage's target
    if not all(_stage_current(out, man, stage) for stage in {"lm", *stages}):
        return False
    return all(name in man["models"] and (out / name / "config.json").is_file()
               for name, (stage, _) in DERIVED.items() if stage in stages)


# --------------------------------------------------------------------------- corpus + tokenizer


def corpus_files() -> list[Path]:
    """A bounded, deterministic subset of the stdlib's .py files (hash order spans packages)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idle_test", "site-packages", "__pycache__", "dist-packages"}
    files = [
        p for p in root.rglob("*.py")
        if not skip.intersection(p.relative_to(root).parts) and p.stat().st_size < 200_000
    ]
    files.sort(key=lambda p: hashlib.sha256(p.relative_to(root).as_posix().encode()).hexdigest())
    picked, total = [], 0
    for p in files:
        if total >= CORPUS_CHARS:
            break
        picked.append(p)
        total += p.stat().st_size
    return picked


def read_corpus() -> tuple[list[str], str]:
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in corpus_files()]
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]
    return texts, digest


def train_tokenizer(texts: list[str], out: Path) -> Any:
    """Byte-level BPE (vocab ``VOCAB``) saved as a HF fast tokenizer with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, min_frequency=2, special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, tok.token_to_id(BOS))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        chat_template=CHAT_TEMPLATE, model_max_length=MAX_POS,
    )
    fast.save_pretrained(out)
    return tok


def encode_corpus(tok: Any, texts: list[str]) -> Any:
    import torch

    eos = tok.token_to_id(EOS)
    ids: list[int] = []
    for enc in tok.encode_batch(texts):
        ids.extend(enc.ids)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


# --------------------------------------------------------------------------- saving


def _llama_config(s: Any, tok_ids: dict[str, int], **extra: Any) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=s.inter,
        num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
        max_position_embeddings=MAX_POS, rms_norm_eps=s.eps, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": s.theta},
        bos_token_id=tok_ids[BOS], eos_token_id=tok_ids[EOS], pad_token_id=tok_ids[PAD],
        dtype="float32", **extra,
    )


def save_llama(sd: dict[str, Any], s: Any, tok_ids: dict[str, int], out: Path) -> None:
    """Load ``sd`` strictly into a transformers Llama and ``save_pretrained`` it."""
    from transformers import LlamaForCausalLM

    cfg = _llama_config(s, tok_ids, architectures=["LlamaForCausalLM"])
    model = LlamaForCausalLM(cfg)
    model.load_state_dict(sd, strict=True)
    model.save_pretrained(out, safe_serialization=True)


def save_raw(tensors: dict[str, Any], config: Any, out: Path) -> None:
    """For drafter layouts transformers has no class for (EAGLE heads, MiMo+MTP)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    save_file({k: v.detach().contiguous().clone() for k, v in tensors.items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})


def copy_tokenizer(tok_dir: Path, out: Path) -> None:
    for f in tok_dir.iterdir():
        if f.is_file():
            shutil.copy2(f, out / f.name)


# --------------------------------------------------------------------------- build


def build_models(out_dir: Path | str = DEFAULT_OUT, seed: int = DEFAULT_SEED, force: bool = False,
                 log: Log = print, stages: tuple[str, ...] = STAGES) -> dict[str, Any]:
    """Build (or reuse) the fixtures of ``stages`` under ``out_dir``; returns the manifest.

    A stage already built with this script version and seed is reused, so building "lm"
    first and "heads" later gives the same files as building both at once."""
    out = Path(out_dir)
    clock = _Clock(log)
    with _locked(out):
        if not force and is_current(out, seed, stages):
            log(f"[build_tiny_models] up to date: {out / MANIFEST} (version {SCRIPT_VERSION}, "
                f"seed {seed}, {', '.join(stages)}); use --force to rebuild")
            man = load_manifest(out)
            assert man is not None
            return man
        man = load_manifest(out)
        wanted = [stage for stage in STAGES if stage == "lm" or stage in stages]
        if (force or man is None or man.get("script_version") != SCRIPT_VERSION
                or man.get("seed") != seed or not _stage_current(out, man, "lm")):
            # every stage trains on the lm stage's target: a new target rebuilds them all
            man = _build(out, seed, clock, wanted, None)
        elif todo := [stage for stage in wanted if not _stage_current(out, man, stage)]:
            man = _build(out, seed, clock, todo, man)
        return add_derived(out, man, clock, stages)


@dataclass
class _Stage:
    """What both stages read: the corpus split, the tokenizer, the target and its greedy
    continuations of the evaluation prompts, and the manifest's model entries."""

    out: Path
    seed: int
    clock: _Clock
    tok_dir: Path
    tok_ids: dict[str, int]
    train: Any
    prompts: Any
    target: Any  # TinyLM, trained (eval mode)
    ref: Any
    models: dict[str, dict[str, Any]]

    @property
    def plen(self) -> int:
        return int(self.prompts.shape[1])

    def new_dir(self, name: str) -> Path:
        d = self.out / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        return d

    def record(self, name: str, arch: str, params: int, **info: Any) -> None:
        self.models[name] = {"path": name, "architecture": arch, "params": params, **info}
        copy_tokenizer(self.tok_dir, self.out / name)


def _n_params(sd: dict[str, Any]) -> int:
    return int(sum(t.numel() for t in sd.values()))


def _target_shape() -> Any:
    from vllm_hust_vspec.bench.tiny_nn import Shape

    return Shape(vocab=VOCAB, hidden=128, layers=2, heads=4, kv_heads=2, inter=384)


def _corpus(out: Path, seed: int, clock: _Clock, *, train_tok: bool) -> tuple[Any, ...]:
    """Tokenizer (trained, or the built one read back), token ids split 95/5, eval prompts."""
    from vllm_hust_vspec.bench.tiny_train import eval_set

    texts, corpus_sha = read_corpus()
    clock(f"corpus: {len(texts)} stdlib files, {sum(map(len, texts)) / 1e6:.2f}M chars")
    tok_dir = out / "tokenizer"
    if train_tok:
        shutil.rmtree(tok_dir, ignore_errors=True)
        tok = train_tokenizer(texts, tok_dir)
    else:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    tok_ids = {t: tok.token_to_id(t) for t in (BOS, EOS, PAD)}
    ids = encode_corpus(tok, texts)
    split = int(len(ids) * 0.95)
    train, held = ids[:split], ids[split:]
    clock(f"tokenizer: vocab {tok.get_vocab_size()}, corpus {len(ids)} tokens")
    return texts, corpus_sha, tok_dir, tok_ids, ids, train, eval_set(held, tok_ids[BOS], seed)


def _build(out: Path, seed: int, clock: _Clock, stages: list[str],
           man: dict[str, Any] | None) -> dict[str, Any]:
    """Build ``stages`` (in :data:`STAGES` order) on top of ``man``'s current ones (None when
    "lm" is among them: a new target); each stage seeds its own random state, so a stage built
    alone equals the same stage built in one go."""
    import torch

    from vllm_hust_vspec.bench.tiny_nn import TinyLM
    from vllm_hust_vspec.bench.tiny_train import greedy, train_lm

    torch.set_num_threads(_threads())
    torch.manual_seed(seed)
    t_start = time.monotonic()
    fresh = "lm" in stages
    if fresh:
        (out / MANIFEST).unlink(missing_ok=True)
    texts, corpus_sha, tok_dir, tok_ids, ids, train, prompts = _corpus(out, seed, clock,
                                                                         train_tok=fresh)
    ts = _target_shape()
    torch.manual_seed(seed + 1)
    target = TinyLM(ts)
    if fresh:
        clock("training target (2-layer Llama, hidden 128)")
        loss = train_lm(target, train, steps=350, batch=24, lr=3e-3, seed=seed + 1,
                        clock=clock, name="target")
    else:
        from safetensors.torch import load_file

        target.load_state_dict(load_file(str(out / "target" / "model.safetensors")))
    target.eval().requires_grad_(False)
    ctx = _Stage(out=out, seed=seed, clock=clock, tok_dir=tok_dir, tok_ids=tok_ids, train=train,
                 prompts=prompts, target=target, ref=greedy(target, prompts),
                 models=dict(man["models"]) if man else {})
    if fresh:
        t_sd = target.state_dict()
        save_llama(t_sd, ts, tok_ids, ctx.new_dir("target"))
        ctx.record("target", "LlamaForCausalLM", _n_params(t_sd), trained=True,
                   final_loss=round(loss, 3), role="target")
        clock("saved target")
    for stage in STAGES:
        if stage in stages:
            STAGE_BUILDERS[stage](ctx)
    built = dict(man.get("build_seconds", {})) if man and isinstance(
        man.get("build_seconds"), dict) else {}
    built[",".join(stages)] = round(time.monotonic() - t_start, 1)
    manifest = {
        "script_version": SCRIPT_VERSION,
        "seed": seed,
        "build_seconds": built,
        "torch_threads": torch.get_num_threads(),
        "corpus": {"files": len(texts), "sha256_16": corpus_sha, "tokens": len(ids),
                   "python": sys.version.split()[0]},
        "tokenizer": {"path": "tokenizer", "vocab_size": VOCAB, "bos": BOS, "eos": EOS,
                      "pad": PAD, "sha256_16": _sha(tok_dir / "tokenizer.json")},
        "agreement_eval": {"prompts": int(prompts.shape[0]), "prompt_tokens": ctx.plen,
                           "new_tokens": 32, "definition": "teacher-forced greedy top-1 "
                           "agreement with the target's greedy continuation"},
        "models": ctx.models,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    clock(f"built {', '.join(stages)} in {built[','.join(stages)]}s -> {out / MANIFEST}")
    return manifest


def _measure(ctx: _Stage, name: str, target_name: str = "target") -> None:
    from vllm_hust_vspec.bench.tiny_train import hf_agreement

    a = hf_agreement(ctx.out / target_name, ctx.out / name, ctx.ref, ctx.plen)
    ctx.models[name]["target"] = target_name
    ctx.models[name]["greedy_agreement"] = round(a, 4)
    ctx.clock(f"  {name}: greedy agreement vs {target_name} = {a:.3f} (transformers)")


def _build_lm(ctx: _Stage) -> None:
    """Draft models of the target: trained 1-layer draft, exact and noised copies, and the
    goodput-adaptation pair (deep target, cheap drafts)."""
    import torch

    from vllm_hust_vspec.bench.tiny_nn import Shape, TinyLM
    from vllm_hust_vspec.bench.tiny_train import agreement, train_lm

    seed, clock, tok_ids = ctx.seed, ctx.clock, ctx.tok_ids
    ts = _target_shape()
    t_sd = ctx.target.state_dict()

    # ---- 1-layer trained draft
    ds = Shape(vocab=VOCAB, hidden=128, layers=1, heads=4, kv_heads=2, inter=256)
    torch.manual_seed(seed + 2)
    draft = TinyLM(ds)
    clock("training draft (1-layer Llama)")
    loss = train_lm(draft, ctx.train, steps=200, batch=16, lr=3e-3, seed=seed + 2, clock=clock,
                    name="draft")
    save_llama(draft.state_dict(), ds, tok_ids, ctx.new_dir("draft"))
    ctx.record("draft", "LlamaForCausalLM", _n_params(draft.state_dict()), trained=True,
               final_loss=round(loss, 3), role="draft_model")
    _measure(ctx, "draft")

    # ---- exact copy and noise variants of the target
    save_llama(t_sd, ts, tok_ids, ctx.new_dir("draft-copy"))
    ctx.record("draft-copy", "LlamaForCausalLM", _n_params(t_sd), trained=True,
               role="draft_model", notes="exact copy of target")
    _measure(ctx, "draft-copy")
    gen = torch.Generator().manual_seed(seed + 3)
    noise = {k: torch.randn(v.shape, generator=gen) * v.std() for k, v in t_sd.items()
             if v.dim() == 2}
    noisy = TinyLM(ts).eval()

    def noised(scale: float) -> dict[str, Any]:
        return {k: v + scale * noise[k] if k in noise else v for k, v in t_sd.items()}

    for name, goal in NOISE_GOALS.items():
        lo, hi = 0.0, 4.0  # relative noise scale (x per-tensor std); agreement falls with it
        for _ in range(14):
            mid = (lo + hi) / 2
            noisy.load_state_dict(noised(mid))
            if agreement(noisy, ctx.ref, ctx.plen) > goal:
                lo = mid
            else:
                hi = mid
        scale = (lo + hi) / 2
        save_llama(noised(scale), ts, tok_ids, ctx.new_dir(name))
        ctx.record(name, "LlamaForCausalLM", _n_params(t_sd), trained=True, role="draft_model",
                   noise_scale=round(scale, 5), agreement_goal=goal,
                   notes="target + N(0, (scale*std(W))^2) on every 2-D weight")
        _measure(ctx, name)

    # ---- goodput-adaptation pair: deep target (extra no-op layers) + cheap drafts
    deep = Shape(vocab=VOCAB, hidden=128, layers=2 + DEEP_EXTRA_LAYERS, heads=4, kv_heads=2,
                 inter=384)
    torch.manual_seed(seed + 4)
    filler = TinyLM(deep).state_dict()
    deep_sd = dict(filler)
    deep_sd.update(t_sd)  # real layers 0-1, embeddings, final norm and head from the target
    for i in range(ts.layers, deep.layers):
        # zero output projections: the layer costs full compute but adds 0 to the residual
        deep_sd[f"model.layers.{i}.self_attn.o_proj.weight"].zero_()
        deep_sd[f"model.layers.{i}.mlp.down_proj.weight"].zero_()
    save_llama(deep_sd, deep, tok_ids, ctx.new_dir("target-deep"))
    ctx.record("target-deep", "LlamaForCausalLM", _n_params(deep_sd), trained=True,
               role="target",
               notes=f"target's 2 layers + {DEEP_EXTRA_LAYERS} layers with zero o_proj/down_proj")
    save_llama(t_sd, ts, tok_ids, ctx.new_dir("draft-cheap-agree"))
    ctx.record("draft-cheap-agree", "LlamaForCausalLM", _n_params(t_sd), trained=True,
               role="draft_model", notes="target without the no-op layers: same function, cheaper")
    _measure(ctx, "draft-cheap-agree", "target-deep")
    torch.manual_seed(seed + 5)
    rnd = TinyLM(ds).state_dict()
    save_llama(rnd, ds, tok_ids, ctx.new_dir("draft-cheap-random"))
    ctx.record("draft-cheap-random", "LlamaForCausalLM", _n_params(rnd), trained=False,
               role="draft_model", notes="random init 1-layer")
    _measure(ctx, "draft-cheap-random", "target-deep")
    clock("saved deep target and cheap drafts")


def _build_heads(ctx: _Stage) -> None:
    """Hidden-state drafters trained on the target: EAGLE-1 and EAGLE-3 heads, and a MiMo
    target (the target's weights in the Qwen2 layout) with one MTP layer."""
    import torch

    from vllm_hust_vspec.bench.tiny_nn import Eagle3Head, EagleHead, MtpLayer, Shape
    from vllm_hust_vspec.bench.tiny_train import EAGLE3_AUX_IDS, head_agreement, train_head

    seed, clock, tok_ids, target = ctx.seed, ctx.clock, ctx.tok_ids, ctx.target
    ts = _target_shape()
    t_sd = target.state_dict()
    head_shape = Shape(vocab=VOCAB, hidden=128, layers=1, heads=4, kv_heads=2, inter=384)

    # ---- EAGLE-1 head (embedding and lm_head shared from the target by vLLM)
    torch.manual_seed(seed + 6)
    eagle = EagleHead(head_shape)
    clock("training EAGLE-1 head on target hidden states")
    loss = train_head("eagle", eagle, target, ctx.train, steps=150, batch=16, lr=3e-3,
                      seed=seed + 6, clock=clock)
    eagle.eval()
    cfg = _llama_config(eagle.s, tok_ids, architectures=["EagleLlamaForCausalLM"])
    save_raw(eagle.state_dict(), cfg, ctx.new_dir("eagle"))
    a = head_agreement("eagle", eagle, target, ctx.ref, ctx.plen)
    ctx.record("eagle", "EagleLlamaForCausalLM", _n_params(eagle.state_dict()), trained=True,
               final_loss=round(loss, 3), role="eagle", target="target",
               step1_agreement=round(a, 4),
               notes="agreement = first draft position, teacher-forced, own torch forward")
    clock(f"  eagle: step-1 agreement {a:.3f}")

    # ---- EAGLE-3 head (aux layer ids valid for the 2-layer target)
    torch.manual_seed(seed + 7)
    e3 = Eagle3Head(head_shape, num_aux=len(EAGLE3_AUX_IDS))
    e3.lm_head.weight.data.copy_(t_sd["lm_head.weight"])  # identical -> vLLM shares it
    e3.lm_head.weight.requires_grad_(False)
    clock("training EAGLE-3 head on target aux hidden states")
    loss = train_head("eagle3", e3, target, ctx.train, steps=150, batch=16, lr=3e-3,
                      seed=seed + 7, clock=clock)
    e3.eval()
    cfg = _llama_config(e3.s, tok_ids, architectures=["Eagle3LlamaForCausalLM"],
                        eagle_aux_hidden_state_layer_ids=EAGLE3_AUX_IDS,
                        draft_vocab_size=VOCAB, target_hidden_size=ts.hidden)
    save_raw(e3.state_dict(), cfg, ctx.new_dir("eagle3"))
    a = head_agreement("eagle3", e3, target, ctx.ref, ctx.plen)
    ctx.record("eagle3", "Eagle3LlamaForCausalLM", _n_params(e3.state_dict()), trained=True,
               final_loss=round(loss, 3), role="eagle3", target="target",
               step1_agreement=round(a, 4), eagle_aux_hidden_state_layer_ids=EAGLE3_AUX_IDS,
               notes="agreement = first draft position, teacher-forced, own torch forward")
    clock(f"  eagle3: step-1 agreement {a:.3f}")

    # ---- MiMo target (= target weights in Qwen2 layout, zero q/k/v bias) + 1 MTP layer
    torch.manual_seed(seed + 8)
    mtp = MtpLayer(head_shape)
    clock("training MiMo MTP layer on target hidden states")
    loss = train_head("mtp", mtp, target, ctx.train, steps=150, batch=16, lr=3e-3,
                      seed=seed + 8, clock=clock)
    mtp.eval()
    mimo_sd = dict(t_sd)
    for i in range(ts.layers):
        for p, width in (("q", ts.heads), ("k", ts.kv_heads), ("v", ts.kv_heads)):
            mimo_sd[f"model.layers.{i}.self_attn.{p}_proj.bias"] = torch.zeros(width * ts.head_dim)
    mimo_sd.update(mtp.checkpoint_tensors())
    save_raw(mimo_sd, _mimo_config(ts, tok_ids), ctx.new_dir("mtp-target"))
    a = head_agreement("mtp", mtp, target, ctx.ref, ctx.plen)
    ctx.record("mtp-target", "MiMoForCausalLM", _n_params(mimo_sd), trained=True,
               final_loss=round(loss, 3), role="mtp", target="mtp-target",
               step1_agreement=round(a, 4), num_nextn_predict_layers=1,
               notes="main model = target (zero qkv bias); MTP layer trained; agreement = MTP "
                     "step-1, teacher-forced, own torch forward")
    clock(f"  mtp: step-1 agreement {a:.3f}")


STAGE_BUILDERS: dict[str, Callable[[_Stage], None]] = {"lm": _build_lm, "heads": _build_heads}


def _threads() -> int:
    """torch threads: $TINY_MODELS_THREADS, else all cores, else 1 on a busy machine.

    On a shared 2-core box, 2 spinning OpenMP threads next to another job made a training step
    ~8x slower than 1 thread (2.8 s vs 0.33 s); results were identical for 1 and 2 threads.
    """
    env = os.environ.get("TINY_MODELS_THREADS")
    if env:
        return max(1, int(env))
    cores = os.cpu_count() or 1
    return 1 if os.getloadavg()[0] >= 1.0 else cores


# --------------------------------------------------------------------------- derived models
# Built from the trained fixtures in seconds (no training), so adding one never forces a
# rebuild; ``is_current`` requires every name below whose stage it checks.


def _derive_eagle_qwen2(out: Path, man: dict[str, Any]) -> dict[str, Any]:
    """The trained EAGLE-1 head re-saved in the EAGLE-Qwen2(.5) checkpoint format.

    Format of the EAGLE-Qwen2.5 releases: config ``architectures: ["Qwen2ForCausalLM"]``,
    ``model_type: qwen2``, one layer; tensors ``fc.weight`` + ``fc.bias`` over
    [embedding; hidden], ``layers.0.*`` WITHOUT q/k/v biases (vSpec's drafter uses zeros),
    no input norm on layer 0, no final norm, ``embed_tokens.weight`` (a copy of the target's),
    no ``lm_head`` (shared from the target). Same function as ``eagle``, so its drafts and
    acceptance equal the Llama EAGLE head's.
    """
    import torch
    from safetensors.torch import load_file
    from transformers import Qwen2Config

    src = json.loads((out / "eagle" / "config.json").read_text())
    tensors = load_file(str(out / "eagle" / "model.safetensors"))
    target = load_file(str(out / "target" / "model.safetensors"))
    tensors["fc.bias"] = torch.zeros(tensors["fc.weight"].shape[0])
    tensors["embed_tokens.weight"] = target["model.embed_tokens.weight"].clone()
    rope = src.get("rope_parameters") or {"rope_type": "default", "rope_theta": 10000.0}
    cfg = Qwen2Config(
        vocab_size=src["vocab_size"], hidden_size=src["hidden_size"],
        intermediate_size=src["intermediate_size"], num_hidden_layers=1,
        num_attention_heads=src["num_attention_heads"],
        num_key_value_heads=src["num_key_value_heads"],
        max_position_embeddings=src["max_position_embeddings"], rms_norm_eps=src["rms_norm_eps"],
        rope_parameters=rope, use_sliding_window=False, tie_word_embeddings=False,
        bos_token_id=src.get("bos_token_id"), eos_token_id=src.get("eos_token_id"),
        pad_token_id=src.get("pad_token_id"), dtype="float32",
        architectures=["Qwen2ForCausalLM"],
    )
    d = out / "eagle-qwen2"
    shutil.rmtree(d, ignore_errors=True)
    save_raw(tensors, cfg, d)
    copy_tokenizer(out / "tokenizer", d)
    eagle = man["models"]["eagle"]
    return {"path": "eagle-qwen2", "architecture": "Qwen2ForCausalLM (EAGLE-Qwen2 format)",
            "params": int(sum(t.numel() for t in tensors.values())), "trained": True,
            "role": "eagle", "target": "target", "derived_from": "eagle",
            "step1_agreement": eagle.get("step1_agreement"),
            "notes": "eagle head in EAGLE-Qwen2 layout: fc.bias zero, no q/k/v bias, "
                     "embed_tokens copy of the target's, no lm_head"}


def _derive_draft_padded(out: Path, man: dict[str, Any]) -> dict[str, Any]:
    """``draft`` with its embedding and LM head padded by 64 zero rows (vocab 2112 vs the
    target's 2048, same tokenizer): the Qwen2.5-0.5B-vs-14B situation in miniature."""
    import torch
    from safetensors.torch import load_file

    pad = 64
    d = out / "draft-padded-vocab"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(out / "draft", d)
    tensors = load_file(str(d / "model.safetensors"))
    for key in ("model.embed_tokens.weight", "lm_head.weight"):
        w = tensors[key]
        tensors[key] = torch.cat([w, torch.zeros(pad, w.shape[1], dtype=w.dtype)])
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / "model.safetensors"),
              metadata={"format": "pt"})
    cfg = json.loads((d / "config.json").read_text())
    cfg["vocab_size"] = int(cfg["vocab_size"]) + pad
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    draft = man["models"]["draft"]
    return {"path": "draft-padded-vocab", "architecture": "LlamaForCausalLM",
            "params": int(sum(t.numel() for t in tensors.values())), "trained": True,
            "role": "draft_model", "target": "target", "derived_from": "draft",
            "vocab_size": cfg["vocab_size"], "greedy_agreement": draft.get("greedy_agreement"),
            "notes": f"draft + {pad} zero rows in embed_tokens and lm_head (padded vocab)"}


MOE_EXPERTS, MOE_TOP_K = 4, 2


def _derive_target_moe(out: Path, man: dict[str, Any]) -> dict[str, Any]:
    """``target`` as a Mixtral MoE: every one of its 4 experts is a copy of the target's MLP
    and the router (top-2, renormalised) is random, so each token's expert mix equals the
    dense MLP and the draft models keep their agreement, while the forward still routes
    tokens and, under data parallel, runs vLLM's MoE dispatch and combine."""
    import torch
    from safetensors.torch import load_file
    from transformers import MixtralConfig

    src = json.loads((out / "target" / "config.json").read_text())
    dense = load_file(str(out / "target" / "model.safetensors"))
    gen = torch.Generator().manual_seed(int(man.get("seed", DEFAULT_SEED)) + 51)
    tensors: dict[str, Any] = {}
    for key, value in dense.items():
        if ".mlp." not in key:
            tensors[key] = value
    for layer in range(int(src["num_hidden_layers"])):
        pre = f"model.layers.{layer}"
        moe = f"{pre}.block_sparse_moe"
        tensors[f"{moe}.gate.weight"] = torch.randn(
            MOE_EXPERTS, int(src["hidden_size"]), generator=gen) * 0.02
        for e in range(MOE_EXPERTS):
            # w1 = gate, w3 = up, w2 = down (Mixtral's names for the SwiGLU MLP)
            for mine, theirs in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
                tensors[f"{moe}.experts.{e}.{mine}.weight"] = dense[
                    f"{pre}.mlp.{theirs}.weight"].clone()
    rope = src.get("rope_parameters") or {"rope_type": "default", "rope_theta": 10000.0}
    cfg = MixtralConfig(
        vocab_size=src["vocab_size"], hidden_size=src["hidden_size"],
        intermediate_size=src["intermediate_size"], num_hidden_layers=src["num_hidden_layers"],
        num_attention_heads=src["num_attention_heads"],
        num_key_value_heads=src["num_key_value_heads"], head_dim=src.get("head_dim"),
        max_position_embeddings=src["max_position_embeddings"], rms_norm_eps=src["rms_norm_eps"],
        rope_parameters=rope, num_local_experts=MOE_EXPERTS, num_experts_per_tok=MOE_TOP_K,
        tie_word_embeddings=False, bos_token_id=src.get("bos_token_id"),
        eos_token_id=src.get("eos_token_id"), pad_token_id=src.get("pad_token_id"),
        dtype="float32", architectures=["MixtralForCausalLM"],
    )
    d = out / "target-moe"
    shutil.rmtree(d, ignore_errors=True)
    save_raw(tensors, cfg, d)
    copy_tokenizer(out / "tokenizer", d)
    return {"path": "target-moe", "architecture": "MixtralForCausalLM",
            "params": int(sum(t.numel() for t in tensors.values())), "trained": True,
            "role": "target", "derived_from": "target",
            "notes": f"target's MLP copied into {MOE_EXPERTS} experts, random top-{MOE_TOP_K} "
                     "router: same function as target, routed like an MoE"}


# name: (the stage it is derived from, how)
DERIVED: dict[str, tuple[str, Callable[[Path, dict[str, Any]], dict[str, Any]]]] = {
    "eagle-qwen2": ("heads", _derive_eagle_qwen2),
    "draft-padded-vocab": ("lm", _derive_draft_padded),
    "target-moe": ("lm", _derive_target_moe),
}


def add_derived(out: Path, man: dict[str, Any], clock: Callable[[str], None],
                stages: tuple[str, ...] = STAGES) -> dict[str, Any]:
    """Add every missing model derived from ``stages`` to ``man`` and rewrite the manifest."""
    changed = False
    for name, (stage, derive) in DERIVED.items():
        if stage not in stages or (name in man["models"]
                                   and (out / name / "config.json").is_file()):
            continue
        man["models"][name] = derive(out, man)
        changed = True
        clock(f"derived {name}")
    if changed:
        (out / MANIFEST).write_text(json.dumps(man, indent=2) + "\n")
    return man


def _mimo_config(s: Any, tok_ids: dict[str, int]) -> Any:
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=s.inter,
        num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
        max_position_embeddings=MAX_POS, rms_norm_eps=s.eps, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": s.theta},
        use_sliding_window=False, bos_token_id=tok_ids[BOS], eos_token_id=tok_ids[EOS],
        pad_token_id=tok_ids[PAD], dtype="float32", architectures=["MiMoForCausalLM"],
        num_nextn_predict_layers=1,
    )


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    """Build the models (or, with ``check`` first, smoke-check the built ones)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "check":
        from vllm_hust_vspec.bench.tiny_check import main as check_main

        return check_main(argv[1:])
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0].replace("\n", " "),
        epilog="check: smoke-check the built models in real vLLM (see 'check --help')")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--force", action="store_true", help="rebuild even if the stamp matches")
    ap.add_argument("--only", choices=STAGES, action="append",
                    help="build only this stage (repeatable): lm = the target and its draft "
                         "models (what the demo needs), heads = EAGLE, EAGLE-3 and MTP "
                         "(trained on the lm stage's target); default: both")
    args = ap.parse_args(argv)
    man = build_models(args.out, seed=args.seed, force=args.force,
                       log=lambda m: print(m, flush=True),
                       stages=tuple(s for s in STAGES if s in args.only) if args.only else STAGES)
    for name, m in man["models"].items():
        agree = m.get("greedy_agreement", m.get("step1_agreement", "-"))
        print(f"  {name:20s} {m['architecture']:24s} params={m['params']:>9,d} agreement={agree}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
