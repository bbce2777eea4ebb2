"""scripts/demo_side_by_side.py (the measuring half of scripts/demo.sh) end to end, tiny load.

Four real ``vllm serve`` processes (target-only and vSpec for each of the demo's two pairs),
one measured round of a few short requests per arm: the table, the figure, the summary and the
per-round results are checked, not the speed-ups (one tiny round on a shared 2-core machine
says nothing about them). About 2-3 minutes on 2 cores: select with ``-m server``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.vllm]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "demo_side_by_side.py"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = Path(es.model("target-deep")).parent
    for name in ("target", "draft", "draft-cheap-agree"):
        es.model(name)
    out = tmp_path_factory.mktemp("demo")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--rounds", "1",
         "--num-prompts", "4", "--output-len", "16", "--input-len", "16",
         "--concurrency", "4", "--warmup-prompts", "2"],
        capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, "HUST_VSPEC_MODEL_DIR": str(folder)},
    )
    return {"proc": proc, "out": out}


def test_demo_prints_the_side_by_side_table(demo_run: dict[str, Any]) -> None:
    proc = demo_run["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("pair "))
    for col in ("target-only tok/s", "vSpec tok/s", "vSpec/target", "gamma settled"):
        assert col in lines[head]
    rows = lines[head + 2: head + 4]
    assert rows[0].startswith("target-deep + draft-cheap-agree")
    assert rows[1].startswith("target + draft")
    for row in rows:
        assert "x " in row and "% of steps)" in row and (" ok" in row or "MISSED" in row)
    plot_line = next(ln for ln in lines if ln.startswith("plot: "))
    plot = Path(plot_line.removeprefix("plot: "))
    assert plot.is_file() and plot.stat().st_size > 10_000
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_summary_has_both_arms_and_the_gamma_steps(demo_run: dict[str, Any]) -> None:
    out: Path = demo_run["out"]
    summary = json.loads((out / "summary.json").read_text())
    assert [s["pair"] for s in summary] == ["pays", "no-pay"]
    for s in summary:
        assert len(s["target_only_tps"]) == len(s["vspec_tps"]) == 1
        assert min(s["target_only_tps"] + s["vspec_tps"]) > 0
        assert s["ratio"] == pytest.approx(s["vspec_tps"][0] / s["target_only_tps"][0])
        assert s["round_ratios"] == [pytest.approx(s["ratio"])]
        assert sum(s["gamma_steps"].values()) > 0 and sum(s["warmup_gamma_steps"].values()) > 0
        for arm in ("baseline", "vspec"):
            run = json.loads((out / "runs" / f"{s['pair']}-{arm}-r1" / "run.json").read_text())
            assert run["completed"] == 4 and run["total_output_tokens"] == 4 * 16
            assert (out / f"{s['pair']}-{arm}.server.log").is_file()
    # every run (the warm-up round and the measured one) was preceded by its 2 warm-up
    # requests: each server answered 2 x (4 + 2), as its own request counter says
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    for s in summary:
        for arm in ("baseline", "vspec"):
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=str(out / "prometheus" / f"{s['pair']}-{arm}"))
            answered = sum(sample.value for metric in registry.collect()
                           if metric.name == "vllm:request_success"
                           for sample in metric.samples if sample.name.endswith("_total"))
            assert answered == 2 * (4 + 2), (s["pair"], arm, answered)
    # the target-only server ran without speculation, the vSpec one with the pair's drafter
    for key, drafter in (("pays", "draft-cheap-agree"), ("no-pay", "draft")):
        assert "speculative_config=None" in (out / f"{key}-baseline.server.log").read_text()
        vspec_log = (out / f"{key}-vspec.server.log").read_text()
        assert re.search(rf"speculative_config=SpeculativeConfig\(method='draft_model', "
                         rf"model='[^']*/{drafter}'", vspec_log)
