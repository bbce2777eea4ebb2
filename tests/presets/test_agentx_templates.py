"""The AgentX 256K target templates and the server commands of docs/agentx.md.

The templates must satisfy the AgentX harness's target reader (its required fields and checks,
restated here: the harness is not installed). The documented commands are dry-run exactly as
written (through bash, so their quoting is what a user types) on this host, and again with
vLLM-Ascend made to look installed, the host they are meant for.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "src" / "vllm_hust_vspec" / "presets"
DOC = ROOT / "docs" / "agentx.md"
BIN = Path(sys.executable).parent
TARGET_ONLY = "agentx-qwen35-frontier-target-only.example.json"
MTP2 = "agentx-qwen35-frontier-mtp2.example.json"
PLACEHOLDER = "REPLACE_WITH_"
# The harness's target reader: these top-level fields, and these under enabled speculation.
HARNESS_FIELDS = {"url", "model", "model_revision", "tokenizer", "tokenizer_revision", "engine",
                  "hardware", "max_model_len", "host_kv_budget_gib", "speculative_decoding"}
HARNESS_SPEC_FIELDS = {"forced_acceptance_length", "speed_bench_evidence",
                       "server_configuration"}
FORCED_N = "2"
# What the MTP2 server may change relative to the frontier preset (as exported HUST_VSPEC_*).
ALLOWED_CHANGES = {
    "HUST_VSPEC_GAMMA": ("6", "2"),
    "HUST_VSPEC_ADAPTIVE_SPECULATION": (None, "0"),
    "HUST_VSPEC_FORCED_ACCEPTANCE_LENGTH": (None, FORCED_N),
}
FAIL_CLOSED = "ask for host capabilities that are not there"


def load(name: str) -> dict[str, Any]:
    value = json.loads((PRESETS / name).read_text(encoding="utf-8"))
    assert isinstance(value, dict)
    return value


def harness_accepts(target: dict[str, Any]) -> None:
    """The checks the AgentX harness makes when it reads a target (before any placeholder
    check), restated."""
    assert not HARNESS_FIELDS - target.keys(), HARNESS_FIELDS - target.keys()
    url = urlsplit(target["url"])
    assert url.scheme in {"http", "https"} and url.hostname
    assert not (url.username or url.password or url.query or url.fragment)
    assert url.path in {"", "/"}, "an origin, without /v1"
    assert target["max_model_len"] >= 256000
    assert target["host_kv_budget_gib"] >= 0
    spec = target["speculative_decoding"]
    if spec.get("enabled") is not False:
        assert spec.get("enabled") is True and spec.keys() >= HARNESS_SPEC_FIELDS
    assert Path(target["tokenizer"]).is_absolute()


def strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize("name", [TARGET_ONLY, MTP2])
def test_templates_satisfy_the_harness_and_stay_unfilled(name: str) -> None:
    target = load(name)
    harness_accepts(target)
    # the harness refuses to run a target that still holds a placeholder
    assert PLACEHOLDER in json.dumps(target)
    assert all(s.startswith(PLACEHOLDER) for s in strings(target) if PLACEHOLDER in s)
    assert target["hardware"]["device_count"] == 2  # TP2 on devices 0,1
    assert target["engine"]["default_temperature"] == 0
    assert target["engine"]["thinking_mode"].startswith(PLACEHOLDER)
    assert (ROOT / "configs" / name).read_bytes() == (PRESETS / name).read_bytes()


def test_the_two_templates_differ_only_in_speculation() -> None:
    base, mtp2 = load(TARGET_ONLY), load(MTP2)
    assert base["speculative_decoding"] == {"enabled": False}
    same = ("url", "tokenizer", "hardware", "max_model_len", "host_kv_budget_gib",
            "model_revision", "tokenizer_revision")
    assert {k: base[k] for k in same} == {k: mtp2[k] for k in same}
    assert base["model"] != mtp2["model"]


def test_mtp2_template_names_vspec_forced_acceptance() -> None:
    spec = load(MTP2)["speculative_decoding"]
    server = spec["server_configuration"]
    assert server["method"] == "mtp" and server["num_speculative_tokens"] == 2
    assert server["adaptive_speculation"] is False
    assert "--forced-acceptance-length" in server["acceptance"]
    assert "qwen35-35b-a3b-mtp2" in server["launcher"]
    for key in ("vspec_forced_acceptance_length", "speed_bench_acceptance_length",
                "served_acceptance_length"):
        assert server[key].startswith(PLACEHOLDER)
    assert spec["forced_acceptance_length"].startswith(PLACEHOLDER)
    assert spec["speed_bench_evidence"].startswith(PLACEHOLDER)
    # not the predecessor's host sampler
    assert "synthetic" not in json.dumps(spec) and "rejection_sample_method" not in server


def documented_commands() -> list[str]:
    """Every vllm-hust-vspec command in a bash block of docs/agentx.md, continuation lines
    joined (the shell text, quoting untouched)."""
    text = DOC.read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("vllm-hust-vspec"):
                parts = [line]
                while parts[-1].endswith("\\"):
                    i += 1
                    parts.append(lines[i])
                commands.append("\n".join(parts))
            i += 1
    return commands


def _launcher_command() -> str:
    return next(c for c in documented_commands() if c.startswith("vllm-hust-vspec "))


def _pair_command() -> str:
    return next(c for c in documented_commands() if c.startswith("vllm-hust-vspec-bench pair"))


@pytest.fixture(scope="module")
def host_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A clean environment: a fake model folder under HUST_VSPEC_MODEL_DIR, no vSpec
    variables of the caller's."""
    root = tmp_path_factory.mktemp("agentx")
    model = root / "models" / "Qwen3.5-35B-A3B"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5MoeForCausalLM"]}))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HUST_VSPEC_", "HUST_SPEC", "VSPEC_", "SPECSLO", "SPECASCEND",
                                "VLLM_PLUGINS", "PROMETHEUS_MULTIPROC_DIR", "PYTHONPATH"))}
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "FORCED_N": FORCED_N,
                "HUST_VSPEC_MODEL_DIR": str(root / "models"), "HF_HUB_CACHE": str(root / "hf")})
    return env


@pytest.fixture(scope="module")
def fake_ascend(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A folder whose ``vllm_ascend`` package makes the launcher's host check see vLLM-Ascend."""
    root = tmp_path_factory.mktemp("ascend")
    (root / "vllm_ascend").mkdir()
    (root / "vllm_ascend" / "__init__.py").write_text("")
    return str(root)


def run_shell(command: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300, check=False)


def as_json_dry_run(command: str) -> str:
    """The documented command with --dry-run --json right after the program (and subcommand),
    before any '--' passthrough."""
    if command.startswith("vllm-hust-vspec-bench pair"):
        return command.replace("vllm-hust-vspec-bench pair", "vllm-hust-vspec-bench pair --json"
                               + ("" if "--dry-run" in command else " --dry-run"), 1)
    return command.replace("vllm-hust-vspec", "vllm-hust-vspec --dry-run --json", 1)


def test_the_doc_has_both_server_commands() -> None:
    commands = documented_commands()
    assert len(commands) == 2
    assert "--forced-acceptance-length" in _launcher_command()
    assert "--forced-acceptance-length" not in _pair_command()
    assert "--dry-run" in _pair_command()


@pytest.mark.parametrize("ascend", [False, True], ids=["this-host", "vllm-ascend-present"])
@pytest.mark.parametrize("which", ["mtp2", "target-only"])
def test_documented_commands_dry_run(which: str, ascend: bool, host_env: dict[str, str],
                                     fake_ascend: str, tmp_path: Path) -> None:
    env = dict(host_env, **({"PYTHONPATH": fake_ascend} if ascend else {}))
    command = _launcher_command() if which == "mtp2" else _pair_command()
    done = run_shell(as_json_dry_run(command), env, tmp_path)
    if done.returncode == 2 and FAIL_CLOSED in done.stderr:  # the documented fail-closed exit
        assert ("vLLM-Ascend" if ascend else "upstream vLLM") in done.stderr
        return
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)


def _dry_run_json(command: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = run_shell(command, env, cwd)
    assert done.returncode == 0, done.stderr
    value = json.loads(done.stdout)
    assert isinstance(value, dict)
    return value


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _without(argv: list[str], *flags: str) -> list[str]:
    out = list(argv)
    for flag in flags:
        if flag in out:
            i = out.index(flag)
            del out[i:i + 2]
    return out


@pytest.mark.slow
def test_mtp2_server_is_the_frontier_preset_but_gamma_2_fixed_and_forced(
    host_env: dict[str, str], tmp_path: Path
) -> None:
    ours = _dry_run_json(as_json_dry_run(_launcher_command()), host_env, tmp_path)
    frontier = _dry_run_json("vllm-hust-vspec --dry-run --json --protocol qwen35-frontier-mtp2",
                             host_env, tmp_path)
    changed = {k: (frontier["env"].get(k), ours["env"].get(k))
               for k in set(frontier["env"]) | set(ours["env"])
               if frontier["env"].get(k) != ours["env"].get(k)}
    assert changed == ALLOWED_CHANGES
    spec = json.loads(_flag(ours["argv"], "--speculative-config") or "{}")
    assert spec["method"] == "mtp" and spec["num_speculative_tokens"] == 2
    # every other vllm serve argument is the frontier preset's, plus the greedy default
    varying = ("--speculative-config", "--compilation-config", "--override-generation-config")
    assert _without(ours["argv"], *varying) == _without(frontier["argv"], *varying)
    assert json.loads(_flag(ours["argv"], "--override-generation-config") or "{}") == {
        "temperature": 0}
    mtp2 = load(MTP2)
    assert _flag(ours["argv"], "--served-model-name") == mtp2["model"]
    assert _flag(ours["argv"], "--port") == str(urlsplit(mtp2["url"]).port)
    assert ours["env"]["HUST_VSPEC_TARGET_MODEL"] == mtp2["tokenizer"]


@pytest.mark.slow
def test_target_only_line_is_the_mtp2_server_without_speculation(
    host_env: dict[str, str], tmp_path: Path
) -> None:
    plan = _dry_run_json(as_json_dry_run(_pair_command()), host_env, tmp_path)
    baseline = plan["commands"]["baseline"]
    argv, env = baseline["argv"], baseline["env"]
    assert "--speculative-config" not in argv
    assert env["HUST_VSPEC_ENABLED"] == "0"
    assert not [k for k in env if k.startswith("HUST_VSPEC_") and k != "HUST_VSPEC_ENABLED"]
    assert plan["outputs_changed"] is False
    base = load(TARGET_ONLY)
    assert _flag(argv, "--served-model-name") == base["model"]
    assert _flag(argv, "--port") == str(urlsplit(base["url"]).port)
    mtp2 = _dry_run_json(as_json_dry_run(_launcher_command()), host_env, tmp_path)
    varying = ("--speculative-config", "--served-model-name", "--compilation-config")
    assert _without(argv, *varying) == _without(mtp2["argv"], *varying)
    # each arm captures its own decode widths (batch 1..16): 1 for target-only, 3 for MTP2
    ours, theirs = (json.loads(_flag(a, "--compilation-config") or "{}")
                    for a in (argv, mtp2["argv"]))
    assert ours["cudagraph_mode"] == theirs["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert ours["cudagraph_capture_sizes"] == list(range(1, 17))
    assert theirs["cudagraph_capture_sizes"] == list(range(3, 49, 3))
    shared = {k: v for k, v in mtp2["env"].items() if not k.startswith("HUST_VSPEC_")}
    assert {k: v for k, v in env.items() if k in shared} == shared


def test_frontier_preset_cannot_fix_gamma_2(host_env: dict[str, str], tmp_path: Path) -> None:
    """Why the commands start from qwen35-35b-a3b-mtp2 (docs/agentx.md says so)."""
    done = run_shell("vllm-hust-vspec --dry-run --protocol qwen35-frontier-mtp2 --gamma 2",
                     host_env, tmp_path)
    assert done.returncode == 2 and "gamma is pinned to 6" in done.stderr
