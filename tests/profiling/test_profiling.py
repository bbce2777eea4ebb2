"""vllm-hust-vspec-profile pure logic: step samples, goodput, best gamma table, acceptance,
the fitted profile and the CLI dry run (no vLLM)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from vllm_hust_vspec.adaptive import StepFeedback, load_profile
from vllm_hust_vspec.adaptive.profile import TableEntry
from vllm_hust_vspec.cli import profile as profile_cli
from vllm_hust_vspec.profiling import (
    Cell,
    CellRun,
    GridError,
    ProfileGrid,
    acceptance_per_position,
    best_gammas,
    build_profile,
    cell_samples,
    collect,
    gamma_table,
    measured_goodput,
    plan_profile,
)
from vllm_hust_vspec.profiling.engine import prompt_text, prompt_windows
from vllm_hust_vspec.profiling.grid import run_goodput, select_median_runs
from vllm_hust_vspec.profiling.provenance import model_fingerprint, sha256_file
from vllm_hust_vspec.settings import resolve_settings


def fb(batch: int, gamma: int, interval: float, *, accepted: int = 0, steady: bool = True,
       drafted: int | None = None) -> StepFeedback:
    d = gamma if drafted is None else drafted
    return StepFeedback(batch_size=batch, gamma=gamma, drafted=(d,) * batch,
                        accepted=(accepted,) * batch, committed=batch * (1 + accepted),
                        interval_s=interval, token_budget=4096, steady=steady)


def test_cell_samples_keep_steady_full_batch_steps_of_the_cell_gamma() -> None:
    run = CellRun(Cell(batch=4, gamma=2, output_len=8), [
        fb(4, 4, 0.05),                  # transition: verified the previous cell's gamma
        fb(4, 2, 0.02, accepted=1),
        fb(4, 2, 0.03, steady=False),     # prefill mixed in
        fb(3, 2, 0.02),                   # a request finished: partial batch
        fb(4, 2, 0.04, accepted=2),
    ])
    samples = cell_samples(run, prompt_len=10)
    assert [s["step_s"] for s in samples] == [0.02, 0.04]
    # context = prompts + prefill token + everything committed before the step
    assert samples[0]["context_tokens"] == 4 * 10 + 4 + 4
    assert samples[1]["context_tokens"] == 4 * 10 + 4 + 4 + 8 + 4 + 3
    assert samples[0]["num_batched_tokens"] == 4 + 8
    assert samples[1]["committed"] == 12


def test_goodput_best_gamma_and_table() -> None:
    samples = [
        {"batch_size": 1, "gamma": 0, "committed": 1, "step_s": 0.010},
        {"batch_size": 1, "gamma": 2, "committed": 3, "step_s": 0.015},
        {"batch_size": 8, "gamma": 0, "committed": 8, "step_s": 0.02},
        {"batch_size": 8, "gamma": 2, "committed": 16, "step_s": 0.05},
        {"batch_size": 32, "gamma": 0, "committed": 32, "step_s": 0.04},
        {"batch_size": 32, "gamma": 2, "committed": 64, "step_s": 0.08},
    ]
    gp = measured_goodput(samples)
    assert gp[(1, 2)] == pytest.approx(200.0) and gp[(8, 0)] == pytest.approx(400.0)
    best = best_gammas(gp)
    assert best == {1: 2, 8: 0, 32: 0}  # 32: a tie (800 vs 800) goes to the smaller gamma
    table = gamma_table(best, max_batch=64)
    assert table == (TableEntry(1, 7, 2), TableEntry(8, 64, 0))
    assert gamma_table({}, 8) == ()
    assert gamma_table({4: 1}, 2) == (TableEntry(1, 4, 1),)


def test_acceptance_per_position_is_unconditional_and_non_increasing() -> None:
    steps = [
        StepFeedback(batch_size=2, gamma=3, drafted=(3, 3), accepted=(3, 0), committed=5,
                     interval_s=0.01, token_budget=64),
        StepFeedback(batch_size=2, gamma=1, drafted=(1, 1), accepted=(1, 1), committed=4,
                     interval_s=0.01, token_budget=64),
    ]
    # position 0: 4 drafted, 3 accepted; 1: 2 drafted, 1 accepted; 2: 2, 1 -> capped at 0.5
    assert acceptance_per_position(steps, 4) == pytest.approx([0.75, 0.5, 0.5])
    assert acceptance_per_position([], 3) == []


def _synthetic(grid: ProfileGrid, noise: float = 0.0) -> list[CellRun]:
    """Steps timed by a known latency model: 5 ms + 0.2 ms/verified token + 1 ms/gamma."""
    rng = random.Random(0)
    runs = []
    for cell in grid.cells():
        steps = []
        for _ in range(cell.output_len // (1 + cell.gamma)):
            t = 0.005 + 0.0002 * cell.batch * (1 + cell.gamma) + 0.001 * cell.gamma
            t *= 1 + rng.uniform(-noise, noise)
            steps.append(fb(cell.batch, cell.gamma, t, accepted=min(cell.gamma, 1)))
        runs.append(CellRun(cell, steps))
    return runs


def test_build_profile_recovers_the_model_and_measures_the_table() -> None:
    grid = ProfileGrid(batch_sizes=(1, 4, 16), gammas=(0, 1, 2, 3), output_lens=(24, 48),
                       repeats=1)
    runs = _synthetic(grid)
    samples = [s for r in runs for s in cell_samples(r, grid.prompt_len)]
    feedback = [f for r in runs for f in r.feedback if f.gamma > 0]
    out = build_profile(samples, feedback, grid, max_batch=16, name="syn", method="draft_model",
                        notes="synthetic", context_terms=False)
    p = out.profile
    assert p.target.constant_s == pytest.approx(0.005, rel=1e-3)
    assert p.target.per_batched_token_s == pytest.approx(0.0002, rel=1e-3)
    assert p.draft.constant_s == pytest.approx(0.001, rel=1e-2)
    assert out.fit.residual < 1e-6
    # 1 accepted draft per step at any gamma >= 1: gamma 1 is best everywhere here
    assert out.best == {1: 1, 4: 1, 16: 1}
    assert p.batch_gamma_table == (TableEntry(1, 16, 1),)
    assert p.default_acceptance[0] == pytest.approx(1.0)
    assert p.notes == "synthetic" and p.name == "syn"


def test_build_profile_falls_back_without_context_terms_when_unidentifiable() -> None:
    grid = ProfileGrid(batch_sizes=(1, 2), gammas=(0, 2), output_lens=(12,))
    samples = [{"batch_size": b, "gamma": g, "num_batched_tokens": b * (1 + g),
                "context_tokens": 100, "step_s": 0.01 + 0.001 * b * (1 + g), "committed": b}
               for b in (1, 2) for g in (0, 2) for _ in range(3)]
    out = build_profile(samples, [], grid, max_batch=2)
    assert out.notes and "without context terms" in out.notes[0]
    assert out.profile.target.per_context_token_s == 0.0
    assert out.acceptance == [0.6]  # nothing drafted: the schema default


def test_select_median_runs_drops_the_disturbed_repeats() -> None:
    cell = Cell(batch=2, gamma=1, output_len=8)
    runs = [CellRun(Cell(2, 1, 8, rep), [fb(2, 1, t, accepted=1)] * 4)
            for rep, t in enumerate((0.010, 0.500, 0.012))]  # repeat 1 hit by foreign load
    other = CellRun(Cell(4, 1, 8), [fb(4, 1, 0.02)])
    chosen = select_median_runs([*runs, other], prompt_len=4)
    assert len(chosen) == 2 and other in chosen
    assert next(r for r in chosen if r.cell.batch == cell.batch).feedback[0].interval_s == 0.012
    assert run_goodput(runs[0], 4) == pytest.approx(4 / 0.010)
    assert run_goodput(CellRun(cell, []), 4) == 0.0


def test_grid_validation_names_the_flag() -> None:
    with pytest.raises(GridError, match="--gammas needs at least two values"):
        ProfileGrid(gammas=(0,)).validate()
    with pytest.raises(GridError, match="--batch-sizes has duplicates"):
        ProfileGrid(batch_sizes=(2, 2)).validate()
    with pytest.raises(GridError, match="max_model_len >= 197"):
        ProfileGrid(output_lens=(160,), prompt_len=32).validate(max_model_len=128)
    cells = ProfileGrid(batch_sizes=(1, 2), gammas=(0, 1), output_lens=(8,), repeats=2).cells()
    # repeats outermost: the two runs of a cell are a full grid pass apart
    assert [(c.repeat, c.batch, c.gamma) for c in cells] == [
        (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 1, 0), (1, 1, 1), (1, 2, 0), (1, 2, 1)]


def test_prompt_windows_are_distinct_and_sized() -> None:
    ids = list(range(1000))
    ws = prompt_windows(ids, 8, 16, salt=3)
    assert len(ws) == 8 and all(len(w) == 16 for w in ws)
    assert len({w[0] for w in ws}) == 8
    assert prompt_windows(ids, 8, 16, salt=4) != ws
    assert "def " in prompt_text(10_000)


def test_model_fingerprint_hashes_config_and_weights(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    (tmp_path / "README.md").write_text("ignored")
    fp = model_fingerprint(tmp_path)
    assert set(fp["files"]) == {"config.json", "model.safetensors"}
    assert fp["files"]["model.safetensors"]["sha256"] == sha256_file(tmp_path /
                                                                     "model.safetensors")
    light = model_fingerprint(tmp_path, weights=False)
    assert "sha256" not in light["files"]["model.safetensors"]
    assert light["files"]["model.safetensors"]["bytes"] == 3


@pytest.fixture
def fake_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("target", "draft"):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "config.json").write_text(f'{{"name": "{name}"}}')
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(tmp_path / "models"))
    return tmp_path / "models"


def test_collect_writes_both_files_from_given_runs(fake_models: Path, tmp_path: Path) -> None:
    grid = ProfileGrid(batch_sizes=(1, 4), gammas=(0, 1, 2), output_lens=(24, 36))
    resolved = resolve_settings(preset="cpu-tiny", env={"HUST_VSPEC_MODEL_DIR":
                                                        str(fake_models)})
    plan = plan_profile(resolved, {"HUST_VSPEC_MODEL_DIR": str(fake_models)}, grid,
                        out_dir=tmp_path / "out")
    outcome, meas = collect(plan, runs=_synthetic(grid, noise=0.02))
    prof = load_profile(plan.profile_path)  # loadable by the profile policy
    assert prof.batch_gamma_table and prof.fit is not None
    assert "re-measure" in prof.notes and "cpu-tiny" not in prof.notes
    on_disk = json.loads(plan.measurements_path.read_text())
    assert on_disk["models"]["target"]["files"]["config.json"]["sha256"]
    assert on_disk["settings"]["grid"]["gammas"] == [0, 1, 2]
    selected = [x for x in on_disk["samples"] if x["selected"]]
    assert len(selected) == meas["fit"]["num_samples"] > 0
    assert len(on_disk["samples"]) == 3 * len(selected)  # three repeats, the median one fitted
    assert sum(c["selected"] for c in on_disk["cells"]) == len(on_disk["cells"]) // 3
    assert on_disk["fit"]["residual_rmse_s"] >= 0
    assert {"versions", "machine"} <= set(on_disk["host"])
    assert on_disk["best_gamma"] == {str(b): g for b, g in outcome.best.items()}


def test_profile_cli_dry_run(fake_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = profile_cli.main(["--protocol", "cpu-tiny", "--batch-sizes", "1,2", "--gammas", "0,2",
                           "--output-lens", "16", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0
    assert '"num_speculative_tokens": 2' in out and '"max_num_seqs": 2' in out
    assert "3 repeat(s) = 12 cells" in out
    assert profile_cli.main(["--protocol", "cpu-tiny", "--gammas", "0", "--dry-run"]) == 2
    assert "--gammas" in capsys.readouterr().err
    assert profile_cli.default_batches(8) == (1, 2, 4, 8)
    assert profile_cli.default_batches(12) == (1, 2, 4, 8, 12)
    assert profile_cli.default_batches(None) == (1, 2, 4, 8)
