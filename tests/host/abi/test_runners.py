"""Each worker-side feature applies on the runner the engine builds, or is downgraded with a
warning, or stops the launch naming the feature and the runner (host/abi/runners.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm")

from vllm_hust_vspec.host.abi import runners  # noqa: E402
from vllm_hust_vspec.host.worker.v1.runner import _make_load_model_wrapper  # noqa: E402
from vllm_hust_vspec.settings import Settings  # noqa: E402

# Options realised by worker-side patches of the V1 runner, with a value that asks for them.
WORKER_OPTIONS: dict[str, Any] = {
    "adaptive_gamma0_mode": "sticky-spec",  # sticky without the fast path (V2: native)
    "confidence_stop": True,
    "eagle_draft_active_vocab_size": 100,
    "eagle_draft_lm_head_quant": "w8a8",
    "confidence_accept_margin": 0.2,
    "eagle_relaxed_accept_topk": 2,
    "diagnostics": {"eagle_draft_trace": True, "eagle_draft_io_trace_dir": "/tmp/io",
                    "eagle_target_hidden_trace_dir": "/tmp/hidden",
                    "eagle_target_argmax_trace_path": "/tmp/argmax.jsonl"},
    "eagle_target_active_vocab_ids": "/tmp/ids.json",
}
# Options Model Runner V2 honours through host/worker/v2/runner.py
# (tests/host/worker/v2/test_runner_v2.py
# runs
# those patches on V2's real classes).
NATIVE_ON_V2 = {"adaptive_gamma0_mode", "confidence_accept_margin", "eagle_relaxed_accept_topk",
                "eagle_draft_active_vocab_size", "eagle_draft_lm_head_quant",
                "confidence_stop"}


def config(v2: bool | None = False, dp: int = 1, draft_vocab: int = 10,
           target_vocab: int = 10) -> Any:
    cfg = SimpleNamespace(
        parallel_config=SimpleNamespace(data_parallel_size=dp),
        model_config=SimpleNamespace(get_vocab_size=lambda: target_vocab),
        speculative_config=SimpleNamespace(
            draft_model_config=SimpleNamespace(get_vocab_size=lambda: draft_vocab)),
    )
    if v2 is not None:
        cfg.use_v2_model_runner = v2
    return cfg


def test_the_runner_is_read_from_the_hosts_config() -> None:
    assert runners.runner_of(config(v2=True)) == runners.V2
    assert runners.runner_of(config(v2=False)) == runners.V1
    assert runners.runner_of(config(v2=None)) == runners.V1  # hosts before V2


def test_everything_applies_on_v1() -> None:
    s = Settings(method="eagle", confidence_accept_margin=0.2, eagle_draft_lm_head_quant="w8a8")
    result = runners.plan(s, runners.V1, config())
    assert result.settings == s and not result.warnings and not result.errors


@pytest.mark.parametrize("name", sorted(set(WORKER_OPTIONS) - NATIVE_ON_V2))
def test_no_worker_feature_is_silently_dropped_on_v2(name: str) -> None:
    s = Settings(method="eagle", **{name: WORKER_OPTIONS[name]})
    result = runners.plan(s, runners.V2)
    changed = result.settings != s
    assert result.errors or (result.warnings and changed), name


@pytest.mark.parametrize("name", sorted(NATIVE_ON_V2))
def test_what_v2_honours_natively_is_kept(name: str) -> None:
    for method in ("draft", "eagle"):
        s = Settings(method=method, **{"adaptive_gamma0_mode": "sticky-spec",
                                       "adaptive_startup": "calibration",
                                       name: WORKER_OPTIONS[name]})
        result = runners.plan(s, runners.V2, config(v2=True))
        assert result.settings == s and not result.errors and not result.warnings, method


def test_v2_keeps_sticky_and_refuses_what_it_cannot_honour() -> None:
    s = Settings(method="eagle", eagle_relaxed_accept_topk=2,
                 diagnostics={"eagle_draft_trace": True})
    result = runners.plan(s, runners.V2)
    assert result.settings.adaptive_gamma0_mode == "sticky-spec"  # no fast path on V2
    assert any("fast path" in w for w in result.warnings)
    assert not any("sticky gamma 0" in w for w in result.warnings)
    assert len(result.errors) == 1  # relaxed acceptance applies (host/worker/v2/acceptance.py)
    with pytest.raises(runners.RunnerFeatureError) as err:
        result.raise_errors()
    text = str(err.value)
    assert "Model Runner V2" in text and "relaxed acceptance" not in text
    assert "diagnostic traces" in text and "VLLM_USE_V2_MODEL_RUNNER=0" in text


def test_the_confidence_stop_on_v2_needs_eager_drafting_except_for_a_draft_model() -> None:
    stop = Settings(method="eagle", confidence_stop=True)
    graphs = config(v2=True)
    graphs.speculative_config.method = "eagle"
    graphs.compilation_config = SimpleNamespace(cudagraph_mode=SimpleNamespace(name="FULL"))
    graphs.model_config.enforce_eager = False
    assert any("draft CUDA graphs" in e for e in runners.plan(stop, runners.V2, graphs).errors)
    assert not runners.plan(stop, runners.V1, graphs).errors
    graphs.model_config.enforce_eager = True
    assert not runners.plan(stop, runners.V2, graphs).errors
    graphs.model_config.enforce_eager = False
    graphs.speculative_config.method = "draft_model"  # StandaloneAR captures no draft graph
    assert not runners.plan(stop, runners.V2, graphs).errors
    graphs.speculative_config.use_multi_module_mtp = lambda: True
    assert any("MultiModuleMTPSpeculator" in e
               for e in runners.plan(stop, runners.V2, graphs).errors)


def test_draft_model_gamma_applies_on_v2() -> None:
    result = runners.plan(Settings(method="draft", adaptive_gamma0_mode="sticky-spec",
                                   adaptive_startup="calibration"), runners.V2, config(v2=True))
    assert not result.errors and not result.warnings


@pytest.mark.parametrize("runner", [runners.V2, runners.ASCEND])
def test_the_startup_profile_is_turned_off_with_a_warning_off_the_v1_runner(runner: str) -> None:
    s = Settings(method="draft", adaptive_gamma0_mode="sticky-spec")
    assert s.startup_profile()  # on by default
    result = runners.plan(s, runner)
    assert not result.errors and not result.settings.startup_profile()
    assert result.settings.adaptive_startup == "calibration"
    assert any("start-up cost profile" in w for w in result.warnings)
    assert runners.plan(s, runners.V1).settings.startup_profile()


def test_multi_module_mtp_on_v2_warns_that_gamma_only_trims_verification() -> None:
    cfg = config(v2=True)
    cfg.speculative_config.use_multi_module_mtp = lambda: True
    s = Settings(method="mtp", adaptive_gamma0_mode="sticky-spec")
    result = runners.plan(s, runners.V2, cfg)
    assert not result.errors
    assert any("MultiModuleMTPSpeculator" in w for w in result.warnings)
    assert not runners.plan(s, runners.V1, cfg).warnings
    fixed = Settings(method="mtp", adaptive_speculation=False)
    assert not runners.plan(fixed, runners.V2, cfg).warnings


def test_draft_head_options_on_v2_refuse_the_drafters_that_bypass_them() -> None:
    head = Settings(method="mtp", eagle_draft_active_vocab_size=100,
                    adaptive_gamma0_mode="sticky-spec")
    cfg = config(v2=True)
    assert not runners.plan(head, runners.V2, cfg).errors
    cfg.speculative_config.use_multi_module_mtp = lambda: True
    assert any("MultiModuleMTPSpeculator" in e for e in runners.plan(head, runners.V2, cfg).errors)
    cfg = config(v2=True)
    cfg.speculative_config.use_local_argmax_reduction = True
    assert any("local-argmax" in e for e in runners.plan(head, runners.V2, cfg).errors)
    assert not runners.plan(head, runners.V1, cfg).errors


def test_vllms_adaptive_verification_excludes_adaptive_gamma_on_v2() -> None:
    cfg = config(v2=True)
    cfg.speculative_config.enable_adaptive_verification = True
    result = runners.plan(Settings(method="eagle"), runners.V2, cfg)
    assert any("adaptive verification" in e for e in result.errors)
    fixed = Settings(method="eagle", adaptive_speculation=False)
    assert not runners.plan(fixed, runners.V2, cfg).errors


def test_ascend_keeps_sticky_but_not_the_fast_path() -> None:
    result = runners.plan(Settings(method="eagle"), runners.ASCEND)
    assert result.settings.adaptive_gamma0_mode == "sticky-spec"  # sticky, no fast path
    assert any("NPUModelRunner" in w for w in result.warnings)


# The options NPUModelRunner's own draft path (_propose -> _run_merged_draft) never reaches.
NOT_ON_ASCEND = {"confidence_stop", "eagle_draft_active_vocab_size",
                 "eagle_draft_lm_head_quant", "diagnostics", "eagle_target_active_vocab_ids"}


@pytest.mark.parametrize("name", sorted(NOT_ON_ASCEND))
def test_draft_side_options_fail_closed_on_ascend(name: str) -> None:
    result = runners.plan(Settings(method="eagle", **{name: WORKER_OPTIONS[name]}),
                          runners.ASCEND)
    assert any("vLLM-Ascend" in e or "NPUModelRunner" in e for e in result.errors), name


def test_v2_as_an_environment_opt_in_is_seen_and_refused_where_vspec_cannot_drive_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_hust_vspec.host.abi import host_facts

    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    assert runners.runner_of(config(v2=None)) == runners.V2  # a host without the property
    monkeypatch.setattr(host_facts, "v2_runner_available", lambda: False)
    result = runners.plan(Settings(method="eagle"), runners.V2, config(v2=None))
    assert any("VLLM_USE_V2_MODEL_RUNNER" in e for e in result.errors)


def test_sticky_under_async_without_vllms_k_channel_keeps_the_first_draft_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_hust_vspec.host.abi import host_facts

    cfg = config()
    cfg.scheduler_config = SimpleNamespace(async_scheduling=True)
    assert runners.plan(Settings(method="eagle"), runners.V1, cfg).settings \
        .adaptive_gamma0_mode == "sticky-spec"  # vLLM 0.32 has the channel (no fast path)
    monkeypatch.setattr(host_facts, "host_has_k_channel", lambda: False)
    result = runners.plan(Settings(method="eagle"), runners.V1, cfg)
    assert result.settings.adaptive_gamma0_mode == "sync"
    assert any("K channel" in w for w in result.warnings)


def test_lockstep_data_parallel_agrees_on_v1_and_is_refused_elsewhere() -> None:
    v1 = runners.plan(Settings(method="eagle"), runners.V1, config(dp=2))
    assert v1.errors == ()
    # nothing may run (or skip) a drafter pass the other ranks do not
    assert v1.settings.adaptive_gamma0_mode == "sync"
    assert not v1.settings.zero_fast_path()
    assert not v1.settings.startup_profile()
    assert any("lockstep data parallel" in w for w in v1.warnings)
    for runner in (runners.V2, runners.ASCEND):
        result = runners.plan(Settings(method="eagle"), runner, config(dp=2))
        assert any("lockstep data parallel (size 2" in e for e in result.errors), runner
    fixed = Settings(method="eagle", adaptive_speculation=False)
    for runner in runners.RUNNERS:
        assert not any("data parallel" in e
                       for e in runners.plan(fixed, runner, config(dp=2)).errors)
    single = runners.plan(Settings(method="eagle"), runners.V1, config(dp=1))
    assert single.settings.adaptive_gamma0_mode == "sticky"


def test_padded_draft_vocabulary_is_refused_on_v2_only_without_its_logits() -> None:
    padded = config(draft_vocab=12, target_vocab=10)
    s = Settings(method="draft")
    assert runners.plan(s, runners.V1, padded).errors == ()
    assert runners.plan(s, runners.V2, padded).errors == ()  # the V2 guard masks the logits
    padded.speculative_config.use_local_argmax_reduction = True
    assert runners.plan(s, runners.V1, padded).errors == ()
    assert any("padded" in e and "use_local_argmax_reduction" in e
               for e in runners.plan(s, runners.V2, padded).errors)


def test_the_worker_stops_before_its_model_loads() -> None:
    loaded: list[bool] = []
    wrapped = _make_load_model_wrapper(lambda: Settings(
        method="eagle", diagnostics={"eagle_draft_trace": True}))(
        lambda self: loaded.append(True))
    with pytest.raises(runners.RunnerFeatureError, match="diagnostic traces"):
        wrapped(SimpleNamespace(vllm_config=config(v2=True)))
    assert loaded == []
    wrapped(SimpleNamespace(vllm_config=config(v2=False)))
    assert loaded == [True]


def test_table_rows_cover_every_runner() -> None:
    rows = runners.table_rows()
    assert len(rows) == len(runners.FEATURES)
    for _, cells in rows:
        assert set(cells) == set(runners.RUNNERS)
        assert cells[runners.V1] == "applies"


def test_relaxed_acceptance_and_vllms_fly_acceptance_exclude_each_other() -> None:
    cfg = config()
    cfg.speculative_config.fly_window_size = 4
    relaxed = Settings(method="eagle", eagle_relaxed_accept_topk=2)
    assert any("FLy" in e for e in runners.plan(relaxed, runners.V1, cfg).errors)
    assert not runners.plan(Settings(method="eagle"), runners.V1, cfg).errors


def test_async_scheduling_refuses_the_confidence_stop_and_downgrades_the_fast_path() -> None:
    cfg = config()
    cfg.scheduler_config = SimpleNamespace(async_scheduling=True)
    stop = Settings(method="eagle", confidence_stop=True)
    result = runners.plan(stop, runners.V1, cfg)
    assert any("async scheduling" in e and "confidence stop" in e for e in result.errors)
    plain = runners.plan(Settings(method="eagle"), runners.V1, cfg)
    assert not plain.errors and plain.settings.adaptive_gamma0_mode == "sticky-spec"
    assert any("fast path" in w for w in plain.warnings)
    cfg.scheduler_config.async_scheduling = False
    assert runners.plan(stop, runners.V1, cfg).errors == ()


@pytest.mark.parametrize("graph_mode", ["full-decode-only", "full-and-piecewise", "full"])
def test_upstream_v1_turns_every_launcher_full_mode_piecewise_under_adaptive_gamma(
    graph_mode: str,
) -> None:
    """On upstream vLLM the launcher's FULL modes are vLLM's own: under vSpec's declared dynamic
    schedule the V1 runner's rule (``_maybe_override_dynamic_sd_cudagraph_mode``, with vLLM's
    warning) makes each PIECEWISE, combined FULL (``full``) included; V2 and a fixed
    gamma keep the mode."""
    from vllm.config import CUDAGraphMode, VllmConfig

    from vllm_hust_vspec.launch.capture import CUDAGRAPH_MODE

    def resolved(dynamic: bool, v2: bool) -> str:
        cfg = SimpleNamespace(
            speculative_config=SimpleNamespace(
                uses_dynamic_speculative_decoding=lambda: dynamic),
            compilation_config=SimpleNamespace(
                cudagraph_mode=CUDAGraphMode[CUDAGRAPH_MODE[graph_mode]]),
            use_v2_model_runner=v2)
        VllmConfig._maybe_override_dynamic_sd_cudagraph_mode(cfg)  # type: ignore[arg-type]
        return str(cfg.compilation_config.cudagraph_mode.name)

    assert resolved(dynamic=True, v2=False) == "PIECEWISE"
    assert resolved(dynamic=True, v2=True) == CUDAGRAPH_MODE[graph_mode]
    assert resolved(dynamic=False, v2=False) == CUDAGRAPH_MODE[graph_mode]


@pytest.mark.parametrize("runner", [runners.V1, runners.V2, runners.ASCEND])
def test_layouts_fixed_by_k_at_start_up_refuse_adaptive_gamma(runner: str) -> None:
    """Tree drafting and parallel drafting are sized by the configured K: refused with
    adaptive gamma on every runner, kept with a fixed gamma."""
    adaptive, fixed = Settings(method="eagle"), Settings(method="eagle",
                                                         adaptive_speculation=False)
    tree = config(v2=runner == runners.V2)
    tree.speculative_config.tree_width, tree.speculative_config.tree_depth = 2, 2
    assert any("tree drafting" in e for e in runners.plan(adaptive, runner, tree).errors)
    assert not runners.plan(fixed, runner, tree).errors
    parallel = config(v2=runner == runners.V2)
    parallel.speculative_config.parallel_drafting = True
    assert any("parallel drafting" in e for e in runners.plan(adaptive, runner, parallel).errors)
    assert not runners.plan(fixed, runner, parallel).errors


def test_relaxed_acceptance_refuses_tree_verification() -> None:
    cfg = config()
    cfg.speculative_config.tree_width, cfg.speculative_config.tree_depth = 2, 2
    relaxed = Settings(method="eagle", adaptive_speculation=False, eagle_relaxed_accept_topk=2)
    errors = runners.plan(relaxed, runners.ASCEND, cfg).errors
    assert any("relaxed acceptance with tree drafting" in e for e in errors)


@pytest.mark.parametrize("field", ["prefill_context_parallel_size",
                                   "decode_context_parallel_size"])
def test_context_parallel_refuses_adaptive_gamma_on_ascend_only(field: str) -> None:
    cfg = config()
    setattr(cfg.parallel_config, field, 2)
    assert any("context parallel" in e
               for e in runners.plan(Settings(method="mtp"), runners.ASCEND, cfg).errors)
    assert not runners.plan(Settings(method="mtp"), runners.V1, cfg).errors
    fixed = Settings(method="mtp", adaptive_speculation=False)
    assert not runners.plan(fixed, runners.ASCEND, cfg).errors
