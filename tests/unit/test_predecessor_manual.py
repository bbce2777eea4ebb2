"""Every launcher and bench command of the predecessor's manual (tests/fixtures/
predecessor-README.zh.txt) runs as a dry run here: it builds the command it describes, or
fails closed (exit 2) with a message naming what is missing. Commands are taken from the
manual's text, joined over line continuations, with only the model paths made local."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from _model_folders import make_model_dir

from vllm_hust_vspec.cli import bench as bench_cli
from vllm_hust_vspec.cli import launch

MANUAL = Path(__file__).resolve().parents[1] / "fixtures" / "predecessor-README.zh.txt"
# Folder names the manual's presets and commands look models up by.
MODELS = ["Qwen2.5-14B-Instruct", "Qwen2.5-0.5B-Instruct", "Eagle-Qwen2.5-14B-Instruct",
          "Qwen3.5-35B-A3B", "Qwen3.5-35B-A3B-Eagle3-Specforge"]
# Commands that must fail closed, and the words their message must contain.
FAILS_CLOSED = {
    # the predecessor's active-vocabulary files at its recorded paths, and NPU paths vSpec
    # does not implement: named, before any model loads
    "eagle-relaxed": ["eagle_draft_active_vocab_ids", "is not a file"],
    "qwen35-eagle3": ["--eagle-spec-metadata-cache", "--graph-event-ordering"],
    "qwen25_draft_gsm8k_graph_b128_g4.json": ["adaptive-profile", "vllm-hust-vspec-profile"],
    "qwen25_eagle_gsm8k_graph_b128.json": ["adaptive-profile", "vllm-hust-vspec-profile"],
}


PATTERNS = (r"(?:^|\s)(\./run\.sh\s.*)$", r"(?:^|\s|/)(vllm-hust-vspec(?:-bench)?\s.*)$")


def commands() -> list[str]:
    """Launcher invocations (run.sh / vllm-hust-vspec) in the manual, one string each."""
    text = MANUAL.read_text(encoding="utf-8").replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        for pattern in PATTERNS:
            m = re.search(pattern, line)
            if m and not line.startswith("#") and line.isascii():  # prose is Chinese
                out.append(re.sub(r"\s+", " ", m.group(1)).strip())
                break
    return out


def local_argv(command: str, models: Path) -> tuple[str, list[str]]:
    """(tool, argv) with the manual's model folders replaced by local ones."""
    words = shlex.split(command)
    tool, args = words[0], words[1:]
    if tool == "./run.sh":
        tool, args = "vllm-hust-vspec", ["--protocol", *args] if args else []
    fixed = []
    for word in args:
        if word.startswith(("/model/", "/workspace/models/", "/data/shared-models/")):
            word = str(models / Path(word).name)
        fixed.append(word)
    return tool.rsplit("/", 1)[-1], fixed


def with_dry_run(argv: list[str]) -> list[str]:
    """``--dry-run --json`` before any ``--`` (what follows it goes to vllm serve)."""
    ours = [a for a in argv if a not in ("--dry-run", "--json")]
    cut = ours.index("--") if "--" in ours else len(ours)
    return [*ours[:cut], "--dry-run", "--json", *ours[cut:]]


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The manual's model folders, and vLLM-Ascend as the host (the stack the manual is for:
    its validated presets ask for the merged FULL draft graph only vLLM-Ascend has)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(launch.importlib.util, "find_spec",
                        lambda n, *a: object() if n == "vllm_ascend" else real(n, *a))
    root = make_model_dir(tmp_path / "models", tuple(MODELS))
    for key in list(__import__("os").environ):
        if key.startswith(("HUST_VSPEC_", "VSPEC_", "SPECSLO", "SPECASCEND")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(root))
    # The manual's `vllm-hust-ext run -- vllm-hust-vspec --method eagle ...` names no drafter:
    # the deployment's environment does (a local path, like the others).
    monkeypatch.setenv("HUST_VSPEC_EAGLE_MODEL", str(root / "Eagle-Qwen2.5-14B-Instruct"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # profiles/ as the manual assumes
    return root


def test_the_manual_has_its_commands() -> None:
    found = commands()
    assert len(found) >= 15, found
    assert any("--protocol arc-easy" in c for c in found)
    assert any(c.startswith("vllm-hust-vspec-bench") for c in found)


def test_every_launcher_command_dry_runs_or_fails_closed(
    models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = 0
    for command in commands():
        tool, argv = local_argv(command, models)
        if tool != "vllm-hust-vspec" or "--dry-run" in argv and argv.index("--dry-run") == 0:
            continue
        expect = next((words for key, words in FAILS_CLOSED.items() if key in command), None)
        argv = with_dry_run(argv)
        code = launch.main(argv)
        captured = capsys.readouterr()
        if expect is not None:
            assert code == 2, (command, captured.err)
            for word in expect:
                assert word in captured.err, (command, captured.err)
        else:
            assert code == 0, (command, captured.err)
            doc = json.loads(captured.out)
            assert doc["env"]["HUST_VSPEC_ENABLED"] == "1", command
            assert "--speculative-config" in doc["argv"], command
        ran += 1
    assert ran >= 12


def test_the_eagle_switches_fail_closed_once_a_profile_exists(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The manual's EAGLE profile command, with a real profile: the NPU switches it names
    are what stops it then, each by name."""
    (command,) = [c for c in commands() if "--eagle-spec-metadata-cache" in c]
    profile = Path(__file__).resolve().parents[2] / "profiles" / "cpu-tiny-draft-float32.json"
    _, argv = local_argv(command.replace("profiles/qwen25_eagle_gsm8k_graph_b128.json",
                                         str(profile)), models)
    assert launch.main(with_dry_run(argv)) == 2
    err = capsys.readouterr().err
    assert "--eagle-spec-metadata-cache" in err and "--graph-event-ordering" in err


def test_the_protocol_bench_commands_dry_run(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "materialized.jsonl"
    data.write_text(json.dumps({"prompt": "Question: 2+2?", "answer": "4"}) + "\n")
    benches = [c for c in commands() if c.startswith("vllm-hust-vspec-bench")]
    assert benches
    for command in benches:
        _, argv = local_argv(command, models)
        code = bench_cli.main([*argv, "--dataset-path", str(data), "--output-dir",
                               str(tmp_path / "out"), "--dry-run"])
        out = capsys.readouterr()
        assert code == 0, (command, out.err)
        assert "--num-prompts 200" in out.out and "ARC-Easy" in out.out, out.out


def test_run_sh_without_a_preset_runs_draft(models: Path) -> None:
    """0.14's run.sh took 'draft' when no preset (or a flag) came first."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**__import__("os").environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    out = subprocess.run(["bash", str(root / "run.sh"), "--port", "8100", "--dry-run", "--json"],
                         capture_output=True, text=True, env=env, timeout=120)
    # the draft preset asks for vLLM-Ascend's merged draft graph: named on this host, or run
    assert ("merged" in out.stderr) if out.returncode else (
        json.loads(out.stdout)["env"]["HUST_VSPEC_METHOD"] == "draft")
    help_out = subprocess.run(["bash", str(root / "run.sh"), "--help"], capture_output=True,
                              text=True, env=env, timeout=120)
    assert help_out.returncode == 0 and "default preset: draft" in help_out.stdout
