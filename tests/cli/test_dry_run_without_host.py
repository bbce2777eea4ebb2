"""``--dry-run`` on a machine without vLLM (a login node): every launcher command of the
predecessor's manual prints its command, says once that the host checks were skipped, and
exits 0. With a host installed, a dry run stops on host capabilities exactly as a launch does.

The no-host runs are subprocesses of a throwaway virtual environment made from the base
interpreter without system site-packages (what a login node's Python without vLLM is), with
vSpec on ``PYTHONPATH`` and a ``vllm-hust-vspec`` console script like the one pip writes.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _model_folders import launcher_sees_ascend, make_model_dir
from test_predecessor_manual import MODELS, commands

from vllm_hust_vspec.cli import launch

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = "host checks skipped"
# Fails closed for a reason that is not the host: the predecessor's active-vocabulary files
# at its recorded paths do not exist here.
NOT_A_HOST_CHECK = {"eagle-relaxed": "is not a file"}


@pytest.fixture(scope="module")
def login_node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A Python without vLLM, its launcher script, a copy of run.sh and the manual's models."""
    base = tmp_path_factory.mktemp("login-node")
    venv = base / "venv"
    interpreter = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([interpreter, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    script = venv / "bin" / "vllm-hust-vspec"
    script.write_text(f"#!{python}\nimport sys\nfrom vllm_hust_vspec.cli.launch import main\n"
                      "sys.exit(main())\n")
    script.chmod(0o755)
    bin_dir = base / "checkout"  # run.sh without the repository's .venv next to it
    bin_dir.mkdir()
    shutil.copy(ROOT / "run.sh", bin_dir / "run.sh")
    models = make_model_dir(base / "models", tuple(MODELS))
    return {"python": python, "venv_bin": venv / "bin", "run_sh": bin_dir / "run.sh",
            "models": models, "hf": base / "hf"}


def _env(node: dict[str, Path]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HUST_VSPEC_", "VSPEC_", "SPECSLO", "SPECASCEND", "VLLM_"))
           and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update({
        "PATH": f"{node['venv_bin']}:/usr/bin:/bin",
        "PYTHONPATH": str(ROOT / "src"),
        "HUST_VSPEC_MODEL_DIR": str(node["models"]),
        # the manual's `vllm-hust-ext run -- vllm-hust-vspec --method eagle ...` names no
        # drafter: the deployment's environment does
        "HUST_VSPEC_EAGLE_MODEL": str(node["models"] / "Eagle-Qwen2.5-14B-Instruct"),
        "HF_HUB_CACHE": str(node["hf"]),
    })
    return env


def _argv(command: str, node: dict[str, Path]) -> list[str]:
    """The manual's command as a login node runs it: run.sh through bash, model folders made
    local, ``--dry-run`` added before any ``--``."""
    words = shlex.split(command)
    tool, args = words[0], words[1:]
    args = [str(node["models"] / Path(a).name)
            if a.startswith(("/model/", "/workspace/models/", "/data/shared-models/")) else a
            for a in args]
    args = [a for a in args if a != "--dry-run"]
    cut = args.index("--") if "--" in args else len(args)
    args = [*args[:cut], "--dry-run", *args[cut:]]
    head = ["bash", str(node["run_sh"])] if tool == "./run.sh" else ["vllm-hust-vspec"]
    return [*head, *args]


def _launcher_commands() -> list[str]:
    found = [c for c in commands() if c.startswith(("./run.sh", "vllm-hust-vspec "))]
    assert any(c.startswith("./run.sh") and "--dry-run" in c for c in found), found
    return found


def test_the_login_node_has_no_host(login_node: dict[str, Path]) -> None:
    probe = ("import importlib.util as u, sys; "
             "sys.exit(any(u.find_spec(n) for n in ('vllm', 'vllm_ascend', 'torch')))")
    assert subprocess.run([str(login_node["python"]), "-c", probe], env=_env(login_node),
                          timeout=60).returncode == 0


@pytest.mark.parametrize("command", _launcher_commands())
def test_manual_command_dry_runs_without_a_host(login_node: dict[str, Path],
                                                command: str) -> None:
    out = subprocess.run(_argv(command, login_node), capture_output=True, text=True,
                         env=_env(login_node), cwd=ROOT, timeout=120)
    closed = next((why for key, why in NOT_A_HOST_CHECK.items() if key in command), None)
    if closed is not None:
        assert out.returncode == 2 and closed in out.stderr, out.stderr
        return
    assert out.returncode == 0, out.stderr
    assert "vllm.entrypoints" in out.stdout and "--speculative-config" in out.stdout, out.stdout
    assert "HUST_VSPEC_ENABLED=1" in out.stdout, out.stdout
    skipped = [line for line in out.stderr.splitlines() if SKIPPED in line]
    assert len(skipped) == 1 and "no vLLM host is installed" in skipped[0], out.stderr
    assert "upstream vLLM" not in out.stderr and "vLLM-Ascend" not in out.stderr, out.stderr


def test_a_launch_without_a_host_is_refused(login_node: dict[str, Path]) -> None:
    out = subprocess.run(["vllm-hust-vspec", "--protocol", "eagle"], capture_output=True,
                         text=True, env=_env(login_node), cwd=ROOT, timeout=120)
    assert out.returncode == 2
    assert "no vLLM host is installed" in out.stderr and "--dry-run" in out.stderr, out.stderr


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The manual's model folders; no vSpec variables from the calling shell."""
    root = make_model_dir(tmp_path / "models", tuple(MODELS))
    for key in list(os.environ):
        if key.startswith(("HUST_VSPEC_", "VSPEC_", "SPECSLO", "SPECASCEND")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(root))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    return root


def _host_verdict(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = launch.main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("host", "preset", "words"), [
    ("vllm", "draft", ["vSpec on upstream vLLM", "--merged-full"]),
    ("vllm_ascend", "qwen35-eagle3", ["--eagle-spec-metadata-cache", "--graph-event-ordering",
                                      "vSpec does not have"]),
])
def test_with_a_host_the_dry_run_stops_as_the_launch_does(
    host: str, preset: str, words: list[str], models: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    if host == "vllm_ascend":
        launcher_sees_ascend(monkeypatch)
    else:  # upstream vLLM installed, whether or not this test environment has it
        real = launch.importlib.util.find_spec
        monkeypatch.setattr(launch.importlib.util, "find_spec",
                            lambda n, *a: None if n == "vllm_ascend"
                            else object() if n == "vllm" else real(n, *a))
    dry = _host_verdict(["--protocol", preset, "--dry-run"], capsys)
    run = _host_verdict(["--protocol", preset], capsys)  # refused before any exec
    assert dry == run and dry[0] == 2
    for word in words:
        assert word in dry[1], dry[1]
    assert SKIPPED not in dry[1]


def test_the_skip_note_is_one_line(models: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    real = launch.importlib.util.find_spec
    monkeypatch.setattr(launch.importlib.util, "find_spec",
                        lambda n, *a: None if n in launch.HOST_PACKAGES else real(n, *a))
    code, err = _host_verdict(["--protocol", "qwen35-eagle3", "--dry-run"], capsys)
    assert code == 0, err
    assert len(re.findall(SKIPPED, err)) == 1
