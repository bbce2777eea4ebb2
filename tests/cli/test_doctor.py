"""The ABI doctor on small hand-written host trees (no vllm import, no download)."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import textwrap
from pathlib import Path

import pytest

from vllm_hust_vspec.cli import doctor
from vllm_hust_vspec.host import abi
from vllm_hust_vspec.host.abi import source as abi_source

SRC = Path(__file__).resolve().parents[2] / "src"

UPSTREAM = {
    "vllm/__init__.py": "__version__ = '9.9.9'\n",
    "vllm/v1/core/sched/output.py": """
        from dataclasses import dataclass
        @dataclass
        class SchedulerOutput:
            num_spec_tokens_to_schedule: int = 0
    """,
    "vllm/v1/worker/gpu_worker.py": """
        class Worker:
            def load_model(self): ...
    """,
    "vllm/v1/engine/core.py": """
        class EngineCore:
            def __init__(self, vllm_config):
                self._initialize_kv_caches(vllm_config)
                self.batch_queue = None
            def _initialize_kv_caches(self, vllm_config): ...
            def post_step(self, model_executed):
                if self.check_for_draft_tokens and not self.async_scheduling:
                    self.model_executor.take_draft_token_ids()
            def shutdown(self): ...
            def step(self): ...
            def add_request(self, request, request_wave=0): ...
            def abort_requests(self, request_ids): ...
        class EngineCoreProc(EngineCore):
            def run_busy_loop(self): ...
    """,
    "vllm/v1/request.py": """
        class Request:
            def __init__(self, request_id, prompt_token_ids, sampling_params,
                         pooling_params): ...
    """,
    "vllm/v1/core/sched/scheduler.py": """
        class Scheduler:
            def __init__(self):
                self.dynamic_sd_lookup = None
                self.max_num_active_reqs = self.max_num_scheduled_tokens = 8
                self.requests, self.waiting, self.running = {}, [], []
                self.finished_req_ids = set()
            def schedule(self):
                assert len(self.running) < self.max_num_active_reqs
                return self.dynamic_sd_lookup[3]
            def update_from_output(self, a, b): ...
            def update_draft_token_ids(self, d): ...
            def shutdown(self): ...
            def _free_request(self, request):
                self.finished_req_ids.add(request.request_id)
            def has_requests(self): ...
    """,
    "vllm/v1/sample/rejection_sampler.py": """
        class RejectionSampler:
            def forward(self, metadata, draft_probs, logits, sampling_metadata): ...
    """,
    "vllm/v1/spec_decode/llm_base_proposer.py": """
        class SpecDecodeBaseProposer:
            def __init__(self, cfg):
                self.num_speculative_tokens = 3
            def propose(self, num_speculative_tokens, target_token_ids): ...
            def dummy_run(self, num_tokens): ...
    """,
    "vllm/v1/spec_decode/eagle.py": """
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
        class EagleProposer(SpecDecodeBaseProposer): ...
    """,
    "vllm/v1/spec_decode/draft_model.py": """
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
        class DraftModelProposer(SpecDecodeBaseProposer): ...
    """,
    "vllm/engine/arg_utils.py": """
        class EngineArgs:
            def create_speculative_config(self, target_model_config, target_parallel_config):
                ...
    """,
    "vllm/config/speculative.py": """
        from dataclasses import dataclass
        @dataclass
        class SpeculativeConfig:
            num_speculative_tokens_per_batch_size: list | None = None
    """,
    "vllm/v1/worker/gpu_model_runner.py": """
        class GPUModelRunner:
            def _dummy_run(self, num_tokens): ...
            def propose_draft_token_ids(self, scheduler_output):
                return self.drafter.propose(scheduler_output.num_spec_tokens_to_schedule)
            def _prepare_inputs(self, scheduler_output):
                use_spec_decode = self.speculative_config is not None
            def execute_model(self, scheduler_output):
                return self.speculative_config
            def sample_tokens(self, grammar_output):
                spec_config = self.speculative_config
    """,
}


# How the runner's _prepare_input_ids reads the previous frame's drafts under async scheduling
# (the K backport's padding rule depends on it): vLLM 0.23's row stride max K, vLLM >= 0.31's
# last draft width, or neither.
PREPARE_INPUT_IDS = {
    "k": """
                def _prepare_input_ids(self, scheduler_output, total, cu_num_tokens):
                    start = prev_index * self.num_spec_tokens
    """,
    "prev": """
                def __init__(self):
                    self.prev_num_spec_tokens = 0
                def _prepare_input_ids(self, scheduler_output, total, cu_num_tokens):
                    start = prev_index * self.prev_num_spec_tokens
    """,
    "none": """
                def _prepare_input_ids(self, scheduler_output, total, cu_num_tokens):
                    start = prev_index * self.draft_width
    """,
}


def ascend_tree(k_in_propose: bool, draft_shadow: bool = False,
                stride: str = "k") -> dict[str, str]:
    """A minimal vllm_ascend: K-aware or not, optionally with an upstream _propose shadow."""
    k = "num_speculative_tokens, " if k_in_propose else ""
    files = {
        "vllm_ascend/__init__.py": "",
        "vllm_ascend/spec_decode/__init__.py": """
            def get_spec_decode_method(method, vllm_config, device, runner): ...
        """,
        "vllm_ascend/spec_decode/llm_base_proposer.py": f"""
            from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
            class AscendSpecDecodeBaseProposer(SpecDecodeBaseProposer):
                def _propose(self, {k}target_token_ids, common_attn_metadata,
                             scheduler_output=None):
                    ...
        """,
        "vllm_ascend/spec_decode/eagle_proposer.py": """
            from vllm.v1.spec_decode.eagle import EagleProposer
            from vllm_ascend.spec_decode.llm_base_proposer import AscendSpecDecodeBaseProposer
            class AscendEagleProposer(EagleProposer, AscendSpecDecodeBaseProposer): ...
        """,
        "vllm_ascend/spec_decode/draft_proposer.py": """
            from vllm.v1.spec_decode.draft_model import DraftModelProposer
            from vllm_ascend.spec_decode.llm_base_proposer import AscendSpecDecodeBaseProposer
            class AscendDraftModelProposer(DraftModelProposer, AscendSpecDecodeBaseProposer):
                ...
        """,
        "vllm_ascend/sample/rejection_sampler.py": """
            from vllm.v1.sample.rejection_sampler import RejectionSampler
            def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len,
                                 cu_num_draft_tokens, draft_probs, target_logits_or_tuple,
                                 bonus_token_ids, sampling_metadata): ...
            class AscendRejectionSampler(RejectionSampler):
                def forward(self, metadata, draft_probs, logits, sampling_metadata):
                    return rejection_sample(1, 2, 3, 4, 5, 6, 7, sampling_metadata)
        """,
        "vllm_ascend/worker/model_runner_v1.py": """
            class NPUModelRunner:
                def propose_draft_token_ids(self, valid, scheduler_output):
                    return self.drafter._propose(target_token_ids=1,
                        common_attn_metadata=2, scheduler_output=scheduler_output)
        """ + PREPARE_INPUT_IDS[stride],
    }
    if draft_shadow:
        files["vllm/v1/spec_decode/draft_model.py"] = """
            from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
            class DraftModelProposer(SpecDecodeBaseProposer):
                def _propose(self, target_token_ids, scheduler_output=None): ...
        """
    return files


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture()
def no_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide installed hosts so only --source trees count."""
    monkeypatch.setattr(abi, "installed_source", lambda package: None)
    monkeypatch.setattr(abi_source, "installed_source", lambda package: None)


def statuses(report: abi.Report) -> dict[str, str]:
    return {r.check.id: r.status for t in report.tiers for r in t.results}


def test_upstream_only_tree_passes(tmp_path: Path, no_installed: None) -> None:
    write(tmp_path, UPSTREAM)
    report = abi.check_static("eagle", True, sources=[str(tmp_path)])
    assert report.ok, abi.render_text(report)
    assert "vllm.proposer_k" in statuses(report)
    assert report.host("vllm").version == "9.9.9" or report.host("vllm").installed
    assert not report.host("vllm_ascend").installed


def test_missing_k_field_is_named(tmp_path: Path, no_installed: None) -> None:
    files = dict(UPSTREAM)
    files["vllm/v1/core/sched/output.py"] = "class SchedulerOutput:\n    x: int = 0\n"
    write(tmp_path, files)
    report = abi.check_static("draft", True, sources=[str(tmp_path)])
    assert not report.ok
    assert any("SchedulerOutput.num_spec_tokens_to_schedule" in f for f in report.failures())
    # Without --adaptive the K channel is not required.
    assert abi.check_static("draft", False, sources=[str(tmp_path)]).ok


def test_an_engine_without_post_step_fails_on_every_host(tmp_path: Path,
                                                         no_installed: None) -> None:
    files = dict(UPSTREAM)
    files["vllm/v1/engine/core.py"] = files["vllm/v1/engine/core.py"].replace(
        "def post_step(self, model_executed):", "def _post(self, model_executed):")
    write(tmp_path, files)
    # the wrapper is installed whatever the switches: non-adaptive and Ascend hosts too
    for adaptive, extra in ((False, {}), (True, ascend_tree(True))):
        write(tmp_path, {**files, **extra})
        report = abi.check_static("draft", adaptive, sources=[str(tmp_path)])
        assert not report.ok
        assert any("EngineCore.post_step" in f for f in report.failures()), report.failures()


@pytest.mark.parametrize(("k_in_propose", "variant"), [(True, "native"), (False, "backport")])
@pytest.mark.parametrize("method", ["draft", "eagle", "mtp"])
def test_ascend_k_channel_variant(
    tmp_path: Path, no_installed: None, k_in_propose: bool, variant: str, method: str
) -> None:
    write(tmp_path, {**UPSTREAM, **ascend_tree(k_in_propose)})
    report = abi.check_static(method, True, sources=[str(tmp_path)])
    assert report.ok, abi.render_text(report)
    assert report.decisions["k_channel"] == variant


@pytest.mark.parametrize(("stride", "variant"), [
    ("k", "stride max K: drafts padded"), ("prev", "last draft width"), ("none", None)])
def test_async_draft_stride_names_the_padding_rule_it_relies_on(
    tmp_path: Path, no_installed: None, stride: str, variant: str | None
) -> None:
    write(tmp_path, {**UPSTREAM, **ascend_tree(False, stride=stride)})
    report = abi.check_static("mtp", True, sources=[str(tmp_path)])
    result = next(r for t in report.tiers for r in t.results
                  if r.check.id == "ascend.async_draft_stride")
    assert result.variant == variant
    if variant is None:
        assert not report.ok and result.status == "FAIL"
        assert any("_prepare_input_ids: no reference to num_spec_tokens" in m
                   for m in result.missing)
    else:
        assert report.ok, abi.render_text(report)
    # only adaptive gamma runs the K backport
    assert "ascend.async_draft_stride" not in statuses(
        abi.check_static("mtp", False, sources=[str(tmp_path)]))


def test_draft_mro_shadow_fails_backport(tmp_path: Path, no_installed: None) -> None:
    write(tmp_path, {**UPSTREAM, **ascend_tree(False, draft_shadow=True)})
    report = abi.check_static("draft", True, sources=[str(tmp_path)])
    assert not report.ok
    text = abi.render_text(report)
    assert "resolves to vllm.v1.spec_decode.draft_model.DraftModelProposer._propose" in text
    # EAGLE is unaffected by the draft model's MRO.
    assert abi.check_static("eagle", True, sources=[str(tmp_path)]).ok


def test_sdist_and_package_dir_sources(tmp_path: Path, no_installed: None) -> None:
    tree = write(tmp_path / "src-tree" / "vllm_ascend-1.0", ascend_tree(False))
    (tree / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: vllm-ascend\nVersion: 1.0\n")
    sdist = tmp_path / "vllm_ascend-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tree, arcname="vllm_ascend-1.0")
    up = write(tmp_path / "up", UPSTREAM)
    for src in (str(sdist), str(tree / "vllm_ascend")):
        report = abi.check_static("eagle", True, sources=[src, str(up)])
        assert report.ok, abi.render_text(report)
        host = report.host("vllm_ascend")
        assert host is not None and host.installed
        assert host.source == ("sdist" if src.endswith(".gz") else "source tree")
    assert abi.check_static("eagle", True, sources=[str(sdist)]).host(
        "vllm_ascend").version == "1.0"


@pytest.mark.slow
def test_wheel_source_is_read_and_the_runner_table_printed(
    tmp_path: Path, no_installed: None, capsys: pytest.CaptureFixture[str]
) -> None:
    import zipfile

    up = write(tmp_path / "up", UPSTREAM)
    wheel = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for f in sorted(up.rglob("*.py")):
            zf.write(f, str(f.relative_to(up)))
        zf.writestr("vllm-9.9.9.dist-info/METADATA", "Name: vllm\nVersion: 9.9.9\n")
    report = abi.check_static("eagle", True, sources=[str(wheel)])
    assert report.ok, abi.render_text(report)
    host = report.host("vllm")
    assert host is not None and host.source == "wheel" and host.version == "9.9.9"
    assert doctor.main(["--method", "eagle", "--adaptive", "--source", str(wheel)]) == 0
    out = capsys.readouterr().out
    assert "worker features by model runner" in out
    assert "v2: fails closed" in out and "relaxed acceptance" in out
    assert "predecessor switches" in out and "--eagle-uniform-state-kernel" in out
    broken = tmp_path / "not-a-wheel.whl"
    broken.write_text("plain text")
    assert doctor.main(["--source", str(broken)]) == 2


@pytest.mark.slow
def test_cli_exit_codes_and_json(
    tmp_path: Path, no_installed: None, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path / "good", {**UPSTREAM, **ascend_tree(False)})
    assert doctor.main(["--method", "eagle", "--adaptive", "--source", str(good)]) == 0
    out = capsys.readouterr().out
    assert "PASS ascend.k_channel (backport)" in out and "result: OK" in out

    bad = write(tmp_path / "bad", {**UPSTREAM, **ascend_tree(False, draft_shadow=True)})
    rc = doctor.main(["--method", "draft", "--adaptive", "--json", "--source", str(bad)])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1 and data["ok"] is False
    failed = [c for t in data["tiers"] for c in t["checks"] if c["status"] == "FAIL"]
    assert [c["id"] for c in failed] == ["ascend.k_channel"]
    assert any("DraftModelProposer._propose" in m for m in failed[0]["missing"])

    assert doctor.main(["--source", str(tmp_path / "nowhere")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_no_host_fails_closed(
    no_installed: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing installed and no --source: nothing was checked, so the doctor must not pass."""
    assert doctor.main(["--method", "mtp", "--adaptive"]) == doctor.EXIT_FAIL == 1
    captured = capsys.readouterr()
    assert "host vllm: not installed" in captured.out
    assert "host vllm_ascend: not installed" in captured.out
    assert "result: OK" not in captured.out
    assert "result: FAILED (no vLLM host found" in captured.out
    assert "no vLLM host found" in captured.err and "--source PATH" in captured.err
    assert "Traceback" not in captured.out + captured.err


def test_no_host_json_says_not_ok(
    no_installed: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert doctor.main(["--method", "eagle", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["host_found"] is False
    assert "no vLLM host found" in data["error"] and "--source" in data["error"]


def test_a_source_host_counts_as_found(
    tmp_path: Path, no_installed: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """With nothing installed, a host given with --source is checked as usual."""
    up = write(tmp_path / "up", UPSTREAM)
    assert doctor.main(["--method", "eagle", "--json", "--source", str(up)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["host_found"] is True and "error" not in data


@pytest.mark.parametrize("argv", [
    ["--method", "draft"],
    ["--method", "eagle", "--json"],
    ["--method", "eagle", "--adaptive"],
    ["--method", "mtp", "--json"],
    ["--method", "draft", "--json", "--adaptive"],
])
def test_the_predecessor_manual_commands_parse(argv: list[str]) -> None:
    """vllm-hust-vSpec 0.14's documented doctor invocations keep their meaning."""
    args = doctor.build_parser().parse_args(argv)
    assert args.method == argv[1]
    assert args.json is ("--json" in argv) and args.adaptive is ("--adaptive" in argv)
    assert not args.source and not args.source_only


SYSTEM_PYTHON = Path("/usr/bin/python3")


def _python_without_host() -> str | None:
    """A Python on this machine where neither vllm nor vllm_ascend can be found."""
    if not SYSTEM_PYTHON.is_file():
        return None
    probe = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import importlib.util as u, sys; sys.exit(any("
         "u.find_spec(n) for n in ('vllm', 'vllm_ascend')))"],
        capture_output=True, env={"PATH": os.environ.get("PATH", "")}, check=False,
    )
    return str(SYSTEM_PYTHON) if probe.returncode == 0 else None


def test_doctor_process_without_any_host_exits_nonzero(tmp_path: Path) -> None:
    """The real console entry, in a Python that has no vLLM at all (no monkeypatching)."""
    python = _python_without_host()
    if python is None:
        pytest.skip("no Python without vllm / vllm_ascend on this machine")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [python, "-m", "vllm_hust_vspec.cli.doctor", "--method", "mtp"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "result: OK" not in done.stdout
    assert "no vLLM host found" in done.stderr and "--source" in done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_method_is_rejected() -> None:
    with pytest.raises(ValueError, match="ngram"):
        abi.check_static("ngram", True, use_installed=False)
    with pytest.raises(SystemExit):
        doctor.main(["--method", "ngram"])


V2_TREE = {
    "vllm/config/vllm.py": """
        class VllmConfig:
            @property
            def use_v2_model_runner(self): ...
    """,
    "vllm/v1/worker/gpu/model_runner.py": """
        class GPUModelRunner:
            def execute_model(self, scheduler_output): ...
            def sample(self, hidden_states, input_batch, grammar_output): ...
            def take_draft_token_ids(self): ...
            def sample_tokens(self, grammar_output):
                return self.speculator.propose(num_speculative_tokens=self.k)
    """,
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py": """
        def rejection_sample(target_logits, draft_logits, draft_sampled, cu_num_logits, pos,
                             idx_mapping, expanded_idx_mapping, expanded_local_pos,
                             temperature, seed, num_speculative_steps,
                             synthetic_conditional_rates=None): ...
    """,
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler.py": """
        from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import rejection_sample
        class RejectionSampler:
            def _verify(self, logits):
                return rejection_sample(logits)
    """,
    "vllm/v1/worker/gpu/spec_decode/speculator.py": """
        class DraftModelSpeculator:
            def __init__(self):
                self.draft_tokens = None
            def compute_draft_logits(self, hidden_states, spec_step_idx): ...
            def sample_draft(self, hidden_states):
                return self.compute_draft_logits(hidden_states, 0)
    """,
    "vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py": """
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
        class StandaloneARSpeculator(DraftModelSpeculator):
            def _multi_step_decode(self):
                for step in range(1, self.num_speculative_steps): ...
            def propose(self, input_batch, dummy_run=False, num_speculative_tokens=None): ...
    """,
    "vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py": """
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
        class TargetDependentARSpeculator(DraftModelSpeculator):
            def propose(self, input_batch, dummy_run=False, num_speculative_tokens=None): ...
    """,
    "vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py": """
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
        class MultiModuleMTPSpeculator(DraftModelSpeculator):
            def propose(self, input_batch, dummy_run=False, num_speculative_tokens=None): ...
    """,
}


def test_model_runner_v2_checks_apply_only_where_v2_exists(
    tmp_path: Path, no_installed: None
) -> None:
    write(tmp_path / "v1", UPSTREAM)
    report = abi.check_static("draft", True, sources=[str(tmp_path / "v1")])
    assert report.ok
    results = {r.check.id: r for t in report.tiers for r in t.results}
    assert results["vllm.v2_speculators"].variant == (
        "not applicable: no vllm.config.vllm.VllmConfig.use_v2_model_runner")
    write(tmp_path / "v2", {**UPSTREAM, **V2_TREE})
    assert abi.check_static("draft", True, sources=[str(tmp_path / "v2")]).ok
    broken = dict(V2_TREE)
    broken["vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py"] = """
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
        class StandaloneARSpeculator(DraftModelSpeculator):
            def _multi_step_decode(self, steps): ...
            def propose(self, input_batch, dummy_run=False): ...
    """
    write(tmp_path / "v2b", {**UPSTREAM, **broken})
    report = abi.check_static("draft", True, sources=[str(tmp_path / "v2b")])
    assert statuses(report)["vllm.v2_speculators"] == "FAIL"
    text = " ".join(report.failures())
    assert "StandaloneARSpeculator.propose(num_speculative_tokens)" in text
    assert "no reference to num_speculative_steps" in text
