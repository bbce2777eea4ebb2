"""Draft-side pure parts: confidence-stop adapter, active-vocabulary / int8 draft
head, vocabulary check, active-vocab tool, the new settings."""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from vllm_hust_vspec.adaptive.confidence import confidence_keep  # noqa: E402
from vllm_hust_vspec.backends import confidence_adapter as conf  # noqa: E402
from vllm_hust_vspec.backends.draft_head import (  # noqa: E402
    ActiveVocabError,
    DraftHead,
    active_ids,
    quantize_rows_int8,
    read_ids_file,
)
from vllm_hust_vspec.cli import active_vocab  # noqa: E402
from vllm_hust_vspec.host.worker.v1.drafting import draft_config  # noqa: E402
from vllm_hust_vspec.settings import Settings, SettingsError, load_settings  # noqa: E402

REPO = Path(__file__).resolve().parents[4]


# ---- confidence stop adapter ---------------------------------------------------------------
def test_topk_probs_and_keep_counts_follow_the_pure_rule() -> None:
    confident = torch.tensor([[9.0, 0.0, 0.0, 0.0, 0.0]])
    flat = torch.zeros(1, 5)
    steps_a = [conf.topk_probs(confident, 3), conf.topk_probs(flat, 3),
               conf.topk_probs(confident, 3)]
    p = conf.topk_probs(confident, 3)
    assert p.shape == (1, 3) and math.isclose(float(p.sum()), float(
        confident.softmax(-1).topk(3).values.sum()), rel_tol=1e-6)
    # two requests: [sure, unsure, sure] and [sure, sure, sure]
    steps = [torch.cat([a, conf.topk_probs(confident, 3)]) for a in steps_a]
    keep = conf.keep_counts(steps, threshold=0.5)
    expected = [
        confidence_keep([s[i].tolist() for s in steps], threshold=0.5) for i in range(2)
    ]
    assert keep == expected == [2, 3]
    assert conf.keep_counts([], threshold=0.5) == []
    margin = conf.keep_counts(steps, rule="margin", threshold=0.5)
    assert margin == [2, 3]


def test_truncate_is_ragged_and_tolerates_short_keep() -> None:
    assert conf.truncate([[1, 2, 3], [4, 5, 6], [7]], [1, 3]) == [[1], [4, 5, 6], [7]]


# ---- draft head ------------------------------------------------------------------------------
def test_draft_head_full_active_and_chunked_argmax() -> None:
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(300, 16, generator=g)
    hidden = torch.randn(5, 16, generator=g)
    full = (hidden @ weight.t()).argmax(-1)
    assert torch.equal(DraftHead.build(weight).argmax(hidden), full)
    assert torch.equal(DraftHead.build(weight, chunk_rows=7).argmax(hidden), full)
    ids = list(range(0, 300, 3))
    sub = DraftHead.build(weight, ids, chunk_rows=16).argmax(hidden)
    expected = torch.tensor(ids)[(hidden @ weight[ids].t()).argmax(-1)]
    assert torch.equal(sub, expected)
    assert set(sub.tolist()) <= set(ids)


def test_int8_head_is_close_and_stays_int8() -> None:
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(64, 32, generator=g)
    q, scale = quantize_rows_int8(weight)
    assert q.dtype == torch.int8 and (q.float() * scale[:, None] - weight).abs().max() < 0.02
    hidden = torch.randn(8, 32, generator=g)
    ref = hidden @ weight.t()
    for mode in ("w8a16", "w8a8"):
        head = DraftHead.build(weight, quant=mode, chunk_rows=10)
        assert head.weight.dtype == torch.int8
        assert (head.logits(hidden) - ref).abs().max() < 0.15 * ref.abs().max()
    with pytest.raises(ValueError, match="w8a16"):
        DraftHead.build(weight, quant="fp4")


def test_active_ids_sources(tmp_path: Path) -> None:
    assert active_ids(10, 4) == [0, 1, 2, 3]
    assert active_ids(3) == [0, 1, 2]
    js = tmp_path / "ids.json"
    js.write_text(json.dumps({"ids": [5, 1, 5, 2]}))
    assert active_ids(10, None, js) == [5, 1, 2] and active_ids(10, 2, js) == [5, 1]
    txt = tmp_path / "ids.txt"
    txt.write_text("# most frequent first\n7\n3  # comment\n\n")
    assert read_ids_file(txt) == [7, 3]
    with pytest.raises(ActiveVocabError, match="outside the draft vocabulary"):
        active_ids(5, None, txt)
    bad = tmp_path / "bad.txt"
    bad.write_text("seven\n")
    with pytest.raises(ActiveVocabError, match="bad.txt"):
        read_ids_file(bad)
    with pytest.raises(ActiveVocabError, match="cannot read"):
        read_ids_file(tmp_path / "missing.json")


# ---- active vocabulary tool ------------------------------------------------------------------
def test_active_vocab_ranking_coverage_and_trace(tmp_path: Path) -> None:
    counts = Counter({4: 10, 2: 10, 9: 1})
    assert active_vocab.rank_ids(counts, None) == [2, 4, 9]
    assert active_vocab.rank_ids(counts, 2, always=[9]) == [9, 2]
    assert active_vocab.coverage(counts, [2, 4]) == pytest.approx(20 / 21)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"output_token_ids": [1, 1, 2]}\n{"prompt_token_ids": [3]}\n[[4, 4]]\n')
    assert active_vocab.count_trace(trace) == Counter({1: 2, 4: 2, 2: 1, 3: 1})
    out = tmp_path / "ids.json"
    assert active_vocab.main(["--trace", str(trace), "--size", "2", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["ids"] == [1, 4] and data["size"] == 2
    with pytest.raises(SystemExit):
        active_vocab.main(["--out", str(out)])


# ---- vocabulary check (needs the tiny tokenizer) ----------------------------------------------
@pytest.fixture()
def tok_dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    pytest.importorskip("transformers")
    src = REPO / ".cache" / "models" / "tokenizer"
    if not (src / "tokenizer.json").is_file():
        pytest.skip("tiny tokenizer not built (scripts/build_tiny_models.py)")
    same, other = tmp_path / "same", tmp_path / "other"
    shutil.copytree(src, same)
    shutil.copytree(src, other)
    data = json.loads((other / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    a, b = [t for t, i in vocab.items() if i in (100, 101)]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(data))
    return src, same, other


def test_vocab_check_padded_ok_mismatch_refused_unless_forced(
    tok_dirs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    from vllm_hust_vspec.backends.vocab import VocabMismatchError, check_draft_vocab

    src, same, other = tok_dirs
    assert check_draft_vocab(str(src), str(same), 2048, 2112).padded_only
    with pytest.raises(VocabMismatchError, match="has id 100 in one tokenizer"):
        check_draft_vocab(str(src), str(other), 2048, 2048)
    forced = check_draft_vocab(str(src), str(other), 2048, 2048, allow_mismatch=True)
    assert forced.same_tokenizer is False
    with pytest.raises(VocabMismatchError, match="needs equal vocab sizes"):
        check_draft_vocab(str(src), str(other), 2048, 2112, allow_mismatch=True)
    with pytest.raises(VocabMismatchError, match="rows"):
        check_draft_vocab(str(src), str(same), 2048, 1000)
    empty = tmp_path / "no-tokenizer"
    empty.mkdir()
    assert check_draft_vocab(str(src), str(empty), 2048, 2048).same_tokenizer is None
    with pytest.raises(VocabMismatchError, match="no tokenizer files"):
        check_draft_vocab(str(src), str(empty), 2048, 2112)


# ---- settings ----------------------------------------------------------------------------------
def test_protected_ids_parse_from_env_and_toml(tmp_path: Path) -> None:
    env = {"HUST_VSPEC_METHOD": "eagle", "HUST_VSPEC_CONFIDENCE_ACCEPT_MARGIN": "0.1",
           "HUST_VSPEC_CONFIDENCE_PROTECTED_TOKEN_IDS": "1, 2 3"}
    assert load_settings(env).confidence_protected_token_ids == [1, 2, 3]
    cfg = tmp_path / "v.toml"
    cfg.write_text("[serve]\nconfidence_accept_margin = 0.1\n"
                   "confidence_protected_token_ids = [7, 8]\n")
    assert load_settings({"VSPEC_CONFIG": str(cfg)}).confidence_protected_token_ids == [7, 8]
    bad = dict(env, HUST_VSPEC_CONFIDENCE_PROTECTED_TOKEN_IDS="1,x")
    with pytest.raises(SettingsError, match="list of integers"):
        load_settings(bad)


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"HUST_VSPEC_METHOD": "eagle", "HUST_VSPEC_EAGLE_RELAXED_ACCEPT_AFTER_TOKENS": "4"},
         "eagle-relaxed-accept-topk"),
        ({"HUST_VSPEC_CONFIDENCE_ACCEPT_FROM_POSITION": "1"}, "confidence-accept-margin"),
        ({"HUST_VSPEC_CONFIDENCE_ACCEPT_AFTER_TOKENS": "8"}, "confidence-accept-margin"),
        ({"HUST_VSPEC_CONFIDENCE_PROTECTED_TOKEN_IDS": "2"}, "strict acceptance never"),
        ({"HUST_VSPEC_CONFIDENCE_ACCEPT_MARGIN": "0.1",
          "HUST_VSPEC_CONFIDENCE_PROTECTED_TOKEN_IDS": "-1"}, "negative"),
        ({"HUST_VSPEC_METHOD": "ngram", "HUST_VSPEC_CONFIDENCE_STOP": "1"}, "ngram"),
        ({"HUST_VSPEC_METHOD": "ngram", "HUST_VSPEC_EAGLE_DRAFT_LM_HEAD_QUANT": "w8a16"},
         "ngram"),
        ({"HUST_VSPEC_CONFIDENCE_STOP": "1",
          "HUST_VSPEC_EAGLE_DRAFT_ACTIVE_VOCAB_SIZE": "512"}, "use one or the other"),
    ],
)
def test_contradictions_are_refused(env: dict[str, str], match: str) -> None:
    with pytest.raises(SettingsError, match=match):
        load_settings(env)


def test_draft_config_defaults_and_labels() -> None:
    # the predecessor's defaults: top-2 renormalized entropy against 0.3 ** 2 / 0.15 nats
    cfg = draft_config(Settings(confidence_stop=True))
    assert cfg.entropy_stop and cfg.entropy_rule == "topk-entropy"
    assert cfg.entropy_threshold == pytest.approx(0.3 ** 2 / 0.15)
    assert cfg.entropy_topk == 2 and not cfg.head_changed
    ours = draft_config(Settings(confidence_stop=True, confidence_stop_rule="entropy"))
    assert ours.entropy_threshold == conf.DEFAULT_THRESHOLD["entropy"]
    assert ours.entropy_topk == conf.DEFAULT_TOPK
    margin = draft_config(Settings(confidence_stop=True, confidence_stop_rule="margin"))
    assert margin.entropy_threshold == conf.DEFAULT_THRESHOLD["margin"]
    head = Settings(eagle_draft_lm_head_quant="w8a8")
    assert head.draft_head_changed() and draft_config(head).head_changed
    assert not Settings(confidence_protected_token_ids=[]).relaxed_acceptance()


def test_the_draft_config_reader_rebuilds_only_for_new_settings() -> None:
    from vllm_hust_vspec.host.worker.v1.drafting import draft_config_reader
    from vllm_hust_vspec.settings import Settings

    current = {"s": Settings(method="draft")}
    read = draft_config_reader(lambda: current["s"])
    first = read()
    assert read() is first and not first.entropy_stop
    current["s"] = Settings(method="draft", confidence_stop=True)
    assert read().entropy_stop  # a replaced settings object is read again


def test_draft_head_options_leave_a_shared_target_head_untouched() -> None:
    """vLLM and vllm-ascend share the target's lm_head (and embed_tokens) with EAGLE/MTP
    drafters (``_maybe_share_lm_head``). The draft LM-head options build vSpec's own head from
    a copy of the rows, so the shared module, and the target's logits, never change: the
    predecessor's draft/target shared-module isolation holds by construction."""
    from types import SimpleNamespace

    from vllm_hust_vspec.host.worker.v1.drafting import DraftSideConfig, _build_state

    g = torch.Generator().manual_seed(3)
    shared = torch.nn.Linear(16, 300, bias=False)
    with torch.no_grad():
        shared.weight.copy_(torch.randn(300, 16, generator=g))
    before = shared.weight.detach().clone()
    ptr = shared.weight.data_ptr()
    target = SimpleNamespace(lm_head=shared)
    draft_model = SimpleNamespace(lm_head=target.lm_head)  # the same module object
    proposer = SimpleNamespace(model=draft_model, vllm_config=SimpleNamespace(
        model_config=SimpleNamespace(get_vocab_size=lambda: 300)))
    for cfg in (DraftSideConfig(active_vocab_size=64), DraftSideConfig(lm_head_quant="w8a8"),
                DraftSideConfig(active_vocab_size=32, lm_head_quant="w8a16")):
        state = _build_state(proposer, cfg)
        assert state.head is not None
        hidden = torch.randn(4, 16, generator=g)
        state.head.argmax(hidden)
        assert draft_model.lm_head is shared and target.lm_head is shared
        assert shared.weight.data_ptr() == ptr and torch.equal(shared.weight, before)
        assert state.head.weight.data_ptr() != ptr
